"""The float32 x ** y core tried for issue 16 and not kept (see ``codegen/math_pow.py``'s
docstring for the measurements): a drop-in replacement for that module as it stood. The
later attempt with tables read by in-register permutes is ``math_pow._pow_float32_wide``
(``README.md`` here). Within 0.98 ulp of
the exact result on 16 million pairs stressing the edges of the three pieces at |t| up to
128; 10% faster than the float64 fast path on (0, 100] ** [-3, 3], 27-33% slower where
results are denormal or huge."""

from __future__ import annotations

import fractions
import math

import numpy as np
from llvmlite import ir

from tracejit.codegen.dtypes import F32, F64
from tracejit.codegen.math_core import (
    Float,
    clamp_exponent,
    constant,
    fabs,
    fast_two_sum,
    floor,
    fma,
    horner,
    is_nan,
    maximum,
    minimum,
    pow2,
    rint,
    scale,
    sign_bit,
    two_product,
    two_sum,
)
from tracejit.codegen.math_log import log_reduce, outside_normal_float32, reduce_float32
from tracejit.codegen.math_rare_path import rare_path

_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_INV_LN2 = 1.4426950408889634

# log(m) = 2 atanh(s), s = (m - 1)/(m + 1) <= 0.1716: 2s + (2/3)s^3 + s^5 * (2/5 + 2/7 s^2
# + ...), the series to s^25 (the next term is below 2^-66 of the sum).
_TWO_THIRDS_HI = 2.0 / 3.0
_TWO_THIRDS_LO = float(fractions.Fraction(2, 3) - fractions.Fraction(_TWO_THIRDS_HI))
_ATANH_TAIL = [2.0 / (2 * k + 1) for k in range(2, 13)]
_EXP_TERMS = [1.0 / math.factorial(k) for k in range(2, 14)]


def log_double_double(builder, x):
    """log of a positive finite float64 as (hi, lo), within about 2^-64 of it."""
    f = Float(x.type)
    two = f.const(2.0)
    k, m1 = log_reduce(builder, x)
    # s = m1 / (m1 + 2) in double-double (m1 + 2 is not always exact)
    u_hi = builder.fadd(m1, two)
    u_lo = builder.fadd(builder.fsub(two, u_hi), m1)
    s_hi = builder.fdiv(m1, u_hi)
    residual = fma(builder, builder.fneg(s_hi), u_hi, m1)  # exact
    residual = fma(builder, builder.fneg(s_hi), u_lo, residual)
    s_lo = builder.fdiv(residual, u_hi)
    # s^2 and s^3, then (2/3) s^3, in double-double
    z_hi, z_error = two_product(builder, s_hi, s_hi)
    z_lo = fma(builder, builder.fmul(s_hi, two), s_lo, z_error)
    cube_hi, cube_error = two_product(builder, s_hi, z_hi)
    cube_lo = builder.fadd(cube_error, fma(builder, s_hi, z_lo, builder.fmul(s_lo, z_hi)))
    third_hi, third_error = two_product(builder, f.const(_TWO_THIRDS_HI), cube_hi)
    third_lo = builder.fadd(third_error, fma(builder, f.const(_TWO_THIRDS_HI), cube_lo,
                                             builder.fmul(f.const(_TWO_THIRDS_LO), cube_hi)))
    rest = builder.fmul(builder.fmul(cube_hi, z_hi), horner(builder, z_hi, _ATANH_TAIL))
    # k * ln2_hi is exact (ln2_hi has 32 bits, |k| < 1100)
    hi, lo = two_sum(builder, builder.fmul(k, f.const(_LN2_HI)), builder.fmul(s_hi, two))
    hi, error = two_sum(builder, hi, third_hi)
    small = builder.fadd(builder.fadd(builder.fmul(k, f.const(_LN2_LO)), builder.fmul(s_lo, two)),
                         builder.fadd(third_lo, rest))
    lo = builder.fadd(builder.fadd(lo, error), small)
    return fast_two_sum(builder, hi, lo)


