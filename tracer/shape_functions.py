"""NumPy functions that give arrays another shape without touching their values:
``np.atleast_1d``/``2d``/``3d`` and ``np.broadcast_arrays`` (listed in
``numpy_api.FUNCTIONS``).

Each is a ``reshape`` or a ``broadcast_to``, so gradients flow through them and a dynamic
dim stays symbolic.

>>> [a.shape for a in broadcast_arrays(np.ones((3, 1)), np.ones(4))]
[(3, 4), (3, 4)]
>>> atleast_3d(np.ones(5)).shape
(1, 5, 1)
"""

from __future__ import annotations

import numpy as np

from . import ops
from .shapes import broadcast_shapes

shape_of, ndim_of = ops.shape_of, ops.ndim_of


def _each(arrays, convert):
    """NumPy's ``atleast_*d`` convention: one array for one argument, else a tuple."""
    results = tuple(convert(a if hasattr(a, "shape") else np.asarray(a)) for a in arrays)
    return results[0] if len(results) == 1 else results


def _one_d(a):
    return ops.reshape(a, (1,)) if ndim_of(a) == 0 else a


def _two_d(a):
    if ndim_of(a) == 0:
        return ops.reshape(a, (1, 1))
    return ops.reshape(a, (1, shape_of(a)[0])) if ndim_of(a) == 1 else a


def _three_d(a):
    # NumPy's placement: a vector (n,) is (1, n, 1), a matrix (m, n) is (m, n, 1)
    if ndim_of(a) == 0:
        return ops.reshape(a, (1, 1, 1))
    if ndim_of(a) == 1:
        return ops.reshape(a, (1, shape_of(a)[0], 1))
    return ops.reshape(a, tuple(shape_of(a)) + (1,)) if ndim_of(a) == 2 else a


def atleast_1d(*arys):
    return _each(arys, _one_d)


def atleast_2d(*arys):
    return _each(arys, _two_d)


def atleast_3d(*arys):
    return _each(arys, _three_d)


def broadcast_arrays(*args, subok=False):
    """Every argument broadcast to their common shape (a tuple, as NumPy 2 returns). An
    argument already of that shape is itself, as in NumPy."""
    arrays = [a if hasattr(a, "shape") else np.asarray(a) for a in args]
    shape = tuple(broadcast_shapes(*(tuple(shape_of(a)) for a in arrays)))
    return tuple(a if tuple(shape_of(a)) == shape else _broadcast_view(a, shape)
                 for a in arrays)


def _broadcast_view(array, shape):
    from .numpy_api import view_without_steps  # cycle: numpy_api imports this module

    view = ops.broadcast_to(array, shape)
    view_without_steps(array, view)  # NumPy's is a view: a write into array shows in it
    return view
