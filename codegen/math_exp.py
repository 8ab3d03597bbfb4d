"""exp, exp2, expm1 and tanh: x = n ln2 + r, |r| <= ln2/2, and a polynomial for e^r.

float32 has a fast path at full vector width: n comes from one fused multiply-add (adding
1.5 * 2^23 rounds x/ln2 to an integer held in the low mantissa bits), e^r - 1 from a
minimax polynomial. exp adds n + 25 to the exponent bits of e^r and multiplies by 2^-25,
which is exact for normal results and rounds denormal ones (x in [-103.97, -87.34)), so
that large negative arguments stay on the fast path: where exp rounds to 0 (-inf
included) the 0 is selected. A masked softmax (``np.where(mask, s, -np.inf)``) and scores
far below their row's peak send many of them, and a vector with one such lane would
otherwise run the general code on all of its lanes. Large results (x > 70; beyond it
2^(n + 25) is not a float) and NaN take the general code as a rare path
(``math_rare_path``): per vector, only when a lane needs it. expm1 and tanh add n to the
exponent bits of normal results, for |x| <= 86.

exp2 reduces exactly (n = rint(x), r = x - n), so exp2 of an integer is the exact power
of two; e^(r ln2) takes r ln2 as a float-float pair, and then exp's polynomial and
scaling (float32 fast for x in (-150, 101]).

The general code (float64, and float32's rare paths; exp's in float64) reduces with
``reduce_ln2``, sums the Taylor series and scales in two steps, so results overflow to inf
and underflow through the denormals to 0 as NumPy's.
"""

from __future__ import annotations

import math

from . import math_tanh
from .dtypes import F32, F64
from .math_core import (
    Float,
    clamp_exponent,
    copysign,
    fabs,
    fma,
    horner,
    is_nan,
    minimum,
    pow2,
    reduce_ln2,
    rint,
    scale,
)
from .math_rare_path import rare_path

_TAYLOR_TERMS = {F64: 13, F32: 7}
_EXPM1_LOW = {F64: -38.0, F32: -17.0}  # below this expm1 rounds to -1
_TANH_CLAMP = {F64: 19.5, F32: 9.5}  # beyond this tanh rounds to +-1

# float32 fast path: (e^r - 1 - r) / r^2 for |r| <= 0.347, a minimax (Lawson) fit with
# float32 coefficients, within 2^-27.7 of e^r relatively.
_EXPM1_F32 = (0.4999999403953552, 0.1666651964187622, 0.041668396443128586,
              0.008368786424398422, 0.0013814453268423676)
_LOG2E_F32 = 1.4426950216293335
_ROUNDER_F32 = 12582912.0  # 1.5 * 2^23
# |x| <= 86 keeps n within [-125, 125]: 2^n * e^r is a normal float (expm1, tanh).
FAST_LIMIT_F32 = 86.0
# The least float32 whose exp is not 0 (it is 2^-149); below it exp (and NumPy's) is 0.
UNDERFLOW_F32 = -103.97207641601562
# exp applies 2^n as 2^(n + 25) in the exponent bits, then a multiply by 2^-25:
# e^r 2^(n + 25) is a normal float for n in [-150, 101], x in [-104, 70].
_EXP_SHIFT_F32 = 25
EXP_FAST_LIMIT_F32 = 70.0


def _taylor_expm1(builder, r):
    """expm1(r) for |r| <= ln2/2: Taylor series r + r^2/2! + ... (the general code)."""
    terms = _TAYLOR_TERMS[Float(r.type).element]
    coefficients = [1.0 / math.factorial(k) for k in range(1, terms + 1)]
    return builder.fmul(r, horner(builder, r, coefficients))


