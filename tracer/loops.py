"""Loop capture at trace time: a Python ``for t in range(...)`` becomes ``loop`` equations.

The front end rewrites a capturable loop into ``names = __tracejit__.loop(range, args,
body, names, locals())`` (``tracejit.tracer.loop_frontend``). At trace time ``run_loop``:

1. runs iteration 0 (recorded unrolled: carried values then have their steady shapes
   and dtypes, e.g. ``loss = 0.0`` has become an array);
2. traces iterations 1 and 2 (``tracejit.tracer.loop_trials``, each carried name a carry of
   ``tracejit.tracer.loop_carries``) on fresh block parameters, with real values and the index
   a ``SymInt`` over a fresh index symbol (``tracejit.tracer.loop_index``: slice starts,
   pad configs and ints computed from ``t`` are ``DimExpr``s of it; comparisons and
   specializations of the index must go the same way at every trip, else the loop is
   refused), and generalizes the two recordings into one body
   (``tracejit.tracer.loop_generalize``; anything that differs unrolls the loop, with the
   reason logged);
3. records one ``loop`` equation per carried result. When what entered iteration 0 is
   what every trip takes (arrays of the body's avals, no guard or print in it), iteration
   0 joins the loop (``_first_trip_fits``), else the loop starts at trip 1; the first
   call's remaining trips run through the body's NumPy reference when something reads
   their results while tracing, else never (``tracejit.tracer.pending``: the runtime takes
   the first call's result from the compiled program).

Loops are unrolled when the bounds are traced integers or short Python constants (unless
iteration 0 shows a large body: ``UNROLL_EQUATION_BUDGET``), or the first call has fewer
than 3 iterations; and, in traces that record gradients, when the
body has something ``tracejit.tracer.loop_autodiff`` cannot reverse yet (``refusal``).
Other loops in gradient traces stay captured: their reverse is a loop.
"""

from __future__ import annotations

import linecache
import logging
import operator
import sys

import numpy as np

from . import (
    attribute_writes,
    container_holders,
    loop_attribute_carries,
    loop_dict_carries,
    loop_selected_appends,
    loop_trip_counts,
    loop_write_through,
    trial_containers,
)
from .dims import SymInt, expr_of, value_of
from .discontinuities import AMBIGUITY
from .errors import TraceTooLarge, as_numpy_would
from .ir import Effect, Eqn, Graph, Guard, Location, Symbol, Var
from .loop_autodiff import refusal as unreversible
from .loop_carries import ArrayCarry, UntouchedCarry, carries_of, follow_replaced, slot_names_of
from .loop_containers import ContainerCarry, note_entry_aliases, snapshot, uncarried
from .loop_generalize import Refused, _generalize
from .loop_index import IndexRefused, LoopIndex, settle_guards
from .loop_trials import traced_pair
from .ops.control import LoopGuardFailed, loop_p, run_body
from .pending import Pending, force, known_kind
from .traced_array import Tracer, trace_error
from .while_loops import exit_position

log = logging.getLogger("tracejit.loops")

# Constant trip counts below this unroll (range(3) over gates or layers reads better as
# straight-line code); longer constant loops are captured like dynamic ones, so a first
# call with exact shapes (dynamic="auto") never traces hundreds of thousands of steps.
STATIC_UNROLL_LIMIT = 32
# ... unless unrolling them records more equations than this (iteration 0's times the trip
# count) from a body of at least UNROLL_BODY_MIN: a training loop over 10 steps of a
# forward and backward pass (47 equations a step) traced and compiled ten bodies (first
# call 2.7-4.4 s) where a captured loop compiles one (1.4-1.8 s, a loaded machine).
UNROLL_EQUATION_BUDGET = 300
UNROLL_BODY_MIN = 24


class _Undefined:
    def __repr__(self):
        return "<undefined>"


UNDEFINED = _Undefined()


