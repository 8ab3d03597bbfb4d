"""Conversions of traced values: ``np.asarray``, ``np.array``, ``np.float32(x)`` and kin.

Library code starts with ``X = np.asarray(X)`` or ``X = np.array(X, dtype=float)``, and
training loops end with ``np.float32(loss)``. NumPy calls these on a traced value would
ask it for its data (``__array__``), which would freeze the value into compiled code; the
front end (``frontend.Hooks.call``) sends them here instead, where each is what NumPy
makes of an array:

* ``np.asarray(x)`` is ``x`` itself (NumPy returns the same object), or a cast when a
  ``dtype`` differs; of a NumPy scalar or a Python number, a 0-d array;
* ``np.array(x)`` is a new value (a cast to its own dtype), so writing into it leaves
  ``x`` as it was; ``ndmin`` prepends axes of one;
* ``np.float32(x)`` (any NumPy scalar type) of a 0-d value is a cast whose result is a
  NumPy scalar; of an array, a cast array, as NumPy gives.

>>> import tracejit as tj
>>> f = tj.jit(lambda x: np.float32(np.asarray(x).mean()) * 2, cache="memory")
>>> f(np.array([1.0, 2.0]))
np.float32(3.0)
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .pending import Pending, is_pending
from .primitives import bind, is_traced
from .result_identity import note_numpy_result

dtype_of, ndim_of, shape_of = ops.dtype_of, ops.ndim_of, ops.shape_of


def _new_value(x, dtype):
    """A new traced value: ``x`` cast to ``dtype`` (its own dtype: a copy), never weak."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc":  # np.array(x, dtype=object): no compiled form
        raise UnsupportedError(f"converting a traced array to {dtype} is not supported")
    if x.aval.weak and x.dtype.kind == "f" and dtype.kind in "iu":
        # NumPy converts a Python float through int(): NaN and huge values raise
        raise UnsupportedError(f"np.asarray of a run-time Python float as {dtype}")
    keep_python_int_in_range(x, dtype)
    return bind(ops.cast_p, x, dtype=dtype)


def keep_python_int_in_range(x, dtype):
    """A run-time Python int (weak) converted to an integer ``dtype`` (``np.full(n, k,
    dtype=np.int32)``, ``np.asarray(k, dtype=np.int32)``) must fit, as NumPy checks: a
    guard keeps it in range, and past it NumPy's OverflowError (a cast would wrap)."""
    dtype = np.dtype(dtype)
    if not (is_traced(x) and x.aval.weak and x.dtype.kind in "iu" and dtype.kind in "iu"):
        return
    info = np.iinfo(dtype)
    low, high = max(int(info.min), -(2 ** 63)), min(int(info.max), 2 ** 63 - 1)
    if not (bool(x >= low) and bool(x <= high)):
        raise as_numpy_would(OverflowError(
            f"Python integer {int(x.value)} out of bounds for {dtype}"))


def python_int_past_range(bound, dtype):
    """-1 or 1 where ``bound`` is a Python int (a literal, or a run-time one under a guard)
    below or above the range of the integer ``dtype``, else 0. ``np.clip(ids, 0, 2**40)``
    with ``ids`` int32 drops the bound that clips nothing, where ``np.minimum`` raises.

    >>> python_int_past_range(2**40, np.int32), python_int_past_range(-3, np.uint8)
    (1, -1)
    >>> python_int_past_range(5, np.int32), python_int_past_range(2**40, np.float32)
    (0, 0)
    """
    dtype = np.dtype(dtype)
    aval = getattr(bound, "aval", None)  # a SymInt (a dim) is traced and holds no aval
    traced = is_traced(bound) and aval is not None and aval.weak and aval.dtype.kind in "iu"
    if dtype.kind not in "iu" or not (traced or type(bound) is int):
        return 0
    info = np.iinfo(dtype)
    return -1 if bool(bound < int(info.min)) else 1 if bool(bound > int(info.max)) else 0


def _as_ndarray(tracer):
    """``tracer`` with its value a 0-d ndarray, not a NumPy scalar (what ``np.asarray``
    of a scalar gives); a pending value stays pending."""
    if not tracer.shape:
        value = tracer.raw_value
        if is_pending(value):
            tracer.raw_value = Pending(lambda: np.asarray(value.force()),
                                       like=np.zeros((), tracer.dtype))
        else:
            tracer.raw_value = np.asarray(value)
    return tracer


def _as_scalar(tracer):
    from .traced_array import _numpy_scalar  # cycle: traced_array -> numpy_api -> here

    tracer.value = _numpy_scalar(tracer)
    return tracer


def _is_array(x):
    """Whether eager NumPy has an ndarray here (not a NumPy scalar or Python number)."""
    from .traced_array import _is_numpy_scalar  # cycle: traced_array -> numpy_api -> here

    return not x.aval.weak and not (not x.shape and _is_numpy_scalar(x))


def _check_order(order, name):
    # Values do not depend on the layout; compiled results are C-ordered, so a request
    # for Fortran order (which a caller may then rely on through .flags) is refused.
    if order not in (None, "K", "A", "C"):
        raise UnsupportedError(f"np.{name}(order={order!r}) of a traced array is not "
                               "supported; compiled results are C-ordered")


