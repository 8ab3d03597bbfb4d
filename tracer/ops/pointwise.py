"""Pointwise primitives: NumPy ufuncs with broadcasting, plus ``where`` and ``cast``.

Each primitive is a ufunc; its dtype rule is the ufunc's own (``resolve_dtypes``, with
Python scalars weak as in NumPy 2), so eager and traced code promote identically. ``erf``,
which NumPy lacks, is a ufunc-like NumPy implementation (``special.erf``) with
scipy.special.erf's dtype rule. VJP rules are written with NumPy operators and functions,
which dispatch back to these primitives when the values are tensors or tracer proxies.

>>> float(exp_p(0.0)), add_p(np.float32(1), 2.0).dtype, float(erf_p(0.5))
(1.0, dtype('float32'), 0.5204998778130465)
"""

from __future__ import annotations

import math

import numpy as np

from ..abstract import AbstractArray, result_dtype
from ..primitives import Primitive
from ..shapes import broadcast_shapes
from . import special


def ufunc_rule(ufunc):
    """The shape/dtype rule of a ufunc: broadcast shapes, NumPy's own dtype resolution."""

    def abstract_eval(*avals):
        shape = broadcast_shapes(*(aval.shape for aval in avals))
        all_weak = all(aval.weak for aval in avals)
        if all_weak:
            dtypes = tuple(aval.dtype for aval in avals)
        else:
            dtypes = tuple(aval.dtype_for_promotion() for aval in avals)
        try:
            resolved = ufunc.resolve_dtypes(dtypes + (None,))
        except TypeError as error:
            names = ", ".join(str(aval.dtype) for aval in avals)
            name = f"np.{ufunc.__name__}" if isinstance(ufunc, np.ufunc) else ufunc.__name__
            raise TypeError(f"{name} does not support dtypes ({names})") from error
        # Python scalars combined by operators stay Python scalars (``1.0 - beta ** step``
        # with a run-time ``step``); an explicit NumPy call makes them strong (numpy_api).
        weak = all_weak and resolved[-1].kind in "bif" and shape == ()
        return AbstractArray(shape, resolved[-1], weak)

    return abstract_eval


def pointwise(name, ufunc, vjp):
    return Primitive(name, "pointwise", impl=ufunc, abstract_eval=ufunc_rule(ufunc), vjp=vjp)


def _maximum_share(g, x, y):
    """Gradient share of ``x`` in maximum(x, y): all of it where x wins, half at ties."""
    return np.where(x > y, g, np.where(x == y, g * 0.5, 0.0))


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _power_exponent_grad(g, x, y, out):
    # NOTE: d(x**y)/dy = out * log(x); at x == 0 (y >= 0) the limit is 0, not 0 * -inf.
    return np.where((x == 0) & (y >= 0), 0.0, g * out * np.log(x))


# --- unary -----------------------------------------------------------------------------
neg_p = pointwise("neg", np.negative, (lambda g, x, out: -g,))
abs_p = pointwise("abs", np.absolute, (lambda g, x, out: g * np.sign(x),))
sign_p = pointwise("sign", np.sign, (None,))
exp_p = pointwise("exp", np.exp, (lambda g, x, out: g * out,))
exp2_p = pointwise("exp2", np.exp2, (lambda g, x, out: g * out * _LN2,))
expm1_p = pointwise("expm1", np.expm1, (lambda g, x, out: g * (out + 1.0),))
log_p = pointwise("log", np.log, (lambda g, x, out: g / x,))
log1p_p = pointwise("log1p", np.log1p, (lambda g, x, out: g / (x + 1.0),))
log2_p = pointwise("log2", np.log2, (lambda g, x, out: g / (x * _LN2),))
log10_p = pointwise("log10", np.log10, (lambda g, x, out: g / (x * _LN10),))
sqrt_p = pointwise("sqrt", np.sqrt, (lambda g, x, out: g * 0.5 / out,))
square_p = pointwise("square", np.square, (lambda g, x, out: g * 2.0 * x,))
reciprocal_p = pointwise("reciprocal", np.reciprocal, (lambda g, x, out: -g * out * out,))
tanh_p = pointwise("tanh", np.tanh, (lambda g, x, out: g * (1.0 - out * out),))
sin_p = pointwise("sin", np.sin, (lambda g, x, out: g * np.cos(x),))
cos_p = pointwise("cos", np.cos, (lambda g, x, out: -g * np.sin(x),))
tan_p = pointwise("tan", np.tan, (lambda g, x, out: g * (1.0 + out * out),))
erf_p = pointwise("erf", special.erf,
                  (lambda g, x, out: g * _TWO_OVER_SQRT_PI * np.exp(-(x * x)),))
