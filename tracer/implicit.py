"""Implicit inputs: arrays a function reads without taking them as arguments.

Arrays reached through globals, closures, default arguments and attributes (``self.w``,
``model.layers[0]``) must be read at every call, never frozen into the compiled code. Before
tracing, ``find_implicit_inputs`` walks what the function can reach - its globals and
closure cells, those of the Python functions it references, defaults, and a bounded depth
of attributes and containers - and returns ``{id(array): (path, array)}``. The tracer turns
the ones the function actually uses into graph inputs; the runtime re-reads them through
their ``Path`` at every call.

>>> import numpy as np
>>> W = np.ones(3)
>>> def f(x):
...     return x * W
>>> [str(path) for path, _ in find_implicit_inputs(f, ()).values()]
['global W']
"""

from __future__ import annotations

import functools
import keyword
import types
from dataclasses import dataclass

import numpy as np

from .locations import is_internal

_MAX_DEPTH = 3


def is_array(value):
    """An ndarray or an eager ``Tensor`` (priority 1): what can be an implicit input."""
    return isinstance(value, np.ndarray) or getattr(type(value), "__tracejit_priority__", 0) == 1


@dataclass(frozen=True)
class Path:
    """How to read an implicit input again: a root and steps (``attr``, ``item``).

    Roots: ``("global", globals_dict, name)``, ``("closure", cell, name)``,
    ``("default", function, index)``, ``("arg", leaf_index)``, ``("self", bound_self)``.
    """

    root: tuple
    steps: tuple = ()

    def resolve(self, argument_leaves=()):
        kind = self.root[0]
        if kind == "global":
            value = self.root[1][self.root[2]]
        elif kind == "closure":
            value = self.root[1].cell_contents
        elif kind == "default":
            value = self.root[1].__defaults__[self.root[2]]
        elif kind == "kwdefault":
            value = self.root[1].__kwdefaults__[self.root[2]]
        elif kind == "arg":
            value = argument_leaves[self.root[1]]
        else:  # "self"
            value = self.root[1]
        for step, key in self.steps:
            value = getattr(value, key) if step == "attr" else value[key]
        return value

    def expression(self, constant, leaves="leaves"):
        """Python text that reads what ``resolve`` reads, for generated entry guards (one
        attribute or item access per step, no loop); ``constant(value)`` names a value
        the text refers to, ``leaves`` names the argument leaves.

        >>> import types
        >>> names = {}
        >>> def constant(value):
        ...     names[f"K{len(names)}"] = value
        ...     return f"K{len(names) - 1}"
        >>> Path(("arg", 0), (("attr", "layers"), ("item", 1), ("attr", "W"))).expression(constant)
        'leaves[0].layers[K0].W'
        """
        kind = self.root[0]
        if kind == "arg" and type(self.root[1]) is int:
            text = f"{leaves}[{self.root[1]}]"
        elif kind == "global":
            text = f"{constant(self.root[1])}[{constant(self.root[2])}]"
        elif kind == "closure":
            text = f"{constant(self.root[1])}.cell_contents"
        elif kind == "self":
            text = constant(self.root[1])
        else:  # defaults: as resolve reads them
            text = f"{constant(Path(self.root))}.resolve({leaves})"
        return steps_expression(text, self.steps, constant)

    def attr(self, name):
        """The path of attribute ``name`` of the object here (``self.optimizer`` -> ``.lr``)."""
        return Path(self.root, self.steps + (("attr", name),))

    def __repr__(self):
        return f"Path({self})"

    @property
    def key(self):
        """What tells paths apart: the text, and for a ``self`` root the object's identity
        (``self.factor`` of two layers of one list are two settings)."""
        text = str(self)
        return f"{id(self.root[1])}:{text}" if self.root[0] == "self" else text

    def __str__(self):
        kind = self.root[0]
        head = {
            "global": lambda: f"global {self.root[2]}",
            "closure": lambda: f"closure {self.root[2]}",
            "default": lambda: f"default argument {self.root[2]}",
            "kwdefault": lambda: f"default argument {self.root[2]}",
            "arg": lambda: f"argument {self.root[1]}",
            "self": lambda: "self",
        }[kind]()
        for step, key in self.steps:
            head += f".{key}" if step == "attr" else f"[{key!r}]"
        return head


def steps_expression(text, steps, constant):
    """``text`` (an expression) followed by ``steps`` (``Path.steps``) as Python text."""
    for step, key in steps:
        if step == "attr" and isinstance(key, str) and key.isidentifier() and not (
                keyword.iskeyword(key)):
            text = f"{text}.{key}"  # an identifier: safe as text
        elif step == "attr":
            text = f"getattr({text}, {constant(key)})"
        else:
            text = f"{text}[{constant(key)}]"
    return text


