"""A loop's trip count from a number argument: ``for i in range(num_iterations)``.

Training loops take their length as a Python int (``fit(X, Y, num_iterations=2000)``), and
users call them with 1000, 2000, 2500 steps. With ``dynamic="auto"`` such an argument is
a run-time input once it is seen with a second value, but a trip count is a number Python
needs as an int, so it was pinned (``tracejit.tracer.pinned_scalars``): one compile per
value, and past ``max_variants`` eager calls.

A top-level ``range`` bound that is such an argument, or it plus or minus an int constant
(``range(1, epochs + 1)``, ``range(n - 1)``, ``range(start, n)``), becomes a dim here
instead, as ``range(x.shape[0])`` is one: a symbol over ``[TRIP_LOW, TRIP_HIGH]`` (one program for
every count in it), bound at each call from the argument's value. Symbols are bound from
input shapes (the entry guard and the program wrapper read them there), so the trace takes
one more input, a *count carrier*: an empty ``int8`` array of shape ``(count, 0)`` that the
entry guard makes from the argument (``runtime/guards.py``, input source ``("count",
leaf, symbol)``). Nothing reads its data.

The count stays a dim only where the loop is captured with it: a loop that unrolls (a body
the capture refuses) pins the argument as before, and the function is traced again with it
constant (``ScalarDecidesShape``). A call with fewer than 3 trips (``range(n - 1)`` at
``n = 3``) traces with the count constant in that trace only; the dim's program serves
such counts at later calls. Any other form of bound (``n // 2``, ``2 * n``) pins.

>>> import numpy as np
>>> from tracejit import jit
>>> def descend(x, steps):
...     w = np.zeros(3)
...     for i in range(steps):
...         w = w - 0.1 * (w - x)
...     return w
>>> f = jit(descend)
>>> all(np.allclose(f(np.ones(3), n), descend(np.ones(3), n)) for n in (40, 50, 60, 70))
True
>>> f.stats()["compiles"]   # the first call's exact count, then one for every count
2
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import (
    count_attributes,
    pinned_scalars,  # (which imports count_attributes, which imports this)
)
from .ir import Eqn, Literal, Var
from .traced_array import Tracer

# The counts one program serves: the loop capture needs three trips in the call it traces,
# and a call with fewer runs a trace of its own (pinned, as before).
TRIP_LOW, TRIP_HIGH = 3, 2 ** 31 - 1
# The constants a bound may add to a count argument (range(1, n + 1)): the bound stays in
# 64 bits for every count.
_OFFSET = 2 ** 31


@dataclass
class TripCounts:
    """What one trace keeps of its count arguments (``TracingContext.trip_counts``)."""

    # the leaf of a count argument -> its dim (one per argument and trace: ``_count_dim``)
    dims: dict = field(default_factory=dict)
    # the count carriers' input positions -> (leaf, symbol): ``Trace.count_inputs``, which
    # the entry guard makes them from
    inputs: dict = field(default_factory=dict)
    # the input of a 0-d integer array argument -> its leaf (``note_count_array``)
    arrays: dict = field(default_factory=dict)
    # the loops over a count running now, where -> the counts' leaves (``run_counted``):
    # ``before_unrolling`` pins them, ``loop_selected_appends`` reads their dims
    running: dict = field(default_factory=dict)
    # the input of a count attribute (``self.n_iter``) -> its path's text
    # (``tracejit.tracer.count_attributes``: its leaf is ``("attribute", input name)``)
    attributes: dict = field(default_factory=dict)


def counted_bounds(context, range_function, range_args):
    """``(range_args with the count argument a dim, its leaf)`` when a bound of a
    top-level ``range`` loop is an int argument traced as a run-time input; else None."""
    if context is None or range_function is not range or getattr(
            context, "loop_indices", None) or getattr(context, "in_loop_body", 0) or getattr(
            context, "unroll_loops", False):
        return None
    number_leaves = {**getattr(context, "number_leaves", {}), **context.trip_counts.arrays,
                     **count_attributes.leaves(context)}
    args, leaves, pinnable = list(range_args), [], False
    for position, bound in enumerate(args):
        if not isinstance(bound, Tracer):
            continue
        name, offset = _offset_leaf(context, bound, number_leaves)
        if name is None:
            continue
        leaf = number_leaves[name]
        value = bound.value
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value[()]  # a 0-d array count: np.array(300)
        if bound.shape != () or not isinstance(value, (int, np.integer)) or isinstance(
                value, (bool, np.bool_)) or position == 2:
            return None  # a step, not an int: pinned as before
        value = int(value) - offset  # the argument's own value (range(1, epochs + 1))
        if not TRIP_LOW <= int(value) <= TRIP_HIGH:
            count_attributes.pin(context, (leaf,))  # range(self.n_iter - 5): a setting
            if name in getattr(context, "pinnable_scalars", {}):
                # fit(X, Y, 1) between fit(X, Y, 1000) and fit(X, Y, 2000): constant in this
                # trace only, so the next count is a dim again (a constant for good, the
                # pin gave one compile per count after it)
                raise pinned_scalars.ScalarDecidesShape((leaf,), small_count=True)
            return None
        args[position] = _count_dim(context, bound, leaf, int(value)) + offset
        leaves.append(leaf)
        pinnable = pinnable or name in getattr(context, "pinnable_scalars", {}) or (
            count_attributes.is_attribute(leaf))
    if leaves and pinnable and len(range(*(_concrete(bound) for bound in range_args))) < (
            TRIP_LOW):
        count_attributes.pin(context, leaves)
        # range(n - 1) at n = 3, range(5, n) at n = 6: too few trips to capture the loop in
        # this trace, so a constant of it only, as a count under TRIP_LOW is (pinned for
        # good, every later count compiled its own program)
        raise pinned_scalars.ScalarDecidesShape(tuple(sorted(set(leaves))), small_count=True)
    return (tuple(args), tuple(leaves)) if leaves else None


def _concrete(bound):
    """The value of a ``range`` bound in this call."""
    return int(bound.value) if isinstance(bound, Tracer) else int(getattr(
        bound, "value", bound))


def _offset_leaf(context, bound, number_leaves):
    """``(name of a number argument's input, c)`` when ``bound`` is that argument or that
    argument plus or minus an int constant ``c`` (``range(1, epochs + 1)``, ``range(n - 1)``:
    one operation on it, recorded in this trace); else ``(None, 0)`` (any other form keeps
    pinning the count)."""
    name = bound.ir_var.name
    if name in number_leaves:
        return name, 0
    for eqn in reversed(context.body):  # the bound was made just before the loop
        if not isinstance(eqn, Eqn) or eqn.out.name != name:  # a guard, a print
            continue
        if eqn.prim.name not in ("add", "subtract") or len(eqn.inputs) != 2:
            return None, 0
        (left, right), sign = eqn.inputs, 1 if eqn.prim.name == "add" else -1
        if eqn.prim.name == "add" and isinstance(left, Literal):
            left, right = right, left  # 1 + epochs
        if not (isinstance(left, Var) and left.name in number_leaves and isinstance(
                right, Literal) and type(right.value) is int and abs(right.value) < _OFFSET):
            return None, 0  # c - n, n + m, n * 2, n + 1.5: pinned as before
        return left.name, sign * right.value
    return None, 0


def note_count_array(context, var, leaf):
    """``var`` is the input of a 0-d integer array argument (``fit(X, Y, np.array(300))``,
    a count read from a config array): a ``range`` bound over it is a count as an int
    argument's is, bound at each call by ``int()`` of the argument (the entry guard reads
    any leaf so), where its ``__index__`` guarded the value (a side exit for every other
    count). An array is never pinned: a loop over it that unrolls guards the dim's value
    as a shape."""
    context.trip_counts.arrays[var.name] = leaf


def _pinnable(context, leaves):
    """The leaves among ``leaves`` the runtime can pin (number arguments, not arrays).
    Count attributes among them are made settings here (``count_attributes.pin``)."""
    count_attributes.pin(context, leaves)
    pinnable = set(getattr(context, "pinnable_scalars", {}).values())
    return tuple(sorted({leaf for leaf in leaves if leaf in pinnable}))


def trace_inputs(context):
    """``Trace.count_inputs``: the count carriers' input positions -> (leaf, symbol), a count
    attribute's leaf given as ``("implicit", its number among the implicit inputs)``."""
    numbers = {key: number for number, key in enumerate(context.implicit_used)}
    return {index: ((("implicit", numbers[count_attributes.implicit_key(context, leaf[1])])
                     if count_attributes.is_attribute(leaf) else leaf), symbol)
            for index, (leaf, symbol) in context.trip_counts.inputs.items()}


