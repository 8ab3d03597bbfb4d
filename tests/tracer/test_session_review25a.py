"""Review of round 25a's landed commits: eager-vs-compiled checks at the edges of each
change."""
import numpy as np

import tracejit as tj


class Sigmoid:
    def __call__(self, z):
        return 1 / (1 + np.exp(-z))

    def gradient(self, z):
        s = self(z)
        return s * (1 - s)


class Leaky:
    def __init__(self, alpha):
        self.alpha = alpha

    def __call__(self, z):
        return np.where(z > 0, z, self.alpha * z)


class Dense:
    def __init__(self, seed, activation):
        self.W = np.random.default_rng(seed).standard_normal((4, 3))
        self.activation = activation

    def forward(self, x):
        return self.activation(x @ self.W)

    def backward(self, x, grad):
        return grad * self.activation.gradient(x @ self.W)

    def same_activation(self, x, other):
        return x * 2 if self.activation is other else x * 3


def test_layers_each_holding_their_own_activation_object_share_one_compile():
    # ML-From-Scratch's Dense: self.activation = Sigmoid() per layer. The object was
    # guarded by identity where read, so each layer compiled its own variant and the
    # calls past max_variants ran eagerly.
    forward = tj.jit(Dense.forward, cache="memory")
    backward = tj.jit(Dense.backward, cache="memory")
    rng = np.random.default_rng(1)
    for seed in range(10):
        layer, x = Dense(seed, Sigmoid()), rng.standard_normal((5, 4))
        np.testing.assert_allclose(forward(layer, x), Dense.forward(layer, x))
        np.testing.assert_allclose(backward(layer, x, x[:, :3]),
                                   Dense.backward(layer, x, x[:, :3]))
    assert forward.stats()["compiles"] == 1 and not forward.stats()["eager_calls"]
    assert backward.stats()["compiles"] == 1 and not backward.stats()["eager_calls"]


def test_activation_objects_settings_and_identity_are_still_guarded():
    forward = tj.jit(Dense.forward, cache="memory")
    x = np.arange(-6.0, 6.0).reshape(3, 4)
    for alpha in (0.1, 0.2, 0.1, 0.3):
        layer = Dense(0, Leaky(alpha))
        np.testing.assert_allclose(forward(layer, x), Dense.forward(layer, x))
    same = tj.jit(Dense.same_activation, cache="memory")
    first, second = Leaky(0.1), Leaky(0.1)
    for held, other in ((first, first), (first, second), (second, second), (second, first)):
        layer = Dense(0, held)
        np.testing.assert_array_equal(same(layer, x, other),
                                      Dense.same_activation(layer, x, other))


def test_a_patched_call_or_another_class_of_activation_is_a_new_trace():
    class Shift:
        def __call__(self, z):
            return z + 1

    class Scale:
        def __call__(self, z):
            return z * 5

    forward = tj.jit(Dense.forward, cache="memory")
    layer, x = Dense(0, Shift()), np.ones((2, 4))
    forward(layer, x)
    Shift.__call__ = lambda self, z: z - 1
    np.testing.assert_allclose(forward(layer, x), Dense.forward(layer, x))
    layer.activation = Scale()
    np.testing.assert_allclose(forward(layer, x), Dense.forward(layer, x))
