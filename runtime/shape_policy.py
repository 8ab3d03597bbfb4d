"""Which dims and scalars of a call are dynamic: a jit function's ``ShapePolicy``, and the
``SameEntry`` policy that traces another path of an existing variant.

Tracing asks a policy two things: for an array argument, ``policy(leaf_index, array)``
gives ``{axis: (low, high)}`` of the dims traced as symbols (with their bucket); for a
number argument, ``policy.scalar_is_dynamic(leaf_index)`` says whether it is a run-time
input rather than a constant.

>>> from tracejit.runtime.config import Options
>>> import numpy as np
>>> policy = ShapePolicy(Options.build(dynamic=True), lambda x: x)
>>> policy(0, np.ones((5, 3)))
{0: (5, 8), 1: (3, 4)}
"""

from __future__ import annotations

import inspect

import numpy as np

from tracejit.tracer.abstract import is_number_argument
from tracejit.tracer.loop_trip_counts import is_trip_count
from tracejit.tracer.shapes import edges_bucket, pow2_bucket

from .tensor import Tensor


class ShapePolicy:
    """Which dims and scalars are dynamic, and the dims' buckets: ``dynamic="auto"``
    specializes the first call's shapes and number arguments, makes a dim dynamic once it is
    seen with a second size, and a Python or NumPy number argument a run-time input once it
    is seen with a second value (unless ``static_argnames``/``static_argnums`` name it)."""

    def __init__(self, options, fn):
        self.mode = options.dynamic
        self.buckets = options.buckets
        self.static_names = set(options.static_argnames)
        self.static_positions = set(options.static_argnums)
        self.first_sizes = {}
        self.dynamic = set()
        self.first_scalars = {}
        self.dynamic_scalars = set()
        self.pinned_scalars = set()  # numbers that decide shapes: constants for good
        # trip counts pinned while too small for a loop to be captured over them: a run-time
        # input again at a count a loop takes (tracejit.tracer.loop_trip_counts)
        self.small_counts = set()
        # int attributes traces read (tracejit.tracer.count_attributes), by path: the first
        # value, those seen with another (trip counts read at run time), and those a trace
        # needed as a Python int (settings for good)
        self.first_attributes, self.counting_attributes = {}, set()
        self.pinned_attributes = set()
        self.parameter_names = _parameter_names(fn)
        self.leaf_arguments = {}

    def observe(self, leaves, positions):
        self.leaf_arguments = positions
        for leaf_index in [index for index in self.small_counts if index < len(leaves)]:
            if is_trip_count(leaves[leaf_index]):
                self.small_counts.discard(leaf_index)
                self.pinned_scalars.discard(leaf_index)
        for leaf_index, leaf in enumerate(leaves):
            if is_number_argument(leaf) and self.mode is not False and not self._static(
                leaf_index
            ):
                first = self.first_scalars.setdefault(leaf_index, (type(leaf), leaf))
                if first != (type(leaf), leaf) and leaf_index not in self.pinned_scalars:
                    self.dynamic_scalars.add(leaf_index)
                    # A list of token ids changes in places; the next batch changes others:
                    # all the argument's scalars are run-time inputs now, not one retrace
                    # per position that happened to repeat its value.
                    self.dynamic_scalars.update(
                        index for index, other in enumerate(leaves)
                        if positions.get(index) == positions.get(leaf_index)
                        and is_number_argument(other) and not self._static(index)
                        and index not in self.pinned_scalars)
                continue
            shape = getattr(leaf, "shape", None)
            if shape is None or not _is_array(leaf):
                continue
            for axis, size in enumerate(shape):
                key = (leaf_index, axis)
                first = self.first_sizes.setdefault(key, size)
                if first != size:
                    self.dynamic.add(key)

    def _named(self, leaf_index):
        argument = self.leaf_arguments.get(leaf_index)
        if isinstance(argument, int) and argument < len(self.parameter_names):
            return self.parameter_names[argument]
        return argument

    def _static(self, leaf_index):
        argument = self.leaf_arguments.get(leaf_index)
        return argument in self.static_positions or self._named(leaf_index) in self.static_names

    def scalar_is_dynamic(self, leaf_index):
        """Whether the number argument at ``leaf_index`` is traced as a run-time input."""
        return leaf_index in self.dynamic_scalars

    def pin_scalars(self, leaf_indices, small_count=False):
        """The number arguments at ``leaf_indices`` decide shapes (a stride Python needs as
        an int: ``tracejit.tracer.pinned_scalars``): constants from now on, as if static.
        ``small_count``: a trip count below the counts a captured loop takes, constant
        until a call passes one it takes."""
        self.pinned_scalars.update(leaf_indices)
        if small_count:
            self.small_counts.update(leaf_indices)
        else:
            self.small_counts.difference_update(leaf_indices)
        self.dynamic_scalars.difference_update(leaf_indices)

    def count_attribute(self, where, value):
        """Whether the int attribute at ``where`` (its path's text) is read as a run-time
        trip count: seen with a second value, and never needed as a Python int."""
        if self.mode is False or where in self.pinned_attributes:
            return False
        if self.first_attributes.setdefault(where, value) != value:
            self.counting_attributes.add(where)
        return where in self.counting_attributes

    def pin_count_attributes(self, wheres):
        """The count attributes at ``wheres`` decide more than trip counts: settings."""
        self.pinned_attributes.update(wheres)
        self.counting_attributes.difference_update(wheres)

    def bucket(self, size, edges):
        if edges in (None, "pow2"):
            return pow2_bucket(size)
        return edges_bucket(size, edges)

    def __call__(self, leaf_index, array):
        """The ``dynamic`` callable tracing uses: ``{axis: (low, high)}``."""
        named = self.buckets.get(self._named(leaf_index)) if isinstance(
            self.buckets, dict) else None
        edges = self.buckets if isinstance(self.buckets, (list, tuple)) else None
        result = {}
        for axis, size in enumerate(array.shape):
            if isinstance(named, dict) and (axis in named or axis - array.ndim in named):
                chosen = named.get(axis, named.get(axis - array.ndim))
                bucket = self.bucket(size, chosen)
            elif isinstance(named, (tuple, list)) and (axis in named or
                                                      axis - array.ndim in named):
                bucket = self.bucket(size, edges)
            elif self.mode is True or (self.mode == "auto" and (leaf_index, axis) in
                                       self.dynamic):
                bucket = self.bucket(size, edges)
            else:
                bucket = None
            if bucket is not None:
                result[axis] = bucket
        return result


