"""How many times a kernel computes each value it inlines.

A kernel's lowering reuses a value already computed at the same index
(``KernelBuilder.memo_scopes``), but a view between a value and its reader (a slice, a
pad, a roll's concatenate, a reduction's stage) reads it at another index, so the value is
computed again there. Through a chain of views the copies multiply: a 2-D heat stencil
reads its grid at five offsets a step, so five unrolled steps inlined into one kernel
computed the first step's grid 5**4 times, and LLVM ran for minutes on a 6x7 grid
(``tests/tracer/test_adversarial_real_models15.py``). The scheduler's size bound counts
each equation once, so it did not see that.

``Evaluations`` follows each expression as (value, view path) pairs: pointwise equations
read their operands at their own index, any other equation at an index of its own. The
number of pairs is what the kernel computes per element; the value with the most paths is
the one to give a buffer to.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> def stencil(u):
...     for _ in range(3):
...         u = u[1:] + u[:-1]
...     return u
>>> graph = trace(stencil, np.ones(8)).graph
>>> counts = Evaluations(graph)
>>> [len(counts.of(eqn)) for eqn in graph.equations]
[1, 1, 3, 4, 4, 9, 10, 10, 21]
"""

from __future__ import annotations

from collections import Counter

from tracejit.tracer.ir import Var

from .dtypes import NARROW_MEMORY

# (value, view path) pairs one kernel may compute per element before the value computed
# most often gets a buffer. The few copies views usually make (x[1:] - x[:-1], a pad read
# by a 3x3 window) stay far below; the most among the corpus' models was an LSTM cell's
# gradient program, 207, whose kernels stay as they were. A 2-D heat stencil's unrolled
# steps in one kernel make 185 (two steps, 0.8 s of LLVM), 1312 (three, 3.5 s; 0.9 s cut
# here) and 9201 (four, 12.5 s).
MAX_EVALUATED = 256


class Evaluations:
    """The (value, view path) pairs each equation's inlined expression computes, for
    equations given in program order (``of``); values with a buffer are loaded, not
    computed."""

    def __init__(self, graph, buffers=None):
        self.producers = {eqn.out.name: eqn for eqn in graph.equations}
        self.buffers = {} if buffers is None else buffers
        self.paths = {}

    def of(self, eqn):
        pairs = {(eqn.out.name, ())}
        moved = eqn.prim.kind != "pointwise"  # reads its operands at an index of its own
        for atom in eqn.inputs:
            if not isinstance(atom, Var) or atom.name not in self.producers or (
                    atom.name in self.buffers):
                continue
            inner = self.paths.get(atom.name, {(atom.name, ())})
            if moved:
                pairs.update((name, (eqn.out.name,) + path) for name, path in inner)
            else:
                pairs |= inner
        self.paths[eqn.out.name] = pairs
        return pairs

    def restart(self, name):
        """``name`` got a buffer: expressions reading it load it."""
        self.paths[name] = {(name, ())}

    def most_computed(self, pairs, order):
        """The value of ``pairs`` computed at the most indices (the latest of those), if
        any is computed more than once and may have a buffer."""
        counts = Counter(name for name, _ in pairs)
        candidates = [name for name, count in counts.items() if count > 1
                      and name not in self.buffers
                      and self.producers[name].out.aval.dtype not in NARROW_MEMORY]
        if not candidates:
            return None
        return max(candidates, key=lambda name: (counts[name], order[name]))


__all__ = ["MAX_EVALUATED", "Evaluations"]
