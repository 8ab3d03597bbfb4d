"""Issue 14: ``tracejit.nn.conv2d`` + bias + relu, forward and forward + backward, against
the same layer written as im2col (compiled by tracejit, and by hand in NumPy) and PyTorch
eager (oneDNN), at 1 and 2 threads.

Per configuration and thread count: the first call of a fresh jit function (trace +
compile + run) and the median steady-state call of

* ``tracejit``: ``nn.conv2d`` (the ``conv2d`` primitive, ``tracejit.codegen.conv``'s
  direct kernels; the backward as a transposed conv and a weight-gradient kernel);
* ``tracejit im2col``: the composition ``nn.conv2d`` was before (zero pad, windows as a
  view, one matmul through BLAS), compiled by tracejit: the decision between the two;
* ``NumPy im2col``: the same composition in NumPy eager, its backward by hand (col2im);
* ``torch``: ``torch.nn.functional.conv2d`` eager, where torch is installed;

with GFLOP/s (2 * N * F * OH * OW * C/g * KH * KW per convolution; forward + backward
counts three convolutions). ``--profile`` adds where tracejit's time goes: the time inside
each kernel (``TRACEJIT_PROFILE=1`` counters) next to the wall time per call.

Thread counts run in child processes (``TRACEJIT_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``
and ``torch.set_num_threads`` are read once per process). Timings are round-robin within a
process (``benchmarks.harness.measure_interleaved``); every line carries the 1-minute load
average, since the machine may be shared: ratios within a line, not absolutes.

    python -m benchmarks.conv [--configs 8x16x32x32:32x3 ...] [--backward] [--threads 1 2]
                              [--dtype float32] [--profile]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

DEFAULT_CONFIGS = ["8x16x32x32:32x3", "8x16x64x64:32x3", "1x3x150x120:16x3",
                   "1x3x224x224:64x3", "32x3x32x32:64x5"]


def parse(config):
    image, kernel = config.split(":")
    n, c, h, w = (int(part) for part in image.split("x"))
    f, k = (int(part) for part in kernel.split("x"))
    return n, c, h, w, f, k


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


# --- one process: one thread count ------------------------------------------------------
def candidates(config, backward, dtype):
    import numpy as np

    import tracejit as tj
    from benchmarks.harness import Candidate
    from tracejit import nn

    n, c, h, w, f, k = parse(config)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    weight = (rng.standard_normal((f, c, k, k)) * 0.1).astype(dtype)
    bias = rng.standard_normal(f).astype(dtype)
    padding = k // 2

    def layer(x, weight, bias):
        return nn.relu(nn.conv2d(x, weight, bias, padding=padding))

    def im2col_layer(x, weight, bias):
        return np.maximum(im2col_conv2d(x, weight, bias, padding), 0)

    firsts, jitted, runs = {}, {}, []
    for name, function in (("tracejit", layer), ("tracejit im2col", im2col_layer)):
        if backward:
            def loss(x, weight, bias, function=function):
                return np.sum(function(x, weight, bias))

            function = tj.grad(loss, argnums=(0, 1, 2))
        compiled = tj.jit(function, dynamic=True, cache="memory")
        start = time.perf_counter()
        compiled(x, weight, bias)
        firsts[name] = time.perf_counter() - start
        jitted[name] = compiled
        runs.append(Candidate(name, lambda compiled=compiled: compiled(x, weight, bias)))
    if backward:
        runs.append(Candidate("NumPy im2col", lambda: numpy_forward_backward(
            x, weight, bias, padding)))
    else:
        runs.append(Candidate("NumPy im2col", lambda: numpy_forward(x, weight, bias, padding)))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tx, tw, tb = (torch.from_numpy(value) for value in (x, weight, bias))

        def run_torch():
            if backward:
                leaves = [value.clone().requires_grad_() for value in (tx, tw, tb)]
                torch.relu(torch.nn.functional.conv2d(*leaves, padding=padding)).sum(
                ).backward()
                return [leaf.grad for leaf in leaves]
            with torch.no_grad():
                return torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=padding))
        runs.append(Candidate("torch", run_torch))
    flops = 2 * n * f * h * w * c * k * k * (3 if backward else 1)  # 'same' padding
    return runs, firsts, jitted, flops


def check_agreement(runs, dtype, backward):
    """Every candidate's result against NumPy im2col's, relative to the largest value. An
    output within rounding of 0 falls on either side of relu depending on the summation
    order, which moves the gradients around it by a whole weight or input (float32 NumPy
    against its own float64 run: 5% of the largest input gradient, in 0.03% of the
    elements): so gradients are checked to 1%, with one element in a thousand allowed
    to differ more. A wrong kernel is off almost everywhere."""
    import numpy as np

    from benchmarks.harness import leaves

    reference = next(run for run in runs if run.name == "NumPy im2col")
    want = leaves(reference.result(reference.call()))
    limit = 1e-2 if backward else 1e-4 if dtype == np.float32 else 1e-10
    for run in runs:
        got = leaves(run.result(run.call()))
        for actual, expected in zip(got, want, strict=True):
            scale = max(float(np.max(np.abs(expected))), 1e-30)
            wrong = np.abs(actual.astype(np.float64) - expected) > limit * scale
            if actual.shape != expected.shape or wrong.mean() > (1e-3 if backward else 0):
                raise AssertionError(f"{run.name} differs from NumPy im2col")


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


def run_one_thread_count(args, threads):
    import numpy as np

    from benchmarks.harness import measure_interleaved

    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass
    dtype = np.dtype(args.dtype)
    for config in args.configs:
        runs, firsts, jitted, flops = candidates(config, args.backward, dtype)
        check_agreement(runs, dtype, args.backward)
        timing = measure_interleaved(runs, rounds=args.rounds, sample_seconds=0.2)
        load = os.getloadavg()[0]
        cells = []
        for run in runs:
            milliseconds = timing[run.name]["median_s"] * 1e3
            cells.append(f"{run.name} {milliseconds:.2f} ms ({flops / milliseconds / 1e6:.0f}"
                         " GF/s)")
        compiles = jitted["tracejit"].stats()["compiles"]
        print(f"{config:>17} t={threads}  load {load:.1f}  " + "  ".join(cells)
              + f"  | first call tracejit {firsts['tracejit']:.2f} s, im2col "
              f"{firsts['tracejit im2col']:.2f} s; compiles {compiles}", flush=True)
        if args.profile:
            for name in ("tracejit", "tracejit im2col"):
                run = next(run for run in runs if run.name == name)
                wall, kernels = kernel_breakdown(jitted[name], run.call)
                inside = sum(kernels.values())
                parts = ", ".join(f"{kernel} {ms:.2f}" for kernel, ms in sorted(
                    kernels.items(), key=lambda item: -item[1]) if ms >= 0.005)
                print(f"{'':>20}{name}: {wall:.2f} ms/call, {inside:.2f} in kernels "
                      f"({parts}), {wall - inside:.2f} outside", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                        help="NxCxHxW:FxK (batch, channels, height, width : filters, kernel)")
    parser.add_argument("--backward", action="store_true", help="forward + backward")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="time inside each tracejit kernel (TRACEJIT_PROFILE=1)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_one_thread_count(args, args.threads[0])
        return
    print(f"conv2d + bias + relu {'forward+backward' if args.backward else 'forward'}, "
          f"{args.dtype}, 'same' padding; median ms per call (shared machine: ratios within "
          "a line)", flush=True)
    for threads in args.threads:
        environment = dict(os.environ, TRACEJIT_NUM_THREADS=str(threads),
                           OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        if args.profile:
            environment["TRACEJIT_PROFILE"] = "1"
        child = [arg for arg in (argv if argv is not None else sys.argv[1:])]
        if "--threads" in child:  # drop the list; the child gets one count
            at = child.index("--threads")
            end = at + 1
            while end < len(child) and not child[end].startswith("--"):
                end += 1
            del child[at:end]
        subprocess.run([sys.executable, "-m", "benchmarks.conv", *child, "--child",
                        "--threads", str(threads)], env=environment, check=True)


if __name__ == "__main__":
    main()
