"""Vectorizable transcendental functions, emitted inline as LLVM IR.

Straight-line code (selects, no branches, no calls), so the loop vectorizer turns a
kernel's inner loop into SIMD code. Each function states its error bound, checked by
``tests/codegen/test_mathlib.py`` over the whole float range (denormals, zeros, infinities,
NaN, huge arguments, thresholds): against NumPy, and for float32 also against the
correctly rounded result (NumPy's own float32 SIMD exp, log and log1p are up to 2-3 ulp
off):

                vs NumPy            vs exact
    function   float32  float64    float32    method
    exp        3 ulp    2 ulp      1 ulp      Cody-Waite reduction by ln2, Taylor series
    expm1      3 ulp    2 ulp      2 ulp      2^n * expm1(r) + (2^n - 1)
    log        3 ulp    2 ulp      1 ulp      fdlibm: x = 2^k m, log(1+f) = f - hfsq + ...
    log1p      3 ulp    2 ulp      1 ulp      fdlibm, corrected for the rounding of 1 + x
    tanh       2 ulp    3 ulp      2 ulp      expm1(2|x|) / (expm1(2|x|) + 2), sign restored;
                                              float32 |x| < 0.55: odd polynomial
    sin, cos   2 ulp    2 ulp      1 ulp      Payne-Hanek by pi/2 (no branches), fdlibm kernels
    pow        2 ulp    2 ulp      1 ulp      exp(y log x), log in double-double; C99 cases
    erf        1 ulp    1 ulp      1 ulp      fdlibm's pieces, all computed and selected

Measured: sin, cos and pow are within 1 ulp of NumPy in both precisions; float64 sin and
cos within 0.75 ulp of the exact result over the whole range, float64 pow within 0.6 ulp.
The range reduction of sin and cos is exact enough everywhere, up to the largest float:
at the doubles closest to a multiple of pi/2 (the hardest inputs) float64 sin and cos stay
within 1 ulp of exact, where NumPy's own float64 sin is thousands of ulp off.

NumPy has no erf: its "vs NumPy" columns are against the eager primitive (fdlibm's
algorithm in NumPy, ``tracer/ops/special.py``). Measured: float32 erf is the correctly
rounded result everywhere in the sweep (0 ulp), float64 erf within 1 ulp of the eager one
(which rounds twice where x is denormal) and within 0.81 ulp of the exact result (mpmath,
on 260,000 points of [-6.2, 6.2] and tiny x; the eager one within 0.85).

float32 log, log1p, sin, cos, pow and erf run in float64 and round once.

fmod (np.mod and np.floor_divide of floats, LLVM's ``frem``) is the one operation left to
the C library: the loop still vectorizes, with one ``fmod`` call per lane.
"""

from __future__ import annotations

import fractions
import functools
import math
from typing import NamedTuple

from llvmlite import ir

from tracejit.tracer.ops import special

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


def _log_positive(builder, x):
    """log of a positive finite float64 (zeros, infinities and NaN give garbage)."""
    f = Float(F64)
    k, m1 = _log_reduce(builder, x)
    hfsq, tail = _log_tail(builder, m1)
    # k*ln2_hi - ((hfsq - (tail + k*ln2_lo)) - f): the exact m1 carries the result.
    inner = builder.fsub(builder.fsub(hfsq, builder.fadd(tail, builder.fmul(
        k, f.const(_LN2_LO)))), m1)
    return builder.fsub(builder.fmul(k, f.const(_LN2_HI)), inner)


