"""Which Python calls a trace may fold into compiled code.

A trace runs the model function once; a call whose result does not depend on traced data
(``time.time()``, ``random.random()``, ``next(counter)``, ``os.getenv("K")``) would have
its result frozen into the compiled code as a constant. Only calls known to be pure may be
folded: NumPy (but ``np.random``), ``math``, ``operator``, ``heapq``, ``bisect``, builtins
that compute, methods of
arrays, numbers, strings and containers, constructors, tracejit itself, and the user's own
functions (the trace enters those and sees their calls in turn). A call that takes a traced
value is recorded through the array protocols whatever library it comes from. Anything else
makes the function run eagerly, with the call named.

>>> import math, time
>>> impure_call(math.sqrt, (2.0,), {}) is None
True
>>> impure_call(time.time, (), {})
'time.time'
"""

from __future__ import annotations

import functools
import io
import types

import numpy as np

from .locations import is_tracejit

# Modules whose functions compute from their arguments alone.
_PURE_MODULES = (
    "builtins", "math", "cmath", "operator", "_operator", "functools", "itertools",
    "collections", "numbers", "fractions", "statistics", "string", "copy", "typing",
    "dataclasses", "enum", "abc", "types", "numpy", "scipy.special", "tracejit",
    # beam search keeps hypotheses in a heap (heapq.nsmallest, heappush onto a local list;
    # a push onto an outside list is refused as a change the trace cannot follow)
    "heapq", "_heapq", "bisect", "_bisect",
)
# Builtins that read or change the world instead of computing a value.
_IMPURE_BUILTINS = {
    "input", "open", "id", "exec", "eval", "compile", "globals", "locals", "vars",
    "setattr", "delattr", "breakpoint", "__import__", "exit", "quit", "help",
}
# NumPy functions that change NumPy's global settings: compiled code would not change them.
_NUMPY_SETTINGS = (np.set_printoptions, np.seterr, np.seterrcall, np.setbufsize)
# Receivers whose methods compute (mutating methods on outside containers are refused by
# the front end's rewrite before they get here).
_VALUE_TYPES = (
    np.ndarray, np.generic, list, dict, tuple, set, frozenset, str, bytes, int, float,
    complex, bool, slice, range, type(None),
)


def _in_modules(module, prefixes):
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _is_pure_module(module):
    return (
        _in_modules(module or "", _PURE_MODULES)
        and not _in_modules(module or "", ("numpy.random",))
    )


def _is_traced(value):
    return getattr(type(value), "__tracejit_priority__", 0) >= 1


def _name(function):
    module = getattr(function, "__module__", None) or type(
        getattr(function, "__self__", None)).__module__
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    return f"{module}.{name}" if name else repr(function)


def impure_call(function, args, kwargs):
    """``None`` when the trace may fold ``function(*args, **kwargs)``; else the call's
    name, for the message that makes the function run eagerly."""
    if function is id:  # of a traced array: the tracer's id, not the id eager reads (an
        return "builtins.id"  # optimizer's state keyed by id(param) would miss)
    if any(_is_traced(value) for value in (*args, *kwargs.values())):
        return None  # recorded through the array protocols, never frozen
    if any(function is setting for setting in _NUMPY_SETTINGS):
        return _name(function)
    if isinstance(function, functools.partial):
        return impure_call(function.func, (*function.args, *args),
                           {**function.keywords, **kwargs})
    if isinstance(function, type) or isinstance(function, np.ufunc):
        return None  # constructing an object or a ufunc on constants
    owner = getattr(function, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        if isinstance(owner, _VALUE_TYPES) or _is_traced(owner):
            return None
        owner_module = owner.__module__ if isinstance(owner, type) else type(owner).__module__
        return None if _is_pure_module(owner_module) else _name(function)
    if isinstance(function, types.FunctionType) and is_tracejit(function.__code__.co_filename):
        return None
    module = getattr(function, "__module__", None)
    if module == "builtins":
        return _name(function) if function.__name__ in _IMPURE_BUILTINS else None
    return None if _is_pure_module(module) else _name(function)


def is_stateful(value):
    """An iterator or generator read from outside: each ``next`` changes it, so a trace
    cannot fold what it yields."""
    return isinstance(value, types.GeneratorType) or (
        hasattr(type(value), "__next__") and not _is_traced(value)
        and not isinstance(value, (*_VALUE_TYPES, io.IOBase))  # print(..., file=sys.stderr)
    )
