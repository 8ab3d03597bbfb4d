"""Findings of round 21c (fuzzing and hostile inputs: the newest features mixed, values on
guards' thresholds, hostile layouts and aliasing, processes and threads): each a minimal
program or case, eager NumPy against ``jit``.

Fixed here:

* ``hs[-1] *= 3`` after a captured loop filled ``hs`` with ``hs.append(h)`` (or
  ``d[t] = h``, ``hs.append(x[t])``): the augmented write into an entry of the loop's list
  or dict was made ``hs[-1] = hs[-1] * 3`` (a new entry), where NumPy updates the entry in
  place, and that entry is ``h`` (or a row of ``x``): ``h`` came back without the write
  on every call past the first length (``frontend.Hooks.update_item`` took only a ``list``
  or ``dict`` for a container whose arrays are updated in place; the loop's
  ``StackedList``/``StackedDict`` are now taken too, and the write into their buffers runs
  the call eagerly, as ``h += 1`` after such a loop does).
* a loop with a data-dependent exit that the first call leaves at trip 0, whose statements
  after the exit write an array in place (``count += 1``): when the rest of that trip
  failed to trace (a view rebound in the body: the name is the view or a new array by the
  trip count), the loop ended there as Python does, but the write stayed: the traced call
  returned 1 where NumPy gives 0, with a graph that read a dropped value ('uses %9 before
  its definition', not compiled). The ender (``exit_trips._ender``) now puts back the
  arrays written after the exit (traced ones from the ``trial_writes`` journal, NumPy ones
  from a copy) and the traced stand-ins made there.
* results that are arrays made in the call and views of one another, read from no
  argument (``t = np.zeros(3); return t, t[1:]``; open since round 20): each was a
  constant of its own, and compiled calls returned unrelated arrays where NumPy's share
  memory. They are now views of one copy of their root constant
  (``result_identity.constant_views``), which the wrapper makes as NumPy views.
* a loop with a data-dependent exit whose body writes, after the exit, into an array no
  carried name holds (``log["trace"][t] = acc.sum()``, ``self.trace[t] = ...``, a dict
  made in the call holding ``np.zeros(6)``): trip 0 of the traced call chose the carried
  values by the exit but made that write whether or not the exit was taken, so a call
  whose loop ended at trip 0 still wrote ``trace[0]`` (8.2 where NumPy leaves 0), traced
  and compiled. Trip 0 now journals its writes (a NumPy array made in the call is written
  as its traced copy, ``frontend._exit_trip_write``); one into such an array makes trip 0
  run as Python runs it, its decisions guards (``exit_trips._Point``).
* a dict a captured loop fills with Python numbers (``d[t] = float(h.sum())``) holding,
  at the key just before the loop's first (``d[-1]``), a 0-d array of the same dtype set
  before the loop: that entry joined the loop's buffer and came back a float
  (``loop_containers._pre_rows`` now also asks that it is a Python number as the entries
  are, ``_number_kind``).
* ``t[:]`` of an array a loop wrote (``t[i] = t[i - 1] + x[i]``, unrolled or captured) was
  ``t`` itself: the loop's result is computed lazily, of a kind not known yet, and
  ``array_methods.a_new_view`` made a new view only of a known ndarray; a traced array of
  one or more dims is one whatever its value turns out to be.
* ``x *= 2; return np.ascontiguousarray(x[1:])`` (open since round 20) returned a copy
  where NumPy returns the view of ``x`` (contiguous): ``result_identity.numpy_results``
  skipped a source that views an updated argument. Its source now goes through
  ``argument_views`` as a returned view would (``contiguous_sources``), and the call hands
  the caller's view to NumPy's ``ascontiguousarray``.

Found and not fixed (reported):

* a value nothing returned whose NumPy computation raises (``np.max`` over a zero-size
  axis, ``w[:, idx]`` out of bounds) is dropped with its error: compiled calls return
  where NumPy raises ValueError/IndexError (fuzz seeds 2100016, 2150061).
* a list a captured loop fills with the carried value (``hs.append(h)``, or ``(h, x)``
  tuples): NumPy's last entry is ``h`` itself, compiled code's a row of the loop's
  buffer (equal values; in-place writes into either are refused, so only ``is`` and
  shared memory differ).
* a float32 sum whose NumPy order overflows (``[3e38, 3e38, -3e38, -3e38, -1]``: NumPy
  adds in order and gives inf, compiled code -1.0); a decision on it takes its margin.
"""

import numpy as np
import pytest

import tracejit as tj


# --- an in-place write into an entry of a captured loop's list or dict ---------------------
def last_entry_scaled(x):
    h = np.zeros(x.shape[1:])
    hs = []
    for t in range(x.shape[0]):
        h = np.tanh(h * 0.5 + x[t])
        hs.append(h)
    hs[-1] *= 3.0
    return h, np.stack(hs)


def last_key_shifted(x):
    h = np.zeros(x.shape[1:])
    states = {}
    for t in range(x.shape[0]):
        h = h * 0.5 + x[t]
        states[t] = h
    states[x.shape[0] - 1] += 1.0
    return h


