"""Element-wise choices among arrays, as chains of ``where``: ``np.select``, ``np.choose``,
``np.piecewise`` (constant pieces, and function pieces under ``jit``, called on the
selection ``x[cond]`` as NumPy calls them), and the closeness tests ``np.isclose`` and
``np.allclose`` (NumPy's own formula), listed in ``FUNCTIONS``.

Where NumPy raises on data (``np.choose`` with an index out of range, ``np.allclose``'s
Python bool) the answer is taken under a value guard, as ``bool(x)`` is: a later call
whose answer differs leaves compiled code there, and NumPy raises or answers.

>>> import tracejit as tj
>>> f = tj.jit(lambda x: np.select([x < 0, x > 1], [-x, x * 10], 0.5), cache="memory")
>>> f(np.array([-2.0, 0.5, 3.0]))
array([ 2. ,  0.5, 30. ])
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import UnsupportedError, as_numpy_would
from .primitives import as_array, is_traced, is_tracejit_array
from .shapes import broadcast_shapes  # symbolic dims stay symbolic (np's would pin them)

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def _operand(value):
    """As NumPy takes a choice: a Python number stays one (weak), anything else an array."""
    if type(value) in (int, float, complex) or is_tracejit_array(value):
        return value
    return np.asarray(value)


def _promotion_key(value):
    aval = getattr(value, "aval", None)
    if aval is not None:
        return aval.dtype_for_promotion()
    return value if type(value) in (int, float, complex) else np.dtype(dtype_of(value))


def select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise as_numpy_would(ValueError("list of cases must be same length as list of "
                                        "conditions"))
    if len(condlist) == 0:
        raise as_numpy_would(ValueError("select with an empty condition list is not "
                                        "possible"))
    choices = [_operand(choice) for choice in choicelist] + [_operand(default)]
    dtype = np.result_type(*[_promotion_key(choice) for choice in choices])
    conditions = [as_array(cond) for cond in condlist]
    for position, cond in enumerate(conditions):
        if dtype_of(cond) != np.bool_:
            raise as_numpy_would(TypeError(f"invalid entry {position} in condlist: should "
                                           "be boolean ndarray"))
    everything = conditions + [np.asarray(choice) if type(choice) in (int, float, complex)
                               else choice for choice in choices]
    shape = broadcast_shapes(*[tuple(shape_of(value)) for value in everything])
    result = np.asarray(choices[-1], dtype) if type(choices[-1]) in (int, float, complex) \
        else choices[-1].astype(dtype)
    for cond, choice in zip(reversed(conditions), reversed(choices[:-1])):
        result = np.where(cond, choice, result).astype(dtype)
    return np.broadcast_to(result, shape).copy()


def choose(a, choices, out=None, mode="raise"):
    if out is not None:
        raise UnsupportedError("np.choose(..., out=...) is not supported; assign the result")
    if mode not in ("raise", "clip", "wrap"):
        raise as_numpy_would(ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' "
                                        f"(got {mode!r})"))
    a = as_array(a)
    if np.dtype(dtype_of(a)).kind not in "iu":
        raise as_numpy_would(TypeError(f"Cannot cast array data from dtype('{dtype_of(a)}') "
                                       "to dtype('int64') according to the rule 'safe'"))
    choices = [as_array(choice) for choice in choices]
    count = len(choices)
    if count == 0:
        raise UnsupportedError("np.choose of no choices is not supported")
    dtype = np.result_type(*[np.dtype(dtype_of(choice)) for choice in choices])
    if mode == "clip":
        a = np.clip(a, 0, count - 1)
    elif mode == "wrap":
        a = np.remainder(a, count)
    elif bool(np.any((a < 0) | (a >= count))):  # a value guard; NumPy's error eagerly
        raise as_numpy_would(ValueError("invalid entry in choice array"))
    result = choices[-1].astype(dtype)
    for position in range(count - 2, -1, -1):
        result = np.where(a == position, choices[position], result).astype(dtype)
    shape = broadcast_shapes(tuple(shape_of(a)), *[tuple(shape_of(c)) for c in choices])
    return np.broadcast_to(result, shape).copy()


def piecewise(x, condlist, funclist, *args, **kw):
    x = as_array(x)
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray))
                                 and not is_tracejit_array(condlist[0]) and ndim_of(x) != 0):
        condlist = [condlist]
    conditions = [cond if is_tracejit_array(cond) else np.asarray(cond, dtype=bool)
                  for cond in condlist]
    conditions = [cond.astype(bool) for cond in conditions]
    if len(conditions) == len(funclist) - 1:
        otherwise = ~np.any(np.stack(conditions), axis=0)
        conditions.append(otherwise)
    elif len(conditions) != len(funclist):
        raise as_numpy_would(ValueError(
            f"with {len(conditions)} condition(s), either {len(conditions)} or "
            f"{len(conditions) + 1} functions are expected"))
    result = np.zeros_like(x)
    for cond, piece in zip(conditions, funclist):
        values = _piece_values(x, cond, piece, args, kw) if callable(piece) else piece
        values = as_array(values)
        result = np.where(cond, values.astype(dtype_of(x)), result)
    return result


def _piece_values(x, cond, piece, args, kw):
    """A function piece, called as NumPy calls it: on ``x[cond]`` (a traced boolean-mask
    selection, so reductions see the selected elements only); what it gives back, a
    selection of the same mask or a scalar, is written where ``cond`` holds."""
    from .masked_selection import MaskedSelection  # cycle: masked_selection -> numpy_api

    selection = x[cond] if is_traced(x) and is_traced(cond) else None
    if not isinstance(selection, MaskedSelection):
        raise UnsupportedError("np.piecewise with a function piece needs traced conditions "
                               "of the array's shape")
    values = piece(selection, *args, **kw)
    if isinstance(values, MaskedSelection):
        dense = values.dense_for(selection)
        if dense is None:
            raise UnsupportedError("np.piecewise: a function piece gave a selection of "
                                   "another mask")
        return dense
    if ndim_of(as_array(values)) != 0:
        raise UnsupportedError("np.piecewise: a function piece gave an array that is not "
                               "element-wise over the selected elements")
    return values


def isclose(a, b, rtol=1.0e-5, atol=1.0e-8, equal_nan=False):
    """NumPy's formula: ``|a - b| <= atol + rtol * |b|`` where ``b`` is finite, or
    ``a == b``; ``b`` in at least float."""
    x, y, atol, rtol = (
        value if isinstance(value, (int, float, complex)) or is_tracejit_array(value)
        else np.asanyarray(value) for value in (a, b, atol, rtol))
    aval = getattr(y, "aval", None)
    if aval is not None and aval.weak:  # a Python number NumPy would see: it stays weak
        y = y * 1.0 if aval.dtype.kind in "iub" else y
    elif hasattr(y, "dtype") or is_tracejit_array(y):
        y = y.astype(np.result_type(_promotion_key(y), 1.0))
    elif isinstance(y, int):
        y = float(y)
    with np.errstate(invalid="ignore"):
        result = (np.less_equal(np.abs(x - y), atol + rtol * np.abs(y)) & np.isfinite(y)
                  | (x == y))
        if equal_nan:
            result = result | (np.isnan(x) & np.isnan(y))
    return result[()]


def allclose(a, b, rtol=1.0e-5, atol=1.0e-8, equal_nan=False):
    return bool(np.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))


FUNCTIONS = {
    np.select: select,
    np.choose: choose,
    np.piecewise: piecewise,
    np.isclose: isclose,
    np.allclose: allclose,
}
