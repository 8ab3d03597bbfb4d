"""Appends under a test of the loop index: ``if i % 100 == 0: costs.append(cost)``.

Course training loops record the cost every k steps, at the last step, or when a flag
says so::

    for i in range(num_iterations):
        ...
        cost = compute_cost(A2, Y)
        if i % 100 == 0:                       # or i == num_iterations - 1, print_cost
            costs.append(cost)

Traced as written, the test on the index is a decision that goes one way at trip 0 and
another at trips 1 and 2: the loop cannot be captured, and unrolls (seconds for a few
hundred trips). The front end (``rewrite_selected_appends``) turns such a statement, when
the test reads only the index and names the loop leaves alone, and the value is harmless
to compute at every trip (names bound by then, arithmetic, ``float(...)``, ``.item()``,
``.mean()``, elements at constant positions: ``losses.append(loss.item())``,
``history.append(w[0])``), into ``__tracejit__.append_when(costs, i,
lambda i: <test>, cost)``:

* run as Python runs it, it is the ``if`` (eagerly, in an unrolled trip, and in a loop's
  iteration 0, which notes the append here: ``taken``);
* in a captured loop's traced trips, it appends the value at every trip
  (``tracejit.tracer.loop_containers``' selected list): the loop's buffer gets a row per
  trip, and after the loop the list holds the rows of the trips whose test holds, found
  by running the test on the trip indices (plain ints: the trip count of a loop whose
  bounds are Python ints). The compiled call computes every trip's value (``cost`` is
  computed at every trip in NumPy too); its list is a slice of the buffer;
* in a loop whose trip count is a dim (``range(X.shape[1])``, or ``range(num_iterations)``
  once that argument is one: ``tracejit.tracer.loop_trip_counts``), a test whose outcome
  repeats every ``P`` indices (``index_period``: ``i % 100 == 0``, ``print_cost and (i + 1)
  % 10 == 0``) selecting one trip in each ``P`` is the rows ``c, c + P, ...`` of the buffer
  for every count (the slice ``[0::P]``, or an index array past trip 0: a slice from ``c``
  would guard the count against ``c``), and the list's length a dim.

Course 1 prints beside the append (``if i % 100 == 0: costs.append(cost); if print_cost:
print(...)``): ``if <flag>:`` statements after the append, whose flag reads neither the
index nor a name the loop assigns, become ``if <flag> and <test>: ...`` after the hook, so
a false flag decides nothing on the index (a true one does: that loop unrolls).

Not rewritten (as written, so the loop unrolls as before): an ``else``, other statements
beside the append, a test that calls something or reads a name the body assigns, a
value that calls anything else (``costs.append(compute_cost(A, Y))``). Refused at capture
(the loop unrolls): a loop whose bounds are dims with a test that is not periodic (``i ==
n - 1``: the trips it selects would pin the trip count), a body that reads the list, a
buffer of all trips over ``BUFFER_LIMIT`` bytes (eager keeps only the selected entries).

>>> import numpy as np
>>> from tracejit import jit
>>> def descend(x, steps):
...     w, costs = np.zeros(3), []
...     for i in range(steps):
...         w = w - 0.1 * (w - x)
...         cost = float(np.sum((w - x) ** 2))
...         if i % 10 == 0:
...             costs.append(cost)
...     return w, costs
>>> got, want = jit(descend)(np.ones(3), 45), descend(np.ones(3), 45)
>>> len(got[1]), np.allclose(got[1], want[1])
(5, True)
"""

from __future__ import annotations

import ast
import copy
import math
from dataclasses import dataclass

import numpy as np

from . import ops
from .dims import expr_of
from .hook_calls import hook_call
from .loop_effects import is_append_or_print

# The buffer holds every trip's entry where eager keeps the selected ones: past this many
# bytes the loop is not captured this way (it unrolls).
BUFFER_LIMIT = 1 << 26
# The largest period a test may have when the loop's count is a dim: the selection runs
# the test on one period's indices when the trace runs (i % print_every, print_every=10**9)
PERIOD_LIMIT = 1 << 16


# What a test may be made of: arithmetic and comparisons of names and constants (no call,
# no subscript: running it again on other indices must have no effect and read nothing
# else).
_TEST_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
               ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


