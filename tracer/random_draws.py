"""Random draws inside a compiled function: host draws, made again at every call.

A model draws its dropout mask or noise inside the function (``np.random.rand(n, m) <
keep_prob``, ``rng.random(x.shape)``, ``np.random.seed(1)`` at the top). No kernel can
draw NumPy's exact stream, and a drawn value frozen into the compiled code would be the
same at every call. So a draw is a host step: while tracing, the real draw runs (the trace
sees real values, and the call's stream advances as eager's does) and is recorded as a
``DrawOp``; its value becomes a graph input. A compiled call runs the variant's
``DrawProgram`` after its entry guard passed and before the kernels - every draw and seed
in the trace's order (draws do not depend on traced data, so order among themselves is all
that matters) - and passes the drawn values in.

The stream stays eager's: ``DrawProgram.run`` keeps the state of every generator it draws
from as it was before (``tracer.generator_states``: cheaply, it is on every call), and
the runtime puts it back (``DrawProgram.rewind``) whenever the call goes on another way
(a side exit, a guard margin, an error, an eager rerun), so the eager run that follows
draws the numbers it would have drawn. A trace keeps the states it found in a
``Journal``; a trace that fails, or whose result is not the call's, is rewound the same
way.

What is recorded is data, never a callable: a generator method by its name, from an
allowlist (``LEGACY``, ``GENERATOR``: a disk cache entry naming anything else is refused),
where the generator is found (``("legacy",)``: NumPy's global ``RandomState``;
``("path", Path)``: an argument, global, closure cell or attribute, type-checked at every
call; ``("made", k)``: made by op ``k``, ``np.random.default_rng(0)`` in the function),
and the arguments: numbers, strings, dtypes, and sizes whose symbolic dims are computed
again from the call's shapes.

Refused (the function runs eagerly, and ``explain()`` names the line): a traced array as
a distribution's parameter (a traced scalar is specialized under a guard), ``out=``
and anything else that writes into an array (but ``shuffle`` of a traced array: a
``permutation`` draw and a write, ``_shuffle``), and a draw inside a loop being captured
(the loop runs unrolled: a per-trip draw in order is what eager does).

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> def dropout(x):
...     np.random.seed(0)
...     return x * (np.random.rand(*x.shape) < 0.5)
>>> traced = trace(dropout, np.ones(4))
>>> [op.describe() for op in traced.draws.ops]
['np.random.seed(0)', 'np.random.rand(4)']
>>> np.random.seed(5)
>>> (drawn,) = traced.draws.run(())
>>> bool((drawn == (np.random.seed(0) or np.random.rand(4))).all())
True
"""

from __future__ import annotations

import contextlib
import operator
import sys
import threading
import types
from dataclasses import dataclass

import numpy as np

from .abstract import COMPILED_DTYPES
from .dims import DimExpr, SymInt
from .errors import TraceError
from .generator_states import keep, put_back
from .implicit import Path
from .locations import user_location
from .loop_generalize import Refused
from .primitives import is_traced

# Methods whose draws are replayed, by name: how many distribution parameters come before
# ``size`` (``DIMS``: the arguments are the dims, ``np.random.rand(n, m)``; ``LENGTH``:
# ``permutation(n)``, n items). Every one of them draws from its generator alone and
# returns a new array or number.
DIMS, LENGTH = "dims", "length"
_COMMON = {
    "standard_normal": 0, "standard_exponential": 0, "standard_cauchy": 0,
    "uniform": 2, "normal": 2, "binomial": 2, "poisson": 1, "exponential": 1, "gamma": 2,
    "beta": 2, "laplace": 2, "logistic": 2, "lognormal": 2, "geometric": 1,
    "standard_gamma": 1, "standard_t": 1, "chisquare": 1, "rayleigh": 1, "triangular": 3,
    "vonmises": 2, "wald": 2, "weibull": 1, "pareto": 1, "power": 1, "gumbel": 2,
    "negative_binomial": 2, "choice": 1, "permutation": LENGTH,
}
LEGACY = {**_COMMON, "rand": DIMS, "randn": DIMS, "random_sample": 0, "random": 0,
          "ranf": 0, "sample": 0, "randint": 2, "random_integers": 2}  # RandomState
GENERATOR = {**_COMMON, "random": 0, "integers": 2}  # np.random.Generator
_MAKERS = ("default_rng", "RandomState")  # np.random.default_rng(seed), RandomState(seed)


