"""Compile time against program size: the first call of a chain of 10, 100 and 1000
pointwise ops, tracejit (trace + schedule + LLVM) against jax.jit (trace + XLA), each in a
fresh process (issue 16: "first call ≤ jax.jit's on chains of 10, 100, 1000 ops").

    python -m benchmarks.compile_scaling [--lengths 10 100 1000] [--processes 3]

The chain repeats five ops on a float32 vector of 4096 elements: ``x * 0.999``,
``+ 0.01``, ``tanh``, ``maximum(x, -0.5)``, ``- 0.02`` (one transcendental in five). Each
child process imports its framework, first calls a one-op function (tracejit: the LLVM JIT
and the thread pool start; jax: its backend starts) so that one-time setup is not
charged to the chain, then times the chain's first call (tracejit with an empty
``TRACEJIT_CACHE_DIR``: no disk hit) and a second call. Reported: the median first call
over ``--processes`` children (wall and this process's CPU time, which other load on a
shared machine does not inflate), the load average, and tracejit's compile split from
``stats()``. With ``--phases``, tracejit's first call is also split into its phases (CPU
time of the calling thread: trace and its source rewrite, passes, schedule, lowering,
LLVM optimize and emit, link, wrapper, disk cache) by timers put around the functions
that run them. Results: stdout and ``benchmarks/results/compile_scaling.json``.

With ``--models``, two real models whose Python loops nest with small trip counts, so an
outer loop unrolls around captured inner loops: the deeplearning.ai course's
``conv_backward`` on (2, 6, 6, 3) (as written, and indexing its padded buffers instead of
views of them) and Zhou's range-loop max-pool backward on 8x8x4 (after a 1x1 convolution,
``benchmarks.idioms``). Each child times the first call (CPU and wall)
and counts the LLVM modules it compiled and the programs (pieces) of the loop program,
once as built (loops and segments that differ only in int offsets share a program,
``codegen/loop_sharing.py``) and once with that sharing off, side by side.

    python -m benchmarks.compile_scaling --lengths --models [--processes 3]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results"
LENGTHS = (10, 100, 1000)
SIZE = 4096


def chain(xp, length):
    """``length`` pointwise ops over the module ``xp`` (numpy or jax.numpy)."""
    steps = [lambda x: x * 0.999, lambda x: x + 0.01, xp.tanh,
             lambda x: xp.maximum(x, -0.5), lambda x: x - 0.02]

    def function(x):
        for index in range(length):
            x = steps[index % len(steps)](x)
        return x
    return function


# (phase, module, attribute path): what --phases times, outermost first. A phase nested in
# another (the source rewrite in the trace; parse, optimize and emit in LLVM) is also in
# its parent's time.
PHASES = (
    ("trace", "tracejit.runtime.misses", "trace_with_gradients"),
    ("trace: source rewrite", "tracejit.tracer.rewritten_code", "rewrite_tree"),
    ("passes", "tracejit.codegen.program", "optimize"),
    ("schedule", "tracejit.codegen.program", "make_schedule"),
    ("lowering", "tracejit.codegen.lowering", "ProgramLowering.build"),
    ("llvm", "tracejit.codegen.llvm", "compile_module"),
    ("llvm: parse", "llvmlite.binding", "parse_assembly"),
    ("llvm: optimize", "llvmlite.binding.newpassmanagers", "ModulePassManager.run"),
    ("llvm: emit", "llvmlite.binding.targets", "TargetMachine.emit_object"),
    ("link", "tracejit.codegen.program", "link"),
    ("wrapper", "tracejit.codegen.program", "wrapper_source"),
    ("cache: load", "tracejit.runtime.misses", "Misses._load_from_disk"),
    ("cache: store", "tracejit.runtime.misses", "Misses._store_to_disk"),
)


def _timed(function, phase, seconds):
    """``function``, adding the CPU seconds (this thread's) of each call to ``seconds``."""
    @functools.wraps(function)
    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[phase] = seconds.get(phase, 0.0) + time.thread_time() - start
    return timed


@contextlib.contextmanager
def _phase_timers(seconds):
    """Time each phase of ``PHASES`` into ``seconds`` while in the block; a phase whose
    function is not where ``PHASES`` says is left out."""
    undo = []
    for phase, module_name, path in PHASES:
        *owners, name = path.split(".")
        try:
            owner = importlib.import_module(module_name)
            for part in owners:
                owner = getattr(owner, part)
            original = getattr(owner, name)
        except (ImportError, AttributeError):
            continue
        setattr(owner, name, _timed(original, phase, seconds))
        undo.append((owner, name, original))
    try:
        yield seconds
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def _child(framework, length, phases=False):
    x = np.random.default_rng(0).standard_normal(SIZE).astype(np.float32)
    want = chain(np, length)(x)
    if framework == "tracejit":
        import tracejit

        tracejit.jit(lambda v: v + 1.0)(x)  # LLVM JIT and pool start: not the chain's cost
        # sync: the first call waits for its compile (under 'auto' a long one would go to
        # the background and the first call time would be the trace's alone)
        compiled = tracejit.jit(chain(np, length), compile="sync")

        def call():
            return compiled(x)
    else:
        import jax
        import jax.numpy as jnp

        device_x = jnp.asarray(x)
        jax.block_until_ready(jax.jit(lambda v: v + 1.0)(device_x))
        compiled = jax.jit(chain(jnp, length))

        def call():
            return jax.block_until_ready(compiled(device_x))
    seconds = {}
    timers = _phase_timers(seconds) if phases and framework == "tracejit" else (
        contextlib.nullcontext())
    with timers:
        wall, cpu = time.perf_counter(), time.process_time()
        first = np.asarray(call())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    start = time.perf_counter()
    second = np.asarray(call())
    second_seconds = time.perf_counter() - start
    facts = dict(first_wall_s=wall, first_cpu_s=cpu, second_s=second_seconds,
                 max_abs_diff=float(max(np.max(np.abs(first - want)),
                                        np.max(np.abs(second - want)))))
    if framework == "tracejit":
        stats = compiled.stats()
        facts.update(compiles=stats["compiles"], eager_calls=stats["eager_calls"],
                     compile_seconds=stats.get("compile_seconds"), phases=seconds)
    print("RESULT " + json.dumps(facts, default=str), flush=True)


def conv_backward(dZ, A_prev, W, pad):
    """The deeplearning.ai course's conv_backward ("Convolution model - Step by Step"),
    stride 1: four nested loops over m, n_H, n_W, n_C accumulating into views."""
    m, n_H, n_W, n_C = dZ.shape
    f = W.shape[0]
    dA_prev = np.zeros(A_prev.shape)
    dW = np.zeros(W.shape)
    A_prev_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="constant",
                        constant_values=(0, 0))  # the course's zero_pad
    dA_prev_pad = np.pad(dA_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="constant",
                         constant_values=(0, 0))
    for i in range(m):
        a_prev_pad = A_prev_pad[i]
        da_prev_pad = dA_prev_pad[i]
        for h in range(n_H):
            for w in range(n_W):
                for c in range(n_C):
                    a_slice = a_prev_pad[h:h + f, w:w + f, :]
                    da_prev_pad[h:h + f, w:w + f, :] += W[:, :, :, c] * dZ[i, h, w, c]
                    dW[:, :, :, c] += a_slice * dZ[i, h, w, c]
        dA_prev[i, :, :, :] = da_prev_pad[pad:-pad, pad:-pad, :]
    return dA_prev, dW