class SameEntry:
    """The dynamic dims and scalars of an existing variant's entry, for tracing another
    path of it (the new path must accept exactly the calls the variant accepts)."""

    def __init__(self, spec):
        self.spec = spec

    def __call__(self, leaf_index, array):
        leaves = self.spec.leaves
        shape = leaves[leaf_index].shape if leaf_index < len(leaves) else ()
        return {axis: self.spec.symbols[dim] for axis, dim in enumerate(shape)
                if isinstance(dim, str)}

    def scalar_is_dynamic(self, leaf_index):
        leaves = self.spec.leaves
        return leaf_index < len(leaves) and leaves[leaf_index].kind == "scalar"

    def count_attribute(self, where, value):
        """Whether the variant reads the int attribute at ``where`` at run time (a trip
        count, or arithmetic on it)."""
        return where in {str(spec.path) for spec in self.spec.implicit
                         if spec.type_name == "int" and not spec.shape}


def _parameter_names(fn):
    try:
        return [name for name in inspect.signature(fn).parameters]
    except (TypeError, ValueError):
        return []


def _is_array(leaf):
    return isinstance(leaf, (np.ndarray, Tensor))


def _same_entry(a, b):
    return (
        [(leaf.kind, leaf.dtype, leaf.shape) for leaf in a.leaves]
        == [(leaf.kind, leaf.dtype, leaf.shape) for leaf in b.leaves]
        and a.symbols == b.symbols
        and a.shape_guard_text == b.shape_guard_text
        and [str(spec.path) for spec in a.implicit] == [str(spec.path) for spec in b.implicit]
        # a child path is given the root's draws, at the root's input positions
        and a.draws == b.draws and (a.draws is None or list(map(tuple, a.inputs)) == list(
            map(tuple, b.inputs)))
    )
