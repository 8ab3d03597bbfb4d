"""NumPy's rearranging functions composed from slices, flips, transposes and
concatenations: ``np.append``, ``np.insert`` and ``np.delete`` (constant positions),
``np.fliplr``, ``np.flipud``, ``np.rot90``, ``np.column_stack``, ``np.dstack``,
``np.rollaxis``, ``np.meshgrid``, ``np.ix_``, ``np.resize``, ``np.block``, ``np.hsplit``,
``np.vsplit``, ``np.dsplit`` (listed in ``FUNCTIONS``, which ``numpy_api`` joins).

Lengths stay symbolic: ``ids = np.append(ids, nxt)`` in a generation loop concatenates,
and a position counted from the end of a symbolic axis is a dim expression.

>>> import tracejit as tj
>>> f = tj.jit(lambda x: np.append(np.rot90(x), x[0, 0]), cache="memory")
>>> f(np.arange(4.0).reshape(2, 2))
array([1., 3., 0., 2., 0.])
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .dims import SymInt
from .errors import UnsupportedError, as_numpy_would
from .primitives import as_array, is_traced
from .shapes import normalize_axis

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def _take_range(a, axis, start, stop):
    shape = shape_of(a)
    starts = tuple(start if i == axis else 0 for i in range(len(shape)))
    limits = tuple(stop if i == axis else dim for i, dim in enumerate(shape))
    return ops.slice_axes(a, starts, limits, (1,) * len(shape))


def append(arr, values, axis=None):
    arr, values = as_array(arr), as_array(values)
    if axis is None:
        return np.concatenate((np.ravel(arr), np.ravel(values)))
    return np.concatenate((arr, values), axis=axis)


def _position(index, length, what, inclusive=False):
    """A constant position on an axis of ``length`` (a dim or int), counted from the
    end when negative, checked as NumPy checks it."""
    if is_traced(index) and not isinstance(index, SymInt):
        index = operator.index(index)  # a run-time int decides the shape: guarded
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer, SymInt)):
        raise UnsupportedError(f"np.{what} with positions other than one int is not "
                               "supported by tracejit (constant ints only)")
    high = length + 1 if inclusive else length
    if not (-length <= index < high):
        raise as_numpy_would(IndexError(
            f"index {int(index)} is out of bounds for axis with size {int(length)}"))
    return index + length if index < 0 else index


def delete(arr, obj, axis=None):
    """``np.delete`` at constant positions (an int, a slice, a list of ints or a mask)."""
    arr = as_array(arr)
    if axis is None:
        arr, axis = np.ravel(arr), 0
    axis = normalize_axis(axis, ndim_of(arr))
    length = shape_of(arr)[axis]
    if isinstance(obj, (int, np.integer, SymInt)) and not isinstance(obj, (bool, np.bool_)):
        position = _position(obj, length, "delete")
        return np.concatenate((_take_range(arr, axis, 0, position),
                               _take_range(arr, axis, position + 1, length)), axis=axis)
    if is_traced(obj):
        raise UnsupportedError("np.delete at traced positions is not supported (the "
                               "result's shape would depend on data)")
    if isinstance(length, SymInt):
        raise UnsupportedError("np.delete of several positions of a dynamic-length axis "
                               "is not supported; delete one int position at a time")
    keep = np.delete(np.arange(length), obj)
    return ops.gather(arr, keep.astype(np.int64), axis=axis)


def insert(arr, obj, values, axis=None):
    """``np.insert`` before one constant int position; ``values`` broadcast to the new
    slot and cast to ``arr``'s dtype, as NumPy casts them."""
    arr = as_array(arr)
    if axis is None:
        arr, axis = np.ravel(arr), 0
    ndim = ndim_of(arr)
    axis = normalize_axis(axis, ndim)
    length = shape_of(arr)[axis]
    if not isinstance(obj, (int, np.integer, SymInt)) or isinstance(obj, (bool, np.bool_)):
        raise UnsupportedError("np.insert with positions other than one int is not "
                               "supported by tracejit (constant ints only)")
    position = _position(obj, length, "insert", inclusive=True)
    values = as_array(values)
    if ndim_of(values) > ndim:
        raise UnsupportedError("np.insert of values with more dimensions than the array "
                               "is not supported")
    values = ops.reshape(values, (1,) * (ndim - ndim_of(values)) + tuple(shape_of(values)))
    values = np.moveaxis(values, 0, axis)  # NumPy's ndmin, then its moveaxis for one int
    slot = tuple(shape_of(values)[axis] if i == axis else dim
                 for i, dim in enumerate(shape_of(arr)))
    values = np.broadcast_to(values.astype(dtype_of(arr)), slot)
    return np.concatenate((_take_range(arr, axis, 0, position), values,
                           _take_range(arr, axis, position, length)), axis=axis)


