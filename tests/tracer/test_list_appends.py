"""Appends to lists held outside the function compile (tracer/list_appends.py):
``self.history.append(h)``, numpy-ml's ``self.X.append(X)`` and
``self.derived_variables["Z"].append(Z)``, a module-level ``LOSSES.append(loss)``.

Before: every such call ran eagerly ("changes state outside the compiled function"). Each
test runs a jit function and its eager twin over several calls (the first traced, the rest
compiled: ``compiled_calls`` counts them, so a silent eager fallback fails) and compares the
results and every list, item by item (type, value, and which items are the caller's arrays).
"""

import copy
import pickle

import numpy as np
import pytest

import tracejit as tj

LOSSES = []
SHARED = []


def assert_same_items(got, want):
    assert len(got) == len(want)
    for mine, theirs in zip(got, want):
        assert type(mine) is type(theirs), (mine, theirs)
        if isinstance(theirs, (tuple, list)):
            assert_same_items(mine, theirs)
        elif isinstance(theirs, dict):
            assert list(mine) == list(theirs)
            assert_same_items(list(mine.values()), list(theirs.values()))
        elif isinstance(theirs, (np.ndarray, np.generic)):
            assert mine.dtype == theirs.dtype
            np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)
        else:
            assert mine == theirs or (mine != mine and theirs != theirs)


class Recorder:
    """numpy-ml's layers: each forward's input and pre-activation kept for backward."""

    def __init__(self):
        self.W = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
        self.X = []
        self.derived_variables = {"Z": []}
        self.history = []

    def forward(self, X):
        Z = X @ self.W
        Y = np.maximum(Z, 0.0)
        self.X.append(X)
        self.derived_variables["Z"].append(Z)
        self.history.append((Y.sum(), {"mean": Z.mean(), "step": 1}, "tag", None, 2.5))
        self.history.extend([Y[0], -0.0])
        return Y


def test_attribute_lists_get_what_eager_appends():
    eager, jitted = Recorder(), Recorder()
    f = tj.jit(jitted.forward, cache="memory")
    xs = [np.full((2, 3), value) for value in (0.5, -1.0, np.inf, 2.0)]
    for x in xs:
        with np.errstate(invalid="ignore"):  # inf * 0 in the matmul: NaN, as eager has it
            np.testing.assert_allclose(f(x), eager.forward(x.copy()), rtol=1e-12)
    for name in ("X", "history"):
        assert_same_items(getattr(jitted, name), getattr(eager, name))
    assert_same_items(jitted.derived_variables["Z"], eager.derived_variables["Z"])
    # the caller's arrays themselves, as eager appends them; the computed ones are fresh
    assert all(kept is x for kept, x in zip(jitted.X, xs))
    zs = jitted.derived_variables["Z"]
    assert not any(np.shares_memory(a, b) for a in zs for b in zs if a is not b)
    assert f.stats()["compiled_calls"] >= 3 and f.stats()["compiles"] == 1, f.explain()


def training_step(x, w):
    loss = ((x @ w - 1.0) ** 2).mean()
    LOSSES.append(loss)
    return w - 0.1 * x.T @ (x @ w - 1.0)


def test_a_module_level_list_cleared_and_rebound_between_calls():
    global LOSSES
    f = tj.jit(training_step, cache="memory")
    x, w = np.arange(6.0).reshape(3, 2) / 6, np.ones(2)
    want = []
    for call in range(6):
        if call == 2:
            LOSSES.clear()
            want.clear()
        if call == 4:
            LOSSES = []  # rebound: the next append goes to the new list
            want = []
        want.append(((x @ w - 1.0) ** 2).mean())
        w = f(x, w)
    assert_same_items(LOSSES, want)
    assert type(LOSSES[0]) is np.float64
    assert f.stats()["compiled_calls"] >= 5, f.explain()


def test_appends_from_a_loop_body_in_order():
    class Cell:
        def __init__(self):
            self.hs = []
            self.W = np.eye(3) * 0.5

        def run(self, xs):
            h = np.zeros(3)
            for t in range(xs.shape[0]):
                h = np.tanh(xs[t] + h @ self.W)
                self.hs.append(h)
            return h

    eager, jitted = Cell(), Cell()
    f = tj.jit(jitted.run, cache="memory")
    for call in range(4):
        xs = np.linspace(-1, 1, 15).reshape(5, 3) * (call + 1)
        np.testing.assert_allclose(f(xs), eager.run(xs), rtol=1e-12)
    assert_same_items(jitted.hs, eager.hs)
    assert f.stats()["compiled_calls"] >= 3, f.explain()


