"""Control-flow primitives: ``loop``.

``loop`` holds its body as a sub-graph (``body=``, a ``Graph``). Its operands are the
initial carried values (``num_carry`` of them), then the outside values the body reads
(free vars, in the body's input order). The body's inputs are those same block
parameters; its outputs are the carried values after one iteration. The loop index is
the symbol ``index`` (a ``DimExpr`` symbol such as ``i0``) inside the body's params and
dim literals, running over ``range(start, stop, step)``; ``start``/``stop`` are ints or
``DimExpr``s of the outer graph's symbols. The equation's value is carried value
``output`` after the last iteration: a loop whose results are all used appears once per
result, with the same operands and body; execution runs each such group once. ``bounds``
pairs a carried value with the carried value that holds its rounding bound
(``tracejit.tracer.loop_bounds``: compiled against NumPy, trip after trip); ``exact``
lists the carried values that are NumPy's to the bit at every trip. ``exit``
(a while loop, ``tracejit.tracer.while_loops``) is the position of a carried bool
scalar: the loop stops after the first trip that sets it (its body is the identity once
it is set, so a trip more or less changes nothing but time).

Buffers written at the index (``hs[:, t, :] = h``) are carried values updated
functionally in the IR (``where(pad(mask), pad(h), hs)``); ``inplace_writes`` finds that
pattern so execution writes the slice in place instead of rebuilding the buffer.

The reference implementation (``run_body``) runs the body eagerly, one iteration at a
time, with NumPy.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

from ..abstract import AbstractArray
from ..deferred_text import render_pieces
from ..dims import DimExpr, SymInt
from ..errors import TraceSignal
from ..ir import Effect, Guard, Symbol, verify
from ..primitives import PRIMITIVES, Primitive


# --- evaluating dims and params with bound symbols ------------------------------------
def _evaluate(value, bindings):
    if isinstance(value, DimExpr):
        return value.evaluate(bindings)
    if isinstance(value, SymInt):
        return value.value
    if isinstance(value, tuple):
        return tuple(_evaluate(item, bindings) for item in value)
    return value


def bind_symbols(avals, values, bindings=None):
    """Symbol values read off ``values``' shapes where ``avals`` name a plain symbol."""
    bindings = dict(bindings or {})
    for aval, value in zip(avals, values):
        for dim, size in zip(aval.shape, np.shape(value)):
            if isinstance(dim, DimExpr) and len(dim.terms) == 1:
                (monomial, coeff), = dim.terms
                if coeff == 1 and len(monomial) == 1 and isinstance(monomial[0], str):
                    bindings.setdefault(monomial[0], size)
    return bindings


def inplace_writes(body, num_carry):
    """``{carried position: (write eqn, value atom, config)}`` for carried buffers whose
    only use is ``where(pad(mask), pad(value), buffer)`` producing the carried output:
    a write of ``value`` at the region ``config`` (pad's ``(low, high, 0)`` per axis)."""
    producers = {eqn.out.name: eqn for eqn in body.equations}
    uses = {}
    for item in body.body:
        atoms = item.inputs if hasattr(item, "inputs") else (item.predicate,)
        for atom in atoms:
            if hasattr(atom, "name"):
                uses[atom.name] = uses.get(atom.name, 0) + 1
    for atom in body.outputs:
        if hasattr(atom, "name"):
            uses[atom.name] = uses.get(atom.name, 0) + 1
    writes = {}
    for position in range(num_carry):
        buffer, result = body.inputs[position], body.outputs[position]
        where = producers.get(getattr(result, "name", None))
        if where is None or where.prim.name != "where" or where.inputs[2] != buffer:
            continue
        if uses.get(buffer.name, 0) != 1 or uses.get(result.name, 0) != 1:
            continue
        mask, value = (producers.get(getattr(atom, "name", None)) for atom in where.inputs[:2])
        if mask is None or value is None or mask.prim.name != "pad" or value.prim.name != "pad":
            continue
        config = value.params_dict["config"]
        if mask.params_dict["config"] != config or any(interior for _, _, interior in config):
            continue
        source = producers.get(getattr(mask.inputs[0], "name", None))
        while source is not None and source.prim.name == "reshape":
            source = producers.get(getattr(source.inputs[0], "name", None))
        if source is None or source.prim.name != "full" or source.params_dict["value"] is not True:
            continue
        if value.inputs[0].aval.dtype != buffer.aval.dtype:
            continue
        writes[position] = (where, value.inputs[0], config)
    return writes


def _needed(body, roots):
    """The body's equations that ``roots`` (atoms) depend on, in order."""
    live = {atom.name for atom in roots if hasattr(atom, "name")}
    kept = []
    for eqn in reversed(body.equations):
        if eqn.out.name in live:
            kept.append(eqn)
            live.update(atom.name for atom in eqn.inputs if hasattr(atom, "name"))
    return kept[::-1]


