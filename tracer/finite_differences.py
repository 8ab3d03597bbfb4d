"""Differences and sums of neighbours along an axis: ``np.diff``, ``np.ediff1d``,
``np.gradient`` (uniform spacing) and ``np.trapezoid``, written with NumPy's own slices
and formulas so values agree bit for bit and the lengths stay symbolic (listed in
``FUNCTIONS``, which ``numpy_api`` joins).

>>> import tracejit as tj
>>> f = tj.jit(lambda y: (np.diff(y), np.gradient(y), np.trapezoid(y)), cache="memory")
>>> [r.tolist() for r in f(np.array([1.0, 4.0, 9.0]))]
[[3.0, 5.0], [3.0, 4.0, 5.0], 9.0]
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .primitives import as_array, is_traced
from .shapes import normalize_axis

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def _along(ndim, axis, part):
    return (slice(None),) * axis + (part,) + (slice(None),) * (ndim - axis - 1)


def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    n = operator.index(n)
    if n == 0:
        return a
    if n < 0:
        raise as_numpy_would(ValueError(f"order must be non-negative but got {n!r}"))
    ndim = ndim_of(a)
    if ndim == 0:
        raise as_numpy_would(ValueError("diff requires input that is at least one "
                                        "dimensional"))
    axis = normalize_axis(axis, ndim)
    ends = []
    for end in (prepend, append):
        if end is np._NoValue:
            ends.append(None)
            continue
        end = as_array(end)
        if ndim_of(end) == 0:
            slot = tuple(1 if i == axis else dim for i, dim in enumerate(shape_of(a)))
            end = np.broadcast_to(end, slot)
        ends.append(end)
    if ends[0] is not None or ends[1] is not None:
        parts = [part for part in (ends[0], a, ends[1]) if part is not None]
        a = np.concatenate(parts, axis=axis)
    later, earlier = _along(ndim, axis, slice(1, None)), _along(ndim, axis, slice(None, -1))
    boolean = dtype_of(a) == np.bool_
    for _ in range(n):
        a = (a[later] != a[earlier]) if boolean else (a[later] - a[earlier])
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """NumPy's steps: the differences of the flattened array in its dtype, with
    ``to_begin`` and ``to_end`` (flattened, cast under the ``same_kind`` rule) around."""
    flat = np.ravel(as_array(ary))
    dtype = np.dtype(dtype_of(flat))
    parts = [flat[1:] - flat[:-1]]
    for end, name, at_start in ((to_begin, "to_begin", True), (to_end, "to_end", False)):
        if end is None:
            continue
        end = as_array(end)
        if not np.can_cast(np.dtype(dtype_of(end)), dtype, casting="same_kind"):
            raise as_numpy_would(TypeError(f"dtype of `{name}` must be compatible with input "
                                           "`ary` under the `same_kind` rule."))
        end = np.ravel(end).astype(dtype)
        parts.insert(0, end) if at_start else parts.append(end)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def gradient(f, *varargs, axis=None, edge_order=1):
    """``np.gradient`` with uniform spacing (no spacing, or one number per axis)."""
    ndim = ndim_of(f)
    axes = tuple(range(ndim)) if axis is None else (
        tuple(axis) if isinstance(axis, (tuple, list)) else (axis,))
    axes = tuple(normalize_axis(each, ndim) for each in axes)
    if len(set(axes)) != len(axes):
        raise as_numpy_would(ValueError("duplicate value in 'axis'"))
    if not varargs:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and not is_traced(varargs[0]) and np.ndim(varargs[0]) == 0:
        spacings = [np.asanyarray(varargs[0])] * len(axes)
    elif len(varargs) == len(axes) and all(not is_traced(v) and np.ndim(v) == 0
                                           for v in varargs):
        spacings = [np.asanyarray(v) for v in varargs]
    else:
        raise UnsupportedError("np.gradient with coordinate arrays or traced spacings is not "
                               "supported; pass one number per axis")
    if edge_order not in (1, 2):
        raise as_numpy_would(ValueError("'edge_order' greater than 2 not supported"))
    otype = np.dtype(dtype_of(f))
    if otype.kind not in "fc":
        if otype.kind in "iu":
            f = f.astype(np.float64)
        otype = np.dtype(np.float64)
    results = []
    for each, dx in zip(axes, spacings):
        if shape_of(f)[each] < edge_order + 1:
            raise as_numpy_would(ValueError(
                "Shape of array too small to calculate a numerical gradient, at least "
                "(edge_order + 1) elements are required."))

        def at(part, each=each):
            return f[_along(ndim, each, part)]

        inner = (at(slice(2, None)) - at(slice(None, -2))) / (2.0 * dx)
        if edge_order == 1:
            first = (at(slice(1, 2)) - at(slice(0, 1))) / dx
            last = (at(slice(-1, None)) - at(slice(-2, -1))) / dx
        else:
            first = (-1.5 / dx) * at(slice(0, 1)) + (2.0 / dx) * at(slice(1, 2)) + (
                -0.5 / dx) * at(slice(2, 3))
            last = (0.5 / dx) * at(slice(-3, -2)) + (-2.0 / dx) * at(slice(-2, -1)) + (
                1.5 / dx) * at(slice(-1, None))
        pieces = [piece.astype(otype) for piece in (first, inner, last)]
        results.append(np.concatenate(pieces, axis=each))
    return results[0] if len(axes) == 1 else tuple(results)


def trapezoid(y, x=None, dx=1.0, axis=-1):
    ndim = ndim_of(y)
    axis = normalize_axis(axis, ndim)
    if x is None:
        d = dx
    else:
        x = as_array(x)
        if ndim_of(x) == 1:
            d = np.diff(x)
            d = np.reshape(d, tuple(-1 if i == axis else 1 for i in range(ndim)))
        else:
            d = np.diff(x, axis=axis)
    later, earlier = _along(ndim, axis, slice(1, None)), _along(ndim, axis, slice(None, -1))
    return np.sum(d * (y[later] + y[earlier]) / 2.0, axis=axis)


FUNCTIONS = {
    np.diff: diff,
    np.ediff1d: ediff1d,
    np.gradient: gradient,
    np.trapezoid: trapezoid,
}
