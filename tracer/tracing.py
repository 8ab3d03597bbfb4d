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

import builtins
import inspect
import linecache
import operator
import sys
import weakref
from dataclasses import dataclass, field

import numpy as np

from . import (
    argument_views,
    argument_writes,
    attribute_writes,
    generators,
    list_appends,
    loop_trip_counts,
    pinned_scalars,
    pytree,
    random_draws,
    result_identity,
    shared_objects,
    strided_views,
    tensor_methods,
)
from .abstract import (
    COMPILED_DTYPES,
    NARROW_DTYPES,
    PYTHON_SCALARS,
    AbstractArray,
    is_number_argument,
)
from .dims import DimExpr, SymInt, SymRange, expr_of, value_of, wrap
from .errors import TraceError, TraceTooLarge, UnsupportedError, as_numpy_would
from .frontend import run_rewritten
from .implicit import find_implicit_inputs
from .ir import Constant, Eqn, Graph, Guard, Literal, Var, verify
from .locations import is_internal, line_prefix, user_location
from .loops import UNDEFINED, write_prints
from .numpy_warnings import ErrorModes, computed
from .object_paths import guarded_by_class
from .outside_inputs import OutsideInputs
from .passes import decisions_may_differ
from .pending import deferred, force, is_pending, recording_lazily
from .primitives import current_context, recording_into
from .purity import is_stateful
from .python_arithmetic import check as check_python_arithmetic
from .shape_facts import ShapeFacts, unique_guards
from .shapes import pow2_bucket
from .stacked_containers import plain_containers
from .traced_array import Tracer, trace_error
from .unrepeatable_results import (
    refuse_outside_containers,
    refuse_traced_callable,
    refuse_unrebuilt,
)
from .unseen_prints import unseen_print
from .view_writes import KeptRoot, steps_of

# Primitives whose NumPy result is a view of their first operand (basic indexing & co).
_VIEW_PRIMITIVES = {"reshape", "transpose", "slice", "flip"}


@dataclass
class InputSpec:
    """How one leaf of the arguments enters the graph."""

    kind: str  # "array", "scalar" (a dynamic Python or NumPy scalar), "static"
    input_index: int | None = None  # position in graph.inputs
    type_name: str = ""
    value: object = None  # static leaves: the value the trace specialized on


# Arrays at least this big that a trace computes while it records no gradient are held by
# their tracers alone (``Values``), so they are freed when the function drops them, as in
# an eager run; smaller ones are kept for the whole trace (cheap, and always there).
WEAK_VALUE_BYTES = 1 << 16
# Operations one trace may record. A Python loop that cannot be captured unrolls trip by
# trip; a course's gradient descent of 2,000 iterations makes ~60,000 operations, whose
# tracing, rounding bounds and LLVM would take many minutes (codegen.program.KERNEL_LIMIT
# refuses such a program only after all that). Past the limit the call runs eagerly, after
# seconds; the longest programs compiled on purpose (a chain of 1,000 pointwise ops, an
# RNN unrolled over a padded sequence) stay far below it.
EQUATION_LIMIT = 16384

# Data-dependent decisions one trace may record (guards outside captured loops). Past it
# the call runs eagerly: every other input would take a side exit somewhere along such a
# path, and tracing, margins and LLVM grow with it (a 500-trip gradient-descent loop
# returning its break index, unrolled with two guards per trip, took ~140 s a call).
DECISION_LIMIT = 256


class Values(dict):
    """var name -> ``(real value, live shape)``, what reverse-mode autodiff and loop
    capture read back. Large arrays recorded with ``hold_weakly`` stay here only while
    something else (their tracer) holds them: a trace kept every intermediate of gelu on
    4096 x 4096 alive until it finished (600 MB over the eager run's peak)."""

    def __init__(self):
        super().__init__()
        self.weak = {}  # var name -> (weakref to the array, live shape)

    def hold_weakly(self, name, value, shape):
        self.weak[name] = (weakref.ref(value), shape)

    def __missing__(self, name):
        reference, shape = self.weak[name]
        value = reference()
        if value is None:
            raise KeyError(f"the value of {name} was freed before the trace read it again")
        return value, shape


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
    # result leaf -> (mutated argument leaf, graph output): a view of the argument that
    # NumPy may copy (argument_views.may_copy), and the program's value for it
    refreshed_views: dict = field(default_factory=dict)
    # result leaf -> index in argument_writes of the outside array it is (``self.W -= g;
    # return self.W``: the array itself, as NumPy returns it)
    outside_aliases: dict = field(default_factory=dict)
    # result leaf -> (argument leaf or None, kind, params): np.ascontiguousarray or
    # np.diagonal of an argument, made from the caller's (result_identity.numpy_results)
    numpy_results: dict = field(default_factory=dict)
    functions: list = field(default_factory=list)
    outside_values: list = field(default_factory=list)  # (Path, "value"|"len", value)
    gradients: object = None  # what trace(backward=...) recorded: gradient_trace.GradientPlan
    symbol_values: dict = field(default_factory=dict)  # each symbol's size in this call
    loop_notes: list = field(default_factory=list)  # "loop at f.py:7 unrolled: why"
    captured_loops: list = field(default_factory=list)  # "f.py:7" of each loop captured
    pending: bool = False  # outputs hold Pending values (trace(lazy=True))
    undecided: bool = False  # no effects, outputs not the call's: trace(check_decisions=True)
    argument_writes: list = field(default_factory=list)  # tracer.argument_writes.ArgumentWrite
    # (place in the result, argument place) of dicts and lists returned that are arguments'
    returned_containers: list = field(default_factory=list)
    # the result's leaves as ``output_tree`` holds them (``outputs`` is built from them; a
    # list a loop filled is its buffers here, its entries there: tracer.loop_rows)
    output_values: list = None
    # the host draws to replay at every call (tracer.random_draws.DrawProgram), and which
    # graph inputs take their values: input index -> number of the value drawn
    draws: object = None
    drawn_inputs: dict = field(default_factory=dict)
    # graph input index -> (argument leaf, symbol): a loop's trip count that argument gives
    # (tracer.loop_trip_counts: the input is an empty array of shape (count, 0))
    count_inputs: dict = field(default_factory=dict)
    # the generators' states before the trace drew (random_draws.Journal; set by whoever
    # traced inside ``random_draws.journal()``)
    journal: object = None
    # the graph outputs, and the result's leaves, that are Tensors eagerly (computed from a
    # Tensor argument or one the function reached: tensor_methods.tensor_outputs)
    tensor_outputs: frozenset = frozenset()
    tensor_leaves: frozenset = frozenset()

    def rewind_draws(self):
        """Undo the trace's draws: the call's result comes from elsewhere (an eager run, or
        the program, which draws them again)."""
        if self.journal is not None:
            self.journal.rewind()

    def force_outputs(self):
        """Compute the outputs a lazy trace left pending (the NumPy reference of the
        remaining loop trips); the outputs from then on."""
        if self.pending:
            self.output_values = [force(leaf) for leaf in self.output_values]
            self.outputs = pytree.unflatten(self.output_tree, self.output_values)
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


