"""Loops whose exit is data-dependent compile as loops: a ``loop`` node with an ``exit``.

Model code stops iterating when a traced value says so (Newton's method, power
iteration, a per-row binary search for t-SNE's beta, k-means until assignments stop
changing, gradient descent until the loss stops moving)::

    while np.abs(hi - lo).max() > tol:          # the test over carried values
        ...
    for it in range(max_iter):                  # bounded; the index is available
        ...pre...
        if np.abs(new - old).max() < tol:
            break
        ...post...
    while True:
        ...pre...
        if cond:
            break
        ...post...

Traced trip by trip, each decision would be a guard: a trace would serve one trip count
only and compile the loop unrolled. Instead (peer: ``jax.lax.while_loop``, TF AutoGraph's
``tf.while_loop``) the front end (``rewrite_while``) splits the body at its top-level
exits, ``if <test>: [name = ...;] break`` and ``... continue`` (a ``while <cond>:``
starts with the exit ``until cond``), into segment, test and exit-statement functions of
``(t, *carried)`` and calls the ``while_loop`` hook, which runs (``run_while``) the loop
as a ``for t in range(bound)`` over one more carried value, ``done``; with one break a
trip is::

    at_break = pre(t, carried)
    stop = test(t, at_break)
    after = post(t, at_break)
    carried' = where(done, carried, where(stop, at_break, after))
    done' = done | stop

and ``tracejit.tracer.exit_trips`` generalizes it to any sequence of exits (the lanes a
``continue`` ends keep its values; the breaks set ``done``). Once ``done`` is set a trip
changes nothing, so ``tracejit.tracer.loops`` captures it as any loop (trips 1 and 2
traced, carries keep shape and dtype, else refused) and the loop equation's ``exit``
param names ``done``: the reference (``ops.control.run_body``) and the native driver
(``codegen/native_loop.py``) stop after the trip that sets it, so a compiled call runs
the trips NumPy runs, and one program serves every trip count. The decisions read the
values eager computes up to rounding: each ``where`` is a jump of the body, so
``tracejit.tracer.loop_bounds`` carries the rounding bounds of what they read and puts a
margin guard on them (a decision that rounding could flip side-exits the call and eager
decides, NaN included), as for an ``if`` on traced values in a loop.

A name the body updates in place (an argument's ``buf[0] += 1``, a view's ``row += x``)
gets the chosen value written into that array (``_into``), so the caller, the base and
other names see NumPy's values. A carried value that is no array when the loop starts
(``err = np.inf``) runs trip 0 as written (its decision a guard) and the rest is captured
when the carries are arrays by then. Where a carry's kind changes in trip 0 (``count +
1`` of a 0-d array is a NumPy scalar), trip 0's exits are guards: eager's result type
depends on them.

A test joined by ``and``/``or``, negated by ``not`` or chained (``while err > tol and
it < max_iter:``) is one traced bool: ``tracejit.tracer.exit_tests`` rewrites its boolean
structure into a ``logic`` function, used where the trip is traced (the loop run as
written takes the test as written). Python ints the loop carries (a counter ``it += 1``,
the ``for`` index read after the loop) are weak int64 scalars of the loop
(``tracejit.tracer.exit_ints``).

Bounds: ``for ... in range(n)`` runs at most ``n`` trips; ``while`` loops at most
``WHILE_BOUND`` (no Python loop of model code runs 2**31 trips). The compiled trip that
exits still runs the rest of the body (its results are dropped): a guard there failing
side-exits the call (correct, eager runs it).

Not captured, run as written (a guard per trip's decision, as before): loops under
gradient tracing, a carried value that is not an array after the first trip (a Python
``int`` moved otherwise than by ``+= 1``-like steps, a list appended to), carries that
change shape or dtype, an exit whose statements write into arrays, a ``break`` or
``continue`` nested in another statement, a ``return`` in the body other than one
top-level ``if <test>: return ...`` (``exit_returns``), a ``while <cond>:``
with a ``break`` and an ``else:``, a test that reads no traced value, and a ``for`` over
anything but ``range(n)``/``range(a, b)``.

>>> import ast
>>> tree = ast.parse("def f(x):\\n    while x.sum() > 1:\\n        x = x / 2\\n    return x")
>>> loop = tree.body[0].body[0]
>>> split_body(loop) is not None
True
"""

