"""The traced array: ``Tracer``, the proxy a function computes with while it is traced.

A ``Tracer`` stands for one IR var of its trace and carries the real value (or the
``Pending`` that computes it), so NumPy code on it runs as usual; every primitive applied
to it goes to its trace's ``process`` (``__tracejit_bind__``, the only place an op is
intercepted). Where Python needs a concrete answer (``bool()``, ``int()``, ``.item()``,
``__index__``) the real value is used and the trace records a value guard. Conversions
that would freeze a value into compiled code (``np.asarray``, ``tolist``, formatting)
raise ``trace_error``s that name the user's line.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> t = trace(lambda x: bool(x.sum() > 0), np.ones(2))
>>> t.outputs, [guard.convert for guard in t.graph.guards]
(True, ['bool'])
"""

from __future__ import annotations

import types
import weakref

import numpy as np

from . import tensor_methods, view_writes
from .abstract import AbstractArray
from .array_methods import ArrayMethods, a_new_view
from .conversions import python_number
from .dims import SymInt
from .errors import TraceError, as_numpy_would
from .indexing import getitem, setitem, written_region
from .locations import called_by_user, user_location
from .loop_generalize import Refused
from .pending import Pending, is_pending
from .primitives import current_context

# A computed float formatted into text ("%f" % cost, f"{loss:.4f}"): guarded on its exact
# value, the guard failed at nearly every compiled call (new data, or the compiled value a
# last bit off the traced one), each failure ran the call again eagerly and every few a new
# path was traced and compiled: a training loop printing its cost ran hundreds of times
# slower than NumPy. Refused instead (here for f-strings and str(), in
# operator_calls.binary for %), the call runs eagerly at NumPy's speed. Text formatted as
# a print() argument is made from the compiled values instead (tracer/deferred_text.py).
FORMATTED_FLOAT = (
    "formatting a computed float into text ('%f' % cost, f'{loss:.4f}') would freeze its "
    "exact value into the compiled code; format it as print()'s argument "
    "(print(f'loss {loss:.4f}') compiles), or outside the compiled function")


def trace_error(message, location=None):
    """A ``TraceError`` that starts with the user's line (the caller's caller, or
    ``location``) and shows its source."""
    location = location or user_location(skip=2)
    prefix = f"{location.file}:{location.line}: " if location else ""
    source = f"\n    {location.source}" if location and location.source else ""
    return TraceError(f"{prefix}{message}{source}")


def _scalar_preserving(method):
    """A method that, on a NumPy scalar, gives a scalar (``np.float32(1).astype(float)``),
    where on a 0-d array it gives a 0-d array."""

    def wrapper(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        if _is_numpy_scalar(self) and isinstance(result, Tracer) and not result.shape:
            result.value = _numpy_scalar(result)
        return result

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


# The ufunc of each augmented assignment, by the ``operator`` module's name for it less
# its trailing underscore (``x **= y`` is ``pow``): what ``Tracer.__ipow__`` and the
# front end's in-place hooks compute.
INPLACE_UFUNCS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power, "matmul": np.matmul,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "lshift": np.left_shift, "rshift": np.right_shift,
}


