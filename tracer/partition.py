"""Split a joint forward+backward graph into a forward graph and a backward graph.

The joint graph (``tracejit.tracer.autodiff.reverse`` recorded into one trace) has the forward's
inputs plus one cotangent input per differentiable output, and returns the forward's
outputs followed by the gradients. The forward graph computes the outputs and the
*residuals* the backward needs; the backward graph takes the forward's inputs, the
residuals and the cotangents, and returns the gradients.

Which values are residuals (as AOTAutograd's partitioner): a value the backward needs is
*saved* only when it is expensive to recompute - the result of a matmul, a reduction, a
gather or a scatter. Pointwise and view values are *recomputed* inside the backward from
saved values and inputs, where they fuse into the backward's kernels; so the forward
saves little more than the matmul outputs and per-row statistics.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> from tracejit.tracer.autodiff import reverse
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .ir import Eqn, Graph, Var
from .shapes import size_of

# A loop's results are saved too: recomputing them would run the whole loop again.
SAVED_KINDS = {"matmul", "conv", "reduction", "index", "control"}


@dataclass
class Partition:
    forward: Graph  # inputs: the forward inputs; outputs: the outputs, then the residuals
    backward: Graph  # inputs: forward inputs, residuals, cotangents; outputs: gradients
    residuals: list  # the saved vars (forward outputs after the real outputs)
    output_count: int

    def residual_bytes(self, bindings=None):
        """Bytes the forward saves for the backward (at these symbol values)."""
        total = 0
        for var in self.residuals:
            size = size_of(var.aval.shape)
            if not isinstance(size, int):
                size = size.evaluate(bindings or {})
            total += size * var.aval.dtype.itemsize
        return total


def partition(graph, output_count, cotangent_inputs):
    """Split ``graph``: its first ``output_count`` outputs are the forward's, the rest are
    gradients; ``cotangent_inputs`` are the positions of the cotangent inputs."""
    cotangent_names = {graph.inputs[i].name for i in cotangent_inputs}
    forward_inputs = [var for var in graph.inputs if var.name not in cotangent_names]
    cotangents = [graph.inputs[i] for i in cotangent_inputs]
    producers = {eqn.out.name: eqn for eqn in graph.equations}
    constants = {var.name for var, _ in graph.constants}
    inputs = {var.name for var in forward_inputs}

    backward_side = set(cotangent_names)
    for eqn in graph.equations:
        if any(isinstance(a, Var) and a.name in backward_side for a in eqn.inputs):
            backward_side.add(eqn.out.name)

    needed = []  # forward values the backward reads
    for eqn in graph.equations:
        if eqn.out.name in backward_side:
            needed += [a for a in eqn.inputs if isinstance(a, Var) and a.name not in
                       backward_side]
    needed += [a for a in graph.outputs[output_count:] if isinstance(a, Var) and
               a.name not in backward_side]

    saved, recomputed, seen = [], set(), set()
    stack = list(needed)
    while stack:
        var = stack.pop()
        if var.name in seen or var.name in inputs or var.name in constants:
            continue
        seen.add(var.name)
        eqn = producers[var.name]
        if eqn.prim.kind in SAVED_KINDS:
            saved.append(var)
        else:
            recomputed.add(var.name)
            stack.extend(a for a in eqn.inputs if isinstance(a, Var))
    saved.sort(key=lambda var: list(producers).index(var.name))

    forward_body = tuple(item for item in graph.body
                         if not (isinstance(item, Eqn) and item.out.name in backward_side))
    forward = replace(graph, inputs=tuple(forward_inputs), body=forward_body,
                      outputs=tuple(graph.outputs[:output_count]) + tuple(saved))
    backward_body = tuple(
        item for item in graph.body if isinstance(item, Eqn) and (
            item.out.name in backward_side or item.out.name in recomputed)
    )
    backward = replace(
        graph,
        name=graph.name + "_backward",
        inputs=tuple(forward_inputs) + tuple(saved) + tuple(cotangents),
        body=backward_body,
        outputs=tuple(graph.outputs[output_count:]),
    )
    return Partition(forward, backward, saved, output_count)