from __future__ import annotations

import ast
import copy
import itertools
import logging

import numpy as np

from . import exit_ints
from .dims import SymInt, value_of
from .exit_returns import FLAG as RETURNED
from .exit_returns import expand_returns
from .exit_tests import LOGIC, combined
from .exit_trips import Stop, trip, written_after_refusal, written_trips
from .hook_calls import hook_call
from .loop_attributes import hoist_attributes
from .loop_frontend import loop_variables, unsupported_statements

log = logging.getLogger("tracejit.loops")

WHILE_BOUND = (1 << 31) - 1
_NOT_AN_ARRAY = "a carried value"
DONE = "__tracejit_done"  # the name of the carried exit flag


# --- front end ------------------------------------------------------------------------------
def _exit_kind(statement):
    """``"break"`` or ``"continue"`` for a top-level ``if <test>: ...; break`` (or
    ``continue``) whose statements before the exit only assign names (``x = x / 4``: what
    they leave is the exit's values; a write into an array would reach the trip's other
    path, which runs too when traced)."""
    if not (isinstance(statement, ast.If) and not statement.orelse
            and isinstance(statement.body[-1], (ast.Break, ast.Continue))):
        return None
    for assignment in statement.body[:-1]:
        if not (isinstance(assignment, ast.Assign) and all(
                isinstance(target, ast.Name) or isinstance(target, ast.Tuple) and all(
                    isinstance(item, ast.Name) for item in target.elts)
                for target in assignment.targets)):
            return None
    return "break" if isinstance(statement.body[-1], ast.Break) else "continue"


def split_body(loop):
    """``(segments, tests)`` for a loop of a supported shape, else None: the body's
    statements between its exits, and the exits as ``(kind, test, payload)`` with ``kind``
    one of ``"break"``, ``"continue"`` (a top-level ``if <test>: break``/``continue``) and
    ``"until"`` (a ``while <test>:``, which ends where ``test`` is false), and ``payload``
    the statements an exit runs before it leaves (``x = x / 4; continue``)."""
    if isinstance(loop, ast.While):
        segments, tests = _split_at_exits(loop.body)
        constant_true = isinstance(loop.test, ast.Constant) and loop.test.value is True
        breaks = any(kind == "break" for kind, _, _ in tests)
        if not constant_true:
            if breaks and loop.orelse:
                return None  # the else runs where the test ends it: a flag more; rare
            segments, tests = [[], *segments], [("until", loop.test, []), *tests]
        elif loop.orelse or not breaks:
            return None  # a while True: else clause never runs; rare, left as written
    elif isinstance(loop, ast.For):
        if not isinstance(loop.target, ast.Name):
            return None
        iterator = loop.iter
        if not (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Name)
                and iterator.func.id == "range" and not iterator.keywords
                and 1 <= len(iterator.args) <= 2
                and not any(isinstance(arg, ast.Starred) for arg in iterator.args)):
            return None
        segments, tests = _split_at_exits(loop.body)
        if not tests:
            return None
    else:
        return None
    payloads = [payload for _, _, payload in tests]
    for statement in (statement for part in (*segments, *payloads) for statement in part):
        if unsupported_statements(ast.Module(body=[statement], type_ignores=[])) is not None:
            return None  # a break or continue elsewhere, a return, ...
    if any(isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.Lambda))
           for _, test, _ in tests for node in ast.walk(test)):
        return None
    return segments, tests


def _split_at_exits(body):
    segments, tests, current = [], [], []
    for statement in body:
        kind = _exit_kind(statement)
        if kind is None:
            current.append(statement)
        else:
            segments.append(current)
            tests.append((kind, statement.test, statement.body[:-1]))
            current = []
    return [*segments, current], tests


