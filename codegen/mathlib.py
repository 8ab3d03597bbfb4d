"""Vectorizable transcendental functions, emitted inline as LLVM IR.

Straight-line code (selects, no branches, no calls), so the loop vectorizer turns a
kernel's inner loop into SIMD code. Each function states its error bound against NumPy,
checked by ``tests/codegen/test_mathlib.py`` over the whole float range:

    function   float32    float64    method
    exp        <= 2 ulp   <= 2 ulp   Cody-Waite reduction by ln2, Taylor polynomial
    expm1      <= 2 ulp   <= 2 ulp   2^n * expm1(r) + (2^n - 1)
    log        <= 2 ulp   <= 2 ulp   x = 2^e * m, log(m) = 2 atanh((m-1)/(m+1)) series
    log1p      <= 3 ulp   <= 3 ulp   log(u) * x / (u - 1), u = 1 + x
    tanh       <= 3 ulp   <= 3 ulp   expm1(2|x|) / (expm1(2|x|) + 2), sign restored

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
    result = _select(builder, builder.fcmp_ordered(">", x, f.const(f.exp_high)),
                     f.const(math.inf), result)
    result = _select(builder, builder.fcmp_ordered("<", x, f.const(f.expm1_low)),
                     f.const(-1.0), result)
    return _select(builder, builder.fcmp_unordered("uno", x, x), x, result)


def log(builder, x):
    f = Float(x.type)
    # Denormals: scale up by 2^mantissa_bits first, and take it off the exponent after.
    smallest_normal = 2.0 ** (1 - f.bias)
    denormal = builder.fcmp_ordered("<", x, f.const(smallest_normal))
    scaled = _select(builder, denormal, builder.fmul(x, f.const(2.0 ** f.mantissa_bits)), x)
    bits = builder.bitcast(scaled, f.int)
    exponent = builder.sub(builder.lshr(bits, f.iconst(f.mantissa_bits)), f.iconst(f.bias))
    exponent = builder.sub(exponent, _select(builder, denormal, f.iconst(f.mantissa_bits),
                                             f.iconst(0)))
    mantissa_mask = (1 << f.mantissa_bits) - 1
    one_bits = f.bias << f.mantissa_bits
    mantissa = builder.bitcast(
        builder.or_(builder.and_(bits, f.iconst(mantissa_mask)), f.iconst(one_bits)), f.ty
    )
    # Keep m in [sqrt(2)/2, sqrt(2)) so |s| stays small.
    large = builder.fcmp_ordered(">", mantissa, f.const(math.sqrt(2.0)))
    mantissa = _select(builder, large, builder.fmul(mantissa, f.const(0.5)), mantissa)
    exponent = builder.add(exponent, builder.zext(large, f.int))
    m1 = builder.fsub(mantissa, f.const(1.0))
    s = builder.fdiv(m1, builder.fadd(m1, f.const(2.0)))
    s2 = builder.fmul(s, s)
    series = _horner(builder, s2, [1.0 / (2 * k + 1) for k in range(f.log_terms + 1)])
    log_m = builder.fmul(builder.fmul(s, f.const(2.0)), series)
    e = builder.sitofp(exponent, f.ty)
    result = fma(builder, e, f.const(f.ln2_hi), fma(builder, e, f.const(f.ln2_lo), log_m))
    result = _select(builder, builder.fcmp_ordered("==", x, f.const(0.0)),
                     f.const(-math.inf), result)
    result = _select(builder, builder.fcmp_ordered("==", x, f.const(math.inf)),
                     f.const(math.inf), result)
    invalid = builder.fcmp_unordered("<", x, f.const(0.0))  # negative or NaN
    return _select(builder, invalid, f.const(math.nan), result)


def log1p(builder, x):
    f = Float(x.type)
    u = builder.fadd(x, f.const(1.0))
    u_minus_1 = builder.fsub(u, f.const(1.0))
    # log(u) * (x / (u - 1)) corrects the rounding of 1 + x (Goldberg's trick); the ratio
    # is close to 1, so nothing overflows for huge x.
    corrected = builder.fmul(log(builder, u), builder.fdiv(x, u_minus_1))
    exact = builder.fcmp_ordered("==", u_minus_1, f.const(0.0))
    result = _select(builder, exact, x, corrected)
    infinite = builder.fcmp_ordered("==", x, f.const(math.inf))
    result = _select(builder, infinite, x, result)
    return _select(builder, builder.fcmp_ordered("==", u, f.const(0.0)),
                   f.const(-math.inf), result)


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

