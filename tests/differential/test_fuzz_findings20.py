"""Findings of round 20c (fuzzing and hostile inputs: values on guards' thresholds,
narrow and wrapping integers, aliased and read-only arguments, NumPy scalars against
Python ones, user classes' operators in loops, the disk cache and threads): each a minimal
program or case, eager NumPy against ``jit``.

Fixed here:

* an object made in the call whose method sets an attribute, rebound in a loop
  (``acc = acc.add(x[t])``, or ``acc += x[t]`` through ``__iadd__``): the loop's trial
  trips wrote that attribute and a refused capture left their values there, so the trips
  run unrolled after it started from a later total (a traced call returned 2.64 where
  eager gives 1.41; exact shapes failed to compile, an IR value used before its
  definition). ``loops._capture_trips`` journals writes into objects made in the call
  (``attribute_writes.set_local``), refuses a capture whose trips write one, and puts
  them back; likewise a list, dict or set such an object holds or a closure fills
  (``self.seen.append(v)``, ``def note(v): notes.append(v)``), whose trial entries stayed
  (``trial_containers``; a closure's list had 3 entries for every length).
* ``a += b`` on a user object ran ``__iadd__`` (or the ``__add__`` Python falls back to)
  as written, unseen by the trace: it now runs through the hooks as ``a + b`` does
  (``operator_calls.inplace``).
* ``x[idx[t]] = t + 100`` in a loop over a dynamic length: an internal error (the
  index's arithmetic reached an index array's scatter as a dim).
* ``if (h > 0.5).any(): h[h > 0.5] = 0.5`` ran every call eagerly (the select of a
  boolean-mask selection).
* a Python int argument past int64 (``2**200``) once ints are run-time inputs: an
  internal error in the entry (OverflowError); now a guard miss.
* a view (or an array others view) that an exit loop rebinds, written through after it:
  a wrong result on every call (the loop left a new array where NumPy, after no trip,
  keeps the view); now the call runs eagerly (``exit_trips._into``).

Found and not fixed (reported): results that are constants of the trace and views of
each other (``t = np.zeros((2, 2)); return t, t[1:]``, nothing read from the arguments)
come back as separate arrays, where NumPy's share memory (the graph's constants are
frozen copies, their relation lost).
"""

import numpy as np
import pytest

import tracejit as tj


# --- an object made in the call, its method setting an attribute, rebound in a loop -------
class Accumulator:
    def __init__(self):
        self.total = 0.0

    def add(self, value):
        self.total = self.total + value
        return self

    def __iadd__(self, value):
        self.total = self.total + value
        return self


def summed_by_method(x):
    acc = Accumulator()
    for t in range(x.shape[0]):
        acc = acc.add(x[t])
    return acc.total


def summed_by_iadd(x):
    acc = Accumulator()
    for t in range(x.shape[0]):
        acc += x[t]
    return acc.total


@pytest.mark.parametrize("function", [summed_by_method, summed_by_iadd])
def test_an_object_rebound_in_a_loop_keeps_eagers_attribute(function):
    """The second and third sizes are traced (the loop over a dynamic length tried as a
    captured loop): they returned a total that counted the trial trips' rows again."""
    f = tj.jit(function, cache="memory")
    rng = np.random.default_rng(0)
    for rows in (4, 5, 6, 4):
        x = rng.standard_normal((rows, 2))
        np.testing.assert_allclose(f(x), function(x), rtol=1e-12)
    assert not f.stats().get("eager_calls"), f.explain()  # compiled, no internal error


class Counter:
    def __init__(self):
        self.seen = []

    def tick(self, value):
        self.seen.append(value)
        return self


def counted_by_method(x):
    counter = Counter()
    for t in range(x.shape[0]):
        counter = counter.tick(x[t].sum())
    return len(counter.seen), np.array(counter.seen)


def noted_by_a_closure(x):
    notes = []

    def note(value):
        notes.append(value)
        return value

    h = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        h = note(h * 0.5 + x[t])
    return h, len(notes), np.sum(notes, axis=0)


@pytest.mark.parametrize("function", [counted_by_method, noted_by_a_closure])
def test_a_list_a_call_fills_in_a_loop_holds_eagers_entries(function):
    """A list filled by a call in the body, not by a name the loop carries (a method of an
    object made in the call, a closure): the trial trips appended to it too, and the
    captured (or refused) loop left their entries there (len 3 for every length, or 2
    more than eager's; a sum of the trials' values failed to compile)."""
    f = tj.jit(function, cache="memory")
    rng = np.random.default_rng(1)
    for rows in (3, 4, 6, 3):
        x = rng.standard_normal((rows, 2))
        for got, want in zip(f(x), function(x)):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    assert "internal error" not in repr(f.stats().get("eager_calls")), f.explain()


