"""A list or dict a captured loop fills, returned: the loop's buffers, split into entries
after each call, so one program serves every trip count.

deeplearning.ai's RNN returns its per-step caches::

    def rnn_forward(x, a0, parameters):
        caches = []
        for t in range(x.shape[2]):
            a_next, yt_pred, cache = rnn_cell_forward(x[:, :, t], a_next, parameters)
            caches.append(cache)                  # (a_next, a_prev, xt, parameters)
        return a, y_pred, (caches, x)

Inside the trace ``caches`` is a ``StackedList`` (``tracejit.tracer.stacked_containers``): one
buffer per array of an entry, a row per trip. Making it the list of its entries takes the
trip count as an int, a guard that pins it (one compile per length). The result holds a
``Rows`` instead: the program returns the buffers, and ``RowsLayout.build`` (run by
``pytree.unflatten`` on the call's outputs) makes the list eager returns, of any length:

* each entry's arrays are rows of the buffers: views that share no memory with another
  entry's, so a write into one entry leaves the others as they are (eager's entries are
  separate arrays);
* an entry NumPy gives as a scalar (``np.sum(x[t])``) is a NumPy scalar, one the code
  made a Python number (``loss.item()``) a Python number;
* what an entry holds that is no array (the ``parameters`` dict), or an array every step
  appends as it is (``caches.append((x[t], W))``: ``ContainerCarry.invariant``), is one
  object, the same in every entry as in eager's list;
* entries the list held before the loop come first; a dict filled at the index
  (min-char-rnn's ``hs[t] = ...`` after ``hs[-1] = hprev``) has its keys in eager's
  order: those set before the loop, then the loop's in the order it set them (the
  program returns the loop's lowest key).

>>> layout = RowsLayout(prefix=1, entry=("array", 0))
>>> rows = layout.build(["h0", np.arange(6.0).reshape(3, 2), "kept"])
>>> rows[0], rows[1], len(rows)
('h0', (array([0., 1.]), 'kept'), 4)
>>> layout.build(["h0", np.zeros((0, 2)), "kept"])
['h0']
>>> RowsLayout(prefix=0, entry=("scalar", (), "value")).build([np.ones(2), np.arange(2)])
[(np.float64(1.0), (), 0), (np.float64(1.0), (), 1)]
>>> hs = RowsLayout(prefix=2, entry="array", keys=("h0", 1)).build(
...     ["h0", 7, np.arange(4.0).reshape(2, 2), 0])    # rows for keys 0 and 1
>>> hs
{'h0': 'h0', 1: array([2., 3.]), 0: array([0., 1.])}
"""

from __future__ import annotations

import itertools

import numpy as np

from .pending import Pending, force

KINDS = ("array", "scalar", "value")  # how an entry's leaf is read from its buffer's row


