"""Parallel maps: a captured loop whose iterations are independent becomes whole-array work.

A ``loop`` equation is a *parallel map* when every value it carries is a buffer written at
index-affine regions that never overlap between iterations (``out[:, f, i, j] = v``,
``h_all[:, t] = h``; found as chains of ``where(pad(mask), pad(value), buffer)``, the IR's
functional write) and nothing else: no accumulator, and the body never reads the buffer
it writes. Then the body is *batched* over the index, as ``jax.vmap`` does: each value the
body computes gets a leading axis of length ``n`` (the trip count), one rule per primitive
(``tracejit.tracer.batching``), and each write becomes one strided write of the whole
batch. A read that moves with the index (``x_pad[:, :, i*s:i*s+HH, j*s:j*s+WW]``) becomes
a ``sliding_window`` view of stride ``s``, so the naive convolution's three loops become
one broadcast multiply and a sum over windows, which codegen fuses into one reduction
kernel split over the thread pool.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> def scale_rows(x, w):
...     out = np.zeros(x.shape)
...     for i in range(x.shape[0]):
...         out[i] = x[i] * w[i]
...     return out
>>> graph = trace(scale_rows, np.ones((5, 3)), np.ones(5), dynamic=True).graph
>>> sum(eqn.prim.name == "loop" for eqn in graph.equations)
1
>>> sum(eqn.prim.name == "loop" for eqn in vectorize_loops(graph).equations)
0

Why a pass on the finished graph, not at capture time: capture has to run the loop on real
values anyway (the first call's results), and the decision needs the whole body with its
nested loops already generalized; a graph -> graph pass sees exactly that, runs before
codegen decides between the plain and the looped program (``tracejit.codegen.program.compile``:
a graph left without loops compiles as one fused program), is verified like every pass,
and can be switched off or tested on hand-written IR. Loops nested in a body are
vectorized first (innermost out), so a conv's ``f`` loop batches inside the ``j`` body,
which then batches inside the ``i`` body.

Where a body uses a primitive with no rule (``gather``, a nested loop that carries a
value, the index used as a number), the loop stays a loop - the native driver runs it,
correct and slower - and the log (``tracejit.loops``) names the loop and the primitive.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from .batching import RULES, Batch, Counter, Names, NotBatchable, Product, affine_parts, mentions
from .dims import DimExpr
from .ir import Eqn, Graph, Guard, Literal, Symbol, Var, shape_context
from .ops.control import loop_p

log = logging.getLogger("tracejit.loops")


# --- writes ------------------------------------------------------------------------------
class _Write:
    def __init__(self, where, value, config):
        self.where, self.value, self.config = where, value, config


def _uses(body):
    uses = {}
    for item in body.body:
        atoms = item.inputs if hasattr(item, "inputs") else (item.predicate,)
        for atom in atoms:
            if isinstance(atom, Var):
                uses[atom.name] = uses.get(atom.name, 0) + 1
    for atom in body.outputs:
        if isinstance(atom, Var):
            uses[atom.name] = uses.get(atom.name, 0) + 1
    return uses


def _write_chain(body, position, producers, uses):
    """The writes that make carried value ``position`` from its block parameter, first to
    last, or ``NotBatchable``: each a ``where(pad(mask), pad(value), previous)`` with a
    mask of ``True`` and the previous buffer used by nothing else."""
    buffer, atom = body.inputs[position], body.outputs[position]
    chain = []
    while atom != buffer:
        where = producers.get(getattr(atom, "name", None))
        if where is None or where.prim.name != "where" or not isinstance(where.inputs[2], Var):
            raise NotBatchable(f"carried value {position} is not only written at the index "
                               "(an accumulator or a value carried between iterations)")
        mask, value = (producers.get(getattr(item, "name", None)) for item in where.inputs[:2])
        if mask is None or value is None or mask.prim.name != "pad" or value.prim.name != "pad":
            raise NotBatchable(f"carried value {position} is updated other than by a write")
        config = value.params_dict["config"]
        source = producers.get(getattr(mask.inputs[0], "name", None))
        while source is not None and source.prim.name == "reshape":
            source = producers.get(getattr(source.inputs[0], "name", None))
        if (mask.params_dict["config"] != config or source is None
                or source.prim.name != "full" or source.params_dict["value"] is not True):
            raise NotBatchable(f"carried value {position} is written through a mask")
        chain.append(_Write(where, value.inputs[0], config))
        atom = where.inputs[2]
        if uses.get(atom.name, 0) != 1:
            raise NotBatchable(f"the loop reads the buffer it writes (carried value "
                               f"{position})")
    if not chain:
        raise NotBatchable(f"carried value {position} passes through unchanged")
    return chain[::-1]


def _write_axis(batch, write):
    """The one axis along which ``write``'s region moves: ``(axis, base, delta)``."""
    moving = []
    for axis, (low, high, interior) in enumerate(write.config):
        if mentions(low, batch.index) or mentions(high, batch.index):
            moving.append(axis)
        elif mentions(interior, batch.index):
            raise NotBatchable("a write whose stride moves with the index")
    if len(moving) != 1:
        raise NotBatchable("a write that does not move with the index along exactly one axis"
                           if moving else "every iteration writes the same region")
    axis, = moving
    base, delta = batch.moving(write.config[axis][0])
    low, high, interior = write.config[axis]
    if write.value.aval.shape[axis] != 1 or interior != 0 or delta <= 0:
        raise NotBatchable("a write of more than one element along the axis the index moves")
    return axis, base, delta