# --- trace time ----------------------------------------------------------------------
def _unrolled(body, iterator, values, context=None):
    """The trips of ``iterator`` traced one after another. A top-level loop whose first
    trip here, times the trips left, would pass ``tracing.EQUATION_LIMIT`` stops the trace
    at once (``TraceTooLarge``: the call runs eagerly), where it traced trip after trip
    until the limit: seconds before going eager (the deeplearning.ai course's ``model``,
    whose loop is not captured, traced 110 of its 300 trips: 1.4 s)."""
    trips = operator.length_hint(iterator)
    watched = context is not None and getattr(context, "in_loop_body", 0) == 1 and trips > 1
    for trip, t in enumerate(iterator):
        before = len(context.body) if watched and trip == 0 else None
        values = tuple(body(t, *values))
        if before is not None:
            _stop_when_too_large(context, body, len(context.body) - before, trips - 1)
    return values


def _stop_when_too_large(context, body, per_trip, trips_left):
    from .tracing import EQUATION_LIMIT  # cycle: tracing -> loops

    if per_trip <= 0 or len(context.body) + per_trip * trips_left < EQUATION_LIMIT:
        return
    code = getattr(body, "__code__", None)  # the body function's line is the for's
    where = None if code is None else Location(
        code.co_filename, code.co_firstlineno, code.co_name,
        linecache.getline(code.co_filename, code.co_firstlineno).strip())
    loop = "" if code is None else f"loop at {code.co_filename}:{code.co_firstlineno} "
    why = next((f" ({note[len(loop):]})" for note in reversed(getattr(
        context, "loop_notes", None) or ()) if loop and note.startswith(loop)), "")
    raise TraceTooLarge(str(trace_error(
        f"too large to compile: this loop runs unrolled, {per_trip} operations a trip for "
        f"{trips_left} more trips, past the {EQUATION_LIMIT} one trace may hold{why}; jit "
        "one step of the loop instead, or write the loop in a form tracejit captures "
        "(docs/sharp_bits.md, 'What unrolls')", where)))


def _unrolled_nest(context, body, iterator, values, trips):
    """Unrolled, with the loops nested in it seeing the product of the enclosing unrolled
    trip counts: a nest of small constant loops (5 x 5 output positions of a naive conv)
    unrolls only while that product stays under ``STATIC_UNROLL_LIMIT``, and the loop that
    would take it over is captured (one body instead of hundreds to compile)."""
    outer = getattr(context, "unrolled_trips", 1)
    context.unrolled_trips = outer * max(trips, 1)
    try:
        return _unrolled(body, iterator, values, context)
    finally:
        context.unrolled_trips = outer


def _bounds(range_args):
    args = tuple(range_args)
    if len(args) == 1:
        return 0, args[0], 1
    if len(args) == 2:
        return args[0], args[1], 1
    return args


def _locations(context, body):
    """The user's lines of a loop body's equations (``Graph.locations``)."""
    known = getattr(context, "locations", {})
    return {item.out.name: known[item.out.name] for item in body
            if isinstance(item, Eqn) and item.out.name in known}


def run_loop(context, range_function, range_args, body, names, frame_locals, location,
             reverse=None, frame_code=None):
    """Run (and, when it can, capture) one loop; returns the carried names' values.
    ``reverse`` is the ``reversed`` the user's code called (``for t in
    reversed(range(...))``), or None. ``frame_code``: the code of the frame whose
    ``locals()`` ``frame_locals`` is (the front end's call; ``container_holders``), None
    for a dict made here. While it runs, buffer writes (``hs[:, t] = h``)
    compute their values only when read (``in_loop_body``: a copy of the whole buffer per
    traced trip otherwise)."""
    if context is None:
        return _run_loop(context, range_function, range_args, body, names, frame_locals,
                         location, reverse, frame_code=frame_code)
    context.in_loop_body = getattr(context, "in_loop_body", 0) + 1
    try:
        return _run_loop(context, range_function, range_args, body, names, frame_locals,
                         location, reverse, frame_code=frame_code)
    finally:
        context.in_loop_body -= 1


