"""Operators and NumPy-style methods shared by ``tracejit.Tensor`` and the tracer's proxies.

A class that inherits ``ArrayMethods`` and defines ``shape``, ``dtype`` and
``__tracejit_bind__`` behaves like an ndarray under Python operators, methods and the
NumPy protocols; every operation goes through ``bind`` to the op table.
"""

from __future__ import annotations

import numpy as np

from . import numpy_api, ops, ufunc_calls
from .errors import as_numpy_would
from .indexing import getitem
from .pending import known_kind
from .primitives import bind


def a_new_view(array, result):
    """NumPy's view methods return a new array even where nothing changes (``x.T`` of a
    1-d ``x``, ``x.reshape(x.shape)``, ``x[...]``): under the tracer, such a result that is
    ``array`` itself becomes a reshape to its own shape, a view the trace follows (writes
    through it reach ``array``), so a function returning both returns two objects, as
    eager does (``tracer/result_identity.py``). A ``Tensor`` keeps returning itself."""
    if result is not array or not hasattr(array, "ir_var"):
        return result
    kind = type(known_kind(array.raw_value))
    if kind is not np.ndarray and not (kind is type(None) and array.shape and not getattr(
            array.context, "tensor_arguments", True)):  # (a loop's pending result: unknown)
        return result
    return bind(ops.reshape_p, array, shape=tuple(ops.shape_of(array)))


