"""Arrays of narrow integer dtypes as arguments: uint8 images, int16 audio, uint16 ids.

Compiled code computes in bool, int32, int64, float32 and float64 (``dtypes.SUPPORTED``).
An argument of another integer dtype is still read by compiled code when every
use of it converts each element first, as NumPy does:

* ``img.astype(np.float32)``;
* ``img / 255.0``: NumPy's loop for uint8 / float is float64, so each byte is converted
  and then divided (``pointwise.loop_dtypes`` says which loop NumPy runs);
* a view of it (``img.reshape(n, -1)``, ``img.transpose(0, 3, 1, 2)``, ``img[:, ::2]``)
  that such a use reads: views are index maps, never stored;
* ``np.where(mask, img, 0)``, ``img[mask] = 0``: moves of its elements, no arithmetic
  (``narrow_results.is_stored_narrow``), whose own uses are checked the same way.

What computes in the narrow dtype itself (``img + 1`` wraps at 256, ``img > 127`` compares
unsigned bytes, ``img.sum()`` accumulates in uint64, a matmul, a loop) is refused with the
reason, and the function runs eagerly.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> check_narrow_uses(trace(lambda img: img.reshape(2, -1) / 255.0,
...                         np.zeros((2, 3, 3), np.uint8)).graph)
>>> check_narrow_uses(trace(lambda img: img + 1, np.zeros(3, np.uint8)).graph)
Traceback (most recent call last):
...
tracejit.tracer.errors.UnsupportedError: <doctest ...>:1: compiled code computes in bool, \
int32, int64, float32 and float64; add of a uint8 array computes in uint8 (convert it first: \
x.astype(np.int32))
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer import ops
from tracejit.tracer.errors import UnsupportedError
from tracejit.tracer.ir import Eqn, Literal, Var
from tracejit.tracer.locations import line_prefix

from .dtypes import NARROW_MEMORY as NARROW
from .dtypes import SUPPORTED
from .narrow_results import is_stored_narrow
from .pointwise import loop_dtypes
from .view_lowering import NUMPY_VIEWS


def is_narrow_view(eqn):
    """A view of a narrow value: an index map the kernels reading it apply, never stored."""
    return eqn.prim in NUMPY_VIEWS and eqn.out.aval.dtype in NARROW


def check_narrow_uses(graph):
    """Raise ``UnsupportedError`` unless every use of a narrow-dtype value converts it
    (see the module docstring); views of narrow inputs are checked through their uses."""
    for item in graph.body:
        if not isinstance(item, Eqn):
            continue
        # a NumPy scalar too (bools < np.uint8(200) compare in uint8, a literal of it)
        narrow = [atom for atom in item.inputs
                  if isinstance(atom, (Var, Literal)) and atom.aval.dtype in NARROW]
        computes_in = _computes_in(item, narrow[0].aval.dtype) if narrow else None
        if computes_in is not None:
            raise UnsupportedError(
                f"{line_prefix(graph.locations.get(item.out.name))}"
                "compiled code computes in bool, int32, int64, float32 and float64; "
                f"{item.prim.name} of a {narrow[0].aval.dtype} array computes in "
                f"{computes_in} (convert it first: x.astype(np.int32))")


def _computes_in(eqn, dtype):
    """The dtype ``eqn`` computes its narrow operand (of ``dtype``) in, or None where it
    converts it first: a cast, a view (its own uses are checked where they read it), or a
    pointwise primitive whose NumPy loop is in a compiled dtype."""
    if eqn.prim is ops.cast_p or eqn.prim in NUMPY_VIEWS or is_stored_narrow(eqn):
        return None
    if getattr(eqn.prim, "kind", None) != "pointwise":
        return np.dtype(dtype)
    operand_dtypes, _ = loop_dtypes(eqn.prim, [atom.aval for atom in eqn.inputs])
    return next((np.dtype(d) for d in operand_dtypes if np.dtype(d) not in SUPPORTED), None)
