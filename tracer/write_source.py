"""One generated function that stores all of a compiled call's writes back.

A layer that caches its input (``self.cache["x"] = x``), an optimizer that keeps its
state in a config dict (``config["velocity"] = v``) and an update in place of an outside
array (``self.W -= lr * dW``) each leave a write that the runtime stores after every
compiled call. Stored one by one, each write resolves its path step by step and converts
its value through a small interpreter (``attribute_writes.stored_values``): on a small
model that is most of a call's time. ``add_statements`` writes them as straight-line
Python instead (into a call's result function: ``runtime/result_source.py``), and
``store_function`` as a function of their own, one statement per write,
in the writes' order and each resolving its own path from the root as ``store`` does (a
write may rebind an object a later write goes through), so it does what the writes'
``store`` methods do, in fewer steps:

    >>> from tracejit.tracer.argument_writes import ArgumentWrite
    >>> store = store_function([ArgumentWrite(("args", 1), "t", "value", 0)])
    >>> config = {"t": 0}
    >>> store(((None, config), {}), [np.array(3)])
    >>> config
    {'t': 3}

A write of another kind (a deleted attribute, a tuple value, a list append) is called as
its own ``store`` from the generated text.
"""

from __future__ import annotations

import keyword
import re

import numpy as np

from . import pytree
from .argument_writes import ArgumentWrite, OutsideArrayWrite, argument_leaves
from .attribute_writes import AttributeWrite, Item
from .generated_code import Source


def _python_number(item):
    return item.item() if isinstance(item, (np.ndarray, np.generic)) else item


def _numpy_scalar(item):
    # (a Tensor eagerly stays one: the result function made it: runtime.result_source)
    return item if hasattr(item, "requires_grad") else np.asarray(item)[()]


def _value_text(kind, value, constant):
    """The text of a stored leaf, as ``attribute_writes.stored_values`` converts it."""
    if kind == "static":
        return constant(value)
    if kind == "scalar":
        return f"_numpy_scalar(outputs[{value}])"
    if kind == "value":
        return f"_python_number(outputs[{value}])"
    return f"outputs[{value}]"


def _attribute_statement(write, constant):
    """``owner.name = value`` (or ``owner[key] = value``) for a one-leaf attribute write,
    else None (the write stores itself)."""
    if (write.deleted or write.tree != pytree.LEAF or len(write.leaves) != 1
            or write.leaves[0][0] == "argument"):
        return None
    owner = write.path.expression(constant)
    value = _value_text(*write.leaves[0], constant)
    name = write.name
    if type(name) is Item:
        return f"{owner}[{constant(name.key)}] = {value}"
    if name.isidentifier() and not keyword.iskeyword(name):
        return f"{owner}.{name} = {value}"
    return f"setattr({owner}, {constant(name)}, {value})"


def _argument_statement(write, constant):
    """``args[i][k1]...[key] = value`` for an item write into an argument's dict or list."""
    side, *keys = write.where
    container = "arguments[0]" if side == "args" else "arguments[1]"
    for key in keys:
        container += f"[{constant(key)}]"
    return f"{container}[{constant(write.key)}] = {_value_text(write.kind, write.value, constant)}"


def _statement(write, constant):
    if type(write) is AttributeWrite:
        text = _attribute_statement(write, constant)
    elif type(write) is ArgumentWrite:
        text = _argument_statement(write, constant)
    elif type(write) is OutsideArrayWrite:
        text = f"_copyto({write.path.expression(constant)}, outputs[{write.value}])"
    else:
        text = None
    return text or f"{constant(write)}.store(arguments, outputs)"


def store_function(writes):
    """A function ``store(arguments, outputs)`` doing ``write.store(arguments, outputs)``
    for each of ``writes`` in order; ``arguments`` is ``(args, kwargs)`` or a
    ``argument_writes.CallArguments`` (whose ``leaves`` paths from an argument read)."""
    source = Source()
    source.add("def store(arguments, outputs):", depth=0)
    add_statements(source, writes)
    return source.define("store", "stored writes")


def add_statements(source, writes, leaf_text=None):
    """Add the statements of ``writes`` to ``source`` (a ``generated_code.Source``), for a
    function whose locals ``arguments`` and ``outputs`` are ``store``'s; they may bind
    ``leaves``. ``leaf_text(k)``: the text reading argument leaf ``k`` from ``arguments``
    where it is known (``argument_leaf_text``), else None; when every leaf the writes read
    is known, each is read once, before the first write (as the flattened leaves would
    be), instead of flattening the arguments."""
    source.bind(_NAMES)
    statements = [_statement(write, source.constant) for write in writes]
    if any(_LEAVES.search(statement) for statement in statements):
        read = sorted({int(number) for statement in statements
                       for number in _LEAF.findall(statement)})
        texts = [leaf_text(number) for number in read] if leaf_text is not None else [None]
        if None in texts or any(_LEAVES.search(_LEAF.sub("", statement))
                                for statement in statements):
            source.add("leaves = _argument_leaves(arguments)")
        else:
            for number, text in zip(read, texts):
                source.add(f"argument_leaf{number} = {text}")
            statements = [_LEAF.sub(r"argument_leaf\1", statement) for statement in statements]
    for statement in statements or ["pass"]:
        source.add(statement)


_LEAVES = re.compile(r"\bleaves\b")
_LEAF = re.compile(r"\bleaves\[([0-9]+)\]")


def argument_leaf_text(tree, constant):
    """``leaf_text`` for ``add_statements``, from ``tree``, the call's ``(args, kwargs)``
    structure as ``pytree.flatten`` made it (the entry guard checked it): an argument or
    keyword argument that is a leaf is read as ``arguments[0][i]`` or
    ``arguments[1][constant(name)]``. A leaf inside a container the caller made is not
    known (a dict subclass may read otherwise than it flattens): None.

    >>> tree = pytree.flatten(((1, {"w": 2}), {"scale": 3}))[1]
    >>> [argument_leaf_text(tree, repr)(k) for k in range(3)]
    ['arguments[0][0]', None, "arguments[1]['scale']"]
    """
    texts = []
    args, kwargs = tree.children
    for index, child in enumerate(args.children):
        texts += [f"arguments[0][{index}]"] if child.kind == "leaf" else [None] * _count(child)
    for name, child in zip(kwargs.keys, kwargs.children):
        texts += ([f"arguments[1][{constant(name)}]"] if child.kind == "leaf"
                  else [None] * _count(child))
    return lambda number: texts[number] if 0 <= number < len(texts) else None


def _count(tree):
    return 1 if tree.kind == "leaf" else sum(map(_count, tree.children))


_NAMES = {"_asarray": np.asarray, "_copyto": np.copyto, "_python_number": _python_number,
          "_numpy_scalar": _numpy_scalar,
          "_argument_leaves": argument_leaves}
