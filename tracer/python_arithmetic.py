"""Arithmetic between run-time Python numbers follows Python, not NumPy.

A Python float or int the trace holds as a run-time value (an argument ``lr``, a
``float(loss)``, a ``loss.item()``) is a weak scalar, promoted as Python's number (NEP 50).
When both operands of ``/``, ``//``, ``%`` or ``**`` are such numbers, eager runs Python's
own arithmetic, which raises where NumPy gives inf or nan: ``1.0 / 0.0`` is
ZeroDivisionError, ``0.0 ** -1`` ZeroDivisionError, ``10.0 ** 400`` OverflowError, and
``(-8.0) ** 0.5`` is a complex number. ``check`` runs Python's operator on the trace's
values (raising its error, as eager raises it) and adds a margin guard that sends a later
call whose numbers would do any of that to eager, where Python does it.

    >>> import numpy as np, tracejit as tj
    >>> def inverse_total(x):
    ...     try:
    ...         return 1.0 / float(x.sum())
    ...     except ZeroDivisionError:
    ...         return 0.0
    >>> f = tj.jit(inverse_total, cache="memory")
    >>> f(np.array([1.0, 1.0])), f(np.array([2.0, 2.0])), f(np.array([1.0, -1.0]))
    (0.5, 0.25, 0.0)
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .dims import SymInt
from .errors import as_numpy_would
from .ir import Guard
from .locations import user_location
from .pending import force
from .primitives import bind, is_traced
from .traced_array import Tracer, trace_error

_OPERATORS = {"true_divide": operator.truediv, "floor_divide": operator.floordiv,
              "mod": operator.mod, "power": operator.pow}


def check(context, prim, args, values, avals):
    """Before ``prim`` on ``args`` is recorded: Python's error if Python's operator raises
    on these values (or a trace error where its result is complex), else a guard that
    later values keep it from raising."""
    if prim.name not in _OPERATORS or len(args) != 2 or not all(
            aval.weak for aval in avals) or getattr(context, "checking_python", False):
        return
    a, b = (_python(value, aval) for value, aval in zip(values, avals))
    try:
        result = _OPERATORS[prim.name](a, b)
    except (ZeroDivisionError, OverflowError) as error:
        raise as_numpy_would(error) from None
    if isinstance(result, complex):
        raise trace_error("a Python number to a fractional power is complex here; "
                          "compiled code computes in real numbers")
    context.checking_python = True  # the predicate's own power is NumPy's
    try:
        raising = _raising(prim.name, *args)
    finally:
        context.checking_python = False
    if raising is not None:
        atom, _, _ = context.atom(raising)
        context.body.append(Guard(atom, "margin", False, user_location(skip=3)))


def _guard_dims(name, a, b):
    """Shape guards that keep dims ``a``, ``b`` (or Python numbers) from making Python
    raise: a divisor stays nonzero, a base stays nonzero under a negative exponent."""
    if name != "power":
        if isinstance(b, SymInt):
            bool(b != 0)  # (a dim comparison records its shape guard)
    elif isinstance(a, SymInt) and (isinstance(b, SymInt) and not b >= 0 or (
            not isinstance(b, SymInt) and b < 0)):
        bool(a != 0)


def _python(value, aval):
    value = np.asarray(force(value)).item()
    return float(value) if aval.dtype.kind == "f" else value


def _raising(name, a, b):
    """The traced predicate "Python raises (or makes a complex number) on these operands",
    or None when nothing traced can make it so. Dims (``n / (n - 1)`` of a dynamic batch
    size) get shape guards instead: the trace's dims are never negative or fractional."""
    if not isinstance(a, Tracer) and not isinstance(b, Tracer):
        _guard_dims(name, a, b)
        return None
    if not is_traced(b) and not (name == "power" and is_traced(a)):
        return None
    if name != "power":
        return bind(ops.equal_p, b, 0)
    zero_to_negative = bind(ops.logical_and_p, bind(ops.equal_p, a, 0), bind(ops.less_p, b, 0))
    if not any(np.dtype(ops.dtype_of(x)).kind == "f" for x in (a, b)):
        return zero_to_negative  # int ** -k is a float in Python: only 0 ** -k raises
    fractional = bind(ops.logical_and_p, bind(ops.less_p, a, 0),
                      bind(ops.not_equal_p, b, bind(ops.floor_p, b)))
    finite = bind(ops.logical_and_p, bind(ops.isfinite_p, a), bind(ops.isfinite_p, b))
    overflow = bind(ops.logical_and_p, finite, bind(ops.isinf_p, bind(ops.power_p, a, b)))
    return bind(ops.logical_or_p, bind(ops.logical_or_p, zero_to_negative, fractional),
                overflow)
