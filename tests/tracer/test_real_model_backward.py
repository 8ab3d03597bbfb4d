"""Hand-written backward passes and training code, eager NumPy vs ``jit``.

The models are written for this file in the idioms of course assignments and classic
gists: ``affine_backward``, ``relu_backward`` (``dx[x <= 0] = 0``), batch norm's backward
(staged and simplified), dropout with its mask passed in, naive max-pool backward (a
mask of the window's max), word embeddings, temporal affine layers and a masked
temporal softmax loss, RNN and LSTM steps and their backward over ``reversed(range(T))``
with a carried ``dh``, min-char-rnn's ``lossFun`` with its reversed loop and
``np.clip(dparam, -5, 5, out=dparam)`` over a list of gradients, Adagrad in place, a
two-layer net's ``loss(X, y)`` returning ``(loss, grads)``, a training loop inside the
function, naive convolution backward, im2col, and k-nearest-neighbour distances; and
``jit(value_and_grad(forward))`` against the hand-written backward. Every call is
compared with plain NumPy on copies of the same arguments: values, shapes, dtypes,
Python types and the arguments afterwards (in-place updates).
Compile counts are checked where one bucket should serve several sizes.

Sizes are chosen so that no two dims are equal on a traced call: with ``dynamic=True``
equal dims share one symbol (``x[3, 3]`` traces as ``x[s0, s0]``), a variant of its own.

Tests marked ``xfail(strict=True)`` are minimal reproductions of bugs found this way;
each flips to a failure (so the mark must go) once the bug is fixed.
"""

import copy

import numpy as np
import pytest
from real_model_checks import assert_same, check_calls, compiles, jitted

import tracejit as tj


def no_eager_calls(f):
    return f.stats()["eager_calls"] == {}