def exp_double_double(builder, hi, lo):
    """exp(hi + lo) for float64 |lo| <= ulp(hi): Cody-Waite by ln2 on hi, lo carried into
    r; inf and 0 beyond the thresholds (hi may be infinite)."""
    f = Float(hi.type)
    n = rint(builder, builder.fmul(hi, f.const(_INV_LN2)))
    r_hi = fma(builder, n, f.const(-_LN2_HI), hi)  # exact
    r_lo = fma(builder, n, f.const(-_LN2_LO), lo)
    r, r_error = two_sum(builder, r_hi, r_lo)
    # exp(r + r_error) = (1 + r) + (r^2 (1/2 + r/6 + ...) + r_error (1 + r)), 1 + r exactly
    # as a double-double: one rounding at the end, within 0.6 ulp
    whole, whole_error = fast_two_sum(builder, f.const(1.0), r)
    series = horner(builder, r, _EXP_TERMS)
    tail = fma(builder, builder.fmul(r, r), series,
               fma(builder, r_error, whole, whole_error))
    value = builder.fadd(whole, tail)
    result = scale(builder, value, clamp_exponent(builder, n, f), f)
    result = builder.select(builder.fcmp_ordered(">", hi, f.const(f.exp_high)),
                            f.const(math.inf), result)
    return builder.select(builder.fcmp_ordered("<", hi, f.const(f.exp_low)),
                          f.const(0.0), result)


# float32 pow needs y * log(x) within 2^-30 where the result is a float32 (|y log x| < 104):
# log to 2^-37 (the atanh series to s^13) and exp to 2^-37 (Taylor to r^9) suffice.
_ATANH_FLOAT = [1.0 / (2 * k + 1) for k in range(1, 7)]
_EXP_FLOAT = [1.0 / math.factorial(k) for k in range(2, 10)]


def _pow_float_magnitude(builder, magnitude, y):
    """|x|^y in float64 for float32 arguments: 2^-37 relative, before rounding to float32."""
    f = Float(magnitude.type)
    k, m1 = log_reduce(builder, magnitude)
    s = builder.fdiv(m1, builder.fadd(m1, f.const(2.0)))
    twice_s = builder.fmul(s, f.const(2.0))
    log_m = fma(builder, builder.fmul(twice_s, builder.fmul(s, s)),
                horner(builder, builder.fmul(s, s), _ATANH_FLOAT), twice_s)
    log_x = fma(builder, k, f.const(math.log(2.0)), log_m)
    # Beyond +-200 the float32 result is inf or 0 all the same; this keeps 2^n one normal
    # float64 factor (NaN becomes a bound too: its lanes are replaced by NaN at the end).
    t = minimum(builder, maximum(builder, builder.fmul(y, log_x), f.const(-200.0)),
                f.const(200.0))
    n = rint(builder, builder.fmul(t, f.const(_INV_LN2)))
    r = fma(builder, n, f.const(-_LN2_LO), fma(builder, n, f.const(-_LN2_HI), t))
    value = fma(builder, builder.fmul(r, r), horner(builder, r, _EXP_FLOAT),
                builder.fadd(r, f.const(1.0)))
    return builder.fmul(value, pow2(builder, builder.fptosi(n, f.int), f))


def _pow_double(builder, x, y, precise):
    """x ** y of float64 values: to float64 accuracy if ``precise``, else to what a float32
    result needs."""
    magnitude = fabs(builder, x)
    if precise:
        log_hi, log_lo = log_double_double(builder, magnitude)
        t_hi, t_error = two_product(builder, y, log_hi)
        result = exp_double_double(builder, t_hi, fma(builder, y, log_lo, t_error))
    else:
        result = _pow_float_magnitude(builder, magnitude, y)
    return special_cases(builder, x, y, magnitude, result)


