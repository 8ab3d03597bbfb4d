"""Sums a decision reads, computed by NumPy's own ``add`` loop, so they have NumPy's bits
(``tracer/numpy_sums.py`` says which sums and why; ``numpy_products.decision_sums`` names
them in a graph).

Each such sum gets a kernel of its own reading its operand from a C-ordered buffer
(``give_sum_buffers``): per output element, the accumulator starts at ``0.0`` and NumPy's
loop adds the element's contiguous row to it in its reduce mode (``args = (acc, row,
acc)``, steps ``(0, itemsize, 0)``: ``pairwise_sum``), which is what ``np.add.reduce``
does for a C-ordered operand reduced over its trailing axes. No fusion with the operand's
producer: the row must lie in memory as NumPy's does.

>>> import numpy as np, tracejit as tj
>>> f = tj.jit(lambda w, x: np.sum(w * x, axis=1, keepdims=True) > 0, cache="memory")
>>> w, x = np.linspace(-1, 1, 3 * 1000).reshape(3, 1000), np.full((3, 1000), 0.1)
>>> _ = f(w, x)   # traced; the next call runs the kernel
>>> bool((f(w, x) == (np.sum(w * x, axis=1, keepdims=True) > 0)).all())
True
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer import numpy_sums
from tracejit.tracer.ir import Var

from . import dtypes as dt
from . import numpy_loops
from .kernel_index import FlatIndex, const, index_add, index_mul, size_of
from .numpy_products import decision_sums

# margin_rules takes a marked sum of exact operands as NumPy's where this loop is usable.
numpy_sums.set_numpy_sums(lambda dtype: numpy_loops.reduce_loop(dtype) is not None)


def give_sum_buffers(scheduler):
    """Each sum NumPy's loop computes is its own kernel's root, reading its operand from a
    buffer (``schedule``'s initial materialization)."""
    for name in sorted(decision_sums(scheduler.graph), key=scheduler.order.__getitem__):
        eqn = scheduler.producers[name]
        scheduler.materialize(eqn.out)
        operand = eqn.inputs[0]
        if isinstance(operand, Var) and operand.name in scheduler.producers:
            scheduler.materialize(operand)


def is_numpy_sum(kernel):
    """``kernel``'s root is a sum NumPy's loop computes (``decision_sums``)."""
    schedule = kernel.schedule
    found = getattr(schedule, "_decision_sums", None)
    if found is None:
        found = schedule._decision_sums = decision_sums(schedule.graph)
    return kernel.kernel.root.name in found


def build_numpy_sum(kernel):
    """The reduction kernel's loop nest: per output element (the kept dims, in order), its
    row of the operand summed by NumPy's loop (``numpy_loops.emit_reduce_call``)."""
    eqn = kernel.root_eqn()
    root, operand = kernel.kernel.root, eqn.inputs[0]
    dtype = np.dtype(root.aval.dtype)
    builder = kernel.ir_builder
    shape, axes = operand.aval.shape, set(eqn.params_dict["axes"])
    kept = tuple(dim for axis, dim in enumerate(shape) if axis not in axes)
    row_length = kernel.dim(size_of(tuple(shape[axis] for axis in sorted(axes))))
    strides = kernel.shape_strides(kept)
    total = kernel.entry.alloca(dt.memory_type(dtype))
    element = dt.memory_type(dtype)

    def per_row(index):
        row = const(0)
        for component, stride in zip(index, strides):
            row = index_add(builder, row, index_mul(builder, component.value, stride))
        builder.store(dt.constant(dtype, 0), total)
        start = builder.gep(kernel.pointers[operand.name], [builder.mul(row, row_length)],
                            source_etype=element)
        numpy_loops.emit_reduce_call(builder, dtype, total, start, row_length)
        kernel.store(root.name, FlatIndex(row), builder.load(total, typ=element), dtype)

    kernel.loops(kept, per_row, inner_from=len(kept), split_level=0 if kept else None)
