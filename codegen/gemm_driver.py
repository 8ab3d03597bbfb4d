"""The own GEMM's driver: the blocked product over a range of C's rows (BLIS's loops around
the micro-kernels), the thread pool's chunk that claims a workspace for it, and the
exported entry that decides how a product is split over the pool.

    void <isa.entry>(i64 trans_a, i64 trans_b, i64 m, i64 n, i64 k,
                     float* a, i64 lda, float* b, i64 ldb, float* c, i64 ldc)
    void <isa.entry>_epilogue(<the same>, float* bias, i64 activation)
    void <isa.entry>_combine(<the epilogue entry's>, float* other, i64 ldo, i64 combine,
                             double scale)
    void <isa.entry>_batched(<the epilogue entry's>, i64 count, i64* layout)

The second stores ``activation(C + bias)`` instead of C (``bias``: one float per column,
or null; ``activation``: ``NO_ACTIVATION``, ``RELU`` or ``RELU_ZERO_FIRST``: NumPy's
``maximum(x, 0)`` and ``maximum(0, x)``, which differ on -0.0), applied to each row panel
(``mr`` rows) right after its last K block is stored, while it is in cache (BLIS order:
to each ``mc`` row block, in L2), not as a pass over C of its own. The third then
combines that value ``v`` with a second matrix ``D`` of C's shape (``other``, rows ``ldo``
apart) as ``combine`` says (``COMBINES``): ``D + scale * v``, ``D - scale * v`` (an SGD
update ``w - lr * dW`` in the epilogue of ``dW``'s product), ``where(D > 0, v, 0)`` or
``where(D <= 0, 0, v)`` (a relu's backward mask read from its output); only without an
activation.

The plan of a product:

* K is cut into equal blocks of at most ``kc``; the first block stores C and later ones
  accumulate (so C is never read before it is written: NaN or garbage in the output
  buffer does not leak in); ``k = 0`` stores zeros;
* a small untransposed B (at most ``DIRECT_B_FLOATS``: it stays in cache) is read in place
  with A (a transposed A only up to ``DIRECT_TRANSPOSED_A_FLOATS``), by the direct
  micro-kernels; otherwise B is packed per ``kc x nc`` block and A
  per ``mc x kc`` block, and tiles are swept row panel by row panel (small packed B) or in
  BLIS order;
* products of ``PARALLEL_WORK`` multiply-adds or more are split into one chunk per pool
  thread, along the longer of C's rows and columns (each chunk packs its own copy of the
  operand it is not split along);
* a batch of products (``_batched``, in ``gemm_batched``) is split by entry, each entry on
  one thread.

>>> from .gemm_ir import AVX2
>>> 'define void @"tj_sgemm_own_avx2"' in module_ir(AVX2)
True
"""

from __future__ import annotations

from llvmlite import ir

from . import parallel
from .gemm_ir import F64, I64, PTR, VOID, Emitter, c64
from .gemm_micro import micro, micro_direct
from .gemm_packing import pack_a, pack_b

WORKSPACES_SYMBOL = "tj_sgemm_workspaces"
# Packed B blocks up to this many floats are swept row panel by row panel (C's rows stay
# contiguous; avoids 4K aliasing when ldc is a power of 2), bigger ones in BLIS order.
ROW_PANEL_ORDER_FLOATS = 96 * 1024
# An untransposed B of at most this many floats (it stays in L2) is read in place, and A
# too: packing costs more than it saves (an RNN step 16 x 64 @ 64 x 64: 2.5 us, was 4.2 us
# packed; logits 512 x 1024 @ 1024 x 10: 148 us, was 335 us).
DIRECT_B_FLOATS = 64 * 1024
# A bigger B is read in place too when C has at most this many rows (in the chunk) and K is
# at most this deep (a 32-column panel of B, K x 32 floats, stays in L2), one column
# panel at a time.
DIRECT_ROWS = 64
DIRECT_PANEL_DEPTH = 2048
# A transposed A is read in place only up to this many floats of it per call of the rows
# (rows x K): each row panel reads mr floats (32 bytes in AVX-512) of every line, so each
# line comes from memory twice once A is past the caches (dW2 = h.T @ d_logits of the
# batch-4096 MLP step, 1024 x 10, K 4096: 2.5 ms in place, 1.3-1.7 ms packed; at K 1024
# 0.24-0.26 in place, 0.32-0.35 packed; 2 threads, idle cores).
DIRECT_TRANSPOSED_A_FLOATS = 1 << 20
# Products of fewer multiply-adds than this stay on the calling thread (as batches do:
# gemm_batched.BATCH_PARALLEL_WORK). The MLP step's 5.2M-multiply-add products split in
# two (idle cores, wall time, medians: dW2 = h.T @ dlogits 1024 x 10, K 512: 0.45-0.49 ->
# 0.22-0.26 ms; logits 512 x 10, K 1024: 0.17 -> 0.08 ms; dlogits @ w2.T 0.18-0.20 ->
# 0.15-0.17 ms). Under load a split can wait on a preempted thread (0.2-0.9 ms measured
# for these products when 1 << 23 was chosen); the batch-64 step's 0.65M ones stay whole.
PARALLEL_WORK = 1 << 20
# Chunks a thread of a split direct product (B small and read in place: nothing packed),
# cut along C's rows (``entry_function``).
DIRECT_CHUNKS_PER_THREAD = 4