class RowsLayout:
    """How a returned list is made from its parts (``Rows.parts``): ``prefix`` entries
    from before the loop, then one buffer per ``KINDS`` name in ``entry``, then the kept
    objects ``entry`` numbers. ``entry`` is a kind (an entry that is one array), a kept
    object's number, or a tuple of these, nested. Hashable: it sits in a ``TreeDef``."""

    __slots__ = ("prefix", "entry", "buffers", "kept", "keys", "descending")

    def __init__(self, prefix, entry, keys=None, descending=False):
        self.prefix, self.entry = prefix, entry
        kinds, numbers = [], []
        _walk(entry, kinds, numbers)
        self.buffers = tuple(kinds)
        self.kept = max(numbers, default=-1) + 1
        # a dict filled at the index (``hs[t] = ...``): ``keys`` of the entries set before
        # the loop (its prefix, in order), the loop's lowest key as the last part, and
        # whether the loop sets its keys from the highest down
        if keys is not None and len(keys) != prefix:
            raise ValueError(f"{len(keys)} keys for {prefix} entries before the loop")
        self.keys, self.descending = keys, descending

    def _key(self):
        return (self.prefix, self.entry, self.keys, self.descending)

    def __eq__(self, other):
        return isinstance(other, RowsLayout) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        keyed = "" if self.keys is None else f", keys={self.keys!r}"
        return f"RowsLayout(prefix={self.prefix}, entry={self.entry!r}{keyed})"

    @property
    def part_count(self):
        return self.prefix + len(self.buffers) + self.kept + (self.keys is not None)

    def build(self, parts):
        """The list: ``parts`` are the prefix entries, the buffers (arrays or Tensors, a
        row per trip) and the kept objects, in that order. A buffer a lazy trace left
        pending (``tracejit.tracer.pending``) makes the list pending too."""
        if any(type(part) is Pending for part in parts):
            return Pending(lambda: self.build([force(part) for part in parts]))
        prefix = list(parts[: self.prefix])
        ends = self.prefix + len(self.buffers)
        columns = [_split(buffer, kind) for buffer, kind in zip(parts[self.prefix: ends],
                                                                 self.buffers)]
        if isinstance(self.entry, str):
            entries = columns[0]
        else:
            entries = list(_column(self.entry, iter(columns), parts[ends: ends + self.kept],
                                   len(columns[0])))
        if self.keys is None:
            return prefix + entries
        return self._dict(prefix, entries, int(parts[-1]))

    def _dict(self, before, entries, low):
        """The dict eager's loop leaves: the entries set before it in their order (the
        loop's value where it set that key again), then the loop's in the order it set
        them (rows are in key order)."""
        loop = dict(zip(range(low, low + len(entries)), entries))
        result = {key: loop.get(key, value) for key, value in zip(self.keys, before)}
        for key in reversed(loop) if self.descending else loop:
            if key not in result:
                result[key] = loop[key]
        return result


def _walk(entry, kinds, numbers):
    if isinstance(entry, str):
        if entry not in KINDS:
            raise ValueError(f"an entry leaf of kind {entry!r}")
        kinds.append(entry)
    elif isinstance(entry, int) and not isinstance(entry, bool):
        numbers.append(entry)
    elif isinstance(entry, tuple):
        for part in entry:
            _walk(part, kinds, numbers)
    else:
        raise ValueError(f"an entry of {entry!r}")


def _split(buffer, kind):
    """The rows of ``buffer`` as ``kind``: row views of an ndarray, scalars of a 1-d one,
    Python numbers; a Tensor's rows by indexing (gradients flow back to the buffer)."""
    if type(buffer) is np.ndarray:
        if kind == "value":
            return buffer.tolist() if buffer.ndim == 1 else [row.item() for row in buffer]
        if kind == "scalar" or buffer.ndim > 1:
            return list(buffer)  # rows: views (scalars when 1-d), at C speed
        return [buffer[row, ...] for row in range(len(buffer))]  # 0-d arrays, as eager's
    rows = [buffer[row, ...] if kind == "array" else buffer[row] for row in range(len(buffer))]
    return [row.item() for row in rows] if kind == "value" else rows


def _column(entry, columns, kept, count):
    """The ``count`` values of ``entry`` in the entries, in order: its leaves' ``columns``
    (taken in order), kept objects repeated, tuples zipped (no Python loop per entry)."""
    if isinstance(entry, str):
        return next(columns)
    if isinstance(entry, int):
        return itertools.repeat(kept[entry], count)
    if not entry:  # zip() would end every entry's column at once
        return itertools.repeat((), count)
    return zip(*[_column(part, columns, kept, count) for part in entry])


class Rows:
    """A returned list of ``layout`` whose ``parts`` (prefix entries, buffers, kept
    objects) are traced values: ``pytree.flatten`` takes it for a node of its own, so the
    program returns the parts and ``layout.build`` makes the list."""

    __tracejit_rows__ = True  # pytree: a node, not a leaf

    def __init__(self, layout, parts):
        if len(parts) != layout.part_count:
            raise ValueError(f"{len(parts)} parts for {layout}")
        self.layout, self.parts = layout, list(parts)

    def __repr__(self):
        return f"Rows({self.layout})"
