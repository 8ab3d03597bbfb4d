"""Guards decide as NumPy decides: a seeded random search over inputs near each guard's
threshold, compiled against eager, counting branch mismatches (must be 0).

Each family is a model function whose branches return different markers (``1``/``2``, or
the ``int()`` the trace used), compiled once and then called with many inputs of one
shape bucket, so the whole search reuses two compiled paths. Inputs are built to land on
or near the threshold (sums that cancel to about 0, fractions summing to about an
integer, data normalized to variance 1, tanh near saturation, dot products of orthogonal
vectors) mixed with ordinary ones, which must not run eagerly ("guard margin": eager
decides where rounding could flip the decision).

CI runs 5,000 inputs per family; ``pytest --fuzz N`` (or ``TRACEJIT_FUZZ=N``) runs N.
``python tests/differential/test_guard_decisions.py [N]`` prints the table: trials,
mismatches, margin exits (borderline / ordinary inputs), compiled calls.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from tracejit import jit

TRIALS = max(5000, int(os.environ.get("TRACEJIT_FUZZ") or 0))
SEED = 20240612


# --- model functions: the marker says which branch ran ---------------------------------------
def sum_positive(x):
    if x.sum() > 0:
        return 1, x * 2
    return 2, x - 2


def sum_to_int(x):
    count = int(x.sum())
    return count, x + count


def variance_above_one(x):
    if x.var() > 1:
        return 1, x * 2
    return 2, x - 2


def tanh_saturates(x):
    if (np.tanh(x) == 1.0).any():
        return 1, x * 2
    return 2, x - 2


def mean_above_half(x):
    if x.mean() > 0.5:
        return 1, x * 2
    return 2, x - 2


def exp_max_above_two(x):
    if np.exp(x).max() > 2.0:
        return 1, x * 2
    return 2, x - 2


def dot_positive(x, w):
    if x @ w > 0:
        return 1, x * 2
    return 2, x - 2


def exp_sum_above_ten(x):
    if np.exp(x).sum() > 10.0:
        return 1, x * 2
    return 2, x - 2


def std_times_int(x):
    return int(x.std() * 10), x * 2


# --- inputs: about half near the threshold, half ordinary -------------------------------------
def _pick(rng, options):
    return options[int(rng.integers(len(options)))]  # rng.choice converts the list each call


def _lengths(rng, count, low=17, high=32):
    return rng.integers(low, high + 1, count)  # one pow2 bucket: (16, 32]


def _cancelling(rng, n, dtype):
    """Values whose sum is 0 or within a few ulp of Σ|x| of it."""
    half = n // 2
    scale = 10.0 ** rng.uniform(-3, 3)
    values = rng.standard_normal(half) * scale
    values = np.concatenate([values, -values, rng.standard_normal(n - 2 * half) * 0])
    tiny = _pick(rng, [0.0, 1e-12, 1e-9, 1e-7, 1e-5]) * scale
    values[rng.integers(n)] += tiny * rng.standard_normal()
    return rng.permutation(values).astype(dtype)


def _ordinary(rng, n, dtype, center=0.0, spread=1.0):
    return (center + spread * rng.standard_normal(n)).astype(dtype)


def _mixed(borderline, ordinary):
    def make(rng, count):
        cases = []
        for length in _lengths(rng, count):
            near = bool(rng.random() < 0.5)
            cases.append((near, (borderline(rng, length) if near else ordinary(rng, length),)))
        return cases

    return make


def _summing_to(rng, n, total, dtype):
    weights = rng.random(n) + 0.1
    return (total * weights / weights.sum()).astype(dtype)


def _near_integer_sum(rng, n, dtype=np.float64):
    """Fractions of -1, 1 or 2 (sums within a few ulp of it), or 0.1 n times (n / 10)."""
    if rng.random() < 0.3:
        return np.full(n, 0.1 if n % 10 == 0 else 1.0 / n, dtype)
    return _summing_to(rng, n, _pick(rng, [-1, 1, 2]), dtype)


def _far_from_integers(dtype):
    def make(rng, n):
        return _summing_to(rng, n, _pick(rng, [-1, 1, 2]) + rng.uniform(0.2, 0.8), dtype)

    return make


def _unit_variance(rng, n, dtype=np.float64):
    values = rng.standard_normal(n)
    values = (values - values.mean()) / values.std()
    return (values * (1 + _pick(rng, [0.0, 1e-16, 1e-12, 1e-8]) * rng.standard_normal())
            + rng.uniform(-5, 5)).astype(dtype)


def _mean_half(rng, n, dtype=np.float32):
    return (_cancelling(rng, n, np.float64) + 0.5).astype(dtype)


def _near_saturation(dtype, low, high):
    def make(rng, n):
        return (rng.uniform(low, high, n) * rng.choice([-1, 1], n)).astype(dtype)

    return make


def _either(first, second):
    def make(rng, n):
        return (first if rng.random() < 0.5 else second)(rng, n)

    return make


def _exp_near_two(rng, n, dtype=np.float32):
    """Below log(2) but one value within a few ulp of it (exp of it within ulps of 2)."""
    values = rng.uniform(-3, 0.6, n).astype(dtype)
    log2 = dtype(np.log(2.0))
    values[rng.integers(n)] = log2 + rng.integers(-8, 9) * np.spacing(log2)
    return values


def _exp_sum_ten(rng, n, dtype=np.float32):
    weights = rng.random(n) + 0.05
    return np.log(10.0 * weights / weights.sum()).astype(dtype)


def _dot_cases(dtype):
    def make(rng, count):
        cases = []
        for length in _lengths(rng, count):
            w = rng.standard_normal(length)
            x = rng.standard_normal(length)
            near = bool(rng.random() < 0.5)
            if near:
                x = x - (x @ w) / (w @ w) * w
            cases.append((near, (x.astype(dtype), w.astype(dtype))))
        return cases

    return make


@dataclass
class Family:
    name: str
    function: object
    cases: object  # (rng, count) -> [(borderline?, args)]


FAMILIES = [
    Family("x.sum() > 0 float32", sum_positive, _mixed(
        lambda rng, n: _cancelling(rng, n, np.float32),
        lambda rng, n: _ordinary(rng, n, np.float32))),
    Family("x.sum() > 0 float64", sum_positive, _mixed(
        lambda rng, n: _cancelling(rng, n, np.float64),
        lambda rng, n: _ordinary(rng, n, np.float64))),
    Family("int(x.sum()) float64", sum_to_int, _mixed(
        _near_integer_sum, _far_from_integers(np.float64))),
    Family("int(x.sum()) float32", sum_to_int, _mixed(
        lambda rng, n: _near_integer_sum(rng, n, np.float32), _far_from_integers(np.float32))),
    Family("x.var() > 1 float64", variance_above_one, _mixed(
        _unit_variance, lambda rng, n: _ordinary(rng, n, np.float64, spread=1.3))),
    Family("x.var() > 1 float32", variance_above_one, _mixed(
        lambda rng, n: _unit_variance(rng, n, np.float32),
        lambda rng, n: _ordinary(rng, n, np.float32, spread=1.3))),
    # Between where our tanh and NumPy's first return 1 (float32: 8.66 and 10.0; float64:
    # 18.7 and 18.99); ordinary: never near 1, or saturated on both sides.
    Family("np.tanh(x) == 1.0 float32", tanh_saturates, _mixed(
        _near_saturation(np.float32, 8.0, 10.0), _either(
            _near_saturation(np.float32, 0.0, 5.0), _near_saturation(np.float32, 10.5, 15.0)))),
    Family("np.tanh(x) == 1.0 float64", tanh_saturates, _mixed(
        _near_saturation(np.float64, 18.5, 19.5), _either(
            _near_saturation(np.float64, 0.0, 15.0), _near_saturation(np.float64, 20.0, 30.0)))),
    Family("x.mean() > 0.5 float32", mean_above_half, _mixed(
        _mean_half, lambda rng, n: _ordinary(rng, n, np.float32, center=0.5))),
    Family("np.exp(x).max() > 2 float32", exp_max_above_two, _mixed(
        _exp_near_two, lambda rng, n: _ordinary(rng, n, np.float32, center=-1.0))),
    Family("x @ w > 0 float32", dot_positive, _dot_cases(np.float32)),
    Family("x @ w > 0 float64", dot_positive, _dot_cases(np.float64)),
    Family("np.exp(x).sum() > 10 float32", exp_sum_above_ten, _mixed(
        _exp_sum_ten, lambda rng, n: _ordinary(rng, n, np.float32, center=-1.0))),
    Family("int(x.std() * 10) float64", std_times_int, _mixed(
        _unit_variance, lambda rng, n: _unit_variance(rng, n) * _pick(rng, [1.05, 1.25]))),
]


def search(family, trials, seed=SEED):
    """Run ``trials`` inputs through one compiled function and eager NumPy; returns the
    tally (trials, mismatches with examples, margin exits by input kind, compiled calls)."""
    rng = np.random.default_rng([seed, sum(map(ord, family.name))])
    jitted = jit(family.function, cache=False, dynamic=True)  # one bucket: two paths
    cases = family.cases(rng, trials)
    tally = {"trials": 0, "mismatches": 0, "examples": [], "margin_borderline": 0,
             "margin_ordinary": 0, "borderline": 0, "compiled": 0}
    margins = compiled = 0
    for near, args in cases:
        with np.errstate(all="ignore"):
            marker, result = jitted(*args)
            expected_marker, expected = family.function(*args)
        stats = jitted.stats()
        margin = stats["eager_calls"].get("guard margin", 0) - margins
        margins += margin
        tally["trials"] += 1
        tally["borderline"] += near
        tally["margin_borderline" if near else "margin_ordinary"] += margin
        tally["compiled"] += stats["compiled_calls"] - compiled
        compiled = stats["compiled_calls"]
        if marker != expected_marker or not (np.array_equal(result, expected) or np.allclose(
                result, expected, rtol=1e-5, atol=1e-6, equal_nan=True)):
            tally["mismatches"] += 1
            if len(tally["examples"]) < 3:
                tally["examples"].append((args, marker, expected_marker))
    return tally


@pytest.mark.parametrize("family", FAMILIES, ids=[family.name for family in FAMILIES])
def test_guards_decide_as_numpy(family, differential_tally):
    tally = search(family, TRIALS)
    assert tally["mismatches"] == 0, (
        f"{family.name}: {tally['mismatches']} of {tally['trials']} inputs took another "
        f"branch than eager, e.g. {tally['examples'][0]}")
    # Ordinary inputs run compiled; only inputs within rounding of the threshold go eager.
    ordinary = tally["trials"] - tally["borderline"]
    assert tally["margin_ordinary"] <= 0.01 * ordinary, tally
    assert tally["compiled"] >= 0.4 * tally["trials"], tally
    differential_tally.record("guard decisions", family.name, {
        "argument_sets": tally["trials"], "calls": tally["trials"],
        "compiled_calls": tally["compiled"]})


if __name__ == "__main__":
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else TRIALS
    print(f"{'family':32} {'trials':>7} {'mismatch':>8} {'margin near':>12} "
          f"{'margin ordinary':>16} {'compiled':>9}")
    for family in FAMILIES:
        tally = search(family, trials)
        print(f"{family.name:32} {tally['trials']:7d} {tally['mismatches']:8d} "
              f"{tally['margin_borderline']:6d}/{tally['borderline']:<5d} "
              f"{tally['margin_ordinary']:10d}/{tally['trials'] - tally['borderline']:<5d} "
              f"{tally['compiled']:9d}")
