"""One trip of a loop with data-dependent exits, as Python runs it or traced for capture
(``tracejit.tracer.while_loops`` splits the body and runs the loop).

The front end splits the body at its top-level exits, ``if <test>: break`` and ``if
<test>: continue`` (a ``while <cond>:`` loop starts with the exit ``until cond``), into
segment functions ``segment_k(t, *within)`` and test functions ``test_k(t, *within)``
(``within``: the carried names, then the names a segment hands on to a later one)::

    for it in range(max_iter):
        grad = ...                           # segment 0
        if not np.isfinite(grad).all():      # test 0: break
            break
        if np.abs(grad).max() < tol:         # test 1: break
            break
        step = lr * grad                     # segment 1 .. 2
        if np.abs(step).max() > clip:        # test 2: continue (this trip changes nothing
            continue                         #   more: the values at the continue)
        w = w - step                         # segment 3

A traced trip (``trip``) runs every segment and decides every exit as traced bools: the
lanes still ``active`` after test ``k`` (no exit taken so far in the trip) take segment
``k + 1``'s values, the others keep theirs, and ``stop`` gathers the breaks::

    result = segment_0(...)
    for each test k:  ends = test_k(...); stop |= active & ends (a break);
                      active &= ~ends; result = where(active, segment_k+1(...), result)
    carried' = where(done, carried, result);  done' = done | stop

which, with one break, is the ``where(done, carried, where(stop, at_break, after))`` of
``while_loops``. Trip 0 of the first call is recorded the same way (``first``), except
that where this call's own path takes a break there on a Python decision the loop ends
as Python decides (a guard per decision: the trips after the break are not run, even
traced), and that carries whose kinds change in it (a NumPy 0-d array becoming a scalar)
are decided as Python decides too. A break there on a traced test is recorded as any
trip's (trips 1 and 2 are traced with ``done`` set, changing nothing), so the loop is
captured even when the first call exits at once. ``written_trips`` runs trips as Python
runs them.
"""

from __future__ import annotations

import numpy as np

from . import exit_ints
from .conversions import python_number
from .exit_tests import Logic
from .ir import Guard
from .loop_generalize import Refused
from .margin_rules import reads_unmodelled

_LOGIC = Logic()


class Stop(Exception):  # noqa: N818 (control flow inside run_while, never escapes it)
    """The loop ended (as Python decides): the carried values, whether by a ``break``."""

    def __init__(self, values, broke):
        super().__init__()
        self.values, self.broke = values, broke


# --- as Python runs it ----------------------------------------------------------------------
def written_trips(trips, functions, values):
    """``trips`` run as Python runs them (a guard per decision when tracing): the carried
    values, then whether the loop ended by a ``break`` (None: not ended)."""
    count = len(values)
    for t in trips:
        values, ended = written_trip(t, functions, values, count)
        if ended is not None:
            return (*values, ended)
    return (*values, None)


def written_trip(t, functions, values, count, start=0, within=None):
    """One trip as Python runs it, from test ``start`` on ``within`` (else from the top):
    the carried values and None, or the values at the exit taken and whether it was a
    ``break``."""
    segments, tests = functions[:2]
    if within is None:
        within = tuple(segments[0](t, *values, *_unset(segments[0], count)))
    for k in range(start, len(tests)):
        kind, test, _, payload = tests[k]
        ends = test(t, *within)
        if (not ends) if kind == "until" else ends:
            if payload is not None:
                within = tuple(payload(t, *within))
            if kind == "continue":
                return tuple(within[:count]), None
            return tuple(within[:count]), kind == "break"
        within = tuple(segments[k + 1](t, *within))
    return tuple(within[:count]), None


def _unset(segment, count):
    """What the first segment takes for the names handed on within a trip: unset."""
    from .loops import UNDEFINED  # cycle: loops -> while_loops -> here

    return (UNDEFINED,) * (segment.__code__.co_argcount - 1 - count)


