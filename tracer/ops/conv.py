"""Convolution primitives (NCHW activations, OIHW weights: PyTorch's layouts).

``conv2d(x, w)`` is the cross-correlation ``torch.nn.functional.conv2d`` computes, with
per-side padding (negative padding crops), strides, dilation and groups.
``conv2d_weight_grad(x, g)`` is the correlation of an input with an output gradient: the
weight gradient of ``conv2d``, a primitive of its own because its shape (a small output
summed over every batch entry and output position) needs a different kernel.

The VJPs are convolutions, so compiled backward passes run the same fast kernels:

* input gradient: the transposed convolution, i.e. ``conv2d`` of the output gradient
  (spread at the stride with ``pad``'s interior padding) with the weights flipped and
  their in/out channels swapped per group;
* weight gradient: ``conv2d_weight_grad(x, g)``; its own VJPs are again ``conv2d`` and a
  transposed convolution (both arguments enter bilinearly).

Composites (``tracejit.nn.conv2d``, ``conv1d``) bind these; codegen lowers them with
``tracejit.codegen.conv``.

>>> x = np.arange(16.0).reshape(1, 1, 4, 4)
>>> conv2d(x, np.ones((1, 1, 2, 2)), strides=(2, 2))[0, 0].tolist()
[[10.0, 18.0], [42.0, 50.0]]
>>> g = np.ones((1, 1, 2, 2))
>>> conv2d_weight_grad(x, g, kernel=(2, 2), strides=(2, 2))[0, 0].tolist()
[[20.0, 24.0], [36.0, 40.0]]
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..abstract import AbstractArray
from ..primitives import Primitive, bind
from ..shapes import ShapeError
from .creation import full
from .pointwise import cast_p
from .structural import (
    concatenate,
    dtype_of,
    flip,
    pad,
    reshape,
    shape_of,
    slice_axes,
    transpose,
)

NO_PADDING = ((0, 0), (0, 0))


def output_size(size, kernel, stride, padding, dilation):
    """Output positions along one spatial axis (``size`` may be symbolic)."""
    low, high = padding
    return (size + low + high - dilation * (kernel - 1) - 1) // stride + 1


# --- NumPy reference -----------------------------------------------------------------
def _padded(x, padding):
    """``x`` (N, C, H, W) zero-padded per side; negative padding crops."""
    (top, bottom), (left, right) = padding
    x = np.pad(x, ((0, 0), (0, 0), (max(top, 0), max(bottom, 0)),
                   (max(left, 0), max(right, 0))))
    height, width = x.shape[2:]
    return x[:, :, max(-top, 0):height - max(-bottom, 0), max(-left, 0):width - max(-right, 0)]


def _windows(x, kernel, strides, padding, dilation):
    """(N, C, OH, OW, KH, KW): position (i, j) of output (oh, ow)'s window."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    padded = _padded(x, padding)
    if padded.shape[2] < span[0] or padded.shape[3] < span[1]:
        raise ValueError(f"conv2d: the kernel {kernel} (dilation {dilation}) does not fit the "
                         f"padded input {padded.shape[2:]}")
    windows = np.lib.stride_tricks.sliding_window_view(padded, span, axis=(2, 3))
    return windows[:, :, ::sh, ::sw, ::dh, ::dw]


