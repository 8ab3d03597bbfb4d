"""Adversarial real-model tests, fourth round: recurrent nets and hand-written backward
passes in the idioms of public NumPy course code (cs231n rnn_layers / layers / optim,
min-char-rnn, from-scratch CNNs), run eagerly and through ``jit`` on copies of the same
arguments.

Covers what rounds one to three do not: LSTM forward and its BPTT backward written by
hand (``reversed(range(T))`` accumulating ``dWx +=``, ``dprev_h``), GRU gates from
``np.split`` of one matmul, stacked bidirectional RNNs over lists of layer dicts with
``x[::-1]`` and reversed output lists, batch norm train/test with running stats kept in
the caller's dict over float32 and float64, greedy decoding feeding ``argmax`` into the
embedding lookup, word2vec negative sampling with repeated ids, Adam over dicts of params
with a step-decay learning-rate schedule and RMSProp fed NaN gradients, numerical
gradient loops that perturb ``x[ix]`` in place (eager, with a reason), temperature
sampling with a generator passed in (eager, with a reason), layer norm and max-pool
backward by hand with NaN/Inf and ties, im2col conv backward, dropout masks passed in,
gradient clipping whose branch flips every call (side exits, ``hot_exit=2``), and Tensor
gradients through a GRU and batch norm against finite differences; min-char-rnn's loss with
dicts of states keyed from -1 and ``np.clip(..., out=dparam)``, cs231n's temporal softmax
loss, beam search by ``argsort``, and early stopping after in-place updates.

Tests marked ``xfail(strict=True)`` are minimal reproductions of bugs found this way.
"""

import copy
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from real_model_checks import assert_same, compiled_some, no_internal_errors, rng_for, run_calls

import tracejit as tj

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-5)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# --- cs231n-style LSTM: gate slices of one matmul, BPTT backward by hand ---------------------
def lstm_forward(x, h0, Wx, Wh, b):
    N, T, D = x.shape
    H = h0.shape[1]
    h = np.zeros((N, T, H), dtype=x.dtype)
    prev_h, prev_c = h0, np.zeros_like(h0)
    caches = []
    for t in range(T):
        a = x[:, t, :] @ Wx + prev_h @ Wh + b
        i, f, o = sigmoid(a[:, :H]), sigmoid(a[:, H:2 * H]), sigmoid(a[:, 2 * H:3 * H])
        g = np.tanh(a[:, 3 * H:])
        next_c = f * prev_c + i * g
        next_h = o * np.tanh(next_c)
        caches.append((i, f, o, g, prev_c, next_c, prev_h, x[:, t, :]))
        h[:, t, :] = next_h
        prev_h, prev_c = next_h, next_c
    return h, caches


def lstm_backward(dh, caches, Wx, Wh):
    N, T, H = dh.shape
    dx = np.zeros((N, T, Wx.shape[0]), dtype=dh.dtype)
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros(4 * H, dtype=dh.dtype)
    dprev_h, dprev_c = np.zeros((N, H), dtype=dh.dtype), np.zeros((N, H), dtype=dh.dtype)
    for t in reversed(range(T)):
        i, f, o, g, prev_c, next_c, prev_h, xt = caches[t]
        dnext_h = dh[:, t, :] + dprev_h
        dnext_c = dprev_c + dnext_h * o * (1 - np.tanh(next_c) ** 2)
        da = np.hstack((dnext_c * g * i * (1 - i), dnext_c * prev_c * f * (1 - f),
                        dnext_h * np.tanh(next_c) * o * (1 - o), dnext_c * i * (1 - g ** 2)))
        dx[:, t, :] = da @ Wx.T
        dprev_h = da @ Wh.T
        dprev_c = dnext_c * f
        dWx += xt.T @ da
        dWh += prev_h.T @ da
        db += da.sum(axis=0)
    return dx, dprev_h, dWx, dWh, db


def lstm_forward_backward(x, h0, Wx, Wh, b, dh):
    h, caches = lstm_forward(x, h0, Wx, Wh, b)
    return h, lstm_backward(dh, caches, Wx, Wh)


def lstm_hidden_states(x, h0, Wx, Wh, b, dh):
    return lstm_forward(x, h0, Wx, Wh, b)[0]


