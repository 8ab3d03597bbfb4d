"""Issue 13: the RNN written as classic NumPy code (a Python loop over T), one @jit.

Prints, per T: compiles and first-call seconds with loop capture (a fresh jit function
per T, dynamic=True), the time of the second call, the median of the next ``--repeat``
calls, and NumPy eager's median over as many calls; with JAX installed, ``jax.lax.scan``'s
first call (``jax.jit``, a fresh function per T) and steady state, and our steady state
over its. Steady states are measured interleaved (one call of each in turn, medians), so
load from other processes on a shared machine hits all of them alike. ``--unrolled``
measures with capture switched off (loops='unroll') for the before/after comparison.
``--clock cpu`` times calls by the process's CPU time instead of wall time: on a machine
shared with other work, run single-threaded (``OPENBLAS_NUM_THREADS=1
TRACEJIT_NUM_THREADS=1 XLA_FLAGS="--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1"``) it estimates what an idle machine's wall time would be.

    python -m benchmarks.loops [--unrolled] [--clock cpu] [--lengths 16 64 256 1024 4096]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tracejit as tj

N, D, H = 16, 32, 64


def rnn(x, Wx, Wh, b, h0):
    N, T, D = x.shape
    h = h0
    h_all = np.zeros((N, T, Wh.shape[0]), dtype=x.dtype)
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return h_all


def scan_rnn():
    """The same RNN as ``jax.lax.scan`` over time (None without JAX)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def rnn_scan(x, Wx, Wh, b, h0):
        def step(h, x_t):
            h = jnp.tanh(x_t @ Wx + h @ Wh + b)
            return h, h

        _, hs = jax.lax.scan(step, h0, jnp.swapaxes(x, 0, 1))
        return jnp.swapaxes(hs, 0, 1)

    def fresh():
        compiled = jax.jit(rnn_scan)
        return lambda *args: compiled(*args).block_until_ready()

    return fresh


def numba_rnn():
    """The same RNN compiled by ``numba.njit`` (None without numba): the loop and the two
    matmuls per step (numba calls BLAS for ``@`` on contiguous arrays)."""
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(cache=False)
    def rnn_numba(x, Wx, Wh, b, h0):
        N, T, D = x.shape
        h = h0.copy()
        h_all = np.zeros((N, T, Wh.shape[0]), dtype=x.dtype)
        for t in range(T):
            x_t = np.ascontiguousarray(x[:, t, :])
            h = np.tanh(x_t @ Wx + h @ Wh + b)
            h_all[:, t, :] = h
        return h_all

    return rnn_numba


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--unrolled", action="store_true",
                        help="loops='unroll' instead of the default loops='capture'")
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 64, 256, 1024, 4096])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    options = parser.parse_args()
    global _clock
    _clock = time.process_time if options.clock == "cpu" else time.perf_counter
    mode = "unroll" if options.unrolled else "capture"
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((D, H)).astype(np.float32) * 0.1,
              rng.standard_normal((H, H)).astype(np.float32) * 0.1,
              rng.standard_normal(H).astype(np.float32),
              rng.standard_normal((N, H)).astype(np.float32))
    jax_rnn, numba_compiled = scan_rnn(), numba_rnn()
    print(f"loops={mode!r}, {options.clock} clock" +
          ("" if jax_rnn else " (JAX not installed: no lax.scan column)") +
          ("" if numba_compiled else " (numba not installed: no numba column)"))
    print(f"{'T':>6} {'compiles':>8} {'first call s':>13} {'second call ms':>15} "
          f"{'steady ms':>10} {'NumPy eager ms':>15}" +
          (f" {'scan first s':>12} {'scan steady ms':>15} {'ours/scan':>9}" if jax_rnn else "")
          + (f" {'numba first s':>13} {'numba steady ms':>15}" if numba_compiled else ""))
    for length in options.lengths:
        f = tj.jit(rnn, dynamic=True, cache="memory", loops=mode)
        x = rng.standard_normal((N, length, D)).astype(np.float32)
        start = time.perf_counter()
        out = f(x, *params)
        first = time.perf_counter() - start
        np.testing.assert_allclose(out, rnn(x, *params), rtol=1e-4, atol=1e-5)
        second = _seconds(f, x, params)
        np.testing.assert_allclose(f(x, *params), rnn(x, *params), rtol=1e-4, atol=1e-5)
        contenders = {"ours": f, "eager": rnn}
        row = ""
        if jax_rnn:
            scan = jax_rnn()
            start = time.perf_counter()
            scan(x, *params)
            scan_first = time.perf_counter() - start
            contenders["scan"] = scan
        if numba_compiled:
            start = time.perf_counter()
            np.testing.assert_allclose(numba_compiled(x, *params), rnn(x, *params),
                                       rtol=1e-4, atol=1e-5)
            numba_first = time.perf_counter() - start  # numba compiles once per dtype
            contenders["numba"] = numba_compiled
        steady = _interleaved(contenders, x, params, options.repeat)
        if jax_rnn:
            row = (f" {scan_first:>12.3f} {steady['scan'] * 1e3:>15.2f} "
                   f"{steady['ours'] / steady['scan']:>9.2f}")
        if numba_compiled:
            row += f" {numba_first:>13.3f} {steady['numba'] * 1e3:>15.2f}"
        print(f"{length:>6} {f.stats()['compiles']:>8} {first:>13.3f} {second * 1e3:>15.2f} "
              f"{steady['ours'] * 1e3:>10.2f} {steady['eager'] * 1e3:>15.2f}" + row)


_clock = time.perf_counter


def _seconds(function, x, params):
    start = _clock()
    function(x, *params)
    return _clock() - start


def _interleaved(contenders, x, params, repeat):
    """Median seconds per call of each function, calling them in turn ``repeat`` times."""
    times = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, function in contenders.items():
            times[name].append(_seconds(function, x, params))
    return {name: float(np.median(values)) for name, values in times.items()}

if __name__ == "__main__":
    main()
