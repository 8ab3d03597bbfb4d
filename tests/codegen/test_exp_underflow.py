"""exp where its result underflows: float32 stays on its fast path (``math_exp``).

A masked softmax (``np.where(causal, scores, -np.inf)``) sends -inf, and scores far below
their row's peak send large negative numbers, to exp; float32 exp computes their denormal
results and selects their 0 without leaving its fast path, and leaves only overflow and
NaN to the general code. Checked here against NumPy on every float32 of [-110, -80] and densely over
[-750, -700] for float64 (the denormal results, the underflow edge exactly, -0.0, -inf,
NaN), lane by lane in mixed vectors, through the predicate that sends a vector to the
general code, and end to end on a causal softmax.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from compiled_checks import F32, F64, assert_same, compiled, dtype_id, ulp_distance
from llvmlite import ir

import tracejit
from tracejit import nn
from tracejit.codegen import llvm, math_exp

PROGRAM_SIZE = 1 << 20
# Results against NumPy (codegen/mathlib.py's table), float32 against the correctly rounded.
STATED_ULP = {F32: 3, F64: 2}
EXACT_ULP_FLOAT32 = 1


def compiled_exp(values):
    """The compiled ``np.exp`` of ``values``, in pieces padded into the program's bucket."""
    values = np.asarray(values)
    program = compiled(("exp-underflow", values.dtype), lambda x: np.exp(x),
                       np.ones(PROGRAM_SIZE, values.dtype))
    low = PROGRAM_SIZE // 2 + 1
    outputs = []
    for start in range(0, values.size, PROGRAM_SIZE):
        chunk = values[start:start + PROGRAM_SIZE]
        padded = np.concatenate([chunk, np.zeros(max(0, low - chunk.size), values.dtype)])
        with np.errstate(all="ignore"):
            (result,) = program(padded)
        outputs.append(result[:chunk.size])
    return np.concatenate(outputs)


def every_float(dtype, low, high):
    """Every float of ``dtype`` in [low, high] (both negative)."""
    int_type = np.int32 if dtype == F32 else np.int64
    first = int(np.array(high, dtype).view(int_type))  # negative floats: larger bits, lower
    last = int(np.array(low, dtype).view(int_type))
    return np.arange(first, last + 1, dtype=np.int64).astype(int_type).view(dtype)


def neighbours(value, dtype, count=64):
    """``value`` and the ``count`` floats on each side of it."""
    value = dtype.type(value)
    up, down, found = value, value, [value]
    for _ in range(count):
        up, down = np.nextafter(up, dtype.type(np.inf)), np.nextafter(down, dtype.type(-np.inf))
        found += [up, down]
    return np.array(found, dtype)


def edges(dtype):
    """The thresholds of exp's ranges, each with its neighbours."""
    info = np.finfo(dtype)
    if dtype == F32:
        points = [math_exp.UNDERFLOW_F32, -103.97208404541016, -104.0, -87.33654022216797,
                  -math_exp.FAST_LIMIT_F32, -64.0]
    else:
        points = [-745.1332191019411, -745.1332191019412, -708.3964185322641, -709.0]
    specials = np.array([-0.0, 0.0, -np.inf, np.nan, -info.max, -1e30, -200.0, -1000.0,
                         -info.smallest_subnormal, -info.tiny], dtype)
    return np.concatenate([specials] + [neighbours(point, dtype) for point in points])