class BodyPlan:
    """What one iteration computes: the equations needed for the carried values that are
    not written in place, for the values written in place, and for the body's guards and
    prints (``items``: those equations with the guards and prints, in body order)."""

    def __init__(self, body, num_carry):
        self.body = body
        self.num_carry = num_carry
        self.writes = inplace_writes(body, num_carry)
        roots = [atom for position, atom in enumerate(body.outputs)
                 if position not in self.writes]
        roots += [value for _, value, _ in self.writes.values()]
        checks = [item for item in body.body if isinstance(item, (Guard, Effect))]
        for item in checks:
            roots += list(item.inputs) if isinstance(item, Effect) else [item.predicate]
        self.equations = _needed(body, roots)
        kept = {id(eqn) for eqn in self.equations}
        self.items = [item for item in body.body if id(item) in kept or isinstance(
            item, (Guard, Effect))]


class LoopGuardFailed(TraceSignal):
    """A guard inside a loop body decided differently at iteration ``t`` than when the
    body was traced: the whole call side-exits (nothing computed so far escapes).
    ``inner``: the guard is in a loop nested in the body (at any depth), which compiled
    code tells apart (``codegen.exit_codes.body_exit``): no streak toward unrolling."""

    def __init__(self, t, guard):
        where = f" ({guard.location.short})" if guard.location is not None else ""
        super().__init__(f"loop iteration {t}: a guard inside the loop body failed{where}")
        self.t, self.guard = t, guard
        self.inner = False


_CONVERT = {"bool": bool, "margin": bool, "int": int, "index": int, "float": float,
            "item": lambda value: np.asarray(value).item()}


def guard_holds(guard, value):
    return _CONVERT[guard.convert](value) == guard.expected


def print_text(effect, values):
    """``(stream, text)`` a print effect writes, from its atoms' ``values`` (what the trace
    and compiled code print: ``str`` of each value, NumPy scalars for 0-d arrays; formatted
    text rendered from them, ``tracejit.tracer.deferred_text``). A ``rows`` effect (a print
    under a test of a captured loop's index, ``tracejit.tracer.loop_prints``) prints one line
    per row of its atoms, the trips the test selected."""
    params = dict(effect.params)
    if params.get("groups"):  # several prints' rows: each line where its trip printed it
        return params["stream"], _merged_rows(params, values)
    if params.get("rows"):
        values = [np.asarray(value) for value in values]
        return params["stream"], "".join(_line(params, [value[row] for value in values])
                                         for row in range(len(values[0])))
    return params["stream"], _line(params, values)


def _merged_rows(params, values):
    """The lines of a ``groups`` effect (``loop_prints.merged_effect``): each group a
    print's rows (its width of atoms, the printed index first), ordered by trip (the index
    times ``order``) and, within a trip, by the print's place in the body."""
    lines, start = [], 0
    for place, (segments, sep, end, width) in enumerate(params["groups"]):
        group = [np.asarray(value) for value in values[start:start + width]]
        start += width
        shown = {"segments": segments, "sep": sep, "end": end}
        lines += [(params["order"] * int(group[0][row]), place,
                   _line(shown, [value[row] for value in group]))
                  for row in range(len(group[0]))]
    lines.sort(key=lambda line: line[:2])
    return "".join(line[2] for line in lines)


def _line(params, values):
    parts = []
    for kind, value in params["segments"]:
        if kind == "text":
            parts.append(value)
        elif kind == "formatted":  # print("%f" % cost): tracejit.tracer.deferred_text
            parts.append(render_pieces(value, values))
        else:
            item = values[value]
            parts.append(str(item[()] if isinstance(item, np.ndarray) and not item.shape
                             else item))
    return params["sep"].join(parts) + params["end"]


def emit(effects):
    """Write ``effects`` (``(stream, text)`` pairs) in order."""
    for stream, text in effects:
        getattr(sys, stream).write(text)


def _atom_value(atom, env, bindings):
    if hasattr(atom, "name"):
        return env[atom.name]
    value = atom.value
    return value.evaluate(bindings) if isinstance(value, DimExpr) else value


