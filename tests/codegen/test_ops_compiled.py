"""Compiled primitives against NumPy, generated from the op table.

Every primitive of ``tracer.PRIMITIVES`` is traced (``bind(prim, ...)`` on tracer proxies,
or the NumPy function that the NumPy layer maps to it), compiled with ``codegen.compile``
and run; the result must be NumPy's (``prim.impl`` or the NumPy function on the same
inputs): same dtype, same shape, and

* exactly the same values (signed zeros included) for integers, booleans and the exactly
  rounded float ops (arithmetic, sqrt, comparisons, where, casts, max/min/abs/neg/floor/
  ceil/sign, floor_divide/mod, max/min/arg reductions, views);
* within the ulp bounds of ``codegen/mathlib.py`` for exp, expm1, log, log1p, tanh, sin,
  cos, erf and power (``MATHLIB_ULP``; erf against the primitive's NumPy implementation);
  within 1 ulp for true_divide (``arcp``);
* within the error bounds of ``reduction_tolerance`` and ``matmul_tolerance`` for float
  sums, products and matmul, whose rounding depends on the order of operations.

Each program is traced with ``dynamic=True`` at one size and run at the low and high ends
of its pow2 bucket and sizes in between, next to static shapes (0-d, size 0, size 1) and
2-D broadcasting; inputs carry NaN, infinities, signed zeros, denormals and the integer
extremes (wrapping). ``test_every_bucket_edge`` walks every bucket from [2, 2] to
[1025, 2048]. Inputs of any layout (transposed, Fortran order, broadcast views, negative
strides) must give the results of contiguous copies.
"""

from __future__ import annotations

import platform
import warnings

import numpy as np
import pytest
from compiled_checks import (
    BOOL,
    DTYPES,
    F32,
    F64,
    I32,
    I64,
    assert_same,
    assert_within,
    bucket_sizes,
    compiled,
    dtype_id,
    operand_values,
    random_values,
    shape_guards_hold,
)

from tracejit import codegen, tracer
from tracejit.tracer import PRIMITIVES, bind
from tracejit.tracer.errors import UnsupportedError

X86 = platform.machine().lower() in ("x86_64", "amd64")

# --- tolerances ------------------------------------------------------------------------
# codegen/mathlib.py's bounds against NumPy (the larger of float32 and float64).
MATHLIB_ULP = {"exp": 2, "exp2": 3, "expm1": 3, "log": 5, "log1p": 3, "log2": 4, "log10": 5,
               "tanh": 3, "sin": 2, "cos": 2, "tan": 6, "erf": 1, "power": 2}
ULP_BOUNDS = {**MATHLIB_ULP, "true_divide": 1}


