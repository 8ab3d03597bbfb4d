"""The own GEMM's micro-kernels: one register tile of C per call, ``mr`` rows by up to
``vectors`` vectors of ``lanes`` floats (the instruction set's ``Isa``).

* ``micro``: ``C (+)= Ap @ Bp`` over packed panels (``gemm_packing``): C's tile
  prefetched for writing, then per k the tile's B vectors and ``mr`` broadcast A scalars
  into ``llvm.fma``; full tiles store directly, edge tiles through masked loads and
  stores;
* ``micro_direct``: ``C = A @ B`` read in place (no packing: B small enough to stay in
  cache, as in an RNN step), for ``rows`` of 1 to ``mr``.

>>> from .gemm_ir import AVX2, Emitter
>>> emitter = Emitter(AVX2)
>>> micro(emitter, "micro_4x24", AVX2.vectors).name, len(micro(emitter, "m", 1).args)
('micro_4x24', 8)
"""

from __future__ import annotations

from llvmlite import ir

from .gemm_ir import I64, PTR, c64


def micro(emitter, name, vectors):
    """``micro(depth, a_panel, b_panel, c, ldc, accumulate, rows, columns)``:
    ``C[0:rows, 0:columns] (+)= Ap @ Bp`` for packed panels (A: ``mr`` per k, B: ``nr``
    per k), with ``vectors`` accumulators per row; ``accumulate`` adds to C."""
    isa, lanes = emitter.isa, emitter.isa.lanes
    function = emitter.function(name, [I64, PTR, PTR, PTR, I64, I64, I64, I64])
    depth, a_panel, b_panel, c, ldc, accumulate, rows, columns = function.args
    for pointer in (a_panel, b_panel, c):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    prefetch_tile(emitter, builder, c, ldc, rows, columns, vectors)
    body = function.append_basic_block("k")
    store = function.append_basic_block("store")
    entry = builder.block
    zero = ir.Constant(emitter.vector, None)
    builder.cbranch(builder.icmp_signed(">", depth, c64(0)), body, store)

    builder.position_at_end(body)
    k = builder.phi(I64)
    k.add_incoming(c64(0), entry)
    accumulators = [[builder.phi(emitter.vector) for _ in range(vectors)]
                    for _ in range(isa.mr)]
    for row in accumulators:
        for phi in row:
            phi.add_incoming(zero, entry)
    b_row = emitter.element(builder, b_panel, builder.mul(k, c64(isa.nr)))
    b_vectors = [emitter.load_vector(builder, emitter.element(builder, b_row, c64(lanes * j)))
                 for j in range(vectors)]
    a_column = emitter.element(builder, a_panel, builder.mul(k, c64(isa.mr)))
    updated = []
    for i in range(isa.mr):
        a_value = emitter.splat(builder, builder.load(
            emitter.element(builder, a_column, c64(i)), typ=emitter.scalar, align=emitter.align))
        updated.append([builder.call(emitter.fma, [a_value, b_vectors[j], accumulators[i][j]])
                        for j in range(vectors)])
    following = builder.add(k, c64(1))
    k.add_incoming(following, body)
    for i in range(isa.mr):
        for j in range(vectors):
            accumulators[i][j].add_incoming(updated[i][j], body)
    builder.cbranch(builder.icmp_signed("<", following, depth), body, store)

    builder.position_at_end(store)
    results = [[builder.phi(emitter.vector) for _ in range(vectors)] for _ in range(isa.mr)]
    for i in range(isa.mr):
        for j in range(vectors):
            results[i][j].add_incoming(zero, entry)
            results[i][j].add_incoming(updated[i][j], body)
    full = builder.and_(builder.icmp_signed("==", rows, c64(isa.mr)),
                        builder.icmp_signed("==", columns, c64(lanes * vectors)))
    whole, edge = (function.append_basic_block(label) for label in ("whole", "edge"))
    add_whole, set_whole = (function.append_basic_block(label) for label in ("add", "set"))
    done = function.append_basic_block("done")
    builder.cbranch(full, whole, edge)
    builder.position_at_end(whole)
    builder.cbranch(builder.icmp_signed("!=", accumulate, c64(0)), add_whole, set_whole)
    for block, add in ((add_whole, True), (set_whole, False)):
        builder.position_at_end(block)
        for i in range(isa.mr):
            row = emitter.element(builder, c, builder.mul(c64(i), ldc))
            for j in range(vectors):
                pointer = emitter.element(builder, row, c64(lanes * j))
                value = results[i][j]
                if add:
                    value = builder.fadd(value, emitter.load_vector(builder, pointer))
                builder.store(value, pointer, align=emitter.align)
        builder.ret_void()

    builder.position_at_end(edge)
    masks = [emitter.lane_mask(builder, columns, c64(lanes * j)) for j in range(vectors)]
    adding = builder.icmp_signed("!=", accumulate, c64(0))
    for i in range(isa.mr):
        this_row = function.append_basic_block(f"edge.row{i}")
        next_row = function.append_basic_block(f"edge.next{i}")
        builder.cbranch(builder.icmp_signed("<", c64(i), rows), this_row, done)
        builder.position_at_end(this_row)
        row = emitter.element(builder, c, builder.mul(c64(i), ldc))
        for j in range(vectors):
            pointer = emitter.element(builder, row, c64(lanes * j))
            # Selected, not multiplied by a flag: C's old contents may be NaN.
            old = builder.select(adding, emitter.masked_load(builder, pointer, masks[j]), zero)
            emitter.masked_store(builder, builder.fadd(results[i][j], old), pointer, masks[j])
        builder.branch(next_row)
        builder.position_at_end(next_row)
    builder.branch(done)
    builder.position_at_end(done)
    builder.ret_void()
    return function


