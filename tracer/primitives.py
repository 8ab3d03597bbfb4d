"""Primitives and ``bind``: the single place where an operation meets its arguments.

Every operation tracejit knows is a ``Primitive`` declared once in ``tracer/ops`` with
its rules beside it: the NumPy implementation (which *is* eager semantics), the
shape/dtype rule, and the VJP written with other primitives. ``bind`` picks who handles a
call: plain NumPy values run the implementation directly; an eager ``tracejit.Tensor``
or a tracer proxy among the arguments takes over (the one with the highest
``__tracejit_priority__``), so the same model code runs on all three.

The trace state lives here too, beside ``bind``: which trace records this thread's
operations (``current_context``) and whether a value belongs to one (``is_traced``, by
protocol). That is all the NumPy layer, indexing and dims need of the tracer, so they
reach it without importing ``tracing`` (which imports them).

>>> from tracejit.tracer.ops import exp_p
>>> float(bind(exp_p, 0.0))
1.0
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

PRIMITIVES: dict[str, Primitive] = {}


class Primitive:
    """One IR operation.

    ``impl(*args, **params)``: the NumPy reference implementation.
    ``abstract_eval(*avals, **params) -> AbstractArray``: the shape/dtype rule.
    ``vjp``: a tuple with one rule per argument, ``rule(cotangent, *primals, out=..., **params)``,
    ``None`` where that argument's gradient is zero; a variadic primitive (concatenate)
    gives one rule that also takes ``argnum=``. Rules may return values at the output's
    broadcast shape and dtype: ``tracejit.tracer.autodiff.cotangent`` sums them back to the
    primal's shape and casts. ``vjp=None`` marks an output that carries no gradient
    (comparisons, argmax). Only the rules of arguments that need a gradient are called.
    ``kind`` groups primitives for scheduling: pointwise, reduction, structural, index,
    matmul, conv, creation, control, scan.
    """

    def __init__(self, name, kind, *, impl, abstract_eval, vjp):
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} is declared twice")
        self.name = name
        self.kind = kind
        self.impl = impl
        self.abstract_eval = abstract_eval
        self.vjp = vjp
        PRIMITIVES[name] = self

    @property
    def differentiable(self):
        return self.vjp is not None

    def vjp_rule(self, argnum):
        if callable(self.vjp):
            return lambda *args, **params: self.vjp(*args, argnum=argnum, **params)
        return self.vjp[argnum]

    def __call__(self, *args, **params):
        return bind(self, *args, **params)

    def __repr__(self):
        return f"<primitive {self.name}>"


def find_handler(values):
    """The type that handles a call on ``values`` (highest priority), or ``None``."""
    handler, best = None, 0
    for value in values:
        priority = getattr(type(value), "__tracejit_priority__", 0)
        if priority > best:
            handler, best = type(value), priority
    return handler


def bind(prim, *args, like=None, **params):
    """Apply ``prim``; ``like`` lends its handler to calls with no array arguments."""
    handler = find_handler(args if like is None else (*args, like))
    if handler is None:
        return prim.impl(*args, **params)
    return handler.__tracejit_bind__(prim, args, params)


# --- the trace being recorded -----------------------------------------------------------
_state = threading.local()


def current_context():
    """The ``TracingContext`` recording on this thread, or ``None`` outside a trace.

    >>> current_context() is None
    True
    """
    return getattr(_state, "context", None)


@contextmanager
def recording_into(context):
    """Make ``context`` the current trace for a ``with`` block; the trace that was current
    (an outer one, or none) is current again after it."""
    previous = current_context()
    _state.context = context
    try:
        yield context
    finally:
        _state.context = previous


def any_traced(values):
    """A traced value among ``values`` or in a tuple or list there (``np.add.at``'s index,
    ``x[1:3] += [a.sum(), 1]``).

    >>> any_traced([1, (2.0, [3])])
    False
    """
    return any(any_traced(value) if type(value) in (tuple, list) else is_traced(value)
               for value in values)


def is_traced(value):
    """Whether ``value`` belongs to a trace being recorded (a traced array or a symbolic
    dim) rather than being data. Tested by protocol - its class has a
    ``__tracejit_priority__`` of 2 or more; an eager ``Tensor``'s is 1 - so nothing needs
    the tracer's classes to ask.

    >>> import numpy as np
    >>> is_traced(np.ones(2)), is_traced(3)
    (False, False)
    """
    return getattr(type(value), "__tracejit_priority__", 0) >= 2


def is_tracejit_array(value):
    """A traced value or an eager ``Tensor`` (priority 1 or more): what a composite keeps
    as it is where NumPy would call ``np.asarray``."""
    return getattr(type(value), "__tracejit_priority__", 0) >= 1


def as_array(value):
    """``np.asarray(value)`` as NumPy makes it: a tracejit array stays itself, except that
    a weak one (a Python number traced as a run-time input) becomes its strong dtype, as
    NumPy's array of a Python float is float64 (``np.append(x_f32, t)`` is float64)."""
    if not is_tracejit_array(value):
        return np.asarray(value)
    aval = getattr(value, "aval", None)
    if aval is not None and aval.weak:
        from .ops import cast_p  # cycle: ops declares its primitives with this module

        return bind(cast_p, value, dtype=aval.dtype)
    return value


def is_traced_array(value):
    """A traced array (``tracing.Tracer``), not a symbolic dim (``dims.SymInt``, which
    says ``__tracejit_dim__``)."""
    return is_traced(value) and not getattr(type(value), "__tracejit_dim__", False)
