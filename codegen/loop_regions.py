"""Where a captured loop's trips read and write (``codegen/loops.py``): the region each
trip writes a buffer at (``Write``: its start ``base + delta * t`` per axis, checked
inside the buffer at the first and last trip), the slices and pads it reads
(``reads_in_bounds``, ``nonlinear_in``: a param not linear in the index is checked at every
trip), and the written regions as the drivers take them: a view per trip for the Python
loop (``region_views``), byte offsets for the native one (``region_geometry``).
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.loop_index import linear_in
from tracejit.tracer.ops.control import _evaluate


class Write:
    """A buffer written at the index: region start ``base + delta * t`` per axis."""

    def __init__(self, position, config, value_shape):
        self.position = position
        self.config = config
        self.value_shape = value_shape

    def region_of(self, index, bindings, buffer_shape, first, last):
        """Per axis ``(base, delta, size)``, or None if a trip writes outside the buffer."""
        axes = []
        for (low, _, _), size, extent in zip(self.config, self.value_shape, buffer_shape):
            split = linear_in(low, index)  # checked at build: never None here
            base, delta = (_evaluate(part, bindings) for part in split)
            size = _evaluate(size, bindings)
            for t in (first, last):
                if base + delta * t < 0 or base + delta * t + size > extent:
                    return None
            axes.append((base, delta, size))
        return axes


def nonlinear_in(value, index):
    if isinstance(value, tuple):
        return any(nonlinear_in(item, index) for item in value)
    return isinstance(value, DimExpr) and linear_in(value, index) is None


def reads_in_bounds(kind, params, shape, bindings):
    if kind == "slice":
        for start, limit, step, dim in zip(params["starts"], params["limits"],
                                           params["steps"], shape):
            start, limit = _evaluate(start, bindings), _evaluate(limit, bindings)
            if step <= 0 or not 0 <= start <= limit <= _evaluate(dim, bindings):
                return False
        return True
    return all(_evaluate(low, bindings) >= 0 and _evaluate(high, bindings) >= 0
               and _evaluate(interior, bindings) >= 0 for low, high, interior in params["config"])


def region_geometry(buffer, axes, trips):
    """``(offset, per_trip, sizes)`` of the region written at the first trip, in bytes
    from the buffer's start, bytes per trip, and elements per axis."""
    offset = sum((base + delta * trips[0]) * stride
                 for (base, delta, _), stride in zip(axes, buffer.strides))
    per_trip = trips.step * sum(delta * stride for (_, delta, _), stride in
                                zip(axes, buffer.strides))
    return offset, per_trip, [size for _, _, size in axes]


def region_views(buffer, axes, trips):
    """A view of ``buffer`` whose item ``k`` is the region written at trip ``k`` (the
    region moves by a fixed number of elements per trip): one ``view[k] = value`` per
    iteration instead of building a tuple of slices."""
    sizes = tuple(size for _, _, size in axes)
    if 0 in sizes:
        return np.empty((len(trips), *sizes), buffer.dtype)  # nothing to write
    item = buffer.itemsize
    offset = sum((base + delta * trips[0]) * stride
                 for (base, delta, _), stride in zip(axes, buffer.strides)) // item
    per_trip = trips.step * sum(delta * stride for (_, delta, _), stride in
                                zip(axes, buffer.strides))
    shape, strides = (len(trips), *sizes), (per_trip, *buffer.strides)
    try:  # the constructor checks the view stays inside the buffer; ~10x as_strided's speed
        return np.ndarray(shape, buffer.dtype, buffer=buffer, offset=offset * item,
                          strides=strides)
    except (ValueError, TypeError):
        origin = buffer.reshape(-1)[offset:]
        return np.lib.stride_tricks.as_strided(origin, shape, strides, writeable=True)
