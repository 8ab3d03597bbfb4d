"""``np.full`` / ``np.full_like`` with a traced fill value (a computed mean, a Python
number argument that changes between calls): the value broadcast, eager vs compiled over
dtypes, sizes, 0-d shapes, array fills, NaN/inf, writes into the result and gradients."""

import numpy as np
import pytest
from real_model_checks import no_internal_errors, run_calls

import tracejit as tj

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]
SHAPES = [(0,), (1,), (7,), (3, 5), ()]


def compiled_only(f):
    assert not f.stats()["eager_calls"], f.explain()


def make(shape, dtype, seed=0):
    values = np.random.default_rng(seed).uniform(-3, 3, shape)
    return np.asarray(values).astype(dtype)


def filled_with_the_mean(x):
    total = x.sum()
    return np.full(x.shape, total), np.full_like(x, total), np.full((2,) + x.shape, total,
                                                                    dtype=np.float32)


def filled_with_an_argument(x, value):
    return np.full_like(x, value), np.full(x.shape, value), np.full_like(x, value, dtype=float)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_full_of_a_computed_value(shape, dtype):
    # (float32 sums round differently compiled: the fill is compared within float32's)
    tolerance = dict(rtol=1e-6) if dtype == np.float32 else {}
    compiled_only(run_calls(filled_with_the_mean, [(make(shape, dtype),),
                                                   (make(shape, dtype, 1),)], **tolerance))


@pytest.mark.parametrize("values", [[0.1, 0.2, -3.5], [1, 2, -7], [True, False, True],
                                    [np.float32(0.5), np.float32(2.0), np.float32(-1.0)]],
                         ids=["float", "int", "bool", "float32"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_full_of_a_changing_argument(values, dtype):
    f = run_calls(filled_with_an_argument, [(make((4,), dtype), v) for v in values])
    compiled_only(f)


def test_full_of_special_values_and_of_a_row():
    def model(x, value):
        return np.full((3,) + x.shape, x) * value, np.full(x.shape, value) + x

    x = np.array([1.0, np.nan, -np.inf])
    compiled_only(run_calls(model, [(x, np.inf), (x, np.nan), (x, -0.0), (x, 2.0)]))


def smoothing_targets(labels, smoothing):
    target = np.full((labels.shape[0], 4), smoothing / 3)
    target[np.arange(labels.shape[0]), labels] = 1.0 - smoothing
    return target


def test_writes_into_a_full_leave_its_value_alone():
    def model(x):
        mean = x.mean(keepdims=True)
        filled = np.full((2, 3), mean)
        filled[0, 0] = 5.0
        return filled, mean

    compiled_only(run_calls(model, [(np.arange(3.0),), (np.arange(5.0),)]))
    sets = [(np.arange(n) % 4, v) for n, v in ((5, 0.1), (5, 0.2), (7, 0.3))]
    compiled_only(run_calls(smoothing_targets, sets))


def test_full_refuses_a_fill_that_does_not_broadcast_like_numpy():
    def model(x):
        return np.full((2, 3), x)

    no_internal_errors(run_calls(model, [(np.ones(2),)]))


def test_gradient_through_a_traced_fill():
    def loss(x):
        return (np.full((2,) + x.shape, x.mean()) * x).sum() + np.full_like(x, x[0]).sum()

    x = np.array([0.5, -1.0, 2.0])
    value, gradient = tj.jit(tj.value_and_grad(loss), cache="memory")(x)
    np.testing.assert_allclose(value, loss(x))
    # d/dx_i of 2 * mean * sum(x) + n * x_0
    expected = 2 * (x.sum() / x.size + x.mean()) + np.array([x.size, 0, 0])
    np.testing.assert_allclose(gradient, expected)
