"""Item writes into a dict an object keeps (``self.cache["x"] = x``, ``self.grads["W"] =
dW``): compiled calls leave the dict as the eager call does (``attribute_writes.note_item``);
before, each such write made the call run eagerly. Lists and other containers from outside
stay refused (the call runs eagerly and is right)."""

import copy

import numpy as np
from real_model_checks import assert_same, jitted, rng_for

F64 = {"rtol": 1e-12, "atol": 1e-12}


class DenseRelu:
    def __init__(self, W):
        self.W, self.cache, self.grads = W, {}, {"W": np.zeros_like(W)}

    def forward(self, x):
        h = x @ self.W
        self.cache["x"] = x
        self.cache["h"] = h
        return np.maximum(h, 0)

    def backward(self, dout):
        dh = dout * (self.cache["h"] > 0)
        self.grads["W"] = self.cache["x"].T @ dh
        self.grads["b"] = dh.sum(axis=0)
        self.grads["pair"] = (dh.max(), self.cache["x"].min())  # NumPy scalars
        return dh @ self.W.T


def _state(layer):
    return {"cache": layer.cache, "grads": layer.grads}


def test_a_layer_caching_in_dicts_matches_eager_and_compiles():
    rng = rng_for(1200)
    W = rng.standard_normal((3, 4))
    eager, compiled = DenseRelu(W.copy()), DenseRelu(W.copy())
    forward, backward = jitted(compiled.forward), jitted(compiled.backward)
    for n in (5, 5, 6, 7, 5, 6):
        x, dout = rng.standard_normal((n, 3)), rng.standard_normal((n, 4))
        assert_same(forward(x), eager.forward(x), **F64)
        assert_same(backward(dout), eager.backward(dout), **F64)
        assert_same(_state(compiled), _state(eager), where="layer dicts", **F64)
    for f in (forward, backward):
        stats = f.stats()
        assert not stats["eager_calls"] and stats["compiled_calls"] >= 2, (f, stats)


class Tracker:
    def __init__(self):
        self.stats = {"steps": 0, "mode": "train"}

    def step(self, x):
        loss = (x ** 2).mean()
        self.stats["loss"] = loss
        self.stats["mode"] = "eval" if x.shape[0] > 4 else "train"
        return loss


def test_numbers_and_strings_written_into_a_dict_match_eager():
    rng = rng_for(1201)
    eager, compiled = Tracker(), Tracker()
    f = jitted(compiled.step)
    for n in (3, 3, 5, 3, 6):
        x = rng.standard_normal(n)
        assert_same(f(x), eager.step(x), **F64)
        assert_same(compiled.stats, eager.stats, where="stats", **F64)


class FailsAfterWriting:
    def __init__(self):
        self.cache = {"x": np.zeros(2)}

    def forward(self, x):
        self.cache["x"] = x * 2
        if not np.isfinite(x).all():
            raise FloatingPointError("non-finite input")
        return x + 1


def test_a_call_that_raises_leaves_the_dict_as_eager_does():
    eager, compiled = FailsAfterWriting(), FailsAfterWriting()
    f = jitted(compiled.forward)
    for x in (np.ones(2), np.full(2, 2.0), np.array([1.0, np.nan]), np.full(2, 3.0)):
        eager_state = copy.deepcopy(eager.cache)
        try:
            want = eager.forward(x)
        except FloatingPointError:
            want = None
        try:
            got = f(x)
        except FloatingPointError:
            got = None
        assert (got is None) == (want is None)
        if want is not None:
            assert_same(got, want, **F64)
        assert_same(compiled.cache, eager.cache, where="cache", **F64)
        del eager_state


class KeepsAList:
    def __init__(self):
        self.cache = {"xs": []}

    def forward(self, x):
        self.cache["last"] = [x]  # a new list each call: eager makes a new one, so refused
        return x * 2


def test_a_list_written_into_a_dict_runs_eagerly_and_is_right():
    eager, compiled = KeepsAList(), KeepsAList()
    f = jitted(compiled.forward)
    for x in (np.ones(2), np.full(2, 2.0)):
        assert_same(f(x), eager.forward(x), **F64)
        assert_same(compiled.cache, eager.cache, where="cache", **F64)


class RunningStats:
    def __init__(self):
        self.stats = {"steps": 0, "avg": 0.0, "mode": "train", "best": None}

    def step(self, x):
        loss = (x ** 2).mean()
        self.stats["steps"] += 1
        self.stats["avg"] = self.stats["avg"] + (loss - self.stats["avg"]) / self.stats["steps"]
        if self.stats["best"] is None or loss < self.stats["best"]:
            self.stats["best"] = loss
        self.stats["mode"] = "eval" if self.stats["steps"] > 3 else "train"
        return loss * self.stats["steps"]


def test_counters_and_running_means_in_a_dict_are_read_at_every_call():
    rng = rng_for(1202)
    eager, compiled = RunningStats(), RunningStats()
    f = jitted(compiled.step)
    for n in (3, 3, 3, 3, 3, 3, 3, 4, 4):
        x = rng.standard_normal(n)
        assert_same(f(x), eager.step(x), **F64)
        assert_same(compiled.stats, eager.stats, where="stats", **F64)
    stats = f.stats()  # (a branch's first side exits run eagerly, as anywhere)
    assert stats["compiled_calls"] >= 3 and set(stats["eager_calls"]) <= {"side exit"}, (
        f.explain())
