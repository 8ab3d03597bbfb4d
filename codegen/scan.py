"""Scan kernels: ``cumsum`` and ``cumprod`` along the last axis, in NumPy's order.

Each running sum adds its elements one after the other, ``out[..., i] = out[..., i - 1] +
x[..., i]``, the order of ``np.add.accumulate`` (``cumprod``: ``*``, that of
``np.multiply.accumulate``): no reassociation flags, so LLVM keeps it
and the result is NumPy's to the bit (``tracejit.tracer.ops.scan``). Rows (all but the last
axis) are independent: the pool splits the first axis when there is more than one.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .kernel_index import IndexComponent, const, size_of


def scan_split(kernel):
    """Split the first axis (whole rows) when the scanned axis is not the only one."""
    shape = kernel.kernel.root.aval.shape
    return (shape[0], size_of(shape[1:])) if len(shape) > 1 else None


def build_scan(kernel):
    builder = kernel.ir_builder
    eqn = kernel.root_eqn()
    root = kernel.kernel.root
    (x,) = eqn.inputs
    dtype = root.aval.dtype
    shape = root.aval.shape
    if eqn.prim.name == "cumprod":
        add = builder.fmul if dt.is_float(dtype) else builder.mul
    elif np.dtype(dtype) == np.bool_:  # NumPy adds booleans as "or" (True + True is True,
        add = builder.or_              # np.cumsum(x, dtype=bool)); an i1 add wraps to 0
    else:
        add = builder.fadd if dt.is_float(dtype) else builder.add

    def step(index):
        value = kernel.value(x, index, dtype)
        position = index[-1]
        first = builder.icmp_signed("==", position.value, const(0))
        before = builder.select(first, const(0), builder.sub(position.value, const(1)))
        previous = kernel.load(root.name, (*index[:-1], IndexComponent(before, position.inner)),
                               dtype)
        kernel.store(root.name, index, builder.select(first, value, add(previous, value)),
                     dtype)

    kernel.loops(shape, step, split_level=0 if len(shape) > 1 else None)
