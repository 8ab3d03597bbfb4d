"""The compile-cost policy on Coursera's L_layer_model (course 1 week 4): at the course's
depth its training loop carried rounding bounds that made the program long to compile (the
first call waited 48-69 s on the loaded machine for a program whose calls then left
through a relu mask's margin and ran eagerly), so jit(compile="auto") sent it to the
background thread (runtime/compile_policy.py). Since its sums are NumPy's add loop
(tracer/numpy_sums.py) the weights are NumPy's bits at every trip: no bound, a short
compile the call waits for. No timing: the test reads the estimate.
"""

from __future__ import annotations

import warnings

import numpy as np
from test_counted_loop_bounds import L_layer_model

from tracejit import jit
from tracejit.runtime import compile_policy


def _estimates(monkeypatch, *args, **kwargs):
    """The estimates the runtime saw for a call of ``L_layer_model`` (refused at once:
    nothing is lowered), and the call's result."""
    seen = []
    admit = compile_policy.CompileBudget.admit

    def recording(budget, estimate):
        seen.append(estimate)
        return admit(budget, estimate)

    monkeypatch.setattr(compile_policy, "REFUSE_SECONDS", 0.0)
    monkeypatch.setattr(compile_policy.CompileBudget, "admit", recording)
    f = jit(L_layer_model, cache="memory")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = f(*args, **kwargs)
    assert f.stats()["refused_compiles"] == 1 and f.stats()["compiles"] == 0
    return seen, result


def test_the_course_sized_l_layer_model_is_a_short_compile(monkeypatch):
    """Coursera's L_layer_model at the course's depth (layers [12288, 20, 7, 5, 1]; the
    width changes no equation) and the 4-3-1 net of the tests: no bound equations, and an
    estimate far below the background thread's (before: 975 equations of which 841 bounds
    at the course's depth, sent to the background, its calls then eager)."""
    rng = np.random.default_rng(0)
    for dims in ([30, 20, 7, 5, 1], [4, 3, 1]):
        X = rng.standard_normal((dims[0], 16))
        Y = (rng.random((1, 16)) > 0.5).astype(float)
        seen, (parameters, costs) = _estimates(monkeypatch, X, Y, dims, num_iterations=300)
        expected, expected_costs = L_layer_model(X, Y, dims, num_iterations=300)
        for name, value in expected.items():
            np.testing.assert_array_equal(parameters[name], value)
        assert sum(estimate.seconds for estimate in seen) < compile_policy.BACKGROUND_SECONDS
        assert sum(estimate.bound_equations for estimate in seen) == 0, seen
