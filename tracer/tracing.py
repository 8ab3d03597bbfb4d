"""Tracing: run a function once on its real inputs and record what it computed.

Inputs become ``Tracer`` proxies that carry the real value, so the trace's outputs are the
call's real results. Every primitive applied to a proxy is recorded (``bind`` hands the
call to ``Tracer.__tracejit_bind__``, the only place an op is intercepted). Where Python
needs a concrete answer from data - ``bool()``, ``int()``, ``float()``, ``.item()``,
``__index__`` - the real value is used and a value guard records the assumption. Dims
marked dynamic are ``SymInt``s: comparisons the bucket ranges cannot decide become shape
guards.

>>> import numpy as np
>>> def f(x):
...     return x * 2 if x.sum() > 0 else x - 2
>>> t = trace(f, np.array([1.0, -1.0, 2.0]))
>>> t.outputs
array([ 2., -2.,  4.])
>>> [guard.expected for guard in t.graph.guards]
[True]
"""

from __future__ import annotations

import inspect
import linecache
import weakref
from dataclasses import dataclass, field

import numpy as np

from . import argument_writes, pytree
from .abstract import PYTHON_SCALARS, AbstractArray
from .array_methods import ArrayMethods
from .autodiff import reverse
from .dims import DimExpr, SymInt, expr_of, value_of, wrap
from .errors import TraceError, UnsupportedError, as_numpy_would
from .frontend import run_rewritten
from .implicit import find_implicit_inputs
from .indexing import getitem, setitem
from .ir import Constant, Eqn, Graph, Guard, Literal, ShapeGuard, Symbol, Var, verify
from .locations import is_internal, user_location
from .loop_containers import plain_containers
from .loops import UNDEFINED, write_prints
from .ops import reshape_p
from .pending import Pending, deferred, force, is_pending, recording_lazily
from .primitives import current_context, recording_into
from .shapes import pow2_bucket


def _error(message, location=None):
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


class Tracer(ArrayMethods):
    """A traced array: the IR var it stands for, its real value, and its live shape."""

    # quotient: (n, d) when this is a true division of ints and dims (tracejit.tracer.dims)
    # raw_value: the value, or a ``tracejit.tracer.pending.Pending`` that ``value`` computes
    # when first read (a captured loop's results: tracejit.tracer.pending)
    __slots__ = ("context", "ir_var", "raw_value", "shape", "base", "views", "quotient",
                 "__weakref__")
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
        # NumPy aliasing: ``base`` (a weakref) when this is a view of another tracer,
        # ``views`` (a WeakSet) of the views of this one that are still alive.
        self.base = None
        self.views = None

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
        result = getitem(self, index)
        if isinstance(result, Tracer) and not result.shape and _picks_one_element(index):
            result.value = _numpy_scalar(result)  # NumPy gives a scalar, not 0-d
        return result

    @staticmethod
    def __tracejit_bind__(prim, args, params):
        for arg in args:
            if isinstance(arg, Tracer):
                return arg.context.process(prim, args, params)
        return current_context().process(prim, args, params)  # creation ops: no operands

    # --- where Python needs concrete values: value guards ------------------------------
    def __bool__(self):
        return self.context.guard(self, "bool", bool(self.value))

    def __int__(self):
        return self.context.guard(self, "int", int(self.value))

    def __float__(self):
        return self.context.guard(self, "float", float(self.value))

    def __index__(self):
        if self.dtype.kind not in "iu" or np.ndim(self.value):
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return self.context.guard(self, "index", int(self.value))

    def item(self):
        return self.context.guard(self, "item", np.asarray(self.value).item())

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return int(self.shape[0]) if isinstance(self.shape[0], SymInt) else self.shape[0]

    def __array__(self, dtype=None, copy=None):
        raise _error(
            "a traced array was converted to a NumPy array (np.asarray, a NumPy function "
            "tracejit does not support, or a write into a NumPy array); that would freeze "
            "its value into the compiled code. Keep it as an array operand, or compute it "
            "outside the compiled function"
        )

    def tolist(self):
        raise _error(
            "tolist() on a traced array would freeze every element into the compiled code; "
            "return the array instead, or call tolist() outside the compiled function"
        )

    def numpy(self):
        return self.__array__()

    def __format__(self, spec):
        raise _error(
            "formatting a traced array into a string would freeze its value; pass it to "
            "print() as a separate argument (print('loss', loss)) or format it outside"
        )

    def __str__(self):
        return self.__format__("")

    # --- in-place updates: functional underneath ---------------------------------------
    def __setitem__(self, index, value):
        self._update(setitem(self, index, value))

    def _inplace(self, operation, other):
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
        self._update(result)
        return self

    def __iadd__(self, other):
        return self._inplace(np.add, other)

    def __isub__(self, other):
        return self._inplace(np.subtract, other)

    def __imul__(self, other):
        return self._inplace(np.multiply, other)

    def __itruediv__(self, other):
        return self._inplace(np.true_divide, other)

    def _update(self, result):
        is_view = self.base is not None and self.base() is not None
        if is_view or self.views:
            raise _error(
                "in-place write to an array that shares memory with another one (a slice, "
                "reshape or transpose of it, or it of another); NumPy would update both, "
                "which tracejit does not follow. Write to a copy instead: x = x.copy()",
                user_location(skip=3),
            )
        self.ir_var, self.raw_value, self.shape = result.ir_var, result.raw_value, result.shape
        self.context.note_mutation(self)

    def __repr__(self):
        return f"Tracer({self.ir_var}: {self.aval}, value={self.value!r})"


