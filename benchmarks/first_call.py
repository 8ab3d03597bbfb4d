"""Workload 6: the first call of the MLP train step in a fresh process (trace + compile).

Each measurement is its own interpreter, so nothing is warm but the operating system's file
cache. The child imports its framework, builds the inputs of workload 3, then times its
first call of the train step and a few calls after it:

* tracejit cold: ``TRACEJIT_CACHE_DIR`` is a new, empty directory (trace + LLVM), for the
  hand-written step (``tracejit``) and for the ``value_and_grad`` step (``tracejit-vg``);
* tracejit prepared: a new directory where ``tracejit cache prepare`` built the
  per-machine objects (thread pool, entry guards' check, own GEMM) first, as an install
  would: the first call traces and compiles its own program only;
* tracejit warm start: the directory a cold run filled (object code from disk, no
  tracing, no LLVM);
* ``torch.compile``: ``TORCHINDUCTOR_CACHE_DIR`` is a new, empty directory (Dynamo +
  AOTAutograd + Inductor for forward and backward);
* ``jax.jit``: no persistent compilation cache.

Import time is reported apart and not counted. Run a child by hand with
``python -m benchmarks.first_call --child tracejit``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .harness import NUMPY, TRACEJIT
from .workloads import TITLES

REPOSITORY = Path(__file__).resolve().parents[1]
TRACEJIT_STEPS = {"tracejit": ("manual backward", "mlp_train_step"),
                  "tracejit-vg": ("jit(value_and_grad)", "mlp_value_and_grad_step")}
CHILDREN = (*TRACEJIT_STEPS, "torch.compile", "jax.jit")
WARM_CALLS = 5


def _child(name):
    """Run in the fresh interpreter: time the first call of the train step, print JSON."""
    started = time.perf_counter()
    from . import workloads

    inputs = workloads.mlp_inputs(np.random.default_rng(workloads.SEED))
    if name in TRACEJIT_STEPS:
        from tracejit import jit

        step = jit(getattr(workloads, TRACEJIT_STEPS[name][1]))
        weights = [inputs[key] for key in ("w1", "b1", "w2", "b2")]

        def call():
            return step(inputs["x"], inputs["labels"], *weights, workloads.LEARNING_RATE)
    elif name == "torch.compile":
        from .peers import torch_mlp_step

        call = torch_mlp_step(inputs, compiled=True)
    elif name == "jax.jit":
        from .peers import jax_mlp_step

        call = jax_mlp_step(inputs)
    else:
        raise SystemExit(f"unknown child {name!r}; one of {', '.join(CHILDREN)}")
    imported = time.perf_counter() - started

    start, cpu = time.perf_counter(), time.process_time()
    result = call()
    first, first_cpu = time.perf_counter() - start, time.process_time() - cpu
    warm = []
    for _ in range(WARM_CALLS):
        start = time.perf_counter()
        call()
        warm.append(time.perf_counter() - start)
    report = dict(import_s=imported, first_s=first, first_cpu_s=first_cpu,
                  warm_s=statistics.median(warm),
                  loss=float(np.asarray(result[0].detach() if hasattr(result[0], "detach")
                                        else result[0])))
    if name in TRACEJIT_STEPS:
        stats = step.stats()
        report.update(compiles=stats["compiles"], disk_hits=stats["disk_hits"],
                      eager_calls=stats["eager_calls"], compile_seconds=stats["compile_seconds"])
    print(json.dumps(report))


def _run_child(name, environment, timeout=900):
    env = dict(os.environ, **environment)
    env.pop("TRACEJIT_DISABLE", None)
    completed = subprocess.run([sys.executable, "-m", "benchmarks.first_call", "--child", name],
                               env=env, cwd=REPOSITORY, capture_output=True, text=True,
                               timeout=timeout)
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{name} child failed (exit {completed.returncode}): {tail}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _installed(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _summary(name, runs, peer, note, extra=None):
    row = dict(candidate=name, peer=peer, note=note,
               median=statistics.median(run["first_s"] for run in runs) * 1e3,
               samples=[run["first_s"] * 1e3 for run in runs],
               info=dict(warm_call_ms=statistics.median(run["warm_s"] for run in runs) * 1e3,
                         # all threads' CPU: comparable when other load inflates wall time
                         first_cpu_ms=statistics.median(run["first_cpu_s"] for run in runs)
                         * 1e3,
                         import_s=statistics.median(run["import_s"] for run in runs),
                         processes=len(runs), **(extra or {})),
               loss=runs[0]["loss"], status="ok")
    return row


def _prepared(folder):
    """``folder`` after ``tracejit cache prepare`` (its own process, as an install runs it)."""
    environment = dict(os.environ)
    environment.pop("TRACEJIT_DISABLE", None)
    subprocess.run([sys.executable, "-m", "tracejit", "cache", "prepare", "--cache-dir",
                    str(folder)], env=environment, cwd=REPOSITORY, check=True,
                   capture_output=True, timeout=900)
    return str(folder)


def _tracejit_rows(child, label, processes, folder):
    """Cold runs, each with an empty cache directory; runs with the per-machine objects
    prepared; then warm starts from the first cold run's directory."""
    try:
        cold = [_run_child(child, {"TRACEJIT_CACHE_DIR": str(folder / f"cold{index}")})
                for index in range(processes)]
        prepared = [_run_child(child, {"TRACEJIT_CACHE_DIR": _prepared(
            folder / f"prepared{index}")}) for index in range(processes)]
        warm = [_run_child(child, {"TRACEJIT_CACHE_DIR": str(folder / "cold0")})
                for _ in range(processes)]
    except Exception as error:  # report, do not hide, a tracejit failure
        return [dict(candidate=f"tracejit cold ({label})", peer=TRACEJIT, median=None,
                     status=f"crash: {error}", note="", info={})]
    return [
        _summary(f"tracejit cold ({label})", cold, TRACEJIT, "empty cache dir: trace + compile",
                 dict(compiles=cold[0]["compiles"], eager_calls=cold[0]["eager_calls"])),
        _summary(f"tracejit prepared ({label})", prepared, TRACEJIT,
                 "per-machine objects built by `tracejit cache prepare`: trace + compile",
                 dict(compiles=prepared[0]["compiles"],
                      eager_calls=prepared[0]["eager_calls"])),
        _summary(f"tracejit warm start ({label})", warm, TRACEJIT, "warm disk cache",
                 dict(disk_hits=warm[0]["disk_hits"], compiles=warm[0]["compiles"],
                      eager_calls=warm[0]["eager_calls"])),
    ]


