"""sin, cos and tan: range reduction by pi/2 and the kernels on [-pi/4, pi/4].

float32 runs at full vector width: below 2^20 (every argument a model is likely to see)
a Cody-Waite reduction in float32 gives r = |x| - q pi/2 as a float-float pair exact to
about 2^-45 of r, even where x is closest to a multiple of pi/2; float32 polynomials
evaluate sin(r) and cos(r) with their leading terms corrected for the pair's low part.
Larger arguments, infinities and NaN take the float64 Payne-Hanek reduction below as a
rare path (``math_rare_path``): per vector, and only when some lane needs it.

float64 reduces every argument by Payne-Hanek without branches: x * 2/pi mod 4 from a
table of 2/pi's bits, exact enough everywhere up to the largest double (see
``_Reduction``); fdlibm's kernels evaluate the result.

tan reduces once. float32 evaluates tan(r) by its own polynomial, rounded once with the
reduction's low part, and in odd quadrants -1/tan(r) by one division (within NumPy's own
float32 error, not 1 ulp: ``codegen/mathlib.py``). float64 divides fdlibm's sin(r) and
cos(r) (-cos/sin in odd quadrants), kept as pairs, the quotient corrected by its exact
residual.

>>> reduction = _REDUCTION_FLOAT
>>> reduction.row_exponent(0), reduction.row_exponent(1)
(-24, 41)
"""

from __future__ import annotations

import fractions
import functools
import math
from typing import NamedTuple

import numpy as np
from llvmlite import ir

from .dtypes import F32, F64, I1, I64
from .math_core import (
    Float,
    fabs,
    fast_two_sum,
    fma,
    horner,
    rint,
    split_whole,
    two_product,
    two_sum,
)
from .math_rare_path import rare_path


# --- Payne-Hanek ------------------------------------------------------------------------
def _pi_bits(bits):
    """floor(pi * 2^bits) (or one less), by Machin's formula pi = 16 atan(1/5) - 4 atan(1/239)
    in integers."""
    guard = 64
    one = 1 << (bits + guard)

    def arctan_of_inverse(n):
        total, power, k = 0, one // n, 0
        while power:
            term = power // (2 * k + 1)
            total += -term if k % 2 else term
            power //= n * n
            k += 1
        return total

    return (16 * arctan_of_inverse(5) - 4 * arctan_of_inverse(239)) >> guard


class _Reduction(NamedTuple):
    """How ``_reduce_half_pi`` finds x * 2/pi mod 4 for one precision.

    |x| = M * 2^e with M an integer below 2^(mantissa_bits + span): e is fixed for each
    ``span`` consecutive exponents (one row), and row e holds F = 2^e * 2/pi mod 4 in
    ``pieces`` 53-bit pieces at fixed bit positions (2^1 .. 2^-51, 2^-52 .. 2^-104, ...).
    Then x * 2/pi = M * F mod 4: the multiples of 4 that M * (2^e * 2/pi) also holds do not
    change sin or cos, and are never formed. Fixed positions make every product M * piece
    a multiple of 2^-51, 2^-104, ..., which keeps the sums exact where they cancel. The
    pieces must reach M * 2^-bits below x's closest approach to a multiple of pi/2 (2^-61.5
    for float64, 2^-29.9 for float32) by the precision the result needs.
    """

    mantissa_bits: int  # 53 (float64 inputs) or 24 (float32 inputs, in float64)
    span: int
    rows: int
    pieces: int

    def row_exponent(self, row):
        """e of ``row``, whose rows start at |x| = 0.5 (smaller |x| need no reduction)."""
        return -1 + self.span * row - (self.mantissa_bits - 1)


# float64: 65 rows of 4 pieces (M < 2^69: 2^-141 from the pieces left out), a table the
# vectorized loop gathers from. float32: two rows of 3 pieces (M < 2^89: 2^-68), selected.
_REDUCTION_DOUBLE = _Reduction(mantissa_bits=53, span=16, rows=65, pieces=4)
_REDUCTION_FLOAT = _Reduction(mantissa_bits=24, span=65, rows=2, pieces=3)
_TWO_OVER_PI_BITS = 1200  # rows reach 2^971 * 2/pi, pieces 2^-210 below that