# Primitives whose NumPy result is a view of their first operand (basic indexing & co).
_VIEW_PRIMITIVES = {"reshape", "transpose", "slice", "flip"}


@dataclass
class InputSpec:
    """How one leaf of the arguments enters the graph."""

    kind: str  # "array", "scalar" (dynamic Python scalar), "static"
    input_index: int | None = None  # position in graph.inputs
    type_name: str = ""
    value: object = None  # static leaves: the value the trace specialized on


@dataclass
class ImplicitInput:
    """An array read from a global, closure, default argument or attribute."""

    path: tuple
    input_index: int
    value: object = field(repr=False)


@dataclass
class GradientPlan:
    """How a joint forward+backward graph (``trace(..., grad=True)``) is laid out.

    Outputs ``[:forward_outputs]`` are the function's; then one gradient per ``wrt``
    entry: ``("leaf", argument leaf position)`` or ``("implicit", implicit input number)``.
    ``cotangent_inputs`` are the graph inputs holding the cotangent of each output in
    ``differentiable`` (program output positions)."""

    forward_outputs: int
    differentiable: list
    cotangent_inputs: list
    wrt: list


@dataclass
class Trace:
    """The result of ``trace``: the graph, the real outputs, and what the trace assumed."""

    name: str
    graph: Graph
    outputs: object
    output_tree: pytree.TreeDef
    output_statics: dict  # output leaf index -> a value that is not an array or scalar
    input_tree: pytree.TreeDef
    input_specs: list
    implicit_inputs: list
    mutated_inputs: dict  # argument leaf index -> graph output index of its new value
    output_aliases: dict = field(default_factory=dict)  # result leaf -> mutated argument leaf
    functions: list = field(default_factory=list)
    outside_values: list = field(default_factory=list)  # (Path, "value"|"len", value)
    gradients: object = None  # GradientPlan when traced with grad=True
    symbol_values: dict = field(default_factory=dict)  # each symbol's size in this call
    loop_notes: list = field(default_factory=list)  # "loop at f.py:7 unrolled: why"
    pending: bool = False  # outputs hold Pending values (trace(lazy=True))
    argument_writes: list = field(default_factory=list)  # tracer.argument_writes.ArgumentWrite

    def force_outputs(self):
        """Compute the outputs a lazy trace left pending (the NumPy reference of the
        remaining loop trips); the outputs from then on."""
        if self.pending:
            leaves, tree = pytree.flatten(self.outputs)
            self.outputs = pytree.unflatten(tree, [force(leaf) for leaf in leaves])
            self.pending = False
        return self.outputs

    @property
    def value_guards(self):
        return self.graph.guards

    @property
    def shape_guards(self):
        return self.graph.shape_guards

    def __str__(self):
        return str(self.graph)


