"""Arrays and values a trace read from outside the function: ``OutsideInputs``, a part of
``TracingContext``.

An array reached through a global, a closure, a default or an attribute
(``tracer.implicit.find_implicit_inputs`` lists the candidates, ``implicit_candidates``)
becomes a graph input the first time the trace computes with it (``implicit_used``, one
``ImplicitInput`` each), so compiled calls read it afresh instead of freezing it. A Python
value read from outside that shaped the trace (a flag, a list's length) is noted in
``outside_values``: the entry guards of later calls compare it, down to the settings
inside lists and dicts (``note_contents``, which the front end's load hook calls).

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> weights = np.ones(3)
>>> t = trace(lambda x: x * weights, np.ones(3))
>>> [str(implicit.path) for implicit in t.implicit_inputs]
['global weights']
"""

from __future__ import annotations

import array
import collections
import copy
import enum
import types
from dataclasses import dataclass, field

import numpy as np

from . import attribute_writes
from .abstract import AbstractArray
from .implicit import Path, is_array
from .ir import Var
from .traced_array import Tracer, trace_error


@dataclass
class ImplicitInput:
    """An array read from a global, closure, default argument or attribute."""

    path: tuple
    input_index: int
    value: object = field(repr=False)


class OutsideInputs:
    """The outside-values part of a ``TracingContext``: ``implicit_candidates``,
    ``implicit_used``, ``implicit_tracers``, ``outside_values`` and ``replaced`` (fields the
    context sets up), with its ``inputs`` and ``body``."""

    def _implicit_input(self, value):
        key = id(value)
        if key not in self.implicit_used:
            path, _ = self.implicit_candidates[key]
            array = np.asarray(value)
            var = self.new_var(AbstractArray(array.shape, array.dtype))
            self.inputs.append(var)
            self.implicit_used[key] = ImplicitInput(path, len(self.inputs) - 1, value)
            self.values[var.name] = (array, array.shape)
            if hasattr(value, "requires_grad"):
                # a Tensor the function reaches (a model argument's self.W): values computed
                # from it are Tensors eagerly, so type checks on them cannot be answered
                # "ndarray" (tracing.py sets this for Tensor arguments)
                self.tensor_arguments = True
        spec = self.implicit_used[key]
        var = self.inputs[spec.input_index]
        return var, np.asarray(value), var.aval

    def _view_of_replaced(self, array):
        """Whether ``array`` views (through ``.base``) a NumPy buffer a traced value was
        written into since: its data is the old one, NumPy's would be the new."""
        base = array.base
        while isinstance(base, np.ndarray):
            if id(base) in self.replaced:
                return True
            base = base.base
        return False

    def number_input(self, owner, path, value):
        """A number an attribute keeps across calls (``self.t``, which ``self.t += 1``
        rebinds: ``attribute_writes.NumberState``): a run-time scalar input read through
        ``path`` at every call, where a setting would be entry-guarded by value."""
        # (a number at a position of a tuple the attribute holds: that attribute's too)
        key = ("number", id(owner), path.steps[-1][1] if path.steps[-1][0] == "attr"
               else str(path))
        tracer = self.implicit_tracers.get(key)
        if tracer is None:  # a Python number is weak (as an int argument is), NumPy's not
            weak = type(value) in (int, float)
            var = self.new_var(AbstractArray((), type(value) if weak else value.dtype, weak))
            self.inputs.append(var)
            self.implicit_used[key] = ImplicitInput(path, len(self.inputs) - 1, value)
            self.values[var.name] = (value, ())
            tracer = self.implicit_tracers[key] = Tracer(self, var, value, ())
        return tracer

    def is_implicit(self, value):
        return id(value) in self.implicit_candidates or id(value) in self.implicit_used

    def implicit_tracer(self, value):
        """The traced input standing for an outside array (one per array)."""
        tracer = self.implicit_tracers.get(id(value))
        if tracer is None:
            var, array, _ = self._implicit_input(value)
            tracer = Tracer(self, var, array, var.aval.shape)
            self.implicit_tracers[id(value)] = tracer
        return tracer

    def outside_array(self, tracer):
        """The outside array an implicit-input tracer stands for, if it is still that."""
        for key, candidate in self.implicit_tracers.items():
            if candidate is tracer and tracer.ir_var is self.inputs[
                self.implicit_used[key].input_index
            ]:
                return self.implicit_used[key].value
        return None

    def note_keys(self, path, mapping):
        """A dict read from outside: later calls must find the same keys, in order."""
        self.outside_values.setdefault(f"keys:{path.key}", (path, "keys", tuple(mapping)))

    def note_presence(self, path, present):
        """``hasattr(layer, "cache")`` shaped the trace (nnfs's optimizers create their
        state behind it): later calls must find the attribute there, or not, the same."""
        self.outside_values.setdefault(f"has:{path.key}", (path, "has", present))

    def note_outside_contents(self, path, value):
        """Guard a list or tuple of settings by its whole value (past the budget of
        settings guarded one by one)."""
        self.outside_values[path.key] = (path, "value", type(value)(value))

    def note_outside_value(self, path, value, identity=False):
        """A Python value read from outside (a global flag, ``self.eps``) shaped the trace:
        later calls must see the same value (lists and tuples: the same length; functions,
        with ``identity``: the same object)."""
        key = path.key
        if key not in self.outside_values:
            if identity:
                self.outside_values[key] = (path, "is", value)
            elif type(value) in (list, tuple, collections.deque):
                self.outside_values[key] = (path, "len", (type(value).__name__, len(value)))
            elif isinstance(value, (list, tuple, collections.deque)):  # a subclass (its class
                # guarded too)
                kind = next(base for base in (list, tuple, collections.deque)
                            if isinstance(value, base)).__name__
                self.outside_values[key] = (path, "len", (f"{kind} subclass", len(value)))
            else:  # (a set is compared with a copy: NO_DECAY.discard("b") is a change)
                self.outside_values[key] = (path, "value", copy.copy(value) if type(
                    value) in (set, bytearray, array.array) else value)

    def guard_contents(self, array):
        """Guard that an implicit input holds the values it holds now (a mask whose
        positions the trace used); arrays created inside the function need nothing."""
        if id(array) not in self.implicit_candidates and id(array) not in self.implicit_used:
            return
        var, value, _ = self._implicit_input(array)
        tracer = Tracer(self, var, value, var.aval.shape)
        same = np.all(tracer == np.array(array, copy=True))
        self.guard(same, "bool", True)

    def drop_unused_implicit_inputs(self, outputs):
        """Forget outside arrays the trace handed out but never computed with (a global
        list of layers loaded for one of them): they would only be read and checked at
        every call. Inputs that require grad stay (their gradient is part of the result)."""
        used = {atom.name for atom in outputs if isinstance(atom, Var)}
        for item in self.body:
            used.update(atom.name for atom in getattr(item, "inputs", ())
                        if isinstance(atom, Var))
            predicate = getattr(item, "predicate", None)
            if isinstance(predicate, Var):
                used.add(predicate.name)
        unused = {key for key, implicit in self.implicit_used.items()
                  if self.inputs[implicit.input_index].name not in used
                  and key not in self.outside_mutations  # its guard finds it for the write
                  and self.inputs[implicit.input_index].name not in (
                      self.trip_counts.attributes)  # its guard binds a loop's trip count
                  and not getattr(implicit.value, "requires_grad", False)}
        if not unused:
            return
        dropped = {self.implicit_used[key].input_index for key in unused}
        renumber, kept = {}, []
        for index, var in enumerate(self.inputs):
            if index not in dropped:
                renumber[index] = len(kept)
                kept.append(var)
        self.inputs = kept
        self.trip_counts.inputs = {renumber[index]: count for index, count in (
            self.trip_counts.inputs.items())}  # (count carriers after a dropped input)
        self.implicit_used = {
            key: ImplicitInput(implicit.path, renumber[implicit.input_index], implicit.value)
            for key, implicit in self.implicit_used.items() if key not in unused}


