"""The guard-margin pass (``tracejit.tracer.guard_margins``): its rule table covers the op table,
it leaves exact guards alone, its output verifies and round-trips through the text form,
and what it assumes of NumPy (tanh saturation) holds here."""

from __future__ import annotations

import numpy as np
import pytest

from tracejit.tracer import trace
from tracejit.tracer.exact_math import is_exact
from tracejit.tracer.guard_margins import (
    RULES,
    TANH_SATURATED,
    UNBOUNDED,
    _Slice,
    add_guard_margins,
)
from tracejit.tracer.ir import Eqn, Guard, Var, parse_graph, verify
from tracejit.tracer.passes import optimize
from tracejit.tracer.primitives import PRIMITIVES, Primitive


def test_every_primitive_has_a_rule_or_is_marked_unbounded():
    assert set(PRIMITIVES) <= set(RULES) | set(UNBOUNDED), (
        set(PRIMITIVES) - set(RULES) - set(UNBOUNDED))
    assert not set(RULES) & set(UNBOUNDED)
    assert set(RULES) | set(UNBOUNDED) <= set(PRIMITIVES)


def test_a_primitive_with_no_rule_is_never_assumed_exact():
    graph = trace(lambda x: x + 1.0, np.ones(3)).graph
    eqn = graph.equations[0]
    mystery = object.__new__(Primitive)
    mystery.name, mystery.kind = "mystery", "pointwise"
    unknown = Eqn(mystery, eqn.inputs, (), Var("%99", eqn.out.aval))
    slice_ = _Slice(graph)
    assert slice_._apply(unknown) is not None  # an infinite bound: eager decides


def margins(graph):
    return [item for item in graph.body if isinstance(item, Guard) and item.convert == "margin"]


def branch(predicate):
    def function(x):
        if predicate(x):
            return x * 2
        return x - 2

    return function


EXACT = {
    "max": lambda x: x.max() > 0,
    "comparison": lambda x: (x > 0).any(),
    "integer sum": lambda x: x.astype(np.int64).sum() > 3,
    "scaled max": lambda x: (x * 0.5).max() > 0.25,
    "sqrt of input": lambda x: np.sqrt(np.abs(x)).min() > 0.5,
    # one IEEE division on both sides (no arcp: codegen/pointwise.true_divide)
    "division": lambda x: (x / 3.0).max() > 0,
}
ROUNDED = {
    "sum": lambda x: x.sum() > 0,
    "mean": lambda x: x.mean() > 0,
    "var": lambda x: x.var() > 1,
    "std": lambda x: x.std() > 1,
    "tanh": lambda x: (np.tanh(x) == 1.0).any(),
    "exp sum": lambda x: np.exp(x).sum() > 10,
    "int of sum": lambda x: int(x.sum()) > 2,
    "dot": lambda x: x @ x > 1,
    "float truth": lambda x: bool(x.sum()),
    # argmin/argmax of rounded values are unbounded: a scalar bound the reduction rules
    # reduce (the k-means count guard: an IndexError in codegen before they spread it)
    "count of argmin": lambda x: (np.exp(np.outer(x, x)).argmin(axis=1) == 0).sum() > 0,
    "any of argmax": lambda x: (np.exp(np.outer(x, x)).argmax(axis=1) == 0).any(),
}
# Rounded only by their math, which in float64 is NumPy's own loop on an array NumPy made
# (np.outer's; tracer/exact_math.py). np.tanh(x) of the argument keeps its bound.
NUMPY_MATH = {"count of argmin": "exp", "any of argmax": "exp"}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_guards_on_exact_values_get_no_margin(name):
    graph = optimize(trace(branch(EXACT[name]), np.linspace(-1, 2, 7)).graph)
    assert margins(graph) == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(ROUNDED))
def test_guards_on_rounded_values_get_a_margin_checked_first(name, dtype):
    traced = trace(branch(ROUNDED[name]), np.linspace(-1, 2, 7).astype(dtype), dynamic=True)
    graph = optimize(traced.graph)
    verify(graph)
    if name in NUMPY_MATH and is_exact(NUMPY_MATH[name], dtype):
        assert margins(graph) == []  # NumPy's bits: no bound
        return
    body = list(graph.body)
    for index, item in enumerate(body):
        if isinstance(item, Guard) and item.convert != "margin":
            previous = body[index - 1]
            assert isinstance(previous, Guard) and previous.convert == "margin", graph
    assert margins(graph)
    assert parse_graph(str(graph), graph.constant_table()) == graph


