"""log, log1p, log2 and log10: x = 2^k m with m in [sqrt(2)/2, sqrt(2)), then fdlibm's
log(1 + f) = f - hfsq + s (hfsq + R(s^2)), s = f / (2 + f), hfsq = f^2 / 2: the exact
f carries the result, the rounded s only a small correction.

float32 runs at full vector width for positive normal x (log1p: -1 < x < 2^100): k and
m come from integer operations on the bits. log, log2 and log10 then need no division:
log_b(1 + r), r = m - 1, is a r + r Q(r) with a minimax polynomial Q (a r exact)
(within NumPy's own float32 error, not within 1 ulp: see ``codegen/mathlib.py``);
log1p is r + r^2 P(r) with P one degree longer, plus the rounding error of 1 + x
divided by it (its one division). Zeros, denormals, negatives, infinities and NaN take
the float64 code as a rare path (``math_rare_path``), per vector and only when a lane
needs it.

float64 log2 and log10 are the log core with the scale folded in (no extra division):
log(m) as the double-double f - hfsq + (its rounding error + s (hfsq + R)), times 1/ln2
(1/ln10) split in two, added to k (k log10(2), split). Powers of two give their
exponents exactly, and so do the powers of ten for log10, in both precisions.
"""

from __future__ import annotations

import math

from .dtypes import F32, F64
from .math_core import Float, fma, horner, maximum, minimum
from .math_rare_path import rare_path

# fdlibm's coefficients of R (e_log.c).
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)
_LN2 = {F64: (6.93147180369123816490e-01, 1.90821492927058770002e-10),
        # float32: ln2_hi has 16 bits, so k ln2_hi is exact for any k of a float
        F32: (6.9313812256e-01, 9.0580006145e-06)}
_SQRT_HALF_BITS_F32 = 0x3F3504F3  # the bits of sqrt(2)/2 rounded to float32


# --- float64 (and float32's rare path) ------------------------------------------------------
def log_reduce(builder, u):
    """float64 ``u`` (positive, denormals too) as ``2^k * m``, m in [sqrt(2)/2, sqrt(2)):
    returns (k as a float, m - 1)."""
    f = Float(u.type)
    denormal = builder.fcmp_ordered("<", u, f.const(2.0 ** -1022))
    scaled = builder.select(denormal, builder.fmul(u, f.const(2.0 ** 54)), u)
    bits = builder.bitcast(scaled, f.int)
    exponent = builder.sub(builder.lshr(bits, f.iconst(52)), f.iconst(1023))
    exponent = builder.sub(exponent, builder.select(denormal, f.iconst(54), f.iconst(0)))
    mantissa = builder.bitcast(
        builder.or_(builder.and_(bits, f.iconst((1 << 52) - 1)), f.iconst(1023 << 52)), f.ty)
    large = builder.fcmp_ordered(">", mantissa, f.const(math.sqrt(2.0)))
    mantissa = builder.select(large, builder.fmul(mantissa, f.const(0.5)), mantissa)
    exponent = builder.add(exponent, builder.zext(large, f.int))
    return builder.sitofp(exponent, f.ty), builder.fsub(mantissa, f.const(1.0))


def _log_tail(builder, m1, coefficients):
    """``(hfsq, s*(hfsq + R))`` of fdlibm's log(1 + m1)."""
    f = Float(m1.type)
    hfsq = builder.fmul(builder.fmul(m1, m1), f.const(0.5))
    s = builder.fdiv(m1, builder.fadd(m1, f.const(2.0)))
    z = builder.fmul(s, s)
    r = builder.fmul(z, horner(builder, z, list(coefficients)))
    return hfsq, builder.fmul(s, builder.fadd(hfsq, r))


def _combine(builder, k, m1, hfsq, tail, low=None):
    """k ln2_hi - ((hfsq - (tail + (k ln2_lo + low))) - m1): the exact m1 and k ln2_hi
    carry the result. k ln2_hi is exact (ln2_hi is short), so the last step is one fused
    multiply-add with the same result."""
    f = Float(m1.type)
    ln2_hi, ln2_lo = _LN2[f.element]
    small = builder.fmul(k, f.const(ln2_lo))
    if low is not None:
        small = builder.fadd(small, low)
    inner = builder.fsub(builder.fsub(hfsq, builder.fadd(tail, small)), m1)
    return fma(builder, k, f.const(ln2_hi), builder.fneg(inner))


def _in_double(function):
    """The float64 algorithm for float32 values too (rounding once gives <= 1 ulp)."""

    def wrapper(builder, x):
        f = Float(x.type)
        if f.double:
            return function(builder, x)
        return builder.fptrunc(function(builder, builder.fpext(x, f.other(F64).ty)), x.type)

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