def first_call_workload(processes, reference_loss):
    """Rows for workload 6 (first-call ms, median over ``processes`` fresh processes)."""
    rows, skipped = [], {}
    with tempfile.TemporaryDirectory(prefix="tracejit-bench-") as folder:
        folder = Path(folder)
        for child, (label, _) in TRACEJIT_STEPS.items():
            rows += _tracejit_rows(child, label, processes, folder / child)
        for name, module in (("torch.compile", "torch"), ("jax.jit", "jax")):
            if not _installed(module):
                continue
            try:
                runs = [_run_child(name, {"TORCHINDUCTOR_CACHE_DIR":
                                          str(folder / f"inductor{i}")})
                        for i in range(processes)]
            except Exception as error:
                skipped[name] = str(error)
                continue
            rows.append(_summary(name, runs, name, "no persistent cache" if module == "jax"
                                 else "empty Inductor cache dir"))
    cold_ms = rows[0]["median"]
    for row in rows:
        loss = row.pop("loss", None)
        row["max_rel_diff"] = (abs(loss - reference_loss) / abs(reference_loss)
                               if loss is not None else None)
        row["x_numpy"] = None
        row["tracejit_vs"] = row["median"] / cold_ms if row["median"] and cold_ms else None
        if row["info"].get("eager_calls"):
            row["status"] = "eager fallback: " + "; ".join(row["info"]["eager_calls"])
        elif "disk_hits" in row["info"] and not row["info"]["disk_hits"]:
            row["status"] = "warm start missed the disk cache"
    return dict(key="first_call", title=TITLES["first_call"], unit="ms",
                target="≤ 0.2 s; warm start from disk ≤ 15 ms over a warm call", rounds=processes,
                tolerance=1e-3, rows=rows, skipped=skipped, notes=[
                    "time of the first call of workload 3's train step in a fresh process, "
                    f"median of {processes} process(es); import time not counted; "
                    "'tracejit vs' is relative to the first tracejit row",
                    f"{NUMPY} has no first-call cost; warm start: a new process with the "
                    "cache directory a cold run filled",
                ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=CHILDREN, required=True)
    _child(parser.parse_args(argv).child)


if __name__ == "__main__":
    main()
