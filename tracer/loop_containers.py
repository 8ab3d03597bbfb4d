"""Dicts and lists a captured loop fills at its index (``tracejit.tracer.loops``).

Real NumPy model code keeps per-step state in Python containers::

    xs, hs, ps = {}, {}, {}
    hs[-1] = np.copy(hprev)
    for t in range(len(inputs)):
        hs[t] = np.tanh(Wxh @ xs[t] + Whh @ hs[t - 1] + bh)   # read the previous step
    ...
    outs = []
    for t in range(T):
        h = step(x[:, t], h)
        outs.append(h)
    return np.stack(outs, axis=1)

A container the body writes once per iteration - ``d[t + c] = v`` on a dict, or
``lst.append(v)`` - becomes, in the loop's IR, carried *slots*:

* a stacked **buffer** with one row per entry (the loop's entries, and for dicts the
  entries set just before the loop on the same side of the range, such as ``hs[-1]``),
  written at the index in place;
* a **window** of the last K entries the loop wrote, for reads of earlier iterations
  (``hs[t - 1]``, ``outs[-1]``): reading them from the buffer would make the buffer read
  and written in one iteration, which codegen cannot do in place.

Which reads are relative (a window slot, ``m`` iterations back) and which are fixed
(``hs[-1]`` read at every step) is found by comparing iterations 1 and 2: the same key
(dict) or position (list) means fixed, the same distance means relative. When a window is
needed, the two iterations are traced again with it.

After the loop the name holds a ``StackedDict`` or ``StackedList``
(``tracejit.tracer.stacked_containers``): reads at an int or a
dim (``hs[len(inputs) - 1]``, ``outs[-1]``) are slices of the buffer; ``np.stack(outs)``
and ``np.array(outs)`` are the buffer itself; a later captured loop reads them at its own
index; a list the function returns is made of the buffers after each call
(``tracejit.tracer.loop_rows``). Anything else (``len(hs)``, iterating, writing a new key)
turns it into a real dict or list, specializing the trip count (a shape guard, as
``int(T)`` would).

What is refused (the loop unrolls, and ``explain()`` says why): a container written at a
key that is not the index plus a constant, written twice or not at all in an iteration,
rebound in the body, read at a key that is neither fixed nor a fixed distance back, or
holding entries that change shape.
"""

from __future__ import annotations

import operator
from collections.abc import MutableMapping, MutableSequence, MutableSet

import numpy as np

from . import loop_selected_appends, ops
from .container_entries import (
    as_tracer,
    entry_leaves,
    entry_signature,
    is_index,
    number_kind,
    plain_dim,
    read_row,
    rebuild_entry,
    same_dim,
    write_row,
)
from .conversions import python_number
from .dims import SymInt, value_of
from .errors import TraceSignal
from .stacked_containers import StackedDict, StackedList
from .traced_array import Tracer, trace_error


class Refusal(TraceSignal):
    """A container cannot be carried; ``tracejit.tracer.loops`` turns it into ``Refused``."""




def uncarried(names, values):
    """Why a container the loop fills under one of ``names`` cannot be carried (a deque, a
    list subclass, a set: the same object after every trip, so a captured loop would keep
    the traced trips' entries alone), or None. Lists and dicts are carried (``snapshot``)."""
    for name, value in zip(names, values):
        if isinstance(value, (MutableSequence, MutableMapping, MutableSet)) and type(
                value) not in (list, dict):
            return (f"`{name}` is a {type(value).__name__}: a loop carries the lists and "
                    "dicts it fills, not other containers")
    return None


def snapshot(value):
    """What a container held before the loop (compared after iteration 0)."""
    if type(value) is dict:
        return ("dict", value, list(value.items()))
    if type(value) is list:
        return ("list", value, list(value))
    return None