def _reduce_float32(builder, x, shift=0):
    """((n + shift) << 23 as integer bits, expm1(r)) for float32 x = n ln2 + r, |x| <= 86."""
    f = Float(x.type)
    rounder = f.const(_ROUNDER_F32 + shift)
    rounded = fma(builder, x, f.const(_LOG2E_F32), rounder)
    n = builder.fsub(rounded, rounder)
    # rounded's bits are 0x4b400000 + n + shift: shifted, only n + shift stays, at the
    # exponent.
    exponent_bits = builder.shl(builder.bitcast(rounded, f.int), f.iconst(23))
    r = fma(builder, n, f.const(-f.ln2_hi), x)
    r = fma(builder, n, f.const(-f.ln2_lo), r)
    reduced = fma(builder, builder.fmul(r, r), horner(builder, r, _EXPM1_F32), r)
    return exponent_bits, reduced


def _times_pow2(builder, value, exponent_bits):
    """value * 2^n by adding n to the exponent (the result must stay a normal float)."""
    f = Float(value.type)
    return builder.bitcast(builder.add(builder.bitcast(value, f.int), exponent_bits), f.ty)


def exp_rare_lanes(builder, x):
    """The float32 lanes exp leaves to the general code: large and overflowing results and
    NaN (x > 70 or unordered); denormal results and underflow to 0 stay on the fast path."""
    return builder.fcmp_unordered(">", x, Float(x.type).const(EXP_FAST_LIMIT_F32))


def expm1_rare_lanes(builder, x):
    """The float32 lanes expm1 leaves to the general code: overflow and NaN (below -17
    expm1 is -1, selected on the fast path)."""
    return builder.fcmp_unordered(">", x, Float(x.type).const(FAST_LIMIT_F32))


# --- exp ----------------------------------------------------------------------------------
def _exp_general(builder, x):
    f = Float(x.type)
    n, r = reduce_ln2(builder, x)
    polynomial = builder.fadd(_taylor_expm1(builder, r), f.const(1.0))
    # Clamp n so the two-step scale stays in range; overflow and underflow are selected below.
    result = scale(builder, polynomial, clamp_exponent(builder, n, f), f)
    result = builder.select(builder.fcmp_ordered(">", x, f.const(f.exp_high)),
                            f.const(math.inf), result)
    result = builder.select(builder.fcmp_ordered("<", x, f.const(f.exp_low)),
                            f.const(0.0), result)
    return builder.select(is_nan(builder, x), x, result)


def exp(builder, x):
    if x.type != F32:
        return _exp_general(builder, x)
    f = Float(x.type)
    exponent_bits, reduced = _reduce_float32(builder, x, shift=_EXP_SHIFT_F32)
    # 2^n in two steps: 2^(n + 25) into the bits of e^r, then a multiply by 2^-25, exact
    # for normal results; denormal ones round there a second time (within 0.75 ulp).
    scaled = _times_pow2(builder, builder.fadd(reduced, f.const(1.0)), exponent_bits)
    # Where exp is 0 the bits above are garbage (n out of range; NaN from -inf): 0 before
    # the multiply, which must not underflow there either: on this AVX-512 host a million
    # floats, half -inf, took 0.42-0.52 ms with the 0 selected after it (or computed by
    # it), 0.26 ms so, 0.25 all finite.
    underflows = builder.fcmp_ordered("<", x, f.const(UNDERFLOW_F32))
    scaled = builder.select(underflows, f.const(0.0), scaled)
    fast = builder.fmul(scaled, f.const(2.0 ** -_EXP_SHIFT_F32))
    return rare_path(builder, "exp", exp_rare_lanes(builder, x), fast, x,
                     _exp_general_float32)


def _exp_general_float32(builder, x):
    """float32 exp by the float64 general code, rounded once: its float32 form is 1.13 ulp
    off at worst, more than the bound, on (70, 86], which is the rare path's now."""
    wide = Float(x.type).other(F64).ty
    return builder.fptrunc(_exp_general(builder, builder.fpext(x, wide)), x.type)


# --- exp2 ---------------------------------------------------------------------------------
# ln 2 as a float32 head and tail (float32 r ln2 as a float-float pair)
_LN2_F32 = (0.6931471824645996, -1.9046542121259336e-09)
_LN2_F64 = (6.93147180559945286227e-01, 2.319046813846299558e-17)
EXP2_FAST_LIMIT_F32 = 101.0  # n + 25 <= 126: 2^(n + 25) e^r stays a normal float
# NumPy's float32 exp2 is 0 from -149.5 down (correctly rounded, 2^x would be 2^-149 down
# to -150): the same zeros here, exactly where NumPy has them.
EXP2_UNDERFLOW_F32 = -149.5
_EXP2_OVERFLOW = {F32: 128.0, F64: 1024.0}