class _Step:
    """One item of a body as ``run_body`` runs it every trip: what depends on the index
    (params, operand dims, the result's shape) is evaluated per trip, the rest once."""

    def __init__(self, item, index, bindings):
        self.item = item
        if isinstance(item, Guard):
            self.kind = "guard"
            return
        if isinstance(item, Effect):
            self.kind = "effect"
            return
        self.kind = "loop" if item.prim is loop_p else "eqn"
        self.inputs = [(True, False, atom.name) if hasattr(atom, "name") else
                       (False, isinstance(atom.value, DimExpr), atom.value)
                       for atom in item.inputs]
        fixed, self.moving = {}, []
        for key, value in item.params:
            if not _mentions(value, index):
                try:
                    fixed[key] = _evaluate(value, bindings)
                    continue
                except KeyError:  # a symbol bound only inside (an inner loop's own index)
                    pass
            self.moving.append((key, value))
        self.params = fixed
        shape = item.out.aval.shape
        self.weak = item.out.aval.weak and not shape
        try:
            self.shape = None if _mentions(shape, index) else tuple(_evaluate(shape, bindings))
        except KeyError:
            self.shape = None


def _python_number(value):
    """A weak scalar's value as the Python number it stands for (the trace holds them so):
    a 0-d array or NumPy scalar in its place is not weak to NumPy 2, so ``h_f32 / (i + 1)``
    with ``i`` a carried counter computed in float64."""
    return np.asarray(value).item()


def _mentions(value, symbol):
    """Whether a param or shape (dims, tuples of them) involves ``symbol``."""
    if isinstance(value, DimExpr):
        return symbol in value.symbols()
    if isinstance(value, tuple):
        return any(_mentions(item, symbol) for item in value)
    return False


def run_body(body, index, start, stop, step, num_carry, carried, free, bindings,
             effects=None, exit=None):
    """Run the loop eagerly: ``carried`` values through ``range(start, stop, step)``
    iterations of ``body``; ``free`` are the outside values it reads. Returns the carried
    values after the last iteration. Buffers written at the index are copied once and
    then written in place. A guard of the body that fails raises ``LoopGuardFailed``;
    prints are appended to ``effects`` as ``(stream, text)`` (written at once when it is
    None). ``exit``: the position of the carried bool that ends the loop (a while loop)."""
    from ..loop_vectorize import run_batched  # cycle: loop_vectorize -> ops.control

    if exit is None:
        batched = run_batched(body, index, start, stop, step, num_carry, carried, free,
                              bindings)
        if batched is not None:  # a parallel map: the whole range at once
            return batched
    if exit is not None and bool(carried[exit]):
        return carried
    plan = BodyPlan(body, num_carry)
    carried = [np.array(value) if position in plan.writes else value
               for position, value in enumerate(carried)]
    params = body.inputs
    weak = [var.aval.weak and not var.aval.shape for var in params]
    free = [_python_number(value) if weak[num_carry + position] else value
            for position, value in enumerate(free)]
    steps = [_Step(item, index, bindings) for item in plan.items]
    for t in range(start, stop, step):
        scope = dict(bindings)
        scope[index] = t
        env = {var.name: _python_number(value) if is_weak else value
               for var, value, is_weak in zip(params, (*carried, *free), weak)}
        for step_ in steps:
            eqn = step_.item
            if step_.kind == "guard":
                if not guard_holds(eqn, _atom_value(eqn.predicate, env, scope)):
                    raise LoopGuardFailed(t, eqn)
                continue
            if step_.kind == "effect":
                text = print_text(eqn, [_atom_value(atom, env, scope) for atom in eqn.inputs])
                if effects is None:
                    emit([text])
                else:
                    effects.append(text)
                continue
            values = [env[key] if is_var else (_evaluate(key, scope) if is_dim else key)
                      for is_var, is_dim, key in step_.inputs]
            if step_.kind == "loop":
                try:
                    result = _loop_impl(*values, bindings=scope, effects=effects,
                                        **dict(eqn.params))
                except LoopGuardFailed as failure:  # a guard of a loop inside this body
                    failure.inner = True
                    raise
            else:
                concrete = step_.params
                if step_.moving:  # params that follow the index: per trip
                    concrete = {**concrete, **{key: _evaluate(value, scope)
                                               for key, value in step_.moving}}
                result = eqn.prim.impl(*values, **concrete)
                if step_.weak:
                    result = _python_number(result)
            expected = step_.shape if step_.shape is not None else tuple(
                _evaluate(eqn.out.aval.shape, scope))
            if np.shape(result) != expected:
                raise IndexError(
                    f"loop iteration {t}: {eqn.prim.name} gives shape {np.shape(result)}, "
                    f"the loop body was traced with {expected} (an index out of range)"
                )
            env[eqn.out.name] = result
        updated = []
        for position, atom in enumerate(body.outputs):
            if position in plan.writes:
                _, value_atom, config = plan.writes[position]
                value = _atom_value(value_atom, env, scope)
                region = tuple(slice(low, low + size) for (low, _, _), size in
                               zip(_evaluate(config, scope), np.shape(value)))
                buffer = carried[position]
                if buffer[region].shape != np.shape(value):
                    raise IndexError(f"loop iteration {t}: a write at the index is out of range")
                buffer[region] = value
                updated.append(buffer)
            else:
                updated.append(_atom_value(atom, env, scope))
        carried = updated
        if exit is not None and bool(carried[exit]):
            break
    return carried


