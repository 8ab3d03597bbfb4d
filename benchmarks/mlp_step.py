"""The MLP train step (784 → 1024 relu → 10, softmax cross-entropy, float32) at batch 64,
512 and 4096: tracejit against jax.jit and NumPy in one run, under both OpenBLAS kernels,
with the step's time set against the time its FLOPs take at the machine's measured GEMM
peak (issue 16: "within 1.3× of the time the step's FLOPs take at measured peak").

    python -m benchmarks.mlp_step [--quick] [--batches 64 512 4096] [--threads 2]
                                  [--blas Haswell unset]

Each (OpenBLAS setting, thread count) runs in a fresh worker process, with the
environment of ``benchmarks.gemm``'s workers: ``TRACEJIT_NUM_THREADS`` and
``OPENBLAS_NUM_THREADS`` set to the count, and either ``OPENBLAS_CORETYPE=Haswell`` (this
environment's default: AVX2 kernels) or ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE``
removed (OpenBLAS then picks its SkylakeX kernel on an AVX-512 host). On one thread
jax.jit is held to one thread too (``XLA_FLAGS``). Each worker prints the kernel
OpenBLAS reports (threadpoolctl) and the load average before and after.

Candidates, checked against NumPy eager (the loss and the gradients implied by the update)
and timed round-robin by ``harness.run_workload`` (wall time, a pause before each sample):
NumPy eager; tracejit's ``@jit`` of the hand-written step with the default GEMM rule
(``auto``: the own GEMM for the four products no decision reads, NumPy's OpenBLAS call for
``x @ w1``, which the relu mask reads; a note counts them from the compiled program) and
with OpenBLAS for every product (``blas``), so the two rows set the own GEMM against
OpenBLAS on the same products; and ``jax.jit`` of value_and_grad plus the SGD update
(``benchmarks.peers.jax_mlp_step``). The ``own`` setting is not timed: it puts the mask's
product on the own GEMM too, checked against that product's bound, which ordinary data
fails (efd8dae), so every call ran eagerly and the row timed NumPy plus a failed guard.

The peak: the faster of two measurements. One core's rate times the thread count, where
one core's is OpenBLAS on a 1024³ float32 product limited to one thread (threadpoolctl),
timed by the process's CPU time (best of several), which other load on a shared machine
does not inflate; and the wall time rate of the own GEMM and OpenBLAS on a 2048³ product
on all the worker's threads, which does follow the load (and is the larger where
OpenBLAS's kernel is narrower than the own GEMM's: its Haswell kernel on full-width
AVX-512). ``× FLOP time`` is a step's median (and best) time over
``matmul FLOPs / peak``, where the step's matmul FLOPs are ``2 B (2·784·1024 +
3·1024·10)`` (forward, dW1; logits, dW2, dH); its pointwise work is left out, so 1.0 is
out of reach: the SGD update reads W1 and writes the new W1 (6.4 MB; in tracejit the
epilogue of dW1's product computes it per row panel, so dW1 itself is never stored:
``codegen/gemm_driver.py``'s combine entry). Under ``auto`` the relu mask's product
``x @ w1`` (49% of the FLOPs) is NumPy's OpenBLAS call, so the mask decides as NumPy's;
a note gives the floor that sets (``mask_product_floor``: that product at OpenBLAS's
2048³ rate, the rest at the peak): with OpenBLAS's Haswell kernel on this Zen 5 host about
1.37×, above the issue's 1.3×.

``python -m benchmarks`` runs the same workloads (keys ``mlp_b64``, ``mlp_b512``,
``mlp_b4096``) under the OpenBLAS setting of its own environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .harness import NUMPY, TRACEJIT, Candidate, Workload, run_workload

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results"
BATCHES = (64, 512, 4096)
KEYS = tuple(f"mlp_b{batch}" for batch in BATCHES)
INPUTS, HIDDEN, CLASSES = 784, 1024, 10
PEAK_SIZE = 2048


def step_flops(batch):
    """Multiply-adds × 2 of the step's five products."""
    return 2.0 * batch * (2 * INPUTS * HIDDEN + 3 * HIDDEN * CLASSES)


