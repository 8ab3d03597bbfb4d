"""IR -> IR passes, run as one visible pipeline; each says why it runs.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> t = trace(lambda x: (x + 1, x * 2)[1], np.ones(3))
>>> len(t.graph.equations), len(optimize(t.graph).equations)
(2, 1)
"""

from __future__ import annotations

from dataclasses import replace

from .discontinuities import check_discontinuities
from .guard_margins import add_guard_margins
from .ir import Eqn, Guard, Var, verify
from .loop_bounds import carry_loop_bounds
from .loop_vectorize import vectorize_loops
from .result_identity import result_arrays


def _checks_inside(eqn):
    """A loop whose body holds a guard or an effect at any depth: its results may go unused
    (n += 1 under an if on data, only h computed), its checks may not."""
    return eqn.prim.name == "loop" and any(
        not isinstance(item, Eqn) or _checks_inside(item)
        for item in eqn.params_dict["body"].body)


def eliminate_dead_code(graph):
    """Drop equations whose values reach no output, guard or effect."""
    live = {atom.name for atom in graph.outputs if isinstance(atom, Var)}
    kept = []
    for item in reversed(graph.body):
        if isinstance(item, Eqn) and item.out.name not in live and not _checks_inside(item):
            continue
        atoms = item.inputs if not hasattr(item, "predicate") else (item.predicate,)
        live.update(atom.name for atom in atoms if isinstance(atom, Var))
        kept.append(item)
    used_constants = tuple((var, c) for var, c in graph.constants if var.name in live)
    return replace(graph, body=tuple(reversed(kept)), constants=used_constants)


def eliminate_common_subexpressions(graph):
    """Compute each (primitive, operands, parameters) once; later copies reuse it. Two
    results stay two arrays: a value a result is or views is merged into no other such
    value (``return x * 2, x * 2``: NumPy returns two arrays, and a write into one must not
    show in the other; ``result_identity``)."""
    results, claimed = result_arrays(graph), set()
    seen, renames, body = {}, {}, []

    def rename(atom):
        return renames.get(atom.name, atom) if isinstance(atom, Var) else atom

    for item in graph.body:
        if isinstance(item, Eqn):
            inputs = tuple(rename(atom) for atom in item.inputs)
            key = (item.prim.name, inputs, item.params)
            kept = seen.get(key)
            if kept is not None and (item.out.name not in results or kept.name not in claimed):
                renames[item.out.name] = kept
                if item.out.name in results:
                    claimed.add(kept.name)
                continue
            item = replace(item, inputs=inputs)
            seen.setdefault(key, item.out)
            if item.out.name in results:
                claimed.add(item.out.name)
        elif hasattr(item, "predicate"):
            item = replace(item, predicate=rename(item.predicate))
        else:
            item = replace(item, inputs=tuple(rename(atom) for atom in item.inputs))
        body.append(item)
    outputs = tuple(rename(atom) for atom in graph.outputs)
    return replace(graph, body=tuple(body), outputs=outputs)


PIPELINE = [
    (vectorize_loops, "a loop whose iterations write disjoint slices and carry nothing else "
     "(naive conv, pooling) is whole-array work: batched, it fuses into a few kernels "
     "instead of one native call per iteration"),
    (eliminate_common_subexpressions, "composites and indexing repeat work (x.shape-based "
     "reductions, masks); compute it once"),
    (eliminate_dead_code, "tracing records what the function computed but never used "
     "(discarded values, shape probes)"),
    (carry_loop_bounds, "a loop carries its rounding from trip to trip: where a decision "
     "inside it or after it reads a carried value, the loop carries that value's bound, "
     "so the checks below (and the body's) see it"),
    (check_discontinuities, "floor, astype(int), //, %, sign, masks and argmax turn our "
     "last-bit differences from NumPy into whole units: near a jump, eager decides (before "
     "the guard margins, which would otherwise find their own bound equations here)"),
    (add_guard_margins, "a guard on a value we round differently from NumPy must not decide "
     "differently: a margin inside the rounding bound lets eager decide"),
    (eliminate_common_subexpressions, "margins of several guards repeat |x| and bounds"),
    (eliminate_dead_code, "bounds emitted for a guard that needed no margin"),
]


def decisions_may_differ(graph):
    """Whether a decision a trace took (an ``if`` on a value, ``int()``, a mask, a floor)
    may not be the one eager NumPy takes on the same call: the checks compiling adds
    (``check_discontinuities``, ``add_guard_margins``) would guard some value here.

    The trace computes with NumPy but on its own layouts (``np.tile(x, (3, 1)).sum(1)``
    sums a broadcast view: 4.5 traced, 4.499999999999998 eagerly), so its values may
    differ from eager ones in the last bits as compiled values do. The runtime then takes
    the first call's result from the compiled program, whose margins let eager decide.

    >>> import numpy as np
    >>> from tracejit.tracer.tracing import trace
    >>> decisions_may_differ(trace(lambda x: x * 2 if x.sum() > 0 else x, np.ones(3)).graph)
    True
    >>> decisions_may_differ(trace(lambda x: x * 2, np.ones(3)).graph)
    False
    """
    def margins(checked):
        return sum(isinstance(item, Guard) and item.convert == "margin" for item in checked.body)

    return margins(add_guard_margins(check_discontinuities(graph))) > margins(graph)


def optimize(graph, check=True):
    """Run ``PIPELINE``. ``check=True`` verifies the graph after every pass (tests: a bad
    pass is caught where it happens); ``"final"`` once, after the last (jit: the safety
    net, at a tenth of the cost on long programs); ``False`` never."""
    for run_pass, _why in PIPELINE:
        graph = run_pass(graph)
        if check is True:
            verify(graph)
    if check == "final":
        verify(graph)
    return graph
