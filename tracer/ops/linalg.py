"""``matmul`` with NumPy's rules: 1-D operands are promoted and the axis removed again,
leading (batch) dimensions broadcast.

>>> matmul(np.ones((4, 2, 3)), np.ones(3)).shape
(4, 2)
"""

from __future__ import annotations

import numpy as np

from ..abstract import AbstractArray
from ..primitives import Primitive, bind
from ..shapes import ShapeError, broadcast_shapes
from .structural import ndim_of, reshape, shape_of, swapaxes


def _matmul_rule(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: Input operand does not have enough dimensions")
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
            f"signature (n?,k),(k,m?)->(n?,m?) (size {b_shape[-2]} is different from "
            f"{a_shape[-1]})"
        )
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    shape = batch + (a_shape[-2],) * (a.ndim > 1) + (b_shape[-1],) * (b.ndim > 1)
    dtype = np.matmul.resolve_dtypes((a.dtype, b.dtype, None))[-1]
    return AbstractArray(shape, dtype)


def _matmul_vjp_a(g, a, b, out):
    if ndim_of(a) == 1 and ndim_of(b) == 1:
        return g * b
    if ndim_of(b) == 1:  # g has shape batch + (n,): an outer product per batch entry
        return reshape(g, shape_of(g) + (1,)) * b
    if ndim_of(a) == 1:  # a was promoted to (1, k): g lost that axis
        g = reshape(g, shape_of(g)[:-1] + (1,) + shape_of(g)[-1:])
    grad = matmul(g, swapaxes(b, -1, -2))
    return reshape(grad, shape_of(grad)[:-2] + shape_of(a)) if ndim_of(a) == 1 else grad


def _matmul_vjp_b(g, a, b, out):
    if ndim_of(a) == 1 and ndim_of(b) == 1:
        return g * a
    if ndim_of(a) == 1:  # g has shape batch + (m,): a[:, None] * g[..., None, :]
        return reshape(a, shape_of(a) + (1,)) * reshape(
            g, shape_of(g)[:-1] + (1,) + shape_of(g)[-1:]
        )
    if ndim_of(b) == 1:  # b was promoted to (k, 1): g lost that axis
        g = reshape(g, shape_of(g) + (1,))
    grad = matmul(swapaxes(a, -1, -2), g)
    return reshape(grad, shape_of(grad)[:-2] + shape_of(b)) if ndim_of(b) == 1 else grad


matmul_p = Primitive(
    "matmul",
    "matmul",
    impl=np.matmul,
    abstract_eval=_matmul_rule,
    vjp=(_matmul_vjp_a, _matmul_vjp_b),
)


def matmul(a, b):
    return bind(matmul_p, a, b)
