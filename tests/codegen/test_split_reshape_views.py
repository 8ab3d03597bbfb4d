"""Reshapes that only split dims are read through, not copied first, and a small right
matmul operand that is copied anyway is stored untransposed (``codegen/schedule.py``,
``codegen/view_lowering.py``'s ``split_reshape_index``): attention's
``qkv[..., a:b].reshape(batch, seq, heads, size).transpose(0, 2, 1, 3)`` is one gather
kernel per operand, and ``key.transpose(0, 1, 3, 2)`` is stored as the GEMM reads it.

Each case runs eagerly and compiled (``tj.jit``) on odd, prime, 0 and 1 sizes, NaN and
infinities, non-contiguous inputs and symbolic (bucketed) dims, and checks which values
the schedule gives buffers, so that a case that silently stops taking the new path fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn, tracer
from tracejit.codegen.schedule import schedule as schedule_of
from tracejit.codegen.view_lowering import split_reshape_groups
from tracejit.runtime.jit import LAYOUT_REASON


def split_heads(x, heads):
    batch, seq, width = x.shape
    return x.reshape(batch, seq, heads, width // heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    batch, heads, seq, size = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * size)


def attention(qkv, heads):
    """Causal attention over a fused qkv projection, as examples/transformer_block.py."""
    query, key, value = (split_heads(part, heads) for part in np.split(qkv, 3, axis=-1))
    scores = query @ key.transpose(0, 1, 3, 2) / math.sqrt(query.shape[-1])
    positions = np.arange(qkv.shape[1])
    scores = np.where(positions[:, None] >= positions[None, :], scores, -np.inf)
    return merge_heads(nn.softmax(scores, axis=-1) @ value)


# name: (function of x, x's shape); every function reshapes a value that is no buffer.
CASES = {
    "split last dim of a sum": (lambda x: (x + 1.0).reshape(3, 5, 2, 7), (3, 5, 14)),
    "split then transpose": (lambda x: split_heads(x * 2.0, 4), (2, 7, 12)),
    "split of a slice": (lambda x: split_heads(x[:, :, 6:18], 3), (2, 5, 24)),
    "split of a strided slice": (lambda x: (x[:, ::2] - 1.0).reshape(3, 11, 2, 10),
                                 (3, 21, 20)),
    "split first dim": (lambda x: np.exp(x).reshape(2, 3, 7).sum(axis=0), (6, 7)),
    "split into three": (lambda x: (x * x).reshape(2, 3, 5, 11), (30, 11)),
    "split with unit dims": (lambda x: (x - 3.0).reshape(1, 2, 1, 3, 1), (6,)),
    "unit source dim": (lambda x: np.tanh(x).reshape(2, 3, 4), (2, 1, 12)),
    "split of a transpose": (lambda x: (x.T + 0.5).reshape(5, 2, 3), (6, 5)),
    "split of a split": (lambda x: (x + 1.0).reshape(4, 6).reshape(2, 2, 3, 2), (24,)),
    "merge after a split": (lambda x: split_heads(x + 1.0, 2).reshape(3, 2 * 7 * 4),
                            (3, 7, 8)),
    "split of a reduction": (lambda x: x.sum(axis=1).reshape(2, 5) + 1.0, (10, 3)),
    "softmax over a split": (lambda x: nn.softmax((x + 1.0).reshape(3, 5, 2, 4), axis=-1),
                             (3, 5, 8)),
    "row sums of a split, broadcast back": (
        lambda x: (np.exp(x).reshape(4, 3, 5) - np.exp(x).reshape(4, 3, 5).sum(
            axis=-1, keepdims=True)).reshape(12, 5), (12, 5)),
    "prime": (lambda x: (x + 1.0).reshape(13, 1, 7)[:, :, 2:5], (13, 7)),
    "zero size": (lambda x: split_heads(x + 1.0, 2), (2, 0, 6)),
    "one element": (lambda x: (x + 1.0).reshape(1, 1, 1), (1,)),
    "attention": (lambda x: attention(x, 4), (2, 9, 3 * 4 * 5)),
    "attention, one head of one": (lambda x: attention(x, 1), (1, 1, 3)),
}


def _special_values(shape, seed):
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = values.reshape(-1)
    for position, special in zip((0, 3, 7), (np.nan, np.inf, -np.inf)):
        if position < flat.size:
            flat[position] = special
    return values


def _check(actual, expected):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=2e-6, equal_nan=True)


def _check_compiled(compiled, function, x):
    """The traced call and then a compiled one (a first call's result is the trace's,
    computed by NumPy) against eager NumPy. A non-contiguous argument that a decision on a
    product reads (attention's softmax max over q @ k.T) runs eagerly instead: NumPy hands
    it to BLAS as it is (codegen/program._layout_checked)."""
    for _ in range(2):
        with np.errstate(all="ignore"):
            _check(compiled(x), function(x))
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 1 or (
        not x.flags.c_contiguous and set(stats["eager_calls"]) == {LAYOUT_REASON}), stats


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_matches_eager(name):
    function, shape = CASES[name]
    compiled = tj.jit(cache="memory")(function)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        with np.errstate(all="ignore"):
            _check(compiled(x), function(x))
    assert not sum(compiled.stats()["eager_calls"].values()), compiled.stats()["eager_calls"]


@pytest.mark.parametrize("name", [name for name in CASES if "attention" not in name])
def test_nan_and_infinities(name):
    """(Attention's softmax of a row holding inf is NaN in both: no useful check.)"""
    function, shape = CASES[name]
    compiled = tj.jit(cache="memory")(function)
    _check_compiled(compiled, function, _special_values(shape, 3))


@pytest.mark.parametrize("name", ["split then transpose", "split of a slice", "attention"])
def test_non_contiguous_inputs(name):
    function, shape = CASES[name]
    compiled = tj.jit(cache="memory")(function)
    wide = np.random.default_rng(5).standard_normal((*shape[:-1], 2 * shape[-1]))
    x = wide.astype(np.float32)[..., ::2]  # every other column: a strided view
    assert not x.flags.c_contiguous
    _check_compiled(compiled, function, x)
    transposed = np.random.default_rng(6).standard_normal(shape[::-1]).astype(np.float32).T
    _check_compiled(compiled, function, transposed)


def test_symbolic_sequence_length():
    """The sequence dim is symbolic (bucketed): kept whole by the split, the heads'
    split of the static width still reads through."""
    compiled = tj.jit(cache="memory", buckets={"x": {1: "pow2"}})(lambda x: attention(x, 4))
    for seq in (5, 7, 8, 13, 16, 1):
        x = np.random.default_rng(seq).standard_normal((2, seq, 48)).astype(np.float32)
        _check(compiled(x), attention(x, 4))
    assert not sum(compiled.stats()["eager_calls"].values())


def _temp_shapes(function, shape):
    """The shapes of the values the schedule gives buffers to (besides inputs/outputs)."""
    example = np.ones(shape, np.float32)
    graph = tracer.trace(function, example).graph
    schedule = schedule_of(graph)
    return sorted(tuple(buffer.shape) for buffer in schedule.buffers.values()
                  if buffer.kind == "temp")


def test_split_heads_of_a_slice_is_one_gather():
    """No buffer for the slice or the sum: the transpose reads through the split."""
    temps = _temp_shapes(lambda x: split_heads(x[:, :, 6:18] + 1.0, 3) @ np.ones(
        (4, 2), np.float32), (2, 5, 24))
    assert temps == [(2, 3, 5, 4)]  # the transposed heads, read by the matmul


def test_attention_stores_the_keys_transposed():
    """query, keys (transposed: (2, 4, 5, 9)) and values: one buffer each, no slices."""
    temps = _temp_shapes(lambda x: attention(x, 4), (2, 9, 60))
    assert (2, 4, 5, 9) in temps
    assert (2, 9, 20) not in temps and temps.count((2, 4, 9, 5)) == 3  # q, v, and p @ v


def test_keys_read_twice_keep_one_buffer():
    """When the transposed operand's base has another reader, the base keeps its buffer
    and the matmul reads it transposed."""
    def twice(x):
        key = split_heads(x * 2.0, 2)
        return key @ key.transpose(0, 1, 3, 2) + key.sum()

    x = np.random.default_rng(2).standard_normal((2, 5, 6)).astype(np.float32)
    _check(tj.jit(cache="memory")(twice)(x), twice(x))
    assert (2, 2, 3, 5) not in _temp_shapes(twice, (2, 5, 6))


def test_large_transposed_operand_keeps_its_base():
    """Above the direct path's size the base is stored and read transposed (as before)."""
    def product(x):
        return (x + 1.0) @ (x * 2.0).reshape(1, 300, 300).transpose(0, 2, 1)

    temps = _temp_shapes(product, (1, 300, 300))
    assert (1, 300, 300) in temps
    x = np.random.default_rng(4).standard_normal((1, 300, 300)).astype(np.float32)
    np.testing.assert_allclose(tj.jit(cache="memory")(product)(x), product(x), rtol=1e-4,
                               atol=1e-3)


@pytest.mark.parametrize("source, out, groups", [
    ((8, 128, 256), (8, 128, 8, 32), [(0, [0]), (1, [1]), (2, [2, 3])]),
    ((6,), (2, 1, 3), [(0, [0, 2])]),
    ((2, 1, 12), (2, 3, 4), [(0, [0]), (2, [1, 2])]),
    ((30, 11), (2, 3, 5, 11), [(0, [0, 1, 2]), (1, [3])]),
    ((6, 7), (7, 6), None),  # neither a split nor a merge
    ((2, 6), (12,), None),  # a merge
    ((4, 6), (2, 12), None),
    ((0, 6), (0, 2, 3), [(0, [0]), (1, [1, 2])]),
])
def test_split_groups(source, out, groups):
    assert split_reshape_groups(source, out) == groups


def _kernels(function, *shapes):
    graph = tracer.trace(function, *(np.ones(shape, np.float32) for shape in shapes)).graph
    return schedule_of(graph).kernels


def fused_qkv(x, weight, bias):
    query, key, value = np.split(x @ weight + bias, 3, axis=-1)
    return query * 2.0, key - value


def test_a_bias_read_in_slices_is_the_products_epilogue():
    """np.split of ``x @ W + b``: the bias add is the matmul kernel's epilogue (computed
    once), not recomputed by each slice's reader; gelu's input (read by one kernel) stays
    inlined in the matmul's epilogue."""
    matmul = [kernel for kernel in _kernels(fused_qkv, (2, 5, 4), (4, 9), (9,))
              if kernel.kind == "matmul"]
    assert len(matmul) == 1 and matmul[0].root.name != matmul[0].anchor.out.name
    gelu = _kernels(lambda x, w, b: nn.gelu(x @ w + b), (2, 5, 4), (4, 9), (9,))
    assert [kernel.kind for kernel in gelu] == ["matmul"]
    rng = np.random.default_rng(7)
    compiled = tj.jit(cache="memory")(fused_qkv)
    for rows in (1, 5, 0, 13):
        x = rng.standard_normal((2, rows, 4)).astype(np.float32)
        weight = rng.standard_normal((4, 9)).astype(np.float32)
        bias = rng.standard_normal(9).astype(np.float32)
        bias[4] = np.nan
        for actual, expected in zip(compiled(x, weight, bias), fused_qkv(x, weight, bias)):
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
