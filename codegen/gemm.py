"""tracejit's own float32 GEMM for AVX-512 hosts, written in LLVM IR (BLIS-style).

    void tj_sgemm_own(i64 trans_a, i64 trans_b, i64 m, i64 n, i64 k,
                      float* a, i64 lda, float* b, i64 ldb, float* c, i64 ldc)

computes ``C = op(A) @ op(B)`` for row-major ``C`` (``m x n``, row stride ``ldc``), where
``op(A)`` is ``A`` (rows ``lda`` apart) or, when ``trans_a``, the transpose of a row-major
``k x m`` ``A`` - so a transposed view is read where it is, never copied; likewise ``B``.
It splits ``C`` by rows or columns across tracejit's thread pool (``codegen/parallel.py``)
when the product is big enough, and otherwise runs on the calling thread. Compiled kernels
import it by symbol (``codegen/blas.py`` chooses it over OpenBLAS's ``sgemm``).

The design (from ``docs/experiments/sgemm_avx512``, where the measurements are):

* micro-kernel: an ``MR x NR`` = 8 x 32 register tile of C (16 ``<16 x float>``
  accumulators), per k two B vectors and 8 broadcast A scalars into ``llvm.fma``; full
  tiles store directly, edge tiles use masked loads and stores; an 8 x 16 variant serves
  column edges of at most 16;
* packing: B into ``KC x NR`` panels (k-major, zero columns past ``n``), A into ``MR x KC``
  panels (zero rows past the chunk); transposes happen in packing;
* blocking: ``KC, MC, NC`` = 256, 128, 4096; K is cut into equal blocks; the first block
  stores C and later ones accumulate (so C is never read before it is written: NaN or
  garbage in the output buffer does not leak in);
* a small B (untransposed, at most ``DIRECT_B_FLOATS``: it stays in cache, as in an RNN
  step or a layer with few outputs): no packing, ``R x 32`` and ``R x 16`` kernels
  (R = 1..8) read A (either layout) and B in place;
* threads: one chunk per pool thread, along the longer of C's rows and columns (each
  chunk packs its own copy of the operand it is not split along); products of fewer
  than ``PARALLEL_WORK`` multiply-adds stay on the calling thread.

Each thread needs a workspace for its packed panels (``WORKSPACE_FLOATS`` floats, 4.3 MB,
of which only what a product touches is ever paged in); workspaces are claimed from a
table the process allocates once (``_Workspaces``), so concurrent callers never share one.

>>> import numpy as np
>>> if supported():
...     a = np.arange(6, dtype=np.float32).reshape(2, 3)
...     b = np.ones((3, 4), np.float32)
...     print(matmul(a, b).tolist(), matmul(a.T, a).shape)  # a.T is read transposed
... else:
...     print([[3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0, 12.0]], (3, 3))
[[3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0, 12.0]] (3, 3)
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import time
from functools import lru_cache

import numpy as np
from llvmlite import ir

from . import llvm, parallel

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
PTR = ir.PointerType()
VOID = ir.VoidType()
V16 = ir.VectorType(F32, 16)

ENTRY = "tj_sgemm_own"
WORKSPACES_SYMBOL = "tj_sgemm_workspaces"

# Register tile and cache blocking (docs/experiments/sgemm_avx512/README.md: measured there).
MR, NR = 8, 32
KC, MC, NC = 256, 128, 4096
# Packed B blocks up to this many floats are swept row panel by row panel (C's rows stay
# contiguous; avoids 4K aliasing when ldc is a power of 2), bigger ones in BLIS order.
ROW_PANEL_ORDER_FLOATS = 96 * 1024
# An untransposed B of at most this many floats (it stays in L2) is read in place, and A
# too: packing costs more than it saves (an RNN step 16 x 64 @ 64 x 64: 2.5 us, was 4.2 us
# packed; logits 512 x 1024 @ 1024 x 10: 148 us, was 335 us).
DIRECT_B_FLOATS = 64 * 1024
# Products of fewer multiply-adds than this stay on the calling thread. On the shared
# 2-core machine the MLP step's 5.2M-multiply-add products (512 x 10 @ 10 x 1024 and the
# like: 0.12-0.24 ms on one thread) took 0.2-0.9 ms when split in two (benchmarks/gemm.py).
PARALLEL_WORK = 1 << 23

# The chunk function's context: the entry's 11 arguments, then how the work is split.
CONTEXT_FIELDS, SPLIT_BY_COLUMNS = 12, 11

WORKSPACE_FLOATS = KC * (-(-NC // NR) * NR) + (-(-MC // MR) * MR) * KC + 64
PACKED_A_OFFSET = KC * (-(-NC // NR) * NR)

# The pool's fields this code reads (codegen/parallel.py's layout).
POOL_THREADS = parallel.THREADS
POOL_FIELDS = parallel.POOL_FIELDS


def supported():
    """True when this host can run the GEMM (AVX-512F)."""
    return _host_has_avx512f()


@lru_cache(maxsize=None)
def _host_has_avx512f():
    import llvmlite.binding as binding

    llvm.target_machine()  # initializes the native target
    return bool(binding.get_host_cpu_features().get("avx512f", False))


def _c64(value):
    return ir.Constant(I64, value)


class _Generator:
    """Builds the module: micro-kernels, packing, the blocked driver, the pool's chunk
    function and the entry."""

    def __init__(self):
        self.module = ir.Module(name="tj_sgemm")
        self.fma = ir.Function(self.module, ir.FunctionType(V16, [V16] * 3), "llvm.fma.v16f32")
        self.masked_loads, self.masked_stores = {}, {}

    # --- vector helpers -----------------------------------------------------------------
    def masked_load(self, builder, pointer, mask, lanes):
        vector, mask_type = ir.VectorType(F32, lanes), ir.VectorType(I1, lanes)
        if lanes not in self.masked_loads:
            self.masked_loads[lanes] = ir.Function(
                self.module, ir.FunctionType(vector, [PTR, I32, mask_type, vector]),
                f"llvm.masked.load.v{lanes}f32.p0")
        return builder.call(self.masked_loads[lanes], [
            pointer, ir.Constant(I32, 4), mask, ir.Constant(vector, None)])

    def masked_store(self, builder, value, pointer, mask, lanes):
        vector, mask_type = ir.VectorType(F32, lanes), ir.VectorType(I1, lanes)
        if lanes not in self.masked_stores:
            self.masked_stores[lanes] = ir.Function(
                self.module, ir.FunctionType(VOID, [vector, PTR, I32, mask_type]),
                f"llvm.masked.store.v{lanes}f32.p0")
        builder.call(self.masked_stores[lanes], [value, pointer, ir.Constant(I32, 4), mask])

    @staticmethod
    def lane_mask(builder, limit, offset, lanes):
        """Lanes ``l`` with ``offset + l < limit`` (i64 operands)."""
        count = builder.trunc(builder.sub(limit, offset), I32)
        index_type = ir.VectorType(I32, lanes)
        first = builder.insert_element(ir.Constant(index_type, ir.Undefined), count,
                                       ir.Constant(I32, 0))
        splat = builder.shuffle_vector(first, ir.Constant(index_type, ir.Undefined),
                                       ir.Constant(index_type, [0] * lanes))
        return builder.icmp_signed("<", ir.Constant(index_type, list(range(lanes))), splat)

    @staticmethod
    def splat(builder, value):
        first = builder.insert_element(ir.Constant(V16, ir.Undefined), value,
                                       ir.Constant(I32, 0))
        return builder.shuffle_vector(first, ir.Constant(V16, ir.Undefined),
                                      ir.Constant(ir.VectorType(I32, 16), [0] * 16))

    # --- control flow -------------------------------------------------------------------
    @staticmethod
    def loop(builder, start, stop, step, body):
        """``for i in range(start, stop, step): body(i)`` (signed i64)."""
        function = builder.function
        before = builder.block
        header = function.append_basic_block("loop")
        inside = function.append_basic_block("loop.body")
        after = function.append_basic_block("loop.end")
        builder.branch(header)
        builder.position_at_end(header)
        index = builder.phi(I64)
        index.add_incoming(start, before)
        builder.cbranch(builder.icmp_signed("<", index, stop), inside, after)
        builder.position_at_end(inside)
        body(index)
        index.add_incoming(builder.add(index, step), builder.block)
        builder.branch(header)
        builder.position_at_end(after)

    @staticmethod
    def element(builder, pointer, offset):
        return builder.gep(pointer, [offset], inbounds=True, source_etype=F32)

    @staticmethod
    def smaller(builder, x, y):
        return builder.select(builder.icmp_signed("<", x, y), x, y)

    # --- micro-kernels ------------------------------------------------------------------
    def micro(self, name, vectors):
        """``C[0:mr, 0:nr] (+)= Ap @ Bp`` for packed panels (A: MR per k, B: NR per k),
        with ``vectors`` accumulators of 16 per row; ``accumulate`` adds to C."""
        function = ir.Function(self.module, ir.FunctionType(
            VOID, [I64, PTR, PTR, PTR, I64, I64, I64, I64]), name)
        function.linkage = "internal"
        depth, a_panel, b_panel, c, ldc, accumulate, rows, columns = function.args
        for pointer in (a_panel, b_panel, c):
            pointer.add_attribute("noalias")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        body = function.append_basic_block("k")
        store = function.append_basic_block("store")
        entry = builder.block
        zero = ir.Constant(V16, None)
        builder.cbranch(builder.icmp_signed(">", depth, _c64(0)), body, store)

        builder.position_at_end(body)
        k = builder.phi(I64)
        k.add_incoming(_c64(0), entry)
        accumulators = [[builder.phi(V16) for _ in range(vectors)] for _ in range(MR)]
        for row in accumulators:
            for phi in row:
                phi.add_incoming(zero, entry)
        b_row = self.element(builder, b_panel, builder.mul(k, _c64(NR)))
        b_vectors = [builder.load(self.element(builder, b_row, _c64(16 * j)), typ=V16,
                                  align=4) for j in range(vectors)]
        a_column = self.element(builder, a_panel, builder.mul(k, _c64(MR)))
        updated = []
        for i in range(MR):
            a_value = self.splat(builder, builder.load(
                self.element(builder, a_column, _c64(i)), typ=F32, align=4))
            updated.append([builder.call(self.fma, [a_value, b_vectors[j], accumulators[i][j]])
                            for j in range(vectors)])
        following = builder.add(k, _c64(1))
        k.add_incoming(following, body)
        for i in range(MR):
            for j in range(vectors):
                accumulators[i][j].add_incoming(updated[i][j], body)
        builder.cbranch(builder.icmp_signed("<", following, depth), body, store)

        builder.position_at_end(store)
        results = [[builder.phi(V16) for _ in range(vectors)] for _ in range(MR)]
        for i in range(MR):
            for j in range(vectors):
                results[i][j].add_incoming(zero, entry)
                results[i][j].add_incoming(updated[i][j], body)
        full = builder.and_(builder.icmp_signed("==", rows, _c64(MR)),
                            builder.icmp_signed("==", columns, _c64(16 * vectors)))
        whole, edge = (function.append_basic_block(label) for label in ("whole", "edge"))
        add_whole, set_whole = (function.append_basic_block(label) for label in ("add", "set"))
        done = function.append_basic_block("done")
        builder.cbranch(full, whole, edge)
        builder.position_at_end(whole)
        builder.cbranch(builder.icmp_signed("!=", accumulate, _c64(0)), add_whole, set_whole)
        for block, add in ((add_whole, True), (set_whole, False)):
            builder.position_at_end(block)
            for i in range(MR):
                row = self.element(builder, c, builder.mul(_c64(i), ldc))
                for j in range(vectors):
                    pointer = self.element(builder, row, _c64(16 * j))
                    value = results[i][j]
                    if add:
                        value = builder.fadd(value, builder.load(pointer, typ=V16, align=4))
                    builder.store(value, pointer, align=4)
            builder.ret_void()

        builder.position_at_end(edge)
        masks = [self.lane_mask(builder, columns, _c64(16 * j), 16) for j in range(vectors)]
        adding = builder.icmp_signed("!=", accumulate, _c64(0))
        for i in range(MR):
            this_row = function.append_basic_block(f"edge.row{i}")
            next_row = function.append_basic_block(f"edge.next{i}")
            builder.cbranch(builder.icmp_signed("<", _c64(i), rows), this_row, done)
            builder.position_at_end(this_row)
            row = self.element(builder, c, builder.mul(_c64(i), ldc))
            for j in range(vectors):
                pointer = self.element(builder, row, _c64(16 * j))
                # Selected, not multiplied by a flag: C's old contents may be NaN.
                old = builder.select(adding, self.masked_load(builder, pointer, masks[j], 16),
                                     zero)
                self.masked_store(builder, builder.fadd(results[i][j], old), pointer,
                                  masks[j], 16)
            builder.branch(next_row)
            builder.position_at_end(next_row)
        builder.branch(done)
        builder.position_at_end(done)
        builder.ret_void()
        return function

    def micro_direct(self, name, rows, vectors):
        """``C[0:rows, 0:nr] = sum_k A(i, k) * B[k, 0:nr]`` read in place: ``A(i, k) =
        a[i * row_step + k * k_step]``, B's row k at ``b + k * ldb`` (masked past nr), with
        ``vectors`` accumulators of 16 per row."""
        function = ir.Function(self.module, ir.FunctionType(
            VOID, [I64, PTR, I64, I64, PTR, I64, PTR, I64, I64]), name)
        function.linkage = "internal"
        depth, a, row_step, k_step, b, ldb, c, ldc, columns = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        body = function.append_basic_block("k")
        store = function.append_basic_block("store")
        entry = builder.block
        zero = ir.Constant(V16, None)
        masks = [self.lane_mask(builder, columns, _c64(16 * j), 16) for j in range(vectors)]
        a_rows = [self.element(builder, a, builder.mul(_c64(i), row_step)) for i in range(rows)]
        builder.cbranch(builder.icmp_signed(">", depth, _c64(0)), body, store)

        builder.position_at_end(body)
        k = builder.phi(I64)
        k.add_incoming(_c64(0), entry)
        accumulators = [[builder.phi(V16) for _ in range(vectors)] for _ in range(rows)]
        for row in accumulators:
            for phi in row:
                phi.add_incoming(zero, entry)
        b_row = self.element(builder, b, builder.mul(k, ldb))
        b_vectors = [self.masked_load(builder, self.element(builder, b_row, _c64(16 * j)),
                                      masks[j], 16) for j in range(vectors)]
        a_offset = builder.mul(k, k_step)
        updated = []
        for i in range(rows):
            a_value = self.splat(builder, builder.load(
                self.element(builder, a_rows[i], a_offset), typ=F32, align=4))
            updated.append([builder.call(self.fma, [a_value, b_vectors[j], accumulators[i][j]])
                            for j in range(vectors)])
        following = builder.add(k, _c64(1))
        k.add_incoming(following, body)
        for i in range(rows):
            for j in range(vectors):
                accumulators[i][j].add_incoming(updated[i][j], body)
        builder.cbranch(builder.icmp_signed("<", following, depth), body, store)

        builder.position_at_end(store)
        results = [[builder.phi(V16) for _ in range(vectors)] for _ in range(rows)]
        for i in range(rows):
            row = self.element(builder, c, builder.mul(_c64(i), ldc))
            for j in range(vectors):
                results[i][j].add_incoming(zero, entry)
                results[i][j].add_incoming(updated[i][j], body)
                self.masked_store(builder, results[i][j],
                                  self.element(builder, row, _c64(16 * j)), masks[j], 16)
        builder.ret_void()
        return function

    # --- packing ------------------------------------------------------------------------
    def pack_b(self):
        """``Bp[panel q][k][0:NR] = op(B)[pc + k, jc + q*NR + j]``, zero past the block."""
        function = ir.Function(self.module, ir.FunctionType(
            VOID, [I64, PTR, I64, I64, I64, I64, I64, PTR]), "pack_b")
        function.linkage = "internal"
        transposed, b, ldb, pc, depth, jc, width, packed = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        plain, flipped, done = (function.append_basic_block(label)
                                for label in ("plain", "transposed", "done"))
        builder.cbranch(builder.icmp_signed("!=", transposed, _c64(0)), flipped, plain)

        # op(B)[k, j] = B[k*ldb + j]: rows are contiguous, copied with masked vectors.
        builder.position_at_end(plain)

        def plain_panel(jr):
            masks = [self.lane_mask(builder, builder.sub(width, jr), _c64(16 * v), 16)
                     for v in range(NR // 16)]
            panel = self.element(builder, packed, builder.mul(jr, depth))

            def copy_row(k):
                source = self.element(builder, b, builder.add(
                    builder.mul(builder.add(pc, k), ldb), builder.add(jc, jr)))
                target = self.element(builder, panel, builder.mul(k, _c64(NR)))
                for v in range(NR // 16):
                    value = self.masked_load(builder, self.element(builder, source,
                                                                   _c64(16 * v)), masks[v], 16)
                    builder.store(value, self.element(builder, target, _c64(16 * v)), align=4)
            self.loop(builder, _c64(0), depth, _c64(1), copy_row)
        self.loop(builder, _c64(0), width, _c64(NR), plain_panel)
        builder.branch(done)

        # op(B)[k, j] = B[j*ldb + k]: a scalar transpose (B^T is small in the models' shapes).
        builder.position_at_end(flipped)

        def flipped_panel(jr):
            columns = builder.sub(width, jr)
            panel = self.element(builder, packed, builder.mul(jr, depth))

            def copy_column(j):
                valid = builder.icmp_signed("<", j, columns)
                clamped = self.smaller(builder, j, builder.sub(columns, _c64(1)))
                source = self.element(builder, b, builder.add(
                    builder.mul(builder.add(builder.add(jc, jr), clamped), ldb), pc))

                def copy(k):
                    value = builder.load(self.element(builder, source, k), typ=F32, align=4)
                    value = builder.select(valid, value, ir.Constant(F32, 0.0))
                    builder.store(value, self.element(
                        builder, panel, builder.add(builder.mul(k, _c64(NR)), j)), align=4)
                self.loop(builder, _c64(0), depth, _c64(1), copy)
            self.loop(builder, _c64(0), _c64(NR), _c64(1), copy_column)
        self.loop(builder, _c64(0), width, _c64(NR), flipped_panel)
        builder.branch(done)
        builder.position_at_end(done)
        builder.ret_void()
        return function

    def pack_a(self):
        """``Ap[panel p][k][0:MR] = op(A)[ic + p*MR + i, pc + k]``, zero past the block."""
        vector = ir.VectorType(F32, MR)
        function = ir.Function(self.module, ir.FunctionType(
            VOID, [I64, PTR, I64, I64, I64, I64, I64, PTR]), "pack_a")
        function.linkage = "internal"
        transposed, a, lda, ic, height, pc, depth, packed = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        plain, flipped, done = (function.append_basic_block(label)
                                for label in ("plain", "transposed", "done"))
        builder.cbranch(builder.icmp_signed("!=", transposed, _c64(0)), flipped, plain)

        # op(A)[i, k] = A[i*lda + k]: MR row pointers (clamped to the block), a vector per k.
        builder.position_at_end(plain)

        def plain_panel(ir_):
            rows = builder.sub(height, ir_)
            panel = self.element(builder, packed, builder.mul(ir_, depth))
            sources, valid = [], []
            for i in range(MR):
                clamped = self.smaller(builder, _c64(i), builder.sub(rows, _c64(1)))
                sources.append(self.element(builder, a, builder.add(builder.mul(
                    builder.add(builder.add(ic, ir_), clamped), lda), pc)))
                valid.append(builder.icmp_signed("<", _c64(i), rows))

            def gather(k):
                packed_column = ir.Constant(vector, None)
                for i in range(MR):
                    value = builder.load(self.element(builder, sources[i], k), typ=F32, align=4)
                    value = builder.select(valid[i], value, ir.Constant(F32, 0.0))
                    packed_column = builder.insert_element(packed_column, value,
                                                           ir.Constant(I32, i))
                builder.store(packed_column, self.element(builder, panel,
                                                          builder.mul(k, _c64(MR))), align=4)
            self.loop(builder, _c64(0), depth, _c64(1), gather)
        self.loop(builder, _c64(0), height, _c64(MR), plain_panel)
        builder.branch(done)

        # op(A)[i, k] = A[k*lda + i]: contiguous, masked vectors of MR. k goes in chunks of 8
        # rows, panels inside, so the 8 source rows (often 4 KiB apart: the same L1 set)
        # stay in L1 while every panel reads them.
        builder.position_at_end(flipped)

        def k_chunk(k_begin):
            k_end = self.smaller(builder, builder.add(k_begin, _c64(8)), depth)

            def flipped_panel(ir_):
                panel = self.element(builder, packed, builder.mul(ir_, depth))
                mask = self.lane_mask(builder, builder.sub(height, ir_), _c64(0), MR)

                def copy(k):
                    source = self.element(builder, a, builder.add(
                        builder.mul(builder.add(pc, k), lda), builder.add(ic, ir_)))
                    value = self.masked_load(builder, source, mask, MR)
                    builder.store(value, self.element(builder, panel,
                                                      builder.mul(k, _c64(MR))), align=4)
                self.loop(builder, k_begin, k_end, _c64(1), copy)
            self.loop(builder, _c64(0), height, _c64(MR), flipped_panel)
        self.loop(builder, _c64(0), depth, _c64(8), k_chunk)
        builder.branch(done)
        builder.position_at_end(done)
        builder.ret_void()
        return function

    # --- the blocked product over a range of rows ---------------------------------------
    def block(self):
        """``tj_sgemm_rows(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, row_begin, row_end,
        workspace)``: C's rows ``[row_begin, row_end)``; ``workspace`` may be null when the
        rows take the direct path (``direct_condition``)."""
        micro_full = self.micro("micro_8x32", NR // 16)
        micro_narrow = self.micro("micro_8x16", 1)
        # Per row count, a 32-wide and (for column edges and narrow B) a 16-wide kernel.
        directs = {(rows, vectors): self.micro_direct(f"micro_direct_{rows}x{16 * vectors}",
                                                      rows, vectors)
                   for rows in range(1, MR + 1) for vectors in (1, NR // 16)}
        pack_b, pack_a = self.pack_b(), self.pack_a()
        function = ir.Function(self.module, ir.FunctionType(
            VOID, [I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I64, I64, PTR]),
            "tj_sgemm_rows")
        function.linkage = "internal"
        (trans_a, trans_b, _, n, k, a, lda, b, ldb, c, ldc, row_begin, row_end,
         workspace) = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))

        empty, work = function.append_basic_block("k_empty"), function.append_basic_block("k")
        builder.cbranch(builder.icmp_signed("<=", k, _c64(0)), empty, work)
        builder.position_at_end(empty)  # an empty sum: C = 0

        def zero_row(i):
            row = self.element(builder, c, builder.mul(i, ldc))
            self.loop(builder, _c64(0), n, _c64(1), lambda j: builder.store(
                ir.Constant(F32, 0.0), self.element(builder, row, j), align=4))
        self.loop(builder, row_begin, row_end, _c64(1), zero_row)
        builder.ret_void()

        builder.position_at_end(work)
        direct, packed = (function.append_basic_block(label) for label in ("direct", "packed"))
        builder.cbranch(self.direct_condition(builder, trans_b, n, k), direct, packed)

        builder.position_at_end(direct)
        flipped_a = builder.icmp_signed("!=", trans_a, _c64(0))
        row_step = builder.select(flipped_a, _c64(1), lda)
        k_step = builder.select(flipped_a, lda, _c64(1))

        def direct_rows(i0):
            rows = self.smaller(builder, _c64(MR), builder.sub(row_end, i0))
            a_rows = self.element(builder, a, builder.mul(i0, row_step))

            def direct_tile(j0):
                columns = self.smaller(builder, _c64(NR), builder.sub(n, j0))
                c_tile = self.element(builder, c, builder.add(builder.mul(i0, ldc), j0))
                arguments = [k, a_rows, row_step, k_step, self.element(builder, b, j0), ldb,
                             c_tile, ldc, columns]
                narrow, wide, after = (function.append_basic_block(label) for label in (
                    "direct.narrow", "direct.wide", "direct.after"))
                builder.cbranch(builder.icmp_signed("<=", columns, _c64(16)), narrow, wide)
                for block, vectors in ((narrow, 1), (wide, NR // 16)):
                    builder.position_at_end(block)
                    switch = builder.switch(rows, after)
                    for count in range(1, MR + 1):
                        case = function.append_basic_block(f"direct.{count}")
                        switch.add_case(_c64(count), case)
                        builder.position_at_end(case)
                        builder.call(directs[count, vectors], arguments)
                        builder.branch(after)
                builder.position_at_end(after)
            self.loop(builder, _c64(0), n, _c64(NR), direct_tile)
        self.loop(builder, row_begin, row_end, _c64(MR), direct_rows)
        builder.ret_void()

        builder.position_at_end(packed)
        b_packed = workspace
        a_packed = builder.gep(workspace, [_c64(PACKED_A_OFFSET)], source_etype=F32)
        # Equal K blocks: blocks = ceil(k / KC), depth = ceil(k / blocks).
        blocks = builder.sdiv(builder.add(k, _c64(KC - 1)), _c64(KC))
        block_depth = builder.sdiv(builder.add(k, builder.sub(blocks, _c64(1))), blocks)

        def column_block(jc):
            width = self.smaller(builder, _c64(NC), builder.sub(n, jc))

            def depth_block(pc):
                depth = self.smaller(builder, block_depth, builder.sub(k, pc))
                builder.call(pack_b, [trans_b, b, ldb, pc, depth, jc, width, b_packed])
                accumulate = builder.zext(builder.icmp_signed(">", pc, _c64(0)), I64)

                def row_block(ic):
                    height = self.smaller(builder, _c64(MC), builder.sub(row_end, ic))
                    builder.call(pack_a, [trans_a, a, lda, ic, height, pc, depth, a_packed])

                    def tile(ir_, jr):
                        columns = self.smaller(builder, _c64(NR), builder.sub(width, jr))
                        rows = self.smaller(builder, _c64(MR), builder.sub(height, ir_))
                        c_tile = self.element(builder, c, builder.add(
                            builder.mul(builder.add(ic, ir_), ldc), builder.add(jc, jr)))
                        arguments = [depth, self.element(builder, a_packed,
                                                         builder.mul(ir_, depth)),
                                     self.element(builder, b_packed, builder.mul(jr, depth)),
                                     c_tile, ldc, accumulate, rows, columns]
                        with builder.if_else(builder.icmp_signed("<=", columns, _c64(16))) as (
                                narrow, wide):
                            with narrow:
                                builder.call(micro_narrow, arguments)
                            with wide:
                                builder.call(micro_full, arguments)

                    small_b = builder.icmp_signed("<=", builder.mul(depth, width),
                                                  _c64(ROW_PANEL_ORDER_FLOATS))
                    with builder.if_else(small_b) as (row_panels, blis_order):
                        with row_panels:
                            self.loop(builder, _c64(0), height, _c64(MR), lambda ir_: self.loop(
                                builder, _c64(0), width, _c64(NR), lambda jr: tile(ir_, jr)))
                        with blis_order:
                            self.loop(builder, _c64(0), width, _c64(NR), lambda jr: self.loop(
                                builder, _c64(0), height, _c64(MR), lambda ir_: tile(ir_, jr)))
                self.loop(builder, row_begin, row_end, _c64(MC), row_block)
            self.loop(builder, _c64(0), k, block_depth, depth_block)
        self.loop(builder, _c64(0), n, _c64(NC), column_block)
        builder.ret_void()
        return function

    @staticmethod
    def direct_condition(builder, trans_b, n, k):
        """Computed unpacked: B untransposed and small (re-read from cache per 8 rows)."""
        return builder.and_(builder.icmp_signed("==", trans_b, _c64(0)),
                            builder.icmp_signed("<=", builder.mul(k, n), _c64(DIRECT_B_FLOATS)))

    # --- workspaces, the pool's chunk, the entry ----------------------------------------
    def chunk(self, rows_function):
        """``tj_sgemm_chunk(context, begin, end)``: the pool's body, over rows of C or (when
        the context says so) over its columns. Claims a free workspace from the table
        (spinning if every one is taken: only when more threads multiply at once than the
        table has slots), runs the block, releases it."""
        table = ir.GlobalVariable(self.module, I64, WORKSPACES_SYMBOL)  # imported
        function = ir.Function(self.module, parallel.BODY_TYPE, "tj_sgemm_chunk")
        function.linkage = "internal"
        context, begin, end = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        fields = [builder.load(builder.gep(context, [_c64(index)], source_etype=I64), typ=I64)
                  for index in range(CONTEXT_FIELDS)]
        trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, by_columns = fields
        a, b, c = (builder.inttoptr(value, PTR) for value in (a, b, c))
        # A column chunk is the product with B's and C's columns [begin, end), all rows.
        columns = builder.icmp_signed("!=", by_columns, _c64(0))
        b_offset = builder.select(builder.icmp_signed("!=", trans_b, _c64(0)),
                                  builder.mul(begin, ldb), begin)
        b = builder.select(columns, builder.gep(b, [b_offset], source_etype=F32), b)
        c = builder.select(columns, builder.gep(c, [begin], source_etype=F32), c)
        n = builder.select(columns, builder.sub(end, begin), n)
        row_begin = builder.select(columns, _c64(0), begin)
        row_end = builder.select(columns, m, end)
        arguments = [trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, row_begin, row_end]

        unpacked, claim = (function.append_basic_block(label) for label in ("direct", "claim"))
        needs_none = builder.or_(
            builder.icmp_signed("<=", k, _c64(0)),
            self.direct_condition(builder, trans_b, n, k))
        builder.cbranch(needs_none, unpacked, claim)
        builder.position_at_end(unpacked)
        builder.call(rows_function, [*arguments, ir.Constant(PTR, None)])
        builder.ret_void()

        # Table layout (i64): slot count, then per slot (busy flag, workspace address).
        builder.position_at_end(claim)
        slots = builder.load(table, typ=I64)
        search = function.append_basic_block("search")
        try_slot = function.append_basic_block("try")
        wait = function.append_basic_block("wait")
        claimed = function.append_basic_block("claimed")
        builder.branch(search)
        builder.position_at_end(search)
        slot = builder.phi(I64)
        slot.add_incoming(_c64(0), claim)
        builder.cbranch(builder.icmp_signed("<", slot, slots), try_slot, wait)
        builder.position_at_end(wait)  # all taken: pause, then scan again
        self.pause(builder)
        slot.add_incoming(_c64(0), wait)
        builder.branch(search)
        builder.position_at_end(try_slot)
        flag = builder.gep(table, [builder.add(_c64(1), builder.mul(slot, _c64(2)))],
                           source_etype=I64)
        exchanged = builder.cmpxchg(flag, _c64(0), _c64(1), "acquire", "monotonic")
        next_slot = builder.add(slot, _c64(1))
        slot.add_incoming(next_slot, try_slot)
        builder.cbranch(builder.extract_value(exchanged, 1), claimed, search)
        builder.position_at_end(claimed)
        address = builder.load(builder.gep(flag, [_c64(1)], source_etype=I64), typ=I64)
        builder.call(rows_function, [*arguments, builder.inttoptr(address, PTR)])
        builder.store_atomic(_c64(0), flag, "release", 8)
        builder.ret_void()
        return function

    def pause(self, builder):
        function = self.module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            self.module, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
        builder.call(function, [])

    def entry(self, chunk_function):
        """The exported ``tj_sgemm_own``: inline, or one chunk per thread over the pool."""
        pool = ir.GlobalVariable(self.module, ir.ArrayType(I64, POOL_FIELDS), "tj_pool")
        parallel_for = ir.Function(self.module, ir.FunctionType(
            VOID, [ir.PointerType(ir.ArrayType(I64, POOL_FIELDS)), PTR, PTR, I64, I64]),
            "tj_parallel_for")
        function = ir.Function(self.module, ir.FunctionType(
            VOID, [I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64]), ENTRY)
        arguments = function.args
        m, n, k = arguments[2:5]
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        context = builder.alloca(I64, size=CONTEXT_FIELDS)

        def store(index, value):
            builder.store(value, builder.gep(context, [_c64(index)], source_etype=I64))

        for index, argument in enumerate(arguments):
            store(index, builder.ptrtoint(argument, I64) if argument.type == PTR else argument)
        store(SPLIT_BY_COLUMNS, _c64(0))
        run, nothing = function.append_basic_block("run"), function.append_basic_block("empty")
        builder.cbranch(builder.and_(builder.icmp_signed(">", m, _c64(0)),
                                     builder.icmp_signed(">", n, _c64(0))), run, nothing)
        builder.position_at_end(nothing)
        builder.ret_void()

        builder.position_at_end(run)
        threads = builder.load(builder.gep(pool, [_c64(0), _c64(POOL_THREADS)],
                                           source_etype=ir.ArrayType(I64, POOL_FIELDS)), typ=I64)
        # Every chunk packs its own copy of the operand it is not split along, so: one
        # chunk per thread, split along the longer of m and n (the smaller operand is the
        # one packed twice).
        by_columns = builder.icmp_signed(">", n, m)
        extent = builder.select(by_columns, n, m)
        step = builder.select(by_columns, _c64(NR), _c64(MR))
        work = builder.mul(builder.mul(m, n), k)
        split = builder.and_(builder.and_(
            builder.icmp_signed(">", threads, _c64(1)),
            builder.icmp_signed(">=", extent, builder.mul(step, _c64(2)))),
            builder.icmp_signed(">=", work, _c64(PARALLEL_WORK)))
        spread, inline = (function.append_basic_block(label) for label in ("spread", "inline"))
        builder.cbranch(split, spread, inline)
        builder.position_at_end(inline)
        builder.call(chunk_function, [context, _c64(0), m])
        builder.ret_void()

        builder.position_at_end(spread)
        store(SPLIT_BY_COLUMNS, builder.zext(by_columns, I64))
        per_thread = builder.sdiv(builder.add(extent, builder.sub(threads, _c64(1))), threads)
        chunk = builder.mul(builder.sdiv(builder.add(per_thread, builder.sub(step, _c64(1))),
                                         step), step)
        builder.call(parallel_for, [pool, chunk_function, context, extent, chunk])
        builder.ret_void()
        return function

    def build(self):
        self.entry(self.chunk(self.block()))
        return str(self.module)


def module_ir():
    """The GEMM module's LLVM IR text."""
    return _Generator().build()


