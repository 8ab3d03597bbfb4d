"""In-place writes into arrays read from outside the arguments (``self.W -= lr * dW``, a
global's ``w -= g``, ``for p, g in zip(self.params, grads): p -= lr * g``) reach those
arrays on traced, compiled and disk-cached calls, as eager NumPy's do
(``tracer.argument_writes.OutsideArrayWrite``). They were silently dropped before.

Each test runs the jit function and a twin model eagerly, and compares the results and
the models' arrays after every call."""

import numpy as np
import pytest

import tracejit as tj

WEIGHTS = np.ones(3)
OTHER = np.ones(3)


def through_a_local_name(x):
    w = WEIGHTS
    w -= 0.1 * x
    return x.sum()


def with_out_argument(x):
    np.add(OTHER, x, out=OTHER)
    return OTHER * 2.0


class Linear:
    def __init__(self, n, m, seed):
        rng = np.random.default_rng(seed)
        self.W = rng.standard_normal((n, m))
        self.b = np.zeros(m)
        self.dW = np.zeros((n, m))
        self.db = np.zeros(m)

    def forward(self, x):
        return x @ self.W + self.b

    def backward(self, x, dout):
        self.dW[...] = x.T @ dout  # into the layer's own gradient buffers
        self.db[...] = dout.sum(axis=0)
        return dout @ self.W.T


class Net:
    """Layers as objects, an SGD step over their attributes (``layer.W -= lr * layer.dW``)."""

    def __init__(self, seed=0):
        self.layers = [Linear(4, 8, seed), Linear(8, 3, seed + 1)]

    def step(self, x, y):
        inputs = []
        out = x
        for layer in self.layers:
            inputs.append(out)
            out = layer.forward(out)
        d = out - y
        loss = (d ** 2).mean()
        for layer, seen in zip(reversed(self.layers), reversed(inputs)):
            d = layer.backward(seen, d)
        for layer in self.layers:
            layer.W -= 0.01 * layer.dW
            layer.b -= 0.01 * layer.db
        return loss


class ParameterList:
    def __init__(self):
        self.params = [np.ones(3), np.full(2, 2.0)]

    def step(self, g1, g2):
        for p, g in zip(self.params, (g1, g2)):
            p -= 0.5 * g
        return self.params[0].sum()


def test_a_global_array_updated_through_a_local_name():
    want = WEIGHTS.copy()  # (the warm-start test below updates WEIGHTS too, in any order)
    f = tj.jit(through_a_local_name, cache="memory")
    for call in range(4):
        x = np.arange(3.0) + call
        assert f(x) == x.sum()
        want -= 0.1 * x
        np.testing.assert_allclose(WEIGHTS, want, rtol=1e-12)
    assert f.stats()["compiled_calls"] >= 2


def test_an_out_argument_naming_a_global_array():
    want = np.ones(3)
    f = tj.jit(with_out_argument, cache="memory")
    for call in range(4):
        x = np.full(3, float(call))
        want += x
        np.testing.assert_allclose(f(x), want * 2.0)
        np.testing.assert_allclose(OTHER, want)
    assert f.stats()["compiled_calls"] >= 2


@pytest.mark.parametrize("sizes", [(5, 7, 5, 9, 5, 1, 5), (3, 3, 3, 3)])
def test_layer_objects_updated_by_their_train_step(sizes):
    model, twin = Net(), Net()
    f = tj.jit(model.step, cache="memory")
    rng = np.random.default_rng(1)
    for n in sizes:
        x, y = rng.standard_normal((n, 4)), rng.standard_normal((n, 3))
        np.testing.assert_allclose(f(x, y), twin.step(x, y), rtol=1e-10)
        for ours, theirs in zip(model.layers, twin.layers):
            for name in ("W", "b", "dW", "db"):
                np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name),
                                           rtol=1e-10, atol=1e-12, err_msg=f"n={n} {name}")
    stats = f.stats()
    assert stats["compiled_calls"] >= 2 and not stats["eager_calls"], stats


