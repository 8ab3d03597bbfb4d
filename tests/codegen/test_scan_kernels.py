"""Compiled ``np.cumsum`` is NumPy's running sum to the bit (``codegen/scan.py``), and
``np.cumprod`` NumPy's running product (the same scan, multiplying).

NumPy adds each element to the running sum before it, in sequence; compiled code adds in
that order, so results are compared bit for bit: every dtype NumPy accumulates in, every
axis, odd, 0, 1 and long lengths, NaN and infinities, strided and transposed operands,
``dtype=``, ``axis=None``, one compile for every length of a bucket, gradients, and a mask
on a float32 running sum at its threshold (the sum was a product with a triangle of ones
before: BLAS's order, unchecked masks, and axes past 4096 ran eagerly).
"""

import numpy as np
import pytest

import tracejit as tj
from tracejit import value_and_grad


def same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                  want.dtype, want.shape)
    assert np.array_equal(np.ascontiguousarray(got).view(np.uint8),
                          np.ascontiguousarray(want).view(np.uint8)), (got, want)


def running(x, axis):
    return np.cumsum(x, axis=axis)


def calls(function, cases, **options):
    f = tj.jit(function, cache="memory", max_variants=64, **options)
    for args in cases:
        for _ in range(2):  # the second runs the compiled program
            same_bits(f(*args), function(*args))
    return f


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_every_axis_and_dtype_is_numpys(dtype):
    rng = np.random.default_rng(1)
    cases = [((rng.standard_normal(shape) * 100).astype(dtype), axis)
             for shape in [(7,), (1,), (0,), (3, 13), (4, 0), (2, 3, 11)]
             for axis in range(-len(shape), len(shape))]
    f = calls(running, cases, static_argnames=("axis",))
    assert f.stats()["compiled_calls"] >= len(cases) and not f.stats()["eager_calls"]


def test_specials_strides_and_keywords():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    x[1, 3], x[2, 0], x[2, 5], x[4, 4], x[4, 6] = np.nan, np.inf, -np.inf, np.inf, -np.inf
    forms = [
        lambda x: np.cumsum(x, axis=1),
        lambda x: np.cumsum(x[:, ::-2], axis=1),  # strided, reversed
        lambda x: np.cumsum(x.T, axis=0) * 2,  # transposed
        lambda x: np.cumsum(x),  # axis=None: flattened
        lambda x: np.cumsum(x, axis=0, dtype=np.float64),
        lambda x: x.cumsum(axis=-1) - x,  # the method, then fused arithmetic
        lambda x: np.cumsum(x > 0, axis=1),  # bools count in int64
        lambda x: np.cumsum(x[0, 0]),  # 0-d: one element
    ]
    for form in forms:
        calls(form, [(x,)])


def test_a_long_axis_compiles_once_for_its_bucket():
    """A moving average by the cumsum trick over a long series (an axis past the old
    4096 limit ran eagerly): one compile serves the bucket's lengths."""
    def moving_average(x, w):
        c = np.cumsum(x)
        return (c[w:] - c[:-w]) / w

    rng = np.random.default_rng(3)
    f = calls(moving_average, [(rng.standard_normal(n), 5) for n in (9000, 9001, 12289)],
              dynamic=True)
    assert f.stats()["compiles"] == 1, f.explain()


def test_gradients_through_a_running_sum():
    def loss(x, w):
        return np.sum(np.cumsum(x * w, axis=1) ** 2)

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((3, 7)), rng.standard_normal((3, 7))
    value, (gx, gw) = tj.jit(value_and_grad(loss, argnums=(0, 1)), cache="memory")(x, w)
    running_sums = np.cumsum(x * w, axis=1)
    suffix = np.cumsum((2 * running_sums)[:, ::-1], axis=1)[:, ::-1]  # d/d(x w)
    np.testing.assert_allclose(value, loss(x, w), rtol=1e-12)
    np.testing.assert_allclose(gx, suffix * w, rtol=1e-12)
    np.testing.assert_allclose(gw, suffix * x, rtol=1e-12)


