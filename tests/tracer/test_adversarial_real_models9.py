"""Adversarial real-model tests, tenth round: convolutional layers and course-assignment
networks in the idioms of public NumPy code (CS231n layers.py / fast_layers / layer_utils /
cnn.py / optim.py / solver.py / gradient_check.py, NumPy CNN gists), run eagerly and
through ``jit`` on copies of the same arguments.

Covers what rounds one to nine do not: the naive convolution as four nested loops over
N, F and the output grid with ``np.pad`` and a conv_param dict, its backward through the
(out, cache) tuple of the forward, overlapping max pools whose backward spreads ``dout``
with an ``(x == max)`` mask (ties, NaN windows), average pooling, spatial batch norm
forward and backward with the bn_param dict mutated across train and test calls, the
conv-relu-pool and affine-relu sandwiches, SVM and softmax losses with their gradients,
update rules that fill a config dict lazily (``setdefault``, the Adam ``t`` counter), a
ThreeLayerConvNet whose bound ``loss(X, y=None)`` is jitted and called with and without
labels, a Solver step over the params dict, and the numeric gradient check that perturbs
an argument in place with ``np.nditer(..., op_flags=['readwrite'])`` around a jitted
function. Inputs change shape between calls (odd and prime sizes, batch 1 and 0), dtype
(float32, float64), layout (strided, transposed) and hold NaN and Inf.

Each call compares results, dtypes, types and the arguments afterwards (dicts included)
with eager NumPy, and an exception eager raises must be raised too.

Findings (each fixed, its test a regression). Wrong result: ``np.pad`` with zero widths
returned the argument itself, so ``x_pad[...] += 1`` wrote into the caller's ``x``.
Internal errors: ``lambda *args`` reading ``args[1]["stride"]`` in a captured loop (the
new variant's guard refused its own call), ``x.reshape(0, -1)`` of an empty batch. Slow:
``conv_param["stride"]`` changing between calls became a run-time input whose slice
bounds pinned it and unrolled every loop (100-240 s compiles), now a constant
(``tracer/pinned_scalars.py``). Eager on every call: ``config.setdefault`` after ``if
config is None: config = {}``, ``np.pad(..., constant_values=-np.inf)``, and the fast max
pool's ``x == max`` mask over computed values (the margin of each window's own max:
``margin_rules._near_ties``), which kept the ThreeLayerConvNet loss from ever compiling.
"""

import copy

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for, run_calls

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-5)
TOLERANCE = {np.float64: F64, np.float32: F32}


def compiled_some(f):
    assert f.stats()["compiled_calls"] > 0, f.explain()


# --- the naive convolution: four nested loops, np.pad, a conv_param dict ---------------------
def conv_forward_naive(x, w, b, conv_param):
    stride, pad = conv_param["stride"], conv_param["pad"]
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    H_out = 1 + (H + 2 * pad - HH) // stride
    W_out = 1 + (W + 2 * pad - WW) // stride
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    out = np.zeros((N, F, H_out, W_out), dtype=x.dtype)
    for n in range(N):
        for f in range(F):
            for i in range(H_out):
                for j in range(W_out):
                    window = x_pad[n, :, i * stride:i * stride + HH, j * stride:j * stride + WW]
                    out[n, f, i, j] = np.sum(window * w[f]) + b[f]
    cache = (x, w, b, conv_param)
    return out, cache


def conv_backward_naive(dout, cache):
    x, w, b, conv_param = cache
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
            db[f] += dout[n, f].sum()
            for i in range(H_out):
                for j in range(W_out):
                    hs, ws = i * stride, j * stride
                    dw[f] += x_pad[n, :, hs:hs + HH, ws:ws + WW] * dout[n, f, i, j]
                    dx_pad[n, :, hs:hs + HH, ws:ws + WW] += w[f] * dout[n, f, i, j]
    dx = dx_pad[:, :, pad:pad + H, pad:pad + W]
    return dx, dw, db


def conv_forward_backward(x, w, b, dout_scale, conv_param):
    out, cache = conv_forward_naive(x, w, b, conv_param)
    dx, dw, db = conv_backward_naive(out * dout_scale, cache)
    return out, dx, dw, db


def conv_arguments(rng, n, c, h, w, f=2, k=3, stride=1, pad=1, dtype=np.float64):
    return (rng.standard_normal((n, c, h, w)).astype(dtype),
            rng.standard_normal((f, c, k, k)).astype(dtype),
            rng.standard_normal(f).astype(dtype), 0.5, {"stride": stride, "pad": pad})


def test_naive_conv_forward_over_sizes_strides_and_pads():
    rng = rng_for(1000)
    sets = [conv_arguments(rng, 2, 2, 5, 5)[:3] + ({"stride": 1, "pad": 1},),
            conv_arguments(rng, 1, 3, 7, 6)[:3] + ({"stride": 2, "pad": 0},),
            conv_arguments(rng, 3, 1, 4, 4)[:3] + ({"stride": 3, "pad": 2},),
            conv_arguments(rng, 2, 2, 5, 5)[:3] + ({"stride": 1, "pad": 1},)]
    f = run_calls(lambda x, w, b, p: conv_forward_naive(x, w, b, p)[0], sets, **F64)
    no_internal_errors(f)
    compiled_some(f)


def test_naive_conv_forward_backward_through_the_cache():
    """The stride and pad of the conv_param dict change between calls: they decide slice
    bounds, so they stay constants of the trace (tracejit.tracer.pinned_scalars; as run-time
    inputs every loop unrolled under index guards, and the second compile took minutes)."""
    rng = rng_for(1001)
    sets = [conv_arguments(rng, 1, 1, 4, 4),
            conv_arguments(rng, 1, 1, 5, 6, stride=2, pad=1),
            conv_arguments(rng, 1, 1, 4, 4, dtype=np.float32)]
    f = run_calls(conv_forward_backward, sets, **F32)
    no_internal_errors(f)
    compiled_some(f)
    assert "any int (dynamic)" not in f.explain()          # stride and pad: constants


