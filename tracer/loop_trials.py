"""The traced trips of a loop being captured (``tracejit.tracer.loops``): iterations 1 and
2 run on fresh block parameters, the index a ``SymInt`` (``tracejit.tracer.loop_index``),
and their recordings are what ``loop_generalize`` makes one body of.

A trial refuses capture (``Refused``) where the body does what the loop's slots cannot
show: an in-place write into an array no carry holds, a container entry aliasing a carried
array the body updates in place, a ``KeyError`` or ``IndexError`` that the unrolled run
raises where eager does.
"""

from __future__ import annotations

from . import loop_write_through, tensor_methods
from .ir import Eqn
from .loop_carries import ArrayCarry
from .loop_containers import ContainerCarry, Refusal
from .loop_generalize import Refused
from .traced_array import Tracer


def _fresh(context, value):
    var = context.new_var(value.ir_var.aval)
    tracer = Tracer(context, var, value.lazy_value(), value.shape)
    context.values[var.name] = (tracer.raw_value, tracer.shape)
    return tracer



class Trial:
    """One traced iteration: block parameters, outputs (flat slots), the recorded items,
    the prints it would have written, and the containers' reads."""

    def __init__(self, context, body, t, carries, slots):
        params = [_fresh(context, value) if isinstance(value, Tracer) else value
                  for value in slots]
        tensor_methods.note_stand_ins(context, [  # h.detach() of a carried Tensor
            (param.ir_var, value) for param, value in zip(params, slots)
            if isinstance(value, Tracer)])
        self.params = tuple(param.ir_var for param in params)  # before writes rebind them
        objects, position = [], 0
        for carry in carries:
            objects.append(carry.enter(t, params[position: position + carry.slot_count]))
            position += carry.slot_count
        mark = len(context.body)
        saved_prints = getattr(context, "trial_prints", None)
        self.prints = context.trial_prints = []
        saved_writes = getattr(context, "trial_writes", None)
        writes = context.trial_writes = {}  # Tracer._update: arrays written in place
        # a captured loop's list another loop's trial made a list of (costs.append in a
        # second loop): its entries are reads the trial records and throws away, so the
        # list is the rows again after it (else the unrolled trips read undefined vars)
        saved_materialized = getattr(context, "trial_materialized", None)
        materialized = context.trial_materialized = []
        context.loop_depth = getattr(context, "loop_depth", 0) + 1
        try:
            returned = tuple(body(t, *objects))
            _check_aliasing(carries, objects, returned, self.params)
            _check_shared_memory(carries, objects, returned, self.params, slots)
            outputs = []
            for carry, proxy, value in zip(carries, objects, returned):
                outputs += carry.leave(proxy, value)
            # (the next trial's parameters stand for these, recorded until the trial ends)
            tensor_methods.note_stand_ins(context, [(output.ir_var, output) for output in
                                                    outputs if isinstance(output, Tracer)])
        except Refusal as refusal:
            raise Refused(str(refusal)) from None
        except (KeyError, IndexError) as error:  # the unrolled run raises it where eager does
            raise Refused(f"iteration {t} raised {type(error).__name__}: {error}") from None
        finally:
            context.loop_depth -= 1
            context.trial_prints = saved_prints
            context.trial_writes = saved_writes
            context.trial_materialized = saved_materialized
            for stacked in materialized:
                stacked.forget_entries()
            self.recorded = context.body[mark:]
            del context.body[mark:]
            outside = _undo_outside_writes(writes, self.params, self.recorded)
        if outside:
            raise Refused("the body writes in place into an array no loop variable holds "
                          "(`self.h[t] = ...`, `cache['h'][t] = ...` on an array made before "
                          "the loop)")
        self.outputs = outputs
        self.reads = [getattr(proxy, "_reads", None) for proxy in objects]


