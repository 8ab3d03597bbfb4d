"""The source front end: rewrite a model function so that tracing sees what it does.

The function's source is parsed and rewritten (``tracejit.tracer.source_rewrite``), then
compiled with the user's file name and line numbers, so tracebacks and guard locations
point at the user's code (``tracejit.tracer.rewritten_code``). The rewrite routes through
hooks (``__tracejit__``, this module's ``Hooks``) what a compiled run would otherwise skip
or get wrong:

* every call: ``np.random`` draws and generator methods are host draws, replayed at every
  call in the trace's order (``tracejit.tracer.random_draws``), logging of traced values
  is refused, ``print`` becomes an ``Effect`` node that compiled code replays, and
  user-defined Python functions are rewritten in turn;
* ``a[i] = v`` and ``a[i] += v``: functional updates; writes into input arrays become
  outputs written back after a call succeeds; writes into outside containers are refused;
* ``x += v`` where ``x`` is a NumPy array and ``v`` is traced: rebinds ``x``;
* ``obj.attr = v``, and ``global``/``nonlocal`` writes: refused (outside state).

``rewritten_code.render(fn)`` shows the rewritten source, which the cache CLI prints.
Functions whose source cannot be read (REPL, ``exec``, lambdas) run as they are: tracing
still works, and locations come from frames.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import heapq
import inspect
import logging
import math
import operator
import sys
import types

import numpy as np

from . import (
    argument_writes,
    attribute_writes,
    constructors,
    count_attributes,
    deferred_text,
    list_appends,
    loop_attribute_carries,
    loop_effects,
    loop_prints,
    loop_selected_appends,
    loop_sequences,
    loop_trip_counts,
    loop_while,
    operator_calls,
    ops,
    python_math,
    unseen_prints,
    user_partials,
)
from .builtin_extremes import select_extreme
from .constant_methods import instead
from .conversions import CONVERSIONS, python_number, scalar_type
from .deferred_text import DeferredText, as_written
from .dims import SymInt, SymRange, calls_for_the_user, integer_quotient
from .eager_agreement import (
    TYPE_QUERIES,
    TraceSuppress,
    eager_type,
    is_python_number,
    python_number_attribute,
    reraise_if_it_stops_the_trace,
)
from .even_spacing import linspace
from .generators import is_generator_function, remembered
from .implicit import Path
from .indexing import update, written_region
from .ir import Effect
from .locations import line_prefix, user_location
from .loop_attributes import plain_attributes
from .loop_containers import entry_refusal, is_in_loop
from .loop_generalize import Refused
from .loop_index import read_at_index
from .loops import emit_prints, note_unrolled, run_loop
from .numpy_api import FUNCTIONS, arange, array_of, eye, full, full_like, identity, tri
from .object_paths import (
    ObjectPaths,
    called_by_class,
    guard_class,
    guard_method,
    holds_attributes,
    is_plain_object,
    is_settings_record,
    partial_roots,
)
from .out_arguments import check_cast, check_out
from .outside_inputs import (
    CONTENT_LIMIT,
    GUARDED_VALUES,
    MAPPINGS,
    NOT_GUARDED_CALLABLES,
    USER_CONTAINERS,
    container_subclass,
    is_setting,
    note_contents,
    overridden_reads,
    state_item,
    state_value,
    through_module,
    user_container_reads,
    with_inputs,
)
from .pending import known_kind
from .primitives import any_traced, current_context, is_traced, is_traced_array
from .purity import impure_call, is_stateful
from .random_draws import (
    UNSEEN_DRAW,
    draw,
    is_rng_method,
    note_method,
    rng_kind,
    shuffled_arguments,
    unseen_code_draws,
)
from .result_identity import contiguous_copy_of
from .rewritten_code import bind, callable_object, is_user_function, rewritten_code
from .shared_objects import note_same
from .source_rewrite import _MUTATING_METHODS, RewriteUnavailable, compared
from .stacked_containers import StackedDict, StackedList, stack_call
from .strided_views import as_strided, is_as_strided, is_byte_strides
from .tensor_methods import tensor_valued
from .traced_array import INPLACE_UFUNCS, Tracer, trace_error
from .view_writes import index_in, numpy_root
from .while_loops import run_while


# The ufunc behind each in-place operator (for NumPy's casting error message).
# --- hooks -----------------------------------------------------------------------------
def _is_ufunc_at(function):
    """``np.add.at`` and its like: ufunc methods that write into their first argument."""
    return isinstance(getattr(function, "__self__", None), np.ufunc) and getattr(
        function, "__name__", "") == "at"


def _traced_index(index):
    """Whether a subscript holds a traced array or a symbolic int (``ids[t]``, ``t``)."""
    return any_traced(index if isinstance(index, tuple) else (index,))


def _is_array(value):
    """An array, not a NumPy scalar (``a[1:3]``, ``a[mask]``; not ``a[1]`` of a vector)."""
    if isinstance(value, Tracer):
        raw = value.raw_value
        return not isinstance(known_kind(raw), np.generic)
    return isinstance(value, np.ndarray)


def _is_selection(value):
    from .masked_selection import MaskedSelection  # cycle: masked_selection -> tracing

    return isinstance(value, MaskedSelection)


def _holds_traced(value, depth=2):
    """A list or tuple with a dim or a traced value in it (``np.array(x.shape)``), or in
    its rows (``np.array([[c, -s], [s, c]])``)."""
    return isinstance(value, (tuple, list)) and any(
        isinstance(item, SymInt) or is_traced(item) or (depth > 1 and _holds_traced(
            item, depth - 1)) for item in value)


# NumPy reductions a model applies to a shape (np.prod(x.shape[1:]), np.sum(x.shape)),
# computed on the dims (Python's max compares them as NumPy's would, guarded alike)
_REDUCTIONS_OF_DIMS = {np.prod: math.prod, np.sum: sum, np.max: max, np.min: min,
                       np.amax: max, np.amin: min}


def _holds_dims(value):
    """A tuple or list of ints with a dynamic dim among them (``x.shape[1:]``)."""
    return isinstance(value, (tuple, list)) and any(
        isinstance(item, SymInt) for item in value) and all(
        isinstance(item, (int, np.integer, SymInt)) for item in value)


def _is_random(function, args, kwargs):
    random = sys.modules.get("numpy.random")
    if random is None:  # nothing has drawn yet (NumPy 2 imports np.random on first use:
        return False  # 5-10 ms that ``np.random.Generator`` here put on every first trace)
    owner = getattr(function, "__self__", None)
    random_types = (random.Generator, random.RandomState, random.BitGenerator)
    if isinstance(owner, random_types) or (
        getattr(function, "__module__", "") or ""
    ).startswith("numpy.random"):
        return True
    return any(isinstance(value, random_types) for value in (*args, *kwargs.values()))


def _draws(function):
    """A call into ``np.random`` itself or a generator's method (not a user function that
    is handed a generator): ``tracer.random_draws`` replays it, or says why not."""
    owner = getattr(function, "__self__", None)
    return rng_kind(owner) is not None or (
        getattr(function, "__module__", "") or "").startswith("numpy.random")


# Builtins and container methods whose answer for an object depends on its identity (its
# default hash, equality and repr): an object from outside passed to them is pinned.
_IDENTITY_FUNCTIONS = (hash, repr, str, format, ascii)
# Calls that read no more of an object than its class (guarded with it where found)
_CLASS_QUERIES = (isinstance, issubclass, type, callable, super, getattr, hasattr, setattr)
_IDENTITY_METHODS = frozenset(("get", "index", "count", "__contains__", "__getitem__", "pop",
                               "setdefault", "remove", "discard"))


def _observes_identity(function):
    if any(function is known for known in _IDENTITY_FUNCTIONS):
        return True
    return isinstance(function, types.BuiltinMethodType) and type(
        function.__self__) in (dict, list, tuple, set, frozenset) and (
        function.__name__ in _IDENTITY_METHODS)


def _observes_equality(function):
    """Whether ``function`` (one ``_observes_identity`` names) compares or hashes its
    arguments (``SCALE.get(key)``, ``hash(key)``), not only shows them (``repr``)."""
    return function is hash or isinstance(function, types.BuiltinMethodType)


def _is_logging(function):
    owner = getattr(function, "__self__", None)
    return isinstance(owner, (logging.Logger, logging.LoggerAdapter)) or getattr(
        function, "__module__", None
    ) == "logging"


_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
               "warn": logging.WARNING, "error": logging.ERROR, "exception": logging.ERROR,
               "critical": logging.CRITICAL, "fatal": logging.CRITICAL}


def _writes_a_record(function, args, kwargs):
    """Whether a logging call (``log.warning("diverged")``, ``logging.info(...)``) writes a
    record now: its logger is enabled for its level. Compiled calls would not write it
    again; one below the level writes nothing eagerly either (``log.debug`` in production).
    """
    name = getattr(function, "__name__", "")
    if name == "log":  # log.log(logging.WARNING, ...) or log.log(level=..., msg=...)
        level = args[0] if args else kwargs.get("level")
        if not isinstance(level, int):
            return True  # (logging raises for it: eager says so)
    else:
        level = _LOG_LEVELS.get(name)
    if level is None:
        return False
    owner = getattr(function, "__self__", None)
    if not isinstance(owner, (logging.Logger, logging.LoggerAdapter)):
        owner = logging.getLogger()  # logging.warning(...): the root logger's
    return owner.isEnabledFor(level)


def _enters(function):
    """The trace runs this call's body itself (a user function, method or layer object),
    so its own calls are checked in turn."""
    target = function.__func__ if isinstance(function, types.MethodType) else function
    return is_user_function(target) or callable_object(function) or user_partials.enters(
        function)


def _converted(function, args, kwargs):
    """``np.asarray(x)``, ``np.array(x, dtype=float)``, ``np.float32(x)`` of a traced ``x``
    (``tracer.conversions``), or None for any other call."""
    if function in CONVERSIONS:
        return CONVERSIONS[function](*args, **kwargs)
    if isinstance(function, type) and issubclass(function, np.generic) and len(args) == 1 and (
            not kwargs):
        return scalar_type(function, args[0])
    return None


_ARRAY_FACTS = {"shape", "ndim", "size", "dtype", "itemsize", "nbytes"}
# What a traced array answers that a Python float may not (Hooks.load)
_NDARRAY_ATTRIBUTES = frozenset(dir(np.ndarray))


def _written_by_the_trace(context, path):
    """Whether the trace wrote ``path``, or an array whose shape (dtype, size) ``path``
    reads: ``self.last_input.shape`` after ``self.last_input = out`` is the written
    array's, no setting to guard (before the call the attribute may not even exist)."""
    written = context.written_paths
    if path.key in written:
        return True
    steps = path.steps
    for end in range(len(steps) - 1, 0, -1):
        rest = steps[end:]
        if all(step == "item" for step, _ in rest) and (
                Path(path.root, steps[:end]).key in written):
            return True  # self.w = np.zeros((2, 3)), then row = self.w[0]: its row
        if rest[0][0] == "attr" and rest[0][1] in _ARRAY_FACTS and all(
                step == "item" for step, _ in rest[1:]) and (
                Path(path.root, steps[:end]).key in written):
            return True
    return False


def _guarded_bounds(values):
    """``values`` with each traced number its value under a guard, in its own type (a
    NumPy scalar stays one: np.arange(np.int32(3)) is int32)."""
    concrete = []
    for value in values:
        if is_traced(value) and not isinstance(value, SymInt):
            guarded = operator.index(value) if value.dtype.kind in "iu" else float(value)
            kind = known_kind(value.raw_value)
            value = kind.dtype.type(guarded) if isinstance(kind, np.generic) else guarded
        concrete.append(value)
    return concrete


