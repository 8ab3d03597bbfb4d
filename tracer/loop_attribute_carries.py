"""Arrays an object keeps in its attributes that a loop writes: carried by the loop.

Sebastian Raschka's classifiers keep their weights on ``self`` and train them in place,
read through a method of ``self``::

    self.w_ = rgen.normal(loc=0.0, scale=0.01, size=1 + X.shape[1])
    for i in range(self.n_iter):
        output = self.activation(self.net_input(X))     # np.dot(X, self.w_[1:]) + ...
        errors = y - output
        self.w_[1:] += self.eta * X.T.dot(errors)
        self.w_[0] += self.eta * errors.sum()

A captured loop carries local names, and a method reads the attribute, not a local (the
front end's ``loop_attributes`` cannot hoist it). So the trace carries the attribute
itself: ``watch`` notes what the objects the function holds in its locals keep in their
attributes before iteration 0; ``carried_after`` finds those iteration 0 wrote (in place:
the array's var moved; or rebound: ``self.w_ = self.w_ - ...``, ``self.b -= db`` of a
number) and wraps the body so each traced trip finds its block parameter in the
attribute and gives back what the attribute holds after it; ``AttributeCarries.store``
puts the loop's results there. The written values are this trace's (set by the call, in
this trace), so they are the call's attribute writes (``attribute_writes``): a compiled
call stores the loop's final values, and a side exit stores nothing.

Not carried (the loop unrolls, as before): an attribute whose array something else holds
too (``w = self.w_`` before the loop: eager's in-place writes show through ``w``, and
the trips would write a parameter ``w`` does not see), an array read from outside the
call (``self.w_`` set before it: its writes are the argument writes of
``argument_writes``), and an attribute of an object made in the call.

>>> import numpy as np, tracejit as tj
>>> class Adaline:
...     def fit(self, X, y, n):
...         self.w_ = np.zeros(X.shape[1])
...         for i in range(n):
...             self.w_ += 0.01 * X.T.dot(y - self.output(X))
...         return self.w_
...     def output(self, X):
...         return X.dot(self.w_)
>>> model = Adaline()
>>> f = tj.jit(model.fit, cache="memory")
>>> X, y = np.ones((4, 2)), np.arange(4.0)
>>> bool(np.allclose(f(X, y, 50), Adaline().fit(X, y, 50)))
True
>>> for n in (60, 70, 1000):   # (the first call's exact count, then a dim: trip_counts)
...     _ = f(X, y, n)
>>> f.stats()["compiles"], f.stats()["compiled_calls"]
(2, 2)
>>> bool(np.allclose(model.w_, Adaline().fit(X, y, 1000)))
True
"""

from __future__ import annotations

import collections
import types

import numpy as np

from . import attribute_writes, list_appends
from .loop_containers import snapshot
from .loop_generalize import Refused
from .pending import known_kind
from .stacked_containers import plain_containers
from .traced_array import Tracer

_MISSING = object()


class _Slot:
    """``owner.name`` (an attribute some object of the function's locals keeps), or with
    ``item``, ``owner.name[item]``: an entry of a dict that attribute holds (a class
    keeping its parameters in ``self.params``)."""

    def __init__(self, owner, name, local, item=_MISSING):
        self.owner, self.name, self.local, self.item = owner, name, local, item
        self.key = (id(owner), name)  # (the attribute's, for attribute_writes' records)
        self.holder = vars(owner) if item is _MISSING else vars(owner)[name]
        self.at = name if item is _MISSING else item

    def get(self):
        return self.holder.get(self.at, _MISSING)

    def set(self, value):
        if self.item is _MISSING:
            setattr(self.owner, self.name, value)
        else:
            self.holder[self.at] = value

    def __str__(self):
        entry = "" if self.item is _MISSING else f"[{self.item!r}]"
        return f"{self.local}.{self.name}{entry}"


def _objects(frame_locals):
    """``(local name, object)`` for the user's objects among ``frame_locals`` (``self``):
    instances of classes a class statement made, with a ``__dict__``."""
    seen = set()
    for local, value in frame_locals.items():
        if id(value) in seen or local.startswith("__tracejit") or not _users(value):
            continue
        seen.add(id(value))
        yield local, value


def _users(value):
    """An object of a class a class statement of the user's made, with a ``__dict__``,
    whose attributes are read and written as Python does: no ``__setattr__`` or
    ``__getattribute__`` of the class (a carry sets the attribute at every trip, where
    eager's in-place writes set nothing)."""
    kind = type(value)
    return bool(kind.__flags__ & _HEAP_TYPE) and kind.__setattr__ is object.__setattr__ and (
        kind.__getattribute__ is object.__getattribute__) and not isinstance(
        value, (type, types.ModuleType, types.FunctionType, types.MethodType, np.ndarray,
                Tracer)) and type(getattr(value, "__dict__", None)) is dict


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class a class statement made


def held_containers(frame_locals):
    """The lists, dicts and sets the user's objects among ``frame_locals`` keep in their
    attributes (``self.params``): a traced trip that rebinds an entry there (``self.params
    ["b2"] -= db`` of a float) must refuse the capture and be undone
    (``trial_containers``), unless a carry here holds that entry."""
    return [value for _, owner in _objects(frame_locals) for value in vars(owner).values()
            if type(value) in (list, dict, set)]


