"""np.clip at its bounds, signed zeros and NaN included, traced and compiled as NumPy has it:
with two one-element bounds NumPy's clip ufunc keeps ``x`` where it equals a bound
(``clip(-0.0, 0.0, 1.0)`` is -0.0); with array bounds, or one bound (np.maximum or
np.minimum), the bound wins the tie."""

import itertools

import numpy as np
import pytest

import tracejit

BOUNDS = [-0.0, 0.0, -1.0, 0.5, np.nan, None]
X = np.array([-0.0, 0.0, 0.5, -1.0, 2.0, np.nan, np.inf, -np.inf])


def _clip(x, low, high):
    return np.clip(x, low, high)


def _same_bits(got, want):
    return (got.dtype == want.dtype and np.array_equal(np.signbit(got), np.signbit(want))
            and np.array_equal(got, want, equal_nan=True))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("low, high", [pair for pair in itertools.product(BOUNDS, BOUNDS)
                                       if pair != (None, None)], ids=str)
def test_constant_bounds(dtype, low, high):
    x = X.astype(dtype)
    jitted = tracejit.jit(_clip, cache=False, static_argnames=("low", "high"))
    with np.errstate(all="ignore"):
        want = _clip(x, low, high)
        for _ in range(2):  # traced, then compiled
            assert _same_bits(jitted(x, low, high), want)
    assert jitted.stats()["compiled_calls"] == 1


def test_bounds_as_arrays_and_the_method():
    def both(x, low, high):
        return np.clip(x, low, high), x.clip(low), x.clip(max=high)

    x = np.tile(X, 3)
    jitted = tracejit.jit(both, cache=False)
    for low, high in [(np.zeros(24), np.full(24, -0.0)), (np.full(24, -0.0), np.zeros(24)),
                      (np.full(24, -0.0), np.full(24, 0.5)), (np.array(-0.0), np.zeros(24)),
                      (np.array([-0.0]), np.array(0.0)), (np.array(0.0), np.array([-0.0]))]:
        with np.errstate(all="ignore"):
            want = both(x, low, high)
            got = jitted(x, low, high)
        assert all(_same_bits(g, w) for g, w in zip(got, want))
    assert jitted.stats()["compiled_calls"] >= 1
