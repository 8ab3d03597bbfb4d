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

from tracejit.tracer.errors import UnsupportedError
from tracejit.tracer.numpy_api import arange
from tracejit.tracer.ops import erf_p, sliding_window, stop_gradient_p
from tracejit.tracer.ops.conv import conv2d as conv2d_primitive

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT_HALF = math.sqrt(0.5)


def relu(x):
    # NOTE: where(x <= 0, 0, x), not maximum(x, 0): the gradient at exactly 0 is 0 (as
    # PyTorch's), where maximum would split it; NaN still propagates.
    return np.where(x <= 0, 0, x)


def erf(x):
    """The error function (the primitive ``tracejit.tracer.ops.erf_p``): float32 stays float32, bool
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
    if (labels.dtype.kind == "u" or labels.dtype.itemsize < 4) and hasattr(labels, "astype"):
        # uint8 labels (MNIST's files): compared as int64, the indices NumPy takes; compiled
        # code computes in no unsigned or narrower integer (it ran eagerly, 'not compiled')
        labels = labels.astype(np.int64)
    classes = logits.shape[-1]
    if np.any((labels < 0) | (labels >= classes)):
        raise IndexError(f"cross_entropy: labels must lie in [0, {classes}); got labels from "
                         f"{np.min(labels)} to {np.max(labels)}")
    log_probs = log_softmax(logits, axis=-1)
    # A one-hot select rather than take_along_axis: compiled, it fuses into log_softmax's
    # row kernel, and its gradient is a select instead of a scatter.
    chosen = np.expand_dims(labels, -1) == np.arange(classes, like=logits)
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


# Under jit the front end rewrites dropout as it does the user's code: its
# ``generator.random`` is then a recorded draw that compiled calls replay from the same
# generator, so compiled and eager masks agree draw for draw.
dropout.__tracejit_rewritten__ = True


# --- convolution and pooling (NCHW activations, OIHW weights: PyTorch's layouts) --------
# Convolutions bind the conv2d primitive (tracejit.tracer.ops.conv; compiled by
# tracejit.codegen.conv). Pooling is a composition: zero padding (``np.pad``), strided
# windows as a view (``tracejit.tracer.ops.sliding_window``, read as index arithmetic by
# compiled code) and a reduction over the window axes. So the same code runs on ndarrays,
# on Tensors and under ``jit`` with H and W symbolic per bucket.
def _pair(value, name):
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return pair


def _windows(x, kernel, stride, dilation):
    """``x`` (..., H, W) as windows (..., OH, OW, KH, KW): output position ``(i, j)`` sees
    ``x[..., i * sh + di * dh, j * sw + dj * dw]``."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    rank = np.ndim(x)
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    windows = sliding_window(x, (rank - 2, rank - 1), span, (sh, sw))
    if dh != 1 or dw != 1:  # dilation: every d-th element of the spanning window
        windows = windows[..., ::dh, ::dw]
    return windows


