"""Adversarial review of round 22's new capabilities (commits since 0e8d4da): the trip
count argument as a dim (735dca6), guard margins of exact zeros and square roots
(3d3d31c), refreshed result views (b0863c6), bounds of % and // with a negative k
(cb6266a), sinh/cosh (531ec33), slices of stacked lists, masked selections over trailing
dims and ``max(initial=)`` (37322fc), Tensor writes through views (f581b99), the float32
tan/sin/cos kernels (2948a78, 2389077).

Each call compares compiled with eager NumPy (results, dtypes, types, the arguments
afterwards) on calls with changing inputs, as the real-model reviews do.

Findings, each fixed with its test here (each fails before its fix): a NumPy int trip
count (``fit(X, Y, np.int64(n))``, a count read from an array or ``np.arange``) was refused
by the entry of the very variant traced for it: the count's symbol was bound to the NumPy
int, so the buffer's shape guard (``8*s0 > limit``) gave an ``np.bool_`` that ``is not
False``: every such call traced and compiled a new variant and then ran eagerly
('entry refused its own call'). A count under 3 seen before the count was a dim
(``fit(x, 13)``, ``fit(x, 2)``, ``fit(x, 100)``) pinned it for good: one compile per count
after it. ``if i % print_every == 0`` with ``print_every`` an argument was no period:
one compile per count. Wrong results: ``x[1:3] = (x[0], x[1])`` stacked the items before
writing, where NumPy copies them in turn (row 2 gets row 0's values); ``v = x[:-1];
x[-1] = 5.0; return v, x`` returned a v apart from the caller's x (b0863c6 read it again
from the program's final x).

``b = a[:2]; c = b[1:]; a[-1] = 0; return c, b``
(views of one array that is no result, one read again after a write apart from it, the
other not) came back sharing no memory where NumPy's do (before this session too).

Reported and fixed after this review: the gradient of np.sinh and np.cosh was inf at
|x| = 710 where NumPy's cosh/sinh (the exact derivative) is 1.1e308 (04e4c63); a disk
entry was keyed by the values of number arguments even where they are run-time inputs, so
a count variant loaded from disk only at the count it was stored under (a3c7571: such
entries are filed under a key without the numbers' values).

Probed and equal to eager, not kept (CI budget): trip counts 0, 1, 2, 3, P - 1, P, P + 1,
negative, a bool, a float (NumPy's TypeError); ``lr / n``, ``i == n - 1``, ``costs[-1]``,
``len(costs)``, ``range(1, n)``, ``range(n, 0, -1)``, ``range(0, n, 2)``, ``range(n //
2)``, ``range(n, m)``, a count by keyword and by default, two counts in nested and in
consecutive loops, ``if flag and i % 5 == 0``, ``range(X.shape[1])`` with a selected
append; ``(x[:, None] - x[None]) ** p`` for p in 2, 3, 0.5, 1.5, 1 and its square root
decided against 0 (float64 and float32, with -0.0, denormals, NaN, inf, a value only
approximately zero); sin, cos, tan, sinh, cosh, tanh, exp of 0, 1, 15, 17 elements and of
-0.0, denormals, 709-711, 88-90, 2^20, 1e10-1e300, inf, NaN, contiguous, strided and fused
(float32 tan past 2^20 is up to 16 ulp from NumPy's, but closer to the exact value than
NumPy's).
"""

from __future__ import annotations

import numpy as np
from real_model_checks import assert_same

from tracejit import jit


def _same(got, want):
    assert_same(got, want, rtol=1e-9, atol=1e-12)


# --- range(num_iterations) (735dca6) ------------------------------------------------------
def _fit(x, num_iterations):
    w, costs = np.zeros(3), []
    for i in range(num_iterations):
        w = w - 0.1 * (w - x)
        if i % 4 == 0:
            costs.append(float(np.sum((w - x) ** 2)))
    return w, costs


def test_a_numpy_int_trip_count_runs_its_own_variant():
    """Before the fix each NumPy int count traced a new variant whose entry refused it:
    eager, 'entry refused its own call', and one more compile at every call."""
    x = np.arange(3.0)
    compiled = jit(_fit, cache="memory")
    for count in (5, 6, np.int64(9), np.int64(10), np.int32(4), np.int32(7)):
        _same(compiled(x, count), _fit(x, count))
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == 4, stats


