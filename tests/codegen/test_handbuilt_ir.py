"""Codegen without the tracer: graphs written by hand, as IR text (``tracer.parse_graph``)
or as ``tracejit.tracer.ir`` records, compiled and compared with NumPy.

Covers pointwise chains with weak literals and constants, reductions with keepdims feeding
broadcasts, symbolic shapes (products and sums of symbols, slices with symbolic limits)
run at several sizes of their buckets, value guards (on reductions, on inputs, with
``int``/``float`` conversions, expected ``False``) that fail and must raise ``SideExit``
with the failing guard's index and return nothing, kernel errors, outputs that are
inputs or literals, and the program's artifacts (LLVM IR, assembly, object code, wrapper
source, ``link`` from object code).
"""

from __future__ import annotations

import numpy as np
import pytest
from compiled_checks import assert_same, assert_within

from tracejit import codegen
from tracejit.codegen.program import link
from tracejit.tracer import parse_graph, verify
from tracejit.tracer.abstract import AbstractArray
from tracejit.tracer.dims import parse_dim
from tracejit.tracer.ir import Eqn, Graph, Guard, Literal, Symbol, Var
from tracejit.tracer.ops import PRIMITIVES

_PROGRAMS = {}


def program_of(text):
    """Parse, verify and compile IR text (once per text for the session)."""
    if text not in _PROGRAMS:
        _PROGRAMS[text] = codegen.compile(verify(parse_graph(text)))
    return _PROGRAMS[text]


# --- pointwise chains ------------------------------------------------------------------
CHAIN = """
graph chain
  in %0: f32[7]
  in %1: f32[7]
  %2: f32[7] = multiply(%0, %1)
  %3: f32[7] = exp(%2)
  %4: f32[7] = add(%3, 1.5)
  %5: f32[7] = tanh(%4)
  %6: f32[7] = subtract(%5, %0)
  %7: bool[7] = greater(%6, 0.25)
  %8: f32[7] = where(%7, %6, %2)
  return %8, %7
"""


def test_pointwise_chain():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 7)).astype(np.float32)
    with np.errstate(all="ignore"):
        values = np.tanh(np.exp(x * y) + np.float32(1.5)) - x
        expected = (np.where(values > 0.25, values, x * y), values > 0.25)
    program = program_of(CHAIN)
    # the mask is an output too: stored by its own kernel; and the where's branches do not
    # meet at 0.25, so a discontinuity check (tracer/discontinuities.py) runs first
    assert program.kernel_count == 3
    selected, mask = program(x, y)
    assert_same(mask, expected[1], 0, (x, y), "mask")
    assert_same(selected, expected[0], 4, (x, y), "chain")  # exp then tanh: <= 2 + 3 ulp


INTEGER_CHAIN = """
graph integers
  symbols s0 in [9, 16]
  in %0: i32[s0]
  in %1: i32[s0]
  %2: i32[s0] = floor_divide(%0, %1)
  %3: i32[s0] = mod(%0, %1)
  %4: i32[s0] = multiply(%2, %1)
  %5: i32[s0] = add(%4, %3)
  %6: i64[s0] = cast(%5; dtype=i64)
  %7: i64[s0] = add(%6, i64(9223372036854775807))
  return %5, %7
"""


def test_integer_chain_at_every_size_of_its_bucket():
    """x // y * y + x % y == x (y != 0; 0 when y == 0), and int64 wrapping."""
    program = program_of(INTEGER_CHAIN)
    rng = np.random.default_rng(1)
    for size in range(9, 17):
        x = rng.integers(-50, 50, size, dtype=np.int32)
        y = rng.integers(-6, 6, size, dtype=np.int32)
        identity, wrapped = program(x, y)
        with np.errstate(all="ignore"):
            expected = np.floor_divide(x, y) * y + np.mod(x, y)
            assert_same(identity, expected, 0, (x, y), f"size {size}")
            assert_same(wrapped, expected.astype(np.int64) + np.int64(2**63 - 1), 0, (),
                        "wrapped")


