"""Appends to lists held outside the function: ``self.history.append(h)``,
``LOSSES.append(loss)``, ``self.derived_variables["Z"].append(Z)``, ``self.X.extend(xs)``.

Layers keep what backward needs in lists (numpy-ml's ``self.X.append(X)`` each forward),
training steps log losses into a module-level list, recurrent cells keep their hidden
states. Eager NumPy appends at every call; a compiled call must too. The list is found
again through its path at every call (``self.history`` may be rebound between calls:
``m.history = []``), and its contents are not guarded: the function only appends, so the
list growing between calls changes nothing the trace decided. Under tracing ``note``
records the append (``(path, method, value)``, in program order) and leaves the list as it
is; ``collect`` makes each array or number in the appended value an output of the program;
a compiled call appends after its kernels (``ListAppend.store``: fresh containers, and the
caller's own array where eager appends an argument), the traced call after the trace
(``apply``). A read of a list after this call appended to it sees the appended items at
its end (``self.X[-1]``: ``AppendedTail``); a read of more (its length, older items) runs
the call eagerly.

    >>> import numpy as np, tracejit as tj
    >>> class Cell:
    ...     def __init__(self):
    ...         self.hs = []
    ...     def step(self, x):
    ...         h = np.tanh(x)
    ...         self.hs.append(h)
    ...         return h
    >>> cell = Cell()
    >>> f = tj.jit(cell.step, cache="memory")
    >>> for _ in range(3):
    ...     _ = f(np.zeros(2))
    >>> len(cell.hs), f.stats()["compiled_calls"] > 0
    (3, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import pytree
from .abstract import PYTHON_SCALARS
from .argument_writes import argument_leaves
from .attribute_writes import Item, loses_a_graph, output_leaf, stored_values
from .errors import UnsupportedError
from .implicit import Path
from .locations import user_location
from .loop_generalize import Refused
from .pending import force
from .traced_array import trace_error

METHODS = ("append", "extend")


@dataclass(frozen=True)
class ListAppend:
    """``list_at(path).append(value)`` (``method`` "append") or ``.extend(value)``, the
    list found through ``path`` (a ``tracer.implicit.Path``); ``tree`` is the value's
    pytree structure and ``leaves`` per leaf ``("array" | "scalar" | "value", output
    index)``, ``("argument", argument leaf)`` (eager appends the caller's array itself),
    or ``("static", value)``."""

    path: object
    method: str
    tree: object
    leaves: tuple
    # the list is one the call stores there first (``self.errors = []``, then appends):
    # there before the appends whatever the attribute held before the call
    stored_by_the_call: bool = False

    @property
    def kind(self):  # what OutputPlan's checks read: outputs in ``leaves``
        return "tree"

    @property
    def outputs(self):
        return [value for kind, value in self.leaves if kind not in ("static", "argument")]

    def target(self, arguments):
        if self.path.root[0] != "arg":
            return self.path.resolve()
        return self.path.resolve(argument_leaves(arguments))

    def ready(self, arguments):
        """Whether the list is there (a list), so the call can append after its kernels;
        otherwise the call runs eagerly, where Python raises at the user's line."""
        if self.stored_by_the_call:
            return True
        try:
            return type(self.target(arguments)) is list
        except Exception:  # noqa: BLE001 - a path that no longer reads
            return False

    def store(self, arguments, outputs):
        values = stored_values(self.leaves, outputs,
                               lambda position: argument_leaves(arguments)[position])
        value = pytree.unflatten(self.tree, values)  # new tuples and dicts, as eager makes
        getattr(self.target(arguments), self.method)(value)

    def snapshot(self, arguments):
        """A function that puts the list back as it is now (``jit(check=True)``)."""
        target = self.target(arguments)
        length = len(target)
        return lambda: target.__delitem__(slice(length, None))


def watch(context, args, kwargs, traced_leaves):
    """Remember the caller's lists and dicts (by identity) and which traced inputs stand
    for argument arrays: a list that is also an argument is read by the function as the
    trace's copy, which would not see the append."""
    found = set()

    def walk(value, depth):
        if type(value) in (list, tuple, dict) and depth < 8:
            found.add(id(value))
            for item in value.values() if type(value) is dict else value:
                walk(item, depth + 1)

    walk((args, kwargs), 0)
    context.argument_objects = found
    context.argument_tracers = {id(tracer): position
                                for position, tracer in enumerate(traced_leaves)
                                if hasattr(tracer, "ir_var")}
    context.list_appends = []
    context.appended_lists = {}
    context.appended_holders = {}  # id -> the dicts and lists on the way to those lists


def note(context, path, target, method, value):
    """Record ``target.<method>(value)`` on the outside list ``target`` found through
    ``path``; False when it cannot be replayed at every call (the caller refuses it).
    Raises ``Refused`` in a trip traced for capture (the loop unrolls: each trip's append
    is then an append of this trace)."""
    if type(target) is not list or method not in METHODS or id(target) in getattr(
            context, "argument_objects", ()):
        return False
    if method == "extend":
        if type(value) not in (list, tuple):
            return False  # (an array, a generator: eager appends its rows, or drains it)
        items = list(value)
    else:
        items = [value]
    if not all(_replayable(item) for item in items):
        return False
    if path.key in context.outside_values:
        # read before the append (h = self.hs[-1]; ...; self.hs.append(h)): its length is
        # guarded, and every call would trace again at the new length; as before, eager
        return False
    if getattr(context, "loop_depth", 0):
        raise Refused("an append to a list from outside the function")
    if getattr(context, "records_gradients", False) and any(
            loses_a_graph(context, leaf) for item in items for leaf in pytree.flatten(item)[0]):
        raise UnsupportedError(f"a value computed with gradients appended to {path}; it "
                               "would lose its graph")
    for item in items:
        context.list_appends.append((path, target, item, user_location()))
    context.appended_lists[id(target)] = target
    for holder in _holders(path):  # self.history for self.history["loss"].append(loss)
        context.appended_holders[id(holder)] = holder
    # self.X[-1] read back through this path is this call's item, no setting to guard
    count = sum(1 for _, other, _, _ in context.list_appends if other is target)
    for back in range(1, count + 1):
        context.written_paths.add(Path(path.root, path.steps + (("item", -back),)).key)
    return True


class Extended:
    """An appended value that is a captured loop's entries: the list is extended by them
    (``self.cost_.append(cost)`` at every trip: ``loop_attribute_carries``). ``items`` is
    the entries' list, or the ``loop_rows.Rows`` a call makes it of."""

    def __init__(self, items):
        self.items = items


def _method_and_value(value):
    if type(value) is Extended:
        return "extend", value.items
    return "append", value


def replace_by_rows(context, appended, rows):
    """Replace the records ``appended`` (iteration 0's appends to one list) by one extend
    of the list by ``rows``, the loop's entries from iteration 0 on."""
    records = context.list_appends
    first = next(position for position, record in enumerate(records)
                 if record is appended[0])
    kept = [record for record in records if not any(record is old for old in appended)]
    path, target, _, location = appended[0]
    kept.insert(first, (path, target, Extended(rows), location))
    records[:] = kept


def read_back(context, value):
    """``value`` as a read of it must see it: a list this call appended to (``self.X[-1]``
    after ``self.X.append(x)``) is its ``AppendedTail``; any other value is itself."""
    if id(value) not in getattr(context, "appended_lists", {}):
        return value
    items = [item for _, target, item, _ in context.list_appends if target is value]
    if any(type(item) is Extended for item in items):
        raise _unknown_part()  # (a loop's entries: their number is the trip count)
    return AppendedTail(items)


def returned_appended_list(context, result):
    """A message when ``result`` holds, inside its dicts, lists and tuples, an outside list
    this call appended to (a Keras-like ``fit`` that ends ``return self.history`` after
    ``self.history["loss"].append(loss)``): the trace returns containers made anew from
    what it holds, and it holds that list as it was before the call (its old items are no
    part of the trace), so the result would miss this call's items. None otherwise."""
    appended = getattr(context, "appended_lists", None)
    if not appended:
        return None
    seen, pending = set(), [result]
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if type(value) is list and id(value) in appended:
            return ("returns a list the function appended to (inside a dict, list or tuple "
                    "it returns); the result is made anew at every call, without what the "
                    "list held before it: it runs eagerly (return the list's new items, or "
                    "read the list after the call)")
        if type(value) is dict:
            pending.extend(value.values())
        elif type(value) in (list, tuple) or isinstance(value, tuple):
            pending.extend(value)
    return None


def _holders(path):
    """The dicts, lists and tuples ``path`` passes through on its way to the list (not
    through an argument's: those lists are refused before)."""
    holders = []
    for cut in range(len(path.steps)):
        try:
            value = Path(path.root, path.steps[:cut]).resolve()
        except (LookupError, AttributeError, TypeError):
            continue
        if type(value) in (dict, list, tuple):
            holders.append(value)
    return holders


def holder_read(context, value):
    """An error when ``value`` (read from outside) is a dict or list holding a list this
    call appended to, or a method of one (``self.history.values()``, iterating
    ``self.logs``): what the trace would read there is the list as it was before the call,
    without this call's items. None otherwise."""
    holders = getattr(context, "appended_holders", None)
    if holders and (id(value) in holders or id(getattr(value, "__self__", None)) in holders):
        return trace_error("reads a dict or list holding a list the function appended to in "
                           "this call (its items, values or length): the trace would see "
                           "the list without this call's items; it runs eagerly")
    return None


def _unknown_part():
    return trace_error("reads more of a list than the function appended to it in this call "
                       "(its length, or an item from before the call); it runs eagerly")


class AppendedTail:
    """An outside list read again after this call appended to it: what the trace knows
    of it is what this call appended, at its end (the list itself is left as it was until
    the call's effects are applied). ``tail[-k]`` gives those items; anything else (its
    length, an older item, iterating it, its methods) depends on what the list held
    before the call, which the trace does not read: a trace error, so the call runs
    eagerly."""

    def __init__(self, items):
        self._items = items

    def __getitem__(self, key):
        if type(key) is int and -len(self._items) <= key < 0:
            return self._items[key]
        raise _unknown_part()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise _unknown_part()

    def __len__(self):
        raise _unknown_part()

    def __iter__(self):
        raise _unknown_part()

    def __contains__(self, item):
        raise _unknown_part()

    def __bool__(self):
        return True  # it holds the items appended (``if self.X:``)

    def __setitem__(self, key, value):
        # self.hist[-1] = y after self.hist.append(x): the appends are replayed as recorded
        raise _changed_after_append()

    def __delitem__(self, key):
        raise _changed_after_append()


def _changed_after_append():
    return trace_error("writes or deletes an item of a list the function appended to in this "
                       "call; it runs eagerly (append the final value instead)")


def _replayable(value):
    """Arrays, numbers, plain values, and tuples, lists and dicts of them: what a compiled
    call can append again at every call."""
    flat, _ = pytree.flatten(value)
    return all(hasattr(leaf, "ir_var") or hasattr(leaf, "expr") or _plain(leaf) or
               isinstance(leaf, (np.ndarray, np.generic)) for leaf in flat)


def _plain(value):
    return value is None or isinstance(value, (str, bytes, *PYTHON_SCALARS))


def collect(context, output_atoms):
    """The appends, in program order, each array or scalar leaf of an appended value
    appended to ``output_atoms`` (an argument array as the argument itself)."""
    appends = []
    stored = [value for _, _, _, value, _ in getattr(context, "attribute_writes", {}).values()]
    for path, target, value, _ in getattr(context, "list_appends", ()):
        method, value = _method_and_value(value)
        flat, tree = pytree.flatten(value)
        leaves = []
        for leaf, argument in _appended_leaves(context, flat):
            if argument is not None:  # eager appends the caller's array itself
                leaves.append(("argument", argument))
            elif _plain(leaf) and not hasattr(leaf, "ir_var"):
                leaves.append(("static", leaf))
            else:
                leaves.append(output_leaf(context, leaf, output_atoms))
        appends.append(ListAppend(path, method, tree, tuple(leaves),
                                  stored_by_the_call=any(_holds(written, target)
                                                         for written in stored)))
    return appends


def _appended_leaves(context, flat):
    """Each leaf of an appended value as the trace has it now (a NumPy buffer written
    after the append: its traced copy), with the argument leaf position it is, or None."""
    arguments = getattr(context, "argument_tracers", {})
    for leaf in flat:
        if type(leaf) is np.ndarray:
            leaf = context.replaced.get(id(leaf), leaf)
        yield leaf, arguments.get(id(leaf))


def compute_values(context):
    """Compute now every value ``apply`` will append (see ``argument_writes.compute_values``)."""
    for _, _, value, _ in getattr(context, "list_appends", ()):
        for leaf in pytree.flatten(_method_and_value(value)[1])[0]:
            if hasattr(leaf, "ir_var"):
                force(leaf.raw_value)


def apply(context, leaves):
    """The traced call's appends, with their real values (``leaves``: the call's argument
    leaves, appended themselves where the function appended an argument array)."""
    callers = {id(leaf) for leaf in leaves if type(leaf) is np.ndarray}
    for _, target, value, _ in getattr(context, "list_appends", ()):
        method, value = _method_and_value(value)
        flat, tree = pytree.flatten(value)
        concrete = []
        for leaf, argument in _appended_leaves(context, flat):
            if argument is not None:
                concrete.append(leaves[argument])
            elif hasattr(leaf, "ir_var"):
                concrete.append(_fresh(leaf.value, callers))
            elif hasattr(leaf, "expr"):
                concrete.append(int(leaf.value))
            else:  # (a NumPy array the function made: that object, as eager appends it)
                concrete.append(leaf)
        getattr(_stored_anew(context, target), method)(pytree.unflatten(tree, concrete))
    context.list_appends = []


def _stored_anew(context, target):
    """The list now where this call stored ``target`` (``self.errors = []``, then
    ``self.errors.append(mse)`` in ML-From-Scratch's regression fit; ``self.history =
    {"loss": []}``): the attribute write, applied first, stored a new list built from
    ``target``'s contents, which the appends had not reached yet. The appends go there, as
    a compiled call's do through the path."""
    for _, owner, name, value, _ in getattr(context, "attribute_writes", {}).values():
        stored = owner.get(name.key) if type(name) is Item and type(owner) is dict else (
            None if type(name) is Item else getattr(owner, name, None))  # (a list's item)
        found = _counterpart(value, stored, target)
        if found is not None:
            return found
    return target


def _counterpart(written, stored, target, depth=0):
    """What ``stored`` (a container rebuilt from ``written``) holds where ``written`` holds
    ``target``; None where ``written`` does not hold it."""
    if written is target:
        return stored if type(stored) is list else None
    if depth > 3 or type(written) is not type(stored) or type(written) not in (
            dict, list, tuple):
        return None
    if type(written) is dict:
        pairs = ((item, stored.get(key)) for key, item in written.items())
    else:
        pairs = zip(written, stored)
    for item, counterpart in pairs:
        found = _counterpart(item, counterpart, target, depth + 1)
        if found is not None:
            return found
    return None


def _holds(value, target, depth=0):
    """Does ``value`` (an attribute write's) hold the list ``target``?"""
    if value is target:
        return True
    if depth > 3 or type(value) not in (dict, list, tuple):
        return False
    items = value.values() if type(value) is dict else value
    return any(_holds(item, target, depth + 1) for item in items)


def _fresh(value, callers):
    """``value``, or a copy when it views an array of the trace's own: a view of the
    caller's array (``x[1:]``; ``callers``: their ids) stays one, as eager appends it, and
    so does the compiled call's (the wrapper's NumPy view of its input)."""
    if type(value) is not np.ndarray or value.base is None:
        return value
    base = value
    while base.base is not None and id(base) not in callers:
        base = base.base
    return value if id(base) in callers else value.copy()
