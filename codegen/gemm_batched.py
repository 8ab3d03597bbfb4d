"""The own GEMM's batched entry: a stack of products ``C[i] = op(A[i]) @ op(B[i])``
(attention's ``query @ key.T`` and ``weights @ value``: 64 products of 128 x 32 @ 32 x 128
in a transformer block), split over tracejit's thread pool by batch entry, each entry
computed on one thread.

    void <isa.entry>_batched(i64 trans_a, i64 trans_b, i64 m, i64 n, i64 k,
                             T* a, i64 lda, T* b, i64 ldb, T* c, i64 ldc,
                             T* bias, i64 activation, i64 count, i64* layout)

The first thirteen arguments are the epilogue entry's (``gemm_driver``), for entry 0;
``count`` is the number of entries and ``layout`` says where entry ``i`` lives:
``[rank, (size, a_stride, b_stride, c_stride) per batch dim, outermost first, reach,
depth]``
(strides in elements; 0 for a dim an operand broadcasts), and ``count`` is the product of
the sizes. So a ``(B, 1, M, K) @ (1, H, K, N)`` product is one call, each operand read
where it is (transposed ones through ``trans_a``/``trans_b`` and ``lda``/``ldb``, never
copied).

``reach`` is ``REACH_ALL`` (-1), or says that only ``C[i, j]`` with ``j <= i + reach`` will
be read (attention's causal mask: ``reach`` 0): each entry is then computed in blocks of
``BAND_ROWS`` rows, each only up to the last column a row of it needs, and the elements
past that are left as they were (the caller masks them out). Half the multiply-adds of a
square causal product are skipped, less what the blocks' stair steps cost.

``depth`` is ``REACH_ALL``, or says that ``A[i, l]`` is exactly 0 wherever ``l > i + depth``
(causal attention's weights: ``softmax(scores) @ value``): each block of rows then reads
A's columns and B's rows only up to its last row's reach. The terms left out are
``0 * B[l, j]``: 0 in the sum unless ``B[l, j]`` is inf or NaN (NumPy's ``0 * inf`` is
NaN), so an entry whose B holds any is computed whole.

Why by entry: a serial loop of per-entry calls (OpenBLAS, or the own GEMM splitting each
small product in two) starts and joins threads once per entry - 64 times per matmul here,
each product only ~0.3 M multiply-adds. One ``tj_parallel_for`` over the entries joins
once, and the workers never call ``tj_parallel_for`` themselves (a nested job would run
inline anyway, but only after claiming the pool: see ``codegen/parallel.py``).

>>> from .gemm_ir import AVX2
>>> from .gemm_driver import module_ir
>>> 'define void @"tj_sgemm_own_avx2_batched"' in module_ir(AVX2)
True
"""

from __future__ import annotations

from llvmlite import ir

from .gemm_driver import CONTEXT_FIELDS, ENTRY_ARGUMENTS, SPLIT_BY_COLUMNS, entry_prologue
from .gemm_ir import I64, PTR, VOID, c64

I1 = ir.IntType(1)

# The batch chunk's context: the chunk's fields, then the entry count, the layout and
# whether each entry may split itself over the pool (1 only on the calling thread).
BATCH_CONTEXT_FIELDS = CONTEXT_FIELDS + 3
COUNT, LAYOUT, THREADED = CONTEXT_FIELDS, CONTEXT_FIELDS + 1, CONTEXT_FIELDS + 2
# Split by entry from this many multiply-adds in all (a pool job costs a few us to hand
# out and join; one thread does ~1 M multiply-adds in 15-30 us). Below: the calling thread.
BATCH_PARALLEL_WORK = 1 << 20
# Entries per pool chunk: about this many chunks per thread, claimed as threads free up
# (the shared machine's other load stalls one thread or the other).
CHUNKS_PER_THREAD = 4
A_FIELD, B_FIELD, C_FIELD = 5, 7, 9  # where the operands' addresses are in a context
M_FIELD, N_FIELD, K_FIELD = 2, 3, 4
TRANS_B_FIELD, LDB_FIELD = 1, 8
# A small B stored transposed and strided is copied per entry up to this size
# (``contiguous_b``; on the stack of the thread computing the entry).
COPIED_B_BYTES = 1 << 16
REACH_ALL = -1  # the layout's last field: every element of C is read
# Rows per block of a banded product (see the module's docstring): a multiple of the
# micro-kernels' row panels (``mr``: 8 for AVX-512, 4 for AVX2); fewer rows skip more of
# the band's upper triangle, but each block is one more chunk call (causal 128 x 128: 8
# blocks, 56% of the multiply-adds).
BAND_ROWS = 16


