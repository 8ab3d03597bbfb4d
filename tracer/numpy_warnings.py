"""NumPy's floating-point warnings raised while tracing, shown at the user's line.

Tracing computes every operation with NumPy inside tracejit's frames, so the warning a
traced call gives (``divide by zero encountered in log``) would name tracejit's source,
where the eager run names the user's line. Each primitive's computation runs with
NumPy's ``"warn"`` error modes turned to ``"call"``, and the callback warns NumPy's
message from the innermost frame of user code. Modes the user chose
(``np.errstate(divide="raise")``, ``"ignore"``, a callback of their own) are kept. (Compiled
calls, like JAX's and Numba's, do not check floating-point flags: no warning at all.)

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     _ = computed("log", np.log, np.zeros(1))
>>> str(caught[0].message), caught[0].filename.endswith("numpy_warnings.py")
('divide by zero encountered in log', False)
"""

from __future__ import annotations

import sys
import warnings
from functools import partial

import numpy as np

from .errors import as_numpy_would
from .locations import is_internal

# NumPy names the ufunc (or "reduce", "cast") in its message; the primitives named
# otherwise than their ufunc
_NUMPY_NAMES = {"neg": "negative", "sum": "reduce", "prod": "reduce", "max": "reduce",
                "min": "reduce", "cast": "cast"}


def computed(name, impl, *args, **params):
    """``impl(*args, **params)``, a primitive's NumPy computation, with NumPy's warnings
    (``"warn"`` modes as they stand now) raised from the user's line and naming ``name``."""
    modes = np.geterr()
    try:
        if "warn" not in modes.values() or "call" in modes.values() or (
                "log" in modes.values()):
            return impl(*args, **params)  # ("call" and "log" use the user's errcall object)
        with np.errstate(call=partial(_warn_from_user_code, _NUMPY_NAMES.get(name, name)),
                         **{kind: "call" for kind, mode in modes.items() if mode == "warn"}):
            return impl(*args, **params)
    except (Warning, FloatingPointError) as error:  # warnings as errors, errstate "raise":
        as_numpy_would(error)  # the user's, raised eagerly too; later calls compile
        raise


def _warn_from_user_code(name, error, flag):
    frame, level = sys._getframe(1), 2
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"{error} encountered in {name}", RuntimeWarning, stacklevel=level)
