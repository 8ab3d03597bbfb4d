"""The error model behind guard margins: for each primitive, how far its compiled result
may be from NumPy's.

One rule per primitive, in ``RULES`` (STYLE rule 1): ``rule(slice, eqn, bounds) -> bound
or None`` (None: exact), where ``bounds`` are the operands' bounds and ``slice`` is
``tracejit.tracer.guard_margins``' bound builder (its arithmetic emits float64 equations:
``slice.add``, ``slice.rounding``, ``slice.fit``, ...). A bound is a float64 array ``E``
with ``|compiled - numpy| <= E`` elementwise (for bools: a mask of elements that may
differ). ``UNBOUNDED`` lists the primitives with no error model: exact on exact operands,
an infinite bound otherwise. A rule raises ``Unbounded`` where it cannot carry its
operands' bounds through.

>>> RULES["add"] is RULES["subtract"], "full" in UNBOUNDED
(True, True)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .dims import DimExpr
from .element_sources import same_element
from .exact_math import exact_result
from .ir import Literal, Var
from .ops import (
    any_p,
    broadcast_to_p,
    cast_p,
    ceil_p,
    cumsum_p,
    equal_p,
    exp_p,
    expm1_p,
    floor_p,
    greater_equal_p,
    greater_p,
    iota_p,
    isfinite_p,
    isinf_p,
    less_equal_p,
    log1p_p,
    matmul_p,
    max_p,
    maximum_p,
    minimum_p,
    neg_p,
    not_equal_p,
    reshape_p,
    rint_p,
    slice_p,
    sqrt_p,
    subtract_p,
    sum_p,
    swaps_last_two_axes,
    tan_p,
    trunc_p,
    where_p,
)
from .primitives import PRIMITIVES

F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)

# Bounds are computed in float64 with their own roundings (relative u64 each, a few dozen
# in a chain); every comparison against a bound inflates it by this factor to cover them.
INFLATE = 1.0 + 2.0**-30

# ulp of a math function against NumPy's, per NumPy dtype: our stated error against the
# exact result (codegen/mathlib.py, checked by tests/codegen/test_mathlib.py) plus 4 ulp
# for NumPy's own (its SVML/SIMD functions state <= 4 ulp), rounded up. 0 where compiled
# code calls NumPy's own loop (``exact_math``: float64 by default).
ULP_VS_NUMPY = {"exp": 8, "exp2": 8, "expm1": 8, "log": 8, "log1p": 8, "log2": 8, "log10": 8,
                "tanh": 8, "sin": 8, "cos": 8, "tan": 8, "erf": 8, "power": 8}

# Beyond this |x| both our tanh and NumPy's return exactly +-1 (ours clamps at 9.5 and
# 19.5; NumPy's float32 tanh is 1 from 10, its float64 from 18.99; tested in
# tests/tracer/test_guard_margins.py).
TANH_SATURATED = {np.dtype(np.float32): 10.0, np.dtype(np.float64): 20.0}

# NumPy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src): blocks of up to 128
# in 8 accumulators (depth <= 15 + 3 + 7), halves above that, one more add into the
# reduction's output, and chunks of 8192 when the reduction buffers.
PAIRWISE_BLOCK_DEPTH = 27
PAIRWISE_BLOCK = 128
BUFFER_SIZE = 8192


def unit_roundoff(dtype):
    """u: half an ulp of 1 (0 for integers and bools: their arithmetic is exact)."""
    dtype = np.dtype(dtype)
    return float(np.finfo(dtype).eps) / 2 if dtype.kind == "f" else 0.0


def smallest_subnormal(dtype):
    """eta: the absolute rounding error floor where results are subnormal."""
    dtype = np.dtype(dtype)
    return float(np.finfo(dtype).smallest_subnormal) if dtype.kind == "f" else 0.0


def is_float(atom):
    return atom.aval.dtype.kind == "f"


def is_bool(atom):
    return atom.aval.dtype == BOOL


class Unbounded(Exception):
    """Raised by a rule whose operands' bounds it cannot carry through."""


def number(value):
    return Literal.of(np.float64(value))


INF = number(math.inf)
ALWAYS = Literal.of(np.bool_(True))
# float32 roundings on our side of a float32 sum before it goes to float64: log2 of
# codegen/reducer.py's FLOAT32_GROUP (the tracer does not import codegen).
FLOAT32_GROUP_DEPTH = 3


# --- rules -----------------------------------------------------------------------------
def _add(ctx, eqn, bounds):
    bound = _added(ctx, eqn, bounds)
    if bound is None or eqn.prim.name != "subtract" or not is_float(eqn.out):
        return bound
    # one element of one array minus itself (a body's offset from itself, ``x.T - x``)
    # is 0 on both sides where it is finite and its bound keeps NumPy's finite too
    shape = eqn.out.aval.shape
    same = same_element(ctx, *eqn.inputs, shape)
    if same is None:
        return bound
    a, ea = eqn.inputs[0], ctx.as_number(eqn.inputs[0], bounds[0])
    exact = ctx.and_(same, ctx.emit(isfinite_p, a))
    if ea is not None:
        exact = ctx.and_(exact, ctx.emit(isfinite_p, ea))
    return ctx.fit(ctx.where(exact, number(0.0), bound), shape)


def _added(ctx, eqn, bounds):
    if all(b is None for b in bounds):
        return None
    if is_bool(eqn.out):  # logical or of bools
        return _logical(ctx, eqn, bounds)
    u = unit_roundoff(eqn.out.aval.dtype)
    carried = ctx.scaled(ctx.plus(*(ctx.as_number(a, b) for a, b in zip(eqn.inputs, bounds))),
                         1 + 4 * u)
    # no underflow floor: an exact zero (W @ A + b over a dead relu column) stays exact
    bound = ctx.fit(ctx.plus(carried, ctx.rounding(eqn.out, underflows=False)),
                    eqn.out.aval.shape)
    if not is_float(eqn.out) or len(eqn.inputs) != 2:
        return bound
    # An exact infinity plus a value with a finite bound is exact: a train loop's
    # ``prev_loss = np.inf`` before ``if abs(prev_loss - loss) < tol:``, EM's ``prev_ll =
    # -np.inf``, a log-space table started at -inf (or holding np.log(0)) plus
    # log-probabilities (CTC, HMMs). An infinity with a finite bound is that infinity in
    # NumPy too (a finite value there would be infinitely far), and a finite bound keeps
    # a finite value finite, so both sides add the same operands. (Not where both are
    # finite: an overflow's inf may be NumPy's largest float.) Checked only where an
    # infinity written in the function may reach an operand (``ctx.infinite``): up to six
    # operations per add, which every add would pay in a long unrolled table.
    infinite = [a for a in eqn.inputs if may_be_infinite(a, getattr(ctx, "infinite", ()))]
    if not infinite:
        return bound
    exact = ctx.emit(isfinite_p, carried)
    if not any(isinstance(a, Literal) for a in infinite):  # (np.inf written: always one)
        inf = ctx.emit(isinf_p, infinite[0])
        if len(infinite) == 2:
            inf = ctx.or_(inf, ctx.emit(isinf_p, infinite[1]))
        exact = ctx.and_(inf, exact)
    return ctx.fit(ctx.where(exact, number(0.0), bound), eqn.out.aval.shape)


def is_infinite_literal(atom):
    """``np.inf`` or ``-np.inf`` written as an operand."""
    value = atom.value
    return isinstance(value, (float, np.floating)) and bool(np.isinf(value))


def may_be_infinite(atom, names):
    """Whether an infinity written in the function may reach ``atom``: an infinite
    literal, or a var among ``names`` (those ``guard_margins`` found it reaches)."""
    return is_infinite_literal(atom) if isinstance(atom, Literal) else atom.name in names


def _multiply(ctx, eqn, bounds):
    if all(b is None for b in bounds):
        return None
    if is_bool(eqn.out):
        return _logical(ctx, eqn, bounds)
    (a, b), (ea, eb) = eqn.inputs, bounds
    ea, eb = ctx.as_number(a, ea), ctx.as_number(b, eb)
    terms = []
    if eb is not None:
        terms.append(ctx.mul(ctx.abs(a), eb))
    if ea is not None:
        terms.append(ctx.mul(ctx.abs(b), ea))
    if ea is not None and eb is not None:
        terms.append(ctx.mul(ea, eb))
    u = unit_roundoff(eqn.out.aval.dtype)
    carried = ctx.scaled(ctx.plus(*terms), 1 + 4 * u)
    bound = ctx.fit(ctx.plus(carried, ctx.rounding(eqn.out)), eqn.out.aval.shape)
    if not is_float(eqn.out):
        return bound
    # An exact zero times a finite value is an exact zero on both sides (no rounding, no
    # underflow): a relu's or a dropout mask's zeros stay decided against 0 afterwards
    zero = ctx.or_(_exact_zero(ctx, a, ea, b, eb), _exact_zero(ctx, b, eb, a, ea))
    return ctx.fit(ctx.where(zero, number(0.0), bound), eqn.out.aval.shape)


def _exact_zero(ctx, x, ex, y, ey, smallest=None):
    """Where ``x`` is exactly 0 on both sides and ``y`` surely finite on NumPy's side as
    on ours (and, for a divisor, surely above ``smallest`` in magnitude)."""
    zero = ctx.emit(less_equal_p, ctx.abs(x), number(0.0))
    if ex is not None:
        zero = ctx.and_(zero, ctx.emit(less_equal_p, ex, number(0.0)))
    finite = ctx.emit(isfinite_p, y)
    if ey is not None:
        finite = ctx.and_(finite, ctx.emit(isfinite_p, ey))
    if smallest is not None:
        low = ctx.abs(y) if ey is None else ctx.sub(ctx.abs(y), ctx.scaled(ey, INFLATE))
        finite = ctx.and_(finite, ctx.greater(low, number(smallest)))
    return ctx.and_(zero, finite)


def _square(ctx, eqn, bounds):
    return _squared(ctx, eqn, eqn.inputs[0], bounds[0])


def _squared(ctx, eqn, x, e):
    """``x * x`` on both sides (``np.square``, ``x ** 2``): operands ``e`` apart give
    squares ``2 |x| e + e^2`` apart, plus each side's own rounding of its square."""
    if e is None:
        return None
    e = ctx.as_number(x, e)
    carried = ctx.add(ctx.mul(ctx.abs(x), ctx.scaled(e, 2.0)), ctx.mul(e, e))
    u = unit_roundoff(eqn.out.aval.dtype)
    bound = ctx.plus(ctx.scaled(carried, 1 + 4 * u), ctx.rounding(eqn.out))
    # an element with no error (bound 0: x - x on the diagonal of x.T - x) is squared to
    # the same bits on both sides: it carries none (a NaN bound stays)
    return ctx.where(ctx.emit(less_equal_p, e, number(0.0)), number(0.0), bound)


