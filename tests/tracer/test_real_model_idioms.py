"""Model code the way public NumPy courses and gists write it, eager vs ``jit``.

The models are written for this file in the idioms of course assignments (affine / relu /
naive conv / naive max pool / RNN and LSTM forward over time steps / softmax and SVM
losses / batch norm), the classic character-level RNN (per-step dicts, ``hs[-1]``, a
reversed backward loop, token ids), GRU and attention gists, and small layer classes
with bound methods. Every call is compared with plain NumPy on copies of the same
arguments: values, shapes, dtypes and the side effects on the arguments. Compile counts
are checked where the contract promises them (one program per bucket of lengths).

Tests marked ``xfail(strict=True)`` are minimal reproductions of bugs found this way;
each flips to a failure (so the mark must go) once the bug is fixed.
"""


import numpy as np
import pytest
from real_model_checks import all_compiled, assert_same, check_calls, compiles, jitted, rng_for

import tracejit as tj

# One bucket [2, 64] for every dynamic dim: lengths 2..64 share one compile.
LOOP_OPTIONS = dict(dynamic=True, buckets=[64])


# --- course-assignment layers --------------------------------------------------------------
def affine_relu_forward(x, w, b):
    out = x.reshape(x.shape[0], -1).dot(w) + b
    return np.maximum(0, out), (x, w, b)


def affine_backward(dout, x, w):
    dx = dout.dot(w.T).reshape(x.shape)
    dw = x.reshape(x.shape[0], -1).T.dot(dout)
    db = np.sum(dout, axis=0)
    return dx, dw, db


def test_affine_relu_and_backward_over_batch_sizes():
    rng = rng_for(0)
    w, b = rng.standard_normal((12, 5)), rng.standard_normal(5)
    # Batch sizes that equal no other dim: dynamic=True gives dims equal on the traced
    # call one symbol (x[3, 3, 4] traces as x[s0, s0, s1]), a variant of its own.
    batches = (2, 6, 7, 1)
    f = check_calls(affine_relu_forward,
                    [(rng.standard_normal((n, 3, 4)), w, b) for n in batches], dynamic=True)
    assert compiles(f) <= 3  # 1, 2 and [5, 8] are three buckets
    check_calls(affine_backward, [(rng.standard_normal((n, 5)), rng.standard_normal((n, 3, 4)),
                                   w) for n in batches], dynamic=True)


def rnn_step_forward(x, prev_h, Wx, Wh, b):
    next_h = np.tanh(prev_h.dot(Wh) + x.dot(Wx) + b)
    return next_h, (x, prev_h, Wx, Wh, next_h)


def rnn_forward(x, h0, Wx, Wh, b):
    """Calls a step helper and fills a preallocated (N, T, H) buffer at the index."""
    N, T, D = x.shape
    h = np.zeros((N, T, h0.shape[1]))
    prev_h = h0
    for t in range(T):
        next_h, _ = rnn_step_forward(x[:, t, :], prev_h, Wx, Wh, b)
        h[:, t, :] = next_h
        prev_h = next_h
    return h


def rnn_args(rng, T, dtype=np.float64):
    N, D, H = 2, 3, 4
    arrays = (rng.standard_normal((N, T, D)), rng.standard_normal((N, H)),
              rng.standard_normal((D, H)) * 0.5, rng.standard_normal((H, H)) * 0.5,
              rng.standard_normal(H))
    return tuple(a.astype(dtype) for a in arrays)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rnn_forward_one_compile_per_length_bucket(dtype):
    rtol = 1e-10 if dtype == np.float64 else 2e-5
    lengths = [9, 3, 5, 7, 13, 2, 31, 9]
    f = check_calls(rnn_forward, [rnn_args(rng_for(T), T, dtype) for T in lengths],
                    rtol=rtol, atol=rtol, **LOOP_OPTIONS)
    assert compiles(f) == 1
    # every call compiled, but a first call whose loop trips the trace left pending
    assert all_compiled(f, len(lengths))


def test_rnn_forward_lengths_zero_and_one_run_right():
    f = check_calls(rnn_forward, [rnn_args(rng_for(T), T) for T in (9, 0, 1, 0, 1)],
                    **LOOP_OPTIONS)
    assert compiles(f) <= 3


def stable_sigmoid(x):
    """A numerically stable sigmoid without boolean-mask indexing."""
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + z), z / (1 + z))