def test_naive_conv_on_strided_transposed_and_nonfinite_inputs():
    rng = rng_for(1002)
    base = rng.standard_normal((1, 2, 10, 6))
    strided = base[:, :, ::2]                              # (1, 2, 5, 6), not contiguous
    transposed = rng.standard_normal((1, 2, 6, 5)).transpose(0, 1, 3, 2)
    nonfinite = rng.standard_normal((2, 2, 5, 6))
    nonfinite[0, 1, 2, 3] = np.nan
    nonfinite[1, 0, 0, 0] = np.inf
    w, b = rng.standard_normal((2, 2, 3, 3)), rng.standard_normal(2)
    param = {"stride": 1, "pad": 1}
    sets = [(x, w, b, 0.25, param) for x in (strided, transposed, nonfinite, strided)]
    f = run_calls(lambda *args: conv_forward_naive(*args[:3], args[4])[0], sets, **F64)
    no_internal_errors(f)


def test_a_varargs_wrapper_reading_the_conv_param_dict_inside_a_loop():
    """``lambda *args: conv(args[0], args[1])``: a dict inside ``args`` read in a captured
    loop was found again through the first argument's leaf (``args`` mapped to leaf 0), so
    the new variant's entry guard refused the very call it was traced on (an internal error
    on every call)."""
    def windows(x, param):
        out = np.zeros(x.shape[0] - 2)
        for i in range(x.shape[0] - 2):
            out[i] = np.sum(x[i * param["stride"]:i * param["stride"] + 3])
        return out

    f = run_calls(lambda *args: windows(args[0], args[1]),
                  [(np.arange(6.0), {"stride": 1}), (np.arange(9.0)[::2], {"stride": 1})])
    no_internal_errors(f)
    compiled_some(f)


def test_naive_conv_of_an_empty_batch_and_a_one_pixel_image():
    rng = rng_for(1003)
    sets = [conv_arguments(rng, 2, 1, 3, 3, k=3, pad=0),   # one output pixel
            conv_arguments(rng, 0, 1, 4, 4),                # empty batch
            conv_arguments(rng, 1, 1, 1, 1, k=1, pad=0),
            conv_arguments(rng, 2, 1, 3, 3, k=3, pad=0)]
    f = run_calls(conv_forward_backward, sets, **F64)
    no_internal_errors(f)


def pad_forms(x, pad):
    """np.pad as the assignments spell it; writes into a padded copy (pad 0 included)
    must leave the argument alone."""
    a = np.pad(x, ((0,), (0,), (pad,), (pad,)), "constant")
    b = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)], mode="constant", constant_values=0)
    c = np.pad(x[0, 0], pad)
    d = np.pad(x, ((0, 0), (0, 0), (pad, 0), (0, pad)), constant_values=-np.inf)
    e = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-0.0)
    a[:, :, 0] += 1.0
    b[0] = 7.0
    return a, b, c, d.max(axis=(2, 3)), e, x.sum()


def test_pad_forms_and_writes_into_an_unpadded_copy():
    """np.pad with zero widths returned the argument itself in the trace: a[...] += 1 wrote
    into the caller's x (a wrong result and a changed argument)."""
    rng = rng_for(1024)
    sets = [(rng.standard_normal((2, 2, 3, 4)), 1), (rng.standard_normal((2, 2, 3, 4)), 0),
            (rng.standard_normal((1, 2, 5, 4)), 2), (rng.standard_normal((2, 2, 3, 4)), 0),
            (rng.standard_normal((2, 2, 3, 4)).astype(np.float32), 1)]
    f = run_calls(pad_forms, sets, **F32)
    no_internal_errors(f)
    compiled_some(f)


def pad_then_write(x, pad):
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    x_pad[:, :, pad] += 1.0
    return x_pad, x.sum()


def test_a_write_into_a_zero_padded_copy_leaves_the_argument_alone():
    rng = rng_for(1027)
    f = run_calls(pad_then_write, [(rng.standard_normal((1, 2, 3, 3)), 0),
                                   (rng.standard_normal((1, 2, 3, 3)), 1),
                                   (rng.standard_normal((2, 2, 3, 3)), 0)], **F64)
    no_internal_errors(f)
    compiled_some(f)


def padded_max_pool(x, pad):
    """A 'same' max pool: pad with -inf so the border windows ignore the padding."""
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    N, C, H, W = x.shape
    out = np.empty_like(x)
    for i in range(H):
        for j in range(W):
            out[:, :, i, j] = x_pad[:, :, i:i + 2 * pad + 1, j:j + 2 * pad + 1].max(axis=(2, 3))
    return out


def test_same_max_pool_padded_with_minus_inf():
    rng = rng_for(1025)
    ints = rng.integers(-5, 5, (1, 2, 4, 4)).astype(np.int64)
    sets = [(rng.standard_normal((2, 1, 4, 4)), 1), (rng.standard_normal((1, 2, 5, 3)), 1),
            (-np.abs(rng.standard_normal((2, 1, 4, 4))), 1), (ints, 1)]
    f = run_calls(padded_max_pool, sets, **F64)
    no_internal_errors(f)
    compiled_some(f)


def affine_of_a_batch(x, w, b):
    return affine_forward(x, w, b)[0]


