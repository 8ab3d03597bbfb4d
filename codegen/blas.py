"""Which GEMM a compiled matmul calls: NumPy's bundled OpenBLAS, or tracejit's own float32
GEMM (``codegen/gemm.py``, AVX-512 hosts), chosen here.

Compiled kernels import ``tj_sgemm`` / ``tj_dgemm`` (CBLAS ``gemm`` with 64-bit integers)
and ``tj_sgemm_own`` / ``tj_sgemm_own_epilogue`` by symbol, so object code stays
relocatable and the disk cache can keep it; the OpenBLAS addresses come from NumPy's
``libscipy_openblas64_``. Where no GEMM can run a product, matmul kernels fall back to
tracejit's own loops.

The setting (``set_gemm_setting``: the runtime passes ``TRACEJIT_GEMM``; fixed at its
first use in a process) picks the float32 GEMM of 2-D products:

* ``auto`` (the default, also when codegen is used alone): the own GEMM where it measured
  at least as fast as OpenBLAS (``own_sgemm_condition``; ``benchmarks/gemm.py``), OpenBLAS
  for the rest;
* ``own``: the own GEMM for every float32 2-D product (when the host has AVX-512F);
* ``blas``: OpenBLAS only.

Batched products (float32 and float64; ``codegen/matmul.py``'s ``own_batched``) call the
own GEMM's batched entry under ``auto`` and ``own``, which splits the entries over
tracejit's pool (a loop of OpenBLAS calls joins OpenBLAS's threads once per entry: 64
times per attention matmul of a transformer block); under ``blas`` they loop over OpenBLAS.

The choice is part of ``available()``, which the disk cache's host description includes.

>>> bool(available()) in (True, False)
True
>>> gemm_setting() in GEMM_SETTINGS
True
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
import weakref
from contextlib import contextmanager
from functools import lru_cache

import numpy as np
from llvmlite import ir

ROW_MAJOR, NO_TRANSPOSE, TRANSPOSE = 101, 111, 112
GEMM_SETTINGS = ("auto", "own", "blas")
# Bumped when the auto rule changes: compiled programs hold the rule, so the cache key must.
AUTO_RULE_VERSION = 2

I64 = ir.IntType(64)


@lru_cache(maxsize=None)
def _library():
    folder = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "libscipy_openblas64_*"))):
        try:
            library = ctypes.CDLL(path)
            return library, library.scipy_cblas_sgemm64_, library.scipy_cblas_dgemm64_
        except (OSError, AttributeError):
            continue
    return None


def openblas():
    """True when NumPy's bundled OpenBLAS was found."""
    return _library() is not None


# OpenBLAS's idle threads wait for the next call spinning (x86: nops, no yield) for 2**28 TSC
# cycles, ~0.1 s, before they sleep. A compiled kernel that follows a NumPy matmul shared the
# cores with that spinning thread: the interleave benchmark's pair ran 1.7-1.8x its parts.
# 2**18 cycles (~0.1 ms) still covers the short gaps between NumPy calls in an eager step and
# lets the worker sleep before a compiled program's next parallel kernel: the batch-64 MLP
# step's relu-masked product is NumPy's OpenBLAS call (codegen/numpy_products.py), and at
# 2**20 (~0.4 ms) its worker still spun when the own GEMM of dW1 started, which then ran on
# one core (0.53 ms against 0.28). The benchmark's worker under SCHED_FIFO (shielded from
# the shared machine's load), spin 2**20 / 2**18: the compiled step 1.26-1.29 / 0.98-1.03 ms
# median, NumPy's eager step 2.08-2.15 / 2.15-2.16 ms (2**16 and 2**14: the compiled step
# the same, the eager one 5% slower); the interleave pair 1.08-1.13x / 1.05x its parts.
OPENBLAS_IDLE_SPIN_LOG2 = 18
# tracejit's threads that never call OpenBLAS: their Thread objects, not their idents. An
# ident is reused by a later thread (in a forked child, the first thread started gets the
# parent's helper's ident), which would then be taken for tracejit's.
_threads_without_blas = weakref.WeakSet()


def runs_no_blas(thread=None):
    """Mark ``thread`` (default: the calling thread) as one that never calls OpenBLAS
    (tracejit's LLVM helper), so it does not stop ``shorten_openblas_idle_spin``: the helper
    exists before a script's first threaded compiled call, and counting it kept OpenBLAS's
    long spin in every process (the MLP step ran 13.1 ms with the short spin, 15.7 without)."""
    _threads_without_blas.add(thread or threading.current_thread())


def _only_python_thread():
    """True when every other live Python thread is one of tracejit's that never calls
    OpenBLAS."""
    me = threading.current_thread()
    return all(thread is me or thread in _threads_without_blas
               for thread in threading.enumerate())