# --- traced for capture ---------------------------------------------------------------------
def trip(context, t, carried, done, functions, count, int_positions, first):
    """A trip traced for capture: the carried values it leaves and ``done``; ``first``: trip
    0 of the first call (``done`` is False)."""
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here
    segments, tests, loose = functions
    if not first and not all(isinstance(value, Tracer) for value in (*carried, done)):
        raise Refused("a carried value is not an array (a Python number or a container)")
    outer_writes = getattr(context, "trial_writes", None)
    outer_zero = getattr(context, "exit_trip_zero", False)
    if first:  # Tracer._update journals the trip's in-place writes here (and a NumPy array
        # written is a traced copy: Hooks.set_item)
        context.trial_writes, context.exit_trip_zero = {}, True
        start = _Point(context, carried)
    try:
        before = [_kept(context, value) for value in carried]
        within = tuple(segments[0](t, *carried, *_unset(segments[0], count)))
        result = _ints_traced(context, [_kept(context, value) for value in within[:count]],
                              int_positions)
        ended = []  # first: how to end the loop as Python does, where it ends at trip 0
        try:
            values = _trip_tests(context, t, carried, done, functions, count, int_positions,
                                 first, before, within, result, ended)
        except Stop:
            raise
        except Exception:
            if not ended:
                raise
            # The rest of trip 0, which this call never runs, failed (x[t] of an empty x):
            # the loop ends here as Python ends it, as before a traced exit was kept traced
            return ended[0]()
        if first and start.wrote_outside(carried):
            # o.log[t] = v after a traced exit: an array no carried name holds, written
            # whether or not the exit was taken (only carried values are chosen by it).
            # Trip 0 as Python runs it, its decisions guards (the trials refuse the capture
            # for such a write too: the loop runs as written)
            start.restore()
            left, broke = written_trip(t, functions, carried, count)
            if broke is not None:
                raise Stop(left, broke)
            return (*(_traced(context, value) for value in _ints_traced(
                context, left, int_positions)), _false(context))
        return values
    finally:
        if first:  # the trip's journal: the outer one's again
            writes, context.trial_writes = context.trial_writes, outer_writes
            context.exit_trip_zero = outer_zero
            for key, entry in writes.items() if outer_writes is not None else ():
                outer_writes.setdefault(key, entry)


class _Point:
    """How the trace of trip 0 of the first call stood at one point, to go back to: its
    equations, the arrays the trip writes in place after it (traced ones as ``trial_writes``
    journals them, their state here; NumPy ones in ``values``, from a copy: ``np.zeros`` of
    a static shape written with a constant) and the traced stand-ins of NumPy arrays."""

    def __init__(self, context, values):
        self.context, self.mark = context, len(context.body)
        self.written = {key: _state(entry[0]) for key, entry in context.trial_writes.items()}
        self.numpy_values = [(value, value.copy()) for value in values
                             if type(value) is np.ndarray and value.flags.writeable]
        self.replaced = dict(context.replaced)

    def restore(self):
        context = self.context
        del context.body[self.mark:]
        for key, entry in context.trial_writes.items():
            array, var, value, shape = self.written.get(key, entry)
            array.ir_var, array.raw_value, array.shape = var, value, shape
        for array, value in self.numpy_values:
            np.copyto(array, value)
        context.replaced.clear()
        context.replaced.update(self.replaced)

    def wrote_outside(self, carried):
        """Whether the trip since this point wrote in place into an array made before it that
        no carried name holds (a carried one is chosen by the exits: ``_into``)."""
        made = {item.out.name for item in self.context.body[self.mark:]
                if hasattr(item, "prim") and hasattr(item, "out")}
        holders = {id(value) for value in carried} | {
            id(self.context.replaced.get(id(value))) for value in carried}
        return any(getattr(var, "name", None) not in made and id(array) not in holders
                   for array, var, _, _ in self.context.trial_writes.values())


def _state(array):
    return array, array.ir_var, array.raw_value, array.shape


