"""LLVM lowering of pointwise primitives: the rule that computes one element of each.

A rule takes a ``RuleContext`` (the builder, the loop dtype, error reporting) and the
operands (already cast to the primitive's NumPy loop dtypes), and returns the result;
``codegen/lowering_table.py`` gives each pointwise primitive its rule. Rules reproduce
NumPy exactly where NumPy defines it: NaN propagation in maximum/minimum, signed zeros,
integer floor division and modulo (Python's signs, 0 for division by zero), wrapping
integer overflow.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tracejit.tracer.ops import cast_p, stop_gradient_p, where_p

from . import dtypes as dt
from . import mathlib, numpy_loops
from .dtypes import constant, is_float
from .kernel_index import as_bool, broadcast_index
from .narrow_results import NARROW_CAST_OUT_OF_RANGE, STORE_ONLY, narrow_cast


class KernelStatus:
    """Error codes kernels report (a side exit runs the call eagerly, which raises NumPy's
    own error)."""

    INDEX_OUT_OF_RANGE = 1
    NEGATIVE_INTEGER_POWER = 2
    NARROW_CAST_OUT_OF_RANGE = NARROW_CAST_OUT_OF_RANGE  # (3: conv_ir.OUT_OF_MEMORY)


def _zero(value):
    return ir.Constant(value.type, 0.0 if isinstance(value.type, (ir.FloatType, ir.DoubleType))
                       else 0)


def float_binary(float_op, int_op, bool_op=None):
    def rule(ctx, x, y):
        if is_float(ctx.dtype):
            return getattr(ctx.builder, float_op)(x, y)
        if ctx.dtype == np.bool_ and bool_op is not None:
            return getattr(ctx.builder, bool_op)(x, y)
        return getattr(ctx.builder, int_op)(x, y)

    return rule


def neg(ctx, x):
    return ctx.builder.fneg(x) if is_float(ctx.dtype) else ctx.builder.neg(x)


def absolute(ctx, x):
    if is_float(ctx.dtype):
        return mathlib.fabs(ctx.builder, x)
    if ctx.dtype == np.bool_:
        return x
    negative = ctx.builder.icmp_signed("<", x, _zero(x))
    return ctx.builder.select(negative, ctx.builder.neg(x), x)


def sign(ctx, x):
    builder = ctx.builder
    one, minus_one = constant(ctx.dtype, 1), constant(ctx.dtype, -1)
    if is_float(ctx.dtype):
        # NumPy: x > 0 ? 1 : (x < 0 ? -1 : (x == 0 ? 0 : x))  (NaN stays NaN, -0.0 gives 0.0)
        zero_or_nan = builder.select(builder.fcmp_ordered("==", x, _zero(x)), _zero(x), x)
        negative = builder.select(builder.fcmp_ordered("<", x, _zero(x)), minus_one, zero_or_nan)
        return builder.select(builder.fcmp_ordered(">", x, _zero(x)), one, negative)
    if ctx.dtype == np.bool_:
        return x
    positive = builder.zext(builder.icmp_signed(">", x, _zero(x)), x.type)
    negative = builder.zext(builder.icmp_signed("<", x, _zero(x)), x.type)
    return builder.sub(positive, negative)


def math_function(name):
    """``np.<name>``: NumPy's own loop for a value a decision reads, where the setting
    makes it exact (``numpy_products.decision_math``; one element per call here: flat
    kernels call it on chunks before this rule is reached, ``numpy_math_chunks``), else
    our math library."""

    def rule(ctx, x):
        if ctx.numpy_math():
            return numpy_loops.emit_scalar(ctx.builder, name, ctx.dtype, x)
        return getattr(mathlib, name)(ctx.builder, x)

    return rule


def rounding(name):
    """floor and ceil: integers (and bools) are already whole (NumPy 2 keeps them)."""

    def rule(ctx, x):
        return getattr(mathlib, name)(ctx.builder, x) if is_float(ctx.dtype) else x

    return rule


def square(ctx, x):
    return float_binary("fmul", "mul", "and_")(ctx, x, x)


def reciprocal(ctx, x):
    builder = ctx.builder
    if is_float(ctx.dtype):
        return builder.fdiv(constant(ctx.dtype, 1.0), x)
    # Integer reciprocal is 1 // x: 1 and -1 map to themselves, everything else to 0.
    one, minus_one = constant(ctx.dtype, 1), constant(ctx.dtype, -1)
    result = builder.select(builder.icmp_signed("==", x, minus_one), minus_one, _zero(x))
    return builder.select(builder.icmp_signed("==", x, one), one, result)


def isnan(ctx, x):
    if not is_float(ctx.dtype):
        return ir.Constant(ir.IntType(1), 0)
    return ctx.builder.fcmp_unordered("uno", x, x)


def isinf(ctx, x):
    if not is_float(ctx.dtype):
        return ir.Constant(ir.IntType(1), 0)
    return ctx.builder.fcmp_ordered("==", mathlib.fabs(ctx.builder, x), constant(ctx.dtype, np.inf))


def isfinite(ctx, x):
    if not is_float(ctx.dtype):
        return ir.Constant(ir.IntType(1), 1)
    return ctx.builder.fcmp_ordered("<", mathlib.fabs(ctx.builder, x), constant(ctx.dtype, np.inf))


def logical_not(ctx, x):
    if ctx.dtype == np.bool_:
        return ctx.builder.not_(x)
    if is_float(ctx.dtype):
        return ctx.builder.fcmp_ordered("==", x, _zero(x))
    return ctx.builder.icmp_unsigned("==", x, _zero(x))


def true_divide(ctx, x, y):
    # Exact IEEE division, as NumPy's: with arcp a division by a loop-invariant value
    # became a multiplication by its hoisted reciprocal (1 ulp off), so a / s recomputed
    # in another kernel where s is not invariant rounded differently, and masks such as
    # x == max(x) in max's gradient lost their element (found by the fusion fuzzer).
    return ctx.builder.fdiv(x, y)


def _integer_divmod(builder, x, y):
    """Python's floor division and modulo; x // 0 and x % 0 are 0 (NumPy's result), and
    MIN // -1 wraps instead of trapping."""
    zero = _zero(x)
    one = ir.Constant(x.type, 1)
    safe_y = builder.select(builder.icmp_signed("==", y, zero), one, y)
    minus_one = builder.icmp_signed("==", safe_y, ir.Constant(x.type, -1))
    safe_y = builder.select(minus_one, one, safe_y)
    quotient = builder.sdiv(x, safe_y)
    quotient = builder.select(minus_one, builder.neg(x), quotient)
    remainder = builder.sub(x, builder.mul(quotient, builder.select(minus_one,
                                                                    ir.Constant(x.type, -1),
                                                                    safe_y)))
    adjust = builder.and_(
        builder.icmp_signed("!=", remainder, zero),
        builder.icmp_signed("!=", builder.icmp_signed("<", remainder, zero),
                            builder.icmp_signed("<", y, zero)),
    )
    quotient = builder.select(adjust, builder.sub(quotient, one), quotient)
    remainder = builder.select(adjust, builder.add(remainder, y), remainder)
    is_zero = builder.icmp_signed("==", y, zero)
    return builder.select(is_zero, zero, quotient), builder.select(is_zero, zero, remainder)