class Tracer(ArrayMethods):
    """A traced array: the IR var it stands for, its real value, and its live shape."""

    # quotient: (n, d) when this is a true division of ints and dims (tracejit.tracer.dims)
    # raw_value: the value, or a ``tracejit.tracer.pending.Pending`` that ``value`` computes
    # when first read (a captured loop's results: tracejit.tracer.pending)
    # (``view_base``, not ``base``: the user's ``x.base`` is NumPy's, not this; see below)
    __slots__ = ("context", "ir_var", "raw_value", "shape", "view_base", "views", "region",
                 "steps", "quotient", "readonly", "__weakref__")
    __tracejit_priority__ = 2

    # On a NumPy scalar these give a scalar, where on a 0-d array they give a 0-d array.
    astype = _scalar_preserving(ArrayMethods.astype)
    copy = _scalar_preserving(ArrayMethods.copy)
    transpose = _scalar_preserving(ArrayMethods.transpose)
    reshape = _scalar_preserving(ArrayMethods.reshape)
    squeeze = _scalar_preserving(ArrayMethods.squeeze)
    clip = _scalar_preserving(ArrayMethods.clip)
    T = property(_scalar_preserving(ArrayMethods.T.fget))

    def __init__(self, context, var, value, shape):
        self.context = context
        self.ir_var = var
        self.raw_value = value
        self.shape = shape
        # NumPy aliasing: ``view_base`` (a weakref; ``view_writes.KeptRoot`` for a view with
        # steps, which keeps its root alive as NumPy's does) when this is a view of another
        # tracer, ``views`` (a WeakSet) of the views of this one that are still alive.
        self.view_base = None
        self.views = None
        # ``region``: for a view, the part of its base it shows ((low, high) per base axis,
        # or None when not known): a write elsewhere in the base leaves it right
        self.region = None
        # ``readonly``: NumPy's array here is not writeable (np.broadcast_to, a view of it)
        self.readonly = False
        # ``steps``: for a view, how it is read from its base (``view_writes``), None when
        # a write through it cannot be followed
        self.steps = None

    @property
    def value(self):
        value = self.raw_value
        if type(value) is Pending:
            value = self.raw_value = value.force()
        return value

    @value.setter
    def value(self, value):
        self.raw_value = value

    def lazy_value(self):
        """The value, or the ``Pending`` standing for it while nothing has read it."""
        value = self.raw_value
        return value if is_pending(value) else self.value

    @property
    def dtype(self):
        return self.ir_var.aval.dtype

    @property
    def aval(self):
        return AbstractArray(self.shape, self.ir_var.aval.dtype, self.ir_var.aval.weak)

    def __getitem__(self, index):
        result = a_new_view(self, getitem(self, index))  # x[...] is another array than x
        if isinstance(result, Tracer) and not result.shape and _picks_one_element(index):
            result.value = _numpy_scalar(result)  # NumPy gives a scalar, not 0-d: a copy,
            _detach(result)                       # which later writes leave as it is
        elif isinstance(result, Tracer) and result.shape and _basic_by_traced_ints(index):
            # W[c] with c a run-time int is a gather here but a view in NumPy (v = W_in[c];
            # W_in[c] -= ...: v sees the write): a view of unknown region, so a write to
            # W while it lives is refused as for any view, not silently left stale
            note_view(self, result)
        return result

    @staticmethod
    def __tracejit_bind__(prim, args, params):
        for arg in args:
            if isinstance(arg, Tracer):
                return arg.context.process(prim, args, params)
        return current_context().process(prim, args, params)  # creation ops: no operands

    # --- where Python needs concrete values: value guards ------------------------------
    def __bool__(self):
        try:
            truth = bool(self.value)
        except ValueError:
            # NumPy's 'truth value ... is ambiguous': eager raises it too, or does not ('p
            # in self.params' compares by identity first, and eager's p is the list's own
            # array): the call runs eagerly, which says which - not an internal error
            raise trace_error("the truth value of an array with more than one element is "
                              "ambiguous in the trace ('if' on an array, or 'x in a list of "
                              "arrays', which eagerly finds the very array by identity); the "
                              "call runs eagerly") from None
        return self.context.guard(self, "bool", truth)

    def __int__(self):
        try:
            value = int(self.value)
        except (OverflowError, ValueError, TypeError) as error:  # int(inf), int(nan)
            raise as_numpy_would(error) from None  # the model's error, as eager raises it
        return self.context.guard(self, "int", value)

    def __float__(self):
        return self.context.guard(self, "float", float(self.value))

    def __index__(self):
        if self.dtype.kind not in "iu" or np.ndim(self.value):
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return self.context.guard(self, "index", int(self.value))

    def __round__(self, ndigits=None):
        """Python's ``round`` as on the eager value: a Python float or NumPy scalar rounds
        half to even to an int (guarded like ``int()``), or to ``ndigits`` places; ints
        are whole; a NumPy array has no ``__round__``."""
        from .eager_agreement import eager_type  # cycle: eager_agreement imports Tracer

        kind = eager_type(self.context, self)
        if kind is np.ndarray:
            raise TypeError("type numpy.ndarray doesn't define __round__ method")
        if ndigits is None:
            return self if kind is int else int(np.rint(self) if kind is not bool else self)
        if kind in (int, float):  # Python's correctly rounded digits: on the guarded value
            return round(kind(self), ndigits)
        return np.round(self, ndigits)

    def __trunc__(self):
        """``math.trunc`` as on the eager value: a NumPy or Python scalar truncates to an
        int (guarded like ``int()``); a NumPy array has no ``__trunc__``."""
        from .eager_agreement import eager_type  # cycle: eager_agreement imports Tracer

        if eager_type(self.context, self) is np.ndarray:
            raise TypeError("type numpy.ndarray doesn't define __trunc__ method")
        return int(self)

    def item(self, *args):
        if not args:
            number = python_number(self, None)
            if number is not None:
                return number
        return self.context.guard(self, "item", np.asarray(self.value).item(*args))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return int(self.shape[0]) if isinstance(self.shape[0], SymInt) else self.shape[0]

    # copy.copy / copy.deepcopy (deeplearning.ai's update_parameters deep-copies the
    # parameter dict): a new array, as ndarray's give, so writes into the copy leave this
    # one alone; a Python number (float(loss)) is immutable, itself
    def __copy__(self):
        return self if not self.shape and self.aval.weak else self.copy()

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __array__(self, dtype=None, copy=None):
        raise trace_error(
            "a traced array was converted to a NumPy array (np.asarray, a NumPy function "
            "tracejit does not support, its memory read by x.__array_interface__, bytes(x) or "
            "pickle, or a write into a NumPy array); that would freeze "
            "its value into the compiled code. Keep it as an array operand, or compute it "
            "outside the compiled function"
        )

    def __bytes__(self):  # bytes(x): its memory (as x.tobytes() would be)
        self.__array__()

    def __reduce_ex__(self, protocol):  # pickle.dumps(x): its memory
        if called_by_user():
            self.__array__()
        return object.__reduce_ex__(self, protocol)

    def tolist(self):
        raise trace_error(
            "tolist() on a traced array would freeze every element into the compiled code; "
            "return the array instead, or call tolist() outside the compiled function"
        )

    def numpy(self):
        if getattr(self.context, "tensor_arguments", False) and (
                tensor_methods.tensor_valued(self.context, self)):
            return tensor_methods.as_numpy(self)  # t.detach().numpy() of a Tensor
        return self.__array__()

    def __format__(self, spec):
        if not self.shape and self.aval.weak:
            # a Python int (an int argument, int(count)): formatted as Python would, on
            # its value, guarded as int() of it was before it became a number; a float
            # (float(loss)) would be guarded on its exact value: refused (FORMATTED_FLOAT)
            kind = {"b": bool, "i": int, "u": int}.get(self.dtype.kind, float)
            if kind is float:
                raise trace_error(FORMATTED_FLOAT)
            return format(self.context.guard(self, "int", kind(np.asarray(self.value).item())),
                          spec)
        raise trace_error(
            "formatting a traced array into a string would freeze its value; pass it to "
            "print() as a separate argument (print('loss', loss)) or format it outside"
        )

    def __str__(self):
        return self.__format__("")

    # --- in-place updates: functional underneath ---------------------------------------
    def __setitem__(self, index, value):
        if _is_numpy_scalar(self):  # s = x.sum(); s[...] = 0: a NumPy scalar is immutable
            raise as_numpy_would(TypeError(f"'numpy.{self.dtype.type.__name__}' object does "
                                           "not support item assignment"))
        if _reads_itself_in_turn(self, index, value):
            # x[1:3] = (x[0], x[1]): NumPy copies a sequence's items into the selection one
            # by one along its first axis, each read as the earlier ones left it (row 2
            # gets x[0]'s values); a stack of the items read first would give old x[1]
            setitem(self, index, value)  # NumPy's errors (a ragged sequence); unused after
            target = self[index]
            for position, item in enumerate(value):
                target[position] = item
            return
        self._update(setitem(self, index, value), written_region(self, index))

    def _inplace(self, operation, other):
        if self.readonly:
            raise as_numpy_would(ValueError("output array is read-only"))
        result = operation(self, other)
        # NumPy's in-place rules: the result must fit the array's shape and cast to its
        # dtype "same_kind" (int += float raises). Raise as NumPy does: the eager run the
        # call falls back to raises the same error.
        old_shape, new_shape = np.shape(self.value), np.shape(result.value)
        if new_shape != old_shape:
            raise as_numpy_would(ValueError(
                f"non-broadcastable output operand with shape {old_shape} doesn't match the "
                f"broadcast shape {new_shape}"))
        if result.dtype != self.dtype:
            if not np.can_cast(result.dtype, self.dtype, "same_kind"):
                try:  # NumPy's own error (a UFuncTypeError), from a 0-d call
                    operation(np.zeros((), result.dtype), np.zeros((), result.dtype),
                              out=np.zeros((), self.dtype))
                except TypeError as error:
                    raise as_numpy_would(error) from None
            result = result.astype(self.dtype)
        if not self.shape and not _is_numpy_scalar(self) and _is_numpy_scalar(result):
            # y += 1 on a 0-d array writes into it: y stays an array (the ufunc's result
            # alone would be a NumPy scalar)
            result.value = _zero_d_array(result)
        self._update(result)
        return self

    def _update(self, result, written=None):
        """Become ``result`` (an in-place write). ``written``: the region the write covers
        (``written_region``), when known: views of this array outside it (``prev = h[t]``
        before ``h[t + 1] = ...``) show what NumPy's views would, and may stay; views with
        known steps are read again from the new value (``view_writes``). A write through a
        view is a write into its root."""
        self._check_writable()
        root = self.base_or_none()
        if root is None:  # not a view (or its base is gone)
            root = self
        elif self.steps is not None:  # a = buf[i]; a[1:] += d: a write into buf
            root._check_writable()
            written, result = self.region, view_writes.write_through(self, root, result)
        if (root is not self and self.steps is None) or (root.views and not all(
                view_writes.followable(view, written) for view in root.views)):
            raise trace_error(
                "in-place write to an array that shares memory with another one (a slice, "
                "reshape or transpose of it, or it of another) in a way tracejit does not "
                "follow (a gather such as W[c] with a run-time c, as_strided, a reshape or "
                "np.ascontiguousarray NumPy may have copied); NumPy would update both. Write "
                "to a copy instead: x = x.copy()",
                user_location(skip=3),
            )
        # A view no name holds (Y[i] of ``Y[i][labels[i]] = 1``, Hooks.set_in) is written
        # and dropped: only the root's write remains, a carry like ``Y[i, labels[i]] = 1``.
        temporary = root is not self and self.steps is not None and (
            getattr(self.context, "temporary_view", None) is self)
        stale = [view for view in root.views or () if view.steps is not None and not (
            view_writes.apart(view.region, written)) and not (temporary and view is self)]
        if ((root is not self and not temporary) or stale) and getattr(
                self.context, "loop_indices", None):
            # a trip's views are names the loop's carries do not track: unrolled instead
            raise Refused("a write through a view, or into an array a view of it shows")
        trial_writes = getattr(self.context, "trial_writes", None)
        if trial_writes is not None:  # a loop trip traced for capture: undone after it
            for written_array in (root, *stale):
                trial_writes.setdefault(id(written_array), (
                    written_array, written_array.ir_var, written_array.raw_value,
                    written_array.shape))
        root.ir_var, root.raw_value, root.shape = result.ir_var, result.raw_value, result.shape
        for view in stale:
            again = view_writes.read_again(root, view)
            view.ir_var, view.raw_value, view.shape = again.ir_var, again.raw_value, again.shape
        self.context.note_mutation(root)

    def base_or_none(self):
        """The array this one is a view of, while it lives; else None."""
        return self.view_base() if self.view_base is not None else None

    def _check_writable(self):
        if self.readonly:
            raise as_numpy_would(ValueError("assignment destination is read-only"))
        if getattr(self.context, "entry_aliases", None):
            from .loop_containers import alias_error  # cycle: loop_containers -> here

            error = alias_error(self.context, self)
            if error is not None:  # hs.append(h) in a captured loop, then h += 1
                raise error
        if getattr(self.context, "loop_entry_reads", None):
            from .loop_containers import entry_refusal  # cycle: loop_containers -> here

            refusal = entry_refusal(self.context, self)
            if refusal is not None:  # prev = hs[-1] in a captured loop, then prev *= 0.5
                raise refusal

    def __hash__(self):
        # tracejit keys dicts and WeakSets by tracers (by identity); the user's d[x] = 1,
        # {x} or x in table is NumPy's TypeError for an array, and a hash by value for a
        # NumPy scalar, a Python number or a Tensor (by identity) eager may hold: those run
        # eagerly
        if called_by_user():
            if not self.shape and (self.aval.weak or _is_numpy_scalar(self)) or getattr(
                    self.context, "tensor_arguments", True):
                from .pinned_scalars import check_guard  # (it imports this module's users)

                # TABLE[self.n_iter], TABLE[n]: a number argument or count attribute a
                # dict lookup needs as a Python int is a constant, traced again
                check_guard(self.context, self.ir_var, "int")
                raise trace_error("a traced value used as a dict key or set member (hashed) "
                                  "is not supported; the call runs eagerly")
            raise as_numpy_would(TypeError("unhashable type: 'numpy.ndarray'"))
        return object.__hash__(self)

    def __repr__(self):
        if current_context() is not None and called_by_user():
            # repr(loss), "%s" % [loss], print([loss]): the user's text, as __str__ (the
            # debugging text below, frozen into the program, came back on every call)
            return self.__format__("")
        return f"Tracer({self.ir_var}: {self.aval}, value={self.value!r})"

    def __getattr__(self, name):
        # An ndarray attribute the trace has no rule for (x.flags, x.ctypes): not an
        # AttributeError, which hasattr() and getattr(x, name, default) would take for
        # "NumPy has none" and go another way than NumPy eager
        if name == "strides":  # as_strided(x, ..., strides=(s0, s1 * stride, ...))
            from .strided_views import byte_strides  # cycle: strided_views -> here

            return byte_strides(self)
        if not self.shape and self.aval.weak and not name.startswith("__"):
            # n.bit_length() of a run-time Python int (eager_agreement handles lr.shape)
            python_type = {"b": bool, "i": int, "u": int}.get(self.dtype.kind, float)
            if hasattr(python_type, name):
                raise trace_error(f"{python_type.__name__}.{name} of a run-time Python number "
                                  "is not supported; the call runs eagerly")
            raise as_numpy_would(AttributeError(
                f"'{python_type.__name__}' object has no attribute {name!r}"))
        if hasattr(np.ndarray, name) and not name.startswith("__"):  # not NumPy's probes
            raise trace_error(f"x.{name} of a traced array is not supported; the call runs "
                              "eagerly")
        if name in _MEMORY_PROTOCOLS and called_by_user():
            # the user's x.__array_interface__ (its data pointer), or NumPy converting the
            # tracer for the user (np.asfortranarray(x)): as __array__ refuses. NumPy's
            # probes while tracejit converts one find none.
            self.__array__()
        if name == "detach" and getattr(self.context, "tensor_arguments", False) and (
                tensor_methods.tensor_valued(self.context, self)):
            # a bound method: the front end guards a plain function read from an argument
            # by identity, which a new function per read would fail at every call
            return types.MethodType(tensor_methods.detach, self)
        if name in _TENSOR_ATTRIBUTES and getattr(self.context, "tensor_arguments", False):
            # x.detach(), w.grad on what eagerly is a Tensor: not NumPy's AttributeError
            raise trace_error(f"x.{name} of a Tensor in a compiled function is not supported; "
                              "the call runs eagerly")
        raise AttributeError(f"'numpy.ndarray' object has no attribute {name!r}")