class TracingContext(ShapeFacts, OutsideInputs):
    """The state of one trace while the function runs: the graph being recorded
    (here), what it knows of its symbolic dims (``shape_facts.ShapeFacts``) and the
    arrays and values it read from outside the function
    (``outside_inputs.OutsideInputs``)."""

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
        self.decisions = 0  # guards recorded outside a captured loop's trial trips
        self.counter = 0
        self.mutated = {}  # id(input tracer) -> tracer
        self.outside_mutations = {}  # id(outside array) -> its input's tracer, written
        # self.cache = x on objects from outside (tracer/attribute_writes.py)
        self.outside_objects, self.created_objects = {}, {}
        self.attribute_writes, self.attribute_originals, self.written_paths = {}, {}, set()
        self.outside_copies, self.outside_contents = {}, {}
        # dicts whose keys calls write (outside_inputs.state_value): id(dict) -> (path,
        # keys), path key -> (dict, keys)
        self.state_dicts, self.state_paths = {}, {}
        self.input_tracers = []
        self.implicit_tracers = {}
        self.outside_values = {}
        self.hooks = None  # the front end's hooks while the function runs (frontend.Hooks)
        self.replaced = {}  # id(ndarray) -> the tracer standing for it after a traced write
        # id(SymInt) -> it, for dims NumPy computed (np.prod(x.shape[1:])): an np.int64 result
        self.numpy_dims = {}
        self.keep_alive = []
        self.values = Values()  # var name -> (real value, live shape): for reverse-mode autodiff
        self.locations = {}  # var name -> the user's Location (Graph.locations)
        self.trip_counts = loop_trip_counts.TripCounts()  # range(num_iterations)
        # compiled code renders printed arrays after the call, under the options then in
        # force: a print under options the function set itself refuses (Hooks.print)
        self.print_options = np.get_printoptions()
        # and to the streams of the call: a print after the function redirected stdout
        # (contextlib.redirect_stdout(buffer)) refuses (Hooks.print)
        self.streams = {"stdout": sys.stdout, "stderr": sys.stderr}
        # and to NumPy's error modes of the call: modes the function itself sets to raise
        # refuse (bind; compiled code checks no floating-point flags)
        self.error_modes = ErrorModes()
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

    def atom(self, value):
        """``(atom, concrete value, live abstract value)`` for an operand of a primitive."""
        if isinstance(value, Tracer):
            if value.context is not self:
                raise trace_error(
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
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            # compiled code holds ints in 64 bits; Python's do not wrap (NumPy's float
            # arithmetic converts it exactly enough, its int arithmetic raises)
            raise trace_error(f"a Python int beyond 64 bits ({value}) in a traced operation")
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
            raise trace_error(f"an operand of type {type(value).__name__} is not an array")
        if self._view_of_replaced(array):
            raise trace_error("a NumPy view (row = buf[0]) of an array that was then written "
                              "with traced values: NumPy's view sees the write, the trace "
                              "cannot follow it. Take the view after the write, or copy it")
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


    # --- recording ---------------------------------------------------------------------
    def process(self, prim, args, params):
        if self.finished:
            raise trace_error("a traced value was used after its trace finished (it escaped)")
        atoms, values, avals = [], [], []
        for arg in args:
            atom, value, aval = self.atom(arg)
            atoms.append(atom)
            values.append(value)
            avals.append(aval)
        if prim.name in _PYTHON_INT_GROWTH and all(
                aval.weak and aval.dtype.kind in "iu" for aval in avals) and (
                not _fits_int64(prim, args)):
            # A run-time Python int to the power of (or times) a Python int where 64 bits
            # may not hold the result (2 ** n at n = 64): Python's ints do not wrap, so the
            # result is Python's, the traced operands guarded to their values
            python = _PYTHON_INT_GROWTH[prim.name]
            return python(*(int(arg) if hasattr(arg, "ir_var") else arg for arg in args))
        if prim.name in _PYTHON_INT_CONVERTED:
            _keep_python_ints_in_range(args, avals)
        elif prim.name in _COMPARISONS:
            _compare_python_ints_in_range(args, avals)
        # (decided first: the check forces a pending operand, which compute cannot take)
        lazy = recording_lazily() or any(is_pending(value) for value in values)
        check_python_arithmetic(self, prim, args, values, avals)  # 1.0 / 0.0 raises
        modes = self.error_modes.set_since()
        if modes is not None:
            raise trace_error(f"{prim.name} under {modes} set inside the function: "
                              "compiled code checks no floating-point flags, so it would "
                              "not raise FloatingPointError where NumPy does")
        concrete = {key: _concrete_param(value) for key, value in params.items()}
        if prim.kind == "control":  # a loop replayed by reverse mode, maybe in a loop body:
            concrete["bindings"] = self.symbol_values()  # its body may read outer indices
        out_aval = prim.abstract_eval(*avals, **params)

        def compute(*values):
            out_value = computed(prim.name, prim.impl, *values, **concrete)
            if out_aval.weak:  # a Python scalar, so NumPy promotes it as one (NEP 50)
                out_value = np.asarray(out_value).item()
            _check_result(prim, out_aval, out_value)
            return out_value

        if lazy:  # on demand
            out_value = deferred(compute, values, [isinstance(arg, Tracer) for arg in args])
            if out_aval.weak:
                out_value.like = np.zeros((), out_aval.dtype).item()
        else:
            out_value = compute(*values)
        var = self.new_var(AbstractArray(tuple(expr_of(dim) for dim in out_aval.shape),
                                         out_aval.dtype, out_aval.weak))
        record = tuple(sorted((key, _record_param(value)) for key, value in params.items()))
        if len(self.body) >= EQUATION_LIMIT:
            raise TraceTooLarge(str(trace_error(
                f"too large to compile: the trace passed {EQUATION_LIMIT} operations (a "
                "Python loop unrolled trip by trip?); jit one step of the loop instead, or "
                "write the loop in a form tracejit captures (docs/sharp_bits.md, 'What "
                "unrolls')")))
        self.body.append(Eqn(prim, tuple(atoms), record, var))
        self.locations[var.name] = user_location(skip=2)
        result = Tracer(self, var, out_value, tuple(out_aval.shape))
        if type(out_value) is np.ndarray and out_value.nbytes >= WEAK_VALUE_BYTES and not (
                getattr(self, "records_gradients", False)):
            self.values.hold_weakly(var.name, out_value, result.shape)
        else:
            self.values[var.name] = (out_value, result.shape)
        if prim.name in _VIEW_PRIMITIVES and isinstance(args[0], Tracer):
            source = args[0]
            root = source.view_base() if source.view_base is not None else None
            root = source if root is None else root
            result.steps = steps_of(source, root, prim, params)  # a write through it: root's
            # a followable view keeps its root alive (its siblings must see its writes)
            result.view_base = weakref.ref(root) if result.steps is None else KeptRoot(root)
            result.readonly = source.readonly  # a view of np.broadcast_to's result
            if prim.name == "slice" and root is source:  # the part of the base it shows
                result.region = tuple(zip(params["starts"], params["limits"]))
            elif prim.name != "slice":  # reshaped, transposed, flipped: the same elements
                result.region = source.region
            if root.views is None:
                root.views = weakref.WeakSet()
            root.views.add(result)
        return result

    def guard(self, tracer, convert, expected):
        if self.finished:
            raise trace_error("a traced value was used after its trace finished (it escaped)")
        atom, _, _ = self.atom(tracer)
        pinned_scalars.check_guard(self, atom, convert)  # stride as a slice bound: constant
        location = user_location(skip=3)
        if not getattr(self, "loop_depth", 0):  # (a trial's guards become the loop's)
            self.decisions += 1
            if self.decisions > DECISION_LIMIT:
                raise UnsupportedError(
                    f"{line_prefix(location)}more than {DECISION_LIMIT} decisions on traced "
                    "values in one call (a loop unrolled with a decision per trip: a `break` "
                    "whose index is read after the loop, a Python int counter in the exit "
                    "test); a program with that many guards would exit on nearly every "
                    "other input, so calls like this one run eagerly. To compile it, write "
                    "the loop in a form tracejit captures (one `break`, array carries, the "
                    "index not read after the loop: docs/sharp_bits.md, 'What unrolls'); "
                    "explain() names the loop")
        self.body.append(Guard(atom, convert, expected, location))
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

    def release(self):
        """Drop the real values of a finished trace. Its tracers point back at it (and
        escaped ones refuse use from now on): without this, that cycle kept every
        intermediate array alive until a garbage collection (gelu on 4096 x 4096: 600 MB)."""
        self.values = Values()
        self.input_tracers, self.implicit_tracers, self.mutated = [], {}, {}
        self.replaced, self.keep_alive, self.numpy_dims = {}, [], {}

    def note_mutation(self, tracer):
        if any(tracer is original for original in self.input_tracers):
            self.mutated[id(tracer)] = tracer
        elif any(tracer is known for known in self.implicit_tracers.values()) and not (
            argument_writes.note_outside_mutation(self, tracer)
        ):
            raise trace_error("an in-place write into a Tensor read from outside the "
                              "arguments; pass it in as an argument")

    # --- finishing ---------------------------------------------------------------------
    def graph(self, outputs):
        return Graph(
            self.name,
            tuple(self.inputs),
            tuple(self.constants),
            tuple(self.body),
            tuple(outputs),
            tuple(self.symbols.values()),
            tuple(unique_guards(self.shape_guards)),
            frozenset(getattr(self, "gradient_vars", ())),
            locations=dict(self.locations),
        )


def _same_contents(array, snapshot):
    return array.shape == snapshot.shape and array.dtype == snapshot.dtype and (
        array.tobytes() == snapshot.tobytes())


def _is_output_leaf(leaf):
    """A result leaf the program computes (an array or a number), not a static value."""
    return isinstance(leaf, (Tracer, SymInt, np.generic)) or _is_array_leaf(leaf) or (
        type(leaf) in PYTHON_SCALARS)


def returned_objects(statics, leaves):
    """``{result leaf: argument leaf}`` for the static results that are an object argument
    itself (``return self``), of a class its variant guards by class
    (``object_paths.guarded_by_class``): the result is the call's argument, not the traced
    one."""
    return {index: position for index, value in statics.items()
            for position, leaf in enumerate(leaves)
            if value is leaf and guarded_by_class(leaf)}


def _static_result(leaf):
    """A result the program does not compute, as eager has it: a ``range`` or ``slice``
    over a dynamic dim holds its value (specialized), not the symbol."""
    if isinstance(leaf, SymRange):
        return leaf.real()
    if isinstance(leaf, slice) and any(isinstance(part, SymInt) for part in (
            leaf.start, leaf.stop, leaf.step)):
        return slice(*(int(part) if isinstance(part, SymInt) else part
                       for part in (leaf.start, leaf.stop, leaf.step)))
    return leaf


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
# Pointwise primitives whose result on Python ints outgrows int64 long before its operands
_PYTHON_INT_GROWTH = {"multiply": operator.mul, "power": operator.pow}
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


# Operations where NumPy converts a Python int operand to the array's integer dtype (NEP
# 50) and raises OverflowError past its range; comparisons and true division do not.
_PYTHON_INT_CONVERTED = frozenset({"add", "subtract", "multiply", "floor_divide", "mod",
                                   "power", "maximum", "minimum"})


def _keep_python_ints_in_range(args, avals):
    """``ids * n`` with ``ids`` int32 and ``n`` a run-time Python int: guards keep ``n``
    in int32's range, so a call past it runs eagerly and raises NumPy's OverflowError (as
    this trace does when ``n`` is past it already)."""
    strong = [aval.dtype for aval in avals if not aval.weak and aval.dtype.kind in "iu"]
    if not strong or (strong[0] == np.int64):
        return  # (a Python int past int64 never enters a traced operation)
    info = np.iinfo(strong[0])
    low, high = int(info.min), builtins.min(int(info.max), _INT64_MAX)
    for arg, aval in zip(args, avals):
        if aval.weak and aval.dtype.kind in "iu" and hasattr(arg, "ir_var") and not (
                bool(arg >= low) and bool(arg <= high)):
            raise as_numpy_would(OverflowError(
                f"Python integer {int(arg.value)} out of bounds for {strong[0]}"))


_COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater",
                          "greater_equal"})


