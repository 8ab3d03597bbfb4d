"""A kernel's entry: run its ``impl(start, end, ...)`` inline, or split its outer loop
across the thread pool (``codegen/parallel.py``) through a trampoline.

Each kernel kind says which loop may be split and how much work one iteration does
(``split``, in ``codegen/kernel_kinds.py``): ``(extent, work per iteration)``, or None when
the kernel always runs on the calling thread. The entry splits when the pool has more than
one thread, the extent is more than one, and ``extent * work`` reaches
``PARALLEL_THRESHOLD``; an entry whose static extent and work never reach it has no
split path at all (``never_split``).
"""

from __future__ import annotations

from llvmlite import ir

from .kernel_index import I64, PTR, DimValues, const
from .parallel import PARALLEL_THRESHOLD, POOL_FIELDS, THREADS

# Elements in a chunk of a flat loop that names its vector width (``KernelBuilder.loop``):
# a multiple of any vector (16 float32 lanes) times LLVM's interleaving (up to 4).
ALIGNED_CHUNK = 64


def entry_function(kernel, split):
    """``void kernel(arguments...)``, the function the program calls for ``kernel`` (a
    ``KernelBuilder`` whose ``impl`` is finished); ``split``: ``(extent, work)`` or None."""
    program = kernel.program
    module = program.module
    entry = ir.Function(module, ir.FunctionType(ir.VoidType(), kernel.argument_types),
                        kernel.kernel.name)
    entry.linkage = "internal"
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    arguments = list(entry.args)
    dims = DimValues(builder, dict(zip(program.symbols,
                                       arguments[len(kernel.buffer_names):])))
    # The split's dims first, in the entry block: ``dims`` caches each value where it
    # is first computed, and a batched BLAS prologue computes inside its loop body, which
    # does not dominate the code after the loop (LLVM: "Instruction does not dominate
    # all uses!" on symbolic-shape variants).
    extent, work = (dims.dim(split[0]), dims.dim(split[1])) if split is not None else (None,
                                                                                       None)
    if kernel.prologue is not None:
        kernel.prologue(entry, builder, dims, dict(zip(kernel.buffer_names, arguments)))
    if split is None:
        builder.call(kernel.function, [const(0), const(1), *arguments])
        builder.ret_void()
        return entry
    if never_split(*split):
        # No pool branch and no trampoline: the impl's one caller passes its bounds as
        # constants, so LLVM knows the trip count (the MLP step's 10-element update of b2:
        # LLVM 15 -> 7 ms of CPU, fully unrolled instead of vectorized with epilogues).
        builder.call(kernel.function, [const(0), extent, *arguments])
        builder.ret_void()
        return entry
    pool = program.pool_state(POOL_FIELDS)
    threads = builder.load(builder.gep(pool, [const(0), const(THREADS)],
                                       source_etype=ir.ArrayType(I64, POOL_FIELDS)), typ=I64)
    parallel = builder.and_(
        builder.and_(builder.icmp_signed(">", threads, const(1)),
                     builder.icmp_signed(">", extent, const(1))),
        builder.icmp_signed(">=", builder.mul(extent, work), const(PARALLEL_THRESHOLD)))
    in_parallel = entry.append_basic_block("parallel")
    inline = entry.append_basic_block("inline")
    builder.cbranch(parallel, in_parallel, inline)
    builder.position_at_end(inline)
    builder.call(kernel.function, [const(0), extent, *arguments])
    builder.ret_void()
    builder.position_at_end(in_parallel)
    context = builder.alloca(I64, size=len(arguments))
    for index, argument in enumerate(arguments):
        slot = builder.gep(context, [const(index)])
        value = builder.ptrtoint(argument, I64) if argument.type == PTR else argument
        builder.store(value, slot)
    pieces = builder.mul(threads, const(4))
    chunk = builder.sdiv(builder.add(extent, builder.sub(pieces, const(1))), pieces)
    if kernel.aligned_chunks:  # a whole number of vectors: only the last chunk has a tail
        chunk = builder.and_(builder.add(chunk, const(ALIGNED_CHUNK - 1)),
                             const(-ALIGNED_CHUNK))
    builder.call(program.parallel_for(), [pool, trampoline(kernel), context, extent, chunk])
    builder.ret_void()
    return entry


def never_split(extent, work):
    """Is a split of ``extent`` iterations of ``work`` each below ``PARALLEL_THRESHOLD``
    (or of at most one iteration) whatever the pool, its dims being static?"""
    if not (isinstance(extent, int) and isinstance(work, int)):
        return False
    return extent <= 1 or extent * work < PARALLEL_THRESHOLD


def trampoline(kernel):
    """``body(context, start, end)`` for the pool: unpack the arguments, run impl."""
    function = ir.Function(kernel.program.module,
                           ir.FunctionType(ir.VoidType(), [PTR, I64, I64]),
                           kernel.kernel.name + "_chunk")
    function.linkage = "internal"
    context, start, end = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    values = []
    for index, kind in enumerate(kernel.argument_types):
        slot = builder.gep(context, [const(index)], source_etype=I64)
        value = builder.load(slot, typ=I64)
        values.append(builder.inttoptr(value, PTR) if kind == PTR else value)
    builder.call(kernel.function, [start, end, *values])
    builder.ret_void()
    return function
