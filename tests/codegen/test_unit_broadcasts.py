"""A symbolic dim that broadcasts as 1 is made a literal 1 by codegen, not by the tracer
(``codegen/unit_broadcasts.py``): the traced graph keeps the dim as the shape rule gave
it, and the compiled program reads the operand as a broadcast (not at the longer dim's
index, out of bounds)."""

from __future__ import annotations

import numpy as np

from tracejit import codegen, tracer


def tail_two_broadcast(x):
    return np.broadcast_to(x[2:], (4, x.shape[0])) + x  # len(x) - 2 == 1 broadcasts


def tail_times_all(x):
    return x[2:] * x[:2]  # one element times two, for len(x) == 3


def test_the_trace_keeps_the_symbolic_dim_and_codegen_broadcasts_it():
    x = np.array([1.0, 2.0, 3.0])
    traced = tracer.trace(tail_two_broadcast, x, dynamic=True)
    assert "reshape" not in [eqn.prim.name for eqn in traced.graph.equations]
    program = codegen.compile(traced.graph)
    reshapes = [eqn for eqn in program.graph.equations if eqn.prim.name == "reshape"]
    assert [eqn.out.aval.shape for eqn in reshapes] == [(1,)]
    np.testing.assert_array_equal(program(x)[0], tail_two_broadcast(x))


def test_a_pointwise_operand_of_one_element_broadcasts():
    x = np.array([1.0, 2.0, 5.0])
    program = codegen.compile(tracer.trace(tail_times_all, x, dynamic=True).graph)
    np.testing.assert_array_equal(program(x)[0], tail_times_all(x))
