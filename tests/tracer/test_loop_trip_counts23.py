"""Costs kept by a loop over a count argument and read as a whole after it (round 23,
``tracer/stacked_containers.py``, ``tracer/loop_selected_appends.py``): ``len(costs)``,
``np.mean(costs)`` and an element appended at a constant position (``costs.append(w[0])``)
in the course's training loops. Each pinned the count (one compile per value, eager past
max_variants) or ran every call eagerly; so did a count given as a 0-d array
(``np.array(300)``: its value guarded). Compiled against eager NumPy over counts 0, 1, 2,
a prime, the period and the period plus or minus 1, and large ones: results, their Python
types, the kept costs and the argument written in place.

Wrong results fixed here: a strided loop (``range(0, n, 2)``, ``range(1, T, 3)``) kept the
costs its trip number selects, not its index. Left pinned (correct, a compile per count):
``i == n - 1`` in ``range(0, n, 2)`` (the last trip's index follows n's parity) and a
reversed stride whose kept trips follow ``n % P``."""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit
from tracejit.tracer import stacked_containers

P = 5  # the period of the kept costs
COUNTS = (40, 53, 0, 1, 2, 3, P - 1, P, P + 1, 97, 1000, 7, 2 * P)


def kept_len(X, w, num_iterations):
    """L_layer_model's costs, and how many were kept (the plot's x axis)."""
    costs = []
    for i in range(num_iterations):
        w -= 0.1 * (w - X)
        cost = float(np.sum((w - X) ** 2))
        if i % P == 0:
            costs.append(cost)
    return costs, len(costs), len(costs) * P


def averaged(X, w, num_iterations):
    """An epoch loop's costs, and their mean (the course's cost_avg over epochs)."""
    costs = []
    for _ in range(num_iterations):
        w -= 0.1 * (w - X)
        costs.append(np.sum((w - X) ** 2))
    return np.mean(costs), np.max(costs), np.sum(costs)


def kept_weight(X, w, num_iterations):
    """A weight recorded every P trips: costs.append(w[0]) (a NumPy float64, not a row)."""
    history = []
    for i in range(num_iterations):
        w = w - 0.1 * (w - X)
        if i % P == 0:
            history.append(w[0])
    return w, history