# Python values read from outside that shape a trace (flags, ``cfg["k"]``,
# ``os.environ["MODE"]``, ``self.bias is None``): entry guards compare them at every call.
SETTINGS = (bool, int, float, str, type(None))  # compared by type and value
# (a deque by its length and items as a list; bytearray and array.array by a copy of their
# contents: len(self.memory) of a replay buffer, sum(REWARDS), grown between calls)
GUARDED_VALUES = (*SETTINGS, list, tuple, collections.deque, bytearray, array.array)
# dicts guarded by their keys and items (a Sequential's OrderedDict of layers that grows)
MAPPINGS = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)

CONTENT_LIMIT = 64  # values guarded one by one inside an outside list, tuple or dict

# What code reads a container by: a user subclass (``class Config(dict)``, ``class
# Layers(list)``, a namedtuple) whose class keeps its base's methods for these reads as the
# trace reads it, guarded as its base is (and by its class); one that overrides them must
# run its own code at every call.
_CONTAINER_READS = ("__getitem__", "__iter__", "__len__", "__contains__", "__eq__",
                    "__ne__", "__reversed__")
_MAPPING_READS = (*_CONTAINER_READS, "get", "keys", "values", "items")
_SEQUENCE_READS = (*_CONTAINER_READS, "index", "count")
_SEQUENCES = (list, tuple, collections.deque)  # (a deque holding arrays runs eagerly)


