"""cs231n's ``Solver._step`` and update rules on outside config dicts, and a layer that
caches into a dict and appends to a list in one call: compiled and eager, on twin objects.

Before: ``config.setdefault("momentum", 0.9)`` on ``self.optim_configs[p]`` (a dict held
in an outside dict) was refused as an outside mutation, and so was ``config["velocity"] =
v`` through the update rule's parameter: every ``Solver._step`` ran eagerly. And a call
that wrote ``self.cache["x"]`` and appended to ``self.losses`` failed after its trace had
written the caller's state (``list_appends._stored_anew`` read an ``Item`` name as an
attribute): the call then ran again eagerly over the written state, so ``self.W -= ...``
was applied twice - a wrong result."""

import copy

import numpy as np
import pytest

import tracejit as tj


def sgd_momentum(w, dw, config=None):
    if config is None:
        config = {}
    config.setdefault("learning_rate", 1e-2)
    config.setdefault("momentum", 0.9)
    v = config.get("velocity", np.zeros_like(w))
    v = config["momentum"] * v - config["learning_rate"] * dw
    config["velocity"] = v
    return w + v, config


def adam(w, dw, config=None):
    if config is None:
        config = {}
    config.setdefault("learning_rate", 1e-3)
    config.setdefault("beta1", 0.9)
    config.setdefault("beta2", 0.999)
    config.setdefault("epsilon", 1e-8)
    config.setdefault("m", np.zeros_like(w))
    config.setdefault("v", np.zeros_like(w))
    config.setdefault("t", 0)
    config["t"] += 1
    config["m"] = config["beta1"] * config["m"] + (1 - config["beta1"]) * dw
    config["v"] = config["beta2"] * config["v"] + (1 - config["beta2"]) * dw ** 2
    mt = config["m"] / (1 - config["beta1"] ** config["t"])
    vt = config["v"] / (1 - config["beta2"] ** config["t"])
    return w - config["learning_rate"] * mt / (np.sqrt(vt) + config["epsilon"]), config


class TwoLayerNet:
    def __init__(self):
        rng = np.random.default_rng(0)
        self.params = {"W1": rng.standard_normal((5, 4)) * 0.1, "b1": np.zeros(4),
                       "W2": rng.standard_normal((4, 3)) * 0.1, "b2": np.zeros(3)}

    def loss(self, X, y):
        h = np.maximum(X @ self.params["W1"] + self.params["b1"], 0)
        s = h @ self.params["W2"] + self.params["b2"]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        n = X.shape[0]
        loss = -np.log(p[np.arange(n), y]).sum() / n
        ds = p.copy()
        ds[np.arange(n), y] -= 1
        ds /= n
        grads = {"W2": h.T @ ds, "b2": ds.sum(axis=0)}
        dh = ds @ self.params["W2"].T
        dh[h <= 0] = 0
        grads["W1"], grads["b1"] = X.T @ dh, dh.sum(axis=0)
        return loss, grads


class Solver:
    def __init__(self, model, update_rule, lr):
        self.model, self.update_rule = model, update_rule
        self.optim_configs = {p: {"learning_rate": lr} for p in model.params}
        self.loss_history = []

    def _step(self, X, y):
        loss, grads = self.model.loss(X, y)
        self.loss_history.append(loss)
        for p, w in self.model.params.items():
            next_w, next_config = self.update_rule(w, grads[p], self.optim_configs[p])
            self.model.params[p] = next_w
            self.optim_configs[p] = next_config


def _same_state(solver, twin):
    for key, value in solver.model.params.items():
        np.testing.assert_allclose(value, twin.model.params[key], rtol=1e-12, atol=1e-15)
    assert solver.optim_configs.keys() == twin.optim_configs.keys()
    for key, config in solver.optim_configs.items():
        other = twin.optim_configs[key]
        assert config.keys() == other.keys()
        for name, value in config.items():
            np.testing.assert_allclose(value, other[name], rtol=1e-12, atol=1e-15)
            assert type(value) is type(other[name])
    np.testing.assert_allclose(solver.loss_history, twin.loss_history, rtol=1e-12)


def _run(update_rule, changes):
    solver = Solver(TwoLayerNet(), update_rule, 0.1)
    twin = copy.deepcopy(solver)
    step = tj.jit(solver._step, cache="memory")
    rng = np.random.default_rng(1)
    for call in range(7):
        for target in (solver, twin):
            changes(call, target)
        X, y = rng.standard_normal((6, 5)), rng.integers(0, 3, 6)
        assert step(X, y) is None and twin._step(X, y) is None
        _same_state(solver, twin)
    return step.stats()


