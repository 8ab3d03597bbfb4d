"""The IR as data: printer/parser round trips on hand-built graphs, the verifier's
rejections, and ``DimExpr`` arithmetic, printing, parsing and bounds.

Graphs here are built record by record (no tracer), with every type written out by hand,
so a printer, parser or verifier bug cannot hide behind a matching tracer bug.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit.tracer.abstract import AbstractArray
from tracejit.tracer.dims import DimExpr, decide_by_bounds, parse_dim
from tracejit.tracer.ir import (
    Constant,
    Effect,
    Eqn,
    Graph,
    Guard,
    Literal,
    Location,
    ShapeGuard,
    Symbol,
    Var,
    VerifyError,
    format_graph,
    parse_graph,
    parse_location,
    verify,
)
from tracejit.tracer.primitives import PRIMITIVES

F32, F64, I64, BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int64, np.bool_))
S0, S1 = DimExpr.symbol("s0"), DimExpr.symbol("s1")


def var(name, shape, dtype, weak=False):
    return Var(name, AbstractArray(shape, dtype, weak))


def eqn(prim, inputs, out, **params):
    return Eqn(PRIMITIVES[prim], tuple(inputs), tuple(sorted(params.items())), out)


def round_trip(graph):
    text = format_graph(graph)
    parsed = parse_graph(text, graph.constant_table())
    assert parsed == graph, f"the text does not read back to the same graph:\n{text}"
    assert format_graph(parsed) == text
    return parsed


# --- round trips ---------------------------------------------------------------------------


def test_round_trip_of_a_full_graph():
    x = var("%0", (S0, 3), F32)
    small = var("%1", (3,), F32)
    large = var("%2", (5, 8), F64)
    total = var("%5", (), F32)
    positive = var("%6", (), BOOL)
    where = Location("model.py", 12, "forward", "if d['a: b'] > 0: # \"quoted\": 'yes'")
    body = (
        eqn("add", (x, small), var("%3", (S0, 3), F32)),
        eqn("sum", (var("%3", (S0, 3), F32),), var("%4", (S0,), F32), axes=(1,),
            keepdims=False),
        eqn("sum", (var("%4", (S0,), F32),), total, axes=(0,), keepdims=False),
        eqn("greater", (total, Literal.of(0)), positive),
        Guard(positive, "bool", True, where),
        Effect("print", (total,), (("end", "\n"), ("segments", (("text", "total:"),
               ("value", 0))), ("sep", " "), ("stream", "stdout")),
               Location("model.py", 13, "forward", "print('total:', total)")),
        eqn("multiply", (x, Literal.of(0.5)), var("%7", (S0, 3), F32)),
        eqn("sum", (large,), var("%8", (), F64), axes=(0, 1), keepdims=False),
    )
    graph = Graph(
        "forward",
        (x,),
        ((small, Constant.of(np.array([1.0, -2.5, 3.0], F32))),
         (large, Constant.of(np.arange(40.0).reshape(5, 8)))),
        body,
        (var("%7", (S0, 3), F32), var("%8", (), F64), Literal.of(S0 // 2)),
        (Symbol("s0", 3, 4),),
        (ShapeGuard(S0, ">", 3, True, Location("model.py", 10, "forward", "if n > 3:"),
                    "used as a Python int (index, range(), len())"),),
    )
    verify(graph)
    text = format_graph(graph)
    assert "symbols s0 in [3, 4]" in text
    assert "const %1: f32[3] = [ 1. , -2.5,  3. ]" in text  # small: inline
    assert f"const %2: f64[5, 8] = <sha1:{graph.constants[1][1].digest}>" in text  # large
    assert "model.py:12 in forward" in text
    assert "'used as a Python int (index, range(), len())'" in text
    round_trip(graph)


@pytest.mark.parametrize(
    "literal",
    [
        Literal.of(2),
        Literal.of(-7),
        Literal.of(2.5),
        Literal.of(0.1),
        Literal.of(1e-300),
        Literal.of(float("nan")),
        Literal.of(float("inf")),
        Literal.of(float("-inf")),
        Literal.of(True),
        Literal.of(np.float32(1.5)),
        Literal.of(np.float32("nan")),
        Literal.of(np.float32("-inf")),
        Literal.of(np.float16(0.1)),
        Literal.of(np.int32(-3)),
        Literal.of(np.uint8(200)),
        Literal.of(np.bool_(True)),
        Literal.of(S0 // 2 + 1),
    ],
    ids=repr,
)
def test_literal_round_trip(literal):
    x = var("%0", (), literal.aval.dtype, literal.aval.weak)
    if isinstance(literal.value, DimExpr):
        x = var("%0", (), I64)
    out_aval = PRIMITIVES["add"].abstract_eval(x.aval, literal.aval)
    graph = Graph(
        "literal", (x,), (), (eqn("add", (x, literal), Var("%1", out_aval)),),
        (Var("%1", out_aval), literal), (Symbol("s0", 2, 4),),
    )
    verify(graph)
    round_trip(graph)


def test_literal_kinds_print_as_documented():
    assert str(Literal.of(2)) == "2"
    assert str(Literal.of(2.5)) == "2.5"
    assert str(Literal.of(float("nan"))) == "nan"
    assert str(Literal.of(float("-inf"))) == "-inf"
    assert str(Literal.of(np.float32(1.5))) == "f32(1.5)"
    assert str(Literal.of(S0 * 2)) == "dim(2*s0)"
    assert Literal.of(2).aval == AbstractArray((), I64, weak=True)
    assert Literal.of(np.float32(1.5)).aval == AbstractArray((), F32)


def test_numpy_float64_literal_is_strong():
    # NumPy 2 (NEP 50): np.float64 scalars are strong; f32_array * np.float64(2) is f64.
    literal = Literal.of(np.float64(0.25))
    assert literal.aval == AbstractArray((), F64, weak=False)
    assert str(literal) == "f64(0.25)"


@pytest.mark.parametrize(
    "data",
    [
        np.array([1.0, np.nan, np.inf, -np.inf, -0.0]),
        np.array([[1, 2], [3, 4]], np.int32),
        np.array([True, False]),
        np.zeros((0, 3)),
        np.array([0.1, 1 / 3], np.float32),
        np.array([1e300, 5e-324]),
        np.arange(16, dtype=np.float16) / 7,
        np.arange(40.0).reshape(5, 8),
        np.linspace(-1, 1, 17, dtype=np.float32),
    ],
    ids=lambda data: f"{data.dtype}{data.shape}",
)
def test_constant_round_trip(data):
    constant = var("%0", data.shape, data.dtype)
    graph = Graph("constant", (), ((constant, Constant.of(data)),), (), (constant,))
    verify(graph)
    parsed = round_trip(graph)
    np.testing.assert_array_equal(parsed.constants[0][1].data, data)
    assert parsed.constants[0][1].data.dtype == data.dtype
    assert ("<sha1:" in format_graph(graph)) == (data.size > 16)


@pytest.mark.parametrize("data", [np.array(2.5, np.float32), np.array(3, np.uint8)], ids=str)
def test_zero_dimensional_constant_keeps_its_shape(data):
    assert Constant.of(data).data.shape == ()
    constant = var("%0", (), data.dtype)
    graph = Graph("constant", (), ((constant, Constant.of(data)),), (), (constant,))
    verify(graph)
    round_trip(graph)


def test_large_constant_needs_the_table():
    data = np.arange(40.0)
    constant = var("%0", data.shape, data.dtype)
    graph = Graph("constant", (), ((constant, Constant.of(data)),), (), (constant,))
    with pytest.raises(ValueError, match="constant table"):
        parse_graph(format_graph(graph), {})


@pytest.mark.parametrize(
    "location",
    [
        Location("model.py", 3, "f", "if d['a: b'] > 0:"),
        Location("model.py", 4, "f", "print('done')"),
        Location("model.py", 5, "f", 'if x.sum() > 0:  # positive: "yes"'),
        Location("/tmp/some dir/model.py", 6, "<lambda>", "f = lambda x: x if x.sum() else -x"),
        Location("<string>", 2, "made"),
        Location("model.py", 7, "", "while s: 'x'"),
    ],
    ids=str,
)
def test_location_round_trip(location):
    assert parse_location(str(location)) == location
    predicate = var("%0", (), BOOL)
    graph = Graph("guarded", (predicate,), (), (Guard(predicate, "bool", False, location),),
                  (predicate,))
    round_trip(graph)


@pytest.mark.parametrize("expected", [True, False, 3, -2, 2.5, float("nan"), float("-inf")],
                         ids=repr)
def test_guard_expected_values_round_trip(expected):
    convert = "bool" if isinstance(expected, bool) else "int" if isinstance(expected, int) else (
        "float")
    predicate = var("%0", (), F64)
    graph = Graph("guarded", (predicate,), (), (Guard(predicate, convert, expected),),
                  (predicate,))
    verify(graph)
    parsed = round_trip(graph) if expected == expected else parse_graph(format_graph(graph))
    assert parsed.guards[0].convert == convert
    assert np.isnan(parsed.guards[0].expected) if expected != expected else (
        parsed.guards[0].expected == expected)


def _print_graph(text):
    value = var("%0", (), F64)
    effect = Effect("print", (value,), (("end", "\n"), ("segments", (("text", text),
                    ("value", 0))), ("sep", " "), ("stream", "stdout")))
    return Graph("printing", (value,), (), (effect,), (value,))


def test_effect_round_trip():
    round_trip(_print_graph("loss:"))


def test_effect_text_with_percent_round_trips():
    round_trip(_print_graph("accuracy %"))


def test_effect_text_with_comment_marker_round_trips():
    round_trip(_print_graph("step  # 1"))


def test_shape_guards_round_trip_with_symbolic_right_side():
    graph = Graph(
        "shapes",
        (var("%0", (S0, S1), F32),),
        (),
        (),
        (var("%0", (S0, S1), F32),),
        (Symbol("s0", 3, 4), Symbol("s1", 5, 8)),
        (
            ShapeGuard(S0 * S1, "<=", S1 * 3 + 1, True),
            ShapeGuard((S0 + 1) // 2, "!=", S1 % 3, False, reason="converted with int()"),
            ShapeGuard(S0, "==", 4, True, Location("m.py", 1, "f", "for i in range(n):"),
                       "used as a Python int (index, range(), len())"),
        ),
    )
    verify(graph)
    round_trip(graph)


# --- the verifier --------------------------------------------------------------------------


def _graph(body, inputs=None, outputs=None, symbols=(), constants=(), shape_guards=()):
    inputs = inputs if inputs is not None else (var("%0", (3,), F64),)
    outputs = outputs if outputs is not None else (body[-1].out,)
    return Graph("bad", inputs, constants, tuple(body), outputs, symbols, shape_guards)


def test_verify_accepts_a_valid_graph():
    x = var("%0", (3,), F64)
    verify(_graph([eqn("add", (x, x), var("%1", (3,), F64))]))


def test_verify_rejects_use_before_definition():
    x = var("%0", (3,), F64)
    later = var("%2", (3,), F64)
    body = [eqn("add", (x, later), var("%1", (3,), F64)), eqn("neg", (x,), later)]
    with pytest.raises(VerifyError, match="before"):
        verify(_graph(body, outputs=(var("%1", (3,), F64),)))


def test_verify_rejects_a_var_defined_twice():
    x = var("%0", (3,), F64)
    body = [eqn("neg", (x,), var("%1", (3,), F64)), eqn("exp", (x,), var("%1", (3,), F64))]
    with pytest.raises(VerifyError, match="twice"):
        verify(_graph(body))


def test_verify_rejects_a_wrong_output_shape():
    x = var("%0", (3,), F64)
    with pytest.raises(VerifyError, match="shape rule"):
        verify(_graph([eqn("add", (x, x), var("%1", (4,), F64))]))


def test_verify_rejects_a_wrong_output_dtype():
    x = var("%0", (3,), F32)
    with pytest.raises(VerifyError, match="shape rule"):
        verify(_graph([eqn("add", (x, x), var("%1", (3,), F64))], inputs=(x,)))


def test_verify_rejects_operands_the_shape_rule_refuses():
    x, y = var("%0", (3,), F64), var("%1", (4,), F64)
    with pytest.raises(VerifyError, match="rejects"):
        verify(_graph([eqn("add", (x, y), var("%2", (3,), F64))], inputs=(x, y)))


def test_verify_rejects_an_undeclared_symbol():
    x = var("%0", (S1,), F64)
    with pytest.raises(VerifyError, match="undeclared"):
        verify(_graph([eqn("neg", (x,), var("%1", (S1,), F64))], inputs=(x,),
                      symbols=(Symbol("s0", 2, 4),)))


def test_verify_rejects_an_undeclared_symbol_in_a_shape_guard():
    x = var("%0", (3,), F64)
    guard = ShapeGuard(S1, ">", 2, True)
    with pytest.raises(VerifyError, match="undeclared"):
        verify(_graph([eqn("neg", (x,), var("%1", (3,), F64))], shape_guards=(guard,)))


def test_verify_rejects_a_guard_on_a_non_scalar_predicate():
    x = var("%0", (3,), F64)
    mask = var("%1", (3,), BOOL)
    body = [eqn("greater", (x, Literal.of(0)), mask), Guard(mask, "bool", True)]
    with pytest.raises(VerifyError, match="one element"):
        verify(_graph(body, outputs=(x,)))


def test_verify_accepts_a_guard_on_a_one_element_predicate():
    x = var("%0", (1, 1), F64)
    mask = var("%1", (1, 1), BOOL)
    body = [eqn("greater", (x, Literal.of(0)), mask), Guard(mask, "bool", True)]
    verify(_graph(body, inputs=(x,), outputs=(x,)))


def test_verify_rejects_an_unknown_guard_conversion():
    x = var("%0", (), F64)
    with pytest.raises(VerifyError, match="conversion"):
        verify(_graph([Guard(x, "complex", 1.0)], inputs=(x,), outputs=(x,)))


def test_verify_rejects_an_undefined_output():
    x = var("%0", (3,), F64)
    with pytest.raises(VerifyError, match="return"):
        verify(_graph([eqn("neg", (x,), var("%1", (3,), F64))], outputs=(var("%9", (3,), F64),)))


def test_verify_rejects_a_constant_of_the_wrong_type():
    constant = var("%0", (3,), F32)
    graph = Graph("bad", (), ((constant, Constant.of(np.zeros(3))),), (), (constant,))
    with pytest.raises(VerifyError, match="constant"):
        verify(graph)


def test_verify_rechecks_symbolic_shapes_with_shape_guards():
    """A rule that needs ``s0 != s1`` passes only when a shape guard records it (in the
    form the tracer records it: ``s0 != s1 is False``)."""
    x, y = var("%0", (S0,), F64), var("%1", (S1,), F64)
    body = [eqn("add", (x, y), var("%2", (S0,), F64))]
    symbols = (Symbol("s0", 3, 4), Symbol("s1", 3, 4))
    with pytest.raises(VerifyError):
        verify(_graph(body, inputs=(x, y), symbols=symbols))
    verify(_graph(body, inputs=(x, y), symbols=symbols,
                  shape_guards=(ShapeGuard(S0, "!=", S1, False),)))


# --- DimExpr -------------------------------------------------------------------------------


def test_dim_arithmetic_simplifies():
    assert S0 + S0 == 2 * S0
    assert S0 * 2 - S0 - S0 == 0
    assert isinstance(S0 - S0 + 3, int)
    assert (S0 * 6 + 3) // 3 == 2 * S0 + 1
    assert (S0 * S1) // S1 == S0
    assert (S0 * 4) % 2 == 0
    assert 3 * (S0 + 1) == 3 * S0 + 3
    assert (S0 + 1) * (S0 - 1) == S0 * S0 - 1
    assert hash(S0 + S1) == hash(S1 + S0)


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (S0, "s0"),
        (2 * S0 + 1, "2*s0 + 1"),
        (S0 * S1 - 3, "s0*s1 - 3"),
        (-S0, "-s0"),
        (1 - S0, "-s0 + 1"),
        (S0 // 2, "s0 // 2"),
        (S0 % 3, "s0 % 3"),
        ((S0 + 1) // 2, "(s0 + 1) // 2"),
        (3 * (S0 // 2), "3*(s0 // 2)"),
        (S1 // (S0 + 1), "s1 // (s0 + 1)"),
    ],
    ids=lambda item: str(item),
)
def test_dim_printing(expr, text):
    assert str(expr) == text
    assert parse_dim(text) == expr


DIM_ROUND_TRIP = [
    S0,
    2 * S0 * S1 + 3,
    S0 - S1,
    (S0 + 1) // 2,
    S0 % 3,
    2 * (S0 % 3) + 1,
    (S0 // 2) // 3,
    S1 // (S0 + 1),
    S1 % (S0 * S1 + 1),
    -(S0 // 2),
    (S0 // 2) * (S1 // 3),
]


@pytest.mark.parametrize("expr", DIM_ROUND_TRIP, ids=str)
def test_dim_parse_round_trip(expr):
    parsed = parse_dim(str(expr))
    assert parsed == expr
    for s0 in (3, 4, 7):
        for s1 in (5, 8):
            bindings = {"s0": s0, "s1": s1}
            assert parsed.evaluate(bindings) == expr.evaluate(bindings)


@pytest.mark.parametrize(
    "expr",
    [S1 // (2 * S0), (S0 * S1) % (S0 // 2), (S0 * S1) // (S0 // 2)],
    ids=["s1 // (2*s0)", "(s0*s1) % (s0 // 2)", "(s0*s1) // (s0 // 2)"],
)
def test_dim_parse_round_trip_product_denominators(expr):
    # reshape(n // 2, -1) of an (s0, s1) array gives the dim s0*s1 // (s0 // 2).
    assert parse_dim(str(expr)) == expr


def test_dim_evaluate_floordiv_and_mod():
    bindings = {"s0": 7, "s1": 5}
    assert ((S0 + 1) // 2).evaluate(bindings) == 4
    assert (S0 % 3).evaluate(bindings) == 1
    assert (S0 * S1 - 2 * S1).evaluate(bindings) == 25
    assert (S1 // (S0 - 4)).evaluate(bindings) == 1


@pytest.mark.parametrize(
    ("expr", "bounds"),
    [
        (2 * S0 + 1, (7, 9)),
        (S0 * S1, (15, 32)),
        (S1 - S0, (1, 5)),
        (S0 // 2, (1, 2)),
        (S0 % 3, (0, 2)),
        ((S1 + 1) // S0, (1, 3)),
        (-S0, (-4, -3)),
    ],
    ids=lambda item: str(item),
)
def test_dim_bounds(expr, bounds):
    ranges = {"s0": (3, 4), "s1": (5, 8)}
    assert expr.bounds(ranges) == bounds
    low, high = bounds
    for s0 in (3, 4):
        for s1 in (5, 6, 7, 8):
            assert low <= expr.evaluate({"s0": s0, "s1": s1}) <= high


def test_decide_by_bounds():
    ranges = {"s0": (5, 8)}
    assert decide_by_bounds(S0 - 2, ">", ranges) is True
    assert decide_by_bounds(S0 - 9, ">=", ranges) is False
    assert decide_by_bounds(S0 - 6, ">", ranges) is None
    assert decide_by_bounds(S0 - 9, "==", ranges) is False
    assert decide_by_bounds(S0 - 9, "!=", ranges) is True
    assert decide_by_bounds(S0 - 5, "==", ranges) is None
