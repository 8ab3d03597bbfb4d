"""Python's min and max of traced NumPy scalars are selects: eager's result (NaN in either
place, ties, -0.0 against 0.0, ints) with no guard, so new data runs compiled."""

import numpy as np
import pytest

import tracejit


def _extremes(x):
    a, b, c = x[0], x[1], x[2]
    return min(a, b), max(a, b), min(a, b, c), max(c, b, a), min(b, a)


VALUES = [[1.0, 2.0, 3.0], [2.0, 1.0, 0.5], [np.nan, 1.0, 2.0], [1.0, np.nan, 0.0],
          [-0.0, 0.0, 0.0], [0.0, -0.0, -0.0], [np.inf, -np.inf, np.nan], [5.0, 5.0, 5.0]]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_min_and_max_match_python_on_numpy_scalars(dtype):
    jitted = tracejit.jit(_extremes, cache=False)
    rows = [np.array(v, dtype=np.float64) for v in VALUES]
    if np.dtype(dtype).kind == "i":
        rows = [np.nan_to_num(row, nan=7, posinf=9, neginf=-9) for row in rows]
    for row in rows:
        x = row.astype(dtype)
        want, got = _extremes(x), jitted(x)
        for w, g in zip(want, got):
            assert type(g) is type(w)
            assert np.array_equal(g, w, equal_nan=True) and np.signbit(g) == np.signbit(w)
    stats = jitted.stats()
    assert stats["traced_calls"] == 1 and not stats["side_exits"], stats


def test_mixed_types_keep_their_guard():
    def clamp(x):
        return min(x.sum(), 10.0)  # np.float64 or float, by the data

    jitted = tracejit.jit(clamp, cache=False)
    for x in (np.ones(3), np.full(3, 5.0), np.ones(3)):
        want, got = clamp(x), jitted(x)
        assert type(got) is type(want) and got == want
