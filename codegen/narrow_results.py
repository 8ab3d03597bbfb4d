"""Narrow integer values made in the function: ``np.clip(img * 255, 0, 255).astype(np.uint8)``
(the last line of much image code), ``out[1:] = u`` into a uint8 buffer.

Compiled code computes in bool, int32, int64, float32 and float64 (``dtypes.SUPPORTED``).
A cast to int8, uint8, int16 or uint16 is still compiled: the kernel computes in the wide
dtype and the cast is the last step, giving the narrow element it stores, as are moves of
such values that do no arithmetic in their dtype (``is_stored_narrow``: ``np.where``
between them and literals the dtype holds, ``pad``, ``full``: the functional form of
``img[mask] = 0`` or ``out[1:] = u``; exact in any dtype). What reads them is checked as
for a narrow argument (``narrow_inputs.check_narrow_uses``): a converting use compiles,
``u + 1`` (wraps at 256 in NumPy) runs the function eagerly.

* From an integer or bool: NumPy's cast keeps the low bits (``np.int64(300)`` -> uint8 44),
  the same as LLVM's ``trunc``: exact for every value.
* From a float: NumPy's cast is C's, defined where the value truncated toward zero fits
  the target; elsewhere (NaN, inf, -1.0 or 256.0 into uint8) the result is the platform's
  (x86: wrapped through int32, or whatever NumPy's SIMD loop does). The kernel converts
  values in ``[min, max + 1)`` of the target exactly and reports
  ``NARROW_CAST_OUT_OF_RANGE`` for any other: the call then runs eagerly (a side exit,
  before any result or write escapes), so the result is NumPy's own, with its warning.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> from tracejit.codegen.narrow_inputs import check_narrow_uses
>>> image = trace(lambda x: np.clip(x * 255, 0, 255).astype(np.uint8), np.zeros(3)).graph
>>> len(narrow_results(image))
1
>>> len(narrow_results(trace(lambda x: x.astype(np.uint8) + 1, np.zeros(3)).graph))
1
>>> check_narrow_uses(trace(lambda x: x.astype(np.uint8) + 1, np.zeros(3)).graph)
Traceback (most recent call last):
...
tracejit.tracer.errors.UnsupportedError: <doctest ...>:1: compiled code computes in bool, \
int32, int64, float32 and float64; add of a uint8 array computes in uint8 (convert it first: \
x.astype(np.int32))
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tracejit.tracer import ops
from tracejit.tracer.ir import Eqn, Var

from .dtypes import I32, NARROW_MEMORY

# The dtypes a result may be stored in without compiled code computing in them.
STORE_ONLY = frozenset(map(np.dtype, ("int8", "uint8", "int16", "uint16")))
NARROW_CAST_OUT_OF_RANGE = 4  # a kernel status (codegen/pointwise.KernelStatus)
# Why such a call ran eagerly (``stats()['eager_calls']``; ``eager_reasons`` names the
# casts' lines first, then ``NARROW_RANGE_DETAIL``: ``exit_codes.exit_reason``)
NARROW_RANGE_REASON = "a float cast to a narrow integer result was out of its range or NaN"
NARROW_RANGE_DETAIL = "NumPy's cast is the platform's there"


def is_stored_narrow(eqn):
    """``eqn`` makes a ``STORE_ONLY`` value without arithmetic in its dtype: a cast to it,
    or a move of such values (``np.where`` between them, ``pad``: the functional form of
    ``out[1:] = u`` into a uint8 buffer, ``reshape``), exact in any dtype. Its uses are
    checked as a narrow argument's are (``narrow_inputs.check_narrow_uses``)."""
    dtype = np.dtype(eqn.out.aval.dtype)
    if dtype not in STORE_ONLY:
        return False
    if eqn.prim is ops.cast_p:
        return True
    if eqn.prim is ops.where_p:
        return all(_holds(atom, dtype) for atom in eqn.inputs[1:])
    if eqn.prim in (ops.pad_p, ops.reshape_p):
        # (reshape: a loop filling out[t] row by row, vectorized, stacks its rows as
        # (T, 1, ...) and back; a dynamic T gives the result its own buffer)
        return np.dtype(eqn.inputs[0].aval.dtype) == dtype
    if eqn.prim is ops.full_p:  # np.zeros(shape, np.uint8)
        return _exact(eqn.params_dict["value"], dtype)
    return False


def _holds(atom, dtype):
    """``atom`` is a ``dtype`` value, or a literal that dtype holds exactly."""
    if isinstance(atom, Var):
        return np.dtype(atom.aval.dtype) == dtype
    return _exact(atom.value, dtype)


def _exact(value, dtype):
    if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return False  # (a dim)
    info = np.iinfo(dtype)
    return float(value).is_integer() and info.min <= value <= info.max


def narrow_results(graph):
    """Names of the values in ``graph`` that ``is_stored_narrow`` makes: compiled code
    stores them (their uses are checked by ``check_narrow_uses``)."""
    return {item.out.name for item in graph.body
            if isinstance(item, Eqn) and is_stored_narrow(item)}


def narrow_cast(kernel, value, source, target):
    """``value`` (of dtype ``source``, in a register) cast to the narrow ``target``, as
    the element its result buffer stores. A float outside ``[min, max + 1)`` of ``target``
    (or NaN) reports ``NARROW_CAST_OUT_OF_RANGE``."""
    builder = kernel.ir_builder
    source, target = np.dtype(source), np.dtype(target)
    narrow = NARROW_MEMORY[target]
    if source == np.bool_:
        return builder.zext(value, narrow)
    if source.kind != "f":
        if source.itemsize * 8 == narrow.width:  # (int8 <-> uint8: the same bits)
            return value
        if source.itemsize * 8 < narrow.width:  # uint8 200 -> int16 200; int8 -1 -> -1
            return (builder.zext if source.kind == "u" else builder.sext)(value, narrow)
        return builder.trunc(value, narrow)  # NumPy keeps the low bits too
    info = np.iinfo(target)
    low = ir.Constant(value.type, float(info.min))
    high = ir.Constant(value.type, float(info.max) + 1.0)
    # ordered compares: NaN is out of range
    in_range = builder.and_(builder.fcmp_ordered(">=", value, low),
                            builder.fcmp_ordered("<", value, high))
    kernel.report_if(builder.not_(in_range), NARROW_CAST_OUT_OF_RANGE)
    # Out of range the stored element is never returned; fptosi to int32 is defined for
    # every in-range value (and poison, not undefined behaviour, elsewhere): select 0.
    safe = builder.select(in_range, value, ir.Constant(value.type, 0.0))
    return builder.trunc(builder.fptosi(safe, I32), narrow)
