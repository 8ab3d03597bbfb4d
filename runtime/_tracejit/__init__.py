"""tracejit: a tracing JIT compiler for NumPy-style Python model functions.

>>> import numpy as np
>>> import tracejit as tj
>>> @tj.jit
... def step(x):
...     return x * 2 if x.sum() > 0 else x - 2
>>> step(np.array([1.0, -1.0, 2.0]))
array([ 2., -2.,  4.])

The public names are those of ``tracejit.runtime``; ``tracejit.tracer`` (tracing into IR,
guards, autodiff) and ``tracejit.codegen`` (LLVM kernels) are the layers under it. This
file lives in runtime/_tracejit/ (pyproject.toml maps it as the package ``tracejit``).
"""

import sys as _sys

from tracejit import runtime as _runtime
from tracejit.runtime import *  # noqa: F403 - the public face is runtime's public names
from tracejit.runtime import data, nn, optim, testing

# `import tracejit.nn` and `from tracejit.data import BucketBatcher` find the modules that
# tracejit.nn and tracejit.data name (as `os.path` is registered for `import os.path`).
for _module in (data, nn, optim, testing):
    _sys.modules[f"tracejit.{_module.__name__.rsplit('.', 1)[1]}"] = _module
del _module

__all__ = list(_runtime.__all__)