def _effective(context, value):
    """What the trace reads for an attribute holding ``value``: a NumPy array this trace
    wrote into reads as its traced copy (``context.replaced``)."""
    if type(value) is np.ndarray:
        return context.replaced.get(id(value), value)
    return value


def _watched(value):
    return isinstance(value, Tracer) or type(value) in (int, float) or isinstance(
        value, np.generic) or type(value) is np.ndarray and value.dtype != object


def watch(context, frame_locals):
    """What the objects of ``frame_locals`` hold in their attributes before iteration 0:
    ``(slot, held, read, var)`` for a traced array, a NumPy array or a number there (with
    what the trace reads for it and that value's var: an in-place write moves it), and
    ``(slot, list, None, mark)`` for a list (``mark``: the appends recorded so far,
    ``list_appends``). None outside a trace."""
    if context is None:
        return None
    before = []
    for local, owner in _objects(frame_locals):
        for name, value in vars(owner).items():
            if type(value) is list:
                mark = len(getattr(context, "list_appends", ()))
                before.append((_Slot(owner, name, local), value, None, mark))
            elif _watched(value):
                before.append(_watch_value(context, _Slot(owner, name, local), value))
            elif type(value) is dict and len(value) <= _ENTRIES:
                for key, item in value.items():  # self.params["W"] -= lr * grads["W"]
                    if type(key) is str and _watched(item):
                        before.append(_watch_value(context, _Slot(owner, name, local, key),
                                                   item))
    return before


# A dict of more entries than this is no dict of parameters (a cache, a vocabulary).
_ENTRIES = 64


def _watch_value(context, slot, value):
    read = _effective(context, value)
    return slot, value, read, getattr(read, "ir_var", None)


def carried_after(context, watched, frame_locals, values, note):
    """The ``AttributeCarries`` of the attributes iteration 0 wrote or appended to
    (``watched``: from ``watch``), or None. ``note(reason)`` says why one that was written
    is not carried (the loop then unrolls, the trial refusing its write)."""
    if not watched:
        return None
    carries = AttributeCarries(context)
    for slot, held, read, var in watched:
        now = slot.get()
        if read is None:  # a list: iteration 0's appends to it, recorded by list_appends
            appended = [record for record in getattr(context, "list_appends", ())[var:]
                        if record[1] is held]
            if appended and now is held:
                carries.add_list(slot, held, appended)
            continue
        after = _effective(context, now)
        if now is held and after is read and getattr(read, "ir_var", None) is var:
            continue  # not written
        if not isinstance(after, Tracer):
            continue
        why = _not_carried(context, slot, held, now, frame_locals)
        if why is not None:
            note(f"`{slot}` {why}")
            return None
        carries.add(slot, read, after, now, var if var is not None else _entering(
            context, read))
    return carries if carries.slots else None


def _entering(context, value):
    """The var of a value entering iteration 0 that was no traced array then: a NumPy
    array's as a constant of the graph (``self.w = np.zeros(n)``), else None. The array
    holds what entered (iteration 0 wrote its traced copy, which ``context.atom`` would
    read instead: the loop would start from iteration 0's result)."""
    if type(value) is not np.ndarray or value.dtype == object:
        return None
    copy = context.replaced.pop(id(value), None)
    try:
        return context.atom(value)[0]
    finally:
        if copy is not None:
            context.replaced[id(value)] = copy


def _not_carried(context, slot, before, now, frame_locals):
    """Why ``slot`` (holding ``before`` at iteration 0, ``now`` after it) is not carried,
    or None."""
    if attribute_writes.is_local_object(context, slot.owner):
        return "is an attribute of an object made in the call"
    record = context.attribute_writes.get(slot.key)
    if record is None or (slot.item is not _MISSING and record[3] is not slot.holder):
        return "holds an array from outside the call"
    for held in {id(before): before, id(now): now}.values():
        if _immutable(held):
            continue  # (a number: another holder of it cannot see it change)
        holder = _holder(slot, held, frame_locals)
        if holder is not None:
            return (f"is also held by {holder}: NumPy's writes into it would show there, "
                    "where a captured loop's trips would not")
    return None


def _immutable(value):
    """A number (``self.b = 0.0``; a traced one, which ``-=`` rebinds: ``frontend.
    _is_traced_number``), not an array an in-place write changes."""
    if isinstance(value, Tracer):
        return not value.shape and (value.aval.weak or isinstance(
            known_kind(value.raw_value), (np.generic, int, float)))
    return type(value) is not np.ndarray