@_in_double
def log(builder, x):
    f = Float(F64)
    result = _log_positive(builder, x)
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
    """expm1(2|x|) / (expm1(2|x|) + 2), sign restored. With |x| clamped where tanh rounds
    to 1, 2^n stays a normal float and expm1 needs none of its range handling: one scale,
    no selects (NaN is clamped too, then put back at the end)."""
    f = Float(x.type)
    magnitude = _intrinsic(builder, "fabs", x.type, x)
    magnitude = _select(builder, builder.fcmp_unordered(">", magnitude, f.const(f.tanh_clamp)),
                        f.const(f.tanh_clamp), magnitude)
    n, r = _reduce_ln2(builder, builder.fmul(magnitude, f.const(2.0)))
    scale = _pow2(builder, builder.fptosi(n, f.int), f)
    # 2^n expm1(r) + (2^n - 1); where 2^n - 1 rounds to 2^n the -1 is below an ulp anyway.
    e = fma(builder, scale, _expm1_reduced(builder, r, f), builder.fsub(scale, f.const(1.0)))
    result = builder.fdiv(e, builder.fadd(e, f.const(2.0)))
    if x.type != F64:
        # The quotient loses up to 3.2 ulp for small |x| in float32; below 0.55 an odd
        # polynomial (least squares on Chebyshev nodes in x^2) is within 0.72 ulp.
        squared = builder.fmul(magnitude, magnitude)
        series = fma(builder, builder.fmul(magnitude, squared),
                     _horner(builder, squared, _TANH_SMALL_F32), magnitude)
        result = _select(builder, builder.fcmp_ordered("<", magnitude, f.const(0.55)),
                         series, result)
    result = _intrinsic(builder, "copysign", x.type, result, x)
    return _select(builder, builder.fcmp_unordered("uno", x, x), x, result)


# tanh(x) = x + x^3 Q(x^2) for float32 |x| < 0.55 (see tanh).
_TANH_SMALL_F32 = (-0.3333331730564747, 0.13332580377686679, -0.05385186540024731,
                   0.02107025355979983, -0.00627260751421818)


# --- double-double arithmetic -----------------------------------------------------------
# Exact sums and products of two float64 as an unevaluated pair (hi, lo); no fast-math
# flags anywhere, so LLVM keeps every rounding where it is written.
def _two_sum(builder, a, b):
    """(a + b rounded, its rounding error)."""
    total = builder.fadd(a, b)
    b_part = builder.fsub(total, a)
    a_part = builder.fsub(total, b_part)
    error = builder.fadd(builder.fsub(a, a_part), builder.fsub(b, b_part))
    return total, error


def _fast_two_sum(builder, a, b):
    """``_two_sum`` for |a| >= |b|."""
    total = builder.fadd(a, b)
    return total, builder.fsub(b, builder.fsub(total, a))


def _two_product(builder, a, b):
    """(a * b rounded, its rounding error), exact with a fused multiply-add."""
    product = builder.fmul(a, b)
    return product, fma(builder, a, b, builder.fneg(product))


def _split_whole(builder, value):
    """(nearest integer, value - that integer): both exact."""
    whole = _intrinsic(builder, "rint", value.type, value)
    return whole, builder.fsub(value, whole)


