"""The generated function that stores a compiled call's writes (tracer/write_source.py)
does what each write's own ``store`` does, in order, for every kind of write and name:
run both on twin states and compare."""

import copy

import numpy as np

from tracejit.tracer import pytree
from tracejit.tracer.argument_writes import ArgumentWrite, CallArguments, OutsideArrayWrite
from tracejit.tracer.attribute_writes import AttributeWrite, Item
from tracejit.tracer.implicit import Path
from tracejit.tracer.write_source import store_function


class Layer:
    def __init__(self):
        self.cache = {}
        self.W = np.zeros(3)


class Model:
    def __init__(self):
        self.layers = [Layer(), Layer()]


def _state():
    model = Model()
    config = {"opt": {"t": 0}, "seq": [0, 1]}
    return model, config, {"lr": {"v": 0.0}}


def _writes():
    layer = (("attr", "layers"), ("item", 1))
    return [
        AttributeWrite(Path(("arg", 0), layer), "h", pytree.LEAF, (("array", 0),)),
        AttributeWrite(Path(("arg", 0), layer + (("attr", "cache"),)), Item(("x", 2)),
                       pytree.LEAF, (("scalar", 1),)),
        AttributeWrite(Path(("arg", 0), layer), "class", pytree.LEAF, (("value", 2),)),
        AttributeWrite(Path(("arg", 0), layer), "not-a-name", pytree.LEAF, (("static", "s"),)),
        AttributeWrite(Path(("arg", 0), ()), "pair", pytree.flatten((1, 2))[1],
                       (("array", 0), ("value", 2))),
        AttributeWrite(Path(("arg", 0), layer), "h", pytree.LEAF, (("array", 3),)),  # again
        ArgumentWrite(("args", 1, "opt"), "t", "value", 2),
        ArgumentWrite(("args", 1, "seq"), 1, "scalar", 1),
        ArgumentWrite(("kwargs", "extra", "lr"), "v", "static", 0.5),
        OutsideArrayWrite(Path(("arg", 0), (("attr", "layers"), ("item", 0), ("attr", "W"))), 0),
    ]


def test_the_generated_store_does_what_each_write_does():
    outputs = [np.arange(3.0), np.float32(2.5), np.array(7), np.ones(3)]
    model, config, extra = _state()
    twin = copy.deepcopy((model, config, extra))
    writes = _writes()
    store_function(writes)(CallArguments(((model, config), {"extra": extra})), outputs)
    for write in writes:
        write.store(CallArguments(((twin[0], twin[1]), {"extra": twin[2]})), outputs)
    first, second = model.layers[1], twin[0].layers[1]
    assert first.h is outputs[3] and second.h is outputs[3]
    assert first.cache == second.cache and type(first.cache[("x", 2)]) is np.float32
    assert getattr(first, "class") == getattr(second, "class") == 7
    assert type(getattr(first, "class")) is int
    assert getattr(first, "not-a-name") == "s"
    assert model.pair[0] is outputs[0] and model.pair[1] == 7
    assert config == {"opt": {"t": 7}, "seq": [0, np.float32(2.5)]} == twin[1]
    assert extra == {"lr": {"v": 0.5}} == twin[2]
    assert model.layers[0].W is not outputs[0]  # copied into, the same array
    np.testing.assert_array_equal(model.layers[0].W, outputs[0])