class ContainerCarry:
    """One dict or list the loop fills: its slots, the proxy the body sees in a traced
    iteration, and what the name holds after the loop."""

    def __init__(self, context, name, snap, after, first, start, stop, step, count,
                 index_map=None):
        kind, original, before = snap
        if after is not original:
            raise Refusal(f"`{name}` is rebound inside the loop")
        self.context, self.name, self.kind = context, name, kind
        self.first, self.start, self.stop, self.step, self.count = (first, start, stop, step,
                                                                    count)
        # (offset, scale): the user's index is offset + scale * the loop's counter in a
        # strided loop (range(0, n, 2) runs as a loop over its trip number: loops._strided)
        self.index_map = index_map or (0, 1)
        self.plan = None  # None: discovery; else the read decisions, in body order
        # the index test of an append under it (tracejit.tracer.loop_selected_appends),
        # else None
        self.selected = None
        self.window = 0
        self._buffers = None
        self.blank_vars = None  # set by setup
        self.trip_leaves = []  # the entries' leaves of the last two traced trips
        if kind == "dict":
            self._init_dict(before, after)
        else:
            self._init_list(before, after)
        self.leaves0, self.structure = entry_leaves(self.entry0)
        if any(not hasattr(as_tracer(context, leaf), "ir_var") for leaf in self.leaves0):
            raise Refusal(f"`{name}` gets a Python number, not an array, at each step")
        self.leaves0 = [as_tracer(context, leaf) for leaf in self.leaves0]
        self.signatures = [entry_signature(leaf) for leaf in self.leaves0]
        self.python_numbers = [leaf.aval.weak for leaf in self.leaves0]  # .item() per trip
        # per leaf: the very value iteration 0 appended, in every traced iteration too (an
        # array from outside the loop, ``caches.append((x[t], W))``): one object in every
        # entry, as in eager's list (``returned_rows``)
        self.invariant = [True] * len(self.leaves0)

    def entry(self, buffers, row):
        """The entry appended (or stored) at ``row``, read back from ``buffers``: a Python
        number stays one (``losses.append(loss.item())`` returns floats, not np.float64).
        An array every step appends as it is (``hs.append(x)``) is that array, not its row:
        eager's entries are it, so a write into it after the loop shows in every entry."""
        return rebuild_entry([leaf if invariant else python_number(read_row(buffer, row), None)
                         if weak else read_row(buffer, row)
                         for buffer, weak, invariant, leaf in zip(
                             buffers, self.python_numbers, self.invariant, self.leaves0)],
                        self.structure)

    # --- what iteration 0 did ----------------------------------------------------------
    def _init_dict(self, before, after):
        old = dict(before)
        written = [key for key, value in after.items()
                   if key not in old or value is not old[key]]
        if any(key not in after for key in old):
            raise Refusal(f"`{self.name}` loses a key inside the loop")
        if len(written) != 1 or not is_index(written[0]):
            raise Refusal(f"`{self.name}` is a dict the loop writes {len(written)} keys of in "
                          "one iteration (captured: one key, the loop index plus a constant)")
        if abs(self.step) != 1:
            raise Refusal(f"`{self.name}`: dicts are captured in loops of step 1 or -1")
        self.offset = int(written[0]) - self.first  # d[t + offset] = ...
        self.before = old
        self.history0 = dict(after)  # keys as iteration 0 left them
        self.entry0 = after[written[0]]
        self.begin()

    def _init_list(self, before, after):
        note = loop_selected_appends.taken(self.context, after)
        if note is not None:
            self._init_selected(note, before, after)
            return
        if len(after) != len(before) + 1 or any(a is not b for a, b in zip(after, before)):
            raise Refusal(f"`{self.name}` is a list the loop changes other than by one "
                          "append per iteration")
        self.prefix = list(before)
        self.history0 = list(after)
        self.entry0 = after[-1]
        self.begin()

    def _init_selected(self, note, before, after):
        """A list appended to under a test of the index: a buffer row per trip, the
        selected rows its entries after the loop."""
        if note.calls != 1 or len(after) != len(before) + note.appended or any(
                a is not b for a, b in zip(after, before)):
            raise Refusal(f"`{self.name}` is a list the loop changes other than by one "
                          "append under a test of the index per iteration")
        offset, scale = self.index_map  # the test reads the user's index
        self.selected = loop_selected_appends.selector(note, offset + scale * self.start,
                                                       self.count, scale * self.step)
        if self.selected is None:
            raise Refusal(f"`{self.name}` is appended to under a test of the index in a loop "
                          "over a dynamic length (the selected trips would pin it; a test "
                          "that repeats, i % 100 == 0, is captured)")
        self.prefix = list(before)
        self.history0 = list(after)
        self.entry0 = note.value
        self.begin()

    def begin(self):
        """Before a traced pair of iterations: the container as iteration 0 left it."""
        self.history = type(self.history0)(self.history0)

    # --- keys, trips and rows ----------------------------------------------------------
    def trip_of_key(self, key):
        """The trip that writes dict key ``key`` (may be negative), or None off the loop's
        lattice."""
        distance = int(key) - self.offset - self.first
        return distance // self.step if distance % self.step == 0 else None

    def _pre_rows(self):
        """Dict entries set before the loop just before its first key (``hs[-1]``), with
        the entries' shape: they become the buffer's first rows in trip order."""
        rows = 0
        while True:
            key = self.first + self.offset - (rows + 1) * self.step
            value = self.before.get(key)
            if value is None or not hasattr(value, "shape") or [
                entry_signature(leaf) for leaf in entry_leaves(value)[0]] != self.signatures or (
                entry_leaves(value)[1] != self.structure
            ) or [number_kind(leaf) for leaf in entry_leaves(value)[0]] != self.python_numbers:
                return rows  # (a 0-d array before entries of float(...): read back as one)
            rows += 1

    def setup(self):
        """The initial slots for iteration 1: buffers (one per leaf), then the window."""
        context = self.context
        if self._buffers is not None:
            return list(self._buffers) + [
                leaf for m in range(1, self.window + 1) for leaf in self.past_entry(m)]
        # Dict entries before the first key (hs[-1]) join the buffer in forward loops; in a
        # reversed loop they would sit at keys that move with the trip count.
        self.pre = self._pre_rows() if self.kind == "dict" and self.step > 0 else 0
        self.rows = self.count + self.pre
        self.blank_vars = None  # the buffers before any row is written (a list's, no prefix)
        if self.selected is not None and self.rows * sum(
                int(np.prod(leaf.shape)) * dtype.itemsize
                for leaf, (_, dtype) in zip(self.leaves0, self.signatures)
        ) > loop_selected_appends.BUFFER_LIMIT:
            raise Refusal(f"`{self.name}`: an entry per trip, appended under a test of the "
                          "index, would take more than "
                          f"{loop_selected_appends.BUFFER_LIMIT >> 20} MB")
        slots = []
        for leaf, (_, dtype) in zip(self.leaves0, self.signatures):
            symbolic = next((dim for dim in (self.rows, *leaf.shape) if isinstance(dim, SymInt)),
                            None)
            buffer = ops.full((self.rows, *leaf.shape), 0, dtype, like=symbolic)
            # a constant trip count and entry shape (range(40) at exact shapes) make a
            # NumPy buffer: a traced one, as the trips write tracers into it
            slots.append(as_tracer(context, buffer))
        if self.kind == "list" and not self.pre:
            self.blank_vars = [buffer.ir_var for buffer in slots]
        for trip in range(-self.pre, 1):
            entry = self.history[self.first + self.offset + trip * self.step] if (
                self.kind == "dict") else self.entry0
            for buffer, leaf in zip(slots, entry_leaves(entry)[0]):
                write_row(buffer, self.row(trip), as_tracer(context, leaf))
        self._buffers = list(slots)
        for m in range(1, self.window + 1):
            slots.extend(self.past_entry(m))
        return slots

    def row(self, trip):
        """The buffer row of trip ``trip``: dicts in key order (so ``hs[k]`` after the loop
        is row ``k - lowest key``), lists in append order."""
        if self.kind == "list" or self.step > 0:
            return plain_dim(trip + self.pre)
        return plain_dim(self.count - 1 - trip)

    def past_entry(self, m):
        """Iteration 1's window slot ``m``: the entry written ``m`` trips before it."""
        trip = 1 - m
        if self.kind == "dict":
            key = self.first + self.offset + trip * self.step
            if key not in self.history:
                raise Refusal(f"`{self.name}[{key}]` is read by the loop but not set before "
                              "it")
            entry = self.history[key]
        else:
            position = len(self.prefix) + trip
            if position < 0:
                raise Refusal(f"`{self.name}` is read {m} entries back before it has them")
            entry = self.history[position]
        leaves, structure = entry_leaves(entry)
        if structure != self.structure or [
                entry_signature(leaf) for leaf in leaves] != self.signatures:
            raise Refusal(f"`{self.name}`'s entries change shape or dtype in the loop")
        return [as_tracer(self.context, leaf) for leaf in leaves]

    @property
    def slot_count(self):
        return len(self.leaves0) * (1 + self.window)

    # --- a traced iteration --------------------------------------------------------------
    def enter(self, t, slots):
        proxy_type = _DictInLoop if self.kind == "dict" else _ListInLoop
        return proxy_type(self, t, list(slots))

    def leave(self, proxy, returned):
        if returned is not proxy:
            raise Refusal(f"`{self.name}` is rebound inside the loop")
        if self.selected is not None and not getattr(proxy, "_selected", False):
            raise Refusal(f"`{self.name}` is appended to under a test of the index and "
                          "otherwise")
        if proxy._current is None:
            raise Refusal(f"`{self.name}` is not written in every iteration")
        leaves, structure = entry_leaves(proxy._current)
        if structure != self.structure:
            raise Refusal(f"`{self.name}`'s entries change structure in the loop")
        leaves = [as_tracer(self.context, leaf) for leaf in leaves]
        self.invariant = [same and leaf is first for same, leaf, first in zip(
            self.invariant, leaves, self.leaves0)]
        self.trip_leaves = [*self.trip_leaves[-1:], leaves]
        if [entry_signature(leaf) for leaf in leaves] != self.signatures:
            raise Refusal(f"`{self.name}`'s entries change shape or dtype in the loop")
        width = len(self.leaves0)
        buffers = proxy._slots[:width]
        for buffer, leaf in zip(buffers, leaves):
            write_row(buffer, self.row(proxy._row_trip), leaf)
        window = proxy._slots[width:]
        shifted = (leaves + window)[: width * self.window]
        if self.kind == "dict":
            self.history[value_of(proxy._key)] = proxy._current
        else:
            self.history.append(proxy._current)
        return buffers + shifted

    def decide(self, reads1, reads2):
        """The read plan from two discovery iterations' reads; True if a window is needed
        (the iterations must be traced again)."""
        if len(reads1) != len(reads2):
            raise Refusal(f"`{self.name}` is read a different number of times in iterations "
                          "1 and 2")
        plan = []
        for first, second in zip(reads1, reads2):
            if first[0] == second[0] == "current":
                plan.append(("current", None))
            elif first[0] == second[0] == "at" and first[1] == second[1]:
                plan.append(("fixed", first[1]))
            elif first[0] == second[0] == "back" and first[2] == second[2]:
                plan.append(("window", first[2]))
            else:
                raise Refusal(f"`{self.name}` is read at {first[1]!r} in iteration 1 and at "
                              f"{second[1]!r} in iteration 2: neither a fixed key nor a fixed "
                              "distance back")
        self.plan = plan
        self.window = max([m for kind, m in plan if kind == "window"], default=0)
        return self.window > 0

    # --- after the loop ------------------------------------------------------------------
    def after(self, slot_values):
        buffers = list(slot_values[: len(self.leaves0)])
        if self.kind == "dict":
            low = plain_dim(self.start + self.offset - self.pre if self.step > 0 else
                         self.start + self.offset - (self.count - 1))
            return StackedDict(self, buffers, low)
        if self.selected is not None:  # the rows of the trips whose test holds
            offset, scale = self.index_map
            rows, count = loop_selected_appends.selection(
                self.selected, offset + scale * self.first, self.count, scale * self.step,
                buffers[0])
            return StackedList(self, [buffer[rows] for buffer in buffers], count)
        return StackedList(self, buffers)