class _RefusedByIndex(Refused):
    """The index decides the body's path (``if t > 0``): the same at every trip but the
    last, maybe (a reversed BPTT loop's ``t == 0``)."""


def _run_loop(context, range_function, range_args, body, names, frame_locals, location,
              reverse, peel_last=True, frame_code=None, machinery=()):
    where = f"{location[0]}:{location[1]}"

    def iterator(args):
        trips = range_function(*args)
        return reverse(trips) if reverse is not None else trips

    if reverse is not None and (reverse is not reversed or range_function is not range):
        return _unrolled(body, iterator(range_args), _carried(names, frame_locals), context)
    start, stop, step = _bounds(range_args)
    strided = _strided(context, range_function, start, stop, step, reverse, body)
    if strided is not None:  # (no tuple of the carried values here: it would hold them)
        return run_loop(context, range, strided[0], strided[1], names, frame_locals, location,
                        frame_code=frame_code)
    values = _carried(names, frame_locals)
    if reverse is not None:
        if isinstance(step, SymInt) or step not in (1, -1):
            return _unrolled(body, iterator(range_args), values, context)
        # reversed(range(a, b, s)) is range(b - s, a - s, -s) when |s| == 1 (both empty when
        # b is on the wrong side of a).
        start, stop, step = stop - step, start - step, -step
        reverse, range_args = None, (start, stop, step)
    reason = _capturable(context, range_function, start, stop, step)
    # a short constant loop of a large body: captured when iteration 0 shows it is large
    tentative = reason and _short_top_level(context, range_function, start, stop, step)
    if reason is not None and not tentative:
        if reason:
            _note(context, where, reason)
        if context is None or not all(isinstance(b, int) for b in (start, stop, step)):
            return _unrolled(body, iterator(range_args), values, context)
        return _unrolled_nest(context, body, iterator(range_args), values,
                              len(range(start, stop, step)))
    count = len(range(value_of(start), value_of(stop), step))
    if count < 3:
        _note(context, where, f"the first call runs {count} iteration(s); capture needs 3")
        return _unrolled(body, iterator(range_args), values, context)
    trips = (stop - start) * step if step in (1, -1) else None
    if isinstance(trips, SymInt) and not (trips >= 1):  # a shape guard for the peeled step
        return _unrolled(body, iterator(range_args), values, context)
    held = uncarried(names, values) or container_holders.held_elsewhere(
        names, values, frame_locals, frame_code, machinery)
    if held:  # self.cost_ = cost = [] before cost.append(c): the loop's list is a new one
        _note(context, where, held)
        return _unrolled(body, iterator(range_args), values, context)
    first = value_of(start)
    originals = values
    # What enters iteration 0, before it writes a buffer in place (hs[t] = h keeps the
    # object and moves its var): the loop's operands when that iteration joins the loop.
    entering = [_entering_var(context, value) for value in values]
    snapshots = [snapshot(value) for value in values]
    loop_selected_appends.forget(context, values)  # appends under an index test: this loop's
    recorded = len(context.body)
    attributes = loop_attribute_carries.watch(context, frame_locals)  # self.w_[1:] += ...
    # Iteration 0, recorded unrolled; at a dim-valued start (a reversed loop's T - 1) the
    # index is that dim, so what it reads follows the trip count.
    values = tuple(body(start if isinstance(start, SymInt) else first, *values))
    if tentative and not (_large(len(context.body) - recorded, count)
                          and _smooth_items(context.body[recorded:])):
        _note(context, where, reason)
        return _unrolled_nest(context, body, range(first + step, stop, step), values, count)
    if not _quiet_items(context.body[recorded:]):
        entering = None  # its guards and prints stay in the graph: it stays peeled
    try:
        # lists the body may fill through a closure (def note(v): hist.append(v)): watched
        watched = [value for name, value in frame_locals.items()
                   if name not in names and type(value) in trial_containers.KINDS]
        # and those self keeps (self.params["b2"] -= ... rebinds an entry in a trial)
        watched += loop_attribute_carries.held_containers(frame_locals)
        carried = loop_attribute_carries.carried_after(
            context, attributes, frame_locals, values, lambda why: _note(context, where, why))
        if carried is None:
            finals = _capture(context, body, names, originals, snapshots, values, start,
                              stop, step, trips if trips is not None else count, where,
                              entering, watched)
        else:
            finals = _capture(context, carried.wrap(body, len(names)),
                              (*names, *carried.names()), (*originals, *carried.originals),
                              (*snapshots, *carried.snapshots),
                              (*values, *carried.afters), start, stop, step,
                              trips if trips is not None else count, where,
                              None if entering is None else [*entering, *carried.entering],
                              watched)
            carried.store(finals[len(names):])
            finals = finals[:len(names)]
        # explain(): a note a trace on exact shapes made for this loop is outdated now
        context.captured_loops = (*getattr(context, "captured_loops", ()), where)
        return finals
    except Refused as refusal:
        # the trials' frames go now: views their trips made of outer arrays (dh = dhs[t])
        # must not stay among those arrays' views while the loop runs unrolled
        refusal.__traceback__ = None
        if peel_last and type(refusal) is _RefusedByIndex and step in (1, -1):
            # if t > 0 in reversed(range(T)): the trips after iteration 0 but the last as a
            # loop (captured when the index takes one path there), then the last unrolled
            return _with_last_peeled(context, body, names, values, start + step, stop, step,
                                     location, frame_code, (frame_locals, originals, *(
                                         kept for kept in snapshots if kept is not None)))
        _note(context, where, str(refusal))
        # The remaining trips at dims the trip count guards: a reversed loop's start is a
        # dim (range(T - 1, -1, -1)), and its later trips as plain ints would freeze the
        # first call's count for every length in the bucket.
        if isinstance(start, SymInt) or isinstance(stop, SymInt):
            return _unrolled(body, range_function(start + step, stop, step), values, context)
        return _unrolled(body, range(first + step, stop, step), values, context)


