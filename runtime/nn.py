"""Functional layers written with the NumPy API, so each works unchanged on ndarrays
(plain NumPy), on Tensors (eager autograd) and under the tracer (compiled and fused).

Conventions: the last axis is the feature axis; ``linear`` takes ``weight`` of shape
``(in_features, out_features)`` (``x @ weight + bias``); losses reduce with ``"mean"``
by default.

>>> x = np.array([[1.0, 2.0, 3.0]])
>>> softmax(x).round(3).tolist()
[[0.09, 0.245, 0.665]]
"""

from __future__ import annotations

import math

import numpy as np

from tracer.ops import erf_p, stop_gradient_p

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT_HALF = math.sqrt(0.5)


def relu(x):
    # NOTE: where(x <= 0, 0, x), not maximum(x, 0): the gradient at exactly 0 is 0 (as
    # PyTorch's), where maximum would split it; NaN still propagates.
    return np.where(x <= 0, 0, x)


def erf(x):
    """The error function (the primitive ``tracer.ops.erf_p``): float32 stays float32, bool
    and integers become float64. Under ``jit``, ``scipy.special.erf`` maps to the same
    primitive when SciPy is imported.

    >>> erf(np.array([0.0, 0.5, np.inf])).round(6).tolist()
    [0.0, 0.5205, 1.0]
    """
    return erf_p(x)


def gelu(x, approximate="tanh"):
    """GELU. ``approximate="tanh"`` (the default here): PyTorch's tanh approximation;
    ``"none"``: the exact 0.5 x (1 + erf(x / sqrt(2))), PyTorch's default.

    >>> x = np.array([-1.0, 0.5])
    >>> gelu(x).round(4).tolist(), gelu(x, approximate="none").round(4).tolist()
    ([-0.1588, 0.3457], [-0.1587, 0.3457])
    """
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    if approximate == "none":
        return 0.5 * x * (1.0 + erf_p(x * _SQRT_HALF))
    raise ValueError(f"gelu: approximate must be 'tanh' or 'none', not {approximate!r}")


def sigmoid(x):
    # tanh form: one transcendental and no overflow for large |x|.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _peak(x, axis):
    """The max along ``axis`` that softmax-like functions subtract for stability. Shifting
    every element alike changes nothing, so no gradient flows through it (as in JAX):
    the backward pass skips the max's own gradient (ties, counts) entirely."""
    return stop_gradient_p(np.max(x, axis=axis, keepdims=True))


def softmax(x, axis=-1):
    shifted = np.exp(x - _peak(x, axis))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    shifted = x - _peak(x, axis)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def logsumexp(x, axis=-1, keepdims=False):
    peak = _peak(x, axis)
    # An all -inf row has peak -inf; shifting by 0 there gives -inf instead of NaN.
    peak = np.where(np.isfinite(peak), peak, 0)
    total = np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True)) + peak
    return total if keepdims else np.squeeze(total, axis=axis)


def layer_norm(x, weight=None, bias=None, eps=1e-5, axis=-1):
    mean = np.mean(x, axis=axis, keepdims=True)
    centered = x - mean
    variance = np.mean(centered * centered, axis=axis, keepdims=True)
    normalized = centered / np.sqrt(variance + eps)
    if weight is not None:
        normalized = normalized * weight
    if bias is not None:
        normalized = normalized + bias
    return normalized


def linear(x, weight, bias=None):
    out = x @ weight
    return out if bias is None else out + bias


def _reduce(loss, reduction):
    if reduction == "mean":
        return np.mean(loss)
    if reduction == "sum":
        return np.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")


def cross_entropy(logits, labels, reduction="mean"):
    """Softmax cross-entropy of ``logits`` (..., classes) against integer ``labels`` (...)
    in ``[0, classes)``; other labels raise IndexError, as in PyTorch."""
    labels = np.asarray(labels) if isinstance(labels, (list, tuple)) else labels
    if np.dtype(labels.dtype).kind not in "iu":
        raise TypeError(
            f"cross_entropy: labels must be integer class indices, not {labels.dtype}"
        )
    classes = logits.shape[-1]
    if np.any((labels < 0) | (labels >= classes)):
        raise IndexError(f"cross_entropy: labels must lie in [0, {classes}); got labels from "
                         f"{np.min(labels)} to {np.max(labels)}")
    log_probs = log_softmax(logits, axis=-1)
    # A one-hot select rather than take_along_axis: compiled, it fuses into log_softmax's
    # row kernel, and its gradient is a select instead of a scatter.
    chosen = np.expand_dims(labels, -1) == np.arange(classes)
    return _reduce(-np.sum(np.where(chosen, log_probs, 0), axis=-1), reduction)


def mse_loss(prediction, target, reduction="mean"):
    difference = prediction - target
    return _reduce(difference * difference, reduction)


def dropout(x, p, generator, training=True):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    ``generator`` is an explicit ``np.random.Generator``: the randomness is the caller's.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return x
    keep = generator.random(np.shape(x)) >= p
    return x * keep * (1.0 / (1.0 - p))
