"""Loop capture: a Python ``for t in range(...)`` becomes one ``loop`` equation.

The front end (``frontend._Rewriter.visit_For``) calls ``loop_variables`` to find the
names a loop carries (AutoGraph-style: assigned in the body and read before assignment
in it or read anywhere outside the loop; buffers written through subscripts are
assigned too, since ``hs[:, t] = h`` is rewritten to ``hs = set_item(hs, ...)``), and
rewrites the loop into ``names = __tracejit__.loop(range, args, body, names, locals())``
with the body as a nested function of ``(t, *carried)``. At trace time ``run_loop``:

1. runs iteration 0 as today (recorded unrolled: carried values then have their
   steady shapes and dtypes, e.g. ``loss = 0.0`` has become an array);
2. traces iterations 1 and 2 on fresh block parameters, with real values and the index
   a ``SymInt`` over a fresh index symbol (``tracejit.tracer.loop_index``: slice starts, pad
   configs and ints computed from ``t`` are ``DimExpr``s of it, ``t // 2`` included;
   comparisons and specializations of the index must go the same way at every trip, else
   the loop is refused), and compares the two recordings equation by equation: they
   must be equal up to variable names. Anything that differs - a different op, an int
   computed in Python, a shape that changes, a value from iteration 1 read in iteration
   2 other than through a carried value - means the loop is unrolled, with the reason
   logged;
3. records one ``loop`` equation per carried result over ``range(t1, stop, step)`` and
   runs iterations 3.. through the body's NumPy reference implementation, so the first
   call's results are real.

Loops are unrolled (today's behaviour) when the bounds are constants, traced
integers, or the first call has fewer than 3 iterations; inside a loop body being
captured (nested loops); and, in traces that record gradients, when the body has
something ``tracejit.tracer.loop_autodiff`` cannot reverse yet (``refusal``: a guard, a print, a
nested loop). Other loops in gradient traces stay captured: their reverse is a loop.
"""

from __future__ import annotations

import ast
import logging
import sys

import numpy as np

from .dims import DimExpr, SymInt, expr_of, is_int, value_of
from .ir import Effect, Eqn, Graph, Guard, Literal, Symbol, Var
from .loop_containers import ContainerCarry, Refusal, snapshot
from .loop_index import IndexRefused, LoopIndex, settle_guards
from .pending import Pending, force, is_pending

log = logging.getLogger("tracejit.loops")

# Constant trip counts below this unroll (range(3) over gates or layers reads better as
# straight-line code); longer constant loops are captured like dynamic ones, so a first
# call with exact shapes (dynamic="auto") never traces hundreds of thousands of steps.
STATIC_UNROLL_LIMIT = 32


class _Undefined:
    def __repr__(self):
        return "<undefined>"


UNDEFINED = _Undefined()


class Refused(Exception):
    """Why a loop is not captured (it runs unrolled)."""


# --- front end: which names a loop carries -----------------------------------------------
class _Names(ast.NodeVisitor):
    def __init__(self):
        self.loaded, self.stored = set(), set()

    def visit_Name(self, node):
        (self.loaded if isinstance(node.ctx, ast.Load) else self.stored).add(node.id)

    def visit_FunctionDef(self, node):
        _nested_body_names(self, node)

    def visit_Call(self, node):
        _nested_hook_reads(self, node)
        self.generic_visit(node)


def _names(nodes):
    visitor = _Names()
    for node in nodes:
        visitor.visit(node)
    return visitor


def _nested_body_names(visitor, node):
    """A nested loop's body function (``def __tracejit_loop_<line>``, already rewritten:
    the front end rewrites inner loops first) is its own scope: the names it assigns are
    its locals, not the enclosing loop's (``window`` assigned in a ``j`` loop nested in an
    ``i`` loop is not carried by the ``i`` loop); the names it reads and does not assign
    are read from the enclosing body."""
    inner = _names(node.body)
    params = {arg.arg for arg in node.args.args}
    visitor.loaded |= inner.loaded - inner.stored - params
    visitor.stored.add(node.name)


def _nested_hook_reads(visitor, node):
    """``__tracejit__.loop(range, args, body, ("out", ...), locals(), line)`` reads the
    names it carries through ``locals()``: they are loads of the enclosing body."""
    func = node.func
    if (isinstance(func, ast.Attribute) and func.attr == "loop"
            and isinstance(func.value, ast.Name) and func.value.id == HOOK
            and len(node.args) >= 4 and isinstance(node.args[3], ast.Tuple)):
        visitor.loaded |= {element.value for element in node.args[3].elts
                           if isinstance(element, ast.Constant)
                           and isinstance(element.value, str)}


def _read_before_write(statements):
    """Names a straight-line walk of ``statements`` reads before it assigns them."""
    return _walk_straight_line(statements, set())[0]


def _walk_straight_line(statements, assigned):
    """``(names read before assigned, names assigned)`` over ``statements``, starting with
    ``assigned``. An ``if`` reads its test, then either branch; what both branches assign
    is assigned after it (the expanded loops of ``loop_sequences``/``loop_while`` are
    ``if``s whose branches each define and call their body function)."""
    assigned, early = set(assigned), set()
    for statement in statements:
        if isinstance(statement, ast.If):
            early |= _names([statement.test]).loaded - assigned
            body_early, body_assigned = _walk_straight_line(statement.body, assigned)
            else_early, else_assigned = _walk_straight_line(statement.orelse, assigned)
            early |= body_early | else_early
            assigned |= body_assigned & else_assigned
            continue
        if isinstance(statement, (ast.For, ast.While)) and not statement.orelse:
            # its head, then its body (which may not run: it assigns nothing after it)
            head = [statement.test] if isinstance(statement, ast.While) else [statement.iter]
            early |= _names(head).loaded - assigned
            inner = assigned | (_names([statement.target]).stored
                                if isinstance(statement, ast.For) else set())
            early |= _walk_straight_line(statement.body, inner)[0]
            continue
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            early |= _names([statement.value]).loaded - assigned
            if isinstance(statement, ast.AugAssign):
                early |= _names([statement.target]).stored - assigned
            targets = statement.targets if isinstance(statement, ast.Assign) else [
                statement.target]
            early |= _names(targets).loaded - assigned  # hs in hs[t] = ...
            assigned |= _names(targets).stored
        else:
            early |= _names([statement]).loaded - assigned
            if isinstance(statement, ast.FunctionDef):  # a nested loop's body function
                assigned.add(statement.name)
    return early, assigned