def _carried(names, frame_locals):
    return tuple(frame_locals.get(name, UNDEFINED) for name in names)


def _with_last_peeled(context, body, names, values, start, stop, step, location,
                      frame_code=None, holders=()):
    """The trips ``range(start, stop, step)`` (``|step| == 1``, at least two: the caller's
    loop ran three) as a loop over all but the last, which runs unrolled after it at its
    index (a dim when the bounds are: ``T - 1`` of a forward loop). ``frame_code`` and
    ``holders`` (the first attempt's frame locals, carried tuple and snapshots) are the machinery's
    references to the lists the loop fills (``container_holders``), with ``values``."""
    last = stop - step
    middle = _run_loop(context, range, (start, last, step), body, names,
                       dict(zip(names, values)), location, None, peel_last=False,
                       frame_code=frame_code, machinery=(values, *holders))
    return tuple(body(last, *middle))


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
        offset, scale = start + step * (n - 1), -step
    else:
        offset, scale = start, step

    def by_trip(u, *values):
        return body(offset + scale * u, *values)

    # what reads the user's index after the trips (a selected append's test: the trips
    # whose i % 4 == 0 in range(0, n, 2) are u % 2 == 0, not u % 4 == 0)
    by_trip.index_map = (offset, scale)
    return (n,), by_trip


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
    if not symbolic and trips * getattr(context, "unrolled_trips", 1) < STATIC_UNROLL_LIMIT:
        if trips < 3:
            return ""
        return (f"its trip count {trips} is a Python int, not a dynamic dim, so it is unrolled "
                "(a Python list's len() is one: pass token ids as an array, np.asarray(ids), "
                "to capture the loop)")
    return None


