"""NumPy indexing (``x[index]``) composed from primitives.

Basic indexing (ints, slices with any step, ``None``, ``...``) becomes ``slice`` (positive
steps), ``flip`` (negative steps) and ``reshape``; integer arrays and boolean masks become
one ``gather`` over the indexed axes, flattened when there are several, with NumPy's rule
for where the broadcast index dimensions land. Dims may be symbolic, so bounds are
computed with plain comparisons rather than ``slice.indices``.

>>> getitem(np.arange(10), slice(None, None, -3)).tolist()
[9, 6, 3, 0]
>>> getitem(np.arange(6).reshape(2, 3), (np.array([1, 0]), np.array([2, 2]))).tolist()
[5, 2]
"""

from __future__ import annotations

import numpy as np

from . import ops
from .ops import ndim_of, shape_of
from .shapes import broadcast_shapes, size_of


def _is_integer(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_array(value):
    return hasattr(value, "shape") and hasattr(value, "dtype") and not _is_integer(value)


def _index_error(index, axis, dim):
    return IndexError(f"index {index} is out of bounds for axis {axis} with size {dim}")


def _clamp(value, low, high):
    return low if value < low else high if value > high else value


def normalize_slice(entry, dim):
    """``(start, limit, step, flipped)`` with ``step > 0`` selecting what ``entry`` selects
    from an axis of length ``dim``, in reverse order when ``flipped``."""
    step = 1 if entry.step is None else int(entry.step)
    if step == 0:
        raise ValueError("slice step cannot be zero")

    def bound(value, default, low, high):
        if value is None:
            return default
        value = value + dim if value < 0 else value
        return _clamp(value, low, high)

    if step > 0:
        start = bound(entry.start, 0, 0, dim)
        limit = bound(entry.stop, dim, 0, dim)
        return start, (limit if limit > start else start), step, False
    start = bound(entry.start, dim - 1, -1, dim - 1)
    stop = bound(entry.stop, -1, -1, dim - 1)
    count = (start - stop - step - 1) // -step if start > stop else 0
    if count == 0:
        return 0, 0, 1, False
    return start - (count - 1) * -step, start + 1, -step, True


def _expand(index, ndim):
    """The index as a list of entries, one per indexed axis (plus ``None``s); Ellipsis
    expanded, lists made arrays, boolean masks turned into their integer positions."""
    if not isinstance(index, tuple):
        index = (index,)
    entries = []
    for entry in index:
        if isinstance(entry, list):
            entry = np.asarray(entry)
            if entry.dtype == object:
                raise IndexError("only integers, slices, None, Ellipsis and integer or "
                                 "boolean arrays are valid indices")
        if _is_array(entry) and np.dtype(entry.dtype) == np.bool_:
            entries.append(("mask", entry))
        else:
            entries.append(entry)
    used = sum(
        ndim_of(entry[1]) if isinstance(entry, tuple) else 1
        for entry in entries
        if entry is not None and entry is not Ellipsis
    )
    if used > ndim:
        raise IndexError(
            f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed"
        )
    ellipses = sum(entry is Ellipsis for entry in entries)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    expanded = []
    for entry in entries:
        if entry is Ellipsis:
            expanded.extend([slice(None)] * (ndim - used))
        elif isinstance(entry, tuple):
            # A k-d mask covers k axes: one integer index array per axis.
            expanded.extend(("mask", positions) for positions in np.nonzero(entry[1]))
        else:
            expanded.append(entry)
    if not ellipses:
        expanded.extend([slice(None)] * (ndim - used))
    return [entry[1] if isinstance(entry, tuple) else entry for entry in expanded]


def _check_mask_shape(index, shape):
    axis = 0
    for entry in index if isinstance(index, tuple) else (index,):
        if entry is None:
            continue
        if entry is Ellipsis:
            return  # masks after an ellipsis are checked by np.nonzero's shapes below
        if _is_array(entry) and np.dtype(entry.dtype) == np.bool_:
            for k, mask_dim in enumerate(shape_of(entry)):
                if axis + k < len(shape) and mask_dim != shape[axis + k]:
                    raise IndexError(
                        f"boolean index did not match indexed array along axis {axis + k}; "
                        f"size of axis is {shape[axis + k]} but size of corresponding boolean "
                        f"axis is {mask_dim}"
                    )
            axis += ndim_of(entry)
        else:
            axis += 1


def getitem(x, index):
    """``x[index]`` with NumPy's semantics, built from primitives."""
    shape = tuple(shape_of(x))
    _check_mask_shape(index, shape)
    entries = _expand(index, len(shape))
    has_arrays = any(_is_array(entry) for entry in entries)

    starts, limits, steps, flipped, new_shape, advanced = [], [], [], [], [], []
    axis = 0
    for entry in entries:
        if entry is None:
            new_shape.append(1)
            continue
        dim = shape[axis]
        if isinstance(entry, slice):
            start, limit, step, flip = normalize_slice(entry, dim)
            count = ops.slice_length(start, limit, step)
            if flip:
                flipped.append(axis)
            new_shape.append(count)
        elif _is_integer(entry) and not has_arrays:
            position = int(entry) + dim if entry < 0 else int(entry)
            if not 0 <= position < dim:
                raise _index_error(int(entry), axis, dim)
            start, limit, step = position, position + 1, 1
        elif _is_integer(entry) or _is_array(entry):
            start, limit, step = 0, dim, 1
            advanced.append((len(new_shape), axis, entry))
            new_shape.append(dim)
        else:
            raise IndexError(
                "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
                f"integer or boolean arrays are valid indices, not {type(entry).__name__}"
            )
        starts.append(start)
        limits.append(limit)
        steps.append(step)
        axis += 1

    result = ops.slice_axes(x, starts, limits, steps)
    result = ops.flip(result, flipped)
    result = ops.reshape(result, tuple(new_shape))
    return _gather_advanced(result, advanced) if advanced else result


def _gather_advanced(x, advanced):
    """Integer-array indexing of ``x`` at ``(position, source_axis, index)`` entries."""
    positions = [position for position, _, _ in advanced]
    if positions != list(range(positions[0], positions[0] + len(positions))):
        # Separated index arrays: NumPy puts the broadcast index dims first.
        rest = [axis for axis in range(ndim_of(x)) if axis not in positions]
        x = ops.transpose(x, positions + rest)
        positions = list(range(len(positions)))
    first = positions[0]
    shape = tuple(shape_of(x))
    indices = [index for _, _, index in advanced]
    if len(indices) == 1:
        index = indices[0]
        return ops.gather(x, np.asarray(index) if _is_integer(index) else index, axis=first)

    dims = [shape[position] for position in positions]
    index_shape = broadcast_shapes(*(tuple(shape_of(index)) for index in indices))
    flat = 0
    for (_, source_axis, index), dim in zip(advanced, dims):
        index = _wrap_negative(index, dim, source_axis)
        flat = flat * dim + index
    merged = shape[:first] + (size_of(dims),) + shape[first + len(dims) :]
    flat = ops.broadcast_to(np.asarray(flat) if _is_integer(flat) else flat, index_shape)
    return ops.gather(ops.reshape(x, merged), flat, axis=first)


def _wrap_negative(index, dim, axis):
    """One of several index arrays with negatives counted from the end; checked here
    when concrete, since the merged flat index could be in range when this one is not."""
    if _is_integer(index):
        position = int(index) + dim if index < 0 else int(index)
        if not 0 <= position < dim:
            raise _index_error(int(index), axis, dim)
        return position
    if isinstance(index, np.ndarray):
        if index.dtype.kind not in "iu":
            raise IndexError(
                "arrays used as indices must be of integer (or boolean) type, "
                f"not {index.dtype}"
            )
        bad = (index < -dim) | (index >= dim)
        if bad.any():
            raise _index_error(int(index[bad].flat[0]), axis, dim)
        return np.where(index < 0, index + dim, index)
    return np.where(index < 0, index + dim, index)