# the autograd attributes of tracejit's Tensor that an ndarray does not have
_TENSOR_ATTRIBUTES = frozenset({"detach", "requires_grad", "requires_grad_", "grad",
                                "grad_fn", "is_leaf", "backward", "retain_grad", "zero_"})


# the ndarray attributes that hand out its memory, which NumPy looks up on the instance
_MEMORY_PROTOCOLS = frozenset({"__array_interface__", "__array_struct__", "__dlpack__",
                               "__dlpack_device__"})


def _numpy_scalar(tracer):
    """A 0-d tracer's value as a NumPy scalar (a pending one stays pending)."""
    value = tracer.raw_value
    if is_pending(value):
        return Pending(lambda: np.asarray(value.force())[()], like=tracer.dtype.type(0))
    return np.asarray(value)[()]


def _zero_d_array(tracer):
    """A 0-d tracer's value as a 0-d array (a pending one stays pending)."""
    value = tracer.raw_value
    if is_pending(value):
        return Pending(lambda: np.asarray(value.force()), like=np.zeros((), tracer.dtype))
    return np.asarray(value)


def _is_numpy_scalar(tracer):
    value = tracer.raw_value
    if is_pending(value) and value.like is not None:
        return isinstance(value.like, np.generic)
    return isinstance(tracer.value, np.generic)