def _loop_impl(*operands, body, index, start, stop, step, num_carry, output=0, bounds=(),
               exact=(), exit=None, bindings=None, effects=None):
    avals = [var.aval for var in body.inputs]
    bindings = bind_symbols(avals, operands, bindings)
    start, stop = _evaluate(start, bindings), _evaluate(stop, bindings)
    result = run_body(body, index, start, stop, step, num_carry, list(operands[:num_carry]),
                      list(operands[num_carry:]), bindings, effects, exit)
    return result[output]


def _loop_rule(*avals, body, index, start, stop, step, num_carry, output=0, bounds=(),
               exact=(), exit=None):
    if len(avals) != len(body.inputs) or len(body.outputs) != num_carry:
        raise ValueError("a loop's operands must match its body's inputs, and its body "
                         "must return its carried values")
    for position, (aval, var) in enumerate(zip(avals, body.inputs)):
        shape = tuple(_expr(dim) for dim in aval.shape)
        if len(shape) != len(var.aval.shape) or aval.dtype != var.aval.dtype or any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(shape, var.aval.shape)
        ):
            raise ValueError(f"loop operand {position} is {aval}, the body takes {var.aval}")
    for position in range(num_carry):
        if body.outputs[position].aval.shape != body.inputs[position].aval.shape or (
            body.outputs[position].aval.dtype != body.inputs[position].aval.dtype
        ):
            raise ValueError(f"carried value {position} changes type in the loop body")
    if not isinstance(step, int) or step == 0:
        raise ValueError("a loop's step must be a nonzero int")
    if exit is not None and not (isinstance(exit, int) and 0 <= exit < num_carry and (
            body.outputs[exit].aval.shape == () and body.outputs[exit].aval.dtype == np.bool_)):
        raise ValueError("a loop's exit must be the position of a carried bool scalar")
    if any(isinstance(dim, SymInt) for aval in avals for dim in aval.shape):
        _verify_body(body, avals)  # the verifier's call (eager calls checked shapes already)
    result = body.outputs[output].aval
    bindings = bind_symbols([var.aval for var in body.inputs],
                            [np.empty([_concrete(dim) for dim in aval.shape], np.bool_)
                             if all(isinstance(_concrete(d), int) for d in aval.shape) else ()
                             for aval in avals])
    shape = tuple(_resolve(dim, bindings, avals) for dim in result.shape)
    return AbstractArray(shape, result.dtype)


def _concrete(dim):
    return dim if isinstance(dim, int) else None


def _resolve(dim, bindings, avals):
    """An output dim: as the body has it when the operands are symbolic (the verifier),
    evaluated when they are concrete (eager shape checks)."""
    if isinstance(dim, DimExpr) and dim.symbols() <= set(bindings) and not any(
        isinstance(d, SymInt) for aval in avals for d in aval.shape
    ):
        return dim.evaluate(bindings)
    for aval in avals:
        for candidate in aval.shape:
            if isinstance(candidate, SymInt) and candidate.expr == dim:
                return candidate
    return dim


def _expr(dim):
    return dim.expr if isinstance(dim, SymInt) else dim


def _verify_body(body, avals):
    """Verify the body as a graph, with the outer symbols (from the operands' live dims)
    and the index symbol declared, assuming the outer graph's shape guards."""
    ranges, guards = {}, {}
    for aval in avals:
        for dim in aval.shape:
            if isinstance(dim, SymInt) and dim.context is not None:
                ranges.update(getattr(dim.context, "ranges", {}))
                guards.update(dict.fromkeys(getattr(dim.context, "shape_guards", ())))
    for var in body.inputs:  # concrete operands (eager checks): any size is possible
        for dim in var.aval.shape:
            if isinstance(dim, DimExpr):
                for name in dim.symbols():
                    ranges.setdefault(name, (1, 1 << 31))
    names = {symbol.name for symbol in body.symbols}
    extra = tuple(Symbol(name, low, high) for name, (low, high) in sorted(ranges.items())
                  if name not in names)
    outer = tuple(guard for guard in guards if guard not in body.shape_guards)
    verify(replace(body, symbols=body.symbols + extra, shape_guards=body.shape_guards + outer))


loop_p = Primitive(
    "loop",
    "control",
    impl=_loop_impl,
    abstract_eval=_loop_rule,
    # Not a per-operand rule: tracejit.tracer.autodiff.reverse hands a loop's results, together, to
    # tracejit.tracer.loop_autodiff.loop_vjp (the reverse of a loop is a loop).
    vjp=None,
)

assert PRIMITIVES["loop"] is loop_p
