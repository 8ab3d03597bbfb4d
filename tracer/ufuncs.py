"""NumPy's ufuncs on tracejit arrays: which primitive each is, or how it is composed.

``UFUNCS`` maps a ufunc to its one primitive (``np.tanh`` -> ``tanh``); ``UFUNC_COMPOSITES``
composes the others from primitives in the dtypes NumPy's own loop would use;
``FOREIGN_UFUNCS`` names other libraries' ufuncs (``scipy.special.erf``) by module and
attribute. ``tracejit.tracer.ufunc_calls.array_ufunc`` dispatches through these tables.

>>> UFUNCS[np.tanh].name, np.sinh in UFUNC_COMPOSITES
('tanh', True)
"""

from __future__ import annotations

import math
import sys

import numpy as np

from . import ops
from .abstract import abstractify
from .primitives import bind

dtype_of = ops.dtype_of


def cast(x, dtype):
    """``x`` in ``dtype``: ``x`` itself when it has that dtype, else a traced cast
    (``numpy_api.astype``)."""
    dtype = np.dtype(dtype)
    if dtype_of(x) == dtype:
        return x
    return bind(ops.cast_p, x, dtype=dtype)


_LN2 = math.log(2.0)


def _bitwise(bits, logical):
    """``&``, ``|``, ``^``: the logical primitive on two bool operands (which fusion and
    the relu masks know), the bitwise one otherwise."""
    def apply(x, y):
        if dtype_of(x) == np.bool_ and dtype_of(y) == np.bool_:
            return logical(x, y)
        return bind(bits, x, y)

    return apply


def _invert(x):
    return bind(ops.logical_not_p if dtype_of(x) == np.bool_ else ops.invert_p, x)


def _logaddexp(x, y):
    # NumPy's formula: equal operands give x + ln 2, which is high + log1p(exp(-0)); only
    # equal infinities need a case of their own (inf - inf), and a select on infinity
    # rather than on x == y keeps the composite free of a jump where its branches agree
    # (margin rules see x == y of computed values as one: a CTC table exited every call).
    high, infinite = high_and_infinite(x, y)
    return np.where(infinite, high, high + np.log1p(np.exp(spread_of(x, y, infinite))))


def _hyperbolic(x, odd):
    """``np.sinh`` (``odd``) or ``np.cosh`` of ``x``, finite wherever NumPy's is.

    ``(exp(x) - exp(-x)) / 2`` overflows in ``exp`` a little before ``sinh`` does
    (``np.sinh(710.0)`` is 1.1e308, ``np.float32(89)``'s 2.2e38) and cancels near 0
    (``sinh(1e-8)``). Near 0 to the overflow, ``sinh`` is ``(u + u / (u + 1)) / 2`` of
    ``u = expm1(|x|)`` and ``cosh`` ``1 + (u / 2) (u / (u + 1))``; past it both are
    ``e / 2``, taken as ``(h / 2) * h`` of ``h = exp(|x| / 2)``. The near forms read ``|x|``
    clamped below the overflow, so neither warns nor makes a NaN in a gradient there."""
    size = np.abs(x)
    limit = float(np.log(np.finfo(dtype_of(x)).max)) - 1.0
    clamped = np.minimum(size, limit)
    if odd:
        grown = np.expm1(clamped)
        near = (grown + grown / (grown + 1.0)) * 0.5
    else:
        # 1 + u^2 / (2 (u + 1)), e + 1 / e in expm1's terms: its derivative (sinh) then
        # has no difference of near-equal terms near 0 (1e-8's was 1.3e-16 off, float32's 0)
        grown = np.expm1(clamped)
        near = 1.0 + (grown * 0.5) * (grown / (grown + 1.0))
    # two exps, not one squared: the backward of (h / 2) * h of one h sums both factors'
    # gradients at h before multiplying by h again, e^|x| overflowing where the
    # derivative e^|x| / 2 does not (cosh'(710) = 1.1e308); apart, each product is e^|x| / 2
    far = (np.exp(size * 0.5) * 0.5) * np.exp(size * 0.5)
    magnitude = np.where(size < limit, near, far)
    if not odd:
        return magnitude
    # sinh is odd: the sign of x, and x itself at +-0.0 and NaN
    return np.where(x < 0, -magnitude, np.where(x > 0, magnitude, x))


def high_and_infinite(x, y):
    """``max(x, y)`` and where it is infinite: there logaddexp is ``max(x, y)`` itself
    (NaN propagates through ``max``)."""
    high = np.maximum(x, y)
    return high, np.isinf(high)


def spread_of(x, y, infinite):
    """``-|x - y|``, 0 where ``infinite``: the difference is taken of operands zeroed there,
    since ``-inf - -inf`` (log-space tables start at -inf: CTC, HMMs) warns 'invalid value
    in subtract' on the traced call, and raises under ``np.errstate(invalid="raise")``,
    where NumPy's logaddexp does neither."""
    return -np.abs(_zeroed(x, infinite, y) - _zeroed(y, infinite, x))


