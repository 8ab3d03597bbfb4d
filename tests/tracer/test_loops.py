"""Loop capture (issue 13): a Python ``for t in range(T)`` over a dynamic dim becomes one
``loop`` equation; eager vs traced vs compiled over trip counts, and one compile per
bucket."""

import numpy as np
import pytest

import runtime as tj
from tracer.ir import verify
from tracer.ops.control import loop_p
from tracer.tracing import trace

N, D, H = 2, 3, 4  # distinct from every T below, so no two dims share a symbol


def rnn(x, Wx, Wh, b, h0):
    N, T, D = x.shape
    h = h0
    h_all = np.zeros((N, T, Wh.shape[0]))
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return h_all, h


def accumulate(x, w):
    loss = 0.0
    for t in range(x.shape[0]):
        loss += np.sum(np.tanh(x[t] * w))
    return loss


def running_max(x):
    m = x[0] * 0.0
    for t in range(x.shape[0]):
        m = np.maximum(m, x[t])
    return m


def weights(rng):
    return (rng.standard_normal((D, H)) * 0.5, rng.standard_normal((H, H)) * 0.5,
            rng.standard_normal(H), rng.standard_normal((N, H)))


def loops_in(graph):
    return [eqn for eqn in graph.equations if eqn.prim is loop_p]


@pytest.mark.parametrize("T", [0, 1, 2, 3, 5, 7, 11, 13, 16, 17])
def test_rnn_compiled_matches_eager(T):
    rng = np.random.default_rng(T)
    params = weights(rng)
    f = tj.jit(rnn, dynamic=True, cache="memory", loops="capture")
    for _ in range(2):  # the traced call and the compiled one
        x = rng.standard_normal((N, T, D))
        for got, want in zip(f(x, *params), rnn(x, *params)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_rnn_trace_has_one_loop_equation_per_result():
    rng = np.random.default_rng(0)
    traced = trace(rnn, rng.standard_normal((N, 7, D)), *weights(rng), dynamic=True)
    found = loops_in(traced.graph)
    assert len(found) == 2 and {eqn.params_dict["output"] for eqn in found} == {0, 1}
    assert not traced.graph.shape_guards  # the length is not pinned
    verify(traced.graph)
    text = str(traced.graph)
    assert "loop(" in text and "    " in text


def test_rnn_one_compile_per_bucket():
    rng = np.random.default_rng(1)
    params = weights(rng)
    f = tj.jit(rnn, dynamic=True, cache="memory", loops="capture")
    for T in (5, 6, 7, 8):
        x = rng.standard_normal((N, T, D))
        for got, want in zip(f(x, *params), rnn(x, *params)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert f.stats()["compiles"] == 1


@pytest.mark.parametrize("function", [accumulate, running_max])
@pytest.mark.parametrize("T", [0, 1, 2, 3, 5, 6, 7, 8])
def test_carried_values(function, T):
    rng = np.random.default_rng(T)
    f = tj.jit(function, dynamic=True, cache="memory", loops="capture")
    args = (rng.standard_normal((max(T, 1) if function is running_max else T, 3)),)
    if function is accumulate:
        args += (rng.standard_normal(3),)
    np.testing.assert_allclose(f(*args), function(*args), rtol=1e-12, atol=1e-12)


def test_accumulation_is_captured():
    rng = np.random.default_rng(2)
    traced = trace(accumulate, rng.standard_normal((9, 3)), rng.standard_normal(3),
                   dynamic=True)
    assert len(loops_in(traced.graph)) == 1


def dict_history(x):
    hs = {-1: x[0] * 0.0}
    for t in range(x.shape[0]):
        hs[t] = np.tanh(hs[t - 1] + x[t])
    return hs[len(hs) - 2]


def test_uncaptured_loop_unrolls_and_stays_exact():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 2))
    traced = trace(dict_history, x, dynamic=True)
    assert not loops_in(traced.graph)
    np.testing.assert_allclose(traced.outputs, dict_history(x))


def test_gradients_unroll():
    rng = np.random.default_rng(4)
    x = tj.tensor(rng.standard_normal((6, 3)), requires_grad=True)
    w = rng.standard_normal(3)
    f = tj.jit(accumulate, dynamic=True, cache="memory", loops="capture")
    loss = f(x, w)
    loss.backward()
    expected = (1 - np.tanh(x.numpy() * w) ** 2) * w
    np.testing.assert_allclose(x.grad, expected, rtol=1e-10)