def _exp2_general(builder, x):
    """exp2 of float64 (and of float32 in float64, rounded once): n = rint(x) and
    r = x - n exactly, e^(r ln2) with r ln2 as a double-double."""
    f = Float(x.type)
    n = rint(builder, x)
    r = builder.fsub(x, n)  # exact
    head, tail = _LN2_F64 if f.double else _LN2_F32
    product = builder.fmul(r, f.const(head))
    low = fma(builder, r, f.const(tail), fma(builder, r, f.const(head), builder.fneg(product)))
    reduced = _taylor_expm1(builder, product)
    # e^(p + low) - 1 = expm1(p) + low e^p
    reduced = fma(builder, low, builder.fadd(reduced, f.const(1.0)), reduced)
    result = scale(builder, builder.fadd(reduced, f.const(1.0)),
                   clamp_exponent(builder, n, f), f)
    result = builder.select(builder.fcmp_ordered(">=", x, f.const(_EXP2_OVERFLOW[f.element])),
                            f.const(math.inf), result)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(-math.inf)),
                            f.const(0.0), result)
    return builder.select(is_nan(builder, x), x, result)


def _exp2_general_float32(builder, x):
    wide = Float(x.type).other(F64).ty
    return builder.fptrunc(_exp2_general(builder, builder.fpext(x, wide)), x.type)


def exp2(builder, x):
    """2^x: exact for integer x (as NumPy's); float32 at full width below 101."""
    if x.type != F32:
        return _exp2_general(builder, x)
    f = Float(x.type)
    rounder = f.const(_ROUNDER_F32 + _EXP_SHIFT_F32)
    rounded = builder.fadd(x, rounder)  # n + 25 in the low mantissa bits
    n = builder.fsub(rounded, rounder)
    exponent_bits = builder.shl(builder.bitcast(rounded, f.int), f.iconst(23))
    r = builder.fsub(x, n)  # exact
    head, tail = _LN2_F32
    product = builder.fmul(r, f.const(head))
    low = fma(builder, r, f.const(tail), fma(builder, r, f.const(head), builder.fneg(product)))
    reduced = fma(builder, builder.fmul(product, product), horner(builder, product, _EXPM1_F32),
                  product)
    reduced = fma(builder, low, builder.fadd(reduced, f.const(1.0)), reduced)
    # 2^(n + 25) e^r, then 2^-25: exact for normal results, denormal ones rounded there
    scaled = _times_pow2(builder, builder.fadd(reduced, f.const(1.0)), exponent_bits)
    underflows = builder.fcmp_ordered("<=", x, f.const(EXP2_UNDERFLOW_F32))
    scaled = builder.select(underflows, f.const(0.0), scaled)
    fast = builder.fmul(scaled, f.const(2.0 ** -_EXP_SHIFT_F32))
    rare = builder.fcmp_unordered(">", x, f.const(EXP2_FAST_LIMIT_F32))
    return rare_path(builder, "exp2", rare, fast, x, _exp2_general_float32)


# --- expm1 --------------------------------------------------------------------------------
def _expm1_general(builder, x):
    f = Float(x.type)
    n, r = reduce_ln2(builder, x)
    n = clamp_exponent(builder, n, f)
    reduced = _taylor_expm1(builder, r)
    power = scale(builder, f.const(1.0), n, f)
    # 2^n * expm1(r) + (2^n - 1): exact 2^n - 1 keeps the relative accuracy near zero.
    result = fma(builder, power, reduced, builder.fsub(power, f.const(1.0)))
    # Near overflow 2^n alone is out of range; there the -1 is far below an ulp.
    large = builder.fcmp_ordered(">", n, f.const(float(f.mantissa_bits + 2)))
    result = builder.select(large, scale(builder, builder.fadd(reduced, f.const(1.0)), n, f),
                            result)
    result = builder.select(builder.fcmp_ordered(">", x, f.const(f.exp_high)),
                            f.const(math.inf), result)
    result = builder.select(builder.fcmp_ordered("<", x, f.const(_EXPM1_LOW[f.element])),
                            f.const(-1.0), result)
    return _keep_nan_and_zeros(builder, x, result)


