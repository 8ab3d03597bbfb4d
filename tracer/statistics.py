"""NumPy's statistics over an axis, composed from reductions, sorts and products:
``np.ptp``, ``np.average`` (weights), ``np.cov``, ``np.corrcoef``, ``np.median``,
``np.percentile`` and ``np.quantile`` (``method='linear'``, constant ``q``), listed in
``FUNCTIONS``, which ``numpy_api`` joins.

Each follows NumPy's own steps (``cov`` multiplies by ``1 / fact`` as NumPy does; the
quantiles take NumPy's virtual index, floor, gamma and two-sided ``_lerp``), so float32
stays float32 where NumPy keeps it and integers become float64 where NumPy's do. A NaN
in a slice makes its median or quantile NaN, as in NumPy.

>>> import tracejit as tj
>>> f = tj.jit(lambda x: (np.median(x), np.percentile(x, 25.0), np.ptp(x)), cache="memory")
>>> [float(r) for r in f(np.array([4.0, 1.0, 3.0, 2.0]))]
[2.5, 1.75, 3.0]
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .primitives import as_array, is_traced
from .shapes import normalize_axes, normalize_axis

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def ptp(a, axis=None, out=None, keepdims=False):
    if out is not None:
        raise UnsupportedError("np.ptp(..., out=...) is not supported; assign the result")
    a = as_array(a)
    return np.subtract(np.max(a, axis=axis, keepdims=keepdims),
                       np.min(a, axis=axis, keepdims=keepdims))


def _promotion_operand(value):
    aval = getattr(value, "aval", None)
    if aval is not None:
        return aval.dtype_for_promotion()
    return np.dtype(dtype_of(value))


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    a = as_array(a)
    keep = {"keepdims": True} if keepdims else {}
    if axis is not None:
        axis = tuple(normalize_axis(each, ndim_of(a)) for each in (
            axis if isinstance(axis, (tuple, list)) else (axis,)))
    if weights is None:
        result = np.mean(a, axis, **keep)
        scale = None
        each = 1
        for dim in shape_of(result):
            each = each * dim
        if each == 0:  # NumPy divides a.size by the result's size even when not returned
            raise as_numpy_would(ZeroDivisionError("division by zero"))
        if returned:
            count = ops.shape_of(a)
            size = 1
            for dim in count:
                size = size * dim
            scale = np.dtype(dtype_of(result)).type(size / each)
    else:
        weights = as_array(weights)
        kind = np.dtype(dtype_of(a)).kind
        extra = (np.float64,) if kind in "iub" else ()
        result_dtype = np.result_type(np.dtype(dtype_of(a)), np.dtype(dtype_of(weights)),
                                      *extra)
        if tuple(shape_of(a)) != tuple(shape_of(weights)):
            if axis is None:
                raise as_numpy_would(TypeError("Axis must be specified when shapes of a and "
                                               "weights differ."))
            if tuple(shape_of(weights)) != tuple(shape_of(a)[each] for each in axis):
                raise as_numpy_would(ValueError("Shape of weights must be consistent with "
                                                "shape of a along specified axis."))
            weights = np.transpose(weights, np.argsort(axis))
            weights = np.reshape(weights, tuple(dim if each in axis else 1
                                                for each, dim in enumerate(shape_of(a))))
        scale = np.sum(weights, axis=axis, dtype=result_dtype, **keep)
        if bool(np.any(scale == 0.0)):  # a value guard when the weights are traced
            raise as_numpy_would(ZeroDivisionError("Weights sum to zero, can't be "
                                                   "normalized"))
        result = np.sum(np.multiply(a, weights, dtype=result_dtype), axis, **keep) / scale
    if not returned:
        return result
    if tuple(shape_of(scale)) != tuple(shape_of(result)):
        scale = np.broadcast_to(scale, shape_of(result)).copy()
    return result, scale


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    if fweights is not None or aweights is not None:
        raise UnsupportedError("np.cov with fweights or aweights is not supported")
    m = as_array(m)
    if ndim_of(m) > 2:
        raise as_numpy_would(ValueError("m has more than 2 dimensions"))
    if y is not None:
        y = as_array(y)
        if ndim_of(y) > 2:
            raise as_numpy_would(ValueError("y has more than 2 dimensions"))
    if dtype is None:
        operands = [np.dtype(dtype_of(m))] + ([np.dtype(dtype_of(y))] if y is not None
                                               else [])
        dtype = np.result_type(*operands, np.float64)
    rows = np.atleast_2d(m).astype(dtype)
    if not rowvar and ndim_of(m) != 1:
        rows = rows.T
    if shape_of(rows)[0] == 0:
        raise UnsupportedError("np.cov of no variables is not supported")
    if y is not None:
        other = np.atleast_2d(y).astype(dtype)
        if not rowvar and shape_of(other)[0] != 1:
            other = other.T
        rows = np.concatenate((rows, other), axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    ddof = operator.index(ddof)
    fact = shape_of(rows)[1] - ddof
    if fact <= 0:
        raise UnsupportedError("np.cov with no more observations than ddof (NumPy warns "
                               "and divides by 0) is not supported")
    centered = rows - np.mean(rows, axis=1)[:, None]
    product = np.dot(centered, centered.T)
    scaled = product * np.true_divide(1, int(fact) if not hasattr(
        fact, "__tracejit_dim__") else fact)
    # NumPy scales in place (c *= 1 / fact): computed in float64, stored in ``dtype``
    return np.squeeze(scaled if dtype_of(scaled) == dtype else scaled.astype(dtype))


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if ndim_of(c) == 0:
        return c / c
    stddev = np.sqrt(np.diagonal(c))
    c = c / stddev[:, None]
    c = c / stddev[None, :]
    return np.clip(c, -1, 1)


def _last_along(sorted_values, axis):
    length = shape_of(sorted_values)[axis]
    index = (slice(None),) * axis + (slice(length - 1, length),)
    return sorted_values[index]


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    if out is not None or overwrite_input:
        raise UnsupportedError("np.median with out or overwrite_input is not supported")
    a = as_array(a)
    ndim = ndim_of(a)
    whole = axis is None
    if whole:
        flat, axis = np.ravel(a), 0
    elif isinstance(axis, (tuple, list)):
        return _median_of_axes(a, axis, keepdims)
    else:
        axis = normalize_axis(axis, ndim)
        flat = a
    length = shape_of(flat)[axis]
    if length == 0:
        raise UnsupportedError("np.median of an empty slice (NumPy warns, gives NaN) is not "
                               "supported")
    ordered = np.sort(flat, axis=axis)
    middle = length // 2
    odd = operator.index(length % 2)  # the parity picks the formula: guarded
    start = middle if odd else middle - 1
    index = (slice(None),) * axis + (slice(start, middle + 1),)
    result = np.mean(ordered[index], axis=axis)
    if np.dtype(dtype_of(ordered)).kind == "f":
        # a NaN sorts last and is the slice's answer; asked of the input, whose isnan is
        # exact (the sorted values' is not known to be, and would cost a margin guard)
        last = np.squeeze(_last_along(ordered, axis), axis)
        result = np.where(np.any(np.isnan(flat), axis=axis), last, result)
        result = result[()] if ndim_of(result) == 0 else result  # NumPy's scalar
    if keepdims:
        result = (np.reshape(result, (1,) * ndim) if whole else
                  np.expand_dims(result, axis))
    return result


def _median_of_axes(a, axis, keepdims):
    """``np.median`` over several axes (a median filter's ``np.median(windows, axis=(-2,
    -1))``): those axes moved last and merged into one, as NumPy's ``_ureduce`` does; the
    order within them does not change a median."""
    shape = shape_of(a)
    axes = normalize_axes(tuple(axis), len(shape))
    kept = [number for number in range(len(shape)) if number not in axes]
    merged = 1
    for number in axes:
        merged = merged * shape[number]
    if kept and any(shape[number] == 0 for number in kept):
        # NumPy reshapes to kept + (-1,), which a size-0 array cannot infer
        dims = ", ".join(str(shape[number]) for number in kept)
        raise as_numpy_would(ValueError(f"cannot reshape array of size 0 into shape "
                                        f"({dims},newaxis)"))
    moved = np.transpose(a, kept + list(axes))
    result = median(np.reshape(moved, tuple(shape[number] for number in kept) + (merged,)),
                    axis=-1)
    if keepdims:
        result = np.reshape(result, tuple(1 if number in axes else dim
                                          for number, dim in enumerate(shape)))
    return result


def _quantiles(a, q, axis, method, keepdims, weak_q):
    if method != "linear":
        raise UnsupportedError(f"np.quantile(method={method!r}) is not supported; "
                               "method='linear' is")
    if keepdims:
        raise UnsupportedError("np.quantile(keepdims=True) is not supported")
    a = as_array(a)
    if np.dtype(dtype_of(a)).kind not in "iubf":
        raise UnsupportedError(f"np.quantile of {dtype_of(a)} is not supported")
    if axis is None:
        values, axis = np.ravel(a), 0
    elif isinstance(axis, (tuple, list)):
        raise UnsupportedError("np.quantile over several axes is not supported")
    else:
        values, axis = a, normalize_axis(axis, ndim_of(a))
    # The indices and weights depend on the length only: NumPy's arithmetic, on its value.
    count = operator.index(shape_of(values)[axis])
    if count == 0:
        raise UnsupportedError("np.quantile of an empty slice is not supported")
    virtual = np.asanyarray((count - 1) * q)  # NumPy's 'linear': get_virtual_index
    ordered = np.moveaxis(np.sort(values, axis=axis), axis, 0)
    if np.issubdtype(virtual.dtype, np.integer):  # exact positions: NumPy takes them
        result = np.take(ordered, virtual, axis=0)
    else:
        result = _interpolated(ordered, virtual, count, weak_q)
    if np.dtype(dtype_of(ordered)).kind == "f":  # a NaN sorts last: the slice's answer
        last = ordered[count - 1]
        with_nan = np.any(np.isnan(values), axis=axis)
        result = np.where(with_nan, last.astype(dtype_of(result)), result)
    if ndim_of(result) == 0:
        result = result[()]  # NumPy's scalar
    return result


def _interpolated(ordered, virtual, count, weak_q):
    """NumPy's linear method between the two neighbours of each virtual index."""
    previous = np.array(np.floor(virtual))
    following = np.array(previous + 1)
    above = virtual >= count - 1
    previous[above], following[above] = -1, -1
    below = virtual < 0
    previous[below], following[below] = 0, 0
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    gamma = np.asanyarray(virtual - previous, dtype=virtual.dtype)
    gamma = float(gamma) if weak_q else gamma.reshape(
        virtual.shape + (1,) * (ndim_of(ordered) - 1))
    low = np.take(ordered, previous % count, axis=0)
    high = np.take(ordered, following % count, axis=0)
    difference = high - low
    forward = low + difference * gamma
    backward = (high - difference * (1 - gamma)).astype(dtype_of(forward))
    return np.where(np.asarray(gamma) >= 0.5, backward, forward)


