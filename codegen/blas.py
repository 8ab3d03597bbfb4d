"""BLAS for matmul: the OpenBLAS that NumPy already ships, called from native code.

Compiled kernels import ``tj_sgemm`` / ``tj_dgemm`` (CBLAS ``gemm`` with 64-bit integers)
by symbol, so object code stays relocatable and the disk cache can keep it; the addresses
come from NumPy's bundled ``libscipy_openblas64_``. Where it cannot be found, matmul
kernels fall back to tracejit's own loops (the cache key records which was used).

>>> bool(available()) in (True, False)
True
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache

import numpy as np

ROW_MAJOR, NO_TRANSPOSE, TRANSPOSE = 101, 111, 112


@lru_cache(maxsize=None)
def _library():
    folder = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "libscipy_openblas64_*"))):
        try:
            library = ctypes.CDLL(path)
            return library, library.scipy_cblas_sgemm64_, library.scipy_cblas_dgemm64_
        except (OSError, AttributeError):
            continue
    return None


def available():
    """The BLAS in use (a name for cache keys), or None (logged once: matmul then runs on
    tracejit's own loops)."""
    found = _library()
    if found is None:
        _say_missing()
    return "numpy-openblas64" if found is not None else None


@lru_cache(maxsize=None)
def _say_missing():
    import logging

    logging.getLogger("tracejit.kernels").warning(
        "NumPy's bundled OpenBLAS (numpy.libs/libscipy_openblas64_*) was not found: "
        "matmul runs on tracejit's own loops (correct, slower); `tracejit env` shows it")


def symbols():
    """``{name: address}`` of the gemm functions compiled code imports."""
    found = _library()
    if found is None:
        return {}
    _, sgemm, dgemm = found
    return {"tj_sgemm": ctypes.cast(sgemm, ctypes.c_void_p).value,
            "tj_dgemm": ctypes.cast(dgemm, ctypes.c_void_p).value}