def is_trip_count(value):
    """Whether a number argument is a count one program serves (``[TRIP_LOW,
    TRIP_HIGH]``)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and (
        TRIP_LOW <= int(value) <= TRIP_HIGH)


def _count_dim(context, bound, leaf, value):
    """The dim of the count argument at ``leaf`` (one per argument and trace)."""
    counts = context.trip_counts
    if leaf not in counts.dims:
        dim = context.new_symbol(value, TRIP_LOW, TRIP_HIGH)
        context.add_input(np.empty((value, 0), np.int8), (dim, 0))
        counts.inputs[len(context.inputs) - 1] = (leaf, dim.expr.symbols().pop())
        counts.dims[leaf] = dim
    return counts.dims[leaf]


def run_counted(context, leaves, where, run):
    """``run()`` (the loop at ``where``, with its count a dim). Where the loop is not
    captured, the count arguments are pinned and the function traced again
    (``before_unrolling``), before a trip runs unrolled."""
    if not getattr(context, "pinnable_scalars", None) and not context.trip_counts.attributes:
        return run()  # another path of a variant (runtime SameEntry): nothing to pin
    counted = context.trip_counts.running
    counted[where] = leaves
    captured = len(getattr(context, "captured_loops", ()))
    try:
        finals = run()
    finally:
        counted.pop(where, None)
    if where not in getattr(context, "captured_loops", ())[captured:] and (
            pinned := _pinnable(context, leaves)):
        raise pinned_scalars.ScalarDecidesShape(pinned)  # unrolled without a note
    return finals


def before_unrolling(context, where):
    """``tracejit.tracer.loops`` is about to unroll the loop at ``where``: a loop whose
    count is an argument's dim pins that argument instead."""
    leaves = _pinnable(context, context.trip_counts.running.get(where) or ())
    if leaves:
        raise pinned_scalars.ScalarDecidesShape(leaves)
