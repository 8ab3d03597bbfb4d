"""Structural primitives: they move elements, they never compute new values.

reshape, transpose, broadcast_to, slice (positive steps), pad (its transpose),
sliding_window (strided windows, the batched form of a slice that moves with a loop
index), flip and concatenate. Codegen turns most of them into index arithmetic rather than copies.
The functions below the primitives are the friendly entry points (``reshape`` accepts
``-1``; ``transpose`` accepts ``None``) used by the NumPy layer and by VJP rules.

>>> reshape(np.arange(6), (2, -1)).shape
(2, 3)
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

from ..abstract import AbstractArray
from ..dims import surely
from ..errors import as_numpy_would
from ..primitives import Primitive, bind
from ..shapes import ShapeError, broadcast_shapes, normalize_axis, size_of
from .creation import iota


def shape_of(value):
    return getattr(value, "shape", ())


def ndim_of(value):
    return len(shape_of(value))


def dtype_of(value):
    """The dtype of an array, tracer or tensor; NumPy's for a Python scalar."""
    dtype = getattr(value, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(value).dtype


# --- reshape ---------------------------------------------------------------------------
def _reshape_rule(x, shape):
    if size_of(x.shape) != size_of(shape):
        raise ShapeError(
            f"cannot reshape array of shape {tuple(x.shape)} into shape {tuple(shape)}"
        )
    return AbstractArray(shape, x.dtype)


reshape_p = Primitive(
    "reshape",
    "structural",
    impl=lambda x, shape: np.reshape(x, shape),
    abstract_eval=_reshape_rule,
    vjp=(lambda g, x, out, shape: reshape(g, shape_of(x)),),
)


def reshape(x, shape):
    """NumPy's reshape: ``shape`` may be an int and may hold one ``-1``."""
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    # NumPy integers become ints; symbolic dims from the tracer stay symbolic; a traced
    # int (an int argument that became a run-time input: x.reshape(n, groups, c // groups))
    # is its value, guarded (operator.index), so the shape is static again.
    shape = tuple(int(dim) if isinstance(dim, np.integer) else
                  operator.index(dim) if hasattr(dim, "ir_var") else dim for dim in shape)
    unknown = [i for i, dim in enumerate(shape) if isinstance(dim, int) and dim == -1]
    if len(unknown) > 1:
        raise ShapeError("can only specify one unknown dimension")
    if unknown:
        known = size_of(dim for i, dim in enumerate(shape) if i != unknown[0])
        total = size_of(shape_of(x))
        if known == 0 or total % known != 0:  # x.reshape(0, -1) of an empty batch too
            raise as_numpy_would(ShapeError(
                f"cannot reshape array of shape {tuple(shape_of(x))} into shape {shape}"
            ))
        shape = shape[: unknown[0]] + (total // known,) + shape[unknown[0] + 1 :]
    if _same_dims(tuple(shape_of(x)), shape):
        return x
    return bind(reshape_p, x, shape=shape)


def _same_dims(shape, other):
    """Equal as written (ints, or symbolic dims with the same expression). Not ``==``: on
    symbolic dims that would guard on their values, and a skipped no-op reshape is not worth
    a guard (an im2col's ``N*OH*OW == 2`` checked on every call)."""
    if len(shape) != len(other):
        return False
    for dim, another in zip(shape, other):
        dim, another = getattr(dim, "expr", dim), getattr(another, "expr", another)
        if type(dim) is not type(another) or dim != another:
            return False
    return True


# --- transpose -------------------------------------------------------------------------
transpose_p = Primitive(
    "transpose",
    "structural",
    impl=lambda x, perm: np.transpose(x, perm),
    abstract_eval=lambda x, perm: AbstractArray(tuple(x.shape[i] for i in perm), x.dtype),
    vjp=(lambda g, x, out, perm: transpose(g, tuple(np.argsort(perm))),),
)


def transpose(x, axes=None):
    ndim = ndim_of(x)
    if axes is None:
        perm = tuple(reversed(range(ndim)))
    else:
        perm = tuple(normalize_axis(axis, ndim) for axis in axes)
        if sorted(perm) != list(range(ndim)):
            raise ShapeError(f"axes {tuple(axes)} don't match array of dimension {ndim}")
    if perm == tuple(range(ndim)):
        return x
    return bind(transpose_p, x, perm=perm)


def swapaxes(x, axis1, axis2):
    ndim = ndim_of(x)
    perm = list(range(ndim))
    axis1, axis2 = normalize_axis(axis1, ndim), normalize_axis(axis2, ndim)
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(x, perm)


def swaps_last_two_axes(perm):
    """Whether a ``transpose`` by ``perm`` swaps the last two axes and keeps the others in
    place: a (batched) matrix transpose, which matmul kernels read without a copy.

    >>> swaps_last_two_axes((0, 2, 1)), swaps_last_two_axes((1, 0, 2)), swaps_last_two_axes((0,))
    (True, False, False)
    """
    rank = len(perm)
    return rank >= 2 and tuple(perm) == (*range(rank - 2), rank - 1, rank - 2)


# --- broadcast_to ----------------------------------------------------------------------
def _broadcast_to_rule(x, shape):
    if len(shape) < x.ndim or broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ShapeError(
            f"operands could not be broadcast together with remapped shapes "
            f"[original->remapped]: {tuple(x.shape)} and requested shape {tuple(shape)}"
        )
    return AbstractArray(shape, x.dtype)


broadcast_to_p = Primitive(
    "broadcast_to",
    "structural",
    # A copy, not NumPy's read-only view: eager results must be writable arrays.
    impl=lambda x, shape: np.array(np.broadcast_to(x, shape)),
    abstract_eval=_broadcast_to_rule,
    vjp=(lambda g, x, out, shape: g,),
)


def broadcast_to(x, shape):
    shape = tuple(int(dim) if isinstance(dim, np.integer) else dim for dim in shape)
    if tuple(shape_of(x)) == shape:
        return x
    return bind(broadcast_to_p, x, shape=shape)


# --- slice and its transpose, pad ------------------------------------------------------
def slice_length(start, limit, step):
    """How many elements ``range(start, limit, step)`` has, for ``step > 0``."""
    return (limit - start + step - 1) // step if limit > start else 0


def _slice_rule(x, starts, limits, steps):
    shape = tuple(slice_length(*bounds) for bounds in zip(starts, limits, steps))
    return AbstractArray(shape, x.dtype)


def _slice_impl(x, starts, limits, steps):
    return np.asarray(x)[tuple(map(slice, starts, limits, steps))]


def _slice_vjp(g, x, out, starts, limits, steps):
    config = []
    for dim, count, start, step in zip(shape_of(x), shape_of(out), starts, steps):
        used = (count - 1) * step + 1 if count else 0
        config.append((start, dim - start - used, step - 1))
    return pad(g, tuple(config))


slice_p = Primitive(
    "slice",
    "structural",
    impl=_slice_impl,
    abstract_eval=_slice_rule,
    vjp=(_slice_vjp,),
)


def slice_axes(x, starts, limits, steps):
    """``x[start:limit:step, ...]`` per axis, with in-range bounds and positive steps."""
    if all(
        surely(start, "==", 0) and surely(limit, "==", dim) and step == 1
        for start, limit, step, dim in zip(starts, limits, steps, shape_of(x))
    ):
        return x  # a shortcut, not a path: bounds the ranges leave open slice (no guard)
    return bind(slice_p, x, starts=tuple(starts), limits=tuple(limits), steps=tuple(steps))


def padded_length(count, low, high, interior):
    return low + high + count + (count - 1) * interior if count else low + high


def _pad_rule(x, config):
    shape = tuple(padded_length(dim, *axis_config) for dim, axis_config in zip(x.shape, config))
    return AbstractArray(shape, x.dtype)


def _pad_impl(x, config):
    x = np.asarray(x)
    shape = tuple(padded_length(dim, *axis_config) for dim, axis_config in zip(x.shape, config))
    out = np.zeros(shape, x.dtype)
    out[
        tuple(
            slice(low, low + (count - 1) * (interior + 1) + 1, interior + 1)
            for count, (low, _, interior) in zip(x.shape, config)
        )
    ] = x
    return out


def _pad_vjp(g, x, out, config):
    starts = tuple(low for low, _, _ in config)
    steps = tuple(interior + 1 for _, _, interior in config)
    limits = tuple(
        start + (dim - 1) * step + 1 if dim else start
        for start, step, dim in zip(starts, steps, shape_of(x))
    )
    return slice_axes(g, starts, limits, steps)


pad_p = Primitive(
    "pad",
    "structural",
    impl=_pad_impl,
    abstract_eval=_pad_rule,
    vjp=(_pad_vjp,),
)


def pad(x, config):
    """Zero padding: per axis ``(low, high, interior)`` zeros, as ``lax.pad`` (no negatives)."""
    if all(surely(part, "==", 0) for axis_config in config for part in axis_config):
        return x  # a shortcut: padding the ranges leave open pads by zero (no guard)
    return bind(pad_p, x, config=tuple(config))


# --- sliding_window: strided windows as a view ------------------------------------------
def window_count(dim, size, stride):
    """How many windows of ``size`` fit along a ``dim`` at ``stride`` (``dim >= size``)."""
    return (dim - size) // stride + 1


def _sliding_window_rule(x, axes, sizes, strides):
    if not (len(axes) == len(sizes) == len(strides)) or len(set(axes)) != len(axes):
        raise ShapeError("sliding_window needs one size and one stride per distinct axis")
    shape = list(x.shape)
    for axis, size, stride in zip(axes, sizes, strides):
        if not 0 <= axis < x.ndim or not isinstance(stride, int) or stride < 1:
            raise ShapeError(f"sliding_window: bad axis {axis} or stride {stride}")
        if not size >= 1 or not x.shape[axis] >= size:
            raise ShapeError(f"window shape cannot be larger than input array shape "
                             f"({size} > {x.shape[axis]} along axis {axis})")
        shape[axis] = window_count(x.shape[axis], size, stride)
    return AbstractArray((*shape, *sizes), x.dtype)


def _sliding_window_impl(x, axes, sizes, strides):
    x = np.asarray(x)
    view = np.lib.stride_tricks.sliding_window_view(x, sizes, axis=axes)
    picked = [slice(None)] * x.ndim
    for axis, stride in zip(axes, strides):
        picked[axis] = slice(None, None, stride)
    return np.array(view[tuple(picked)])  # eager results are writable arrays, as elsewhere


def _sliding_window_vjp(g, x, out, axes, sizes, strides):
    """Each window element goes back to its place: per window offset, the cotangent
    spread at the stride (interior padding) and shifted by the offset, summed."""
    if not all(isinstance(size, int) for size in sizes):
        return _sliding_window_vjp_symbolic(g, x, axes, sizes, strides)
    rank = ndim_of(x)
    counts = [shape_of(out)[axis] for axis in axes]
    total = None
    for offsets in itertools.product(*(range(size) for size in sizes)):
        index = [slice(None)] * rank + list(offsets)
        part = g[tuple(index)]
        config = [(0, 0, 0)] * rank
        for axis, offset, count, stride in zip(axes, offsets, counts, strides):
            used = (count - 1) * stride + 1 if count else 0
            config[axis] = (offset, shape_of(x)[axis] - offset - used, stride - 1)
        part = pad(part, tuple(config))
        total = part if total is None else total + part
    return total


def _sliding_window_vjp_symbolic(g, x, axes, sizes, strides):
    """The same transpose for window sizes known only per bucket (a kernel size read from
    ``w.shape``): one window axis at a time, last first, each element added back at
    ``o * stride + k`` along its axis by ``scatter_add``."""
    from .indexing import scatter_add  # cycle: ops.indexing -> ops.structural

    for position in reversed(range(len(axes))):
        axis, size, stride = axes[position], sizes[position], strides[position]
        count = shape_of(g)[axis]
        # The window axis (last) next to its window-count axis: (..., count, size, ...).
        order = list(range(ndim_of(g) - 1))
        order.insert(axis + 1, ndim_of(g) - 1)
        g = transpose(g, order)
        starts = reshape(iota(count, np.int64, like=g), (count, 1)) * stride
        places = starts + reshape(iota(size, np.int64, like=g), (1, size))
        g = scatter_add(g, places, axis, shape_of(x)[axis])
    return g


sliding_window_p = Primitive(
    "sliding_window",
    "structural",
    impl=_sliding_window_impl,
    abstract_eval=_sliding_window_rule,
    vjp=(_sliding_window_vjp,),
)


def sliding_window(x, axes, sizes, strides=None):
    """Windows of ``sizes`` along ``axes`` every ``strides`` elements, as
    ``np.lib.stride_tricks.sliding_window_view(x, sizes, axis=axes)[..., ::stride, ...]``:
    the window axes are appended last; codegen reads it as index arithmetic, no copy.

    >>> sliding_window(np.arange(6), (0,), (3,), (2,)).tolist()
    [[0, 1, 2], [2, 3, 4]]
    """
    axes = tuple(normalize_axis(axis, ndim_of(x)) for axis in axes)
    strides = (1,) * len(axes) if strides is None else tuple(strides)
    return bind(sliding_window_p, x, axes=axes, sizes=tuple(sizes), strides=strides)


# --- flip ------------------------------------------------------------------------------
flip_p = Primitive(
    "flip",
    "structural",
    impl=lambda x, axes: np.flip(x, axes),
    abstract_eval=lambda x, axes: x,
    vjp=(lambda g, x, out, axes: flip(g, axes),),
)


def flip(x, axes):
    return bind(flip_p, x, axes=tuple(axes)) if axes else x


# --- concatenate -----------------------------------------------------------------------
def _concatenate_rule(*avals, axis):
    first = avals[0]
    if first.ndim == 0:
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    for aval in avals[1:]:
        if aval.ndim != first.ndim:
            raise ShapeError(
                "all the input array dimensions except for the concatenation axis must match "
                f"exactly, but got {first.ndim} and {aval.ndim} dimensions"
            )
        for i, (dim, other) in enumerate(zip(first.shape, aval.shape)):
            if i != axis and dim != other:
                raise ShapeError(
                    "all the input array dimensions except for the concatenation axis must "
                    f"match exactly, but along dimension {i} the sizes are {dim} and {other}"
                )
    shape = list(first.shape)
    shape[axis] = sum((aval.shape[axis] for aval in avals[1:]), first.shape[axis])
    dtype = np.result_type(*(aval.dtype for aval in avals))
    return AbstractArray(shape, dtype)


def _concatenate_vjp(g, *primals, out, axis, argnum):
    start = sum((shape_of(p)[axis] for p in primals[:argnum]), 0)
    shape = shape_of(g)
    starts = tuple(start if i == axis else 0 for i in range(len(shape)))
    limits = tuple(
        start + shape_of(primals[argnum])[axis] if i == axis else dim
        for i, dim in enumerate(shape)
    )
    return slice_axes(g, starts, limits, (1,) * len(shape))


concatenate_p = Primitive(
    "concatenate",
    "structural",
    impl=lambda *xs, axis: np.concatenate(xs, axis=axis),
    abstract_eval=_concatenate_rule,
    vjp=_concatenate_vjp,
)


def concatenate(arrays, axis=0):
    arrays = tuple(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        arrays = tuple(reshape(a, (-1,)) for a in arrays)
        axis = 0
    if ndim_of(arrays[0]) == 0:  # one 0-d array too: NumPy raises before anything else
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis(axis, ndim_of(arrays[0]))
    if len(arrays) == 1:
        return arrays[0]
    return bind(concatenate_p, *arrays, axis=axis)