def _true_divide(ctx, eqn, bounds):
    # Compiled division is one IEEE division (codegen/pointwise.true_divide, no arcp since
    # 17e5b71), as NumPy's: exact operands give NumPy's quotient to the bit (a nearest
    # resize's ``(np.arange(n) * W / n).astype(int)`` at whole quotients was undecided on
    # every call). Bounded operands keep the margin of a multiplication by a reciprocal
    # (off by up to |a| eta where 1/b is subnormal).
    (a, b), (ea, eb) = eqn.inputs, bounds
    if ea is None and eb is None:
        return None
    dtype = eqn.out.aval.dtype
    eta = smallest_subnormal(dtype)
    own = ctx.plus(ctx.rounding(eqn.out, ulps=2.0), ctx.mul(ctx.abs(a), number(2 * eta)))
    ea, eb = ctx.as_number(a, ea), ctx.as_number(b, eb)
    # 0 / b (or 0 * (1 / b), 1 / b finite: b not tiny) is 0 on both sides
    zero = _exact_zero(ctx, a, ea, b, eb, smallest=1.0 / np.finfo(dtype).max)
    magnitude_a, magnitude_b = ctx.abs(a), ctx.abs(b)
    numerator = ctx.plus(None if eb is None else ctx.mul(magnitude_a, eb),
                         None if ea is None else ctx.mul(magnitude_b, ea))
    if eb is None:
        carried = ctx.div(ea, magnitude_b)
    else:
        denominator = ctx.mul(magnitude_b, ctx.sub(magnitude_b, eb))
        carried = ctx.where(ctx.greater(magnitude_b, eb), ctx.div(numerator, denominator), INF)
    u = unit_roundoff(dtype)
    bound = ctx.fit(ctx.plus(ctx.scaled(carried, 1 + 8 * u), own), eqn.out.aval.shape)
    return ctx.fit(ctx.where(zero, number(0.0), bound), eqn.out.aval.shape)