def numpy_result(function, *args, **params):
    """NumPy's result as arrays (0-d results too), its warnings silenced."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = function(*args, **params)
    return tuple(map(np.asarray, result)) if isinstance(result, tuple) else np.asarray(result)


# --- pointwise primitives --------------------------------------------------------------
POINTWISE = sorted(
    name for name, prim in PRIMITIVES.items() if prim.kind == "pointwise" and name != "cast"
)


def arity(name):
    return 3 if name == "where" else getattr(PRIMITIVES[name].impl, "nin", 1)


# Shape groups of one pointwise program: name -> operand shapes (for 1, 2, 3 operands).
# Dynamic sizes are bucketed: 7 -> [5, 8], 1031 -> [1025, 2048], 3 and 4 -> [3, 4]; sizes
# 0 and 1 stay static. n1031 holds every pair of special values (see operand_values).
SHAPE_GROUPS = {
    "0d": [(), (), ()],
    "empty": [(0,), (0,), (0,)],
    "size1": [(1,), (1,), (1,)],
    "n1031": [(1031,), (1031,), (1031,)],
    "bcast(3,1)x(4,)": [(3, 1), (4,), (1, 4)],
    "n7x0d": [(7,), (), ()],
}
# Integer power unrolls exponentiation by squaring (~0.5 s of LLVM time per kernel):
# fewer groups keep the suite fast.
SLOW_TO_COMPILE = {("power", I32): ["0d", "n1031", "bcast(3,1)x(4,)"],
                   ("power", I64): ["0d", "n1031", "bcast(3,1)x(4,)"]}


def group_shapes(group, count):
    shapes = SHAPE_GROUPS[group][:count]
    return [(3, 4)] if group.startswith("bcast") and count == 1 else shapes


def resize(shape, run):
    """``shape`` with each dynamic dim (> 1) replaced by a size of its bucket for run ``run``."""
    return tuple(dim if dim <= 1 else bucket_sizes(dim)[run % len(bucket_sizes(dim))]
                 for dim in shape)


RUNS = 4  # enough for every size bucket_sizes gives


def pointwise_operands(name, dtype, shapes, seed):
    operands = [operand_values(shape, dtype, seed, operand=i) for i, shape in enumerate(shapes)]
    if name == "where":
        operands[0] = operand_values(shapes[0], BOOL, seed, operand=2)
    if name == "power" and dtype.kind == "i":
        # NumPy raises for negative integer exponents: test_integer_power_negative_exponent_*
        operands[1] = np.where(operands[1] < 0, ~operands[1], operands[1])
    if name == "reciprocal" and dtype.kind == "i":
        # NumPy computes 1.0 / 0 -> inf -> int, an undefined conversion (INT_MIN on x86).
        operands[0] = np.where(operands[0] == 0, 1, operands[0]).astype(dtype)
    return operands


def pointwise_cases():
    """(name, dtype) pairs NumPy supports, split by whether codegen supports the result."""
    supported, refused = [], []
    for name in POINTWISE:
        for dtype in DTYPES:
            operands = [np.zeros(2, dtype)] * arity(name)
            if name == "where":
                operands[0] = np.zeros(2, bool)
            try:
                result = numpy_result(PRIMITIVES[name].impl, *operands)
            except TypeError:
                continue  # NumPy has no loop for it (e.g. subtract on bool)
            case = pytest.param(name, dtype, id=f"{name}-{dtype_id(dtype)}")
            (supported if result.dtype in DTYPES else refused).append(case)
    return supported, refused


SUPPORTED_POINTWISE, REFUSED_POINTWISE = pointwise_cases()

KNOWN_BUGS = {}


SIGN_OF_ZERO_BUGS = set()  # (name, dtype) compared with +0 == -0; none at present


def with_known_bugs(cases):
    marked = []
    for case in cases:
        name, dtype = case.values
        reason = KNOWN_BUGS.get((name, dtype))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        marked.append(pytest.param(name, dtype, id=case.id, marks=marks))
    return marked


def pointwise_program(name, dtype):
    count = arity(name)
    prim = PRIMITIVES[name]
    groups = SLOW_TO_COMPILE.get((name, dtype), list(SHAPE_GROUPS))

    def program_function(*operands):
        return tuple(bind(prim, *operands[i * count:(i + 1) * count]) for i in range(len(groups)))

    example = [operand for group in groups
               for operand in pointwise_operands(name, dtype, group_shapes(group, count), 0)]
    return compiled(("pointwise", name, dtype), program_function, *example), groups


def check_program_runs(program, groups, make_operands, reference, tolerance, runs=RUNS):
    """Run ``program`` ``runs`` times at sizes across its buckets; collect every group whose
    result differs from ``reference`` (failure texts name the group and the shapes)."""
    failures = []
    for run in range(runs):
        operand_lists = [make_operands(group, run) for group in groups]
        outputs = program(*[operand for operands in operand_lists for operand in operands])
        for group, operands, output in zip(groups, operand_lists, outputs):
            expected = reference(*operands)
            shapes = " x ".join(str(np.shape(operand)) for operand in operands)
            what = f"group {group}, run {run}, operand shapes {shapes}"
            try:
                tolerance(output, expected, operands, what)
            except AssertionError as error:
                failures.append(str(error))
    assert_no_failures(failures)


def assert_no_failures(failures, shown=6):
    more = f"\n... and {len(failures) - shown} more" if len(failures) > shown else ""
    assert not failures, "\n".join(failures[:shown]) + more


@pytest.mark.parametrize("name, dtype", with_known_bugs(SUPPORTED_POINTWISE))
def test_pointwise_primitive(name, dtype):
    program, groups = pointwise_program(name, dtype)
    count = arity(name)
    prim = PRIMITIVES[name]

    def make_operands(group, run):
        shapes = [resize(shape, run) for shape in group_shapes(group, count)]
        return pointwise_operands(name, dtype, shapes, seed=run + 1)

    signed_zeros = (name, dtype) not in SIGN_OF_ZERO_BUGS

    def tolerance(actual, expected, operands, what):
        assert_same(actual, expected, ULP_BOUNDS.get(name, 0), operands, what, signed_zeros)

    check_program_runs(program, groups, make_operands,
                       lambda *operands: numpy_result(prim.impl, *operands), tolerance)


SIGNED_ZERO_CASES = [
    pytest.param("maximum", [0.0, -0.0], [-0.0, 0.0], F64,
        id="maximum-f64"),
    pytest.param("minimum", [0.0, -0.0], [-0.0, 0.0], F32,
        id="minimum-f32"),
    pytest.param("expm1", [-0.0, 0.0], None, F32, id="expm1-f32"),
    pytest.param("expm1", [-0.0, 0.0], None, F64, id="expm1-f64"),
]


@pytest.mark.parametrize("name, x, y, dtype", SIGNED_ZERO_CASES)
def test_signed_zeros(name, x, y, dtype):
    prim = PRIMITIVES[name]
    operands = [np.array(x, dtype)] + ([np.array(y, dtype)] if y is not None else [])
    program = compiled(("signed-zero", name, dtype), lambda *xs: bind(prim, *xs), *operands)
    assert_same(program(*operands)[0], numpy_result(prim.impl, *operands), 0, operands, name)


@pytest.mark.parametrize("name, dtype", REFUSED_POINTWISE)
def test_unsupported_result_dtype_is_refused(name, dtype):
    """NumPy gives float16 or int8 here (exp of bool, square of bool): codegen supports
    bool, int32, int64, float32 and float64 and must refuse with UnsupportedError (the
    runtime then runs the function eagerly), not crash or compute something else."""
    operands = [np.ones(3, dtype)] * arity(name)
    if name == "where":
        operands[0] = np.ones(3, bool)
    graph = tracer.trace(lambda *xs: bind(PRIMITIVES[name], *xs), *operands).graph
    with pytest.raises(UnsupportedError, match="supports bool, int32"):
        codegen.compile(graph)


def test_every_primitive_has_a_compiled_test():
    """A primitive added to the op table needs a row in one of this file's tables."""
    covered = (set(POINTWISE) | {"cast"} | set(REDUCTIONS) | {"matmul", "gather", "scatter_add"}
               | {"full", "iota"}  # test_creation
               | {"reshape", "transpose", "broadcast_to", "slice", "pad", "flip",
                  "concatenate", "sliding_window"}  # VIEW_CASES
               | {"loop"}  # tests/tracer/test_loops.py (compiled through tracejit.jit)
               | {"conv2d", "conv2d_weight_grad"}  # tests/tracer/test_conv_ops.py
               | {"cumsum", "cumprod"})  # tests/codegen/test_scan_kernels.py
    assert covered == set(PRIMITIVES)


