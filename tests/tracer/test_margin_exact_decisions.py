"""Decisions that are the same in any rounding compile instead of taking a guard-margin
exit on every call (tracer/margin_rules.py):

* ``np.log`` of a negative is NaN however its operand rounds (of 0: -inf, of inf: inf), so
  ``np.isfinite(np.log(x))`` / ``np.isnan`` masking the negatives is decided
  (``_exact_outside_domain``, ``_float_class``); so is ``np.power(0.0, -1)`` (inf) and a
  negative base to a fractional power (NaN) (``_exact_power_poles``);
* ``np.sort`` is a permutation: it gathers the element landing at each position (a sum of
  it with zeros carried a rounding bound, and made -0.0 a 0.0), so
  ``np.searchsorted(np.sort(x), x)`` compiles (tests/tracer/test_adversarial_review13.py);
* ``im_region[i2, j2, f2] == amax[f2]`` (Zhou's numpy CNN max-pool backward) decides like
  ``region == region.max(axis)`` does: only two elements near a window's max leave it to
  NumPy (``_element_of_extreme``).

Each runs eager and compiled side by side over several calls, at the values that decide
(NaN, inf, -0.0, ties), and counts ``compiled_calls`` (a margin exit runs eagerly).
"""

import numpy as np
import pytest

import tracejit as tj

SPECIAL = [-1.0, 2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, -1e-300, 1.0, 3.5]


def run(function, calls, f=None):
    f = f or tj.jit(function, cache="memory")
    for arguments in calls:
        with np.errstate(all="ignore"):
            want = function(*arguments)
            got = f(*arguments)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    return f


def masked_log(x):
    logs = np.log(x)
    return np.where(np.isfinite(logs), logs, 0.0) * 2.0


def nan_marked_log1p(x):
    logs = np.log1p(x - 1.0)  # below -1 where x < 0, whatever x - 1 rounds to
    return np.where(np.isnan(logs), -1.0, logs)


def infinite_log10(x):
    return np.isinf(np.log10(x * 3.0)).sum() + np.isnan(np.log2(x)).sum()


def row_inverse(x):
    """pygcn's normalize: np.power(rowsum, -1), infinities of empty rows zeroed."""
    features = np.where(np.isfinite(x), x, 0.0).reshape(-1, 2)  # (a sum with inf: inexact)
    inverse = np.power(features.sum(axis=1), -1)  # a row of zeros: inf
    inverse[np.isinf(inverse)] = 0.0
    return inverse


def nan_marked_sqrt_power(x):
    roots = (x * 2.0) ** 0.5  # NaN for the negatives, in any rounding
    return np.where(np.isnan(roots), -1.0, roots)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("function", [masked_log, nan_marked_log1p, infinite_log10,
                                      row_inverse, nan_marked_sqrt_power])
def test_logarithms_off_their_domain_are_decided(function, dtype):
    calls = [(np.array(SPECIAL, dtype) * scale,) for scale in (1.0, -2.0, 0.5)]
    f = run(function, calls)
    assert f.stats()["compiled_calls"] >= 2 and not f.stats()["eager_calls"], f.explain()


def test_sort_keeps_negative_zero_and_ranks_compile():
    # (zeros of one sign: NumPy's sort orders -0.0 and 0.0, equal, as it happens to)
    x = np.array([1.0, -0.0, 3.0, -2.0, 3.0, np.nan, -0.0])

    def ranks(x):
        return np.sort(x), np.searchsorted(np.sort(x), x), (np.sort(x) >= x[2]).sum()

    f = tj.jit(ranks, cache="memory")
    for scale in (1.0, -1.0, 2.0):
        got, want = f(x * scale), ranks(x * scale)
        for mine, theirs in zip(got, want):
            np.testing.assert_array_equal(mine, theirs)
            np.testing.assert_array_equal(np.signbit(mine), np.signbit(theirs))
    assert f.stats()["compiled_calls"] >= 2 and not f.stats()["eager_calls"], f.explain()


FILTERS = np.random.default_rng(1).standard_normal((2, 3, 3)) / 9


def max_pool_backprop(image, d_out):
    """Zhou's numpy CNN: a 3x3 convolution, relu, then MaxPool2.backprop."""
    h, w = image.shape
    out = np.zeros((h - 2, w - 2, 2))
    for i in range(h - 2):
        for j in range(w - 2):
            out[i, j] = np.sum(image[i:i + 3, j:j + 3] * FILTERS, axis=(1, 2))
    out = np.maximum(out, 0)
    d_input = np.zeros(out.shape)
    for i in range(out.shape[0] // 2):
        for j in range(out.shape[1] // 2):
            im_region = out[i * 2:i * 2 + 2, j * 2:j * 2 + 2]
            amax = np.amax(im_region, axis=(0, 1))
            for i2 in range(2):
                for j2 in range(2):
                    for f2 in range(2):
                        if im_region[i2, j2, f2] == amax[f2]:
                            d_input[i * 2 + i2, j * 2 + j2, f2] = d_out[i, j, f2]
    return d_input


def test_an_element_compared_with_its_windows_max_is_decided():
    rng = np.random.default_rng(5)
    image, d_out = rng.standard_normal((4, 6)), rng.standard_normal((1, 2, 2))
    f = run(max_pool_backprop, [(image, d_out)] * 3)  # the same branches: one path
    assert f.stats()["compiled_calls"] >= 2 and not f.stats()["eager_calls"], f.explain()
    # a window holding two equal maxima (a mirrored image): NumPy decides, the same way;
    # relu zeros everywhere: exact ties
    mirrored = np.concatenate([image[:, :3], image[:, 2::-1]], axis=1)
    run(max_pool_backprop, [(mirrored, d_out), (np.zeros((4, 6)), d_out)], f)