def _random_module():
    return sys.modules.get("numpy.random")


def _legacy_state():
    return _random_module().mtrand._rand


def rng_kind(value):
    """``"Generator"`` or ``"RandomState"`` for a generator tracejit replays, else None."""
    random = _random_module()
    if random is None:
        return None
    if type(value) is random.Generator:
        return "Generator"
    if type(value) is random.RandomState:
        return "RandomState"
    return None


def generator_kind(value):
    """``(type, bit generator type)`` of a ``Generator`` or ``RandomState``, else None:
    what an argument generator is guarded by instead of its identity when the trace draws
    from it at its leaf (``drawn_arguments``: the draws find the call's generator again)
    and the result does not hold it, so a fresh ``np.random.default_rng(seed)`` per call
    is no new variant (``runtime.guards.EntrySpec.from_trace``).

    >>> generator_kind(np.random.default_rng(0))[1].__name__
    'PCG64'
    """
    kind = rng_kind(value)
    if kind is None:
        return None
    # (RandomState keeps its bit generator private: NumPy's own pickling reads it so)
    bits = value.bit_generator if kind == "Generator" else value._bit_generator
    return type(value), type(bits)


def drawn_arguments(program):
    """Positions of the argument leaves the draws of ``program`` (a ``DrawProgram`` or
    None) read as generators, at the leaf itself."""
    if program is None:
        return set()
    return {op.rng[1].root[1] for op in program.ops
            if op.kind == "draw" and op.rng[0] == "path" and op.rng[1].root[0] == "arg"
            and not op.rng[1].steps}


def _table(kind):
    return GENERATOR if kind == "Generator" else LEGACY


def is_rng_method(value):
    """A bound method of a generator (``rng.random``, ``np.random.rand``)."""
    try:
        owner = getattr(value, "__self__", None)
    except Exception:  # noqa: BLE001 - an EasyDict's __getattr__ = dict.__getitem__ (KeyError)
        return False
    return owner is not None and rng_kind(owner) is not None


def note_method(context, path, method):
    """``rng.random`` read at ``path``: the draw finds its generator again at the path
    without the method's name."""
    found = getattr(context, "rng_methods", None)
    if found is None:
        found = context.rng_methods = {}
    found[id(method)] = (method, Path(path.root, path.steps[:-1]))


# --- the recorded program ------------------------------------------------------------------
@dataclass(frozen=True)
class DrawOp:
    """One host step: ``kind`` ``"draw"`` (a value: a graph input), ``"seed"`` (NumPy's
    global seed) or ``"make"`` (a generator made in the function)."""

    kind: str
    rng: tuple  # ("legacy",) | ("path", Path) | ("made", op index) | () for "make"
    rng_type: str  # "Generator" | "RandomState"
    name: str  # the method's name (for "make": "default_rng" or "RandomState")
    args: tuple
    kwargs: tuple  # (name, value) pairs
    location: str = ""

    def describe(self):
        if not self.rng or self.rng[0] == "legacy":
            owner = "np.random"
        elif self.rng[0] == "made":
            owner = f"<generator made by op {self.rng[1]}>"
        else:
            owner = str(self.rng[1])
        shown = [_show(arg) for arg in self.args] + [f"{key}={_show(value)}"
                                                     for key, value in self.kwargs]
        return f"{owner}.{self.name}({', '.join(shown)})"

    def symbols(self):
        found = set()
        _symbols_in((self.args, tuple(value for _, value in self.kwargs)), found)
        return found


def _show(value):
    if isinstance(value, DimExpr):
        return str(value)
    if isinstance(value, np.dtype):
        return f"np.{value.name}"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_show, value)) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(map(_show, value)) + "]"
    return repr(value)


@dataclass(frozen=True)
class ArgumentNumber:
    """A seed the caller passes (``np.random.seed(seed)``, ``default_rng(seed)`` with
    ``seed`` a number argument): the draw program reads the call's leaf ``leaf`` at every
    call, as eager seeds with it. deeplearning.ai's ``random_mini_batches(X, Y, 64, seed)``
    is called with ``seed + 1`` every epoch: specialized, each seed was a new variant and
    a new compile (``default_rng(seed)``: refused, eager)."""

    leaf: int

    def __repr__(self):
        return f"<the call's argument leaf {self.leaf}>"


def _symbols_in(value, found):
    if isinstance(value, DimExpr):
        found.update(value.symbols())
    elif isinstance(value, (tuple, list)):
        for item in value:
            _symbols_in(item, found)