def mark_while_loops(function_node):
    """Mark (``tracejit_while``) the loops of ``function_node`` whose shape ``rewrite_while``
    handles, before any rewrite: a loop around them may still be captured
    (``loop_frontend.unsupported_statements`` looks past them). A loop that returns from
    its body becomes one that breaks first (``exit_returns``)."""
    expand_returns(function_node)
    for node in ast.walk(function_node):
        if isinstance(node, (ast.For, ast.While)) and (
                split_body(node) is not None or _splits_when_hoisted(node)):
            if isinstance(node, ast.For) and _index_read_elsewhere(node, function_node):
                node.tracejit_index_after = True  # carried as a copy (exit_ints)
            node.tracejit_while = True
            inside = {id(inner) for inner in ast.walk(node)}
            node.tracejit_read_outside = {
                inner.id for inner in ast.walk(function_node)
                if isinstance(inner, ast.Name) and id(inner) not in inside}


def _splits_when_hoisted(loop):
    """Whether ``loop`` has a shape ``rewrite_while`` handles once the attributes its body
    rebinds are locals (``while True: self.theta += step; if ...: break``: the front end
    hoists them, ``loop_attributes``)."""
    trial = copy.deepcopy(loop)
    names = (f"__tracejit_hoisted_{number}" for number in itertools.count())
    return hoist_attributes(trial, names.__next__) is not None and split_body(
        trial) is not None


def _index_read_elsewhere(loop, function_node):
    """Python leaves the index at its last value after the loop: read outside it, the loop
    is left as written."""
    name = loop.target.id
    inside = {id(inner) for inner in ast.walk(loop)}
    for other in ast.walk(function_node):
        if other is not loop and (isinstance(other, ast.For) and isinstance(
                other.target, ast.Name) and other.target.id == name):
            inside |= {id(inner) for inner in ast.walk(other)}
    return any(isinstance(node, ast.Name) and node.id == name and id(node) not in inside
               for node in ast.walk(function_node))