def batch_chunk_function(emitter, chunk, entry):
    """``tj_sgemm_batch_chunk(context, begin, end)``: entries ``[begin, end)``, each by
    ``chunk`` over all its rows on this thread, or (``THREADED``) by ``entry``, which may
    split it over the pool."""
    module, itemsize = emitter.module, emitter.isa.itemsize
    function = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64]),
                           "tj_sgemm_batch_chunk")
    function.linkage = "internal"
    context, begin, end = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))

    def field(pointer, index):  # index: an int or an i64 value
        index = c64(index) if isinstance(index, int) else index
        return builder.gep(pointer, [index], source_etype=I64)

    # The stack slots first, in the entry block (an alloca inside the loop would grow the
    # stack per entry).
    local = builder.alloca(I64, size=CONTEXT_FIELDS)
    flags = builder.alloca(I1, size=2)  # a banded entry's: B finite, so far; cut its depth
    offsets = [builder.alloca(I64) for _ in range(3)]
    remaining = builder.alloca(I64)
    copied_b = builder.alloca(emitter.scalar, size=COPIED_B_BYTES // itemsize)
    fields = [builder.load(field(context, index), typ=I64) for index in range(
        BATCH_CONTEXT_FIELDS)]
    for index in range(CONTEXT_FIELDS):
        builder.store(fields[index], field(local, index))
    builder.store(c64(0), field(local, SPLIT_BY_COLUMNS))
    layout = builder.inttoptr(fields[LAYOUT], PTR)
    rank = builder.load(layout, typ=I64)
    reach_at = builder.add(c64(1), builder.mul(rank, c64(4)))
    reach = builder.load(field(layout, reach_at), typ=I64)
    depth = builder.load(field(layout, builder.add(reach_at, c64(1))), typ=I64)
    banded = builder.or_(builder.icmp_signed("!=", reach, c64(REACH_ALL)),
                         builder.icmp_signed("!=", depth, c64(REACH_ALL)))
    threaded = builder.icmp_signed("!=", fields[THREADED], c64(0))
    operand_fields = (A_FIELD, B_FIELD, C_FIELD)

    def per_entry(index):
        for offset in offsets:
            builder.store(c64(0), offset)
        builder.store(index, remaining)
        for position in (TRANS_B_FIELD, LDB_FIELD):  # the last entry's copy changed them
            builder.store(fields[position], field(local, position))

        def per_dim(step):  # innermost dim first: dim = rank - 1 - step
            dim = builder.sub(builder.sub(rank, c64(1)), step)
            base = builder.add(c64(1), builder.mul(dim, c64(4)))
            size = builder.load(field(layout, base), typ=I64)
            rest = builder.load(remaining, typ=I64)
            coordinate = builder.srem(rest, size)
            builder.store(builder.sdiv(rest, size), remaining)
            for which, offset in enumerate(offsets):
                stride = builder.load(field(layout, builder.add(base, c64(1 + which))), typ=I64)
                builder.store(builder.add(builder.load(offset, typ=I64),
                                          builder.mul(coordinate, stride)), offset)

        emitter.loop(builder, c64(0), rank, c64(1), per_dim)
        for offset, slot in zip(offsets, operand_fields):
            moved = builder.mul(builder.load(offset, typ=I64), c64(itemsize))
            builder.store(builder.add(fields[slot], moved), field(local, slot))
        contiguous_b(emitter, builder, local, (fields[N_FIELD], fields[K_FIELD]), copied_b)
        with builder.if_else(banded) as (band, full):
            with band:
                band_blocks(emitter, builder, chunk, local, fields, (reach, depth), flags)
            with full:
                with builder.if_else(threaded) as (whole, alone):
                    with whole:
                        values = [builder.load(field(local, position), typ=I64)
                                  for position in range(len(ENTRY_ARGUMENTS) + 2)]
                        builder.call(entry, [
                            builder.inttoptr(value, PTR) if kind == PTR else value
                            for value, kind in zip(values, [*ENTRY_ARGUMENTS, PTR, I64])])
                    with alone:
                        builder.call(chunk, [local, c64(0), fields[M_FIELD]])  # rows [0, m)

    emitter.loop(builder, begin, end, c64(1), per_entry)
    builder.ret_void()
    return function


def contiguous_b(emitter, builder, local, sizes, copy):
    """A small B (at most ``COPIED_B_BYTES``) stored transposed with rows further apart
    than its depth - attention's keys, ``key.transpose(0, 1, 3, 2)`` of a head split from
    one qkv buffer and read where it lies (``codegen/strided_views.py``) - is transposed
    into ``copy`` on this thread's stack, and the entry reads that untransposed, by the
    direct path: read in place, a transposed B is packed again for every block of a banded
    entry (the transformer block's ``query @ key.T``, one thread: 0.77 ms; with this copy
    0.62, where a kernel's transposing copy of the keys and the product took 0.25 + 0.58)."""
    n, k = sizes
    trans_b, b, ldb = (builder.load(builder.gep(local, [c64(index)], source_etype=I64),
                                    typ=I64) for index in (TRANS_B_FIELD, B_FIELD, LDB_FIELD))
    elements = builder.mul(n, k)
    copied = builder.and_(
        builder.and_(builder.icmp_signed("!=", trans_b, c64(0)),
                     builder.icmp_signed("!=", ldb, k)),
        builder.and_(builder.icmp_signed(">", elements, c64(0)), builder.icmp_signed(
            "<=", elements, c64(COPIED_B_BYTES // emitter.isa.itemsize))))
    scalar = emitter.scalar
    with builder.if_then(copied, likely=False):
        source = builder.inttoptr(b, PTR)

        def move(row, column):  # B[row, column] is row ``column`` of what is stored
            value = builder.load(builder.gep(source, [builder.add(
                builder.mul(column, ldb), row)], source_etype=scalar), typ=scalar)
            builder.store(value, builder.gep(copy, [builder.add(
                builder.mul(row, n), column)], source_etype=scalar))

        emitter.loop(builder, c64(0), n, c64(1), lambda column: emitter.loop(
            builder, c64(0), k, c64(1), lambda row: move(row, column)))
        for position, value in ((B_FIELD, builder.ptrtoint(copy, I64)), (LDB_FIELD, n),
                                (TRANS_B_FIELD, c64(0))):
            builder.store(value, builder.gep(local, [c64(position)], source_etype=I64))


def band_blocks(emitter, builder, chunk, local, fields, reaches, flags):
    """One entry of a banded product on this thread: rows ``[r, r + BAND_ROWS)`` by
    ``chunk`` with C's columns cut to ``r + BAND_ROWS + reach`` (the block's last row's
    reach; none when that is 0 or less) and the depth to ``r + BAND_ROWS + depth`` (when B
    is finite). Never split over the pool (fewer entries than threads leave a thread idle,
    where the band at least halves the work); attention has batch x heads entries."""
    reach, depth = reaches
    m, n, k = fields[M_FIELD], fields[N_FIELD], fields[K_FIELD]
    n_field, k_field = (builder.gep(local, [c64(index)], source_etype=I64)
                        for index in (N_FIELD, K_FIELD))
    finite, cuts_depth = (builder.gep(flags, [c64(index)], source_etype=I1)
                          for index in range(2))
    builder.store(ir.Constant(I1, 0), cuts_depth)
    with builder.if_then(builder.icmp_signed("!=", depth, c64(REACH_ALL))):
        builder.store(_finite_b(emitter, builder, local, (n, k), finite), cuts_depth)
    cut_depth = builder.load(cuts_depth, typ=I1)

    def cut(limit, reach, full):
        wanted = builder.add(limit, reach)
        wanted = builder.select(builder.icmp_signed("<", wanted, full), wanted, full)
        return wanted

    def block(first):
        last = builder.add(first, c64(BAND_ROWS))
        last = builder.select(builder.icmp_signed("<", last, m), last, m)
        columns = builder.select(builder.icmp_signed("==", reach, c64(REACH_ALL)), n,
                                 cut(last, reach, n))
        builder.store(builder.select(cut_depth, cut(last, depth, k), k), k_field)
        with builder.if_then(builder.icmp_signed(">", columns, c64(0))):
            builder.store(columns, n_field)
            builder.call(chunk, [local, first, last])

    emitter.loop(builder, c64(0), m, c64(BAND_ROWS), block)
    builder.store(n, n_field)  # the next entry's sizes
    builder.store(k, k_field)


def _finite_b(emitter, builder, local, sizes, finite):
    """Whether every element of this entry's B (``k x n``, through ``ldb``, transposed
    or not) is finite: ``x * 0 == 0`` fails for inf and NaN only. ``finite``: an i1 slot."""
    scalar = emitter.scalar
    n, k = sizes
    trans_b, b, ldb = (builder.load(builder.gep(local, [c64(index)], source_etype=I64),
                                    typ=I64) for index in (1, B_FIELD, 8))
    b = builder.inttoptr(b, PTR)
    transposed = builder.icmp_signed("!=", trans_b, c64(0))
    lines = builder.select(transposed, n, k)  # B's rows as stored
    length = builder.select(transposed, k, n)
    builder.store(ir.Constant(I1, 1), finite)

    def line(row):
        start = builder.mul(row, ldb)

        def element(column):
            value = builder.load(builder.gep(b, [builder.add(start, column)],
                                             source_etype=scalar), typ=scalar)
            zero = builder.fcmp_ordered("==", builder.fmul(value, ir.Constant(scalar, 0.0)),
                                        ir.Constant(scalar, 0.0))
            builder.store(builder.and_(builder.load(finite, typ=I1), zero), finite)

        emitter.loop(builder, c64(0), length, c64(1), element)

    emitter.loop(builder, c64(0), lines, c64(1), line)
    return builder.load(finite, typ=I1)


def batched_function(emitter, chunk, entry):
    """The exported ``<isa.entry>_batched`` (see the module's docstring): one pool job over
    the entries when there are at least as many as threads and enough work in all, else
    the entries in order on this thread, each split by ``entry`` if it is big enough."""
    isa, module = emitter.isa, emitter.module
    body = batch_chunk_function(emitter, chunk, entry)
    pool = module.globals["tj_pool"]
    parallel_for = module.globals["tj_parallel_for"]
    function = emitter.function(f"{isa.entry}_batched", [*ENTRY_ARGUMENTS, PTR, I64, I64, PTR],
                                internal=False)
    arguments = function.args
    *products, count, layout = arguments
    m, n, k = products[2:5]
    builder, context, store, threads = entry_prologue(function, BATCH_CONTEXT_FIELDS, products,
                                                      (m, n, count), pool)
    store(COUNT, count)
    store(LAYOUT, builder.ptrtoint(layout, I64))
    # k = 0 still stores zeros: count it as one multiply-add per element.
    at_least_one = builder.select(builder.icmp_signed("<", k, c64(1)), c64(1), k)
    work = builder.mul(builder.mul(builder.mul(m, n), at_least_one), count)
    split = builder.and_(builder.and_(
        builder.icmp_signed(">", threads, c64(1)),
        builder.icmp_signed(">=", count, threads)),
        builder.icmp_signed(">=", work, c64(BATCH_PARALLEL_WORK)))
    spread, inline = (function.append_basic_block(label) for label in ("spread", "inline"))
    builder.cbranch(split, spread, inline)
    builder.position_at_end(inline)
    store(THREADED, c64(1))
    builder.call(body, [context, c64(0), count])
    builder.ret_void()

    builder.position_at_end(spread)
    store(THREADED, c64(0))
    pieces = builder.mul(threads, c64(CHUNKS_PER_THREAD))
    per_chunk = builder.sdiv(builder.add(count, builder.sub(pieces, c64(1))), pieces)
    builder.call(parallel_for, [pool, body, context, count, per_chunk])
    builder.ret_void()
    return function