def unsupported_body(node):
    """Why the loop ``node`` (an ``ast.For``) cannot become a helper call, or None."""
    if node.orelse:
        return "a for-else loop"
    if not isinstance(node.target, ast.Name):
        return "the loop target is not a single name"
    iterator = _range_call(node.iter)
    if not (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Name)
            and iterator.func.id == "range" and not iterator.keywords
            and 1 <= len(iterator.args) <= 3):
        return "not a loop over range(...) or reversed(range(...))"
    return unsupported_statements(node)


def unsupported_statements(node):
    """What in the body of the loop ``node`` keeps it from becoming a body function
    (``break``, a call for its side effect, ...), or None. The as-written fallbacks of
    counted ``while`` loops (``tracejit.tracer.loop_while``) do not count: the counted
    twin runs where capture can happen."""
    for inner in _walk_past_fallbacks(node):
        if isinstance(inner, (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom,
                              ast.Global, ast.Nonlocal, ast.FunctionDef, ast.Lambda,
                              ast.ClassDef, ast.AsyncFunctionDef, ast.Await, ast.Delete,
                              ast.Try, ast.With, ast.While)):
            return f"the body has {type(inner).__name__.lower()}"
        if isinstance(inner, ast.Expr) and not isinstance(inner.value, ast.Constant) and not (
            _appended(inner.value) or _printed(inner.value)
        ):
            return "the body has an expression statement (a call for its side effect)"
        if isinstance(inner, (ast.Assign, ast.AugAssign)):
            targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store):
                        return "the body assigns an attribute"
                    if isinstance(part, ast.Starred):
                        return "the body has a starred assignment"
    return None


def _walk_past_fallbacks(node):
    """``ast.walk(node)`` without the subtrees of nodes marked ``tracejit_fallback``."""
    pending = [node]
    while pending:
        item = pending.pop()
        yield item
        pending.extend(child for child in ast.iter_child_nodes(item)
                       if not getattr(child, "tracejit_fallback", False))


def _range_call(iterator):
    """``range(...)`` of ``for t in range(...)`` or ``for t in reversed(range(...))``."""
    if (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Name)
            and iterator.func.id == "reversed" and len(iterator.args) == 1
            and not iterator.keywords):
        return iterator.args[0]
    return iterator


def _appended(call):
    """The list name of ``name.append(value)``, else None."""
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "append" and isinstance(call.func.value, ast.Name)
            and len(call.args) == 1 and not call.keywords):
        return call.func.value.id
    return None


def _printed(call):
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and (
        call.func.id == "print")


def _appended_names(statements):
    """Lists the body appends to (``outs.append(h)``, also once rewritten to
    ``__tracejit__.call(outs.append, h)``): carried like assigned names."""
    names = set()
    for statement in statements:
        for inner in ast.walk(statement):
            if isinstance(inner, ast.Attribute) and inner.attr == "append" and isinstance(
                inner.ctx, ast.Load
            ):
                name = _local_name(inner.value)
                if name is not None:
                    names.add(name)
    return names


