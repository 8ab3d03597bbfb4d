"""Parallel maps (issue 13): loops whose iterations only write disjoint index-affine regions
are batched into whole-array work (tracer/loop_vectorize.py) and compile to fused kernels
with no loop. Eager vs compiled for the naive conv (both loop nestings, strides, pads,
odd, prime and unit sizes), max pooling, direct sliding_window_view; one compile per
bucket; loops that are not parallel maps stay loops and stay exact."""

import logging

import numpy as np
import pytest
from model_corpus import conv_forward_naive
from real_model_checks import all_compiled

import tracejit as tj
from tracejit.tracer.loop_vectorize import run_batched, vectorize_loops
from tracejit.tracer.ops.control import run_body
from tracejit.tracer.tracing import trace


def conv_four_deep(x, w, b, stride, pad):
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    H_out = 1 + (H + 2 * pad - HH) // stride
    W_out = 1 + (W + 2 * pad - WW) // stride
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    out = np.zeros((N, F, H_out, W_out))
    for n in range(N):
        for f in range(F):
            for i in range(H_out):
                for j in range(W_out):
                    patch = x_pad[n, :, i * stride:i * stride + HH, j * stride:j * stride + WW]
                    out[n, f, i, j] = np.sum(patch * w[f]) + b[f]
    return out


def max_pool_naive(x, ph, pw, s):
    N, C, H, W = x.shape
    H_out = 1 + (H - ph) // s
    W_out = 1 + (W - pw) // s
    out = np.zeros((N, C, H_out, W_out))
    for i in range(H_out):
        for j in range(W_out):
            out[:, :, i, j] = np.max(x[:, :, i * s:i * s + ph, j * s:j * s + pw], axis=(2, 3))
    return out


def row_softmax(x):
    """A parallel map over rows with a reduction and a transcendental in the body."""
    out = np.zeros(x.shape)
    for i in range(x.shape[0]):
        e = np.exp(x[i] - np.max(x[i]))
        out[i] = e / np.sum(e)
    return out


def gather_rows(x, idx):
    """The body gathers with a traced index array: no batching rule for gather."""
    out = np.zeros((idx.shape[0], x.shape[1]))
    for i in range(idx.shape[0]):
        out[i] = np.take(x, idx[i], axis=0)
    return out


def running_sum_rows(x):
    """Not a parallel map: a value carried between iterations next to the write."""
    out = np.zeros(x.shape)
    acc = np.zeros(x.shape[1])
    for i in range(x.shape[0]):
        acc = acc + x[i]
        out[i] = acc
    return out


def jitted(function, **options):
    return tj.jit(function, dynamic=True, cache="memory", **options)


def loops_left(f, *args):
    return f.lower(*args).ir.count("loop(")


def conv_args(rng, shape, filters=4, channels=3, size=3, batch=1):
    return (rng.standard_normal((batch, channels, *shape)),
            rng.standard_normal((filters, channels, size, size)), rng.standard_normal(filters))