def _disjoint(writes):
    """Iterations write disjoint regions: one axis, one stride, bases within a stride."""
    axes = {axis for axis, _, _ in writes}
    deltas = {delta for _, _, delta in writes}
    if len(axes) != 1 or len(deltas) != 1:
        raise NotBatchable("writes to one buffer move along different axes or strides")
    delta, = deltas
    bases = [base for _, base, _ in writes]
    for base in bases[1:]:
        difference = base - bases[0]
        if not isinstance(difference, int) or (difference % delta == 0 and difference):
            raise NotBatchable("two writes of an iteration may land where another "
                               "iteration writes")


def _batched_write(batch, buffer, write, axis, base, delta, value):
    """``buffer`` with ``value`` (batched) written at ``base + delta * k`` along ``axis``."""
    atom, batched = value
    value_shape = write.value.aval.shape
    if not batched:
        atom = batch.broadcast(atom)
    # (n, ..., 1 at axis + 1, ...) -> (..., n at axis, ...)
    squeezed = tuple(dim for a, dim in enumerate(value_shape) if a != axis)
    atom = batch.emit("reshape", [atom], shape=(batch.n, *squeezed))
    rank = len(value_shape)
    if axis:
        perm = list(range(1, rank))
        perm.insert(axis, 0)
        atom = batch.emit("transpose", [atom], perm=tuple(perm))
    extent = buffer.aval.shape[axis]
    config = list(write.config)
    config[axis] = (base, extent - base - delta * (batch.n - 1) - 1, delta - 1)
    config = tuple(config)
    if all(part == 0 for axis_config in config for part in axis_config) and (
            atom.aval.shape == buffer.aval.shape and atom.aval.dtype == buffer.aval.dtype):
        return atom  # the batch writes the whole buffer: the result is the batch itself
    if batch.bindings is not None:
        return batch.write(buffer, atom, config)
    mask = batch.emit("full", [], shape=atom.aval.shape, value=True, dtype=np.dtype(bool))
    mask = batch.emit("pad", [mask], config=config)
    padded = batch.emit("pad", [atom], config=config)
    return batch.emit("where", [mask, padded, buffer])


