"""Reduction kernels: three loop orders, chosen by the reduced axes.

* trailing axes (or a kernel with stages): one accumulator per row, the row's elements in
  the innermost loop (``row_fusion``);
* leading axes: whole rows accumulated into the output, NumPy's order for ``axis=0`` and
  unit-stride inner loops (``reduce_columns``);
* any other axes: kept dims outside, reduced dims inside, strided reads
  (``reduce_generic``).
"""

from __future__ import annotations

import numpy as np

from .kernel_index import ZERO, is_leading, is_unit, reduced_axes, size_of
from .reducer import Reducer
from .row_fusion import plan_row_scratch, reduce_row


def reduce_split(kernel):
    """``(extent, work per iteration)`` of the first kept axis, or None (all reduced)."""
    eqn = kernel.root_eqn()
    shape = eqn.inputs[0].aval.shape
    axes = reduced_axes(eqn)
    kept = [dim for axis, dim in enumerate(shape) if axis not in axes]
    if not kept or is_unit(kept[0]) or kept[0] == 0:
        return None
    return kept[0], size_of(shape) // kept[0]


def build_reduce(kernel):
    """The loop nest of a reduction kernel (its root is the reduction)."""
    eqn = kernel.root_eqn()
    root = kernel.kernel.root
    source_shape = eqn.inputs[0].aval.shape
    axes = reduced_axes(eqn)
    rank = len(source_shape)
    keepdims = eqn.params_dict["keepdims"]

    def out_index(full_index):
        kept = []
        for axis in range(rank):
            if axis in axes:
                if keepdims:
                    kept.append(ZERO)
            else:
                kept.append(full_index[axis])
        return tuple(kept)

    trailing = axes == tuple(range(rank - len(axes), rank))
    if trailing or kernel.kernel.stages:
        inner_from = rank - len(axes)

        stages = [kernel.producers[stage.name] for stage in kernel.kernel.stages]
        if stages:
            plan_row_scratch(kernel, source_shape, inner_from, stages + [eqn], eqn)

        def per_row(outer):
            kernel.row_scratch.filled = set()
            for stage in stages:
                kernel.stage_values[stage.out.name] = reduce_row(
                    kernel, stage, source_shape, inner_from, outer)
            value = reduce_row(kernel, eqn, source_shape, inner_from, outer)
            padded = tuple(outer) + (ZERO,) * len(axes)
            kernel.store(root.name, out_index(padded), value, root.aval.dtype)

        kernel.loops(source_shape[:inner_from], per_row, inner_from=rank,
                     split_level=0 if inner_from > 0 else None)
    elif is_leading(axes, rank) and eqn.prim.name not in ("argmax", "argmin"):
        reduce_columns(kernel, eqn, source_shape, axes, out_index)
    else:
        reduce_generic(kernel, eqn, source_shape, axes, out_index)


def reduce_columns(kernel, eqn, shape, axes, out_index):
    """Reductions over leading axes: accumulate whole rows into the output (NumPy's
    order for axis=0, and unit-stride inner loops)."""
    root = kernel.kernel.root
    reducer = Reducer(kernel, eqn)
    reducer.dtype = np.dtype(root.aval.dtype)  # accumulate in the output, NumPy's order
    kept = shape[len(axes):]
    zeros = (ZERO,) * len(axes)
    kernel.loops(kept, lambda index: kernel.store(
        root.name, out_index(zeros + tuple(index)), reducer.identity_in(root.aval.dtype),
        root.aval.dtype), split_level=0)

    def accumulate(index):
        target = out_index(index)
        current = kernel.load(root.name, target, root.aval.dtype)
        updated = reducer.combine_into(current, index)
        kernel.store(root.name, target, updated, root.aval.dtype)

    kernel.loops(shape, accumulate, inner_from=len(axes), split_level=len(axes))


def reduce_generic(kernel, eqn, shape, axes, out_index):
    """Any axes: kept dims outside, reduced dims inside (strided reads)."""
    root = kernel.kernel.root
    rank = len(shape)
    kept_axes = [axis for axis in range(rank) if axis not in axes]
    order = kept_axes + list(axes)

    def reorder(ordered):
        index = [None] * rank
        for position, axis in enumerate(order):
            index[axis] = ordered[position]
        return tuple(index)

    permuted_shape = tuple(shape[axis] for axis in order)

    def per_output(kept):
        reducer = Reducer(kernel, eqn)
        reducer.start()
        kernel.loops(permuted_shape, lambda ordered: reducer.add(reorder(ordered)),
                     inner_from=len(kept_axes), prefix=kept)
        full = reorder(tuple(kept) + (ZERO,) * len(axes))
        kernel.store(root.name, out_index(full), reducer.result(), root.aval.dtype)

    kernel.loops(permuted_shape[:len(kept_axes)], per_output, inner_from=rank,
                 split_level=0 if kept_axes else None)
