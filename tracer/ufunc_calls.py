"""What a NumPy ufunc called on a tracejit array means: ``array_ufunc``, the body of
``__array_ufunc__`` that Tensor and the tracer share.

A call (``np.tanh(t)``, ``np.add(a, b, out=c)``, ``dtype=``) binds the ufunc's primitive
or composite from ``tracejit.tracer.ufuncs``' tables. The ufunc's methods are other NumPy
functions: ``reduce`` the matching reduction (``UFUNC_REDUCTIONS``; ``np.logaddexp.reduce``
NumPy's fold), ``accumulate`` a running one (``UFUNC_ACCUMULATIONS``), ``at`` an
unbuffered scatter-add, ``outer`` the call over operands reshaped against each other.

>>> import tracejit as tj
>>> float(np.add.reduce(tj.tensor(np.arange(4.0)))), np.add.outer(
...     tj.tensor(np.arange(2.0)), tj.tensor(np.arange(3.0))).shape
(6.0, (2, 3))
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import UnsupportedError
from .indexing import add_at
from .log_reductions import LOG_REDUCTIONS
from .numpy_api import astype
from .out_arguments import write_out
from .primitives import as_array, bind
from .reduction_functions import all, any, max, min, prod, sum
from .scans import (
    cumprod,
    cumsum,
    maximum_accumulate,
    minimum_accumulate,
    one_accumulated_axis,
)
from .ufunc_dtypes import loop_operands
from .ufuncs import UFUNC_COMPOSITES, UFUNCS, foreign_ufunc

shape_of, ndim_of = ops.shape_of, ops.ndim_of

# ``ufunc.reduce`` as the matching reduction.
UFUNC_REDUCTIONS = {
    np.add: sum,
    np.multiply: prod,
    np.maximum: max,
    np.minimum: min,
    np.logical_and: all,
    np.logical_or: any,
}


# ``ufunc.accumulate`` as the matching running reduction (axis 0 by default).
def _accumulation(running):
    def accumulate(array, axis=0, dtype=None, out=None):
        return running(array, one_accumulated_axis(array, axis), dtype, out)

    return accumulate


UFUNC_ACCUMULATIONS = {
    np.add: _accumulation(cumsum),
    np.multiply: _accumulation(cumprod),
    np.maximum: maximum_accumulate,
    np.minimum: minimum_accumulate,
}


def _ufunc_at(ufunc, target, index, value):
    """``np.add.at(target, index, value)`` (and ``np.subtract.at``) on a tracejit array:
    unbuffered, so repeated positions add every value (an embedding's backward). The
    front end passes NumPy buffers made in the function here as their traced copies."""
    if isinstance(target, np.ndarray):
        raise UnsupportedError(f"np.{ufunc.__name__}.at into a NumPy array that is not a "
                               "buffer of this function; write into an array it creates")
    if ufunc is np.subtract:
        value = np.negative(value)
    updated = add_at(target, index, value)
    if hasattr(target, "_update"):  # a tracer: every name for it sees the write
        target._update(updated)
    else:  # a Tensor: a differentiable assignment
        target[...] = updated


def array_ufunc(ufunc, method, *inputs, **kwargs):
    """The body of ``__array_ufunc__`` for tracejit arrays."""
    name = f"np.{ufunc.__name__}"
    if method == "reduce" and ufunc in UFUNC_REDUCTIONS:
        kwargs = {
            key: value for key, value in kwargs.items() if value is not None or key == "axis"
        }
        kwargs.setdefault("axis", 0)  # ufunc.reduce reduces axis 0 by default
        return UFUNC_REDUCTIONS[ufunc](*inputs, **kwargs)
    if method == "reduce" and ufunc in LOG_REDUCTIONS:  # HMMs in log space: NumPy's fold
        return LOG_REDUCTIONS[ufunc](*inputs, **{
            key: value for key, value in kwargs.items() if value is not None or key == "axis"})
    if method == "accumulate" and ufunc in UFUNC_ACCUMULATIONS:
        if len(inputs) != 1:
            raise TypeError(f"{name}.accumulate takes one array")
        out = kwargs.pop("out", None)
        out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        return UFUNC_ACCUMULATIONS[ufunc](*inputs, out=out, **kwargs)
    if method == "at" and ufunc in (np.add, np.subtract) and len(inputs) == 3 and not kwargs:
        return _ufunc_at(ufunc, *inputs)
    if method == "outer" and ufunc.nin == 2 and len(inputs) == 2 and not kwargs:
        # every pair: the first operand's axes, then the second's
        first, second = (as_array(value) for value in inputs)
        first = ops.reshape(first, tuple(shape_of(first)) + (1,) * ndim_of(second))
        return array_ufunc(ufunc, "__call__", first, second)
    if method != "__call__":
        raise UnsupportedError(f"{name}.{method} is not supported on tracejit arrays")
    out = kwargs.pop("out", None)
    if out is not None and not [item for item in out if item is not None]:
        out = None  # (out=(None,) is no out; this module's all and sum are NumPy's)
    if out is not None and len(out) != 1:
        raise UnsupportedError(
            f"{name}(..., out=...) with several outputs is not supported on tracejit "
            "arrays; assign the results"
        )
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise UnsupportedError(f"{name} keyword arguments {sorted(kwargs)} are not supported")
    if dtype is not None:  # the loop's dtype: the operands are cast first (ufunc_dtypes)
        inputs = loop_operands(ufunc, inputs, dtype, astype)
    if ufunc in UFUNCS:
        result = bind(UFUNCS[ufunc], *inputs)
        if getattr(result, "aval", None) is not None and result.aval.weak:
            # np.sqrt(python_float) is a NumPy scalar: strong, unlike the operators' result.
            result = bind(ops.cast_p, result, dtype=result.dtype)
    elif ufunc in UFUNC_COMPOSITES:
        result = UFUNC_COMPOSITES[ufunc](*inputs)
    elif (foreign := foreign_ufunc(ufunc)) is not None:
        result = foreign(*inputs)
    else:
        raise UnsupportedError(
            f"{name} is not supported by tracejit yet (no primitive or composition for it); "
            "convert with .numpy() for plain NumPy, or write it with supported ops"
        )
    result = astype(result, dtype) if dtype is not None else result
    if out is None:
        # a 0-d result is a NumPy scalar, as NumPy's ufuncs give one for any 0-d operands
        # (np.sqrt(len(x)), np.sqrt(x.sum()), np.sqrt(np.array(4.0)): np.float64)
        result = _as_numpy_scalar(result)
    return result if out is None else write_out(out[0], result, name)


def _as_numpy_scalar(result):
    # cycle: traced_array -> array_methods -> ufunc_calls
    from .traced_array import Tracer, _numpy_scalar

    if isinstance(result, Tracer) and not result.shape:
        result.value = _numpy_scalar(result)
    return result