def _compare_python_ints_in_range(args, avals):
    """``ids < n`` with ``ids`` int32 and ``n`` a Python int past int32: NumPy compares
    the values (NEP 50: ``ids < 2**40`` is all True), compiled code would convert ``n`` to
    int32 and wrap. In range (a guard on a run-time ``n``) it compiles; past it the call
    runs eagerly."""
    strong = [aval.dtype for aval in avals if not aval.weak and aval.dtype.kind in "iu"]
    if not strong or (strong[0] == np.int64):
        return
    info = np.iinfo(strong[0])
    low, high = int(info.min), builtins.min(int(info.max), _INT64_MAX)
    for arg, aval in zip(args, avals):
        if aval.weak and aval.dtype.kind in "iu" and not (
                bool(arg >= low) and bool(arg <= high)):
            raise UnsupportedError(
                f"a comparison of a {strong[0]} array with the Python int {int(arg)}, past "
                f"{strong[0]}'s range: NumPy compares the values, compiled code would wrap")


def _fits_int64(prim, args):
    """Whether a product of Python ints (some traced) stays in int64 whatever the traced
    operands' values, given the guards recorded here: each traced operand bounded so the
    product cannot wrap (|n| <= 2**63 // |c| times a constant c; 2**31 each for two
    traced ones). A power never does. Records the bound's guard (a call past it side-
    exits), or False when the traced value is past it already."""
    if prim.name != "multiply":
        return False
    constants = [abs(int(arg)) for arg in args if not hasattr(arg, "ir_var")]
    bound = _INT64_MAX // max(constants[0], 1) if constants else 2 ** 31 - 1
    return all(bool(abs(arg) <= bound) for arg in args if hasattr(arg, "ir_var"))


