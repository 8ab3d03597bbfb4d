"""Adversarial checks of a captured loop's pending trips (tracer/pending.py), iteration 0
joining the loop (tracer/loops.py ``_capture``) and ``x[index] = v`` computed by NumPy's
own assignment while tracing (tracer/indexing.py ``setitem``).

Every case runs the jitted function and eager NumPy on fresh copies of the same inputs,
over several lengths (0, 1 and 2 trips too) and twice per length, so the first (traced)
call and later (compiled) calls are both checked: values, dtypes, shapes, Python and NumPy
scalar types, and what was written into the arguments. Strict xfails are open bugs found
here; the tests of bugs found here and fixed since stay as plain tests.
"""

import collections
import contextlib
import io

import numpy as np
import pytest

import tracejit as tj

LENGTHS = (3, 4, 7, 1, 2, 0, 5)


def same(got, want, where="result"):
    """``got`` is ``want``: the same types all the way down, equal values (NaN too)."""
    assert type(got) is type(want), (where, type(got), type(want))
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), where
        for position, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{position}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (np.ndarray, np.generic)):
        assert (got.dtype, np.shape(got)) == (want.dtype, np.shape(want)), where
        # float32 sums may add in another order (one rounding per add)
        tolerance = 1e-6 if want.dtype in (np.float32, np.float16) else 1e-12
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance, equal_nan=True,
                                   err_msg=where)
    elif isinstance(want, float):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=where)
    else:
        assert got == want, (where, got, want)


def check(function, make, lengths=LENGTHS, calls=2):
    """jit(function) against function on fresh ``make(length)`` inputs: results, and the
    arguments after the call (in-place writes happen once, with NumPy's values). An
    exception NumPy raises must be raised too. Returns the jitted function."""
    jitted = tj.jit(function, cache="memory", dynamic=True)
    for length in lengths:
        for call in range(calls):
            mine, theirs = make(length), make(length)
            try:
                want = function(*theirs)
            except Exception as error:  # noqa: BLE001 - whatever NumPy raises
                with pytest.raises(type(error)):
                    jitted(*mine)
                continue
            got = jitted(*mine)
            same(got, want, f"length {length}, call {call}")
            same(list(mine), list(theirs), f"arguments after length {length}, call {call}")
    reasons = jitted.stats()["eager_reasons"]
    assert "internal error" not in reasons, reasons
    return jitted


def sequence(length, seed=0):
    rng = np.random.default_rng(7 * length + seed)
    return rng.standard_normal((length, 3)), rng.standard_normal((3, 3)) * 0.5


# ---- loops: trip 0 joined or peeled, results pending or read ---------------------------

