"""Random programs, eager vs compiled: hypothesis writes model functions, jit must agree.

Each example is a real Python function, generated as source text (registered with
``linecache``, so tracejit's source front end parses and rewrites it like a user's file)::

    def program(x0, x1):
        v2 = np.tanh(x0)
        v3 = np.sum(v2 * x1, axis=0, keepdims=True)
        v4 = np.concatenate([v3, v3[::-1]], axis=0)
        if np.max(v4) > 0.3125:
            out = np.where(x1 > 0, v4, x0)
        else:
            out = v4 // 2
        return out, v2, v3, v4,

built from a small op list: unary and binary pointwise ops (``where``, ``maximum``,
comparisons, ``floor_divide``, ``mod``, casts, weak Python scalars), reductions over a
random axis with random ``keepdims``, views and structural ops (reshape, transpose,
slices with steps, reversal, ``concatenate``, ``broadcast_to``), inputs of random dtypes
(f32, f64, i32, i64, bool) whose shapes broadcast against each other, and one
data-dependent branch ``if reduction(v) > threshold:`` choosing between two expressions.
Every value is returned, so none is left to dead-code elimination.

Several argument sets per program give every dim sizes from different pow2 buckets (1
included, and 0 up to rank 2; some Fortran-ordered, some NumPy scalars, some with
NaN/Inf/-0.0), and the threshold is placed between the condition's values on them, so
most programs take both branches.
``assert_compiled_matches_eager`` then compares eager NumPy with two compiled calls per set.

What keeps the comparison honest rather than flaky: ops whose result jumps (comparisons,
``sign``, ``floor``, casts to int or bool, ``floor_divide``/``mod``, the condition of
``where``, ``any``/``all``/``argmax``) only take *exactly computed* operands (values every
step of which rounds like NumPy: arithmetic, ``sqrt``, ``abs``, views, casts), and
divisors are exact too; inexact float results (transcendentals, sums, means) are compared
within a tolerance scaled by the largest magnitude the program saw and the largest size a
reduction summed over. The branch threshold sits between condition values that differ
clearly, and a compiled condition that disagreed would take a side exit (eager), not a
wrong path.

Loop programs (``loop_programs``, ``LoopProgram``) put a generated body inside
``for t in range(x0.shape[0])``: reads at ``x0[t]`` and ``x0[t - 1]`` (wrapping at t = 0),
a carried value ``c``, an accumulation ``acc = acc + np.sum(v)`` and a write ``buf[t] = v``,
over trip counts 0..31 in several buckets; most of them must be captured as loop nodes.

CI runs a fixed set of examples (derandomized); ``pytest --fuzz N`` or ``TRACEJIT_FUZZ=N``
runs N random ones. ``TRACEJIT_FUZZ_REPRO=path`` keeps a standalone script of the example
being run at ``path`` (for a crash that takes the test process down).
"""

from __future__ import annotations

import hashlib
import linecache
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tracejit import jit
from tracejit.testing import CompiledMismatch, assert_compiled_matches_eager
from tracejit.tracer.ops.control import loop_p
from tracejit.tracer.tracing import trace

CI_EXAMPLES = 60
DTYPES = [np.dtype(name) for name in ("f4", "f8", "i4", "i8", "?")]
SIZES = (1, 2, 3, 5, 8, 13, 31, 64, 100)
MAX_ELEMENTS = 3000
RTOL = {np.dtype("f4"): 2e-5, np.dtype("f8"): 1e-12}


