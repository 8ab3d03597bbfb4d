"""A nested object (reached through an attribute) whose class defines special methods
Python calls where no hook sees them is guarded by identity, not only by class: another
object of the class may answer ``if self.gate:`` or ``a < b`` otherwise."""

import numpy as np

import tracejit as tj


class Gate:
    def __init__(self, on):
        self.on = on

    def __bool__(self):
        return self.on


class Level:
    def __init__(self, value):
        self.value = value

    def __lt__(self, other):
        return self.value < other.value


class Scale:  # only __init__: guarded by class
    def __init__(self, factor):
        self.factor = np.full(3, factor)

    def apply(self, x):
        return x * self.factor


class Model:
    def __init__(self, gate, low, high, scale):
        self.gate, self.low, self.high, self.scale = gate, low, high, scale


GLOBAL = Model(Gate(True), Level(1), Level(2), Scale(2.0))


def gated(x):
    return x * 2.0 if GLOBAL.gate else x * 3.0


def ordered(model, x):
    return x + 1.0 if model.low < model.high else x - 1.0


def scaled(model, x):
    return model.scale.apply(x) + 1.0


def test_a_global_objects_bool_is_read_at_every_call():
    f = tj.jit(gated, cache="memory")
    x = np.arange(3.0)
    for on in (True, False, True, False):
        GLOBAL.gate = Gate(on)
        np.testing.assert_array_equal(f(x), gated(x))
    GLOBAL.gate = Gate(True)


def test_an_arguments_nested_comparison_is_read_at_every_call():
    f = tj.jit(ordered, cache="memory")
    x = np.arange(3.0)
    for low, high in ((1, 2), (3, 2), (1, 2), (5, 0)):
        model = Model(Gate(True), Level(low), Level(high), Scale(1.0))
        np.testing.assert_array_equal(f(model, x), ordered(model, x))


def test_a_class_without_unseen_methods_shares_one_variant():
    f = tj.jit(scaled, cache="memory")
    x = np.arange(3.0)
    for factor in (2.0, 3.0, -1.0, 0.5):
        model = Model(Gate(True), Level(0), Level(1), Scale(factor))
        np.testing.assert_array_equal(f(model, x), scaled(model, x))
    stats = f.stats()
    assert stats["compiles"] == 1 and not stats["eager_calls"], f.explain()