def _symbol_for(context, symbols_by_size, size, bucket, taken):
    """The symbol of a dynamic dim of ``size`` in ``bucket``, other than the dims in
    ``taken``. Dims of the same size share one (``x + y`` on ``(n, d)`` and ``(n, d)``
    needs no equality guard, as torch's duck sizing does; a square ``(h, h)`` weight
    keeps one symbol, so ``h @ w`` carries ``h``'s shape through a loop). The caller
    passes an array's own earlier dims as ``taken`` when the array has three or more
    axes: there equal sizes are a coincidence of batched data (a ``32x3x32x32`` batch,
    a ``224x224`` image), and sharing would compile that variant for square images
    only, so ``255x129`` in the same bucket would compile again. Axes an op needs equal
    get a shape guard when it asks (``ShapeFacts.decide``)."""
    known = symbols_by_size.setdefault((size, bucket), [])
    for symbol in known:
        if not any(symbol is dim for dim in taken):
            return symbol
    known.append(context.new_symbol(size, *bucket))
    return known[-1]


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


def _argument(fn, name, position, call, argument_names):
    """Leaf ``position`` of ``call`` (``(args, kwargs)``), refused, as the user finds it:
    the function's file and line first, then its parameter's name (``"f.py:3: argument `x`
    of f"``; ``"an entry of argument `params`"`` for a leaf of a tuple, list or dict)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)  # value_and_grad(loss): loss's
    where = f"{code.co_filename}:{code.co_firstlineno}: " if code is not None else ""
    args, kwargs = call
    argument = pytree.argument_positions(args, kwargs)[position]
    value = args[argument] if isinstance(argument, int) else kwargs[argument]
    entry = "" if _is_array_leaf(value) else "an entry of "
    if isinstance(argument, int) and argument < len(argument_names) and (
            argument_names[argument] is not None):
        argument = argument_names[argument]
    if isinstance(argument, str):
        return f"{where}{entry}argument `{argument}` of {name}"
    return f"{where}{entry}argument {argument} of {name}"


def _argument_names(fn, args, kwargs, partial=False):
    """The parameter of ``fn`` each argument binds to, in order, or ``None`` where the
    signature cannot be read or does not take these arguments (with ``partial``, missing
    arguments are allowed)."""
    try:
        signature = inspect.signature(fn)
        bound = (signature.bind_partial if partial else signature.bind)(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    names = []
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_POSITIONAL:
            # each argument *args takes has no name of its own (``args`` is the tuple: a
            # path through it from one argument's leaf read another argument)
            names.extend([None] * len(value))
        else:
            names.append(name)
    return names


def trace(fn, *args, dynamic=None, implicit=None, name=None, check=False, backward=None,
          capture_loops=True, lazy=False, check_decisions=False, call_kwargs=None,
          effects=True, **kwargs):
    """Run ``fn(*args, **kwargs)`` once on the real inputs and record it as IR.

    ``call_kwargs``: the function's keyword arguments, given apart (the runtime does) so
    that one named like an option here (``name``, ``dynamic``) is the function's.

    ``dynamic``: ``None``/``False`` (every dim static), ``True`` (every dim of every array
    argument dynamic, bucketed by powers of two), a dict from argument position or name to
    the dynamic axes (``{"x": (0,)}``) or to ``{axis: (low, high)}`` ranges, or a callable
    ``(leaf index, array) -> axes or {axis: (low, high)}`` (how the runtime decides).
    Dims of size 0 and 1 are never dynamic. Equal dynamic dims share one symbol.
    ``implicit``: ``{id(array): (path, array)}`` of arrays reachable from globals,
    closures, defaults and attributes (``tracejit.tracer.implicit.find_implicit_inputs``); they
    become graph inputs instead of constants. ``check=True`` runs the verifier on the
    graph (compiling verifies it after every pass anyway). ``backward`` appends a backward
    pass once the function has returned (``tracejit.tracer.gradient_trace``, whose
    ``trace_with_gradients`` passes one; the tracer knows nothing of autodiff):
    ``backward.wanted(leaves, implicit)`` says whether there is one to record (loops then
    stay capturable for reverse mode), ``backward.record(...)`` records it and returns what
    ``Trace.gradients`` holds. ``lazy=True`` may leave
    outputs a captured loop computes ``Pending`` (``Trace.pending``;
    ``Trace.force_outputs()`` computes them): the runtime
    takes them from the compiled program instead (tracejit.tracer.pending).
    ``check_decisions=True``: when a decision the trace took may not be eager NumPy's
    (``passes.decisions_may_differ``), the trace leaves the caller's arrays, dicts and
    objects as they were and prints nothing, and its outputs are not the call's result
    (``Trace.undecided``; they only show each output's kind): the runtime takes the
    call's result from the compiled program, or runs the call eagerly.
    ``effects=False``: the same whatever the decisions (one array passed for several
    arguments: the trace holds them apart, so its writes and outputs are not the call's).
    """
    if call_kwargs is not None:
        kwargs = dict(call_kwargs)
    name = name or getattr(fn, "__name__", "function")
    leaves, input_tree = pytree.flatten((args, kwargs))
    objects = {}  # where an attribute write finds its object again (attribute_writes)
    found = find_implicit_inputs(fn, leaves, objects)
    implicit = found if implicit is None else implicit
    context = TracingContext(name, implicit)
    context.outside_objects = objects
    attribute_writes.watch(context)
    # Loops stay captured in traces that record gradients too (tracejit.tracer.loop_autodiff), but
    # a loop whose body loop_autodiff cannot reverse is unrolled (tracejit.tracer.loops asks).
    context.unroll_loops = not capture_loops
    # which int attributes are loop counts read at run time (tracer.count_attributes)
    context.count_policy = dynamic if hasattr(dynamic, "count_attribute") else None
    context.records_gradients = backward is not None and backward.wanted(leaves, implicit)
    # best effort, for dynamic={"x": ...}
    argument_names = _argument_names(fn, args, kwargs, partial=True) or [None] * len(args)
    top_level = pytree.argument_positions(args, kwargs)

    input_specs, traced_leaves, symbols_by_size = [], [], {}
    # eagerly, values computed from Tensor arguments are Tensors (Hooks._eager_type)
    context.tensor_inputs = {}  # input name -> whether that Tensor requires grad
    context.tensor_arguments = any(_is_array_leaf(leaf) and not isinstance(leaf, np.ndarray)
                                   for leaf in leaves)
    for position, leaf in enumerate(leaves):
        if _is_array_leaf(leaf):
            if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray:
                # np.matrix multiplies with *, a masked array skips masked entries: compiled
                # code computes with plain ndarrays, so a subclass runs as the user wrote it.
                raise TraceError(
                    f"{_argument(fn, name, position, (args, kwargs), argument_names)} is a "
                    f"{type(leaf).__module__}.{type(leaf).__qualname__}, an ndarray "
                    "subclass; compiled functions take plain ndarrays (np.asarray(x) to "
                    "compile)"
                )
            array = np.asarray(leaf)
            if array.dtype.kind not in "biuf":
                raise TraceError(
                    f"{_argument(fn, name, position, (args, kwargs), argument_names)} is an array "
                    f"of {array.dtype}; compiled functions take boolean, integer and float "
                    "arrays"
                )
            if not array.dtype.isnative:
                raise TraceError(
                    f"{_argument(fn, name, position, (args, kwargs), argument_names)} is a "
                    f"{array.dtype.name} array in non-native byte order; compiled code reads "
                    "native byte order. Convert it with x.astype(x.dtype.newbyteorder('=')) "
                    "to compile"
                )
            if array.dtype not in COMPILED_DTYPES + NARROW_DTYPES:  # (kernels refuse it)
                raise TraceError(
                    f"{_argument(fn, name, position, (args, kwargs), argument_names)} is a "
                    f"{array.dtype} array; compiled code holds bool, int32, int64, float32 "
                    "and float64 arrays. Pass x.astype(np.float32) (or np.int32) to compile"
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
                    own = shape if array.ndim >= 3 else ()
                    shape.append(_symbol_for(context, symbols_by_size, size, axes[axis], own))
                else:
                    shape.append(size)
            tracer = context.add_input(array, shape)
            if array.ndim == 0 and array.dtype.kind in "iu" and isinstance(leaf, np.ndarray):
                loop_trip_counts.note_count_array(context, tracer.ir_var, position)
            if not isinstance(leaf, np.ndarray):  # a Tensor (tracejit.tracer.tensor_methods)
                context.tensor_inputs[tracer.ir_var.name] = bool(leaf.requires_grad)
            input_specs.append(InputSpec("array", len(context.inputs) - 1, type(leaf).__name__))
            traced_leaves.append(tracer)
        elif is_number_argument(leaf) and _is_dynamic_scalar(
                dynamic, top_level[position], argument_names, position):
            # a Python number is weakly typed; a NumPy scalar keeps its dtype (NEP 50)
            tracer = context.add_input(leaf, (), weak=type(leaf) in (int, float))
            pinned_scalars.note_input(context, tracer.ir_var, position, dynamic)
            input_specs.append(InputSpec("scalar", len(context.inputs) - 1, type(leaf).__name__))
            traced_leaves.append(tracer)
        else:
            if is_stateful(leaf):
                # A static leaf is specialized by identity: the program traced on this call
                # would fold what next() yielded now, and leave the iterator where it is.
                raise TraceError(
                    f"argument {position} of {name} is a {type(leaf).__name__}, an "
                    "iterator: each call advances it, and compiled runs would not. Pass "
                    "the values it yields instead"
                )
            input_specs.append(InputSpec("static", value=leaf, type_name=type(leaf).__name__))
            traced_leaves.append(leaf)

    traced_args, traced_kwargs = pytree.unflatten(input_tree, traced_leaves)
    argument_writes.watch(context, traced_args, traced_kwargs)
    list_appends.watch(context, args, kwargs, traced_leaves)  # self.hs.append(h)
    parameter_leaves = _parameter_leaves(fn, args, kwargs, top_level)
    # objects inside container arguments are found again by leaf: state["optimizer"].lr
    static_leaves = {position: leaf for position, (leaf, spec) in enumerate(zip(
        leaves, input_specs)) if spec.kind == "static"}
    try:
        with recording_into(context), generators.finalizer_errors(context):
            result, functions = run_rewritten(fn, traced_args, traced_kwargs,
                                              parameter_leaves, static_leaves)
            # next_w, config = adam(w, dw, config): the caller's dict itself, as NumPy
            # returns it (found before plain_containers makes the result's containers anew)
            returned = argument_writes.returned_containers(context, result)
            refuse_outside_containers(result, context.outside_objects,  # return self.params
                                      context.outside_copies)
            returned_result = result  # (self.history with a list appended to: refused below)
            result = plain_containers(result)  # the lists and dicts a loop filled
        change = argument_writes.unfollowed_change(context) or (
            attribute_writes.unfollowed_change(context))
        if change is not None:
            raise UnsupportedError(f"{change} the trace cannot follow (compiled runs would "
                                   "skip it); return the new values instead")
        shared = argument_writes.shared_memory(context, leaves) or (
            argument_writes.shared_containers(context, args, kwargs)) or (
            list_appends.returned_appended_list(context, returned_result))
        if shared is not None:
            raise UnsupportedError(shared)
        shared_objects.note(context, (args, kwargs), leaves)  # self.a.fc is self.b.fc?
        if (error := generators.finalizer_error(context)) is not None:
            raise error  # raised in a generator's finally, where Python only reports it
        if (error := unseen_print(context)) is not None:
            raise error  # (refused where it printed; the user's code caught it)
        left = generators.unfinished(context) or strided_views.escaped(context)
        if left is not None:  # a generator would run on after the trace; x.strides kept
            raise UnsupportedError(left)
    except UnsupportedError as error:
        context.finished = True  # tracers that escaped now refuse to be used
        attribute_writes.restore(context)
        raise _with_user_line(error) from None
    except BaseException:
        context.finished = True
        attribute_writes.restore(context)
        raise

    # Until the effects are applied or undone below, the caller's objects hold the trace's
    # values (self.h = tracer): a failure from here on must put them back, or the eager
    # run would read them (and apply its own writes over the trace's: self.log += 'a'
    # twice).
    try:
        refuse_unrebuilt(result)  # return EasyDict(loss=loss), {"seen": set()}
        out_leaves, output_tree = pytree.flatten(result)
        outputs, output_atoms, statics, atom_positions = [], [], {}, {}
        # t = np.zeros(3); return t, t[1:]: views of one constant, as NumPy's share memory
        constant_views = result_identity.constant_views(context, out_leaves)
        # t4 = t3[:-1]; t3[4] = ...: t4 views t3's final value, as NumPy's does
        constant_views.update(result_identity.refreshed_views(context, out_leaves,
                                                              traced_leaves))
        for index, leaf in enumerate(out_leaves):
            if _is_output_leaf(leaf):
                atom, value, aval = context.atom(constant_views.get(index, leaf))
                if type(leaf) is np.ndarray and id(leaf) not in context.replaced:
                    value = leaf  # the array the function made (the graph has a frozen copy)
                if isinstance(leaf, SymInt) and id(leaf) in context.numpy_dims:
                    value = np.int64(value)  # the kind of result eager returns
                if is_pending(value) and value.like is None and not aval.shape:
                    value = force(value)  # a scalar or a 0-d array: the kind of result it is
                atom_positions[index] = len(output_atoms)
                output_atoms.append(atom)
                outputs.append(value)
            elif leaf is UNDEFINED:  # assigned only in a loop that ran no trip: Python raises
                raise as_numpy_would(UnboundLocalError(
                    "a result is a name assigned only inside a loop that ran no iteration"))
            else:
                attribute_writes.refuse_returned_object(context, leaf)  # Model().fit(X)
                # return out, lambda g: g @ w.T; return x + rs.rand(n), rs
                refuse_traced_callable(leaf, (Tracer,), getattr(context, "made_rngs", ()))
                statics[index] = _static_result(leaf)
                outputs.append(statics[index])

        mutated = {}
        for position, tracer in enumerate(traced_leaves):
            if isinstance(tracer, Tracer) and id(tracer) in context.mutated:
                mutated[position] = len(output_atoms)
                output_atoms.append(tracer.ir_var)
        # ``w -= lr * dw; return w``: that result is the caller's array itself, as in NumPy
        aliases = {index: position for index, leaf in enumerate(out_leaves)
                   for position in mutated if leaf is traced_leaves[position]}
        # ``return self`` (a fit returning its estimator): the call's own argument, so the
        # variant serves every object of the class (runtime/object_arguments.py)
        aliases.update(returned_objects(statics, leaves))
        # ``return w.T`` after it: NumPy's view of the caller's array (argument_views)
        differentiated = backward is not None and any(
            getattr(leaf, "requires_grad", False) for leaf in leaves)
        # np.ascontiguousarray(x[1:]) after x *= 2: NumPy's view of the caller's x, when it
        # is contiguous (its source's chain of views, made the same way)
        contiguous = {} if differentiated else result_identity.contiguous_sources(
            context, out_leaves)
        views = {} if differentiated else argument_views.updated_argument_views(
            context, [contiguous.get(index, leaf) for index, leaf in enumerate(out_leaves)],
            traced_leaves, mutated)
        # return np.broadcast_to(x, ...): the traced call's value is the primitive's copy
        broadcasts = {} if differentiated or context.tensor_arguments else (
            argument_views.returned_broadcasts(context, out_leaves, traced_leaves, mutated))
        refreshed = {}  # w.reshape(-1): the program's array when NumPy's copies
        for index, (position, chain) in views.items():
            source = context.inputs[input_specs[position].input_index]
            if argument_views.may_copy(chain):
                refreshed[index] = (position, len(output_atoms))
                output_atoms.append(output_atoms[atom_positions[index]])
            output_atoms[atom_positions[index]] = argument_views.rebased(context, chain, source)
        # x[...] is a new view, not x: one IR value is one object from here on
        result_identity.distinct_objects(context, out_leaves, output_atoms, atom_positions,
                                         traced_leaves)
        result_identity.numpy_copies(context, out_leaves, output_atoms, atom_positions)
        # (after: np.diagonal(W) and np.ascontiguousarray(W) both hand W to NumPy)
        remade = result_identity.numpy_results(context, out_leaves, output_atoms,
                                               atom_positions, traced_leaves,
                                               views.keys() & contiguous.keys())
        writes = argument_writes.collect(context, output_atoms, _is_output_leaf)
        outside_aliases = argument_writes.outside_aliases(context, out_leaves, writes)
        try:
            writes += attribute_writes.collect(context, output_atoms, _is_output_leaf)
            writes += list_appends.collect(context, output_atoms)  # after: program order
        except TypeError as error:
            raise _with_user_line(UnsupportedError(f"{error} cannot be stored again at every "
                                                   "call; keep it elsewhere")) from None
        gradients = None
        if backward is not None:
            # the backward creates values too (zeros, unused inputs)
            with recording_into(context):
                gradients = backward.record(context, out_leaves, output_atoms, leaves,
                                            traced_leaves, mutated, _is_output_leaf)
        # which outputs are Tensors eagerly (the others NumPy's, as their inputs were)
        tensor_outputs = tensor_methods.tensor_outputs(context, output_atoms)
        context.finished = True
        if gradients is None:  # gradient plans number the inputs they differentiate
            context.drop_unused_implicit_inputs(output_atoms)
        graph = context.graph(output_atoms)
        draws, drawn_inputs = random_draws.finish(context, graph)
        if check:
            verify(graph)

        # (a write that stores a Tensor eagerly: the trace's would store an ndarray; the
        # program's result function stores the Tensor)
        undecided = not effects or check_decisions and decisions_may_differ(graph) or bool(
            tensor_outputs & tensor_methods.stored_outputs(writes))
    except BaseException:
        context.finished = True  # tracers that escaped now refuse to be used
        attribute_writes.restore(context)
        raise
    pending = False
    if undecided or gradients is not None:
        # the call's result and effects come from the program, or eager (a result with
        # gradients must carry the compiled backward: the program runs this call again, so
        # the trace applying writes too would write twice, params[k] = params[k] - lr * g)
        attribute_writes.restore(context)
        # not the call's result: what kind of value each output is (OutputPlan)
        output_values = outputs
        outputs = pytree.unflatten(output_tree, outputs)
    else:
        # Eager semantics: the caller's input arrays see the in-place writes. Then nothing
        # may run the program again on them: every output is computed here. Every value is
        # computed before the first write, as a captured loop's remaining trips run when
        # first read and read the arrays as they are then (dx[:, t] = W.T @ a[:, t] in a
        # loop, then W += dW: the trips left would read the new W).
        pending = lazy and not mutated and not writes and not returned and any(
            is_pending(v) for v in outputs)
        if not pending:
            outputs = [force(value) for value in outputs]
        new_values = {position: traced_leaves[position].value for position in mutated}
        argument_writes.compute_values(context)
        attribute_writes.compute_values(context)
        list_appends.compute_values(context)
        for position, value in new_values.items():
            np.copyto(np.asarray(leaves[position]), value)
            if hasattr(leaves[position], "_version"):
                # a Tensor: a graph that saved it must see the write (runtime.tensor's
                # copy_into, for the compiled calls)
                leaves[position]._version += 1
        for index, position in aliases.items():
            outputs[index] = leaves[position]
        for index, (position, kind, params) in remade.items():  # return np.diagonal(x)
            if type(out_leaves[index]) is np.ndarray:
                continue  # (NumPy's own: a diagonal of an array the function made)
            source = context.numpy_results[id(out_leaves[index])][1].value if (
                position is None) else leaves[position]
            outputs[index] = result_identity.numpy_result(kind, params, source)
        bindings = context.symbol_values() if views or broadcasts else {}
        for index, (position, chain) in (*views.items(), *broadcasts.items()):
            outputs[index] = argument_views.numpy_view(chain, np.asarray(leaves[position]),
                                                       bindings)
            if index in contiguous and index in remade:  # NumPy's of that view
                outputs[index] = result_identity.numpy_result(*remade[index][1:], outputs[index])
        if not (differentiated or context.tensor_arguments):
            # return np.broadcast_to(base[:, :1], shape), base: a read-only view of base
            for index, (root, chain) in argument_views.broadcasts_of_results(
                    context, out_leaves, views.keys() | broadcasts.keys()).items():
                base = outputs[root] if type(root) is int else force(
                    context.values[root.name][0])  # (np.broadcast_to(x.sum(0), shape))
                outputs[index] = argument_views.numpy_view(
                    chain, np.asarray(base), context.symbol_values())
        argument_writes.apply(context, args, kwargs)  # config["t"] += 1 reaches the caller
        for index, array in argument_writes.aliased_outside_arrays(context, out_leaves).items():
            outputs[index] = array  # (its place may hold what the trace wrote there)
        attribute_writes.apply(context)  # self.cache = x: the concrete value stays there
        list_appends.apply(context, leaves)  # LOSSES.append(loss): after the writes
        write_prints(getattr(context, "printed", ()))  # what it printed, now it succeeded
        output_values = outputs
        outputs = argument_writes.put_back(pytree.unflatten(output_tree, outputs), returned,
                                           (args, kwargs))
    traced = Trace(
        name=name,
        graph=graph,
        outputs=outputs,
        output_tree=output_tree,
        output_statics=statics,
        input_tree=input_tree,
        input_specs=input_specs,
        implicit_inputs=list(context.implicit_used.values()),
        mutated_inputs=mutated,
        output_aliases=aliases,
        refreshed_views=refreshed,
        outside_aliases=outside_aliases,
        numpy_results=remade,
        functions=functions,
        outside_values=list(context.outside_values.values()),
        gradients=gradients,
        symbol_values=context.symbol_values(),
        loop_notes=list(getattr(context, "loop_notes", ())),
        captured_loops=list(getattr(context, "captured_loops", ())),
        pending=pending,
        undecided=undecided,
        argument_writes=writes,
        returned_containers=returned,
        output_values=output_values,
        draws=draws,
        drawn_inputs=drawn_inputs,
        count_inputs=loop_trip_counts.trace_inputs(context),
        tensor_outputs=tensor_outputs,
        tensor_leaves=frozenset(index for index, position in atom_positions.items()
                                if position in tensor_outputs),
    )
    context.release()
    return traced


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
    prefix, message = f"{location[0]}:{location[1]}: ", str(error)
    if message.startswith(prefix):  # raised naming that line already (line_prefix)
        message = message[len(prefix):]
    source = linecache.getline(*location).strip()  # (none for exec'd code)
    return TraceError(f"{prefix}{message}" + (f"\n    {source}" if source else ""))


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
        if name is not None and top_level.count(argument) == 1 and pytree.flatten(
                value)[1].kind == "leaf":
            positions[name] = leaf  # ({"lr": 0.1} holds one leaf, but is no leaf itself)
    return positions


__all__ = ["InputSpec", "Trace", "Tracer", "TracingContext", "current_context", "trace", "wrap"]
