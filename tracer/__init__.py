"""Everything from Python to IR: the op table, the NumPy layer, and (soon) the tracer."""

from . import numpy_api, ops, pytree
from .errors import TraceError, TracejitError, UnsupportedError
from .primitives import PRIMITIVES, Primitive, bind

__all__ = [
    "PRIMITIVES",
    "Primitive",
    "TraceError",
    "TracejitError",
    "UnsupportedError",
    "bind",
    "numpy_api",
    "ops",
    "pytree",
]
