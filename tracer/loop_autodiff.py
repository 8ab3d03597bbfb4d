"""Reverse mode through a captured ``loop``: the reverse of a loop is a loop.

``loop_vjp`` is ``loop_p``'s VJP rule. Given the cotangents of a loop's results it
records, into the live trace, what JAX's reverse-mode ``scan`` does:

1. **The body's own reverse graph.** The body is replayed for two iterations on fresh
   block parameters and ``tracejit.tracer.autodiff.reverse`` records each replay's backward pass;
   the two recordings are generalized over the index exactly as loop capture generalizes
   the forward body (``tracejit.tracer.loop_generalize._generalize``). The result is one joint
   forward+backward body in the index symbol.
2. **Residuals.** The backward part reads forward values. Outside values are read as
   they are; values that are expensive to recompute (matmuls, reductions, gathers - the
   rule ``tracejit.tracer.partition`` uses for whole graphs) and the carried values are *stacked*:
   the forward loop is rewritten in place to carry one more buffer per residual, written
   at the index (``stack[k] = value``, the pattern ``control.inplace_writes`` runs as a
   store). A carried value's stack has one more slot than trips: slot ``k`` holds the
   value entering trip ``k`` and slot ``k + 1`` the value leaving it, so ``h_{t-1}`` and
   ``h_t`` come from one buffer. Pointwise and view values are recomputed in the reverse
   body from those.
3. **The reverse loop** runs from the last trip to the first (``step = -step``). It
   carries the carried values' cotangents and one accumulator per outside value that
   needs a gradient (``dW += ...``). Writes at the index (``hs[:, t] = h``) reverse into
   reads of the cotangent at the same index; reads at the index (``x[:, t]``) reverse into
   writes of the cotangent at that index when no two trips touch the same elements, so
   neither costs a buffer-sized operation per trip.

The first call's gradients are real: the rewritten forward loop and the reverse loop are
run by the NumPy reference (``control.run_body``) while tracing, as capture does.

Guards and prints in the body stay in the forward loop only: every trip takes the
branch the guards pin (a trip that would not leaves the whole call before any gradient
is computed), so the reverse body replays that branch's equations and prints nothing.

A nested loop in the body is reversed the same way while the outer body is replayed
(its index bound to the outer trip: ``tracing.process`` passes the symbol values to a
loop's reference run). Its residual stacks exist only in the replay, not in the outer
forward body, so the outer reverse body recomputes the inner forward loop (with its
stacks) from the outer residuals instead of stacking them per outer trip: checkpointing,
one more inner forward pass per outer trip.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .abstract import AbstractArray
from .dims import DimExpr, wrap
from .errors import NotReversible
from .ir import Eqn, Graph, Var
from .loop_generalize import Refused, _generalize
from .loop_index import _active
from .ops import add_p, full_p, pad_p, reshape_p, slice_p, where_p
from .ops.control import inplace_writes, loop_p, run_body
from .partition import SAVED_KINDS
from .traced_array import Tracer

__all__ = ["loop_key", "loop_vjp"]


def loop_key(eqn):
    """What the equations of one loop share: every result of a loop is one equation with
    the same operands and body (``params['output']`` picks the result)."""
    return (eqn.inputs, tuple(item for item in eqn.params if item[0] != "output"))


# --- dims with the index bound -----------------------------------------------------------
def _substitute(value, name, replacement):
    """``value`` (a ``DimExpr``, int or tuple of them) with symbol ``name`` replaced."""
    if isinstance(value, tuple):
        return tuple(_substitute(item, name, replacement) for item in value)
    if not isinstance(value, DimExpr) or name not in value.symbols():
        return value
    total = 0
    for monomial, coeff in value.terms:
        product = coeff
        for factor in monomial:
            if factor == name:
                product = product * replacement
            elif isinstance(factor, str):
                product = product * DimExpr.symbol(factor)
            elif name not in factor.symbols():  # H // 2: no index inside, kept as it is
                product = product * DimExpr({(factor,): 1})
            else:  # floor division or modulo of the index: not affine
                raise NotReversible("reverse mode through a loop whose index appears "
                                       "inside a floor division or modulo")
        total = total + product
    return total


def _live(value, context, bindings):
    """A recorded dim or param as the tracer hands them to shape rules (``SymInt``s)."""
    if isinstance(value, tuple):
        return tuple(_live(item, context, bindings) for item in value)
    if isinstance(value, DimExpr):
        return wrap(value, value.evaluate(bindings), context)
    return value


def _trip_count(start, stop, step):
    """``len(range(start, stop, step))`` as a dim (``stop - start`` for step 1; capture
    guards that a dynamic range is not empty before it, so the count is not negative)."""
    if isinstance(start, int) and isinstance(stop, int):
        return len(range(start, stop, step))
    if step == 1:
        return stop - start
    if step > 0:
        return (stop - start + step - 1) // step
    return (start - stop - step - 1) // (-step)


def _rows(count, ranges):
    """Rows of a stack for ``count`` values: one or two more when ``count`` could be 1 in
    the bucket, so no shape rule has to ask whether the stack's length broadcasts."""
    if isinstance(count, int):
        return count
    return count + max(0, 2 - count.bounds(ranges)[0])


