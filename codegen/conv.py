"""Convolution kernels: ``conv2d`` as a direct convolution, ``conv2d_weight_grad`` as a
correlation of the input with the output gradient. Both read NCHW buffers where they are
(no im2col matrix, no padded copy), keep register tiles of fused multiply-adds vectorized
along the output width, pick the vector width from the host (4, 8 or 16 floats) and split
over the thread pool.

``conv2d`` (the forward, and the input gradient: a transposed convolution is a ``conv2d``
of the output gradient with flipped weights): a work item is one output row ``(n, oh)``.
Its ``F x OW`` outputs are computed in tiles of ``FB`` filters by ``NB`` vectors along
``ow``; a tile keeps its ``FB * NB`` accumulators in registers through the whole reduction
over ``(c, i, j)``: per tap, ``NB`` loads of the input row (shifted by ``j``), ``FB``
weight broadcasts, ``FB * NB`` multiply-adds; one call of a tile function runs every full
block of ``FB`` filters at its place in the row. Kernel rows that fall in the padding load
nothing but still add each filter's ``w * 0`` (an Inf or NaN weight must give NaN there,
as NumPy's zero padding and PyTorch do); the tiles at a row's ends use masked loads (lanes
outside the input read zero) and masked stores. The kernel root's pointwise expression
(bias, activation: ``schedule``'s epilogue fusion, as for matmul) is applied to each tile
as it is stored, when it reads nothing but the product, constants and per-filter buffers
(``conv_epilogue``); otherwise the row's *epilogue* runs over the stored row while it is
in cache, in place.

Compile time matters as much as run time (one compile per size bucket): the filters past
the last full tile block reuse the full tile (overlapping, or told how many filters
exist) and one masked tile serves every tail width, so a kernel has a handful of tile
functions, and kernels of one program with equal tiles (a forward and its input
gradient) share them.

``conv2d_weight_grad``: ``dW[f, c, i, j] = sum over (n, oh, ow) of g[n, f, oh, ow] *
x[n, c, oh*sh + i*dh - pt, ow*sw + j*dw - pl]``. The rows ``(n, oh)`` are split into one
piece per thread; each piece sums its rows into a partial ``dW`` in bands of rows that
stay in cache, a tile of ``FB`` filters by ``JB`` taps of one kernel row accumulating
vectors along ``ow``: for each vector position (its masks computed once), down the band's
rows (``(n, oh)`` stepped on, no division per row); the partials are added in piece order
at the end (deterministic for a given thread count).

Where each piece lives: ``conv_tiling`` (tile and band sizes, plain Python),
``conv_ir`` (``ConvKernel``'s vector IR helpers and the value-carrying loops),
``conv_forward`` (``ForwardKernel``), ``conv_epilogue`` (the bias and activation on the
tiles), ``conv_weight_grad`` (``WeightGradKernel``); this
module holds ``build``, which the ``conv`` kernel kind calls.

>>> import numpy as np, tracejit as tj
>>> from tracejit import nn
>>> layer = tj.jit(lambda x, w, b: nn.relu(nn.conv2d(x, w, b, padding=1)))
>>> x, w = np.ones((1, 2, 5, 6), np.float32), np.ones((3, 2, 3, 3), np.float32)
>>> b = -np.ones(3, np.float32)
>>> layer(x, w, b)[0, 0, :2].tolist()
[[7.0, 11.0, 11.0, 11.0, 11.0, 7.0], [11.0, 17.0, 17.0, 17.0, 17.0, 11.0]]
>>> layer.lower(x, w, b).kernels  # bias and relu are the convolution's epilogue
['k0_conv_where (conv)']
"""

from __future__ import annotations

from tracejit.tracer.errors import UnsupportedError

# The kernels' pieces, each in a module named for it; re-exported here, where the lowering
# and the tests look for them.
from .conv_forward import ForwardKernel
from .conv_ir import ConvKernel, counted_loop, either, when
from .conv_tiling import forward_blocking, host_vectors, lanes_for, weight_grad_blocking
from .conv_weight_grad import WeightGradKernel


def build(kb):
    """The kernel for a schedule kernel of kind ``conv`` (``kernel_kinds.KERNEL_KINDS`` calls
    this): its entry function."""
    name = kb.kernel.matmul.prim.name
    if name == "conv2d":
        return ForwardKernel(kb).build()
    if name == "conv2d_weight_grad":
        return WeightGradKernel(kb).build()
    raise UnsupportedError(f"no convolution kernel for {name}")


__all__ = ["ConvKernel", "ForwardKernel", "WeightGradKernel", "build", "counted_loop", "either",
           "forward_blocking", "host_vectors", "lanes_for", "weight_grad_blocking", "when"]
