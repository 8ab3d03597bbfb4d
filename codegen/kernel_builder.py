"""The builder core of one kernel: dims, memory access, loops, and the value of an atom at
an index.

A kernel's loop nest stores its root; the value it stores is computed by inlining the
root's producers, each through its lowering rule (``compute(eqn, index)``): pointwise
rules from ``codegen/pointwise.py``, views as index arithmetic from
``codegen/view_lowering.py``. What the loop nest looks like depends on the kernel's kind
(``codegen/kernel_kinds.py``); the entry that splits it across the thread pool is in
``codegen/parallel_entry.py``.

Values already computed at the same index inside the same loop are reused: ``memo_scopes``
is a stack with one scope per open loop, so a value computed in a loop body is forgotten
when the loop closes (it does not dominate the code after the loop).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.ir import Literal

from . import dtypes as dt
from .counted_loop import counted_loop, instructions_from, set_loop_hints
from .kernel_index import (
    I1,
    I32,
    I64,
    PTR,
    DimValues,
    FlatIndex,
    FusionConflict,
    IndexComponent,
    const,
    elementwise_over_buffers,
    index_add,
    index_mul,
    is_inner,
)
from .kernel_kinds import build_kernel
from .lowering_table import LOWERINGS
from .math_rare_path import vector_bits
from .numpy_math_chunks import chunk_value
from .parallel_entry import ALIGNED_CHUNK, entry_function
from .row_fusion import RowScratch, scratch_value
from .row_hoist import close_hoist, compute_hoisted, open_hoist

# A pointwise loop body of this many instructions or more is vectorized with its tail
# folded into the vector loop (masked loads and stores) instead of followed by a vector
# epilogue and a scalar remainder: LLVM then optimizes and emits the body once, not three
# times (chains of 100 and 1000 ops: about 40% less LLVM time). The masks cost ~1% of
# steady-state time at 800 instructions, 3-4% at 400 and 10% at 80 (CPU time, one
# thread, float32[4096] and [100003]), so small bodies, which compile fast anyway, keep
# the epilogues.
FOLD_TAIL_INSTRUCTIONS = 600
# A kernel's single flat loop, folded or of this many instructions or more (a fused chain)
# over a static number of elements that whole vectors cover, names the vector width LLVM
# would pick (``llvm.loop.vectorize.width``), when its body is one block with no error
# flags (a width forces vectorization; where LLVM cannot, as in the inner loops of 2-d
# kernels that keep values across rows, it prints "remark: loop not vectorized" on the
# user's stderr). LLVM then skips its search over
# widths and, for a loop not folded, the vector epilogue, so the body is emitted twice
# (vector loop, scalar remainder), not three times. Chain of 10 ops on float32[4096]: LLVM
# 31 -> 26 ms CPU; of 100 ops (folded): optimize 57 -> 45 ms, the same code. Where a
# remainder runs, the vector epilogue is kept: without it a chain of 10 on 1000 elements
# ran 4% slower.
WIDTH_HINT_INSTRUCTIONS = 64
# A flat pointwise loop LLVM vectorizes (the width hint's conditions) whose body has this
# many instructions or more (one math function: log2 31, tanh 36, erf 48, x ** y 67;
# x * 2 + 1 has 8) runs two vectors an iteration (``llvm.loop.interleave.count`` 2; LLVM's
# cost model picks 1 for them). Those bodies are long dependent chains (tanh: about 60
# cycles from load to store), and on the 2-core AVX-512 host (Zen 5: full-width 512-bit
# multiply-adds, two a cycle) one chain a vector leaves the pipes idle. One thread, CPU
# time, float32[65536] (in cache), variants interleaved in one process, load 15-18: tanh
# -7%, log2 -7%, log10 -5%, log -6%, exp -5%, tan -7%, x ** y -9%, erf -5% (4 vectors:
# -11%, but tanh and log2 lose their gain), the chain of 10 -16%, gelu -8%, x * 2 + 1 the
# same; LLVM time the same (chain of 10: 24 ms). ``ALIGNED_CHUNK`` holds whole pairs of
# vectors, so aligned chunks still need no remainder. (On Zen 4, whose 512-bit operations
# take two halves, helper-153 measured no gain for log10 and tan and register spills in
# x ** y: docs/experiments/float32_math_pipes.)
INTERLEAVE_INSTRUCTIONS = 24
# Kernels whose inner loop nests get a row-invariant block (``codegen/row_hoist.py``):
# the loop nests of these kinds are ``loops``' own.
HOIST_KINDS = ("pointwise", "reduce")


class KernelBuilder:
    """Emits one kernel as ``void kernel(ptr buffer..., i64 symbol..., i64 start..., ptr
    status)``: ``start`` arguments are the constant slice starts, passed at run time so the
    steps of an unrolled loop (``x[:, t]`` for each ``t``) share one kernel."""

    def __init__(self, program, kernel, buffer_names, start_slots=()):
        self.program = program
        self.schedule = program.schedule
        self.kernel = kernel
        self.producers = self.schedule.producers
        self.buffer_names = names = list(buffer_names)  # only the buffers this kernel touches
        self.argument_types = [PTR] * len(names) + [I64] * (
            len(program.symbols) + len(start_slots)) + [PTR]
        self.function = ir.Function(
            program.module, ir.FunctionType(ir.VoidType(), [I64, I64] + self.argument_types),
            kernel.name + "_impl")
        self.function.linkage = "internal"
        # Called from the entry and from the pool's trampoline: inlining would make LLVM
        # optimize and emit the loop nest twice, for no gain at kernel granularity.
        self.function.attributes.add("noinline")
        self.start, self.end, *arguments = self.function.args
        for argument in arguments[: len(names)]:
            argument.add_attribute("noalias")
        self.pointers = dict(zip(names, arguments))
        self.symbols = dict(zip(program.symbols, arguments[len(names):]))
        self.starts = dict(zip(start_slots, arguments[len(names) + len(program.symbols):-1]))
        self.status = arguments[-1]
        entry = self.function.append_basic_block("entry")
        body = self.function.append_basic_block("body")
        self.entry = ir.IRBuilder(entry)  # allocas and loop-invariant dims
        self.ir_builder = ir.IRBuilder(body)  # where the loop nest is being emitted
        self.first_body = body
        self.dim_values = DimValues(self.entry, self.symbols)
        self.strides = {}
        self.memo_scopes = [{}]  # one per open loop: values computed at an index in it
        self.stage_values = {}  # a stage's value for the current row (row_fusion)
        self.errors = {}
        self.overrides = {}  # a value read from another buffer: the product an epilogue reads
        # a value NumPy's loop computed for the open chunk: (scratch, chunk start)
        self.chunk_results = {}  # (codegen/numpy_math_chunks.py)
        self.row_scratch = RowScratch()
        self.prologue = None  # code the entry runs before the (parallel) body: BLAS calls
        self.aligned_chunks = False  # split the flat loop in multiples of ALIGNED_CHUNK
        self.row_hoist = None  # the open inner loop nest's row-invariant block (row_hoist)
        self.hoisted_blocks = set()  # ids of row-invariant blocks: no loop body's size

    def build(self):
        """The kernel: ``impl(start, end, ...)`` over its outer loop, a trampoline for the
        thread pool, and the entry the program calls (``codegen/kernel_kinds.py``)."""
        return build_kernel(self)

    def finish(self):
        """Close ``impl``: report the error flags in the status, return."""
        builder = self.ir_builder
        for code, flag in self.errors.items():
            failed = builder.load(flag, typ=I1)
            old = builder.load(self.status, typ=I32)
            builder.store(builder.select(failed, ir.Constant(I32, code), old), self.status)
        builder.ret_void()
        self.entry.branch(self.first_body)

    def entry_function(self, split):
        """The entry the program calls (``codegen/parallel_entry.py``)."""
        return entry_function(self, split)

    _entry_function = entry_function  # the name codegen/conv*.py call

    @property
    def b(self):
        """``ir_builder``, under the name codegen/conv*.py use."""
        return self.ir_builder

    def root_eqn(self):
        return self.producers[self.kernel.root.name]

    # --- dims -------------------------------------------------------------------------
    def dim(self, dim):
        return self.dim_values.dim(dim)

    def shape_strides(self, shape):
        """Row-major element strides of ``shape``, computed in the entry block."""
        strides, running = [], const(1)
        for dim in reversed(shape):
            strides.append(running)
            running = index_mul(self.entry, running, self.dim(dim))
        return list(reversed(strides))

    def buffer_strides(self, name):
        if name not in self.strides:
            self.strides[name] = self.shape_strides(self.schedule.buffers[name].shape)
        return self.strides[name]

    # --- memory -----------------------------------------------------------------------
    def address(self, name, index, dtype):
        builder = self.ir_builder
        if isinstance(index, FlatIndex):
            offset = index.value
        else:
            offset = const(0)
            for component, stride in zip(index, self.buffer_strides(name)):
                offset = index_add(builder, offset, index_mul(builder, component.value, stride))
        return builder.gep(self.pointers[name], [offset], inbounds=True,
                          source_etype=dt.memory_type(dtype))

    def load(self, name, index, dtype):
        pointer = self.address(name, index, dtype)
        value = self.ir_builder.load(pointer, typ=dt.memory_type(dtype))
        return self.ir_builder.trunc(value, I1) if np.dtype(dtype) == np.bool_ else value

    def store(self, name, index, value, dtype):
        pointer = self.address(name, index, dtype)
        if np.dtype(dtype) == np.bool_:
            value = self.ir_builder.zext(value, dt.I8)
        self.ir_builder.store(value, pointer)

    def report_if(self, condition, code):
        if code not in self.errors:
            self.errors[code] = self.entry.alloca(I1)
            self.entry.store(ir.Constant(I1, 0), self.errors[code])
        flag = self.errors[code]
        builder = self.ir_builder
        builder.store(builder.or_(builder.load(flag, typ=I1), condition), flag)

    # --- loops ------------------------------------------------------------------------
    def loop(self, count, body, inner, split=False, flat=False, hoist=False):
        """``for i in range(count)``; a ``split`` loop runs ``range(start, end)``: the share
        of the iterations the thread pool gave this call (never past ``count``: an entry
        that runs the whole kernel inline passes ``end = 1`` when it planned no split, and
        the split loop may then be empty). A ``flat`` loop is the kernel's only loop, over
        all its elements. ``hoist``: ``count`` is at least 1, so an inner loop that opens a
        nest may compute the values that do not vary in it before it
        (``codegen/row_hoist.py``)."""
        builder = self.ir_builder
        # Split in aligned chunks (``parallel_entry``), such a loop never has a remainder.
        whole_vectors = flat and isinstance(count, ir.Constant) and (
            count.constant % ALIGNED_CHUNK == 0)
        if split:
            count = builder.select(builder.icmp_signed("<", self.end, count), self.end, count)
        opened = None
        if hoist and inner and self.row_hoist is None and self.kernel.kind in HOIST_KINDS:
            self.row_hoist, start = open_hoist(builder, len(self.memo_scopes) - 1)
            opened = (self.row_hoist, start)
            self.hoisted_blocks.add(id(self.row_hoist.block))
        first_block = []

        def counted(counter):
            first_block.append(builder.block)
            self.memo_scopes.append({})
            body(IndexComponent(counter, inner))
            self.memo_scopes.pop()
            first_block.append(builder.block)

        back_edge = counted_loop(builder, self.start if split else const(0), count, counted,
                                 wrap_flags=("nsw", "nuw"))
        if opened is not None:
            self.row_hoist = None
            close_hoist(builder, *opened)
        if not inner or self.kernel.kind != "pointwise" or self.kernel.stages:
            return
        size = instructions_from(first_block[0], skip=self.hoisted_blocks)
        hints = {}
        if size >= FOLD_TAIL_INSTRUCTIONS:
            hints["llvm.loop.vectorize.predicate.enable"] = True
        lanes = self._vector_lanes(first_block[0])
        single_block = first_block[0] is first_block[-1]
        vectorizes = lanes and flat and not self.errors
        if vectorizes and single_block and (
                hints or whole_vectors and size >= WIDTH_HINT_INSTRUCTIONS):
            hints["llvm.loop.vectorize.width"] = lanes
            self.aligned_chunks = self.aligned_chunks or flat
            if whole_vectors and split:
                self._assume_aligned(self.start, self.end)
        if vectorizes and size >= INTERLEAVE_INSTRUCTIONS:
            hints["llvm.loop.interleave.count"] = 2
        if hints:
            set_loop_hints(back_edge, hints)

    def _assume_aligned(self, *bounds):
        """Tell LLVM that ``bounds`` are multiples of ``ALIGNED_CHUNK``, as every caller of
        this ``impl`` passes them (the entry: 0 and a count that is one; the pool: aligned
        chunks of it). The vector loop then needs no scalar remainder after it: LLVM
        emits the body once (chain of 10: emit 10.8 -> 8.1 ms, 5.6 -> 4.1 KB)."""
        module = self.program.module
        assume = module.globals.get("llvm.assume") or ir.Function(
            module, ir.FunctionType(ir.VoidType(), [I1]), "llvm.assume")
        for bound in bounds:
            remainder = self.entry.and_(bound, const(ALIGNED_CHUNK - 1))
            self.entry.call(assume, [self.entry.icmp_unsigned("==", remainder, const(0))])

    def _vector_lanes(self, loop_body):
        """The vector width LLVM picks for a long pointwise loop (full registers of its
        widest element), or None where the body computes in a wider float type than its
        buffers hold (LLVM's cost model may then pick a narrower vector)."""
        widest = max((np.dtype(self.schedule.buffers[name].var.aval.dtype).itemsize
                      for name in self.buffer_names), default=0)
        if not widest:
            return None
        blocks = loop_body.function.blocks
        for block in blocks[blocks.index(loop_body):]:
            if id(block) in self.hoisted_blocks:
                continue
            for instruction in block.instructions:
                kind = getattr(instruction, "type", None)
                if isinstance(kind, ir.DoubleType) and widest < 8:
                    return None
        return vector_bits() // (8 * widest)

    def loops(self, shape, body, inner_from=None, prefix=(), split_level=None):
        """Nested loops over ``shape``; components at positions >= ``inner_from`` are inner;
        the loop at depth ``split_level`` covers only this call's share (see ``loop``)."""
        inner_from = len(shape) - 1 if inner_from is None else inner_from
        if len(prefix) == len(shape):
            body(tuple(prefix))
            return
        depth = len(prefix)
        self.loop(self.dim(shape[depth]),
                  lambda ix: self.loops(shape, body, inner_from, (*prefix, ix), split_level),
                  inner=depth >= inner_from, split=depth == split_level,
                  hoist=self._at_least_one(shape[depth]))

    def _at_least_one(self, dim):
        if isinstance(dim, DimExpr):
            return dim.bounds(self.schedule.graph.ranges)[0] >= 1
        return int(dim) >= 1

    # --- values -----------------------------------------------------------------------
    def literal(self, literal, dtype):
        value = literal.value
        if isinstance(value, DimExpr):
            return dt.cast(self.ir_builder, self.dim(value), np.int64, dtype)
        if isinstance(value, np.generic):
            value = value.item()
        with np.errstate(all="ignore"):
            converted = np.array(value).astype(dtype)[()]
        return dt.constant(dtype, converted)

    def value(self, atom, index, dtype=None):
        """The value of ``atom`` at ``index``, cast to ``dtype`` if given."""
        if isinstance(atom, Literal):
            return self.literal(atom, dtype or atom.aval.dtype)
        result = self._var_value(atom, index)
        if dtype is not None:
            result = dt.cast(self.ir_builder, result, atom.aval.dtype, dtype)
        return result

    def _key(self, name, index):
        if isinstance(index, FlatIndex):
            return (name, "flat", id(index.value))
        return (name, tuple(id(ix.value) for ix in index))

    def _var_value(self, var, index):
        name = var.name
        if name in self.stage_values:
            if is_inner(index):
                raise FusionConflict(var)
            return self.stage_values[name]
        if name in self.overrides:
            return self.load(self.overrides[name], index, var.aval.dtype)
        if name in self.chunk_results and isinstance(index, FlatIndex):
            return chunk_value(self, name, index, var.aval.dtype)
        if name in self.schedule.buffers and name != self.kernel.root.name:
            return self.load(name, index, var.aval.dtype)
        key = self._key(name, index)
        hoist = self.row_hoist
        # While a row-invariant value is computed, only values available before the loop
        # nest (the row's scope and those outside it) may be reused.
        scopes = self.memo_scopes[:hoist.scope + 1] if hoist and hoist.active else (
            self.memo_scopes)
        for scope in reversed(scopes):
            if key in scope:
                return scope[key]
        eqn = self.producers.get(name)
        if eqn is None or LOWERINGS[eqn.prim].compute is None:
            raise FusionConflict(var)  # a reduction that is no stage here, a matmul, ...
        if hoist is not None and (hoist.active or hoist.holds(index)):
            if hoist.active:
                result = self.compute(eqn, index)
            else:
                result, added = compute_hoisted(self.ir_builder, hoist,
                                                lambda: self.compute(eqn, index))
                self.hoisted_blocks.update(id(block) for block in added)
            self.memo_scopes[hoist.scope][key] = result
            return result
        result = scratch_value(self, var, index, lambda: self.compute(eqn, index))
        self.memo_scopes[-1][key] = result
        return result

    def compute(self, eqn, index):
        """The value of ``eqn``'s output at ``index``, by its primitive's lowering."""
        return LOWERINGS[eqn.prim].compute(self, eqn, index)

    def flat_ok(self, root):
        """A single flat loop when the expression is elementwise on same-shaped buffers."""
        return elementwise_over_buffers(root, self.schedule.buffers, self.producers)