def test_products_of_inputs_are_exact_only_in_the_cheap_checks():
    """Compiled code computes a float32 or float64 product a decision reads by NumPy's own
    BLAS call (codegen/numpy_products.py), so the cheap checks (masks, argmax, loop bodies)
    take it as exact; an ``if``'s margin keeps its bound, since a matmul in the trace may
    stand for an einsum, which NumPy does not compute by matmul (review 15). A float64
    einsum keeps its bound in the cheap checks too (its location says so), and so does a
    tensordot over other axes than a's last and b's first (NumPy's transposed copies); one
    over those is NumPy's ``np.dot`` of two matrices, its matmul's BLAS call."""
    for dtype in (np.float32, np.float64):
        graph = trace(branch(ROUNDED["dot"]), np.linspace(-1, 2, 7).astype(dtype),
                      dynamic=True).graph
        assert margins(optimize(graph)), (dtype, graph)
        product = next(eqn.out for eqn in graph.equations if eqn.prim.name == "matmul")
        assert _Slice(graph, cheap=True).bound(product) is None, dtype
        assert _Slice(graph).bound(product) is not None, dtype
    a, b = np.linspace(-1, 2, 12).reshape(3, 4), np.linspace(1, 3, 8).reshape(4, 2)
    for contraction, exact in ((lambda a, b: np.einsum("ij,jk->ik", a, b), False),
                               (lambda a, b: np.tensordot(a.T, b.T, ([0], [1])), False),
                               (lambda a, b: np.tensordot(a, b, 1), True)):
        graph = trace(contraction, a, b).graph
        product = next(eqn.out for eqn in graph.equations if eqn.prim.name == "matmul")
        assert (_Slice(graph, cheap=True).bound(product) is None) == exact


@pytest.mark.parametrize("product, exact", [
    (lambda x, w, v: x @ w, True),
    (lambda x, w, v: x.T @ v, True),  # NumPy passes x to BLAS transposed, as compiled code
    (lambda x, w, v: (x @ w - v) @ x, True),
    (lambda x, w, v: (x * 2) @ w, True),
    (lambda x, w, v: x[:, ::2] @ w[:2], False),  # NumPy reads the view in place
    (lambda x, w, v: x[:, 0] @ x[:, 1], False),
    (lambda x, w, v: (x.T * 2) @ v, False),  # NumPy's product of x.T is Fortran-ordered
])
def test_a_float64_product_is_exact_where_numpy_holds_its_operands_as_compiled_code(
        product, exact):
    """Compiled code keeps arrays C-ordered; NumPy reads views in place and keeps a
    transposed operand's layout through ufuncs, and hands those to BLAS otherwise (another
    order of the sums), so only products of operands NumPy holds C-ordered (or a transpose
    of one) are NumPy's bits."""
    x, w, v = np.linspace(-1, 2, 24).reshape(6, 4), np.linspace(1, 3, 4), np.linspace(0, 1, 6)
    graph = trace(product, x, w, v).graph
    ctx = _Slice(graph, cheap=True)
    found = [ctx.bound(eqn.out) is None for eqn in graph.equations
             if eqn.prim.name == "matmul"]
    assert found and all(is_exact == exact for is_exact in found[-1:]), found


def test_pass_is_idempotent_and_leaves_guard_free_graphs_alone():
    plain = trace(lambda x: x * 2 + 1, np.ones(4)).graph
    assert add_guard_margins(plain) is plain
    once = optimize(trace(branch(ROUNDED["sum"]), np.ones(4)).graph)
    assert add_guard_margins(once) == once  # margins are not guarded again


def test_float_pins_are_values_not_decisions():
    graph = optimize(trace(lambda x: x * float(x.sum()), np.ones(4)).graph)
    assert margins(graph) == []


@pytest.mark.parametrize("dtype", sorted(TANH_SATURATED, key=str))
def test_numpy_tanh_is_exactly_one_beyond_the_stated_saturation(dtype):
    threshold = TANH_SATURATED[dtype]
    values = np.linspace(threshold, threshold * 4, 200_001).astype(dtype)
    values = values[values >= threshold]
    assert np.all(np.tanh(values) == 1.0)
    assert np.all(np.tanh(-values) == -1.0)


def dropout_relu_backward(X, W, b, D, Y, keep_prob):
    """deeplearning.ai's dropout backward: ``A > 0`` on a relu whose zeros were masked and
    scaled, and ``np.nansum`` of cross-entropy terms that are 0 where the label is."""
    A = np.maximum(0, W @ X + b) * D / keep_prob
    probs = 1 / (1 + np.exp(-A.sum(axis=0, keepdims=True)))
    cost = np.nansum(np.multiply(-np.log(probs), Y) + np.multiply(-np.log(1 - probs), 1 - Y))
    return cost, np.int64(A > 0) * D


def test_products_and_quotients_of_exact_zeros_are_exact():
    """0 * y and 0 / y are 0 on both sides (y finite, and not tiny for a divisor): relu and
    dropout zeros compared with 0 decide in compiled code instead of taking a margin exit at
    every call (they did before, so the step never ran compiled)."""
    from real_model_checks import all_compiled, run_calls

    r = np.random.default_rng(8)

    def make(n):
        return (r.standard_normal((4, n)), r.standard_normal((5, 4)), r.standard_normal((5, 1)),
                (r.random((5, n)) < 0.8).astype(float), (r.random((1, n)) > 0.5) * 1.0, 0.8)

    f = run_calls(dropout_relu_backward, [make(16), make(16), make(29)], repeats=1)
    assert all_compiled(f, 3), f.explain()
