"""Where the time goes: per-kernel profiles of the DESIGN.md §6 workloads, each next to a
reference the machine can do, measured in one process.

    python -m benchmarks.profile [--quick]

Every workload of ``benchmarks.workloads`` runs under ``jit`` with ``TRACEJIT_PROFILE=1``
(atomic counters of calls and wall time around each kernel call). For each one it prints
the wall time per call, the time inside each kernel, and what is left outside the kernels
(entry guards, output allocation, the Python around the call). The references:

* streaming: a compiled ``x * s`` over an array of the fused workload's size, so a
  pointwise or row-reduction kernel's time can be read against the time just to read and
  write its bytes (when the two are close, the kernel is memory-bound and done);
* BLAS: ``np.matmul`` alone on the MLP step's five products (the OpenBLAS tracejit's
  matmul kernels call), so the matmul kernels' time can be read against the gemm's own.

The batch-64 MLP step (``benchmarks.mlp_step``'s ``mlp_b64`` row) is also profiled under
the GEMM settings ``auto`` and ``blas`` interleaved, step by step: each kernel's best and
median time over the steps (a best is what a step takes when nothing else holds up the
cores), and the step against its FLOP time at the measured peak (``mlp_step.peak_gflops``:
the faster of one core's rate times the threads and the all-thread rate). Under ``auto``
the first product, which the relu mask reads, is NumPy's own OpenBLAS call
(``codegen/numpy_products.py``), and OpenBLAS's worker spins on its core for ~0.1 ms
after it (``codegen/blas.py``; at its old 2**20 cycles, ~0.4 ms, into dW1's own GEMM);
with the product at OpenBLAS's rate the step cannot go below ``mlp_step.mask_product_floor``
× its FLOP time, printed as the 'auto' floor. Under ``blas`` every product is OpenBLAS's,
so the two settings' kernels set the own GEMM against OpenBLAS product by product (not
``own``: it puts the mask's product on the own GEMM too, whose check against its bound
fails on ordinary data, and the step runs eagerly).

The transformer block (``examples/transformer_block.py``, the ``transformer_block`` row)
is profiled kernel by kernel the same way, best and median, each matmul kernel's GFLOP/s
against that peak, and the block's FLOP time at it: the floor its products alone set
(8.2 ms of the ~9.5 the block takes: the rest is the kernels beside them, softmax, layer
norm, the values' copy into heads and the merge of the heads (queries and keys are read in
place: ``codegen/strided_views.py``), and the GELU in the MLP's epilogue).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from tracejit import jit

from . import workloads as w
from .harness import machine_facts, machine_line, seconds_per_call


def mean_seconds(call, runs):
    """Mean wall time of ``runs`` calls, after one untimed call."""
    call()
    return seconds_per_call(call, runs)


def kernel_seconds(jitted):
    """``{kernel name: total seconds}`` over every compiled program of ``jitted``."""
    totals = {}
    for variant in jitted._variants:
        for _, path in variant.root.walk():
            for program in (path.program, path.backward):
                for kernel, _, seconds in program.profile() if program else ():
                    totals[kernel.name] = totals.get(kernel.name, 0.0) + seconds
    return totals


def report(title, jitted, call, runs):
    """Mean wall time per run of ``call`` over ``runs`` runs, and the time each kernel
    took inside those same runs (the profile counters' difference)."""
    call()
    before = kernel_seconds(jitted)
    wall = mean_seconds(call, runs)
    per_run = {name: (seconds - before.get(name, 0.0)) / (runs + 1)
               for name, seconds in kernel_seconds(jitted).items()}
    inside = sum(per_run.values())
    print(f"\n{title}: {wall * 1e3:.3f} ms per run, {inside * 1e3:.3f} ms in kernels "
          f"({100 * inside / wall:.0f}%), {(wall - inside) * 1e3:.3f} ms outside")
    for name, seconds in sorted(per_run.items(), key=lambda row: -row[1])[:8]:
        print(f"  {name:36} {seconds * 1e3:9.3f} ms {100 * seconds / wall:5.1f}%")
    return wall, per_run


def fused(title, function, inputs, runs, without=None):
    """A one-kernel workload against streaming its bytes (and against ``without``, the
    same workload with its transcendental left out, when given)."""
    jitted = jit(cache="memory")(function)
    wall, _ = report(title, jitted, lambda: jitted(*inputs), runs)
    x = inputs[0]
    scale = jit(cache="memory")(lambda x: x * np.float32(1.5))
    stream = mean_seconds(lambda: scale(x), runs)
    print(f"  streaming x * s over the same {x.shape} f32 ({2 * x.nbytes / 1e6:.0f} MB read "
          f"+ written, L3-resident on this machine): {stream * 1e3:.3f} ms "
          f"({2 * x.nbytes / stream / 1e9:.0f} GB/s); the workload takes {wall / stream:.2f}x")
    if without is not None:
        plain = jit(cache="memory")(without)
        alone = mean_seconds(lambda: plain(*inputs), runs)
        print(f"  {without.__doc__}: {alone * 1e3:.3f} ms")


def affine(x, w, b):
    """x * w + b alone (gelu left out)"""
    return x * w + b


def mlp(runs):
    rng = np.random.default_rng(w.SEED)
    inputs = w.mlp_inputs(rng)
    x, labels = inputs["x"], inputs["labels"]
    weights = [inputs[name] for name in ("w1", "b1", "w2", "b2")]
    for label, function in (("manual backward", w.mlp_train_step),
                            ("jit(value_and_grad)", w.mlp_value_and_grad_step)):
        jitted = jit(cache="memory")(function)
        wall, rows = report(f"MLP train step, {label}", jitted,
                            lambda jitted=jitted: jitted(x, labels, *weights, w.LEARNING_RATE),
                            runs)
        matmuls = sum(seconds for name, seconds in rows.items() if "matmul" in name)
        print(f"  matmul kernels {matmuls * 1e3:.3f} ms, other kernels "
              f"{(sum(rows.values()) - matmuls) * 1e3:.3f} ms")
    w1, w2 = weights[0], weights[2]
    hidden = np.maximum(x @ w1, 0)
    d_logits = np.ones((x.shape[0], w2.shape[1]), np.float32)
    d_pre = d_logits @ w2.T
    products = [(x, w1), (hidden, w2), (d_logits, w2.T), (x.T, d_pre), (hidden.T, d_logits)]
    blas = mean_seconds(lambda: [a @ b for a, b in products], runs)
    print(f"  NumPy's BLAS alone on the step's five products: {blas * 1e3:.3f} ms")


def step_profiles(batch, settings, steps):
    """``{setting: (step seconds, {kernel: seconds per step})}`` of the MLP train step at
    ``batch``, each setting compiled under ``blas.gemm_override`` and the settings run in
    turn, one step each, ``steps`` times."""
    from tracejit.codegen import blas

    from .mlp_step import mlp_inputs

    inputs = mlp_inputs(np.random.default_rng(batch), batch)
    arguments = (inputs["x"], inputs["labels"], inputs["w1"], inputs["b1"], inputs["w2"],
                 inputs["b2"], w.LEARNING_RATE)
    compiled = {}
    for setting in settings:
        compiled[setting] = jit(cache="memory")(w.mlp_train_step)
        with blas.gemm_override(setting):  # the first call compiles under the setting
            compiled[setting](*arguments)
    profiles = {setting: ([], {}) for setting in settings}
    for _ in range(steps):
        for setting, jitted in compiled.items():
            walls, kernels = profiles[setting]
            jitted(*arguments)  # the previous setting's threads have had a step to settle
            _timed_call(jitted, arguments, walls, kernels)
    for setting, jitted in compiled.items():
        eager = jitted.stats()["eager_calls"]
        if eager:  # ('own': the relu mask's check on the own product fails)
            print(f"  {setting}: eager calls {eager}")
    return profiles


def _timed_call(jitted, arguments, walls, kernels):
    """Call ``jitted`` once: its wall time joins ``walls``, each kernel's seconds in that
    call ``kernels[name]``."""
    before = kernel_seconds(jitted)
    start = time.perf_counter()
    jitted(*arguments)
    walls.append(time.perf_counter() - start)
    for name, seconds in kernel_seconds(jitted).items():
        kernels.setdefault(name, []).append(seconds - before.get(name, 0.0))


def mlp_batch_64(runs, batch=64):
    """Where the batch-64 step's time goes under ``auto`` and ``blas``, kernel by kernel."""
    from tracejit.codegen.parallel import thread_count

    from .mlp_step import mask_product_floor, peak_gflops, step_flops

    peak, who, peaks = peak_gflops(thread_count())
    flop_ms = step_flops(batch) / peak / 1e6
    print(f"\nMLP train step batch {batch}, GEMM settings interleaved, {runs} steps each: "
          f"its matmul FLOPs take {flop_ms:.3f} ms at {peak:.0f} GFLOP/s ({who}); "
          "best / median ms")
    if peaks.get("OpenBLAS"):
        print(f"  'auto' floor: the relu mask's product at OpenBLAS's {peaks['OpenBLAS']:.0f} "
              f"GFLOP/s, the rest at the peak: "
              f"{mask_product_floor(batch, peak, peaks['OpenBLAS']):.2f}x FLOP time")
    for setting, (walls, kernels) in step_profiles(batch, ("auto", "blas"), runs).items():
        best, median = min(walls) * 1e3, float(np.median(walls)) * 1e3
        print(f"  {setting}: step {best:.3f} / {median:.3f} ({best / flop_ms:.2f}x / "
              f"{median / flop_ms:.2f}x FLOP time)")
        for name, seconds in sorted(kernels.items(), key=lambda row: -min(row[1]))[:6]:
            print(f"    {name:34} {min(seconds) * 1e3:7.3f} / {np.median(seconds) * 1e3:7.3f}")
    print("  the two big products alone, best ms (the own GEMM without its SGD epilogue):")
    for name, seconds in product_references(batch, runs).items():
        print(f"    {name:58} {seconds * 1e3:7.3f}")


def product_references(batch, runs):
    """Best wall seconds of the step's two big products called alone: ``x @ w1`` by NumPy
    (under 'auto' the relu mask's product is this very call), ``dW1 = x.T @ d_pre`` on
    the own GEMM and by NumPy, and the own GEMM's ``dW1`` right after NumPy's ``x @ w1``,
    as in the step, where OpenBLAS's worker still spins on a core (``codegen/blas.py``).
    Set against the step's kernels they split its time into the floor (NumPy's product),
    the own GEMM's rate at this shape, the wait on OpenBLAS's spinning worker and the
    rest."""
    from tracejit.codegen import gemm

    from .mlp_step import mlp_inputs

    inputs = mlp_inputs(np.random.default_rng(batch), batch)
    x, w1 = inputs["x"], inputs["w1"]
    d_pre = np.maximum(x @ w1, 0)
    forward, d_w1 = np.empty_like(d_pre), np.empty_like(w1)
    calls = {"NumPy x @ w1": lambda: np.matmul(x, w1, out=forward),
             "NumPy x.T @ d_pre": lambda: np.matmul(x.T, d_pre, out=d_w1)}
    if gemm.supported():
        own = gemm.prepared(x.T, d_pre, d_w1)
        calls["own GEMM x.T @ d_pre"] = own

        def after_numpy():
            np.matmul(x, w1, out=forward)
            start = time.perf_counter()
            own()
            return time.perf_counter() - start
        calls["own GEMM x.T @ d_pre right after NumPy's x @ w1 (timed alone)"] = after_numpy
    best = {}
    for name, call in calls.items():
        call()
        time.sleep(0.05)  # the previous call's threads stop spinning
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            inside = call()
            times.append(inside if isinstance(inside, float) else time.perf_counter() - start)
        best[name] = min(times)
    return best


def matmul_flops(jitted):
    """``{kernel name: FLOPs}`` of the matmul kernels of ``jitted``'s programs (2 x the
    multiply-adds of the whole product: a causal band's kernel does about half)."""
    from tracejit.codegen.matmul import batch_shape
    from tracejit.codegen.schedule import schedule
    from tracejit.tracer.shapes import size_of

    flops = {}
    for variant in jitted._variants:
        for _, path in variant.root.walk():
            for program in (path.program, path.backward):
                if program is None:
                    continue
                for kernel in schedule(program.graph, views_of_results=True).kernels:
                    if kernel.kind != "matmul":
                        continue
                    a, b = (atom.aval.shape for atom in kernel.anchor.inputs)
                    rows, columns = (a[-2] if len(a) > 1 else 1), (b[-1] if len(b) > 1 else 1)
                    flops[kernel.name] = 2.0 * size_of(batch_shape(
                        kernel.anchor)) * rows * a[-1] * columns
    return flops


def transformer(runs):
    """The transformer block (the transformer_block row), kernel by kernel, best and
    median over ``runs`` calls, eager NumPy's calls in between: each matmul kernel's
    GFLOP/s against the peak (``mlp_step.peak_gflops``), and the block's FLOP time
    there, the floor its products alone set."""
    from tracejit.codegen.parallel import thread_count

    from .mlp_step import peak_gflops

    example = w.transformer_example()
    rng = np.random.default_rng(w.SEED)
    sizes = w.TRANSFORMER_SIZES
    params = example.init_params(rng, sizes["d_model"], sizes["hidden"])
    x = rng.standard_normal((sizes["batch"], sizes["seq"], sizes["d_model"]),
                            dtype=np.float32)
    arguments = (params, x, sizes["heads"])
    jitted = jit(cache="memory")(example.transformer_block)
    jitted(*arguments)
    walls, eager, kernels = [], [], {}
    for _ in range(runs):
        start = time.perf_counter()
        example.transformer_block(*arguments)
        eager.append(time.perf_counter() - start)
        jitted(*arguments)  # NumPy's threads have had a call to settle
        _timed_call(jitted, arguments, walls, kernels)
    flops = matmul_flops(jitted)
    peak, who, _ = peak_gflops(thread_count())
    floor = sum(flops.values()) / peak / 1e6
    best, median = min(walls) * 1e3, float(np.median(walls)) * 1e3
    print(f"\ntransformer block {sizes['batch']}x{sizes['seq']}x{sizes['d_model']}, "
          f"{runs} calls: {best:.3f} / {median:.3f} ms best / median (eager NumPy "
          f"{min(eager) * 1e3:.3f} / {np.median(eager) * 1e3:.3f}); its products take "
          f"{floor:.3f} ms at {peak:.0f} GFLOP/s ({who}), causal bands counted whole; "
          "best / median ms")
    rest = 0.0
    for name, seconds in sorted(kernels.items(), key=lambda row: -min(row[1])):
        note = ""
        if name in flops:
            note = f"  {flops[name] / min(seconds) / 1e9:5.0f} GFLOP/s"
        else:
            rest += min(seconds)
        print(f"  {name:34} {min(seconds) * 1e3:7.3f} / {np.median(seconds) * 1e3:7.3f}{note}")
    outside = [wall - sum(seconds[call] for seconds in kernels.values())
               for call, wall in enumerate(walls)]
    print(f"  kernels other than matmul: {rest * 1e3:.3f} ms (their bests); outside "
          f"kernels: {min(outside) * 1e3:.3f} / {np.median(outside) * 1e3:.3f} ms")


def rnn(runs):
    rng = np.random.default_rng(w.SEED)
    inputs = w.rnn_inputs(rng)
    sequences, wx, wh, b = inputs.values()
    batches = w.bucketed_batches(sequences)
    cell = jit(cache="memory")(w.rnn_cell)
    steps = sum(x.shape[0] for x, _, _ in batches)
    wall, rows = report(f"RNN, jit cell ({steps} steps per run)", cell,
                        lambda: w.run_bucketed_cells(cell, batches, wx, wh, b),
                        runs)
    print(f"  per step: {wall / steps * 1e6:.1f} us wall, "
          f"{sum(rows.values()) / steps * 1e6:.1f} us in the cell's kernels")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args(argv)
    # Read by every jit() made from here on (not at import: importing this module for its
    # helpers must not turn profiling on in the importer's process, e.g. a test run)
    os.environ["TRACEJIT_PROFILE"] = "1"
    runs = 10 if args.quick else 100
    print(machine_line(machine_facts()))
    rng = np.random.default_rng(w.SEED)
    gelu = list(w.gelu_inputs(rng).values())
    fused("gelu(x*w+b)", w.gelu_affine, gelu, runs, without=affine)
    x = rng.standard_normal(w.NORM_SHAPE, dtype=np.float32)
    fused("layer_norm -> softmax", w.layer_norm_softmax, [x], runs)
    mlp(runs)
    mlp_batch_64(2 * runs)
    transformer(runs)
    rnn(max(1, runs // 10))


if __name__ == "__main__":
    main()