def _conv_padding(padding, kernel, dilation, stride):
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding == "same":
        if stride != (1, 1):
            raise ValueError("padding='same' is not supported for strided convolutions")
        # PyTorch's split: the extra element (an even span) goes after.
        totals = [(k - 1) * d for k, d in zip(kernel, dilation)]
        return tuple((total // 2, total - total // 2) for total in totals)
    return tuple((p, p) for p in _pair(padding, "padding"))


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation as ``torch.nn.functional.conv2d``: ``x`` (N, C, H, W),
    ``weight`` (F, C // groups, KH, KW), ``bias`` (F,); ``padding`` an int, a pair,
    ``"valid"`` or ``"same"``. One primitive (``tracejit.tracer.ops.conv2d_p``): compiled,
    a direct convolution kernel with the bias and any pointwise consumer (an activation)
    fused as its epilogue; its gradients are convolutions too.

    >>> x = np.arange(16.0).reshape(1, 1, 4, 4)
    >>> conv2d(x, np.ones((1, 1, 2, 2)), stride=2)[0, 0].tolist()
    [[10.0, 18.0], [42.0, 50.0]]
    """
    if np.ndim(x) != 4 or np.ndim(weight) != 4:
        raise ValueError(f"conv2d expects x (N, C, H, W) and weight (F, C/groups, KH, KW), "
                         f"got shapes {np.shape(x)} and {np.shape(weight)}")
    channels = x.shape[1]
    filters, group_channels = weight.shape[0], weight.shape[1]
    # Kernel sizes specialize (a model has a few): the weight gradient's shape is static.
    kernel = (int(weight.shape[2]), int(weight.shape[3]))
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    if channels != group_channels * groups or filters % groups:
        raise ValueError(f"conv2d: {channels} input channels and weight {np.shape(weight)} "
                         f"do not match groups={groups}")
    padding = _conv_padding(padding, kernel, dilation, stride)
    out = conv2d_primitive(x, weight, stride, padding, dilation, groups, kernel)
    if bias is not None:  # compiled: part of the convolution kernel's epilogue
        out = out + np.reshape(bias, (-1, 1, 1))
    return out


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation as ``torch.nn.functional.conv1d``: ``x`` (N, C, L), ``weight``
    (F, C // groups, K); ``conv2d`` over a height of one.

    >>> conv1d(np.arange(5.0).reshape(1, 1, 5), np.ones((1, 1, 2)))[0, 0].tolist()
    [1.0, 3.0, 5.0, 7.0]
    """
    if np.ndim(x) != 3 or np.ndim(weight) != 3:
        raise ValueError(f"conv1d expects x (N, C, L) and weight (F, C/groups, K), got "
                         f"shapes {np.shape(x)} and {np.shape(weight)}")
    if isinstance(padding, str):
        padding2d = padding
    else:
        padding2d = (0, padding[0] if isinstance(padding, (tuple, list)) else padding)
    first = lambda value: value[0] if isinstance(value, (tuple, list)) else value  # noqa: E731
    out = conv2d(np.expand_dims(x, 2), np.expand_dims(weight, 2), bias,
                 stride=(1, first(stride)), padding=padding2d,
                 dilation=(1, first(dilation)), groups=groups)
    return np.squeeze(out, axis=2)


def _pool_arguments(kernel_size, stride, padding, dilation, ceil_mode, name):
    if ceil_mode:
        raise UnsupportedError(f"{name}(ceil_mode=True) is not supported; pad explicitly")
    kernel = _pair(kernel_size, "kernel_size")
    stride = kernel if stride is None or stride == () else _pair(stride, "stride")
    padding = _pair(padding, "padding")
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, "
                         f"got padding={padding} and kernel_size={kernel}")
    return kernel, stride, padding, _pair(dilation, "dilation")


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max pooling over (..., H, W) as ``torch.nn.functional.max_pool2d`` (the padding is
    -inf; ``stride`` defaults to the kernel size). Tied maxima share the gradient equally
    (PyTorch gives it all to one of them).

    >>> max_pool2d(np.arange(16.0).reshape(1, 1, 4, 4), 2)[0, 0].tolist()
    [[5.0, 7.0], [13.0, 15.0]]
    """
    kernel, stride, (ph, pw), dilation = _pool_arguments(kernel_size, stride, padding,
                                                         dilation, ceil_mode, "max_pool2d")
    if ph or pw:
        widths = ((0, 0),) * (np.ndim(x) - 2) + ((ph, ph), (pw, pw))
        inside = np.pad(np.ones_like(x, dtype=bool), widths)
        x = np.where(inside, np.pad(x, widths), -np.inf)
    return np.max(_windows(x, kernel, stride, dilation), axis=(-2, -1))


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """Average pooling over (..., H, W) as ``torch.nn.functional.avg_pool2d``.

    >>> avg_pool2d(np.arange(16.0).reshape(1, 1, 4, 4), 2)[0, 0].tolist()
    [[2.5, 4.5], [10.5, 12.5]]
    """
    kernel, stride, (ph, pw), _ = _pool_arguments(kernel_size, stride, padding, 1,
                                                  ceil_mode, "avg_pool2d")
    widths = ((0, 0),) * (np.ndim(x) - 2) + ((ph, ph), (pw, pw))
    padded = np.pad(x, widths) if ph or pw else x
    total = np.sum(_windows(padded, kernel, stride, (1, 1)), axis=(-2, -1))
    if divisor_override is not None:
        return total / divisor_override
    if count_include_pad or not (ph or pw):
        return total / (kernel[0] * kernel[1])
    counted = np.pad(np.ones_like(x), widths)
    return total / np.sum(_windows(counted, kernel, stride, (1, 1)), axis=(-2, -1))


def _averaging_matrix(size, out_size, like):
    """(out_size, size): row i averages ``[floor(i * size / out), ceil((i + 1) * size / out))``,
    PyTorch's adaptive pooling regions; ``size`` may be symbolic."""
    rows = np.expand_dims(arange(out_size, like=like), 1)
    start = (rows * size) // out_size
    end = ((rows + 1) * size + out_size - 1) // out_size
    cols = np.expand_dims(arange(size, like=like), 0)
    inside = (cols >= start) & (cols < end)
    return np.where(inside, 1.0 / (end - start), 0.0).astype(like.dtype)


def adaptive_avg_pool2d(x, output_size):
    """Average pooling to a fixed (OH, OW) from any (H, W), as
    ``torch.nn.functional.adaptive_avg_pool2d``: a conv stack ending in it and a linear
    layer accepts every image size (H and W stay symbolic under ``jit``). ``None`` in
    ``output_size`` keeps that dim.

    >>> adaptive_avg_pool2d(np.arange(12.0).reshape(1, 1, 3, 4), (1, 2))[0, 0].tolist()
    [[4.5, 6.5]]
    """
    out_h, out_w = _pair(output_size, "output_size")
    height, width = x.shape[-2], x.shape[-1]
    out_h = height if out_h is None else out_h
    out_w = width if out_w is None else out_w
    if isinstance(out_h, int) and isinstance(out_w, int) and out_h == out_w == 1:
        return np.mean(x, axis=(-2, -1), keepdims=True)
    # Separable: rows averaged by one matrix, columns by another (two matmuls).
    rows = _averaging_matrix(height, out_h, x)
    cols = _averaging_matrix(width, out_w, x)
    return rows @ x @ np.transpose(cols)


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
               training=False, momentum=0.1, eps=1e-5):
    """Batch normalization over every axis but 1 (channels), as
    ``torch.nn.functional.batch_norm``, without mutation: in training mode it returns
    ``(out, new_running_mean, new_running_var)`` (the running variance updated with the
    unbiased batch variance; ``None`` where no running statistics were given); in eval
    mode it normalizes with the running statistics and returns ``out``.

    >>> x = np.array([[1.0, 2.0], [3.0, 6.0]])
    >>> out, mean, var = batch_norm(x, np.zeros(2), np.ones(2), training=True)
    >>> out.round(3).tolist(), mean.round(3).tolist(), var.round(3).tolist()
    ([[-1.0, -1.0], [1.0, 1.0]], [0.2, 0.4], [1.1, 1.7])
    """
    axes = (0,) + tuple(range(2, np.ndim(x)))
    shape = (1, x.shape[1]) + (1,) * (np.ndim(x) - 2)
    if training:
        mean = np.mean(x, axis=axes, keepdims=True)
        centered = x - mean
        variance = np.mean(centered * centered, axis=axes, keepdims=True)
        out = centered / np.sqrt(variance + eps)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm in eval mode needs running_mean and running_var")
        out = (x - np.reshape(running_mean, shape)) / np.sqrt(np.reshape(running_var, shape)
                                                              + eps)
    if weight is not None:
        out = out * np.reshape(weight, shape)
    if bias is not None:
        out = out + np.reshape(bias, shape)
    if not training:
        return out
    if running_mean is None or running_var is None:
        return out, None, None
    count = 1
    for axis in axes:
        count = count * x.shape[axis]
    # Running statistics are state, not part of the differentiated computation.
    batch_mean = stop_gradient_p(np.reshape(mean, (x.shape[1],)))
    unbiased = stop_gradient_p(np.reshape(variance, (x.shape[1],))) * (count / (count - 1))
    new_mean = (1 - momentum) * running_mean + momentum * batch_mean
    new_var = (1 - momentum) * running_var + momentum * unbiased
    return out, new_mean, new_var


def embedding(indices, weight, padding_idx=None):
    """Rows of ``weight`` (num_embeddings, dim) at integer ``indices`` (any shape), as
    ``torch.nn.functional.embedding``; the ``padding_idx`` row gets no gradient.

    >>> embedding(np.array([[2, 0]]), np.arange(6.0).reshape(3, 2)).tolist()
    [[[4.0, 5.0], [0.0, 1.0]]]
    """
    rows = np.take(weight, indices, axis=0)
    if padding_idx is None:
        return rows
    if padding_idx < 0:
        padding_idx += weight.shape[0]
    padded = np.expand_dims(indices == padding_idx, -1)
    return np.where(padded, stop_gradient_p(rows), rows)


def pad(x, pad, mode="constant", value=0.0):  # noqa: A002 - PyTorch's names
    """``torch.nn.functional.pad``: ``pad`` holds (before, after) pairs from the last axis
    backwards; ``mode`` is ``"constant"`` (with ``value``), ``"replicate"`` or
    ``"reflect"``; negative widths crop.

    >>> pad(np.array([[1.0, 2.0]]), (1, 2), value=9.0).tolist()
    [[9.0, 1.0, 2.0, 9.0, 9.0]]
    >>> pad(np.array([[1.0, 2.0, 3.0]]), (2, 1), mode="reflect").tolist()
    [[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]]
    """
    if len(pad) % 2 or len(pad) // 2 > np.ndim(x):
        raise ValueError(f"pad: {len(pad)} widths for an array of {np.ndim(x)} dimensions")
    for position in range(len(pad) // 2):
        axis = np.ndim(x) - 1 - position
        before, after = pad[2 * position], pad[2 * position + 1]
        x = _pad_axis(x, axis, before, after, mode, value)
    return x


def _pad_axis(x, axis, before, after, mode, value):
    if before < 0 or after < 0:  # cropping
        kept = slice(max(-before, 0), x.shape[axis] - max(-after, 0))
        x = x[(slice(None),) * axis + (kept,)]
        before, after = max(before, 0), max(after, 0)
    length = x.shape[axis]
    if not before and not after:
        return x
    if mode == "constant":
        widths = [(0, 0)] * np.ndim(x)
        widths[axis] = (before, after)
        padded = np.pad(x, widths)
        if value == 0:
            return padded
        inside = np.pad(np.ones_like(x, dtype=bool), widths)
        return np.where(inside, padded, np.asarray(value, dtype=x.dtype))
    # Index arithmetic over iota (tracejit.tracer.numpy_api.arange): the length stays symbolic.
    positions = arange(length + before + after, like=x) - before
    if mode == "replicate":
        index = np.clip(positions, 0, length - 1)
    elif mode == "reflect":
        if before >= length or after >= length:
            raise ValueError(f"pad: reflect padding of {max(before, after)} needs a dim "
                             f"longer than that, got {length}")
        period = 2 * (length - 1)
        folded = np.abs(positions) % period
        index = np.where(folded >= length, period - folded, folded)
    else:
        raise ValueError(f"pad: mode must be 'constant', 'replicate' or 'reflect', not "
                         f"{mode!r}")
    return np.take(x, index, axis=axis)