class TracingContext:
    """The state of one trace while the function runs."""

    def __init__(self, name, implicit=None):
        self.name = name
        self.body = []
        self.inputs = []
        self.constants = []
        # id(array) -> (array, Var, Constant); the array keeps the id valid
        self.constant_vars = {}
        self.implicit_candidates = implicit or {}  # id(obj) -> (path, obj)
        self.implicit_used = {}  # id(obj) -> ImplicitInput
        self.symbols = {}
        self.ranges = {}
        self.shape_guards = []
        self.counter = 0
        self.mutated = {}  # id(input tracer) -> tracer
        self.outside_mutations = {}  # id(outside array) -> its input's tracer, written
        self.input_tracers = []
        self.implicit_tracers = {}
        self.outside_values = {}
        self.hooks = None  # the front end's hooks while the function runs (frontend.Hooks)
        self.replaced = {}  # id(ndarray) -> the tracer standing for it after a traced write
        self.keep_alive = []
        self.values = {}  # var name -> (real value, live shape): for reverse-mode autodiff
        self.finished = False

    # --- vars and atoms ----------------------------------------------------------------
    def new_var(self, aval):
        var = Var(f"%{self.counter}", aval)
        self.counter += 1
        return var

    def add_input(self, value, shape, weak=False):
        dtype = type(value) if weak else value.dtype
        aval = AbstractArray(tuple(expr_of(dim) for dim in shape), dtype, weak)
        var = self.new_var(aval)
        self.inputs.append(var)
        tracer = Tracer(self, var, value, tuple(shape))
        self.input_tracers.append(tracer)
        self.values[var.name] = (value, tracer.shape)
        return tracer

    def new_symbol(self, value, low, high):
        name = f"s{len(self.symbols)}"
        self.symbols[name] = Symbol(name, low, high)
        self.ranges[name] = (low, high)
        return SymInt(DimExpr.symbol(name), value, self)

    def atom(self, value):
        """``(atom, concrete value, live abstract value)`` for an operand of a primitive."""
        if isinstance(value, Tracer):
            if value.context is not self:
                raise _error(
                    "a traced value from another (finished) trace was used: a value computed "
                    "while tracing escaped, e.g. stored in a global or an attribute"
                )
            return value.ir_var, value.lazy_value(), value.aval
        if isinstance(value, SymInt):
            literal = Literal.of(value)
            return literal, value.value, literal.aval
        if isinstance(value, int) and type(value) not in PYTHON_SCALARS and not isinstance(
            value, np.generic
        ):
            value = int(value)  # an int subclass (an IntEnum member): a weak int
        if type(value) in PYTHON_SCALARS or isinstance(value, np.generic):
            literal = Literal.of(value)
            return literal, value, literal.aval
        key = id(value)
        if key in self.replaced:  # a NumPy buffer a traced value was written into
            return self.atom(self.replaced[key])
        if key in self.implicit_candidates or key in self.implicit_used:
            return self._implicit_input(value)
        array = np.asarray(value)
        if array.dtype == object:
            raise _error(f"an operand of type {type(value).__name__} is not an array")
        if self._view_of_replaced(array):
            raise _error("a NumPy view (row = buf[0]) of an array that was then written with "
                         "traced values: NumPy's view sees the write, the trace cannot "
                         "follow it. Take the view after the write, or copy it")
        known = self.constant_vars.get(key)
        # A NumPy array written by plain NumPy since its last use (g += 5) is a new constant.
        if known is None or not _same_contents(array, known[2].data):
            var = self.new_var(AbstractArray(array.shape, array.dtype))
            constant = Constant.of(array)
            self.constants.append((var, constant))
            self.constant_vars[key] = (value, var, constant)
            self.values[var.name] = (constant.data, array.shape)
        var = self.constant_vars[key][1]
        return var, self.constant_vars[key][2].data, AbstractArray(array.shape, array.dtype)

    def _view_of_replaced(self, array):
        """Whether ``array`` views (through ``.base``) a NumPy buffer a traced value was
        written into since: its data is the old one, NumPy's would be the new."""
        base = array.base
        while isinstance(base, np.ndarray):
            if id(base) in self.replaced:
                return True
            base = base.base
        return False

    def _implicit_input(self, value):
        key = id(value)
        if key not in self.implicit_used:
            path, _ = self.implicit_candidates[key]
            array = np.asarray(value)
            var = self.new_var(AbstractArray(array.shape, array.dtype))
            self.inputs.append(var)
            self.implicit_used[key] = ImplicitInput(path, len(self.inputs) - 1, value)
            self.values[var.name] = (array, array.shape)
        spec = self.implicit_used[key]
        var = self.inputs[spec.input_index]
        return var, np.asarray(value), var.aval

    # --- recording ---------------------------------------------------------------------
    def process(self, prim, args, params):
        if self.finished:
            raise _error("a traced value was used after its trace finished (it escaped)")
        atoms, values, avals = [], [], []
        for arg in args:
            atom, value, aval = self.atom(arg)
            atoms.append(atom)
            values.append(value)
            avals.append(aval)
        concrete = {key: _concrete_param(value) for key, value in params.items()}
        if prim.kind == "control":  # a loop replayed by reverse mode, maybe in a loop body:
            concrete["bindings"] = self.symbol_values()  # its body may read outer indices
        out_aval = prim.abstract_eval(*avals, **params)
        if (prim.kind == "pointwise" and len(args) > 1) or prim.name == "broadcast_to":
            unit = self._unit_broadcasts(args, avals, out_aval)
            if unit is not None:
                return self.process(prim, unit, params)

        def compute(*values):
            out_value = prim.impl(*values, **concrete)
            if out_aval.weak:  # a Python scalar, so NumPy promotes it as one (NEP 50)
                out_value = np.asarray(out_value).item()
            _check_result(prim, out_aval, out_value)
            return out_value

        if recording_lazily() or any(is_pending(value) for value in values):  # on demand
            out_value = deferred(compute, values, [isinstance(arg, Tracer) for arg in args])
            if out_aval.weak:
                out_value.like = np.zeros((), out_aval.dtype).item()
        else:
            out_value = compute(*values)
        var = self.new_var(AbstractArray(tuple(expr_of(dim) for dim in out_aval.shape),
                                         out_aval.dtype, out_aval.weak))
        record = tuple(sorted((key, _record_param(value)) for key, value in params.items()))
        self.body.append(Eqn(prim, tuple(atoms), record, var))
        result = Tracer(self, var, out_value, tuple(out_aval.shape))
        self.values[var.name] = (out_value, result.shape)
        if prim.name in _VIEW_PRIMITIVES and isinstance(args[0], Tracer):
            source = args[0]
            root = source.base() if source.base is not None else None
            root = source if root is None else root
            result.base = weakref.ref(root)
            if root.views is None:
                root.views = weakref.WeakSet()
            root.views.add(result)
        return result

    def _unit_broadcasts(self, args, avals, out_aval):
        """``args`` with each symbolic dim that broadcasts as 1 (``len(x) - 2`` where a
        shape guard says it is 1) reshaped to a literal 1, so codegen sees the broadcast;
        ``None`` when there is none."""
        changed, result = False, list(args)
        for position, (arg, aval) in enumerate(zip(args, avals)):
            lead = len(out_aval.shape) - len(aval.shape)
            shape, unit = list(aval.shape), False
            for axis, dim in enumerate(aval.shape):
                out_dim = out_aval.shape[lead + axis]
                if isinstance(dim, SymInt) and value_of(dim) == 1 and (
                    expr_of(dim) != expr_of(out_dim)
                ):
                    shape[axis], unit = 1, True
            if unit:
                changed = True
                result[position] = self.process(reshape_p, (arg,), {"shape": tuple(shape)})
        return tuple(result) if changed else None

    def guard(self, tracer, convert, expected):
        if self.finished:
            raise _error("a traced value was used after its trace finished (it escaped)")
        atom, _, _ = self.atom(tracer)
        self.body.append(Guard(atom, convert, expected, user_location(skip=3)))
        return expected

    def concrete(self, name):
        """The real value of var ``name`` (computed now if it was left pending)."""
        return force(self.values[name][0])

    def tracer_for(self, atom):
        """A tracer (or a Python scalar / live dim) standing for an atom of this trace."""
        if isinstance(atom, Literal):
            value = atom.value
            if isinstance(value, DimExpr):
                return wrap(value, value.evaluate(self.symbol_values()), self)
            return value
        value, shape = self.values[atom.name]
        return Tracer(self, atom, value, shape)

    def symbol_values(self):
        bindings = {}
        for tracer in self.input_tracers:
            for dim in tracer.shape:
                if isinstance(dim, SymInt) and len(dim.expr.terms) == 1:
                    (monomial, _), = dim.expr.terms
                    if len(monomial) == 1 and isinstance(monomial[0], str):
                        bindings[monomial[0]] = dim.value
        # The indices of loops whose iterations are being traced (tracejit.tracer.loop_index), at
        # the trip being traced: a nested loop's remaining trips run with them bound.
        bindings.update(getattr(self, "loop_indices", None) or {})
        return bindings

    def live_param(self, value):
        """A recorded parameter with its dims live again (for re-running shape rules)."""
        if isinstance(value, DimExpr):
            return wrap(value, value.evaluate(self.symbol_values()), self)
        if isinstance(value, tuple):
            return tuple(self.live_param(item) for item in value)
        return value

    # --- values read from outside the function ---------------------------------------
    def is_implicit(self, value):
        return id(value) in self.implicit_candidates or id(value) in self.implicit_used

    def implicit_tracer(self, value):
        """The traced input standing for an outside array (one per array)."""
        tracer = self.implicit_tracers.get(id(value))
        if tracer is None:
            var, array, _ = self._implicit_input(value)
            tracer = Tracer(self, var, array, var.aval.shape)
            self.implicit_tracers[id(value)] = tracer
        return tracer

    def outside_array(self, tracer):
        """The outside array an implicit-input tracer stands for, if it is still that."""
        for key, candidate in self.implicit_tracers.items():
            if candidate is tracer and tracer.ir_var is self.inputs[
                self.implicit_used[key].input_index
            ]:
                return self.implicit_used[key].value
        return None

    def note_outside_value(self, path, value, identity=False):
        """A Python value read from outside (a global flag, ``self.eps``) shaped the trace:
        later calls must see the same value (lists and tuples: the same length; functions,
        with ``identity``: the same object)."""
        key = str(path)
        if key not in self.outside_values:
            if identity:
                self.outside_values[key] = (path, "is", value)
            elif isinstance(value, (list, tuple)):
                self.outside_values[key] = (path, "len", (type(value).__name__, len(value)))
            else:
                self.outside_values[key] = (path, "value", value)

    def guard_contents(self, array):
        """Guard that an implicit input holds the values it holds now (a mask whose
        positions the trace used); arrays created inside the function need nothing."""
        if id(array) not in self.implicit_candidates and id(array) not in self.implicit_used:
            return
        var, value, _ = self._implicit_input(array)
        tracer = Tracer(self, var, value, var.aval.shape)
        same = np.all(tracer == np.array(array, copy=True))
        self.guard(same, "bool", True)

    def decide(self, symint, op, other):
        other_value = other.value if isinstance(other, SymInt) else other
        answer = {
            "==": symint.value == other_value,
            "!=": symint.value != other_value,
            "<": symint.value < other_value,
            "<=": symint.value <= other_value,
            ">": symint.value > other_value,
            ">=": symint.value >= other_value,
        }[op]
        rhs = other.expr if isinstance(other, SymInt) else other
        # The same fact asked again (also as its negation, == vs !=) is guarded once.
        negation = {"==": "!=", "!=": "=="}.get(op)
        if not any((guard.lhs, guard.rhs) == (symint.expr, rhs) and (
            guard.op == op or guard.op == negation
        ) for guard in self.shape_guards):
            self.shape_guards.append(
                ShapeGuard(symint.expr, op, rhs, bool(answer), user_location(skip=3))
            )
        return answer

    def specialize(self, symint, reason):
        self.shape_guards.append(
            ShapeGuard(symint.expr, "==", symint.value, True, user_location(skip=3), reason)
        )
        return symint.value

    def note_mutation(self, tracer):
        if any(tracer is original for original in self.input_tracers):
            self.mutated[id(tracer)] = tracer
        elif any(tracer is known for known in self.implicit_tracers.values()) and not (
            argument_writes.note_outside_mutation(self, tracer)
        ):
            raise _error("an in-place write into a Tensor read from outside the arguments; "
                         "pass it in as an argument")

    # --- finishing ---------------------------------------------------------------------
    def drop_unused_implicit_inputs(self, outputs):
        """Forget outside arrays the trace handed out but never computed with (a global
        list of layers loaded for one of them): they would only be read and checked at
        every call. Inputs that require grad stay (their gradient is part of the result)."""
        used = {atom.name for atom in outputs if isinstance(atom, Var)}
        for item in self.body:
            used.update(atom.name for atom in getattr(item, "inputs", ())
                        if isinstance(atom, Var))
            predicate = getattr(item, "predicate", None)
            if isinstance(predicate, Var):
                used.add(predicate.name)
        unused = {key for key, implicit in self.implicit_used.items()
                  if self.inputs[implicit.input_index].name not in used
                  and key not in self.outside_mutations  # its guard finds it for the write
                  and not getattr(implicit.value, "requires_grad", False)}
        if not unused:
            return
        dropped = {self.implicit_used[key].input_index for key in unused}
        renumber, kept = {}, []
        for index, var in enumerate(self.inputs):
            if index not in dropped:
                renumber[index] = len(kept)
                kept.append(var)
        self.inputs = kept
        self.implicit_used = {
            key: ImplicitInput(implicit.path, renumber[implicit.input_index], implicit.value)
            for key, implicit in self.implicit_used.items() if key not in unused}

    def graph(self, outputs):
        return Graph(
            self.name,
            tuple(self.inputs),
            tuple(self.constants),
            tuple(self.body),
            tuple(outputs),
            tuple(self.symbols.values()),
            tuple(_unique(self.shape_guards)),
        )