# --- compiled once per machine ------------------------------------------------------------
_load_lock = threading.Lock()
_loaded = {}


def object_code():
    """The module's object code: from the runtime's object store (the disk cache) when it
    has it, else compiled now (0.5-0.65 s of CPU on the loaded test machine) and stored.
    Keyed by this file's text and the host, like the pool's runtime."""
    with open(__file__, "rb") as source:
        generator = source.read()
    key = hashlib.sha256(b"tj_sgemm_own\0" + generator + repr(
        sorted(llvm.host_description().items())).encode()).hexdigest()[:32]
    store = parallel.object_store()
    if store is not None:
        cached = store[0](key)
        if cached:
            return cached
    start = time.process_time()
    compiled = llvm.compile_module(module_ir())
    llvm.log.info("compiled tracejit's GEMM in %.0f ms of CPU (%.0f ms wall)",
                  (time.process_time() - start) * 1e3, compiled.seconds * 1e3)
    if store is not None:
        store[1](key, compiled.object_code)
    return compiled.object_code


class _Workspaces:
    """The table ``tj_sgemm_chunk`` claims workspaces from: ``[slots, (busy, address) *
    slots]``. Two slots per pool thread: the pool's threads, plus callers on other Python
    threads multiplying at the same time (a third caller waits for a slot). Only the pages
    a product touches are ever mapped."""

    def __init__(self, slots):
        self.memory = [np.empty(WORKSPACE_FLOATS + 16, np.float32) for _ in range(slots)]
        self.table = (ctypes.c_int64 * (1 + 2 * slots))()
        self.table[0] = slots
        for index, memory in enumerate(self.memory):
            aligned = -memory.ctypes.data % 64  # packed panels on cache-line boundaries
            self.table[2 + 2 * index] = memory.ctypes.data + aligned

    @property
    def address(self):
        return ctypes.addressof(self.table)


