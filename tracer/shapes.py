"""Shape arithmetic shared by the shape rules: broadcasting and axis normalization.

Dims are Python ints or symbolic dims (from the tracer) that support the same
arithmetic and comparisons, so every rule here is written once for both.

>>> broadcast_shapes((3, 1), (4,))
(3, 4)
>>> normalize_axes(-1, ndim=3)
(2,)
"""

from __future__ import annotations

import operator

import numpy as np

from .errors import as_numpy_would


class ShapeError(ValueError):
    """Shapes that NumPy would also reject (the message says which and why)."""


def broadcast_shapes(*shapes):
    ndim = max((len(shape) for shape in shapes), default=0)
    result = []
    for axis in range(-ndim, 0):
        dims = [shape[axis] for shape in shapes if len(shape) >= -axis]
        one = _one_dim(dims)
        if one is not None:
            result.append(one)
            continue
        dim = 1
        for other in dims:
            if other == 1:
                continue
            if dim == 1 or dim is other:
                dim = other
            elif dim != other:
                shown = " ".join(str(tuple(shape)) for shape in shapes)
                raise ShapeError(
                    f"operands could not be broadcast together with shapes {shown}"
                )
        result.append(dim)
    return tuple(result)


def _one_dim(dims):
    """The dim of an axis that every operand has (or 1), found without comparing dims: a
    symbolic length's ``== 1`` may be a question no guard answers, as where a guard's
    margin takes ``|x|`` or a ``where`` of a slice ``x[4:]`` (length ``s0 - 4``) after the
    trace. None where operands differ: those are compared (and guarded) as NumPy would."""
    found = {}
    for dim in dims:
        key = getattr(dim, "expr", dim)  # a symbolic dim by its expression, not its value
        if isinstance(key, (int, np.integer)):
            if key == 1:
                continue
            key = int(key)
        found.setdefault(key, dim)
    if len(found) > 1:
        return None
    return next(iter(found.values()), 1)


def normalize_axis(axis, ndim):
    """One axis as a non-negative int; NumPy's AxisError text when out of range."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:  # the user's error, NumPy's type (also an IndexError)
        raise as_numpy_would(np.exceptions.AxisError(axis, ndim))
    return axis % ndim if ndim else 0


def normalize_axes(axis, ndim):
    """``None``, an int or a tuple of ints as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, ndim) for a in axis)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"duplicate value in 'axis': {tuple(axis)}")
        return tuple(sorted(axes))
    return (normalize_axis(axis, ndim),)


def size_of(shape):
    size = 1
    for dim in shape:
        size = size * dim
    return size


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else dim for i, dim in enumerate(shape))
    return tuple(dim for i, dim in enumerate(shape) if i not in axes)


def pow2_bucket(size):
    """The inclusive ``(low, high)`` bucket of a dim: ``(2^(k-1), 2^k]``; sizes 0 and 1 are
    alone (``None``: they stay static, so broadcasting decisions hold across a bucket).

    >>> pow2_bucket(5), pow2_bucket(8), pow2_bucket(1)
    ((5, 8), (5, 8), None)
    """
    if size <= 1:
        return None
    high = 1 << (int(size) - 1).bit_length()
    return high // 2 + 1, high


def edges_bucket(size, edges):
    """The inclusive bucket of ``size`` between sorted ``edges`` (``(e_i, e_{i+1}]``);
    beyond the last edge, powers of two. ``None`` for sizes 0 and 1.

    >>> edges_bucket(20, [16, 64]), edges_bucket(100, [16, 64])
    ((17, 64), (65, 128))
    """
    if size <= 1:
        return None
    low = 1
    for edge in sorted(edges):
        if size <= edge:
            return low + 1, edge
        low = max(low, edge)
    bucket = pow2_bucket(size)
    return max(bucket[0], low + 1), bucket[1]