def _reads_itself_in_turn(x, index, value):
    """Whether ``x[index] = value`` is a list or tuple (of as many items as the selection's
    first axis) holding a view of ``x``'s memory, into a selection by basic indexing: NumPy
    copies such a sequence item by item. An index array copies the items first (NumPy
    converts the sequence before scattering), as the stack does."""
    entries = index if isinstance(index, tuple) else (index,)
    if not isinstance(value, (list, tuple)) or not all(
            entry is None or entry is Ellipsis or isinstance(entry, slice) or (
                isinstance(entry, (int, np.integer)) and not isinstance(entry, bool))
            for entry in entries):
        return False
    def root(array):  # (no `or`: the truth value of a traced array raises)
        base = array.base_or_none()
        return array if base is None else base

    def shares(item):
        if isinstance(item, (list, tuple)):
            return any(shares(inner) for inner in item)
        return isinstance(item, Tracer) and root(item) is root(x)

    if not any(shares(item) for item in value):
        return False
    try:
        shape = np.broadcast_to(0, tuple(int(dim) for dim in x.shape))[index].shape
    except (TypeError, IndexError, ValueError):
        return False  # a symbolic dim, or NumPy's error: the stack raises it
    return len(shape) > 0 and shape[0] == len(value)



def _picks_one_element(index):
    """``x[index]`` is a NumPy scalar (not a 0-d array): integers only, no ``...``."""
    entries = index if isinstance(index, tuple) else (index,)
    return all(isinstance(entry, (int, np.integer, SymInt)) and not isinstance(entry, bool)
               or (isinstance(entry, Tracer) and not entry.shape and entry.dtype.kind in "iu")
               for entry in entries)