def _trip_tests(context, t, carried, done, functions, count, int_positions, first, before,
                within, result, ended):
    """The tests and segments of ``trip`` after its first segment; ``ended`` receives, on
    trip 0 of the first call, how to end the loop where this call's traced test ends it."""
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here
    segments, tests, loose = functions
    previous = result  # the values as the body left them last (np.where makes 0-d arrays)
    active = stop = None  # traced bools; None: every path so far
    path = []  # first: the decisions on this call's own path
    left = None  # first: the values where this call's path continued, if it did
    for k, (kind, test, logic, payload) in enumerate(tests):
        mark = len(context.body)
        ends = _ends(kind, test, logic, t, within)
        if not first and any(isinstance(item, Guard) for item in context.body[mark:]):
            # an ``if`` in a function the test calls, or an ``and`` whose right operand
            # raised where the left one was false (exit_tests): a guard in the body that
            # fails at the exit of every call; as written, a trip count compiles
            raise Refused("the exit test decides with a guard (an and/or, an if in it)")
        traced = isinstance(ends, Tracer) and ends.shape == () and ends.dtype == np.bool_
        if not traced and not first:
            raise Refused("the body has break on a test that is no traced bool scalar")
        if first and left is None:
            # A traced test ending this call's loop at trip 0 stays traced: the loop is
            # captured all the same (the trips after it change nothing), so a first call
            # that exits at once compiles the loop, not that exit alone (a later call
            # running longer compiled it again). A Python decision ends it as Python does.
            if not traced and bool(ends) and kind != "continue":
                for decision in path:
                    bool(decision)
                broke = bool(ends) and kind == "break"
                if payload is not None:
                    within = tuple(payload(t, *within))
                raise Stop(tuple(within[:count]), broke)  # this path's own values
            if traced:
                path.append(ends)
                if not ended and bool(ends.value) and kind != "continue":
                    ended.append(_ender(context, list(path), within, payload, t, count,
                                        kind == "break"))
            elif not bool(ends):
                within = tuple(segments[k + 1](t, *within))
                result = _merged(context, active, within[:count], result, int_positions)
                continue  # decided by no traced value: nothing changes on any path
        if not traced:
            ends = _constant(context, bool(ends))
        if not first and _unchecked_by_discontinuities(context, ends):
            # The decision as an if's: a guard that always holds on a predicate as uncertain
            # as ``ends``, so guard_margins gives it the margin guard ``if ends:`` would have
            # (a test rounding could flip sends the call to NumPy)
            bool(np.logical_or(ends, np.logical_not(ends)))
        taken = ends if active is None else np.logical_and(active, ends)
        exit_values = within[:count]
        if payload is not None:  # the values of the lanes that leave here
            exit_values = tuple(payload(t, *within))[:count]
            leaving = _ints_traced(context, [_kept(context, value) for value in exit_values],
                                   int_positions)
            if not all(_same_type(a, b, kind=first or position not in loose)
                       for position, (a, b) in enumerate(zip(previous, leaving))):
                if not first:
                    raise Refused("an exit's statements change a carried value's kind")
                if left is None and bool(ends.value):
                    left = exit_values
                return _decided(
                    context, path, left, int_positions, lambda k=k, within=within: written_trip(
                        t, functions, None, count, k + 1, tuple(segments[k + 1](t, *within))))
            result = [np.where(taken, a, b) for a, b in zip(leaving, result)]
        if first and left is None and bool(ends.value):  # this call's trip continues here
            left = [_kept(context, value) for value in exit_values]
        if kind != "continue":
            stop = taken if stop is None else np.logical_or(stop, taken)
        active = np.logical_not(ends) if active is None else np.logical_and(
            active, np.logical_not(ends))
        within = tuple(segments[k + 1](t, *within))
        after = _ints_traced(context, within[:count], int_positions)
        if not first:
            for name_values in zip(before, result, after):
                if not all(_same_type(name_values[0], value) for value in name_values[1:]):
                    raise Refused("a carried value changes shape or dtype in the loop")
        elif not all(_same_type(a, b, kind=True) for a, b in zip(previous, after)):
            # values of other kinds at an exit: this call's path as Python decides it
            return _decided(
                context, path, left, int_positions,
                lambda k=k, within=within: written_trip(t, functions, None, count, k + 1, within))
        previous = after
        result = _merged(context, active, after, result, int_positions)
    lefts = _ints_traced(context, within[:count], int_positions)  # (ints: weak, as carried)
    if first:
        return (*(_into(context, entered, left_value, value) for entered, left_value, value
                  in zip(carried, lefts, result)),
                stop if stop is not None else _false(context))
    new = [_into(context, entered, left_value, np.where(done, old, value))
           for entered, left_value, old, value in zip(carried, lefts, before, result)]
    return (*new, done if stop is None else np.logical_or(done, stop))


def _ender(context, path, within, payload, t, count, broke):
    """A function ending the first call's loop at trip 0 as Python ends it there: a guard
    per decision on its ``path`` and the values at the exit (the trace's equations after
    it are dropped: Python does not run them, and the arrays the trip writes in place after
    it, ``count += 1`` after the exit, hold their values at the exit again: ``_Point``)."""
    exit_point = _Point(context, within)

    def end():
        exit_point.restore()
        for decision in path:
            bool(decision)
        values = within if payload is None else tuple(payload(t, *within))
        raise Stop(tuple(values[:count]), broke)

    return end