# --- semantics NumPy defines at the edges, spelled out ---------------------------------
def run_binary(name, x, y):
    """``prim(x, y)`` compiled (1-D operands of equal length, dynamic) and NumPy's result."""
    x, y = np.asarray(x), np.asarray(y)
    prim = PRIMITIVES[name]
    program = compiled(("binary", name, x.dtype.str, y.dtype.str, x.shape),
                       lambda a, b: bind(prim, a, b), x, y)
    return program(x, y)[0], numpy_result(prim.impl, x, y)


EDGE_CASES = [
    ("add", [2**31 - 1, -(2**31)], [1, -1], I32, "int32 max + 1 wraps to int32 min"),
    ("add", [2**63 - 1], [1], I64, "int64 max + 1 wraps"),
    ("multiply", [2**30, -(2**31)], [4, -1], I32, "products wrap"),
    ("subtract", [-(2**31)], [1], I32, "int32 min - 1 wraps"),
    ("floor_divide", [7, -7, 7, -7, 0, 5, -(2**31)], [2, 2, -2, -2, 3, 0, -1], I32,
     "Python's floor division; x // 0 == 0; INT_MIN // -1 wraps"),
    ("mod", [7, -7, 7, -7, 0, 5, -(2**31)], [2, 2, -2, -2, 3, 0, -1], I32,
     "Python's signs: the result takes the divisor's sign; x % 0 == 0"),
    ("floor_divide", [7, -7, 7, -7, 1, -1], [2, 2, -2, -2, 0, 0], I64, "int64 floor division"),
    ("mod", [7, -7, 7, -7, 1, -1], [2, 2, -2, -2, 0, 0], I64, "int64 modulo"),
    ("floor_divide", [7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1.0, -1.0, np.inf, 5.0, np.nan],
     [2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 0.0, 2.0, np.inf, 1.0], F64,
     "float floor division: signs, signed zeros, division by zero, infinities"),
    ("mod", [7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1.0, -1.0, np.inf, 5.0, -5.0],
     [2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 0.0, 0.0, 2.0, np.inf, np.inf], F64,
     "float modulo takes the divisor's sign; x % 0 is NaN; x % inf"),
    ("mod", [7.5, -7.5, 7.5, -7.5, 0.0, -0.0], [2.0, 2.0, -2.0, -2.0, 3.0, -3.0], F32,
     "float32 modulo signs"),
    ("maximum", [np.nan, 1.0, np.nan, np.inf, -np.inf], [1.0, np.nan, np.nan, np.nan, 1.0],
     F64, "maximum propagates NaN from either side"),
    ("minimum", [np.nan, 1.0, np.nan, -np.inf, np.inf], [1.0, np.nan, np.nan, np.nan, 1.0],
     F32, "minimum propagates NaN from either side"),
    ("power", [2, -2, 3, 0, 7], [31, 31, 40, 0, 1], I32, "integer powers wrap; 0 ** 0 == 1"),
    ("not_equal", [np.nan, 1.0], [np.nan, 1.0], F64, "NaN != NaN"),
    ("equal", [0.0, np.nan], [-0.0, np.nan], F32, "0.0 == -0.0, NaN != NaN"),
]


@pytest.mark.parametrize(
    "name, x, y, dtype",
    [pytest.param(name, x, y, dtype, id=f"{name}-{dtype_id(dtype)}-{note}")
     for name, x, y, dtype, note in EDGE_CASES],
)
def test_edge_semantics(name, x, y, dtype):
    actual, expected = run_binary(name, np.array(x, dtype), np.array(y, dtype))
    assert_same(actual, expected, ULP_BOUNDS.get(name, 0), (x, y), name)


def test_integer_power_negative_exponent_side_exits():
    """NumPy raises ValueError for integers to negative integer powers; the compiled code
    reports a kernel error (``SideExit`` with a negative code), so the call runs eagerly."""
    program = compiled(("power-negative",), lambda a, b: a ** b,
                       np.array([2, 3], np.int64), np.array([2, 1], np.int64))
    with pytest.raises(codegen.SideExit) as raised:
        program(np.array([2, 3], np.int64), np.array([2, -1], np.int64))
    assert raised.value.code < 0 and raised.value.guard_index is None
    with pytest.raises(ValueError):
        np.power(np.array([2, 3], np.int64), np.array([2, -1], np.int64))


# --- mixed dtypes and Python scalars: NumPy 2 promotion --------------------------------
MIXED = [
    (F32, F64), (I32, F32), (I32, F64), (I64, F32), (I32, I64), (BOOL, I32), (BOOL, F32),
]


