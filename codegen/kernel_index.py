"""Index values inside a kernel's loop nest, and the small IR helpers every lowering uses.

A kernel computes the value of its root at an index: a tuple with one
``IndexComponent`` per axis (an i64 value, and whether it varies in the innermost row
loop), or a ``FlatIndex`` when the loop nest collapsed into one loop over same-shaped
contiguous buffers. Views map the index of their output to the index of their input
(``codegen/view_lowering.py``); ``broadcast_index`` maps it into a broadcast operand.

>>> from llvmlite import ir
>>> row = IndexComponent(ir.Constant(I64, 3), inner=True)
>>> [component.inner for component in broadcast_index((ZERO, row), (5,), (2, 5))]
[True]
>>> broadcast_index((ZERO, row), (2, 1), (2, 5))[1] is ZERO
True
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from llvmlite import ir

from tracejit.tracer.ir import Var

from . import dtypes as dt

I1, I32, I64 = dt.I1, dt.I32, dt.I64
PTR = ir.PointerType()

# One index component; ``inner``: the value varies in the row (innermost) loop.
IndexComponent = namedtuple("IndexComponent", "value inner")

# Fast-math flags of a reassociable sum (reductions, dot products).
REASSOCIATE = ("reassoc", "contract")


class FusionConflict(Exception):
    """Lowering met a value it cannot compute where the schedule inlined it (a stage read
    along its row, a reduction or matmul without a buffer, a reshape of no buffer): a
    scheduling bug, reported as an internal error. ``codegen/schedule.py`` decides which
    values get buffers; lowering never reschedules."""

    def __init__(self, var):
        super().__init__(f"{var.name} cannot be inlined where the schedule puts it")
        self.var = var


class FlatIndex:
    """A single linear index into same-shaped contiguous buffers (collapsed loop nest)."""

    __slots__ = ("value", "inner")

    def __init__(self, value):
        self.value, self.inner = value, True


def const(value):
    """An i64 constant."""
    return ir.Constant(I64, value)


def _known(value):
    """The int an i64 constant holds, else None."""
    if isinstance(value, ir.Constant) and value.type == I64 and isinstance(value.constant, int):
        return value.constant
    return None


def _folded(value):
    """``value`` as an i64 constant when it fits (LLVM's ``mul`` and ``add`` wrap; these
    folds only skip work, so a product past i64 is left to them)."""
    return const(value) if -(1 << 63) <= value < (1 << 63) else None


def index_mul(builder, left, right):
    """``left * right`` of i64 index values, without an instruction where an operand is
    the constant 0 or 1 or both are constants. Offsets and strides were full of
    ``mul x, 1``, ``mul 1, 1024`` and ``add 0, x`` (about 100 of the MLP step's 1,700
    lines) that llvmlite built and printed and LLVM parsed, only to fold them away.

    >>> from llvmlite import ir
    >>> builder = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(I64, [I64]),
    ...                                    "f").append_basic_block())
    >>> x = builder.function.args[0]
    >>> index_mul(builder, x, const(1)) is x, str(index_mul(builder, const(3), const(4)))
    (True, 'i64 12')
    """
    a, b = _known(left), _known(right)
    if a is not None and b is not None and (product := _folded(a * b)) is not None:
        return product
    if a == 1 or b == 0:
        return right
    if b == 1 or a == 0:
        return left
    return builder.mul(left, right)


def index_add(builder, left, right):
    """``left + right`` of i64 index values, folded as ``index_mul`` folds."""
    a, b = _known(left), _known(right)
    if a is not None and b is not None and (total := _folded(a + b)) is not None:
        return total
    if a == 0:
        return right
    if b == 0:
        return left
    return builder.add(left, right)


ZERO = IndexComponent(const(0), False)


def is_unit(dim):
    return isinstance(dim, int) and dim == 1


def size_of(shape):
    """The product of a shape's dims (ints or symbolic dims)."""
    size = 1
    for dim in shape:
        size = size * dim
    return size


def elementwise_over_buffers(root, buffers, producers):
    """``root`` is computed elementwise from ``buffers`` of its shape or 0-d ones, so one
    flat loop computes it (``KernelBuilder.flat_ok``; ``numpy_math_chunks``)."""
    shape = tuple(root.aval.shape)
    stack, seen = [root], set()
    while stack:
        var = stack.pop()
        if var.name in seen:
            continue
        seen.add(var.name)
        if var.name in buffers and var.name != root.name:
            if tuple(var.aval.shape) not in (shape, ()):
                return False
            continue
        eqn = producers[var.name]
        if eqn.prim.kind != "pointwise":
            return False
        for atom in eqn.inputs:
            if isinstance(atom, Var):
                if tuple(atom.aval.shape) not in (shape, ()):
                    return False
                stack.append(atom)
    return True


