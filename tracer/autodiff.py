"""Reverse-mode differentiation from the op table's VJP rules.

``cotangent`` is the one place a VJP rule is applied: the eager autograd tape
(``tracejit.runtime.autograd``) and differentiation of traced graphs both call it, so gradients
are the same code in eager and compiled mode.

>>> from tracejit.tracer.ops import multiply_p
>>> x, y = np.array([1.0, 2.0]), np.array(3.0)
>>> cotangent(multiply_p, 1, np.ones(2), (x, y), x * y, {}).item()
3.0
"""

from __future__ import annotations

import numpy as np

from . import pytree, tensor_methods
from .abstract import abstractify
from .errors import UnsupportedError
from .ir import Eqn, Var
from .loop_autodiff import loop_key, loop_vjp
from .numpy_api import zeros_like
from .ops import broadcast_to, cast_p, loop_p, reduce_sum, reshape, shape_of
from .ops.structural import _same_dims
from .primitives import bind, current_context, is_traced_array


def needs_gradient(value):
    """Only floating-point arrays carry gradients (PyTorch's rule); Python scalars never."""
    aval = abstractify(value)
    return not aval.weak and aval.dtype.kind in "fc"


def sum_to_shape(value, shape):
    """Sum a broadcast cotangent back to ``shape`` (the transpose of broadcasting)."""
    value_shape = shape_of(value)
    if _same_dims(tuple(value_shape), tuple(shape)):
        return value
    lead = len(value_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, dim in enumerate(shape) if dim == 1 and value_shape[lead + i] != 1
    )
    if axes:
        value = reduce_sum(value, axes)
    value = reshape(value, shape)
    return broadcast_to(value, shape)


def cotangent(prim, argnum, g, primals, out, params):
    """The cotangent of ``primals[argnum]`` given the output's cotangent ``g``, or ``None``."""
    primal = primals[argnum]
    rule = prim.vjp_rule(argnum) if prim.vjp is not None else None
    if rule is None or not needs_gradient(primal):
        return None
    value = sum_to_shape(rule(g, *primals, out=out, **params), shape_of(primal))
    dtype = primal.dtype
    if getattr(value, "dtype", None) != dtype:
        value = bind(cast_p, value, dtype=dtype)
    return value


# --- reverse mode over a live trace --------------------------------------------------------
def reverse(context, outputs, seeds, wrt, since=0):
    """Record, in ``context``, the gradients of ``outputs`` (tracers, with cotangents
    ``seeds``) with respect to the tracers ``wrt``: the equations recorded so far (from
    ``context.body[since]`` on) are walked backwards and each one's VJP rules are applied
    to tracers, so the backward pass lands in the same graph (a joint forward+backward
    graph). A captured loop's results are differentiated together by
    ``tracejit.tracer.loop_autodiff`` (the reverse of a loop is a loop). Returns one tracer per
    ``wrt`` (zeros where no gradient flows)."""
    body = [item for item in context.body[since:] if isinstance(item, Eqn)]
    backward_from = len(context.body)
    wrt_names = [tracer.ir_var.name for tracer in wrt]
    depends = set(wrt_names)
    for eqn in body:
        if any(isinstance(atom, Var) and atom.name in depends for atom in eqn.inputs):
            depends.add(eqn.out.name)
    cotangents = {}

    def accumulate(name, value):
        cotangents[name] = value if name not in cotangents else cotangents[name] + value

    for output, seed in zip(outputs, seeds):
        if output.ir_var.name in depends:
            accumulate(output.ir_var.name, seed)
    loops_done = set()
    for eqn in reversed(body):
        if eqn.prim is loop_p:
            key = loop_key(eqn)
            if key in loops_done:
                continue
            loops_done.add(key)
            group = [item for item in body if item.prim is loop_p and loop_key(item) == key]
            loop_cotangents = {item.params_dict["output"]: cotangents.pop(item.out.name, None)
                               for item in group}
            needs = [position for position, atom in enumerate(eqn.inputs)
                     if isinstance(atom, Var) and atom.name in depends]
            if not needs or all(value is None for value in loop_cotangents.values()):
                continue
            for position, value in loop_vjp(context, group, loop_cotangents, needs).items():
                accumulate(eqn.inputs[position].name, value)
            continue
        g = cotangents.pop(eqn.out.name, None)
        if g is None or eqn.prim.vjp is None:
            continue
        primals = tuple(context.tracer_for(atom) for atom in eqn.inputs)
        out = context.tracer_for(eqn.out)
        params = {key: context.live_param(value) for key, value in eqn.params}
        for argnum, atom in enumerate(eqn.inputs):
            if isinstance(atom, Var) and atom.name in depends:
                value = cotangent(eqn.prim, argnum, g, primals, out, params)
                if value is not None:
                    accumulate(atom.name, value)
    # The backward half, for tracejit.tracer.discontinuities: its masks pick derivatives.
    context.gradient_vars = getattr(context, "gradient_vars", frozenset()) | {
        item.out.name for item in context.body[backward_from:] if isinstance(item, Eqn)}
    return [cotangents.get(name) if cotangents.get(name) is not None else zeros_like(tracer)
            for name, tracer in zip(wrt_names, wrt)]


