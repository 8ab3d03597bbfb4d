"""Print forms in training loops that compiled once per trip count (``loop_prints``,
``loop_selected_appends``): each test runs eager and compiled over several counts,
compares the printed text (capsys) exactly and the results, and counts compiles
(``cache="memory"``: the first count pins its own program, then one serves the rest)."""

from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.runtime import serialize

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


def two_prints(x, num_iterations):
    """Two prints under their own index tests: their lines interleave trip by trip."""
    costs = []
    for i in range(num_iterations):
        x = x * 0.875 + 0.125
        cost = (x ** 2).sum()
        if i % 2 == 0:
            print("iteration", i, x[0])
        if i % 3 == 0 or i == num_iterations - 1:
            print(f"cost {cost:.6f}", end=";\n")
    return x, costs


def two_prints_under_one_test(x, num_iterations):
    """``if i % 5 == 0: print(...); print(...)``, split into one ``if`` for each."""
    costs = []
    for i in range(num_iterations):
        x = x * 0.875 + 0.125
        cost = (x ** 2).sum()
        if i % 5 == 0:
            print("loss", cost)
            costs.append(cost)
            print("first", x[0], sep=":")
    return x, costs


def bare_and_selected(x, num_iterations):
    """A print at every trip and one every fourth, over a strided range."""
    costs = []
    for i in range(1, num_iterations, 3):
        x = x * 0.875 + 0.125
        print("x0 %.5f" % x[0])
        if i % 4 == 1:
            print(i, x.sum())
    return x, costs


def test_several_prints_in_a_loop_compile_once_for_every_count(capsys):
    for function in (two_prints, two_prints_under_one_test, bare_and_selected):
        stats = _over_counts(capsys, function)
        # before: a loop with more than one print was left as written, and unrolled
        assert stats["compiles"] <= 2 and stats["eager_calls"] == {}, (function, stats)
        assert stats["compiled_calls"] >= 4, (function, stats)


def test_several_prints_under_a_guard_failure_lose_and_double_no_line(capsys):
    def guarded(x, num_iterations):
        for i in range(num_iterations):
            cost = (x ** 2).sum()
            if cost > 100.0:  # fails on big inputs: the call leaves compiled code
                x = x * 0.5
            x = x * 0.875 + 0.125
            if i % 2 == 0:
                print("a", i, cost)
            if i % 3 == 0:
                print("b", i, x[1])
        return x, []

    compiled = tj.jit(guarded, cache="memory", hot_exit=100)
    for count, scale in ((30, 1.0), (31, 1.0), (30, 100.0), (12, 1.0), (31, 100.0)):
        x = np.arange(4.0) * scale
        want = guarded(x.copy(), count)
        eager_text = capsys.readouterr().out
        got = compiled(x.copy(), count)
        assert capsys.readouterr().out == eager_text, (count, scale)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    assert compiled.stats()["compiled_calls"] >= 2


def test_a_program_with_several_prints_is_read_back_from_disk(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    first = tj.jit(two_prints)
    for count in (40, 41, 60):
        first(np.arange(4.0) / 8, count)
    capsys.readouterr()
    second = tj.jit(two_prints)  # a new function object: the entry from disk
    for count in (41, 60, 77):
        x = np.arange(4.0) / 8
        want = two_prints(x.copy(), count)
        eager_text = capsys.readouterr().out
        got = second(x.copy(), count)
        assert capsys.readouterr().out == eager_text
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    stats = second.stats()
    assert stats["disk_hits"] >= 1 and stats["compiles"] == 0, stats


def strided_pinned(x, num_iterations):
    """A strided loop whose bound pins the count (3 * n is no count form): its one print's
    rows were selected by the test on the trip number, not the user's index (printed '4'
    for index 1 and one trip late: 'i % 4 == 1' read u = 1, 5, 9 where i = 1 + 3 u)."""
    for i in range(1, 3 * num_iterations, 3):
        x = x * 0.875 + 0.125
        if i % 4 == 1:
            print(i, x.sum())
    return x, []


def test_a_strided_loops_printed_rows_are_the_users_indices(capsys):
    compiled = tj.jit(strided_pinned, cache="memory")
    for count in (40, 41, 12, 30):
        want = strided_pinned(np.arange(4.0), count)
        eager_text = capsys.readouterr().out
        got = compiled(np.arange(4.0), count)
        assert capsys.readouterr().out == eager_text, count
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)


@pytest.mark.parametrize("groups, order, width", [
    ((((("value", 1),), " ", "\n", 1),), 1, 1),  # a value past its group's atoms
    (((((("text", "a"),), " ", "\n", 2),)), -1, 3),  # widths not the effect's atoms
    ((((("text", "a"),), " ", "\n", 0),), 1, 0),  # a group without its printed index
    ((((("text", "a"),), " ", "\n", 1),), 2, 1),  # an order other than +-1
    (((("text", "a"), " ", "\n"),), 1, 1),  # a malformed group
])
def test_a_merged_print_read_from_disk_is_checked(groups, order, width):
    params = {"groups": groups, "order": order, "rows": True}
    with pytest.raises(serialize.InvalidEntry):
        serialize._check_groups(params, width)
    good = {"groups": (((("value", 0),), " ", "\n", 1),), "order": 1, "rows": True}
    serialize._check_groups(good, 1)


def until_converged(x, num_iterations):
    """A training loop with a data-dependent exit over a count argument, printing."""
    for i in range(num_iterations):
        previous = x
        x = x * 0.5 + 1.0
        print("step", i, x.sum())
        if np.abs(x - previous).max() < 1e-3:
            break
    return x, []


def test_a_loop_with_a_break_over_a_count_argument_compiles_once_for_every_count(capsys):
    # counts under and past the trip where the exit is taken (12 for these inputs)
    stats = _over_counts(capsys, until_converged, (6, 9, 13, 7, 20, 5, 40))
    # before: the count was pinned (a compile per count: 7 compiles)
    assert stats["compiles"] <= 2 and stats["eager_calls"] == {}, stats
    assert stats["compiled_calls"] >= 5, stats
