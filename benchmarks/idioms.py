"""Small real-model steps using idioms that ran eagerly on every call until they compiled:
NumPy eager against tracejit, side by side in this one process.

    python -m benchmarks.idioms [--quick]

1. appends: a numpy-ml style dense layer keeping ``self.X.append(X)`` and
   ``self.derived_variables["Z"].append(Z)`` each forward, and a training step logging
   ``LOSSES.append(loss)`` (tracer/list_appends.py); the lists are emptied after each call,
   in both candidates alike, so memory stays flat;
2. masked log: a log-likelihood whose ``np.log`` of zero and negative entries is masked by
   ``np.isfinite`` (margin_rules._exact_outside_domain);
3. ranks: an empirical CDF, ``np.searchsorted(np.sort(x), x) / n`` (scans.sort gathers);
4. Zhou's numpy CNN: ``Conv3x3.forward`` then ``MaxPool2.backprop`` (``im_region[i2, j2,
   f2] == amax[f2]``; margin_rules._element_of_extreme), regions from generators as in the
   original, the same image each call (its branches depend on the data: another image
   takes another compiled path, or traces a new one);
5. the same max-pool backward written with ``range`` loops after a 1x1 convolution: the
   ``f2`` loop is captured, and its data-dependent ``if`` fails a loop guard (eager).

Each row: median seconds per call of each (``harness.median_per_call``: rounds with a
rotating first candidate), the speedup, and tracejit's stats (``compiled_calls`` must be all
but the first call). Results go to stdout and ``benchmarks/results/idioms.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import tracejit as tj

from .harness import machine_facts, median_per_call

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "idioms.json"
LOSSES = []


class Dense:
    """numpy-ml's FullyConnected forward: the inputs and pre-activations kept for backward."""

    def __init__(self, rng, n_in, n_out):
        self.W = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        self.b = np.zeros(n_out)
        self.X = []
        self.derived_variables = {"Z": []}

    def forward(self, X):
        Z = X @ self.W + self.b
        Y = np.maximum(Z, 0.0)
        self.X.append(X)
        self.derived_variables["Z"].append(Z)
        return Y


def training_step(layer, X, y):
    out = layer.forward(X)
    loss = ((out.sum(axis=1) - y) ** 2).mean()
    LOSSES.append(loss)
    return loss


def masked_log_likelihood(p, y):
    logs = np.log(p)
    logs = np.where(np.isfinite(logs), logs, 0.0)
    return -(y * logs).sum(axis=1).mean()


def empirical_cdf(x):
    return np.searchsorted(np.sort(x), x) / x.shape[0]