def _local_name(node):
    """The name ``node`` reads: ``outs``, also once the front end has rewritten the load
    to ``__tracejit__.local(outs)``; else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "local" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == HOOK and len(node.args) == 1):
        node = node.args[0]
    return node.id if isinstance(node, ast.Name) else None


def loop_variables(node, function_node):
    """The names the loop ``node`` carries, in a stable order."""
    body = _names(node.body)
    inside = {id(n) for n in ast.walk(node)}
    # A loop over an array's rows runs by index or, for other sequences, as written
    # (tracejit.tracer.loop_sequences): the written twin reads nothing after this loop.
    inside |= {id(n) for n in ast.walk(getattr(node, "tracejit_twin", node))}
    live_after = {n.id for n in ast.walk(function_node)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                  and id(n) not in inside}
    assigned = body.stored - {node.target.id}
    carried = assigned & (live_after | _read_before_write(node.body))
    carried |= _appended_names(node.body) - {node.target.id}
    return sorted(carried)


# --- trace time ----------------------------------------------------------------------
def _unrolled(body, iterator, values):
    for t in iterator:
        values = tuple(body(t, *values))
    return values


def _bounds(range_args):
    args = tuple(range_args)
    if len(args) == 1:
        return 0, args[0], 1
    if len(args) == 2:
        return args[0], args[1], 1
    return args


def run_loop(context, range_function, range_args, body, names, frame_locals, location,
             reverse=None):
    """Run (and, when it can, capture) one loop; returns the carried names' values.
    ``reverse`` is the ``reversed`` the user's code called (``for t in
    reversed(range(...))``), or None. While it runs, buffer writes (``hs[:, t] = h``)
    compute their values only when read (``in_loop_body``: a copy of the whole buffer per
    traced trip otherwise)."""
    if context is None:
        return _run_loop(context, range_function, range_args, body, names, frame_locals,
                         location, reverse)
    context.in_loop_body = getattr(context, "in_loop_body", 0) + 1
    try:
        return _run_loop(context, range_function, range_args, body, names, frame_locals,
                         location, reverse)
    finally:
        context.in_loop_body -= 1


def _run_loop(context, range_function, range_args, body, names, frame_locals, location,
              reverse):
    values = tuple(frame_locals.get(name, UNDEFINED) for name in names)
    where = f"{location[0]}:{location[1]}"

    def iterator(args):
        trips = range_function(*args)
        return reverse(trips) if reverse is not None else trips

    if reverse is not None and (reverse is not reversed or range_function is not range):
        return _unrolled(body, iterator(range_args), values)
    start, stop, step = _bounds(range_args)
    strided = _strided(context, range_function, start, stop, step, reverse, body)
    if strided is not None:
        return run_loop(context, range, strided[0], strided[1], names, frame_locals, location)
    if reverse is not None:
        if isinstance(step, SymInt) or step not in (1, -1):
            return _unrolled(body, iterator(range_args), values)
        # reversed(range(a, b, s)) is range(b - s, a - s, -s) when |s| == 1 (both empty when
        # b is on the wrong side of a).
        start, stop, step = stop - step, start - step, -step
        reverse, range_args = None, (start, stop, step)
    reason = _capturable(context, range_function, start, stop, step)
    if reason is not None:
        if reason:
            _note(context, where, reason)
        return _unrolled(body, iterator(range_args), values)
    count = len(range(value_of(start), value_of(stop), step))
    if count < 3:
        _note(context, where, f"the first call runs {count} iteration(s); capture needs 3")
        return _unrolled(body, iterator(range_args), values)
    trips = (stop - start) * step if step in (1, -1) else None
    if isinstance(trips, SymInt) and not (trips >= 1):  # a shape guard for the peeled step
        return _unrolled(body, iterator(range_args), values)
    first = value_of(start)
    originals = values
    # What enters iteration 0, before it writes a buffer in place (hs[t] = h keeps the
    # object and moves its var): the loop's operands when that iteration joins the loop.
    entering = [_entering_var(context, value) for value in values]
    snapshots = [snapshot(value) for value in values]
    recorded = len(context.body)
    # Iteration 0, recorded unrolled; at a dim-valued start (a reversed loop's T - 1) the
    # index is that dim, so what it reads follows the trip count.
    values = tuple(body(start if isinstance(start, SymInt) else first, *values))
    if not _quiet_items(context.body[recorded:]):
        entering = None  # its guards and prints stay in the graph: it stays peeled
    try:
        return _capture(context, body, names, originals, snapshots, values, start, stop, step,
                        trips if trips is not None else count, where, entering)
    except Refused as refusal:
        _note(context, where, str(refusal))
        return _unrolled(body, range(first + step, value_of(stop), step) if not isinstance(
            stop, SymInt) else range_function(first + step, stop, step), values)


def _strided(context, range_function, start, stop, step, reverse, body):
    """``range(start, stop, k)`` with ``|k| > 1`` (``range(0, H - HH + 1, stride)``) as a
    loop over its trip number: ``((n,), body')`` where ``n`` is the trip count (a dim
    when the bounds are) and ``body'(u, ...)`` runs ``body(start + k * u, ...)`` (``start
    + k * (n - 1 - u)`` under ``reversed``), so the index stays affine in a unit-step
    counter and one capture serves every length. None for other loops."""
    if (context is None or range_function is not range or getattr(context, "unroll_loops",
                                                                   False)):
        return None
    if any(isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, SymInt))
           for b in (start, stop, step)):
        return None
    if isinstance(step, SymInt) or step in (0, 1, -1):
        return None
    # Python's len(range(start, stop, step)), negative when empty (range(n) is then empty).
    n = (stop - start + step - 1) // step if step > 0 else (start - stop - step - 1) // -step
    if isinstance(n, SymInt) and isinstance(expr_of(n), int):
        n = expr_of(n)
    if reverse is not None:
        return (n,), lambda u, *values: body(start + step * (n - 1 - u), *values)
    return (n,), lambda u, *values: body(start + step * u, *values)


def _capturable(context, range_function, start, stop, step):
    """None when the loop may be captured; a reason (or "" for silent) when not."""
    if context is None or range_function is not range:
        return ""
    if getattr(context, "unroll_loops", False):
        return ""
    for bound in (start, stop, step):
        if isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, SymInt)):
            return "a bound is a traced value or not an int (only dims are captured)"
    if isinstance(step, SymInt) or step == 0:
        return "the step is not a constant"
    symbolic = isinstance(start, SymInt) or isinstance(stop, SymInt)
    if symbolic and step not in (1, -1):
        return "a dynamic range with a step other than 1 or -1"
    trips = len(range(start, stop, step)) if not symbolic else None
    if not symbolic and trips < STATIC_UNROLL_LIMIT:
        if trips < 3:
            return ""
        return (f"its trip count {trips} is a Python int, not a dynamic dim, so it is unrolled "
                "(a Python list's len() is one: pass token ids as an array, np.asarray(ids), "
                "to capture the loop)")
    return None


def note_unrolled(context, where, reason):
    """A loop the front end did not rewrite (a break, the index read after it, ...)."""
    if context is not None and not getattr(context, "unroll_loops", False):
        _note(context, where, reason)


def _note(context, where, reason):
    notes = getattr(context, "loop_notes", None)
    if notes is None:
        notes = context.loop_notes = []
    notes.append(f"loop at {where} unrolled: {reason}")
    log.info("loop at %s unrolled: %s", where, reason)


def _fresh(context, value):
    from .tracing import Tracer

    var = context.new_var(value.ir_var.aval)
    tracer = Tracer(context, var, value.lazy_value(), value.shape)
    context.values[var.name] = (tracer.raw_value, tracer.shape)
    return tracer


# --- carried values: arrays, and the dicts and lists of tracejit.tracer.loop_containers ---------
class _ArrayCarry:
    """A carried array: ``h = f(h, x[t])``, ``loss += ...``, ``hs[:, t] = h``."""

    slot_count = 1

    def __init__(self, name, original, value):
        from .tracing import Tracer

        if not isinstance(value, Tracer):
            raise Refused(f"`{name}` is a {type(value).__name__} after the first iteration, "
                          "not an array")
        self.name, self.original, self.value = name, original, value

    def setup(self):
        return [self.value]

    def enter(self, t, slots):
        return slots[0]

    def leave(self, proxy, returned):
        from .tracing import Tracer

        if not isinstance(returned, Tracer):
            raise Refused(f"`{self.name}` is a {type(returned).__name__} inside the loop, not "
                          "an array")
        return [returned]

    def after(self, finals):
        tracer = finals[0]
        if isinstance(self.original, type(tracer)) and self.original is self.value:
            self.original._update(tracer)  # a buffer written in place: keep the object
            return self.original
        return tracer


def _carries(context, names, originals, snapshots, values, start, stop, step, count):
    carries = []
    for name, original, snap, value in zip(names, originals, snapshots, values):
        if snap is not None:
            try:
                carries.append(ContainerCarry(context, name, snap, value, value_of(start),
                                              start, stop, step, count))
            except Refusal as refusal:
                raise Refused(str(refusal)) from None
        elif is_int(original) and is_int(value):
            carries.append(_CounterCarry(name, original, value, start, step, count))
        else:
            carries.append(_ArrayCarry(name, original, value))
    return carries


def _slot_names(carries):
    names = []
    for carry in carries:
        if isinstance(carry, _ArrayCarry):
            names.append(carry.name)
        else:
            names += [f"{carry.name} (stacked)"] * (carry.slot_count)
    return names


class _CounterCarry:
    """A carried Python int that moves by the same amount every trip: ``idx += 1`` beside
    ``col[idx] = ...``, ``pos += W_out`` over an inner loop. It is no slot of the loop: in
    the body it is the index's affine function ``original + d * trip`` (a ``SymInt``), so
    writes at it are writes at the index; after the loop it is ``original + d * trips``."""

    slot_count = 0

    def __init__(self, name, original, value, start, step, count):
        if not is_int(value):
            raise Refused(f"`{name}` is a {type(value).__name__} after the first iteration, "
                          "not an int")
        self.name, self.original, self.step_size = name, original, value - original
        if isinstance(self.step_size, SymInt) and isinstance(expr_of(self.step_size), int):
            self.step_size = expr_of(self.step_size)
        self.start, self.step, self.count = start, step, count
        self.entry = None

    def setup(self):
        return []

    def enter(self, t, slots):
        self.entry = self.original + self.step_size * ((t - self.start) * self.step)
        return self.entry

    def leave(self, proxy, returned):
        expected = self.entry + self.step_size
        if not is_int(returned) or expr_of(returned) != expr_of(expected):
            raise Refused(f"`{self.name}` is an int that does not move by the same amount "
                          "every iteration")
        return []

    def after(self, finals):
        final = self.original + self.step_size * self.count
        return expr_of(final) if isinstance(expr_of(final), int) else final


class _Trial:
    """One traced iteration: block parameters, outputs (flat slots), the recorded items,
    the prints it would have written, and the containers' reads."""

    def __init__(self, context, body, t, carries, slots):
        from .tracing import Tracer

        params = [_fresh(context, value) if isinstance(value, Tracer) else value
                  for value in slots]
        self.params = tuple(param.ir_var for param in params)  # before writes rebind them
        objects, position = [], 0
        for carry in carries:
            objects.append(carry.enter(t, params[position: position + carry.slot_count]))
            position += carry.slot_count
        mark = len(context.body)
        saved_prints = getattr(context, "trial_prints", None)
        self.prints = context.trial_prints = []
        context.loop_depth = getattr(context, "loop_depth", 0) + 1
        try:
            returned = tuple(body(t, *objects))
            _check_aliasing(carries, objects, returned, self.params)
            outputs = []
            for carry, proxy, value in zip(carries, objects, returned):
                outputs += carry.leave(proxy, value)
        except Refusal as refusal:
            raise Refused(str(refusal)) from None
        except (KeyError, IndexError) as error:  # the unrolled run raises it where eager does
            raise Refused(f"iteration {t} raised {type(error).__name__}: {error}") from None
        finally:
            context.loop_depth -= 1
            context.trial_prints = saved_prints
            self.recorded = context.body[mark:]
            del context.body[mark:]
        self.outputs = outputs
        self.reads = [getattr(proxy, "_reads", None) for proxy in objects]


