"""Sums with NumPy's bits: a float sum the user wrote (``np.sum``, ``x.sum()``,
``np.mean``, ``x.mean()``) that a decision reads is computed by NumPy's own ``add`` loop
in its reduce mode, over the rows NumPy hands it, so on exact operands it is NumPy's to
the bit and carries no rounding bound (``margin_rules._sum``).

Why: a training loop's bias update ``b -= lr * np.sum(dZ, axis=1, keepdims=True)`` feeds
the next trip's relu mask ``Z = W @ A + b > 0``. Summed in our order, ``b`` was a few ulp
from NumPy's, so the loop carried a bound for every weight (``loop_bounds``; Coursera's
``L_layer_model``: 664 of 761 equations were bound arithmetic) and the masks' margins
failed after ~1400 trips. NumPy's products are already its BLAS calls
(``codegen/numpy_products.py``); with NumPy's sums too, the weights enter each trip exact
and leave it exact, so the loop carries no bound at all.

What NumPy does (``numpy/_core/src/umath/loops_utils.h.src``, NumPy 2.4): ``np.add.reduce``
starts each output at the identity ``0.0`` and adds ``pairwise_sum`` of the inner loop's
elements (8 accumulators over blocks of up to 128, halves above that). Its iterator drops
unit axes, coalesces contiguous ones and makes the smallest-stride axis the inner loop, so
for a C-ordered operand reduced over its trailing axes (all of them included) the inner
loop is each output's whole contiguous row: ``0.0 + pairwise_sum(row)``, with no
buffering when no cast is needed (checked for rows of 1..300 and up to 100,000 elements,
float64 and float32). Over leading axes the inner loop runs along the kept axis (another
order): those keep their bound, as do sums NumPy casts (``dtype=``), masks (``where=``),
F-ordered or strided operands (``margin_rules._c_ordered``), and sums tracejit's own
composites make (``np.linalg.norm`` is a BLAS dot in NumPy): only the user's own call is
marked (``note_user_sums``).

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> graph = trace(lambda x: np.sum(x, axis=1) > 0, np.ones((2, 3))).graph
>>> [is_marked(graph, eqn) for eqn in graph.equations if eqn.prim.name == "sum"]
[True]
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

from .dims import _USER_CALLERS
from .locations import is_tracejit
from .primitives import current_context

# The marker a user's ``np.sum``/``np.mean`` leaves on its sum's location.
ADD_REDUCE = "np.add.reduce"
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# Whether compiled code sums a decided, marked sum by NumPy's loop for this dtype:
# codegen/numpy_sums.py sets the test (the tracer does not import codegen).
_numpy_sums = [lambda dtype: False]


def set_numpy_sums(test):
    """``test(dtype)``: compiled code computes decided sums of ``dtype`` by NumPy's loop."""
    _numpy_sums[0] = test


def start():
    """Where the current trace stands, for ``note_user_sums`` after a call."""
    context = current_context()
    return None if context is None else len(context.body)


def note_user_sums(before, operand, dtype=None, where=True, depth=2):
    """Mark the float sums of ``operand`` recorded since ``before`` (``start()``) as
    NumPy's ``add.reduce`` of it, when the call came from the user's code (the frame
    ``depth`` up is not tracejit's, or is the front end's call on the user's behalf:
    ``dims.calls_for_the_user``), computed no cast and masked nothing."""
    context = current_context()
    if context is None or before is None or where is not True:
        return
    var = getattr(operand, "ir_var", None)
    if var is None or np.dtype(var.aval.dtype) not in FLOATS or (
            dtype is not None and np.dtype(dtype) != var.aval.dtype):
        return
    code = sys._getframe(depth).f_code
    if code not in _USER_CALLERS and is_tracejit(code.co_filename):
        return  # a composite's sum (np.linalg.norm's): NumPy may compute it otherwise
    locations = context.locations
    for eqn in context.body[before:]:
        if getattr(eqn, "prim", None) is not None and eqn.prim.name == "sum" and (
                eqn.inputs[0] == var and eqn.out.aval.dtype == var.aval.dtype
                and eqn.out.name in locations and locations[eqn.out.name] is not None):
            locations[eqn.out.name] = replace(locations[eqn.out.name], via=ADD_REDUCE)


def is_marked(graph, eqn):
    """``eqn`` is a sum the user's ``np.sum``/``np.mean`` made (``note_user_sums``)."""
    location = (getattr(graph, "locations", None) or {}).get(eqn.out.name)
    return location is not None and location.via == ADD_REDUCE


def rows_are_trailing(eqn):
    """The reduced axes are the operand's last ones once its static unit axes are dropped
    (NumPy's iterator drops them): each output sums one contiguous row of a C-ordered
    operand."""
    shape, axes = eqn.inputs[0].aval.shape, set(eqn.params_dict["axes"])
    kept_after = False
    for axis in reversed(range(len(shape))):
        if isinstance(shape[axis], int) and shape[axis] == 1:
            continue
        if axis in axes and kept_after:
            return False
        kept_after = kept_after or axis not in axes
    return True


def numpy_order(ctx, eqn, c_ordered):
    """Whether compiled code computes the sum ``eqn`` as NumPy's ``add.reduce`` does, so
    that on exact operands it is NumPy's to the bit: the user's call, no cast, trailing
    rows of an operand NumPy holds C-ordered (``c_ordered(ctx, atom)``), and codegen sums
    it by NumPy's loop (``set_numpy_sums``)."""
    dtype = np.dtype(eqn.out.aval.dtype)
    operand = eqn.inputs[0]
    return (dtype in FLOATS and getattr(operand, "aval", None) is not None
            and np.dtype(operand.aval.dtype) == dtype
            and is_marked(getattr(ctx, "graph", None), eqn) and rows_are_trailing(eqn)
            and _numpy_sums[0](dtype) and c_ordered(ctx, operand))


__all__ = ["is_marked", "note_user_sums", "numpy_order", "rows_are_trailing",
           "set_numpy_sums", "start"]
