"""Shared helpers for the codegen tests: test data with special values, a program cache,
ulp distances and comparisons of compiled results with NumPy's.

>>> import numpy as np
>>> int(ulp_distance(np.float32(1.0), np.nextafter(np.float32(1.0), np.float32(2.0))))
1
>>> int(ulp_distance(np.float64(0.0), np.float64(-0.0))), int(ulp_distance(np.nan, np.nan))
(0, 0)
"""

from __future__ import annotations

import math

import numpy as np

from tracejit import codegen, tracer
from tracejit.tracer.dims import DimExpr

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
DTYPES = (F32, F64, I32, I64, BOOL)
DTYPE_IDS = {F32: "f32", F64: "f64", I32: "i32", I64: "i64", BOOL: "bool"}


def dtype_id(dtype):
    return DTYPE_IDS[np.dtype(dtype)]


# --- test data -------------------------------------------------------------------------
def float_specials(dtype):
    """NaN, infinities, signed zeros, denormals, the extremes and a few ordinary values."""
    info = np.finfo(dtype)
    return np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, info.max, -info.max,
         info.tiny, info.smallest_subnormal, -info.smallest_subnormal, 7.0, -7.0, 1e10],
        dtype=dtype,
    )


def int_specials(dtype):
    """The extremes (to see wrapping), zero, +-1 and small values of both signs."""
    info = np.iinfo(dtype)
    return np.array([info.max, info.min, 0, -1, 1, -7, 7, 2, -2, 3, info.max - 1,
                     info.min + 1], dtype=dtype)