def test_a_solver_step_with_momentum_compiles_and_follows_changed_configs():
    def changes(call, solver):
        if call == 4:
            solver.optim_configs["W1"]["momentum"] = 0.5  # the user changes a setting
        if call == 5:
            solver.optim_configs["b2"] = {"learning_rate": 0.3}  # and starts one afresh

    stats = _run(sgd_momentum, changes)
    assert stats["compiled_calls"] >= 2, stats


def test_a_solver_step_with_adam_compiles():
    def changes(call, solver):
        if call == 5:
            solver.optim_configs["W2"]["learning_rate"] = 0.01

    stats = _run(adam, changes)
    assert stats["compiled_calls"] >= 2, stats


class CachingLayer:
    def __init__(self):
        self.W, self.cache, self.losses = np.ones((3, 3)), {}, []

    def step(self, x):
        y = x @ self.W
        self.cache["x"] = x
        self.losses.append(y.sum())
        self.W -= 0.1 * x.T @ y
        return y


def test_a_call_that_caches_in_a_dict_and_appends_writes_its_state_once():
    layer = CachingLayer()
    twin = copy.deepcopy(layer)
    step = tj.jit(layer.step, cache="memory")
    for call in range(4):
        x = np.full((2, 3), 0.1 * (call + 1))
        np.testing.assert_allclose(step(x), twin.step(x), rtol=1e-12)
        np.testing.assert_allclose(layer.W, twin.W, rtol=1e-12)
        np.testing.assert_allclose(layer.losses, twin.losses, rtol=1e-12)
        assert layer.cache["x"] is not None and np.array_equal(layer.cache["x"], x)
    assert not step.stats()["eager_calls"], step.stats()


class AttributeConfig:
    def __init__(self):
        self.config = {"lr": 0.1}

    def step(self, w, g):
        self.config.setdefault("momentum", 0.9)
        v = self.config.get("v", np.zeros_like(w))
        v = self.config["momentum"] * v - self.config["lr"] * g
        self.config["v"] = v
        return w + v

    def settings(self):
        return self.config


class NestedConfig(AttributeConfig):
    def __init__(self):
        self.configs = {"a": {"lr": 0.1}}

    def step(self, w, g):
        c = self.configs["a"]
        c.setdefault("momentum", 0.9)
        v = c.get("v", np.zeros_like(w))
        v = c["momentum"] * v - c["lr"] * g
        c["v"] = v
        return w + v

    def settings(self):
        return self.configs["a"]


class Defaults:
    """A class of the user's with its own ``setdefault``: called as written."""

    def __init__(self):
        self.table = {}

    def setdefault(self, key, value):
        self.table.setdefault(key, value)
        return self.table[key] * 2


class WithDefaults:
    def __init__(self):
        self.defaults = Defaults()

    def step(self, w, g):
        return w - self.defaults.setdefault("lr", 0.05) * g

    def settings(self):
        return self.defaults.table


@pytest.mark.parametrize("make", [AttributeConfig, NestedConfig, WithDefaults])
def test_setdefault_on_a_dict_read_from_outside_compiles(make):
    model = make()
    twin = copy.deepcopy(model)
    step = tj.jit(model.step, cache="memory")
    w = np.ones(3)
    for call in range(6):
        if call == 4:  # the user changes a setting between calls
            for target in (model, twin):
                target.settings()["lr"] = 0.3
        g = np.full(3, call + 1.0)
        np.testing.assert_allclose(step(w, g), twin.step(w, g), rtol=1e-12)
        assert model.settings().keys() == twin.settings().keys()
        for key, value in model.settings().items():
            np.testing.assert_allclose(value, twin.settings()[key], rtol=1e-12)
    assert step.stats()["compiled_calls"] >= 2, step.stats()


class NestedCache:
    """numpy-ml's optimizer idiom: ``C = self.cache``, items written through ``C``, then
    ``self.cache = C`` - the same dicts stay, as in eager."""

    def __init__(self):
        self.cache = {"W": {"m": np.zeros(3), "count": 0}}

    def step(self, g):
        C = self.cache
        C["W"]["m"] = 0.9 * C["W"]["m"] + g * (1 + C["W"]["count"])
        self.cache = C
        return C["W"]["m"]


def test_a_dict_stored_back_keeps_the_callers_dicts():
    model = NestedCache()
    twin = copy.deepcopy(model)
    outer, inner = model.cache, model.cache["W"]
    step = tj.jit(model.step, cache="memory")
    for call in range(5):
        if call == 3:
            model.cache["W"]["count"] = twin.cache["W"]["count"] = 5
        g = np.full(3, call + 1.0)
        np.testing.assert_allclose(step(g), twin.step(g), rtol=1e-12)
        assert model.cache is outer and model.cache["W"] is inner  # eager's own dicts
        np.testing.assert_allclose(inner["m"], twin.cache["W"]["m"], rtol=1e-12)
    assert step.stats()["compiled_calls"] >= 2, step.stats()