def normal(rng, *shape, dtype=np.float64, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


F32 = dict(rtol=1e-5, atol=1e-6)
# One bucket [2, 64] for every dynamic dim: lengths 2..64 share one compile.
LOOP_OPTIONS = dict(dynamic=True, buckets=[64])


# --- affine, relu, dropout -----------------------------------------------------------------
def affine_forward(x, w, b):
    out = x.reshape(x.shape[0], -1).dot(w) + b
    return out, (x, w, b)


def affine_backward(dout, cache):
    x, w, b = cache
    dx = dout.dot(w.T).reshape(x.shape)
    dw = x.reshape(x.shape[0], -1).T.dot(dout)
    db = np.sum(dout, axis=0)
    return dx, dw, db


def relu_forward(x):
    return np.maximum(0, x), x


def relu_backward(dout, cache):
    x = cache
    dx = dout.copy()
    dx[x <= 0] = 0
    return dx


def affine_relu_backward(dout, x, w, b):
    """The sandwich layer: forward for the caches, then backward through both."""
    a, fc_cache = affine_forward(x, w, b)
    _, relu_cache = relu_forward(a)
    return affine_backward(relu_backward(dout, relu_cache), fc_cache)


def test_affine_relu_backward_over_batch_sizes():
    rng = np.random.default_rng(0)
    w, b = normal(rng, 12, 5), normal(rng, 5)
    batches = (6, 7, 8, 1)
    f = check_calls(affine_relu_backward,
                    [(normal(rng, n, 5), normal(rng, n, 3, 4), w, b) for n in batches],
                    dynamic=True)
    assert compiles(f) == 2, f.stats()  # (4, 8] and 1
    assert no_eager_calls(f), f.stats()


def test_affine_relu_backward_empty_batch_raises_like_numpy():
    # x.reshape(0, -1) is ambiguous for a 0-size array: NumPy raises, so does jit.
    rng = np.random.default_rng(0)
    arguments = (normal(rng, 0, 5), normal(rng, 0, 3, 4), normal(rng, 12, 5), normal(rng, 5))
    with pytest.raises(ValueError):
        affine_relu_backward(*copy.deepcopy(arguments))
    with pytest.raises(ValueError):
        jitted(affine_relu_backward, dynamic=True)(*arguments)


@pytest.mark.parametrize("layout", ["float64", "float32", "transposed", "sliced"])
def test_relu_backward_mask_write(layout):
    rng = np.random.default_rng(1)

    def make(n):
        if layout == "transposed":
            return normal(rng, 3, n).T, normal(rng, 3, n).T
        if layout == "sliced":
            return normal(rng, 2 * n, 6)[::2, 1::2], normal(rng, 2 * n, 6)[1::2, ::2]
        dtype = np.float32 if layout == "float32" else np.float64
        return normal(rng, n, 3, dtype=dtype), normal(rng, n, 3, dtype=dtype)

    tolerance = F32 if layout == "float32" else {}
    f = check_calls(relu_backward, [make(n) for n in (5, 6, 7, 1, 0)], dynamic=True,
                    **tolerance)
    assert compiles(f) == 3, f.stats()  # (4, 8], 1 and 0
    assert no_eager_calls(f), f.stats()


def test_relu_backward_with_nan_and_inf_inputs():
    rng = np.random.default_rng(2)
    x = normal(rng, 6, 5)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    dout = normal(rng, 6, 5)
    dout[3, 3] = np.nan
    f = check_calls(relu_backward, [(dout, x), (dout, -x), (dout, x)])
    assert f.stats()["compiled_calls"] == 2, f.stats()


def dropout_backward(dout, x, dropout_param, mask):
    """Inverted dropout with the random draw passed in (``mask = rand(...)``)."""
    p, mode = dropout_param["p"], dropout_param["mode"]
    if mode == "train":
        mask = (mask < p) / p
        out = x * mask
    else:
        out = x
    out = out.astype(x.dtype, copy=False)
    dx = dout * mask if mode == "train" else dout
    return out, dx


@pytest.mark.parametrize("mode", ["train", "test"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dropout_backward_with_mask_passed_in(mode, dtype):
    rng = np.random.default_rng(3)
    tolerance = F32 if dtype == np.float32 else {}
    f = check_calls(dropout_backward,
                    [(normal(rng, n, 3, dtype=dtype), normal(rng, n, 3, dtype=dtype),
                      {"p": 0.5, "mode": mode}, rng.random((n, 3))) for n in (5, 6, 7)],
                    dynamic=True, **tolerance)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


# --- batch norm ----------------------------------------------------------------------------
def batchnorm_backward(dout, x, gamma, eps):
    """The staged computational-graph version, one node at a time."""
    N = x.shape[0]
    mu = np.mean(x, axis=0)
    xmu = x - mu
    sq = xmu ** 2
    var = 1. / N * np.sum(sq, axis=0)
    sqrtvar = np.sqrt(var + eps)
    ivar = 1. / sqrtvar
    xhat = xmu * ivar
    dbeta = np.sum(dout, axis=0)
    dgamma = np.sum(dout * xhat, axis=0)
    dxhat = dout * gamma
    divar = np.sum(dxhat * xmu, axis=0)
    dxmu1 = dxhat * ivar
    dsqrtvar = -1. / (sqrtvar ** 2) * divar
    dvar = 0.5 * 1. / np.sqrt(var + eps) * dsqrtvar
    dsq = 1. / N * np.ones((N, x.shape[1])) * dvar
    dxmu2 = 2 * xmu * dsq
    dmu = -1 * np.sum(dxmu1 + dxmu2, axis=0)
    dx = dxmu1 + dxmu2 + 1. / N * np.ones((N, x.shape[1])) * dmu
    return dx, dgamma, dbeta


def batchnorm_backward_alt(dout, x, gamma, eps):
    """The simplified one-line dx."""
    N, D = dout.shape
    mu = x.mean(axis=0)
    std = np.sqrt(x.var(axis=0) + eps)
    x_hat = (x - mu) / std
    dbeta = dout.sum(axis=0)
    dgamma = np.sum(dout * x_hat, axis=0)
    dx_hat = dout * gamma
    dx = (1. / N) / std * (N * dx_hat - dx_hat.sum(axis=0)
                           - x_hat * np.sum(dx_hat * x_hat, axis=0))
    return dx, dgamma, dbeta


@pytest.mark.parametrize("backward", [batchnorm_backward, batchnorm_backward_alt])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batchnorm_backward_over_batch_sizes(backward, dtype):
    rng = np.random.default_rng(4)
    D = 3
    gamma = normal(rng, D, dtype=dtype)
    tolerance = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else {}
    f = check_calls(backward, [(normal(rng, n, D, dtype=dtype), normal(rng, n, D, dtype=dtype),
                                gamma, 1e-5) for n in (5, 6, 8, 7)],
                    dynamic=True, **tolerance)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def test_batchnorm_backward_batch_of_one_gives_numpys_values():
    # var == 0: x_hat is 0 / sqrt(eps), dx is exactly 0 in NumPy.
    rng = np.random.default_rng(5)
    check_calls(batchnorm_backward_alt, [(normal(rng, 1, 3), normal(rng, 1, 3), normal(rng, 3),
                                          1e-5) for _ in range(3)])


# --- losses ----------------------------------------------------------------------------------
def softmax_loss(x, y):
    shifted_logits = x - np.max(x, axis=1, keepdims=True)
    Z = np.sum(np.exp(shifted_logits), axis=1, keepdims=True)
    log_probs = shifted_logits - np.log(Z)
    probs = np.exp(log_probs)
    N = x.shape[0]
    loss = -np.sum(log_probs[np.arange(N), y]) / N
    dx = probs.copy()
    dx[np.arange(N), y] -= 1
    dx /= N
    return loss, dx


def test_softmax_loss_float32_and_one_class_for_every_row():
    rng = np.random.default_rng(6)
    f = check_calls(softmax_loss, [(normal(rng, n, 10, dtype=np.float32), rng.integers(0, 10, n))
                                   for n in (5, 6, 7)], dynamic=True, **F32)
    assert compiles(f) == 1, f.stats()
    # The same class for every row: np.arange(N) keeps the pairs unique.
    f = check_calls(softmax_loss, [(normal(rng, n, 10), np.zeros(n, dtype=np.int64))
                                   for n in (5, 6, 7)], dynamic=True)
    assert compiles(f) == 1 and f.stats()["compiled_calls"] == 2, f.stats()


def test_softmax_loss_with_inf_logit():
    rng = np.random.default_rng(7)
    x = normal(rng, 5, 4)
    x[1, 2] = np.inf  # NumPy: inf - inf = nan in that row
    check_calls(softmax_loss, [(x, np.array([0, 2, 1, 3, 0]))] * 2)


def temporal_affine_forward(x, w, b):
    N, T, D = x.shape
    M = b.shape[0]
    return x.reshape(N * T, D).dot(w).reshape(N, T, M) + b


def temporal_affine_backward(dout, x, w, b):
    N, T, D = x.shape
    M = b.shape[0]
    dx = dout.reshape(N * T, M).dot(w.T).reshape(N, T, D)
    dw = dout.reshape(N * T, M).T.dot(x.reshape(N * T, D)).T
    db = dout.sum(axis=(0, 1))
    return dx, dw, db


def temporal_softmax_loss(x, y, mask):
    N, T, V = x.shape
    x_flat = x.reshape(N * T, V)
    y_flat = y.reshape(N * T)
    mask_flat = mask.reshape(N * T)
    probs = np.exp(x_flat - np.max(x_flat, axis=1, keepdims=True))
    probs /= np.sum(probs, axis=1, keepdims=True)
    loss = -np.sum(mask_flat * np.log(probs[np.arange(N * T), y_flat])) / N
    dx_flat = probs.copy()
    dx_flat[np.arange(N * T), y_flat] -= 1
    dx_flat /= N
    dx_flat *= mask_flat[:, None]
    return loss, dx_flat.reshape(N, T, V)


def test_temporal_layers_over_sequence_lengths():
    rng = np.random.default_rng(8)
    w, b = normal(rng, 3, 5), normal(rng, 5)
    lengths = (6, 7, 8, 6)
    f = check_calls(temporal_affine_forward, [(normal(rng, 2, T, 3), w, b) for T in lengths],
                    dynamic=True)
    assert compiles(f) == 1, f.stats()
    f = check_calls(temporal_affine_backward,
                    [(normal(rng, 2, T, 5), normal(rng, 2, T, 3), w, b) for T in lengths],
                    dynamic=True)
    assert compiles(f) == 1, f.stats()
    f = check_calls(temporal_softmax_loss,
                    [(normal(rng, 2, T, 9), rng.integers(0, 9, (2, T)), rng.random((2, T)) > 0.3)
                     for T in lengths], dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def word_embedding_forward(x, W):
    return W[x, :]


def test_word_embedding_forward_over_lengths_with_repeated_ids():
    rng = np.random.default_rng(9)
    W = normal(rng, 7, 3)
    ids = [rng.integers(0, 7, (2, T)) for T in (5, 6, 8)] + [np.zeros((2, 5), dtype=np.int64)]
    f = check_calls(word_embedding_forward, [(x, W) for x in ids], dynamic=True)
    assert compiles(f) == 1, f.stats()



def test_softmax_loss_empty_batch_gives_numpys_nan():
    rng = np.random.default_rng(17)
    with np.errstate(invalid="ignore"):
        f = check_calls(softmax_loss, [(normal(rng, n, 10), rng.integers(0, 10, n))
                                       for n in (5, 0, 6, 0)], dynamic=True)
    assert compiles(f) == 2 and no_eager_calls(f), f.stats()


def embedding_backward_by_index_write(dout, x, W):
    """``dW[x] += dout``: NumPy adds a repeated id's row once (the last write wins)."""
    dW = np.zeros_like(W)
    dW[x] += dout
    return dW


def test_index_write_with_repeated_ids_keeps_numpys_last_write():
    rng = np.random.default_rng(18)
    W = normal(rng, 7, 3)
    f = check_calls(embedding_backward_by_index_write,
                    [(normal(rng, 2, 3), np.array(ids), W)
                     for ids in ([1, 4], [2, 2], [0, 5], [6, 3])])
    stats = f.stats()
    assert stats["compiles"] == 1 and stats["compiled_calls"] == 2, stats



# --- naive convolution backward -------------------------------------------------------------
def conv_backward_naive(dout, x, w, b, conv_param):
    """Four nested loops; each output position adds its window back into ``dx_pad``
    (overlapping windows accumulate)."""
    stride, pad = conv_param["stride"], conv_param["pad"]
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    _, _, H_out, W_out = dout.shape
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    dx_pad = np.zeros_like(x_pad)
    dw = np.zeros_like(w)
    db = np.zeros_like(b)
    for n in range(N):
        for f in range(F):
            db[f] += np.sum(dout[n, f])
            for i in range(H_out):
                for j in range(W_out):
                    hs, ws = i * stride, j * stride
                    dw[f] += x_pad[n, :, hs:hs + HH, ws:ws + WW] * dout[n, f, i, j]
                    dx_pad[n, :, hs:hs + HH, ws:ws + WW] += w[f] * dout[n, f, i, j]
    dx = dx_pad[:, :, pad:pad + H, pad:pad + W]
    return dx, dw, db


def test_conv_backward_naive_over_image_sizes_compiles_once():
    rng = np.random.default_rng(19)
    w, b = normal(rng, 4, 2, 3, 3), normal(rng, 4)
    param = {"stride": 1, "pad": 1}
    # N=3, C=2, F=4 and images 5x6, 6x7, 7x8 (8x8 would make H and W one symbol)
    f = check_calls(conv_backward_naive,
                    [(normal(rng, 3, 4, h, w_), normal(rng, 3, 2, h, w_), w, b, param)
                     for h, w_ in ((5, 6), (6, 7), (7, 8))], dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


# --- max pool backward ---------------------------------------------------------------------
def max_pool_backward_mask(dout, x, pool_param):
    """Loops over output positions; the gradient goes to every max of the window."""
    ph, pw, stride = pool_param["pool_height"], pool_param["pool_width"], pool_param["stride"]
    N, C, H, W = x.shape
    H_out = 1 + (H - ph) // stride
    W_out = 1 + (W - pw) // stride
    dx = np.zeros_like(x)
    for i in range(H_out):
        for j in range(W_out):
            window = x[:, :, i * stride:i * stride + ph, j * stride:j * stride + pw]
            mask = window == np.max(window, axis=(2, 3), keepdims=True)
            dx[:, :, i * stride:i * stride + ph, j * stride:j * stride + pw] += (
                mask * dout[:, :, i, j][:, :, None, None])
    return dx


def max_pool_backward_naive(dout, x, pool_param):
    """Four nested loops; the gradient goes to the window's first max, found by
    ``np.unravel_index(np.argmax(window), window.shape)``."""
    ph, pw, stride = pool_param["pool_height"], pool_param["pool_width"], pool_param["stride"]
    N, C, H, W = x.shape
    H_out = 1 + (H - ph) // stride
    W_out = 1 + (W - pw) // stride
    dx = np.zeros_like(x)
    for n in range(N):
        for c in range(C):
            for i in range(H_out):
                for j in range(W_out):
                    window = x[n, c, i * stride:i * stride + ph, j * stride:j * stride + pw]
                    idx = np.unravel_index(np.argmax(window), window.shape)
                    dx[n, c, i * stride + idx[0], j * stride + idx[1]] += dout[n, c, i, j]
    return dx


POOL = {"pool_height": 2, "pool_width": 2, "stride": 2}


def pool_arguments(rng, H, W, ties=False):
    x = normal(rng, 2, 3, H, W)
    if ties:
        x = np.floor(x * 1.5)  # windows with several maxima
    return normal(rng, 2, 3, H // 2, W // 2), x, POOL


@pytest.mark.parametrize("backward", [max_pool_backward_mask, max_pool_backward_naive])
def test_max_pool_backward_over_image_sizes_compiles_once(backward):
    rng = np.random.default_rng(11)
    # outputs 5x6, 6x7, 7x5: no dim equal to N=2 or C=3; ties in the last call
    arguments = [pool_arguments(rng, h, w) for h, w in ((10, 12), (12, 14))]
    arguments.append(pool_arguments(rng, 14, 10, ties=True))
    f = check_calls(backward, arguments, dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def word_embedding_backward_loop(dout, x, V):
    """Accumulates each token's gradient row at its id: repeated ids add up."""
    N, T, D = dout.shape
    dW = np.zeros((V, D))
    for n in range(N):
        for t in range(T):
            dW[x[n, t]] += dout[n, t]
    return dW


def test_word_embedding_backward_by_loops_adds_repeated_ids():
    rng = np.random.default_rng(12)
    arguments = [(normal(rng, 2, T, 3), rng.integers(0, 5, (2, T)), 5) for T in (6, 7, 9)]
    arguments.append((normal(rng, 2, 4, 3), np.zeros((2, 4), dtype=np.int64), 5))
    f = check_calls(word_embedding_backward_loop, arguments, **LOOP_OPTIONS)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


# --- recurrent nets: steps and backward through time -----------------------------------------
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rnn_step_forward(x, prev_h, Wx, Wh, b):
    next_h = np.tanh(x.dot(Wx) + prev_h.dot(Wh) + b)
    return next_h, (x, prev_h, Wx, Wh, next_h)


def rnn_step_backward(dnext_h, cache):
    x, prev_h, Wx, Wh, next_h = cache
    dtanh = dnext_h * (1 - next_h ** 2)
    return (dtanh.dot(Wx.T), dtanh.dot(Wh.T), x.T.dot(dtanh), prev_h.T.dot(dtanh),
            np.sum(dtanh, axis=0))


def rnn_step_forward_backward(dnext_h, x, prev_h, Wx, Wh, b):
    _, cache = rnn_step_forward(x, prev_h, Wx, Wh, b)
    return rnn_step_backward(dnext_h, cache)


def lstm_step_forward(x, prev_h, prev_c, Wx, Wh, b):
    H = prev_h.shape[1]
    a = x.dot(Wx) + prev_h.dot(Wh) + b
    i, f, o = sigmoid(a[:, :H]), sigmoid(a[:, H:2 * H]), sigmoid(a[:, 2 * H:3 * H])
    g = np.tanh(a[:, 3 * H:])
    next_c = f * prev_c + i * g
    next_h = o * np.tanh(next_c)
    return next_h, next_c, (x, prev_h, prev_c, Wx, Wh, i, f, o, g, next_c)


def lstm_step_backward(dnext_h, dnext_c, cache):
    x, prev_h, prev_c, Wx, Wh, i, f, o, g, next_c = cache
    tanh_c = np.tanh(next_c)
    do = dnext_h * tanh_c
    dc = dnext_c + dnext_h * o * (1 - tanh_c ** 2)
    da = np.hstack((dc * g * i * (1 - i), dc * prev_c * f * (1 - f), do * o * (1 - o),
                    dc * i * (1 - g ** 2)))
    return (da.dot(Wx.T), da.dot(Wh.T), dc * f, x.T.dot(da), prev_h.T.dot(da),
            np.sum(da, axis=0))


def lstm_step_forward_backward(dnext_h, dnext_c, x, prev_h, prev_c, Wx, Wh, b):
    _, _, cache = lstm_step_forward(x, prev_h, prev_c, Wx, Wh, b)
    return lstm_step_backward(dnext_h, dnext_c, cache)


def test_rnn_and_lstm_step_backward_over_batch_sizes():
    rng = np.random.default_rng(13)
    D, H = 3, 5
    f = check_calls(rnn_step_forward_backward,
                    [(normal(rng, n, H), normal(rng, n, D), normal(rng, n, H),
                      normal(rng, D, H, scale=0.5), normal(rng, H, H, scale=0.5), normal(rng, H))
                     for n in (6, 7, 8, 1)], dynamic=True)
    assert compiles(f) == 2, f.stats()
    f = check_calls(lstm_step_forward_backward,
                    [(normal(rng, n, H), normal(rng, n, H), normal(rng, n, D), normal(rng, n, H),
                      normal(rng, n, H), normal(rng, D, 4 * H, scale=0.5),
                      normal(rng, H, 4 * H, scale=0.5), normal(rng, 4 * H)) for n in (6, 7, 8)],
                    dynamic=True)
    assert compiles(f) == 1, f.stats()


def rnn_backward_through_time(dh, x, h0, Wx, Wh, b):
    """Forward keeps the states in a dict keyed by step (``hs[-1] = h0``), backward walks
    ``reversed(range(T))`` carrying ``dprev`` and accumulating the weight gradients."""
    N, T, D = x.shape
    hs = {-1: h0}
    for t in range(T):
        hs[t] = np.tanh(x[:, t].dot(Wx) + hs[t - 1].dot(Wh) + b)
    dx = np.zeros_like(x)
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    dprev = np.zeros((N, h0.shape[1]))
    for t in reversed(range(T)):
        dtanh = (dh[:, t] + dprev) * (1 - hs[t] ** 2)
        dx[:, t] = dtanh.dot(Wx.T)
        dWx += x[:, t].T.dot(dtanh)
        dWh += hs[t - 1].T.dot(dtanh)
        db += dtanh.sum(axis=0)
        dprev = dtanh.dot(Wh.T)
    return dx, dprev, dWx, dWh, db


def test_rnn_backward_through_time_one_compile_over_lengths():
    rng = np.random.default_rng(15)
    D, H = 3, 5

    def arguments(T):
        return (normal(rng, 2, T, H), normal(rng, 2, T, D), normal(rng, 2, H),
                normal(rng, D, H, scale=0.5), normal(rng, H, H, scale=0.5), normal(rng, H))

    f = check_calls(rnn_backward_through_time, [arguments(T) for T in (6, 9, 4, 13)],
                    **LOOP_OPTIONS)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()
    # T = 1 and T = 0 (an empty sequence: dx is empty, dh0 is 0) are their own variants
    check_calls(rnn_backward_through_time, [arguments(T) for T in (1, 0)], **LOOP_OPTIONS)


def lstm_forward_backward(x, h0, Wx, Wh, b, dh):
    """A list of per-step caches appended in the forward loop, read back in reverse."""
    N, T, D = x.shape
    H = h0.shape[1]
    h = np.zeros((N, T, H))
    caches = []
    prev_h, prev_c = h0, np.zeros_like(h0)
    for t in range(T):
        prev_h, prev_c, cache = lstm_step_forward(x[:, t], prev_h, prev_c, Wx, Wh, b)
        h[:, t] = prev_h
        caches.append(cache)
    dx = np.zeros((N, T, D))
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    dnext_h, dnext_c = np.zeros((N, H)), np.zeros((N, H))
    for t in reversed(range(T)):
        dxt, dnext_h, dnext_c, dWxt, dWht, dbt = lstm_step_backward(
            dh[:, t] + dnext_h, dnext_c, caches[t])
        dx[:, t] = dxt
        dWx += dWxt
        dWh += dWht
        db += dbt
    return h, dx, dnext_h, dWx, dWh, db


def test_lstm_forward_backward_with_a_list_of_caches():
    rng = np.random.default_rng(16)
    D, H = 3, 5
    f = check_calls(lstm_forward_backward,
                    [(normal(rng, 2, T, D), normal(rng, 2, H), normal(rng, D, 4 * H, scale=0.5),
                      normal(rng, H, 4 * H, scale=0.5), normal(rng, 4 * H), normal(rng, 2, T, H))
                     for T in (7, 4)], **LOOP_OPTIONS)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


# --- bugs found by these models, each reduced to a minimal case -------------------------------
def first_pair_sum(pairs):
    a, b = pairs[0]
    return a + b


def list_of_step_tuples_passed_to_a_helper(x):
    """rnn_backward(dh, cache) with the list of caches rnn_forward appended, reduced."""
    pairs = []
    for t in range(x.shape[0]):
        pairs.append((x[t], x[t] * 2))
    return first_pair_sum(pairs)


def test_list_of_step_tuples_passed_to_a_helper():
    f = jitted(list_of_step_tuples_passed_to_a_helper, **LOOP_OPTIONS)
    for T in (5, 5, 6):
        x = np.arange(T * 3.0).reshape(T, 3)
        assert_same(f(x), list_of_step_tuples_passed_to_a_helper(x))


def scale_by_config(x, config):
    return x * config["learning_rate"]


def test_config_dict_with_one_setting_compiles_once():
    config = {"learning_rate": 0.1}
    f = check_calls(scale_by_config, [(np.ones(3) * k, config) for k in range(3)])
    assert compiles(f) == 1, f.stats()


def nearest_first(d):
    return np.argsort(d)


def test_argsort_with_ties_matches_numpys_default_kind():
    d = np.array([1.0, 0.0, 1.0, 0.0, 2.0, 1.0, 0.0, 1.0, 0.0])
    if (np.argsort(d) == np.argsort(d, kind="stable")).all():
        pytest.skip("this NumPy build sorts these ties stably")
    check_calls(nearest_first, [(d,), (d[::-1].copy(),), (d,)])


def add_in_place_and_return(w, dw):
    w -= 0.1 * dw  # sgd: the argument is updated and returned
    return w


def test_argument_updated_in_place_and_returned_is_the_argument():
    f = jitted(add_in_place_and_return)
    for _ in range(2):
        w = np.ones(3)
        assert f(w, np.ones(3)) is w


def add_row_at_token(g, ids):
    dW = np.zeros((5, 3))
    dW[ids[0]] += g
    return dW


def add_rows_at_tokens(g, ids):
    dW = np.zeros((5, 3))
    dW[ids] += g
    return dW


def test_augmented_write_at_a_token_id_into_a_numpy_buffer_compiles_once():
    rng = np.random.default_rng(20)
    f = check_calls(add_row_at_token, [(normal(rng, 3), np.array([k, 1])) for k in (2, 0, 4, 3)])
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def test_augmented_write_at_token_ids_into_a_numpy_buffer_compiles():
    rng = np.random.default_rng(21)
    f = check_calls(add_rows_at_tokens, [(normal(rng, 2, 3), rng.permutation(5)[:2])
                                         for _ in range(3)])
    assert no_eager_calls(f), f.stats()


def word_embedding_backward(dout, x, W):
    dW = np.zeros_like(W)
    np.add.at(dW, x, dout)
    return dW


def test_word_embedding_backward_with_add_at_compiles():
    rng = np.random.default_rng(22)
    W = normal(rng, 7, 3)
    f = check_calls(word_embedding_backward,
                    [(normal(rng, 2, 4, 3), rng.integers(0, 7, (2, 4)), W) for _ in range(3)])
    assert no_eager_calls(f), f.stats()


# --- training code -------------------------------------------------------------------------
def two_layer_loss(params, X, y=None, reg=0.0):
    """A course TwoLayerNet's ``loss``: scores without ``y``, else ``(loss, grads)``."""
    W1, b1 = params["W1"], params["b1"]
    W2, b2 = params["W2"], params["b2"]
    N, D = X.shape
    h1 = np.maximum(0, X.dot(W1) + b1)
    scores = h1.dot(W2) + b2
    if y is None:
        return scores
    shifted = scores - np.max(scores, axis=1, keepdims=True)
    exp_scores = np.exp(shifted)
    probs = exp_scores / np.sum(exp_scores, axis=1, keepdims=True)
    loss = -np.sum(np.log(probs[np.arange(N), y])) / N
    loss += reg * (np.sum(W1 * W1) + np.sum(W2 * W2))
    grads = {}
    dscores = probs.copy()
    dscores[np.arange(N), y] -= 1
    dscores /= N
    grads["W2"] = h1.T.dot(dscores) + 2 * reg * W2
    grads["b2"] = np.sum(dscores, axis=0)
    dh1 = dscores.dot(W2.T)
    dh1[h1 <= 0] = 0
    grads["W1"] = X.T.dot(dh1) + 2 * reg * W1
    grads["b1"] = np.sum(dh1, axis=0)
    return loss, grads


def net_params(rng, dtype=np.float64):
    return {"W1": normal(rng, 3, 5, dtype=dtype, scale=0.5), "b1": normal(rng, 5, dtype=dtype),
            "W2": normal(rng, 5, 4, dtype=dtype, scale=0.5), "b2": normal(rng, 4, dtype=dtype)}


def test_two_layer_net_loss_and_grads_dict_over_batch_sizes():
    rng = np.random.default_rng(30)
    params = net_params(rng)
    f = check_calls(two_layer_loss, [(params, normal(rng, n, 3), rng.integers(0, 4, n), 0.05)
                                     for n in (6, 7, 8, 6)], dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()
    # Fortran-ordered and transposed inputs run the same program
    check_calls(two_layer_loss, [(params, np.asfortranarray(normal(rng, 6, 3)),
                                  rng.integers(0, 4, 6)), (params, normal(rng, 3, 7).T,
                                                           rng.integers(0, 4, 7))], dynamic=True)
    # y=None returns the scores: a variant of its own, right from the first call
    check_calls(two_layer_loss, [(params, normal(rng, 6, 3)), (params, normal(rng, 6, 3), None)])


def train_in_place(W1, b1, W2, b2, X, y, learning_rate, num_iters):
    """A few steps of gradient descent inside the function, weights updated in place,
    the loss history a list of NumPy floats."""
    N = X.shape[0]
    loss_history = []
    for _ in range(num_iters):
        h = np.maximum(0, X.dot(W1) + b1)
        scores = h.dot(W2) + b2
        probs = np.exp(scores - scores.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        loss_history.append(-np.sum(np.log(probs[np.arange(N), y])) / N)
        probs[np.arange(N), y] -= 1
        probs /= N
        dh = probs.dot(W2.T)
        dh[h <= 0] = 0
        W2 -= learning_rate * h.T.dot(probs)
        b2 -= learning_rate * probs.sum(axis=0)
        W1 -= learning_rate * X.T.dot(dh)
        b1 -= learning_rate * dh.sum(axis=0)
    return loss_history


def test_training_loop_inside_the_function():
    rng = np.random.default_rng(32)

    def arguments(n, learning_rate=0.5):
        params = net_params(rng)
        return (params["W1"], params["b1"], params["W2"], params["b2"], normal(rng, n, 3),
                rng.integers(0, 4, n), learning_rate, 3)

    f = check_calls(train_in_place,
                    [arguments(6), arguments(7), arguments(8, 0.25), arguments(6, 0.1)],
                    dynamic=True)
    # a second learning rate makes it a run-time input: one more compile, then no more
    # (each compile's first call is its trace's, or the program's when a decision of the
    # trace may not be eager's)
    stats = f.stats()
    assert compiles(f) == 2 and stats["compiled_calls"] + stats["traced_calls"] == 4, stats
    assert stats["compiled_calls"] >= 2, stats
    assert no_eager_calls(f), f.stats()


def lossFun(inputs, targets, hprev, Wxh, Whh, Why, bh, by):  # noqa: N802 - the gist's name
    """min-char-rnn's forward and backward over a sequence, as the gist writes it."""
    vocab_size = Wxh.shape[1]
    xs, hs, ys, ps = {}, {}, {}, {}
    hs[-1] = np.copy(hprev)
    loss = 0
    for t in range(len(inputs)):
        xs[t] = np.zeros((vocab_size, 1))
        xs[t][inputs[t]] = 1
        hs[t] = np.tanh(np.dot(Wxh, xs[t]) + np.dot(Whh, hs[t - 1]) + bh)
        ys[t] = np.dot(Why, hs[t]) + by
        ps[t] = np.exp(ys[t]) / np.sum(np.exp(ys[t]))
        loss += -np.log(ps[t][targets[t], 0])
    dWxh, dWhh, dWhy = np.zeros_like(Wxh), np.zeros_like(Whh), np.zeros_like(Why)
    dbh, dby = np.zeros_like(bh), np.zeros_like(by)
    dhnext = np.zeros_like(hs[0])
    for t in reversed(range(len(inputs))):
        dy = np.copy(ps[t])
        dy[targets[t]] -= 1
        dWhy += np.dot(dy, hs[t].T)
        dby += dy
        dh = np.dot(Why.T, dy) + dhnext
        dhraw = (1 - hs[t] * hs[t]) * dh
        dbh += dhraw
        dWxh += np.dot(dhraw, xs[t].T)
        dWhh += np.dot(dhraw, hs[t - 1].T)
        dhnext = np.dot(Whh.T, dhraw)
    for dparam in [dWxh, dWhh, dWhy, dbh, dby]:
        np.clip(dparam, -5, 5, out=dparam)
    return loss, dWxh, dWhh, dWhy, dbh, dby, hs[len(inputs) - 1]


def char_rnn_step(inputs, targets, hprev, Wxh, Whh, Why, bh, by, mWxh, mWhh, mWhy, mbh, mby):
    """One iteration of the gist's main loop: lossFun, then Adagrad in place."""
    loss, dWxh, dWhh, dWhy, dbh, dby, hprev = lossFun(inputs, targets, hprev, Wxh, Whh, Why,
                                                      bh, by)
    for param, dparam, mem in zip([Wxh, Whh, Why, bh, by], [dWxh, dWhh, dWhy, dbh, dby],
                                  [mWxh, mWhh, mWhy, mbh, mby]):
        mem += dparam * dparam
        param += -0.1 * dparam / np.sqrt(mem + 1e-8)
    return loss, hprev


def char_rnn_arguments(rng, T, vocab=6, hidden=5, as_array=False):
    ids = [int(i) for i in rng.integers(0, vocab, T + 1)]
    if as_array:
        ids = np.array(ids)
    # large weights so that some gradients reach the clip at +-5
    weights = (normal(rng, hidden, 1), normal(rng, hidden, vocab, scale=3.0),
               normal(rng, hidden, hidden, scale=3.0), normal(rng, vocab, hidden, scale=3.0),
               normal(rng, hidden, 1), normal(rng, vocab, 1))
    return (ids[:-1], ids[1:]) + weights


def test_char_rnn_step_with_adagrad_in_place():
    rng = np.random.default_rng(33)
    arguments = []
    for _ in range(4):
        loss_arguments = char_rnn_arguments(rng, 7)
        memories = tuple(np.abs(normal(rng, *w.shape)) for w in loss_arguments[3:])
        arguments.append(loss_arguments + memories)
    f = check_calls(char_rnn_step, arguments)
    # new ids at the same length: the second compile makes them run-time inputs
    # (each compile's first call is its trace's, or the program's when a decision of the
    # trace may not be eager's)
    stats = f.stats()
    assert compiles(f) == 2 and stats["compiled_calls"] + stats["traced_calls"] == 4, stats
    assert stats["compiled_calls"] >= 2, stats


def test_char_rnn_loss_over_lengths_of_id_arrays():
    rng = np.random.default_rng(34)
    f = check_calls(lossFun, [char_rnn_arguments(rng, T, as_array=True) for T in (7, 5, 9)],
                    **LOOP_OPTIONS)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


# --- k-nearest neighbours --------------------------------------------------------------------
def compute_distances_two_loops(X, X_train):
    dists = np.zeros((X.shape[0], X_train.shape[0]))
    for i in range(X.shape[0]):
        for j in range(X_train.shape[0]):
            dists[i, j] = np.sqrt(np.sum((X[i] - X_train[j]) ** 2))
    return dists


def compute_distances_one_loop(X, X_train):
    dists = np.zeros((X.shape[0], X_train.shape[0]))
    for i in range(X.shape[0]):
        dists[i, :] = np.sqrt(np.sum(np.square(X_train - X[i, :]), axis=1))
    return dists


def compute_distances_no_loops(X, X_train):
    return np.sqrt(np.sum(X ** 2, axis=1, keepdims=True) + np.sum(X_train ** 2, axis=1)
                   - 2 * X.dot(X_train.T))


def k_nearest_labels(X, X_train, y_train, k):
    d = np.sum((X[:, None, :] - X_train[None, :, :]) ** 2, axis=2)
    return y_train[np.argsort(d, axis=1)[:, :k]], d


@pytest.mark.parametrize("distances", [compute_distances_two_loops, compute_distances_one_loop,
                                       compute_distances_no_loops])
def test_knn_distances_over_set_sizes(distances):
    rng = np.random.default_rng(35)
    f = check_calls(distances, [(normal(rng, n, 3), normal(rng, m, 3))
                                for n, m in ((5, 9), (6, 11), (7, 10))], dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def test_knn_labels_by_argsort_without_ties():
    rng = np.random.default_rng(36)
    f = check_calls(k_nearest_labels, [(normal(rng, n, 3), normal(rng, 9, 3),
                                        rng.integers(0, 3, 9), 3) for n in (5, 6, 7)],
                    dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


# --- bugs found by the training code, each reduced to a minimal case ---------------------------
def correct_class_scores(scores, y):
    return scores[range(scores.shape[0]), y]


def test_range_of_the_batch_size_as_an_index_compiles_once():
    rng = np.random.default_rng(40)
    f = check_calls(correct_class_scores, [(normal(rng, n, 4), rng.integers(0, 4, n))
                                           for n in (5, 6, 7)], dynamic=True)
    assert compiles(f) == 1, f.stats()


def loss_history_of_floats(x):
    losses = []
    for step in range(1, 4):
        losses.append(float(np.sum(x) * step))
    return losses


def test_float_of_a_loss_kept_for_the_history_compiles():
    rng = np.random.default_rng(41)
    f = check_calls(loss_history_of_floats, [(normal(rng, 3),) for _ in range(4)])
    assert no_eager_calls(f) and f.stats()["compiled_calls"] >= 2, f.stats()


def adam_step(w, dw, config):
    """The course's Adam: state lives in the config dict, mutated and returned."""
    config["t"] += 1
    config["m"] = config["beta1"] * config["m"] + (1 - config["beta1"]) * dw
    config["v"] = config["beta2"] * config["v"] + (1 - config["beta2"]) * dw ** 2
    mb = config["m"] / (1 - config["beta1"] ** config["t"])
    vb = config["v"] / (1 - config["beta2"] ** config["t"])
    next_w = w - config["learning_rate"] * mb / (np.sqrt(vb) + config["epsilon"])
    return next_w, config


def sgd_over_params(params, grads, learning_rate):
    for name in params:
        params[name] -= learning_rate * grads[name]


def sgd_with_defaults(w, dw, config=None):
    if config is None:
        config = {}
    config.setdefault("learning_rate", 1e-2)
    w -= config["learning_rate"] * dw
    return w, config


def test_adam_with_its_state_in_the_config_dict_compiles():
    rng = np.random.default_rng(42)
    config = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
              "m": normal(rng, 4, 3), "v": np.abs(normal(rng, 4, 3)), "t": 5}
    f = check_calls(adam_step, [(normal(rng, 4, 3), normal(rng, 4, 3), config)
                                for _ in range(3)])
    assert no_eager_calls(f), f.stats()


def test_sgd_over_a_params_dict_compiles():
    """``params[name] -= ...`` updates each array in place and stores the same object back
    into the dict: nothing in the dict changes, so it compiles (mutated arguments)."""
    rng = np.random.default_rng(43)
    params = net_params(rng)
    f = check_calls(sgd_over_params, [(params, net_params(rng), 0.1) for _ in range(3)])
    assert no_eager_calls(f), f.stats()


def test_sgd_with_setdefault_on_a_config_that_has_the_key_compiles():
    rng = np.random.default_rng(44)
    f = check_calls(sgd_with_defaults, [(normal(rng, 4, 3), normal(rng, 4, 3),
                                         {"learning_rate": 0.1, "momentum": 0.9})
                                        for _ in range(3)])
    assert no_eager_calls(f), f.stats()


def get_im2col_indices(x_shape, field_height, field_width, padding=1, stride=1):
    N, C, H, W = x_shape
    out_height = (H + 2 * padding - field_height) // stride + 1
    out_width = (W + 2 * padding - field_width) // stride + 1
    i0 = np.tile(np.repeat(np.arange(field_height), field_width), C)
    i1 = stride * np.repeat(np.arange(out_height), out_width)
    j0 = np.tile(np.arange(field_width), field_height * C)
    j1 = stride * np.tile(np.arange(out_width), out_height)
    i = i0.reshape(-1, 1) + i1.reshape(1, -1)
    j = j0.reshape(-1, 1) + j1.reshape(1, -1)
    k = np.repeat(np.arange(C), field_height * field_width).reshape(-1, 1)
    return k, i, j


def im2col_indices(x, field_height, field_width, padding=1, stride=1):
    p = padding
    x_padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), mode="constant")
    k, i, j = get_im2col_indices(x.shape, field_height, field_width, padding, stride)
    cols = x_padded[:, k, i, j]
    return cols.transpose(1, 2, 0).reshape(field_height * field_width * x.shape[1], -1)


def conv_forward_im2col(x, w, b):
    F, C, HH, WW = w.shape
    N, _, H, W = x.shape
    cols = im2col_indices(x, HH, WW, 1, 1)
    out = w.reshape(F, -1).dot(cols) + b.reshape(-1, 1)
    return out.reshape(F, H, W, N).transpose(3, 0, 1, 2)


def test_im2col_conv_forward_over_image_sizes_compiles():
    rng = np.random.default_rng(45)
    w, b = normal(rng, 4, 2, 3, 3), normal(rng, 4)
    f = check_calls(conv_forward_im2col, [(normal(rng, 3, 2, h, w_), w, b)
                                          for h, w_ in ((5, 6), (6, 7), (7, 5))], dynamic=True)
    assert no_eager_calls(f) and compiles(f) == 1, f.stats()


def test_im2col_conv_forward_at_one_size_compiles():
    rng = np.random.default_rng(47)
    w, b = normal(rng, 4, 2, 3, 3), normal(rng, 4)
    f = check_calls(conv_forward_im2col, [(normal(rng, 3, 2, 5, 6), w, b) for _ in range(3)])
    assert no_eager_calls(f) and f.stats()["compiled_calls"] == 2, f.stats()


def matmul_loss(W, X):
    return np.sum(X.dot(W) ** 2)


def test_value_and_grad_of_x_dot_w_with_a_plain_x():
    rng = np.random.default_rng(46)
    W, X = normal(rng, 3, 2), normal(rng, 4, 3)
    value, gradient = tj.value_and_grad(matmul_loss)(W, X)
    assert_same(gradient, 2 * X.T.dot(X.dot(W)), rtol=1e-9)


# --- jit(value_and_grad(forward)) against the hand-written backward ---------------------------
def two_layer_forward_loss(W1, b1, W2, b2, X, y):
    return two_layer_loss({"W1": W1, "b1": b1, "W2": W2, "b2": b2}, X, y)[0]


def two_layer_manual_grads(W1, b1, W2, b2, X, y):
    loss, grads = two_layer_loss({"W1": W1, "b1": b1, "W2": W2, "b2": b2}, X, y)
    return loss, (grads["W1"], grads["b1"], grads["W2"], grads["b2"])


def svm_forward_loss(x, y):
    N = x.shape[0]
    correct = x[np.arange(N), y]
    margins = np.maximum(0, x - correct[:, np.newaxis] + 1.0)
    margins[np.arange(N), y] = 0
    return np.sum(margins) / N


def svm_manual_grads(x, y):
    N = x.shape[0]
    margins = np.maximum(0, x - x[np.arange(N), y][:, np.newaxis] + 1.0)
    margins[np.arange(N), y] = 0
    dx = np.zeros_like(x)
    dx[margins > 0] = 1
    dx[np.arange(N), y] -= np.sum(margins > 0, axis=1)
    return np.sum(margins) / N, dx / N


def embedding_forward_loss(W, x, dout):
    return np.sum(word_embedding_forward(x, W) * dout)


def embedding_manual_grads(W, x, dout):
    dW = np.zeros_like(W)
    np.add.at(dW, x, dout)
    return embedding_forward_loss(W, x, dout), dW


def batchnorm_forward_loss(gamma, beta, x, dout):
    out = gamma * (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + 1e-5) + beta
    return np.sum(out * dout)


def batchnorm_manual_grads(gamma, beta, x, dout):
    dx, dgamma, dbeta = batchnorm_backward_alt(dout, x, gamma, 1e-5)
    return batchnorm_forward_loss(gamma, beta, x, dout), (dgamma, dbeta, dx)


def rnn_forward_loss(Wx, Wh, b, x, h0, dh):
    N, T, D = x.shape
    h = np.zeros((N, T, h0.shape[1]))
    prev_h = h0
    for t in range(T):
        prev_h, _ = rnn_step_forward(x[:, t, :], prev_h, Wx, Wh, b)
        h[:, t, :] = prev_h
    return np.sum(h * dh)


def rnn_manual_grads(Wx, Wh, b, x, h0, dh):
    _, _, dWx, dWh, db = rnn_backward_through_time(dh, x, h0, Wx, Wh, b)
    return rnn_forward_loss(Wx, Wh, b, x, h0, dh), (dWx, dWh, db)


def max_pool_forward_loss(x, dout):
    out = np.zeros_like(dout)
    for i in range(dout.shape[2]):
        for j in range(dout.shape[3]):
            out[:, :, i, j] = np.max(x[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2], axis=(2, 3))
    return np.sum(out * dout)


def max_pool_manual_grads(x, dout):
    return max_pool_forward_loss(x, dout), max_pool_backward_mask(dout, x, POOL)


def check_gradients(forward_loss, manual, argument_sets, argnums, **options):
    """``jit(value_and_grad(forward_loss))`` against the hand-written backward run by
    NumPy: the same loss and gradients (within rounding: other summation orders)."""
    f = jitted(tj.value_and_grad(forward_loss, argnums=argnums), **options)
    for arguments in argument_sets:
        want_value, want_gradients = manual(*copy.deepcopy(arguments))
        value, gradients = f(*copy.deepcopy(arguments))
        assert_same(value, np.float64(want_value), rtol=1e-9)
        assert_same(gradients, want_gradients, rtol=1e-8, atol=1e-12)
    return f


def test_gradients_of_the_two_layer_net_match_its_backward():
    rng = np.random.default_rng(50)
    params = net_params(rng)
    weights = (params["W1"], params["b1"], params["W2"], params["b2"])
    f = check_gradients(two_layer_forward_loss, two_layer_manual_grads,
                        [weights + (normal(rng, n, 3), rng.integers(0, 4, n)) for n in (6, 7, 8)],
                        (0, 1, 2, 3), dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


@pytest.mark.parametrize("case", ["svm", "embedding", "batchnorm"])
def test_gradients_of_losses_match_their_backward(case):
    rng = np.random.default_rng(51)
    if case == "svm":
        arguments = [(normal(rng, n, 6), rng.integers(0, 6, n)) for n in (5, 7, 8)]
        f = check_gradients(svm_forward_loss, svm_manual_grads, arguments, 0, dynamic=True)
    elif case == "embedding":  # repeated ids: the gather's transpose adds them up
        W = normal(rng, 7, 3)
        ids = [rng.integers(0, 7, (2, 4)), np.zeros((2, 4), dtype=np.int64), rng.integers(0, 7,
                                                                                          (2, 4))]
        arguments = [(W, x, normal(rng, 2, 4, 3)) for x in ids]
        f = check_gradients(embedding_forward_loss, embedding_manual_grads, arguments, 0)
    else:
        arguments = [(normal(rng, 3), normal(rng, 3), normal(rng, n, 3), normal(rng, n, 3))
                     for n in (5, 7, 8)]
        f = check_gradients(batchnorm_forward_loss, batchnorm_manual_grads, arguments, (0, 1, 2),
                            dynamic=True)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def test_gradients_through_the_rnn_loop_match_backward_through_time():
    rng = np.random.default_rng(52)
    D, H = 3, 5
    arguments = [(normal(rng, D, H, scale=0.5), normal(rng, H, H, scale=0.5), normal(rng, H),
                  normal(rng, 2, T, D), normal(rng, 2, H), normal(rng, 2, T, H))
                 for T in (6, 9, 4)]
    f = check_gradients(rnn_forward_loss, rnn_manual_grads, arguments, (0, 1, 2),
                        **LOOP_OPTIONS)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def test_gradients_through_the_max_pool_loops_at_one_size_match_its_backward():
    # One size: the loops run unrolled in the trace (over sizes, see the xfail below).
    # No ties: np.max's gradient splits among tied maxima, the mask backward does not.
    rng = np.random.default_rng(53)
    arguments = [pool_arguments(rng, 4, 6)[1::-1] for _ in range(3)]
    f = check_gradients(max_pool_forward_loss, max_pool_manual_grads, arguments, 0)
    assert compiles(f) == 1 and no_eager_calls(f), f.stats()


def doubled_into_a_buffer(x, dout):
    out = np.zeros_like(dout)
    for i in range(dout.shape[0]):
        for j in range(dout.shape[1]):
            out[i, j] = x[i, j] * 2
    return np.sum(out * dout)


def test_gradient_through_nested_loops_writing_a_buffer_compiles():
    rng = np.random.default_rng(54)
    f = jitted(tj.value_and_grad(doubled_into_a_buffer), dynamic=True)
    for n, m in ((5, 6), (6, 7)):
        x, dout = normal(rng, n + 1, m + 2), normal(rng, n, m)
        value, gradient = f(x, dout)
        assert_same(value, doubled_into_a_buffer(x, dout), rtol=1e-9)
        assert_same(gradient, np.pad(2 * dout, ((0, 1), (0, 2))))
    assert no_eager_calls(f), f.stats()


def pairwise_max_sum(x):
    out = np.zeros(x.shape[0] // 2)
    for i in range(x.shape[0] // 2):
        out[i] = np.max(x[2 * i:2 * i + 2])
    return np.sum(out)


def test_gradient_through_a_loop_over_half_the_length_compiles():
    f = jitted(tj.value_and_grad(pairwise_max_sum), dynamic=True)
    for n in (5, 6, 7):
        x = np.arange(2.0 * n)[::-1].copy()
        value, gradient = f(x)
        assert_same(value, pairwise_max_sum(x))
        assert_same(gradient, np.tile([1.0, 0.0], n))
    assert no_eager_calls(f), f.stats()
