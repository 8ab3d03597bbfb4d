"""Adversarial real-model tests, second round: NumPy model code in the idioms of public
course assignments (cs231n layers / rnn_layers / optim), min-char-rnn and LSTM gists,
NumPyCNN-style from-scratch CNNs and small NumPy ML libraries, run eagerly and through
``jit`` on copies of the same arguments.

Covers what the first round (``test_adversarial_real_models.py``) does not: spatial batch
norm and group norm through transposes and grouped reshapes, conv backward with ``np.pad``
and ``dpadx[:, :, pad:-pad, pad:-pad]``, vectorized SVM loss with boolean-mask writes,
greedy caption sampling with an int32 buffer, ``h[:, t], cache = step(...)`` tuple
targets, views of the hidden-state buffer carried across steps, generator and seeded
dropout, NaN/Inf through argmax/max/clip, integer dtypes, NumPy scalar arguments of
another width, and gradients through im2col, LSTM and batch-norm losses.

Each call compares results, dtypes and the arguments afterwards with eager NumPy; whether
a call compiled is asserted only where the test is about a needless fallback. Tests marked
``xfail(strict=True)`` are minimal reproductions of bugs found this way.
"""


import numpy as np
from real_model_checks import no_internal_errors, rng_for, run_calls

from tracejit.testing import assert_compiled_matches_eager


def eager_reasons(f):
    return f.stats().get("eager_calls") or {}


# --- cs231n layers.py: spatial batch norm and group norm ------------------------------------
def spatial_batchnorm_forward(x, gamma, beta, bn_param):
    N, C, H, W = x.shape
    flat = x.transpose(0, 2, 3, 1).reshape(-1, C)
    eps = bn_param.get("eps", 1e-5)
    momentum = bn_param.get("momentum", 0.9)
    running_mean = bn_param.get("running_mean", np.zeros(C, dtype=x.dtype))
    running_var = bn_param.get("running_var", np.zeros(C, dtype=x.dtype))
    if bn_param["mode"] == "train":
        mu, var = flat.mean(axis=0), flat.var(axis=0)
        xhat = (flat - mu) / np.sqrt(var + eps)
        out = gamma * xhat + beta
        running_mean = momentum * running_mean + (1 - momentum) * mu
        running_var = momentum * running_var + (1 - momentum) * var
        cache = (xhat, gamma, var, eps)
    else:
        out = gamma * (flat - running_mean) / np.sqrt(running_var + eps) + beta
        cache = None
    bn_param["running_mean"] = running_mean
    bn_param["running_var"] = running_var
    return out.reshape(N, H, W, C).transpose(0, 3, 1, 2), cache


def test_spatial_batchnorm_through_transpose_reshape_over_sizes():
    rng = rng_for(1)

    def arguments(n, h, w, mode="train"):
        return (rng.standard_normal((n, 3, h, w)), rng.standard_normal(3),
                rng.standard_normal(3), {"mode": mode})

    f = run_calls(spatial_batchnorm_forward,
                  [arguments(2, 4, 5), arguments(3, 5, 5), arguments(4, 6, 7),
                   arguments(1, 1, 1), arguments(2, 3, 3, "test")])
    no_internal_errors(f)