def _concrete(value, bindings, leaves=()):
    """A recorded argument as the call passes it: dims computed from this call's sizes, a
    seed argument read from its ``leaves``."""
    if isinstance(value, DimExpr):
        return value.evaluate(bindings)
    if isinstance(value, ArgumentNumber):
        return leaves[value.leaf]
    if isinstance(value, tuple):
        return tuple(_concrete(item, bindings, leaves) for item in value)
    if isinstance(value, list):
        return [_concrete(item, bindings, leaves) for item in value]
    return value


def check_op(op):
    """Refuse an op that is not one tracejit makes (a forged disk cache entry): only
    allowlisted names, generators found at known places, plain arguments."""
    if op.kind == "make":
        if op.name not in _MAKERS or op.rng != () or op.kwargs or len(op.args) > 1 or not (
                op.args == () or op.args[0] is None or type(op.args[0]) is int
                or _is_argument_number(op.args[0])):
            raise ValueError(f"a random draw program makes {op.name!r}")
        return
    if op.rng_type not in ("Generator", "RandomState"):
        raise ValueError(f"a random draw from a {op.rng_type!r}")
    if op.kind == "seed":
        if op.name != "seed" or op.rng != ("legacy",) or op.kwargs or len(op.args) > 1:
            raise ValueError("a malformed np.random.seed in a random draw program")
        if op.args and _is_argument_number(op.args[0]):
            return
    elif op.kind != "draw" or op.name not in _table(op.rng_type):
        raise ValueError(f"a random draw program calls {op.name!r}, which tracejit does not "
                         "replay")
    if not (op.rng == ("legacy",) and op.rng_type == "RandomState") and not (
            len(op.rng) == 2 and op.rng[0] == "path" and isinstance(op.rng[1], Path)) and not (
            len(op.rng) == 2 and op.rng[0] == "made" and type(op.rng[1]) is int):
        raise ValueError(f"a random draw program draws from {op.rng!r}")
    for key, _ in op.kwargs:
        if key not in _KEYWORDS:
            raise ValueError(f"a random draw with the argument {key!r}")
    _check_arguments((op.args, tuple(value for _, value in op.kwargs)))


_KEYWORDS = {"size", "dtype", "low", "high", "loc", "scale", "n", "p", "lam", "a", "b",
             "shape", "replace", "endpoint", "mean", "df", "left", "mode", "right", "mu",
             "kappa", "sigma", "d0", "d1"}


_MADE_TYPES = {"default_rng": "Generator", "RandomState": "RandomState"}


def _check_made(ops, number, op):
    """A draw from ``("made", k)`` (a forged disk cache entry may name anything): op ``k``
    comes earlier and makes a generator of the draw's type, or ``run`` would fail inside
    the entry guard (KeyError, AttributeError) where eager NumPy runs."""
    maker = ops[op.rng[1]] if 0 <= op.rng[1] < number else None
    if maker is None or maker.kind != "make" or _MADE_TYPES[maker.name] != op.rng_type:
        raise ValueError(f"a random draw program draws from {op.rng!r}, which makes no "
                         f"{op.rng_type}")


def _is_argument_number(value):
    return isinstance(value, ArgumentNumber) and type(value.leaf) is int and value.leaf >= 0


def _check_arguments(value):
    if isinstance(value, (tuple, list)):
        for item in value:
            _check_arguments(item)
    elif not (value is None or type(value) in (bool, int, float, str) or isinstance(
            value, (DimExpr, np.dtype))):
        raise ValueError(f"a random draw program argument of type {type(value).__name__}")