def _check_aliasing(carries, objects, returned, param_vars):
    """``h += x[t]; hs[t] = h`` (or ``outs.append(h)``): NumPy stores one array that the
    next step updates in place, so every entry ends up the last value. A container entry
    that is a carried array the body updates in place refuses capture (unrolled, the trace
    follows the aliasing)."""
    updated, position = set(), 0
    for carry, proxy, value in zip(carries, objects, returned):
        if isinstance(carry, _ArrayCarry) and value is proxy and (
            value.ir_var is not param_vars[position]
        ):
            updated.add(id(value))
        position += carry.slot_count
    if not updated:
        return
    for carry, proxy in zip(carries, objects):
        current = getattr(proxy, "_current", None)
        leaves = current if isinstance(current, tuple) else (current,)
        if any(id(leaf) in updated for leaf in leaves):
            raise Refused(f"`{carry.name}` stores an array the loop updates in place (h += "
                          "...): NumPy's entries all alias it")


def emit_prints(context, prints):
    """Hand prints (``(stream, text)``) to the enclosing trial (a nested loop), or to the
    trace, which writes them when it succeeds (``write_prints``): a trace that fails is
    followed by an eager run, which prints them itself."""
    if context is None:
        write_prints(prints)
        return
    outer = getattr(context, "trial_prints", None)
    if outer is None:
        outer = getattr(context, "printed", None)
        if outer is None:
            outer = context.printed = []
    outer.extend(prints)


def write_prints(prints):
    for stream, text in prints:
        getattr(sys, stream).write(text)


def _traced_pair(context, body, t1, step, carries, index):
    """Iterations 1 and 2 traced, the index a ``SymInt`` of ``index`` at trips ``t1`` and
    ``t1 + step``; containers' reads decided (and traced again with their windows when a
    read reaches back into earlier iterations)."""
    inner_names = context.loop_count
    for attempt in range(2):
        for carry in carries:
            if isinstance(carry, ContainerCarry):
                carry.begin()
        try:
            slots = [slot for carry in carries for slot in carry.setup()]
        except Refusal as refusal:
            raise Refused(str(refusal)) from None
        context.loop_count = inner_names  # loops nested in the body: the same index names
        trial1 = _Trial(context, body, index.at(t1), carries, slots)
        context.loop_count = inner_names
        trial2 = _Trial(context, body, index.at(t1 + step), carries, trial1.outputs)
        if attempt:
            return slots, trial1, trial2
        again = False
        for carry, reads1, reads2 in zip(carries, trial1.reads, trial2.reads):
            if isinstance(carry, ContainerCarry):
                try:
                    again |= carry.decide(reads1, reads2)
                except Refusal as refusal:
                    raise Refused(str(refusal)) from None
        if not again:
            return slots, trial1, trial2
    raise AssertionError("unreachable")


