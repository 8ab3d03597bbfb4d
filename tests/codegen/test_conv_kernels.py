"""The compiled convolution kernels (``tracejit.codegen.conv``) against eager NumPy (the
primitives' reference implementations) and, where it is installed, PyTorch: forward and
both gradients over a table of shapes and parameters (strides, padding wider than the
kernel, dilation, groups, 1x1 and prime-sized images, batches of 0 and 1, widths that
need several vectors and a tail, non-contiguous inputs), NaN and Inf in every operand, the
thread pool at several thread counts, one compile per size bucket for a training step,
and how many tile functions a program compiles (compile time is per bucket)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.testing import assert_compiled_matches_eager

try:  # optional: a second reference where it is installed
    import torch
    import torch.nn.functional as torch_functional
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

# name: (x shape, w shape, conv2d keyword arguments)
CASES = {
    "3x3-same": ((2, 3, 9, 11), (5, 3, 3, 3), dict(padding=1)),
    "unit-image-1x1": ((2, 3, 1, 1), (4, 3, 1, 1), {}),
    "unit-image-padded": ((1, 2, 1, 1), (3, 2, 3, 3), dict(padding=1)),
    "prime-dilated-strided": ((1, 3, 13, 17), (4, 3, 5, 5), dict(stride=3, padding=2,
                                                                  dilation=2)),
    "batch-1-wide": ((1, 2, 5, 71), (3, 2, 3, 3), dict(padding=1)),  # several vectors + tail
    "batch-0": ((0, 3, 6, 7), (2, 3, 3, 3), dict(padding=1)),
    "depthwise-strided": ((2, 3, 10, 9), (3, 1, 3, 3), dict(groups=3, stride=2, padding=1)),
    "groups-uneven-blocks": ((1, 4, 8, 12), (10, 2, 3, 2), dict(groups=2, padding=(1, 0))),
    "row-kernel": ((2, 2, 7, 19), (3, 2, 1, 5), dict(padding=(0, 2))),
    "column-kernel": ((2, 2, 19, 7), (3, 2, 5, 1), dict(padding=(2, 0), stride=(2, 1))),
    "stride-past-kernel": ((1, 2, 11, 13), (3, 2, 2, 2), dict(stride=3)),
    "padding-past-kernel": ((1, 2, 5, 6), (3, 2, 2, 2), dict(padding=3)),
    "same-even-dilated": ((1, 2, 9, 10), (3, 2, 4, 3), dict(padding="same", dilation=2)),
    # rows of several register tiles: the middle ones read no padding (unmasked loads)
    "wide-interior": ((1, 2, 4, 300), (5, 2, 3, 3), dict(padding=1)),
    "wide-strided": ((1, 2, 5, 301), (5, 2, 3, 3), dict(padding=1, stride=(1, 2))),
    "wide-stride-3-dilated": ((1, 2, 5, 333), (4, 2, 2, 3), dict(stride=3, dilation=2)),
    # big enough for the thread pool; 21 filters leave a partial tile block
    "threaded": ((3, 8, 23, 37), (21, 8, 3, 3), dict(padding=1)),
}


def arguments(case, dtype, seed=0):
    x_shape, w_shape, options = CASES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    return x, w, b, options


def tolerance(dtype):
    return (2e-4, 2e-4) if dtype == np.float32 else (1e-10, 1e-10)


# float64 (the other tile width: 8 lanes, other edge masks) on the geometries whose edges
# differ most; float32 on all
FLOAT64_CASES = ("unit-image-padded", "prime-dilated-strided", "batch-0",
                 "groups-uneven-blocks", "wide-strided", "threaded")


@pytest.mark.parametrize("case, dtype", [(case, np.float32) for case in CASES] + [
    (case, np.float64) for case in FLOAT64_CASES],
    ids=lambda value: {np.float32: "f32", np.float64: "f64"}.get(value, value))
def test_forward_and_gradients_match_eager(case, dtype):
    x, w, b, options = arguments(case, dtype)
    rng = np.random.default_rng(1)
    out_shape = nn.conv2d(x, w, b, **options).shape
    scale = rng.standard_normal(out_shape).astype(dtype)

    def loss(x, w, b):  # every output position gets its own gradient
        return np.sum(np.tanh(nn.relu(nn.conv2d(x, w, b, **options))) * scale)

    rtol, atol = tolerance(dtype)
    summary = assert_compiled_matches_eager(loss, (x, w, b), grads=True, rtol=rtol,
                                            atol=atol, dynamic=True, cache="memory",
                                            fallback="raise")
    assert summary["compiled_calls"] >= 1


@pytest.mark.parametrize("layout", ["channels-last", "strided"])
def test_non_contiguous_inputs(layout):
    rng = np.random.default_rng(2)
    if layout == "channels-last":  # an NHWC buffer seen as NCHW
        x = np.transpose(rng.standard_normal((2, 9, 10, 3)), (0, 3, 1, 2))
        w = np.transpose(rng.standard_normal((4, 3, 3, 3)), (0, 1, 3, 2))
    else:
        x = rng.standard_normal((2, 6, 18, 21))[:, ::2, 1::2, ::2]
        w = rng.standard_normal((4, 6, 3, 3))[:, ::2]
    assert not x.flags.c_contiguous and not w.flags.c_contiguous
    b = rng.standard_normal(4)

    def loss(x, w, b):
        return np.sum(np.sin(nn.conv2d(x, w, b, padding=1, stride=(1, 2))))

    assert_compiled_matches_eager(loss, (x, w, b), grads=True, dynamic=True, cache="memory",
                                  fallback="raise")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("where", ["input", "weight", "output-gradient"])
def test_nan_and_inf_propagate_as_in_eager(where, dtype):
    """Zero padding is multiplied like any input: an Inf weight makes the outputs whose
    window covers padding NaN (0 * Inf), eagerly, in PyTorch and compiled; an Inf output
    gradient makes the weight gradient of taps that read padding NaN."""
    x, w, b, _ = arguments("3x3-same", dtype, seed=3)
    out_shape = (2, 5, 9, 11)
    scale = np.ones(out_shape, dtype)
    if where == "input":
        x[0, 1, 4, 0], x[1, 2, 0, 5] = np.nan, np.inf
    elif where == "weight":
        w[1, 0, 0, 0], w[3, 2, 2, 1] = np.inf, -np.inf
    else:
        scale[0, 2, 0, 3], scale[1, 4, 8, 10] = np.inf, np.nan

    def loss(x, w, b):
        return np.sum(nn.conv2d(x, w, b, padding=1, stride=(1, 1)) * scale)

    rtol, atol = tolerance(dtype)
    assert_compiled_matches_eager(loss, (x, w, b), grads=True, rtol=rtol, atol=atol,
                                  dynamic=True, cache="memory", fallback="raise")
    if where == "weight":  # the padding row and column really do give NaN
        with np.errstate(all="ignore"):
            out = tj.jit(lambda x, w, b: nn.conv2d(x, w, b, padding=1), cache="memory")
            out(x, w, b)
            result = out(x, w, b)
        assert np.isnan(result[:, 1, 0, :]).all() and np.isnan(result[:, 1, :, 0]).all()
        assert out.stats()["compiled_calls"] == 1


def test_a_training_step_compiles_once_per_size_bucket():
    rng = np.random.default_rng(4)
    w, b = rng.standard_normal((6, 3, 3, 3)) * 0.3, rng.standard_normal(6)

    def loss(x, w, b):
        return np.mean(nn.relu(nn.conv2d(x, w, b, padding=1, stride=2)) ** 2)

    step = tj.jit(tj.value_and_grad(loss, argnums=(0, 1, 2)), dynamic=True, cache="memory")
    eager = tj.value_and_grad(loss, argnums=(0, 1, 2))
    small = [(9, 13), (16, 10), (11, 11), (15, 16)]  # (8, 16]
    large = [(17, 30), (32, 19), (23, 29)]  # (16, 32]
    for height, width in small + large:
        x = rng.standard_normal((2, 3, height, width))
        for _ in range(2):
            value, gradients = step(x, w, b)
            want_value, want_gradients = eager(x, w, b)
            np.testing.assert_allclose(value, want_value, rtol=1e-12)
            for got, want in zip(gradients, want_gradients):
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    stats = step.stats()
    assert stats["compiles"] == 2, step.explain()
    assert stats["compiled_calls"] == 2 * len(small + large) - 2


@pytest.mark.parametrize("channels, filters", [(12, 12), (6, 13)])
def test_a_program_compiles_few_tile_functions(channels, filters):
    """Filters past the last full block reuse the full tile and one masked tile serves
    every tail width: a forward + backward over filter counts that no block divides
    (dynamic) compiles two tiles per convolution and one weight-gradient tile per group of
    kernel columns, not one per remainder size; with as many channels as filters, the
    input gradient runs the forward's tiles (whose epilogue, the relu mask, it skips)."""
    rng = np.random.default_rng(5)
    x, w, b = rng.standard_normal((2, channels, 12, 40)), \
        rng.standard_normal((filters, channels, 3, 3)), rng.standard_normal(filters)

    def loss(x, w, b):
        return np.sum(nn.relu(nn.conv2d(x, w, b, padding=1)))

    step = tj.jit(tj.grad(loss, argnums=(0, 1, 2)), dynamic=True, cache="memory",
                  fallback="raise")
    step(x, w, b)  # traced; the second call runs the kernels
    # the input gradient runs the forward's tile, told not to apply its epilogue
    for got, want in zip(step(x, w, b), tj.grad(loss, argnums=(0, 1, 2))(x, w, b)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    assert step.stats()["compiled_calls"] == 1
    lowered = step.lower(x, w, b)
    assert sum("(conv)" in kernel for kernel in lowered.kernels) == 3, lowered.kernels
    tiles = set(re.findall(r"define[^@]*@(tj_conv_w?tile\w+)\(", lowered.llvm_ir))
    assert len(tiles) <= (3 if channels == filters else 5), sorted(tiles)


def test_no_unmasked_tile_where_every_tile_reads_the_padding():
    """'same' 5x5 convolutions of rows at most 32 wide (the bucket (16, 32]): with 16 lanes
    a tile covers 16 outputs and both of a row's tiles read padding, so only the masked
    tile is compiled; every width of the bucket still agrees with eager, forward and
    backward, from one compile."""
    from tracejit.codegen.conv import lanes_for

    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 3, 5, 5)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)

    def loss(x, w, b):
        return np.sum(nn.relu(nn.conv2d(x, w, b, padding=2)) * np.cos(x[:, :1]))

    step = tj.jit(tj.grad(loss, argnums=(0, 1, 2)), dynamic=True, cache="memory",
                  fallback="raise")
    eager = tj.grad(loss, argnums=(0, 1, 2))
    for width in (32, 17, 23):  # the first call traces, the others run the kernels
        x = rng.standard_normal((2, 3, 20, width)).astype(np.float32)
        for got, want in zip(step(x, w, b), eager(x, w, b)):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    assert step.stats()["compiles"] == 1 and step.stats()["compiled_calls"] == 2, step.explain()
    tiles = re.findall(r"define[^@]*@tj_conv_tile_v\d+f\d+_\d+_\d+_(m?)_", step.lower(
        x, w, b).llvm_ir)
    assert tiles and (lanes_for(np.float32) < 16 or all(tiles)), tiles


