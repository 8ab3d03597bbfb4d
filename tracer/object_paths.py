"""Where the objects a trace reads from outside are found again at every call.

A compiled call must see what the function would read now. A setting (``block.attn.training``),
a weight (``block.attn.W``) or a learning rate (``state["optimizer"].lr``) is read through
the *path* it was found at: the entry guard compares the setting there, and the weight is
an input read from there. ``ObjectPaths`` remembers, per object, the path it was reached
by, so the attributes of an object held in a local variable keep one:

    for block in self.blocks:          # self.blocks[0], self.blocks[1]
        x = np.tanh(x @ block.attn.W)  # self.blocks[0].attn.W: an input
        if block.attn.training:        # self.blocks[0].attn.training: guarded
            x = x * 0.5

Objects come in through a list or dict read from outside (``remember_container``), the
leaves of container arguments (``Path(("arg", position))``), the arguments a
``functools.partial`` binds (``partial_roots``), and any attribute loaded through a path.
An object found so is entry-guarded by its class (``guard_class``: ``isinstance`` and the
methods the trace inlined answer for it), and a method the trace entered by the function
its class holds (``guard_method``, ``ObjectPaths.method_read``).

>>> import functools
>>> def step(optimizers, w): ...
>>> sorted(partial_roots(functools.partial(step, [])))
['optimizers']
"""

from __future__ import annotations

import enum
import functools
import types

import numpy as np

from .errors import TraceError
from .implicit import Path
from .locations import line_prefix, user_location
from .outside_inputs import container_subclass, is_setting
from .rewritten_code import callable_object, is_user_function
from .stacked_containers import StackedList


def is_plain_object(value):
    """A Python object whose attributes a trace may read (not an array, a traced value or
    a scalar, which are inputs or guarded already)."""
    return value is not None and not isinstance(
        value, (np.ndarray, np.generic, int, float, complex, str, bytes, tuple, list, dict,
                StackedList, types.ModuleType, type)) and getattr(  # (a list of the trace)
        type(value), "__tracejit_priority__", 0) == 0


def is_settings_record(value):
    """A namedtuple of settings (``Config(scale=2.0, use_bias=True)``): compared whole, by
    type and value, where it is read from outside."""
    return isinstance(value, tuple) and hasattr(type(value), "_fields") and all(
        is_setting(item) for item in value)


def holds_attributes(value):
    """An object whose attributes (weights, settings) a trace reads: a layer, a config;
    not a function, a ufunc or a method."""
    return is_plain_object(value) and not isinstance(value, (
        types.FunctionType, types.BuiltinFunctionType, types.MethodType, np.ufunc,
        functools.partial))


# Py_TPFLAGS_HEAPTYPE: a class made by a class statement (not a builtin or C type, whose
# objects may keep state no attribute path reaches: a Generator, a file, a lock)
_HEAP_TYPE = 1 << 9


# The methods a class may define and still be guarded by class: the ones the trace runs
# rewritten (``__call__``, operators: ``operator_calls``), or that run at the entry guard's
# own reads (``__getattr__``) or at no read at all (``__init__``, pickling, copying, whose
# callers are calls the trace pins objects at). Any other (``__bool__``, ``__lt__``,
# ``__str__`` under an f-string, ``__iter__`` under unpacking, ``__enter__``) Python calls
# where no hook sees it, reading attributes no guard follows: such objects keep their
# identity guard.
_ROUTED_METHODS = frozenset((
    "__init__", "__new__", "__call__", "__getattr__", "__setattr__", "__delattr__",
    "__post_init__", "__init_subclass__", "__class_getitem__", "__subclasshook__",
    "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__", "__copy__",
    "__deepcopy__", "__del__", "__neg__", "__pos__", "__invert__",
    *(f"__{prefix}{name}__" for prefix in ("", "r") for name in (
        "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
        "xor", "lshift", "rshift"))))


def _methods_routed(kind):
    """Whether every special method ``kind``'s classes define (below ``object``) is one
    of ``_ROUTED_METHODS``; a special name holding no callable (``__slots__``, ``__hash__
    = None``) is no method."""
    for base in kind.__mro__[:-1]:
        for name, member in vars(base).items():
            if name.startswith("__") and name.endswith("__") and (
                    name not in _ROUTED_METHODS) and (callable(member) or isinstance(
                        member, (staticmethod, classmethod, property))):
                return False
    return True