def _same(got, want, count):
    assert type(got) is type(want), (count, got, want)
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want), (count, got, want)
        for a, b in zip(got, want):
            _same(a, b, count)
    elif isinstance(want, (float, np.floating, np.ndarray)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    else:
        assert got == want, (count, got, want)


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value")
@pytest.mark.parametrize("fn", [kept_len, averaged, kept_weight])
def test_costs_read_as_a_whole_compile_once_for_every_count(fn):
    compiled = jit(fn, cache="memory")
    X = np.linspace(1.0, 2.0, 3)
    for number, count in enumerate(COUNTS):
        w_got, w_want = np.zeros(3), np.zeros(3)
        if fn is averaged and count == 0:
            with pytest.raises(ValueError):  # np.max of no costs, as NumPy raises
                compiled(X, w_got, count)
            continue
        got, want = compiled(X, w_got, count), fn(X, w_want, count)
        _same(got, want, count)
        np.testing.assert_allclose(w_got, w_want, rtol=1e-12, atol=1e-14)
        if number == 8:
            before = compiled.stats()
    stats = compiled.stats()
    assert not stats["eager_calls"], compiled.explain()
    # the first count, the dim, and 0, 1, 2 (constants of their traces); then none
    assert stats["compiles"] == before["compiles"] <= 5, stats
    assert stats["compiled_calls"] - before["compiled_calls"] == 4, stats


def test_the_reductions_over_a_list_read_the_loops_buffer(monkeypatch):
    """What the fix changed: without reductions over the buffer np.mean(costs) converted
    the traced list to a NumPy array, and every call ran eagerly."""
    monkeypatch.setattr(stacked_containers, "_OVER_THE_ARRAY", ())
    compiled = jit(averaged, cache="memory")
    for count in (40, 53, 60):
        compiled(np.ones(3), np.zeros(3), count)
    assert compiled.stats()["eager_calls"], compiled.stats()


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_a_count_given_as_a_0d_array_is_a_dim_from_the_first_call(dtype):
    """fit(X, w, np.array(300)): the count's __index__ guarded its value, so every other
    count side-exited and ran eagerly (then traced a path of its own). Now the array is
    a count as an int argument is, a dim from the first call (an array is a run-time
    input from the start); counts under 3 are traced with their value guarded."""
    compiled = jit(kept_len, cache="memory")
    X = np.linspace(1.0, 2.0, 3)
    for count in (40, 53, 97, 1000, 3, P, P + 1, 7, 0, 1, 2, 40):
        w_got, w_want = np.zeros(3), np.zeros(3)
        got = compiled(X, w_got, np.array(count, dtype))
        want = kept_len(X, w_want, np.array(count, dtype))
        _same(got, want, count)
        np.testing.assert_allclose(w_got, w_want, rtol=1e-12, atol=1e-14)
        if count == 7:
            stats = compiled.stats()
            assert stats["compiles"] == 1 and stats["compiled_calls"] == 7, stats


# --- strided loops: the test reads the user's index, not the trip number -----------------
def every_fourth_of_even(X, w, n):
    costs = []
    for i in range(0, n, 2):
        w = w - 0.1 * (w - X)
        if i % 4 == 0:
            costs.append(float(np.sum(w)))
    return w, costs


def down_by_two(X, w, n):
    costs = []
    for i in range(n - 1, -1, -2):
        w = w - 0.1 * (w - X) * (i + 1)
        if i % 3 == 0:
            costs.append(float(np.sum(w)))
    return w, costs


def constant_stride(X, w):
    costs = []
    for i in range(1, 100, 3):
        w = w - 0.01 * (w - X)
        if i % 2 == 0:
            costs.append(float(np.sum(w)))
    return w, costs


def over_rows(X, w):
    costs = []
    for i in range(1, X.shape[0], 3):
        w = w - 0.1 * (w - X[i])
        if i % 2 == 0:
            costs.append(float(np.sum(w)))
    return w, costs


@pytest.mark.parametrize("fn", [every_fourth_of_even, down_by_two])
def test_a_strided_loop_keeps_the_costs_its_index_selects(fn):
    """range(0, n, 2) runs as a loop over its trip number u (i = 2u): the selected rows
    were found by running 'i % 4 == 0' on u, so the compiled list kept every fourth trip
    where NumPy keeps every second (7 costs for n = 53, NumPy 14): wrong results."""
    compiled = jit(fn, cache="memory")
    X = np.linspace(1.0, 2.0, 3)
    for count in (40, 53, 0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 60, 97):
        got, want = compiled(X, np.zeros(3), count), fn(X, np.zeros(3), count)
        _same(got, want, count)
    if fn is every_fourth_of_even:  # (down from n - 1, the kept trips follow n % 3: pinned)
        assert compiled.stats()["compiled_calls"] >= 4, compiled.stats()


@pytest.mark.parametrize("fn", [constant_stride, over_rows])
def test_a_strided_loop_over_a_constant_or_a_shape_keeps_the_selected_costs(fn):
    compiled = jit(fn, cache="memory", dynamic=True)
    for rows in (40, 53, 60, 97):
        X = np.linspace(1.0, 2.0, 3 * rows).reshape(rows, 3)
        got, want = compiled(X, np.zeros(3)), fn(X, np.zeros(3))
        _same(got, want, rows)
    assert compiled.stats()["compiled_calls"] >= 2, compiled.stats()


def last_of_even(X, w, n):
    costs = []
    for i in range(0, n, 2):
        w = w - 0.1 * (w - X)
        if i % P == 0 or i == n - 1:
            costs.append(float(np.sum(w)))
    return w, costs


def test_a_strided_loop_whose_last_test_follows_the_counts_parity_keeps_pinning():
    """range(0, n, 2) with 'i == n - 1': the last index 2 * ((n + 1) // 2 - 1) is n - 1
    for odd n only (even n keep no last cost), so no one selection serves every count; a
    guard on n's parity would give two programs, not done: the count is pinned (a compile
    per value, eager past max_variants), with eager's results."""
    compiled = jit(last_of_even, cache="memory")
    X = np.linspace(1.0, 2.0, 3)
    for count in (40, 53, 41, 0, 1, 7):
        got, want = compiled(X, np.zeros(3), count), last_of_even(X, np.zeros(3), count)
        _same(got, want, count)
    stats = compiled.stats()
    assert stats["compiles"] == 6 and not stats["eager_calls"], stats