# NumPy functions whose first argument is a sequence of arrays, not one array_like
_SEQUENCE_FUNCTIONS = {np.concatenate, np.stack, np.hstack, np.vstack, np.ravel_multi_index,
                       np.einsum, np.column_stack, np.dstack, np.linalg.multi_dot, np.select}
_CREATION = {np.zeros: 0, np.ones: 1, np.empty: 0, np.full: None}
# Creation functions sized by plain ints: with a symbolic size, the traced composite keeps
# the dim symbolic (np.tri(n) of a causal mask would specialize the sequence length)
_SIZED_CREATION = {np.tri: tri, np.eye: eye, np.identity: identity}
# Builtins that call a function they are given: a user's one runs rewritten (what it reads
# from outside is guarded). Not tracejit's own (value_and_grad traces its function itself).
_CALLING_BACK = {functools.reduce, map, filter, sorted, min, max, heapq.nsmallest,
                 heapq.nlargest}


def _has_dim(shape):
    items = shape if isinstance(shape, (tuple, list)) else (shape,)
    return any(isinstance(item, SymInt) for item in items)


def _created(function, shape, *args, dtype=None, context=None, **kwargs):
    """np.zeros/ones/empty/full with a symbolic size: a traced ``full`` (the size stays
    symbolic instead of specializing the dim). ``empty`` gives zeros, like ``empty_like``.
    With int sizes only (``_trial_buffer``), a ``full`` recorded in ``context``."""
    fill = _CREATION[function]
    if fill is None:
        fill, args = args[0], args[1:]
        if dtype is None:
            dtype = np.asarray(fill).dtype
    if args:
        dtype = args[0]
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    # np.zeros((N, L)) with L a run-time Python int: a size is an int, so L is specialized
    shape = tuple(item if isinstance(item, SymInt) or not is_traced(item) else
                  operator.index(item) for item in shape)
    dtype = np.dtype(dtype if dtype is not None else float)
    symbolic = next((item for item in shape if isinstance(item, SymInt)), None)
    if symbolic is None:
        return context.process(ops.full_p, (), dict(
            shape=tuple(int(item) for item in shape), value=fill, dtype=dtype))
    return ops.full(shape, fill, dtype, like=symbolic)


def _trial_buffer(context, function, args, kwargs):
    """Whether ``function(*args, **kwargs)`` makes a buffer of int sizes inside a loop trip
    traced for capture (``loop_trials.Trial``): traced, so the body's writes into it are the
    trip's own. As a NumPy array it was a constant of the trace, and a write into it one
    into an array made before the loop, which refuses the capture (CTC's ``skip =
    np.full(L, -np.inf)`` in its recursion, min-char-rnn's ``x = np.zeros((V, 1)); x[ix] =
    1`` in its sampling loop: unrolled, a compile per length)."""
    if function not in _CREATION or not getattr(context, "loop_depth", 0):
        return False
    shape = args[0] if args else kwargs.get("shape")
    items = shape if isinstance(shape, (tuple, list)) else (shape,)
    if not all(isinstance(item, (int, np.integer)) and not isinstance(item, bool)
               and item >= 0 for item in items):
        return False
    if len(args) > (3 if function is np.full else 2) or set(kwargs) - {
            "shape", "dtype", "fill_value", "order"} or kwargs.get("order", "C") != "C":
        return False
    dtype = kwargs.get("dtype", args[2] if function is np.full and len(args) > 2 else
                       args[1] if function is not np.full and len(args) > 1 else None)
    fill = kwargs.get("fill_value", args[1] if function is np.full and len(args) > 1 else 0)
    try:
        kind = np.dtype(dtype if dtype is not None else np.asarray(fill).dtype
                        if function is np.full else float).kind
    except TypeError:
        return False
    return kind in "biuf" and np.ndim(fill) == 0


def _callers_arrays(context, left, right):
    """Whether ``left is right`` asks which of the caller's arrays are one object: each is
    an array argument's tracer or an ndarray from outside (``self.W``, a global), and one
    at least is an argument's. The answer eagerly depends on what the call passes."""
    kinds = (Tracer, np.ndarray)
    if not (isinstance(left, kinds) and isinstance(right, kinds)) or not (
            isinstance(left, Tracer) or isinstance(right, Tracer)):
        return False  # (x is None, two NumPy arrays: Python's answer stands)
    givens = (*context.input_tracers, *context.implicit_tracers.values())

    def callers(value):
        return isinstance(value, np.ndarray) or any(value is given for given in givens)

    def argument(value):
        return isinstance(value, Tracer) and any(value is given for given in givens)

    return callers(left) and callers(right) and (argument(left) or argument(right))


def _exit_trip_write(context, array):
    """Whether a NumPy array made in the call is written (with any value) in trip 0 of a
    loop with a data-dependent exit: as its traced copy, journaled, so that a write after an
    exit the trip takes is put back (``exit_trips._Point``). NumPy's own write would stay."""
    return getattr(context, "exit_trip_zero", False) and not (
        id(array) in context.implicit_candidates or context.is_implicit(array))


