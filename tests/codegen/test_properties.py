"""Property-based tests: random op graphs, compiled, against eager NumPy.

Hypothesis draws inputs (float32, float64, int32, int64, bool; shapes that broadcast,
with size 0 and 1 dims, special values and integer extremes) and a chain of pointwise,
view and reduction ops over them. The chain is written as a Python function, traced with
``dynamic=True``, compiled, and run on the drawn inputs and on inputs resized within the
same pow2 buckets; the outputs must equal NumPy's: exact for integers and booleans and for
float values whose every step rounds exactly like NumPy (arithmetic, sqrt, max/min,
casts, views), within ``RTOL`` of the value's scale for the rest (transcendental functions,
division, sums and products whose order of operations may differ).

Ops whose result jumps (comparisons, floor, sign, argmax, float -> int casts, the
condition of ``where``, floor_divide and mod of floats) only take such exactly rounded
operands, so a last-place difference upstream cannot flip them. Signs of zeros are not
compared here (test_ops_compiled checks them op by op). Known bugs are avoided:
floor/ceil only see floats.

40 examples by default, with a fixed seed; ``TRACEJIT_FUZZ=N`` runs N random ones.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import partial

import numpy as np
from compiled_checks import assert_same, assert_within, shape_guards_hold
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracejit import codegen, tracer
from tracejit.codegen.dtypes import SUPPORTED

FUZZ = int(os.environ.get("TRACEJIT_FUZZ", "0"))
SETTINGS = settings(
    max_examples=FUZZ or 40,
    deadline=None,
    derandomize=not FUZZ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DTYPES = [np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.bool_)]
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}


# --- the ops ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    function: object
    exact: bool = True  # rounds exactly like NumPy: the result is bitwise NumPy's
    jumps: bool = False  # discontinuous: takes only exactly computed operands


# NOTE: no closures here. Within one trace the tracer rewrites a code object once and
# reuses it with the first closure's cells (tracer/frontend.py Hooks.function_for), so two
# closures of one factory (cast-to-f32, cast-to-f64) would both cast to the first dtype.
def _astype(dtype, x):
    if x.dtype == dtype:
        raise TypeError("a cast to the same dtype is no op")
    return x.astype(dtype)


def _floats_only(function, x):
    if x.dtype.kind != "f":
        raise TypeError("floats only: floor/ceil of integers is a known bug")
    return function(x)


def _reverse(x):
    return x[::-1] if np.ndim(x) else x * 1


OPS = [
    Op("neg", 1, np.negative),
    Op("abs", 1, np.abs),
    Op("square", 1, np.square),
    Op("sqrt|x|", 1, lambda x: np.sqrt(np.abs(x))),
    Op("tanh", 1, np.tanh, exact=False),
    Op("exp(tanh)", 1, lambda x: np.exp(np.tanh(x)), exact=False),
    Op("log1p|x|", 1, lambda x: np.log1p(np.abs(x)), exact=False),
    Op("sign", 1, np.sign, jumps=True),
    Op("floor", 1, partial(_floats_only, np.floor), jumps=True),
    Op("ceil", 1, partial(_floats_only, np.ceil), jumps=True),
    Op("logical_not", 1, np.logical_not, jumps=True),
    Op("to f32", 1, partial(_astype, np.dtype(np.float32))),
    Op("to f64", 1, partial(_astype, np.dtype(np.float64))),
    Op("to i32", 1, partial(_astype, np.dtype(np.int32)), jumps=True),
    Op("to bool", 1, partial(_astype, np.dtype(np.bool_)), jumps=True),
    Op("reverse", 1, _reverse),
    Op("transpose", 1, lambda x: np.transpose(x) if np.ndim(x) >= 2 else x * 1),
    Op("flatten", 1, lambda x: np.reshape(x, (-1,))),
    Op("add", 2, np.add),
    Op("subtract", 2, np.subtract),
    Op("multiply", 2, np.multiply),
    # maximum(0.0, -0.0) has the wrong sign (known bug, test_ops_compiled), which a later
    # division turns into the wrong infinity: treat the results as inexact (no divisor).
    Op("maximum", 2, np.maximum, exact=False),
    Op("minimum", 2, np.minimum, exact=False),
    Op("true_divide", 2, np.true_divide, exact=False),
    Op("less", 2, np.less, jumps=True),
    Op("equal", 2, np.equal, jumps=True),
    Op("floor_divide", 2, np.floor_divide, jumps=True),
    Op("mod", 2, np.mod, jumps=True),
    Op("where(a > 0)", 3, lambda a, b, c: np.where(a > 0, b, c), jumps=True),
]
OPS_BY_NAME = {op.name: op for op in OPS}
REDUCTIONS = {
    "sum": Op("sum", 1, np.sum, exact=False),
    "prod": Op("prod", 1, np.prod, exact=False),
    # NumPy's own max/min of +0.0 and -0.0 depends on its SIMD order: inexact, as above.
    "max": Op("max", 1, np.max, exact=False),
    "min": Op("min", 1, np.min, exact=False),
    "mean": Op("mean", 1, np.mean, exact=False),
    "any": Op("any", 1, np.any, jumps=True),
    "all": Op("all", 1, np.all, jumps=True),
    "argmax": Op("argmax", 1, np.argmax, jumps=True),
    "argmin": Op("argmin", 1, np.argmin, jumps=True),
}


@dataclass(frozen=True)
class Step:
    op: Op
    operands: tuple  # indices of earlier values
    axis: object = None
    keepdims: bool = False

    def apply(self, values):
        arguments = [values[i] for i in self.operands]
        if self.op.name in REDUCTIONS:
            return self.op.function(*arguments, axis=self.axis, keepdims=self.keepdims)
        return self.op.function(*arguments)

    def __str__(self):
        arguments = [f"v{i}" for i in self.operands]
        if self.op.name in REDUCTIONS:
            arguments += [f"axis={self.axis}", f"keepdims={self.keepdims}"]
        return f"{self.op.name}({', '.join(arguments)})"


def run_steps(steps, outputs, inputs):
    values = list(inputs)
    for step in steps:
        values.append(step.apply(values))
    return tuple(values[i] for i in outputs)


# --- drawing inputs and graphs ---------------------------------------------------------
DIM_SIZES = [0, 1, 2, 3, 5, 7, 9]


@st.composite
def arrays(draw, shape, dtype):
    size = int(np.prod(shape))
    if dtype.kind == "f":
        elements = st.one_of(
            st.floats(-10, 10, width=32),
            st.sampled_from([0.0, -0.0, 0.5, 1.0, -1.0, np.nan, np.inf, -np.inf]),
        )
    elif dtype.kind == "i":
        info = np.iinfo(dtype)
        elements = st.one_of(st.integers(-20, 20), st.sampled_from([info.min, info.max]))
    else:
        elements = st.booleans()
    values = draw(st.lists(elements, min_size=size, max_size=size))
    return np.array(values, dtype=dtype).reshape(shape)


@st.composite
def graphs(draw):
    """Inputs, and steps that NumPy accepts on them (TypeErrors and unsupported result
    dtypes are redrawn), with every value's exactness tracked."""
    rank = draw(st.integers(0, 3))
    base = [draw(st.sampled_from(DIM_SIZES[1:] if draw(st.integers(0, 9)) else DIM_SIZES))
            for _ in range(rank)]
    inputs = []
    for _ in range(draw(st.integers(1, 3))):
        own_rank = draw(st.integers(0, rank))
        shape = tuple(dim if draw(st.integers(0, 3)) else 1 for dim in base[rank - own_rank:])
        inputs.append(draw(arrays(shape, draw(st.sampled_from(DTYPES)))))
    values, exact = list(inputs), [True] * len(inputs)
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        for _attempt in range(20):
            step = draw(steps_over(values, exact))
            try:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    value = np.asarray(step.apply(values))
            except (TypeError, ValueError):
                continue
            if value.dtype not in SUPPORTED:
                continue
            # Integer results of exact operands are exact (sums wrap the same in any order).
            exact.append((step.op.exact or value.dtype.kind != "f")
                         and all(exact[i] for i in step.operands))
            values.append(value)
            steps.append(step)
            break
    if not steps:  # nothing NumPy accepted: negate (or logically negate) the first input
        steps.append(Step(OPS_BY_NAME["neg" if inputs[0].dtype != bool else "logical_not"],
                          (0,)))
        values.append(np.asarray(steps[0].apply(values)))
        exact.append(True)
    outputs = sorted({len(values) - 1, draw(st.integers(len(inputs), len(values) - 1))})
    return inputs, steps, outputs, exact