def _slot(index, start, step):
    """Which trip (0, 1, ...) the index value ``index`` is."""
    if step == 1:
        return index - start
    if step == -1:
        return start - index
    return (index - start) // step


# --- building records --------------------------------------------------------------------
class _Builder:
    """Equations made directly as IR records (inside bodies there is no live value)."""

    def __init__(self, context):
        self.context = context
        self.items = []

    def emit(self, prim, inputs, params, shape, dtype):
        var = self.context.new_var(AbstractArray(tuple(shape), np.dtype(dtype)))
        self.items.append(Eqn(prim, tuple(inputs), tuple(sorted(params.items())), var))
        return var

    def write(self, buffer, value, config):
        """``buffer`` with ``value`` written at the region ``config`` - the shape of
        ``hs[:, t] = h`` after tracing, so ``inplace_writes`` runs it as a store."""
        shape, dtype = value.aval.shape, value.aval.dtype
        big = buffer.aval.shape
        mask = self.emit(full_p, (), {"shape": tuple(shape), "value": True,
                                      "dtype": np.dtype(np.bool_)}, shape, np.bool_)
        mask = self.emit(pad_p, (mask,), {"config": config}, big, np.bool_)
        padded = self.emit(pad_p, (value,), {"config": config}, big, dtype)
        return self.emit(where_p, (mask, padded, buffer), {}, big, dtype)

    def read(self, buffer, config, shape):
        """The region ``config`` of ``buffer`` (the transpose of ``write``)."""
        starts = tuple(low for low, _, _ in config)
        limits = tuple(low + size for low, size in zip(starts, shape))
        return self.emit(slice_p, (buffer,), {"starts": starts, "limits": limits,
                                              "steps": (1,) * len(shape)},
                         shape, buffer.aval.dtype)

    def zeros(self, shape, dtype):
        return self.emit(full_p, (), {"shape": tuple(shape), "value": 0,
                                      "dtype": np.dtype(dtype)}, shape, dtype)


def _row_config(slot, length, rank):
    """Pad config of one row ``slot`` of a stack of ``length`` rows."""
    return ((slot, length - slot - 1, 0),) + ((0, 0, 0),) * rank


def _disjoint(config, shape, index, step, ranges):
    """Do the regions ``config`` (of size ``shape``) of two different trips never share an
    element? True when along some axis the region moves by at least its size per trip."""
    for (low, _, interior), size in zip(config, shape):
        if interior:
            return False
        delta = _substitute(low, index, DimExpr.symbol(index) + step)
        delta = delta - low if isinstance(delta, (int, DimExpr)) else None
        if delta is None:
            continue
        moved = delta if isinstance(delta, int) else None
        if isinstance(delta, DimExpr):
            if index in delta.symbols():
                continue
            low_bound, high_bound = delta.bounds(ranges)
            if low_bound >= 0:
                margin = delta - size
            elif high_bound <= 0:
                margin = -delta - size
            else:
                continue
        else:
            margin = abs(moved) - size
        if isinstance(margin, int):
            if margin >= 0:
                return True
        elif margin.bounds(ranges)[0] >= 0:
            return True
    return False


