"""Minimax polynomials with float32 coefficients for the float32 math library's fast paths
(``codegen/math_log.py``, ``codegen/math_trig.py``, tanh's in ``codegen/math_exp.py``, and
the float32 pow of ``docs/experiments/float32_pow``): the coefficients those modules hold are
this script's output.

    python docs/experiments/float32_polynomials/fit.py log   (or log1p, tan, tanh,
                                                              tanh_tables)

A fit is a linear program on a dense grid (minimize the largest weighted error; HiGHS via
scipy, scaled so its tolerances sit far below the error), then the coefficients are rounded
to float32 one at a time, lowest power first, the rest refitted after each rounding. The
target comes from mpmath at 80 bits. Printed: the weighted (relative) error as a power of
two, and the coefficients.
"""

from __future__ import annotations

import sys

import mpmath
import numpy as np
from scipy.optimize import linprog

mpmath.mp.prec = 80


def minimax(target, basis, weight, grid, scale=2.0**24):
    """Coefficients of ``basis`` minimizing max |weight (target - sum c_j basis_j)| on grid."""
    columns = np.stack([b(grid) for b in basis], axis=1) * weight[:, None] * scale
    sizes = np.max(np.abs(columns), axis=0)
    columns = columns / sizes
    wanted = target * weight * scale
    count = columns.shape[1]
    ones = np.ones((len(grid), 1))
    result = linprog(np.r_[np.zeros(count), 1.0],
                     A_ub=np.vstack([np.hstack([columns, -ones]), np.hstack([-columns, -ones])]),
                     b_ub=np.concatenate([wanted, -wanted]),
                     bounds=[(None, None)] * (count + 1), method="highs",
                     options=dict(primal_feasibility_tolerance=1e-10,
                                  dual_feasibility_tolerance=1e-10))
    if result.x is None:  # HiGHS gave up (a few of tanh_tables' intervals): rescale
        return minimax(target, basis, weight, grid, scale / 16)
    return result.x[:count] / sizes


def fit_float32(target, basis, weight, grid):
    """Fit, round the lowest coefficient to float32, refit the rest, and so on."""
    coefficients = []
    for j in range(len(basis)):
        rest = target - sum(c * b(grid) for c, b in zip(coefficients, basis))
        coefficients.append(float(np.float32(minimax(rest, basis[j:], weight, grid)[0])))
    rest = target - sum(c * b(grid) for c, b in zip(coefficients, basis))
    return coefficients, float(np.max(np.abs(rest * weight)))


