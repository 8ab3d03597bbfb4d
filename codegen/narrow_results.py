"""Results of narrow integer dtypes: ``np.clip(img * 255, 0, 255).astype(np.uint8)``.

Compiled code computes in bool, int32, int64, float32 and float64 (``dtypes.SUPPORTED``).
A cast to int8, uint8, int16 or uint16 whose value only leaves the function (a result,
nothing in the function reads it) is still compiled: the kernel computes in the wide dtype
and the cast is its last step, storing the narrow element into a result of that dtype.

* From an integer or bool: NumPy's cast keeps the low bits (``np.int64(300)`` -> uint8 44),
  the same as LLVM's ``trunc``: exact for every value.
* From a float: NumPy's cast is C's, defined where the value truncated toward zero fits
  the target; elsewhere (NaN, inf, -1.0 or 256.0 into uint8) the result is the platform's
  (x86: wrapped through int32, or whatever NumPy's SIMD loop does). The kernel converts
  values in ``[min, max + 1)`` of the target exactly and reports
  ``KernelStatus.NARROW_CAST_OUT_OF_RANGE`` for any other: the call then runs eagerly
  (a side exit), so the result is NumPy's own, with its warning.

A narrow value that feeds further computation (``u = x.astype(np.uint8); return u + 1``
wraps at 256) or a view of it (``u.T``) still runs the function eagerly.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> image = trace(lambda x: np.clip(x * 255, 0, 255).astype(np.uint8), np.zeros(3)).graph
>>> len(narrow_results(image))
1
>>> len(narrow_results(trace(lambda x: x.astype(np.uint8) + 1, np.zeros(3)).graph))
0
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tracejit.tracer import ops
from tracejit.tracer.ir import Eqn, Guard, Var

from .dtypes import I32, NARROW_MEMORY

# The dtypes a result may be stored in without compiled code computing in them.
STORE_ONLY = frozenset(map(np.dtype, ("int8", "uint8", "int16", "uint16")))
NARROW_CAST_OUT_OF_RANGE = 4  # a kernel status (codegen/pointwise.KernelStatus)
# Why such a call ran eagerly (``stats()['eager_calls']``)
NARROW_RANGE_REASON = ("a float cast to a narrow integer result was out of its range or NaN "
                       "(NumPy's cast is the platform's there)")


def narrow_results(graph):
    """Names of the casts to a ``STORE_ONLY`` dtype in ``graph`` whose values are results
    that nothing else in the graph reads (see the module docstring)."""
    read = set()
    for item in graph.body:
        atoms = (item.predicate,) if isinstance(item, Guard) else item.inputs
        read.update(atom.name for atom in atoms if isinstance(atom, Var))
    results = {atom.name for atom in graph.outputs if isinstance(atom, Var)}
    return {
        item.out.name for item in graph.body
        if isinstance(item, Eqn) and item.prim is ops.cast_p
        and np.dtype(item.out.aval.dtype) in STORE_ONLY
        and item.out.name in results and item.out.name not in read
    }


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
        if source.itemsize * 8 <= narrow.width:  # (int8 -> uint8 only: the same bits)
            return value if source.itemsize * 8 == narrow.width else builder.sext(value, narrow)
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
