"""``np.cumsum``, ``np.cumprod``, ``np.maximum.accumulate``, ``np.sort`` and
``np.argsort`` composed from primitives.

These are sequential in NumPy; here each is a dense composition over the axis length
``n`` so the result has a static rule, a gradient from the primitives' VJPs and a
symbolic ``n`` per bucket:

* ``cumsum`` is a primitive of its own (``tracejit.tracer.ops.scan``): compiled code adds
  in NumPy's order, so its running sums are NumPy's to the bit, in O(n);
* ``cumprod`` is a scan as ``cumsum`` (``ops.cumprod``): NumPy's order, NumPy's bits;
* ``np.maximum``/``np.minimum.accumulate`` reduce a triangle: each
  running value is the product (maximum, minimum) of its prefix, the elements after it
  replaced by the reduction's identity;
* ``sort``/``argsort`` rank every element by counting the elements that sort before it
  (NaN last, ties by position: NumPy's stable order), then place each element at its
  rank with a select. That is ``O(n^2)`` work and memory per row: right for the short
  axes model code sorts (top-k of logits, a few scores), wrong for long ones: axes longer
  than ``SORT_LIMIT`` (``CUMSUM_LIMIT`` for cumprod and the running extrema) are refused,
  so jit runs them eagerly.

>>> cumsum(np.array([1, 2, 3])).tolist(), sort(np.array([3.0, np.nan, 1.0])).tolist()
([1, 3, 6], [1.0, 3.0, nan])
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .ops import dtype_of
from .out_arguments import write_out
from .primitives import bind
from .shapes import normalize_axis

shape_of, ndim_of = ops.shape_of, ops.ndim_of

# The dense compositions build (n, n) matrices per axis of length n (per row, for sort):
# past these lengths the memory is out of proportion, so the call is refused (under jit:
# runs eagerly, with this reason). A symbolic length compares as a guard on its bucket.
CUMSUM_LIMIT = 4096
SORT_LIMIT = 1024


def _check_length(n, limit, name):
    if n > limit:
        raise UnsupportedError(
            f"np.{name} along an axis of {n} elements: tracejit composes it from an (n, n) "
            f"matrix, which it refuses past n = {limit}; compute it outside the compiled "
            "function")


def _along_last(a, axis):
    """``a`` with ``axis`` moved last (flattened first for ``axis=None``), and the axis."""
    if axis is None:
        return ops.reshape(a, (-1,)), -1, None
    axis = normalize_axis(axis, ndim_of(a))
    return ops.swapaxes(a, axis, -1), axis, axis


def _scanned_last(a, axis, dtype):
    """``a`` in ``dtype`` with the scanned ``axis`` moved last (``_along_last``), and the
    axis to move back; NumPy's AxisError for an axis of a 0-d value."""
    if axis is not None and ndim_of(a) == 0:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of "
                                      "dimension 0")
    x, _, moved = _along_last(a, axis)
    return (x if dtype_of(x) == dtype else x.astype(dtype)), moved


def _one_element_if_0d(a):
    """NumPy's cumsum and cumprod scan a 0-d value as one element: np.cumsum(s, axis=0) of
    a 0-d ``s`` is ``[s]`` (axis 1 is out of bounds "for array of dimension 1")."""
    return ops.reshape(a, (1,)) if ndim_of(a) == 0 else a


def _back(result, axis):
    return result if axis is None else ops.swapaxes(result, axis, -1)


def _positions(n, like, shape):
    return ops.reshape(ops.iota(n, np.int64, like=like), shape)


def cumsum(a, axis=None, dtype=None, out=None):
    """NumPy's ``cumsum``: integers and booleans accumulate in int64 (the platform int)."""
    if not hasattr(a, "shape"):
        a = np.asarray(a)
    a = _one_element_if_0d(a)
    if dtype is None:
        dtype = np.cumsum(np.zeros(1, dtype_of(a))).dtype  # NumPy's accumulator dtype
    dtype = np.dtype(dtype)
    x, moved = _scanned_last(a, axis, dtype)
    if dtype.kind == "c":  # (compiled code takes no complex values: traced only)
        n = shape_of(x)[-1]
        _check_length(n, CUMSUM_LIMIT, "cumsum")
        upper = _positions(n, x, (n, 1)) <= _positions(n, x, (1, n))
        result = ops.matmul(x, upper.astype(dtype))
    else:  # NumPy's order, so NumPy's bits (tracejit.tracer.ops.scan)
        result = ops.cumsum(x)
    result = _back(result, moved)
    if out is not None:
        return write_out(out, result, "np.cumsum")
    return result