@lru_cache(maxsize=None)
def shorten_openblas_idle_spin():
    """Let NumPy's OpenBLAS threads sleep ~0.1 ms after each threaded call instead of ~0.1 s,
    so the cores go to tracejit's pool (``codegen/parallel.py`` calls this when it starts
    worker threads; once per process). True when the timeout was changed; False when there
    is nothing to change: no bundled OpenBLAS, a single-threaded or OpenMP one, or a timeout
    the user set (``OPENBLAS_THREAD_TIMEOUT``, which OpenBLAS read when it loaded); or when
    it is not safe to: another Python thread runs (see below).

    OpenBLAS takes the timeout from its environment when it starts its threads, so the
    variable is set for one ``openblas_read_env`` and removed, and the threads are stopped
    with ``blas_thread_shutdown_`` (what OpenBLAS itself runs before every ``fork``); its
    next threaded call starts them again with the short timeout. Stopping them under a
    threaded call that another thread is making frees its buffers and can leave it waiting
    forever (as a ``fork`` at that moment would), so this runs only while the calling
    thread is the process's only Python thread besides tracejit's threads that never call
    OpenBLAS (``runs_no_blas``): a script's first compiled call; not a compile in the
    background while NumPy runs eagerly. Elsewhere the spin stays as it was.
    """
    found = _library()
    if found is None or not _only_python_thread():
        return False
    library = found[0]
    try:
        timeout = library.openblas_thread_timeout
        read_env, shutdown = library.openblas_read_env, library.blas_thread_shutdown_
        parallel = library.scipy_openblas_get_parallel64_
        threads = library.scipy_openblas_get_num_threads64_
    except AttributeError:
        return False
    timeout.restype = ctypes.c_uint
    pthreads = 1  # openblas_get_parallel: 0 sequential, 1 its own pthreads server, 2 OpenMP
    if parallel() != pthreads or threads() <= 1 or timeout() != 0:
        return False
    # The C environment, as OpenBLAS reads it (codegen takes no setting from os.environ);
    # a value set after OpenBLAS loaded (it never read it) is put back as it was.
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    name = b"OPENBLAS_THREAD_TIMEOUT"
    previous = libc.getenv(name)
    libc.setenv(name, str(OPENBLAS_IDLE_SPIN_LOG2).encode(), 1)
    try:
        read_env()
    finally:
        if previous is None:
            libc.unsetenv(name)
        else:
            libc.setenv(name, previous, 1)
    shutdown()
    return True


def openblas_thread_timeout():
    """OpenBLAS's idle spin as ``OPENBLAS_THREAD_TIMEOUT`` counts it (log2 of TSC cycles;
    0: its default, 28), for reports; None without a bundled pthreads OpenBLAS.

    >>> openblas_thread_timeout() is None or openblas_thread_timeout() >= 0
    True
    """
    found = _library()
    timeout = getattr(found[0], "openblas_thread_timeout", None) if found else None
    if timeout is None:
        return None
    timeout.restype = ctypes.c_uint
    return timeout()


# --- the float32 choice -----------------------------------------------------------------------
_overrides = []
_configured = None  # set_gemm_setting's; None: "auto"


def set_gemm_setting(setting):
    """The process's float32 GEMM setting: ``auto`` (also ``None``), ``own`` or ``blas``,
    as the runtime reads it from ``TRACEJIT_GEMM`` (``runtime/config.py``; nothing in
    codegen reads the environment). Checked and fixed at its first use: compiled code and
    the host description in cache keys hold it, so a later call changes nothing."""
    global _configured
    _configured = setting


@lru_cache(maxsize=None)
def _process_setting():
    setting = _configured or "auto"
    if setting not in GEMM_SETTINGS:
        raise ValueError(f"TRACEJIT_GEMM must be one of {', '.join(GEMM_SETTINGS)}, "
                         f"not {setting!r}")
    return setting


def gemm_setting():
    """``auto``, ``own`` or ``blas``: the process's (``set_gemm_setting``), or the
    innermost ``gemm_override``."""
    return _overrides[-1] if _overrides else _process_setting()


@contextmanager
def gemm_override(setting):
    """Compile with another float32 GEMM setting (tests and benchmarks compare the two in
    one process). The disk cache's key does not see it: use ``jit(cache="memory")``.

    >>> with gemm_override("blas"):
    ...     own_sgemm_enabled()
    False
    """
    if setting not in GEMM_SETTINGS:
        raise ValueError(f"gemm setting must be one of {GEMM_SETTINGS}, not {setting!r}")
    _overrides.append(setting)
    try:
        yield
    finally:
        _overrides.pop()


def own_sgemm_enabled():
    """True when float32 2-D products may call ``tj_sgemm_own`` (the setting allows it and
    the host has AVX-512F)."""
    if gemm_setting() == "blas":
        return False
    from . import gemm

    return gemm.supported()


# Below this many multiply-adds a product with a transposed B stays on OpenBLAS: the own
# GEMM transposes B while packing it, which dominates tiny products (RNN backward
# dh @ Wh.T, 16 x 64 @ 64 x 64: 4.5 us vs OpenBLAS's 2.7 us on one thread; parity from
# 32 x 64 @ 64 x 64 on).
SMALL_TRANSPOSED_B_WORK = 1 << 17
# On one thread, products with every dimension at least this big (m may be smaller: 64)
# stay on OpenBLAS: there the own GEMM measured 0.89-0.97x OpenBLAS's Haswell kernel and
# 0.97-1.08x its SkylakeX kernel (x @ W1, 512 x 784 @ 784 x 1024 and 64 x 784 @ ...).
ONE_THREAD_BIG_DIM = 128


