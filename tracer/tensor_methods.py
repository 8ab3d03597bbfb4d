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


def _depends_on_tensors(context, tracer, gradients_only):
    """Whether ``tracer`` depends on a Tensor input (``gradients_only``: one that requires
    grad, and not through ``stop_gradient``)."""
    reached = {name for name, requires_grad in getattr(context, "tensor_inputs", {}).items()
               if requires_grad or not gradients_only}
    for implicit in getattr(context, "implicit_used", {}).values():
        requires_grad = getattr(implicit.value, "requires_grad", None)  # (None: ndarray)
        if requires_grad or (requires_grad is not None and not gradients_only):
            reached.add(context.inputs[implicit.input_index].name)
    name = tracer.ir_var.name
    if name in reached:
        return True
    for eqn in context.body:
        if not isinstance(eqn, Eqn) or (eqn.prim is stop_gradient_p and gradients_only):
            continue
        if any(isinstance(atom, Var) and atom.name in reached for atom in eqn.inputs):
            if eqn.out.name == name:
                return True
            reached.add(eqn.out.name)
    return False


def detach(tracer):
    """``tracer.detach()``: the value, with no gradient through it."""
    from .traced_array import note_view  # cycle: traced_array reaches this module

    detached = stop_gradient_p(tracer)
    note_view(tracer, detached)
    return detached