def _zeroed(value, where, other):
    if abstractify(value).weak and not abstractify(other).weak:
        # a Python scalar keeps the other operand's dtype, as in ``x - 1.0``
        value = np.asarray(value, dtype=dtype_of(other))
    return np.where(where, 0.0, value)


def in_loop_dtypes(ufunc, composite):
    """A composite computed in the dtypes NumPy's own ufunc loop would use (bool and
    integer inputs become the ufunc's float type; unsupported inputs raise like NumPy)."""

    def apply(*inputs):
        avals = [abstractify(value) for value in inputs]
        if all(aval.weak for aval in avals):
            key = tuple(aval.dtype for aval in avals)
        else:
            key = tuple(aval.dtype_for_promotion() for aval in avals)
        loop = ufunc.resolve_dtypes(key + (None,) * ufunc.nout)
        converted = [
            value if aval.weak or aval.dtype == dtype else cast(value, dtype)
            for value, aval, dtype in zip(inputs, avals, loop)
        ]
        return composite(*converted)

    return apply


UFUNCS = {
    np.negative: ops.neg_p,
    np.absolute: ops.abs_p,
    np.sign: ops.sign_p,
    np.exp: ops.exp_p,
    np.exp2: ops.exp2_p,
    np.expm1: ops.expm1_p,
    np.log: ops.log_p,
    np.log1p: ops.log1p_p,
    np.log2: ops.log2_p,
    np.log10: ops.log10_p,
    np.sqrt: ops.sqrt_p,
    np.square: ops.square_p,
    np.reciprocal: ops.reciprocal_p,
    np.tanh: ops.tanh_p,
    np.sin: ops.sin_p,
    np.cos: ops.cos_p,
    np.tan: ops.tan_p,
    np.floor: ops.floor_p,
    np.ceil: ops.ceil_p,
    np.rint: ops.rint_p,
    np.trunc: ops.trunc_p,
    np.isnan: ops.isnan_p,
    np.isinf: ops.isinf_p,
    np.isfinite: ops.isfinite_p,
    np.logical_not: ops.logical_not_p,
    np.add: ops.add_p,
    np.subtract: ops.subtract_p,
    np.multiply: ops.multiply_p,
    np.true_divide: ops.true_divide_p,
    np.floor_divide: ops.floor_divide_p,
    np.remainder: ops.mod_p,
    np.power: ops.power_p,
    np.maximum: ops.maximum_p,
    np.minimum: ops.minimum_p,
    np.equal: ops.equal_p,
    np.not_equal: ops.not_equal_p,
    np.less: ops.less_p,
    np.less_equal: ops.less_equal_p,
    np.greater: ops.greater_p,
    np.greater_equal: ops.greater_equal_p,
    np.logical_and: ops.logical_and_p,
    np.logical_or: ops.logical_or_p,
    np.left_shift: ops.left_shift_p,
    np.right_shift: ops.right_shift_p,
    np.matmul: ops.matmul_p,
}

# ufuncs composed from primitives (same call signature as the ufunc).
UFUNC_COMPOSITES = {
    # a new array, as NumPy's ufunc makes: a write into +x must not reach x
    np.positive: in_loop_dtypes(np.positive, lambda x: bind(ops.cast_p, x, dtype=dtype_of(x))),
    np.fabs: in_loop_dtypes(np.fabs, lambda x: bind(ops.abs_p, x)),
    np.sinh: in_loop_dtypes(np.sinh, lambda x: _hyperbolic(x, odd=True)),
    np.cosh: in_loop_dtypes(np.cosh, lambda x: _hyperbolic(x, odd=False)),
    np.logaddexp: in_loop_dtypes(np.logaddexp, _logaddexp),
    np.logical_xor: lambda x, y: np.not_equal(cast(x, bool), cast(y, bool)),
    np.bitwise_and: _bitwise(ops.bitwise_and_p, lambda x, y: bind(ops.logical_and_p, x, y)),
    np.bitwise_or: _bitwise(ops.bitwise_or_p, lambda x, y: bind(ops.logical_or_p, x, y)),
    np.bitwise_xor: _bitwise(ops.bitwise_xor_p, lambda x, y: bind(ops.not_equal_p, x, y)),
    np.invert: _invert,
}

# ufuncs of other libraries, by (module, attribute): looked up in ``sys.modules`` when
# called, never imported here (scipy is not a dependency). Each runs in the dtypes its own
# loops give (``resolve_dtypes``), so results have the library's dtypes.
FOREIGN_UFUNCS = {
    ("scipy.special", "erf"): ops.erf_p,
}


def foreign_ufunc(ufunc):
    """The implementation of a ``FOREIGN_UFUNCS`` ufunc, or ``None``."""
    for (module_name, attribute), prim in FOREIGN_UFUNCS.items():
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, attribute, None) is ufunc:
            return in_loop_dtypes(ufunc, lambda *inputs, prim=prim: bind(prim, *inputs))
    return None
