"""Attribute writes on objects from outside the function: ``self.cache = x``,
``self.h, self.c = h, c``, ``layer.mask = x > 0``.

Layer classes keep what backward needs on themselves (``self.cache``, ``self.x``), and
recurrent cells keep their state there (``self.h``). Eager NumPy leaves the last value
written in the attribute; a compiled call must too. Under tracing ``note`` sets the
attribute for real (every later read, by rewritten code or not, sees the traced value),
remembers what was there (``restore`` puts it back when the trace fails, so the eager run
starts from the caller's state) and where the object is found again (its ``Path`` from
the implicit-input scan, identity-guarded at entry). ``collect`` makes each written value
an output of the graph (a tuple or dict of arrays: each leaf); after a compiled call
``AttributeWrite.store`` sets the attribute from the outputs, after the traced call
``apply`` sets it to the concrete values. An object made during the call (``Linear(...)``
inside the function) is written as Python writes it: nothing reaches the caller.

    >>> import numpy as np, tracejit as tj
    >>> class Dense:
    ...     def __init__(self):
    ...         self.W = np.eye(2)
    ...     def forward(self, x):
    ...         self.x = x  # for backward
    ...         return x @ self.W
    >>> layer = Dense()
    >>> f = tj.jit(layer.forward, cache="memory")
    >>> f(np.ones((1, 2))), layer.x
    (array([[1., 1.]]), array([[1., 1.]]))
"""

from __future__ import annotations

import collections
import types
import weakref
from dataclasses import dataclass

import numpy as np

from . import pytree, tensor_methods
from .abstract import PYTHON_SCALARS
from .argument_writes import resolve, written_value
from .errors import TraceSignal, UnsupportedError
from .implicit import Path
from .locations import line_prefix, user_location
from .loop_generalize import Refused
from .pending import force

_MISSING = object()  # an attribute that was not there before the write
DELETED = object()  # what a ``del self.cache`` records as the attribute's last value

# Per object, the attributes holding a number that its calls rebind (self.t += 1 in an
# optimizer): traces read them as run-time inputs, not as entry-guarded settings.
_NUMBER_STATE = weakref.WeakKeyDictionary()


class NumberState(TraceSignal):
    """An attribute holding a number was rebound (``self.t += 1``) where the trace had
    read it as a setting: trace again, reading it as a run-time input."""


def is_number_state(owner, name):
    try:
        return name in _NUMBER_STATE.get(owner, ())
    except TypeError:  # not weakly referenceable or not hashable
        return False


# Per object, the keys its calls write into the dicts it keeps (``self.stats["loss"] =
# loss`` in ``self.stats``): state, read at later calls as run-time inputs (numbers) or
# guarded where read, not entry-guarded with the rest of the dict as settings are.
_ITEM_STATE = weakref.WeakKeyDictionary()


def item_state(owner, name):
    """The keys of the dict ``owner.name`` that calls write (see ``_ITEM_STATE``)."""
    try:
        return _ITEM_STATE.get(owner, {}).get(name, frozenset())
    except TypeError:  # an owner without weak references
        return frozenset()


def mark_item_state(owner, name, key):
    """Remember that calls write ``owner.name[key]``; False when ``owner`` cannot be
    remembered."""
    try:
        names = _ITEM_STATE.setdefault(owner, {})
    except TypeError:
        return False
    names[name] = names.get(name, frozenset()) | {key}
    return True


def mark_number_state(owner, name):
    """Remember that ``owner.name`` is a number its calls rebind; False when ``owner``
    cannot be remembered (then the write stays refused)."""
    try:
        _NUMBER_STATE.setdefault(owner, set()).add(name)
    except TypeError:
        return False
    return True


@dataclass(frozen=True)
class Item:
    """The name a write record gives an item of an outside dict (``self.cache["h"] = h``:
    ``Item("h")`` of the dict ``self.cache``) where it gives an attribute its name."""

    key: object

    def __str__(self):
        return f"[{self.key!r}]"


def _set(owner, name, value):
    if type(name) is Item:
        owner[name.key] = value
    else:
        setattr(owner, name, value)


def _saved(owner, name):
    """What ``owner`` holds at ``name`` now (``_MISSING`` if nothing), for putting back."""
    if type(name) is Item:  # (a list's position is always there: note_item checks it)
        return owner.get(name.key, _MISSING) if type(owner) is dict else owner[name.key]
    return vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else getattr(
        owner, name, _MISSING)