def _names_read(nodes):
    return {node.id for statement in nodes for node in ast.walk(statement)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _names_stored(nodes):
    return {node.id for statement in nodes for node in ast.walk(statement)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def rewrite_while(rewriter, node):
    """``node`` (marked by ``mark_while_loops``) rewritten into the ``while_loop`` hook call;
    the statements. ``rewriter`` is the front end's, which rewrites the body first."""
    segments, exits = split_body(node)
    test_line = exits[0][1].lineno  # the decisions' guards, when the loop runs as written
    index = node.target.id if isinstance(node, ast.For) else "__tracejit_t"
    # the trip number the body functions take: the index itself, or its source when the
    # index is read after the loop (each trip copies it into the carried index)
    index_after = getattr(node, "tracejit_index_after", False)
    trip = "__tracejit_t" if index_after else index
    function_node = rewriter.function_node
    original = ast.Module(body=[*node.body, ast.Expr(node.test) if isinstance(
        node, ast.While) else ast.Expr(node.iter)], type_ignores=[])
    else_reads = _names_read(node.orelse)
    targets = getattr(rewriter, "loop_targets", ())
    if isinstance(node, ast.For):
        rewriter.loop_targets = (*targets, index)
    try:
        segments = [rewriter.generic_visit(ast.Module(body=part, type_ignores=[])).body
                    for part in segments]
        tests = [rewriter.generic_visit(ast.Module(body=[ast.Expr(test)], type_ignores=[]))
                 .body[0].value for _, test, _ in exits]
        payloads = [rewriter.generic_visit(ast.Module(body=payload, type_ignores=[])).body
                    for _, _, payload in exits]
        iterator = rewriter.visit(node.iter) if isinstance(node, ast.For) else None
        orelse = [rewriter.visit(statement) for statement in node.orelse]
    finally:
        rewriter.loop_targets = targets
    if index_after:
        segments[0] = [exit_ints.index_copy(index, trip), *segments[0]]
    # The carried names, from the rewritten body (out[k] = v is out = set_item(out, ...)
    # there): AutoGraph's rule, assigned in the body and live after it (the else clause
    # included) or read before assigned in a trip
    loop = _as_for(node, trip, segments, tests, payloads)
    loop.tracejit_twin = original  # the loop as written reads nothing after itself
    # (and the locals holding attributes the body rebinds: written back after the loop)
    loop.tracejit_live_after = else_reads | getattr(node, "tracejit_live_after", set())
    names = [name for name in loop_variables(loop, function_node) if name != trip]
    # names a segment assigns that a later test or segment reads: handed on within a trip
    handed = set()
    for k, segment in enumerate(segments):
        handed |= _names_stored(segment) & (_names_read([ast.Expr(test) for test in tests[k:]])
                                            | _names_read(_flat(segments[k + 1:])))
    handed = sorted(handed - set(names) - {trip})
    ints = exit_ints.counters(node.body, names) + (
        [index] if index_after and index in names else []) + [
        name for name in names if name.startswith(RETURNED)]  # exit_returns' flag
    line = node.lineno
    within = names + handed

    def function(kind, body, returned, taken):
        definition = ast.FunctionDef(
            name=f"__tracejit_w{kind}_{line}",
            args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=trip)]
                               + [ast.arg(arg=name) for name in taken],
                               vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                               defaults=[]),
            body=[*_flat(body), ast.Return(value=returned)], decorator_list=[], returns=None)
        return ast.fix_missing_locations(ast.copy_location(definition, node))

    def name_tuple(chosen):
        return ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Load()) for name in chosen],
                         ctx=ast.Load())

    definitions = [function(f"segment{k}", segment, name_tuple(within), within)
                   for k, segment in enumerate(segments)]
    test_entries = []
    for k, ((kind, _, _), test, payload) in enumerate(zip(exits, tests, payloads)):
        definitions.append(function(f"test{k}", [], test, within))
        entry = [ast.Constant(kind), ast.Name(id=definitions[-1].name, ctx=ast.Load()),
                 ast.Constant(None), ast.Constant(None)]
        if payload:  # the exit's own statements
            definitions.append(function(f"payload{k}", payload, name_tuple(within), within))
            entry[3] = ast.Name(id=definitions[-1].name, ctx=ast.Load())
        joined = combined(copy.deepcopy(test))
        if joined is not None:  # and/or/not: the test as one traced bool (exit_tests)
            logic = function(f"logic{k}", [], joined, within)
            logic.args.args.insert(0, ast.arg(arg=LOGIC))
            definitions.append(ast.fix_missing_locations(logic))
            entry[2] = ast.Name(id=logic.name, ctx=ast.Load())
        test_entries.append(ast.Tuple(elts=entry, ctx=ast.Load()))
    # carried names nothing outside the loop reads: their kind (a NumPy scalar or a 0-d
    # array) may differ between a trip's paths (lr = lr * 0.5 before a continue)
    outside = getattr(node, "tracejit_read_outside", None)
    loose = [position for position, name in enumerate(names)
             if outside is not None and name not in outside]
    functions = ast.Tuple(elts=[
        ast.Tuple(elts=[ast.Name(id=definition.name, ctx=ast.Load())
                        for definition in definitions[:len(segments)]], ctx=ast.Load()),
        ast.Tuple(elts=test_entries, ctx=ast.Load()),
        ast.Tuple(elts=[ast.Constant(position) for position in loose], ctx=ast.Load())],
        ctx=ast.Load())
    if iterator is not None:  # __tracejit__.call(<range>, *args) after the rewrite
        range_function, range_args = iterator.args[0], iterator.args[1:]
    else:
        range_function, range_args = ast.Constant(None), []
    if isinstance(node, ast.For):
        kind = "for"
    else:
        kind = "true" if exits[0][0] != "until" else "while"
    broke = f"__tracejit_broke_{line}"
    call = hook_call(
        "while_loop", range_function, ast.Tuple(elts=list(range_args), ctx=ast.Load()),
        functions, ast.Tuple(elts=[ast.Constant(name) for name in names], ctx=ast.Load()),
        ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]),
        ast.Constant(line), ast.Constant(kind),
        ast.Tuple(elts=[ast.Constant(name) for name in handed], ctx=ast.Load()),
        keywords=[ast.keyword(arg="ints", value=ast.Tuple(
            elts=[ast.Constant(name) for name in ints], ctx=ast.Load()))] if ints else [])
    target = ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Store()) for name in (*names, broke)],
                       ctx=ast.Store())
    result = [*definitions, ast.Assign(targets=[target], value=call)]
    if node.orelse:
        result.append(ast.If(test=ast.UnaryOp(op=ast.Not(),
                                              operand=ast.Name(id=broke, ctx=ast.Load())),
                             body=_flat(orelse), orelse=[]))
    result = [ast.fix_missing_locations(ast.copy_location(statement, node))
              for statement in result]
    _at_line(result[len(definitions)], test_line)
    return result