# --- sin and cos ------------------------------------------------------------------------
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
    if reduction.rows == 2:
        second = builder.icmp_signed("!=", row, ir.Constant(I64, 0))
        return [_select(builder, second, ir.Constant(F64, values[reduction.pieces + piece]),
                        ir.Constant(F64, values[piece])) for piece in range(reduction.pieces)]
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
    f = Float(F64)
    bits = builder.bitcast(magnitude, I64)
    # biased exponent - 1022: the row count from |x| = 0.5 on (negative below)
    exponent = builder.sub(builder.lshr(bits, f.iconst(52)), f.iconst(1022))
    row = builder.sdiv(exponent, f.iconst(reduction.span))
    row = _select(builder, builder.icmp_signed("<", row, f.iconst(0)), f.iconst(0), row)
    offset = builder.sub(exponent, builder.mul(row, f.iconst(reduction.span)))
    # M: the mantissa bits under the exponent that makes its last bit 2^offset
    mantissa = builder.bitcast(builder.or_(
        builder.and_(bits, f.iconst((1 << 52) - 1)),
        builder.shl(builder.add(offset, f.iconst(1023 + reduction.mantissa_bits - 1)),
                    f.iconst(52))), F64)
    table = _two_over_pi_pieces(builder, reduction, row)

    high0, low0 = _two_product(builder, mantissa, table[0])  # multiples of 2^-51
    high1, low1 = _two_product(builder, mantissa, table[1])  # multiples of 2^-104
    if reduction.pieces == 4:
        high2, low2 = _two_product(builder, mantissa, table[2])
        tail = builder.fadd(low2, builder.fmul(mantissa, table[3]))
    else:
        high2 = builder.fmul(mantissa, table[2])  # within 2^-67

    # high0 reaches 2^91: take it mod 4 first so the quadrant count stays exact.
    high0 = fma(builder, _intrinsic(builder, "rint", F64, builder.fmul(high0, f.const(0.25))),
                f.const(-4.0), high0)
    quadrant0, fraction0 = _split_whole(builder, high0)
    quadrant1, fraction1 = _split_whole(builder, low0)
    quadrant2, fraction2 = _split_whole(builder, high1)
    # Both multiples of 2^-51 and at most 1/2: their sum is exact.
    quadrant3, hi = _split_whole(builder, builder.fadd(fraction0, fraction1))
    hi, lo = _two_sum(builder, hi, fraction2)
    if reduction.pieces == 3:
        # float32 needs the fraction within 2^-65 only. Where it cancels, hi + lo is already
        # below 2^-13 (what remains is at most that), so plain sums of the rest suffice.
        fraction = builder.fadd(hi, builder.fadd(builder.fadd(lo, low1), high2))
        quadrant4, fraction = _split_whole(builder, fraction)
        r_hi, r_lo = builder.fmul(fraction, f.const(_HALF_PI_HI)), f.const(0.0)
    else:
        hi, error = _two_sum(builder, hi, low1)
        lo = builder.fadd(lo, error)
        hi, error = _two_sum(builder, hi, high2)
        lo = builder.fadd(builder.fadd(lo, error), tail)
        quadrant4, hi = _split_whole(builder, hi)
        hi, lo = _fast_two_sum(builder, hi, lo)
        # r = (hi + lo) * pi/2 in double-double
        r_hi = builder.fmul(hi, f.const(_HALF_PI_HI))
        r_lo = builder.fadd(fma(builder, hi, f.const(_HALF_PI_HI), builder.fneg(r_hi)),
                            fma(builder, hi, f.const(_HALF_PI_LO),
                                builder.fmul(lo, f.const(_HALF_PI_HI))))
    quadrant = builder.fadd(builder.fadd(builder.fadd(quadrant0, quadrant1),
                                         builder.fadd(quadrant2, quadrant3)), quadrant4)

    # |x| <= pi/4 needs no reduction (and tiny x have no row).
    small = builder.fcmp_ordered("<=", magnitude, f.const(math.pi / 4))
    r_hi = _select(builder, small, magnitude, r_hi)
    r_lo = _select(builder, small, f.const(0.0), r_lo)
    quadrant = _select(builder, small, f.iconst(0), builder.fptosi(quadrant, I64))
    return quadrant, r_hi, r_lo


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


def _sin_kernel(builder, x, y):
    """sin(x + y) for |x + y| <= pi/4, |y| tiny: x - ((z*(y/2 - v*r) - y) - v*S1)."""
    f = Float(F64)
    z = builder.fmul(x, x)
    v = builder.fmul(z, x)
    r = _horner(builder, z, list(_SIN_DOUBLE[1:]))
    inner = builder.fsub(builder.fmul(z, builder.fsub(builder.fmul(y, f.const(0.5)),
                                                      builder.fmul(v, r))), y)
    return builder.fsub(x, builder.fsub(inner, builder.fmul(v, f.const(_SIN_DOUBLE[0]))))


def _cos_kernel(builder, x, y):
    """cos(x + y) for |x + y| <= pi/4: w + (((1 - w) - z/2) + (z*r - x*y)), w = 1 - z/2."""
    f = Float(F64)
    z = builder.fmul(x, x)
    r = builder.fmul(z, _horner(builder, z, list(_COS_DOUBLE)))
    half_z = builder.fmul(z, f.const(0.5))
    w = builder.fsub(f.const(1.0), half_z)
    correction = builder.fadd(builder.fsub(builder.fsub(f.const(1.0), w), half_z),
                              builder.fsub(builder.fmul(z, r), builder.fmul(x, y)))
    return builder.fadd(w, correction)