def _put_back(owner, name, saved):
    if saved is not _MISSING:
        _set(owner, name, saved)
    elif type(name) is Item:
        owner.pop(name.key, None)
    else:
        try:
            delattr(owner, name)
        except AttributeError:
            pass


def output_leaf(context, leaf, output_atoms):
    """``(kind, index)`` of a traced leaf a write stores after the call (its atom joins
    ``output_atoms``, the program's extra outputs): ``"scalar"`` for a NumPy scalar,
    ``"value"`` for a Python number, else ``"array"`` (read back by ``stored_values``)."""
    atom, concrete, _ = context.atom(leaf)
    concrete = getattr(leaf, "value", concrete)
    kind = ("scalar" if isinstance(concrete, np.generic) else
            "value" if type(concrete) in PYTHON_SCALARS else "array")
    output_atoms.append(atom)
    return kind, len(output_atoms) - 1


def stored_values(leaves, outputs, argument=None):
    """The leaves a write or an append stores after a compiled call, by kind: ``("static",
    value)`` as it is, ``("scalar", i)`` output ``i`` as a NumPy scalar, ``("value", i)``
    as a Python number, ``("argument", i)`` argument leaf ``i`` itself (``argument(i)``:
    an append of the caller's own array), else output ``i``."""
    values = []
    for kind, value in leaves:
        if kind == "static":
            values.append(value)
        elif kind == "argument":
            values.append(argument(value))
        elif kind == "scalar":  # (a Tensor eagerly stays one: runtime.result_source)
            item = outputs[value]
            values.append(item if hasattr(item, "requires_grad") else np.asarray(item)[()])
        elif kind == "value":
            item = outputs[value]
            values.append(item.item() if isinstance(item, (np.ndarray, np.generic)) else item)
        else:
            values.append(outputs[value])
    return values


@dataclass(frozen=True)
class AttributeWrite:
    """``owner.name = value`` (or ``owner[name.key] = value``, ``name`` an ``Item``) with
    ``owner`` found through ``path`` (a ``tracer.implicit.Path``); ``tree`` is the value's
    pytree structure and ``leaves`` per leaf ``("array" | "scalar" | "value", output
    index)`` or ``("static", value)``."""

    path: object
    name: str
    tree: object
    leaves: tuple
    deleted: bool = False  # ``del self.cache``: the call leaves no attribute there

    @property
    def kind(self):  # what OutputPlan's checks read: outputs in ``leaves``
        return "tree"

    @property
    def outputs(self):
        return [value for kind, value in self.leaves if kind != "static"]

    def store(self, arguments, outputs):
        if self.deleted:
            owner = resolve(self.path, arguments)
            if hasattr(owner, self.name):
                delattr(owner, self.name)
            return
        _set(resolve(self.path, arguments), self.name, pytree.unflatten(
            self.tree, stored_values(self.leaves, outputs)))

    def snapshot(self, arguments):
        """A function that puts the attribute back as it is now (``jit(check=True)``)."""
        owner = resolve(self.path, arguments)
        saved = _saved(owner, self.name)
        return lambda: _put_back(owner, self.name, saved)


def is_local_object(context, owner):
    """An object made during this call (by calling its class in the function)."""
    return id(owner) in context.created_objects


def set_local(context, owner, name, value=_MISSING):
    """``owner.name = value`` on an object made in this call, as Python does it (no
    ``value``: ``del owner.name``). While a loop's trial trips run
    (``watch_local_writes``) the write is journaled, so a capture the trials refuse puts
    the object back as the peeled trip left it before the trips run unrolled."""
    journal = getattr(context, "local_writes", None)
    if journal is not None:
        journal.append((owner, name, _saved(owner, name)))
    if value is _MISSING:
        delattr(owner, name)
    else:
        setattr(owner, name, value)


def watch_local_writes(context):
    """Start journaling the writes into objects made in this call (``set_local``): returns
    ``(journal, before)``, the journal ``(owner, name, what it held)`` oldest first, for
    ``undo_local_writes``, and what ``stop_watching`` restores. An ``acc = acc.add(x[t])``
    whose method sets ``self.total`` writes at every trial trip of a loop: a captured loop
    would leave a trial's traced value there."""
    before = getattr(context, "local_writes", None)
    context.local_writes = []
    return context.local_writes, before


