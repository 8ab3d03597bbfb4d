"""Review 24a of this session's discontinuity-check commits (efd8dae): a checked mask whose
branches are infinitely apart.

``np.where(pre > 0, inf * d, 0)`` with ``pre`` a float32 einsum of exact values (bounded,
so its comparison is checked): a flip is rounding only where the branches meet within
``(|a| + |b|) * 4u`` plus their bounds, and that term is infinite when a branch is: every
flip between inf and 0 passed as rounding, so compiled calls flipped the mask on tied data
(3,815 of 8,192 elements inf where NumPy gives 0) with no eager call. A gap that is not
finite is never rounding now.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_unmodelled_branches import tied_inputs

from tracejit import jit


def infinite_branch(x, w1, d):
    pre = np.einsum("ik,kj->ij", x, w1)
    return np.where(pre > 0, np.float32(np.inf) * d, 0)


def masked_scores(x, w1, d):
    """An attention-style mask: a score, or -inf where the gate is closed."""
    pre = np.einsum("ik,kj->ij", x, w1)
    return np.where(pre > 0, d * 2, -np.inf)


@pytest.mark.parametrize("function", [infinite_branch, masked_scores])
def test_a_flip_to_an_infinite_branch_is_not_rounding(function):
    x, w1, _, d = tied_inputs(64, 96, 128)
    expected = function(x, w1, d)
    jitted = jit(function, cache="memory")
    for _ in range(3):
        np.testing.assert_array_equal(jitted(x, w1, d), expected)


def test_ordinary_data_with_an_infinite_branch_stays_compiled():
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 1.0, (16, 8)).astype(np.float32)
    w1 = rng.uniform(-1.0, 1.0, (8, 32)).astype(np.float32)
    d = np.ones((16, 32), np.float32)
    jitted = jit(masked_scores, cache="memory")
    for _ in range(3):
        np.testing.assert_array_equal(jitted(x, w1, d), masked_scores(x, w1, d))
    assert jitted.stats()["compiled_calls"] >= 2, jitted.stats()
