"""Results the program cannot make again. Callables holding the trace's values: ``return
out, backward`` where ``backward`` is a closure over this call's arrays (the vjp idiom of
hand-written layers: ``def backward(dout): return dout @ W.T, x.T @ dout``), ``return
loss, lambda g: g * mask``, a ``functools.partial`` of them, or a bound method of a traced
array (``return x.sum``).

A result the program does not compute is handed back as the trace left it, at every
compiled call (``tracing._static_result``). Such a callable would hold the trace's stand-ins:
calling it later fails ('a traced value was used after its trace finished'), where eager
returns one over this call's arrays. A random generator the function made
(``rs = np.random.RandomState(seed)``, returned with the draws) is another: eager returns a
new one per call; so is a set or a bytearray (one object for every call: what the caller
adds to it shows in the next result). And containers the result is rebuilt into at every
call (``tracer.pytree``) keep the class of a namedtuple, ``Counter`` and ``OrderedDict``,
not of other subclasses: an ``EasyDict`` of results would come back a plain dict (no
``out.loss``), a ``defaultdict`` without its default. Such calls run eagerly, naming the
line.

    >>> import numpy as np, tracejit as tj
    >>> def layer(x, w):
    ...     out = x @ w
    ...     return out, lambda dout: dout @ w.T
    >>> f = tj.jit(layer, cache="memory")
    >>> out, backward = f(np.ones((2, 3)), np.ones((3, 4)))
    >>> backward(np.ones((2, 4))).shape
    (2, 3)
    >>> f.stats()["eager_calls"]
    {'untraceable': 1}
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator

from . import pytree
from .dims import SymInt
from .errors import UnsupportedError

# How deep a walk through closures, partials and containers looks (a closure over a dict of
# lists of arrays is three levels; a function whose closure holds itself is cut here).
_DEPTH = 6


def refuse_traced_callable(leaf, traced_types, made_rngs=()):
    """Raise ``UnsupportedError`` when ``leaf`` (a result leaf the program does not compute)
    is a function, method or partial holding a value of ``traced_types`` (the trace's
    arrays) or a symbolic dim; or is an iterator (a generator); or is a random generator
    made in the call (``made_rngs``:
    ids, ``tracer.random_draws``), which eager makes anew per call and compiled calls
    would hand back as the trace left it, its state moved on by every call since."""
    if id(leaf) in made_rngs:
        raise UnsupportedError(
            f"the function returns the {type(leaf).__name__} it made; compiled calls cannot "
            "make it again. Make it outside and pass it in")
    if isinstance(leaf, Iterator):  # (x * i for i in range(3)), map(...), iter(lst)
        raise UnsupportedError(
            f"the function returns a {type(leaf).__name__} (an iterator); compiled calls "
            "would hand back the trace's one, used up by the first caller that reads it "
            "(and over the trace's arrays). Return a list")
    if not callable(leaf) or isinstance(leaf, type):
        return
    if _holds(leaf, tuple(traced_types) + (SymInt,), 0):
        raise UnsupportedError(
            f"the function returns a {type(leaf).__name__} that holds values of this call "
            "(a closure over its arrays); compiled calls cannot make it again. Return the "
            "arrays, or call it inside the function")


def refuse_unrebuilt(result):
    """Raise ``UnsupportedError`` when ``result`` (what the function returns) holds a set or
    bytearray, or a list, tuple or dict whose class ``pytree.unflatten`` would not rebuild.

    >>> import collections
    >>> refuse_unrebuilt(({"a": [1]}, collections.OrderedDict(b=2)))
    >>> try:
    ...     refuse_unrebuilt({"a": collections.defaultdict(list)})
    ... except UnsupportedError as error:
    ...     print(str(error).split(". ")[0])
    the function returns a defaultdict; compiled calls would return a dict
    """
    stack = [result]
    while stack:
        value = stack.pop()
        kind = type(value)
        if isinstance(value, (list, tuple)):
            if kind not in (list, tuple) and not hasattr(value, "_fields"):
                _refuse_container(value)
            stack.extend(value)
        elif isinstance(value, dict):
            if kind not in (dict, *pytree.REBUILT_MAPPINGS):
                _refuse_container(value)
            stack.extend(value.values())
        elif kind in (set, bytearray):
            _refuse_container(value)


def refuse_outside_containers(result, outside_objects, outside_copies):
    """Raise ``UnsupportedError`` when ``result`` holds a dict or list from outside the call
    (``return out, self.params``: ``outside_objects``, ``{id: (path, object)}``, or the
    trace's copy of one, ``outside_copies``, ``{id(copy): original}``). NumPy returns that
    object itself, which the caller may then change (``params["W"] = ...``); the call's
    result is rebuilt, a copy. (An argument's own dict or list is handed back as itself:
    ``argument_writes.returned_containers``.) Every level is looked at: ``return loss,
    {"layers": [(layer.params, layer.cache)]}`` holds the model's dicts four deep."""
    stack, seen = [result], set()
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if type(value) in (dict, list):
            known = outside_objects.get(id(value))
            if (known is not None and known[1] is value) or id(value) in outside_copies:
                where = f" ({known[0]})" if known is not None else ""
                raise UnsupportedError(
                    f"the function returns a {type(value).__name__} from outside the call"
                    f"{where}; compiled calls would return a copy of it, not it. Return its "
                    "arrays, or read it outside")
        if isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())


def _refuse_container(value):
    if isinstance(value, (set, bytearray)):
        would = "the same object at every call"
    else:
        would = "a " + next(plain.__name__ for plain in (tuple, list, dict)
                            if isinstance(value, plain))
    raise UnsupportedError(f"the function returns a {type(value).__name__}; compiled calls "
                           f"would return {would}. Return a dict, list or tuple")


def _holds(value, traced, depth):
    if isinstance(value, traced):
        return True
    if depth == _DEPTH:
        return False
    parts = ()
    if isinstance(value, types.FunctionType):
        cells = []
        for cell in value.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # a cell not yet filled
                pass
        parts = (*cells, *(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values())
    elif isinstance(value, types.MethodType):
        parts = (value.__self__, value.__func__)
    elif isinstance(value, functools.partial):
        parts = (value.func, *value.args, *value.keywords.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        parts = value
    elif isinstance(value, dict):
        parts = tuple(value.values())
    return any(_holds(part, traced, depth + 1) for part in parts)