def special_cases(builder, x, y, magnitude, result):
    """``result`` (|x|^y where x and y are ordinary) with C99's special cases and signs."""
    f = Float(x.type)
    one, zero, inf = f.const(1.0), f.const(0.0), f.const(math.inf)
    # C99's special cases (NumPy's): first where |x| is 0 or inf, or y is +-inf ...
    y_negative = builder.fcmp_ordered("<", y, zero)
    result = builder.select(builder.fcmp_ordered("==", magnitude, zero),
                            builder.select(y_negative, inf, zero), result)
    result = builder.select(builder.fcmp_ordered("==", magnitude, inf),
                            builder.select(y_negative, zero, inf), result)
    y_infinite = builder.fcmp_ordered("==", fabs(builder, y), inf)
    shrinks = builder.icmp_unsigned("==", builder.fcmp_ordered("<", magnitude, one),
                                    builder.fcmp_ordered(">", y, zero))
    result = builder.select(y_infinite, builder.select(shrinks, zero, inf), result)
    result = builder.select(
        builder.and_(y_infinite, builder.fcmp_ordered("==", magnitude, one)), one, result)
    # ... then the sign: negative x (-0.0 too) to an odd integer power is negative, to a
    # non-integer power NaN (unless x is -inf or y infinite) ...
    y_integer = builder.fcmp_ordered("==", floor(builder, y), y)
    half_y = builder.fmul(y, f.const(0.5))
    y_odd = builder.and_(y_integer, builder.fcmp_ordered("!=", floor(builder, half_y), half_y))
    result = builder.select(builder.and_(sign_bit(builder, x), y_odd), builder.fneg(result),
                            result)
    x_negative_finite = builder.and_(builder.fcmp_ordered("<", x, zero),
                                     builder.fcmp_ordered(">", x, f.const(-math.inf)))
    invalid = builder.and_(x_negative_finite,
                           builder.and_(builder.not_(y_integer), builder.not_(y_infinite)))
    result = builder.select(invalid, f.const(math.nan), result)
    # ... NaN in, NaN out, except pow(1, y) and pow(x, 0), which are 1 for any x and y.
    result = builder.select(builder.or_(is_nan(builder, x), is_nan(builder, y)),
                            f.const(math.nan), result)
    result = builder.select(builder.fcmp_ordered("==", x, one), one, result)
    return builder.select(builder.fcmp_ordered("==", y, zero), one, result)


# --- float32 at full width -----------------------------------------------------------
# float32 x ** y = 2^t, t = y log2 x. 2^t must be right to about 2^-25 where the result is a
# float32 (|t| < 150), so t to about 2^-26 absolute and log2 x to 2^-33 relative: log2 x
# as a float-float pair (hi, lo). x = 2^k m (the bits), m in [sqrt(2)/2, sqrt(2)) split in
# three at 2^(+-1/6), each third around a center c (2^(-1/3), 1, 2^(1/3) rounded to float32;
# log2 c as a head of 12 bits, so k + head is exact, and a tail): log2 m = log2 c +
# (2/ln2) atanh(s), s = (m - c)/(m + c) with m - c exact, |s| <= 0.0577. The float32 tail
# of atanh (s^3/3 + ..., at most 0.11% of it) is then exact enough: with m split in one
# piece only (|s| <= 0.1716) its roundings put x ** y 1.9 ulp off at |t| ~ 125.
_POW_BOUNDS_F32 = (0.8908987045288086, 1.1224620342254639)  # 2^(-1/6), 2^(1/6)
# (c, log2 c head (12 bits), (log2 c - head) / (2/ln2)) below and above the middle third
_POW_CENTERS_F32 = ((0.7937005162239075, -0.333251953125, -2.821037924150005e-05),
                    (1.2599210739135742, 0.333251953125, 2.8213762561790645e-05))
_TWO_OVER_LN2_F32 = (2.885390043258667, 3.851926067000022e-08)
# atanh(s)/s = 1 + z A(z), z = s^2 <= 0.00333: within 2^-38.4 of it (``fit.py pow``)
_ATANH_TAIL_F32 = (0.3333333432674408, 0.1999896764755249, 0.14549750089645386)
# 2^f = 1 + f E(f) for |f| <= 1/2: within 2^-28.3 relative (``fit.py pow``)
_EXP2_F32 = (0.6931471824645996, 0.24022647738456726, 0.05550359934568405,
             0.009618505835533142, 0.0013390806270763278, 0.00015326471475418657)
# Adding 1.5 * 2^23 + shift rounds t to an integer n and leaves n + shift in the low
# mantissa bits; 2^(n + shift) goes into the exponent field and 2^-shift is a multiply
# (exp's scaling): exact for normal results, denormal ones rounded there. No one shift
# keeps 2^(n + shift) e^f a normal float for every n from -150 to 128: 25 below 1 (down to
# t = -150.5, below which the result is 0), -1 above (up to 2^128, the multiply by 2
# overflowing to inf).
_EXP2_SHIFTS_F32 = (25, -1)
_ROUNDER_F32 = 12582912.0  # 1.5 * 2^23
# Below t = -150.5 the result is 0; t is clamped at 128.49 (n <= 128: the multiply by 2
# overflows to inf where the result does)
_POW_UNDERFLOW_F32 = -150.5
_POW_OVERFLOW_F32 = 128.49
# |y| from here (and NaN) takes the general code: |y log2 x| < 2^20 keeps t_lo small
POW_FAST_Y_F32 = 8192.0