# --- reductions ------------------------------------------------------------------------
KEEPDIMS = """
graph centered
  symbols s0 in [3, 4]
  symbols s1 in [9, 16]
  in %0: f64[s0, s1]
  %1: f64[s0, 1] = sum(%0; axes=(1,), keepdims=True)
  %2: f64[s0, 1] = true_divide(%1, dim(s1))
  %3: f64[s0, s1] = subtract(%0, %2)
  %4: f64[1, s1] = max(%3; axes=(0,), keepdims=True)
  %5: f64[s0, s1] = multiply(%3, %4)
  %6: i64[s1] = argmin(%0; axis=0, keepdims=False)
  return %5, %1, %6
"""


def check_keepdims_program(program, x):
    centered, totals, smallest = program(x)
    sums = np.sum(x, axis=1, keepdims=True)
    expected = x - sums / x.shape[1]
    expected = expected * np.max(expected, axis=0, keepdims=True)
    assert_within(totals, sums, 1e-13 * x.shape[1], "sum keepdims")
    assert_within(centered, expected, 1e-12, "centered * column max")
    assert_same(smallest, np.argmin(x, axis=0), 0, (), "argmin")


@pytest.mark.parametrize("rows, columns", [(3, 9), (3, 16), (4, 12), (4, 16)])
def test_reductions_with_keepdims_at_symbolic_sizes(rows, columns):
    x = np.random.default_rng(rows * columns).standard_normal((rows, columns))
    check_keepdims_program(program_of(KEEPDIMS), x)


# --- symbolic dims ---------------------------------------------------------------------
SYMBOLIC = """
graph symbolic
  symbols s0 in [3, 4]
  symbols s1 in [5, 8]
  symbols s2 in [2, 2]
  in %0: f64[s0, s1]
  in %1: f64[s2, s1]
  %2: f64[s0*s1] = reshape(%0; shape=(dim(s0*s1),))
  %3: f64[s0*s1 - 1] = slice(%2; limits=(dim(s0*s1),), starts=(1,), steps=(1,))
  %4: f64[s0*s1 - 1] = multiply(%3, 2)
  %5: f64[s0 + s2, s1] = concatenate(%0, %1; axis=0)
  %6: f64[s0 + s2, 2] = slice(%5; limits=(dim(s0 + s2), 2), starts=(0, 0), steps=(1, 1))
  %7: f64[s0 + s2, 2] = flip(%6; axes=(0,))
  %8: f64[] = sum(%4; axes=(0,), keepdims=False)
  %9: f64[s0 + s2, 2] = add(%7, %8)
  return %4, %9
"""


@pytest.mark.parametrize("rows, columns", [(3, 5), (3, 8), (4, 6), (4, 8)])
def test_symbolic_shape_expressions(rows, columns):
    """Dims like ``s0*s1 - 1`` and ``s0 + s2`` are computed from the symbols at run time."""
    rng = np.random.default_rng(columns)
    x, y = rng.standard_normal((rows, columns)), rng.standard_normal((2, columns))
    doubled, shifted = program_of(SYMBOLIC)(x, y)
    expected_doubled = x.reshape(-1)[1:] * 2
    assert_same(doubled, expected_doubled, 0, (), "reshape, slice, multiply")
    expected_shifted = np.concatenate([x, y])[:, :2][::-1] + expected_doubled.sum()
    assert_within(shifted, expected_shifted, 1e-12 * rows * columns, "concatenate, flip")


# --- guards and side exits -------------------------------------------------------------
GUARDED = """
graph guarded
  symbols s0 in [5, 8]
  in %0: f64[s0]
  %1: f64[] = sum(%0; axes=(0,), keepdims=False)
  %2: bool[] = greater(%1, 0)
  guard bool(%2) == True
  %3: f64[s0] = multiply(%0, 2)
  %4: f64[] = max(%3; axes=(0,), keepdims=False)
  %5: bool[] = less(%4, 100.0)
  guard bool(%5) == False
  %6: i64[] = argmax(%0; axis=0, keepdims=False)
  guard int(%6) == 2
  %7: f64[] = min(%0; axes=(0,), keepdims=False)
  guard float(%7) == -1.0
  %8: f64[s0] = add(%3, %4)
  return %8
"""


