"""``np.pad``'s index modes ``'edge'``, ``'reflect'``, ``'symmetric'`` and ``'wrap'``: each
output position along an axis reads one input position, so each padded axis is one
gather at indices computed from an iota (``numpy_api.pad`` keeps the constant mode; its
per-axis constants, ``constant_values=((0, 0), (1, 1))``, are filled here). The statistic
modes ``'maximum'``, ``'minimum'`` and ``'mean'`` concatenate each axis' statistic.

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
# the statistic modes, over the whole axis (stat_length=None): NumPy's functions
STATISTICS = {"maximum": np.max, "minimum": np.min, "mean": np.mean}


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


def pad_by_statistic(array, widths, mode, stat_length=None):
    """``array`` padded by ``widths`` with each axis' ``mode`` statistic (np.pad's
    'maximum', 'minimum', 'mean'). NumPy pads axis by axis, each statistic taken along its
    axis over the array as padded so far (the earlier axes' pads included, the corners
    too), and rounds a mean into an integer dtype: so here.

    >>> import tracejit as tj
    >>> f = tj.jit(lambda x: np.pad(x, 1, mode="mean"), cache="memory")
    >>> f(np.array([[1.0, 2.0], [3.0, 5.0]]))[0]
    array([2.75, 2.  , 3.5 , 2.75])
    """
    if stat_length is not None:
        raise UnsupportedError(f"np.pad(mode={mode!r}, stat_length=...) is not supported; "
                               "the whole axis (stat_length=None) is")
    dtype = np.dtype(array.dtype)
    if dtype.kind not in "iuf":
        raise UnsupportedError(f"np.pad(mode={mode!r}) of {dtype} is not supported")
    result = array
    for axis, (before, after) in enumerate(widths):
        if before == 0 and after == 0:
            continue
        if ops.shape_of(result)[axis] == 0:  # a symbolic length compares under a guard
            raise as_numpy_would(ValueError(
                f"can't extend empty axis {axis} using modes other than 'constant' or "
                "'empty'"))
        statistic = STATISTICS[mode](result, axis=axis, keepdims=True)
        if dtype.kind in "iu":
            statistic = np.round(statistic).astype(dtype) if mode == "mean" else statistic
        parts = [_statistic_block(statistic, result, axis, before)] if before else []
        parts.append(result)
        if after:
            parts.append(_statistic_block(statistic, result, axis, after))
        result = np.concatenate(parts, axis=axis).astype(dtype, copy=False)
    if result is array:
        return array.copy()
    return result


def _statistic_block(statistic, array, axis, width):
    """``statistic`` (``array``'s, kept along ``axis``) repeated ``width`` times there."""
    shape = list(ops.shape_of(array))
    shape[axis] = width
    return np.broadcast_to(statistic, tuple(shape))


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


def constant_pairs(constant_values, ndim):
    """np.pad's ``constant_values`` as a ``(before, after)`` pair per axis, broadcast as
    NumPy's ``_as_pairs`` does (one number, one pair for every axis, or a pair per axis).

    >>> constant_pairs((0, 255), 2)
    [(np.int64(0), np.int64(255)), (np.int64(0), np.int64(255))]
    """
    values = np.array(constant_values)
    if values.ndim < 3 and values.size == 1:
        return [(values.ravel()[0],) * 2] * ndim
    if values.ndim < 3 and values.size == 2 and values.shape != (2, 1):
        return [tuple(values.ravel())] * ndim
    try:
        return [tuple(pair) for pair in np.broadcast_to(values, (ndim, 2))]
    except ValueError as error:
        raise as_numpy_would(error) from None


def fill_pad_regions(padded, shape, config, fills):
    """``padded`` (zeros around the array of ``shape``) with each axis' pad regions set to
    that axis' ``(before, after)`` fill. NumPy pads axis by axis, each pass covering the
    corners the earlier axes made, so at a corner the last axis' constant wins: so here."""
    result = padded
    ndim = len(shape)
    for axis, ((before, after, _), (low, high)) in enumerate(zip(config, fills)):
        if before == 0 and after == 0:
            continue
        offset = ops.iota(ops.shape_of(padded)[axis], np.int64, like=padded) - before
        offset = offset.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))
        result = np.where(offset < 0, low, np.where(offset >= shape[axis], high, result))
    return result