def log_positive(builder, x):
    """log of a positive finite float64 (zeros, infinities and NaN give garbage)."""
    k, m1 = log_reduce(builder, x)
    hfsq, tail = _log_tail(builder, m1, _LG)
    return _combine(builder, k, m1, hfsq, tail)


@_in_double
def _log_general(builder, x):
    f = Float(x.type)
    result = log_positive(builder, x)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(0.0)),
                            f.const(-math.inf), result)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(math.inf)),
                            f.const(math.inf), result)
    invalid = builder.fcmp_unordered("<", x, f.const(0.0))  # negative or NaN
    return builder.select(invalid, f.const(math.nan), result)


@_in_double
def _log1p_general(builder, x):
    f = Float(x.type)
    u = builder.fadd(x, f.const(1.0))
    k, m1 = log_reduce(builder, u)
    # c corrects the rounding of u = 1 + x (fdlibm's log1p).
    one = f.const(1.0)
    c = builder.select(builder.fcmp_ordered(">=", k, f.const(2.0)),
                       builder.fsub(one, builder.fsub(u, x)),
                       builder.fsub(x, builder.fsub(u, one)))
    c = builder.fdiv(c, u)
    c = builder.select(builder.fcmp_ordered("<", k, f.const(54.0)), c, f.const(0.0))
    hfsq, tail = _log_tail(builder, m1, _LG)
    result = _combine(builder, k, m1, hfsq, tail, c)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(0.0)), x, result)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(math.inf)), x, result)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(-1.0)),
                            f.const(-math.inf), result)
    invalid = builder.fcmp_unordered("<", x, f.const(-1.0))  # below -1 or NaN
    return builder.select(invalid, f.const(math.nan), result)


# --- float32 at full width ----------------------------------------------------------------
def reduce_float32(builder, u, scale=0):
    """Positive normal float32 ``u`` as 2^k m, m in [sqrt(2)/2, sqrt(2)), by integer
    operations: subtracting sqrt(2)/2's bits leaves k in the exponent field. Returns
    (k as an integer, k as a float, m 2^scale): the power of two comes free with the
    integer addition that builds m."""
    f = Float(u.type)
    shifted = builder.sub(builder.bitcast(u, f.int), f.iconst(_SQRT_HALF_BITS_F32))
    k = builder.ashr(shifted, f.iconst(23))
    m = builder.bitcast(builder.add(builder.and_(shifted, f.iconst((1 << 23) - 1)),
                                    f.iconst(_SQRT_HALF_BITS_F32 + (scale << 23))), f.ty)
    return k, builder.sitofp(k, f.ty), m


def outside_normal_float32(builder, x):
    """True unless 2^-126 <= x < inf: one unsigned compare of the bits moved down by the
    smallest normal's (zeros, denormals and negatives wrap around to the top)."""
    f = Float(x.type)
    bits = builder.sub(builder.bitcast(x, f.int), f.iconst(0x00800000))
    return builder.icmp_unsigned(">=", bits, f.iconst(0x7F800000 - 0x00800000))


# float32 log_b(1 + r) = a r + r Q(r) for r in [sqrt(2)/2 - 1, sqrt(2) - 1], with a the
# power of two nearest 1/ln b (1 for log and log2, 1/2 for log10), so a r is exact and the
# whole rounds once, and Q a minimax polynomial with float32 coefficients fitted to the
# relative error of the whole (log: Q(r) = r P(r), P of degree 7; log2 and log10: degree
# 8, its constant term 1/ln b - a; docs/experiments/float32_polynomials/fit.py log prints
# them): within 2^-24.98 (log), 2^-24.81 (log2) and 2^-25.08 (log10) of log_b(1 + r).
# Measured and not kept for log10 (issue 16; one thread, 1024x1024 on (0, 100], CPU time,
# interleaved, a loaded machine): Q of degree 7 (2^-22.5): 3.40 ulp (NumPy's own 3.49),
# 1-17% faster across runs; k log10(2) as one float32 in one multiply-add: 5% faster,
# 1.97 ulp, but log10(1000) = 3.0000002; log10(m) = s P(s^2), s = (m - 1)/(m + 1) by one
# division: 18-31% faster with three terms but 4.6 ulp (beyond NumPy's), 3.1 ulp with
# four and no reliable gain. NumPy's float32 log10 (0.21-0.25 ms a call against these
# 0.30-0.33) is SVML's: vgetmantps, vgetexpps, a piecewise polynomial whose coefficients
# four vpermps read from 16-entry tables by the mantissa's top bits, four multiply-adds
# and a multiply: instructions the loop vectorizer does not produce from scalar IR
# (table reads become gathers). With float32 tables read by permutes (``math_table``'s vector
# variants, helper-136): z = x / 2^k in 16 subintervals, r = z/c_i - 1 by one multiply-add,
# log10 c_i as a pair, a polynomial of degree 3 (8 multiply-adds a vector instead of 11):
# 0.251 ms against 0.232; degree 4 (0.99 ulp on the benchmark's inputs) 0.265. Three vpermd
# cost more than the three multiply-adds they save on Zen 4.
_LOG_POLY_F32 = {
    "log": (1.0, [-0.49999991059303284, 0.3333394527435303, -0.25001776218414307,
                  0.19962239265441895, -0.16570313274860382, 0.14916354417800903,
                  -0.14307722449302673, 0.08738797903060913]),
    "log2": (1.0, [0.4426949918270111, -0.7213475108146667, 0.4809136986732483,
                   -0.3606889247894287, 0.2877914011478424, -0.2392452508211136,
                   0.21737468242645264, -0.20564866065979004, 0.11891497671604156]),
    "log10": (0.5, [-0.06570553034543991, -0.21714724600315094, 0.14476847648620605,
                    -0.10857924073934555, 0.08667269349098206, -0.0719880610704422,
                    0.06496723741292953, -0.06207255646586418, 0.037468865513801575]),
}


