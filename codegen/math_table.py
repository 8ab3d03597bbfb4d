"""Small constant tables read by a vector of indices: one permute, not a gather.

A math function's scalar code reads ``table[i]`` (16 float64 entries, i in [0, 16)) with
``table_lookup``. LLVM's loop vectorizer turns a load from a constant array into a gather
(a load per lane: glibc's table-driven powf ran 2.3 ms a 1024x1024 call against 1.6 for
table-free code, ``math_pow``), and it never produces the register permutes NumPy's SVML
kernels read their coefficients with (the table in registers, one instruction). So the
read is a call of a scalar function whose *vector variants* (the
``vector-function-abi-variant`` attribute, as ``math_rare_path``'s slow paths) permute:
the vectorizer calls the variant of its width, and ``codegen.llvm`` inlines it after
vectorization (names with ``VECTOR_VARIANT_PREFIX``), leaving the permute in the loop.

On AVX-512 the one variant is of 8 lanes: a two-source ``vpermi2pd`` with the table in
two registers (given 4- and 16-lane variants too, the vectorizer picked 4 lanes read one
by one, or 16 lanes that spilled registers: 1.26 and 1.30 ms against 1.19 for the
table-driven float32 pow, 1024x1024, one thread). Other hosts get every width, read lane
by lane (an extractelement each: correct, and slow, so ``math_pow`` keeps its table-free
path there; ``permutes`` says which). The scalar function itself (a loop's scalar
remainder) extracts the entry from the table as a constant vector, and vector code (a
rare path's general code) reads at once: the same entries, so an element's result does
not depend on its position. A permute is not free: on Zen 4 each costs about two
multiply-adds' issue (``math_pow``).

float32 tables (``table_lookup_float32``) hold 32 entries, read 16 lanes at a time by one
``vpermi2ps`` (two registers of 16 floats), the width float32 loops vectorize at; the
float32 x ** y reads five of them (``math_pow._pow_float32_wide``).

>>> from functools import lru_cache

import numpy as np
from llvmlite import ir
>>> from tracejit.codegen.dtypes import F64, I32
>>> module = ir.Module()
>>> kernel = ir.Function(module, ir.FunctionType(F64, [I32]), "kernel")
>>> builder = ir.IRBuilder(kernel.append_basic_block())
>>> _ = builder.ret(table_lookup(builder, "squares", [float(i * i) for i in range(16)],
...                              kernel.args[0]))
>>> "tracejit_table_squares" in str(module)
True
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from llvmlite import ir
from llvmlite.ir.instructions import CallInstrAttributes

from .dtypes import F32, F64, I32, I64
from .llvm import VECTOR_VARIANT_PREFIX
from .math_rare_path import variant_lanes, vector_bits

TABLE_SIZE = 16


class _CallAttributes(CallInstrAttributes):
    """Call-site attributes with string ones (the vector variant mapping)."""

    def add(self, name):
        set.add(self, name)


@lru_cache(maxsize=None)
def _constant_vector(element_bits, values, start=0, stop=None):
    """``values[start:stop]`` (``values`` a tuple) as a constant vector of float32 or
    float64, formatted once per process: a kernel that reads tables made and printed 32
    constants a read (the float32 tanh's seven tables cost a chain of ten ops' first call
    ~3 ms of lowering and printing before)."""
    element = F32 if element_bits == 32 else F64
    texts = _element_texts(element_bits, values)[start:stop]
    text = "<" + ", ".join(texts) + ">"
    formatted = ir.FormattedConstant(ir.VectorType(element, len(texts)), text)
    formatted.constant = text  # a vector type splats the text into lanes: undo that
    return formatted


@lru_cache(maxsize=None)
def _element_texts(element_bits, values):
    """LLVM's text of each float: the bits of its value as a double (float32 values are
    exact doubles), as llvmlite writes them, without an object and two struct calls a
    value. The halves of a table (``_permuted_float32``) are slices of its tuple."""
    name = "float" if element_bits == 32 else "double"
    bits = np.asarray(values, np.float32 if element_bits == 32 else np.float64).astype(
        np.float64).view(np.uint64)
    return tuple(f"{name} 0x{int(b):016X}" for b in bits)


def _table_vector(values):
    return _constant_vector(64, tuple(values))


def _lanewise(builder, table, index):
    """Lane by lane: ``table`` a constant vector, one extractelement per lane."""
    result = ir.Constant(ir.VectorType(table.type.element, index.type.count), None)
    for lane in range(index.type.count):
        position = ir.Constant(I32, lane)
        entry = builder.extract_element(table, builder.extract_element(index, position))
        result = builder.insert_element(result, entry, position)
    return result


def _permuted(builder, values, index):
    """``values[index]`` for a vector ``index``: a vpermi2pd per 8 lanes (AVX-512), else
    lane by lane."""
    lanes = index.type.count
    if not permutes() or lanes % 8:
        return _lanewise(builder, _table_vector(values), index)
    vector8 = ir.VectorType(F64, 8)
    low, high = (_constant_vector(64, tuple(values), *part) for part in ((0, 8), (8, 16)))
    intrinsic = "llvm.x86.avx512.vpermi2var.pd.512"
    function = builder.module.globals.get(intrinsic) or ir.Function(
        builder.module, ir.FunctionType(vector8, [vector8, ir.VectorType(I64, 8), vector8]),
        intrinsic)
    pieces = []
    for start in range(0, lanes, 8):
        part = index if lanes == 8 else builder.shuffle_vector(index, index, ir.Constant(
            ir.VectorType(I32, 8), [ir.Constant(I32, start + j) for j in range(8)]))
        pieces.append(builder.call(function, [low, builder.zext(part, ir.VectorType(I64, 8)),
                                              high]))
    if len(pieces) == 1:
        return pieces[0]
    return builder.shuffle_vector(pieces[0], pieces[1], ir.Constant(
        ir.VectorType(I32, 16), [ir.Constant(I32, j) for j in range(16)]))


def vectorizable_function(builder, stem, argument, result_element, compute, widths):
    """A call of the scalar function ``tracejit_<stem>`` (``compute(builder, scalar
    argument)``, internal) at ``argument`` that the loop vectorizer may widen to its vector
    variants of ``widths`` lanes (``compute(builder, vector argument)``; external until
    ``codegen.llvm`` inlines them, after the vectorizer has called them). ``compute`` must
    give each lane the scalar function's result."""
    module = builder.module
    element = argument.type
    scalar = module.globals.get(f"tracejit_{stem}")
    if scalar is None:
        scalar = ir.Function(module, ir.FunctionType(result_element, [element]),
                             f"tracejit_{stem}")
        scalar.linkage = "internal"
        for attribute in ("noinline", "nounwind", "readnone"):
            scalar.attributes.add(attribute)
        body = ir.IRBuilder(scalar.append_basic_block("entry"))
        body.ret(compute(body, scalar.args[0]))
    variants = []
    for lanes in widths:
        full = f"{VECTOR_VARIANT_PREFIX}{stem}_n{lanes}"
        if module.globals.get(full) is None:
            function = ir.Function(module, ir.FunctionType(
                ir.VectorType(result_element, lanes), [ir.VectorType(element, lanes)]), full)
            function.attributes.add("nounwind")
            function.attributes.add("readnone")
            body = ir.IRBuilder(function.append_basic_block("entry"))
            body.ret(compute(body, function.args[0]))
        variants.append(full)
    mapping = ",".join(f"_ZGV_LLVM_N{lanes}v_{scalar.name}({variant})"
                       for lanes, variant in zip(widths, variants))
    call = builder.call(scalar, [argument])
    call.attributes = _CallAttributes(
        ["nounwind", "memory(none)", f'"vector-function-abi-variant"="{mapping}"'])
    return call