class Hooks:
    """What rewritten code calls; one instance per trace (it records the functions the
    trace passed through, for the cache key)."""

    def __init__(self, context, top=None, parameter_leaves=None, parameter_roots=None):
        self.context = context
        self.functions = {}  # code -> (qualname, file, source)
        self.rewritten = {}
        self.originals = {}  # rewritten code -> the user's function (for its closure cells)
        self.top = top  # the traced function's rewritten code
        self.parameter_leaves = parameter_leaves or {}  # its parameters -> argument leaves
        self.parameter_values = {}  # those parameters -> the (traced) arguments passed
        # its parameters bound outside the call's arguments (defaults, the instance of a
        # bound method or layer object) -> a Path root that reads them again
        self.parameter_roots = parameter_roots or {}
        self.objects = ObjectPaths(context)  # objects read from outside, and their paths
        # the keys calls write in a dict read at a path (outside_inputs.note_contents asks
        # for the dicts inside one it reads: self.optim_configs[p]["t"] += 1)
        context.item_state_of = lambda path, value: _item_state(path, value, self.objects)
        self.operator_methods = {}  # class -> the operator methods the user wrote on it
        self.print_count = 0  # prints so far, and at each loop_prints list's making
        self.print_marks = {}
        self.print_indices = {}  # such a list's (order kept, trip), while it is a real list
        self.print_kept = 0

    def local(self, value):
        """A local variable's value as the trace must see it: a NumPy buffer written
        through another name is its traced copy (``Hooks.set_item``)."""
        if self.context.replaced and type(value) is np.ndarray:
            replacement = self._replacement(value)
            return value if replacement is None else replacement
        return value

    def _replacement(self, array):
        """The traced stand-in of NumPy array ``array`` when this trace has written into
        its memory (it, or a view of its base: then ``array`` is read as the same view of
        the base's traced copy, so it sees the write as NumPy's view does); else None."""
        replaced = self.context.replaced
        if id(array) in replaced:
            return replaced[id(array)]
        if array.base is not None and id(numpy_root(array)) in replaced:
            return self._traced_copy(array)
        return None

    # loads from outside ------------------------------------------------------------------
    def load(self, value, descriptor):
        context = self.context
        if descriptor[0] == "param" and descriptor[2] and descriptor[2][0][0] == "attr" and (
                descriptor[2][0][1] in _NDARRAY_ATTRIBUTES) and is_python_number(
                owner := sys._getframe(1).f_locals.get(descriptor[1])):
            # lr.shape, lr.sum() of a float argument (a run-time number): Python's error
            python_number_attribute(owner, descriptor[2][0][1])
        if context.replaced and type(value) is np.ndarray and (
                replacement := self._replacement(value)) is not None:
            return replacement  # a NumPy buffer written earlier in this trace
        if type(value) is list and id(value) in getattr(context, "appended_lists", ()):
            # self.X.append(x), then self.X[-1]: the item this call appended (another list
            # goes on below: its path is noted, so len(other.X) is guarded)
            return list_appends.read_back(context, value)
        if (refused := list_appends.holder_read(context, value)) is not None:
            raise refused  # sum(v[-1] for v in self.history.values()) after an append
        if is_stateful(value) and descriptor[0] != "expression":
            raise trace_error(
                f"{type(value).__name__} read from outside is an iterator: each call "
                "advances it, and compiled runs would not. Pass the values in as arguments"
            )
        if isinstance(value, collections.deque) and any(
                isinstance(item, np.ndarray) for item in value):
            # (outside lists' arrays become inputs, outside_inputs.with_inputs; a deque's
            # would be constants of the trace, stale once it moves on)
            raise trace_error("a deque of arrays read from outside: compiled runs would "
                              "keep the arrays it held when traced. Pass them in (np.stack"
                              "(memory), or list(memory) as an argument)")
        path = self._path(descriptor, sys._getframe(1))
        if path is not None and is_rng_method(value):
            note_method(context, path, value)  # rng.random: a draw replayed at every call
            return value
        if path is not None and callable(value) and not isinstance(
            value, (NOT_GUARDED_CALLABLES, np.ndarray)
        ) and not through_module(path) and not called_by_class(value):
            # ACTIVATION = np.tanh: the trace inlined this function; rebinding the name
            # must not leave compiled code computing the old one.
            context.note_outside_value(path, value, identity=True)
        if path is not None and isinstance(value, types.MethodType):
            self.objects.method_read(path, value)  # self.optimizer.update: its class
        return self._load_through(path, value)

    @calls_for_the_user  # n.real on a dim: the user's getattr
    def member(self, owner, name):
        """``owner.name`` where ``owner`` is a local (``for block in self.blocks``, then
        ``block.attn.W``): read through the path the object was found at, so its weights
        are inputs and its settings guarded, as ``self.blocks[0].attn.W`` would be."""
        if is_python_number(owner):
            python_number_attribute(owner, name)  # lr.shape of a float argument raises
        if attribute_writes.is_local_object(self.context, owner) and (
                getter := _property_getter(owner, name)) is not None:
            # a property of an object made here: its getter runs rewritten, so what it
            # reads and changes meets the hooks (compiled calls skipped a count it kept)
            return self.call(getter, owner)
        value = getattr(owner, name)
        known = self.objects.path_of(owner)
        if known is None:
            return self.load(value, ("expression", "", ()))
        return self.load(value, ("path", known.attr(name),
                                 ()))

    def _load_through(self, path, value):
        """A value read from outside at ``path`` (None: no path to read it again), as the
        trace must see it: arrays are inputs read through their path at every call, never
        frozen constants; Python settings are entry-guarded by value, down to those inside
        lists and dicts; containers of input arrays hold their traced inputs; objects are
        remembered, so ``getattr(obj, "k")`` is guarded like ``obj.k``. An attribute this
        trace wrote (``self.cache = x``, then read) is what it wrote: nothing to guard."""
        context = self.context
        if path is not None and _written_by_the_trace(context, path):
            return value
        if is_byte_strides(value):  # x.strides of a traced array: the trace's own, no setting
            return value
        if path is not None and (state := state_value(context, path, value)) is not None:
            return state  # self.stats["steps"]: state calls write, not a setting
        if _is_number(value) and path is not None:
            owner = _owner_of(path, self.objects)
            if owner is not None and attribute_writes.is_number_state(owner, path.steps[-1][1]):
                return context.number_input(owner, path, value)  # self.t, which calls rebind
            if owner is not None and (count := count_attributes.read(
                    context, owner, path, value)) is not None:
                return count  # range(self.n_iter), n_iter seen with two values
        if path is not None and (numbers := self._number_tuple_state(path, value)) is not None:
            return numbers
        if isinstance(value, np.ndarray) or getattr(type(value), "__tracejit_priority__",
                                                    0) == 1:
            if path is not None and not context.is_implicit(
                value
            ):  # reached by a path the up-front scan did not walk (deep attributes, slots;
                # a Tensor parameter too, or compiled calls would keep its first values)
                context.implicit_candidates[id(value)] = (path, value)
            elif path is not None:
                # one input for an array found at two paths (tied weights, a layer passed
                # as two arguments), read through the first: one array there at later calls
                used = context.implicit_used.get(id(value))
                note_same(context, used.path if used is not None else (
                    context.implicit_candidates[id(value)][0]), path)
            return context.implicit_tracer(value) if context.is_implicit(value) else value
        subclass = container_subclass(value) is not None and not is_settings_record(value)
        if subclass and (overridden := overridden_reads(value)):
            subclass = False  # read by its own methods: never as its base
            if path is not None:
                raise trace_error(
                    f"{path} is a {type(value).__name__} whose class defines its own "
                    f"{', '.join(overridden)}: compiled calls would not run it again. "
                    "Pass what it holds in as arguments")
        if subclass and path is not None:
            # class Config(dict), class Layers(list), a namedtuple holding arrays: guarded
            # and read as their base is, and by their class (their attributes through their
            # path: cfg.lr of cfg = CFG)
            guard_class(context, path, value)
            self.objects.note(path, value)
        if type(value) in GUARDED_VALUES or is_setting(value) or isinstance(
                value, np.generic) or (
            type(value) in MAPPINGS
        ) or subclass:
            if path is not None and not (isinstance(value, type) and through_module(path)):
                # (np.float64 itself is no setting; self.stats["loss"], which calls
                # write, is state: guarded where read)
                note_contents(context, path, value,
                              state=_item_state(path, value, self.objects))
            if type(value) in (list, tuple, *MAPPINGS) or subclass:
                if path is not None:  # (an OrderedDict's writes too: outside state)
                    self.objects.remember_container(path, value)
                # for name, W in PARAMS.items(): the arrays inside are inputs too
                return with_inputs(context, value, path)
        elif path is not None and is_settings_record(value):
            # layer.config a namedtuple of settings: config._replace(scale=0.5) is a change
            context.outside_values.setdefault(path.key, (path, "value", value))
        elif path is not None and is_plain_object(value) and (
                not callable(value) or called_by_class(value)):
            self.objects.note(path, value)
            guard_class(context, path, value)  # isinstance(self.optimizer, MomentumSGD)
            if isinstance(value, tuple(USER_CONTAINERS)):
                self._user_container(path, value)
            elif isinstance(value, types.MappingProxyType):
                self._mapping_proxy(path, value)
        return value

    def _number_tuple_state(self, path, value):
        """A tuple of numbers an attribute keeps and the calls rebind (gym's CartPole:
        ``x, x_dot, theta, theta_dot = self.state``, then ``self.state = (x, ...)``;
        ``attribute_writes.NumberState``): its length guarded, each number a run-time input
        read through its position, where a setting's values are guarded (a variant per
        call). None for anything else."""
        if type(value) is not tuple or not value or not all(_is_number(item) for item in value):
            return None
        owner = _owner_of(path, self.objects)
        if owner is None or not attribute_writes.is_number_state(owner, path.steps[-1][1]):
            return None
        self.context.note_outside_value(path, value)  # the length
        return tuple(self.context.number_input(owner, Path(path.root, (*path.steps, (
            "item", position))), item) for position, item in enumerate(value))

    def _user_container(self, path, value):
        """A ``UserDict`` / ``UserList`` / ``ChainMap`` read from outside: ``len(cfg)``,
        ``cfg.values()`` read its ``.data`` (``.maps``) in the standard library's code, which
        the trace does not see: that is guarded as a dict or list read at ``cfg.data`` would
        be. Arrays there would be constants of the trace (its methods read the caller's
        ``data``), and a class with reads of its own runs code the guards cannot follow:
        those run eagerly."""
        if overridden := user_container_reads(value):
            raise trace_error(f"{path} is a {type(value).__name__} whose class defines its "
                              f"own {', '.join(overridden)}: compiled calls would not run it "
                              "again. Pass what it holds in as arguments")
        name = next(name for base, name in USER_CONTAINERS.items() if isinstance(value, base))
        data = value.__dict__.get(name)
        if type(data) in (list, dict) and self._load_through(path.attr(name), data) is not (
                data):
            raise trace_error(f"{path} is a {type(value).__name__} holding arrays: compiled "
                              "calls would keep the ones it held when traced. Pass them in "
                              "as arguments")

    def _mapping_proxy(self, path, value):
        """``types.MappingProxyType(d)`` read from outside: ``len()``, ``.values()`` read the
        dict it shows, which no path reaches; guarded whole by value when it holds
        settings (compared with a proxy of a copy), else the call runs eagerly."""
        if len(value) <= CONTENT_LIMIT and all(type(key) in (str, int) for key in value) and (
                all(is_setting(item) for item in value.values())):
            self.context.note_outside_value(path, types.MappingProxyType(dict(value)))
            return
        raise trace_error(f"{path} is a read-only view of a dict (MappingProxyType) holding "
                          "more than settings: compiled calls could not read it again. Pass "
                          "what it holds in as arguments")

    def _still_the_argument(self, frame, name):
        """Whether parameter ``name`` still holds its argument: after ``X = np.insert(X,
        0, 1, axis=1)`` (ML-From-Scratch's regression fit), ``X.shape[1]`` is the local
        array's, and a guard on the argument's would refuse every call."""
        passed = self.parameter_values
        return name not in passed or frame.f_locals.get(name) is passed[name]

    def _path(self, descriptor, frame):
        """Where a load came from, as a path a later call can read again."""
        kind, name, steps = descriptor
        if kind == "path":  # Hooks.member: the path itself
            return name
        if kind == "global":
            if name not in frame.f_globals:
                return None  # a builtin
            root = ("global", frame.f_globals, name)
        elif kind == "closure":
            function = self.originals.get(frame.f_code)
            names = function.__code__.co_freevars if function is not None else ()
            if name not in names or self._local_of_the_call(frame, name):
                return None
            root = ("closure", function.__closure__[names.index(name)], name)
        elif kind == "param" and frame.f_code is self.top and name in self.parameter_leaves and (
                self._still_the_argument(frame, name)):
            if not steps:
                return None  # the argument itself: already part of the entry guard
            root = ("arg", self.parameter_leaves[name])
        elif kind == "param" and frame.f_code is self.top and name in self.parameter_roots:
            root = self.parameter_roots[name]
            if isinstance(root, Path):  # an argument a partial binds: under the partial
                return Path(root.root, root.steps + tuple(steps))
        elif kind == "param" and steps and is_plain_object(frame.f_locals.get(name)):
            # ``self.training`` inside a layer's method called from the traced function:
            # read again where the object was found (``self.optimizer.lr``: a new optimizer
            # there is seen), else on the object itself (its identity is guarded where it
            # was read). Not an object made in this call (``Model().fit(X)``): its
            # attributes are the call's own values, as a local's are.
            if attribute_writes.is_local_object(self.context, frame.f_locals[name]):
                return None
            known = self.objects.path_of(frame.f_locals[name])
            if known is not None:
                return Path(known.root, known.steps + tuple(steps))
            root = ("self", frame.f_locals[name])
        elif kind == "param" and steps:  # state["optimizer"].lr: through an object found
            return self.objects.through(frame.f_locals.get(name), steps)
        else:
            return None
        return Path(root, tuple(steps))

    def _local_of_the_call(self, frame, name):
        """A closure variable that a frame of this call holds as its own (``log = []``, then
        a nested ``def add(): log.append(1)``): a value of the call, found again by running
        it, not outside state to guard (a guard on it could never hold at the next entry)."""
        value = frame.f_locals.get(name)
        if attribute_writes.is_local_object(self.context, value):
            # a node made in this call, read by a closure that outlived the frame that made
            # it (micrograd's _backward reads self, other, out after __mul__ returned)
            return True
        outer = frame.f_back
        while outer is not None:
            if name in outer.f_code.co_cellvars and outer.f_locals.get(name) is value:
                # a container the call made, or a function this frame defines (a recursive
                # build_topo reading itself): made again by every call
                return self._made_in_this_call(value) or (
                    isinstance(value, types.FunctionType)
                    and any(constant is value.__code__ for constant in outer.f_code.co_consts))
            if outer.f_code in self.originals and type(value) in (dict, list) and any(
                    held is value for held in outer.f_locals.values()):
                # log = make_logger(hist): a closure made by a function that returned, over
                # a list a frame of this call still holds (hist = [] there). As outside state
                # its appends were left for compiled calls to replay (on the first call's
                # list), and the trace's len(hist) missed them.
                return self._made_in_this_call(value)
            if outer.f_code is self.top:
                return False
            outer = outer.f_back
        return False

    # calls ---------------------------------------------------------------------------
    @calls_for_the_user
    def call(self, function, *args, **kwargs):
        if not _hashable(function):
            # a @dataclass layer (eq=True makes it unhashable) in `for layer in layers: x =
            # layer(x)`, a weakref to a list (`history()`, hashed as its referent): no table
            # below holds it, and looking it up there raised TypeError
            return self._call_unhashable(function, args, kwargs)
        if function is print:
            return self.print(*args, **kwargs)
        if isinstance(function, types.BuiltinMethodType) and type(
                receiver := function.__self__) in (list, dict) and (
                function.__name__ in _MUTATING_METHODS):
            # self.hist[self.key].append(w), seen[side].append(w): a container reached by a
            # key the front end cannot name, so no hook saw the call as a mutation
            self.mutation_of(f"{type(receiver).__name__}.{function.__name__}(...)", receiver)
        if _observes_identity(function):  # SCALE.get(self.act), repr(self.act)
            self.objects.pin_identity(*args, *kwargs.values(),
                                      equality=_observes_equality(function))
        if any(type(arg) is DeferredText for arg in args):
            # print("%f" % cost) where `print` names another function: the text as written
            args = tuple(self._written_text(arg) if type(arg) is DeferredText else arg
                         for arg in args)
        if function is contextlib.suppress:
            return TraceSuppress(*args)
        if function in (memoryview, bytearray) and args and isinstance(args[0], Tracer):
            args[0].__array__()  # its memory (the buffer protocol): refused as np.asarray
        if is_as_strided(function) and args and is_traced(args[0]):
            return as_strided(*args, **kwargs)  # windows from x.strides (im2col)
        if any_traced((*args, *kwargs.values())) and (
                routed := instead(function, args)) is not None:
            return routed[0](*routed[1], **kwargs)  # np.zeros(h).dot(W): np.dot dispatches
        if function in (min, max) and (
                chosen := select_extreme(function, args, kwargs)) is not None:
            return chosen  # min(D[i - 1, j], D[i, j - 1]): a select, no guard
        if function in TYPE_QUERIES and args and is_traced(args[0]):
            # isinstance(x, np.ndarray), type(x) is np.ndarray, np.isscalar(x.sum()):
            # answered for the value NumPy eager has there, so the trace takes its branch
            return TYPE_QUERIES[function](eager_type(self.context, args[0]), *args[1:],
                                          **kwargs)
        if function is len and len(args) == 1 and not kwargs and is_traced(args[0]) and (
            args[0].shape and isinstance(args[0].shape[0], SymInt)
        ):  # len(x) of a dynamic dim stays symbolic, like x.shape[0] (range(len(inputs)))
            return args[0].shape[0]
        if function is len and len(args) == 1 and not kwargs and isinstance(
                args[0], StackedList):
            return args[0].length()  # len(costs) after a loop over a count stays a dim
        if function is len and len(args) == 1 and not kwargs and (
                method := self._container_method(args[0], "__len__")) is not None:
            length = method()  # len(model) of a container class: its len(self._layers)
            if type(length) is int and length >= 0:
                return length
        if _is_ufunc_at(function) and args and isinstance(args[0], np.ndarray) and (
                any_traced(args[1:])):
            # np.add.at(dW, ids, dout) into a buffer made here: into its traced copy, which
            # every later read of the buffer sees
            if self.context.is_implicit(args[0]):
                raise trace_error("np.add.at into a global array; compiled runs would skip it. "
                               "Return the new array instead")
            return function(self._traced_copy(args[0]), *args[1:], **kwargs)
        if function is np.copyto and args and isinstance(args[0], np.ndarray) and any_traced(
                (*args[1:], *kwargs.values())) and not self.context.is_implicit(args[0]):
            # np.copyto(h, h_new, where=active) into a buffer made here: into its traced copy
            return function(self._traced_copy(args[0]), *args[1:], **kwargs)
        if function is float and len(args) == 1 and not kwargs and isinstance(
                args[0], Tracer) and (number := python_number(args[0], float)) is not None:
            return number  # return float(loss): a run-time Python float, not a guarded value
        if (number := python_math.call(function, args, kwargs)) is not None:
            return number  # math.sqrt(np.dot(r, r)): a run-time Python float, not pinned
        if function in (int, math.floor, math.trunc) and len(args) == 1 and not kwargs:
            whole = integer_quotient(args[0])  # int((w - f) / s) + 1 stays a dim
            if whole is not None:
                return whole
        if function is int and len(args) == 1 and not kwargs and isinstance(
                args[0], Tracer) and (number := python_number(args[0], int)) is not None:
            return number  # int(np.argmax(p)), int(y[i]): a run-time Python int
        if args and isinstance(args[0], StackedList):
            stacked = stack_call(function, args, kwargs)  # np.stack(outs): the loop's buffer
            if stacked is not None:
                return stacked
        if function in (getattr, hasattr) and len(args) >= 2 and type(args[1]) is str and (
                is_python_number(args[0])):
            # hasattr(lr, "shape") of a run-time Python float: False, as eagerly
            if function is hasattr:
                return hasattr(eager_type(self.context, args[0]), args[1])
            try:
                python_number_attribute(args[0], args[1])
            except AttributeError:
                if len(args) == 3:
                    return args[2]
                raise
        if function in (getattr, hasattr) and len(args) >= 2 and type(args[1]) is str and (
            (path := self.objects.path_of(args[0])) is not None
        ):  # getattr(CFG, "k"): an attribute load like CFG.k, guarded the same way
            attribute = path.attr(args[1])
            present = hasattr(args[0], args[1])
            if attribute.key not in self.context.written_paths:  # not the trace's own write
                self.context.note_presence(attribute, present)  # if not hasattr(l, "m"): ...
            if function is hasattr:
                return present
            value = getattr(*args)  # a missing attribute: the default (or AttributeError)
            return self._load_through(attribute, value) if present else value
        if function is setattr and len(args) == 3 and not kwargs and type(args[1]) is str and (
                not isinstance(args[0], type)):
            # setattr(layer, name, value) of an optimizer over ("W", "b"): written as
            # layer.W = value is (else the change goes around the trace: eager)
            return self.set_attr(*args, f"setattr(..., {args[1]!r}, ...)")
        if function is range and not kwargs and any(isinstance(arg, SymInt) for arg in args):
            return SymRange(*args)  # scores[range(N), y]: an index that keeps N symbolic
        if function in _SIZED_CREATION and any(
                isinstance(size, SymInt) for size in (*args[:2], *kwargs.values())):
            return _SIZED_CREATION[function](*args, **kwargs)
        if function is np.arange and any(isinstance(arg, SymInt) for arg in args):
            return arange(*args, **kwargs)
        if function is np.linspace and any(isinstance(arg, SymInt) for arg in (
                *args[:3], *kwargs.values())):
            return linspace(*args, **kwargs)  # np.linspace(0, H - 1, out_h) of dims
        if function is np.arange and any_traced((*args, *kwargs.values())):
            # np.arange(classes) of a run-time int: its value decides the length, so it is
            # specialized under a guard, as np.zeros(classes) is
            return function(*_guarded_bounds(args), **dict(zip(kwargs, _guarded_bounds(
                kwargs.values()))))
        if function in _SEQUENCE_FUNCTIONS and args and type(args[0]) in (list, tuple) and (
                _holds_traced(args[0])):
            # np.concatenate([[context], negatives]): a list of traced scalars is the 1-d
            # array NumPy would make of it (and a plain list beside traced arrays, NumPy's)
            args = (type(args[0])(
                array_of(item) if _holds_traced(item, depth=1) else np.asarray(item)
                if type(item) in (list, tuple) else item for item in args[0]), *args[1:])
        if isinstance(function, np.ufunc) and any(_holds_traced(arg) for arg in args):
            # np.subtract(y_pred, word) with word a list of run-time ints: its array, as
            # NumPy makes it (converting the traced items would stop the trace)
            args = tuple(array_of(arg) if _holds_traced(arg) else arg for arg in args)
        if function in (np.array, np.asarray) and args and _holds_traced(args[0]):
            return array_of(*args, **kwargs)  # np.array(losses), np.array(x.shape): a stack
        if function in CONVERSIONS and args and is_traced_array(args[0]) and getattr(
                self.context, "tensor_arguments", False) and tensor_valued(self.context,
                                                                           args[0]):
            # eagerly a Tensor: np.asarray makes it an ndarray (or raises PyTorch's
            # lost-gradient error when it requires grad); the trace would keep a Tensor
            raise trace_error(f"np.{function.__name__} of a value that is a Tensor eagerly "
                              "(an ndarray there, or the lost-gradient error); the call runs "
                              "eagerly. Use x.detach() to cut the gradient")
        if args and is_traced_array(args[0]):
            converted = _converted(function, args, kwargs)  # np.asarray(X), np.float32(loss)
            if converted is not None:
                return converted
        if function in _REDUCTIONS_OF_DIMS and len(args) == 1 and not kwargs and (
                _holds_dims(args[0])):
            # np.prod(x.shape[1:]): a dim (x.reshape(N, -1) of it stays symbolic) that a
            # result returns as NumPy's np.int64, not as an int
            total = _REDUCTIONS_OF_DIMS[function](args[0])
            if not isinstance(total, SymInt):
                return np.int64(total)
            total = SymInt(total.expr, total.value, total.context)  # not x.shape's own
            self.context.numpy_dims[id(total)] = total
            return total
        if function in FUNCTIONS and function not in _SEQUENCE_FUNCTIONS and (
                function is not np.block) and args and (
                _holds_traced(args[0])):
            # np.mean(losses): NumPy would make the list an array (no dispatch to the
            # tracer: only the list is the dispatched argument); a stack, as np.array's
            args = (array_of(args[0]), *args[1:])
        if function in (np.full, np.full_like) and any_traced(
                (*args[1:2], kwargs.get("fill_value"))) and (args or "shape" in kwargs):
            # np.full(x.shape, x.mean()), np.full_like(x, prior): the traced fill broadcast
            return (full if function is np.full else full_like)(*args, **kwargs)
        if function in _CREATION and _has_dim(args[0] if args else kwargs.get("shape")) or (
                _trial_buffer(self.context, function, args, kwargs)):
            return _created(function, *args, context=self.context, **kwargs)
        if _is_random(function, args, kwargs):
            if _draws(function):  # np.random.rand(n, m), rng.random(x.shape), seed
                args = shuffled_arguments(self.context, function, args, self._traced_copy)
                return draw(self.context, function, args, kwargs, self.objects.path_of)
            if not _enters(function):  # a generator handed to library code
                name = getattr(function, "__qualname__", getattr(function, "__name__", "it"))
                raise trace_error(
                    f"{name} is given a random generator inside a compiled function; its "
                    "draws would be frozen into the compiled code. Draw with the "
                    "generator's own methods (replayed at every call) or outside"
                )
        if _is_logging(function):
            if any_traced((*args, *kwargs.values())):
                raise trace_error(
                    "logging a traced value inside a compiled function: compiled runs would "
                    "skip it. Return the value and log it outside, or use print (replayed)"
                )
            if _writes_a_record(function, args, kwargs):
                raise trace_error(
                    "logging inside a compiled function: compiled runs would not write the "
                    "record again. Log outside, or use print (replayed at every call)"
                )
        elif not _enters(function):
            if not any(function is query for query in _CLASS_QUERIES):
                # "{0.act}".format(self), copy.copy(self.opt): code the trace does not see
                # reads the object, so no guard follows what it read there; the object
                # itself, found through a path, must be this one at later calls
                self.objects.pin_identity(*args, *kwargs.values(), callables=True)
            impure = impure_call(function, args, kwargs)
            if impure is not None:
                raise trace_error(
                    f"{impure}(...) is called inside a compiled function and its result does "
                    "not come from the arguments: compiled runs would reuse the value this "
                    "call returned when traced. Call it outside and pass the value in"
                )
        if function is np.piecewise and len(args) > 2 and type(args[2]) in (list, tuple):
            args = [*args[:2], type(args[2])(  # its function pieces run rewritten too
                self.function_for(piece) if is_user_function(piece) else piece
                for piece in args[2]), *args[3:]]
        if function in _CALLING_BACK:  # functools.reduce(f, ...), sorted(key=f), map(f, ...):
            args = [self.function_for(arg) if is_user_function(arg) else arg  # f runs
                    for arg in args]                                     # rewritten too
            kwargs = {key: self.function_for(value) if is_user_function(value) else value
                      for key, value in kwargs.items()}
        result = self.function_for(function)(*args, **kwargs)
        if isinstance(function, type) and is_plain_object(result):  # Linear(4, 8) made here
            attribute_writes.note_created(self.context, result)
        elif function is set and type(result) is set:  # visited = set() in a topological sort
            attribute_writes.note_created(self.context, result)
        return result

    def _call_unhashable(self, function, args, kwargs):
        """``call`` of a callable no NumPy or builtin table can hold (its class sets
        ``__hash__ = None``): entered rewritten when it is the user's, else checked as any
        library call is."""
        if not _enters(function) and (impure := impure_call(function, args, kwargs)):
            raise trace_error(
                f"{impure}(...) is called inside a compiled function and its result does "
                "not come from the arguments: compiled runs would reuse the value this "
                "call returned when traced. Call it outside and pass the value in")
        return self.function_for(function)(*args, **kwargs)

    def function_for(self, function):
        inline = getattr(function, "__tracejit_inline__", None)
        if inline is not None:  # a jit function called while tracing: traced through, as
            return self.function_for(inline)  # a plain helper (its own trace would nest)
        if user_partials.enters(function):  # x.dot(w) of a partialmethod(Function.apply)
            return user_partials.entered(function, self.function_for)
        if constructors.plain_user_class(function):  # Tensor(data): its __init__ rewritten
            return constructors.constructor(self.context, function,
                                            self.function_for(function.__init__))
        if callable_object(function):  # a layer instance: enter its __call__
            if (path := self.objects.path_of(function)) is not None:
                guard_method(self.context, path, function, "__call__")  # a patched class
            return types.MethodType(self.function_for(type(function).__call__), function)
        target = function.__func__ if isinstance(function, types.MethodType) else function
        if isinstance(target, functools.partial) or not is_user_function(target):
            return function
        # Per function object, not per code: closures made by one factory share code but
        # not cells. (The rewritten code itself is cached per code object.)
        if id(target) not in self.rewritten:
            self.rewritten[id(target)] = (target, self.rewrite(target))
        rewritten = self.rewritten[id(target)][1]
        if isinstance(function, types.MethodType):
            return types.MethodType(rewritten, function.__self__)
        return rewritten

    def rewrite(self, function):
        try:
            inner, source = rewritten_code(function)
        except RewriteUnavailable:
            self.functions[function.__code__] = (
                function.__qualname__, function.__code__.co_filename, None
            )
            if unseen_code_draws(function.__code__):  # default_rng() there: not watched
                raise trace_error(f"{function.__qualname__}: {UNSEEN_DRAW}") from None
            return unseen_prints.watched(self.context, function)  # its print() is the builtin
        self.functions[function.__code__] = (
            function.__qualname__, function.__code__.co_filename, source
        )
        self.originals[inner] = function
        bound = bind(function, inner, self)
        if is_generator_function(function):  # for region in self.iterate_regions(x)
            return remembered(self.context, bound, function)
        return bound

    # operators -----------------------------------------------------------------------
    def binary(self, name, left, right):
        """``left <op> right`` (``tracejit.tracer.operator_calls``): a method of the user's
        class (``Value.__mul__``) runs through ``call``, so the node it makes is the
        call's own."""
        return operator_calls.binary(self.call, self.operator_methods, name, left, right)

    def unary(self, name, operand):
        return operator_calls.unary(self.call, self.operator_methods, name, operand)

    # loops ---------------------------------------------------------------------------
    def loop(self, range_function, range_args, body, names, frame_locals, line, reverse=None):
        location = (body.__code__.co_filename, line)
        # the user's code calls this hook with its own locals(): which of its names are
        # cells (container_holders counts the references to a list the loop fills)
        frame_code = sys._getframe(1).f_code
        counted = loop_trip_counts.counted_bounds(self.context, range_function, range_args)
        if counted is None:
            return run_loop(self.context, range_function, range_args, body, names,
                            frame_locals, location, reverse, frame_code)
        # range(num_iterations): the count a dim (tracejit.tracer.loop_trip_counts)
        return loop_trip_counts.run_counted(
            self.context, counted[1], f"{location[0]}:{location[1]}",
            lambda: run_loop(self.context, range_function, counted[0], body, names,
                             frame_locals, location, reverse, frame_code))

    def append_when(self, container, index, test, value, period=None, last=None,
                    periodic=None):
        """``if test(index): container.append(value)`` in a loop body
        (``tracejit.tracer.loop_selected_appends``)."""
        loop_selected_appends.append_when(self.context, container, index, test, value, period,
                                          last, periodic)

    def printed_rows(self, names):
        """The lists a loop's prints under index tests keep their rows in, one a name
        (``tracejit.tracer.loop_prints``), noting how many prints the trace made so far."""
        for name in names:
            self.print_marks[name] = self.print_count
        return tuple([] for _ in names)

    def print_when(self, rows, index, test, entry, shown, period=None, last=None,
                   periodic=None):
        """``if test(index): print(...)`` in a loop body: ``entry`` (the printed values)
        kept as ``append_when`` keeps a cost."""
        length = len(rows) if type(rows) is list else None
        loop_selected_appends.append_when(self.context, rows, index, test, entry, period,
                                          last, periodic)
        if length is not None and len(rows) > length:  # (the rows printed one by one,
            self.print_kept += 1                         # the loop's prints' in trip order)
            self.print_indices.setdefault(id(rows), []).append((self.print_kept, index))

    @calls_for_the_user
    def print_rows(self, rows, shown, names):
        """After the loop: the kept rows printed, one line each (``loop_prints``)."""
        loop_prints.print_rows(self, rows, shown, names, user_location(skip=2))

    def while_loop(self, range_function, range_args, functions, names, frame_locals, line,
                   kind, handed, ints=()):
        """A loop with a data-dependent exit (``tracejit.tracer.while_loops``; ``handed``,
        the names ``pre`` hands on within a trip, are in the functions already)."""
        location = (functions[0][0].__code__.co_filename, line)
        counted = loop_trip_counts.counted_bounds(self.context, range_function,
                                                  range_args) if kind == "for" else None
        if counted is None:
            return run_while(self.context, range_function, range_args, functions, names,
                             frame_locals, location, kind, ints=ints)
        # for i in range(num_iterations) with a break: the count a dim, as for a loop
        # without one (tracejit.tracer.loop_trip_counts)
        return loop_trip_counts.run_counted(
            self.context, counted[1], f"{location[0]}:{location[1]}",
            lambda: run_while(self.context, range_function, counted[0], functions, names,
                              frame_locals, location, kind, ints=ints))

    def set_in(self, array, index, value):
        """``container[key][index] = value`` with ``array = container[key]``: a NumPy
        array written with a traced value or at a traced index (the one-hot
        ``xs[t][inputs[t]] = 1``) is replaced by a traced copy, as ``a[i] = v`` does."""
        indices = index if isinstance(index, tuple) else (index,)
        if isinstance(array, np.ndarray) and (any_traced((value, *indices)) or (
                _exit_trip_write(self.context, array))):
            if id(array) in self.context.implicit_candidates or self.context.is_implicit(array):
                raise trace_error("writing a traced value into a global array; compiled runs "
                               "would skip it. Return the new array instead")
            array = self._traced_copy(array)
        elif isinstance(array, (dict, list)) and getattr(self.context, "loop_indices", None):
            # A traced loop trip would write its symbolic values into a container no carry
            # tracks (state["inner"]["h"] = v): the loop runs unrolled instead.
            raise Refused("an item write into a dict or list held by another container "
                          f"(`...[{index!r}] = ...`) in the body")
        elif argument_writes.is_argument_container(self.context, array) and not (
            _holds(array, index, value) or argument_writes.note(self.context, array, index,
                                                                value)
        ):  # state["inner"]["y"] = v: the caller's container, nested
            self.outside_mutation(f"item assignment into an argument's "
                                  f"{type(array).__name__}")
        elif attribute_writes.is_outside_container(self.context, array) and not _holds(
                array, index, value, self.context.outside_copies) and not self._note_item(
                array, index, value) and not self._note_listed_item(array, index, value):
            # self.cache["inner"]["a"] = v: the inner dict is the trace's copy of the
            # outside one (it holds arrays), where the write alone would be lost
            self.outside_mutation(f"item assignment into an outside {type(array).__name__}")
        if not is_traced(array):
            array[index] = value
            return
        self.context.temporary_view = array  # Y[i][j] = v: Y[i] is the expression's alone
        try:
            array[index] = value
        finally:
            self.context.temporary_view = None

    def iterate(self, iterable):
        """What ``for item in iterable`` walks: a container class's ``__iter__`` runs
        rewritten (its ``self._layers`` is read through the container's path, so the
        layers keep theirs); anything else as Python iterates it."""
        method = self._container_method(iterable, "__iter__")
        return iterable if method is None else method()

    def _container_method(self, owner, name):
        """``owner.name`` rewritten, for an object of a user class found through a path
        whose class defines ``name`` (``__iter__``, ``__getitem__``, ``__len__``), or None."""
        function = getattr(type(owner), name, None)
        if not is_user_function(function) or self.objects.path_of(owner) is None:
            return None
        return self.function_for(types.MethodType(function, owner))

    @calls_for_the_user  # cache[n] with n a dim: the hash d[n] = v stored it under
    def index(self, container, key):
        """``container[key]``; a NumPy array indexed by a traced key (``np.eye(n)[labels]``)
        becomes a constant (or an outside input) of the trace first, where NumPy's own
        indexing would convert the key to an array. A container class's ``__getitem__``
        runs rewritten (``model[i].factor``: the layer keeps its path)."""
        method = self._container_method(container, "__getitem__")
        if method is not None:
            return method(key)
        self.objects.pin_identity(key, equality=True)  # SCALE[self.act]: hashed by identity
        if type(container) is np.ndarray and any(
                is_traced(part) for part in (key if isinstance(key, tuple) else (key,))):
            atom, _, _ = self.context.atom(self.local(container))
            container = self.context.tracer_for(atom)
        return container[key]

    def item_at(self, container, key):
        if isinstance(key, SymInt) and isinstance(container, (dict, list, tuple)):
            key = int(key)  # Python containers hold int keys: the dim is specialized
        if type(container) is dict and (state := state_item(self.context, container, key)
                                        ) is not None:
            return state  # self.stats["steps"]: state calls write, not a setting
        return read_at_index(container, key)  # order[t] in a traced loop body: noted

    # loops over an array's rows (tracejit.tracer.loop_sequences)
    indexable = staticmethod(loop_sequences.indexable)
    sequence_length = staticmethod(loop_sequences.sequence_length)
    sequence_item = staticmethod(loop_sequences.sequence_item)
    while_trips = staticmethod(loop_while.while_trips)  # counted while loops

    def loop_note(self, line, reason):
        """A loop over range(...) the front end left as written: explain() says why."""
        note_unrolled(self.context, f"{sys._getframe(1).f_code.co_filename}:{line}", reason)

    def loop_effect(self, line):
        """Before a call statement under an if in a loop body (tracer/loop_effects.py)."""
        loop_effects.refuse_in_trial(self.context, line)

    # the model's own exception handlers --------------------------------------------------
    # an if on a traced bool whose branches store into arrays (tracer/if_selects.py)
    def selects(self, condition, *containers):
        return isinstance(condition, Tracer) and not condition.shape and (
            condition.dtype == np.bool_) and all(
            isinstance(container, (Tracer, np.ndarray)) for container in containers)

    def select(self, condition, taken, kept):
        if _is_selection(taken) or _is_selection(kept):
            # if (h > 1).any(): h[h > 1] = 1: NumPy's where would take the condition's
            # (a Tracer's) side and refuse the selection; the selection's where keeps it
            from .masked_selection import where  # cycle: masked_selection -> tracing

            return where(condition, taken, kept)
        return np.where(condition, taken, kept)

    def caught(self):  # the first statement of every except block of the model
        error = sys.exc_info()[1]
        reraise_if_it_stops_the_trace(error)
        if isinstance(error, AttributeError) and isinstance(error.name, str) and (
            (path := self.objects.path_of(error.obj)) is not None
        ):  # try: v = self.velocity / except AttributeError: the attribute must be missing
            attribute = path.attr(error.name)
            if attribute.key not in self.context.written_paths:
                self.context.note_presence(attribute, False)

    def hoistable(self, *pairs):
        """Whether a loop may hold the attributes ``pairs`` (``(owner, name)``) in locals
        (tracer/loop_attributes.py). The answer rests on each owner's class, which the
        class guards of the objects a path finds (and the trace's own code, for one made
        in the call) pin."""
        return plain_attributes(*pairs)

    # effects -------------------------------------------------------------------------
    def identical(self, left, right, negated):
        """``left is right`` (``is not`` when ``negated``) in the user's code. The trace's
        answer for two arrays is NumPy's, but for ``np.ascontiguousarray(x) is x``: NumPy
        returns ``x`` itself where it is C-contiguous, and compiled calls take either
        layout (the trace holds a copy), so that question runs eagerly. So does ``Y is X``
        of two arrays the caller hands in (sklearn's ``if Y is None or Y is X``, ``x is
        self.W``): the trace holds them as separate inputs whatever they are, and which
        arguments are one object is not part of a variant's entry guards."""
        same = left is right
        if holds_attributes(left) and holds_attributes(right):  # self.out is layer
            self.objects.pin_identity(left, right)
        if not same and isinstance(left, Tracer) and isinstance(right, Tracer) and (
                contiguous_copy_of(left, right) or contiguous_copy_of(right, left)):
            raise trace_error("np.ascontiguousarray(x) is x: NumPy's answer is x's layout, "
                              "which compiled calls do not guard")
        if not same and _callers_arrays(self.context, left, right):
            raise trace_error("`is` of two arrays from the caller (arguments, or arrays read "
                              "from outside): whether they are one object is not guarded")
        return same is not negated

    def compared(self, left, right, op):
        """``left == right``, ``!=``, ``in``, ``not in`` in the user's code, answered as
        written. An object compared whose equality is its identity (the default ``__eq__``:
        ``layer == self.last``, ``self.act in ACTIVATIONS``) is guarded by identity where it
        was found through a path: its class guard alone let another object of the class
        take the trace's answer (a wrong result)."""
        if op in ("in", "not in") and type(right) in (list, tuple, set, frozenset, dict):
            self.objects.pin_identity(left, *right, equality=True)
        else:
            self.objects.pin_identity(left, right, equality=True)
        return compared(left, right, op)

    @calls_for_the_user  # str() of a list holding a traced value is the user's text
    def print(self, *args, sep=" ", end="\n", file=None, flush=False):
        stream = {None: "stdout", sys.stdout: "stdout", sys.stderr: "stderr"}.get(file)
        if stream is None:
            raise trace_error("print(..., file=...) to a file inside a compiled function; "
                           "return the values and write them outside")
        if getattr(sys, stream) is not self.context.streams[stream]:
            raise trace_error(f"print() while the function has redirected sys.{stream} "
                              "(contextlib.redirect_stdout?): compiled calls print to the "
                              "caller's stream; return the text and write it outside")
        segments, atoms, texts = [], [], []
        # In a loop body being captured, ints are values too: print(t, loss) prints the
        # index, which the body generalizes like any other int.
        trial = getattr(self.context, "trial_prints", None)

        def is_value(arg):
            return is_traced(arg) or isinstance(arg, SymInt) or (
                trial is not None and isinstance(arg, int) and not isinstance(arg, bool))

        def atom_of(arg):
            atom, _, _ = self.context.atom(arg)
            atoms.append(atom)
            return len(atoms) - 1

        for arg in args:
            if type(arg) is DeferredText:  # print("%f" % cost): tracejit.tracer.deferred_text
                formatted, text = deferred_text.segment(self.context, arg, atom_of, is_value)
                segments.append(formatted)
                texts.append(text)
            elif (shape := deferred_text.dims_pieces(arg, atom_of)) is not None:
                segments.append(("formatted", shape))  # print(x.shape): one program
                texts.append(str(deferred_text.concrete(arg)))  # for every size
            elif is_value(arg):
                segments.append(("value", atom_of(arg)))
                texts.append(str(arg.value) if is_traced(arg) or isinstance(arg, SymInt)
                             else str(arg))
            else:
                self.objects.pin_identity(arg)  # print(self.act): its repr, by identity
                texts.append(str(_pinned(arg)))
                segments.append(("text", texts[-1]))
        if atoms and np.get_printoptions() != self.context.print_options:
            raise trace_error("print of a traced value under NumPy print options set inside "
                              "the function (np.printoptions / np.set_printoptions): compiled "
                              "code prints after the call, under the caller's options")
        params = (("end", end), ("segments", tuple(segments)), ("sep", sep),
                  ("stream", stream))
        self.context.body.append(Effect("print", tuple(atoms), params, user_location(skip=2)))
        self.print_count += 1
        if trial is not None:  # a traced loop iteration: written once the loop is decided
            trial.append((stream, sep.join(texts) + end))
            return
        emit_prints(self.context, [(stream, sep.join(texts) + end)])

    def deferred_text(self, template, values):
        """A formatting expression written as a ``print`` argument
        (``tracejit.tracer.deferred_text``): made into text when it is printed."""
        return DeferredText(template, values)

    def write_text(self, write, deferred):
        """``sys.stdout.write(<formatted text>)`` as a statement: a print of the text with
        no separator or end when ``write`` is the stream's (else called with the text)."""
        for stream in (sys.stdout, sys.stderr):
            if write == stream.write:
                return self.print(deferred, sep="", end="", file=stream)
        return self.call(write, self._written_text(deferred))

    def _written_text(self, deferred):
        """The text of ``deferred`` as Python makes it (a traced float refuses)."""
        if deferred.template[0] == "%":
            kind, text, single, _ = deferred.template
            return self.binary("mod", text, deferred.values[0] if single else deferred.values)
        return as_written(deferred.template, deferred.values)

    # assignments ---------------------------------------------------------------------
    @calls_for_the_user  # d[n] = v with n a dim: stored under the hash d[n] finds
    def set_item(self, container, index, value, outside):
        # a NumPy buffer this trace wrote into, itself or through a view of its base (row =
        # buf[0]; row += x, then buf[1] = 1.0): its traced copy, not the memory left behind
        container = self.local(container)
        if is_traced(container):
            container[index] = value
            return container
        if isinstance(container, np.ndarray) and (is_traced(value) or _traced_index(index) or (
                type(value) in (list, tuple) and any_traced(value)) or (
                _exit_trip_write(self.context, container))):
            # A traced position (x[ids[t]] = 1, mask[t] = 1) too: NumPy would read it as a
            # number, one trace per token id or trip.
            if id(container) in self.context.implicit_candidates:
                raise trace_error("writing a traced value into a global array; compiled runs "
                               "would skip it. Return the new array instead")
            traced = self._traced_copy(container)
            traced[index] = value
            return traced
        if (_caller_container(self.context, container, outside)
                or argument_writes.is_argument_container(self.context, container)) and (
            not _holds(container, index, value)
            and not argument_writes.note(self.context, container, index, value)
            and not self._note_listed_item(container, index, value)
        ):
            # the caller's container (an argument, or a container in one: inner =
            # state["inner"]; inner["y"] = v): compiled runs would skip this
            self.outside_mutation(f"item assignment into an argument's "
                                  f"{type(container).__name__}")
        elif attribute_writes.is_outside_container(self.context, container) and not _holds(
                container, index, value) and not self._note_listed_item(container, index, value):
            # C = self.cache; C[k] = v: through a local name the dict is the trace's copy of
            # the outside one (it holds arrays), where the write alone would be lost. (Not
            # recorded as self.cache[k] = v is: a later self.cache = C would store the
            # copy's other items as the trace saw them, and those are not guarded.)
            self.outside_mutation(f"item assignment into an outside "
                                  f"{type(container).__name__}")
        container[index] = value
        return container

    @calls_for_the_user
    def update_item(self, container, index, value, operation, outside):
        # a[i] += v is a[i] = a[i] + v (``a[i]`` is a view: updating it in place would not
        # reach ``a`` under tracing).
        container = self.local(container)  # a buffer written before: its copy (set_item)
        if (isinstance(container, np.ndarray) and _traced_index(index) and not outside
                and id(container) not in self.context.implicit_candidates):
            # dW[ids] += g into np.zeros: read through the traced copy the write makes,
            # not NumPy's indexing (which would read the traced position as a number)
            container = self._traced_copy(container)
        if not outside and type(container) in (dict, list) and type(
                container[index]) is np.ndarray:
            # d["a"] += v, views[0] += v on a NumPy array a dict or list made here holds
            # (buf[0], np.zeros(3)): NumPy updates that array in place, every other name
            # for it and its base see it, and the same object is stored back
            target = container[index]
            if self.context.replaced and (stand_in := self._replacement(target)) is not None:
                target = stand_in  # its memory was written with traced values before
                updated = getattr(operator, "i" + operation.rstrip("_"))(target, value)
            else:
                updated = self.inplace(target, value, operation)
            return self.set_item(container, index, updated, outside)
        if (isinstance(container, (dict, list, StackedList, StackedDict)) or is_in_loop(
                container)) and is_traced(container[index]) and isinstance(
                container[index].value, np.ndarray):
            # params[k] -= v on an array a dict or list holds: NumPy updates that array in
            # place (every name for it sees it) and stores the same object back. (A number
            # is immutable: config["t"] += 1 stores a new one.) A captured loop's list or
            # dict too: hs[-1] *= 3 after hs.append(h) updates h in NumPy.
            operation = "i" + operation
        current = container[index]
        updated = getattr(operator, operation)(current, value)
        ufunc = INPLACE_UFUNCS.get(operation.rstrip("_"))
        if ufunc is not None and ufunc is not np.matmul and _is_array(current):
            # NumPy applies the operator in place on the selection: the result must fit
            # its shape and cast "same_kind" to its dtype (int_array[1:3] += 0.5 raises)
            check_out(current, updated, f"np.{ufunc.__name__}")
        elif ufunc is not None and _is_selection(current):  # int_array[m] *= 0.5 raises
            check_cast(current, updated, f"np.{ufunc.__name__}")
        del current  # a view of a traced array must be gone before it is written into
        if isinstance(container, Tracer):
            result = update(container, index, value, operation, updated)
            if result is not None:
                container._update(result, written_region(container, index))
                return container
        return self.set_item(container, index, updated, outside)

    def inplace(self, target, value, operation):
        if isinstance(target, np.ndarray) and (
                refusal := entry_refusal(self.context, target)) is not None:
            raise refusal  # prev = hs[-1] in a captured loop (an array), then prev *= 0.5
        target = self.local(target)  # row += x, then buf *= 2: buf's traced copy
        if isinstance(target, np.ndarray) and is_traced(value):
            # NumPy writes into ``target``'s buffer: the result must fit its shape and cast
            # "same_kind" to its dtype (else NumPy's error), and every other name for the
            # buffer sees the write (set_item's traced copy).
            if id(target) in self.context.implicit_candidates:
                raise trace_error("in-place update of a global array with a traced value; "
                               "compiled runs would skip it. Return the new array instead")
            current = self.context.replaced.get(id(target), target)
            result = getattr(operator, operation)(current, value)
            check_out(target, result, f"np.{INPLACE_UFUNCS[operation.rstrip('_')].__name__}")
            return self.set_item(target, Ellipsis, result, False)
        if _is_traced_number(target):  # n += 1 on a Python number rebinds n, as Python does
            return getattr(operator, operation)(target, value)
        return operator_calls.inplace(self.call, self.operator_methods, operation.rstrip("_"),
                                      target, value)

    def set_attr(self, owner, name, value, written):
        """``owner.name = value``: on an object made in this call, as Python does it; on
        an object from outside (``self`` of a layer, a global model) a write the compiled
        call makes too (``attribute_writes``); elsewhere (a module, an object the trace
        cannot find again) outside state it refuses."""
        context = self.context
        if attribute_writes.is_local_object(context, owner):
            if attribute_writes.class_code(owner, name) is None:
                attribute_writes.set_local(context, owner, name, value)
                return
            # an object made here with a property (clipping its value, counting writes in
            # a global): its setter runs rewritten, so what it writes goes through the
            # hooks (a global's count refused) and compiled calls make it too
            setter = _property_setter(owner, name)
            if setter is None:  # (a __setattr__, a descriptor's __set__)
                _refuse_class_code(owner, name, written)
            self.call(setter, owner, value)
            return
        path = self.objects.path_of(owner)
        if path is None:
            return self.outside_mutation(written)
        _refuse_class_code(owner, name, written)
        if type(owner).__setattr__ is object.__setattr__ and _holds_attribute(
                owner, name, value, context.outside_copies):
            return  # numpy-ml's C = self.cache; ...; self.cache = C: the same dict stays
        if _holds_traced_copy(owner, name, value, context):
            # t = self.theta; t -= step; self.theta = t (and a loop's hoisted attribute,
            # tracer/loop_attributes.py): the caller's array, written in place, stays there
            return
        attribute = path.attr(name)
        held = getattr(owner, name, None)
        if (_is_number(held) or type(held) is tuple and held and all(
                _is_number(item) for item in held) and not attribute_writes.is_number_state(
                    owner, name)) and (
            attribute.key in context.outside_values
        ):  # self.t = self.t + 1, self.state = (x, x_dot): numbers read as settings, rebound
            self._number_state(owner, name, attribute, written)
        attribute_writes.note(context, owner, name, value, path)

    def del_attr(self, owner, name, written):
        """``del owner.name``: on an object made in this call, as Python does it; on one
        from outside, a deletion the compiled call makes too (``attribute_writes``)."""
        if attribute_writes.is_local_object(self.context, owner):
            _refuse_class_code(owner, name, written, "__delattr__")
            attribute_writes.set_local(self.context, owner, name)
            return
        path = self.objects.path_of(owner)
        if path is None:
            return self.outside_mutation(written)
        _refuse_class_code(owner, name, written, "__delattr__")
        attribute_writes.note_delete(self.context, owner, name, path)

    def del_item(self, container, index, written):
        """``del container[index]``: a dict or list from outside (or the trace's copy of
        one, where the deletion alone would be lost) is outside state: refused."""
        if attribute_writes.is_outside_container(self.context, container):
            return self.outside_mutation(written)
        del container[index]

    def _number_state(self, owner, name, attribute, written):
        """``owner.name``, a number the trace read as a setting, is rebound: remember it
        as state and trace again (``attribute_writes.NumberState``), or refuse."""
        if attribute_writes.mark_number_state(owner, name):
            raise attribute_writes.NumberState(
                f"{line_prefix(user_location(skip=2))}{attribute}")
        self.outside_mutation(written)

    @calls_for_the_user
    def store_item(self, container, index, value, written):
        """``expression[index] = value`` where the container is not a plain name
        (``self.cache["x"] = x``, ``self.h[t] = h``): an array is written as ``a[i] = v``
        is; a dict from outside found again through a path (``self.cache``) is written
        under a record (``attribute_writes.note_item``), other outside dicts and lists
        refused; one made in this call is written."""
        if isinstance(container, np.ndarray) or is_traced(container):
            self.set_item(container, index, value, False)
            return
        if attribute_writes.is_outside_container(self.context, container):
            if _holds(container, index, value, self.context.outside_copies):
                return  # self.optim_configs[p] = config: the dict there already
            if self._note_item(container, index, value) or self._note_listed_item(
                    container, index, value):
                return  # self.cache["h"] = h: a write compiled calls make too
            self.outside_mutation(written)
        container[index] = value

    def _note_listed_item(self, container, key, value):
        """``bn_param[k] = v`` with ``bn_param`` a dict held at a position of an outside
        list (cs231n's FullyConnectedNet: ``for bn_param in self.bn_params: bn_param['mode']
        = mode``, and ``batchnorm_forward`` writing ``bn_param['running_mean']``), through
        any name: written under a record as ``self.cache[k] = v`` is. Unlike ``C =
        self.cache``, no later write can store the trace's copy of it back: an item of an
        outside list is written only with arrays."""
        original = self.context.outside_copies.get(id(container), container)
        known = self.context.outside_objects.get(id(original))
        if type(original) is not dict or known is None or known[1] is not original:
            return False
        steps = known[0].steps
        if len(steps) < 2 or steps[-1][0] != "item" or type(steps[-1][1]) not in (int, str) or (
                steps[-2][0] != "attr"):
            return False
        owner = _owner_of(Path(known[0].root, steps[:-1]), self.objects)
        return attribute_writes.note_item(self.context, container, key, value, owner)

    def _note_item(self, container, key, value):
        original = self.context.outside_copies.get(id(container), container)
        known = self.context.outside_objects.get(id(original))
        owner = _owner_of(known[0], self.objects) if known is not None else None
        return attribute_writes.note_item(self.context, container, key, value, owner)

    @calls_for_the_user
    def update_item_in(self, container, index, value, operation, written):
        """``expression[index] op= value`` (``self.params["W"] -= lr * g``): an array
        there is updated in place (as NumPy does; an outside one is written back), an
        outside container rebinding its item (``self.counts["n"] += 1``) is refused."""
        if isinstance(container, np.ndarray) or is_traced(container):
            self.update_item(container, index, value, operation, False)
            return
        current = state_item(self.context, container, index)  # self.stats["steps"] += 1
        if current is None:
            current = self.load(container[index], ("expression", "", ()))
        if (is_traced(current) and not _is_traced_number(current) and not isinstance(
                current, SymInt)) or isinstance(current, np.ndarray):
            self.inplace(current, value, operation)  # an array: updated in place
            return
        if attribute_writes.is_outside_container(self.context, container):
            if self._note_item(container, index, self.inplace(current, value, operation)):
                return
            self.outside_mutation(written)
        container[index] = self.inplace(current, value, operation)

    def mutation_of(self, what, receiver):
        """A mutating method (``append``, ``update``, ...) called on ``receiver``: on a
        dict or list from outside, outside state: refused. So is a set the trace did not
        see made (``self.seen.add(k)``: no watch sees a set change, and compiled calls
        would skip it while the trace put its traced values in the caller's set)."""
        if attribute_writes.is_outside_container(self.context, receiver) or (
                type(receiver) is set and not self._made_in_this_call(receiver)):
            self.outside_mutation(what)

    @calls_for_the_user
    def append_to(self, what, method, root, descriptor, value):
        """``<list>.append(value)`` or ``.extend(value)`` on a list reached from a global, a
        closure or a parameter's attribute (``self.hs.append(h)``, ``LOSSES.append(loss)``):
        the list as it is (its contents not guarded) and its path; recorded where a
        compiled call can append too (tracer/list_appends.py), else refused as any outside
        mutation is; a list the call made is appended to."""
        target = root
        for step, key in descriptor[2]:
            target = getattr(target, key) if step == "attr" else target[key]
        if loop_attribute_carries.stands_in(self.context, target):
            return getattr(target, method)(value)  # self.cost_ carried by a loop
        frame = sys._getframe(1)
        path = self._path(descriptor, frame)
        if path is not None and path.root[0] == "closure" and self._made_by_this_trace(frame):
            # log = make_logger(m.history), then log(v): its cell is made anew at every
            # call, so an append replayed through it would go to the first call's list (and
            # the trace's own len(hist) missed it): appended if the call made the list,
            # else refused as any outside mutation is
            path = None
        created = path is not None and path.root[0] == "self" and (
            attribute_writes.is_local_object(self.context, path.root[1]))
        if path is not None and not created and list_appends.note(self.context, path, target,
                                                                   method, value):
            return None
        if path is not None or not self._made_in_this_call(target):
            self.outside_mutation(what)
        return self.call(getattr(target, method), value)

    def _made_by_this_trace(self, frame):
        """Whether the user function running in ``frame`` was made by code this trace ran
        rewritten (a closure a factory returned during the call), not before the call."""
        function = self.originals.get(frame.f_code)
        return function is not None and any(
            _nests(code, function.__code__) for code in self.originals)

    def update_attr(self, owner, name, value, operation, written):
        """``owner.name op= value`` with an array there: NumPy writes into that array and
        binds the same object again, so it is the array's in-place update (an array read
        from outside the arguments, ``self.W -= lr * self.dW``, is then written back after
        every compiled call: ``argument_writes.OutsideArrayWrite``). Anything else there
        (``self.t += 1``) rebinds it: a number an object keeps is a run-time input of
        the trace and the new value a write (``attribute_writes.NumberState``)."""
        if not attribute_writes.is_local_object(self.context, owner):
            _refuse_class_code(owner, name, written)  # (eager binds the array again)
        current = getattr(owner, name)
        if (_is_number(current) or _is_traced_number(current) or isinstance(
                current, SymInt)) and attribute_writes.is_local_object(self.context, owner):
            # Perceptron().fit(X, y) made here: self.bias = 0, then self.bias += update
            attribute_writes.set_local(self.context, owner, name,
                                       getattr(operator, operation)(current, value))
            return
        if _is_traced_number(current) or isinstance(current, SymInt):
            # a Python number this trace wrote there (self.steps += 1 at an earlier trip,
            # self.count = len(x) then += len(y)): rebound as Python does, not NumPy's
            # in-place add (which makes an np.int64)
            path = self.objects.path_of(owner)
            updated = getattr(operator, operation)(current, value)
            attribute_writes.note(self.context, owner, name, updated, path)
            return
        if _is_number(current):
            path = self.objects.path_of(owner)
            if path is None:
                return self.outside_mutation(written)
            attribute = path.attr(name)
            number = self._load_through(attribute, current)
            # a number this trace wrote there (nnfs's new_pass: self.accumulated_sum = 0,
            # then += np.sum(losses)) is rebound as Python does; one read as a setting is
            # state the calls rebind
            if not is_traced(number) and attribute.key not in self.context.written_paths:
                return self._number_state(owner, name, attribute, written)
            updated = getattr(operator, operation)(number, value)
            attribute_writes.note(self.context, owner, name, updated, path)
            return
        target = self.load(current, ("expression", "", ()))
        if not (isinstance(target, np.ndarray) or is_traced(target)):
            return self.outside_mutation(written)
        self.inplace(target, value, operation)

    def _traced_copy(self, array):
        """The traced stand-in of a NumPy buffer the function writes a traced value into;
        every other name for the same buffer (``b = a``, a helper's parameter) reads it."""
        if id(array) in self.context.replaced:
            return self.context.replaced[id(array)]
        if array.base is not None:  # da_prev_pad = dA_prev_pad[i]: that view of the base's
            root = numpy_root(array)        # traced copy, so every name sees
            found = None if root is None else index_in(array, root)  # a write
            if found is None:
                raise trace_error("writing a traced value into a view of a NumPy array "
                                  "that is not a slice of it (a transpose, reshape or view "
                                  "of other memory); index the array itself, or build the "
                                  "result with np.concatenate/np.stack")
            index, shape = found
            tracer = self._traced_copy(root)[index].reshape(shape)
        else:
            atom, _, _ = self.context.atom(np.array(array))  # a constant of the trace
            tracer = self.context.tracer_for(atom)
        self.context.replaced[id(array)] = tracer
        self.context.keep_alive.append(array)  # its id must stay unique for the trace
        return tracer

    def setdefault_argument(self, what, container, key, default=None):
        """``config.setdefault(key, default)`` on an argument's dict, or one read from
        outside (``self.config.setdefault(...)``): its value when the key is there (the
        dict's keys are part of the call's guarded structure, so later calls have it too);
        else a write of the default (tracejit.tracer.argument_writes, or under a record as
        ``self.config[key] = default`` is). Another receiver's ``setdefault`` (a class of
        the user's) is called as written."""
        if isinstance(container, dict) and key in container:
            return container[key]
        if self._made_in_this_call(container):  # config = {} when the caller passed None
            return container.setdefault(key, default)
        if isinstance(container, dict) and argument_writes.note(self.context, container, key,
                                                                default):
            container[key] = default  # a write into the caller's dict, stored after the call
            return default
        if attribute_writes.is_outside_container(self.context, container) and (
                self._note_item(container, key, default)
                or self._note_listed_item(container, key, default)):
            return default  # cs231n's optimizers on a Solver's self.optim_configs[p]
        self.outside_mutation(what, container)  # (raises where the call changes state)
        return self.call(container.setdefault, key, default)

    def _made_in_this_call(self, container):
        """A dict or list neither passed in nor reached from outside: one the function made
        (a parameter rebound, ``if config is None: config = {}``), which it may change; a
        set made by ``set()`` in the call (a set from outside is not watched: only one the
        trace saw made is known as the call's own)."""
        if type(container) is set:
            return attribute_writes.is_local_object(self.context, container)
        return type(container) in (dict, list) and not (
            argument_writes.is_argument_container(self.context, container)
            or attribute_writes.is_outside_container(self.context, container))

    def outside_mutation(self, what, owner=None):
        if isinstance(owner, types.ModuleType):
            return  # np.sort(x), np.add(a, b): a module's function, not a method mutating it
        if owner is not None and self._made_in_this_call(owner):
            return  # history.append(loss) after history = [] in the function
        if owner is not None and _own_method(owner, what):
            return  # tape.add(node) of the user's class: it runs rewritten, its writes hooked
        raise trace_error(
            f"`{what}` changes state outside the compiled function; compiled runs would skip "
            "it. Return the new value instead"
        )