# --- a list or tuple assigned into a slice (37322fc) --------------------------------------
def _shift_rows(state):
    state[1:3] = (state[0], state[1])
    return state


def _reverse_rows(state):
    state[::-1] = [state[0], state[1] * 1, state[2]]
    return state


def _fancy_rows(state):
    state[[1, 2]] = (state[0], state[1])  # an index array: NumPy converts the tuple first
    return state


def test_a_tuple_of_views_of_the_target_is_copied_in_turn():
    """NumPy copies ``(state[0], state[1])`` into ``state[1:3]`` item by item, each read
    after the earlier ones are written (row 2 gets row 0's values). Before the fix the
    stack read every item first: row 2 kept row 1's old values, in traced and compiled
    calls."""
    base = np.arange(12.0).reshape(3, 4)
    for fn in (_shift_rows, _reverse_rows, _fancy_rows):
        compiled = jit(fn)
        for state in (base, base[::-1] * 2, base + 1):
            eager, jitted = state.copy(), state.copy()
            _same(compiled(jitted), fn(eager))
            _same(jitted, eager)
        assert compiled.stats()["eager_calls"] == {}, compiled.stats()


# --- results viewing results after writes apart from them (b0863c6) -----------------------
def _view_then_write_apart(x):
    v = x[:-1]
    x[-1] = 5.0
    return v, x


def test_a_view_of_an_argument_written_apart_stays_the_callers_view():
    """``v = x[:-1]; x[-1] = 5.0; return v, x``: NumPy's v views the caller's x. Since
    b0863c6 v was read again from the program's final x, a new array: the caller's
    ``v[0] = ...`` no longer reached x. Views of arguments are argument_views' to make."""
    compiled = jit(_view_then_write_apart)
    for n in (5, 5, 4):
        x = np.arange(n * 3.0).reshape(n, 3)
        eager, jitted = x.copy(), x.copy()
        got, want = compiled(jitted), _view_then_write_apart(eager)
        _same(got, want)
        _same(jitted, eager)
        assert got[1] is jitted and np.shares_memory(got[0], jitted)
    assert compiled.stats()["eager_calls"] == {}, compiled.stats()


def _fit_every(x, num_iterations, print_every=10):
    w, costs = np.zeros(3), []
    for i in range(num_iterations):
        w = w - 0.1 * (w - x)
        if i % print_every == 0:
            costs.append(float(np.sum((w - x) ** 2)))
    return w, costs


def test_a_period_argument_selects_a_slice_for_every_count():
    """``if i % print_every == 0`` with ``print_every`` an int argument (a constant of the
    trace): the test was no period (``index_period`` took constants only), so the count
    was pinned, one compile per count (eager past max_variants). Now the period is read
    from the argument when the trace runs (another value is another trace, as before)."""
    x = np.arange(3.0)
    compiled = jit(_fit_every)
    for arguments in ((x, 20), (x, 23), (x, 31), (x, 32, 7), (x, 45, 7), (x, 4, 7)):
        _same(compiled(*arguments), _fit_every(*arguments))
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == 3, stats


def test_a_count_too_small_for_the_loop_leaves_the_next_count_a_dim():
    """fit(x, 13), fit(x, 2), fit(x, 100), ...: the count 2 (too few trips to capture the
    loop) pinned the argument for good, so every count after it compiled a program of its
    own (eager past max_variants). It is a constant of that trace only now."""
    x = np.arange(3.0)
    compiled = jit(_fit, cache="memory")
    for count in (13, 2, 100, 3, 57):
        _same(compiled(x, count), _fit(x, count))
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] == 3, stats


def _views_of_a_view(x):
    a = x * 2
    b = a[:2]
    c = b[1:]
    a[-1] = 0.0
    return c, b


def test_views_of_one_array_written_apart_share_memory_as_numpy_s():
    """``c`` was read again after the write into ``a`` (its region not known apart) and
    ``b`` was not, so the two results viewed different values of ``a`` and came back
    sharing no memory where NumPy's ``c`` views ``b``."""
    compiled = jit(_views_of_a_view)
    for n in (5, 5, 4):
        x = np.arange(n * 3.0).reshape(n, 3)
        got, want = compiled(x), _views_of_a_view(x)
        _same(got, want)
        assert np.shares_memory(got[0], got[1])
    assert compiled.stats()["eager_calls"] == {}, compiled.stats()
