"""The own GEMM's packing: blocks of ``op(A)`` and ``op(B)`` copied into the panel order
the micro-kernels (``gemm_micro``) read, with zeros past the matrix's edge, so that every
tile reads whole vectors. Transposed operands are transposed here, while they are copied
anyway: a transposed view is never copied apart.

* ``pack_b``: ``Bp[panel q][k][0:nr] = op(B)[pc + k, jc + q*nr + j]`` (k-major panels);
* ``pack_a``: ``Ap[panel p][k][0:mr] = op(A)[ic + p*mr + i, pc + k]``.

>>> from .gemm_ir import AVX512, Emitter
>>> emitter = Emitter(AVX512)
>>> [len(pack(emitter).args) for pack in (pack_b, pack_a)]
[8, 8]
"""

from __future__ import annotations

from llvmlite import ir

from .gemm_ir import I32, I64, PTR, c64

# pack_a reads an untransposed A this many k at a time per row (a power of 2).
TRANSPOSE_DEPTH = 8
# pack_b gathers a transposed B's panels k by k up to this depth (see pack_b).
GATHERED_DEPTH = 256


def pack_b(emitter):
    """``pack_b(transposed, b, ldb, pc, depth, jc, width, packed)``."""
    isa, lanes = emitter.isa, emitter.isa.lanes
    align = emitter.align
    function = emitter.function("pack_b", [I64, PTR, I64, I64, I64, I64, I64, PTR])
    transposed, b, ldb, pc, depth, jc, width, packed = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    plain, flipped, done = (function.append_basic_block(label)
                            for label in ("plain", "transposed", "done"))
    gathered, by_rows = (function.append_basic_block(label)
                         for label in ("transposed.gathered", "transposed.by_rows"))
    builder.cbranch(builder.icmp_signed("!=", transposed, c64(0)), flipped, plain)

    # op(B)[k, j] = B[k*ldb + j]: rows are contiguous, copied with masked vectors.
    builder.position_at_end(plain)

    def plain_panel(jr):
        masks = [emitter.lane_mask(builder, builder.sub(width, jr), c64(lanes * v))
                 for v in range(isa.vectors)]
        panel = emitter.element(builder, packed, builder.mul(jr, depth))

        def copy_row(k):
            source = emitter.element(builder, b, builder.add(
                builder.mul(builder.add(pc, k), ldb), builder.add(jc, jr)))
            target = emitter.element(builder, panel, builder.mul(k, c64(isa.nr)))
            for v in range(isa.vectors):
                value = emitter.masked_load(builder, emitter.element(builder, source,
                                                                     c64(lanes * v)), masks[v])
                builder.store(value, emitter.element(builder, target, c64(lanes * v)), align=align)
        emitter.loop(builder, c64(0), depth, c64(1), copy_row)
    emitter.loop(builder, c64(0), width, c64(isa.nr), plain_panel)
    builder.branch(done)

    # op(B)[k, j] = B[j*ldb + k]. Shallow blocks: per k, the panel's row is gathered from
    # its nr rows of B (one masked gather per vector; lanes past the edge give 0). Deeper
    # ones: a scalar transpose, B's rows read along k. One thread, CPU time, the machine
    # loaded: 64 x 10 @ (1024 x 10).T 23.6 -> 19.1 us (untransposed B: 16 us), 512 x 10 @
    # (1024 x 10).T 128 -> 122 us, 128 x 256 @ (768 x 256).T 541-545 -> 527 us; at depth
    # 512 (512 x 1024 @ (1024 x 1024).T) the two measured alike within the noise.
    builder.position_at_end(flipped)
    builder.cbranch(builder.icmp_signed("<=", depth, c64(GATHERED_DEPTH)), gathered, by_rows)

    builder.position_at_end(by_rows)

    def flipped_panel_by_rows(jr):
        columns = builder.sub(width, jr)
        panel = emitter.element(builder, packed, builder.mul(jr, depth))

        def copy_column(j):
            valid = builder.icmp_signed("<", j, columns)
            clamped = emitter.smaller(builder, j, builder.sub(columns, c64(1)))
            source = emitter.element(builder, b, builder.add(
                builder.mul(builder.add(builder.add(jc, jr), clamped), ldb), pc))

            def copy(k):
                value = builder.load(emitter.element(builder, source, k), typ=emitter.scalar,
                                     align=align)
                value = builder.select(valid, value, ir.Constant(emitter.scalar, 0.0))
                builder.store(value, emitter.element(
                    builder, panel, builder.add(builder.mul(k, c64(isa.nr)), j)), align=align)
            emitter.loop(builder, c64(0), depth, c64(1), copy)
        emitter.loop(builder, c64(0), c64(isa.nr), c64(1), copy_column)
    emitter.loop(builder, c64(0), width, c64(isa.nr), flipped_panel_by_rows)
    builder.branch(done)

    builder.position_at_end(gathered)
    index_type = ir.VectorType(I64, lanes)
    gather = _masked_gather(emitter)

    def splat(value):
        first = builder.insert_element(ir.Constant(index_type, ir.Undefined), value,
                                       ir.Constant(I32, 0))
        return builder.shuffle_vector(first, ir.Constant(index_type, ir.Undefined),
                                      ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    base = builder.ptrtoint(b, I64)
    itemsize = c64(isa.itemsize)

    def flipped_panel(jr):
        columns = builder.sub(width, jr)
        panel = emitter.element(builder, packed, builder.mul(jr, depth))
        masks, starts = [], []
        for v in range(isa.vectors):
            masks.append(emitter.lane_mask(builder, columns, c64(lanes * v)))
            first = builder.add(builder.add(jc, jr), c64(lanes * v))  # B's row of lane 0
            rows = builder.add(splat(first), ir.Constant(index_type, list(range(lanes))))
            offsets = builder.add(builder.mul(rows, splat(ldb)), splat(pc))
            starts.append(builder.add(splat(base), builder.mul(offsets, splat(itemsize))))

        def copy_row(k):
            step = splat(builder.mul(k, itemsize))
            target = emitter.element(builder, panel, builder.mul(k, c64(isa.nr)))
            for v in range(isa.vectors):
                addresses = builder.inttoptr(builder.add(starts[v], step),
                                             ir.VectorType(PTR, lanes))
                value = builder.call(gather, [addresses, ir.Constant(I32, align), masks[v],
                                              ir.Constant(emitter.vector, None)])
                builder.store(value, emitter.element(builder, target, c64(lanes * v)),
                              align=align)
        emitter.loop(builder, c64(0), depth, c64(1), copy_row)
    emitter.loop(builder, c64(0), width, c64(isa.nr), flipped_panel)
    builder.branch(done)
    builder.position_at_end(done)
    builder.ret_void()
    return function


def _masked_gather(emitter):
    """``llvm.masked.gather`` of the instruction set's vector (``<lanes x ptr>``, align,
    mask, pass-through)."""
    lanes, suffix = emitter.isa.lanes, emitter.isa.suffix
    name = f"llvm.masked.gather.v{lanes}{suffix}.v{lanes}p0"
    function = emitter.module.globals.get(name)
    if function is None:
        function = ir.Function(emitter.module, ir.FunctionType(emitter.vector, [
            ir.VectorType(PTR, lanes), I32, ir.VectorType(ir.IntType(1), lanes),
            emitter.vector]), name)
    return function


def pack_a(emitter):
    """``pack_a(transposed, a, lda, ic, height, pc, depth, packed)``."""
    mr = emitter.isa.mr
    scalar, align = emitter.scalar, emitter.align
    vector = ir.VectorType(scalar, mr)
    row_vector = ir.VectorType(scalar, TRANSPOSE_DEPTH)
    assert mr & (mr - 1) == 0, "rows are concatenated in pairs: mr must be a power of 2"
    function = emitter.function("pack_a", [I64, PTR, I64, I64, I64, I64, I64, PTR])
    transposed, a, lda, ic, height, pc, depth, packed = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    plain, flipped, done = (function.append_basic_block(label)
                            for label in ("plain", "transposed", "done"))
    builder.cbranch(builder.icmp_signed("!=", transposed, c64(0)), flipped, plain)

    # op(A)[i, k] = A[i*lda + k]: mr row pointers (clamped to the block), a vector per k.
    builder.position_at_end(plain)

    def plain_panel(ir_):
        rows = builder.sub(height, ir_)
        panel = emitter.element(builder, packed, builder.mul(ir_, depth))
        sources, valid = [], []
        for i in range(mr):
            clamped = emitter.smaller(builder, c64(i), builder.sub(rows, c64(1)))
            sources.append(emitter.element(builder, a, builder.add(builder.mul(
                builder.add(builder.add(ic, ir_), clamped), lda), pc)))
            valid.append(builder.icmp_signed("<", c64(i), rows))

        def gather(k):
            packed_column = ir.Constant(vector, None)
            for i in range(mr):
                value = builder.load(emitter.element(builder, sources[i], k), typ=scalar,
                                     align=align)
                value = builder.select(valid[i], value, ir.Constant(scalar, 0.0))
                packed_column = builder.insert_element(packed_column, value,
                                                       ir.Constant(I32, i))
            builder.store(packed_column, emitter.element(builder, panel,
                                                         builder.mul(k, c64(mr))), align=align)

        def transpose(k):
            # TRANSPOSE_DEPTH k at a time: a vector from each row, transposed in registers.
            # A load per element (gather, below) packed the MLP step's 512 x 784 input in
            # 0.40 ms on one thread (5% of its product), now 0.17 ms.
            rows_here = [builder.select(valid[i], builder.load(
                emitter.element(builder, sources[i], k), typ=row_vector, align=align),
                ir.Constant(row_vector, None)) for i in range(mr)]
            while len(rows_here) > 1:  # concatenate: one vector of mr x TRANSPOSE_DEPTH
                width = rows_here[0].type.count
                rows_here = [builder.shuffle_vector(first, second, ir.Constant(
                    ir.VectorType(I32, 2 * width), list(range(2 * width))))
                    for first, second in zip(rows_here[::2], rows_here[1::2])]
            (block,) = rows_here
            for step in range(TRANSPOSE_DEPTH):
                picks = [i * TRANSPOSE_DEPTH + step for i in range(mr)]
                column = builder.shuffle_vector(block, ir.Constant(block.type, None),
                                                ir.Constant(ir.VectorType(I32, mr), picks))
                builder.store(column, emitter.element(builder, panel, builder.mul(
                    builder.add(k, c64(step)), c64(mr))), align=align)
        whole = builder.and_(depth, c64(-TRANSPOSE_DEPTH))
        emitter.loop(builder, c64(0), whole, c64(TRANSPOSE_DEPTH), transpose)
        emitter.loop(builder, whole, depth, c64(1), gather)
    emitter.loop(builder, c64(0), height, c64(mr), plain_panel)
    builder.branch(done)

    # op(A)[i, k] = A[k*lda + i]: contiguous, masked vectors of mr. k goes in chunks of 8
    # rows, panels inside, so the 8 source rows (often 4 KiB apart: the same L1 set)
    # stay in L1 while every panel reads them.
    builder.position_at_end(flipped)

    def k_chunk(k_begin):
        k_end = emitter.smaller(builder, builder.add(k_begin, c64(8)), depth)

        def flipped_panel(ir_):
            panel = emitter.element(builder, packed, builder.mul(ir_, depth))
            mask = emitter.lane_mask(builder, builder.sub(height, ir_), c64(0), mr)

            def copy(k):
                source = emitter.element(builder, a, builder.add(
                    builder.mul(builder.add(pc, k), lda), builder.add(ic, ir_)))
                value = emitter.masked_load(builder, source, mask, mr)
                builder.store(value, emitter.element(builder, panel,
                                                     builder.mul(k, c64(mr))), align=align)
            emitter.loop(builder, k_begin, k_end, c64(1), copy)
        emitter.loop(builder, c64(0), height, c64(mr), flipped_panel)
    emitter.loop(builder, c64(0), depth, c64(8), k_chunk)
    builder.branch(done)
    builder.position_at_end(done)
    builder.ret_void()
    return function