def _unique(guards):
    seen, result = set(), []
    for guard in guards:
        key = (guard.lhs, guard.op, guard.rhs, guard.expected)
        if key not in seen:
            seen.add(key)
            result.append(guard)
    return result


def _same_contents(array, snapshot):
    return array.shape == snapshot.shape and array.dtype == snapshot.dtype and (
        array.tobytes() == snapshot.tobytes())


def _is_output_leaf(leaf):
    """A result leaf the program computes (an array or a number), not a static value."""
    return isinstance(leaf, (Tracer, SymInt, np.generic)) or _is_array_leaf(leaf) or (
        type(leaf) in PYTHON_SCALARS)


def _check_result(prim, out_aval, out_value):
    out_array = np.asarray(out_value)
    concrete_shape = tuple(value_of(dim) for dim in out_aval.shape)
    if concrete_shape != out_array.shape or np.dtype(out_aval.dtype) != out_array.dtype:
        raise AssertionError(
            f"tracejit bug: the shape rule of {prim.name} gives {out_aval} but NumPy "
            f"gives {out_array.dtype}{out_array.shape}"
        )


def _concrete_param(value):
    if isinstance(value, SymInt):
        return value.value
    if isinstance(value, tuple):
        return tuple(_concrete_param(item) for item in value)
    return value


