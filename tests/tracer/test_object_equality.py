"""``==`` and ``in`` on objects reached through attributes and globals: an object's default
equality is its identity, so the trace's answer holds only for that object (Hooks.compared
pins it, as ``is`` does). Before, the object's class guard alone let another object of the
class take the traced answer: compiled calls scaled by the wrong factor."""

import numpy as np
import pytest

import tracejit as tj


class Layer:
    def __init__(self, scale=1.0):
        self.w = np.eye(3) * scale


class Model:
    def __init__(self):
        self.a = Layer()


SHARED = Layer(2.0)
PICKED = [SHARED]


class Tagged:
    """Equal by value: objects with the same tag answer alike."""

    def __init__(self, tag):
        self.tag = tag

    def __eq__(self, other):
        return isinstance(other, Tagged) and self.tag == other.tag

    __hash__ = None


RELU = Tagged("relu")


def scaled_if_equal(m, x):
    return x @ m.a.w * (2.0 if m.a == SHARED else 1.0)


def scaled_unless_equal(m, x):
    return x @ m.a.w * (1.0 if m.a != SHARED else 2.0)


def scaled_if_in(m, x):
    return x @ m.a.w * (3.0 if m.a in PICKED else 1.0)


def scaled_unless_in(m, x):
    return x @ m.a.w * (1.0 if m.a not in PICKED else 3.0)


def last_layer_skips_the_activation(m, x):
    for layer in m.layers:
        x = x @ layer.w
        if not layer == m.layers[-1]:
            x = np.tanh(x)
    return x


def activation_by_value(m, x):
    return np.maximum(x, 0) if m.act == RELU else np.tanh(x)


@pytest.mark.parametrize("function", [scaled_if_equal, scaled_unless_equal, scaled_if_in,
                                      scaled_unless_in, last_layer_skips_the_activation])
def test_equality_of_an_object_from_an_attribute_is_its_identity(function):
    compiled = tj.jit(function, cache="memory")
    m, x = Model(), np.arange(6.0).reshape(2, 3) / 10
    m.layers = [Layer(1.0), Layer(0.5), Layer(2.0)]
    for call in range(5):
        if call == 2:  # the attribute now holds the shared object; the last layer is first
            m.a, m.layers = SHARED, [m.layers[0], m.layers[1], m.layers[0]]
        if call == 4:
            m.a, m.layers = Layer(), [m.layers[2], m.layers[1], m.layers[2]]
        # (tanh: our own math, within float64's tolerance of NumPy's)
        np.testing.assert_allclose(compiled(m, x), function(m, x), rtol=1e-12, atol=0)
    assert compiled.stats()["compiled_calls"] >= 2


def test_objects_equal_by_value_answer_as_eager():
    compiled = tj.jit(activation_by_value, cache="memory")
    m, x = Model(), np.linspace(-1, 1, 6)
    for act in (Tagged("relu"), Tagged("tanh"), Tagged("relu"), RELU, Tagged("tanh")):
        m.act = act
        np.testing.assert_allclose(compiled(m, x), activation_by_value(m, x), rtol=1e-12,
                                   atol=0)
