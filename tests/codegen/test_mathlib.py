"""The compiled math library against NumPy, over the whole float range.

For exp, expm1, log, log1p, tanh, sin, cos and erf in float32 and float64 (compiled from
traces of the NumPy functions, and of ``tracejit.tracer.ops.erf_p`` for erf, which NumPy lacks) this
measures the largest error in ulps against NumPy (for erf: the eager primitive, fdlibm's
algorithm in NumPy) over

* a dense sweep of the whole float range, positive and negative (evenly spaced bit
  patterns: log-spaced values from the smallest denormal to the largest float), plus
  random bit patterns, plus 400,001 evenly spaced values over [-8, 8];
* dense linear sweeps around each function's interesting points: the overflow and
  underflow thresholds of exp/expm1, 1 for log, -1 for log1p, tanh's saturation, 0,
  where expm1, log1p, tanh, sin and erf must be relatively accurate, multiples of pi/4
  (sin and cos: zeros, and the edges of the range reduction's quadrants), and the edges of
  erf's pieces;

and asserts it stays within the bound ``codegen/mathlib.py`` states (``STATED_ULP``), and,
for float32, within the stated bound against the correctly rounded result (float64 NumPy
rounded to float32: NumPy's own float32 SIMD functions are a few ulp off themselves).
Special values (NaN, signed infinities and zeros, denormals, domain edges) must match
NumPy exactly. sin and cos are also checked against exact values (mpmath) where x is
closest to a multiple of pi/2, the hardest inputs for the range reduction, where NumPy's
own float64 sin is thousands of ulp off. float64 erf, compiled and eager, is checked
against exact values (mpmath) on a sample of its sweep.

``x ** y`` gets a two-argument sweep: every pair of special values (C99's rules), random
bit patterns, results spread over the whole range (denormals and the overflow edge
included), bases near 1 with huge exponents, and negative bases with integer exponents;
float64 results are also checked against exact values (mpmath) on a sample.

float32 is also held to bounds in fractions of an ulp against float64 (every 997th float32
and every float near the edge of each fast path; x ** y on its sweep and 4 million more
pairs), and arguments the float32 fast paths leave to their rare paths
(``codegen/math_rare_path.py``) are mixed into vectors of ordinary ones at every position
and length of a size bucket: each element must get bit for bit its result in an array of
its own kind.

Kernels using the library must be SIMD code without library calls.

``MEASURED_ULP`` collects the maxima; ``python tests/codegen/test_mathlib.py`` prints them
as a table.

Compiled float32 sums (``np.sum``) must be at least as accurate as NumPy's pairwise
summation, both measured against the exact sum (``math.fsum`` of the float64 values).
"""

from __future__ import annotations

import math
import os
import re
import sys

import numpy as np
import pytest
from compiled_checks import F32, F64, assert_same, compiled, dtype_id, ulp_distance

from tracejit.codegen import math_exp, math_log, math_table, math_tanh, math_trig
from tracejit.tracer import ops
from tracejit.tracer.ops import special

FUNCTIONS = ["exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "tanh", "sin", "cos",
             "tan", "erf"]
# The eager function each compiled one is traced from and compared with.
REFERENCES = {"erf": ops.erf_p}
# The table in codegen/mathlib.py's docstring: against NumPy, and float32 against the
# correctly rounded result.
STATED_ULP = {
    ("exp", F32): 3, ("exp", F64): 2, ("expm1", F32): 3, ("expm1", F64): 2,
    ("log", F32): 5, ("log", F64): 2, ("log1p", F32): 3, ("log1p", F64): 2,
    ("tanh", F32): 2, ("tanh", F64): 3, ("sin", F32): 2, ("sin", F64): 2,
    ("cos", F32): 2, ("cos", F64): 2, ("power", F32): 2, ("power", F64): 2,
    ("erf", F32): 1, ("erf", F64): 1, ("log2", F32): 4, ("log2", F64): 2,
    ("log10", F32): 5, ("log10", F64): 2, ("tan", F32): 6, ("tan", F64): 2,
    ("exp2", F32): 3, ("exp2", F64): 2,
}
EXACT_ULP_FLOAT32 = {"exp": 1, "expm1": 2, "log": 2, "log1p": 1, "tanh": 1, "sin": 1, "cos": 1,
                     "power": 1, "erf": 1, "log2": 2, "log10": 2, "tan": 3, "exp2": 1}
# NumPy's own float32 error on the machine the bounds were set on (NumPy 2.4.6, AVX512_ICL:
# SVML-class kernels), in fractions of an ulp of the exact result (float64 NumPy): the
# maximum over every positive float32 and every 7th negative one (``numpy_float32_error``;
# for x ** y the pairs of ``test_power_float32_fractional_ulp_bound`` and 4 million of the
# benchmark's). A float32 bound may be relaxed for speed up to NumPy's own error, never
# beyond (issue 16): ``test_relaxed_bounds_stay_within_numpys_error``.
NUMPY_FRACTIONAL_ULP_FLOAT32 = {"log": 3.83, "log2": 2.12, "log10": 3.49, "tan": 3.90,
                                "power": 1.15}
EXACT_ULP_HARD_CASES = 1  # against mpmath: sin, cos, tan (float64), float64 power, erf, log2, log10
MEASURED_ULP = {}  # (function, dtype name) -> (max ulp, argument where it is reached)

SWEEP_SIZE = 1 << 20  # one program per function and dtype, traced at this (dynamic) size

# Thresholds of the float formats where results change behaviour.
POINTS = {
    F32: {"exp_overflow": 88.72283935546875, "exp_denormal": -87.33654022216797,
          "exp_underflow": -103.97208404541016, "expm1_saturation": -17.0,
          "tanh_saturation": 9.5, "erf_rounds_to_one": 3.919205843636722,
          "exp2_overflow": 128.0, "exp2_denormal": -126.0, "exp2_underflow": -149.5},
    F64: {"exp_overflow": 709.782712893384, "exp_denormal": -708.3964185322641,
          "exp_underflow": -745.1332191019411, "expm1_saturation": -38.0,
          "tanh_saturation": 19.5, "erf_rounds_to_one": 5.921587195794507,
          "exp2_overflow": 1024.0, "exp2_denormal": -1022.0, "exp2_underflow": -1075.0},
}
# The edges of the float32 fast paths: beyond them a vector takes the rare path.
FAST_PATH_EDGES = {
    "exp": math_exp.EXP_FAST_LIMIT_F32, "expm1": math_exp.FAST_LIMIT_F32,
    "exp2": math_exp.EXP2_FAST_LIMIT_F32, "log": "smallest_normal",
    "log1p": math_log.LOG1P_FAST_HIGH_F32,
    "log2": "smallest_normal", "log10": "smallest_normal",
    "sin": math_trig.FAST_LIMIT_F32, "cos": math_trig.FAST_LIMIT_F32,
    "tan": math_trig.FAST_LIMIT_F32,
}
POINTS[F32]["smallest_normal"] = float(np.finfo(F32).tiny)
POINTS[F64]["smallest_normal"] = float(np.finfo(F64).tiny)
INTERESTING = {
    "exp": ["exp_overflow", "exp_denormal", "exp_underflow", 0.0],
    "expm1": ["exp_overflow", "expm1_saturation", 0.0],
    # overflow, the denormal results, NumPy's last nonzero, integers (exact powers of two)
    "exp2": ["exp2_overflow", "exp2_denormal", "exp2_underflow", 0.0, 1.0, 3.0],
    "log": [1.0, 0.0, "smallest_normal"],
    "log1p": [-1.0, 0.0],
    # 1 (the result is relatively small there), powers of the base (exact results)
    "log2": [1.0, 0.0, 2.0, 0.5, 1024.0, 2.0**-100],
    "log10": [1.0, 0.0, 10.0, 0.1, 1000.0, 1e-30],
    "tanh": ["tanh_saturation", 0.0, 0.7],  # 0.7: float32 switches from a polynomial
    # zeros of sin and cos, the edges of the quadrants, and large multiples of pi
    "sin": [0.0, math.pi / 4, math.pi / 2, math.pi, 3 * math.pi / 4, 2**20 * math.pi, 1e22],
    "cos": [0.0, math.pi / 4, math.pi / 2, math.pi, 3 * math.pi / 4, 2**20 * math.pi, 1e22],
    # its poles and zeros, where the quotient's parts swap
    "tan": [0.0, math.pi / 4, math.pi / 2, math.pi, 3 * math.pi / 4, 2**20 * math.pi, 1e22],
    # the edges of fdlibm's pieces, and where the result starts to round to +-1
    "erf": [0.0, special.ERF_TINY, 0.84375, 1.25, special.ERF_TAIL_SPLIT,
            special.ERF_SATURATION, "erf_rounds_to_one"],
}


def reference(name):
    return REFERENCES.get(name) or getattr(np, name)


def program_for(name, dtype):
    function = reference(name)
    arity = getattr(function, "nin", 1)
    return compiled(("mathlib", name, dtype), lambda *arguments: function(*arguments),
                    *[np.ones(SWEEP_SIZE, dtype)] * arity)


