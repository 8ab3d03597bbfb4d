"""tracejit on a Dask cluster: compiled code shipped to the workers, not recompiled there.

``pip install 'tracejit[dask]'`` (dask[array], distributed, cloudpickle). A jit function
pickles (``tracejit.runtime.pickling``), so it goes into ``client.submit``,
``dask.delayed`` and ``dask.array.map_blocks`` tasks as it is. Each worker process then
has its own ``JitFunction``, and without help every worker would trace and compile every
variant itself. Two ways to share the client's compiled code instead:

* ``ship(client, step)`` sends the client's signed cache entries of ``step`` (and what its
  shape policy learned: which dims turned out dynamic) to every worker, which installs
  them in its own disk cache; each worker's first call is then a warm start (object code
  linked from disk: no tracing, no LLVM).
* ``share_cache(client, directory)`` points the workers at one cache directory (a
  LocalCluster on one machine, or a file system every node mounts); entries any process
  writes are then found by all of them.

``worker_stats(client, step)`` tells, per worker, how many variants were compiled there and
how many came from disk (``disk_hits``), and what ``ship`` installed::

    import tracejit as tj
    import tracejit.dask as tjd
    from distributed import Client

    client = Client(n_workers=2)
    step = tj.jit(tj.value_and_grad(loss))
    step(*partitions[0])                  # compiled here, written to the disk cache
    tjd.ship(client, step)                # every worker installs the signed entries
    futures = [client.submit(step, *part) for part in partitions]
    tjd.worker_stats(client, step)        # per worker: compiles 0, disk_hits 1

Trust. An entry is object code, so where a worker takes it from is a trust boundary
(``tracejit.runtime.cache_trust`` says what a cache trusts). On one machine a worker with
the client's cache root (or a copy of its ``signing.key``) verifies the client's HMAC
signatures itself. Across machines the worker's cache has a key of its own, so it cannot:
it *adopts* what ``ship`` sends, that is, it checks that each entry parses and is filed
under the key its header names, and signs it with its own key. That trusts the Dask
connection: whoever can send this worker a ``ship`` can already run any Python code on it
(that is what submitting a task is), so adopting adds no power an attacker would not
have; secure the scheduler (TLS, ``distributed.security``) as for any Dask cluster.
``ship(..., adopt=False)`` installs only entries that verify under the worker's own key.
Entries that reach a worker's cache any other way (files copied in, written by another
user) are still rejected by its key and rebuilt, and an adopted entry still loads only
for the exact key a call computes there (the defining file's content, the CPU and its
features, the versions, the options and the call's signature), so code built for another
CPU or another version of the model is never run; its helpers are re-checked at load.

Ragged blocks: a function run over blocks of several sizes should bucket the blocked dim
from the first call (``jit(dynamic=True)``, or ``buckets={"x": {0: "pow2"}}``): blocks whose
sizes share a bucket then share one program, and every process computes the same key for
a block whatever order it meets the blocks in. ``map_blocks`` is
``dask.array.map_blocks`` that infers the output's type with the plain function, so the
client does not compile for dask's probe calls on empty blocks.
"""

from __future__ import annotations

import functools
import os
from collections import Counter

from . import diagnostics
from .jit import BoundJitFunction, JitFunction, open_disk_cache

_MAP_BLOCKS_OPTIONS = {"name", "token", "chunks", "drop_axis", "new_axis", "enforce_ndim",
                       "align_arrays"}
_installed = Counter()  # this process, as a worker: what ship() installed, by outcome


def ship(client, *functions, adopt=True):
    """Send the client's compiled entries of ``functions`` (jit functions this process
    has called, so that they compiled or loaded variants) to every worker of ``client``.
    Returns ``{worker address: {"present": n, "verified": n, "adopted": n, "rejected": n,
    "entries": n}}``; entries of variants that live in memory only (the cache is off,
    or the function has no source file) cannot be shipped and are not counted.

    ``adopt``: a worker whose cache key differs re-signs the entries it receives (see the
    module docstring); ``False`` installs only entries that verify under the worker's key.
    """
    payload = [(jitted, _entries(jitted), _policy_state(jitted))
               for jitted in map(_jit_function, functions)]
    return client.run(_install, payload, adopt)


def share_cache(client, directory):
    """Point every worker (and this client) at the cache ``directory``: jit functions
    unpickled there from now on, and those already there, read and write it. It must
    pass the cache's checks on every worker (owned by the user, writable by nobody else);
    its ``signing.key`` signs for all of them, so whoever can read that file can sign
    code the workers will run: keep it on storage only the user can read."""
    directory = os.path.abspath(os.path.expanduser(directory))
    _use_cache_dir(directory)
    return client.run(_use_cache_dir, directory)


