"""Vectorizable transcendental functions, emitted inline as LLVM IR.

Straight-line code (selects, no branches, no calls), so the loop vectorizer turns a
kernel's inner loop into SIMD code. Each function states its error bound, checked by
``tests/codegen/test_mathlib.py`` over the whole float range (denormals, zeros, infinities,
NaN, huge arguments, thresholds): against NumPy, and for float32 also against the
correctly rounded result (NumPy's own float32 SIMD log and log1p are up to 3 ulp off):

                vs NumPy            vs exact
    function   float32  float64    float32    method
    exp        2 ulp    2 ulp      1 ulp      Cody-Waite reduction by ln2, Taylor series
    expm1      3 ulp    2 ulp      2 ulp      2^n * expm1(r) + (2^n - 1)
    log        3 ulp    2 ulp      1 ulp      fdlibm: x = 2^k m, log(1+f) = f - hfsq + ...
    log1p      3 ulp    2 ulp      1 ulp      fdlibm, corrected for the rounding of 1 + x
    tanh       3 ulp    3 ulp      3 ulp      expm1(2|x|) / (expm1(2|x|) + 2), sign restored

float32 log and log1p run the float64 algorithm and round once.

sin, cos, pow and fmod call the C library (correctly rounded or within 1 ulp there).
"""

from __future__ import annotations

import math

from llvmlite import ir

from .dtypes import F64, I32, I64


class Float:
    """Per-precision constants and bit layout."""

    def __init__(self, ty):
        self.ty = ty
        double = ty == F64
        self.int = I64 if double else I32
        self.mantissa_bits = 52 if double else 23
        self.bias = 1023 if double else 127
        self.exp_high = 709.782712893384 if double else 88.72283
        self.exp_low = -745.1332191019412 if double else -103.972084
        self.expm1_low = -38.0 if double else -17.0
        self.tanh_clamp = 19.5 if double else 9.5
        self.exp_terms = 13 if double else 7
        self.log_terms = 10 if double else 5
        self.ln2_hi = 6.93147180369123816490e-01 if double else 0.693145751953125
        self.ln2_lo = 1.90821492927058770002e-10 if double else 1.428606765330187e-06

    def const(self, value):
        return ir.Constant(self.ty, value)

    def iconst(self, value):
        return ir.Constant(self.int, value)


def _intrinsic(builder, name, ty, *args):
    module = builder.module
    full = f"llvm.{name}.{'f64' if ty == F64 else 'f32'}"
    function = module.globals.get(full)
    if function is None:
        function = ir.Function(module, ir.FunctionType(ty, [ty] * len(args)), full)
    return builder.call(function, list(args))


def libm(builder, name, ty, *args):
    """A call to the C library's ``name`` (``sinf`` for float32)."""
    symbol = name if ty == F64 else name + "f"
    module = builder.module
    function = module.globals.get(symbol)
    if function is None:
        function = ir.Function(module, ir.FunctionType(ty, [ty] * len(args)), symbol)
    return builder.call(function, list(args))


def fma(builder, a, b, c):
    return _intrinsic(builder, "fma", a.type, a, b, c)


