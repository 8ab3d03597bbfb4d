"""A first call decides as eager NumPy does, even where the trace's own values differ.

The trace computes with NumPy but on its own layouts: ``np.tile(x, (3, 1)).sum(axis=1)``
sums a broadcast view, in another order than NumPy's sum of the tiled copy, so the traced
value can be one ulp away from eager's. A decision on it at the threshold between them
(``if s >= t``) would then take the other branch on the very call that traced it, and
that call returned the trace's result. Now such a trace applies no effects and the call's
result comes from the compiled program, whose margin guard lets eager decide.
"""

import numpy as np
import pytest

import tracejit as tj
from tracejit.runtime import background

# Found by search: the tiled sum of X differs from eager's in its last bit.
X = np.array([0.5118216247002567, 0.9504636963259353, 0.14415961271963373,
              0.9486494471372439, 0.31183145201048545, 0.42332644897257565,
              0.8277025938204418, 0.4091991363691613, 0.5495936876730595])
EAGER = np.tile(X, (3, 1)).sum(axis=1)[0]


def close(actual, expected):
    """Equal up to compiled code's rounding (the branches differ by far more)."""
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=0)


def _traced_sum():
    """The value the trace computes for the tiled sum (a function without a decision
    returns the trace's own result on its first call)."""
    return tj.jit(lambda x: np.tile(x, (3, 1)).sum(axis=1), cache="memory")(X.copy())[0]


THRESHOLD = _traced_sum()


def test_the_trace_and_eager_differ_here():
    # The premise of the tests below: if the tracer ever sums like NumPy, pick another X.
    assert THRESHOLD != EAGER


def branchy(x):
    s = np.tile(x, (3, 1)).sum(axis=1)
    if s[0] >= THRESHOLD:
        return s * 2
    return s - 100


def test_first_call_takes_eagers_branch():
    jitted = tj.jit(branchy, cache="memory")
    expected = branchy(X.copy())
    for _ in range(3):
        close(jitted(X.copy()), expected)


def test_effects_happen_once_and_on_eagers_branch(capsys):
    def step(x, w, state):
        s = np.tile(x, (3, 1)).sum(axis=1)
        if s[0] >= THRESHOLD:
            w += 1.0
            state["big"] += 1
            print("big")
        else:
            w -= 1.0
            state["small"] += 1
            print("small")
        return w.sum()

    jitted = tj.jit(step, cache="memory")
    w_eager, state_eager = np.zeros(4), {"big": 0, "small": 0}
    w_jit, state_jit = np.zeros(4), {"big": 0, "small": 0}
    for call in range(3):
        expected = step(X.copy(), w_eager, state_eager)
        eager_out = capsys.readouterr().out
        got = jitted(X.copy(), w_jit, state_jit)
        assert capsys.readouterr().out == eager_out, call
        close(got, expected)
        close(w_jit, w_eager)
        assert state_jit == state_eager


def test_attribute_writes_follow_eagers_branch():
    class Layer:
        def __init__(self):
            self.hits = np.zeros(2)

        def __call__(self, x):
            s = np.tile(x, (3, 1)).sum(axis=1)
            self.cache = s
            if s[0] >= THRESHOLD:
                self.hits = self.hits + np.array([1.0, 0.0])
            else:
                self.hits = self.hits + np.array([0.0, 1.0])
            return s

    eager, compiled = Layer(), Layer()
    jitted = tj.jit(compiled.__call__, cache="memory")
    for _ in range(3):
        close(jitted(X.copy()), eager(X.copy()))
        close(compiled.hits, eager.hits)
        close(compiled.cache, eager.cache)


def test_background_compile_runs_the_undecided_call_eagerly():
    jitted = tj.jit(branchy, cache="memory", compile="background")
    expected = branchy(X.copy())
    close(jitted(X.copy()), expected)
    assert background.wait_idle(timeout=120)
    close(jitted(X.copy()), expected)


@pytest.mark.parametrize("scale", [2.0, 3.0, 0.25])
def test_values_away_from_the_threshold_compile_and_agree(scale):
    jitted = tj.jit(branchy, cache="memory")
    for _ in range(3):
        close(jitted(X * scale), branchy(X * scale))
    assert jitted.stats()["compiles"] == 1


def test_other_path_grown_from_a_side_exit_decides_as_eager():
    # The first trace takes the small branch; the exact-threshold call leaves through its
    # guard and, once the exit is hot, traces the other path on that very call.
    jitted = tj.jit(branchy, cache="memory", hot_exit=1)
    close(jitted(X * 0.5), branchy(X * 0.5))
    for _ in range(3):
        close(jitted(X.copy()), branchy(X.copy()))
