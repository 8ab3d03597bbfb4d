"""erf: float32 in float32 at full vector width; float64 by fdlibm's ``s_erf.c``, the
same algorithm and coefficients as the eager primitive (``tracer/ops/special.py``).
Either way every piece is computed for every lane and the right one selected (no
branches, so the loop vectorizer widens it).

float32 (within 0.81 ulp of the exact result, below 0.875; 0.743 on [0.875, 3.92]):

* |x| < 0.875: x + x q(x^2), q a polynomial of degree 6 (the rounding error of x^2 is
  not carried into it: on every float32 of [2^-12, 0.875) the largest error was the same
  without it, 0.81 ulp, at two operations fewer a vector);
* 0.875 <= |x| < 3.92: one of two polynomials, t P(t) of degree 10 on [0.875, 2) and
  11 on [2, 3.92), in t = |x| - c around a centre c of its interval (1.2 and 2.9: nearer
  the low ends, where erf is smaller and t P(t) rounds the most), erf(c) as a float pair:
  hi + (lo + t P(t)), so only the small part rounds before the last addition (|x| - c is
  exact: Sterbenz). The lanes' own coefficients are selected, so one evaluation serves
  both intervals (two intervals of a higher degree take fewer selects than three);
* from 3.9192059 on (where erf rounds to 1) +-1, and NaN stays NaN (it fails every
  compare and flows through the arithmetic).

The coefficients are least-squares fits on Chebyshev nodes of each interval (relative
error for q, absolute for P), rounded to float32 one at a time from the lowest degree,
the higher ones refitted after each rounding.
"""

from __future__ import annotations

from typing import NamedTuple

from tracejit.tracer.ops import special

from .dtypes import F64
from .math_core import Float, copysign, fabs, fma, horner, is_nan, two_sum
from .math_pow import exp_double_double