def _log2_float32(builder, x):
    """log2 of a positive normal float32 as a float-float (hi, lo), |lo| <= ulp(hi), within
    about 2^-36 of it: k + log2 c + (2/ln2)(s + s^3 A(s^2)), s = s_hi + s_lo by one
    division, (2/ln2) s_hi exact by a fused multiply-add."""
    f = Float(x.type)
    one, zero = f.const(1.0), f.const(0.0)
    _, k, m = reduce_float32(builder, x)
    below = builder.fcmp_ordered("<", m, f.const(_POW_BOUNDS_F32[0]))
    above = builder.fcmp_ordered(">=", m, f.const(_POW_BOUNDS_F32[1]))

    def third(low, high, middle):
        return builder.select(below, f.const(low), builder.select(above, f.const(high),
                                                                  middle))

    (c_low, head_low, tail_low), (c_high, head_high, tail_high) = _POW_CENTERS_F32
    center = third(c_low, c_high, one)
    head = builder.fadd(k, third(head_low, head_high, zero))  # exact
    r = builder.fsub(m, center)  # exact (Sterbenz)
    u_hi, u_lo = fast_two_sum(builder, center, m)  # m + c, exactly
    # s = r / u: s_hi by one division, s_lo from the exact residual r - s_hi u
    inverse = builder.fdiv(one, u_hi)
    s_hi = builder.fmul(r, inverse)
    residual = fma(builder, builder.fneg(s_hi), u_hi, r)
    residual = fma(builder, builder.fneg(s_hi), u_lo, residual)
    s_lo = builder.fmul(residual, inverse)
    z = builder.fmul(s_hi, s_hi)
    # atanh(s) - s_hi = s_lo (1 + z) + s_hi z A(z) (s_lo z reaches 2^-31 of log2 x), and
    # log2 c's tail (scaled by ln2/2) rides along
    low = fma(builder, s_lo, z, builder.fadd(s_lo, third(tail_low, tail_high, zero)))
    tail = fma(builder, builder.fmul(s_hi, z), horner(builder, z, _ATANH_TAIL_F32), low)
    c_hi, c_lo = _TWO_OVER_LN2_F32
    p_hi = builder.fmul(s_hi, f.const(c_hi))
    p_error = fma(builder, s_hi, f.const(c_hi), builder.fneg(p_hi))  # exact
    p_lo = fma(builder, tail, f.const(c_hi), fma(builder, s_hi, f.const(c_lo), p_error))
    # head + p_hi + p_lo: |p_hi| <= 1/6 < |head| unless head is 0
    total, error = fast_two_sum(builder, head, p_hi)
    return fast_two_sum(builder, total, builder.fadd(error, p_lo))


def _pow_float32(builder, x, y):
    """The fast path's x ** y of positive normal float32 x and finite y below
    ``POW_FAST_Y_F32``. t = y log2 x = t_hi + t_lo exactly from the pair; 2^t = 2^n 2^f,
    f = (t_hi - n) + t_lo rounded once, 2^f = 1 + f E(f) rounded once, 2^n into the
    exponent bits; 0 below 2^-150.5, inf from 2^128."""
    f = Float(x.type)
    log_hi, log_lo = _log2_float32(builder, x)
    t_hi = builder.fmul(y, log_hi)
    t_lo = fma(builder, y, log_lo, fma(builder, y, log_hi, builder.fneg(t_hi)))
    # |t_hi| < 2^20 (|y| below POW_FAST_Y_F32), so |t_lo| < 2^-3: from 2^128.49 up the
    # result overflows to inf all the same
    underflows = builder.fcmp_ordered("<", t_hi, f.const(_POW_UNDERFLOW_F32))
    t_hi = minimum(builder, t_hi, f.const(_POW_OVERFLOW_F32))
    below, above = _EXP2_SHIFTS_F32
    large = builder.fcmp_ordered(">=", t_hi, f.const(0.0))
    rounder = builder.select(large, f.const(_ROUNDER_F32 + above),
                             f.const(_ROUNDER_F32 + below))
    rounded = builder.fadd(t_hi, rounder)
    n = builder.fsub(rounded, rounder)
    fraction = builder.fadd(builder.fsub(t_hi, n), t_lo)  # t_hi - n exact
    value = fma(builder, fraction, horner(builder, fraction, _EXP2_F32), f.const(1.0))
    exponent_bits = builder.shl(builder.bitcast(rounded, f.int), f.iconst(23))
    scaled = builder.bitcast(builder.add(builder.bitcast(value, f.int), exponent_bits), f.ty)
    # 0 before the multiply: one that underflows to 0 (or reads a denormal) is slow (exp)
    scaled = builder.select(underflows, f.const(0.0), scaled)
    return builder.fmul(scaled, builder.select(large, f.const(2.0 ** -above),
                                               f.const(2.0 ** -below)))