def _float_divmod(ctx, x, y):
    """NumPy's npy_divmod: floor division and modulo with Python's signs."""
    builder, dtype = ctx.builder, ctx.dtype
    zero, one, half = constant(dtype, 0.0), constant(dtype, 1.0), constant(dtype, 0.5)
    mod = builder.frem(x, y)
    div = builder.fdiv(builder.fsub(x, mod), y)
    mod_nonzero = builder.fcmp_unordered("!=", mod, zero)
    signs_differ = builder.icmp_unsigned("!=", builder.fcmp_ordered("<", y, zero),
                                         builder.fcmp_ordered("<", mod, zero))
    adjust = builder.and_(mod_nonzero, signs_differ)
    mod = builder.select(adjust, builder.fadd(mod, y), mod)
    div = builder.select(adjust, builder.fsub(div, one), div)
    mod = builder.select(mod_nonzero, mod, mathlib.copysign(builder, zero, y))
    floor = mathlib.floor(builder, div)
    floor = builder.select(builder.fcmp_ordered(">", builder.fsub(div, floor), half),
                           builder.fadd(floor, one), floor)
    div_nonzero = builder.fcmp_unordered("!=", div, zero)
    quotient = builder.select(div_nonzero, floor,
                              mathlib.copysign(builder, zero, builder.fdiv(x, y)))
    y_zero = builder.fcmp_ordered("==", y, zero)
    quotient = builder.select(y_zero, builder.fdiv(x, y), quotient)
    return quotient, builder.select(y_zero, builder.frem(x, y), mod)


