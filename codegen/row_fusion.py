"""Row fusion: reductions computed row by row as *stages* of the kernel that reads them,
and the row scratch that keeps values several passes over a row need.

A kernel with stages (softmax, layer norm) loops over the kept dims; per row, it runs one
pass over the row per stage (each a ``Reducer``), then the pass that stores the row; the
stage values stand in for the reductions while the row's elements are read again from
cache. Values of the row's shape that two or more passes need and that are expensive to
recompute are stored on the first pass in a row-sized buffer on the stack and loaded on
later passes.
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer.ir import Var

from . import dtypes as dt
from .counted_loop import counted_loop, set_loop_hints
from .kernel_index import (
    I1,
    IndexComponent,
    const,
    index_add,
    index_mul,
    is_flat,
    reduced_axes,
    size_of,
)
from .lowering_table import LOWERINGS
from .reducer import Reducer

# Row scratch: values that several passes over a row need are kept in a per-row buffer
# (on the stack, so at most this many elements) when recomputing them would cost at least
# ROW_SCRATCH_COST (each primitive's ``cost`` in codegen/lowering_table.py: a
# transcendental counts 10, a division 4, other pointwise ops 1).
ROW_SCRATCH_LIMIT = 1 << 15
ROW_SCRATCH_COST = 8

# A grouped float32 row sum (``_grouped_pass``) adds elements GROUP_SPAN apart, in blocks of
# FLOAT32_GROUP spans: a few cache lines, so the row is still read front to back.
GROUP_SPAN = 32


class RowScratch:
    """The row buffers of one kernel: ``buffers`` (var name -> alloca), the names the
    current row has ``filled`` already, and where the buffers' index starts."""

    def __init__(self):
        self.buffers = {}
        self.filled = set()
        self.strides = None
        self.inner_from = None
        self.row_index = None  # the row loop's own index while a pass runs


def rows(kernel, shape, store_row):
    """Outer loops over the kept dims; per row, each stage's reduction in order, then
    ``store_row`` over the row."""
    axes = reduced_axes(kernel.producers[kernel.kernel.stages[0].name])
    inner_from = len(shape) - len(axes)
    stages = [kernel.producers[stage.name] for stage in kernel.kernel.stages]
    plan_row_scratch(kernel, shape, inner_from, stages, kernel.root_eqn())

    def per_row(outer):
        kernel.row_scratch.filled = set()
        for stage in stages:
            kernel.stage_values[stage.out.name] = reduce_row(kernel, stage, shape, inner_from,
                                                             outer)
        kernel.loops(shape, in_row(kernel, store_row), inner_from, outer)

    kernel.loops(shape[:inner_from], per_row, inner_from=len(shape),
                 split_level=0 if inner_from > 0 else None)


def reduce_row(kernel, eqn, shape, inner_from, outer):
    """One pass over the row at ``outer``: the reduction ``eqn``'s value for that row."""
    reducer = Reducer(kernel, eqn)
    reducer.start()
    group = reducer.group_size()
    # Only a stage (a softmax's or layer norm's row sum, which the row's values are then
    # divided by): a sum the user reads keeps double precision throughout, at least as
    # accurate as NumPy's pairwise sum on every input (tests/codegen/test_mathlib.py).
    is_stage = any(stage.name == eqn.out.name for stage in kernel.kernel.stages)
    if group > 1 and is_stage and inner_from == len(shape) - 1:
        _grouped_pass(kernel, reducer, shape, outer, group)
    else:
        kernel.loops(shape, in_row(kernel, reducer.add), inner_from, outer)
    return reducer.result()


def _grouped_pass(kernel, reducer, shape, outer, group):
    """The pass over a one-axis row in blocks of ``group * GROUP_SPAN`` elements: within a
    block, element ``j`` of each of its ``group`` spans are added together
    (``Reducer.add_group``; every span is a unit-stride stream, so the loop vectorizes
    without shuffles, and blocks follow each other in memory); then the elements after
    the last whole block one by one."""
    builder = kernel.ir_builder
    length = kernel.dim(shape[-1])
    block = const(group * GROUP_SPAN)
    blocks = builder.udiv(length, block)
    scratch = kernel.row_scratch
    # Scratch values not stored by an earlier pass are computed and stored here at every
    # element of the group: ``filled`` only changes once the whole pass is emitted.
    filled_before, filled_after = set(scratch.filled), set()

    def element(position):
        index = (*outer, IndexComponent(position, True))
        scratch.filled = set(filled_before)
        scratch.row_index = index
        value = kernel.value(reducer.source, index, np.float32)
        filled_after.update(scratch.filled)
        return value

    def in_block(counter):
        first = builder.mul(counter.value, block)

        def side_by_side(inner):
            start = builder.add(first, inner.value)
            reducer.add_group([element(builder.add(start, const(k * GROUP_SPAN)))
                               for k in range(group)])

        kernel.memo_scopes.append({})
        back_edge = counted_loop(builder, const(0), const(GROUP_SPAN),
                                 lambda inner: side_by_side(IndexComponent(inner, True)),
                                 wrap_flags=("nsw", "nuw"))
        kernel.memo_scopes.pop()
        set_loop_hints(back_edge, {"llvm.loop.vectorize.width": 16})

    kernel.loop(blocks, in_block, inner=True)
    done = builder.mul(blocks, block)
    kernel.loop(builder.sub(length, done),
                lambda counter: reducer.add_group([element(builder.add(done, counter.value))]),
                inner=True)
    scratch.filled = filled_before | filled_after


