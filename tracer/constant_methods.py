"""NumPy calls that would not ask the tracer: a NumPy array's method given a traced operand
(``np.zeros(h).dot(W)``), and NumPy functions whose dispatch skips the traced operand
(``np.take(table, ids)`` dispatches on ``table`` only).

The array is a plain NumPy array (made in the function, or a constant), so the call goes to
NumPy's own code, which converts the traced operand with ``__array__``: that would freeze
its traced value into the compiled code, so the trace stops and the function runs eagerly
on every call. iamtrask's binary-addition RNN starts its BPTT carry that way
(``future_layer_1_delta = np.zeros(hidden_dim)``, then
``future_layer_1_delta.dot(synapse_h.T)``). Such a call goes to the NumPy function of the
same name and argument order, which dispatches as NumPy would, or straight to the
tracer's implementation of a function whose dispatch would not see the operand::

    >>> import numpy as np
    >>> from tracejit.tracer.numpy_api import FUNCTIONS
    >>> function, args = instead(np.zeros(2).dot, ("W",))
    >>> function is np.dot, len(args)
    (True, 2)
    >>> instead(np.take, (np.arange(3.0), "ids"))[0] is FUNCTIONS[np.take]
    True
    >>> instead(np.zeros(2).sum, ()) is None
    True
"""

from __future__ import annotations

import types

import numpy as np

from .numpy_api import FUNCTIONS
from .primitives import is_traced

# ndarray methods that take other arrays, whose NumPy function takes the array first and
# then the method's own arguments in the method's order (``a.dot(b, out)`` is ``np.dot(a,
# b, out)``). Not ``compress`` (``np.compress(condition, a)``) nor the writing ``put``.
_SAME_ORDER = {
    "dot": np.dot,
    "take": np.take,
    "searchsorted": np.searchsorted,
    "repeat": np.repeat,
    "choose": np.choose,
}

# NumPy functions that dispatch on their first argument only (``np.take``'s dispatcher
# returns ``(a, out)``): a traced ``indices`` or ``repeats`` beside a NumPy ``a`` is never
# offered to the tracer.
_FIRST_ONLY = (np.take, np.repeat)


def instead(function, args):
    """``(function, args)`` to call in place of ``function(*args)`` when NumPy would not
    ask the tracer about a traced operand; None when the call dispatches as it is. The
    caller checks that some operand is traced."""
    if type(function) is types.BuiltinMethodType and isinstance(
            getattr(function, "__self__", None), np.ndarray) and (
            function.__name__ in _SAME_ORDER):
        function, args = _SAME_ORDER[function.__name__], (function.__self__, *args)
    elif function not in _FIRST_ONLY:
        return None
    if function in _FIRST_ONLY and args and not is_traced(args[0]):
        return FUNCTIONS[function], args
    return function, args