def row_entry_doubled(x):
    rows = []
    for t in range(x.shape[0]):
        rows.append(x[t])
    rows[0] *= 2.0
    return np.stack(rows)


@pytest.mark.parametrize("function", [last_entry_scaled, last_key_shifted, row_entry_doubled])
def test_an_augmented_write_into_a_loop_filled_entry_updates_what_numpy_does(function):
    """The entry is ``h`` (or a row of the argument) in NumPy: ``hs[-1] *= 3`` updates it.
    Compiled code stored a new entry instead, so ``h`` (or ``x``) missed the write from the
    second length on (the captured loop's list)."""
    f = tj.jit(function, cache="memory")
    for rows in (5, 6, 7):
        x, eager_x = np.arange(rows * 3.0).reshape(rows, 3), np.arange(rows * 3.0).reshape(
            rows, 3)
        results, expected = f(x), function(eager_x)
        if not isinstance(expected, tuple):
            results, expected = (results,), (expected,)
        for got, want in zip(results, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_array_equal(x, eager_x)


# --- an exit loop the first call leaves at trip 0, writing in place after the exit ----------
def halved_view_counted(c):
    tail = c[1:]
    count = np.zeros(tail.shape, dtype=np.int64)
    for step in range(c.shape[0] + 2):
        tail = tail * 0.5
        if step > 5 or np.abs(tail).max() <= 1e9:
            break
        count += 1
    return count


def halved_view_counted_while(c):
    tail = c[1:]
    count = np.zeros(tail.shape, dtype=np.int64)
    step = 0
    while step <= 5:
        tail = tail * 0.5
        if np.abs(tail).max() <= 1e9:
            break
        count += 1
        step += 1
    return count


@pytest.mark.parametrize("function, dynamic", [(halved_view_counted, "auto"),
                                               (halved_view_counted_while, True)])
def test_a_write_after_the_exit_of_trip_zero_is_not_kept(function, dynamic):
    """The fuzzer's program, smaller: ``tail`` views ``c``, so the captured trip 0 refuses
    to rebind it and the loop ends at its exit as Python ends it; ``count += 1`` after the
    exit had run on the traced path (``count`` a NumPy array with exact shapes, a traced
    one with dynamic dims) and stayed: the first call returned ones."""
    f = tj.jit(function, cache="memory", dynamic=dynamic)
    rng = np.random.default_rng(7)
    for rows, scale in ((6, 1.0), (6, 1.0), (5, 1e12)):
        c = rng.standard_normal((rows, 1)) * scale
        np.testing.assert_array_equal(f(c), function(c))
    assert "internal error" not in repr(f.stats().get("eager_calls")), f.explain()
    assert "not compiled" not in repr(f.stats().get("eager_calls")), f.explain()


# --- constants of the trace returned with views of them -------------------------------------
def zeros_and_tail(x):
    t = np.zeros(3)
    return x + 1.0, t, t[1:]


def two_views_of_a_grid(x):
    t = np.full((2, 3), 2.0)
    t[0] = -1.0
    return t[:, ::2], t[1], x * 2.0


def grid_twice(x):
    t = np.ones((2, 2))
    return t, t[None], t


@pytest.mark.parametrize("function", [zeros_and_tail, two_views_of_a_grid, grid_twice])
def test_constant_results_that_view_each_other_share_memory_as_in_numpy(function):
    """Compiled calls (the second and third) returned each constant as an array of its
    own: a write into ``t`` did not show in ``t[1:]`` as in NumPy."""
    f = tj.jit(function, cache="memory")
    for _ in range(3):
        x = np.arange(3.0)
        got, want = f(x), function(x.copy())
        pairs = [(i, j) for i in range(len(want)) for j in range(i + 1, len(want))]
        assert [(got[i] is got[j], np.shares_memory(got[i], got[j])) for i, j in pairs] == [
            (want[i] is want[j], np.shares_memory(want[i], want[j])) for i, j in pairs]
        for got_array, want_array in zip(got, want, strict=True):
            np.testing.assert_array_equal(got_array, want_array)
            assert got_array.flags.writeable == want_array.flags.writeable
        got[1][...] = 7.0  # a write through one shows in the others, as in NumPy
        want[1][...] = 7.0
        for got_array, want_array in zip(got, want, strict=True):
            np.testing.assert_array_equal(got_array, want_array)


# --- an exit loop writing into an array no carried name holds, after its exit --------------
class Recorder:
    def __init__(self):
        self.acc = np.zeros(2)
        self.trace = np.zeros(10)


def logged_to_an_attribute(recorder, x):
    acc = recorder.acc
    for t in range(x.shape[0]):
        acc = acc + x[t]
        if acc.sum() > 5:
            break
        recorder.trace[t] = acc.sum()
    recorder.acc = acc
    return acc


def logged_to_a_dict(state, x):
    acc = state["acc"]
    for t in range(x.shape[0]):
        acc = acc + x[t]
        if acc.sum() > 5:
            break
        state["trace"][t] = acc.sum()
    state["acc"] = acc
    return acc


def marked_in_a_local_dict(x):
    marks = {"seen": np.zeros(6)}
    acc = np.zeros(2)
    for t in range(x.shape[0]):
        acc = acc + x[t]
        if acc.sum() > 5:
            break
        marks["seen"][t] = 1.0
    return acc, marks["seen"]


CALLS = [(4, 1.0), (4, 0.1), (5, 3.0), (6, 0.1), (5, 3.0)]  # (rows, scale): 3.0 breaks at once


@pytest.mark.parametrize("holder", ["attribute", "dict"])
def test_a_write_after_the_exit_into_an_argument_held_array_is_skipped_with_it(holder):
    """The state carries over: at the third call ``acc`` enters at 3.1 and the loop breaks
    at trip 0; NumPy leaves ``trace`` as it was, compiled code wrote ``trace[0] = 8.2``."""
    function = logged_to_an_attribute if holder == "attribute" else logged_to_a_dict
    f = tj.jit(function, cache="memory")
    if holder == "attribute":
        eager_state, jit_state = Recorder(), Recorder()
    else:
        eager_state, jit_state = ({"acc": np.zeros(2), "trace": np.zeros(10)}
                                  for _ in range(2))
    for rows, scale in CALLS:
        x = np.ones((rows, 2)) * scale
        np.testing.assert_allclose(f(jit_state, x), function(eager_state, x), rtol=1e-12)
        for got, want in (zip(vars(jit_state).values(), vars(eager_state).values())
                          if holder == "attribute" else
                          zip(jit_state.values(), eager_state.values())):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_write_after_the_exit_into_a_numpy_array_a_local_dict_holds_is_skipped_with_it():
    """``np.zeros(6)`` held by a dict made in the call, written with a constant: NumPy's
    write on the traced path stayed (``seen[0]`` was 1 where the loop broke at once)."""
    f = tj.jit(marked_in_a_local_dict, cache="memory")
    for rows, scale in CALLS:
        x = np.ones((rows, 2)) * scale
        for got, want in zip(f(x), marked_in_a_local_dict(x), strict=True):
            np.testing.assert_array_equal(got, want)


# --- an entry before a captured loop's first key, of another kind than its entries ----------
def sums_after_a_start(v):
    total = np.full(v.shape[1:], -np.inf)  # a 0-d array
    sums = {-1: total, "first": 0}
    for t in range(v.shape[0]):
        total = total + v[t]
        sums[t] = float(total.sum())
    return sums


def test_an_entry_before_the_first_key_keeps_its_kind():
    """``sums[-1]`` is NumPy's 0-d array; from the second length on it came back a float."""
    f = tj.jit(sums_after_a_start, cache="memory")
    for rows in (5, 6, 7):
        v = np.arange(rows, dtype=np.float32)
        got, want = f(v), sums_after_a_start(v)
        assert list(got) == list(want)
        for key in want:
            assert type(got[key]) is type(want[key]), key
            np.testing.assert_array_equal(got[key], want[key])


# --- x[:] of an array a loop wrote: a new view, not the array ------------------------------
def running_sum_and_its_view(x):
    total = np.full(x.shape, -np.inf)
    total[0] = x[0]
    for t in range(1, x.shape[0]):
        total[t] = total[t - 1] + x[t]
    return total, total[:]


def doubled_rows_and_their_view(x):
    out = np.zeros(x.shape)
    for t in range(x.shape[0]):
        out[t] = x[t] * 2
    return out, out[:]


@pytest.mark.parametrize("function", [running_sum_and_its_view, doubled_rows_and_their_view])
def test_a_full_slice_of_an_array_a_loop_wrote_is_a_new_view(function):
    """Both results were one object (``is``), traced and compiled; NumPy's are two arrays
    that share memory."""
    f = tj.jit(function, cache="memory")
    for rows in (5, 5, 6):
        x = np.arange(rows * 1.0)
        (got, got_view), (want, want_view) = f(x), function(x)
        assert (got is got_view, np.shares_memory(got, got_view)) == (
            want is want_view, np.shares_memory(want, want_view))
        np.testing.assert_array_equal(got_view, want_view)


# --- np.ascontiguousarray of a view of an argument updated in place ------------------------
def doubled_tail(x):
    x *= 2
    return np.ascontiguousarray(x[1:])


def doubled_columns(x):
    x *= 2
    return np.ascontiguousarray(x[:, 1:]), np.ascontiguousarray(x[1:])


@pytest.mark.parametrize("function, shape", [(doubled_tail, (4,)), (doubled_columns, (3, 4))])
def test_ascontiguousarray_of_an_updated_arguments_view_is_numpys(function, shape):
    """NumPy returns the view itself where it is C-contiguous (``x[1:]``), a copy where it
    is not (``x[:, 1:]``); compiled calls returned a copy for both."""
    f = tj.jit(function, cache="memory")
    for _ in range(3):
        x, eager_x = (np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
                      for _ in range(2))
        results, expected = f(x), function(eager_x)
        if not isinstance(expected, tuple):
            results, expected = (results,), (expected,)
        for got, want in zip(results, expected, strict=True):
            np.testing.assert_array_equal(got, want)
            assert np.shares_memory(got, x) == np.shares_memory(want, eager_x)
        np.testing.assert_array_equal(x, eager_x)
