"""erf: fdlibm's ``s_erf.c``, the same algorithm and coefficients as the eager primitive
(``tracer/ops/special.py``), every piece computed for every lane and the right one
selected (no branches, so the loop vectorizer widens it). float32 runs in float64 and
rounds once.
"""

from __future__ import annotations

from tracejit.tracer.ops import special

from .dtypes import F64
from .math_core import Float, copysign, fabs, fma, is_nan, two_sum
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


def erf(builder, x):
    f = Float(x.type)
    if f.element == F64:
        return _erf_double(builder, x)
    return builder.fptrunc(_erf_double(builder, builder.fpext(x, f.other(F64).ty)), x.type)
