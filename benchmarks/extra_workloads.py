"""Workloads 11-14 of ``python -m benchmarks``: issue 16's rows that each run in fresh
processes of their own, turned into the results ``benchmarks.report`` prints.

11. compile time against program size: the first call of a chain of 10, 100 and 1000
    pointwise ops (``benchmarks.compile_scaling``'s children), tracejit against jax.jit;
12. float32 math on 1024×1024 on two threads (``benchmarks.math_f32``'s worker): one
    result per function, NumPy eager, tracejit and jax.jit, and for the fused chain of ten
    ops the sum of its parts run as separate kernels;
13. a matmul-bound layer alternating with NumPy calls (``benchmarks.interleave``): does
    our thread pool slow down next to OpenBLAS's threads?
14. the first call of gelu on 4096×4096 (``benchmarks.first_call_large``): time against
    one eager call plus compile time, and the memory it takes.

Each function returns a list of results (dicts with ``key``, ``title``, ``unit``,
``target``, ``rows``, ``notes``...) in the shape ``harness.run_workload`` returns, so the
tables, the JSON and the chart treat them like workloads 1-10:

>>> row = _row("tracejit", "tracejit", 12.5, reference=25.0)
>>> row["median"], row["x_numpy"], row["status"]
(12.5, 2.0, 'ok')
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import compile_scaling, first_call_large, interleave, math_f32
from .harness import NUMPY, TRACEJIT

REPOSITORY = Path(__file__).resolve().parents[1]
KEYS = ("compile_scaling", "math_f32", "interleave", "first_call_large")
MATH_THREADS = 2


def _row(candidate, peer, median, reference=None, status="ok", note="", info=None,
         samples=None, max_rel_diff=None):
    """One row of a result; ``reference`` is NumPy eager's median, when there is one."""
    return dict(candidate=candidate, peer=peer, note=note, info=info or {}, median=median,
                samples=samples or ([median] if median is not None else []), status=status,
                max_rel_diff=max_rel_diff,
                x_numpy=reference / median if reference and median else None,
                tracejit_vs=None)


def _result(key, title, rows, target, notes, unit="ms", rounds=0):
    """A result like ``run_workload``'s; ``tracejit vs`` is against its first tracejit row."""
    ours = next((row["median"] for row in rows if row["peer"] == TRACEJIT and row["median"]),
                None)
    for row in rows:
        row["tracejit_vs"] = row["median"] / ours if row["median"] and ours else None
    return dict(key=key, title=title, unit=unit, target=target, rounds=rounds, rows=rows,
                notes=notes, skipped={})


def _crashed(key, title, reason):
    return dict(key=key, title=title, unit="ms", target="", rounds=0, rows=[], notes=[],
                skipped={}, crash=reason)


# --- 11. compile time ---------------------------------------------------------------------------
def compile_scaling_results(quick):
    """One result per chain length: first-call wall ms in fresh processes (median)."""
    processes = 1 if quick else 3
    results = []
    for length in compile_scaling.LENGTHS:
        title = f"compile time: first call of a chain of {length} pointwise ops"
        rows = []
        for framework, peer in (("tracejit", TRACEJIT), ("jax", "jax.jit")):
            if framework == "jax" and not _installed("jax"):
                continue
            measured = compile_scaling.measure(framework, length, processes)
            if "crash" in measured:
                rows.append(_row(peer, peer, None, status=f"crash: {measured['crash']}"))
                continue
            info = dict(cpu_ms=measured["first_cpu_s"] * 1e3,
                        second_call_ms=measured["second_s"] * 1e3)
            runs = measured["runs"]
            if framework == "tracejit":
                info.update(compiles=runs[0]["compiles"], eager_calls=runs[0]["eager_calls"])
            rows.append(_row(peer, peer, measured["first_wall_s"] * 1e3, info=info,
                             samples=[run["first_wall_s"] * 1e3 for run in runs],
                             max_rel_diff=measured["max_abs_diff"],
                             note=f"CPU {info['cpu_ms']:.0f} ms"))
        results.append(_result(
            f"compile_{length}", title, rows, rounds=processes,
            target="first call ≤ jax.jit's",
            notes=[f"float32[{compile_scaling.SIZE}], the chain repeats x*0.999, +0.01, tanh, "
                   "maximum(x, -0.5), -0.02; median wall ms of the first call over "
                   f"{processes} fresh process(es), after a one-op call that starts the "
                   "framework (LLVM JIT and thread pool; jax's backend); tracejit with an "
                   "empty cache directory; max rel diff is the max abs difference from NumPy"]))
    return results