def _refuse_class_code(owner, name, written, hook="__setattr__"):
    """Refuse ``written`` (``self.w_ = ...`` of an outside object) before it runs code of
    the object's class (``attribute_writes.class_code``): that code runs once, eagerly."""
    if (code := attribute_writes.class_code(owner, name, hook)) is not None:
        raise trace_error(f"`{written}` runs {code}, code of the object's class that the "
                          "trace cannot follow; the call runs eagerly")


def _property_setter(owner, name):
    """The setter of the property ``name`` of ``owner``'s class when it is a function of
    the user's (which the trace runs rewritten) and the class has no ``__setattr__``;
    else None."""
    found = _class_attribute(owner, name)
    if type(owner).__setattr__ is object.__setattr__ and isinstance(found, property) and (
            is_user_function(found.fset)):
        return found.fset
    return None


def _property_getter(owner, name):
    """The getter of the property ``name`` of ``owner``'s class when it is a function of
    the user's and the class has no ``__getattribute__``; else None."""
    found = _class_attribute(owner, name)
    if type(owner).__getattribute__ is object.__getattribute__ and isinstance(
            found, property) and is_user_function(found.fget):
        return found.fget
    return None


def _class_attribute(owner, name):
    return next((vars(klass)[name] for klass in type(owner).__mro__
                 if name in vars(klass)), None)


