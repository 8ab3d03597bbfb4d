"""Model-style loops that compiled once per call shape or ran unrolled (round 22,
"still eager or slow"): a training loop's trip count from an argument
(``tracer/loop_trip_counts.py``) with costs kept every k steps
(``tracer/loop_selected_appends.py``). Each compares compiled with eager NumPy: results,
and lists as NumPy leaves them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from real_model_checks import assert_same

from tracejit import jit
from tracejit.runtime.guards import compile_guard
from tracejit.runtime.serialize import InvalidEntry, spec_from_json, spec_to_json


def _same(got, want):
    """Compiled ``got`` is eager ``want``: arrays close, numbers of the same type, lists of
    the same length, entry by entry."""
    assert_same(got, want, rtol=1e-9, atol=1e-12)


def _data():
    rng = np.random.default_rng(22)
    X = rng.standard_normal((3, 20))
    return X, (rng.random((1, 20)) > 0.5).astype(np.float64)


def _fit(X, Y, num_iterations, print_cost=True):
    w, costs, sevens = np.zeros((X.shape[0], 1)), [], []
    for i in range(num_iterations):
        A = np.tanh(w.T @ X)
        cost = float(np.mean((A - Y) ** 2))
        w = w - 0.5 * (X @ (A - Y).T) / X.shape[1]
        if i % 10 == 0:
            costs.append(cost)
        if print_cost and (i + 1) % 7 == 0:
            sevens.append(cost)
    return w, costs, sevens


def test_a_trip_count_argument_compiles_once_for_every_count():
    """fit(X, Y, 1000), fit(X, Y, 2000), ...: the count was pinned (a constant of each
    trace: one compile per value, eager past max_variants), and the costs kept under
    ``i % 10 == 0`` were Python structure of the count. Now the second value makes the count
    a dim bound at each call and the kept costs a strided slice of the loop's buffer."""
    X, Y = _data()
    compiled = jit(_fit)
    for count in (40, 53, 75):
        _same(compiled(X, Y, count), _fit(X, Y, count))
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == 2, stats


def _fit_last(x, num_iterations):
    w, costs = np.zeros(3), []
    for i in range(num_iterations):
        w = w - 0.1 * (w - x)
        cost = float(np.sum((w - x) ** 2))
        if i % 10 == 0 or i == num_iterations - 1:  # the last trip: a dim still (round 22)
            costs.append(cost)
    return w, costs


def test_a_test_that_reads_the_count_pins_it_and_stays_compiled():
    compiled = jit(_fit_last)
    for count in (30, 41):  # the second: a run-time input until the test reads it
        _same(compiled(np.ones(3), count), _fit_last(np.ones(3), count))
    assert compiled.stats()["eager_calls"] == {}


def _scan(X):
    h, kept = np.zeros(X.shape[0]), []
    for i in range(X.shape[1]):
        h = np.tanh(h + X[:, i])
        if i % 4 == 1:
            kept.append(h.copy())
    return h, kept


def test_a_selected_append_in_a_loop_over_a_dynamic_length_compiles_once_per_bucket():
    """The trips ``i % 4 == 1`` selects are a slice for every length: the loop was unrolled
    (one compile per length) because they would pin it."""
    compiled = jit(_scan, dynamic=True)
    rng = np.random.default_rng(3)
    for length in (9, 12, 16):
        X = rng.standard_normal((3, length))
        _same(compiled(X), _scan(X))
    assert compiled.stats()["compiles"] == 1, compiled.stats()


def _descend(x, steps):
    w = np.zeros(3)
    for _ in range(steps):
        w = w - 0.1 * (w - x)
    return w


def test_a_trip_count_entry_is_stored_checked_and_refused_when_forged():
    compiled = jit(_descend, cache=False)
    for steps in (5, 6):
        compiled(np.ones(3), steps)
    spec = compiled._variants[-1].spec
    counts = [source for source in spec.inputs if source[0] == "count"]
    assert counts == [("count", 1, counts[0][2])], spec.inputs
    stored = json.loads(json.dumps(spec_to_json(spec, _descend)))
    guard = compile_guard(spec_from_json(stored, _descend))
    assert guard((np.ones(3), 9), {}) is not None
    assert guard((np.ones(3), 2), {}) is None  # fewer than 3 trips: a trace of its own
    for forged in (0, 7):  # the array leaf, past the leaves
        tampered = json.loads(json.dumps(stored))
        tampered["inputs"] = [["count", forged, counts[0][2]] if source[0] == "count" else
                              source for source in tampered["inputs"]]
        with pytest.raises(InvalidEntry):
            spec_from_json(tampered, _descend)


def _detached_end(xs, h, W, U):
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ W + h @ U)
        h = h.detach()
    return h


def _truncated_bptt(xs, h, W, U):
    loss = 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ W + h.detach() @ U)
        loss = loss + (h ** 2).sum()
    return h, loss