def _sin_kernel_float(builder, x):
    z = builder.fmul(x, x)
    return fma(builder, builder.fmul(z, x), _horner(builder, z, list(_SIN_FLOAT)), x)


def _cos_kernel_float(builder, x):
    z = builder.fmul(x, x)
    return fma(builder, z, _horner(builder, z, list(_COS_FLOAT)), Float(F64).const(1.0))


def _sin_or_cos(builder, x, quadrant_shift):
    """sin (shift 0) or cos (shift 1) of x, float64 or float32 (computed in float64)."""
    double = x.type == F64
    f = Float(F64)
    wide = x if double else builder.fpext(x, F64)
    magnitude = _intrinsic(builder, "fabs", F64, wide)
    quadrant, r_hi, r_lo = _reduce_half_pi(
        builder, magnitude, _REDUCTION_DOUBLE if double else _REDUCTION_FLOAT)
    if double:
        sine, cosine = _sin_kernel(builder, r_hi, r_lo), _cos_kernel(builder, r_hi, r_lo)
    else:
        sine, cosine = _sin_kernel_float(builder, r_hi), _cos_kernel_float(builder, r_hi)
    quadrant = builder.add(quadrant, f.iconst(quadrant_shift))
    odd = builder.trunc(quadrant, ir.IntType(1))
    negate = builder.trunc(builder.lshr(quadrant, f.iconst(1)), ir.IntType(1))
    result = _select(builder, odd, cosine, sine)
    if quadrant_shift == 0:  # sin is odd: sin(x) = -sin(|x|) for negative x (and -0.0)
        negative = builder.icmp_signed("<", builder.bitcast(wide, I64), f.iconst(0))
        negate = builder.xor(negate, negative)
    result = _select(builder, negate, builder.fneg(result), result)
    # inf and NaN give NaN
    finite = builder.fcmp_ordered("<", magnitude, f.const(math.inf))
    result = _select(builder, finite, result, builder.fsub(wide, wide))
    return result if double else builder.fptrunc(result, x.type)


def sin(builder, x):
    return _sin_or_cos(builder, x, 0)


def cos(builder, x):
    return _sin_or_cos(builder, x, 1)


# --- pow --------------------------------------------------------------------------------
# log(m) = 2 atanh(s), s = (m - 1)/(m + 1) <= 0.1716: 2s + (2/3)s^3 + s^5 * (2/5 + 2/7 s^2
# + ...), the series to s^25 (the next term is below 2^-66 of the sum).
_TWO_THIRDS_HI = 2.0 / 3.0
_TWO_THIRDS_LO = float(fractions.Fraction(2, 3) - fractions.Fraction(_TWO_THIRDS_HI))
_ATANH_TAIL = [2.0 / (2 * k + 1) for k in range(2, 13)]


def _log_double_double(builder, x):
    """log of a positive finite float64 as (hi, lo), within about 2^-64 of it: pow needs
    log(x) to 2^-63 for y * log(x) (up to 745) to carry 53 bits."""
    f = Float(F64)
    two = f.const(2.0)
    k, m1 = _log_reduce(builder, x)
    # s = m1 / (m1 + 2) in double-double (m1 + 2 is not always exact)
    u_hi = builder.fadd(m1, two)
    u_lo = builder.fadd(builder.fsub(two, u_hi), m1)
    s_hi = builder.fdiv(m1, u_hi)
    residual = fma(builder, builder.fneg(s_hi), u_hi, m1)  # exact
    residual = fma(builder, builder.fneg(s_hi), u_lo, residual)
    s_lo = builder.fdiv(residual, u_hi)
    # s^2 and s^3, then (2/3) s^3, in double-double
    z_hi, z_error = _two_product(builder, s_hi, s_hi)
    z_lo = fma(builder, builder.fmul(s_hi, two), s_lo, z_error)
    cube_hi, cube_error = _two_product(builder, s_hi, z_hi)
    cube_lo = builder.fadd(cube_error, fma(builder, s_hi, z_lo, builder.fmul(s_lo, z_hi)))
    third_hi, third_error = _two_product(builder, f.const(_TWO_THIRDS_HI), cube_hi)
    third_lo = builder.fadd(third_error, fma(builder, f.const(_TWO_THIRDS_HI), cube_lo,
                                             builder.fmul(f.const(_TWO_THIRDS_LO), cube_hi)))
    rest = builder.fmul(builder.fmul(cube_hi, z_hi), _horner(builder, z_hi, _ATANH_TAIL))
    # k * ln2_hi is exact (ln2_hi has 32 bits, |k| < 1100)
    hi, lo = _two_sum(builder, builder.fmul(k, f.const(_LN2_HI)), builder.fmul(s_hi, two))
    hi, error = _two_sum(builder, hi, third_hi)
    small = builder.fadd(builder.fadd(builder.fmul(k, f.const(_LN2_LO)), builder.fmul(s_lo, two)),
                         builder.fadd(third_lo, rest))
    lo = builder.fadd(builder.fadd(lo, error), small)
    return _fast_two_sum(builder, hi, lo)


