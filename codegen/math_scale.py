"""v * 2^floor(n) for float32, rounded once: denormal results, overflow and huge n included.

A float32 fast path that builds 2^n from exponent bits (an integer add) is right only where
the result is a normal float; below and above it needs selects or a slow path on every
vector that has such a lane. AVX-512's ``vscalefps`` computes v 2^floor(n) for any n,
rounded once (to a denormal, to 0 or to inf as the exact product would be), in one
instruction. ``scale_float32`` is a call of a scalar function whose 16-lane vector variant
(the ``vector-function-abi-variant`` attribute, as ``math_table``'s tables) is that
instruction: the loop vectorizer calls the variant and ``codegen.llvm`` inlines it. The
scalar function (a loop's scalar remainder, or a host without AVX-512) computes the same
correctly rounded product by two multiplies: v 2^h exact (h = floor(n)/2 keeps it normal
wherever the result is not 0) then 2^(n - h), rounded once, with floor(n) clamped to
[-280, 254] first, beyond which every result is 0 or inf already for the v this is meant
for (a finite positive v within a factor of 2 of 1).

>>> from llvmlite import ir
>>> from tracejit.codegen.dtypes import F32
>>> module = ir.Module()
>>> kernel = ir.Function(module, ir.FunctionType(F32, [F32, F32]), "kernel")
>>> builder = ir.IRBuilder(kernel.append_basic_block())
>>> _ = builder.ret(scale_float32(builder, *kernel.args))
>>> "tracejit_scale_f32" in str(module)
True
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir.instructions import CallInstrAttributes

from .dtypes import F32, I32
from .llvm import VECTOR_VARIANT_PREFIX
from .math_core import Float, floor, maximum, minimum
from .math_rare_path import variant_lanes, vector_bits

# floor(n) is clamped to [-280, 254]: beyond, v 2^n is 0 or inf for v in [1/2, 4), and
# within, 2^(n/2) and 2^(n - n/2) are normal floats or (n <= -253, a result of 0) zeros
_LOWEST, _HIGHEST = -280.0, 254.0
I16 = ir.IntType(16)


class _CallAttributes(CallInstrAttributes):
    """Call-site attributes with string ones (the vector variant mapping)."""

    def add(self, name):
        set.add(self, name)


def scalef_instruction():
    """Does the host have ``vscalefps`` (AVX-512)?"""
    return vector_bits() >= 512


def _by_two_multiplies(builder, value, n):
    """value 2^floor(n), rounded once, for a finite positive value in [1/2, 4): any shape."""
    f = Float(value.type)
    whole = builder.fptosi(minimum(builder, maximum(builder, floor(builder, n),
                                                    f.const(_LOWEST)), f.const(_HIGHEST)),
                           f.int)
    half = builder.ashr(whole, f.iconst(1))

    def power(exponent):  # 2^exponent for -126 <= exponent <= 127, else (lower) 0
        biased = builder.add(exponent, f.iconst(127))
        normal = builder.bitcast(builder.shl(biased, f.iconst(23)), f.ty)
        return builder.select(builder.icmp_signed(">", biased, f.iconst(0)), normal,
                              f.const(0.0))

    return builder.fmul(builder.fmul(value, power(half)),
                        power(builder.sub(whole, half)))


def _scalef(builder, value, n):
    """``vscalefps`` of 16 lanes (AVX-512): value 2^floor(n), current rounding mode."""
    vector = ir.VectorType(F32, 16)
    name = "llvm.x86.avx512.mask.scalef.ps.512"
    function = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(vector, [vector, vector, vector, I16, I32]), name)
    return builder.call(function, [value, n, value, ir.Constant(I16, -1),
                                   ir.Constant(I32, 4)])  # 4: the current rounding mode


def _scalar_function(module):
    full = "tracejit_scale_f32"
    function = module.globals.get(full)
    if function is None:
        function = ir.Function(module, ir.FunctionType(F32, [F32, F32]), full)
        function.linkage = "internal"
        for attribute in ("noinline", "nounwind", "readnone"):
            function.attributes.add(attribute)
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        builder.ret(_by_two_multiplies(builder, *function.args))
    return function


def _variant(module, lanes):
    full = f"{VECTOR_VARIANT_PREFIX}scale_f32_n{lanes}"
    if module.globals.get(full) is None:
        vector = ir.VectorType(F32, lanes)
        function = ir.Function(module, ir.FunctionType(vector, [vector, vector]), full)
        function.attributes.add("nounwind")
        function.attributes.add("readnone")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        value, n = function.args
        if lanes == 16 and scalef_instruction():
            builder.ret(_scalef(builder, value, n))
        else:
            builder.ret(_by_two_multiplies(builder, value, n))
    return full


def scale_float32(builder, value, n):
    """value 2^floor(n) rounded once to float32, for a finite positive ``value`` in [1/2,
    4) and any ``n`` but NaN (+-inf too): scalar (code the loop vectorizer widens) or a
    vector."""
    if isinstance(value.type, ir.VectorType):
        if value.type.count == 16 and scalef_instruction():
            return _scalef(builder, value, n)
        return _by_two_multiplies(builder, value, n)
    module = builder.module
    scalar = _scalar_function(module)
    widths = [16] if scalef_instruction() else variant_lanes(F32)
    mapping = ",".join(f"_ZGV_LLVM_N{lanes}vv_{scalar.name}({_variant(module, lanes)})"
                       for lanes in widths)
    call = builder.call(scalar, [value, n])
    call.attributes = _CallAttributes(
        ["nounwind", "memory(none)", f'"vector-function-abi-variant"="{mapping}"'])
    return call