def spatial_groupnorm_forward(x, gamma, beta, G, gn_param):
    eps = gn_param.get("eps", 1e-5)
    N, C, H, W = x.shape
    grouped = x.reshape(N, G, C // G, H, W)
    mean = np.mean(grouped, axis=(2, 3, 4), keepdims=True)
    var = np.var(grouped, axis=(2, 3, 4), keepdims=True)
    xhat = ((grouped - mean) / np.sqrt(var + eps)).reshape(N, C, H, W)
    return gamma * xhat + beta, (xhat, mean, var)


def groupnorm_arguments(rng, n, h, w, groups):
    return (rng.standard_normal((n, 4, h, w)), rng.standard_normal((1, 4, 1, 1)),
            rng.standard_normal((1, 4, 1, 1)), groups, {})


def test_spatial_groupnorm_over_sizes_and_group_counts_matches_eager():
    rng = rng_for(2)
    run_calls(spatial_groupnorm_forward,
              [groupnorm_arguments(rng, *shape) for shape in
               ((2, 3, 3, 2), (3, 4, 5, 2), (5, 6, 6, 2), (2, 3, 3, 4), (2, 3, 3, 1))])


def reshape_into_groups(x, groups):
    n, c = x.shape
    return x.reshape(n, groups, c // groups).sum(axis=2)


def test_group_count_argument_in_reshape_compiles_per_value():
    rng = rng_for(3)
    x = rng.standard_normal((2, 4))
    f = run_calls(reshape_into_groups, [(x, 2), (x, 4), (x, 1)])
    no_internal_errors(f)


# --- cs231n rnn_layers.py: tuple targets and views of the hidden-state buffer ---------------
def rnn_step_forward(x, prev_h, Wx, Wh, b):
    next_h = np.tanh(x @ Wx + prev_h @ Wh + b)
    return next_h, (x, prev_h, next_h)


def rnn_forward_tuple_target(x, h0, Wx, Wh, b):
    """``h[:, t, :], cache = step(...)``, as many rnn_forward solutions write it."""
    N, T, _ = x.shape
    h = np.zeros((N, T, h0.shape[1]))
    prev_h = h0
    caches = []
    for t in range(T):
        h[:, t, :], cache = rnn_step_forward(x[:, t, :], prev_h, Wx, Wh, b)
        prev_h = h[:, t, :]
        caches.append(cache)
    return h, caches


def rnn_arguments(rng, n, t, d=3, hidden=4):
    return (rng.standard_normal((n, t, d)), rng.standard_normal((n, hidden)),
            rng.standard_normal((d, hidden)) * 0.5, rng.standard_normal((hidden, hidden)) * 0.5,
            rng.standard_normal(hidden))


def test_rnn_forward_with_tuple_target_and_buffer_view_carry_matches_eager():
    rng = rng_for(4)
    run_calls(rnn_forward_tuple_target, [rnn_arguments(rng, 2, t) for t in (3, 4, 6, 9, 1)])


def double_and_shift(v):
    return v * 2, v + 1


def tuple_target_write_in_loop(x):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        out[t], _ = double_and_shift(x[t])
    return out


def test_tuple_target_buffer_write_in_loop_compiles():
    # built invalid IR ("where(...) uses %N before its definition") in the tree of 0f04c2a
    rng = rng_for(5)
    f = run_calls(tuple_target_write_in_loop,
                  [(rng.standard_normal((t, 3)),) for t in (3, 4, 6)])
    no_internal_errors(f)


def carry_a_view_of_the_buffer(x):
    h = np.zeros_like(x)
    prev = x[0]
    for t in range(x.shape[0]):
        h[t] = np.tanh(prev + x[t])
        prev = h[t]
    return h


def test_carrying_a_row_view_of_the_output_buffer_compiles():
    rng = rng_for(6)
    f = run_calls(carry_a_view_of_the_buffer,
                  [(rng.standard_normal((t, 3)),) for t in (3, 4, 6)])
    assert f.stats()["compiled_calls"] > 0, f.explain()


# --- cs231n layers.py: conv backward naive with np.pad, called for layers of another pad ----
def conv_backward_naive(dout, x, w, b, conv_param):
    stride, pad = conv_param["stride"], conv_param["pad"]
    N, _, H, W = x.shape
    F, _, HH, WW = w.shape
    h_out = (H + 2 * pad - HH) // stride + 1
    w_out = (W + 2 * pad - WW) // stride + 1
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), "constant")
    dw = np.zeros_like(w)
    dpadded = np.zeros_like(padded)
    db = np.sum(dout, axis=(0, 2, 3))
    for i in range(h_out):
        for j in range(w_out):
            block = padded[:, :, i * stride:i * stride + HH, j * stride:j * stride + WW]
            for k in range(F):
                dw[k, :, :, :] += np.sum(block * dout[:, k, i, j][:, None, None, None], axis=0)
            for n in range(N):
                dpadded[n, :, i * stride:i * stride + HH, j * stride:j * stride + WW] += \
                    np.sum(dout[n, :, i, j][:, None, None, None] * w, axis=0)
    dx = dpadded[:, :, pad:-pad, pad:-pad]    # pad == 0 gives an empty dx, as in NumPy
    return dx, dw, db


def conv_backward_arguments(rng, n, h, w, stride=1, pad=1):
    x = rng.standard_normal((n, 2, h, w))
    h_out, w_out = (h + 2 * pad - 3) // stride + 1, (w + 2 * pad - 3) // stride + 1
    return (rng.standard_normal((n, 3, h_out, w_out)), x, rng.standard_normal((3, 2, 3, 3)),
            np.zeros(3), {"stride": stride, "pad": pad})


def test_conv_backward_naive_over_sizes_strides_and_pads_matches_eager():
    # dynamic=True: with the default "auto" the first call's exact 5x5 output unrolls the
    # 125 (i, j, k/n) iterations into one LLVM module that takes a minute and more to compile
    rng = rng_for(7)
    run_calls(conv_backward_naive,
              [conv_backward_arguments(rng, *shape) for shape in
               ((2, 5, 5), (2, 6, 7), (3, 8, 8), (1, 5, 5, 2, 1), (2, 5, 5, 1, 0))],
              dynamic=True)


def pad_by_setting(x, conv_param):
    pad = conv_param["pad"]
    return np.pad(x, ((0, 0), (pad, pad)), "constant").sum(axis=1)


def test_pad_width_from_a_settings_dict_compiles_per_value():
    rng = rng_for(8)
    x = rng.standard_normal((2, 5))
    f = run_calls(pad_by_setting, [(x, {"pad": 1}), (x, {"pad": 0}), (x, {"pad": 1})])
    assert "untraceable" not in eager_reasons(f), f.explain()


# --- integer code: shifts --------------------------------------------------------------------
def hash_bucket(ids):
    return (ids << 3) % 16 + (ids >> 1)


def test_bit_shifts_on_int_arrays_trace():
    # refused as np.left_shift / np.right_shift are (eager, right), not an internal error
    rng = rng_for(9)
    f = run_calls(hash_bucket, [(rng.integers(0, 1000, n),) for n in (3, 5, 8)])
    no_internal_errors(f)


# --- float32 losses scaled by a NumPy float64 scalar ----------------------------------------
def float32_sum_times_float64_scalar(x, reg):
    return x.sum() * reg


def test_float32_sum_promoted_by_a_float64_scalar_matches_at_float32_tolerance():
    # float32's rounding is in the float64 result: the checker allows float32's tolerance
    x = rng_for(0).standard_normal((3, 3)).astype(np.float32)
    assert_compiled_matches_eager(float32_sum_times_float64_scalar, (x, np.float64(0.1)),
                                  cache="memory")
