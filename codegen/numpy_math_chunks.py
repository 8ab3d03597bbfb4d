"""A flat pointwise kernel computing math that a decision reads with NumPy's own loops
(``numpy_products.decision_math``: float64 ``exp``, ``log``, ``tanh``, ... by default)
runs in chunks: for each chunk of ``CHUNK`` elements, each such equation's operands are
computed into a stack buffer (or read in place from their buffer), NumPy's loop computes
the chunk of results, and the rest of the expression reads them from there while they are
in L1. NumPy's loop then runs at NumPy's own (SIMD) speed, a vector of results per call,
not one element per call (``numpy_loops.emit_scalar``, the fallback of every other
lowering).

``2 * np.exp(x) + 1`` over a chunk: ``exp`` on ``x``'s chunk in place (no copy), into
the scratch ``e``; then ``out[c + j] = 2 * e[j] + 1``. ``np.exp(x)`` alone writes the
output buffer directly. ``np.exp(np.log(x) * 2)``: ``log`` first, then ``exp`` of a
chunk computed from its scratch.

>>> import numpy as np, tracejit as tj
>>> f = tj.jit(lambda x: (2 * np.exp(x) + 1, np.exp(x) > 2.0), cache="memory")
>>> x = np.linspace(-700.0, 700.0, 5001)
>>> _ = f(x)  # traced; the next call runs the kernel
>>> exact = tj.codegen.numpy_loops.exact_loop("exp", np.float64) is not None
>>> not exact or np.array_equal(f(x)[0], 2 * np.exp(x) + 1)  # NumPy's bits
True
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer.ir import Literal, Var

from . import dtypes as dt
from . import numpy_loops
from .counted_loop import counted_loop
from .kernel_index import FlatIndex, const, elementwise_over_buffers, size_of
from .numpy_products import computes_with_numpy
from .pointwise import loop_dtypes

# Elements per chunk: NumPy's loops reach their speed at a few hundred; 1024 float64
# results (8 KB) and their operands stay in L1.
CHUNK = 1024


def exact_equations(kernel, root):
    """The equations inlined into ``root``'s flat kernel that NumPy's loops compute,
    producers before consumers."""
    found, seen = [], set()

    def visit(var):
        if var.name in seen:
            return
        seen.add(var.name)
        if var.name in kernel.schedule.buffers and var.name != root.name:
            return
        eqn = kernel.producers[var.name]
        for atom in eqn.inputs:
            if isinstance(atom, Var):
                visit(atom)
        if exact_dtype(kernel, eqn) is not None:
            found.append(eqn)

    visit(root)
    return found


def exact_dtype(kernel, eqn):
    """The loop dtype of ``eqn`` when NumPy's loop computes it, else None."""
    name = eqn.prim.name
    if name not in numpy_loops.EXACT_FUNCTIONS:
        return None
    (dtype,), _ = loop_dtypes(eqn.prim, [atom.aval for atom in eqn.inputs])
    if numpy_loops.exact_loop(name, dtype) is None or not computes_with_numpy(kernel, eqn):
        return None
    return dtype


def build_chunked(kernel, root, eqn, equations, split):
    """``root``'s flat loop over ``[start, min(end, count))`` (or ``[0, count)``), in
    chunks, with ``equations`` (``exact_equations``) computed by NumPy's loops."""
    builder = kernel.ir_builder
    shape = root.aval.shape
    count = kernel.dim(size_of(shape)) if shape else const(1)
    start = kernel.start if split else const(0)
    if split:
        count = builder.select(builder.icmp_signed("<", kernel.end, count), kernel.end, count)
    scratch = {}
    for equation in equations:
        dtype = exact_dtype(kernel, equation)
        scratch[equation.out.name] = _buffer(kernel, dtype)
        for position, atom in enumerate(equation.inputs):
            if _in_place(kernel, atom, dtype, root) is None:
                scratch[(equation.out.name, position)] = _buffer(kernel, dtype)
    # NumPy's loop writes the output itself when it computes the root
    root_is_exact = equations[-1] is eqn and (
        np.dtype(root.aval.dtype) == exact_dtype(kernel, eqn))

    def chunk(first):
        left = builder.sub(count, first)
        length = builder.select(builder.icmp_signed("<", left, const(CHUNK)), left,
                                const(CHUNK))
        for equation in equations:
            dtype = exact_dtype(kernel, equation)
            pointers = [_operand_chunk(kernel, equation, position, atom, dtype, root,
                                       scratch, first, length)
                        for position, atom in enumerate(equation.inputs)]
            if equation is eqn and root_is_exact:
                result = builder.gep(kernel.pointers[root.name], [first],
                                     source_etype=dt.memory_type(dtype))
            else:
                result = scratch[equation.out.name]
            numpy_loops.emit_call(builder, equation.prim.name, dtype, pointers + [result],
                                  length)
            kernel.chunk_results[equation.out.name] = (result, first)
        if not root_is_exact:
            kernel.loop(length, lambda ix: _store_root(kernel, root, eqn, first, ix),
                        inner=True)
        kernel.chunk_results.clear()

    counted_loop(builder, start, count, chunk, step=CHUNK, label="chunks")


