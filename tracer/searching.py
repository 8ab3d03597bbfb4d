"""Searching sorted and constant arrays by comparison counts: ``np.searchsorted`` (a
position in a sorted 1-d array is how many of its elements sort before the value),
``np.digitize`` (constant monotonic bins) and ``np.isin``, listed in ``FUNCTIONS``.

Each compares every value with every element (``n * m`` work, fused into one reduction),
which suits the bin edges and short vocabularies model code searches; NaN sorts last, as in
NumPy's sort order. ``searchsorted`` first checks that the array is sorted (a value guard
when it is traced): over an unsorted one NumPy's binary search answers otherwise.

>>> import tracejit as tj
>>> f = tj.jit(lambda x: np.digitize(x, [0.0, 1.0, 2.0]), cache="memory")
>>> f(np.array([-1.0, 0.5, 1.0, 7.0]))
array([0, 1, 2, 3])
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .primitives import as_array, is_traced

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def _sorts_before(x, y):
    """NumPy's sort order: ``x < y``, with NaN after every number."""
    if np.dtype(dtype_of(x)).kind != "f" and np.dtype(dtype_of(y)).kind != "f":
        return x < y
    return (x < y) | (np.isnan(y) & ~np.isnan(x))


def searchsorted(a, v, side="left", sorter=None):
    if sorter is not None:
        raise UnsupportedError("np.searchsorted(sorter=...) is not supported; sort first")
    if side not in ("left", "right"):
        raise as_numpy_would(ValueError(f"side must be 'left' or 'right' (got {side!r})"))
    a, v = as_array(a), as_array(v)
    if ndim_of(a) != 1:
        raise as_numpy_would(ValueError("object too deep for desired array"))
    if not _is_sorted(a):
        # NumPy's binary search over an unsorted array answers positions this count would
        # not; a traced array's order is a value guard, so NumPy answers those calls
        raise UnsupportedError("np.searchsorted of an array that is not sorted is not "
                               "supported (NumPy's answer depends on its binary search)")
    column = v[..., None]
    if side == "left":
        before = _sorts_before(a, column)
    else:
        before = ~_sorts_before(column, a)
    return np.sum(before, axis=-1, dtype=np.intp)


def _is_sorted(a):
    """Whether ``a`` is in NumPy's sort order (NaN last): a value guard when traced."""
    if shape_of(a)[0] == 0:
        return True
    return bool(np.all(~_sorts_before(a[1:], a[:-1])))


def _monotonicity(bins):
    if np.all(bins[1:] >= bins[:-1]):
        return 1
    if np.all(bins[1:] <= bins[:-1]):
        return -1
    return 0


def digitize(x, bins, right=False):
    if is_traced(bins):
        raise UnsupportedError("np.digitize with traced bins is not supported (NumPy checks "
                               "they are monotonic); pass constant bins")
    x, bins = as_array(x), np.asarray(bins)
    if np.dtype(dtype_of(x)).kind == "c":
        raise as_numpy_would(TypeError("x may not be complex"))
    if bins.ndim != 1:
        raise as_numpy_would(ValueError("object too deep for desired array"))
    mono = _monotonicity(bins)
    if mono == 0:
        raise as_numpy_would(ValueError("bins must be monotonically increasing or "
                                        "decreasing"))
    side = "left" if right else "right"
    if mono == -1:
        return len(bins) - searchsorted(bins[::-1], x, side=side)
    return searchsorted(bins, x, side=side)


def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    element = as_array(element)
    tests = np.ravel(as_array(test_elements))
    found = np.any(element[..., None] == tests, axis=-1)
    return ~found if invert else found


FUNCTIONS = {
    np.searchsorted: searchsorted,
    np.digitize: digitize,
    np.isin: isin,
}
