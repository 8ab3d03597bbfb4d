"""Creation primitives: ``full`` and ``iota``; zeros, ones, arange and eye compose them.

They take no array operands; a ``like=`` value lends its handler, so ``np.zeros_like(t)``
on a Tensor is a Tensor and under the tracer a node with a symbolic shape.

>>> iota(4, np.int64).tolist()
[0, 1, 2, 3]
"""

from __future__ import annotations

import numpy as np

from ..abstract import AbstractArray
from ..primitives import Primitive, bind

full_p = Primitive(
    "full",
    "creation",
    impl=lambda shape, value, dtype: np.full(shape, value, dtype),
    abstract_eval=lambda shape, value, dtype: AbstractArray(shape, dtype),
    vjp=None,
)

iota_p = Primitive(
    "iota",
    "creation",
    impl=lambda length, dtype: np.arange(length, dtype=dtype),
    abstract_eval=lambda length, dtype: AbstractArray((length,), dtype),
    vjp=None,
)


def full(shape, value, dtype, like=None):
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    return bind(full_p, shape=tuple(shape), value=value, dtype=np.dtype(dtype), like=like)


def iota(length, dtype, like=None):
    """``[0, 1, ..., length - 1]`` (``np.arange(length)``)."""
    return bind(iota_p, length=length, dtype=np.dtype(dtype), like=like)