def _exp_double_double(builder, hi, lo):
    """exp(hi + lo) for |lo| <= ulp(hi): Cody-Waite by ln2 on hi, lo carried into r; inf
    and 0 beyond the thresholds (hi may be infinite)."""
    f = Float(F64)
    n = _intrinsic(builder, "rint", F64, builder.fmul(hi, f.const(1.0 / math.log(2.0))))
    r_hi = fma(builder, n, f.const(-_LN2_HI), hi)  # exact
    r_lo = fma(builder, n, f.const(-_LN2_LO), lo)
    r, r_error = _two_sum(builder, r_hi, r_lo)
    # exp(r + r_error) = (1 + r) + (r^2 (1/2 + r/6 + ...) + r_error (1 + r)), 1 + r exactly
    # as a double-double: one rounding at the end, within 0.6 ulp
    whole, whole_error = _fast_two_sum(builder, f.const(1.0), r)
    series = _horner(builder, r, [1.0 / math.factorial(k) for k in range(2, f.exp_terms + 1)])
    tail = fma(builder, builder.fmul(r, r), series,
               fma(builder, r_error, whole, whole_error))
    value = builder.fadd(whole, tail)
    result = _scale(builder, value, _clamp_exponent(builder, n, f), f)
    result = _select(builder, builder.fcmp_ordered(">", hi, f.const(f.exp_high)),
                     f.const(math.inf), result)
    return _select(builder, builder.fcmp_ordered("<", hi, f.const(f.exp_low)),
                   f.const(0.0), result)


# float32 pow needs y * log(x) within 2^-30 where the result is a float32 (|y log x| < 104):
# log to 2^-37 (the atanh series to s^13) and exp to 2^-37 (Taylor to r^9) suffice.
_ATANH_FLOAT = [1.0 / (2 * k + 1) for k in range(1, 7)]
_EXP_FLOAT = [1.0 / math.factorial(k) for k in range(2, 10)]


def _pow_float_magnitude(builder, magnitude, y):
    """|x|^y in float64 for float32 arguments: 2^-37 relative, before rounding to float32."""
    f = Float(F64)
    k, m1 = _log_reduce(builder, magnitude)
    s = builder.fdiv(m1, builder.fadd(m1, f.const(2.0)))
    twice_s = builder.fmul(s, f.const(2.0))
    log_m = fma(builder, builder.fmul(twice_s, builder.fmul(s, s)),
                _horner(builder, builder.fmul(s, s), _ATANH_FLOAT), twice_s)
    log_x = fma(builder, k, f.const(math.log(2.0)), log_m)
    # Beyond +-200 the float32 result is inf or 0 all the same; this keeps 2^n one normal
    # float64 factor (NaN becomes a bound too: its lanes are replaced by NaN at the end).
    t = _intrinsic(builder, "minnum", F64, _intrinsic(
        builder, "maxnum", F64, builder.fmul(y, log_x), f.const(-200.0)), f.const(200.0))
    n = _intrinsic(builder, "rint", F64, builder.fmul(t, f.const(1.0 / math.log(2.0))))
    r = fma(builder, n, f.const(-_LN2_LO), fma(builder, n, f.const(-_LN2_HI), t))
    value = fma(builder, builder.fmul(r, r), _horner(builder, r, _EXP_FLOAT),
                builder.fadd(r, f.const(1.0)))
    return builder.fmul(value, _pow2(builder, builder.fptosi(n, I64), f))


