"""Findings of the round-16 differential fuzzer (``tests/differential/fuzz.py``: loops over a
dynamic length, writes through views, in-place updates, mixed dtypes, NaN and odd layouts):
each a minimal program, eager NumPy against ``jit`` over calls that reach compiled code,
with the arguments compared afterwards.
"""

import numpy as np
from real_model_checks import no_internal_errors, run_calls


# --- a NumPy scalar takes no item writes -------------------------------------------------
def write_into_a_mean(x):
    total = x.mean().astype(np.float64)
    total[...] = 0
    return total


def write_into_an_element(x):
    first = x[0]
    first[...] = 1.0
    return x


def test_item_write_into_a_numpy_scalar_raises():
    """``s = x.mean().astype(np.float64); s[...] = 0``: ``s`` is a NumPy scalar and NumPy
    raises TypeError ('numpy.float64' object does not support item assignment); the trace
    wrote into it as into a 0-d array and returned 0.0."""
    arguments = [(np.arange(3.0),), (np.asarray(1.5, np.float32),)]
    run_calls(write_into_a_mean, arguments, repeats=3)
    run_calls(write_into_an_element, [(np.arange(3.0),)], repeats=3)


# --- np.round of a bool array to decimals --------------------------------------------------
def round_to_decimals(v):
    return np.round(v, 1), np.around(v, -1)


def test_round_of_bools_to_decimals_raises():
    """NumPy scales a bool array into an output of its own dtype (bool), so ``np.round(b,
    1)`` raises UFuncTypeError (cannot cast float64 to bool); compiled code returned the
    floats. Integers to positive decimals stay themselves."""
    run_calls(round_to_decimals, [(np.array([True, False, True]),)], repeats=3)
    run_calls(round_to_decimals, [(np.arange(-7, 8, 3, dtype=np.int32),),
                                  (np.linspace(-20.0, 20.0, 7),)], repeats=3)


# --- bounds a loop body's check computed and did not use ----------------------------------
def decayed_rows_then_a_count(x, w):
    h = np.zeros(w.shape[1])
    out = np.zeros(w.shape, dtype=np.float32)
    for t in range(w.shape[0]):
        if np.all(w[t] >= 0):
            h = h + 1
        out[t] = out[t - 1] * 0.5 + h
    g = np.zeros(x.shape[1])
    positive = 0
    for t in range(x.shape[0]):
        g = np.tanh(g + x[t])
        positive += int(np.all(g > 0))
    return out, positive


def test_loop_bounds_of_a_body_with_a_guard_compile():
    """The buffer write's select had bounds computed (the float32 row ``out[t - 1] * 0.5 +
    h``) but no check; left pending, they went in at the next guard's predicate, the body's
    ``if`` ahead of the row they read: 'VerifyError: uses %27 before its definition', the
    program never compiled and every call at that size ran eagerly."""
    rng = np.random.default_rng(0)
    arguments = [(np.asfortranarray(rng.integers(-20, 20, (5, 3))),
                  np.array([[-2.0, 2.0], [0.2, 2.0], [-2.5, 0.4]])),
                 (np.asfortranarray(rng.integers(-20, 20, (13, 13))),
                  rng.standard_normal((13, 13)) - 0.5)]
    f = run_calls(decayed_rows_then_a_count, arguments, repeats=2)
    no_internal_errors(f)


# --- np.arange with a dim and a float or NumPy-int bound -----------------------------------
def ranges_of_a_dim(x):
    n = x.shape[0]
    return (np.arange(1.0, n + 1), np.arange(0, x.shape[-1], 2.0), np.arange(np.float32(1), n),
            np.arange(np.int32(1), n), np.arange(0, n, 0.5), np.arange(n, 0.0, -1.0))