def cumprod(a, axis=None, dtype=None, out=None):
    """NumPy's ``cumprod``: a scan primitive multiplying in NumPy's order, so NumPy's bits
    (integers and booleans in int64, as NumPy accumulates them; an inf meets the
    denormals one at a time, as in NumPy, and gives inf, not NaN)."""
    if not hasattr(a, "shape"):
        a = np.asarray(a)
    a = _one_element_if_0d(a)
    if dtype is None:
        dtype = np.cumprod(np.zeros(1, dtype_of(a))).dtype  # NumPy's accumulator dtype
    dtype = np.dtype(dtype)
    if dtype.kind == "c":  # (compiled code takes no complex values: traced only)
        result = _running(ops.prod_p, a, axis, dtype, 1, "cumprod")
    else:  # NumPy's order, so NumPy's bits (tracejit.tracer.ops.scan)
        x, moved = _scanned_last(a, axis, dtype)
        # the O(n) scan's gradient is the triangle's, O(n^2): the same limit as before
        _check_length(shape_of(x)[-1], CUMSUM_LIMIT, "cumprod")
        result = _back(ops.cumprod(x), moved)
    if out is not None:
        return write_out(out, result, "np.cumprod")
    return result


def _running(prim, a, axis, dtype, fill, name):
    """The running reduction ``prim`` along ``axis``: for each position, ``prim`` over the
    elements up to it, the ones after it replaced by ``fill`` (the reduction's identity)."""
    x, moved = _scanned_last(a, axis, dtype)
    n = shape_of(x)[-1]
    if n == 0:  # no running values (and np.max of nothing has no identity)
        return _back(x if x is not a else x.copy(), moved)
    _check_length(n, CUMSUM_LIMIT, name)
    upper = _positions(n, x, (n, 1)) <= _positions(n, x, (1, n))  # i is in running k
    terms = np.where(upper, ops.reshape(x, shape_of(x) + (1,)), np.asarray(fill, dtype))
    result = bind(prim, terms, axes=(ndim_of(x) - 1,), keepdims=False)
    if dtype_of(result) != dtype:
        result = result.astype(dtype)
    return _back(result, moved)


def _identity(dtype, largest):
    """The identity of ``np.maximum`` (``largest=False``) or ``np.minimum`` in ``dtype``."""
    if dtype.kind == "f":
        return np.inf if largest else -np.inf
    if dtype.kind == "b":
        return bool(largest)
    limits = np.iinfo(dtype)
    return limits.max if largest else limits.min


def one_accumulated_axis(array, axis):
    """``ufunc.accumulate``'s axis: one axis (``None`` only for a vector), never 0-d."""
    if not hasattr(array, "shape"):
        array = np.asarray(array)
    if ndim_of(array) == 0:
        raise as_numpy_would(TypeError("cannot accumulate on a scalar"))
    if axis is None or isinstance(axis, tuple):
        if axis is None and ndim_of(array) == 1 or axis == (0,) and ndim_of(array) == 1:
            return 0
        raise as_numpy_would(ValueError("accumulate does not allow multiple axes"))
    return axis


def maximum_accumulate(array, axis=0, dtype=None, out=None):
    """``np.maximum.accumulate``: the running maximum (a drawdown's peak); NaN, once met,
    stays, as ``np.maximum`` propagates it."""
    return _extreme_accumulate(ops.max_p, "maximum", array, axis, dtype, out)


def minimum_accumulate(array, axis=0, dtype=None, out=None):
    """``np.minimum.accumulate``: the running minimum."""
    return _extreme_accumulate(ops.min_p, "minimum", array, axis, dtype, out)


def _extreme_accumulate(prim, name, array, axis, dtype, out):
    if not hasattr(array, "shape"):
        array = np.asarray(array)
    axis = one_accumulated_axis(array, axis)
    dtype = dtype_of(array) if dtype is None else np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise UnsupportedError(f"np.{name}.accumulate of {dtype} is not supported")
    result = _running(prim, array, axis, dtype, _identity(dtype, largest=name == "minimum"),
                      f"{name}.accumulate")
    if dtype.kind == "f":
        result = _latest_zero_sign(result, array, axis, dtype, f"{name}.accumulate")
    if out is not None:
        return write_out(out, result, f"np.{name}.accumulate")
    return result


def _latest_zero_sign(result, array, axis, dtype, name):
    """A running maximum or minimum that is zero, with the sign of the latest zero met:
    ``np.maximum`` gives its second operand at a tie (``maximum(0.0, -0.0)`` is -0.0), so
    NumPy's accumulate keeps the latest of equal values, where the reduction keeps one."""
    x, moved = _scanned_last(array, axis, dtype)
    n = shape_of(x)[-1]
    if isinstance(n, int) and n == 0:
        return result
    at = np.where(x == 0, _positions(n, x, (n,)), np.asarray(-1, np.int64))
    latest = _running(ops.max_p, at, -1, np.dtype(np.int64), -1, name)
    zero = np.take_along_axis(x, np.maximum(latest, 0), axis=-1)
    running, _, _ = _along_last(result, axis)
    return _back(np.where((running == 0) & (latest >= 0), zero, running), moved)


def _before(x):
    """``before[..., i, j]``: element ``j`` sorts before element ``i`` (NumPy's order:
    NaN after everything, equal elements by position)."""
    less, equal, earlier = _comparisons(x)
    return less | (equal & earlier)