@functools.lru_cache(maxsize=None)
def _two_over_pi_rows(reduction):
    """The rows' pieces, row after row."""
    two_over_pi = (1 << (2 * _TWO_OVER_PI_BITS + 1)) // _pi_bits(_TWO_OVER_PI_BITS)
    values = []
    for row in range(reduction.rows):
        # F = (2^e * 2/pi) mod 4 as an integer count of 2^(e - BITS)
        fraction_bits = _TWO_OVER_PI_BITS - reduction.row_exponent(row)
        reduced = two_over_pi % (1 << (fraction_bits + 2))
        for piece in range(reduction.pieces):
            low_bit = 51 + 53 * piece  # this piece holds bits 2^(1 - 53 piece) .. 2^-low_bit
            chunk = (reduced >> (fraction_bits - low_bit)) & ((1 << 53) - 1)
            values.append(math.ldexp(chunk, -low_bit))
    return tuple(values)


def _two_over_pi_pieces(builder, reduction, row):
    """The pieces of ``row`` (an i64 per element): loaded from a constant table, or
    selected between constants when there are only two rows."""
    values = _two_over_pi_rows(reduction)
    f = Float(row.type).other(F64) if isinstance(row.type, ir.VectorType) else Float(F64)
    if reduction.rows == 2:
        second = builder.icmp_signed("!=", row, f.iconst(0))
        return [builder.select(second, f.const(values[reduction.pieces + piece]),
                               f.const(values[piece])) for piece in range(reduction.pieces)]
    assert f.lanes is None, "the table is read by scalar code (the loop vectorizer gathers)"
    module = builder.module
    name = f"tracejit_two_over_pi_{reduction.mantissa_bits}"
    table = module.globals.get(name)
    if table is None:
        array_type = ir.ArrayType(F64, len(values))
        table = ir.GlobalVariable(module, array_type, name)
        table.initializer = ir.Constant(array_type, list(values))
        table.global_constant = True
        table.linkage = "private"
        table.align = 64
    start = builder.mul(row, ir.Constant(I64, reduction.pieces))
    pieces = []
    for piece in range(reduction.pieces):
        index = builder.add(start, ir.Constant(I64, piece))
        address = builder.gep(table, [ir.Constant(I64, 0), index], inbounds=True,
                              source_etype=table.value_type)
        pieces.append(builder.load(address, typ=F64))
    return pieces


_HALF_PI_HI = 1.5707963267948966
_HALF_PI_LO = 6.123233995736766e-17


