"""x ** y for floats: exp(y log x) and C99's special cases (NumPy's).

float64 takes log(x) as a double-double (within about 2^-64: y log x reaches 745 and must
carry 53 bits), multiplies it by y exactly and exponentiates the pair.

float32 on AVX-512 hosts runs at full vector width in float32 (``_pow_float32_wide``, 16
lanes a vector where float64 has 8; issue 16): x = 2^k z, r = z/c_i - 1 exact by one
multiply-add (1/c_i on a coarse grid; five 32-entry float32 tables read by ``vpermi2ps``,
``math_table``), ln x = k ln2 + ln c_i + r - r^2/2 + r^3 Q(r) as a float-float pair (the
r^2/2 and every sum's error kept: y ln x reaches 104 and must carry about 2^-32 of it),
t = y ln x as a pair, e^t = 2^(n + j/32) e^r' (2^(j/32) as a float32 and its rest from
tables, e^r' of degree 3), 2^n by one ``vscalefps`` (``math_scale``): denormal results,
overflow and underflow in the fast path itself, no selects. Only x not positive normal or
|y| >= 2^120 take the rare path. Within 0.557 ulp of exact on normal results (39 million
pairs: the tests', the benchmark's, and random bases near 1, in (0, 4) and over every
binade with |y ln x| up to 104), 0.757 on denormal ones (rounded twice, to 24 bits
then to the denormal's bits, as float32 exp's two steps). One thread, 1024x1024, CPU
time, interleaved in one process with the float64 tables' path below (``USE_WIDE``), the
machine shared (load 13): (0, 100] ** [-3, 3] 0.850 ms a call against 1.270 (NumPy
0.758); (0, 1000] ** [-15, 15] 0.806 against 1.233 (NumPy 11.6); (0, 1] ** [0, 200] 0.810
against 1.249 (NumPy 54); negative bases to integer powers (the rare path) 4.94 against
6.08. The hot loop: 67 instructions for 16 lanes (21 multiplies and multiply-adds, 12 adds,
5 permutes, 11 moves), where the float64 tables' ran 58 for 8 lanes; NumPy's (SVML's
powf16) 45 besides moves. r as (z (1/c_i) - 1) + its rounding error with 1/c_i to 24
bits (|r| <= 2^-6, Q of degree 2) took 3 operations more (70 instructions): 5% slower.

Elsewhere (and for a literal base) float32 takes the float64 paths: float32 needs y log x
to about 2^-27 only where the result is a float32 (|y log x| < 104),
so float64 with short series suffices, rounded to float32 once. Its fast path covers
positive normal x and finite y. On AVX-512 hosts it reads three 16-entry float64 tables
by permutes (``math_table``; ``_pow_float32_tables``): x = 2^k z from the float32 bits,
log2 x = k + log2 c_i + r P(r) with r = z/c_i - 1 by one fused multiply-add (no
division) and P of degree 5, t = y log2 x, 2^t = 2^(n + j/16) 2^r' with r' = t - (n +
j/16) exact, 2^(j/16) from a table, 2^r' of degree 4, n added to its exponent bits: within
0.5042 ulp of exact on the tests' pairs (0.5436 before). Without AVX-512 (where
``math_table`` reads a table lane by lane) and for a literal base, the division's path:
s = (m-1)/(m+1) by one float64 division, log2 x = k + 2 atanh(s)/ln2 to s^11,
2^t = 2^n 2^r with n rounded by adding 1.5 * 2^52, r = t - n exact and 2^r a minimax
polynomial of degree 7. One thread, 1024x1024 (0, 100] ** [-3, 3], CPU time, both paths
compiled and interleaved in one process, three runs (machine shared, load 14-15): tables
1.200-1.203 ms a call against 1.307-1.312 (NumPy 0.72, not counting a run where it was
disturbed); (0, 1000] ** [-15, 15] 1.27 against 1.29; all bases negative (the rare path's
general code, which takes |x|^y from the same fast path) 6.0 against 5.4 (NumPy 56).
Negative, zero, denormal, infinite and NaN x and infinite or NaN y take the general code,
with every special case of C99 (the sign of a negative x to an odd integer power, NaN to
a non-integer one), as a rare path
(``math_rare_path``): the sign tests cost a positive base 17-25% (one thread, 1024x1024,
CPU time: 1.35-1.40 ms a call against 1.65). A float32 base to a literal 3, 4, -2, -3 or
-4 (``x ** 3``, of either sign) is ``pow_small_integer``: products in float64, rounded
once.

Measured slower on the AVX-512 host (Zen 4; one thread, 1024x1024 float32, CPU time,
interleaved): glibc's and ARM optimized-routines' powf (log2 by a 16-entry table of 1/c
and log2 c and a degree-6 polynomial, 2^t by a 32-entry table and a cubic, no division,
within 0.51 ulp) at 2.3 ms a call against this code's 1.6 (the sign tests still in its
fast path then): the loop vectorizer turns the three table reads into six gathers per 16
lanes. Estrin's scheme for the two polynomials here: no difference (the kernel is bound
by its ~56 float64 operations per 16 lanes, not their chain). NumPy's own (SVML, 1.15
ulp): 0.8. A float32 core at full vector width (issue 16; one thread, 1024x1024, CPU time,
interleaved, the machine loaded): log2 x as a float-float pair (x = 2^k m, m split in three
around 2^(-1/3), 1, 2^(1/3) by selects, s = (m - c)/(m + c) by one division and its exact
residual, an atanh tail of degree 2), t = y log2 x as a pair, 2^t = 2^n 2^f with f rounded
once and n into the exponent bits (2^(n + 25) then 2^-25 below 1, 2^(n - 1) then 2 above,
by selects), within 0.98 ulp of exact: 1.16 ms against this code's 1.29 on (0, 100] **
[-3, 3], but 1.67 against 1.32 on (0, 1000] ** [-15, 15] and 1.74 against 1.31 on (0, 1] **
[0, 200] (denormal results of a float32 multiply are slow on this host; this code rounds
them from float64), 5.9 against 5.5 on negative bases. Every float-float step it needs
costs about what the float64 arithmetic does: one piece of mantissa (no selects) was 1.9
ulp off at |t| ~ 125, dropping s_lo s^2 1.4 ulp, two pieces 1.5 ulp; pow stayed in float64.
NumPy's (SVML's powf16) computes in float32 with two 32-entry tables read by vpermt2ps:
45 vector operations (moves aside) for 16 lanes, where this fast path's loop runs 8 lanes
an iteration in 34, most of them 512-bit float64 ones (issue 16: 0.9x NumPy on two
threads). Matching it needs those permutes, which the loop vectorizer does not produce
from scalar IR (table reads become gathers, measured above), and float32 arithmetic
carrying log2 x to about 2^-35 of it (x near 1 to a large y), done by float64 here.
The tables' permutes (now made, ``math_table``) are not free on Zen 4 either: each costs
about two multiply-adds' issue, so float32 log10 with three 16-entry tables and a
polynomial of degree 3 (8 multiply-adds instead of 11) ran 0.251 ms against 0.232. What
the tables bought pow is the division and a chain from x to the result about 60% as
long (the multiply-adds and multiplies stay 16 for 8 lanes against 15), which is what
this loop waits on: log2(1 + r), r = m - 1, by one polynomial of degree 13 (no division)
took 1.52 ms by Horner's scheme and 1.33 by Estrin's (the division's path then 1.29).
Issue 16's 2x NumPy on two threads needs
one thread's CPU time at NumPy's (0.70 ms): even y log2 x and 2^t with too few terms
(log to s^5, exp to r^4, no division: wrong results) ran 0.96 ms in float64 at 8 lanes.
"""