# --- the rule ------------------------------------------------------------------------------
def refusal(body):
    """Why ``loop_vjp`` cannot reverse a loop with this body, or None. Capture asks it
    in traces that record gradients and unrolls such a loop instead."""
    # Guards and prints stay in the forward loop (a failed guard leaves the whole call);
    # the reverse replays only the equations of the branch the guards pinned.
    return None


def loop_vjp(context, group, cotangents, needs):
    """Record the reverse of one loop. ``group``: the loop's equations (one per result, in
    the trace's body); ``cotangents``: result position -> cotangent tracer (or None);
    ``needs``: operand positions whose gradient is wanted. Returns ``{operand position:
    cotangent tracer}``."""
    first = group[0]
    params = first.params_dict
    body, index, step = params["body"], params["index"], params["step"]
    reason = refusal(body)
    if reason is not None:
        raise NotReversible(f"reverse mode through a loop: {reason}")
    plan = _Plan(group, cotangents, needs)
    if not plan.live:
        return {}
    bindings = context.symbol_values()
    start = params["start"]
    t1 = start.evaluate(bindings) if isinstance(start, DimExpr) else start
    stop_value = params["stop"]
    stop_value = stop_value.evaluate(bindings) if isinstance(stop_value, DimExpr) else (
        stop_value)
    if len(range(t1, stop_value, step)) < 2:
        raise NotReversible("reverse mode through a loop traced with fewer than 2 trips")
    joint = _joint_body(context, plan, body, index, t1, step, bindings)
    return _record(context, plan, joint, bindings)


class _Plan:
    """Which carried values and outside values take part in the reverse loop."""

    def __init__(self, group, cotangents, needs):
        first = group[0]
        params = first.params_dict
        self.group = group
        self.params = params
        self.body = body = params["body"]
        self.num_carry = num_carry = params["num_carry"]
        self.operands = first.inputs
        self.cotangents = cotangents
        self.needs = set(needs)
        self.writes = inplace_writes(body, num_carry)
        producers = {eqn.out.name: eqn for eqn in body.equations}

        def depends(atom):
            names, stack = set(), [atom]
            while stack:
                item = stack.pop()
                if not isinstance(item, Var) or item.name in names:
                    continue
                names.add(item.name)
                if item.name in producers:
                    stack.extend(producers[item.name].inputs)
            return names

        def floating(position):
            return body.inputs[position].aval.dtype.kind == "f"

        roots = {}
        for position in range(num_carry):
            if position in self.writes:
                roots[position] = depends(self.writes[position][1]) | {
                    body.inputs[position].name}
            else:
                roots[position] = depends(body.outputs[position])
        live = {p for p in range(num_carry)
                if cotangents.get(p) is not None and floating(p)}
        changed = True
        while changed:  # a carried value feeding a live one needs its cotangent too
            changed = False
            for position in list(live):
                for other in range(num_carry):
                    if other not in live and floating(other) and (
                        body.inputs[other].name in roots[position]
                    ):
                        live.add(other)
                        changed = True
        self.live = sorted(live)
        reached = set().union(*(roots[p] for p in self.live)) if self.live else set()
        self.free_needed = [position for position in needs if position >= num_carry
                            and body.inputs[position].aval.dtype.kind == "f"
                            and body.inputs[position].name in reached]


@dataclass
class _Recording:
    """One replay of the body (at one index value) and its backward pass."""

    params: list  # vars: the carried values' block parameters, then the seeds
    outputs: list  # tracers: each carried value after the trip (the written value for
    # a buffer written at the index)
    gradients: list  # tracers: cotangents of the live carried values, then outside values
    items: list  # what was recorded (removed from the trace)
    origin: dict  # recorded var name -> the body's var it replays
    carried_next: list  # real values entering the next trip


