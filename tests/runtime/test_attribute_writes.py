"""Attribute writes on objects from outside the function (``self.cache = x``, ``self.h,
self.c = h, c``) compile and leave the objects as eager NumPy leaves them
(tracer/attribute_writes.py); statements with several write targets are split so each
write is seen (tracer/unpacking.py).

Before: ``self.cache = x`` was refused (every layer-object model ran eagerly), and
``self.h, self.c = h, c`` left tracers in the object (a crash at the next use, compiled
calls skipping the write). Each test runs a jit object and a twin eagerly over several
calls (traced, then compiled) and compares results and every attribute."""

import copy

import numpy as np
import pytest

import tracejit as tj


class Dense:
    def __init__(self, seed=0):
        self.W = np.random.default_rng(seed).standard_normal((3, 3))

    def forward(self, x):
        self.x = x  # what backward needs, kept on the layer
        self.out = np.maximum(x @ self.W, 0)
        return self.out

    def backward(self, d):
        d = d * (self.out > 0)
        self.dW = self.x.T @ d
        return d @ self.W.T


class Sequential:
    def __init__(self):
        self.layers = [Dense(0), Dense(1)]

    def step(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        d = x - 1.0
        for layer in reversed(self.layers):
            d = layer.backward(d)
        for layer in self.layers:
            layer.W -= 0.1 * layer.dW
        return (x ** 2).sum()


class LSTMish:
    def __init__(self):
        self.h, self.c = np.zeros(3), np.zeros(3)

    def step(self, x):
        c = 0.5 * self.c + np.tanh(x + self.h)
        h = np.tanh(c)
        self.h, self.c = h, c  # a tuple of attribute targets
        return h.sum()


class Targets:
    def __init__(self):
        self.a = None

    def f(self, x):
        y = self.a = x * 2  # several targets
        self.b, (self.c, d) = x + 1, (x - 1, x * 3)  # nested
        first, *self.rest = x[0], x[1], x[2]  # starred
        self.cache = (x, {"y": y})  # a tuple holding a dict
        self.mode = "train"
        return y + d + first


class RNN:
    def __init__(self):
        self.W = np.eye(3) * 0.5
        self.h = np.zeros(3)

    def run(self, xs):
        for t in range(xs.shape[0]):
            self.h = np.tanh(xs[t] + self.h @ self.W)  # written in a loop body
        return self.h.sum()


class Counter:
    def __init__(self):
        self.t = 0
        self.m = np.zeros(3)

    def step(self, g):
        self.t += 1  # a rebinding of a Python number: eager
        self.m = 0.9 * self.m + g
        return self.m / (1 - 0.9 ** self.t)


class Keeper:
    def f(self, x):
        self.helper = Dense()  # an object: eager makes a new one per call
        return x * 2


class Drawer:
    def f(self, x):
        self.cache = x * 2
        noise = np.random.rand(*x.shape)  # refused after the write: the trace fails
        return x + 0 * noise


def local_object(x):
    layer = Dense()
    layer.extra = x.sum()
    return layer.backward(layer.forward(x)) + layer.extra


def argument_object(layer, x):
    return layer.backward(layer.forward(x)).sum()


MODEL = Dense(3)


def global_object(x):
    return MODEL.backward(MODEL.forward(x))


def assert_same_state(ours, theirs, where):
    assert vars(ours).keys() == vars(theirs).keys(), where
    for name, want in vars(theirs).items():
        got = vars(ours)[name]
        assert type(got) is type(want), (where, name, type(got))
        if isinstance(want, (list, tuple)):
            for a, b in zip(got, want):
                if isinstance(b, Dense):  # Sequential.layers: compared one by one
                    continue
                if isinstance(b, dict):
                    np.testing.assert_allclose(a["y"], b["y"], err_msg=f"{where} {name}")
                else:
                    np.testing.assert_allclose(a, b, err_msg=f"{where} {name}")
        elif isinstance(want, np.ndarray):
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"{where} {name}")
        elif isinstance(want, (Dense, type(None), str)):
            assert type(got) is type(want)
        else:
            assert got == want, (where, name)