def _nests(code, inner):
    """Whether ``inner`` is a code object nested (at any depth) in ``code``'s constants."""
    for constant in code.co_consts:
        if constant is inner or (isinstance(constant, types.CodeType)
                                 and _nests(constant, inner)):
            return True
    return False


def _hashable(function):
    if type(function).__hash__ is None:
        return False
    try:
        hash(function)
    except TypeError:
        return False
    return True


def _own_method(owner, what):
    """Whether ``what``, ``name.method(...)``, calls a method the user's class of ``owner``
    defines (``self.add(node)`` of a tape class, not ``set.add``): it runs rewritten, so
    what it changes goes through the hooks like any other code of the function."""
    method = what.partition("(")[0].rpartition(".")[2]
    return is_user_function(getattr(type(owner), method, None))


def _is_traced_number(value):
    """A traced number: a Python int or float (weak: ``self.steps`` after a write of the
    trace) or a NumPy scalar (``x.sum()``, ``self.total`` after ``+= x.sum()``). Numbers
    are immutable: ``+=`` rebinds the name, and other names keep the old value (an
    in-place update would change them, and make an int an ``np.int64``)."""
    if not isinstance(value, Tracer) or value.shape:
        return False  # (a dim, SymInt, is traced too: an int, which += rebinds as it is)
    return value.aval.weak or isinstance(known_kind(value.raw_value), (np.generic, int, float))


