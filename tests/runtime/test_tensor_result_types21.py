"""Compiled calls that mix Tensors and ndarrays return and store the types eager does, per
output (helper-147's probes j and n): a value computed from a Tensor is a Tensor, one
computed from ndarrays only is an ndarray, and ``value_and_grad`` hands back NumPy's
values. Before, every array the call returned was made a Tensor as soon as a Tensor went
in, and the values the call stored were left ndarrays: ``np.asarray``, ``isinstance`` and
``.backward()`` then behave otherwise than eagerly.

Each case runs the function eagerly (the reference) and under jit for a few calls (the
trace's own result, then compiled calls), and compares per leaf: type, dtype, values and,
for Tensors, ``requires_grad`` and the gradients ``backward()`` leaves.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit, no_grad, tensor, value_and_grad
from tracejit.runtime.tensor import Tensor

CALLS = 3


def assert_same(got, want, what):
    """``got`` is what eager's ``want`` is: its type, dtype, values (and, for a Tensor,
    whether it requires grad)."""
    assert type(got) is type(want), (what, type(got).__name__, type(want).__name__)
    if isinstance(want, Tensor):
        assert got.requires_grad == want.requires_grad, what
        got, want = got.detach().numpy(), want.detach().numpy()
    assert np.asarray(got).dtype == np.asarray(want).dtype, what
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14, err_msg=what)


def weights():
    return tensor(np.linspace(-1.0, 1.0, 12).reshape(3, 4), requires_grad=True)


def data(call):
    return np.arange(6.0).reshape(2, 3) / (call + 2)


def loss_and_plain(w, x):
    h = np.tanh(x @ w)
    return (h ** 2).sum(), x * 3, h, x.T


@pytest.mark.parametrize("gradients", [True, False], ids=["grad", "no_grad"])
def test_arrays_computed_from_ndarrays_stay_ndarrays_beside_tensors(gradients):
    jitted = jit(loss_and_plain, cache=False)
    for call in range(CALLS):
        w, w_eager, x = weights(), weights(), data(call)
        if gradients:
            got, want = jitted(w, x), loss_and_plain(w_eager, x)
        else:
            with no_grad():
                got, want = jitted(w, x), loss_and_plain(w_eager, x)
        for index, (value, expected) in enumerate(zip(got, want)):
            assert_same(value, expected, f"call {call}, output {index}")
        assert np.shares_memory(got[3], x)  # x.T: NumPy's view of the caller's x
        if gradients:
            got[0].backward()
            want[0].backward()
            assert_same(w.grad, w_eager.grad, f"call {call}, w.grad")
    assert jitted.stats()["eager_reasons"] == {} and jitted.stats()["compiled_calls"] >= CALLS - 1


def squared_tanh(w, x):
    return (np.tanh(x @ w) ** 2).sum()


def test_value_and_grad_of_tensors_returns_numpy_values():
    jitted = jit(value_and_grad(squared_tanh), cache=False)
    for call in range(CALLS):
        w, x = weights(), data(call)
        (value, gradient), (value_eager, gradient_eager) = jitted(w, x), value_and_grad(
            squared_tanh)(weights(), x)
        assert_same(value, value_eager, f"call {call}, value")
        assert_same(gradient, gradient_eager, f"call {call}, gradient")
    assert jitted.stats()["eager_reasons"] == {} and jitted.stats()["compiled_calls"] >= CALLS - 1


def step_with_value_and_grad(w, x):
    value, gradient = value_and_grad(squared_tanh)(w, x)
    return (value * w).sum(), gradient * 2  # a Tensor (through w), and NumPy's array


@pytest.mark.parametrize("gradients", [True, False], ids=["grad", "no_grad"])
def test_values_computed_from_value_and_grads_results_are_tensors_only_through_tensors(
        gradients):
    jitted = jit(step_with_value_and_grad, cache=False)
    for call in range(CALLS):
        w, w_eager, x = weights(), weights(), data(call)
        if gradients:
            got, want = jitted(w, x), step_with_value_and_grad(w_eager, x)
        else:
            with no_grad():
                got, want = jitted(w, x), step_with_value_and_grad(w_eager, x)
        for index, (value, expected) in enumerate(zip(got, want)):
            assert_same(value, expected, f"call {call}, output {index}")
        if gradients:  # value is NumPy's number: no gradient flows through it
            got[0].backward()
            want[0].backward()
            assert_same(w.grad, w_eager.grad, f"call {call}, w.grad")
    assert jitted.stats()["eager_reasons"] == {} and jitted.stats()["compiled_calls"] >= CALLS - 1


class Layer:
    def __init__(self):
        self.W = weights()
        self.hs = []

    def forward(self, x, config):
        self.cache = x * 2  # an ndarray, as x is
        h = np.tanh(x @ self.W)
        self.last = h * 1.0  # a Tensor, under no_grad too
        self.total = (h ** 2).sum()  # a 0-d Tensor
        self.hs.append(h)
        config["h"] = h
        config["count"] = x.sum()  # NumPy's float64
        return self.total, x * 3


def test_written_values_are_tensors_where_eager_writes_tensors():
    layer, layer_eager = Layer(), Layer()
    jitted = jit(lambda layer, x, config: layer.forward(x, config), cache=False)
    for call in range(CALLS):
        x, config, config_eager = data(call), {}, {}
        with no_grad():
            got, want = jitted(layer, x, config), layer_eager.forward(x, config_eager)
        for index, (value, expected) in enumerate(zip(got, want)):
            assert_same(value, expected, f"call {call}, output {index}")
        for name in ("cache", "last", "total"):
            assert_same(getattr(layer, name), getattr(layer_eager, name), f"call {call}, {name}")
        assert_same(layer.hs[-1], layer_eager.hs[-1], f"call {call}, hs[-1]")
        for key in config_eager:
            assert_same(config[key], config_eager[key], f"call {call}, config[{key!r}]")
    assert len(layer.hs) == CALLS
    assert jitted.stats()["eager_reasons"] == {} and jitted.stats()["compiled_calls"] >= CALLS - 1


def test_a_plan_loaded_from_disk_keeps_which_outputs_are_tensors(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    for run in range(2):  # the second jit loads the first one's program, as a new process
        jitted = jit(loss_and_plain)
        w, w_eager, x = weights(), weights(), data(run)
        got, want = jitted(w, x), loss_and_plain(w_eager, x)
        for index, (value, expected) in enumerate(zip(got, want)):
            assert_same(value, expected, f"run {run}, output {index}")
        got[0].backward()
        want[0].backward()
        assert_same(w.grad, w_eager.grad, f"run {run}, w.grad")
    assert jitted.stats()["disk_hits"] == 1, jitted.stats()


class TrainedLayer:
    def __init__(self):
        self.W = weights()
        self.log = []

    def forward(self, x):
        self.cache = x * 2  # an ndarray eagerly: stored as one (it ran eagerly, refused)
        h = np.tanh(x @ self.W)
        self.mean = h.detach().mean(axis=0)  # a Tensor without history
        self.log.append(x.sum(axis=1))
        return (h ** 2).sum()


def test_ndarrays_written_in_a_call_with_gradients_compile_and_stay_ndarrays():
    layer, layer_eager = TrainedLayer(), TrainedLayer()
    jitted = jit(lambda layer, x: layer.forward(x), cache=False)
    for call in range(CALLS):
        x = data(call)
        got, want = jitted(layer, x), layer_eager.forward(x)
        assert_same(got, want, f"call {call}, loss")
        got.backward()
        want.backward()
        assert_same(layer.W.grad, layer_eager.W.grad, f"call {call}, W.grad")
        for name in ("cache", "mean"):
            assert_same(getattr(layer, name), getattr(layer_eager, name), f"call {call}, {name}")
        assert_same(layer.log[-1], layer_eager.log[-1], f"call {call}, log[-1]")
    assert jitted.stats()["eager_reasons"] == {} and jitted.stats()["compiled_calls"] >= CALLS - 1
