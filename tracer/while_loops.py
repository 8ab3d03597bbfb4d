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
``tf.while_loop``) the front end (``rewrite_while``) splits the body at its one top-level
``if <test>: break`` into functions ``pre(t, *carried)``, ``test(t, *carried)`` and
``post(t, *carried)`` (a ``while <cond>:`` has an empty ``pre`` and the test ``not
cond``) and calls the ``while_loop`` hook, which runs (``run_while``) the loop as a
``for t in range(bound)`` over one more carried value, ``done``, whose trip is::

    at_break = pre(t, carried)
    stop = test(t, at_break)
    after = post(t, at_break)
    carried' = where(done, carried, where(stop, at_break, after))
    done' = done | stop

Once ``done`` is set a trip changes nothing, so ``tracejit.tracer.loops`` captures it as
any loop (trips 0 and 1 traced, carries keep shape and dtype, else refused) and the loop
equation's ``exit`` param names ``done``: the reference (``ops.control.run_body``) and
the native driver (``codegen/native_loop.py``) stop after the trip that sets it, so a
compiled call runs the trips NumPy runs, and one program serves every trip count. The
decision reads the values eager computes up to rounding: the ``where`` on ``stop`` is a
jump of the body, so ``tracejit.tracer.loop_bounds`` carries the rounding bounds of what
it reads and puts a margin guard on it (a decision that rounding could flip side-exits the
call and eager decides, NaN included), as for an ``if`` on traced values in a loop.

A name the body updates in place (an argument's ``buf[0] += 1``, a view's ``row += x``)
gets the chosen value written into that array (``_into``), so the caller, the base and
other names see NumPy's values. A carried value that is no array when the loop starts
(``err = np.inf``) runs trip 0 as written (its decision a guard) and the rest is captured
when the carries are arrays by then. Where a carry's kind changes in trip 0 (``count +
1`` of a 0-d array is a NumPy scalar), trip 0's exit is a guard: eager's result type
depends on it.

A test joined by ``and``/``or``, negated by ``not`` or chained (``while err > tol and
it < max_iter:``) is one traced bool: ``tracejit.tracer.exit_tests`` rewrites its boolean
structure into a fourth function, ``logic(Logic, t, *carried)``, used where the trip is
traced (the loop run as written takes the test as written).

Bounds: ``for ... in range(n)`` runs at most ``n`` trips; ``while`` loops at most
``WHILE_BOUND`` (no Python loop of model code runs 2**31 trips). The compiled trip that
sets ``done`` still runs ``post`` (its result is dropped): a guard in ``post`` failing
there side-exits the call (correct, eager runs it).

Python ints the loop carries (a counter ``it += 1``, the ``for`` index read after the
loop) are weak int64 scalars of the loop (``tracejit.tracer.exit_ints``).

Not captured, run as written (a guard per trip's decision, as before): loops under
gradient tracing, a carried value that is not an array after the first trip (a Python
``int`` moved otherwise than by ``+= 1``-like steps, a list appended to), carries that
change shape or dtype, ``return``/``continue``/a second ``break`` in the body, a test that
reads no traced value, and a ``for`` over anything but ``range(n)``/``range(a, b)``.

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
from .conversions import python_number
from .dims import SymInt, value_of
from .exit_tests import LOGIC, Logic, combined
from .ir import Guard
from .loop_frontend import HOOK, loop_variables, unsupported_statements
from .loop_generalize import Refused

log = logging.getLogger("tracejit.loops")

WHILE_BOUND = (1 << 31) - 1
_NOT_AN_ARRAY = "a carried value"
DONE = "__tracejit_done"  # the name of the carried exit flag
_LOGIC = Logic()


# --- front end ------------------------------------------------------------------------------
def _is_break_if(statement):
    return (isinstance(statement, ast.If) and not statement.orelse
            and len(statement.body) == 1 and isinstance(statement.body[0], ast.Break))


def split_body(loop):
    """``(pre, test, post, negate)`` for a loop of a supported shape, else None: ``pre`` and
    ``post`` statements around the test, ``negate`` when the loop ends where ``test`` is
    false (``while cond:``)."""
    if isinstance(loop, ast.While):
        constant_true = isinstance(loop.test, ast.Constant) and loop.test.value is True
        if not constant_true:
            if any(isinstance(node, ast.Break) for statement in loop.body
                   for node in _walk_own(statement)):
                return None
            pieces = ([], loop.test, list(loop.body), True)
        else:
            pieces = _split_at_break(loop.body)
            if pieces is None or loop.orelse:
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
        pieces = _split_at_break(loop.body)
        if pieces is None:
            return None
    else:
        return None
    pre, test, post, _ = pieces
    for statement in (*pre, *post):
        if unsupported_statements(ast.Module(body=[statement], type_ignores=[])) is not None:
            return None
    if any(isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.Lambda))
           for node in ast.walk(test)):
        return None
    return pieces