def mask_product_flops(batch):
    """Multiply-adds × 2 of ``x @ w1``, the product the relu mask reads: under the default
    rule NumPy's own OpenBLAS call, so that the mask decides as NumPy's does
    (``codegen/numpy_products.py``)."""
    return 2.0 * batch * INPUTS * HIDDEN


def mask_product_floor(batch, peak, blas_rate):
    """The step's FLOPs timed with the mask's product at OpenBLAS's rate and the others
    at ``peak``, over their time all at ``peak``: the least ``× FLOP time`` the default
    rule can reach, whatever the rest costs. With OpenBLAS's Haswell kernel (AVX2) on a
    full-width AVX-512 host the product runs at about half the own GEMM's rate:

    >>> round(mask_product_floor(512, 450.0, 225.0), 2)
    1.49
    """
    mask_part = mask_product_flops(batch)
    seconds = mask_part / blas_rate + (step_flops(batch) - mask_part) / peak
    return seconds / (step_flops(batch) / peak)


def mlp_inputs(rng, batch):
    """``benchmarks.workloads.mlp_inputs`` at another batch size."""
    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return dict(x=normal(batch, INPUTS), labels=rng.integers(0, CLASSES, batch),
                w1=normal(INPUTS, HIDDEN, scale=INPUTS ** -0.5), b1=normal(HIDDEN, scale=0.1),
                w2=normal(HIDDEN, CLASSES, scale=HIDDEN ** -0.5), b2=normal(CLASSES, scale=0.1))