def fliplr(m):
    if ndim_of(m) < 2:
        raise as_numpy_would(ValueError("Input must be >= 2-d."))
    return np.flip(m, 1)


def flipud(m):
    if ndim_of(m) < 1:
        raise as_numpy_would(ValueError("Input must be >= 1-d."))
    return np.flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    """NumPy's own steps: flips and one transpose."""
    axes = tuple(axes)
    ndim = ndim_of(m)
    if len(axes) != 2:
        raise as_numpy_would(ValueError("len(axes) must be 2."))
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == ndim:
        raise as_numpy_would(ValueError("Axes must be different."))
    if not (-ndim <= axes[0] < ndim and -ndim <= axes[1] < ndim):
        raise as_numpy_would(ValueError(f"Axes={axes} out of range for array of ndim={ndim}."))
    k = operator.index(k) % 4
    if k == 0:
        return m[...]
    if k == 2:
        return np.flip(np.flip(m, axes[0]), axes[1])
    order = list(range(ndim))
    order[axes[0]], order[axes[1]] = order[axes[1]], order[axes[0]]
    if k == 1:
        return np.transpose(np.flip(m, axes[1]), order)
    return np.flip(np.transpose(m, order), axes[1])


def column_stack(tup):
    columns = []
    for value in tup:
        value = as_array(value)
        if ndim_of(value) < 2:  # NumPy's ndmin=2, transposed: a vector is a column
            value = ops.reshape(value, (-1, 1) if ndim_of(value) else (1, 1))
        columns.append(value)
    return np.concatenate(columns, axis=1)


def dstack(tup):
    return np.concatenate([np.atleast_3d(as_array(value)) for value in tup], axis=2)


def _split_on(name, ary, indices_or_sections, axis, least_ndim):
    if ndim_of(ary) < least_ndim:
        raise as_numpy_would(ValueError(
            f"{name} only works on arrays of {least_ndim} or more dimensions"))
    return np.split(ary, indices_or_sections, axis=axis)


def hsplit(ary, indices_or_sections):
    """``np.split`` along the columns, a vector along its only axis (an LSTM's stacked
    gates: ``i, f, o, g = np.hsplit(z, 4)``)."""
    ary = as_array(ary)
    axis = 1 if ndim_of(ary) > 1 else 0
    return _split_on("hsplit", ary, indices_or_sections, axis, 1)


def vsplit(ary, indices_or_sections):
    return _split_on("vsplit", as_array(ary), indices_or_sections, 0, 2)


def dsplit(ary, indices_or_sections):
    return _split_on("dsplit", as_array(ary), indices_or_sections, 2, 3)


def rollaxis(a, axis, start=0):
    """NumPy's own index arithmetic (``start`` counts positions before the roll)."""
    ndim = ndim_of(a)
    axis = normalize_axis(axis, ndim)
    if start < 0:
        start += ndim
    if not 0 <= start < ndim + 1:
        raise as_numpy_would(np.exceptions.AxisError(
            f"'start' arg requires {-ndim} <= start < {ndim + 1}, but {start - ndim} was "
            "passed in" if start < 0 else
            f"'start' arg requires {-ndim} <= start < {ndim + 1}, but {start} was passed in"))
    if axis < start:
        start -= 1
    if axis == start:
        return a[...]
    order = list(range(ndim))
    order.remove(axis)
    order.insert(start, axis)
    return np.transpose(a, order)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise as_numpy_would(ValueError("Valid values for `indexing` are 'xy' and 'ij'."))
    count = len(xi)
    grids = [ops.reshape(as_array(x), (1,) * i + (-1,) + (1,) * (count - i - 1))
             for i, x in enumerate(xi)]
    if indexing == "xy" and count > 1:  # the first two axes swapped
        grids[0] = ops.reshape(grids[0], (1, -1) + (1,) * (count - 2))
        grids[1] = ops.reshape(grids[1], (-1, 1) + (1,) * (count - 2))
    if not sparse:
        grids = list(np.broadcast_arrays(*grids))
    if copy:
        grids = [grid.copy() for grid in grids]
    return tuple(grids)