def _split_at_break(body):
    breaks = [number for number, statement in enumerate(body) if _is_break_if(statement)]
    if len(breaks) != 1:
        return None
    at = breaks[0]
    return list(body[:at]), body[at].test, list(body[at + 1:]), False


def _walk_own(node):
    """``ast.walk`` of ``node`` without nested loops and definitions (their breaks are
    theirs)."""
    pending = [node]
    while pending:
        item = pending.pop()
        yield item
        pending.extend(child for child in ast.iter_child_nodes(item)
                       if not isinstance(child, (ast.For, ast.While, ast.FunctionDef,
                                                 ast.AsyncFunctionDef, ast.Lambda,
                                                 ast.ClassDef)))


def mark_while_loops(function_node):
    """Mark (``tracejit_while``) the loops of ``function_node`` whose shape ``rewrite_while``
    handles, before any rewrite: a loop around them may still be captured
    (``loop_frontend.unsupported_statements`` looks past them)."""
    for node in ast.walk(function_node):
        if isinstance(node, (ast.For, ast.While)) and split_body(node) is not None:
            if isinstance(node, ast.For) and _index_read_elsewhere(node, function_node):
                node.tracejit_index_after = True  # carried as a copy (exit_ints)
            node.tracejit_while = True


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
    pre, test, post, negate = split_body(node)
    test_line = test.lineno  # the decisions' guards, when the loop runs as written
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
        pre, test_module, post = (rewriter.generic_visit(ast.Module(body=part, type_ignores=[]))
                                  .body for part in (pre, [ast.Expr(test)], post))
        test = test_module[0].value
        iterator = rewriter.visit(node.iter) if isinstance(node, ast.For) else None
        orelse = [rewriter.visit(statement) for statement in node.orelse]
    finally:
        rewriter.loop_targets = targets
    if index_after:
        pre = [exit_ints.index_copy(index, trip), *pre]
    # The carried names, from the rewritten body (out[k] = v is out = set_item(out, ...)
    # there): AutoGraph's rule, assigned in the body and live after it (the else clause
    # included) or read before assigned in a trip
    loop = _as_for(node, trip, pre, test, post)
    loop.tracejit_twin = original  # the loop as written reads nothing after itself
    loop.tracejit_live_after = else_reads
    names = [name for name in loop_variables(loop, function_node) if name != trip]
    # names pre assigns that the test or post read: handed on within a trip
    handed = sorted((_names_stored(pre) & (_names_read([test]) | _names_read(post)))
                    - set(names) - {trip})
    ints = exit_ints.counters(node.body, names) + (
        [index] if index_after and index in names else [])
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

    definitions = [function("pre", pre, name_tuple(within), names),
                   function("test", [], test, within),
                   function("post", post, name_tuple(names), within)]
    joined = combined(copy.deepcopy(test))
    if joined is not None:  # and/or/not: the test as one traced bool (exit_tests)
        logic = function("logic", [], joined, within)
        logic.args.args.insert(0, ast.arg(arg=LOGIC))
        definitions.append(ast.fix_missing_locations(logic))
    if iterator is not None:  # __tracejit__.call(<range>, *args) after the rewrite
        range_function, range_args = iterator.args[0], iterator.args[1:]
    else:
        range_function, range_args = ast.Constant(None), []
    kind = "while" if negate else ("for" if isinstance(node, ast.For) else "true")
    broke = f"__tracejit_broke_{line}"
    call = ast.Call(
        func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr="while_loop",
                           ctx=ast.Load()),
        args=[range_function, ast.Tuple(elts=list(range_args), ctx=ast.Load()),
              ast.Tuple(elts=[ast.Name(id=definition.name, ctx=ast.Load())
                              for definition in definitions], ctx=ast.Load()),
              ast.Tuple(elts=[ast.Constant(name) for name in names], ctx=ast.Load()),
              ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]),
              ast.Constant(line), ast.Constant(kind),
              ast.Tuple(elts=[ast.Constant(name) for name in handed], ctx=ast.Load())],
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


def _as_for(node, index, pre, test, post):
    """The loop as a ``for`` over its trips whose body reads the test where it stands: what
    ``loop_variables`` takes."""
    loop = ast.For(target=ast.Name(id=index, ctx=ast.Store()),
                   iter=ast.Constant(None),
                   body=[*pre, ast.Expr(test), *post], orelse=[])
    return ast.copy_location(loop, node)


