"""Input projections out of loops: ``x[:, t] @ Wx`` for every ``t`` as one matmul ahead.

An RNN or LSTM step computes ``np.tanh(x[:, t, :] @ Wx + h @ Wh + b)``. The first matmul
reads only the input at the loop index and a weight the loop never changes, so its values
for every step are one large matmul ``x @ Wx`` before the loop (cuDNN's RNNs do the
same); the body then reads that product's row at the index, and only ``h @ Wh``, which
needs the previous step, stays inside. One GEMM over all ``N*T`` rows runs near the
machine's peak where ``T`` GEMMs of ``N`` rows each pay a call and a cold start.

The pattern, in the body of a ``loop`` equation::

    s = slice(X)        X read from outside the loop, one position along axis a at an
                        index-affine start (a is not X's last axis), whole along the others
    r = reshape(s)      axis a dropped
    m = matmul(r, W)    W a matrix from outside the loop      (or matmul(W, r), r a vector)

becomes ``P = matmul(X, W)`` (``matmul(X, transpose(W))``) before the loop and, in the
body, ``m = reshape(slice(P))`` at the same start. It is done only when the loop visits
all but at most two positions of axis a (the peeled first step, a ``range(1, T)``), so the
work ahead of the loop is the loop's own. Values are the same dot products; their
summation order may differ in the last bits, as between any two BLAS calls.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> from tracejit.tracer.passes import hoist_loop_matmuls
>>> def rnn(x, Wx, Wh):
...     h = np.zeros((x.shape[0], Wh.shape[0]))
...     for t in range(x.shape[1]):
...         h = np.tanh(x[:, t] @ Wx + h @ Wh)
...     return h
>>> graph = trace(rnn, np.ones((2, 40, 3)), np.ones((3, 4)), np.ones((4, 4)),
...               dynamic=True).graph
>>> hoisted = hoist_loop_matmuls(graph)
>>> [eqn.prim.name for eqn in hoisted.equations if eqn.prim.name in ("matmul", "loop")]
['matmul', 'matmul', 'matmul', 'loop']
>>> loop = [eqn for eqn in hoisted.equations if eqn.prim.name == "loop"][0]
>>> sum(eqn.prim.name == "matmul" for eqn in loop.params_dict["body"].equations)
1
"""

from __future__ import annotations

import logging
from dataclasses import replace

from .batching import Names as _Names
from .dims import DimExpr
from .ir import Eqn, infer_aval
from .loop_vectorize import _context, _group_key
from .ops.control import loop_p
from .primitives import PRIMITIVES

log = logging.getLogger("tracejit.loops")

# Positions of the sliced axis the loop may skip (the peeled first step, range(1, T)).
_MAX_SKIPPED = 2


def hoist_loop_matmuls(graph, prune):
    """``graph`` with input projections computed ahead of their loops; ``prune`` removes
    a body's dead equations (``passes.eliminate_dead_code``)."""
    return _hoist(graph, _Names(graph), prune, {}, graph.shape_guards)


def _hoist(graph, names, prune, scope, shape_guards):
    scope = {**scope, **{symbol.name: symbol for symbol in graph.symbols}}
    body, groups, changed = [], {}, False
    for item in graph.body:
        if not (isinstance(item, Eqn) and item.prim is loop_p):
            body.append(item)
            continue
        key = _group_key(item)
        if key not in groups:
            inner = _hoist(item.params_dict["body"], names, prune, scope,
                           shape_guards)  # nested loops first
            inner_scope = {**scope, **{symbol.name: symbol for symbol in inner.symbols}}
            emit = _Emitter(names, _context(scope.values(), shape_guards),
                            _context(inner_scope.values(), shape_guards))
            ahead, inner, extra = _hoist_loop(item, inner, emit, prune)
            groups[key] = inner, extra
            body.extend(ahead)
        inner, extra = groups[key]
        if inner is not item.params_dict["body"]:
            params = tuple((k, inner if k == "body" else v) for k, v in item.params)
            item = replace(item, inputs=item.inputs + extra, params=params)
            changed = True
        body.append(item)
    return replace(graph, body=tuple(body)) if changed else graph


