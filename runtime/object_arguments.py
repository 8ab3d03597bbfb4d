"""Object arguments guarded by their class and by what the trace read through them.

A jitted method (``self`` is an argument) or a function taking a layer or an optimizer
reads the object's attributes through paths rooted at the argument (``argument 0.W``,
``argument 0.act``): arrays there are inputs read again at every call, settings are
entry-guarded by value, nested objects by their class at their path, and the object's
identity where the trace observed it (``is``, ``==``, a dict key, ``repr``:
``tracer.object_paths.ObjectPaths.pin_identity`` adds an ``is`` guard at the argument's
path). So the argument itself needs no more than its class: every instance with the same
structure takes one variant, as torch.compile guards a module by its class and the
attributes its trace read. Writes the call makes (``self.cache = x``) are stored through
the same paths, into the call's object.

An object the trace handed back (``return self``, a static output or a written value
holding it) stays guarded by identity: the variant returns that very object.

>>> class Dense:
...     pass
>>> layer = Dense()
>>> classed(layer, held=()), classed(layer, held=[layer])
(True, False)
"""

from __future__ import annotations

from tracejit.tracer.object_paths import guarded_by_class


def classed(value, held):
    """Whether an argument leaf ``value`` is entry-guarded by its class
    (``tracer.object_paths.guarded_by_class``), not by identity. ``held``: the values the
    trace's result and static writes hold as they are (``return self``)."""
    return guarded_by_class(value) and not any(item is value for item in held)


def class_address(value):
    """Where the class of an object argument is imported from (``{"module", "qualname"}``),
    what a disk cache key files the call under; None for a value no variant guards by its
    class, or a class no import path finds (a class made in a function)."""
    if not classed(value, held=()):
        return None
    from .serialize import import_address  # (serialize imports guards, which imports this)

    return import_address(type(value))