def _large(equations, trips):
    """Whether a short constant loop whose iteration 0 recorded ``equations`` is captured."""
    return equations >= UNROLL_BODY_MIN and equations * trips >= UNROLL_EQUATION_BUDGET


def _smooth_items(items):
    """No guard, print or jump (``discontinuities.AMBIGUITY``: a comparison, ``floor``,
    ``argmax``...) among ``items`` or in loop bodies among them. Unrolled, a short loop's
    decisions and masks read NumPy's own products (``codegen/numpy_products.py``) and
    hold; captured, they read carried values whose rounding bound grows with each trip, so
    a relu mask in a training loop (``dh[h <= 0] = 0``) failed its margin on every call
    and the call ran eagerly. Such loops stay unrolled."""
    for item in items:
        if not isinstance(item, Eqn):
            return False
        name = item.prim.name
        if name == "loop" and not _smooth_items(item.params_dict["body"].body):
            return False
        if name in AMBIGUITY and not (name == "cast" and item.out.aval.dtype.kind == "f"):
            return False
    return True


def _short_top_level(context, range_function, start, stop, step):
    """Whether the loop is a short constant one (``_capturable`` unrolls it) outside any
    other loop and gradient trace, whose size decides (``UNROLL_EQUATION_BUDGET``)."""
    if context is None or range_function is not range or getattr(
            context, "records_gradients", False) or getattr(context, "loop_indices", None):
        return False
    if getattr(context, "unrolled_trips", 1) != 1 or getattr(context, "in_loop_body", 0) > 1:
        return False
    if not all(type(bound) is int for bound in (start, stop, step)) or step == 0:
        return False
    return len(range(start, stop, step)) >= 3


def note_unrolled(context, where, reason):
    """A loop the front end did not rewrite (a break, the index read after it, ...)."""
    if context is not None and not getattr(context, "unroll_loops", False):
        _note(context, where, reason)


def _note(context, where, reason):
    log.info("loop at %s unrolled: %s", where, reason)  # (before: a count it pins retraces)
    loop_trip_counts.before_unrolling(context, where)  # range(num_iterations): pinned instead
    notes = getattr(context, "loop_notes", None)
    if notes is None:
        notes = context.loop_notes = []
    notes.append(f"loop at {where} unrolled: {reason}")


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
             where, entering, watched=()):
    """The loop equations, their results the carried values after the last trip. The
    peeled iteration 0 becomes the loop's first trip when it can (``_first_trip_fits``):
    one copy of the body's kernels, and a buffer written at the index is written in place
    from its first trip."""
    # a dict of parameters rebuilt or updated at every trip: one carried name per key
    spread = loop_dict_carries.flatten(body, names, originals, snapshots, values, entering)
    if spread is not None:
        finals = _capture(context, spread.body, spread.names, spread.originals,
                          spread.snapshots, spread.values, start, stop, step, count, where,
                          spread.entering, watched)
        return spread.regroup(finals)
    index_map = getattr(body, "index_map", None)  # a strided loop's (_strided)
    carries = carries_of(context, names, originals, snapshots, values, start, stop, step, count,
                         index_map)
    if entering is not None and _first_trip_fits(carries, entering):
        try:
            return _capture_trips(context, body, carries, start, stop, step, where,
                                  from_first=entering, watched=watched)
        except Refused:  # the index decides something at trip 0: peel it after all
            carries = carries_of(context, names, originals, snapshots, values, start, stop, step,
                                 count, index_map)
    return _capture_trips(context, body, carries, start, stop, step, where, from_first=None,
                          watched=watched)


# A dict of more keys than this entering a loop, or of keys other than strs, is no dict of
# parameters (hs[t] = h filled before): its entries are not made graph values for
# _first_trip_fits (a NumPy array's would be a constant with its snapshot).
_ENTERING_KEYS = 64


