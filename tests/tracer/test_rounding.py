"""Rounding to whole numbers and to decimals, compiled against eager NumPy.

``np.rint``/``np.trunc`` are primitives; ``np.round``/``np.around``/``ndarray.round`` are
NumPy's own composition of them (scale by ``10 ** decimals``, ``rint``, scale back); Python's
``round()`` on a traced number answers as on the eager value (an int, guarded like
``int()``). Results must equal NumPy's bit for bit: half-way cases go to even, signed zeros,
NaN and infinities pass through, integers stay integers.
"""

import numpy as np
import pytest

import tracejit as tj

SPECIAL = [0.5, 1.5, 2.5, -0.5, -1.5, -0.0, 0.0, 0.49999999999999994, 2.0 ** 52 + 0.5,
           -(2.0 ** 53), 1e300, np.nan, np.inf, -np.inf, 1.005, 2.675, -7.45, 123.456]


def values(dtype, n, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, n).astype(dtype)
    random = rng.standard_normal(n) * 10.0 ** rng.integers(-2, 4, n)
    mixed = np.concatenate([np.array(SPECIAL), random])[:n] if n > len(SPECIAL) else random
    with np.errstate(over="ignore"):  # 1e300 is inf in float32
        return mixed.astype(dtype)


def assert_identical(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    else:
        assert got == want or (got != got and want != want)


def rounding_ops(x):
    return np.rint(x), np.trunc(x), np.round(x), np.round(x, 2), np.around(x, -1), x.round(1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_rounding_ops_match_numpy_over_sizes_and_special_values(dtype):
    f = tj.jit(rounding_ops, cache="memory")
    for n in (0, 1, 7, 31, 64, 64, 7):
        x = values(dtype, n, seed=n)
        for got, want in zip(f(x), rounding_ops(x)):
            assert_identical(got, want)
    assert f.stats()["compiled_calls"] > 0


def test_rounding_reads_a_non_contiguous_input():
    f = tj.jit(rounding_ops, cache="memory")
    for n in (5, 11):
        x = values(np.float64, 2 * n * 3, seed=n).reshape(2 * n, 3)[::2, 1:]
        for got, want in zip(f(x), rounding_ops(x)):
            assert_identical(got, want)


def quantize(x, levels):
    """8-bit style fake quantization: what a quantization-aware model computes."""
    scale = np.abs(x).max() / levels
    return np.clip(np.round(x / scale), -levels, levels) * scale


def test_fake_quantization_matches_numpy():
    f = tj.jit(quantize, cache="memory")
    for n in (8, 13, 8):
        x = values(np.float32, n, seed=n + 100)
        assert_identical(f(x, 127), quantize(x, 127))


def python_round(x, epoch):
    steps = round(epoch / 4)  # half to even: 2.5 -> 2
    return x * steps, round(float(x.sum()), 3), round(x.max()), round(x.max(), 2)


def test_python_round_on_traced_numbers_matches_eager():
    f = tj.jit(python_round, cache="memory")
    for epoch in (3, 5, 7, 9, 10, 14, 3):
        x = np.array([0.125, 2.5, -1.0]) * epoch
        for got, want in zip(f(x, epoch), python_round(x, epoch)):
            assert_identical(got, want)


def test_python_round_of_an_array_raises_as_numpy_does():
    f = tj.jit(lambda x: round(x * 2), cache="memory")
    with pytest.raises(TypeError, match="doesn't define __round__"):
        f(np.ones(3))


def test_rint_and_trunc_have_zero_gradient():
    x = tj.tensor(np.array([0.2, 1.7, -2.3]), requires_grad=True)
    (np.rint(x) * x + np.trunc(x) * x).sum().backward()
    np.testing.assert_array_equal(x.grad, np.rint(x.numpy()) + np.trunc(x.numpy()))
