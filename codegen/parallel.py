"""A thread pool in native code: kernels split their outer loop across all cores.

Worker threads are started once per process (Python threads that call
``tj_worker_loop`` and never return; ctypes releases the GIL) and wait for jobs in native
code - spinning briefly, then sleeping on a futex - so handing out a job costs a few
microseconds and no Python. ``tj_parallel_for(pool, body, context, count, chunk)`` runs
``body(context, start, end)`` over ``[0, count)`` in chunks; the calling thread works too,
and returns when every chunk is done (waiting for the last ones the same way: a short
spin, then the futex, which the worker that finishes the job wakes).

Chunks are claimed with a compare-exchange on a counter whose high 32 bits are the job's
generation, so a worker that is late from a previous job can never claim (or skip) a chunk
of the next one.

The thread count is the runtime's to choose (``set_thread_count``: ``runtime/config.py``
passes ``TRACEJIT_NUM_THREADS``); used alone, codegen starts a pool as big as the cores
this process may use. Kernels below a size threshold run on the calling thread alone.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import threading
from functools import lru_cache
from pathlib import Path

from llvmlite import ir

from . import blas, llvm
from .counted_loop import counted_loop

I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
POOL = ir.PointerType(I64)  # typed, so llvmlite's atomic instructions can check value types
VOID = ir.VoidType()
BODY_TYPE = ir.FunctionType(VOID, [PTR, I64, I64])

# Pool layout (i64 fields): generation, claim counter, done counter, chunk count, body,
# context, total, chunk size, sleepers, thread count, parked generation, owner flag, owner
# asleep until the job is done.
(GENERATION, CLAIM, DONE, CHUNKS, BODY, CONTEXT, TOTAL, CHUNK, SLEEPERS, THREADS, PARKED,
 OWNED, OWNER_WAITING) = range(13)
POOL_FIELDS = 13

# Below this many innermost iterations a kernel runs on the calling thread.
PARALLEL_THRESHOLD = 1 << 15
# Pauses before an idle worker, or a caller waiting for the last chunks, sleeps: ~0.4 ms
# (a pause is ~64 cycles on Zen 4, ~140 on Skylake-X). 1 << 11 (~50 us) let workers sleep
# between a model's back-to-back calls, and a sleeping worker woke too late to take its
# chunks (a VM's idle vCPU): gelu 2048² 1.9 -> 2.7 ms, the batch-64 MLP step 1.5 -> 2.6 ms
# in the benchmarks. The interleave benchmark, which the shorter spin was for, stays at
# 1.00x its parts at 1 << 14: OpenBLAS's own shortened spin (blas.py) is what fixed it.
SPINS_BEFORE_SLEEP = 1 << 14
# An idle worker spins that long only when its last wait for a job was shorter than
# LONG_WAIT_CYCLES (time stamp counter ticks, ~0.4 ms): kernels back to back, a model's
# calls, an RNN's steps, gaps of NumPy work shorter than the spin. After a longer wait - the
# caller went off to other work, such as NumPy's matmuls between compiled layers - it spins
# SHORT_SPINS_BEFORE_SLEEP (~26 us here) and sleeps: spinning the whole 0.4 ms after every
# layer took a core from one of OpenBLAS's threads (benchmarks/interleave.py).
SHORT_SPINS_BEFORE_SLEEP = 1 << 10
LONG_WAIT_CYCLES = 1 << 20

_FUTEX_SYSCALL = {("Linux", "x86_64"): 202, ("Linux", "aarch64"): 98}.get(
    (platform.system(), platform.machine())
)
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129


_thread_setting = None  # set_thread_count's; None: the cores this process may use


def set_thread_count(setting):
    """Pools started from now on run ``setting`` threads: a count, or the text of
    ``TRACEJIT_NUM_THREADS`` as the runtime read it (``runtime/config.py``; nothing in
    codegen reads the environment), checked when a pool starts like every other compile
    setting. ``None`` (codegen's default): the cores this process may use."""
    global _thread_setting
    _thread_setting = setting


def thread_count():
    """The thread count of a pool started now (``set_thread_count``).

    >>> thread_count() >= 1
    True
    """
    configured = _thread_setting
    if configured is not None:
        try:
            return max(1, int(configured))
        except ValueError:
            raise ValueError(
                f"TRACEJIT_NUM_THREADS must be a positive integer, not {configured!r}"
            ) from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _field(builder, pool, index):
    return builder.gep(pool, [ir.Constant(I64, index)])


def _atomic_load(builder, pointer):
    return builder.load_atomic(pointer, "acquire", 8, typ=I64)


def _pause(builder, module):
    if platform.machine() in ("x86_64", "AMD64"):
        function = module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            module, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
        builder.call(function, [])


def _syscall(module):
    return module.globals.get("syscall") or ir.Function(
        module, ir.FunctionType(I64, [I64], var_arg=True), "syscall")


def _sched_yield(module):
    return module.globals.get("sched_yield") or ir.Function(
        module, ir.FunctionType(I32, []), "sched_yield")


def _run_chunks(module):
    """Claim and run chunks of the current job until none are left (or the job changed)."""
    function = ir.Function(module, ir.FunctionType(VOID, [POOL, I64]), "tj_run_chunks")
    pool, generation = function.args
    entry = function.append_basic_block("entry")
    claim = function.append_basic_block("claim")
    run = function.append_basic_block("run")
    finished = function.append_basic_block("finished")
    builder = ir.IRBuilder(entry)
    builder.branch(claim)

    builder.position_at_end(claim)
    counter = _field(builder, pool, CLAIM)
    current = _atomic_load(builder, counter)
    same_job = builder.icmp_unsigned("==", builder.lshr(current, ir.Constant(I64, 32)),
                                     generation)
    index = builder.and_(current, ir.Constant(I64, 0xFFFFFFFF))
    chunks = _atomic_load(builder, _field(builder, pool, CHUNKS))
    available = builder.and_(same_job, builder.icmp_unsigned("<", index, chunks))
    try_claim = function.append_basic_block("try_claim")
    builder.cbranch(available, try_claim, finished)

    builder.position_at_end(try_claim)
    exchanged = builder.cmpxchg(counter, current, builder.add(current, ir.Constant(I64, 1)),
                                "acq_rel", "acquire")
    builder.cbranch(builder.extract_value(exchanged, 1), run, claim)

    builder.position_at_end(run)
    total = _atomic_load(builder, _field(builder, pool, TOTAL))
    chunk = _atomic_load(builder, _field(builder, pool, CHUNK))
    start = builder.mul(index, chunk)
    end = builder.add(start, chunk)
    end = builder.select(builder.icmp_unsigned(">", end, total), total, end)
    # A pointer typed with its function type: llvmlite reads the callee's signature there.
    body = builder.inttoptr(_atomic_load(builder, _field(builder, pool, BODY)),
                            ir.PointerType(BODY_TYPE))
    context = builder.inttoptr(_atomic_load(builder, _field(builder, pool, CONTEXT)), PTR)
    builder.call(body, [context, start, end])
    done = _field(builder, pool, DONE)
    finished_before = builder.atomic_rmw("add", done, ir.Constant(I64, 1), "seq_cst")
    if _FUTEX_SYSCALL is None:
        builder.branch(claim)
    else:
        # The chunk that finishes the job wakes the owner if it went to sleep (seq_cst on
        # both sides: the owner sets its flag, then reads the count; we add, then read the
        # flag - one of us sees the other).
        last = builder.icmp_unsigned("==", builder.add(finished_before, ir.Constant(I64, 1)),
                                     chunks)
        waiting = builder.load_atomic(_field(builder, pool, OWNER_WAITING), "seq_cst", 8,
                                      typ=I64)
        wake_owner = function.append_basic_block("wake_owner")
        builder.cbranch(builder.and_(last, builder.icmp_unsigned("!=", waiting,
                                                                 ir.Constant(I64, 0))),
                        wake_owner, claim)
        builder.position_at_end(wake_owner)
        builder.call(_syscall(module), [ir.Constant(I64, _FUTEX_SYSCALL), done,
                                        ir.Constant(I64, FUTEX_WAKE_PRIVATE),
                                        ir.Constant(I64, 1)])
        builder.branch(claim)

    builder.position_at_end(finished)
    builder.ret_void()
    return function


def _parallel_for(module, run_chunks):
    function = ir.Function(module, ir.FunctionType(VOID, [POOL, PTR, PTR, I64, I64]),
                           "tj_parallel_for")
    pool, body, context, total, chunk = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    chunks = builder.udiv(builder.add(total, builder.sub(chunk, ir.Constant(I64, 1))), chunk)
    # One job at a time: the pool holds one job's fields, and a second caller (another
    # Python thread: native calls release the GIL) that overwrote them gave both callers
    # wrong results. A caller that finds the pool taken runs its chunks itself, in order.
    taken = builder.cmpxchg(_field(builder, pool, OWNED), ir.Constant(I64, 0),
                            ir.Constant(I64, 1), "acquire", "monotonic")
    alone = function.append_basic_block("alone")
    shared = function.append_basic_block("shared")
    builder.cbranch(builder.extract_value(taken, 1), shared, alone)
    builder.position_at_end(alone)
    typed_body = builder.inttoptr(builder.ptrtoint(body, I64), ir.PointerType(BODY_TYPE))
    _run_inline(builder, typed_body, context, total, chunk)
    builder.ret_void()
    builder.position_at_end(shared)
    for index, value in ((BODY, builder.ptrtoint(body, I64)),
                         (CONTEXT, builder.ptrtoint(context, I64)),
                         (TOTAL, total), (CHUNK, chunk), (CHUNKS, chunks)):
        builder.store_atomic(value, _field(builder, pool, index), "release", 8)
    builder.store_atomic(ir.Constant(I64, 0), _field(builder, pool, DONE), "release", 8)
    generation = builder.add(_atomic_load(builder, _field(builder, pool, GENERATION)),
                             ir.Constant(I64, 1))
    generation = builder.and_(generation, ir.Constant(I64, 0x7FFFFFFF))
    # Publish the claim counter for this generation, then the generation itself.
    builder.store_atomic(builder.shl(generation, ir.Constant(I64, 32)),
                         _field(builder, pool, CLAIM), "release", 8)
    builder.store_atomic(generation, _field(builder, pool, GENERATION), "seq_cst", 8)
    sleepers = builder.load_atomic(_field(builder, pool, SLEEPERS), "seq_cst", 8, typ=I64)
    if _FUTEX_SYSCALL is not None:
        wake = function.append_basic_block("wake")
        work = function.append_basic_block("work")
        builder.cbranch(builder.icmp_unsigned("!=", sleepers, ir.Constant(I64, 0)), wake, work)
        builder.position_at_end(wake)
        builder.call(_syscall(module), [ir.Constant(I64, _FUTEX_SYSCALL),
                                        _field(builder, pool, GENERATION),
                                        ir.Constant(I64, FUTEX_WAKE_PRIVATE),
                                        ir.Constant(I64, 0x7FFFFFFF)])
        builder.branch(work)
        builder.position_at_end(work)
    builder.call(run_chunks, [pool, generation])
    _wait_until_done(builder, module, pool, chunks)
    builder.store_atomic(ir.Constant(I64, 0), _field(builder, pool, OWNED), "release", 8)
    builder.ret_void()
    return function


def _wait_until_done(builder, module, pool, chunks):
    """The owner's wait for chunks other threads still run: spin a little, then sleep on the
    done counter's futex until the worker that finishes the last chunk wakes it. A spin
    alone kept a core busy while the last chunk's thread waited for one (a loaded machine,
    or OpenBLAS's threads spinning)."""
    function = builder.function
    arrived = builder.block
    wait, spin, sleep, woke, done = (function.append_basic_block(label) for label in (
        "wait", "spin", "sleep", "woke", "done"))
    builder.branch(wait)

    builder.position_at_end(wait)
    spins = builder.phi(I64)
    spins.add_incoming(ir.Constant(I64, 0), arrived)
    spins.add_incoming(ir.Constant(I64, 0), woke)
    counter = _field(builder, pool, DONE)
    builder.cbranch(builder.icmp_unsigned("<", _atomic_load(builder, counter), chunks),
                    spin, done)

    builder.position_at_end(spin)
    _pause(builder, module)
    next_spins = builder.add(spins, ir.Constant(I64, 1))
    spins.add_incoming(next_spins, spin)
    builder.cbranch(builder.icmp_unsigned("<", next_spins, ir.Constant(I64, SPINS_BEFORE_SLEEP)),
                    wait, sleep)

    builder.position_at_end(sleep)
    waiting = _field(builder, pool, OWNER_WAITING)
    builder.store_atomic(ir.Constant(I64, 1), waiting, "seq_cst", 8)
    finished = builder.load_atomic(counter, "seq_cst", 8, typ=I64)
    if _FUTEX_SYSCALL is not None:
        # Sleeps only while the count is still ``finished`` (the futex compares its low
        # half: little-endian hosts only, as _FUTEX_SYSCALL is).
        asleep = function.append_basic_block("asleep")
        builder.cbranch(builder.icmp_unsigned("<", finished, chunks), asleep, woke)
        builder.position_at_end(asleep)
        builder.call(_syscall(module), [ir.Constant(I64, _FUTEX_SYSCALL), counter,
                                        ir.Constant(I64, FUTEX_WAIT_PRIVATE),
                                        builder.and_(finished, ir.Constant(I64, 0xFFFFFFFF)),
                                        ir.Constant(I64, 0)])
    else:
        builder.call(_sched_yield(module), [])
    builder.branch(woke)

    builder.position_at_end(woke)
    builder.store_atomic(ir.Constant(I64, 0), waiting, "release", 8)
    builder.branch(wait)
    builder.position_at_end(done)


def _run_inline(builder, body, context, total, chunk):
    """``body(context, start, end)`` for every chunk of ``[0, total)`` on this thread."""

    def run_chunk(start):
        end = builder.add(start, chunk)
        end = builder.select(builder.icmp_unsigned(">", end, total), total, end)
        builder.call(body, [context, start, end])

    counted_loop(builder, ir.Constant(I64, 0), total, run_chunk, step=chunk, label="inline")


def _worker_loop(module, run_chunks):
    """Wait for a new generation (spin, then sleep on the futex), run its chunks, repeat.
    The spin is ``SPINS_BEFORE_SLEEP`` pauses when the last wait was shorter than
    ``LONG_WAIT_CYCLES``, else ``SHORT_SPINS_BEFORE_SLEEP``."""
    function = ir.Function(module, ir.FunctionType(VOID, [POOL]), "tj_worker_loop")
    (pool,) = function.args
    entry = function.append_basic_block("entry")
    builder = ir.IRBuilder(entry)
    seen = builder.alloca(I64)
    spins = builder.alloca(I64)
    limit = builder.alloca(I64)  # this wait's spins before sleeping
    since = builder.alloca(I64)  # the cycle counter when this wait began
    clock = (module.globals.get("llvm.readcyclecounter")
             or ir.Function(module, ir.FunctionType(I64, []), "llvm.readcyclecounter"))
    builder.store(_atomic_load(builder, _field(builder, pool, GENERATION)), seen)
    wait = function.append_basic_block("wait")
    check = function.append_basic_block("check")
    sleep = function.append_basic_block("sleep")
    work = function.append_basic_block("work")
    builder.store(ir.Constant(I64, 0), spins)
    builder.store(ir.Constant(I64, SHORT_SPINS_BEFORE_SLEEP), limit)
    builder.store(builder.call(clock, []), since)
    builder.branch(wait)

    builder.position_at_end(wait)
    generation = _atomic_load(builder, _field(builder, pool, GENERATION))
    changed = builder.icmp_unsigned("!=", generation, builder.load(seen, typ=I64))
    builder.cbranch(changed, work, check)

    builder.position_at_end(check)
    count = builder.add(builder.load(spins, typ=I64), ir.Constant(I64, 1))
    builder.store(count, spins)
    _pause(builder, module)
    parked = builder.icmp_unsigned("==", _atomic_load(builder, _field(builder, pool, PARKED)),
                                   builder.load(seen, typ=I64))
    spin_on = builder.icmp_unsigned("<", count, builder.load(limit, typ=I64))
    builder.cbranch(builder.and_(spin_on, builder.not_(parked)), wait, sleep)

    builder.position_at_end(sleep)
    builder.store(ir.Constant(I64, 0), spins)
    sleepers = _field(builder, pool, SLEEPERS)
    builder.atomic_rmw("add", sleepers, ir.Constant(I64, 1), "seq_cst")
    if _FUTEX_SYSCALL is not None:
        # Sleep only if the generation is still the one we saw (the futex compares it).
        seen_value = builder.trunc(builder.load(seen, typ=I64), I32)
        builder.call(_syscall(module), [ir.Constant(I64, _FUTEX_SYSCALL),
                                        _field(builder, pool, GENERATION),
                                        ir.Constant(I64, FUTEX_WAIT_PRIVATE),
                                        builder.zext(seen_value, I64),
                                        ir.Constant(I64, 0)])
    else:
        builder.call(_sched_yield(module), [])
    builder.atomic_rmw("sub", sleepers, ir.Constant(I64, 1), "seq_cst")
    builder.branch(wait)

    builder.position_at_end(work)
    builder.store(generation, seen)
    builder.store(ir.Constant(I64, 0), spins)
    waited = builder.sub(builder.call(clock, []), builder.load(since, typ=I64))
    short_wait = builder.icmp_signed("<", waited, ir.Constant(I64, LONG_WAIT_CYCLES))
    builder.store(builder.select(short_wait, ir.Constant(I64, SPINS_BEFORE_SLEEP),
                                 ir.Constant(I64, SHORT_SPINS_BEFORE_SLEEP)), limit)
    builder.call(run_chunks, [pool, generation])
    builder.store(builder.call(clock, []), since)
    builder.branch(wait)
    return function


def _park(module):
    """``tj_pool_park(pool)``: workers waiting for the next job sleep now instead of
    spinning. Kernels call it before BLAS, whose own threads need the cores: a worker
    spinning through a gemm cost the MLP train step 1 ms of its 8."""
    function = ir.Function(module, ir.FunctionType(VOID, [POOL]), "tj_pool_park")
    (pool,) = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.store_atomic(_atomic_load(builder, _field(builder, pool, GENERATION)),
                         _field(builder, pool, PARKED), "release", 8)
    builder.ret_void()
    return function


def runtime_ir():
    module = ir.Module(name="tracejit_runtime")
    run_chunks = _run_chunks(module)
    _parallel_for(module, run_chunks)
    _worker_loop(module, run_chunks)
    _park(module)
    return str(module)


_object_store = None


_object_code = None  # ``set_object_store``'s ``code``


def set_object_store(load, save, code=None):
    """Where the pool's compiled runtime may be kept between processes: ``load(key) ->
    bytes | None`` and ``save(key, bytes)`` (the runtime's disk cache installs these).
    ``code() -> str``, when given, names the code that generates the objects: the runtime
    passes tracejit's own-code digest, which covers every generator file and which a warm
    start has taken for its cache key already, so the objects' keys do not read and hash
    their generator files again in every process (0.06-0.17 ms per object)."""
    global _object_store, _object_code
    _object_store = (load, save)
    _object_code = code


def object_store():
    """``(load, save)`` installed by ``set_object_store``, or None: also where
    ``codegen/gemm.py`` keeps its compiled GEMM."""
    return _object_store


def stored_object(name, generators, build):
    """The object code ``build()`` compiles, from the object store when it has it. The key
    is ``name``, the text of ``generators`` (the files whose code generates the IR: building
    the IR only to hash it cost a warm start ~9 ms) and the host; what is built is stored
    under it. For the per-machine objects (``codegen/machine_objects.py``). Without a
    store nothing is keyed; with the store's ``code`` (``set_object_store``) the key holds
    it in place of the generators' text."""
    store, code = _object_store, _object_code
    if store is None:
        return build()
    generator = (b"code " + code().encode() if code is not None else
                 b"".join(Path(path).read_bytes() for path in generators))
    key = hashlib.sha256(name.encode() + b"\0" + generator + repr(
        sorted(llvm.host_description().items())).encode()).hexdigest()[:32]
    cached = store[0](key)
    if cached:
        return cached
    object_code = build()
    store[1](key, object_code)
    return object_code


def runtime_object():
    """Object code of the pool's runtime (keyed by this file's text, or the store's
    ``code``)."""
    return stored_object("thread pool", [__file__],
                         lambda: llvm.compile_module(runtime_ir()).object_code)


RUNTIME_EXPORTS = ("tj_parallel_for", "tj_worker_loop", "tj_pool_park")
_linked_ahead = {}  # "runtime": the runtime's library, linked by ``link_ahead``'s thread


def link_runtime_ahead():
    """Link the pool's runtime for the pool to take when it starts (``ThreadPool``): on
    ``llvm.link_ahead``'s thread (``machine_objects.link_ahead``)."""
    if not _pool_for.cache_info().currsize:
        _linked_ahead["runtime"] = llvm.load(runtime_object(), RUNTIME_EXPORTS)


def _runtime_library():
    """The runtime's library: ``link_ahead``'s, else linked now."""
    llvm.joined_link_ahead()
    return _linked_ahead.pop("runtime", None) or llvm.load(runtime_object(), RUNTIME_EXPORTS)


class ThreadPool:
    """The process's pool: its native state, and ``threads - 1`` worker threads."""

    def __init__(self, threads):
        self.threads = threads
        if threads > 1:
            blas.shorten_openblas_idle_spin()
        self.state = (ctypes.c_int64 * POOL_FIELDS)()
        self.state[THREADS] = threads
        self.state[PARKED] = -1  # no generation parked yet
        self.library = _runtime_library()
        self.address = ctypes.addressof(self.state)
        worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            self.library.addresses["tj_worker_loop"])
        self._worker = worker
        self.workers = [
            threading.Thread(target=worker, args=(self.address,), daemon=True,
                             name=f"tracejit-worker-{index}")
            for index in range(threads - 1)
        ]
        for thread in self.workers:
            thread.start()

    @property
    def parallel_for(self):
        return self.library.addresses["tj_parallel_for"]

    def symbols(self):
        """What compiled kernels import from the pool."""
        return {"tj_pool": self.address, "tj_parallel_for": self.parallel_for,
                "tj_pool_park": self.library.addresses["tj_pool_park"]}


_pool_lock = threading.Lock()


@lru_cache(maxsize=None)
def _pool_for(threads):
    return ThreadPool(threads)


def pool():
    """The process's thread pool (started on first use)."""
    with _pool_lock:
        return _pool_for(thread_count())
