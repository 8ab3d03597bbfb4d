"""``out=`` arguments: NumPy's checks on a given output buffer, and the write into it.

The NumPy layer, ``einsum`` and the scans all take ``out=``; they share these so a write
into a NumPy buffer behaves one way (and raises NumPy's own errors) wherever it happens.

>>> import numpy as np
>>> target = np.zeros(3)
>>> write_out(target, np.arange(3), "np.add") is target, target.tolist()
(True, [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import sys

import numpy as np

from .errors import TraceError, as_numpy_would
from .locations import is_internal, line_prefix, user_location
from .ops import dtype_of
from .primitives import current_context, is_traced
from .source_rewrite import HOOK


def _concrete_shape(value):
    """The shape in this call: a tracer's real value's (no guard on symbolic dims)."""
    real = getattr(value, "value", None)
    if real is not None and hasattr(real, "shape"):
        return tuple(real.shape)
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else np.shape(value)


def check_out(target, result, name):
    """Raise as NumPy does when ``result`` cannot be written into ``out=target``: a shape
    the target cannot hold, or a dtype that does not cast "same_kind" (``int += float``).
    The eager run a traced call falls back to then raises the same error."""
    shape, expected = _concrete_shape(result), _concrete_shape(target)
    try:
        fits = shape == expected or np.broadcast_shapes(shape, expected) == expected
    except ValueError:
        fits = False
    if not fits:
        raise as_numpy_would(ValueError(
            f"non-broadcastable output operand with shape {expected} doesn't match the "
            f"broadcast shape {shape}"))
    check_cast(target, result, name)


def check_cast(target, result, name):
    """``check_out``'s dtype half: NumPy's UFuncTypeError when ``result`` does not cast
    "same_kind" to ``target``'s dtype (``int_array[mask] *= 0.5``)."""
    source, destination = dtype_of(result), dtype_of(target)
    if not np.can_cast(source, destination, "same_kind"):
        try:  # NumPy's own error (a UFuncTypeError), from a 0-d call of the same ufunc
            getattr(np, name.removeprefix("np."), np.add)(
                np.zeros((), source), np.zeros((), source), out=np.zeros((), destination))
        except TypeError as error:
            raise as_numpy_would(error) from None


def _called_from_rewritten_code():
    """The user's code making this call is the rewritten function the trace runs (its names
    go through the hooks, so a NumPy buffer written here reads as its traced copy after),
    not code run as it is (no source: ``s += 1`` there changes the array the trace no
    longer reads)."""
    frame = sys._getframe(2)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and HOOK in frame.f_code.co_freevars


def write_out(target, result, name):
    """``ufunc(..., out=target)``: the result written into ``target``, as NumPy does (with
    its dtype). A traced or tracked result written into a plain ndarray goes through the
    trace's buffer writes (so every name for the buffer sees it), or, eagerly, is refused:
    NumPy would keep the values and drop the history."""
    check_out(target, result, name)
    if getattr(type(target), "__tracejit_priority__", 0) >= 1:
        target[...] = result
        return target
    context = current_context()
    if is_traced(result) and context is not None and (
        context.hooks is not None
    ):
        if not _called_from_rewritten_code():
            where = user_location()
            raise TraceError(
                f"{line_prefix(where)}{name}(..., out=) writes a traced value into a NumPy "
                "array in code tracejit runs as it is (its source is not available to "
                "rewrite: exec'd or generated code, or a library's): NumPy operations on that "
                "array there afterwards would be missing from the compiled result")
        return context.hooks.set_item(target, Ellipsis, result, False)
    if getattr(result, "requires_grad", False):
        raise TypeError(f"{name}(..., out=ndarray) with an input that requires grad would "
                        f"drop its gradient; assign the result instead (y = {name}(...))")
    np.copyto(target, np.asarray(getattr(result, "data", result)), casting="same_kind")
    return target
