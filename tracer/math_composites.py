"""Element-wise NumPy functions composed from primitives: ``np.hypot``, ``np.heaviside``,
``np.fmax``/``np.fmin``, ``np.logaddexp2``, ``np.float_power``, ``np.deg2rad``/``np.rad2deg``,
``np.copysign`` (a constant sign), ``np.divmod``, ``np.modf``, ``np.conjugate`` of real
arrays (ufuncs, in ``UFUNCS``' sense: ``COMPOSITES`` joins ``ufuncs.UFUNC_COMPOSITES``), and
the functions ``np.sinc``, ``np.fix``, ``np.real``, ``np.imag`` (``FUNCTIONS``).

Each is computed in the dtypes NumPy's own loop uses (``ufuncs.in_loop_dtypes``) and
written the way NumPy's C loop or Python source computes it, so results agree to the
last bit where the loop is exact (``fmax`` keeps the first operand of equal zeros, as
NumPy's loop does) and to an ulp where it calls libm (``hypot``).

>>> import tracejit as tj
>>> f = tj.jit(lambda x: np.hypot(x, 4.0) + np.fmax(x, np.nan), cache="memory")
>>> f(np.array([3.0, 0.0]))
array([8., 4.])
"""

from __future__ import annotations

import math

import numpy as np

from . import ops
from .errors import UnsupportedError
from .primitives import is_traced
from .ufuncs import high_and_infinite, in_loop_dtypes, spread_of

dtype_of = ops.dtype_of


def _hypot(x, y):
    # C's hypot never overflows in between: the larger magnitude scaled out. An infinite
    # operand gives inf even beside a NaN, as C's does. float32 (and float16, which NumPy
    # computes in float32) is exact enough in float64: its squares and their sum are exact.
    infinite = np.isinf(x) | np.isinf(y)
    dtype = np.dtype(dtype_of(x))
    if dtype.itemsize <= 4:
        wide_x, wide_y = np.multiply(x, np.float64(1.0)), np.multiply(y, np.float64(1.0))
        result = np.sqrt(wide_x * wide_x + wide_y * wide_y)
        if dtype == np.float16:
            result = result.astype(np.float32)
        return np.where(infinite, np.inf, result).astype(dtype)
    return np.where(infinite, np.inf, _hypot_float64(x, y))


def _hypot_float64(x, y):
    """glibc's ``hypot`` (NumPy calls libm's), step for step: the common case ``sqrt`` of
    the sum of squares corrected once by its residual, written without fma
    (``kernel``); operands past 2**511 or below 2**-511 scaled by 2**-600 or 2**600
    (exact); ``ax + ay`` where the smaller is below the larger's half ulp. Inputs of the
    branches not taken are 1.0, so their gradients stay finite."""
    ax = np.maximum(np.abs(x), np.abs(y))
    ay = np.minimum(np.abs(x), np.abs(y))
    large = ax > 2.0 ** 511
    tiny = ~large & (ay < 2.0 ** -511)
    direct = np.where(large | ~tiny, ay <= ax * 2.0 ** -54, ax >= ay * 2.0 ** 54)
    factor = np.where(large, 2.0 ** -600, np.where(tiny, 2.0 ** 600, 1.0))
    scaled_x = np.where(direct, 1.0, ax * factor)
    scaled_y = np.where(direct, 1.0, ay * factor)
    return np.where(direct, ax + ay, _hypot_kernel(scaled_x, scaled_y) / factor)


def _hypot_kernel(ax, ay):
    root = np.sqrt(ax * ax + ay * ay)
    near = root <= 2.0 * ay
    delta = root - np.where(near, ay, ax)
    first = np.where(near, ax * (2.0 * delta - ax), 2.0 * delta * (ax - 2.0 * ay))
    second = np.where(near, (delta - 2.0 * (ax - ay)) * delta,
                      (4.0 * delta - ay) * ay + delta * delta)
    return root - (first + second) / (2.0 * root)


def _heaviside(x, value_at_zero):
    # NaN stays x's own NaN; 0 (either sign) takes the second operand.
    step = np.where(x < 0, 0.0, np.where(x == 0, value_at_zero, 1.0))
    return np.where(np.isnan(x), x, step).astype(dtype_of(x))


def _fmax(x, y):
    # NumPy's loop keeps x when x >= y or y is NaN. Which of two equal zeros it gives
    # depends on its loop (np.fmax(0.0, -0.0) is 0.0; over 8 float64 elements -0.0):
    # this keeps x's, as its scalar loop does.
    return np.where((x >= y) | np.isnan(y), x, y)


def _fmin(x, y):
    return np.where((x <= y) | np.isnan(y), x, y)


_LOG2E = 1.0 / math.log(2.0)