def guarded_input(size, total_positive=True, big=True, argmax=2, smallest=-1.0):
    x = np.full(size, 0.5)
    x[0] = smallest
    x[argmax] = 60.0 if big else 10.0
    if not total_positive:
        x[1] = -1000.0
        x[0] = -1000.0 if smallest == -1.0 else smallest
    return x


@pytest.mark.parametrize("size", [5, 6, 8])
def test_guards_pass(size):
    x = guarded_input(size)
    (result,) = program_of(GUARDED)(x)
    assert_same(result, x * 2 + np.max(x * 2), 0, (), "all guards hold")


@pytest.mark.parametrize("size", [5, 8])
@pytest.mark.parametrize("failing, arguments", [
    (0, {"total_positive": False}),           # sum(x) > 0 is False
    (1, {"big": False}),                      # max(2x) < 100 is True, expected False
    (2, {"argmax": 3}),                       # int(argmax(x)) is 3, not 2
    (3, {"smallest": -2.0}),                  # float(min(x)) is -2.0
])
def test_failing_guard_side_exits(size, failing, arguments):
    """The first guard that fails is reported (``code == index + 1``, an index into the
    compiled graph's guards, where margin guards sit before the guards they protect);
    nothing is returned and the input is untouched."""
    x = guarded_input(size, **arguments)
    before = x.copy()
    program = program_of(GUARDED)
    with pytest.raises(codegen.SideExit) as raised:
        program(x)
    assert program.graph.guards[raised.value.guard_index] == parse_graph(GUARDED).guards[failing]
    assert raised.value.code == raised.value.guard_index + 1
    assert np.array_equal(x, before)


ENTRY_GUARD = """
graph entry_guard
  in %0: bool[]
  in %1: f32[3]
  guard bool(%0) == True
  %2: f32[3] = neg(%1)
  return %2
"""


def test_guard_on_an_input_value():
    program = program_of(ENTRY_GUARD)
    x = np.array([1.0, -0.0, np.inf], np.float32)
    assert_same(program(np.array(True), x)[0], -x, 0, (), "guard holds")
    with pytest.raises(codegen.SideExit) as raised:
        program(np.array(False), x)
    assert raised.value.guard_index == 0


GATHER = """
graph gather
  symbols s0 in [5, 8]
  in %0: f32[s0, 3]
  in %1: i64[4]
  %2: f32[4, 3] = gather(%0, %1; axis=0)
  return %2
"""


def test_kernel_error_side_exits_with_a_negative_code():
    program = program_of(GATHER)
    x = np.arange(18, dtype=np.float32).reshape(6, 3)
    indices = np.array([0, -1, 5, -6])
    assert_same(program(x, indices)[0], np.take(x, indices, axis=0), 0, (), "in range")
    with pytest.raises(codegen.SideExit) as raised:
        program(x, np.array([0, 1, 6, 2]))
    assert raised.value.code < 0 and raised.value.guard_index is None


# --- outputs that are not computed -----------------------------------------------------
PASSTHROUGH = """
graph passthrough
  in %0: f64[4]
  in %1: i32[]
  %2: f64[4] = sqrt(%0)
  return %2, %0, 7, f32(0.5)
"""


def test_outputs_that_are_inputs_and_literals():
    x = np.array([4.0, 0.0, -0.0, np.inf])
    root, same, seven, half = program_of(PASSTHROUGH)(x, np.array(3, np.int32))
    assert_same(root, np.sqrt(x), 0, (), "sqrt")
    assert_same(same, x, 0, (), "input returned as is")
    assert seven == 7 and half == np.float32(0.5) and np.asarray(half).dtype == np.float32


def test_zero_d_input_returned_as_output_keeps_its_shape():
    program = program_of("graph identity0d\n  in %0: f64[]\n  return %0\n")
    (result,) = program(np.array(2.5))
    assert result.shape == () and result == 2.5


