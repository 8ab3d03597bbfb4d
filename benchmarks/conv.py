"""Issue 14: ``tracejit.nn.conv2d`` + bias + relu, forward and forward + backward, against
NumPy (im2col by hand), torch eager (oneDNN), torch.compile and jax.jit
(``jax.lax.conv_general_dilated`` under ``jax.jit``), in one run.

Rows: batch 1 at 3x150x120, 3x184x100 and 3x224x224 and batch 32 at 3x32x32, each with 16
and 64 output channels and 3x3 and 5x5 kernels ('same' padding, float32 by default),
forward and forward + backward (the gradients of ``sum(relu(conv2d(x, w) + b))`` with
respect to ``x``, ``w`` and ``b``). Per row and thread count:

* steady state: each candidate's median wall time per call, and its best (minimum) wall
  and process-CPU time per call over the samples (the machine may be shared: the best and
  the CPU clock are what a busy neighbour disturbs least); the ratio ``tracejit / peer``
  of medians (below 1: tracejit is faster), and whether tracejit meets the target (at or
  below torch eager);
* the first call of a fresh function (tracejit: trace + compile + run, disk cache off;
  torch.compile: Dynamo + AOTAutograd + Inductor into an empty ``TORCHINDUCTOR_CACHE_DIR``
  after ``torch._dynamo.reset()``; jax.jit: trace + XLA compile), wall and process CPU (the
  Inductor's C++ compiler runs in worker processes, which the CPU figure leaves out). Each
  framework first compiles an unrelated small convolution, so these are compile times,
  not import and start-up times;
* compiles: one ``jit(dynamic=True)`` per (forward or forward + backward, filters,
  kernel) is called on every image size (and two more sizes inside the same buckets); the
  compiles it made against the number of distinct size buckets (target: one per bucket).

The candidates: ``tracejit`` (``nn.conv2d``: the ``conv2d`` primitive and
``tracejit.codegen.conv``'s direct kernels; the backward a transposed convolution and a
weight-gradient kernel); ``NumPy im2col`` (the windows of the padded input as one matmul;
its backward by hand: col2im); ``torch`` and ``torch.compile``; ``jax.jit``; and with
``--im2col`` the same im2col composition compiled by tracejit. A peer that is not
installed is left out (its columns say so). Every result is checked against NumPy's
before timing. The header says which OpenBLAS kernel NumPy runs (threadpoolctl) and the
``OPENBLAS_CORETYPE`` in force; torch's convolutions run in oneDNN and XLA's in Eigen
whatever OpenBLAS does.

Thread counts run in child processes (``TRACEJIT_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
torch's threads and, for one thread, ``XLA_FLAGS`` are set per process). Samples are
round-robin within a process with a pause before each, every line carries the 1-minute
load average.

    python -m benchmarks.conv [--threads 1 2] [--modes forward backward]
                              [--configs 1x3x150x120:16x3 ...] [--dtype float32]
                              [--quick] [--im2col] [--profile]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial

IMAGES = ["1x3x150x120", "1x3x184x100", "1x3x224x224", "32x3x32x32"]
# Sizes inside the buckets of the images above (dynamic dims: pow2 buckets), for the
# compiles-per-bucket check: a new size in a known bucket must not compile.
SAME_BUCKET_IMAGES = ["1x3x131x97", "1x3x255x129"]
DEFAULT_CONFIGS = [f"{image}:{filters}x{kernel}" for image in IMAGES
                   for filters in (16, 64) for kernel in (3, 5)]
QUICK_CONFIGS = ["1x3x150x120:16x3", "32x3x32x32:64x5"]
MODES = {"forward": "fwd", "backward": "fwd+bwd"}
PEERS = ("NumPy im2col", "torch", "torch.compile", "jax.jit")
TARGET_FIRST_CALL_SECONDS = 0.5


def parse(config):
    image, kernel = config.split(":")
    n, c, h, w = (int(part) for part in image.split("x"))
    f, k = (int(part) for part in kernel.split("x"))
    return n, c, h, w, f, k


def installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# --- the layer written as im2col --------------------------------------------------------
def im2col_conv2d(x, weight, bias, padding):
    """im2col: the windows of the zero-padded input (a view) times the weights as one
    matmul, the bias added to its output. Runs on ndarrays and, with ``windows`` from
    tracejit, under jit (the composition ``nn.conv2d`` was before the conv primitive)."""
    import numpy as np

    from tracejit.tracer.ops import sliding_window

    batch, channels = x.shape[0], x.shape[1]
    filters, kernel = weight.shape[0], (int(weight.shape[2]), int(weight.shape[3]))
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = sliding_window(x, (2, 3), kernel, (1, 1))  # N, C, OH, OW, KH, KW
    out_h, out_w = windows.shape[2], windows.shape[3]
    patch = channels * kernel[0] * kernel[1]
    columns = np.reshape(np.transpose(windows, (0, 2, 3, 1, 4, 5)),
                         (batch * out_h * out_w, patch))
    out = columns @ np.transpose(np.reshape(weight, (filters, patch))) + bias
    return np.transpose(np.reshape(out, (batch, out_h, out_w, filters)), (0, 3, 1, 2))


def numpy_columns(x, kernel, padding):
    import numpy as np

    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=(2, 3))
    n, c, out_h, out_w, kh, kw = windows.shape
    return windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * out_h * out_w, c * kh * kw)


def numpy_forward(x, weight, bias, padding):
    import numpy as np

    columns = numpy_columns(x, weight.shape[2:], padding)
    out = np.maximum(columns @ weight.reshape(weight.shape[0], -1).T + bias, 0)
    n, out_h, out_w = x.shape[0], x.shape[2] + 2 * padding - weight.shape[2] + 1, \
        x.shape[3] + 2 * padding - weight.shape[3] + 1
    return out.reshape(n, out_h, out_w, -1).transpose(0, 3, 1, 2)


def numpy_forward_backward(x, weight, bias, padding):
    """Gradients of ``sum(relu(conv2d(x, w) + b))``: the weight and bias gradients as one
    matmul and a sum over the columns, the input gradient as a matmul and col2im (each
    window offset's slice added into the padded input)."""
    import numpy as np

    n, c, h, w = x.shape
    filters, _, kh, kw = weight.shape
    out_h, out_w = h + 2 * padding - kh + 1, w + 2 * padding - kw + 1
    columns = numpy_columns(x, (kh, kw), padding)
    flat_weight = weight.reshape(filters, -1)
    out = columns @ flat_weight.T + bias
    grad_out = (out > 0).astype(x.dtype)  # d sum(relu) / d out
    grad_weight = (grad_out.T @ columns).reshape(weight.shape)
    grad_bias = grad_out.sum(axis=0)
    grad_columns = (grad_out @ flat_weight).reshape(n, out_h, out_w, c, kh, kw)
    grad_padded = np.zeros((n, c, h + 2 * padding, w + 2 * padding), x.dtype)
    for i in range(kh):
        for j in range(kw):
            grad_padded[:, :, i:i + out_h, j:j + out_w] += grad_columns[..., i, j].transpose(
                0, 3, 1, 2)
    grad_x = grad_padded[:, :, padding:padding + h, padding:padding + w]
    return grad_x, grad_weight, grad_bias


# --- the candidates ---------------------------------------------------------------------
def inputs_for(config, dtype, seed=0):
    import numpy as np

    n, c, h, w, f, k = parse(config)
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, c, h, w)).astype(dtype),
            (rng.standard_normal((f, c, k, k)) * 0.1).astype(dtype),
            rng.standard_normal(f).astype(dtype))


