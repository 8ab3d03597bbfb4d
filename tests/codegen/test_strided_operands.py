"""Batched products reading strided views in place (``codegen/strided_views.py``):
attention's heads split from one qkv array (slice -> reshape -> transpose), the keys
transposed again, a transposed left operand, a row slice with a step; compiled against
NumPy in float32 and float64 on odd, prime, 1 and 0 sizes, each view but the values read
by the GEMM without a copy kernel. (The AVX2 code reads them in test_batched_matmul.py's
forced-AVX2 process.)
"""

from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.codegen import gemm
from tracejit.codegen.strided_views import StridedView, matrix_layout

pytestmark = pytest.mark.skipif(not gemm.supported(),
                                reason="the own GEMM's batched entry needs AVX-512F or AVX2")

DTYPES = [np.float32, np.float64]


def split_heads(x, heads):
    batch, seq, width = x.shape
    return x.reshape(batch, seq, heads, width // heads).transpose(0, 2, 1, 3)


def attention(qkv, heads):
    """Scores and the weighted values of every head, the heads split from ``qkv``."""
    query, key, value = (split_heads(part, heads) for part in np.split(qkv, 3, axis=-1))
    scores = query @ key.transpose(0, 1, 3, 2)
    return scores, scores @ value


def computed_attention(qkv, heads):
    """The same over a computed qkv (a buffer the program stores)."""
    return attention(qkv * 0.5 + 1.0, heads)


def transposed_left(qkv, heads):
    """keys.T @ values: a left operand whose rows are unit-stride (read transposed)."""
    _, key, value = (split_heads(part, heads) for part in np.split(qkv, 3, axis=-1))
    return key.transpose(0, 1, 3, 2) @ value


def stepped_rows(qkv, heads):
    """Every other sequence position of the queries (rows 2 * 3d apart)."""
    query, key, _ = (split_heads(part, heads) for part in np.split(qkv, 3, axis=-1))
    return query[:, :, ::2] @ key.transpose(0, 1, 3, 2)


FUNCTIONS = {"attention": attention, "computed": computed_attention,
             "transposed left": transposed_left, "stepped rows": stepped_rows}
KERNELS = {"attention": 3, "computed": 4, "transposed left": 2, "stepped rows": 1}
# (batch, seq, heads, head size): odd and prime, ones, an empty sequence
SIZES = [(3, 7, 2, 5), (1, 1, 1, 1), (2, 0, 3, 2)]


def reference(function, qkv, heads):
    results = function(qkv.astype(np.float64), heads)
    return results if isinstance(results, tuple) else (results,)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize("sizes", SIZES, ids=lambda sizes: "x".join(map(str, sizes)))
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_heads_are_read_in_place(name, sizes, dtype):
    batch, seq, heads, head_size = sizes
    rng = np.random.default_rng(sum(sizes))
    qkv = rng.standard_normal((batch, seq, 3 * heads * head_size)).astype(dtype)
    function = FUNCTIONS[name]
    compiled = tj.jit(cache="memory")(function)
    compiled(qkv, heads)
    got = compiled(qkv, heads)
    assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()
    got = got if isinstance(got, tuple) else (got,)
    eager = function(qkv, heads)
    for result, want, same in zip(got, reference(function, qkv, heads),
                                  eager if isinstance(eager, tuple) else (eager,)):
        assert result.dtype == same.dtype and result.shape == want.shape
        # |error| <= depth * eps * (|a| @ |b|): bounded by the scale of the inputs here
        bound = 4 * (qkv.shape[-1] + 1) ** 2 * np.finfo(dtype).eps * max(
            1.0, float(np.max(np.abs(want), initial=0.0)))
        assert np.all(np.abs(result - want) <= bound)
    if seq and sizes != (1, 1, 1, 1):
        kernels = compiled.lower(qkv, heads).kernels
        # one kernel per product, the computed qkv's, and the values' copy (an untransposed
        # right operand: a kernel copies it faster than the GEMM reads it strided): the
        # queries and keys are read in place
        assert len(kernels) == KERNELS[name], kernels


def test_matrix_layout():
    # rows 12 apart, unit columns: as stored; unit rows: the transpose of rows 12 apart
    assert matrix_layout(StridedView(None, 0, (36, 12, 1)), (2, 3, 4)) == (False, 12)
    assert matrix_layout(StridedView(None, 0, (36, 1, 12)), (2, 4, 3)) == (True, 12)
    assert matrix_layout(StridedView(None, 0, (36, 2, 12)), (2, 4, 3)) is None
    # a single column or row takes either reading: its ld is never stepped past
    assert matrix_layout(StridedView(None, 0, (36, 24, 2)), (2, 3, 1)) == (False, 24)
