"""Loop bounds: a loop carries the rounding bound of the values its decisions read.

Compiled code rounds differently from NumPy in the last bits (a tanh within a few ulp,
a sum in another order), and inside a loop that difference is carried from trip to trip.
A jump inside the body (``np.where(h > t, 1, -100)``, ``argmax`` of the logits fed back as
the next input, ``if h.sum() > 0``) on a carried value, or a jump after the loop on its
result, could then go the other way than NumPy's and change the answer by a whole unit.
The body's own checks (``check_discontinuities`` on the body, compiled alone) see its
carried inputs as exact, so only the last trip's rounding was covered.

``carry_loop_bounds`` gives such a loop one more carried value per float value its
decisions (or the decisions after it) depend on: a float64 bound ``E`` with ``|compiled -
numpy| <= E`` elementwise, computed in the body by the rules of ``margin_rules`` from the
bounds carried in, starting from the initial values' bounds. Inside the body every jump
and value guard then gets its margin guard on that bound (a failure is a side exit of the
whole call: eager decides), and after the loop the result's bound is the carried one
(``margin_rules._loop`` reads it through the loop's ``bounds`` pairs). Once a check holds,
the checked value is NumPy's, so an ``argmax`` fed back (greedy decoding) carries no bound.

A carried value that enters exact and that one trip on exact values leaves exact (IEEE
arithmetic, products by NumPy's own BLAS calls: gradient descent's ``w - lr * X.T @ (X @
w - y) / n``, power iteration's ``w / np.linalg.norm(w)``) is NumPy's to the bit at every
trip, by induction: it carries no bound (the loop's ``exact`` param lists it), so a loop
of hundreds of trips decides as NumPy does with no margin to outgrow. Products a bound
is carried through take ``|A| @ |B|`` bounds (``full_products``), not the cheap row-norm
ones, whose looseness compounds trip after trip.

A float32 product takes the cheap contraction bound here as a float64 one does, whatever
its operands (``W @ h`` of a carried ``h``; at the top level only exact operands'). A value
whose bound still has no model (a convolution, ``np.prod``, a loop nested in the body)
cannot be checked: a loop whose body decides on one gets a margin guard that always fails
before it (``_decided_by_numpy``), so such calls run eagerly. (Such decisions went
unchecked: the float32 LIF layer of real models 13 fired where NumPy does not on every
compiled call under ``TRACEJIT_GEMM=own``, round 20.) Bounds are worst cases: one through a
long recurrence with weights above 1 in norm grows trip after trip until the checks send
the call to NumPy.

>>> import numpy as np
>>> from tracejit.tracer.ir import Eqn
>>> from tracejit.tracer.tracing import trace
>>> def count(x, th):
...     h, hits = np.zeros(x.shape[1], x.dtype), np.zeros(x.shape[1])
...     for t in range(x.shape[0]):
...         hits = hits + np.where(h > th, 1.0, -100.0)
...         h = np.tanh(h + x[t])  # float32: our own math, a few ulp from NumPy's
...     return hits
>>> x, th = np.ones((5, 3), np.float32), np.zeros(3, np.float32)
>>> graph = trace(count, x, th, dynamic=True).graph
>>> loop = next(eqn for eqn in carry_loop_bounds(graph).equations if eqn.prim.name == "loop")
>>> loop.params_dict["num_carry"], loop.params_dict["bounds"]
(3, ((0, 2),))
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .abstract import AbstractArray
from .dims import DimExpr
from .discontinuities import AMBIGUITY, _unbounded, checked_body
from .guard_margins import _Slice, add_guard_margins, defined_vars, loop_body_infinities
from .ir import Eqn, Guard, Literal, Var
from .margin_rules import F64, is_bool, is_float
from .ops import broadcast_to_p, full_p, loop_p

# Guards whose predicate a compiled run decides (float/item pin a value: guard_margins).
_DECIDING = ("bool", "int", "index")


def carry_loop_bounds(graph):
    """Give each loop whose body decides on carried values, or whose results feed a
    decision after it, the carried bounds of those values and the checks they allow."""
    done = set()
    while True:
        for item in graph.body:
            if isinstance(item, Eqn) and item.prim is loop_p and _key(item) not in done:
                graph, key = _bound_loop(graph, item)
                done.add(key)
                break
        else:
            return graph


def _key(eqn):
    return eqn.inputs, tuple(param for param in eqn.params if param[0] != "output")


def _decisions(graph):
    """The atoms the graph's jumps and value guards read (not reverse mode's masks), and
    every operand of a loop that decides inside (its body may read any of them)."""
    roots = []
    for item in graph.body:
        if isinstance(item, Guard) and item.convert in _DECIDING:
            roots.append(item.predicate)
        elif isinstance(item, Eqn) and item.prim.name in AMBIGUITY and (
                item.out.name not in graph.gradient_vars) and not _to_float(item):
            roots.extend(item.inputs)
        elif isinstance(item, Eqn) and item.prim is loop_p and _decisions(
                item.params_dict["body"]):
            roots.extend(item.inputs)
    return roots


def _to_float(eqn):
    """A cast to a float (``float(cost)`` in a training loop's body): it rounds, it does not
    jump (``discontinuities._cast``), so it decides nothing. Counted as a decision, it gave
    every value the cost reads a carried bound: a body of twice the kernels, 100x slower."""
    return eqn.prim.name == "cast" and eqn.out.aval.dtype.kind == "f"


def _reads(graph, roots):
    """Names of the values ``roots`` depend on in ``graph``, inputs included."""
    producers = {eqn.out.name: eqn for eqn in graph.equations}
    stack, seen = [atom for atom in roots if isinstance(atom, Var)], set()
    while stack:
        atom = stack.pop()
        if atom.name in seen:
            continue
        seen.add(atom.name)
        eqn = producers.get(atom.name)
        if eqn is not None:
            stack.extend(operand for operand in eqn.inputs if isinstance(operand, Var))
    return seen


def _bound_positions(graph, group, body, num_carry):
    """The carried positions whose bounds the decisions need (inside the body, and after
    the loop through its results), closed over the carried values they read, and the
    names of the body's values those decisions and bounds read."""
    decided = _reads(graph, _decisions(graph))
    wanted = {eqn.params_dict["output"] for eqn in group if eqn.out.name in decided}
    roots = _decisions(body)
    while True:
        reads = _reads(body, roots + [body.outputs[position] for position in wanted])
        carried = {position for position in range(num_carry)
                   if body.inputs[position].name in reads}
        if carried <= wanted:
            return wanted, reads
        wanted |= carried


def _fresh(ctx, aval):
    var = Var(f"%{ctx.emitter.next_number}", aval)
    ctx.emitter.next_number += 1
    return var


def _full_shape(ctx, bound, aval):
    """``bound`` (None: exact) as a float64 array of ``aval``'s shape."""
    shape = tuple(aval.shape)
    if bound is None or isinstance(bound, Literal):
        value = 0.0 if bound is None else float(bound.value)
        return ctx.emit(full_p, shape=shape, value=value, dtype=F64)
    bound = ctx.f64(bound)
    if tuple(bound.aval.shape) == shape:
        return bound
    return ctx.emit(broadcast_to_p, bound, shape=shape)


def _body_checks(body, ctx):
    """The body's items with the discontinuity checks and the value guards' margins whose
    bounds ``ctx`` models (None when it adds none), and the locations of the jumps and
    guards that read a value whose bound it does not model."""
    unmodelled = []
    items = checked_body(body, ctx, hoist=False, unmodelled=unmodelled)
    checked = body if items is None else replace(body, body=items)
    guarded = add_guard_margins(checked, ctx, modelled_only=True)
    for item in body.body:
        if isinstance(item, Guard) and item.convert in _DECIDING and isinstance(
                item.predicate, Var) and _unbounded(ctx.bound(item.predicate)):
            unmodelled.append(item.location)
    return None if guarded is body else list(guarded.body), unmodelled


def _checked_slice(graph):
    """Bounds of ``graph``'s values as they are past the discontinuity checks that
    ``check_discontinuities`` will make (a checked comparison or argmax is NumPy's
    value): an int or bool a loop reads that is one (a while loop's done flag from its
    peeled trip 0, viterbi's back-pointers by a batched argmax, ``path[-1] =
    np.argmax(...)``) enters the loop exact. Taken as unbounded, it made every value it
    selects or indexes unbounded, and the loop's decisions unmodelled (so eager). Its
    equations are dropped."""
    ctx = _Slice(graph, cheap=True)
    ctx.bounds.update(dict.fromkeys(graph.check_vars))
    checked_body(graph, ctx, hoist=False)
    return ctx


def _decided_by_numpy(graph, first, location):
    """``graph`` with a margin guard that always fails before the loop ``first``: its
    body decides (at ``location``) on a value with no error model, so no check could tell
    that decision is NumPy's, and a decision in a body left unchecked went the other way
    than NumPy's on every compiled call (the float32 LIF layer on the own GEMM, round 20).
    The call runs eagerly: a margin's side exit, not a loop guard's, whose streak would
    trace the loops unrolled, where such a mask goes unchecked."""
    ctx = _Slice(graph)
    always = ctx.emit(full_p, shape=(), value=True, dtype=np.dtype(np.bool_))
    guard = Guard(always, "margin", False, location)
    items = []
    for item in graph.body:
        if item is first:
            items += [*ctx.emitter.pending, guard]
        items.append(item)
    return replace(graph, body=tuple(items), check_vars=graph.check_vars | {always.name})


def _bound_loop(graph, first):
    """``graph`` with the loop group of ``first`` carrying bounds (unchanged when no
    decision needs one), and the group's key afterwards."""
    params = first.params_dict
    body, num_carry = params["body"], params["num_carry"]
    group = [eqn for eqn in graph.equations if eqn.prim is loop_p and _key(eqn) == _key(first)]
    wanted, reads = _bound_positions(graph, group, body, num_carry)
    if not wanted and not _decisions(body):
        return graph, _key(first)
    outer = _Slice(graph, cheap=True)
    # A loop's products take |A| @ |B| bounds (margin_rules._matmul), the initial ones
    # too: the cheap rule's looseness compounds trip after trip. A solver's exit ran
    # eagerly after ~7 trips; a counted loop too, at a few hundred (course 1's
    # L_layer_model: its relu masks' margin guards failed from trip ~270 with the cheap
    # rule's bound near 1e-4, past 1000 trips with these). It costs a product of
    # magnitudes per bounded product and trip (~25% of that model's compiled call).
    outer.full_products = True
    # A float32 product a loop's decisions read takes a bound as a float64 one does: with
    # no model, the decision would be NumPy's alone (margin_rules._float32_modelled).
    outer.float32_products = True
    # Bound arithmetic an earlier loop put before its loop (its initial and passed-in
    # bounds) is ours, not a value NumPy computes: it has no bound of its own. Bounding it
    # again made each loop re-derive the bounds of every earlier loop's bounds - quadratic
    # in the loops of a program (64 unrolled max-pool loops: 256k equations, 26 s).
    outer.bounds.update(dict.fromkeys(graph.check_vars))
    numbers = [outer.emitter.next_number]
    numbers += [int(var.name[1:]) + 1 for var in defined_vars(body) if var.name[1:].isdigit()]
    outer.emitter.next_number = max(numbers)

    # What the body reads from outside: exact, bounded (the bound passed in), or not
    # modelled; the same for the initial carried values.
    unbounded, operand_bounds = {}, {}
    entry = None
    for position, (var, operand) in enumerate(zip(body.inputs, first.inputs)):
        if var.name not in reads or not isinstance(operand, Var):
            continue
        bound = outer.bound(operand)
        if bound is not None and not is_float(var):
            entry = _checked_slice(graph) if entry is None else entry
            if entry.bound(operand) is None:
                continue  # NumPy's once the checks before the loop hold
        if bound is None:
            continue
        if _unbounded(bound) or not (is_float(var) or is_bool(var) and position >= num_carry):
            unbounded[position] = outer.unbounded(var)
        elif position >= num_carry:
            operand_bounds[position] = bound if is_bool(var) else outer.f64(bound)
    carried = sorted(position for position in wanted
                     if position not in unbounded and is_float(body.inputs[position]))
    # The body as a graph that knows the outer symbols (its shapes name them).
    names = {symbol.name for symbol in body.symbols}
    scoped = replace(body, symbols=tuple(symbol for symbol in graph.symbols
                                         if symbol.name not in names) + body.symbols,
                     shape_guards=graph.shape_guards + body.shape_guards)
    infinite = loop_body_infinities(body, first.inputs, outer, num_carry)
    # Carried values that are NumPy's to the bit at every trip need no carried bound: by
    # induction, when they enter exact and one trip on exact values leaves them exact
    # (a gradient step through products NumPy's own BLAS calls compute, margin_rules'
    # _matmul). A worst-case bound carried instead grows with the trips until the exit's
    # margin fails (gradient descent to a tolerance ran eagerly after ~40-50 trips).
    # (ints and bools too, which carry no bound: viterbi's back-pointers, argmax's checked
    # in the body, are NumPy's after the loop, so a later loop may index by them)
    exact = {position for position in carried if not isinstance(first.inputs[position], Var)
             or outer.bound(first.inputs[position]) is None} | {
        position for position in wanted if position not in unbounded
        and not is_float(body.inputs[position]) and (
            not isinstance(first.inputs[position], Var)
            or outer.bound(first.inputs[position]) is None
            or entry is not None and entry.bound(first.inputs[position]) is None)}
    while True:
        ctx = _Slice(scoped, cheap=True)
        ctx.full_products = True
        ctx.float32_products = True
        ctx.infinite = infinite
        ctx.emitter.next_number = outer.emitter.next_number
        bound_inputs = {position: _fresh(ctx, AbstractArray(body.inputs[position].aval.shape,
                                                            F64))
                        for position in carried if position not in exact}
        for position, bound in operand_bounds.items():
            shape = body.inputs[position].aval.shape if bound.aval.shape else ()
            bound_inputs[position] = _fresh(ctx, AbstractArray(shape, bound.aval.dtype))
        ctx.bounds.update({body.inputs[position].name: var
                           for position, var in bound_inputs.items()})
        ctx.bounds.update({body.inputs[position].name: bound
                           for position, bound in unbounded.items()})
        items, unmodelled = _body_checks(scoped, ctx)
        out_bounds = {position: ctx.bound(body.outputs[position]) for position in wanted
                      if position not in unbounded}
        # A carried value whose bound after a trip is not modelled (or a non-float one
        # that is not exact) is unbounded from the start: try again without it.
        inexact = {position for position in exact if out_bounds[position] is not None}
        if inexact:  # not exact after a trip: carry its bound, and try again
            exact -= inexact
            continue
        lost = {position for position, bound in out_bounds.items()
                if (_unbounded(bound) if is_float(body.inputs[position]) else bound is not None)}
        if not lost:
            break
        for position in lost:
            unbounded[position] = ctx.unbounded(body.inputs[position])
        carried = [position for position in carried if position not in lost]
    if unmodelled:
        return _decided_by_numpy(graph, first, unmodelled[0]), _key(first)
    carried = [position for position in carried if position not in exact]
    if items is None and not carried and not exact:
        return graph, _key(first)

    # The body: its bounds after a trip become carried outputs.
    outputs = [_full_shape(ctx, out_bounds[position], body.inputs[position].aval)
               for position in carried]
    items = _defined_before_use(list(body.body if items is None else items)
                                + ctx.emitter.pending)
    ctx.emitter.pending = []

    # The loop: initial bounds, and the bounds of outside values, are computed before it.
    outer.emitter.next_number = ctx.emitter.next_number
    initial = [_full_shape(outer, outer.bound(first.inputs[p]) if isinstance(
        first.inputs[p], Var) else None, first.inputs[p].aval) for p in carried]
    passed = [outer.bound(first.inputs[p]) for p in operand_bounds]
    passed = [_fit(outer, bound, first.inputs[p].aval, bound_inputs[p].aval)
              for bound, p in zip(passed, operand_bounds)]
    items, hoisted = _hoist(items, set(ctx.emitter.producers), params["index"], {
        **{var.name: operand for var, operand in zip(body.inputs[num_carry:],
                                                      first.inputs[num_carry:])
           if isinstance(operand, Var) and _same_aval(var, operand)},
        **{bound_inputs[p].name: bound for bound, p in zip(passed, operand_bounds)
           if isinstance(bound, Var) and _same_aval(bound_inputs[p], bound)}})
    read = _reads(replace(body, body=tuple(items)), [
        atom for item in items
        for atom in ((item.predicate,) if isinstance(item, Guard) else item.inputs)]
        + list(body.outputs) + outputs)
    passed_in = [eqn.out for eqn in hoisted if eqn.out.name in read]
    inputs = (body.inputs[:num_carry] + tuple(bound_inputs[p] for p in carried)
              + body.inputs[num_carry:] + tuple(bound_inputs[p] for p in operand_bounds)
              + tuple(passed_in))
    new_body = replace(body, inputs=inputs, body=tuple(items),
                       outputs=body.outputs + tuple(outputs),
                       check_vars=body.check_vars | set(ctx.emitter.producers))
    operands = (first.inputs[:num_carry] + tuple(initial) + first.inputs[num_carry:]
                + tuple(passed) + tuple(passed_in))
    pairs = tuple((position, num_carry + index) for index, position in enumerate(carried))
    loop_params = dict(params, body=new_body, num_carry=num_carry + len(carried),
                       bounds=pairs, exact=tuple(sorted(exact)))
    loop_params.pop("output")
    replaced = {}
    for eqn in group:
        replaced[eqn.out.name] = Eqn(loop_p, operands, tuple(sorted(
            dict(loop_params, output=eqn.params_dict["output"]).items())), eqn.out)
    bound_results = [outer.emitter.equation(loop_p, operands, dict(loop_params, output=index))
                     for _, index in pairs]
    outer.emitter.pending.extend(hoisted)
    outer.emitter.producers.update((eqn.out.name, eqn) for eqn in hoisted)
    before = outer.emitter.pending
    new_items = []
    for item in graph.body:
        if item is first:
            new_items.extend(before)
        if isinstance(item, Eqn) and item.out.name in replaced:
            new_items.append(replaced[item.out.name])
            if item is first:
                new_items.extend(bound_results)
            continue
        new_items.append(item)
    new_first = replaced[first.out.name]
    return replace(graph, body=tuple(new_items), check_vars=graph.check_vars | set(
        outer.emitter.producers)), _key(new_first)


def _defined_before_use(items):
    """``items`` with each equation moved up, when needed, to before the first item that
    reads it (its own inputs first, recursively); guards and effects keep their order.
    The checks and the margins share one bound per value (``ctx.bounds``): a bound first
    made for a discontinuity late in the body is what a value guard's margin earlier in it
    reads (``y = y * 0.5; if y.sum() > 50: ...; if y.max() < 0.1: break``)."""
    producers = {item.out.name: item for item in items if isinstance(item, Eqn)}
    placed, ordered = set(), []

    def reads(item):
        atoms = (item.predicate,) if isinstance(item, Guard) else item.inputs
        return [producers[atom.name] for atom in atoms if isinstance(atom, Var)
                and atom.name in producers and atom.name not in placed]

    for item in items:
        stack = [item]
        while stack:  # depth first, without recursion (a bound's chain may be long)
            top = stack[-1]
            if isinstance(top, Eqn) and top.out.name in placed:
                stack.pop()
                continue
            missing = reads(top)
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            ordered.append(top)
            if isinstance(top, Eqn):
                placed.add(top.out.name)
    return ordered


def _hoist(items, emitted, index, outside):
    """Bound arithmetic that reads only values from outside the loop (``|W|`` and its row
    sums for ``W @ h``'s bound) is the same at every trip: those equations move before the
    loop, reading the outside values themselves (``outside``: body input name -> outer
    atom). Returns the body's items left and the moved equations."""
    kept, hoisted = [], []
    for item in items:
        if isinstance(item, Eqn) and item.out.name in emitted and all(
                not isinstance(atom, Var) or atom.name in outside for atom in item.inputs) and (
                not _mentions(item.inputs, index) and not _mentions(item.params, index)):
            hoisted.append(replace(item, inputs=tuple(
                outside[atom.name] if isinstance(atom, Var) else atom for atom in item.inputs)))
            outside[item.out.name] = item.out
            continue
        kept.append(item)
    return kept, hoisted


def _mentions(value, symbol):
    """Does ``value`` (params, atoms, nested tuples) name the loop index ``symbol``?"""
    if isinstance(value, Literal):
        value = value.value
    if isinstance(value, DimExpr):
        return symbol in value.symbols()
    if isinstance(value, (tuple, list)):
        return any(_mentions(item, symbol) for item in value)
    return False


def _same_aval(var, atom):
    return tuple(var.aval.shape) == tuple(atom.aval.shape) and var.aval.dtype == atom.aval.dtype


def _fit(ctx, bound, outer_aval, inner_aval):
    """An outside value's bound as the body input ``inner_aval`` takes it: a scalar, or
    the value's shape."""
    if tuple(inner_aval.shape) == ():
        return bound
    if tuple(bound.aval.shape) == tuple(outer_aval.shape):
        return bound
    return ctx.emit(broadcast_to_p, bound, shape=tuple(outer_aval.shape))


__all__ = ["carry_loop_bounds"]
