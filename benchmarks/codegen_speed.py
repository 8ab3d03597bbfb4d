"""Compiled kernels against NumPy eager: fused elementwise and row-reduction workloads, and
the compile time of a program.

    python -m benchmarks.codegen_speed [--quick]

Two workloads run side by side in one process, interleaved call by call, median wall
time per call:

* ``gelu(x * w + b)``: x float32 2048x2048, w and b float32 of shape 2048
  (goal: the compiled program >= 6x NumPy);
* ``softmax(layer_norm(x))`` over rows: x float32 8192x512 (goal: >= 5x NumPy).

The compiled ``Program`` is called directly (no dispatch, no entry guards). numexpr,
torch (eager and torch.compile) and jax.jit join the table when they are importable.
Then the compile time of each program and of an MLP forward (x @ W1 + b1 -> relu ->
@ W2 + b2 -> softmax, 512x784 -> 1024 -> 10; goal <= 150 ms of codegen), split into trace
and codegen phases (``Program.compile_seconds``; "total" also covers linking the object
code). A tiny function is traced and compiled first, so one-time setup (the LLVM JIT, the
tracer's source rewriting of ``tracejit.nn``) is not charged to the first workload.
Results go to stdout and ``benchmarks/results/codegen_speed.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import numpy as np

from tracejit import codegen, nn
from tracejit.tracer import trace

from .harness import machine_facts

GOALS = {"gelu(x*w+b)": 6.0, "layer_norm->softmax": 5.0}  # speed-up over NumPy
MLP_COMPILE_GOAL_MS = 150.0
RESULTS_PATH = Path(__file__).resolve().parent / "results" / "codegen_speed.json"


# --- workloads -------------------------------------------------------------------------
def gelu_affine(x, w, b):
    return nn.gelu(x * w + b)


def layer_norm_softmax(x):
    return nn.softmax(nn.layer_norm(x), axis=-1)


def mlp_forward(x, w1, b1, w2, b2):
    hidden = nn.relu(x @ w1 + b1)
    return nn.softmax(hidden @ w2 + b2, axis=-1)


def workloads(rng):
    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    return {
        "gelu(x*w+b)": (gelu_affine, (normal(2048, 2048), normal(2048), normal(2048))),
        "layer_norm->softmax": (layer_norm_softmax, (normal(8192, 512),)),
    }


def mlp_arguments(rng):
    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05)

    return (normal(512, 784), normal(784, 1024), normal(1024), normal(1024, 10), normal(10))


# --- peers (each skipped silently when not installed) ----------------------------------
def numexpr_peers(name, arguments):
    try:
        import numexpr
    except ImportError:
        return {}
    if name != "gelu(x*w+b)":
        return {}  # numexpr reduces only as the outermost operation: no softmax rows
    x, w, b = arguments
    expression = ("0.5 * (x * w + b) * (1 + tanh(0.7978845608028654 * ((x * w + b) + "
                  "0.044715 * (x * w + b) ** 3)))")
    return {"numexpr": lambda: numexpr.evaluate(expression, local_dict=dict(x=x, w=w, b=b))}


def torch_peers(name, arguments):
    try:
        import torch
    except ImportError:
        return {}
    tensors = [torch.from_numpy(argument) for argument in arguments]
    if name == "gelu(x*w+b)":
        def function(x, w, b):
            return torch.nn.functional.gelu(x * w + b, approximate="tanh")
    else:
        def function(x):
            normalized = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5)
            return torch.softmax(normalized, dim=-1)
    peers = {"torch eager": lambda: function(*tensors)}
    try:
        compiled_function = torch.compile(function)
        compiled_function(*tensors)
        peers["torch.compile"] = lambda: compiled_function(*tensors)
    except Exception:  # noqa: BLE001 - no working compiler backend here: leave it out
        pass
    return peers


def jax_peers(name, arguments):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    if name == "gelu(x*w+b)":
        def function(x, w, b):
            return jax.nn.gelu(x * w + b, approximate=True)
    else:
        def function(x):
            mean = jnp.mean(x, axis=-1, keepdims=True)
            centered = x - mean
            normalized = centered / jnp.sqrt(jnp.mean(centered * centered, -1, keepdims=True)
                                             + 1e-5)
            return jax.nn.softmax(normalized, axis=-1)
    jitted = jax.jit(function)
    device_arguments = [jnp.asarray(argument) for argument in arguments]
    jitted(*device_arguments).block_until_ready()
    return {"jax.jit": lambda: jitted(*device_arguments).block_until_ready()}


# --- measurement -----------------------------------------------------------------------
def compile_program(function, arguments):
    """Trace and compile; the program and the seconds of each phase."""
    start = time.perf_counter()
    traced = trace(function, *arguments)
    trace_seconds = time.perf_counter() - start
    program = codegen.compile(traced.graph)
    seconds = dict(trace=trace_seconds, **program.compile_seconds)
    return program, seconds


def interleaved(callables, repeats):
    """Median seconds per call of each callable, timed round by round in turn."""
    samples = {name: [] for name in callables}
    for call in callables.values():
        call()  # warm up
    for _ in range(repeats):
        for name, call in callables.items():
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def max_relative_difference(actual, expected):
    expected = np.asarray(expected, np.float64)
    scale = np.max(np.abs(expected))
    return float(np.max(np.abs(np.asarray(actual, np.float64) - expected)) / scale)


def run_workload(name, function, arguments, repeats):
    program, seconds = compile_program(function, arguments)
    difference = max_relative_difference(program(*arguments)[0], function(*arguments))
    callables = {
        "numpy": lambda: function(*arguments),
        "tracejit": lambda: program(*arguments),
    }
    for peers in (numexpr_peers, torch_peers, jax_peers):
        callables.update(peers(name, arguments))
    medians = interleaved(callables, repeats)
    speedup = medians["numpy"] / medians["tracejit"]
    return dict(
        workload=name,
        ms={peer: value * 1e3 for peer, value in medians.items()},
        speedup=speedup,
        goal_speedup=GOALS[name],
        meets_goal=speedup >= GOALS[name],
        kernels=[kernel.kind for kernel in program.kernels],
        compile_ms={phase: value * 1e3 for phase, value in seconds.items()},
        max_relative_difference=difference,
        repeats=repeats,
    )


def mlp_compile(repeats):
    """Median trace and codegen time of the MLP forward over ``repeats`` fresh compiles."""
    arguments = mlp_arguments(np.random.default_rng(1))
    samples = [compile_program(mlp_forward, arguments) for _ in range(repeats)]
    program = samples[-1][0]
    phases = {phase: statistics.median(seconds[phase] for _, seconds in samples) * 1e3
              for phase in samples[0][1]}
    end_to_end = statistics.median(seconds["trace"] + seconds["total"] for _, seconds in samples)
    timings = interleaved({"numpy": lambda: mlp_forward(*arguments),
                           "tracejit": lambda: program(*arguments)}, max(repeats, 5))
    return dict(
        workload="mlp forward 512x784->1024->10 (compile)",
        compile_ms=phases,
        trace_plus_compile_ms=end_to_end * 1e3,
        goal_ms=MLP_COMPILE_GOAL_MS,
        meets_goal=phases["total"] <= MLP_COMPILE_GOAL_MS,
        kernels=[kernel.kind for kernel in program.kernels],
        run_ms={peer: value * 1e3 for peer, value in timings.items()},
        max_relative_difference=max_relative_difference(program(*arguments)[0],
                                                        mlp_forward(*arguments)),
        repeats=repeats,
    )


# --- report ----------------------------------------------------------------------------
def format_speed(rows):
    peers = sorted({peer for row in rows for peer in row["ms"]} - {"numpy", "tracejit"})
    header = f"{'workload':<22}{'numpy ms':>10}{'tracejit ms':>13}{'speed-up':>10}{'goal':>7}"
    header += "".join(f"{peer + ' ms':>16}" for peer in peers) + "  status"
    lines = [header, "-" * len(header)]
    for row in rows:
        line = (f"{row['workload']:<22}{row['ms']['numpy']:>10.2f}{row['ms']['tracejit']:>13.2f}"
                f"{row['speedup']:>9.1f}x{row['goal_speedup']:>6.0f}x")
        line += "".join(f"{row['ms'][peer]:>16.2f}" if peer in row["ms"] else f"{'-':>16}"
                        for peer in peers)
        lines.append(line + f"  {'ok' if row['meets_goal'] else 'MISS'}")
    return "\n".join(lines)


def format_compile(rows, mlp):
    lines = [f"{'program':<42}{'trace ms':>10}{'schedule+lower ms':>19}{'llvm ms':>9}"
             f"{'codegen total ms':>18}  kernels"]
    lines.append("-" * len(lines[0]))
    for row in [*rows, mlp]:
        ms = row["compile_ms"]
        lines.append(f"{row['workload']:<42}{ms['trace']:>10.1f}"
                     f"{ms.get('schedule+lower', float('nan')):>19.1f}"
                     f"{ms.get('llvm', float('nan')):>9.1f}{ms['total']:>18.1f}  "
                     f"{', '.join(row['kernels'])}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    repeats = 5 if args.quick else 30

    warm_up = np.ones((4, 4), np.float32)
    compile_program(layer_norm_softmax, (warm_up,))
    compile_program(gelu_affine, (warm_up, warm_up[0], warm_up[0]))
    rows = [run_workload(name, function, arguments, repeats)
            for name, (function, arguments) in workloads(np.random.default_rng(0)).items()]
    mlp = mlp_compile(3 if args.quick else 10)

    print(f"Median ms per call, interleaved, {repeats} rounds (speed-up = numpy / tracejit)")
    print(format_speed(rows))
    print()
    print("Compile time per program (median for the MLP over "
          f"{mlp['repeats']} fresh compiles; goal <= {MLP_COMPILE_GOAL_MS:g} ms of codegen)")
    print(format_compile(rows, mlp))
    print(f"MLP forward: codegen {mlp['compile_ms']['total']:.1f} ms "
          f"({'ok' if mlp['meets_goal'] else 'MISS'}), trace + codegen "
          f"{mlp['trace_plus_compile_ms']:.1f} ms; run: numpy {mlp['run_ms']['numpy']:.2f} ms, "
          f"tracejit {mlp['run_ms']['tracejit']:.2f} ms")
    differences = ", ".join(f"{row['workload']} {row['max_relative_difference']:.1e}"
                            for row in [*rows, mlp])
    print(f"Max |compiled - eager| / max |eager|: {differences}")

    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    report = dict(
        benchmark="codegen_speed",
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        quick=args.quick,
        goals=dict(speedup=GOALS, mlp_compile_ms=MLP_COMPILE_GOAL_MS),
        machine=machine_facts(),
        workloads=rows,
        mlp=mlp,
    )
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {RESULTS_PATH}")


if __name__ == "__main__":
    main()
