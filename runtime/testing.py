"""Checking that compiled equals eager, for tracejit's tests and for users' own models.

``compare_results(actual, expected)`` returns ``None`` or a description of the first
difference (structure, shape, dtype, or values beyond the per-dtype tolerance).
"""

from __future__ import annotations

import numpy as np

from tracer import pytree

from .tensor import unwrap

# Per-dtype tolerances between compiled and eager results: transcendental functions are
# within a few ulp, reductions may add in another order.
TOLERANCES = {
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-11, 1e-13),
    np.dtype(np.float16): (1e-3, 1e-4),
}


def tolerance(dtype, rtol=None, atol=None):
    default_rtol, default_atol = TOLERANCES.get(np.dtype(dtype), (0.0, 0.0))
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def _plain(value):
    return unwrap(value)


def compare_results(actual, expected, rtol=None, atol=None):
    actual_leaves, actual_tree = pytree.flatten(actual)
    expected_leaves, expected_tree = pytree.flatten(expected)
    if actual_tree != expected_tree:
        return f"structure {actual_tree!r} != {expected_tree!r}"
    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        problem = compare_leaf(_plain(got), _plain(want), rtol, atol)
        if problem:
            return f"output leaf {index}: {problem}"
    return None


def compare_leaf(got, want, rtol=None, atol=None):
    if isinstance(want, (np.ndarray, np.generic)) or isinstance(got, (np.ndarray, np.generic)):
        got_array, want_array = np.asarray(got), np.asarray(want)
        if type(got) is not type(want) and not (
            isinstance(got, np.generic) and isinstance(want, np.generic)
        ):
            return f"type {type(got).__name__} != {type(want).__name__}"
        if got_array.dtype != want_array.dtype:
            return f"dtype {got_array.dtype} != {want_array.dtype}"
        if got_array.shape != want_array.shape:
            return f"shape {got_array.shape} != {want_array.shape}"
        relative, absolute = tolerance(want_array.dtype, rtol, atol)
        if want_array.dtype.kind in "fc":
            close = np.isclose(got_array, want_array, rtol=relative, atol=absolute,
                               equal_nan=True)
        else:
            close = got_array == want_array
        if not np.all(close):
            bad = np.argwhere(~np.asarray(close))
            where = tuple(int(i) for i in bad[0]) if bad.size else ()
            with np.errstate(all="ignore"):
                error = np.nanmax(np.abs(got_array.astype(float) - want_array.astype(float))) \
                    if want_array.size else 0.0
            return (f"values differ at {where}: {got_array[where]!r} != {want_array[where]!r} "
                    f"(max abs error {error:.3g}, {int((~np.asarray(close)).sum())} of "
                    f"{want_array.size} elements beyond rtol={relative}, atol={absolute})")
        return None
    if got != want and not (got != got and want != want):
        return f"{got!r} != {want!r}"
    return None
