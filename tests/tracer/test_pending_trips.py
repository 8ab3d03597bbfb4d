"""A captured loop's remaining first-call trips wait until something reads their results
(tracer/pending.py): the first call's result then comes from the compiled program. Each
test compares with NumPy, and checks who computed the result where that is the point."""

import contextlib
import io

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.tracing import trace


def rnn(x, Wx, Wh, b):
    N, T, _ = x.shape
    h = np.zeros((N, Wh.shape[0]))
    hs = np.zeros((N, T, Wh.shape[0]))
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        hs[:, t, :] = h
    return hs, h


def args(T, seed=0, N=3, D=4, H=5):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, T, D)), rng.standard_normal((D, H)) * 0.5,
            rng.standard_normal((H, H)) * 0.5, rng.standard_normal(H))


def jitted(function):
    return tj.jit(function, cache="memory", dynamic=True)


def assert_same(got, want):
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w), (type(g), type(w))
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [3, 4, 17, 64])
def test_first_call_result_comes_from_the_program(T):
    f = jitted(rnn)
    assert_same(f(*args(T)), rnn(*args(T)))
    stats = f.stats()
    # nothing read the loop's results while tracing: the program computed the result
    assert stats["compiled_calls"] == 1 and stats["traced_calls"] == 0, stats


def test_work_after_the_loop_is_deferred_too():
    def head(x, Wx, Wh, b):
        hs, h = rnn(x, Wx, Wh, b)
        scores = hs.mean(axis=1) @ Wh.T + h
        return scores, np.exp(-scores)

    f = jitted(head)
    assert_same(f(*args(9)), head(*args(9)))
    assert f.stats()["traced_calls"] == 0


def test_loss_accumulated_in_the_loop_keeps_its_scalar_type():
    def loss(x, Wx, Wh, b):
        h, total = np.zeros((x.shape[0], Wh.shape[0])), 0.0
        for t in range(x.shape[1]):
            h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
            total += np.sum(h * h)
        return total, total / x.shape[1]

    f = jitted(loss)
    for T in (5, 11, 6):
        assert_same(f(*args(T, seed=T)), loss(*args(T, seed=T)))


def test_a_branch_on_the_loop_result_reads_it_and_decides_as_numpy():
    def branchy(x, Wx, Wh, b):
        hs, h = rnn(x, Wx, Wh, b)
        if h.sum() > 0:  # reads the pending value: the trips run during the trace
            return hs * 2.0
        return hs - 1.0

    f = jitted(branchy)
    for seed in range(6):
        assert_same(f(*args(7, seed)), branchy(*args(7, seed)))


def test_a_numpy_buffer_written_after_the_loop_is_read_as_it_was():
    def overwrite(x, Wx, Wh, b):
        hs, h = rnn(x, Wx, Wh, b)
        bias = np.ones(h.shape[1])
        out = h + bias  # deferred: it must add the ones, not what bias holds later
        bias[:] = 100.0
        return out, bias

    f = jitted(overwrite)
    assert_same(f(*args(6)), overwrite(*args(6)))
    assert_same(f(*args(9, 1)), overwrite(*args(9, 1)))


def test_an_argument_written_after_the_loop_gets_numpy_values_once():
    def write_back(x, Wx, Wh, b):
        hs, h = rnn(x, Wx, Wh, b)
        b += h.mean(axis=0)
        return hs

    for T in (5, 8):
        mine, theirs = args(T), args(T)
        f = jitted(write_back)
        assert_same(f(*mine), write_back(*theirs))
        np.testing.assert_allclose(mine[3], theirs[3], rtol=1e-12)


def test_a_print_after_the_loop_prints_once_with_the_value():
    def printing(x, Wx, Wh, b):
        hs, h = rnn(x, Wx, Wh, b)
        print("last", h[0, 0])
        return hs

    f = jitted(printing)
    seen, expected = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(seen):
        got = f(*args(5))
    with contextlib.redirect_stdout(expected):
        want = printing(*args(5))
    assert_same(got, want)
    assert seen.getvalue() == expected.getvalue()


def test_an_index_out_of_range_in_a_later_trip_raises_as_numpy():
    def reads_past_the_end(x):
        total = np.zeros(x.shape[1])
        for t in range(x.shape[0]):
            total = total + x[t + 1]  # the last trip reads x[T]: NumPy raises
        return total

    x = np.ones((6, 3))
    with pytest.raises(IndexError):
        reads_past_the_end(x)
    with pytest.raises(IndexError):
        jitted(reads_past_the_end)(x)


def test_trace_computes_outputs_unless_asked_to_be_lazy():
    traced = trace(rnn, *args(8), dynamic=True)
    assert not traced.pending
    assert_same(traced.outputs, rnn(*args(8)))
    lazy = trace(rnn, *args(8), dynamic=True, lazy=True)
    assert lazy.pending
    assert_same(lazy.force_outputs(), rnn(*args(8)))
    assert not lazy.pending


def test_gradient_traces_run_every_trip_now():
    def loss(x, Wx, Wh, b):
        hs, _ = rnn(x, Wx, Wh, b)
        return (hs * hs).sum()

    value, grads = tj.jit(tj.value_and_grad(loss, argnums=(1, 2)), cache="memory",
                          dynamic=True)(*args(7))
    want_value, want_grads = tj.value_and_grad(loss, argnums=(1, 2))(*args(7))
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
