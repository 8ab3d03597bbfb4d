"""Which math functions compiled code computes with NumPy's own bits where a decision
reads them: their results carry no rounding bound against NumPy's (``margin_rules``), so a
comparison that reads them needs no margin.

Codegen answers (``codegen/numpy_loops.exact_loop``, installed here by ``set_source`` when
codegen is imported: the tracer knows nothing of codegen): the setting
``TRACEJIT_NUMPY_MATH`` (float64 by default), and the loop's bit-for-bit check in this
process at its first use. The setting is part of the disk cache key
(``codegen/llvm.host_description``), with NumPy's version. Codegen computes with NumPy's
loop every such equation a decision reads (``codegen/numpy_products.decision_math``),
which are the ones a margin asks about.

>>> import numpy as np
>>> before = _source[0]
>>> set_source(lambda name, dtype: name == "exp" and dtype == np.float64)
>>> is_exact("exp", np.float64), is_exact("exp", np.float32), is_exact("log", np.float64)
(True, False, False)
>>> set_source(before)

A margin asks ``exact_result``: also where NumPy's loop reads the operand (layouts).
"""

from __future__ import annotations

import numpy as np

_source = [lambda name, dtype: False]  # tracer used alone: our own math everywhere


def set_source(exact):
    """``exact(name, dtype)``: compiled ``np.<name>`` on ``dtype`` is NumPy's bits."""
    _source[0] = exact


def is_exact(name, dtype):
    return bool(_source[0](name, np.dtype(dtype)))


# Primitives whose NumPy result is a fresh array (C- or F-ordered, positive strides) or a
# scalar. NumPy's SIMD loops give other bits on some layouts: np.exp(x[::-1]) and
# np.log(x[::-1]) (a negative stride) fall back to libm's scalar functions, so a value
# computed from an argument, a view (a slice, flip, transpose, broadcast) or a body's
# input is NumPy's bits only as NumPy's layout has it: those keep their bound.
_FRESH_KINDS = ("pointwise", "reduction", "matmul", "conv", "scan", "index", "creation")


def exact_result(eqn, producers):
    """``eqn`` (a math function) gives NumPy's bits: the function is exact and NumPy reads
    its operand from an array it made itself (``producers``: the graph's equations by
    output name)."""
    operand = eqn.inputs[0]
    producer = producers.get(getattr(operand, "name", None))
    if producer is None or producer.prim.kind not in _FRESH_KINDS:
        return False
    if producer.prim.name == "stop_gradient" or (producer.prim.name == "cast" and (
            producer.inputs[0].aval.dtype == producer.out.aval.dtype)):
        return False  # the same array
    return is_exact(eqn.prim.name, eqn.out.aval.dtype)
