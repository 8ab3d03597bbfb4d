"""Which elements of a product are ever read: attention's causal mask throws away every
score above the diagonal (``np.where(causal, scores, -np.inf)``), so the GEMM need not
compute them.

``product_reach(kernel)`` finds, for a batched matmul kernel, the ``reach`` such that only
``C[..., i, j]`` with ``j <= i + reach`` can reach any other value: the product's one
reader is a chain of pointwise ops with a literal (the ``1 / sqrt(d)`` scale) ending in
``np.where(mask, ., fill)`` with ``mask`` a constant whose every true element lies within
the band; the kernel stores the product (others read the ``where``) or, as its epilogue
over the product in place, the ``where`` itself. The GEMM's batched entry then skips
whole blocks past the band (``codegen/gemm_batched.py``, the layout's ``reach``); the
elements it leaves unwritten are exactly those the ``where`` replaces by ``fill``,
whatever they hold.

The same band makes the attention weights ``softmax(where(mask, scores, -inf))`` exactly 0
past it (``exp(-inf - max)``; a row whose max is not finite is NaN throughout, banded or
not): ``weights_reach(kernel)`` gives that reach for a batched product whose left operand
they are, and the GEMM leaves those terms out of ``weights @ value`` (when ``value`` is
finite: ``0 * inf`` is NaN).

>>> import numpy as np
>>> band_reach(np.tril(np.ones((4, 4), bool)))
0
>>> band_reach(np.tril(np.ones((4, 6), bool), 2))
2
>>> band_reach(np.ones((4, 4), bool)) is None  # nothing to skip
True
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer.ir import Eqn, Literal, Var
from tracejit.tracer.ops import (
    add_p,
    exp_p,
    max_p,
    multiply_p,
    stop_gradient_p,
    subtract_p,
    sum_p,
    true_divide_p,
    where_p,
)

# Ops with a literal that may stand between the product and the ``where``: they cannot
# fail or report on any value (an integer division of a stale element could).
SCALE_OPS = (true_divide_p, multiply_p, add_p, subtract_p)


def band_reach(mask):
    """The least ``reach >= 0`` with ``mask[..., i, j]`` false wherever ``j > i + reach``,
    or None when that leaves no column of any row out (or no row has a true element)."""
    mask = np.asarray(mask, bool)
    rows, columns = mask.shape[-2:]
    flat = mask.reshape(-1, rows, columns).any(axis=0)
    used = flat.any(axis=1)
    if not used.any():
        return None
    last = columns - 1 - np.argmax(flat[:, ::-1], axis=1)  # each row's last true column
    reach = int(np.max((last - np.arange(rows))[used]))
    reach = max(reach, 0)
    return reach if reach < columns - 1 else None


def product_reach(kernel):
    """``reach`` (see ``band_reach``) for ``kernel``'s product, or None when any of its
    elements may be read."""
    schedule = kernel.schedule
    anchor, root = kernel.kernel.anchor, kernel.kernel.root
    product = anchor.out
    shape = tuple(product.aval.shape)
    if len(shape) < 2 or not all(isinstance(dim, int) for dim in shape[-2:]):
        return None
    outputs = {atom.name for atom in schedule.graph.outputs if isinstance(atom, Var)}
    uses = schedule.scheduler.uses
    var = product
    while True:
        users = uses.get(var.name, [])
        if var.name in outputs or len(users) != 1 or not isinstance(users[0], Eqn):
            return None
        eqn = users[0]
        if tuple(eqn.out.aval.shape) != shape:
            return None
        others = [atom for atom in eqn.inputs if atom is not var]
        if eqn.prim is where_p:
            mask, on_true, on_false = eqn.inputs
            if on_true is not var or var in (mask, on_false):
                return None
            # The kernel stores the product, or (its epilogue) exactly this masked value
            if root.name not in (product.name, eqn.out.name):
                return None
            return _constant_reach(schedule.graph, mask, shape)
        if eqn.prim not in SCALE_OPS or len(others) != 1 or not isinstance(others[0], Literal):
            return None
        var = eqn.out


def _constant_reach(graph, mask, shape):
    if not isinstance(mask, Var):
        return None
    values = {var.name: constant for var, constant in graph.constants}
    if mask.name not in values or tuple(mask.aval.shape[-2:]) != shape[-2:]:
        return None
    return band_reach(values[mask.name].data)


def weights_reach(kernel):
    """``reach`` for ``kernel``'s left operand when it is a softmax over the last axis of
    ``where(mask, scores, -inf)`` (``nn.softmax``'s form) with a banded constant ``mask``,
    stored as it is (no view between); else None."""
    schedule, producers = kernel.schedule, kernel.producers
    weights = kernel.kernel.anchor.inputs[0]
    shape = tuple(weights.aval.shape)
    if not isinstance(weights, Var) or weights.name not in schedule.buffers or len(
            shape) < 2 or not all(isinstance(dim, int) for dim in shape[-2:]):
        return None

    def produced(atom, prim):
        eqn = producers.get(atom.name) if isinstance(atom, Var) else None
        if eqn is None or eqn.prim is not prim:
            return None
        if prim in (max_p, sum_p) and (eqn.params_dict.get("keepdims") is not True or tuple(
                axis % len(shape) for axis in eqn.params_dict["axes"]) != (len(shape) - 1,)):
            return None
        return eqn

    divide = produced(weights, true_divide_p)
    if divide is None:
        return None
    shifted, total = divide.inputs
    exponential = produced(shifted, exp_p)
    total = produced(total, sum_p)
    if exponential is None or total is None or total.inputs[0] is not shifted:
        return None
    difference = produced(exponential.inputs[0], subtract_p)
    if difference is None:
        return None
    scores, peak = difference.inputs
    held = produced(peak, stop_gradient_p)  # nn.softmax's peak carries no gradient
    peak = produced(held.inputs[0] if held is not None else peak, max_p)
    masked = produced(scores, where_p)
    if peak is None or masked is None or peak.inputs[0] is not scores or tuple(
            scores.aval.shape) != shape:
        return None
    mask, _, fill = masked.inputs
    if not isinstance(fill, Literal) or not np.isneginf(fill.value):
        return None
    return _constant_reach(schedule.graph, mask, shape)
