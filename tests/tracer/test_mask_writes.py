"""Writes through a boolean mask of traced data whose value is a selection by the same mask
(``dx[mask] = dout[mask]``, ``x[x < 0] *= 0.5``), eager vs ``jit``.

Each is ``np.where(mask, value, x)``: no data-dependent shape, so every call after the
first runs compiled. Sizes 0, 1 and primes, float32/float64/int arrays, NaN in the data,
masks over the leading dims of 2-D arrays, and writes into arguments (compared after the
call). A value selected by another mask still runs eagerly, with NumPy's result.
"""

import numpy as np
import pytest
from real_model_checks import run_calls

SIZES = (0, 1, 7, 13)


def copy_where_positive(x, upstream):
    grad = np.zeros_like(x)
    positive = x > 0
    grad[positive] = upstream[positive]
    return grad


def halve_negatives(x, upstream):
    x = x.copy()
    x[x < 0] *= 0.5
    return x


def scaled_selection_into_argument(x, upstream):
    mask = upstream > 0.25
    x[mask] = upstream[mask] * 2 - 1
    return x.sum()


def int_target_float_values(x, upstream):
    target = np.arange(x.shape[0])
    keep = upstream < 0
    target[keep] = upstream[keep] * 10  # NumPy's assignment truncates to int64
    return target


def selection_of_another_mask(x, upstream):
    out = np.zeros_like(x)
    out[x > 0] = upstream[upstream > 0]  # a different count: NumPy's error or its values
    return out


def rows_by_a_row_mask(x, upstream):
    rows = x.sum(axis=1) > 0
    x = x.copy()
    x[rows] -= upstream[rows]
    return x


def rows_from_a_broadcast_column(x, upstream):
    rows = x[:, 0] > 0
    out = np.ones_like(x)
    out[rows] = upstream.sum(axis=1, keepdims=True)[rows]  # (count, 1) broadcast over rows
    return out


def vectors(dtype):
    rng = np.random.default_rng(60)
    sets = []
    for n in SIZES:
        x, upstream = rng.standard_normal(n).astype(dtype), rng.random(n).astype(dtype)
        if n > 1:
            x[1] = np.nan  # NaN > 0 and NaN < 0 are False: left as it is
            upstream[0] = np.nan
        sets.append((x, upstream - 0.5))
    return sets


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("model", [copy_where_positive, halve_negatives,
                                   scaled_selection_into_argument, int_target_float_values])
def test_writes_of_a_selection_by_the_same_mask_compile(model, dtype):
    f = run_calls(model, vectors(dtype), rtol=1e-6, atol=1e-6)
    stats = f.stats()
    assert not stats["eager_calls"], f.explain()
    assert stats["compiled_calls"] > 0


@pytest.mark.parametrize("model", [rows_by_a_row_mask, rows_from_a_broadcast_column])
def test_row_masks_over_2d_arrays_compile(model):
    rng = np.random.default_rng(61)
    sets = [(rng.standard_normal((n, 3)), rng.standard_normal((n, 3))) for n in SIZES]
    f = run_calls(model, sets)
    assert not f.stats()["eager_calls"], f.explain()


def test_a_selection_by_another_mask_runs_eagerly_as_numpy_does():
    same_count = (np.array([1.0, -1.0, 2.0]), np.array([3.0, 4.0, -1.0]))
    other_count = (np.array([1.0, -1.0, 2.0]), np.array([3.0, -4.0, -1.0]))  # ValueError
    f = run_calls(selection_of_another_mask, [same_count, other_count])
    assert f.stats()["eager_calls"], f.explain()


def fill_where_positive(x, fill):
    counts = np.arange(x.shape[0])
    counts[x > 0] = fill
    return counts


def fill_one_position(x, fill):
    counts = np.arange(x.shape[0])
    counts[1] = fill
    return counts


@pytest.mark.parametrize("model", [fill_where_positive, fill_one_position])
def test_a_python_float_into_an_int_array_raises_as_numpy_does(model):
    """After its second value a Python float argument is a run-time input: NaN or a value
    past int64 must raise NumPy's ValueError / OverflowError, not store a wrapped int."""
    x = np.ones(5)
    run_calls(model, [(x, 2.5), (x, 3.5), (x, 4.5), (x, np.nan), (x, 1e30), (x, -7.9),
                      (x, np.inf)])


def scale_small_ints(x, factor):
    x = x.copy()
    x[x < 2] *= factor
    return x


def add_to_small_ints(x, step):
    x = x.copy()
    x[x < 2] += step
    return x


@pytest.mark.parametrize("model", [scale_small_ints, add_to_small_ints])
def test_a_float_update_of_an_int_selection_raises_as_numpy_does(model):
    """int_array[mask] *= 0.5 raises NumPy's UFuncTypeError (the result does not cast
    "same_kind" back); compiled it returned truncated values. An int update compiles."""
    x = np.arange(7)
    run_calls(model, [(x, 0.5), (x, 1.5), (x, 3), (x, 2)])


def add_a_list_to_a_slice(x):
    x = x.copy()
    x[1:3] += [1, 2]
    x[::2] *= (2, 3, 4)
    return x


def test_a_slice_updated_by_a_list_compiles():
    f = run_calls(add_a_list_to_a_slice, [(np.arange(6),), (np.arange(6.0),), (np.arange(6),)])
    assert not f.stats()["eager_calls"], f.explain()
