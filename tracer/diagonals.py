"""``np.diagflat`` and the vector case of ``np.diag``: a vector laid on the ``k``-th
diagonal of a square matrix, written as ``where`` over the grid's column-minus-row offsets
(``diagonal_offsets``, which ``np.eye`` and ``np.tri`` read too), so it fuses,
differentiates and keeps a symbolic length.

The nnfs book's softmax backward builds each sample's Jacobian as
``np.diagflat(single_output) - np.dot(single_output, single_output.T)``.

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
from .errors import UnsupportedError
from .ops import ndim_of


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
    """``np.diag`` of a vector; the diagonal of a matrix is not written here (eager)."""
    if ndim_of(v) != 1:
        raise UnsupportedError("np.diag of a matrix (its diagonal) is not supported by "
                               "tracejit yet; np.diag of a vector is")
    return diagflat(v, k)


def diagonal_offsets(n, m, like):
    """``col - row`` over an ``n`` x ``m`` grid (``m`` defaults to ``n``); a symbolic
    size makes the iotas symbolic."""
    m = n if m is None else m
    if like is None:
        like = next((size for size in (n, m) if isinstance(size, SymInt)), None)
    row = ops.reshape(ops.iota(n, np.int64, like=like), (n, 1))
    col = ops.reshape(ops.iota(m, np.int64, like=like), (1, m))
    return col - row
