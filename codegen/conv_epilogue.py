r"""A convolution's epilogue applied to its register tiles as they are stored: the root's
pointwise expression over the product (``relu(conv2d(x, w) + b)``, or the relu mask a
backward keeps) computed on the tile's vectors, so the outputs are written once, final,
instead of written and then read back by a loop over each row.

It applies where every value the expression reads, besides the product, is the same along
a row of outputs: literals, ``np.full`` constants, and buffers that vary only with the
filter (a bias ``b`` or ``b.reshape(F, 1, 1)``), each loaded once per filter and splat.
Its operations are the pointwise rules of ``pointwise`` (the ones the scalar lowering
uses, so the results are the same to the bit) for the arithmetic and comparisons that
take vectors as they take scalars. Anything else (a residual read per pixel, ``exp``)
keeps the row epilogue of ``conv_forward``.

>>> import re, numpy as np, tracejit as tj
>>> from tracejit import nn
>>> layer = tj.jit(lambda x, w, b: nn.relu(nn.conv2d(x, w, b)))
>>> x, w = np.ones((1, 1, 3, 3), np.float32), np.ones((2, 1, 2, 2), np.float32)
>>> b = np.array([-5.0, 1.0], np.float32)
>>> _ = layer(x, w, b)  # traced; the next call runs the kernel
>>> layer(x, w, b)[:, :, 0, 0].tolist()
[[0.0, 5.0]]
>>> [name for name in re.findall(r"define[^@]*@(tj_conv_tile\w+)", layer.lower(x, w, b).llvm_ir)
...  if "_e" in name[-12:]] != []  # the tile function is named for its epilogue
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from tracejit.tracer import ops
from tracejit.tracer.dims import DimExpr
from tracejit.tracer.ir import Literal, Var

from . import dtypes as dt
from .lowering_table import LOWERINGS
from .pointwise import RuleContext, loop_dtypes

# Pointwise primitives whose rules build the same instructions for vectors as for scalars
# (no calls of scalar math functions, no integer division that reports errors).
VECTOR_RULES = {ops.add_p, ops.subtract_p, ops.multiply_p, ops.neg_p, ops.maximum_p,
                ops.minimum_p, ops.where_p, ops.less_p, ops.less_equal_p, ops.greater_p,
                ops.greater_equal_p, ops.equal_p, ops.not_equal_p, ops.stop_gradient_p}
# The product's axis of filters; the others (batch, output rows and columns) must be unit
# in whatever else the expression reads.
FILTER_AXIS, RANK = 1, 4


@dataclass(frozen=True)
class Leaf:
    """A buffer the expression reads once per filter (``per_filter``) or once per tile."""

    name: str
    per_filter: bool


@dataclass(frozen=True)
class TileEpilogue:
    """What the tile function needs: the expression's root, the buffers it reads (passed to
    the tile as pointers, in this order) and a signature naming the expression, so tiles of
    one program with equal epilogues share one function."""

    root: Var
    product: Var
    leaves: tuple
    signature: str
    producers: dict

    def apply(self, builder, product, leaf_values, lanes):
        """The root's value for the vector ``product`` of one filter's outputs;
        ``leaf_values`` are the leaves' scalars for that filter."""
        values = {self.product.name: product}
        for leaf, scalar in zip(self.leaves, leaf_values):
            values[leaf.name] = _splat(builder, scalar, lanes)
        return self._value(builder, self.root, values, lanes)

    def _value(self, builder, atom, values, lanes, dtype=None):
        if isinstance(atom, Literal):
            return _splat(builder, _literal(atom.value, dtype or atom.aval.dtype), lanes)
        if atom.name in values:
            return values[atom.name]
        eqn = self.producers[atom.name]
        if eqn.prim is ops.full_p:
            value = _literal(eqn.params_dict["value"], eqn.out.aval.dtype)
            result = _splat(builder, value, lanes)
        elif eqn.prim in (ops.reshape_p, ops.broadcast_to_p):  # of constants or a leaf
            result = self._value(builder, eqn.inputs[0], values, lanes)
        else:
            operand_dtypes, _ = loop_dtypes(eqn.prim, [a.aval for a in eqn.inputs])
            operands = [self._value(builder, operand, values, lanes, operand_dtype)
                        for operand, operand_dtype in zip(eqn.inputs, operand_dtypes)]
            dtype = operand_dtypes[-1] if eqn.prim is ops.where_p else operand_dtypes[0]
            rule = LOWERINGS[eqn.prim].compute.rule
            result = rule(RuleContext(_Builder(builder), dtype), *operands)
        values[atom.name] = result
        return result


class _Builder:
    """The part of a ``KernelBuilder`` a pointwise rule uses: the IR builder. The rules in
    ``VECTOR_RULES`` report no errors on floats."""

    def __init__(self, builder):
        self.ir_builder = builder

    def report_if(self, condition, code):  # pragma: no cover - integer rules only
        raise AssertionError("a float epilogue reported an error")


