"""Adversarial tests of attribute writes on outside objects (tracer/attribute_writes.py),
in-place updates of outside arrays (argument_writes.OutsideArrayWrite) and split
multi-target assignments (tracer/unpacking.py), in the idioms of public "neural network
from scratch" code: layer classes keeping ``self.inputs``/``self.output``/``self.cache``,
optimizer objects holding ``self.m``/``self.v``/``self.t``, recurrent cells keeping
``self.h``.

Every test runs a jit object and an eager twin over several calls (traced, compiled,
other batch sizes) and compares the results and the whole state of the objects after
every call. A strict xfail is a bug: its reason says what is wrong.
"""


import numpy as np
from state_twins import difference, outcome, run_twins  # noqa: F401


def rows(n, seed=0, columns=3):
    return np.random.default_rng(seed).standard_normal((n, columns))


# --- what works: layer objects, optimizers, cells (regression guards) ------------------


class LayerDense:
    """A layer whose forward returns nothing and leaves ``self.output``."""

    def __init__(self, seed=0):
        self.weights = 0.1 * np.random.default_rng(seed).standard_normal((3, 4))
        self.biases = np.zeros((1, 4))

    def forward(self, inputs):
        self.inputs = inputs
        self.output = np.dot(inputs, self.weights) + self.biases

    def backward(self, dvalues):
        self.dweights = np.dot(self.inputs.T, dvalues)
        self.dbiases = np.sum(dvalues, axis=0, keepdims=True)
        self.dinputs = np.dot(dvalues, self.weights.T)


class ReLU:
    def forward(self, inputs):
        self.inputs = inputs
        self.output = np.maximum(0, inputs)

    def backward(self, dvalues):
        self.dinputs = dvalues.copy()
        self.dinputs[self.inputs <= 0] = 0


class Network:
    def __init__(self):
        self.dense, self.relu = LayerDense(0), ReLU()

    def train_step(self, X, y):
        self.dense.forward(X)
        self.relu.forward(self.dense.output)
        d = self.relu.output - y
        loss = np.mean(d ** 2)
        self.relu.backward(2 * d / max(d.size, 1))
        self.dense.backward(self.relu.dinputs)
        self.dense.weights -= 0.1 * self.dense.dweights
        self.dense.biases += -0.1 * self.dense.dbiases
        return loss


def test_layer_objects_keep_inputs_outputs_and_weights_over_batch_sizes():
    sizes = [4, 6, 4, 5, 1, 6]
    f = run_twins(Network, "train_step",
                  [(rows(n, i), rows(n, i + 9, 4)) for i, n in enumerate(sizes)])
    assert f.stats()["compiled_calls"] >= 2, f.stats()


def test_an_empty_batch_leaves_the_same_state():
    run_twins(Network, "train_step", [(rows(n, i), rows(n, i + 9, 4)) for i, n in
                                      enumerate([3, 0, 3, 0])])


class Adam:
    """``self.t += 1`` rebinding a number: runs eagerly, must stay right."""

    def __init__(self):
        self.m = self.v = None
        self.t = 0
        self.w = np.ones(3)

    def step(self, grads):
        if self.m is None:  # read before it is first written
            self.m, self.v = np.zeros_like(self.w), np.zeros_like(self.w)
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * grads
        self.v = 0.999 * self.v + 0.001 * grads ** 2
        m_hat, v_hat = self.m / (1 - 0.9 ** self.t), self.v / (1 - 0.999 ** self.t)
        self.w -= 0.01 * m_hat / (np.sqrt(v_hat) + 1e-8)
        return self.w.sum()


def test_an_adam_object_with_a_step_counter_runs_eagerly_and_right():
    run_twins(Adam, "step", [(np.full(3, 0.1 * i),) for i in range(4)])


class Raiser:
    def __init__(self):
        self.cache = "before"

    def forward(self, x):
        self.cache = x * 2
        if x.sum() > 2:  # after the write: eager leaves the new cache and raises
            raise ValueError("too big")
        return x


def test_an_exception_after_an_attribute_write_leaves_eagers_state():
    run_twins(Raiser, "forward", [(np.full(2, v),) for v in (0.5, 0.7, 3.0, 0.2, 3.0, 0.1)])


class Keeper:
    scale = 2.0  # a class attribute the instance shadows on its first call

    def __init__(self):
        self.W = np.eye(3)

    def forward(self, x):
        y = x @ self.W * self.scale
        self.first_column = x[:, 0]  # a view of the argument
        self.transposed = y.T
        self.nothing = None
        self.rows = x.shape[0]
        self.mask = y > 0
        self.scale = 3.0
        return y


def test_views_none_sizes_masks_and_a_shadowed_class_attribute():
    run_twins(Keeper, "forward", [(rows(n, n),) for n in (2, 4, 2, 3, 1)])


# --- bugs ---------------------------------------------------------------------------


class DictCache:
    def __init__(self):
        self.cache = {}

    def forward(self, x):
        self.cache["x"] = x  # numpy-ml style: what backward needs, in a dict attribute
        return x * 2


def test_an_item_write_into_a_dict_attribute():
    run_twins(DictCache, "forward", [(np.full(2, float(i)),) for i in range(3)])


class Momentum:
    def __init__(self):
        self.velocity = {}
        self.params = {"W": np.ones(2)}

    def step(self, grad):
        if "W" not in self.velocity:
            self.velocity["W"] = np.zeros(2)
        self.velocity["W"] = 0.9 * self.velocity["W"] - 0.1 * grad
        self.params["W"] += self.velocity["W"]
        return self.params["W"].sum()


def test_a_momentum_optimizer_with_a_velocity_dict():
    run_twins(Momentum, "step", [(np.ones(2),) for _ in range(3)])


class ListCache:
    def __init__(self):
        self.X = []

    def forward(self, x):
        self.X.append(x)  # numpy-ml layers keep every forward input in a list
        return x * 2


def test_an_append_to_a_list_attribute():
    run_twins(ListCache, "forward", [(np.full(2, float(i)),) for i in range(3)])


class BuiltinSetattr:
    def __init__(self):
        self.a = np.zeros(2)

    def forward(self, x):
        for name in ("a",):  # setattr by name, as layers restoring saved state do
            setattr(self, name, x * 2)
        return x


def test_the_setattr_builtin_on_self():
    run_twins(BuiltinSetattr, "forward", [(np.full(2, float(i)),) for i in range(3)])


class ObjectSetattr:
    def __init__(self):
        self.a = np.zeros(2)

    def forward(self, x):
        object.__setattr__(self, "a", x * 2)
        return x


def test_object_setattr_on_self():
    run_twins(ObjectSetattr, "forward", [(np.full(2, float(i)),) for i in range(3)])


class DunderDict:
    def __init__(self):
        self.a = np.zeros(2)

    def forward(self, x):
        self.__dict__["a"] = x * 2
        return x


def test_a_write_through_dunder_dict():
    run_twins(DunderDict, "forward", [(np.full(2, float(i)),) for i in range(3)])