def _logaddexp2(x, y):
    # NumPy's formula: equal operands give x + 1 (high + log1p(1) / ln 2 rounds to it),
    # equal infinities themselves (ufuncs._logaddexp); its half loop computes in float32
    # and rounds once.
    if dtype_of(x) == np.float16:
        return _logaddexp2(x.astype(np.float32), y.astype(np.float32)).astype(np.float16)
    high, infinite = high_and_infinite(x, y)
    return np.where(infinite, high,
                    high + np.log1p(np.exp2(spread_of(x, y, infinite))) * _LOG2E)


def _scale_by(numerator, denominator):
    """``x * (pi / 180)`` with the factor computed in ``x``'s dtype as NumPy's C loop
    computes it (``NPY_PIf / 180.0f`` for float32)."""
    def scale(x):
        dtype = np.dtype(dtype_of(x))
        if dtype == np.float16:  # NumPy's half loop computes in float32, rounds once
            return scale(x.astype(np.float32)).astype(np.float16)
        kind = dtype.type
        factor = kind(kind(numerator) / kind(denominator))
        return x * factor

    return scale


def _copysign(x, sign_source):
    # |x| and its negation are bit-exact for every x, NaN too (fabs and fneg in compiled
    # code), so only the sign source's sign bits are needed: known for a constant; a
    # traced one's NaN carries a sign bit no primitive reads
    if is_traced(sign_source):
        raise UnsupportedError("np.copysign with a traced second operand is not supported "
                               "(the sign of a NaN is not traced); pass a constant sign")
    negative = np.signbit(np.asarray(sign_source))
    magnitude = np.abs(x)
    if negative.ndim == 0:
        return -magnitude if negative else magnitude
    return np.where(negative, -magnitude, magnitude)


def _divmod(x, y):
    return np.floor_divide(x, y), np.remainder(x, y)


def _modf(x):
    # C's modf: the fraction keeps x's sign (modf(-2.0) is (-0.0, -2.0)); inf has 0.
    whole = np.trunc(x)
    fraction = x - whole
    signed_zero = np.where(np.isinf(x), np.where(x < 0, -0.0, 0.0), x * 0.0).astype(dtype_of(x))
    fraction = np.where((fraction == 0) | np.isinf(x), signed_zero, fraction)
    return fraction, whole


def _conjugate(x):
    if np.dtype(dtype_of(x)).kind == "c":
        raise UnsupportedError("np.conjugate of a complex array is not supported")
    return x.copy()  # a new array, in the loop's dtype (bool's is int8)


COMPOSITES = {
    np.hypot: in_loop_dtypes(np.hypot, _hypot),
    np.heaviside: in_loop_dtypes(np.heaviside, _heaviside),
    np.fmax: in_loop_dtypes(np.fmax, _fmax),
    np.fmin: in_loop_dtypes(np.fmin, _fmin),
    np.logaddexp2: in_loop_dtypes(np.logaddexp2, _logaddexp2),
    np.float_power: in_loop_dtypes(np.float_power, lambda x, y: x ** y),
    np.deg2rad: in_loop_dtypes(np.deg2rad, _scale_by(np.pi, 180.0)),
    np.radians: in_loop_dtypes(np.radians, _scale_by(np.pi, 180.0)),
    np.rad2deg: in_loop_dtypes(np.rad2deg, _scale_by(180.0, np.pi)),
    np.degrees: in_loop_dtypes(np.degrees, _scale_by(180.0, np.pi)),
    np.copysign: in_loop_dtypes(np.copysign, _copysign),
    np.divmod: _divmod,
    np.modf: in_loop_dtypes(np.modf, _modf),
    np.conjugate: in_loop_dtypes(np.conjugate, _conjugate),
}


# --- functions -------------------------------------------------------------------------
def sinc(x):
    """NumPy's own formula: ``sin(pi y) / (pi y)`` with 0 moved to 1e-20."""
    y = np.pi * np.where(x == 0, 1.0e-20, x)
    return np.sin(y) / y


def fix(x, out=None):
    """Round toward zero as NumPy's ``fix`` does: ``ceil``, then ``floor`` where
    ``x >= 0``."""
    if out is not None:
        raise UnsupportedError("np.fix(..., out=...) is not supported; assign the result")
    return np.where(np.greater_equal(x, 0), np.floor(x), np.ceil(x))


def real(val):
    if np.dtype(dtype_of(val)).kind == "c":
        raise UnsupportedError("np.real of a complex array is not supported")
    return val


def imag(val):
    if np.dtype(dtype_of(val)).kind == "c":
        raise UnsupportedError("np.imag of a complex array is not supported")
    zeros = np.zeros_like(val)
    if is_traced(zeros):
        zeros.readonly = True  # NumPy's is a read-only view of nothing
    return zeros


FUNCTIONS = {
    np.sinc: sinc,
    np.fix: fix,
    np.real: real,
    np.imag: imag,
}
