"""Scatter kernels: ``scatter_add`` (the transpose of gather) zeroes its output, then adds
each update at the position its index names. Runs on one thread (updates may collide)."""

from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .kernel_index import FlatIndex, IndexComponent, clamp, const, size_of
from .pointwise import KernelStatus


def build_scatter(kernel):
    builder = kernel.ir_builder
    eqn = kernel.root_eqn()
    root = kernel.kernel.root
    updates, indices = eqn.inputs
    axis = eqn.params_dict["axis"]
    depth = len(indices.aval.shape)
    dtype = root.aval.dtype
    zero = dt.constant(dtype, 0)
    kernel.loop(kernel.dim(size_of(root.aval.shape)) if root.aval.shape else const(1),
                lambda ix: kernel.store(root.name, FlatIndex(ix.value), zero, dtype), inner=True)
    count = kernel.dim(root.aval.shape[axis])

    def add(index):
        position = kernel.value(indices, tuple(index[axis:axis + depth]), np.int64)
        position = builder.select(builder.icmp_signed("<", position, const(0)),
                                  builder.add(position, count), position)
        out_of_range = builder.or_(builder.icmp_signed("<", position, const(0)),
                                   builder.icmp_signed(">=", position, count))
        kernel.report_if(out_of_range, KernelStatus.INDEX_OUT_OF_RANGE)
        target = (*index[:axis], IndexComponent(clamp(builder, position, count), False),
                  *index[axis + depth:])
        current = kernel.load(root.name, target, dtype)
        value = kernel.value(updates, index, dtype)
        combined = builder.fadd(current, value) if dt.is_float(dtype) else (
            builder.or_(current, value) if np.dtype(dtype) == np.bool_
            else builder.add(current, value))
        kernel.store(root.name, target, combined, dtype)

    kernel.loops(updates.aval.shape, add)
