"""Results that are views of an argument updated in place (``w -= lr * dw; return w.T``)
are NumPy's views of the caller's array, as eager's are (``tracer/argument_views.py``)."""

import numpy as np
import pytest
from real_model_checks import jitted, no_internal_errors


def sgd_returning_views(w, dw):
    w -= 0.1 * dw
    return w.T, w[1:, ::2], np.broadcast_to(w, (2,) + w.shape), w[None], w[::-1], w.reshape(-1)


@pytest.mark.parametrize("dynamic", ["auto", True])
def test_views_of_an_argument_updated_in_place_alias_the_callers_array(dynamic):
    # (tracer/argument_views.py; the last result, a reshape merging axes, stays a copy)
    f = jitted(sgd_returning_views, dynamic=dynamic)
    for shape, order in (((2, 3), "C"), ((2, 3), "F"), ((5, 6), "C"), ((6, 7), "F"), ((5, 6), "F")):
        mine = np.asarray(np.arange(np.prod(shape), dtype=float).reshape(shape), order=order)
        theirs = mine.copy(order="K")
        got, want = f(mine, np.ones(shape)), sgd_returning_views(theirs, np.ones(shape))
        for position, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(g, w)
            assert g.shape == w.shape
            if position < len(got) - 1:
                assert np.shares_memory(g, mine) == np.shares_memory(w, theirs), position
        got[0][0, 0] = want[0][0, 0] = 77.0  # a write through the result reaches the argument
        np.testing.assert_array_equal(mine, theirs)
    assert f.stats()["compiled_calls"] > 0
    no_internal_errors(f)