@pytest.mark.parametrize("function", [conv_forward_naive, conv_four_deep])
@pytest.mark.parametrize("stride, pad", [(1, 1), (1, 0), (2, 1), (2, 0)])
def test_conv_compiles_to_loop_free_kernels(function, stride, pad):
    rng = np.random.default_rng(stride * 3 + pad)
    f = jitted(function, static_argnames=("stride", "pad"))
    shapes = [(11, 9), (13, 11), (10, 12), (16, 15)]  # odd, prime, even; bucket [9, 16]
    for shape in shapes:
        for _ in range(2):  # traced (or compiled) then compiled
            args = conv_args(rng, shape, batch=2 if function is conv_four_deep else 1)
            np.testing.assert_allclose(f(*args, stride, pad), function(*args, stride, pad),
                                       rtol=1e-11, atol=1e-11)
    assert f.stats()["compiles"] == 1
    assert all_compiled(f, 2 * len(shapes))
    assert loops_left(f, *args, stride, pad) == 0


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (2, 2), (3, 3), (5, 1), (17, 19), (31, 3)])
def test_conv_unit_and_prime_sizes(shape):
    rng = np.random.default_rng(sum(shape))
    f = jitted(conv_forward_naive, static_argnames=("stride", "pad"))
    for _ in range(2):
        args = conv_args(rng, shape)
        np.testing.assert_allclose(f(*args, 1, 1), conv_forward_naive(*args, 1, 1),
                                   rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("pool, stride, shape", [((2, 2), 2, (8, 8)), ((2, 2), 2, (9, 7)),
                                                 ((3, 3), 1, (7, 11)), ((3, 2), 2, (13, 5))])
def test_max_pool(pool, stride, shape):
    rng = np.random.default_rng(shape[0])
    f = jitted(max_pool_naive, static_argnames=("ph", "pw", "s"))
    for extra in (0, 1):
        x = rng.standard_normal((2, 3, shape[0] + extra, shape[1] + extra))
        np.testing.assert_array_equal(f(x, *pool, stride), max_pool_naive(x, *pool, stride))
    assert loops_left(f, x, *pool, stride) == 0


def test_row_softmax_vectorized():
    rng = np.random.default_rng(5)
    f = jitted(row_softmax)
    for n in (5, 6, 7, 8):  # one bucket
        x = rng.standard_normal((n, 3))
        np.testing.assert_allclose(f(x), row_softmax(x), rtol=1e-12, atol=1e-15)
    assert f.stats()["compiles"] == 1
    assert loops_left(f, x) == 0


def test_primitive_without_rule_stays_a_loop_and_is_logged(caplog):
    rng = np.random.default_rng(6)
    f = jitted(gather_rows)
    with caplog.at_level(logging.INFO, logger="tracejit.loops"):
        for n in (5, 6):
            x, idx = rng.standard_normal((7, 3)), rng.integers(0, 7, n)
            np.testing.assert_array_equal(f(x, idx), gather_rows(x, idx))
    assert "no batching rule for `gather`" in caplog.text
    assert loops_left(f, x, idx) > 0


def test_carried_value_stays_a_loop_and_exact(caplog):
    rng = np.random.default_rng(7)
    f = jitted(running_sum_rows)
    with caplog.at_level(logging.INFO, logger="tracejit.loops"):
        for n in (5, 8, 11):
            x = rng.standard_normal((n, 4))
            np.testing.assert_allclose(f(x), running_sum_rows(x), rtol=1e-12, atol=1e-12)
    assert "not a parallel map" in caplog.text
    assert loops_left(f, x) > 0


def test_sliding_window_view_compiled_and_differentiated():
    def windows_score(x, w):
        v = np.lib.stride_tricks.sliding_window_view(x, (3, 2), axis=(0, 1))
        return np.sum(np.tanh(v * w), axis=(2, 3))

    rng = np.random.default_rng(8)
    f = jitted(windows_score)
    w = rng.standard_normal((3, 2))
    for shape in ((6, 5), (9, 7)):
        x = rng.standard_normal(shape)
        np.testing.assert_allclose(f(x, w), windows_score(x, w), rtol=1e-12)
    x = tj.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    loss = (f(x, w) ** 2).sum()
    loss.backward()
    # the gradient by central differences
    base = x.numpy()
    expected = np.zeros_like(base)
    for index in np.ndindex(base.shape):
        bumped = [base.copy(), base.copy()]
        bumped[0][index] += 1e-6
        bumped[1][index] -= 1e-6
        values = [np.sum(windows_score(b, w) ** 2) for b in bumped]
        expected[index] = (values[0] - values[1]) / 2e-6
    np.testing.assert_allclose(x.grad, expected, rtol=1e-5, atol=1e-6)


def test_batched_run_matches_the_sequential_interpreter(monkeypatch):
    """run_body's fast path (run_batched: NumPy over the whole batch) against the
    per-iteration reference, through the interpreter on the un-vectorized graph."""
    import tracejit.tracer.loop_vectorize as loop_vectorize
    from tracejit.codegen.loops import LoopProgram

    rng = np.random.default_rng(9)
    args = conv_args(rng, (9, 8))
    graph = trace(conv_forward_naive, *args, 2, 1, dynamic=True).graph
    program = LoopProgram(graph, graph.name)
    calls = []

    def counted(*arguments):
        result = run_batched(*arguments)
        calls.append(result is not None)
        return result

    for shape in ((9, 8), (12, 11)):
        x = rng.standard_normal((1, 3, *shape))
        monkeypatch.setattr(loop_vectorize, "run_batched", counted)
        fast = program(x, args[1], args[2])[0]
        monkeypatch.setattr(loop_vectorize, "run_batched", lambda *arguments: None)
        slow = program(x, args[1], args[2])[0]
        want = conv_forward_naive(x, args[1], args[2], 2, 1)
        np.testing.assert_allclose(fast, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(slow, want)  # the same NumPy calls as eager
    assert calls and all(calls)
    assert run_body  # the reference the interpreter falls back to


def test_pass_leaves_non_parallel_loops_alone():
    rng = np.random.default_rng(10)
    graph = trace(running_sum_rows, rng.standard_normal((6, 3)), dynamic=True).graph
    assert vectorize_loops(graph) is graph
