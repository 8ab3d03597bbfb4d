"""Findings of round 18c (hostile inputs for the newest features: data-dependent loop exits,
random draws, loops writing through a carried view; bad inputs, the disk cache): each a
minimal program or case, eager NumPy against ``jit``, or the cache and its command against
what a user is promised.
"""

import io

import numpy as np
from real_model_checks import compiled_some, no_internal_errors, run_calls

import tracejit as tj
from tracejit.runtime import cli


# --- the cache command on entries holding captured loops --------------------------------
def halve_until_small(x):
    y = x.copy()
    while np.abs(y).sum() > 1.0:
        y = y / 3.0
    return y


def run_command(*argv):
    out = io.StringIO()
    status = cli.main(list(argv), out)
    return status, out.getvalue()


def test_the_cache_command_reads_entries_of_programs_with_loops(tmp_path, monkeypatch):
    """A program with a captured loop is stored as its IR plus pieces, each with its own
    kernels and object code (``serialize._loop_program_to_json``). ``tracejit cache verify``
    looked for one object code in the program and called every such entry corrupt ('object',
    exit status 1); ``cache show`` raised KeyError 'kernels'."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    f = tj.jit(halve_until_small, cache=True)
    for _ in range(2):
        x = np.arange(1.0, 6.0) * 10
        np.testing.assert_allclose(f(x), halve_until_small(x))
    assert f.stats()["compiled_calls"] >= 1, f.explain()
    status, text = run_command("cache", "verify", "--cache-dir", str(tmp_path))
    assert status == 0 and "corrupt" not in text and "1 of 1 entries ok" in text, text
    for flags in ([], ["--ir", "--guards", "--source"], ["--llvm", "--asm"]):
        status, text = run_command("cache", "show", "halve_until_small", *flags,
                                   "--cache-dir", str(tmp_path))
        assert status == 0 and "kernel(s): k" in text, text
    status, text = run_command("cache", "show", "halve_until_small", "--json",
                               "--cache-dir", str(tmp_path))
    assert status == 0 and '"kernels": [' in text and '"name": "k' in text, text


# --- a data-dependent if before the exit test of a captured loop ------------------------
def branch_then_exit(x):
    y = x.copy()
    for _ in range(20):
        y = y * 0.5
        if y.sum() > 50:     # a value guard in the body, before the exit test
            y = y * 0.0
        if y.max() < 0.1:
            break
    return y


def raise_then_exit(x):
    y = x.copy()
    for _ in range(20):
        y = y * 1.5
        if y.sum() > 50:
            raise ValueError("diverged")
        if np.abs(y).max() < 0.1:
            break
        y = y - 1
    return y


def test_a_value_guard_before_the_exit_test_compiles():
    """The loop carries the rounding bound of ``y`` for its decisions. The exit test's check
    made that bound first, after the body's ``if``, and the ``if``'s margin, placed before
    its guard, read it there: the body used a value before its definition (VerifyError
    while compiling, then KeyError in the interpreted loop: an internal error at every call,
    run eagerly). ``loop_bounds._defined_before_use`` moves such equations up."""
    for model, values in ((branch_then_exit, (2.0, 3.0, 0.05, 90.0)),
                          (raise_then_exit, (2.0, 1.9, 0.05, 5.0))):
        f = run_calls(model, [(np.full(3, value),) for value in values])
        no_internal_errors(f)
        compiled_some(f)


# --- exit loops writing through a view of a local ---------------------------------------
def thirds_through_a_view(x):
    base = np.ones((3, 2))   # nothing in the loop reads x: trip 0 runs on NumPy values
    tail = base[1:]
    while np.abs(tail).max() > 0.01:
        tail[...] = tail / 3
    return base


def halves_through_a_reversed_view(x):
    base = x * 1.0
    view = base[::-1]
    for shift in range(2):
        view += shift
        for _ in range(x.shape[0]):
            view *= 0.5
            if not np.max(np.abs(view), initial=0.0) > 1.0:
                break
        else:
            base[0] = -1.0
    return base


def test_exit_loops_writing_through_a_view_land_in_the_base():
    """Exit loops (one nested in a constant loop) writing in place through a view of a
    local: NumPy's base holds the last trip's values."""
    f = run_calls(halves_through_a_reversed_view,
                  [(np.arange(2.0 * n).reshape(n, 2) * 3,) for n in (4, 5, 7)])
    no_internal_errors(f)


def thirds_beside_a_traced_count(x):
    base = np.ones(3)
    tail = base[1:]
    count = x * 0
    while np.abs(base).max() > 0.01:
        base /= 3
        count = count + 1
    return tail, count


def test_an_exit_loop_on_numpy_values_writes_through_its_view():
    """Nothing the loop carries is traced: captured (since bea3849) its trips after the
    first wrote through ``tail`` as a traced constant and never reached ``base`` (1/3 where
    NumPy's has 1/243). A loop carrying NumPy's own array that shares memory with another
    name runs as written (``while_loops._shares_numpy_memory``), with a traced carry beside
    it too."""
    run_calls(thirds_through_a_view, [(np.zeros(2),)] * 2)
    run_calls(thirds_beside_a_traced_count, [(np.zeros(2),)] * 2)


# --- in-place writes through a view of an empty NumPy array -----------------------------
def scaled_into_an_empty_view(w):
    buffer = np.zeros(w.shape[1:] + (2,))
    view = buffer.T
    for t in range(w.shape[0]):
        view += w[t] * 0.5
        view *= 0.75
    return buffer


def test_writes_through_a_view_of_an_empty_array_are_no_internal_error():
    """``np.zeros((0, 2)).T += ...`` in a loop: finding which slice of its root a view is
    divided the offset by the root's zero length (ZeroDivisionError while tracing: an
    internal error, run eagerly). An empty root's views start at 0."""
    f = run_calls(scaled_into_an_empty_view,
                  [(np.ones((n, 0)),) for n in (1, 3, 3)])
    no_internal_errors(f)


# --- np.ascontiguousarray of an argument NumPy holds in another layout --------------------
def first_set_in_a_contiguous_copy(v):
    contiguous = np.ascontiguousarray(v)
    contiguous[0] = 7.0
    return contiguous.sum()


def test_a_contiguous_copy_of_a_reversed_argument_is_a_copy():
    run_calls(first_set_in_a_contiguous_copy, [lambda: (np.arange(6.0)[::-1],)] * 2)
