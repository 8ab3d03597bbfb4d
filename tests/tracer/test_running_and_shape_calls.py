"""``np.cumprod``, ``np.maximum.accumulate``/``np.minimum.accumulate`` (and the add and
multiply accumulations), ``np.atleast_1d/2d/3d``, ``np.broadcast_arrays``,
``np.array_equal``/``np.array_equiv`` and ``np.take(mode='clip'/'wrap')`` under ``jit``:
eager vs compiled over dtypes, sizes (0, 1, primes), 0-d values, strided views and
NaN/inf, with no eager fallback; gradients of the running reductions."""

import numpy as np
import pytest
from real_model_checks import no_internal_errors, run_calls

import tracejit as tj

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]
TOLERANCE = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-12)}


def compiled_only(f):
    assert not f.stats()["eager_calls"], f.explain()


def make(shape, dtype, seed=0, specials=True):
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)
    if np.dtype(dtype).kind != "f":
        values = rng.integers(-3, 4, shape)
    elif specials and values.size >= 6:
        values.reshape(-1)[[1, 4]] = [np.nan, np.inf]
    return np.asarray(values).astype(dtype)


def running(x):
    return (np.maximum.accumulate(x, axis=-1), np.minimum.accumulate(x), np.cumprod(x),
            np.cumprod(x, axis=0), np.add.accumulate(x, axis=-1),
            np.multiply.accumulate(x, axis=0))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 0), (13, 2)], ids=str)
def test_running_reductions(shape, dtype):
    f = run_calls(running, [(make(shape, dtype),), (make(shape, dtype, 1),)],
                  **TOLERANCE.get(dtype, {}))
    compiled_only(f)


def test_running_reductions_of_views_and_lengths():
    x = make((6, 10), np.float64)
    sets = [(x[::2, ::-3],), (x[1:, ::2].T,), (make((11, 3), np.float64, 2),)]
    compiled_only(run_calls(running, sets, **TOLERANCE[np.float64]))


def test_running_reductions_of_0d_raise_like_numpy():
    for model in (lambda x: np.maximum.accumulate(x), lambda x: np.cumprod(x, axis=0)):
        no_internal_errors(run_calls(model, [(np.float64(2.0) * np.ones(()),)]))


def test_accumulate_over_no_axis_is_for_vectors_only():
    def model(x):
        return (np.add.accumulate(x, axis=None), np.maximum.accumulate(x, axis=None),
                np.multiply.accumulate(x, axis=(0,)))

    compiled_only(run_calls(model, [(np.array([1.0, 3.0, 2.0]),), (np.arange(5.0),)]))
    f = run_calls(lambda x: np.minimum.accumulate(x, axis=None), [(np.ones((2, 3)),)])
    no_internal_errors(f)


def test_cumprod_of_a_0d_value_and_dtype_argument():
    def model(x, y):
        return np.cumprod(x), np.cumprod(y, dtype=np.float32), np.maximum.accumulate(
            y, dtype=np.float64)

    x, y = np.array(1.5), np.arange(1, 6, dtype=np.int32)
    compiled_only(run_calls(model, [(x, y), (x * 2, y[::-1])]))


def _running_extremes(x):
    return np.maximum.accumulate(x), np.minimum.accumulate(x, axis=-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_running_extremes_keep_the_latest_zero_like_numpy(dtype):
    """np.maximum gives its second operand at a tie, so a running maximum of zeros has the
    sign of the latest zero (compiled calls had the first one's)."""
    import itertools

    values = [0.0, -0.0, 1.0, -1.0, np.nan]
    rows = np.array(list(itertools.product(values, repeat=4)), dtype=dtype)
    jitted = tj.jit(_running_extremes, cache=False)
    for x in (rows, rows[::-1].copy(), rows.T.copy()):
        want = _running_extremes(x)
        for _ in range(2):
            for got, expected in zip(jitted(x), want):
                np.testing.assert_array_equal(got, expected)
                np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    assert jitted.stats()["compiled_calls"] >= 2


def test_running_peak_of_a_drawdown():
    def drawdown(returns):
        wealth = np.cumprod(1.0 + returns)
        peak = np.maximum.accumulate(wealth)
        return ((peak - wealth) / peak).max()

    rng = np.random.default_rng(4)
    compiled_only(run_calls(drawdown, [(rng.normal(0, 0.05, n),) for n in (5, 8, 13, 1)],
                            **TOLERANCE[np.float64]))


def test_gradients_of_running_reductions():
    def loss(x):
        return (np.maximum.accumulate(x) * np.arange(1.0, 6.0)).sum() + np.cumprod(x).sum()

    x = np.array([0.5, -1.2, 2.0, 0.7, 1.1])
    value, gradient = tj.jit(tj.value_and_grad(loss), cache="memory")(x)
    np.testing.assert_allclose(value, loss(x))
    peak_gradient = np.array([1.0 + 2.0, 0.0, 3.0 + 4.0 + 5.0, 0.0, 0.0])
    products = np.cumprod(x)
    product_gradient = np.array([products[k:].sum() / x[k] for k in range(5)])
    np.testing.assert_allclose(gradient, peak_gradient + product_gradient, rtol=1e-12)


def shapes_of(x, y):
    a, b = np.broadcast_arrays(x, y)
    return (np.atleast_1d(x), np.atleast_2d(x), np.atleast_3d(x), np.atleast_2d(x, y), a, b,
            a.shape, np.broadcast_arrays(x)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((), (3,)), ((1,), (2, 1)), ((7,), (0, 1)),
                                    ((2, 3), (3,)), ((2, 1, 3), (4, 1))], ids=str)
