"""Session review 23d: helper-172's container holders (7b6d5f5, 7fe24a6) and helper-175's
two-vector math loops (e5c1969), attacked at their edges.

A list or dict a captured loop fills that a tuple made before the loop also holds
(``pair = (hist, h)``) kept iteration 0's entry alone there on compiled calls:
``container_holders`` skipped every tuple as the loop machinery's, where only the carried
values' own tuple (and the zip pair of its own scan) is.
"""

import numpy as np
from real_model_checks import run_calls

import tracejit as tj


def halvings_kept_in_a_tuple(x, n):
    hist = []
    pair = (hist, n)
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return pair[0]


def halvings_by_step_kept_in_a_tuple(x, n):
    hs = {}
    kept = (hs,)
    for t in range(n):
        x = x * 0.5
        hs[t] = x
    return kept[0]


def halvings_alone(x, n):
    hist = []
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return hist


def test_a_list_or_dict_a_captured_loop_fills_keeps_every_entry_in_a_tuple():
    x = np.arange(3.0)
    for function in (halvings_kept_in_a_tuple, halvings_by_step_kept_in_a_tuple):
        run_calls(function, [(x, n) for n in (10, 12, 15, 0, 1, 13)])


def test_a_list_no_one_else_holds_is_still_captured():
    # the other side: the carried values' tuple is not a holder (one compile for the counts)
    f = tj.jit(halvings_alone, cache="memory")
    x = np.arange(3.0)
    for n in (10, 12, 15, 13):
        np.testing.assert_array_equal(f(x, n), halvings_alone(x, n))
    assert f.stats()["compiles"] <= 2