# What the appended value may be made of: computed at every trip, whatever the test says.
_VALUE_NODES = _TEST_NODES + (ast.Attribute, ast.Call, ast.Subscript)
_CONVERSIONS = ("float", "int")
_METHODS = ("item", "mean", "sum", "copy", "squeeze")


# --- front end ---------------------------------------------------------------------------
def rewrite_selected_appends(node, assigned_before, is_local):
    """The top-level statements of the loop ``node`` (an ``ast.For`` over ``range``) with
    each ``if <test of the index>: name.append(value)`` turned into an ``append_when`` hook
    call. ``assigned_before(statements)`` gives the names a straight-line run of
    ``statements`` assigns (``loop_frontend._walk_straight_line``); ``is_local(name)`` says
    whether the function made the list (an argument's or a global's list changes state
    outside the call: the rewriter refuses that append, named, as it is written)."""
    index = node.target.id
    stored = {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name)
              and isinstance(inner.ctx, (ast.Store, ast.Del))}
    node.body = [part for statement in node.body
                 for part in _one_effect_each(statement, index, stored)]
    body = []
    for position, statement in enumerate(node.body):
        flagged = _flags_only(statement, index, stored)
        if flagged is not None:  # if i % 50 == 0: (if verbose: print(...)) (if callback...)
            body.extend(_flag_first(inner, statement.test) for inner in flagged)
            continue
        parts = _selected_append(statement, index, stored)
        if parts is None or not is_local(parts[0]) or not _bound(
                parts[2], assigned_before(node.body[:position]), stored):
            body.append(statement)
            continue
        container, test, value, flagged = parts
        call = selected_call("append_when", [ast.Name(id=container, ctx=ast.Load())], index,
                             test, value)
        rewritten = ast.Expr(value=call)
        ast.copy_location(rewritten, statement)
        body.append(ast.fix_missing_locations(rewritten))
        body.extend(_flag_first(inner, test) for inner in flagged)
    node.body = body


def selected_call(hook, leading, index, test, value, trailing=()):
    """``__tracejit__.<hook>(*leading, <index>, lambda <index>: <test>, <value>,
    *trailing, period=..., last=..., periodic=...)``: the test's period (``index_period``)
    or its ``<periodic> or i == <bound>`` parts (``last_trip_test``) as keywords."""
    check = ast.Lambda(
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=index)], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=test)
    period, last = index_period(test, index), None
    if period is None:
        last = last_trip_test(test, index)
        period = None if last is None else last[1]
    keywords = [] if last is None else [
        ast.keyword(arg="last", value=last[2]),
        ast.keyword(arg="periodic", value=ast.Lambda(args=copy.deepcopy(check.args),
                                                    body=last[0]))]
    call = hook_call(
        hook, *leading, ast.Name(id=index, ctx=ast.Load()), check, value, *trailing,
        keywords=[] if period is None else [ast.keyword(arg="period", value=(
            ast.Constant(period) if isinstance(period, int) else ast.Tuple(
                elts=[ast.Name(id=k.id, ctx=ast.Load()) if isinstance(k, ast.Name) else k
                      for k in period], ctx=ast.Load())))] + keywords)
    return call


def _flag_first(inner, test):
    """``if <flag> and <test>:`` for ``inner``, ``if <flag>:`` under ``if <test>:``: the
    flag first, so a false one decides nothing on the index (a true one does: the loop
    unrolls, as it did)."""
    both = ast.BoolOp(op=ast.And(), values=[inner.test, copy.deepcopy(test)])
    guarded = ast.If(test=ast.copy_location(both, inner.test), body=inner.body, orelse=[])
    return ast.fix_missing_locations(ast.copy_location(guarded, inner))