@dataclass
class _Joint:
    """The body's forward and backward, generalized over the index, in trial-1 names."""

    equations: list
    free: list  # outside vars read
    params: list  # the carried values' block parameters
    seeds: list  # the live carried values' cotangents
    origin: dict
    outputs: list  # vars: each carried value after the trip (None for a constant)
    gradients: list  # vars, as ``_Recording.gradients``


def _fresh(context, aval, value, bindings):
    var = context.new_var(aval)
    shape = _live(aval.shape, context, bindings)
    tracer = Tracer(context, var, value, shape)
    context.values[var.name] = (value, shape)
    return tracer


def _replay(context, plan, body, index, t, carried, bindings):
    """Record the body at index value ``t`` on fresh block parameters and its backward
    pass (a ``_Recording``)."""
    from .autodiff import reverse

    params = [_fresh(context, body.inputs[p].aval, carried[p], bindings)
              for p in range(plan.num_carry)]
    free = [context.tracer_for(atom) for atom in plan.operands[plan.num_carry:]]
    env = {var.name: tracer for var, tracer in zip(body.inputs, params + free)}
    origin = {tracer.ir_var.name: var for var, tracer in zip(body.inputs, params)}
    mark = len(context.body)
    skipped = {plan.writes[p][0].out.name for p in plan.writes}
    tbind = {**bindings, index: t}
    active = _active(context)  # a nested loop replayed below reads this loop's index
    active[index] = t
    # Shape rules replayed here may ask about the body's own symbols (a nested loop's
    # index in a pad config): their ranges, for the replay only.
    added = {symbol.name: (symbol.low, symbol.high) for symbol in body.symbols
             if symbol.name not in context.ranges}
    context.ranges.update(added)

    def value(atom):
        if isinstance(atom, Var):
            return env[atom.name]
        literal = atom.value
        if isinstance(literal, DimExpr):
            literal = _substitute(literal, index, t)
            return _live(literal, context, tbind) if isinstance(literal, DimExpr) else literal
        return literal

    for eqn in body.equations:
        if eqn.out.name in skipped:
            continue
        concrete = {key: _live(_substitute(item, index, t), context, tbind)
                    for key, item in eqn.params}
        result = context.process(eqn.prim, [value(atom) for atom in eqn.inputs], concrete)
        env[eqn.out.name] = result
        origin[result.ir_var.name] = eqn.out
    outputs = []
    for position in range(plan.num_carry):
        atom = plan.writes[position][1] if position in plan.writes else body.outputs[position]
        outputs.append(value(atom))
    for position in plan.live:
        if not isinstance(outputs[position], Tracer):
            raise NotReversible("reverse mode through a loop whose carried value is a "
                                   "constant in the body")
    seeds = [_fresh(context, outputs[p].ir_var.aval, np.ones_like(np.asarray(
        outputs[p].value)), bindings) for p in plan.live]
    wrt = [params[p] for p in plan.live] + [free[p - plan.num_carry]
                                            for p in plan.free_needed]
    gradients = reverse(context, [outputs[p] for p in plan.live], seeds, wrt, since=mark)
    recorded = context.body[mark:]
    del context.body[mark:]
    active.pop(index, None)
    for name in added:
        context.ranges.pop(name, None)
    carried_next = [np.asarray(outputs[p].value) if p not in plan.writes else carried[p]
                    for p in range(plan.num_carry)]
    return _Recording([tracer.ir_var for tracer in params] + [seed.ir_var for seed in seeds],
                      outputs, gradients, recorded, origin, carried_next)


def _joint_body(context, plan, body, index, t1, step, bindings):
    carried = [np.asarray(context.concrete(atom.name)) if isinstance(atom, Var) else
               atom.value for atom in plan.operands[:plan.num_carry]]
    first = _replay(context, plan, body, index, t1, carried, bindings)
    second = _replay(context, plan, body, index, t1 + step, first.carried_next, bindings)
    try:
        general, free = _generalize(first.items, second.items, first.params, second.params,
                                    index, samples=(t1, step))
    except Refused as refusal:
        raise NotReversible(f"reverse mode through a loop: the body's backward is not "
                               f"the same in every iteration ({refusal})") from None
    for gradient1, gradient2 in zip(first.gradients, second.gradients):
        if general.renames.get(gradient2.ir_var.name, gradient2.ir_var) != gradient1.ir_var:
            raise NotReversible("reverse mode through a loop: a gradient is computed "
                                   "differently in iterations 1 and 2")
    return _Joint(
        equations=general.body, free=free, params=first.params[:plan.num_carry],
        seeds=first.params[plan.num_carry:], origin=first.origin,
        outputs=[getattr(tracer, "ir_var", None) for tracer in first.outputs],
        gradients=[gradient.ir_var for gradient in first.gradients])