def stop_watching(context, journal, before):
    context.local_writes = before
    if before is not None:
        before.extend(journal)  # what an outer loop's trials may have to undo too


def undo_local_writes(journal):
    while journal:
        owner, name, saved = journal.pop()
        _put_back(owner, name, saved)


def note_created(context, value):
    context.created_objects[id(value)] = value  # kept alive: its id stays its own


def refuse_returned_object(context, value):
    """Refuse a result that is an object made in this call (``return Model().fit(X)``, a
    fit that returns ``self``): the program cannot make it again, so compiled calls would
    return the trace's own object, its attributes as the trace left them (traced values);
    eager returns a new one per call."""
    if is_local_object(context, value):
        raise UnsupportedError(
            f"the function returns an object made in the call ({type(value).__name__}); "
            "compiled calls cannot make it again. Return its arrays, or make the object "
            "outside and jit its method")


def _refuse_in_captured_loop_or_gradients(context, path, name, value):
    if getattr(context, "loop_depth", 0):
        raise Refused("an attribute write on an object from outside the function")
    if getattr(context, "records_gradients", False) and any(
            loses_a_graph(context, leaf) for leaf in pytree.flatten(value)[0]):
        # eager keeps a Tensor with its graph there (self.out.sum().backward() later)
        raise UnsupportedError("an attribute set to a value computed with gradients "
                               f"({path}.{name}); it would lose its graph")


def loses_a_graph(context, leaf):
    """Whether storing ``leaf`` (an attribute write, a list append) in a trace with
    gradients is refused: eagerly it may be a Tensor with history, which a compiled call
    would store without its graph. A running statistic, ``0.9 * self.running_mean + 0.1 *
    mean.detach()``, is a Tensor without history eagerly, as the compiled call stores it;
    ``self.cache = x * 2`` of an ndarray ``x`` an ndarray (``OutputPlan.tensors``);
    ``loss.item()`` a float."""
    return hasattr(leaf, "ir_var") and _may_carry_a_graph(leaf) and (
        tensor_methods.carries_gradient(context, leaf))


def _may_carry_a_graph(leaf):
    """Whether a traced value may eagerly be a Tensor with history: not a Python number
    (``self.step += 1``, a run-time int) nor an integer or boolean array."""
    aval = getattr(leaf, "aval", None)
    return aval is not None and not aval.weak and aval.dtype.kind in "fc"


def carried_by_loops(context):
    """How many loops being captured carry each attribute, by ``(id(owner), name)``
    (``loop_attribute_carries``; a nest of loops over the same weights: a Perceptron's
    epochs over its samples). A write there in a traced trip is the carry's: ``note``
    sets it and records nothing."""
    carried = getattr(context, "carried_attributes", None)
    if carried is None:
        carried = context.carried_attributes = collections.Counter()
    return carried


def class_code(owner, name, hook="__setattr__"):
    """The code of ``owner``'s class that writing (``hook="__delattr__"``: deleting)
    ``owner.name`` runs - ``'CountingSets.__setattr__'``, ``'Model.w_'`` (a property's
    setter, any data descriptor of the user's) - or None for a plain write. A trace runs
    it with traced values, and a failed trace then an eager run would run it twice: such a
    write of an outside object is refused before it runs."""
    kind = type(owner)
    if getattr(kind, hook) is not getattr(object, hook):
        return f"{kind.__name__}.{hook}"
    for klass in kind.__mro__:
        if name in vars(klass):
            descriptor = type(vars(klass)[name])
            if descriptor not in _STORED_DESCRIPTORS and (
                    hasattr(descriptor, "__set__") or hasattr(descriptor, "__delete__")):
                return f"{klass.__name__}.{name}"
            return None
    return None


# __slots__ members and C getset attributes: storage, no code of the user's class
_STORED_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)