def in_row(kernel, body):
    """``body`` as a pass over the row: the row scratch knows the row loop's index."""
    def run(index):
        kernel.row_scratch.row_index = index
        body(index)

    return run


def plan_row_scratch(kernel, shape, inner_from, stages, final):
    """Values of the row's shape that two or more passes over the row need and that are
    expensive to recompute get a scratch buffer the size of one row (it stays in L1):
    the first pass computes and stores them, later passes load them."""
    schedule, producers = kernel.schedule, kernel.producers
    inner_shape = shape[inner_from:]
    inner_size = size_of(inner_shape)
    high = inner_size if isinstance(inner_size, int) else inner_size.bounds(
        schedule.graph.ranges)[1]
    if inner_from == len(shape) or high > ROW_SCRATCH_LIMIT:
        return
    stage_names = {stage.out.name for stage in stages}
    passes = [_inlined_from(kernel, stage.inputs[0], stage_names) for stage in stages]
    passes.append(_inlined_from_eqn(kernel, final, stage_names))
    uses = {}
    for names in passes:
        for name in names:
            uses[name] = uses.get(name, 0) + 1
    chosen = set()
    for name in sorted(uses, key=schedule.scheduler.order.__getitem__):
        var = producers[name].out
        if uses[name] < 2 or tuple(var.aval.shape) != tuple(shape):
            continue
        if _cost(kernel, name, stage_names | chosen) >= ROW_SCRATCH_COST:
            chosen.add(name)
    scratch = kernel.row_scratch
    for name in sorted(chosen):
        dtype = producers[name].out.aval.dtype
        scratch.buffers[name] = kernel.entry.alloca(dt.memory_type(dtype),
                                                    size=kernel.dim(inner_size))
    scratch.strides = kernel.shape_strides(inner_shape)
    scratch.inner_from = inner_from


def _inlined_from(kernel, atom, stops):
    if not isinstance(atom, Var):
        return set()
    if atom.name in kernel.schedule.buffers or atom.name in stops:
        return set()
    return {atom.name} | _inlined_from_eqn(kernel, kernel.producers[atom.name], stops)


def _inlined_from_eqn(kernel, eqn, stops):
    names = set()
    for atom in eqn.inputs:
        names |= _inlined_from(kernel, atom, stops)
    return names


def _cost(kernel, name, stops):
    eqn = kernel.producers[name]
    cost = LOWERINGS[eqn.prim].cost
    for atom in eqn.inputs:
        if isinstance(atom, Var) and atom.name not in kernel.schedule.buffers and (
            atom.name not in stops
        ):
            cost += _cost(kernel, atom.name, stops)
    return cost


def scratch_value(kernel, var, index, compute):
    """A scratched value at the row loop's own index: load it if an earlier pass
    stored it, else compute and store it."""
    scratch = kernel.row_scratch
    row_index = scratch.row_index
    if var.name not in scratch.buffers or row_index is None or is_flat(index) or (
        tuple(id(ix.value) for ix in index) != tuple(id(ix.value) for ix in row_index)
    ):
        return compute()
    builder = kernel.ir_builder
    offset = const(0)
    for component, stride in zip(index[scratch.inner_from:], scratch.strides):
        offset = index_add(builder, offset, index_mul(builder, component.value, stride))
    dtype = var.aval.dtype
    pointer = builder.gep(scratch.buffers[var.name], [offset],
                          source_etype=dt.memory_type(dtype))
    if var.name in scratch.filled:
        value = builder.load(pointer, typ=dt.memory_type(dtype))
        return builder.trunc(value, I1) if np.dtype(dtype) == np.bool_ else value
    value = compute()
    stored = builder.zext(value, dt.I8) if np.dtype(dtype) == np.bool_ else value
    builder.store(stored, pointer)
    scratch.filled.add(var.name)
    return value
