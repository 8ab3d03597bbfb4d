"""Adversarial checks of a captured loop's pending trips (tracer/pending.py), iteration 0
joining the loop (tracer/loops.py ``_capture``) and ``x[index] = v`` computed by NumPy's
own assignment while tracing (tracer/indexing.py ``setitem``).

Every case runs the jitted function and eager NumPy on fresh copies of the same inputs,
over several lengths (0, 1 and 2 trips too) and twice per length, so the first (traced)
call and later (compiled) calls are both checked: values, dtypes, shapes, Python and NumPy
scalar types, and what was written into the arguments. Strict xfails are bugs found here.
"""

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
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True,
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


LOOPS = [if_t_is_0, previous_row_wraps, sliding_window, sliding_window_rows, step_of_2,
         step_of_3_from_1, reversed_into_buffer, python_int_becomes_float,
         int_array_meets_floats, float32_state_float64_weights, float32_with_weak_floats,
         weak_float_counter, stacked_list, scalars_of_every_kind, zero_d_accumulator,
         numpy_scalar_accumulator, arguments_written_after_the_loop,
         a_second_loop_reads_the_first, windows_updated_in_place, conv_like_nested,
         state_is_an_argument_row, state_is_traced, read_past_the_end, empty_state, while_loop,
         branch_on_the_pending_result, asarray_of_the_pending_result]


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


WRITES = [negative_int, slices_with_dims, newaxis_in_the_index, ellipsis_index,
          boolean_mask_of_data, numpy_int64_index, index_from_the_length, casts_to_int,
          casts_to_bool, casts_to_float32, later_code_sees_the_write,
          written_in_a_loop_from_the_end, written_in_a_loop_by_column, int_counts_in_a_loop]


@pytest.mark.parametrize("function", WRITES, ids=lambda f: f.__name__)
def test_item_assignment_gives_numpys_results(function):
    check(function, table)


# ---- bugs found: strict xfails -----------------------------------------------------------

def float_written_then_read(x):
    y = x * 1.0
    y[:, 0] = 1.5  # the traced value holds int(1.5) = 1 (indexing._lazy -> value_of)
    return float(y[0, 0])


@pytest.mark.xfail(strict=True, reason="setitem: indexing._lazy reads a Python float value "
                   "through dims.value_of, which is int(): y[:, 0] = 1.5 gives the trace "
                   "1.0; a read of it (float(), a guard) then returns or decides on 1.0")
def test_a_python_float_written_then_read_keeps_its_fraction():
    check(float_written_then_read, lambda n: (np.zeros((n, 2)),), lengths=(3, 4, 3))


def guard_on_a_float_written(x):
    y = x * 1.0
    y[:, 0] = 1.5
    if y[0, 0] > 1.2:
        return y * 2
    return y


@pytest.mark.xfail(strict=True, reason="setitem: y[:, 0] = 1.5 traces as 1.0 "
                   "(indexing._lazy -> int()), so the guard takes the other branch")
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


@pytest.mark.xfail(strict=True, reason="setitem: indexing._lazy calls int() on a NumPy "
                   "array value (TypeError) or a NaN (ValueError): internal error, the "
                   "function runs eagerly instead of compiling")
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


@pytest.mark.xfail(strict=True, reason="a NumPy array used by a traced op becomes a graph "
                   "constant snapshotted at first use (TracingContext.atom, keyed by id); "
                   "g += 5 by plain NumPy afterwards is not seen, so compiled calls read "
                   "the old values (pre-existing, not from the pending change)")
def test_a_numpy_array_changed_after_its_first_use():
    check(constant_changed_after_use, lambda n: (np.ones((n, 3)),), lengths=(3, 3, 4))


def constant_changed_after_a_loop(x):
    g, h = np.ones(3), np.zeros(3)
    for t in range(x.shape[0]):
        h = h + g * x[t]
    g += 5
    return g, h


@pytest.mark.xfail(strict=True, reason="the same stale constant, now on the first call too: "
                   "with the loop pending the first call's result comes from the program, "
                   "which returns the constant snapshotted before g += 5 (1s, NumPy 6s)")
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


@pytest.mark.xfail(strict=True, reason="a list or dict a captured loop filled is returned "
                   "as loop_containers.StackedList/StackedDict, a static output holding the "
                   "trace's tracers: len() or reading it raises 'a traced value was used "
                   "after its trace finished' (pre-existing)")
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
