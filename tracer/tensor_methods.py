"""Tensor methods on traced values: ``x.detach()`` inside a jit function called with Tensors.

Eagerly, values computed from Tensor arguments (or from Tensors the function reaches,
``self.W``) are Tensors, and ``y.detach()`` is the same data cut off from the graph; a
value computed from plain ndarrays only is an ndarray, which has no ``detach`` (NumPy's
AttributeError, so that call keeps running eagerly). Traced, ``detach`` is the
``stop_gradient`` primitive: the backward pass stops there, as the tape does.

The detached value shares its buffer with ``y`` eagerly (a write through either shows in
the other): it is noted as a view of unknown region of ``y``, so such a write is refused
(the call runs eagerly) instead of leaving one of them stale.

>>> import numpy as np
>>> from tracejit import jit, tensor
>>> @jit(cache=False)
... def centred(w):
...     return ((w - w.detach().mean()) ** 2).sum()
>>> w = tensor([1.0, 2.0, 4.0], requires_grad=True)
>>> centred(w).backward()
>>> w.grad.round(6).tolist()  # 2 (w - mean): no gradient through the detached mean
[-2.666667, -0.666667, 3.333333]
"""

from __future__ import annotations

from .argument_writes import OutsideArrayWrite
from .ir import Eqn, Var
from .ops import stop_gradient_p


def tensor_valued(context, tracer):
    """Whether ``tracer`` is eagerly a Tensor: it depends on an argument or outside value
    that is a Tensor."""
    return _depends_on_tensors(context, tracer, gradients_only=False)


def carries_gradient(context, tracer):
    """Whether ``tracer`` depends on a Tensor input that requires grad other than through
    ``stop_gradient``: eagerly it may then be a Tensor with history (``self.out = h``),
    which a compiled write would store without its graph. A running statistic,
    ``0.9 * self.running_mean + 0.1 * mean.detach()``, has none."""
    return _depends_on_tensors(context, tracer, gradients_only=True)


def tensor_outputs(context, atoms):
    """The positions in ``atoms`` (a trace's program outputs: its result's leaves and the
    values its writes store) of the values that are eagerly Tensors, which a compiled call
    returns or stores as Tensors (``runtime.variants.OutputPlan.tensors``); the others are
    NumPy's arrays and scalars, as eagerly: ``return loss, x * 3`` with ``x`` an ndarray."""
    reached = set(_reached(context, gradients_only=False))
    return frozenset(position for position, atom in enumerate(atoms)
                     if isinstance(atom, Var) and atom.name in reached)


def stored_outputs(writes):
    """The program outputs ``writes`` store as new objects (``self.last = h``,
    ``config["v"] = v``, ``self.hs.append(h)``), not copied into an array there
    (``self.W -= g``): a Tensor eagerly is stored as a Tensor."""
    found = set()
    for write in writes:
        if isinstance(write, OutsideArrayWrite):
            continue  # (copied into the array the entry guard found)
        found |= {index for kind, index in written_pairs(write) if kind in ("array", "scalar")}
    return found


def written_pairs(write):
    """``(kind, value)`` of each leaf ``write`` stores (one pair for a write of one leaf)."""
    return write.leaves if hasattr(write, "leaves") else ((write.kind, write.value),)


def note_plain(context, tracers):
    """Mark ``tracers`` as NumPy values eagerly whatever they are computed from:
    ``value_and_grad``'s value, aux and gradients, which it returns as NumPy's (its tape's
    Tensors stay inside it). Values computed from them are Tensors only through another
    Tensor (``v * w``)."""
    inputs = {atom.name for atom in getattr(context, "inputs", ())}
    plain = getattr(context, "plain_values", set())
    context.plain_values = plain | {tracer.ir_var.name for tracer in tracers
              if hasattr(tracer, "ir_var") and tracer.ir_var.name not in inputs}


def note_stand_ins(context, pairs):
    """``(var, value)`` pairs: a captured loop's block parameter ``var`` stands for
    ``value`` in a traced trip (the carried ``h``), and is a Tensor eagerly (and carries
    gradients) when ``value`` is, so ``h.detach()`` there is the Tensor method, as at the
    first trip. ``value`` may be a block parameter's or a traced trip's result, whose
    equations the trace drops later (``note_stand_ins`` them while they are recorded)."""
    if not getattr(context, "tensor_arguments", False):
        return
    known = getattr(context, "stand_ins", {})
    pairs = [(var, value.ir_var.name) for var, value in pairs
             if hasattr(value, "ir_var")]  # (a Tracer: traced_array imports this module)
    if not pairs:
        return
    # one walk of the trace for all of them (a loop may carry dozens of values)
    tensors = set(_reached(context, gradients_only=False))
    gradients = set(_reached(context, gradients_only=True))
    flags = {var.name: known.get(name) or (name in tensors, name in gradients)
             for var, name in pairs}
    context.stand_ins = {**known, **{name: flag for name, flag in flags.items() if any(flag)}}


def _depends_on_tensors(context, tracer, gradients_only):
    """Whether ``tracer`` depends on a Tensor input (``gradients_only``: one that requires
    grad, and not through ``stop_gradient``)."""
    name = tracer.ir_var.name
    return any(reached == name for reached in _reached(context, gradients_only))


def _reached(context, gradients_only):
    """The names of the trace's values that depend on a Tensor input (``gradients_only``:
    one that requires grad, and not through ``stop_gradient``), in the body's order (a
    caller may stop early)."""
    reached = {name for name, requires_grad in getattr(context, "tensor_inputs", {}).items()
               if requires_grad or not gradients_only}
    reached |= {name for name, (tensor, gradient) in getattr(context, "stand_ins", {}).items()
                if (gradient if gradients_only else tensor)}
    for implicit in getattr(context, "implicit_used", {}).values():
        requires_grad = getattr(implicit.value, "requires_grad", None)  # (None: ndarray)
        if requires_grad or (requires_grad is not None and not gradients_only):
            reached.add(context.inputs[implicit.input_index].name)
    if not reached:
        return
    yield from reached
    plain = getattr(context, "plain_values", ())
    for eqn in context.body:
        if not isinstance(eqn, Eqn) or (eqn.prim is stop_gradient_p and gradients_only):
            continue
        if eqn.out.name not in plain and any(
                isinstance(atom, Var) and atom.name in reached for atom in eqn.inputs):
            reached.add(eqn.out.name)
            yield eqn.out.name


def as_numpy(tracer):
    """``tracer.numpy()`` where it is eagerly a Tensor: its buffer as an ndarray, so the
    value without gradient, and what is computed from it alone is NumPy's (``mask =
    h.detach().numpy() > 0``), as ``value_and_grad``'s value is."""
    plain = detach(tracer)
    note_plain(tracer.context, [plain])
    return plain


def detach(tracer):
    """``tracer.detach()``: the value, with no gradient through it."""
    from .traced_array import note_view  # cycle: traced_array reaches this module

    detached = stop_gradient_p(tracer)
    note_view(tracer, detached)
    return detached
