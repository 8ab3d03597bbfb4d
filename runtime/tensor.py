"""``Tensor``: a NumPy array with PyTorch's dynamic autograd.

Operators, methods and NumPy functions (``np.tanh(t)``, ``np.concatenate([t, u])``) all
reach the op table through ``bind``; when gradients are wanted the operation is recorded
on the tape (``tracejit.runtime.autograd``).

>>> x = tensor([1.0, -1.0, 2.0], requires_grad=True)
>>> y = np.where(x > 0, x * 2, x - 2)
>>> y.backward(np.ones(3))
>>> x.grad
tensor([2., 1., 2.])
"""

from __future__ import annotations

import sys
import weakref

import numpy as np

from tracejit.tracer import numpy_api, ufunc_calls
from tracejit.tracer.array_methods import ArrayMethods
from tracejit.tracer.errors import TracejitError
from tracejit.tracer.locations import is_tracejit, line_prefix, user_location
from tracejit.tracer.ops import scatter_add

from . import autograd, eager_ops
from .autograd import IndexNode, PrimitiveNode

_DEFAULT_REPR_DTYPES = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_))


class TensorError(TracejitError, TypeError):
    """Data that cannot become a Tensor (object arrays, strings, ragged lists)."""


def as_array(data, dtype=None):
    """``data`` as a numeric ndarray, or a ``TensorError`` that says what was wrong."""
    if isinstance(data, Tensor):
        data = data._data
    if type(data) is np.ndarray and data.dtype.kind in "biuf" and dtype is None:
        return data
    try:
        array = np.asarray(data, dtype=dtype)
    except ValueError as error:
        if "inhomogeneous" in str(error) or "sequence" in str(error):
            raise TensorError(
                "tensor(): the data is a ragged nested sequence (rows of different lengths); "
                "pad the rows to one length or build one tensor per row"
            ) from None
        raise TensorError(f"tensor(): cannot convert the data to an array: {error}") from None
    except TypeError as error:
        raise TensorError(f"tensor(): cannot convert the data to an array: {error}") from None
    if array.dtype.kind not in "biuf":
        kind = {"O": "Python objects", "U": "strings", "S": "bytes"}.get(
            array.dtype.kind, f"dtype {array.dtype}"
        )
        raise TensorError(
            f"tensor(): the data holds {kind} (dtype {array.dtype}); tensors hold booleans, "
            "integers and floats - convert the data to numbers first"
        )
    return array


def _check_can_require_grad(dtype):
    if np.dtype(dtype).kind not in "fc":
        raise RuntimeError(
            f"Only Tensors of floating point dtype can require gradients (got {dtype}); "
            "cast with .astype(np.float32) or .astype(np.float64) first"
        )


def _asked_by_user_code():
    """Whether the code asking a Tensor for its plain array is the user's (or NumPy on the
    user's behalf), not tracejit's own, which unwraps knowingly. The front end's hooks
    call what the user's code calls, so they count as the user."""
    filename = sys._getframe(2).f_code.co_filename
    return not is_tracejit(filename) or filename.endswith(_HOOK_FILES)


_HOOK_FILES = ("frontend.py", "eager_rewrite.py")


def _lost_gradient_message():
    location = user_location(skip=3)
    where = line_prefix(location)
    source = f"\n    {location.source}" if location and location.source else ""
    return (
        f"{where}a Tensor that requires grad was turned into a plain NumPy array (written "
        "into an ndarray, or passed to np.asarray or a NumPy function Tensors do not "
        "support); its gradient would be lost. Build the buffer from the Tensor "
        "(np.zeros_like(x), np.stack, np.concatenate), run the function through "
        "tracejit.value_and_grad or jit (they make buffers filled in place differentiable), "
        f"or use x.detach() / with no_grad() if no gradient is wanted{source}"
    )