# The chunk function's context: the epilogue entry's 13 arguments, how the work is split,
# then the combine entry's four (the scale as its float64 bits).
CONTEXT_FIELDS, SPLIT_BY_COLUMNS, COMBINE_FIELD = 18, 13, 14
# Epilogue activations (the epilogue entry's last argument). Both relus keep NaN, as
# np.maximum does; on ties NumPy returns the second operand, so np.maximum(-0.0, 0) is 0.0
# (RELU) and np.maximum(0, -0.0) is -0.0 (RELU_ZERO_FIRST).
NO_ACTIVATION, RELU, RELU_ZERO_FIRST = 0, 1, 2
ACTIVATIONS = {None: NO_ACTIVATION, "relu": RELU, "relu_zero_first": RELU_ZERO_FIRST}
# How the combine entry's second matrix D meets the epilogue's value v, each rounded as
# NumPy rounds the expression: ``D + scale * v`` (the product ``scale * v`` rounded first;
# scale 1.0 leaves v as it is), ``D - scale * v``, ``where(D > 0, v, 0)`` and
# ``where(D <= 0, 0, v)`` (the two differ where D is NaN: 0, then v).
NO_COMBINE, ADD_TO_OTHER, SUBTRACT_FROM_OTHER, WHERE_OTHER_POSITIVE, UNLESS_OTHER_NONPOSITIVE = (
    0, 1, 2, 3, 4)
COMBINES = {None: NO_COMBINE, "add": ADD_TO_OTHER, "subtract": SUBTRACT_FROM_OTHER,
            "where_positive": WHERE_OTHER_POSITIVE,
            "unless_nonpositive": UNLESS_OTHER_NONPOSITIVE}
ENTRY_ARGUMENTS = [I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64]
COMBINE_ARGUMENTS = [PTR, I64, I64, F64]  # other, ldo, combine, scale
# The pool's fields this code reads (codegen/parallel.py's layout).
POOL_THREADS = parallel.THREADS
POOL_FIELDS = parallel.POOL_FIELDS


def direct_condition(builder, trans_a, trans_b, rows, n, k):
    """Computed unpacked: B untransposed and small (re-read from cache per ``mr`` rows),
    or few rows (``DIRECT_ROWS``) over a B whose column panels fit L2
    (``DIRECT_PANEL_FLOATS``): each panel is then read in place by every row panel in turn
    (``rows_function``), where packing would copy all of B for a few uses of each element;
    and A untransposed or at most ``DIRECT_TRANSPOSED_A_FLOATS`` of it."""
    small_b = builder.icmp_signed("<=", builder.mul(k, n), c64(DIRECT_B_FLOATS))
    few_rows = builder.and_(builder.icmp_signed("<=", rows, c64(DIRECT_ROWS)),
                            builder.icmp_signed("<=", k, c64(DIRECT_PANEL_DEPTH)))
    a_in_place = builder.or_(
        builder.icmp_signed("==", trans_a, c64(0)),
        builder.icmp_signed("<=", builder.mul(rows, k), c64(DIRECT_TRANSPOSED_A_FLOATS)))
    return builder.and_(builder.and_(builder.icmp_signed("==", trans_b, c64(0)), a_in_place),
                        builder.or_(small_b, few_rows))