def test_arange_of_a_dim_with_float_bounds_compiles():
    """``np.arange(1.0, n + 1)`` (``np.average``'s weights, a positional encoding's
    ``np.arange(0, d, 2.0)``) with ``n`` a dim: ``n - 1.0`` became a traced float and the
    length a traced value that escaped the trace, so every call ran eagerly
    ('untraceable'). Whole-number floats now count as ints do, with NumPy's dtype (int
    bounds are int64 arrays to arange: ``np.arange(np.float32(1), n)`` is float64); a
    fractional step pins the dim."""
    arguments = [(np.ones((n, 6)),) for n in (3, 4, 5, 6, 1, 0)]
    for dynamic in ("auto", True):
        f = run_calls(ranges_of_a_dim, arguments, repeats=2, dynamic=dynamic)
        no_internal_errors(f)
        assert "untraceable" not in f.stats()["eager_calls"], f.explain()


# --- np.take with bool or float indices ----------------------------------------------------
def take_by_bools(x, y):
    return (np.take(x, y, axis=0), np.take(x, y), np.take(x[:, 0], y, mode="clip"),
            np.take(x, y, axis=1, mode="wrap"))


def take_by_floats(x, y):
    return np.take(x, y * 1.0, axis=0)


def test_take_casts_bool_indices_and_refuses_floats():
    """NumPy casts ``np.take``'s indices to intp under the 'safe' rule: bools are rows 0 and
    1, floats raise TypeError. The gather's shape rule raised its IndexError on bools (an
    internal error, eager on every call)."""
    x, y = np.arange(15.0).reshape(5, 3), np.array([True, False, True, True, False])
    arguments = [(x, y), (x[:4, :2].copy(), y[:4]), (x[:0], y[:0])]
    no_internal_errors(run_calls(take_by_bools, arguments, repeats=2))
    no_internal_errors(run_calls(take_by_floats, arguments[:2], repeats=2))


# --- a loop that writes through a view and reads the base (wrong answers) ------------------
def write_through_a_view_read_the_base(x):
    y = x.copy()
    ahead = y[1:]
    for t in range(ahead.shape[0]):
        ahead[t] = ahead[t] * 0.5 + y[t]
    return y


def write_into_the_base_read_a_view(x):
    y = x.copy()
    behind = y[:-1]
    for t in range(1, y.shape[0]):
        y[t] = behind[t - 1] * 2 + y[t]
    return y


def write_through_an_argument_view(x):
    ahead = x[1:]
    for t in range(ahead.shape[0]):
        ahead[t] = ahead[t] * 0.5 + x[t]
    return x.sum(axis=0)


def accumulate_into_a_row_view(x):
    out = np.zeros((2, x.shape[1]))
    total = out[0]
    for t in range(x.shape[0]):
        total += x[t] * t
    return out


def test_loop_writing_shared_memory_sees_its_writes():
    """``ahead = y[1:]`` before the loop, ``ahead[t] = ... y[t]`` in it: NumPy's ``y[t]`` is
    the row the previous trip wrote through ``ahead``. The captured body's proxy of
    ``ahead`` had no base, so ``y`` was read as it was before the loop: wrong values from
    the third row on, at every length the capture served (and the same for a write into
    ``y`` read through its view). ``total = out[0]; total += ...`` in the loop: compiled
    code returned ``out`` without the sums. Such a loop is unrolled now, as sharp_bits
    says."""
    for function in (write_through_a_view_read_the_base, write_into_the_base_read_a_view,
                     write_through_an_argument_view, accumulate_into_a_row_view):
        arguments = [(np.cos(np.arange(3.0 * n)).reshape(n, 3),) for n in (5, 6)]
        run_calls(function, arguments, repeats=1)


# --- a loop filling a dict's array while a view of it lives --------------------------------
def fill_a_dict_buffer_past_a_view(x):
    state = {"out": np.zeros(x.shape)}
    first = state["out"][0]
    for t in range(x.shape[0]):
        state["out"][t] = x[t] + first
    return state["out"]


# (was a strict xfail: the refused capture's trial left the dict's array at a var of the
# trial, 'VerifyError: ... uses %41 before its definition'; fixed in round 18b, b7bb846:
# containers' arrays written in a trial are restored after it)
def test_dict_buffer_filled_past_a_view_compiles():
    arguments = [(np.cos(np.arange(3.0 * n)).reshape(n, 3),) for n in (5, 6)]
    f = run_calls(fill_a_dict_buffer_past_a_view, arguments, repeats=2, dynamic=True)
    no_internal_errors(f)
