"""Objects the traced function makes by calling the user's class: ``__init__`` runs
rewritten, as any other method of the user's does.

``Tensor(arg.forward(ctx, ...))`` in early tinygrad, ``Value(data, (self, other))`` in
micrograd: an instance made during the trace, whose ``__init__`` reads what it is given::

    class Tensor:
        def __init__(self, data):
            if type(data) != np.ndarray:      # a traced array is an ndarray eagerly
                raise TypeError(...)
            self.data = data

Python's ``type.__call__`` runs ``__init__`` as written, where ``type(data)`` of a traced
array is tracejit's ``Tracer`` and ``isinstance(data, np.ndarray)`` is False: the branch
eager takes is not the trace's (a ``type(data).__name__`` kept on the object was
'Tracer' in compiled results). ``construct`` makes the instance as ``type.__call__`` does
(``object.__new__``, then ``__init__``), with ``__init__`` the front end's rewritten
method, so its type queries, loops and writes meet the hooks; the instance is noted as
made in this call first, so its ``__init__``'s ``self.data = data`` is a local write.

Only plain classes take this path: a metaclass with its own ``__call__``, a class with
its own ``__new__`` (namedtuples, builtin subclasses, exceptions) or without a user
``__init__`` is called as Python calls it.
"""

from __future__ import annotations

from . import attribute_writes
from .rewritten_code import is_user_function


def plain_user_class(function):
    """Whether calling ``function`` makes an instance by ``object.__new__`` and then runs
    a user ``__init__``: ``type.__call__`` with nothing in between."""
    return isinstance(function, type) and (
        type(function).__call__ is type.__call__) and (
        function.__new__ is object.__new__) and is_user_function(function.__init__)


def constructor(context, cls, init):
    """A callable that makes a ``cls`` as ``cls(*args, **kwargs)`` does, with ``init`` (the
    rewritten ``cls.__init__``) in place of the method as written."""

    def construct(*args, **kwargs):
        made = object.__new__(cls)
        attribute_writes.note_created(context, made)
        returned = init(made, *args, **kwargs)
        if returned is not None:
            raise TypeError(
                f"__init__() should return None, not '{type(returned).__name__}'")
        return made

    return construct