# --- trace time -----------------------------------------------------------------------------
class _Stop(Exception):  # noqa: N818 (control flow inside run_while, never escapes it)
    def __init__(self, values, broke):
        super().__init__()
        self.values, self.broke = values, broke


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
    carried values, then whether it ended by its ``break``."""
    trips = range_function(*range_args) if kind == "for" else itertools.count()
    *values, broke = _as_written_trips(kind, trips, functions, values)
    return (*values, bool(broke))


def _as_written_trips(kind, trips, functions, values):
    """``trips`` run as Python runs them: the carried values, then whether the loop ended
    by its ``break`` (None: not ended)."""
    pre, test, post = functions[:3]
    for t in trips:
        within = pre(t, *values)
        stop = test(t, *within)
        if (not stop) if kind == "while" else stop:
            return (*within[:len(values)], kind != "while")
        values = tuple(post(t, *within))
    return (*values, None)


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
    reason = _refusal(context, kind, range_function, range_args, [
        value for position, value in enumerate(values)
        if not (position in int_positions and exit_ints.enters(value))])
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
        *values, broke = _as_written_trips(kind, trip_zero, functions, values)
        if broke is not None:
            return (*values, broke)
        return run_while(context, range_function, rest, functions, names,
                         dict(zip(names, values)), location, kind, peeled=True, ints=ints)
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
    except _Stop as stopped:
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
                return _first_trip(context, t, carried, functions, kind, count, int_positions)
            if depth == entry_depth:  # capture refused: the rest runs as written
                return _written_trip(t, carried, done, functions, kind, count)
            return _traced_trip(context, t, carried, done, functions, kind, count,
                                int_positions)
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


def _stop_of(functions, t, within, kind):
    """Whether the trip ends the loop, with an ``and``/``or``/``not`` in the test joined
    into one traced bool (``exit_tests``)."""
    stop = functions[3](_LOGIC, t, *within) if len(functions) > 3 else functions[1](t, *within)
    return np.logical_not(stop) if kind == "while" else stop


def _first_trip(context, t, carried, functions, kind, count, int_positions):
    """Trip 0 (``done`` is False): recorded unrolled, with no guard on the exit when the
    values at the break and at the end of the trip have the same types."""
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here
    pre, _, post = functions[:3]
    within = tuple(pre(t, *carried))
    at_break = _ints_traced(context, [_kept(context, value) for value in within[:count]],
                            int_positions)
    stop = _stop_of(functions, t, within, kind)
    if not isinstance(stop, Tracer) or bool(stop.value):
        # a decision on no traced value, or a loop that ends at once: as Python decides
        # (the trip after a break is not run even once); the trials refuse the former
        if bool(stop):
            raise _Stop(tuple(within[:count]), kind != "while")
        return (*post(t, *within), _false(context))
    after = _ints_traced(context, post(t, *within), int_positions)
    if not all(_same_type(a, b, kind=True) for a, b in zip(at_break, after)):
        if bool(stop):  # a guard: values of other types at the break
            raise _Stop(tuple(at_break), kind != "while")
        return (*(_traced(context, value) for value in after), _false(context))
    return (*(_into(context, entered, left, np.where(stop, a, b))
              for entered, left, a, b in zip(carried, after, at_break, after)), stop)


def _traced_trip(context, t, carried, done, functions, kind, count, int_positions):
    """A trip traced for capture: the body as a function of the carried values."""
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here
    pre, _, post = functions[:3]
    if not all(isinstance(value, Tracer) for value in (*carried, done)):
        raise Refused("a carried value is not an array (a Python number or a container)")
    before = [_kept(context, value) for value in carried]
    within = tuple(pre(t, *carried))
    at_break = _ints_traced(context, [_kept(context, value) for value in within[:count]],
                            int_positions)
    mark = len(context.body)
    stop = _stop_of(functions, t, within, kind)
    if any(isinstance(item, Guard) for item in context.body[mark:]):
        # an ``if`` in a function the test calls, or an ``and`` whose right operand raised
        # where the left one was false (exit_tests): a guard in the body that fails at the
        # exit of every call; as written, a trip count compiles
        raise Refused("the exit test decides with a guard (an and/or, an if in it)")
    if not isinstance(stop, Tracer) or stop.shape != () or stop.dtype != np.bool_:
        raise Refused("the body has break on a test that is no traced bool scalar")
    if _unchecked_by_discontinuities(context, stop):
        # The decision as an if's: a guard that always holds on a predicate as uncertain
        # as ``stop``, so guard_margins gives it the margin guard ``if stop:`` would have
        # (a test rounding could flip sends the call to NumPy)
        bool(np.logical_or(stop, np.logical_not(stop)))
    after = _ints_traced(context, post(t, *within), int_positions)
    for name_values in zip(before, at_break, after):
        if not all(_same_type(name_values[0], value) for value in name_values[1:]):
            raise Refused("a carried value changes shape or dtype in the loop")
    new = [_into(context, entered, left, np.where(done, old, np.where(stop, a, b)))
           for entered, left, old, a, b in zip(carried, after, before, at_break, after)]
    return (*new, np.logical_or(done, stop))


# What tracejit.tracer.discontinuities leaves unchecked (its docstring): a decision read
# off these is checked as an ``if``'s instead.
_UNCHECKED = {"conv2d", "conv2d_weight_grad", "loop", "prod"}


def _unchecked_by_discontinuities(context, stop):
    """Whether the trip's ``where`` on ``stop`` may go unchecked by the discontinuity
    checks (which check the jumps of the body on the values it carries: ``loop_bounds``):
    ``stop`` reads a float32 matmul, a convolution, a float product or a nested loop.
    Elsewhere those checks decide the exit as NumPy does (the argmin of k-means, checked,
    is then exact: a guard's margin on it would always fail)."""
    producers = {item.out.name: item for item in context.body
                 if hasattr(item, "prim") and hasattr(item, "out")}
    pending, seen = [stop.ir_var], set()
    while pending:
        atom = pending.pop()
        eqn = producers.get(getattr(atom, "name", None))
        if eqn is None or eqn.out.name in seen:
            continue
        seen.add(eqn.out.name)
        name = eqn.prim.name
        if name in _UNCHECKED or name == "matmul" and eqn.out.aval.dtype == np.float32:
            return True
        pending.extend(eqn.inputs)
    return False


def _written_trip(t, carried, done, functions, kind, count):
    """A trip after a refused capture, as Python runs it (guards on the decisions)."""
    pre, test, post = functions[:3]
    if bool(done):
        raise _Stop(tuple(carried), kind != "while")
    within = tuple(pre(t, *carried))
    stop = test(t, *within)
    if (not stop) if kind == "while" else stop:
        raise _Stop(tuple(within[:count]), kind != "while")
    return (*post(t, *within), np.asarray(False))


def _ints_traced(context, values, int_positions):
    """The trip's ``values`` with the carried Python ints (``it + 1``, the index copy: an
    int or the loop's ``SymInt``) as traced weak ints, which the loop carries."""
    return tuple(exit_ints.as_traced(context, value) if position in int_positions else value
                 for position, value in enumerate(values))


def _into(context, entered, left, value):
    """The trip's chosen ``value`` for a name that entered as ``entered`` and that the body
    left as ``left``: written into ``left`` when the body updated the entering array in
    place (an argument's ``buf[0] += 1``, a view's ``row += x``, a NumPy array it turned
    into a traced copy): the caller's array, the base and other names see it, as NumPy's
    in-place writes show there; else ``value`` itself."""
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here

    in_place = isinstance(left, Tracer) and (left is entered or isinstance(
        entered, np.ndarray) and context.replaced.get(id(entered)) is left)
    if not in_place:
        if isinstance(left, Tracer) and left.aval.weak:
            # a run-time Python number (a counter, the index read after the loop): np.where
            # gives an array, eager has the number
            return python_number(value, None)
        if isinstance(getattr(left, "value", left), np.generic) and not np.ndim(left):
            return _as_scalar(context, value)
        return value
    left[...] = value
    return left


def _as_scalar(context, value):
    """The 0-d ``value`` as the NumPy scalar eager has where ``np.where`` gives a 0-d
    array: the same var (``value[()]`` would record a reshape, which the trips that the
    capture compares may not all record alike)."""
    from .traced_array import Tracer, _numpy_scalar  # cycle: as in _into

    if not isinstance(value, Tracer):
        return value[()]
    scalar = context.tracer_for(value.ir_var)
    scalar.value = _numpy_scalar(value)
    return scalar


def _kept(context, value):
    """``value`` as it is now, safe from in-place writes the rest of the trip makes."""
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here
    if isinstance(value, Tracer):
        return context.tracer_for(value.ir_var)
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _traced(context, value):
    """A NumPy array or scalar the trip left (``trips + 1`` of a NumPy 0-d array) as a
    traced constant of its kind: the loop carries arrays of the trace."""
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf":
        atom, _, _ = context.atom(np.array(value))
        traced = context.tracer_for(atom)
        return traced[()] if isinstance(value, np.generic) else traced
    return value


def _false(context):
    """``done`` after a trip that did not end the loop: a traced constant, as the carry of
    a loop must be an array of the trace."""
    atom, _, _ = context.atom(np.asarray(False))
    return context.tracer_for(atom)


def _same_type(a, b, kind=False):
    """Arrays (traced or not) of one shape and dtype; with ``kind``, also both NumPy
    scalars or neither (``trips + 1`` of a 0-d array is a scalar: from the first trip on
    the kinds are the body's own)."""
    return all(hasattr(x, "dtype") and hasattr(x, "shape") for x in (a, b)) and (
        tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype) and (
        not kind or isinstance(getattr(a, "value", a), np.generic)
        == isinstance(getattr(b, "value", b), np.generic))