def floor_divide(ctx, x, y):
    if is_float(ctx.dtype):
        return _float_divmod(ctx, x, y)[0]
    return _integer_divmod(ctx.builder, x, y)[0]


def mod(ctx, x, y):
    if is_float(ctx.dtype):
        return _float_divmod(ctx, x, y)[1]
    return _integer_divmod(ctx.builder, x, y)[1]


# NumPy computes a float power whose exponent is one value for the whole loop (a Python or
# NumPy scalar) as a square root when that value is 0.5: (-0.0) ** 0.5 is -0.0 and
# (-inf) ** 0.5 NaN, where C99's pow gives +0.0 and +inf. Probed, not assumed.
_HALF_POWER_IS_SQRT = all(
    bool(np.signbit(np.power(np.array([-0.0, -0.0], dtype), 0.5)).all())
    for dtype in (np.float32, np.float64))


def power(ctx, x, y):
    builder = ctx.builder
    if is_float(ctx.dtype):
        if isinstance(y, ir.Constant):
            exponent = float(y.constant)
            if exponent == 0.5 and _HALF_POWER_IS_SQRT:
                return mathlib.sqrt(builder, x)
            if exponent == 2.0:
                return builder.fmul(x, x)
            if exponent == 1.0:
                return x
            if exponent == -1.0:
                return builder.fdiv(constant(ctx.dtype, 1.0), x)
            small = mathlib.pow_small_integer(builder, x, exponent)
            if small is not None:
                return small
        return mathlib.pow(builder, x, y)
    return _integer_power(ctx, x, y)


def _integer_power(ctx, x, y):
    """Exponentiation by squaring (wrapping); negative exponents report an error (NumPy
    raises ValueError)."""
    builder = ctx.builder
    negative = builder.icmp_signed("<", y, _zero(y))
    ctx.report_if(negative, KernelStatus.NEGATIVE_INTEGER_POWER)
    one = ir.Constant(x.type, 1)
    result, base, exponent = one, x, builder.select(negative, _zero(y), y)
    bits = x.type.width
    for _ in range(bits):
        odd = builder.trunc(exponent, ir.IntType(1))
        result = builder.select(odd, builder.mul(result, base), result)
        base = builder.mul(base, base)
        exponent = builder.lshr(exponent, one)
    return result


def maximum(ctx, x, y):
    builder = ctx.builder
    if is_float(ctx.dtype):
        # NumPy: (x > y || isnan(x)) ? x : y  (ties, such as 0.0 and -0.0, give y)
        keep = builder.or_(builder.fcmp_ordered(">", x, y), builder.fcmp_unordered("uno", x, x))
        return builder.select(keep, x, y)
    compare = builder.icmp_unsigned if ctx.dtype == np.bool_ else builder.icmp_signed
    return builder.select(compare(">=", x, y), x, y)


def minimum(ctx, x, y):
    builder = ctx.builder
    if is_float(ctx.dtype):
        keep = builder.or_(builder.fcmp_ordered("<", x, y), builder.fcmp_unordered("uno", x, x))
        return builder.select(keep, x, y)
    compare = builder.icmp_unsigned if ctx.dtype == np.bool_ else builder.icmp_signed
    return builder.select(compare("<=", x, y), x, y)


def compare(op):
    def rule(ctx, x, y):
        builder = ctx.builder
        if is_float(ctx.dtype):
            # NaN compares unequal to everything: only != is True on unordered operands.
            return (builder.fcmp_unordered if op == "!=" else builder.fcmp_ordered)(op, x, y)
        if ctx.dtype == np.bool_:
            return builder.icmp_unsigned(op, x, y)
        return builder.icmp_signed(op, x, y)

    return rule


def logical(op):
    def rule(ctx, x, y):
        return getattr(ctx.builder, op)(ctx.as_bool(x), ctx.as_bool(y))

    return rule


def bitwise(op):
    """``&``, ``|``, ``^`` of integers (``and_``, ``or_``, ``xor``)."""
    def rule(ctx, x, y):
        return getattr(ctx.builder, op)(x, y)

    return rule


def invert(ctx, x):
    return ctx.builder.not_(x)


def left_shift(ctx, x, y):
    # NumPy's npy_lshift: a shift by the width or more (or a negative one, read as
    # unsigned) gives 0; LLVM's shl would give poison there.
    builder, width = ctx.builder, x.type.width
    inside = builder.icmp_unsigned("<", y, ir.Constant(y.type, width))
    shifted = builder.shl(x, builder.and_(y, ir.Constant(y.type, width - 1)))
    return builder.select(inside, shifted, _zero(x))


