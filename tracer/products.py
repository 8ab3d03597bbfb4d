"""Products of arrays composed from ``matmul``, ``tensordot`` and broadcasts: ``np.inner``,
``np.vdot``, ``np.kron``, ``np.cross`` (3-vectors), ``np.linalg.matrix_power`` (NumPy's
own order of squarings) and ``np.linalg.multi_dot`` (NumPy's own parenthesization), listed
in ``FUNCTIONS``.

>>> import tracejit as tj
>>> f = tj.jit(lambda a: (np.inner(a, a), np.linalg.matrix_power(a, 3)), cache="memory")
>>> [r.tolist() for r in f(np.array([[1.0, 1.0], [0.0, 1.0]]))]
[[[2.0, 1.0], [1.0, 1.0]], [[1.0, 3.0], [0.0, 1.0]]]
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .diagonals import diagonal_offsets
from .einsum import tensordot
from .errors import UnsupportedError, as_numpy_would
from .primitives import as_array

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


def inner(a, b):
    a, b = as_array(a), as_array(b)
    if ndim_of(a) == 0 or ndim_of(b) == 0:
        return np.multiply(a, b)
    if ndim_of(a) == 1 and ndim_of(b) <= 2:
        return np.dot(b, a) if ndim_of(b) == 2 else np.dot(a, b)
    # (the einsum path: NumPy's inner of N-D operands sums by its own dot loops, not BLAS)
    return tensordot(a, b, axes=([-1], [-1]))


def vdot(a, b):
    a, b = as_array(a), as_array(b)
    if "c" in (np.dtype(dtype_of(a)).kind, np.dtype(dtype_of(b)).kind):
        raise UnsupportedError("np.vdot of complex arrays is not supported")
    return np.dot(np.ravel(a), np.ravel(b))


def kron(a, b):
    """Each element of ``a`` times all of ``b``: ``a``'s axes interleaved with ``b``'s
    in one broadcast product, then merged pairwise."""
    a, b = as_array(a), as_array(b)
    rank = max(ndim_of(a), ndim_of(b))
    a_shape = (1,) * (rank - ndim_of(a)) + tuple(shape_of(a))
    b_shape = (1,) * (rank - ndim_of(b)) + tuple(shape_of(b))
    spread_a = ops.reshape(a, tuple(dim for size in a_shape for dim in (size, 1)))
    spread_b = ops.reshape(b, tuple(dim for size in b_shape for dim in (1, size)))
    product = np.multiply(spread_a, spread_b)
    return ops.reshape(product, tuple(x * y for x, y in zip(a_shape, b_shape)))


def matrix_power(a, n):
    """NumPy's steps: ``n`` in 0-3 directly, else binary decomposition, squaring ``z``
    and multiplying into the result at each set bit (float results match bit for bit)."""
    a = as_array(a)
    if ndim_of(a) < 2 or shape_of(a)[-1] != shape_of(a)[-2]:
        raise as_numpy_would(np.linalg.LinAlgError(
            f"{ndim_of(a)}-dimensional array given. Array must be at least two-dimensional"
            if ndim_of(a) < 2 else "Last 2 dimensions of the array must be square"))
    try:
        n = operator.index(n)
    except TypeError as error:
        raise as_numpy_would(TypeError("exponent must be an integer")) from error
    if n < 0:
        raise UnsupportedError("np.linalg.matrix_power with a negative exponent needs an "
                               "inverse, which tracejit does not trace")
    if n == 0:
        size = shape_of(a)[-1]
        eye = (diagonal_offsets(size, size, a) == 0).astype(dtype_of(a))
        return np.broadcast_to(eye, shape_of(a)).copy()
    if n == 1:
        return a.copy()
    if n == 2:
        return np.matmul(a, a)
    if n == 3:
        return np.matmul(np.matmul(a, a), a)
    z = result = None
    while n > 0:
        z = a if z is None else np.matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else np.matmul(result, z)
    return result


def multi_dot(arrays, *, out=None):
    if out is not None:
        raise UnsupportedError("np.linalg.multi_dot(..., out=...) is not supported")
    arrays = [as_array(array) for array in arrays]
    count = len(arrays)
    if count < 2:
        raise as_numpy_would(ValueError("Expecting at least two arrays."))
    if count == 2:
        return np.dot(arrays[0], arrays[1])
    first_ndim, last_ndim = ndim_of(arrays[0]), ndim_of(arrays[-1])
    if first_ndim == 1:
        arrays[0] = ops.reshape(arrays[0], (1, -1))
    if last_ndim == 1:
        arrays[-1] = ops.reshape(arrays[-1], (-1, 1))
    if any(ndim_of(array) != 2 for array in arrays):
        raise as_numpy_would(np.linalg.LinAlgError("multi_dot: arrays must be 2-dimensional"))
    if count == 3:
        result = _three(*arrays)
    else:
        sizes = [int(shape_of(array)[0]) for array in arrays] + [int(shape_of(arrays[-1])[1])]
        order = _chain_order(sizes)
        result = _in_order(arrays, order, 0, count - 1)
    if first_ndim == 1 and last_ndim == 1:
        return result[0, 0]
    if first_ndim == 1 or last_ndim == 1:
        return np.ravel(result)
    return result


def _three(a, b, c):
    # NumPy's cost comparison (ints: a symbolic dim is specialized under guards)
    a0, a1b0 = (int(dim) for dim in shape_of(a))
    b1c0, c1 = (int(dim) for dim in shape_of(c))
    cost1 = a0 * b1c0 * (a1b0 + c1)
    cost2 = a1b0 * c1 * (a0 + b1c0)
    if cost1 < cost2:
        return np.dot(np.dot(a, b), c)
    return np.dot(a, np.dot(b, c))


def _chain_order(sizes):
    """NumPy's matrix-chain dynamic program (``_multi_dot_matrix_chain_order``)."""
    count = len(sizes) - 1
    cost = np.zeros((count, count), dtype=np.float64)
    split = np.empty((count, count), dtype=np.intp)
    for length in range(1, count):
        for i in range(count - length):
            j = i + length
            cost[i, j] = np.inf
            for k in range(i, j):
                candidate = cost[i, k] + cost[k + 1, j] + sizes[i] * sizes[k + 1] * sizes[j + 1]
                if candidate < cost[i, j]:
                    cost[i, j] = candidate
                    split[i, j] = k
    return split