def lstm_arguments(rng, n, t, d=3, hidden=4, dtype=np.float64):
    def r(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(dtype)
    return (r(n, t, d), r(n, hidden), r(d, 4 * hidden), r(hidden, 4 * hidden), r(4 * hidden),
            r(n, t, hidden))


def test_lstm_forward_and_bptt_backward_over_batches_and_lengths():
    rng = rng_for(40)
    f = run_calls(lstm_forward_backward, [lstm_arguments(rng, 2, 5), lstm_arguments(rng, 3, 7)],
                  **F64)
    compiled_some(f)
    no_internal_errors(f)


def test_lstm_bptt_with_dynamic_dims_and_a_long_captured_sequence():
    rng = rng_for(41)
    f = run_calls(lstm_forward_backward, [lstm_arguments(rng, 2, 5), lstm_arguments(rng, 5, 33),
                                          lstm_arguments(rng, 1, 3)], dynamic=True, **F64)
    no_internal_errors(f)


def test_float32_lstm_keeps_float32_hidden_states():
    rng = rng_for(42)
    f = run_calls(lstm_hidden_states, [lstm_arguments(rng, 2, 4, dtype=np.float32),
                                       lstm_arguments(rng, 4, 4, dtype=np.float32)], **F32)
    compiled_some(f)


# --- GRU from np.split of one matmul per input ------------------------------------------------
def gru_by_split(x, h, Wx, Wh, b):
    states = []
    for t in range(x.shape[0]):
        xr, xz, xn = np.split(x[t] @ Wx + b, 3, axis=1)
        hr, hz, hn = np.split(h @ Wh, 3, axis=1)
        r, z = sigmoid(xr + hr), sigmoid(xz + hz)
        n = np.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        states.append(h)
    return np.stack(states), h


def gru_arguments(rng, t, n, d=3, hidden=5, dtype=np.float64):
    def r(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(dtype)
    return (r(t, n, d), r(n, hidden), r(d, 3 * hidden), r(hidden, 3 * hidden), r(3 * hidden))


@pytest.mark.parametrize("dtype, tolerance, dynamic", [(np.float64, F64, "auto"),
                                                        (np.float32, F32, True)])
def test_gru_gates_by_split_over_lengths_and_batches(dtype, tolerance, dynamic):
    rng = rng_for(43)
    sets = [gru_arguments(rng, t, n, dtype=dtype) for t, n in ((4, 2), (6, 3), (40, 5))]
    f = run_calls(gru_by_split, sets, dynamic=dynamic, **tolerance)
    no_internal_errors(f)


# --- stacked bidirectional RNN over a list of layer dicts -------------------------------------
def stacked_bidirectional_rnn(x, layers):
    layer_in, finals = x, []
    for layer in layers:
        hf = np.zeros((layer_in.shape[1], layer["Whf"].shape[0]))
        hb = np.zeros_like(hf)
        forward, backward = [], []
        for t in range(layer_in.shape[0]):
            hf = np.tanh(layer_in[t] @ layer["Wxf"] + hf @ layer["Whf"])
            forward.append(hf)
        for xt in layer_in[::-1]:
            hb = np.tanh(xt @ layer["Wxb"] + hb @ layer["Whb"])
            backward.append(hb)
        layer_in = np.concatenate([np.stack(forward), np.stack(backward[::-1])], axis=-1)
        finals.append((hf, hb))
    return layer_in, finals


def birnn_arguments(rng, t, n, d=3, hidden=4, depth=2):
    layers = []
    for _ in range(depth):
        shapes = (("Wxf", (d, hidden)), ("Whf", (hidden, hidden)), ("Wxb", (d, hidden)),
                  ("Whb", (hidden, hidden)))
        layers.append({key: rng.standard_normal(shape) * 0.5 for key, shape in shapes})
        d = 2 * hidden
    return (rng.standard_normal((t, n, 3)), layers)


def test_stacked_bidirectional_rnn_with_reversed_inputs_and_outputs():
    rng = rng_for(44)
    f = run_calls(stacked_bidirectional_rnn, [birnn_arguments(rng, 5, 2),
                                              birnn_arguments(rng, 7, 3)])
    compiled_some(f)
    no_internal_errors(f)


# --- batch norm with running stats in the caller's dict ---------------------------------------
def batchnorm_forward(x, gamma, beta, bn_param):
    mode = bn_param["mode"]
    eps, momentum = bn_param.get("eps", 1e-5), bn_param.get("momentum", 0.9)
    D = x.shape[1]
    running_mean = bn_param.get("running_mean", np.zeros(D, dtype=x.dtype))
    running_var = bn_param.get("running_var", np.zeros(D, dtype=x.dtype))
    if mode == "train":
        mu, var = x.mean(axis=0), x.var(axis=0)
        out = gamma * (x - mu) / np.sqrt(var + eps) + beta
        running_mean = momentum * running_mean + (1 - momentum) * mu
        running_var = momentum * running_var + (1 - momentum) * var
    elif mode == "test":
        out = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta
    else:
        raise ValueError("Invalid forward batchnorm mode %s" % mode)
    bn_param["running_mean"] = running_mean
    bn_param["running_var"] = running_var
    return out


@pytest.mark.parametrize("dtype, tolerance", [(np.float64, F64), (np.float32, F32)])
def test_batchnorm_running_stats_across_train_then_test_calls(dtype, tolerance):
    rng = rng_for(45)
    f = tj.jit(batchnorm_forward, cache="memory")
    eager_param, jit_param = {"mode": "train"}, {"mode": "train"}
    gamma, beta = rng.standard_normal(3).astype(dtype), rng.standard_normal(3).astype(dtype)
    for mode, n in [("train", n) for n in (4, 6, 6, 9, 9, 4)] + [("test", 3), ("test", 5)]:
        eager_param["mode"] = jit_param["mode"] = mode
        x = (rng.standard_normal((n, 3)) * 3 + 1).astype(dtype)
        want = batchnorm_forward(x.copy(), gamma, beta, eager_param)
        assert_same(f(x.copy(), gamma, beta, jit_param), want, **tolerance)
        assert_same(jit_param, eager_param, where="bn_param", **tolerance)
    jit_param["mode"] = "bogus"
    with pytest.raises(ValueError):
        f(x, gamma, beta, jit_param)
    compiled_some(f)


# --- greedy decoding: argmax feeds the next embedding lookup ----------------------------------
def greedy_decode(h, W_embed, Wx, Wh, b, W_vocab, start, max_len):
    captions = np.full((h.shape[0], max_len), -1, dtype=np.int64)
    word = np.full(h.shape[0], start, dtype=np.int64)
    for t in range(max_len):
        h = np.tanh(W_embed[word] @ Wx + h @ Wh + b)
        word = np.argmax(h @ W_vocab, axis=1)
        captions[:, t] = word
    return captions, h


def decode_arguments(rng, n, max_len, vocab=7, d=3, hidden=4):
    normal = rng.standard_normal
    return (normal((n, hidden)), normal((vocab, d)), normal((d, hidden)), normal((hidden, hidden)),
            normal(hidden), normal((hidden, vocab)), 1, max_len)


def greedy_until_end_token(h, W_embed, Wxh, Whh, Why, seed_ix, n, end_ix):
    ixes, ix = [], seed_ix
    for _ in range(n):
        h = np.tanh(Wxh @ W_embed[ix] + Whh @ h)
        ix = int(np.argmax(Why @ h))
        if ix == end_ix:
            break
        ixes.append(ix)
    return ixes


def test_greedy_decoding_with_argmax_into_the_embedding_lookup():
    rng = rng_for(46)
    f = run_calls(greedy_decode, [decode_arguments(rng, 2, 6), decode_arguments(rng, 3, 6),
                                  decode_arguments(rng, 5, 6)], **F64)
    compiled_some(f)
    normal = rng.standard_normal
    run_calls(greedy_until_end_token,
              [(normal(5), normal((6, 3)), normal((5, 3)), normal((5, 5)), normal((6, 5)),
                0, 8, 2) for _ in range(4)], **F64)


# --- embeddings: np.add.at backward, word2vec negative sampling --------------------------------
def embedding_backward(dout, ids, vocab):
    dW = np.zeros((vocab, dout.shape[-1]), dtype=dout.dtype)
    np.add.at(dW, ids, dout)
    return dW


def word2vec_negative_sampling(W_in, W_out, center, context, negatives):
    v = W_in[center]
    positive = sigmoid(W_out[context] @ v)
    negative = sigmoid(-(W_out[negatives] @ v))
    loss = -np.log(positive) - np.sum(np.log(negative))
    grad_v = (positive - 1) * W_out[context] + ((1 - negative)[:, None] * W_out[negatives]).sum(0)
    grad_out = np.zeros_like(W_out)
    grad_out[context] += (positive - 1) * v
    for k, n in enumerate(negatives):
        grad_out[n] += (1 - negative[k]) * v
    return loss, grad_v, grad_out


def test_embedding_backward_and_negative_sampling_with_repeated_ids():
    rng = rng_for(47)
    normal = rng.standard_normal
    run_calls(embedding_backward, [(normal((2, 3, 4)), rng.integers(0, 5, (2, 3)), 5),
                                   (normal((3, 4, 4)), np.zeros((3, 4), np.int64), 5),
                                   (normal((3, 4, 4)).astype(np.float32),
                                    rng.integers(0, 9, (3, 4)), 9)], rtol=1e-5, atol=1e-6)
    f = run_calls(word2vec_negative_sampling,
                  [(normal((6, 3)), normal((6, 3)), 1, 2, np.array([3, 3, 0])),
                   (normal((6, 3)), normal((6, 3)), 4, 4, np.array([4, 1, 1])),
                   (normal((6, 3)), normal((6, 3)), 0, 5, np.array([5, 2, 3, 5]))], **F64)
    compiled_some(f)


# --- optimizers over dicts of params, a step-decay schedule with Python ints -----------------
def adam_over_params(params, grads, config, decay_every):
    beta1, beta2 = config.get("beta1", 0.9), config.get("beta2", 0.999)
    config["t"] = config.get("t", 0) + 1
    t = config["t"]
    lr = config["learning_rate"] * (0.5 ** (t // decay_every))
    for k in params:
        m = config.setdefault("m_" + k, np.zeros_like(params[k]))
        v = config.setdefault("v_" + k, np.zeros_like(params[k]))
        m = beta1 * m + (1 - beta1) * grads[k]
        v = beta2 * v + (1 - beta2) * grads[k] ** 2
        params[k] -= lr * (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + 1e-8)
        config["m_" + k], config["v_" + k] = m, v
    config["lr"] = lr
    return lr


def rmsprop(w, dw, config):
    config.setdefault("decay_rate", 0.99)
    config.setdefault("cache", np.zeros_like(w))
    config["cache"] = config["decay_rate"] * config["cache"] + (1 - config["decay_rate"]) * dw * dw
    return w - config["learning_rate"] * dw / (np.sqrt(config["cache"]) + 1e-8), config


@pytest.mark.parametrize("dtype, tolerance", [(np.float64, F64), (np.float32, F32)])
def test_adam_with_lr_schedule_and_rmsprop_through_nan_gradients(dtype, tolerance):
    rng = rng_for(48)
    adam, rms = tj.jit(adam_over_params, cache="memory"), tj.jit(rmsprop, cache="memory")
    eager_params = {"W": rng.standard_normal((3, 2)).astype(dtype), "b": np.zeros(2, dtype)}
    jit_params = copy.deepcopy(eager_params)
    eager_config, jit_config = {"learning_rate": 1e-2}, {"learning_rate": 1e-2}
    eager_rms, jit_rms = {"learning_rate": 1e-2}, {"learning_rate": 1e-2}
    eager_w, jit_w = eager_params["W"].copy(), eager_params["W"].copy()
    for step in range(9):
        grads = {"W": rng.standard_normal((3, 2)).astype(dtype),
                 "b": rng.standard_normal(2).astype(dtype)}
        if step == 4:
            grads["W"][0, 0] = np.nan
        with np.errstate(all="ignore"):
            want = adam_over_params(eager_params, grads, eager_config, 3)
            got = adam(jit_params, copy.deepcopy(grads), jit_config, 3)
            eager_w, eager_rms = rmsprop(eager_w, grads["W"], eager_rms)
            jit_w, jit_rms = rms(jit_w, grads["W"].copy(), jit_rms)
        assert_same(got, want, **tolerance)
        assert_same(jit_params, eager_params, where="params", **tolerance)
        assert_same(jit_config, eager_config, where="config", **tolerance)
        assert_same(jit_w, eager_w, **tolerance)
        assert_same(jit_rms, eager_rms, where="rmsprop config", **tolerance)
    compiled_some(adam)
    compiled_some(rms)


# --- what must run eagerly: samplers with a generator, numerical-gradient loops -------------
def sample_with_temperature(h, Wy, temperature, generator):
    logits = h @ Wy / temperature
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return generator.choice(len(p), p=p), p


def sample_legacy_global(h, Wy, temperature):
    logits = h @ Wy / temperature
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return np.random.choice(range(len(p)), p=p.ravel())


def test_temperature_sampling_with_generators_runs_eagerly_and_equal():
    rng = rng_for(49)
    sample, legacy = (tj.jit(sample_with_temperature, cache="memory"),
                      tj.jit(sample_legacy_global, cache="memory"))
    for temperature in (1.0, 0.5, 0.5, 2.0):
        h, Wy = rng.standard_normal(3), rng.standard_normal((3, 5))
        assert_same(sample(h, Wy, temperature, np.random.default_rng(5)),
                    sample_with_temperature(h, Wy, temperature, np.random.default_rng(5)))
        np.random.seed(3)
        want = sample_legacy_global(h, Wy, temperature)
        np.random.seed(3)
        assert_same(legacy(h, Wy, temperature), want)
    for f in (sample, legacy):
        assert "choice" in f.explain(), f.explain()
        no_internal_errors(f)


def numerical_gradient_by_nditer(x, df, h=1e-5):
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"], op_flags=["readwrite"])
    while not it.finished:
        ix = it.multi_index
        oldval = x[ix]
        x[ix] = oldval + h
        pos = np.tanh(2 * x).copy()
        x[ix] = oldval - h
        neg = np.tanh(2 * x).copy()
        x[ix] = oldval
        grad[ix] = np.sum((pos - neg) * df) / (2 * h)
        it.iternext()
    return grad


def numerical_gradient_by_ndindex(x, W):
    grad = np.zeros_like(x)
    for ix in np.ndindex(*x.shape):
        old = x[ix]
        x[ix] = old + 1e-5
        plus = np.sum(np.tanh(x @ W))
        x[ix] = old - 1e-5
        minus = np.sum(np.tanh(x @ W))
        x[ix] = old
        grad[ix] = (plus - minus) / 2e-5
    return grad


def test_numerical_gradient_loops_that_perturb_the_argument_in_place():
    rng = rng_for(50)
    normal = rng.standard_normal
    for model, sets in ((numerical_gradient_by_nditer, [(normal((2, 3)), normal((2, 3))),
                                                        (normal((3, 3)), normal((3, 3)))]),
                        (numerical_gradient_by_ndindex, [(normal((2, 3)), normal((3, 2))),
                                                         (normal((2, 3)), normal((3, 2)))])):
        f = run_calls(model, sets, rtol=1e-6, atol=1e-8)
        no_internal_errors(f)


# --- layer norm and max-pool backward by hand, im2col conv, dropout ---------------------------
def layernorm_forward_backward(x, gamma, beta, dout, eps):
    mu = x.mean(axis=1, keepdims=True)
    std = np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + eps)
    xhat = (x - mu) / std
    D = x.shape[1]
    dxhat = dout * gamma
    dx = (1.0 / D) / std * (D * dxhat - dxhat.sum(axis=1, keepdims=True)
                            - xhat * (dxhat * xhat).sum(axis=1, keepdims=True))
    return gamma * xhat + beta, dx, (dout * xhat).sum(axis=0), dout.sum(axis=0)


def layernorm_arguments(rng, n, d, dtype=np.float64):
    arrays = (rng.standard_normal((n, d)) * 2 + 3, rng.standard_normal(d),
              rng.standard_normal(d), rng.standard_normal((n, d)))
    return tuple(a.astype(dtype) for a in arrays) + (1e-5,)


def test_layernorm_backward_over_sizes_dtypes_and_nonfinite_rows():
    rng = rng_for(51)
    sets = [layernorm_arguments(rng, n, d) for n, d in ((4, 5), (6, 5), (9, 7))]
    sets[1][0][1] = np.nan
    sets[1][0][2, 3] = np.inf
    compiled_some(run_calls(layernorm_forward_backward, sets, **F64))
    sets = [layernorm_arguments(rng, n, 7, np.float32) for n in (4, 6, 33)]
    no_internal_errors(run_calls(layernorm_forward_backward, sets, dynamic=True, **F32))


def maxpool_forward_backward(x, dout, ph, pw, s):
    N, C, H, W = x.shape
    Ho, Wo = 1 + (H - ph) // s, 1 + (W - pw) // s
    out, dx = np.zeros((N, C, Ho, Wo), dtype=x.dtype), np.zeros_like(x)
    for i in range(Ho):
        for j in range(Wo):
            window = x[:, :, i * s:i * s + ph, j * s:j * s + pw]
            m = window.max(axis=(2, 3))
            out[:, :, i, j] = m
            mask = window == m[:, :, None, None]
            dx[:, :, i * s:i * s + ph, j * s:j * s + pw] += (
                mask * dout[:, :, i, j][:, :, None, None])
    return out, dx


def maxpool_arguments(rng, n, c, size, pool=2, stride=2, ties=False):
    x = rng.standard_normal((n, c, size, size))
    if ties:
        x = np.round(x)
    out = 1 + (size - pool) // stride
    return (x, rng.standard_normal((n, c, out, out)), pool, pool, stride)


def test_maxpool_backward_with_masks_ties_and_overlapping_windows():
    rng = rng_for(52)
    f = run_calls(maxpool_forward_backward,
                  [maxpool_arguments(rng, 2, 3, 4), maxpool_arguments(rng, 1, 2, 6),
                   maxpool_arguments(rng, 2, 3, 4, ties=True),
                   maxpool_arguments(rng, 2, 2, 4, pool=3, stride=1)], **F64)
    compiled_some(f)


def im2col_conv_forward_and_weight_grads(x, w, b, dout, stride, pad):
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    Ho, Wo = (H + 2 * pad - HH) // stride + 1, (W + 2 * pad - WW) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    cols = np.zeros((C * HH * WW, N * Ho * Wo), dtype=x.dtype)
    for i in range(Ho):
        for j in range(Wo):
            patch = xp[:, :, i * stride:i * stride + HH, j * stride:j * stride + WW]
            cols[:, (i * Wo + j) * N:(i * Wo + j + 1) * N] = patch.reshape(N, -1).T
    out = (w.reshape(F, -1) @ cols + b[:, None]).reshape(F, Ho, Wo, N).transpose(3, 0, 1, 2)
    dout_rows = dout.transpose(1, 2, 3, 0).reshape(F, -1)
    dcols = w.reshape(F, -1).T @ dout_rows
    return out, (dout_rows @ cols.T).reshape(w.shape), dout.sum(axis=(0, 2, 3)), dcols


def conv_arguments(rng, n, c, size, filters=2, k=3, stride=1, pad=1, dtype=np.float64):
    out = (size + 2 * pad - k) // stride + 1
    arrays = (rng.standard_normal((n, c, size, size)), rng.standard_normal((filters, c, k, k)),
              rng.standard_normal(filters), rng.standard_normal((n, filters, out, out)))
    return tuple(a.astype(dtype) for a in arrays) + (stride, pad)


def test_im2col_conv_forward_and_weight_gradients_over_strides_and_pads():
    rng = rng_for(53)
    f = run_calls(im2col_conv_forward_and_weight_grads,
                  [conv_arguments(rng, 2, 2, 4), conv_arguments(rng, 1, 2, 5),
                   conv_arguments(rng, 2, 1, 5, stride=2), conv_arguments(rng, 2, 1, 4, pad=0)],
                  **F64)
    compiled_some(f)


def dropout_forward_backward(x, uniforms, p, mode, dout):
    if mode == "train":
        mask = (uniforms < p) / p
        return x * mask, dout * mask
    return x, dout


def test_dropout_with_uniforms_passed_in_over_modes_and_dtypes():
    rng = rng_for(54)
    normal = rng.standard_normal
    sets = [(normal((3, 4)), rng.random((3, 4)), 0.5, "train", normal((3, 4))),
            (normal((5, 4)), rng.random((5, 4)), 0.8, "train", normal((5, 4))),
            (normal((5, 4)), rng.random((5, 4)), 0.8, "test", normal((5, 4))),
            tuple(a.astype(np.float32) if isinstance(a, np.ndarray) else a
                  for a in (normal((5, 4)), rng.random((5, 4)), 0.3, "train", normal((5, 4))))]
    run_calls(dropout_forward_backward, sets, rtol=1e-6, atol=1e-7)


# --- gradient clipping whose branch flips call to call, NaN and Inf gradients ----------------
def clip_then_step(w, g, max_norm):
    norm = np.sqrt((g ** 2).sum())
    if norm > max_norm:
        g = g * (max_norm / norm)
    if np.isnan(g).any():
        return w, norm
    return w - 0.1 * g, norm


@pytest.mark.parametrize("dtype, tolerance", [(np.float64, F64), (np.float32, F32)])
def test_gradient_clipping_branches_flip_with_hot_exits_and_nonfinite(dtype, tolerance):
    rng = rng_for(55)
    sets = []
    for k in range(8):
        g = rng.standard_normal((3, 2)) * (10 if k % 2 else 0.1)
        if k in (5, 6):
            g[1, 1] = np.nan
        if k == 7:
            g[0, 0] = np.inf
        sets.append((rng.standard_normal((3, 2)).astype(dtype), g.astype(dtype), 1.0))
    f = run_calls(clip_then_step, sets, hot_exit=2, **tolerance)
    compiled_some(f)
    no_internal_errors(f)


# --- Tensor gradients through a GRU and batch norm vs finite differences ---------------------
def gru_loss(x, h, Wx, Wh, b):
    H = h.shape[1]
    for t in range(x.shape[0]):
        z, zh = x[t] @ Wx + b, h @ Wh
        r, u = sigmoid(z[:, :H] + zh[:, :H]), sigmoid(z[:, H:2 * H] + zh[:, H:2 * H])
        h = (1 - u) * np.tanh(z[:, 2 * H:] + r * zh[:, 2 * H:]) + u * h
    return (h ** 2).sum()


def batchnorm_relu_loss(x, gamma, beta):
    y = gamma * (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + 1e-5) + beta
    return (np.maximum(y, 0) ** 2).sum()


def numeric_gradient(loss, arguments, position, eps=1e-6):
    grad = np.zeros_like(arguments[position])
    for index in np.ndindex(grad.shape):
        up, down = [a.copy() for a in arguments], [a.copy() for a in arguments]
        up[position][index] += eps
        down[position][index] -= eps
        grad[index] = (float(loss(*up)) - float(loss(*down))) / (2 * eps)
    return grad


def gradient_cases():
    rng = rng_for(56)
    normal = rng.standard_normal
    gru = [tuple(normal(shape) * 0.5 for shape in ((t, 2, 3), (2, 4), (3, 12), (4, 12), (12,)))
           for t in (3, 5)]
    bn = [(normal((n, 3)), normal(3), normal(3)) for n in (4, 7)]
    return [(gru_loss, gru), (batchnorm_relu_loss, bn)]


@pytest.mark.parametrize("loss, argument_sets", gradient_cases(),
                         ids=lambda value: getattr(value, "__name__", None))
def test_tensor_backward_through_recurrent_and_normalizing_losses(loss, argument_sets):
    f = tj.jit(loss, cache="memory")
    for arguments in argument_sets:
        for _ in range(2):
            inputs = [tj.tensor(a.copy(), requires_grad=True) for a in arguments]
            out = f(*inputs)
            np.testing.assert_allclose(out.data, loss(*arguments), rtol=1e-8)
            out.backward()
            for position in range(len(arguments)):
                np.testing.assert_allclose(inputs[position].grad.data,
                                           numeric_gradient(loss, arguments, position),
                                           rtol=1e-5, atol=1e-6, err_msg=f"argument {position}")
    compiled_some(f)


# --- bugs found this round ------------------------------------------------------------------
OVERLAP_ADD = textwrap.dedent("""
    import numpy as np, tracejit as tj

    def overlap_add(x, n):
        y = np.zeros(n + 2)
        for i in range(n):
            y[i:i + 3] += x
        return y

    f = tj.jit(overlap_add, cache="memory")
    np.testing.assert_allclose(f(np.ones(3), 14), overlap_add(np.ones(3), 14))
""")


def test_overlap_add_of_slices_compiles_in_time(tmp_path):
    script = tmp_path / "overlap_add.py"  # a source file: python -c traces without the rewrite
    script.write_text(OVERLAP_ADD)
    # The whole script: interpreter start and import (1.3 s idle) and a 0.35 s compile
    # (it was minutes); 15 s leaves room for a loaded machine (4 s timed out under -n 2).
    try:
        done = subprocess.run([sys.executable, str(script)], timeout=15, capture_output=True)
    except subprocess.TimeoutExpired:
        pytest.fail("compiling 14 overlapping slice += did not finish in 15 s")
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def assign_to_nearest_then_count(X, C):
    labels = (X @ C.T).argmin(axis=1)
    if (labels == 0).sum() > 0:
        return labels
    return labels + 1


def test_kmeans_assignment_count_guard_compiles():
    rng = rng_for(57)
    X = rng.standard_normal((10, 2))
    f = run_calls(assign_to_nearest_then_count, [(X, X[:3].copy())], **F64)
    no_internal_errors(f)


def fill_columns(h, length):
    out = np.zeros((h.shape[0], length))
    for t in range(length):
        out[:, t] = h
    return out


def test_a_length_argument_turning_dynamic_after_a_symbolic_batch_compiles():
    f = run_calls(fill_columns, [(np.ones(2), 6), (np.ones(3), 6), (np.ones(3), 9)], **F64)
    no_internal_errors(f)


# --- more passing idioms: min-char-rnn, temporal softmax, beam search, early stopping -------
def min_char_rnn_loss(inputs, targets, hprev, Wxh, Whh, Why, bh, by):
    vocab_size = Wxh.shape[1]
    xs, hs, ps = {}, {}, {}
    hs[-1] = np.copy(hprev)
    loss = 0
    for t in range(len(inputs)):
        xs[t] = np.zeros((vocab_size, 1))
        xs[t][inputs[t]] = 1
        hs[t] = np.tanh(np.dot(Wxh, xs[t]) + np.dot(Whh, hs[t - 1]) + bh)
        ys = np.dot(Why, hs[t]) + by
        ps[t] = np.exp(ys) / np.sum(np.exp(ys))
        loss += -np.log(ps[t][targets[t], 0])
    dWxh, dWhh, dWhy = np.zeros_like(Wxh), np.zeros_like(Whh), np.zeros_like(Why)
    dbh, dby = np.zeros_like(bh), np.zeros_like(by)
    dhnext = np.zeros_like(hs[0])
    for t in reversed(range(len(inputs))):
        dy = np.copy(ps[t])
        dy[targets[t]] -= 1
        dWhy += np.dot(dy, hs[t].T)
        dby += dy
        dhraw = (1 - hs[t] * hs[t]) * (np.dot(Why.T, dy) + dhnext)
        dbh += dhraw
        dWxh += np.dot(dhraw, xs[t].T)
        dWhh += np.dot(dhraw, hs[t - 1].T)
        dhnext = np.dot(Whh.T, dhraw)
    for dparam in [dWxh, dWhh, dWhy, dbh, dby]:
        np.clip(dparam, -5, 5, out=dparam)
    return loss, dWxh, dWhh, dWhy, dbh, dby, hs[len(inputs) - 1]


def min_char_rnn_arguments(rng, length, ids_as_array, vocab=5, hidden=6):
    data = rng.integers(0, vocab, length + 1)
    inputs, targets = (data[:-1], data[1:]) if ids_as_array else (
        [int(i) for i in data[:-1]], [int(i) for i in data[1:]])
    normal = rng.standard_normal
    return (inputs, targets, normal((hidden, 1)) * 0.1, normal((hidden, vocab)) * 0.3,
            normal((hidden, hidden)) * 0.3, normal((vocab, hidden)) * 0.3,
            np.zeros((hidden, 1)), np.zeros((vocab, 1)))


@pytest.mark.parametrize("ids_as_array", [False, True])
def test_min_char_rnn_loss_with_dict_states_and_clip_out(ids_as_array):
    rng = rng_for(58)
    run_calls(min_char_rnn_loss, [min_char_rnn_arguments(rng, t, ids_as_array)
                                  for t in (4, 6, 12)], **F64)


def temporal_softmax_loss(x, y, mask):
    N, T, V = x.shape
    x_flat, y_flat, mask_flat = x.reshape(N * T, V), y.reshape(N * T), mask.reshape(N * T)
    probs = np.exp(x_flat - np.max(x_flat, axis=1, keepdims=True))
    probs /= np.sum(probs, axis=1, keepdims=True)
    loss = -np.sum(mask_flat * np.log(probs[np.arange(N * T), y_flat])) / N
    dx_flat = probs.copy()
    dx_flat[np.arange(N * T), y_flat] -= 1
    dx_flat /= N
    dx_flat *= mask_flat[:, None]
    return loss, dx_flat.reshape(N, T, V)


def beam_search(h0, E, W, U, beam, steps):
    V = E.shape[0]
    beams, scores, h = np.zeros((1, 0), dtype=np.int64), np.zeros(1), h0[None, :]
    for _ in range(steps):
        logits = np.tanh(h @ W) @ U
        total = (scores[:, None] + logits - np.log(np.exp(logits).sum(axis=1, keepdims=True)))
        total = total.ravel()
        top = np.argsort(-total, kind="stable")[:beam]
        source, token = top // V, top % V
        beams = np.concatenate([beams[source], token[:, None]], axis=1)
        scores = total[top]
        h = np.tanh(h[source] @ W) + E[token]
    return beams, scores


def test_temporal_softmax_loss_with_masks_and_beam_search_by_argsort():
    rng = rng_for(59)

    def masked(n, t, dtype, vocab=6):
        return (rng.standard_normal((n, t, vocab)).astype(dtype),
                rng.integers(0, vocab, (n, t)), rng.random((n, t)) > 0.3)
    compiled_some(run_calls(temporal_softmax_loss, [masked(2, 3, np.float64),
                                                    masked(4, 5, np.float64)], **F64))
    run_calls(temporal_softmax_loss, [masked(2, 3, np.float32), masked(3, 7, np.float32)],
              dynamic=True, **F32)
    normal = rng.standard_normal
    beams = [(normal(4), normal((5, 4)), normal((4, 4)), normal((4, 5)), beam, steps)
             for beam, steps in ((3, 3), (2, 4))]
    compiled_some(run_calls(beam_search, beams, **F64))


def train_until_tolerance(w, X, y, config, max_epochs):
    for epoch in range(max_epochs):  # noqa: B007 - returned after the loop
        w -= config["lr"] * (X.T @ (X @ w - y) / len(y))
        config["t"] = config.get("t", 0) + 1
        loss = ((X @ w - y) ** 2).mean()
        if loss < config["tol"]:
            break
    return loss, epoch


def test_early_stopping_with_in_place_updates_before_the_stop_test():
    rng = rng_for(60)

    def problem(tol):
        X = rng.standard_normal((8, 3))
        return (np.zeros(3), X, X @ rng.standard_normal(3), {"lr": 0.5, "tol": tol}, 6)
    f = run_calls(train_until_tolerance, [problem(tol) for tol in (1e-3, 10.0, 0.5, 0.5, 0.05)],
                  hot_exit=2, **F64)
    no_internal_errors(f)


# --- Python int arguments turned run-time inputs: Python's ints do not wrap ----------------
def scale_by_power_of_two(w, n):
    return w * 2 ** n


def power_of_two_as_a_python_int(w, n):
    k = 2 ** n
    return w / k, k


def scale_by_cube(w, n):
    return w * (n * n * n)


@pytest.mark.parametrize("model, big", [(scale_by_power_of_two, 64),
                                        (power_of_two_as_a_python_int, 63),
                                        (scale_by_cube, 3_000_000)],
                         ids=lambda value: getattr(value, "__name__", None))
def test_python_int_arithmetic_on_a_run_time_int_does_not_wrap(model, big):
    run_calls(model, [(np.ones(2), 3), (np.ones(2), 5), (np.ones(2), big)], repeats=1, **F64)


def step_decay(w, epoch):
    return w * 0.1 * 2 ** -(epoch // 3)


def rounded_warmup(w, epoch):
    return w * round(epoch / 4)


@pytest.mark.parametrize("model", [step_decay, rounded_warmup],
                         ids=lambda value: getattr(value, "__name__", None))
def test_lr_schedules_on_a_run_time_epoch_trace(model):
    f = run_calls(model, [(np.ones(2), epoch) for epoch in (3, 5, 7, 9)], repeats=1, **F64)
    no_internal_errors(f)
