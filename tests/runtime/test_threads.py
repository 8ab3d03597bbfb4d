"""A jit function called from several threads at once: concurrent first calls compile
once, concurrent calls inside one bucket share that compile, every result equals NumPy's,
and the counters add up. Threads start together at a barrier so the first calls really
overlap (native calls release the GIL, so the threads also run compiled code together).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tracejit import jit

THREADS = 8
CALLS = 50


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """An empty disk cache per test, so every compile count starts from nothing."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))


def run_threads(work):
    """Run ``work(thread_index, barrier)`` in ``THREADS`` threads; their results in order
    (an exception in any thread is raised here)."""
    barrier = threading.Barrier(THREADS)
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(work, index, barrier) for index in range(THREADS)]
        return [future.result(timeout=120) for future in futures]


def _layer(x, w):
    return np.tanh(x * w) + x.sum() * 0.5


def _branchy(x):
    if x.sum() > 0:
        return x * 2 + 1
    return x - 1


def test_calls_from_many_threads_in_one_bucket_compile_once_and_are_right():
    jitted = jit(dynamic=True)(_layer)

    def work(index, barrier):
        rng = np.random.default_rng(index)
        barrier.wait()
        wrong = []
        for call in range(CALLS):
            size = int(rng.integers(65, 129))  # one pow2 bucket: (64, 128]
            x, w = rng.standard_normal(size), rng.standard_normal(size)
            result = jitted(x, w)
            if not np.allclose(result, _layer(x, w), rtol=1e-12, atol=1e-12):
                wrong.append((call, size))
        return wrong

    assert run_threads(work) == [[]] * THREADS
    stats = jitted.stats()
    assert stats["compiles"] == 1 and stats["variants"] == 1
    assert stats["calls"] == THREADS * CALLS
    assert stats["compiled_calls"] + stats["traced_calls"] == THREADS * CALLS
    assert stats["eager_calls"] == {}


def test_concurrent_first_calls_compile_once():
    jitted = jit(_layer)  # dynamic="auto": every thread brings the same exact shape
    x, w = np.linspace(-1, 1, 32, dtype=np.float32), np.full(32, 0.5, np.float32)
    expected = _layer(x, w)

    def work(index, barrier):
        barrier.wait()
        return [jitted(x, w) for _ in range(5)]

    for results in run_threads(work):
        for result in results:
            assert result.dtype == expected.dtype
            np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    stats = jitted.stats()
    assert stats["compiles"] == 1 and stats["traced_calls"] == 1
    assert stats["compiled_calls"] == THREADS * 5 - 1


def test_threads_spanning_several_buckets_compile_once_per_bucket():
    jitted = jit(dynamic=True)(_layer)
    buckets = [(5, 8), (9, 16), (17, 32), (33, 64)]

    def work(index, barrier):
        rng = np.random.default_rng(100 + index)
        barrier.wait()
        for call in range(CALLS):
            low, high = buckets[(index + call) % len(buckets)]
            size = int(rng.integers(low, high + 1))
            x, w = rng.standard_normal(size), rng.standard_normal(size)
            np.testing.assert_allclose(jitted(x, w), _layer(x, w), rtol=1e-12, atol=1e-12)

    run_threads(work)
    stats = jitted.stats()
    assert stats["compiles"] == len(buckets) and stats["variants"] == len(buckets)


def test_threads_taking_both_branches_grow_the_trace_tree_once():
    jitted = jit(_branchy)

    def work(index, barrier):
        barrier.wait()
        for call in range(CALLS):
            sign = 1.0 if (index + call) % 2 else -1.0
            x = sign * np.arange(1.0, 9.0) * (call + 1)
            np.testing.assert_array_equal(jitted(x), _branchy(x))

    run_threads(work)
    stats = jitted.stats()
    assert stats["paths"] == 2 and stats["compiles"] == 2
    assert stats["calls"] == THREADS * CALLS
    # Only the first exit, and exits taken while the other path was being compiled, ran
    # eagerly (at most one per thread); every later call ran compiled.
    eager = sum(stats["eager_calls"].values())
    assert set(stats["eager_calls"]) <= {"side exit"} and eager <= THREADS + 1
    assert stats["compiled_calls"] + stats["traced_calls"] + eager == THREADS * CALLS


def test_pool_workers_park_before_blas_and_wake_for_the_next_split_kernel():
    """A matmul kernel tells the pool's idle workers to sleep before OpenBLAS runs (they
    would spin on the cores its threads need); the next job wakes them and is right."""
    from tracejit.codegen import blas
    from tracejit.codegen.parallel import GENERATION, PARKED, pool

    if not blas.available():
        pytest.skip("no BLAS: matmul kernels are tracejit's own loops")
    state = pool().state
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(256, 300)), rng.normal(size=(300, 200))
    big = rng.normal(size=(512, 512))
    matmul = jit(lambda x, w: np.maximum(x @ w + 1.0, 0.0), cache="memory")
    scale = jit(lambda a: np.tanh(a) * 3.0, cache="memory")
    for call in range(3):  # the first call of each comes from its trace
        np.testing.assert_allclose(matmul(x, w), np.maximum(x @ w + 1.0, 0.0), rtol=1e-12)
        if call:  # (after a trace the flags are whatever an earlier test left)
            assert state[PARKED] in (state[GENERATION], state[GENERATION] - 1)
        np.testing.assert_allclose(scale(big), np.tanh(big) * 3.0, rtol=1e-14)
    assert matmul.stats()["compiled_calls"] == scale.stats()["compiled_calls"] == 2
