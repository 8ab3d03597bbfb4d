"""Issue 13, reverse mode: ``jit(value_and_grad(rnn_loss))`` over the classic NumPy RNN
loop, with the loop captured (its reverse is a loop: tracer/loop_autodiff.py) and unrolled
(``loops='unroll'``: every step traced, what gradient traces did before).

Prints, per T and mode: compiles, first call (trace + compile + run), second call, and
the median of ``--repeat`` further calls measured interleaved with the eager tape
(``tracejit.value_and_grad`` without jit) and, when JAX is installed, ``jax.value_and_grad``
of ``lax.scan`` (its first call includes its compile). A fresh jit function per T and mode.
Interleaving makes load from other processes hit every contender alike; absolute numbers
still move with the machine's load.

    python -m benchmarks.loop_gradients [--modes capture unroll] [--lengths 16 64 256 1024]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tracejit as tj

N, D, H = 16, 32, 64
ARGNUMS = (0, 1, 2)


def rnn_loss(Wx, Wh, b, x, h0):
    N, T, D = x.shape
    h = h0
    h_all = np.zeros((N, T, Wh.shape[0]), dtype=x.dtype)
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return np.mean(h_all * h_all)


def scan_value_and_grad():
    """A function making a fresh ``jax.jit(jax.value_and_grad(...))`` of the same loss
    over ``lax.scan`` (None without JAX)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def loss(Wx, Wh, b, x, h0):
        def step(h, x_t):
            h = jnp.tanh(x_t @ Wx + h @ Wh + b)
            return h, h

        _, hs = jax.lax.scan(step, h0, jnp.swapaxes(x, 0, 1))
        return jnp.mean(hs * hs)

    def fresh():
        compiled = jax.jit(jax.value_and_grad(loss, argnums=ARGNUMS))

        def call(*args):
            value, grads = compiled(*args)
            return value.block_until_ready(), [g.block_until_ready() for g in grads]

        return call

    return fresh


def _seconds(function, args):
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def _interleaved(contenders, args, repeat):
    times = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, function in contenders.items():
            times[name].append(_seconds(function, args))
    return {name: float(np.median(values)) for name, values in times.items()}


def _check(got, want):
    (value, grads), (want_value, want_grads) = got, want
    np.testing.assert_allclose(value, want_value, rtol=2e-4)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-3, atol=1e-6)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", nargs="*", default=["capture", "unroll"],
                        choices=["capture", "unroll"])
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 64, 256, 1024])
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((D, H)).astype(np.float32) * 0.1,
              rng.standard_normal((H, H)).astype(np.float32) * 0.1,
              rng.standard_normal(H).astype(np.float32))
    h0 = rng.standard_normal((N, H)).astype(np.float32)
    eager = tj.value_and_grad(rnn_loss, argnums=ARGNUMS)
    jax_fresh = scan_value_and_grad()
    print(f"jit(value_and_grad(rnn_loss)), N={N} D={D} H={H}, float32, grads of Wx, Wh, b"
          + ("" if jax_fresh else " (JAX not installed: no scan columns)"))
    print(f"{'T':>6} {'mode':>8} {'compiles':>8} {'first s':>9} {'second ms':>10} "
          f"{'steady ms':>10} {'eager tape ms':>14}"
          + (f" {'scan first s':>12} {'scan steady ms':>15}" if jax_fresh else ""))
    for length in options.lengths:
        x = rng.standard_normal((N, length, D)).astype(np.float32)
        args = (*params, x, h0)
        want = eager(*args)
        for mode in options.modes:
            f = tj.jit(tj.value_and_grad(rnn_loss, argnums=ARGNUMS), dynamic=True,
                       cache="memory", loops=mode)
            start = time.perf_counter()
            got = f(*args)
            first = time.perf_counter() - start
            _check(got, want)
            second = _seconds(f, args)
            _check(f(*args), want)
            contenders = {"ours": f, "eager": eager}
            row = ""
            if jax_fresh:
                scan = jax_fresh()
                scan_first = _seconds(scan, args)
                contenders["scan"] = scan
            steady = _interleaved(contenders, args, options.repeat)
            if jax_fresh:
                row = f" {scan_first:>12.3f} {steady['scan'] * 1e3:>15.2f}"
            print(f"{length:>6} {mode:>8} {f.stats()['compiles']:>8} {first:>9.3f} "
                  f"{second * 1e3:>10.2f} {steady['ours'] * 1e3:>10.2f} "
                  f"{steady['eager'] * 1e3:>14.2f}" + row, flush=True)
    # One jit function over every length: one compile per bucket.
    f = tj.jit(tj.value_and_grad(rnn_loss, argnums=ARGNUMS), dynamic=True, cache="memory")
    for length in (9, 12, 16, 13, 10):
        f(*params, rng.standard_normal((N, length, D)).astype(np.float32), h0)
    print(f"T in 9, 12, 16, 13, 10 (one bucket), one jit function: "
          f"{f.stats()['compiles']} compile(s)")


if __name__ == "__main__":
    main()