def _hoist_loop(eqn, body, emit, prune):
    """``(equations ahead of the loop, new body, new operands)`` for one loop."""
    params = eqn.params_dict
    index, num_carry, step = params["index"], params["num_carry"], params["step"]
    trips = (params["stop"] - params["start"]) * step
    outside = {var.name: atom for var, atom in zip(body.inputs[num_carry:],
                                                   eqn.inputs[num_carry:])}
    producers = {item.out.name: item for item in body.equations}
    ahead, replaced, extra_inputs, extra = [], {}, [], []
    for item in body.equations:
        if item.prim.name != "matmul":
            continue
        found = _projection(item, producers, outside, index, trips)
        if found is None:
            continue
        x, w, sliced, transposed = found
        if transposed:
            w = emit.ahead(ahead, "transpose", [w], perm=(1, 0))
        product = emit.ahead(ahead, "matmul", [x, w])
        replaced[item.out.name] = (product, sliced)
        extra_inputs.append(product)
        extra.append(product)
        log.info("loop %s: matmul %s computed ahead of the loop for every step",
                 body.name, item.out.name)
    if not replaced:
        return [], body, ()
    new_body = []
    for item in body.body:
        if isinstance(item, Eqn) and item.out.name in replaced:
            product, (axis, start) = replaced[item.out.name]
            shape = product.aval.shape
            starts = tuple(start if a == axis else 0 for a in range(len(shape)))
            limits = tuple(start + 1 if a == axis else d for a, d in enumerate(shape))
            row = emit.inside(new_body, "slice", [product], starts=starts, limits=limits,
                              steps=(1,) * len(shape))
            new_body.append(Eqn(PRIMITIVES["reshape"], (row,),
                                (("shape", tuple(item.out.aval.shape)),), item.out))
            continue
        new_body.append(item)
    new_body = prune(replace(body, inputs=body.inputs + tuple(extra_inputs),
                             body=tuple(new_body)))
    return ahead, new_body, tuple(extra)


def _projection(matmul, producers, outside, index, trips):
    """``(X, W, (axis, start), transposed)`` when ``matmul`` is an input projection (see
    the module docstring), else None. ``X`` and ``W`` are the loop's operands."""
    left, right = matmul.inputs
    for vector, weight, transposed in ((left, right, False), (right, left, True)):
        w = outside.get(getattr(weight, "name", None))
        if w is None or len(w.aval.shape) != 2:
            continue
        sliced = _indexed_read(vector, producers, outside, index, trips)
        if sliced is None:
            continue
        x, axis, start = sliced
        if transposed and len(x.aval.shape) != 2:
            continue  # W @ x[t] with x[t] a matrix: a batch of small GEMMs, no gain
        return x, w, (axis, start), transposed
    return None


def _indexed_read(atom, producers, outside, index, trips):
    """``(X, axis, start)`` when ``atom`` is ``reshape(slice(X))`` taking one position of
    X's ``axis`` at an index-affine ``start`` and all of every other axis, with the loop
    visiting all but ``_MAX_SKIPPED`` positions of that axis."""
    reshape = producers.get(getattr(atom, "name", None))
    if reshape is None or reshape.prim.name != "reshape":
        return None
    sliced = producers.get(getattr(reshape.inputs[0], "name", None))
    if sliced is None or sliced.prim.name != "slice":
        return None
    x = outside.get(getattr(sliced.inputs[0], "name", None))
    if x is None:
        return None
    shape = x.aval.shape
    p = sliced.params_dict
    moving = [a for a, start in enumerate(p["starts"])
              if isinstance(start, DimExpr) and index in start.symbols()]
    if len(moving) != 1 or moving[0] == len(shape) - 1:
        return None
    axis = moving[0]
    start = p["starts"][axis]
    for a, (low, high, step) in enumerate(zip(p["starts"], p["limits"], p["steps"])):
        if step != 1 or (a == axis and high != start + 1) or (a != axis and (
                low != 0 or high != shape[a])):
            return None
    if tuple(reshape.out.aval.shape) != tuple(shape[:axis] + shape[axis + 1:]):
        return None
    terms = dict(start.terms)
    if terms.get((index,)) not in (1, -1):
        return None
    skipped = shape[axis] - trips
    if not isinstance(skipped, int) or not 0 <= skipped <= _MAX_SKIPPED:
        return None
    return x, axis, start


class _Emitter:
    """New equations ahead of a loop and in its body, their avals by the shape rules
    under each place's symbols and shape guards."""

    def __init__(self, names, outer, inner):
        self.names, self.outer, self.inner = names, outer, inner

    def ahead(self, equations, prim, inputs, **params):
        return self._emit(equations, self.outer, prim, inputs, params)

    def inside(self, equations, prim, inputs, **params):
        return self._emit(equations, self.inner, prim, inputs, params)

    def _emit(self, equations, context, prim, inputs, params):
        prim = PRIMITIVES[prim]
        out = self.names.var(infer_aval(prim, inputs, params, context))
        equations.append(Eqn(prim, tuple(inputs), tuple(sorted(params.items())), out))
        return out
