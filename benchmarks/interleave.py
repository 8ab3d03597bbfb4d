"""A matmul-bound compiled layer alternating with NumPy calls (issue 16: "no slowdown from
interleaving with NumPy/BLAS calls").

    python -m benchmarks.interleave [--quick] [--result FILE]

A model compiled in part: ``h = relu(x @ W + b)`` is a ``@jit`` function, and what follows
it, ``tanh(h @ V)``, stays NumPy (OpenBLAS's matmul and a ufunc). tracejit's thread pool
and OpenBLAS's threads then take turns on the same cores; when one side's threads spin
while the other works, the pair is slower than its parts (0.47× NumPy once, against 0.92×
for the layer alone). Candidates, timed round-robin in one process (``harness``):

* NumPy eager: the layer and the NumPy call, both NumPy;
* tracejit: the compiled layer, then the NumPy call;
* tracejit layer alone, and the NumPy call alone (on a precomputed ``h``).

The penalty printed is the alternating pair's time over the sum of its parts' times: 1.0
means no slowdown from interleaving. OpenBLAS's idle threads spun ~0.1 s after each NumPy
matmul, on the cores the compiled layer then needed (1.7-1.8× on an idle machine); the pool
now shortens that spin when it starts (``codegen/blas.py``), and a note says how long it was.
tracejit's idle workers spun ~0.4 ms after every layer, through NumPy's matmul; they now
spin that long only after short waits (``codegen/parallel.py``: after a long one, ~26 µs).
A note gives each candidate's CPU time by thread (the caller, tracejit's workers, the
others: OpenBLAS's), which shows which side spins while the other works even when the
machine is too busy for wall times to.
Sizes: x 512×1024, W 1024×1024, V 1024×256, float32.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from .harness import NUMPY, TRACEJIT, Candidate, Workload, run_workload

TITLE = "layer alternating with NumPy calls, 512×1024 @ 1024×1024 f32"
BATCH, WIDTH, OUT = 512, 1024, 256


def layer(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def numpy_part(h, v):
    return np.tanh(h @ v)


def workload():
    from tracejit import jit

    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, WIDTH), dtype=np.float32)
    w = rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * np.float32(WIDTH ** -0.5)
    b = rng.standard_normal(WIDTH, dtype=np.float32)
    v = rng.standard_normal((WIDTH, OUT), dtype=np.float32) * np.float32(WIDTH ** -0.5)
    compiled = jit(cache="memory")(layer)
    h = layer(x, w, b)
    return Workload(
        key="interleave", title=TITLE, inputs=dict(x=x, w=w, b=b, v=v),
        target="no slowdown from interleaving: the pair ≤ 1.05× the sum of its parts",
        candidates=[
            Candidate(f"{NUMPY} (layer, then the NumPy call)",
                      lambda: numpy_part(layer(x, w, b), v), peer=NUMPY),
            Candidate("tracejit layer, then the NumPy call",
                      lambda: numpy_part(compiled(x, w, b), v), peer=TRACEJIT),
            # The parts alone: their results are completed outside the timing for the check.
            Candidate("tracejit layer alone", lambda: compiled(x, w, b), peer=TRACEJIT,
                      result=lambda out: numpy_part(np.asarray(out), v)),
            Candidate("the NumPy call alone", lambda: numpy_part(h, v), peer="NumPy part"),
        ],
        notes=["x 512×1024 → relu(x @ W + b) compiled by tracejit → tanh(h @ V) in NumPy "
               "(OpenBLAS), V 1024×256, float32; the candidates take turns on the same cores "
               "as in a partly compiled model"])


def penalty(result):
    """The alternating pair's median over the sum of its parts' medians (1.0: no cost)."""
    medians = {row["candidate"]: row["median"] for row in result["rows"]}
    pair = medians.get("tracejit layer, then the NumPy call")
    parts = (medians.get("tracejit layer alone"), medians.get("the NumPy call alone"))
    if pair is None or None in parts:
        return None
    return pair / sum(parts)


def _thread_cpu():
    """``{thread id: nanoseconds on a CPU}`` of this process's threads (Linux schedstat),
    or None where there is no such file."""
    times = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/schedstat") as stats:
                times[int(tid)] = int(stats.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return times


def cpu_by_thread(candidates, calls=10):
    """CPU milliseconds per call of each candidate's threads - the caller, tracejit's pool
    workers, the rest (OpenBLAS's) - from ``calls`` calls after a pause and an untimed
    call, as the harness times them. Wall time says whether interleaving costs; this says
    whose threads spent the cores: a pool or OpenBLAS spinning while the other works shows
    as CPU the pair takes beyond its parts. None off Linux."""
    import threading

    caller = threading.get_native_id()
    table = {}
    for name, call in candidates.items():
        time.sleep(0.15)
        call()
        workers = {thread.native_id for thread in threading.enumerate()
                   if thread.name.startswith("tracejit-worker")}
        before = _thread_cpu()
        for _ in range(calls):
            call()
        after = _thread_cpu()
        if before is None or after is None:
            return None
        row = {"caller": 0.0, "tracejit workers": 0.0, "other threads": 0.0}
        for tid, spent in after.items():
            kind = ("caller" if tid == caller else "tracejit workers" if tid in workers
                    else "other threads")
            row[kind] += (spent - before.get(tid, 0)) / calls / 1e6
        table[name] = row
    return table


def measure(quick):
    rounds, sample_seconds = (9, 0.03) if quick else (31, 0.06)
    work = workload()
    result = run_workload(work, rounds=rounds, sample_seconds=sample_seconds)
    ratio = penalty(result)
    if ratio is not None:
        result["notes"].append(f"the pair takes {ratio:.2f}× the sum of its parts' times "
                               "(tracejit layer alone + the NumPy call alone)")
        for row in result["rows"]:
            if row["candidate"].startswith("tracejit layer, then"):
                row["note"] = row["info"]["summary"] = f"{ratio:.2f}× its parts"
    by_name = {candidate.name: candidate.call for candidate in work.candidates}
    cpu = cpu_by_thread({"pair": by_name["tracejit layer, then the NumPy call"],
                         "layer": by_name["tracejit layer alone"],
                         "NumPy call": by_name["the NumPy call alone"]})
    if cpu is not None:
        result["cpu_by_thread"] = cpu
        parts = {kind: cpu["layer"][kind] + cpu["NumPy call"][kind] for kind in cpu["pair"]}
        result["notes"].append(
            "CPU ms per call (caller / tracejit workers / other threads, OpenBLAS's): "
            + "; ".join(f"{name} {row['caller']:.2f} / {row['tracejit workers']:.2f} / "
                        f"{row['other threads']:.2f}" for name, row in cpu.items())
            + "; the pair beyond its parts: " + " / ".join(
                f"{cpu['pair'][kind] - parts[kind]:+.2f}" for kind in parts))
    try:
        from threadpoolctl import threadpool_info

        kernels = sorted({f"{pool.get('internal_api')} {pool.get('architecture')} "
                          f"({pool.get('num_threads')} threads)"
                          for pool in threadpool_info() if pool.get("user_api") == "blas"})
        result["notes"].append("BLAS: " + ", ".join(kernels))
    except ImportError:
        pass
    from tracejit.codegen import blas

    spin = blas.openblas_thread_timeout()
    if spin is not None:
        # tracejit's pool shortens it when it starts (codegen/blas.py), unless it was set
        result["notes"].append(f"OpenBLAS's idle threads spin 2**{spin or 28} TSC cycles "
                               "before they sleep (OPENBLAS_THREAD_TIMEOUT)")
    return result


def main(argv=None):
    from .report import format_workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--result", type=Path, help="also write the result here as JSON")
    args = parser.parse_args(argv)
    result = measure(args.quick)
    print(format_workload(13, result))
    if args.result:
        args.result.write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
