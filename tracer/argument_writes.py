"""Item writes into a dict or list argument: ``config['t'] += 1``, ``config['velocity'] = v``.

Every course optimizer keeps its state in the config dict the caller passes (momentum's
velocity, Adam's ``m``, ``v`` and ``t``). NumPy code writes into that dict; a compiled
call must leave the caller's dict as the eager call would. Under tracing the function
writes into the traced copy of the dict (so it reads its own writes), ``note`` records the
last value written at each key, and ``collect`` makes each such value an output of the
graph (a value that is not an array or scalar is kept as it is: ``config['mode'] =
'train'``). After a compiled call the runtime stores those outputs into the caller's dict
(``runtime.variants.OutputPlan``); after the traced call ``apply`` does. An item of a list
argument is written the same way (``velocities[i] = v``); a write that would change a
list's length, or of a value that cannot be stored again at every call (a new list), is
refused (the call runs eagerly).

    >>> import numpy as np, tracejit as tj
    >>> def momentum(w, dw, config):
    ...     v = config["momentum"] * config.get("velocity", np.zeros_like(w)) - dw
    ...     config["velocity"] = v
    ...     return w + config["learning_rate"] * v
    >>> f = tj.jit(momentum, cache="memory")
    >>> config = {"learning_rate": 0.5, "momentum": 0.9}
    >>> f(np.ones(2), np.ones(2), config), config["velocity"]
    (array([0.5, 0.5]), array([-1., -1.]))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import pytree
from .abstract import PYTHON_SCALARS
from .pending import force

# What a key may be: its value is part of the call's guarded structure as a dict key is.
_KEYS = (str, int, bool, type(None))


@dataclass(frozen=True)
class ArgumentWrite:
    """``arguments[where][key] = value``: ``where`` is ``("args", position, *keys)`` or
    ``("kwargs", name, *keys)`` (a dict nested in an argument); ``kind`` is "array",
    "scalar" (a NumPy scalar) or "value" (a Python number) with ``value`` a program
    output's index, or "static" with the value itself."""

    where: tuple
    key: object
    kind: str
    value: object

    def store(self, arguments, outputs):
        container = _container(arguments, self.where)
        if self.kind == "static":
            container[self.key] = self.value
            return
        item = outputs[self.value]
        if self.kind == "scalar" and not hasattr(item, "requires_grad"):  # (a Tensor stays)
            item = np.asarray(item)[()]
        elif self.kind == "value":
            item = item.item() if isinstance(item, (np.ndarray, np.generic)) else item
        container[self.key] = item


@dataclass(frozen=True)
class OutsideArrayWrite:
    """An array read from outside the arguments (``self.W``, a global, a closure's list of
    parameters) updated in place (``p -= lr * g``, ``np.add(W, 1, out=W)``): after the call
    the program's output ``value`` is copied into it, found again through ``path`` (a
    ``tracer.implicit.Path``) as the entry guard found it, so it stays the same array."""

    path: object
    value: int
    kind: str = "array"

    def store(self, arguments, outputs):
        np.copyto(self.target(arguments), outputs[self.value])

    def snapshot(self, arguments):
        """A function that puts the array back as it is now (``jit(check=True)`` reruns the
        call eagerly from the state before the compiled call)."""
        target = self.target(arguments)
        saved = target.copy()
        return lambda: np.copyto(target, saved)

    def target(self, arguments):
        return resolve(self.path, arguments)


def resolve(path, arguments):
    """What ``path`` (a ``tracer.implicit.Path``) reads in a call with ``arguments``
    (``(args, kwargs)``; flattened only when the path starts at an argument)."""
    return path.resolve(argument_leaves(arguments) if path.root[0] == "arg" else ())