def _log_float32(builder, x, base):
    """log_b of a positive normal float32 at full width, no division: x = 2^k (1 + r) from
    the bits (r exact), then y = log_b(1 + r) = a r + r Q(r) by one fused multiply-add at
    the end (a r exact), plus k log_b 2 (its head exact). Where k != 0 the result is at
    least as large as y (log: at least |k ln2| / 2), so y's roundings cost at most about an
    ulp of it; where k = 0 it is y. Exact at powers of two (r = 0), and log10 at the
    powers of ten a float32 holds."""
    f = Float(x.type)
    a, coefficients = _LOG_POLY_F32[base]
    # h = a r = a m - a, exact (Sterbenz), a m straight from the bits (log10: a = 1/2; a
    # multiply-add took h before, one more operation on the multiply-add pipes that bound
    # this loop: 12 against log2's 9)
    _, k, m = reduce_float32(builder, x, scale=round(math.log2(a)))
    head = builder.fsub(m, f.const(a))
    if base == "log":
        ln2_hi, ln2_lo = _LN2[F32]
        small = fma(builder, builder.fmul(head, head), horner(builder, head, coefficients),
                    fma(builder, k, f.const(ln2_lo), head))
        return fma(builder, k, f.const(ln2_hi), small)
    # a r + r Q(r) as h + h Q'(h), Q' holding Q's coefficient of r^j times a^-(j + 1): the
    # scalings by powers of two are exact, so this is y to the bit, without a multiply by a
    scaled = [c * a ** -(j + 1) for j, c in enumerate(coefficients)]
    y = fma(builder, head, horner(builder, head, scaled), head)
    if base == "log2":
        return builder.fadd(k, y)
    _, (two_hi, two_lo) = _LOG_BASES[base][F32]
    return fma(builder, k, f.const(two_hi), fma(builder, k, f.const(two_lo), y))


def log(builder, x):
    if x.type != F32:
        return _log_general(builder, x)
    return rare_path(builder, "log", outside_normal_float32(builder, x),
                     _log_float32(builder, x, "log"), x, _log_general)


LOG1P_FAST_HIGH_F32 = 2.0 ** 100


# float32 log(1 + r) = r + r^2 P(r) on the same interval, P of degree 8 (one more than
# log's: within 2^-27.83, so log1p keeps its bound of 0.9 ulp; ``fit.py log1p`` prints them).
_LOG1P_POLY_F32 = (-0.49999988079071045, 0.33333325386047363, -0.25001609325408936,
                   0.20002004504203796, -0.16608411073684692, 0.14180853962898254,
                   -0.1324806809425354, 0.12912940979003906, -0.0761905238032341)