def _decided(context, path, left, int_positions, rest):
    """Trip 0 of the first call as Python decides it: a guard per decision on its path,
    and the values it left (``left``, where it continued) or those of the ``rest`` of the
    trip run as written."""
    for decision in path:
        bool(decision)
    if left is None:
        left, ended = rest()
        if ended is not None:
            raise Stop(left, ended)
    return (*(_traced(context, value) for value in _ints_traced(context, left, int_positions)),
            _false(context))


def _ends(kind, test, logic, t, within):
    """Whether test ``test`` ends the trip, with an ``and``/``or``/``not`` in it joined into
    one traced bool (``exit_tests``)."""
    ends = logic(_LOGIC, t, *within) if logic is not None else test(t, *within)
    if kind != "until":
        return ends
    return np.logical_not(ends) if hasattr(ends, "ir_var") else not ends


def _merged(context, active, after, result, int_positions):
    """The carried values after a segment: ``after`` where the trip is still ``active``."""
    after = _ints_traced(context, [_kept(context, value) for value in after], int_positions)
    if active is None:
        return list(after)
    return [np.where(active, a, r) for a, r in zip(after, result)]


def written_after_refusal(t, carried, done, functions, count, broke):
    """A trip after a refused capture, as Python runs it (guards on the decisions)."""
    if bool(done):
        raise Stop(tuple(carried), broke)
    values, ended = written_trip(t, functions, carried, count)
    if ended is not None:
        raise Stop(values, ended)
    return (*values, np.asarray(False))


def _constant(context, value):
    atom, _, _ = context.atom(np.asarray(value))
    return context.tracer_for(atom)


def _ints_traced(context, values, int_positions):
    """The trip's ``values`` with the carried Python ints (``it + 1``, the index copy: an
    int or the loop's ``SymInt``) as traced weak ints, which the loop carries."""
    return [exit_ints.as_traced(context, value) if position in int_positions else value
            for position, value in enumerate(values)]


def _unchecked_by_discontinuities(context, stop):
    """Whether the trip's ``where`` on ``stop`` may go unchecked by the discontinuity
    checks (which check the jumps of the body on the values it carries: ``loop_bounds``):
    ``stop`` reads a float32 matmul, a convolution, an einsum, a float product or a nested
    loop (``margin_rules.reads_unmodelled``). Elsewhere those checks decide the exit as
    NumPy does (the argmin of k-means, checked, is then exact: a guard's margin on it would
    always fail)."""
    producers = {item.out.name: item for item in context.body
                 if hasattr(item, "prim") and hasattr(item, "out")}
    return reads_unmodelled(producers, stop.ir_var)


def _into(context, entered, left, value):
    """The trip's chosen ``value`` for a name that entered as ``entered`` and that the body
    left as ``left``: written into ``left`` when the body updated the entering array in
    place (an argument's ``buf[0] += 1``, a view's ``row += x``, a NumPy array it turned
    into a traced copy): the caller's array, the base and other names see it, as NumPy's
    in-place writes show there; else ``value`` itself."""
    from .traced_array import Tracer, trace_error  # cycle: traced_array -> ... -> here

    in_place = isinstance(left, Tracer) and (left is entered or isinstance(
        entered, np.ndarray) and context.replaced.get(id(entered)) is left)
    if not in_place and _shares_memory(entered):
        # v = base[1:]; while ...: v = v / 2; then v += 1: after a loop that ran no trip v
        # is still the view (the write reaches base), else a new array
        raise trace_error("a loop with a data-dependent exit rebinds a name that shares "
                          "memory with another (a view, or an array others view): after "
                          "it the name is that array or a new one by the trip count, which "
                          "compiled code cannot follow; the call runs eagerly")
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


def _shares_memory(value):
    """A traced array that is a view of another, or that live views show."""
    from .traced_array import Tracer  # cycle: as in _into

    if not isinstance(value, Tracer):
        return False
    return (value.view_base is not None and value.view_base() is not None) or bool(
        value.views)


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
        kept = context.tracer_for(value.ir_var)
        kept.raw_value = value.raw_value  # (of its kind: z += v keeps a 0-d array one)
        return kept
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