def test_atleast_and_broadcast_arrays(shapes, dtype):
    first, second = shapes
    f = run_calls(shapes_of, [(make(first, dtype), make(second, dtype, 1)),
                              (make(first, dtype, 2), make(second, dtype, 3))])
    compiled_only(f)


def test_broadcast_arrays_mismatch_raises_like_numpy():
    no_internal_errors(run_calls(lambda x, y: np.broadcast_arrays(x, y),
                                 [(np.ones(3), np.ones(4))]))


def converged(x, labels, y):
    new = (x > 0).astype(labels.dtype)
    return (np.array_equal(new, labels), np.array_equal(x, y), np.array_equal(x, x),
            np.array_equal(x, x, equal_nan=True), np.array_equal(x, x[:1]),
            np.array_equiv(x[:1], y[:1] + 0 * y))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_array_equal_and_equiv(dtype):
    x = np.array([-1.0, 2.0, np.nan, 0.5, 3.0, -2.0, 1.0])
    x = x if np.dtype(dtype).kind == "f" else np.nan_to_num(x)
    x = x.astype(dtype)
    labels = (x > 0).astype(np.int64)
    sets = [(x, labels, x.copy()), (x[:5], labels[:5], x[:5] + 1), (x[:1], labels[:1], x[:1])]
    run_calls(converged, sets)


def test_array_equal_in_a_stopping_test_compiles():
    def stop(x, labels):
        new = (x > 0).astype(np.int64)
        return np.array_equal(new, labels), new

    sets = [(np.linspace(-1, 1, n), np.arange(n) % 2) for n in (5, 7, 11)]
    compiled_only(run_calls(stop, sets))


def lookups(table, ids):
    return (np.take(table, ids, axis=0, mode="clip"), np.take(table, ids, mode="wrap"),
            np.take(table, ids[::-1], axis=1, mode="wrap"), np.take(table, 9, mode="clip"))


# One row (every id clipped or wrapped onto it) and five (ids inside, past both ends and
# wrapping more than once); another row count compiles the same program with other bounds.
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 5])
def test_take_clip_and_wrap(rows, dtype):
    table = make((rows, 3), dtype, specials=False)
    sets = [(table, np.array([0, -1, 2, 9, -13])), (table, np.arange(11) - 5),
            (table, np.arange(11, dtype=np.int32)[::2] - 3)]
    compiled_only(run_calls(lookups, sets))


def test_take_from_an_empty_axis_raises_like_numpy():
    no_internal_errors(run_calls(
        lambda t, i: np.take(t, i, axis=0, mode="clip"),
        [(np.ones((0, 2)), np.array([0, 1])), (np.ones((0, 2)), np.array([], np.int64))]))
    no_internal_errors(run_calls(lambda t, i: np.take(t, i, mode="clip"),
                                 [(np.ones(3), np.array([0.0, 1.0]))]))


def test_take_wrap_gradient():
    def loss(table, ids):
        return (np.take(table, ids, axis=0, mode="wrap") ** 2).sum()

    table, ids = np.arange(6.0).reshape(3, 2), np.array([4, -1, 0, 4])
    value, gradient = tj.jit(tj.value_and_grad(loss), cache="memory")(table, ids)
    np.testing.assert_allclose(value, loss(table, ids))
    counts = np.bincount(ids % 3, minlength=3)[:, None]
    np.testing.assert_allclose(gradient, 2 * table * counts)