def specials(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return float_specials(dtype)
    if dtype.kind == "i":
        return int_specials(dtype)
    return np.array([True, False])


def random_values(shape, dtype, rng, low=-5.0, high=5.0):
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    if dtype.kind == "f":
        values = rng.uniform(low, high, size)
    elif dtype.kind == "i":
        values = rng.integers(int(low) * 2, int(high) * 2 + 1, size)
    else:
        values = rng.random(size) < 0.5
    return values.astype(dtype).reshape(shape)


def operand_values(shape, dtype, seed, operand=0, with_specials=True):
    """Deterministic data for operand ``operand`` of an op: random values, and where there
    is room the special values laid out so that, across operands, every pair of specials
    meets once (operand 0 cycles fast, operand 1 slow)."""
    rng = np.random.default_rng([seed, operand, *shape])
    values = random_values(shape, dtype, rng).reshape(-1)
    if with_specials and values.size:
        table = specials(dtype)
        count = len(table)
        positions = np.arange(min(values.size, count * count))
        picks = positions % count if operand % 2 == 0 else (positions // count) % count
        values[positions] = table[picks]
    return values.reshape(shape)


# --- compiling -------------------------------------------------------------------------
_PROGRAMS = {}


def compiled(key, function, *example_args, dynamic=True, capture_loops=True):
    """The program for ``function`` traced on ``example_args``, compiled once per ``key``
    for the whole test session (compiling takes tens of milliseconds)."""
    if key not in _PROGRAMS:
        with np.errstate(all="ignore"):  # tracing runs NumPy on the example values
            traced = tracer.trace(function, *example_args, dynamic=dynamic,
                                  capture_loops=capture_loops)
        _PROGRAMS[key] = codegen.compile(traced.graph)
    return _PROGRAMS[key]


def symbol_bindings(program, inputs):
    """The value of each symbol of ``program`` for a call with ``inputs``."""
    bindings = {}
    for var, value in zip(program.graph.inputs, inputs):
        for dim, size in zip(var.aval.shape, np.shape(value)):
            if isinstance(dim, DimExpr) and len(dim.symbols()) == 1 and str(dim) in dim.symbols():
                bindings[str(dim)] = size
    return bindings


def shape_guards_hold(program, inputs):
    """Do the trace's assumptions about dims (``s0 == 15``) hold for ``inputs``? The runtime
    checks them before calling a program; tests calling programs directly must too."""
    bindings = symbol_bindings(program, inputs)
    return all(guard.holds(bindings) for guard in program.graph.shape_guards)


def bucket_sizes(size):
    """Sizes to run a program traced at ``size`` (dynamic) with: the ends of its pow2 bucket,
    a size in the middle and ``size`` itself."""
    high = 1 << (size - 1).bit_length()
    low = high // 2 + 1
    return sorted({low, (low + high) // 2, size, high})


# --- comparing -------------------------------------------------------------------------
def _ordered(values):
    """Floats as integers in the same order (so neighbouring floats differ by 1, +-0 -> 0)."""
    values = np.asarray(values)
    bits = values.view(np.int32 if values.dtype == F32 else np.int64).astype(np.int64)
    smallest = np.int64(np.iinfo(np.int64).min) if values.dtype == F64 else np.int64(-(2**31))
    return np.where(bits < 0, smallest - bits, bits)


def ulp_distance(a, b):
    """How many representable floats lie between ``a`` and ``b`` (elementwise, as float64):
    0 when equal (+0 and -0 are equal) or both NaN, ``inf`` when only one is NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance of {a.dtype} and {b.dtype}")
    ordered_a, ordered_b = _ordered(a), _ordered(b)
    same_sign = (ordered_a < 0) == (ordered_b < 0)
    with np.errstate(over="ignore"):
        exact = np.abs(ordered_a - ordered_b).astype(np.float64)
    # Opposite signs (f64): |a| + |b| may not fit in int64; a float sum is exact enough there.
    wide = np.abs(ordered_a.astype(np.float64)) + np.abs(ordered_b.astype(np.float64))
    distance = np.where(same_sign, exact, wide)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    distance = np.where(nan_a & nan_b, 0.0, distance)
    return np.where(nan_a ^ nan_b, np.inf, distance)


def mismatch_report(actual, expected, bad, inputs=(), limit=5):
    """A few mismatching elements with the inputs that produced them (for failure text)."""
    lines = []
    flat_bad = np.flatnonzero(np.broadcast_to(bad, np.shape(expected)))
    for position in flat_bad[:limit]:
        index = tuple(int(i) for i in np.unravel_index(position, np.shape(expected)))
        operands = []
        for operand in inputs:
            operand = np.asarray(operand)
            if operand.ndim == len(index):
                operand_index = tuple(0 if dim == 1 else i for i, dim in zip(index, operand.shape))
                operands.append(str(operand[operand_index]))
            elif operand.ndim == 0:
                operands.append(str(operand[()]))
        got, want = np.asarray(actual)[index], np.asarray(expected)[index]
        lines.append(f"  at {index}: inputs ({', '.join(operands)}) -> {got}, NumPy {want}")
    return f"{len(flat_bad)} of {np.size(expected)} elements differ:\n" + "\n".join(lines)


def assert_same(actual, expected, max_ulp=0, inputs=(), what="", signed_zeros=True):
    """``actual`` is NumPy's ``expected``: same dtype and shape; integers and booleans
    equal; floats with NaN where NumPy has NaN, the same infinities and signed zeros
    (unless ``signed_zeros`` is false), and other values equal (``max_ulp == 0``) or
    within ``max_ulp`` units in the last place."""
    expected = np.asarray(expected)
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}, not an array"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, NumPy {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, NumPy {expected.shape}"
    if expected.dtype.kind != "f":
        bad = actual != expected
    else:
        nan = np.isnan(expected)
        infinite_or_zero = np.isinf(expected) | (expected == 0)
        exactly = actual == expected
        if signed_zeros:
            exactly &= np.signbit(actual) == np.signbit(expected)
        bad = np.isnan(actual) != nan
        bad |= ~nan & infinite_or_zero & ~exactly
        if max_ulp == 0:
            bad |= ~nan & ~exactly
        else:
            bad |= ~nan & (ulp_distance(actual, expected) > max_ulp)
    assert not np.any(bad), f"{what}: " + mismatch_report(actual, expected, bad, inputs)


def assert_within(actual, expected, tolerance, what=""):
    """Floats within an elementwise absolute ``tolerance`` of NumPy's (accumulated results,
    whose rounding depends on the order of operations); NaN and infinities where NumPy has
    them."""
    expected = np.asarray(expected)
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}, not an array"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, NumPy {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, NumPy {expected.shape}"
    finite = np.isfinite(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bad = np.where(finite, ~(error <= tolerance), ~((actual == expected) | (
        np.isnan(actual) & np.isnan(expected))))
    assert not np.any(bad), f"{what}: " + mismatch_report(actual, expected, bad)