def ix_(*args):
    """NumPy's open mesh: each 1-d sequence reshaped along its own axis (a window of rows
    and columns, ``x[np.ix_(np.arange(i, i + k), np.arange(j, j + k))]`` with ``i`` a loop
    index). A traced boolean one would be its ``nonzero()``: a length the data decides."""
    out = []
    for position, sequence in enumerate(args):
        if getattr(type(sequence), "__tracejit_priority__", 0) < 1 and not isinstance(
                sequence, np.ndarray):  # a list: NumPy's array of it (Tensors stay Tensors)
            sequence = np.asarray(sequence)
            if sequence.size == 0:  # as NumPy: an empty list indexes, as intp
                sequence = sequence.astype(np.intp)
        if ndim_of(sequence) != 1:
            raise as_numpy_would(ValueError("Cross index must be 1 dimensional"))
        if np.dtype(dtype_of(sequence)) == np.bool_:
            if is_traced(sequence):
                raise UnsupportedError("np.ix_ of a traced boolean mask: its nonzero() has a "
                                       "length the data decides")
            sequence = np.nonzero(sequence)[0]
        shape = (1,) * position + (shape_of(sequence)[0],) + (1,) * (len(args) - position - 1)
        out.append(ops.reshape(sequence, shape))
    return tuple(out)


def resize(a, new_shape):
    """``np.resize``: the flattened array repeated to fill ``new_shape``, a gather at
    ``i % size`` (a symbolic size stays symbolic)."""
    shape = tuple(new_shape) if isinstance(new_shape, (tuple, list)) else (new_shape,)
    if any(dim < 0 for dim in shape):
        raise as_numpy_would(ValueError("all elements of `new_shape` must be non-negative"))
    flat = np.ravel(as_array(a))
    total = 1
    for dim in shape:
        total = total * dim
    size = shape_of(flat)[0]
    if size == 0 or total == 0:
        return np.zeros_like(flat, shape=shape)
    positions = np.remainder(ops.iota(total, np.int64, like=flat), size)
    return ops.reshape(ops.gather(flat, positions, axis=0), shape)


def block(arrays):
    """``np.block``: the innermost lists concatenated along the last axis, each level out
    along the axis before, every leaf first given the result's rank."""
    depth, deepest = _block_depth(arrays)
    leaves = []

    def collect(item):
        if isinstance(item, list):
            for each in item:
                collect(each)
        else:
            leaves.append(item)

    collect(arrays)
    rank = max(depth, max((ndim_of(as_array(leaf)) for leaf in leaves), default=0))

    def assemble(item, remaining):
        if isinstance(item, list):
            return np.concatenate([assemble(each, remaining - 1) for each in item],
                                  axis=-remaining)
        leaf = as_array(item)
        return ops.reshape(leaf, (1,) * (rank - ndim_of(leaf)) + tuple(shape_of(leaf)))

    result = assemble(arrays, depth)
    return result.copy() if depth == 0 else result


def _block_depth(arrays, index=()):
    """The nesting depth of ``arrays`` (the same for every leaf, as NumPy checks)."""
    if type(arrays) is tuple:
        raise as_numpy_would(TypeError(
            f"arrays{''.join(f'[{i}]' for i in index)} is a tuple. Only lists can be used "
            "to arrange blocks, and np.block does not allow implicit conversion from tuple "
            "to ndarray."))
    if type(arrays) is not list:
        return 0, index
    if not arrays:
        raise as_numpy_would(ValueError("List at arrays cannot be empty"))
    depths = [_block_depth(item, index + (i,)) for i, item in enumerate(arrays)]
    first = depths[0][0]
    if any(depth != first for depth, _ in depths):
        raise as_numpy_would(ValueError("List depths are mismatched"))
    return first + 1, depths[0][1]


FUNCTIONS = {
    np.resize: resize,
    np.block: block,
    np.append: append,
    np.delete: delete,
    np.insert: insert,
    np.fliplr: fliplr,
    np.flipud: flipud,
    np.rot90: rot90,
    np.column_stack: column_stack,
    np.dstack: dstack,
    np.rollaxis: rollaxis,
    np.meshgrid: meshgrid,
    np.ix_: ix_,
    np.hsplit: hsplit,
    np.vsplit: vsplit,
    np.dsplit: dsplit,
}
