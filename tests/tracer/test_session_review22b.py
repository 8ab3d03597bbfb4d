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
gradient descent rebound ``self.theta`` at every compiled call. Wrong results and a hang:
loop_attributes hoisted ``model.theta`` while another name for the same object
(``other.theta``, the object passed twice or ``other = self``) read the attribute in the
body as it was before the loop; a ``while True`` exit loop reading it never exited.
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


def _halve_towards(model, other, x, n):
    """``model`` and ``other`` are one object: ``other.theta`` reads what the trip wrote."""
    trace = np.zeros(3)
    for _ in range(n):
        model.theta = model.theta * 0.5 + x
        trace = trace + other.theta
    return trace


def _halve_until_close(model, other, x):
    for _ in range(60):
        model.theta = model.theta * 0.5 + x
        if np.abs(other.theta - 2 * x).max() < 1e-3:
            break
    return model.theta


def test_an_attribute_read_through_another_name_in_the_loop_sees_the_trips_writes():
    """loop_attributes hoisted ``model.theta`` into a local while ``other.theta`` (the same
    object passed twice, or ``other = self``) still read the attribute as it was before
    the loop: wrong sums, and 7ea7f6c's exit loop never saw its exit (60 trips here; a
    ``while True`` hung). An attribute another name in the body reads is not hoisted."""
    for function, extra in ((_halve_towards, (5,)), (_halve_until_close, ())):
        compiled = jit(function, cache="memory")
        for scale in (1.0, 3.0):
            eager_model, model = _Model(), _Model()
            x = np.full(3, scale)
            want = function(eager_model, eager_model, x, *extra)
            got = compiled(model, model, x, *extra)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(model.theta, eager_model.theta)
