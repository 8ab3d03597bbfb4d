"""``np.asarray``, ``np.array``, ``np.float32(x)`` and ``np.mean(list)`` of traced values
(``tracer/conversions.py``): eager vs compiled, over dtypes, sizes, 0-d values, views and
NaN/inf, with the types NumPy returns (ndarray vs NumPy scalar) and no eager fallback."""

import numpy as np
import pytest
from real_model_checks import no_internal_errors, run_calls

import tracejit as tj

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]
SHAPES = [(0,), (1,), (7,), (3, 5), ()]


def make(shape, dtype, seed=0):
    values = np.random.default_rng(seed).uniform(-3, 3, shape)
    if np.dtype(dtype).kind == "f" and values.size >= 4:
        values.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    return np.asarray(values).astype(dtype)


def compiled_only(f):
    assert not f.stats()["eager_calls"], f.explain()


def as_array_twice(x):
    return np.asarray(x) * 2, np.asarray(x, dtype=np.float32), np.asanyarray(x)


def array_copies(x):
    return np.array(x), np.array(x, dtype=float), np.array(x, ndmin=3), np.array(x, copy=None)


def of_a_reduction(x):
    total = x.sum()
    return np.array(total), np.asarray(total), np.ascontiguousarray(total), np.array(total,
                                                                                    ndmin=1)


def scalar_types(x):
    total = x.sum()
    return (np.float32(total), np.float64(total), np.int64(total), np.bool_(total),
            np.float32(x), np.int32(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("model", [as_array_twice, array_copies, of_a_reduction, scalar_types])
def test_conversions_match_numpy(model, shape, dtype):
    f = run_calls(model, [(make(shape, dtype),), (make(shape, dtype, seed=1),)])
    compiled_only(f)


def test_conversions_of_a_strided_view():
    x = np.arange(24.0).reshape(4, 6)

    def model(x):
        view = x[::2, 1::2].T
        return np.asarray(view) + 1, np.array(view, dtype=np.float32), np.float32(view[0, 0])

    compiled_only(run_calls(model, [(x,), (x + 1,)]))


def write_into_a_copy(x):
    y = np.array(x)
    y[0] = -1.0
    return x.sum(), y


def write_through_asarray(x):
    y = np.asarray(x)  # the same array: the write reaches the caller's argument
    y[0] = -1.0
    return y.sum()


@pytest.mark.parametrize("model", [write_into_a_copy, write_through_asarray])
def test_writes_after_a_conversion_touch_what_numpy_touches(model):
    compiled_only(run_calls(model, [(np.arange(5.0),), (np.arange(1.0, 8.0),)]))


def mean_of_losses(x):
    losses = [np.log1p(np.exp(-x[t])).mean() for t in range(x.shape[0])]
    return np.mean(losses), np.max(losses), np.std(losses), np.argmax(losses)


def test_reductions_of_a_list_of_traced_losses():
    rng = np.random.default_rng(3)
    compiled_only(run_calls(mean_of_losses, [(rng.standard_normal((4, 3)),),
                                             (rng.standard_normal((6, 3)),)]))


def test_python_number_arguments_converted():
    def model(x, scale, count):
        return np.float32(scale) * x, np.asarray(scale), np.array(count), np.float64(count)

    x = np.ones(3, np.float32)
    compiled_only(run_calls(model, [(x, 0.5, 2), (x, 1.5, 3), (x, -2.0, 7)]))


def test_integer_types_of_python_numbers_still_raise_like_numpy():
    def narrow(x, count):
        return x * np.uint8(count)

    def of_a_float(x, value):
        return x * np.int64(value)

    run_calls(narrow, [(np.ones(2), 3), (np.ones(2), 4), (np.ones(2), 300)])
    run_calls(of_a_float, [(np.ones(2), 3.5), (np.ones(2), 4.5), (np.ones(2), np.nan),
                           (np.ones(2), 1e30)])


def test_object_dtype_runs_eagerly():
    def model(x):
        return np.array(x, dtype=object)

    f = tj.jit(model, cache="memory")
    result = f(np.arange(3.0))
    assert result.dtype == object and result.tolist() == [0.0, 1.0, 2.0]
    assert f.stats()["eager_calls"], "an object array has no compiled form"
    no_internal_errors(f)


def test_copy_false_needing_a_cast_raises_like_numpy():
    def model(x):
        return np.array(x, dtype=np.float32, copy=False)

    no_internal_errors(run_calls(model, [(np.ones(3),)]))


def test_gradients_flow_through_conversions():
    def loss(w, x):
        w = np.asarray(w)
        v = np.array(w, dtype=float) * x
        return np.float64((v * v).sum()) + np.array(w.sum())

    w, x = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    value, gradient = tj.jit(tj.value_and_grad(loss), cache="memory")(w, x)
    np.testing.assert_allclose(value, loss(w, x))
    np.testing.assert_allclose(gradient, 2 * w * x * x + 1)