class DrawProgram:
    """The host draws of a variant, run in order at every compiled call.

    ``run(leaves, bindings)`` resolves the generators (None when one is not of the type
    traced: the entry misses, nothing drawn), keeps their states, and returns the drawn
    values; ``rewind()`` puts back the states the last ``run`` on this thread found."""

    def __init__(self, ops):
        self.ops = tuple(ops)
        for number, op in enumerate(self.ops):
            check_op(op)
            if op.kind != "make" and op.rng[0] == "made":
                _check_made(self.ops, number, op)
        self.outputs = sum(op.kind == "draw" for op in self.ops)
        self._before = threading.local()
        symbols = set()
        for op in self.ops:
            symbols |= op.symbols()
        self.symbols = tuple(sorted(symbols))

    def __eq__(self, other):
        return isinstance(other, DrawProgram) and self.ops == other.ops

    def __hash__(self):
        return hash(self.ops)

    def __repr__(self):
        return f"DrawProgram({'; '.join(op.describe() for op in self.ops)})"

    def describe(self):
        return [op.describe() for op in self.ops]

    def run(self, leaves, bindings=None):
        bindings = bindings or {}
        found = {}  # id -> generator, for every generator from outside the function
        resolved = []
        for op in self.ops:
            if op.kind == "make" or op.rng[0] == "made":
                resolved.append(None)
                continue
            if op.rng[0] == "legacy":
                rng = _legacy_state()
            else:
                try:
                    rng = op.rng[1].resolve(leaves)
                except (KeyError, AttributeError, IndexError, ValueError, TypeError):
                    return None
                if rng_kind(rng) != op.rng_type:
                    return None
            found[id(rng)] = rng
            resolved.append(rng)
        self._before.states = [keep(rng) for rng in found.values()]
        values, made = [], {}
        for number, (op, rng) in enumerate(zip(self.ops, resolved)):
            args = _concrete(op.args, bindings, leaves)
            kwargs = {key: _concrete(value, bindings) for key, value in op.kwargs}
            if op.kind == "make":
                made[number] = getattr(_random_module(), op.name)(*args)
                continue
            if rng is None:
                rng = made[op.rng[1]]
            value = getattr(rng, op.name)(*args, **kwargs)
            if op.kind == "draw":
                values.append(value)
        return tuple(values)

    def rewind(self):
        """Put back the generators' states from before the last ``run`` (on this thread)."""
        states = getattr(self._before, "states", None)
        if states:
            self._before.states = None
            for kept in states:
                put_back(kept)


# --- journals: the states a trace found ----------------------------------------------------
_open = threading.local()


class Journal:
    """The state of every generator a trace drew from, before its first draw."""

    def __init__(self):
        self.states = {}

    def note(self, rng):
        if id(rng) not in self.states:
            self.states[id(rng)] = keep(rng)

    def rewind(self):
        """Put the generators back as the trace found them (its draws undone)."""
        states, self.states = self.states, {}
        for kept in states.values():
            put_back(kept)


@contextlib.contextmanager
def journal():
    """``with journal() as kept:`` traces inside note the states they change in ``kept``."""
    kept = Journal()
    stack = getattr(_open, "journals", None)
    if stack is None:
        stack = _open.journals = []
    stack.append(kept)
    try:
        yield kept
    finally:
        stack.remove(kept)


def rewind_open():
    """Undo the draws of the trace in the innermost open journal (it traces again)."""
    journals = getattr(_open, "journals", None)
    if journals:
        journals[-1].rewind()


def _note_state(rng):
    for kept in getattr(_open, "journals", ()):
        kept.note(rng)


def watch_unseen(fn, leaves):
    """The generators ``fn`` reaches in plain sight (np.random's, argument leaves, ``self``'s
    attributes, globals its code names) with their full states: a function whose source
    tracejit cannot read (``exec``, the REPL) runs unrewritten, so its draws are not
    intercepted - the trace would keep the first call's numbers as constants."""
    # (np.random not imported yet: NumPy 2 imports it on first use, ~10 ms; a process that
    # never draws must not pay it - unseen_draw notices the import instead)
    if _random_module() is None:
        return None
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    found = [_legacy_state(), *leaves]
    owner = getattr(fn, "__self__", None)
    if owner is not None and hasattr(owner, "__dict__"):
        found.extend(vars(owner).values())
    if code is not None:
        names = getattr(getattr(fn, "__func__", fn), "__globals__", {})
        found.extend(names.get(name) for name in code.co_names)
    watched = {}
    for value in found:
        if rng_kind(value) is not None and id(value) not in watched:
            watched[id(value)] = (value, _full_state(value))
    return list(watched.values())


def unseen_draw(watched, journal):
    """A message when a watched generator moved though the trace recorded no draw from it
    (its states are put back first), else None. ``watched`` None: np.random was not
    imported before the trace; imported by it with nothing recorded, something drew."""
    if watched is None:
        unseen = _random_module() is not None and not journal.states and (
            _drawn_since_import())
        return UNSEEN_DRAW if unseen else None
    moved = [rng for rng, state in watched
             if id(rng) not in journal.states and not _same_state(_full_state(rng), state)]
    if not moved:
        return None
    for rng, state in watched:
        put_back(("state", rng, state))
    return UNSEEN_DRAW


