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
