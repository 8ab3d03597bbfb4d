"""Which of the objects a writing trace reaches are one object, checked at every call.

A trace that writes state (``self.a.fc["X"] = x``, ``self.c1.h = h``) and reads state
through another route (``self.b.fc["X"]``, ``self.c2.h``) bakes in whether the two routes
reach one object: if they did, the read is the value just written; if not, an input
read at entry, before the write. Eager NumPy follows the objects as they are at each
call, so a model whose layers are tied after the trace (``net.b = net.a``), or untied,
must not run the trace's program. ``SharedObjects`` lists the paths of the dicts, lists
and objects the trace read or wrote through (after the dicts and lists of the arguments,
which a path may reach too: ``f(model, model.cache)``), with which of them were one
object when traced; the entry guard compares that partition (``add_check``: another
partition is another variant, traced for it).

    >>> from tracejit.tracer.implicit import Path
    >>> shared = SharedObjects((Path(("arg", 0)), Path(("arg", 1))), (0, 0))
    >>> shared.describe()[0]  # f(layer, layer) traced: the two arguments are one object
    'argument 1 is argument 0'
"""

from __future__ import annotations

from dataclasses import dataclass

from .implicit import Path, steps_expression
from .object_paths import holds_attributes

# Resolving a path that no longer leads anywhere: the other entry guards report it.
_UNREADABLE = (KeyError, AttributeError, IndexError, ValueError, TypeError)


@dataclass(frozen=True)
class SharedObjects:
    """``containers``: where each dict and list of the arguments is (keys from the
    ``(args, kwargs)`` pair, in ``argument_containers`` order); ``paths``
    (``tracer.implicit.Path``); ``labels``: per container, then per path, the position of
    the first of them that was the same object when traced."""

    paths: tuple
    labels: tuple
    containers: tuple = ()

    def name(self, position):
        """What the ``position``-th labelled object is, in words."""
        if position < len(self.containers):
            return _where_text(self.containers[position])
        return str(self.paths[position - len(self.containers)])

    def describe(self):
        """Readable lines: which paths reach one object, and how many are distinct."""
        lines = [f"{self.name(position)} is {self.name(label)}"
                 for position, label in enumerate(self.labels) if label != position]
        lines.append(f"{len(set(self.labels))} distinct object(s) among the dicts, lists "
                     f"and objects of the arguments and {len(self.paths)} path(s) the call "
                     "writes or reads through")
        return lines

    def mismatch(self, leaves):
        """Why a call with argument ``leaves`` does not hold, as far as its paths tell
        (for ``explain``, which has no dicts or lists of the call to compare)."""
        objects = []
        try:
            for path in self.paths:
                objects.append(path.resolve(leaves))
        except _UNREADABLE:
            return "a path to a dict, list or object the call writes can no longer be read"
        then = partition(self.labels[len(self.containers):], key=int)  # the paths alone
        now = partition(objects)
        for position, (first_now, first_then) in enumerate(zip(now, then)):
            if first_now != position and first_now != first_then:
                return (f"{self.paths[position]} is now {self.paths[first_now]} (not when "
                        "traced)")
            if first_now == position and first_then != position:
                return f"{self.paths[position]} is no longer {self.paths[first_then]}"
        return ("a dict or list of the arguments is now, or is no longer, one the function "
                "reaches through another path")


def note_same(context, first, second):
    """The trace found one object (an array, a layer) at two paths and reads it through
    ``first`` alone (one input, one path to its attributes): later calls must find one
    object at both, or their reads of ``second`` would see ``first``'s (tied weights
    untied, ``f([layer, layer])`` traced, then ``f([layer, other])``).

    >>> from types import SimpleNamespace
    >>> context = SimpleNamespace(outside_values={})
    >>> note_same(context, Path(("arg", 0)), Path(("arg", 1)))
    >>> [line for _, _, shared in context.outside_values.values() for line in shared.describe()][0]
    'argument 1 is argument 0'
    """
    if first.key != second.key:
        context.outside_values.setdefault(f"same:{first.key}|{second.key}", (
            second, "shared", SharedObjects((first, second), (0, 0))))


def partition(objects, key=id):
    """Per object, the position of the first one that is it (whose ``key`` is its own).

    >>> a, b = [], []
    >>> partition([a, b, a, b, []]), partition([3, 5, 3], key=int)
    ((0, 1, 0, 1, 4), (0, 1, 0))
    """
    first = {}
    return tuple(first.setdefault(key(value), position) for position, value in enumerate(objects))