def _at_line(statement, line):
    """``statement`` placed on ``line`` whole: a guard recorded while the hook call runs
    names the test's line (``while err > tol:``, ``if err < tol:``), as Python's loop's
    own guards did."""
    for inner in ast.walk(statement):
        if "lineno" in inner._attributes:
            inner.lineno = inner.end_lineno = line
            inner.col_offset, inner.end_col_offset = 0, 0
    return statement


def _flat(statements):
    flat = []
    for statement in statements:
        flat.extend(statement if isinstance(statement, list) else [statement])
    return flat


def _as_for(node, index, segments, tests, payloads):
    """The loop as a ``for`` over its trips whose body reads the tests where they stand
    (and runs an exit's statements under it): what ``loop_variables`` takes."""
    body = list(_flat(segments[0]))
    for test, payload, segment in zip(tests, payloads, segments[1:]):
        body += [ast.If(test=test, body=_flat(payload) or [ast.Pass()], orelse=[]),
                 *_flat(segment)]
    loop = ast.For(target=ast.Name(id=index, ctx=ast.Store()), iter=ast.Constant(None),
                   body=body, orelse=[])
    return ast.copy_location(loop, node)


# --- trace time -----------------------------------------------------------------------------
def exit_position(body, carries):
    """The slot of a while loop's ``done`` among the loop's carried values (for
    ``tracejit.tracer.loops``), None for other loops."""
    if getattr(body, "tracejit_exit", None) is None:
        return None
    position = 0
    for carry in carries:
        if getattr(carry, "name", None) == DONE:
            return position
        position += carry.slot_count
    return None


def as_written(kind, range_function, range_args, functions, values):
    """The loop run as Python runs it (a guard per trip's decision when tracing): the
    carried values, then whether it ended by a ``break``."""
    trips = range_function(*range_args) if kind == "for" else itertools.count()
    *values, broke = written_trips(trips, functions, values)
    return (*values, bool(broke))


def run_while(context, range_function, range_args, functions, names, frame_locals,
              location, kind, peeled=False, ints=()):
    """Run (and, when it can, capture) a loop with a data-dependent exit; the carried
    names' values and whether it ended by its ``break``. ``peeled``: trip 0 ran as
    written already (``range_args`` are then the rest's). ``ints``: the carried names
    that may be Python ints (``exit_ints``: counters, the index read after the loop)."""
    from .loops import UNDEFINED

    values = tuple(frame_locals.get(name, UNDEFINED) for name in names)
    where = f"{location[0]}:{location[1]}"
    int_positions = {position for position, name in enumerate(names) if name in ints}
    if kind == "for" and context is not None and any(
            values[position] is UNDEFINED for position in int_positions):
        # the index read after the loop, unbound before it: every trip assigns it, and a
        # loop that runs no trip (a shape guard where stop is a dim) runs as written
        start, stop = _bounds(range_args) if len(range_args) in (1, 2) else (0, 0)
        if isinstance(start, (int, SymInt)) and isinstance(stop, (int, SymInt)) and (
                stop > start):
            values = tuple(start if value is UNDEFINED and position in int_positions
                           else value for position, value in enumerate(values))
    arrays = [value for position, value in enumerate(values)
              if not (position in int_positions and exit_ints.enters(value))]
    reason = _refusal(context, kind, range_function, range_args, arrays)
    if reason is None and _shares_numpy_memory(names, frame_locals):
        reason = "a carried NumPy array shares memory with another name"
    if reason is not None and reason.startswith(_NOT_AN_ARRAY) and not peeled:
        # err = np.inf, new = ... first assigned in the body: trip 0 as written (its
        # decision a guard), then the rest captured if the carries are arrays by then
        if kind == "for":
            start, stop = _bounds(range_args)
            if not stop > start:  # a shape guard where stop is a dim
                return (*values, False)
            trip_zero, rest = range(start, start + 1), (start + 1, stop)
        else:
            trip_zero, rest = range(1), ()
        *values, broke = written_trips(trip_zero, functions, values)
        if broke is not None:
            return (*values, broke)
        return run_while(context, range_function, rest, functions, names,
                         {**frame_locals, **dict(zip(names, values))}, location, kind,
                         peeled=True, ints=ints)
    if reason is not None:
        if reason:
            _note(context, where, reason)
        return as_written(kind, range_function, range_args, functions, values)
    if kind == "for":
        start, stop = _bounds(range_args)
    else:
        start, stop = 0, WHILE_BOUND
    values = tuple(exit_ints.as_traced(context, value) if position in int_positions
                   else value for position, value in enumerate(values))
    try:
        return _captured(context, functions, names, values, start, stop, kind, location,
                         int_positions)
    except Stop as stopped:
        return (*stopped.values, stopped.broke)


