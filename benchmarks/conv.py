"""Issue 14: ``tracejit.nn.conv2d`` forward (and forward + backward) against NumPy eager
running the same im2col by hand, and PyTorch where it is installed.

Per configuration: the first call of a fresh jit function (trace + compile + run), the
median steady-state call of tracejit, NumPy eager (``sliding_window_view`` + one
``tensordot``-style matmul, written here) and torch eager; the ratio tracejit / NumPy.
Timings are round-robin in one process (``benchmarks.harness.measure_interleaved``); the
machine may be shared with other jobs, so say so with the numbers.

    python -m benchmarks.conv [--configs 8x16x32x32:32x3 1x3x150x120:16x3] [--backward]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tracejit as tj
from benchmarks.harness import Candidate, measure_interleaved
from tracejit import nn

DEFAULT_CONFIGS = ["8x16x32x32:32x3", "1x3x150x120:16x3", "32x3x32x32:64x5"]


def numpy_conv2d(x, w, b, padding):
    """im2col by hand: the windows of the padded input as a view, one matmul, bias."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    n, c, out_h, out_w, kh, kw = windows.shape
    columns = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * out_h * out_w, c * kh * kw)
    out = columns @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, out_h, out_w, -1).transpose(0, 3, 1, 2)


def parse(config):
    image, kernel = config.split(":")
    n, c, h, w = (int(part) for part in image.split("x"))
    f, k = (int(part) for part in kernel.split("x"))
    return n, c, h, w, f, k


def candidates(config, backward, dtype):
    n, c, h, w, f, k = parse(config)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    weight = (rng.standard_normal((f, c, k, k)) * 0.1).astype(dtype)
    bias = rng.standard_normal(f).astype(dtype)
    padding = k // 2

    def layer(x, weight, bias):
        return nn.relu(nn.conv2d(x, weight, bias, padding=padding))

    compiled = tj.jit(layer, dynamic=True, cache="memory")
    start = time.perf_counter()
    if backward:
        leaves = [tj.tensor(value, requires_grad=True) for value in (x, weight, bias)]
        compiled(*leaves).sum().backward()
    else:
        compiled(x, weight, bias)
    first = time.perf_counter() - start

    if backward:
        def run_tracejit():
            leaves = [tj.tensor(value, requires_grad=True) for value in (x, weight, bias)]
            compiled(*leaves).sum().backward()
            return leaves[1].grad

        def run_numpy():  # eager Tensors: the same composition with the tape
            leaves = [tj.tensor(value, requires_grad=True) for value in (x, weight, bias)]
            layer(*leaves).sum().backward()
            return leaves[1].grad
        numpy_name = "Tensor eager"
    else:
        def run_tracejit():
            return compiled(x, weight, bias)

        def run_numpy():
            return np.maximum(numpy_conv2d(x, weight, bias, padding), 0)
        numpy_name = "NumPy eager im2col"
    result = [Candidate("tracejit", run_tracejit), Candidate(numpy_name, run_numpy)]
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
                return leaves[1].grad
            with torch.no_grad():
                return torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=padding))
        result.append(Candidate("torch eager", run_torch))
    return result, first, compiled


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                        help="NxCxHxW:FxK (batch, channels, height, width : filters, kernel)")
    parser.add_argument("--backward", action="store_true", help="forward + backward")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"conv2d {'forward+backward' if args.backward else 'forward'} + relu, {args.dtype}, "
          "padding k//2; median ms per call (shared machine: ratios, not absolutes)")
    for config in args.configs:
        runs, first, compiled = candidates(config, args.backward, np.dtype(args.dtype))
        timing = measure_interleaved(runs, rounds=args.rounds, sample_seconds=0.2)
        medians = {run.name: timing[run.name]["median_s"] * 1e3 for run in runs}
        others = "  ".join(f"{name} {value:.2f}" for name, value in medians.items()
                           if name != "tracejit")
        baseline = [value for name, value in medians.items() if name != "tracejit"][0]
        print(f"{config:>18}: first call {first:.2f} s, tracejit {medians['tracejit']:.2f}  "
              f"{others}  ratio {medians['tracejit'] / baseline:.2f}  "
              f"compiles {compiled.stats()['compiles']}")


if __name__ == "__main__":
    main()
