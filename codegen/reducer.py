"""The accumulator of one reduction: identity, combine, finish (``Reducer``).

Reductions follow NumPy's results: float32 sums accumulate in double, max and min
propagate NaN, argmax and argmin return the first position of the best value (the first
NaN wins).

A float32 row sum that is a stage of a fused kernel (softmax, layer norm: not a sum the
user reads) may take its elements ``FLOAT32_GROUP`` at a time
(``add_group``): they are added as a balanced tree in float32 and the group's sum joins
the double accumulator. One conversion to double per group instead of one per element
(converting cost more than the rest of a layer norm's passes together), for an error of
at most log2(FLOAT32_GROUP) float32 roundings on the elements' magnitudes - below the
depth of NumPy's own pairwise summation (and what ``tracer/margin_rules.py`` ``_sum``
allows for our side).
"""

from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .kernel_index import I64, REASSOCIATE, const, float_intrinsic, freeze

# Elements a float32 row sum adds in float32 before converting (a power of two: a tree of
# depth 3). tracer/margin_rules.py's _sum allows log2 of it float32 roundings for us.
FLOAT32_GROUP = 8

NO_NAN_FLAGS = ("nnan", "nsz")


class Reducer:
    """The accumulator of one reduction equation inside ``kernel`` (a ``KernelBuilder``):
    ``start`` it, ``add`` each element's index, read the ``result``."""

    def __init__(self, kernel, eqn):
        self.kernel = kernel
        self.eqn = eqn
        self.name = eqn.prim.name
        self.source = eqn.inputs[0]
        self.out_dtype = eqn.out.aval.dtype
        source_dtype = self.source.aval.dtype
        if self.name in ("argmax", "argmin"):
            self.dtype = source_dtype
        elif self.name == "sum" and np.dtype(self.out_dtype) == np.float32:
            self.dtype = np.dtype(np.float64)  # float32 sums accumulate in double
        else:
            self.dtype = self.out_dtype

    def group_size(self):
        """How many elements ``add_group`` takes at once: ``FLOAT32_GROUP`` for a float32
        sum of float32 values, else 1 (``add`` them one by one)."""
        float32 = np.dtype(np.float32)
        if self.name == "sum" and np.dtype(self.out_dtype) == float32 and (
                np.dtype(self.source.aval.dtype) == float32):
            return FLOAT32_GROUP
        return 1

    def add_group(self, values):
        """Add float32 ``values`` (``group_size()`` of them, or one): summed as a balanced
        tree in float32, then into the double accumulator."""
        builder = self.kernel.ir_builder
        while len(values) > 1:  # no reassociation flags: the tree's depth is the bound
            values = [builder.fadd(values[at], values[at + 1])
                      for at in range(0, len(values), 2)]
        wide = dt.cast(builder, values[0], np.float32, self.dtype)
        current = builder.load(self.slot, typ=dt.register_type(self.dtype))
        builder.store(self.combine(current, wide), self.slot)

    def identity_in(self, dtype):
        dtype = np.dtype(dtype)
        name = self.name
        if name in ("sum", "any"):
            return dt.constant(dtype, 0)
        if name in ("prod", "all"):
            return dt.constant(dtype, 1)
        if dtype == np.bool_:
            return dt.constant(dtype, name in ("min", "argmin"))
        if dt.is_float(dtype):
            return dt.constant(dtype, -np.inf if name in ("max", "argmax") else np.inf)
        info = np.iinfo(dtype)
        return dt.constant(dtype, info.min if name in ("max", "argmax") else info.max)

    def _tracks_nan(self):
        """float max/min: ``add`` keeps the extreme with one compare and select (``vmaxps``)
        and whether a NaN went by apart; ``llvm.maximum`` costs six instructions a vector
        on x86, in one dependency chain."""
        return self.name in ("max", "min") and dt.is_float(self.dtype)

    def start(self):
        entry = self.kernel.entry
        self.slot = entry.alloca(dt.register_type(self.dtype))
        self.kernel.ir_builder.store(self.identity_in(self.dtype), self.slot)
        if self._tracks_nan():
            self.nan_seen = entry.alloca(dt.I1)
            self.kernel.ir_builder.store(dt.I1(0), self.nan_seen)
        if self.name in ("argmax", "argmin"):
            self.position = entry.alloca(I64)
            self.kernel.ir_builder.store(const(0), self.position)
            self.count = entry.alloca(I64)
            self.kernel.ir_builder.store(const(0), self.count)

    def combine(self, current, value):
        builder, dtype = self.kernel.ir_builder, np.dtype(self.dtype)
        name = self.name
        if dtype == np.bool_:
            return builder.or_(current, value) if name in ("sum", "any", "max") else (
                builder.and_(current, value))
        if dt.is_float(dtype):
            if name == "sum":
                return builder.fadd(current, value, flags=REASSOCIATE)
            if name == "prod":
                return builder.fmul(current, value, flags=REASSOCIATE)
            intrinsic = "maximum" if name == "max" else "minimum"
            # NOTE: frozen, or InstCombine turns max(acc, where(mask, x, -inf)) (a masked
            # softmax's peak) into select(mask, max(acc, x), acc), a conditional reduction
            # the loop vectorizer leaves scalar: 25x slower.
            return float_intrinsic(builder, intrinsic, current, freeze(builder, value))
        if name == "sum":
            return builder.add(current, value)
        if name == "prod":
            return builder.mul(current, value)
        compare = ">" if name == "max" else "<"
        return builder.select(builder.icmp_signed(compare, value, current), value, current)

    def combine_into(self, current, index):
        value = self.kernel.value(self.source, index, self.dtype)
        return self.combine(current, value)

    def add(self, index):
        builder = self.kernel.ir_builder
        value = self.kernel.value(self.source, index, self.dtype)
        ty = dt.register_type(self.dtype)
        current = builder.load(self.slot, typ=ty)
        if self.name in ("argmax", "argmin"):
            better = self._better(value, current)
            count = builder.load(self.count, typ=I64)
            position = builder.load(self.position, typ=I64)
            builder.store(builder.select(better, value, current), self.slot)
            builder.store(builder.select(better, count, position), self.position)
            builder.store(builder.add(count, const(1)), self.count)
            return
        if self._tracks_nan():
            value = freeze(builder, value)  # see combine
            # nnan, nsz: what lets the loop vectorizer take this as a max reduction. A NaN
            # makes the running extreme poison; ``result`` then returns NaN and never it.
            better = builder.fcmp_ordered(">" if self.name == "max" else "<", value, current,
                                          flags=NO_NAN_FLAGS)
            builder.store(builder.select(better, value, current, flags=NO_NAN_FLAGS),
                          self.slot)
            seen = builder.load(self.nan_seen, typ=dt.I1)
            builder.store(builder.or_(seen, builder.fcmp_unordered("uno", value, value)),
                          self.nan_seen)
            return
        builder.store(self.combine(current, value), self.slot)

    def _better(self, value, best):
        builder = self.kernel.ir_builder
        if dt.is_float(self.dtype):
            op = ">" if self.name == "argmax" else "<"
            strictly = builder.fcmp_ordered(op, value, best)
            # NumPy: the first NaN wins.
            nan_first = builder.and_(builder.fcmp_unordered("uno", value, value),
                                     builder.fcmp_ordered("ord", best, best))
            return builder.or_(strictly, nan_first)
        compare = builder.icmp_unsigned if np.dtype(self.dtype) == np.bool_ else (
            builder.icmp_signed)
        return compare(">" if self.name == "argmax" else "<", value, best)

    def result(self):
        builder = self.kernel.ir_builder
        if self.name in ("argmax", "argmin"):
            return dt.cast(builder, builder.load(self.position, typ=I64), np.int64,
                           self.out_dtype)
        value = builder.load(self.slot, typ=dt.register_type(self.dtype))
        if self._tracks_nan():
            value = builder.select(builder.load(self.nan_seen, typ=dt.I1),
                                   dt.constant(self.dtype, np.nan), value)
        return dt.cast(builder, value, self.dtype, self.out_dtype)