def max_pool_backprop(features, weights, d_out):
    # a 1x1 convolution and relu before the pool: values with a rounding bound
    last_input = np.maximum((features.reshape(64, 8) @ weights).reshape(8, 8, 4), 0.0)
    d_input = np.zeros(last_input.shape)
    h, w, _ = last_input.shape
    for i in range(h // 2):
        for j in range(w // 2):
            im_region = last_input[i * 2:i * 2 + 2, j * 2:j * 2 + 2]
            rh, rw, f = im_region.shape
            amax = np.amax(im_region, axis=(0, 1))
            for i2 in range(rh):
                for j2 in range(rw):
                    for f2 in range(f):
                        if im_region[i2, j2, f2] == amax[f2]:
                            d_input[i * 2 + i2, j * 2 + j2, f2] = d_out[i, j, f2]
    return d_input


class Conv3x3:
    """Zhou's numpy CNN (victorzhou.com's cnn-from-scratch): regions from a generator."""

    def __init__(self, rng, num_filters):
        self.num_filters = num_filters
        self.filters = rng.standard_normal((num_filters, 3, 3)) / 9

    def iterate_regions(self, image):
        h, w = image.shape
        for i in range(h - 2):
            for j in range(w - 2):
                yield image[i:(i + 3), j:(j + 3)], i, j

    def forward(self, image):
        h, w = image.shape
        output = np.zeros((h - 2, w - 2, self.num_filters))
        for im_region, i, j in self.iterate_regions(image):
            output[i, j] = np.sum(im_region * self.filters, axis=(1, 2))
        return output


class MaxPool2:
    def iterate_regions(self, image):
        h, w, _ = image.shape
        for i in range(h // 2):
            for j in range(w // 2):
                yield image[(i * 2):(i * 2 + 2), (j * 2):(j * 2 + 2)], i, j

    def backprop(self, last_input, d_L_d_out):
        d_L_d_input = np.zeros(last_input.shape)
        for im_region, i, j in self.iterate_regions(last_input):
            h, w, f = im_region.shape
            amax = np.amax(im_region, axis=(0, 1))
            for i2 in range(h):
                for j2 in range(w):
                    for f2 in range(f):
                        if im_region[i2, j2, f2] == amax[f2]:
                            d_L_d_input[i * 2 + i2, j * 2 + j2, f2] = d_L_d_out[i, j, f2]
        return d_L_d_input


def zhou_conv_pool_backprop(conv, pool, image, d_out):
    return pool.backprop(conv.forward(image), d_out)


def _workloads(rng):
    eager_layer, jit_layer = Dense(rng, 128, 64), None
    jit_layer = Dense(np.random.default_rng(0), 128, 64)
    jit_layer.W, jit_layer.b = eager_layer.W.copy(), eager_layer.b.copy()
    X, y = rng.standard_normal((64, 128)), rng.standard_normal(64)

    def emptied(layer):
        del layer.X[:], layer.derived_variables["Z"][:], LOSSES[:]

    step = tj.jit(training_step, cache="memory")
    p = rng.uniform(-0.2, 1.0, (64, 10))
    p[::7, 3] = 0.0
    onehot = np.eye(10)[rng.integers(0, 10, 64)]
    features, weights = rng.standard_normal((8, 8, 8)), rng.standard_normal((8, 4))
    d_out = rng.standard_normal((4, 4, 4))
    conv, pool = Conv3x3(rng, 2), MaxPool2()
    image, d_pooled = rng.standard_normal((10, 10)), rng.standard_normal((4, 4, 2))
    return {
        "appends (numpy-ml dense + LOSSES)": (
            lambda: (training_step(eager_layer, X, y), emptied(eager_layer)),
            lambda: (step(jit_layer, X, y), emptied(jit_layer)), step),
        "masked log-likelihood 64x10": (
            lambda: masked_log_likelihood(p, onehot), None,
            tj.jit(masked_log_likelihood, cache="memory"), (p, onehot)),
        "empirical CDF n=64": (
            lambda: empirical_cdf(p[:, 0].copy()), None,
            tj.jit(empirical_cdf, cache="memory"), (p[:, 0].copy(),)),
        "Zhou CNN conv + max pool backward 10x10": (
            lambda: zhou_conv_pool_backprop(conv, pool, image, d_pooled), None,
            tj.jit(zhou_conv_pool_backprop, cache="memory"), (conv, pool, image, d_pooled)),
        "max pool backward 8x8x4, range loops": (
            lambda: max_pool_backprop(features, weights, d_out), None,
            tj.jit(max_pool_backprop, cache="memory"), (features, weights, d_out)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args(argv)
    rng = np.random.default_rng(3)
    rows = []
    for name, entry in _workloads(rng).items():
        eager, compiled, jitted = entry[:3]
        if compiled is None:
            arguments = entry[3]
            compiled = (lambda f, a: lambda: f(*a))(jitted, arguments)
        compiled()  # trace and compile before timing
        times, _ = median_per_call({"numpy": eager, "tracejit": compiled},
                                   repeats=5 if options.quick else 15,
                                   target_seconds=0.05 if options.quick else 0.2)
        stats = jitted.stats()
        rows.append({"workload": name, "numpy_us": times["numpy"] * 1e6,
                     "tracejit_us": times["tracejit"] * 1e6,
                     "speedup": times["numpy"] / times["tracejit"],
                     "calls": stats["calls"], "compiled_calls": stats["compiled_calls"],
                     "eager_calls": stats["eager_calls"]})
        row = rows[-1]
        print(f"{name:38s} numpy {row['numpy_us']:9.1f} us  tracejit {row['tracejit_us']:9.1f}"
              f" us  {row['speedup']:5.2f}x  ({row['compiled_calls']}/{row['calls']} "
              f"compiled, eager {row['eager_calls'] or 0})")
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps({"machine": machine_facts(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