def _reduce_half_pi(builder, magnitude, reduction):
    """|x| (float64, x finite) as ``quadrant * pi/2 + (r_hi + r_lo)`` with |r| <= pi/4:
    Payne-Hanek without branches (see ``_Reduction``). Returns the quadrant as an i64
    (only its two low bits mean anything) and r as a double-double."""
    f = Float(magnitude.type)
    bits = builder.bitcast(magnitude, f.int)
    # biased exponent - 1022: the row count from |x| = 0.5 on (negative below)
    exponent = builder.sub(builder.lshr(bits, f.iconst(52)), f.iconst(1022))
    row = builder.sdiv(exponent, f.iconst(reduction.span))
    row = builder.select(builder.icmp_signed("<", row, f.iconst(0)), f.iconst(0), row)
    offset = builder.sub(exponent, builder.mul(row, f.iconst(reduction.span)))
    # M: the mantissa bits under the exponent that makes its last bit 2^offset
    mantissa = builder.bitcast(builder.or_(
        builder.and_(bits, f.iconst((1 << 52) - 1)),
        builder.shl(builder.add(offset, f.iconst(1023 + reduction.mantissa_bits - 1)),
                    f.iconst(52))), f.ty)
    table = _two_over_pi_pieces(builder, reduction, row)

    high0, low0 = two_product(builder, mantissa, table[0])  # multiples of 2^-51
    high1, low1 = two_product(builder, mantissa, table[1])  # multiples of 2^-104
    if reduction.pieces == 4:
        high2, low2 = two_product(builder, mantissa, table[2])
        tail = builder.fadd(low2, builder.fmul(mantissa, table[3]))
    else:
        high2 = builder.fmul(mantissa, table[2])  # within 2^-67

    # high0 reaches 2^91: take it mod 4 first so the quadrant count stays exact.
    high0 = fma(builder, rint(builder, builder.fmul(high0, f.const(0.25))), f.const(-4.0),
                high0)
    quadrant0, fraction0 = split_whole(builder, high0)
    quadrant1, fraction1 = split_whole(builder, low0)
    quadrant2, fraction2 = split_whole(builder, high1)
    # Both multiples of 2^-51 and at most 1/2: their sum is exact.
    quadrant3, hi = split_whole(builder, builder.fadd(fraction0, fraction1))
    hi, lo = two_sum(builder, hi, fraction2)
    if reduction.pieces == 3:
        # float32 needs the fraction within 2^-65 only. Where it cancels, hi + lo is already
        # below 2^-13 (what remains is at most that), so plain sums of the rest suffice.
        fraction = builder.fadd(hi, builder.fadd(builder.fadd(lo, low1), high2))
        quadrant4, fraction = split_whole(builder, fraction)
        r_hi, r_lo = builder.fmul(fraction, f.const(_HALF_PI_HI)), f.const(0.0)
    else:
        hi, error = two_sum(builder, hi, low1)
        lo = builder.fadd(lo, error)
        hi, error = two_sum(builder, hi, high2)
        lo = builder.fadd(builder.fadd(lo, error), tail)
        quadrant4, hi = split_whole(builder, hi)
        hi, lo = fast_two_sum(builder, hi, lo)
        # r = (hi + lo) * pi/2 in double-double
        r_hi = builder.fmul(hi, f.const(_HALF_PI_HI))
        r_lo = builder.fadd(fma(builder, hi, f.const(_HALF_PI_HI), builder.fneg(r_hi)),
                            fma(builder, hi, f.const(_HALF_PI_LO),
                                builder.fmul(lo, f.const(_HALF_PI_HI))))
    quadrant = builder.fadd(builder.fadd(builder.fadd(quadrant0, quadrant1),
                                         builder.fadd(quadrant2, quadrant3)), quadrant4)

    # |x| <= pi/4 needs no reduction (and tiny x have no row).
    small = builder.fcmp_ordered("<=", magnitude, f.const(math.pi / 4))
    r_hi = builder.select(small, magnitude, r_hi)
    r_lo = builder.select(small, f.const(0.0), r_lo)
    quadrant = builder.select(small, f.iconst(0), builder.fptosi(quadrant, f.int))
    return quadrant, r_hi, r_lo


