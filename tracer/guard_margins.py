"""Guard margins: a decision compiled code takes is the decision NumPy takes.

Compiled values may differ from NumPy's in the last bits: our sums run in another order
(float32 accumulates in float64), and the math library is a few ulp from NumPy's. A guard
that compares such a value (``x.sum() > 0``, ``int(x.sum())``, ``np.tanh(x) == 1.0``) could
then take the branch eager would not.

``add_guard_margins`` walks the backward slice of each value guard's predicate and emits,
with ordinary primitives, a *bound* for every value in it: a float64 array ``E`` with
``|compiled - numpy| <= E`` elementwise (for bools: a mask of elements that may differ).
Each guard whose predicate carries a bound gets a companion ``margin`` guard (expected
False) on "the margin is inside the bound": when it fails, the call runs eagerly and
eager decides. Values computed exactly as NumPy computes them (inputs, IEEE-exact
operations on exact operands, max/min, shapes, integers) carry no bound, so guards on
them cost nothing extra.

    %1: f32[] = sum(%0; axes=(0,), keepdims=False)
    ...  bound of %1: (k_numpy u32 + k_ours u64) * sum(|%0|) + u32 |%1| + 2 n eta
    %9: bool[] = logical_not(logical_or(bound <= 0, |%1 - 0| > bound))   (spelt out)
    guard margin(%9) == False  # model.py:12 ...: 'if x.sum() > 0:'
    %2: bool[] = greater(%1, 0)
    guard bool(%2) == True  # model.py:12 ...: 'if x.sum() > 0:'

The error model is one rule per primitive, in ``tracejit.tracer.margin_rules.RULES``
(STYLE rule 1): ``rule(slice, eqn, bounds) -> bound or None`` (None: exact), where
``slice`` is this module's ``_Slice``, the bound builder. ``UNBOUNDED`` there lists the
primitives with no error model: exact on exact operands (their compiled code is NumPy's to
the bit), an infinite bound otherwise, so a guard they feed always lets eager decide. A
primitive in neither table is never assumed exact. Margin equations are placed before
the predicate's equation, so the scheduler (which orders kernels by their roots) checks
the margin guard first.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import numpy as np

from .dims import DimExpr
from .ir import Eqn, Guard, Literal, Var, infer_aval, shape_context
from .margin_rules import (
    ALWAYS,
    BOOL,
    F64,
    INF,
    INFLATE,
    RULES,
    TANH_SATURATED,
    UNBOUNDED,
    Unbounded,
    decided_over_indices,
    exact_integers,
    integral_magnitude,
    is_bool,
    is_float,
    may_be_infinite,
    number,
    smallest_subnormal,
    unit_roundoff,
)
from .ops import (
    abs_p,
    add_p,
    broadcast_to_p,
    cast_p,
    ceil_p,
    floor_p,
    full_p,
    greater_p,
    less_equal_p,
    logical_and_p,
    logical_not_p,
    logical_or_p,
    maximum_p,
    minimum_p,
    multiply_p,
    not_equal_p,
    subtract_p,
    true_divide_p,
    where_p,
)


# --- emitting bound equations -------------------------------------------------------------
class _Emitter:
    """Builds equations into ``self.pending`` with fresh var names; folds all-literal ones."""

    def __init__(self, graph):
        self.context = shape_context(graph)
        self.next_number = 1 + max(
            (int(var.name[1:]) for var in defined_vars(graph) if var.name[1:].isdigit()),
            default=-1)
        self.pending = []
        self.producers = {}  # every equation emitted here, by its output's name

    def depends_on(self, atoms, var):
        """Does one of ``atoms`` (emitted here) read ``var``, directly or through emitted
        values? One search for all of them: a search per atom was quadratic in the bound
        equations of a long program (an unrolled training loop's guards)."""
        stack, seen = list(atoms), set()
        while stack:
            current = stack.pop()
            if not isinstance(current, Var) or current.name in seen:
                continue
            if current.name == var.name:
                return True
            seen.add(current.name)
            eqn = self.producers.get(current.name)
            if eqn is not None:
                stack.extend(eqn.inputs)
        return False

    def emit(self, prim, *inputs, **params):
        if prim.kind == "pointwise" and all(isinstance(atom, Literal) and not isinstance(
                atom.value, DimExpr) for atom in inputs):
            with np.errstate(all="ignore"):
                value = prim.impl(*(atom.value for atom in inputs), **params)
            return Literal.of(np.asarray(value)[()])
        eqn = self.equation(prim, inputs, params)
        self.pending.append(eqn)
        self.producers[eqn.out.name] = eqn
        return eqn.out

    def equation(self, prim, inputs, params):
        """``prim`` on ``inputs`` as an equation with a fresh result, not emitted (a
        stand-in the checks reason about: ``discontinuities._hoisted``)."""
        aval = infer_aval(prim, inputs, params, self.context)
        out = Var(f"%{self.next_number}", aval)
        self.next_number += 1
        return Eqn(prim, tuple(inputs), tuple(sorted(params.items())), out)

    # float64 arithmetic on atoms (None is not accepted here)
    def f64(self, atom):
        if isinstance(atom, Literal) and not isinstance(atom.value, DimExpr):
            return Literal.of(np.float64(atom.value))
        return atom if atom.aval.dtype == F64 else self.emit(cast_p, atom, dtype=F64)

    def add(self, a, b):
        return self.emit(add_p, self.f64(a), self.f64(b))

    def sub(self, a, b):
        return self.emit(subtract_p, self.f64(a), self.f64(b))

    def mul(self, a, b):
        return self.emit(multiply_p, self.f64(a), self.f64(b))

    def div(self, a, b):
        return self.emit(true_divide_p, self.f64(a), self.f64(b))

    def abs(self, a):
        return self.emit(abs_p, self.f64(a))

    def maximum(self, a, b):
        return self.emit(maximum_p, self.f64(a), self.f64(b))

    def where(self, condition, a, b):
        return self.emit(where_p, condition, self.f64(a), self.f64(b))

    def greater(self, a, b):
        return self.emit(greater_p, self.f64(a), self.f64(b))

    def not_(self, a):
        return self.emit(logical_not_p, a)

    def or_(self, a, b):
        return self.emit(logical_or_p, a, b)

    def and_(self, a, b):
        return self.emit(logical_and_p, a, b)


def defined_vars(graph):
    """Every variable ``graph`` defines, in the loop bodies in it too (at any depth): fresh
    names start past all of them."""
    yield from graph.inputs
    for var, _ in graph.constants:
        yield var
    for item in graph.body:
        if isinstance(item, Eqn):
            yield item.out
            body = item.params_dict.get("body") if item.prim.name == "loop" else None
            if body is not None:
                yield from defined_vars(body)


# np.log(0) is -inf on both sides (``margin_rules._exact_outside_domain``): an HMM's log
# of a transition matrix with zeros holds infinities as a table started at -inf does.
LOGARITHMS = ("log", "log2", "log10", "log1p")
# Never ±inf, whatever their operands (tanh(inf) is 1, sin(inf) NaN).
NEVER_INFINITE = ("tanh", "sin", "cos", "sign")


def _may_hold_infinities(graph, seeds=()):
    """Names of the float values an infinity written in the function may reach: constants
    holding one, ``np.full(..., -np.inf)``, an infinite literal operand, a logarithm (of
    0), and whatever float value is computed from those (a log-space table started at
    -inf). The add rule (``margin_rules._add``) checks those for an exact infinity on
    both sides; values an overflow made infinite are not followed (their bound stays as
    it is). ``seeds``: names that may hold one already (a loop body's inputs:
    ``loop_body_infinities``)."""
    infinite = {var.name for var, constant in graph.constants
                if np.asarray(constant.data).dtype.kind == "f"
                and np.isinf(np.asarray(constant.data)).any()} | set(seeds)

    nonpositive, unit = set(), set()  # -|x|; exp of that, in [0, 1]
    producers = {}
    for eqn in graph.equations:
        producers[eqn.out.name] = eqn
        if eqn.out.aval.dtype.kind != "f":
            continue
        name, first = eqn.prim.name, eqn.inputs[0] if eqn.inputs else None
        if name == "neg" and isinstance(first, Var) and getattr(
                producers.get(first.name), "prim", None) is abs_p:
            nonpositive.add(eqn.out.name)
        if name in NEVER_INFINITE or (name == "exp" and getattr(first, "name", None) in
                                      nonpositive) or (
                name == "log1p" and getattr(first, "name", None) in unit):
            # log1p(exp(-|x - y|)) in logaddexp, softplus, log-sigmoid: finite whatever
            # reaches x (an isinf check of it would inline the math in the margin kernel)
            if name == "exp":
                unit.add(eqn.out.name)
            continue
        value = eqn.params_dict.get("value") if name == "full" else None
        if any(may_be_infinite(atom, infinite) for atom in eqn.inputs) or name in LOGARITHMS or (
                value is not None and np.isinf(np.asarray(value, np.float64)).any()):
            infinite.add(eqn.out.name)
    return infinite


def loop_body_infinities(body, operands, outer, num_carry):
    """What ``_may_hold_infinities`` names in a loop ``body`` whose operands are
    ``operands`` (the loop equation's inputs, bounded by the slice ``outer``): its inputs
    reached by an infinity outside, and the carried ones its own trips may make infinite
    (a log-space table's row carried from trip to trip)."""
    seeds = {var.name for var, operand in zip(body.inputs, operands)
             if may_be_infinite(operand, outer.infinite)}
    while True:
        infinite = _may_hold_infinities(body, seeds)
        more = {var.name for var, out in zip(body.inputs[:num_carry], body.outputs)
                if isinstance(out, Var) and out.name in infinite} - seeds
        if not more:
            return infinite
        seeds |= more


# --- the slice: bounds of the values a guard reads ----------------------------------------
class _Slice:
    """Bounds of the graph's values, computed on demand (memoized) from ``RULES``.
    ``cheap``: contractions take a bound costing no contraction (``margin_rules``).
    ``input_bounds``: bounds of some of the graph's inputs by name (a loop body's carried
    values: ``tracejit.tracer.loop_bounds``); other inputs are exact."""

    def __init__(self, graph, cheap=False, input_bounds=None):
        self.cheap = cheap
        self.emitter = _Emitter(graph)
        self.producers = {eqn.out.name: eqn for eqn in graph.equations}
        self.bounds = dict(input_bounds or {})
        self.magnitudes = {}  # values known to be integers: a bound on |value|
        for var, constant in graph.constants:
            data = np.asarray(constant.data)
            if data.dtype.kind not in "biuf":
                continue
            data = data.astype(np.float64)
            if data.size == 0 or np.all(np.isfinite(data) & (data == np.floor(data))):
                self.magnitudes[var.name] = float(np.max(np.abs(data), initial=0.0))
        self.ranges = graph.ranges
        self.graph = graph

    @cached_property
    def infinite(self):
        """What ``_may_hold_infinities`` names: computed when an add rule first asks."""
        return _may_hold_infinities(self.graph)

    def __getattr__(self, name):  # the emitter's arithmetic: slice.add(a, b), ...
        return getattr(self.emitter, name)

    def bound(self, atom):
        """None (exact), or a float64 bound (bool: an ambiguity mask) of ``atom``."""
        if isinstance(atom, Literal):
            return None
        if atom.name not in self.producers:  # inputs and constants are what NumPy reads
            return self.bounds.get(atom.name)
        stack = [atom.name]
        while stack:  # iterative post-order: deep graphs do not recurse
            name = stack[-1]
            if name in self.bounds:
                stack.pop()
                continue
            eqn = self.producers[name]
            missing = [a.name for a in eqn.inputs if isinstance(a, Var)
                       and a.name in self.producers and a.name not in self.bounds]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.bounds[name] = self._apply(eqn)
        return self.bounds[atom.name]

    def _apply(self, eqn):
        operands = [None if isinstance(a, Literal) else self.bounds.get(a.name)
                    for a in eqn.inputs]
        name = eqn.prim.name
        if all(bound is None for bound in operands) and self._exact_integers(eqn):
            return None
        if decided_over_indices(self, eqn):  # argmax(window) >= window.size: False
            return None
        if any(bound is INF for bound in operands):
            # Nothing finite follows; and INF is a scalar, which rules that reduce or
            # index their operand's bound (sum over axis 0 of a loop's result) cannot take.
            return self.unbounded(eqn.out)
        rule = RULES.get(name)
        if rule is None:
            if name in UNBOUNDED and all(b is None for b in operands):
                return None
            return self.unbounded(eqn.out)
        try:
            return rule(self, eqn, operands)
        except Unbounded:
            return self.unbounded(eqn.out)

    def _exact_integers(self, eqn):
        """Exact operands whose result is a float count (integers, small enough to be exact
        in any order): no bound, so a count compared with 0 is decided."""
        try:
            magnitude = integral_magnitude(self, eqn, self.magnitudes)
        except Unbounded:
            magnitude = None
        if magnitude is not None:
            self.magnitudes[eqn.out.name] = magnitude
        return magnitude is not None and is_float(eqn.out) and exact_integers(
            eqn.out.aval.dtype, magnitude)

    def unbounded(self, var):
        return ALWAYS if is_bool(var) else INF

    # --- shared pieces of rules ---------------------------------------------------------
    def rounding(self, var, ulps=1.0, absolute=0.0, underflows=True):
        """The rounding error of one result ``var`` on our side and NumPy's (each within
        ``ulps`` ulp, each also at most eta where the result is subnormal, unless the
        operation never ``underflows``: a sum that is subnormal is exact), plus
        ``absolute``."""
        dtype = var.aval.dtype
        u, eta = unit_roundoff(dtype), smallest_subnormal(dtype) if underflows else 0.0
        if u == 0.0:
            return None if absolute == 0.0 else number(absolute)
        term = self.mul(self.abs(var), number(4.0 * ulps * u))
        floor = 2.0 * ulps * eta + absolute
        return term if floor == 0.0 else self.add(term, number(floor))

    def plus(self, *bounds):
        total = None
        for bound in bounds:
            if bound is not None:
                total = bound if total is None else self.add(total, bound)
        return total

    def scaled(self, bound, factor):
        return None if bound is None else self.mul(bound, number(factor))

    def undecided(self, distance, bound):
        """``bound > 0`` and not ``distance > bound``: the comparison could go either way
        (NaN anywhere counts as undecided)."""
        exact = self.emit(less_equal_p, bound, number(0.0))
        apart = self.greater(distance, self.mul(bound, number(INFLATE)))
        return self.not_(self.or_(exact, apart))

    def truth(self, atom, bound):
        """The ambiguity of ``bool(atom)`` elementwise."""
        if bound is None:
            return None
        if is_bool(atom):
            return bound
        return self.undecided(self.abs(atom), bound)

    def mask(self, bound):
        """A numeric bound as a mask of elements that may differ."""
        return self.not_(self.emit(less_equal_p, bound, number(0.0)))

    def as_number(self, atom, bound):
        """A bound of ``atom`` as a float64 bound (a bool's ambiguity is a difference of 1)."""
        if bound is None or not is_bool(atom):
            return bound
        return self.f64(bound)

    def fit(self, bound, shape):
        """``bound`` as a bound of shape ``shape`` (scalars and full shapes stay)."""
        if bound is None or tuple(bound.aval.shape) in ((), tuple(shape)):
            return bound
        return self.emit(broadcast_to_p, bound, shape=tuple(shape))

    def spread(self, bound, shape):
        """``bound`` at every element of ``shape``, scalars included: what a reduction rule
        reduces (a scalar has no axes to reduce; unbounded operands give scalar bounds)."""
        if bound is None or tuple(bound.aval.shape) == tuple(shape):
            return bound
        return self.emit(broadcast_to_p, bound, shape=tuple(shape))


# --- guards ------------------------------------------------------------------------------
# float()/item() pin a value, they decide nothing: the expected value is NumPy's own (the
# trace computed it) and a call passes only when ours equals it, so the value flows on
# within the bound of NumPy's. (A Python comparison on the pinned float is not re-checked.)
UNDECIDING = ("float", "item", "margin")


def _margin(ctx, guard, bound):
    """The mask "``guard`` could decide differently from NumPy", or None."""
    value = guard.predicate
    if guard.convert in ("bool", "margin"):
        return ctx.truth(value, bound)
    if is_bool(value):
        return bound
    if not is_float(value):
        return ctx.mask(bound)
    # int()/index: truncation jumps at every nonzero integer; how far is the nearest?
    magnitude = ctx.abs(value)
    below_one = ctx.sub(number(1.0), magnitude)
    to_floor = ctx.sub(magnitude, ctx.emit(floor_p, magnitude))
    to_ceil = ctx.sub(ctx.emit(ceil_p, magnitude), magnitude)
    distance = ctx.where(ctx.greater(number(1.0), magnitude), below_one,
                         ctx.emit(minimum_p, to_floor, to_ceil))
    return ctx.undecided(distance, bound)


def _has_margin(body, index):
    """Is the guard at ``index`` protected already (the pass ran on this graph)?"""
    previous = body[index - 1] if index > 0 else None
    return isinstance(previous, Guard) and previous.convert == "margin"


def add_guard_margins(graph, ctx=None, modelled_only=False):
    """Give every value guard whose predicate may differ from NumPy's a margin guard, placed
    right before it. The margin's equations go before the predicate's equation when they
    do not read the predicate (comparisons: ``|a - b|`` against the operands' bounds), so
    its kernel runs first; else right after it, reading the predicate in the margin's own
    kernel (lowering checks such a guard after its margin, and the read keeps the
    predicate's buffer live until then). ``ctx``: the bound builder to use (a loop body's,
    which knows its carried bounds: ``loop_bounds``); ``modelled_only``: no margin where
    the bound has no model (the body's own pass, compiled alone, gives those theirs)."""
    ctx = _Slice(graph) if ctx is None else ctx
    body = list(graph.body)
    position = {item.out.name: index for index, item in enumerate(body)
                if isinstance(item, Eqn)}
    inserts = {}
    margins = {}
    guards = [(index, item) for index, item in enumerate(body) if isinstance(item, Guard)
              and item.convert not in UNDECIDING and isinstance(item.predicate, Var)
              and item.predicate.name in position and not _has_margin(body, index)]
    guards.sort(key=lambda pair: position[pair[1].predicate.name])
    for index, guard in guards:
        predicate = guard.predicate
        key = (predicate.name, guard.convert)
        if key not in margins:
            bound = ctx.bound(predicate)
            if modelled_only and (bound is INF or bound is ALWAYS):
                bound = None
            ambiguous = None if bound is None else _margin(ctx, guard, bound)
            if isinstance(ambiguous, Literal):
                ambiguous = None if not bool(ambiguous.value) else ctx.emit(
                    full_p, shape=tuple(predicate.aval.shape), value=True, dtype=BOOL)
            at = position[predicate.name]
            if ctx.emitter.depends_on([eqn.out for eqn in ctx.emitter.pending], predicate):
                at += 1
                if ambiguous is not None:  # read in the margin's kernel (NaN: undecided)
                    ambiguous = ctx.or_(ambiguous, ctx.emit(not_equal_p, predicate, predicate))
            # Bounds emitted here may serve later guards too: they go in even without a
            # margin (dead code elimination drops the unused ones).
            inserts.setdefault(at, []).extend(ctx.emitter.pending)
            ctx.emitter.pending = []
            margins[key] = ambiguous
        if margins[key] is not None:
            inserts.setdefault(index, []).append(
                Guard(margins[key], "margin", False, guard.location))
    if not inserts:
        return graph
    new_body = []
    for index, item in enumerate(body):
        new_body.extend(inserts.get(index, ()))
        new_body.append(item)
    return replace(graph, body=tuple(new_body))


__all__ = ["RULES", "TANH_SATURATED", "UNBOUNDED", "add_guard_margins", "unit_roundoff"]
