"""Side exits that name no guard (``codegen/exit_codes.py``) are told apart in ``stats()``:
a guard of a loop nested in a captured loop's body is not a kernel error, and a kernel
error is not a loop's guard (whose streak traces the loops unrolled and drops the
variant)."""

import numpy as np
import pytest

from tracejit import jit
from tracejit.runtime.misses import LOOP_EXIT_STREAK


def signed_grid_sum(x):
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:  # a guard in the inner loop's body
                total = total + x[i, j]
            else:
                total = total - 1.0
    return total


def test_a_guard_failing_in_an_inner_loop_has_its_own_reason():
    """Traced on positive entries; a negative one fails the inner loop's guard at one
    trip. The call runs eagerly under its own reason (it read "kernel error (eager raises
    it)"), and, like before, without the streak that unrolls the loops: the variant stays
    and keeps serving the positive grids."""
    f = jit(signed_grid_sum, cache="memory", dynamic=True)
    positive = np.ones((3, 4))
    mixed = positive.copy()
    mixed[2, 3] = -5.0
    for x in [positive, positive] + [mixed] * (LOOP_EXIT_STREAK + 1) + [positive]:
        assert f(x) == signed_grid_sum(x)
    stats = f.stats()
    assert stats["eager_calls"] == {
        "a guard in an inner loop's body failed": LOOP_EXIT_STREAK + 1}, f.explain()
    assert stats["compiles"] == 1 and stats["variants"] == 1, f.explain()
    assert stats["compiled_calls"] >= 2, f.explain()


def integer_power(x, n):
    return x ** n


def test_a_kernel_error_is_not_a_loop_guard_failing():
    """A negative integer power is a kernel error (code -2, NumPy raises it); that code
    was also the loop guards' (LOOP_GUARD_FAILED), so these calls counted toward the
    unroll streak and the fourth dropped the variant: the next call traced and compiled
    again."""
    f = jit(integer_power, cache="memory")
    x, n = np.arange(1, 5), np.array([1, 2, 1, 2])
    np.testing.assert_array_equal(f(x, n), integer_power(x, n))
    for _ in range(LOOP_EXIT_STREAK + 1):
        with pytest.raises(ValueError, match="negative integer powers"):
            f(x, np.array([1, -2, 1, 1]))
    np.testing.assert_array_equal(f(x, n), integer_power(x, n))
    stats = f.stats()
    assert stats["raised_calls"] == LOOP_EXIT_STREAK + 1 and not stats["eager_calls"]
    assert stats["compiles"] == 1 and stats["variants"] == 1, f.explain()