def note(context, owner, name, value, path):
    """Set ``owner.name = value`` for the trace and record it; ``path`` finds ``owner``
    again at every call. Raises ``Refused`` in a trip traced for capture (the loop
    unrolls: each trip's write is then a write of this trace). The peeled first trip and
    unrolled trips are this trace's own, so their writes (a method of ``self`` called in
    the body, ``self.h = ...; self.steps += 1``) are recorded like any other. An attribute
    the loop carries (``loop_attribute_carries``) is set for the trip alone."""
    carried = getattr(context, "carried_attributes", None)
    if carried and carried[(id(owner), name)] > 0:
        setattr(owner, name, value)
        return
    _refuse_in_captured_loop_or_gradients(context, path, name, value)
    key = (id(owner), name)
    if key not in context.attribute_originals:
        context.attribute_originals[key] = (owner, name, vars(owner).get(name, _MISSING)
                                            if hasattr(owner, "__dict__") else
                                            getattr(owner, name, _MISSING))
        _guard_owner(context, path, owner)
    context.attribute_writes.pop(key, None)  # the last write, in write order
    context.attribute_writes[key] = (path, owner, name, value, user_location())
    context.written_paths.add(path.attr(name).key)
    setattr(owner, name, value)


def _guard_owner(context, path, owner):
    """The object a write goes to is found again through ``path`` at every call and the
    write stored there (``AttributeWrite.store``), so any object of its class will do:
    ``self.cache = x`` of a jitted method lands on the call's ``self``
    (``runtime.object_arguments``). Guarded by class as ``object_paths.guard_class``
    guards (that module imports this one)."""
    context.note_outside_value(path.attr("__class__"), type(owner), identity=True)


def note_item(context, container, key, value, owner):
    """``container[key] = value`` into a dict from outside found again through a path
    (``self.cache["h"] = h``, ``self.grads["W"] = dW``): set for the trace (in the dict
    itself and the trace's copy of it, so every later read sees it) and recorded like an
    attribute write; ``owner`` holds the dict in an attribute, and the key is its state
    from now on (``item_state``). An array written at a position of an outside list
    (an optimizer's moments, ``self.m[i] = b1 * self.m[i] + (1 - b1) * g``) is recorded
    the same way: the list's length is guarded where it was read and its arrays are
    inputs read through their positions, so nothing more is state. False when the
    container has no path or owner, or the key or value cannot be stored again at every
    call (the caller refuses the write)."""
    original = context.outside_copies.get(id(container), container)
    known = context.outside_objects.get(id(original))
    if known is None or known[1] is not original:
        return False
    if type(original) is list:
        if not (type(key) is int and -len(original) <= key < len(original)
                and _array_value(value)):
            return False  # (a number there is a setting, guarded by value where read)
        key %= len(original)  # self.m[-1] and self.m[2] of three are one position
    elif type(original) is not dict or not plain_key(key) or not _storable(value) or (
            owner is None or not mark_item_state(owner, known[0].steps[-1][1], key)):
        return False
    name = Item(key)
    _refuse_in_captured_loop_or_gradients(context, known[0], name, value)
    record = (id(original), name)
    if record not in context.attribute_originals:
        context.attribute_originals[record] = (original, name, _saved(original, name))
    context.attribute_writes.pop(record, None)  # the last write, in write order
    context.attribute_writes[record] = (known[0], original, name, value, user_location())
    context.written_paths.add(Path(known[0].root, known[0].steps + (("item", key),)).key)
    original[key] = container[key] = value
    return True


def plain_key(key):
    """A dict key a path can name at every call: a str, an int (not a bool), or a tuple
    of them (an optimizer's ``self.m[(layer.name, "W")]``).

    >>> plain_key("W"), plain_key(("dense", 0)), plain_key(True), plain_key(1.5)
    (True, True, False, False)
    """
    if type(key) is tuple:
        return all(map(plain_key, key))
    return isinstance(key, (str, int)) and type(key) is not bool


def _array_value(value):
    """An array, or a traced value with at least one dim."""
    return isinstance(value, np.ndarray) or (hasattr(value, "ir_var") and bool(
        getattr(value, "shape", ())))


def _storable(value):
    """A value a compiled call can store again at every call: arrays, numbers, immutable
    plain values, and tuples and dicts of them (a list would be one shared object, where
    eager makes a new one)."""
    return all(hasattr(leaf, "ir_var") or hasattr(leaf, "expr") or _plain(leaf) or
               isinstance(leaf, (np.ndarray, np.generic)) for leaf in pytree.flatten(value)[0]
               ) and not isinstance(value, list)