def prefetch_tile(emitter, builder, c, ldc, rows, columns, vectors):
    """Prefetch the tile of C for writing before the k loop, which hides the wait: its
    stores (and a later K block's loads) otherwise missed in L1 and L2 at the end of
    every tile. One thread, best CPU time, old and new module side by side on the loaded
    2-core AMD EPYC (GFLOP/s, AVX-512): 1024^3 96 -> 99-103, 512 x 784 @ 784 x 1024
    90-92 -> 95-96, 784 x 512 @ 512 x 1024 (A transposed) 96-100 -> 101-104, 1024 x 1024
    @ 1024 x 256 91 -> 94; AVX2 1024^3 88 -> 103. Rows and columns past an edge tile's
    are not touched (the address is clamped into the tile)."""
    lanes = emitter.isa.lanes
    last_row = builder.sub(rows, c64(1))
    for i in range(emitter.isa.mr):
        row = builder.select(builder.icmp_signed("<", c64(i), rows), c64(i), last_row)
        row_start = emitter.element(builder, c, builder.mul(row, ldc))
        for j in range(vectors):
            column = builder.select(builder.icmp_signed("<", c64(lanes * j), columns),
                                    c64(lanes * j), c64(0))
            emitter.prefetch_for_write(builder, emitter.element(builder, row_start, column))


def micro_direct(emitter, name, rows, vectors, masked=True):
    """``micro_direct(depth, a, row_step, k_step, b, ldb, c, ldc, columns)``:
    ``C[0:rows, 0:columns] = sum_k A(i, k) * B[k, 0:columns]`` read in place, where
    ``A(i, k) = a[i * row_step + k * k_step]`` and B's row k is at ``b + k * ldb`` (masked
    past ``columns``; unless not ``masked``: then ``columns`` is ``vectors * lanes``), with
    ``vectors`` accumulators per row."""
    lanes = emitter.isa.lanes
    function = emitter.function(name, [I64, PTR, I64, I64, PTR, I64, PTR, I64, I64])
    depth, a, row_step, k_step, b, ldb, c, ldc, columns = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    body = function.append_basic_block("k")
    store = function.append_basic_block("store")
    entry = builder.block
    zero = ir.Constant(emitter.vector, None)
    masks = [emitter.lane_mask(builder, columns, c64(lanes * j)) if masked else None
             for j in range(vectors)]

    def load_b(pointer, mask):
        return (emitter.masked_load(builder, pointer, mask) if masked
                else emitter.load_vector(builder, pointer))

    def store_c(value, pointer, mask):
        if masked:
            emitter.masked_store(builder, value, pointer, mask)
        else:
            builder.store(value, pointer, align=emitter.align)

    a_rows = [emitter.element(builder, a, builder.mul(c64(i), row_step)) for i in range(rows)]
    builder.cbranch(builder.icmp_signed(">", depth, c64(0)), body, store)

    builder.position_at_end(body)
    k = builder.phi(I64)
    k.add_incoming(c64(0), entry)
    accumulators = [[builder.phi(emitter.vector) for _ in range(vectors)] for _ in range(rows)]
    for row in accumulators:
        for phi in row:
            phi.add_incoming(zero, entry)
    b_row = emitter.element(builder, b, builder.mul(k, ldb))
    b_vectors = [load_b(emitter.element(builder, b_row, c64(lanes * j)), masks[j])
                 for j in range(vectors)]
    a_offset = builder.mul(k, k_step)
    updated = []
    for i in range(rows):
        a_value = emitter.splat(builder, builder.load(
            emitter.element(builder, a_rows[i], a_offset), typ=emitter.scalar, align=emitter.align))
        updated.append([builder.call(emitter.fma, [a_value, b_vectors[j], accumulators[i][j]])
                        for j in range(vectors)])
    following = builder.add(k, c64(1))
    k.add_incoming(following, body)
    for i in range(rows):
        for j in range(vectors):
            accumulators[i][j].add_incoming(updated[i][j], body)
    builder.cbranch(builder.icmp_signed("<", following, depth), body, store)

    builder.position_at_end(store)
    results = [[builder.phi(emitter.vector) for _ in range(vectors)] for _ in range(rows)]
    for i in range(rows):
        row = emitter.element(builder, c, builder.mul(c64(i), ldc))
        for j in range(vectors):
            results[i][j].add_incoming(zero, entry)
            results[i][j].add_incoming(updated[i][j], body)
            store_c(results[i][j], emitter.element(builder, row, c64(lanes * j)), masks[j])
    builder.ret_void()
    return function