def test_affine_of_an_empty_batch_raises_as_numpy_does():
    """x.reshape(0, -1) raises in NumPy; the trace raised it as an internal error."""
    rng = rng_for(1026)
    w = rng.standard_normal((6, 4))
    sets = [(rng.standard_normal((2, 3, 2)), w, np.zeros(4)),
            (rng.standard_normal((0, 3, 2)), w, np.zeros(4)),
            (rng.standard_normal((3, 3, 2)), w, np.zeros(4))]
    f = run_calls(affine_of_a_batch, sets, **F64)
    no_internal_errors(f)


# --- pooling: overlapping max pool with an (x == max) mask, average pool ---------------------
def max_pool_forward_naive(x, pool_param):
    ph, pw, s = pool_param["pool_height"], pool_param["pool_width"], pool_param["stride"]
    N, C, H, W = x.shape
    H_out, W_out = 1 + (H - ph) // s, 1 + (W - pw) // s
    out = np.zeros((N, C, H_out, W_out), dtype=x.dtype)
    for i in range(H_out):
        for j in range(W_out):
            out[:, :, i, j] = np.max(x[:, :, i * s:i * s + ph, j * s:j * s + pw], axis=(2, 3))
    return out, (x, pool_param)


def max_pool_backward_naive(dout, cache):
    x, pool_param = cache
    ph, pw, s = pool_param["pool_height"], pool_param["pool_width"], pool_param["stride"]
    N, C, H_out, W_out = dout.shape
    dx = np.zeros_like(x)
    for n in range(N):
        for c in range(C):
            for i in range(H_out):
                for j in range(W_out):
                    window = x[n, c, i * s:i * s + ph, j * s:j * s + pw]
                    mask = window == np.max(window)
                    dx[n, c, i * s:i * s + ph, j * s:j * s + pw] += mask * dout[n, c, i, j]
    return dx


def max_pool_round_trip(x, dout_scale, pool_param):
    out, cache = max_pool_forward_naive(x, pool_param)
    return out, max_pool_backward_naive(out * dout_scale + 1.0, cache)


def pool_arguments(rng, n, c, h, w, pool=2, stride=2, ties=False, dtype=np.float64):
    x = rng.standard_normal((n, c, h, w))
    if ties:
        x = np.round(x)
    return (x.astype(dtype), 0.5,
            {"pool_height": pool, "pool_width": pool, "stride": stride})


@pytest.mark.parametrize("dtype", [np.float64])
def test_overlapping_max_pool_with_ties_and_nan(dtype):
    rng = rng_for(1004)
    with_nan = pool_arguments(rng, 2, 2, 5, 5, pool=3, stride=2, dtype=dtype)
    with_nan[0][1, 0, 2, 2] = np.nan                        # one NaN spoils four windows
    with_nan[0][0, 1, 0, 0] = -np.inf
    sets = [pool_arguments(rng, 2, 2, 5, 5, pool=3, stride=2, dtype=dtype),
            pool_arguments(rng, 2, 2, 7, 5, pool=3, stride=2, ties=True, dtype=dtype),
            with_nan,
            pool_arguments(rng, 2, 2, 5, 5, pool=3, stride=2, ties=True, dtype=dtype)]
    f = run_calls(max_pool_round_trip, sets, **TOLERANCE[dtype])
    no_internal_errors(f)
    compiled_some(f)


def avg_pool_forward_backward(x, dout, pool):
    N, C, H, W = x.shape
    Ho, Wo = H // pool, W // pool
    cropped = x[:, :, :Ho * pool, :Wo * pool]
    out = cropped.reshape(N, C, Ho, pool, Wo, pool).mean(axis=(3, 5))
    dx = np.zeros_like(x)
    spread = np.repeat(np.repeat(dout, pool, axis=2), pool, axis=3) / (pool * pool)
    dx[:, :, :Ho * pool, :Wo * pool] = spread
    return out, dx