# --- float64 kernels ------------------------------------------------------------------------
# fdlibm's __kernel_sin and __kernel_cos (|r| <= pi/4, r = x + y), as musl writes them.
_SIN_DOUBLE = (-1.66666666666666324348e-01, 8.33333333332248946124e-03,
               -1.98412698298579493134e-04, 2.75573137070700676789e-06,
               -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS_DOUBLE = (4.16666666666666019037e-02, -1.38888888888741095749e-03,
               2.48015872894767294178e-05, -2.75573143513906633035e-07,
               2.08757232129817482790e-09, -1.13596475577881948265e-11)
# FreeBSD's __sindf and __cosdf: double polynomials accurate enough for a float result.
_SIN_FLOAT = tuple(map(float.fromhex, ("-0x15555554cbac77.0p-55", "0x111110896efbb2.0p-59",
                                       "-0x1a00f9e2cae774.0p-65", "0x16cd878c3b46a7.0p-71")))
_COS_FLOAT = tuple(map(float.fromhex, ("-0x1ffffffd0c5e81.0p-54", "0x155553e1053a42.0p-57",
                                       "-0x16c087e80f1e27.0p-62", "0x199342e0ee5069.0p-68")))


def _sin_kernel_parts(builder, x, y):
    """sin(x + y) for |x + y| <= pi/4, |y| tiny, as x - t (not yet rounded):
    t = (z*(y/2 - v*r) - y) - v*S1."""
    f = Float(x.type)
    z = builder.fmul(x, x)
    v = builder.fmul(z, x)
    r = horner(builder, z, list(_SIN_DOUBLE[1:]))
    inner = builder.fsub(builder.fmul(z, builder.fsub(builder.fmul(y, f.const(0.5)),
                                                      builder.fmul(v, r))), y)
    return x, builder.fsub(inner, builder.fmul(v, f.const(_SIN_DOUBLE[0])))


def _sin_kernel(builder, x, y):
    head, tail = _sin_kernel_parts(builder, x, y)
    return builder.fsub(head, tail)


def _cos_kernel_parts(builder, x, y):
    """cos(x + y) for |x + y| <= pi/4 as w + (((1 - w) - z/2) + (z*r - x*y)), w = 1 - z/2
    (not yet added)."""
    f = Float(x.type)
    z = builder.fmul(x, x)
    r = builder.fmul(z, horner(builder, z, list(_COS_DOUBLE)))
    half_z = builder.fmul(z, f.const(0.5))
    w = builder.fsub(f.const(1.0), half_z)
    correction = builder.fadd(builder.fsub(builder.fsub(f.const(1.0), w), half_z),
                              builder.fsub(builder.fmul(z, r), builder.fmul(x, y)))
    return w, correction


def _cos_kernel(builder, x, y):
    return builder.fadd(*_cos_kernel_parts(builder, x, y))


def _sin_kernel_float(builder, x):
    z = builder.fmul(x, x)
    return fma(builder, builder.fmul(z, x), horner(builder, z, list(_SIN_FLOAT)), x)


def _cos_kernel_float(builder, x):
    z = builder.fmul(x, x)
    return fma(builder, z, horner(builder, z, list(_COS_FLOAT)), Float(x.type).const(1.0))


def _sign_and_quadrant(builder, quadrant, sine, cosine, x_bits, quadrant_shift, f_int):
    """sin or cos of x from sin(r) and cos(r): quadrant (plus the shift, 1 for cos) picks
    and negates, sin's result takes x's sign (sin(-x) = -sin(x), -0.0 included)."""
    quadrant = builder.add(quadrant, f_int.iconst(quadrant_shift))
    odd = builder.trunc(quadrant, f_int.like(I1))
    negate = builder.trunc(builder.lshr(quadrant, f_int.iconst(1)), f_int.like(I1))
    result = builder.select(odd, cosine, sine)
    if quadrant_shift == 0:
        negative = builder.icmp_signed("<", x_bits, _zero_like(x_bits))
        negate = builder.xor(negate, negative)
    return builder.select(negate, builder.fneg(result), result)


def _zero_like(value):
    ty = value.type
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, 0)] * ty.count)
    return ir.Constant(ty, 0)


def _reduced_wide(builder, x):
    """The branch-free Payne-Hanek reduction of ``|x|`` by pi/2, in float64 (a float32 x
    widened): ``(double, wide_f, wide, magnitude, quadrant, r_hi, r_lo)``."""
    f = Float(x.type)
    double = f.double
    wide_f = f if double else f.other(F64)
    wide = x if double else builder.fpext(x, wide_f.ty)
    magnitude = fabs(builder, wide)
    quadrant, r_hi, r_lo = _reduce_half_pi(
        builder, magnitude, _REDUCTION_DOUBLE if double else _REDUCTION_FLOAT)
    return double, wide_f, wide, magnitude, quadrant, r_hi, r_lo


def _finished_wide(builder, x, result, wide, magnitude, wide_f, double):
    """``result`` where x is finite (inf and NaN give NaN), rounded back to x's type."""
    finite = builder.fcmp_ordered("<", magnitude, wide_f.const(math.inf))
    result = builder.select(finite, result, builder.fsub(wide, wide))
    return result if double else builder.fptrunc(result, x.type)


def _sin_or_cos_wide(builder, x, quadrant_shift):
    """sin (shift 0) or cos (shift 1) of x by the branch-free Payne-Hanek reduction:
    float64 x, or float32 x computed in float64 (scalar or vector)."""
    double, wide_f, wide, magnitude, quadrant, r_hi, r_lo = _reduced_wide(builder, x)
    if double:
        sine, cosine = _sin_kernel(builder, r_hi, r_lo), _cos_kernel(builder, r_hi, r_lo)
    else:
        sine, cosine = _sin_kernel_float(builder, r_hi), _cos_kernel_float(builder, r_hi)
    result = _sign_and_quadrant(builder, quadrant, sine, cosine,
                                builder.bitcast(wide, wide_f.int), quadrant_shift, wide_f)
    return _finished_wide(builder, x, result, wide, magnitude, wide_f, double)


