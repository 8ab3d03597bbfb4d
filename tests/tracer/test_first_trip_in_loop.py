"""Iteration 0 of a captured loop joins the loop (tracer/loops.py ``_capture``) when what
enters it is what every trip takes; else it stays peeled. Either way results are NumPy's:
each test compares with eager over several lengths, and checks which way the loop went."""

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.ops.control import loop_p
from tracejit.tracer.tracing import trace


def loop_starts(function, *args):
    graph = trace(function, *args, dynamic=True).graph
    return [eqn.params_dict["start"] for eqn in graph.equations if eqn.prim is loop_p]


def check(function, make, lengths=(3, 4, 7, 11, 16)):
    f = tj.jit(function, cache="memory", dynamic=True)
    for length in lengths:
        for _ in range(2):
            got, want = f(*make(length)), function(*make(length))
            for g, w in zip(np.atleast_1d(got) if not isinstance(got, tuple) else got,
                            np.atleast_1d(want) if not isinstance(want, tuple) else want):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert not f.stats()["eager_calls"], f.explain()
    return f


def sequence(length, seed=0):
    rng = np.random.default_rng(seed + length)
    return rng.standard_normal((length, 3)), rng.standard_normal((3, 3)) * 0.5


def rnn(x, w):
    h = np.zeros(w.shape[0])
    hs = np.zeros((x.shape[0], w.shape[0]))
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        hs[t] = h
    return hs


def test_an_rnn_runs_its_first_trip_in_the_loop():
    assert loop_starts(rnn, *sequence(6)) == [0, 0]  # one equation per carried value
    check(rnn, sequence)


def fixed_size_state(x, w):
    h = np.zeros(3)  # a NumPy constant of shape (3,), the body's h is (s1,): peeled
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h


def test_a_constant_state_of_another_shape_keeps_the_first_trip_peeled():
    assert loop_starts(fixed_size_state, *sequence(6)) == [1]
    check(fixed_size_state, sequence)


def state_from_an_argument(x, w, h0):
    h = h0
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h


def test_an_argument_entering_the_loop_joins_it():
    make = lambda length: (*sequence(length), np.ones(3))  # noqa: E731
    assert loop_starts(state_from_an_argument, *make(6)) == [0]
    check(state_from_an_argument, make)


def accumulate_in_place(x, w):
    out = np.zeros((x.shape[0] + 2, 3))
    for t in range(x.shape[0]):
        out[t:t + 3] += x[t] * w[0]  # += into a window: the buffer object is kept
    return out


def test_a_buffer_updated_in_place_enters_the_loop_as_it_was():
    assert loop_starts(accumulate_in_place, *sequence(6)) == [0]
    check(accumulate_in_place, sequence)


def first_step_differs(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        if t == 0:
            h = x[t] * 2.0
        else:
            h = np.tanh(h @ w + x[t])
    return h


def test_a_branch_on_the_index_keeps_the_first_trip_peeled():
    assert loop_starts(first_step_differs, *sequence(6)) == [1]
    check(first_step_differs, sequence)


def reads_the_previous_row(x, w):
    total = np.zeros(3)
    for t in range(x.shape[0]):
        total = total + x[t - 1] * w[1]  # at t = 0 NumPy reads the last row
    return total


def test_a_read_before_the_start_at_trip_0_is_numpys_last_row():
    check(reads_the_previous_row, sequence)


def python_float_loss(x, w):
    loss = 0.0
    for t in range(x.shape[0]):
        loss += float(0.5) * np.sum(x[t] @ w)
    return loss


def test_a_python_float_accumulator_keeps_the_first_trip_peeled():
    assert loop_starts(python_float_loss, *sequence(6)) == [1]
    check(python_float_loss, sequence)


def backwards(x, w):
    h = np.zeros(3)
    hs = np.zeros_like(x)
    for t in reversed(range(x.shape[0])):
        h = np.tanh(x[t] - h @ w)
        hs[t] = h
    return hs


def test_a_reversed_loop_starts_at_its_last_index():
    check(backwards, sequence)


def branch_on_data(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(h @ w + x[t])
        if h.sum() > 5.0:  # never true: a guard recorded at every trip, trip 0's too
            h = h * 0.0
    return h


def test_a_guard_in_the_first_trip_keeps_it_peeled():
    assert loop_starts(branch_on_data, *sequence(6)) in ([1], [])
    check(branch_on_data, sequence)


@pytest.mark.parametrize("length", [3, 5, 8])
def test_gradients_through_a_loop_whose_first_trip_joined_it(length):
    def loss(w, x):
        return np.sum(rnn(x, w) ** 2)

    x, w = sequence(length)
    value, grad = tj.jit(tj.value_and_grad(loss), cache="memory", dynamic=True)(w, x)
    want_value, want_grad = tj.value_and_grad(loss)(w, x)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)