class CallArguments(tuple):
    """``(args, kwargs)`` of one call, flattened at most once (``leaves``): each of the
    call's writes into an object or list found through an argument reads them
    (``runtime.variants.OutputPlan.result`` makes one per call that writes)."""

    @functools.cached_property
    def leaves(self):
        args, kwargs = self
        if not kwargs and not any(isinstance(arg, (list, tuple, dict)) for arg in args):
            return args  # flat: each argument is a leaf (model, x), as entry guards read it
        return pytree.flatten(tuple(self))[0]


def argument_leaves(arguments):
    """The leaves of ``arguments`` (``(args, kwargs)`` or ``CallArguments``)."""
    if type(arguments) is CallArguments:
        return arguments.leaves
    return pytree.flatten(arguments)[0]


def shared_memory(context, leaves):
    """A message when the trace wrote into an array (an argument or one read from outside)
    while an argument and an array read from outside share memory (``step(net, [net.W])``
    with ``net.W`` also read as ``self.W``): the trace holds them as separate inputs, so
    one would not see the write through the other, as NumPy's does. None otherwise."""
    if not context.mutated and not context.outside_mutations:
        return None
    arguments = [leaf for leaf in leaves if type(leaf) is np.ndarray]
    outside = [entry.value for entry in context.implicit_used.values()
               if type(entry.value) is np.ndarray]
    for position, first in enumerate(outside):
        others = arguments + outside[position + 1:]
        if any(np.may_share_memory(first, second) for second in others):
            return ("an array read from outside the arguments (an attribute, a global) shares "
                    "memory with an argument or another such array, and the function writes "
                    "into arrays: compiled code would read them apart")
    return None


def shared_containers(context, args, kwargs):
    """A message when the trace wrote an item of a dict or list (an argument's, or one read
    from outside) while an argument's dict or list is also read from outside the arguments
    (``jit(opt.step)(opt.velocities, g)`` writing ``v[0] = ...`` and reading
    ``self.velocities[0]``), or passed twice (``f(config, config)``): the trace holds the two
    apart, so one would not see the other's writes, as NumPy's one object does. None
    otherwise."""
    items_written = getattr(context, "argument_writes", None) or any(
        not isinstance(name, str) for (_, name) in getattr(context, "attribute_writes", {}))
    if not items_written:
        return None
    outside, seen = context.outside_objects, set()
    for where, _ in getattr(context, "argument_containers", {}).values():
        original = _container((args, kwargs), where)
        if type(original) not in (dict, list):
            continue
        if id(original) in seen:  # f(config, config): one dict the trace copied twice
            return ("one dict or list is passed twice in the arguments, and the function "
                    "writes items of dicts or lists: compiled code would hold them apart")
        seen.add(id(original))
        if outside.get(id(original), (None, None))[1] is original:
            return ("a dict or list passed as an argument is also read from outside the "
                    "arguments (an attribute, a global), and the function writes items of "
                    "dicts or lists: compiled code would hold them apart")
    return None


def note_outside_mutation(context, tracer):
    """Record an in-place write into the traced input of an outside array; False when
    ``tracer`` is not one. Only a NumPy array can be written back (a Tensor read from
    outside is refused by the caller)."""
    for key, candidate in context.implicit_tracers.items():
        if candidate is tracer and type(context.implicit_used[key].value) is np.ndarray:
            context.outside_mutations[key] = tracer
            return True
    return False


def watch(context, traced_args, traced_kwargs):
    """Remember where each traced container of the arguments is (the traced arguments are
    copies: a write into one must be recorded, or it never reaches the caller)."""
    context.argument_containers = {}
    for position, value in enumerate(traced_args):
        _watch(context.argument_containers, value, ("args", position))
    for name, value in traced_kwargs.items():
        _watch(context.argument_containers, value, ("kwargs", name))
    context.argument_writes = {}
    # What each dict and list holds now: a change no recorded write explains is refused
    context.argument_contents = {key: _contents(container)
                                 for key, (_, container) in context.argument_containers.items()
                                 if type(container) in (dict, list)}


def _contents(container):
    """What a container holds, by identity (an array updated in place stays itself)."""
    if type(container) is dict:
        return [(key, id(value)) for key, value in container.items()]
    return [id(value) for value in container]


