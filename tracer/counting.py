"""Counting occurrences: ``np.bincount``, listed in ``FUNCTIONS``.

Graph code counts degrees (``np.bincount(dst, minlength=n)``), classifiers count labels
(``np.bincount(y, minlength=n_classes)``) and k-means sums points per cluster
(``np.bincount(labels, weights=x[:, 0], minlength=k)``). NumPy's result is
``max(minlength, x.max() + 1)`` long: a length that depends on the data, unless every
value is below ``minlength``. So a traced ``x`` is checked against ``minlength`` (a value
guard): where it holds, the counts are a scatter-add of ones (or of the weights) into
``minlength`` zeros (``indexing.add_at``, unbuffered as NumPy's loop); where a value
reaches past it (or is negative, where NumPy raises) NumPy runs the call. Without
``minlength`` a traced ``x`` runs eagerly, naming the call.

>>> import tracejit as tj
>>> f = tj.jit(lambda dst, n: np.bincount(dst, minlength=n), cache="memory")
>>> f(np.array([0, 2, 2, 3]), 5)
array([1, 0, 2, 1, 0])
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .dims import SymInt
from .errors import UnsupportedError, as_numpy_would
from .indexing import add_at
from .primitives import as_array, is_traced

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def bincount(x, weights=None, minlength=0):
    if is_traced(minlength):  # a run-time int argument decides the length: its value,
        minlength = operator.index(minlength)  # under a guard (pinned_scalars)
    if not isinstance(minlength, (int, np.integer, SymInt)) or isinstance(minlength, bool):
        raise UnsupportedError("np.bincount(minlength=...) of other than an int")
    if not isinstance(minlength, SymInt) and minlength < 0:
        raise as_numpy_would(ValueError("'minlength' must not be negative"))
    x = as_array(x)
    kind = np.dtype(dtype_of(x)).kind
    if ndim_of(x) != 1:
        raise as_numpy_would(ValueError("object too deep for desired array" if ndim_of(x) > 1
                                        else "object of too small depth for desired array"))
    if kind not in "biu" or np.dtype(dtype_of(x)) == np.uint64:
        raise as_numpy_would(TypeError(f"Cannot cast array data from dtype('{dtype_of(x)}') "
                                       "to dtype('int64') according to the rule 'safe'"))
    if weights is not None:
        weights = as_array(weights)
        if np.dtype(dtype_of(weights)).kind not in "biuf":
            raise UnsupportedError("np.bincount with complex or object weights")
        if tuple(shape_of(weights)) != tuple(shape_of(x)):
            # (a dynamic length equal to x's is the same dim: no guard)
            raise as_numpy_would(ValueError("The weights and list don't have the same length."))
    # NumPy counts in intp: bools, unsigned and narrow ints (int16 ids) are cast first
    x = ops.bind(ops.cast_p, x, dtype=np.dtype(np.intp)) if kind != "i" or np.dtype(
        dtype_of(x)).itemsize < 4 else x
    length = _length(x, minlength)
    if weights is None or shape_of(x)[0] == 0:  # NumPy counts nothing in ints, weighted too
        return add_at(ops.full((length,), 0, np.intp, like=x), x,
                      np.ones((), dtype=np.intp))
    return add_at(ops.full((length,), 0.0, np.float64, like=x), x, weights)


def _length(x, minlength):
    """The result's length: ``minlength`` once every value of ``x`` is in ``[0,
    minlength)`` (a value guard on a traced ``x``)."""
    if not is_traced(x):
        values = np.asarray(x)
        if values.size and values.min() < 0:
            raise as_numpy_would(ValueError("'list' argument must have no negative elements"))
        return max(minlength, int(values.max()) + 1) if values.size else minlength
    if not bool(np.all((x >= 0) & (x < minlength))):
        # NumPy's result would be longer than minlength (a length the data decides), or
        # it raises at a negative value: NumPy runs this call
        raise UnsupportedError("np.bincount of a traced array with a value past minlength "
                               "(or without minlength): the length of its result depends on "
                               "the data; pass minlength above every value")
    return minlength


FUNCTIONS = {np.bincount: bincount}
