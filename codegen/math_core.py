"""The building blocks of the math library: constants, intrinsics, polynomials, exact sums.

Every helper works on a scalar float or on a vector of lanes alike (``Float`` gives
constants in the shape of the values at hand): the scalar code is what kernels inline and
LLVM's loop vectorizer widens, the vector form is what ``math_rare_path`` emits for the
per-vector slow paths.

>>> from llvmlite import ir
>>> module = ir.Module()
>>> lanes = ir.VectorType(ir.FloatType(), 8)
>>> function = ir.Function(module, ir.FunctionType(lanes, [lanes]), "twice_plus_one")
>>> builder = ir.IRBuilder(function.append_basic_block())
>>> f = Float(lanes)
>>> _ = builder.ret(fma(builder, function.args[0], f.const(2.0), f.const(1.0)))
>>> "llvm.fma.v8f32" in str(module), str(f.int)
(True, '<8 x i32>')
"""

from __future__ import annotations

from llvmlite import ir

from .dtypes import F32, F64, I1, I32, I64


def lanes_of(value_type):
    """How many lanes a vector type has; None for a scalar."""
    return value_type.count if isinstance(value_type, ir.VectorType) else None


def element_of(value_type):
    return value_type.element if isinstance(value_type, ir.VectorType) else value_type


def shaped(scalar_type, lanes):
    """``scalar_type``, or a vector of it with ``lanes`` lanes."""
    return scalar_type if lanes is None else ir.VectorType(scalar_type, lanes)


class Float:
    """Constants and bit layout of one float format, shaped like the values at hand."""

    def __init__(self, ty):
        self.ty = ty
        self.lanes = lanes_of(ty)
        self.element = element_of(ty)
        self.double = self.element == F64
        self.int = self.like(I64 if self.double else I32)
        self.mantissa_bits = 52 if self.double else 23
        self.bias = 1023 if self.double else 127
        self.exp_high = 709.782712893384 if self.double else 88.72283
        self.exp_low = -745.1332191019412 if self.double else -103.972084
        self.ln2_hi = 6.93147180369123816490e-01 if self.double else 0.693145751953125
        self.ln2_lo = 1.90821492927058770002e-10 if self.double else 1.428606765330187e-06

    def like(self, scalar_type):
        """``scalar_type`` with as many lanes as this format's values."""
        return shaped(scalar_type, self.lanes)

    def other(self, scalar_type):
        """The ``Float`` of another precision with the same lanes."""
        return Float(self.like(scalar_type))

    def const(self, value):
        return constant(self.ty, value)

    def iconst(self, value):
        return constant(self.int, value)


def constant(value_type, value):
    """``value`` as a constant of ``value_type`` (a vector constant splats it)."""
    lanes = lanes_of(value_type)
    if lanes is None:
        return ir.Constant(value_type, value)
    return ir.Constant(value_type, [ir.Constant(value_type.element, value)] * lanes)


def intrinsic(builder, name, *args, result_type=None):
    """``llvm.<name>`` overloaded on the type of the first argument (or ``result_type``)."""
    value_type = args[0].type
    ty = result_type or value_type
    lanes = lanes_of(value_type)
    element = element_of(value_type)
    suffix = {F64: "f64", F32: "f32", I32: "i32", I64: "i64", I1: "i1"}[element]
    full = f"llvm.{name}.{suffix if lanes is None else f'v{lanes}{suffix}'}"
    function = builder.module.globals.get(full)
    if function is None:
        function = ir.Function(builder.module,
                               ir.FunctionType(ty, [arg.type for arg in args]), full)
    return builder.call(function, list(args))


def fma(builder, a, b, c):
    return intrinsic(builder, "fma", a, b, c)


def fabs(builder, x):
    return intrinsic(builder, "fabs", x)


def rint(builder, x):
    return intrinsic(builder, "rint", x)


def trunc(builder, x):
    return intrinsic(builder, "trunc", x)


def floor(builder, x):
    return intrinsic(builder, "floor", x)


def ceil(builder, x):
    return intrinsic(builder, "ceil", x)


def sqrt(builder, x):
    return intrinsic(builder, "sqrt", x)


def copysign(builder, magnitude, sign):
    return intrinsic(builder, "copysign", magnitude, sign)