def _undo_outside_writes(writes, params, recorded):
    """Put back the arrays a trial wrote in place that were made before it and are no
    block parameter: one held in a dict or an attribute (EpyNN's ``layer.fc['h'][s] =
    h``, ``self.h[t] = h``), which no carry tracks. Left holding the trial's value (thrown
    away with the trial) they made the unrolled trips read an undefined var ('uses %46
    before its definition': the function never compiled). Whether any was put back."""
    defined = {var.name for var in params} | {
        item.out.name for item in recorded if isinstance(item, Eqn)}
    outside = [entry for entry in writes.values() if entry[1].name not in defined]
    for tracer, var, value, shape in outside:
        tracer.ir_var, tracer.raw_value, tracer.shape = var, value, shape
    return bool(outside)


def _check_aliasing(carries, objects, returned, param_vars):
    """``h += x[t]; hs[t] = h`` (or ``outs.append(h)``): NumPy stores one array that the
    next step updates in place, so every entry ends up the last value. A container entry
    that is a carried array the body updates in place refuses capture (unrolled, the trace
    follows the aliasing)."""
    updated, position = set(), 0
    for carry, proxy, value in zip(carries, objects, returned):
        if isinstance(carry, ArrayCarry) and value is proxy and (
            value.ir_var is not param_vars[position]
        ):
            updated.add(id(value))
        position += carry.slot_count
    if not updated:
        return
    for carry, proxy in zip(carries, objects):
        current = getattr(proxy, "_current", None)
        leaves = current if isinstance(current, tuple) else (current,)
        if any(id(leaf) in updated for leaf in leaves):
            raise Refused(f"`{carry.name}` stores an array the loop updates in place (h += "
                          "...): NumPy's entries all alias it")


def _check_shared_memory(carries, objects, returned, param_vars, slots):
    """A carried array the body writes in place while it is a view of another array, or
    while a view of it lives that is no carried value (``v = y[1:]`` before ``for t in
    ...: v[t] = v[t] * 0.5 + y[t]``; ``acc = out[0]`` before ``acc += x[t]``): NumPy's
    write shows in the other name, where the trip's proxy has no base and no views. Noted
    on the carry (``shared``: ``tracejit.tracer.loop_write_through``): the capture stands
    when the body reads none of that memory, and the final value is written into it at
    exit (``ArrayCarry.after``)."""
    position = 0
    for carry, proxy, value in zip(carries, objects, returned):
        outer = slots[position] if position < len(slots) else None
        if isinstance(carry, ArrayCarry) and isinstance(outer, Tracer) and value is proxy and (
                value.ir_var is not param_vars[position]):
            # (the second trial's slots are the first's outputs: noted by the first)
            carry.shared = carry.shared or loop_write_through.sharing(carry.name, outer, slots)
        position += carry.slot_count



def traced_pair(context, body, t1, step, carries, index):
    """Iterations 1 and 2 traced, the index a ``SymInt`` of ``index`` at trips ``t1`` and
    ``t1 + step``; containers' reads decided (and traced again with their windows when a
    read reaches back into earlier iterations)."""
    inner_names = context.loop_count
    for attempt in range(2):
        for carry in carries:
            if isinstance(carry, ContainerCarry):
                carry.begin()
        try:
            slots = [slot for carry in carries for slot in carry.setup()]
        except Refusal as refusal:
            raise Refused(str(refusal)) from None
        context.loop_count = inner_names  # loops nested in the body: the same index names
        trial1 = Trial(context, body, index.at(t1), carries, slots)
        context.loop_count = inner_names
        trial2 = Trial(context, body, index.at(t1 + step), carries, trial1.outputs)
        if attempt:
            return slots, trial1, trial2
        again = False
        for carry, reads1, reads2 in zip(carries, trial1.reads, trial2.reads):
            if isinstance(carry, ContainerCarry):
                try:
                    again |= carry.decide(reads1, reads2)
                except Refusal as refusal:
                    raise Refused(str(refusal)) from None
        if not again:
            return slots, trial1, trial2
    raise AssertionError("unreachable")