# --- recording the rewritten forward loop and the reverse loop ----------------------------
def _record(context, plan, joint, bindings):
    params, body = plan.params, plan.body
    index, step = params["index"], params["step"]
    start, stop = params["start"], params["stop"]
    ranges = dict(context.ranges)
    ranges.update({symbol.name: (symbol.low, symbol.high) for symbol in body.symbols})
    trips = _trip_count(start, stop, step)
    slot = _slot(DimExpr.symbol(index), start, step)
    rows = {"carry": _rows(trips + 1, ranges), "values": _rows(trips, ranges)}

    # Which joint values are on the backward side (depend on a seed).
    backward = {var.name for var in joint.seeds}
    for eqn in joint.equations:
        if any(isinstance(atom, Var) and atom.name in backward for atom in eqn.inputs):
            backward.add(eqn.out.name)
    producers = {eqn.out.name: eqn for eqn in joint.equations}
    free_names = {var.name for var in joint.free}
    param_position = {var.name: p for p, var in enumerate(joint.params)}
    output_position = {var.name: p for p, var in enumerate(joint.outputs)
                       if var is not None and p not in plan.writes}

    # Residuals: how each forward value the backward reads is had in the reverse body.
    stacked_carry, stacked_values, recomputed = {}, {}, set()

    def resolve(atom):
        if not isinstance(atom, Var) or atom.name in backward or atom.name in free_names:
            return
        name = atom.name
        if name in param_position:
            position = param_position[name]
            if position in plan.writes:
                raise NotReversible("reverse mode through a loop whose backward reads a "
                                       "buffer written at the index")
            stacked_carry.setdefault(position, set()).add("in")
        elif name in output_position:
            stacked_carry.setdefault(output_position[name], set()).add("out")
        elif name in recomputed or name in stacked_values:
            return
        elif producers[name].prim.kind in SAVED_KINDS and name in joint.origin:
            stacked_values[name] = joint.origin[name]
        # else: recomputed, as are values only the replay computes (a nested loop's
        # residual stacks: the outer forward body has no such value to stack)
        else:
            recomputed.add(name)
            for item in producers[name].inputs:
                resolve(item)

    for eqn in joint.equations:
        if eqn.out.name in backward:
            for atom in eqn.inputs:
                resolve(atom)
    for gradient in joint.gradients:
        resolve(gradient)

    # 1. The forward loop, rewritten to stack the residuals as it runs.
    stacks = _rewrite_forward(context, plan, stacked_carry, stacked_values, slot, rows,
                              bindings)

    # 2. The reverse body.
    build = _Builder(context)
    rename = {}
    for position, var in stacks["carry"].items():
        shape = body.inputs[position].aval.shape
        for which, offset in (("in", 0), ("out", 1)):
            if which not in stacked_carry[position]:
                continue
            row = build.read(var, _row_config(slot + offset, rows["carry"], len(shape)),
                             (1, *shape))
            row = build.emit(reshape_p, (row,), {"shape": tuple(shape)}, shape,
                             var.aval.dtype)
            target = joint.params[position] if which == "in" else joint.outputs[position]
            rename[target.name] = row
    for name, var in stacks["values"].items():
        shape = producers[name].out.aval.shape
        row = build.read(var, _row_config(slot, rows["values"], len(shape)), (1, *shape))
        rename[name] = build.emit(reshape_p, (row,), {"shape": tuple(shape)}, shape,
                                  var.aval.dtype)

    carried_in, carried_out, carried_init = [], [], []  # reverse loop's carried values
    free_in, free_operands = [], []

    def read(param, operand):  # an outside value the reverse body reads (once)
        if param.name not in {var.name for var in free_in}:
            free_in.append(param)
            free_operands.append(operand)
    results = {}  # operand position -> ("carried", k) | ("final-write", ...) | ("init", ...)
    seed_of = dict(zip(plan.live, joint.seeds))

    # Cotangents of results written at the index: read at the same index.
    for position in plan.live:
        if position not in plan.writes:
            continue
        _, value_atom, config = plan.writes[position]
        cotangent = _cotangent_init(context, plan, position)
        disjoint = _disjoint(config, value_atom.aval.shape, index, step, ranges)
        if disjoint:
            buffer_param = cotangent.ir_var
            read(buffer_param, cotangent.ir_var)
        else:
            buffer_param = context.new_var(cotangent.ir_var.aval)
        seed = seed_of[position]
        build.items.append(Eqn(slice_p, (buffer_param,), tuple(sorted({
            "starts": tuple(low for low, _, _ in config),
            "limits": tuple(low + size for (low, _, _), size in
                            zip(config, value_atom.aval.shape)),
            "steps": (1,) * len(config)}.items())), seed))
        if disjoint and position not in plan.needs:
            continue
        # The buffer's value before the loop: what the loop overwrites gets no gradient.
        # Trips that write disjoint regions read the cotangent unmodified and zero a copy;
        # otherwise a later trip's region is zeroed before an earlier trip reads it.
        carried = context.new_var(cotangent.ir_var.aval) if disjoint else buffer_param
        zeros = build.zeros(value_atom.aval.shape, value_atom.aval.dtype)
        out = build.write(carried, zeros, config)
        results[position] = ("carried", len(carried_in))
        carried_in.append(carried)
        carried_out.append(out)
        carried_init.append(cotangent)

    # The joint's forward values the backward recomputes, then its backward.
    for eqn in joint.equations:
        if eqn.out.name in recomputed or eqn.out.name in backward:
            build.items.append(_renamed(eqn, rename))

    def final(atom):
        return rename.get(atom.name, atom) if isinstance(atom, Var) else atom

    gradients = dict(zip([*plan.live, *plan.free_needed], joint.gradients))
    for position in plan.live:
        if position in plan.writes:
            continue
        seed = seed_of[position]
        out = final(gradients[position])
        init = _cotangent_init(context, plan, position)
        if out == seed:  # the cotangent passes through unchanged: read it, don't carry it
            read(seed, init.ir_var)
            results[position] = ("init", init)
            continue
        results[position] = ("carried", len(carried_in))
        carried_in.append(seed)
        carried_out.append(out)
        carried_init.append(init)
    for position in plan.free_needed:
        operand = plan.operands[position]
        gradient = final(gradients[position])
        value = context.tracer_for(operand)
        zeros = context.process(full_p, (), {"shape": value.shape, "value": 0,
                                             "dtype": value.dtype})
        accumulator = context.new_var(zeros.ir_var.aval)
        write = _index_read(gradient, build, joint, producers, index, step, ranges)
        if write is not None:
            out = build.write(accumulator, *write)
        else:
            if gradient.aval.dtype != accumulator.aval.dtype:
                raise NotReversible("reverse mode through a loop: a gradient of another "
                                       "dtype than its value")
            out = build.emit(add_p, (accumulator, gradient), {}, accumulator.aval.shape,
                             accumulator.aval.dtype)
        results[position] = ("carried", len(carried_in))
        carried_in.append(accumulator)
        carried_out.append(out)
        carried_init.append(zeros)

    # Outside values the reverse body reads: the loop's own, the stacks.
    for var in joint.free:
        read(var, var)
    for var in (*stacks["carry"].values(), *stacks["values"].values()):
        read(var, var)
    reverse_body = _prune(Graph(
        f"{body.name}_reverse", tuple(carried_in) + tuple(free_in), (), tuple(build.items),
        tuple(carried_out), body.symbols))
    finals = _run_reverse(context, plan, reverse_body, carried_init, free_operands, trips,
                          bindings) if carried_in else []

    cotangents = {position: finals[how[1]] if how[0] == "carried" else how[1]
                  for position, how in results.items()}
    return {position: value for position, value in cotangents.items()
            if isinstance(value, Tracer) and position in plan.needs}