def conv_backward_indexed(dZ, A_prev, W, pad):
    """``conv_backward`` indexing the padded buffers (``dA_prev_pad[i, h:h + f, ...]``)
    instead of writing through views of them (``da_prev_pad = dA_prev_pad[i]``)."""
    m, n_H, n_W, n_C = dZ.shape
    f = W.shape[0]
    dW = np.zeros(W.shape)
    A_prev_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    dA_prev_pad = np.zeros(A_prev_pad.shape)
    for i in range(m):
        for h in range(n_H):
            for w in range(n_W):
                for c in range(n_C):
                    dA_prev_pad[i, h:h + f, w:w + f, :] += W[:, :, :, c] * dZ[i, h, w, c]
                    dW[:, :, :, c] += A_prev_pad[i, h:h + f, w:w + f, :] * dZ[i, h, w, c]
    return dA_prev_pad[:, pad:-pad, pad:-pad, :], dW


def _model(name):
    """``(function, arguments)`` of the model row ``name``."""
    rng = np.random.default_rng(0)
    if name.startswith("conv_backward"):
        function = conv_backward if name == "conv_backward" else conv_backward_indexed
        return function, (rng.standard_normal((2, 6, 6, 3)),
                               rng.standard_normal((2, 6, 6, 3)),
                               rng.standard_normal((3, 3, 3, 3)), 1)
    from .idioms import max_pool_backprop

    return max_pool_backprop, (rng.standard_normal((8, 8, 8)), rng.standard_normal((8, 4)),
                               rng.standard_normal((4, 4, 4)))


