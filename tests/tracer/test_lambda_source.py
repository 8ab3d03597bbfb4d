"""Lambdas whose own lines do not parse (inside a list or call spanning lines) are found in
the module-level function that defines them, not by parsing the whole file; where that
function cannot be found (a module-level literal, a name rebound since), the whole file
is parsed as before. Every case is compiled with ``fallback="raise"`` and compared with
NumPy."""

from __future__ import annotations

import linecache

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer import source_rewrite


def steps(xp):
    """Four lambdas in a literal spanning lines, two of them on one line with the same
    parameter (the rewrite tells them apart by where their bodies start)."""
    return [lambda x: x * 0.5 + 1.0, lambda x: xp.tanh(x),
            lambda x: xp.maximum(x, -0.25),
            lambda x, scale=2.0: x * scale]


def chain(functions):
    def run(x):
        for step in functions:
            x = step(x)
        return x
    return run


MODULE_STEPS = [lambda x: x - 3.0,  # no enclosing function: the whole file is parsed
                lambda x: np.exp(x)]


def rebound(xp):
    return [lambda x: x * 3.0,
            lambda x: xp.sqrt(np.abs(x))]


REBOUND = rebound(np)


def rebound(xp):  # noqa: F811 - the lambdas above now come from another definition
    return []


def _compiled(function, x):
    jitted = tj.jit(function, cache="memory", fallback="raise")
    got = jitted(x)
    assert jitted.stats()["eager_calls"] == {}
    return got


@pytest.mark.parametrize("index", range(4))
def test_each_lambda_of_a_multiline_literal_compiles_to_numpys_result(index):
    x = np.random.default_rng(index).standard_normal(37)
    function = steps(np)[index]
    np.testing.assert_allclose(_compiled(function, x), function(x), rtol=1e-12, atol=1e-12)


def test_a_chain_of_them_compiles_to_numpys_result():
    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    want = chain(steps(np))(x)
    np.testing.assert_allclose(_compiled(chain(steps(np)), x), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("function", MODULE_STEPS + REBOUND)
def test_without_the_defining_function_the_whole_file_is_parsed(function):
    x = np.random.default_rng(5).standard_normal(16)
    np.testing.assert_allclose(_compiled(function, x), function(x), rtol=1e-12, atol=1e-12)


def test_the_enclosing_definition_is_the_defining_functions_lines():
    function = steps(np)[2]
    lines = linecache.getlines(__file__)
    text, first_line = source_rewrite._enclosing_definition(function, lines)
    assert text.startswith("def steps(xp):") and first_line == steps.__code__.co_firstlineno
    assert text.rstrip().endswith("lambda x, scale=2.0: x * scale]")
    assert source_rewrite._enclosing_definition(MODULE_STEPS[0], lines) is None
    # ``rebound`` now names a function whose lines do not hold the lambda
    assert source_rewrite._enclosing_definition(REBOUND[0], lines) is None
