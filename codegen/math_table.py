"""Small constant tables read by a vector of indices: one permute, not a gather.

A math function's scalar code reads ``table[i]`` (16 entries, float32 or float64, i in
[0, 16)) with ``table_lookup``. LLVM's loop vectorizer turns a load from a constant
array into a gather (a load per lane: glibc's table-driven powf ran 2.3 ms a 1024x1024
call against 1.6 for table-free code, ``math_pow``), and it never produces the register
permutes NumPy's SVML kernels read their coefficients with (``vpermps``: one instruction,
the table in registers). So the read is a call of a scalar function whose *vector
variants* (the ``vector-function-abi-variant`` attribute, as ``math_rare_path``'s slow
paths) permute: the vectorizer calls the variant of its width, and ``codegen.llvm``
inlines it after vectorization (names with ``VECTOR_VARIANT_PREFIX``), leaving the
permute in the loop. Variants exist only at the width the host permutes (otherwise the
vectorizer chose 4 lanes read one at a time):

    float32, 16 lanes, AVX-512   vpermps zmm (``llvm.x86.avx512.permvar.sf.512``)
    float32, 8 lanes, AVX2       two vpermps ymm (``llvm.x86.avx2.permps``), a blend on i & 8
    float64, 8 lanes, AVX-512    vpermi2pd zmm, the table in two registers
    other hosts                  every width, lane by lane (extractelement)

The scalar function itself (a loop's scalar remainder) extracts the entry from the table
as a constant vector; vector code (a rare path's general code) permutes at once. Both
read the same entries, so an element's result does not depend on its position. A permute
is not free: on Zen 4 each costs about two multiply-adds' issue (``math_pow``).

>>> from llvmlite import ir
>>> from tracejit.codegen.dtypes import F32, I32
>>> module = ir.Module()
>>> kernel = ir.Function(module, ir.FunctionType(F32, [I32]), "kernel")
>>> builder = ir.IRBuilder(kernel.append_basic_block())
>>> _ = builder.ret(table_lookup(builder, "squares", [float(i * i) for i in range(16)],
...                              kernel.args[0]))
>>> "tracejit_table_squares" in str(module)
True
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir.instructions import CallInstrAttributes

from . import llvm
from .dtypes import F32, F64, I32
from .llvm import VECTOR_VARIANT_PREFIX
from .math_rare_path import variant_lanes, vector_bits

TABLE_SIZE = 16


class _CallAttributes(CallInstrAttributes):
    """Call-site attributes with string ones (the vector variant mapping)."""

    def add(self, name):
        set.add(self, name)


def _features():
    return set(llvm.host_description()["features"].split(","))


def _table_vector(values, element=F32):
    return ir.Constant(ir.VectorType(element, TABLE_SIZE),
                       [ir.Constant(element, v) for v in values])


def _x86(builder, name, result_type, *args):
    module = builder.module
    function = module.globals.get(name)
    if function is None:
        function = ir.Function(module, ir.FunctionType(result_type, [a.type for a in args]),
                               name)
    return builder.call(function, list(args))


def _lanewise(builder, values, index, element):
    """Lane by lane: the table as a constant vector, one extractelement per lane."""
    table = _table_vector(values, element)
    result = ir.Constant(ir.VectorType(element, index.type.count), None)
    for lane in range(index.type.count):
        position = ir.Constant(I32, lane)
        entry = builder.extract_element(table, builder.extract_element(index, position))
        result = builder.insert_element(result, entry, position)
    return result


def _halves(values):
    return ([ir.Constant(F64, v) for v in values[:8]], [ir.Constant(F64, v) for v in values[8:]])


def _permuted_double(builder, values, index):
    """float64 ``values[index]``: a two-source vpermi2pd per 8 lanes (AVX-512)."""
    lanes = index.type.count
    if vector_bits() < 512 or lanes % 8:
        return _lanewise(builder, values, index, F64)
    vector8 = ir.VectorType(F64, 8)
    low, high = (ir.Constant(vector8, half) for half in _halves(values))
    pieces = []
    for start in range(0, lanes, 8):
        mask = ir.Constant(ir.VectorType(I32, 8), [ir.Constant(I32, start + j) for j in range(8)])
        part = builder.shuffle_vector(index, index, mask) if lanes != 8 else index
        wide = builder.zext(part, ir.VectorType(ir.IntType(64), 8))
        pieces.append(_x86(builder, "llvm.x86.avx512.vpermi2var.pd.512", vector8, low, wide,
                           high))
    if len(pieces) == 1:
        return pieces[0]
    mask = ir.Constant(ir.VectorType(I32, 16), [ir.Constant(I32, j) for j in range(16)])
    return builder.shuffle_vector(pieces[0], pieces[1], mask)


def _permuted(builder, values, index, element=F32):
    """``values[index]`` for a vector ``index`` by the host's permutes."""
    if element == F64:
        return _permuted_double(builder, values, index)
    lanes = index.type.count
    features = _features()
    if lanes == 16 and vector_bits() >= 512:
        return _x86(builder, "llvm.x86.avx512.permvar.sf.512", ir.VectorType(F32, 16),
                    _table_vector(values), index)
    if lanes == 8 and "+avx2" in features:
        vector8 = ir.VectorType(F32, 8)
        low = ir.Constant(vector8, [ir.Constant(F32, v) for v in values[:8]])
        high = ir.Constant(vector8, [ir.Constant(F32, v) for v in values[8:]])
        # vpermps reads the low three bits of each index
        from_low = _x86(builder, "llvm.x86.avx2.permps", vector8, low, index)
        from_high = _x86(builder, "llvm.x86.avx2.permps", vector8, high, index)
        eight = ir.Constant(index.type, [ir.Constant(I32, 8)] * 8)
        upper = builder.icmp_unsigned("!=", builder.and_(index, eight),
                                      ir.Constant(index.type, [ir.Constant(I32, 0)] * 8))
        return builder.select(upper, from_high, from_low)
    return _lanewise(builder, values, index, F32)


