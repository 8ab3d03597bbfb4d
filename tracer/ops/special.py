"""Special functions NumPy lacks, written with NumPy: the implementations of primitives.

``erf`` is fdlibm's ``s_erf.c`` vectorized: every piece (|x| below 0.84375, 1.25, 1/0.35,
6, then +-1) is computed for all elements and the right one picked with ``np.where``, so
there is no Python loop over elements. It computes in float64 and rounds once: float64
results are within 1 ulp of the exact value (fdlibm's bound), float32 results within 1 ulp
of the correctly rounded one. Like a ufunc it has ``nin`` and ``resolve_dtypes`` (with
scipy.special.erf's dtype rule: float32 stays float32, bool and integers become float64),
so the pointwise machinery treats it as one.

``codegen/mathlib.py`` lowers the same algorithm with the same coefficients.

>>> float(erf(0.5)), erf(np.float32(-1.0)).dtype, erf(np.array([0.0, np.inf])).tolist()
(0.5204998778130465, dtype('float32'), [0.0, 1.0])
"""

from __future__ import annotations

import numpy as np

# --- fdlibm's s_erf.c: constants and coefficients, lowest degree first ------------------
ERF_ONE = 8.45062911510467529297e-01  # erx: erf(1) rounded to 24 bits
ERF_EFX = 1.28379167095512586316e-01  # 2/sqrt(pi) - 1
ERF_EFX8 = 1.02703333676410069053e00  # 8 * efx
# |x| < 0.84375: erf(x) = x + x * P(x^2) / Q(x^2)
ERF_SMALL_P = (1.28379167095512558561e-01, -3.25042107247001499370e-01,
               -2.84817495755985104766e-02, -5.77027029648944159157e-03,
               -2.37630166566501626084e-05)
ERF_SMALL_Q = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
               5.08130628187576562776e-03, 1.32494738004321644526e-04,
               -3.96022827877536812320e-06)
# 0.84375 <= |x| < 1.25: erf(x) = erx + P(s) / Q(s), s = |x| - 1
ERF_MIDDLE_P = (-2.36211856075265944077e-03, 4.14856118683748331666e-01,
                -3.72207876035701323847e-01, 3.18346619901161753674e-01,
                -1.10894694282396677476e-01, 3.54783043256182359371e-02,
                -2.16637559486879084300e-03)
ERF_MIDDLE_Q = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
                7.18286544141962662868e-02, 1.26171219808761642112e-01,
                1.36370839120290507362e-02, 1.19844998467991074170e-02)
# 1.25 <= |x| < 6: erf(x) = 1 - exp(-x^2 - 0.5625 + R(s) / S(s)) / |x|, s = 1 / x^2, with
# one pair of polynomials below ERF_TAIL_SPLIT (~1/0.35) and another above it.
ERF_TAIL_SPLIT = float.fromhex("0x1.6db6ep+1")  # fdlibm's high word 0x4006DB6E
ERF_NEAR_TAIL_R = (-9.86494403484714822705e-03, -6.93858572707181764372e-01,
                   -1.05586262253232909814e01, -6.23753324503260060396e01,
                   -1.62396669462573470355e02, -1.84605092906711035994e02,
                   -8.12874355063065934246e01, -9.81432934416914548592e00)
ERF_NEAR_TAIL_S = (1.0, 1.96512716674392571292e01, 1.37657754143519042600e02,
                   4.34565877475229228821e02, 6.45387271733267880336e02,
                   4.29008140027567833386e02, 1.08635005541779435134e02,
                   6.57024977031928170135e00, -6.04244152148580987438e-02)
ERF_FAR_TAIL_R = (-9.86494292470009928597e-03, -7.99283237680523006574e-01,
                  -1.77579549177547519889e01, -1.60636384855821916062e02,
                  -6.37566443368389627722e02, -1.02509513161107724954e03,
                  -4.83519191608651397019e02)
ERF_FAR_TAIL_S = (1.0, 3.03380607434824582924e01, 3.25792512996573918826e02,
                  1.53672958608443695994e03, 3.19985821950859553908e03,
                  2.55305040643316442583e03, 4.74528541206955367215e02,
                  -2.24409524465858183362e01)
