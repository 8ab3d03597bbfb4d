"""Run a model function's rewritten source eagerly, so buffers filled in place keep
their gradients.

Classic NumPy model code fills buffers in place: ``h = np.zeros(3); h[:] = x * 2`` or
``hs[:, t] = h``. With ``x`` a Tensor that requires grad, NumPy copies the values into the
ndarray and the history is gone. The front end's rewrite already routes ``a[i] = v``,
``a[i] += v`` and ``a += v`` through hooks (``tracejit.tracer.frontend``); these hooks run them
eagerly, turning the buffer into an array of the written value's type (a Tensor, whose
``__setitem__`` records a differentiable assignment) when a tracked value is written into a
plain ndarray. Everything else - prints, writes to outside state, random numbers - runs as
written.

>>> import numpy as np
>>> def fill(x):
...     h = np.zeros(2)
...     h[:] = x * 2
...     return h
>>> run_eagerly(fill, (np.array([1.0, 2.0]),), {})
array([2., 4.])
"""

from __future__ import annotations

import operator
import types

import numpy as np

from . import deferred_text, loop_prints
from .errors import TraceError
from .locations import line_prefix, user_location
from .loop_attributes import plain_attributes
from .loops import UNDEFINED
from .operator_calls import BINARY, UNARY
from .rewritten_code import bind, callable_object, is_user_function, rewritten_code
from .source_rewrite import RewriteUnavailable, compared
from .view_writes import index_in, numpy_root
from .while_loops import as_written


def _tracked(value):
    """A value whose type records history (a Tensor requiring grad)."""
    return getattr(type(value), "__tracejit_priority__", 0) == 1 and getattr(
        value, "requires_grad", False)


def _stacked(value):
    """A list or tuple holding a tracked value as NumPy converts it when it is assigned
    (``state[i][:3] = (x, num, den)``): the stack of its items, a Tensor keeping their
    history, where NumPy's conversion would refuse them; any other value as it is."""
    if type(value) in (list, tuple) and any(map(_tracked, value)):
        return np.stack(value)
    return value


