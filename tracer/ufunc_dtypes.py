"""A ufunc's ``dtype=``: the dtype of the loop NumPy runs, not a cast of its result.

``np.add(mask_a, mask_b, dtype=np.float32)`` casts both masks to float32 and adds them
(True + True is 2.0); adding the booleans first (an "or") and casting after gives 1.0.
``np.negative(mask, dtype=np.float32)`` is -1.0 where the bool loop raises. NumPy resolves
the loop (``ufunc.resolve_dtypes`` with the output's dtype fixed, casting 'same_kind'),
and its UFuncTypeError for a cast it refuses (float64 into an int32 loop) is the user's.

>>> [dtype.name for dtype in loop_dtypes(np.add, [np.ones(2, bool), True], np.float32)]
['float32', 'float32']
"""

from __future__ import annotations

import numpy as np

from .conversions import keep_python_int_in_range
from .dims import SymInt
from .errors import as_numpy_would
from .primitives import is_traced


def _operand_dtype(value):
    """What ``resolve_dtypes`` takes for an operand: a Python number's (weak) type, else the
    dtype."""
    if is_traced(value) and getattr(value, "aval", None) is not None and value.aval.weak:
        return {"b": np.dtype(bool), "i": int, "u": int}.get(value.dtype.kind, float)
    if type(value) in (int, float):
        return type(value)
    if type(value) is bool:  # (resolve_dtypes takes no bool type)
        return np.dtype(bool)
    if isinstance(value, SymInt):  # a dim: a Python int
        return int
    return np.result_type(value) if not hasattr(value, "dtype") else np.dtype(value.dtype)


def loop_dtypes(ufunc, inputs, dtype):
    """The input dtypes of the loop ``ufunc(*inputs, dtype=dtype)`` runs."""
    try:
        resolved = ufunc.resolve_dtypes(
            tuple(_operand_dtype(value) for value in inputs) + (None,) * ufunc.nout,
            signature=(None,) * ufunc.nin + (np.dtype(dtype),) * ufunc.nout)
    except TypeError as error:  # (UFuncTypeError is one) the user's, as NumPy raises it
        raise as_numpy_would(error) from None
    return resolved[:ufunc.nin]


def loop_operands(ufunc, inputs, dtype, cast):
    """``inputs`` cast (``cast(value, dtype)``) to the dtypes of the loop NumPy runs for
    ``dtype=``; a run-time Python int past an integer loop's range raises NumPy's
    OverflowError, as a literal one does."""
    operands = []
    for value, wanted in zip(inputs, loop_dtypes(ufunc, inputs, dtype)):
        if is_traced(value) and getattr(value, "aval", None) is not None:
            keep_python_int_in_range(value, wanted)
            operands.append(value if value.dtype == wanted and not value.aval.weak
                            else cast(value, wanted))
        else:
            number = type(value) in (bool, int, float) or isinstance(value, np.generic)
            operands.append(np.asarray(value, wanted)[()] if number else cast(value, wanted))
    return operands