@st.composite
def steps_over(draw, values, exact):
    if draw(st.integers(0, 3)) == 0:
        op = draw(st.sampled_from(list(REDUCTIONS.values())))
    else:
        op = draw(st.sampled_from(OPS))
    candidates = [i for i in range(len(values)) if exact[i] or not op.jumps]
    if op.name == "true_divide":
        # The divisor must be exact: a last-place difference near 0 would be amplified.
        numerator = draw(st.integers(0, len(values) - 1))
        divisors = [i for i in range(len(values)) if exact[i]]
        return Step(op, (numerator, draw(st.sampled_from(divisors))))
    if not candidates:
        candidates = [0]  # inputs are exact
    operands = tuple(draw(st.sampled_from(candidates)) for _ in range(op.arity))
    if op.name in REDUCTIONS:
        ndim = np.ndim(values[operands[0]])
        axis = draw(st.one_of(st.none(), st.integers(0, max(ndim - 1, 0)))) if ndim else None
        keepdims = draw(st.booleans())
        return Step(op, operands, axis, keepdims)
    return Step(op, operands)


# --- the property ----------------------------------------------------------------------
def resized(inputs, seed):
    """The inputs with every dynamic dim (> 1) moved to another size of its pow2 bucket;
    equal dims stay equal (they share a symbol)."""
    rng = np.random.default_rng(seed)
    new_size = {}
    for array in inputs:
        for dim in array.shape:
            if dim > 1 and dim not in new_size:
                high = 1 << (dim - 1).bit_length()
                new_size[dim] = int(rng.integers(high // 2 + 1, high + 1))
    result = []
    for array in inputs:
        shape = tuple(new_size.get(dim, dim) for dim in array.shape)
        flat = np.resize(array.reshape(-1), int(np.prod(shape))) if array.size else (
            np.zeros(int(np.prod(shape)), array.dtype))
        result.append(flat.reshape(shape))
    return result


def scale_of(values):
    finite = [np.abs(np.asarray(v, np.float64)[np.isfinite(v)]) for v in values
              if np.asarray(v).dtype.kind in "fiub"]
    return max((float(part.max(initial=0.0)) for part in finite), default=0.0)


def check(program, steps, outputs, exact, inputs, what):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = run_steps(steps, outputs, inputs)
        every_value = run_steps(steps, range(len(inputs) + len(steps)), inputs)
    actual = program(*inputs)
    # The scale errors are measured against: the largest magnitude the computation saw,
    # times the largest count a reduction summed over.
    scale = scale_of(every_value) * max([np.size(x) for x in inputs] + [1])
    for index, output, want in zip(outputs, actual, expected):
        want = np.asarray(want)
        label = f"{what}: output v{index}"
        if exact[index] or want.dtype.kind != "f":
            assert_same(output, want, 0, inputs, label, signed_zeros=False)
        else:
            tolerance = RTOL[want.dtype] * (np.abs(want.astype(np.float64)) + scale)
            assert_within(output, want, tolerance, label)


@SETTINGS
@given(graphs())
def test_random_graphs_match_numpy(graph):
    inputs, steps, outputs, exact = graph
    listing = "; ".join(f"v{len(inputs) + i} = {step}" for i, step in enumerate(steps))
    shapes = ", ".join(f"v{i}: {x.dtype}{list(x.shape)}" for i, x in enumerate(inputs))
    what = f"inputs {shapes}; {listing}"

    def function(*arguments):
        return run_steps(steps, outputs, arguments)

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracer.trace(function, *inputs, dynamic=True)
    program = codegen.compile(traced.graph)
    check(program, steps, outputs, exact, inputs, what)
    for seed in (1, 2):
        other = resized(inputs, seed)
        if shape_guards_hold(program, other):
            check(program, steps, outputs, exact, other, what + " (resized)")
