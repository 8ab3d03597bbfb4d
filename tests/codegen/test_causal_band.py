"""A batched product read only through a causal mask skips the masked blocks
(``codegen/causal_band.py`` finds the band, ``codegen/gemm_batched.py`` computes only the
blocks that reach it).

Each case runs eagerly and compiled (float32 and float64; 1, prime and odd sizes; one
position; NaN and inf in the scores; non-contiguous inputs; the pool's split by entry and
the calling thread; the ``blas`` setting) and checks which reach the kernel was given, so a
case that silently stops skipping (or skips where it must not) fails.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.codegen import blas, gemm
from tracejit.codegen import matmul as matmul_module
from tracejit.codegen.causal_band import band_reach

pytestmark = pytest.mark.skipif(
    not gemm.supported(), reason="the banded product is the own GEMM's batched entry")

DTYPES = [np.float32, np.float64]


def causal_scores(query, key, offset=0, fill=-np.inf, scale=None):
    """``where(tril(ones), q @ k.T * scale, fill)``: the mask a constant (static shapes)."""
    rows, columns = query.shape[-2], key.shape[-2]
    mask = np.tril(np.ones((rows, columns), bool), offset)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    return np.where(mask, query @ key.swapaxes(-1, -2) * scale, fill)


def attention(query, key, value):
    return nn.softmax(causal_scores(query, key), axis=-1) @ value


# name: (function, operand shapes, the reach the score product must be given, and the one
# the weights @ value product must be given)
CASES = {
    "attention": (attention, [(2, 3, 9, 5), (2, 3, 9, 5), (2, 3, 9, 4)], 0, 0),
    "attention, 64 entries of 128 (split by entry)": (
        attention, [(8, 8, 128, 32), (8, 8, 128, 32), (8, 8, 128, 32)], 0, 0),
    "attention, one position": (attention, [(3, 1, 1, 7), (3, 1, 1, 7), (3, 1, 1, 2)], None,
                                None),
    "attention, prime sizes": (attention, [(1, 2, 37, 3), (1, 2, 37, 3), (1, 2, 37, 1)], 0,
                               0),
    "scores alone": (lambda q, k: causal_scores(q, k), [(4, 17, 8), (4, 17, 8)], 0, None),
    "band of 3": (lambda q, k: causal_scores(q, k, offset=3), [(2, 23, 6), (2, 23, 6)], 3, None),
    "fewer queries than keys": (lambda q, k: causal_scores(q, k, offset=11),
                                [(3, 5, 4), (3, 16, 4)], 11, None),
    "other fill, multiply then add": (
        lambda q, k: np.where(np.tril(np.ones((19, 19), bool)),
                              (q @ k.swapaxes(-1, -2)) * 0.5 + 2.0, -1e9),
        [(2, 19, 5), (2, 19, 5)], 0, None),
    "scores returned too (every element read)": (
        lambda q, k: (q @ k.swapaxes(-1, -2),
                      np.where(np.tril(np.ones((13, 13), bool)), q @ k.swapaxes(-1, -2), 0.0)),
        [(2, 13, 3), (2, 13, 3)], None, None),
    "upper mask (nothing to skip)": (
        lambda q, k: np.where(np.triu(np.ones((11, 11), bool)), q @ k.swapaxes(-1, -2), 0.0),
        [(2, 11, 3), (2, 11, 3)], None, None),
    "mask the other way (false kept)": (
        lambda q, k: np.where(np.tril(np.ones((11, 11), bool)), 0.0, q @ k.swapaxes(-1, -2)),
        [(2, 11, 3), (2, 11, 3)], None, None),
    "softmax written out, no stop_gradient": (
        lambda q, k, v: _softmax_by_hand(causal_scores(q, k)) @ v,
        [(2, 11, 4), (2, 11, 4), (2, 11, 3)], 0, 0),
    "weights with a finite fill (not exactly 0)": (
        lambda q, k, v: nn.softmax(causal_scores(q, k, fill=-1e4), axis=-1) @ v,
        [(2, 11, 4), (2, 11, 4), (2, 11, 3)], 0, None),
}


def _softmax_by_hand(scores):
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@pytest.fixture
def reaches(monkeypatch):
    """The reaches each batched product was given while compiling: ``{"product": [...],
    "weights": [...]}`` in kernel order."""
    found = {"product": [], "weights": []}
    for kind in found:
        original = getattr(matmul_module, f"{kind}_reach")

        def recording(kernel, original=original, kind=kind):
            reach = original(kernel)
            found[kind].append(reach)
            return reach

        monkeypatch.setattr(matmul_module, f"{kind}_reach", recording)
    return found


def _inputs(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


def _check(got, want, dtype):
    tolerance = 3e-5 if dtype == np.float32 else 1e-12
    for actual, expected in zip(*(value if isinstance(value, tuple) else (value,)
                                  for value in (got, want))):
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance,
                                   equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize("name", list(CASES))
def test_banded_products_match_numpy(name, dtype, reaches):
    function, shapes, reach, depth = CASES[name]
    compiled = tj.jit(cache="memory")(function)
    for seed in range(2):  # the second call reuses the workspace the first left behind
        arrays = _inputs(shapes, dtype, seed)
        compiled(*arrays)
        _check(compiled(*arrays), function(*arrays), dtype)
    assert reaches["product"] and reaches["product"][0] == reach, reaches
    assert reaches["weights"][-1] == depth, reaches  # the last product reads the weights


@pytest.mark.parametrize("name", ["attention", "scores alone", "band of 3"])
def test_nan_and_inf_in_the_operands(name):
    """Non-finite scores inside the band give NaN/inf as in NumPy; outside it they are
    masked either way (the skipped blocks never compute them)."""
    function, shapes, _, _ = CASES[name]
    arrays = _inputs(shapes, np.float32, 3)
    query, key = arrays[0], arrays[1]
    query[..., 0, 0] = np.nan  # row 0: in the band only at column 0
    key[..., -1, 1] = np.inf  # the last key: in the band only for the last rows
    compiled = tj.jit(cache="memory")(function)
    with np.errstate(all="ignore"):
        want = function(*arrays)
        compiled(*arrays)  # the first call returns the trace's own (NumPy) result
        _check(compiled(*arrays), want, np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize("where", ["masked rows", "rows in the band", "nan in a masked row"])
def test_values_past_the_band_that_are_not_finite(where, dtype, reaches):
    """``weights @ value`` leaves out ``0 * value[j]`` past the band, which NumPy computes:
    an inf or NaN there makes NaN, so an entry whose value holds any is computed whole."""
    function = CASES["attention"][0]
    # 37 positions: the first block of rows (BAND_ROWS) leaves keys 16.. out
    query, key, value = _inputs([(2, 3, 37, 5), (2, 3, 37, 5), (2, 3, 37, 4)], dtype, 12)
    if where == "masked rows":
        value[0, 1, -1, :] = np.inf  # the last key: past the band for all rows but the last
    elif where == "rows in the band":
        value[1, 2, 0, 1] = -np.inf  # the first key: in every row's band
    else:
        value[1, 0, -2, 3] = np.nan
    compiled = tj.jit(cache="memory")(function)
    with np.errstate(all="ignore"):
        want = function(query, key, value)
        compiled(query, key, value)  # the first call returns the trace's own result
        got = compiled(query, key, value)
    assert not np.isfinite(want).all()
    _check(got, want, dtype)
    assert reaches["weights"][-1] == 0


def test_non_contiguous_inputs():
    function, shapes, _, _ = CASES["attention"]
    compiled = tj.jit(cache="memory")(function)
    wide = _inputs([(*shape[:-1], 2 * shape[-1]) for shape in shapes], np.float32, 4)
    arrays = [array[..., ::2] for array in wide]
    compiled(*arrays)  # the first call returns the trace's own result
    _check(compiled(*arrays), function(*arrays), np.float32)


ONE_THREAD = textwrap.dedent("""
    import math, numpy as np, tracejit as tj
    from tracejit import nn
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((8, 8, 128, 32)).astype(np.float32) for _ in range(3))

    def attention(q, k, v):
        mask = np.tril(np.ones((128, 128), bool))
        scores = np.where(mask, q @ k.swapaxes(-1, -2) / math.sqrt(32), -np.inf)
        return nn.softmax(scores, axis=-1) @ v

    compiled = tj.jit(cache="memory")(attention)
    compiled(q, k, v)  # the first call returns the trace's own result
    got, want = compiled(q, k, v), attention(q, k, v)
    assert not compiled.stats()["eager_calls"]
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=3e-5)
    print("ok")