def note_entry_aliases(context, carries, returned, outputs):
    """After a captured loop: the arrays its container entries are in eager, besides the
    rows the compiled entries are. ``hs.append(h)`` of the carried ``h`` makes the last entry
    the ``h`` the loop leaves; ``hs.append(x[t])`` makes entries views of ``x``. An in-place
    write into such an array, or into an entry, after the loop shows on the other side in
    NumPy and not in the loop's buffers: ``alias_error`` refuses it (the call runs eagerly).
    ``returned``: each carry's value after the loop; ``outputs``: the slots' values at the
    end of the last traced trip."""
    position, ends = 0, {}
    for carry, value in zip(carries, returned):
        if carry.slot_count == 1 and isinstance(value, Tracer):
            ends[id(outputs[position])] = (value, carry.name)
        position += carry.slot_count
    for carry, value in zip(carries, returned):
        trips = carry.trip_leaves if isinstance(carry, ContainerCarry) else None
        if not trips or not isinstance(value, (StackedList, StackedDict)):
            continue
        targets = []
        for number, leaf in enumerate(trips[-1]):
            if carry.invariant[number]:
                continue
            root = leaf.base_or_none()
            for candidate in (leaf, root):
                if candidate is not None and id(candidate) in ends:
                    targets.append(ends[id(candidate)])
            if root is not None and len(trips) > 1 and number < len(trips[0]) and (
                    trips[0][number].base_or_none() is root):  # the same array at every trip
                targets.append((root, None))
        if not targets:
            continue
        aliases = context.__dict__.setdefault("entry_aliases", {})
        reason = (f"`{carry.name}`'s entries, filled by a captured loop, are in NumPy "
                  "{} (shared memory), and compiled entries are copies")
        for target, name in targets:
            aliases[id(target)] = (target, reason.format(f"`{name}` itself" if name else
                                                         "views of an array written here"))
        for buffer in value._buffers:
            aliases[id(buffer)] = (buffer, reason.format("arrays shared with other names"))