def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    """``np.asarray`` (and ``np.asanyarray``) of a traced value."""
    _check_order(order, "asarray")
    if copy:
        return array(a, dtype, order=order)
    if _is_array(a) and (dtype is None or np.dtype(dtype) == a.dtype):
        return _c_ordered(a) if order == "C" else a
    if copy is False:
        raise as_numpy_would(ValueError("Unable to avoid copy while creating an array as "
                                        "requested."))
    return _as_ndarray(_new_value(a, a.dtype if dtype is None else dtype))


def array(object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):  # noqa: A002
    """``np.array`` of a traced value: a copy (``copy=None``: as ``np.asarray``)."""
    _check_order(order, "array")
    if copy is None or copy is False:
        result = asarray(object, dtype, copy=copy)
    else:
        result = _as_ndarray(_new_value(object, object.dtype if dtype is None else dtype))
    if ndmin > ndim_of(result):
        result = ops.reshape(result, (1,) * (ndmin - ndim_of(result)) + tuple(shape_of(result)))
    return result


def ascontiguousarray(a, dtype=None, *, like=None):
    """``np.ascontiguousarray``: as ``np.asarray(order="C")``, but a 0-d value becomes shape
    ``(1,)``."""
    result = asarray(a, dtype)
    if not shape_of(result):
        return ops.reshape(result, (1,))
    return _c_ordered(result) if is_traced(result) else result


def _c_ordered(result):
    """``result`` as NumPy holds it C-contiguous: itself, or a copy of a view NumPy holds in
    another order (``w.T``).

    Of an argument or an array read from outside (or a view of one), NumPy returns the
    caller's array itself when it is C-contiguous and a copy when not (``v[::-1]``, ``w.T``
    of a C-ordered ``w``), and compiled calls take either layout: the result is a copy no
    write may go through (``traced_array.note_view`` without steps), so a write into it, or
    into the argument while it lives, runs eagerly."""
    root = result.base_or_none()
    root = result if root is None else root
    context = root.context
    if any(root is given for given in (*context.input_tracers,
                                       *context.implicit_tracers.values())):
        from .traced_array import note_view  # cycle: traced_array -> here
        copy = bind(ops.cast_p, result, dtype=dtype_of(result))
        note_view(root, copy)
        if any(root is given for given in (*context.input_tracers,
                                           *context.implicit_tracers.values())):
            # returned, it is NumPy's own array where that is C-contiguous at the call
            note_numpy_result(copy, result, "ascontiguousarray")
        return copy
    if result.view_base is not None and not np.asarray(result.value).flags.c_contiguous:
        return bind(ops.cast_p, result, dtype=dtype_of(result))  # a copy
    return result


def scalar_type(kind, x):
    """``kind(x)`` for a NumPy scalar type ``kind`` (``np.float32(loss)``): a cast, a NumPy
    scalar when ``x`` is 0-d. ``None`` when NumPy does something else: of a Python number
    (``x`` weak), an integer type converts through Python's ``int`` and raises past its
    range or at NaN, where a cast would wrap; only a Python int to int64 is that cast."""
    dtype = np.dtype(kind)
    python_int_to_int64 = x.dtype.kind in "iu" and dtype == np.dtype(np.int64)
    if dtype.kind not in "biuf" or (x.aval.weak and dtype.kind in "iu"
                                    and not python_int_to_int64):
        return None
    result = _new_value(x, dtype)
    return _as_scalar(result) if not shape_of(result) else result


def python_number(x, kind):
    """``float(x)`` (``kind`` float), ``int(x)`` of an integer (``kind`` int) or
    ``x.item()`` (``kind`` None) of a traced one-element value, as a run-time Python
    number: a weak scalar, cast to float64 or int64, that the result returns as a Python
    ``float``/``int`` and that later arithmetic promotes as one. ``None`` where that is not
    what Python gives (a bool or uint64 item, ``int`` of a float, which truncates and
    raises at NaN, an array with elements other than one or of dynamic size): the caller
    guards the value instead.

    Guarding it (the value frozen into the trace) made ``return loss.item()`` fail its
    guard on every later call; used in an ``if``, the weak scalar is guarded as any
    comparison is, with its error margin.
    """
    if any(not isinstance(dim, int) or dim != 1 for dim in shape_of(x)):
        return None
    dtype = dtype_of(x)
    if kind is not None and shape_of(x):
        try:  # int(p[0]) of a (1,)-shaped p: NumPy 2 refuses arrays of ndim > 0, as eager
            kind(np.zeros(shape_of(x), dtype))
        except TypeError as error:
            raise as_numpy_would(error) from None
    if kind is float and dtype.kind in "biuf":
        target = np.dtype(np.float64)
    elif kind is None and dtype.kind == "f":
        target = np.dtype(np.float64)
    elif kind in (None, int) and (dtype.kind == "i" or dtype.kind == "u" and dtype.itemsize < 8
                                  or kind is int and dtype.kind == "b"):
        target = np.dtype(np.int64)
    else:
        return None
    if x.aval.weak and dtype == target and not shape_of(x):
        return x
    if shape_of(x):
        x = ops.reshape(x, ())
    return bind(ops.cast_p, x, dtype=target, weak=True)


CONVERSIONS = {
    np.asarray: asarray,
    np.asanyarray: asarray,
    np.array: array,
    np.ascontiguousarray: ascontiguousarray,
}