def epilogue_function(emitter):
    """``tj_sgemm_epilogue(c, ldc, rows, columns, bias, column, activation, other, ldo,
    combine, scale)``: ``C[0:rows, 0:columns] = activation(C + bias[column:column +
    columns])`` in place (``bias`` may be null: nothing is added), then combined with
    ``other`` (``D``, rows ``ldo`` apart, at the same tile) as ``combine`` says
    (``COMBINES``; none with an activation). The relus are ``np.maximum(x, 0)`` and
    ``np.maximum(0, x)`` exactly (NaN stays NaN; -0.0 as NumPy gives it). Row by row,
    whole vectors unmasked and a masked tail; one loop per (bias or not, activation,
    combine), chosen once per call."""
    lanes = emitter.isa.lanes
    function = emitter.function("tj_sgemm_epilogue", [PTR, I64, I64, I64, PTR, I64, I64,
                                                      *COMBINE_ARGUMENTS])
    c, ldc, rows, columns, bias, column, activation, other, ldo, combine, scale = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    zero = ir.Constant(emitter.vector, None)
    if emitter.scalar != F64:
        scale = builder.fptrunc(scale, emitter.scalar)  # a float32 value: exact
    scales = emitter.splat(builder, scale)
    has_bias = builder.zext(builder.icmp_unsigned("!=", bias, ir.Constant(PTR, None)), I64)
    whole_end = builder.and_(columns, c64(-lanes))  # lanes is a power of 2
    bias = emitter.element(builder, bias, column)
    kinds = [(kind, NO_COMBINE) for kind in (NO_ACTIVATION, RELU, RELU_ZERO_FIRST)]
    kinds += [(NO_ACTIVATION, how) for how in (ADD_TO_OTHER, SUBTRACT_FROM_OTHER,
                                               WHERE_OTHER_POSITIVE, UNLESS_OTHER_NONPOSITIVE)]
    bodies = {(with_bias, kind, how): function.append_basic_block(f"bias{with_bias}.{kind}.{how}")
              for with_bias in (False, True) for kind, how in kinds}
    choice = builder.switch(builder.add(builder.mul(combine, c64(8)), builder.add(
        builder.mul(activation, c64(2)), has_bias)), bodies[True, NO_ACTIVATION, NO_COMBINE])
    for (with_bias, kind, how), block in bodies.items():
        choice.add_case(c64(8 * how + 2 * kind + with_bias), block)
    for (with_bias, kind, how), block in bodies.items():
        builder.position_at_end(block)

        def load(pointer, mask):
            return (emitter.load_vector(builder, pointer) if mask is None
                    else emitter.masked_load(builder, pointer, mask))

        def apply(c_row, d_row, j, mask, with_bias=with_bias, kind=kind, how=how):
            pointer = emitter.element(builder, c_row, j)
            value = load(pointer, mask)
            if with_bias:
                value = builder.fadd(value, load(emitter.element(builder, bias, j), mask))
            if kind != NO_ACTIVATION:
                # NaN compares false: it is kept. maximum(x, 0) gives 0 for x <= 0 (0.0 for
                # -0.0); maximum(0, x) only for x < 0 (-0.0 stays).
                clamp = builder.fcmp_ordered("<=" if kind == RELU else "<", value, zero)
                value = builder.select(clamp, zero, value)
            if how != NO_COMBINE:
                other_value = load(emitter.element(builder, d_row, j), mask)
                if how == ADD_TO_OTHER:
                    value = builder.fadd(other_value, builder.fmul(scales, value))
                elif how == SUBTRACT_FROM_OTHER:
                    value = builder.fsub(other_value, builder.fmul(scales, value))
                elif how == WHERE_OTHER_POSITIVE:  # NaN > 0 is false: 0
                    value = builder.select(builder.fcmp_ordered(">", other_value, zero),
                                           value, zero)
                else:  # NaN <= 0 is false: v
                    value = builder.select(builder.fcmp_ordered("<=", other_value, zero),
                                           zero, value)
            if mask is None:
                builder.store(value, pointer, align=emitter.align)
            else:
                emitter.masked_store(builder, value, pointer, mask)

        def row(i, apply=apply, how=how):
            c_row = emitter.element(builder, c, builder.mul(i, ldc))
            d_row = emitter.element(builder, other, builder.mul(i, ldo)) if (
                how != NO_COMBINE) else None
            emitter.loop(builder, c64(0), whole_end, c64(lanes),
                         lambda j: apply(c_row, d_row, j, None))
            with builder.if_then(builder.icmp_signed("<", whole_end, columns)):
                apply(c_row, d_row, whole_end, emitter.lane_mask(builder, columns, whole_end))
        emitter.loop(builder, c64(0), rows, c64(1), row)
        builder.ret_void()
    return function


