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
    tensors = set(getattr(context, "tensor_inputs", ()))
    for implicit in getattr(context, "implicit_used", {}).values():
        if hasattr(implicit.value, "requires_grad"):
            tensors.add(context.inputs[implicit.input_index].name)
    name = tracer.ir_var.name
    if name in tensors:
        return True
    for eqn in context.body:
        if isinstance(eqn, Eqn) and any(isinstance(atom, Var) and atom.name in tensors
                                        for atom in eqn.inputs):
            if eqn.out.name == name:
                return True
            tensors.add(eqn.out.name)
    return False


def detach(tracer):
    """``tracer.detach()``: the value, with no gradient through it."""
    from .traced_array import note_view  # cycle: traced_array reaches this module

    detached = stop_gradient_p(tracer)
    note_view(tracer, detached)
    return detached