def core_peak(repeats=9, size=1024):
    """GFLOP/s of one core: OpenBLAS on one thread, best of ``repeats`` by CPU time."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    out = np.empty_like(a)
    with threadpool_limits(1, user_api="blas"):
        np.matmul(a, b, out=out)
        times = []
        for _ in range(repeats):
            start = time.process_time()
            np.matmul(a, b, out=out)
            times.append(time.process_time() - start)
    return 2.0 * size ** 3 / min(times) / 1e9


def measured_peak(repeats=15):
    """``(GFLOP/s, who, {who: GFLOP/s})``: the faster of the own GEMM and OpenBLAS on a
    2048³ product on all threads, best of ``repeats`` calls each (wall time)."""
    from tracejit.codegen import gemm
    from tracejit.runtime.config import configure_codegen

    configure_codegen()  # codegen alone: the pool's threads are TRACEJIT_NUM_THREADS
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((PEAK_SIZE, PEAK_SIZE)).astype(np.float32) for _ in range(2))
    out = np.empty_like(a)
    calls = {"OpenBLAS": lambda: np.matmul(a, b, out=out)}
    if gemm.supported():
        calls["own GEMM"] = gemm.prepared(a, b, out)
    best = {}
    for name, call in calls.items():
        call()
        time.sleep(0.15)  # the other's threads stop spinning
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        best[name] = 2.0 * PEAK_SIZE ** 3 / min(times) / 1e9
    who = max(best, key=best.get)
    return best[who], who, best


def peak_gflops(threads):
    """``(GFLOP/s, who, {who: GFLOP/s})``: the faster of one core's rate times ``threads``
    and the wall-time rate on all threads. A product measured at a rate shows the machine
    reaches it; one core's rate is OpenBLAS's kernel's, which under
    OPENBLAS_CORETYPE=Haswell is AVX2 (on full-width AVX-512, Zen 5, half the own GEMM's)."""
    wall_peak, who, peaks = measured_peak()
    cores = core_peak() * threads
    peaks["one core (CPU time) x threads"] = cores
    who = (f"one core's by CPU time x {threads}: {cores:.0f}; wall-time {PEAK_SIZE}³: "
           f"{wall_peak:.0f} by {who}")
    return max(cores, wall_peak), who, peaks


def mask_product_rate(batch, repeats=15):
    """GFLOP/s of NumPy's ``x @ w1`` at ``batch`` on all threads, best of ``repeats`` (wall
    time): the relu mask's product, which the default rule leaves to this very call. Its
    rate at the step's shape, not at 2048³: OpenBLAS's Haswell kernel on this Zen 5 ran
    x @ w1 at 195-208 GFLOP/s at batch 64 against 251 at 2048³ (under chrt -f 10), so the
    2048³ rate put the batch-64 floor at 1.40× where it is about 1.6×."""
    inputs = mlp_inputs(np.random.default_rng(batch), batch)
    x, w1 = inputs["x"], inputs["w1"]
    out = np.empty((batch, HIDDEN), np.float32)
    np.matmul(x, w1, out=out)
    time.sleep(0.15)  # the threads of what ran before stop spinning
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(x, w1, out=out)
        times.append(time.perf_counter() - start)
    return mask_product_flops(batch) / min(times) / 1e9


def mlp_workload(batch, peak=None, blas_kernel=None, blas_rate=None, shape_rate=None):
    """A ``harness.Workload`` for the step at ``batch``; ``peak`` = (GFLOP/s, who) adds
    the FLOP-time bound to its notes, and ``blas_rate`` (OpenBLAS's GFLOP/s on all
    threads at 2048³) and ``shape_rate`` (``mask_product_rate``) the floor the relu
    mask's product sets (``mask_product_floor``)."""
    from tracejit import jit
    from tracejit.codegen import blas

    from . import peers
    from .workloads import LEARNING_RATE, _tracejit_info, mlp_gradients, mlp_train_step

    inputs = mlp_inputs(np.random.default_rng(batch), batch)
    x, labels = inputs["x"], inputs["labels"]
    weights = [inputs[name] for name in ("w1", "b1", "w2", "b2")]
    candidates = [Candidate(NUMPY, lambda: mlp_train_step(x, labels, *weights, LEARNING_RATE),
                            note="hand-written backward")]
    split = None
    for setting in ("auto", "blas"):
        compiled = jit(cache="memory")(mlp_train_step)
        with blas.gemm_override(setting):  # the first call compiles under the setting
            compiled(x, labels, *weights, LEARNING_RATE)
        split = split or product_split(compiled)
        candidates.append(Candidate(
            f"tracejit GEMM {setting}", peer=TRACEJIT, after_run=_tracejit_info(compiled),
            call=lambda compiled=compiled: compiled(x, labels, *weights, LEARNING_RATE),
            note="the default rule" if setting == "auto" else f"every product on {setting}"))
    skipped = {}
    if peers._installed("jax"):
        candidates.append(Candidate("jax.jit", peers.jax_mlp_step(inputs),
                                    note="jit(value_and_grad) + SGD"))
    else:
        skipped["jax.jit"] = "not installed"
    notes = [f"batch {batch}, 784 → 1024 (relu) → 10, float32, SGD step; "
             f"{step_flops(batch) / 1e9:.3f} GFLOP of matmuls"]
    if blas_kernel:
        notes.append(f"OpenBLAS kernel (threadpoolctl): {blas_kernel}; OPENBLAS_CORETYPE="
                     f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    if peak:
        notes.append(f"measured peak {peak[0]:.0f} GFLOP/s ({peak[1]}): the step's matmul "
                     f"FLOPs take {step_flops(batch) / peak[0] / 1e6:.3f} ms")
    products, decided = split
    notes.append(f"of the step's {products} products, {decided} read by a decision (the relu "
                 "mask) call NumPy's OpenBLAS routine under both settings, for NumPy's bits; "
                 f"the other {products - decided} run on the own GEMM under 'auto' (its rule: "
                 "benchmarks/gemm.py) and on OpenBLAS under 'blas'. The 'own' setting (the "
                 "mask's product on the own GEMM too, checked against its bound) is not "
                 "timed: ordinary data fails the check, so it ran eagerly")
    if peak and (blas_rate or shape_rate):
        rates = [(rate, where) for rate, where in (
            (shape_rate, "on x @ w1 itself, best of 15"),
            (blas_rate, f"{PEAK_SIZE}³, all threads")) if rate]
        notes.append(
            f"the relu mask's product x @ w1 ({mask_product_flops(batch) / step_flops(batch):.0%}"
            f" of the FLOPs) is NumPy's OpenBLAS call under 'auto', so the mask decides as "
            f"NumPy's: with it at OpenBLAS's rate and the rest at the peak, 'auto' cannot go "
            f"below " + "; ".join(
                f"{mask_product_floor(batch, peak[0], rate):.2f}× FLOP time at {rate:.0f} "
                f"GFLOP/s ({where})" for rate, where in rates))
    return Workload(inputs=inputs, key=f"mlp_b{batch}", title=f"MLP train step batch {batch}",
                    target="≤ jax.jit and ≤ 1.3× FLOP time at peak",
                    normalize=mlp_gradients(weights), candidates=candidates, notes=notes,
                    skipped=skipped)


def product_split(jitted):
    """``(products, decided)``: the float32 matmuls of ``jitted``'s compiled programs, and
    how many of them a decision reads (``codegen/numpy_products.decision_products``: those
    are NumPy's own OpenBLAS call under the default rule).

    >>> from tracejit import jit
    >>> from tracejit.codegen import blas
    >>> def layer(x, w):
    ...     pre = x @ w
    ...     return np.where(pre > 0, pre @ w.T, 0)
    >>> jitted = jit(cache="memory")(layer)
    >>> x = np.ones((4, 3), np.float32)
    >>> with blas.gemm_override("auto"):
    ...     _ = jitted(x, np.ones((3, 3), np.float32))
    >>> product_split(jitted)
    (2, 1)
    """
    from tracejit.codegen.numpy_products import decision_products

    products = decided = 0
    for variant in jitted._variants:
        for _, path in variant.root.walk():
            for program in (path.program, path.backward):
                if program is None:
                    continue
                decisions = decision_products(program.graph)
                for equation in program.graph.equations:
                    if equation.prim.name == "matmul":
                        products += 1
                        decided += equation.out.name in decisions
    return products, decided


def _blas_kernel():
    from .gemm import _blas_kernel as kernel

    return kernel()


def measure(batches, quick):
    """Peak, then one workload per batch: the ``run_workload`` results, annotated."""
    rounds, sample_seconds = (7, 0.02) if quick else (15, 0.05)
    kernel = _blas_kernel()
    threads = int(os.environ.get("TRACEJIT_NUM_THREADS", "0") or 0) or os.cpu_count()
    peak, who, peaks = peak_gflops(threads)
    results = []
    for batch in batches:
        shape_rate = mask_product_rate(batch)
        result = run_workload(mlp_workload(batch, (peak, who), kernel, peaks.get("OpenBLAS"),
                                           shape_rate), rounds, sample_seconds)
        flop_ms = step_flops(batch) / peak / 1e6
        for row in result["rows"]:
            row["x_flop_time"] = row["median"] / flop_ms if row["median"] else None
            row["x_flop_time_best"] = min(row["samples"]) / flop_ms if row["median"] else None
        result.update(blas_kernel=kernel, peak_gflops=peak, peak_by=who, peaks=peaks,
                      flop_ms=flop_ms, load=os.getloadavg()[0], mask_product_gflops=shape_rate,
                      mask_floor=mask_product_floor(batch, peak, shape_rate))
        results.append(result)
    return results


def format_result(result):
    jax_row = next((row for row in result["rows"] if row["peer"] == "jax.jit"), None)
    floor = (f"; 'auto' floor {result['mask_floor']:.2f}× (x @ w1 at "
             f"{result['mask_product_gflops']:.0f} GFLOP/s)" if result.get("mask_floor") else "")
    lines = [f"  {result['title']}: {result['flop_ms']:.3f} ms of FLOPs at "
             f"{result['peak_gflops']:.0f} GFLOP/s ({result['peak_by']}){floor}; load "
             f"{result['load']:.2f}"]
    for row in result["rows"]:
        if row["median"] is None:
            lines.append(f"    {row['candidate']:22} {row['status']}")
            continue
        versus = (f"  jax/this {jax_row['median'] / row['median']:5.2f} (best "
                  f"{min(jax_row['samples']) / min(row['samples']):5.2f})"
                  if jax_row and jax_row["median"] else "")
        lines.append(f"    {row['candidate']:22} {row['median']:8.3f} ms (best "
                     f"{min(row['samples']):8.3f})  × FLOP time {row['x_flop_time']:5.2f} "
                     f"(best {row['x_flop_time_best']:5.2f}){versus}  {row['status']}")
    return "\n".join(lines)


def run_worker(threads, batches, quick):
    print(f"threads {threads}, OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, OpenBLAS kernel "
          f"{_blas_kernel()}, load {os.getloadavg()[0]:.2f}", flush=True)
    results = measure(batches, quick)
    for result in results:
        print(format_result(result), flush=True)
    print(f"  load average after: {os.getloadavg()[0]:.2f}", flush=True)
    return results


def worker_environment(threads, coretype):
    """``benchmarks.gemm``'s worker environment, and jax.jit on ``threads`` as well."""
    from .gemm import _worker_environment

    environment = _worker_environment(threads, coretype)
    if threads == 1:
        environment["XLA_FLAGS"] = (environment.get("XLA_FLAGS", "") + " --xla_cpu_multi_"
                                    "thread_eigen=false intra_op_parallelism_threads=1").strip()
    return environment


def run_isolated(key, quick):
    """One batch's workload in a fresh worker under this process's environment (for
    ``python -m benchmarks``); a crash becomes the result."""
    batch = int(key.removeprefix("mlp_b"))
    with tempfile.TemporaryDirectory(prefix="tracejit-mlp-") as folder:
        output = Path(folder) / "result.json"
        command = [sys.executable, "-m", "benchmarks.mlp_step", "--worker", "--batches",
                   str(batch), "--worker-output", str(output)] + (["--quick"] * quick)
        completed = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True)
        if completed.returncode != 0 or not output.exists():
            tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
            return dict(key=key, title=f"MLP train step batch {batch}", unit="ms", target="",
                        rounds=0, rows=[], notes=[], skipped={},
                        crash=f"worker died: {tail[0][:300]}")
        return json.loads(output.read_text())[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--blas", nargs="+", default=["Haswell", "unset"],
                        help="OPENBLAS_CORETYPE per run ('unset' removes it)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=RESULTS / "mlp_step.json")
    args = parser.parse_args(argv)
    if args.worker:
        threads = int(os.environ.get("TRACEJIT_NUM_THREADS", "0") or 0) or os.cpu_count()
        results = run_worker(threads, args.batches, args.quick)
        if args.worker_output:
            args.worker_output.write_text(json.dumps(results, default=str))
        return
    runs = []
    for coretype in args.blas:
        for threads in args.threads:
            with tempfile.TemporaryDirectory(prefix="tracejit-mlp-") as folder:
                output = Path(folder) / "result.json"
                command = [sys.executable, "-m", "benchmarks.mlp_step", "--worker",
                           "--worker-output", str(output), "--batches",
                           *map(str, args.batches)] + (["--quick"] * args.quick)
                process = subprocess.run(command, env=worker_environment(threads, coretype),
                                         cwd=REPOSITORY, text=True, stdout=sys.stdout,
                                         stderr=subprocess.PIPE)
                if process.returncode != 0 or not output.exists():
                    print(process.stderr[-3000:])
                    raise SystemExit(f"worker (threads {threads}, {coretype}) failed")
                runs.append(dict(blas_setting=coretype, threads=threads,
                                 workloads=json.loads(output.read_text())))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(dict(runs=runs), indent=1, default=str))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