class VersionCounter:
    """How many times a buffer was written in place. A Tensor shares it with its views
    and its ``detach()``, as in PyTorch: a write through any of them must invalidate the
    graphs that saved the others, or backward would silently use the new values."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0


class Tensor(ArrayMethods):
    """An n-dimensional array that can record its history for ``backward()``."""

    __slots__ = ("_data", "requires_grad", "_grad", "_node", "_versions", "_view_of",
                 "_views", "__weakref__")
    __tracejit_priority__ = 1

    def __init__(self, data, requires_grad=False):
        self._data = as_array(data)
        self._grad = None
        self._node = None
        self._versions = VersionCounter()
        self._view_of = None
        self._views = None
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @property
    def data(self):
        """The ndarray this Tensor holds (shared, not copied). Assigning replaces it without
        history, as in PyTorch: ``p.data = p.data - lr * p.grad`` (a Tensor, since ``grad``
        is one) stores that Tensor's array.

        >>> p = tensor([1.0, 2.0], requires_grad=True)
        >>> (p * p).sum().backward()
        >>> p.data -= 0.25 * p.grad
        >>> type(p.data).__name__, p.data.tolist(), p.requires_grad
        ('ndarray', [0.5, 1.0], True)
        """
        return self._data

    @data.setter
    def data(self, value):
        self._data = as_array(value)

    @property
    def grad(self):
        """The gradient ``backward()`` accumulated (a Tensor), or None. Assign None (or
        a Tensor of this shape and dtype) to reset it, as in PyTorch; an ndarray is
        wrapped (not copied: later backward calls add into it).

        >>> w = tensor([1.0, 2.0], requires_grad=True)
        >>> w.grad = np.zeros(2)
        >>> (w * w).sum().backward()
        >>> w.grad
        tensor([2., 4.])
        """
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                value = Tensor._wrap(as_array(value))
            if value.shape != self.shape or value.dtype != self.dtype:
                # backward adds into it in place: another shape would broadcast there or
                # fail far from here, another dtype cast the sums
                raise RuntimeError(
                    f"assigned grad has data of a different size or type: a {value.dtype} "
                    f"array of shape {value.shape} for a {self.dtype} tensor of shape "
                    f"{self.shape}"
                )
        self._grad = value

    @classmethod
    def _wrap(cls, array, versions=None):
        tensor = cls.__new__(cls)
        tensor._data = array
        tensor.requires_grad = False
        tensor._grad = None
        tensor._node = None
        tensor._versions = VersionCounter() if versions is None else versions
        tensor._view_of = None
        tensor._views = None
        return tensor

    @property
    def _version(self):
        return self._versions.value

    @_version.setter
    def _version(self, value):
        self._versions.value = value

    # --- the one place Tensors meet the op table ----------------------------------------
    @staticmethod
    def __tracejit_bind__(prim, args, params):
        values = tuple(arg._data if isinstance(arg, Tensor) else arg for arg in args)
        out = prim.impl(*values, **params)
        if type(out) is not np.ndarray:
            out = np.asarray(out)
        result = Tensor._wrap(out, _versions_of_base(out, args))
        base = args[0] if args else None
        if (isinstance(base, Tensor) and len(args) == 1 and out.base is not None
                and out.flags.writeable and np.may_share_memory(out, base.data)):
            # y.reshape(2, 2), y.T: NumPy's views, so in-place updates write through to y
            # (and see y's rebinds), as those of y[1:] do
            result._view_of = (base, ViewOp(prim, params))
            base._note_view(result)
        if prim.vjp is not None and out.dtype.kind == "f" and _grad_mode.enabled:
            parents = tuple(
                (arg._node or arg) if isinstance(arg, Tensor) and arg.requires_grad else None
                for arg in args
            )
            if any(parent is not None for parent in parents):
                # The output too: VJPs such as exp's read it.
                saved = tuple(
                    (arg._versions, arg._versions.value, arg.data.dtype, arg.data.shape)
                    for arg in (*args, result)
                    if isinstance(arg, Tensor)
                )
                result._node = PrimitiveNode(prim, params, values, out, parents, saved)
                result.requires_grad = True
        return result

    # NumPy calls only Tensors differentiate (np.arctan2, np.linalg.inv, det): recorded on
    # the tape like a primitive; everything else is the op table's (ArrayMethods)
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        op = eager_ops.UFUNCS.get(ufunc)
        if op is not None and method == "__call__" and not kwargs:
            return Tensor.__tracejit_bind__(op, inputs, {})
        return ufunc_calls.array_ufunc(ufunc, method, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        op = eager_ops.FUNCTIONS.get(func)
        if op is not None and not kwargs:
            return Tensor.__tracejit_bind__(op, args, {})
        return numpy_api.array_function(func, args, kwargs)

    # --- array facts -------------------------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    def item(self):
        return self.data.item()

    def numpy(self):
        """The underlying array (shared, not copied; gradients are not tracked on it)."""
        return self.data

    def tolist(self):
        return self.data.tolist()

    def __array__(self, dtype=None, copy=None):
        if self.requires_grad and _grad_mode.enabled and _asked_by_user_code():
            # NumPy asks for the plain array when a Tensor is written into an ndarray
            # (h[:] = x * 2) or passed to a function Tensors do not support: what it
            # computes from it has no history, so the gradient would silently be lost.
            raise TensorError(_lost_gradient_message())
        if copy:
            return np.array(self.data, dtype=dtype, copy=True)
        return self.data if dtype is None else self.data.astype(dtype, copy=False)

    def __bool__(self):
        return bool(self.data)

    def __float__(self):
        return float(self.data)

    def __int__(self):
        return int(self.data)

    def __index__(self):
        if self.data.dtype.kind not in "iu" or self.data.ndim:
            raise TypeError("only integer scalar tensors can be converted to a scalar index")
        return int(self.data)

    # --- autograd ----------------------------------------------------------------------
    @property
    def grad_fn(self):
        return self._node

    @property
    def is_leaf(self):
        return self._node is None

    def requires_grad_(self, requires_grad=True):
        if not self.is_leaf:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables; use .detach() "
                "to get a leaf"
            )
        if requires_grad:
            _check_can_require_grad(self.dtype)
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self):
        """Keep this non-leaf Tensor's gradient in ``.grad`` at ``backward()`` (a leaf's is
        kept anyway), as PyTorch's.

        >>> w = tensor([1.0, 2.0], requires_grad=True)
        >>> hidden = w * 3
        >>> hidden.retain_grad()
        >>> (hidden * hidden).sum().backward()
        >>> hidden.grad, w.grad
        (tensor([ 6., 12.]), tensor([18., 36.]))
        """
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._node is not None:
            self._node.retained = weakref.ref(self)

    def zero_(self):
        """Fill with zeros in place (``w.grad.zero_()``), as PyTorch's: a leaf that requires
        grad only under ``no_grad()``; a tracked non-leaf passes no gradient back."""
        if not (_grad_mode.enabled and self.requires_grad):
            self.data[...] = 0
            self._version += 1
            return self
        if self.is_leaf:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation; "
                "update it under `with no_grad():` or use an out-of-place operation"
            )
        self._assign(np.arange(self.size).reshape(self.shape), 0)
        return self

    def detach(self):
        """The same data (and version counter), cut off from the graph."""
        return Tensor._wrap(self.data, self._versions)

    def backward(self, gradient=None, retain_graph=False):
        """Accumulate gradients into the ``.grad`` of every leaf this tensor depends on.

        A scalar output needs no ``gradient``; any other needs one of its shape. The graph's
        saved values are freed afterwards unless ``retain_graph=True``.
        """
        autograd.backward(self, gradient, retain_graph)

    def __getitem__(self, index):
        # NumPy's own indexing is the semantics, and fastest; with a gradient to record,
        # one IndexNode scatters it back.
        plain = _plain_index(index)
        result = self.data[plain]
        if type(result) is not np.ndarray:
            result = Tensor._wrap(np.asarray(result))
        else:
            view = result.base is not None and np.may_share_memory(result, self.data)
            result = Tensor._wrap(result, self._versions if result.base is not None else None)
            if view:
                result._view_of = (self, plain)  # in-place updates write through to self
                self._note_view(result)  # and see self's rebinds
        if self.requires_grad and _grad_mode.enabled:
            result._node = IndexNode(self._node or self, plain, self.data.shape,
                                     self.data.dtype)
            result.requires_grad = True
        return result

    # --- in-place updates --------------------------------------------------------------
    def _inplace(self, operation, other):
        other_value = other.data if isinstance(other, Tensor) else other
        tracked = _grad_mode.enabled and (
            self.requires_grad or (isinstance(other, Tensor) and other.requires_grad)
        )
        if not tracked:
            # NumPy's in-place semantics: same buffer, same dtype, its casting rules.
            getattr(np, operation)(self.data, other_value, out=self.data)
            self._version += 1
            return self
        if self.is_leaf and self.requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation; "
                "update it under `with no_grad():` or use an out-of-place operation"
            )
        result = getattr(np, operation)(self, other)
        if result.dtype != self.dtype:
            raise TypeError(
                f"Cannot cast ufunc '{operation}' output from dtype('{result.dtype}') to "
                f"dtype('{self.dtype}') with casting rule 'same_kind'"
            )
        # Rebind instead of writing into the buffer: nodes may have saved the old values.
        self._rebind(result)
        return self

    def _rebind(self, result):
        view_of = self._view_of
        if view_of is not None and view_of[0].is_leaf and view_of[0].requires_grad:
            # NumPy would change the leaf, which cannot take history; rebinding the view
            # alone left it apart from its base (v = w[1:]; v *= 10: w unchanged)
            raise RuntimeError(
                "a view of a leaf Variable that requires grad is being used in an in-place "
                "operation; update the leaf under `with no_grad():`, or take the view of a "
                "copy (w * 1.0)"
            )
        if view_of is not None:
            # v = y[1:3]; v *= 2 changes y in NumPy and PyTorch: a differentiable
            # assignment into y, and v is y[1:3] again, a view of y's new buffer (later
            # writes under no_grad reach y too).
            base, index = view_of
            if isinstance(index, ViewOp):
                base._assign(index.positions(base.shape), result)
            else:
                base[index] = result
            result = _read_view(base, index)
        else:
            view_of = None  # a new buffer, no longer a view of what it viewed before
        # The new buffer's counter too: result's node saved it.
        self.data, self._node, self._versions = result.data, result._node, result._versions
        self._view_of = view_of
        self.requires_grad = True
        self._refresh_views()

    def _note_view(self, view):
        views = self._views
        if views is None:
            views = self._views = []
        views.append(weakref.ref(view))
        if len(views) >= 16 and not len(views) & (len(views) - 1):
            # dead views dropped at every power of two: O(1) a view, amortized (a loop
            # taking x[t] for every t keeps all of them alive)
            views[:] = [ref for ref in views if ref() is not None]

    def _refresh_views(self):
        """Views taken of this Tensor before it was rebound to a new buffer (``front =
        base[0:2]; base += 10``, tracked) are views of the new one again, as NumPy's and
        PyTorch's views see every write to their base; else they kept the old values."""
        for ref in self._views or ():
            view = ref()
            if view is None or view._view_of is None or view._view_of[0] is not self:
                continue
            fresh = _read_view(self, view._view_of[1])
            view.data, view._node, view._versions = fresh.data, fresh._node, fresh._versions
            view.requires_grad = fresh.requires_grad
            view._refresh_views()

    def __iadd__(self, other):
        return self._inplace("add", other)

    def __isub__(self, other):
        return self._inplace("subtract", other)

    def __imul__(self, other):
        return self._inplace("multiply", other)

    def __itruediv__(self, other):
        return self._inplace("true_divide", other)

    def __setitem__(self, index, value):
        value_is_tracked = isinstance(value, Tensor) and value.requires_grad
        if not (_grad_mode.enabled and (self.requires_grad or value_is_tracked)):
            self.data[index] = value.data if isinstance(value, Tensor) else value
            self._version += 1
            return
        if self.is_leaf and self.requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation; "
                "update it under `with no_grad():` or build a new tensor with np.where"
            )
        self._assign(np.arange(self.size).reshape(self.shape)[index], value)

    def _assign(self, selected, value):
        """Differentiable assignment of ``value`` (broadcast to ``selected``'s shape) to
        the flat positions ``selected``: keep self where they do not point, scatter the
        value where they do."""
        positions = selected.ravel()
        if np.unique(positions).size != positions.size:
            raise IndexError(
                "a differentiable assignment needs an index without repeated positions"
            )
        mask = np.zeros(self.size, bool)
        mask[positions] = True
        flat_value = np.reshape(np.broadcast_to(value, selected.shape), (-1,))
        scattered = scatter_add(flat_value, positions, 0, self.size)
        result = np.where(mask, scattered, np.reshape(self, (-1,))).reshape(self.shape)
        self._rebind(result.astype(self.dtype))

    # --- printing ----------------------------------------------------------------------
    def __repr__(self):
        prefix = "tensor("
        body = np.array2string(self.data, separator=", ", prefix=prefix)
        extras = []
        if self.data.dtype not in _DEFAULT_REPR_DTYPES or self.data.size == 0:
            extras.append(f"dtype={self.data.dtype}")
        if self._node is not None:
            extras.append(f"grad_fn=<{self._node.name}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return prefix + body + "".join(", " + extra for extra in extras) + ")"

    def __str__(self):
        return str(self.data)

    def __format__(self, spec):
        # f"{cost:.4f}" in a function tracejit.grad runs eagerly: formatted as NumPy
        # formats the array (a 0-d one as its number), not refused by object.__format__
        return format(self.data, spec)