# --- 12. float32 math ---------------------------------------------------------------------------
def math_results(quick):
    """One result per math function, from one worker pinned to ``MATH_THREADS`` cores."""
    with tempfile.TemporaryDirectory(prefix="tracejit-bench-") as folder:
        output = Path(folder) / "rows.json"
        command = [sys.executable, "-m", "benchmarks.math_f32", "--worker", str(MATH_THREADS),
                   "--output", str(output), "--only", *math_f32.CASES]
        command += ["--quick"] if quick else []
        environment = dict(os.environ, TRACEJIT_NUM_THREADS=str(MATH_THREADS))
        completed = subprocess.run(command, cwd=REPOSITORY, env=environment,
                                   capture_output=True, text=True)
        if completed.returncode != 0 or not output.exists():
            lines = completed.stderr.strip().splitlines() or ["no output"]
            return [_crashed("math_f32", "float32 math, 1024×1024", lines[-1][:300])]
        cases = json.loads(output.read_text())
    results = []
    for case in cases:
        name, ms = case["name"], case["ms"]
        rows = [_row(NUMPY, NUMPY, ms["numpy"], reference=ms["numpy"],
                     max_rel_diff=case["errors"].get("numpy"))]
        rows.append(_row(TRACEJIT, TRACEJIT, ms["tracejit"], reference=ms["numpy"],
                         max_rel_diff=case["errors"].get("tracejit")))
        if "jax.jit" in ms:
            rows.append(_row("jax.jit", "jax.jit", ms["jax.jit"], reference=ms["numpy"],
                             max_rel_diff=case["errors"].get("jax.jit")))
        target = "≥ 2× NumPy and ≤ jax.jit's time"
        if "tracejit, parts" in ms:
            rows.append(_row("tracejit, its ops as separate kernels", TRACEJIT,
                             ms["tracejit, parts"], reference=ms["numpy"],
                             note="the sum of ten jit functions' medians"))
            target += "; never slower than its parts"
        results.append(_result(
            f"math_{name}", f"float32 {name}, 1024×1024", rows, target=target,
            rounds=7 if quick else 21,
            notes=[f"inputs {case['inputs']}; {MATH_THREADS} threads (the worker is pinned "
                   "to that many cores, TRACEJIT_NUM_THREADS too); max rel diff = max |result"
                   " - NumPy| / max |NumPy| (erf: tracejit's eager primitive is the NumPy "
                   "column)"]))
    return results


# --- 13. interleaving with NumPy ----------------------------------------------------------------
def interleave_results(quick):
    return [_run_module("interleave", interleave.TITLE, "benchmarks.interleave", quick)]


# --- 14. first call on large inputs -------------------------------------------------------------
def first_call_large_results(quick):
    return [_run_module("first_call_large", first_call_large.TITLE,
                        "benchmarks.first_call_large", quick)]


def _run_module(key, title, module, quick):
    """Run ``python -m module --result FILE [--quick]``: it writes one result as JSON."""
    with tempfile.TemporaryDirectory(prefix="tracejit-bench-") as folder:
        output = Path(folder) / "result.json"
        command = [sys.executable, "-m", module, "--result", str(output)]
        command += ["--quick"] if quick else []
        completed = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True)
        if completed.returncode != 0 or not output.exists():
            lines = completed.stderr.strip().splitlines() or ["no output"]
            return _crashed(key, title, lines[-1][:300])
        return json.loads(output.read_text())


def _installed(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


RUNNERS = {"compile_scaling": compile_scaling_results, "math_f32": math_results,
           "interleave": interleave_results, "first_call_large": first_call_large_results}