def test_a_list_of_parameters_updated_in_a_loop():
    model, twin = ParameterList(), ParameterList()
    f = tj.jit(model.step, cache="memory")
    for call in range(4):
        g1, g2 = np.full(3, call + 1.0), np.full(2, -1.0)
        assert f(g1, g2) == twin.step(g1, g2)
        for ours, theirs in zip(model.params, twin.params):
            np.testing.assert_array_equal(ours, theirs)
    assert f.stats()["compiled_calls"] >= 2


def test_the_arrays_stay_the_same_objects():
    model = ParameterList()
    before = [id(p) for p in model.params]
    f = tj.jit(model.step, cache="memory")
    for _ in range(3):
        f(np.ones(3), np.ones(2))
    assert [id(p) for p in model.params] == before


def test_a_warm_start_from_disk_still_writes(tmp_path, monkeypatch):
    """A second process's view: a new jit object on the same cache directory."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    want = WEIGHTS.copy()
    for _process in range(2):
        f = tj.jit(through_a_local_name)
        for call in range(3):
            x = np.full(3, call + 1.0)
            f(x)
            want -= 0.1 * x
            np.testing.assert_allclose(WEIGHTS, want, rtol=1e-12)
    assert f.stats()["disk_hits"] == 1


TENSOR = tj.Tensor(np.ones(3)) if hasattr(tj, "Tensor") else None


def into_an_outside_tensor(x):
    t = TENSOR
    t += x
    return x * 2.0


@pytest.mark.skipif(TENSOR is None, reason="no Tensor")
def test_an_in_place_write_into_an_outside_tensor_runs_eagerly():
    f = tj.jit(into_an_outside_tensor, cache="memory")
    for call in range(3):
        f(np.ones(3))
        np.testing.assert_array_equal(np.asarray(TENSOR), np.full(3, call + 2.0))


class Returning:
    """An SGD step that returns the weights it updated in place, as update rules do."""

    def __init__(self):
        self.W = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
        self.b = np.zeros(3)

    def step(self, dW, db):
        self.W -= 0.1 * dW
        self.b -= 0.1 * db
        return self.W, (self.b, self.W.sum())


RW = np.linspace(-1.0, 1.0, 6).reshape(2, 3)


def returning_a_global(dW):
    w = RW
    w -= 0.1 * dW
    return w, w.sum()


def test_an_outside_array_updated_and_returned_is_that_array():
    # NumPy returns self.W itself: a later write into the result reaches the model. The
    # compiled call returned a copy of the new values (helper-81's finding).
    model, twin = Returning(), Returning()
    f = tj.jit(model.step, cache="memory")
    for call in range(3):
        dW, db = np.full((2, 3), call + 1.0), np.full(3, -1.0)
        W, (b, total) = f(dW, db)
        W_twin, (b_twin, total_twin) = twin.step(dW, db)
        assert W is model.W and b is model.b
        np.testing.assert_array_equal(W, W_twin)
        np.testing.assert_array_equal(b, b_twin)
        assert total == pytest.approx(total_twin, rel=1e-12)
        W[0, 0] += 1.0  # reaches the model, as eagerly
        W_twin[0, 0] += 1.0
        np.testing.assert_array_equal(model.W, twin.W)
    assert f.stats()["compiled_calls"] >= 2, f.stats()


def test_an_outside_array_returned_from_a_disk_entry_is_that_array(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    for _attempt in range(2):  # the second: a new jit object finds the entry on disk
        f = tj.jit(returning_a_global)
        for call in range(3):
            w, total = f(np.full((2, 3), call + 1.0))
            assert w is RW
            assert total == pytest.approx(RW.sum(), rel=1e-12)
    assert f.stats()["disk_hits"] == 1 and f.stats()["compiled_calls"] == 3, f.stats()