def evaluate(name, dtype, *arguments):
    """The compiled ``np.<name>`` of ``arguments`` (padded into the program's size
    bucket)."""
    arguments = [np.asarray(values, dtype) for values in arguments]
    low = SWEEP_SIZE // 2 + 1
    outputs = []
    for start in range(0, max(arguments[0].size, 1), SWEEP_SIZE):
        chunks = [values[start:start + SWEEP_SIZE] for values in arguments]
        padding = np.zeros(max(0, low - chunks[0].size), dtype)
        (result,) = program_for(name, dtype)(*[np.concatenate([chunk, padding])
                                               for chunk in chunks])
        outputs.append(result[:chunks[0].size])
    return np.concatenate(outputs)


def numpy_of(name, *arguments):
    with np.errstate(all="ignore"):
        return reference(name)(*arguments)


# --- the sweeps ------------------------------------------------------------------------
def whole_range(dtype, count):
    """``count`` values of each sign evenly spaced in bit pattern from +0 to the largest
    float: every binade, the denormals included, gets its share."""
    int_type = np.int32 if dtype == F32 else np.int64
    top = int(np.array(np.finfo(dtype).max, dtype).view(int_type))
    bits = np.linspace(0, top, count, dtype=np.float64).astype(np.int64).astype(int_type)
    positive = bits.view(dtype)
    return np.concatenate([positive, -positive])


def random_bits(dtype, count, seed):
    int_type = np.int32 if dtype == F32 else np.int64
    info = np.iinfo(int_type)
    rng = np.random.default_rng(seed)
    values = rng.integers(info.min, info.max, count, dtype=int_type, endpoint=True).view(dtype)
    return values[np.isfinite(values)]


def around(point, dtype, ulps=2000, width=None, count=20000):
    """Every float within ``ulps`` of ``point``, and ``count`` values spread over
    ``point +- width``."""
    point = dtype.type(point)
    steps = [point]
    up, down = point, point
    for _ in range(ulps):
        up = np.nextafter(up, dtype.type(np.inf))
        down = np.nextafter(down, dtype.type(-np.inf))
        steps += [up, down]
    width = width if width is not None else max(abs(float(point)) * 0.01, 1e-3)
    spread = np.linspace(float(point) - width, float(point) + width, count)
    return np.concatenate([np.array(steps, dtype), spread.astype(dtype)])


def near_zero(dtype):
    """Log-spaced tiny magnitudes of both signs, where relative accuracy matters most."""
    smallest = math.log10(float(np.finfo(dtype).smallest_subnormal))
    magnitudes = np.logspace(smallest, 0, 40000)
    return np.concatenate([magnitudes, -magnitudes]).astype(dtype)


def core(dtype):
    """Dense over [-8, 8], where a model's activations mostly are (a bound broken at
    x = 0.0078 slipped through the log-spaced sweeps once)."""
    return np.linspace(-8.0, 8.0, 400_001).astype(dtype)


def sweep(name, dtype):
    parts = [whole_range(dtype, 200_000), random_bits(dtype, 100_000, seed=len(name)),
             near_zero(dtype), core(dtype)]
    for point in INTERESTING[name] + [FAST_PATH_EDGES.get(name, 0.0)]:
        value = POINTS[dtype][point] if isinstance(point, str) else point
        parts.append(around(value, dtype))
        parts.append(around(-value, dtype))
    huge = np.array([np.finfo(dtype).max, 1e30, 1e20, 1e10, 1e5, 3e3], dtype)
    parts.append(np.concatenate([huge, -huge]))
    return np.concatenate(parts)


def measure(name, dtype):
    values = sweep(name, dtype)
    actual, expected = evaluate(name, dtype, values), numpy_of(name, values)
    distance = ulp_distance(actual, expected)
    worst = int(np.argmax(distance))
    MEASURED_ULP[(name, dtype_id(dtype))] = (float(distance[worst]), values[worst])
    return values, actual, expected, distance


CASES = [pytest.param(name, dtype, id=f"{name}-{dtype_id(dtype)}")
         for name in FUNCTIONS for dtype in (F32, F64)]
KNOWN_BOUND_BUGS = {}


def bound_cases():
    marked = []
    for case in CASES:
        reason = KNOWN_BOUND_BUGS.get(tuple(case.values))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        marked.append(pytest.param(*case.values, id=case.id, marks=marks))
    return marked


@pytest.mark.parametrize("name, dtype", bound_cases())
def test_ulp_bound_over_the_whole_range(name, dtype):
    values, actual, expected, distance = measure(name, dtype)
    bound = STATED_ULP[(name, dtype)]
    worst = int(np.argmax(distance))
    assert distance[worst] <= bound, (
        f"{name} {dtype}: {distance[worst]:g} ulp at x = {values[worst]!r} "
        f"(compiled {actual[worst]!r}, NumPy {expected[worst]!r}); "
        f"{int(np.sum(distance > bound))} of {values.size} points above {bound} ulp"
    )


@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_against_the_correctly_rounded_result(name):
    values = sweep(name, F32)
    actual = evaluate(name, F32, values)
    with np.errstate(all="ignore"):
        exact = numpy_of(name, values.astype(np.float64)).astype(F32)
    distance = ulp_distance(actual, exact)
    worst = int(np.argmax(distance))
    assert distance[worst] <= EXACT_ULP_FLOAT32[name], (
        f"{name} float32: {distance[worst]:g} ulp from the correctly rounded result at "
        f"x = {values[worst]!r}"
    )


@pytest.mark.parametrize("name, dtype", CASES)
def test_exact_results_where_numpy_gives_special_values(name, dtype):
    """Across the sweep: NaN exactly where NumPy gives NaN, and NumPy's infinities and
    zeros exactly (with their signs), e.g. exp overflowing to inf and underflowing to 0."""
    values = sweep(name, dtype)
    actual, expected = evaluate(name, dtype, values), numpy_of(name, values)
    special = np.isnan(expected) | np.isinf(expected) | (expected == 0)
    assert_same(actual[special], expected[special], 0, (values[special],),
                f"{name} {dtype} where NumPy gives NaN, inf or 0")


def special_inputs(dtype):
    info = np.finfo(dtype)
    return np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0,
                     info.max, -info.max, info.tiny, -info.tiny, info.smallest_subnormal,
                     -info.smallest_subnormal, np.nextafter(dtype.type(-1), dtype.type(0)),
                     np.nextafter(dtype.type(-1), dtype.type(-2)),
                     POINTS[dtype]["exp_overflow"], POINTS[dtype]["exp_underflow"],
                     POINTS[dtype]["exp_denormal"], 1000.0, -1000.0], dtype)


@pytest.mark.parametrize("name, dtype", CASES)
def test_special_values(name, dtype):
    """NaN, +-inf, +-0, the extremes, denormals, domain edges (log of negatives and 0,
    log1p at and beyond -1) and the exp thresholds: NumPy's results (within the stated ulp
    bound where the result is an ordinary float)."""
    values = special_inputs(dtype)
    assert_same(evaluate(name, dtype, values), numpy_of(name, values), STATED_ULP[(name, dtype)],
                (values,), f"{name} {dtype}")


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_log2_and_log10_of_exact_powers_are_exact(dtype):
    """log2(2^k) = k and exp2(k) = 2^k for every power of two (denormals too; the composite
    exp(k ln2) missed most) and log10(10^n) = n for every
    power of ten the format holds exactly, as the C library gives them (int(np.log2(n))
    must not be one less; NumPy's own float32 log10 misses some powers of ten)."""
    info = np.finfo(dtype)
    exponents = np.arange(info.minexp - info.nmant, info.maxexp)
    powers = powers_of_two = np.ldexp(np.ones(exponents.size), exponents).astype(dtype)
    assert_same(evaluate("log2", dtype, powers), exponents.astype(dtype), 0, (powers,),
                f"log2 {dtype} of powers of two")
    assert_same(evaluate("exp2", dtype, exponents.astype(dtype)), powers_of_two, 0,
                (exponents,), f"exp2 {dtype} of integers")
    tens = np.arange(0, 11 if dtype == F32 else 23)  # 10^n exact in the format
    powers = (10.0 ** tens).astype(dtype)
    assert_same(evaluate("log10", dtype, powers), tens.astype(dtype), 0, (powers,),
                f"log10 {dtype} of powers of ten")