def _like(final, example):
    """A carried value after the loop as tracing holds such values: a NumPy scalar (what
    ``loss += ...`` gives eagerly) or a Python number stays one; run_body works in arrays."""
    if isinstance(example, np.ndarray) or np.ndim(final) != 0:
        return final
    if isinstance(example, np.generic):
        return np.asarray(final, dtype=example.dtype)[()]
    return np.asarray(final).item()


def _merge_constants(created, trials):
    """Constants the body makes anew in each iteration (``np.ones(3)``, the ``1`` of
    ``xs[t][k] = 1``) are equal NumPy arrays but distinct vars: iteration 2 reads
    iteration 1's, so the body reads one constant."""
    first = {}
    same = {}
    for var, constant in created:
        if constant.digest in first:
            same[var] = first[constant.digest]
        else:
            first[constant.digest] = var
    if not same:
        return

    def atom(value):
        return same.get(value, value) if isinstance(value, Var) else value

    for trial in trials:
        trial.recorded = [_with_atoms(item, atom) for item in trial.recorded]


def _with_atoms(item, atom):
    """``item`` with each atom it reads replaced by ``atom(atom)``."""
    if isinstance(item, Eqn):
        return Eqn(item.prim, tuple(atom(a) for a in item.inputs), item.params, item.out)
    if isinstance(item, Guard):
        return Guard(atom(item.predicate), item.convert, item.expected, item.location)
    if isinstance(item, Effect):
        return Effect(item.kind, tuple(atom(a) for a in item.inputs), item.params,
                      item.location)
    return item


def _capture(context, body, names, originals, snapshots, values, start, stop, step, count,
             where, entering):
    """The loop equations, their results the carried values after the last trip. The
    peeled iteration 0 becomes the loop's first trip when it can (``_first_trip_fits``):
    one copy of the body's kernels, and a buffer written at the index is written in place
    from its first trip."""
    carries = _carries(context, names, originals, snapshots, values, start, stop, step, count)
    if entering is not None and _first_trip_fits(carries, entering):
        try:
            return _capture_trips(context, body, carries, start, stop, step, where,
                                  from_first=entering)
        except Refused:  # the index decides something at trip 0: peel it after all
            carries = _carries(context, names, originals, snapshots, values, start, stop, step,
                               count)
    return _capture_trips(context, body, carries, start, stop, step, where, from_first=None)


def _entering_var(context, value):
    """The var of a value entering iteration 0: a traced array's, or a NumPy array's as a
    constant of the graph (``h = np.zeros(H)``); None for anything else."""
    if isinstance(value, np.ndarray) and value.dtype != object:
        return context.atom(value)[0]
    return getattr(value, "ir_var", None)


def _first_trip_fits(carries, entering):
    """Whether the values entering iteration 0 (``entering``: their vars) are what the body
    takes at every trip: arrays (no containers or counters) of the same shapes, dtypes and
    weak types."""
    return all(type(carry) is _ArrayCarry and var is not None
               and var.aval == carry.value.ir_var.aval for carry, var in zip(carries, entering))


def _capture_trips(context, body, carries, start, stop, step, where, from_first):
    """``from_first``: the vars entering iteration 0 when it joins the loop, else None."""
    from .ops.control import LoopGuardFailed, loop_p
    from .tracing import Tracer

    t1 = value_of(start) + step
    index_name = f"i{getattr(context, 'loop_count', 0)}"
    context.loop_count = getattr(context, "loop_count", 0) + 1
    guards_before = len(context.shape_guards)
    constants_before = len(context.constants)
    try:
        # from_first: what the trials decide about the index must hold at trip 0 too
        first = start - step if from_first is not None else start
        index = LoopIndex(context, index_name, first, stop, step)
    except IndexRefused as refusal:
        raise Refused(str(refusal)) from None
    try:
        slots, trial1, trial2 = _traced_pair(context, body, t1, step, carries, index)
        _merge_constants(context.constants[constants_before:], (trial1, trial2))
        # Comparisons and specializations of the index: the same at every trip, or refused.
        settle_guards(context, guards_before, index)
    except IndexRefused as refusal:
        del context.shape_guards[guards_before:]  # they mention the index: never entry guards
        raise Refused(str(refusal)) from None
    except Refused:
        del context.shape_guards[guards_before:]
        raise
    finally:
        index.close()
    slot_names = _slot_names(carries)
    equations, free = _generalize(trial1.recorded, trial2.recorded, trial1.params,
                                  trial2.params, index_name)
    results = []
    for name, out1, out2, param in zip(slot_names, trial1.outputs, trial2.outputs,
                                       trial1.params):
        if equations.renames.get(out2.ir_var.name, out2.ir_var) != out1.ir_var:
            raise Refused(f"`{name}` is computed differently in iterations 1 and 2")
        if out1.ir_var.aval != param.aval:
            raise Refused(f"`{name}` changes shape or dtype in the loop "
                          f"({param.aval} -> {out1.ir_var.aval})")
        results.append(out1.ir_var)
    free_vars = list(free)
    graph = Graph(
        f"{context.name}_loop_{where.rsplit(':', 1)[-1]}",
        tuple(trial1.params) + tuple(free_vars),
        (),
        tuple(equations.body),
        tuple(results),
        (Symbol(index_name, index.low, index.high),),
    )
    if getattr(context, "records_gradients", False):
        from .loop_autodiff import refusal  # its reverse must be a loop too

        reason = refusal(graph)
        if reason is not None:
            raise Refused(f"{reason}; the trace records gradients")
    start_expr = expr_of(start) + (0 if from_first is not None else step)
    loop_params = dict(body=graph, index=index_name, start=start_expr, stop=expr_of(stop),
                       step=step, num_carry=len(slots))
    # Real values: iterations 1 and 2 were traced on real data; the rest run when
    # something reads their results (tracejit.tracer.pending), or now.
    rest = _RemainingTrips(context, graph, index_name, t1 + 2 * step, value_of(stop), step,
                           trial2.outputs, free_vars)
    if _deferrable(context, graph):
        finals = rest.pending()
        emit_prints(context, trial1.prints + trial2.prints)
    else:
        prints = []
        try:
            finals = rest.run(prints)
        except LoopGuardFailed as failure:
            raise Refused(f"{failure} on this call (the if goes another way in a later "
                          "iteration)") from None
        emit_prints(context, trial1.prints + trial2.prints + prints)
    entering = from_first if from_first is not None else [slot.ir_var for slot in slots]
    operands = tuple(entering) + tuple(free_vars)
    tracers = []
    for position, (slot, final) in enumerate(zip(slots, finals)):
        params = tuple(sorted({**loop_params, "output": position}.items()))
        out = context.new_var(results[position].aval)
        context.body.append(Eqn(loop_p, operands, params, out))
        tracer = Tracer(context, out, final, slot.shape)
        context.values[out.name] = (final, tracer.shape)
        tracers.append(tracer)
    returned, position = [], 0
    for carry in carries:
        returned.append(carry.after(tracers[position: position + carry.slot_count]))
        position += carry.slot_count
    log.info("loop at %s captured: %d equation(s) in the body, %d carried, %d read from "
             "outside", where, len(graph.body), len(slots), len(free_vars))
    return tuple(returned)