ERF_TINY = 2.0**-28  # below it erf(x) = x + efx * x
ERF_DENORMAL = 2.0**-1015  # below it efx * x would lose bits: 0.125 * (8x + efx8 * x)
ERF_SATURATION = 6.0  # from here on erf(x) rounds to +-1


def _polynomial(x, coefficients):
    result = np.full_like(x, coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = result * x + coefficient
    return result


def erf_float64(x):
    """fdlibm's erf of a float64 array, every piece computed and selected."""
    magnitude = np.abs(x)
    with np.errstate(all="ignore"):  # the pieces not selected may overflow or divide by 0
        square = magnitude * magnitude
        small = magnitude + magnitude * (_polynomial(square, ERF_SMALL_P)
                                         / _polynomial(square, ERF_SMALL_Q))
        tiny = np.where(magnitude < ERF_DENORMAL,
                        0.125 * (8.0 * magnitude + ERF_EFX8 * magnitude),
                        magnitude + ERF_EFX * magnitude)
        small = np.where(magnitude < ERF_TINY, tiny, small)

        s = magnitude - 1.0
        middle = ERF_ONE + _polynomial(s, ERF_MIDDLE_P) / _polynomial(s, ERF_MIDDLE_Q)

        s = 1.0 / square
        near = magnitude < ERF_TAIL_SPLIT
        ratio = np.where(near, _polynomial(s, ERF_NEAR_TAIL_R) / _polynomial(s, ERF_NEAR_TAIL_S),
                         _polynomial(s, ERF_FAR_TAIL_R) / _polynomial(s, ERF_FAR_TAIL_S))
        # fdlibm's split: ``top`` (|x| with its low 32 bits cleared) squares exactly, so
        # -x^2 = -top^2 + (top - |x|)(top + |x|) keeps the large part of exp's argument exact.
        top = (magnitude.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
        tail = 1.0 - np.exp(-top * top - 0.5625) * np.exp(
            (top - magnitude) * (top + magnitude) + ratio) / magnitude

    # NaN compares false everywhere and falls through to ``tail``, which is NaN.
    result = np.where(magnitude < 0.84375, small, np.where(
        magnitude < 1.25, middle, np.where(magnitude >= ERF_SATURATION, 1.0, tail)))
    return np.copysign(result, x)


class FloatUfunc:
    """A unary function NumPy lacks, shaped like a ufunc: ``nin``, ``__name__``,
    ``resolve_dtypes`` and a call that computes ``float64_function`` in float64 and rounds
    once to the result dtype (0-d inputs give NumPy scalars, as ufuncs do).

    The dtype rule is that of scipy.special's float ufuncs, whose loops are float64 and
    float32: float32 stays float32, other real inputs (bool, integers, float16) compute in
    float64, and Python scalars give float64. Complex and long double inputs raise
    TypeError."""

    nin, nout = 1, 1

    def __init__(self, name, float64_function):
        self.__name__ = name
        self._function = float64_function

    def resolve_dtypes(self, dtypes):
        """``(input dtype, None)`` -> ``(loop dtype, result dtype)``, as ufuncs do."""
        dtype = dtypes[0]
        if dtype is int or dtype is float:  # weak Python scalars
            dtype = np.float64
        dtype = np.dtype(dtype)
        if dtype == np.float32:
            return dtype, dtype
        if dtype.kind in "biuf" and np.can_cast(dtype, np.float64):
            return np.dtype(np.float64), np.dtype(np.float64)
        raise TypeError(f"{self.__name__} is defined for real float64 and float32 values, "
                        f"not {dtype}")

    def __call__(self, x):
        x = np.asarray(x)
        _, out = self.resolve_dtypes((x.dtype, None))
        result = self._function(x.astype(np.float64)).astype(out, copy=False)
        return result[()] if result.ndim == 0 else result

    def __repr__(self):
        return f"<tracejit ufunc {self.__name__}>"


erf = FloatUfunc("erf", erf_float64)