@pytest.mark.parametrize("name", ["add", "multiply", "true_divide", "maximum", "less", "mod"])
@pytest.mark.parametrize("left, right", MIXED, ids=lambda d: dtype_id(d))
def test_mixed_dtypes_promote_like_numpy(name, left, right):
    prim = PRIMITIVES[name]
    try:
        numpy_result(prim.impl, np.ones(2, left), np.ones(2, right))
    except TypeError:
        pytest.skip(f"NumPy has no {name} loop for {left}, {right}")
    x = operand_values((9,), left, 3, operand=0)
    y = operand_values((9,), right, 3, operand=1)
    program = compiled(("mixed", name, left, right), lambda a, b: bind(prim, a, b), x, y)
    for size in bucket_sizes(9):
        x = operand_values((size,), left, size, operand=0)
        y = operand_values((size,), right, size, operand=1)
        assert_same(program(x, y)[0], numpy_result(prim.impl, x, y), ULP_BOUNDS.get(name, 0),
                    (x, y), f"{name}({left}, {right}) at size {size}")


@pytest.mark.parametrize("dtype", [F32, F64, I32, I64], ids=dtype_id)
def test_python_scalars_are_weak(dtype):
    """``x * 2``, ``x + 0.5``, ``x > 3`` with Python scalars keep NumPy 2's result dtypes."""
    def function(x):
        return x * 2, x + 0.5, x > 3, 1 - x, x / 4

    x = operand_values((7,), dtype, 5)
    program = compiled(("weak", dtype), function, x)
    for size in bucket_sizes(7):
        x = operand_values((size,), dtype, size)
        expected = numpy_result(function, x)
        for index, (actual, want) in enumerate(zip(program(x), expected)):
            assert_same(actual, want, 1, (x,), f"output {index} at size {size}")


# --- casts -----------------------------------------------------------------------------
def cast_operand(shape, source, target, seed):
    x = operand_values(shape, source, seed)
    if source.kind == "f" and target.kind == "i" and not X86:
        # NaN and out-of-range float -> int are undefined in C; only x86 defines them.
        x = np.where(np.abs(x) < 1e9, x, 3.75).astype(source)
    return x


CAST_CASES = [pytest.param(source, target, id=f"{dtype_id(source)}-{dtype_id(target)}")
              for source in DTYPES for target in DTYPES]


@pytest.mark.parametrize("source, target", CAST_CASES)
def test_cast(source, target):
    """``astype``: float -> int truncates toward zero (NaN and out-of-range give the
    smallest integer, as NumPy on x86), anything -> bool is ``!= 0`` (NaN is True),
    f64 -> f32 rounds (overflow to infinity), int -> int wraps."""
    groups = ["0d", "empty", "size1", "n1031", "bcast(3,1)x(4,)"]
    if source == target:
        groups.remove("0d")  # a known bug: test_identity_cast_of_0d
    shapes = {group: group_shapes(group, 1)[0] for group in groups}

    def function(*xs):
        return tuple(x.astype(target) for x in xs)

    example = [cast_operand(shapes[group], source, target, 0) for group in groups]
    program = compiled(("cast", source, target), function, *example)

    def make_operands(group, run):
        return [cast_operand(resize(shapes[group], run), source, target, run + 1)]

    def tolerance(actual, expected, operands, what):
        assert_same(actual, expected, 0, operands, what)

    check_program_runs(program, groups, make_operands,
                       lambda x: numpy_result(lambda v: v.astype(target), x), tolerance)


@pytest.mark.parametrize("dtype", [F64, I32], ids=dtype_id)
def test_identity_cast_of_0d(dtype):
    x = np.array(3, dtype)
    program = compiled(("identity-cast", dtype), lambda v: v.astype(dtype), x)
    assert_same(program(x)[0], x.astype(dtype), 0, (), "0-d astype to its own dtype")


# --- creation primitives ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_creation(dtype):
    """full and iota (zeros_like, ones_like, full_like, arange) at symbolic sizes."""
    def function(x):
        n = x.shape[0]
        counting = np.arange(n, dtype=dtype) if dtype != BOOL else np.arange(n) > 3
        return (np.zeros_like(x), np.ones_like(x), np.full_like(x, 3), np.arange(n), counting,
                np.zeros_like(np.stack([x, x])), np.arange(2 * n) * 2)

    x = operand_values((13,), dtype, 0)
    program = compiled(("creation", dtype), function, x)
    for size in bucket_sizes(13):
        x = operand_values((size,), dtype, size)
        assert shape_guards_hold(program, [x])  # the sizes stay symbolic
        for index, (actual, want) in enumerate(zip(program(x), function(x))):
            assert_same(actual, want, 0, (), f"output {index} at size {size}")


# --- reductions ------------------------------------------------------------------------
REDUCTIONS = ["sum", "prod", "max", "min", "any", "all", "argmax", "argmin"]
AXES = [None, 0, 1, 2, (0, 1), (1, 2), (0, 2)]
KEEPDIMS_AXES = [None, (0, 2)]


def reduction_variants(name):
    """(axis, keepdims) pairs tested on a 3-D input: argmax/argmin take one axis or None."""
    axes = [axis for axis in AXES if not (name.startswith("arg") and isinstance(axis, tuple))]
    keepdims = [axis for axis in KEEPDIMS_AXES if axis in axes] + (
        [-1] if name.startswith("arg") else [])
    return [(axis, False) for axis in axes] + [(axis, True) for axis in keepdims]