def guarded_by_class(value):
    """Whether an object the trace reads through a path (an argument, an item of a list
    from outside) is entry-guarded by its class, not its identity: an object of a class
    statement, whose attributes the trace reads through that path (arrays as inputs,
    settings by value, nested objects by class), so any object of the class with the same
    structure takes the variant. Not a class or an enum member (compared by identity),
    nor an object whose class defines special methods Python calls unseen
    (``_ROUTED_METHODS``).

    >>> class Dense:
    ...     pass
    >>> guarded_by_class(Dense()), guarded_by_class(len), guarded_by_class(Dense)
    (True, False, False)
    """
    kind = type(value)
    return holds_attributes(value) and not isinstance(value, (type, enum.Enum)) and bool(
        kind.__flags__ & _HEAP_TYPE) and not getattr(kind, "__tracejit_priority__", 0) and (
        _methods_routed(kind))


def called_by_class(value):
    """A callable object of a class statement whose ``__call__`` the trace enters (an
    activation object, ``self.activation = Sigmoid()``): read through its path and guarded
    by its class and that ``__call__`` as other nested objects are, so ten layers each
    holding its own ``Sigmoid()`` share one variant. A plain function stays guarded by
    identity where it is read.

    >>> class Sigmoid:
    ...     def __call__(self, z):
    ...         return z
    >>> called_by_class(Sigmoid()), called_by_class(len), called_by_class(lambda z: z)
    (True, False, False)
    """
    return callable_object(value) and guarded_by_class(value)


def partial_roots(fn):
    """``{parameter name: Path}`` of the arguments a ``functools.partial`` of a Python
    function binds: read from the partial object at every call, like defaults."""
    if not isinstance(fn, functools.partial):
        return {}
    function = fn.func.__func__ if isinstance(fn.func, types.MethodType) else fn.func
    if callable_object(fn.func):  # partial(model, training=False): model.__call__
        function = type(fn.func).__call__  # noqa: B004 - the method, to inspect
    if not isinstance(function, types.FunctionType):
        return {}
    names = function.__code__.co_varnames[:function.__code__.co_argcount]
    names = names[1:] if function is not fn.func else names  # (self)
    if len(fn.args) > len(names):
        return {}  # bound into *args: no name to read them by
    roots = {name: Path(("self", fn), (("attr", "args"), ("item", index)))
             for index, name in enumerate(names[:len(fn.args)])}
    roots.update((name, Path(("self", fn), (("attr", "keywords"), ("item", name))))
                 for name in fn.keywords)
    return roots


