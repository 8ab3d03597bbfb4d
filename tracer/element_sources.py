"""Which element of one array each element of an operand reads, back through layout
operations: where both operands of a subtraction read one element of one array (``x.T -
x`` with ``x = pos[:, 0:1]``, ``pos[:, None, :] - pos[None, :, :]``: a body's offset from
itself), the difference is exactly 0 on NumPy's side and ours, whatever that element's
rounding. The guard margins use it (``margin_rules._add``): without it the diagonal of a
pairwise distance between computed positions carried their bounds, so pmocz's n-body
``inv_r[inv_r > 0]`` was a guard-margin exit on every call of a simulation.

>>> from tracejit.tracer.tracing import trace
>>> graph = trace(lambda p: p[:, None, :] - p[None, :, :], np.ones((3, 2))).graph
>>> class Walk: producers = {eqn.out.name: eqn for eqn in graph.equations}
>>> difference = graph.equations[-1]
>>> [sources(Walk, atom, (3, 3, 2))[1] for atom in difference.inputs]
[[0, 2], [1, 2]]
"""

from __future__ import annotations

import numpy as np

from .ir import Literal, Var
from .ops import equal_p, iota_p, reshape_p


def _is_one(dim):
    return isinstance(dim, (int, np.integer)) and dim == 1


def _same_dim(a, b):
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        return a == b
    return a is b or (not isinstance(a, (int, np.integer)) and not isinstance(
        b, (int, np.integer)) and str(a) == str(b))


def sources(ctx, atom, out_shape):
    """``(root, axes)``: ``root`` the value ``atom`` reads through transposes, broadcasts
    and reshapes that only add or drop length-1 dims; ``axes[k]`` the axis of a result of
    ``out_shape`` whose index is the index into ``root``'s axis ``k`` (None: root's dim
    there is 1, index 0). None when ``atom`` does not broadcast into ``out_shape``."""
    shape, rank = tuple(atom.aval.shape), len(out_shape)
    if len(shape) > rank:
        return None
    axes = [None if _is_one(dim) else rank - len(shape) + k for k, dim in enumerate(shape)]
    while isinstance(atom, Var) and atom.name in ctx.producers:
        eqn = ctx.producers[atom.name]
        name, params = eqn.prim.name, dict(eqn.params)
        if not eqn.inputs:  # iota, a constant fill: no operand to read back through
            break
        source = eqn.inputs[0]
        if not isinstance(source, Var):
            break
        src_shape = tuple(source.aval.shape)
        if name == "transpose":
            moved = [None] * len(src_shape)
            for k, axis in enumerate(params["perm"]):
                moved[axis] = axes[k]
        elif name == "reshape":
            kept = [k for k, dim in enumerate(shape) if not _is_one(dim)]
            src_kept = [k for k, dim in enumerate(src_shape) if not _is_one(dim)]
            if len(kept) != len(src_kept) or not all(
                    _same_dim(shape[a], src_shape[b]) for a, b in zip(kept, src_kept)):
                break
            moved = [None] * len(src_shape)
            for a, b in zip(kept, src_kept):
                moved[b] = axes[a]
        elif name == "broadcast_to":
            extra = len(shape) - len(src_shape)
            moved = [None if _is_one(dim) else axes[extra + k]
                     for k, dim in enumerate(src_shape)]
        else:
            break
        atom, shape, axes = source, src_shape, moved
    return atom, axes


def _index(ctx, axis, out_shape):
    if axis is None:
        return Literal.of(np.int64(0))
    positions = ctx.emit(iota_p, length=out_shape[axis], dtype=np.dtype(np.int64))
    shape = tuple(out_shape[k] if k == axis else 1 for k in range(len(out_shape)))
    return ctx.emit(reshape_p, positions, shape=shape)


def same_element(ctx, a, b, out_shape):
    """A bool mask over ``out_shape`` (or a bool Literal) of where operands ``a`` and
    ``b`` read one element of one array; None when they do not read one array."""
    if not isinstance(a, Var) or not isinstance(b, Var):
        return None
    first, second = sources(ctx, a, out_shape), sources(ctx, b, out_shape)
    if (first is None or second is None or not isinstance(first[0], Var)
            or not isinstance(second[0], Var) or first[0].name != second[0].name
            or len(first[1]) != len(second[1])):
        return None
    mask = None
    for x, y in zip(first[1], second[1]):
        if x == y:
            continue
        equal = ctx.emit(equal_p, _index(ctx, x, out_shape), _index(ctx, y, out_shape))
        mask = equal if mask is None else ctx.and_(mask, equal)
    return Literal.of(np.bool_(True)) if mask is None else mask
