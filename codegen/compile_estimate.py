"""What compiling a graph will cost, told before any lowering or LLVM runs.

Compile time grows with the LLVM IR a program lowers to, and the IR with its equations:
about 1 KB an equation for ordinary model code, about 4 KB an equation for the bound
arithmetic ``tracer/loop_bounds`` and the margin checks add (magnitude products, rounding
bounds of math functions, one kernel each). The estimate counts both kinds in the
optimized graph, each loop body once (every output of a loop is its own equation over
one shared body), and turns them into seconds of an idle core:

>>> import numpy as np
>>> from tracejit.tracer.passes import optimize
>>> from tracejit.tracer.tracing import trace
>>> estimate = estimate_compile(optimize(trace(lambda x: np.tanh(x) * 2, np.ones(3)).graph))
>>> estimate.equations, estimate.bound_equations
(2, 0)
>>> estimate.seconds < 0.1
True

Measured on the shared 2-core machine (load 2.5, llvmlite 0.50): Coursera's
``L_layer_model`` on a 4-3-1 net, 581 equations of which 491 bound ones, lowered to 2.0 MB
of IR and compiled in 6.5 s (1.9 s scheduling and lowering, 3.2 s LLVM); the course's own
logistic regression (87 equations, no bounds) to 84 KB in 0.7 s of LLVM. Lowering the
optimization level does not pay on such programs: at O1 and O2 LLVM took as long as at O3
(code generation dominates), and O0 halved it for code 8x slower.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracejit.tracer.ir import Eqn
from tracejit.tracer.ops import loop_p

# Seconds of an idle core per equation (plain, and bound arithmetic), from the
# measurements above (a bound equation lowers to ~4x the IR of a plain one).
SECONDS_PER_EQUATION = 0.001
SECONDS_PER_BOUND_EQUATION = 0.01


@dataclass(frozen=True)
class CompileEstimate:
    """The size of an optimized graph as compiling sees it: ``equations`` (each loop body
    once, bounds included), ``bound_equations`` (those a pass added to check others:
    carried rounding bounds, margins) and ``loops`` (distinct loop bodies)."""

    equations: int
    bound_equations: int
    loops: int

    @property
    def seconds(self):
        """The compile's expected seconds on an idle core (a loaded machine takes longer)."""
        plain = self.equations - self.bound_equations
        return plain * SECONDS_PER_EQUATION + self.bound_equations * SECONDS_PER_BOUND_EQUATION

    def __add__(self, other):
        return CompileEstimate(self.equations + other.equations,
                               self.bound_equations + other.bound_equations,
                               self.loops + other.loops)

    def __str__(self):
        return (f"{self.equations} equations ({self.bound_equations} of them rounding "
                f"bounds), {self.loops} loop bodies: about {self.seconds:.0f} s to compile")


NOTHING = CompileEstimate(0, 0, 0)


def estimate_compile(graph):
    """The ``CompileEstimate`` of ``graph`` (optimized: its bounds and margins added)."""
    equations = bound_equations = loops = 0
    seen = set()
    stack = [graph]
    while stack:  # bodies hold bodies (a loop nested in a loop): no recursion
        current = stack.pop()
        checks = current.check_vars
        for item in current.body:
            if not isinstance(item, Eqn):
                continue
            equations += 1
            bound_equations += item.out.name in checks
            if item.prim is loop_p:
                body = item.params_dict["body"]
                if id(body) not in seen:
                    seen.add(id(body))
                    loops += 1
                    stack.append(body)
    return CompileEstimate(equations, bound_equations, loops)


__all__ = ["NOTHING", "CompileEstimate", "estimate_compile"]
