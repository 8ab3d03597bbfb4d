"""Memory of a tracing call: intermediates are freed when the function drops them, and
nothing is left in a reference cycle when the call returns.

A trace used to keep every intermediate array alive until it finished (gelu on
4096 x 4096: 600 MB over the eager run's peak), and then in a cycle (the trace's context
and its tracers) that only a garbage collection freed. These tests run with the collector
off, so a cycle shows up as memory that stays.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from tracejit import jit, value_and_grad

SIDE = 512  # float32: 1 MB per array, over the tracer's weak-value threshold
ARRAY = SIDE * SIDE * 4


def gelu(x):
    # nine intermediates of x's size
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


@pytest.fixture
def collector_off():
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        gc.enable()


def _traced_call(function, *args):
    """The result of ``function``'s first call, and (memory held after it, peak during
    it) in bytes over what was allocated before."""
    before, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    result = function(*args)
    after, peak = tracemalloc.get_traced_memory()
    return result, after - before, peak - before


def test_first_call_frees_intermediates_without_a_collection(collector_off):
    x = np.random.default_rng(0).standard_normal((SIDE, SIDE)).astype(np.float32)
    compiled = jit(gelu, cache="memory")
    result, held, peak = _traced_call(compiled, x)
    np.testing.assert_allclose(result, gelu(x), rtol=1e-6, atol=1e-6)
    # the result itself, and the compiled program's small change; a cycle kept all nine
    assert held < 2 * ARRAY, f"{held / ARRAY:.1f} arrays' worth still held after the call"
    # eager NumPy holds x, the result and about two temporaries at a time
    assert peak < 5 * ARRAY, f"the traced call peaked at {peak / ARRAY:.1f} arrays"
    assert compiled.stats()["eager_calls"] == {}
    np.testing.assert_allclose(compiled(x), gelu(x), rtol=1e-6, atol=1e-6)


def test_gradient_traces_still_read_large_forward_values(collector_off):
    # value_and_grad inside jit reads the forward's values back for the backward pass
    rng = np.random.default_rng(1)
    x = rng.standard_normal((SIDE, SIDE)).astype(np.float32)
    w = rng.standard_normal((SIDE, SIDE)).astype(np.float32) * 0.05

    def loss(w, x):
        hidden = np.tanh(x @ w)
        return (hidden * hidden).mean()

    def step(w, x):
        value, grad = value_and_grad(loss)(w, x)
        return value, w - 0.1 * grad

    jit(lambda a, b: a @ b, cache="memory")(w, x)  # the GEMM's workspaces: once a process
    compiled = jit(step, cache="memory")
    (value, new_w), held, _ = _traced_call(compiled, w, x)
    hidden = np.tanh(x @ w)
    want_grad = x.T @ ((2.0 / hidden.size) * hidden * (1.0 - hidden * hidden))
    np.testing.assert_allclose(value, loss(w, x), rtol=1e-4)
    np.testing.assert_allclose(new_w, w - 0.1 * want_grad, rtol=1e-3, atol=1e-5)
    # the two results and the compile's own garbage (llvmlite's IR: ~1.5 MB, its cycles)
    assert held < 4 * ARRAY, f"{held / ARRAY:.1f} arrays' worth still held after the call"
    assert compiled.stats()["eager_calls"] == {}


def test_loop_reading_large_intermediates(collector_off):
    # a captured loop reads values computed before it (free vars of its body)
    x = np.random.default_rng(2).standard_normal((SIDE, SIDE)).astype(np.float32)

    def smooth(x):
        scale = np.abs(x) + 1.0
        total = np.zeros_like(x)
        for _ in range(4):
            total = total * 0.5 + x / scale
        return total

    compiled = jit(smooth, cache="memory")
    result, held, _ = _traced_call(compiled, x)
    np.testing.assert_allclose(result, smooth(x), rtol=1e-5, atol=1e-6)
    assert held < 3 * ARRAY, f"{held / ARRAY:.1f} arrays' worth still held after the call"
    np.testing.assert_allclose(compiled(x), smooth(x), rtol=1e-5, atol=1e-6)