def _valid(q):
    return bool(np.all((q >= 0) & (q <= 1)))


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None):
    if out is not None or overwrite_input or weights is not None or interpolation is not None:
        raise UnsupportedError("np.quantile with out, overwrite_input, weights or "
                               "interpolation is not supported")
    if is_traced(q):
        raise UnsupportedError("np.quantile of a traced q is not supported; pass constants")
    weak_q = type(q) in (int, float)
    q = np.asanyarray(q)
    if not _valid(q):
        raise as_numpy_would(ValueError("Quantiles must be in the range [0, 1]"))
    return _quantiles(a, q, axis, method, keepdims, weak_q)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None):
    if out is not None or overwrite_input or weights is not None or interpolation is not None:
        raise UnsupportedError("np.percentile with out, overwrite_input, weights or "
                               "interpolation is not supported")
    if is_traced(q):
        raise UnsupportedError("np.percentile of a traced q is not supported; pass "
                               "constants")
    weak_q = type(q) in (int, float)
    q = np.true_divide(q, 100)
    q = np.asanyarray(q)
    if not _valid(q):
        raise as_numpy_would(ValueError("Percentiles must be in the range [0, 100]"))
    return _quantiles(a, q, axis, method, keepdims, weak_q)


FUNCTIONS = {
    np.ptp: ptp,
    np.average: average,
    np.cov: cov,
    np.corrcoef: corrcoef,
    np.median: median,
    np.quantile: quantile,
    np.percentile: percentile,
}