def _no_ties(x):
    """Whether no axis holds two equal elements (or two NaN): NumPy's default argsort
    (quicksort: introsort or a SIMD sort) orders those as it happens to, which no
    composition reproduces. For integers and booleans, traced, ``bool`` makes it a guard,
    so a later call with ties leaves compiled code for NumPy."""
    ordered = sort(x, axis=-1)
    repeats = np.any(ordered[..., 1:] == ordered[..., :-1])
    if dtype_of(x).kind != "f":
        return bool(~repeats)
    # Floats: computed values differ from NumPy's by rounding, so a guard on their
    # equality could rarely be decided (every call would run eagerly); the ties of the
    # traced call are checked on its real values only (docs/sharp_bits.md).
    repeats = repeats | np.any(np.sum(np.isnan(x), axis=-1) > 1)
    return not np.asarray(getattr(repeats, "value", repeats)).item()


def _comparisons(x):
    """``(less, equal, earlier)[..., i, j]``: element ``j`` is less than / equal to /
    before element ``i`` in NumPy's sort order (NaN after everything)."""
    n = shape_of(x)[-1]
    mine = ops.reshape(x, shape_of(x) + (1,))
    other = ops.reshape(x, shape_of(x)[:-1] + (1, n))
    earlier = _positions(n, x, (1, n)) < _positions(n, x, (n, 1))
    if dtype_of(x).kind == "f":
        mine_nan, other_nan = np.isnan(mine), np.isnan(other)
        less = (other < mine) | (mine_nan & ~other_nan)
        equal = (other == mine) | (mine_nan & other_nan)
    elif dtype_of(x).kind == "b":
        less = ~other & mine
        equal = other == mine
    else:
        less, equal = other < mine, other == mine
    return less, equal, earlier


def _placement(x):
    """``placed[..., i, k]``: element ``i`` goes to position ``k`` of the sorted axis."""
    n = shape_of(x)[-1]
    _check_length(n, SORT_LIMIT, "sort")
    rank = ops.reduce_sum(_before(x), (ndim_of(x),))  # [..., i]
    return ops.reshape(rank, shape_of(rank) + (1,)) == _positions(n, x, (1, n))


def _check_sort(kind, order, name):
    if order is not None:
        raise UnsupportedError(f"np.{name}(order=...) (structured arrays) is not supported")
    if kind not in (None, "quicksort", "mergesort", "heapsort", "stable"):
        raise ValueError(f"{name}: unknown kind {kind!r}")


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """NumPy's ``sort`` along ``axis`` (``None``: flattened). See the module docstring for
    the cost."""
    _check_sort(kind, order, "sort")
    if not hasattr(a, "shape"):
        a = np.asarray(a)
    if ndim_of(a) == 0 and axis is not None:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of "
                                      "dimension 0")
    x, _, moved = _along_last(a, axis)
    dtype = dtype_of(x)
    placed = _placement(x)
    values = ops.reshape(x, shape_of(x) + (1,))
    if dtype.kind == "b":
        result = np.any(placed & values, axis=-2)
    else:
        # The element that lands at each position, gathered: a permutation, exact (a sum
        # of it and zeros made -0.0 a 0.0, and carried a rounding bound that put every
        # compare of sorted values with the elements, np.searchsorted(np.sort(x), x), at
        # a guard-margin exit)
        n = shape_of(x)[-1]
        index = _positions(n, x, (n, 1))
        order = ops.reduce_sum(np.where(placed, index, np.zeros((), np.int64)),
                               (ndim_of(x) - 1,))
        result = np.take_along_axis(x, order, axis=-1)
    return _back(result, moved)


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """NumPy's ``argsort``: equal elements keep their order (``kind="stable"``); NumPy's
    default kinds order ties their own way, so for them ties leave compiled code."""
    _check_sort(kind, order, "argsort")
    if not hasattr(a, "shape"):
        a = np.asarray(a)
    if ndim_of(a) == 0 and axis is not None:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of "
                                      "dimension 0")
    x, _, moved = _along_last(a, axis)
    if not (stable or kind in ("stable", "mergesort")) and shape_of(x)[-1] != 1:
        if getattr(type(x), "__tracejit_priority__", 0) < 2:  # not traced: NumPy's own ties
            return np.asarray(np.argsort(np.asarray(getattr(a, "data", a)), axis=axis,
                                         kind=kind))
        if not _no_ties(x):
            raise UnsupportedError(
                "np.argsort of an axis holding equal elements: NumPy's default kind orders "
                "ties its own way, which compiled code cannot reproduce; pass "
                "kind='stable' to compile it")
    n = shape_of(x)[-1]
    placed = _placement(x)
    index = _positions(n, x, (n, 1))
    result = ops.reduce_sum(np.where(placed, index, np.zeros((), np.int64)), (ndim_of(x) - 1,))
    if dtype_of(result) != np.dtype(np.intp):
        result = result.astype(np.intp)
    return _back(result, moved)