def lstm_forward(x, h0, Wx, Wh, b):
    N, T, D = x.shape
    H = h0.shape[1]
    h = np.zeros((N, T, H))
    prev_h, prev_c = h0, np.zeros_like(h0)
    for t in range(T):
        a = x[:, t, :].dot(Wx) + prev_h.dot(Wh) + b
        i, f, o = stable_sigmoid(a[:, :H]), stable_sigmoid(a[:, H:2 * H]), \
            stable_sigmoid(a[:, 2 * H:3 * H])
        g = np.tanh(a[:, 3 * H:])
        prev_c = f * prev_c + i * g
        prev_h = o * np.tanh(prev_c)
        h[:, t, :] = prev_h
    return h, prev_c


def lstm_args(rng, T):
    N, D, H = 2, 3, 4
    return (rng.standard_normal((N, T, D)), rng.standard_normal((N, H)),
            rng.standard_normal((D, 4 * H)) * 0.5, rng.standard_normal((H, 4 * H)) * 0.5,
            rng.standard_normal(4 * H))


def test_lstm_forward_gate_slices_over_lengths():
    # Weights keep their exact shapes (dynamic="auto"): only T varies.
    lengths = [6, 5, 7, 8, 6]
    f = check_calls(lstm_forward, [lstm_args(rng_for(T), T) for T in lengths])
    assert compiles(f) == 2  # 6 exact, then T dynamic in (4, 8]
    assert all_compiled(f, len(lengths))