# --- one loop ----------------------------------------------------------------------------
def batch_loop(eqn, body, names, context, before=()):
    """The equations that compute loop ``eqn``'s group without a loop: ``(eqns, {output
    position: atom})``, or ``NotBatchable``. ``before``: the equations ahead of the loop,
    where capture's peeled first iteration may be found (``_unpeel``)."""
    params = eqn.params_dict
    start, stop, step = params["start"], params["stop"], params["step"]
    if not isinstance(step, int) or step <= 0:
        raise NotBatchable("a loop with a negative step")
    operands = eqn.inputs
    peeled = _unpeel(body, params["index"], start - step, params["num_carry"], operands,
                     before)
    if peeled is not None:
        start, operands = start - step, peeled
    n = stop - start if step == 1 else (stop - start + step - 1) // step
    batch = Batch(names, context, params["index"], start, step, n)
    results = _batch_body(batch, body, params["num_carry"], operands)
    return batch.emitted, results


class _Numbering:
    """Value numbering of a growing list of equations (``sync`` reads what was appended
    since the last call): equal (primitive, operands, params) share one var."""

    def __init__(self):
        self.seen, self.producers, self.table, self.canonical = 0, {}, {}, {}

    def canon(self, atom):
        return self.canonical.get(atom.name, atom) if isinstance(atom, Var) else atom

    def sync(self, items):
        for item in items[self.seen:]:
            if isinstance(item, Eqn):
                self.producers[item.out.name] = item
                key = (item.prim.name, tuple(self.canon(atom) for atom in item.inputs),
                       item.params)
                try:
                    self.canonical[item.out.name] = self.table.setdefault(key, item.out)
                except TypeError:  # an unhashable param
                    pass
        self.seen = len(items)
        return self


def _instantiate(value, index, at):
    """A param or literal with the index replaced by ``at``."""
    if isinstance(value, DimExpr) and index in value.symbols():
        a, c = affine_parts(value, index)
        return a + c * at
    if isinstance(value, tuple):
        return tuple(_instantiate(item, index, at) for item in value)
    return value


def _unpeel(body, index, first, num_carry, operands, before):
    """Capture records a loop's first iteration unrolled, then loops from the second. When
    the equations ahead of the loop are exactly the body at index ``first`` (found as
    common subexpressions: every body equation, instantiated, is already there) applied to
    the buffers before that iteration, return those operands: the batch then covers the
    first iteration too and the peeled equations become dead (one batched copy of the body
    instead of two; for nested loops, one instead of 2**depth)."""
    if not before:
        return None
    numbering = before if isinstance(before, _Numbering) else _Numbering().sync(before)
    producers, table, canon = numbering.producers, numbering.table, numbering.canon
    producers_in_body = {item.out.name: item for item in body.equations}
    uses = _uses(body)
    mapping = {}
    try:
        for position in range(num_carry):
            chain = _write_chain(body, position, producers_in_body, uses)
            atom = operands[position]
            for _ in chain:  # walk the peeled writes back to the buffer before them
                where = producers.get(getattr(atom, "name", None))
                if where is None or where.prim.name != "where":
                    return None
                atom = where.inputs[2]
            mapping[body.inputs[position].name] = canon(atom)
    except NotBatchable:
        return None
    for var, atom in zip(body.inputs[num_carry:], operands[num_carry:]):
        mapping[var.name] = canon(atom)
    for item in body.body:
        if not isinstance(item, Eqn) or item.prim is loop_p:
            return None
        inputs = []
        for atom in item.inputs:
            if isinstance(atom, Var):
                inputs.append(mapping[atom.name])
            elif isinstance(atom.value, DimExpr) and index in atom.value.symbols():
                inputs.append(Literal.of(_instantiate(atom.value, index, first)))
            else:
                inputs.append(atom)
        params = tuple((key, _instantiate(value, index, first)) for key, value in item.params)
        try:
            found = table.get((item.prim.name, tuple(inputs), params))
        except TypeError:
            return None
        if found is None or found.aval != item.out.aval:
            return None
        mapping[item.out.name] = found
    for position in range(num_carry):
        if mapping.get(getattr(body.outputs[position], "name", None)) != canon(
                operands[position]):
            return None
    return tuple(mapping[var.name] for var in body.inputs[:num_carry]) + tuple(
        operands[num_carry:])