class _RemainingTrips:
    """The first call's trips after the traced ones, through the body's NumPy reference
    (``run_body``): ``run`` now, or ``pending`` values that run them all once, when the
    first of them is read."""

    def __init__(self, context, body, index, start, stop, step, outputs, free_vars):
        # Values as they are now, maybe pending (a NumPy constant's is its snapshot).
        self.free = [context.values[var.name][0] for var in free_vars]
        self.carried = [out.lazy_value() for out in outputs]
        # What a scalar result is (a NumPy scalar, a Python float) is known now; arrays
        # are arrays.
        self.examples = [out.lazy_value() if out.shape else out.value for out in outputs]
        self.args = (body, index, start, stop, step, len(outputs))
        self.bindings = context.symbol_values()

    def run(self, effects=None):
        from .ops.control import run_body

        finals = run_body(*self.args, [np.asarray(force(value)) for value in self.carried],
                          [force(value) for value in self.free], self.bindings, effects)
        return [_like(final, example) for final, example in zip(finals, self.examples)]

    def pending(self):
        everything = Pending(self.run)
        return [Pending(lambda position=position: everything.force()[position],
                        like=None if is_pending(example) else example)
                for position, example in enumerate(self.examples)]


def _deferrable(context, body):
    """Whether the remaining trips may wait until read: not in a trace recording
    gradients (the backward reads every value), not inside another loop's traced trip, and
    a body with no guard or print at any depth (those must happen during the call, in
    order)."""
    if getattr(context, "records_gradients", False) or getattr(context, "loop_indices", None):
        return False
    return _quiet(body)


def _quiet(graph):
    return _quiet_items(graph.body)


def _quiet_items(items):
    """No guard or print among ``items``, nor in the bodies of loops among them."""
    return all(isinstance(item, Eqn) and (item.prim.name != "loop" or _quiet(
        item.params_dict["body"])) for item in items)