def _vectorizable_read(builder, stem, table, index, read, widths):
    """``read(builder, index)`` (scalar or vector) as a call the loop vectorizer widens to
    its variants of ``widths`` lanes (``vectorizable_function``)."""
    return vectorizable_function(builder, stem, index, table.type.element, read, widths)


def permutes():
    """Does the host read a table by permutes (AVX-512)? Elsewhere a read costs a lane at
    a time."""
    return vector_bits() >= 512


def _variant_widths():
    return [8] if permutes() else variant_lanes(F32)


def table_lookup(builder, name, values, index):
    """``values[index]``: ``values`` 16 float64 numbers, ``index`` an i32 in [0, 16) (other
    indices read an unspecified entry), scalar (code the loop vectorizer widens) or a
    vector (read at once). ``name`` names the table in the module: one table per name."""
    assert len(values) == TABLE_SIZE
    if isinstance(index.type, ir.VectorType):
        assert index.type.element == I32
        return _permuted(builder, values, index)
    assert index.type == I32
    table = _table_vector(values)

    def read(body, at):
        if isinstance(at.type, ir.VectorType):
            return _permuted(body, values, at)
        return body.extract_element(table, at)

    return _vectorizable_read(builder, f"table_{name}", table, index, read, _variant_widths())


# float32 tables: 32 entries, a two-source ``vpermi2ps`` (``vpermt2ps``) of 16 lanes on
# AVX-512 reads them (two registers of 16 floats), as SVML's powf16 does. The permute reads
# the low 5 bits of each index and ignores the others; the scalar function and the reads
# lane by lane mask the index the same way, so a caller may pass a wider integer (the bits
# of a float whose low bits are the index) and an element's result does not depend on its
# position.
TABLE_SIZE_FLOAT32 = 32


