"""Integer-array indexing primitives: ``gather`` and its transpose ``scatter_add``.

``gather(x, indices, axis)`` is ``np.take(x, indices, axis)``: negative indices count
from the end, out-of-range ones raise. Multi-array indexing such as ``x[rows, cols]`` is
composed in ``tracejit.tracer.indexing`` as a gather over the flattened axes.

>>> gather(np.array([10, 20, 30]), np.array([2, -3]), axis=0).tolist()
[30, 10]
"""

from __future__ import annotations

import numpy as np

from ..abstract import AbstractArray
from ..primitives import Primitive, bind
from .structural import shape_of


def _check_indices(indices):
    if indices.dtype.kind not in "iu":
        raise IndexError(
            "arrays used as indices must be of integer (or boolean) type, "
            f"not {indices.dtype}"
        )


def _gather_rule(x, indices, axis):
    _check_indices(indices)
    return AbstractArray(x.shape[:axis] + indices.shape + x.shape[axis + 1 :], x.dtype)


gather_p = Primitive(
    "gather",
    "index",
    impl=lambda x, indices, axis: np.take(x, indices, axis=axis),
    abstract_eval=_gather_rule,
    vjp=(
        lambda g, x, indices, out, axis: scatter_add(g, indices, axis, shape_of(x)[axis]),
        None,
    ),
)


def gather(x, indices, axis):
    return bind(gather_p, x, indices, axis=axis)


def _scatter_add_rule(updates, indices, axis, size):
    _check_indices(indices)
    shape = updates.shape[:axis] + (size,) + updates.shape[axis + indices.ndim :]
    return AbstractArray(shape, updates.dtype)


def _scatter_add_impl(updates, indices, axis, size):
    updates, indices = np.asarray(updates), np.asarray(indices)
    shape = updates.shape[:axis] + (size,) + updates.shape[axis + indices.ndim :]
    out = np.zeros(shape, updates.dtype)
    np.add.at(out, (slice(None),) * axis + (indices,), updates)
    return out


scatter_add_p = Primitive(
    "scatter_add",
    "index",
    impl=_scatter_add_impl,
    abstract_eval=_scatter_add_rule,
    vjp=(lambda g, updates, indices, out, axis, size: gather(g, indices, axis), None),
)


def scatter_add(updates, indices, axis, size):
    """Zeros of length ``size`` along ``axis`` with ``updates`` added at ``indices``."""
    return bind(scatter_add_p, updates, indices, axis=axis, size=size)
