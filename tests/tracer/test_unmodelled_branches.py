"""A mask on a checked value selecting a branch with no error model.

``np.where(pre > 0, d @ w.T, 0)``: when ``pre`` carries a bound (a float32 ``einsum`` of exact
values, or any product under ``TRACEJIT_GEMM=own``) its comparison is checked, but only where
a flip would move the result beyond rounding, judged by the branches' own bounds. The branch
``d @ w.T`` (a float32 product of inexact values) has no error model: an infinite bound,
which made every flip look like rounding, so the check never fired and compiled calls
flipped the mask where ``pre``'s sums are ties (63,423 of 131,072 elements, each off by
``|d @ w.T|``). Ties come from data whose halves cancel: ``x = [a, -a reversed]`` against
``w = [W; W reversed]`` sums to exact zeros that each order of the sums rounds its own way.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen import blas


def einsum_layer(x, w1, w2, d):
    pre = np.einsum("ik,kj->ij", x, w1)
    hidden = np.maximum(pre, 0)
    return np.where(pre > 0, (hidden @ w2) @ w2.T + d, 0)


def matmul_layer(x, w1, w2, d):
    pre = x @ w1
    hidden = np.maximum(pre, 0)
    return np.where(pre > 0, (hidden @ w2) @ w2.T + d, 0)


def tied_inputs(rows, half, columns, seed=1):
    """Inputs whose ``x @ w1`` is an exact zero everywhere, rounded per order of the sums."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, half)).astype(np.float32)
    w = (rng.standard_normal((half, columns)) / np.sqrt(2 * half)).astype(np.float32)
    x = np.concatenate([a, -a[:, ::-1]], axis=1)
    w1 = np.concatenate([w, w[::-1]], axis=0)
    w2 = (rng.standard_normal((columns, 10)) / np.sqrt(columns)).astype(np.float32)
    d = np.ones((rows, columns), np.float32)
    return x, w1, w2, d


def calls(function, arguments, setting, count=3):
    jitted = jit(cache="memory")(function)
    with blas.gemm_override(setting):
        results = [jitted(*arguments) for _ in range(count)]
    return jitted, results


@pytest.mark.parametrize("rows, half, columns", [(64, 96, 128), (37, 131, 67), (256, 392, 512)])
@pytest.mark.parametrize("function, setting", [(einsum_layer, "auto"), (matmul_layer, "own")])
def test_a_checked_mask_selecting_an_unmodelled_branch_decides_as_numpy(function, setting, rows,
                                                                         half, columns):
    arguments = tied_inputs(rows, half, columns)
    expected = function(*arguments)
    _, results = calls(function, arguments, setting)
    for result in results:
        flipped = int(np.sum((result != 0) != (expected != 0)))
        assert flipped == 0, f"{flipped} mask elements differ from NumPy's"
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)


def test_a_mask_numpy_computes_stays_compiled():
    """The same layer as NumPy's matmul (the default rule): the product a decision reads
    is NumPy's own BLAS call, exact, so nothing is checked and every call is compiled."""
    arguments = tied_inputs(64, 96, 128)
    jitted, results = calls(matmul_layer, arguments, "auto")
    np.testing.assert_array_equal(results[-1] != 0, matmul_layer(*arguments) != 0)
    stats = jitted.stats()
    assert stats["compiled_calls"] == 2 and not stats["eager_calls"], stats


def test_ordinary_data_with_an_unmodelled_branch_is_checked_not_refused():
    """Away from ties the einsum layer's check passes: the branch's missing bound is what
    a flip is measured against, not a reason to run every call eagerly."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 1.0, (16, 8)).astype(np.float32)
    w1 = rng.uniform(0.5, 1.0, (8, 32)).astype(np.float32)
    w2 = (rng.standard_normal((32, 4)) / 6).astype(np.float32)
    d = np.ones((16, 32), np.float32)
    jitted, results = calls(einsum_layer, (x, w1, w2, d), "auto")
    np.testing.assert_allclose(results[-1], einsum_layer(x, w1, w2, d), rtol=1e-5, atol=1e-6)
    assert jitted.stats()["compiled_calls"] >= 2, jitted.stats()


def tensordot_layer(x, w1, w2, d):
    pre = np.tensordot(x, w1, 1)
    hidden = np.maximum(pre, 0)
    return np.where(pre > 0, (hidden @ w2) @ w2.T + d, 0)


def tensordot_pairs_layer(x, w1, w2, d):
    pre = np.tensordot(x, w1, axes=([-1], [0]))
    return np.where(pre > 0, (np.maximum(pre, 0) @ w2) @ w2.T + d, 0)


@pytest.mark.parametrize("function", [tensordot_layer, tensordot_pairs_layer])
@pytest.mark.parametrize("rows, half, columns", [(64, 96, 128), (1, 131, 67), (256, 392, 512)])
def test_a_mask_on_tensordot_is_numpys_and_compiled(function, rows, half, columns):
    """np.tensordot of a's last axis with b's first is NumPy's np.dot of the two matrices,
    the BLAS call its matmul makes: compiled, the mask decides as NumPy's even on ties."""
    arguments = tied_inputs(rows, half, columns)
    expected = function(*arguments)
    jitted, results = calls(function, arguments, "auto")
    for result in results:
        np.testing.assert_array_equal(result != 0, expected != 0)
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    stats = jitted.stats()
    assert stats["compiled_calls"] == 2 and not stats["eager_calls"], stats


def test_a_mask_on_a_batched_tensordot_decides_as_numpy():
    """A 3-D x against a matrix: NumPy reshapes x to rows (a view) for the same call."""
    x, w1, w2, d = tied_inputs(48, 96, 128)
    x3, d3 = x.reshape(6, 8, -1), d.reshape(6, 8, -1)
    expected = tensordot_layer(x3, w1, w2, d3)
    jitted, results = calls(tensordot_layer, (x3, w1, w2, d3), "auto")
    np.testing.assert_array_equal(results[-1] != 0, expected != 0)
    assert jitted.stats()["compiled_calls"] == 2, jitted.stats()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpys_tensordot_and_dot_are_its_matmul_bit_for_bit(dtype):
    """What ``numpy_tensordot`` rests on, for the shapes NumPy's matmul treats apart (one
    row or column: gemv; one element: dot; x @ x.T: syrk; else gemm)."""
    rng = np.random.default_rng(0)
    for m, k, n in [(1, 784, 1), (1, 300, 257), (130, 300, 1), (64, 784, 1024), (7, 1, 33),
                    (33, 1000, 33), (257, 5, 130)]:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        expected = (a @ b).view(np.uint8)
        np.testing.assert_array_equal(np.tensordot(a, b, 1).view(np.uint8), expected)
        np.testing.assert_array_equal(np.dot(a, b).view(np.uint8), expected)
        square = rng.standard_normal((m, k)).astype(dtype)
        np.testing.assert_array_equal(np.tensordot(square, square.T, 1), square @ square.T)


def test_inner_of_a_3d_array_keeps_its_check():
    """np.inner(x, v) of a 3-D x sums by NumPy's own dot loop, not BLAS: its mask is still
    checked (here: eager calls on ties), never taken as NumPy's matmul."""
    def inner_mask(x, v, d):
        return np.where(np.inner(x, v) > 0, d * 2, 0)

    x, w1, _, _ = tied_inputs(48, 96, 4)
    x3, v = x.reshape(6, 8, -1), np.ascontiguousarray(w1[:, 0])
    d = np.ones((6, 8), np.float32)
    _, results = calls(inner_mask, (x3, v, d), "auto")
    np.testing.assert_array_equal(results[-1], inner_mask(x3, v, d))