def _horner(builder, x, coefficients):
    """c0 + x*(c1 + x*(c2 + ...)) with fused multiply-adds."""
    f = Float(x.type)
    result = f.const(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = fma(builder, result, x, f.const(coefficient))
    return result


def _select(builder, condition, a, b):
    return builder.select(condition, a, b)


def _reduce_ln2(builder, x):
    """n = round(x / ln2) and r = x - n ln2 (two-part ln2), for |r| <= ln2 / 2."""
    f = Float(x.type)
    scaled = builder.fmul(x, f.const(1.0 / math.log(2.0)))
    n = _intrinsic(builder, "rint", x.type, scaled)
    r = fma(builder, n, f.const(-f.ln2_hi), x)
    r = fma(builder, n, f.const(-f.ln2_lo), r)
    return n, r


def _pow2(builder, n_int, f):
    """2^n as a float for n in the normal exponent range."""
    bits = builder.shl(builder.add(n_int, f.iconst(f.bias)), f.iconst(f.mantissa_bits))
    return builder.bitcast(bits, f.ty)


def _scale(builder, value, n, f):
    """value * 2^n for n in [-2*bias, 2*bias], in two steps so neither factor is denormal."""
    n_int = builder.fptosi(n, f.int)
    half = builder.ashr(n_int, f.iconst(1))
    rest = builder.sub(n_int, half)
    return builder.fmul(builder.fmul(value, _pow2(builder, half, f)), _pow2(builder, rest, f))


def _clamp_exponent(builder, n, f):
    """n within the range ``_scale`` handles (NaN becomes a bound: its lanes are replaced by
    NaN at the end); results beyond it overflow or underflow anyway."""
    low = f.const(-2.0 * f.bias + 2)
    high = f.const(2.0 * f.bias)
    return _intrinsic(builder, "minnum", n.type, _intrinsic(builder, "maxnum", n.type, n, low),
                      high)


def _expm1_reduced(builder, r, f):
    """expm1(r) for |r| <= ln2/2: Taylor series r + r^2/2! + ... ."""
    coefficients = [1.0 / math.factorial(k) for k in range(1, f.exp_terms + 1)]
    return builder.fmul(r, _horner(builder, r, coefficients))


def exp(builder, x):
    f = Float(x.type)
    n, r = _reduce_ln2(builder, x)
    polynomial = builder.fadd(_expm1_reduced(builder, r, f), f.const(1.0))
    # Clamp n so the two-step scale stays in range; overflow and underflow are selected below.
    n = _clamp_exponent(builder, n, f)
    result = _scale(builder, polynomial, n, f)
    result = _select(builder, builder.fcmp_ordered(">", x, f.const(f.exp_high)),
                     f.const(math.inf), result)
    result = _select(builder, builder.fcmp_ordered("<", x, f.const(f.exp_low)),
                     f.const(0.0), result)
    return _select(builder, builder.fcmp_unordered("uno", x, x), x, result)


def expm1(builder, x):
    f = Float(x.type)
    n, r = _reduce_ln2(builder, x)
    n = _clamp_exponent(builder, n, f)
    reduced = _expm1_reduced(builder, r, f)
    scale = _scale(builder, f.const(1.0), n, f)
    # 2^n * expm1(r) + (2^n - 1): exact 2^n - 1 keeps the relative accuracy near zero.
    result = fma(builder, scale, reduced, builder.fsub(scale, f.const(1.0)))
    # Near overflow 2^n alone is out of range; there the -1 is far below an ulp.
    large = builder.fcmp_ordered(">", n, f.const(float(f.mantissa_bits + 2)))
    result = _select(builder, large,
                     _scale(builder, builder.fadd(reduced, f.const(1.0)), n, f), result)
    result = _select(builder, builder.fcmp_ordered(">", x, f.const(f.exp_high)),
                     f.const(math.inf), result)
    result = _select(builder, builder.fcmp_ordered("<", x, f.const(f.expm1_low)),
                     f.const(-1.0), result)
    # x itself for NaN and for zeros (expm1(-0.0) is -0.0).
    keep = builder.or_(builder.fcmp_unordered("uno", x, x),
                       builder.fcmp_ordered("==", x, f.const(0.0)))
    return _select(builder, keep, x, result)


# fdlibm's log coefficients: log(1+f) = f - hfsq + s*(hfsq + R(s^2)), s = f/(2+f).
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10


def _log_reduce(builder, u):
    """float64 ``u`` as ``2^k * m``, m in [sqrt(2)/2, sqrt(2)): returns (k, m - 1)."""
    f = Float(F64)
    denormal = builder.fcmp_ordered("<", u, f.const(2.0 ** -1022))
    scaled = _select(builder, denormal, builder.fmul(u, f.const(2.0 ** 54)), u)
    bits = builder.bitcast(scaled, I64)
    exponent = builder.sub(builder.lshr(bits, f.iconst(52)), f.iconst(1023))
    exponent = builder.sub(exponent, _select(builder, denormal, f.iconst(54), f.iconst(0)))
    mantissa = builder.bitcast(
        builder.or_(builder.and_(bits, f.iconst((1 << 52) - 1)), f.iconst(1023 << 52)), F64)
    large = builder.fcmp_ordered(">", mantissa, f.const(math.sqrt(2.0)))
    mantissa = _select(builder, large, builder.fmul(mantissa, f.const(0.5)), mantissa)
    exponent = builder.add(exponent, builder.zext(large, I64))
    return builder.sitofp(exponent, F64), builder.fsub(mantissa, f.const(1.0))


def _log_tail(builder, m1):
    """``(hfsq, s*(hfsq + R))`` of fdlibm's log(1 + m1)."""
    f = Float(F64)
    hfsq = builder.fmul(builder.fmul(m1, m1), f.const(0.5))
    s = builder.fdiv(m1, builder.fadd(m1, f.const(2.0)))
    z = builder.fmul(s, s)
    r = builder.fmul(z, _horner(builder, z, list(_LG)))
    return hfsq, builder.fmul(s, builder.fadd(hfsq, r))


def _in_double(function):
    """float32 through the float64 algorithm: rounding once gives <= 1 ulp."""

    def wrapper(builder, x):
        if x.type == F64:
            return function(builder, x)
        return builder.fptrunc(function(builder, builder.fpext(x, F64)), x.type)

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


@_in_double
def log(builder, x):
    f = Float(F64)
    k, m1 = _log_reduce(builder, x)
    hfsq, tail = _log_tail(builder, m1)
    # k*ln2_hi - ((hfsq - (tail + k*ln2_lo)) - f): the exact m1 carries the result.
    inner = builder.fsub(builder.fsub(hfsq, builder.fadd(tail, builder.fmul(
        k, f.const(_LN2_LO)))), m1)
    result = builder.fsub(builder.fmul(k, f.const(_LN2_HI)), inner)
    result = _select(builder, builder.fcmp_ordered("==", x, f.const(0.0)),
                     f.const(-math.inf), result)
    result = _select(builder, builder.fcmp_ordered("==", x, f.const(math.inf)),
                     f.const(math.inf), result)
    invalid = builder.fcmp_unordered("<", x, f.const(0.0))  # negative or NaN
    return _select(builder, invalid, f.const(math.nan), result)


@_in_double
def log1p(builder, x):
    f = Float(F64)
    u = builder.fadd(x, f.const(1.0))
    k, m1 = _log_reduce(builder, u)
    # c corrects the rounding of u = 1 + x (fdlibm's log1p).
    one = f.const(1.0)
    c = _select(builder, builder.fcmp_ordered(">=", k, f.const(2.0)),
                builder.fsub(one, builder.fsub(u, x)), builder.fsub(x, builder.fsub(u, one)))
    c = builder.fdiv(c, u)
    c = _select(builder, builder.fcmp_ordered("<", k, f.const(54.0)), c, f.const(0.0))
    hfsq, tail = _log_tail(builder, m1)
    result = builder.fadd(
        builder.fadd(builder.fsub(builder.fadd(tail, builder.fadd(
            builder.fmul(k, f.const(_LN2_LO)), c)), hfsq), m1),
        builder.fmul(k, f.const(_LN2_HI)))
    result = _select(builder, builder.fcmp_ordered("==", x, f.const(0.0)), x, result)
    result = _select(builder, builder.fcmp_ordered("==", x, f.const(math.inf)), x, result)
    result = _select(builder, builder.fcmp_ordered("==", x, f.const(-1.0)),
                     f.const(-math.inf), result)
    invalid = builder.fcmp_unordered("<", x, f.const(-1.0))  # below -1 or NaN
    return _select(builder, invalid, f.const(math.nan), result)


def tanh(builder, x):
    f = Float(x.type)
    magnitude = _intrinsic(builder, "fabs", x.type, x)
    magnitude = _select(builder, builder.fcmp_ordered(">", magnitude, f.const(f.tanh_clamp)),
                        f.const(f.tanh_clamp), magnitude)
    e = expm1(builder, builder.fmul(magnitude, f.const(2.0)))
    result = builder.fdiv(e, builder.fadd(e, f.const(2.0)))
    return _intrinsic(builder, "copysign", x.type, result, x)


def sqrt(builder, x):
    return _intrinsic(builder, "sqrt", x.type, x)


def fabs(builder, x):
    return _intrinsic(builder, "fabs", x.type, x)


def floor(builder, x):
    return _intrinsic(builder, "floor", x.type, x)


def ceil(builder, x):
    return _intrinsic(builder, "ceil", x.type, x)


def copysign(builder, magnitude, sign):
    return _intrinsic(builder, "copysign", magnitude.type, magnitude, sign)

