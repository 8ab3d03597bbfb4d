"""Values computed only when something reads them.

A captured loop traces three of its trips; the rest of the first call's trips would run
through the body's NumPy reference (``ops.control.run_body``) at ~0.1 ms per trip, so the
first call grew with the trip count. Instead the loop's results are ``Pending``: the trace
goes on recording what uses them (``TracingContext.process`` defers an equation whose
operand is pending), and nobody runs the remaining trips unless a value is read — a
guard on data, ``float(loss)``, a print, a second loop's first trip. When nothing reads
them, the runtime takes the first call's results from the compiled program it builds
anyway (``runtime.jit``), so the first call costs one trace, one compile and one run.

    >>> p = Pending(lambda: 2 + 3)
    >>> p
    <pending>
    >>> force(p), force(7)
    (5, 7)
    >>> later = deferred(lambda a, b: a * b, [p, 4])
    >>> force(later)
    20
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from .ir import Effect, Eqn

_scope = threading.local()


class Pending:
    """A value computed by ``thunk`` the first time ``force`` is asked for it."""

    __slots__ = ("thunk", "result", "like")

    def __init__(self, thunk, like=None):
        self.thunk = thunk
        self.result = None
        self.like = like  # a value of the type it will have (a NumPy scalar, a float), or None

    def force(self):
        if self.thunk is not None:
            self.result = self.thunk()
            self.thunk = None  # drop what it read: the inputs may be large
        return self.result

    def __repr__(self):
        return "<pending>" if self.thunk is not None else f"<pending: {self.result!r}>"


def is_pending(value):
    return type(value) is Pending and value.thunk is not None


def known_kind(value):
    """A value of the kind ``value`` is or will be, without computing it: itself, a forced
    ``Pending``'s result, or a pending one's ``like`` (None when unknown)."""
    if type(value) is not Pending:
        return value
    return value.like if value.thunk is not None else value.result


def force(value):
    """``value`` itself, or what a ``Pending`` stands for."""
    return value.force() if type(value) is Pending else value


def deferred(function, values, traced=None):
    """``Pending(function(*values))``, reading ``values`` as they are now. An array that is
    not a traced value's (``traced[i]`` false: a NumPy constant, a global) is copied, since
    the user's code may write into that buffer before anything forces the result; traced
    values are never written in place."""
    traced = traced or [False] * len(values)
    snapshot = [np.array(value) if isinstance(value, np.ndarray) and not owned else value
                for value, owned in zip(values, traced)]
    return Pending(lambda: function(*[force(value) for value in snapshot]))


@contextlib.contextmanager
def recording_only():
    """Equations bound in this scope are recorded, their values computed only if read:
    ``x[:, t] = h`` records a mask and a scatter over the whole buffer that nobody reads
    (``indexing.setitem`` computes the result by NumPy's own assignment instead).

    >>> with recording_only():
    ...     recording_lazily()
    True
    """
    previous = getattr(_scope, "lazy", False)
    _scope.lazy = True
    try:
        yield
    finally:
        _scope.lazy = previous


def recording_lazily():
    return getattr(_scope, "lazy", False)


def has_effects(graph):
    """Whether running ``graph`` prints, at any depth: the trace printed already, so the
    first call's result cannot come from a run of the program."""
    return any(isinstance(item, Effect) or (isinstance(item, Eqn) and item.prim.name == "loop"
                                            and has_effects(item.params_dict["body"]))
               for item in graph.body)