def test_one_list_appended_by_two_objects_and_through_a_global():
    class Logger:
        def __init__(self, log):
            self.log = log

    def make():
        log = []
        return log, Logger(log), Logger(log)

    def step(first, second, x):
        first.log.append(x.sum())
        second.log.append(x * 2)
        SHARED.append("end")
        return x + 1

    log, a, b = make()
    eager_log, c, d = make()
    f = tj.jit(step, cache="memory")
    for call in range(4):
        x = np.full(2, float(call))
        f(a, b, x)
        step(c, d, x)
    assert_same_items(log, eager_log)
    assert SHARED == ["end"] * 8
    assert f.stats()["compiled_calls"] >= 3, f.explain()


def test_a_read_after_the_append_and_a_list_passed_as_an_argument_run_right():
    class Model:
        def __init__(self):
            self.X = []

        def read_back(self, x):
            self.X.append(x * 2)
            self.X.append((x.sum(), 3.5))
            return self.X[-2] + self.X[-1][0] * self.X[-1][1]

        def read_length(self, x):
            self.X.append(x)
            return x * len(self.X)  # what the list held before the call: eager

        def through_argument(self, x, also):
            self.X.append(x)
            return len(also) + x  # ``also`` is self.X: eager sees the append

    eager, jitted = Model(), Model()
    f = tj.jit(jitted.read_back, cache="memory")
    for call in range(3):
        x = np.full(2, float(call))
        np.testing.assert_allclose(f(x), eager.read_back(x), rtol=1e-12)
    assert_same_items(jitted.X, eager.X)
    assert f.stats()["compiled_calls"] >= 2 and f.stats()["compiles"] == 1, f.explain()
    h = tj.jit(jitted.read_length, cache="memory")
    for call in range(3):
        x = np.full(2, float(call))
        np.testing.assert_allclose(h(x), eager.read_length(x), rtol=1e-12)
    assert_same_items(jitted.X, eager.X)
    g = tj.jit(jitted.through_argument, cache="memory")
    for call in range(3):
        x = np.full(2, float(call))
        np.testing.assert_allclose(g(x, jitted.X), eager.through_argument(x, eager.X))
    assert_same_items(jitted.X, eager.X)


def test_a_list_read_before_the_append_runs_eagerly_without_compiling_per_length():
    class Cell:
        def __init__(self):
            self.hs = [np.zeros(3)]

        def step(self, x):
            h = np.tanh(x + self.hs[-1])  # its length guarded: a new trace per length
            self.hs.append(h)
            return h

    eager, jitted = Cell(), Cell()
    f = tj.jit(jitted.step, cache="memory")
    for call in range(4):
        x = np.full(3, call * 0.3)
        np.testing.assert_allclose(f(x), eager.step(x), rtol=1e-12)
    assert_same_items(jitted.hs, eager.hs)
    assert f.stats()["compiles"] == 0, f.explain()


def test_no_list_there_raises_as_eager_and_an_exception_after_the_append():
    class Model:
        def __init__(self):
            self.hs = []

        def step(self, x, fail=False):
            self.hs.append(x + 1)
            if fail:
                raise ValueError("late")
            return x * 2

    model, twin = Model(), Model()
    f = tj.jit(model.step, cache="memory")
    for call in range(3):
        f(np.ones(2) * call)
        twin.step(np.ones(2) * call)
    for target in (model, twin):
        with pytest.raises(ValueError, match="late"):
            target.step(np.ones(2), True) if target is twin else f(np.ones(2), True)
    assert_same_items(model.hs, twin.hs)
    model.hs = None
    with pytest.raises(AttributeError):
        f(np.ones(2))
    model.hs = []
    f(np.ones(2))
    assert len(model.hs) == 1 and f.stats()["compiled_calls"] >= 3, f.explain()


def test_check_mode_puts_the_list_back_before_its_eager_rerun():
    model = Recorder()
    f = tj.jit(model.forward, cache="memory", check=True)
    for call in range(3):
        f(np.full((2, 3), call + 1.0))
    assert len(model.X) == 3 and len(model.history) == 9
    assert f.stats()["compiled_calls"] >= 2, f.explain()


class Decorated:
    def __init__(self):
        self.history = []

    @tj.jit
    def step(self, x):
        y = np.tanh(x)
        self.history.append((y, y.sum()))
        LOSSES.append(y.max())
        return y


def test_a_disk_hit_and_a_pickled_object_append_too(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    del LOSSES[:]
    for _attempt in range(2):  # the second: a new jit object finds the entry on disk
        model = Decorated()
        jitted = tj.jit(training_step)
        for call in range(3):
            jitted(np.ones((2, 2)), np.full(2, float(call)))
            model.step(np.full(3, float(call)))
        assert len(model.history) == 3 and type(model.history[2][1]) is np.float64
        np.testing.assert_allclose(model.history[2][0], np.tanh(np.full(3, 2.0)))
    assert jitted.stats()["disk_hits"] == 1 and jitted.stats()["compiled_calls"] == 3
    assert len(LOSSES) == 12
    copied = pickle.loads(pickle.dumps(model))
    copied.step(np.ones(3))
    assert len(copied.history) == 4 and len(model.history) == 3
    assert copy.deepcopy(model).history[0][1] == model.history[0][1]
