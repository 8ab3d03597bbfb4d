"""Sums a decision reads are NumPy's add loop (tracer/numpy_sums.py, codegen/numpy_sums.py):
relu training loops carry no rounding bound, so they stay compiled for any trip count and
decide as eager NumPy does.

Before: Coursera's L_layer_model carried a bound for every weight (its bias sums were ours,
a few ulp from NumPy's pairwise sums): 664 of 761 equations were bound arithmetic, and
every call past ~1400 trips left through a relu mask's margin and ran eagerly.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_counted_loop_bounds import L_layer_model

from tracejit import jit
from tracejit.codegen import numpy_loops
from tracejit.tracer.ir import format_graph, parse_graph
from tracejit.tracer.numpy_sums import is_marked
from tracejit.tracer.tracing import trace

pytestmark = pytest.mark.skipif(numpy_loops.reduce_loop(np.float64) is None,
                                reason="NumPy's add loop is not usable here")


def _data(seed, features, samples):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((features, samples))
    Y = (rng.random((1, samples)) > 0.5).astype(float)
    return X, Y


def _assert_bits(got, want):
    parameters, costs = got
    for name, value in want[0].items():
        np.testing.assert_array_equal(parameters[name], value, err_msg=name)
    np.testing.assert_array_equal(np.array(costs), np.array(want[1]))


@pytest.mark.parametrize("seed, layers, samples", [
    (0, [8, 4, 3, 1], 32), (1, [5, 7, 1], 20), (2, [30, 20, 7, 5, 1], 16)])
def test_relu_training_stays_compiled_with_numpys_bits(seed, layers, samples):
    """Every call compiled, the weights NumPy's to the bit, up to 1500 trips (before: the
    4-3-1 net's call of 1500 trips ran eagerly; the deep one's calls at once)."""
    X, Y = _data(seed, layers[0], samples)
    compiled = jit(L_layer_model, cache="memory", compile="sync")
    for count in (3, 7, 120, 1500):
        got = compiled(X, Y, layers, num_iterations=count)
        _assert_bits(got, L_layer_model(X, Y, layers, num_iterations=count))
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["side_exits"] == {}, compiled.explain()
    assert stats["compiled_calls"] >= 3, compiled.explain()


def test_a_nan_appearing_mid_training_decides_as_eager():
    """A learning rate that makes the net diverge: the cost becomes inf, then the weights
    NaN; relu masks on NaN are False on both sides, and the results are eager's."""
    X, Y = _data(4, 6, 16)
    X = X * 40.0
    layers = [6, 5, 1]
    compiled = jit(L_layer_model, cache="memory", compile="sync")
    for count in (3, 9, 60, 200):
        with np.errstate(all="ignore"):
            got = compiled(X, Y, layers, learning_rate=40.0, num_iterations=count)
            want = L_layer_model(X, Y, layers, learning_rate=40.0, num_iterations=count)
        _assert_bits(got, want)
    assert np.isnan(want[0]["W1"]).any(), "the data must make the weights NaN"
    assert compiled.stats()["compiled_calls"] >= 2, compiled.explain()


def _row_mask(x, w):
    return np.where(np.sum(x * w, axis=1, keepdims=True) > 0, 1.0, -1.0)


def _column_mask(x, w):
    return np.where(np.sum(x * w, axis=0) > 0, 1.0, -1.0)


def _tied(rows, length, dtype):
    """Rows whose products sum to 0 exactly but whose partial sums round (each order
    rounds its own way): our sum and NumPy's may differ in sign."""
    rng = np.random.default_rng(rows * length)
    half = rng.standard_normal((rows, length // 2)) * np.exp(rng.uniform(-8, 8, (rows, 1)))
    odd = np.zeros((rows, length % 2))
    x = np.concatenate([half, odd, -half[:, ::-1]], axis=1).astype(dtype)
    w = np.ones_like(x) + np.linspace(0, 1e-3, length, dtype=dtype)
    return x, w


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("length", [7, 128, 300, 5000])
def test_a_mask_on_a_row_sum_is_numpys_decision(dtype, length):
    """A mask on np.sum over the rows' trailing axis decides as NumPy on tied data, with
    no margin exit: every call compiled (before: the sum's bound sent such calls eager)."""
    f = jit(_row_mask, cache="memory")
    x, w = _tied(6, length, dtype)
    for scale in (1.0, 2.0, 0.5):
        np.testing.assert_array_equal(f(x * scale, w), _row_mask(x * scale, w))
    assert f.stats()["eager_calls"] == {}, f.explain()
    assert f.stats()["compiled_calls"] >= 2, f.explain()


def test_a_mask_on_a_column_sum_keeps_its_check():
    """Over a leading axis NumPy adds along the rows (another order): the sum keeps its
    bound; results stay eager's (a margin exit where the sign is in doubt)."""
    f = jit(_column_mask, cache="memory")
    x, w = _tied(6, 300, np.float64)
    x, w = x.T.copy(), w.T.copy()
    for scale in (1.0, 2.0, 0.5):
        np.testing.assert_array_equal(f(x * scale, w), _column_mask(x * scale, w))


def test_only_the_users_own_sums_are_marked():
    """np.sum, x.sum() and np.mean of the user's value are NumPy's add.reduce; a cast
    (dtype=), a mask (where=) and a composite's own sum (np.linalg.norm) are not."""
    def sums(x):
        return (np.sum(x, axis=1), x.sum(), np.mean(x, axis=-1), x.mean(),
                np.sum(x, axis=1, dtype=np.float32), np.sum(x, axis=1, where=x > 0),
                np.linalg.norm(x, axis=1))

    graph = trace(sums, np.ones((3, 4))).graph
    marked = {eqn.out.name for eqn in graph.equations
              if eqn.prim.name == "sum" and is_marked(graph, eqn)}
    producers = {eqn.out.name: eqn for eqn in graph.equations}

    def sum_of(atom):  # the sum behind an output (a mean divides it)
        while atom.name in producers and producers[atom.name].prim.name != "sum":
            atom = producers[atom.name].inputs[0]
        return atom.name

    flags = [sum_of(atom) in marked for atom in graph.outputs]
    assert flags == [True, True, True, True, False, False, False]


def test_the_marker_survives_the_ir_text():
    """The disk cache stores a program's IR as text and schedules the loaded one from it:
    a marked sum must read back marked (else the loaded program's buffers differ from the
    object code's)."""
    graph = trace(lambda x: np.sum(x, axis=1) > 0, np.ones((2, 3))).graph
    again = parse_graph(format_graph(graph))
    assert [is_marked(again, eqn) for eqn in again.equations if eqn.prim.name == "sum"] == [
        True]
