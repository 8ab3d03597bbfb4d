"""float32 row sums that are stages of a fused kernel (``codegen/row_fusion.py``
``_grouped_pass``): elements are added eight at a time in float32, then in float64.
Checked against the exact (float64) sum within the error the guard margins allow for us,
and against NumPy at lengths around the block size (empty, 1, primes, one past a block),
with NaN and infinities, and, with strided rows too, in softmax and layer norm, whose exp
and centred values a later pass reads back from the row scratch the grouped pass fills.
Row max/min propagate NaN like NumPy's.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.codegen.reducer import FLOAT32_GROUP
from tracejit.tracer.margin_rules import FLOAT32_GROUP_DEPTH

LENGTHS = [0, 1, 2, 3, 5, 63, 255, 256, 257, 511, 512, 1021, 4099]
U32 = np.finfo(np.float32).eps / 2


def compiled(function):
    """``function`` run compiled (the first call traces: it returns NumPy's values)."""
    jitted = tj.jit(function, cache="memory", fallback="raise")

    def run(*args):
        jitted(*args)
        result = jitted(*args)
        assert jitted.stats()["compiled_calls"] == 1, jitted.stats()
        return result

    return run


def test_the_margin_rule_knows_the_group_depth():
    assert 2 ** FLOAT32_GROUP_DEPTH == FLOAT32_GROUP


@pytest.mark.parametrize("length", LENGTHS)
def test_row_sums_are_within_the_grouped_bound(length):
    rng = np.random.default_rng(length)
    x = (rng.standard_normal((6, length)) * 10.0 ** rng.uniform(-3, 3, (6, 1))).astype(
        np.float32)
    x[1::2, : length // 2] = -x[1::2, length - length // 2:]  # cancelling rows
    x[4] = 1.0
    x[4, :1] = 1e8  # a float32 accumulator would drop the ones after it
    # The sum as a stage of a pointwise kernel (x * 0 + s is s): grouped; x.sum(axis=1)
    # alone is a sum the user reads, kept in double.
    if length == 0:
        got = compiled(lambda x: x.sum(axis=1))(x)
    else:
        got = compiled(lambda x: x * np.float32(0) + x.sum(axis=1, keepdims=True))(x)[:, 0]
    exact = x.astype(np.float64).sum(axis=1)
    magnitude = np.abs(x).astype(np.float64).sum(axis=1)
    # Ours: depth-3 float32 tree per group, double accumulation, one final rounding.
    bound = (FLOAT32_GROUP_DEPTH + 1e-6 * length) * U32 * magnitude * 1.01 + U32 * np.abs(exact)
    assert got.dtype == np.float32
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound + 1e-45)


@pytest.mark.parametrize("length", [1, 3, 257, 512, 1021])
def test_nan_and_infinities_propagate_like_numpy(length):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, length)).astype(np.float32)
    x[0, length // 2] = np.nan
    x[1, 0] = np.inf
    x[2, -1] = -np.inf
    x[3, 0], x[3, -1] = np.inf, -np.inf  # inf - inf: NaN (one element rows: -inf)
    with np.errstate(invalid="ignore"):
        want = x.sum(axis=1)
        got = compiled(lambda x: x.sum(axis=1))(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])


@pytest.mark.parametrize("length", [1, 2, 255, 257, 512, 1021])
@pytest.mark.parametrize("strided", [False, True])
def test_softmax_and_layer_norm_read_back_the_scratch_the_grouped_pass_filled(length,
                                                                           strided):
    rng = np.random.default_rng(length + 1)
    x = rng.standard_normal((7, length)).astype(np.float32) * 3
    if strided:
        x = np.asfortranarray(x)
    for function, tolerance in ((lambda x: nn.softmax(x, axis=-1), 1e-6),
                                (lambda x: nn.softmax(nn.layer_norm(x), axis=-1), 1e-6),
                                (lambda x: nn.layer_norm(x), 2e-5)):
        got = compiled(function)(x)
        np.testing.assert_allclose(got, function(x), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("length", [1, 2, 17, 64, 257, 1021])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["max", "min"])
def test_row_extremes_propagate_nan_like_numpy(length, dtype, reduction):
    """Row max/min compare and select, and note NaNs on the side (``Reducer._tracks_nan``)."""
    rng = np.random.default_rng(length)
    x = rng.standard_normal((6, length)).astype(dtype)
    x[0, length // 2] = np.nan
    x[1, -1] = np.nan
    x[2] = np.inf if reduction == "max" else -np.inf
    x[3, 0], x[3, -1] = np.nan, -np.inf
    x[4] = np.nan
    function = getattr(np, reduction)
    for layout in (x, np.asfortranarray(x)):
        got = compiled(lambda x: function(x, axis=1))(layout)
        np.testing.assert_array_equal(got, function(layout, axis=1))
        shifted = compiled(lambda x: x - function(x, axis=1, keepdims=True))(layout)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(shifted, layout - function(layout, axis=1,
                                                                     keepdims=True))