def note_delete(context, owner, name, path):
    """``del owner.name`` for the trace (``del self.cache`` once the activations are used):
    compiled calls delete the attribute too. One the trace did not write must be there at
    every call, as it is now (else eager raises AttributeError)."""
    if getattr(context, "loop_depth", 0):  # a trip traced for capture: see ``note``
        raise Refused("an attribute deleted on an object from outside the function")
    attribute = path.attr(name)
    present = hasattr(owner, name)
    if present and attribute.key not in context.written_paths:
        context.note_presence(attribute, True)
    key = (id(owner), name)
    if present and key not in context.attribute_originals:
        context.attribute_originals[key] = (owner, name, vars(owner).get(name, _MISSING)
                                            if hasattr(owner, "__dict__") else
                                            getattr(owner, name, _MISSING))
        _guard_owner(context, path, owner)
    delattr(owner, name)  # (missing: the AttributeError eager raises)
    context.attribute_writes.pop(key, None)
    context.attribute_writes[key] = (path, owner, name, DELETED, user_location())
    context.written_paths.add(attribute.key)


def note_copy(context, copy, original):
    """``copy`` is the trace's copy of the outside dict or list ``original`` (its arrays
    made traced inputs): a write into it alone would not reach the original."""
    context.outside_copies[id(copy)] = original
    context.keep_alive.append(copy)  # its id must stay unique for the trace


def is_outside_container(context, value):
    """A dict or list from outside the function (or the trace's copy of one)."""
    return type(value) in (dict, list, collections.OrderedDict, collections.defaultdict) and (
        id(value) in context.outside_copies or id(value) in context.outside_objects)


def watch(context):
    """Remember what each object, dict and list the function can reach holds (by
    identity): after the call, a change no recorded write explains is caught
    (``unfollowed_change``) and undone (``restore``). Writes that go around the front
    end's hooks (``setattr(self, k, v)``, ``self.__dict__[k] = v``, a function without
    readable source appending to ``self.history``) would otherwise leave traced values in
    the caller's objects, and compiled calls would skip them."""
    context.outside_contents = {key: (value, _contents(value))
                                for key, (_, value) in context.outside_objects.items()
                                if _watched(value)}


def _watched(value):
    """Dicts, lists and objects of the user's own classes (not NumPy's ufuncs, whose
    ``__signature__`` ``inspect`` caches, nor other library objects)."""
    if type(value) in (dict, list):
        return True
    module = getattr(type(value), "__module__", "") or ""
    if module == "builtins":
        # int, str, functions; but exec(source, {}) (no __name__) puts the classes that
        # source defines in 'builtins' too, and their objects are the user's
        return bool(type(value).__flags__ & _HEAP_TYPE)
    return module.split(".")[0] not in ("numpy", "tracejit")


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class a class statement made


def _contents(value):
    if isinstance(value, dict):  # (an OrderedDict's, a defaultdict's items too)
        return dict(value)
    if type(value) is list:
        return list(value)
    state = getattr(value, "__dict__", None)
    return dict(state) if type(state) is dict else None


def _changed_keys(before, now):
    if type(before) is list:
        if len(before) != len(now):
            return {None}
        return {position for position, (a, b) in enumerate(zip(before, now)) if a is not b}
    keys = before.keys() | now.keys()
    return {key for key in keys if before.get(key, _MISSING) is not now.get(key, _MISSING)}


def unfollowed_change(context):
    """What changed in an outside object, dict or list that no recorded write explains
    (a description), or None."""
    for key, (value, before) in getattr(context, "outside_contents", {}).items():
        if before is None:
            continue
        changed = _changed_keys(before, _contents(value))
        if isinstance(value, (dict, list)):
            changed = {name for name in changed if (key, Item(name)) not in (
                context.attribute_writes)}
        elif type(value) is not list:  # (dunders: caches such as __signature__)
            changed = {name for name in changed if (key, name) not in context.attribute_writes
                       and not (name.startswith("__") and name.endswith("__"))}
        if changed:
            name = next(iter(changed))
            return (f"a write into an outside {type(value).__name__}" if isinstance(value, (
                dict, list)) else f"a change to the attribute {name!r} of a "
                f"{type(value).__name__} from outside")
    return None