def _entering_var(context, value):
    """The var of a value entering iteration 0: a traced array's, or a NumPy array's as a
    constant of the graph (``h = np.zeros(H)``); None for anything else."""
    if isinstance(value, np.ndarray) and value.dtype != object:
        return context.atom(value)[0]
    if type(value) is dict and len(value) <= _ENTERING_KEYS and all(
            type(key) is str for key in value):  # a dict of parameters ({"W1": ...})
        return loop_dict_carries.entering_vars(
            value, lambda item: _entering_var(context, item) if type(item) is not dict else None)
    return getattr(value, "ir_var", None)


def _first_trip_fits(carries, entering):
    """Whether the values entering iteration 0 (``entering``: their vars) are what the body
    takes at every trip: arrays (no counters) of the same shapes, dtypes and weak types, and
    lists the body appends to (their buffers enter blank: ``_entering_slots``)."""
    return all(type(carry) is ArrayCarry and var is not None
               and var.aval == carry.value.ir_var.aval
               or type(carry) is ContainerCarry and carry.kind == "list"
               for carry, var in zip(carries, entering))


def _entering_slots(carries, entering):
    """The loop's operands when iteration 0 joins it: each array's var as it entered, each
    list's blank buffers (trip 0 writes its row). A list read back in the body (a window of
    earlier entries) cannot start there: refused, and the capture runs again peeled."""
    operands = []
    for carry, var in zip(carries, entering):
        if type(carry) is ContainerCarry:
            if carry.window or carry.blank_vars is None:
                raise Refused(f"`{carry.name}` is read back in the loop")
            operands += carry.blank_vars
        else:
            operands.append(var)
    return operands


def _restore(mapping, before):
    mapping.clear()
    mapping.update(before)