def _is_number(value):
    """A Python or NumPy number (not a bool): what an object may keep as a counter. (A
    Python int far from 0 is not: compiled code computes it as an int64, which would wrap
    where Python's int grows.)"""
    if type(value) is int:
        return -2 ** 31 < value < 2 ** 31
    return type(value) is float or (isinstance(value, np.generic)
                                    and value.dtype.kind in "iuf")


def _item_state(path, value, objects):
    """The keys of the dict ``value`` read at ``path`` that calls write (or none): a dict
    held in an attribute (``self.stats``), or at a key or position of one
    (``self.optim_configs["W1"]``, ``self.bn_params[0]``: ``attribute_writes.note_item``
    keeps those under the holder of the attribute)."""
    if type(value) is not dict or not path.steps:
        return frozenset()
    holder = path
    if path.steps[-1][0] == "item" and len(path.steps) > 1:
        holder = Path(path.root, path.steps[:-1])
    owner = _owner_of(holder, objects)
    return attribute_writes.item_state(owner, path.steps[-1][1]) if owner is not None else (
        frozenset())


def _owner_of(path, objects=None):
    """The object holding the attribute ``path`` ends with, or None. Through an argument
    (whose leaves a load does not have) only an object ``objects`` knows by that path
    (``train_step(model, opt, X, y)``: ``opt.t``, which ``opt.step()`` rebinds)."""
    if not path.steps or path.steps[-1][0] != "attr":
        return None
    if path.root[0] == "arg":
        return None if objects is None else objects.at(Path(path.root, path.steps[:-1]))
    try:
        return Path(path.root, path.steps[:-1]).resolve()
    except Exception:  # noqa: BLE001 - a path that no longer reads: not state
        return None


