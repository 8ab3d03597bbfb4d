"""``np.linspace`` with dims for bounds or count, listed in ``FUNCTIONS``.

A bilinear resize samples its source rows at ``np.linspace(0, H - 1, out_h)``, a time grid
is ``np.linspace(0, 1, T)``: with the sizes dynamic these are dims, which NumPy's own
linspace would take as the first call's numbers (the call ran eagerly from the second size
on). Computed here as NumPy computes it (``numpy/_core/function_base.py``): ``step = (stop
- start) / div``, ``arange(num) * step + start`` in float64, the last sample set to
``stop``; each an IEEE operation on exact operands, so the samples are NumPy's to the bit
and a ``floor`` of them is decided. Bounds that are arrays, a float bound beside a dim, and
a dtype other than float64 keep NumPy's own linspace (eager, naming the call).

>>> import numpy as np, tracejit as tj
>>> grid = tj.jit(lambda x: np.linspace(0, x.shape[0] - 1, 2 * x.shape[0]), cache="memory",
...               dynamic=True)
>>> all(bool((grid(np.ones(n)) == np.linspace(0, n - 1, 2 * n)).all()) for n in (3, 5, 1))
True
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .dims import SymInt
from .errors import UnsupportedError, as_numpy_would
from .primitives import is_traced


def _plain(bound):
    return isinstance(bound, (int, float, np.integer, np.floating)) and not isinstance(
        bound, (bool, np.bool_))


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    if is_traced(num):  # a run-time int argument decides the length: its value, guarded
        num = operator.index(num)
    if not all(isinstance(bound, SymInt) or _plain(bound) for bound in (start, stop)):
        raise UnsupportedError("np.linspace of array bounds")
    dims = [isinstance(bound, SymInt) for bound in (start, stop)]
    if any(dims) and not all(isinstance(bound, SymInt) or isinstance(bound, (int, np.integer))
                             for bound in (start, stop)):
        raise UnsupportedError("np.linspace of a float bound beside a dynamic dim")
    if any(dims) and any(type(bound) is not SymInt and abs(bound) >= 2**53
                         for bound in (start, stop)):
        raise UnsupportedError("np.linspace of a dynamic dim beside an int bound past 2**53")
    if not isinstance(num, SymInt):
        num = operator.index(num)
        if num < 0:
            raise as_numpy_would(ValueError(f"Number of samples, {num}, must be non-negative."))
    concrete = [bound.value if isinstance(bound, SymInt) else bound for bound in (start, stop)]
    result = np.linspace(*concrete, 2).dtype  # NumPy's dtype for these bounds
    if result != np.float64 or (dtype is not None and np.dtype(dtype) != np.float64) or (
            axis != 0 or device not in (None, "cpu")):
        raise UnsupportedError("np.linspace other than float64 samples of scalar bounds")
    div = num - 1 if endpoint else num
    like = next((value for value in (num, start, stop) if isinstance(value, SymInt)), None)
    samples = ops.bind(ops.cast_p, ops.iota(num, np.int64, like=like), dtype=result)
    # NumPy subtracts in float64 (np.subtract(stop, start, dtype=float)): each bound is
    # rounded first, which an exact int subtraction past 2**53 is not
    delta = (float(stop) - float(start) if not any(dims)
             else stop - start)
    if div > 0:
        step = delta / div
        if retstep:  # NumPy's step is an np.float64, the trace's a weak (Python) float
            step = (ops.bind(ops.cast_p, step, dtype=result)[()] if is_traced(step)
                    else np.float64(step))
        # NumPy divides by div and multiplies by delta when the step is 0; both give 0
        samples = samples * step
    else:
        step = float("nan")
        samples = samples * delta
    samples = samples + start
    if endpoint and num > 1:
        samples[-1] = stop
    return (samples, step) if retstep else samples


FUNCTIONS = {np.linspace: linspace}

__all__ = ["FUNCTIONS", "linspace"]
