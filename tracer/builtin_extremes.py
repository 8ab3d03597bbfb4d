"""Python's ``min`` and ``max`` of traced NumPy scalars, as a select instead of a branch.

``min(a, b)`` keeps ``a`` unless ``b < a`` (``max``: unless ``b > a``), so for NumPy
scalars of one dtype it is ``np.where(b < a, b, a)``: eager's result, NaN included (a NaN
first argument is kept, a NaN later one never wins), and no branch for the trace to guard.
Dynamic time warping's ``min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])`` took a side
exit on every new input before.

>>> import tracejit
>>> def cheapest(a, b, c):
...     return min(a.sum(), b.sum(), c.sum())
>>> jitted = tracejit.jit(cheapest, cache=False)
>>> calls = [[np.ones(2) * v for v in values] for values in ([3, 1, 2], [1, 2, 3], [2, 3, 0])]
>>> [float(jitted(*arrays)) for arrays in calls]
[2.0, 2.0, 0.0]
>>> jitted.stats()["compiled_calls"]
2
"""

from __future__ import annotations

import numpy as np

from .traced_array import Tracer, _is_numpy_scalar

_KEEPS = {min: np.less, max: np.greater}  # the later argument wins only if it compares so


def select_extreme(function, args, kwargs):
    """``function(*args)`` (``min`` or ``max``) as a traced select, or None: not two or
    more NumPy scalars of one dtype with a traced one among them (with mixed types the
    result's type depends on the values, so the trace keeps its guard)."""
    if function not in _KEEPS or kwargs or len(args) < 2 or not any(
            isinstance(arg, Tracer) for arg in args):
        return None
    if not all(_is_scalar(arg) for arg in args) or len({_dtype(arg) for arg in args}) != 1:
        return None
    wins = _KEEPS[function]
    chosen = args[0]
    for candidate in args[1:]:
        chosen = np.where(wins(candidate, chosen), candidate, chosen)[()]
    return chosen


def _is_scalar(value):
    if isinstance(value, Tracer):
        return not value.shape and _is_numpy_scalar(value)
    return isinstance(value, np.generic)


def _dtype(value):
    return np.dtype(value.dtype)