floor_p = pointwise("floor", np.floor, (None,))
ceil_p = pointwise("ceil", np.ceil, (None,))
rint_p = pointwise("rint", np.rint, (None,))  # half to even, as np.round
trunc_p = pointwise("trunc", np.trunc, (None,))
isnan_p = pointwise("isnan", np.isnan, None)
isinf_p = pointwise("isinf", np.isinf, None)
isfinite_p = pointwise("isfinite", np.isfinite, None)
logical_not_p = pointwise("logical_not", np.logical_not, None)

# --- binary ----------------------------------------------------------------------------
add_p = pointwise("add", np.add, (lambda g, x, y, out: g, lambda g, x, y, out: g))
subtract_p = pointwise("subtract", np.subtract, (lambda g, x, y, out: g, lambda g, x, y, out: -g))
multiply_p = pointwise(
    "multiply", np.multiply, (lambda g, x, y, out: g * y, lambda g, x, y, out: g * x)
)
true_divide_p = pointwise(
    "true_divide",
    np.true_divide,
    (lambda g, x, y, out: g / y, lambda g, x, y, out: -g * out / y),
)
floor_divide_p = pointwise("floor_divide", np.floor_divide, (None, None))
mod_p = pointwise(
    "mod",
    np.remainder,
    (lambda g, x, y, out: g, lambda g, x, y, out: -g * np.floor_divide(x, y)),
)
power_p = pointwise(
    "power",
    np.power,
    (lambda g, x, y, out: g * y * np.power(x, y - 1), _power_exponent_grad),
)
maximum_p = pointwise(
    "maximum",
    np.maximum,
    (
        lambda g, x, y, out: _maximum_share(g, x, y),
        lambda g, x, y, out: _maximum_share(g, y, x),
    ),
)
minimum_p = pointwise(
    "minimum",
    np.minimum,
    (
        lambda g, x, y, out: _maximum_share(g, y, x),
        lambda g, x, y, out: _maximum_share(g, x, y),
    ),
)
equal_p = pointwise("equal", np.equal, None)
not_equal_p = pointwise("not_equal", np.not_equal, None)
less_p = pointwise("less", np.less, None)
less_equal_p = pointwise("less_equal", np.less_equal, None)
greater_p = pointwise("greater", np.greater, None)
greater_equal_p = pointwise("greater_equal", np.greater_equal, None)
logical_and_p = pointwise("logical_and", np.logical_and, None)
logical_or_p = pointwise("logical_or", np.logical_or, None)
# Bits of integers (bool operands go to the logical primitives: tracer/ufuncs.py)
bitwise_and_p = pointwise("bitwise_and", np.bitwise_and, None)
bitwise_or_p = pointwise("bitwise_or", np.bitwise_or, None)
bitwise_xor_p = pointwise("bitwise_xor", np.bitwise_xor, None)
invert_p = pointwise("invert", np.invert, None)
left_shift_p = pointwise("left_shift", np.left_shift, None)
right_shift_p = pointwise("right_shift", np.right_shift, None)


# --- select and cast -------------------------------------------------------------------
def _where_rule(condition, x, y):
    shape = broadcast_shapes(condition.shape, x.shape, y.shape)
    return AbstractArray(shape, result_dtype(x, y))


where_p = Primitive(
    "where",
    "pointwise",
    impl=np.where,
    abstract_eval=_where_rule,
    vjp=(
        None,
        lambda g, c, x, y, out: np.where(c, g, 0.0),
        lambda g, c, x, y, out: np.where(c, 0.0, g),
    ),
)


def _cast_impl(x, dtype, weak=False):
    return np.asarray(x).astype(dtype)


# ``weak``: the result is a Python number (``float(loss)``, ``loss.item()``), promoted as
# one (NEP 50) and returned as one.
cast_p = Primitive(
    "cast",
    "pointwise",
    impl=_cast_impl,
    abstract_eval=lambda x, dtype, weak=False: AbstractArray(x.shape, dtype, weak),
    vjp=(lambda g, x, out, dtype, weak=False: g,),
)


def _stop_gradient_impl(x):
    return np.asarray(x)


# The value unchanged, no gradient through it (jax.lax.stop_gradient, Tensor.detach): the
# max that softmax subtracts for stability shifts every logit alike, so its gradient is 0.
stop_gradient_p = Primitive(
    "stop_gradient",
    "pointwise",
    impl=_stop_gradient_impl,
    abstract_eval=lambda x: AbstractArray(x.shape, x.dtype),
    vjp=None,
)