CONSTANTS = """
graph constants
  in %0: f32[2, 3]
  const %1: f32[3] = [1.0, -2.0, 0.5]
  const %2: i64[2, 1] = [[3], [-4]]
  %3: f32[2, 3] = multiply(%0, %1)
  %4: f64[2, 3] = add(%3, %2)
  return %4, %1
"""


def test_constants():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    weights, offsets = np.array([1.0, -2.0, 0.5], np.float32), np.array([[3], [-4]])
    combined, constant = program_of(CONSTANTS)(x)
    assert_same(combined, x * weights + offsets, 0, (), "constants")
    assert_same(constant, weights, 0, (), "a constant output")
    constant[0] = 99.0  # the caller owns the returned array: the next call is unaffected
    assert_same(program_of(CONSTANTS)(x)[1], weights, 0, (), "constant after a write")


# --- records instead of text -----------------------------------------------------------
def test_graph_built_from_records():
    """``Graph(...)`` assembled from ``Var``/``Literal``/``Eqn``/``Guard``/``Symbol``: a
    row-wise log-sum-exp with a guard, at several sizes of its bucket."""
    rows, columns = parse_dim("s0"), parse_dim("s1")
    x = Var("%0", AbstractArray((rows, columns), np.dtype(np.float64)))

    def var(name, shape, dtype=np.float64):
        return Var(name, AbstractArray(shape, np.dtype(dtype)))

    def eqn(prim, inputs, out, **params):
        return Eqn(PRIMITIVES[prim], tuple(inputs), tuple(sorted(params.items())), out)

    peak = var("%1", (rows, 1))
    shifted = var("%2", (rows, columns))
    exponentials = var("%3", (rows, columns))
    totals = var("%4", (rows, 1))
    logs = var("%5", (rows, 1))
    result = var("%6", (rows, 1))
    finite = var("%7", (), np.bool_)
    everything = var("%8", (rows, 1), np.bool_)
    body = (
        eqn("max", [x], peak, axes=(1,), keepdims=True),
        eqn("subtract", [x, peak], shifted),
        eqn("exp", [shifted], exponentials),
        eqn("sum", [exponentials], totals, axes=(1,), keepdims=True),
        eqn("log", [totals], logs),
        eqn("add", [logs, peak], result),
        eqn("isfinite", [result], everything),
        eqn("all", [everything], finite, axes=(0, 1), keepdims=False),
        Guard(finite, "bool", True),
    )
    graph = verify(Graph("logsumexp", (x,), (), body, (result, Literal.of(1)),
                         (Symbol("s0", 2, 2), Symbol("s1", 17, 32))))
    program = codegen.compile(graph)
    rng = np.random.default_rng(3)
    for size in (17, 24, 32):
        values = rng.standard_normal((2, size)) * 30
        peak_values = values.max(axis=1, keepdims=True)
        expected = np.log(np.exp(values - peak_values).sum(axis=1, keepdims=True)) + peak_values
        output, one = program(values)
        assert_within(output, expected, 1e-13 * np.abs(expected) + 1e-14, f"size {size}")
        assert one == 1
    values[1, 3] = np.inf
    with pytest.raises(codegen.SideExit) as raised:
        program(values)
    assert raised.value.guard_index == 0


# --- the program's artifacts -----------------------------------------------------------
def test_program_artifacts_and_link_from_object_code():
    program = program_of(KEEPDIMS)
    assert "define" in program.llvm_ir and "define" in program.optimized_ir
    assert program.assembly.strip() and isinstance(program.object_code, bytes)
    assert len(program.object_code) > 0
    assert "def run(" in program.wrapper_source
    compile(program.wrapper_source, "<wrapper>", "exec")  # valid Python source
    assert [kernel.kind for kernel in program.kernels]
    relinked = link(codegen.Program(
        name=program.name, graph=program.graph, kernels=program.kernels,
        llvm_ir=program.llvm_ir, optimized_ir=program.optimized_ir,
        object_code=program.object_code,
        wrapper_source=program.wrapper_source))
    check_keepdims_program(relinked, np.random.default_rng(4).standard_normal((4, 11)))