def _renamed(eqn, rename):
    inputs = tuple(rename.get(atom.name, atom) if isinstance(atom, Var) else atom
                   for atom in eqn.inputs)
    return Eqn(eqn.prim, inputs, eqn.params, eqn.out)


def _prune(graph):
    """``graph`` without equations its outputs do not need."""
    live = {atom.name for atom in graph.outputs if isinstance(atom, Var)}
    kept = []
    for eqn in reversed(graph.body):
        if eqn.out.name in live:
            kept.append(eqn)
            live.update(atom.name for atom in eqn.inputs if isinstance(atom, Var))
    return replace(graph, body=tuple(kept[::-1]))


def _index_read(gradient, build, joint, producers, index, step, ranges):
    """When an outside value's whole gradient in one trip is the transpose of one read at
    the index (``pad(g)`` of ``x[:, t]``) and trips read disjoint regions, the gradient is
    a write of ``g`` at that region: ``(value, config)`` for ``_Builder.write``."""
    if not isinstance(gradient, Var):
        return None
    eqn = next((item for item in build.items if item.out.name == gradient.name), None)
    if eqn is None or eqn.prim is not pad_p:
        return None
    if any(isinstance(atom, Var) and atom.name == gradient.name
           for item in build.items for atom in item.inputs):
        return None  # the padded gradient is read elsewhere too
    config = eqn.params_dict["config"]
    value = eqn.inputs[0]
    moves = any(isinstance(low, DimExpr) and index in low.symbols() for low, _, _ in config)
    if not moves or not isinstance(value, Var) or not _disjoint(
        config, value.aval.shape, index, step, ranges
    ):
        return None  # the same or overlapping regions: the gradients add up
    build.items.remove(eqn)
    return value, config