# --- the op list ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """``template`` formats operand names as ``{0}``, ``{1}``, ... and ``{axis}``,
    ``{keepdims}`` for reductions and axis-taking structural ops."""

    name: str
    template: str
    arity: int = 1
    exact: bool = True  # rounds like NumPy, step by step (bitwise the same result)
    needs_exact: tuple = ()  # operand positions that must be exact (the op jumps on them)
    axis: bool = False


def _jumps(arity):
    return tuple(range(arity))


POINTWISE = [
    Op("neg", "-{0}"),
    Op("abs", "np.abs({0})"),
    Op("square", "{0} * {0}"),
    Op("sqrt|x|", "np.sqrt(np.abs({0}))"),
    Op("tanh", "np.tanh({0})", exact=False),
    Op("exp(-|x|)", "np.exp(-np.abs({0}))", exact=False),
    Op("log1p|x|", "np.log1p(np.abs({0}))", exact=False),
    Op("sign", "np.sign({0})", needs_exact=(0,)),
    Op("floor", "np.floor({0})", needs_exact=(0,)),
    Op("logical_not", "np.logical_not({0})", needs_exact=(0,)),
    Op("to f32", "{0}.astype(np.float32)"),
    Op("to f64", "{0}.astype(np.float64)"),
    Op("to i32", "{0}.astype(np.int32)", needs_exact=(0,)),
    Op("to bool", "{0}.astype(bool)", needs_exact=(0,)),
    Op("weak mul", "{0} * 2.5"),
    Op("weak add int", "{0} + 3"),
    Op("weak rsub", "1.5 - {0}"),
    Op("weak div", "{0} / 4"),
    Op("weak compare", "{0} > 0.5", needs_exact=(0,)),
    Op("add", "{0} + {1}", 2),
    Op("subtract", "{0} - {1}", 2),
    Op("multiply", "{0} * {1}", 2),
    # maximum(0.0, -0.0) may give either zero (NumPy's own SIMD order decides): not exact.
    Op("maximum", "np.maximum({0}, {1})", 2, exact=False),
    Op("minimum", "np.minimum({0}, {1})", 2, exact=False),
    Op("true_divide", "{0} / {1}", 2, exact=False, needs_exact=(1,)),
    Op("less", "{0} < {1}", 2, needs_exact=_jumps(2)),
    Op("equal", "{0} == {1}", 2, needs_exact=_jumps(2)),
    Op("greater_equal", "{0} >= {1}", 2, needs_exact=_jumps(2)),
    Op("floor_divide", "{0} // {1}", 2, needs_exact=_jumps(2)),
    Op("mod", "{0} % {1}", 2, needs_exact=_jumps(2)),
    Op("logical_and", "np.logical_and({0}, {1})", 2, needs_exact=_jumps(2)),
    Op("where", "np.where({0} > 0, {1}, {2})", 3, needs_exact=(0,)),
]
REDUCTIONS = [
    Op("sum", "np.sum({0}, axis={axis}, keepdims={keepdims})", exact=False, axis=True),
    Op("mean", "np.mean({0}, axis={axis}, keepdims={keepdims})", exact=False, axis=True),
    Op("max", "np.max({0}, axis={axis}, keepdims={keepdims})", exact=False, axis=True),
    Op("min", "{0}.min(axis={axis}, keepdims={keepdims})", exact=False, axis=True),
    Op("prod", "np.prod({0} * 0.5, axis={axis}, keepdims={keepdims})", exact=False,
       axis=True),
    Op("any", "np.any({0}, axis={axis}, keepdims={keepdims})", needs_exact=(0,), axis=True),
    Op("all", "{0}.all(axis={axis}, keepdims={keepdims})", needs_exact=(0,), axis=True),
    Op("argmax", "np.argmax({0}, axis={axis}, keepdims={keepdims})", needs_exact=(0,),
       axis=True),
    Op("argmin", "np.argmin({0}, axis={axis})", needs_exact=(0,), axis=True),
]
STRUCTURAL = [
    Op("flatten", "{0}.reshape(-1)"),
    Op("transpose", "np.transpose({0})"),
    Op("every other", "{0}[::2]"),
    Op("drop first", "{0}[1:]"),
    Op("reverse", "{0}[::-1]"),
    Op("last axis step", "{0}[..., 1::3]"),
    Op("swapaxes", "np.swapaxes({0}, 0, -1)"),
    Op("expand_dims", "np.expand_dims({0}, 0)"),
    Op("concat reversed", "np.concatenate([{0}, {0}[::-1]], axis={axis})", axis=True),
    Op("concatenate", "np.concatenate([{0}, {1}], axis=0)", 2),
    Op("broadcast_to", "np.broadcast_to({0}, (2,) + {0}.shape)"),
]
CONDITIONS = ["np.sum({0})", "np.max({0})", "np.mean({0})", "{0}.min()"]


# --- drawing a program ---------------------------------------------------------------------
@dataclass
class Value:
    name: str
    array: np.ndarray  # its value on the first argument set
    exact: bool


@dataclass
class Program:
    source: str
    input_specs: list  # (dtype, shape pattern: dim indices or None, layout "C"/"F"/"scalar")
    steps: list  # (name, expression) before the branch
    condition: str
    branches: tuple  # (expression if true, expression if false)
    outputs: tuple  # names returned after ``out``
    threshold: float = 0.0

    def render(self, threshold):
        names = [f"x{index}" for index in range(len(self.input_specs))]
        lines = [f"def program({', '.join(names)}):"]
        lines += [f"    {name} = {expression}" for name, expression in self.steps]
        lines += [f"    if {self.condition} > {threshold!r}:",
                  f"        out = {self.branches[0]}",
                  "    else:",
                  f"        out = {self.branches[1]}",
                  f"    return {', '.join(('out',) + self.outputs)},"]
        return "\n".join(lines) + "\n"


def _evaluate(expression, values):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(eval(expression, {"np": np}, values))  # noqa: S307 - our own text


def _fits(array):
    return array.dtype in DTYPES and array.size <= 4 * MAX_ELEMENTS and array.ndim <= 4


@st.composite
def expressions(draw, values, ops):
    """An op from ``ops`` over ``values`` that NumPy accepts on the first argument set:
    ``(expression, Value)`` for a value to be named; ``None`` if nothing fitted in a few
    tries."""
    for _attempt in range(12):
        op = draw(st.sampled_from(ops))
        operands = []
        for position in range(op.arity):
            pool = [value for value in values if value.exact or position not in op.needs_exact]
            if not pool:
                break
            operands.append(draw(st.sampled_from(pool)))
        if len(operands) < op.arity:
            continue
        axis = keepdims = None
        if op.axis:
            ndim = operands[0].array.ndim
            if ndim == 0:
                continue
            choices = list(range(-ndim, ndim)) + ([None] if op in REDUCTIONS else [])
            axis = draw(st.sampled_from(choices))
            keepdims = draw(st.booleans())
        expression = op.template.format(*(value.name for value in operands), axis=axis,
                                        keepdims=keepdims)
        try:
            result = _evaluate(expression, {value.name: value.array for value in values})
        except (TypeError, ValueError, IndexError, np.exceptions.AxisError):
            continue
        if not _fits(result):
            continue
        exact = op.exact and all(value.exact for value in operands)
        # Integer and boolean results of exact operands are exact (they wrap alike).
        exact = exact or (result.dtype.kind in "iub" and all(v.exact for v in operands))
        return expression, Value("", result, exact)
    return None


@st.composite
def input_specs(draw):
    """Up to three inputs over ``rank`` shared dims; a pattern entry is a dim's index or
    ``None`` (a broadcast 1), right-aligned like NumPy broadcasting. Layout "F" makes a
    matrix Fortran-ordered, "scalar" passes a 0-d input as a NumPy scalar."""
    rank = draw(st.integers(1, 3))
    specs = []
    for _ in range(draw(st.integers(1, 3))):
        own_rank = rank if draw(st.integers(0, 2)) else draw(st.integers(0, rank))
        pattern = tuple(dim if draw(st.integers(0, 3)) else None
                        for dim in range(rank - own_rank, rank))
        layout = draw(st.sampled_from(["C", "C", "C", "F", "scalar"]))
        specs.append((draw(st.sampled_from(DTYPES)), pattern, layout))
    return rank, specs


@st.composite
def dim_sizes(draw, rank, allow_empty):
    choices = SIZES + ((0,) if allow_empty else ())
    for _attempt in range(20):
        sizes = [draw(st.sampled_from(choices)) for _ in range(rank)]
        if int(np.prod(sizes)) <= MAX_ELEMENTS:
            return sizes
    return [3] * rank


def make_arguments(specs, sizes, seed, special):
    """Arrays for ``specs`` with the dims' ``sizes``; ``special``: NaN, Inf and -0.0 in
    the float inputs."""
    rng = np.random.default_rng(seed)
    arguments = []
    for dtype, pattern, layout in specs:
        shape = tuple(1 if dim is None else sizes[dim] for dim in pattern)
        if dtype.kind == "f":
            array = np.asarray(rng.standard_normal(shape) * 3.0).astype(dtype)
            if special and array.size:
                flat = array.reshape(-1)
                picks = rng.integers(0, flat.size, size=min(3, flat.size))
                flat[picks] = rng.choice([np.nan, np.inf, -np.inf, -0.0], size=len(picks))
        elif dtype.kind == "i":
            array = np.asarray(rng.integers(-20, 21, size=shape)).astype(dtype)
        else:
            array = np.asarray(rng.random(shape) > 0.5)
        if layout == "F" and array.ndim > 1:
            array = np.asfortranarray(array)
        elif layout == "scalar" and array.ndim == 0:
            array = array[()]
        arguments.append(array)
    return tuple(arguments)


def run_steps(program, arguments):
    """Every named value of ``program`` on ``arguments`` (eagerly, by our own evaluation of
    the same expressions), and the condition's value."""
    values = {f"x{index}": array for index, array in enumerate(arguments)}
    for name, expression in program.steps:
        values[name] = _evaluate(expression, values)
    for expression in program.branches:
        _evaluate(expression, values)  # both branches must run on every argument set
    return values, float(_evaluate(program.condition, values))


