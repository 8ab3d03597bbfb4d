"""The bounds of ``tracejit.tracer.guard_margins`` hold: compiled values are within them of NumPy's.

For each expression (chains through the rules: sums, means, variances, math functions,
divisions, products of matrices), the bound equations the pass would emit are evaluated
with NumPy next to the expression, and ``|compiled - numpy| <= bound`` is checked on
random inputs, including cancelling ones where the bound matters. Where the pass says a
value is exact (no bound: ``x / 3.0`` is one IEEE division, as NumPy's), compiled and NumPy's
values must be equal to the bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import codegen
from tracejit.codegen import numpy_products
from tracejit.tracer import trace
from tracejit.tracer.guard_margins import _Slice
from tracejit.tracer.ir import Literal

EXPRESSIONS = {
    "sum": lambda x: x.sum(),
    "mean": lambda x: x.mean(),
    "var": lambda x: x.var(),
    "std": lambda x: x.std(),
    "exp sum": lambda x: np.exp(x).sum(),
    "tanh": lambda x: np.tanh(x * 4.0),
    "log1p": lambda x: np.log1p(np.abs(x)),
    "log of sum": lambda x: np.log(np.abs(x).sum()),
    "divided": lambda x: x / 3.0,
    "over the sum": lambda x: x / (np.abs(x).sum() + 1.0),
    "dot": lambda x: x @ x[::-1],
    "sin": lambda x: np.sin(x * 100.0),
    "tan": lambda x: np.tan(x * 0.5),
    "log2 and log10": lambda x: np.log2(np.abs(x) + 0.5) * np.log10(np.abs(x).sum()),
    "sqrt of variance": lambda x: np.sqrt(((x - x.mean()) ** 2).mean()),
    "floor of sum": lambda x: np.floor(x.sum() * 10.0),
    "truncated": lambda x: (x.sum() * 10.0).astype(np.int64),
    "where": lambda x: np.where(x.sum() > 0, x.sum(), -x.sum()),
    "max of exp": lambda x: np.exp(x).max(),
    # integer powers of computed values of either sign (tanh GELU's x ** 3)
    "cube": lambda x: (x * 1.5 + 0.25) ** 3,
    "even power": lambda x: (x * 1.5 - 0.25) ** 4.0,
    "negative integer power": lambda x: (x * 1.5 + 0.25) ** -3,
    "gelu": lambda x: (lambda y: 0.5 * y * (1 + np.tanh(0.8 * (y + 0.044715 * y ** 3))))(
        x * 1.1),
}


def _numpy_values(graph, inputs):
    """Every value of ``graph`` as NumPy computes it (the op table's implementations)."""
    env = dict(zip((var.name for var in graph.inputs), inputs))
    env.update((var.name, constant.data) for var, constant in graph.constants)

    def value(atom):
        return atom.value if isinstance(atom, Literal) else env[atom.name]

    with np.errstate(all="ignore"):
        for eqn in graph.equations:
            env[eqn.out.name] = np.asarray(eqn.prim.impl(*map(value, eqn.inputs),
                                                         **eqn.params_dict))
    return value


def _inputs(rng, n, dtype, count):
    for index in range(count):
        x = rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 2)
        if index % 2:  # cancelling: half the values are the negated others
            x[n // 2:2 * (n // 2)] = -x[: n // 2]
            x = rng.permutation(x)
        yield x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(EXPRESSIONS))
def test_compiled_values_are_within_the_bound_of_numpys(name, dtype, monkeypatch):
    rng = np.random.default_rng(sum(map(ord, name)))
    n = 37
    sample = next(_inputs(rng, n, dtype, 1))
    graph = trace(EXPRESSIONS[name], sample).graph
    # compiled as a value a decision reads, whose bound the margins take: its float64
    # math is then NumPy's loop (codegen/numpy_products.decision_math), with no bound
    monkeypatch.setattr(numpy_products, "_deciding_bodies", {graph.name})
    program = codegen.compile(graph)
    output = graph.outputs[0]
    slice_ = _Slice(graph)
    bound = slice_.bound(output)  # None: the pass says compiled code computes NumPy's value
    bounded = graph.__class__(graph.name, graph.inputs, graph.constants,
                              graph.body + tuple(slice_.emitter.pending), graph.outputs,
                              graph.symbols, graph.shape_guards)
    worst = 0.0
    for x in _inputs(rng, n, dtype, 200):
        try:
            compiled = np.asarray(program(x)[0], np.float64)
        except codegen.SideExit:  # a jump within the bound (tracer/discontinuities.py)
            continue
        value = _numpy_values(bounded, [x])
        expected = np.asarray(value(output), np.float64)
        limit = 0.0 if bound is None else np.asarray(value(bound), np.float64)  # exact: equal
        with np.errstate(all="ignore"):
            gap = np.abs(compiled - expected)
        same = (compiled == expected) | (np.isnan(compiled) & np.isnan(expected))
        assert np.all(same | (gap <= limit)), (name, x, compiled, expected, limit)
        finite = np.isfinite(limit) & (limit > 0)
        if np.any(finite & ~same):
            worst = max(worst, float(np.max(gap[finite & ~same] / limit[finite & ~same])))
    assert worst <= 1.0