def _cotangent_init(context, plan, position):
    """The cotangent of the loop's result ``position`` entering the reverse loop (zeros
    when no cotangent reached that result)."""
    cotangent = plan.cotangents.get(position)
    if cotangent is not None:
        return cotangent
    cache = plan.__dict__.setdefault("zero_cotangents", {})
    if position not in cache:
        eqn = next(e for e in plan.group if e.params_dict["output"] == position) if any(
            e.params_dict["output"] == position for e in plan.group) else None
        aval = plan.body.outputs[position].aval
        if eqn is not None:
            value = context.tracer_for(eqn.out)
            shape, dtype = value.shape, value.dtype
        else:
            shape = _live(aval.shape, context, context.symbol_values())
            dtype = aval.dtype
        cache[position] = context.process(full_p, (), {"shape": tuple(shape), "value": 0,
                                                       "dtype": np.dtype(dtype)})
    return cache[position]


def _rewrite_forward(context, plan, stacked_carry, stacked_values, slot, rows, bindings):
    """Replace the forward loop's equations in the trace by a loop that also stacks the
    residuals; returns ``{"carry": {position: outer var}, "values": {name: outer var}}``."""
    stacks = {"carry": {}, "values": {}}
    if not stacked_carry and not stacked_values:
        return stacks
    body, num_carry, group = plan.body, plan.num_carry, plan.group
    mark = len(context.body)
    build = _Builder(context)
    new_params, inits, writes, order = [], [], [], []
    for position in sorted(stacked_carry):
        var = body.inputs[position]
        shape, rank = var.aval.shape, len(var.aval.shape)
        initial = context.tracer_for(plan.operands[position])
        row = context.process(reshape_p, (initial,), {"shape": (1, *initial.shape)})
        config = _row_config(0, _live(rows["carry"], context, bindings), rank)
        init = context.process(pad_p, (row,), {"config": config})
        param = context.new_var(init.ir_var.aval)
        value = body.outputs[position]
        if not isinstance(value, Var):
            raise NotReversible("reverse mode through a loop that carries a constant")
        value_row = build.emit(reshape_p, (value,), {"shape": (1, *shape)}, (1, *shape),
                               var.aval.dtype)
        writes.append(build.write(param, value_row, _row_config(slot + 1, rows["carry"],
                                                                rank)))
        new_params.append(param)
        inits.append(init)
        order.append(("carry", position))
    for name, var in stacked_values.items():
        shape, rank = var.aval.shape, len(var.aval.shape)
        init = context.process(full_p, (), {
            "shape": _live((rows["values"], *shape), context, bindings), "value": 0,
            "dtype": var.aval.dtype})
        param = context.new_var(init.ir_var.aval)
        value_row = build.emit(reshape_p, (var,), {"shape": (1, *shape)}, (1, *shape),
                               var.aval.dtype)
        writes.append(build.write(param, value_row, _row_config(slot, rows["values"], rank)))
        new_params.append(param)
        inits.append(init)
        order.append(("values", name))
    created = context.body[mark:]
    del context.body[mark:]
    new_body = Graph(body.name, tuple(body.inputs[:num_carry]) + tuple(new_params)
                     + tuple(body.inputs[num_carry:]), body.constants,
                     tuple(body.body) + tuple(build.items),
                     tuple(body.outputs) + tuple(writes), body.symbols)
    operands = (tuple(plan.operands[:num_carry]) + tuple(init.ir_var for init in inits)
                + tuple(plan.operands[num_carry:]))
    total = num_carry + len(new_params)
    loop_params = {**plan.params, "body": new_body, "num_carry": total}

    # Real values: run the rewritten loop (the first call's residuals).
    values = [context.concrete(atom.name) if isinstance(atom, Var) else atom.value
              for atom in operands]
    start = _evaluate(plan.params["start"], bindings)
    stop = _evaluate(plan.params["stop"], bindings)
    finals = run_body(new_body, plan.params["index"], start, stop, plan.params["step"],
                      total, [np.asarray(value) for value in values[:total]], values[total:],
                      bindings)
    positions = [next(number for number, item in enumerate(context.body) if item is eqn)
                 for eqn in group]
    replaced = []
    for eqn in group:
        new = dict(loop_params, output=eqn.params_dict["output"])
        replaced.append(Eqn(loop_p, operands, tuple(sorted(new.items())), eqn.out))
    outs = []
    for number, init in enumerate(inits):
        new = dict(loop_params, output=num_carry + number)
        out = context.new_var(init.ir_var.aval)
        shape = init.shape
        context.values[out.name] = (finals[num_carry + number], shape)
        outs.append(out)
        replaced.append(Eqn(loop_p, operands, tuple(sorted(new.items())), out))
    low, high = min(positions), max(positions)
    if high - low + 1 != len(group):
        raise NotReversible("reverse mode through a loop whose results are recorded "
                               "apart")
    context.body[low:high + 1] = list(created) + replaced
    for (kind, key), out in zip(order, outs):
        stacks[kind][key] = out
    return stacks


def _evaluate(value, bindings):
    return value.evaluate(bindings) if isinstance(value, DimExpr) else value


def _run_reverse(context, plan, reverse_body, carried_init, free_operands, trips, bindings):
    """Record the reverse loop (one equation per carried value) and run it for real."""
    params = plan.params
    start, step = params["start"], params["step"]
    last = start + (trips - 1) * step
    stop = start - step
    num = len(carried_init)
    operands = tuple(value.ir_var for value in carried_init) + tuple(free_operands)
    loop_params = dict(body=reverse_body, index=params["index"], start=last, stop=stop,
                       step=-step, num_carry=num)
    values = [np.asarray(context.concrete(atom.name)) for atom in operands]
    finals = run_body(reverse_body, params["index"], _evaluate(last, bindings),
                      _evaluate(stop, bindings), -step, num, values[:num], values[num:],
                      bindings)
    tracers = []
    for position, (init, final) in enumerate(zip(carried_init, finals)):
        out = context.new_var(init.ir_var.aval)
        new = dict(loop_params, output=position)
        context.body.append(Eqn(loop_p, operands, tuple(sorted(new.items())), out))
        context.values[out.name] = (final, init.shape)
        tracers.append(Tracer(context, out, final, init.shape))
    return tracers
