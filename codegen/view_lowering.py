"""Views and creation as index arithmetic: one rule per primitive, ``rule(kernel, eqn,
index) -> value`` (``codegen/lowering_table.py`` gives each primitive its rule).

A view is never stored: the kernel that reads it maps its own index to the index of the
view's input and reads that (transpose permutes the index, slice scales and shifts it, pad
and concatenate select, gather reads the index from another array). ``kernel`` is the
``KernelBuilder`` emitting the read; ``index`` is a tuple of ``IndexComponent`` (or a
``FlatIndex``, which only a reshape passes on unchanged).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tracejit.tracer.ir import Literal
from tracejit.tracer.ops import broadcast_to_p, flip_p, reshape_p, slice_p, transpose_p

from . import dtypes as dt
from .kernel_index import (
    I1,
    ZERO,
    FlatIndex,
    FusionConflict,
    IndexComponent,
    broadcast_index,
    clamp,
    const,
    is_flat,
    is_inner,
    is_unit,
)
from .pointwise import KernelStatus

# Views NumPy makes without copying (given a base it can view): index maps the kernels
# reading them apply. An output that is a chain of these over an input is returned as
# NumPy's view of the caller's array (schedule.input_view), as eager does.
NUMPY_VIEWS = (slice_p, transpose_p, reshape_p, flip_p, broadcast_to_p)


def broadcast_to(kernel, eqn, index):
    source = eqn.inputs[0]
    return kernel.value(source, broadcast_index(index, source.aval.shape, eqn.out.aval.shape))


def reshape(kernel, eqn, index):
    """A reshape that only adds or drops unit dims relabels the index; any other reads its
    base buffer at the same linear position (a chain of reshapes keeps the element order)."""
    source = eqn.inputs[0]
    if is_flat(index):
        return kernel.value(source, index)
    source_shape, out_shape = source.aval.shape, eqn.out.aval.shape
    relabelled = unit_reshape_index(index, source_shape, out_shape)
    if relabelled is not None:
        return kernel.value(source, relabelled)
    base = _reshape_base(kernel, source)
    if base is None:
        # No buffer to read linearly: the schedule inlined the source because the reshape
        # only splits its dims (split_reshape_groups), whose index is a sum of products.
        split = split_reshape_index(kernel.ir_builder, index, source_shape, out_shape)
        if split is None:
            raise FusionConflict(source)
        return kernel.value(source, split)
    builder = kernel.ir_builder
    linear = const(0)
    for component, stride in zip(index, kernel.shape_strides(out_shape)):
        linear = builder.add(linear, builder.mul(component.value, stride))
    flat = FlatIndex(linear)
    flat.inner = is_inner(index)
    return kernel.load(base.name, flat, base.aval.dtype)


def unit_reshape_index(index, source_shape, out_shape):
    """The source index of a reshape that only adds or drops unit dims (its other dims
    keep their order), or None for any other reshape. The scheduler maps row indices
    with it too (``schedule._read_per_row``)."""
    positions = [d for d, dim in enumerate(out_shape) if not is_unit(dim)]
    source_positions = [d for d, dim in enumerate(source_shape) if not is_unit(dim)]
    if [out_shape[d] for d in positions] != [source_shape[d] for d in source_positions]:
        return None
    mapped = [ZERO] * len(source_shape)
    for out_position, source_position in zip(positions, source_positions):
        mapped[source_position] = index[out_position]
    return tuple(mapped)


def split_reshape_groups(source_shape, out_shape):
    """For a reshape that only splits dims (and adds or drops unit dims), the out dims
    each non-unit source dim becomes: ``[(source position, [out positions])]``; None for
    any other reshape (one that merges dims needs the source's linear order: a buffer).
    A source dim split in several must be static; one kept whole may be symbolic.

    >>> split_reshape_groups((8, 128, 256), (8, 128, 8, 32))
    [(0, [0]), (1, [1]), (2, [2, 3])]
    >>> split_reshape_groups((8, 128, 8, 32), (8, 128, 256)) is None
    True
    """
    out = [d for d, dim in enumerate(out_shape) if not is_unit(dim)]
    groups, taken = [], 0
    for position, dim in enumerate(source_shape):
        if is_unit(dim):
            continue
        if taken < len(out) and out_shape[out[taken]] == dim:
            groups.append((position, [out[taken]]))
            taken += 1
            continue
        if not isinstance(dim, int):
            return None
        group, product = [], 1
        while product < dim and taken < len(out) and isinstance(out_shape[out[taken]], int):
            product *= out_shape[out[taken]]
            group.append(out[taken])
            taken += 1
        if product != dim:
            return None
        groups.append((position, group))
    return groups if taken == len(out) else None


def split_reshape_index(builder, index, source_shape, out_shape):
    """The source index of a reshape that only splits dims (``split_reshape_groups``):
    per source dim, the sum of its out components times their strides in the group;
    unit source dims read 0. None for any other reshape."""
    groups = split_reshape_groups(source_shape, out_shape)
    if groups is None:
        return None
    mapped = [ZERO] * len(source_shape)
    for position, group in groups:
        value, inner, stride = None, False, 1
        for out_position in reversed(group):
            component = index[out_position]
            term = component.value if stride == 1 else builder.mul(component.value,
                                                                  const(stride))
            value = term if value is None else builder.add(value, term)
            inner = inner or component.inner
            stride *= out_shape[out_position] if len(group) > 1 else 1
        mapped[position] = IndexComponent(value, inner)
    return tuple(mapped)


def _reshape_base(kernel, var):
    """The buffer a chain of reshapes reads (reshapes keep the linear order)."""
    while var.name not in kernel.schedule.buffers or var.name == kernel.kernel.root.name:
        eqn = kernel.producers.get(var.name)
        if eqn is None or eqn.prim is not reshape_p:
            return None
        var = eqn.inputs[0]
    return var


def transpose(kernel, eqn, index):
    perm = eqn.params_dict["perm"]
    mapped = [None] * len(perm)
    for position, axis in enumerate(perm):
        mapped[axis] = index[position]
    return kernel.value(eqn.inputs[0], tuple(mapped))


def slice_(kernel, eqn, index):
    """``start + i * step`` per axis; a constant start of an unrolled loop's step is a
    kernel argument (``kernel.starts``), so the steps share one kernel."""
    builder = kernel.ir_builder
    params = eqn.params_dict
    mapped = []
    for axis, (component, start, step) in enumerate(
            zip(index, params["starts"], params["steps"])):
        value = component.value
        if not (isinstance(step, int) and step == 1):
            value = builder.mul(value, kernel.dim(step))
        if (eqn.out.name, axis) in kernel.starts:
            value = builder.add(value, kernel.starts[eqn.out.name, axis])
        elif not (isinstance(start, int) and start == 0):
            value = builder.add(value, kernel.dim(start))
        mapped.append(IndexComponent(value, component.inner))
    return kernel.value(eqn.inputs[0], tuple(mapped))


def sliding_window(kernel, eqn, index):
    """Window ``w`` of count ``o`` along an axis reads ``o * stride + w`` (the window
    axes are the last ones of the output)."""
    builder = kernel.ir_builder
    params = eqn.params_dict
    rank = len(eqn.inputs[0].aval.shape)
    mapped = list(index[:rank])
    for position, (axis, stride) in enumerate(zip(params["axes"], params["strides"])):
        count, offset = index[axis], index[rank + position]
        value = count.value if stride == 1 else builder.mul(count.value, const(stride))
        mapped[axis] = IndexComponent(builder.add(value, offset.value),
                                      count.inner or offset.inner)
    return kernel.value(eqn.inputs[0], tuple(mapped))


def flip(kernel, eqn, index):
    axes = eqn.params_dict["axes"]
    shape = eqn.inputs[0].aval.shape
    mapped = list(index)
    for axis in axes:
        last = kernel.entry.sub(kernel.dim(shape[axis]), const(1))
        mapped[axis] = IndexComponent(kernel.ir_builder.sub(last, index[axis].value),
                                      index[axis].inner)
    return kernel.value(eqn.inputs[0], tuple(mapped))


def pad(kernel, eqn, index):
    """Zero outside the source (and between its elements, for interior padding); the read
    itself is clamped, so it stays in bounds where the select discards it."""
    builder = kernel.ir_builder
    source = eqn.inputs[0]
    valid, mapped = ir.Constant(I1, 1), []
    for component, dim, (low, _, interior) in zip(index, source.aval.shape,
                                                   eqn.params_dict["config"]):
        relative = builder.sub(component.value, kernel.dim(low))
        position = relative
        ok = builder.icmp_signed(">=", relative, const(0))
        if interior:
            stride = const(interior + 1)
            position = builder.sdiv(relative, stride)
            ok = builder.and_(ok, builder.icmp_signed(
                "==", builder.srem(relative, stride), const(0)))
        count = kernel.dim(dim)
        ok = builder.and_(ok, builder.icmp_signed("<", position, count))
        valid = builder.and_(valid, ok)
        mapped.append(IndexComponent(clamp(builder, position, count), component.inner))
    value = kernel.value(source, tuple(mapped))
    return builder.select(valid, value, dt.constant(source.aval.dtype, 0))


def concatenate(kernel, eqn, index):
    """Each operand read at the clamped local position; the last operand whose range
    starts at or before the index wins."""
    builder = kernel.ir_builder
    axis = eqn.params_dict["axis"]
    dtype = eqn.out.aval.dtype
    component = index[axis]
    offset, result = const(0), None
    for operand in eqn.inputs:
        count = kernel.dim(operand.aval.shape[axis])
        local = builder.sub(component.value, offset)
        mapped = list(index)
        mapped[axis] = IndexComponent(clamp(builder, local, count), component.inner)
        value = kernel.value(operand, tuple(mapped), dtype)
        inside = builder.icmp_signed(">=", local, const(0))
        result = value if result is None else builder.select(inside, value, result)
        offset = kernel.entry.add(offset, count)
    return result


def gather(kernel, eqn, index):
    """``source[..., indices[i], ...]``: negative indices wrap once, as NumPy's; an index
    still out of range reports ``INDEX_OUT_OF_RANGE`` (the call then runs eagerly)."""
    builder = kernel.ir_builder
    source, indices = eqn.inputs
    axis = eqn.params_dict["axis"]
    depth = len(indices.aval.shape)
    position = kernel.value(indices, tuple(index[axis:axis + depth]), np.int64)
    count = kernel.dim(source.aval.shape[axis])
    position = builder.select(builder.icmp_signed("<", position, const(0)),
                              builder.add(position, count), position)
    out_of_range = builder.or_(builder.icmp_signed("<", position, const(0)),
                               builder.icmp_signed(">=", position, count))
    kernel.report_if(out_of_range, KernelStatus.INDEX_OUT_OF_RANGE)
    inner = any(component.inner for component in index[axis:axis + depth])
    mapped = (*index[:axis], IndexComponent(clamp(builder, position, count), inner),
              *index[axis + depth:])
    return kernel.value(source, mapped)


def iota(kernel, eqn, index):
    return dt.cast(kernel.ir_builder, index[0].value, np.int64, eqn.out.aval.dtype)


def full(kernel, eqn, index):
    return kernel.literal(Literal.of(eqn.params_dict["value"]), eqn.out.aval.dtype)