def _horner_chosen(builder, x, condition, when_true, when_false):
    """``horner`` with each lane's coefficients chosen by ``condition`` (the shorter list
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


def _erf_double(builder, x):
    """fdlibm's erf of float64 lanes: below 1.25 a rational function of x^2 or |x| - 1,
    then 1 - exp(-x^2 - 0.5625 + R/S) / |x| with R/S in 1/x^2, from 6 on +-1. Both pieces
    below 1.25 share one polynomial evaluation (coefficients chosen per lane), so do both
    tail pieces, and one division gives every lane its ratio."""
    f = Float(x.type)
    magnitude = fabs(builder, x)
    square = builder.fmul(magnitude, magnitude)
    small = builder.fcmp_ordered("<", magnitude, f.const(0.84375))
    central = builder.fcmp_ordered("<", magnitude, f.const(1.25))

    # |x| < 0.84375: x + x P(x^2)/Q(x^2);  below 1.25: erx + P(|x| - 1)/Q(|x| - 1)
    t = builder.select(small, square, builder.fsub(magnitude, f.const(1.0)))
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
    ratio = builder.fdiv(builder.select(central, numerator, tail_numerator),
                         builder.select(central, denominator, tail_denominator))

    # Tiny |x|: x + efx x (fdlibm's own constant; the fused multiply-add keeps denormals).
    tiny = builder.fcmp_ordered("<", magnitude, f.const(special.ERF_TINY))
    ratio = builder.select(tiny, f.const(special.ERF_EFX), ratio)
    inner = fma(builder, builder.select(small, magnitude, f.const(1.0)), ratio,
                builder.select(small, magnitude, f.const(special.ERF_ONE)))

    # fdlibm's split: ``top`` (|x| with its low 32 bits cleared) squares exactly, and
    # -top^2 - 0.5625 is exact; the rest, (top - |x|)(top + |x|) + R/S, is small. Their sum
    # goes to exp as a double-double, so the argument is not rounded at all.
    top = builder.bitcast(builder.and_(builder.bitcast(magnitude, f.int),
                                       f.iconst(0xFFFFFFFF00000000 - (1 << 64))), f.ty)
    large = builder.fsub(builder.fneg(builder.fmul(top, top)), f.const(0.5625))
    rest = fma(builder, builder.fsub(top, magnitude), builder.fadd(top, magnitude), ratio)
    hi, lo = two_sum(builder, large, rest)
    # 1 - exp(...) / |x|, rounded once
    tail = fma(builder, builder.fneg(exp_double_double(builder, hi, lo)), reciprocal,
               f.const(1.0))

    result = builder.select(central, inner, tail)
    result = builder.select(builder.fcmp_ordered(">=", magnitude,
                                                 f.const(special.ERF_SATURATION)),
                            f.const(1.0), result)
    result = copysign(builder, result, x)
    return builder.select(is_nan(builder, x), x, result)


# --- float32 ------------------------------------------------------------------------------
# erf(x)/x - 1 = q(x^2) for |x| < 0.875
_SMALL_F32 = (0.12837916612625122, -0.37612631916999817, 0.11283683031797409,
              -0.026859182864427567, 0.005201295949518681, -0.0008152569644153118,
              8.435649942839518e-05)
_SMALL_LIMIT_F32 = 0.875


class _Interval(NamedTuple):
    start: float  # the interval is [start, next interval's start)
    centre: float
    erf_hi: float  # erf(centre) = erf_hi + erf_lo (erf_lo also holds P's constant term)
    erf_lo: float
    slope: tuple  # P(t) = erf(centre + t) - erf(centre) over t, lowest degree first


_INTERVALS_F32 = (
    _Interval(0.875, 1.2000000476837158, 0.9103139638900757, 2.7087530440894625e-08,
              (0.26734432578086853, -0.3208131492137909, 0.16753529012203217,
               0.006414259318262339, -0.05332979932427406, 0.019648628309369087,
               0.0058470857329666615, -0.006003192160278559, 0.000977461226284504,
               0.00020464224508032203, 0.0)),
    _Interval(2.0, 2.9000000953674316, 0.999958872795105, 2.9350752939194535e-08,
              (0.00025120648206211627, -0.0007285036263056099, 0.001324844895862043,
               -0.0016781339654698968, 0.001548046013340354, -0.0010491858702152967,
               0.0005046038422733545, -0.00014056841609999537, -1.3828436749463435e-05,
               3.2679265132173896e-05, -1.0096797268488444e-05)),
)
# The smallest float32 whose erf rounds to 1.
_ROUNDS_TO_ONE_F32 = 3.919205904006958


def _erf_float32(builder, x):
    f = Float(x.type)
    magnitude = fabs(builder, x)

    square = builder.fmul(magnitude, magnitude)
    q = horner(builder, square, _SMALL_F32)
    small = fma(builder, magnitude, q, magnitude)

    # Each lane's interval: the constants of the last interval whose start it reached.
    reached = [builder.fcmp_ordered(">=", magnitude, f.const(interval.start))
               for interval in _INTERVALS_F32[1:]]

    def chosen(values):
        value = f.const(values[0])
        for condition, other in zip(reached, values[1:]):
            value = builder.select(condition, f.const(other), value)
        return value

    def field(name):
        return [getattr(interval, name) for interval in _INTERVALS_F32]

    t = builder.fsub(magnitude, chosen(field("centre")))
    slopes = list(zip(*field("slope")))
    polynomial = chosen(slopes[-1])
    for coefficients in reversed(slopes[:-1]):
        polynomial = fma(builder, polynomial, t, chosen(coefficients))
    middle = builder.fadd(chosen(field("erf_hi")),
                          fma(builder, polynomial, t, chosen(field("erf_lo"))))

    result = builder.select(builder.fcmp_ordered("<", magnitude, f.const(_SMALL_LIMIT_F32)),
                            small, middle)
    result = builder.select(builder.fcmp_ordered(">=", magnitude, f.const(_ROUNDS_TO_ONE_F32)),
                            f.const(1.0), result)
    # NaN fails every compare and flows through the arithmetic: no select for it.
    return copysign(builder, result, x)


def erf(builder, x):
    if Float(x.type).element == F64:
        return _erf_double(builder, x)
    return _erf_float32(builder, x)