def container_subclass(value):
    """The container ``value``'s class derives from (one of ``MAPPINGS``, list or tuple)
    when that class is a subclass of it, else None.

    >>> class Config(dict): pass
    >>> container_subclass(Config(lr=0.1)), container_subclass({"lr": 0.1})
    (<class 'dict'>, None)
    """
    kind = type(value)
    if kind in MAPPINGS or kind in _SEQUENCES or not isinstance(value, (dict, *_SEQUENCES)):
        return None
    return next(base for base in kind.__mro__[1:] if base in MAPPINGS or base in _SEQUENCES)


def overridden_reads(value):
    """The read methods (``__getitem__``, ``values``, ...) a container subclass defines over
    its base's, by name: the trace cannot read such a container as a dict or list."""
    base = container_subclass(value)
    if base is None:
        return []
    names = _MAPPING_READS if base in MAPPINGS else _SEQUENCE_READS
    return [name for name in names if getattr(type(value), name, None) is not getattr(
        base, name, None)]


# collections.UserDict / UserList / ChainMap: objects whose reads go (in the standard
# library's Python) to what they hold, by the attribute named here
USER_CONTAINERS = {collections.UserDict: "data", collections.UserList: "data",
                   collections.ChainMap: "maps"}


def user_container_reads(value):
    """The read methods a ``UserDict`` / ``UserList`` / ``ChainMap`` subclass defines over
    its base's."""
    base = next(base for base in USER_CONTAINERS if isinstance(value, base))
    names = _SEQUENCE_READS if base is collections.UserList else _MAPPING_READS
    return [name for name in names if getattr(type(value), name, None) is not getattr(
        base, name, None)]


def is_mapping(value):
    """A dict read from outside that is guarded by its keys and items: one of ``MAPPINGS``
    or a subclass of one that reads as it does (``class Config(dict): pass``)."""
    return type(value) in MAPPINGS or (
        container_subclass(value) in MAPPINGS and not overridden_reads(value))


def is_sequence(value):
    """A list or tuple (or a subclass reading as one) whose length and items are guarded."""
    return type(value) in (list, tuple) or (
        container_subclass(value) in _SEQUENCES and not overridden_reads(value))


def _rebuilt(container, items):
    """A container of ``container``'s type holding ``items`` (pairs for a mapping): a
    subclass instance is made by its base's ``__new__`` and filled by its base's methods
    (its ``__init__`` and ``__setitem__`` are the user's, which may refuse), with the
    instance's attributes (``cfg.lr`` set in ``__init__``) copied over."""
    kind, base = type(container), container_subclass(container)
    if base is None:
        if type(container) not in MAPPINGS:
            return kind(items)
        copied = {key: item for key, item in items}
        if kind is collections.OrderedDict:
            return collections.OrderedDict(copied)
        if kind is collections.defaultdict:
            return collections.defaultdict(container.default_factory, copied)
        if kind is collections.Counter:
            return collections.Counter(copied)
        return copied
    if base is tuple:
        copied = tuple.__new__(kind, list(items))
    elif base is collections.deque:
        copied = collections.deque.__new__(kind)
        collections.deque.__init__(copied, items, container.maxlen)
    else:
        copied = base.__new__(kind)
        if base is list:
            list.extend(copied, items)
        else:
            if base is collections.defaultdict:
                copied.default_factory = container.default_factory
            for key, item in items:
                base.__setitem__(copied, key, item)
    try:  # (not hasattr: an EasyDict's __getattr__ raises KeyError)
        attributes = object.__getattribute__(container, "__dict__")
    except AttributeError:
        attributes = None
    if attributes and base is not tuple:
        copied.__dict__.update(attributes)
    return copied


def is_setting(value):
    """A value an entry guard compares by type and value: a number, a string, None, an
    Enum member (``self.mode is Mode.TRAIN``), a set of names, a range or a NumPy scalar
    type (``X.astype(self.dtype)``). (An array's ``x.dtype`` is guarded with the array.)"""
    return type(value) in SETTINGS or isinstance(
        value, (enum.Enum, set, frozenset, range)) or (
        isinstance(value, type) and issubclass(value, np.generic))


