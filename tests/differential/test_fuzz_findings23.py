"""Round 23 (helper-174): counted loops, dtype mixes, hostile shapes and values.

``fuzz23.py`` (beside ``fuzz.py``) writes whole model functions with their own argument
makers: ``counted_loop`` and ``loop_forms`` (trip counts from an int argument, ``len()``
or an offset of either, as a Python int, np.int64, a 0-d array or a negative int; ``if``s
on data in the body, early ``break``/``return``, periodic appends with the last trip,
buffers written through slices and columns, int32/bool buffers, Python float totals),
``dtype_mix`` (bool/int/float arrays with Python ints and floats, NumPy scalars, 0-d arrays
through arithmetic, comparisons, where, clip, reductions with dtype=/where=/keepdims,
cumulative ops) and ``hostile_values`` (NaN/Inf/-0.0/denormals through max/min/argmax/
sort/sign/floor_divide/mod and their NaN-aware forms). Calls alternate shapes (0, 1,
primes, (1,) and (n, 1) broadcasting) and layouts (transposed, ``[::2]``, reversed).
Found:

* ``np.sum(a, where=mask)`` with ``a`` (1, m) and ``mask`` (n, m): NumPy raises
  ValueError (the mask broadcasts to ``a``, not ``a`` to the mask), compiled code summed
  ``a`` broadcast to n rows (any masked reduction: sum, prod, max, min, any, all, mean);
* ``np.clip(ids, 0, big)`` with ``ids`` int32 and ``big`` a Python int past int32 (an
  argument on the first call, or a literal): NumPy drops the bound that clips nothing,
  the trace raised OverflowError from np.minimum (internal error, every such call eager);
* ``np.cumsum(x, dtype=bool)`` (``np.add.accumulate`` of a mask, ``nancumsum``): NumPy adds
  booleans as "or" (True + True is True), the compiled scan added 1-bit ints (wrapping to
  False after two Trues);
* a ufunc's ``dtype=`` cast the result, where NumPy runs the loop in that dtype:
  ``np.add(mask_a, mask_b, dtype=np.float32)`` was 1.0 where NumPy gives 2.0,
  ``np.negative(mask, dtype=np.float32)`` and ``np.multiply(ids, 2**33, dtype=np.float64)``
  were internal errors, ``np.add(x, y, dtype=np.int32)`` of floats computed where NumPy
  raises (``tracer/ufunc_dtypes.py`` resolves NumPy's loop).

``test_fuzz23_sample`` runs a seeded sample of the generators (a few seconds).
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import fuzz23  # noqa: E402 - beside this file


def _agree(function, *calls):
    return fuzz23.agree(function, *calls)


@pytest.mark.parametrize("reduction", [
    lambda a, m: np.sum(a, where=m), lambda a, m: np.sum(a, axis=0, where=m),
    lambda a, m: np.max(a, axis=0, where=m, initial=-1.0),
    lambda a, m: np.any(a > 0, where=m), lambda a, m: np.mean(a, axis=1, where=m),
    lambda a, m: np.prod(a, where=m, keepdims=True)])
def test_where_mask_does_not_broadcast_the_operand(reduction):
    row, mask = np.ones((1, 3)), np.ones((5, 3), bool)
    with pytest.raises(ValueError):
        reduction(row, mask)
    _agree(reduction, (row, mask), (np.ones((5, 3)), mask), (row, mask[:1]), (row, mask))


@pytest.mark.parametrize("bounds", [(0, 2**33), (None, 2**33), (-2**40, 3), (-2**40, 2**33),
                                    (-2**40, None), (2**33, None), (None, -2**40)])
def test_clip_with_a_python_int_past_the_dtype(bounds):
    low, high = bounds

    def literal(ids):
        return np.clip(ids, low, high)

    def argument(ids, low, high):
        return np.clip(ids, low, high)

    ids = np.array([1, -5, 7, 0], np.int32)
    _agree(literal, (ids,), (ids[::-1],))
    _agree(argument, (ids, low, high), (ids, 0, 2), (ids, low, high))


@pytest.mark.parametrize("scan", [
    lambda a: np.cumsum(a, axis=1, dtype=bool), lambda a: np.cumsum(a, dtype=bool),
    lambda a: a.cumsum(axis=0, dtype=bool), lambda a: np.add.accumulate(a > 0, axis=1),
    lambda a: np.nancumsum(a, axis=1, dtype=bool), lambda a: np.cumsum(a != 0, axis=1) > 1])
def test_cumsum_of_booleans_in_bool_is_a_running_or(scan):
    a = np.array([[1.0, 2.0, 3.0, 0.0], [0.0, -1.0, 0.0, 5.0], [0.0, 0.0, 0.0, 0.0]])
    _agree(scan, (a,), (a,), (a[::-1, ::2],), (np.asfortranarray(a),))


@pytest.mark.parametrize("ufunc_call", [
    lambda a, b, s: np.add(a > 0, b > 0, dtype=np.float32),
    lambda a, b, s: np.add(a > 0, b > 0, dtype=np.int32),
    lambda a, b, s: np.multiply(a > 0, s, dtype=np.float64),
    lambda a, b, s: np.negative(a > 0, dtype=np.float32),
    lambda a, b, s: np.multiply(a.astype(np.int32), s, dtype=np.float64),
    lambda a, b, s: np.add(a, b, dtype=np.int32),  # NumPy's UFuncTypeError (same_kind)
    lambda a, b, s: np.subtract(a, s, dtype=np.float32)])
def test_ufunc_dtype_is_the_loop_dtype(ufunc_call):
    a = np.array([[1.5, -2.0, 0.0], [3.0, 0.5, -1.0]])
    b = np.array([2.0, 1.0, -3.0])
    _agree(ufunc_call, (a, b, 3), (a, b, 2**33), (a[::-1], b, 3), (a, b, -1))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("family", sorted(fuzz23.FAMILIES))
def test_fuzz23_sample(family, seed):
    program = fuzz23.draw(23_000 + seed, [family])
    assert fuzz23.check(program) is None, program.source