def log1p(builder, x):
    """float32: u = 1 + x rounded, reduced as for log (u = 2^k (1 + r), r exact); c, the
    rounding error of u, is exact by Fast2Sum on (max(x, 1), min(x, 1)) and enters as c/u
    (one division, correctly rounded): log1p(x) = k ln2 + r + (r^2 P(r) + k ln2_lo + c/u),
    r added last, so near zero (-0.29 < x < 0.41, k = 0) the exact r carries the result and
    c/u what u lost. One division a vector, not fdlibm's two (its s = f / (2 + f) too):
    the divider takes ~8 cycles a 16-lane vector on the AVX-512 host, and two of them
    bounded the loop (0.42 ms a 1024x1024 call on one core, CPU time; now 0.35)."""
    if x.type != F32:
        return _log1p_general(builder, x)
    f = Float(x.type)
    one = f.const(1.0)
    u = builder.fadd(x, one)
    _, k, m = reduce_float32(builder, u)
    r = builder.fsub(m, one)  # exact
    error = builder.fadd(builder.fsub(maximum(builder, x, one), u), minimum(builder, x, one))
    ln2_hi, ln2_lo = _LN2[F32]
    low = fma(builder, k, f.const(ln2_lo), builder.fdiv(error, u))
    small = fma(builder, builder.fmul(r, r), horner(builder, r, _LOG1P_POLY_F32), low)
    fast = fma(builder, k, f.const(ln2_hi), builder.fadd(r, small))
    fast = builder.select(builder.fcmp_ordered("==", x, f.const(0.0)), x, fast)
    rare = builder.or_(builder.fcmp_unordered("<=", x, f.const(-1.0)),
                       builder.fcmp_ordered(">=", x, f.const(LOG1P_FAST_HIGH_F32)))
    return rare_path(builder, "log1p", rare, fast, x, _log1p_general)


# --- log2 and log10 -------------------------------------------------------------------------
# Per base and precision: 1/ln(b) as a head and a tail, and log_b(2) as a head short enough
# that k times it is exact for every exponent k of the format (11 bits for float32, 33 for
# float64) and a tail.
_LOG_BASES = {
    "log2": {F32: ((1.4426950216293335, 1.925963033500011e-08), (1.0, 0.0)),
             F64: ((1.4426950408889634, 2.0355273740931033e-17), (1.0, 0.0))},
    "log10": {F32: ((0.4342944920063019, -1.0103049952192578e-08),
                    (0.301025390625, 4.605038981195214e-06)),
              F64: ((0.4342944819032518, 1.098319650216765e-17),
                    (0.3010299955494702, 1.1451100898021838e-10))},
}


def _scaled_log_core(builder, k, m1, base):
    """log_b(2^k (1 + m1)): log(1 + m1) = hi + lo (hi = m1 - hfsq rounded, lo its exact
    rounding error plus s (hfsq + R)); y = log_b(1 + m1) = hi c_hi + (lo c_hi + hi c_lo)
    rounded once by a fused multiply-add (1/ln b = c_hi + c_lo), then k log_b(2) + y, the
    head of k log_b(2) exact inside a second one. Where k != 0 the result is at least as
    large as y (|y| <= log_b(sqrt 2)), so y's rounding costs at most half an ulp of the
    result (a quarter for log2, whose result is then at least 1/2); exact at the powers of
    two (m1 = 0)."""
    f = Float(m1.type)
    (c_hi, c_lo), (two_hi, two_lo) = _LOG_BASES[base][f.element]
    hfsq, tail = _log_tail(builder, m1, _LG)  # float64 (float32's rare path too)
    hi = builder.fsub(m1, hfsq)
    lo = builder.fadd(builder.fsub(builder.fsub(m1, hi), hfsq), tail)  # f - hi - hfsq exact
    small = fma(builder, lo, f.const(c_hi), builder.fmul(hi, f.const(c_lo)))
    if two_lo:
        small = fma(builder, k, f.const(two_lo), small)
    y = fma(builder, hi, f.const(c_hi), small)
    if two_hi == 1.0:
        return builder.fadd(k, y)
    return fma(builder, k, f.const(two_hi), y)


def _with_log_specials(builder, x, result):
    """log's special cases: -inf at +-0, inf at inf, NaN below zero and at NaN."""
    f = Float(x.type)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(0.0)),
                            f.const(-math.inf), result)
    result = builder.select(builder.fcmp_ordered("==", x, f.const(math.inf)),
                            f.const(math.inf), result)
    invalid = builder.fcmp_unordered("<", x, f.const(0.0))
    return builder.select(invalid, f.const(math.nan), result)


def _scaled_log_general(base):
    """float64 log_b of any float64 (denormals by ``log_reduce``), specials included; the
    float32 rare path computes it in float64 and rounds once."""

    @_in_double
    def general(builder, x):
        k, m1 = log_reduce(builder, x)
        return _with_log_specials(builder, x, _scaled_log_core(builder, k, m1, base))

    general.__name__ = f"_{base}_general"
    return general


_SCALED_LOG_GENERAL = {base: _scaled_log_general(base) for base in _LOG_BASES}


def _scaled_log(base):
    def function(builder, x):
        general = _SCALED_LOG_GENERAL[base]
        if x.type != F32:
            return general(builder, x)
        fast = _log_float32(builder, x, base)
        return rare_path(builder, base, outside_normal_float32(builder, x), fast, x, general)

    function.__name__ = base
    function.__doc__ = f"{base} of a float (float32 at full width, see the module docstring)."
    return function


log2 = _scaled_log("log2")
log10 = _scaled_log("log10")
