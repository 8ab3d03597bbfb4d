"""``np.convolve`` and ``np.correlate`` of 1-d arrays, composed as NumPy computes them
(listed in ``FUNCTIONS``, which ``numpy_api`` joins).

NumPy (``_pyarray_correlate``) slides the shorter array along the longer one, which it pads
with zeros: none for ``mode="valid"``, ``n // 2`` before and ``n - n // 2 - 1`` after for
``"same"``, ``n - 1`` on each side for ``"full"`` (``n`` the shorter length); each output
is a dot product. ``np.correlate`` swaps its operands when the second is longer and then
reverses the result; ``np.convolve`` puts the longer first and correlates with the
shorter one reversed. Here the windows of the padded array (``sliding_window_view``) are
multiplied by the shorter array, so lengths stay symbolic: a moving average
``np.convolve(x, np.ones(w) / w, "valid")`` compiles once per bucket of ``len(x)``.

>>> import tracejit as tj
>>> f = tj.jit(lambda x: np.convolve(x, [1.0, 2.0]), cache="memory")
>>> f(np.array([1.0, 0.0, 3.0]))
array([1., 2., 3., 6.])
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .primitives import as_array, current_context

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of

_MODES = {"valid": 0, "same": 1, "full": 2}


def _mode(mode, what):
    if isinstance(mode, str) and mode in _MODES:
        return _MODES[mode]
    if isinstance(mode, (int, np.integer)) and not isinstance(mode, bool) and 0 <= mode <= 2:
        return int(mode)
    raise UnsupportedError(f"np.{what}(mode={mode!r}) is not supported ('valid', 'same' "
                           "and 'full' are)")


def _vectors(a, v, what):
    """``a`` and ``v`` as 1-d arrays of their common dtype (NumPy's ``ndmin=1``)."""
    a, v = as_array(a), as_array(v)
    a = ops.reshape(a, (1,)) if ndim_of(a) == 0 else a
    v = ops.reshape(v, (1,)) if ndim_of(v) == 0 else v
    if ndim_of(a) != 1 or ndim_of(v) != 1:
        raise as_numpy_would(ValueError("object too deep for desired array"))
    dtype = np.result_type(np.dtype(dtype_of(a)), np.dtype(dtype_of(v)))
    # Integer dot products wrap in their own width in NumPy; bool ones are a logical or.
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)):
        raise UnsupportedError(f"np.{what} of {dtype} arrays is not supported by tracejit "
                               "(float32, float64 and int64 are)")
    return a.astype(dtype) if dtype_of(a) != dtype else a, (
        v.astype(dtype) if dtype_of(v) != dtype else v)


def _slide(long, short, mode, via):
    """NumPy's ``_pyarray_correlate`` of ``long`` (not shorter than ``short``)."""
    n = shape_of(short)[0]
    left, right = {0: (0, 0), 1: (n // 2, n - n // 2 - 1), 2: (n - 1, n - 1)}[mode]
    padded = np.pad(long, ((left, right),)) if mode else long
    windows = np.lib.stride_tricks.sliding_window_view(padded, n)
    product = windows @ short
    _note_order(product, via)
    return product


def _note_order(product, via):
    """NumPy sums each output by its own dot product, not by the BLAS call a matmul of the
    windows would make: the product's location says so, and ``margin_rules`` keeps its
    rounding bound (as for ``np.einsum``)."""
    var = getattr(product, "ir_var", None)
    locations = getattr(current_context(), "locations", None)
    if var is not None and locations is not None and var.name in locations:
        locations[var.name] = replace(locations[var.name], via=via)


def correlate(a, v, mode="valid"):
    mode = _mode(mode, "correlate")
    a, v = _vectors(a, v, "correlate")
    if shape_of(a)[0] == 0:
        raise as_numpy_would(ValueError("first array argument cannot be empty"))
    if shape_of(v)[0] == 0:
        raise as_numpy_would(ValueError("second array argument cannot be empty"))
    if shape_of(a)[0] < shape_of(v)[0]:
        return ops.flip(_slide(v, a, mode, "np.correlate"), (0,))
    return _slide(a, v, mode, "np.correlate")


def convolve(a, v, mode="full"):
    mode = _mode(mode, "convolve")
    a, v = _vectors(a, v, "convolve")
    if shape_of(v)[0] > shape_of(a)[0]:
        a, v = v, a
    if shape_of(a)[0] == 0:
        raise as_numpy_would(ValueError("a cannot be empty"))
    if shape_of(v)[0] == 0:
        raise as_numpy_would(ValueError("v cannot be empty"))
    return _slide(a, ops.flip(v, (0,)), mode, "np.convolve")


FUNCTIONS = {
    np.convolve: convolve,
    np.correlate: correlate,
}
