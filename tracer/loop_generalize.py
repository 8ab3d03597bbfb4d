"""Generalizing two traced loop trips into one loop body (``tracejit.tracer.loops``).

Iterations 1 and 2 of a loop are traced on fresh block parameters with the index a
symbolic ``SymInt``; ``_generalize`` compares the two recordings equation by equation:
they must be equal up to variable names, with params (slice starts, pad configs) that
depend on the index as ``DimExpr``s of it. Anything that differs - a different op, an int
computed in Python, a shape that changes, a value from iteration 1 read in iteration 2
other than through a carried value - raises ``Refused`` (the loop is unrolled, with the
reason logged). ``tracejit.tracer.loop_autodiff`` generalizes its replays with
``samples``, which lets weak numbers that are affine in the index become dims.
"""

from __future__ import annotations

from .dims import DimExpr
from .errors import TraceSignal
from .ir import Effect, Eqn, Graph, Guard, Literal, Symbol, Var


class Refused(TraceSignal):
    """Why a loop is not captured (it runs unrolled)."""


def _affine(value1, value2):
    """``value1`` at trip ``t1`` and ``value2`` at ``t1 + step`` as affine in the index
    (``_generalize``'s ``samples``)."""
    t1, step, symbol = _SAMPLES
    difference = value2 - value1
    if not isinstance(difference, int) or difference % step:
        raise Refused("a parameter changes with the index in a way that is not affine")
    return value1 + (difference // step) * (DimExpr.symbol(symbol) - t1)


class _Generalized:
    def __init__(self):
        self.body, self.renames = [], {}


def _index_shape(aval, index):
    return any(isinstance(dim, DimExpr) and index in dim.symbols() for dim in aval.shape)


def _generalize(recorded1, recorded2, params1, params2, index, samples=None):
    """One body for every iteration from the recordings of two, or ``Refused``. The index
    was symbolic in both (``tracejit.tracer.loop_index``), so the recordings must be the same up to
    variable names: params and literals equal (``x[t]`` slices at ``i0`` in both), any int
    that differs was computed from something other than the index and is refused.

    ``samples=(t1, step)``: the recordings were made at concrete indices ``t1`` and ``t1 +
    step`` instead, and ints that differ are taken as affine in the index. Only
    ``tracejit.tracer.loop_autodiff`` replays a captured body that way (its backward rules run on
    concrete params); an inference from two samples, kept there until the replay is
    symbolic too."""
    global _SAMPLES
    outer, _SAMPLES = _SAMPLES, None if samples is None else (*samples, index)
    try:
        return _generalize_items(recorded1, recorded2, params1, params2, index)
    finally:
        _SAMPLES = outer


_SAMPLES = None  # (t1, step, index) while tracejit.tracer.loop_autodiff generalizes replays


def _generalize_items(recorded1, recorded2, params1, params2, index):
    result = _Generalized()
    memo = {}  # nested loop bodies generalized once per group of loop equations
    renames = result.renames  # iteration-2 var name -> iteration-1 var
    for p1, p2 in zip(params1, params2):
        renames[p2.name] = p1
    defined1 = {p.name for p in params1}
    free = {}
    if len(recorded1) != len(recorded2):
        raise Refused("the body records a different number of operations in iterations 1 "
                      "and 2 (control flow that depends on the index or the data)")
    for item1, item2 in zip(recorded1, recorded2):
        if not isinstance(item1, Eqn) or not isinstance(item2, Eqn):
            result.body.append(_generalize_check(item1, item2, renames, defined1, free))
            continue
        if item1.prim is not item2.prim or len(item1.inputs) != len(item2.inputs):
            raise Refused(f"iteration 2 computes {item2.prim.name} where iteration 1 "
                          f"computed {item1.prim.name}")
        inputs = []
        for atom1, atom2 in zip(item1.inputs, item2.inputs):
            if isinstance(atom1, Var) and isinstance(atom2, Var):
                mapped = renames.get(atom2.name)
                if mapped is not None:
                    if mapped != atom1:
                        raise Refused(f"{item1.prim.name} reads different values in "
                                      "iterations 1 and 2")
                elif atom1 == atom2 and atom1.name not in defined1:
                    free[atom1.name] = atom1
                else:
                    raise Refused(f"{item1.prim.name} in iteration 2 reads a value computed in "
                                  "iteration 1 other than through a loop variable (e.g. "
                                  "hs[t - 1] on a dict or list)")
                inputs.append(atom1)
            elif isinstance(atom1, Literal) and isinstance(atom2, Literal):
                inputs.append(_literal(atom1, atom2, item1.prim.name))
            else:
                raise Refused(f"{item1.prim.name} mixes a constant and a computed value "
                              "between iterations")
        params = tuple((key, _param(value1, value2, index, memo,
                                    f"{item1.prim.name}'s {key}"))
                       for (key, value1), (_, value2) in zip(item1.params, item2.params))
        if item1.out.aval != item2.out.aval:
            raise Refused(f"{item1.prim.name} gives {item1.out.aval} in iteration 1 and "
                          f"{item2.out.aval} in iteration 2 (a shape that changes between "
                          "iterations)")
        if _index_shape(item1.out.aval, index):
            raise Refused(f"{item1.prim.name} gives {item1.out.aval}: a shape that changes "
                          "with the index")
        renames[item2.out.name] = item1.out
        defined1.add(item1.out.name)
        result.body.append(Eqn(item1.prim, tuple(inputs), params, item1.out))
    return result, list(free.values())


def _generalize_check(item1, item2, renames, defined1, free):
    """A guard (``if`` on traced data) or a print inside the body, the same in iterations 1
    and 2: evaluated at every iteration of the loop."""
    location = getattr(item1, "location", None)
    at = f" at {location.short}" if location is not None else ""
    if type(item1) is not type(item2) or getattr(item1, "location", None) != getattr(
        item2, "location", None
    ):
        raise Refused(f"the body checks or prints different things in iterations 1 and 2{at} "
                      "(control flow that depends on the index or the data)")
    if isinstance(item1, Guard):
        if item1.convert != item2.convert or item1.expected != item2.expected:
            raise Refused(f"the if{at} goes different ways in iterations 1 and 2 (captured "
                          "loops need one path; the loop is unrolled)")
        predicate = _match_atom(item1.predicate, item2.predicate, renames, defined1, free,
                                f"the if{at}")
        return Guard(predicate, item1.convert, item1.expected, item1.location)
    if isinstance(item1, Effect):
        if item1.kind != item2.kind or len(item1.inputs) != len(item2.inputs):
            raise Refused(f"the print{at} prints different things in iterations 1 and 2")
        inputs = tuple(_match_atom(atom1, atom2, renames, defined1, free, f"the print{at}")
                       for atom1, atom2 in zip(item1.inputs, item2.inputs))
        if item1.params != item2.params:
            raise Refused(f"the print{at} prints text that changes between iterations (only "
                          "arrays, dims and the index are printed from a captured loop)")
        return Effect(item1.kind, inputs, item1.params, item1.location)
    raise Refused(f"the body holds a {type(item1).__name__}{at}")


def _match_atom(atom1, atom2, renames, defined1, free, what):
    """The body's atom for ``atom1``/``atom2`` read by ``what`` in iterations 1 and 2."""
    if isinstance(atom1, Var) and isinstance(atom2, Var):
        mapped = renames.get(atom2.name)
        if mapped is not None:
            if mapped != atom1:
                raise Refused(f"{what} reads different values in iterations 1 and 2")
        elif atom1 == atom2 and atom1.name not in defined1:
            free[atom1.name] = atom1
        else:
            raise Refused(f"{what} in iteration 2 reads a value computed in iteration 1 "
                          "other than through a loop variable")
        return atom1
    if isinstance(atom1, Literal) and isinstance(atom2, Literal):
        return _literal(atom1, atom2, what)
    raise Refused(f"{what} mixes a constant and a computed value between iterations")


def _param(value1, value2, index, memo, what):
    if isinstance(value1, Graph) and isinstance(value2, Graph):
        return _nested_body(value1, value2, index, memo)
    if isinstance(value1, tuple) and isinstance(value2, tuple) and len(value1) == len(value2):
        return tuple(_param(a, b, index, memo, what) for a, b in zip(value1, value2))
    if type(value1) is type(value2) and (value1 == value2) is True:
        return value1
    if _SAMPLES is not None and all(isinstance(value, (int, DimExpr)) and not isinstance(
            value, bool) for value in (value1, value2)):
        return _affine(value1, value2)
    raise Refused(f"{what} is {value1} in iteration 1 and {value2} in iteration 2: a value "
                  "computed in Python from something other than the index (or from the "
                  "index through a Python int, float or list)")


def _nested_body(graph1, graph2, index, memo):
    """The body of a loop nested in the loop being captured, from its two recordings (one
    per outer trial): the same equations up to variable names (the outer index is the
    same symbol in both, ``x_pad[:, :, i*s:i*s+HH, j*s:...]`` in a ``j`` loop inside an
    ``i`` loop). The inner loop's own index has the same name in both recordings
    (``_capture`` numbers the body's loops the same way in both trials)."""
    key = (id(graph1), id(graph2))
    if key in memo:
        return memo[key][0]
    if len(graph1.inputs) != len(graph2.inputs) or len(graph1.outputs) != len(graph2.outputs):
        raise Refused("a nested loop carries different values in iterations 1 and 2")
    for var1, var2 in zip(graph1.inputs, graph2.inputs):
        if var1.aval != var2.aval:
            raise Refused(f"a nested loop's operand is {var1.aval} in iteration 1 and "
                          f"{var2.aval} in iteration 2")
    if graph1.constants or graph2.constants:
        raise Refused("a nested loop's body holds constants")
    names1 = [symbol.name for symbol in graph1.symbols]
    if names1 != [symbol.name for symbol in graph2.symbols]:
        raise Refused("nested loops are numbered differently in iterations 1 and 2")
    body, free = _generalize(list(graph1.body), list(graph2.body), graph1.inputs,
                             graph2.inputs, index)
    if free:
        raise Refused("a nested loop's body reads a value that is not one of its operands")
    outputs = []
    for atom1, atom2 in zip(graph1.outputs, graph2.outputs):
        if isinstance(atom1, Var) and isinstance(atom2, Var):
            if body.renames.get(atom2.name, atom2) != atom1:
                raise Refused("a nested loop returns different values in iterations 1 and 2")
            outputs.append(atom1)
        elif isinstance(atom1, Literal) and isinstance(atom2, Literal):
            outputs.append(_literal(atom1, atom2, "a nested loop's result"))
        else:
            raise Refused("a nested loop returns a constant in one iteration only")
    symbols = tuple(Symbol(s1.name, min(s1.low, s2.low), max(s1.high, s2.high))
                    for s1, s2 in zip(graph1.symbols, graph2.symbols))
    graph = Graph(graph1.name, graph1.inputs, (), tuple(body.body), tuple(outputs), symbols)
    memo[key] = (graph, graph1, graph2)  # the graphs stay alive: their ids stay unique
    return graph


def _literal(atom1, atom2, what):
    if atom1 == atom2:
        return atom1
    if _SAMPLES is not None and atom1.aval.weak and atom2.aval.weak and all(
        isinstance(value, (int, DimExpr)) and not isinstance(value, bool)
        for value in (atom1.value, atom2.value)
    ):
        return Literal.of(_affine(atom1.value, atom2.value))
    raise Refused(f"a constant read by {what} is {atom1.value!r} in iteration 1 and "
                  f"{atom2.value!r} in iteration 2 (a number computed in Python, such as "
                  "float(t) or tokens[t])")