def test_average_pool_with_cropped_edges_over_sizes():
    rng = rng_for(1005)

    def arguments(n, h, w, pool, dtype=np.float64):
        x = rng.standard_normal((n, 2, h, w)).astype(dtype)
        return x, rng.standard_normal((n, 2, h // pool, w // pool)).astype(dtype), pool

    sets = [arguments(2, 5, 7, 2), arguments(1, 6, 6, 3), arguments(3, 2, 3, 2),
            arguments(2, 9, 4, 2), arguments(2, 5, 7, 2, np.float32)]
    f = run_calls(avg_pool_forward_backward, sets, **F32)
    no_internal_errors(f)
    compiled_some(f)


# --- spatial batch norm forward and backward with a bn_param dict -----------------------------
def batchnorm_forward(x, gamma, beta, bn_param):
    mode = bn_param["mode"]
    eps = bn_param.get("eps", 1e-5)
    momentum = bn_param.get("momentum", 0.9)
    N, D = x.shape
    running_mean = bn_param.get("running_mean", np.zeros(D, dtype=x.dtype))
    running_var = bn_param.get("running_var", np.zeros(D, dtype=x.dtype))
    if mode == "train":
        mu = x.mean(axis=0)
        xc = x - mu
        var = np.mean(xc ** 2, axis=0)
        std = np.sqrt(var + eps)
        xn = xc / std
        out = gamma * xn + beta
        cache = (mode, x, xc, std, xn, gamma)
        running_mean = momentum * running_mean + (1 - momentum) * mu
        running_var = momentum * running_var + (1 - momentum) * var
    elif mode == "test":
        out = gamma * ((x - running_mean) / np.sqrt(running_var + eps)) + beta
        cache = (mode, x, None, None, None, gamma)
    else:
        raise ValueError('Invalid forward batchnorm mode "%s"' % mode)
    bn_param["running_mean"] = running_mean
    bn_param["running_var"] = running_var
    return out, cache


def batchnorm_backward(dout, cache):
    mode, x, xc, std, xn, gamma = cache
    N = dout.shape[0]
    dbeta = dout.sum(axis=0)
    dgamma = np.sum(xn * dout, axis=0)
    dxn = gamma * dout
    dxc = dxn / std
    dstd = -np.sum((dxn * xc) / (std * std), axis=0)
    dvar = 0.5 * dstd / std
    dxc += (2.0 / N) * xc * dvar
    dmu = np.sum(dxc, axis=0)
    dx = dxc - dmu / N
    return dx, dgamma, dbeta


def spatial_batchnorm_forward_backward(x, gamma, beta, bn_param, dout):
    N, C, H, W = x.shape
    flat = x.transpose(0, 2, 3, 1).reshape(-1, C)
    out_flat, cache = batchnorm_forward(flat, gamma, beta, bn_param)
    out = out_flat.reshape(N, H, W, C).transpose(0, 3, 1, 2)
    if bn_param["mode"] != "train":
        return out
    dx_flat, dgamma, dbeta = batchnorm_backward(dout.transpose(0, 2, 3, 1).reshape(-1, C), cache)
    dx = dx_flat.reshape(N, H, W, C).transpose(0, 3, 1, 2)
    return out, dx, dgamma, dbeta


@pytest.mark.parametrize("dtype", [np.float32])
def test_spatial_batchnorm_train_then_test_with_one_bn_param(dtype):
    """One bn_param dict carried through every call (as a layer keeps it): the running
    statistics it holds after each call, and the test-mode outputs that read them, agree."""
    rng = rng_for(1006)
    C = 3
    gamma = rng.standard_normal(C).astype(dtype)
    beta = rng.standard_normal(C).astype(dtype)
    f = jitted(spatial_batchnorm_forward_backward)
    eager_param, jit_param = {"mode": "train"}, {"mode": "train", "momentum": 0.8}
    eager_param["momentum"] = 0.8
    shapes = [(2, 4, 5), (3, 3, 3), (2, 4, 5), (2, 4, 5), (3, 3, 3), (1, 1, 1)]
    for step, (n, h, w) in enumerate(shapes):
        mode = "train" if step % 3 != 2 else "test"
        eager_param["mode"] = jit_param["mode"] = mode
        x = rng.standard_normal((n, C, h, w)).astype(dtype) * 3 + 1
        dout = rng.standard_normal((n, C, h, w)).astype(dtype)
        want = spatial_batchnorm_forward_backward(x, gamma, beta, eager_param, dout)
        got = f(x, gamma, beta, jit_param, dout)
        assert_same(got, want, where=f"step {step}", **TOLERANCE[dtype])
        assert_same(jit_param, eager_param, where=f"bn_param after step {step}",
                    **TOLERANCE[dtype])
    no_internal_errors(f)
    compiled_some(f)


def test_batchnorm_of_a_constant_channel_and_an_invalid_mode():
    rng = rng_for(1007)
    constant = np.ones((2, 2, 3, 3))
    constant[:, 1] = rng.standard_normal((2, 3, 3))
    gamma, beta = np.ones(2), np.zeros(2)
    sets = [(constant, gamma, beta, {"mode": "train"}, np.ones((2, 2, 3, 3))),
            (rng.standard_normal((1, 2, 1, 1)), gamma, beta, {"mode": "train"},
             np.ones((1, 2, 1, 1))),
            (constant, gamma, beta, {"mode": "eval"}, np.ones((2, 2, 3, 3))),
            (constant, gamma, beta, {"mode": "train", "eps": 0.0}, np.ones((2, 2, 3, 3)))]
    f = run_calls(spatial_batchnorm_forward_backward, sets, **F64)
    no_internal_errors(f)


# --- sandwich layers returning (out, cache) and the losses returning (loss, dx) -------------
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
    dx = dout.copy()
    dx[cache <= 0] = 0
    return dx


def affine_relu_forward(x, w, b):
    a, fc_cache = affine_forward(x, w, b)
    out, relu_cache = relu_forward(a)
    return out, (fc_cache, relu_cache)


def affine_relu_backward(dout, cache):
    fc_cache, relu_cache = cache
    return affine_backward(relu_backward(dout, relu_cache), fc_cache)


def conv_relu_pool_forward(x, w, b, conv_param, pool_param):
    a, conv_cache = conv_forward_fast(x, w, b, conv_param)
    s, relu_cache = relu_forward(a)
    out, pool_cache = max_pool_forward_reshape(s, pool_param)
    return out, (conv_cache, relu_cache, pool_cache)


def conv_relu_pool_backward(dout, cache):
    conv_cache, relu_cache, pool_cache = cache
    ds = max_pool_backward_reshape(dout, pool_cache)
    da = relu_backward(ds, relu_cache)
    return conv_backward_fast(da, conv_cache)


# fast_layers.py: im2col by index arrays, col2im by np.add.at, max pool by reshape
def get_im2col_indices(x_shape, field_height, field_width, padding, stride):
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


def im2col_indices(x, field_height, field_width, padding, stride):
    p = padding
    x_padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), mode="constant")
    k, i, j = get_im2col_indices(x.shape, field_height, field_width, padding, stride)
    cols = x_padded[:, k, i, j]
    C = x.shape[1]
    return cols.transpose(1, 2, 0).reshape(field_height * field_width * C, -1)


