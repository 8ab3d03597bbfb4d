"""What a trace knows of its symbolic dims: ``ShapeFacts``, a part of ``TracingContext``.

Each dynamic dim is a ``Symbol`` with the inclusive range of its bucket (``symbols``;
``ranges`` holds the same bounds by name, and the bounds of the indices of loops being
traced, which ``dims.decide_by_bounds`` reads). A comparison of dims the ranges cannot
decide is answered with this call's sizes and recorded as a shape guard
(``shape_guards``): ``decide``; a dim that must be one size is specialized: ``specialize``.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> t = trace(lambda x: x * 2 if x.shape[0] > 6 else x, np.ones(6), dynamic=True)
>>> t.graph.symbols
(Symbol(name='s0', low=5, high=8),)
>>> [(str(guard.lhs), guard.op, guard.rhs, guard.expected) for guard in t.graph.shape_guards]
[('s0', '>', 6, False)]
"""

from __future__ import annotations

from .dims import DimExpr, SymInt, wrap
from .ir import ShapeGuard, Symbol
from .locations import user_location


class ShapeFacts:
    """The symbolic-shape half of a ``TracingContext``: its ``symbols``, ``ranges`` and
    ``shape_guards`` (fields the context sets up), and ``input_tracers``, whose shapes
    bind the symbols."""

    def new_symbol(self, value, low, high):
        name = f"s{len(self.symbols)}"
        self.symbols[name] = Symbol(name, low, high)
        self.ranges[name] = (low, high)
        return SymInt(DimExpr.symbol(name), value, self)

    def symbol_values(self):
        bindings = {}
        for tracer in self.input_tracers:
            for dim in tracer.shape:
                if isinstance(dim, SymInt) and len(dim.expr.terms) == 1:
                    (monomial, _), = dim.expr.terms
                    if len(monomial) == 1 and isinstance(monomial[0], str):
                        bindings[monomial[0]] = dim.value
        # The indices of loops whose iterations are being traced (tracejit.tracer.loop_index), at
        # the trip being traced: a nested loop's remaining trips run with them bound.
        bindings.update(getattr(self, "loop_indices", None) or {})
        return bindings

    def live_param(self, value):
        """A recorded parameter with its dims live again (for re-running shape rules)."""
        if isinstance(value, DimExpr):
            return wrap(value, value.evaluate(self.symbol_values()), self)
        if isinstance(value, tuple):
            return tuple(self.live_param(item) for item in value)
        return value

    def decide(self, symint, op, other):
        other_value = other.value if isinstance(other, SymInt) else other
        answer = {
            "==": symint.value == other_value,
            "!=": symint.value != other_value,
            "<": symint.value < other_value,
            "<=": symint.value <= other_value,
            ">": symint.value > other_value,
            ">=": symint.value >= other_value,
        }[op]
        rhs = other.expr if isinstance(other, SymInt) else other
        # The same fact asked again (also as its negation, == vs !=) is guarded once.
        negation = {"==": "!=", "!=": "=="}.get(op)
        if not any((guard.lhs, guard.rhs) == (symint.expr, rhs) and (
            guard.op == op or guard.op == negation
        ) for guard in self.shape_guards):
            self.shape_guards.append(
                ShapeGuard(symint.expr, op, rhs, bool(answer), user_location(skip=3))
            )
        return answer

    def specialize(self, symint, reason):
        self.shape_guards.append(
            ShapeGuard(symint.expr, "==", symint.value, True, user_location(skip=3), reason)
        )
        return symint.value


def unique_guards(guards):
    seen, result = set(), []
    for guard in guards:
        key = (guard.lhs, guard.op, guard.rhs, guard.expected)
        if key not in seen:
            seen.add(key)
            result.append(guard)
    return result