def _table_vector_float32(values):
    return _constant_vector(32, tuple(values))


def _low_bits(builder, index):
    mask = ir.Constant(index.type, TABLE_SIZE_FLOAT32 - 1) if not isinstance(
        index.type, ir.VectorType) else ir.Constant(
        index.type, [ir.Constant(I32, TABLE_SIZE_FLOAT32 - 1)] * index.type.count)
    return builder.and_(index, mask)


def _permuted_float32(builder, values, index):
    """``values[index & 31]`` for a vector ``index``: one vpermi2ps per 16 lanes (a
    narrower vector's index padded to 16 lanes), else lane by lane."""
    lanes = index.type.count
    if not permutes():
        return _lanewise(builder, _table_vector_float32(values), _low_bits(builder, index))
    vector16 = ir.VectorType(F32, 16)
    low, high = (_constant_vector(32, tuple(values), *part) for part in ((0, 16), (16, 32)))
    intrinsic = "llvm.x86.avx512.vpermi2var.ps.512"
    function = builder.module.globals.get(intrinsic) or ir.Function(
        builder.module, ir.FunctionType(vector16, [vector16, ir.VectorType(I32, 16), vector16]),
        intrinsic)
    pieces = []
    for start in range(0, lanes, 16):
        picks = [min(start + j, lanes - 1) for j in range(16)]
        part = index if lanes == 16 else builder.shuffle_vector(index, index, ir.Constant(
            ir.VectorType(I32, 16), [ir.Constant(I32, j) for j in picks]))
        pieces.append(builder.call(function, [low, part, high]))
    if lanes <= 16:
        if lanes == 16:
            return pieces[0]
        return builder.shuffle_vector(pieces[0], pieces[0], ir.Constant(
            ir.VectorType(I32, lanes), [ir.Constant(I32, j) for j in range(lanes)]))
    while len(pieces) > 1:
        pieces = [builder.shuffle_vector(a, b, ir.Constant(
            ir.VectorType(I32, 2 * a.type.count),
            [ir.Constant(I32, j) for j in range(2 * a.type.count)]))
            for a, b in zip(pieces[0::2], pieces[1::2])]
    return pieces[0]


def read_float32(builder, values, index):
    """``values[index & 31]`` read at once: a permute for a vector ``index`` (lane by lane
    on hosts without them), an element of a constant vector for a scalar one. For code
    inside a function that ``vectorizable_function`` widens (``table_lookup_float32``
    makes each read such a call of its own)."""
    if isinstance(index.type, ir.VectorType):
        return _permuted_float32(builder, values, index)
    return builder.extract_element(_table_vector_float32(values), _low_bits(builder, index))


def table_lookup_float32(builder, name, values, index):
    """``values[index & 31]``: ``values`` 32 float32 numbers (Python floats, rounded to
    float32), ``index`` an i32, scalar (code the loop vectorizer widens) or a vector (read
    at once)."""
    assert len(values) == TABLE_SIZE_FLOAT32
    if isinstance(index.type, ir.VectorType):
        assert index.type.element == I32
        return _permuted_float32(builder, values, index)
    assert index.type == I32
    table = _table_vector_float32(values)

    def read(body, at):
        if isinstance(at.type, ir.VectorType):
            return _permuted_float32(body, values, at)
        return body.extract_element(table, _low_bits(body, at))

    widths = [16] if permutes() else variant_lanes(F32)
    return _vectorizable_read(builder, f"table_f32_{name}", table, index, read, widths)