MODELS = {"conv_backward": "course conv_backward (2, 6, 6, 3)",
          "conv_backward_indexed": "conv_backward indexing its buffers (2, 6, 6, 3)",
          "max_pool": "range-loop max pool backward 8x8x4"}


def _child_model(name, sharing):
    import tracejit
    from tracejit.codegen import llvm, loop_sharing

    modules = []
    compile_module = llvm.compile_module

    def counted(*args, **kwargs):
        modules.append(1)
        return compile_module(*args, **kwargs)

    llvm.compile_module = counted
    if sharing == "unshared":
        loop_sharing.share = lambda bodies: {}
    function, arguments = _model(name)
    want = function(*arguments)
    tracejit.jit(lambda v: v + 1.0)(np.ones(3))  # LLVM JIT and pool start: not the model's
    modules.clear()
    compiled = tracejit.jit(function, compile="sync")  # the compile's time, as above
    wall, cpu = time.perf_counter(), time.process_time()
    first = compiled(*arguments)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    compiled(*arguments)
    program = compiled._variants[0].root.program
    pieces = getattr(program, "pieces", [program])
    first, want = (first, want) if isinstance(want, tuple) else ((first,), (want,))
    stats = compiled.stats()
    facts = dict(first_wall_s=wall, first_cpu_s=cpu, modules=len(modules), pieces=len(pieces),
                 steps=len(getattr(program, "steps", [])), compiled_calls=stats["compiled_calls"],
                 eager_calls=stats["eager_calls"],
                 max_abs_diff=max(float(np.max(np.abs(np.asarray(got) - expected)))
                                  for got, expected in zip(first, want)))
    print("RESULT " + json.dumps(facts, default=str), flush=True)


def measure_model(name, processes, sharing="shared"):
    """The model row ``name``'s first call in ``processes`` fresh children (medians)."""
    return _median_runs(["--child-model", name, sharing], processes,
                        ("first_wall_s", "first_cpu_s", "modules", "pieces"))


def _median_runs(arguments, processes, keys):
    runs = []
    for _ in range(processes):
        with tempfile.TemporaryDirectory(prefix="tracejit-scaling-") as cache:
            environment = dict(os.environ, TRACEJIT_CACHE_DIR=cache)
            completed = subprocess.run(
                [sys.executable, "-m", "benchmarks.compile_scaling", *arguments],
                cwd=REPOSITORY, env=environment, capture_output=True, text=True)
        lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
        if completed.returncode != 0 or not lines:
            return dict(crash=completed.stderr.strip().splitlines()[-1:])
        runs.append(json.loads(lines[-1][len("RESULT "):]))
    summary = {key: statistics.median(run[key] for run in runs) for key in keys}
    return dict(summary, runs=runs, max_abs_diff=max(run["max_abs_diff"] for run in runs),
                load=os.getloadavg()[0])


