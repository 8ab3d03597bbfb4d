"""The first call on a large input: gelu(x*w+b) on 4096×4096 float32 in a fresh process,
its time and the memory it takes (issue 16: "first call ≤ one eager call + compile time;
intermediates freed when dead; no reference cycles").

    python -m benchmarks.first_call_large [--quick] [--result FILE]

Each candidate runs in a fresh interpreter that imports its framework, builds the inputs
(x is 64 MiB) and then, with the garbage collector disabled (memory held by a reference
cycle stays held), times the first call. Reported per candidate: the first call's wall
time; the peak resident memory above what the process held before the call (the result
alone is 64 MiB; each intermediate that stays alive adds 64 MiB); the memory still held
after the result is dropped, before any ``gc.collect()``. The tracejit child then times
one NumPy eager call of the same function, so the first call is set against "one eager
call + compile time" (tracejit's ``stats()['compile_seconds']``) in one process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .harness import NUMPY, TRACEJIT

REPOSITORY = Path(__file__).resolve().parents[1]
TITLE = "first call on a large input: gelu(x*w+b), 4096×4096 f32"
SHAPE = (4096, 4096)
MIB = 1 << 20


def _resident():
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak():
    """The process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _inputs():
    from .workloads import _normal

    rng = np.random.default_rng(0)
    return _normal(rng, *SHAPE), _normal(rng, SHAPE[1]), _normal(rng, SHAPE[1])


def _child(name):
    """In the fresh interpreter: time the first call, measure memory, print JSON."""
    from .workloads import gelu_affine

    x, w, b = _inputs()
    if name == "tracejit":
        from tracejit import jit

        function = jit(gelu_affine)
        call = function
    elif name == "jax.jit":
        import jax
        import jax.numpy as jnp

        jitted = jax.jit(lambda x, w, b: jax.nn.gelu(x * w + b, approximate=True))
        x, w, b = (jnp.asarray(value) for value in (x, w, b))

        def call(*arguments):
            return np.asarray(jax.block_until_ready(jitted(*arguments)))
    else:
        call = gelu_affine
    gc.collect()
    gc.disable()
    before = _resident()
    start = time.perf_counter()
    result = call(x, w, b)
    seconds = time.perf_counter() - start
    peak = _peak() - before
    checksum = float(np.asarray(result, dtype=np.float64).sum())
    del result
    held = _resident() - before
    facts = dict(first_s=seconds, peak_mib=peak / MIB, held_mib=held / MIB, checksum=checksum)
    if name == "tracejit":
        stats = function.stats()
        facts.update(compile_s=stats["compile_seconds"], compiles=stats["compiles"],
                     eager_calls=stats["eager_calls"])
        start = time.perf_counter()
        gelu_affine(x, w, b)
        facts["eager_s"] = time.perf_counter() - start
    gc.enable()
    print("RESULT " + json.dumps(facts, default=str), flush=True)


def _run_child(name, cache):
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=cache)
    completed = subprocess.run([sys.executable, "-m", "benchmarks.first_call_large", "--child",
                                name], cwd=REPOSITORY, env=environment, capture_output=True,
                               text=True, timeout=900)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    if completed.returncode != 0 or not lines:
        raise RuntimeError((completed.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(lines[-1][len("RESULT "):])


def _summary(name, runs, reference, numpy_ms):
    median = statistics.median(run["first_s"] for run in runs) * 1e3
    peak = statistics.median(run["peak_mib"] for run in runs)
    held = statistics.median(run["held_mib"] for run in runs)
    note = f"peak +{peak:.0f} MiB, {held:.0f} MiB held after (gc off)"
    info = dict(peak_mib=peak, held_mib=held, processes=len(runs),
                summary=f"peak +{peak:.0f} MiB, {held:.0f} MiB held")
    if "compile_s" in runs[0]:
        compile_ms = statistics.median(run["compile_s"] for run in runs) * 1e3
        eager_ms = statistics.median(run["eager_s"] for run in runs) * 1e3
        info.update(compile_ms=compile_ms, eager_ms=eager_ms, compiles=runs[0]["compiles"],
                    eager_calls=runs[0]["eager_calls"])
        note += (f"; one eager call {eager_ms:.0f} ms + compile {compile_ms:.0f} ms = "
                 f"{eager_ms + compile_ms:.0f} ms")
    difference = abs(runs[0]["checksum"] - reference) / max(abs(reference), 1.0)
    status = "ok" if difference < 1e-3 else f"WRONG result (checksum off by {difference:.1e})"
    return dict(candidate=name if name != "numpy" else f"{NUMPY} (one call)",
                peer=NUMPY if name == "numpy" else name, note=note, info=info, median=median,
                samples=[run["first_s"] * 1e3 for run in runs], status=status,
                max_rel_diff=difference, x_numpy=numpy_ms / median if numpy_ms else None,
                tracejit_vs=None)


def measure(quick):
    processes = 1 if quick else 3
    names = ["numpy", "tracejit"]
    try:
        import importlib.util

        if importlib.util.find_spec("jax") is not None:
            names.append("jax.jit")
    except ImportError:
        pass
    runs = {}
    with tempfile.TemporaryDirectory(prefix="tracejit-bench-") as folder:
        for name in names:
            try:
                runs[name] = [_run_child(name, str(Path(folder) / f"{name}{index}"))
                              for index in range(processes)]
            except Exception as error:  # a finding, not the end of the run
                runs[name] = error
    reference = runs["numpy"][0]["checksum"]
    numpy_ms = statistics.median(run["first_s"] for run in runs["numpy"]) * 1e3
    rows = []
    for name in names:
        if isinstance(runs[name], Exception):
            rows.append(dict(candidate=name, peer=name, note="", info={}, median=None,
                             samples=[], status=f"crash: {runs[name]}", max_rel_diff=None,
                             x_numpy=None, tracejit_vs=None))
            continue
        rows.append(_summary(name, runs[name], reference, numpy_ms))
    ours = next(row["median"] for row in rows if row["peer"] == TRACEJIT)
    for row in rows:
        row["tracejit_vs"] = row["median"] / ours if row["median"] and ours else None
    return dict(key="first_call_large", title=TITLE, unit="ms", rounds=processes, rows=rows,
                skipped={}, target="≤ one eager call + compile time; intermediates freed "
                "when dead; no reference cycles",
                notes=[f"median of {processes} fresh process(es), the garbage collector "
                       "disabled around the call; tracejit with an empty cache directory; "
                       "peak = peak resident memory above the process's before the call "
                       "(the 64 MiB result included); held = still resident after the "
                       "result is dropped; max rel diff compares checksums"])


def main(argv=None):
    from .report import format_workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--result", type=Path, help="also write the result here as JSON")
    parser.add_argument("--child", choices=("numpy", "tracejit", "jax.jit"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return
    result = measure(args.quick)
    print(format_workload(14, result))
    if args.result:
        args.result.write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