def alias_error(context, value):
    """The refusal ``note_entry_aliases`` noted for an in-place write into ``value``, as a
    ``TraceError`` naming the user's line, or None."""
    noted = getattr(context, "entry_aliases", {}).get(id(value))
    if noted is None or noted[0] is not value:
        return None
    return trace_error(f"an in-place write into an array a captured loop's list or dict "
                       f"shares: {noted[1]}; NumPy's write would show in both. Write into a "
                       "copy, or append a copy (hs.append(h.copy()))")


class _InLoop:
    """What the body sees as a container in a traced iteration. The index ``t`` is a
    ``SymInt`` (``tracejit.tracer.loop_index``): ``_row_trip`` is the trip as a dim (where the
    entry goes in the buffer), ``_trip`` its value in this trial (bookkeeping of what
    iteration 0 left, keyed by concrete values as the real container is)."""

    def __init__(self, carry, t, slots):
        self._carry, self._t, self._slots = carry, t, slots
        # a list's row counts from the loop's start as a dim: from its value, a reversed
        # loop's row (first - t) would be >= 0 only up to this call's first index, a shape
        # guard that pinned the length
        start = carry.start if carry.kind == "list" and abs(carry.step) == 1 else carry.first
        self._row_trip = plain_dim((t - start) * carry.step if abs(carry.step) == 1 else
                                (t - start) // carry.step)
        self._trip = (value_of(t) - carry.first) // carry.step
        self._current, self._reads = None, []

    def _distance(self, trip):
        """How many trips back ``trip`` (a dim of the index or an int) is, as an int, or
        None when that is not the same at every trip (a fixed entry: an int trip)."""
        if not isinstance(trip, SymInt):
            return None
        distance = plain_dim(self._row_trip - trip)
        if not isinstance(distance, int):
            raise Refusal(f"`{self._carry.name}` is read at a key that is not the loop index "
                          "plus a constant")
        return distance

    def _refuse(self, what):
        raise Refusal(f"`{self._carry.name}.{what}` inside the loop (captured: reads at a key, "
                      "one write per iteration)")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._refuse(f"{name}(...)")

    def _read(self, key, trip, fixed):
        """The entry at ``key`` (its trip ``trip`` or None), by the plan when there is one.
        ``fixed`` reads the container as iteration 0 left it. ``key`` and ``trip`` are ints
        for a fixed entry (``hs[-1]``), dims of the index for a relative one (``hs[t - 1]``,
        decided exactly: no inference from the two trials' values)."""
        carry = self._carry
        distance = self._distance(trip)
        if distance == 0 and self._current is not None:
            record = ("current", value_of(key), 0)
        elif distance is not None:
            if distance <= 0:
                raise Refusal(f"`{carry.name}` is read at the loop index or after it before "
                              "the loop writes there")
            record = ("back", value_of(key), distance)
        else:
            record = ("at", key, None)
        number = len(self._reads)
        self._reads.append(record)
        if record[0] != "current":
            return self._entry(self._read_planned(record, number, key, trip, fixed))
        return self._read_planned(record, number, key, trip, fixed)

    def _entry(self, value):
        """An entry of an earlier trip or from before the loop, noted as one: NumPy would
        update it in the list too if the body updated it in place (``prev = hs[-1]``, then
        ``prev *= 0.5``), which a captured loop cannot (``note_entry_read``)."""
        note_entry_read(self._t, value, Refusal(
            f"an entry read from `{self._carry.name}` is updated in place in the body"))
        return value

    def _read_planned(self, record, number, key, trip, fixed):
        carry = self._carry
        if carry.plan is None:  # discovery: the real value, wherever it is
            if record[0] == "current":
                return self._current
            return fixed()
        if number >= len(carry.plan):
            raise Refusal(f"`{carry.name}` is read more often in a later iteration")
        kind, expected = carry.plan[number]
        if kind == "current" and record[0] == "current":
            return self._current
        if kind == "fixed" and record[0] == "at" and record[1] == expected:
            if trip is not None and trip >= 1:
                raise Refusal(f"`{carry.name}[{key!r}]` is read before the loop writes it")
            return fixed()
        if kind == "window" and record[0] == "back" and record[2] == expected:
            width = len(carry.leaves0)
            leaves = self._slots[width * expected: width * (expected + 1)]
            return rebuild_entry(leaves, carry.structure)
        raise Refusal(f"`{carry.name}` is read at {key!r}, where iterations 1 and 2 read "
                      "differently")


def note_entry_read(index, value, refusal):
    """``value`` was read from a list or dict a captured loop over ``index`` carries: an
    in-place update of it while that loop's trial runs raises ``refusal``
    (``entry_refusal``), and the loop runs unrolled."""
    context = getattr(index, "context", None)
    if isinstance(value, (Tracer, np.ndarray)) and context is not None:
        if not hasattr(context, "loop_entry_reads"):
            context.loop_entry_reads = {}
        # (the value is kept alive, so its id stays its own)
        context.loop_entry_reads[id(value)] = (value, refusal, index.expr.symbols())


def entry_refusal(context, value):
    """The refusal noted for an in-place update of ``value`` in the trial of a captured
    loop running now (``note_entry_read``), or None."""
    noted = getattr(context, "loop_entry_reads", {}).get(id(value))
    if noted is None or noted[0] is not value:
        return None
    active = getattr(context, "loop_indices", None) or {}
    return noted[1] if not noted[2].isdisjoint(active) else None


def is_in_loop(container):
    """A list or dict as a captured loop's body sees it (``hs`` of ``hs.append(h)``)."""
    return isinstance(container, _InLoop)


class _DictInLoop(_InLoop):
    @property
    def _key(self):
        return self._t + self._carry.offset

    def __setitem__(self, key, value):
        if not same_dim(key, self._key):
            raise Refusal(f"`{self._carry.name}[{key!r}] = ...` writes a key that is not the "
                          "loop index plus a constant")
        self._current = value

    def __getitem__(self, key):
        carry = self._carry
        key = plain_dim(key)
        if isinstance(key, SymInt):  # hs[t - 1]: a dim of the index
            trip = plain_dim((key - carry.offset - carry.first) // carry.step)
            concrete = value_of(key)
        elif is_index(key):
            trip, concrete = carry.trip_of_key(key), key
        elif isinstance(key, (str, tuple)):
            trip, concrete = None, key
        else:
            raise Refusal(f"`{self._carry.name}` is read at {key!r} inside the loop")

        def fixed():
            return carry.history[concrete]  # KeyError where eager raises it

        return self._read(key, trip, fixed)

    def __contains__(self, key):
        self._refuse("__contains__")


class _ListInLoop(_InLoop):
    def append_selected(self, value):
        """``append_when`` in a traced trip: True when this list takes the value at every
        trip (its carry selects the rows after the loop)."""
        if self._carry.selected is None:
            return False
        if self._current is not None:
            raise Refusal(f"`{self._carry.name}.append` runs twice in one iteration")
        self._current, self._selected = value, True
        return True

    def append(self, value):
        if self._carry.selected is not None:
            raise Refusal(f"`{self._carry.name}` is appended to under a test of the index and "
                          "otherwise")
        if self._current is not None:
            raise Refusal(f"`{self._carry.name}.append` runs twice in one iteration")
        self._current = value

    def __setitem__(self, key, value):
        # hs[-1] = hs[-1] - 0.1 * hs[-3]: the entry this iteration appended, corrected
        if is_index(key) and key == -1 and self._current is not None:
            self._current = value
            return
        self._refuse("__setitem__")

    def _length(self):
        """The list's length in this iteration: a dim of the index."""
        if self._carry.selected is not None:
            raise Refusal(f"`{self._carry.name}` is read in the loop that appends to it under "
                          "a test of the index")
        return plain_dim(len(self._carry.prefix) + self._row_trip
                      + int(self._current is not None))

    def __len__(self):
        return operator.index(self._length())  # an int: specialized (refused at capture)

    def __getitem__(self, key):
        if not is_index(key):
            raise Refusal(f"`{self._carry.name}[{key!r}]` inside the loop (captured: reads "
                          "at an int)")
        length = self._length()
        position = plain_dim(int(key) + length) if key < 0 else int(key)
        if not 0 <= position < length:
            raise IndexError("list index out of range")
        carry = self._carry
        trip = plain_dim(position - len(carry.prefix))
        concrete = value_of(position)

        def fixed():
            return carry.history[concrete]

        return self._read(position, trip, fixed)