def _affine(value1, value2):
    """``value1`` at trip ``t1`` and ``value2`` at ``t1 + step`` as affine in the index
    (``_generalize``'s ``samples``)."""
    t1, step, symbol = _SAMPLES
    difference = value2 - value1
    if not isinstance(difference, int) or difference % step:
        raise Refused("a parameter changes with the index in a way that is not affine")
    return value1 + (difference // step) * (DimExpr.symbol(symbol) - t1)


class _Generalized:
    def __init__(self):
        self.body, self.renames = [], {}


def _index_shape(aval, index):
    return any(isinstance(dim, DimExpr) and index in dim.symbols() for dim in aval.shape)


def _generalize(recorded1, recorded2, params1, params2, index, samples=None):
    """One body for every iteration from the recordings of two, or ``Refused``. The index
    was symbolic in both (``tracejit.tracer.loop_index``), so the recordings must be the same up to
    variable names: params and literals equal (``x[t]`` slices at ``i0`` in both), any int
    that differs was computed from something other than the index and is refused.

    ``samples=(t1, step)``: the recordings were made at concrete indices ``t1`` and ``t1 +
    step`` instead, and ints that differ are taken as affine in the index. Only
    ``tracejit.tracer.loop_autodiff`` replays a captured body that way (its backward rules run on
    concrete params); an inference from two samples, kept there until the replay is
    symbolic too."""
    global _SAMPLES
    outer, _SAMPLES = _SAMPLES, None if samples is None else (*samples, index)
    try:
        return _generalize_items(recorded1, recorded2, params1, params2, index)
    finally:
        _SAMPLES = outer


_SAMPLES = None  # (t1, step, index) while tracejit.tracer.loop_autodiff generalizes replays


def _generalize_items(recorded1, recorded2, params1, params2, index):
    result = _Generalized()
    memo = {}  # nested loop bodies generalized once per group of loop equations
    renames = result.renames  # iteration-2 var name -> iteration-1 var
    for p1, p2 in zip(params1, params2):
        renames[p2.name] = p1
    defined1 = {p.name for p in params1}
    free = {}
    if len(recorded1) != len(recorded2):
        raise Refused("the body records a different number of operations in iterations 1 "
                      "and 2 (control flow that depends on the index or the data)")
    for item1, item2 in zip(recorded1, recorded2):
        if not isinstance(item1, Eqn) or not isinstance(item2, Eqn):
            result.body.append(_generalize_check(item1, item2, renames, defined1, free))
            continue
        if item1.prim is not item2.prim or len(item1.inputs) != len(item2.inputs):
            raise Refused(f"iteration 2 computes {item2.prim.name} where iteration 1 "
                          f"computed {item1.prim.name}")
        inputs = []
        for atom1, atom2 in zip(item1.inputs, item2.inputs):
            if isinstance(atom1, Var) and isinstance(atom2, Var):
                mapped = renames.get(atom2.name)
                if mapped is not None:
                    if mapped != atom1:
                        raise Refused(f"{item1.prim.name} reads different values in "
                                      "iterations 1 and 2")
                elif atom1 == atom2 and atom1.name not in defined1:
                    free[atom1.name] = atom1
                else:
                    raise Refused(f"{item1.prim.name} in iteration 2 reads a value computed in "
                                  "iteration 1 other than through a loop variable (e.g. "
                                  "hs[t - 1] on a dict or list)")
                inputs.append(atom1)
            elif isinstance(atom1, Literal) and isinstance(atom2, Literal):
                inputs.append(_literal(atom1, atom2, item1.prim.name))
            else:
                raise Refused(f"{item1.prim.name} mixes a constant and a computed value "
                              "between iterations")
        params = tuple((key, _param(value1, value2, index, memo,
                                    f"{item1.prim.name}'s {key}"))
                       for (key, value1), (_, value2) in zip(item1.params, item2.params))
        if item1.out.aval != item2.out.aval:
            raise Refused(f"{item1.prim.name} gives {item1.out.aval} in iteration 1 and "
                          f"{item2.out.aval} in iteration 2 (a shape that changes between "
                          "iterations)")
        if _index_shape(item1.out.aval, index):
            raise Refused(f"{item1.prim.name} gives {item1.out.aval}: a shape that changes "
                          "with the index")
        renames[item2.out.name] = item1.out
        defined1.add(item1.out.name)
        result.body.append(Eqn(item1.prim, tuple(inputs), params, item1.out))
    return result, list(free.values())


def _generalize_check(item1, item2, renames, defined1, free):
    """A guard (``if`` on traced data) or a print inside the body, the same in iterations 1
    and 2: evaluated at every iteration of the loop."""
    location = getattr(item1, "location", None)
    at = f" at {location.short}" if location is not None else ""
    if type(item1) is not type(item2) or getattr(item1, "location", None) != getattr(
        item2, "location", None
    ):
        raise Refused(f"the body checks or prints different things in iterations 1 and 2{at} "
                      "(control flow that depends on the index or the data)")
    if isinstance(item1, Guard):
        if item1.convert != item2.convert or item1.expected != item2.expected:
            raise Refused(f"the if{at} goes different ways in iterations 1 and 2 (captured "
                          "loops need one path; the loop is unrolled)")
        predicate = _match_atom(item1.predicate, item2.predicate, renames, defined1, free,
                                f"the if{at}")
        return Guard(predicate, item1.convert, item1.expected, item1.location)
    if isinstance(item1, Effect):
        if item1.kind != item2.kind or len(item1.inputs) != len(item2.inputs):
            raise Refused(f"the print{at} prints different things in iterations 1 and 2")
        inputs = tuple(_match_atom(atom1, atom2, renames, defined1, free, f"the print{at}")
                       for atom1, atom2 in zip(item1.inputs, item2.inputs))
        if item1.params != item2.params:
            raise Refused(f"the print{at} prints text that changes between iterations (only "
                          "arrays, dims and the index are printed from a captured loop)")
        return Effect(item1.kind, inputs, item1.params, item1.location)
    raise Refused(f"the body holds a {type(item1).__name__}{at}")


def _match_atom(atom1, atom2, renames, defined1, free, what):
    """The body's atom for ``atom1``/``atom2`` read by ``what`` in iterations 1 and 2."""
    if isinstance(atom1, Var) and isinstance(atom2, Var):
        mapped = renames.get(atom2.name)
        if mapped is not None:
            if mapped != atom1:
                raise Refused(f"{what} reads different values in iterations 1 and 2")
        elif atom1 == atom2 and atom1.name not in defined1:
            free[atom1.name] = atom1
        else:
            raise Refused(f"{what} in iteration 2 reads a value computed in iteration 1 "
                          "other than through a loop variable")
        return atom1
    if isinstance(atom1, Literal) and isinstance(atom2, Literal):
        return _literal(atom1, atom2, what)
    raise Refused(f"{what} mixes a constant and a computed value between iterations")


def _param(value1, value2, index, memo, what):
    if isinstance(value1, Graph) and isinstance(value2, Graph):
        return _nested_body(value1, value2, index, memo)
    if isinstance(value1, tuple) and isinstance(value2, tuple) and len(value1) == len(value2):
        return tuple(_param(a, b, index, memo, what) for a, b in zip(value1, value2))
    if type(value1) is type(value2) and (value1 == value2) is True:
        return value1
    if _SAMPLES is not None and all(isinstance(value, (int, DimExpr)) and not isinstance(
            value, bool) for value in (value1, value2)):
        return _affine(value1, value2)
    raise Refused(f"{what} is {value1} in iteration 1 and {value2} in iteration 2: a value "
                  "computed in Python from something other than the index (or from the "
                  "index through a Python int, float or list)")


def _nested_body(graph1, graph2, index, memo):
    """The body of a loop nested in the loop being captured, from its two recordings (one
    per outer trial): the same equations up to variable names (the outer index is the
    same symbol in both, ``x_pad[:, :, i*s:i*s+HH, j*s:...]`` in a ``j`` loop inside an
    ``i`` loop). The inner loop's own index has the same name in both recordings
    (``_capture`` numbers the body's loops the same way in both trials)."""
    key = (id(graph1), id(graph2))
    if key in memo:
        return memo[key][0]
    if len(graph1.inputs) != len(graph2.inputs) or len(graph1.outputs) != len(graph2.outputs):
        raise Refused("a nested loop carries different values in iterations 1 and 2")
    for var1, var2 in zip(graph1.inputs, graph2.inputs):
        if var1.aval != var2.aval:
            raise Refused(f"a nested loop's operand is {var1.aval} in iteration 1 and "
                          f"{var2.aval} in iteration 2")
    if graph1.constants or graph2.constants:
        raise Refused("a nested loop's body holds constants")
    names1 = [symbol.name for symbol in graph1.symbols]
    if names1 != [symbol.name for symbol in graph2.symbols]:
        raise Refused("nested loops are numbered differently in iterations 1 and 2")
    body, free = _generalize(list(graph1.body), list(graph2.body), graph1.inputs,
                             graph2.inputs, index)
    if free:
        raise Refused("a nested loop's body reads a value that is not one of its operands")
    outputs = []
    for atom1, atom2 in zip(graph1.outputs, graph2.outputs):
        if isinstance(atom1, Var) and isinstance(atom2, Var):
            if body.renames.get(atom2.name, atom2) != atom1:
                raise Refused("a nested loop returns different values in iterations 1 and 2")
            outputs.append(atom1)
        elif isinstance(atom1, Literal) and isinstance(atom2, Literal):
            outputs.append(_literal(atom1, atom2, "a nested loop's result"))
        else:
            raise Refused("a nested loop returns a constant in one iteration only")
    symbols = tuple(Symbol(s1.name, min(s1.low, s2.low), max(s1.high, s2.high))
                    for s1, s2 in zip(graph1.symbols, graph2.symbols))
    graph = Graph(graph1.name, graph1.inputs, (), tuple(body.body), tuple(outputs), symbols)
    memo[key] = (graph, graph1, graph2)  # the graphs stay alive: their ids stay unique
    return graph


def _literal(atom1, atom2, what):
    if atom1 == atom2:
        return atom1
    if _SAMPLES is not None and atom1.aval.weak and atom2.aval.weak and all(
        isinstance(value, (int, DimExpr)) and not isinstance(value, bool)
        for value in (atom1.value, atom2.value)
    ):
        return Literal.of(_affine(atom1.value, atom2.value))
    raise Refused(f"a constant read by {what} is {atom1.value!r} in iteration 1 and "
                  f"{atom2.value!r} in iteration 2 (a number computed in Python, such as "
                  "float(t) or tokens[t])")


# --- the front end's rewrite ---------------------------------------------------------
HOOK = "__tracejit__"


def _noted(node, reason):
    """``node`` as written, after a hook call that notes why it is not captured (for loops
    over ``range``; other loops are not candidates)."""
    if reason.startswith("not a loop over range"):
        return node
    note = ast.Expr(ast.Call(
        func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr="loop_note",
                           ctx=ast.Load()),
        args=[ast.Constant(node.lineno), ast.Constant(reason)], keywords=[]))
    return [ast.fix_missing_locations(ast.copy_location(note, node)), node]


