"""Issue 13: the naive-loop convolution (the course-assignment code, three nested Python
loops over output rows, columns and filters), one @jit, against NumPy eager running the
same Python function.

Per image size (N=1, C=3, 16 filters 3x3, stride 1, pad 1): the number of loop
iterations, the first call of a fresh jit function (trace + compile + run), the median
steady-state call, NumPy eager's median, and their ratio. Then one jit function over all
sizes: compiles after each size (one per size bucket). Ratios are measured in this one
process; the machine may be shared with other jobs (say so with the numbers).

    python -m benchmarks.naive_conv [--sizes 32x32 150x120 184x100 224x224] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tracejit as tj

F, C, K = 16, 3, 3


def conv_forward_naive(x, w, b, stride, pad):
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    H_out = 1 + (H + 2 * pad - HH) // stride
    W_out = 1 + (W + 2 * pad - WW) // stride
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    out = np.zeros((N, F, H_out, W_out))
    for i in range(H_out):
        for j in range(W_out):
            window = x_pad[:, :, i * stride:i * stride + HH, j * stride:j * stride + WW]
            for f in range(F):
                out[:, f, i, j] = np.sum(window * w[f], axis=(1, 2, 3)) + b[f]
    return out


def _seconds(function, *args):
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="*", default=["32x32", "150x120", "184x100", "224x224"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--eager-repeat", type=int, default=1,
                        help="NumPy eager runs per size (a 224x224 run takes seconds)")
    options = parser.parse_args()
    sizes = [tuple(int(part) for part in size.split("x")) for size in options.sizes]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((F, C, K, K))
    b = rng.standard_normal(F)
    images = {size: rng.standard_normal((1, C, *size)) for size in sizes}

    print(f"naive conv forward: N=1, C={C}, {F} filters {K}x{K}, stride 1, pad 1, float64; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (a shared machine "
          "inflates every time here, compiles and kernels alike)")
    print(f"{'H x W':>9} {'iterations':>10} {'first call s':>12} {'steady ms':>10} "
          f"{'eager ms':>10} {'eager/steady':>12}")
    for size in sizes:
        x = images[size]
        f = tj.jit(conv_forward_naive, dynamic=True, cache="memory",
                   static_argnames=("stride", "pad"))
        first = _seconds(f, x, w, b, 1, 1)
        np.testing.assert_allclose(f(x, w, b, 1, 1), conv_forward_naive(x, w, b, 1, 1),
                                   rtol=1e-10, atol=1e-10)
        steady = np.median([_seconds(f, x, w, b, 1, 1) for _ in range(options.repeat)])
        eager = np.median([_seconds(conv_forward_naive, x, w, b, 1, 1)
                           for _ in range(options.eager_repeat)])
        iterations = size[0] * size[1] * F
        print(f"{size[0]:>4} x{size[1]:>4} {iterations:>10} {first:>12.3f} "
              f"{steady * 1e3:>10.2f} {eager * 1e3:>10.1f} {eager / steady:>11.0f}x")

    print("one jit function over all sizes (compiles are cumulative):")
    f = tj.jit(conv_forward_naive, dynamic=True, cache="memory",
               static_argnames=("stride", "pad"))
    print(f"{'H x W':>9} {'compiles':>8} {'call s':>8}")
    for size in sizes + sizes:
        seconds = _seconds(f, images[size], w, b, 1, 1)
        print(f"{size[0]:>4} x{size[1]:>4} {f.stats()['compiles']:>8} {seconds:>8.3f}")


if __name__ == "__main__":
    main()