UNSEEN_DRAW = ("the function draws random numbers the trace cannot see (its source is "
           "unavailable: defined by exec or in the REPL?); define it in a file")


def _drawn_since_import():
    """Whether np.random's global generator, imported during the trace, has drawn: its
    state is no longer the one its seed sequence made (anything may import np.random, as
    numpy_loops' probe once did: an import alone is no draw)."""
    random = _random_module()
    bits = _legacy_state()._bit_generator
    seeds = getattr(bits, "seed_seq", None)
    if type(bits) is not random.MT19937 or type(seeds) is not random.SeedSequence:
        return True  # seeded some other way: it may have drawn
    return not _same_state(_full_state(_legacy_state()), _full_state(random.RandomState(
        random.MT19937(seeds))))


# The names code run as written (no source to rewrite) draws by: np.random's makers and
# draws, ``random`` (np.random, Python's module). (np.power's "power" is no draw there.)
_DRAW_NAMES = frozenset({*_MAKERS, *LEGACY, *GENERATOR, "random", "seed", "shuffle",
                         "permuted", "Generator", "SeedSequence", "bytes"}) - {"power"}


def unseen_code_draws(code):
    """Whether a function run as written (its source is unavailable: exec, the REPL) may
    draw random numbers: it, or a function it defines, names a draw. A generator it makes,
    ``np.random.default_rng()``, is no generator the trace can watch
    (``watch_unseen``): its numbers would be frozen into the compiled code.

    >>> unseen_code_draws(compile("rng = np.random.default_rng()", "<exec>", "exec"))
    True
    >>> unseen_code_draws(compile("y = np.power(x, 2)", "<exec>", "exec"))
    False
    """
    pending = [code]
    while pending:
        current = pending.pop()
        if _DRAW_NAMES.intersection(current.co_names):
            return True
        pending.extend(item for item in current.co_consts if isinstance(item, types.CodeType))
    return False


def _full_state(rng):
    return rng.get_state() if rng_kind(rng) == "RandomState" else rng.bit_generator.state


def _same_state(first, second):
    if isinstance(first, tuple):
        return len(first) == len(second) and all(
            np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
            for a, b in zip(first, second))
    return first == second


# --- tracing ---------------------------------------------------------------------------------
def is_maker(function):
    random = _random_module()
    return random is not None and any(function is getattr(random, name, None)
                                      for name in _MAKERS)


def draw(context, function, args, kwargs, find_path):
    """What the trace returns for ``function(*args, **kwargs)``, a call into ``np.random``:
    the real draw, recorded (``DrawOp``) and standing in the graph as an input.
    ``find_path(owner)``: where an object from outside is found again, or None."""
    location = user_location()
    where = f"{location.file}:{location.line}" if location else ""
    name = getattr(function, "__name__", "")
    random = _random_module()
    if getattr(context, "loop_indices", None):
        # Before drawing: a loop trial that drew would have moved the stream, and the
        # unrolled loop draws again from the start.
        raise Refused(f"a random draw ({name}) in the body: each trip draws, in order")
    if is_maker(function):
        return _make(context, function, args, kwargs, where)
    if function is getattr(random, "seed", None):
        return _record(context, "seed", ("legacy",), "RandomState", "seed", args, kwargs,
                       where, _legacy_state())
    owner = getattr(function, "__self__", None)
    kind = rng_kind(owner)
    if kind is not None and name == "shuffle" and getattr(owner, name, None) == function:
        return _shuffle(context, owner, args, kwargs, find_path, location)
    if kind is None or name not in _table(kind) or getattr(owner, name, None) != function:
        raise _refusal(f"{_qualified(function)} is not a draw tracejit replays "
                       f"(it replays {kind or 'np.random'} methods that return new values)",
                       location)
    made = getattr(context, "made_rngs", {}).get(id(owner))
    if owner is _legacy_state():
        rng = ("legacy",)
    elif made is not None:
        rng = ("made", made[1])
    else:
        method = getattr(context, "rng_methods", {}).get(id(function))
        path = method[1] if method is not None and method[0] is function else find_path(owner)
        if path is None:
            raise _refusal(f"{name} draws from a {kind} that compiled calls cannot find again "
                           "(pass it as an argument, or keep it in a global or attribute)",
                           location)
        rng = ("path", path)
    return _record(context, "draw", rng, kind, name, args, kwargs, where, owner)


