"""Print forms in training loops that compiled once per trip count (``loop_prints``,
``loop_selected_appends``): each test runs eager and compiled over several counts,
compares the printed text (capsys) exactly and the results, and counts compiles
(``cache="memory"``: the first count pins its own program, then one serves the rest)."""

from __future__ import annotations

import numpy as np

import tracejit as tj

COUNTS = (40, 41, 60, 7, 100, 40)


def _over_counts(capsys, function, counts=COUNTS):
    compiled = tj.jit(function, cache="memory")
    for count in counts:
        x = np.arange(4.0) / 8
        want = function(x.copy(), count)
        eager_text = capsys.readouterr().out
        got = compiled(x.copy(), count)
        assert capsys.readouterr().out == eager_text, count
        assert eager_text
        for got_leaf, want_leaf in zip(np.atleast_1d(got[0]), np.atleast_1d(want[0])):
            np.testing.assert_allclose(got_leaf, want_leaf, rtol=1e-13)
        assert len(got[1]) == len(want[1])
        np.testing.assert_allclose(np.asarray(got[1], float), np.asarray(want[1], float),
                                   rtol=1e-13)
    return compiled.stats()


def print_and_append(x, num_iterations):
    """Course 1's ``if print_cost and i % 100 == 0: print(...); costs.append(cost)``."""
    costs = []
    for i in range(num_iterations):
        x = x * 0.875 + 0.125
        cost = (x ** 2).sum()
        if i % 3 == 0:
            print("Cost after iteration %i: %f" % (i, cost))
            costs.append(cost)
    return x, costs


def append_then_print(x, num_iterations):
    costs = []
    for i in range(num_iterations):
        x = x * 0.875 + 0.125
        cost = (x ** 2).sum()
        if i % 10 == 0 or i == num_iterations - 1:
            costs.append(cost)
            print(i, cost)
    return x, costs


def test_a_print_and_an_append_under_one_index_test_compile_once_for_every_count(capsys):
    for function in (print_and_append, append_then_print):
        stats = _over_counts(capsys, function)
        # before: the `if` held two statements, neither rewrite took it, and the loop
        # unrolled (a compile per count: 5 compiles, 1 compiled call)
        assert stats["compiles"] <= 2 and stats["eager_calls"] == {}, (function, stats)
        assert stats["compiled_calls"] >= 4, (function, stats)
