"""Whole-array comparisons that answer with a Python ``bool``: ``np.array_equal`` and
``np.array_equiv`` (listed in ``numpy_api.FUNCTIONS``).

NumPy returns a Python ``bool``, so the traced answer is taken under a value guard (as
``bool(x)`` is): a later call whose answer differs leaves compiled code there. That is
what a k-means or EM stopping test needs (``if np.array_equal(new, old): break``), and
what returning the answer costs.

>>> array_equal(np.array([1.0, np.nan]), np.array([1.0, np.nan]), equal_nan=True)
True
"""

from __future__ import annotations

import numpy as np

from . import ops
from .shapes import ShapeError, broadcast_shapes

shape_of, dtype_of = ops.shape_of, ops.dtype_of


def _as_array(a):
    return a if hasattr(a, "shape") else np.asarray(a)


def _same_shape(a, b):
    # each dim compared as NumPy's tuples are (a symbolic dim guards its bucket)
    return len(shape_of(a)) == len(shape_of(b)) and all(
        x == y for x, y in zip(shape_of(a), shape_of(b)))


def array_equal(a1, a2, equal_nan=False):
    a1, a2 = _as_array(a1), _as_array(a2)
    if not _same_shape(a1, a2):
        return False
    equal = a1 == a2
    if equal_nan and dtype_of(a1).kind in "fc" and dtype_of(a2).kind in "fc":
        equal = equal | (np.isnan(a1) & np.isnan(a2))
    return bool(np.all(equal))


def array_equiv(a1, a2):
    a1, a2 = _as_array(a1), _as_array(a2)
    try:
        broadcast_shapes(tuple(shape_of(a1)), tuple(shape_of(a2)))
    except ShapeError:
        return False
    return bool(np.all(a1 == a2))