def _columns(x, kernel, strides, padding, dilation, groups):
    """im2col: ``(groups, N * OH * OW, C/groups * KH * KW)`` rows of windows, and
    ``(OH, OW)``."""
    batch, channels = x.shape[:2]
    windows = _windows(x, kernel, strides, padding, dilation)  # N, C, OH, OW, KH, KW
    out_h, out_w = windows.shape[2:4]
    windows = windows.reshape(batch, groups, channels // groups, out_h, out_w, *kernel)
    columns = windows.transpose(1, 0, 3, 4, 2, 5, 6).reshape(
        groups, batch * out_h * out_w, channels // groups * kernel[0] * kernel[1])
    return columns, (out_h, out_w)


# Both references are im2col and one (batched) matmul: NumPy's BLAS, so eager runs (and
# side exits) are as fast as NumPy code written by hand.
def _conv2d_impl(x, w, kernel, strides, padding, dilation, groups):
    x, w = np.asarray(x), np.asarray(w)
    dtype = np.matmul.resolve_dtypes((x.dtype, w.dtype, None))[-1]
    batch = x.shape[0]
    filters, group_channels, kh, kw = w.shape
    if (kh, kw) != tuple(kernel):
        raise ValueError(f"conv2d: weights {w.shape} do not have the kernel size {kernel}")
    if tuple(strides) == (1, 1) and group_channels > filters // groups and x.size:
        return _conv2d_by_taps(x, w, padding, dilation, groups, dtype)
    columns, (out_h, out_w) = _columns(x, (kh, kw), strides, padding, dilation, groups)
    kernels = w.reshape(groups, filters // groups, group_channels * kh * kw)
    out = np.matmul(columns, kernels.transpose(0, 2, 1))  # groups, N*OH*OW, F/groups
    out = out.reshape(groups, batch, out_h, out_w, filters // groups).transpose(1, 0, 4, 2, 3)
    return np.ascontiguousarray(out.reshape(batch, filters, out_h, out_w), dtype=dtype)


def _conv2d_by_taps(x, w, padding, dilation, groups, dtype):
    """A stride-1 convolution as one matmul per tap, for more input channels than filters
    (the input gradient of a first layer: 64 channels in, 3 out): im2col's matrix would be
    ``C * KH * KW`` times the input (320 MB for a 5x5 input gradient at 64x224x224, most of
    a first call's trace), while a tap's input is a slice of the padded image flattened
    over ``(H, W)``. Outputs are computed over the padded width (the columns past ``OW``
    wrap into the next row and are dropped), so every slice is a plain view."""
    filters, group_channels, kh, kw = w.shape
    batch, channels = x.shape[:2]
    padded = _padded(x, padding)
    height, width = padded.shape[2:]
    (dh, dw) = dilation
    out_h, out_w = height - dh * (kh - 1), width - dw * (kw - 1)
    if out_h < 1 or out_w < 1:
        raise ValueError(f"conv2d: the kernel {(kh, kw)} (dilation {dilation}) does not fit "
                         f"the padded input {(height, width)}")
    span = out_h * width
    # the last tap's slice runs dw * (kw - 1) elements past the image: zeros
    flat = np.zeros((batch, groups, group_channels, height * width + dw * (kw - 1)), dtype)
    flat[..., :height * width] = padded.reshape(batch, groups, group_channels, height * width)
    kernels = w.astype(dtype, copy=False).reshape(groups, filters // groups, group_channels,
                                                  kh, kw)
    out = np.zeros((batch, groups, filters // groups, span), dtype)
    # In pieces of columns whose input, with every tap's shift, stays in cache (~512 KB):
    # the taps then read it from there instead of from memory once each.
    piece = max(256, (1 << 19) // max(1, group_channels * flat.itemsize))
    for first in range(0, span, piece):
        last = min(span, first + piece)
        for i in range(kh):
            for j in range(kw):
                start = first + i * dh * width + j * dw
                out[..., first:last] += np.matmul(kernels[:, :, :, i, j],
                                                  flat[..., start:start + last - first])
    out = out.reshape(batch, filters, out_h, width)[..., :out_w]
    return np.ascontiguousarray(out)


def _weight_grad_impl(x, g, kernel, strides, padding, dilation, groups):
    x, g = np.asarray(x), np.asarray(g)
    dtype = np.matmul.resolve_dtypes((x.dtype, g.dtype, None))[-1]
    batch, channels = x.shape[:2]
    filters, out_h, out_w = g.shape[1:]
    # The windows of the output positions g has (a forward's output: all of them).
    x = _padded(x, padding)
    span = [(size - 1) * stride + (k - 1) * d + 1
            for size, stride, k, d in zip((out_h, out_w), strides, kernel, dilation)]
    x = x[:, :, :span[0], :span[1]]
    columns, _ = _columns(x, kernel, strides, NO_PADDING, dilation, groups)
    gradient = g.reshape(batch, groups, filters // groups, out_h * out_w).transpose(
        1, 2, 0, 3).reshape(groups, filters // groups, batch * out_h * out_w)
    out = np.matmul(gradient, columns)  # groups, F/groups, C/groups*KH*KW
    return np.ascontiguousarray(out.reshape(filters, channels // groups, *kernel), dtype=dtype)


# --- shape rules ---------------------------------------------------------------------
def _check(x, strides, padding, dilation, groups, what):
    if x.ndim != 4:
        raise ShapeError(f"{what} expects an input of rank 4 (N, C, H, W), got {x.ndim}")
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"{what}: groups must be a positive int, got {groups!r}")
    for name, pair in (("strides", strides), ("dilation", dilation)):
        if len(pair) != 2 or not all(isinstance(v, int) and v >= 1 for v in pair):
            raise ShapeError(f"{what}: {name} must be two positive ints, got {pair!r}")
    if len(padding) != 2 or not all(len(side) == 2 and all(isinstance(v, int) for v in side)
                                    for side in padding):
        raise ShapeError(f"{what}: padding must be ((top, bottom), (left, right)) ints")
    channels = x.shape[1]
    if isinstance(channels, int) and channels % groups:
        raise ShapeError(f"{what}: {channels} input channels are not divisible by "
                         f"groups={groups}")


def _check_kernel(kernel, what):
    if len(kernel) != 2 or not all(isinstance(k, int) and k >= 1 for k in kernel):
        raise ShapeError(f"{what}: kernel must be two positive ints, got {kernel!r}")


def _conv2d_rule(x, w, kernel, strides, padding, dilation, groups):
    _check(x, strides, padding, dilation, groups, "conv2d")
    if w.ndim != 4:
        raise ShapeError(f"conv2d expects weights of rank 4 (F, C/groups, KH, KW), got {w.ndim}")
    filters, group_channels = w.shape[:2]
    channels = x.shape[1]
    if isinstance(channels, int) and isinstance(group_channels, int) and (
            channels != group_channels * groups):
        raise ShapeError(f"conv2d: {channels} input channels do not match weights "
                         f"{tuple(w.shape)} with groups={groups}")
    if isinstance(filters, int) and filters % groups:
        raise ShapeError(f"conv2d: {filters} filters are not divisible by groups={groups}")
    _check_kernel(kernel, "conv2d")
    if any(isinstance(dim, int) and dim != size for dim, size in zip(w.shape[2:], kernel)):
        raise ShapeError(f"conv2d: weights {tuple(w.shape)} do not have the kernel size {kernel}")
    # The kernel size is a parameter (static), so H and W keep their symbols: a 3x3 'same'
    # convolution of an (s1, s2) image is (s1, s2), whatever symbol the weights' dims got.
    spatial = [output_size(x.shape[2 + axis], kernel[axis], strides[axis], padding[axis],
                           dilation[axis]) for axis in range(2)]
    for size in spatial:
        if isinstance(size, int) and size < 1:
            raise ShapeError("conv2d: the kernel does not fit the padded input")
    dtype = np.matmul.resolve_dtypes((x.dtype, w.dtype, None))[-1]
    return AbstractArray((x.shape[0], filters, *spatial), dtype)


def _weight_grad_rule(x, g, kernel, strides, padding, dilation, groups):
    _check(x, strides, padding, dilation, groups, "conv2d_weight_grad")
    if g.ndim != 4:
        raise ShapeError(f"conv2d_weight_grad expects an output gradient of rank 4, got "
                         f"{g.ndim}")
    _check_kernel(kernel, "conv2d_weight_grad")
    dtype = np.matmul.resolve_dtypes((x.dtype, g.dtype, None))[-1]
    return AbstractArray((g.shape[1], x.shape[1] // groups, *kernel), dtype)


# --- VJPs: convolutions ----------------------------------------------------------------
def conv2d_transpose(g, w, input_shape, strides, padding, dilation, groups):
    """The transpose of ``conv2d(., w)`` applied to ``g``: the input gradient, of
    ``input_shape``. Stride 1: a convolution of ``g`` with the flipped weights, in and out
    channels swapped within each group. Strided: one stride-1 convolution per *phase*
    (the input rows ``a, a + sh, ...`` and columns ``b, b + sw, ...``), each with the taps
    that reach that phase, interleaved: no zeros spread between the rows of ``g`` and
    multiplied (a stride-2 gradient did 4x the multiply-adds that way)."""
    filters, group_channels = shape_of(w)[:2]
    kernel = _kernel_of(w)
    per_group = filters // groups
    swapped = reshape(w, (groups, per_group, group_channels, *kernel))
    swapped = transpose(swapped, (0, 2, 1, 3, 4))
    swapped = reshape(swapped, (groups * group_channels, per_group, *kernel))
    if tuple(strides) == (1, 1):
        # Full correlation: every input position sees each output it fed.
        reach = (dilation[0] * (kernel[0] - 1), dilation[1] * (kernel[1] - 1))
        transposed_padding = tuple((reach[axis] - padding[axis][0],
                                    reach[axis] - padding[axis][1]) for axis in range(2))
        return conv2d(g, flip(swapped, (2, 3)), (1, 1), transposed_padding, dilation, groups,
                      kernel)
    plans = [[_phase(strides[axis], kernel[axis], dilation[axis], padding[axis], phase)
              for phase in range(strides[axis])] for axis in range(2)]
    if tuple(dilation) == (1, 1):
        return _phases_stacked(g, swapped, input_shape, plans, strides, kernel, padding,
                               groups)
    return _phases_apart(g, swapped, input_shape, plans, groups)


def _phases_apart(g, swapped, input_shape, plans, groups):
    """One convolution per phase (``plans[axis][phase]``), interleaved."""
    batch, channels, height, width = input_shape
    (sh, sw) = (len(plans[0]), len(plans[1]))
    rows_per_phase, columns_per_phase = (height + sh - 1) // sh, (width + sw - 1) // sw
    phase_shape = (batch, channels, rows_per_phase, columns_per_phase)
    rows = []
    for row_plan in plans[0]:
        row = []
        for column_plan in plans[1]:
            if row_plan is None or column_plan is None:  # no tap reaches this phase
                part = full(phase_shape, 0.0, np.result_type(g.dtype, swapped.dtype), like=g)
            else:
                taps = slice_axes(swapped, (0, 0, row_plan.first, column_plan.first),
                                  (*shape_of(swapped)[:2], row_plan.end, column_plan.end),
                                  (1, 1, row_plan.step, column_plan.step))
                part = conv2d(g, flip(taps, (2, 3)), (1, 1),
                              (row_plan.padding, column_plan.padding),
                              (row_plan.dilation, column_plan.dilation), groups,
                              (row_plan.taps, column_plan.taps))
                part = slice_axes(part, (0, 0, 0, 0), phase_shape, (1, 1, 1, 1))
            row.append(reshape(part, (*phase_shape, 1)))
        # (N, C, H/sh, W/sw, sw) -> columns interleaved
        row = reshape(concatenate(row, axis=4),
                      (batch, channels, rows_per_phase, 1, columns_per_phase * sw))
        rows.append(row)
    out = reshape(concatenate(rows, axis=3), (batch, channels, rows_per_phase * sh,
                                              columns_per_phase * sw))
    return slice_axes(out, (0, 0, 0, 0), tuple(input_shape), (1, 1, 1, 1))


def _phases_stacked(g, swapped, input_shape, plans, strides, kernel, padding, groups):
    """Every phase in one convolution, for an undilated kernel: the phases' taps,
    reversed, on a common padding and a common size ``T`` (zeros where a phase has fewer),
    as ``sh * sw`` times the output channels. Along an axis, phase ``a``'s reversed taps
    are every ``s``-th of the flipped kernel zero-padded to ``T * s`` (front padding
    ``F0``), starting at ``s - 1 - a``: so the stacked weights are one pad and a reshape
    of the flipped weights. One kernel (a handful of tile functions to compile, not a set
    per phase) at the price of the zero taps: 16 multiply-adds for 9 with a 3x3 kernel at
    stride 2."""
    batch, channels, height, width = input_shape
    (sh, sw) = strides
    filters_per_group = shape_of(swapped)[1]
    group_channels = channels // groups
    layout = []  # per axis: (low padding, taps, high padding, front, back)
    for axis, stride in enumerate(strides):
        reaching = [plan for plan in plans[axis] if plan is not None]
        low = max(plan.padding[0] for plan in reaching)
        taps = max(low - plan.padding[0] + plan.taps for plan in reaching)
        high = _excess(stride, kernel[axis], 1, padding[axis]) - low + taps - 1
        front = stride * low + padding[axis][0] + stride - kernel[axis]
        layout.append((low, taps, high, front, taps * stride - front - kernel[axis]))
    (row_low, row_taps, row_high, *row_pad), (column_low, column_taps, column_high,
                                              *column_pad) = layout
    stacked = pad(flip(swapped, (2, 3)), ((0, 0, 0), (0, 0, 0), (*row_pad, 0),
                                          (*column_pad, 0)))
    # (groups, Cg, F/groups, T_h, s_h, T_w, s_w) -> (groups, s_h, s_w, Cg, F/groups, T_h, T_w)
    stacked = reshape(stacked, (groups, group_channels, filters_per_group, row_taps, sh,
                                column_taps, sw))
    stacked = reshape(transpose(stacked, (0, 4, 6, 1, 2, 3, 5)),
                      (groups * sh * sw * group_channels, filters_per_group, row_taps,
                       column_taps))
    rows_per_phase, columns_per_phase = (height + sh - 1) // sh, (width + sw - 1) // sw
    out = conv2d(g, stacked, (1, 1), ((row_low, row_high), (column_low, column_high)),
                 (1, 1), groups, (row_taps, column_taps))
    out = slice_axes(out, (0, 0, 0, 0), (batch, groups * sh * sw * group_channels,
                                         rows_per_phase, columns_per_phase), (1, 1, 1, 1))
    # channel (group, q_h, q_w, c) holds phase (s_h - 1 - q_h, s_w - 1 - q_w)
    out = flip(reshape(out, (batch, groups, sh, sw, group_channels, rows_per_phase,
                             columns_per_phase)), (2, 3))
    out = reshape(transpose(out, (0, 1, 4, 5, 2, 6, 3)),
                  (batch, channels, rows_per_phase * sh, columns_per_phase * sw))
    return slice_axes(out, (0, 0, 0, 0), tuple(input_shape), (1, 1, 1, 1))


class _PhasePlan(NamedTuple):
    first: int  # the first kernel tap that reaches the phase
    end: int  # past the last one
    step: int  # taps between two that reach it
    taps: int
    dilation: int  # of the phase's convolution over g
    padding: tuple  # (low, high) of the phase's convolution over g


def _excess(stride, kernel, dilation, padding):
    """The most ``ceil(size / stride)`` exceeds conv2d's output size over input sizes (the
    difference depends only on ``size % stride``)."""
    low, high = padding
    span = dilation * (kernel - 1)
    return max((remainder > 0) - (remainder + low + high - span - 1) // stride - 1
               for remainder in range(stride))


def _phase(stride, kernel, dilation, padding, phase):
    """How input positions ``phase + stride * q`` get their gradient along one axis: from
    the taps ``i`` with ``(phase + low - i * dilation) % stride == 0``, output position
    ``q + (phase + low - i * dilation) // stride``; a correlation of ``g`` with those taps
    reversed. None when no tap reaches the phase. The high padding makes the correlation at
    least ``ceil(size / stride)`` long for every input size (the excess is sliced off).

    >>> [(plan.first, plan.taps, plan.padding) for plan in (_phase(2, 3, 1, (1, 1), 0),
    ...                                                     _phase(2, 3, 1, (1, 1), 1))]
    [(1, 1, (0, 0)), (0, 2, (0, 1))]
    """
    low = padding[0]
    reaching = [tap for tap in range(kernel) if (phase + low - tap * dilation) % stride == 0]
    if not reaching:
        return None
    step = reaching[1] - reaching[0] if len(reaching) > 1 else 1
    last_offset = (phase + low - reaching[-1] * dilation) // stride
    phase_dilation = dilation // math.gcd(dilation, stride)
    excess = _excess(stride, kernel, dilation, padding)
    phase_low = -last_offset
    phase_high = excess - phase_low + phase_dilation * (len(reaching) - 1)
    return _PhasePlan(reaching[0], reaching[-1] + 1, step, len(reaching), phase_dilation,
                      (phase_low, phase_high))


def _conv2d_vjp_x(g, x, w, out, kernel, strides, padding, dilation, groups):
    return conv2d_transpose(g, w, shape_of(x), strides, padding, dilation, groups)


def _conv2d_vjp_w(g, x, w, out, kernel, strides, padding, dilation, groups):
    return conv2d_weight_grad(x, g, kernel, strides, padding, dilation, groups)


def _weight_grad_vjp_x(gw, x, g, out, kernel, strides, padding, dilation, groups):
    return conv2d_transpose(g, gw, shape_of(x), strides, padding, dilation, groups)


def _weight_grad_vjp_g(gw, x, g, out, kernel, strides, padding, dilation, groups):
    return conv2d(x, gw, strides, padding, dilation, groups, kernel)


conv2d_p = Primitive(
    "conv2d",
    "conv",
    impl=_conv2d_impl,
    abstract_eval=_conv2d_rule,
    vjp=(_conv2d_vjp_x, _conv2d_vjp_w),
)

conv2d_weight_grad_p = Primitive(
    "conv2d_weight_grad",
    "conv",
    impl=_weight_grad_impl,
    abstract_eval=_weight_grad_rule,
    vjp=(_weight_grad_vjp_x, _weight_grad_vjp_g),
)


def _normalized(strides, padding, dilation):
    pair = lambda value: tuple(value) if isinstance(value, (tuple, list)) else (value, value)  # noqa: E731
    padding = tuple(tuple(side) if isinstance(side, (tuple, list)) else (side, side)
                    for side in (padding if isinstance(padding, (tuple, list)) else
                                 (padding, padding)))
    return (tuple(int(v) for v in pair(strides)),
            tuple((int(low), int(high)) for low, high in padding),
            tuple(int(v) for v in pair(dilation)))


def _same_float_dtype(a, b):
    """``a`` and ``b`` cast to their common float dtype when they differ (float32 images
    with float64 weights, ints or bools with floats): exactly what NumPy's matmul does
    inside, and the compiled kernels take one dtype. Integer convolutions stay integer."""
    dtypes = (dtype_of(a), dtype_of(b))
    result = np.matmul.resolve_dtypes((*dtypes, None))[-1]
    if dtypes[0] == dtypes[1] or result.kind != "f":
        return a, b
    return tuple(value if dtype == result else bind(cast_p, value, dtype=result)
                 for value, dtype in zip((a, b), dtypes))


def _kernel_of(w):
    """The weights' (KH, KW) as ints: under the tracer, a symbolic size specializes."""
    return tuple(int(size) for size in shape_of(w)[2:4])


def conv2d(x, w, strides=(1, 1), padding=NO_PADDING, dilation=(1, 1), groups=1, kernel=None):
    """Cross-correlation of ``x`` (N, C, H, W) with ``w`` (F, C // groups, KH, KW);
    ``padding`` is ``((top, bottom), (left, right))`` (an int or pair per axis also works);
    ``kernel`` is (KH, KW), read from ``w`` when not given."""
    strides, padding, dilation = _normalized(strides, padding, dilation)
    kernel = _kernel_of(w) if kernel is None else tuple(int(size) for size in kernel)
    x, w = _same_float_dtype(x, w)
    return bind(conv2d_p, x, w, kernel=kernel, strides=strides, padding=padding,
                dilation=dilation, groups=int(groups))


def conv2d_weight_grad(x, g, kernel, strides=(1, 1), padding=NO_PADDING, dilation=(1, 1),
                       groups=1):
    """The gradient of ``sum(conv2d(x, w) * g)`` with respect to ``w`` of spatial size
    ``kernel``: (F, C // groups, KH, KW)."""
    strides, padding, dilation = _normalized(strides, padding, dilation)
    x, g = _same_float_dtype(x, g)
    return bind(conv2d_weight_grad_p, x, g, kernel=tuple(int(k) for k in kernel),
                strides=strides, padding=padding, dilation=dilation, groups=int(groups))


__all__ = ["conv2d", "conv2d_p", "conv2d_transpose", "conv2d_weight_grad",
           "conv2d_weight_grad_p", "output_size"]
