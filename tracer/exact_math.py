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
"""

from __future__ import annotations

import numpy as np

_source = [lambda name, dtype: False]  # tracer used alone: our own math everywhere


def set_source(exact):
    """``exact(name, dtype)``: compiled ``np.<name>`` on ``dtype`` is NumPy's bits."""
    _source[0] = exact


def is_exact(name, dtype):
    return bool(_source[0](name, np.dtype(dtype)))
