"""``np.logaddexp.reduce`` and ``np.logaddexp2.reduce`` along one axis of static length.

HMM code in log space sums over the previous states with it, row by row of a trellis filled
in place: ``la[t] = np.logaddexp.reduce(la[t - 1][:, None] + log_A, axis=0) + log_B[:,
obs[t]]``, and the likelihood is ``np.logaddexp.reduce(la[-1])``. NumPy reduces a ufunc
without an identity by folding it along the axis in order (``acc = logaddexp(acc, x[i])``),
so this is that fold, unrolled over the axis, each step the traced ``np.logaddexp`` (NumPy's
formula; ``tracer/ufuncs.py``): the values are NumPy's up to the math library's ulps, which
the guard margins model, so an ``argmax`` over the result decides as NumPy does. A
``logsumexp`` formula (``max + log(sum(exp(x - max)))``) would round otherwise.

Only a float array, one axis (or a 1-d array's ``axis=None``) whose length is known and at
most ``MAX_UNROLLED``, and no ``initial=``, ``where=``, ``dtype=`` or ``out=``; other calls are
left to NumPy (the call runs eagerly). NumPy's own errors (an empty axis: the ufunc has no
identity; an axis out of range) come from running it on a stand-in of the same shape.

    >>> import numpy as np, tracejit as tj
    >>> f = tj.jit(lambda x: np.logaddexp.reduce(x, axis=1), cache="memory")
    >>> x = np.log(np.array([[1.0, 3.0], [2.0, 2.0]]))
    >>> bool(np.all(f(x) == np.logaddexp.reduce(x, axis=1)))
    True
"""

from __future__ import annotations

import numpy as np

from .dims import SymInt, value_of
from .errors import UnsupportedError, as_numpy_would
from .numpy_api import array_of
from .ops import dtype_of, ndim_of, shape_of

MAX_UNROLLED = 64


def _fold(ufunc):
    def reduce(array, axis=0, keepdims=False, **options):
        name = f"np.{ufunc.__name__}.reduce"
        if options:
            raise UnsupportedError(f"{name} with {', '.join(sorted(options))} is not "
                                   "supported on tracejit arrays")
        if type(array) in (list, tuple):
            array = array_of(array)  # np.logaddexp.reduce(terms) of a list of scalars
        if not hasattr(array, "dtype") or np.dtype(dtype_of(array)).kind != "f":
            raise UnsupportedError(f"{name} of a non-float array is not supported")
        shape = tuple(shape_of(array))
        try:  # NumPy's errors: an axis out of range, an empty axis (no identity), two axes
            ufunc.reduce(np.zeros(tuple(value_of(dim) for dim in shape), dtype_of(array)),
                         axis=axis)
        except (ValueError, TypeError, IndexError) as error:
            raise as_numpy_would(error) from None
        if type(axis) is tuple and len(axis) == 1:
            axis = axis[0]
        if axis is None and len(shape) == 1:
            axis = 0
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise UnsupportedError(f"{name} over axis={axis!r} is not supported; one axis is")
        axis = int(axis) % ndim_of(array)
        length = shape[axis]
        if isinstance(length, SymInt) or length > MAX_UNROLLED:
            raise UnsupportedError(f"{name} along an axis of dynamic length or longer than "
                                   f"{MAX_UNROLLED} is not supported")
        rows = np.moveaxis(array, axis, 0)
        total = rows[0]
        for position in range(1, length):
            total = ufunc(total, rows[position])  # NumPy's order: acc = f(acc, x[i])
        return np.expand_dims(total, axis) if keepdims else total

    return reduce


LOG_REDUCTIONS = {np.logaddexp: _fold(np.logaddexp), np.logaddexp2: _fold(np.logaddexp2)}