def value_and_grad_traced(function, args, kwargs, argnums, has_aux):
    """``value_and_grad`` when the arguments are tracers: forward and backward are
    recorded into the current trace (``jit(value_and_grad(loss))`` is one program)."""
    context = current_context()
    positions = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for position in positions:
        for leaf in pytree.flatten(args[position])[0]:
            dtype = leaf.dtype if is_traced_array(leaf) else np.asarray(
                getattr(leaf, "data", leaf)).dtype
            if leaf is not None and dtype.kind != "f":
                # as the eager value_and_grad refuses it (runtime.functional._leaf_for):
                # an int argument's gradient came out as zeros in its dtype
                raise TypeError(f"grad: differentiated arguments must be floating point, "
                                f"got {dtype}; cast with .astype(np.float64)")
    # Through the trace's front end (buffers filled in place, calls checked), as if the
    # function had been called from the traced code. Loops stay captured: their reverse
    # is a loop (tracejit.tracer.loop_autodiff).
    hooks = context.hooks
    # A differentiated argument the function writes into (x += 1, x[1:3] *= 2) is rebound
    # to the written value: the gradient is with respect to the value passed in.
    passed_in = {id(leaf): context.tracer_for(leaf.ir_var)
                 for position in positions for leaf in pytree.flatten(args[position])[0]
                 if is_traced_array(leaf)}
    records, context.records_gradients = getattr(context, "records_gradients", False), True
    try:
        result = (hooks.function_for(function) if hooks else function)(*args, **kwargs)
    finally:
        context.records_gradients = records
    value, aux = result if has_aux else (result, None)
    if not is_traced_array(value) or value.size != 1 or value.dtype.kind != "f":
        raise TypeError("grad needs the function to return a floating-point scalar")
    # One backward pass for every differentiated argument (a loop is reversed once).
    trees = [pytree.flatten(args[position]) for position in positions]
    for leaves, _ in trees:
        for leaf in leaves:
            if not is_traced_array(leaf) and np.asarray(leaf).dtype.kind == "f":
                # A Python float argument is a constant of the trace (or a run-time scalar
                # no gradient flows to): its gradient would come out 0. The eager tape has it.
                raise UnsupportedError(
                    "a gradient with respect to a Python or NumPy float scalar argument is "
                    "not traced; pass a 0-d array (np.float64(2.0) is a scalar too: use "
                    "np.array(2.0))")
    traced = [passed_in.get(id(leaf), leaf) for leaves, _ in trees for leaf in leaves
              if is_traced_array(leaf)]
    grads = iter(reverse(context, [value], [np.ones_like(value)], traced))
    gradients = [pytree.unflatten(tree, [
        next(grads) if is_traced_array(leaf) else None if leaf is None else np.zeros_like(leaf)
        for leaf in leaves
    ]) for leaves, tree in trees]
    grads = gradients[0] if isinstance(argnums, int) else tuple(gradients)
    # eagerly NumPy's values, even of Tensor arguments (runtime.functional.value_and_grad)
    tensor_methods.note_plain(context, pytree.flatten((value, aux, grads))[0])
    return ((value, aux) if has_aux else value), grads
