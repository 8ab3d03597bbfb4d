"""Strided views: a chain of slices, transposes and dim-splitting reshapes over a buffer,
read as the buffer's memory at an offset with one stride per dim (NumPy's own view of it),
so a batched product reads its operands where they are instead of a kernel copying them.

Attention's ``split_heads`` is the case: ``qkv`` (batch, seq, 3 * d) is one buffer, and
``query = qkv[..., :d].reshape(b, s, h, d / h).transpose(0, 2, 1, 3)`` is, for each (batch,
head), a ``seq x d / h`` matrix with rows ``3 * d`` apart; ``key.transpose(0, 1, 3, 2)`` the
same memory transposed. The own GEMM's batched entry (``codegen/gemm_batched.py``) takes a
stride per batch dim and a leading dimension, so each head is read in place: no copy
kernel for the queries, and none for the keys, which the batched entry transposes per
head on its own thread (``contiguous_b``) instead of a kernel's transposing gather. An
untransposed right operand (the values) is still copied by a kernel
(``schedule._read_strided``): a streaming copy costs less than reading rows 3 KB apart
per head. (The transformer block, one thread: 1.46 ms -> 1.22 ms for its two attention
products and the copies around them.)

Only static shapes and slice bounds, and only what NumPy views without a copy: anything
else (a reshape that merges dims, a step other than 1 along a matrix's unit-stride dim,
symbolic sizes) gives None, and the caller stores the operand as before.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> graph = trace(lambda x: x[:, :, 4:8].reshape(2, 3, 2, 2).transpose(0, 2, 1, 3),
...               np.ones((2, 3, 12), np.float32)).graph
>>> producers = {eqn.out.name: eqn for eqn in graph.equations}
>>> view = strided_view(graph.outputs[0], producers, {graph.inputs[0].name})
>>> view.offset, view.strides
(4, (36, 2, 12, 1))
>>> matrix_layout(view, graph.outputs[0].aval.shape)
(False, 12)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tracejit.tracer.ir import Var
from tracejit.tracer.ops import reshape_p, slice_p, transpose_p

from . import blas
from .numpy_products import NUMPY_DTYPES
from .view_lowering import split_reshape_groups


class StridedView(NamedTuple):
    """``var`` as ``buffer``'s memory: element ``i`` of the view is at ``offset + sum(i[d] *
    strides[d])`` elements from the buffer's start."""

    buffer: Var
    offset: int
    strides: tuple


def contiguous_strides(shape):
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def view_base(var, producers, buffers):
    """The value a chain of view primitives (slice, transpose, reshape) over ``var`` starts
    from: the first that is in ``buffers`` (names), or the first that is no view."""
    while var.name not in buffers:
        eqn = producers.get(var.name)
        if eqn is None or eqn.prim not in (slice_p, transpose_p, reshape_p) or not (
                isinstance(eqn.inputs[0], Var)):
            return var
        var = eqn.inputs[0]
    return var


def strided_view(var, producers, buffers):
    """``var`` (a chain of views over a buffer whose name is in ``buffers``) as a
    ``StridedView``, or None when some link is not a static strided view."""
    if not isinstance(var, Var) or not _static(var.aval.shape):
        return None
    if var.name in buffers:
        return StridedView(var, 0, contiguous_strides(var.aval.shape))
    eqn = producers.get(var.name)
    if eqn is None or not isinstance(eqn.inputs[0], Var):
        return None
    source = eqn.inputs[0]
    if eqn.prim not in (slice_p, transpose_p, reshape_p):
        return None
    inner = strided_view(source, producers, buffers)
    if inner is None:
        return None
    params = eqn.params_dict
    if eqn.prim is transpose_p:
        return inner._replace(strides=tuple(inner.strides[axis] for axis in params["perm"]))
    if eqn.prim is slice_p:
        starts, steps = params["starts"], params["steps"]
        if not _static(starts) or not _static(steps):
            return None
        offset = inner.offset + sum(start * stride for start, stride in zip(
            starts, inner.strides))
        return StridedView(inner.buffer, offset, tuple(
            stride * step for stride, step in zip(inner.strides, steps)))
    return _reshaped(inner, source.aval.shape, var.aval.shape)


def _reshaped(inner, source_shape, out_shape):
    """A reshape of a strided view: one that splits dims (and adds or drops unit ones)
    gives each part of a dim its share of the dim's stride; any other keeps a view only
    when the source is laid out contiguously (the same linear order)."""
    if inner.strides == contiguous_strides(source_shape):
        return inner._replace(strides=contiguous_strides(out_shape))
    groups = split_reshape_groups(source_shape, out_shape)
    if groups is None:
        return None
    strides = [0] * len(out_shape)  # unit dims: any stride reads the same element
    for source_position, positions in groups:
        step = inner.strides[source_position]
        for position in reversed(positions):
            strides[position] = step
            step *= out_shape[position]
    return inner._replace(strides=tuple(strides))


def matrix_layout(view, shape):
    """``(transposed, leading dimension)`` of the view's last two dims as a GEMM operand
    (``op(X)`` of a row-major ``X``: rows ``ld`` apart, or the transpose of one), or None
    when neither has unit stride."""
    rows, columns = shape[-2:]
    row_stride, column_stride = view.strides[-2:]
    if column_stride == 1 or columns == 1:
        return False, max(row_stride, columns, 1)
    if row_stride == 1 or rows == 1:
        return True, max(column_stride, rows, 1)
    return None


def batched_reads_strided(product, decided):
    """Whether the matmul ``product`` is a batch the own GEMM's
    batched entry runs with both operands of its dtype and a batched right operand
    (``codegen/matmul.py``'s ``own_batched``; a 2-D right operand may fold the batch into
    the rows instead): it may then read strided views of buffers in place. ``decided``:
    a call that returns the graph's ``decision_products``."""
    dtype = np.dtype(product.out.aval.dtype)
    a, b = product.inputs
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or len(b.aval.shape) < 3 or (
            len(a.aval.shape) < 2) or not blas.own_sgemm_enabled():
        return False
    if any(not isinstance(atom, Var) or np.dtype(atom.aval.dtype) != dtype
           for atom in product.inputs):
        return False
    # A product a decision reads is NumPy's own OpenBLAS call (codegen/numpy_products.py)
    return not (dtype in NUMPY_DTYPES and blas.openblas() and blas.gemm_setting() != "own"
                and product.out.name in decided())


def _static(values):
    return all(isinstance(value, int) for value in values)
