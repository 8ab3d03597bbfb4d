"""``np.nan_to_num``: NaN and the infinities replaced by finite numbers, written with
``where`` over ``isnan`` and comparisons, so it fuses, differentiates (zero gradient at
the replaced positions, as the constant there has none) and compiles.

Nielsen's cross-entropy cost writes ``np.sum(np.nan_to_num(-y * np.log(a) - (1 - y) *
np.log(1 - a)))``: ``0 * log(0)`` is NaN, replaced by 0.

>>> nan_to_num(np.array([np.nan, np.inf, -np.inf, 1.5])).tolist() == [
...     0.0, np.finfo(np.float64).max, np.finfo(np.float64).min, 1.5]
True
>>> nan_to_num(np.array([np.nan, -np.inf], np.float32), nan=-1.0, neginf=-9.0).tolist()
[-1.0, -9.0]
"""

from __future__ import annotations

import numpy as np

from .errors import UnsupportedError
from .ops import dtype_of
from .out_arguments import write_out
from .primitives import is_traced


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    dtype = np.dtype(dtype_of(x))
    if dtype.kind == "c":
        raise UnsupportedError("np.nan_to_num of complex arrays is not supported by tracejit")
    if dtype.kind != "f":  # integers and booleans hold no NaN or infinity: a copy
        result = np.copy(x)
    else:
        limits = np.finfo(dtype)
        result = x
        # the order of NumPy's own copyto calls: NaN, then +inf, then -inf
        for mask, value in ((np.isnan(x), nan),
                            (x == np.inf, limits.max if posinf is None else posinf),
                            (x == -np.inf, limits.min if neginf is None else neginf)):
            result = np.where(mask, _in_dtype(value, dtype), result)
    if not copy and (is_traced(x) or isinstance(x, np.ndarray)):
        result = write_out(x, result, "np.nan_to_num")
    # NumPy answers a 0-d input (np.nan_to_num(x[0])) with a NumPy scalar
    return result[()] if is_traced(result) and result.shape == () else result


def _in_dtype(value, dtype):
    """The replacement as NumPy's ``copyto`` casts it into ``x``'s dtype (1e300 into
    float32 is inf)."""
    if is_traced(value):
        return value.astype(dtype)
    with np.errstate(over="ignore"):
        return dtype.type(value)