def with_inputs(context, container, path=None, depth=0):
    """``container`` (read from outside at ``path``) with the implicit-input arrays inside
    it replaced by their traced inputs, so code that iterates it (``PARAMS.items()``,
    ``for W in WEIGHTS``) computes on inputs, not on frozen constants. Arrays the up-front
    scan left out (past its first 64 items) are inputs through ``path`` too. The same
    container comes back when it holds none."""
    if depth > NESTING_LIMIT:
        if _holds_arrays(container):
            # Past the limit nothing replaces them: they would be frozen constants
            where = path or "a container read from outside"
            raise trace_error(f"arrays nested more than {NESTING_LIMIT + 1} containers deep "
                              f"in {where}: the compiled code would keep their values; the "
                              "call runs eagerly. Keep them in a flatter list or dict")
        return container
    mapping = is_mapping(container)
    items = container.items() if mapping else enumerate(container)
    # numbers under the keys calls write (self.stats["n_" + name] += 1) are not guarded:
    # read whole (dict(self.stats), self.stats = C) they must be the run-time inputs
    # state_item reads, or another name's count would be the traced call's
    state = context.state_dicts.get(id(container), (None, ()))[1] if type(
        container) is dict else ()
    replaced = {}
    for key, item in items:
        where = None if path is None else Path(path.root, path.steps + (("item", key),))
        if where is not None and where.key in context.written_paths:
            continue  # self.cache["w"] = np.zeros(3), read again: what the trace wrote
        if is_array(item) and where is not None and not context.is_implicit(item):
            context.implicit_candidates[id(item)] = (where, item)
        if key in state and where is not None and (
                type(item) in (int, float) or isinstance(item, np.generic)):
            value = state_value(context, where, item)
            if value is not None and value is not item:
                replaced[key] = value
        elif is_array(item) and context.is_implicit(item):
            replaced[key] = context.implicit_tracer(item)
        elif is_mapping(item) or is_sequence(item):
            inner = with_inputs(context, item, where, depth + 1)
            if inner is not item:
                replaced[key] = inner
    if not replaced:
        return container
    if mapping:
        copy = _rebuilt(container, [(key, replaced.get(key, item))
                                    for key, item in container.items()])
    else:
        copy = _rebuilt(container, [replaced.get(index, item)
                                    for index, item in enumerate(container)])
    attribute_writes.note_copy(context, copy, container)
    return copy


NESTING_LIMIT = 5  # containers inside containers whose arrays become inputs


def _holds_arrays(container, depth=0):
    """Whether an array (or Tensor) is inside ``container`` or the lists, tuples and dicts
    nested in it (a self-referencing one is cut off by the depth)."""
    if depth > 20:
        return False
    items = container.values() if is_mapping(container) else container
    return any(is_array(item) or ((is_mapping(item) or is_sequence(item)) and _holds_arrays(
        item, depth + 1)) for item in items)


def note_contents(context, path, value, budget=None, state=frozenset()):
    """Guard a Python value read from outside, down to the settings inside it: a scalar or
    string by type and value; a list or tuple by length and, when it holds settings
    (``SCALES = [1.0, 2.0]``, ``CFG["model"]["k"]``), each of them; a dict by its keys and
    those values, but for the keys in ``state`` (``attribute_writes.item_state``: guarded
    where read, ``state_item``). Arrays inside are inputs (implicit), not guarded by
    value. Returns the budget left: past ``CONTENT_LIMIT`` values only lengths are
    guarded."""
    budget = [CONTENT_LIMIT] if budget is None else budget
    if type(value) is dict and path is not None and _written_items(context, path, value):
        # bn_param["running_mean"] = ... into self.bn_params[0], then the list read again:
        # its keys are this trace's doing; the dict was guarded at its first read, before
        return
    if type(value) in (list, tuple, collections.deque) or is_sequence(value):
        context.note_outside_value(path, value)
        items = enumerate(value)
    elif type(value) is dict and state:
        context.state_dicts[id(value)] = (path, state)
        context.state_paths[path.key] = (value, state)
        context.note_keys(path, value)
        items = [(key, item) for key, item in value.items() if key not in state]
    elif is_mapping(value):
        if not all(type(key) in (str, int) for key in value):
            return
        if len(value) <= CONTENT_LIMIT and all(
            is_setting(item) for item in value.values()
        ):  # a dict of settings: its keys too (``for name in CFG``, ``CFG.get``)
            context.note_outside_value(path, _rebuilt(value, value.items()))
        else:  # self.blocks["fc3"] = ... added later: .items(), len(), .get see it
            context.note_keys(path, value)
        items = value.items()
    else:
        if budget[0] > 0:
            budget[0] -= 1
            # np.float32 held as a setting: the same class (found by import, on disk too)
            context.note_outside_value(path, value, identity=isinstance(value, type))
        return
    for key, item in items:
        if budget[0] <= 0:
            if not state and _plain_settings(value):
                # the rest: one comparison (a table of 100 settings iterated by .items(),
                # a list of 100 layer configs)
                context.note_outside_contents(path, copy.deepcopy(value))
            return
        if type(item) in GUARDED_VALUES or is_setting(item) or is_mapping(item) or (
                is_sequence(item)) or isinstance(item, np.generic):
            where = Path(path.root, path.steps + (("item", key),))
            note_contents(context, where, item, budget, state=context.item_state_of(
                where, item) if type(item) is dict and hasattr(
                    context, "item_state_of") else frozenset())
        elif _chosen_object(item):  # for layer in self.layers: which layer is which
            from .object_paths import guarded_by_class  # (it imports this module)

            budget[0] -= 1
            where = Path(path.root, path.steps + (("item", key),))
            if guarded_by_class(item):  # a layer: read through its path, of its class
                context.note_outside_value(where.attr("__class__"), type(item), identity=True)
            else:  # a function: the one the trace inlined
                context.note_outside_value(where, item, identity=True)


