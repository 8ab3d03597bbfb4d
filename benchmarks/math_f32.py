"""float32 transcendentals, 1024x1024: tracejit against NumPy eager and jax.jit, on 1 and
2 threads (DESIGN.md §6: each >= 2x NumPy and >= jax.jit).

    python -m benchmarks.math_f32 [--quick] [--cpu] [--threads 1 2] [--only sin cos ...]

Every thread count runs in a fresh worker process: ``TRACEJIT_NUM_THREADS`` set to it and
the process pinned to that many cores (``os.sched_setaffinity``), so NumPy, jax and
tracejit all get the same cores (XLA's own thread pool then sees them too). Candidates are
timed round-robin in one process (``harness.measure_interleaved``); the figures are the
median sample and, on a line below it, the fastest sample (less disturbed by other
processes on a shared machine). ``--cpu`` adds each candidate's CPU time per call (all of
the process's threads, the least over interleaved rounds): on a loaded machine the work a
call costs, where wall time mostly measures who else runs. Read it from the 1-thread run:
with 2 threads the least sample undercounts (a worker thread's time still running on the
other core is not yet in the process clock). Every result is checked against
NumPy eager on the same
input (NumPy has no erf: the eager primitive, fdlibm's algorithm in NumPy, is the
reference and the NumPy column). The 1-minute load average is printed before and after
each process: the machine is shared, so compare ratios within one run.

Rows: the single functions on inputs in the range a model sees (sin and cos: [-10, 10];
log: (0, 100]; exp: [-10, 10]; ...; tan, log2 and log10 are primitives of their own), a
composite (a sigmoid), ``x ** y``, and a fused chain of ten of them against its parts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SHAPE = (1024, 1024)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _chain(x):
    """Ten math ops in one fused kernel (issue 16: it must not be slower than its parts)."""
    a = np.sin(x) + np.cos(x)
    b = np.exp(-np.abs(a)) * np.tanh(x)
    c = np.log1p(np.abs(b)) + np.log(np.abs(x) + 1.0)
    return c + np.expm1(-np.abs(a)) * np.sqrt(np.abs(x)) + np.sin(c)


def _erf():
    from tracejit.tracer import ops

    return ops.erf_p


# name -> (function of the inputs, how the inputs are drawn)
CASES = {
    "exp": (np.exp, "[-10, 10]"),
    "expm1": (np.expm1, "[-10, 10]"),
    "log": (np.log, "(0, 100]"),
    "log1p": (np.log1p, "(0, 100]"),
    "tanh": (np.tanh, "[-10, 10]"),
    "sin": (np.sin, "[-10, 10]"),
    "cos": (np.cos, "[-10, 10]"),
    "tan": (np.tan, "[-10, 10]"),
    "erf": (None, "[-10, 10]"),  # the eager primitive, bound at run time
    "log2": (np.log2, "(0, 100]"),
    "log10": (np.log10, "(0, 100]"),
    "log(|x|+1)": (lambda x: np.log(np.abs(x) + 1.0), "[-10, 10]"),
    "sigmoid": (_sigmoid, "[-10, 10]"),
    "x ** y": (np.power, "(0, 100] ** [-3, 3]"),
    "chain of 10": (_chain, "[-10, 10]"),
}


def _inputs(ranges, rng):
    def draw(text):
        if text == "[-10, 10]":
            return rng.uniform(-10, 10, SHAPE).astype(np.float32)
        if text == "(0, 100]":
            return (100.0 - rng.uniform(0, 100, SHAPE)).astype(np.float32)
        if text == "[-3, 3]":
            return rng.uniform(-3, 3, SHAPE).astype(np.float32)
        raise ValueError(text)

    return [draw(part) for part in ranges.split(" ** ")]


def _jax_function(name):
    import jax
    import jax.numpy as jnp

    functions = {
        "exp": jnp.exp, "expm1": jnp.expm1, "log": jnp.log, "log1p": jnp.log1p,
        "tanh": jnp.tanh, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan,
        "erf": jax.scipy.special.erf, "log2": jnp.log2, "log10": jnp.log10,
        "log(|x|+1)": lambda x: jnp.log(jnp.abs(x) + 1.0),
        "sigmoid": lambda x: 1.0 / (1.0 + jnp.exp(-x)), "x ** y": jnp.power,
        "chain of 10": _chain_jax,
    }
    return jax.jit(functions[name])


def _chain_jax(x):
    import jax.numpy as jnp

    a = jnp.sin(x) + jnp.cos(x)
    b = jnp.exp(-jnp.abs(a)) * jnp.tanh(x)
    c = jnp.log1p(jnp.abs(b)) + jnp.log(jnp.abs(x) + 1.0)
    return c + jnp.expm1(-jnp.abs(a)) * jnp.sqrt(jnp.abs(x)) + jnp.sin(c)


def _load():
    return os.getloadavg()[0]


def cpu_seconds(candidates, rounds, calls=10):
    """Least CPU time per call of each candidate (``time.process_time``: every thread of the
    process, so jax's and tracejit's pools count), round-robin over ``rounds`` rounds."""
    import time

    best = {candidate.name: float("inf") for candidate in candidates}
    for _ in range(rounds):
        for candidate in candidates:
            candidate.call()
            for _ in range(calls):
                start = time.process_time()
                candidate.call()
                best[candidate.name] = min(best[candidate.name], time.process_time() - start)
    return best


def run_worker(names, quick, cpu=False):
    """Time every case in this process; returns one row per case."""
    from tracejit import jit

    from .harness import max_relative_difference, measure_interleaved

    try:
        import jax

        jax.config.update("jax_platforms", "cpu")
    except ImportError:
        jax = None
    rounds, sample_seconds = (7, 0.02) if quick else (21, 0.05)
    rng = np.random.default_rng(16)
    rows = []
    for name in names:
        function, ranges = CASES[name]
        if function is None:
            function = _erf()
        arrays = _inputs(ranges, rng)
        with np.errstate(all="ignore"):
            expected = function(*arrays)
        compiled = jit(cache="memory")(function)
        candidates = _candidates(name, function, compiled, arrays, jax)
        errors = {}
        for candidate in candidates:
            errors[candidate.name] = max_relative_difference(
                np.asarray(candidate.call()), expected)
        timing = measure_interleaved(candidates, rounds=rounds, sample_seconds=sample_seconds,
                                     pause_seconds=0.05)
        if compiled.stats()["eager_calls"]:
            raise RuntimeError(f"{name}: tracejit ran eagerly ({compiled.explain()})")
        if name == "chain of 10":
            timing["tracejit, parts"] = _parts_timing(arrays[0], rounds, sample_seconds)
        rows.append(dict(name=name, inputs=ranges, errors=errors,
                         ms={key: value["median_s"] * 1e3 for key, value in timing.items()},
                         best_ms={key: min(value["samples_s"]) * 1e3
                                  for key, value in timing.items()}))
        if cpu:
            rows[-1]["cpu_ms"] = {key: value * 1e3 for key, value
                                  in cpu_seconds(candidates, rounds=max(3, rounds // 3)).items()}
        print(_format(rows[-1]), flush=True)
        print(" " * 8 + "best: " + _format(rows[-1], "best_ms")[12:], flush=True)
        if cpu:
            print(" " * 8 + "cpu:  " + _format(rows[-1], "cpu_ms")[12:], flush=True)
    return rows


def _candidates(name, function, compiled, arrays, jax):
    from .harness import Candidate

    candidates = [Candidate("numpy", lambda: function(*arrays)),
                  Candidate("tracejit", lambda: compiled(*arrays))]
    if jax is not None:
        jitted = _jax_function(name)
        device = [jax.device_put(array) for array in arrays]
        candidates.append(Candidate("jax.jit",
                                    lambda: jax.block_until_ready(jitted(*device))))
    return candidates


def _parts_timing(x, rounds, sample_seconds):
    """The chain as one jit function per op (each its own kernel): the sum of their
    medians."""
    from tracejit import jit

    from .harness import Candidate, measure_interleaved

    ops = [("sin", np.sin), ("cos", np.cos), ("exp", np.exp), ("tanh", np.tanh),
           ("log1p", np.log1p), ("log", np.log), ("expm1", np.expm1), ("sqrt", np.sqrt),
           ("sin", np.sin), ("abs+add", lambda v: np.abs(v) + 1.0)]
    candidates = []
    for index, (label, op) in enumerate(ops):
        compiled = jit(cache="memory")(op)
        candidates.append(Candidate(f"{index}:{label}", lambda c=compiled: c(x)))
    timing = measure_interleaved(candidates, rounds=max(3, rounds // 3),
                                 sample_seconds=sample_seconds, pause_seconds=0.02)
    return dict(median_s=sum(value["median_s"] for value in timing.values()),
                samples_s=[sum(min(value["samples_s"]) for value in timing.values())])


def _format(row, key="ms"):
    ms = row[key]
    numpy_ms, tracejit_ms = ms["numpy"], ms["tracejit"]
    text = (f"{row['name']:12} numpy {numpy_ms:7.3f} ms  tracejit {tracejit_ms:7.3f} ms "
            f"({numpy_ms / tracejit_ms:4.2f}x numpy)")
    if "jax.jit" in ms:
        text += f"  jax {ms['jax.jit']:7.3f} ms ({ms['jax.jit'] / tracejit_ms:4.2f}x jax)"
    if "tracejit, parts" in ms:
        text += f"  parts {ms['tracejit, parts']:7.3f} ms"
    worst = max(error for key, error in row["errors"].items() if key == "tracejit")
    return text + f"  rel.err {worst:.1e}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cpu", action="store_true",
                        help="also CPU time per call (robust on a loaded machine)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.worker])
        Path(args.output).write_text(json.dumps(run_worker(args.only, args.quick, args.cpu)))
        return
    results = {}
    for threads in args.threads:
        environment = dict(os.environ, TRACEJIT_NUM_THREADS=str(threads))
        before = _load()
        print(f"--- {threads} thread(s); load average before: {before:.2f}", flush=True)
        with tempfile.TemporaryDirectory() as folder:
            output = Path(folder) / "rows.json"
            command = [sys.executable, "-m", "benchmarks.math_f32", "--worker", str(threads),
                       "--output", str(output), "--only", *args.only]
            command += ["--quick"] if args.quick else []
            command += ["--cpu"] if args.cpu else []
            finished = subprocess.run(command, env=environment,
                                      cwd=Path(__file__).resolve().parents[1])
            print(f"--- load average after: {_load():.2f}", flush=True)
            if finished.returncode == 0:
                results[threads] = dict(rows=json.loads(output.read_text()),
                                        load_before=before, load_after=_load())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "math_f32.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