def _record_param(value):
    if isinstance(value, SymInt):
        return value.expr
    if isinstance(value, tuple):
        return tuple(_record_param(item) for item in value)
    return value


# --- entry ----------------------------------------------------------------------------
def _is_array_leaf(leaf):
    return isinstance(leaf, np.ndarray) or getattr(type(leaf), "__tracejit_priority__", 0) == 1


def _dynamic_axes(dynamic, leaf, position, name, array):
    """The dynamic axes of one argument leaf, with their inclusive bucket ranges."""
    if not dynamic:
        return {}
    if dynamic is True:
        spec = tuple(range(array.ndim))
    elif callable(dynamic):
        spec = dynamic(leaf, array)
    else:
        spec = dynamic.get(position, dynamic.get(name, ()))
    if isinstance(spec, dict):
        result = {axis % max(array.ndim, 1): tuple(bounds) for axis, bounds in spec.items()}
    else:
        axes = (spec,) if isinstance(spec, int) else tuple(spec)
        result = {axis % max(array.ndim, 1): pow2_bucket(array.shape[axis % max(array.ndim, 1)])
                  for axis in axes}
    # A bucket of one size (2 is alone in (1, 2]) is a static dim: a symbol there would
    # hide facts codegen relies on, such as ``len(x) - 1 == 1`` broadcasting.
    return {axis: bounds for axis, bounds in result.items()
            if bounds is not None and bounds[0] != bounds[1]}