def _one_effect_each(statement, index, stored):
    """``if <test of the index>:`` holding only appends and prints (course 1's ``if i % 100
    == 0: print(...); costs.append(cost)``) as one such ``if`` for each, which the appends'
    and the prints' rewrites take one by one; ``[statement]`` otherwise. The test is
    evaluated once per statement instead of once: it reads only the index, constants and
    names the loop leaves alone, and calls nothing, so it gives the same answer each time
    (an append changes no name)."""
    if not (isinstance(statement, ast.If) and not statement.orelse
            and len(statement.body) > 1 and all(is_append_or_print(inner)
                                                for inner in statement.body)):
        return [statement]
    if not _is_test(statement.test, index, stored) or not any(
            isinstance(inner, ast.Name) and inner.id == index
            for inner in ast.walk(statement.test)):
        return [statement]
    return [ast.copy_location(ast.If(test=copy.deepcopy(statement.test), body=[inner],
                                     orelse=[]), statement) for inner in statement.body]


def _flags_only(statement, index, stored):
    """The ``if <flag>:`` statements of ``if <test of the index>:`` when they are all its
    body (SkalskiP's ``if i % 50 == 0:`` holding ``if verbose: print(...)`` and ``if
    callback is not None: callback(i, params)``), else None. The test is evaluated once
    per flag instead of once: it reads only the index, constants and names the loop
    leaves alone, and calls nothing."""
    if not (isinstance(statement, ast.If) and not statement.orelse and statement.body):
        return None
    if not all(isinstance(inner, ast.If) and not inner.orelse and _is_flag(
            inner.test, index, stored) for inner in statement.body):
        return None
    if not _is_test(statement.test, index, stored) or not any(
            isinstance(inner, ast.Name) and inner.id == index
            for inner in ast.walk(statement.test)):
        return None
    return statement.body


def index_period(test, index):
    """``P`` when the outcome of ``test`` (an expression of the loop index ``index``) repeats
    every ``P`` indices, whatever the names it reads: every read of the index sits in
    ``<expr> % K`` with ``K`` a positive int constant and ``<expr>`` the index, int
    constants, ``+``, ``-`` and ``*`` (so ``<expr>`` moves by a multiple of ``K`` when the
    index does); ``P`` is the lcm of the ``K``. None otherwise (``i == n - 1``, ``i < 500``).
    Where a ``K`` is a name (``i % print_every == 0``), the moduli's nodes, constants and
    names, for ``append_when`` to take the lcm of their values when the loop runs.

    >>> index_period(ast.parse("print_cost and (i + 1) % 100 == 0", mode="eval").body, "i")
    100
    >>> index_period(ast.parse("i % 10 == 0 or i == n - 1", mode="eval").body, "i") is None
    True
    >>> [ast.unparse(k) for k in index_period(ast.parse("i % every == 0", mode="eval").body, "i")]
    ['every']
    """
    moduli = []

    def polynomial(node):
        if isinstance(node, ast.Name):
            return node.id == index
        if isinstance(node, ast.Constant):
            return type(node.value) is int
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, (ast.USub, ast.UAdd)) and polynomial(node.operand)
        return isinstance(node, ast.BinOp) and isinstance(node.op, (
            ast.Add, ast.Sub, ast.Mult)) and polynomial(node.left) and polynomial(node.right)

    def periodic(node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(
                node.right, ast.Constant) and type(node.right.value) is int and (
                node.right.value > 0) and polynomial(node.left):
            moduli.append(node.right.value)
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(
                node.right, ast.Name) and node.right.id != index and polynomial(node.left):
            moduli.append(node.right)  # its value when the loop runs (run_period)
            return True
        if isinstance(node, ast.Name):
            return node.id != index
        return all(periodic(child) for child in ast.iter_child_nodes(node))

    if not periodic(test):
        return None
    if any(isinstance(modulus, ast.Name) for modulus in moduli):
        return [ast.Constant(modulus) if isinstance(modulus, int) else modulus
                for modulus in moduli]
    return math.lcm(*moduli) if moduli else 1


def last_trip_test(test, index):
    """``(periodic part, P, bound)`` of ``<periodic> or i == <bound>`` (course code's ``if i %
    100 == 0 or i == num_iterations - 1``, either order), ``P`` as ``index_period`` gives it
    and the bound free of the index: the trips it selects are the periodic ones
    and the trip whose index is the bound (the last one, ``selector`` checks); else None.

    >>> part, period, bound = last_trip_test(
    ...     ast.parse("i % 100 == 0 or i == n - 1", mode="eval").body, "i")
    >>> ast.unparse(part), period, ast.unparse(bound)
    ('i % 100 == 0', 100, 'n - 1')
    """
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and len(
            test.values) == 2):
        return None
    for periodic, compare in (test.values, test.values[::-1]):
        if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(
                compare.ops[0], ast.Eq)):
            continue
        left, right = compare.left, compare.comparators[0]
        if isinstance(right, ast.Name) and right.id == index:
            left, right = right, left
        if not (isinstance(left, ast.Name) and left.id == index) or any(
                isinstance(inner, ast.Name) and inner.id == index for inner in ast.walk(right)):
            continue
        period = index_period(periodic, index)
        if period is not None:
            return copy.deepcopy(periodic), period, copy.deepcopy(right)
    return None