def _scan(value, path, found, depth, seen, objects=None):
    if is_array(value):
        found.setdefault(id(value), (path, value))
        return
    if depth >= _MAX_DEPTH or id(value) in seen:
        return
    if isinstance(value, (str, bytes, int, float, bool, type(None), types.ModuleType, type)):
        return
    if isinstance(value, types.FunctionType):
        # a callback passed in or kept (train(..., callback=note)): what it reads from its
        # globals and cells is outside state as the function's own is (its appends to a
        # global dict's list are watched, not left holding traced values)
        seen.add(id(value))
        _scan_function(value, found, seen, set(), objects)
        return
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        seen.add(id(value))  # callback=logger.log: the object it writes, and its globals
        _scan(value.__self__, path.attr("__self__"), found, depth, seen, objects)
        _scan_function(value.__func__, found, seen, set(), objects)
        return
    if isinstance(value, (types.BuiltinFunctionType, types.MethodType)):
        return
    seen.add(id(value))
    if objects is not None and type(value) in (dict, list):  # a change to it is seen
        objects.setdefault(id(value), (path, value))
    if isinstance(value, functools.partial):  # partial(f, W=W): W is read at every call
        for index, item in enumerate(value.args[:64]):
            _scan(item, Path(path.root, path.steps + (("attr", "args"), ("item", index))),
                  found, depth + 1, seen)
        for key, item in list(value.keywords.items())[:64]:
            _scan(item, Path(path.root, path.steps + (("attr", "keywords"), ("item", key))),
                  found, depth + 1, seen)
        if isinstance(value.func, types.FunctionType):
            _scan_function(value.func, found, seen, set())
        elif hasattr(value.func, "__dict__"):  # partial(model, training=False): model.W
            _scan(value.func, path.attr("func"), found,
                  depth + 1, seen, objects)
            call = getattr(type(value.func), "__call__", None)  # noqa: B004 - the method
            if isinstance(call, types.FunctionType):
                _scan_function(call, found, seen, set(), objects)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value[:64]):
            _scan(item, Path(path.root, path.steps + (("item", index),)), found, depth + 1, seen,
                  objects)
    elif isinstance(value, dict):
        for key, item in list(value.items())[:64]:
            if isinstance(key, (str, int)) or type(key) is tuple and all(
                    isinstance(part, (str, int)) for part in key):
                _scan(item, Path(path.root, path.steps + (("item", key),)), found, depth + 1,
                      seen, objects)
    elif hasattr(value, "__dict__") and not isinstance(value, np.generic):
        if objects is not None:  # where an attribute write finds it again
            objects.setdefault(id(value), (path, value))
        for name, item in list(vars(value).items())[:64]:
            _scan(item, path.attr(name), found, depth + 1, seen,
                  objects)


def _names(code):
    """Global names a code object (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _scan_function(function, found, seen, visited, objects=None):
    code = function.__code__
    if code in visited or is_internal(code.co_filename):
        return
    visited.add(code)
    globals_ = function.__globals__
    for name in sorted(_names(code)):
        if name not in globals_:
            continue
        value = globals_[name]
        if isinstance(value, types.FunctionType):
            _scan_function(value, found, seen, visited, objects)
        else:
            _scan(value, Path(("global", globals_, name)), found, 0, seen, objects)
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (not assigned yet)
            continue
        if isinstance(value, types.FunctionType):
            _scan_function(value, found, seen, visited, objects)
        else:
            _scan(value, Path(("closure", cell, name)), found, 0, seen, objects)
    for index, value in enumerate(function.__defaults__ or ()):
        _scan(value, Path(("default", function, index)), found, 0, seen, objects)
    for name, value in (function.__kwdefaults__ or {}).items():
        _scan(value, Path(("kwdefault", function, name)), found, 0, seen, objects)


def find_implicit_inputs(fn, argument_leaves, objects=None):
    """``{id(array): (Path, array)}`` for arrays ``fn`` can read without arguments;
    ``objects``, a dict, receives ``{id(object): (Path, object)}`` for the objects passed
    on the way (where an attribute write finds its object again)."""
    found, seen, visited = {}, set(), set()
    target = fn
    if isinstance(fn, types.MethodType):
        _scan(fn.__self__, Path(("self", fn.__self__)), found, 0, seen, objects)
        target = fn.__func__
    elif not isinstance(fn, types.FunctionType):  # a partial, a layer object
        _scan(fn, Path(("self", fn)), found, 0, seen, objects)
        call = getattr(type(fn), "__call__", None)  # noqa: B004 - the method itself
        if isinstance(call, types.FunctionType):
            target = call
    for index, leaf in enumerate(argument_leaves):
        if not is_array(leaf):
            _scan(leaf, Path(("arg", index)), found, 1, seen, objects)
    if isinstance(target, types.FunctionType):
        _scan_function(target, found, seen, visited, objects)
    return found