def _is_dynamic_scalar(dynamic, argument, argument_names, leaf_index):
    """Python scalars are specialized by value unless ``dynamic`` names their argument (or,
    a policy object, says so through ``scalar_is_dynamic(leaf_index)``)."""
    if hasattr(dynamic, "scalar_is_dynamic"):
        return dynamic.scalar_is_dynamic(leaf_index)
    if not isinstance(dynamic, dict):
        return False
    name = argument_names[argument] if isinstance(argument, int) and argument < len(
        argument_names
    ) else argument
    return argument in dynamic or name in dynamic


def _argument_names(fn, args, kwargs, partial=False):
    """The parameter of ``fn`` each argument binds to, in order, or ``None`` where the
    signature cannot be read or does not take these arguments (with ``partial``, missing
    arguments are allowed)."""
    try:
        signature = inspect.signature(fn)
        bound = (signature.bind_partial if partial else signature.bind)(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    return list(bound.arguments)


def trace(fn, *args, dynamic=None, implicit=None, name=None, check=False, grad=False,
          capture_loops=True, lazy=False, **kwargs):
    """Run ``fn(*args, **kwargs)`` once on the real inputs and record it as IR.

    ``dynamic``: ``None``/``False`` (every dim static), ``True`` (every dim of every array
    argument dynamic, bucketed by powers of two), a dict from argument position or name to
    the dynamic axes (``{"x": (0,)}``) or to ``{axis: (low, high)}`` ranges, or a callable
    ``(leaf index, array) -> axes or {axis: (low, high)}`` (how the runtime decides).
    Dims of size 0 and 1 are never dynamic. Equal dynamic dims share one symbol.
    ``implicit``: ``{id(array): (path, array)}`` of arrays reachable from globals,
    closures, defaults and attributes (``tracejit.tracer.implicit.find_implicit_inputs``); they
    become graph inputs instead of constants. ``check=True`` runs the verifier on the
    graph (compiling verifies it after every pass anyway). ``grad=True`` also records the
    backward pass: gradients of the floating-point outputs with respect to every input
    that is a Tensor requiring grad (``Trace.gradients`` says how; ``tracejit.tracer.partition``
    splits the joint graph). ``lazy=True`` may leave outputs a captured loop computes
    ``Pending`` (``Trace.pending``; ``Trace.force_outputs()`` computes them): the runtime
    takes them from the compiled program instead (tracejit.tracer.pending).
    """
    name = name or getattr(fn, "__name__", "function")
    leaves, input_tree = pytree.flatten((args, kwargs))
    if implicit is None:
        implicit = find_implicit_inputs(fn, leaves)
    context = TracingContext(name, implicit)
    # Loops stay captured in traces that record gradients too (tracejit.tracer.loop_autodiff), but
    # a loop whose body loop_autodiff cannot reverse is unrolled (tracejit.tracer.loops asks).
    context.unroll_loops = not capture_loops
    context.records_gradients = bool(grad) and any(
        getattr(value, "requires_grad", False)
        for value in (*leaves, *(obj for _, obj in implicit.values())))
    # best effort, for dynamic={"x": ...}
    argument_names = _argument_names(fn, args, kwargs, partial=True) or [None] * len(args)
    top_level = pytree.argument_positions(args, kwargs)

    input_specs, traced_leaves, symbols_by_size = [], [], {}
    for position, leaf in enumerate(leaves):
        if _is_array_leaf(leaf):
            array = np.asarray(leaf)
            if array.dtype.kind not in "biuf":
                raise TraceError(
                    f"argument {position} of {name} is an array of {array.dtype}; compiled "
                    "functions take boolean, integer and float arrays"
                )
            if not array.dtype.isnative:
                raise TraceError(
                    f"argument {position} of {name} is a {array.dtype.name} array in "
                    "non-native byte order; compiled code reads native byte order. Convert "
                    "it with x.astype(x.dtype.newbyteorder('=')) to compile"
                )
            argument, argument_name = top_level[position], None
            if isinstance(argument, int) and argument < len(argument_names):
                argument_name = argument_names[argument]
            elif isinstance(argument, str):
                argument_name = argument
            axes = _dynamic_axes(dynamic, position, argument, argument_name, array)
            shape = []
            for axis, size in enumerate(array.shape):
                if axis in axes and size > 1:
                    key = (size, axes[axis])
                    if key not in symbols_by_size:
                        symbols_by_size[key] = context.new_symbol(size, *axes[axis])
                    shape.append(symbols_by_size[key])
                else:
                    shape.append(size)
            tracer = context.add_input(array, shape)
            input_specs.append(InputSpec("array", len(context.inputs) - 1, type(leaf).__name__))
            traced_leaves.append(tracer)
        elif type(leaf) in (int, float) and _is_dynamic_scalar(
            dynamic, top_level[position], argument_names, position
        ):
            tracer = context.add_input(leaf, (), weak=True)
            input_specs.append(InputSpec("scalar", len(context.inputs) - 1, type(leaf).__name__))
            traced_leaves.append(tracer)
        else:
            input_specs.append(InputSpec("static", value=leaf, type_name=type(leaf).__name__))
            traced_leaves.append(leaf)

    traced_args, traced_kwargs = pytree.unflatten(input_tree, traced_leaves)
    argument_writes.watch(context, traced_args, traced_kwargs)
    parameter_leaves = _parameter_leaves(fn, args, kwargs, top_level)
    try:
        with recording_into(context):
            result, functions = run_rewritten(fn, traced_args, traced_kwargs,
                                              parameter_leaves)
            result = plain_containers(result)  # the lists and dicts a loop filled
        change = argument_writes.unfollowed_change(context)
        if change is not None:
            raise UnsupportedError(f"{change} the trace cannot follow (compiled runs would "
                                   "skip it); return the new values instead")
    except UnsupportedError as error:
        context.finished = True  # tracers that escaped now refuse to be used
        raise _with_user_line(error) from None
    except BaseException:
        context.finished = True
        raise

    out_leaves, output_tree = pytree.flatten(result)
    outputs, output_atoms, statics = [], [], {}
    for index, leaf in enumerate(out_leaves):
        if _is_output_leaf(leaf):
            atom, value, aval = context.atom(leaf)
            if is_pending(value) and value.like is None and not aval.shape:
                value = force(value)  # a scalar or a 0-d array: the kind of result it is
            output_atoms.append(atom)
            outputs.append(value)
        elif leaf is UNDEFINED:  # assigned only in a loop that ran no trip: Python raises
            context.finished = True
            raise as_numpy_would(UnboundLocalError(
                "a result is a name assigned only inside a loop that ran no iteration"))
        else:
            statics[index] = leaf
            outputs.append(leaf)

    mutated = {}
    for position, tracer in enumerate(traced_leaves):
        if isinstance(tracer, Tracer) and id(tracer) in context.mutated:
            mutated[position] = len(output_atoms)
            output_atoms.append(tracer.ir_var)
    # ``w -= lr * dw; return w``: that result is the caller's array itself, as in NumPy
    aliases = {index: position for index, leaf in enumerate(out_leaves)
               for position in mutated if leaf is traced_leaves[position]}
    writes = argument_writes.collect(context, output_atoms, _is_output_leaf)
    gradients = None
    if grad:
        with recording_into(context):  # the backward creates values too (zeros, unused inputs)
            gradients = _record_gradients(context, out_leaves, output_atoms, leaves,
                                          traced_leaves, mutated)
    context.finished = True
    if gradients is None:  # gradient plans number the inputs they differentiate
        context.drop_unused_implicit_inputs(output_atoms)
    graph = context.graph(output_atoms)
    if check:
        verify(graph)

    # Eager semantics: the caller's input arrays see the in-place writes. Then nothing may
    # run the program again on them: every output is computed here.
    for position in mutated:
        np.copyto(np.asarray(leaves[position]), traced_leaves[position].value)
    for index, position in aliases.items():
        outputs[index] = leaves[position]
    argument_writes.apply(context, args, kwargs)  # config["t"] += 1 reaches the caller
    pending = lazy and not mutated and not writes and any(is_pending(v) for v in outputs)
    if not pending:
        outputs = [force(value) for value in outputs]

    write_prints(getattr(context, "printed", ()))  # what it printed, now that it succeeded
    return Trace(
        name=name,
        graph=graph,
        outputs=pytree.unflatten(output_tree, outputs),
        output_tree=output_tree,
        output_statics=statics,
        input_tree=input_tree,
        input_specs=input_specs,
        implicit_inputs=list(context.implicit_used.values()),
        mutated_inputs=mutated,
        output_aliases=aliases,
        functions=functions,
        outside_values=list(context.outside_values.values()),
        gradients=gradients,
        symbol_values=context.symbol_values(),
        loop_notes=list(getattr(context, "loop_notes", ())),
        pending=pending,
        argument_writes=writes,
    )


def _record_gradients(context, out_leaves, output_atoms, leaves, traced_leaves, mutated):
    """Append the backward pass to the trace: cotangent inputs for the floating-point
    outputs, gradients for every input that is a Tensor requiring grad."""
    wrt, tracers = [], []
    for position, leaf in enumerate(leaves):
        if getattr(leaf, "requires_grad", False) and isinstance(traced_leaves[position],
                                                                   Tracer):
            wrt.append(("leaf", position))
            tracers.append(traced_leaves[position])
    for number, implicit in enumerate(context.implicit_used.values()):
        if getattr(implicit.value, "requires_grad", False):
            wrt.append(("implicit", number))
            tracers.append(context.implicit_tracer(implicit.value))
    if not wrt:
        return None
    if mutated:
        raise UnsupportedError("a function that writes into its inputs cannot be compiled "
                               "with gradients (it runs eagerly on the tape)")
    outputs, seeds, differentiable, cotangent_inputs = [], [], [], []
    program_index = 0
    for leaf in out_leaves:
        if isinstance(leaf, Tracer) and leaf.dtype.kind == "f":
            seed = context.add_input(np.ones_like(np.asarray(leaf.value)), leaf.shape)
            outputs.append(leaf)
            seeds.append(seed)
            differentiable.append(program_index)
            cotangent_inputs.append(len(context.inputs) - 1)
        if isinstance(leaf, (Tracer, SymInt, np.generic)) or _is_array_leaf(leaf) or (
            type(leaf) in PYTHON_SCALARS
        ):
            program_index += 1
    forward_outputs = len(output_atoms)
    for gradient in reverse(context, outputs, seeds, tracers):
        atom, _, _ = context.atom(gradient)
        output_atoms.append(atom)
    return GradientPlan(forward_outputs, differentiable, cotangent_inputs, wrt)


def _with_user_line(error):
    """``error`` as a ``TraceError`` that starts with the innermost user line of its
    traceback (the line that called what tracejit does not support)."""
    location = None
    traceback = error.__traceback__
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if not is_internal(filename):
            location = (filename, traceback.tb_lineno)
        traceback = traceback.tb_next
    if location is None:
        return TraceError(str(error))
    source = linecache.getline(*location).strip()
    return TraceError(f"{location[0]}:{location[1]}: {error}\n    {source}")


def _numpy_scalar(tracer):
    """A 0-d tracer's value as a NumPy scalar (a pending one stays pending)."""
    value = tracer.raw_value
    if is_pending(value):
        return Pending(lambda: np.asarray(value.force())[()], like=tracer.dtype.type(0))
    return np.asarray(value)[()]


def _is_numpy_scalar(tracer):
    value = tracer.raw_value
    if is_pending(value) and value.like is not None:
        return isinstance(value.like, np.generic)
    return isinstance(tracer.value, np.generic)



def _picks_one_element(index):
    """``x[index]`` is a NumPy scalar (not a 0-d array): integers only, no ``...``."""
    entries = index if isinstance(index, tuple) else (index,)
    return all(isinstance(entry, (int, np.integer, SymInt)) and not isinstance(entry, bool)
               or (isinstance(entry, Tracer) and not entry.shape and entry.dtype.kind in "iu")
               for entry in entries)


def _parameter_leaves(fn, args, kwargs, top_level):
    """Parameter name -> argument leaf position, for arguments that are single leaves."""
    names = _argument_names(fn, args, kwargs)
    if names is None:
        return {}
    positions = {}
    for leaf, argument in enumerate(top_level):
        name = names[argument] if isinstance(argument, int) and argument < len(names) else (
            argument)
        value = args[argument] if isinstance(argument, int) else kwargs.get(argument)
        if top_level.count(argument) == 1 and pytree.flatten(value)[1].kind == "leaf":
            positions[name] = leaf  # ({"lr": 0.1} holds one leaf, but is no leaf itself)
    return positions


__all__ = ["InputSpec", "Trace", "Tracer", "TracingContext", "current_context", "trace", "wrap"]
