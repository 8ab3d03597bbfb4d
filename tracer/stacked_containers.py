"""Lists and dicts after the captured loop that filled them
(``tracejit.tracer.loop_containers``).

The name holds a ``StackedDict`` or ``StackedList`` over the loop's buffers: reads at an int
or a dim are rows, ``np.stack(outs)`` is the buffer (``stack_call``), a returned one is
``loop_rows.Rows`` (``plain_containers``), and anything that uses it as a whole makes the
real dict or list of its entries, specializing the trip count.
"""

from __future__ import annotations

import operator
from collections.abc import MutableMapping, MutableSequence

import numpy as np

from .container_entries import Kept, plain_dim
from .dims import SymInt
from .loop_generalize import Refused
from .loop_rows import Rows, RowsLayout
from .pending import known_kind
from .primitives import is_traced_array


def specialize(count, why):
    if isinstance(count, SymInt):
        return count.context.specialize(count, why)
    return count


class _Materialized:
    """What a stacked container does as a whole: its plain list or dict of the entries
    (``_materialized``, made on first use), changed only outside a traced trip."""

    def __setitem__(self, key, value):
        _unchanged_in_a_trip(self._carry)
        self._materialized()[key] = value

    def __delitem__(self, key):
        _unchanged_in_a_trip(self._carry)
        del self._materialized()[key]

    def __iter__(self):
        return iter(self._materialized())

    def __len__(self):
        return len(self._materialized())


class StackedDict(_Materialized, MutableMapping):
    """A dict filled by a captured loop: ``d[k]`` reads a row of the loop's buffers."""

    def __init__(self, carry, buffers, low):
        self._carry, self._buffers, self._low = carry, buffers, low
        self._rows = carry.rows
        self._dict = None

    def _row(self, key):
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer, SymInt)):
            return None
        row = plain_dim(key - self._low)
        if isinstance(row, int) and row < 0:
            return None
        if not isinstance(row, int) and not row >= 0:
            return None
        return row if row < self._rows else None

    def __getitem__(self, key):
        if is_traced_array(key) and key.dtype.kind in "iu" and not key.shape:
            # hs[n - 1] with n a Python int argument: the dict hashes its int, so its value
            # (guarded), not the tracer (a KeyError: an internal error)
            key = operator.index(key)
        if self._dict is not None:
            return self._dict[key]
        row = self._row(key)
        if row is not None:
            return self._carry.entry(self._buffers, row)
        if isinstance(key, SymInt):
            key = specialize(key, "a key of a dict filled by a captured loop")
        return self._carry.before[key]

    def _materialized(self):
        if self._dict is None:
            carry = self._carry
            rows = specialize(self._rows, "a dict filled by a captured loop was used as a "
                                           "whole (len, iteration, a new key)")
            low = specialize(self._low, "a dict filled by a captured loop was used as a whole")
            loop_keys = [low + row for row in range(rows)]
            if carry.step < 0:
                loop_keys.reverse()
            covered = set(loop_keys)
            result = {}
            for key, value in carry.before.items():
                result[key] = self[key] if key in covered else value
            for key in loop_keys:
                if key not in result:
                    result[key] = self[key]
            self._dict = result
        return self._dict

    def copy(self):
        return dict(self._materialized())

    def returned_rows(self):
        """The dict as ``loop_rows.Rows`` of the loop's buffers, when nothing made it a
        real dict, the trip count is a dim and the keys set before the loop can be stored;
        else None (a plain dict of its entries is made)."""
        if self._dict is not None or not isinstance(self._rows, SymInt) or not all(
                type(key) in (int, str) for key in self._carry.before):
            return None
        before = self._carry.before
        return _rows(self._carry, self._buffers, list(before.values()), tuple(before),
                     self._low)

    def __repr__(self):
        return f"StackedDict({self._carry.name}: {self._rows} rows)"


