"""``cumsum`` along the last axis: NumPy's running sum, added in NumPy's order.

``np.cumsum`` adds each element to the running sum before it, one after the other
(``np.add.accumulate``: no pairwise or vector reordering), so compiled code that adds in
that order (``codegen/scan.py``) returns NumPy's bits: a mask, ``searchsorted`` or ``if``
on a running sum decides as NumPy does, and an axis of any length takes O(n) work. The
NumPy layer (``tracejit.tracer.scans``) moves the axis last and casts to NumPy's
accumulator dtype first.

>>> cumsum(np.array([[1.0, 2.0, 3.0]])).tolist()
[[1.0, 3.0, 6.0]]
"""

from __future__ import annotations

import numpy as np

from ..abstract import AbstractArray
from ..primitives import Primitive, bind
from ..shapes import ShapeError
from .structural import flip, ndim_of


def _rule(x):
    if not x.shape:
        raise ShapeError("cumsum scans an axis: a 0-d value has none")
    return AbstractArray(x.shape, x.dtype)


def _vjp(g, x, out):
    # d out[j] / d x[i] = 1 for j >= i: the cotangent's running sum from the end
    last = (ndim_of(g) - 1,)
    return flip(cumsum(flip(g, last)), last)


cumsum_p = Primitive(
    "cumsum",
    "scan",
    impl=lambda x: np.cumsum(x, axis=-1, dtype=x.dtype),
    abstract_eval=_rule,
    vjp=(_vjp,),
)


def cumsum(x):
    """The running sums of ``x`` along its last axis, in ``x``'s dtype."""
    return bind(cumsum_p, x)
