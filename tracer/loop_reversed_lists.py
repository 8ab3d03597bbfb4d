"""``lst[::-1]`` of a list a captured loop filled: a bidirectional RNN's backward states,
appended from the last step to the first and turned back into time order
(``hs_b = hs_b[::-1]``, then ``np.stack(hs_b)`` or ``np.concatenate([fw, bw], -1)``).

The reversed list reads the same rows of the loop's buffers from the other end, so its
length stays a dim (one compile per bucket); ``np.stack`` of it is the flipped buffer.
Used whole (``len``, iteration, a change, returned), it becomes the plain list of its
entries, pinning the length, as the list it came from does.

>>> import numpy as np, tracejit as tj
>>> def backward_states(x):
...     h, hs = np.zeros(2), []
...     for t in reversed(range(x.shape[0])):
...         h = np.tanh(x[t] + h)
...         hs.append(h)
...     return np.stack(hs[::-1])
>>> f = tj.jit(backward_states, cache="memory", dynamic=True)
>>> np.allclose(f(np.ones((5, 2))), backward_states(np.ones((5, 2))))
True
"""

from __future__ import annotations

import copy

import numpy as np

from .container_entries import plain_dim
from .dims import SymInt
from .stacked_containers import StackedList, specialize


class ReversedStackedList(StackedList):
    """``forward[::-1]``: entry ``k`` is the forward list's entry ``length - 1 - k``. It
    holds the forward list's rows, not the list itself: a later change of the forward list
    (which makes that one a plain list) does not show here, as in Python."""

    def __init__(self, forward):
        self._forward = copy.copy(forward)  # as it is now (forward._list is None)
        self.__dict__.update(self._forward.__dict__)

    def stacked(self, axis=0):
        forward = super().stacked(0)
        if forward is None:
            return None
        flipped = np.flip(forward, 0)
        return flipped if axis == 0 else np.moveaxis(flipped, 0, axis)

    def __getitem__(self, key):
        if self._list is None and isinstance(key, slice) and key == slice(None, None, -1):
            return copy.copy(self._forward)  # the forward order again, its length a dim
        if self._list is not None or isinstance(key, (bool, np.bool_)) or not isinstance(
                key, (int, np.integer, SymInt)):
            return self._materialized()[key]  # another slice: of the plain list
        length = plain_dim(len(self._prefix) + self._count)
        position = plain_dim(key + length) if key < 0 else key
        if position < 0 or not position < length:
            raise IndexError("list index out of range")
        return super().__getitem__(plain_dim(length - 1 - position))

    def _materialized(self):
        if self._list is None:
            count = specialize(self._count, "a list filled by a captured loop was used as a "
                                             "whole (len, iteration, a change)")
            forward = self._prefix + [StackedList.__getitem__(self, len(self._prefix) + row)
                                      for row in range(count)]
            self._list = forward[::-1]
        return self._list

    def returned_rows(self):
        return None  # returned whole: its plain list (the rows' order is the forward one's)

    def __repr__(self):
        return f"StackedList({self._carry.name})[::-1]"
