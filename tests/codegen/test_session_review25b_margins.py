"""Session review 25b: the guard margin of ``x ** 2`` (8bc2e30) holds for an operand that
carries a bound of its own.

``x ** 2`` of an exact operand is NumPy's value to the bit (both sides square), but two
operands ``e`` apart give squares apart by ``2 |x| e + e^2`` *and* each side's own rounding
of its square: up to half an ulp of the result on either side, as ``np.square``'s rule
(``margin_rules._square``) and ``x * x``'s carry. The bounds are evaluated with NumPy as
tests/codegen/test_guard_margin_bounds.py does, against the worst operands within the
operand's bound (the neighbours of NumPy's value).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_guard_margin_bounds import _numpy_values

from tracejit.tracer import trace
from tracejit.tracer.guard_margins import _Slice

SQUARES = {
    "power": lambda x: np.exp(x) ** 2,
    "power 2.0": lambda x: np.power(np.exp(x), 2.0),
    "square": lambda x: np.square(np.exp(x)),
}


def _neighbours_within(a, bound, steps=40):
    """Values ``b`` with ``|b - a| <= bound``: ``a``'s float neighbours of either side."""
    found = []
    for direction in (np.inf, -np.inf):
        b = a
        for _ in range(steps):
            b = np.nextafter(b, np.asarray(direction, a.dtype))
            inside = np.abs(b.astype(np.float64) - a.astype(np.float64)) <= bound
            found.append(np.where(inside, b, a))
    return found


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(SQUARES))
def test_a_square_of_a_bounded_operand_keeps_its_rounding(name, dtype):
    rng = np.random.default_rng(25)
    x = rng.uniform(-3.0, 3.0, 4001).astype(dtype)
    graph = trace(SQUARES[name], x).graph
    slice_ = _Slice(graph)
    operand = next(eqn.out for eqn in graph.equations if eqn.prim.name == "exp")
    operand_bound, square_bound = slice_.bound(operand), slice_.bound(graph.outputs[0])
    bounded = graph.__class__(graph.name, graph.inputs, graph.constants,
                              graph.body + tuple(slice_.emitter.pending), graph.outputs,
                              graph.symbols, graph.shape_guards)
    value = _numpy_values(bounded, [x])
    a, e = np.asarray(value(operand)), np.asarray(value(operand_bound), np.float64)
    limit = np.asarray(value(square_bound), np.float64)
    ours = (a * a).astype(np.float64)  # both sides square their own operand: x * x
    worst = 0.0
    for b in _neighbours_within(a, e):
        gap = np.abs((b * b).astype(np.float64) - ours)
        worst = max(worst, float(np.max(gap / limit)))
    assert worst <= 1.0, (name, worst)
