"""Large outputs reused only when nobody holds them, on any interpreter's reference counts."""

import sys

import numpy as np

import tracejit as tj
from tracejit.codegen import recycled_outputs


def _borrowing(array):
    """``sys.getrefcount`` as CPython 3.14 may read it: the call's argument not counted
    (the lambda's own parameter and argument are taken off as well)."""
    return sys.getrefcount(array) - 2


def test_held_outputs_are_never_overwritten():
    f = tj.jit(lambda x: np.tanh(x) * 2.0 + 3.0, cache="memory")
    xs = [np.random.default_rng(seed).standard_normal((512, 300)) for seed in range(4)]
    kept = [f(x) for x in xs]  # 1.2 MB each: recycled slots
    for x, out in zip(xs, kept):
        np.testing.assert_allclose(out, np.tanh(x) * 2.0 + 3.0, rtol=1e-12)
    assert len({id(out) for out in kept}) == len(kept)
    view = f(xs[0])[::7]  # only a view kept: its base is held
    again = f(xs[1])
    np.testing.assert_allclose(view, (np.tanh(xs[0]) * 2.0 + 3.0)[::7], rtol=1e-12)
    np.testing.assert_allclose(again, np.tanh(xs[1]) * 2.0 + 3.0, rtol=1e-12)
    assert f.stats()["compiled_calls"] >= 5, f.stats()


def test_this_interpreter_recycles():
    assert recycled_outputs.SAFE
    assert recycled_outputs.for_thread(None) is not recycled_outputs.fresh


def test_the_count_is_measured_not_assumed():
    """With a count that skips the argument, a fixed 3 would hand out an array the caller
    holds; the measured count does not."""
    def assumed(state):
        return recycled_outputs.recycler(state, alone=3, getrefcount=_borrowing)
    def measured(state):
        return recycled_outputs.recycler(
            state, alone=recycled_outputs._reads_alone(_borrowing), getrefcount=_borrowing)
    assert not recycled_outputs.works(assumed)
    assert recycled_outputs.works(measured)
