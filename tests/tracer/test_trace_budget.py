"""A trace past ``tracing.EQUATION_LIMIT`` operations (a Python loop that cannot be
captured, unrolled over thousands of trips) runs eagerly with a reason after seconds,
instead of tracing, bounding and compiling for many minutes; below the limit the same
function compiles."""

import sys

import numpy as np

import tracejit as tj


def gradient_descent(X, y, iterations):
    params = {"w": np.zeros(X.shape[1]), "b": 0.0}
    # a schedule in a Python list read at the index: the loop cannot be captured (the
    # course's version with one rate is: tests/tracer/test_loop_dict_rebinding21.py)
    rates = [0.1 / (1 + 0.01 * step) for step in range(iterations)]
    costs = []
    for i in range(iterations):
        err = X @ params["w"] + params["b"] - y
        params = {"w": params["w"] - rates[i] * X.T @ err / len(y),
                  "b": params["b"] - rates[i] * err.mean()}
        if i % 10 == 0:
            costs.append(float((err ** 2).mean()))
    return params["w"], costs


def test_a_loop_unrolled_past_the_limit_runs_eagerly_with_the_reason(monkeypatch):
    monkeypatch.setattr(sys.modules["tracejit.tracer.tracing"], "EQUATION_LIMIT", 300)
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 3)), rng.standard_normal(20)
    small = tj.jit(gradient_descent, cache="memory")
    for _ in range(2):  # a few trips: well below the limit, compiled
        np.testing.assert_allclose(small(X, y, 3)[0], gradient_descent(X, y, 3)[0],
                                   rtol=1e-12)
    assert small.stats()["compiled_calls"] + small.stats()["traced_calls"] == 2
    large = tj.jit(gradient_descent, cache="memory")
    for _ in range(2):
        w, costs = large(X, y, 200)
        want_w, want_costs = gradient_descent(X, y, 200)
        np.testing.assert_allclose(w, want_w, rtol=1e-12)
        assert costs == want_costs
    stats = large.stats()
    assert stats["eager_calls"] and not stats["compiled_calls"], stats
    reason = " ".join(stats["eager_reasons"].values())
    assert "too large to compile" in reason and __file__ in reason, reason