def run_period(moduli):
    """The period of a test whose moduli (``index_period``) are these values as the loop
    runs: their lcm when each is a positive int (an argument the trace holds constant), up
    to ``PERIOD_LIMIT`` (the selection tries one index per period); else None (a run-time
    number: as a test with no period)."""
    if isinstance(moduli, int) or moduli is None:
        return moduli
    if not all(isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) and (
            0 < k <= PERIOD_LIMIT) for k in moduli):
        return None
    period = math.lcm(*map(int, moduli))
    return period if period <= PERIOD_LIMIT else None


def _bound(value, assigned, stored):
    """Whether every name ``value`` reads is bound when the ``if`` runs: assigned before
    it in the body, or not assigned in the loop (a name from before it)."""
    return all(inner.id in assigned or inner.id not in stored for inner in ast.walk(value)
               if isinstance(inner, ast.Name))


def _plain_value(node):
    """Whether computing ``node`` at a trip whose test fails is harmless: names,
    constants, attributes, arithmetic, and the conversions a recorded cost goes through
    (``cost``, ``float(cost)``, ``loss.item()``, ``float((err ** 2).mean())``), and
    elements at constant positions (``w[0]``, ``float(W[0, -1])``)."""
    positions = set()  # the nodes of constant subscript keys (w[0], W[0, -1])
    for inner in ast.walk(node):
        if id(inner) in positions:
            continue
        if isinstance(inner, ast.Subscript):
            if not _constant_position(inner.slice):
                return False
            positions.update(id(part) for part in ast.walk(inner.slice))
        elif isinstance(inner, ast.Call):
            function = inner.func
            if inner.keywords or not (
                    isinstance(function, ast.Name) and function.id in _CONVERSIONS
                    or isinstance(function, ast.Attribute) and function.attr in _METHODS):
                return False
        elif not isinstance(inner, _VALUE_NODES):
            return False
    return True


def _constant_position(key):
    """Whether ``key`` (a subscript's) is an int constant or a tuple of them (``w[0]``,
    ``W[0, -1]``): an element of the array every trip holds at one shape, read at a trip
    whose test fails as harmlessly as the arithmetic around it."""
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    for part in parts:
        if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.USub):
            part = part.operand
        if not (isinstance(part, ast.Constant) and type(part.value) is int):
            return False
    return True


def _selected_append(statement, index, stored):
    """``(list name, test, value, flagged)`` of ``if <test>: <list>.append(<value>)``,
    or None. ``flagged``: ``if <flag>: ...`` statements after the append under the test
    (course 1's ``if print_cost: print(...)``), whose flag reads neither the index nor a
    name the loop assigns."""
    if not (isinstance(statement, ast.If) and not statement.orelse
            and statement.body and isinstance(statement.body[0], ast.Expr)):
        return None
    flagged = statement.body[1:]
    if not all(isinstance(inner, ast.If) and not inner.orelse and _is_flag(
            inner.test, index, stored) for inner in flagged):
        return None
    call = statement.body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "append" and isinstance(call.func.value, ast.Name)
            and len(call.args) == 1 and _plain_value(call.args[0]) and not call.keywords):
        return None
    container, value = call.func.value.id, call.args[0]
    if container in stored or container == index or not _is_test(statement.test, index,
                                                                  stored):
        return None
    return container, statement.test, value, flagged


