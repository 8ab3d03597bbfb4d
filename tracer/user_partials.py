"""Partials of the user's functions that the trace enters: ``functools.partialmethod``
registrations, as early tinygrad writes its operations::

    def register(name, fxn):
        setattr(Tensor, name, partialmethod(fxn.apply, fxn))

    x.dot(w)   # functools.partial(<bound Function.apply of x>, Dot)(w)

Python hands out ``x.dot`` as a ``functools.partial`` of the bound method; the front end
entered only plain functions and methods, so the partial ran as written (its type queries
and writes unseen) or, its owner a user object, was refused as an impure library call
and every call ran eagerly. ``entered`` gives the partial of the rewritten function when
the partial binds nothing but constants of the program (classes, functions, ufuncs,
strings, ``None``, booleans): nothing the trace would need to read as an input.
"""

from __future__ import annotations

import functools
import types

import numpy as np

from .rewritten_code import callable_object, is_user_function

_CONSTANT_TYPES = (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc, str,
                   bool, type(None))


def enters(function):
    """Whether ``function`` is a partial of a user function (or of a method of one) that
    binds only program constants: the trace runs its body rewritten."""
    if not isinstance(function, functools.partial):
        return False
    target = function.func
    target = target.__func__ if isinstance(target, types.MethodType) else target
    return (is_user_function(target) or callable_object(function.func)) and all(
        isinstance(value, _CONSTANT_TYPES)
        for value in (*function.args, *function.keywords.values()))


def entered(function, function_for):
    """The partial ``function`` with its function rewritten by ``function_for``."""
    return functools.partial(function_for(function.func), *function.args,
                             **function.keywords)