def plan(kb):
    """The kernel's epilogue as a ``TileEpilogue``, or None when it has none or reads
    something that varies along a row (then ``conv_forward`` runs it over each row)."""
    kernel = kb.kernel
    product, root = kernel.matmul.out, kernel.root
    if root.name == product.name:
        return None
    dtype = np.dtype(product.aval.dtype)
    buffers, producers = kb.schedule.buffers, kb.producers
    leaves, memo = {}, {}

    def describe(atom, want):
        """A string naming the atom's expression, or None where the tile cannot compute
        it; ``want`` is the dtype its user computes in (a literal is converted to it)."""
        if isinstance(atom, Literal):
            if isinstance(atom.value, DimExpr):
                return None
            value = _literal(atom.value, want)
            return f"{np.dtype(want).char}{value.constant!r}"
        if atom.name == product.name:
            return "P" if np.dtype(want) == dtype else None
        if atom.name in memo:
            return memo[atom.name]
        memo[atom.name] = None
        eqn = producers.get(atom.name)
        if (atom.name in buffers and atom.name != root.name) or eqn is None:
            memo[atom.name] = _leaf(atom, want, dtype, buffers, producers, leaves)
            return memo[atom.name]
        if np.dtype(atom.aval.dtype) != np.dtype(want):
            return None
        if eqn.prim is ops.full_p:
            if isinstance(eqn.params_dict["value"], DimExpr):
                return None
            value = _literal(eqn.params_dict["value"], want)
            text = f"{np.dtype(want).char}{value.constant!r}"
        elif eqn.prim is ops.broadcast_to_p:  # aligned to the right, as the product's users
            text = describe(eqn.inputs[0], want)
        elif eqn.prim is ops.reshape_p:
            inner = eqn.inputs[0]
            if isinstance(inner, Var) and _is_uniform(inner, producers, buffers, product):
                text = describe(inner, want)
            else:  # a reshaped buffer of the filters' values (b.reshape(F, 1, 1)): a leaf
                text = _leaf(atom, want, dtype, buffers, producers, leaves)
        elif eqn.prim in VECTOR_RULES:
            operand_dtypes, _ = loop_dtypes(eqn.prim, [a.aval for a in eqn.inputs])
            texts = [describe(operand, operand_dtype)
                     for operand, operand_dtype in zip(eqn.inputs, operand_dtypes)]
            if any(text is None for text in texts) or any(
                    np.dtype(operand_dtype) not in (dtype, np.dtype(np.bool_))
                    for operand_dtype in operand_dtypes):
                return None
            text = f"{eqn.prim.name}({','.join(texts)})"
        else:
            return None
        memo[atom.name] = text
        return text

    text = describe(root, dtype)
    if text is None or np.dtype(root.aval.dtype) != dtype:
        return None
    names = tuple(leaves.values())
    signature = hashlib.sha1(f"{dtype.char}:{text}".encode()).hexdigest()[:10]
    return TileEpilogue(root, product, names, signature, producers)


def _leaf(atom, want, dtype, buffers, producers, leaves):
    """The description of a buffer read once per filter (through reshapes that keep its
    values along the filter axis), registering it in ``leaves``; None if it varies along a
    row, or needs a conversion."""
    from .schedule import reshaped_buffer

    if np.dtype(atom.aval.dtype) != np.dtype(want) or np.dtype(want) != dtype:
        return None
    shape = tuple(atom.aval.shape)
    if len(shape) > RANK:
        return None
    aligned = (1,) * (RANK - len(shape)) + shape
    if any(not (isinstance(size, int) and size == 1) for axis, size in enumerate(aligned)
           if axis != FILTER_AXIS):
        return None
    base = reshaped_buffer(atom, producers, buffers)
    if base is None or base.name not in buffers:
        return None
    # The value is the base buffer's element f (or 0): its only non-unit axis is F's.
    per_filter = not (isinstance(aligned[FILTER_AXIS], int) and aligned[FILTER_AXIS] == 1)
    leaf = leaves.setdefault(base.name, Leaf(base.name, per_filter))
    if leaf.per_filter != per_filter:
        return None
    return f"L{list(leaves).index(base.name)}{'f' if per_filter else ''}"


def _is_uniform(var, producers, buffers, product):
    """Whether ``var`` is a constant expression (``np.full`` through reshapes)."""
    while isinstance(var, Var) and var.name not in buffers and var.name != product.name:
        eqn = producers.get(var.name)
        if eqn is None:
            return False
        if eqn.prim is ops.full_p:
            return True
        if eqn.prim not in (ops.reshape_p, ops.broadcast_to_p):
            return False
        var = eqn.inputs[0]
    return False


def _literal(value, dtype):
    if isinstance(value, np.generic):
        value = value.item()
    with np.errstate(all="ignore"):
        converted = np.array(value).astype(dtype)[()]
    return dt.constant(dtype, converted)


def _splat(builder, scalar, lanes):
    vector_type = ir.VectorType(scalar.type, lanes)
    if isinstance(scalar, ir.Constant):
        return ir.Constant(vector_type, [scalar.constant] * lanes)
    vector = builder.insert_element(ir.Constant(vector_type, None), scalar,
                                    ir.Constant(dt.I32, 0))
    return builder.shuffle_vector(vector, ir.Constant(vector_type, None),
                                  ir.Constant(ir.VectorType(dt.I32, lanes), [0] * lanes))