def worker_stats(client, *functions):
    """Per worker: the summed ``stats()`` counters of ``functions`` there (``calls``,
    ``compiled_calls``, ``traced_calls``, ``compiles``, ``disk_hits``, ``variants``,
    ``eager_calls``) and ``installed``, what ``ship`` installed on that worker."""
    return client.run(_report, [_jit_function(function) for function in functions])


def map_blocks(function, *args, dtype=None, meta=None, **kwargs):
    """``dask.array.map_blocks(function, *args, ...)``, with the output's meta computed by
    the plain (not compiled) function when neither ``dtype`` nor ``meta`` is given: dask
    otherwise calls ``function`` on empty and one-element blocks to find them, and each
    such call would trace and compile on the client."""
    import dask.array
    from dask.array.core import apply_infer_dtype
    from dask.array.utils import compute_meta

    if dtype is None and meta is None:
        plain = _plain_function(function)
        passed = {name: value for name, value in kwargs.items()
                  if name not in _MAP_BLOCKS_OPTIONS}  # what reaches the function
        meta = compute_meta(plain, None, *args, **passed)
        if meta is None:
            dtype = apply_infer_dtype(plain, args, passed, "map_blocks")
        else:
            dtype = meta.dtype
    return dask.array.map_blocks(function, *args, dtype=dtype, meta=meta, **kwargs)


# --- the client's side ------------------------------------------------------------------
def _jit_function(function):
    if isinstance(function, BoundJitFunction):
        return function.function
    if not isinstance(function, JitFunction):
        raise TypeError(f"{function!r} is not a tracejit.jit function")
    return function


def _plain_function(function):
    if isinstance(function, BoundJitFunction):
        return functools.partial(function.function.fn, function.instance)
    return getattr(function, "fn", function)


def _entries(jitted):
    keys = [variant.key for variant in jitted._variants if variant.key]
    if jitted._cache is None or not keys:
        return []
    return jitted._cache.export_entries(keys)


def _policy_state(jitted):
    policy = jitted.policy
    return {"first_sizes": dict(policy.first_sizes), "dynamic": set(policy.dynamic),
            "first_scalars": dict(policy.first_scalars),
            "dynamic_scalars": set(policy.dynamic_scalars)}


# --- what runs on the workers -----------------------------------------------------------
def _install(payload, adopt):
    """On a worker: install each function's entries in its disk cache and merge what the
    client's shape policy learned into the worker's copy of the function."""
    total = Counter(entries=0)
    for jitted, entries, policy in payload:
        with jitted._lock:
            _merge_policy(jitted.policy, policy)
        total["entries"] += len(entries)
        if jitted._cache is None or not entries:
            total["rejected"] += len(entries) if jitted._cache is None else 0
            continue
        outcome = jitted._cache.import_entries(entries, adopt=adopt)
        total.update(outcome)
    _installed.update({key: value for key, value in total.items() if key != "entries"})
    return {name: total[name] for name in ("entries", "present", "verified", "adopted",
                                           "rejected")}


def _merge_policy(policy, state):
    """Dims the client saw change size are dynamic here too, before this worker's first
    call, so it computes the key the client's bucketed variant was filed under."""
    policy.dynamic |= state["dynamic"]
    policy.dynamic_scalars |= state["dynamic_scalars"]
    for key, size in state["first_sizes"].items():
        policy.first_sizes.setdefault(key, size)
    for key, value in state["first_scalars"].items():
        policy.first_scalars.setdefault(key, value)


def _use_cache_dir(directory):
    os.environ["TRACEJIT_CACHE_DIR"] = directory  # read when a function is unpickled here
    for jitted in diagnostics.live_functions():
        if jitted.options.disk_cache:
            from dataclasses import replace

            jitted.options = replace(jitted.options, cache_dir=directory)
            jitted._cache = open_disk_cache(jitted.options)
    return directory


def _report(functions):
    summed = Counter()
    eager = Counter()
    for jitted in functions:
        stats = jitted.stats()
        for name in ("calls", "compiled_calls", "traced_calls", "compiles", "disk_hits",
                     "variants"):
            summed[name] += stats[name]
        eager.update(stats["eager_calls"])
    return {**{name: summed[name] for name in ("calls", "compiled_calls", "traced_calls",
                                               "compiles", "disk_hits", "variants")},
            "eager_calls": dict(eager), "installed": dict(_installed),
            "pid": os.getpid()}

