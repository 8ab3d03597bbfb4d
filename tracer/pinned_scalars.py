"""Number arguments that decide shapes stay constants of the trace.

With ``dynamic="auto"`` a Python or NumPy number argument seen with a second value becomes
a run-time input (``runtime/shape_policy.py``). That is right for a learning rate, and
wrong for a number Python needs as an int: ``stride`` in a naive convolution,
``x_pad[:, :, i * stride:i * stride + HH]``, turns every slice bound into an ``index``
value guard on the run-time input. Those guards pin the value anyway, and worse, they
pin the loop index too, so the loops over the output grid unroll (one kernel chain per
output pixel: minutes of LLVM for a 4 x 4 image). The design contract says such numbers
stay specialized ("unless they decide control flow or shapes"): the first ``int`` or
``index`` guard of a value computed from a run-time number argument stops the trace with
``ScalarDecidesShape``, the runtime pins those arguments (constants from now on, one
variant per value) and traces again.

Only ``ShapePolicy`` can pin (``pin_scalars``); tracing another path of an existing
variant (``SameEntry``) must keep its entry, so nothing is registered there and the guard
stays a guard.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> class Policy:
...     pinned = set()
...     def __call__(self, leaf_index, array): return {}
...     def scalar_is_dynamic(self, leaf_index): return leaf_index not in self.pinned
...     def pin_scalars(self, leaves): self.pinned |= set(leaves)
>>> try:
...     trace(lambda x, k: x[:k], np.ones(5), 3, dynamic=Policy())
... except ScalarDecidesShape as signal:
...     print(signal.leaves)
(1,)
"""

from __future__ import annotations

from . import count_attributes
from .errors import TraceSignal
from .ir import Var

# The guards that make a run-time number a Python int: its value is then fixed anyway.
_PINNING = ("int", "index")


class ScalarDecidesShape(TraceSignal):
    """A run-time number argument became a Python int (a slice bound, a shape): trace
    again with the arguments at ``leaves`` (positions among the call's leaves) constant."""

    def __init__(self, leaves, small_count=False):
        super().__init__(f"number arguments at leaves {leaves} decide shapes")
        # a trip count too small to capture the loop (loop_trip_counts): pinned until a call
        # passes one a captured loop takes
        self.leaves, self.small_count = leaves, small_count


def note_input(context, var, leaf_index, dynamic):
    """``var`` is the run-time input of the number argument at ``leaf_index``; remember it
    when ``dynamic`` (the shape policy) can pin it. Every such input's leaf is kept in
    ``context.number_leaves`` (a seed argument is read from the call: random_draws)."""
    context.number_leaves = {**getattr(context, "number_leaves", {}), var.name: leaf_index}
    if hasattr(dynamic, "pin_scalars"):
        context.pinnable_scalars = {**getattr(context, "pinnable_scalars", {}),
                                    var.name: leaf_index}


def check_guard(context, atom, convert):
    """Raise ``ScalarDecidesShape`` when a ``convert`` guard on ``atom`` makes a value
    computed from pinnable number inputs a Python int."""
    inputs = {**getattr(context, "pinnable_scalars", {}), **count_attributes.leaves(context)}
    if not inputs or convert not in _PINNING or not isinstance(atom, Var):
        return
    sources = _sources(context, inputs)
    leaves = sources.get(atom.name)
    if leaves:
        count_attributes.pin(context, leaves)  # self.n_iter as a slice bound: a setting
        leaves = [leaf for leaf in leaves if not count_attributes.is_attribute(leaf)]
    if leaves:
        raise ScalarDecidesShape(tuple(sorted(leaves)))


def _sources(context, inputs):
    """For each var of the trace so far, the pinnable inputs it is computed from
    (extended incrementally: the body only grows while tracing)."""
    state = context.__dict__.setdefault("_pinnable_sources", [0, {}])
    done, sources = state
    for name, leaf in inputs.items():  # (a count attribute's input is made mid-trace)
        sources.setdefault(name, frozenset((leaf,)))
    body = context.body
    for eqn in body[done:]:
        out = getattr(eqn, "out", None)
        if out is None:
            continue
        found = frozenset().union(*(sources.get(atom.name, ()) for atom in eqn.inputs
                                    if isinstance(atom, Var)))
        if found:
            sources[out.name] = found
    state[0] = len(body)
    return sources