def tracejit_function(kernel, backward, im2col=False):
    """A fresh ``jit(dynamic=True)`` of the layer (or of its gradients), disk cache off."""
    import numpy as np

    import tracejit as tj
    from tracejit import nn

    padding = kernel // 2

    def layer(x, weight, bias):
        if im2col:
            return np.maximum(im2col_conv2d(x, weight, bias, padding), 0)
        return nn.relu(nn.conv2d(x, weight, bias, padding=padding))

    function = layer
    if backward:
        def loss(x, weight, bias):
            return np.sum(layer(x, weight, bias))

        function = tj.grad(loss, argnums=(0, 1, 2))
    return tj.jit(function, dynamic=True, cache="memory")


def torch_call(arrays, kernel, backward, compiled):
    """A zero-argument call of the torch layer (fresh leaves per call for the backward, as
    a training step has), or None when torch is not installed."""
    import torch

    padding = kernel // 2

    def layer(x, weight, bias):
        return torch.relu(torch.nn.functional.conv2d(x, weight, bias, padding=padding))

    def loss(x, weight, bias):
        return layer(x, weight, bias).sum()

    if compiled:
        torch._dynamo.reset()  # a first call that compiles, not one that recompiles
        layer, loss = torch.compile(layer), torch.compile(loss)
    tensors = [torch.from_numpy(value) for value in arrays]

    def call():
        if backward:
            leaves = [value.clone().requires_grad_() for value in tensors]
            loss(*leaves).backward()
            return [leaf.grad for leaf in leaves]
        with torch.no_grad():
            return layer(*tensors)

    return call


