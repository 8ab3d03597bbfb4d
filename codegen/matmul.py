"""Matmul kernels: a GEMM call (OpenBLAS, or tracejit's own for float32 matrices) when the
operands are buffers, else a naive loop nest; either way the root's pointwise expression
over the product (bias, activation) runs in place as the kernel's epilogue.

The kernel's ``anchor`` is the matmul equation; its root is the product itself or the
epilogue's result, which takes the product's buffer (``kernel.overrides``).

When the own GEMM runs and the epilogue is one it computes (per row panel, in cache) with
NumPy's exact results (``gemm_epilogue``: ``C + b``, ``np.maximum(C + b, 0)``,
``np.maximum(C, 0)``, the ``np.maximum(0, ...)`` orders and ``nn.relu``'s
``np.where(x <= 0, 0, x)``), the call is ``tj_sgemm_own_epilogue`` and no loop over C
follows.

A batched product (``(..., m, k) @ (..., k, n)``, float32 or float64, batch dims
broadcast) is one call of the own GEMM's batched entry (``codegen/gemm_batched.py``,
``own_batched``), which splits the entries over tracejit's pool, each computed on one
thread, with the same epilogue. Without the own GEMM (``TRACEJIT_GEMM=blas``, or a host
without AVX2) the entries are OpenBLAS calls in a loop.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir

from tracejit.tracer.ir import Literal, Var
from tracejit.tracer.ops import (
    add_p,
    greater_equal_p,
    greater_p,
    less_equal_p,
    less_p,
    maximum_p,
    multiply_p,
    subtract_p,
    swaps_last_two_axes,
    transpose_p,
    where_p,
)

from . import blas
from . import dtypes as dt
from .causal_band import product_reach, weights_reach
from .conv_ir import OUT_OF_MEMORY
from .counted_loop import counted_loop
from .gemm import BATCHED_ENTRIES, COMBINE_ENTRY, EPILOGUE_ENTRY
from .gemm_batched import REACH_ALL
from .gemm_driver import (
    ADD_TO_OTHER,
    NO_ACTIVATION,
    NO_COMBINE,
    RELU,
    RELU_ZERO_FIRST,
    SUBTRACT_FROM_OTHER,
    UNLESS_OTHER_NONPOSITIVE,
    WHERE_OTHER_POSITIVE,
)
from .kernel_index import I32, I64, PTR, REASSOCIATE, ZERO, broadcast_index, const, is_unit, size_of
from .numpy_products import NUMPY_DTYPES, emit_numpy_product, is_decision_product
from .parallel import POOL_FIELDS, THREADS
from .schedule import reshaped_buffer
from .strided_views import matrix_layout, strided_view


def matmul_split(kernel):
    """``(extent, work per iteration)``: the epilogue's rows after a GEMM call (which
    threads itself), else the batch or the rows of the naive loop nest; or None."""
    anchor, root = kernel.kernel.anchor, kernel.kernel.root
    if blas_operands(kernel) is not None:
        if anchor.out.name == root.name or not root.aval.shape or epilogue_always_fused(kernel):
            return None  # all work is in the GEMM call (which threads itself)
        return root.aval.shape[0], size_of(root.aval.shape[1:])
    product = anchor.out
    a, b = anchor.inputs
    batch_rank = len(product.aval.shape) - (len(a.aval.shape) > 1) - (len(b.aval.shape) > 1)
    k_dim = a.aval.shape[-1]
    if batch_rank > 0:
        extent = product.aval.shape[0]
    elif len(a.aval.shape) > 1:
        extent = a.aval.shape[-2]
    else:
        return None
    return extent, size_of(product.aval.shape[1:]) * k_dim


def blas_operands(kernel):
    """``((buffer, transposed), (buffer, transposed))`` when a GEMM (OpenBLAS, or
    tracejit's own) can run this matmul: float operands of the product's dtype that are
    buffers or transposes (last two axes) of buffers."""
    anchor = kernel.kernel.anchor
    producers = kernel.producers
    if np.dtype(anchor.out.aval.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    if not blas.openblas() and not own_gemm_shape(kernel) and not own_batched(kernel):
        return None

    operands = []
    for atom in anchor.inputs:
        if not isinstance(atom, Var) or np.dtype(atom.aval.dtype) not in (
                np.dtype(anchor.out.aval.dtype), _converted_dtype(anchor.out.aval.dtype)):
            return None
        plain = _plain_operand(kernel, atom, producers)
        if plain is None:
            strided = strided_operand(kernel, atom)
            if strided is None:
                return None
            plain = (strided.view.buffer.name, strided.transposed)
        operands.append(plain)
    return tuple(operands)


def _plain_operand(kernel, atom, producers):
    """``(buffer, transposed)`` when ``atom`` is a buffer, a reshape of one, or a transpose
    (of the last two axes) of either; else None."""
    if _buffer_read_in_place(kernel, atom) is not None:
        return _buffer_read_in_place(kernel, atom), False
    eqn = producers.get(atom.name)
    if eqn is None or eqn.prim is not transpose_p:
        return None
    base = eqn.inputs[0]
    if not swaps_last_two_axes(eqn.params_dict["perm"]) or not isinstance(base, Var) or (
        _buffer_read_in_place(kernel, base) is None
    ):
        return None
    return _buffer_read_in_place(kernel, base), True


class StridedOperand(NamedTuple):
    """An operand of a batched product read where it lies (``codegen/strided_views.py``):
    its ``view`` of a buffer, and its matrix as a GEMM reads it (``transposed``, rows
    ``ld`` elements apart)."""

    view: object
    transposed: bool
    ld: int


def strided_operand(kernel, atom):
    """A ``StridedOperand`` when the own GEMM's batched entry runs this product and
    ``atom`` (of the product's dtype) is no plain operand but a static strided view of a
    buffer whose matrix has a unit-stride axis (the schedule left it unstored:
    ``_read_strided``); else None."""
    if not own_batched(kernel) or np.dtype(atom.aval.dtype) != np.dtype(
            kernel.kernel.anchor.out.aval.dtype):
        return None
    if _plain_operand(kernel, atom, kernel.producers) is not None:
        return None
    view = strided_view(atom, kernel.producers, kernel.schedule.buffers)
    layout = matrix_layout(view, atom.aval.shape) if view is not None else None
    return None if layout is None else StridedOperand(view, *layout)


class FusedEpilogue(NamedTuple):
    """What the own GEMM's epilogue computes over C: ``activation(C + bias)`` (``bias`` a
    buffer's name or None), then, with a ``combine`` (``gemm_driver.COMBINES``), that
    value ``v`` with the buffer ``other`` of C's shape: ``other + scale * v``, ``other -
    scale * v``, ``where(other > 0, v, 0)``, ``where(other <= 0, 0, v)``."""

    bias: str | None
    activation: int
    other: str | None = None
    combine: int = NO_COMBINE
    scale: float = 1.0


def gemm_epilogue(kernel):
    """A ``FusedEpilogue`` when the root's expression over C is one the own GEMM's
    epilogue entries (``gemm_driver``) compute with NumPy's exact results, else None:
    ``C + b`` (either order) with ``b`` a buffer of C's dtype holding one value per
    column (shape ``(n,)`` or ``(1, n)``; the same for every entry of a batch), ``C``
    alone, either under
    ``np.maximum(., 0)`` (``RELU``: -0.0 becomes 0.0) or ``np.maximum(0, .)``
    (``RELU_ZERO_FIRST``: -0.0 stays, as NumPy gives the second operand on ties). NaN
    stays NaN through both, as in ``np.maximum``. Without an activation, and for a product
    of two matrices (not a batch), the value may then meet a buffer ``D`` of C's shape
    (``_combination``): an SGD update ``w - lr * (x.T @ g)`` or a relu's backward mask
    ``where(h > 0, g @ w.T, 0)`` is then one pass over C, per row panel in cache."""
    anchor, root = kernel.kernel.anchor, kernel.kernel.root
    product = anchor.out
    if root.name == product.name or not (own_gemm_shape(kernel) or own_batched(kernel)):
        return None
    dtype = np.dtype(product.aval.dtype)
    if np.dtype(root.aval.dtype) != dtype or (
            tuple(root.aval.shape) != tuple(product.aval.shape)):
        return None
    buffers, producers = kernel.schedule.buffers, kernel.producers

    def inlined(var, kind=dtype):  # computed in this kernel, not read from a buffer
        return isinstance(var, Var) and var.name not in buffers and var.name in producers \
            and np.dtype(var.aval.dtype) == np.dtype(kind)

    combined = None if own_batched(kernel) else _combination(kernel, inlined, dtype)
    if combined is not None:
        value = combined[0]
        if value.name == product.name:
            return FusedEpilogue(None, NO_ACTIVATION, *combined[1:])
        if not inlined(value):
            return None
        top = value
    else:
        top = root
    found = _activation(producers[top.name], inlined, producers, dtype)
    if found is None or (combined is not None and found[0] != NO_ACTIVATION):
        return None
    activation, inner = found
    extra = combined[1:] if combined is not None else ()
    if inner.name == product.name:
        return FusedEpilogue(None, activation) if activation != NO_ACTIVATION else None
    if inner.name != top.name and not inlined(inner):
        return None
    eqn = producers[inner.name]
    if eqn.prim is not add_p or len(eqn.inputs) != 2:
        return None
    first, second = eqn.inputs
    if isinstance(first, Var) and first.name == product.name:
        bias = second
    elif isinstance(second, Var) and second.name == product.name:
        bias = first
    else:
        return None
    n = product.aval.shape[-1]
    if not isinstance(bias, Var) or np.dtype(bias.aval.dtype) != dtype or (
            tuple(bias.aval.shape) not in ((n,), (1, n))):
        return None
    base = reshaped_buffer(bias, producers, buffers)  # b[None, :] reads b itself
    if base is None or base.name not in buffers or base.name in (root.name, product.name):
        return None
    return FusedEpilogue(base.name, activation, *extra)


def _combination(kernel, inlined, dtype):
    """``(v, other, combine, scale)`` when the root is ``D + v``, ``v + D``, ``D - v``,
    ``D + s * v`` / ``D - v * s`` (``s`` a Python or NumPy scalar of C's dtype, rounded to
    it as NumPy does), ``where(D > 0, v, 0)`` or ``where(D <= 0, 0, v)`` (the zeros +0:
    NumPy's result), with ``D`` a buffer of C's shape and dtype (a reshape of one reads it
    in place) other than C; ``v`` is the product or a value computed from it here. Else
    None."""
    anchor, root = kernel.kernel.anchor, kernel.kernel.root
    product = anchor.out
    buffers, producers = kernel.schedule.buffers, kernel.producers
    eqn = producers[root.name]

    def matrix(atom):  # D's buffer, or None
        if not isinstance(atom, Var) or tuple(atom.aval.shape) != tuple(product.aval.shape) or (
                np.dtype(atom.aval.dtype) != dtype):
            return None
        base = reshaped_buffer(atom, producers, buffers)
        if base is None or base.name not in buffers or base.name in (root.name, product.name):
            return None
        return base.name

    def value(atom):
        return isinstance(atom, Var) and (atom.name == product.name or inlined(atom))

    if eqn.prim in (add_p, subtract_p) and len(eqn.inputs) == 2:
        orders = [(0, 1), (1, 0)] if eqn.prim is add_p else [(0, 1)]
        combine = ADD_TO_OTHER if eqn.prim is add_p else SUBTRACT_FROM_OTHER
        for other_at, value_at in orders:
            other, inner = matrix(eqn.inputs[other_at]), eqn.inputs[value_at]
            if other is None or not value(inner):
                continue
            scaled = _scaled(producers[inner.name], dtype) if inner.name != product.name \
                else None
            if scaled is not None and value(scaled[0]):
                return scaled[0], other, combine, scaled[1]
            return inner, other, combine, 1.0
        return None
    if eqn.prim is where_p:
        condition, on_true, on_false = eqn.inputs
        if not inlined(condition, np.bool_):
            return None
        test = producers[condition.name]
        if len(test.inputs) != 2:
            return None
        left, right = test.inputs
        # D > 0 (0 < D) keeps v; D <= 0 (0 >= D) gives 0. Either zero compares the same.
        if test.prim in (greater_p, less_p) and _positive_zero(on_false, dtype):
            compared = left if test.prim is greater_p else right
            zero, combine, inner = (right if test.prim is greater_p else left), \
                WHERE_OTHER_POSITIVE, on_true
        elif test.prim in (less_equal_p, greater_equal_p) and _positive_zero(on_true, dtype):
            compared = left if test.prim is less_equal_p else right
            zero, combine, inner = (right if test.prim is less_equal_p else left), \
                UNLESS_OTHER_NONPOSITIVE, on_false
        else:
            return None
        other = matrix(compared)
        if other is None or not _positive_zero(zero, dtype, either_sign=True) or not value(
                inner):
            return None
        return inner, other, combine, 1.0
    return None


def _scaled(eqn, dtype):
    """``(v, s)`` when ``eqn`` is ``s * v`` or ``v * s`` with ``s`` a literal number (not a
    bool) that keeps C's dtype (a weak Python scalar, or a NumPy scalar of that dtype),
    ``s`` rounded to the dtype; else None."""
    if eqn.prim is not multiply_p or len(eqn.inputs) != 2 or (
            np.dtype(eqn.out.aval.dtype) != dtype):
        return None
    for scale, inner in (eqn.inputs, reversed(eqn.inputs)):
        if isinstance(scale, Literal) and isinstance(inner, Var) and isinstance(
                scale.value, (int, float, np.integer, np.floating)) and not isinstance(
                scale.value, (bool, np.bool_)) and (
                scale.aval.weak or np.dtype(scale.aval.dtype) == dtype):
            with np.errstate(all="ignore"):
                return inner, float(dtype.type(scale.value))
    return None


def _activation(eqn, inlined, producers, dtype):
    """``(activation, its operand)`` for the root's equation: a relu the epilogue computes
    exactly, or ``NO_ACTIVATION`` and the root itself; None for another expression.
    ``nn.relu``'s ``np.where(x <= 0, 0, x)`` is ``np.maximum(x, 0)`` to the bit (-0.0 gives
    0.0, NaN stays), and ``np.where(x < 0, 0, x)`` is ``np.maximum(0, x)`` (-0.0 stays)."""
    if eqn.prim is maximum_p:
        first, second = eqn.inputs
        if _positive_zero(second, dtype) and isinstance(first, Var):
            return RELU, first
        if _positive_zero(first, dtype) and isinstance(second, Var):
            return RELU_ZERO_FIRST, second
        return None
    if eqn.prim is where_p:
        condition, on_true, on_false = eqn.inputs
        if not (_positive_zero(on_true, dtype) and isinstance(on_false, Var) and inlined(
                condition, np.bool_)):
            return None
        compare = producers[condition.name]
        kinds = {less_equal_p: RELU, less_p: RELU_ZERO_FIRST}
        if compare.prim not in kinds:
            return None
        left, right = compare.inputs
        # x <= -0.0 and x <= 0.0 agree (the zeros compare equal): either sign will do.
        if not (isinstance(left, Var) and left.name == on_false.name and _positive_zero(
                right, dtype, either_sign=True)):
            return None
        return kinds[compare.prim], on_false
    return NO_ACTIVATION, eqn.out


def _positive_zero(atom, dtype, either_sign=False):
    """A literal +0 in ``dtype`` (``np.maximum(x, -0.0)`` gives -0.0 for +0.0: not a relu;
    1e-50 is 0 in float32, not in float64)."""
    if not isinstance(atom, Literal) or not isinstance(atom.value, (bool, int, float,
                                                                    np.generic)):
        return False
    with np.errstate(all="ignore"):
        value = np.dtype(dtype).type(atom.value)
    return bool(value == 0 and (either_sign or not np.signbit(value)))


def epilogue_always_fused(kernel):
    """True when the own GEMM always runs this product (no OpenBLAS branch at run time)
    and computes its epilogue: the kernel then has no loop over C."""
    return (blas.own_sgemm_always() or own_batched(kernel)) and (
        blas_operands(kernel) is not None) and gemm_epilogue(kernel) is not None


def _converted_dtype(dtype):
    """The operand dtype a product of ``dtype`` converts before its GEMM call, as NumPy
    does (float32 for a float64 product: ``x64 @ w32``), or None."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.dtype(np.float64) else None


def _buffer_read_in_place(kernel, var):
    """The buffer ``var`` is, or is a reshape of (the same contiguous memory), else None."""
    buffers = kernel.schedule.buffers
    var = reshaped_buffer(var, kernel.producers, buffers)
    return var.name if var is not None and var.name in buffers else None


def rows_folded(kernel):
    """True when the product's batch dims fold into its rows: ``(..., m, k) @ (k, n)``
    with the left operand contiguous (not transposed) is one ``(... * m, k) @ (k, n)``
    product (``nn.linear`` on a sequence batch): B is packed once, not per batch entry,
    and the 2-D product's epilogue and auto rule apply."""
    a, b = kernel.kernel.anchor.inputs
    return len(a.aval.shape) > 2 and len(b.aval.shape) == 2 and isinstance(a, Var) and (
        _buffer_read_in_place(kernel, a) is not None) and not numpy_exact(kernel)


def numpy_exact(kernel):
    """True when this float32 or float64 product reaches a decision
    (``codegen/numpy_products.py``): it is then computed as NumPy computes it, by the
    OpenBLAS calls NumPy's matmul makes, per batch entry (no rows folded), never by the own
    GEMM. (Not under the ``own`` setting: every product on the own GEMM, for its tests and
    benchmarks.)"""
    anchor = kernel.kernel.anchor
    return np.dtype(anchor.out.aval.dtype) in NUMPY_DTYPES and blas.openblas() and (
        blas.gemm_setting() != "own") and is_decision_product(kernel)


def own_gemm_shape(kernel):
    """True when this matmul may call tracejit's own GEMM (``codegen/gemm.py``): a
    float32 product of two matrices (batch dims folded into rows: ``rows_folded``), on
    a host and setting that allow it (``blas``)."""
    anchor = kernel.kernel.anchor
    return (np.dtype(anchor.out.aval.dtype) == np.dtype(np.float32)
            and (all(len(atom.aval.shape) == 2 for atom in anchor.inputs)
                 or rows_folded(kernel))
            and blas.own_sgemm_enabled() and not numpy_exact(kernel))


def batch_shape(anchor):
    """The product's batch dims (those before its matrix dims)."""
    product = anchor.out
    a, b = anchor.inputs
    matrix_dims = (len(a.aval.shape) > 1) + (len(b.aval.shape) > 1)
    return tuple(product.aval.shape[: len(product.aval.shape) - matrix_dims])


def own_batched(kernel):
    """True when this matmul is a batched float32 or float64 product the own GEMM's
    batched entry runs (``codegen/gemm_batched.py``): always, where the setting and host
    allow the own GEMM (``blas.own_sgemm_enabled``). The alternative, a loop of OpenBLAS
    calls, starts and joins OpenBLAS's threads per entry."""
    anchor = kernel.kernel.anchor
    return bool(batch_shape(anchor)) and np.dtype(anchor.out.aval.dtype) in (
        np.dtype(np.float32), np.dtype(np.float64)) and blas.own_sgemm_enabled() and (
        not rows_folded(kernel)) and not numpy_exact(kernel)


def build_matmul(kernel):
    """The loop nest of a matmul kernel: a GEMM call in the entry when the operands allow
    it (``build_gemm_call``), else a naive loop nest; then the epilogue."""
    if blas_operands(kernel) is not None:
        return build_gemm_call(kernel)
    builder = kernel.ir_builder
    anchor = kernel.kernel.anchor
    root = kernel.kernel.root
    product = anchor.out
    if product.name != root.name:
        kernel.overrides[product.name] = root.name  # the epilogue reads the product in place
    a, b = anchor.inputs
    dtype = product.aval.dtype
    a_rank, b_rank = len(a.aval.shape), len(b.aval.shape)
    shape = product.aval.shape
    batch = shape[: len(shape) - (a_rank > 1) - (b_rank > 1)] if a_rank > 1 or b_rank > 1 \
        else ()
    k_dim = a.aval.shape[-1]
    has_m, has_n = a_rank > 1, b_rank > 1

    def operand_index(operand, batch_index, row, column, left):
        rank = len(operand.aval.shape)
        if rank == 1:  # a vector: k is the column on the left, the row on the right
            return (column if left else row,)
        core = (row, column)
        batch_shape = operand.aval.shape[:-2]
        return broadcast_index(batch_index, batch_shape, batch) + core

    def epilogue(out_index):
        if product.name != root.name:
            value = kernel.compute(kernel.root_eqn(), out_index)
            kernel.store(root.name, out_index, value, root.aval.dtype)

    def per_batch(batch_index):
        def per_row(row):
            if has_n:
                out_row = (*batch_index, *((row,) if has_m else ()))
                zero = dt.constant(dtype, 0)
                kernel.loop(kernel.dim(shape[-1]),
                            lambda j: kernel.store(root.name, (*out_row, j), zero, dtype),
                            inner=True)

                def per_k(k):
                    left = kernel.value(a, operand_index(a, batch_index, row, k, True), dtype)

                    def per_column(j):
                        right = kernel.value(b, operand_index(b, batch_index, k, j, False),
                                             dtype)
                        out_index = (*out_row, j)
                        current = kernel.load(root.name, out_index, dtype)
                        kernel.store(root.name, out_index,
                                     multiply_add(builder, current, left, right, dtype), dtype)

                    kernel.loop(kernel.dim(shape[-1]), per_column, inner=True)

                kernel.loop(kernel.dim(k_dim), per_k, inner=False)
                kernel.loop(kernel.dim(shape[-1]), lambda j: epilogue((*out_row, j)),
                            inner=True)
            else:
                accumulator = kernel.entry.alloca(dt.register_type(dtype))
                builder.store(dt.constant(dtype, 0), accumulator)

                def per_k(k):
                    left = kernel.value(a, operand_index(a, batch_index, row, k, True), dtype)
                    right = kernel.value(b, operand_index(b, batch_index, k, ZERO, False),
                                         dtype)
                    current = builder.load(accumulator, typ=dt.register_type(dtype))
                    builder.store(multiply_add(builder, current, left, right, dtype,
                                               reassociate=True), accumulator)

                kernel.loop(kernel.dim(k_dim), per_k, inner=True)
                out_index = (*batch_index, *((row,) if has_m else ()))
                kernel.store(root.name, out_index,
                             builder.load(accumulator, typ=dt.register_type(dtype)), dtype)
                epilogue(out_index)

        if has_m:
            kernel.loop(kernel.dim(a.aval.shape[-2]), per_row, inner=False, split=not batch)
        else:
            per_row(ZERO)

    kernel.loops(batch, per_batch, inner_from=len(batch), split_level=0 if batch else None)


def build_gemm_call(kernel):
    """C = A @ B by a GEMM in the entry: OpenBLAS, or for float32 products of two
    matrices tracejit's own (``codegen/gemm.py``, as ``blas`` chooses); a batch in one
    call of the own GEMM's batched entry (``own_batched``), else per batch entry; then
    the epilogue - the root's pointwise expression over C, in place - split across the
    thread pool, unless the own GEMM computed it (``gemm_epilogue``)."""
    program = kernel.program
    anchor, root = kernel.kernel.anchor, kernel.kernel.root
    product = anchor.out
    (a_name, a_transposed), (b_name, b_transposed) = blas_operands(kernel)
    own = own_gemm_shape(kernel)
    batched = own_batched(kernel)
    as_numpy = numpy_exact(kernel)
    fused = gemm_epilogue(kernel) if own or batched else None
    a, b = anchor.inputs
    dtype = np.dtype(product.aval.dtype)
    a_shape, b_shape = tuple(a.aval.shape), tuple(b.aval.shape)
    m = a_shape[-2] if len(a_shape) > 1 else 1
    k = a_shape[-1]
    n = b_shape[-1] if len(b_shape) > 1 else 1
    batch = batch_shape(anchor)
    a_batch, b_batch = a_shape[:-2], b_shape[:-2]
    if rows_folded(kernel):  # one (... * m, k) @ (k, n) product
        m, batch, a_batch = size_of(a_shape[:-1]), (), ()

    # Operands of another dtype (float32 in a float64 product) are converted into a copy
    # first, as NumPy does: the alternative, the naive loop nest, ran x64 @ w32 at
    # (8, 128, 256) @ (256, 1024) in 48 ms (dgemm on a converted copy: a few ms).
    converted = sorted({name for name, atom in ((a_name, a), (b_name, b))
                        if np.dtype(atom.aval.dtype) != dtype})
    sizes = {name: size_of(atom.aval.shape) for name, atom in ((a_name, a), (b_name, b))}

    def prologue(function, builder, dims, pointers):
        if not converted:
            emit_calls(builder, dims, pointers)
            return
        status = function.args[-1]
        pointers, copies = dict(pointers), []
        for name in converted:
            copy = converted_copy(builder, pointers[name], dims.dim(sizes[name]), status)
            pointers[name] = copy
            copies.append(copy)
        emit_calls(builder, dims, pointers)
        for copy in copies:
            builder.call(_libc(builder.module, "free", ir.VoidType(), [PTR]), [copy])

    def emit_calls(builder, dims, pointers):
        element = dtype.itemsize

        def call_blas(values, a_pointer, b_pointer, c_pointer, lda, ldb):
            # OpenBLAS runs its own threads: ours must not spin on the cores meanwhile.
            builder.call(program.pool_park(), [program.pool_state(POOL_FIELDS)])

            def call_sgemm():
                builder.call(program.gemm_function(dtype), [
                    ir.Constant(I32, 101), ir.Constant(I32, 112 if a_transposed else 111),
                    ir.Constant(I32, 112 if b_transposed else 111), *values,
                    dt.constant(dtype, 1.0), a_pointer, lda, b_pointer, ldb,
                    dt.constant(dtype, 0.0), c_pointer, values[1]])

            if as_numpy:  # a decision reads it: NumPy's own call (gemv, dot, syrk, gemm)
                emit_numpy_product(builder, builder.module, values,
                                   (a_pointer, b_pointer, c_pointer),
                                   (a_transposed, b_transposed), (lda, ldb), call_sgemm,
                                   dtype)
            else:
                call_sgemm()

        def call_own(values, a_pointer, b_pointer, c_pointer, lda, ldb, c_offset):
            # Splits C's rows over our pool itself (small products stay on this thread).
            arguments = [const(int(a_transposed)), const(int(b_transposed)), *values,
                         a_pointer, lda, b_pointer, ldb, c_pointer, values[1]]
            if fused is None:
                builder.call(program.own_gemm_function(), arguments)
                return
            bias = pointers[fused.bias] if fused.bias is not None else ir.Constant(PTR, None)
            arguments += [bias, const(fused.activation)]
            if fused.combine == NO_COMBINE:
                builder.call(own_gemm_epilogue_function(program.module), arguments)
                return
            # D is a buffer of C's shape: rows n apart, at the product's own offset.
            other = builder.gep(pointers[fused.other], [builder.mul(c_offset, const(
                element))], source_etype=dt.I8)
            builder.call(own_gemm_combine_function(program.module), [
                *arguments, other, values[1], const(fused.combine),
                ir.Constant(ir.DoubleType(), fused.scale)])

        def call(a_offset, b_offset, c_offset):
            values = [dims.dim(dim) for dim in (m, n, k)]
            a_pointer = builder.gep(pointers[a_name], [builder.mul(a_offset, const(
                element))], source_etype=dt.I8)
            b_pointer = builder.gep(pointers[b_name], [builder.mul(b_offset, const(
                element))], source_etype=dt.I8)
            c_pointer = builder.gep(pointers[root.name], [builder.mul(c_offset, const(
                element))], source_etype=dt.I8)
            lda = values[0] if a_transposed else values[2]
            ldb = values[2] if b_transposed else values[1]
            operands = (values, a_pointer, b_pointer, c_pointer, lda, ldb)
            if not own:
                call_blas(*operands)
                return
            own_operands = (*operands, c_offset)
            pool = program.pool_state(POOL_FIELDS)
            threads = builder.load(builder.gep(pool, [const(0), const(THREADS)],
                                               source_etype=ir.ArrayType(I64, POOL_FIELDS)),
                                   typ=I64)
            condition = blas.own_sgemm_condition(builder, *values, b_transposed, threads)
            if condition is True:
                call_own(*own_operands)
                return
            with builder.if_else(condition) as (ours, theirs):
                with ours:
                    call_own(*own_operands)
                    if fused is not None:
                        builder.ret_void()  # C is final: skip the loop over it
                with theirs:
                    call_blas(*operands)

        def call_batched():
            values = [dims.dim(dim) for dim in (m, n, k)]
            lda = values[0] if a_transposed else values[2]
            ldb = values[2] if b_transposed else values[1]
            # Operands read where they lie (strided views): their own ld, offset, strides
            strided = [strided_operand(kernel, atom) for atom in (a, b)]
            lda, ldb = (const(view.ld) if view is not None else ld
                        for view, ld in zip(strided, (lda, ldb)))
            a_pointer, b_pointer = (
                builder.gep(pointers[name], [const(view.view.offset * element)],
                            source_etype=dt.I8) if view is not None else pointers[name]
                for view, name in zip(strided, (a_name, b_name)))
            # [rank, (size, a stride, b stride, c stride) per batch dim, reach, depth],
            # in elements (codegen/gemm_batched.py).
            layout = builder.alloca(I64, size=3 + 4 * len(batch))
            entries = [const(len(batch))]
            for position, dim in enumerate(batch):
                entries.append(dims.dim(dim))
                for operand_batch, matrix, view in ((a_batch, m * k, strided[0]),
                                                    (b_batch, k * n, strided[1])):
                    at = position - (len(batch) - len(operand_batch))
                    broadcast = at < 0 or is_unit(operand_batch[at])
                    if broadcast:
                        entries.append(const(0))
                    elif view is not None:
                        entries.append(const(view.view.strides[at]))
                    else:
                        entries.append(dims.dim(size_of(operand_batch[at + 1:]) * matrix))
                entries.append(dims.dim(size_of(batch[position + 1:]) * (m * n)))
            # C past a causal mask's band is never read; A past it is 0 (causal_band.py)
            for reach in (product_reach(kernel), weights_reach(kernel)):
                entries.append(const(REACH_ALL if reach is None else reach))
            for index, value in enumerate(entries):
                builder.store(value, builder.gep(layout, [const(index)], source_etype=I64))
            bias_name, activation = fused[:2] if fused is not None else (None, NO_ACTIVATION)
            bias = pointers[bias_name] if bias_name is not None else ir.Constant(PTR, None)
            builder.call(own_batched_function(program.module, dtype), [
                const(int(a_transposed)), const(int(b_transposed)), *values,
                a_pointer, lda, b_pointer, ldb, pointers[root.name], values[1],
                bias, const(activation), dims.dim(size_of(batch)), layout])

        if not batch:
            call(const(0), const(0), const(0))
            return
        if batched:
            call_batched()
            return

        def per_batch(index):
            # Unravel the batch index; broadcast it into each operand's batch dims.
            coordinates, rest = [], index
            for dim in reversed(batch):
                size = dims.dim(dim)
                coordinates.append(builder.srem(rest, size))
                rest = builder.sdiv(rest, size)
            coordinates.reverse()

            def offset(operand_batch, matrix):
                lead = len(batch) - len(operand_batch)
                linear = const(0)
                for position, dim in enumerate(operand_batch):
                    coordinate = const(0) if is_unit(dim) else coordinates[lead + position]
                    linear = builder.add(builder.mul(linear, dims.dim(dim)), coordinate)
                return builder.mul(linear, dims.dim(matrix))

            call(offset(a_batch, m * k), offset(b_batch, k * n),
                 builder.mul(index, dims.dim(m * n)))
        counted_loop(builder, const(0), dims.dim(size_of(batch)), per_batch, label="batch")

    kernel.prologue = prologue
    always_own = batched or blas.own_sgemm_always()
    if product.name != root.name and not (fused is not None and always_own):
        kernel.overrides[product.name] = root.name  # the epilogue reads C in place
        eqn = kernel.root_eqn()
        kernel.loops(root.aval.shape, lambda index: kernel.store(
            root.name, index, kernel.compute(eqn, index), root.aval.dtype),
            split_level=0 if root.aval.shape else None)


def own_gemm_epilogue_function(module):
    """``tj_sgemm_own_epilogue`` (``codegen/gemm.py``): ``tj_sgemm_own``'s arguments, then
    ``float* bias`` (or null) and ``i64 activation``; imported by symbol."""
    function = module.globals.get(EPILOGUE_ENTRY)
    if function is None:
        function = ir.Function(module, ir.FunctionType(ir.VoidType(), [
            I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, PTR, I64]), EPILOGUE_ENTRY)
    return function


def own_gemm_combine_function(module):
    """``tj_sgemm_own_combine`` (``codegen/gemm.py``): ``tj_sgemm_own_epilogue``'s
    arguments, then ``float* other``, ``i64 ldo``, ``i64 combine`` and ``double scale``;
    imported by symbol."""
    function = module.globals.get(COMBINE_ENTRY)
    if function is None:
        function = ir.Function(module, ir.FunctionType(ir.VoidType(), [
            I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, PTR, I64, PTR, I64, I64,
            ir.DoubleType()]), COMBINE_ENTRY)
    return function


def converted_copy(builder, source, count, status):
    """A malloc'ed float64 copy of ``count`` float32 elements at ``source``; on a failed
    malloc the kernel reports ``OUT_OF_MEMORY`` (the call then runs eagerly) and returns."""
    module = builder.module
    size = builder.mul(builder.add(count, const(1)), const(8))  # never malloc(0)
    copy = builder.call(_libc(module, "malloc", PTR, [I64]), [size])
    with builder.if_then(builder.icmp_unsigned("==", copy, ir.Constant(PTR, None)),
                         likely=False):
        builder.store(ir.Constant(I32, OUT_OF_MEMORY), status)
        builder.ret_void()

    def convert(index):
        value = builder.load(builder.gep(source, [index], source_etype=ir.FloatType()),
                             typ=ir.FloatType())
        builder.store(builder.fpext(value, ir.DoubleType()),
                      builder.gep(copy, [index], source_etype=ir.DoubleType()))

    counted_loop(builder, const(0), count, convert, label="convert")
    return copy


def _libc(module, name, returns, arguments):
    function = module.globals.get(name)
    if function is None:
        function = ir.Function(module, ir.FunctionType(returns, arguments), name)
    return function


def own_batched_function(module, dtype):
    """The own GEMM's batched entry for ``dtype`` (``codegen/gemm_batched.py``): the
    epilogue entry's arguments, then ``i64 count`` and ``i64* layout``; imported by
    symbol."""
    name = BATCHED_ENTRIES[np.dtype(dtype).name]
    function = module.globals.get(name)
    if function is None:
        function = ir.Function(module, ir.FunctionType(ir.VoidType(), [
            I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, PTR, I64, I64, PTR]), name)
    return function


def multiply_add(builder, current, left, right, dtype, reassociate=False):
    """``current + left * right`` (bool: or/and)."""
    if dt.is_float(dtype):
        flags = REASSOCIATE if reassociate else ("contract",)
        return builder.fadd(current, builder.fmul(left, right, flags=("contract",)),
                            flags=flags)
    if np.dtype(dtype) == np.bool_:
        return builder.or_(current, builder.and_(left, right))
    return builder.add(current, builder.mul(left, right))