# --- float32 at full width ----------------------------------------------------------------
def _float32(value):
    """``value`` rounded to float32 (as a Python float)."""
    return float(np.float32(value))


def _float32_parts(value, count, below=False):
    """``value`` (a positive Fraction) as ``count`` float32s, each the float32 nearest to
    (or, ``below``, the largest not above) what the ones before leave."""
    parts = []
    for _ in range(count):
        part = np.float32(float(value))
        if below and fractions.Fraction(float(part)) > value:
            part = np.nextafter(part, np.float32(0))
        parts.append(float(part))
        value -= fractions.Fraction(parts[-1])
    return tuple(parts)


_HALF_PI_FRACTION = fractions.Fraction(_pi_bits(200), 1 << 201)
# pi/2 = C1 + C2 + C3 (+ 2^-75 or so): C1 * q is formed exactly inside a fused multiply-add
# and |x| - q C1 is exact (both multiples of 2^-23, the result below 1).
_HALF_PI_F32 = _float32_parts(_HALF_PI_FRACTION, 3)
# The same with every part rounded down (all positive; 2^-73 left out): tan reduces x with
# its sign, and then -0.0 must stay -0.0 (q = +0 for it, so each q C_i is a zero of C_i's
# sign, and -0.0 + +0.0 would be +0.0). C1 keeps its last bit at 2^-23, so x - q C1 is
# still exact.
_HALF_PI_F32_BELOW = _float32_parts(_HALF_PI_FRACTION, 3, below=True)
_TWO_OVER_PI_F32 = _float32(float(1 / _HALF_PI_FRACTION))
# Adding 1.5 * 2^23 rounds x * 2/pi to an integer held in the low mantissa bits.
_ROUNDER_F32 = 12582912.0
# Below 2^20 the float32 reduction is exact to 2^-45 of r (q < 2^20 keeps q C3 and the
# pieces left out of pi/2 below 2^-52, r at least 2^-24 there): larger |x| are rare.
FAST_LIMIT_F32 = float(1 << 20)
# minimax (Lawson) fits on |r| <= 0.8 (q may round to the neighbour of the nearest
# integer, which leaves |r| a little above pi/4), coefficients in float32:
# sin(r) = r + r^3 S(r^2) within 2^-26.8, cos(r) = 1 - r^2/2 + r^4 C(r^2) within 2^-30.2.
_SIN_F32 = (-0.16666653752326965, 0.008332070894539356, -0.00019503067596815526)
_COS_F32 = (0.04166664183139801, -0.0013887194218114018, 2.4419194232905284e-05)


def _reduce_half_pi_float32(builder, magnitude, half_pi=_HALF_PI_F32):
    """|x| below ``FAST_LIMIT_F32`` as ``q pi/2 + (hi + lo)``: q (an integer float and its
    integer bits) and r as a float-float. A negative x may be passed as it is: every step
    is odd in x (the rounder's ties go to even on both sides), so -x gives -q, -hi, -lo to
    the bit, and q's low bits are its two's complement's (q mod 4). With ``half_pi`` =
    ``_HALF_PI_F32_BELOW`` a -0.0 reduces to -0.0."""
    f = Float(magnitude.type)
    c1, c2, c3 = half_pi
    rounded = fma(builder, magnitude, f.const(_TWO_OVER_PI_F32), f.const(_ROUNDER_F32))
    q = builder.fsub(rounded, f.const(_ROUNDER_F32))
    quadrant = builder.bitcast(rounded, f.int)  # the low bits are q's
    r1 = fma(builder, builder.fneg(q), f.const(c1), magnitude)  # exact
    # r1 - q C2 as (hi, e) exactly, q C2 split by a fused multiply-add, then q C3. Fast2Sum
    # is exact here in either order of magnitude: where |r1| >= |q C2| by the usual
    # condition, and where |r1| < |q C2| because r1 is a multiple of 2^-23 (x and q C1 are,
    # for x >= 1; below 1, q <= 1 and |r1| > 0.5 > |C2|), hence of ulp(q C2), with fewer
    # than 2^24 of them (Boldo, Graillat and Muller's condition): three operations fewer
    # than TwoSum, the same bits.
    product, product_error = two_product(builder, q, f.const(c2))
    hi, error = fast_two_sum(builder, r1, builder.fneg(product))
    lo = fma(builder, builder.fneg(q), f.const(c3), builder.fsub(error, product_error))
    return quadrant, hi, lo


