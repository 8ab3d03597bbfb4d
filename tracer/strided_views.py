"""``np.lib.stride_tricks.as_strided`` over the array's own strides: the im2col of CNN gists.

From-scratch convolutions take windows with the strides the array reports::

    sN, sC, sH, sW = x_pad.strides
    windows = as_strided(x_pad, shape=(N, C, Ho, Wo, HH, WW),
                         strides=(sN, sC, sH * stride, sW * stride, sH, sW))

Compiled code has no byte layout to offer (a traced array may be any view of its input),
but it need not: a stride built from ``x.strides`` by multiplying whole strides is a step
of a whole number of elements along one of ``x``'s axes, whatever the layout. So
``x.strides`` of a traced array gives ``ByteStride`` values that remember those steps, and
``as_strided(x, shape, strides)`` of them reads the same elements NumPy's does, as a
strided slice (one output axis per input axis) or a sliding window (two: the position
and the offset in the window), taken with ``ops.sliding_window`` and basic indexing.

Anything else runs eagerly, with the reason: a stride used as a number (``s // 8``,
``if s == 8``), strides of another array or a layout written as plain ints, an axis walked
by more than two output axes or backwards, a view reaching past the array (NumPy would
read memory outside it), strides that outlive the trace (returned, printed, kept). The
result is a view of ``x``: writes through it, or into ``x`` while it lives, run eagerly
too (NumPy would update both).
"""

from __future__ import annotations

import operator
import weakref

import numpy as np

from . import ops
from .dims import SymInt
from .primitives import current_context, is_traced
from .traced_array import note_view, trace_error


class ByteStride:
    """A stride of ``x.strides``, or a whole multiple or sum of them: ``steps[axis]``
    elements along each axis of ``source``, ``itemsize`` bytes each."""

    __slots__ = ("source", "steps", "itemsize", "__weakref__")
    __array_ufunc__ = None  # n * s with n a traced int: our __rmul__, not an array product

    def __init__(self, source, steps, itemsize):
        self.source, self.steps, self.itemsize = source, tuple(steps), itemsize
        context = current_context()
        if context is not None:  # one that outlives the trace is refused (escaped)
            made = getattr(context, "byte_strides", None)
            if made is None:
                made = context.byte_strides = []
            made.append(weakref.ref(self))

    def _times(self, factor):
        factor = _whole(factor, "stride factor")
        return ByteStride(self.source, (step * factor for step in self.steps), self.itemsize)

    __mul__ = __rmul__ = _times

    def __add__(self, other):
        if isinstance(other, ByteStride) and other.source is self.source:
            return ByteStride(self.source, (a + b for a, b in zip(self.steps, other.steps)),
                              self.itemsize)
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool) and other == 0:
            return self
        raise _as_number("a stride of x.strides added to another number")

    __radd__ = __add__

    def __neg__(self):
        return self._times(-1)

    def _number(self, *args):
        raise _as_number("a stride of x.strides used as a number")

    __index__ = __int__ = __float__ = __bool__ = __eq__ = __ne__ = __lt__ = __le__ = _number
    __gt__ = __ge__ = __floordiv__ = __rfloordiv__ = __truediv__ = __mod__ = __sub__ = _number
    __rsub__ = __pow__ = __format__ = __str__ = __repr__ = _number  # print(x.strides)
    __hash__ = None


def _as_number(what):
    return trace_error(f"{what}: compiled code has no byte layout; the call runs eagerly")


def byte_strides(x):
    """``x.strides`` of a traced array: one ``ByteStride`` per axis, a step of one element
    along it."""
    rank = len(x.shape)
    return tuple(ByteStride(x, (int(axis == other) for other in range(rank)),
                            x.dtype.itemsize) for axis in range(rank))