def _in_order(arrays, order, i, j):
    if i == j:
        return arrays[i]
    return np.dot(_in_order(arrays, order, i, order[i, j]),
                  _in_order(arrays, order, order[i, j] + 1, j))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """NumPy's products for two arrays of 3-vectors (each component ``a1 * b2 - a2 * b1``,
    rounded as NumPy's); 2-vectors (deprecated in NumPy 2) are refused."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = as_array(a), as_array(b)
    if ndim_of(a) < 1 or ndim_of(b) < 1:
        raise as_numpy_would(ValueError("At least one array has zero dimension"))
    a, b = np.moveaxis(a, axisa, -1), np.moveaxis(b, axisb, -1)
    if shape_of(a)[-1] not in (2, 3) or shape_of(b)[-1] not in (2, 3):
        raise as_numpy_would(ValueError("incompatible dimensions for cross product\n"
                                        "(dimension must be 2 or 3)"))
    if shape_of(a)[-1] == 2 or shape_of(b)[-1] == 2:
        raise UnsupportedError("np.cross of 2-vectors (deprecated in NumPy 2) is not "
                               "supported")
    dtype = np.promote_types(dtype_of(a), dtype_of(b))
    if dtype == np.bool_:
        raise as_numpy_would(TypeError("numpy boolean subtract, the `-` operator, is not "
                                       "supported, use the bitwise_xor, the `^` operator, or "
                                       "the logical_xor function instead."))
    a, b = a.astype(dtype), b.astype(dtype)
    a0, a1, a2 = (a[..., i] for i in range(3))
    b0, b1, b2 = (b[..., i] for i in range(3))
    product = np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return np.moveaxis(product, -1, axisc)


FUNCTIONS = {
    np.cross: cross,
    np.inner: inner,
    np.vdot: vdot,
    np.kron: kron,
    np.linalg.matrix_power: matrix_power,
    np.linalg.multi_dot: multi_dot,
}
