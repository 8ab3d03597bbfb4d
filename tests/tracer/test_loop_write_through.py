"""Captured loops writing in place through a carried view (``tracer/loop_write_through.py``):
the carried view goes through the loop alone and its final value is written into the base
at exit, when the body reads neither the base nor another view of it; otherwise the loop
unrolls (the trace follows each write). Every model runs eagerly and through ``jit`` on
the same arguments (results and arguments afterwards agree); the loops that may be
captured must be (``explain()`` names no unrolled loop).
"""

import numpy as np
from real_model_checks import run_calls

from benchmarks.compile_scaling import conv_backward

SHARED = "shares memory"


def unrolled(f):
    return [line for line in f.explain().splitlines() if " unrolled: " in line]


def rows(*lengths, columns=3):
    return [(np.cos(np.arange(columns * n) * 0.7).reshape(n, columns),) for n in lengths]


# --- captured: the body reads only the carried view -------------------------------------------
def numpy_base_row(x):
    out = np.zeros((2, x.shape[1]))     # a NumPy base, traced once written
    total = out[0]
    for t in range(x.shape[0]):
        total += x[t] * t
    return out, total * 1.0


def traced_base_window(x):
    out = np.zeros((x.shape[0] + 2, x.shape[1]))
    window = out[1:-1]                  # a view of a traced base (dynamic shape)
    for t in range(x.shape[0]):
        window[t] = window[t - 1] * 0.5 + x[t]
    return out


def view_of_a_view(x):
    buf = np.zeros((3, x.shape[1] + 1))
    row = buf[1]
    seg = row[1:]                       # its steps run from buf through row
    for t in range(x.shape[0]):
        seg -= x[t]
    return buf, row + 0.0


def flipped_view(x):
    buf = np.ones((2, x.shape[1]))
    back = buf[1, ::-1]
    for t in range(x.shape[0]):
        back *= 1.0 + 0.1 * x[t]
    return buf


def test_carried_views_written_through_at_exit_stay_captured():
    for function in (numpy_base_row, traced_base_window, view_of_a_view, flipped_view):
        f = run_calls(function, rows(5, 7), dynamic=True)
        assert not unrolled(f), (function.__name__, f.explain())


def argument_row(buf, x):
    row = buf[1]                        # a write back into the caller's array
    for t in range(x.shape[0]):
        row += x[t] * 2.0
    return row.sum()


def test_a_view_of_an_argument_writes_into_the_callers_array():
    rng = np.random.default_rng(3)
    arguments = [(rng.standard_normal((3, 4)), rng.standard_normal((n, 4))) for n in (5, 7)]
    f = run_calls(argument_row, arguments, dynamic=True)
    assert not unrolled(f), f.explain()


def from_the_fourth(x):
    out = np.zeros((2, x.shape[1]))
    total = out[1]
    for t in range(x.shape[0] - 4):     # 0 to 4 trips in the bucket of 5..8 rows
        total += x[t + 4]
    return out


def test_zero_and_one_trips():
    run_calls(from_the_fourth, rows(7, 8, 5, 6, 4), dynamic=True)


def inner_rows(x):
    out = np.zeros((x.shape[0], x.shape[2]))
    for i in range(x.shape[0]):
        row = out[i]                    # the inner loop's carried view
        for j in range(x.shape[1]):
            row += x[i, j] * (j + 1)
    return out


def test_nested_loops_write_through_in_the_inner_loop():
    rng = np.random.default_rng(4)
    run_calls(inner_rows, [(rng.standard_normal((3, 6, 3)),)], dynamic=True)


def test_course_conv_backward_keeps_its_inner_loops():
    """The course's conv_backward accumulates into ``da_prev_pad = dA_prev_pad[i]``: its
    w loop is captured (it unrolled since c637261: a 9 s first call at (2, 6, 6, 3))."""
    rng = np.random.default_rng(5)
    arguments = [(rng.standard_normal((1, 6, 6, 2)), rng.standard_normal((1, 6, 6, 3)),
                  rng.standard_normal((3, 3, 3, 2)), 1)]
    f = run_calls(conv_backward, arguments, repeats=1)
    assert not [line for line in unrolled(f) if SHARED in line], f.explain()


# --- unrolled: the body reads the memory through another name ----------------------------------
def reads_the_base(x):
    buf = np.zeros((2, x.shape[1]))
    row = buf[1]
    for t in range(x.shape[0]):
        row += buf[0] + buf[1] * 0.5 + x[t]  # buf[1] is row: NumPy sees each trip's write
    return buf


def reads_another_view(x):
    buf = np.zeros((3, x.shape[1]))
    row, column = buf[1], buf[:, 0]
    for t in range(x.shape[0]):
        row += column.sum() + x[t]      # column shows row[0]
    return buf


def two_carried_views(x):
    buf = np.zeros((3, x.shape[1]))
    low, high = buf[:2], buf[1:]        # overlapping: NumPy's writes show in both
    for t in range(x.shape[0]):
        low += x[t]
        high *= 0.5
    return buf


def base_read_by_a_nested_loop(x):
    buf = np.zeros((2, x.shape[1]))
    row = buf[1]
    for t in range(x.shape[0]):
        for k in range(x.shape[0]):
            row += buf[1] * 0.1 + x[k] * t
    return buf


def test_loops_reading_the_written_memory_otherwise_unroll():
    for function in (reads_the_base, reads_another_view, two_carried_views,
                     base_read_by_a_nested_loop):
        f = run_calls(function, rows(4), dynamic=True)
        assert [line for line in unrolled(f) if SHARED in line], (function.__name__,
                                                                  f.explain())


# --- the view escapes or is rebound -------------------------------------------------------------
def rebound_after_the_first_write(x):
    out = np.zeros((2, x.shape[1]))
    total = out[0]
    for t in range(x.shape[0]):
        total += x[t]                   # into out at trip 0 only
        total = total * 0.5
    return out, total


def appended_each_trip(x):
    out = np.zeros((2, x.shape[1]))
    total = out[0]
    seen = []
    for t in range(x.shape[0]):
        total += x[t]
        seen.append(total)              # the same view every time
    return out, seen[0] + 0.0, len(seen)


def copied_each_trip(x):
    out = np.zeros((2, x.shape[1]))
    total = out[0]
    seen = []
    for t in range(x.shape[0]):
        total += x[t]
        seen.append(total.copy())
    return out, np.stack(seen)


def returned_view(x):
    out = np.zeros((x.shape[0], x.shape[1]))
    last = out[-1]
    for t in range(x.shape[0]):
        last += x[t] ** 2
    return last, out


def test_views_escaping_or_rebound():
    for function in (rebound_after_the_first_write, appended_each_trip, copied_each_trip,
                     returned_view):
        run_calls(function, rows(5), dynamic=True)