def minimum(builder, x, bound):
    """min(x, bound) for ordered operands; a NaN ``x`` becomes ``bound``."""
    return intrinsic(builder, "minnum", x, bound)


def maximum(builder, x, bound):
    return intrinsic(builder, "maxnum", x, bound)


def horner(builder, x, coefficients):
    """c0 + x*(c1 + x*(c2 + ...)) with fused multiply-adds."""
    f = Float(x.type)
    result = f.const(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = fma(builder, result, x, f.const(coefficient))
    return result


def estrin(builder, x, coefficients, square=None):
    """The polynomial of ``horner`` in pairs, (c0 + c1 x) + x^2 (c2 + c3 x) + ...: half
    the dependent chain, for long polynomials whose latency (not their operation count)
    bounds a kernel. ``square`` is x^2 when the caller has it."""
    f = Float(x.type)
    pairs = [fma(builder, f.const(coefficients[k + 1]), x, f.const(coefficients[k]))
             if k + 1 < len(coefficients) else f.const(coefficients[k])
             for k in range(0, len(coefficients), 2)]
    power = square if square is not None else builder.fmul(x, x)
    while len(pairs) > 1:
        pairs = [fma(builder, pairs[k + 1], power, pairs[k]) if k + 1 < len(pairs)
                 else pairs[k] for k in range(0, len(pairs), 2)]
        if len(pairs) > 1:
            power = builder.fmul(power, power)
    return pairs[0]


def is_nan(builder, x):
    return builder.fcmp_unordered("uno", x, x)


def sign_bit(builder, x):
    """True where x's sign bit is set (-0.0 and negative NaN too)."""
    f = Float(x.type)
    return builder.icmp_signed("<", builder.bitcast(x, f.int), f.iconst(0))


def pow2(builder, n_int, f):
    """2^n as a float for n (an integer of ``f.int``) in the normal exponent range."""
    bits = builder.shl(builder.add(n_int, f.iconst(f.bias)), f.iconst(f.mantissa_bits))
    return builder.bitcast(bits, f.ty)


def scale(builder, value, n, f):
    """value * 2^n for n (a whole float) in [-2*bias, 2*bias], in two steps so neither
    factor is denormal."""
    n_int = builder.fptosi(n, f.int)
    half = builder.ashr(n_int, f.iconst(1))
    rest = builder.sub(n_int, half)
    return builder.fmul(builder.fmul(value, pow2(builder, half, f)), pow2(builder, rest, f))


def clamp_exponent(builder, n, f):
    """n within the range ``scale`` handles (NaN becomes a bound: its lanes are replaced by
    NaN at the end); results beyond it overflow or underflow anyway."""
    return minimum(builder, maximum(builder, n, f.const(-2.0 * f.bias + 2)),
                   f.const(2.0 * f.bias))


def reduce_ln2(builder, x):
    """n = round(x / ln2) and r = x - n ln2 (two-part ln2, so r is exact to the last bit
    of x), |r| <= ln2 / 2."""
    f = Float(x.type)
    n = rint(builder, builder.fmul(x, f.const(1.4426950408889634)))
    r = fma(builder, n, f.const(-f.ln2_hi), x)
    return n, fma(builder, n, f.const(-f.ln2_lo), r)


# --- double-double (and float-float) arithmetic -------------------------------------------
# Exact sums and products of two floats as an unevaluated pair (hi, lo); no fast-math flags
# anywhere, so LLVM keeps every rounding where it is written.
def two_sum(builder, a, b):
    """(a + b rounded, its rounding error)."""
    total = builder.fadd(a, b)
    b_part = builder.fsub(total, a)
    a_part = builder.fsub(total, b_part)
    error = builder.fadd(builder.fsub(a, a_part), builder.fsub(b, b_part))
    return total, error


def fast_two_sum(builder, a, b):
    """``two_sum`` for |a| >= |b| (or a zero)."""
    total = builder.fadd(a, b)
    return total, builder.fsub(b, builder.fsub(total, a))


def two_product(builder, a, b):
    """(a * b rounded, its rounding error), exact with a fused multiply-add."""
    product = builder.fmul(a, b)
    return product, fma(builder, a, b, builder.fneg(product))


def split_whole(builder, value):
    """(nearest integer, value - that integer): both exact."""
    whole = rint(builder, value)
    return whole, builder.fsub(value, whole)
