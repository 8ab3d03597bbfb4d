"""The kinds of kernel, listed once: for each, the loop the thread pool may split and the
loop nest its ``impl`` runs.

The scheduler (``codegen/schedule.py``) gives each kernel its kind from the primitive of
its root or of its anchor (the matmul or convolution an epilogue is fused onto). A kind is
``KernelKind(split, body)``: ``split(kernel)`` is ``(extent, work per iteration)`` of the
loop split across threads, or None; ``body(kernel)`` emits the loop nest. A kind whose
module builds the whole kernel itself, entry included, gives ``build`` instead
(convolutions: ``codegen/conv.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import conv
from .kernel_index import FlatIndex, const, reduced_axes, size_of
from .matmul import build_matmul, matmul_split
from .numpy_math_chunks import build_chunked, exact_equations
from .reductions import build_reduce, reduce_split
from .row_fusion import rows
from .scan import build_scan, scan_split
from .scatter import build_scatter


@dataclass(frozen=True)
class KernelKind:
    split: Callable | None = None
    body: Callable | None = None
    build: Callable | None = None  # builds impl and entry itself


def pointwise_split(kernel):
    """Pointwise kernels split their flat loop, or their outer axis (rows, with stages)."""
    root = kernel.kernel.root
    stages = kernel.kernel.stages
    shape = root.aval.shape
    if not shape:
        return None
    if not stages and kernel.flat_ok(root):
        return size_of(shape), 1
    if stages:
        axes = reduced_axes(kernel.producers[stages[0].name])
        if len(axes) >= len(shape):
            return None
    return shape[0], size_of(shape[1:]) * (len(stages) + 1)


def build_pointwise(kernel):
    """One loop nest over the root's shape: rows with their stages first, a single flat
    loop when everything is elementwise on same-shaped buffers (in chunks where NumPy's
    loops compute some of it: ``numpy_math_chunks``), else nested loops."""
    root = kernel.kernel.root
    eqn = kernel.root_eqn()
    shape = root.aval.shape
    if kernel.kernel.stages:
        rows(kernel, shape, lambda index: kernel.store(
            root.name, index, kernel.compute(eqn, index), root.aval.dtype))
    elif kernel.flat_ok(root) and (equations := exact_equations(kernel, root)):
        build_chunked(kernel, root, eqn, equations, split=bool(shape))
    elif kernel.flat_ok(root):
        kernel.loop(kernel.dim(size_of(shape)) if shape else const(1),
                    lambda ix: kernel.store(root.name, FlatIndex(ix.value),
                                            kernel.compute(eqn, FlatIndex(ix.value)),
                                            root.aval.dtype), inner=True, split=bool(shape),
                    flat=True)
    else:
        kernel.loops(shape, lambda index: kernel.store(
            root.name, index, kernel.compute(eqn, index), root.aval.dtype),
            split_level=0 if shape else None)


def _single_thread(kernel):
    return None


KERNEL_KINDS = {
    "pointwise": KernelKind(split=pointwise_split, body=build_pointwise),
    "reduce": KernelKind(split=reduce_split, body=build_reduce),
    "matmul": KernelKind(split=matmul_split, body=build_matmul),
    "scatter": KernelKind(split=_single_thread, body=build_scatter),  # updates may collide
    "scan": KernelKind(split=scan_split, body=build_scan),
    "conv": KernelKind(build=conv.build),
}


def build_kernel(kernel):
    """The kernel's entry function: ``impl`` (its kind's loop nest), a trampoline for the
    thread pool, and the entry the program calls, which splits big work across threads
    and runs small work inline."""
    kind = KERNEL_KINDS[kernel.kernel.kind]
    if kind.build is not None:
        return kind.build(kernel)
    split = kind.split(kernel)
    kind.body(kernel)
    kernel.finish()
    return kernel.entry_function(split)
