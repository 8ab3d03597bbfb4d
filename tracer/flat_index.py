"""Flat indices and coordinates: ``np.unravel_index`` and ``np.ravel_multi_index`` of
traced or eager integer arrays, composed from ``//``, ``%``, ``*`` and ``+``.

A shape may hold symbolic dims (``window.shape`` in a loop over a bucket of sizes): they
enter the arithmetic as traced ints, so the trace stays one program per bucket. NumPy
raises ``ValueError`` for an index outside the shape; here that is a value guard (``bool``
of "some index is out of range"), so a call that has one leaves compiled code and its
eager run raises NumPy's error.

The max-pool backward idiom, position of the largest element of a window:

>>> window = np.array([[0.5, 2.0], [np.nan, 1.0]])
>>> [int(i) for i in unravel_index(np.nanargmax(window), window.shape)]
[0, 1]
>>> int(ravel_multi_index((np.array(1), np.array(2)), (2, 3)))
5
"""

from __future__ import annotations

import numpy as np

from .nan_reductions import dtype_of, numpy_scalar, raise_as_numpy
from .shapes import size_of

_MODES = ("raise", "wrap", "clip")


def _as_indices(values):
    """``values`` as intp indices, refusing what NumPy refuses (floats)."""
    if dtype_of(values).kind not in "biu":
        raise_as_numpy(np.unravel_index, np.zeros((), dtype_of(values)), (1,))
    return values.astype(np.intp) if hasattr(values, "astype") else np.intp(values)


def _check_order(order):
    if order not in ("C", "F"):
        raise_as_numpy(np.unravel_index, 0, (1,), order=order)


def unravel_index(indices, shape, order="C"):
    """The coordinates of flat ``indices`` in an array of ``shape``: a tuple of intp
    arrays shaped like ``indices`` (``order='F'``: the first axis varies fastest)."""
    _check_order(order)
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if any(isinstance(dim, int) and dim < 0 for dim in dims):
        raise_as_numpy(np.unravel_index, indices, dims, order=order)
    indices = _as_indices(indices)
    size = size_of(dims)
    # A value guard: calls with an index out of range leave compiled code; NumPy raises.
    if bool(np.any((indices < 0) | (indices >= size))):
        raise_as_numpy(np.unravel_index, indices, dims, order=order)
    fastest_first = list(reversed(dims)) if order == "C" else list(dims)
    coordinates, remaining = [], indices
    for position, dim in enumerate(fastest_first):
        if position == len(fastest_first) - 1:
            coordinates.append(remaining)  # the slowest axis: in range, by the guard
        else:
            coordinates.append(remaining % dim)
            remaining = remaining // dim
    if order == "C":
        coordinates.reverse()
    return tuple(numpy_scalar(coordinate) for coordinate in coordinates)


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """The flat index of each coordinate tuple in ``multi_index`` (arrays that broadcast),
    in an array of shape ``dims``; ``mode`` ('raise', 'wrap', 'clip', or one per axis)
    says what an out-of-range coordinate does."""
    _check_order(order)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    modes = tuple(mode) if isinstance(mode, (tuple, list)) else (mode,) * len(dims)
    if len(multi_index) != len(dims) or len(modes) != len(dims) or any(
        each not in _MODES for each in modes
    ):
        raise_as_numpy(np.ravel_multi_index, multi_index, dims, mode=mode, order=order)
    coordinates, out_of_range = [], None
    for coordinate, dim, each in zip(multi_index, dims, modes):
        if dtype_of(coordinate).kind not in "biu":
            raise_as_numpy(np.ravel_multi_index, multi_index, dims, mode=mode, order=order)
        coordinate = _as_indices(coordinate)
        if each == "wrap":
            coordinate = coordinate % dim
        elif each == "clip":
            coordinate = np.clip(coordinate, 0, dim - 1)
        else:
            outside = (coordinate < 0) | (coordinate >= dim)
            out_of_range = outside if out_of_range is None else out_of_range | outside
        coordinates.append(coordinate)
    # A value guard, as in unravel_index.
    if out_of_range is not None and bool(np.any(out_of_range)):
        raise_as_numpy(np.ravel_multi_index, multi_index, dims, mode=mode, order=order)
    flat, stride = 0, 1
    axes = reversed(range(len(dims))) if order == "C" else range(len(dims))
    for axis in axes:
        flat = coordinates[axis] * stride + flat
        stride = stride * dims[axis]
    return numpy_scalar(flat) if hasattr(flat, "shape") else np.intp(flat)