def col2im_indices(cols, x_shape, field_height, field_width, padding, stride):
    N, C, H, W = x_shape
    H_padded, W_padded = H + 2 * padding, W + 2 * padding
    x_padded = np.zeros((N, C, H_padded, W_padded), dtype=cols.dtype)
    k, i, j = get_im2col_indices(x_shape, field_height, field_width, padding, stride)
    cols_reshaped = cols.reshape(C * field_height * field_width, -1, N).transpose(2, 0, 1)
    np.add.at(x_padded, (slice(None), k, i, j), cols_reshaped)
    if padding == 0:
        return x_padded
    return x_padded[:, :, padding:-padding, padding:-padding]


def conv_forward_fast(x, w, b, conv_param):
    N, C, H, W = x.shape
    num_filters, _, filter_height, filter_width = w.shape
    stride, pad = conv_param["stride"], conv_param["pad"]
    out_height = (H + 2 * pad - filter_height) // stride + 1
    out_width = (W + 2 * pad - filter_width) // stride + 1
    x_cols = im2col_indices(x, filter_height, filter_width, pad, stride)
    res = w.reshape((w.shape[0], -1)).dot(x_cols) + b.reshape(-1, 1)
    out = res.reshape(num_filters, out_height, out_width, N).transpose(3, 0, 1, 2)
    return out, (x, w, b, conv_param, x_cols)


def conv_backward_fast(dout, cache):
    x, w, b, conv_param, x_cols = cache
    stride, pad = conv_param["stride"], conv_param["pad"]
    db = np.sum(dout, axis=(0, 2, 3))
    num_filters, _, filter_height, filter_width = w.shape
    dout_reshaped = dout.transpose(1, 2, 3, 0).reshape(num_filters, -1)
    dw = dout_reshaped.dot(x_cols.T).reshape(w.shape)
    dx_cols = w.reshape(num_filters, -1).T.dot(dout_reshaped)
    dx = col2im_indices(dx_cols, x.shape, filter_height, filter_width, pad, stride)
    return dx, dw, db


