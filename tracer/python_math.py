"""``math`` functions of traced numbers: run-time Python floats, not values frozen in.

Public NumPy code takes a Python ``math`` function of a reduction all the time: the
residual norm of a conjugate gradient, ``math.sqrt(np.dot(r, r)) < tol`` (Kiusalaas'
``conjGrad``), ``math.exp(-delta / T)`` of an annealing step, ``math.log(loss)``. Python
converts the argument with ``float()``; done on a traced value that pins it (a value guard
``float(...) == 0.6895``), so every call with other data failed the guard, side exits
compiled new paths until ``max_variants`` and the function ran eagerly.

``call`` computes such a function as its NumPy ufunc on the run-time Python float that
``float(x)`` gives (``conversions.python_number``) and returns it as one again, so it is a
Python ``float`` in results and promotes as one. Where Python's function raises (``math.sqrt``
of a negative, ``math.log`` of zero, ``math.exp`` past overflow) the trace decides so with an
ordinary guard on the operand (``x < 0``, checked with its rounding margin like any ``if``);
on that side the trace goes on as before, through the pinned value to Python's own error.

    >>> import math, numpy as np, tracejit as tj
    >>> f = tj.jit(lambda r: math.sqrt(np.dot(r, r)), cache="memory")
    >>> f(np.array([3.0, 4.0])), f(np.array([6.0, 8.0])), f(np.array([5.0, 12.0]))
    (5.0, 10.0, 13.0)
    >>> f.stats()["compiles"], f.stats()["eager_calls"]
    (1, {})
"""

from __future__ import annotations

import math

import numpy as np

from .conversions import python_number
from .traced_array import Tracer

# exp overflows (OverflowError in Python) just past log(DBL_MAX) = 709.7827...: operands
# from here up take the pinned path, where Python's own function decides
_EXP_LIMIT = 709.78

# function: (NumPy's ufunc, "Python raises here" or None)
_FUNCTIONS = {
    math.sqrt: (np.sqrt, lambda x: x < 0),
    math.exp: (np.exp, lambda x: x > _EXP_LIMIT),
    math.expm1: (np.expm1, lambda x: x > _EXP_LIMIT),
    math.log: (np.log, lambda x: x <= 0),
    math.log2: (np.log2, lambda x: x <= 0),
    math.log10: (np.log10, lambda x: x <= 0),
    math.log1p: (np.log1p, lambda x: x <= -1),
    math.tanh: (np.tanh, None),
    # a cosine learning-rate schedule, 0.5 * lr * (1 + math.cos(math.pi * epoch / T)); Python
    # raises for an infinite operand (a NaN gives NaN)
    math.cos: (np.cos, np.isinf),
    math.sin: (np.sin, np.isinf),
    math.fabs: (np.abs, None),
}


def call(function, args, kwargs):
    """``function(*args)`` as a run-time Python float when it is one of ``_FUNCTIONS`` of
    one traced number, or None (the caller runs it as written)."""
    if function not in _FUNCTIONS or kwargs or len(args) != 1 or not isinstance(
            args[0], Tracer):
        return None
    number = python_number(args[0], float)
    if number is None:
        return None
    ufunc, raises = _FUNCTIONS[function]
    if raises is not None and bool(raises(number)):
        return None  # Python's own function on the pinned value: its error, as eager's
    return python_number(ufunc(number), float)