def rows_function(emitter):
    """``tj_sgemm_rows(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, bias, activation,
    row_begin, row_end, workspace, other, ldo, combine, scale)``: C's rows ``[row_begin,
    row_end)``, with the epilogue (``epilogue_function``) when ``bias`` is not null or
    there is an activation or a combine; ``workspace`` may be null when the rows take the
    direct path (``direct_condition``)."""
    isa, lanes = emitter.isa, emitter.isa.lanes
    micro_full = micro(emitter, f"micro_{isa.mr}x{isa.nr}", isa.vectors)
    micro_narrow = micro(emitter, f"micro_{isa.mr}x{lanes}", 1)
    # Per row count, a kernel per vector count (column edges and narrow B use the fewest
    # that cover them) and, where masked loads are slow, an unmasked one for whole tiles.
    directs = {(rows, vectors): micro_direct(emitter, f"micro_direct_{rows}x{lanes * vectors}",
                                             rows, vectors)
               for rows in range(1, isa.mr + 1) for vectors in range(1, isa.vectors + 1)}
    if not isa.cheap_masks:
        for rows in range(1, isa.mr + 1):
            directs[rows, "whole"] = micro_direct(emitter, f"micro_direct_{rows}x{isa.nr}_whole",
                                                  rows, isa.vectors, masked=False)
    packer_b, packer_a = pack_b(emitter), pack_a(emitter)
    epilogue = epilogue_function(emitter)
    function = emitter.function("tj_sgemm_rows", [*ENTRY_ARGUMENTS, PTR, I64, I64, I64, PTR,
                                                  *COMBINE_ARGUMENTS])
    (trans_a, trans_b, _, n, k, a, lda, b, ldb, c, ldc, bias, activation, row_begin, row_end,
     workspace, other, ldo, combine, scale) = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    loop, element, smaller = emitter.loop, emitter.element, emitter.smaller
    combined = builder.icmp_signed("!=", combine, c64(NO_COMBINE))
    with_epilogue = builder.or_(builder.or_(
        builder.icmp_unsigned("!=", bias, ir.Constant(PTR, None)),
        builder.icmp_signed("!=", activation, c64(NO_ACTIVATION))), combined)

    def prefetch_other(row, column):
        """D's lines of the tile at ``row, column``, asked for while the tile is computed:
        the epilogue that reads them runs once the row panel is done. Without it, D came
        from memory in bursts between micro-kernels (784 x 64 @ 64 x 1024 with an SGD
        update, one thread: the combine cost as much as a loop over C after the GEMM)."""
        with builder.if_then(combined):
            emitter.prefetch_tile(builder, builder.gep(
                other, [builder.add(builder.mul(row, ldo), column)],
                source_etype=emitter.scalar), ldo)

    def finish(row, rows, columns, column, final=None):
        """The epilogue on the tile of C (and D) at ``row`` and ``column``, when there is
        one (and the tile is ``final``)."""
        needed = with_epilogue if final is None else builder.and_(with_epilogue, final)
        with builder.if_then(needed):
            c_tile = element(builder, c, builder.add(builder.mul(row, ldc), column))
            # (not inbounds: ``other`` is null without a combine)
            d_tile = builder.gep(other, [builder.add(builder.mul(row, ldo), column)],
                                 source_etype=emitter.scalar)
            builder.call(epilogue, [c_tile, ldc, rows, columns, bias, column, activation,
                                    d_tile, ldo, combine, scale])

    empty, work = function.append_basic_block("k_empty"), function.append_basic_block("k")
    builder.cbranch(builder.icmp_signed("<=", k, c64(0)), empty, work)
    builder.position_at_end(empty)  # an empty sum: C = 0

    def zero_row(i):
        row = element(builder, c, builder.mul(i, ldc))
        loop(builder, c64(0), n, c64(1), lambda j: builder.store(
            ir.Constant(emitter.scalar, 0.0), element(builder, row, j), align=emitter.align))
    loop(builder, row_begin, row_end, c64(1), zero_row)
    finish(row_begin, builder.sub(row_end, row_begin), n, c64(0))
    builder.ret_void()

    builder.position_at_end(work)
    direct, packed = (function.append_basic_block(label) for label in ("direct", "packed"))
    builder.cbranch(direct_condition(builder, trans_a, trans_b, builder.sub(row_end, row_begin),
                                     n, k),
                    direct, packed)

    builder.position_at_end(direct)
    flipped_a = builder.icmp_signed("!=", trans_a, c64(0))
    row_step = builder.select(flipped_a, c64(1), lda)
    k_step = builder.select(flipped_a, lda, c64(1))

    def direct_tile(i0, j0):
        rows = smaller(builder, c64(isa.mr), builder.sub(row_end, i0))
        a_rows = element(builder, a, builder.mul(i0, row_step))
        columns = smaller(builder, c64(isa.nr), builder.sub(n, j0))
        c_tile = element(builder, c, builder.add(builder.mul(i0, ldc), j0))
        arguments = [k, a_rows, row_step, k_step, element(builder, b, j0), ldb,
                     c_tile, ldc, columns]
        prefetch_other(i0, j0)
        after = function.append_basic_block("direct.after")
        kinds = [(vectors, function.append_basic_block(f"direct.v{vectors}"))
                 for vectors in range(1, isa.vectors + 1)]
        if not isa.cheap_masks:
            kinds.append(("whole", function.append_basic_block("direct.whole")))
        # Vectors needed: ceil(columns / lanes); "whole" for a full tile.
        needed = builder.sdiv(builder.add(columns, c64(lanes - 1)), c64(lanes))
        if not isa.cheap_masks:
            needed = builder.select(builder.icmp_signed("==", columns, c64(isa.nr)),
                                    c64(0), needed)
        choice = builder.switch(needed, kinds[0][1])
        for vectors, block in kinds:
            choice.add_case(c64(0 if vectors == "whole" else vectors), block)
        for vectors, block in kinds:
            builder.position_at_end(block)
            switch = builder.switch(rows, after)
            for count in range(1, isa.mr + 1):
                case = function.append_basic_block(f"direct.{count}")
                switch.add_case(c64(count), case)
                builder.position_at_end(case)
                builder.call(directs[count, vectors], arguments)
                builder.branch(after)
        builder.position_at_end(after)

    def finish_panel(i0):
        # The epilogue on the whole row panel, row by row: per tile, each row reloaded
        # just after it was stored (ldc often a multiple of 4 KB: aliasing) cost 0.08 ms
        # on 512 x 10 @ 10 x 1024 (C itself: 0.12 ms).
        rows = smaller(builder, c64(isa.mr), builder.sub(row_end, i0))
        finish(i0, rows, n, c64(0))

    def rows_first(i0):
        loop(builder, c64(0), n, c64(isa.nr), lambda j0: direct_tile(i0, j0))
        finish_panel(i0)

    def columns_first(j0):
        loop(builder, row_begin, row_end, c64(isa.mr), lambda i0: direct_tile(i0, j0))

    # A small B stays in cache whichever way it is swept: row panel by row panel, each
    # finished (its epilogue) in turn. A big one (few rows): one column panel of B at a
    # time, read from L2 by every row panel; swept row panel first, each row panel read
    # all of B from L3 or memory again (64 x 784 @ 784 x 1024 ran slower than packed).
    small_b = builder.icmp_signed("<=", builder.mul(k, n), c64(DIRECT_B_FLOATS))
    with builder.if_else(small_b) as (by_row_panels, by_column_panels):
        with by_row_panels:
            loop(builder, row_begin, row_end, c64(isa.mr), rows_first)
        with by_column_panels:
            loop(builder, c64(0), n, c64(isa.nr), columns_first)
            loop(builder, row_begin, row_end, c64(isa.mr), finish_panel)
    builder.ret_void()

    builder.position_at_end(packed)
    b_packed = workspace
    a_packed = builder.gep(workspace, [c64(isa.packed_a_offset)], source_etype=emitter.scalar)
    # Equal K blocks: blocks = ceil(k / kc), depth = ceil(k / blocks).
    blocks = builder.sdiv(builder.add(k, c64(isa.kc - 1)), c64(isa.kc))
    block_depth = builder.sdiv(builder.add(k, builder.sub(blocks, c64(1))), blocks)

    def column_block(jc):
        width = smaller(builder, c64(isa.nc), builder.sub(n, jc))

        def depth_block(pc):
            depth = smaller(builder, block_depth, builder.sub(k, pc))
            builder.call(packer_b, [trans_b, b, ldb, pc, depth, jc, width, b_packed])
            accumulate = builder.zext(builder.icmp_signed(">", pc, c64(0)), I64)
            final = builder.icmp_signed(">=", builder.add(pc, depth), k)

            def row_block(ic):
                height = smaller(builder, c64(isa.mc), builder.sub(row_end, ic))
                builder.call(packer_a, [trans_a, a, lda, ic, height, pc, depth, a_packed])

                def tile(ir_, jr):
                    columns = smaller(builder, c64(isa.nr), builder.sub(width, jr))
                    rows = smaller(builder, c64(isa.mr), builder.sub(height, ir_))
                    c_tile = element(builder, c, builder.add(
                        builder.mul(builder.add(ic, ir_), ldc), builder.add(jc, jr)))
                    arguments = [depth, element(builder, a_packed, builder.mul(ir_, depth)),
                                 element(builder, b_packed, builder.mul(jr, depth)),
                                 c_tile, ldc, accumulate, rows, columns]
                    with builder.if_then(final):
                        prefetch_other(builder.add(ic, ir_), builder.add(jc, jr))
                    with builder.if_else(builder.icmp_signed("<=", columns, c64(lanes))) as (
                            narrow, wide):
                        with narrow:
                            builder.call(micro_narrow, arguments)
                        with wide:
                            builder.call(micro_full, arguments)

                def row_panel(ir_):
                    loop(builder, c64(0), width, c64(isa.nr), lambda jr: tile(ir_, jr))
                    # As on the direct path: the whole panel, row by row, once stored.
                    rows = smaller(builder, c64(isa.mr), builder.sub(height, ir_))
                    finish(builder.add(ic, ir_), rows, width, jc, final)

                small_b = builder.icmp_signed("<=", builder.mul(depth, width),
                                              c64(ROW_PANEL_ORDER_FLOATS))
                with builder.if_else(small_b) as (row_panels, blis_order):
                    with row_panels:
                        loop(builder, c64(0), height, c64(isa.mr), row_panel)
                    with blis_order:
                        loop(builder, c64(0), width, c64(isa.nr), lambda jr: loop(
                            builder, c64(0), height, c64(isa.mr),
                            lambda ir_: tile(ir_, jr)))
                        # Then on the whole block (mc rows: in L2), row by row: per tile,
                        # each row reloaded right after it was stored (ldc a multiple of
                        # 4 KB: aliasing) made a bias add cost 8% of 1024 x 256 @ 256 x 768.
                        finish(ic, height, width, jc, final)
            loop(builder, row_begin, row_end, c64(isa.mc), row_block)
        loop(builder, c64(0), k, block_depth, depth_block)
    loop(builder, c64(0), n, c64(isa.nc), column_block)
    builder.ret_void()
    return function