def _capture_trips(context, body, carries, start, stop, step, where, from_first, watched=()):
    """``from_first``: the vars entering iteration 0 when it joins the loop, else None;
    ``watched``: containers the trips must leave as they are (``trial_containers``)."""
    t1 = value_of(start) + step
    index_name = f"i{getattr(context, 'loop_count', 0)}"
    context.loop_count = getattr(context, "loop_count", 0) + 1
    guards_before = len(context.shape_guards)
    constants_before = len(context.constants)
    # A NumPy array a trial writes in place (dh0 += v on the trial's path) stands for the
    # trial's traced copy, which a refusal throws away with the trial
    replaced_before = dict(context.replaced)
    try:
        # from_first: what the trials decide about the index must hold at trip 0 too
        first = start - step if from_first is not None else start
        index = LoopIndex(context, index_name, first, stop, step)
    except IndexRefused as refusal:
        raise Refused(str(refusal)) from None
    journal, watched_before = attribute_writes.watch_local_writes(context)
    held = trial_containers.holding(context.created_objects, watched)
    try:
        slots, trial1, trial2 = traced_pair(context, body, t1, step, carries, index)
        if from_first is not None:
            _entering_slots(carries, from_first)  # a list read back: peeled after all
        if journal:  # acc = acc.add(x[t]) setting self.total: a trial's value would stay
            owner, name, _ = journal[0]
            raise Refused(f"the body writes `.{name}` of a {type(owner).__name__} made in "
                          "the call (a method it calls sets it)")
        if (container := trial_containers.changed(held)) is not None:
            raise Refused(f"the body changes a {type(container).__name__} through a call "
                          "(a method of an object made in the call, or a closure, appends "
                          "to it)")
        if not slots and not _quiet_items(trial1.recorded):
            # No loop equation would hold the body, nor its guards (n += 1 under an if on
            # data: the count of the traced path at every call)
            raise Refused("only counters are carried, and the body has guards")
        if any(type(carry) is UntouchedCarry for carry in carries) and not (
                _quiet_items(trial1.recorded) and _quiet_items(trial2.recorded)):
            # A trip whose guard fails would take the path that assigns it, and the trips
            # left after a failed guard carry slots only
            raise Refused("a name is assigned only on a path the traced iterations did not "
                          "take, and the body has guards")
        loop_write_through.check_reads(context, carries, (trial1.recorded, trial2.recorded),
                                       index_name)
        _merge_constants(context.constants[constants_before:], (trial1, trial2))
        # Comparisons and specializations of the index: the same at every trip, or refused.
        settle_guards(context, guards_before, index)
    except IndexRefused as refusal:
        del context.shape_guards[guards_before:]  # they mention the index: never entry guards
        _restore(context.replaced, replaced_before)
        attribute_writes.undo_local_writes(journal)
        trial_containers.put_back(held)
        raise _RefusedByIndex(str(refusal)) from None
    except Refused:
        del context.shape_guards[guards_before:]
        _restore(context.replaced, replaced_before)
        attribute_writes.undo_local_writes(journal)
        trial_containers.put_back(held)
        raise
    finally:
        attribute_writes.stop_watching(context, journal, watched_before)
        index.close()
    slot_names = slot_names_of(carries)
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
        locations=_locations(context, equations.body),
    )
    if getattr(context, "records_gradients", False):
        reason = unreversible(graph)  # its reverse must be a loop too
        if reason is not None:
            raise Refused(f"{reason}; the trace records gradients")
    start_expr = expr_of(start) + (0 if from_first is not None else step)
    loop_params = dict(body=graph, index=index_name, start=start_expr, stop=expr_of(stop),
                       step=step, num_carry=len(slots))
    exit = exit_position(body, carries)  # a while loop's (tracejit.tracer.while_loops)
    if exit is not None:
        loop_params["exit"] = exit
    # Real values: iterations 1 and 2 were traced on real data; the rest run when
    # something reads their results (tracejit.tracer.pending), or now.
    rest = _RemainingTrips(context, graph, index_name, t1 + 2 * step, value_of(stop), step,
                           trial2.outputs, free_vars, exit)
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
    entering = (_entering_slots(carries, from_first) if from_first is not None
                else [slot.ir_var for slot in slots])
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
        if type(carry) is ArrayCarry:
            follow_replaced(context, carry.value, returned[-1])
    note_entry_aliases(context, carries, returned, trial2.outputs)
    log.info("loop at %s captured: %d equation(s) in the body, %d carried, %d read from "
             "outside", where, len(graph.body), len(slots), len(free_vars))
    return tuple(returned)


class _RemainingTrips:
    """The first call's trips after the traced ones, through the body's NumPy reference
    (``run_body``): ``run`` now, or ``pending`` values that run them all once, when the
    first of them is read."""

    def __init__(self, context, body, index, start, stop, step, outputs, free_vars,
                 exit=None):
        # Values as they are now, maybe pending (a NumPy constant's is its snapshot).
        self.free = [context.values[var.name][0] for var in free_vars]
        self.carried = [out.lazy_value() for out in outputs]
        # What a scalar result is (a NumPy scalar, a Python float) is known now; arrays
        # are arrays.
        self.examples = [out.lazy_value() if out.shape else out.value for out in outputs]
        self.args = (body, index, start, stop, step, len(outputs))
        self.bindings = context.symbol_values()
        self.exit = exit

    def run(self, effects=None):
        try:
            finals = run_body(*self.args, [np.asarray(force(value)) for value in self.carried],
                              [force(value) for value in self.free], self.bindings, effects,
                              self.exit)
        except IndexError as error:
            # An id past the table at a later trip (out[t] = x[idx[t]]): NumPy's own error,
            # which the eager run raises at that trip too; not tracejit's, so later calls
            # at this length still trace and compile
            raise as_numpy_would(error) from None
        return [_like(final, example) for final, example in zip(finals, self.examples)]

    def pending(self):
        everything = Pending(self.run)
        return [Pending(lambda position=position: everything.force()[position],
                        like=known_kind(example))
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