def is_flat(index):
    return isinstance(index, FlatIndex)


def is_inner(index):
    """Does the index vary in the row loop (so a per-row stage value cannot stand in)?"""
    if isinstance(index, FlatIndex):
        return index.inner
    return any(component.inner for component in index)


def reduced_axes(eqn):
    """The axes a reduction equation reduces."""
    params = eqn.params_dict
    return tuple(params["axes"]) if "axes" in params else (params["axis"],)


def is_leading(axes, rank):
    """Are ``axes`` the first few axes, leaving some kept after them?"""
    return len(axes) < rank and axes == tuple(range(len(axes)))


def broadcast_index(index, in_shape, out_shape):
    """The index into an operand of shape ``in_shape`` broadcast to ``out_shape``."""
    if isinstance(index, FlatIndex):
        # Flat loops only read same-shaped buffers and scalars (see KernelBuilder.flat_ok).
        return () if not in_shape and out_shape else index
    lead = len(out_shape) - len(in_shape)
    return tuple(
        ZERO if is_unit(dim) and not is_unit(out_shape[lead + d]) else index[lead + d]
        for d, dim in enumerate(in_shape)
    )


def clamp(builder, position, count):
    """``min(max(position, 0), count - 1)``: a read that stays in bounds (the caller
    selects or reports what an out-of-range position means)."""
    last = builder.sub(count, const(1))
    position = builder.select(builder.icmp_signed(">", position, last), last, position)
    return builder.select(builder.icmp_signed("<", position, const(0)), const(0), position)


def as_bool(builder, value):
    """Python's truth of a number: nonzero (NaN is true)."""
    if value.type == I1:
        return value
    if isinstance(value.type, (ir.FloatType, ir.DoubleType)):
        return builder.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
    return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))


def float_intrinsic(builder, name, *operands):
    """``llvm.<name>.f32/f64`` applied to same-typed float operands."""
    module = builder.module
    full = f"llvm.{name}.{'f64' if operands[0].type == dt.F64 else 'f32'}"
    function = module.globals.get(full) or ir.Function(
        module, ir.FunctionType(operands[0].type, [operand.type for operand in operands]),
        full)
    return builder.call(function, list(operands))


class _Freeze(ir.instructions.Instruction):
    """LLVM's ``freeze`` (llvmlite's builder has none)."""

    def __init__(self, parent, value):
        super().__init__(parent, value.type, "freeze", [value])

    def descr(self, buf):
        value = self.operands[0]
        buf.append(f"freeze {value.type} {value.get_reference()}\n")


def freeze(builder, value):
    """``value`` unchanged, but opaque to the folds that look through it: LLVM cannot
    rewrite an operation on it into a select around the operation."""
    instruction = _Freeze(builder.block, value)
    builder._insert(instruction)
    return instruction


class DimValues:
    """Dims as i64 values, computed once in a function's entry block from its symbols."""

    def __init__(self, builder, symbols):
        self.builder, self.symbols, self.cache = builder, symbols, {}

    def dim(self, dim):
        if isinstance(dim, (int, np.integer)):
            return const(int(dim))
        if dim not in self.cache:
            self.cache[dim] = self._evaluate(dim)
        return self.cache[dim]

    def _evaluate(self, expr):
        builder = self.builder
        total = const(0)
        for monomial, coeff in expr.terms:
            product = const(coeff)
            for factor in monomial:
                value = self.symbols[factor] if isinstance(factor, str) else self._opaque(factor)
                product = index_mul(builder, product, value)
            total = index_add(builder, total, product)
        return total

    def _opaque(self, factor):
        builder = self.builder
        numerator, denominator = self.dim(factor.numerator), self.dim(factor.denominator)
        quotient = builder.sdiv(numerator, denominator)
        remainder = builder.srem(numerator, denominator)
        adjust = builder.and_(
            builder.icmp_signed("!=", remainder, const(0)),
            builder.icmp_signed("!=", builder.icmp_signed("<", remainder, const(0)),
                                builder.icmp_signed("<", denominator, const(0))),
        )
        if factor.op == "//":
            return builder.sub(quotient, builder.zext(adjust, I64))
        return builder.select(adjust, builder.add(remainder, denominator), remainder)