class EagerHooks:
    """The hooks of ``tracejit.tracer.frontend.Hooks``, run eagerly (see the module docstring)."""

    def __init__(self):
        self.rewritten = {}
        # id of a NumPy buffer -> (the buffer, its Tensor stand-in) once a nested write
        # (``state[i][:3] = (x, num, den)``) put a tracked value into it (``set_in``)
        self.replaced = {}

    def load(self, value, descriptor):
        return value

    def member(self, owner, name):
        return getattr(owner, name)

    def local(self, value):
        if self.replaced and type(value) is np.ndarray:
            return self._replacement(value)  # a buffer ``set_in`` wrote a Tensor into
        return value

    def binary(self, name, left, right):  # (tracejit.tracer.operator_calls)
        return BINARY[name](left, right)

    def unary(self, name, operand):
        return UNARY[name](operand)

    def call(self, function, *args, **kwargs):
        owner = getattr(function, "__self__", None)
        if (isinstance(owner, np.ndarray) and getattr(function, "__name__", "") == "dot"
                and any(_tracked(arg) for arg in args)):
            # X.dot(W) with W a Tensor that requires grad: ndarray.dot would turn W into a
            # plain array (its gradient lost); np.dot dispatches to the Tensor
            return np.dot(owner, *args, **kwargs)
        return self.function_for(function)(*args, **kwargs)

    def function_for(self, function):
        if callable_object(function):
            return types.MethodType(self.function_for(type(function).__call__), function)
        target = function.__func__ if isinstance(function, types.MethodType) else function
        if not is_user_function(target):
            return function
        if id(target) not in self.rewritten:
            try:
                inner, _ = rewritten_code(target)
                rewritten = bind(target, inner, self)
            except (RewriteUnavailable, TraceError):  # no source, or refused: as written
                rewritten = target
            self.rewritten[id(target)] = (target, rewritten)
        rewritten = self.rewritten[id(target)][1]
        if isinstance(function, types.MethodType):
            return types.MethodType(rewritten, function.__self__)
        return rewritten

    def print(self, *args, **kwargs):
        print(*args, **kwargs)

    def hoistable(self, *pairs):  # (tracejit.tracer.loop_attributes)
        return plain_attributes(*pairs)

    def deferred_text(self, template, values):  # (tracejit.tracer.deferred_text)
        return deferred_text.as_written(template, values)

    def printed_rows(self, names):  # (tracejit.tracer.loop_prints)
        return tuple([] for _ in names)

    def print_when(self, rows, index, test, entry, shown, period=None, last=None,
                   periodic=None):
        if test(index):  # printed at the trip, as written
            function, layout, sep, end = shown
            arguments = [deferred_text.as_written(part.template, part.values)
                         if type(part) is deferred_text.DeferredText else part
                         for part in loop_prints.printed_arguments(layout, index, entry)]
            if function is print:
                print(*arguments, sep=sep, end=end)
            else:  # a `print` of the user's: the keywords the call wrote (none by default)
                function(*arguments, **{key: value for key, value, default in (
                    ("sep", sep, " "), ("end", end, "\n")) if value != default})

    def write_text(self, write, text):  # sys.stdout.write(f"..."), text made as written
        write(text)

    def print_rows(self, rows, shown, names):
        pass

    def identical(self, left, right, negated):  # y is x (y is not x): Python's answer
        return (left is right) is not negated

    def compared(self, left, right, op):  # layer == self.last, x in seen: Python's answer
        return compared(left, right, op)

    def selects(self, condition, *containers):  # if x[i] == m: d[i] = g runs as written
        return False

    def caught(self):
        pass  # eager: the handler sees what NumPy raised

    def item_at(self, container, key):
        return container[key]

    index = item_at

    def iterate(self, iterable):
        return iterable

    def del_attr(self, owner, name, written):
        delattr(owner, name)

    def del_item(self, container, index, written):
        del container[index]

    def loop_note(self, line, reason):
        pass

    def loop_effect(self, line):  # tracer/loop_effects.py
        pass

    def append_when(self, container, index, test, value, period=None, last=None,
                    periodic=None):  # tracejit.tracer.loop_selected_appends
        if test(index):
            container.append(value)

    def set_in(self, array, index, value):
        """``state[i][:3] = (x, num, den)``: NumPy writes into a view of ``state``, which a
        Tensor's values cannot enter with their history. Then ``state``'s whole buffer
        gets a Tensor stand-in that every later read of a name for it (``local``) gives,
        and the write goes into the same view of the stand-in."""
        value = _stacked(value)
        if isinstance(array, np.ndarray) and _tracked(value):
            tracked = self._stand_in(array, type(value))
            tracked[index] = value
            array[index] = tracked.data[index]  # other holders (a caller) see the values
            return
        array[index] = value

    def _stand_in(self, array, tensor_type):
        """The Tensor standing for NumPy buffer ``array`` (or for the same view of its
        base's stand-in), made from its values on the first tracked write."""
        root = numpy_root(array)
        if root is None:
            if id(array) not in self.replaced:
                self.replaced[id(array)] = (array, tensor_type(np.array(array)))
            return self.replaced[id(array)][1]
        found = index_in(array, root)
        if found is None:
            where = line_prefix(user_location(skip=3))
            raise TypeError(
                f"{where}writing a Tensor that requires grad into a view of a NumPy array "
                "that is not a slice of it (a transpose, reshape or view of other memory) "
                "would lose its gradient; index the array itself, or build the result with "
                "np.stack / np.concatenate")
        index, shape = found
        return self._stand_in(root, tensor_type)[index].reshape(shape)

    def _replacement(self, array):
        if id(array) in self.replaced:
            return self.replaced[id(array)][1]
        root = numpy_root(array)
        if root is None or id(root) not in self.replaced:
            return array
        found = index_in(array, root)
        if found is None:
            return array  # (a transpose of the buffer read after the write: its values)
        index, shape = found
        return self.replaced[id(root)][1][index].reshape(shape)

    def loop(self, range_function, range_args, body, names, frame_locals, line, reverse=None):
        # a loop the front end rewrote runs as written
        values = tuple(frame_locals.get(name, UNDEFINED) for name in names)
        trips = range_function(*range_args)
        for t in reverse(trips) if reverse is not None else trips:
            values = tuple(body(t, *values))
        return values

    def while_loop(self, range_function, range_args, functions, names, frame_locals, line,
                   kind, handed, ints=()):
        # a loop with a data-dependent exit runs as written (tracejit.tracer.while_loops)
        values = tuple(frame_locals.get(name, UNDEFINED) for name in names)
        return as_written(kind, range_function, range_args, functions, values)

    def indexable(self, kind, sequences):
        return False  # loops over rows and counted while loops run as written
                      # (tracejit.tracer.loop_sequences, tracejit.tracer.loop_while)

    def while_trips(self, op, g0, g1):
        return None

    def setdefault_argument(self, what, container, key, default=None):
        return container.setdefault(key, default)

    def outside_mutation(self, what, owner=None):
        """Writes to outside state simply happen when running eagerly."""

    def set_item(self, container, index, value, outside):
        value = _stacked(value)  # out[0] = [x.sum(), x[0]]
        if isinstance(container, np.ndarray) and _tracked(value):
            if outside or container.base is not None:
                where = line_prefix(user_location(skip=2))
                raise TypeError(
                    f"{where}writing a Tensor that requires grad into an argument's NumPy "
                    "array or a view of one would lose its gradient; fill a buffer created "
                    "in the function, or build the array with np.stack / np.concatenate"
                )
            # The buffer takes the value's type, keeping its own dtype as NumPy would.
            # The ndarray still gets the values: another name for it (b = a, a helper's
            # caller) reads them right, though without the gradient (the jit paths,
            # which see every name, keep that too).
            tracked = type(value)(np.array(container))
            tracked[index] = value
            container[index] = tracked.data[index]
            return tracked
        container[index] = value
        return container

    def update_item(self, container, index, value, operation, outside):
        """``a[i] += v`` is ``a[i] = a[i] + v``, through ``set_item`` (a Tensor value keeps
        its gradient). (The tracing hook also reads the trace's buffers: none here.)"""
        updated = getattr(operator, operation)(container[index], value)
        return self.set_item(container, index, updated, outside)

    def inplace(self, target, value, operation):
        if isinstance(target, np.ndarray) and _tracked(value):
            return getattr(operator, operation)(target, value).astype(target.dtype)
        return getattr(operator, "i" + operation.rstrip("_"))(target, value)


    def store_item(self, container, index, value, written):
        container[index] = value

    def update_item_in(self, container, index, value, operation, written):
        container[index] = self.inplace(container[index], value, operation)

    def mutation_of(self, what, receiver):
        pass

    def set_attr(self, owner, name, value, written):
        setattr(owner, name, value)

    def update_attr(self, owner, name, value, operation, written):
        setattr(owner, name, self.inplace(getattr(owner, name), value, operation))


def run_eagerly(function, args, kwargs):
    """``function(*args, **kwargs)`` through its rewritten source, eagerly."""
    return EagerHooks().function_for(function)(*args, **kwargs)
