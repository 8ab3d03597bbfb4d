"""``np.copyto(dst, src, casting="same_kind", where=True)`` into a tracejit array.

Masked recurrent steps over ragged batches keep finished sequences' states with it:
``np.copyto(h, h_new, where=(t < lengths)[:, None])`` inside the time loop. It is the write
``dst[...] = np.where(where, src, dst)``: NumPy casts ``src`` to ``dst``'s dtype and copies
where ``where`` holds, and the assignment casts the same way, so the values agree (a
float32 ``dst`` gets ``src`` rounded once, an ``unsafe`` int ``dst`` its truncation). NumPy's
own errors (a cast ``casting`` forbids, shapes that do not broadcast to ``dst``) are raised
by running ``np.copyto`` on empty arrays of the same shapes and dtypes first.

    >>> import numpy as np, tracejit as tj
    >>> def keep_finished(h, h_new, active):
    ...     np.copyto(h, h_new, where=active[:, None])
    ...     return h
    >>> f = tj.jit(keep_finished, cache="memory")
    >>> f(np.zeros((2, 2)), np.ones((2, 2)), np.array([True, False])).tolist()
    [[1.0, 1.0], [0.0, 0.0]]
"""

from __future__ import annotations

import numpy as np

from .dims import value_of
from .errors import UnsupportedError, as_numpy_would
from .ops import dtype_of, shape_of
from .primitives import is_traced


def copyto(dst, src, casting="same_kind", where=True):
    if isinstance(dst, np.ndarray):  # (a buffer made in the call is traced by the frontend)
        raise UnsupportedError("np.copyto into a NumPy array that is not an array of this "
                               "function (or an argument) is not supported; copy into one")
    try:
        np.copyto(_stand_in(dst), _stand_in(src), casting=casting, where=_stand_in(where))
    except (TypeError, ValueError) as error:
        raise as_numpy_would(error) from None
    # a Tracer: every name for it sees the write; a Tensor: a differentiable assignment
    dst[...] = src if where is True else np.where(where, src, dst)


def _stand_in(x):
    """An empty array with ``x``'s concrete shape and dtype (a NumPy array, Python number or
    list: itself, which NumPy converts by its own rules)."""
    if isinstance(x, (np.ndarray, np.generic)) or not hasattr(x, "dtype"):
        return x
    if is_traced(x) and x.aval.weak and not shape_of(x):
        return x.dtype.type(0).item()  # a run-time Python number: cast as Python's
    return np.zeros(tuple(value_of(dim) for dim in shape_of(x)), dtype_of(x))