def right_shift(ctx, x, y):
    # NumPy's npy_rshift: arithmetic; a shift by the width or more gives the sign (0 or -1)
    builder, width = ctx.builder, x.type.width
    inside = builder.icmp_unsigned("<", y, ir.Constant(y.type, width))
    return builder.ashr(x, builder.select(inside, y, ir.Constant(y.type, width - 1)))


def where(ctx, condition, x, y):
    return ctx.builder.select(condition, x, y)


def identity(ctx, x):
    """``stop_gradient``: only autodiff sees a difference."""
    return x


class RuleContext:
    """What a pointwise rule sees: the builder, the loop dtype, error reporting."""

    def __init__(self, kernel, dtype, eqn=None):
        self.kernel, self.builder, self.dtype = kernel, kernel.ir_builder, np.dtype(dtype)
        self.eqn = eqn

    def numpy_math(self):
        """The equation is math NumPy's own loop computes (``decision_math``)."""
        from .numpy_products import computes_with_numpy

        return self.eqn is not None and is_float(self.dtype) and numpy_loops.exact_loop(
            self.eqn.prim.name, self.dtype) is not None and computes_with_numpy(
                self.kernel, self.eqn)

    def report_if(self, condition, code):
        self.kernel.report_if(condition, code)

    def as_bool(self, value):
        return as_bool(self.builder, value)


def lowered(rule):
    """The lowering of a pointwise primitive whose ``rule(ctx, *operands)`` computes one
    element: ``compute(kernel, eqn, index)`` (see ``codegen/lowering_table.py``)."""

    def compute(kernel, eqn, index):
        return lower_pointwise(kernel, eqn, index, rule)

    compute.rule = rule
    return compute


def lower_pointwise(kernel, eqn, index, rule):
    """The value of a pointwise equation at ``index``: its operands read at the broadcast
    index and cast to NumPy's loop dtypes, then its ``rule``."""
    operand_dtypes, _ = loop_dtypes(eqn.prim, [atom.aval for atom in eqn.inputs])
    out_shape = eqn.out.aval.shape
    operands = [
        kernel.value(atom, broadcast_index(index, atom.aval.shape, out_shape), dtype)
        for atom, dtype in zip(eqn.inputs, operand_dtypes)
    ]
    dtype = operand_dtypes[-1] if eqn.prim is where_p else operand_dtypes[0]
    return rule(RuleContext(kernel, dtype, eqn), *operands)


def lower_cast(kernel, eqn, index):
    """``astype``: float to integer out of range (or NaN) gives the most negative integer,
    as NumPy does on x86."""
    builder = kernel.ir_builder
    source = eqn.inputs[0]
    value = kernel.value(source, broadcast_index(index, source.aval.shape, eqn.out.aval.shape))
    target = eqn.params_dict["dtype"]
    if np.dtype(target) in STORE_ONLY:  # a result only (codegen/narrow_results.py)
        return narrow_cast(kernel, value, source.aval.dtype, target)
    if dt.is_float(source.aval.dtype) and np.dtype(target).kind in "iu":
        limit = float(2 ** (np.dtype(target).itemsize * 8 - 1))
        ty = value.type
        in_range = builder.and_(
            builder.fcmp_ordered(">=", value, ir.Constant(ty, -limit)),
            builder.fcmp_ordered("<", value, ir.Constant(ty, limit)),
        )
        converted = dt.cast(builder, value, source.aval.dtype, target)
        smallest = dt.constant(target, -int(limit))
        return builder.select(in_range, converted, smallest)
    return dt.cast(builder, value, source.aval.dtype, target)


def loop_dtypes(prim, avals):
    """The dtypes NumPy computes a pointwise primitive in: ``(operand dtypes, output)``."""
    if prim is where_p:
        from tracejit.tracer.abstract import result_dtype

        out = result_dtype(avals[1], avals[2])
        return (np.dtype(np.bool_), out, out), out
    if prim is cast_p:
        return (avals[0].dtype,), None
    if prim is stop_gradient_p:
        return (avals[0].dtype,), avals[0].dtype
    if all(aval.weak for aval in avals):
        key = tuple(aval.dtype for aval in avals)
    else:
        key = tuple(aval.dtype_for_promotion() for aval in avals)
    resolved = prim.impl.resolve_dtypes(key + (None,))
    return tuple(resolved[:-1]), resolved[-1]

