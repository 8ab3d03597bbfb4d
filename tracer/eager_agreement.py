"""Where a traced function must answer as NumPy eager does, beyond the values: the
model's own exception handlers and its type checks.

* ``stops_the_trace(error)``: an error the model's ``except`` block (or
  ``contextlib.suppress``: ``TraceSuppress``) must not catch, since NumPy eager would not
  have raised it: tracejit's refusals and control signals, an error raised inside
  tracejit's code, a RecursionError of the deeper traced stack.
* ``eager_type(context, value)`` and ``TYPE_QUERIES``: ``isinstance``, ``type`` and
  ``np.isscalar`` of a traced value, answered for the type it has eagerly.
* ``python_number_attribute(value, name)``: ``lr.shape``, ``hasattr(lr, "shape")`` of a
  run-time Python number (a ``float`` argument seen with a second value), answered as
  Python's ``float`` answers, not as the 0-d array standing for it.

>>> stops_the_trace(ValueError("the model's own")) is None
True
>>> TYPE_QUERIES[isinstance](np.float64, float)
True
"""

from __future__ import annotations

import contextlib

import numpy as np

from .dims import SymInt
from .errors import TracejitError, TraceSignal, as_numpy_would
from .locations import is_tracejit
from .traced_array import Tracer, _is_numpy_scalar, trace_error


def stops_the_trace(error):
    """What to raise instead of letting the model's handler catch ``error`` (see
    ``Hooks.caught``), or None when the model may catch it as NumPy eager would."""
    if isinstance(error, TraceSignal) or (isinstance(error, TracejitError) and not getattr(
            error, "__tracejit_user_error__", False)):
        return error
    if isinstance(error, RecursionError):
        return trace_error("a RecursionError the function catches: the trace's Python stack "
                        "is deeper than NumPy eager's, so eager decides")
    if _raised_inside_tracejit(error) and not getattr(error, "__tracejit_user_error__", False):
        return trace_error(f"the function catches an error tracejit raised while tracing "
                        f"({type(error).__name__}: {error}); NumPy may not raise it, so eager "
                        "decides")
    return None


def reraise_if_it_stops_the_trace(error):
    """``Hooks.caught``, the first statement of every ``except`` block of the model: what
    tracejit raised to stop or restart the trace (an unsupported call, ``self.t += 1``
    read as a setting, a loop it cannot capture) goes on up; caught, the trace would
    compile the handler's path where NumPy never raises. So does any other error raised
    inside tracejit that NumPy would not raise (one NumPy would raise is marked
    ``as_numpy_would``), and a RecursionError: the trace runs deeper on the stack."""
    stop = stops_the_trace(error)
    if stop is error:
        raise error
    if stop is not None:
        raise stop from error


class TraceSuppress(contextlib.suppress):
    """``contextlib.suppress`` in a traced function: it does not swallow what
    ``stops_the_trace`` sends on up (its handler is in contextlib, not rewritten)."""

    def __exit__(self, kind, error, traceback):
        if error is not None and stops_the_trace(error) is not None:
            return False
        return super().__exit__(kind, error, traceback)


def _raised_inside_tracejit(error):
    """Whether ``error`` was raised in tracejit's own code (its innermost frame)."""
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    return traceback is not None and is_tracejit(traceback.tb_frame.f_code.co_filename)


# isinstance / type / np.isscalar of a traced value, given the type it has eagerly
TYPE_QUERIES = {
    isinstance: lambda eager_type, classes: issubclass(eager_type, classes),
    type: lambda eager_type: eager_type,
    np.isscalar: lambda eager_type: eager_type is not np.ndarray,
}


def eager_type(context, value):
    """The type ``value`` (traced) has when the function runs eagerly on the same
    arguments: ``int`` for a dim; a Python number for a run-time Python scalar; a NumPy
    scalar type for a reduction's or an element's value; else ``np.ndarray``. Called on
    Tensors eagerly, values are Tensors: type checks on them run eagerly."""
    if isinstance(value, SymInt):
        return int
    if value.aval.weak:
        return {"b": bool, "i": int, "u": int}.get(value.dtype.kind, float)
    if getattr(context, "tensor_arguments", True):
        raise trace_error("a type check (isinstance, type) on a value computed from Tensor "
                       "arguments: the trace sees arrays where eager sees Tensors")
    return value.dtype.type if _is_numpy_scalar(value) else np.ndarray


# What a run-time Python number's stand-in (a weak 0-d tracer) may answer as the tracer
# does: the attributes ``float``/``int`` share with ndarray, with NumPy's values.
_SHARED_WITH_NDARRAY = frozenset({"real", "imag", "conjugate"})


def is_python_number(value):
    """Whether ``value`` is a traced stand-in for a Python ``int``/``float``/``bool``."""
    return isinstance(value, Tracer) and not value.shape and value.aval.weak


def python_number_attribute(value, name):
    """Raise what Python raises for ``value.name`` of the Python number ``value`` stands
    for (``is_python_number``) when ``float``/``int`` has no such attribute: ``lr.shape``
    raised eagerly, and ``hasattr(lr, "shape")`` was True in the trace, so ``if hasattr(lr,
    "shape")`` took the array's branch. An attribute only the Python type has
    (``n.bit_length()``) runs eagerly. Returns None where the tracer's own answers."""
    kind = eager_type(None, value)
    if not hasattr(kind, name):
        raise as_numpy_would(AttributeError(
            f"'{kind.__name__}' object has no attribute '{name}'"))
    if name not in _SHARED_WITH_NDARRAY and not name.startswith("__"):
        raise trace_error(f"{kind.__name__}.{name} of a run-time Python number is not "
                          "supported; the call runs eagerly")