def as_strided(x, shape=None, strides=None, subok=False, writeable=True):
    """``np.lib.stride_tricks.as_strided(x, shape, strides)`` with ``strides`` from
    ``x.strides``: the view NumPy makes, built from a sliding window and basic indexing."""
    shape = tuple(x.shape) if shape is None else tuple(shape)
    strides = byte_strides(x) if strides is None else tuple(strides)
    if len(shape) != len(strides):
        raise trace_error("as_strided with as many strides as dims only")
    walks = {axis: [] for axis in range(len(x.shape))}  # input axis -> [(output axis, step)]
    broadcast = []
    shape = tuple(_whole(size, "size") for size in shape)
    for position, stride in enumerate(strides):
        if isinstance(stride, (int, np.integer)) and not isinstance(stride, bool) and (
                stride == 0):
            broadcast.append(position)
            continue
        if not isinstance(stride, ByteStride) or stride.source is not x:
            raise trace_error("as_strided with strides other than those of x.strides (times "
                              "whole numbers): compiled code has no byte layout; the call "
                              "runs eagerly")
        moving = [(axis, step) for axis, step in enumerate(stride.steps) if step]
        if not moving:
            broadcast.append(position)
            continue
        if len(moving) > 1 or moving[0][1] < 0:
            raise trace_error("as_strided with a stride that mixes axes or steps backwards")
        walks[moving[0][0]].append((position, moving[0][1]))
    if any(len(walk) > 2 for walk in walks.values()):
        raise trace_error("as_strided with more than two output axes walking one input axis")
    _within(all(size >= 1 for size in shape), "an empty view (no window to place)")

    windowed = [axis for axis, walk in walks.items() if len(walk) == 2]
    windows = {axis: (shape[walks[axis][1][0]] - 1) * walks[axis][1][1] + 1
               for axis in windowed}
    source = x
    if windowed:
        source = ops.sliding_window(x, tuple(windowed), tuple(windows[axis] for axis in windowed),
                                    tuple(walks[axis][0][1] for axis in windowed))
    index, order = [], []
    for axis, walk in walks.items():
        length = x.shape[axis]
        if not walk:
            _within(length >= 1, "an axis of size 0")
            index.append(0)  # NumPy's view starts at x[0, ...]
        elif len(walk) == 1:
            (position, step), size = walk[0], shape[walk[0][0]]
            _within((size - 1) * step + 1 <= length, "the array's end")
            index.append(slice(0, (size - 1) * step + 1, step))
            order.append(position)
        else:
            (position, step), size = walk[0], shape[walk[0][0]]
            _within((size - 1) * step + windows[axis] <= length, "the array's end")
            index.append(slice(0, size))
            order.append(position)
    for axis in windowed:
        position, step = walks[axis][1]
        index.append(slice(None, None, step))
        order.append(position)
    view = source[tuple(index)]
    view = view.transpose(tuple(sorted(range(len(order)), key=lambda at: order[at])))
    if broadcast:
        kept = sorted(order)
        view = view.reshape(tuple(shape[position] if position in kept else 1
                                  for position in range(len(shape))))
        view = ops.broadcast_to(view, shape)
    if view is x:
        view = ops.reshape(x, tuple(shape))
    note_view(x, view)
    if not writeable:
        view.readonly = True
    return view


def _within(holds, what):
    if not holds:
        raise trace_error(f"as_strided past {what}: NumPy would read memory outside the "
                          "array; the call runs eagerly")


def escaped(context):
    """Why the trace cannot stand (a stride of ``x.strides`` outlives it: returned, kept on
    an object), or None: NumPy's would be an int."""
    if any(reference() is not None for reference in getattr(context, "byte_strides", ())):
        return ("x.strides of a traced array outlives the trace (returned or kept): NumPy's "
                "strides are ints of the array's layout, which compiled code does not have")
    return None


def is_as_strided(function):
    return function is np.lib.stride_tricks.as_strided


def is_byte_strides(value):
    """``x.strides`` of a traced array, or one of them (``x.strides[0]``, read through an
    argument's path): the trace's own, no setting, and not an object to find again (kept
    by its path, a stride would outlive the trace)."""
    return isinstance(value, ByteStride) or type(value) is tuple and bool(value) and all(
        isinstance(stride, ByteStride) for stride in value)


def _whole(value, what):
    """A Python int for a size or a stride factor: a run-time int (a stride argument seen
    with a second value) decides the view's shape, so it is specialized under a guard."""
    if isinstance(value, SymInt) and what == "size":
        return value
    if is_traced(value) and not value.shape and value.dtype.kind in "iu":
        return operator.index(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise _as_number(f"as_strided with a {what} other than an int")
    return int(value)


__all__ = ["ByteStride", "as_strided", "byte_strides", "escaped", "is_as_strided",
           "is_byte_strides"]