def _is_test(test, index, stored):
    """Whether ``test`` is made of names and constants, and reads no name the loop
    assigns but the index."""
    return all(isinstance(inner, _TEST_NODES) and not (
        isinstance(inner, ast.Name) and inner.id != index and inner.id in stored)
        for inner in ast.walk(test))


def _is_flag(test, index, stored):
    """Whether ``test`` is made of names and constants (``print_cost``, ``verbose > 1``)
    that neither are the index nor are assigned in the loop: the same at every trip."""
    return all(isinstance(inner, _TEST_NODES) and not (
        isinstance(inner, ast.Name) and (inner.id == index or inner.id in stored))
        for inner in ast.walk(test))


# --- trace time ----------------------------------------------------------------------------
@dataclass
class Taken:
    """What ``append_when`` did to a real list in a loop's iteration 0: the test, the value
    (appended or not) and whether it was appended; ``calls`` counts the calls since the
    loop began (one, for a loop to be captured this way)."""

    container: list
    test: object
    value: object
    appended: bool
    calls: int = 1
    period: int = None  # the test's outcome repeats every ``period`` indices (index_period)
    # ``<periodic> or i == <bound>`` (last_trip_test): the periodic part, and the bound as a
    # dim (None when it is no count argument's: the loop is not captured over a dim count)
    periodic: object = None
    last: object = None


def forget(context, values):
    """Before a loop's iteration 0: no note stands for the lists it carries."""
    notes = getattr(context, "selected_appends", None)
    if notes:
        for value in values:
            notes.pop(id(value), None)


def taken(context, container):
    """The note ``append_when`` made for ``container`` since ``forget``, or None."""
    note = getattr(context, "selected_appends", {}).get(id(container))
    return note if note is not None and note.container is container else None


def append_when(context, container, index, test, value, period=None, last=None,
                periodic=None):
    """``if test(index): container.append(value)`` as the loop runs it (the module's
    docstring). ``container`` is a real list, or a captured loop's list in a traced trip.
    ``last``, ``periodic``: the bound and the periodic part of ``<periodic> or i ==
    <bound>`` (``last_trip_test``)."""
    select = getattr(container, "append_selected", None)
    if select is not None and select(value):
        return
    last_dim = _count_bound(context, last) if periodic is not None else None
    if last_dim is not None and type(index) is int:
        # iteration 0 of a loop over the count's dim: the index against the bound's dim
        # (decided by the count's range there, a shape guard elsewhere)
        outcome = bool(periodic(index)) or bool(last_dim == index)
    else:
        outcome = test(index)
    if context is not None and type(container) is list and type(index) is int and type(
            outcome) in (bool, np.bool_):
        notes = context.__dict__.setdefault("selected_appends", {})
        note = notes.get(id(container))
        if note is not None and note.container is container:
            note.calls += 1
        else:
            notes[id(container)] = Taken(container, test, value, bool(outcome),
                                         period=run_period(period), periodic=periodic,
                                         last=last_dim)
    if outcome:
        container.append(value)


def _count_bound(context, bound):
    """``bound`` (``num_iterations - 1``) as a dim when it is a count argument's dim plus or
    minus a constant in a loop over it (``tracejit.tracer.loop_trip_counts``), else None."""
    from . import loop_trip_counts  # cycle: loop_trip_counts -> traced_array -> ...
    from .traced_array import Tracer

    if context is None or not isinstance(bound, Tracer) or not context.trip_counts.running:
        return None
    name, offset = loop_trip_counts._offset_leaf(context, bound, getattr(
        context, "number_leaves", {}))
    dims = context.trip_counts.dims
    if name is None or context.number_leaves[name] not in dims:
        return None
    return dims[context.number_leaves[name]] + offset


class Selector:
    """The index test of a selected append in a loop, called as the test is; ``phase``,
    for a loop whose trip count is a dim: the one trip in each ``period`` the test selects
    (``"all"``, ``"none"``), the same for every count (``index_period``)."""

    def __init__(self, test, period=None, phase=None, last=False):
        self.test, self.period, self.phase, self.last = test, period, phase, last

    def __call__(self, index):
        return self.test(index)