def test_a_mask_on_a_float32_running_sum_at_its_threshold_is_numpys():
    """Thresholds at NumPy's running sum and an ulp below: the mask is NumPy's, compiled."""
    rng = np.random.default_rng(9)

    def mask(x, threshold):
        return np.cumsum(x, axis=1) > threshold

    f = tj.jit(mask, cache="memory")
    for _ in range(5):
        x = rng.standard_normal((3, 247)).astype(np.float32)
        value = np.cumsum(x, axis=1)[0, -1]
        for threshold in (value, np.nextafter(value, -np.inf)):
            for _ in range(2):
                same_bits(f(x, np.asarray(threshold)), mask(x, np.asarray(threshold)))
    assert f.stats()["compiled_calls"] >= 10 and not f.stats()["eager_calls"], f.explain()


# --- cumprod: a scan too, multiplying in NumPy's order ---------------------------------
def _hostile(dtype, shape, rng):
    """Values whose products depend on their order: ±inf, NaN, denormals, huge values and
    (signed) zeros among ordinary ones."""
    info = np.finfo(dtype)
    specials = np.array([np.inf, -np.inf, np.nan, info.smallest_subnormal, -info.tiny / 4,
                         info.max / 2, 0.0, -0.0, 1.5, -0.75, 1e30 if dtype == np.float32
                         else 1e300], dtype)
    return rng.choice(specials, size=shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cumprod_of_hostile_values_is_numpys(dtype):
    """np.cumprod multiplies in sequence: an inf meets each denormal alone (inf), where
    the triangle product it was composed from multiplied two float32 denormals first,
    underflowed to 0 and gave NaN past 26 elements (round 22c, helper-158). Running sums
    of the same values are NumPy's too."""
    rng = np.random.default_rng(22)
    x = np.full(27, np.finfo(dtype).smallest_subnormal, dtype)
    x[0] = np.inf
    cases = [(x, 0)]
    for n in (1, 26, 27, 100):
        data = _hostile(dtype, (3, n), rng)
        cases += [(data, axis) for axis in (0, 1, -1)]
        cases.append((np.asarray(data.T), 0))
    strided = [(data[:, ::-3], 1), (data.T[::2], 0)]  # non-contiguous: reversed, transposed

    def both(x, axis):
        return np.cumprod(x, axis=axis), np.cumsum(x, axis=axis)

    f = tj.jit(both, cache="memory", max_variants=64, static_argnames=("axis",))
    with np.errstate(all="ignore"):
        for args in cases + strided:
            for _ in range(2):  # the second runs the compiled program
                for got, want in zip(f(*args), both(*args)):
                    same_bits(got, want)
    assert f.stats()["compiled_calls"] >= len(cases) and not f.stats()["eager_calls"], (
        f.explain())


def test_cumprod_of_integers_wraps_as_numpys():
    rng = np.random.default_rng(23)
    x = rng.integers(-90, 90, size=(3, 40)).astype(np.int32)
    calls(lambda x: np.cumprod(x, axis=1), [(x,)])  # int64 accumulator, wrapping
    calls(lambda x: np.cumprod(x, axis=0, dtype=np.int8), [(x,)])
    calls(lambda x: np.cumprod(x > 0, axis=1), [(x,)])  # bools in int64


def test_gradients_through_a_running_product_with_zeros():
    """The scan's gradient is the triangle product's: a zero's is the product of the
    others before each running product, as prod's (PyTorch's rule)."""
    def loss(x):
        return np.sum(np.cumprod(x, axis=1) * np.arange(1.0, 6.0))

    x = np.array([[0.5, -1.5, 2.0, 0.75, 1.25], [1.5, 0.0, -0.5, 2.0, 0.0]])
    value, grad = tj.jit(value_and_grad(loss), cache="memory")(x)
    want = np.zeros_like(x)
    weights = np.arange(1.0, 6.0)
    for r in range(2):
        for i in range(5):
            for k in range(i, 5):
                want[r, i] += weights[k] * np.prod(np.delete(x[r, :k + 1], i))
    assert value == loss(x)
    np.testing.assert_allclose(grad, want, rtol=1e-12, atol=1e-15)