def shuffled_arguments(context, function, args, traced_copy):
    """The arguments ``draw`` takes for ``function(*args)``: ``np.random.shuffle(idx)`` of
    an ndarray the function made (``idx = np.arange(n)``, nothing read from outside)
    shuffles its traced copy (``traced_copy``, the front end's: every later read of ``idx``
    sees it, as ``np.add.at``'s do); else ``args``. Not in a loop being captured (a draw
    there unrolls it)."""
    if getattr(function, "__name__", "") != "shuffle" or not args or type(
            args[0]) is not np.ndarray or context.is_implicit(args[0]) or id(
            args[0]) in context.implicit_candidates or getattr(context, "loop_indices", None):
        return args
    return (traced_copy(args[0]), *args[1:])


def _shuffle(context, owner, args, kwargs, find_path, location):
    """``rng.shuffle(x)`` of an array the function holds (``np.random.shuffle(idx)`` before
    its mini-batches): NumPy shuffles the first axis with exactly the draws
    ``rng.permutation(len(x))`` makes (RandomState and Generator alike, any rank), so it is
    that draw, replayed like any other, and the write ``x[...] = x[order]``. An array read
    from outside (a global, an attribute) is refused, as ``HELD[...] = v`` is."""
    array = args[0] if len(args) == 1 else None
    if kwargs or not is_traced(array) or not getattr(array, "shape", ()):
        raise _refusal("shuffle of anything but an array the function computes or is "
                       "passed (as its only argument) is not replayed", location)
    root = array.base_or_none() or array
    if context.outside_array(root) is not None:  # a global's or an attribute's: as a write
        raise _refusal("shuffle of an array read from outside writes outside state; "  # there
                       "shuffle a copy and return it", location)
    order = draw(context, owner.permutation, (array.shape[0],), {}, find_path)
    array[...] = array[order]


def _qualified(function):
    return getattr(function, "__qualname__", getattr(function, "__name__", repr(function)))


def _refusal(message, location):
    prefix = f"{location.file}:{location.line}: " if location else ""
    source = f"\n    {location.source}" if location and location.source else ""
    return TraceError(f"{prefix}{message}{source}")


def _make(context, function, args, kwargs, where):
    seed = kwargs.get("seed", args[0] if args else None)
    argument = _seed_argument(context, seed)
    if len(args) + len(kwargs) > 1 or (kwargs and "seed" not in kwargs) or not (
            seed is None or type(seed) is int or argument is not None):
        raise _refusal(f"np.random.{function.__name__} with a seed other than an int or None "
                       "is not replayed", user_location())
    if argument is not None:
        seed, recorded = _seed_value(seed), argument
    else:
        recorded = seed
    rng = function(seed)
    ops = _ops(context)
    made = getattr(context, "made_rngs", None)
    if made is None:
        made = context.made_rngs = {}
    made[id(rng)] = (rng, len(ops))  # (kept alive: the id stays this generator's)
    ops.append((DrawOp("make", (), rng_kind(rng), function.__name__,
                       () if seed is None else (recorded,), (), where), None))
    return rng


def _ops(context):
    ops = getattr(context, "draw_ops", None)
    if ops is None:
        ops = context.draw_ops = []
    return ops


def _record(context, kind, rng_ref, rng_type, name, args, kwargs, where, rng):
    location = user_location()
    if "out" in kwargs:
        raise _refusal(f"{name}(..., out=...) writes into an array; draw a new one", location)
    seeds = {}  # leaf -> this call's value, for a seed argument
    argument = _seed_argument(context, args[0]) if kind == "seed" and len(args) == 1 else None
    if argument is not None:
        recorded_args, seeds[argument.leaf] = (argument,), _seed_value(args[0])
    else:
        recorded_args = tuple(_recorded(arg, name, location) for arg in args)
    recorded_kwargs = tuple((key, _recorded(value, name, location))
                            for key, value in kwargs.items())
    for key, _ in recorded_kwargs:
        if key not in _KEYWORDS:
            raise _refusal(f"{name}(..., {key}=...) is not replayed", location)
    op = DrawOp(kind, rng_ref, rng_type, name, recorded_args, recorded_kwargs, where)
    call_args = _concrete(recorded_args, context.symbol_values(), seeds)
    call_kwargs = {key: _concrete(value, context.symbol_values())
                   for key, value in recorded_kwargs}
    if rng_ref[0] != "made":
        _note_state(rng)
    value = getattr(rng, name)(*call_args, **call_kwargs)
    if kind != "draw":
        _ops(context).append((op, None))
        return value
    shape = _symbolic_shape(op, args, kwargs, value)
    if shape is None:
        raise _refusal(f"{name}: the shape of its draw does not follow from its size",
                       location)
    array = np.asarray(value)
    if array.dtype not in COMPILED_DTYPES:
        raise _refusal(f"{name} draws {array.dtype} values; compiled code holds bool, int32, "
                       "int64, float32 and float64", location)
    if isinstance(value, np.ndarray):
        tracer = context.add_input(value, shape)
    else:  # a Python or NumPy number (np.random.uniform(), rng.integers(5))
        tracer = context.add_input(value, (), weak=type(value) in (int, float))
    _ops(context).append((op, tracer.ir_var))
    return tracer


