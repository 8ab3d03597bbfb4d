"""Session review 23c: the loop and container commits of helpers 172, 173 and 177
(0c64e5b, 90dbd12, 43314b4, 862037a, d8cb263, 56d1df6, 2510b76) attacked at their edges.

Found: a carried array that iteration 0 leaves as it was ('W = None' before the loop, then
'if i > 0: x = x + W' - the first trip has no W yet) was taken for a buffer the loop writes
in place (``ArrayCarry.after``: the same object after iteration 0), so the compiled loop
wrote its result into the caller's argument and returned the argument itself (NumPy leaves
the argument alone). Found probing 90dbd12's dict rebuilt at every trip and read back from
the last one (``model['W']`` under 'if i > 0'); the dict had nothing to do with it.
"""

import numpy as np
from real_model_checks import no_internal_errors, run_calls

COUNTS = (0, 1, 2, 3, 5, 8, 13, 40, 5)


def reads_last_trips_dict(x, n):
    model = {}
    for i in range(n):
        if i > 0:
            x = x + model["W"]
        model = {"W": x * 0.5}
    return x, model


def rebinds_after_the_first_trip(x, n):
    W = None
    for i in range(n):
        if i > 0:
            x = x + W
        W = x * 0.5
    return x


def writes_in_place_after_the_first_trip(x, n):
    W = None
    for i in range(n):
        if i > 0:
            x += W
        W = x * 0.5
    return x


def writes_in_place_at_the_first_trip_then_rebinds(x, n):
    for i in range(n):
        if i == 0:
            x += 1.0
        else:
            x = x * 0.5
    return x


def test_a_loop_rebinding_an_argument_iteration_0_left_alone_does_not_write_it():
    """Before: the caller's x held the loop's result after the call (and was returned)."""
    for function in (reads_last_trips_dict, rebinds_after_the_first_trip):
        f = run_calls(function, [(np.ones(3), n) for n in COUNTS], rtol=0, atol=0)
        no_internal_errors(f)
        assert f.stats()["compiled_calls"] >= 9, f.explain()


def test_in_place_writes_to_the_argument_stay_as_numpys():
    for function in (writes_in_place_after_the_first_trip,
                     writes_in_place_at_the_first_trip_then_rebinds):
        f = run_calls(function, [(np.ones(3), n) for n in COUNTS], rtol=0, atol=0)
        no_internal_errors(f)


def test_the_result_is_not_the_argument():
    f = run_calls(rebinds_after_the_first_trip, [(np.ones(3), 5)], rtol=0, atol=0)
    x = np.ones(3)
    assert f(x, 7) is not x and (x == 1).all()
