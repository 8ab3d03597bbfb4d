"""``np.diagflat`` and the vector case of ``np.diag``: a vector laid on the ``k``-th
diagonal of a square matrix, written as ``where`` over the grid's column-minus-row offsets
(``diagonal_offsets``, which ``np.eye`` and ``np.tri`` read too), so it fuses,
differentiates and keeps a symbolic length.

The nnfs book's softmax backward builds each sample's Jacobian as
``np.diagflat(single_output) - np.dot(single_output, single_output.T)``. ``np.fill_diagonal``
(a distance matrix's self-distances in t-SNE and n-body code) writes the same ``where`` into
the array.

>>> diagflat(np.array([[1.0], [2.0]])).tolist()
[[1.0, 0.0], [0.0, 2.0]]
>>> diag(np.array([1, 2]), k=-1).tolist()
[[0, 0, 0], [1, 0, 0], [0, 2, 0]]
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .dims import SymInt
from .errors import UnsupportedError, as_numpy_would
from .ops import ndim_of
from .primitives import is_traced
from .result_identity import note_numpy_result
from .shapes import normalize_axis


def diagflat(v, k=0):
    k = operator.index(k)
    flat = np.ravel(v)
    size = flat.shape[0] + abs(k)
    values = np.pad(flat, (0, abs(k))) if k else flat
    # (i, i + k) holds v[i]: read along the rows for k >= 0, along the columns below
    values = values[:, None] if k >= 0 else values[None, :]
    zero = np.zeros((), dtype=values.dtype)
    return np.where(diagonal_offsets(size, size, flat) == k, values, zero)


def diag(v, k=0):
    """``np.diag``: a vector laid on a diagonal, or a matrix's diagonal."""
    if ndim_of(v) == 2:
        return diagonal(v, k)
    if ndim_of(v) != 1:
        raise as_numpy_would(ValueError("Input must be 1- or 2-d."))
    return diagflat(v, k)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """``np.diagonal``: the two axes gathered at ``(i, i + offset)``, the diagonal last;
    a read-only result, as NumPy's view is. Its length is a dim expression (a min of two
    symbolic dims compares them under a guard)."""
    offset = operator.index(offset)
    ndim = ndim_of(a)
    if ndim < 2:
        raise as_numpy_would(ValueError("diag requires an array of at least two dimensions"))
    axis1, axis2 = normalize_axis(axis1, ndim), normalize_axis(axis2, ndim)
    if axis1 == axis2:
        raise as_numpy_would(ValueError("axis1 and axis2 cannot be the same"))
    moved = np.moveaxis(a, (axis1, axis2), (-2, -1))
    rows, cols = moved.shape[-2:]
    if offset >= 0:
        length = min(rows, cols - offset)
    else:
        length = min(rows + offset, cols)
    length = max(length, 0)
    steps = ops.iota(length, np.int64, like=a)
    result = moved[..., steps + max(-offset, 0), steps + max(offset, 0)]
    from .numpy_api import view_without_steps  # cycle: numpy_api imports this module

    view_without_steps(a, result)  # NumPy's is a view: a write into a shows in it
    if is_traced(result):
        result.readonly = True
        if is_traced(a):
            # returned, it is NumPy's view of the caller's array (or of the array the
            # call made, t = x @ x.T; return t, t.diagonal()), made at the call
            note_numpy_result(result, a, "diagonal", (offset, axis1, axis2))
    return result


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        raise UnsupportedError("np.trace(..., out=...) is not supported; assign the result")
    return np.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diagonal_offsets(n, m, like):
    """``col - row`` over an ``n`` x ``m`` grid (``m`` defaults to ``n``); a symbolic
    size makes the iotas symbolic."""
    m = n if m is None else m
    if like is None:
        like = next((size for size in (n, m) if isinstance(size, SymInt)), None)
    row = ops.reshape(ops.iota(n, np.int64, like=like), (n, 1))
    col = ops.reshape(ops.iota(m, np.int64, like=like), (1, m))
    return col - row


def fill_diagonal(a, val, wrap=False):
    """``np.fill_diagonal(a, val)`` on a tracejit array: ``a[i, i] = val`` for ``i`` below
    both dims, in place. A matrix and one value (a scalar or a 0-d array); NumPy's cycling of
    a longer ``val`` along the diagonal, a tall matrix's wrapped diagonals and n-d arrays are
    not traced."""
    if isinstance(a, np.ndarray):
        raise UnsupportedError("np.fill_diagonal of a NumPy array that is not a buffer of this "
                               "function; fill an array it creates")
    if ndim_of(a) != 2:
        raise UnsupportedError("np.fill_diagonal of an array that is not 2-d is not supported")
    if ndim_of(val) != 0:
        raise UnsupportedError("np.fill_diagonal with an array of values is not supported; "
                               "pass one value")
    rows, columns = a.shape
    if wrap and not (isinstance(rows, int) and isinstance(columns, int) and rows <= columns):
        raise UnsupportedError("np.fill_diagonal(..., wrap=True) of a tall matrix is not "
                               "supported")
    # NumPy assigns through a.flat: the value is cast to a's dtype as an assignment casts
    value = val.astype(a.dtype) if is_traced(val) else np.asarray(val).astype(a.dtype)
    updated = np.where(diagonal_offsets(rows, columns, None) == 0, value, a)
    if hasattr(a, "_update"):  # a tracer: every name for it sees the write
        a._update(updated)
    else:  # a Tensor: a differentiable assignment
        a[...] = updated
