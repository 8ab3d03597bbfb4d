"""tracejit on a real ``distributed.LocalCluster`` (two worker processes): jit functions
run in ``client.submit``, ``dask.delayed`` and ``map_blocks`` tasks with results equal to
eager NumPy; after ``tracejit.dask.ship`` the workers warm-start from the client's entries
(0 compiles there); ragged blocks share one program; a worker whose cache holds a forged
entry, and that is not told to adopt what is shipped, rejects it and compiles.

Each worker gets a cache directory of its own (not the client's), so what a worker runs
from disk came through ``ship``. This module's functions are pickled by value, as a
user's script or notebook is (a Dask worker cannot import the client's ``__main__``).
Skipped when dask[distributed] is not installed (``pip install 'tracejit[dask]'``).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
dask_array = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")

import tracejit.dask as tjd  # noqa: E402
from tracejit import jit  # noqa: E402
from tracejit.runtime.cache import DiskCache  # noqa: E402

TIMEOUT = 120


def mlp_loss(x, labels, w1, w2):
    hidden = np.maximum(x @ w1, 0.0)
    logits = hidden @ w2
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(x.shape[0]), labels].mean()


def gated(x):
    if x.sum() > 0:
        return np.tanh(x) * 3.0
    return x - 1.0


def row_softmax(block):
    shifted = block - block.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=1, keepdims=True)


def scaled_cosine(x):
    return np.cos(x) * 0.5 + x


def _private_cache(base):
    """On a worker: a cache directory of its own."""
    from tracejit.runtime.dask import _use_cache_dir

    return _use_cache_dir(os.path.join(base, f"worker-{os.getpid()}"))


def _plant(key, data):
    """On a worker: put ``data`` at ``key``'s entry path, unsigned by this worker's key (a
    file copied in from elsewhere, or forged)."""
    cache = DiskCache(os.environ["TRACEJIT_CACHE_DIR"])
    cache.trusted(create=True).write(cache.entry_path(key), data)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    base = tmp_path_factory.mktemp("dask-caches")
    before = os.environ.get("TRACEJIT_CACHE_DIR")
    os.environ["TRACEJIT_CACHE_DIR"] = str(base / "client")  # read by jit() in the tests
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    connection = distributed.Client(cluster)
    try:
        connection.run(_private_cache, str(base))
        yield connection
    finally:
        connection.close()
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        if before is None:
            os.environ.pop("TRACEJIT_CACHE_DIR", None)
        else:
            os.environ["TRACEJIT_CACHE_DIR"] = before


def workers(client):
    return sorted(client.scheduler_info()["workers"])


def mlp_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 10))
    labels = rng.integers(0, 4, 32)
    return x, labels, rng.standard_normal((10, 16)) * 0.3, rng.standard_normal((16, 4)) * 0.3


def test_workers_warm_start_from_shipped_entries(client):
    step = jit(mlp_loss)
    arguments = mlp_inputs()
    expected = mlp_loss(*arguments)
    step(*arguments)  # the client compiles
    assert step.stats()["compiles"] == 1

    outcome = tjd.ship(client, step)
    assert sorted(outcome) == workers(client)
    for shipped in outcome.values():
        assert shipped == {"entries": 1, "present": 0, "verified": 0, "adopted": 1,
                           "rejected": 0}
    futures = [client.submit(step, *arguments, workers=[address], pure=False)
               for address in workers(client) for _ in range(2)]
    results = client.gather(futures)
    results.append(dask.delayed(step)(*arguments).compute(scheduler=client.get))
    for result in results:
        np.testing.assert_allclose(result, expected, rtol=1e-12)

    stats = tjd.worker_stats(client, step)
    for address in workers(client):
        assert stats[address]["compiles"] == 0, stats[address]
        assert stats[address]["disk_hits"] == 1, stats[address]
        assert stats[address]["compiled_calls"] == stats[address]["calls"] >= 2
        assert stats[address]["eager_calls"] == {}


def test_a_function_not_shipped_compiles_on_each_worker(client):
    """The contrast: the counters above would show compiles had the entries not come."""
    cosine = jit(scaled_cosine)
    x = np.linspace(-3.0, 3.0, 50)
    cosine(x)
    futures = [client.submit(cosine, x, workers=[address], pure=False)
               for address in workers(client)]
    for result in client.gather(futures):
        np.testing.assert_allclose(result, scaled_cosine(x), rtol=1e-12, atol=1e-15)
    stats = tjd.worker_stats(client, cosine)
    assert [stats[address]["compiles"] for address in workers(client)] == [1, 1]


def test_ragged_blocks_share_one_program(client):
    blockwise = jit(dynamic=True)(row_softmax)
    data = np.random.default_rng(1).standard_normal((80, 8))
    blocks = dask_array.from_array(data, chunks=((30, 30, 20), 8))  # 30 and 20: one bucket
    blockwise(data[:30])
    tjd.ship(client, blockwise)
    result = tjd.map_blocks(blockwise, blocks).compute(scheduler=client.get)
    np.testing.assert_allclose(result, row_softmax(data), rtol=1e-12, atol=1e-15)
    assert blockwise.stats()["calls"] == 1  # dask's probes for the output type ran eagerly
    stats = tjd.worker_stats(client, blockwise)
    assert sum(worker["calls"] for worker in stats.values()) == 3
    assert sum(worker["compiles"] for worker in stats.values()) == 0
    assert all(worker["variants"] <= 1 for worker in stats.values())


def test_a_worker_with_a_forged_entry_rejects_it_and_compiles(client):
    guarded = jit(gated)
    x = np.linspace(0.5, 2.0, 24).reshape(4, 6)
    guarded(x)
    [(key, data)] = guarded._cache.export_entries([guarded._variants[0].key])
    client.run(_plant, key, data)  # a copy of the entry that the workers' keys did not sign
    outcome = tjd.ship(client, guarded, adopt=False)
    assert all(shipped["rejected"] == 1 for shipped in outcome.values()), outcome
    futures = [client.submit(guarded, sign * x, workers=[address], pure=False)
               for address in workers(client) for sign in (1.0, -1.0)]
    for result, sign in zip(client.gather(futures), (1.0, -1.0) * 2):
        np.testing.assert_allclose(result, gated(sign * x), rtol=1e-12)
    stats = tjd.worker_stats(client, guarded)
    for address in workers(client):
        assert stats[address]["disk_hits"] == 0, stats[address]
        assert stats[address]["compiles"] >= 1, stats[address]  # rebuilt, not loaded


def test_a_shared_cache_directory_serves_every_worker(client):
    """Last in this module: it points the workers at the client's directory."""
    shared = jit(scaled_cosine, dynamic=True)
    x = np.linspace(-1.0, 1.0, 40)
    directory = shared.options.cache_dir
    tjd.share_cache(client, directory)
    shared(x)  # written where the workers now look
    futures = [client.submit(shared, x[:35], workers=[address], pure=False)
               for address in workers(client)]  # 35 and 40 share a bucket
    for result in client.gather(futures):
        np.testing.assert_allclose(result, scaled_cosine(x[:35]), rtol=1e-12, atol=1e-15)
    stats = tjd.worker_stats(client, shared)
    assert [stats[address]["compiles"] for address in workers(client)] == [0, 0]
    assert [stats[address]["disk_hits"] for address in workers(client)] == [1, 1]