def _batch_body(batch, body, num_carry, operands):
    index = batch.index
    if any(not isinstance(item, Eqn) for item in body.body):
        raise NotBatchable("a guard or a print in the body")
    carried_atoms = {atom.name for atom in operands[:num_carry] if isinstance(atom, Var)}
    if any(isinstance(atom, Var) and atom.name in carried_atoms for atom in operands[num_carry:]):
        raise NotBatchable("the body reads a buffer the loop writes, under another name")
    producers = {item.out.name: item for item in body.equations}
    uses = _uses(body)
    chains = [_write_chain(body, position, producers, uses) for position in range(num_carry)]
    plumbing = set()
    for chain in chains:
        for write in chain:
            plumbing.add(write.where.out.name)
            plumbing.update(atom.name for atom in write.where.inputs[:2])
    env = {}
    for position, (var, atom) in enumerate(zip(body.inputs, operands)):
        if position >= num_carry:
            env[var.name] = (atom, False)
    for item in body.equations:
        if item.out.name in plumbing:
            continue
        if mentions(tuple(item.out.aval.shape), index):
            raise NotBatchable(f"{item.prim.name} gives a shape that changes with the index")
        args = []
        for atom in item.inputs:
            if isinstance(atom, Var):
                if atom.name not in env:
                    raise NotBatchable("the body reads a buffer it writes")
                args.append(env[atom.name])
            else:
                if mentions(atom.value, index):
                    raise NotBatchable(f"{item.prim.name} uses the index as a number")
                args.append((atom, False))
        moves = any(mentions(value, index) for _, value in item.params)
        if not moves and not any(batched for _, batched in args):
            env[item.out.name] = (batch.emit(item.prim, [atom for atom, _ in args],
                                             **item.params_dict), False)
            continue
        batching = RULES.get(item.prim.name)
        if batching is None:
            raise NotBatchable(f"no batching rule for `{item.prim.name}`")
        env[item.out.name] = (batching(batch, item, args), True)
    results = {}
    for position, chain in enumerate(chains):
        placed = [_write_axis(batch, write) for write in chain]
        _disjoint(placed)
        buffer = operands[position]
        if not isinstance(buffer, Var):
            raise NotBatchable("a buffer that is a constant")
        for write, (axis, base, delta) in zip(chain, placed):
            value = env.get(write.value.name) if isinstance(write.value, Var) else (
                write.value, False)
            if value is None:
                raise NotBatchable("a written value the batch did not compute")
            buffer = _batched_write(batch, buffer, write, axis, base, delta, value)
        wanted = operands[position].aval
        if buffer.aval.shape != wanted.shape or buffer.aval.dtype != wanted.dtype:
            raise NotBatchable(f"the batched writes give {buffer.aval}, the loop {wanted}")
        results[position] = buffer
    return results


_REFUSED = {}  # id(body) -> (body, reason): bodies run_batched gave up on


def run_batched(body, index, start, stop, step, num_carry, carried, free, bindings):
    """The loop's carried values after ``range(start, stop, step)``, computed by the batched
    body with NumPy (``ops.control.run_body``'s fast path: tracing runs a captured loop's
    remaining iterations, the interpreter runs loops), or None when the body is not a
    parallel map. Rounding may differ from the per-iteration run as compiled code's does
    (a sum over a batch axis)."""
    refused = _REFUSED.get(id(body))
    if refused is not None and refused[0] is body:
        return None
    trips = len(range(start, stop, step))
    if step <= 0 or trips == 0:
        return None
    batch = Batch(Counter(), None, index, start, step, trips, dict(bindings))
    operands = [batch.constant(value) for value in (*carried, *free)]
    try:
        if any(eqn.prim is loop_p for eqn in body.equations):
            body = _inner_vectorized(body, bindings)
        results = _batch_body(batch, body, num_carry, operands)
    except NotBatchable as reason:
        if len(_REFUSED) > 256:
            _REFUSED.clear()
        _REFUSED[id(body)] = (body, str(reason))
        return None
    finals = []
    for position in range(num_carry):
        value = batch.values[results[position].name]
        value = value.value() if isinstance(value, Product) else value
        # the caller owns the result (a batch can end in a view of a temporary)
        finals.append(value if value.flags.owndata and value.flags.c_contiguous
                      else np.array(value, order="C"))
    return finals


