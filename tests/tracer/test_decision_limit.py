"""A trace with more data-dependent decisions than ``tracing.DECISION_LIMIT`` runs eagerly.

A loop the tracer cannot capture is unrolled with a guard per decision. A 500-trip
gradient descent that returns its break index made a path of ~1000 guards: every call
traced and compiled it again for ~140 s and still ran eagerly, as nearly any other input
leaves such a path somewhere. (Top-level exits are captured now, tracer/while_loops.py;
the break here sits under an ``if`` with an ``else``, which keeps the loop unrolled.)
"""

import numpy as np

import tracejit as tj
from tracejit.tracer import tracing


def fit_logistic(X, y, lr=0.5, max_iter=400, tol=1e-12):
    w = np.zeros(X.shape[1])
    prev = np.inf
    for i in range(max_iter):  # noqa: B007 (its last value is returned)
        p = 1 / (1 + np.exp(-(X @ w)))
        loss = -np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))
        if abs(prev - loss) < tol:
            break
        else:
            prev = loss
        w = w - lr * X.T @ (p - y) / len(y)
    return w, i


def _data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    return X, (X @ [1.0, -2.0, 0.5] + rng.standard_normal(n) > 0).astype(float)


def test_a_path_past_the_decision_limit_runs_eagerly_and_says_where():
    f = tj.jit(fit_logistic, cache=False)
    for n, seed in ((40, 0), (40, 1), (41, 2)):
        X, y = _data(n, seed)
        w, i = f(X, y)
        expected_w, expected_i = fit_logistic(X, y)
        assert i == expected_i and np.array_equal(w, expected_w)
    stats = f.stats()
    assert stats["compiles"] == 0 and stats["compiled_calls"] == 0
    (reason,) = stats["eager_reasons"].values()
    assert f"more than {tracing.DECISION_LIMIT} decisions" in reason
    assert "test_decision_limit.py:" in reason


def test_a_path_under_the_limit_still_compiles():
    def short(x):
        total = x.sum()
        for _ in range(40):  # a constant range with a decision per trip: unrolled
            if total > 0:
                total = total - 1.0
            else:
                total = total + 0.5
        return total

    f = tj.jit(short, cache=False)
    x = np.full(4, 10.0)
    for _ in range(3):
        assert f(x) == short(x)
    assert f.stats()["compiled_calls"] >= 2
