"""NumPy's reductions over primitives: ``np.sum``, ``np.max``, ``np.mean`` and the rest as
``numpy_api.FUNCTIONS`` gives them, with NumPy's keywords (``axis``, ``dtype``,
``keepdims``, ``where=`` masks and ``initial=`` values) and dtypes (``np.mean`` of ints is
float64).

>>> x = np.array([[1.0, 5.0], [3.0, -2.0]])
>>> sum(x, axis=1, where=x > 0).tolist(), float(max(x, initial=9.0))
([6.0, 3.0], 9.0)
>>> mean(x, axis=0, where=x > 0).tolist()
[2.0, 5.0]
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .primitives import bind
from .shapes import normalize_axes, normalize_axis, size_of
from .ufuncs import cast

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def no_out(name, out):
    """NumPy's ``out=`` is not supported on tracejit arrays: a clear error, not a wrong
    write."""
    if out is not None:
        raise UnsupportedError(
            f"np.{name}(..., out=...) is not supported on tracejit arrays; "
            "assign the result instead"
        )


# --- reductions ------------------------------------------------------------------------
def _reduce(prim, x, axis, keepdims):
    return bind(prim, x, axes=normalize_axes(axis, ndim_of(x)), keepdims=bool(keepdims))


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None,  # noqa: A001
        where=True):
    no_out("sum", out)
    return _with_identity(ops.sum_p, 0, a, axis, dtype, keepdims, initial, where)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    no_out("prod", out)
    return _with_identity(ops.prod_p, 1, a, axis, dtype, keepdims, initial, where)


def _with_identity(prim, identity, a, axis, dtype, keepdims, initial, where):
    """sum and prod, ``where=mask`` (masked elements count as the identity) and
    ``initial`` (one more operand) as NumPy has them."""
    if dtype is not None:
        a = cast(a, dtype)
    if where is not True:
        a = _select(where, a, identity)
    result = _reduce(prim, a, axis, keepdims)
    if dtype is not None and dtype_of(result) != np.dtype(dtype):
        # np.sum(mask, dtype=np.int32) is int32 (wrapping past 2**31), where the
        # accumulator widens small ints to int64: the same value modulo 2**32
        result = cast(result, dtype)
        if ndim_of(result) == 0:
            result = result[()]  # a NumPy scalar, as np.sum returns
    if initial is None:
        return result
    initial = np.asarray(initial, dtype_of(result))[()]  # cast to the result, as NumPy does
    return result + initial if prim is ops.sum_p else result * initial


def max(a, axis=None, out=None, keepdims=False, initial=None, where=True):  # noqa: A001
    no_out("max", out)
    return _extreme(ops.max_p, np.maximum, a, axis, keepdims, initial, where)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=True):  # noqa: A001
    no_out("min", out)
    return _extreme(ops.min_p, np.minimum, a, axis, keepdims, initial, where)


def _extreme(prim, combine, a, axis, keepdims, initial, where):
    """max and min with ``initial`` (the result of an empty reduction, and one more
    operand) and ``where=mask`` (which needs ``initial``, as in NumPy)."""
    if initial is None:
        if where is not True:
            raise ValueError(f"reduction operation '{combine.__name__}' does not have an "
                             "identity, so to use a where mask one has to specify 'initial'")
        return _reduce(prim, a, axis, keepdims)
    initial = np.asarray(initial, dtype_of(a))[()]
    if where is not True:
        a = _select(where, a, initial)
    if size_of(shape_of(a)[i] for i in normalize_axes(axis, ndim_of(a))) == 0:
        # the empty reduction: initial in a's dtype (the sum's accumulator widens int32
        # and bool to int64)
        return cast(_reduce(ops.sum_p, a, axis, keepdims) * 0, dtype_of(a)) + initial
    return combine(_reduce(prim, a, axis, keepdims), initial)


def any(a, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    no_out("any", out)
    if where is not True:  # the masked-out elements count as False (any's identity)
        a = _select(where, cast(a, bool), False)
    return _reduce(ops.any_p, a, axis, keepdims)


def all(a, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    no_out("all", out)
    if where is not True:  # ... as True (all's identity)
        a = _select(where, cast(a, bool), True)
    return _reduce(ops.all_p, a, axis, keepdims)


def count_nonzero(a, axis=None, *, keepdims=False):
    """np.count_nonzero: elements that are not zero (NaN counts), as int64; a NumPy int64
    where no axis is left.

    >>> int(count_nonzero(np.array([[1.0, 0.0], [np.nan, 0.0]])))
    2
    >>> count_nonzero(np.array([[1, 0], [2, 3]]), axis=0).tolist()
    [2, 1]
    """
    return sum(a != 0, axis=axis, dtype=np.intp, keepdims=keepdims)


def _arg_reduce(prim, a, axis, out, keepdims):
    no_out(prim.name, out)
    reduced = shape_of(a) if axis is None else (shape_of(a)[normalize_axis(axis, ndim_of(a))],)
    if size_of(reduced) == 0:  # NumPy raises; a program's argmax of nothing would give 0
        raise as_numpy_would(ValueError(f"attempt to get {prim.name} of an empty sequence"))
    if axis is None:
        result = bind(prim, ops.reshape(a, (-1,)), axis=0, keepdims=False)
        return ops.reshape(result, (1,) * ndim_of(a)) if keepdims else result
    return bind(prim, a, axis=normalize_axis(axis, ndim_of(a)), keepdims=bool(keepdims))


def argmax(a, axis=None, out=None, keepdims=False):
    return _arg_reduce(ops.argmax_p, a, axis, out, keepdims)


def argmin(a, axis=None, out=None, keepdims=False):
    return _arg_reduce(ops.argmin_p, a, axis, out, keepdims)


def _mean_dtype(a, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    # np.mean computes integer and bool means in float64.
    return dtype_of(a) if dtype_of(a).kind in "fc" else np.dtype(np.float64)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    no_out("mean", out)
    dtype = _mean_dtype(a, dtype)
    axes = normalize_axes(axis, ndim_of(a))
    if where is not True:  # np.mean(x, axis=1, where=mask): over the unmasked elements
        total = sum(cast(a, dtype), axes, keepdims=keepdims, where=where)
        mask = ops.broadcast_to(where, tuple(shape_of(a)))
        count = sum(mask, axes, dtype=dtype, keepdims=keepdims)
        return _in_mean_dtype(total / count, dtype)
    count = size_of(shape_of(a)[i] for i in axes)
    total = bind(ops.sum_p, cast(a, dtype), axes=axes, keepdims=bool(keepdims))
    return _in_mean_dtype(total / _as_scalar(count, dtype), dtype)


_mean = mean  # var's own ``mean=`` keyword hides the function there


def _in_mean_dtype(quotient, dtype):
    """NumPy divides an integer (or bool) ``dtype=``'s sum into that dtype, casting
    unsafely: ``np.mean(x, dtype=np.int64)`` is the float quotient truncated, an int64."""
    return quotient if dtype.kind in "fc" else quotient.astype(dtype)  # a scalar stays one


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=np._NoValue, correction=np._NoValue):
    """np.var, ``where=`` masks and NumPy 2's ``correction=`` (ddof's other name) too.

    >>> x = np.array([[1.0, 5.0, 3.0], [3.0, -2.0, 4.0]])
    >>> var(x, axis=1, where=x > 0, ddof=1).tolist()
    [4.0, 0.5]
    """
    no_out("var", out)
    if mean is not np._NoValue:
        raise UnsupportedError("np.var/np.std(..., mean=) is not supported on tracejit "
                               "arrays; NumPy runs it")
    ddof = _ddof(ddof, correction)
    dtype = _mean_dtype(a, dtype)
    if dtype.kind not in "fc":  # integer means and sums of float squares, cast unsafely
        raise UnsupportedError(f"np.var/np.std with dtype={dtype} (an integer or bool "
                               "accumulator) is not supported; NumPy runs it")
    a = cast(a, dtype)
    axes = normalize_axes(axis, ndim_of(a))
    if where is not True:
        # NumPy's _var: the mean and the squares over the unmasked elements, divided by
        # max(count - ddof, 0) per output element (NaN or inf where too few are left)
        count = sum(ops.broadcast_to(where, tuple(shape_of(a))), axes, dtype=dtype,
                    keepdims=True)
        centered = a - sum(a, axes, keepdims=True, where=where) / count
        squares = sum(centered * centered, axes, keepdims=keepdims, where=where)
        divisor = np.maximum(count - _as_scalar(ddof, dtype), _as_scalar(0, dtype))
        return squares / (divisor if keepdims else ops.reshape(divisor, shape_of(squares)))
    centered = a - _mean(a, axis=axes, keepdims=True)
    count = size_of(shape_of(a)[i] for i in axes) - ddof
    if count < 0:  # NumPy divides by max(n - ddof, 0): nan or inf, never a sign flip
        count = 0
    squares = bind(ops.sum_p, centered * centered, axes=axes, keepdims=bool(keepdims))
    return squares / _as_scalar(count, dtype)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=np._NoValue, correction=np._NoValue):
    return np.sqrt(var(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims,
                       where=where, mean=mean, correction=correction))


def _ddof(ddof, correction):
    """NumPy 2's ``correction=`` is ``ddof=`` by another name; both at once is an error."""
    if correction is np._NoValue:
        return ddof
    if ddof != 0:
        raise as_numpy_would(ValueError("ddof and correction can't be provided "
                                        "simultaneously."))
    return correction


def _as_scalar(count, dtype):
    """A count as a weak divisor, so the mean keeps ``dtype`` (symbolic counts stay)."""
    return float(count) if isinstance(count, int) else count


def _select(condition, x, y):
    """``x`` where ``condition`` (a ``where=`` mask) holds, else the identity ``y``. The
    mask broadcasts to ``x``'s shape, never ``x`` to the mask's: NumPy raises ValueError
    for ``np.sum(ones((1, 2)), where=mask_5x2)`` (the where-broadcast would sum 5 rows)."""
    condition = ops.broadcast_to(condition, tuple(shape_of(x)))
    return bind(ops.where_p, condition, x, y)
