"""Property-based tests (hypothesis): random small programs, traced and run eagerly.

A program is a list of steps over a pool of values that starts with the inputs (random
shapes of rank 0-3, dtypes f32/f64/i32): pointwise unary and binary ops from a list that
is safe on every dtype, broadcasting between whichever pool values have compatible
shapes, reductions with random axes and keepdims, slicing, concatenation, matmul,
reshapes and transposes, and data-dependent ``if``s on a reduction; half the programs are
traced with every dim dynamic. ``interpret`` runs a program with plain NumPy code, so
the same function runs eagerly and under the tracer. Every traced output must equal the
eager one exactly (dtype, shape, values, NaNs), the IR must verify, round-trip through
its text form and stay valid after ``optimize``; where eager NumPy raises (max of an
empty slice, negative of a bool), tracing raises the same kind of error.

Runs ``max_examples=60`` (deterministic) by default; set ``TRACEJIT_FUZZ=N`` to run N
fresh random examples.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracejit.tracer import trace
from tracejit.tracer.ir import parse_graph, verify
from tracejit.tracer.passes import optimize
from tracejit.tracer.tracing import current_context

EXAMPLES = int(os.environ.get("TRACEJIT_FUZZ", "60"))
# Deterministic examples in ordinary runs; fresh random ones when fuzzing on purpose.
SETTINGS = dict(
    deadline=None,
    database=None,
    derandomize="TRACEJIT_FUZZ" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DTYPES = (np.float32, np.float64, np.int32)

# --- the interpreter (plain NumPy: runs eagerly and under the tracer) -----------------------

UNARY = {
    "negative": np.negative,
    "absolute": np.abs,
    "tanh": np.tanh,
    "bounded_exp": lambda v: np.exp(np.clip(v, -20, 20)),
    "sin": np.sin,
    "cos": np.cos,
    "square": np.square,
    "sqrt_abs": lambda v: np.sqrt(np.abs(v)),
    "log1p_abs": lambda v: np.log1p(np.abs(v)),
    "floor": np.floor,
    "sign": np.sign,
    "half": lambda v: v * 0.5,
    "plus_one": lambda v: v + 1,
    "to_f32": lambda v: v.astype(np.float32),
    "nan_to_zero": lambda v: np.where(np.isnan(v), 0, v),
    "floor_divide_3": lambda v: v // 3,
    "mod_3": lambda v: np.mod(v, 3),
    "cube": lambda v: v**3,
    "clip": lambda v: np.clip(v, -1, 2),
    "to_int": lambda v: v.astype(np.int32),
    "double_self": lambda v: np.concatenate([v, v], axis=-1) if v.ndim else v,
    "reverse": lambda v: v[::-1] if v.ndim else v,
    "every_other": lambda v: v[..., ::2] if v.ndim else v,
    "tail": lambda v: v[1:] if v.ndim else v,
    "expand": lambda v: np.expand_dims(v, 0),
}

BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "safe_divide": lambda a, b: a / (np.abs(b) + 1),
    "where_greater": lambda a, b: np.where(a > b, a, b * 2),
}

REDUCTIONS = {
    "sum": np.sum,
    "max": np.max,
    "min": np.min,
    "mean": np.mean,
    "prod": lambda v, axis, keepdims: np.prod(np.tanh(v), axis=axis, keepdims=keepdims),
    "var": np.var,
    "any_positive": lambda v, axis, keepdims: np.any(v > 0, axis=axis, keepdims=keepdims),
    "argmax": lambda v, axis, keepdims: np.argmax(v, axis=axis if isinstance(axis, int) else None,
                                                  keepdims=keepdims),
}


def _broadcastable(shape_a, shape_b):
    for dim_a, dim_b in zip(reversed(shape_a), reversed(shape_b)):
        if not (dim_a == 1 or dim_b == 1 or dim_a == dim_b):
            return False
    return True


def _axes(ndim, choice, as_tuple):
    if ndim == 0 or choice == 0:
        return None
    if as_tuple:
        chosen = tuple(axis for axis in range(ndim) if choice >> axis & 1)
        return chosen or None
    return choice % ndim


def interpret(program, *inputs):
    """Run ``program`` on ``inputs``; returns every value the program made, in order."""
    pool = list(inputs)
    for step in program:
        kind = step[0]
        value = pool[step[1] % len(pool)]
        if kind == "unary":
            result = UNARY[step[2]](value)
        elif kind == "binary":
            other = pool[step[3] % len(pool)]
            if _broadcastable(value.shape, other.shape):
                result = BINARY[step[2]](value, other)
            else:
                result = BINARY[step[2]](value, 2)
        elif kind == "reduce":
            _, _, name, choice, as_tuple, keepdims = step
            axis = _axes(value.ndim, choice, as_tuple)
            result = REDUCTIONS[name](value, axis=axis, keepdims=keepdims)
        elif kind == "reshape":
            if step[2] == "flatten":
                result = value.reshape(-1)
            else:
                result = value.reshape(tuple(reversed(value.shape)))
        elif kind == "matmul":
            other = pool[step[2] % len(pool)]
            if value.ndim and other.ndim in (1, 2) and value.shape[-1] == other.shape[0]:
                result = value @ other
            else:
                result = value * 1.5
        elif kind == "transpose":
            order = sorted(range(value.ndim), key=lambda axis: (axis * step[2]) % 7)
            result = np.transpose(value, order)
        else:  # "if": a data-dependent branch on a reduction
            _, _, then_name, else_name = step
            if value.sum() > 0:
                result = UNARY[then_name](value)
            else:
                result = UNARY[else_name](value)
        pool.append(result)
    return tuple(pool[len(inputs):])


# --- strategies ---------------------------------------------------------------------------

_index = st.integers(0, 7)
_unary_name = st.sampled_from(sorted(UNARY))
_step = st.one_of(
    st.tuples(st.just("unary"), _index, _unary_name),
    st.tuples(st.just("binary"), _index, st.sampled_from(sorted(BINARY)), _index),
    st.tuples(st.just("reduce"), _index, st.sampled_from(sorted(REDUCTIONS)),
              st.integers(0, 7), st.booleans(), st.booleans()),
    st.tuples(st.just("reshape"), _index, st.sampled_from(["flatten", "reverse"])),
    st.tuples(st.just("transpose"), _index, st.integers(1, 6)),
    st.tuples(st.just("matmul"), _index, _index),
    st.tuples(st.just("if"), _index, _unary_name, _unary_name),
)


@st.composite
def programs(draw):
    """``(program, inputs, dynamic)``: shapes share a base so that many pairs broadcast."""
    rank = draw(st.integers(0, 3))
    base = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    inputs = []
    for _ in range(draw(st.integers(1, 3))):
        keep = draw(st.integers(0, rank))
        shape = [dim if draw(st.booleans()) else 1 for dim in base[rank - keep:]]
        dtype = draw(st.sampled_from(DTYPES))
        if np.dtype(dtype).kind == "i":
            array = np.asarray(rng.integers(-5, 6, size=shape), dtype=dtype)
        else:
            array = np.asarray(rng.standard_normal(shape) * 2, dtype=dtype)
        inputs.append(array)
    program = draw(st.lists(_step, min_size=1, max_size=8))
    return program, inputs, draw(st.booleans())


def _assert_same(actual, expected):
    assert len(actual) == len(expected)
    for index, (left, right) in enumerate(zip(actual, expected)):
        assert np.asarray(left).dtype == np.asarray(right).dtype, f"value {index}: dtype"
        assert np.shape(left) == np.shape(right), f"value {index}: shape"
        np.testing.assert_array_equal(left, right, err_msg=f"value {index}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=EXAMPLES, **SETTINGS)
@given(programs())
def test_random_programs_trace_like_eager(case):
    program, inputs, dynamic = case
    with np.errstate(all="ignore"):
        try:
            expected = interpret(program, *copy.deepcopy(inputs))
        except (ValueError, TypeError) as error:
            # e.g. max of an empty array, negative of a bool: tracing fails the same way
            category = ValueError if isinstance(error, ValueError) else TypeError
            with pytest.raises(category):
                trace(interpret, program, *copy.deepcopy(inputs),
                      dynamic=True if dynamic else None)
            assert current_context() is None, error
            return
        traced = trace(interpret, program, *copy.deepcopy(inputs),
                       dynamic=True if dynamic else None)
    _assert_same(traced.outputs, expected)
    graph = traced.graph
    verify(graph)
    assert parse_graph(str(graph), graph.constant_table()) == graph
    verify(optimize(graph))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=max(EXAMPLES // 3, 10), **SETTINGS)
@given(programs())
def test_guards_hold_for_the_traced_inputs(case):
    """Each value guard's recorded answer is what eager Python saw for those inputs: the
    ``if`` steps take the same branch eagerly (checked through equal outputs above) and
    every guard sits on the interpreter's ``if`` line."""
    program, inputs, dynamic = case
    with np.errstate(all="ignore"):
        try:
            interpret(program, *copy.deepcopy(inputs))
        except (ValueError, TypeError):
            return  # covered by the test above
        traced = trace(interpret, program, *copy.deepcopy(inputs),
                       dynamic=True if dynamic else None)
    branch_steps = sum(1 for step in program if step[0] == "if")
    assert len(traced.value_guards) == branch_steps
    for guard in traced.value_guards:
        assert guard.convert == "bool"
        assert guard.location.source == "if value.sum() > 0:"