_grad_mode = autograd._grad_mode


def _versions_of_base(out, args):
    """The version counter of the Tensor argument whose buffer ``out`` views, if any
    (reshape, transpose and basic slicing return NumPy views)."""
    if out.base is None:
        return None
    for arg in args:
        if isinstance(arg, Tensor) and np.may_share_memory(out, arg.data):
            return arg._versions
    return None


class ViewOp:
    """How a view was made from its base by a primitive (``reshape``, ``transpose``):
    made again from the base's new buffer after a rebind, and the base's flat positions
    it shows, which an in-place update of the view writes."""

    __slots__ = ("prim", "params")

    def __init__(self, prim, params):
        self.prim, self.params = prim, params

    def positions(self, shape):
        return np.asarray(self.prim.impl(np.arange(int(np.prod(shape))).reshape(shape),
                                         **self.params))


def _read_view(base, index):
    """The view ``index`` (an index, or a ``ViewOp``) of ``base``, as the user took it."""
    if isinstance(index, ViewOp):
        return Tensor.__tracejit_bind__(index.prim, (base,), index.params)
    return base[index]


def _plain_index(index):
    """An index with Tensors replaced by their arrays (NumPy indexes with those)."""
    if isinstance(index, Tensor):
        return index.data
    if isinstance(index, tuple):
        return tuple(item.data if isinstance(item, Tensor) else item for item in index)
    return index


def unwrap(value):
    """The ndarray behind a Tensor; anything else as it is. (Not ``getattr(x, "data")``:
    an ndarray's ``.data`` is a memoryview.)"""
    return value.data if isinstance(value, Tensor) else value


def copy_into(target, value):
    """``np.copyto`` into an argument a compiled call wrote in place: a Tensor's version
    counter moves as an eager in-place update's does, so a graph that saved it (or a view
    of it) before the call raises at backward instead of using the new values."""
    if isinstance(target, Tensor):
        np.copyto(target.data, value)
        target._version += 1
    else:
        np.copyto(target, value)


def tensor(data, dtype=None, requires_grad=False):
    """A new leaf Tensor from array-like ``data`` (copied), NumPy's dtype unless given.

    >>> tensor([[1, 2], [3, 4]], dtype=np.float32)
    tensor([[1., 2.],
            [3., 4.]], dtype=float32)
    """
    array = np.array(as_array(data, dtype), copy=True)
    result = Tensor._wrap(array)
    if requires_grad:
        result.requires_grad_(True)
    return result