@pytest.mark.parametrize("name", ["log2", "log10"])
def test_log2_log10_float64_against_exact_values(name):
    """float64 log2 and log10 within 1 ulp of mpmath's on log-spaced values over the whole
    range (denormals too) and on [0.5, 2], where the result is smallest (measured: 0.79
    and 0.77)."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(23)
    values = np.concatenate([np.exp(rng.uniform(-744, 709, 2000)), rng.uniform(0.5, 2, 2000)])
    actual = evaluate(name, F64, values)
    exact_log = (lambda t: mpmath.log(t, 2)) if name == "log2" else mpmath.log10
    with mpmath.workprec(200):
        exact = [exact_log(mpmath.mpf(float(x))) for x in values]
        errors = np.array([float(abs(mpmath.mpf(float(a)) - e)) / float(np.spacing(
            abs(float(e)))) for a, e in zip(actual, exact)])
    worst = int(np.argmax(errors))
    assert errors[worst] <= EXACT_ULP_HARD_CASES, (
        f"{name} float64: {errors[worst]:.3g} ulp from the exact value at x = {values[worst]!r}")


# --- fast paths and rare paths -----------------------------------------------------------
# float32 within this many ulps (fractions, not rounded) of the exact result: float64 NumPy
# (the eager primitive for erf). The test checks every 997th float32 and every float32 near
# the edges of the fast paths; with TRACEJIT_EXHAUSTIVE=1, ``test_float32_every_float``
# checks all 2^32 (about 10 minutes a function here), which measured: exp 1.06 (0.999 on
# its fast path), expm1 1.46, log 0.84, log1p 0.88, tanh 1.50, sin 0.91, cos 0.96 (every
# float below 2^20, the fast path), erf 0.81. Since: log 0.83 on every normal float32 and
# log1p 0.86 on every third (fused multiply-adds), erf 0.743 on [0.875, 3.92] (two
# intervals); exp 1.02 with denormal results on its fast path (0.75 there) and (70, 88.7]
# computed in float64 (0.50); see codegen/mathlib.py. log1p with one division (r + r^2 P(r)
# + c/u, P of degree 8): 0.876 on every float32 of its fast path, (-1, 2^100).
# log, log2 and log10 traded accuracy for speed within NumPy's own error (no division:
# a polynomial in r = m - 1): measured on every positive float32: log 1.14, log2 1.37,
# log10 1.36 (NumPy's: 3.83, 2.12, 3.49); tan (no float-float quotient) 1.68 on
# every float32 of [1e-7, 1000), 2.07 on every one of [1000, 2^20) (NumPy's: 3.35, 3.72;
# 3.90 at 1.45e24); since x is reduced with its sign and pi/2's parts are rounded down:
# 1.694 and 2.087.
# tanh: 1.08 on every positive float32 up to its saturation since 1 - 2/(e^(2|x|) + 1)
# replaced e/(e + 2) above 0.7 (1.50 before, at 3.81; NumPy's own: 1.37); read from tables
# on AVX-512 hosts (``math_tanh``): 0.992 on every positive float32
# (``test_float32_tanh_paths`` checks the other path).
EXACT_FRACTIONAL_ULP_FLOAT32 = {"exp": 1.1, "exp2": 1.1, "expm1": 1.5, "log": 1.15, "log1p": 0.9,
                                "log2": 1.4, "log10": 1.4, "tanh": 1.1, "sin": 1.0,
                                "cos": 1.0, "tan": 2.1, "erf": 0.85}
# Every float32 within 2^18 floats of each fast path's edge is checked (both signs).
EDGES = {"exp": math_exp.EXP_FAST_LIMIT_F32, "exp2": math_exp.EXP2_FAST_LIMIT_F32,
         "expm1": math_exp.FAST_LIMIT_F32,
         "log": float(np.finfo(F32).tiny), "log1p": math_log.LOG1P_FAST_HIGH_F32,
         "log2": float(np.finfo(F32).tiny), "log10": float(np.finfo(F32).tiny),
         "tan": math_trig.FAST_LIMIT_F32,
         "tanh": math_exp.TANH_SMALL_LIMIT_F32, "sin": math_trig.FAST_LIMIT_F32,
         "cos": math_trig.FAST_LIMIT_F32,
         "erf": 0.84375}


def float32_bits(first, last, stride=1):
    """Every ``stride``-th float32 from bit pattern ``first`` up to ``last``, and their
    negatives."""
    positive = np.arange(first, last, stride, dtype=np.int64).astype(np.uint32).view(F32)
    return np.concatenate([positive, -positive])


def around_edge(edge, floats=1 << 18):
    middle = int(np.array(edge, F32).view(np.uint32))
    return float32_bits(max(middle - floats, 0), middle + floats)


def fractional_ulp_errors(name, values):
    """|compiled - exact| in ulps of the exact result's float32, where that is a finite
    nonzero float32 (the special values are checked exactly elsewhere)."""
    actual = evaluate(name, F32, values).astype(np.float64)
    exact = numpy_of(name, values.astype(np.float64))
    ordinary = np.isfinite(exact) & (np.abs(exact) <= np.finfo(F32).max) & (exact != 0)
    spacing = np.spacing(np.abs(exact[ordinary]).astype(F32)).astype(np.float64)
    return values[ordinary], np.abs(actual[ordinary] - exact[ordinary]) / spacing


@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_fractional_ulp_bound(name):
    """The bound in fractions of an ulp, on 4.3 million floats spread over every binade
    (every 997th bit pattern) and on every float near the edge of the fast path."""
    every_997th = float32_bits(0, 0x7F800000, 997)
    values, errors = fractional_ulp_errors(name, np.concatenate([every_997th,
                                                                 around_edge(EDGES[name])]))
    worst = int(np.argmax(errors))
    bound = EXACT_FRACTIONAL_ULP_FLOAT32[name]
    assert errors[worst] <= bound, (
        f"{name} float32: {errors[worst]:.3f} ulp from the exact result at "
        f"x = {values[worst]!r}; {int(np.sum(errors > bound))} of {values.size} above {bound}")


@pytest.mark.skipif(not os.environ.get("TRACEJIT_EXHAUSTIVE"),
                    reason="every float32: set TRACEJIT_EXHAUSTIVE=1 (minutes per function)")
@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_every_float(name):
    """The fractional bound on all 2^32 float32 bit patterns, in pieces of 2^24."""
    worst, where = 0.0, None
    for first in range(0, 0x7F800000, 1 << 24):
        values, errors = fractional_ulp_errors(
            name, float32_bits(first, min(first + (1 << 24), 0x7F800000)))
        if errors.size and errors.max() > worst:
            worst, where = float(errors.max()), values[int(np.argmax(errors))]
    assert worst <= EXACT_FRACTIONAL_ULP_FLOAT32[name], (name, worst, where)


def numpy_float32_error(name, stride_negative=7):
    """NumPy's own float32 error: max |np.f(x) - exact| in ulps of the exact float32 result
    (float64 NumPy), over every positive float32 and every ``stride_negative``-th negative
    one, where the result is a finite nonzero float32."""
    worst = 0.0
    function = reference(name)
    for sign, stride in ((1, 1), (-1, stride_negative)):
        for first in range(0, 0x7F800000, 1 << 24):
            values = np.arange(first, min(first + (1 << 24), 0x7F800000), stride,
                               dtype=np.int64).astype(np.uint32).view(F32) * F32.type(sign)
            with np.errstate(all="ignore"):
                actual, exact = function(values).astype(np.float64), function(
                    values.astype(np.float64))
            ordinary = np.isfinite(exact) & (np.abs(exact) <= np.finfo(F32).max) & (exact != 0)
            spacing = np.spacing(np.abs(exact[ordinary]).astype(F32)).astype(np.float64)
            errors = np.abs(actual[ordinary] - exact[ordinary]) / spacing
            worst = max(worst, float(errors.max(initial=0.0)))
    return worst


def test_relaxed_bounds_stay_within_numpys_error():
    """A float32 bound relaxed for speed stays within NumPy's own error, and the guard
    margins (``tracer.margin_rules.ULP_VS_NUMPY``: ulps between our result and NumPy's)
    cover ours plus NumPy's."""
    from tracejit.tracer.margin_rules import ULP_VS_NUMPY

    for name, numpys in NUMPY_FRACTIONAL_ULP_FLOAT32.items():
        ours = (EXACT_FRACTIONAL_ULP_FLOAT32[name] if name != "power"
                else max(POWER_FRACTIONAL_ULP_FLOAT32, POWER_DENORMAL_FRACTIONAL_ULP_FLOAT32))
        assert ours <= numpys, (name, ours, numpys)
        assert STATED_ULP[(name, F32)] <= ULP_VS_NUMPY[name], name
        assert math.ceil(ours + numpys) <= ULP_VS_NUMPY[name], name


@pytest.mark.skipif(not os.environ.get("TRACEJIT_EXHAUSTIVE"),
                    reason="every float32: set TRACEJIT_EXHAUSTIVE=1 (minutes per function)")
@pytest.mark.parametrize("name", sorted(set(NUMPY_FRACTIONAL_ULP_FLOAT32) - {"power"}))
def test_numpys_own_float32_error(name):
    """The recorded NumPy errors are NumPy's on this machine (another NumPy build or CPU
    can differ: then re-measure before relaxing a bound against it)."""
    assert numpy_float32_error(name) == pytest.approx(NUMPY_FRACTIONAL_ULP_FLOAT32[name],
                                                      abs=0.01)


def rare_arguments(name, dtype):
    """Arguments beyond each fast path (and special values): a vector holding one of them
    takes the rare path."""
    info = np.finfo(dtype)
    values = [np.nan, np.inf, -np.inf, info.max, -info.max, 1e30, -1e30, 3e6, -3e6,
              info.smallest_subnormal, -info.tiny, 1e-40, 90.0, -90.0, 1e35, -5.0, -1.0]
    return np.array(values, dtype)


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_rare_lanes_leave_their_neighbours_alone(name, dtype):
    """Arrays mixing ordinary arguments with rare ones (huge, infinite, NaN, denormal,
    negative for log) at every position of 4-, 8- and 16-lane vectors and of the scalar
    remainder, at every length of a size bucket: each element's result is bit for bit its
    result in an array of its own kind (all fast path, or all rare path)."""
    rng = np.random.default_rng(len(name))
    low = 0.01 if name.startswith("log") else -8.0
    ordinary = rng.uniform(low, 8.0, 64).astype(dtype)
    rare = rare_arguments(name, dtype)
    alone_ordinary, alone_rare = evaluate(name, dtype, ordinary), evaluate(name, dtype, rare)
    function = reference(name)
    program = compiled(("mathlib-mixed", name, dtype), lambda x: function(x), np.ones(48, dtype))
    for size in range(33, 65):
        layouts = [[position] for position in range(size)] if size in (33, 47, 48, 64) else []
        layouts += [rng.choice(size, count, replace=False) for count in (1, 2, 5, size // 3)]
        for positions in layouts:
            picks = rng.integers(0, rare.size, len(positions))
            values, expected = ordinary[:size].copy(), alone_ordinary[:size].copy()
            values[positions], expected[positions] = rare[picks], alone_rare[picks]
            with np.errstate(all="ignore"):
                (actual,) = program(values)
            same = (actual.view(f"u{dtype.itemsize}") == expected.view(f"u{dtype.itemsize}"))
            same |= np.isnan(actual) & np.isnan(expected)
            assert same.all(), (
                f"{name} {dtype} length {size}, rare at {sorted(positions)}: differs at "
                f"{np.flatnonzero(~same).tolist()} ({values[~same]!r} -> {actual[~same]!r}, "
                f"alone {expected[~same]!r})")


def test_ulp_distance_helper():
    one = np.float32(1.0)
    above = np.nextafter(one, np.float32(2))
    assert ulp_distance(one, above) == 1
    assert ulp_distance(np.float32(0.0), np.float32(-0.0)) == 0
    smallest = np.finfo(np.float64).smallest_subnormal
    assert ulp_distance(np.float64(smallest), np.float64(-smallest)) == 2
    assert ulp_distance(np.float32(np.nan), np.float32(np.nan)) == 0
    assert ulp_distance(np.float64(np.nan), np.float64(1.0)) == np.inf
    largest = np.finfo(np.float32).max
    assert ulp_distance(np.float32(largest), np.float32(np.inf)) == 1
    assert ulp_distance(np.float64(-np.inf), np.float64(np.inf)) == 2 * (0x7FF << 52)


# --- sin and cos where the range reduction is hardest -------------------------------------
def closest_to_multiples_of_half_pi(dtype, exponents, per_exponent=2):
    """Floats M * 2^e (M with the format's mantissa bits) closest to a multiple of pi/2, for
    each e in ``exponents``: multiples of the continued-fraction denominators of
    2^e * 2/pi mod 1 (the best approximations), which lie in the mantissa range."""
    mpmath = pytest.importorskip("mpmath")
    bits = 24 if dtype == F32 else 53
    low, high = 1 << (bits - 1), 1 << bits
    found = []
    with mpmath.workprec(1300):
        two_over_pi = 2 / mpmath.pi
        for exponent in exponents:
            remainder = mpmath.frac(mpmath.ldexp(two_over_pi, exponent))
            previous, denominator, candidates = 0, 1, []
            while remainder and denominator < high:
                term = int(mpmath.floor(1 / remainder))
                remainder = 1 / remainder - term
                previous, denominator = denominator, term * denominator + previous
                multiple = max(1, -(-low // denominator)) * denominator
                if multiple < high:
                    candidates.append(multiple)
            found += [math.ldexp(m, exponent) for m in candidates[-per_exponent:]]
    values = np.array(found, dtype)
    return values[np.isfinite(values)]


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_sin_cos_where_x_is_closest_to_a_multiple_of_half_pi(dtype):
    """Against exact values (mpmath): the result is tiny there, so the range reduction must
    keep its relative accuracy through the cancellation (float64 needs 2/pi to 2^-1100
    and more: the closest double, 6381956970095103 * 2^797, is 2^-61.5 from one)."""
    mpmath = pytest.importorskip("mpmath")
    exponents = range(-23, 105) if dtype == F32 else range(-52, 972, 4)
    values = closest_to_multiples_of_half_pi(dtype, exponents)
    if dtype == F64:
        values = np.append(values, math.ldexp(6381956970095103, 797))
    for name in ("sin", "cos", "tan"):
        actual = evaluate(name, dtype, values)
        with mpmath.workprec(1300):
            exact = [getattr(mpmath, name)(mpmath.mpf(float(x))) for x in values]
            errors = np.array([float(abs(mpmath.mpf(float(a)) - e) / float(np.spacing(
                dtype.type(abs(float(e)))))) for a, e in zip(actual, exact)])
        worst = int(np.argmax(errors))
        # float32 tan's bound is relaxed everywhere (1.28 here: its rounding, not the
        # reduction's, which keeps r to 2^-45 relatively)
        bound = (EXACT_FRACTIONAL_ULP_FLOAT32[name] if (name, dtype) == ("tan", F32)
                 else EXACT_ULP_HARD_CASES)
        assert errors[worst] <= bound, (
            f"{name} {dtype}: {errors[worst]:.3g} ulp from the exact value at "
            f"x = {values[worst]!r} ({values.size} inputs)")


# --- erf against exact values ------------------------------------------------------------
@pytest.mark.parametrize("compiled_or_eager", ["compiled", "eager"])
def test_erf_float64_against_exact_values(compiled_or_eager):
    """float64 erf, compiled and eager (the NumPy implementation of the primitive), within
    1 ulp of mpmath's on a sample of the sweep (math.erf, the C library's, is no exact
    reference: it is off by up to 1 ulp itself)."""
    mpmath = pytest.importorskip("mpmath")
    values = sweep("erf", F64)
    values = values[np.isfinite(values)]
    rng = np.random.default_rng(14)
    picked = rng.choice(values.size, 3000, replace=False)
    # and where erf is neither x * 2/sqrt(pi) nor +-1
    values = np.concatenate([values[picked], rng.uniform(-6.5, 6.5, 3000),
                             special_inputs(F64)[4:]])
    if compiled_or_eager == "compiled":
        actual = evaluate("erf", F64, values)
    else:
        actual = numpy_of("erf", values)
    with mpmath.workprec(200):
        exact = [mpmath.erf(mpmath.mpf(float(x))) for x in values]
        errors = np.array([float(abs(mpmath.mpf(float(a)) - e)) / float(np.spacing(
            abs(float(e)))) for a, e in zip(actual, exact)])
    worst = int(np.argmax(errors))
    assert errors[worst] <= EXACT_ULP_HARD_CASES, (
        f"erf float64 ({compiled_or_eager}): {errors[worst]:.3g} ulp from the exact value at "
        f"x = {values[worst]!r}")


def test_erf_special_values():
    """erf(+-0) = +-0, erf(+-inf) = +-1, NaN stays NaN, tiny x gives x * 2/sqrt(pi) (the
    smallest denormals included), and from 6 on the result is +-1 exactly."""
    smallest = float(np.finfo(F64).smallest_subnormal)
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6.0, -6.0, 1e30, smallest,
                       -smallest, 1e-310, 2.0**-1022, 1e-20])
    expected = np.array([0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0, 1.0, smallest, -smallest,
                         1e-310 * (2 / math.sqrt(math.pi)), 2.0**-1022 * (2 / math.sqrt(math.pi)),
                         1e-20 * (2 / math.sqrt(math.pi))])
    for dtype in (F32, F64):
        typed = values.astype(dtype)
        want = np.array([math.erf(float(x)) if np.isfinite(x) else w
                         for x, w in zip(typed, expected)]).astype(dtype)
        assert_same(evaluate("erf", dtype, typed), want, 1, (typed,), f"compiled erf {dtype}")
        assert_same(numpy_of("erf", typed), want, 1, (typed,), f"eager erf {dtype}")


# --- x ** y ---------------------------------------------------------------------------
def power_specials(dtype):
    """Values where C99's pow has rules of its own, and their neighbours."""
    info = np.finfo(dtype)
    big_even = 2.0 ** (info.nmant + 1)  # from here on every float is an even integer
    return np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0,
         1.5, -1.5, 0.25, 7.0, -7.0, 10.0, info.max, -info.max, info.tiny, -info.tiny,
         info.smallest_subnormal, -info.smallest_subnormal, 1 + info.eps, 1 - info.epsneg,
         -1 - info.eps, -1 + info.epsneg, big_even, -big_even, big_even - 1, 1 - big_even,
         1e10, -1e10, 1e-10, 0.1, -0.1], dtype)


def power_pairs(dtype):
    """``(x, y)`` for the power sweep: every pair of specials, random bit patterns, results
    spread evenly in log scale over the whole range (denormals and the overflow edge),
    bases near 1 to huge powers, negative bases to integer powers, small integers."""
    rng = np.random.default_rng(11)
    info = np.finfo(dtype)
    specials = power_specials(dtype)
    pairs = [(np.repeat(specials, specials.size), np.tile(specials, specials.size))]
    bits = random_bits(dtype, 400_000, seed=12)
    half = bits.size // 2
    pairs.append((bits[:half], bits[half:2 * half]))
    count = 200_000
    smallest, largest = math.log(float(info.smallest_subnormal)), math.log(float(info.max))

    def targets():  # log of the result: from below the smallest denormal to beyond the max
        return rng.uniform(smallest * 1.01, largest * 1.01, count)

    with np.errstate(all="ignore"):
        bases = np.exp(rng.uniform(smallest, largest, count))
        bases = np.where(rng.random(count) < 0.25, 1 + rng.standard_normal(count) * 1e-3, bases)
        pairs.append((bases, targets() / np.log(bases)))
        near_one = 1 + rng.integers(-2000, 2000, count) * float(info.eps)
        pairs.append((near_one, targets() / np.log(near_one)))
        negative = -rng.uniform(0, 10, count)
        pairs.append((negative, np.round(targets() / np.log(-negative))))
    pairs.append((rng.integers(-20, 21, count), rng.integers(-40, 41, count)))
    xs = np.concatenate([np.asarray(x, np.float64) for x, _ in pairs]).astype(dtype)
    ys = np.concatenate([np.asarray(y, np.float64) for _, y in pairs]).astype(dtype)
    return xs, ys


def measure_power(dtype):
    xs, ys = power_pairs(dtype)
    actual, expected = evaluate("power", dtype, xs, ys), numpy_of("power", xs, ys)
    distance = ulp_distance(actual, expected)
    worst = int(np.argmax(distance))
    MEASURED_ULP[("power", dtype_id(dtype))] = (float(distance[worst]), (xs[worst], ys[worst]))
    return (xs, ys), actual, expected, distance


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_power_ulp_bound(dtype):
    (xs, ys), actual, expected, distance = measure_power(dtype)
    bound = STATED_ULP[("power", dtype)]
    worst = int(np.argmax(distance))
    assert distance[worst] <= bound, (
        f"power {dtype}: {distance[worst]:g} ulp at x, y = {xs[worst]!r}, {ys[worst]!r} "
        f"(compiled {actual[worst]!r}, NumPy {expected[worst]!r}); "
        f"{int(np.sum(distance > bound))} of {xs.size} pairs above {bound} ulp")


def test_power_float32_against_the_correctly_rounded_result():
    xs, ys = power_pairs(F32)
    actual = evaluate("power", F32, xs, ys)
    with np.errstate(all="ignore"):
        exact = np.power(xs.astype(np.float64), ys.astype(np.float64)).astype(F32)
    distance = ulp_distance(actual, exact)
    worst = int(np.argmax(distance))
    assert distance[worst] <= EXACT_ULP_FLOAT32["power"], (
        f"power float32: {distance[worst]:g} ulp from the correctly rounded result at "
        f"x, y = {xs[worst]!r}, {ys[worst]!r}")


def test_power_float64_against_exact_values():
    """float64 x ** y against mpmath on a sample of the sweep's finite, nonzero results."""
    mpmath = pytest.importorskip("mpmath")
    xs, ys = power_pairs(F64)
    expected = numpy_of("power", xs, ys)
    ordinary = np.flatnonzero(np.isfinite(expected) & (expected != 0))
    picked = np.random.default_rng(13).choice(ordinary, 4000, replace=False)
    xs, ys = xs[picked], ys[picked]
    actual = evaluate("power", F64, xs, ys)
    with mpmath.workprec(200):
        exact = [mpmath.power(mpmath.mpf(float(x)), mpmath.mpf(float(y))) for x, y in zip(xs, ys)]
        errors = np.array([float(abs(mpmath.mpf(float(a)) - e)) / float(np.spacing(abs(float(e))))
                           for a, e in zip(actual, exact)])
    worst = int(np.argmax(errors))
    assert errors[worst] <= EXACT_ULP_HARD_CASES, (
        f"power float64: {errors[worst]:.3g} ulp from the exact value at "
        f"x, y = {xs[worst]!r}, {ys[worst]!r}")


POWER_FRACTIONAL_ULP_FLOAT32 = 0.6
# Denormal results of the full-width float32 path (``math_pow._pow_float32_wide``) round
# twice: 2^(j/32) e^r to 24 bits, then times 2^n to the denormal's fewer bits (vscalefps),
# up to 1/4 ulp more in the top denormal binade (float32 exp's two steps: 0.75).
POWER_DENORMAL_FRACTIONAL_ULP_FLOAT32 = 0.8


def assert_power_fractional_bound(xs, ys, actual, label="power float32"):
    """float32 ``actual`` = xs ** ys within ``POWER_FRACTIONAL_ULP_FLOAT32`` (a fraction,
    not rounded) of the exact result (float64 NumPy) where that is a normal float32, within
    ``POWER_DENORMAL_FRACTIONAL_ULP_FLOAT32`` where it is denormal."""
    with np.errstate(all="ignore"):
        exact = np.power(xs.astype(np.float64), ys.astype(np.float64))
    ordinary = np.isfinite(exact) & (np.abs(exact) <= np.finfo(F32).max) & (exact != 0)
    xs, ys, exact = xs[ordinary], ys[ordinary], exact[ordinary]
    with np.errstate(over="ignore"):
        spacing = np.spacing(np.abs(exact).astype(F32)).astype(np.float64)
    errors = np.abs(actual[ordinary].astype(np.float64) - exact) / spacing
    denormal = np.abs(exact) < np.finfo(F32).tiny
    for kind, where, bound in (("normal", ~denormal, POWER_FRACTIONAL_ULP_FLOAT32),
                               ("denormal", denormal, POWER_DENORMAL_FRACTIONAL_ULP_FLOAT32)):
        if where.any():
            worst = int(np.argmax(np.where(where, errors, -1.0)))
            assert errors[worst] <= bound, (
                f"{label}: {errors[worst]:.3f} ulp from the exact {kind} result at x, y = "
                f"{xs[worst]!r}, {ys[worst]!r}")


def test_power_float32_fractional_ulp_bound():
    """float32 x ** y within ``POWER_FRACTIONAL_ULP_FLOAT32`` (denormal results:
    ``POWER_DENORMAL_FRACTIONAL_ULP_FLOAT32``) of the exact result on the sweep and on 3
    million pairs whose results spread over every binade, and on bases and exponents a
    model uses (measured: 0.54, 0.53, 0.50 by the division's path; 0.504, 0.502, 0.500 by
    the float64 tables; the full-width float32 path AVX-512 hosts run 0.557 on normal
    results, 0.757 on denormal ones (0.502 before), these pairs and 35 million more; NumPy's
    own 1.15 on these pairs and 4 million of the benchmark's)."""
    xs, ys = power_pairs(F32)
    rng = np.random.default_rng(15)
    bases = rng.integers(0x00800000, 0x7F800000, 3_000_000).astype(np.uint32).view(F32)
    with np.errstate(all="ignore"):
        exponents = (rng.uniform(-104, 89, bases.size) / np.log(bases.astype(np.float64)))
    xs = np.concatenate([xs, bases, rng.uniform(0, 10, 10**6).astype(F32)])
    ys = np.concatenate([ys, exponents.astype(F32), rng.uniform(-10, 10, 10**6).astype(F32)])
    assert_power_fractional_bound(xs, ys, evaluate("power", F32, xs, ys))


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_power_rare_lanes_leave_their_neighbours_alone(dtype):
    """As for the one-argument functions: pairs the float32 fast path leaves to the rare
    path (x zero, denormal, infinite or NaN; y infinite or NaN) mixed into vectors of
    ordinary pairs (negative bases too) at every position and length of a size bucket."""
    rng = np.random.default_rng(17)
    ordinary_x = rng.uniform(-4.0, 4.0, 64).astype(dtype)
    ordinary_y = np.where(rng.random(64) < 0.5, rng.integers(-5, 6, 64),
                          rng.uniform(-6.0, 6.0, 64)).astype(dtype)
    info = np.finfo(dtype)
    rare_x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal,
                       -info.smallest_subnormal, 2.0, -2.0, 0.5], dtype)
    rare_y = np.array([3.0, -3.0, 0.5, -0.5, 2.0, 1.5, 2.0, np.inf, -np.inf, np.nan], dtype)
    alone_ordinary = evaluate("power", dtype, ordinary_x, ordinary_y)
    alone_rare = evaluate("power", dtype, rare_x, rare_y)
    program = compiled(("mathlib-mixed", "power", dtype), lambda x, y: np.power(x, y),
                       np.ones(48, dtype), np.ones(48, dtype))
    for size in range(33, 65):
        layouts = [[position] for position in range(size)] if size in (33, 48, 64) else []
        layouts += [rng.choice(size, count, replace=False) for count in (1, 3, size // 3)]
        for positions in layouts:
            picks = rng.integers(0, rare_x.size, len(positions))
            x, y = ordinary_x[:size].copy(), ordinary_y[:size].copy()
            expected = alone_ordinary[:size].copy()
            x[positions], y[positions] = rare_x[picks], rare_y[picks]
            expected[positions] = alone_rare[picks]
            with np.errstate(all="ignore"):
                (actual,) = program(x, y)
            same = actual.view(f"u{dtype.itemsize}") == expected.view(f"u{dtype.itemsize}")
            same |= np.isnan(actual) & np.isnan(expected)
            assert same.all(), (size, sorted(positions), x[~same], y[~same], actual[~same],
                                expected[~same])


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_power_special_values(dtype):
    """Every pair of special values (C99's rules, as NumPy: pow(x, 0) and pow(1, y) are 1
    even for NaN, a negative base to an odd integer power keeps its sign, to a non-integer
    power is NaN, +-0 and +-inf by the sign and parity of y), and across the whole sweep
    NaN, infinities and zeros exactly where NumPy has them."""
    specials = power_specials(dtype)
    xs, ys = np.repeat(specials, specials.size), np.tile(specials, specials.size)
    assert_same(evaluate("power", dtype, xs, ys), numpy_of("power", xs, ys),
                STATED_ULP[("power", dtype)], (xs, ys), f"power {dtype}")
    xs, ys = power_pairs(dtype)
    actual, expected = evaluate("power", dtype, xs, ys), numpy_of("power", xs, ys)
    special = np.isnan(expected) | np.isinf(expected) | (expected == 0)
    assert_same(actual[special], expected[special], 0, (xs[special], ys[special]),
                f"power {dtype} where NumPy gives NaN, inf or 0")


def test_float32_power_tables_reduce_exactly():
    """The full-width float32 path's tables (``math_pow._pow_float32_wide``): for every
    float32 z of each of the 32 subintervals, r = z (1/c_i) - 1 is a float32 (one
    multiply-add takes it exactly), |r| <= 0.0235 (the range of the series), |ln c_i| >=
    |ln(1 + r)| where c_i != 1 (ln x's head by a fast two-sum), and ln c_i's two parts are
    -ln(1/c_i) within 2^-40, the head on a grid of 2^-16."""
    from tracejit.codegen import math_pow

    step = 1 << math_pow._WIDE_SHIFT
    for index, inverse in enumerate(math_pow._WIDE_INVC):
        first = math_pow._WIDE_OFFSET_BITS + index * step
        z = np.arange(first, first + step, dtype=np.int64).astype(np.uint32).view(F32)
        r = z.astype(np.float64) * inverse - 1.0  # exact in float64
        assert (r.astype(F32).astype(np.float64) == r).all(), index
        assert np.abs(r).max() <= 0.0235, index
        head, low = math_pow._WIDE_LOGC_HI[index], math_pow._WIDE_LOGC_LO[index]
        assert head * 2**16 == round(head * 2**16), index
        assert abs(head + low + math.log(inverse)) <= 2.0**-40, index
        if inverse != 1.0:
            assert abs(head) >= np.abs(np.log1p(r)).max(), index


def test_float32_power_at_the_tables_edges():
    """float32 x ** y for x within 64 floats of each edge of the 32 subintervals (in the
    binades of 1, 2, 1/2 and 2^-100), each to exponents whose y ln x spreads up to the
    overflow and denormal edges: within ``assert_power_fractional_bound``."""
    from tracejit.codegen import math_pow

    rng = np.random.default_rng(31)
    edges = [math_pow._WIDE_OFFSET_BITS + index * (1 << math_pow._WIDE_SHIFT)
             for index in range(33)]
    bits = np.concatenate([np.arange(edge - 64, edge + 65) for edge in edges])
    xs = np.concatenate([bits.astype(np.uint32).view(F32) * F32.type(scale)
                         for scale in (1.0, 2.0, 0.5, 2.0**-100)])
    xs = np.repeat(xs[xs != 1], 6)
    with np.errstate(all="ignore"):
        ys = (rng.uniform(-103, 88, xs.size) / np.log(xs.astype(np.float64))).astype(F32)
    assert_power_fractional_bound(xs, ys, evaluate("power", F32, xs, ys),
                                  "power float32 at the tables' edges")


def test_power_float32_powers_of_two_are_exact():
    """float32 pow's fast path rounds t = y log2|x| to n by adding 1.5 * 2^52 and shifts n
    from that sum's bits into the exponent: a power of two to an integer power is exact
    bit for bit (normal and denormal results, both signs of x and n, overflow to inf and
    underflow to 0 at the reach of the clamp); t at and beside half-integers (n rounds to
    even, r = t - n is exact either way) within the stated bound of the exact result."""
    exponents = np.arange(-126, 128)
    xs = np.repeat(np.ldexp(1.0, exponents), 13).astype(F32)
    ys = np.tile(np.arange(-6, 7), exponents.size).astype(F32)
    xs = np.concatenate([xs, -xs])
    ys = np.concatenate([ys, ys])
    with np.errstate(all="ignore"):
        expected = np.power(xs.astype(np.float64), ys.astype(np.float64)).astype(F32)
    assert_same(evaluate("power", F32, xs, ys), expected, 0, (xs, ys),
                "float32 powers of two to integer powers")
    # 4 ** (k/4 +- a few ulps): t = k/2 + a little, at the ties of rint
    quarters = (np.arange(-200, 201) / 4.0).astype(F32)
    ys = np.concatenate([np.nextafter(quarters, np.float32(-np.inf)), quarters,
                         np.nextafter(quarters, np.float32(np.inf))])
    xs = np.full(ys.size, 4.0, F32)
    actual = evaluate("power", F32, xs, ys)
    exact = np.power(xs.astype(np.float64), ys.astype(np.float64)).astype(F32)
    distance = ulp_distance(actual, exact)
    assert distance.max() <= EXACT_ULP_FLOAT32["power"], (
        ys[int(np.argmax(distance))], actual[int(np.argmax(distance))])


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
@pytest.mark.parametrize("exponent", [0.5, 2.0, 1.0, -1.0, 0.0, 3.0, -0.5, 1.5])
def test_power_with_a_literal_exponent_is_numpys(exponent, dtype):
    """``x ** c`` with a Python float: NumPy's own fast paths (a power of 0.5 is its square
    root: (-0.0) ** 0.5 is -0.0 and (-inf) ** 0.5 NaN, not C99's +0.0 and +inf), bit for
    bit where NumPy computes exactly (0.5, 2, 1, -1, 0), within the stated bound elsewhere,
    special values exact."""
    program = compiled(("mathlib-literal-power", exponent, dtype),
                       lambda x: x ** exponent, np.ones(64, dtype))
    rng = np.random.default_rng(21)
    values = np.concatenate([power_specials(dtype), rng.uniform(-10, 10, 4000).astype(dtype),
                             random_bits(dtype, 4000, seed=22)])
    with np.errstate(all="ignore"):
        (actual,) = program(values)
        expected = values ** exponent
    exact = exponent in (0.5, 2.0, 1.0, -1.0, 0.0)
    assert_same(actual, expected, 0 if exact else STATED_ULP[("power", dtype)], (values,),
                f"x ** {exponent} {dtype}")


@pytest.mark.parametrize("base", [10.0, 2.0, 0.5, 1.0, -1.0, -2.0, 0.0, -0.0, np.inf, -np.inf,
                                  np.nan, 1e-40])
def test_float32_literal_base_to_array_powers(base):
    """``10.0 ** y``: a literal base is built into pow's slow path (not passed to it), its
    special cases (and those of y) as NumPy's, other results within the stated bound."""
    program = compiled(("mathlib-literal-base", repr(base)), lambda y: base ** y,
                       np.ones(64, F32))
    rng = np.random.default_rng(25)
    ys = np.concatenate([power_specials(F32), rng.uniform(-40, 40, 4000).astype(F32),
                         rng.integers(-40, 41, 4000).astype(F32),
                         random_bits(F32, 4000, seed=26)])
    with np.errstate(all="ignore"):
        (actual,) = program(ys)
        expected = base ** ys
    assert_same(actual, expected, STATED_ULP[("power", F32)], (ys,), f"{base} ** y float32")


@pytest.mark.parametrize("exponent", [3, 4, -2, -3, -4])
def test_float32_power_of_a_small_integer_literal_is_correctly_rounded(exponent):
    """float32 ``x ** 3`` (``x ** -2`` ...) of either sign: products in float64 rounded once
    (``math_pow.pow_small_integer``), so the correctly rounded result (the float64 power
    rounded to float32) bit for bit, signed zeros, infinities and NaN included; pow's fast
    path was up to 0.54 ulp off and now leaves negative bases to its rare path."""
    program = compiled(("mathlib-small-integer-power", exponent),
                       lambda x: x ** exponent, np.ones(64, F32))
    rng = np.random.default_rng(23)
    values = np.concatenate([power_specials(F32), rng.uniform(-10, 10, 200_000).astype(F32),
                             random_bits(F32, 200_000, seed=24)])
    with np.errstate(all="ignore"):
        (actual,) = program(values)
        expected = np.power(values.astype(np.float64), float(exponent)).astype(F32)
    assert_same(actual, expected, 0, (values,), f"x ** {exponent} float32")


# --- vectorized ------------------------------------------------------------------------
def calls_in(optimized_ir):
    """``(callee, result type)`` of every call that is not an LLVM intrinsic."""
    return re.findall(r"call (?:fastcc )?(float|double|<\d+ x \w+>) @(?!llvm\.)(\w+)",
                      optimized_ir)


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
@pytest.mark.parametrize("name, function", [
    ("sin", lambda x, y: np.sin(x) * 2), ("cos", lambda x, y: np.cos(x) + y),
    ("power", lambda x, y: x ** y), ("exp-log", lambda x, y: np.exp(x) * np.log(y)),
    ("erf", lambda x, y: ops.erf_p(x) * y), ("log1p-expm1", lambda x, y: np.log1p(x) - np.expm1(y)),
    ("tanh", lambda x, y: np.tanh(x)), ("sin-compare", lambda x, y: np.sin(x) > y),
    ("tan", lambda x, y: np.tan(x) - y), ("log2-log10", lambda x, y: np.log2(x) + np.log10(y)),
    ("exp2", lambda x, y: np.exp2(x) * y),
    ("exp-row-sum", lambda x, y: np.sum(np.exp(x - y), axis=-1))])
def test_kernels_using_the_math_library_are_vectorized(name, function, dtype):
    """SIMD code without library calls: the loop vectorizer widens the straight-line code,
    and a float32 rare path (``math_rare_path``) costs a vector one branch: its vector
    variants are inlined, and the only calls left are to the slow path's own functions
    (``tracejit_slow_*``, out of line, called where a lane needs them) and to the scalar
    reads of a table (``math_table``: a scalar remainder's; vector code permutes), the
    float32 tanh's polynomial from its tables (``math_tanh``, likewise) and scalings
    (``math_scale``: vector code scales by vscalefps)."""
    shape = (64, 64) if name == "exp-row-sum" else (4096,)
    program = compiled(("mathlib-vectorized", name, dtype), function,
                       np.ones(shape, dtype), np.ones(shape, dtype))
    element = "float" if dtype == F32 else "double"
    assert f" x {element}>" in program.optimized_ir
    calls = calls_in(program.optimized_ir)
    assert all(callee.startswith("tracejit_slow_") or callee.startswith(
        ("tracejit_table_", "tracejit_tanh_", "tracejit_scale_")) and not result.startswith("<")
        for result, callee in calls), calls
    assert "@tracejit_vv_" not in program.optimized_ir  # inlined, then dropped


@pytest.mark.parametrize("name, function", [
    ("x ** 1.5", lambda x, y: x ** 1.5 + y), ("x ** 5", lambda x, y: x ** 5.0 + y),
    ("10 ** x", lambda x, y: 10.0 ** x + y)])
def test_float32_power_with_a_literal_is_vectorized(name, function):
    """``x ** 1.5``, ``10 ** x``: the loop is vectorized and reaches pow's slow path through
    a vector variant (a vector call from the loop besides the scalar slow function's own).
    With the literal passed to the slow path as an argument, LLVM's constant propagation
    dropped it from the slow function's signature, no variant matched it, and the loop
    stayed scalar (x ** 1.5: 7.6 ms a 1024x1024 call against 1.3 with an array of
    exponents)."""
    program = compiled(("mathlib-literal-vectorized", name), function, np.ones(4096, F32),
                       np.ones(4096, F32))
    calls = calls_in(program.optimized_ir)
    vector_calls = [callee for result, callee in calls
                    if result.startswith("<") and callee.startswith("tracejit_slow_")]
    assert len(vector_calls) >= 2, calls



def test_float32_power_reads_its_tables_by_permutes():
    """On an AVX-512 host float32 ``x ** y`` runs at full vector width
    (``math_pow._pow_float32_wide``): its five 32-entry float32 tables read by two-source
    permutes of 16 lanes in the vector loop, not by gathers (a load per lane), no division
    and no float64 arithmetic outside its slow path (which reads the float64 fast path's
    three 16-entry tables by permutes of 8 lanes)."""
    from tracejit.codegen.math_table import permutes

    if not permutes():
        pytest.skip("tables are permuted on AVX-512 hosts only")
    program = compiled(("mathlib-power-tables",), lambda x, y: x ** y, np.ones(4096, F32),
                       np.ones(4096, F32))
    parts = re.split(r"\ndefine ", program.optimized_ir)
    kernels = "".join(part for part in parts if "tracejit_slow_" not in part.split("(", 1)[0])
    slow = "".join(part for part in parts if "tracejit_slow_" in part.split("(", 1)[0])
    assert kernels.count("@llvm.x86.avx512.vpermi2var.ps.512(") >= 5
    assert "gather" not in kernels and "fdiv <" not in kernels and " x double>" not in kernels
    assert slow.count("@llvm.x86.avx512.vpermi2var.pd.512(") >= 3


POWER_PATHS = {  # (math_pow.USE_WIDE, math_pow.USE_TABLES, math_table.permutes)
    "float32 tables": (True, True, True), "float32 tables lane by lane": (True, True, False),
    "tables": (False, True, True), "division": (False, False, True),
    "tables lane by lane": (False, True, False)}


@pytest.mark.parametrize("path", list(POWER_PATHS))
def test_float32_power_fast_paths(path, monkeypatch):
    """Every float32 fast path (the full-width float32 one and the float64 tables AVX-512
    hosts run, ``math_pow.USE_WIDE`` and ``USE_TABLES``, the division's path the others
    run, and the tables read lane by lane and 2^n scaled by two multiplies, as on a host
    without AVX-512's permutes and vscalefps: AVX2) within
    ``assert_power_fractional_bound`` of the exact result on the sweep's pairs, NumPy's NaN,
    infinities and zeros exactly, each element bit for bit as in a vector of its own kind
    (odd sizes: scalar remainders); without AVX-512's instructions the results are theirs
    bit for bit."""
    from tracejit.codegen import math_pow, math_scale, math_table

    def program_of(path):
        return compiled(("mathlib-power-paths", path), lambda x, y: x ** y,
                        np.ones(SWEEP_SIZE, F32), np.ones(SWEEP_SIZE, F32))

    wide, tables, permuted = POWER_PATHS[path]
    monkeypatch.setattr(math_pow, "USE_WIDE", wide)
    monkeypatch.setattr(math_pow, "USE_TABLES", tables)
    xs, ys = power_pairs(F32)
    xs, ys = xs[:SWEEP_SIZE], ys[:SWEEP_SIZE]
    if not permuted:
        if not math_table.permutes():
            pytest.skip("the permutes' results to compare with need an AVX-512 host")
        with np.errstate(all="ignore"):
            (by_permutes,) = program_of(path.replace(" lane by lane", ""))(xs, ys)
        monkeypatch.setattr(math_table, "permutes", lambda: False)
        monkeypatch.setattr(math_scale, "scalef_instruction", lambda: False)
    program = program_of(path)
    with np.errstate(all="ignore"):
        (actual,) = program(xs, ys)
    if not permuted:
        assert "vpermi2var" not in program.optimized_ir
        assert "scalef" not in program.optimized_ir
        assert (actual.view(np.uint32) == by_permutes.view(np.uint32)).all()
    with np.errstate(all="ignore"):
        expected = np.power(xs, ys)
    special = np.isnan(expected) | np.isinf(expected) | (expected == 0)
    assert_same(actual[special], expected[special], 0, (xs[special], ys[special]),
                f"power float32 ({path}) where NumPy gives NaN, inf or 0")
    assert_power_fractional_bound(xs, ys, actual, f"power float32 ({path})")
    for size in (SWEEP_SIZE // 2 + 3, SWEEP_SIZE // 2 + 13):
        (part,) = program(xs[:size], ys[:size])
        same = part.view(np.uint32) == actual[:size].view(np.uint32)
        assert (same | np.isnan(part) & np.isnan(actual[:size])).all(), size


# float32 divisions a vector of each function's fast path: the divider takes ~8 cycles a
# 16-lane vector on the AVX-512 host, so a second one bounded log1p's loop (fdlibm's
# s = f/(2 + f) besides c/u: 0.42 ms a 1024x1024 call on one core, 0.35 with one).
# tanh: none where it reads its polynomials from tables (AVX-512, ``math_tanh``), else the
# one of 1 - 2/(e^(2|x|) + 1).
FLOAT32_DIVISIONS = {"log1p": 1, "tanh": 0 if math_table.permutes() else 1, "log": 0, "log2": 0,
                     "log10": 0, "exp": 0, "erf": 0}


@pytest.mark.parametrize("name", sorted(FLOAT32_DIVISIONS))
def test_float32_fast_paths_divide_as_stated(name):
    """Each vectorized loop (the main one and its narrower remainder) holds the stated
    number of float32 divisions a vector it stores (a loop running two vectors an
    iteration, ``kernel_builder.INTERLEAVE_INSTRUCTIONS``, holds two); the rare paths'
    float64 functions are not counted."""
    function = reference(name)
    program = compiled(("mathlib-divisions", name), lambda x: function(x), np.ones(4096, F32))
    kernels = "".join(part for part in re.split(r"\ndefine ", program.optimized_ir)
                      if "tracejit_slow_" not in part.split("(", 1)[0])
    widths = re.findall(r"fdiv <(\d+) x float>", kernels)
    stores = re.findall(r"store <(\d+) x float>", kernels)
    per_vector = {width: widths.count(width) / stores.count(width) for width in widths}
    expected = FLOAT32_DIVISIONS[name]
    assert set(per_vector.values()) == ({expected} if expected else set()), per_vector

TANH_PATHS = {  # (math_tanh.USE_TABLES, math_table.permutes)
    "tables": (True, True), "tables lane by lane": (True, False), "exponential": (False, True)}


@pytest.mark.parametrize("path", list(TANH_PATHS))
def test_float32_tanh_paths(path, monkeypatch):
    """Both float32 tanh codes, the tables AVX-512 hosts read (``math_tanh``) and the
    exponential's code the others run (and the tables read lane by lane, as on a host
    without the permutes: bit for bit the permutes' results), within the fractional bound
    of the exact result on every 997th float32 and every float32 near the tables' first
    interval and the exponential's series edge, NumPy's NaN, infinities and zeros exactly,
    and the sign restored bit for bit (odd sizes: scalar remainders)."""
    def program_of(path):
        return compiled(("mathlib-tanh-paths", path), lambda x: np.tanh(x),
                        np.ones(SWEEP_SIZE, F32))

    def evaluate_on(program, values):
        outputs = []
        for start in range(0, values.size, SWEEP_SIZE):
            chunk = values[start:start + SWEEP_SIZE]
            padding = np.zeros(max(0, SWEEP_SIZE // 2 + 1 - chunk.size), F32)
            (result,) = program(np.concatenate([chunk, padding]))
            outputs.append(result[:chunk.size])
        return np.concatenate(outputs)

    tables, permuted = TANH_PATHS[path]
    monkeypatch.setattr(math_tanh, "USE_TABLES", tables)
    values = np.concatenate([float32_bits(0, 0x7F800000, 997),
                             around_edge(math_exp.TANH_SMALL_LIMIT_F32),
                             around_edge(0.046875), around_edge(9.5),
                             np.array([0.0, np.inf, np.nan], F32)])
    values = values[:values.size // 2]  # the positive half: the sign is checked below
    if not permuted:
        if not math_table.permutes():
            pytest.skip("the permutes' results to compare with need an AVX-512 host")
        by_permutes = evaluate_on(program_of(path.replace(" lane by lane", "")), values)
        monkeypatch.setattr(math_table, "permutes", lambda: False)
    program = program_of(path)
    actual = evaluate_on(program, values)
    if not permuted:
        assert "vpermi2var" not in program.optimized_ir
        assert (actual.view(np.uint32) == by_permutes.view(np.uint32)).all()
    negated = evaluate_on(program, -values)
    assert (negated.view(np.uint32) == (-actual).view(np.uint32)).all()
    exact = np.tanh(values.astype(np.float64))
    special = ~np.isfinite(values) | (values == 0)
    assert_same(actual[special], np.tanh(values[special]), 0, values[special],
                f"tanh float32 ({path}) at NaN, inf and 0")
    ordinary = ~special & (exact != 0)
    spacing = np.spacing(np.abs(exact[ordinary]).astype(F32)).astype(np.float64)
    errors = np.abs(actual[ordinary] - exact[ordinary]) / spacing
    worst = int(np.argmax(errors))
    assert errors[worst] <= EXACT_FRACTIONAL_ULP_FLOAT32["tanh"], (
        f"tanh float32 ({path}): {errors[worst]:.3f} ulp at x = {values[ordinary][worst]!r}")
    for size in (SWEEP_SIZE // 2 + 3, SWEEP_SIZE // 2 + 13):
        (part,) = program(values[:size])
        assert (part.view(np.uint32) == actual[:size].view(np.uint32)).all(), size


# --- float32 sums ----------------------------------------------------------------------
def summation_inputs():
    rng = np.random.default_rng(2024)
    n = 10**6
    many_small = np.full(n, 1.0, np.float32)
    return {
        "uniform [0, 1)": rng.random(n).astype(np.float32),
        "normal": rng.standard_normal(n).astype(np.float32),
        "wide magnitudes": (rng.standard_normal(n) * 10.0 ** rng.uniform(-8, 8, n)).astype(
            np.float32),
        "one large first, many small": np.concatenate([[np.float32(1e8)], many_small[1:]]),
        "many small, one large last": np.concatenate([many_small[1:], [np.float32(1e8)]]),
        "large cancelling pair": np.concatenate([[np.float32(3e7)], rng.random(n - 2).astype(
            np.float32), [np.float32(-3e7)]]),
        "alternating 1e4 and small": np.where(np.arange(n) % 2 == 0, np.float32(1e4),
                                              rng.random(n).astype(np.float32) * 1e-3),
    }


SUM_INPUTS = summation_inputs()


def sum_program():
    return compiled(("mathlib-sum",), lambda x: np.sum(x), np.ones(10**6, np.float32))


@pytest.mark.parametrize("case", list(SUM_INPUTS))
def test_float32_sum_at_least_as_accurate_as_numpy(case):
    """|compiled - exact| <= max(|NumPy - exact|, 1 ulp of the exact sum): the compiled sum
    is as accurate as pairwise summation (a correctly rounded result may still land one
    ulp from a NumPy result that happens to round to the nearest float)."""
    values = SUM_INPUTS[case]
    exact = math.fsum(values.astype(np.float64).tolist())
    (compiled_sum,) = sum_program()(values)
    numpy_sum = np.sum(values)
    compiled_error = abs(float(compiled_sum) - exact)
    numpy_error = abs(float(numpy_sum) - exact)
    one_ulp = float(np.spacing(np.float32(abs(exact))))
    assert compiled_error <= max(numpy_error, one_ulp), (
        f"{case}: compiled {float(compiled_sum)!r} is {compiled_error:g} from the exact sum "
        f"{exact!r}, NumPy's {float(numpy_sum)!r} only {numpy_error:g}"
    )


def test_float32_row_sums_at_least_as_accurate_as_numpy():
    rng = np.random.default_rng(5)
    rows = (rng.random((16, 65536)) * 10.0 ** rng.uniform(-3, 3, (16, 65536))).astype(np.float32)
    program = compiled(("mathlib-row-sums",), lambda x: np.sum(x, axis=1), rows)
    (compiled_sums,) = program(rows)
    exact = np.array([math.fsum(row.astype(np.float64).tolist()) for row in rows])
    compiled_error = np.abs(compiled_sums.astype(np.float64) - exact)
    numpy_error = np.abs(np.sum(rows, axis=1).astype(np.float64) - exact)
    one_ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.all(compiled_error <= np.maximum(numpy_error, one_ulp)), (
        compiled_error / one_ulp, numpy_error / one_ulp)


def ulp_table():
    """Measure every function and dtype; the table of maxima as text: against NumPy
    (NaN-for-number mismatches are counted apart, the maximum is over the other points),
    and float32 against the correctly rounded result."""
    lines = [f"{'function':9} {'float32':>38} {'float64':>38} {'float32 exact':>14}  stated"]
    for name in FUNCTIONS + ["power"]:
        cells = []
        for dtype in (F32, F64):
            if name == "power":
                arguments, actual, _, distance = measure_power(dtype)
            else:
                values, actual, _, distance = measure(name, dtype)
                arguments = (values,)
            finite = np.isfinite(distance)
            worst = int(np.argmax(np.where(finite, distance, -1)))
            where = ", ".join(f"{float(values[worst]):.8g}" for values in arguments)
            cell = f"{distance[worst]:g} ulp @ {where}"
            if not finite.all():
                cell += f", {np.sum(~finite)} NaN"
            cells.append(cell)
            if dtype == F32:
                with np.errstate(all="ignore"):
                    exact = numpy_of(name, *[values.astype(np.float64)
                                             for values in arguments]).astype(F32)
                exact_distance = float(np.max(ulp_distance(actual, exact)))
        stated = f"{STATED_ULP[(name, F32)]}, {STATED_ULP[(name, F64)]}"
        lines.append(f"{name:9} {cells[0]:>38} {cells[1]:>38} {exact_distance:>14g}  <= {stated}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(print(ulp_table()))