def argument_containers(arguments):
    """``(where, container)`` per dict and list in ``arguments`` (nested in tuples, dicts
    and lists, as ``pytree`` flattens them), ``where`` the keys that reach it, in an order
    their structure fixes.

    >>> d = {"x": 1}
    >>> [where for where, _ in argument_containers(((d, [d, 2]), {}))]
    [(0, 0), (0, 1), (0, 1, 0), (1,)]
    """
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            found.append((where, node))
            for key, item in node.items():
                walk(item, (*where, key))
        elif isinstance(node, (list, tuple)):
            if isinstance(node, list):
                found.append((where, node))
            for index, item in enumerate(node):
                walk(item, (*where, index))

    walk(arguments, ())
    return found


def _where_text(where):
    head = "args" if where[0] == 0 else "kwargs"
    return head + "".join(f"[{key!r}]" for key in where[1:])


def add_check(source, shared, fail, arguments=("args", "kwargs"), prefix="shared"):
    """Add to ``source`` (a ``generated_code.Source``) the statements that run ``fail``
    (text: ``return None``) unless the paths reach one object exactly where they did when
    traced (``shared.labels``): they read each container and path
    once (a path from the longest earlier one it extends) into locals named ``prefix``
    and a number, and compare identities. ``arguments``: the text of the call's ``args``
    and ``kwargs``; the leaves are the local ``leaves``."""
    lines, names = [], []
    for number, where in enumerate(shared.containers):
        names.append(f"{prefix}{number}")
        if type(where[0]) is int and where[0] in (0, 1):
            root = arguments[where[0]]
        else:  # (not from argument_containers: read as the tuple of the two would be)
            root = f"({arguments[0]}, {arguments[1]})[{source.constant(where[0])}]"
        lines.append(f"{names[-1]} = " + steps_expression(
            root, [("item", key) for key in where[1:]], source.constant))
    known = {}  # path key -> variable
    for path in shared.paths:
        name = f"{prefix}{len(names)}"
        for end in range(len(path.steps) - 1, -1, -1):  # the longest known prefix
            start = Path(path.root, path.steps[:end]).key
            if start in known:
                text = steps_expression(known[start], path.steps[end:], source.constant)
                break
        else:
            text = path.expression(source.constant)
        lines.append(f"{name} = {text}")
        known[path.key] = name
        names.append(name)
    same = [f"{names[position]} is {names[label]}"
            for position, label in enumerate(shared.labels) if label != position]
    firsts = [names[position] for position, label in enumerate(shared.labels)
              if label == position]
    same.append(f"len({{{', '.join(f'id({name})' for name in firsts)}}}) == {len(firsts)}")
    source.add("try:")
    for line in lines or ["pass"]:
        source.add(line, depth=2)
    source.add(f"except {source.constant(_UNREADABLE, 'U')}: {fail}")
    source.add(f"if not ({' and '.join(same)}): {fail}")


def note(context, arguments, leaves):
    """Record, in ``context.outside_values``, which dicts, lists and objects the trace
    reached through several paths, when it writes any (nothing otherwise: reads through
    two routes see one value either way). ``arguments``: the call's ``(args, kwargs)``,
    ``leaves`` their flattened leaves."""
    # (path, whether the object at the path itself is a container the call writes or reads)
    routes = [(path, True) for path, _, _, _, _ in
              getattr(context, "attribute_writes", {}).values()]
    routes += [(path, True) for path, _, _, _ in getattr(context, "list_appends", ())]
    if not routes and not getattr(context, "argument_writes", None):
        return
    for path, kind, _ in list(context.outside_values.values()):
        # a dict's keys or a list's length: that container; a setting, a class, a
        # method: what holds it
        routes.append((path, kind in ("keys", "len")))
    routes += [(implicit.path, False) for implicit in context.implicit_used.values()]
    written = context.written_paths
    paths, objects = {}, []
    for path, itself in routes:
        for end in range(len(path.steps) + itself):
            prefix = Path(path.root, path.steps[:end])
            if prefix.key in paths or prefix.key in written:
                continue
            if any(Path(path.root, path.steps[:step]).key in written for step in range(end)):
                break  # through a value the call wrote: not the caller's object
            try:
                value = prefix.resolve(leaves)
            except _UNREADABLE:
                break
            if type(value) in (dict, list, set) or holds_attributes(value):
                paths[prefix.key] = prefix
                objects.append(value)
    containers = argument_containers(arguments)
    if paths and len(paths) + len(containers) > 1:
        shared = SharedObjects(tuple(paths.values()), partition(
            [container for _, container in containers] + objects),
            tuple(where for where, _ in containers))
        context.outside_values["shared objects"] = (shared.paths[0], "shared", shared)