def _written_items(context, path, value):
    """Whether this trace wrote an item of the dict ``value`` read at ``path`` (through
    that path, or through another where the dict is the same: ``[{...}] * 2``)."""
    writes = getattr(context, "attribute_writes", {})
    return any(Path(path.root, path.steps + (("item", key),)).key in context.written_paths
               or (id(value), attribute_writes.Item(key)) in writes for key in value)


def _plain_settings(value, depth=0):
    """Whether ``value`` is a list, tuple or dict (text or int keys) holding settings and
    such containers only, all the way down: compared whole with a deep copy."""
    if depth > 8 or type(value) not in (list, tuple, *MAPPINGS):
        return False
    if type(value) in MAPPINGS:
        if not all(type(key) in (str, int) for key in value):
            return False
        value = value.values()
    return all(is_setting(item) or _plain_settings(item, depth + 1) for item in value)


def state_item(context, container, key):
    """``container[key]`` read where calls write that key (``note_contents``' ``state``),
    or None for any other item (see ``state_value``)."""
    original = context.outside_copies.get(id(container), container)
    path, _ = context.state_dicts.get(id(original), (None, ()))
    if path is None or key not in container:
        return None
    value = container[key]
    if isinstance(value, (Tracer, np.ndarray)):
        return value  # an input already, or what this trace wrote
    return state_value(context, Path(path.root, path.steps + (("item", key),)), value)


def state_value(context, where, value):
    """The value of an item (``where``, an item path) of a dict whose calls write it, as
    the trace reads it, or None for any other: a number is a run-time input read through
    its path at every call; another setting is guarded now, as the whole dict's would have
    been at its load; what this trace wrote is what it wrote."""
    if not where.steps or where.steps[-1][0] != "item":
        return None
    entry = context.state_paths.get(Path(where.root, where.steps[:-1]).key)
    if entry is None or where.steps[-1][1] not in entry[1] or isinstance(value, np.ndarray):
        return None
    if where.key in context.written_paths or isinstance(value, Tracer):
        return value
    if type(value) in (int, float) or isinstance(value, np.generic):
        return context.number_input(entry[0], where, value)
    note_contents(context, where, value)
    return value


def _chosen_object(item):
    """A layer object or a function inside an outside list or dict: the trace inlined
    what it computes, so a later call must find the same one there."""
    return not isinstance(item, (np.ndarray, np.generic, types.ModuleType, type,
                                 types.MethodType, types.BuiltinMethodType)) and getattr(
        type(item), "__tracejit_priority__", 0) == 0 and (
        callable(item) or hasattr(item, "__dict__") or hasattr(type(item), "__slots__"))


# Modules and classes are not guarded by identity (rebinding them is rare, and ``np`` is
# read everywhere); bound methods are new objects at every attribute read.
NOT_GUARDED_CALLABLES = (type, types.ModuleType, types.MethodType, types.BuiltinMethodType)


def through_module(path):
    """A path that starts at a module (``np.tanh``, ``nn.relu``): library code."""
    if not path.steps or path.root[0] == "arg":  # (an argument's leaves are not at hand)
        return False
    return isinstance(Path(path.root).resolve(), types.ModuleType)