def chunk_function(emitter, rows):
    """``tj_sgemm_chunk(context, begin, end)``: the pool's body, over rows of C or (when
    the context says so) over its columns. Claims a free workspace from the table
    (spinning if every one is taken: only when more threads multiply at once than the
    table has slots), runs ``rows`` (``rows_function``) on it, releases it."""
    module = emitter.module
    table = ir.GlobalVariable(module, I64, WORKSPACES_SYMBOL)  # imported
    function = ir.Function(module, parallel.BODY_TYPE, "tj_sgemm_chunk")
    function.linkage = "internal"
    context, begin, end = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    fields = [builder.load(builder.gep(context, [c64(index)], source_etype=I64), typ=I64)
              for index in range(CONTEXT_FIELDS)]
    (trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, bias, activation, by_columns, other,
     ldo, combine, scale) = fields
    a, b, c, bias, other = (builder.inttoptr(value, PTR) for value in (a, b, c, bias, other))
    scale = builder.bitcast(scale, F64)
    # A column chunk is the product with B's and C's columns [begin, end), all rows.
    columns = builder.icmp_signed("!=", by_columns, c64(0))
    b_offset = builder.select(builder.icmp_signed("!=", trans_b, c64(0)),
                              builder.mul(begin, ldb), begin)
    b = builder.select(columns, builder.gep(b, [b_offset], source_etype=emitter.scalar), b)
    c = builder.select(columns, builder.gep(c, [begin], source_etype=emitter.scalar), c)
    other = builder.select(columns, builder.gep(other, [begin], source_etype=emitter.scalar),
                           other)
    has_bias = builder.icmp_unsigned("!=", bias, ir.Constant(PTR, None))
    bias = builder.select(builder.and_(columns, has_bias),
                          builder.gep(bias, [begin], source_etype=emitter.scalar), bias)
    n = builder.select(columns, builder.sub(end, begin), n)
    row_begin = builder.select(columns, c64(0), begin)
    row_end = builder.select(columns, m, end)
    arguments = [trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, bias, activation,
                 row_begin, row_end]
    combined = [other, ldo, combine, scale]

    unpacked, claim = (function.append_basic_block(label) for label in ("direct", "claim"))
    needs_none = builder.or_(builder.icmp_signed("<=", k, c64(0)), direct_condition(
        builder, trans_a, trans_b, builder.sub(row_end, row_begin), n, k))
    builder.cbranch(needs_none, unpacked, claim)
    builder.position_at_end(unpacked)
    builder.call(rows, [*arguments, ir.Constant(PTR, None), *combined])
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
    slot.add_incoming(c64(0), claim)
    builder.cbranch(builder.icmp_signed("<", slot, slots), try_slot, wait)
    builder.position_at_end(wait)  # all taken: pause, then scan again
    emitter.pause(builder)
    slot.add_incoming(c64(0), wait)
    builder.branch(search)
    builder.position_at_end(try_slot)
    flag = builder.gep(table, [builder.add(c64(1), builder.mul(slot, c64(2)))],
                       source_etype=I64)
    exchanged = builder.cmpxchg(flag, c64(0), c64(1), "acquire", "monotonic")
    next_slot = builder.add(slot, c64(1))
    slot.add_incoming(next_slot, try_slot)
    builder.cbranch(builder.extract_value(exchanged, 1), claimed, search)
    builder.position_at_end(claimed)
    address = builder.load(builder.gep(flag, [c64(1)], source_etype=I64), typ=I64)
    builder.call(rows, [*arguments, builder.inttoptr(address, PTR), *combined])
    builder.store_atomic(c64(0), flag, "release", 8)
    builder.ret_void()
    return function


