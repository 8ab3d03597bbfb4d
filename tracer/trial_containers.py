"""The lists, dicts and sets that objects made in the call hold, watched while a loop's
trial trips run (``loops._capture_trips``).

A counter object rebound in a loop, whose method appends to a list it keeps::

    c = Counter()
    for t in range(x.shape[0]):
        c = c.tick(x[t].sum())  # self.n += 1; self.hist.append(v)

The trial trips' appends land in ``c.hist`` as Python runs them, as their attribute writes
do (``attribute_writes.set_local`` journals those): the loop would return two trial
entries more than eager's one per trip. So do a closure's (``def note(v):
hist.append(v)`` called in the body), whose list is no name the loop carries. A capture
whose trials changed such a container is refused, and its contents are put back before
the trips run unrolled.

>>> class Counter:
...     def __init__(self):
...         self.hist = []
>>> counter = Counter()
>>> held = holding({id(counter): counter})
>>> counter.hist.append(1.0)
>>> changed(held) is counter.hist
True
>>> put_back(held)
>>> counter.hist
[]
"""

from __future__ import annotations

KINDS = (list, dict, set)


def holding(created_objects, others=()):
    """``[(container, copy)]`` of the containers the objects ``created_objects`` (id ->
    object) hold as attributes, and of ``others`` (the function's local lists a closure
    may fill: ``def note(v): hist.append(v)``)."""
    held = [(value, value.copy()) for value in others]
    for owner in list(created_objects.values()):
        for value in list(getattr(owner, "__dict__", {}).values()):
            if type(value) in KINDS:
                held.append((value, value.copy()))
    return held


def changed(held):
    """The first container whose contents are no longer its copy's (items compared by
    identity), or None."""
    for container, before in held:
        if len(container) != len(before):
            return container
        if type(container) is dict:
            if any(key not in before or before[key] is not value
                   for key, value in container.items()):
                return container
        elif type(container) is list:
            if any(item is not old for item, old in zip(container, before)):
                return container
        elif container != before:
            return container
    return None


def put_back(held):
    """Give every container its copy's contents again (the same container objects)."""
    for container, before in held:
        if type(container) is list:
            container[:] = before
        else:
            container.clear()
            container.update(before)
