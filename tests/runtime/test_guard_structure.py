"""An entry guard reads the leaves of a call holding dicts, lists and tuples directly when
they are of exactly the traced types, keys and lengths (``guards._structure_reads``), and
flattens the call otherwise: whenever the direct reads are taken, ``pytree.flatten`` gives
the traced structure and the same leaves; calls of other structures (subclasses, other
keys, lengths or order) take the flattening branch, which decides as before."""

import collections

import numpy as np
import pytest

from tracejit.runtime import guards
from tracejit.tracer import pytree
from tracejit.tracer.generated_code import Source

Point = collections.namedtuple("Point", "x y")


class Config(dict):
    pass


a, b = np.zeros(2), np.ones(2)
TRACED = ((a, {"w": a, "cfg": {"lr": 1.0, "n": [a, b]}}, (b,)), {"mask": b})
CALLS = {
    "the same structure": ((b, {"w": a, "cfg": {"lr": 2.0, "n": [b, a]}}, (a,)), {"mask": a}),
    "keys in another order": ((a, {"cfg": {"lr": 1.0, "n": [a, b]}, "w": a}, (b,)),
                              {"mask": b}),
    "a dict subclass": ((a, Config(w=a, cfg={"lr": 1.0, "n": [a, b]}), (b,)), {"mask": b}),
    "a namedtuple for a tuple": ((a, {"w": a, "cfg": {"lr": 1.0, "n": [a, b]}}, Point(b, a)),
                                 {"mask": b}),
    "a tuple for a list": ((a, {"w": a, "cfg": {"lr": 1.0, "n": (a, b)}}, (b,)), {"mask": b}),
    "a longer list": ((a, {"w": a, "cfg": {"lr": 1.0, "n": [a, b, a]}}, (b,)), {"mask": b}),
    "a list where a leaf was": (([a], {"w": a, "cfg": {"lr": 1.0, "n": [a, b]}}, (b,)),
                                {"mask": b}),
    "another keyword": ((a, {"w": a, "cfg": {"lr": 1.0, "n": [a, b]}}, (b,)), {"mask2": b}),
    "no keyword": ((a, {"w": a, "cfg": {"lr": 1.0, "n": [a, b]}}, (b,)), {}),
}


def _reads(treedef):
    source = Source()
    conditions, texts = guards._structure_reads(treedef, source)
    source.add("def reads(args, kwargs):", depth=0)
    source.add(f"if {' and '.join(conditions)}:")
    source.add(f"    return ({', '.join(texts)},)")
    return source.define("reads", "structure reads")


@pytest.mark.parametrize("name", CALLS)
def test_direct_reads_only_where_flatten_gives_the_traced_structure(name):
    traced_leaves, treedef = pytree.flatten(TRACED)
    reads = _reads(treedef)
    assert all(x is y for x, y in zip(reads(*TRACED), traced_leaves, strict=True))
    leaves, tree = pytree.flatten(CALLS[name])
    read = reads(*CALLS[name])
    if read is None:
        assert name != "the same structure"
    elif name == "a list where a leaf was":
        assert type(read[0]) is list  # (read as a leaf: its array check refuses it)
    else:
        assert name in ("the same structure",), name
        assert tree == treedef and all(x is y for x, y in zip(read, leaves, strict=True))


def test_namedtuples_and_ordered_mappings_are_flattened():
    for structure in ((Point(a, b),), {}), ((collections.OrderedDict(x=a),), {}):
        assert guards._structure_reads(pytree.flatten(structure)[1], Source()) is None