from __future__ import annotations

import fractions
import math

import numpy as np
from llvmlite import ir

from .dtypes import F32, F64
from .math_core import (
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
from .math_log import log_reduce, outside_normal_float32, reduce_float32
from .math_rare_path import rare_path
from .math_scale import scale_float32
from .math_table import permutes, table_lookup, table_lookup_float32

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


# log2 m = s (c1 + c3 s^2 + ... + c11 s^10), c_j = 2/(j ln 2), for s <= 0.1716: within
# 2^-34 (the atanh series); 2^r = 1 + r (e1 + r (e2 + ...)) to r^7 for |r| <= 1/2: within
# 2^-34.3 (a Lawson fit with the constant term 1 held).
_LOG2_FAST = [2.0 / ((2 * k + 1) * math.log(2.0)) for k in range(6)]
_EXP2_FAST = [1.0, 0.6931471807045375, 0.24022651066567563, 0.05550410365976445,
              0.009618038131313416, 0.001333393506657433, 0.0001546675651711873,
              1.519615417917688e-05]
# Beyond 2^+-300 the float32 result is inf or 0 all the same; within it 2^n goes straight
# into a float64's exponent field.
_EXPONENT_REACH = 300.0
_ROUNDER_F64 = 6755399441055744.0  # 1.5 * 2^52


def _pow_float32(builder, x, y):
    """The fast path's x ** y of float32 lanes (garbage where the rare path takes over):
    y log2 x in float64, 2^n 2^r, rounded to float32 once."""
    f = Float(x.type)
    d = f.other(F64)
    k_int, _, m = reduce_float32(builder, x)
    # s = m1 / (m1 + 2) by one float64 division (m1 + 2 is exact there): the divider runs
    # beside the multiply-adds, where a float32 quotient refined in float64 took six more
    # operations and two more conversions per half vector (94 instructions a vector of 16
    # lanes on AVX-512, now 82).
    wide_m1 = builder.fpext(builder.fsub(m, f.const(1.0)), d.ty)  # m - 1 exact
    s = builder.fdiv(wide_m1, builder.fadd(wide_m1, d.const(2.0)))
    log2_x = fma(builder, s, horner(builder, builder.fmul(s, s), _LOG2_FAST),
                 builder.sitofp(k_int, d.ty))
    t = minimum(builder, maximum(builder, builder.fmul(builder.fpext(y, d.ty), log2_x),
                                 d.const(-_EXPONENT_REACH)), d.const(_EXPONENT_REACH))
    # n = rint(t) by adding 1.5 * 2^52: n lands in the low mantissa bits of the sum, from
    # where a shift moves it to the exponent field (no rounding or conversion instruction)
    rounded = builder.fadd(t, d.const(_ROUNDER_F64))
    n = builder.fsub(rounded, d.const(_ROUNDER_F64))
    value = horner(builder, builder.fsub(t, n), _EXP2_FAST)  # r = t - n is exact
    # 2^n value: n added to the exponent field (value is near 1, the result normal)
    shifted = builder.shl(builder.bitcast(rounded, d.int), d.iconst(52))
    scaled = builder.bitcast(builder.add(builder.bitcast(value, d.int), shifted), d.ty)
    return builder.fptrunc(scaled, x.type)


# The table-driven fast path (``_pow_float32_tables``): x = 2^k z, z in [OFF, 2 OFF) from
# the float32 bits, its 16 subintervals (2^19 bit patterns each) indexed by the bits below
# the exponent; c_i the middle of subinterval i (1 for the one holding 1.0, so that
# log2 of a power of two is exact), INVC_i = 1/c_i, LOGC_i = log2 c_i (to a float64 ulp:
# y log2 x needs 2^-33), |z INVC_i - 1| <= 0.0297.
_TABLE_OFFSET_BITS = 0x3F330000
_TABLE_SHIFT = 19  # 23 mantissa bits less log2(16)


def _subinterval_inverse(index):
    first, last = (float(np.array(_TABLE_OFFSET_BITS + (index + step) * (1 << _TABLE_SHIFT),
                                  np.uint32).view(np.float32)) for step in (0, 1))
    return 1.0 if first <= 1.0 < last else 2.0 / (first + last)


_TABLE_INVC = [_subinterval_inverse(index) for index in range(16)]
_TABLE_LOGC = [-math.log2(invc) for invc in _TABLE_INVC]
# log2(1 + r) = r P(r), P of degree 5 for |r| <= 0.0297, and 2^r for |r| <= 1/32 of degree
# 4 with its constant term 1: least squares on Chebyshev nodes, within 2^-38.1 and 2^-38.5
# of them relatively.
_TABLE_LOG2 = (1.442695040893326, -0.7213475204578491, 0.480898257516301,
               -0.36067363844040906, 0.2888106306798382, -0.24072650739452786)
_TABLE_EXP2 = (1.0, 0.6931471801625684, 0.24022650689483083, 0.055505736315274196,
               0.009618339704421134)
# 2^(j/16), j = 0..15, as float64 bits less j << 48: adding n << 52 + j << 48 (the low bits
# of t + 1.5 * 2^48 hold 16 t rounded) gives 2^(n + j/16) without a conversion.
_TABLE_EXP2_BITS = [float(np.array(int(np.array(2.0 ** (j / 16)).view(np.uint64)) - (j << 48),
                                   np.uint64).view(np.float64)) for j in range(16)]
_SIXTEENTHS_ROUNDER = 1.5 * 2.0 ** 48


def _pow_float32_tables(builder, x, y):
    """The fast path's x ** y of float32 lanes with 16-entry tables (``math_table``: a
    permute per table and 8 lanes on AVX-512): log2 x = k + log2 c_i + r P(r) with
    r = z/c_i - 1 by one fused multiply-add (no division), t = y log2 x, 2^t = 2^(n + j/16)
    2^r' with the table's 2^(j/16) and r' = t - (n + j/16) exact, |r'| <= 1/32: degree 4
    instead of 7. float64 throughout, rounded to float32 once."""
    f = Float(x.type)
    d = f.other(F64)
    bits = builder.bitcast(x, f.int)
    offset = builder.sub(bits, f.iconst(_TABLE_OFFSET_BITS))
    index = builder.and_(builder.lshr(offset, f.iconst(_TABLE_SHIFT)), f.iconst(15))
    exponent_field = builder.and_(offset, f.iconst(-(1 << 23)))
    z = builder.fpext(builder.bitcast(builder.sub(bits, exponent_field), f.ty), d.ty)
    k = builder.sitofp(builder.ashr(exponent_field, f.iconst(23)), d.ty)
    invc = table_lookup(builder, "pow_invc", _TABLE_INVC, index)
    logc = table_lookup(builder, "pow_logc", _TABLE_LOGC, index)
    r = fma(builder, z, invc, d.const(-1.0))
    # P(r) by pairs (Estrin): the chain from x to the result is what bounds this loop
    r2 = builder.fmul(r, r)
    c = _TABLE_LOG2
    pairs = [fma(builder, r, d.const(c[j + 1]), d.const(c[j])) for j in (0, 2, 4)]
    poly = fma(builder, builder.fmul(r2, r2), pairs[2], fma(builder, r2, pairs[1], pairs[0]))
    log2_x = fma(builder, r, poly, builder.fadd(logc, k))
    t = minimum(builder, maximum(builder, builder.fmul(builder.fpext(y, d.ty), log2_x),
                                 d.const(-_EXPONENT_REACH)), d.const(_EXPONENT_REACH))
    rounded = builder.fadd(t, d.const(_SIXTEENTHS_ROUNDER))
    rounded_bits = builder.bitcast(rounded, d.int)
    reduced = builder.fsub(t, builder.fsub(rounded, d.const(_SIXTEENTHS_ROUNDER)))  # exact
    sixteenth = builder.trunc(builder.and_(rounded_bits, d.iconst(15)), f.int)
    power = builder.bitcast(table_lookup(builder, "pow_exp2", _TABLE_EXP2_BITS, sixteenth),
                            d.int)
    power = builder.bitcast(builder.add(power, builder.shl(rounded_bits, d.iconst(48))), d.ty)
    q = _TABLE_EXP2
    reduced2 = builder.fmul(reduced, reduced)
    value = fma(builder, reduced2,
                fma(builder, reduced2, d.const(q[4]), fma(builder, reduced, d.const(q[3]),
                                                          d.const(q[2]))),
                fma(builder, reduced, d.const(q[1]), d.const(q[0])))
    return builder.fptrunc(builder.fmul(power, value), x.type)


# The float32 fast path at full vector width (``_pow_float32_wide``): x = 2^k z with z in
# [OFF, 2 OFF), OFF = 0.7421875, cut into 32 subintervals of 2^18 bit patterns each; the one
# holding 1.0 straddles it ([1 - 1/128, 1 + 1/64), c = 1, r = z - 1). ln c = -ln(1/c), split
# in a part on multiples of 2^-16 (k ln2_hi + that part is exact in float32) and the rest;
# |ln c| exceeds |ln(1 + r)| in every subinterval but the straddling one (a fast two-sum).
_WIDE_OFFSET_BITS = 0x3F3E0000
_WIDE_SHIFT = 18  # 23 mantissa bits less log2(32)
_WIDE_BELOW_ONE = 0.9921875  # the end of the subinterval below the one holding 1.0


def _float32(value):
    return float(np.float32(value))


def _float32_of_bits(bits):
    return float(np.array(bits, np.uint32).view(np.float32))


def _wide_inverse(index):
    """1/c_i on a grid of 64ths (32nds below 1, where z has one more bit): z (1/c_i) - 1
    then fits a float32 (at most 24 bits from 2^-6 down), so one multiply-add takes r
    exactly, |r| <= 0.0235. c = 1 also just below the subinterval holding 1.0: there ln x
    (k = 0) would be ln c - |ln(1 + r)|, down to 2^-7 against ln c's low part of 2^-17,
    whose roundings then cost 0.1 ulp at |y ln x| = 88; elsewhere |ln x| >= 0.0155."""
    first, last = (_float32_of_bits(_WIDE_OFFSET_BITS + (index + step) * (1 << _WIDE_SHIFT))
                   for step in (0, 1))
    grid = 64 if first >= 1.0 else 32
    if first <= 1.0 < last or last == _WIDE_BELOW_ONE:
        return 1.0
    return round(grid * 2.0 / (first + last)) / grid


_WIDE_INVC = [_wide_inverse(index) for index in range(32)]
_WIDE_LOGC_HI = [round(-math.log(invc) * 2.0**16) / 2.0**16 for invc in _WIDE_INVC]
_WIDE_LOGC_LO = [_float32(-math.log(invc) - hi) for invc, hi in zip(_WIDE_INVC, _WIDE_LOGC_HI)]
_LN2_HI_F32 = 0.693145751953125  # 16 bits: k ln2_hi is exact for |k| < 2^7
_LN2_LO_F32 = _float32(math.log(2.0) - _LN2_HI_F32)
# ln(1 + r) = r - r^2/2 + r^3 Q(r), Q of degree 3 for |r| <= 0.0235 (float32 coefficients,
# least squares on Chebyshev nodes): within 2^-39 of ln(1 + r) relatively. Stored times -2
# (the code multiplies by -r^3/2).
_WIDE_LOG_TAIL = (-0.6666666269302368, 0.4999999701976776, -0.40022027492523193,
                  0.33353984355926514)
# e^t = 2^(n + j/32) e^r, n + j/32 = t/ln2 rounded to 32nds by adding 1.5 * 2^18 (the
# sum's low 5 bits hold j), r = t - (n + j/32) ln2 with ln2 in two parts (exact products
# in fused multiply-adds), |r| <= ln2/64; e^r = 1 + r + r^2 (E0 + E1 r) within 2^-33.
# 2^(j/32) is a float32 T_j and its rest T_j U_j.
_WIDE_ROUNDER = 1.5 * 2.0**18
_WIDE_INV_LN2 = _float32(1.0 / math.log(2.0))
_WIDE_LN2_HI = _float32(math.log(2.0))
_WIDE_LN2_LO = _float32(math.log(2.0) - _WIDE_LN2_HI)
_WIDE_EXP_TAIL = (0.5000041723251343, 0.16666753590106964)
_WIDE_EXP2_HI = [_float32(2.0 ** (j / 32)) for j in range(32)]
_WIDE_EXP2_LO = [_float32((2.0 ** (j / 32) - hi) / hi) for j, hi in enumerate(_WIDE_EXP2_HI)]
# |y| from here on takes the rare path: y ln x stays finite below it (|ln x| < 104).
_WIDE_Y_REACH = 2.0**120


def _pow_float32_wide(builder, x, y):
    """The fast path's x ** y of float32 lanes at full vector width (garbage where the rare
    path takes over: x not a positive normal float, y not finite), denormal results and
    overflow included: ln x =
    k ln2 + ln c_i + ln(1 + r) as a float-float pair, r = z/c_i - 1 exact, the r^2/2 of the
    series exact as a pair, y ln x as a pair, e^t by a 32-entry table of 2^(j/32)."""
    f = Float(x.type)
    bits = builder.bitcast(x, f.int)
    offset = builder.sub(bits, f.iconst(_WIDE_OFFSET_BITS))
    index = builder.lshr(offset, f.iconst(_WIDE_SHIFT))  # the table reads its low 5 bits
    exponent_field = builder.and_(offset, f.iconst(-(1 << 23)))
    z = builder.bitcast(builder.sub(bits, exponent_field), f.ty)
    k = builder.sitofp(builder.ashr(exponent_field, f.iconst(23)), f.ty)
    invc = table_lookup_float32(builder, "pow_invc", _WIDE_INVC, index)
    logc_hi = table_lookup_float32(builder, "pow_logc_hi", _WIDE_LOGC_HI, index)
    logc_lo = table_lookup_float32(builder, "pow_logc_lo", _WIDE_LOGC_LO, index)
    r = fma(builder, z, invc, f.const(-1.0))  # exact (``_wide_inverse``)
    # ln(1 + r) = r + (-r^2/2) + r^3 Q(r)
    half = builder.fmul(r, f.const(-0.5))
    square = builder.fmul(r, half)  # -r^2/2, its rounding error taken below
    whole = fma(builder, k, f.const(_LN2_HI_F32), logc_hi)  # exact
    low = builder.fadd(r, square)  # |square| <= |r|/128
    # r + (-r^2/2) - low exactly (r - low is), and the square's error, rounded once
    low_error = fma(builder, r, half, builder.fsub(r, low))
    log_hi = builder.fadd(whole, low)  # whole is 0 or beyond 0.015 > |low|
    log_error = builder.fadd(builder.fsub(whole, log_hi), low)
    tail = horner(builder, r, _WIDE_LOG_TAIL)
    log_lo = fma(builder, k, f.const(_LN2_LO_F32), logc_lo)
    log_lo = builder.fadd(log_lo, builder.fadd(low_error, log_error))
    log_lo = fma(builder, builder.fmul(r, square), tail, log_lo)  # r^3 Q as (-r^3/2)(-2Q)
    # t = y ln x as a pair; |y| < 2^120 (else the rare path) keeps it finite
    t = builder.fmul(y, log_hi)
    t_lo = fma(builder, y, log_lo, fma(builder, y, log_hi, builder.fneg(t)))
    # t/ln2 rounded to 32nds by adding 1.5 * 2^18 (the sum's low bits hold 32 of it) from
    # t + t_lo: t_lo reaches 2^-11 t where ln x cancels (ln c_i's low part is up to 2^-17,
    # ln x down to 2^-6), and r must stay within the series' range
    rounded = fma(builder, builder.fadd(t, t_lo), f.const(_WIDE_INV_LN2),
                  f.const(_WIDE_ROUNDER))
    steps = builder.fsub(rounded, f.const(_WIDE_ROUNDER))  # n + j/32
    reduced = fma(builder, steps, f.const(-_WIDE_LN2_HI), t)  # the product is exact
    reduced = fma(builder, steps, f.const(-_WIDE_LN2_LO), reduced)
    # garbage where |t| is beyond a float32 result's (inf there): kept finite
    reduced = minimum(builder, maximum(builder, builder.fadd(reduced, t_lo), f.const(-0.05)),
                      f.const(0.05))
    rounded_bits = builder.bitcast(rounded, f.int)  # its low 5 bits: j
    power = table_lookup_float32(builder, "pow_exp2", _WIDE_EXP2_HI, rounded_bits)
    power_lo = table_lookup_float32(builder, "pow_exp2_lo", _WIDE_EXP2_LO, rounded_bits)
    # e^r - 1 + U = r (1 + r (E0 + E1 r)) + U; 2^(j/32) e^r = T (1 + that), rounded once,
    # then 2^n = 2^floor(steps) by one scaling, rounded once more only where the result is
    # denormal (vscalefps on AVX-512: ``math_scale``)
    series = fma(builder, reduced, fma(builder, reduced, fma(
        builder, reduced, f.const(_WIDE_EXP_TAIL[1]), f.const(_WIDE_EXP_TAIL[0])),
        f.const(1.0)), power_lo)
    return scale_float32(builder, fma(builder, power, series, power), steps)


# None: the tables where the host permutes float64 (AVX-512), else the division's path;
# tests set it to test both.
USE_TABLES = None


def _fast_float32(builder, x, y):
    """A literal base keeps the division's path: LLVM folds its log2 x to a constant there,
    and would fold the tables' indices into their scalar functions' signatures, which then
    match none of their vector variants (an invalid module)."""
    use = USE_TABLES if USE_TABLES is not None else permutes()
    use = use and not isinstance(x, ir.Constant)
    return (_pow_float32_tables if use else _pow_float32)(builder, x, y)


def _pow_float32_general(builder, x, y):
    """float32 x ** y with every special case: |x|^y by the fast path where |x| is normal
    (negative bases get its results: a power of two to an integer power exact, underflow
    ties rounded to even), else by the general code in float64; then C99's cases."""
    wide = Float(x.type).other(F64).ty
    wide_x, wide_y = builder.fpext(x, wide), builder.fpext(y, wide)
    magnitude = fabs(builder, wide_x)
    fast = builder.fpext(_fast_float32(builder, fabs(builder, x), y), wide)
    normal = builder.not_(outside_normal_float32(builder, fabs(builder, x)))
    result = builder.select(normal, fast, _pow_float_magnitude(builder, magnitude, wide_y))
    return builder.fptrunc(special_cases(builder, wide_x, wide_y, magnitude, result), x.type)


# None: the full-width float32 path where the host permutes float32 tables (AVX-512),
# else the float64 fast paths above; tests set it to test both.
USE_WIDE = None


def _use_wide(x):
    """A literal base keeps the float64 paths (``_fast_float32``)."""
    use = USE_WIDE if USE_WIDE is not None else permutes()
    return use and not isinstance(x, ir.Constant)


def pow(builder, x, y):  # noqa: A001 - NumPy's name
    """x ** y for floats."""
    f = Float(x.type)
    if f.element == F64:
        return _pow_double(builder, x, y, precise=True)
    # x itself in the compare: negative x wraps around to the top, rare too
    wide = _use_wide(x)
    rare = builder.or_(outside_normal_float32(builder, x), builder.fcmp_unordered(
        ">=", fabs(builder, y), f.const(_WIDE_Y_REACH if wide else math.inf)))
    fast = (_pow_float32_wide if wide else _fast_float32)(builder, x, y)
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