def sweep(dtype):
    if dtype == F32:
        return np.concatenate([every_float(F32, -110.0, -80.0), edges(F32)])
    dense = np.linspace(-750.0, -700.0, 3_000_001)
    return np.concatenate([dense, edges(F64)])


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_exp_across_the_underflow_edge(dtype):
    """NumPy's zeros exactly (+0.0), denormal and small normal results within the stated
    bound of NumPy, and float32 within 1 ulp of the correctly rounded result (zero exactly
    where that is zero)."""
    values = sweep(dtype)
    actual = compiled_exp(values)
    with np.errstate(all="ignore"):
        expected = np.exp(values)
    assert_same(actual, expected, STATED_ULP[dtype], (values,), f"exp {dtype} on [-110, -80]")
    zero = expected == 0
    assert not np.signbit(actual[zero]).any(), "exp's zeros are +0.0"
    if dtype == F32:
        with np.errstate(all="ignore"):
            exact = np.exp(values.astype(F64)).astype(F32)
        distance = ulp_distance(actual, exact)
        worst = int(np.argmax(distance))
        assert distance[worst] <= EXACT_ULP_FLOAT32, (
            f"exp float32: {distance[worst]:g} ulp from the correctly rounded result at "
            f"x = {values[worst]!r} ({actual[worst]!r}, exact {exact[worst]!r})")
        assert np.array_equal(actual == 0, exact == 0), "zero exactly where exp rounds to 0"


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_each_lane_gets_its_own_result(dtype):
    """Underflowing, denormal-result, overflowing and NaN arguments mixed into vectors of
    ordinary ones at every position (16-lane vectors and the scalar remainder) give bit for
    bit their results in arrays of their own kind."""
    rng = np.random.default_rng(7)
    ordinary = rng.uniform(-20.0, 20.0, 64).astype(dtype)
    underflow = F32.type(math_exp.UNDERFLOW_F32) if dtype == F32 else -745.2
    unusual = np.array([-np.inf, -200.0, -1e30, np.finfo(dtype).min, -0.0, np.nan, 90.0,
                        np.inf, -90.0, -100.0, underflow, np.nextafter(underflow, 0),
                        -800.0, -720.0], dtype)
    alone_ordinary, alone_unusual = compiled_exp(ordinary), compiled_exp(unusual)
    program = compiled(("exp-underflow-mixed", dtype), lambda x: np.exp(x), np.ones(48, dtype))
    for size in range(33, 65):
        layouts = [[position] for position in range(size)] if size in (33, 48, 64) else []
        layouts += [rng.choice(size, count, replace=False) for count in (1, 3, size // 2)]
        for positions in layouts:
            picks = rng.integers(0, unusual.size, len(positions))
            values, expected = ordinary[:size].copy(), alone_ordinary[:size].copy()
            values[positions], expected[positions] = unusual[picks], alone_unusual[picks]
            with np.errstate(all="ignore"):
                (actual,) = program(values)
            same = actual.view(f"u{dtype.itemsize}") == expected.view(f"u{dtype.itemsize}")
            same |= np.isnan(actual) & np.isnan(expected)
            assert same.all(), (f"exp {dtype} length {size}: {values[~same]!r} -> "
                                f"{actual[~same]!r}, alone {expected[~same]!r}")


def rare_lanes_function(predicate):
    """``predicate`` (math_exp's choice of the lanes for the general code) compiled to a
    native ``int rare(float)``."""
    module = ir.Module()
    function = ir.Function(module, ir.FunctionType(ir.IntType(32), [ir.FloatType()]), "rare")
    builder = ir.IRBuilder(function.append_basic_block())
    builder.ret(builder.zext(predicate(builder, function.args[0]), ir.IntType(32)))
    library = llvm.load(llvm.compile_module(str(module)).object_code, ["rare"])
    call = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_float)(library.addresses["rare"])
    return library, lambda value: bool(call(float(value)))


UNDERFLOWING = [-np.inf, -1e30, -3.4028234663852886e38, -200.0, -104.0, -103.97208404541016]


@pytest.mark.parametrize("name, predicate, fast, rare", [
    ("exp", math_exp.exp_rare_lanes,
     UNDERFLOWING + [math_exp.UNDERFLOW_F32, -100.0, -90.0, -86.0, 0.0, -0.0, 70.0],
     [np.nan, np.inf, 70.00001, 86.0, 90.0, 3e38]),
    ("expm1", math_exp.expm1_rare_lanes, UNDERFLOWING + [-90.0, -17.0, 0.0, 86.0],
     [np.nan, np.inf, 90.0, 3e38]),
])
def test_underflowing_lanes_stay_on_the_fast_path(name, predicate, fast, rare):
    """The float32 lanes sent to the general code: never those whose result is simply 0
    (exp) or -1 (expm1), nor exp's denormal results, so a masked softmax runs at the speed
    of an unmasked one."""
    library, needs_general_code = rare_lanes_function(predicate)
    assert library.addresses["rare"]
    assert [value for value in fast if needs_general_code(value)] == [], name
    assert [value for value in rare if not needs_general_code(value)] == [], name


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_causal_softmax(dtype):
    """nn.softmax over scores masked with -inf above the diagonal (and one row masked
    whole: NaN, as NumPy), compiled, against NumPy."""
    rng = np.random.default_rng(3)
    scores = (rng.standard_normal((2, 3, 40, 40)) * 30).astype(dtype)
    causal = np.tril(np.ones((40, 40), dtype=bool))
    causal[5] = False

    def masked_softmax(s, mask):
        return nn.softmax(np.where(mask, s, -np.inf))

    jitted = tracejit.jit(cache="memory")(masked_softmax)
    with np.errstate(all="ignore"):
        expected = masked_softmax(scores, causal)
        for _ in range(2):
            actual = jitted(scores, causal)
    assert jitted.stats()["compiles"] == 1
    assert_same(np.asarray(actual), expected, 4, (scores,), f"causal softmax {dtype}")


def test_a_masked_row_max_stays_vectorized():
    """max over np.where(mask, s, -inf) (a causal softmax's peak): the reducer freezes the
    value it combines, or LLVM folds the select into a conditional reduction that it
    leaves scalar (25x slower); the optimized IR keeps a vector maximum (llvm.maximum, or
    the compare-and-select max with nnan that LLVM turns into llvm.maxnum)."""
    import re

    def masked_peak(s, mask):
        return np.max(np.where(mask, s, -np.inf), axis=-1)

    scores = np.random.default_rng(4).standard_normal((64, 64)).astype(F32)
    mask = np.tril(np.ones((64, 64), dtype=bool))
    jitted = tracejit.jit(cache="memory")(masked_peak)
    ir_text = jitted.lower(scores, mask).llvm_ir
    assert re.search(r"@llvm\.(maximum|maxnum)\.v\d+f32", ir_text), (
        "the masked row max is scalar")
    np.testing.assert_array_equal(jitted(scores, mask), masked_peak(scores, mask))