def choose_threshold(conditions):
    """A threshold between two clearly different condition values, splitting the argument
    sets as evenly as possible; below all of them if they are all alike."""
    finite = sorted({value for value in conditions if np.isfinite(value)})
    best, best_balance = None, -1
    for low, high in zip(finite, finite[1:]):
        if high - low <= 1e-3 * max(abs(low), abs(high), 1.0):
            continue
        middle = (low + high) / 2
        above = sum(value > middle for value in conditions)
        balance = min(above, len(conditions) - above)
        if balance > best_balance:
            best, best_balance = middle, balance
    if best is None:
        return (finite[0] - 1.0) if finite else 0.0
    return float(np.float32(best)) if abs(best) < 1e30 else best


@st.composite
def programs(draw):
    """A program, its argument sets and the tolerances to compare it with."""
    rank, specs = draw(input_specs())
    probe_sizes = draw(dim_sizes(rank, allow_empty=False))
    seed = draw(st.integers(0, 2**32 - 1))
    probe = make_arguments(specs, probe_sizes, seed, special=False)
    values = [Value(f"x{index}", array, True) for index, array in enumerate(probe)]

    steps = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["pointwise", "pointwise", "reduction", "structural"]))
        ops = {"pointwise": POINTWISE, "reduction": REDUCTIONS, "structural": STRUCTURAL}[kind]
        drawn = draw(expressions(values, ops))
        if drawn is None:
            continue
        expression, value = drawn
        value.name = f"v{len(values)}"
        steps.append((value.name, expression))
        values.append(value)

    condition_value = draw(st.sampled_from(values))
    condition = draw(st.sampled_from(CONDITIONS)).format(condition_value.name)
    branches = []
    for _ in range(2):
        drawn = draw(expressions(values, POINTWISE + STRUCTURAL + REDUCTIONS))
        branches.append(drawn[0] if drawn else values[-1].name)
    # Every step's value is an output too, so none is left to dead-code elimination.
    outputs = tuple(name for name, _ in steps)
    program = Program("", specs, steps, condition, tuple(branches), outputs)

    # Argument sets: the probe, then sets whose dims land in other buckets (size 0 too).
    arg_sets = [probe]
    for number in range(draw(st.integers(1, 3))):
        sizes = draw(dim_sizes(rank, allow_empty=True))
        arg_sets.append(make_arguments(specs, sizes, seed + number + 1,
                                       special=draw(st.booleans())))
    kept, conditions, every_value = [], [], []
    for arguments in arg_sets:
        try:
            named, condition_now = run_steps(program, arguments)
        except (TypeError, ValueError, IndexError, np.exceptions.AxisError):
            continue  # e.g. a max over a dim of size 0, which NumPy refuses too
        kept.append(arguments)
        conditions.append(condition_now)
        every_value.extend(named.values())
    threshold = choose_threshold(conditions)
    program.threshold = threshold
    program.source = program.render(threshold)
    return program, kept, tolerances(every_value, kept)