def run_twins(make, method, inputs, compiled_at_least=2):
    ours, theirs = make(), make()
    f = tj.jit(getattr(ours, method), cache="memory")
    for index, args in enumerate(inputs):
        got = f(*copy.deepcopy(args))
        want = getattr(theirs, method)(*copy.deepcopy(args))
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"call {index}")
        assert_same_state(ours, theirs, f"call {index}")
        for layer_ours, layer_theirs in zip(getattr(ours, "layers", ()),
                                            getattr(theirs, "layers", ())):
            assert_same_state(layer_ours, layer_theirs, f"call {index} layer")
    assert f.stats()["compiled_calls"] >= compiled_at_least, f.stats()
    return f


def batches(*sizes):
    return [(np.linspace(-1.0, 1.0, 3 * n).reshape(n, 3),) for n in sizes]


def test_layers_keep_their_caches_and_weights():
    f = run_twins(Sequential, "step", batches(4, 6, 4, 1, 4, 6))
    assert not f.stats()["eager_calls"]


def test_a_cell_keeps_its_state_in_a_tuple_of_attributes():
    f = run_twins(LSTMish, "step", [(np.full(3, 0.1 * i),) for i in range(5)])
    assert not f.stats()["eager_calls"]


def test_several_nested_and_starred_targets():
    run_twins(Targets, "f", [(np.arange(3.0) + i,) for i in range(4)])


def test_a_state_written_in_a_loop_body():
    run_twins(RNN, "run", batches(3, 5, 3, 4, 3))


def test_a_rebound_number_runs_eagerly_and_right():
    run_twins(Counter, "step", [(np.full(3, float(i)),) for i in range(4)],
              compiled_at_least=0)


def test_an_object_written_into_an_attribute_runs_eagerly_and_right():
    run_twins(Keeper, "f", [(np.ones(3),)] * 3, compiled_at_least=0)


def test_a_failed_trace_puts_the_attribute_back_before_the_eager_run():
    ours = Drawer()
    ours.cache = "before"
    f = tj.jit(ours.f, cache="memory")
    for n in (2, 3):
        f(np.ones(n))
        np.testing.assert_array_equal(ours.cache, np.full(n, 2.0))  # eager's value
    assert f.stats()["eager_calls"]


@pytest.mark.parametrize("function, make", [
    (local_object, None),
    (global_object, None),
    (argument_object, lambda: Dense(1)),
])
def test_objects_made_here_passed_in_or_global(function, make):
    ours, theirs = (make(), make()) if make else (None, None)
    f = tj.jit(function, cache="memory")
    model_before = copy.deepcopy(MODEL)
    for n in (3, 5, 3, 4):
        x = np.linspace(-1.0, 1.0, 3 * n).reshape(n, 3)
        if make:
            np.testing.assert_allclose(f(ours, x), function(theirs, x), rtol=1e-12)
            assert_same_state(ours, theirs, f"n={n}")
        else:
            got = f(x)
            if function is global_object:
                after = copy.deepcopy(MODEL)
                MODEL.__dict__.clear()
                MODEL.__dict__.update(copy.deepcopy(model_before.__dict__))
                want = function(x)
                assert_same_state(after, MODEL, f"n={n}")
                model_before = copy.deepcopy(MODEL)
            else:
                want = function(x)
            np.testing.assert_allclose(got, want, rtol=1e-12)
    assert f.stats()["compiled_calls"] >= 1


def test_no_traced_value_is_left_in_an_object():
    cell = LSTMish()
    f = tj.jit(cell.step, cache="memory")
    for i in range(3):
        f(np.full(3, float(i)))
        assert type(cell.h) is np.ndarray and type(cell.c) is np.ndarray
