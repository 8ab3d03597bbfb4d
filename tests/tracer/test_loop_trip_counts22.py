"""Training loops whose trip count is an argument written another way than ``range(n)``
(round 22, ``tracer/loop_trip_counts.py``): ``range(1, epochs + 1)``, ``range(n - 1)``,
``range(start, n)``, and costs kept every P trips and at the last one
(``tracer/loop_selected_appends.py``: ``if i % P == 0 or i == n - 1``). Each was a pinned
count (one compile per value, eager past max_variants) or pinned for good after a call with
too few trips. Compiled against eager NumPy over counts 0, 1, 2, 3, P - 1, P, P + 1 and
large ones: results, the kept costs and the argument written in place."""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit

P = 5  # the period of the kept costs


def _course(x, w, n):
    """The forms over one count argument (one compile serves all the loops)."""
    epochs, shortened, started, finals = [], [], [], []
    for epoch in range(1, n + 1):
        w -= 0.1 * (w - x) / epoch
        cost = float(np.sum((w - x) ** 2))
        if epoch % P == 0 or epoch == n:  # rows P - 1, 2P - 1, ... and the last trip
            epochs.append(cost)
    for i in range(n - 1):
        w += 0.05 * (w - x) * (i + 1) / n
        cost = float(np.sum((w - x) ** 2))
        if i % P == 0:
            shortened.append(cost)
    for i in range(2, n):
        w -= 0.02 * (w - x) * i
        cost = float(np.sum(w))
        if i % P == 0:
            started.append(cost)
    for i in range(n):  # Coursera's L_layer_model: every P trips and the last one
        w += 0.01 * (w - x)
        cost = float(np.sum(w ** 2))
        if i % P == 0 or i == n - 1:
            finals.append(cost)
    return epochs, shortened, started, finals


def _not_last(x, w, n):  # i == n - 2 is no last trip: pinned, one compile per value
    costs = []
    for i in range(n):
        w -= 0.1 * (w - x)
        cost = float(np.sum(w))
        if i % P == 0 or i == n - 2:
            costs.append(cost)
    return costs


def _halves(x, w, n):  # n // 2 is no count a dim can be: pinned, one compile per value
    costs = []
    for _ in range(n // 2):
        w -= 0.1 * (w - x)
        costs.append(float(np.sum(w)))
    return costs


def _run(compiled, fn, count):
    x = np.linspace(1.0, 2.0, 3)
    w_got, w_want = np.zeros(3), np.zeros(3)
    got, want = compiled(x, w_got, count), fn(x, w_want, count)
    if fn is not _course:
        got, want = (got,), (want,)
    for a, b in zip(got, want, strict=True):
        assert type(a) is list and len(a) == len(b), (count, a, b)
        assert all(type(value) is float for value in a)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w_got, w_want, rtol=1e-12, atol=1e-14)


def test_an_offset_count_compiles_once_for_every_count():
    """The first count is a constant of its trace, the second makes the argument a dim
    (``range(1, n + 1)``, ``range(n - 1)`` and a kept cost under ``i % P == 0 or i == n -
    1`` were pinned counts: one compile per value, eager past max_variants); the small
    counts are constants of their own traces (too few trips to capture a loop: ``range(n -
    1)`` at n = 3 and ``range(2, n)`` at n = 3, 4 pinned the count for good before), and
    after them every count, small or large, runs one of the programs already made."""
    compiled = jit(_course)
    for count in (40, 53, 0, 1, 2, 3, P - 1, P, P + 1):
        _run(compiled, _course, count)
    before = compiled.stats()
    for count in (3, P + 2, 97, 1000, 4, 2 * P):
        _run(compiled, _course, count)
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == before["compiles"], stats
    assert stats["compiled_calls"] - before["compiled_calls"] == 6, stats
    # the first count, the dim, and 0, 1, 2 (constants of their traces); 3 to P + 1 ran
    # the dim's program: a slice of the kept costs starting past trip 0 (epoch % P == 0 at
    # trip P - 1) guarded the count against its phase before (a program for counts under
    # it, at it, past it), and range(n - 1) at n = 3 pinned n for good
    assert before["compiles"] == 5, before


@pytest.mark.parametrize("fn", [_halves, _not_last])
def test_a_count_form_that_is_no_dim_keeps_pinning(fn):
    compiled = jit(fn)
    for count in (8, 9, 10):
        _run(compiled, fn, count)
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == 3, stats