class StackedList(_Materialized, MutableSequence):
    """A list appended to once per iteration of a captured loop: ``lst[k]`` reads a row of
    the loop's buffers, ``np.stack(lst)`` is the buffer."""

    def __init__(self, carry, buffers, count=None):
        self._carry, self._buffers = carry, buffers
        self._prefix = list(carry.prefix)
        self._count = carry.count if count is None else count  # (the selected rows')
        self._list = None

    def stacked(self, axis=0):
        """``np.stack(self, axis)`` without one equation per entry."""
        if self._list is not None or self._carry.structure is not None or (
                self._carry.invariant[0]):  # one array n times: np.stack reads it as it is then
            return None
        buffer = self._buffers[0]
        if self._prefix:
            buffer = np.concatenate([np.stack(self._prefix), buffer])
        if axis != 0:
            buffer = np.moveaxis(buffer, 0, axis)
        return buffer

    def __getitem__(self, key):
        if self._list is not None:
            return self._list[key]
        if isinstance(key, slice) and key == slice(None, None, -1):
            from .loop_reversed_lists import ReversedStackedList  # cycle: it subclasses this

            return ReversedStackedList(self)  # hs_b[::-1]: the length stays a dim
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer, SymInt)):
            return self._materialized()[key]
        length = plain_dim(len(self._prefix) + self._count)
        position = plain_dim(key + length) if key < 0 else key
        if position < 0 or not position < length:
            raise IndexError("list index out of range")
        if isinstance(position, int) and position < len(self._prefix):
            return self._prefix[position]
        row = plain_dim(position - len(self._prefix))
        return self._carry.entry(self._buffers, row)

    def length(self):
        """``len(lst)``: a dim while the list is the loop's rows (``len(costs)`` after a
        loop over a count argument follows the count), its int once materialized."""
        if self._list is not None:
            return len(self._list)
        return plain_dim(len(self._prefix) + self._count)

    def _materialized(self):
        if self._list is None:
            count = specialize(self._count, "a list filled by a captured loop was used as a "
                                             "whole (len, iteration, a change)")
            self._list = self._prefix + [self[len(self._prefix) + row] for row in range(count)]
            trial = getattr(self._carry.context, "trial_materialized", None)
            if trial is not None:  # its entries are the trial's reads: put back after it
                trial.append(self)  # (loop_trials.Trial)
        return self._list

    def forget_entries(self):
        """The list is the loop's rows again: its entries were a loop trial's reads, thrown
        away with the trial (``loop_trials.Trial``)."""
        self._list = None

    def insert(self, index, value):  # (append too)
        _unchanged_in_a_trip(self._carry)
        self._materialized().insert(index, value)

    def __repr__(self):
        return f"StackedList({self._carry.name})"

    def returned_rows(self):
        """The list as ``loop_rows.Rows`` of the loop's buffers, when it holds them all and
        the trip count is a dim or an int; else None (a plain list of its entries is made).
        (At a constant trip count too: ``range(2000)`` appending ``float(cost)`` made 2000
        entries of the trace, each a cast of its own.)"""
        if self._list is not None or not isinstance(self._count, (SymInt, int)):
            return None
        return _rows(self._carry, self._buffers, list(self._prefix))


def _unchanged_in_a_trip(carry):
    """A list or dict one captured loop filled, changed in a traced trip of another loop
    (``hs.append(...)`` in a second loop over ``t``): no carry of that loop tracks it, and
    the trip's entries would be symbolic values the trace drops. That loop unrolls."""
    if getattr(carry.context, "loop_indices", None):
        raise Refused(f"`{carry.name}`, filled by a captured loop before, is changed in the "
                      "body")