def _fast_lanes(builder, x, y):
    """True where the float32 fast path's x ** y is the result: x positive normal, |y|
    below ``POW_FAST_Y_F32``."""
    f = Float(x.type)
    # x itself in the compare: negative x wraps around to the top, rare too
    rare = builder.or_(outside_normal_float32(builder, x),
                       builder.fcmp_unordered(">=", fabs(builder, y), f.const(POW_FAST_Y_F32)))
    return builder.not_(rare)


def _pow_float32_general(builder, x, y):
    """float32 x ** y with every special case: |x|^y by the fast path where |x| is normal
    and y finite (negative bases get its results: a power of two to an integer power
    exact, underflow ties rounded to even), else by the general code in float64; then
    C99's cases."""
    wide = Float(x.type).other(F64).ty
    wide_x, wide_y = builder.fpext(x, wide), builder.fpext(y, wide)
    magnitude = fabs(builder, wide_x)
    fast = _pow_float32(builder, fabs(builder, x), y)
    fast_lanes = _fast_lanes(builder, fabs(builder, x), y)
    result = builder.select(fast_lanes, builder.fpext(fast, wide),
                            _pow_float_magnitude(builder, magnitude, wide_y))
    return builder.fptrunc(special_cases(builder, wide_x, wide_y, magnitude, result), x.type)


def pow(builder, x, y):  # noqa: A001 - NumPy's name
    """x ** y for floats."""
    f = Float(x.type)
    if f.element == F64:
        return _pow_double(builder, x, y, precise=True)
    fast = _pow_float32(builder, x, y)
    rare = builder.not_(_fast_lanes(builder, x, y))
    literals = {role: float(value.constant) for role, value in (("x", x), ("y", y))
                if isinstance(value, ir.Constant)}
    if len(literals) == 1:
        # A literal base or exponent is built into a slow path of its own: passed as an
        # argument, LLVM's interprocedural constant propagation drops it from the slow
        # function's signature, which then matches none of its vector variants, and the
        # loop stayed scalar (x ** 1.5: 7.6 ms a 1024x1024 call against 1.3; 10 ** y 2.7).
        (role, value), = literals.items()
        name = f"pow_{role}{int(np.array(value, np.float32).view(np.uint32)):08x}"

        def slow(inner, lanes):
            literal = constant(lanes.type, value)
            return _pow_float32_general(inner, *((literal, lanes) if role == "x"
                                                 else (lanes, literal)))

        return rare_path(builder, name, rare, fast, y if role == "x" else x, slow)
    return rare_path(builder, "pow", rare, fast, (x, y), _pow_float32_general)


SMALL_INTEGER_EXPONENTS = (3, 4, -2, -3, -4)


def pow_small_integer(builder, x, exponent):
    """float32 x ** n for a literal n of ``SMALL_INTEGER_EXPONENTS`` (else None): x^2 is
    exact in float64, x^3 and x^4 round once there, 1/x^|n| once more, so the float32
    result is the correctly rounded one but for float64 ties (2^-52 relative): within
    0.5 ulp, where pow's fast path is within 0.54 and sends negative x to the rare path.
    C99's cases come out of the arithmetic: signed zeros and infinities (x^3 keeps the
    sign, 1/(-0)^3 is -inf), overflow to inf, underflow to 0, NaN."""
    if exponent not in SMALL_INTEGER_EXPONENTS or Float(x.type).element != F32:
        return None
    d = Float(x.type).other(F64)
    wide = builder.fpext(x, d.ty)
    square = builder.fmul(wide, wide)  # exact
    magnitude = abs(exponent)
    if magnitude == 2:
        power = square
    else:
        power = builder.fmul(square, wide if magnitude == 3 else square)
    if exponent < 0:
        power = builder.fdiv(d.const(1.0), power)
    return builder.fptrunc(power, x.type)
