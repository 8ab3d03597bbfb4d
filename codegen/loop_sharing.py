"""Captured loops whose bodies differ only in int offsets share one compiled program.

An outer loop that unrolls (a small static trip count) leaves one captured inner loop per
outer trip, and their bodies differ only in the ints the outer indices became: Zhou's
max-pool backward reads ``im_region[i2, j2, f2]`` at starts ``(0, 0, f2)``, ``(0, 1, f2)``,
..., and the course's ``conv_backward`` reads ``dZ[i, h, w, c]`` for each unrolled ``i``.
Each body was compiled as a program of its own, one LLVM module each, all the same but for
those ints (81 modules for an 8x8x4 max pool). Here the loops of one program are grouped by
their body with every int slice start and pad offset taken out (``share``); in a group of
two or more, the offsets that differ become symbols of the body (before the index; named
as loop indices from ``i900000``), the first member's body is compiled for the group, and
each loop passes its own offsets at run time as it passes its index (``_Loop.lifted``).
The segments between loops are shared the same way (``_Segment.lifted``).

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> from tracejit.codegen.loops import loop_body
>>> def rows(x, y):
...     for i in range(2):               # unrolled: two captured loops over t
...         for t in range(x.shape[1]):
...             y[i, t] = x[i, t] * 2.0
...     return y
>>> graph = trace(rows, np.ones((2, 5)), np.zeros((2, 5)), dynamic=True).graph
>>> loops = [eqn for eqn in graph.equations if eqn.prim.name == "loop"]
>>> bodies = [(n, f"rows_loop{n}", eqn.params_dict["index"], loop_body(graph, eqn).graph)
...           for n, eqn in enumerate(loops)]
>>> shared = share(bodies)
>>> [shared[n][1] for n in range(2)], shared[0][0] is shared[1][0]
([{'i900000': 0}, {'i900000': 1}], True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.ir import Eqn, Graph, Symbol

# Lifted offsets are named as loop indices (the disk cache admits symbols named i<digits>
# and s<digits> only), numbered from here past any symbol the program has.
LIFT_BASE = 900000
_VAR = re.compile(r"%(\d+)")


@dataclass
class Group:
    """Loops sharing a program: ``graph`` is the first member's body with the differing
    offsets as symbols, ``name`` and ``index`` its program name and index symbol. The first
    member to build sets ``program`` (and the schedule its driver was built from,
    ``plan``, or why it has none, ``refusal``); the others take it."""

    graph: Graph
    name: str
    index: str
    program: object = None
    plan: object = None
    refusal: object = None

    def program_for(self, build):
        """The group's program, made by ``build()`` for the first member that asks."""
        if self.program is None:
            self.program = build()
        return self.program


def share(bodies):
    """``{key: (Group, {symbol: start})}`` for the loops among ``bodies`` (``[(key, program
    name, index symbol, body graph)]``, in build order) whose body another loop's equals
    up to int slice starts, variable names and the index's name."""
    keyed, used = {}, set()
    for key, name, index, graph in bodies:
        used |= _symbol_names(graph)
        lifted, starts = _lift(graph, None, None, index is not None)
        keyed.setdefault(_canonical(lifted, index), []).append((key, name, index, graph,
                                                                starts))
    shared = {}
    for members in keyed.values():
        if len(members) < 2:
            continue
        count = len(members[0][4])
        differing = [n for n in range(count) if len({m[4][n] for m in members}) > 1]
        ranges = [(min(m[4][n] for m in members), max(m[4][n] for m in members))
                  for n in differing]
        _, name, index, graph, _ = members[0]
        names = _fresh_names(len(differing), used)
        group = Group(_lift(graph, dict(zip(differing, names)), ranges, index is not None)[0],
                      name, index)
        for key, _, _, _, starts in members:
            shared[key] = (group, {symbol: starts[n] for symbol, n in zip(names, differing)})
    return shared


def _symbol_names(graph):
    """The symbols ``graph`` and the loop bodies in it declare."""
    names = {symbol.name for symbol in graph.symbols}
    for eqn in graph.equations:
        if eqn.prim.name == "loop":
            names |= _symbol_names(eqn.params_dict["body"])
    return names