def _scalar_function(module, name, values, element):
    full = f"tracejit_table_{name}"
    function = module.globals.get(full)
    if function is None:
        function = ir.Function(module, ir.FunctionType(element, [I32]), full)
        function.linkage = "internal"
        for attribute in ("noinline", "nounwind", "readnone"):
            function.attributes.add(attribute)
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        builder.ret(builder.extract_element(_table_vector(values, element),
                                            function.args[0]))
    return function


def _variant(module, name, values, lanes, element):
    full = f"{VECTOR_VARIANT_PREFIX}table_{name}_n{lanes}"
    if module.globals.get(full) is None:
        vector = ir.VectorType(I32, lanes)
        function = ir.Function(module,
                               ir.FunctionType(ir.VectorType(element, lanes), [vector]), full)
        # External until codegen.llvm inlines it (after the vectorizer has called it).
        function.attributes.add("nounwind")
        function.attributes.add("readnone")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        builder.ret(_permuted(builder, values, function.args[0], element))
    return full


def permutes(element):
    """Does the host read a table of ``element`` values by permutes (float32: AVX-512 or
    AVX2; float64: AVX-512)? Elsewhere a table read costs a lane at a time."""
    if vector_bits() >= 512:
        return True
    return element == F32 and "+avx2" in _features()


def _permuted_widths(element):
    """The vector widths given a variant: one register of ``element`` lanes where the host
    permutes (given a narrower or wider variant too, the vectorizer picked 4 lanes read one
    by one, or 16 float64 lanes that spilled registers: 1.26 and 1.30 ms against 1.19 for
    the table-driven float32 pow, 1024x1024, one thread), else every width, lane by lane."""
    if vector_bits() >= 512:
        return [8 if element == F64 else 16]
    if element == F32 and "+avx2" in _features():
        return [8]
    return variant_lanes(F32)


def table_lookup(builder, name, values, index, element=F32):
    """``values[index]``: ``values`` 16 numbers of ``element`` (float32 or float64),
    ``index`` an i32 in [0, 16) (other indices read an unspecified entry), scalar (the
    code the loop vectorizer widens) or a vector (read at once). ``name`` names the table
    in the module: one table per name."""
    if isinstance(index.type, ir.VectorType):  # vector code (a rare path's general code)
        assert len(values) == TABLE_SIZE and index.type.element == I32
        return _permuted(builder, values, index, element)
    assert len(values) == TABLE_SIZE and index.type == I32
    module = builder.module
    scalar = _scalar_function(module, name, values, element)
    widths = _permuted_widths(element)
    variants = [_variant(module, name, values, lanes, element) for lanes in widths]
    mapping = ",".join(f"_ZGV_LLVM_N{lanes}v_{scalar.name}({variant})"
                       for lanes, variant in zip(widths, variants))
    call = builder.call(scalar, [index])
    call.attributes = _CallAttributes(
        ["nounwind", "memory(none)", f'"vector-function-abi-variant"="{mapping}"'])
    return call