class ObjectPaths:
    """``id(object) -> (Path, object)`` for the objects of one trace read from outside;
    ``context.outside_objects`` (the up-front scan's lists and dicts) is consulted too."""

    def __init__(self, context):
        self.context = context
        self.known = {}
        self.paths = {}  # id(object) -> {path key: Path}: every path it was found at

    def note(self, path, value):
        known = self.known.get(id(value))
        if known is not None and known[1] is value:  # (one object, two paths: the same)
            _same(self.context, known[0], path)
        self.known[id(value)] = (path, value)
        self.paths.setdefault(id(value), {})[path.key] = path  # (one object, many names)

    def at(self, path):
        """The object known by ``path`` (an argument's object, ``Path(("arg", 1))``), or
        None."""
        key = path.key
        for known, value in self.known.values():
            if known.key == key:
                return value
        return None

    def path_of(self, owner):
        """Where an object from outside is found again, or None."""
        # (class Config(dict) read from outside is a container the trace may have copied
        # with its arrays as inputs, outside_inputs.with_inputs: its attributes are read
        # through where the original was found)
        owner = self.context.outside_copies.get(id(owner), owner)
        known = self.known.get(id(owner)) or self.context.outside_objects.get(id(owner))
        if known is None or known[1] is not owner or not (
                is_plain_object(owner) or container_subclass(owner) is not None):
            return None
        return known[0]

    def remember_container(self, path, value, depth=3):
        """A list, tuple or dict read from outside at ``path``: writes into it are outside
        state, and the objects in it (and in the containers in it) are found again
        through it."""
        if type(value) is not tuple:
            self.context.outside_objects.setdefault(id(value), (path, value))
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            where = Path(path.root, path.steps + (("item", key),))
            if holds_attributes(item):
                known = self.known.setdefault(id(item), (where, item))
                if known[0] is not where:  # [layer, layer]: read through the first
                    _same(self.context, known[0], where)
            elif type(item) in (list, tuple, dict) and depth > 1:
                self.remember_container(where, item, depth - 1)

    def method_read(self, path, method):
        """``self.optimizer.update`` read through ``path``: the trace inlines that function
        and reads the receiver's settings, so later calls must find the same function and
        a receiver of the same class there, read again through ``self.optimizer``."""
        receiver = method.__self__
        if not holds_attributes(receiver):
            return
        context = self.context
        context.note_outside_value(path.attr("__func__"),
                                   method.__func__, identity=True)
        if not path.steps or path.steps[-1][0] != "attr":  # STEP = opt.update: that object
            context.note_outside_value(path.attr("__self__"),
                                       receiver, identity=True)
            return
        owner = Path(path.root, path.steps[:-1])
        guard_class(context, owner, receiver)
        self.note(owner, receiver)

    def pin_identity(self, *values, equality=False, callables=False):
        """The objects among ``values`` found through a path, whose identity the trace
        observed (``layer is self.head``, ``SCALE[self.act]``, ``SCALE.get(self.act)``,
        ``repr(self.act)``), must be those very objects at later calls: their class guard
        alone let another object of the class take the answer the trace took for this one
        (a wrong result). Callables are guarded by identity where they are read already,
        unless ``callables`` (an argument's layer handed to code the trace does not see).
        With ``equality`` (``==``, ``in``, a dict's lookup), an object whose class defines
        its own ``__eq__`` or ``__hash__`` refuses the trace: the answer reads the object's
        state in code the trace does not see (``self.mode == self.ref`` comparing their
        ``.v``), so the same object with another state would take the traced answer."""
        for value in values:
            if not holds_attributes(value) or callable(value) and not callables and not (
                    guarded_by_class(value)):  # (a function: pinned where it was read)
                continue
            path = self.path_of(value)
            paths = [*self.paths.get(id(value), {}).values(), *([path] if path else [])]
            if equality and paths and own_equality(value):
                raise TraceError(f"{line_prefix(user_location())}a {type(value).__name__} "
                                 "compared or hashed with its class's own __eq__/__hash__, "
                                 "which reads state the trace cannot guard; the call runs "
                                 "eagerly")
            for found in paths:  # (self.a is GLOBAL_A when they are one object: both)
                self.context.note_outside_value(found, value, identity=True)

    def through(self, value, steps):
        """The path of ``value`` followed by ``steps`` (``state["optimizer"].lr``) through
        the deepest object on the way whose path is known, or None."""
        found = None
        for count, (step, key) in enumerate(steps):
            known = self.path_of(value)
            if known is not None:
                found = (known, count)
            try:
                value = getattr(value, key) if step == "attr" else value[key]
            except Exception:  # noqa: BLE001 - the load itself raised before: no path
                return None
        if found is None:
            return None
        known, count = found
        return Path(known.root, known.steps + tuple(steps[count:]))


def own_equality(value):
    """Whether ``value``'s class defines ``__eq__`` or ``__hash__`` in the user's code
    (a dataclass's generated ``__eq__`` too), not ``object``'s identity."""
    kind = type(value)
    return is_user_function(getattr(kind, "__eq__", None)) or is_user_function(
        getattr(kind, "__hash__", None))


def _same(context, first, second):
    from .shared_objects import note_same  # (shared_objects imports this module)

    note_same(context, first, second)


def class_path(path):
    """Where the class of the object at ``path`` is found again: ``path.__class__``."""
    return path.attr("__class__")


def guard_class(context, path, value):
    """The object at ``path`` must be of ``value``'s class at later calls: the trace
    inlined that class's methods and answered ``isinstance``/``type`` queries for it, so
    ``self.optimizer = MomentumSGD(lr)`` replacing ``PlainSGD(lr)`` (equal settings) is a
    different trace. An object whose class statement defines special methods Python calls
    where no hook sees them (``if self.gate:`` runs ``__bool__``, ``_ROUTED_METHODS``) is
    guarded by identity as well: another object of the class may answer otherwise. (Not
    a subclass of a builtin container, ``class Config(dict)``: its contents are guarded
    at that path.)"""
    context.note_outside_value(class_path(path), type(value), identity=True)
    kind = type(value)
    if all(base.__flags__ & _HEAP_TYPE for base in kind.__mro__[:-1]) and (
            not _methods_routed(kind)):
        context.note_outside_value(path, value, identity=True)


def guard_method(context, path, receiver, name):
    """``receiver.name`` (found at ``path``) is a method the trace enters: later calls must
    find the same function on the same class (a class patched between calls,
    ``Swish.__call__ = ...``, is a different trace). False when the method is not the
    class's plain function (an instance attribute, a classmethod): nothing to guard."""
    function = getattr(type(receiver), name, None)
    if not isinstance(function, types.FunctionType):
        return False
    guard_class(context, path, receiver)
    context.note_outside_value(class_path(path).attr(name),
                               function, identity=True)
    return True