def restore(context):
    """Put back what the attributes held before the trace wrote them (it failed: the
    eager run must start from the caller's state). Two records, not one twice: the
    contents ``watch`` took of each outside dict, list and user object undo any change,
    hooked or not; ``attribute_originals`` undo the hooked writes (``note``) on objects
    whose contents are not taken: ``__slots__`` objects, library classes' objects."""
    for value, before in getattr(context, "outside_contents", {}).values():
        if before is None or not _changed_keys(before, _contents(value)):
            continue
        if type(value) is list:
            value[:] = before
        else:
            state = value if isinstance(value, dict) else value.__dict__
            state.clear()
            state.update(before)
    originals = getattr(context, "attribute_originals", {})
    for owner, name, value in reversed(list(originals.values())):
        _put_back(owner, name, value)
    originals.clear()


def collect(context, output_atoms, is_leaf):
    """The writes, each array or scalar leaf of a written value appended to
    ``output_atoms``. Raises ``TypeError`` for a value that cannot be stored again at
    every call (an arbitrary object: eager makes a new one per call); its message starts
    with the user's line that wrote it."""
    writes = []
    expand = made_here(context, seen=set())
    for path, _, name, value, location in getattr(context, "attribute_writes", {}).values():
        if value is DELETED:
            writes.append(AttributeWrite(path, name, None, (), deleted=True))
            continue
        flat, tree = pytree.flatten(value, expand)
        leaves = []
        for leaf in flat:
            if not is_leaf(leaf):
                if not _plain(leaf):
                    where = line_prefix(location)
                    raise TypeError(f"{where}a {type(leaf).__name__} written into an "
                                    f"attribute ({path}.{name})")
                leaves.append(("static", leaf))
                continue
            leaves.append(output_leaf(context, leaf, output_atoms))
        writes.append(AttributeWrite(path, name, tree, tuple(leaves)))
    return writes


def _plain(value):
    return value is None or isinstance(value, (str, bytes, *PYTHON_SCALARS))


def made_here(context, seen=None):
    """``pytree.flatten``'s ``expand`` for written values: an object this call made, of a
    plain class, is a node rebuilt at every call from its attributes, as eager makes a
    new one per call (early tinygrad's ``t.grad = Tensor(g)`` in ``backward``). With
    ``seen``, an object met twice stays a leaf (refused): rebuilt twice it would be two."""

    def expand(value):
        if not (is_local_object(context, value) and _rebuildable(value)):
            return None
        if seen is not None:
            if id(value) in seen:
                return None
            seen.add(id(value))
        state = vars(value)
        return type(value), list(state), list(state.values())

    return expand


def _rebuildable(value):
    """An instance that ``object.__new__`` and its ``__dict__`` make again: no metaclass
    ``__call__``, ``__new__``, ``__setattr__`` or ``__slots__`` of its own."""
    cls = type(value)
    return type(cls).__call__ is type.__call__ and cls.__new__ is object.__new__ and (
        cls.__setattr__ is object.__setattr__) and hasattr(value, "__dict__") and not any(
        "__slots__" in vars(klass) for klass in cls.__mro__[:-1])


def _written_leaves(context, value):
    """``value``'s leaves, a NumPy buffer the trace then wrote into (``self.w =
    np.zeros(n)``, then ``self.w -= lr * dw``: the write goes to the buffer's traced copy)
    read as that copy, as ``context.atom`` reads it for the compiled calls' outputs."""
    flat, tree = pytree.flatten(value, made_here(context))
    return [written_value(context, leaf) for leaf in flat], tree


def compute_values(context):
    """Compute now every value ``apply`` will set (see ``argument_writes.compute_values``)."""
    for _, _, _, value, _ in getattr(context, "attribute_writes", {}).values():
        if value is not DELETED:
            for leaf in _written_leaves(context, value)[0]:
                if hasattr(leaf, "ir_var"):
                    force(leaf.raw_value)


def apply(context):
    """The traced call's attribute writes, with their real values."""
    for _, owner, name, value, _ in getattr(context, "attribute_writes", {}).values():
        if value is DELETED:
            continue  # (deleted for the trace already)
        flat, tree = _written_leaves(context, value)
        concrete = [leaf.value if hasattr(leaf, "ir_var") else
                    int(leaf.value) if hasattr(leaf, "expr") else leaf for leaf in flat]
        _set(owner, name, pytree.unflatten(tree, concrete))
    context.attribute_originals.clear()