def softmax_loss(x, y):
    shifted = x - np.max(x, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    N = x.shape[0]
    loss = -np.sum(log_probs[np.arange(N), y]) / N
    dx = np.exp(log_probs)
    dx[np.arange(N), y] -= 1
    dx /= N
    return loss, dx


def test_softmax_loss_over_batch_sizes():
    rng = rng_for(1)
    f = check_calls(softmax_loss, [(rng.standard_normal((n, 10)), rng.integers(0, 10, n))
                                   for n in (5, 6, 7, 8, 5)], dynamic=True)
    assert compiles(f) == 1


def conv_forward_naive(x, w, b, conv_param):
    stride, pad = conv_param["stride"], conv_param["pad"]
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    H_out = 1 + (H + 2 * pad - HH) // stride
    W_out = 1 + (W + 2 * pad - WW) // stride
    out = np.zeros((N, F, H_out, W_out))
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    for i in range(H_out):
        for j in range(W_out):
            window = x_pad[:, :, i * stride:i * stride + HH, j * stride:j * stride + WW]
            for f in range(F):
                out[:, f, i, j] = np.sum(window * w[f], axis=(1, 2, 3)) + b[f]
    return out


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_forward_naive_over_image_sizes(stride):
    rng = rng_for(2)
    w, b = rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    param = {"stride": stride, "pad": 1}
    sizes = [(5, 6), (6, 7), (7, 5), (8, 8)]
    f = check_calls(conv_forward_naive,
                    [(rng.standard_normal((2, 2, h, w_)), w, b, param) for h, w_ in sizes],
                    dynamic=True)
    assert compiles(f) == 1


def max_pool_forward_naive(x, pool_param):
    N, C, H, W = x.shape
    ph, pw, s = pool_param["pool_height"], pool_param["pool_width"], pool_param["stride"]
    out = np.zeros((N, C, 1 + (H - ph) // s, 1 + (W - pw) // s))
    for n in range(N):
        for c in range(C):
            for i in range(out.shape[2]):
                for j in range(out.shape[3]):
                    out[n, c, i, j] = np.max(x[n, c, i * s:i * s + ph, j * s:j * s + pw])
    return out


def test_max_pool_forward_naive_four_nested_loops():
    rng = rng_for(3)
    param = {"pool_height": 2, "pool_width": 2, "stride": 2}
    check_calls(max_pool_forward_naive,
                [(rng.standard_normal((2, 3, h, w)), param) for h, w in ((6, 6), (8, 7), (7, 8))],
                dynamic=True)


def batchnorm_forward(x, gamma, beta, bn_param):
    """Course-style batch norm: reads the mode from a dict and writes the running
    statistics back into it (a side effect on the argument that must survive jit)."""
    momentum = bn_param.get("momentum", 0.9)
    eps = bn_param.get("eps", 1e-5)
    D = x.shape[1]
    running_mean = bn_param.get("running_mean", np.zeros(D, dtype=x.dtype))
    running_var = bn_param.get("running_var", np.zeros(D, dtype=x.dtype))
    if bn_param["mode"] == "train":
        mu, var = x.mean(axis=0), x.var(axis=0)
        out = gamma * (x - mu) / np.sqrt(var + eps) + beta
        running_mean = momentum * running_mean + (1 - momentum) * mu
        running_var = momentum * running_var + (1 - momentum) * var
    else:
        out = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta
    bn_param["running_mean"] = running_mean
    bn_param["running_var"] = running_var
    return out


@pytest.mark.parametrize("mode", ["train", "test"])
def test_batchnorm_writes_running_stats_into_its_dict(mode):
    rng = rng_for(4)
    D = 5
    check_calls(batchnorm_forward,
                [(rng.standard_normal((n, D)), rng.standard_normal(D), rng.standard_normal(D),
                  {"mode": mode, "running_mean": rng.standard_normal(D),
                   "running_var": np.abs(rng.standard_normal(D))}) for n in (4, 6, 4)])


# --- regressions: bugs these models found, each reduced to a minimal case --------------------
def decrement_at(x, idx):
    d = x.copy()
    d[idx] -= 1
    return d


def assign_at(x, idx, v):
    d = x.copy()
    d[idx] = v
    return d


def test_index_array_write_with_repeats_on_a_later_call():
    """Index-array writes lower to a scatter, which would add repeated positions: a guard
    that the indices are unique sends such a call to NumPy (the last write wins), and the
    compiled code keeps serving calls whose indices do not repeat."""
    x = np.arange(6.0) + 0.5
    f = jitted(decrement_at)
    for idx in ([0, 2, 4], [1, 1, 5], [5, -1, 0], [1, 1, 5], [3, 1, 2], [2, 0, 4]):
        assert_same(f(x, np.array(idx)), decrement_at(x, np.array(idx)))
    stats = f.stats()
    assert stats["compiles"] == 1 and stats["compiled_calls"] == 2, stats


def zero_pairs(x, rows, cols):
    out = x.copy()
    out[rows, cols] = -x[rows, cols]
    return out


def test_two_index_arrays_write_with_a_repeated_pair_on_a_later_call():
    x = np.arange(12.0).reshape(3, 4)
    f = jitted(zero_pairs)
    for rows, cols in (([0, 1, 2], [3, 2, 1]), ([0, 2, 0], [1, 1, 1]), ([2, -1], [3, -1])):
        arguments = (x, np.array(rows), np.array(cols))
        assert_same(f(*arguments), zero_pairs(*arguments))


def test_index_array_assignment_with_repeats_keeps_the_last_write():
    x, v = np.arange(6.0), np.array([1.0, 2.0, 3.0])
    f = jitted(assign_at)
    f(x, np.array([0, 2, 4]), v)
    assert_same(f(x, np.array([1, 1, 5]), v), assign_at(x, np.array([1, 1, 5]), v))


def zero_one_column(x):
    m = np.ones(x.shape)
    m[:, 0] = 0
    return m * x


def test_scalar_write_into_dynamic_buffer_compiles_once():
    f = check_calls(zero_one_column, [(np.ones((n, 6)),) for n in (5, 6, 7, 8)], dynamic=True)
    assert compiles(f) == 1


def svm_loss(x, y):
    N = x.shape[0]
    correct = x[np.arange(N), y]
    margins = np.maximum(0, x - correct[:, np.newaxis] + 1.0)
    margins[np.arange(N), y] = 0
    loss = np.sum(margins) / N
    num_pos = np.sum(margins > 0, axis=1)
    dx = np.zeros_like(x)
    dx[margins > 0] = 1
    dx[np.arange(N), y] -= num_pos
    dx /= N
    return loss, dx


def test_svm_loss_compiles_once_per_batch_bucket():
    rng = rng_for(5)
    f = check_calls(svm_loss, [(rng.standard_normal((n, 10)), rng.integers(0, 10, n))
                               for n in (5, 6, 7, 8)], dynamic=True)
    assert compiles(f) == 1


def rnn_over_rows(x, W):
    h = np.zeros(W.shape[0])
    for xt in x:
        h = np.tanh(W @ h + xt)
    return h


def rnn_over_enumerate(x, W):
    h = np.zeros(W.shape[0])
    for t, xt in enumerate(x):
        h = np.tanh(W @ h + xt) * (1.0 - 0.0 * t)
    return h


def dot_over_zip(x, y):
    acc = np.zeros(x.shape[1])
    for a, b in zip(x, y):
        acc = acc + a * b
    return acc


@pytest.mark.parametrize("model", [rnn_over_rows, rnn_over_enumerate])
def test_loop_over_array_rows_is_captured(model):
    rng = rng_for(6)
    W = rng.standard_normal((4, 4)) * 0.5
    f = check_calls(model, [(rng.standard_normal((T, 4)), W) for T in (9, 5, 7, 12)],
                    **LOOP_OPTIONS)
    assert compiles(f) == 1


def test_loop_over_zip_is_captured():
    rng = rng_for(7)
    f = check_calls(dot_over_zip, [(rng.standard_normal((T, 4)), rng.standard_normal((T, 4)))
                                   for T in (9, 5, 7, 12)], **LOOP_OPTIONS)
    assert compiles(f) == 1


def int_started_loss(x):
    loss = 0  # min-char-rnn starts its loss at the int 0
    for t in range(x.shape[0]):
        loss += np.sum(x[t] ** 2)
    return loss


def float_started_loss(x):
    loss = 0.0
    for t in range(x.shape[0]):
        loss += np.sum(x[t] ** 2)
    return loss


def test_float_started_accumulator_is_captured():
    rng = rng_for(8)
    f = check_calls(float_started_loss, [(rng.standard_normal((T, 4)),) for T in (9, 5, 7, 12)],
                    **LOOP_OPTIONS)
    assert compiles(f) == 1


def test_int_started_accumulator_is_captured():
    rng = rng_for(8)
    f = check_calls(int_started_loss, [(rng.standard_normal((T, 4)),) for T in (9, 5, 7, 12)],
                    **LOOP_OPTIONS)
    assert compiles(f) == 1


def decayed_sum(x):
    acc = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        acc = acc + x[t] * (1.0 / (t + 1))
    return acc


def test_loop_index_in_float_arithmetic_is_captured():
    rng = rng_for(9)
    f = check_calls(decayed_sum, [(rng.standard_normal((T, 3)),) for T in (9, 5, 7, 12)],
                    **LOOP_OPTIONS)
    assert compiles(f) == 1


def discounted_sum(x):
    acc = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        acc = acc + (0.9 ** t) * x[t]
    return acc


def test_power_of_the_loop_index_under_fallback_raise():
    rng = rng_for(10)
    check_calls(discounted_sum, [(rng.standard_normal((T, 3)),) for T in (9, 5)],
                fallback="raise", **LOOP_OPTIONS)


def test_power_of_the_loop_index_gives_numpys_result():
    rng = rng_for(10)
    check_calls(discounted_sum, [(rng.standard_normal((T, 3)),) for T in (9, 5, 0, 1)],
                **LOOP_OPTIONS)


def divmod_of_the_loop_index(x):
    acc = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        acc = acc + divmod(7.5, t + 1)[1] * x[t]  # SymInt has no __rdivmod__
    return acc


def test_an_operator_tracing_refuses_is_not_called_the_users_error():
    f = jitted(divmod_of_the_loop_index, **LOOP_OPTIONS)
    x = np.ones((9, 3))
    assert_same(f(x), divmod_of_the_loop_index(x))
    assert "raised while tracing" not in f.stats()["eager_calls"]


def onehot_rnn(W, ids):
    h = np.zeros(W.shape[0])
    for t in range(ids.shape[0]):
        x = np.zeros((W.shape[1], 1))
        x[ids[t]] = 1
        h = np.tanh(h + (W @ x)[:, 0])
    return h


def test_onehot_write_at_token_id_does_not_specialize_the_id():
    rng = rng_for(11)
    W = rng.standard_normal((7, 7))
    f = check_calls(onehot_rnn, [(W, rng.integers(0, 7, 6)) for _ in range(8)])
    assert f.stats()["eager_calls"] == {}
    assert compiles(f) == 1


def onehot_dynamic(x, ids):
    z = np.zeros(x.shape[0])
    z[ids[0]] = 1.0
    return z * x


def test_scalar_write_at_traced_index_into_dynamic_1d_buffer_compiles():
    rng = rng_for(12)
    f = check_calls(onehot_dynamic, [(rng.standard_normal(7), rng.integers(0, 7, 3))
                                     for _ in range(3)], dynamic=True)
    assert f.stats()["eager_calls"] == {}


def token_loss(W, inputs, targets):
    """min-char-rnn style: Python lists of token ids, one-hot rows, a loss over steps."""
    h, loss = np.zeros(W.shape[0]), 0
    for t in range(len(inputs)):
        x = np.zeros(W.shape[1])
        x[inputs[t]] = 1
        h = np.tanh(W @ x + 0.5 * h)
        loss += -np.log(np.exp(h[targets[t]]) / np.sum(np.exp(h)))
    return loss


def test_lists_of_token_ids_become_inputs_after_one_retrace():
    """Batches of the same length with new ids: the second compile makes every id of the
    list a run-time value (not one retrace per position that happened to repeat)."""
    rng = rng_for(13)
    W = rng.standard_normal((6, 6))
    batches = []
    for _ in range(6):
        ids = [int(i) for i in rng.integers(0, 6, 9)]
        batches.append((W, ids[:-1], ids[1:]))
    f = check_calls(token_loss, batches)
    assert compiles(f) == 2 and f.stats()["compiled_calls"] == 4, f.stats()


def col2im_like(cols, rows, columns, shape):
    """np.add.at with repeated positions and a tuple of index arrays, and subtract.at."""
    image = np.zeros(shape)
    np.add.at(image, (rows, columns), cols)
    np.subtract.at(image, rows[:2], 0.5)
    return image


def test_ufunc_at_adds_every_repeated_position():
    rng = rng_for(14)
    rows, columns = np.array([0, 2, 2, 1, 0]), np.array([1, 1, 1, 3, 1])
    f = check_calls(col2im_like, [(rng.standard_normal(5), rows, columns, (3, 4))
                                  for _ in range(3)])
    assert f.stats()["eager_calls"] == {} and compiles(f) == 1, f.stats()


def test_ufunc_at_on_tensors_keeps_the_gradient():
    rng = rng_for(15)
    W, ids = rng.standard_normal((5, 3)), np.array([1, 4, 1, 0])

    def loss(W):
        dW = np.zeros_like(W)
        np.add.at(dW, ids, W[ids] * 2.0)
        return np.sum(dW * dW)

    value, gradient = tj.value_and_grad(loss)(W)
    jit_value, jit_gradient = tj.jit(tj.value_and_grad(loss), cache="memory")(W)
    np.testing.assert_allclose(value, loss(W))
    np.testing.assert_allclose(jit_value, value)
    np.testing.assert_allclose(jit_gradient, gradient)


def rank_labels(labels):
    return np.argsort(labels)


def test_argsort_of_ints_with_ties_on_a_later_call_matches_numpy():
    """NumPy's default argsort orders ties its own way: a guard sends such calls to NumPy;
    calls without ties stay compiled."""
    f = check_calls(rank_labels, [(np.array(values),) for values in
                                  ([3, 1, 2, 0], [2, 0, 3, 1], [1, 1, 0, 1], [0, 3, 2, 1])])
    assert f.stats()["compiled_calls"] == 2, f.stats()


def test_gradient_with_respect_to_a_python_float_is_right_under_jit():
    """A float argument is a constant of the trace: its gradient would come out 0, so the
    call runs on the eager tape (3.0) instead; a 0-d array argument compiles."""
    def loss(a, b):
        return np.sum(a * b)

    f = tj.jit(tj.value_and_grad(loss, argnums=(0, 1)), cache="memory")
    for b in (2.0, np.float64(2.0)):
        _, (_, gradient) = f(np.ones(3), b)
        assert float(gradient) == 3.0
    _, (_, gradient) = f(np.ones(3), np.array(2.0))
    assert float(gradient) == 3.0 and f.stats()["compiled_calls"] + f.stats()["traced_calls"] >= 1


def sgd_step(w, dw, config=None):
    if config is None:
        config = {}
    config.setdefault("learning_rate", 1e-2)
    return w - config["learning_rate"] * dw, config


def test_setdefault_on_a_config_argument():
    """A key the config has: nothing changes, the call compiles; a key it lacks is added
    to the caller's dict, as NumPy code does (that call runs eagerly)."""
    rng = rng_for(16)
    w, dw = rng.standard_normal(3), rng.standard_normal(3)
    f = check_calls(sgd_step, [(w, dw, {"learning_rate": 0.5}) for _ in range(3)])
    assert f.stats()["eager_calls"] == {} and compiles(f) == 1
    check_calls(sgd_step, [(w, dw, {"momentum": 0.9}), (w, dw, None)])