def _binary(prim):
    # An operand whose class sets __array_ufunc__ = None opts out of array arithmetic, as
    # with ndarray: Python then asks its reflected method (n * x.strides[0]: strided_views)
    def forward(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented
        return bind(prim, self, other)

    def reflected(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented
        return bind(prim, other, self)

    forward.__name__ = reflected.__name__ = prim.name
    return forward, reflected


def _keeping_quotient(prim, sign):
    """``+``/``-`` as ``_binary``'s, where a Python int beside ``n / d`` of dims keeps the
    exact quotient for ``int()``: ``int(1 + (n_H_prev - f) / stride)`` (deeplearning.ai's
    ``pool_forward``) sizes an output as ``int((n - f) / s) + 1`` does, a dim, so loops over
    it stay loops (``dims.integer_quotient``)."""
    def forward(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented
        result = bind(prim, self, other)
        if type(other) is int and hasattr(self, "quotient"):
            _shift_quotient(result, self.quotient, sign * other, 1)
        return result

    def reflected(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented
        result = bind(prim, other, self)
        if type(other) is int and hasattr(self, "quotient"):
            _shift_quotient(result, self.quotient, other, sign)
        return result

    forward.__name__ = reflected.__name__ = prim.name
    return forward, reflected


def _shift_quotient(result, quotient, offset, sign):
    """``result = offset + sign * n / d`` as the quotient ``(offset * d + sign * n) / d``
    (exact while the float64 sum is: offsets beyond 2**31 are left to the guard)."""
    numerator, denominator = quotient
    if abs(offset) < 2**31:
        result.quotient = (offset * denominator + sign * numerator, denominator)


def _is_python_two(value):
    """``2`` as a Python int, or a run-time Python int that is 2 (guarded)."""
    if type(value) is int:
        return value == 2
    aval = getattr(value, "aval", None)
    if aval is not None and aval.weak and aval.dtype.kind == "i" and not aval.shape:
        return bool(value == 2)
    return False


def _is_numpy_scalar(array):
    """Whether a 0-d traced value stands for a NumPy scalar (``x[0]``), not a 0-d array."""
    if array.shape:
        return False
    value = getattr(array, "raw_value", None)
    value = getattr(value, "like", value)  # a pending value: a value of its kind
    return isinstance(value, np.generic)


def _axes_arguments(axes):
    """``t.reshape(2, 3)`` and ``t.reshape((2, 3))`` both mean shape ``(2, 3)``."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        return tuple(axes[0])
    return axes


class ArrayMethods:
    __slots__ = ()
    # NumPy defers binary operators to us (ndarray + tensor -> tensor).
    __array_priority__ = 1000

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ufunc_calls.array_ufunc(ufunc, method, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return numpy_api.array_function(func, args, kwargs)

    __add__, __radd__ = _keeping_quotient(ops.add_p, 1)
    __sub__, __rsub__ = _keeping_quotient(ops.subtract_p, -1)
    __mul__, __rmul__ = _binary(ops.multiply_p)
    __truediv__, __rtruediv__ = _binary(ops.true_divide_p)
    __floordiv__, __rfloordiv__ = _binary(ops.floor_divide_p)
    __mod__, __rmod__ = _binary(ops.mod_p)

    def __divmod__(self, other):  # np.divmod: floor quotient and the remainder NumPy has
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __pow__(self, other):
        # NumPy's ``array ** 2`` (a Python int) is np.square (``fast_scalar_power``): the
        # same values, but a bool array's square is int8 where np.power gives int64. A
        # NumPy scalar's ``**`` is scalar math: power.
        if self.dtype == np.bool_ and _is_python_two(other) and not _is_numpy_scalar(self):
            return np.square(self)
        return bind(ops.power_p, self, other)

    __rpow__ = _binary(ops.power_p)[1]
    __matmul__, __rmatmul__ = _binary(ops.matmul_p)
    __lt__, __gt__ = _binary(ops.less_p)[0], _binary(ops.greater_p)[0]
    __le__, __ge__ = _binary(ops.less_equal_p)[0], _binary(ops.greater_equal_p)[0]
    __eq__, __ne__ = _binary(ops.equal_p)[0], _binary(ops.not_equal_p)[0]
    __hash__ = object.__hash__  # by identity, as torch.Tensor: usable as a dict key

    def __and__(self, other):
        return numpy_api.UFUNC_COMPOSITES[np.bitwise_and](self, other)

    def __or__(self, other):
        return numpy_api.UFUNC_COMPOSITES[np.bitwise_or](self, other)

    def __xor__(self, other):
        return numpy_api.UFUNC_COMPOSITES[np.bitwise_xor](self, other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    # x << k, x >> k: NumPy's ufuncs, so an unsupported one is refused as np.left_shift
    # is (the call runs eagerly), not an internal error
    def __lshift__(self, other):
        return np.left_shift(self, other)

    def __rlshift__(self, other):
        return np.left_shift(other, self)

    def __rshift__(self, other):
        return np.right_shift(self, other)

    def __rrshift__(self, other):
        return np.right_shift(other, self)

    def __invert__(self):
        return numpy_api.UFUNC_COMPOSITES[np.invert](self)

    def __neg__(self):
        return bind(ops.neg_p, self)

    def __pos__(self):
        return np.positive(self)  # as a ufunc call: +x.sum() is a NumPy scalar, as eager's

    def __abs__(self):
        return bind(ops.abs_p, self)

    def __getitem__(self, index):
        return getitem(self, index)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # --- shape -------------------------------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return numpy_api.size(self)

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):  # a dim times the itemsize, when the size is one
        return self.size * self.dtype.itemsize

    @property
    def T(self):  # noqa: N802 - NumPy's name
        return a_new_view(self, ops.transpose(self))

    def reshape(self, *shape, order="C"):
        return a_new_view(self, numpy_api.reshape(self, _axes_arguments(shape), order=order))

    def transpose(self, *axes):
        return a_new_view(self, ops.transpose(self, _axes_arguments(axes) or None))

    def swapaxes(self, axis1, axis2):
        return a_new_view(self, ops.swapaxes(self, axis1, axis2))

    def squeeze(self, axis=None):  # (nothing to squeeze: NumPy's is the array itself)
        return numpy_api.squeeze(self, axis)

    def flatten(self, order="C"):
        return numpy_api.copy(numpy_api.ravel(self, order))

    def ravel(self, order="C"):
        return a_new_view(self, numpy_api.ravel(self, order))

    def fill(self, value):
        """``x.fill(v)``: every element set to the scalar ``v`` in place, as ``x[...] = v``
        (a view's base too); a sequence or an array of one element is NumPy's ValueError."""
        if (value.ndim if hasattr(value, "ndim") else np.ndim(value)) != 0:
            raise as_numpy_would(ValueError("setting an array element with a sequence."))
        self[...] = value

    def astype(self, dtype, copy=True):
        return numpy_api.astype(self, dtype, copy=copy)

    def copy(self, order="C"):
        return numpy_api.copy(self, order)

    # --- reductions and friends --------------------------------------------------------
    def sum(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
        return numpy_api.sum(self, axis, dtype, out, keepdims, initial, where)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
        return numpy_api.prod(self, axis, dtype, out, keepdims, initial, where)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
        return numpy_api.mean(self, axis, dtype, out, keepdims, where=where)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True):
        return numpy_api.var(self, axis, dtype, out, ddof, keepdims, where=where)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True):
        return numpy_api.std(self, axis, dtype, out, ddof, keepdims, where=where)

    def max(self, axis=None, out=None, keepdims=False, initial=None, where=True):
        return numpy_api.max(self, axis, out, keepdims, initial, where)

    def min(self, axis=None, out=None, keepdims=False, initial=None, where=True):
        return numpy_api.min(self, axis, out, keepdims, initial, where)

    def argmax(self, axis=None, keepdims=False):
        return numpy_api.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False):
        return numpy_api.argmin(self, axis=axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False):
        return numpy_api.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        return numpy_api.all(self, axis=axis, keepdims=keepdims)

    def clip(self, min=None, max=None):  # noqa: A002 - NumPy's names
        return numpy_api.clip(self, min, max)

    def round(self, decimals=0, out=None):
        return numpy_api.round_(self, decimals, out)

    def dot(self, other):
        return numpy_api.dot(self, other)

    def cumsum(self, axis=None, dtype=None):
        return numpy_api.cumsum(self, axis=axis, dtype=dtype)

    def diagonal(self, offset=0, axis1=0, axis2=1):  # (a read-only view, as NumPy's)
        return numpy_api.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return numpy_api.trace(self, offset, axis1, axis2, dtype, out)

    def argsort(self, axis=-1, kind=None, order=None):
        return numpy_api.argsort(self, axis=axis, kind=kind, order=order)

    def repeat(self, repeats, axis=None):
        return numpy_api.repeat(self, repeats, axis=axis)

    def take(self, indices, axis=None, out=None, mode="raise"):
        # x.take(indices=range(i, min(i + bs, n)), axis=0): SkalskiP's generate_batches;
        # np.take's path, which turns a range or list into an index array as NumPy does
        return np.take(self, indices, axis=axis, out=out, mode=mode)