def _fresh_names(count, used):
    names, number = [], LIFT_BASE
    while len(names) < count:
        if f"i{number}" not in used:
            names.append(f"i{number}")
            used.add(names[-1])
        number += 1
    return names


def _lift(graph, positions, ranges, indexed):
    """``graph`` with the int offsets of its slices (starts) and pads (low pads) at
    ``positions`` (``{number: symbol name}``, numbered in order over every such axis;
    None: all of them, as placeholders for ``_canonical``) as symbols of ``ranges``, and
    every such offset's value. A lifted offset keeps the result's static shape: a
    slice ``s:l`` becomes ``lift_k:lift_k + (l - s)``, a pad ``(low, high)`` becomes
    ``(lift_k, low + high - lift_k)``."""
    offsets, lifted, bodies = [], [], {}

    def offset(value):
        """``value``, or the symbol that replaces it."""
        number = len(offsets)
        offsets.append(value)
        if positions is not None and number not in positions:
            return value
        lifted.append(f"@offset{number}" if positions is None else positions[number])
        return DimExpr.symbol(lifted[-1])

    def lift_in(graph):
        """``graph``'s items with their offsets lifted (loop bodies in it too)."""
        return tuple(lift_item(item) for item in graph.body)

    def lift_item(item):
        name = item.prim.name if isinstance(item, Eqn) else None
        if name not in ("slice", "pad", "loop"):
            return item
        params = item.params_dict
        if name == "loop":  # a nested loop's body reads the offsets as outer symbols
            inner = params["body"]
            if id(inner) not in bodies:  # once for the equations of each of its results
                bodies[id(inner)] = replace(inner, body=lift_in(inner))
            params.update(body=bodies[id(inner)])
        elif name == "slice":
            starts, limits = list(params["starts"]), list(params["limits"])
            for axis, (start, limit) in enumerate(zip(params["starts"], params["limits"])):
                if isinstance(start, int) and isinstance(limit, int):
                    starts[axis] = offset(start)
                    limits[axis] = starts[axis] + (limit - start)
            params.update(starts=tuple(starts), limits=tuple(limits))
        else:
            config = list(params["config"])
            for axis, (low, high, interior) in enumerate(params["config"]):
                # Not a crop (a negative pad): a symbol's range starts at 0.
                if isinstance(low, int) and isinstance(high, int) and low >= 0 <= high:
                    lifted_low = offset(low)
                    config[axis] = (lifted_low, low + high - lifted_low, interior)
            params.update(config=tuple(config))
        return replace(item, params=tuple(sorted(params.items())))

    body = lift_in(graph)
    if not lifted:
        return graph, offsets
    bounds = ranges if ranges is not None else [(0, 0)] * len(lifted)
    symbols = [Symbol(name, low, high) for name, (low, high) in zip(lifted, bounds)]
    if not indexed:
        return replace(graph, body=body, symbols=(*graph.symbols, *symbols)), offsets
    # Before the index: it stays the wrapper's last explicit argument.
    return replace(graph, body=body,
                   symbols=(*graph.symbols[:-1], *symbols, graph.symbols[-1])), offsets


def _canonical(graph, index):
    """``graph``'s text with its variables numbered in order of appearance and the loop
    indices (``index``, then those of loops in it) named ``@index0``, ...: equal for bodies
    that compile to the same program."""
    if index is None:  # a segment: named for its place in the program, not its work
        graph = replace(graph, name="")
    numbers = {}
    text = _VAR.sub(lambda match: "%" + str(numbers.setdefault(match.group(1), len(numbers))),
                    str(graph))
    indices = [*([index] if index is not None else []), *_nested_indices(graph)]
    for number, name in enumerate(indices):
        text = re.sub(rf"\b{re.escape(name)}\b", f"@index{number}", text)
    return text


def _nested_indices(graph):
    for eqn in graph.equations:
        if eqn.prim.name == "loop":
            yield eqn.params_dict["index"]
            yield from _nested_indices(eqn.params_dict["body"])