def selector(note, start, count, step):
    """The ``Selector`` of ``note``'s test in a loop over ``range(start, ..., step)`` of
    ``count`` trips, or None when the trips it selects are not known for every count the
    loop serves: a count that is a dim needs an int start and a test whose outcome repeats
    with a period (``i % 100 == 0``), selecting one trip a period, all or none."""
    if isinstance(start, int) and isinstance(count, int):
        return Selector(note.test)
    if not isinstance(start, int) or not isinstance(step, int) or note.period is None:
        return None
    test = note.test
    # the test repeats every note.period indices, so every period // gcd(period, step) trips
    # (i % 4 == 0 in range(0, n, 2): every second trip)
    period = note.period // math.gcd(note.period, abs(step)) if step else note.period
    if note.periodic is not None and note.last is not None and (
            expr_of(note.last) == expr_of(start + count * step)):
        # i == num_iterations in range(num_iterations) (course 1's costs): never true, the
        # periodic part alone selects
        test = note.periodic
    elif note.periodic is not None:  # <periodic> or i == <bound>: the bound the last index?
        if note.last is None or expr_of(note.last) != expr_of(start + (count - 1) * step):
            return None
        outcomes = [note.periodic(start + trip * step) for trip in range(period)]
        if not all(type(outcome) in (bool, np.bool_) for outcome in outcomes):
            return None
        trips = [trip for trip, outcome in enumerate(outcomes) if outcome]
        if not trips:  # print_cost and i % 100 == 0 or i == n - 1, the flag false
            return Selector(note.test, period, "none", last=True)
        if len(trips) != 1:
            return None
        return Selector(note.test, period, trips[0], last=True)
    outcomes = [test(start + trip * step) for trip in range(period)]
    if not all(type(outcome) in (bool, np.bool_) for outcome in outcomes):
        return None  # a test reading a run-time value (a traced flag)
    trips = [trip for trip, outcome in enumerate(outcomes) if outcome]
    if len(trips) not in (0, 1, period):
        return None
    phase = "none" if not trips else "all" if len(trips) == period else trips[0]
    return Selector(note.test, period, phase)


def selection(test, first, count, step, like=None):
    """The trips (0 to ``count - 1``) whose index passes ``test`` (a ``Selector``), as a
    slice when they are evenly spaced (``i % k == c``), else a list; and their number.
    ``count`` may be a dim when the selector has a ``phase``."""
    if getattr(test, "phase", None) is not None:
        if test.phase == "none" and test.last:  # the last trip alone (a guard count >= 1
            if not count >= 1:                    # where the count's range holds 0)
                return slice(0, 0), 0
            return ops.iota(1, np.int64, like=like) + (count - 1), 1
        if test.phase == "none":
            return slice(0, 0), 0
        if test.phase == "all":
            return slice(0, None), count
        length = (count - test.phase + test.period - 1) // test.period
        if test.last:
            # and the last trip when the periodic rows miss it: one row more unless
            # count - 1 - phase is a multiple of P; the extra row's index, clipped, is
            # count - 1 (a loop with no trip has no last one: a guard, as NumPy appends none)
            if not count >= 1:  # (a guard where the count's range holds 0)
                return slice(0, 0), 0
            extra = ((count - 1 - test.phase) % test.period + test.period - 1) // test.period
            rows = ops.iota(length + extra, np.int64, like=like) * test.period + test.phase
            return np.minimum(rows, count - 1), length + extra
        if test.phase and not isinstance(count, int):
            # rows phase, phase + P, ...: a slice starting at the phase would guard the
            # count against it (a program for counts under it, at it, past it), the rows'
            # indices serve every count
            return ops.iota(length, np.int64, like=like) * test.period + test.phase, length
        return slice(test.phase, None, test.period), length
    trips = [trip for trip in range(count) if test(first + trip * step)]
    if len(trips) >= 2:
        stride = trips[1] - trips[0]
        if trips == list(range(trips[0], trips[-1] + 1, stride)):
            return slice(trips[0], trips[-1] + 1, stride), len(trips)
    if len(trips) == 1:
        return slice(trips[0], trips[0] + 1), 1
    if not trips:
        return slice(0, 0), 0
    return np.asarray(trips, dtype=np.int64), len(trips)
