"""Traces that record the backward pass too: ``trace_with_gradients(fn, *args)``.

The tracer records the function; when gradients are asked for and some input is a Tensor
requiring grad, ``record_gradients`` (handed to ``trace`` in ``BACKWARD``) appends reverse
mode (``tracejit.tracer.autodiff``) to the same graph: one cotangent input per
floating-point output, one gradient output per input that requires grad. ``GradientPlan``
says how the joint graph is laid out; ``tracejit.tracer.partition`` splits it into forward
and backward programs.

>>> from tracejit import tensor
>>> t = trace_with_gradients(lambda x: (x * x).sum(), tensor([1.0, 2.0], requires_grad=True))
>>> t.gradients
GradientPlan(forward_outputs=1, differentiable=[0], cotangent_inputs=[1], wrt=[('leaf', 0)])
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import numpy as np

from .autodiff import reverse
from .errors import UnsupportedError
from .ir import Eqn, Var
from .ops import loop_p
from .traced_array import Tracer
from .tracing import trace


@dataclass
class GradientPlan:
    """How a joint forward+backward graph (``trace_with_gradients``) is laid out.

    Outputs ``[:forward_outputs]`` are the function's; then one gradient per ``wrt``
    entry: ``("leaf", argument leaf position)`` or ``("implicit", implicit input number)``.
    ``cotangent_inputs`` are the graph inputs holding the cotangent of each output in
    ``differentiable`` (program output positions)."""

    forward_outputs: int
    differentiable: list
    cotangent_inputs: list
    wrt: list
    # inputs that require grad and reach no differentiable output: no gradient, no parent
    # of the compiled node (their .grad stays None, as eagerly); the entry guard checks
    # that they require grad all the same
    unreached: list = field(default_factory=list, repr=False)


def trace_with_gradients(fn, *args, grad=True, **options):
    """``tracing.trace(fn, *args, **options)``, and with ``grad`` (the runtime passes
    ``is_grad_enabled()``) the backward pass for every input that is a Tensor requiring
    grad: ``Trace.gradients`` is then a ``GradientPlan`` (None when no input requires
    grad)."""
    return trace(fn, *args, backward=BACKWARD if grad else None, **options)


def wants_gradients(leaves, implicit):
    """Whether an argument leaf or an outside array (``implicit``: ``{id: (path, obj)}``)
    is a Tensor requiring grad (loops are then captured so that they can be reversed)."""
    return any(getattr(value, "requires_grad", False)
               for value in (*leaves, *(obj for _, obj in implicit.values())))


def record_gradients(context, out_leaves, output_atoms, leaves, traced_leaves, mutated,
                     is_output_leaf):
    """Append the backward pass to the trace: cotangent inputs for the floating-point
    outputs, gradients for every input that is a Tensor requiring grad. ``is_output_leaf``
    says which result leaves are program outputs (the rest are static)."""
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
    origins = _origins(context, tracers)
    reaching = 0  # the inputs in wrt that some differentiable output depends on
    for leaf in out_leaves:
        # (a weak 0-d value is a Python float eagerly, loss.item(): no gradient either)
        if isinstance(leaf, Tracer) and leaf.dtype.kind == "f" and not leaf.aval.weak and (
                origins.get(leaf.ir_var.name, 0)):
            seed = context.add_input(np.ones_like(np.asarray(leaf.value)), leaf.shape)
            outputs.append(leaf)
            seeds.append(seed)
            differentiable.append(program_index)
            cotangent_inputs.append(len(context.inputs) - 1)
            reaching |= origins[leaf.ir_var.name]
        if is_output_leaf(leaf):
            program_index += 1
    # A Tensor requiring grad that no output depends on (b in (a * b.detach()).sum())
    # keeps .grad None after backward(), as eagerly: it is no parent of the compiled node
    # (whose backward would fill it with zeros); the entry guard still asks that it
    # require grad (``unreached``).
    unreached = [entry for number, entry in enumerate(wrt) if not reaching >> number & 1]
    tracers = [tracer for number, tracer in enumerate(tracers) if reaching >> number & 1]
    wrt = [entry for number, entry in enumerate(wrt) if reaching >> number & 1]
    forward_outputs = len(output_atoms)
    for gradient in reverse(context, outputs, seeds, tracers):
        atom, _, _ = context.atom(gradient)
        output_atoms.append(atom)
    return GradientPlan(forward_outputs, differentiable, cotangent_inputs, wrt, unreached)


def _origins(context, wrt):
    """``{name: bits}``: the values that depend on the inputs ``wrt`` (bit ``k`` set: on
    ``wrt[k]``) as the eager tape connects Tensors (``Tensor.__tracejit_bind__``): through
    a differentiable primitive with a floating-point result, or a captured loop; not
    through ``stop_gradient`` (``y.detach()``), a comparison or argmax. Eagerly a value
    with no such path is a Tensor that does not require grad, so the compiled call
    returns it without a node (a detached result passed to ``np.asarray`` must not raise
    the lost-gradient error)."""
    origins = {}
    for number, tracer in enumerate(wrt):
        origins[tracer.ir_var.name] = origins.get(tracer.ir_var.name, 0) | 1 << number
    _propagate(context.body, origins)
    return origins


def _propagate(items, origins):
    """Extend ``origins`` (``_origins``) over the equations among ``items``."""
    for eqn in items:
        if not isinstance(eqn, Eqn) or (eqn.prim.vjp is None and eqn.prim is not loop_p) or (
                np.dtype(eqn.out.aval.dtype).kind != "f"):
            continue
        entering = [origins.get(atom.name, 0) if isinstance(atom, Var) else 0
                    for atom in eqn.inputs]
        bits = _loop_origins(eqn, entering) if eqn.prim is loop_p else 0
        if eqn.prim is not loop_p:
            for atom_bits in entering:
                bits |= atom_bits
        if bits:
            origins[eqn.out.name] = origins.get(eqn.out.name, 0) | bits


def _loop_origins(eqn, entering):
    """The origins of a loop equation's result, through its body: ``h = h.detach()`` at
    the end of a step leaves the carried ``h`` with none, whatever its step computed from
    the weights (a loop's result counted as depending on every operand was a Tensor
    requiring grad where eager's is not). ``entering``: the origins of its operands (the
    carried values, then the values the body reads). Carried values gain origins trip by
    trip: iterated until they stop changing."""
    params = eqn.params_dict
    body, num_carry = params["body"], params["num_carry"]
    carried = list(entering[:num_carry])
    while True:
        origins = {var.name: bits for var, bits in zip(body.inputs, carried + list(
            entering[num_carry:])) if bits}
        _propagate(body.body, origins)
        after = [bits | (origins.get(atom.name, 0) if isinstance(atom, Var) else 0)
                 for bits, atom in zip(carried, body.outputs[:num_carry])]
        if after == carried:
            break
        carried = after
    result = body.outputs[params["output"]]
    return origins.get(result.name, 0) if isinstance(result, Var) else 0


# What trace() takes as its ``backward``: whether to record reverse mode, and how.
BACKWARD = types.SimpleNamespace(wanted=wants_gradients, record=record_gradients)
