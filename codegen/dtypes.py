"""NumPy dtypes as LLVM types: registers, memory, constants and casts with NumPy's rules.

Booleans are ``i1`` in registers and one byte (0 or 1) in memory, as NumPy stores them.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tracejit.tracer.errors import UnsupportedError
from tracejit.tracer.locations import line_prefix

SUPPORTED = {
    np.dtype(np.bool_): ir.IntType(1),
    np.dtype(np.int32): ir.IntType(32),
    np.dtype(np.int64): ir.IntType(64),
    np.dtype(np.float32): ir.FloatType(),
    np.dtype(np.float64): ir.DoubleType(),
}
I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
# Arguments of these dtypes are read only to be converted (``codegen/narrow_inputs.py``)
NARROW_MEMORY = {
    np.dtype(np.int8): I8, np.dtype(np.uint8): I8,
    np.dtype(np.int16): ir.IntType(16), np.dtype(np.uint16): ir.IntType(16),
    np.dtype(np.uint32): I32, np.dtype(np.uint64): I64,
}
F32, F64 = ir.FloatType(), ir.DoubleType()


def check_supported(dtype, what, location=None):
    """Raise ``UnsupportedError`` (naming the user's ``location`` first) unless compiled
    code computes in ``dtype``."""
    if np.dtype(dtype) not in SUPPORTED:
        raise UnsupportedError(
            f"{line_prefix(location)}compiled code supports bool, int32, int64, float32 and "
            f"float64; {what} is {np.dtype(dtype)} (compute in one of those, e.g. "
            f".astype(np.float32), and convert the result outside the function)"
        )


def register_type(dtype):
    dtype = np.dtype(dtype)
    # (narrow values: read to be converted, or stored: codegen/narrow_*.py)
    return SUPPORTED[dtype] if dtype in SUPPORTED else NARROW_MEMORY[dtype]


def memory_type(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return I8
    return SUPPORTED[dtype] if dtype in SUPPORTED else NARROW_MEMORY[dtype]


def is_float(dtype):
    return np.dtype(dtype).kind == "f"


def is_signed(dtype):
    return np.dtype(dtype).kind == "i"


def constant(dtype, value):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return ir.Constant(I1, int(bool(value)))
    if dtype.kind in "iu":
        bits = dtype.itemsize * 8
        value = int(value)
        if dtype.kind == "u" and value >= 1 << (bits - 1):  # uint8 255: i8 -1, the same bits
            value -= 1 << bits
        return ir.Constant(register_type(dtype), value)
    return ir.Constant(register_type(dtype), float(value))


def load(builder, pointer, dtype):
    value = builder.load(pointer)
    return builder.trunc(value, I1) if np.dtype(dtype) == np.bool_ else value


def store(builder, value, pointer, dtype):
    if np.dtype(dtype) == np.bool_:
        value = builder.zext(value, I8)
    builder.store(value, pointer)


def cast(builder, value, source, target):
    """``value.astype(target)`` with NumPy's semantics for in-range values (float to int
    truncates toward zero; to bool means ``!= 0``; NaN to bool is True)."""
    source, target = np.dtype(source), np.dtype(target)
    if source == target:
        return value
    target_type = register_type(target)
    if target == np.bool_:
        if is_float(source):
            return builder.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
        return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    if source == np.bool_:
        return (
            builder.uitofp(value, target_type) if is_float(target) else builder.zext(
                value, target_type
            )
        )
    if is_float(source) and is_float(target):
        return (
            builder.fpext(value, target_type)
            if target.itemsize > source.itemsize
            else builder.fptrunc(value, target_type)
        )
    if is_float(source):
        return builder.fptosi(value, target_type)
    unsigned = source.kind == "u"  # (narrow arguments: uint8 images)
    if is_float(target):
        return (builder.uitofp if unsigned else builder.sitofp)(value, target_type)
    if target.itemsize > source.itemsize:
        return (builder.zext if unsigned else builder.sext)(value, target_type)
    if target.itemsize == source.itemsize:
        return value  # uint64 -> int64: the same bits, as NumPy's astype
    return builder.trunc(value, target_type)