def library():
    """The loaded GEMM (compiled or read from the object store on first use)."""
    with _load_lock:
        if "library" not in _loaded:
            pool = parallel.pool()
            workspaces = _Workspaces(2 * pool.threads)
            imports = {**pool.symbols(), WORKSPACES_SYMBOL: workspaces.address}
            _loaded["library"] = llvm.load(object_code(), [ENTRY], imports=imports)
            _loaded["workspaces"] = workspaces
            _loaded["function"] = ctypes.CFUNCTYPE(
                None, *([ctypes.c_int64] * 5), *([ctypes.c_void_p, ctypes.c_int64] * 3))(
                _loaded["library"].addresses[ENTRY])
        return _loaded["library"]


def symbols():
    """``{"tj_sgemm_own": address}`` for compiled kernels that call it."""
    return {ENTRY: library().addresses[ENTRY]}


def _layout(matrix):
    """``(transposed, leading dimension)`` of a float32 matrix the GEMM reads in place, or
    None (it is then copied): rows or columns must be unit-stride."""
    rows, columns = matrix.shape
    row_stride, column_stride = matrix.strides
    if matrix.size == 0:  # nothing is read
        return 0, max(columns, 1)
    # The stride of an axis of length 1 is never used (NumPy may report anything).
    row_stride = 4 * columns if rows == 1 else row_stride
    column_stride = 4 if columns == 1 else column_stride
    if column_stride == 4 and row_stride % 4 == 0 and row_stride >= 4 * columns:
        return 0, row_stride // 4
    if row_stride == 4 and column_stride % 4 == 0 and column_stride >= 4 * rows:
        return 1, column_stride // 4
    return None


