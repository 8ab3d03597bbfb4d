"""Vectorizable transcendental functions, emitted inline as LLVM IR: the library's face.

Each function is straight-line code the loop vectorizer widens; where a float32 function
has a fast path for the common range, the arguments it does not cover (huge, infinite,
NaN, denormal) take the general code as a rare path, per vector and only when a lane needs
it (``math_rare_path``). The algorithms live in modules named for them:

    math_exp    exp, exp2, expm1,    math_trig   sin, cos, tan
                tanh
    math_log    log, log1p, log2,    math_pow    x ** y
                log10
    math_erf    erf                  math_core   the shared pieces
    math_tanh   float32 tanh         math_rare_path  slow paths per vector
                                     math_table  tables read by permutes
                                     math_scale  v 2^n rounded once

Each function states its error bound, checked by ``tests/codegen/test_mathlib.py`` over
the whole float range (denormals, zeros, infinities, NaN, huge arguments, thresholds, the
edges of every fast path): against NumPy, and for float32 also against the correctly
rounded result (NumPy's own float32 SIMD exp, log and log1p are up to 2-4 ulp off):

                vs NumPy            vs exact
    function   float32  float64    float32    method
    exp        3 ulp    2 ulp      1 ulp      Cody-Waite reduction by ln2, Taylor series;
                                              float32 x <= 70: minimax polynomial, 2^n in
                                              two steps (exponent bits, a multiply that
                                              rounds denormals: within 0.75 ulp); x whose
                                              exp is 0 (-inf too) selected on that path
    exp2       3 ulp    2 ulp      1 ulp      n = rint(x), r = x - n exact (exact at
                                              integers), r ln2 as a float-float, exp's
                                              polynomial and scaling
    expm1      3 ulp    2 ulp      2 ulp      2^n * expm1(r) + (2^n - 1)
    log        5 ulp    2 ulp      2 ulp      fdlibm: x = 2^k m, log(1+f) = f - hfsq + ...;
                                              float32 normal x: k and m from the bits,
                                              r + r^2 P(r), P of degree 7 (no division)
    log1p      3 ulp    2 ulp      1 ulp      fdlibm, corrected for the rounding of 1 + x;
                                              float32: u = 1 + x = 2^k (1 + r), r +
                                              r^2 P(r), P of degree 8, plus c/u (c the
                                              rounding error of u: one division)
    log2,      4, 5     2 ulp      2 ulp      float64: log's core as a double-double times
    log10      ulp                            1/ln b (split), plus k log_b 2 (its head
                                              exact); within 0.79 and 0.77 ulp of exact
                                              (mpmath, a sample); float32: a r + r Q(r), a
                                              a power of two (a r exact), Q of degree 8;
                                              both exact at powers of b
    tanh       2 ulp    3 ulp      1 ulp      expm1(2|x|) / (expm1(2|x|) + 2), sign restored;
                                              float32 on AVX-512: a polynomial of degree 5
                                              per quarter binade of |x|, from 32-entry
                                              tables by permutes (no division); elsewhere
                                              1 - 2 / (e^(2|x|) + 1), below 0.7 an odd
                                              polynomial
    sin, cos   2 ulp    2 ulp      1 ulp      float32 |x| < 2^20: Cody-Waite by pi/2 in
                                              float-float; else Payne-Hanek by pi/2 (no
                                              branches), fdlibm kernels
    tan        6 ulp    2 ulp      3 ulp      sin's reduction once; float32: its own odd
                                              polynomial, rounded once with the reduction's
                                              low part, -1/tan in odd quadrants (one
                                              division); float64: fdlibm's sin/cos kernels
                                              divided, corrected by the exact residual
    pow        2 ulp    2 ulp      1 ulp      exp(y log x), log in double-double; C99 cases;
                                              float32 positive normal x, finite y: y log2 x
                                              and 2^t by float64 series, rounded once
                                              (within 0.505 ulp of exact); AVX-512: in
                                              float32 at full width, ln x and y ln x as
                                              float-float pairs, 32-entry tables by
                                              permutes, 2^n by vscalefps (within 0.56
                                              ulp, 0.76 on denormal results);
                                              float32 x ** 3 (4, -2, -3, -4): float64
                                              products rounded once
    erf        1 ulp    1 ulp      1 ulp      fdlibm's pieces, all computed and selected;
                                              float32: x + x q(x^2) below 0.875, then
                                              polynomials of degree 10 and 11 to 3.92

float32 bounds relaxed for speed (issue 16) stay within NumPy's own float32 error on the
machine they were set on (NumPy 2.4.6, AVX512_ICL), both in fractions of an ulp of the
exact result: NumPy's over the whole float32 range (``NUMPY_FRACTIONAL_ULP_FLOAT32`` in
the tests), ours on every positive float32 for the logs (their maxima lie in [0.72, 1.34])
and on every float32 of [1e-7, 2^20) for tan (its fast path; 1.68 below 1000; within 2.1
on all 2^32, ``test_float32_every_float``; since tan reduces x with its sign and folds its
tail into two multiply-adds: 1.694 on every float32 of [1e-7, 1000), 2.087 on every one of
[1000, 2^20)):

    function   ours     NumPy's
    log        1.14     3.83
    log2       1.37     2.12
    log10      1.36     3.49
    tan        2.07     3.90   (NumPy's: 3.72 below 2^20)

Measured on every float32 (``test_float32_every_float``), in fractions of an ulp of the
exact result: exp 1.02 (its normal results, at x = -27.378; 0.75 on denormal results,
0.50 on its rare path, x > 70), expm1 1.46, log1p 0.876 (every float32 of its fast path,
(-1, 2^100), at x = 0.2743; 0.86 with fdlibm's two divisions before), tanh 0.992 (every
positive float32, the tables; 1.08 by the exponential, 1.50 with e/(e + 2) before), sin
0.91 and cos 0.96 (their fast path; the float64 reduction beyond it), erf 0.81 (0.743 on
[0.875, 3.92] with two intervals); on every 997th float32 and the edges of the fast paths
(``test_float32_fractional_ulp_bound``): exp2 0.99; float32 pow within 0.56 ulp on 39
million pairs (0.76 where the result is denormal: rounded twice, as exp's). float64
results are bit for bit those of the library before the float32 fast paths (checked on
the test sweeps).

sin, cos and pow are within 1 ulp of NumPy in both precisions; float64 sin and
cos within 0.75 ulp of the exact result over the whole range, float64 pow within 0.6 ulp.
The range reduction of sin and cos is exact enough everywhere, up to the largest float:
at the doubles closest to a multiple of pi/2 (the hardest inputs) float64 sin and cos stay
within 1 ulp of exact, where NumPy's own float64 sin is thousands of ulp off.

NumPy has no erf: its "vs NumPy" columns are against the eager primitive (fdlibm's
algorithm in NumPy, ``tracer/ops/special.py``). float64 erf is within 1 ulp of the eager one
(which rounds twice where x is denormal) and within 0.81 ulp of the exact result (mpmath,
on 260,000 points of [-6.2, 6.2] and tiny x; the eager one within 0.85).

fmod (np.mod and np.floor_divide of floats, LLVM's ``frem``) is the one operation left to
the C library: the loop still vectorizes, with one ``fmod`` call per lane.
"""

from __future__ import annotations

from .math_core import ceil, copysign, fabs, floor, fma, rint, sqrt, trunc
from .math_erf import erf
from .math_exp import exp, exp2, expm1, tanh
from .math_log import log, log1p, log2, log10
from .math_pow import pow, pow_small_integer  # noqa: A004 - NumPy's name
from .math_trig import cos, sin, tan

__all__ = ["ceil", "copysign", "cos", "erf", "exp", "exp2", "expm1", "fabs", "floor", "fma", "log",
           "log1p", "log2", "log10", "pow", "pow_small_integer", "rint", "sin", "sqrt", "tan",
           "tanh", "trunc"]