def own_sgemm_always():
    """True when every float32 2-D product that may call the own GEMM does (no OpenBLAS
    branch at run time): the ``own`` setting, or no OpenBLAS to fall back to."""
    return gemm_setting() == "own" or not openblas()


def own_sgemm_condition(builder, m, n, k, trans_b, threads):
    """When a float32 2-D product calls the own GEMM rather than OpenBLAS: ``True`` (always),
    or an ``i1`` computed at run time from ``m, n, k`` and the pool's ``threads`` (i64
    values; dims may be symbolic, and LLVM folds static ones).

    The auto rule, from ``benchmarks/gemm.py`` on the shared 2-core machine (1 thread: CPU
    time; 2 threads: wall time; both OpenBLAS kernels), OpenBLAS time / own time:
    * two threads (the default here): own everywhere but small products with a transposed
      B. The MLP step's products ran 1.1-30x faster (OpenBLAS's threads suffer most from
      the machine's other load), the whole jit'd step 2.8-3.4x; the RNN step at 0.92-1.35x;
    * one thread: also OpenBLAS for big products (see ``ONE_THREAD_BIG_DIM``); own for
      those with a small dimension (k = 10 or 64, n = 10: 1.1-3.1x) and the RNN step's."""
    if own_sgemm_always():
        return True

    def constant(value):
        return ir.Constant(I64, value)

    big = builder.and_(builder.and_(
        builder.icmp_signed(">=", m, constant(64)),
        builder.icmp_signed(">=", n, constant(ONE_THREAD_BIG_DIM))),
        builder.icmp_signed(">=", k, constant(ONE_THREAD_BIG_DIM)))
    theirs = builder.and_(big, builder.icmp_signed("<=", threads, constant(1)))
    if trans_b:
        work = builder.mul(builder.mul(m, n), k)
        small = builder.icmp_signed("<", work, constant(SMALL_TRANSPOSED_B_WORK))
        theirs = builder.or_(theirs, small)
    return builder.not_(theirs)


def available():
    """The GEMMs compiled code may call (a name for cache keys), or None (logged once:
    matmul then runs on tracejit's own loops)."""
    names = []
    if openblas():
        # compiled code calls NumPy's routines for the products a decision reads
        # (codegen/numpy_products.py): programs compiled before (the own GEMM) differ
        names.append(f"numpy-openblas64:calls{NUMPY_CALLS_VERSION}")
    else:
        _say_missing()
    if own_sgemm_enabled():
        rule = f"auto{AUTO_RULE_VERSION}" if gemm_setting() == "auto" else gemm_setting()
        names.append(f"tj_sgemm_own:{rule}")
    return "+".join(names) or None


@lru_cache(maxsize=None)
def _say_missing():
    import logging

    logging.getLogger("tracejit.kernels").warning(
        "NumPy's bundled OpenBLAS (numpy.libs/libscipy_openblas64_*) was not found: "
        "float64 (and, without AVX-512, float32) matmul runs on tracejit's own loops "
        "(correct, slower); `tracejit env` shows it")


# What float32 and float64 products a decision reads call besides gemm, as NumPy's matmul
# does; the version is in ``available()``, so cached programs from another rule are not
# reused (2: float64 products too).
NUMPY_CALLS_VERSION = 2
NUMPY_CALLS = {"tj_sgemv": "scipy_cblas_sgemv64_", "tj_sdot": "scipy_cblas_sdot64_",
               "tj_ssyrk": "scipy_cblas_ssyrk64_", "tj_dgemv": "scipy_cblas_dgemv64_",
               "tj_ddot": "scipy_cblas_ddot64_", "tj_dsyrk": "scipy_cblas_dsyrk64_"}


def symbols(object_code=b""):
    """``{name: address}`` of the gemm functions compiled code imports. The own GEMM is
    loaded (compiled once per machine, or read from the disk cache) only for object code
    that calls it."""
    from . import gemm

    found = _library()
    imports = {}
    if found is not None:
        library, sgemm, dgemm = found
        imports = {"tj_sgemm": ctypes.cast(sgemm, ctypes.c_void_p).value,
                   "tj_dgemm": ctypes.cast(dgemm, ctypes.c_void_p).value}
        # The other calls NumPy's matmul makes (codegen/numpy_products.py)
        for name, symbol in NUMPY_CALLS.items():
            imports[name] = ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
    # (tj_sgemm_own is a prefix of the other float32 entries' names)
    if gemm.ENTRY.encode() in object_code:
        imports.update(gemm.symbols("float32"))
    if gemm.BATCHED_ENTRIES["float64"].encode() in object_code:
        imports.update(gemm.symbols("float64"))
    return imports