def _basic_by_traced_ints(index):
    """Basic indexing (ints, slices, None, ...) with a traced int among the ints."""
    entries = index if isinstance(index, tuple) else (index,)
    traced = [entry for entry in entries if isinstance(entry, Tracer)]
    return bool(traced) and all(not entry.shape and entry.dtype.kind in "iu"
                                for entry in traced) and all(
        isinstance(entry, (Tracer, int, np.integer, slice, SymInt)) or entry is None
        or entry is Ellipsis for entry in entries if not isinstance(entry, bool))


def _detach(value):
    """``value`` is no view: it leaves its base's views (an element read, ``old = y[0]``)."""
    root = value.base_or_none()
    if root is not None and root.views is not None:  # (WeakSet.discard would compare the
        root.views = weakref.WeakSet(view for view in root.views if view is not value)  # ==)
    value.view_base = value.steps = value.region = None


def note_view(base, view):
    root = base.view_base() if base.view_base is not None else None
    root = base if root is None else root
    if view.view_base is not None and view.view_base() is root:
        # noted already (as_strided's strided slice of x): adding it again would make the
        # WeakSet compare the two references' Tracers with ==, an array
        return
    view.view_base, view.region = weakref.ref(root), None
    view.readonly = base.readonly
    if root.views is None:
        root.views = weakref.WeakSet()
    root.views.add(view)


def _inplace_method(ufunc):
    def method(self, other):
        return self._inplace(ufunc, other)

    return method


# x op= y for every operator: without these h **= 2 fell back to h = h ** 2, and other
# names for h's buffer (cache = h, the caller's argument, self.W) kept the old values
# where NumPy updates them.
for _name, _ufunc in INPLACE_UFUNCS.items():
    setattr(Tracer, f"__i{_name}__", _inplace_method(_ufunc))
