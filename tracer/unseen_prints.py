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
not watched. stderr is watched the same way (``print(..., file=sys.stderr)``), except for
the warnings module's writes: NumPy's warnings raised while tracing go there.)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
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
        if threading.get_ident() != self._thread or _from_warnings():
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


def _from_warnings():
    """Whether the write is ``warnings.showwarning``'s (NumPy's RuntimeWarning while the
    trace computes a value): it reaches the stream, as outside a watched function; the
    warning registry shows it once however the call then runs."""
    return sys._getframe(2).f_globals.get("__name__") == "warnings"


@contextlib.contextmanager
def _watching(context):
    """``sys.stdout`` and ``sys.stderr`` ``WatchedStdout``s inside the block; each stream
    is put back after it unless the block left another."""
    out, err = WatchedStdout(sys.stdout, context), WatchedStdout(sys.stderr, context)
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        if sys.stdout is out:
            sys.stdout = out.stream
        if sys.stderr is err:
            sys.stderr = err.stream


def watched(context, function):
    """``function`` (run as written by a trace) with ``sys.stdout`` a ``WatchedStdout``
    while it runs. A generator function's body runs at each step of the generator it
    returns, after the call: each step is watched."""
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def steps(*args, **kwargs):
            with _watching(context):
                generator = function(*args, **kwargs)
            return (yield from _watched_steps(context, generator))

        return steps

    @functools.wraps(function)
    def run(*args, **kwargs):
        with _watching(context):
            return function(*args, **kwargs)

    return run


def _watched_steps(context, generator):
    """``yield from generator`` with each of its steps (send, throw, close) watched."""
    step = functools.partial(generator.send, None)
    while True:
        try:
            with _watching(context):
                value = step()
        except StopIteration as stop:
            return stop.value
        try:
            sent = yield value
        except GeneratorExit:
            with _watching(context):
                generator.close()
            raise
        except BaseException as error:  # noqa: BLE001 - thrown in: the generator's to handle
            step = functools.partial(generator.throw, error)
        else:
            step = functools.partial(generator.send, sent)


def unseen_print(context):
    """The error of the first write a ``WatchedStdout`` refused, or None."""
    return getattr(context, "unseen_print", None)
