"""Everything from Python to IR: the op table, the NumPy layer, the tracer and its IR.

>>> import numpy as np
>>> t = trace(lambda x: x * 2, np.ones(2))
>>> t.outputs
array([2., 2.])
"""

from . import numpy_api, ops, pytree
from .errors import TraceError, TracejitError, UnsupportedError
from .ir import Graph, parse_graph, verify
from .passes import optimize
from .primitives import PRIMITIVES, Primitive, bind
from .tracing import Trace, Tracer, trace

__all__ = [
    "PRIMITIVES",
    "Graph",
    "Primitive",
    "Trace",
    "TraceError",
    "Tracer",
    "TracejitError",
    "UnsupportedError",
    "bind",
    "numpy_api",
    "ops",
    "optimize",
    "parse_graph",
    "pytree",
    "trace",
    "verify",
]