def tolerances(every_value, arg_sets):
    """``rtol``/``atol`` for the whole program: float32's if float32 took part, and an
    absolute error scaled by the largest magnitude seen times the largest input size (a
    sum of that many terms in another order)."""
    floats = [value for value in every_value if value.dtype.kind == "f"]
    rtol = RTOL[np.dtype("f4")] if any(value.dtype == np.float32 for value in floats) else (
        RTOL[np.dtype("f8")])
    scale = 0.0
    for value in floats:
        finite = np.abs(value[np.isfinite(value)])
        if finite.size:
            scale = max(scale, float(finite.max()))
    count = max([array.size for arguments in arg_sets for array in arguments] + [1])
    return {"rtol": rtol, "atol": max(rtol * scale * count, rtol)}


# --- the property --------------------------------------------------------------------------
def compile_program(source):
    """The program as a function whose source tracejit can read (like a user's file)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    filename = f"<random-program-{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - generated above
    return namespace["program"]


def describe(arg_sets):
    return "; ".join(", ".join(f"{array.dtype}{list(array.shape)}" for array in arguments)
                     for arguments in arg_sets)


def _literal(value):
    """Python source that rebuilds ``value`` exactly (dtype, shape, layout, scalar-ness)."""
    if isinstance(value, np.generic):
        return f"np.{value.dtype.name}({value.item()!r})"
    text = f"np.array({value.tolist()!r}, dtype=np.{value.dtype.name}).reshape({value.shape})"
    if value.ndim > 1 and value.flags.f_contiguous and not value.flags.c_contiguous:
        text = f"np.asfortranarray({text})"
    return text


def write_repro(path, program, arg_sets, dynamic):
    """A standalone script that runs ``program`` the way the test does: kept up to date in
    ``$TRACEJIT_FUZZ_REPRO`` before each example, so a native crash (which takes pytest and
    hypothesis' report down with it) still leaves the program that caused it."""
    arguments = ",\n    ".join(f"({', '.join(map(_literal, values))},)" for values in arg_sets)
    script = (
        "import numpy as np\n"
        "from numpy import inf, nan  # noqa: F401\n"
        "from tracejit.testing import assert_compiled_matches_eager\n\n"
        f"{program.source}\n"
        f"ARG_SETS = [\n    {arguments},\n]\n"
        f"print(assert_compiled_matches_eager(program, *ARG_SETS, dynamic={dynamic!r}, "
        "cache='memory'))\n"
    )
    with open(path, "w") as file:
        file.write(script)


def check_program(program, arg_sets, tolerance, dynamic):
    function = compile_program(program.source)
    if os.environ.get("TRACEJIT_FUZZ_REPRO"):
        write_repro(os.environ["TRACEJIT_FUZZ_REPRO"], program, arg_sets, dynamic)
    note(program.source)
    note(f"argument sets: {describe(arg_sets)}; dynamic={dynamic!r}; {tolerance}")
    try:
        return assert_compiled_matches_eager(function, *arg_sets, dynamic=dynamic,
                                             cache="memory", **tolerance)
    except CompiledMismatch as error:
        raise CompiledMismatch(f"{error}\n\n{program.source}\nargument sets: "
                               f"{describe(arg_sets)}; dynamic={dynamic!r}") from None


def fuzz_examples(config):
    option = config.getoption("--fuzz", default=None)
    return int(option or os.environ.get("TRACEJIT_FUZZ") or 0)


def test_random_programs_match_eager(request, differential_tally):
    fuzz = fuzz_examples(request.config)
    coverage = {"programs": 0, "both branches": 0, "dtypes": set()}

    @settings(max_examples=fuzz or CI_EXAMPLES, deadline=None, derandomize=not fuzz,
              database=None if not fuzz else settings.default.database,
              suppress_health_check=list(HealthCheck))
    @given(programs(), st.sampled_from(["auto", True]))
    def check(drawn, dynamic):
        program, arg_sets, tolerance = drawn
        if not arg_sets:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's "mean of empty slice"
            summary = check_program(program, arg_sets, tolerance, dynamic)
        differential_tally.record("random programs", program.source, summary)
        sides = {run_steps(program, arguments)[1] > program.threshold
                 for arguments in arg_sets}
        coverage["programs"] += 1
        coverage["both branches"] += len(sides) == 2
        coverage["dtypes"].update(array.dtype for arguments in arg_sets
                                  for array in arguments)

    check()
    print(f"random programs: {coverage['programs']} compared, {coverage['both branches']} "
          f"took both branches")
    # The generator itself is under test too: it must reach both branches and all dtypes.
    assert coverage["programs"] >= (fuzz or CI_EXAMPLES) // 2, coverage
    assert coverage["both branches"] >= coverage["programs"] // 4, coverage
    assert set(DTYPES) <= coverage["dtypes"], coverage


# --- loop programs: a generated body inside ``for t in range(T)`` --------------------------
LOOP_CI_EXAMPLES = 8
LOOP_TRIPS = (0, 1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31)
LOOP_SIZES = (1, 2, 3, 5)


@dataclass
class LoopProgram:
    """``render()`` gives::

        def program(x0, x1):
            c = np.zeros(x0.shape[1:], dtype=np.float64)
            acc = 0.0
            buf = np.zeros(x0.shape, dtype=np.int32)
            for t in range(x0.shape[0]):
                xt = x0[t]
                xp = x0[t - 1]
                v4 = np.maximum(xt, x1)
                v5 = v4 // 2
                c = np.tanh(v5 + c * 0.5).astype(np.float64)
                acc = acc + np.sum(v4)
                buf[t] = v5
            return c, acc, buf,

    ``xp`` reads the row before (at t = 0 NumPy wraps to the last row); ``c`` is carried
    (tanh keeps it bounded, so rounding does not grow with T), ``acc`` accumulates and
    ``buf`` is written at the index."""

    steps: list  # (name, expression) inside the body
    carried_from: str  # the step whose value updates c
    summed: str  # the step whose sum accumulates
    written: str  # the step written into buf[t]
    carried_dtype: str
    buffer_dtype: str
    source: str = ""

    def render(self):
        lines = [
            "def program(x0, x1):",
            f"    c = np.zeros(x0.shape[1:], dtype=np.{self.carried_dtype})",
            "    acc = 0.0",
            f"    buf = np.zeros(x0.shape, dtype=np.{self.buffer_dtype})",
            "    for t in range(x0.shape[0]):",
            "        xt = x0[t]",
            "        xp = x0[t - 1]",
        ]
        lines += [f"        {name} = {expression}" for name, expression in self.steps]
        lines += [
            f"        c = np.tanh({self.carried_from} + c * 0.5).astype(np.{self.carried_dtype})",
            f"        acc = acc + np.sum({self.summed})",
            f"        buf[t] = {self.written}",
            "    return c, acc, buf,",
        ]
        return "\n".join(lines) + "\n"


@st.composite
def loop_programs(draw):
    """A loop program, its argument sets (trip counts from ``LOOP_TRIPS``, the first one
    at least 3 so the loop is captured) and tolerances."""
    rank = draw(st.integers(1, 2))  # of one row x0[t]
    x0_dtype = draw(st.sampled_from([np.dtype("f4"), np.dtype("f8"), np.dtype("i4")]))
    x1_dtype = draw(st.sampled_from(DTYPES))
    x1_pattern = tuple(dim if draw(st.booleans()) else None
                       for dim in range(1 + rank - draw(st.integers(0, rank)), rank + 1))
    specs = [(x0_dtype, tuple(range(rank + 1)), "C"), (x1_dtype, x1_pattern, "C")]
    row_sizes = [draw(st.sampled_from(LOOP_SIZES)) for _ in range(rank)]
    seed = draw(st.integers(0, 2**32 - 1))
    first_trips = draw(st.sampled_from([t for t in LOOP_TRIPS if t >= 3]))
    probe = make_arguments(specs, [first_trips] + row_sizes, seed, special=False)
    row_shape = probe[0].shape[1:]
    values = [Value("xt", probe[0][0], True), Value("xp", probe[0][-1], True),
              Value("x1", np.asarray(probe[1]), True)]
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        drawn = draw(expressions(values, POINTWISE))
        if drawn is None:
            continue
        expression, value = drawn
        value.name = f"v{len(values) + 1}"
        steps.append((value.name, expression))
        values.append(value)
    rows = [value for value in values if value.array.shape == row_shape]
    carried_from = draw(st.sampled_from(rows)).name
    summed = draw(st.sampled_from(values)).name
    written = draw(st.sampled_from(rows))
    program = LoopProgram(steps, carried_from, summed, written.name,
                          draw(st.sampled_from(["float32", "float64"])),
                          written.array.dtype.name)
    program.source = program.render()

    arg_sets = [probe]
    for number in range(draw(st.integers(1, 3))):
        trips = draw(st.sampled_from(LOOP_TRIPS))
        sizes = [trips] + [draw(st.sampled_from(LOOP_SIZES)) for _ in range(rank)]
        arg_sets.append(make_arguments(specs, sizes, seed + number + 1,
                                       special=draw(st.booleans())))
    function = compile_program(program.source)
    kept, outputs = [], []
    for arguments in arg_sets:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                outputs.extend(np.asarray(leaf) for leaf in function(*arguments))
            except (TypeError, ValueError, IndexError):
                continue  # x1 that does not broadcast against this set's rows
        kept.append(arguments)
    every_value = outputs + [np.asarray(value.array) for value in values]
    tolerance = tolerances(every_value, kept)
    longest = max([arguments[0].shape[0] for arguments in kept] + [1])
    tolerance["atol"] *= longest  # the sum over T steps, added in another order
    return program, kept, tolerance


def test_random_loop_programs_match_eager(request, differential_tally):
    """Generated loop bodies, eager vs compiled over trip counts 0..31 (several buckets)."""
    fuzz = fuzz_examples(request.config)
    captured = {"programs": 0, "captured": 0}

    @settings(max_examples=fuzz or LOOP_CI_EXAMPLES, deadline=None, derandomize=not fuzz,
              database=None if not fuzz else settings.default.database,
              suppress_health_check=list(HealthCheck))
    @given(loop_programs(), st.sampled_from(["auto", True]))
    def check(drawn, dynamic):
        program, arg_sets, tolerance = drawn
        if not arg_sets:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            summary = check_program(program, arg_sets, tolerance, dynamic)
        differential_tally.record("random loop programs", program.source, summary)
        captured["programs"] += 1
        with np.errstate(all="ignore"):
            traced = trace(compile_program(program.source), *arg_sets[0], dynamic=True)
        captured["captured"] += any(eqn.prim is loop_p for eqn in traced.graph.equations)

    check()
    print(f"random loop programs: {captured['programs']} compared, {captured['captured']} "
          "with the loop captured")
    # The generator is under test too: most of its loops must be captured, or the
    # comparison says nothing about loop capture.
    assert captured["captured"] >= captured["programs"] // 2, captured


# --- a fixed bug: 0-d results keep NumPy's type (0-d array or scalar) ------------------------
def cast_zero_d(x):
    return x.astype(np.float64)


def where_zero_d(x):
    return np.where(x > 0, x, -x)


def transpose_zero_d(x):
    return np.transpose(x)


def copy_zero_d(x):
    return x.copy()


def ellipsis_zero_d(x):
    return x[...]


def identity_zero_d(x):
    return x


@pytest.mark.parametrize("model", [cast_zero_d, where_zero_d, transpose_zero_d, copy_zero_d,
                                   ellipsis_zero_d, identity_zero_d],
                         ids=lambda model: model.__name__)
def test_zero_d_results_stay_arrays(model):
    """They once came back as NumPy scalars: every 0-d output was made a scalar."""
    assert_compiled_matches_eager(model, np.array(-1.5, np.float32), cache="memory")


# --- a fixed bug: a sliced dynamic dim of length 1 that broadcasts ---------------------------
def tail_times_all(x):
    return x[1:] * x  # for len(x) == 2, x[1:] has length 1 and broadcasts


def tail_two_broadcast(x):
    return np.broadcast_to(x[2:], (4, x.shape[0])) + x  # len(x) - 2 == 1 broadcasts


def test_sliced_dim_of_one_broadcasts():
    """It once read x[1:] at index 1, out of bounds ([2., 3.16e-322] for [2., 4.])."""
    assert_compiled_matches_eager(tail_times_all, np.array([1.0, 2.0]), np.array([3, 4]),
                                  dynamic=True, cache="memory")


def test_sliced_dim_that_a_shape_guard_makes_one_broadcasts():
    """Bucket (2, 4]: len(x) - 2 is 1 only for len(x) == 3, where a shape guard holds; a
    length 4 then takes another variant (where the shapes do not broadcast: an error)."""
    compiled = jit(tail_two_broadcast, buckets=[2, 4], cache="memory")
    x = np.array([1.0, 2.0, 3.0])
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x), tail_two_broadcast(x))
    assert compiled.stats()["compiled_calls"] >= 2
    with pytest.raises(ValueError):
        compiled(np.arange(4.0))


# --- a fixed crash: reductions of empty arrays ------------------------------------------------
EMPTY_REDUCTION = """
import numpy as np
from tracejit import jit


def middle_sums(x):
    return x.sum(axis=1)


compiled = jit(middle_sums, dynamic=True, cache="memory")
for _ in range(5):
    assert compiled(np.ones((3, 8, 3))).shape == (3, 3)
    for _ in range(3):
        assert compiled(np.ones((0, 5, 31))).shape == (0, 31)
"""


def test_empty_reduction_does_not_write_out_of_bounds():
    """x.sum(axis=1) of a (0, 5, 31) array once ran one iteration of a loop of extent
    0 and corrupted the heap. In a subprocess: a crash would take pytest down. Heap
    corruption does not crash every time, so the script runs up to three times."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment = dict(os.environ, TRACEJIT_NUM_THREADS="2")
    for _attempt in range(3):
        result = subprocess.run([sys.executable, "-c", EMPTY_REDUCTION], cwd=root,
                                env=environment, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
