"""Python int arguments that change between calls (run-time inputs) in the calls that
take a count or a shift: ``np.roll(x, k)`` (a gather: one program for every shift),
``np.concatenate([[k], ids])`` (the list is a 1-d array) and ``np.arange(k)`` (the value
decides a length: specialized under a guard, as ``np.zeros(k)``). Eager vs compiled."""

import numpy as np
import pytest
from real_model_checks import run_calls

import tracejit as tj

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]


def compiled_only(f):
    assert not f.stats()["eager_calls"], f.explain()


def make(shape, dtype):
    values = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 3
    if np.dtype(dtype).kind == "f" and values.size >= 3:
        values.reshape(-1)[:2] = [np.nan, -np.inf]
    return values.astype(dtype)


def roll_last(x, k):
    return np.roll(x, k, axis=-1)


def roll_flat(x, k):
    return np.roll(x, k)


def roll_two_axes(x, k):
    return np.roll(x, (k, 1), axis=(0, 1)), np.roll(x, (k, -k), axis=(1, 1))


SHIFTS = [1, -5, 7, 0, 2, -13]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (2, 5), (3, 0)], ids=str)
@pytest.mark.parametrize("model", [roll_last, roll_flat])
def test_roll_by_a_changing_shift(model, shape, dtype):
    x = make(shape, dtype)
    f = run_calls(model, [(x, k) for k in SHIFTS])
    compiled_only(f)


def test_roll_of_two_axes_and_a_view():
    x = make((4, 6), np.float64)[::2, ::-1]
    compiled_only(run_calls(roll_two_axes, [(x, k) for k in SHIFTS]))


def test_roll_by_a_traced_int_of_a_dynamic_length():
    xs = [make((n,), np.float64) for n in (3, 5, 11, 13)]
    compiled_only(run_calls(roll_last, [(x, k) for x, k in zip(xs, SHIFTS)]))


def test_roll_by_a_computed_shift():
    def model(x):
        return np.roll(x, x.argmax())

    run_calls(model, [(np.array([1.0, 5.0, 2.0]),), (np.array([1.0, 2.0, 9.0, 0.0]),)])


def test_roll_gradient_by_a_changing_shift():
    def loss(x, k):
        return (np.roll(x, k) * np.arange(5.0)).sum()

    f = tj.jit(tj.value_and_grad(loss), cache="memory")
    x = np.linspace(-1, 1, 5)
    for k in SHIFTS:
        value, gradient = f(x, k)
        np.testing.assert_allclose(value, loss(x, k))
        np.testing.assert_allclose(gradient, np.roll(np.arange(5.0), -k))


def ids_with_context(table, context, negatives):
    return table[np.concatenate([[context], negatives])]


def stacked_with_a_list(x, k, scale):
    return np.stack([[k, 2 * k], x]), np.concatenate([x, [scale, k]]), np.hstack([[k], x])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_concatenate_with_a_list_of_run_time_ints(dtype):
    table = np.arange(20.0).reshape(10, 2)
    sets = [(table, k, np.arange(1, n).astype(dtype)) for k, n in ((1, 5), (3, 7), (9, 2))]
    if np.dtype(dtype).kind == "f":
        f = run_calls(lambda t, k, n: np.concatenate([[k], n]), sets)
    else:
        f = run_calls(ids_with_context, sets)
    compiled_only(f)


def test_stack_and_hstack_with_lists_of_run_time_numbers():
    x = np.array([0.5, np.nan])
    compiled_only(run_calls(stacked_with_a_list, [(x, 1, 0.5), (x, 2, 1.5), (x, -4, 2.5)]))


def class_counts(labels, classes):
    return (labels[:, None] == np.arange(classes)).sum(axis=0)


def ranges(k, start):
    return np.arange(k), np.arange(start, k, 2), np.arange(start, k + 0.5, 0.5)


def test_arange_of_a_changing_int_is_specialized_and_matches_numpy():
    f = run_calls(class_counts, [(np.array([0, 1, 2, 1]), 3), (np.array([0, 1, 0, 1]), 2),
                                 (np.array([0, 1, 0, 4]), 5), (np.array([0, 1, 0, 4]), 0)])
    assert "untraceable" not in f.stats()["eager_calls"], f.explain()
    f = run_calls(ranges, [(5, 1), (7, -2), (0, 3), (np.int32(4), np.int32(1)), (6, 1.5)])
    assert "untraceable" not in f.stats()["eager_calls"], f.explain()


def row_then_write(table, c):
    row = table[c]  # a view in NumPy: the write below shows through it
    table[c] -= 1.0
    return row * 2


def sgd_rows(w_in, w_out, pairs, lr):
    for i in range(len(pairs)):
        c, o = pairs[i]
        v = w_in[c]
        w_in[c] -= lr * v.sum()
        w_out[o] -= lr * v  # NumPy: v after the write above
    return w_in, w_out


def test_a_row_read_by_a_run_time_int_sees_a_later_write():
    table = np.arange(12.0).reshape(4, 3)
    f = run_calls(row_then_write, [(table, c) for c in (1, 2, 3, 0)])
    assert "internal error" not in f.stats()["eager_calls"], f.explain()
    rng = np.random.default_rng(9)
    w_in, w_out = rng.standard_normal((9, 3)), rng.standard_normal((9, 3))
    run_calls(sgd_rows, [(w_in, w_out, np.array([[3, 5], [0, 3], [7, 6]]), 0.1),
                         (w_in, w_out, np.array([[1, 5], [0, 0]]), 0.1)])


def test_roll_by_shifts_near_the_int64_limits():
    """Each shift is reduced before it is summed or subtracted (-2**63 wrapped)."""
    x = np.arange(7.0)
    f = run_calls(roll_last, [(x, k) for k in (1, 2, -2 ** 63, 2 ** 63 - 1, -(2 ** 62))])
    compiled_only(f)
    f = run_calls(roll_two_axes, [(x.reshape(1, 7), k) for k in (
        1, 2, -2 ** 63 + 1, 2 ** 63 - 1, -(2 ** 62), 10 ** 18)])
    compiled_only(f)


def fills(x, k):
    return np.full_like(x, k), np.asarray(k, dtype=np.int32), np.full(3, k, dtype=np.int32)


def test_a_run_time_int_past_int32_raises_overflow_as_numpy_does():
    """np.full / np.full_like / np.asarray of a Python int into int32: NumPy's
    OverflowError past its range (a cast would wrap to 0)."""
    x = np.zeros(3, np.int32)
    run_calls(fills, [(x, k) for k in (1, 2, 2 ** 40, 5, -2 ** 31, -2 ** 31 - 1, 2 ** 31)])
