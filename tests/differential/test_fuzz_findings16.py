"""Findings of the round-16 differential fuzzer (``tests/differential/fuzz.py``: loops over a
dynamic length, writes through views, in-place updates, mixed dtypes, NaN and odd layouts):
each a minimal program, eager NumPy against ``jit`` over calls that reach compiled code,
with the arguments compared afterwards.
"""

import numpy as np
from real_model_checks import run_calls


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