def rewrite_for(rewriter, node):
    """``node`` (an ``ast.For``) with its body rewritten by ``rewriter``, and, when it is a
    loop over ``range`` that may be captured, turned into a ``loop`` hook call."""
    reason = unsupported_body(node)
    reversed_loop = _range_call(node.iter) is not node.iter  # before visiting rewrites it
    if reason is None and any(isinstance(arg, ast.Starred)
                              for arg in _range_call(node.iter).args):
        reason = "starred range arguments"
    # Subscripts whose key mentions the index go through item_at (a Python list read at
    # it specializes the index: tracejit.tracer.loop_index refuses the capture).
    targets = getattr(rewriter, "loop_targets", ())
    if isinstance(node.target, ast.Name):
        # (and enumerate's index, bound from it: tracejit.tracer.loop_sequences)
        rewriter.loop_targets = (*targets, node.target.id,
                                 *getattr(node, "tracejit_index_names", ()))
    try:
        rewriter.generic_visit(node)
    finally:
        rewriter.loop_targets = targets
    function_node = getattr(rewriter, "function_node", None)
    if function_node is None:
        return node
    if reason is not None:
        return _noted(node, reason)
    inside = {id(inner) for inner in ast.walk(node)}
    inside |= {id(inner) for inner in ast.walk(getattr(node, "tracejit_twin", node))}
    # Other loops over the same name (a forward and a backward loop over t) rebind it
    # before they read it; so does a loop already rewritten into a body function of t.
    for other in ast.walk(function_node):
        rebinds = isinstance(other, ast.For) and isinstance(other.target, ast.Name) and (
            other.target.id == node.target.id
        ) or isinstance(other, ast.FunctionDef) and node.target.id in {
            arg.arg for arg in other.args.args}
        if rebinds and other is not node:
            inside |= {id(inner) for inner in ast.walk(other)}
    if any(isinstance(n, ast.Name) and n.id == node.target.id and id(n) not in inside
           for n in ast.walk(function_node)):
        # Python leaves the index at its last value after the loop
        return _noted(node, f"the index `{node.target.id}` is read after the loop")
    names = loop_variables(node, function_node)
    iterator = node.iter  # __tracejit__.call(<range>, *args) after the rewrite
    if not (isinstance(iterator, ast.Call) and iterator.args):
        return node
    reverse = ast.Constant(None)
    if reversed_loop:
        # __tracejit__.call(<reversed>, __tracejit__.call(<range>, *args))
        if len(iterator.args) != 2 or not (isinstance(iterator.args[1], ast.Call)
                                           and iterator.args[1].args):
            return node
        reverse, iterator = iterator.args[0], iterator.args[1]
    range_function, range_args = iterator.args[0], iterator.args[1:]
    body_name = f"__tracejit_loop_{node.lineno}"
    result = ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Load()) for name in names],
                       ctx=ast.Load())
    definition = ast.FunctionDef(
        name=body_name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=node.target.id)]
                           + [ast.arg(arg=name) for name in names],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[*node.body, ast.Return(value=result)],
        decorator_list=[],
        returns=None,
    )
    call = ast.Call(
        func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr="loop",
                           ctx=ast.Load()),
        args=[range_function, ast.Tuple(elts=list(range_args), ctx=ast.Load()),
              ast.Name(id=body_name, ctx=ast.Load()),
              ast.Tuple(elts=[ast.Constant(name) for name in names], ctx=ast.Load()),
              ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]),
              ast.Constant(node.lineno)],
        keywords=[ast.keyword(arg="reverse", value=reverse)]
        if not (isinstance(reverse, ast.Constant) and reverse.value is None) else [],
    )
    if names:
        target = ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Store()) for name in names],
                           ctx=ast.Store())
        statement = ast.Assign(targets=[target], value=call)
    else:
        statement = ast.Expr(value=call)
    for new in (definition, statement):
        ast.copy_location(new, node)
    return [ast.fix_missing_locations(definition), ast.fix_missing_locations(statement)]