def _reciprocal(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None  # 1 / x is one IEEE division on both sides
    e = ctx.as_number(x, e)
    magnitude = ctx.abs(x)
    carried = ctx.where(ctx.greater(magnitude, e),
                        ctx.div(e, ctx.mul(magnitude, ctx.sub(magnitude, e))), INF)
    u = unit_roundoff(eqn.out.aval.dtype)
    return ctx.plus(ctx.scaled(carried, 1 + 8 * u), ctx.rounding(eqn.out))


def _passthrough(ctx, eqn, bounds):
    """neg, abs, stop_gradient: 1-Lipschitz and exact."""
    return bounds[0]


def _sign(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None
    if is_bool(x):
        return e
    return ctx.where(ctx.undecided(ctx.abs(x), e), number(2.0), number(0.0))


def _sqrt(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None  # IEEE square root on both sides
    e = ctx.as_number(x, e)
    # |sqrt a - sqrt b| <= min(sqrt|a - b|, |a - b| / sqrt(max(a, b))); NaN below zero.
    near = ctx.where(ctx.greater(x, number(0.0)),
                     ctx.div(e, ctx.emit(sqrt_p, ctx.f64(x))), INF)
    carried = ctx.emit(minimum_p, ctx.emit(sqrt_p, e), near)
    if not _never_negative(ctx, x):
        carried = ctx.where(ctx.not_(ctx.greater(e, x)), carried, INF)
    u = unit_roundoff(eqn.out.aval.dtype)
    bound = ctx.plus(ctx.scaled(carried, 1 + 8 * u), ctx.rounding(eqn.out))
    # an operand with no error there has NumPy's square root to the bit (a distance of a
    # point to itself: exactly 0 on both sides)
    return ctx.where(ctx.emit(less_equal_p, e, number(0.0)), number(0.0), bound)


# Results no rounding makes negative from operands that are not: a distance's sum of
# squares stays >= 0 on both sides, so its sqrt has a bound where it may be 0 (k-means'
# centre shift at convergence, once infinite, sent every call to eager).
_SQUARES = ("abs", "sqrt", "exp")
_KEEPS_SIGN = ("sum", "max", "min", "reshape", "broadcast_to", "transpose", "slice", "add",
               "multiply", "true_divide", "maximum", "minimum")


def _never_negative(ctx, atom):
    """Whether ``atom`` is >= 0 (or NaN) in NumPy and compiled alike, by how it is made:
    ``|y|``, ``y ** 2``, ``y * y``, ``exp``/``sqrt``, and sums, products, quotients and
    extremes of such."""
    pending, seen = [atom], set()
    while pending:
        item = pending.pop()
        if isinstance(item, Literal):
            value = item.value
            if isinstance(value, DimExpr) or not np.all(np.asarray(value) >= 0):
                return False  # (a dim expression's sign is not looked into)
            continue
        eqn = ctx.producers.get(item.name) if isinstance(item, Var) else None
        if eqn is None or len(seen) > 64:
            return False
        if item.name in seen:
            continue
        seen.add(item.name)
        name = eqn.prim.name
        if name in _SQUARES:
            continue
        if name == "power" and isinstance(eqn.inputs[1], Literal) and (
                float(np.asarray(eqn.inputs[1].value)) in (2.0, 4.0)):
            continue
        if name == "multiply" and eqn.inputs[0] == eqn.inputs[1]:
            continue
        if name not in _KEEPS_SIGN:
            return False
        pending.extend(eqn.inputs[:2] if name in ("add", "multiply", "true_divide", "maximum",
                                                  "minimum") else eqn.inputs[:1])
    return True


def _math(carry, absolute=0.0, lowest=None):
    """A math-library function: ``ULP_VS_NUMPY`` ulp apart on equal operands, plus
    ``carry(ctx, x, out, e)``: how far apart operands ``e`` apart take the results.
    ``lowest``: the end of a logarithm's domain (``_exact_outside_domain``)."""

    def rule(ctx, eqn, bounds):
        x, (e,) = eqn.inputs[0], bounds[:1]
        if len(bounds) > 1 and bounds[1] is not None:
            raise Unbounded()
        own = None
        if not exact_result(eqn, ctx.producers):  # NumPy's loop on its array: no error
            ulps = ULP_VS_NUMPY[eqn.prim.name]
            own = ctx.rounding(eqn.out, ulps=ulps / 2.0, absolute=absolute * unit_roundoff(
                eqn.out.aval.dtype))
        if e is None:
            bound = own
        else:
            carried = carry(ctx, eqn, x, ctx.as_number(x, e))
            bound = ctx.plus(ctx.scaled(carried, 1 + 2.0**-16), own)
        if bound is None:
            return None
        if lowest is not None and is_float(x):
            bound = _exact_outside_domain(ctx, eqn, x, e, bound, lowest)
        return bound

    return rule


def _exact_outside_domain(ctx, eqn, x, e, bound, lowest):
    """A logarithm is not finite only off its domain, the same on both sides: NaN below
    ``lowest`` (``np.log`` of a negative, in any rounding of the operand), -inf at it, inf
    at inf, NaN at NaN. There the bound is 0, so ``np.isfinite(np.log(x))`` masking the
    negatives is decided (``_float_class``), not a margin exit at every call. The NaN of
    an operand surely below ``lowest`` is exact even when the operand is not."""
    nonfinite = ctx.not_(ctx.emit(isfinite_p, eqn.out))
    if e is None:
        exact = nonfinite
    else:
        e = ctx.as_number(x, e)
        same_operand = ctx.and_(nonfinite, ctx.emit(less_equal_p, e, number(0.0)))
        below = ctx.greater(number(lowest), ctx.add(x, ctx.mul(e, number(INFLATE))))
        exact = ctx.or_(same_operand, below)
    return ctx.where(exact, number(0.0), bound)


def _exp_carry(ctx, eqn, x, e):
    # |exp a - exp b| <= exp(a) expm1(|a - b|); exp(a) is within ulps of the result.
    return ctx.mul(ctx.abs(eqn.out), ctx.emit(expm1_p, e))


def _exp2_carry(ctx, eqn, x, e):
    return _exp_carry(ctx, eqn, x, ctx.scaled(e, math.log(2.0)))


def _expm1_carry(ctx, eqn, x, e):
    return ctx.mul(ctx.add(ctx.abs(eqn.out), number(1.0)), ctx.emit(expm1_p, e))


def _log_carry(ctx, eqn, x, e):
    # |log a - log b| <= -log1p(-|a - b| / a) while a > |a - b|.
    ratio = ctx.div(e, x)
    return ctx.where(ctx.greater(x, e), ctx.emit(subtract_p, number(0.0),
                                                 ctx.emit(log1p_p, ctx.sub(number(0.0), ratio))),
                     INF)


def _log1p_carry(ctx, eqn, x, e):
    base = ctx.add(x, number(1.0))
    ratio = ctx.div(e, base)
    return ctx.where(ctx.greater(base, e), ctx.emit(subtract_p, number(0.0),
                                                    ctx.emit(log1p_p, ctx.sub(number(0.0), ratio))),
                     INF)


def _scaled_carry(carry, factor):
    """``carry`` times ``factor`` (log2 and log10 are log scaled)."""

    def scaled(ctx, eqn, x, e):
        return ctx.scaled(carry(ctx, eqn, x, e), factor)

    return scaled


def _tan_carry(ctx, eqn, x, e):
    # Between two poles tan is increasing and tan' = 1 + tan^2 is largest at an end: the
    # spread is at most e (1 + max(tan(x - e)^2, tan(x + e)^2)) unless a pole lies between,
    # which shows as tan(x - e) > tan(x + e) (for e < 1, below the distance of two poles).
    low, high = ctx.emit(tan_p, ctx.sub(x, e)), ctx.emit(tan_p, ctx.add(x, e))
    steepest = ctx.maximum(ctx.mul(low, low), ctx.mul(high, high))
    monotone = ctx.emit(less_equal_p, low, high)
    near = ctx.greater(number(1.0), e)
    return ctx.where(ctx.and_(monotone, near), ctx.mul(e, ctx.add(steepest, number(1.0))), INF)


def _lipschitz(constant):
    def carry(ctx, eqn, x, e):
        return ctx.scaled(e, constant)

    return carry


def _tanh_carry(ctx, eqn, x, e):
    """|tanh a - tanh b| <= |a - b| max sech^2 between them, and sech^2 falls with |x|: at
    most sech^2(max(|x| - e, 0)) = 4y / (1 + y)^2, y = exp(-2 max(|x| - e, 0)), inflated
    for the rounding of this float64 arithmetic. Where a recurrence saturates its units
    (an RNN's tanh), the bound it carries shrinks there instead of passing through whole
    (``loop_bounds``: trip after trip)."""
    reach = ctx.emit(maximum_p, ctx.sub(ctx.abs(x), e), number(0.0))
    y = ctx.emit(exp_p, ctx.mul(reach, number(-2.0)))
    one_plus = ctx.add(y, number(1.0))
    slope = ctx.div(ctx.mul(y, number(4.0)), ctx.mul(one_plus, one_plus))
    slope = ctx.emit(minimum_p, ctx.mul(slope, number(1 + 2.0**-30)), number(1.0))
    return ctx.mul(e, slope)


def _tanh(ctx, eqn, bounds):
    x, (e,) = eqn.inputs[0], bounds
    bound = _math(_tanh_carry)(ctx, eqn, bounds)
    threshold = TANH_SATURATED.get(eqn.out.aval.dtype)
    if threshold is None or bound is None:
        return bound
    reach = ctx.abs(x) if e is None else ctx.sub(ctx.abs(x), ctx.as_number(x, e))
    saturated = ctx.emit(less_equal_p, number(threshold), reach)  # both sides give +-1
    return ctx.where(saturated, number(0.0), bound)


def _power(ctx, eqn, bounds):
    (_, y), (ex, ey) = eqn.inputs, bounds
    if not is_float(eqn.out):
        if ex is None and ey is None:
            return None
        raise Unbounded()
    # (a dim's literal, np.power(beta1, t) with t an int the loop counts, is no number
    # here: an exponent the trip decides)
    constant = isinstance(y, Literal) and not isinstance(y.value, DimExpr)
    if ey is not None or (ex is not None and not constant):
        raise Unbounded()

    def carry(ctx, eqn, x, e):
        # |a^p - b^p| <= |a^p| expm1(|p| log(a / (a - |a - b|))) for a > |a - b|. For an
        # integer p, a and b of one sign give |a|^p and |b|^p up to that sign, so the
        # bound holds with |a| (the cube of tanh GELU's x ** 3 over negative x: without
        # it every negative element was unbounded, and so was a GPT's argmax).
        exponent = float(y.value)
        if exponent.is_integer():
            x = ctx.abs(x)
        spread = ctx.emit(subtract_p, number(0.0),
                          ctx.emit(log1p_p, ctx.sub(number(0.0), ctx.div(e, x))))
        grown = ctx.mul(ctx.abs(eqn.out), ctx.emit(expm1_p, ctx.mul(spread,
                                                                     number(abs(exponent)))))
        near_zero = INF
        if exponent.is_integer() and exponent >= 1:
            # |a^p - b^p| <= p e (|a| + e)^(p-1) (mean value theorem), also where the
            # operand's bound reaches 0 ((x - c) ** 2 at a point that is its k-means center)
            reach = ctx.add(x, e)
            near_zero = ctx.where(ctx.greater(INF, e), ctx.mul(
                ctx.mul(number(exponent), e), reach if exponent == 2 else ctx.emit(
                    PRIMITIVES["power"], reach, Literal.of(np.float64(exponent - 1)))), INF)
        # An operand with no error (bound 0) carries none, 0 included (a NaN bound: INF).
        return ctx.where(ctx.emit(less_equal_p, e, number(0.0)), number(0.0),
                         ctx.where(ctx.greater(x, e), grown, near_zero))

    if constant and float(y.value) == 2.0 and _squares_as_numpy():
        # v ** 2 (0.04 * v ** 2 + 5 * v + 140 of an Izhikevich neuron): NumPy squares for
        # one exponent 2 and codegen's power is x * x, one IEEE rounding each, so equal
        # operands give equal results; only the operand's own bound is carried (with 8 ulp
        # a step, a spiking loop's threshold guard failed after some 30 trips): np.square's
        # bound, whose rounding term an inexact operand needs
        return _squared(ctx, eqn, eqn.inputs[0], ex)
    bound = _math(carry)(ctx, eqn, [ex])
    return _exact_power_poles(ctx, eqn, ex, bound) if constant else bound


@functools.lru_cache(maxsize=None)
def _squares_as_numpy():
    """Whether NumPy's ``x ** 2`` and ``np.power(x, 2.0)`` give ``x * x`` to the bit (probed
    on both float dtypes over every binade, zeros, denormals, infinities and NaN)."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal(4096) * np.exp2(rng.integers(-600, 600, 4096))
    values = np.concatenate([values, [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310]])
    with np.errstate(all="ignore"):
        for dtype in (np.float64, np.float32):
            x = values.astype(dtype)
            square = (x * x).view(np.uint8)
            if not (np.array_equal((x ** 2).view(np.uint8), square) and np.array_equal(
                    np.power(x, 2.0).view(np.uint8), square)):
                return False
    return True


def _exact_power_poles(ctx, eqn, ex, bound):
    """``x ** p`` not finite where NumPy's is so too in any rounding: a pole (``0.0 **
    -1``: pygcn's row normalize of an empty row, then ``np.isinf``), an infinite or NaN
    base, a negative base with a fractional ``p`` (NaN; surely negative even with ``x``'s
    bound). Bound 0 there (``_float_class`` decides); an overflow of a finite base keeps
    its bound (our result and NumPy's may fall either side of the largest float)."""
    x, y = eqn.inputs
    fractional = not float(y.value).is_integer()
    special = ctx.or_(ctx.emit(equal_p, x, number(0.0)), ctx.not_(ctx.emit(isfinite_p, x)))
    if fractional:
        special = ctx.or_(special, ctx.greater(number(0.0), x))
    if ex is not None:  # the base exact there (a sum of zeros: bound 0), or surely negative
        e = ctx.as_number(x, ex)
        special = ctx.and_(special, ctx.emit(less_equal_p, e, number(0.0)))
        if fractional:
            special = ctx.or_(special, ctx.greater(number(0.0), ctx.add(
                x, ctx.mul(e, number(INFLATE)))))
    exact = ctx.and_(ctx.not_(ctx.emit(isfinite_p, eqn.out)), special)
    if float(y.value) > 0:
        # 0 ** p is 0 for any p > 0 in any rounding: a squared distance from a point to
        # itself (``(x.T - x) ** 2`` on the diagonal) stays decided against 0, where the
        # rounding's underflow floor made pmocz's ``inv_r[inv_r > 0]`` a margin exit
        zero = ctx.emit(equal_p, x, number(0.0))
        if ex is not None:
            zero = ctx.and_(zero, ctx.emit(less_equal_p, ctx.as_number(x, ex), number(0.0)))
        exact = ctx.or_(exact, zero)
    return ctx.where(exact, number(0.0), bound)


def _rounding_to_integer(prim):
    """floor and ceil: exact; apart operands are apart by the jump across their interval."""

    def rule(ctx, eqn, bounds):
        (x,), (e,) = eqn.inputs, bounds
        if e is None:
            return None
        e = ctx.mul(ctx.as_number(x, e), number(INFLATE))
        return ctx.sub(ctx.emit(prim, ctx.add(x, e)), ctx.emit(prim, ctx.sub(x, e)))

    return rule


def _extremum(ctx, eqn, bounds):
    """maximum, minimum: 1-Lipschitz in each operand (NaN propagates on both sides)."""
    if all(b is None for b in bounds):
        return None
    if is_bool(eqn.out):
        return _logical(ctx, eqn, bounds)
    a, b = eqn.inputs
    ea, eb = (ctx.as_number(x, e) or number(0.0) for x, e in zip(eqn.inputs, bounds))
    # Where one operand surely wins on both sides, only its bound carries (a relu's zeros
    # are exact zeros: max pooling over them ties exactly on both sides).
    apart = ctx.mul(ctx.add(ea, eb), number(INFLATE))
    picked = ctx.where(ctx.greater(ctx.sub(a, b), apart), ea, ctx.where(
        ctx.greater(ctx.sub(b, a), apart), eb, ctx.maximum(ea, eb)))
    return ctx.fit(picked, eqn.out.aval.shape)


def _compare(ctx, eqn, bounds):
    (a, b), (ea, eb) = eqn.inputs, bounds
    if ea is None and eb is None:
        return None
    total = ctx.plus(ctx.as_number(a, ea), ctx.as_number(b, eb))
    if a.aval.dtype.kind in "iub" and b.aval.dtype.kind in "iub":
        difference = ctx.f64(ctx.emit(subtract_p, *(ctx.emit(cast_p, atom, dtype=np.dtype(
            np.int64)) if is_bool(atom) else atom for atom in (a, b))))
    else:
        difference = ctx.sub(a, b)
    undecided = ctx.fit(ctx.undecided(ctx.abs(difference), total), eqn.out.aval.shape)
    same = _same_element(ctx, a, b)
    if same is not None:
        undecided = ctx.fit(ctx.and_(undecided, ctx.not_(same)), eqn.out.aval.shape)
    if eqn.prim.name in ("equal", "not_equal"):
        axes = _extreme_axes(ctx, a, b) or _extreme_axes(ctx, b, a)
        if axes:
            undecided = _near_ties(ctx, undecided, axes)
        else:
            ties = _element_of_extreme(ctx, a, b) or _element_of_extreme(ctx, b, a)
            if ties is not None:
                undecided = ctx.and_(undecided, ties)
    return undecided


def _same_element(ctx, a, b):
    """``x[..., :, None]`` against ``x[..., None, :]`` (a sort's pairwise comparisons:
    ``scans._comparisons``): where the two positions are one, both sides compare an element
    with itself, whatever its rounding (``x < x`` is False, ``x == x`` True, NaN too). The
    mask of those elements, or None. Without it every ``np.argsort`` of computed values
    was undecided at its diagonal, so an ``if`` on its result (beam search's top-k) ran
    eagerly on every call."""
    found = [ctx.producers.get(atom.name) if isinstance(atom, Var) else None for atom in (a, b)]
    if any(eqn is None or eqn.prim.name != "reshape" for eqn in found) or (
            found[0].inputs[0] != found[1].inputs[0]):
        return None
    x = found[0].inputs[0]
    shape = tuple(x.aval.shape)
    if not shape:
        return None
    n = shape[-1]
    column, row = shape + (1,), shape[:-1] + (1, n)
    if {tuple(a.aval.shape), tuple(b.aval.shape)} != {column, row} or column == row:
        return None
    positions = ctx.emit(iota_p, length=n, dtype=np.dtype(np.int64))
    return ctx.emit(equal_p, ctx.emit(reshape_p, positions, shape=(n, 1)),
                    ctx.emit(reshape_p, positions, shape=(1, n)))


# ``index < bound`` with the index on the left: the same comparison with it on the right
_MIRRORED = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
             "greater_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}


def decided_over_indices(ctx, eqn):
    """Is comparison ``eqn`` decided whatever its operands' bounds? An argmax or argmin of
    inexact values (which may be another index than NumPy's where they nearly tie, so its
    bound is infinite) compared with a number that every index of its axis lies on one
    side of: the same answer whichever index rounding picked. The range check of
    ``np.unravel_index(np.nanargmax(window), window.shape)`` (a max-pool backward) is one;
    without this, it sent every call over computed windows (a convolution's output) to
    eager. The argmax's own near-tie check still decides where the index is used."""
    name = eqn.prim.name
    if name not in _MIRRORED:
        return False
    a, b = eqn.inputs
    for index, other, op in ((a, b, name), (b, a, _MIRRORED[name])):
        length = _index_length(ctx, index)
        if length is None or not isinstance(other, Literal) or isinstance(
                other.value, DimExpr) or np.ndim(other.value) != 0:
            continue
        value = float(other.value)
        if math.isnan(value):
            return True  # every comparison with NaN is decided (False; != True)
        if op in ("equal", "not_equal"):
            if value < 0 or value > length - 1 or value != math.floor(value):
                return True
            continue
        compare = {"less": float.__lt__, "less_equal": float.__le__,
                   "greater": float.__gt__, "greater_equal": float.__ge__}[op]
        if compare(0.0, value) == compare(float(length - 1), value):
            return True
    return False


def _index_length(ctx, atom):
    """``n`` when ``atom`` is an argmax or argmin over an axis of static length ``n``
    (through integer casts, reshapes, broadcasts and slices), so it lies in [0, n); else
    None."""
    while isinstance(atom, Var) and (producer := ctx.producers.get(atom.name)) is not None:
        name = producer.prim.name
        if name in ("argmax", "argmin"):
            source = producer.inputs[0]
            length = source.aval.shape[producer.params_dict["axis"]] if isinstance(
                source, Var) else None
            return length if type(length) is int and length > 0 else None
        if name not in ("cast", "reshape", "broadcast_to", "slice") or (
                atom.aval.dtype.kind not in "iu"):
            return None
        atom = producer.inputs[0]
    return None


def _near_ties(ctx, near, axes):
    """``x == x.max(axis)`` (a pool's argmax mask): the max element is near the max by
    definition; the masks differ only where a window holds two elements near its max (our
    argmax could then be another than NumPy's). With one near element ``k``, every other
    element is more than ``e_j + e_max`` below the max, and ``e_max >= e_k`` (the max's
    bound is the window's largest): NumPy's max is at ``k`` too."""
    count = ctx.emit(sum_p, ctx.emit(cast_p, near, dtype=np.dtype(np.int64)), axes=axes,
                     keepdims=True)
    ties = ctx.emit(less_equal_p, Literal.of(np.int64(2)), count)
    return ctx.and_(near, ties)


def _element_of_extreme(ctx, a, b):
    """``region[i2, j2, f2] == amax[f2]`` with ``amax = np.amax(region, axis=(0, 1))`` (a
    max pool's backward in loop-based CNN code): one element of a set against the set's
    max, each a static element (slices and reshapes). Where the element is in the window
    the max is taken over, the decision differs only if the window holds two elements
    near its max (``_near_ties``' argument): the mask "that window has ties", to and with
    the compare's own ambiguity. None when the operands are not such a pair."""
    if tuple(a.aval.shape) != () or tuple(b.aval.shape) != ():
        return None
    found_b = _static_element(ctx, b)
    if found_b is None:
        return None
    reduced, window = found_b
    producer = ctx.producers.get(reduced.name)
    if producer is None or producer.prim.name not in ("max", "min") or not isinstance(
            producer.inputs[0], Var):
        return None
    region = producer.inputs[0]
    found_a = _static_element(ctx, a, stop=region.name)
    if found_a is None or found_a[0].name != region.name:
        return None
    at = found_a[1]
    params = producer.params_dict
    axes = tuple(sorted(axis % len(region.aval.shape) for axis in params["axes"]))
    kept = [axis for axis in range(len(region.aval.shape)) if axis not in axes]
    window = window if not params["keepdims"] else tuple(window[axis] for axis in kept)
    if tuple(at[axis] for axis in kept) != tuple(window):
        return None  # the element is not in that window: the plain compare decides
    ties = _window_ties(ctx, region, producer)
    if ties is None:
        return None
    starts = tuple(window) if not params["keepdims"] else tuple(
        0 if axis in axes else at[axis] for axis in range(len(region.aval.shape)))
    picked = ctx.emit(slice_p, ties, starts=starts, limits=tuple(i + 1 for i in starts),
                      steps=(1,) * len(starts))
    return ctx.emit(reshape_p, picked, shape=())


def _window_ties(ctx, region, reduction):
    """Per window of ``reduction`` (a max or min of ``region``), whether two or more of
    its elements are near its extreme (memoized per pair: every element's compare asks)."""
    memo = ctx.__dict__.setdefault("window_ties", {})
    key = (region.name, reduction.out.name)
    if key not in memo:
        e_region, e_extreme = ctx.bound(region), ctx.bound(reduction.out)
        if e_region is None and e_extreme is None:
            memo[key] = None
            return None
        params = reduction.params_dict
        shape = tuple(region.aval.shape)
        axes = tuple(sorted(axis % len(shape) for axis in params["axes"]))
        kept_shape = tuple(1 if axis in axes else size for axis, size in enumerate(shape))

        def spread(value):
            return ctx.emit(broadcast_to_p, ctx.emit(reshape_p, value, shape=kept_shape),
                            shape=shape)

        extreme = spread(reduction.out)
        total = ctx.plus(None if e_region is None else ctx.spread(e_region, shape),
                         None if e_extreme is None else spread(ctx.spread(
                             e_extreme, tuple(reduction.out.aval.shape))))
        near = ctx.undecided(ctx.abs(ctx.sub(region, extreme)), total)
        count = ctx.emit(sum_p, ctx.emit(cast_p, near, dtype=np.dtype(np.int64)), axes=axes,
                         keepdims=params["keepdims"])
        memo[key] = ctx.emit(less_equal_p, Literal.of(np.int64(2)), count)
    return memo[key]


def _static_element(ctx, atom, stop=None):
    """``(source, index)``: the scalar ``atom`` is ``source[index]`` through slices and
    reshapes of static shapes (``x[1, 0, 2]`` traces as a slice and a reshape), where
    ``source`` is the value named ``stop``, or the first value another primitive made;
    else None."""
    index = ()
    while getattr(atom, "name", None) != stop and (producer := ctx.producers.get(
            getattr(atom, "name", None))) is not None and (
            producer.prim.name in ("slice", "reshape")):
        source = producer.inputs[0]
        if not isinstance(source, Var):
            return None
        shape, source_shape = tuple(atom.aval.shape), tuple(source.aval.shape)
        if not all(type(size) is int for size in shape + source_shape):
            return None
        if producer.prim.name == "reshape":
            flat = int(np.ravel_multi_index(index, shape)) if shape else 0
            index = tuple(int(i) for i in np.unravel_index(flat, source_shape)) if (
                source_shape) else ()
        else:
            params = producer.params_dict
            index = tuple(start + i * step for i, start, step in zip(
                index, params["starts"], params["steps"]))
        atom = source
    if not isinstance(atom, Var) or (index == () and atom.aval.shape != ()):
        return None
    return atom, index


def _extreme_axes(ctx, a, b):
    """The axes of ``a`` that ``b`` is the max (or min) of, where ``b`` keeps them as ones
    (``x.max(axis=(3, 5), keepdims=True)``, ``x.max(axis=3).max(axis=4)`` reshaped with
    ``[:, :, :, None, :, None]``), possibly broadcast to ``a``'s shape; else None."""
    if not (isinstance(a, Var) and isinstance(b, Var)):
        return None
    atom = b
    producer = ctx.producers.get(atom.name)
    if producer is not None and producer.prim.name == "broadcast_to" and tuple(
            atom.aval.shape) == tuple(a.aval.shape):
        atom = producer.inputs[0]
    kept_shape = tuple(atom.aval.shape)
    while (producer := ctx.producers.get(getattr(atom, "name", None))) is not None and (
            producer.prim.name == "reshape"):
        atom = producer.inputs[0]
    chain = []
    while (producer := ctx.producers.get(getattr(atom, "name", None))) is not None and (
            producer.prim.name in ("max", "min")) and (
            not chain or producer.prim.name == chain[-1].prim.name):
        chain.append(producer)
        atom = producer.inputs[0]
        if isinstance(atom, Var) and atom.name == a.name:
            break
    if not chain or not isinstance(atom, Var) or atom.name != a.name:
        return None
    remaining, reduced = list(range(len(a.aval.shape))), set()
    for eqn in reversed(chain):
        params = eqn.params_dict
        positions = [remaining[axis] for axis in params["axes"]]
        reduced.update(positions)
        if not params["keepdims"]:
            remaining = [axis for axis in remaining if axis not in positions]
    shape = tuple(a.aval.shape)
    if not reduced or kept_shape != tuple(1 if axis in reduced else size
                                          for axis, size in enumerate(shape)):
        return None
    top = tuple(size for size in chain[0].out.aval.shape if size != 1)
    if top != tuple(size for size in kept_shape if size != 1):
        return None
    return tuple(sorted(reduced))


def _float_class(ctx, eqn, bounds):
    """isnan, isinf, isfinite: decided when the value and its bound are finite, and where
    the bound is 0: a NaN or inf that is the same on both sides (``np.log`` of a negative:
    ``_exact_outside_domain``)."""
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None
    if not is_float(x):
        return None
    e = ctx.as_number(x, e)
    finite = ctx.and_(ctx.emit(isfinite_p, x), ctx.emit(isfinite_p, e))
    decided = ctx.or_(finite, ctx.emit(less_equal_p, e, number(0.0)))
    return ctx.fit(ctx.not_(decided), eqn.out.aval.shape)


def _logical(ctx, eqn, bounds):
    """logical_not/and/or (and bool add, multiply, max, min): undecided where an operand's
    truth is."""
    masks = [ctx.truth(a, b) for a, b in zip(eqn.inputs, bounds)]
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    result = masks[0]
    for other in masks[1:]:
        result = ctx.or_(result, other)
    return ctx.fit(result, eqn.out.aval.shape)


def _connective(deciding):
    """``a | b`` (``deciding`` True) or ``a & b`` (False) of bools: an operand surely
    ``deciding`` decides the result whatever the other's rounding. ``np.isclose``'s
    ``(|a - b| <= tol) | (a == b)`` at a sum of probabilities near 1 (numpy-ml's
    ``is_stochastic``): the equality is within rounding, the tolerance test sure."""
    def rule(ctx, eqn, bounds):
        if not (is_bool(eqn.out) and all(is_bool(atom) for atom in eqn.inputs)):
            return (_logical if eqn.prim.name.startswith("logical") else _integer_operation)(
                ctx, eqn, bounds)
        masks = [ctx.truth(atom, bound) for atom, bound in zip(eqn.inputs, bounds)]
        if all(mask is None for mask in masks):
            return None
        undecided = None
        for mask in masks:
            if mask is not None:
                undecided = mask if undecided is None else ctx.or_(undecided, mask)
        for atom, mask in zip(eqn.inputs, masks):
            sure = atom if deciding else ctx.not_(atom)
            if mask is not None:
                sure = ctx.and_(sure, ctx.not_(mask))
            undecided = ctx.and_(undecided, ctx.not_(sure))
        return ctx.fit(undecided, eqn.out.aval.shape)
    return rule


def _where(ctx, eqn, bounds):
    (condition, a, b), (ec, ea, eb) = eqn.inputs, bounds
    if ec is None and ea is None and eb is None:
        return None
    shape = eqn.out.aval.shape
    if is_bool(eqn.out):
        chosen = ctx.emit(where_p, condition, ea if ea is not None else Literal.of(np.bool_(
            False)), eb if eb is not None else Literal.of(np.bool_(False)))
        if ec is None:
            return ctx.fit(chosen, shape)
        differ = ctx.emit(not_equal_p, a, b)
        return ctx.fit(ctx.or_(chosen, ctx.and_(ec, differ)), shape)
    if ec is ALWAYS and ctx.cheap:
        # A condition with no error model (from a float prod: cumprod, then
        # np.maximum.accumulate's zero test): the discontinuity checks leave its values
        # unchecked, as they leave the prod's, rather than check |a - b| on every call
        raise Unbounded()
    ea, eb = ctx.as_number(a, ea) or number(0.0), ctx.as_number(b, eb) or number(0.0)
    chosen = ctx.where(condition, ea, eb)
    if ec is None:
        return ctx.fit(chosen, shape)
    either = ctx.add(ctx.abs(ctx.sub(a, b)), ctx.maximum(ea, eb))
    return ctx.fit(ctx.where(ec, either, chosen), shape)


def _cast(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    source, target = x.aval.dtype, eqn.out.aval.dtype
    if e is None:
        return None  # one conversion, the same on both sides
    if target == BOOL:
        return ctx.truth(x, e)
    e = ctx.as_number(x, e)
    if source.kind == "f" and target.kind in "iu":
        # Truncation: values apart by e truncate to integers apart by at most this.
        wide = ctx.mul(e, number(INFLATE))
        high, low = ctx.add(x, wide), ctx.sub(x, wide)
        truncated = [ctx.mul(ctx.emit(floor_p, ctx.abs(end)), ctx.emit(
            _sign_p(), end)) for end in (high, low)]
        return ctx.sub(truncated[0], truncated[1])
    if target.kind != "f" or source.kind == "f" and target.itemsize >= source.itemsize:
        return e  # widening, the same dtype (or integer to integer): no new rounding
    return ctx.plus(e, ctx.rounding(eqn.out))


def _sign_p():
    return PRIMITIVES["sign"]


# --- reductions -------------------------------------------------------------------------
def _largest(ctx, count):
    """The largest value of a (maybe symbolic) count over the symbols' ranges: bounds grow
    with counts, so the bucket's largest count gives one bound for the whole bucket."""
    if isinstance(count, DimExpr):
        high = count.bounds(ctx.ranges)[1]
        if high is None or not math.isfinite(high):
            raise Unbounded()
        return int(high)
    return int(count)


def _reduced_count(ctx, eqn):
    shape = eqn.inputs[0].aval.shape
    count = 1
    for axis in eqn.params_dict["axes"]:
        count = count * _largest(ctx, shape[axis])
    return count


def _numpy_depth(ctx, eqn):
    """An upper bound on the additions in a chain of NumPy's sum (Higham's gamma_k): any
    order is within n; pairwise when the sum runs over the array's one non-unit dim (with
    any strides, so whatever the caller's layout)."""
    shape = eqn.inputs[0].aval.shape
    count = _reduced_count(ctx, eqn)
    varying = [dim for dim in shape if not (isinstance(dim, int) and dim == 1)]
    reduced = [shape[axis] for axis in eqn.params_dict["axes"]]
    pairwise = len(varying) == 1 and len([d for d in reduced if not (
        isinstance(d, int) and d == 1)]) == 1
    depth = count
    if pairwise and 8 <= count <= PAIRWISE_BLOCK:
        # One block: 8 accumulators of count // 8 terms, 3 levels joining them, then the
        # count % 8 (<= 7) remaining terms one by one.
        depth = min(count, count // 8 + 9)
    elif pairwise and count > 1:
        depth = min(count, PAIRWISE_BLOCK_DEPTH + math.ceil(math.log2(count))
                    + math.ceil(count / BUFFER_SIZE))
    return depth + 2


def _centered_mean(ctx, eqn):
    """For ``sum((a - m) ** 2)`` with ``m = sum(a) / n`` over the same axes (NumPy's var,
    and ours) and ``a`` exact: ``m``'s bound. Its error shifts every ``a - m`` alike, and
    ``sum(a - m)`` is ``n`` times the mean's own error, so the squares' sum moves by at
    most ``3 n E_m^2`` - second order, where elementwise bounds would give ``2 E_m sum|a-m|``."""
    square = ctx.producers.get(eqn.inputs[0].name) if isinstance(eqn.inputs[0], Var) else None
    if square is None or not (square.prim.name == "multiply" and square.inputs[0] ==
                              square.inputs[1] or square.prim.name == "square"):
        return None
    centered = ctx.producers.get(square.inputs[0].name) if isinstance(
        square.inputs[0], Var) else None
    if centered is None or centered.prim.name != "subtract":
        return None
    data, mean = centered.inputs
    while isinstance(mean, Var) and ctx.producers.get(mean.name) is not None and (
            ctx.producers[mean.name].prim.name in ("broadcast_to", "reshape")):
        mean = ctx.producers[mean.name].inputs[0]
    divide = ctx.producers.get(mean.name) if isinstance(mean, Var) else None
    if divide is None or divide.prim.name != "true_divide" or not isinstance(
            divide.inputs[1], Literal) or not isinstance(divide.inputs[0], Var):
        return None
    total = ctx.producers.get(divide.inputs[0].name)
    if total is None or total.prim.name != "sum" or total.inputs[0] != data or (
            total.params_dict["axes"] != eqn.params_dict["axes"]) or ctx.bound(data) is not None:
        return None
    return ctx.bound(mean)


def _sum(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    params = eqn.params_dict
    mean_bound = _centered_mean(ctx, eqn) if is_float(eqn.out) and e is not None else None
    if mean_bound is not None:
        count = _reduced_count(ctx, eqn)
        u = unit_roundoff(eqn.out.aval.dtype)
        squares = ctx.emit(sum_p, ctx.abs(x), **params)
        if not isinstance(mean_bound, Literal) and tuple(mean_bound.aval.shape) not in (
                (), tuple(eqn.out.aval.shape)):  # the mean kept the reduced dims
            mean_bound = ctx.emit(reshape_p, mean_bound, shape=tuple(eqn.out.aval.shape))
        shift = ctx.mul(ctx.mul(mean_bound, mean_bound), number(3.0 * count * INFLATE))
        # (a - m) and its square round on each side: 8 u relative per term.
        return ctx.plus(_sum(ctx, eqn, [None]), ctx.mul(squares, number(8 * u * INFLATE)),
                        shift)
    if not is_float(eqn.out):
        if e is None:
            return None  # integer sums wrap the same in any order
        return ctx.emit(sum_p, ctx.spread(ctx.as_number(x, e), x.aval.shape), **params)
    dtype = eqn.out.aval.dtype
    u, eta = unit_roundoff(dtype), smallest_subnormal(dtype)
    # Ours: float32 accumulates in float64, any order, after adding groups of up to 8
    # elements in float32 (codegen/reducer.py FLOAT32_GROUP: a tree of depth 3); float64
    # (and float16) in its own.
    count = _reduced_count(ctx, eqn)
    ours = (count + 1) * u
    if dtype == np.float32:
        ours = (count + 1) * unit_roundoff(np.float64) + FLOAT32_GROUP_DEPTH * u
    magnitude = ctx.emit(sum_p, ctx.abs(x), **params)
    carried = None
    if e is not None:
        carried = ctx.emit(sum_p, ctx.spread(ctx.as_number(x, e), x.aval.shape), **params)
        magnitude = ctx.add(magnitude, carried)  # NumPy sums values up to e away
    coefficient = (_numpy_depth(ctx, eqn) * u + ours) * INFLATE
    orders = ctx.mul(magnitude, number(coefficient))
    bound = ctx.plus(orders, carried, ctx.rounding(eqn.out, absolute=4 * count * eta))
    if e is not None:
        # zeros with no error (the squared offsets of a point from itself) sum to 0 on
        # both sides; a NaN magnitude keeps its bound
        return ctx.where(ctx.emit(less_equal_p, magnitude, number(0.0)), number(0.0), bound)
    # Exact operands summing no magnitude are all zeros (or none): ±0 in any order; with
    # a NaN among them, NaN in any order. Either way the same on both sides.
    return ctx.where(ctx.greater(magnitude, number(0.0)), bound, number(0.0))


def extreme_ambiguity(ctx, x, e, axes, largest):
    """Over ``axes`` (keepdims): could the extreme of ``x`` sit at another element, or tie
    differently, on NumPy's side? Candidates are the elements whose value could reach the
    surest extreme (``x + e >= max(x - e)``); one candidate, or exact candidates only,
    decide. NaN anywhere: undecided."""
    if not largest:
        x = ctx.emit(neg_p, ctx.f64(x))
    e = ctx.spread(ctx.as_number(x, e), x.aval.shape)
    surest = ctx.emit(max_p, ctx.sub(x, e), axes=axes, keepdims=True)
    candidates = ctx.emit(greater_equal_p, ctx.add(x, e), surest)
    count = ctx.emit(sum_p, ctx.emit(cast_p, candidates, dtype=np.dtype(np.int64)), axes=axes,
                     keepdims=True)
    inexact = ctx.emit(any_p, ctx.and_(candidates, ctx.greater(e, number(0.0))), axes=axes,
                       keepdims=True)
    several = ctx.emit(greater_p, count, Literal.of(np.int64(1)))
    return ctx.or_(ctx.and_(several, inexact), ctx.emit(not_equal_p, surest, surest))


def _arg_extremum(ctx, eqn, bounds):
    """argmax, argmin: NumPy's index where one element alone can be the extreme, any index
    of the axis (an infinite bound) where the extreme is ambiguous. Without this an ``if``
    on the index (greedy decoding's ``if tok == eos: break`` after ``tok =
    int(np.argmax(logits))``) had an infinite bound and ran eagerly on every call."""
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None
    params = eqn.params_dict
    ambiguous = extreme_ambiguity(ctx, x, e, (params["axis"],), eqn.prim.name == "argmax")
    if not params["keepdims"]:
        ambiguous = ctx.emit(any_p, ambiguous, axes=(params["axis"],), keepdims=False)
    return ctx.where(ambiguous, INF, number(0.0))

def _extreme_reduction(ctx, eqn, bounds):
    """max, min: exact; the extreme of values each e apart is at most max(e) apart."""
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None
    if is_bool(x):
        return _any_all(ctx, eqn, bounds)
    return ctx.emit(max_p, ctx.spread(ctx.as_number(x, e), x.aval.shape), **eqn.params_dict)


def _any_all(ctx, eqn, bounds):
    """any: undecided only if no element is surely true and some element is undecided
    (all: the same with false)."""
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None
    params = eqn.params_dict
    undecided = ctx.spread(ctx.truth(x, e), x.aval.shape)
    truth = x if is_bool(x) else ctx.emit(not_equal_p, x, Literal.of(
        np.zeros((), x.aval.dtype)[()]))
    wanted = truth if eqn.prim.name in ("any", "max") else ctx.not_(truth)
    sure = ctx.emit(any_p, ctx.and_(wanted, ctx.not_(undecided)), **params)
    return ctx.and_(ctx.emit(any_p, undecided, **params), ctx.not_(sure))


# Whether compiled code computes the float32 and float64 products a decision reads by
# NumPy's own BLAS calls: codegen/numpy_products.py sets the test (not under
# TRACEJIT_GEMM=own, nor without NumPy's bundled OpenBLAS, where the own GEMM or a plain
# gemm sums them in other orders). The tracer does not import codegen.
_numpy_products = [lambda: True]


def set_numpy_products(test):
    """``test()``: whether decided products are NumPy's BLAS calls in this process now."""
    _numpy_products[0] = test


def _matmul(ctx, eqn, bounds):
    cheap = getattr(ctx, "cheap", False)
    if cheap and all(bound is None for bound in bounds) and _numpy_products[0]():
        if np.dtype(eqn.out.aval.dtype) in (np.dtype(np.float32), F64) and (
                _numpy_matmul(ctx, eqn)):
            # Exact operands, NumPy's bits: a float32 or float64 product that a decision
            # (so this check) reads is computed by the BLAS calls NumPy's matmul makes
            # (codegen/numpy_products.py), where the user wrote a matmul of operands
            # NumPy holds as compiled code does (_numpy_matmul: not an einsum's; float32
            # too since loop_bounds carries exactness trip after trip, review 19: a
            # float32 power iteration by np.einsum was carried exact). Only in the cheap
            # checks (masks, argmax, loop bodies): an ``if``'s margin keeps the product's
            # bound, since not every float32 matmul is NumPy's matmul - einsum is traced
            # as a matmul, TRACEJIT_GEMM=own computes them all - and an ``if`` on those
            # took the other branch than NumPy with no margin (review 15).
            return None
    if cheap and getattr(ctx, "full_products", False) and (
            eqn.out.aval.dtype == F64 or _float32_modelled(ctx, eqn, bounds)):
        # A bound a loop carries (loop_bounds: the body's, and its initial values') goes
        # into the next trip, where the cheap rule's looseness (a row's L1 norm times the
        # largest |b| of any column) compounds: Sinkhorn's u = a / (K @ v) ran eagerly
        # after ~7 trips, or at once where u's entries span decades (the divisor's bound
        # passed the divisor). |A| @ |B| keeps a positive product's relative bound growing
        # by a few u per trip.
        return _sum_of_products(ctx, eqn, bounds, eqn.inputs[0].aval.shape[-1],
                                lambda left, right: ctx.emit(matmul_p, left, right))
    if cheap:
        a, b = eqn.inputs
        row_axis = (len(a.aval.shape) - 1,)
        column_axis = (max(len(b.aval.shape) - 2, 0),)
        return _cheap_contraction(ctx, eqn, bounds, a.aval.shape[-1],
                                  lambda full: ctx.emit(sum_p, full, axes=row_axis,
                                                        keepdims=True),
                                  lambda full: ctx.emit(max_p, full, axes=column_axis,
                                                        keepdims=True))
    return _sum_of_products(ctx, eqn, bounds, eqn.inputs[0].aval.shape[-1],
                            lambda left, right: ctx.emit(matmul_p, left, right))


def _numpy_matmul(ctx, eqn):
    """Whether ``eqn`` is a product the user's code made as NumPy's matmul (``@``,
    ``np.matmul``, ``np.dot``) of operands NumPy holds as compiled code does, so that the
    BLAS call compiled code makes for it is NumPy's (``codegen/numpy_products.py``): its
    location is known and not an einsum's (``tracer/einsum.py`` notes those; equations
    without one, made by a pass, a nested loop's body or a parsed graph, keep their
    bound), its operands are floats, and each is C-ordered in NumPy too, or a transpose
    of such a matrix (``_c_ordered``)."""
    locations = getattr(getattr(ctx, "graph", None), "locations", None) or {}
    location = locations.get(eqn.out.name)
    if location is None or location.via:
        return False
    for operand in eqn.inputs:
        # (a float32 operand of a float64 product: NumPy and compiled code both cast a copy)
        if not isinstance(operand, Var) or operand.aval.dtype not in (
                eqn.out.aval.dtype, np.dtype(np.float32)):
            return False
        producer = ctx.producers.get(operand.name)
        if producer is not None and producer.prim.name == "transpose":  # NumPy's trans flag
            if not swaps_last_two_axes(producer.params_dict["perm"]):
                return False
            operand = producer.inputs[0]
        if not _c_ordered(ctx, operand):
            return False
    return True


# Compiled code keeps every array C-ordered; NumPy's ufuncs keep their operands' layout
# (order 'K'), so a value computed from a transpose, or a strided view (x[:, ::2], a
# column x[:, 0]), is another layout there, which NumPy's matmul hands to BLAS otherwise
# (transposed, strided, or to its own loop): another order of the sums.
_FRESH_KINDS = ("matmul", "creation")  # NumPy allocates these C-ordered
_LAYOUT_KEEPING = ("pointwise", "reduction")


def _c_ordered(ctx, atom, depth=0):
    """Whether NumPy holds ``atom`` C-ordered (a 0-d or 1-d result of a ufunc or reduction
    is always contiguous). Arguments and a loop's carried and outside values count as
    C-ordered: compiled code lays a non-contiguous argument out before the kernels run,
    where NumPy reads it in place (a caveat in docs/sharp_bits.md)."""
    if isinstance(atom, Literal):
        return True
    producer = ctx.producers.get(atom.name)
    if producer is None:
        return True
    kind = producer.prim.kind
    if kind in _FRESH_KINDS or producer.prim.name in ("concatenate", "pad"):
        return True  # (pad: np.pad's result, or a value written into a buffer, selected in)
    if producer.prim.name == "slice":
        # a block of whole rows of a C-ordered value is C-ordered (x[t], x[i:j]), as NumPy
        # holds the view: a loop body's W @ spikes_in[t] is NumPy's gemv (round 20)
        return _whole_rows(producer) and depth <= 32 and _c_ordered(
            ctx, producer.inputs[0], depth + 1)
    if kind in _LAYOUT_KEEPING or producer.prim.name in ("reshape", "cast"):
        if kind in _LAYOUT_KEEPING and len(producer.out.aval.shape) <= 1:
            return True
        if depth > 32:
            return False  # a long chain: not worth proving
        return all(_c_ordered(ctx, operand, depth + 1) for operand in producer.inputs
                   if not isinstance(operand, Var) or operand.aval.shape)
    return False


def _whole_rows(eqn):
    """Whether the slice ``eqn`` reads its operand in place contiguously: steps of 1, and
    every axis after the first one it keeps longer than 1 taken whole."""
    params = eqn.params_dict
    if any(step != 1 for step in params["steps"]):
        return False
    shape, kept = eqn.inputs[0].aval.shape, eqn.out.aval.shape
    for axis, extent in enumerate(kept):
        if isinstance(extent, int) and extent == 1:
            continue
        return all(params["starts"][later] == 0 and params["limits"][later] == shape[later]
                   for later in range(axis + 1, len(shape)))
    return True


def _loop(ctx, eqn, bounds):
    """Never exact, even on exact operands: its body's operations round as compiled code
    does (a compiled tanh is within 1.5 ulp of NumPy's, not equal to it), trip after trip.
    Bounded only where the loop carries its result's bound (``loop_bounds``: the ``loop``
    result at the paired position); exact where ``loop_bounds`` found the result NumPy's
    at every trip (``exact``)."""
    params = eqn.params_dict
    if params.get("exit") is not None and params["exit"] == params["output"]:
        # a while loop's done flag (tracer/while_loops.py): every trip's exit decision has
        # its margin guard in the body, so past them it is NumPy's (for ... else: reads it)
        return None
    entering = _count_operands(eqn) if params.get("exit") is not None else None
    if entering is not None:
        # a counter, the index read after the loop, a return flag: NumPy's where the
        # operands it started from are (the done flag's reasoning)
        inexact = [bounds[position] for position in entering if bounds[position] is not None]
        out_shape = tuple(eqn.out.aval.shape)
        if not inexact:
            return None
        if len(inexact) == 1 and tuple(inexact[0].aval.shape) == out_shape:
            return inexact[0]
    if params["output"] in params.get("exact", ()):
        return None  # NumPy's at every trip (loop_bounds: exact in, exact out of a trip)
    position = dict(params.get("bounds", ())).get(params["output"])
    if position is None:
        raise Unbounded
    if not hasattr(ctx, "loop_results"):
        ctx.loop_results = {
            (other.inputs, tuple(p for p in other.params if p[0] != "output"),
             other.params_dict["output"]): other.out
            for other in ctx.producers.values() if other.prim.name == "loop"}
    found = ctx.loop_results.get(
        (eqn.inputs, tuple(p for p in eqn.params if p[0] != "output"), position))
    if found is None:
        raise Unbounded
    return found


_COUNTING = ("add", "subtract", "cast", "full", "broadcast_to", "reshape")


# What the body's discontinuity checks leave unchecked (discontinuities' docstring): a
# choice on a predicate read off these may differ from NumPy's.
_UNMODELLED = ("conv2d", "conv2d_weight_grad", "loop", "prod", "einsum")


def reads_unmodelled(producers, predicate):
    """Whether ``predicate`` is computed from an equation of ``_UNMODELLED`` or a float32
    matmul (``producers``: output name -> equation)."""
    pending, seen = [predicate], set()
    while pending:
        atom = pending.pop()
        item = producers.get(getattr(atom, "name", None))
        if item is None or item.out.name in seen:
            continue
        seen.add(item.out.name)
        if item.prim.name in _UNMODELLED or (item.prim.name == "matmul"
                                             and item.out.aval.dtype == np.float32):
            return True
        pending += item.inputs
    return False


def _count_operands(eqn):
    """The loop operands an exit loop's integer result is made from by integer steps and
    the body's choices alone (``it += 1``, the index read after the loop, a return flag:
    ``tracer/exit_ints.py``), or None. The choices' predicates are decisions checked in the
    body, as the done flag's are, so the result is as exact as those operands. Without
    this an ``if`` on the counter after the loop had no bound and ran eagerly at every
    call."""
    params = eqn.params_dict
    body, num_carry = params["body"], params["num_carry"]
    if body.outputs[params["output"]].aval.dtype.kind not in "iub":
        return None
    producers = {item.out.name: item for item in body.equations}
    positions = {var.name: position for position, var in enumerate(body.inputs)}
    constants = {var.name for var, _ in body.constants}
    pending, seen, entering = [body.outputs[params["output"]]], set(), set()
    while pending:
        atom = pending.pop()
        if isinstance(atom, Literal) or atom.name in seen or atom.name in constants:
            continue
        seen.add(atom.name)
        if atom.aval.dtype.kind not in "iub":
            return None
        if atom.name in positions:
            position = positions[atom.name]
            entering.add(position)
            if position < num_carry:
                pending.append(body.outputs[position])
            continue
        item = producers.get(atom.name)
        if item is None:
            return None
        if item.prim.name == "where":
            if reads_unmodelled(producers, item.inputs[0]):
                return None
            pending += item.inputs[1:]  # (the predicate: a decision checked in the body)
        elif item.prim.name in _COUNTING:
            pending += item.inputs
        else:
            return None
    return sorted(entering)


def _convolution(ctx, eqn, bounds):
    """conv2d and its weight gradient: sums of products like matmul's, as long as the
    window (C/groups * KH * KW) or the summed positions (N * OH * OW)."""
    params = eqn.params_dict
    x, second = eqn.inputs
    if eqn.prim.name == "conv2d":
        depth = x.aval.shape[1] // params["groups"] * params["kernel"][0] * params["kernel"][1]
    else:
        depth = second.aval.shape[0] * second.aval.shape[2] * second.aval.shape[3]
    if getattr(ctx, "cheap", False):
        # No cheap model: a check reading the product would keep a fused epilogue (bias,
        # relu, a mask) off the register tiles, a second pass over every output.
        raise Unbounded()
    return _sum_of_products(ctx, eqn, bounds, depth,
                            lambda left, right: ctx.emit(eqn.prim, left, right, **params))


def _cheap_contraction(ctx, eqn, bounds, depth, summed, peak):
    """A bound of a contraction costing no contraction: ``sum_k |a_k| |b_k| <= (sum_k
    |a_k|) max_k |b_k|``, with ``summed`` reducing the first operand (values plus bounds)
    and ``peak`` the second, each to a shape that broadcasts to the output's (or has its
    size). Looser than ``|A| @ |B|`` by a few times on random data, which a float64 check
    of ~1e-13 relative never notices, and cheap enough for every discontinuity check.
    Float64; float32 of exact operands, or in a loop's checks (``_float32_modelled``)."""
    (a, b), (ea, eb) = eqn.inputs, bounds
    if not is_float(eqn.out) or (eqn.out.aval.dtype != F64 and not _float32_modelled(
            ctx, eqn, bounds)):
        # float32: ~K u32 of the magnitudes after one layer (1e-4 at K = 784), growing
        # layer by layer to the size of the values: a check would fail on every call
        # (a float32 classifier's argmax would always run eagerly). No error model.
        if not is_float(eqn.out) and ea is None and eb is None:
            return None
        raise Unbounded()
    dtype = eqn.out.aval.dtype
    u, eta = unit_roundoff(dtype), smallest_subnormal(dtype)
    depth = _largest(ctx, depth)
    shape = tuple(eqn.out.aval.shape)

    def shaped(atom):
        if isinstance(atom, Literal) or tuple(atom.aval.shape) == shape:
            return atom
        if len(atom.aval.shape) != len(shape):  # a vector operand's unit dim: same size
            return ctx.emit(reshape_p, atom, shape=shape)
        return ctx.fit(atom, shape)

    def full(atom, e):
        return ctx.abs(atom) if e is None else ctx.add(ctx.abs(atom), ctx.fit(
            ctx.as_number(atom, e), atom.aval.shape))

    total = ctx.mul(summed(full(a, ea)), peak(full(b, eb)))
    terms = []
    if ea is not None:
        spread = ctx.fit(ctx.as_number(a, ea), a.aval.shape)
        terms.append(ctx.mul(summed(ctx.emit(broadcast_to_p, spread, shape=tuple(
            a.aval.shape)) if tuple(spread.aval.shape) != tuple(a.aval.shape) else spread),
            peak(full(b, eb))))
    if eb is not None:
        spread = ctx.fit(ctx.as_number(b, eb), b.aval.shape)
        terms.append(ctx.mul(summed(ctx.abs(a)), peak(ctx.emit(
            broadcast_to_p, spread, shape=tuple(b.aval.shape)) if tuple(
            spread.aval.shape) != tuple(b.aval.shape) else spread)))
    terms.append(ctx.mul(total, number((depth + 2) * 2 * u * INFLATE)))
    bound = ctx.plus(*terms)
    # underflow only where some product is not zero (as in _sum_of_products)
    return ctx.add(shaped(bound), ctx.where(ctx.greater(shaped(total), number(0.0)),
                                            number(4 * depth * eta), number(0.0)))


def _float32_modelled(ctx, eqn, bounds):
    """Whether a float32 contraction takes the cheap bound as a float64 one does (round
    20: masks on these went unchecked, the float32 LIF layer's spikes on the own GEMM):

    * of exact operands, where it is not NumPy's call (``TRACEJIT_GEMM=own``, an einsum):
      one layer's ~K u32 of the magnitudes, which a check on ordinary data passes;
    * in the checks of a loop and of the values it reads (``loop_bounds`` sets
      ``float32_products`` on its slices), whatever its operands (``W @ h`` of a carried
      ``h``): there a value with no model is decided by NumPy alone (a check that always
      fails), so a bound, however loose, keeps more calls compiled.

    Elsewhere a product of inexact float32 operands stays without a model: its bound grows
    layer by layer (a tanh classifier's argmax ran eagerly on 27 of 30 calls with it)."""
    return np.dtype(eqn.out.aval.dtype) == np.dtype(np.float32) and (
        all(bound is None for bound in bounds) or getattr(ctx, "float32_products", False))


def _cumsum(ctx, eqn, bounds):
    """Compiled running sums add in NumPy's order (``codegen/scan.py``): on exact operands
    they are NumPy's to the bit. Operands up to ``e`` away move each running sum by the
    running sum of ``e``, and each of its additions (at most the axis length ``n``) may
    then round the other way: ``u`` of a partial sum on each side."""
    (x,), (e,) = eqn.inputs, bounds
    if e is None:
        return None
    carried = ctx.emit(cumsum_p, ctx.spread(ctx.as_number(x, e), x.aval.shape))
    if not is_float(eqn.out):
        return carried  # integers wrap the same in NumPy's order
    u = unit_roundoff(eqn.out.aval.dtype)
    n = _largest(ctx, x.aval.shape[-1])
    magnitude = ctx.add(ctx.emit(cumsum_p, ctx.abs(x)), carried)
    return ctx.plus(carried, ctx.mul(magnitude, number(2 * n * u * INFLATE)),
                    ctx.rounding(eqn.out))


def _cumprod(ctx, eqn, bounds):
    """Compiled running products multiply in NumPy's order (``codegen/scan.py``): NumPy's
    bits on exact operands. Inexact ones have no error model (a product's relative error
    grows with each factor, and may underflow on the way): eager decides."""
    if bounds[0] is None:
        return None
    raise Unbounded()


def _sum_of_products(ctx, eqn, bounds, depth, contract):
    """The bound of a bilinear ``contract(a, b)`` whose outputs sum ``depth`` products."""
    (a, b), (ea, eb) = eqn.inputs, bounds
    if not is_float(eqn.out):
        if ea is None and eb is None:
            return None
        raise Unbounded()
    dtype = eqn.out.aval.dtype
    u, eta = unit_roundoff(dtype), smallest_subnormal(dtype)
    depth = _largest(ctx, depth)
    magnitude_a, magnitude_b = ctx.abs(a), ctx.abs(b)
    magnitude = contract(magnitude_a, magnitude_b)
    terms = []
    if ea is not None or eb is not None:
        ea = ctx.fit(ctx.as_number(a, ea), a.aval.shape) if ea is not None else None
        eb = ctx.fit(ctx.as_number(b, eb), b.aval.shape) if eb is not None else None
        full_a = ea if ea is None or ea.aval.shape == a.aval.shape else ctx.emit(
            broadcast_to_p, ea, shape=tuple(a.aval.shape))
        full_b = eb if eb is None or eb.aval.shape == b.aval.shape else ctx.emit(
            broadcast_to_p, eb, shape=tuple(b.aval.shape))
        if full_b is not None:
            terms.append(contract(magnitude_a, full_b))
        if full_a is not None:
            terms.append(contract(full_a, magnitude_b))
        if full_a is not None and full_b is not None:
            terms.append(contract(full_a, full_b))
        carried = ctx.plus(*terms)
        magnitude = ctx.add(magnitude, carried)
        terms = [carried]
    # Any order, FMA or not, on both sides: gamma_k |A| |B| each, k the contraction length.
    terms.append(ctx.mul(magnitude, number((depth + 2) * 2 * u * INFLATE)))
    # Underflow: at most eta per product, where one is not zero. Where every product is
    # (W @ A over a column of A that a relu zeroed), both sides sum exact zeros: exact.
    terms.append(ctx.where(ctx.greater(magnitude, number(0.0)), number(4 * depth * eta),
                           number(0.0)))
    return ctx.plus(*terms)


# --- structure: bounds move with their values ------------------------------------------
def _mirror(ctx, eqn, bounds):
    """reshape, transpose, broadcast_to, slice, flip, pad, sliding_window: the same view of
    the bound (a scalar bound bounds every element of every view)."""
    (x, *rest), (e, *_) = eqn.inputs, bounds
    if e is None:
        return None
    if isinstance(e, Literal) or tuple(e.aval.shape) == ():
        return e
    e = ctx.fit(e, x.aval.shape)
    return ctx.emit(eqn.prim, e, *rest, **eqn.params_dict)


def _concatenate(ctx, eqn, bounds):
    if all(b is None for b in bounds):
        return None
    bool_out = is_bool(eqn.out)
    parts = []
    for atom, bound in zip(eqn.inputs, bounds):
        if bound is None:
            bound = Literal.of(np.bool_(False)) if bool_out else number(0.0)
        elif not bool_out:
            bound = ctx.as_number(atom, bound)
        dtype = BOOL if bool_out else F64
        parts.append(ctx.emit(broadcast_to_p, bound, shape=tuple(atom.aval.shape))
                     if tuple(bound.aval.shape) != tuple(atom.aval.shape) or isinstance(
                         bound, Literal) else bound)
        if parts[-1].aval.dtype != dtype:
            parts[-1] = ctx.emit(cast_p, parts[-1], dtype=dtype)
    return ctx.emit(eqn.prim, *parts, **eqn.params_dict)


def _prod(ctx, eqn, bounds):
    """Integer products wrap the same in any order; float ones reassociate (inexact even
    on exact operands) and may underflow in between: no error model, eager decides."""
    if not is_float(eqn.out) and bounds[0] is None:
        return None
    raise Unbounded()


def _gather(ctx, eqn, bounds):
    """The picked elements' bounds; where an index may differ from NumPy's (an argmax at a
    near tie: ``_arg_extremum``), any element: unbounded then. Greedy decoding's
    ``E[int(np.argmax(logits))]`` is exact on every call whose argmax is decided."""
    e, ei = bounds
    picked = _mirror(ctx, eqn, [e, None])
    moved = _index_moved(ctx, eqn, ei)
    if moved is None:
        return picked
    if is_bool(eqn.out):
        return moved if picked is None else ctx.or_(moved, picked)
    return ctx.where(moved, INF, number(0.0) if picked is None else picked)


def _scatter_add(ctx, eqn, bounds):
    """Exact updates at indices that may differ from NumPy's only where an argmax nearly
    ties (``_arg_extremum``): exact while none does, unbounded otherwise. DLFS's pooling
    backward, ``dmax[np.arange(n), arg_max.flatten()] = dout.flatten()``, checks its
    positions do not repeat by such a scatter; it ran eagerly on every call. Bounded
    updates stay unmodelled (added in another order than NumPy's)."""
    eu, ei = bounds
    if eu is not None:
        raise Unbounded()
    moved = _index_moved(ctx, eqn, ei)
    if moved is None:
        return None
    if is_bool(eqn.out):
        return moved
    return ctx.where(moved, INF, number(0.0))


def _index_moved(ctx, eqn, ei):
    """Whether any index of ``eqn`` (its second input, with ambiguity ``ei``) may differ
    from NumPy's, a bool mask reduced over the index's axes; None when none can; Unbounded
    when one always may."""
    if ei is None:
        return None
    moved = ctx.mask(ei)
    if isinstance(moved, Literal):
        if not bool(moved.value):
            return None
        raise Unbounded()
    if tuple(moved.aval.shape):
        moved = ctx.emit(any_p, moved, axes=tuple(range(len(eqn.inputs[1].aval.shape))),
                         keepdims=False)
    return moved


def _integer_operation(ctx, eqn, bounds):
    """``//``, ``%`` and bitwise operations: on integers exact wherever their operands are
    (beam search's ``best // V`` and ``best % V`` of an argsort's indices, exact unless it
    nearly ties), unbounded elsewhere; on floats a jump at every multiple: no model."""
    if all(bound is None for bound in bounds):
        return None
    if eqn.out.aval.dtype.kind not in "iub" or any(
            isinstance(atom, Var) and atom.aval.dtype.kind not in "iub" for atom in eqn.inputs):
        raise Unbounded()
    moved = None
    for bound in bounds:
        if bound is not None:
            mask = ctx.mask(bound)
            moved = mask if moved is None else ctx.or_(moved, mask)
    if isinstance(moved, Literal):
        if not bool(moved.value):
            return None
        raise Unbounded()
    moved = ctx.fit(moved, eqn.out.aval.shape)
    return moved if is_bool(eqn.out) else ctx.where(moved, INF, number(0.0))


# --- integer-valued floats: sums of counts are exact in any order --------------------------
def _integral_literal(value):
    if isinstance(value, DimExpr):
        return None
    value = float(np.asarray(value))
    return abs(value) if math.isfinite(value) and value == math.floor(value) else None


def integral_magnitude(ctx, eqn, magnitudes):
    """A bound on ``|value|`` when ``eqn``'s result holds integers only (a count: bools
    cast to float, summed or multiplied by a triangle of ones, as cumsum does), else None.
    ``magnitudes`` gives the operands' (None: not known integral). Below 2**(mantissa + 1)
    such values are exact in any order of operations, on both sides."""
    name, inputs = eqn.prim.name, eqn.inputs
    if name == "full":
        return _integral_literal(eqn.params_dict["value"])
    if name == "iota":
        length = eqn.params_dict["length"]
        return float(_largest(ctx, length)) if not isinstance(length, DimExpr) or (
            length.bounds(ctx.ranges)[1] is not None) else None
    known = []
    for atom in inputs:
        if isinstance(atom, Literal):
            known.append(_integral_literal(atom.value))
        elif atom.aval.dtype == BOOL:
            known.append(1.0)
        else:
            known.append(magnitudes.get(atom.name))
    if name == "where":
        known = known[1:]
    if not known or any(m is None for m in known):
        return None
    if name in ("cast", "neg", "abs", "reshape", "transpose", "broadcast_to", "slice", "flip",
                "maximum", "minimum", "where", "concatenate", "max", "min"):
        return max(known)
    if name in ("add", "subtract"):
        return sum(known)
    if name == "multiply":
        return math.prod(known)
    if name == "sum":
        return known[0] * _reduced_count(ctx, eqn)
    if name == "matmul":
        return known[0] * known[1] * _largest(ctx, inputs[0].aval.shape[-1])
    return None


def exact_integers(dtype, magnitude):
    """Are integers up to ``magnitude`` exact in ``dtype``?"""
    dtype = np.dtype(dtype)
    return dtype.kind != "f" or magnitude < 2.0 ** (np.finfo(dtype).nmant + 1)


RULES = {
    "loop": _loop,
    "add": _add,
    "subtract": _add,
    "multiply": _multiply,
    "square": _square,
    "true_divide": _true_divide,
    "reciprocal": _reciprocal,
    "neg": _passthrough,
    "abs": _passthrough,
    "stop_gradient": _passthrough,
    "sign": _sign,
    "sqrt": _sqrt,
    "exp": _math(_exp_carry),
    "exp2": _math(_exp2_carry),
    "expm1": _math(_expm1_carry),
    "log": _math(_log_carry, lowest=0.0),
    "log1p": _math(_log1p_carry, lowest=-1.0),
    "log2": _math(_scaled_carry(_log_carry, 1.0 / math.log(2.0)), lowest=0.0),
    "log10": _math(_scaled_carry(_log_carry, 1.0 / math.log(10.0)), lowest=0.0),
    "tanh": _tanh,
    # sin, cos: NumPy's own float64 sin is thousands of ulp off near multiples of pi
    # (mathlib's docstring): also allow 8 u absolute.
    "sin": _math(_lipschitz(1.0), absolute=8.0),
    "cos": _math(_lipschitz(1.0), absolute=8.0),
    "tan": _math(_tan_carry, absolute=8.0),
    "erf": _math(_lipschitz(2.0 / math.sqrt(math.pi))),
    "power": _power,
    "floor": _rounding_to_integer(floor_p),
    "ceil": _rounding_to_integer(ceil_p),
    "rint": _rounding_to_integer(rint_p),
    "trunc": _rounding_to_integer(trunc_p),
    "maximum": _extremum,
    "minimum": _extremum,
    "equal": _compare,
    "not_equal": _compare,
    "less": _compare,
    "less_equal": _compare,
    "greater": _compare,
    "greater_equal": _compare,
    "isnan": _float_class,
    "isinf": _float_class,
    "isfinite": _float_class,
    "logical_not": _logical,
    "logical_and": _connective(False),
    "logical_or": _connective(True),
    "where": _where,
    "cast": _cast,
    "sum": _sum,
    "prod": _prod,
    "max": _extreme_reduction,
    "min": _extreme_reduction,
    "any": _any_all,
    "all": _any_all,
    "matmul": _matmul,
    "cumsum": _cumsum,
    "cumprod": _cumprod,
    "conv2d": _convolution,
    "conv2d_weight_grad": _convolution,
    "reshape": _mirror,
    "transpose": _mirror,
    "broadcast_to": _mirror,
    "slice": _mirror,
    "flip": _mirror,
    "pad": _mirror,
    "sliding_window": _mirror,
    "concatenate": _concatenate,
    "gather": _gather,
    "scatter_add": _scatter_add,
    "floor_divide": _integer_operation,
    "mod": _integer_operation,
    "bitwise_and": _connective(False),
    "bitwise_or": _connective(True),
    "bitwise_xor": _integer_operation,
    "invert": _integer_operation,
    "left_shift": _integer_operation,
    "right_shift": _integer_operation,
    "argmax": _arg_extremum,
    "argmin": _arg_extremum,
}

# No error model: exact on exact operands (compiled code computes NumPy's result to the
# bit), an infinite bound otherwise, so the guards they feed let eager decide.
UNBOUNDED = {
    "full": "a constant",
    "iota": "0, 1, 2, ...",
}


__all__ = ["RULES", "UNBOUNDED", "Unbounded", "decided_over_indices", "exact_integers",
           "extreme_ambiguity", "integral_magnitude", "number", "unit_roundoff"]
