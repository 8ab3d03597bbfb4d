"""The generated result of a compiled call (runtime/result_source.py) rebuilds every kind
of result structure as ``pytree.unflatten`` does: tuples of one, namedtuples, lists, dicts
and the mappings that keep their class, empty containers, and structures nested deeper
than one expression may be (rebuilt by unflatten itself)."""

import collections

import numpy as np
import pytest

from tracejit.runtime.result_source import result_function
from tracejit.runtime.variants import OutputPlan
from tracejit.tracer import pytree

Pair = collections.namedtuple("Pair", "first second")


def _nested(depth):
    tree = 0
    for level in range(depth):
        tree = [tree] if level % 2 else (tree, 1)
    return tree


STRUCTURES = {
    "one array": 0,
    "tuple of one": (0,),
    "namedtuple": Pair(0, [1, {"k": 2}]),
    "dict keys in order": {"b": 0, 3: 1, ("t", 1): 2},
    "counter": collections.Counter(a=0, b=1),
    "ordered dict": collections.OrderedDict(z=0, a=(1, 2)),
    "empty containers": ((), [], {}, 0),
    "deeper than one expression": _nested(205),  # (the parser stops at 200)
}


@pytest.mark.parametrize("name", STRUCTURES)
def test_the_generated_result_rebuilds_what_unflatten_does(name):
    leaves, tree = pytree.flatten(STRUCTURES[name])
    outputs = [np.full(2, float(number)) for number in range(len(leaves))]
    plan = OutputPlan(tree, [("array", number) for number in range(len(leaves))], {})
    result = result_function(plan)(outputs, (), lambda value: value)
    expected = pytree.unflatten(tree, outputs)
    assert pytree.flatten(result)[1] == tree
    assert type(result) is type(expected)
    assert all(got is want for got, want in zip(pytree.flatten(result)[0], outputs))


class Layer:
    pass


def test_writes_read_the_argument_leaves_the_flattened_call_has():
    """Knowing the call's structure (``OutputPlan.argument_tree``), the result reads an
    argument that is a leaf directly instead of flattening the call: the writes land where
    ``store_function``'s (which flattens) do, for a keyword argument after a dict's leaf."""
    from tracejit.tracer.argument_writes import ArgumentWrite
    from tracejit.tracer.attribute_writes import AttributeWrite
    from tracejit.tracer.implicit import Path
    from tracejit.tracer.write_source import store_function

    def call():
        return (Layer(), {"t": 0}), {"extra": Layer()}

    writes = [AttributeWrite(Path(("arg", 0), ()), "h", pytree.LEAF, (("array", 0),)),
              ArgumentWrite(("args", 1), "t", "value", 1),
              AttributeWrite(Path(("arg", 2), ()), "h", pytree.LEAF, (("array", 0),))]
    outputs = [np.ones(2), np.array(5)]
    arguments, twin = call(), call()
    plan = OutputPlan(pytree.LEAF, [("array", 0)], {}, writes=writes,
                      argument_tree=pytree.flatten(arguments)[1])
    result = result_function(plan)
    assert "_argument_leaves(" not in result.source
    assert result(outputs, arguments[0], lambda value: value, arguments) is outputs[0]
    store_function(writes)(twin, outputs)
    for (args, kwargs) in (arguments, twin):
        assert args[0].h is outputs[0] and kwargs["extra"].h is outputs[0]
        assert args[1] == {"t": 5} and type(args[1]["t"]) is int