def reduction_data(name, shape, dtype, seed):
    """Inputs whose exact result does not depend on the order of operations more than the
    stated tolerance allows: no values that overflow when added (sum), factors near 1
    (prod), many ties (max/min/argmax/argmin, where the first one must win)."""
    rng = np.random.default_rng([seed, *shape])
    # Shuffled, so the first NaN or the first of several maxima can be anywhere.
    values = rng.permutation(operand_values(shape, dtype, seed).reshape(-1)).reshape(shape)
    if dtype.kind != "f":
        if name == "prod":
            values = np.where(np.abs(values) > 3, 1, values).astype(dtype)
        return values
    if name in ("sum", "prod"):
        if name == "prod":
            magnitude = rng.uniform(0.9, 1.1, shape) * rng.choice([-1, 1], shape)
        else:
            magnitude = rng.uniform(-5, 5, shape)
        keep = np.isnan(values) | np.isinf(values) | (values == 0)
        values = np.where(keep, values, magnitude).astype(dtype)
    elif name != "any" and name != "all":
        values = np.where(np.isfinite(values) & (np.abs(values) < 10),
                          np.round(values), values).astype(dtype)
    return values


def reduction_tolerance(name, x, axis, expected):
    """Order-of-summation error bounds: a float sum of n terms is within
    2 * n * eps * sum(|x|) of any other summation order; a product within 2 * n * eps
    relative. Everything else is exact."""
    reduced = np.asarray(x).size // max(np.asarray(expected).size, 1)
    eps = np.finfo(x.dtype).eps
    with np.errstate(all="ignore"):
        if name == "sum":
            return 2 * reduced * eps * np.sum(np.abs(x.astype(np.float64)), axis=axis)
        return 2 * reduced * eps * np.abs(expected.astype(np.float64))


def reduce_numpy(name, x, axis, keepdims):
    return numpy_result(getattr(np, name), x, axis=axis, keepdims=keepdims)


def check_reduction(name, dtype, actual, x, axis, keepdims, what):
    expected = reduce_numpy(name, x, axis, keepdims)
    if dtype.kind == "f" and name in ("sum", "prod"):
        tolerance = reduction_tolerance(name, x, axis, expected)
        if keepdims:
            tolerance = np.reshape(tolerance, expected.shape)
        assert_within(actual, expected, tolerance, what)
    else:
        # NumPy's own max/min of +0.0 and -0.0 depends on its SIMD order: zeros compare equal.
        assert_same(actual, expected, 0, (), what, signed_zeros=name not in ("max", "min"))


REDUCTION_CASES = [pytest.param(name, dtype, id=f"{name}-{dtype_id(dtype)}")
                   for name in REDUCTIONS for dtype in DTYPES]
# Axis handling does not depend on the dtype (test_reduction_special_values covers every
# reduction x dtype): two dtypes per reduction keep the 3-D sweep fast.
AXIS_DTYPES = {"sum": (F32, I32), "prod": (F64, I64), "max": (F32, I64), "min": (F64, I32),
               "any": (F32, BOOL), "all": (I64, BOOL), "argmax": (F64, I32),
               "argmin": (F32, BOOL)}


@pytest.mark.parametrize("name, dtype", [
    pytest.param(name, dtype, id=f"{name}-{dtype_id(dtype)}")
    for name in REDUCTIONS for dtype in AXIS_DTYPES[name]])
def test_reduction_axes(name, dtype):
    """Every axis, pair of axes (leading, trailing, outer two) and keepdims of a 3-D input
    (dims in buckets [3, 4], [5, 8], [5, 8])."""
    variants = reduction_variants(name)
    function = getattr(np, name)

    def program_function(x):
        return tuple(function(x, axis=axis, keepdims=keepdims) for axis, keepdims in variants)

    shape = (3, 5, 7)
    program = compiled(("reduce3d", name, dtype), program_function,
                       reduction_data(name, shape, dtype, 0))
    failures = []
    for run in range(RUNS):
        x = reduction_data(name, resize(shape, run), dtype, run + 1)
        for (axis, keepdims), actual in zip(variants, program(x)):
            what = f"{name}(axis={axis}, keepdims={keepdims}) of shape {x.shape}"
            try:
                check_reduction(name, dtype, actual, x, axis, keepdims, what)
            except AssertionError as error:
                failures.append(str(error))
    assert_no_failures(failures)


REDUCTION_SHAPES = {
    # 1-D inputs with the special values (NaN, infinities, ties) over whole buckets.
    "0d": ((), None),
    "size1": ((1,), None),
    "n7": ((7,), None),
    "n13": ((13,), 0),
    "n1031": ((1031,), -1),
    # long rows and long columns: vectorized row loops and their remainders
    "rows(5,1031)": ((5, 1031), 1),
    "columns(1031,5)": ((1031, 5), 0),
}


@pytest.mark.parametrize("name, dtype", REDUCTION_CASES)
def test_reduction_special_values(name, dtype):
    """NaN propagates through max/min (and sum/prod); argmax/argmin return the first
    maximum, and the first NaN when there is one; 0-d and size-1 inputs reduce too."""
    groups = list(REDUCTION_SHAPES)
    function = getattr(np, name)

    def program_function(*xs):
        return tuple(function(x, axis=REDUCTION_SHAPES[group][1])
                     for group, x in zip(groups, xs))

    example = [reduction_data(name, REDUCTION_SHAPES[group][0], dtype, 0) for group in groups]
    program = compiled(("reduce-special", name, dtype), program_function, *example)
    failures = []
    for run in range(RUNS):
        xs = [reduction_data(name, resize(REDUCTION_SHAPES[group][0], run), dtype, run + 1)
              for group in groups]
        for group, x, actual in zip(groups, xs, program(*xs)):
            axis = REDUCTION_SHAPES[group][1]
            try:
                check_reduction(name, dtype, actual, x, axis, False,
                                f"{name} of {group} {x.shape} (axis={axis})")
            except AssertionError as error:
                failures.append(str(error))
    assert_no_failures(failures)