def grid_on(low, high, count=8001):
    points = np.concatenate([np.linspace(low, high, count),
                             np.cos(np.linspace(0, np.pi, count // 3)) * (high - low) / 2
                             + (high + low) / 2])
    return np.unique(points[np.abs(points) > 1e-7])


def fit_logs():
    """log_b(1 + r) on [sqrt(2)/2 - 1, sqrt(2) - 1] as a r + r Q(r), a the power of two
    nearest 1/ln b (1 for log and log2, 1/2 for log10): log's Q is r P(r), P of degree 7;
    log2's and log10's Q has degree 8 (its constant term near 1/ln b - a); weight: the
    relative error of the whole."""
    grid = grid_on(-0.29289323, 0.41421357)
    for base, scale, a in (("log", 1, 1.0), ("log2", 1 / mpmath.log(2), 1.0),
                           ("log10", 1 / mpmath.log(10), 0.5)):
        exact = [mpmath.log1p(mpmath.mpf(r)) * scale for r in grid]
        target = np.array([float((e - mpmath.mpf(r) * a) / mpmath.mpf(r))
                           for e, r in zip(exact, grid)])
        weight = np.abs(grid / np.array([float(e) for e in exact]))
        powers = range(1, 9) if base == "log" else range(0, 9)
        basis = [lambda r, j=j: r**j for j in powers]
        coefficients, error = fit_float32(target, basis, weight, grid)
        print(f"{base}: a = {a}, within 2^{np.log2(error):.2f}: {coefficients}")


def fit_log1p():
    """log(1 + r) = r + r^2 P(r) on [sqrt(2)/2 - 1, sqrt(2) - 1], P of degree 8 (float32
    log1p, ``codegen/math_log.py``: one degree more than log's P, so the polynomial's own
    error, 2^-27.8, stays far below the roundings); weight: the relative error of the
    whole."""
    grid = grid_on(-0.29289323, 0.41421357)
    exact = [mpmath.log1p(mpmath.mpf(r)) for r in grid]
    target = np.array([float((e - mpmath.mpf(r)) / mpmath.mpf(r) ** 2)
                       for e, r in zip(exact, grid)])
    weight = np.abs(grid**2 / np.array([float(e) for e in exact]))
    coefficients, error = fit_float32(target, [lambda r, j=j: r**j for j in range(9)],
                                      weight, grid)
    print(f"log1p: within 2^{np.log2(error):.2f}: {coefficients}")


def fit_tan():
    """tan(r) = r + r^3 T(r^2) on |r| <= 0.83 (the float32 reduction by pi/2 reaches a
    little beyond pi/4), T of degree 6 in r^2; weight: the relative error of tan."""
    grid = grid_on(1e-4, 0.83)
    exact = [mpmath.tan(mpmath.mpf(r)) for r in grid]
    target = np.array([float((e - mpmath.mpf(r)) / mpmath.mpf(r) ** 3)
                       for e, r in zip(exact, grid)])
    weight = np.abs(grid**3 / np.array([float(e) for e in exact]))
    coefficients, error = fit_float32(target, [lambda r, j=j: r ** (2 * j) for j in range(7)],
                                      weight, grid)
    print(f"tan: within 2^{np.log2(error):.2f}: {coefficients}")


def fit_tanh():
    """tanh(x) = x + x^3 Q(x^2) on |x| < 0.7 (``codegen/math_exp.py``: above 0.7 the
    float32 tanh is 1 - 2/(e^(2|x|) + 1)), Q of degree 4 in x^2. Not the linear program:
    its minimax coefficients evaluate in float32 to 0.91 ulp at worst on [0, 0.7), these
    to 0.86. Least squares on 3000 Chebyshev nodes in x^2 (long doubles), weighted by the
    error relative to tanh and reweighted 40 times towards the largest errors, the
    coefficients then rounded to float32 together."""
    count, limit = 3000, 0.7
    nodes = np.cos(np.pi * (np.arange(count, dtype=np.longdouble) + 0.5) / count)
    squares = (limit * limit / 2) * (1 + nodes)
    squares = squares[squares > 1e-6]
    x = np.sqrt(squares)
    target = (np.tanh(x) - x) / (x * squares)
    columns = np.vstack([squares**j for j in range(5)]).T
    weight = x * squares / np.tanh(x)
    reweighted = weight.copy()
    for _ in range(40):
        scaled = (columns * reweighted[:, None]).astype(np.float64)
        fitted = np.linalg.lstsq(scaled, (target * reweighted).astype(np.float64),
                                 rcond=None)[0].astype(np.longdouble)
        rest = target - columns @ fitted
        fitted += np.linalg.lstsq(scaled, (rest * reweighted).astype(np.float64),
                                  rcond=None)[0].astype(np.longdouble)
        error = np.abs((columns @ fitted - target) * weight)
        reweighted = reweighted * (1 + 5 * error / error.max())
    coefficients = [float(np.float32(c)) for c in fitted]
    print(f"tanh: within 2^{np.log2(float(error.max())):.2f}: {coefficients}")


def fit_tanh_tables():
    """The float32 tanh's 32 intervals of |x| (``codegen/math_tanh.py``): entry k >= 1 is
    [lo, hi) with (bits(lo) >> 21) = 489 + k (four a binade from 0.046875; the last one
    ends at the clamp, 9.5), entry 0 [0, 0.046875). Each gets a center near its middle
    whose tanh is nearest a float32 (c0 = that float32: its rounding adds next to nothing)
    and c1..c5 for y = |x| - center of the least degree within 0.02 ulp (weight: 1/ulp of
    tanh), zeros above; entry 0 is odd (center 0: c1 y + c3 y^3 + c5 y^5). Printed as the
    module's tuples."""
    def from_bits(bits):
        return float(np.array(bits, np.uint32).view(np.float32))

    base, degree = 489, 5
    centers, columns = [], [[] for _ in range(degree + 1)]
    for k in range(32):
        low = 0.0 if k == 0 else from_bits((base + k) << 21)
        high = min(from_bits((base + k + 1) << 21), 9.5)
        center = 0.0 if k == 0 else _nearest_float32_tanh(low, high)
        c0 = float(np.float32(mpmath.tanh(center)))
        grid = grid_on(low, high)
        exact = np.array([float(mpmath.tanh(mpmath.mpf(x))) for x in grid])
        weight = 2.0**-24 / np.spacing(exact.astype(np.float32)).astype(np.float64)
        powers = range(1, degree + 1, 2) if k == 0 else range(1, degree + 1)
        basis = [lambda y, j=j: y**j for j in powers]
        for count in range(1, len(basis) + 1):
            coefficients, error = fit_float32(exact - c0, basis[:count], weight, grid - center)
            if error * 2**24 <= 0.02:
                break
        row = dict(zip(powers, coefficients))
        centers.append(center)
        columns[0].append(c0)
        for j in range(1, degree + 1):
            columns[j].append(row.get(j, 0.0))
        print(f"# {k:2d} [{low:.6g}, {high:.6g}): within {error * 2**24:.3f} ulp", file=sys.stderr)
    print(f"_CENTERS = {tuple(centers)}")
    print(f"_COEFFICIENTS = {tuple(tuple(column) for column in columns)}")


def _nearest_float32_tanh(low, high):
    """A float32 in the middle quarter of [low, high) whose tanh is nearest a float32."""
    first, last = (int(np.array(np.float32(v)).view(np.uint32)) for v in (low, high))
    middle, span = (first + last) // 2, max(1, (last - first) // 8)
    candidates = np.arange(middle - span, middle + span,
                           max(1, span // 2000)).astype(np.uint32).view(np.float32)
    values = np.tanh(candidates.astype(np.float64))
    rounded = values.astype(np.float32)
    distance = np.abs(values - rounded) / np.spacing(rounded).astype(np.float64)
    return float(candidates[int(np.argmin(distance))])


def fit_pow():
    """float32 x ** y (``docs/experiments/float32_pow``, not kept): atanh(s)/s = 1 + z A(z),
    z = s^2 up to the three-way split's largest s (A of degree 2; weight: the error
    relative to atanh(s)/s), and 2^f = 1 + f E(f) on [-1/2, 1/2] (E of degree 5; weight:
    relative to 2^f)."""
    def f32(value):
        return float(np.float32(value))

    bounds = (f32(2 ** (-1 / 6)), f32(2 ** (1 / 6)))
    centers = (f32(2 ** (-1 / 3)), f32(2 ** (1 / 3)))
    edges = [(f32(2 ** -0.5), centers[0]), (bounds[0], centers[0]), (bounds[0], 1.0),
             (bounds[1], 1.0), (bounds[1], centers[1]), (f32(2 ** 0.5), centers[1])]
    largest = max(abs((m - c) / (m + c)) for m, c in edges)
    grid = grid_on(1e-12, largest**2 * 1.01)
    exact = [mpmath.atanh(mpmath.sqrt(mpmath.mpf(z))) / mpmath.sqrt(mpmath.mpf(z)) for z in grid]
    target = np.array([float((e - 1) / mpmath.mpf(z)) for e, z in zip(exact, grid)])
    weight = np.array([float(mpmath.mpf(z) / e) for e, z in zip(exact, grid)])
    coefficients, error = fit_float32(target, [lambda z, j=j: z**j for j in range(3)], weight,
                                      grid)
    print(f"pow atanh tail: |s| <= {largest:.4f}, within 2^{np.log2(error):.2f}: {coefficients}")
    grid = grid_on(-0.5, 0.5)
    exact = [mpmath.power(2, mpmath.mpf(f)) for f in grid]
    target = np.array([float((e - 1) / mpmath.mpf(f)) for e, f in zip(exact, grid)])
    weight = np.array([float(mpmath.mpf(f) / e) for e, f in zip(exact, grid)])
    coefficients, error = fit_float32(target, [lambda f, j=j: f**j for j in range(6)], weight,
                                      grid)
    print(f"pow exp2: within 2^{np.log2(error):.2f}: {coefficients}")


if __name__ == "__main__":
    {"log": fit_logs, "log1p": fit_log1p, "tan": fit_tan, "tanh": fit_tanh,
     "tanh_tables": fit_tanh_tables, "pow": fit_pow}[sys.argv[1]]()