def _holder(slot, value, frame_locals):
    """Another holder of ``value`` than ``slot`` (a description), or None. An array the
    trace made can only be reached through the function's names: its locals, and what
    their dicts, lists, tuples and objects hold (a global or closure write is refused),
    so that is where the walk looks; and a view of it, or it a view of another, shares
    its memory."""
    if isinstance(value, Tracer) and (value.base_or_none() is not None or value.views):
        return "a view (it shares memory with another array)"
    if type(value) is np.ndarray and value.base is not None:
        return "a view (it shares memory with another array)"
    seen = set()
    pending = [(local, held, 0) for local, held in frame_locals.items()
               if not local.startswith("__tracejit")]
    while pending:
        where, held, depth = pending.pop()
        if held is value:
            if where != str(slot):
                return f"`{where}`"
            continue
        if id(held) in seen or depth > 3:
            continue
        seen.add(id(held))
        if type(held) in (list, tuple):
            pending.extend((f"{where}[{index}]", item, depth + 1)
                           for index, item in enumerate(held))
        elif type(held) is dict:
            pending.extend((f"{where}[{key!r}]", item, depth + 1)
                           for key, item in held.items())
        elif _users(held):
            pending.extend((f"{where}.{name}", item, depth + 1)
                           for name, item in vars(held).items())
    return None


class AttributeCarries:
    """The attributes a loop carries (``slots``), their values before iteration 0
    (``originals``) and after it (``afters``: as the trace reads them; ``holding``: the
    objects there, a NumPy array for its traced copy). A list the body appends to is
    carried as a list the loop fills: it enters as a new list of iteration 0's entries,
    and its records (``appended``) become one ``extend`` by the loop's rows."""

    def __init__(self, context):
        self.context = context
        self.slots, self.originals, self.afters, self.holding = [], [], [], []
        self.snapshots, self.appended = [], []
        # the var of each as it entered iteration 0 (an in-place write moved it since)
        self.entering = []

    def add(self, slot, original, after, held, entering):
        self.entering.append(entering)
        self.slots.append(slot)
        self.originals.append(original)
        self.afters.append(after)
        self.holding.append(held)
        self.snapshots.append(None)
        self.appended.append(None)

    def add_list(self, slot, held, appended):
        self.entering.append(None)  # (a list's rows start blank: _entering_slots)
        entering = []
        self.snapshots.append(snapshot(entering))  # empty before iteration 0's appends
        entering.extend(record[2] for record in appended)
        self.slots.append(slot)
        self.originals.append(entering)
        self.afters.append(entering)
        self.holding.append(held)
        self.appended.append(appended)

    def names(self):
        return [str(slot) for slot in self.slots]

    def wrap(self, body, count):
        """``body`` (of ``count`` carried locals) taking and giving back the attributes
        after the locals: a trip sets them, runs the body, reads them and puts back what
        they held (a refused capture runs the trips unrolled from there). A list's trip
        proxy stands in for the list (``stands_in``: the body's appends go to it)."""
        slots, context = self.slots, self.context

        def carrying(t, *values):
            saved = [slot.get() for slot in slots]
            for slot, value in zip(slots, values[count:]):
                slot.set(value)
            carried = attribute_writes.carried_by_loops(context)
            carried.update(slot.key for slot in slots)
            proxies = _stand_ins(context)
            proxies.update(id(value) for value in values[count:]
                           if not isinstance(value, Tracer))
            try:
                returned = tuple(body(t, *values[:count]))
                written = tuple(slot.get() for slot in slots)
            finally:
                carried.subtract(slot.key for slot in slots)
                proxies.subtract(id(value) for value in values[count:]
                                 if not isinstance(value, Tracer))
                for slot, value in zip(slots, saved):
                    slot.set(value)
            for slot, value in zip(slots, written):
                if value is _MISSING:
                    raise Refused(f"the body deletes `{slot}`")
                if any(value is other for other in returned):
                    raise Refused(f"`{slot}` holds an array a local name holds too")
            return returned + written

        index_map = getattr(body, "index_map", None)  # a strided loop's
        if index_map is not None:
            carrying.index_map = index_map
        return carrying

    def store(self, finals):
        """Put the loop's final values into the attributes: the same array written in
        place is there already (``ArrayCarry.after`` moved its var; a NumPy array's traced
        copy is the final value: ``loop_carries.follow_replaced``); a new one is the
        call's attribute write; a list's entries the call's one ``extend`` of it."""
        context = self.context
        for slot, original, held, appended, final in zip(
                self.slots, self.originals, self.holding, self.appended, finals):
            if appended is not None:
                list_appends.replace_by_rows(context, appended, plain_containers(final))
                slot.set(held)
            elif final is original or type(held) is np.ndarray and (
                    context.replaced.get(id(held)) is final):
                slot.set(held)
            elif slot.item is not _MISSING:  # an entry of a dict the call stored there
                slot.set(final)
            else:
                path = context.attribute_writes[slot.key][0]
                attribute_writes.note(context, slot.owner, slot.name, final, path)


def _stand_ins(context):
    """How many traced trips have each list proxy standing in for an attribute's list."""
    proxies = getattr(context, "attribute_list_proxies", None)
    if proxies is None:
        proxies = context.attribute_list_proxies = collections.Counter()
    return proxies


def stands_in(context, target):
    """Whether ``target`` (a list an append reaches through an attribute) is a traced
    trip's proxy for a list the loop carries: the append is the proxy's."""
    proxies = getattr(context, "attribute_list_proxies", None)
    return bool(proxies) and proxies[id(target)] > 0
