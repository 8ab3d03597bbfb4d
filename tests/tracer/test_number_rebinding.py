"""``n += v`` on a number (a NumPy scalar such as ``x.sum()``, or a Python int or float the
trace computed) rebinds ``n``: another name for the old value keeps it, and the type is
the one Python or NumPy's scalar arithmetic gives (``np.int64 += 0.5`` is an
``np.float64``). Eager vs ``jit`` over float32/float64, sizes 1, 2 and primes, NaN.
(An in-place update of the traced scalar once changed the alias too: a wrong answer.)
"""

import numpy as np
import pytest
from real_model_checks import run_calls


def alias_of_a_sum(x):
    total = x.sum()
    before = total
    total += 1
    total *= 2
    return total, before


def alias_of_an_argmax(x):
    position = x.argmax()
    first = position
    position += 0.5  # np.int64 += float: a new np.float64, first stays the int
    return position, first


def scalar_of_a_narrow_dtype(x):
    peak = x.max()
    kept = peak
    peak -= 1.5  # np.float32 - Python float stays float32 (NEP 50)
    return peak, kept


def running_totals(x):
    totals = []
    total = x[0].sum()
    for t in range(x.shape[0]):
        totals.append(total)
        total += x[t].sum()
    return total, totals[0], totals[-1]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("model", [alias_of_a_sum, alias_of_an_argmax, scalar_of_a_narrow_dtype,
                                   running_totals])
def test_an_augmented_number_leaves_its_aliases_alone(model, dtype):
    rng = np.random.default_rng(65)
    sets = []
    for n in (1, 2, 7, 13):
        x = rng.standard_normal((n, 3)).astype(dtype)
        if n == 7:
            x[2, 2] = np.nan
        sets.append((x,))
    f = run_calls(model, sets, rtol=1e-5, atol=1e-5)
    assert not f.stats()["eager_calls"], f.explain()
