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


try:  # NumPy 2's np.errstate sets a context variable: a new object whenever modes change
    from numpy._core._multiarray_umath import _extobj_contextvar as _ERROR_STATE
except ImportError:  # (a private name: without it, the modes themselves are compared)
    _ERROR_STATE = None


def error_state():
    """A token for NumPy's floating-point error modes in force now (``np.errstate``'s),
    cheap to compare by identity; ``ErrorModes`` keeps one with the modes it stands for."""
    return _ERROR_STATE.get() if _ERROR_STATE is not None else tuple(np.geterr().items())


class ErrorModes:
    """NumPy's floating-point error modes at a call, and which the function set since.

    Compiled code checks no floating-point flags, so a function raising FloatingPointError
    on its own terms (``with np.errstate(divide="raise"): try: ... except
    FloatingPointError:``) would return what the trace saw where NumPy raises: a trace
    refuses an operation under a ``"raise"``, ``"call"`` or ``"log"`` mode the function set
    (the caller's modes at the call are docs/sharp_bits.md's, not refused; tracejit's own
    ``np.errstate(all="ignore")`` blocks set nothing that counts).

    >>> modes = ErrorModes()
    >>> modes.set_since() is None
    True
    >>> with np.errstate(divide="raise"):
    ...     modes.set_since()
    "np.errstate(divide='raise')"
    >>> with np.errstate(all="ignore"):
    ...     modes.set_since() is None
    True
    """

    def __init__(self):
        self.token, self.modes = error_state(), np.geterr()

    def set_since(self):
        """``np.errstate(...)`` text of the modes compiled code cannot honour that were set
        since the call began, else None."""
        if error_state() is self.token:
            return None
        chosen = {kind: mode for kind, mode in np.geterr().items()
                  if mode in ("raise", "call", "log") and mode != self.modes.get(kind)}
        if not chosen:
            return None
        return "np.errstate(" + ", ".join(f"{kind}={mode!r}" for kind, mode in chosen.items()) + ")"


def _warn_from_user_code(name, error, flag):
    frame, level = sys._getframe(1), 2
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"{error} encountered in {name}", RuntimeWarning, stacklevel=level)
