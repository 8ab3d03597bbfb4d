"""``copy.copy`` / ``copy.deepcopy`` of a traced dim (``len(x)``, ``x.shape[0]``) is the dim
itself, as for an int: a copy copied the trace's context (with the call's streams, which
cannot be copied: an internal error on every call), and a copied context would have kept
the guards the copy's comparisons record from the trace."""

import copy

import numpy as np

import tracejit as tj


def scaled_past_three(x):
    n = copy.deepcopy(len(x))
    m = copy.copy(x.shape[0])
    if n > 3 and m > 3:
        return x * 2
    return x


def test_a_copied_dim_decides_as_eager():
    compiled = tj.jit(scaled_past_three, cache="memory")
    for size in (5, 5, 2, 2, 6, 3):
        x = np.arange(size, dtype=float)
        np.testing.assert_array_equal(compiled(x), scaled_past_three(x))
    stats = compiled.stats()
    assert not stats["eager_calls"], compiled.explain()
    assert stats["compiled_calls"] >= 2
