"""Adversarial review of round 22's late work, second pass (commits from about 05:00 UTC:
7ea7f6c's exit loops carrying attributes, e447448's strided head reads, edef41c/a90fda4's
trip counts, 6899a21's views, and what landed after). Each call compares compiled with
eager NumPy (results, dtypes, types, identities, the arguments and objects afterwards) on
calls with changing inputs.

Findings, each fixed with its test here (each fails before its fix). Wrong identity: an
attribute array written in place through another name and stored back (``t =
self.theta; t -= step; self.theta = t``) came back a new array bound to the attribute (the
caller's array got the values too, but a second holder of it, ``other.theta is
self.theta``, was left apart from the model from then on). 7ea7f6c's exit loops (and
loop_attributes' captured loops before them) write ``self.theta -= step`` in the body
exactly this way once the attribute is hoisted into a local, so CS229's ``while True:``
gradient descent rebound ``self.theta`` at every compiled call.
"""

from __future__ import annotations

import numpy as np

from tracejit import jit


class _Model:
    def __init__(self, d=3):
        self.theta, self.lr, self.eps = np.zeros(d), 0.1, 1e-6


def _store_back(model, step):
    theta = model.theta
    theta -= step
    model.theta = theta
    return model.theta.sum()


def _fit_until_small(model, x, y):
    """CS229's loop: the attribute is hoisted into a local for the exit loop (7ea7f6c)."""
    while True:
        step = model.lr * x.T.dot(x.dot(model.theta) - y) / len(x)
        model.theta -= step
        if np.linalg.norm(step, 1) < model.eps:
            break
    return model.theta


def test_an_attribute_written_in_place_and_stored_back_stays_the_callers_array():
    """Before the fix ``model.theta`` was a new array after every compiled call: the
    optimizer's (``other``'s) reference to the parameters no longer saw the model's."""
    rng = np.random.default_rng(0)
    for function, make_arguments in (
            (_store_back, lambda: (np.full(3, rng.random()),)),
            (_fit_until_small, lambda: (x := np.c_[np.ones(20), rng.random((20, 2))],
                                        x @ rng.standard_normal(3)))):
        compiled = jit(function, cache="memory")
        eager_model, model = _Model(), _Model()
        eager_holder, holder = eager_model.theta, model.theta
        for _ in range(3):
            arguments = make_arguments()
            want = function(eager_model, *arguments)
            got = compiled(model, *arguments)
            assert type(got) is type(want)
            np.testing.assert_array_equal(got, want)
            assert eager_model.theta is eager_holder
            assert model.theta is holder, function.__name__
            np.testing.assert_array_equal(holder, eager_holder)
        assert compiled.stats()["eager_calls"] == {}, compiled.stats()
