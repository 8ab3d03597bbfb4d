"""deeplearning.ai course 2's Adam in a captured loop (``update_parameters_with_adam``'s
bias corrections ``1 - np.power(beta1, t)`` with ``t = t + 1`` counted by the loop).

The bias correction's exponent is a dim the loop counts, a literal holding a ``DimExpr``:
the margin rule of ``power`` read it as a float (``float(y.value)``) while bounding the
relu mask's decision after it, and every call ran eagerly with 'not compiled: TypeError:
float() argument must be a string or a real number, not 'DimExpr''. Now such an exponent
is one the trip decides (no exact poles, as for a traced one)."""

from __future__ import annotations

import numpy as np

import tracejit as tj


def adam_like(x, steps):
    t = 0
    for i in range(steps.shape[0]):
        t = t + 1
        x = x - steps[i] * x / (1 - np.power(0.9, t))
        x = x * np.int64(x > 0.25)  # a relu-like mask: a decision the margins bound
    return x


def test_a_bias_correction_power_of_a_counted_t_compiles():
    compiled = tj.jit(adam_like, cache="memory", dynamic=True)
    for count in (5, 7, 6, 12):
        x = np.linspace(-1, 1, 8)
        steps = np.full(count, 0.01)
        np.testing.assert_allclose(compiled(x, steps), adam_like(x, steps), rtol=1e-12)
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiled_calls"] >= 2, stats