def measure(framework, length, processes, phases=False):
    runs = []
    for _ in range(processes):
        with tempfile.TemporaryDirectory(prefix="tracejit-scaling-") as cache:
            environment = dict(os.environ, TRACEJIT_CACHE_DIR=cache)
            completed = subprocess.run(
                [sys.executable, "-m", "benchmarks.compile_scaling", "--child", framework,
                 str(length)] + (["--phases"] if phases else []),
                cwd=REPOSITORY, env=environment, capture_output=True, text=True)
        lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
        if completed.returncode != 0 or not lines:
            return dict(crash=completed.stderr.strip().splitlines()[-1:])
        runs.append(json.loads(lines[-1][len("RESULT "):]))
    summary = {key: statistics.median(run[key] for run in runs)
               for key in ("first_wall_s", "first_cpu_s", "second_s")}
    phase_names = sorted({name for run in runs for name in run.get("phases") or {}})
    if phase_names:
        summary["phases_s"] = {name: statistics.median(run["phases"].get(name, 0.0)
                                                        for run in runs)
                               for name in phase_names}
    return dict(summary, runs=runs, max_abs_diff=max(run["max_abs_diff"] for run in runs),
                load=os.getloadavg()[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    parser.add_argument("--models", action="store_true",
                        help="also the first call of conv_backward and a range-loop max "
                             "pool, with loop sharing and without (CPU s, LLVM modules)")
    parser.add_argument("--child-model", nargs=2, metavar=("MODEL", "SHARING"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--frameworks", nargs="+", default=["tracejit", "jax"])
    parser.add_argument("--phases", action="store_true",
                        help="split tracejit's first call into its phases (CPU ms)")
    parser.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "LENGTH"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=RESULTS / "compile_scaling.json")
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.phases)
        return
    if args.child_model:
        _child_model(*args.child_model)
        return
    print(f"first call of a pointwise chain on float32[{SIZE}], median of {args.processes} "
          f"fresh processes; load {os.getloadavg()[0]:.2f}")
    rows = []
    for length in args.lengths:
        row = dict(length=length)
        for framework in args.frameworks:
            row[framework] = measure(framework, length, args.processes, args.phases)
        rows.append(row)
        parts = []
        for framework in args.frameworks:
            result = row[framework]
            if "crash" in result:
                parts.append(f"{framework} CRASH {result['crash']}")
                continue
            parts.append(f"{framework} {result['first_wall_s'] * 1e3:8.0f} ms "
                         f"({result['first_cpu_s'] * 1e3:6.0f} ms CPU, max diff "
                         f"{result['max_abs_diff']:.1e})")
        ratio = ""
        if all("first_cpu_s" in row.get(name, {}) for name in ("tracejit", "jax")):
            ours, theirs = row["tracejit"], row["jax"]
            ratio = (f"  tracejit/jax {ours['first_wall_s'] / theirs['first_wall_s']:.2f} "
                     f"(CPU {ours['first_cpu_s'] / theirs['first_cpu_s']:.2f})")
        print(f"  {length:5} ops: " + "; ".join(parts) + ratio
              + f"; load {os.getloadavg()[0]:.2f}", flush=True)
        split = row.get("tracejit", {}).get("phases_s")
        if split:
            order = [phase for phase, _, _ in PHASES if phase in split]
            print("             tracejit phases (CPU ms, median): " + ", ".join(
                f"{phase} {split[phase] * 1e3:.1f}" for phase in order), flush=True)
    models = {}
    if args.models:
        print(f"first call of models with nested small loops, median of {args.processes} "
              "fresh processes (CPU s; the machine may be busy: wall s moves more)")
    for name in MODELS if args.models else ():
        models[name] = {sharing: measure_model(name, args.processes, sharing)
                        for sharing in ("unshared", "shared")}
        parts = []
        for sharing, result in models[name].items():
            if "crash" in result:
                parts.append(f"{sharing} CRASH {result['crash']}")
                continue
            parts.append(f"{sharing} {result['first_cpu_s']:6.2f} s CPU "
                         f"({result['first_wall_s']:6.2f} s wall), {result['modules']:3.0f} "
                         f"LLVM modules, {result['pieces']:3.0f} programs, max diff "
                         f"{result['max_abs_diff']:.1e}")
        print(f"  {MODELS[name]}: " + "; ".join(parts) + f"; load {os.getloadavg()[0]:.2f}",
              flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(dict(size=SIZE, rows=rows, models=models), indent=1,
                                      default=str))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