def _buffer(kernel, dtype):
    """A ``CHUNK``-element scratch in the kernel's frame (every thread has its own)."""
    slot = kernel.entry.alloca(dt.memory_type(dtype), size=CHUNK)
    slot.align = 64
    return slot


def _in_place(kernel, atom, dtype, root):
    """The buffer ``atom`` is, when NumPy's loop may read its chunk where it lies: one of
    the kernel's buffers of the root's shape and the loop's dtype."""
    if not isinstance(atom, Var) or atom.name == root.name or atom.name not in kernel.pointers:
        return None
    if atom.name in kernel.chunk_results or np.dtype(atom.aval.dtype) != dtype:
        return None
    if tuple(atom.aval.shape) != tuple(root.aval.shape):
        return None
    return kernel.pointers[atom.name]


def _operand_chunk(kernel, equation, position, atom, dtype, root, scratch, first, length):
    builder = kernel.ir_builder
    pointer = _in_place(kernel, atom, dtype, root)
    if pointer is not None:
        return builder.gep(pointer, [first], source_etype=dt.memory_type(dtype))
    target = scratch[(equation.out.name, position)]

    def fill(ix):
        index = FlatIndex(builder.add(first, ix.value))
        value = (kernel.literal(atom, dtype) if isinstance(atom, Literal)
                 else kernel.value(atom, index, dtype))
        builder.store(value, builder.gep(target, [ix.value], source_etype=value.type))

    kernel.loop(length, fill, inner=True)
    return target


def _store_root(kernel, root, eqn, first, ix):
    index = FlatIndex(kernel.ir_builder.add(first, ix.value))
    kernel.store(root.name, index, kernel.compute(eqn, index), root.aval.dtype)


def chunk_value(kernel, name, index, dtype):
    """The value of ``name`` NumPy's loop left in its chunk (``kernel.chunk_results``)."""
    pointer, first = kernel.chunk_results[name]
    builder = kernel.ir_builder
    offset = builder.sub(index.value, first)
    element = dt.memory_type(dtype)
    return builder.load(builder.gep(pointer, [offset], source_etype=element), typ=element)



def give_buffers(scheduler):
    """Buffers that keep NumPy's loops on whole chunks (``schedule``'s initial
    materialization): each math result a decision reads gets one unless only flat
    elementwise kernels read it (a reduction, a broadcast or a matmul epilogue that
    inlined it would call the loop per element: a float64 softmax row kernel 25x slower),
    and so does its operand where that is no elementwise chain over buffers of its shape
    (``x - x.max(axis=1, keepdims=True)``), so the kernel computing it is a flat one that
    calls the loop on chunks."""
    from .numpy_products import decision_math

    readers = {}
    for eqn in scheduler.graph.equations:
        for atom in eqn.inputs:
            if isinstance(atom, Var):
                readers.setdefault(atom.name, []).append(eqn)
    for name in sorted(decision_math(scheduler.graph), key=scheduler.order.__getitem__):
        eqn = scheduler.producers[name]
        if not _read_flat(scheduler, eqn.out, readers):
            scheduler.materialize(eqn.out)
        operand = eqn.inputs[0]
        if isinstance(operand, Var) and operand.name in scheduler.producers and not (
                _elementwise_chain(scheduler, operand)):
            scheduler.materialize(operand)


def _read_flat(scheduler, var, readers):
    """Every kernel that would inline ``var`` is a flat elementwise one over its shape."""
    stack, seen = [var], set()
    while stack:
        value = stack.pop()
        for reader in readers.get(value.name, ()):
            if reader.out.name in seen:
                continue
            seen.add(reader.out.name)
            if reader.prim.kind != "pointwise" or not _elementwise_chain(scheduler,
                                                                          reader.out):
                return False
            if tuple(reader.out.aval.shape) != tuple(var.aval.shape):
                return False
            if reader.out.name not in scheduler.buffers:
                stack.append(reader.out)
    return True


def _elementwise_chain(scheduler, top):
    """``top`` is computed elementwise from buffers of its shape (or 0-d ones)."""
    return elementwise_over_buffers(top, scheduler.buffers, scheduler.producers)