def unfollowed_change(context):
    """A change to an argument's dict or list that no recorded write explains (a function
    without readable source appending to a list, or writing a dict, runs unrewritten: the
    trace cannot see it and compiled calls would skip it), or None."""
    written = {(where, key) for where, key in getattr(context, "argument_writes", {})}
    for container_id, before in getattr(context, "argument_contents", {}).items():
        where, container = context.argument_containers[container_id]
        after = _contents(container)
        if after == before:
            continue
        if type(container) is dict:
            changed = {key for key, _ in before} ^ {key for key, _ in after}
            changed |= {key for (key, ident) in after if (key, ident) not in before}
            if all((where, key) in written for key in changed):
                continue
        elif len(after) == len(before) and all(
                (where, position) in written for position, (old, new) in enumerate(
                    zip(before, after)) if old != new):
            continue
        return f"a write into an argument's {type(container).__name__}"
    return None


def _watch(containers, value, where):
    if type(value) is dict:
        items = value.items()
    elif type(value) in (list, tuple):
        items = enumerate(value)
    else:
        return
    containers[id(value)] = (where, value)
    for key, item in items:
        _watch(containers, item, (*where, key))


def is_argument_container(context, container):
    return id(container) in getattr(context, "argument_containers", {})


def note(context, container, key, value):
    """Record ``container[key] = value`` if ``container`` is a dict argument and ``key`` a
    plain key, or a list argument and ``key`` a position in it (deepnet's momentum update,
    ``v[i] = mu * v[i] + lr * grad[i]`` over the caller's list of velocities: the list's
    length is part of the call's structure); False when it is not (the caller refuses the
    write)."""
    where, known = getattr(context, "argument_containers", {}).get(id(container), (None, None))
    if type(known) is list and type(key) is int and -len(known) <= key < len(known):
        key %= len(known)  # v[-1] and v[2] of three are one position
    elif type(known) is not dict or not isinstance(key, _KEYS):
        return False
    if not _writable(value):
        return False
    context.argument_writes.pop((where, key), None)  # the last write, in write order
    context.argument_writes[(where, key)] = value
    return True


def _writable(value):
    """An array, a number or an immutable plain value: the compiled call can store it
    again at every call (a list would be one shared object, where eager makes a new one)."""
    return (hasattr(value, "ir_var") or hasattr(value, "expr") or value is None
            or isinstance(value, (np.ndarray, np.generic, str, bytes, *PYTHON_SCALARS)))


def collect(context, output_atoms, is_leaf):
    """The writes (into argument dicts, then into outside arrays), each array or scalar
    value appended to ``output_atoms``."""
    writes = []
    for (where, key), value in getattr(context, "argument_writes", {}).items():
        if not is_leaf(value):
            writes.append(ArgumentWrite(where, key, "static", value))
            continue
        atom, concrete, _ = context.atom(value)
        concrete = getattr(value, "value", concrete)
        kind = ("scalar" if isinstance(concrete, np.generic) else
                "value" if type(concrete) in PYTHON_SCALARS else "array")
        writes.append(ArgumentWrite(where, key, kind, len(output_atoms)))
        output_atoms.append(atom)
    for key, tracer in getattr(context, "outside_mutations", {}).items():
        writes.append(OutsideArrayWrite(context.implicit_used[key].path, len(output_atoms)))
        output_atoms.append(tracer.ir_var)
    return writes


def outside_aliases(context, out_leaves, writes):
    """``{result leaf index: index in writes}`` for results that are an outside array the
    call updated in place (``self.W -= lr * dW; return self.W``): NumPy returns that array
    itself, so a later write into the result reaches ``self.W``."""
    paths = {id(tracer): context.implicit_used[key].path
             for key, tracer in getattr(context, "outside_mutations", {}).items()}
    aliases = {}
    for index, leaf in enumerate(out_leaves):
        path = paths.get(id(leaf))
        if path is not None:
            aliases[index] = next(number for number, write in enumerate(writes)
                                  if isinstance(write, OutsideArrayWrite) and write.path is path)
    return aliases


