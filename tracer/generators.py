"""Generators the model calls: ``for region, i, j in self.iterate_regions(image)``.

A generator function runs rewritten like any other function the trace enters (its hooks
see its reads and writes); its loops that hold a ``yield`` stay Python loops, and the
loop consuming it unrolls, as a loop over any Python iterable does. What the trace cannot
follow is a generator that outlives it: one returned (the jitted function may itself be a
generator function), kept, or left part-way, would run its remaining steps after the trace
has finished, on tracers that no longer exist. So every generator a rewritten generator
function makes is remembered, and a trace that ends with one still unfinished and alive
runs eagerly, with the reason::

    def regions(image):
        for i in range(image.shape[0] - 2):
            yield image[i:i + 3], i

    def model(image):
        return sum(region.sum() * i for region, i in regions(image))   # compiles

    def first(image):
        return next(regions(image))[0]        # left unfinished and alive: runs eagerly
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import weakref

from .errors import TracejitError


def is_generator_function(function):
    return inspect.isgeneratorfunction(function)


def remembered(context, maker, function):
    """``maker`` (the rewritten generator function) noting each generator it makes."""

    @functools.wraps(maker)
    def make(*args, **kwargs):
        generator = maker(*args, **kwargs)
        generators = getattr(context, "generators", None)
        if generators is None:
            generators = context.generators = []
        generators.append((weakref.ref(generator), function))
        return generator

    return make


def unfinished(context):
    """Why the trace cannot stand (a generator it made may still run), or None."""
    for reference, function in getattr(context, "generators", ()):
        generator = reference()
        if generator is not None and inspect.getgeneratorstate(generator) != (
                inspect.GEN_CLOSED):
            code = function.__code__
            return (f"{code.co_filename}:{code.co_firstlineno}: a generator made by "
                    f"{function.__qualname__} outlives the trace unfinished (returned, kept "
                    "or left part-way); its remaining steps would run after tracing")
    return None


@contextlib.contextmanager
def finalizer_errors(context):
    """Keep tracejit's errors raised where Python only reports them, in
    ``context.finalizer_error``: a generator dropped part-way (``for v in gen(): return
    v + 1``) runs its ``finally`` as it is closed, and an error there (a write the trace
    refuses) is 'Exception ignored' to CPython. The trace would go on without the write,
    and compiled calls would skip it; ``finalizer_error`` stops the trace with it."""
    previous = sys.unraisablehook

    def hook(unraisable):
        if isinstance(unraisable.exc_value, TracejitError) and getattr(
                context, "finalizer_error", None) is None:
            context.finalizer_error = unraisable.exc_value
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def finalizer_error(context):
    """The error ``finalizer_errors`` kept, or None."""
    return getattr(context, "finalizer_error", None)
