"""Nested tuples, lists and dicts of leaves ("pytrees"): flatten to a list, rebuild.

Dicts keep their insertion order (eager code sees it: ``list(d)``, ``d.values()``), and a
``Counter`` or ``OrderedDict`` its class.

>>> leaves, tree = flatten({"w": 1, "b": (2, [3])})
>>> leaves, unflatten(tree, [10, 20, 30])
([1, 2, 3], {'w': 10, 'b': (20, [30])})
"""

from __future__ import annotations

import collections


class TreeDef:
    """The structure of a pytree without its leaves; hashable and comparable."""

    __slots__ = ("kind", "keys", "children", "mapping")

    def __init__(self, kind, keys, children, mapping=None):
        self.kind, self.keys, self.children = kind, keys, children
        self.mapping = mapping  # a dict's class other than dict (Counter, OrderedDict)

    def _key(self):
        return (self.kind, self.keys, self.children, self.mapping)

    def __eq__(self, other):
        return isinstance(other, TreeDef) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        inner = ", ".join(
            f"{key!r}: {child!r}" if self.kind == "dict" else repr(child)
            for key, child in zip(
                self.keys if self.kind == "dict" else (None,) * len(self.children),
                self.children,
            )
        )
        if self.kind == "object":  # keys: (class, attribute names)
            return f"{self.keys[0].__name__}({', '.join(self.keys[1])}: {inner})"
        return {"tuple": f"({inner})", "list": f"[{inner}]", "dict": f"{{{inner}}}",
                "rows": f"rows({inner})"}[self.kind]


LEAF = TreeDef("leaf", None, ())


def flatten(tree, expand=None):
    """Leaves in order (dicts in insertion order) and the structure to rebuild them.
    ``expand(leaf)``, when given, may answer an object's ``(class, names, values)``: the
    object is a node that ``unflatten`` makes anew (``object.__new__`` and its attributes,
    as ``tracer.attribute_writes`` rebuilds a Tensor the call made)."""
    leaves = []
    return leaves, _flatten_into(tree, leaves, expand)


def _flatten_into(tree, leaves, expand=None):
    if isinstance(tree, (tuple, list)):
        kind = "list" if isinstance(tree, list) else "tuple"
        named = type(tree) if hasattr(tree, "_fields") else None  # a namedtuple keeps its class
        return TreeDef(kind, named, tuple(_flatten_into(item, leaves, expand)
                                          for item in tree))
    if isinstance(tree, dict):
        items = [(_static_key(key), value) for key, value in tree.items()]
        mapping = type(tree) if type(tree) in REBUILT_MAPPINGS else None
        return TreeDef("dict", tuple(key for key, _ in items),
                       tuple(_flatten_into(value, leaves, expand) for _, value in items),
                       mapping)
    # (after the containers: argument trees flattened at every call never hold one)
    if getattr(type(tree), "__tracejit_rows__", False):  # a loop's list (tracer.loop_rows)
        return TreeDef("rows", tree.layout, tuple(_flatten_into(part, leaves, expand)
                                                  for part in tree.parts))
    if expand is not None and (parts := expand(tree)) is not None:
        cls, names, values = parts
        return TreeDef("object", (cls, tuple(names)), tuple(
            _flatten_into(value, leaves, expand) for value in values))
    leaves.append(tree)
    return LEAF


REBUILT_MAPPINGS = (collections.Counter, collections.OrderedDict)  # cls(a dict) rebuilds


def _static_key(key):
    """A dict key as the structure keeps it: a symbolic dim (``{x.shape[0]: ...}``, already
    specialized by its hash) becomes the int eager has."""
    return int(key) if getattr(type(key), "__tracejit_dim__", False) else key


def unflatten(treedef, leaves):
    return _build(treedef, iter(leaves))


def _build(treedef, leaves):
    if treedef.kind == "leaf":
        return next(leaves)
    children = [_build(child, leaves) for child in treedef.children]
    if treedef.kind == "rows":  # keys: a loop_rows.RowsLayout, which makes the list
        return treedef.keys.build(children)
    if treedef.kind == "object":  # keys: (class, attribute names)
        cls, names = treedef.keys
        made = object.__new__(cls)
        vars(made).update(zip(names, children))
        return made
    if treedef.kind == "dict":
        built = dict(zip(treedef.keys, children))
        return built if treedef.mapping is None else treedef.mapping(built)
    if treedef.kind == "list":
        return children
    return treedef.keys(*children) if treedef.keys is not None else tuple(children)


def leaf_paths(treedef):
    """For each leaf, how to reach it from the root: one accessor per level, as Python text
    (``[0]`` for a position, ``['w']`` for a dict key, ``.field`` for a namedtuple field).

    >>> leaf_paths(flatten(({"w": 1, "b": (2, [3])}, 4))[1])
    [('[0]', "['w']"), ('[0]', "['b']", '[0]'), ('[0]', "['b']", '[1]', '[0]'), ('[1]',)]
    """
    paths, stack = [], [(treedef, ())]
    while stack:
        node, prefix = stack.pop()
        if node.kind == "leaf":
            paths.append(prefix)
            continue
        if node.kind == "dict":
            accessors = [f"[{key!r}]" for key in node.keys]
        elif node.kind == "rows":  # a loop's list: its parts (tracer.loop_rows)
            accessors = [f"<part {position}>" for position in range(len(node.children))]
        elif node.kind == "object":  # an object rebuilt: its attributes
            accessors = [f".{name}" for name in node.keys[1]]
        elif node.keys is not None:  # a namedtuple
            accessors = [f".{field}" for field in node.keys._fields]
        else:
            accessors = [f"[{position}]" for position in range(len(node.children))]
        stack.extend(reversed([(child, prefix + (accessor,))
                               for accessor, child in zip(accessors, node.children)]))
    return paths


def argument_positions(args, kwargs):
    """For each leaf of ``flatten((args, kwargs))``, the position or keyword of the
    argument it belongs to (keywords in the order they were passed, as ``flatten`` keeps
    them).

    >>> argument_positions((1, (2, 3)), {"lr": 0.1})
    [0, 1, 1, 'lr']
    """
    positions = []
    for position, arg in enumerate(args):
        positions += [position] * len(flatten(arg)[0])
    for key in kwargs:
        positions += [key] * len(flatten(kwargs[key])[0])
    return positions
