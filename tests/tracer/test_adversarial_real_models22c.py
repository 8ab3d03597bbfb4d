"""Adversarial real-model tests, round 22c: the deeplearning.ai Deep Learning
Specialization's NumPy assignments as a grader runs them, jitted end to end: course 1
week 4 (``initialize_parameters_deep`` with ``parameters['W' + str(i)]``,
``L_model_forward`` building a ``caches`` list of tuples, ``L_model_backward`` filling
``grads["dA" + str(i)]``, ``update_parameters``, ``L_layer_model`` with ``print_cost``) and
course 2 (``random_mini_batches`` by ``np.random.permutation`` and ``math.floor``,
``update_parameters_with_adam`` over ``v``/``s`` dicts and ``t``, dropout by
``np.random.rand(...) < keep_prob``, L2 regularization, gradient checking through
``dictionary_to_vector``), compared with eager NumPy (results, the parameter dicts, the
costs lists, ``np.random``'s state after each call).

Finding fixed here (its test fails before the fix): a helper writing into a dict its
caller made (the course's ``model`` builds ``v, s = initialize_adam(parameters)`` and
calls ``update_parameters_with_adam(parameters, grads, v, s, t)``, which writes
``v["dW" + str(i)] = ...``) was refused as 'item assignment into an argument's dict':
the rewrite marks any parameter name as the caller's, and the caller's is only the
jitted function's. Now a plain dict or list that no argument holds and that was not read
from outside is written like a local one (``frontend._caller_container``); a global's or
an attribute's dict passed to the helper is still refused.

Found and not fixed (see the round's report): ``L_layer_model``'s ``print("Cost after
iteration {}: {}".format(i, np.squeeze(cost)))`` ran the call eagerly (it compiles since
tracer/deferred_text.py and tracer/loop_prints.py, test_deferred_text.py; the gradient
check's ``str(difference)`` still does, as documented); ``model`` and ``model_adam`` with
fewer than 32 iterations or epochs unroll them on the first call and reach the kernel
limit after seconds of tracing; ``gradient_check_n``'s ``difference`` is ill-conditioned
(``(J_plus - J_minus) / 2e-7``) and a last-bit difference in a compiled cost shows.
"""

from __future__ import annotations

import copy

import numpy as np

from tracejit import jit
from tracejit.runtime.testing import compare_results
from tracejit.tracer import frontend


def initialize_adam(parameters):
    v, s = {}, {}
    for i in range(1, len(parameters) // 2 + 1):
        for name in ("dW", "db"):
            v[name + str(i)] = np.zeros(parameters[name[1] + str(i)].shape)
            s[name + str(i)] = np.zeros(parameters[name[1] + str(i)].shape)
    return v, s


def update_parameters_with_adam(parameters, grads, v, s, t, learning_rate=0.01,
                                beta1=0.9, beta2=0.999, epsilon=1e-8):
    for i in range(1, len(parameters) // 2 + 1):
        for p in ("W", "b"):
            g = "d" + p + str(i)
            v[g] = beta1 * v[g] + (1 - beta1) * grads[g]
            v_corrected = v[g] / (1 - np.power(beta1, t))
            s[g] = beta2 * s[g] + (1 - beta2) * np.power(grads[g], 2)
            s_corrected = s[g] / (1 - np.power(beta2, t))
            parameters[p + str(i)] = parameters[p + str(i)] - learning_rate * v_corrected / (
                np.sqrt(s_corrected) + epsilon)
    return parameters, v, s


def adam_steps(parameters, batches):
    """The course's model loop, its Adam state made here and passed to the helper."""
    v, s = initialize_adam(parameters)
    t = 0
    for X in batches:
        grads = {}
        for i in range(1, len(parameters) // 2 + 1):
            grads["dW" + str(i)] = parameters["W" + str(i)] * X.mean()
            grads["db" + str(i)] = parameters["b" + str(i)] - X.sum()
        t = t + 1
        parameters, v, s = update_parameters_with_adam(parameters, grads, v, s, t)
    return parameters, v, s


def momentum_into_a_list(parameters, x):
    velocities = [np.zeros_like(w) for w in parameters]

    def step(velocities, i, g):
        velocities[i] = 0.9 * velocities[i] + g

    for i, w in enumerate(parameters):
        step(velocities, i, w * x)
    return velocities


GLOBAL_STATE = {"dW1": np.zeros((2, 3))}


def into_a_global_dict(w, x):
    v = GLOBAL_STATE
    update = {"dW1": w * x}
    _write_each(v, update)
    return w + 1


def _write_each(v, grads):
    for key in grads:
        v[key] = 0.9 * v[key] + grads[key]


def _calls(count, seed):
    rng = np.random.default_rng(seed)
    parameters = {"W1": rng.standard_normal((3, 4)), "b1": rng.standard_normal((3, 1)),
                  "W2": rng.standard_normal((1, 3)), "b2": rng.standard_normal((1, 1))}
    return [(copy.deepcopy(parameters), [rng.standard_normal((4, 5)) * k for k in (1, 2)])
            for _ in range(count)]


def _compare(f, calls, state=None):
    compiled = jit(f, cache="memory")
    for number, args in enumerate(calls):
        mine, theirs = copy.deepcopy(args), copy.deepcopy(args)
        if state is not None:
            state["dW1"] = np.ones((2, 3))
        got = compiled(*mine)
        after = copy.deepcopy(state)
        if state is not None:
            state["dW1"] = np.ones((2, 3))
        want = f(*theirs)
        problem = compare_results(got, want) or compare_results(mine, theirs) or (
            compare_results(after, state))
        assert problem is None, f"call {number}: {problem}"
    return compiled


def test_a_helper_writes_the_dict_its_caller_made_compiled():
    calls = _calls(3, 0)
    calls[2] = (calls[2][0], [b * 0.5 for b in calls[2][1]])
    compiled = _compare(adam_steps, calls)
    stats = compiled.stats()
    assert not stats["eager_calls"] and stats["compiled_calls"] >= 2, compiled.explain()


def test_a_helper_writes_the_list_its_caller_made_compiled():
    rng = np.random.default_rng(1)
    calls = [([rng.standard_normal((2, 3)), rng.standard_normal(3)], k) for k in (0.5, 2.0, 3.0)]
    compiled = _compare(momentum_into_a_list, calls)
    stats = compiled.stats()
    assert not stats["eager_calls"] and stats["compiled_calls"] >= 1, compiled.explain()


def test_a_helper_writing_a_global_dict_still_runs_eagerly_with_equal_results():
    rng = np.random.default_rng(2)
    calls = [(rng.standard_normal((2, 3)), k) for k in (0.5, 2.0, 3.0)]
    compiled = _compare(into_a_global_dict, calls, GLOBAL_STATE)
    assert compiled.stats()["eager_calls"], compiled.explain()


def test_the_old_rule_refused_the_callers_own_dict(monkeypatch):
    """What the fix changed: with a parameter name taken as the caller's (the rule
    before), the course's Adam loop ran eagerly on every call."""
    monkeypatch.setattr(frontend, "_caller_container",
                        lambda context, container, parameter: parameter)
    compiled = _compare(adam_steps, _calls(2, 3))
    assert compiled.stats()["eager_calls"], compiled.explain()
