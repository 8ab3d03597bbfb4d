"""Results that are views of an argument updated in place: ``w -= lr * dw; return w.T``.

NumPy's ``w.T`` there is a view of the caller's ``w``, which holds the update: a write
through the result reaches ``w``. The trace's ``w.T`` is a transpose of the updated value,
which the program would return as a new array. So the result is re-rooted at the
argument's input (``transpose(%0)``, not ``transpose(%3)``): the wrapper returns NumPy's
view of the caller's array (``codegen.schedule.input_view``), which the runtime then
writes the update into (``runtime.variants.OutputPlan``), as eager's is. The traced call
returns the same view of the argument after ``tracing.trace`` has written it back.

    >>> import numpy as np, tracejit as tj
    >>> def sgd(w, dw):
    ...     w -= 0.5 * dw
    ...     return w.T
    >>> w = np.ones((2, 3))
    >>> np.shares_memory(tj.jit(sgd, cache="memory")(w, np.ones((2, 3))), w)
    True
"""

from __future__ import annotations

import numpy as np

from .dims import DimExpr
from .ir import Eqn, Var
from .result_identity import VIEWS
from .traced_array import _is_numpy_scalar


def updated_argument_views(context, out_leaves, traced_leaves, mutated):
    """``{result leaf: (argument leaf, [view equations from the argument outwards])}`` for
    results that are a chain of views of an argument's updated value (its last)."""
    producers = {item.out.name: item for item in context.body if isinstance(item, Eqn)}
    finals = {traced_leaves[position].ir_var.name: position for position in mutated}
    found = {}
    for index, leaf in enumerate(out_leaves):
        var = getattr(leaf, "ir_var", None)
        if isinstance(var, Var) and not leaf.shape and _is_numpy_scalar(leaf):
            continue  # z[()] of a 0-d z: a NumPy scalar, a copy (its reshape is no view)
        chain = []
        while isinstance(var, Var) and var.name not in finals:
            eqn = producers.get(var.name)
            if eqn is None or eqn.prim.name not in VIEWS or not _always_a_view(eqn):
                break
            chain.append(eqn)
            var = eqn.inputs[0]
        if chain and isinstance(var, Var) and var.name in finals:
            found[index] = (finals[var.name], chain[::-1])
    return found


def returned_broadcasts(context, out_leaves, traced_leaves, mutated):
    """``updated_argument_views``' map for results that are views of an argument the call
    does not update, through an ``np.broadcast_to``: the trace's value of that primitive
    is a copy, so the traced call returns NumPy's read-only view of the caller's array
    instead, as compiled calls do (``codegen.schedule.input_view``)."""
    unchanged = [position for position, leaf in enumerate(traced_leaves)
                 if position not in mutated and isinstance(getattr(leaf, "ir_var", None), Var)]
    return {index: (position, chain) for index, (position, chain) in updated_argument_views(
        context, out_leaves, traced_leaves, unchanged).items()
        if any(eqn.prim.name == "broadcast_to" for eqn in chain)}


def broadcasts_of_results(context, out_leaves, excluded=()):
    """``{result leaf: (root, [view equations outwards])}`` for a result that is
    ``np.broadcast_to`` (through other views) of another result's value (``root`` that
    result leaf) or of a value the call computed and returns no other way (``root`` its
    var): the trace's value of that primitive is a writable copy, so the traced call
    returned ``v`` apart from ``base`` in ``return np.broadcast_to(base[:, :1], base.shape),
    base`` where NumPy's (and the compiled call's) ``v`` is a read-only view of ``base``,
    and ``np.broadcast_to(x.sum(0), shape).T`` writable (``codegen.schedule.result_views``
    makes both views for compiled calls)."""
    producers = {item.out.name: item for item in context.body if isinstance(item, Eqn)}
    results = {}
    for index, leaf in enumerate(out_leaves):
        if isinstance(getattr(leaf, "ir_var", None), Var):
            results.setdefault(leaf.ir_var.name, index)
    found = {}
    for index, leaf in enumerate(out_leaves):
        var = getattr(leaf, "ir_var", None)
        if index in excluded or not isinstance(var, Var) or (
                not leaf.shape and _is_numpy_scalar(leaf)):
            continue
        chain = []
        while isinstance(var, Var) and (not chain or var.name not in results):
            eqn = producers.get(var.name)
            if eqn is None or eqn.prim.name not in VIEWS or not _always_a_view(eqn):
                break
            chain.append(eqn)
            var = eqn.inputs[0]
        if not isinstance(var, Var) or not any(eqn.prim.name == "broadcast_to"
                                               for eqn in chain):
            continue
        if results.get(var.name, index) != index:
            found[index] = (results[var.name], chain[::-1])
        elif var.name not in results and var.name in producers:
            found[index] = (var, chain[::-1])
    return found


def _always_a_view(eqn):
    """Whether the wrapper can write NumPy's op as Python (positive slice steps)."""
    name = eqn.prim.name
    if name == "slice":
        return all(isinstance(step, int) and step > 0 for step in eqn.params_dict["steps"])
    return True


def may_copy(chain):
    """Whether a step of ``chain`` is a reshape that merges or splits axes: NumPy copies a
    non-contiguous argument there. The compiled call's wrapper makes its views before the
    runtime writes the update back, so that copy would hold the old values (eager's
    copies the updated array): the program computes the result from the update too, and
    the runtime takes that one when the view is no view (``OutputPlan.refreshed``)."""
    def kept(shape):
        return [dim for dim in shape if not (isinstance(dim, int) and dim == 1)]

    return any(eqn.prim.name == "reshape" and kept(eqn.inputs[0].aval.shape)
               != kept(eqn.out.aval.shape) for eqn in chain)


def rebased(context, chain, source):
    """The var of ``chain`` applied to ``source`` (the argument's input var), recorded."""
    for eqn in chain:
        var = context.new_var(eqn.out.aval)
        context.body.append(Eqn(eqn.prim, (source, *eqn.inputs[1:]), eqn.params, var))
        source = var
    return source


def numpy_view(chain, array, bindings):
    """NumPy's view of ``array`` (the caller's argument) through ``chain`` (as the
    program's wrapper makes it: ``codegen.program._view_source``)."""
    for eqn in chain:
        params = {name: _concrete(value, bindings) for name, value in eqn.params}
        name = eqn.prim.name
        if name == "slice":
            array = array[tuple(map(slice, params["starts"], params["limits"],
                                    params["steps"]))]
        else:
            argument = {"transpose": "perm", "reshape": "shape", "flip": "axes",
                        "broadcast_to": "shape"}[name]
            array = getattr(np, name)(array, params[argument])
    return array


def _concrete(value, bindings):
    if isinstance(value, DimExpr):
        return value.evaluate(bindings)
    if isinstance(value, tuple):
        return tuple(_concrete(item, bindings) for item in value)
    return value