def aliased_outside_arrays(context, out_leaves):
    """``{result leaf index: the outside array}`` for the results ``outside_aliases`` finds,
    for the traced call: the array the trace read, updated in place by ``apply``. (Not
    found again through its path: the trace may have written something else there since,
    ``old = self.m["a"]; self.m["a"] = old + g; old += 1; return old``.)"""
    arrays = {id(tracer): context.implicit_used[key].value
              for key, tracer in getattr(context, "outside_mutations", {}).items()}
    return {index: arrays[id(leaf)] for index, leaf in enumerate(out_leaves)
            if id(leaf) in arrays}


def written_value(context, value):
    """``value``, or its traced copy when it is a NumPy buffer the trace wrote into after
    storing it (``w = np.zeros(n); state["w"] = w; w -= lr * dw``: the write went to the
    copy), as ``context.atom`` reads it for the compiled calls' outputs."""
    if type(value) is np.ndarray:
        return getattr(context, "replaced", {}).get(id(value), value)
    return value


def compute_values(context):
    """Compute now every value ``apply`` will store, so that none of them reads an array
    the call's write-back has changed already (a captured loop's remaining trips run when
    first read)."""
    for value in getattr(context, "argument_writes", {}).values():
        value = written_value(context, value)
        if hasattr(value, "ir_var"):
            force(value.raw_value)
    for tracer in getattr(context, "outside_mutations", {}).values():
        force(tracer.raw_value)


def apply(context, args, kwargs):
    """The traced call's writes into the caller's dicts and outside arrays, with their real
    values."""
    for (where, key), value in getattr(context, "argument_writes", {}).items():
        value = written_value(context, value)
        if hasattr(value, "ir_var"):
            value = value.value
        elif hasattr(value, "expr"):  # a SymInt: the int it is in this call
            value = int(value.value)
        _container((args, kwargs), where)[key] = value
    for key, tracer in getattr(context, "outside_mutations", {}).items():
        np.copyto(context.implicit_used[key].value, tracer.value)


def _container(arguments, where):
    """``args[i][k1][k2]...`` for ``where`` = ``("args", i, k1, k2, ...)`` (or kwargs)."""
    args, kwargs = arguments
    container = args if where[0] == "args" else kwargs
    for key in where[1:]:
        container = container[key]
    return container


def returned_containers(context, result, depth=3):
    """``[(place in result, where)]`` for each dict, list or tuple the function returns
    that is one of its arguments' (``next_w, config = adam(w, dw, config)``, ``return
    grads``): NumPy returns the caller's own object, so the call must too (``put_back``)."""
    found = []

    def walk(value, place):
        known = getattr(context, "argument_containers", {}).get(id(value))
        if known is not None and type(value) in (dict, list, tuple) and known[1] is value:
            found.append((place, known[0]))
            return
        if len(place) >= depth:
            return
        if type(value) in (tuple, list) or (isinstance(value, tuple) and hasattr(value,
                                                                                  "_fields")):
            for index, item in enumerate(value):
                walk(item, (*place, index))
        elif type(value) is dict:
            for key, item in value.items():
                if isinstance(key, _KEYS):
                    walk(item, (*place, key))

    walk(result, ())
    return found


def put_back(result, returned, arguments):
    """``result`` with the containers ``returned_containers`` found replaced by the
    caller's own (``arguments`` is ``(args, kwargs)``)."""
    for place, where in returned:
        result = _replaced(result, place, _container(arguments, where))
    return result


def _replaced(value, place, new):
    if not place:
        return new
    key, rest = place[0], place[1:]
    if isinstance(value, tuple):
        items = list(value)
        items[key] = _replaced(items[key], rest, new)
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    value[key] = _replaced(value[key], rest, new)
    return value