def _refusal(context, kind, range_function, range_args, values):
    """Why the loop runs as written ("" when silently), or None."""
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here
    if context is None or getattr(context, "unroll_loops", False):
        return ""
    if getattr(context, "records_gradients", False):
        return "a data-dependent exit in a trace that records gradients"
    if kind == "for":
        if range_function is not range or len(range_args) not in (1, 2):
            return ""
        start, stop = _bounds(range_args)
        if any(isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, SymInt))
               for bound in (start, stop)):
            return "a bound is a traced value or not an int"
        if len(range(value_of(start), value_of(stop))) < 3:
            return ""
        if isinstance(start, SymInt):
            return "a dynamic start"
    for value in values:
        if not (isinstance(value, Tracer) or isinstance(value, np.ndarray) and (
                value.dtype.kind in "biuf")):
            return f"{_NOT_AN_ARRAY} is a {type(value).__name__} when the loop starts"
    return None


def _shares_numpy_memory(names, frame_locals):
    """Whether a carried name holds NumPy's own array (not traced: base = np.ones(3)) that
    shares memory with another local (tail = base[1:]): a captured loop carries it as a
    traced value from its second trip, whose writes never reached the other name, as
    NumPy's do (``base /= 3`` returned trip 0's values in ``tail``)."""
    arrays = [(name, value) for name, value in frame_locals.items()
              if type(value) is np.ndarray]
    return any(np.may_share_memory(value, other) for name, value in arrays if name in names
               for other_name, other in arrays if other_name != name)


def _bounds(range_args):
    """``(start, stop)`` of ``range(stop)`` or ``range(start, stop)``."""
    return (0, range_args[0]) if len(range_args) == 1 else tuple(range_args)


def _note(context, where, reason):
    from .loops import note_unrolled

    note_unrolled(context, where, f"{reason} (a data-dependent exit)")


def _captured(context, functions, names, values, start, stop, kind, location, int_positions):
    from .loops import STATIC_UNROLL_LIMIT, run_loop

    entry_depth = getattr(context, "loop_depth", 0)
    # A loop with an exit is worth capturing at any trip count (its trips vary per call):
    # loops.py unrolls short constant ranges unless they sit in STATIC_UNROLL_LIMIT
    # unrolled trips.
    outer = getattr(context, "unrolled_trips", 1)
    first = [True]
    count = len(names)

    def body(t, *state):
        *carried, done = state
        depth = getattr(context, "loop_depth", 0)
        inside = context.unrolled_trips
        context.unrolled_trips = outer  # loops in the body see the trips around this one
        try:
            if first[0] and depth == entry_depth:
                first[0] = False
                return trip(context, t, carried, done, functions, count, int_positions,
                            first=True)
            if depth == entry_depth:  # capture refused: the rest runs as written
                return written_after_refusal(t, carried, done, functions, count,
                                             kind != "while")
            return trip(context, t, carried, done, functions, count, int_positions,
                        first=False)
        finally:
            context.unrolled_trips = inside

    body.tracejit_exit = DONE
    entering = {**dict(zip(names, values)), DONE: np.asarray(False)}
    context.unrolled_trips = max(outer, STATIC_UNROLL_LIMIT)
    try:
        results = run_loop(context, range, (start, stop), body, (*names, DONE), entering,
                           location)
    finally:
        context.unrolled_trips = outer
    *finals, done = results
    broke = False if kind == "while" else (True if kind == "true" else done)
    return (*finals, broke)