def entry_prologue(function, context_fields, arguments, sizes, pool, combined=None):
    """The start of an exported entry (these and ``gemm_batched``'s): ``arguments`` (the
    epilogue entry's) copied into a context of ``context_fields`` i64 slots on the stack
    (pointers as addresses), not split by columns, ``combined`` (the combine entry's
    ``other, ldo, combine, scale``; default: no combine), and a return when one of
    ``sizes`` is 0. Returns
    the builder, placed where there is work, the context, ``store(index, value)`` into it,
    and the pool's thread count."""
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    context = builder.alloca(I64, size=context_fields)

    def store(index, value):
        builder.store(value, builder.gep(context, [c64(index)], source_etype=I64))

    for index, argument in enumerate(arguments):
        store(index, builder.ptrtoint(argument, I64) if argument.type == PTR else argument)
    store(SPLIT_BY_COLUMNS, c64(0))
    if combined is None:
        combined = [ir.Constant(PTR, None), c64(0), c64(NO_COMBINE), ir.Constant(F64, 1.0)]
    other, ldo, combine, scale = combined
    for index, value in enumerate([builder.ptrtoint(other, I64), ldo, combine,
                                   builder.bitcast(scale, I64)]):
        store(COMBINE_FIELD + index, value)
    run, nothing = function.append_basic_block("run"), function.append_basic_block("empty")
    nonempty = builder.icmp_signed(">", sizes[0], c64(0))
    for size in sizes[1:]:
        nonempty = builder.and_(nonempty, builder.icmp_signed(">", size, c64(0)))
    builder.cbranch(nonempty, run, nothing)
    builder.position_at_end(nothing)
    builder.ret_void()

    builder.position_at_end(run)
    threads = builder.load(builder.gep(pool, [c64(0), c64(POOL_THREADS)],
                                       source_etype=pool.value_type), typ=I64)
    return builder, context, store, threads


