"""Issue 13: the RNN written as classic NumPy code (a Python loop over T), one @jit.

Prints, per T: compiles and first-call seconds with loop capture (a fresh jit function
per T, dynamic=True), the time of the second call, the median of the next ``--repeat``
calls, and NumPy eager's median over as many calls. ``--unrolled`` measures the same
with capture switched off (loops='unroll') for the before/after comparison.

    python -m benchmarks.loops [--unrolled] [--lengths 16 64 256 1024]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import runtime as tj

N, D, H = 16, 32, 64


def rnn(x, Wx, Wh, b, h0):
    N, T, D = x.shape
    h = h0
    h_all = np.zeros((N, T, Wh.shape[0]), dtype=x.dtype)
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return h_all


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--unrolled", action="store_true",
                        help="loops='unroll' instead of the default loops='capture'")
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 64, 256, 1024])
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    mode = "unroll" if options.unrolled else "capture"
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((D, H)).astype(np.float32) * 0.1,
              rng.standard_normal((H, H)).astype(np.float32) * 0.1,
              rng.standard_normal(H).astype(np.float32),
              rng.standard_normal((N, H)).astype(np.float32))
    print(f"loops={mode!r}")
    print(f"{'T':>6} {'compiles':>8} {'first call s':>13} {'second call ms':>15} "
          f"{'steady ms':>10} {'NumPy eager ms':>15}")
    for length in options.lengths:
        f = tj.jit(rnn, dynamic=True, cache="memory", loops=mode)
        x = rng.standard_normal((N, length, D)).astype(np.float32)
        start = time.perf_counter()
        out = f(x, *params)
        first = time.perf_counter() - start
        np.testing.assert_allclose(out, rnn(x, *params), rtol=1e-4, atol=1e-5)
        second = _seconds(f, x, params)
        np.testing.assert_allclose(f(x, *params), rnn(x, *params), rtol=1e-4, atol=1e-5)
        steady = np.median([_seconds(f, x, params) for _ in range(options.repeat)])
        eager = np.median([_seconds(rnn, x, params) for _ in range(options.repeat)])
        print(f"{length:>6} {f.stats()['compiles']:>8} {first:>13.3f} {second * 1e3:>15.2f} "
              f"{steady * 1e3:>10.2f} {eager * 1e3:>15.2f}")


def _seconds(function, x, params):
    start = time.perf_counter()
    function(x, *params)
    return time.perf_counter() - start

if __name__ == "__main__":
    main()