def _rows(carry, buffers, before, keys=None, low=None):
    """``loop_rows.Rows`` of ``carry``'s ``buffers`` after the entries ``before`` the loop
    (for a dict, with their ``keys`` and the loop's ``low``est key); None when no entry
    holds an array of its own trip (no row tells the length)."""
    leaves = iter(zip(carry.leaves0, carry.python_numbers, carry.invariant, buffers))
    rows, kept = [], []

    def template(structure):
        if structure is None:
            leaf, weak, invariant, buffer = next(leaves)
            if invariant:  # the same array in every entry: that array, not its rows
                structure = Kept(leaf)
            else:
                rows.append(buffer)
                return _entry_kind(leaf, weak)
        if isinstance(structure, Kept):
            kept.append(structure.value)
            return len(kept) - 1
        return tuple(template(part) for part in structure)

    entry = template(carry.structure)
    if not rows:
        return None
    layout = RowsLayout(len(before), entry, keys, carry.step < 0 if keys is not None else False)
    return Rows(layout, [*before, *rows, *kept] + ([low] if keys is not None else []))


def _entry_kind(leaf, weak):
    """How eager holds an entry's array (``loop_rows.KINDS``), from the first trip's."""
    if weak:
        return "value"
    return "scalar" if isinstance(known_kind(leaf.raw_value), np.generic) else "array"


# NumPy functions that read their first argument as ``np.asarray(a)`` does: over a
# ``StackedList`` they reduce the loop's buffer (``np.mean(costs)`` of a cost appended at
# every trip), which is the array NumPy makes of the list.
_OVER_THE_ARRAY = (np.mean, np.sum, np.max, np.min, np.amax, np.amin, np.std, np.var,
                   np.argmax, np.argmin, np.average, np.median, np.prod, np.cumsum,
                   np.nanmean, np.nansum, np.nanmax, np.nanmin, np.any, np.all)


def stack_call(function, args, kwargs):
    """``np.stack(lst)``, ``np.array(lst)``, ``np.asarray(lst)`` of a ``StackedList``: the
    loop's buffer; ``np.mean(lst)`` (and the other ``_OVER_THE_ARRAY``) the function of
    it; None when the call is something else."""
    if not args or not isinstance(args[0], StackedList):
        return None
    if any(function is reduction for reduction in _OVER_THE_ARRAY):
        stacked = args[0].stacked(0)
        return None if stacked is None else function(stacked, *args[1:], **kwargs)
    if function is np.stack:
        extra = dict(kwargs)
        axis = extra.pop("axis", args[1] if len(args) > 1 else 0)
        if extra or len(args) > 2:
            return None
        return args[0].stacked(axis)
    if function in (np.array, np.asarray) and len(args) <= 2 and set(kwargs) <= {"dtype"}:
        dtype = kwargs.get("dtype", args[1] if len(args) > 1 else None)
        stacked = args[0].stacked(0)  # np.array(accuracies, dtype=np.float32): then cast
        return stacked if dtype is None else stacked.astype(dtype)
    return None


def plain_containers(value):
    """``value`` with each list and dict a captured loop filled (``StackedList``,
    ``StackedDict``) made the plain list or dict of its entries the NumPy code holds,
    through tuples (namedtuples too), lists and dicts: a function's result leaves the
    trace as such. A list or dict of a loop over a dynamic length becomes
    ``loop_rows.Rows``, which the call makes that list or dict of (its length not pinned).

    >>> plain_containers(([1], {"a": (2,)}))
    ([1], {'a': (2,)})
    """
    if isinstance(value, (StackedList, StackedDict)) and (
            rows := value.returned_rows()) is not None:
        return Rows(rows.layout, [plain_containers(part) for part in rows.parts])
    if isinstance(value, StackedList) or type(value) is list:
        return [plain_containers(item) for item in value]
    if isinstance(value, StackedDict) or type(value) is dict:
        return {key: plain_containers(item) for key, item in value.items()}
    if type(value) is tuple:
        return tuple(plain_containers(item) for item in value)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a namedtuple
        return type(value)(*(plain_containers(item) for item in value))
    return value