# --- a loop index's arithmetic written through an index array ----------------------------
def placed_at_positions(x, positions):
    for t in range(positions.shape[0]):
        x[positions[t]] = t + 100
    return x.sum()


def placed_in_a_column(x, positions):
    for t in range(positions.shape[0]):
        x[positions[t], 0] = t * 2 - 1
    return x


@pytest.mark.parametrize("function, shape", [(placed_at_positions, (6,)),
                                             (placed_in_a_column, (6, 2))])
def test_a_loop_index_expression_written_through_an_index_array(function, shape):
    """``x[idx[t]] = t + 100`` in a loop over a dynamic length: the value, the index's
    arithmetic (a dim), reached the index array's scatter as it was, which takes arrays
    (internal error: 'SymInt' object has no attribute 'dtype'; the calls ran eagerly).
    Out-of-bounds positions raise NumPy's IndexError after the trips before them wrote."""
    f = tj.jit(function, cache="memory")
    for positions in ([0, 1, 2], [1, 2, 3, 4], [5, 4, 3], [0, 1, 9, 2]):
        positions = np.array(positions)
        eager_x, jit_x = np.zeros(shape), np.zeros(shape)
        if positions.max() >= 6:
            with pytest.raises(IndexError):
                function(eager_x, positions)
            with pytest.raises(IndexError):
                f(jit_x, positions)
        else:
            np.testing.assert_array_equal(f(jit_x, positions), function(eager_x, positions))
        np.testing.assert_array_equal(jit_x, eager_x)
    assert "internal error" not in repr(f.stats().get("eager_calls")), f.explain()


# --- an if on data whose branch writes through a boolean mask ------------------------------
def clipped_when_needed(h, y):
    h = h.astype(np.float32)
    if (h > 0.5).any():
        h[h > 0.5] = 0.5
    if y.sum() > 0:
        h[y > 0] = y[y > 0]
    else:
        h[y < 0] = -1.0
    return h


def test_an_if_on_data_whose_branch_writes_through_a_mask_compiles():
    """``if (h > 0.5).any(): h[h > 0.5] = 0.5`` (if_selects makes it a select) read
    ``np.where(cond, 0.5, h[h > 0.5])``: the 0-d condition's Tracer took NumPy's call and
    refused the selection, so every call ran eagerly. ``Hooks.select`` hands a selection to
    the selection's own ``where``."""
    f = tj.jit(clipped_when_needed, cache="memory")
    rng = np.random.default_rng(3)
    for sign in (1, -1, 1, -1, 1):
        h, y = rng.standard_normal((4, 3)), sign * np.abs(rng.standard_normal((4, 3)))
        y[0, 0] = -y[0, 0]
        np.testing.assert_array_equal(f(h, y), clipped_when_needed(h, y))
    assert not f.stats().get("eager_calls"), f.explain()


# --- a Python int argument past int64 ------------------------------------------------------
def shifted(x, k):
    return x + k


def test_a_python_int_past_int64_is_a_guard_miss_not_an_internal_error():
    """After two values a Python int argument is a run-time int64 input; 2**200 (or
    -2**70) reached the entry's conversion and raised OverflowError there: an internal
    error, logged with its traceback, and the call ran eagerly. The entry guard now checks
    the range: such a value is a miss (traced, its value a constant), as NumPy computes
    it."""
    f = tj.jit(shifted, cache="memory")
    x = np.arange(3.0)
    for k in (3, 5, 2**200, 7, -2**70):
        np.testing.assert_array_equal(f(x, k), shifted(x, k))
    assert "internal error" not in repr(f.stats().get("eager_calls")), f.explain()


# --- a view rebound by an exit loop, written through after it ------------------------------
def halved_view(x):
    base = x * 0
    tail = base[1:]
    for outer in range(2):
        tail += outer
        for _ in range(40):
            if np.abs(tail).max() <= 1e-3:
                break
            tail = tail / 2
    return base


def test_a_view_an_exit_loop_rebinds_is_written_through_as_in_numpy():
    """The fuzzer's program, smaller: ``tail`` views ``base``; the exit loop rebinds it
    (``tail = tail / 2``) only when it runs a trip. At the first outer trip it runs none, so
    NumPy's ``tail += 1`` at the second writes into ``base``; the captured loop left a new
    array there (the chosen value), and ``base`` stayed 0 (12 of 15 elements differed, on
    every call). Such a loop now runs the call eagerly, with the reason."""
    f = tj.jit(halved_view, cache="memory")
    for scale in (1.0, 2.0, 3.0):
        x = np.ones((4, 2)) * scale
        np.testing.assert_array_equal(f(x), halved_view(x))