@pytest.mark.parametrize("name", ["sum", "prod", "any", "all"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reduction_of_empty(name, dtype):
    """Reductions with an identity give it for empty inputs (sum 0, prod 1, any False,
    all True), also along an empty axis of a 2-D input."""
    function = getattr(np, name)

    def program_function(x, y):
        return function(x), function(y, axis=1), function(y, axis=0)

    x, y = np.zeros(0, dtype), np.zeros((3, 0), dtype)
    program = compiled(("reduce-empty", name, dtype), program_function, x, y)
    for index, (actual, want) in enumerate(zip(program(x, y), program_function(x, y))):
        assert_same(actual, np.asarray(want), 0, (), f"{name} output {index}")


def test_argmax_ties_and_nan_pick_the_first():
    def function(x):
        return np.argmax(x), np.argmin(x), np.argmax(x, axis=1), np.argmin(x, axis=0)

    rows = np.array([[1.0, 3.0, 3.0, 0.0, 0.0],
                     [np.nan, 2.0, np.nan, -1.0, 5.0],
                     [2.0, 2.0, 2.0, 2.0, 2.0],
                     [-np.inf, np.inf, np.inf, -np.inf, 0.0]])
    program = compiled(("argmax-ties",), function, rows)
    for actual, expected in zip(program(rows), function(rows)):
        assert_same(actual, np.asarray(expected), 0, (), "argmax/argmin ties")


# --- views -----------------------------------------------------------------------------
def touch(x):
    """A computed value of the same dtype (views of computed values, not of inputs)."""
    return np.logical_not(x) if x.dtype == bool else x * 2


VIEW_CASES = {
    # name: (function, example input shapes)
    "reshape(-1)": (lambda x: np.reshape(x, (-1,)), [(3, 5)]),
    "reshape computed (15,)->(3,5)": (lambda x: touch(x).reshape(3, 5), [(15,)]),
    "reshape computed (6,4)->(4,3,2)": (lambda x: touch(x).reshape(4, -1, 2), [(6, 4)]),
    "reshape computed (4,6)->(24,)": (lambda x: touch(x).reshape(-1)[::-1], [(4, 6)]),
    "reshape add unit dims": (lambda x: touch(x).reshape(1, x.shape[0], 1), [(7,)]),
    "transpose 2-D": (lambda x: x.T, [(3, 5)]),
    "transpose computed 3-D": (lambda x: np.transpose(touch(x), (2, 0, 1)), [(3, 5, 7)]),
    "swapaxes then reshape": (lambda x: np.swapaxes(touch(x), 0, 1).reshape(-1), [(3, 5)]),
    "slice 1:-1:2": (lambda x: x[1:-1:2], [(13,)]),
    "slice ::-1": (lambda x: x[::-1], [(13,)]),
    "slice ::-3": (lambda x: touch(x)[::-3], [(13,)]),
    "slice 5:1:-2": (lambda x: x[5:1:-2], [(13,)]),
    "slice 2-D ::-1, 1::2": (lambda x: touch(x)[::-1, 1::2], [(5, 7)]),
    "slice then transpose": (lambda x: x[1:, ::-2].T, [(5, 7)]),
    "flip": (lambda x: np.flip(touch(x), 1), [(3, 5)]),
    "sliding_window_view": (lambda x: np.lib.stride_tricks.sliding_window_view(
        touch(x), (2, 3), axis=(0, 1)) * 2.0, [(5, 7)]),
    "sliding_window_view 1-D then sum": (lambda x: np.sum(
        np.lib.stride_tricks.sliding_window_view(x, 3), axis=-1), [(13,)]),
    "pad": (lambda x: np.pad(x, ((1, 2), (0, 3))), [(3, 5)]),
    "pad computed 1-D": (lambda x: np.pad(touch(x), (2, 1)), [(7,)]),
    "concatenate axis 0": (lambda x, y: np.concatenate([x, touch(y)], 0), [(3, 5), (2, 5)]),
    "concatenate axis 1": (lambda x, y: np.concatenate([x, y, x], axis=1), [(3, 5), (3, 2)]),
    "stack": (lambda x, y: np.stack([x, touch(y)], axis=1), [(7,), (7,)]),
    "broadcast_to": (lambda x: np.broadcast_to(x, (4, 3, 5)), [(3, 1)]),
    "broadcast_to computed": (lambda x: np.broadcast_to(touch(x), (2, 7)), [(7,)]),
    "expand_dims/squeeze": (lambda x: np.squeeze(np.expand_dims(touch(x), 0), 0), [(3, 5)]),
}


@pytest.mark.parametrize("dtype", [F64, I32, BOOL], ids=dtype_id)  # 8-, 4- and 1-byte elements
@pytest.mark.parametrize("case", list(VIEW_CASES))
def test_view(case, dtype):
    function, shapes = VIEW_CASES[case]
    example = [operand_values(shape, dtype, 0, operand=i) for i, shape in enumerate(shapes)]
    program = compiled(("view", case, dtype), function, *example)
    ran = 0
    for run in range(RUNS):
        inputs = [operand_values(resize(shape, run), dtype, run + 1, operand=i)
                  for i, shape in enumerate(shapes)]
        if not shape_guards_hold(program, inputs):
            continue  # e.g. reshape(3, 5) assumed the traced size 15: another variant's job
        (actual,) = program(*inputs)
        expected = numpy_result(function, *inputs)
        assert_same(actual, expected, 0, (), f"{case} on {[x.shape for x in inputs]}")
        ran += 1
    assert ran >= 1


GATHER_INDICES = np.array([0, -1, 2, -3, 1, 1, -2])


@pytest.mark.parametrize("index_dtype", [I32, I64], ids=dtype_id)
@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=dtype_id)
def test_gather_with_negative_indices(dtype, index_dtype):
    def function(x, indices):
        return (np.take(x, indices, axis=0), np.take(touch(x), indices, axis=1), x[indices],
                x[1, indices], np.take(x.reshape(-1), indices))

    x = operand_values((5, 6), dtype, 0)
    indices = GATHER_INDICES.astype(index_dtype)
    program = compiled(("gather", dtype, index_dtype), function, x, indices)
    for run in range(RUNS):
        x = operand_values(resize((5, 6), run), dtype, run + 1)
        indices = np.resize(GATHER_INDICES, resize((7,), run)).astype(index_dtype)
        expected = numpy_result(function, x, indices)
        for index, (actual, want) in enumerate(zip(program(x, indices), expected)):
            assert_same(actual, want, 0, (), f"gather output {index} on {x.shape}")


def test_gather_out_of_range_side_exits():
    """An index NumPy rejects (IndexError) makes the kernel report an error: SideExit with
    a negative code, and nothing returned."""
    x, indices = np.arange(6.0), np.array([0, 5, -6])
    program = compiled(("gather-range",), lambda x, i: np.take(x, i), x, indices)
    assert_same(program(x, indices)[0], np.take(x, indices), 0, (), "in range")
    for bad in ([0, 6, 1], [-7, 0, 1]):
        with pytest.raises(IndexError):
            np.take(x, np.array(bad))
        with pytest.raises(codegen.SideExit) as raised:
            program(x, np.array(bad))
        assert raised.value.code < 0


@pytest.mark.parametrize("dtype", [F64, I32], ids=dtype_id)
def test_scatter_add(dtype):
    """scatter_add (gather's transpose): repeated and negative indices accumulate."""
    prim = PRIMITIVES["scatter_add"]

    def function(updates, indices):
        return bind(prim, updates, indices, axis=1, size=6)

    indices = np.array([0, -1, 2, 2, 5, 0, -6])
    updates = operand_values((3, 7), dtype, 0, with_specials=False)
    program = compiled(("scatter", dtype), function, updates, indices)
    for run in range(RUNS):
        updates = operand_values(resize((3, 7), run), dtype, run + 1, with_specials=False)
        index_run = np.resize(indices, updates.shape[1])
        expected = numpy_result(prim.impl, updates, index_run, axis=1, size=6)
        assert_same(program(updates, index_run)[0], expected, 0, (), f"scatter on {updates.shape}")


# --- matmul ----------------------------------------------------------------------------
MATMUL_SHAPES = {
    "1-D.1-D": ((7,), (7,)),
    "1-D.2-D": ((7,), (7, 5)),
    "2-D.1-D": ((5, 7), (7,)),
    "2-D.2-D": ((5, 7), (7, 3)),
    "2-D.2-D large": ((33, 65), (65, 17)),
    "batched broadcast": ((2, 1, 5, 7), (3, 7, 4)),
    "batched x 2-D": ((3, 5, 7), (7, 6)),
}


def matmul_tolerance(a, b, expected):
    """A dot product of k terms: within 2 * k * eps * (|a| @ |b|) of any other order."""
    k = a.shape[-1]
    eps = np.finfo(expected.dtype).eps
    return 2 * k * eps * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", list(MATMUL_SHAPES))
def test_matmul(case, dtype):
    shapes = MATMUL_SHAPES[case]

    def data(shape, seed, operand):
        rng = np.random.default_rng([seed, operand])
        return random_values(shape, dtype, rng)

    program = compiled(("matmul", case, dtype), np.matmul, *[data(s, 0, i)
                                                              for i, s in enumerate(shapes)])
    for run in range(RUNS):
        # Dims of equal traced size share a symbol: resize them alike.
        a, b = [data(resize(shape, run), run + 1, i) for i, shape in enumerate(shapes)]
        expected = numpy_result(np.matmul, a, b)
        what = f"{a.shape} @ {b.shape}"
        if dtype.kind == "f":
            assert_within(program(a, b)[0], expected, matmul_tolerance(a, b, expected), what)
        else:
            assert_same(program(a, b)[0], expected, 0, (), what)


@pytest.mark.parametrize("dtype", [F32, I32], ids=dtype_id)
def test_matmul_mixed_with_pointwise(dtype):
    """Products of computed and transposed operands, with an epilogue (bias, activation,
    comparison) and a second product of the result."""
    def function(x, w, b):
        hidden = np.maximum((x * 2) @ w.T + b, 0)
        return hidden, hidden @ w, (hidden @ w) > 3

    rng = np.random.default_rng(7)
    x, w, b = (random_values(s, dtype, rng) for s in [(6, 5), (3, 5), (3,)])
    program = compiled(("matmul-mixed", dtype), function, x, w, b)
    for run in range(RUNS):
        x, w = (random_values(resize(s, run), dtype, rng) for s in [(6, 5), (3, 5)])
        b = random_values(resize((3,), run), dtype, rng)
        for actual, want in zip(program(x, w, b), numpy_result(function, x, w, b)):
            if want.dtype.kind == "f":
                assert_within(actual, want, 1e-4 * (1 + np.abs(want)), "matmul epilogue")
            else:
                assert_same(actual, want, 0, (), "matmul epilogue")


@pytest.mark.parametrize("dtype", [F32, I32], ids=dtype_id)
def test_matmul_epilogue_widening_cast(dtype):
    a, b = np.arange(6, dtype=dtype).reshape(2, 3), np.ones((3, 2), dtype)
    program = compiled(("matmul-widen", dtype), lambda a, b: (a @ b).astype(np.float64), a, b)
    assert_same(program(a, b)[0], (a @ b).astype(np.float64), 0, (), "widening epilogue")


# --- every pow2 bucket ------------------------------------------------------------------
BUCKET_EDGES = [2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025]  # the low end of each bucket

EDGE_KINDS = {
    "unary": (lambda x: -x if x.dtype != bool else ~x, 1),
    "binary broadcast": (lambda x, y: np.maximum(x[:, None], y[None, :2]), 2),
    "sum": (lambda x: np.sum(x), 1),
    "max of rows": (lambda x: np.max(np.stack([x, x[::-1]]), axis=1), 1),
    "reverse slice": (lambda x: x[::-2], 1),
}
# Element sizes 1, 4 and 8 bytes give different vector widths and remainder loops.
EDGE_DTYPES = {"unary": (F32, F64, I32, BOOL), "binary broadcast": (F32, BOOL), "sum": (F32,),
               "max of rows": (I32,), "reverse slice": (F64, BOOL)}
EDGE_CASES = [pytest.param(kind, dtype, id=f"{kind}-{dtype_id(dtype)}")
              for kind in EDGE_KINDS for dtype in EDGE_DTYPES[kind]]


@pytest.mark.parametrize("kind, dtype", EDGE_CASES)
def test_every_bucket_edge(kind, dtype):
    """One program with an input in every pow2 bucket from [2, 2] to [1025, 2048], run at
    each bucket's low end, high end and middle."""
    function, count = EDGE_KINDS[kind]

    def program_function(*xs):
        return tuple(function(*xs[i * count:(i + 1) * count]) for i in range(len(BUCKET_EDGES)))

    def inputs(sizes, seed):
        return [operand_values((size,), dtype, seed, operand=i)
                for size in sizes for i in range(count)]

    program = compiled(("edges", kind, dtype), program_function, *inputs(BUCKET_EDGES, 0))
    for label, pick in (("low", lambda low: low), ("high", lambda low: max(2, 2 * (low - 1))),
                        ("middle", lambda low: (low + max(2, 2 * (low - 1))) // 2)):
        sizes = [pick(low) for low in BUCKET_EDGES]
        xs = inputs(sizes, len(label))
        for size, actual, index in zip(sizes, program(*xs), range(len(sizes))):
            operands = xs[index * count:(index + 1) * count]
            expected = numpy_result(function, *operands)
            what = f"{kind} at the {label} end, size {size}"
            if kind == "sum" and dtype.kind == "f":
                assert_within(actual, expected,
                              reduction_tolerance("sum", operands[0], None, expected), what)
            else:
                assert_same(actual, expected, 0, (), what)


# --- layouts ---------------------------------------------------------------------------
def layouts(shape, dtype, seed):
    """Arrays of ``shape`` with other memory layouts, each with a label."""
    rng = np.random.default_rng(seed)
    base = random_values((shape[1], shape[0]), dtype, rng)
    big = random_values((2 * shape[0] + 1, 2 * shape[1] + 1), dtype, rng)
    row = random_values((shape[1],), dtype, rng)
    return {
        "transposed": base.T,
        "fortran": np.asfortranarray(random_values(shape, dtype, rng)),
        "strided": big[1::2, ::2][:shape[0], :shape[1]],
        "negative strides": big[::-2, ::-2][:shape[0], :shape[1]],
        "broadcast view": np.broadcast_to(row, shape),
        "column broadcast": np.broadcast_to(row[:shape[0], None], shape),
    }


LAYOUT_PROGRAMS = {
    "pointwise": lambda x, y: np.tanh(x) * y + x,
    "reduce rows": lambda x, y: np.sum(x * y, axis=1) + np.max(x, axis=0).sum(),
    "softmax": lambda x, y: np.exp(x - x.max(1, keepdims=True)) / np.exp(
        x - x.max(1, keepdims=True)).sum(1, keepdims=True) + y,
    "matmul": lambda x, y: x @ y.T,
    "views": lambda x, y: x.T[::-1] - y.T,
}


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
@pytest.mark.parametrize("case", list(LAYOUT_PROGRAMS))
def test_input_layouts(case, dtype):
    """Non-contiguous, transposed, broadcast, negative-stride and Fortran-order inputs give
    what eager NumPy gives on them, and are left untouched."""
    function = LAYOUT_PROGRAMS[case]
    shape = (5, 7)
    rng = np.random.default_rng(0)
    program = compiled(("layout", case, dtype), function, random_values(shape, dtype, rng),
                       random_values(shape, dtype, rng))
    contiguous = random_values(shape, dtype, rng)
    for label, x in layouts(shape, dtype, 1).items():
        for first, second in ((x, contiguous), (contiguous, x), (x, x)):
            before = (first.copy(), second.copy())
            expected = numpy_result(function, first, second)
            (actual,) = program(first, second)
            tolerance = 4 * np.finfo(dtype).eps * (1 + np.abs(expected.astype(np.float64)))
            assert_within(actual, expected, 8 * shape[1] * tolerance, f"{case}, {label}")
            assert np.array_equal(first, before[0]) and np.array_equal(second, before[1])
