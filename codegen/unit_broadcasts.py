"""Symbolic dims that broadcast as 1, made literal 1s before scheduling.

A dim computed from a symbol can be 1 in a bucket and broadcast against a longer dim:
``x[1:] * x`` for a length-2 ``x``, or ``len(x) - 2`` where a shape guard says
``len(x) == 3``. Kernels broadcast only literal 1s (``kernel_index.broadcast_index``):
read at the longer dim's index, such an operand would be read out of bounds.
``unit_broadcasts(graph)`` reshapes each such operand to a literal 1 first, deciding
``dim == 1`` as the trace's shape rule did: by the symbols' ranges, else by the graph's
shape guards (``tracer.ir.shape_context``).

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> graph = trace(lambda x: np.broadcast_to(x[2:], (4, x.shape[0])) + x, np.ones(3),
...               dynamic=True).graph
>>> [eqn.prim.name for eqn in unit_broadcasts(graph).equations]
['slice', 'reshape', 'broadcast_to', 'add']
"""

from __future__ import annotations

from dataclasses import replace

from tracejit.tracer.abstract import AbstractArray
from tracejit.tracer.dims import DimExpr, wrap
from tracejit.tracer.ir import Eqn, Var, VerifyError, shape_context
from tracejit.tracer.ops import broadcast_to_p, reshape_p


def unit_broadcasts(graph):
    """``graph`` with a reshape to a literal 1 before each operand of a broadcasting
    equation (pointwise with several operands, ``broadcast_to``) whose symbolic dim is 1
    where the result's dim is another; ``graph`` itself when there is none."""
    context = shape_context(graph)
    names = [var.name for var in graph.inputs] + [var.name for var, _ in graph.constants]
    names += [eqn.out.name for eqn in graph.equations]
    # New vars are numbered past every name: the IR text round-trips only "%<number>".
    number = 1 + max([int(name[1:]) for name in names if name[1:].isdigit()], default=-1)
    body, reshaped = [], {}  # (operand name, shape) -> its reshape's var, made once
    for item in graph.body:
        if isinstance(item, Eqn) and _broadcasts(item):
            inputs = []
            for atom in item.inputs:
                shape = _unit_shape(atom, item.out.aval.shape, context)
                if shape is not None:
                    key = (atom.name, shape)
                    if key not in reshaped:
                        reshaped[key] = Var(f"%{number}", AbstractArray(shape, atom.aval.dtype))
                        number += 1
                        body.append(Eqn(reshape_p, (atom,), (("shape", shape),),
                                        reshaped[key]))
                    atom = reshaped[key]
                inputs.append(atom)
            item = replace(item, inputs=tuple(inputs))
        body.append(item)
    return replace(graph, body=tuple(body)) if reshaped else graph


def _broadcasts(eqn):
    return (eqn.prim.kind == "pointwise" and len(eqn.inputs) > 1) or eqn.prim is broadcast_to_p


def _unit_shape(atom, out_shape, context):
    """``atom``'s shape with its symbolic dims that broadcast as 1 made 1, or None."""
    if not isinstance(atom, Var):
        return None
    shape, unit = list(atom.aval.shape), False
    lead = len(out_shape) - len(shape)
    for axis, dim in enumerate(shape):
        if isinstance(dim, DimExpr) and dim != out_shape[lead + axis] and _is_one(
                dim, context):
            shape[axis], unit = 1, True
    return tuple(shape) if unit else None


def _is_one(dim, context):
    try:
        return bool(wrap(dim, None, context) == 1)
    except VerifyError:  # nothing decides it: the shape rule never asked
        return False
