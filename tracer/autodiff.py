"""Reverse-mode differentiation from the op table's VJP rules.

``cotangent`` is the one place a VJP rule is applied: the eager autograd tape
(``runtime.autograd``) and differentiation of traced graphs both call it, so gradients
are the same code in eager and compiled mode.

>>> import numpy as np
>>> from tracer.ops import multiply_p
>>> x, y = np.array([1.0, 2.0]), np.array(3.0)
>>> cotangent(multiply_p, 1, np.ones(2), (x, y), x * y, {}).item()
3.0
"""

from __future__ import annotations

from .abstract import abstractify
from .ops import broadcast_to, cast_p, reduce_sum, reshape, shape_of
from .primitives import bind


def needs_gradient(value):
    """Only floating-point arrays carry gradients (PyTorch's rule); Python scalars never."""
    aval = abstractify(value)
    return not aval.weak and aval.dtype.kind in "fc"


def sum_to_shape(value, shape):
    """Sum a broadcast cotangent back to ``shape`` (the transpose of broadcasting)."""
    value_shape = shape_of(value)
    if tuple(value_shape) == tuple(shape):
        return value
    lead = len(value_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, dim in enumerate(shape) if dim == 1 and value_shape[lead + i] != 1
    )
    if axes:
        value = reduce_sum(value, axes)
    value = reshape(value, shape)
    return broadcast_to(value, shape)


def cotangent(prim, argnum, g, primals, out, params):
    """The cotangent of ``primals[argnum]`` given the output's cotangent ``g``, or ``None``."""
    primal = primals[argnum]
    rule = prim.vjp_rule(argnum) if prim.vjp is not None else None
    if rule is None or not needs_gradient(primal):
        return None
    value = sum_to_shape(rule(g, *primals, out=out, **params), shape_of(primal))
    dtype = primal.dtype
    if getattr(value, "dtype", None) != dtype:
        value = bind(cast_p, value, dtype=dtype)
    return value
