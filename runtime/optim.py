"""Optimizers over lists of leaf Tensors, with PyTorch's update rules.

>>> from tracejit import tensor
>>> w = tensor([1.0], requires_grad=True)
>>> opt = SGD([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step(); w
tensor([0.8], requires_grad=True)
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer.primitives import current_context
from tracejit.tracer.traced_array import trace_error


class Optimizer:
    def __init__(self, params, lr):
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        for param in self.params:
            if not getattr(param, "requires_grad", False) or not param.is_leaf:
                raise ValueError("optimizers update leaf Tensors created with requires_grad=True")
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        self.lr = lr

    def zero_grad(self, set_to_none=True):
        _refuse_inside_a_trace("zero_grad")
        for param in self.params:
            if set_to_none or param.grad is None:
                param.grad = None
            else:
                param.grad.data[...] = 0

    def step(self):
        _refuse_inside_a_trace("step")
        for index, param in enumerate(self.params):
            if param.grad is not None:
                self._update(index, param, param.grad.data)
                param._version += 1

    def _update(self, index, param, grad):
        raise NotImplementedError


def _refuse_inside_a_trace(method):
    """An optimizer's ``step()`` or ``zero_grad()`` in a function being traced: this is
    tracejit's own code, which the front end does not rewrite, so it would update the
    real parameters, ``.grad`` and state once, during the trace, and the compiled program
    would hold none of it (every later call skipped the step). The call runs eagerly."""
    if current_context() is not None:
        raise trace_error(f"optimizer.{method}() inside a jit function is not supported (the "
                          "compiled calls would skip its updates); the call runs eagerly. "
                          "Jit the forward and loss, and step outside")


class SGD(Optimizer):
    """``p -= lr * v`` with ``v = momentum * v + g + weight_decay * p`` (PyTorch's SGD)."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(params, lr)
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.velocity = [None] * len(self.params)

    def _update(self, index, param, grad):
        if self.weight_decay:
            grad = grad + self.weight_decay * param.data
        if self.momentum:
            velocity = self.velocity[index]
            if velocity is None:
                velocity = self.velocity[index] = np.array(grad, copy=True)
            else:
                velocity *= self.momentum
                velocity += grad
            grad = grad + self.momentum * velocity if self.nesterov else velocity
        param.data -= self.lr * grad


class Adam(Optimizer):
    """Adam with bias correction (PyTorch's defaults; L2 ``weight_decay`` as in Adam)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr)
        self.beta1, self.beta2 = betas
        self.eps, self.weight_decay = eps, weight_decay
        self.first = [np.zeros_like(p.data) for p in self.params]
        self.second = [np.zeros_like(p.data) for p in self.params]
        self.steps = [0] * len(self.params)

    def _update(self, index, param, grad):
        if self.weight_decay:
            grad = grad + self.weight_decay * param.data
        self.steps[index] += 1
        step = self.steps[index]
        first, second = self.first[index], self.second[index]
        first *= self.beta1
        first += (1 - self.beta1) * grad
        second *= self.beta2
        second += (1 - self.beta2) * grad * grad
        corrected_first = first / (1 - self.beta1**step)
        corrected_second = second / (1 - self.beta2**step)
        param.data -= self.lr * corrected_first / (np.sqrt(corrected_second) + self.eps)
