"""Findings of round 17 (hostile inputs for what changed recently: ``np.cumsum`` as a scan,
result identity, lists and dicts a captured loop fills and returns, loops sharing one
program across int offsets, log-space arithmetic with infinities; later random draws and
while loops): each a minimal program, eager NumPy against ``jit`` over calls that reach
compiled code, with the arguments compared afterwards.
"""

import numpy as np
from real_model_checks import assert_same, no_internal_errors, run_calls

import tracejit as tj


def lengths(*counts, width=3):
    rng = np.random.default_rng(17)
    return [(rng.standard_normal((count, width)),) for count in counts]


# --- one array appended at every step of a captured loop ----------------------------------
def write_through_an_entry(x):
    hs = []
    for _ in range(x.shape[0]):
        hs.append(x)
    hs[-1][0] = 0.0          # into x: every entry is x
    return x.sum(axis=0)


def write_after_the_loop(x):
    h = x * 2.0
    hs = []
    for _ in range(x.shape[0]):
        hs.append(h)
    h[0] = 7.0               # every entry is h: all see it
    return hs[1] + 0.0, hs


def stored_at_every_key(x):
    h = x * 2.0
    hs = {}
    for t in range(x.shape[0]):
        hs[t] = h
    h[0] = 7.0
    return hs


def test_an_array_appended_at_every_step_is_that_array():
    """``hs.append(x)`` (or ``hs[t] = h``) at every trip: eager's entries are that one array,
    so a write into it after the loop, or through an entry, shows everywhere. A captured
    loop's entries were rows of its buffer, copies taken at each trip: ``hs[-1][0] = 0``
    left ``x`` alone and ``h[0] = 7`` reached no entry (wrong values from the second length
    on, once the loop was captured over a dynamic length)."""
    for model in (write_through_an_entry, write_after_the_loop, stored_at_every_key):
        run_calls(model, lengths(4, 5, 6, 9))


# --- arrays a captured loop's entries share with other names, written after the loop -----
def rows_then_the_array_scaled(x):
    hs = []
    for t in range(x.shape[0]):
        hs.append(x[t])      # views of x in NumPy
    x *= 2.0
    return hs


def rows_then_an_item_of_it(x):
    hs = []
    for t in range(x.shape[0]):
        hs.append(x[t])
    x[0] = 5.0               # KeyError 'i0' while tracing (a trip's view of x, still alive)
    return np.stack(hs)


def states_then_the_last_shifted(x):
    hs = []
    h = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        h = h + x[t]
        hs.append(h)         # the last entry is h itself
    h += 1.0
    return hs[-1] * 1.0, hs


def states_then_the_last_entry_shifted(x):
    hs = {}
    h = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t])
        hs[t] = h
    hs[x.shape[0] - 1][...] += 1.0   # into h
    return h


def test_a_write_into_what_loop_entries_share_shows_in_them():
    """NumPy's entries are views of ``x`` (``hs.append(x[t])``) or, for the last trip, the
    carried ``h`` itself: an in-place write after the loop into ``x``, ``h`` or an entry
    shows on the other side. The loop's entries were copies in its buffer: ``x *= 2`` and
    ``h += 1`` did not reach them, nor ``hs[-1][...] += 1`` the returned ``h`` (wrong values
    from the second length on), and ``x[0] = 5`` raised KeyError 'i0' while tracing. Such
    writes are refused now (those calls run eagerly, with the line and what to do)."""
    for model in (rows_then_the_array_scaled, rows_then_an_item_of_it,
                  states_then_the_last_shifted, states_then_the_last_entry_shifted):
        run_calls(model, lengths(4, 5, 6, 9))


# --- a list or dict one captured loop filled, changed by another loop ---------------------
def appended_by_two_loops(x):
    hs = []
    for t in range(x.shape[0]):
        hs.append(x[t] * 2.0)
    for t in range(x.shape[0]):
        hs.append(x[t] * 3.0)
    return hs


def doubled_by_a_second_loop(x):
    d = {}
    for t in range(x.shape[0]):
        d[t] = x[t] + 1.0
    for t in range(x.shape[0]):
        d[t] = d[t] * 2.0
    return d


def test_a_loop_filled_container_changed_by_another_loop_compiles():
    """The second loop's traced trips appended to (or set keys of) the first loop's list
    or dict, which no carry of theirs tracked: the entries were the trips' symbolic values,
    dropped with the trial ('VerifyError: return uses %45 before its definition'), or a
    KeyError while tracing; every call ran eagerly. That loop unrolls now."""
    for model in (appended_by_two_loops, doubled_by_a_second_loop):
        f = run_calls(model, lengths(4, 5, 6))
        no_internal_errors(f)


# --- a reshape NumPy copies, returned beside what it reshapes -------------------------------
def fortran_result_flattened(x):
    y = x.T * 2.0            # NumPy's y is in Fortran order: its reshape(-1) is a copy
    return y, y.reshape(-1), np.tanh(y).T.ravel()


def test_a_reshape_numpy_copies_is_no_view_of_the_result():
    """Compiled code computes ``y`` in C order, where ``y.reshape(-1)`` is a view, and the
    wrapper made that result a view of the ``y`` it returned: a write into one showed in
    the other, where NumPy's are separate arrays (the trace's own call was right)."""
    f = tj.jit(fortran_result_flattened, cache="memory")
    for _ in range(3):
        got = f(np.arange(6.0).reshape(2, 3))
        want = fortran_result_flattened(np.arange(6.0).reshape(2, 3))
        assert_same(got, want)
        assert np.shares_memory(got[0], got[1]) == np.shares_memory(want[0], want[1])
        for result in (*got, *want):
            result += 1.0        # a caller writing into each result in turn
        assert_same(got, want)
    assert f.stats()["compiled_calls"] >= 2, f.explain()


# --- a constant returned by a program with loops ------------------------------------------
def rows_scaled_twice_and_a_table(v):
    out = np.zeros(v.shape[0])
    for k in range(2):                  # unrolled: two captured loops
        for t in range(v.shape[0]):
            out[t] -= v[t] * k
    return out, np.full(3, -np.inf)


def test_a_constant_result_of_a_loop_program_is_a_new_writeable_array():
    """NativeLoopProgram returned a constant output as the graph's frozen array: read-only
    (a caller's write raised ValueError where NumPy's array takes it) and the same object
    at every call."""
    f = tj.jit(rows_scaled_twice_and_a_table, cache="memory")
    results = []
    for _ in range(3):
        got = f(np.arange(17.0))          # (at 5 the loops unroll: no loop program)
        assert_same(got, rows_scaled_twice_and_a_table(np.arange(17.0)))
        got[1][0] = 0.0                 # NumPy's result is writeable
        results.append(got[1])
    assert results[0] is not results[1] and results[1][1] == -np.inf
    assert f.stats()["compiled_calls"] >= 2, f.explain()