def if_t_is_0(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        if t == 0:
            h = h + x[0]
        h = np.tanh(h @ w + x[t])
    return h


def previous_row_wraps(x, w):
    h, hs = np.zeros(3), np.zeros_like(x)
    for t in range(x.shape[0]):
        h = np.tanh(x[t - 1] + h @ w)  # t - 1 = -1 at trip 0: the last row
        hs[t] = h + hs[t - 1]
    return hs


def sliding_window(x, w):
    total = np.zeros(3)
    for t in range(x.shape[0]):
        total = total + x[t:t + 2].sum(axis=0)  # the last window is one row
    return total


def sliding_window_rows(x, w):
    acc = np.zeros((1, 3))
    for t in range(x.shape[0]):
        acc = acc + x[t:t + 2][:1] * w[0]
    return acc


def step_of_2(x, w):
    h, hs = np.zeros(3), np.zeros_like(x)
    for t in range(0, x.shape[0], 2):
        h = np.tanh(x[t] + h @ w)
        hs[t] = h
    return hs, h


def step_of_3_from_1(x, w):
    h = np.zeros(3)
    for t in range(1, x.shape[0], 3):
        h = np.tanh(x[t] + h @ w) + t
    return h


def reversed_into_buffer(x, w):
    h, hs = np.zeros(3), np.zeros_like(x)
    for t in reversed(range(x.shape[0])):
        h = np.tanh(x[t] - h @ w)
        hs[t] = h
    return hs


def python_int_becomes_float(x, w):
    total = 0
    for t in range(x.shape[0]):
        total = total + x[t].sum()
    return total


def int_array_meets_floats(x, w):
    total = np.zeros(3, dtype=np.int64)
    for t in range(x.shape[0]):
        total = total + x[t]
    return total


def float32_state_float64_weights(x, w):
    h = np.zeros(3, dtype=np.float32)
    for t in range(x.shape[0]):
        h = np.tanh(x[t].astype(np.float32) + h @ w)
    return h


def float32_with_weak_floats(x, w):
    h = np.zeros(3, dtype=np.float32)
    w32 = w.astype(np.float32)
    for t in range(x.shape[0]):
        h = h * 0.5 + x[t].astype(np.float32) @ w32 + 1.5
    return h


def weak_float_counter(x, w):
    s = 0.0
    for t in range(x.shape[0]):
        s = s * 0.9 + float(t)
    return s, x * s


def stacked_list(x, w):
    hs, h = [], np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        hs.append(h)
    return np.stack(hs) if hs else np.zeros((0, 3))


def scalars_of_every_kind(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h.sum(), float(h.sum()), h[0], h.max(), int(x.shape[0])


def zero_d_accumulator(x, w):
    s = np.zeros(())
    for t in range(x.shape[0]):
        s = s + x[t, 0]
    return s


def numpy_scalar_accumulator(x, w):
    s = np.float64(0)
    for t in range(x.shape[0]):
        s = s + x[t, 0]
    return s, s * 2


def arguments_written_after_the_loop(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    w += h[:, None]
    if x.shape[0]:
        x[0] = h * 2
    return h


def a_second_loop_reads_the_first(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    g = h
    for t in range(x.shape[0]):
        g = g * 0.5 + x[t]
    return g, h


def windows_updated_in_place(x, w):
    out = np.zeros((x.shape[0] + 2, 3))
    for t in range(x.shape[0]):
        out[t:t + 3] += x[t] @ w
        out[t] *= 0.5
    return out


def conv_like_nested(x, w):
    out = np.zeros((2, 3, x.shape[0], 3))
    for i in range(x.shape[0]):
        for j in range(3):
            out[:, :, i, j] = x[i, j] * w[:2] + i - j
    return out


def state_is_an_argument_row(x, w):
    h = x[0] if x.shape[0] else np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h


def state_is_traced(x, w):
    h = w[0] * 0.0
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h


def read_past_the_end(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = h + x[t + 2]  # IndexError at trip length - 2, as in NumPy
    return h


def empty_state(x, w):
    h = np.zeros((0,))
    for t in range(x.shape[0]):
        h = h * 2 + t
    return h, x


def while_loop(x, w):
    h, t = np.zeros(3), 0
    while t < x.shape[0]:
        h = np.tanh(x[t] + h @ w)
        t += 1
    return h, t


def branch_on_the_pending_result(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    if h.sum() > 0:
        return h * 2.0
    return h - 1.0


def asarray_of_the_pending_result(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return np.asarray(h) + 1.0


def index_clamped_below(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[max(t - 1, 0)] + h @ w)  # t - 1 at trips 1, 2; 0 at trip 0
    return h


def index_clamped_above(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[min(t + 1, x.shape[0] - 1)] + h @ w)
    return h


def index_compared_as_a_number(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = h * (t != 0) + x[t] @ w
    return h


def index_compared_in_where(x, w):
    h = np.ones(3)
    for t in range(x.shape[0]):
        h = np.where(t > 0, h @ w, x[t]) + x[t]
    return h


def window_before_the_start(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = h + x[t - 1:t + 1].sum(axis=0)  # x[-1:1] at trip 0 is empty
    return h


def growing_prefix(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = h + x[:t].sum(axis=0) * 0.5 + x[:t + 1].mean(axis=0)
    return h


def write_to_the_previous_row(x, w):
    h, hs = np.zeros(3), np.zeros_like(x)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        hs[t - 1] = h  # trip 0 writes the last row, which no later trip writes
    return hs


def dict_with_an_entry_before(x, w):
    hs = {-1: np.zeros(3)}
    for t in range(x.shape[0]):
        hs[t] = np.tanh(x[t] + hs[t - 1] @ w)
    return sum(hs[t] for t in range(x.shape[0])) + hs[-1]


def index_halved_and_powers(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = h * 0.9 ** t + x[t // 2] * (t - 1) ** 2 + t / 2 + np.arange(3) * t
    return h


def boolean_state(x, w):
    seen = np.zeros(3, dtype=bool)
    for t in range(x.shape[0]):
        seen = seen | (x[t] > 0.5)
    return seen


def guard_true_at_trip_0_only(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        if h.sum() == 0:
            h = x[t]
        else:
            h = np.tanh(h @ w + x[t])
    return h


def triangular_nest(x, w):
    acc = np.zeros(3)
    for i in range(x.shape[0]):
        for j in range(i):
            acc = acc + x[j] * x[i]
    return acc


def reversed_outer_nest(x, w):
    out = np.zeros((x.shape[0], 3))
    for i in reversed(range(x.shape[0])):
        for j in range(3):
            out[i, j] = x[i, j] * w[j, j] + out[i - 1, j]
    return out


def argument_rows_written_in_the_loop(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        x[t] = h
    return h


def argument_updated_every_trip(x, w):
    for t in range(x.shape[0]):
        w += 0.1 * np.outer(x[t], x[t])
    return w.sum()


def second_loop_carries_the_first_result(x, w):
    h, g = np.zeros(3), np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    for t in range(x.shape[0]):
        g = g + h * x[t]
        h = h * 0.5
    return g, h


def pending_result_as_an_index(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    k = int(np.argmax(h))
    return x[:, k], k


def pending_result_as_python_values(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h[1].item(), h.sum().item(), bool(h[0] > 0)


def while_on_data(x, w):
    h, t = np.zeros(3), 0
    while t < x.shape[0] and h.sum() < 1.5:
        h = h + np.abs(x[t])
        t += 1
    return h, t


def while_counting_down(x, w):
    h, t = np.zeros(3), x.shape[0]
    while t > 0:
        t -= 1
        h = np.tanh(x[t] + h @ w)
    return h


def rows_of_no_columns(x, w):
    y, acc = x[:, :0], np.zeros((0,))
    for t in range(x.shape[0]):
        acc = acc + y[t]
    return acc


def float_counter_beside_an_array(x, w):
    h, c = np.zeros(3), 0.0
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        c = c + 1.0
    return c, h, c * h


def argument_written_then_a_later_trip_raises(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = h + x[t + 1]
        x[t] = h  # rows 0 .. length - 2 are written before NumPy raises
    return h


def raises_after_the_loop(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    if x.shape[0] == 4:
        raise ValueError("four")
    return h


def rnn(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h


def scalars_derived_from_a_pending_result(x, w):
    h = rnn(x, w)
    h32 = h.astype(np.float32)
    return (h.sum() + 1.0, h.sum() > 0, h32.sum(), np.float32(2) * h32.sum(),
            h.sum().astype(np.float32), h.dtype, h.shape, len(h), (h > 0).sum(),
            np.int64(3) + (h > 0).sum(), h.mean() * 2, h @ h)


def a_pending_result_returned_twice(x, w):
    h = rnn(x, w)
    return h, h, {"a": h, "b": (h, 1, "s", None)}, x


def a_pending_result_written_with_out(x, w):
    h = rnn(x, w)
    np.add(h[:, None], 1, out=w)
    return h


def the_index_after_the_loop(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h, t  # UnboundLocalError at 0 trips, as in NumPy


def break_at_an_index(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        if t == 2:
            break
    return h


def continue_at_trip_0(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        if t == 0:
            continue
        h = np.tanh(x[t] + h @ w)
    return h


def for_else(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    else:
        h = h + 1
    return h


def enumerate_and_zip_rows(x, w):
    h = np.zeros(3)
    for t, row in enumerate(x):
        h = np.tanh(row + h @ w) + t
    for a, b in zip(x, x[1:]):
        h = np.tanh(a - b + h @ w)
    return h


def break_on_data(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = h + np.abs(x[t])
        if h.sum() > 4:
            break
    return h


def int_counts_pending(x, w):
    counts = np.zeros(3, dtype=np.int64)
    for t in range(x.shape[0]):
        counts = counts + (x[t] > 0)
    return counts.sum(), counts.max(), counts // 2, counts / 2


def negative_steps(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0] - 1, -1, -1):
        h = np.tanh(x[t] + h @ w)
    for t in range(x.shape[0] - 1, -1, -2):
        h = np.tanh(x[t] + h @ w) + t
    for t in reversed(range(1, x.shape[0], 2)):
        h = np.tanh(x[t] + h @ w)
    return h


def start_from_half_the_length(x, w):
    h = np.zeros(3)
    for t in range(x.shape[0] // 2, x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return h


def numpy_array_carried_and_written(x, w):
    g, h = np.ones(3), np.zeros(3)
    for t in range(x.shape[0]):
        h = h + g * x[t]
        g += 1  # plain NumPy, in place, every trip
    return h, g


def numpy_array_written_at_the_index(x, w):
    g, h = np.zeros(3), np.zeros(3)
    for t in range(x.shape[0]):
        g[t % 3] = t
        h = h + g * x[t]
    return h, g


def numpy_buffer_written_after_the_loop(x, w):
    buf = np.arange(3.0)
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w) + buf
    before = h * buf
    buf *= 10
    after = h * buf
    buf[:] = -1
    return before, after, buf


def containers_filled_and_changed(x, w):
    hs, h = [np.ones(3)], np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        hs.append(h)
    hs.append(h * 2)
    hs.reverse()
    last = hs.pop(0)
    return {"hs": hs, "n": len(hs), "nested": (hs[::2], [hs])}, last


def dict_keys_in_numpys_order(x, w):
    hs = {-1: np.zeros(3), "a": 1.0}
    for t in range(x.shape[0]):
        hs[t] = np.tanh(x[t] + hs[t - 1] @ w)
        hs[t + 100] = hs[t].sum()
    hs["z"] = hs[-1] + 1
    del hs[-1]
    return hs


def list_of_tuples_and_scalars(x, w):
    out, h = [], np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        out.append((h, h.sum(), t, float(t) * 2, x[t, 0]))
    return out


def prefix_sums_in_place(x, w):
    y = x * 1.0
    for t in range(1, x.shape[0]):
        y[t] = y[t] + y[t - 1] * 0.5  # reads the row the previous trip wrote
    for t in reversed(range(x.shape[0] - 1)):
        y[t] += y[t + 1] @ w
    return y


def while_filling_a_buffer(x, w):
    hs, h, t = np.zeros_like(x), np.zeros(3), 0
    while t < x.shape[0]:
        h = np.tanh(x[t] + h @ w)
        hs[t] = h
        t += 1
    u = 0
    while u < x.shape[0]:
        h = np.tanh(x[u] + h @ w)
        u += 2
    return hs, h, t, u


def while_true_with_break(x, w):
    h, t = np.zeros(3), 0
    while True:
        if t >= x.shape[0]:
            break
        h = np.tanh(x[t] + h @ w)
        t += 1
    return h


def conv_backward_windows(x, w):
    n = x.shape[0]
    dout = np.ones((2, 3, n, 3)) * x[None, None, :, :]
    dx = np.zeros((2, 3, n + 2, 5))
    for i in range(n):
        for j in range(3):
            dx[:, :, i:i + 3, j:j + 3] += dout[:, :, i, j][:, :, None, None] * w
    return dx


def strided_windows(x, w):
    n = x.shape[0]
    out = np.zeros((max((n - 2) // 2 + 1, 0), 2))
    for i in range(0, n - 2 + 1, 2):
        for j in range(2):
            out[i // 2, j] = np.sum(x[i:i + 2, j:j + 2] * w[:2, :2])
    return out


LOOPS = [if_t_is_0, previous_row_wraps, sliding_window, sliding_window_rows, step_of_2,
         step_of_3_from_1, reversed_into_buffer, python_int_becomes_float,
         int_array_meets_floats, float32_state_float64_weights, float32_with_weak_floats,
         weak_float_counter, stacked_list, scalars_of_every_kind, zero_d_accumulator,
         numpy_scalar_accumulator, arguments_written_after_the_loop,
         a_second_loop_reads_the_first, windows_updated_in_place, conv_like_nested,
         state_is_an_argument_row, state_is_traced, read_past_the_end, empty_state, while_loop,
         branch_on_the_pending_result, asarray_of_the_pending_result, index_clamped_below,
         index_clamped_above, index_compared_as_a_number, index_compared_in_where,
         window_before_the_start, growing_prefix, write_to_the_previous_row,
         dict_with_an_entry_before, index_halved_and_powers, boolean_state,
         guard_true_at_trip_0_only, triangular_nest, reversed_outer_nest,
         argument_rows_written_in_the_loop, argument_updated_every_trip,
         second_loop_carries_the_first_result, pending_result_as_an_index,
         pending_result_as_python_values, while_on_data, while_counting_down,
         rows_of_no_columns, float_counter_beside_an_array,
         argument_written_then_a_later_trip_raises, raises_after_the_loop,
         scalars_derived_from_a_pending_result, a_pending_result_returned_twice,
         a_pending_result_written_with_out, the_index_after_the_loop, break_at_an_index,
         continue_at_trip_0, for_else, enumerate_and_zip_rows, break_on_data,
         int_counts_pending, negative_steps, start_from_half_the_length,
         numpy_array_carried_and_written, numpy_array_written_at_the_index,
         numpy_buffer_written_after_the_loop, containers_filled_and_changed,
         list_of_tuples_and_scalars, prefix_sums_in_place, while_filling_a_buffer,
         while_true_with_break, conv_backward_windows, strided_windows]


@pytest.mark.parametrize("function", LOOPS, ids=lambda f: f.__name__)
def test_loops_give_numpys_results(function):
    check(function, sequence)


# ---- x[index] = v while tracing --------------------------------------------------------

def table(length, seed=0):
    rng = np.random.default_rng(3 * length + seed)
    return rng.standard_normal((length, 4)), rng.integers(0, 4, size=5)


def negative_int(x, ids):
    y = x * 1.0
    if x.shape[0]:
        y[-1] = 7.0
    return y, y.sum()


def slices_with_dims(x, ids):
    y = x * 1.0
    y[:, 1:3] = x[:, :2] * 2
    y[1:, -1] = -x[:-1, 0]
    return y


def newaxis_in_the_index(x, ids):
    y = x * 1.0
    y[None, :, 0] = 5.0
    y[..., None, 1] = x[:, 2:3]
    return y


def ellipsis_index(x, ids):
    y = x * 1.0
    y[..., 2] = x[..., 0]
    y[...] = y + 1
    return y


def boolean_mask_of_data(x, ids):
    y = x * 1.0
    y[x > 0] = 0.0
    return y


def numpy_int64_index(x, ids):
    y = x * 1.0
    if x.shape[0] > 1:
        y[np.int64(1)] = x[0]
    return y


def index_from_the_length(x, ids):
    y, n = x * 1.0, x.shape[0]
    if n:
        y[n - 1] = x[0] + 1
        y[n // 2:] = 2.0
    return y


def casts_to_int(x, ids):
    y = np.zeros(x.shape, dtype=np.int64)
    y[:] = x * 3.7
    y[0:1] = x[0:1] * -2.5
    return y, y + 1


def casts_to_bool(x, ids):
    y = np.zeros(x.shape, dtype=bool)
    y[:] = x
    y[:, 0] = x[:, 1] > 0
    return y, y.sum()


def casts_to_float32(x, ids):
    y = np.zeros(x.shape, dtype=np.float32)
    y[:, 1:] = x[:, 1:] / 3
    return y, y * x


def later_code_sees_the_write(x, ids):
    y = x * 1.0
    y[:, 0] = 0
    s = y.sum(axis=1)
    y[:, 1] = s
    return y, s


def written_in_a_loop_from_the_end(x, ids):
    y = x * 1.0
    for t in range(x.shape[0]):
        y[-t - 1] = y[-t] * 0.5 + x[t]
    return y


def written_in_a_loop_by_column(x, ids):
    y = np.zeros((4, x.shape[0]))
    for t in range(x.shape[0]):
        y[:, t] = x[t] + y[:, t - 1]
    return y


def int_counts_in_a_loop(x, ids):
    y = np.zeros(x.shape[0] + 1, dtype=np.int64)
    for t in range(x.shape[0]):
        y[t + 1] = y[t] + (x[t, 0] > 0)
    return y


def index_from_a_pending_result(x, ids):
    h = np.zeros(4)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h * 0.5)
    y, z = np.zeros(4), h * 1.0
    y[np.argmax(h)] = 5.0
    z[np.argmin(h)] = -5.0
    z[np.argsort(h)[:2]] = np.array([1.0, 2.0])
    w = x * 1.0
    w[:, np.argmax(h)] = 0.0
    return y, z, w


def writes_into_a_pending_result(x, ids):
    h = np.zeros(4)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h * 0.5)
    h[0] = 5.0
    h[1:] += 1
    buffer = np.zeros((2, 4))
    buffer[1] = h
    buffer[0, ::-1] = h
    if x.shape[0]:
        x[-1] = h  # into the argument
    return h, h.sum(), buffer


def negative_step_slices(x, ids):
    y = x * 1.0
    y[::-1] = x
    y[::2, ::-1] = -x[::2]
    return y


def numpy_integer_kinds(x, ids):
    y = x * 1.0
    if x.shape[0]:
        y[np.int64(-1)] = 1.0
        y[np.uint8(0)] = 2.0
        y[np.int32(0), np.int16(1)] = 3.0
        y[-x.shape[0]] = y[-x.shape[0]] + 10
    return y


def nan_and_inf_cast(x, ids):
    v = x * 1.0
    v[:, 0] = np.nan
    v[:, 1] = np.inf
    truth = np.zeros(x.shape, dtype=bool)
    truth[:] = v  # NaN and inf are True
    counts = np.zeros(x.shape, dtype=np.int64)
    counts[:, 2] = v[:, 2] * 1e3
    narrow = np.zeros(x.shape, dtype=np.int32)
    narrow[:] = x * 1e3
    return v, truth, counts, narrow


def python_scalars_of_each_kind(x, ids):
    ints = np.zeros(x.shape, dtype=np.int64)
    ints[:, 0] = 2.9
    ints[:, 1] = -2.9
    ints[:, 2] = True
    singles = np.zeros(x.shape, dtype=np.float32)
    singles[:, 0] = 0.1
    singles[:, 1] = 1e40  # inf in float32
    flags = np.zeros(x.shape, dtype=bool)
    flags[:, 0] = 0.5
    flags[:, 1] = 0.0
    return ints, singles, flags


def values_broadcast(x, ids):
    y = np.zeros((x.shape[0], 4, 2))
    y[:] = x[:, :, None]
    y[:, 1] = np.array([7.0, 8.0])
    y[..., 0] = x
    return y


def written_and_read_in_a_loop(x, ids):
    y = np.zeros(x.shape)
    for t in range(x.shape[0]):
        y[t] = x[t] * 1.5
        y[t, 0] = 0.25
        y[t] = y[t] + y[t - 1]
    singles = np.zeros(x.shape[0], dtype=np.float32)
    for t in range(x.shape[0]):
        singles[t] = t * 0.1
    return y, singles


def list_and_mask_indices(x, ids):
    y = x * 1.0
    y[:, np.array([True, False, True, False])] = 3.0
    y[:, [True, False, False, True]] = x[:, [True, False, False, True]] * 2
    n = x.shape[0]
    y[slice(n // 2, None)] = 1.0
    y[slice(None, None, -2), slice(1, 3)] = 2.0
    if n:
        y[(x[:, 0] > 0).sum() % n] = -1.0
    return y


def zero_d_values_written(x, ids):
    h = np.zeros(4)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h * 0.5)
    y = x * 1.0
    counts = np.zeros(x.shape, dtype=np.int64)
    if x.shape[0]:
        y[0, 0] = x.sum()
        y[-1] = h[1]  # pending
        y[:, 2] = np.float32(0.1)
        counts[0] = x[0, 0] * 10
        counts[:, 1] = x[:, 1] > 0
    pending = np.zeros((2, 4))
    pending[0, 0] = h.sum()
    pending[1] = h.max()
    return y, counts, pending


WRITES = [negative_int, slices_with_dims, newaxis_in_the_index, ellipsis_index,
          boolean_mask_of_data, numpy_int64_index, index_from_the_length, casts_to_int,
          casts_to_bool, casts_to_float32, later_code_sees_the_write,
          written_in_a_loop_from_the_end, written_in_a_loop_by_column, int_counts_in_a_loop,
          index_from_a_pending_result, writes_into_a_pending_result, negative_step_slices,
          numpy_integer_kinds, nan_and_inf_cast, python_scalars_of_each_kind, values_broadcast,
          written_and_read_in_a_loop, list_and_mask_indices, zero_d_values_written]


@pytest.mark.parametrize("function", WRITES, ids=lambda f: f.__name__)
def test_item_assignment_gives_numpys_results(function):
    check(function, table)


# ---- bugs found here and fixed since (regression tests) ---------------------------------

def float_written_then_read(x):
    y = x * 1.0
    y[:, 0] = 1.5  # the traced value holds int(1.5) = 1 (indexing._lazy -> value_of)
    return float(y[0, 0])


def test_a_python_float_written_then_read_keeps_its_fraction():
    check(float_written_then_read, lambda n: (np.zeros((n, 2)),), lengths=(3, 4, 3))


def guard_on_a_float_written(x):
    y = x * 1.0
    y[:, 0] = 1.5
    if y[0, 0] > 1.2:
        return y * 2
    return y


def test_a_guard_on_a_python_float_written_decides_as_numpy():
    check(guard_on_a_float_written, lambda n: (np.zeros((n, 2)),), lengths=(3, 4, 3))


def numpy_array_written(x):
    y = x * 1.0
    y[0, :2] = np.array([2.5, -1.0])
    return y


def nan_written(x):
    y = x * 1.0
    y[:, 0] = np.nan
    return y


@pytest.mark.parametrize("function", [numpy_array_written, nan_written],
                         ids=lambda f: f.__name__)
def test_numpy_arrays_and_nan_written_compile(function):
    jitted = check(function, lambda n: (np.ones((n, 3)),), lengths=(3, 4))
    assert not jitted.stats()["eager_calls"], jitted.stats()["eager_reasons"]


def constant_changed_after_use(x):
    g = np.ones(3)
    h = g * x[0]
    g += 5  # plain NumPy: the graph's constant for g still holds ones
    return g * x[0] + h


def test_a_numpy_array_changed_after_its_first_use():
    check(constant_changed_after_use, lambda n: (np.ones((n, 3)),), lengths=(3, 3, 4))


def constant_changed_after_a_loop(x):
    g, h = np.ones(3), np.zeros(3)
    for t in range(x.shape[0]):
        h = h + g * x[t]
    g += 5
    return g, h


def test_a_numpy_array_changed_after_a_loop_read_it():
    check(constant_changed_after_a_loop, lambda n: (np.ones((n, 3)),), lengths=(3,),
          calls=1)


def list_filled_by_a_loop(x):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t] * 2.0)
    return out


def dict_filled_by_a_loop(x):
    out = {}
    for t in range(x.shape[0]):
        out[t] = x[t] * 2.0
    return out


@pytest.mark.parametrize("function", [list_filled_by_a_loop, dict_filled_by_a_loop],
                         ids=lambda f: f.__name__)
def test_a_container_filled_by_a_loop_is_returned_as_numpy_returns_it(function):
    check(function, lambda n: (np.arange(2.0 * n).reshape(n, 2),), lengths=(4, 4, 5))


def test_a_print_after_the_loop_prints_once_in_order(capsys):
    def printing(x, w):
        h = np.zeros(3)
        print("before")
        for t in range(x.shape[0]):
            h = np.tanh(x[t] + h @ w)
        print("after", round(float(h.sum()), 6))
        return h

    jitted = tj.jit(printing, cache="memory", dynamic=True)
    for length in (3, 4, 7, 4):
        capsys.readouterr()
        got = jitted(*sequence(length))
        printed = capsys.readouterr().out
        want = printing(*sequence(length))
        assert printed == capsys.readouterr().out
        same(got, want)


def test_a_print_in_the_body_prints_every_trip_in_order():
    def printing(x, w):
        h = np.zeros(3)
        for t in range(x.shape[0]):
            h = np.tanh(x[t] + h @ w)
            print(t, round(float(h[0]), 6))
        return h

    jitted = tj.jit(printing, cache="memory", dynamic=True)
    for length in (3, 4, 6, 4):
        seen, expected = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(seen):
            got = jitted(*sequence(length))
        with contextlib.redirect_stdout(expected):
            want = printing(*sequence(length))
        assert seen.getvalue() == expected.getvalue()
        same(got, want)


# ---- gradients through loops whose trip 0 joined them ------------------------------------

def finite_differences(function, w, x, eps=1e-6):
    grad = np.zeros_like(w)
    for position in np.ndindex(w.shape):
        up, down = w.copy(), w.copy()
        up[position] += eps
        down[position] -= eps
        grad[position] = (function(up, x.copy()) - function(down, x.copy())) / (2 * eps)
    return grad


def loss_reading_the_previous_row(w, x):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[t - 1] * 0.5 + h @ w)
    return np.sum(h * x[0])


def loss_with_a_first_trip_of_its_own(w, x):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        if t == 0:
            h = x[0] @ w
        else:
            h = np.tanh(h @ w + x[t])
    return np.sum(h ** 2)


def loss_reversed(w, x):
    h = np.zeros(3)
    for t in reversed(range(x.shape[0])):
        h = np.tanh(x[t] - h @ w)
    return np.sum(h ** 3)


def loss_every_other_row(w, x):
    h = np.zeros(3)
    for t in range(0, x.shape[0], 2):
        h = np.tanh(x[t] + h @ w)
    return np.sum(h)


def loss_from_a_row_of_w(w, x):
    h = w[1]
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
    return np.sum(h)


def loss_of_rows_written(w, x):
    y = np.zeros((x.shape[0], 3))
    for t in range(x.shape[0]):
        y[t, :] = x[t] @ w
        y[t, 0] = 1.5
    return np.sum(y ** 2)


def loss_of_conv_windows(w, x):
    out = np.zeros((x.shape[0], 3))
    for i in range(x.shape[0]):
        for j in range(3):
            out[i, j] = np.sum(x[i:i + 2, :] @ w[:, j])
    return np.sum(out ** 2)


def loss_of_windows_added_in_place(w, x):
    out = np.zeros((x.shape[0] + 2, 3))
    for t in range(x.shape[0]):
        out[t:t + 3] += np.tanh(x[t] @ w)
    return np.sum(np.sin(out))


def loss_of_rows_written_one_back(w, x):
    h, hs = np.zeros(3), np.zeros_like(x)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        hs[t - 1] = h
    return np.sum(hs * x)


def loss_of_a_clamped_index(w, x):
    h = np.zeros(3)
    for t in range(x.shape[0]):
        h = np.tanh(x[max(t - 1, 0)] + h @ w)
    return np.sum(h)


def check_gradients(loss, lengths=(3, 4, 7, 2, 5, 4)):
    jitted = tj.jit(tj.value_and_grad(loss), cache="memory", dynamic=True)
    for length in lengths:
        x, w = sequence(length)
        value, grad = jitted(w.copy(), x.copy())
        np.testing.assert_allclose(value, loss(w.copy(), x.copy()), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grad, finite_differences(loss, w, x), rtol=1e-5,
                                   atol=1e-7)
    assert not jitted.stats()["eager_calls"], jitted.stats()["eager_reasons"]


@pytest.mark.parametrize("loss", [loss_reading_the_previous_row,
                                  loss_with_a_first_trip_of_its_own, loss_reversed,
                                  loss_every_other_row, loss_from_a_row_of_w,
                                  loss_of_rows_written, loss_of_conv_windows,
                                  loss_of_windows_added_in_place, loss_of_rows_written_one_back,
                                  loss_of_a_clamped_index], ids=lambda f: f.__name__)
def test_gradients_through_loops(loss):
    check_gradients(loss)


def loss_of_a_buffer_of_states(w, x):
    h, hs = np.zeros(3), np.zeros_like(x)
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        hs[t] = h
    return np.sum(hs ** 2)


def loss_of_a_dict_of_states(w, x):
    hs = {-1: np.zeros(3)}
    for t in range(x.shape[0]):
        hs[t] = np.tanh(x[t] + hs[t - 1] @ w)
    return np.sum(hs[x.shape[0] - 1] ** 2)


def loss_of_a_list_of_states(w, x):
    hs, h = [], w[0] * 0
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ w)
        hs.append(h)
    return sum(np.sum(v * v) for v in hs) + 0.0


@pytest.mark.parametrize("loss", [loss_of_a_buffer_of_states, loss_of_a_dict_of_states,
                                  loss_of_a_list_of_states], ids=lambda f: f.__name__)
def test_gradients_through_loops_that_stack_their_states(loss):
    check_gradients(loss)


def test_tensor_backward_through_a_loop_that_stacks_its_states():
    def rnn_loss(x, w):
        h, hs = np.zeros(3), np.zeros_like(x)
        for t in range(x.shape[0]):
            h = np.tanh(x[t] + h @ w)
            hs[t] = h
        return (hs ** 2).sum(), h

    jitted = tj.jit(rnn_loss, cache="memory", dynamic=True)
    for length in (3, 4, 7, 4, 2):
        x, w = sequence(length)
        results = []
        for function in (jitted, rnn_loss):
            weights = tj.tensor(w.copy(), requires_grad=True)
            loss, h = function(tj.tensor(x.copy()), weights)
            loss.backward()
            results.append((type(loss), type(h), loss.data, h.data, weights.grad.data))
        (got, want) = results
        assert got[:2] == want[:2]
        for g, w_ in zip(got[2:], want[2:]):
            np.testing.assert_allclose(g, w_, rtol=1e-10, atol=1e-12)


def add_into_a_row(w):
    out = np.zeros(3)
    out[1] += w[0]
    return np.sum(out * w)


def test_eager_value_and_grad_of_an_augmented_item_assignment():
    value, grad = tj.value_and_grad(add_into_a_row)(np.arange(1.0, 4.0))
    np.testing.assert_allclose(value, add_into_a_row(np.arange(1.0, 4.0)))
    np.testing.assert_allclose(grad, finite_differences(
        lambda w, _: add_into_a_row(w), np.arange(1.0, 4.0), np.zeros(1)), rtol=1e-6)


# ---- other bugs found here (not from the pending change) ---------------------------------

def stack_a_constant_with_a_row(x):
    return np.stack([np.zeros(3), x[0]])


def test_stack_of_a_constant_and_a_traced_row_compiles():
    jitted = check(stack_a_constant_with_a_row, lambda n: (np.ones((n, 3)),), lengths=(2, 3))
    assert not jitted.stats()["eager_calls"], jitted.stats()["eager_reasons"]


def test_a_shape_prints_as_numpy_prints_it(capsys):
    def shows_its_shape(x):
        print("shape", x.shape)
        return x * 2

    jitted = tj.jit(shows_its_shape, cache="memory", dynamic=True)
    for length in (3, 4, 3):
        jitted(np.ones((length, 2)))
        got = capsys.readouterr().out
        shows_its_shape(np.ones((length, 2)))
        assert got == capsys.readouterr().out


def test_a_function_that_prints_then_raises_prints_once(capsys):
    def prints_then_raises(x):
        print("start")
        h = np.zeros(x.shape[1])
        for t in range(x.shape[0]):
            h = h + x[t + 1]
        return h

    jitted = tj.jit(prints_then_raises, cache="memory", dynamic=True)
    for length in (3, 4):
        with pytest.raises(IndexError):
            jitted(np.ones((length, 2)))
        got = capsys.readouterr().out
        with pytest.raises(IndexError):
            prints_then_raises(np.ones((length, 2)))
        assert got == capsys.readouterr().out


Pair = collections.namedtuple("Pair", "states last")


def namedtuple_of_a_loops_list(x):
    states = []
    for t in range(x.shape[0]):
        states.append(x[t] * 2.0)
    return Pair(states, x[0])


def test_a_namedtuple_holding_a_loops_list():
    check(namedtuple_of_a_loops_list, lambda n: (np.arange(2.0 * n).reshape(n, 2),),
          lengths=(4, 5))


def assigned_only_in_the_loop(x, w):
    for t in range(x.shape[0]):
        g = np.tanh(x[t] @ w)
    return g


def test_a_name_assigned_only_in_an_empty_loop_is_unbound():
    check(assigned_only_in_the_loop, sequence, lengths=(3, 0))


def test_a_dict_filled_by_a_loop_keeps_numpys_key_order():
    check(dict_keys_in_numpys_order, sequence, lengths=(3, 4))



def empty_list_index(x):
    y = x * 1.0
    y[[]] = 4.0
    return y


def true_as_an_index(x):
    y = x * 1.0
    y[True] = y[True] * 2
    return y


def list_of_dims_as_an_index(x):
    y, n = x * 1.0, x.shape[0]
    y[[0, n - 1]] = 9.0  # a list holding a SymInt
    return y


@pytest.mark.parametrize("function", [empty_list_index, true_as_an_index,
                                      list_of_dims_as_an_index], ids=lambda f: f.__name__)
def test_empty_list_and_true_as_indices_compile(function):
    jitted = check(function, lambda n: (np.ones((n, 3)),), lengths=(3, 4))
    assert not jitted.stats()["eager_calls"], jitted.stats()["eager_reasons"]


def writes_an_argument(x, w):
    w += 1.0
    return x * 2


def test_check_mode_writes_arguments_once():
    jitted = tj.jit(writes_an_argument, cache="memory", dynamic=True, check=True)
    for length in (3, 3, 4):
        w = np.ones(2)
        jitted(np.ones(length), w)
        np.testing.assert_array_equal(w, np.full(2, 2.0))


def returns_what_it_wrote(x):
    x += 1.0
    return x * 2


def test_check_mode_passes_a_function_returning_what_it_wrote():
    jitted = tj.jit(returns_what_it_wrote, cache="memory", dynamic=True, check=True)
    for length in (3, 3, 4):
        x = np.ones(length)
        np.testing.assert_array_equal(jitted(x), np.full(length, 4.0))
        np.testing.assert_array_equal(x, np.full(length, 2.0))


def view_taken_before_a_traced_write(x):
    buffer = np.ones((2, 3))
    row = buffer[0]  # a view: NumPy's row sees the write below
    buffer[0] = x[0]
    return row * 1.0


def view_taken_before_a_traced_write_then_traced(x):
    buffer = np.ones((2, 3))
    row = buffer[0]
    buffer[0] = x[0]
    return row * x[1]  # the view made before the write reaches a traced operation


def test_a_view_taken_before_a_traced_write_sees_it_in_compiled_code():
    """The buffer becomes a traced copy and each NumPy view of it read later becomes the
    same view of that copy (tracer/view_writes.py): it sees the write, as NumPy's does."""
    f = tj.jit(view_taken_before_a_traced_write_then_traced, cache="memory", dynamic=True)
    for length in (2, 3, 2):
        x = np.arange(3.0 * length).reshape(length, 3)
        np.testing.assert_array_equal(f(x), view_taken_before_a_traced_write_then_traced(x))
    assert not f.stats()["eager_calls"], f.explain()


def test_a_view_sees_a_later_traced_write():
    check(view_taken_before_a_traced_write, lambda n: (np.arange(3.0 * n).reshape(n, 3),),
          lengths=(2, 3))


def second_name_for_an_accumulator(x):
    total = np.zeros(3)
    alias = total
    for t in range(x.shape[0]):
        total += x[t]  # in place: alias is total in NumPy
    return total, alias


def test_a_second_name_for_an_accumulator_sees_every_trip():
    check(second_name_for_an_accumulator,
          lambda n: (np.arange(3.0 * n).reshape(n, 3),), lengths=(2, 3, 4))


def state_in_a_nested_dict_argument(x, state):
    for t in range(x.shape[0]):
        state["inner"]["h"] = state["inner"]["h"] * 0.5 + x[t]
    return state["inner"]["h"].sum()


def test_a_nested_dict_argument_written_in_a_loop():
    check(state_in_a_nested_dict_argument,
          lambda n: (np.arange(3.0 * n).reshape(n, 3), {"inner": {"h": np.zeros(3)}}),
          lengths=(3, 4))


def test_a_jitted_loop_called_inside_another_jitted_function():
    inner = tj.jit(rnn, cache="memory", dynamic=True)

    def outer(x, w):
        return inner(x, w) * 2.0 + inner(x[::-1], w), (inner(x, w) > 0).sum()

    def eager(x, w):
        return rnn(x, w) * 2.0 + rnn(x[::-1], w), (rnn(x, w) > 0).sum()

    check(outer, sequence, lengths=(3, 4, 7, 2))
    same(tj.jit(outer, cache="memory", dynamic=True)(*sequence(5)), eager(*sequence(5)))


def test_a_jitted_loop_inside_another_trace_has_no_internal_error():
    inner = tj.jit(rnn, cache="memory", dynamic=True)
    outer = tj.jit(lambda x, w: inner(x, w) * 2.0, cache="memory", dynamic=True)
    for length in (3, 4):
        same(outer(*sequence(length)), rnn(*sequence(length)) * 2.0)
    assert not inner.stats()["eager_calls"], inner.stats()["eager_reasons"]
    # traced through as a helper: outer's program holds inner's loop, inner never traces
    assert not outer.stats()["eager_calls"] and inner.stats()["calls"] == 0