def _pinned(value):
    """``value`` with the dims inside its tuples and lists made ints (print([x.shape])
    prints ``[(3, 2)]``, as NumPy does, not ``[(s0, 2)]``): the call's text then holds those
    sizes, so the trace guards them (one more compile per size). A flat tuple or list,
    print(x.shape), is rendered at run time instead (``deferred_text.dims_pieces``)."""
    if isinstance(value, SymInt):
        return int(value)
    if type(value) in (tuple, list):
        return type(value)(_pinned(item) for item in value)
    return value


def _holds_attribute(owner, name, value, copies):
    """Whether ``owner.name`` is ``value`` already, or ``value`` is the trace's copy of the
    dict or list there (``copies``: copy -> original): storing it back changes nothing."""
    held = vars(owner).get(name, _ABSENT) if hasattr(owner, "__dict__") else _ABSENT
    return held is not _ABSENT and type(held) in (dict, list) and (
        copies.get(id(value), value) is held)


_ABSENT = object()


def _holds_traced_copy(owner, name, value, context):
    """Whether ``value`` is the trace's stand-in of the NumPy array at ``owner.name`` (its
    traced input, or the traced copy of a buffer written in place): NumPy's store binds
    the same array again, whose in-place writes reach the caller already."""
    held = vars(owner).get(name, _ABSENT) if hasattr(owner, "__dict__") else _ABSENT
    if type(held) is not np.ndarray or not is_traced(value):
        return False
    return context.replaced.get(id(held)) is value or (
        context.is_implicit(held) and context.implicit_tracer(held) is value)