def _keep_nan_and_zeros(builder, x, result):
    """x itself where x is NaN or zero (expm1(-0.0) is -0.0)."""
    keep = builder.or_(is_nan(builder, x), builder.fcmp_ordered("==", x, Float(x.type).const(0.0)))
    return builder.select(keep, x, result)


def expm1(builder, x):
    if x.type != F32:
        return _expm1_general(builder, x)
    f = Float(x.type)
    exponent_bits, reduced = _reduce_float32(builder, x)
    power = _times_pow2(builder, f.const(1.0), exponent_bits)
    # 2^n expm1(r) + (2^n - 1), as the general code (2^n - 1 is exact while it matters)
    fast = fma(builder, power, reduced, builder.fsub(power, f.const(1.0)))
    fast = builder.select(builder.fcmp_ordered("<", x, f.const(_EXPM1_LOW[F32])),
                          f.const(-1.0), fast)
    fast = builder.select(builder.fcmp_ordered("==", x, f.const(0.0)), x, fast)
    return rare_path(builder, "expm1", expm1_rare_lanes(builder, x), fast, x, _expm1_general)


# --- tanh ---------------------------------------------------------------------------------
# float32: tanh(x) = x + x^3 Q(x^2) for |x| < 0.7 (a least-squares fit on Chebyshev nodes
# in x^2, weighted towards minimax of the error relative to tanh, float32 coefficients:
# within 0.87 ulp there; docs/experiments/float32_polynomials/fit.py tanh prints them),
# else 1 - 2 / (e^(2|x|) + 1) (see tanh).
_TANH_SMALL_F32 = (-0.3333319127559662, 0.1332911103963852, -0.05355885624885559,
                   0.020091960206627846, -0.005138654727488756)
TANH_SMALL_LIMIT_F32 = 0.7
# What bounds the float32 loop, and what was measured and not kept (issue 16; one thread,
# 1024x1024 on [-10, 10], CPU time, variants compiled and interleaved in one process): 15
# operations a vector on the two multiply-add pipes, plus the division, which costs about
# three of them (a multiply in its place: 9% faster); the series below 0.7 is 30% of the
# time. e^r of degree 5 (2^-23.2): 5% faster, 1.43 ulp at 0.8665 (NumPy's own 1.37). e^r
# as a Pade [3/3] quotient inside the one division: no faster. em1 / (em1 + 2) below 0.7
# from the same exponential, no series, one division for both: 2% faster (selects and
# adds then bound the other pipes), 3.35 ulp at 0.031. NumPy's AVX-512 tanh (SVML) is a
# piecewise polynomial whose coefficients come from 32-entry tables by vpermt2ps: six
# multiply-adds, no division; the loop vectorizer makes gathers, not permutes, of table
# reads in the scalar code this library emits. Measured after (helper-136, same method, load
# 14): em1 / (em1 + 2) everywhere with em1 = 2^n p + (2^n - 1) and p = expm1(r) straight
# from the polynomial (no e^r - 1 cancellation, no series): 0.247 ms against 0.356, but
# 2.55 ulp at 0.062 and 2.2 at 0.20 (each of p, em1 + 2 and the quotient rounds, and p
# and tanh sit in different places of their binades); the quotient corrected by its exact
# residual and the rounding error of em1 + 2 (q += (em1 - q d - q d_err)(1 - q)/2): 1.73
# ulp at 0.062 with four operations more, which is what the series costs.