def _seed_argument(context, value):
    """``ArgumentNumber`` when ``value`` is a number argument traced as a run-time input
    (``dynamic="auto"`` made it one: the caller passed another value), else None."""
    if not is_traced(value) or getattr(value, "shape", ()) != () or (
            value.dtype.kind not in "iu"):
        return None
    leaf = getattr(context, "number_leaves", {}).get(getattr(value.ir_var, "name", None))
    return None if leaf is None else ArgumentNumber(leaf)


def _seed_value(value):
    return np.asarray(value.value).item()


def _recorded(value, name, location):
    """An argument as the draw program keeps it: dims as expressions, traced scalars as
    their values (under a guard); a traced array is refused."""
    if isinstance(value, SymInt):
        return value.expr
    if is_traced(value):
        if getattr(value, "shape", ()) != ():
            raise _refusal(f"{name} draws random numbers with a parameter computed in the "
                           "function (an array); compiled calls draw before computing "
                           "anything. Draw standard values and scale them (loc + scale * "
                           "np.random.standard_normal(size))", location)
        # a number computed in the function (keep_prob from an argument): its value here,
        # under a guard (another value takes a side exit, and the draws are put back)
        return operator.index(value) if value.dtype.kind in "iub" else float(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_recorded(item, name, location) for item in value)
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(
            value, (np.generic, int, float, bool))):
        return np.dtype(value)
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if value is None or type(value) in (bool, int, float, str):
        return value
    raise _refusal(f"{name} draws with an argument of type {type(value).__name__}; compiled "
                   "calls replay draws with numbers, sizes and dtypes only", location)


def _size_of(op, args, kwargs):
    """The size argument of a draw as the function passed it (None: one value, or the
    parameters' broadcast)."""
    where = _table(op.rng_type)[op.name]
    if where == DIMS:
        return tuple(args)
    if where == LENGTH:
        return (args[0],) if args and (isinstance(args[0], SymInt) or type(args[0]) is int
                                       ) else None
    if "size" in kwargs:
        return kwargs["size"]
    return args[where] if len(args) > where else None


def _symbolic_shape(op, args, kwargs, value):
    """The draw's shape with the function's symbolic dims (``x.shape``'s, from the size it
    was given), or None when the size does not give the shape drawn."""
    drawn = np.shape(value)
    size = _size_of(op, args, kwargs)
    if size is None:
        dims = any(isinstance(item, SymInt) for item in _flat((args, tuple(kwargs.values()))))
        return None if dims else drawn
    size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    if len(size) != len(drawn):
        return None
    for dim, concrete in zip(size, drawn):
        if (dim.value if isinstance(dim, SymInt) else operator.index(dim)) != concrete:
            return None
    return size


def _flat(value):
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _flat(item)
    else:
        yield value


def finish(context, graph):
    """The trace's ``DrawProgram`` and, per graph input it draws, the number of its value
    among the program's outputs: ``(program, {input index: output number})``; (None, {})
    when the function drew nothing."""
    recorded = getattr(context, "draw_ops", None)
    if not recorded:
        return None, {}
    positions = {var.name: index for index, var in enumerate(graph.inputs)}
    drawn, number = {}, 0
    for op, var in recorded:
        if op.kind == "draw":
            if var.name not in positions:
                raise TraceError(f"{op.location}: the value of {op.name} is no input of the "
                                 "graph (an internal error)")
            drawn[positions[var.name]] = number
            number += 1
    return DrawProgram(op for op, _ in recorded), drawn
