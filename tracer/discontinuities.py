"""Discontinuity checks: a whole-unit jump NumPy does not take is a wrong answer.

Compiled sums and math round differently from NumPy in the last bits (``np.full(45,
0.1).sum()`` is 4.5 compiled and 4.499999999999998 in NumPy). Where that value flows on
through continuous operations the difference stays in the last bits; where it meets an
operation whose result *jumps* (``np.floor``, ``astype(int)``, ``//``, ``%``, ``np.sign``,
a comparison used as a mask or counted, ``argmax``), it becomes a whole unit, a flipped
mask element or another index::

    np.floor(x.mean() * 10)            # 1.0 compiled, NumPy 0.0
    (x.sum(axis=1) > 4.5).sum()        # 3 compiled, NumPy 0

``check_discontinuities`` gives every such equation whose operands carry a rounding bound
(``tracejit.tracer.guard_margins``' bound builder, rules in ``margin_rules``) a ``margin``
guard (expected False) on "some element lies within its bound of a jump": when it fails
the call runs eagerly, so NumPy decides, as a guard margin does for an ``if``. Once the
check passed, the equation's result is NumPy's exactly, so its consumers see no bound.

Why checks and not NumPy's summation order: reproducing NumPy's pairwise sum would make a
contiguous 1-D float64 ``sum`` bit-equal, but not an axis reduction of a 2-D array, a float32
sum (ours accumulates in float64), a mean (a reciprocal multiply), a matmul (BLAS's order)
or a math function, so it cannot make the class correct; a check can, at the cost of a few
fused pointwise operations and one ``any`` per discontinuous equation. Contractions get a
cheap bound here (``_Slice(cheap=True)``: a row's L1 norm times a column's largest
magnitude, not ``|A| @ |B|``), so the check never costs another matmul.
On ordinary data the checks hold (elements are far from jumps compared with ~1e-13
relative), so calls stay compiled; ``tests/tracer/test_discontinuities.py`` checks both.

Not checked (the difference from NumPy stays possible there):

* reverse mode's own masks (``Graph.gradient_vars``: relu's ``h > 0``, max's winners): they
  pick a one-sided derivative at a kink, and in float32 a check on them would fail on
  every training step;
* values downstream of a float32 matmul of inexact operands: the worst-case bound is ~K
  u32 of the magnitudes after one layer and grows with each, so the check would fail on
  every call (a float32 classifier's ``argmax`` would always run eagerly); float32 sums,
  means and elementwise math are checked. A float32 matmul of exact operands is exact
  here where it is NumPy's matmul of operands NumPy holds C-ordered
  (``margin_rules._numpy_matmul``: ``codegen/numpy_products.py`` makes NumPy's BLAS call
  for a product a decision reads), else (an ``einsum``, ``TRACEJIT_GEMM=own``) it takes
  one layer's bound; values downstream of either are checked. Inside a loop body every
  float32 product takes its bound (``loop_bounds``);
* values downstream of a convolution: a check reading the product would keep its fused
  epilogue (bias, relu, masks) off the register tiles;
* operands with no error model (float ``prod``; a loop's results unless the loop carries
  their bound: ``tracejit.tracer.loop_bounds``, which also checks the jumps inside a loop
  body on the values it carries, with this module's rules, and sends a call whose loop
  body jumps on a value with no model to eager). A jump in a body that reads a value
  computed before the loop (through element picks: ``s[i]``) is also checked on that
  whole value, before the loop (``_hoisted``).

Counts held in floats (a mask cast and summed, cumsum's product with a triangle of ones)
are integers, exact in any order below 2**53 (2**24 in float32): they carry no bound
(``margin_rules.integral_magnitude``), so ``counts > 0`` is no check.

Equations whose only readers are ``bool``/``int``/``index`` guards are left to the guard
margins already on those guards. ``np.where(c, a, b)`` reading a comparison (and nothing
else reading it) is checked only where a flip would move the result beyond rounding:
``np.where(h > 0, h, 0.01 * h)`` meets at the threshold, ``np.where(s > 0, 1, -1)`` jumps.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> from tracejit.tracer.passes import optimize
>>> t = trace(lambda x: np.floor(x.sum() * 10), np.full(45, 0.1))
>>> [g.convert for g in optimize(t.graph).guards]
['margin']
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .dims import DimExpr
from .guard_margins import _Slice
from .ir import Eqn, Guard, Literal, Var
from .margin_rules import (
    ALWAYS,
    INF,
    INFLATE,
    RULES,
    extreme_ambiguity,
    is_bool,
    is_float,
    number,
    unit_roundoff,
)
from .ops import (
    any_p,
    equal_p,
    floor_p,
    full_p,
    iota_p,
    isfinite_p,
    less_equal_p,
    not_equal_p,
    reshape_p,
)

F64_ROUNDOFF = unit_roundoff(np.float64)


def _jump(ctx, eqn, bounds):
    """floor, ceil, rint, trunc: the rule's bound is the jump inside the operand's bound."""
    return ctx.mask(RULES[eqn.prim.name](ctx, eqn, bounds)), None


def _cast(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    target = eqn.out.aval.dtype
    if target.kind == "f" or e is None:
        return None  # a float target rounds; it does not jump
    if is_bool(eqn.out):
        return ctx.truth(x, e), None
    # (where x's bound is 0 it is NumPy's value: NaN, too, truncates alike on both sides)
    return ctx.and_(ctx.mask(RULES["cast"](ctx, eqn, bounds)), ctx.mask(e)), None


def _compare(ctx, eqn, bounds):
    group = _extremum_equality(ctx, eqn)
    if group is not None:
        return group, None
    undecided = RULES[eqn.prim.name](ctx, eqn, bounds)
    itself = _self_pairs(ctx, eqn)
    if itself is not None and not isinstance(undecided, Literal):
        undecided = ctx.and_(undecided, ctx.not_(ctx.fit(itself, eqn.out.aval.shape)))
    selects = _selects(ctx, eqn)
    if not selects:
        return undecided, None
    if all(_meets_at_threshold(ctx, eqn, select) for select in selects):
        return None  # relu's where(x <= 0, 0, x): a flip moves the result by rounding only
    # Only np.where reads it: a flip there moves the result by |a - b|, which is rounding
    # when the branches meet at the threshold (np.where(h > 0, h, 0.01 * h), a clip); only
    # a flip between branches apart (np.where(s > 0, 1, -1)) jumps. Its bound stays on for
    # the where's rule, and the check goes before the last where (it reads their branches).
    if len({tuple(select.out.aval.shape) for select in selects}) > 1:
        return undecided, None
    _split(ctx)
    jumps = None
    for select in selects:
        _, a, b = select.inputs
        ea, eb = (_modelled_part(ctx, ctx.as_number(
            atom, ctx.bound(atom) if isinstance(atom, Var) else None)) or number(0.0)
            for atom in (a, b))
        u = unit_roundoff(select.out.aval.dtype)  # (not the where's result: not yet there)
        meet = ctx.add(ctx.mul(ctx.add(ea, eb), number(INFLATE)),
                       ctx.mul(ctx.add(ctx.abs(a), ctx.abs(b)), number(4 * u)))
        # (a gap that is not finite is never rounding: with a branch infinite, meet is too,
        # and np.where(pre > 0, scores, -np.inf) flipped unchecked)
        gap = ctx.abs(ctx.sub(a, b))
        apart = ctx.not_(ctx.and_(ctx.emit(isfinite_p, gap), ctx.emit(less_equal_p, gap, meet)))
        jump = ctx.and_(ctx.fit(undecided, select.out.aval.shape), apart)
        jumps = jump if jumps is None else ctx.or_(jumps, jump)
    return jumps, undecided, max(ctx.position[select.out.name] for select in selects)


def _modelled_part(ctx, bound):
    """A branch's bound where its error has a model, None or 0 where it has none. A branch
    with no model (downstream of a float32 product of inexact values: an infinite bound)
    is NumPy's to rounding in practice, not to any distance: its infinite bound taken
    as is made every flip look like rounding, so ``np.where(pre > 0, d @ w.T, 0)`` with
    ``pre`` an einsum of exact values (bounded, checkable) was never checked and flipped
    63,423 of 131,072 elements where ``pre`` sums to exact zeros, each off by ``|d @ w.T|``
    (``tests/tracer/test_unmodelled_branches.py``)."""
    if bound is None or _unbounded(bound):
        return None
    if isinstance(bound, Literal):
        return bound
    return ctx.where(ctx.emit(isfinite_p, bound), bound, number(0.0))


def _element_axes(ctx, atom):
    """``(source, axes)``: ``atom`` is ``source`` reshaped only by unit dims, its dim ``k``
    at ``axes[k]`` of ``atom`` (None where ``source``'s dim is a unit); else None."""
    source = atom
    producer = ctx.producers.get(atom.name) if isinstance(atom, Var) else None
    if producer is not None and producer.prim.name == "reshape":
        source = producer.inputs[0]
    if not isinstance(source, Var):
        return None
    shape, axes, position = tuple(atom.aval.shape), [], 0
    for dim in source.aval.shape:
        if isinstance(dim, int) and dim == 1:
            axes.append(None)
            continue
        while position < len(shape) and isinstance(shape[position], int) and (
                shape[position] == 1) and shape[position] != dim:
            position += 1
        if position == len(shape) or shape[position] != dim:
            return None
        axes.append(position)
        position += 1
    if any(not (isinstance(dim, int) and dim == 1) for dim in shape[position:]):
        return None
    return source, axes


def _self_pairs(ctx, eqn):
    """Where a comparison reads the same element on both sides (``a[:, None] < a[None, :]``,
    argsort's ranks, on the diagonal) it is decided: a mask of those positions, or None."""
    a, b = eqn.inputs
    left, right = _element_axes(ctx, a), _element_axes(ctx, b)
    if left is None or right is None or left[0] != right[0]:
        return None
    rank = len(eqn.out.aval.shape)
    mask = None
    for dim, at_a, at_b in zip(left[0].aval.shape, left[1], right[1]):
        if at_a is None:
            continue
        at_a += rank - len(a.aval.shape)
        at_b += rank - len(b.aval.shape)
        if at_a == at_b:
            continue
        index = ctx.emit(iota_p, length=dim, dtype=np.dtype(np.int64))
        along = [ctx.emit(reshape_p, index, shape=tuple(
            dim if axis == at else 1 for axis in range(rank))) for at in (at_a, at_b)]
        same = ctx.emit(equal_p, *along)
        mask = same if mask is None else ctx.and_(mask, same)
    if mask is None:  # the same element everywhere
        return ctx.emit(full_p, shape=(), value=True, dtype=np.dtype(np.bool_))
    return mask


def _split(ctx):
    """What was emitted so far reads only values defined before the equation: it goes
    there. What follows goes later (before the last where), and the bounds it memoizes
    are forgotten afterwards, so no check placed earlier reads them."""
    ctx.early.extend(ctx.emitter.pending)
    ctx.emitter.pending = []
    ctx.snapshot = dict(ctx.bounds)


def _meets_at_threshold(ctx, compare, select):
    """Whether ``select`` (``np.where(x > t, ...)`` on ``compare``) picks between ``x``
    and ``t`` themselves, or ``x`` and ``k * x`` at ``t == 0``: equal where the comparison
    flips, so a flip changes the result by no more than ``x``'s own rounding (relu as
    ``np.where(x <= 0, 0, x)``, leaky relu), and no check is needed."""
    x, t = compare.inputs
    branches = select.inputs[1:]
    if {_key(atom) for atom in branches} == {_key(x), _key(t)}:
        return True
    scaled = [atom for atom in branches if _key(atom) != _key(x)]
    return len(scaled) == 1 and isinstance(t, Literal) and t.value == 0 and any(
        _key(atom) == _key(x) for atom in branches) and _scales(ctx, scaled[0], x)


def _key(atom):
    if isinstance(atom, Var):
        return ("var", atom.name)
    if isinstance(atom.value, DimExpr):  # a symbolic dim (np.pad's widths): no number
        return ("dim", str(atom.value))
    return ("literal", float(atom.value))


def _scales(ctx, atom, x):
    producer = ctx.producers.get(atom.name) if isinstance(atom, Var) else None
    return producer is not None and producer.prim.name == "multiply" and any(
        _key(operand) == _key(x) for operand in producer.inputs) and any(
        isinstance(operand, Literal) for operand in producer.inputs)


def _selects(ctx, eqn):
    """The np.where equations reading ``eqn``'s result, if they are its only readers and
    read it only as their condition (else None)."""
    readers = ctx.readers.get(eqn.out.name, ())
    if not readers or not all(isinstance(reader, Eqn) and reader.prim.name == "where" and
                              reader.inputs[0] == eqn.out and eqn.out not in reader.inputs[1:]
                              for reader in readers):
        return None
    return list({reader.out.name: reader for reader in readers}.values())


def _classify(ctx, eqn, bounds):
    """isnan, isinf, isfinite."""
    return RULES[eqn.prim.name](ctx, eqn, bounds), None


def _sign(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    return (e if is_bool(x) else ctx.undecided(ctx.abs(x), ctx.as_number(x, e))), None


def _quotient(ctx, eqn, bounds):
    """For ``a // b`` and ``a % b`` of floats: the quotient ``a / b`` in float64 and a bound
    on how far NumPy's exact quotient may be from it."""
    (a, b), (ea, eb) = eqn.inputs, bounds
    ea, eb = ctx.as_number(a, ea) or number(0.0), ctx.as_number(b, eb) or number(0.0)
    magnitude_a, magnitude_b = ctx.abs(a), ctx.abs(b)
    quotient = ctx.div(a, b)
    numerator = ctx.add(ctx.mul(magnitude_a, eb), ctx.mul(magnitude_b, ea))
    carried = ctx.where(ctx.greater(magnitude_b, eb),
                        ctx.div(numerator, ctx.mul(magnitude_b, ctx.sub(magnitude_b, eb))), INF)
    # Our float64 division rounds once; NumPy's (a - fmod(a, b)) / b in the operands' dtype
    # rounds the near-integer quotient once more.
    own = ctx.mul(ctx.abs(quotient), number(2 * F64_ROUNDOFF + 4 * unit_roundoff(
        eqn.out.aval.dtype)))
    return quotient, ctx.mul(ctx.add(carried, own), number(INFLATE))


def _divmod(ctx, eqn, bounds):
    """floor_divide and mod: a jump wherever the quotient crosses an integer."""
    (a, b), (ea, eb) = eqn.inputs, bounds
    if not is_float(eqn.out):
        # Integer operands with a bound (rare: casts are checked): any bounded element.
        masks = [ctx.mask(ctx.as_number(atom, e)) for atom, e in zip((a, b), (ea, eb))
                 if e is not None]
        mask = masks[0] if len(masks) == 1 else ctx.or_(*masks)
        return ctx.fit(mask, eqn.out.aval.shape), None
    quotient, spread = _quotient(ctx, eqn, bounds)
    low = ctx.emit(floor_p, ctx.sub(quotient, spread))
    high = ctx.emit(floor_p, ctx.add(quotient, spread))
    finite = ctx.emit(isfinite_p, ctx.add(quotient, spread))
    mask = ctx.or_(ctx.emit(not_equal_p, low, high), ctx.not_(finite))
    after = None
    if eqn.prim.name == "mod":
        # a % b = a - k b with k the same integer on both sides: apart by ea + |k| eb, and
        # by one rounding of the result (NumPy's fmod is exact; the sign fix adds b).
        ea_n = ctx.as_number(a, ea) or number(0.0)
        eb_n = ctx.as_number(b, eb) or number(0.0)
        carried = ctx.add(ea_n, ctx.mul(ctx.abs(low), eb_n))
        after = ctx.fit(ctx.plus(ctx.mul(carried, number(INFLATE)), ctx.rounding(eqn.out)),
                        eqn.out.aval.shape)
    return ctx.fit(mask, eqn.out.aval.shape), after


def _arg_extremum(ctx, eqn, bounds):
    (x,), (e,) = eqn.inputs, bounds
    params = eqn.params_dict
    mask = extreme_ambiguity(ctx, x, e, (params["axis"],), eqn.prim.name == "argmax")
    return mask, None


def _extremum_equality(ctx, eqn):
    """``x == max(x)`` broadcast back (the VJP of max/min picks its winners so): the winners
    are NumPy's unless the group's extreme is ambiguous (elementwise, the winner itself is
    always within its bound of the max)."""
    if eqn.prim.name != "equal":
        return None
    for data, other in (eqn.inputs, eqn.inputs[::-1]):
        reduced = _through_views(ctx, other)
        if reduced is not None and reduced.prim.name in ("max", "min") and (
                reduced.inputs[0] == data):
            e = ctx.bound(data)
            if e is None:
                return None
            mask = extreme_ambiguity(ctx, data, e, tuple(reduced.params_dict["axes"]),
                                     reduced.prim.name == "max")
            return ctx.fit(mask, eqn.out.aval.shape)
    return None


def _through_views(ctx, atom):
    """The equation producing ``atom`` past reshapes and broadcasts (None for inputs)."""
    while isinstance(atom, Var) and atom.name in ctx.producers:
        eqn = ctx.producers[atom.name]
        if eqn.prim.name not in ("reshape", "broadcast_to"):
            return eqn
        atom = eqn.inputs[0]
    return None


# What could jump, and how to tell: rule(slice, eqn, bounds) -> (mask, bound after the
# check) or None (no jump here, e.g. a cast to float).
AMBIGUITY = {
    "floor": _jump,
    "ceil": _jump,
    "rint": _jump,
    "trunc": _jump,
    "cast": _cast,
    "equal": _compare,
    "not_equal": _compare,
    "less": _compare,
    "less_equal": _compare,
    "greater": _compare,
    "greater_equal": _compare,
    "isnan": _classify,
    "isinf": _classify,
    "isfinite": _classify,
    "sign": _sign,
    "floor_divide": _divmod,
    "mod": _divmod,
    "argmax": _arg_extremum,
    "argmin": _arg_extremum,
}

# Guards whose predicates get their own margins (tracejit.tracer.guard_margins).
_MARGINED = ("bool", "int", "index")


def _readers(graph):
    readers = {}
    for item in graph.body:
        atoms = (item.predicate,) if isinstance(item, Guard) else getattr(item, "inputs", ())
        for atom in atoms:
            if isinstance(atom, Var):
                readers.setdefault(atom.name, []).append(item)
    for atom in graph.outputs:
        if isinstance(atom, Var):
            readers.setdefault(atom.name, []).append(None)
    return readers


def _only_margined_guards(readers, all_readers=None, depth=0):
    """Whether every reader is a ``bool``/``int``/``index`` guard, directly or through
    bool connectives, element picks and ``any``/``all`` (``assert np.allclose(p.sum(1),
    1)``: its ``|a - b| <= tol | (a == b)``): the guard's margin bounds the whole
    decision, where the connective's rule (``margin_rules._connective``) leaves the
    equality undecided-but-irrelevant once the tolerance test is sure."""
    if not readers:
        return False
    for reader in readers:
        if isinstance(reader, Guard) and reader.convert in _MARGINED:
            continue
        if all_readers is None or depth > 8 or not isinstance(reader, Eqn) or not (
                is_bool(reader.out) and (reader.prim.name in _DECISION_PASSES or (
                    reader.prim.name in _ELEMENT_PICKS))):
            return False
        if not _only_margined_guards(all_readers.get(reader.out.name, ()), all_readers,
                                     depth + 1):
            return False
    return True


# Bool operations a guard's margin bounds through (margin_rules' rules for them)
_DECISION_PASSES = ("logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or",
                    "any", "all")


def _unbounded(bound):
    return bound is INF or bound is ALWAYS or (isinstance(bound, Literal) and (
        bound.value is True or not np.isfinite(float(bound.value))))


# Operations that only pick, repeat or move elements: the elements of their result are
# elements of their operand, with the operand's values.
_ELEMENT_PICKS = ("slice", "reshape", "broadcast_to", "transpose", "flip", "gather")


def _hoisted(ctx, loop):
    """The jumps inside ``loop``'s body that read, through element picks only, one value
    the loop does not carry (``np.where(s[i] >= t, 1, -100)`` with ``s`` computed before
    the loop), as equations on that whole value outside the loop: checking every element
    of ``s`` covers the elements the trips read. (Jumps on carried values stay unchecked:
    their rounding through the trips has no bound.)"""
    body, params = loop.params_dict["body"], loop.params_dict
    outer = {var.name: atom for var, atom in zip(body.inputs[params["num_carry"]:],
                                                  loop.inputs[params["num_carry"]:])}
    producers = {eqn.out.name: eqn for eqn in body.equations}

    def source(atom):
        while isinstance(atom, Var) and atom.name not in outer:
            eqn = producers.get(atom.name)
            if eqn is None or eqn.prim.name not in _ELEMENT_PICKS:
                return None
            atom = eqn.inputs[0]
        return outer.get(atom.name) if isinstance(atom, Var) else None

    hoisted = []
    for eqn in body.equations:
        if eqn.prim.name not in AMBIGUITY or eqn.prim.name in ("argmax", "argmin") or (
                eqn.out.name in body.gradient_vars):
            continue  # (an extremum's axes are the body value's; reverse mode's masks)
        variables = [atom for atom in eqn.inputs if isinstance(atom, Var)]
        literals = [atom for atom in eqn.inputs if isinstance(atom, Literal)]
        if len(variables) != 1 or any(isinstance(atom.value, DimExpr) for atom in literals):
            continue
        whole = source(variables[0])
        if not isinstance(whole, Var):
            continue
        inputs = tuple(whole if atom is variables[0] else atom for atom in eqn.inputs)
        hoisted.append(ctx.emitter.equation(eqn.prim, inputs, eqn.params_dict))
    return hoisted


def check_discontinuities(graph):
    """Insert, before each equation that jumps and reads bounded operands, the equations of
    its ambiguity mask and a ``margin`` guard on ``any(mask)``; for a jump inside a loop
    body, on the whole value it reads, before the loop (``_hoisted``)."""
    body = checked_body(graph, _Slice(graph, cheap=True))
    return graph if body is None else replace(graph, body=body)


def checked_body(graph, ctx, hoist=True, unmodelled=None):
    """``graph``'s body with the checks of ``check_discontinuities`` inserted, their bounds
    taken from ``ctx`` (which keeps each checked equation's bound after its check, NumPy's
    value or near it); None when nothing is checked. ``hoist``: also check the jumps
    inside loop bodies that read a value from before the loop (``_hoisted``).
    A jump reading a value with no error model is not checked; its location goes in the
    list ``unmodelled``, when given (a loop body's: ``loop_bounds`` lets NumPy decide)."""
    readers = ctx.readers = _readers(graph)
    ctx.position = {item.out.name: index for index, item in enumerate(graph.body)
                    if isinstance(item, Eqn)}
    inserts = {}
    checks = []
    for index, item in enumerate(graph.body):
        if hoist and isinstance(item, Eqn) and item.prim.name == "loop":
            checks.extend((index, eqn) for eqn in _hoisted(ctx, item))
        checks.append((index, item))
    for index, item in checks:
        if not isinstance(item, Eqn) or item.prim.name not in AMBIGUITY:
            continue
        if item.out.name in graph.gradient_vars:
            continue  # reverse mode's masks: a one-sided derivative at a kink
        if item.out.name in graph.check_vars:
            continue  # a check's own arithmetic (loop_bounds put it in a loop body)
        if _only_margined_guards(readers.get(item.out.name, ()), readers):
            continue
        bounds = [ctx.bound(atom) if isinstance(atom, Var) else None for atom in item.inputs]
        if all(bound is None for bound in bounds) or any(_unbounded(b) for b in bounds):
            if unmodelled is not None and any(_unbounded(b) for b in bounds) and _jumps(
                    ctx, item):
                unmodelled.append(graph.locations.get(item.out.name))
            _keep_pending(ctx, inserts, index)
            continue
        ctx.early, ctx.snapshot = [], None
        checked = AMBIGUITY[item.prim.name](ctx, item, bounds)
        if checked is None:
            _keep_pending(ctx, inserts, index)
            continue
        mask, after, at = checked if len(checked) == 3 else (*checked, index)
        if ctx.snapshot is not None:
            ctx.bounds = ctx.snapshot
        ctx.bounds[item.out.name] = after  # past the check, NumPy's value (or this close)
        inserts.setdefault(index, []).extend(ctx.early)
        pending, ctx.emitter.pending = ctx.emitter.pending, []
        if mask is None or isinstance(mask, Literal) and not bool(mask.value):
            inserts.setdefault(at, []).extend(pending)
            continue
        if isinstance(mask, Literal):  # surely ambiguous: a guard needs a value to read
            mask = ctx.emit(full_p, shape=(), value=True, dtype=np.dtype(np.bool_))
        elif mask.aval.shape:
            mask = ctx.emit(any_p, mask, axes=tuple(range(len(mask.aval.shape))),
                            keepdims=False)
        pending.extend(ctx.emitter.pending)
        ctx.emitter.pending = []
        inserts.setdefault(at, []).extend(pending)
        inserts[at].append(Guard(mask, "margin", False, graph.locations.get(item.out.name)))
    if not inserts:
        return None
    body = []
    for index, item in enumerate(graph.body):
        body.extend(inserts.get(index, ()))
        body.append(item)
    return tuple(body)


def _jumps(ctx, eqn):
    """Whether ``eqn`` (in ``AMBIGUITY``) may jump whatever its operands' bounds: not a
    cast to a float, nor a comparison only ``np.where`` reads between branches meeting at
    its threshold (relu as ``np.where(x > 0, x, 0)``)."""
    if eqn.prim.name == "cast":  # truncation, or a truth test
        return is_bool(eqn.out) or is_float(eqn.inputs[0]) and not is_float(eqn.out)
    if AMBIGUITY[eqn.prim.name] is _compare:
        selects = _selects(ctx, eqn)
        return not selects or not all(_meets_at_threshold(ctx, eqn, select)
                                      for select in selects)
    return True


def _keep_pending(ctx, inserts, index):
    """Bounds computed for an item that needs no check stay memoized in ``ctx`` (later
    checks and a loop's carried bounds read them): their equations go before the item,
    where its operands are defined. Left pending, the next guard margin put them at its
    own predicate, which may come before those operands (a loop body's ``if`` ahead of a
    buffer write: 'uses %27 before its definition', fuzz round 16)."""
    inserts.setdefault(index, []).extend(ctx.emitter.pending)
    ctx.emitter.pending = []


__all__ = ["AMBIGUITY", "check_discontinuities", "checked_body"]