def prepared(a, b, out):
    """A zero-argument call that stores ``a @ b`` into ``out`` (arguments converted once:
    about 1 us per call, for benchmarks of small products). ``a`` and ``b`` must be float32
    with a unit-stride axis; ``out`` C-contiguous rows."""
    (m, k), n = a.shape, b.shape[1]
    layouts = [_layout(a), _layout(b)]
    if None in layouts or a.dtype != np.float32 or b.dtype != np.float32:
        raise ValueError("prepared() reads float32 matrices with a unit-stride axis")
    out_layout = _layout(out) if out.shape == (m, n) and out.dtype == np.float32 else None
    if out_layout is None or out_layout[0]:
        raise ValueError("out must be a float32 (m, n) array with unit-stride rows")
    library()
    (trans_a, lda), (trans_b, ldb) = layouts
    arguments = (trans_a, trans_b, m, n, k, a.ctypes.data, lda, b.ctypes.data, ldb,
                 out.ctypes.data, out_layout[1])
    function = _loaded["function"]
    return lambda: function(*arguments)


def matmul(a, b, out=None):
    """``a @ b`` for 2-D float32 arrays by the GEMM (for tests and benchmarks; compiled
    kernels call the symbol). Views with a unit-stride axis (transposes, column slices)
    are read in place, others copied; ``out`` (unit-stride rows) receives the product."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (m, k) @ (k, n), got {a.shape} @ {b.shape}")
    a, b = (operand if _layout(operand) else np.ascontiguousarray(operand) for operand in (a, b))
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), np.float32)
    prepared(a, b, out)()
    return out