def _tanh_float32(builder, magnitude):
    """tanh of a float32 |x| (clamped to 9.5, or NaN) at full width: 1 - 2 / (E + 1) with
    E = e^(2|x|) = 2^n e^r, n added to e^r's exponent bits, E + 1 rounded once. An error in E
    moves the result by only 2E / (E + 1)^2 of it (0.32 at 0.7, less the larger |x|), so
    r = 2|x| - n ln2 takes ln2 as one float32 (r off by n 2^-29: under 0.02 ulp of the
    result). Below 0.7 an odd polynomial. Measured on every positive float32 up to 9.6:
    within 1.08 ulp (at 0.7011; the quotient e/(e + 2) it replaces was 1.50 at 3.81, and
    1 - 2/(E + 1) with the polynomial to 0.55 only is 1.56 at 0.556)."""
    f = Float(magnitude.type)
    rounder = f.const(_ROUNDER_F32)
    rounded = fma(builder, magnitude, f.const(2.0 * _LOG2E_F32), rounder)
    n = builder.fsub(rounded, rounder)
    # r / 2 = |x| - n ln2 / 2 (ln 2 rounded to float32): half of 2|x| - n ln2 to the bit,
    # without the multiply by 2 (the powers of two below are exact scalings too)
    half_r = fma(builder, n, f.const(-_LN2_F32[0] / 2), magnitude)
    # e^r = 1 + r + r^2 P(r): expm1's coefficients, with one more term of Horner's scheme,
    # the one of r^j times 2^(j + 1) for the polynomial in r / 2
    scaled = [c * 2.0 ** (j + 1) for j, c in enumerate((1.0,) + _EXPM1_F32)]
    e_r = fma(builder, half_r, horner(builder, half_r, scaled), f.const(1.0))
    # E = 2^n e^r by adding n to the exponent bits (exact: E is a normal float), then E + 1
    # rounded once: the same as 2^n e^r + 1 by a fused multiply-add, but an integer and an
    # add instruction instead, off the two multiply-add pipes that bound this loop
    exponential = _times_pow2(builder, e_r, builder.shl(builder.bitcast(rounded, f.int),
                                                        f.iconst(23)))
    result = builder.fsub(f.const(1.0), builder.fdiv(f.const(2.0),
                                                     builder.fadd(exponential, f.const(1.0))))
    squared = builder.fmul(magnitude, magnitude)
    series = fma(builder, builder.fmul(magnitude, squared),
                 horner(builder, squared, _TANH_SMALL_F32), magnitude)
    small = builder.fcmp_ordered("<", magnitude, f.const(TANH_SMALL_LIMIT_F32))
    return builder.select(small, series, result)


def tanh(builder, x):
    """float64: expm1(2|x|) / (expm1(2|x|) + 2), sign restored; float32 see
    ``math_tanh`` (AVX-512: polynomials from tables) or ``_tanh_float32``. With |x|
    clamped where tanh rounds to 1, 2^n stays a normal float and the exponential needs
    none of its range handling: one scale, no selects. float32's
    clamp keeps NaN (a NaN |x| fails the compare: one min instruction on x86, its operand
    order), which flows through the arithmetic to the result (float32 takes 2^n from the
    bits, no conversion); float64 clamps NaN too (its conversion of n to an integer must
    see a number) and puts it back at the end."""
    f = Float(x.type)
    magnitude = fabs(builder, x)
    clamp = f.const(_TANH_CLAMP[f.element])
    if f.element == F32:
        magnitude = builder.select(builder.fcmp_ordered(">", magnitude, clamp), clamp,
                                   magnitude)
        tables = math_tanh.use_tables(x)
        result = (math_tanh.tanh_tables if tables else _tanh_float32)(builder, magnitude)
    else:
        magnitude = minimum(builder, magnitude, clamp)
        n, r = reduce_ln2(builder, builder.fmul(magnitude, f.const(2.0)))
        power = pow2(builder, builder.fptosi(n, f.int), f)
        # 2^n expm1(r) + (2^n - 1); where 2^n - 1 rounds to 2^n the -1 is below an ulp
        e = fma(builder, power, _taylor_expm1(builder, r), builder.fsub(power, f.const(1.0)))
        result = builder.fdiv(e, builder.fadd(e, f.const(2.0)))
    result = copysign(builder, result, x)
    return result if f.element == F32 else builder.select(is_nan(builder, x), x, result)

