"""Nested loops (issue 13): a loop inside a captured loop's body is itself captured, as a
``loop`` equation inside the body sub-graph; its body and bounds may depend on the outer
index. Eager vs traced vs compiled, the IR (verifier, printer, parser), one compile per
bucket. Parallel maps (whole-array rewriting) are tested in
tests/codegen/test_parallel_map.py."""

import numpy as np
import pytest
from model_corpus import conv_forward_naive

import tracejit as tj
from tracejit.tracer.ir import format_graph, parse_graph, verify
from tracejit.tracer.ops.control import loop_p
from tracejit.tracer.tracing import trace


def row_sums(x, w):
    """Nested accumulation: the inner loop carries ``s`` (not a parallel map), the outer
    loop writes one row per iteration and accumulates a total."""
    total = 0.0
    out = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = x[i, 0] * 0.0
        for j in range(x.shape[1]):
            s = s + x[i, j] * w[j]
        out[i] = s
        total += s
    return out, total


def prefix_products(x):
    """A carried value in the inner loop that reads the outer index's row."""
    acc = np.ones(x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            acc = acc * 0.5 + x[i, j]
    return acc


def loops_in(graph):
    return [eqn for eqn in graph.equations if eqn.prim is loop_p]


def nested_loops_in(graph):
    return [inner for eqn in loops_in(graph)
            for inner in loops_in(eqn.params_dict["body"])]


def conv_args(rng, shape, filters=4, channels=2, size=3):
    return (rng.standard_normal((1, channels, *shape)),
            rng.standard_normal((filters, channels, size, size)), rng.standard_normal(filters))


def test_conv_trace_nests_three_loops_and_round_trips():
    rng = np.random.default_rng(0)
    x, w, b = conv_args(rng, (7, 6))
    traced = trace(conv_forward_naive, x, w, b, 1, 1, dynamic=True)
    np.testing.assert_allclose(traced.outputs, conv_forward_naive(x, w, b, 1, 1), rtol=1e-12)
    graph = traced.graph
    outer = loops_in(graph)  # iteration 0 of each loop is peeled: its inner loops too
    assert len(outer) == 3
    middle = loops_in(outer[-1].params_dict["body"])
    assert middle and loops_in(middle[-1].params_dict["body"])
    verify(graph)
    text = format_graph(graph)
    assert text.count("loop(") >= 3
    assert format_graph(parse_graph(text, graph.constant_table())) == text


def test_inner_body_reads_the_outer_index_affinely():
    rng = np.random.default_rng(1)
    x, w, b = conv_args(rng, (8, 9))
    graph = trace(conv_forward_naive, x, w, b, 2, 0, dynamic=True).graph
    outer = loops_in(graph)[-1]
    index = outer.params_dict["index"]
    inner = loops_in(outer.params_dict["body"])[-1]
    text = format_graph(inner.params_dict["body"])
    assert f"2*{index}" in text  # x_pad[:, :, i*2:i*2+HH] inside the j loop


@pytest.mark.parametrize("stride, pad, shape", [(1, 1, (7, 6)), (1, 0, (5, 8)),
                                                (2, 1, (9, 7)), (2, 0, (11, 13))])
def test_conv_compiled_matches_eager(stride, pad, shape):
    rng = np.random.default_rng(stride * 10 + pad)
    f = tj.jit(conv_forward_naive, dynamic=True, cache="memory",
               static_argnames=("stride", "pad"))
    for _ in range(2):  # the traced call, then the compiled one
        args = conv_args(rng, shape)
        np.testing.assert_allclose(f(*args, stride, pad), conv_forward_naive(*args, stride, pad),
                                   rtol=1e-12, atol=1e-12)
    assert f.stats()["compiles"] == 1


def test_nested_accumulation_exact_over_sizes():
    rng = np.random.default_rng(2)
    f = tj.jit(row_sums, dynamic=True, cache="memory", buckets=[16])
    for shape in [(5, 6), (7, 3), (3, 7), (16, 16), (11, 13)]:
        x, w = rng.standard_normal(shape), rng.standard_normal(shape[1])
        for got, want in zip(f(x, w), row_sums(x, w)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert f.stats()["compiles"] == 1
    graph = trace(row_sums, rng.standard_normal((5, 6)), rng.standard_normal(6),
                  dynamic=True).graph
    assert nested_loops_in(graph)


@pytest.mark.parametrize("shape", [(3, 3), (4, 5), (7, 3), (13, 11)])
def test_carried_inner_value_not_a_parallel_map(shape):
    rng = np.random.default_rng(3)
    f = tj.jit(prefix_products, dynamic=True, cache="memory")
    for _ in range(2):
        x = rng.standard_normal(shape)
        np.testing.assert_allclose(f(x), prefix_products(x), rtol=1e-12, atol=1e-12)


def triangular(x):
    """The inner trip count depends on the outer index: not captured as a nested loop
    (its recordings differ); must stay exact."""
    out = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = x[0] * 0.0
        for j in range(i):
            s = s + x[j]
        out[i] = s
    return out


def test_triangular_nest_stays_exact():
    rng = np.random.default_rng(4)
    f = tj.jit(triangular, dynamic=True, cache="memory")
    for n in (6, 7, 5):
        x = rng.standard_normal(n)
        np.testing.assert_allclose(f(x), triangular(x), rtol=1e-12, atol=1e-12)
