"""The loop index while a captured loop's body is traced (``tracejit.tracer.loops``).

Capture traces two iterations of a body and keeps one recording for every trip. The
index ``t`` is handed to the body as a ``SymInt`` over a fresh symbol (``i0``) whose
range is every trip the loop can run in the bucket, so what the body computes from it
stays exact in the IR: ``x[t]`` and ``x[:, :, 2*t:2*t + 3]`` slice at ``DimExpr``s of
``i0``, ``t // 2`` and ``t % 3`` stay floor divisions and remainders, ``x[t] * (t % 2)``
multiplies by a traced int. Nothing about the index is inferred from two samples.

Where Python needs a concrete answer about the index, the ``SymInt`` asks its context:
a comparison the ranges cannot decide (``if t == 4``, ``min(t, 2)``, a bounds check in
``x[t + 1]``) and a specialization (``tokens[t]`` on a Python list calls ``__index__``,
``float(t)``) record a shape guard that mentions ``i0``. Such a guard says the trace took
one path; ``settle_guards`` keeps the capture only when that path is the same at every
trip:

* a guard linear in the index (``c * i0 + a`` against 0, ``a`` and ``c`` free of the
  index) holds at every trip when it holds at the first and at the last (the trips are
  the integers between them); each end is decided over the symbols' bucket ranges, and
  an end the ranges leave open becomes a shape guard of its own (on the dims, checked
  at entry) when it holds on this call, else the capture is refused;
* any other guard on the index (``t % 3 == 0``) must be decided by the index's range
  alone, else the capture is refused.

A refusal names the user's line that asked (``explain()`` shows it): the loop unrolls
and stays exact.

>>> from tracejit.tracer.dims import DimExpr
>>> i0, s0 = DimExpr.symbol("i0"), DimExpr.symbol("s0")
>>> linear_in(2 * i0 - s0 + 1, "i0") == (1 - s0, 2)
True
>>> linear_in((i0 + 1) // 2, "i0") is None
True
"""

from __future__ import annotations

import numpy as np

from .dims import DimExpr, SymInt, decide_by_bounds, expr_of
from .errors import TraceSignal
from .ir import ShapeGuard

_NEGATION = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class IndexRefused(TraceSignal):
    """The body's path depends on the index (``tracejit.tracer.loops`` turns it into
    ``Refused``)."""


def symbols_of(value):
    return value.symbols() if isinstance(value, DimExpr) else set()


def linear_in(expr, index):
    """``expr == a + c * index`` as ``(a, c)`` with ``a`` and ``c`` free of the index
    (ints or ``DimExpr``s of other symbols), or None (a floor division, a remainder or a
    power of the index)."""
    if not isinstance(expr, DimExpr) or index not in expr.symbols():
        return expr, 0
    constant, slope = {}, {}
    for monomial, coeff in expr.terms:
        named = [factor for factor in monomial if factor == index]
        rest = tuple(factor for factor in monomial if factor != index)
        if any(not isinstance(factor, str) and index in factor.symbols() for factor in rest):
            return None
        if len(named) > 1:
            return None
        target = slope if named else constant
        target[rest] = target.get(rest, 0) + coeff
    return DimExpr.make(constant), DimExpr.make(slope)


def index_range(context, start, stop, step):
    """``(low, high)``: the values the index takes at the captured trips (the first trip
    after the peeled one, ``start + step``, to the last) over every call in the bucket."""
    if step > 0:
        low_end, high_end = expr_of(start) + step, expr_of(stop) - 1
    else:
        low_end, high_end = expr_of(stop) + 1, expr_of(start) + step
    low = low_end.bounds(context.ranges)[0] if isinstance(low_end, DimExpr) else low_end
    high = high_end.bounds(context.ranges)[1] if isinstance(high_end, DimExpr) else high_end
    return low, max(low, high)


def trip_ends(start, stop, step):
    """The first and the last captured trip as dims (the last assumes the range is not
    empty; with |step| == 1 it is ``stop - step``)."""
    return expr_of(start) + step, expr_of(stop) - step


class LoopIndex:
    """The index symbol of one loop being captured: its ``SymInt`` for each trial, and
    its range in the context while the trials run (``close`` removes it)."""

    def __init__(self, context, name, start, stop, step):
        self.context, self.name, self.step = context, name, step
        self.expr = DimExpr.symbol(name)
        self.low, self.high = index_range(context, start, stop, step)
        if self.low < 0:
            raise IndexRefused("the loop index can be negative (a range starting below 0)")
        self.first, self.last = trip_ends(start, stop, step)
        # Not negative when the captured loop runs at least one trip (else no guard of its
        # body matters): conditions may assume it.
        self.span = (self.last - self.first) * step
        context.ranges[name] = (self.low, self.high)
        self.active = _active(context)

    def at(self, value):
        """The index as the body sees it in the trial at trip ``value``."""
        self.active[self.name] = value
        return SymInt(self.expr, value, self.context)

    def close(self):
        self.context.ranges.pop(self.name, None)
        self.active.pop(self.name, None)


