"""The values a captured loop carries from trip to trip (``tracejit.tracer.loops``).

Each name the body assigns becomes a carry, chosen from what iteration 0 left in it:

* ``ArrayCarry``: an array (``h = f(h, x[t])``, ``loss += ...``, ``hs[:, t] = h``), one
  slot of the loop;
* ``CounterCarry``: a Python int that moves by the same amount every trip (``idx += 1``),
  no slot: the index's affine function in the body;
* ``UntouchedCarry``: a name only a path iteration 0 did not take assigns, left as it was;
* ``ContainerCarry`` (``tracejit.tracer.loop_containers``): a dict or list filled at the
  index.

Every carry answers ``setup`` (its slots for the first traced trip), ``enter`` (what the
body sees), ``leave`` (the slots the body gives back) and ``after`` (what the name holds
after the loop, from the loop equations' results).
"""

from __future__ import annotations

import numpy as np

from .dims import SymInt, expr_of, is_int, value_of
from .loop_containers import ContainerCarry, Refusal
from .loop_generalize import Refused
from .traced_array import Tracer


class ArrayCarry:
    """A carried array: ``h = f(h, x[t])``, ``loss += ...``, ``hs[:, t] = h``."""

    slot_count = 1

    def __init__(self, name, original, value):
        if not isinstance(value, Tracer):
            raise Refused(f"`{name}` is a {type(value).__name__} after the first iteration, "
                          "not an array")
        self.name, self.original, self.value = name, original, value
        # the vars of memory it shares, when the body writes it in place (loop_write_through)
        self.shared = None
        # a traced trip bound the name to another array: the loop does not write the
        # original in place even when iteration 0 left it as it was ('if i > 0: x = x + W')
        self.rebound = False

    def setup(self):
        return [self.value]

    def enter(self, t, slots):
        return slots[0]

    def leave(self, proxy, returned):
        if not isinstance(returned, Tracer):
            raise Refused(f"`{self.name}` is a {type(returned).__name__} inside the loop, not "
                          "an array")
        self.rebound = self.rebound or returned is not proxy
        return [returned]

    def after(self, finals):
        tracer = finals[0]
        if (isinstance(self.original, type(tracer)) and self.original is self.value
                and not self.rebound):
            self.original._update(tracer)  # a buffer written in place: keep the object
            return self.original
        if self.shared:  # total = out[0] of a NumPy out: its traced view, written through
            self.value._update(tracer)
            return self.value
        return tracer


def follow_replaced(context, before, after):
    """A NumPy buffer updated in place by the loop (``a = np.zeros(3); b = a; for t: a +=
    x[t]``) became a traced copy in iteration 0; another name for the buffer (``b``) reads
    that copy through ``context.replaced``: it must read the loop's result, as NumPy's
    in-place update shows it."""
    for key, target in list(context.replaced.items()):
        if target is before and after is not before:
            context.replaced[key] = after


def carries_of(context, names, originals, snapshots, values, start, stop, step, count,
               index_map=None):
    """The carry of each carried name. ``index_map``: ``(offset, scale)`` when the user's
    index is ``offset + scale * t`` of the loop's ``t`` (a strided loop), else None."""
    carries = []
    for name, original, snap, value in zip(names, originals, snapshots, values):
        if snap is not None:
            try:
                carries.append(ContainerCarry(context, name, snap, value, value_of(start),
                                              start, stop, step, count, index_map))
            except Refusal as refusal:
                raise Refused(str(refusal)) from None
        elif is_int(original) and is_int(value):
            carries.append(CounterCarry(name, original, value, start, step, count))
        elif value is original and not isinstance(value, (Tracer, np.ndarray)):
            # (a NumPy array may be the same object written in place by plain NumPy: g +=
            # 1 in the body; its trips must run, so it is an array carry)
            carries.append(UntouchedCarry(context, name, value))
        else:
            carries.append(ArrayCarry(name, original, _numpy_scalar_traced(context, value)))
    return carries


def _numpy_scalar_traced(context, value):
    """A NumPy scalar iteration 0 computed from NumPy values alone (``n = n + 1`` from ``n =
    np.zeros(())``, a counter in a dict of state) as a traced constant: the later trips
    compute it from the carried value, as for any array. (A NumPy array may be written in
    place by plain NumPy; a scalar is immutable, so nothing else can see it change.)"""
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        atom, concrete, aval = context.atom(np.asarray(value))
        return Tracer(context, atom, concrete, aval.shape)
    return value


def slot_names_of(carries):
    names = []
    for carry in carries:
        if isinstance(carry, ArrayCarry):
            names.append(carry.name)
        else:
            names += [f"{carry.name} (stacked)"] * (carry.slot_count)
    return names


class CounterCarry:
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


class UntouchedCarry:
    """A name the body assigns on a path iteration 0 did not take, left as it was (a NumPy
    array, None, a float): ``dc0 = ...`` only in the ``else`` of ``if t > 0``, whose trip
    runs after the loop (``_with_last_peeled``). No slot: every trip gives it back as it
    took it, unwritten, and the body has no guard (every trip takes the traced path), or
    the capture is refused."""

    slot_count = 0

    def __init__(self, context, name, value):
        self.context, self.name, self.value = context, name, value
        # A NumPy array written in place by a traced trip (dh0 += v at t == 0) stands for
        # a traced copy from then on (context.replaced): not untouched, and the trial's
        # copy must not outlive a refusal.
        self.key = id(value)
        self.replacement = context.replaced.get(self.key)

    def setup(self):
        return []

    def enter(self, t, slots):
        return self.value

    def leave(self, proxy, returned):
        written = self.context.replaced.get(self.key) is not self.replacement
        if written:
            if self.replacement is None:
                del self.context.replaced[self.key]
            else:
                self.context.replaced[self.key] = self.replacement
        if returned is not self.value or written:
            raise Refused(f"`{self.name}` is assigned in some iterations only")
        return []

    def after(self, finals):
        return self.value