@pytest.mark.parametrize("fn", [_detached_end, _truncated_bptt])
def test_detach_of_a_carried_tensor_in_a_captured_loop(fn):
    """``h = h.detach()`` ending a step: the loop's result counted as depending on W and U
    through the loop (it required grad, and backward filled W.grad, where eager's h has
    no history). ``h.detach()`` of the carried h read in the step (truncated BPTT) ran
    eagerly: a traced trip's h was no Tensor to the tracer. Both compiled now, results and
    gradients as eager's."""
    from tracejit import tensor

    rng = np.random.default_rng(5)
    W0, U0 = rng.standard_normal((2, 3, 3)) * 0.5
    compiled = jit(fn, dynamic=True)
    for steps in (6,):
        xs = rng.standard_normal((steps, 2, 3))
        runs = []
        for run in (compiled, fn):
            W, U = tensor(W0, requires_grad=True), tensor(U0, requires_grad=True)
            out = run(tensor(xs), tensor(np.zeros((2, 3))), W, U)
            last = out[-1] if isinstance(out, tuple) else out
            if last.requires_grad:
                last.backward(np.ones_like(last.data))
            runs.append((out, last.requires_grad, W.grad, U.grad))
        (got, got_grad, *got_grads), (want, want_grad, *want_grads) = runs
        assert got_grad == want_grad
        for a, b in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert type(a) is type(b)
            np.testing.assert_allclose(a.data, b.data, rtol=1e-9, atol=1e-12)
        for a, b in zip(got_grads, want_grads):
            assert (a is None) == (b is None)
            if b is not None:
                np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    assert compiled.stats()["eager_calls"] == {}, compiled.stats()


class _GradientDescent:
    """CS229-style: the parameters on the object, a data-dependent exit."""

    def __init__(self, lr=0.1, eps=1e-8):
        self.theta, self.lr, self.eps = None, lr, eps

    def fit(self, x, y):
        n, d = x.shape
        self.theta = np.zeros(d)
        while True:
            step = self.lr * x.T.dot(x.dot(self.theta) - y) / n
            self.theta -= step
            if np.linalg.norm(step, 1) < self.eps:
                break
        return self.theta


def test_an_attribute_updated_in_a_loop_with_a_data_dependent_exit_is_carried():
    """``self.theta -= step`` in a ``while True`` with a norm exit: an attribute write in
    the body kept the loop as written, unrolled with a decision per trip (past 256 of them
    the call ran eagerly). The attribute is a local for the loop's duration now
    (tracer/loop_attributes.py), and the loop one captured exit loop: compiled once, exact
    products as NumPy's, so every call takes NumPy's exit trip."""
    rng = np.random.default_rng(7)
    model, compiled = _GradientDescent(), jit(_GradientDescent.fit)
    for _ in range(3):
        x = np.c_[np.ones(30), rng.random((30, 2))]
        y = x @ rng.standard_normal(3)
        want_model = _GradientDescent()
        want = _GradientDescent.fit(want_model, x, y)
        got = compiled(model, x, y)
        assert got is model.theta and want is want_model.theta
        np.testing.assert_array_equal(model.theta, want_model.theta)
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == 1, stats


def _propagate(w, b, X, Y):
    A = np.tanh(w.T @ X + b)
    cost = np.squeeze(np.mean((A - Y) ** 2))
    return {"dw": X @ (A - Y).T / X.shape[1], "db": np.mean(A - Y)}, cost


def _optimize(w, b, X, Y, num_iterations, learning_rate=0.5, print_cost=False):
    """Course 1's logistic regression, as written there."""
    costs = []
    for i in range(num_iterations):
        grads, cost = _propagate(w, b, X, Y)
        dw = grads["dw"]
        db = grads["db"]
        w = w - learning_rate * dw
        b = b - learning_rate * db
        if i % 10 == 0:
            costs.append(cost)
            if print_cost:
                print("Cost after iteration %i: %f" % (i, cost))
    params = {"w": w, "b": b}
    grads = {"dw": dw, "db": db}
    return params, grads, costs


def test_course_one_optimize_with_its_print_flag_compiles_once_for_every_count(capsys):
    """``grads, cost = propagate(...)`` binds a new dict at every trip (no dict before the
    loop: refused as no array), and the cost is appended under ``i % 10 == 0`` with an
    ``if print_cost: print(...)`` beside it (not a lone append: the index decided the
    path). Now the dict is carried key by key and the print runs under ``print_cost and i
    % 10 == 0``, deciding nothing on the index when the flag is false."""
    X, Y = _data()
    compiled = jit(_optimize)
    for count in (40, 53, 75):
        got = compiled(np.zeros((3, 1)), 0.0, X, Y, count)
        want = _optimize(np.zeros((3, 1)), 0.0, X, Y, count)
        for got_part, want_part in zip(got[:2], want[:2]):
            assert list(got_part) == list(want_part)
            _same(list(got_part.values()), list(want_part.values()))
        _same(got[2], want[2])
    assert capsys.readouterr().out == ""
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == 2, stats
