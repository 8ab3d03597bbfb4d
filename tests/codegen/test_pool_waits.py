"""How the native pool waits: idle workers spin briefly, then sleep on a futex; a caller
whose last chunks run on other threads spins briefly, then sleeps until the worker that
finishes the job wakes it (``codegen/parallel.py``). Each check runs real jobs through
``tj_parallel_for`` and compares what ran with what was asked, so a lost wake shows as a
hang (the thread's join times out) and a lost or doubled chunk as a wrong count.
"""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen.parallel import OWNED, OWNER_WAITING, SLEEPERS, pool

BODY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_int64, ctypes.c_int64)


@pytest.fixture(scope="module")
def the_pool():
    the_pool = pool()
    if the_pool.threads < 2:
        pytest.skip("one thread: no workers to wait for")
    return the_pool


def run_job(the_pool, total, chunk, seconds_per_chunk):
    """``tj_parallel_for`` over ``[0, total)`` with a body that sleeps (releasing the GIL,
    so the owner waits for other threads' chunks); returns each index's run count and the
    threads that ran chunks."""
    counts = np.zeros(total, dtype=np.int64)
    threads = set()

    def body(_context, start, end):
        threads.add(threading.get_ident())
        time.sleep(seconds_per_chunk)
        counts[start:end] += 1

    callback = BODY(body)
    parallel_for = PARALLEL_FOR(the_pool.parallel_for)
    caller = threading.Thread(target=parallel_for,
                              args=(the_pool.address, ctypes.cast(callback, ctypes.c_void_p),
                                    None, total, chunk))
    caller.start()
    caller.join(timeout=60)
    assert not caller.is_alive(), "tj_parallel_for did not return: a lost wake"
    return counts, threads


def test_owner_sleeps_for_slow_chunks_and_is_woken(the_pool):
    # Chunks of 20 ms: far past the owner's spin, so it sleeps for the others' last chunk.
    for _ in range(5):
        counts, threads = run_job(the_pool, total=4 * the_pool.threads, chunk=1,
                                  seconds_per_chunk=0.02)
        assert counts.tolist() == [1] * (4 * the_pool.threads)
        assert the_pool.state[OWNER_WAITING] == 0 and the_pool.state[OWNED] == 0
    assert len(threads) >= 2  # (the last job's) chunks ran on the owner and a worker


def test_quick_jobs_after_idle_workers_slept(the_pool):
    """Jobs right after each other (workers spinning) and after a pause (workers asleep on
    the futex), uneven chunk counts: every index exactly once."""
    for pause in (0.0, 0.0, 0.05, 0.0, 0.05):
        time.sleep(pause)
        if pause:
            assert the_pool.state[SLEEPERS] == the_pool.threads - 1
        counts, _ = run_job(the_pool, total=37, chunk=5, seconds_per_chunk=0.001)
        assert counts.tolist() == [1] * 37


def _layer(x, w):
    return np.maximum(x @ w + 1.0, 0.0)


def test_compiled_layer_alternating_with_numpy_matmuls_is_right():
    """The interleave benchmark's pattern from two Python threads: compiled kernels (the
    pool, its owner's waits) between NumPy's threaded matmuls (OpenBLAS's threads)."""
    compiled = jit(cache="memory")(_layer)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((256, 512), dtype=np.float32)
    w = rng.standard_normal((512, 384), dtype=np.float32) * np.float32(512 ** -0.5)
    v = rng.standard_normal((384, 128), dtype=np.float32)
    expected = _layer(x.astype(np.float64), w.astype(np.float64))
    compiled(x, w)
    failures = []

    def alternate():
        for _ in range(15):
            h = compiled(x, w)
            if not np.allclose(h, expected, rtol=1e-4, atol=1e-4):
                failures.append("layer")
            if not np.allclose(h @ v, expected @ v, rtol=1e-3, atol=1e-2):
                failures.append("numpy")

    workers = [threading.Thread(target=alternate) for _ in range(2)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in workers)
    assert failures == []
    assert not compiled.stats()["eager_calls"]
    assert compiled.stats()["compiled_calls"] == 30  # the first call came from its trace


def test_jobs_after_waits_that_slept_and_waits_that_spun(the_pool):
    """An idle worker spins long after a job it caught spinning and only briefly after one
    that had to wake it: jobs after every mix of the two (back to back, after pauses long
    and short) run every index once, and whoever sleeps is woken."""
    for pause in (0.05, 0.0, 0.0, 0.001, 0.0, 0.05, 0.0002, 0.05, 0.0, 0.003):
        time.sleep(pause)
        counts, _ = run_job(the_pool, total=29, chunk=3, seconds_per_chunk=0.0005)
        assert counts.tolist() == [1] * 29