# name: (the layer over conv2d's product and the bias, whether the tiles apply it as they
# are stored (tracejit.codegen.conv_epilogue) or a loop over each row does)
EPILOGUES = {
    "bias-relu": (lambda out, b: nn.relu(out + b.reshape(-1, 1, 1)), True),
    "bias": (lambda out, b: out + b[:, None, None], True),
    "relu-zero-first": (lambda out, b: np.maximum(0, b.reshape(-1, 1, 1) + out), True),
    "bias-first-relu6": (lambda out, b: np.minimum(np.maximum(b.reshape(1, -1, 1, 1) + out,
                                                              0), 6), True),
    "leaky": (lambda out, b: np.where(out - b[:, None, None] > 0, out, 0.1 * out), True),
    # the relu mask of a backward; np.full constants of the product's dtype
    "relu-mask": (lambda out, b: np.where(out + b.reshape(-1, 1, 1) <= 0, np.zeros(
        (), out.dtype), np.full((1, 1), 1, out.dtype)), True),
    "negated-clamp": (lambda out, b: -np.minimum(-(out + b[:, None, None]), 1.0), True),
    # a slice of the bias is no buffer the tiles read
    "sliced-bias": (lambda out, b: out * b[:1].reshape(1, 1, 1) - b[:, None, None], False),
    "per-column": (lambda out, b: out + np.arange(out.shape[-1], dtype=out.dtype), False),
    "tanh": (lambda out, b: np.tanh(out + b.reshape(-1, 1, 1)), False),
}
# (x shape, w shape, conv2d keyword arguments): odd sizes, strides, groups, a filter count
# no tile block divides
EPILOGUE_SHAPES = {
    "odd-same": ((2, 3, 13, 37), (10, 3, 3, 3), dict(padding=1)),
    "strided-groups": ((1, 4, 17, 29), (6, 2, 3, 5), dict(stride=(2, 3), padding=(1, 2),
                                                          groups=2)),
    "wide-5x5": ((1, 3, 9, 70), (19, 3, 5, 5), dict(padding=2)),
}


