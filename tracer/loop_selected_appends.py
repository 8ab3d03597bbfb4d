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
``.mean()``: ``losses.append(loss.item())``), into ``__tracejit__.append_when(costs, i,
lambda i: <test>, cost)``:

* run as Python runs it, it is the ``if`` (eagerly, in an unrolled trip, and in a loop's
  iteration 0, which notes the append here: ``taken``);
* in a captured loop's traced trips, it appends the value at every trip
  (``tracejit.tracer.loop_containers``' selected list): the loop's buffer gets a row per
  trip, and after the loop the list holds the rows of the trips whose test holds, found
  by running the test on the trip indices (plain ints: the trip count of a loop whose
  bounds are Python ints). The compiled call computes every trip's value (``cost`` is
  computed at every trip in NumPy too); its list is a slice of the buffer.

Not rewritten (as written, so the loop unrolls as before): an ``else``, more than the one
append under the test, a test that calls something or reads a name the body assigns, a
value that calls anything else (``costs.append(compute_cost(A, Y))``). Refused at capture
(the loop unrolls): a loop whose bounds are dims (the trips the test selects would pin the
trip count), a body that reads the list, a buffer of all trips over ``BUFFER_LIMIT`` bytes
(eager keeps only the selected entries).

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
from dataclasses import dataclass

import numpy as np

# The buffer holds every trip's entry where eager keeps the selected ones: past this many
# bytes the loop is not captured this way (it unrolls).
BUFFER_LIMIT = 1 << 26

HOOK = "__tracejit__"

# What a test may be made of: arithmetic and comparisons of names and constants (no call,
# no subscript: running it again on other indices must have no effect and read nothing
# else).
_TEST_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
               ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


# What the appended value may be made of: computed at every trip, whatever the test says.
_VALUE_NODES = _TEST_NODES + (ast.Attribute, ast.Call)
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
    body = []
    for position, statement in enumerate(node.body):
        parts = _selected_append(statement, index, stored)
        if parts is None or not is_local(parts[0]) or not _bound(
                parts[2], assigned_before(node.body[:position]), stored):
            body.append(statement)
            continue
        container, test, value = parts
        check = ast.Lambda(
            args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=index)], vararg=None,
                               kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
            body=test)
        call = ast.Call(
            func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr="append_when",
                               ctx=ast.Load()),
            args=[ast.Name(id=container, ctx=ast.Load()), ast.Name(id=index, ctx=ast.Load()),
                  check, value],
            keywords=[])
        rewritten = ast.Expr(value=call)
        ast.copy_location(rewritten, statement)
        body.append(ast.fix_missing_locations(rewritten))
    node.body = body


def _bound(value, assigned, stored):
    """Whether every name ``value`` reads is bound when the ``if`` runs: assigned before
    it in the body, or not assigned in the loop (a name from before it)."""
    return all(inner.id in assigned or inner.id not in stored for inner in ast.walk(value)
               if isinstance(inner, ast.Name))


def _plain_value(node):
    """Whether computing ``node`` at a trip whose test fails is harmless: names,
    constants, attributes, arithmetic, and the conversions a recorded cost goes through
    (``cost``, ``float(cost)``, ``loss.item()``, ``float((err ** 2).mean())``)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            function = inner.func
            if inner.keywords or not (
                    isinstance(function, ast.Name) and function.id in _CONVERSIONS
                    or isinstance(function, ast.Attribute) and function.attr in _METHODS):
                return False
        elif not isinstance(inner, _VALUE_NODES):
            return False
    return True


def _selected_append(statement, index, stored):
    """``(list name, test, value)`` of ``if <test>: <list>.append(<value>)``, or None."""
    if not (isinstance(statement, ast.If) and not statement.orelse
            and len(statement.body) == 1 and isinstance(statement.body[0], ast.Expr)):
        return None
    call = statement.body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "append" and isinstance(call.func.value, ast.Name)
            and len(call.args) == 1 and _plain_value(call.args[0]) and not call.keywords):
        return None
    container, value = call.func.value.id, call.args[0]
    if container in stored or container == index:
        return None
    for inner in ast.walk(statement.test):
        if not isinstance(inner, _TEST_NODES):
            return None
        if isinstance(inner, ast.Name) and inner.id != index and inner.id in stored:
            return None
    return container, statement.test, value


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


def append_when(context, container, index, test, value):
    """``if test(index): container.append(value)`` as the loop runs it (the module's
    docstring). ``container`` is a real list, or a captured loop's list in a traced trip."""
    select = getattr(container, "append_selected", None)
    if select is not None and select(value):
        return
    outcome = test(index)
    if context is not None and type(container) is list and type(index) is int and type(
            outcome) in (bool, np.bool_):
        notes = context.__dict__.setdefault("selected_appends", {})
        note = notes.get(id(container))
        if note is not None and note.container is container:
            note.calls += 1
        else:
            notes[id(container)] = Taken(container, test, value, bool(outcome))
    if outcome:
        container.append(value)


def selection(test, first, count, step):
    """The trips (0 to ``count - 1``) whose index passes ``test``, as a slice when they are
    evenly spaced (``i % k == c``), else a list."""
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
