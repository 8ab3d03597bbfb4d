"""Errors tracejit raises on purpose. Each names what was wrong and what to do about it."""

from __future__ import annotations


class TracejitError(Exception):
    """Base class: every error tracejit raises deliberately derives from it."""


class UnsupportedError(TracejitError, TypeError):
    """A NumPy function, ufunc method or argument that tracejit has no rule for."""


class UnsupportedIndexError(UnsupportedError, IndexError):
    """Indexing NumPy does and tracejit does not reproduce (an assignment through indices
    that repeat a position): an ``IndexError`` too, as NumPy's indexing errors are."""


class NotReversible(UnsupportedError):
    """Reverse mode cannot run through a captured loop (its backward differs by trip): the
    runtime traces the call again with the loops unrolled, each trip differentiated apart."""


class TraceSignal(Exception):
    """Raised inside a trace to stop or restart it (a loop that cannot be captured, a
    number attribute to read as a run-time input): never the model's error, so a
    handler in the model must not swallow it (``Hooks.caught`` sends it on up)."""


class TraceError(TracejitError):
    """A function cannot be traced; the message starts with the user's ``file:line``."""


class TraceTooLarge(TraceError):
    """The trace passed ``tracing.EQUATION_LIMIT`` operations (a long Python loop unrolled
    trip by trip): compiling it would take minutes, so the call runs eagerly."""


def as_numpy_would(error):
    """Mark ``error`` as the one NumPy raises for the user's code (``int_array += 0.5``): it
    is the user's error, not tracejit's, so a jit call runs eagerly (which raises it again)
    without logging an internal error or giving up on later calls.

    >>> as_numpy_would(ValueError("non-broadcastable output")).__tracejit_user_error__
    True
    """
    error.__tracejit_user_error__ = True
    return error