def _tile_names(function, *arguments):
    return set(re.findall(r"define[^@]*@(tj_conv_tile\w+)\(",
                          function.lower(*arguments).llvm_ir))


# Every epilogue in float32 on the shape with strides and groups, which exercises the most
# tile code, and on one more shape in turn (each shape meets every kind of epilogue);
# float64 (the other tile width) on that shape for every other epilogue (CI time: ~1.3 s
# each, 22 cases).
_SHAPE_NAMES = list(EPILOGUE_SHAPES)
EPILOGUE_CASES = [
    (epilogue, shape, dtype)
    for number, epilogue in enumerate(EPILOGUES)
    for shape in dict.fromkeys(("strided-groups", _SHAPE_NAMES[number % len(_SHAPE_NAMES)]))
    for dtype in (np.float32, np.float64)
    if dtype == np.float32 or (shape == "strided-groups" and number % 2 == 0)]


@pytest.mark.parametrize("epilogue, shape, dtype", EPILOGUE_CASES,
                         ids=lambda value: {np.float32: "f32", np.float64: "f64"}.get(
                             value, value))
def test_epilogue_on_the_tiles_matches_eager(epilogue, shape, dtype):
    """The bias and activation computed on the register tiles as they are stored agree with
    eager NumPy, forward and gradients, where the tiles compute them (their functions are
    named for the epilogue) and where a loop over each row still does."""
    expression, on_tiles = EPILOGUES[epilogue]
    x_shape, w_shape, options = EPILOGUE_SHAPES[shape]
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)

    def layer(x, w, b):
        return expression(nn.conv2d(x, w, **options), b)

    compiled = tj.jit(layer, cache="memory", fallback="raise")
    compiled(x, w, b)  # traced; the second call runs the kernels
    got, want = compiled(x, w, b), layer(x, w, b)
    assert compiled.stats()["compiled_calls"] == 1
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    assert got.dtype == want.dtype
    tiles = _tile_names(compiled, x, w, b)
    assert any(re.search(r"_e[0-9a-f]{10}$", name) for name in tiles) == on_tiles, tiles
    if epilogue == "relu-mask":  # piecewise constant: no gradient to compare
        return
    scale = rng.standard_normal(want.shape).astype(dtype)

    def loss(x, w, b):  # b reaches the loss even where the layer only compares with it
        return np.sum(layer(x, w, b) * scale) + np.sum(b) * 0.5

    assert_compiled_matches_eager(loss, (x, w, b), grads=True, rtol=rtol, atol=atol,
                                  dynamic=True, cache="memory", fallback="raise")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_epilogue_on_the_tiles_keeps_nan_inf_and_signed_zeros(dtype):
    """NaN and Inf in the bias and the product, and -0.0 through np.maximum(0, .) (which
    keeps it) and nn.relu (which gives +0.0), as eagerly: to the bit."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 2, 6, 21)).astype(dtype)
    w = rng.standard_normal((5, 2, 3, 3)).astype(dtype)
    x[0, 0, 2, 3] = np.nan
    w[4] = 0.0  # filter 4's product is +-0.0 everywhere
    b = np.array([np.inf, -np.inf, np.nan, 1.0, -0.0], dtype)
    for layer in (lambda x, w, b: nn.relu(nn.conv2d(x, w, b, padding=1)),
                  lambda x, w, b: np.maximum(0, nn.conv2d(x, w, b, padding=1))):
        compiled = tj.jit(layer, cache="memory", fallback="raise")
        with np.errstate(all="ignore"):
            compiled(x, w, b)  # traced; the second call runs the kernels
            got, want = compiled(x, w, b), layer(x, w, b)
        assert compiled.stats()["compiled_calls"] == 1
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        assert any(re.search(r"_e[0-9a-f]{10}$", name) for name in _tile_names(
            compiled, x, w, b))


@pytest.mark.parametrize("alpha_shape", [(1,), (), (7, 1, 1), (1, 7, 1, 1)])
def test_prelu_slopes_are_read_by_the_tiles(alpha_shape):
    """A PReLU's slope, one for the layer or one per filter, is a buffer the tiles read
    once per filter (or once); forward and gradients agree with eager."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 11, 23)).astype(np.float32)
    w = rng.standard_normal((7, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    alpha = rng.uniform(0.05, 0.3, alpha_shape).astype(np.float32)

    def layer(x, w, b, alpha):
        out = nn.conv2d(x, w, b, padding=1, stride=(1, 2))
        return np.where(out > 0, out, alpha * out)

    compiled = tj.jit(layer, cache="memory", fallback="raise")
    compiled(x, w, b, alpha)  # traced; the second call runs the kernels
    np.testing.assert_allclose(compiled(x, w, b, alpha), layer(x, w, b, alpha), rtol=2e-4,
                               atol=2e-4)
    assert compiled.stats()["compiled_calls"] == 1
    assert any(re.search(r"_e[0-9a-f]{10}$", name) for name in _tile_names(
        compiled, x, w, b, alpha))
    scale = rng.standard_normal((2, 7, 11, 12)).astype(np.float32)
    assert_compiled_matches_eager(lambda x, w, b, alpha: np.sum(layer(x, w, b, alpha) * scale),
                                  (x, w, b, alpha), grads=True, rtol=2e-4, atol=2e-4,
                                  dynamic=True, cache="memory", fallback="raise")


def test_kernels_1x13_and_11x3_do_not_share_a_tile():
    """Two convolutions of one program whose tiles differ only in the kernel's shape, 1x13
    and 11x3, with the same blocking: their tile functions were both named ``..._113_...``
    and the second convolution ran the first's tile (wrong results)."""
    rng = np.random.default_rng(14)
    x1 = rng.standard_normal((1, 2, 20, 40)).astype(np.float32)
    x2 = rng.standard_normal((1, 2, 20, 30)).astype(np.float32)
    w1 = rng.standard_normal((4, 2, 1, 13)).astype(np.float32)
    w2 = rng.standard_normal((4, 2, 11, 3)).astype(np.float32)

    def two(x1, x2, w1, w2):  # both outputs are 28 wide
        return nn.conv2d(x1, w1), nn.conv2d(x2, w2)

    compiled = tj.jit(two, cache="memory", fallback="raise")
    compiled(x1, x2, w1, w2)  # traced; the second call runs the kernels
    for got, want in zip(compiled(x1, x2, w1, w2), two(x1, x2, w1, w2)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    assert compiled.stats()["compiled_calls"] == 1


THREADS_SCRIPT = textwrap.dedent("""
    import numpy as np, tracejit as tj
    from tracejit import nn
    from tracejit.testing import assert_compiled_matches_eager
    rng = np.random.default_rng(6)
    x, w, b = rng.standard_normal((3, 8, 23, 37)), rng.standard_normal((22, 4, 3, 3)), \\
        rng.standard_normal(22)
    scale = rng.standard_normal((3, 22, 12, 19))  # 11 filters per group
    def loss(x, w, b):
        return np.sum(nn.conv2d(x, w, b, padding=1, stride=2, groups=2) * scale)
    print(assert_compiled_matches_eager(loss, (x, w, b), grads=True, dynamic=True,
                                        cache="memory", fallback="raise"))
    def layer(x, w, b):  # the bias and relu (its mask, in the backward) on the tiles
        return nn.relu(nn.conv2d(x, w, b, padding=1, groups=2))
    print(assert_compiled_matches_eager(layer, (x, w, b), dynamic=True, cache="memory",
                                        fallback="raise"))
    print(assert_compiled_matches_eager(lambda x, w, b: np.sum(layer(x, w, b) * x[:, :1]),
                                        (x, w, b), grads=True, dynamic=True, cache="memory",
                                        fallback="raise"))
""")


@pytest.mark.parametrize("threads", ["1", "3"])
def test_results_do_not_depend_on_the_thread_count(threads):
    environment = dict(os.environ, TRACEJIT_NUM_THREADS=threads)
    done = subprocess.run([sys.executable, "-c", THREADS_SCRIPT], env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compiled_calls" in done.stdout


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("case", ["prime-dilated-strided", "depthwise-strided",
                                  "groups-uneven-blocks", "padding-past-kernel", "threaded"])
def test_compiled_gradients_match_torch(case):
    x, w, b, options = arguments(case, np.float64, seed=7)
    scale = np.random.default_rng(8).standard_normal(nn.conv2d(x, w, b, **options).shape)

    def loss(x, w, b):
        return np.sum(nn.conv2d(x, w, b, **options) * scale)

    step = tj.jit(tj.value_and_grad(loss, argnums=(0, 1, 2)), dynamic=True, cache="memory",
                  fallback="raise")
    step(x, w, b)
    value, gradients = step(x, w, b)
    assert step.stats()["compiled_calls"] == 1
    leaves = [torch.from_numpy(v).requires_grad_() for v in (x, w, b)]
    want = (torch_functional.conv2d(*leaves, **options) * torch.from_numpy(scale)).sum()
    want.backward()
    np.testing.assert_allclose(value, want.item(), rtol=1e-10)
    for got, leaf in zip(gradients, leaves):
        np.testing.assert_allclose(got, leaf.grad.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64), (np.int32, np.float32),
                                    (np.float64, np.float32)], ids=str)
def test_mixed_dtypes_compile_in_the_common_float_dtype(dtypes):
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((2, 3, 7, 9)) * 3).astype(dtypes[0])
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtypes[1])
    expected = nn.conv2d(x, w, padding=1)
    assert expected.dtype == np.matmul.resolve_dtypes((x.dtype, w.dtype, None))[-1]
    layer = tj.jit(lambda x, w: nn.conv2d(x, w, padding=1), cache="memory", fallback="raise")
    layer(x, w)
    result = layer(x, w)
    assert result.dtype == expected.dtype and layer.stats()["compiled_calls"] == 1
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    if x.dtype.kind == "f":
        def loss(x, w):
            return np.sum(np.sin(nn.conv2d(x, w, padding=1)))

        assert_compiled_matches_eager(loss, (x, w), grads=True, rtol=1e-5, atol=1e-5,
                                      cache="memory", fallback="raise")
        leaves = [tj.tensor(value, requires_grad=True) for value in (x, w)]
        tj.jit(loss, cache="memory")(*leaves).backward()
        assert [leaf.grad.dtype for leaf in leaves] == [x.dtype, w.dtype]


@pytest.mark.parametrize("dilation, convolutions", [(1, 1), (3, 4)])
def test_strided_input_gradient_convolves_the_phases(dilation, convolutions):
    """A stride-2 input gradient convolves the output gradient once per (row, column)
    phase of the input with the taps that reach it (an undilated kernel: all four phases
    stacked as output channels of one convolution; dilated: one convolution each): no copy
    of the gradient with zeros spread between its rows (four times the multiply-adds)."""
    rng = np.random.default_rng(10)
    x, w = rng.standard_normal((2, 3, 15, 14)), rng.standard_normal((4, 3, 3, 3))

    def loss(x, w):
        return np.sum(np.sin(nn.conv2d(x, w, padding=1, stride=2, dilation=dilation)))

    step = tj.jit(tj.grad(loss), dynamic=True, cache="memory", fallback="raise")
    assert_compiled_matches_eager(step, (x, w), (x[:, :, :9, :13].copy(), w))
    graph = step.lower(x, w).ir
    assert " pad(" not in graph.split("= conv2d(")[-1], graph  # nothing padded after
    assert graph.count("= conv2d(") == 1 + convolutions, graph
