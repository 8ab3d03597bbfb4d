"""A relu's backward mask reads the relu's output (``codegen/relu_masks.py``): compiled
results equal NumPy for every relu form and mask, on NaN, infinities and signed zeros;
masks that would differ on the output (``<``, ``>=``, ``==``) are not rewritten; and the
relu of a train step fuses into the matmul that produces its input.
"""

from __future__ import annotations

import numpy as np
import pytest
from compiled_checks import compiled

from tracejit import tracer
from tracejit.codegen.relu_masks import read_relu_outputs
from tracejit.tracer.ir import parse_graph, verify
from tracejit.tracer.passes import optimize

RELUS = {
    "where(pre <= 0, 0, pre)": lambda pre: np.where(pre <= 0, 0, pre),
    "where(0 >= pre, 0, pre)": lambda pre: np.where(0 >= pre, 0, pre),
    "maximum(pre, 0)": lambda pre: np.maximum(pre, 0),
    "maximum(0.0, pre)": lambda pre: np.maximum(0.0, pre),
}
# mask -> whether it compares the same on the relu's output
MASKS = {
    "pre > 0": (lambda pre: pre > 0, True),
    "0 < pre": (lambda pre: 0 < pre, True),
    "pre <= 0": (lambda pre: pre <= 0, True),
    "0 >= pre": (lambda pre: 0 >= pre, True),
    "pre < 0": (lambda pre: pre < 0, False),
    "pre >= 0": (lambda pre: pre >= 0, False),
    "pre == 0": (lambda pre: pre == 0, False),
}
SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5, 1e-45, -1e-45,
                     3.0, -3.0, 0.0, 7.0, -7.0, 2.0, -2.0], np.float32)


def step(relu, mask):
    def function(pre, gradient):
        hidden = relu(pre * 1.0)  # pre * 1.0: the relu's input is no graph input
        return hidden * 2.0, np.where(mask(pre * 1.0), gradient, 0.0)

    return function


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("relu_name", list(RELUS))
def test_masks_equal_numpy_and_only_safe_ones_read_the_output(relu_name, mask_name):
    mask, safe = MASKS[mask_name]
    function = step(RELUS[relu_name], mask)
    gradient = np.arange(SPECIALS.size, dtype=np.float32) + 1
    graph = optimize(tracer.trace(function, SPECIALS, gradient).graph)  # one pre * 1.0
    rewritten = read_relu_outputs(graph)
    verify(rewritten)
    assert parse_graph(str(rewritten), rewritten.constant_table()) == rewritten  # disk cache
    changed = rewritten.body != graph.body
    assert changed == safe
    program = compiled(("relu masks", relu_name, mask_name), function, SPECIALS, gradient)
    for actual, want in zip(program(SPECIALS, gradient), function(SPECIALS, gradient)):
        np.testing.assert_array_equal(actual, want)
        assert np.array_equal(np.signbit(actual), np.signbit(want))


def train_step(x, w1, w2, d_out):
    """A hidden layer's forward and backward written by hand (as benchmarks/workloads.py's
    MLP step)."""
    pre = x @ w1
    hidden = np.where(pre <= 0, 0, pre)
    out = hidden @ w2
    d_pre = np.where(pre > 0, d_out @ w2.T, 0)
    return out, x.T @ d_pre


def test_train_step_relu_fuses_into_its_matmul():
    rng = np.random.default_rng(0)
    x, w1, w2, d_out = (rng.standard_normal(shape).astype(np.float32)
                        for shape in ((16, 12), (12, 20), (20, 3), (16, 3)))
    x[0, :] = 0.0  # a row of exact zeros: pre == 0 there, masked out on both sides
    program = compiled(("relu masks", "train step"), train_step, x, w1, w2, d_out)
    first = program.kernels[0]
    assert first.kind == "matmul" and first.root != program.graph.equations[0].out.name
    assert not any(kernel.kind == "pointwise" and "where" in kernel.name
                   for kernel in program.kernels), [k.name for k in program.kernels]
    for actual, want in zip(program(x, w1, w2, d_out), train_step(x, w1, w2, d_out)):
        np.testing.assert_allclose(actual, want, rtol=1e-5, atol=1e-5)