def _inner_vectorized(body, bindings):
    """``body`` with its nested parallel-map loops batched, deciding shapes for these
    ``bindings`` (each symbol's range is its value)."""
    key = (id(body), tuple(sorted(bindings.items())))
    cached = _INNER.get(key)
    if cached is not None and cached[0] is body:
        return cached[1]
    symbols = [Symbol(name, value, value) for name, value in bindings.items()
               if isinstance(value, int) and name not in {s.name for s in body.symbols}]
    result = _vectorize(body, Names(body), symbols, (), {})
    if len(_INNER) > 64:
        _INNER.clear()
    _INNER[key] = (body, result)
    return result


_INNER = {}


# --- the pass ----------------------------------------------------------------------------
def _group_key(eqn):
    return (eqn.inputs, tuple(p for p in eqn.params if p[0] != "output"))


def _context(symbols, shape_guards):
    return shape_context(Graph("scope", (), (), (), (), tuple(symbols), tuple(shape_guards)))


def _vectorize(graph, names, symbols, shape_guards, stats):
    """``graph`` with its parallel-map loops batched (nested bodies first)."""
    scope = {symbol.name: symbol for symbol in symbols}
    scope.update({symbol.name: symbol for symbol in graph.symbols})
    context = _context(scope.values(), shape_guards)
    body, groups, renames, changed = [], {}, {}, False
    numbering = _Numbering()

    def rename(atom):
        return renames.get(atom.name, atom) if isinstance(atom, Var) else atom

    for item in graph.body:
        if renames:
            if isinstance(item, Guard):
                item = replace(item, predicate=rename(item.predicate))
            else:
                item = replace(item, inputs=tuple(rename(atom) for atom in item.inputs))
        if not (isinstance(item, Eqn) and item.prim is loop_p):
            body.append(item)
            continue
        key = _group_key(item)
        if key not in groups:
            inner = item.params_dict["body"]
            new_inner = _vectorize(inner, names, scope.values(), shape_guards, stats)
            try:
                emitted, results = batch_loop(item, new_inner, names, context,
                                              numbering.sync(body))
            except NotBatchable as reason:
                log.info("loop %s stays a loop (not a parallel map): %s", inner.name, reason)
                stats.setdefault("kept", []).append((inner.name, str(reason)))
                groups[key] = (new_inner, None)
            else:
                log.info("loop %s vectorized: %d equation(s), no loop", inner.name,
                         len(emitted))
                stats.setdefault("vectorized", []).append(inner.name)
                groups[key] = (new_inner, results)
                body.extend(emitted)
        new_inner, results = groups[key]
        changed = changed or new_inner is not item.params_dict["body"] or results is not None
        if results is None:
            if new_inner is not item.params_dict["body"]:
                params = tuple((k, new_inner if k == "body" else v) for k, v in item.params)
                item = replace(item, params=params)
            body.append(item)
        else:
            renames[item.out.name] = results[item.params_dict["output"]]
    if not changed:
        return graph
    from .passes import eliminate_dead_code  # the peeled iterations left dead

    return eliminate_dead_code(replace(graph, body=tuple(body),
                                       outputs=tuple(rename(atom) for atom in graph.outputs)))


def vectorize_loops(graph):
    """``graph`` with every parallel-map loop turned into whole-array equations."""
    stats = {}
    names = Names(graph)
    return _vectorize(graph, names, graph.symbols, graph.shape_guards, stats)
