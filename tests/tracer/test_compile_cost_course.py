"""The compile-cost policy on Coursera's L_layer_model (course 1 week 4): at the course's
depth its training loop carries rounding bounds that make the program long to compile (the
first call waited 48-69 s on the loaded machine for a program whose calls then left
through a relu mask's margin and ran eagerly); jit(compile="auto") sends such a compile to
the background thread (runtime/compile_policy.py). No timing: the test reads the estimate.
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


def test_the_course_sized_l_layer_model_compiles_in_the_background(monkeypatch):
    """Coursera's L_layer_model at the course's depth (layers [12288, 20, 7, 5, 1]; the
    width changes no equation) is estimated long enough for the background thread: its
    first call waited 48-69 s for a program whose calls then ran eagerly. The 4-3-1 net of
    the tests stays a compile the call waits for."""
    rng = np.random.default_rng(0)
    deep, small = [30, 20, 7, 5, 1], [4, 3, 1]
    for dims in (deep, small):
        X = rng.standard_normal((dims[0], 16))
        Y = (rng.random((1, 16)) > 0.5).astype(float)
        seen, (parameters, costs) = _estimates(monkeypatch, X, Y, dims, num_iterations=300)
        expected, expected_costs = L_layer_model(X, Y, dims, num_iterations=300)
        for name, value in expected.items():
            np.testing.assert_array_equal(parameters[name], value)
        seconds = sum(estimate.seconds for estimate in seen)
        if dims is deep:
            assert seconds >= compile_policy.BACKGROUND_SECONDS
            assert seen[0].bound_equations > seen[0].equations // 2
        else:
            assert seconds < compile_policy.BACKGROUND_SECONDS
