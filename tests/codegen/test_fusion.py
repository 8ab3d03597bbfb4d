"""What fuses, by kernel count and kind (the claims of ``codegen/schedule.py``), with the
fused programs' results equal to eager NumPy at several sizes of their buckets:

* ``gelu(x * w + b)``: one pointwise kernel (broadcast operands read in place), also the
  exact gelu (erf), in float32 and float64;
* ``softmax(layer_norm(x))`` over rows: one kernel whose row reductions are stages;
* ``relu(x @ W + b)``: one matmul kernel with the bias and activation as its epilogue;
* views (transpose, slices, pad, concatenate) inline into their consumer;
* a reduction read by two kernels, or over a leading axis, gets its own kernel.

Also: every program records its compile time, in total and per phase (no thresholds:
speed lives in ``benchmarks/codegen_speed.py``), and fused kernels are vectorized.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from compiled_checks import assert_within, bucket_sizes, compiled

import tracejit as tj
from tracejit import nn, tracer

F32 = np.float32


def data(shape, seed):
    return np.random.default_rng([seed, *shape]).standard_normal(shape).astype(F32)


def gelu_affine(x, w, b):
    return nn.gelu(x * w + b)


def exact_gelu_affine(x, w, b):
    return nn.gelu(x * w + b, approximate="none")


def layer_norm_softmax(x):
    return nn.softmax(nn.layer_norm(x), axis=-1)


def dense_relu(x, weights, bias):
    return nn.relu(x @ weights + bias)


def mlp_forward(x, w1, b1, w2, b2):
    hidden = nn.relu(x @ w1 + b1)
    return nn.softmax(hidden @ w2 + b2, axis=-1)


def close(actual, expected, rtol):
    """Elementwise within ``rtol`` of NumPy relative to the result's scale (composites of
    exp/tanh with their stated ulp bounds, and reassociated row sums)."""
    scale = np.abs(expected).astype(np.float64) + np.max(np.abs(expected), initial=1e-30)
    assert_within(actual, expected, rtol * scale, "compiled vs eager")


# name: (function, example shapes, expected kernel kinds, relative tolerance)
FUSED = {
    "gelu(x*w+b)": (gelu_affine, [(33, 65), (65,), (65,)], ["pointwise"], 2e-6),
    "softmax(layer_norm(x))": (layer_norm_softmax, [(9, 65)], ["pointwise"], 2e-6),
    "relu(x@W+b)": (dense_relu, [(9, 33), (33, 17), (17,)], ["matmul"], 1e-5),
    "softmax rows": (lambda x: nn.softmax(x, axis=-1), [(5, 129)], ["pointwise"], 2e-6),
    "layer_norm rows": (lambda x: nn.layer_norm(x), [(5, 129)], ["pointwise"], 2e-6),
    "views inline": (lambda x, y: np.tanh(np.pad(x.T[::-1], ((0, 0), (1, 3))))
                     + np.concatenate([y, y], axis=1), [(4, 5), (5, 4)], ["pointwise"], 2e-6),
    "matmul then reduce": (lambda x, w: np.sum(x @ w, axis=1), [(9, 5), (5, 17)],
                           ["matmul", "reduce"], 1e-5),
    "reduction over the leading axis": (lambda x: x - x.mean(axis=0), [(9, 17)],
                                        ["reduce", "pointwise"], 1e-6),
    "reduction read by two kernels": (lambda x: (x - x.max(), x * x.max()), [(9, 17)],
                                      ["reduce", "pointwise", "pointwise"], 0.0),
}


@pytest.mark.parametrize("case", list(FUSED))
def test_kernel_count_and_results(case):
    function, shapes, kinds, rtol = FUSED[case]
    program = compiled(("fusion", case), function, *[data(s, 0) for s in shapes])
    assert [kernel.kind for kernel in program.kernels] == kinds
    assert program.kernel_count == len(kinds)
    for run, size in enumerate(bucket_sizes(shapes[0][-1])):
        # The last dim of the first operand (and every dim of the same size) varies.
        def resize(shape, traced=shapes[0][-1], size=size):
            return tuple(size if dim == traced else dim for dim in shape)

        inputs = [data(resize(shape), run + 1) for shape in shapes]
        outputs = program(*inputs)
        with np.errstate(all="ignore"):
            expected = function(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for actual, want in zip(outputs, expected):
            close(actual, np.asarray(want), rtol)


def test_mlp_forward_kernels():
    """x @ W1 + b1 -> relu -> @ W2 + b2 -> softmax: two matmul kernels (the first with its
    bias and relu as epilogue) and at most one more for the softmax."""
    shapes = [(16, 784), (784, 64), (64,), (64, 10), (10,)]
    program = compiled(("fusion", "mlp"), mlp_forward, *[data(s, 0) for s in shapes])
    kinds = [kernel.kind for kernel in program.kernels]
    assert kinds.count("matmul") == 2 and len(kinds) <= 3, kinds
    inputs = [data(shape, 1) for shape in shapes]
    close(program(*inputs)[0], mlp_forward(*inputs), 1e-5)


def test_compile_time_is_recorded_per_program_and_phase():
    program = compiled(("fusion", "gelu(x*w+b)"), gelu_affine,
                       *[data(s, 0) for s in FUSED["gelu(x*w+b)"][1]])
    seconds = program.compile_seconds
    phases = {name: value for name, value in seconds.items() if name != "total"}
    assert seconds["total"] > 0
    assert phases and all(value > 0 for value in phases.values()), seconds
    assert seconds["total"] >= sum(phases.values()) * 0.999


def test_fused_kernel_is_vectorized():
    """The contiguous inner loop of the fused gelu kernel is SIMD code after optimization."""
    program = compiled(("fusion", "gelu(x*w+b)"), gelu_affine,
                       *[data(s, 0) for s in FUSED["gelu(x*w+b)"][1]])
    assert " x float>" in program.optimized_ir


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda dtype: dtype.__name__)
def test_exact_gelu_is_one_vectorized_kernel_equal_to_eager(dtype):
    """gelu(approximate="none") fuses into one pointwise kernel whose erf is SIMD code, and
    equals eager gelu."""
    shapes = [(33, 65), (65,), (65,)]
    program = compiled(("fusion", "exact gelu", dtype), exact_gelu_affine,
                       *[data(shape, 0).astype(dtype) for shape in shapes])
    assert [kernel.kind for kernel in program.kernels] == ["pointwise"]
    assert f" x {'float' if dtype == np.float32 else 'double'}>" in program.optimized_ir
    assert not re.findall(r"call (?:fastcc )?(?:float|double) @(?!llvm\.)\w+",
                          program.optimized_ir)
    for run, size in enumerate(bucket_sizes(65)):
        inputs = [(data((33, size), run + 1) * 3).astype(dtype),
                  data((size,), run + 1).astype(dtype), data((size,), run + 2).astype(dtype)]
        (actual,) = program(*inputs)
        close(actual, exact_gelu_affine(*inputs), 2e-6 if dtype == np.float32 else 1e-14)


def matmul_scan(x, w):
    """A recurrence over the time axis (the tracer unrolls the loop): one matmul kernel
    per step, the same code at a different ``x[:, step]`` each time."""
    state = np.zeros((x.shape[0], w.shape[0]), x.dtype)
    for step in range(x.shape[1]):
        state = np.tanh(x[:, step] + state @ w)
    return state


def running_sum(x):
    """``total`` inlines every earlier step unless the scheduler bounds expressions."""
    state, total = np.zeros_like(x[:, 0]), np.zeros_like(x[:, 0])
    for step in range(x.shape[1]):
        state = np.tanh(x[:, step] + 0.5 * state)
        total = total + state
    return total


def test_unrolled_steps_share_one_kernel_function():
    x, w = data((4, 12, 8), 0), data((8, 8), 1) * 0.3
    program = compiled(("fusion", "matmul scan"), matmul_scan, x, w, dynamic=False)
    assert program.kernel_count >= 12
    functions = re.findall(r'define internal void @"?(\w+)_impl"?\(', program.llvm_ir)
    assert len(functions) <= 2, functions
    close(program(x, w)[0], matmul_scan(x, w), 1e-5)


def test_long_unrolled_expression_is_split_into_bounded_kernels():
    from tracejit.codegen.schedule import MAX_INLINED, schedule

    x = data((5, 60), 0)
    # Unrolled on purpose (60 constant steps would be captured as a loop): the scheduler
    # must bound the expression a long unrolled chain builds.
    traced = tracer.trace(running_sum, x, dynamic=False, capture_loops=False)
    plan = schedule(traced.graph)
    sizes = [len(plan.scheduler.inlined(kernel.root)) for kernel in plan.kernels]
    assert len(plan.kernels) > 1 and max(sizes) <= MAX_INLINED + 4, sizes
    program = compiled(("fusion", "running sum"), running_sum, x, dynamic=False,
                       capture_loops=False)
    close(program(x)[0], running_sum(x), 1e-5)


# Reductions over different axes read by one pointwise consumer: a kernel's rows follow
# its first stage, so each other set of axes needs its own kernel (a whole-array sum
# beside a row sum was computed per row: a + a.sum(1, keepdims) + a.sum() gave 13, not 31).
MIXED_AXES = [
    ("row sum + total", lambda a: a + np.sum(a, axis=1, keepdims=True) + np.sum(a)),
    ("total + row sum", lambda a: a + np.sum(a) + np.sum(a, axis=1, keepdims=True)),
    ("row max - column mean", lambda a: a - np.max(a, axis=1, keepdims=True)
     + np.mean(a, axis=0)),
    ("3-D: last axis, last two, all", lambda a: a * np.sum(a, axis=-1, keepdims=True)
     - np.min(a, axis=(1, 2), keepdims=True) + np.mean(a)),
    ("same axes twice", lambda a: a / np.sum(a, axis=-1, keepdims=True)
     + np.max(a, axis=-1, keepdims=True)),
]


@pytest.mark.parametrize("name, function", MIXED_AXES, ids=[name for name, _ in MIXED_AXES])
@pytest.mark.parametrize("shape", [(4, 6), (3, 5, 7), (1, 9), (17, 3)])
def test_reductions_over_different_axes_in_one_expression(name, function, shape):
    if name.startswith("3-D") and len(shape) != 3:
        pytest.skip("a 3-D expression")
    rng = np.random.default_rng(len(name) + sum(shape))
    a = rng.standard_normal(shape)
    f = tj.jit(function, cache="memory")
    for _ in range(2):  # the traced call and a compiled one
        np.testing.assert_allclose(f(a), function(a), rtol=1e-12, atol=1e-12)
    assert f.stats()["compiled_calls"] == 1