def entry_function(emitter, chunk):
    """The exported entries: the combine entry runs ``chunk`` inline, or one chunk per
    thread over the pool; the epilogue entry calls it without a combine, the plain entry
    without an epilogue. Returns the epilogue entry."""
    isa, module = emitter.isa, emitter.module
    pool_type = ir.ArrayType(I64, POOL_FIELDS)
    pool = ir.GlobalVariable(module, pool_type, "tj_pool")
    parallel_for = ir.Function(module, ir.FunctionType(
        VOID, [ir.PointerType(pool_type), PTR, PTR, I64, I64]), "tj_parallel_for")
    function = emitter.function(isa.combine_entry, [*ENTRY_ARGUMENTS, PTR, I64,
                                                    *COMBINE_ARGUMENTS], internal=False)
    *arguments, other, ldo, combine, scale = function.args
    trans_a, trans_b, m, n, k = arguments[:5]
    builder, context, store, threads = entry_prologue(function, CONTEXT_FIELDS, arguments,
                                                      (m, n), pool, [other, ldo, combine,
                                                                     scale])
    # Every chunk packs its own copy of the operand it is not split along, so: one chunk
    # per thread, split along the longer of m and n (the smaller operand is packed twice).
    # Direct products, which pack nothing, were cut into 4 column chunks a thread (3e9ad46)
    # so a thread held up by OpenBLAS's spinning worker would leave chunks to the other:
    # the batch-64 MLP step's dW1 + update after NumPy's product gained 0.04-0.1 ms in one
    # series, but the same product under the own setting lost 0.05-0.25 ms in others
    # (likely: narrower column chunks stream W1's rows in 512-byte runs). So a product whose
    # small B is read in place (``direct_condition`` on all of C's rows) is cut along the
    # rows instead, into DIRECT_CHUNKS_PER_THREAD chunks a thread when C has a row panel
    # for each: W1's rows stay whole, and the chunks go to the threads as they come free.
    # dW1 at batch 64 (784 x 64 @ 64 x 1024, update fused) right after NumPy's x @ w1,
    # under chrt -f 10, best / median ms, two alternating processes each: 0.363-0.373 /
    # 0.373-0.375 with one column chunk a thread, 0.313-0.316 / 0.317-0.320 with 4 row
    # chunks; alone 0.274-0.289 either way; the compiled step 0.885-0.891 / 0.907-0.918
    # against 0.823-0.860 / 0.837-0.872 (batch 512, whose dW1 is packed: 5.25-5.40 /
    # 5.33-5.48 against 5.23-5.27 / 5.29-5.37).
    direct_rows = builder.and_(
        builder.icmp_signed(">=", m, builder.mul(threads, c64(
            DIRECT_CHUNKS_PER_THREAD * isa.mr))),
        builder.and_(builder.icmp_signed("<=", builder.mul(k, n), c64(DIRECT_B_FLOATS)),
                     direct_condition(builder, trans_a, trans_b, m, n, k)))
    by_columns = builder.and_(builder.icmp_signed(">", n, m), builder.not_(direct_rows))
    extent = builder.select(by_columns, n, m)
    step = builder.select(by_columns, c64(isa.nr), c64(isa.mr))
    work = builder.mul(builder.mul(m, n), k)
    split = builder.and_(builder.and_(
        builder.icmp_signed(">", threads, c64(1)),
        builder.icmp_signed(">=", extent, builder.mul(step, c64(2)))),
        builder.icmp_signed(">=", work, c64(PARALLEL_WORK)))
    spread, inline = (function.append_basic_block(label) for label in ("spread", "inline"))
    builder.cbranch(split, spread, inline)
    builder.position_at_end(inline)
    builder.call(chunk, [context, c64(0), m])
    builder.ret_void()

    builder.position_at_end(spread)
    store(SPLIT_BY_COLUMNS, builder.zext(by_columns, I64))
    chunks = builder.select(direct_rows, builder.mul(threads, c64(DIRECT_CHUNKS_PER_THREAD)),
                            threads)
    per_thread = builder.sdiv(builder.add(extent, builder.sub(chunks, c64(1))), chunks)
    chunk_size = builder.mul(builder.sdiv(builder.add(per_thread, builder.sub(step, c64(1))),
                                          step), step)
    builder.call(parallel_for, [pool, chunk, context, extent, chunk_size])
    builder.ret_void()

    epilogue = emitter.function(isa.epilogue_entry, [*ENTRY_ARGUMENTS, PTR, I64],
                                internal=False)
    builder = ir.IRBuilder(epilogue.append_basic_block("entry"))
    builder.call(function, [*epilogue.args, ir.Constant(PTR, None), c64(0),
                            c64(NO_COMBINE), ir.Constant(F64, 1.0)])
    builder.ret_void()
    plain = emitter.function(isa.entry, ENTRY_ARGUMENTS, internal=False)
    builder = ir.IRBuilder(plain.append_basic_block("entry"))
    builder.call(epilogue, [*plain.args, ir.Constant(PTR, None), c64(NO_ACTIVATION)])
    builder.ret_void()
    return epilogue


def module_ir(isa):
    """The GEMM module's LLVM IR text for the instruction set ``isa`` (a ``gemm_ir.Isa``)."""
    from .gemm_batched import batched_function

    emitter = Emitter(isa)
    chunk = chunk_function(emitter, rows_function(emitter))
    batched_function(emitter, chunk, entry_function(emitter, chunk))
    return emitter.ir_text()