def _active(context):
    """Loop indices of the trials running now, with their values in the running trial
    (``symbol_values`` binds them: a nested loop's remaining trips run with them)."""
    active = getattr(context, "loop_indices", None)
    if active is None:
        active = context.loop_indices = {}
    return active


def describe(guard):
    """Where a guard was asked, for a refusal: the user's line and its source."""
    location = guard.location
    if location is None:
        return "in the body"
    source = f" `{location.source}`" if location.source else ""
    return f"at {location.short}{source}"


def settle_guards(context, since, index):
    """Check the shape guards recorded since position ``since`` that mention the loop
    index (see the module docstring): drop those that hold at every trip, replace those
    that hold when conditions on the dims do by those conditions, raise ``IndexRefused``
    for the rest."""
    bindings = context.symbol_values()
    settled = []
    for guard in context.shape_guards[since:]:
        if index.name not in symbols_of(guard.lhs) | symbols_of(guard.rhs):
            settled.append(guard)
            continue
        settled.extend(_settle(context, guard, index, bindings))
    context.shape_guards[since:] = settled


def _settle(context, guard, index, bindings):
    difference = guard.lhs - guard.rhs
    op = guard.op if guard.expected else _NEGATION[guard.op]
    what = guard.reason or f"a comparison with the loop index ({_text(difference, op)})"
    why = (f"the loop index decides the path {describe(guard)}: {what} is not the same "
           "at every trip")
    split = linear_in(difference, index.name)
    if split is None:
        if decide_by_bounds(difference, op, context.ranges) is True:
            return []
        raise IndexRefused(why)
    a, c = split
    ends = [a + c * index.first, a + c * index.last]
    if op != "!=":
        return _conditions(context, guard, [(end, op) for end in ends], bindings, why,
                           index.span)
    for side in (">", "<"):  # no root between the ends: the same sign at both
        try:
            return _conditions(context, guard, [(end, side) for end in ends], bindings, why,
                               index.span)
        except IndexRefused:
            continue
    raise IndexRefused(why)


def _decide(expr, op, ranges, span):
    """``expr op 0`` over the ranges, for calls whose captured loop runs a trip (``span >=
    0``): ``expr < 0`` follows from ``expr + c * span < 0`` (``expr - c * span > 0`` for
    ``>``), which often cancels the trip count (``2 - T < 0`` when ``T - 3 >= 0``)."""
    answer = decide_by_bounds(expr, op, ranges)
    if answer is not None or op in ("==", "!=") or not isinstance(span, DimExpr):
        return answer
    sign = 1 if op in ("<", "<=") else -1
    for c in (1, 2):
        if decide_by_bounds(expr + sign * c * span, op, ranges) is True:
            return True
    return None


def _conditions(context, guard, conditions, bindings, why, span=0):
    """Shape guards for ``expr op 0`` of each condition the ranges leave open (none for
    those they decide true); ``IndexRefused`` when one is false, always or on this call."""
    kept = []
    for expr, op in conditions:
        answer = _decide(expr, op, context.ranges, span)
        if answer is True:
            continue
        if answer is False:
            raise IndexRefused(why)
        condition = ShapeGuard(expr, op, 0, True, guard.location,
                               guard.reason or "the loop index at its first or last trip")
        if not condition.holds(bindings):
            raise IndexRefused(f"{why} (on this call {expr} is {expr.evaluate(bindings)})")
        kept.append(condition)
    return kept


def _text(difference, op):
    return f"{difference} {op} 0"


def read_at_index(container, key):
    """``container[key]`` for a subscript whose key mentions a loop index (the front end's
    ``item_at``): a Python list, tuple, dict or str read at the index specializes it (its
    items would be frozen per trip), which refuses the capture unless every trip reads the
    same entry."""
    if isinstance(key, SymInt) and type(container) in (list, tuple, dict, str):
        key = key.context.specialize(key, f"a Python {type(container).__name__} read at "
                                          "it (pass an array to read it at the index)")
    if isinstance(container, _INDEX_CONCATENATORS):
        # np.r_[0:i]: NumPy's arange of a SymInt is an array of objects; the trips differ
        # in length anyway, so the index is specialized (the loop unrolls, with the reason)
        key = _specialized_slices(key)
    return container[key]


_INDEX_CONCATENATORS = (type(np.r_), type(np.c_))


def _specialized_slices(key):
    if isinstance(key, tuple):
        return tuple(_specialized_slices(part) for part in key)
    if isinstance(key, slice):
        return slice(*(_specialized_slices(part) for part in (key.start, key.stop, key.step)))
    if isinstance(key, SymInt):
        return key.context.specialize(key, "np.r_ or np.c_ read at it (write np.arange)")
    return key
