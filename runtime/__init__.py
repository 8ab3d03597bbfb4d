"""tracejit's public face.

>>> import numpy as np
>>> from tracejit import tensor
>>> x = tensor([1.0, -1.0, 2.0], requires_grad=True)
>>> y = x * 2 if x.sum() > 0 else x - 2
>>> y.backward(np.ones_like(y))
>>> y, x.grad
(tensor([ 2., -2.,  4.], grad_fn=<multiply>), tensor([2., 2., 2.]))
"""

from . import data, nn, optim, testing
from .autograd import enable_grad, is_grad_enabled, no_grad
from .functional import grad, value_and_grad
from .jit import JitFunction, jit
from .tensor import Tensor, TensorError, tensor
from .version import __version__

__all__ = [
    "JitFunction",
    "Tensor",
    "TensorError",
    "__version__",
    "data",
    "enable_grad",
    "grad",
    "is_grad_enabled",
    "jit",
    "nn",
    "no_grad",
    "optim",
    "tensor",
    "testing",
    "value_and_grad",
]