def _sin_cos_float32(builder, hi, lo):
    """(sin(hi + lo), cos(hi + lo)) for |hi| <= 0.8, |lo| <= 2^-23 |hi|."""
    f = Float(hi.type)
    z = builder.fmul(hi, hi)
    half = builder.fmul(z, f.const(0.5))
    # sin: hi + (hi z S(z) + lo (1 - z/2)); lo's factor is cos(hi) to 2^-5, enough for it.
    lo_scaled = fma(builder, builder.fneg(lo), half, lo)
    sine = builder.fadd(hi, fma(builder, builder.fmul(hi, z), horner(builder, z, _SIN_F32),
                                lo_scaled))
    # cos: 1 + t, t = -hi^2/2 + (z^2 C(z) - hi lo) rounded once, hi^2/2 exact inside the
    # fused multiply-add (-hi/2 is exact): |t| <= 0.32, so t's rounding costs at most a
    # quarter of an ulp of the result and the add to 1 half of one. Before, 1 - z/2 was
    # rounded and what it and z lost were added back: four operations more a vector,
    # 5-7% of a float32 sin or cos (issue 16); within 0.836 ulp of exact on every float32
    # of [1e-7, 16) (0.741 before), 0.917 on the whole fast path's sweep as before.
    tail = fma(builder, builder.fmul(z, z), horner(builder, z, _COS_F32),
               builder.fneg(builder.fmul(hi, lo)))
    t = fma(builder, builder.fmul(hi, f.const(-0.5)), hi, tail)
    return sine, builder.fadd(f.const(1.0), t)


def _beyond_fast_reduction(builder, magnitude):
    """The lanes the float32 reduction leaves to the rare path: |x| from ``FAST_LIMIT_F32``
    up, infinities and NaN (their bits are above, as unsigned integers). Compared as
    integers: LLVM computes a float compare into a mask again after the rare path's branch
    (for the select that merges its result), a second operation on Zen 4's multiply-add
    pipes that bound these loops (sin, cos, tan: one a vector fewer, tan 3% faster); an
    integer compare's mask it keeps."""
    f = Float(magnitude.type)
    limit = int(np.array(FAST_LIMIT_F32, np.float32).view(np.uint32))
    return builder.icmp_unsigned(">=", builder.bitcast(magnitude, f.int), f.iconst(limit))


def _sin_or_cos_float32(builder, x, quadrant_shift):
    f = Float(x.type)
    magnitude = fabs(builder, x)
    quadrant, hi, lo = _reduce_half_pi_float32(builder, magnitude)
    sine, cosine = _sin_cos_float32(builder, hi, lo)
    result = _sign_and_quadrant(builder, quadrant, sine, cosine, builder.bitcast(x, f.int),
                                quadrant_shift, f)
    rare = _beyond_fast_reduction(builder, magnitude)
    name = "cos" if quadrant_shift else "sin"
    return rare_path(builder, name, rare, result, x,
                     lambda b, v: _sin_or_cos_wide(b, v, quadrant_shift))


def sin(builder, x):
    if x.type == F32:
        return _sin_or_cos_float32(builder, x, 0)
    return _sin_or_cos_wide(builder, x, 0)


def cos(builder, x):
    if x.type == F32:
        return _sin_or_cos_float32(builder, x, 1)
    return _sin_or_cos_wide(builder, x, 1)



# --- tan ------------------------------------------------------------------------------------
def _tan_quotient(builder, odd, sine, cosine):
    """tan(r) = sin(r)/cos(r), or -cot(r) = -cos(r)/sin(r) where ``odd`` (negation left to
    the caller), from (head, tail) pairs of sin(r) and cos(r) with |tail| <= |head| /2:
    n/d as q = n * (1/d) corrected by the residual (n - q d exact by a fused multiply-add,
    plus n_lo - q d_lo), one division. Within 0.5 ulp and a little more, where a plain n/d
    of rounded sin and cos may be 1.5 ulp off."""
    f = Float(sine[0].type)
    sine, sine_low = fast_two_sum(builder, *sine)
    cosine, cosine_low = fast_two_sum(builder, *cosine)
    numerator = builder.select(odd, cosine, sine)
    numerator_low = builder.select(odd, cosine_low, sine_low)
    denominator = builder.select(odd, sine, cosine)
    denominator_low = builder.select(odd, sine_low, cosine_low)
    inverse = builder.fdiv(f.const(1.0), denominator)
    quotient = builder.fmul(numerator, inverse)
    residual = fma(builder, builder.fneg(quotient), denominator, numerator)
    residual = fma(builder, builder.fneg(quotient), denominator_low,
                   builder.fadd(residual, numerator_low))
    return fma(builder, residual, inverse, quotient)


