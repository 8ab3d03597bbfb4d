"""Round 22e (helper-163): fuzzing's second front, and the round's leftovers.

Round 22c's leftover, ``np.cumprod`` of float32 ``[inf, 1e-45, ...]`` (NaN compiled where
NumPy gives inf), is fixed by a scan in NumPy's order; its tests are with cumsum's in
``tests/codegen/test_scan_kernels.py``.

``fuzz.py`` gained eight statement kinds drawn only under ``--focus`` (reduction keywords,
einsum strings, im2col windows / pad modes / pooling masks, take / along-axis / searchsorted
/ digitize / broadcasting where, boolean reductions over empty, integer ops in int8..uint64,
rounding at ties and huge values, NEP 50 scalar promotion); a direct sweep of the same
categories (every op on hostile values, each integer dtype, each scalar kind as an argument
and as a constant) found:

* ``np.mean(x, dtype=np.int64)`` (and int8, bool): NumPy divides the sum into the integer
  dtype (truncated, an integer NumPy scalar where no axis is left), compiled gave float64;
  ``np.var``/``np.std`` with an integer ``dtype=`` differed too (now run eagerly);
* ``ids < 2**40`` with ``ids`` int32 (a Python int past the array's range, an argument or
  a constant; ``uint64 < -1`` too): NumPy 2 compares the values, compiled code converted
  the int to int32 and wrapped (all False);
* ``mask < np.uint8(200)`` with a bool ``mask`` (a NumPy scalar of a narrow dtype): NumPy
  compares in uint8, compiled code compared the literal wrapped to int8 (all False);
* internal errors while tracing (eager, as tracejit failures): ``np.take_along_axis(a, i,
  axis=None)`` and ``np.any``/``np.all`` with ``where=`` (the focused fuzzer's only
  finding: 96 of its 69 programs' calls, seeds 22500001-22500070).

Held (no difference): integer ops in all eight integer dtypes (floor_divide and remainder
by zero and negatives, powers, shifts, bitwise), rounding at .5 ties and past 2**52,
einsum strings, sliding windows, as_strided im2col, pad modes, pooling masks, take modes,
searchsorted, digitize, broadcasting where, any/all over empty axes, and NEP 50 promotion
of 15 scalar kinds with 8 array dtypes and 8 operators (as arguments, both orders).
Refused (eager, with a reason), left: np.put_along_axis, np.pad's linear_ramp/median/
stat_length/reflect_type='odd', np.searchsorted(sorter=), np.nansum/nanmax(initial=,
where=).
"""

import numpy as np
import pytest
from real_model_checks import assert_equal, run_calls

import tracejit as tj


def _agree(function, *args, calls=3):
    """``calls`` calls eagerly and compiled, equal to the bit (or raising as NumPy does)."""
    return run_calls(function, [args], rtol=0, atol=0, repeats=calls)


@pytest.mark.parametrize("keywords", [dict(axis=1, dtype=np.int64), dict(dtype=np.int64),
                                      dict(axis=0, dtype=np.int32, where=True),
                                      dict(axis=1, dtype=bool)])
def test_mean_with_an_integer_dtype_is_numpys(keywords):
    x = np.array([[1.5, 1.5, -2.7], [3.9, 0.2, 0.1], [-7.0, 0.0, 0.5]])
    _agree(lambda x: np.mean(x, **keywords), x)
    _agree(lambda x: x.mean(**keywords) * 2, x)


def test_mean_where_with_an_integer_dtype_and_int8_scalars_are_numpys():
    x = np.array([[1.5, 1.5, -2.7], [3.9, 0.2, 0.1]])
    _agree(lambda x: np.mean(x, axis=1, dtype=np.int32, where=x > 0), x)
    _agree(lambda x: np.mean(x.astype(np.int32), dtype=np.int8), x)  # an int8 NumPy scalar


@pytest.mark.parametrize("reduction", [np.var, np.std])
def test_var_and_std_with_an_integer_dtype_are_numpys(reduction):
    x = np.array([[1.5, 1.5, -2.7], [3.9, 0.2, 0.1]])
    _agree(lambda x: reduction(x, axis=1, dtype=np.int64), x)  # (std: NumPy raises)


def test_a_comparison_with_a_python_int_past_the_arrays_range_is_numpys():
    ids = np.array([1, 0, -5], np.int32)
    for other in (2**40, -2**40, 5):
        _agree(lambda ids, n: (ids < n, n >= ids, ids == n), ids, other)
        _agree(lambda ids, n=other: (ids < n, ids != n), ids)  # a constant
    _agree(lambda u: u < -1, np.array([0, 3], np.uint64))
    compiled = tj.jit(lambda ids, n: ids < n, cache="memory")  # in range, then past it
    for n in (5, 6, 2**40, 7, -2**40):
        assert_equal(compiled(ids, n), ids < n)


@pytest.mark.parametrize("scalar", [np.uint8(200), np.uint16(40000)])
def test_bools_compared_with_a_narrow_numpy_scalar_are_numpys(scalar):
    mask = np.array([True, False, True])
    _agree(lambda m, s: (m < s, m == s, m >= s), mask, scalar)
    _agree(lambda m, s=scalar: m < s, mask)  # a constant


def test_take_along_axis_none_is_numpys():
    """axis=None gathers from the flattened array (an internal TypeError before: the call
    ran eagerly as a tracejit failure)."""
    x = np.arange(20.0).reshape(5, 4)[:, ::-1]
    compiled = _agree(lambda a: np.take_along_axis(a, np.array([3, -1, 0, 19]), axis=None), x)
    assert compiled.stats()["compiled_calls"] >= 2, compiled.explain()
    _agree(lambda a: np.take_along_axis(a, np.zeros((1, 1), np.int64), axis=None), x)


def test_any_and_all_with_where_are_numpys():
    """np.any/np.all(where=mask) was an internal TypeError while tracing (the fuzzer's
    bool_reduction statements, round 22e): masked-out elements count as the identity."""
    x = np.array([[0.0, np.nan, 2.0], [0.0, 0.0, -1.0]])
    for function in (lambda x: np.any(x, axis=0, where=x > 0),
                     lambda x: np.all(x, axis=1, where=x != 0),
                     lambda x: np.any(x, where=np.array([True, False, False])),
                     lambda x: np.all(x > -5, where=x > 100),  # nothing selected: True
                     lambda x: np.any(x, axis=(0, 1), where=x < 0, keepdims=True)):
        compiled = _agree(function, x)
        assert compiled.stats()["compiled_calls"] >= 2, compiled.explain()
