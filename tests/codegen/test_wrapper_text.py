"""``codegen/wrapper_text`` writes the forms a wrapper uses itself and the rest with
``ast.unparse``: read back, its text is the tree it was given (the same AST), for every
form, including the ones it hands on (floats, slices, dim arithmetic, ``or``)."""

from __future__ import annotations

import ast
import math

import pytest

from tracejit.codegen import wrapper_text

EXPRESSIONS = [
    "x0", "_np.float32", "x0.shape[1]", "x0.shape[-1]", "f()", "f(a)", "f(a, b, key=c)",
    "_np.transpose(x0, (1, 0))", "()", "(a,)", "(a, b)", "((a, b), (c,))", "'u1'",
    "'it''s'", '"q\\"uote"', "-1", "0", "None", "True", "1.5", "-0.0", "1e309",
    "s0 // 2 + 1", "max(s0 * 3, 64)", "x0[1:3, ::2]", "x0[s0]", "a.b.c(d)", "f(*rest)",
    "f(**options)", "status == _LAYOUT", "a is None or a.size < 4", "not a", "-s0",
    "f(g(h(x)), (1, (2, 3)))", "[a, b]", "a if b else c", "lambda: 1",
]
STATEMENTS = [
    "x0 = _asarray(x0, _dtype_float32)", "workspace = _thread.workspace = _empty(64, 'u1')",
    "return (out0, out1)", "return", "return out0", "raise _SideExit(status)",
    "print(str(x), sep=' ', end='\\n', file=_sys.stdout)",
    "if status:\n    if status == _LAYOUT:\n        return _relayout(x0)\n"
    "    raise _SideExit(status)",
    "if a:\n    b = 1\nelse:\n    b = 2", "x0 += 1", "for i in range(3):\n    f(i)",
]


def _same_tree(node, text, mode):
    parsed = ast.parse(text, mode=mode)
    got = parsed.body if mode == "eval" else parsed.body[0]
    return ast.dump(got) == ast.dump(node)


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_an_expression_reads_back_as_the_same_tree(text):
    node = ast.parse(text, mode="eval").body
    assert _same_tree(node, wrapper_text.source(node), "eval")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e-300, (0, 1), b"x"])
def test_constants_python_cannot_write_as_a_literal_still_mean_themselves(value):
    rendered = wrapper_text.source(ast.Constant(value))
    got = eval(rendered, {})  # noqa: S307 - text this test made from a constant
    assert got == value or (math.isnan(got) and math.isnan(value))
    assert type(got) is type(value)


@pytest.mark.parametrize("text", STATEMENTS)
def test_a_statement_reads_back_as_the_same_tree(text):
    node = ast.parse(text).body[0]
    lines = wrapper_text.statement_lines(node, depth=0)
    assert _same_tree(node, "\n".join(lines), "exec")
    nested = wrapper_text.statement_lines(node, depth=2)
    assert [line[8:] for line in nested] == lines and all(
        line.startswith(" " * 8) for line in nested)


def test_a_built_tree_without_locations_renders():
    # what codegen/program.py builds: no lineno anywhere
    assign = ast.Assign(targets=[ast.Name("a", ast.Store()), ast.Name("b", ast.Store())],
                        value=ast.Constant(1))
    assert wrapper_text.statement_lines(assign) == ["a = b = 1"]
    function = ast.FunctionDef(
        name="run", args=ast.arguments(posonlyargs=[], args=[ast.arg("x0"), ast.arg("x1")],
                                       vararg=None, kwonlyargs=[], kw_defaults=[],
                                       kwarg=None, defaults=[]),
        body=[ast.Return(value=ast.Tuple(elts=[ast.Name("x0", ast.Load())], ctx=ast.Load()))],
        decorator_list=[], returns=None)
    text = wrapper_text.function_source(function)
    assert text == "def run(x0, x1):\n    return (x0,)\n"
    namespace = {}
    exec(compile(text, "<test>", "exec"), namespace)  # noqa: S102 - this test's own text
    assert namespace["run"](1, 2) == (1,)
