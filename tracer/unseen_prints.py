"""Text written to stdout by a function the front end cannot rewrite.

The front end turns the user's ``print`` calls into print effects (``Hooks.print``): the
trace writes their text once it succeeds, compiled calls replay it. A function with no
source (made by ``exec``) runs as written, and its builtin ``print`` writes at once: part
of a line before ``str()`` of a traced value refuses (``print(0, cost)`` wrote ``0 ``, and
the eager rerun ``0 0.75`` after it), or a whole line no compiled call writes again
(``print('epoch done')`` printed on the first call only).

Such a function runs ``watched``: ``sys.stdout`` is a ``WatchedStdout`` while it runs, and
a write from the tracing thread stops the trace (the call runs eagerly, which prints each
line once) before anything reaches the stream; other threads write through. The trace
checks ``unseen_print`` at its end too, for code that caught the error::

    >>> import io, sys
    >>> class Context: pass
    >>> def report(epoch):
    ...     try:
    ...         print("epoch", epoch)
    ...     except Exception:
    ...         return "refused"
    >>> context, kept, sys.stdout = Context(), sys.stdout, io.StringIO()
    >>> answer = watched(context, report)(1)
    >>> written, sys.stdout = sys.stdout.getvalue(), kept
    >>> answer, written, unseen_print(context) is not None
    ('refused', '', True)

(Only while such a function runs: the rewritten code's globals read the real stream,
which compiled calls' guards find again. Library functions run as written too and are
not watched. stderr is left alone: NumPy's warnings raised while tracing go there.)
"""

from __future__ import annotations

import functools
import sys
import threading

from .traced_array import trace_error

_MESSAGE = ("print() in a function tracejit cannot rewrite (no source: made by exec?): "
            "compiled calls would not print its text")


class WatchedStdout:
    """``sys.stdout`` while a watched function runs: refuses the tracing thread's writes
    (noted in ``context.unseen_print``), passes other threads' and every other attribute
    to ``stream``."""

    def __init__(self, stream, context):
        self.stream = stream
        self._context = context
        self._thread = threading.get_ident()

    def write(self, text):
        if threading.get_ident() != self._thread:
            return self.stream.write(text)
        if not text:
            return 0
        error = trace_error(_MESSAGE)
        if getattr(self._context, "unseen_print", None) is None:
            self._context.unseen_print = error
        raise error

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def watched(context, function):
    """``function`` (run as written by a trace) with ``sys.stdout`` a ``WatchedStdout``
    while it runs; the stream is put back after it unless the function left another."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        stream = WatchedStdout(sys.stdout, context)
        sys.stdout = stream
        try:
            return function(*args, **kwargs)
        finally:
            if sys.stdout is stream:
                sys.stdout = stream.stream

    return run


def unseen_print(context):
    """The error of the first write a ``WatchedStdout`` refused, or None."""
    return getattr(context, "unseen_print", None)