""")


def test_one_thread_runs_the_blocks_inline():
    """With one pool thread the entries run on the calling thread (the batched entry's
    inline branch), banded too; the default pool splits them by entry (the table above)."""
    environment = {**os.environ, "TRACEJIT_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", ONE_THREAD], capture_output=True,
                            text=True, env=environment, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


@pytest.mark.skipif(not blas.openblas(), reason="no OpenBLAS")
def test_the_blas_setting_computes_every_block():
    function, shapes, _, _ = CASES["band of 3"]
    with blas.gemm_override("blas"):
        compiled = tj.jit(cache="memory")(function)
        arrays = _inputs(shapes, np.float64, 6)
        compiled(*arrays)  # the first call returns the trace's own result
        _check(compiled(*arrays), function(*arrays), np.float64)


def test_gradients():
    """``value_and_grad`` through causal attention against finite differences."""
    def loss(query, key, value):
        return np.sum(attention(query, key, value) ** 2)

    query, key, value = _inputs([(2, 7, 3), (2, 7, 3), (2, 7, 2)], np.float64, 8)
    step = tj.jit(cache="memory")(tj.value_and_grad(loss, argnums=(0, 1, 2)))
    step(query, key, value)  # the first call returns the trace's own result
    got_value, got_grads = step(query, key, value)
    np.testing.assert_allclose(got_value, loss(query, key, value), rtol=1e-10)
    arguments = [query, key, value]
    for position, grad in enumerate(got_grads):
        numeric = np.zeros_like(arguments[position])
        for index in np.ndindex(numeric.shape):
            losses = []
            for step in (1e-6, -1e-6):
                moved = [array.copy() for array in arguments]
                moved[position][index] += step
                losses.append(loss(*moved))
            numeric[index] = (losses[0] - losses[1]) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


def test_bucketed_lengths_are_not_banded(reaches):
    """With a symbolic sequence length the mask is computed, not a constant: no band."""
    def function(query, key):
        positions = np.arange(query.shape[1])
        mask = positions[:, None] >= positions[None, :]
        return np.where(mask, query @ key.swapaxes(-1, -2), -np.inf)

    compiled = tj.jit(cache="memory", buckets={"query": {1: "pow2"}, "key": {1: "pow2"}})(
        function)
    for length in (5, 8, 3):
        query, key = _inputs([(2, length, 4), (2, length, 4)], np.float32, length)
        compiled(query, key)  # a bucket's first call returns the trace's own result
        _check(compiled(query, key), function(query, key), np.float32)
    assert all(reach is None for found in reaches.values() for reach in found)


@pytest.mark.parametrize("mask, reach", [
    (np.tril(np.ones((5, 5), bool)), 0),
    (np.tril(np.ones((5, 5), bool), -2), 0),  # rows without a true element are ignored
    (np.tril(np.ones((5, 8), bool), 1), 1),
    (np.tril(np.ones((5, 8), bool), 6), 6),  # only row 0 leaves a column out
    (np.tril(np.ones((5, 8), bool), 7), None),  # no row does
    (np.zeros((4, 4), bool), None),
    (np.eye(6, dtype=bool), 0),
    (np.stack([np.tril(np.ones((6, 6), bool)), np.tril(np.ones((6, 6), bool), 2)]), 2),
])
def test_band_reach(mask, reach):
    assert band_reach(mask) == reach
    if reach is not None:
        rows, columns = np.indices(mask.shape[-2:])
        assert not (mask & (columns > rows + reach)).any()