def _pow_double(builder, x, y, precise):
    """x ** y of float64 values: to float64 accuracy if ``precise``, else to what a float32
    result needs."""
    f = Float(F64)
    one, zero, inf = f.const(1.0), f.const(0.0), f.const(math.inf)
    magnitude = _intrinsic(builder, "fabs", F64, x)
    if precise:
        log_hi, log_lo = _log_double_double(builder, magnitude)
        t_hi, t_error = _two_product(builder, y, log_hi)
        result = _exp_double_double(builder, t_hi, fma(builder, y, log_lo, t_error))
    else:
        result = _pow_float_magnitude(builder, magnitude, y)

    # C99's special cases (NumPy's): first where |x| is 0 or inf, or y is +-inf ...
    y_negative = builder.fcmp_ordered("<", y, zero)
    result = _select(builder, builder.fcmp_ordered("==", magnitude, zero),
                     _select(builder, y_negative, inf, zero), result)
    result = _select(builder, builder.fcmp_ordered("==", magnitude, inf),
                     _select(builder, y_negative, zero, inf), result)
    y_infinite = builder.fcmp_ordered("==", _intrinsic(builder, "fabs", F64, y), inf)
    shrinks = builder.icmp_unsigned("==", builder.fcmp_ordered("<", magnitude, one),
                                    builder.fcmp_ordered(">", y, zero))
    result = _select(builder, y_infinite, _select(builder, shrinks, zero, inf), result)
    result = _select(builder, builder.and_(y_infinite, builder.fcmp_ordered("==", magnitude, one)),
                     one, result)
    # ... then the sign: negative x (-0.0 too) to an odd integer power is negative, to a
    # non-integer power NaN (unless x is -inf or y infinite) ...
    y_integer = builder.fcmp_ordered("==", _intrinsic(builder, "floor", F64, y), y)
    half_y = builder.fmul(y, f.const(0.5))
    y_odd = builder.and_(y_integer, builder.fcmp_ordered(
        "!=", _intrinsic(builder, "floor", F64, half_y), half_y))
    x_sign = builder.icmp_signed("<", builder.bitcast(x, I64), f.iconst(0))
    result = _select(builder, builder.and_(x_sign, y_odd), builder.fneg(result), result)
    x_negative_finite = builder.and_(builder.fcmp_ordered("<", x, zero),
                                     builder.fcmp_ordered(">", x, f.const(-math.inf)))
    invalid = builder.and_(x_negative_finite,
                           builder.and_(builder.not_(y_integer), builder.not_(y_infinite)))
    result = _select(builder, invalid, f.const(math.nan), result)
    # ... NaN in, NaN out, except pow(1, y) and pow(x, 0), which are 1 for any x and y.
    result = _select(builder, builder.or_(builder.fcmp_unordered("uno", x, x),
                                          builder.fcmp_unordered("uno", y, y)),
                     f.const(math.nan), result)
    result = _select(builder, builder.fcmp_ordered("==", x, one), one, result)
    return _select(builder, builder.fcmp_ordered("==", y, zero), one, result)


def pow(builder, x, y):  # noqa: A001 - NumPy's name
    """x ** y for floats: exp(y * log(x)) with log(x) in double-double, and C99's special
    cases. float32 runs in float64, with shorter series, and rounds once."""
    if x.type == F64:
        return _pow_double(builder, x, y, precise=True)
    result = _pow_double(builder, builder.fpext(x, F64), builder.fpext(y, F64), precise=False)
    return builder.fptrunc(result, x.type)


# --- erf --------------------------------------------------------------------------------
def _horner_chosen(builder, x, condition, when_true, when_false):
    """``_horner`` with each lane's coefficients chosen by ``condition`` (the shorter list
    padded with zeros): two polynomials of one variable for the price of one."""
    f = Float(x.type)
    length = max(len(when_true), len(when_false))
    coefficients = []
    for true_value, false_value in zip([*when_true, *[0.0] * (length - len(when_true))],
                                       [*when_false, *[0.0] * (length - len(when_false))]):
        coefficient = f.const(true_value)
        if true_value != false_value:
            coefficient = builder.select(condition, coefficient, f.const(false_value))
        coefficients.append(coefficient)
    result = coefficients[-1]
    for coefficient in reversed(coefficients[:-1]):
        result = fma(builder, result, x, coefficient)
    return result