def _caller_container(context, container, parameter):
    """Whether ``container[k] = v`` through a parameter name writes the caller's container.
    A plain dict or list that is neither an argument's (or in one) nor read from outside
    was made by the trace: a helper's parameter holding the calling function's own dict
    (the course's ``update_parameters_with_adam(parameters, grads, v, s, t)`` called from
    ``model``, ``v = {}`` made there) is written like a local one."""
    return parameter and not (
        type(container) in (dict, list)
        and not attribute_writes.is_outside_container(context, container))


def _holds(container, index, value, copies=None):
    """Whether ``container[index]`` is ``value`` already: ``params[k] -= lr * g`` updates
    the array in place and stores the same object back, changing nothing in the dict. With
    ``copies`` (the trace's copies of outside containers -> the originals), a copy stands
    for its original: cs231n's ``self.optim_configs[p] = next_config`` stores back the
    config dict the update rule was given and returned."""
    if not isinstance(container, (dict, list)):
        return False
    try:
        held = container[index]
    except (KeyError, IndexError, TypeError):
        return False
    return held is value or bool(copies) and (
        copies.get(id(held), held) is copies.get(id(value), value))


def default_roots(fn, args, kwargs):
    """``{parameter name: Path root}`` for the parameters this call leaves to their
    defaults: the defaults are read from the function at every call, like globals, so
    mutating ``cfg={"k": 2.0}`` or reassigning ``__defaults__`` is seen.

    >>> def scale(x, k=2.0, *, cfg=None): ...
    >>> sorted(default_roots(scale, (1,), {}))
    ['cfg', 'k']
    """
    function = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if not isinstance(function, types.FunctionType):
        return {}
    code = function.__code__
    positional = code.co_varnames[: code.co_argcount]
    given = len(args) + isinstance(fn, types.MethodType)
    defaults = function.__defaults__ or ()
    first_default = len(positional) - len(defaults)
    roots = {}
    for index, name in enumerate(positional):
        if index >= max(given, first_default) and name not in kwargs:
            roots[name] = ("default", function, index - first_default)
    keyword_only = code.co_varnames[code.co_argcount: code.co_argcount + code.co_kwonlyargcount]
    for name in keyword_only:
        if name not in kwargs and name in (function.__kwdefaults__ or {}):
            roots[name] = ("kwdefault", function, name)
    return roots


def _passed_values(fn, args, kwargs, names):
    """``{name: value}`` for the parameters in ``names`` that bind one argument as it is
    (not ``*args`` or ``**kwargs``); empty when the signature cannot be read."""
    try:
        signature = inspect.signature(fn)
        bound = signature.bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)
    return {name: value for name, value in bound.items() if name in names and (
        signature.parameters[name].kind in plain)}


def run_rewritten(fn, args, kwargs, parameter_leaves=None, static_leaves=None):
    """Call ``fn`` rewritten (when its source allows) under the current trace; returns the
    result and the functions the trace passed through ``[(qualname, file, source)]``.
    ``parameter_leaves`` maps ``fn``'s parameter names to their argument leaf positions
    (attributes read from them are guarded); ``static_leaves`` maps leaf positions to the
    arguments' other leaves (objects in a list or dict argument: their attributes too)."""
    context = current_context()
    bound = partial_roots(fn)
    if bound:  # jit(partial(step, optimizers)): step's body runs rewritten, like any other
        args, kwargs = (*fn.args, *args), {**fn.keywords, **kwargs}
        fn = fn.func
    defaults = default_roots(fn, args, kwargs)
    instance = getattr(fn, "__self__", None) if isinstance(fn, types.MethodType) else (
        fn if callable_object(fn) else None)
    roots = {**defaults, **bound}
    if instance is not None:  # self.w, self.bias is None: read from the instance again
        method = getattr(fn, "__func__", None) or type(fn).__call__
        roots[method.__code__.co_varnames[0]] = ("self", instance)
    hooks = context.hooks = Hooks(context, parameter_leaves=parameter_leaves,
                                  parameter_roots=roots)
    hooks.parameter_values = _passed_values(fn, args, kwargs, parameter_leaves or {})
    for position, leaf in (static_leaves or {}).items():
        if holds_attributes(leaf):
            hooks.objects.note(Path(("arg", position)), leaf)
    # ``def f(x, k=2.0)``, ``partial(f, [opt], k=2.0)``: k is read from outside too
    for path in [Path(root) for root in defaults.values()] + list(bound.values()):
        value = path.resolve()
        if type(value) in GUARDED_VALUES or is_setting(value) or isinstance(
                value, np.generic) or (
            type(value) is dict
        ):
            note_contents(context, path, value)
            if type(value) in (list, tuple, dict):
                hooks.objects.remember_container(path, value)
        elif callable(value) and not isinstance(value, (NOT_GUARDED_CALLABLES, np.ndarray)):
            context.note_outside_value(path, value, identity=True)
        elif holds_attributes(value):  # partial(step, optimizer): optimizer.lr guarded
            context.note_outside_value(path, value, identity=True)
            hooks.objects.note(path, value)
    target = hooks.function_for(fn) if not isinstance(fn, functools.partial) else fn
    hooks.top = getattr(getattr(target, "__func__", target), "__code__", None)
    if target is fn and isinstance(fn, (types.FunctionType, types.MethodType)):
        function = fn.__func__ if isinstance(fn, types.MethodType) else fn
        hooks.functions.setdefault(
            function.__code__, (function.__qualname__, function.__code__.co_filename, None)
        )
    result = target(*args, **kwargs)
    return result, list(hooks.functions.values())

