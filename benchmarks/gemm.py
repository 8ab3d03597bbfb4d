"""float32 GEMM: tracejit's own (``codegen/gemm.py``) against NumPy's OpenBLAS, on the
products of the MLP training step (batch 512 and 64) and of an RNN step, raw and inside
compiled programs, on 1 and 2 threads, under both OpenBLAS kernels (issue 16).

    python -m benchmarks.gemm [--quick] [--threads 1 2] [--blas Haswell unset]

Each (OpenBLAS setting, thread count) runs in a fresh worker process:
``TRACEJIT_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` set to the count;
``OPENBLAS_CORETYPE=Haswell`` (the environment's default here: AVX2 kernels), or
``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` removed from that worker's environment
alone (OpenBLAS then picks its SkylakeX kernel on this host). Each worker prints the
kernel OpenBLAS reports (threadpoolctl) and the load average.

Candidates of a row are timed round-robin in one process; a sample is enough calls to
last ~20 ms. On one thread a sample is the process's CPU time (``time.process_time``:
what other processes on the shared machine take is not charged); on two threads it is
wall time (CPU time would add the threads up), after a pause (``PAUSE_SECONDS``) and an
untimed call, so that the previous candidate's threads have stopped spinning. Wall
times on two threads follow the machine's other load: compare them within one run.
Reported: the median sample and the fastest. Every result is checked against a float64
product first.

Rows: raw ``C = A @ B`` (NumPy ``matmul(out=)`` vs ``gemm.prepared``, and the AVX2 code
forced as ``avx2`` where the host would choose AVX-512: it competes with OpenBLAS's
Haswell kernel on the same instructions), then compiled
programs built three times in the process, with ``blas.gemm_override`` ``"blas"``,
``"own"`` and ``"auto"`` (the default rule, ``blas.own_sgemm_condition``): the layer
``relu(x @ W + b)``, the MLP train step with its hand-written backward
(``benchmarks.workloads.mlp_train_step``) and one RNN cell step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
# Two-thread samples start after this much idle: OpenBLAS's threads spin for ~0.1 s after
# a call (harness.measure_interleaved's reason too); with 0.03 s they took the cores from
# the own GEMM's next sample (64 x 784 @ 784 x 1024: 5 ms against 1.2 ms on one thread).
PAUSE_SECONDS = 0.15

# name, m, n, k, A transposed, B transposed (as the compiled MLP step calls them)
PRODUCTS = [
    ("fwd x@W1 512x784@784x1024", 512, 1024, 784, False, False),
    ("dW1 x.T@dH 784x512@512x1024", 784, 1024, 512, True, False),
    ("dH dY@W2.T 512x10@10x1024", 512, 1024, 10, False, True),
    ("dW2 H.T@dY 1024x512@512x10", 1024, 10, 512, True, False),
    ("logits H@W2 512x1024@1024x10", 512, 10, 1024, False, False),
    ("fwd b64 x@W1 64x784@784x1024", 64, 1024, 784, False, False),
    ("dW1 b64 784x64@64x1024", 784, 1024, 64, True, False),
    ("rnn h@Wh 16x64@64x64", 16, 64, 64, False, False),
    ("rnn dh@Wh.T 16x64@64x64", 16, 64, 64, False, True),
    ("rnn dWh h.T@dz 64x16@16x64", 64, 64, 16, True, False),
]


def _operands(rng, m, n, k, trans_a, trans_b):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def _sample(call, number, cpu):
    clock = time.process_time if cpu else time.perf_counter
    start = clock()
    for _ in range(number):
        call()
    return (clock() - start) / number


def interleaved(calls, rounds, sample_seconds, cpu):
    """``{name: (median, fastest)}`` seconds per call, candidates taking turns."""
    for call in calls.values():
        call()
        call()
    numbers = {name: max(1, int(sample_seconds / max(_sample(call, 3, cpu=False), 1e-7)))
               for name, call in calls.items()}
    samples = {name: [] for name in calls}
    names = list(calls)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if not cpu:  # let the other candidate's threads stop spinning
                time.sleep(PAUSE_SECONDS)
                calls[name]()
            samples[name].append(_sample(calls[name], numbers[name], cpu))
    return {name: (statistics.median(values), min(values)) for name, values in samples.items()}


def _blas_kernel():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (pip install threadpoolctl)"
    for pool in threadpool_info():
        if pool.get("internal_api") == "openblas":
            return f"{pool.get('architecture')} ({pool.get('num_threads')} threads)"
    return "no OpenBLAS found"


def _check(name, got, want):
    error = np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30)
    if not error < 1e-4:
        raise RuntimeError(f"{name}: result differs from float64 by {error:.2e}")
    return float(error)


def raw_rows(threads, rounds, sample_seconds):
    from tracejit.codegen import gemm

    rng = np.random.default_rng(16)
    rows = []
    for name, m, n, k, trans_a, trans_b in PRODUCTS:
        a, b = _operands(rng, m, n, k, trans_a, trans_b)
        want = a.astype(np.float64) @ b.astype(np.float64)
        ours, theirs = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        calls = {"blas": lambda a=a, b=b, out=theirs: np.matmul(a, b, out=out),
                 "own": gemm.prepared(a, b, ours)}
        forced = np.empty((m, n), np.float32)
        if gemm.chosen_isa().name != "avx2" and gemm.supported("avx2"):
            calls["avx2"] = gemm.prepared(a, b, forced, isa="avx2")
        for call in calls.values():
            call()
        for result in (ours, theirs, forced)[:len(calls)]:
            _check(name, result, want)
        timing = interleaved(calls, rounds, sample_seconds, cpu=threads == 1)
        rows.append(dict(name=name, m=m, n=n, k=k, flops=2.0 * m * n * k, **{
            f"{who}_{stat}": value * 1e3 for who, (median, fastest) in timing.items()
            for stat, value in (("ms", median), ("best_ms", fastest))}))
        print(_format(rows[-1]), flush=True)
    return rows


def _layer(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def program_rows(threads, rounds, sample_seconds):
    """Compiled programs built with the own GEMM and with OpenBLAS, timed side by side."""
    from tracejit import jit
    from tracejit.codegen import blas

    from .workloads import LEARNING_RATE, mlp_train_step, rnn_cell

    rng = np.random.default_rng(17)

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def mlp(batch):
        x, labels = normal(batch, 784), rng.integers(0, 10, batch)
        weights = [normal(784, 1024, scale=784 ** -0.5), normal(1024, scale=0.1),
                   normal(1024, 10, scale=1024 ** -0.5), normal(10, scale=0.1)]
        return mlp_train_step, (x, labels, *weights, LEARNING_RATE)

    cases = [
        ("layer relu(x@W+b) 512x784->1024", _layer,
         (normal(512, 784), normal(784, 1024, scale=784 ** -0.5), normal(1024))),
        ("MLP train step batch 512", *mlp(512)),
        ("MLP train step batch 64", *mlp(64)),
        ("RNN cell step 16x64, hidden 64", rnn_cell,
         (normal(16, 64), rng.random(16) < 0.8, normal(16, 64),
          normal(64, 64, scale=0.125), normal(64, 64, scale=0.125), normal(64))),
    ]
    rows = []
    for name, function, arguments in cases:
        calls = {}
        for setting in ("blas", "own", "auto"):
            with blas.gemm_override(setting):
                compiled = jit(cache="memory")(function)
                start = time.process_time()
                compiled(*arguments)  # traces and compiles under this setting
                first = time.process_time() - start
            calls[setting] = lambda compiled=compiled, arguments=arguments: compiled(*arguments)
            if compiled.stats()["eager_calls"]:
                raise RuntimeError(f"{name}: ran eagerly: {compiled.explain()}")
        with np.errstate(all="ignore"):
            want = function(*arguments)
        for setting, call in calls.items():
            for got, expected in zip(_leaves(call()), _leaves(want)):
                if not np.allclose(got, expected, rtol=1e-3, atol=1e-4):
                    raise RuntimeError(f"{name} ({setting}) differs from NumPy eager")
        timing = interleaved(calls, rounds, sample_seconds, cpu=threads == 1)
        rows.append(dict(name=name, **{
            f"{who}_{stat}": value * 1e3 for who, (median, fastest) in timing.items()
            for stat, value in (("ms", median), ("best_ms", fastest))}))
        print(_format(rows[-1]) + f"   (first call under 'own' {first * 1e3:.0f} ms CPU)",
              flush=True)
    return rows


def _leaves(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [np.asarray(tree)]


def _format(row):
    text = (f"  {row['name']:34} blas {row['blas_ms']:8.4f} ms (best {row['blas_best_ms']:8.4f})"
            f"  own {row['own_ms']:8.4f} ms (best {row['own_best_ms']:8.4f})"
            f"  blas/own {row['blas_ms'] / row['own_ms']:5.2f}x")
    if "avx2_ms" in row:
        text += (f"  avx2 {row['avx2_ms']:8.4f} ms (blas/avx2 "
                 f"{row['blas_ms'] / row['avx2_ms']:5.2f}x)")
    if "auto_ms" in row:
        text += f"  auto (default) {row['auto_ms']:8.4f} ms"
    if "flops" in row:
        text += (f"  {row['flops'] / row['own_ms'] / 1e6:6.1f} vs "
                 f"{row['flops'] / row['blas_ms'] / 1e6:6.1f} GFLOP/s")
    return text


def run_worker(threads, quick, raw_only=False):
    from tracejit.codegen import gemm
    from tracejit.runtime.config import configure_codegen

    configure_codegen()  # codegen alone: TRACEJIT_NUM_THREADS and _GEMM_ISA reach it here
    if not gemm.supported():
        print("this host has neither AVX-512F nor AVX2 with FMA: tracejit's own GEMM does "
              "not run here")
        return dict(skipped="no AVX-512F or AVX2")
    rounds, sample_seconds = (5, 0.01) if quick else (15, 0.02)
    start = time.process_time()
    gemm.library()  # compiled or loaded from the cache, once per process
    load_seconds = time.process_time() - start
    header = dict(threads=threads, blas_kernel=_blas_kernel(),
                  coretype=os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
                  gemm_load_cpu_ms=load_seconds * 1e3, load_before=os.getloadavg()[0])
    print(f"threads {threads}, OPENBLAS_CORETYPE={header['coretype']}, OpenBLAS kernel "
          f"{header['blas_kernel']}, own GEMM ({gemm.chosen_isa().name}) ready in "
          f"{load_seconds * 1e3:.0f} ms CPU, load {header['load_before']:.1f}", flush=True)
    raw = raw_rows(threads, rounds, sample_seconds)
    programs = [] if raw_only else program_rows(threads, rounds, sample_seconds)
    header["load_after"] = os.getloadavg()[0]
    print(f"  load average after: {header['load_after']:.1f}", flush=True)
    return dict(header, products=raw, programs=programs)


def _worker_environment(threads, coretype):
    environment = dict(os.environ, TRACEJIT_NUM_THREADS=str(threads),
                       OPENBLAS_NUM_THREADS=str(threads))
    if coretype == "unset":
        environment.pop("OPENBLAS_CORETYPE", None)
        environment.pop("OPENBLAS_L2_SIZE", None)
    else:
        environment["OPENBLAS_CORETYPE"] = coretype
    return environment


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--blas", nargs="+", default=["Haswell", "unset"],
                        help="OPENBLAS_CORETYPE per run ('unset' removes it)")
    parser.add_argument("--raw-only", action="store_true",
                        help="only the raw products, not the compiled programs")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=RESULTS / "gemm.json")
    args = parser.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(run_worker(args.threads[0], args.quick, args.raw_only)),
              flush=True)
        return
    runs = []
    for coretype in args.blas:
        for threads in args.threads:
            command = [sys.executable, "-m", "benchmarks.gemm", "--worker", "--threads",
                       str(threads)] + ["--quick"] * args.quick + ["--raw-only"] * args.raw_only
            process = subprocess.run(command, env=_worker_environment(threads, coretype),
                                     capture_output=True, text=True,
                                     cwd=Path(__file__).resolve().parents[1])
            result = None
            for line in process.stdout.splitlines():
                if line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT "):])
                else:
                    print(line)
            if process.returncode != 0 or result is None:
                print(process.stderr[-3000:])
                raise SystemExit(f"worker (threads {threads}, {coretype}) failed")
            runs.append(dict(result, blas_setting=coretype))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(dict(runs=runs), indent=1))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
