"""``np.pad``'s index modes ``'edge'``, ``'reflect'``, ``'symmetric'`` and ``'wrap'``: each
output position along an axis reads one input position, so each padded axis is one
gather at indices computed from an iota (``numpy_api.pad`` keeps the constant mode).

The index maps are NumPy's, for any width (a width past the length keeps mirroring or
wrapping, as NumPy's repeated passes do): with ``j = i - before`` over the output,
edge clips ``j`` to ``[0, n - 1]``; wrap takes ``j mod n``; symmetric mirrors with period
``2n`` and reflect (its ``reflect_type='even'``) with period ``2n - 2``. The length may be
symbolic: the indices are traced arithmetic on it, so gradients flow back through the
gather.

>>> import tracejit as tj
>>> f = tj.jit(lambda x: np.pad(x, (2, 3), mode="reflect"), cache="memory")
>>> f(np.array([1.0, 2.0, 3.0]))
array([3., 2., 1., 2., 3., 2., 1., 2.])
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would

MODES = ("edge", "reflect", "symmetric", "wrap")


def pad_by_index(array, widths, mode, reflect_type="even"):
    """``array`` padded by ``widths`` (``(before, after)`` ints per axis) in ``mode``."""
    if reflect_type != "even":
        raise UnsupportedError(f"np.pad(mode={mode!r}, reflect_type={reflect_type!r}) is not "
                               "supported; reflect_type='even' is")
    result = array
    for axis, (before, after) in enumerate(widths):
        if before == 0 and after == 0:
            continue
        length = ops.shape_of(result)[axis]
        if length == 0:  # a symbolic length compares under a guard
            raise as_numpy_would(ValueError(
                f"can't extend empty axis {axis} using modes other than 'constant' or "
                "'empty'"))
        result = ops.gather(result, _source_indices(length, before, after, mode, result),
                            axis=axis)
    if result is array:
        return array.copy()
    return result


def _source_indices(length, before, after, mode, like):
    """Which input position each of the ``before + length + after`` outputs reads."""
    offset = ops.iota(length + before + after, np.int64, like=like) - before
    if mode == "edge":
        return np.minimum(np.maximum(offset, 0), length - 1)
    if mode == "wrap":
        return np.remainder(offset, length)
    period = 2 * length if mode == "symmetric" else 2 * length - 2
    if mode == "reflect" and length == 1:  # one element mirrors onto itself
        return offset * 0
    folded = np.remainder(offset, period)
    mirrored = period - folded - (1 if mode == "symmetric" else 0)
    return np.where(folded < length, folded, mirrored)