def jax_call(arrays, kernel, backward):
    import jax
    import jax.numpy as jnp

    padding = kernel // 2

    def layer(x, weight, bias):
        out = jax.lax.conv_general_dilated(x, weight, (1, 1), ((padding, padding),) * 2,
                                           dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return jax.nn.relu(out + bias[None, :, None, None])

    if backward:
        function = jax.jit(jax.grad(lambda *args: jnp.sum(layer(*args)), argnums=(0, 1, 2)))
    else:
        function = jax.jit(layer)
    device_arrays = [jax.device_put(value) for value in arrays]
    return lambda: jax.block_until_ready(function(*device_arrays))


def timed_first_call(call):
    """``(result, wall seconds, process CPU seconds)`` of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def candidates(config, backward, dtype, im2col):
    """``{name: call}``, ``{name: (first wall s, first cpu s)}``, the tracejit function."""
    arrays = inputs_for(config, dtype)
    x, weight, bias = arrays
    kernel = parse(config)[5]
    padding = kernel // 2
    calls, firsts = {}, {}
    jitted = tracejit_function(kernel, backward)
    calls["tracejit"] = lambda: jitted(x, weight, bias)
    if im2col:
        im2col_jitted = tracejit_function(kernel, backward, im2col=True)
        calls["tracejit im2col"] = lambda: im2col_jitted(x, weight, bias)
    reference = numpy_forward_backward if backward else numpy_forward
    calls["NumPy im2col"] = lambda: reference(x, weight, bias, padding)
    if installed("torch"):
        calls["torch"] = torch_call(arrays, kernel, backward, compiled=False)
        calls["torch.compile"] = torch_call(arrays, kernel, backward, compiled=True)
    if installed("jax"):
        calls["jax.jit"] = jax_call(arrays, kernel, backward)
    for name in ("tracejit", "tracejit im2col", "torch.compile", "jax.jit"):
        if name in calls:
            firsts[name] = timed_first_call(calls[name])[1:]
    return calls, firsts, jitted


def check_agreement(calls, dtype, backward):
    """Every candidate's result against NumPy im2col's, relative to the largest value. An
    output within rounding of 0 falls on either side of relu depending on the summation
    order, which moves the gradients around it by a whole weight or input (float32 NumPy
    against its own float64 run: 5% of the largest input gradient, in 0.03% of the
    elements): so gradients are checked to 1%, with one element in a thousand allowed
    to differ more. A wrong kernel is off almost everywhere."""
    import numpy as np

    from benchmarks.harness import as_numpy, leaves

    want = leaves(as_numpy(calls["NumPy im2col"]()))
    limit = 1e-2 if backward else 1e-4 if dtype == np.float32 else 1e-10
    for name, call in calls.items():
        got = leaves(as_numpy(call()))
        for actual, expected in zip(got, want, strict=True):
            scale = max(float(np.max(np.abs(expected))), 1e-30)
            wrong = np.abs(actual.astype(np.float64) - expected) > limit * scale
            if actual.shape != expected.shape or wrong.mean() > (1e-3 if backward else 0):
                raise AssertionError(f"{name} differs from NumPy im2col")


def measure(calls, rounds, sample_seconds, pause_seconds=0.1):
    """Per candidate: median and best wall seconds per call and best process-CPU seconds
    per call, over ``rounds`` samples taken round-robin (the first candidate rotates). A
    pause before each sample lets the previous candidate's spinning threads sleep, and an
    untimed call wakes the candidate's own."""
    names = list(calls)
    numbers = {}
    for name in names:
        calls[name]()
        once = min(timed_first_call(calls[name])[1] for _ in range(3))
        numbers[name] = max(1, int(sample_seconds / max(once, 1e-9)))
    walls, cpus = {name: [] for name in names}, {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            time.sleep(pause_seconds)
            calls[name]()
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(numbers[name]):
                calls[name]()
            walls[name].append((time.perf_counter() - wall) / numbers[name])
            cpus[name].append((time.process_time() - cpu) / numbers[name])
    return {name: dict(median=statistics.median(walls[name]), best=min(walls[name]),
                       best_cpu=min(cpus[name])) for name in names}


def kernel_breakdown(compiled, call, runs=20):
    """``(wall ms per call, {kernel: ms per call})`` from the profile counters."""
    from benchmarks.harness import seconds_per_call
    from benchmarks.profile import kernel_seconds

    call()
    before = kernel_seconds(compiled)
    wall = seconds_per_call(call, runs)
    after = kernel_seconds(compiled)
    return wall * 1e3, {name: (seconds - before.get(name, 0.0)) / runs * 1e3
                        for name, seconds in after.items()}


# --- one process: one thread count ------------------------------------------------------
def blas_kernel():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (pip install threadpoolctl)"
    for pool in threadpool_info():
        if pool.get("internal_api") == "openblas":
            return f"OpenBLAS {pool.get('version')} kernel {pool.get('architecture')}"
    return "no OpenBLAS found"


def header(threads):
    parts = [f"threads {threads}", f"NumPy BLAS: {blas_kernel()} (OPENBLAS_CORETYPE="
             f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')})"]
    if installed("torch"):
        import torch

        parts.append(f"torch {torch.__version__} (oneDNN "
                     f"{'on' if torch.backends.mkldnn.is_available() else 'off'})")
    else:
        parts.append("torch: not installed (torch, torch.compile columns skipped)")
    if installed("jax"):
        import jax

        parts.append(f"jax {jax.__version__}")
    else:
        parts.append("jax: not installed (jax.jit column skipped)")
    return "; ".join(parts)


def warm_up(dtype):
    """Compile an unrelated small convolution with each framework, forward and backward,
    so the first calls measured are compiles, not imports and start-up."""
    for backward in (False, True):
        candidates("2x2x9x7:2x3", backward, dtype, im2col=False)


def row_line(config, mode, threads, timing, firsts, compiles):
    ours = timing["tracejit"]
    cells = [f"tracejit {ours['median'] * 1e3:.3f} ms (best {ours['best'] * 1e3:.3f}, "
             f"cpu {ours['best_cpu'] * 1e3:.3f})"]
    for name, result in timing.items():
        if name == "tracejit":
            continue
        ratio = ours["median"] / result["median"]
        cells.append(f"{name} {result['median'] * 1e3:.3f} ({ratio:.2f}x)")
    for name in PEERS:
        if name not in timing:
            cells.append(f"{name} skipped (not installed)")
    first = ", ".join(f"{name} {wall:.2f} s (cpu {cpu:.2f})" for name, (wall, cpu)
                      in firsts.items())
    return (f"{config:>17} {mode:7} t={threads} load {os.getloadavg()[0]:.1f} | "
            + " | ".join(cells) + f" | first call: {first} | compiles {compiles}")


def summary(rows, threads):
    """A Markdown table of the rows: median ms per call and ``tracejit / peer`` ratios of
    medians; against torch eager also the ratio of best CPU times (what a loaded machine
    disturbs least); first calls in seconds of wall time (tracejit's CPU time too)."""
    names = [name for name in PEERS if any(name in row["timing"] for row in rows)]
    lines = [f"\n| t={threads} row | tracejit ms | " + " | ".join(
        f"{name} ms (ratio)" for name in names) + " | CPU ratio vs torch | ≤ torch (wall, "
        "CPU) | first call s: tracejit (CPU) / torch.compile / jax.jit | load |",
        "|" + "---|" * (len(names) + 6)]
    for row in rows:
        timing, firsts = row["timing"], row["firsts"]
        ours = timing["tracejit"]["median"]
        cells = [f"{timing[name]['median'] * 1e3:.3f} ({ours / timing[name]['median']:.2f})"
                 if name in timing else "-" for name in names]
        if "torch" in timing:
            cpu_ratio = timing["tracejit"]["best_cpu"] / timing["torch"]["best_cpu"]
            verdicts = ", ".join("yes" if ratio <= 1 else "no" for ratio in (
                ours / timing["torch"]["median"], cpu_ratio))
            cpu_cell = f"{cpu_ratio:.2f}"
        else:
            verdicts, cpu_cell = "-", "-"
        first = " / ".join(
            (f"{firsts[name][0]:.2f} ({firsts[name][1]:.2f})" if name == "tracejit" else
             f"{firsts[name][0]:.2f}") if name in firsts else "-"
            for name in ("tracejit", "torch.compile", "jax.jit"))
        lines.append(f"| {row['config']} {row['mode']} | {ours * 1e3:.3f} | "
                     + " | ".join(cells) + f" | {cpu_cell} | {verdicts} | {first} | "
                     f"{row['load']:.1f} |")
    return "\n".join(lines)


def compiles_per_bucket(args, dtype):
    """One jit per (mode, filters, kernel), called on every image size: its compiles
    against the distinct pow2 buckets of the inputs' shapes."""
    from tracejit.tracer.shapes import pow2_bucket

    print("\ncompiles per size bucket (jit(dynamic=True), pow2 buckets; sizes: "
          + ", ".join(IMAGES + SAME_BUCKET_IMAGES) + ")", flush=True)
    kinds = sorted({parse(config)[4:] for config in args.configs})
    for mode in args.modes:
        for filters, kernel in kinds:
            jitted = tracejit_function(kernel, mode == "backward")
            buckets, seconds = set(), []
            for image in IMAGES + SAME_BUCKET_IMAGES:
                arrays = inputs_for(f"{image}:{filters}x{kernel}", dtype)
                buckets.add(tuple(tuple(pow2_bucket(size) or (size,) for size in a.shape)
                                  for a in arrays))
                seconds.append(timed_first_call(partial(jitted, *arrays))[1])
            compiles = jitted.stats()["compiles"]
            eager = sum(jitted.stats()["eager_calls"].values())
            verdict = "one per bucket" if compiles == len(buckets) else (
                "NOT one per bucket: see jit.explain() for what each compile guarded")
            print(f"  {MODES[mode]:7} F={filters} {kernel}x{kernel}: {len(buckets)} buckets, "
                  f"{compiles} compiles, {eager} eager calls ({verdict}); first call per "
                  "size " + ", ".join(f"{second:.2f}" for second in seconds) + " s",
                  flush=True)


def run_one_thread_count(args, threads):
    import numpy as np

    if installed("torch"):
        import torch

        torch.set_num_threads(threads)
    dtype = np.dtype(args.dtype)
    print(header(threads), f"; load {os.getloadavg()[0]:.1f}", flush=True)
    warm_up(dtype)
    rows = []
    for mode in args.modes:
        backward = mode == "backward"
        for config in args.configs:
            calls, firsts, jitted = candidates(config, backward, dtype, args.im2col)
            check_agreement(calls, dtype, backward)
            timing = measure(calls, rounds=args.rounds, sample_seconds=args.sample_seconds)
            compiles = jitted.stats()["compiles"]
            rows.append(dict(config=config, mode=MODES[mode], timing=timing, firsts=firsts,
                             load=os.getloadavg()[0]))
            print(row_line(config, MODES[mode], threads, timing, firsts, compiles),
                  flush=True)
            if args.profile:
                wall, kernels = kernel_breakdown(jitted, calls["tracejit"])
                inside = sum(kernels.values())
                parts = ", ".join(f"{kernel} {ms:.2f}" for kernel, ms in sorted(
                    kernels.items(), key=lambda item: -item[1]) if ms >= 0.005)
                print(f"{'':>20}tracejit: {wall:.2f} ms/call, {inside:.2f} in kernels "
                      f"({parts}), {wall - inside:.2f} outside", flush=True)
    print(summary(rows, threads), flush=True)
    walls = [row["firsts"]["tracejit"][0] for row in rows]
    cpus = [row["firsts"]["tracejit"][1] for row in rows]
    by_wall = [row["timing"]["tracejit"]["median"] <= row["timing"]["torch"]["median"]
               for row in rows if "torch" in row["timing"]]
    by_cpu = [row["timing"]["tracejit"]["best_cpu"] <= row["timing"]["torch"]["best_cpu"]
              for row in rows if "torch" in row["timing"]]
    print(f"\ntracejit first call: at most {max(walls):.2f} s wall, {max(cpus):.2f} s CPU "
          f"(target {TARGET_FIRST_CALL_SECONDS} s); rows at or below torch eager: "
          f"{sum(by_wall)} of {len(by_wall)} by median wall, {sum(by_cpu)} by best CPU",
          flush=True)
    compiles_per_bucket(args, dtype)


def child_environment(threads, profile):
    environment = dict(os.environ, TRACEJIT_NUM_THREADS=str(threads),
                       OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                       # an empty Inductor cache: torch.compile's first calls compile
                       TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="conv-inductor-"),
                       TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    if threads == 1:
        environment["XLA_FLAGS"] = (environment.get("XLA_FLAGS", "") + " --xla_cpu_multi_"
                                    "thread_eigen=false intra_op_parallelism_threads=1").strip()
    if profile:
        environment["TRACEJIT_PROFILE"] = "1"
    return environment


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None,
                        help="NxCxHxW:FxK (batch, channels, height, width : filters, kernel)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sample-seconds", type=float, default=0.1)
    parser.add_argument("--quick", action="store_true", help=f"rows {QUICK_CONFIGS} only")
    parser.add_argument("--im2col", action="store_true",
                        help="also the im2col composition compiled by tracejit")
    parser.add_argument("--profile", action="store_true",
                        help="time inside each tracejit kernel (TRACEJIT_PROFILE=1)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.configs = args.configs or (QUICK_CONFIGS if args.quick else DEFAULT_CONFIGS)
    if args.child:
        run_one_thread_count(args, args.threads[0])
        return
    print(f"conv2d + bias + relu ({', '.join(MODES[mode] for mode in args.modes)}), "
          f"{args.dtype}, 'same' padding; ms per call, ratio = tracejit / peer (below 1: "
          "tracejit faster); shared machine: compare within a line", flush=True)
    for threads in args.threads:
        child = list(argv if argv is not None else sys.argv[1:])
        if "--threads" in child:  # drop the list; the child gets one count
            at = child.index("--threads")
            end = at + 1
            while end < len(child) and not child[end].startswith("--"):
                end += 1
            del child[at:end]
        subprocess.run([sys.executable, "-m", "benchmarks.conv", *child, "--child",
                        "--threads", str(threads)], env=child_environment(threads, args.profile),
                       check=True)


if __name__ == "__main__":
    main()
