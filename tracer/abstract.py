"""Abstract values: what the shape/dtype rules of the op table compute with.

An ``AbstractArray`` is an array's shape and dtype without its data. Python scalars are
*weak*: ``x_f32 * 2.0`` stays float32, as in NumPy 2 (NEP 50).

>>> abstractify(np.zeros((2, 3), np.float32))
AbstractArray(shape=(2, 3), dtype=float32)
>>> abstractify(2.0)
AbstractArray(shape=(), dtype=float64, weak)
"""

from __future__ import annotations

import numpy as np

PYTHON_SCALARS = (bool, int, float)
# The dtypes compiled code holds (codegen/dtypes.py): arrays of others run eagerly.
COMPILED_DTYPES = tuple(map(np.dtype, ("bool", "int32", "int64", "float32", "float64")))
# Argument dtypes compiled code reads only to convert them (uint8 images: img / 255.0);
# a use that computes in them runs eagerly (codegen/narrow_inputs.py). Not float16: the
# trace's own composites (np.mean) would round float16 unlike NumPy on the traced call.
NARROW_DTYPES = tuple(map(np.dtype, ("int8", "uint8", "int16", "uint16", "uint32", "uint64")))
# NumPy scalars an argument may be as a run-time input (``lr = np.float32(0.01)``), by
# type name: the entry guard checks the type, the kernel reads the value (a float16
# scalar stays a constant).
NUMPY_SCALARS = {dtype.type.__name__: dtype.type for dtype in COMPILED_DTYPES}


def is_numpy_number(value):
    """A NumPy scalar of a type in ``NUMPY_SCALARS`` (``np.float32(0.5)``; not np.float16).

    >>> is_numpy_number(np.float32(0.5)), is_numpy_number(np.float16(0.5)), is_numpy_number(0.5)
    (True, False, False)
    """
    return NUMPY_SCALARS.get(type(value).__name__) is type(value)


def is_number_argument(value):
    """Whether an argument may be traced as a run-time scalar input rather than a
    constant: a Python int or float, or a NumPy number of a type in ``NUMPY_SCALARS``.

    >>> is_number_argument(0.5), is_number_argument(np.float32(0.5)), is_number_argument(True)
    (True, True, False)
    """
    return type(value) in (int, float) or is_numpy_number(value)


class AbstractArray:
    __slots__ = ("shape", "dtype", "weak")

    def __init__(self, shape, dtype, weak=False):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.weak = weak

    @property
    def ndim(self):
        return len(self.shape)

    def __eq__(self, other):
        return (
            isinstance(other, AbstractArray)
            and self.dtype == other.dtype
            and self.weak == other.weak
            and len(self.shape) == len(other.shape)
            and all(a is b or a == b for a, b in zip(self.shape, other.shape))
        )

    def __hash__(self):
        return hash((len(self.shape), self.dtype, self.weak))

    def __repr__(self):
        weak = ", weak" if self.weak else ""
        return f"AbstractArray(shape={self.shape}, dtype={self.dtype}{weak})"

    def dtype_for_promotion(self):
        """What ``ufunc.resolve_dtypes`` expects: the dtype, or the Python type if weak."""
        if self.weak and self.dtype.kind in "if":
            # Python bools promote like np.bool_ already, so only int and float are weak.
            return int if self.dtype.kind == "i" else float
        return self.dtype


_WEAK_SAMPLES = {"b": False, "i": 0, "f": 0.0}


def result_dtype(*avals):
    """``np.result_type`` over abstract values, Python scalars weak (NEP 50)."""
    return np.result_type(
        *(_WEAK_SAMPLES[a.dtype.kind] if a.weak else a.dtype for a in avals)
    )


def abstractify(value):
    """The abstract value of a concrete array, scalar, or anything with ``.aval``."""
    aval = getattr(value, "aval", None)
    if aval is not None:
        return aval
    if type(value) in PYTHON_SCALARS:
        return AbstractArray((), np.dtype(type(value)), weak=True)
    value = np.asarray(value)
    return AbstractArray(value.shape, value.dtype)
