"""Tile and band sizes of the convolution kernels (``conv_forward``, ``conv_weight_grad``):
plain Python over the host's vector width and register count and a size bucket's bounds,
so the choices can be read and tested without building IR.

With AVX-512's 16 float32 lanes and 32 registers, 64 filters over rows 32 wide and a
5x5 kernel:

>>> forward_blocking(16, 32, 64, 32), weight_grad_blocking(32, 5, 64)
((8, 1), (4, 5))
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from tracejit.tracer.dims import DimExpr

from . import llvm as host

# Bytes of output gradient and input rows a weight-gradient band keeps in cache (L2).
BAND_BYTES = 192 * 1024


@lru_cache(maxsize=None)
def host_vectors():
    """``(vector bits, vector registers)`` of the host: AVX-512 512/32, AVX 256/16, else
    SSE/NEON 128/16. Part of the cache key already (the CPU features are)."""
    features = host.host_description()["features"]
    flags = {flag[1:] for flag in features.split(",") if flag.startswith("+")}
    if "avx512f" in flags:
        return 512, 32
    if "avx" in flags:
        return 256, 16
    return 128, 16


def lanes_for(dtype):
    return host_vectors()[0] // (8 * np.dtype(dtype).itemsize)


def upper(dim, ranges):
    """An int bound on a dim (its bucket's top for a symbolic one)."""
    if isinstance(dim, DimExpr):
        return max(1, dim.bounds(ranges)[1])
    return max(1, int(dim))


def lower(dim, ranges):
    """The least value a dim takes (its bucket's bottom for a symbolic one)."""
    if isinstance(dim, DimExpr):
        return max(0, dim.bounds(ranges)[0])
    return int(dim)


def forward_blocking(lanes, registers, filters, width, most_per_block=8):
    """``(FB, NB)``: filters and vectors per register tile, for ``filters`` output channels
    (per group) and rows ``width`` wide. A tap costs ``FB * NB`` multiply-adds; tiles are
    charged whole, so blocks that overshoot the filters or the row cost what they waste.
    ``FB`` is at most ``most_per_block`` (the fewest filters a size bucket allows).

    With 16 vector registers (AVX, SSE, NEON) a tap's ``FB + NB`` loads count too (about one
    each per cycle where FMA units are two 128-bit halves, as on znver1) and at least 5
    independent accumulators hide the FMA latency. With 32 (AVX-512) the weights'
    broadcasts fold into the multiply-adds as memory operands, so loads hardly count; of
    equal costs the tile with the fewest vectors wins (less waste in a row's last tile,
    fewer masks to keep): on znver4, FB=8 NB=1 beat 8x2 and 4x4 by 5-20% on every
    forward of issue 14's benchmark and on 16- to 64-channel layers, and 3x2 beat 3x4 by
    30% for 3 filters (a first layer's input gradient).

    >>> forward_blocking(8, 16, 16, 224), forward_blocking(8, 16, 3, 224)
    ((2, 4), (3, 2))
    >>> forward_blocking(16, 32, 16, 128), forward_blocking(16, 32, 3, 128)
    ((8, 1), (3, 2))
    """
    wide = registers >= 32
    best = None
    for fb in range(1, max(1, min(8, most_per_block)) + 1):
        for nb in range(1, 7):
            if fb * nb + nb + 1 > registers:
                continue
            tiles = math.ceil(filters / fb) * math.ceil(width / (nb * lanes))
            if wide:
                key = (tiles * max(fb * nb, 6), nb, -fb)
            else:
                key = (tiles * max(fb * nb, fb + nb, 5), -fb * nb)
            if best is None or key < best[0]:
                best = (key, (fb, nb))
    return best[1]


def weight_grad_blocking(registers, kernel_width, most_filters):
    """``(FB, JB)``: filters and taps of one kernel row per weight-gradient tile: ``FB * JB``
    accumulators plus the loads of one output-gradient vector per filter and one input
    vector per tap; no more filters than the bucket's most (``most_filters`` per group),
    so no tile wastes filters."""
    best = None
    for fb in range(1, max(1, min(8, most_filters)) + 1):
        for jb in range(1, kernel_width + 1):
            if fb * jb + fb + jb + 1 > registers:
                continue
            key = (math.ceil(kernel_width / jb) * max(fb * jb, fb + jb, 5) / fb, -fb * jb)
            if best is None or key < best[0]:
                best = (key, (fb, jb))
    return best[1]


def band_rows(filters_per_group, width, itemsize):
    """Output rows ``(n, oh)`` per weight-gradient band: the band's output-gradient rows of
    every filter stay in ``BAND_BYTES``."""
    return max(1, min(64, BAND_BYTES // (max(1, filters_per_group) * width * itemsize)))
