"""A captured loop whose gather gets an id past the table at a later trip
(``out[t] = x[idx[t]]``), eager vs ``jit``.

NumPy raises its ``IndexError`` at that trip, after writing the earlier trips into
``out``; a jit call must raise the same error and leave ``out`` as eager does, whether the
bad id comes on the call that traces a new length (the loop's later trips run from the
trace) or on a compiled one. Such a call is the user's error, not tracejit's: every later
valid call at that length compiles. Lengths 1, 2 and primes, negative ids (valid down to
``-len(x)``), float32/float64 tables with NaN.
"""

import numpy as np
import pytest
from real_model_checks import no_internal_errors, run_calls


def gather_rows(x, idx, out):
    for t in range(idx.shape[0]):
        out[t] = x[idx[t]] * 2
    return out


def gather_and_total(x, idx):
    total = x[0] * 0
    for t in range(idx.shape[0]):
        total = total + x[idx[t]]
    return total


def table(dtype, rows=5):
    x = np.arange(rows * 3, dtype=dtype).reshape(rows, 3)
    x[2, 1] = np.nan
    return x


def ids_calls(dtype, make):
    x = table(dtype)
    sequences = [
        [0, 1, 2, 3, 4, 1],        # traces
        [0, 1, 2, 3, 9, 1, 2],     # a new length: past the table at trip 4
        [1, 1, 2, 3, 1, 1, 2],     # valid, that length: compiles
        [1, 1, 2, 3, 1, -5, 2],    # -5 is row 0
        [1, 1, 2, 3, 1, -6, 2],    # compiled: past the table at trip 5
        [4, 3, 2, 1, 0, 4, 3],
        [2] * 13,
        [3, 5, 0] + [0] * 10,      # at trip 1
        [7],                       # a single trip, bad
        [4, 0],
    ]
    return [make(x, np.array(ids)) for ids in sequences]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_index_error_part_way_through_a_loop_leaves_later_calls_compiled(dtype):
    f = run_calls(gather_rows, ids_calls(dtype, lambda x, ids: (x, ids,
                                                                np.zeros((len(ids), 3), dtype))))
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] > 0, f.explain()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_index_error_in_a_carried_total_leaves_later_calls_compiled(dtype):
    f = run_calls(gather_and_total, ids_calls(dtype, lambda x, ids: (x, ids)))
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] > 0, f.explain()