@_in_double
def erf(builder, x):
    """fdlibm's erf (``tracer/ops/special.py`` has it in NumPy, with its coefficients) for
    every lane, the pieces selected: below 1.25 a rational function of x^2 or |x| - 1,
    then 1 - exp(-x^2 - 0.5625 + R/S) / |x| with R/S in 1/x^2, from 6 on +-1. Both pieces
    below 1.25 share one polynomial evaluation (coefficients chosen per lane), so do both
    tail pieces, and one division gives every lane its ratio."""
    f = Float(F64)
    magnitude = fabs(builder, x)
    square = builder.fmul(magnitude, magnitude)
    small = builder.fcmp_ordered("<", magnitude, f.const(0.84375))
    central = builder.fcmp_ordered("<", magnitude, f.const(1.25))

    # |x| < 0.84375: x + x P(x^2)/Q(x^2);  below 1.25: erx + P(|x| - 1)/Q(|x| - 1)
    t = _select(builder, small, square, builder.fsub(magnitude, f.const(1.0)))
    numerator = _horner_chosen(builder, t, small, special.ERF_SMALL_P, special.ERF_MIDDLE_P)
    denominator = _horner_chosen(builder, t, small, special.ERF_SMALL_Q, special.ERF_MIDDLE_Q)
    # from 1.25: R(1/x^2)/S(1/x^2), one pair of polynomials each side of ~1/0.35
    reciprocal = builder.fdiv(f.const(1.0), magnitude)
    s = builder.fmul(reciprocal, reciprocal)
    near = builder.fcmp_ordered("<", magnitude, f.const(special.ERF_TAIL_SPLIT))
    tail_numerator = _horner_chosen(builder, s, near, special.ERF_NEAR_TAIL_R,
                                    special.ERF_FAR_TAIL_R)
    tail_denominator = _horner_chosen(builder, s, near, special.ERF_NEAR_TAIL_S,
                                      special.ERF_FAR_TAIL_S)
    ratio = builder.fdiv(_select(builder, central, numerator, tail_numerator),
                         _select(builder, central, denominator, tail_denominator))

    # Tiny |x|: x + efx x (fdlibm's own constant; the fused multiply-add keeps denormals).
    tiny = builder.fcmp_ordered("<", magnitude, f.const(special.ERF_TINY))
    ratio = _select(builder, tiny, f.const(special.ERF_EFX), ratio)
    inner = fma(builder, _select(builder, small, magnitude, f.const(1.0)), ratio,
                _select(builder, small, magnitude, f.const(special.ERF_ONE)))

    # fdlibm's split: ``top`` (|x| with its low 32 bits cleared) squares exactly, and
    # -top^2 - 0.5625 is exact; the rest, (top - |x|)(top + |x|) + R/S, is small. Their sum
    # goes to exp as a double-double, so the argument is not rounded at all.
    top = builder.bitcast(builder.and_(builder.bitcast(magnitude, I64),
                                       f.iconst(0xFFFFFFFF00000000 - (1 << 64))), F64)
    large = builder.fsub(builder.fneg(builder.fmul(top, top)), f.const(0.5625))
    rest = fma(builder, builder.fsub(top, magnitude), builder.fadd(top, magnitude), ratio)
    hi, lo = _two_sum(builder, large, rest)
    # 1 - exp(...) / |x|, rounded once
    tail = fma(builder, builder.fneg(_exp_double_double(builder, hi, lo)), reciprocal,
               f.const(1.0))

    result = _select(builder, central, inner, tail)
    result = _select(builder, builder.fcmp_ordered(">=", magnitude,
                                                   f.const(special.ERF_SATURATION)),
                     f.const(1.0), result)
    result = copysign(builder, result, x)
    return _select(builder, builder.fcmp_unordered("uno", x, x), x, result)


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