def _tan_wide(builder, x):
    """tan by the branch-free Payne-Hanek reduction: float64 x, or float32 x computed in
    float64; inf and NaN give NaN."""
    double, wide_f, wide, magnitude, quadrant, r_hi, r_lo = _reduced_wide(builder, x)
    odd = builder.trunc(quadrant, wide_f.like(I1))
    if double:
        head, tail = _sin_kernel_parts(builder, r_hi, r_lo)
        quotient = _tan_quotient(builder, odd, (head, builder.fneg(tail)),
                                 _cos_kernel_parts(builder, r_hi, r_lo))
    else:
        # float32 from float64 kernels: one rounding to float32 at the end is enough
        sine, cosine = _sin_kernel_float(builder, r_hi), _cos_kernel_float(builder, r_hi)
        quotient = builder.fdiv(builder.select(odd, cosine, sine),
                                builder.select(odd, sine, cosine))
    negate = builder.xor(odd, builder.icmp_signed("<", builder.bitcast(wide, wide_f.int),
                                                  wide_f.iconst(0)))
    result = builder.select(negate, builder.fneg(quotient), quotient)
    return _finished_wide(builder, x, result, wide, magnitude, wide_f, double)


# tan(r) = r + r^3 T(r^2) on |r| <= 0.83 (the float32 reduction's reach), within 2^-28.0
# of tan(r): a minimax fit with float32 coefficients (docs/experiments/float32_polynomials/
# fit.py tan; six terms reach 2^-24.5 only, up to 0.7 ulp of it).
_TAN_F32 = (0.3333337604999542, 0.13331781327724457, 0.054157089442014694,
            0.020795151591300964, 0.012059646658599377, -0.001413032179698348,
            0.005093606188893318)


def _tan_float32(builder, x):
    """float32 tan below ``FAST_LIMIT_F32``: one reduction to r = hi + lo, tan(r) = hi +
    (hi^3 T(hi^2) + lo (1 + hi^2)) rounded once, and -1/tan(r) in odd quadrants by one
    division: within NumPy's own float32 error (see ``codegen/mathlib.py``), where the
    float-float quotient this replaced was within 1 ulp at 1.7 times the cost.

    x is reduced with its sign (tan is odd, and so is every step: the same bits as
    reducing |x| and negating, without a sign mask and a masked negation, two operations on
    the multiply-add pipes), and the tail is z (hi T + lo) + lo, z = hi^2: hi z T + lo (1 +
    z) in two fused multiply-adds instead of three (the multiply hi z goes). The loop is
    bound by its operations on the two multiply-add pipes (on Zen 4 compares into masks,
    mask moves and masked logic run there too): 18 of them a 16-lane vector against 21."""
    f = Float(x.type)
    magnitude = fabs(builder, x)
    quadrant, hi, lo = _reduce_half_pi_float32(builder, x, _HALF_PI_F32_BELOW)
    z = builder.fmul(hi, hi)
    # lo's factor sec^2(hi) = 1 + tan^2(hi) to 1 + hi^2: lo is below 2^-23 |hi|
    tail = fma(builder, z, fma(builder, hi, horner(builder, z, _TAN_F32), lo), lo)
    tangent = builder.fadd(hi, tail)
    odd = builder.trunc(quadrant, f.like(I1))
    result = builder.select(odd, builder.fdiv(f.const(-1.0), tangent), tangent)
    return rare_path(builder, "tan", _beyond_fast_reduction(builder, magnitude), result, x,
                     _tan_wide)


def tan(builder, x):
    if x.type == F32:
        return _tan_float32(builder, x)
    return _tan_wide(builder, x)
