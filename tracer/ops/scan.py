"""``cumsum`` and ``cumprod`` along the last axis: NumPy's running sums and products,
in NumPy's order.

``np.cumsum`` adds each element to the running sum before it, one after the other
(``np.add.accumulate``: no pairwise or vector reordering), so compiled code that adds in
that order (``codegen/scan.py``) returns NumPy's bits: a mask, ``searchsorted`` or ``if``
on a running sum decides as NumPy does, and an axis of any length takes O(n) work.
``np.cumprod`` multiplies the same way (``np.multiply.accumulate``): in another order two
float32 denormals underflow to 0 before meeting an inf (``inf * 1e-45`` is inf, ``inf *
(1e-45 * 1e-45)`` NaN), so only NumPy's order gives NumPy's bits on such data. The
NumPy layer (``tracejit.tracer.scans``) moves the axis last and casts to NumPy's
accumulator dtype first.

>>> cumsum(np.array([[1.0, 2.0, 3.0]])).tolist(), cumprod(np.array([2.0, 3.0])).tolist()
([[1.0, 3.0, 6.0]], [2.0, 6.0])
"""

from __future__ import annotations

import numpy as np

from ..abstract import AbstractArray
from ..primitives import Primitive, bind
from ..shapes import ShapeError
from .creation import iota
from .reductions import _prod_vjp, prod_p, sum_p
from .structural import flip, ndim_of, reshape, shape_of


def _rule(x):
    if not x.shape:
        raise ShapeError("a scan (cumsum, cumprod) scans an axis: a 0-d value has none")
    return AbstractArray(x.shape, x.dtype)


def _scan_primitive(name, numpy_scan, vjp):
    """A scan along the last axis in the operand's dtype: ``numpy_scan`` (``np.cumsum``,
    ``np.cumprod``) is its NumPy implementation, ``vjp`` its gradient rule."""
    return Primitive(name, "scan", impl=lambda x: numpy_scan(x, axis=-1, dtype=x.dtype),
                     abstract_eval=_rule, vjp=(vjp,))


def _vjp(g, x, out):
    # d out[j] / d x[i] = 1 for j >= i: the cotangent's running sum from the end
    last = (ndim_of(g) - 1,)
    return flip(cumsum(flip(g, last)), last)


cumsum_p = _scan_primitive("cumsum", np.cumsum, _vjp)


def cumsum(x):
    """The running sums of ``x`` along its last axis, in ``x``'s dtype."""
    return bind(cumsum_p, x)


def _cumprod_vjp(g, x, out):
    """The gradient of the triangle product that ``cumprod`` was composed from before it
    was a scan: running product ``k`` is the product of ``terms[..., :, k]``, ``x[i]`` for
    ``i <= k`` and 1 after, so zeros get ``prod``'s rule (the product of the others).
    O(n^2), as before; the NumPy layer keeps the axis under ``CUMSUM_LIMIT``."""
    n = shape_of(x)[-1]
    last = ndim_of(x) - 1
    upper = reshape(iota(n, np.int64, like=x), (n, 1)) <= reshape(iota(n, np.int64, like=x),
                                                                   (1, n))
    terms = np.where(upper, reshape(x, shape_of(x) + (1,)), np.asarray(1, x.dtype))
    g_terms = _prod_vjp(g, terms, bind(prod_p, terms, axes=(last,), keepdims=False),
                        (last,), False)
    return bind(sum_p, np.where(upper, g_terms, np.asarray(0, g_terms.dtype)),
                axes=(last + 1,), keepdims=False)


cumprod_p = _scan_primitive("cumprod", np.cumprod, _cumprod_vjp)


def cumprod(x):
    """The running products of ``x`` along its last axis, in ``x``'s dtype."""
    return bind(cumprod_p, x)