def max_pool_forward_reshape(x, pool_param):
    N, C, H, W = x.shape
    ph, pw = pool_param["pool_height"], pool_param["pool_width"]
    x_reshaped = x.reshape(N, C, H // ph, ph, W // pw, pw)
    out = x_reshaped.max(axis=3).max(axis=4)
    return out, (x, x_reshaped, out)


def max_pool_backward_reshape(dout, cache):
    x, x_reshaped, out = cache
    dx_reshaped = np.zeros_like(x_reshaped)
    out_newaxis = out[:, :, :, np.newaxis, :, np.newaxis]
    mask = x_reshaped == out_newaxis
    dout_newaxis = dout[:, :, :, np.newaxis, :, np.newaxis]
    dout_broadcast, _ = np.broadcast_arrays(dout_newaxis, dx_reshaped)
    dx_reshaped[mask] = dout_broadcast[mask]
    dx_reshaped /= np.sum(mask, axis=(3, 5), keepdims=True)
    return dx_reshaped.reshape(x.shape)


def conv_fast_round_trip(x, w, b, dout_scale, conv_param):
    out, cache = conv_forward_fast(x, w, b, conv_param)
    dx, dw, db = conv_backward_fast(out * dout_scale, cache)
    return out, dx, dw, db


@pytest.mark.parametrize("dtype", [np.float64])
def test_im2col_conv_and_col2im_over_strides_pads_and_layouts(dtype):
    rng = rng_for(1020)
    transposed = conv_arguments(rng, 2, 2, 6, 5, dtype=dtype)
    transposed = (transposed[0].transpose(0, 1, 3, 2),) + transposed[1:]
    sets = [conv_arguments(rng, 2, 2, 5, 5, dtype=dtype),
            conv_arguments(rng, 1, 2, 7, 6, stride=2, pad=0, dtype=dtype),
            transposed,
            conv_arguments(rng, 2, 2, 5, 5, dtype=dtype)]
    f = run_calls(conv_fast_round_trip, sets, **TOLERANCE[dtype])
    no_internal_errors(f)
    compiled_some(f)


def pool_reshape_round_trip(x, dout, pool_param):
    out, cache = max_pool_forward_reshape(x, pool_param)
    return out, max_pool_backward_reshape(dout, cache)


def test_max_pool_by_reshape_spreads_ties_and_nan_as_numpy():
    rng = rng_for(1021)
    param = {"pool_height": 2, "pool_width": 2, "stride": 2}

    def arguments(n, h, w, ties=False):
        x = rng.standard_normal((n, 2, h, w))
        return (np.round(x) if ties else x), rng.standard_normal((n, 2, h // 2, w // 2)), param

    with_nan = arguments(2, 4, 4)
    with_nan[0][0, 0, 1, 1] = np.nan                        # a NaN window: no max matches
    sets = [arguments(2, 4, 4), arguments(1, 6, 4, ties=True), with_nan, arguments(3, 2, 8),
            arguments(2, 4, 4, ties=True)]
    f = run_calls(pool_reshape_round_trip, sets, **F64)
    no_internal_errors(f)
    compiled_some(f)


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


def softmax_loss(x, y):
    shifted = x - np.max(x, axis=1, keepdims=True)
    Z = np.sum(np.exp(shifted), axis=1, keepdims=True)
    log_probs = shifted - np.log(Z)
    probs = np.exp(log_probs)
    N = x.shape[0]
    loss = -np.sum(log_probs[np.arange(N), y]) / N
    dx = probs.copy()
    dx[np.arange(N), y] -= 1
    dx /= N
    return loss, dx


def losses_of_scores(scores, y):
    return svm_loss(scores, y), softmax_loss(scores, y)


def test_svm_and_softmax_losses_with_ties_nonfinite_and_one_row():
    rng = rng_for(1008)
    tied = np.round(rng.standard_normal((5, 4)))
    with_inf = rng.standard_normal((3, 4))
    with_inf[1, 2] = np.inf
    with_nan = rng.standard_normal((3, 4))
    with_nan[0, 0] = np.nan
    sets = [(rng.standard_normal((4, 3)), rng.integers(0, 3, 4)),
            (tied, rng.integers(0, 4, 5)),
            (with_inf, np.array([0, 2, 3])),
            (with_nan, np.array([1, 1, 1])),
            (rng.standard_normal((1, 5)), np.array([4])),
            (rng.standard_normal((6, 3)).astype(np.float32), rng.integers(0, 3, 6))]
    f = run_calls(losses_of_scores, sets, **F32)
    no_internal_errors(f)
    compiled_some(f)


def test_svm_loss_with_an_out_of_range_label_raises_as_numpy_does():
    rng = rng_for(1009)
    sets = [(rng.standard_normal((3, 4)), np.array([0, 1, 2])),
            (rng.standard_normal((3, 4)), np.array([0, 4, 2])),
            (rng.standard_normal((3, 4)), np.array([0, -1, 2]))]
    run_calls(svm_loss, sets, **F64)


def svm_loss_of_list_labels(scores, labels):
    y = np.array(labels)
    return svm_loss(scores, y)


def test_svm_loss_of_python_list_labels_that_change():
    rng = rng_for(1022)
    sets = [(rng.standard_normal((3, 4)), [0, 1, 2]), (rng.standard_normal((3, 4)), [3, 1, 0]),
            (rng.standard_normal((3, 4)), [2, 2, 2]), (rng.standard_normal((3, 4)), [0, 5, 1])]
    f = run_calls(svm_loss_of_list_labels, sets, **F64)
    no_internal_errors(f)


def avg_pool_forward_checked(x, pool_param):
    """The assignment's shape checks: an AssertionError where the windows do not tile."""
    ph, pw, stride = pool_param["pool_height"], pool_param["pool_width"], pool_param["stride"]
    N, C, H, W = x.shape
    assert (H - ph) % stride == 0, "Invalid height"
    assert (W - pw) % stride == 0, "Invalid width"
    H_out, W_out = 1 + (H - ph) // stride, 1 + (W - pw) // stride
    out = np.zeros((N, C, H_out, W_out), dtype=x.dtype)
    for i in range(H_out):
        for j in range(W_out):
            window = x[:, :, i * stride:i * stride + ph, j * stride:j * stride + pw]
            out[:, :, i, j] = np.mean(window, axis=(2, 3))
    return out


def test_average_pool_shape_asserts_raise_as_numpy_does():
    rng = rng_for(1023)
    sets = [(rng.standard_normal((2, 1, 4, 4)), {"pool_height": 2, "pool_width": 2, "stride": 2}),
            (rng.standard_normal((2, 1, 5, 5)), {"pool_height": 3, "pool_width": 3, "stride": 2}),
            (rng.standard_normal((2, 1, 5, 4)), {"pool_height": 2, "pool_width": 2, "stride": 2}),
            (rng.standard_normal((1, 1, 6, 6)), {"pool_height": 2, "pool_width": 2,
                                                 "stride": np.int64(2)}),
            (rng.standard_normal((2, 1, 4, 4)), {"pool_height": 2, "pool_width": 2, "stride": 2})]
    f = run_calls(avg_pool_forward_checked, sets, **F64)
    no_internal_errors(f)
    compiled_some(f)


# --- update rules filling a config dict lazily -------------------------------------------------
def sgd_momentum(w, dw, config=None):
    if config is None:
        config = {}
    config.setdefault("learning_rate", 1e-2)
    config.setdefault("momentum", 0.9)
    v = config.get("velocity", np.zeros_like(w))
    v = config["momentum"] * v - config["learning_rate"] * dw
    next_w = w + v
    config["velocity"] = v
    return next_w, config


def rmsprop(w, dw, config=None):
    if config is None:
        config = {}
    config.setdefault("learning_rate", 1e-2)
    config.setdefault("decay_rate", 0.99)
    config.setdefault("epsilon", 1e-8)
    config.setdefault("cache", np.zeros_like(w))
    config["cache"] = (config["decay_rate"] * config["cache"]
                       + (1 - config["decay_rate"]) * dw ** 2)
    next_w = w - config["learning_rate"] * dw / (np.sqrt(config["cache"]) + config["epsilon"])
    return next_w, config


def adam(w, dw, config=None):
    if config is None:
        config = {}
    config.setdefault("learning_rate", 1e-3)
    config.setdefault("beta1", 0.9)
    config.setdefault("beta2", 0.999)
    config.setdefault("epsilon", 1e-8)
    config.setdefault("m", np.zeros_like(w))
    config.setdefault("v", np.zeros_like(w))
    config.setdefault("t", 0)
    config["t"] += 1
    config["m"] = config["beta1"] * config["m"] + (1 - config["beta1"]) * dw
    config["v"] = config["beta2"] * config["v"] + (1 - config["beta2"]) * dw ** 2
    mt = config["m"] / (1 - config["beta1"] ** config["t"])
    vt = config["v"] / (1 - config["beta2"] ** config["t"])
    next_w = w - config["learning_rate"] * mt / (np.sqrt(vt) + config["epsilon"])
    return next_w, config


@pytest.mark.parametrize("rule", [sgd_momentum, rmsprop, adam])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_update_rules_threading_their_config_over_steps(rule, dtype):
    """The solver's loop: the config a step returns is the next step's argument; the first
    call passes None, later ones a dict the step filled (a different argument type)."""
    rng = rng_for(1010)
    f = jitted(rule)
    shapes = [(3, 4)] * 5 + [(5,)] * 3 + [(2, 1, 3)] * 2
    eager_config = jit_config = None
    w = None
    for step, shape in enumerate(shapes):
        if w is None or w.shape != shape:
            w = rng.standard_normal(shape).astype(dtype)
            eager_config = jit_config = None
        dw = rng.standard_normal(shape).astype(dtype)
        if step == 6:
            dw[0] = np.nan
        want_w, eager_config = rule(w, dw, copy.deepcopy(eager_config))
        got_w, jit_config = f(w, dw, copy.deepcopy(jit_config))
        assert_same(got_w, want_w, where=f"w after step {step}", **TOLERANCE[dtype])
        assert_same(jit_config, eager_config, where=f"config after step {step}",
                    **TOLERANCE[dtype])
        w = want_w
    no_internal_errors(f)
    compiled_some(f)


def test_adam_on_a_transposed_weight_with_an_int_learning_rate():
    rng = rng_for(1011)

    def arguments(lr):
        w = rng.standard_normal((4, 3)).T
        return w, rng.standard_normal((3, 4)), {"learning_rate": lr, "t": 5,
                                                 "m": np.ones((3, 4)), "v": np.ones((3, 4))}

    f = run_calls(adam, [arguments(1), arguments(1e-3), arguments(2), arguments(0)], **F64)
    no_internal_errors(f)


# --- a ThreeLayerConvNet whose bound loss(X, y=None) is jitted ---------------------------------
class ThreeLayerConvNet:
    """conv - relu - 2x2 max pool - affine - relu - affine - softmax, params in a dict."""

    def __init__(self, rng, input_dim=(1, 4, 4), num_filters=2, filter_size=3, hidden_dim=3,
                 num_classes=3, weight_scale=0.1, reg=0.01, dtype=np.float64):
        C, H, W = input_dim
        self.params = {}
        self.reg = reg
        self.dtype = dtype
        self.params["W1"] = weight_scale * rng.standard_normal(
            (num_filters, C, filter_size, filter_size))
        self.params["b1"] = np.zeros(num_filters)
        self.params["W2"] = weight_scale * rng.standard_normal(
            (num_filters * (H // 2) * (W // 2), hidden_dim))
        self.params["b2"] = np.zeros(hidden_dim)
        self.params["W3"] = weight_scale * rng.standard_normal((hidden_dim, num_classes))
        self.params["b3"] = np.zeros(num_classes)
        for k, v in self.params.items():
            self.params[k] = v.astype(dtype)

    def loss(self, X, y=None):
        W1, b1 = self.params["W1"], self.params["b1"]
        W2, b2 = self.params["W2"], self.params["b2"]
        W3, b3 = self.params["W3"], self.params["b3"]
        filter_size = W1.shape[2]
        conv_param = {"stride": 1, "pad": (filter_size - 1) // 2}
        pool_param = {"pool_height": 2, "pool_width": 2, "stride": 2}
        a1, cache1 = conv_relu_pool_forward(X, W1, b1, conv_param, pool_param)
        a2, cache2 = affine_relu_forward(a1, W2, b2)
        scores, cache3 = affine_forward(a2, W3, b3)
        if y is None:
            return scores
        loss, grads = 0, {}
        loss, dscores = softmax_loss(scores, y)
        for name in ("W1", "W2", "W3"):
            loss += 0.5 * self.reg * np.sum(self.params[name] ** 2)
        da2, grads["W3"], grads["b3"] = affine_backward(dscores, cache3)
        da1, grads["W2"], grads["b2"] = affine_relu_backward(da2, cache2)
        _, grads["W1"], grads["b1"] = conv_relu_pool_backward(da1, cache1)
        for name in ("W1", "W2", "W3"):
            grads[name] += self.reg * self.params[name]
        return loss, grads


def net_pair(seed, dtype):
    net = ThreeLayerConvNet(rng_for(seed), dtype=dtype)
    return net, copy.deepcopy(net)


@pytest.mark.parametrize("dtype", [np.float64])
def test_three_layer_convnet_bound_loss_with_and_without_labels(dtype):
    rng = rng_for(1012)
    eager_net, jit_net = net_pair(1013, dtype)
    loss = jitted(jit_net.loss)
    for step, n in enumerate([2, 2, 3, 3]):
        X = rng.standard_normal((n, 1, 4, 4)).astype(dtype)
        y = rng.integers(0, 3, n) if step % 3 != 2 else None
        want = eager_net.loss(X) if y is None else eager_net.loss(X, y)
        got = loss(X) if y is None else loss(X, y)
        assert_same(got, want, where=f"step {step}", **TOLERANCE[dtype])
    no_internal_errors(loss)
    compiled_some(loss)


def pool_after_a_product(x, w, dout):
    scores = (x @ w).reshape(2, 1, 4, 4)
    _, cache = max_pool_forward_reshape(scores, {"pool_height": 2, "pool_width": 2})
    return max_pool_backward_reshape(dout, cache)


def test_fast_max_pool_backward_after_a_product_runs_compiled_and_splits_ties_as_numpy():
    """mask = x == max over computed (inexact) values: the margin of that mask made every
    call run eagerly (each window's max element is within the error bound of itself), so
    the ThreeLayerConvNet loss never ran compiled. Only windows with two elements near
    their max are undecided now (margin_rules._near_ties); exact and 1-ulp ties still
    agree with NumPy."""
    rng = rng_for(1019)
    x, w = rng.standard_normal((2, 5)), rng.standard_normal((5, 16))
    dout = rng.standard_normal((2, 1, 2, 2))
    f = run_calls(pool_after_a_product, [(x, w, dout)], repeats=3, **F64)
    assert not f.stats()["eager_calls"], f.stats()["eager_calls"]
    tied = w.copy()
    tied[:, 1] = tied[:, 0]                                # an exact tie in window (0, 0)
    tied[:, 5] = np.nextafter(tied[:, 4], np.inf)          # a near tie in window (0, 1)
    tied[:, 10] = tied[:, 11] * (1 + 1e-15)
    f = run_calls(pool_after_a_product, [(x, w, dout), (x, tied, dout), (x, tied, -dout),
                                         (x, w, dout)], **F64)
    no_internal_errors(f)


# --- a Solver step: loss and update rule over the params dict ---------------------------------
class Solver:
    def __init__(self, model, update_rule, optim_config):
        self.model = model
        self.update_rule = update_rule
        self.optim_config = optim_config
        self.loss_history = []
        self.optim_configs = {p: {k: v for k, v in optim_config.items()}
                              for p in model.params}

    def _step(self, X_batch, y_batch):
        loss, grads = self.model.loss(X_batch, y_batch)
        self.loss_history.append(loss)
        for p, w in self.model.params.items():
            dw = grads[p]
            config = self.optim_configs[p]
            next_w, next_config = self.update_rule(w, dw, config)
            self.model.params[p] = next_w
            self.optim_configs[p] = next_config

    def check_accuracy(self, X, y):
        scores = self.model.loss(X)
        return np.mean(np.argmax(scores, axis=1) == y)


@pytest.mark.parametrize("rule", [adam])
def test_solver_steps_mutate_params_configs_and_history_as_eager(rule):
    rng = rng_for(1014)
    model = ThreeLayerConvNet(rng_for(1015))
    eager = Solver(model, rule, {"learning_rate": 1e-2})
    twin = Solver(copy.deepcopy(model), rule, {"learning_rate": 1e-2})
    step = jitted(twin._step)
    accuracy = jitted(twin.check_accuracy)
    for call, n in enumerate([2, 2, 3]):
        X = rng.standard_normal((n, 1, 4, 4))
        y = rng.integers(0, 3, n)
        assert step(X, y) is eager._step(X, y) is None
        assert_same(twin.model.params, eager.model.params, where=f"params after {call}", **F64)
        assert_same(twin.optim_configs, eager.optim_configs, where=f"configs after {call}",
                    **F64)
        assert_same(twin.loss_history, eager.loss_history, where=f"history after {call}",
                    **F64)
        assert_same(accuracy(X, y), eager.check_accuracy(X, y), **F64)
    no_internal_errors(step)
    no_internal_errors(accuracy)


# --- numeric gradient checks around a jitted function ----------------------------------------
def eval_numerical_gradient(f, x, h=1e-5):
    """gradient_check.py's loop: perturb x in place, call f, restore."""
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"], op_flags=["readwrite"])
    while not it.finished:
        ix = it.multi_index
        old = x[ix]
        x[ix] = old + h
        fxph = f(x)
        x[ix] = old - h
        fxmh = f(x)
        x[ix] = old
        grad[ix] = (fxph - fxmh) / (2 * h)
        it.iternext()
    return grad


def eval_numerical_gradient_array(f, x, df, h=1e-5):
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"], op_flags=["readwrite"])
    while not it.finished:
        ix = it.multi_index
        old = x[ix]
        x[ix] = old + h
        pos = f(x).copy()
        x[ix] = old - h
        neg = f(x).copy()
        x[ix] = old
        grad[ix] = np.sum((pos - neg) * df) / (2 * h)
        it.iternext()
    return grad


def test_numeric_gradient_of_a_jitted_conv_sees_each_in_place_perturbation():
    rng = rng_for(1016)
    x = rng.standard_normal((1, 2, 4, 4))
    w = rng.standard_normal((2, 2, 3, 3))
    b = rng.standard_normal(2)
    dout = rng.standard_normal((1, 2, 4, 4))
    param = {"stride": 1, "pad": 1}
    conv = jitted(conv_forward_naive)
    for wrt in ("x", "w", "b"):
        def eager_f(value, wrt=wrt):
            args = dict(x=x, w=w, b=b, conv_param=param)
            args[wrt] = value
            return conv_forward_naive(**args)[0]

        def jit_f(value, wrt=wrt):
            args = dict(x=x, w=w, b=b, conv_param=param)
            args[wrt] = value
            return conv(**args)[0]

        point = {"x": x, "w": w, "b": b}[wrt]
        want = eval_numerical_gradient_array(eager_f, point.copy(), dout)
        got = eval_numerical_gradient_array(jit_f, point.copy(), dout)
        assert_same(got, want, where=f"d{wrt}", rtol=1e-6, atol=1e-8)
    _, analytic_dw, _ = conv_backward_naive(dout, (x, w, b, param))[0:3]
    no_internal_errors(conv)
    compiled_some(conv)


def test_numeric_gradient_of_the_jitted_net_loss_over_each_parameter():
    rng = rng_for(1017)
    eager_net, jit_net = net_pair(1018, np.float64)
    loss = jitted(jit_net.loss)
    X = rng.standard_normal((2, 1, 4, 4))
    y = np.array([1, 2])
    for name in ("b1", "W3"):
        want = eval_numerical_gradient(lambda _: eager_net.loss(X, y)[0],
                                       eager_net.params[name])
        got = eval_numerical_gradient(lambda _: loss(X, y)[0], jit_net.params[name])
        assert_same(got, want, where=name, rtol=1e-6, atol=1e-8)
        assert_same(jit_net.params, eager_net.params, where=f"params after d{name}")
    no_internal_errors(loss)
