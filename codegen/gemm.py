"""tracejit's own GEMM (BLIS-style, written in LLVM IR), for AVX-512 and AVX2 hosts.

    void tj_sgemm_own(i64 trans_a, i64 trans_b, i64 m, i64 n, i64 k,
                      float* a, i64 lda, float* b, i64 ldb, float* c, i64 ldc)

and ``tj_sgemm_own_epilogue(<the same>, float* bias, i64 activation)`` compute
``C = op(A) @ op(B)`` - the second ``activation(op(A) @ op(B) + bias)``, fused per row panel
of C (``gemm_driver``), and ``tj_sgemm_own_combine(<the same>, float* other, i64 ldo, i64
combine, double scale)`` that value combined with a second matrix (``other - scale * C``,
``where(other > 0, C, 0)``: ``gemm_driver.COMBINES``) - for row-major ``C`` (``m x n``,
row stride ``ldc``), where
``op(A)`` is ``A`` (rows ``lda`` apart) or, when ``trans_a``, the transpose of a row-major
``k x m`` ``A`` - so a transposed view is read where it is, never copied; likewise ``B``.
It splits ``C`` by rows or columns across tracejit's thread pool (``codegen/parallel.py``)
when the product is big enough, and otherwise runs on the calling thread. Compiled kernels
import it by symbol (``codegen/blas.py`` chooses it over OpenBLAS's ``sgemm``). The same
code is generated in float64 (``tj_dgemm_own_<isa>``: ``matmul`` on float64 arrays; compiled
kernels do not call it yet, they keep OpenBLAS's ``dgemm``).

Where the parts live (the design and its measurements: ``docs/experiments/sgemm_avx512``):

* ``gemm_ir``: the instruction sets (``AVX512``: 8 x 32 register tiles of ``<16 x float>``;
  ``AVX2``: 4 x 24 of ``<8 x float>``) and the IR helpers;
* ``gemm_micro``: the micro-kernels; ``gemm_packing``: packing A and B into panels;
* ``gemm_driver``: the blocked loops, the pool's chunks, the entry (how a product is
  planned and split);
* here: which instruction set runs (the host's best, or ``set_isa``'s: the runtime
  passes ``TRACEJIT_GEMM_ISA``), its
  object code compiled once per machine into the disk cache, loading, and calls from
  Python (``matmul``, ``prepared``: tests and benchmarks).

Each thread needs a workspace for its packed panels (``Isa.workspace_elements``: 8.7 MB for
AVX-512, of which only what a product touches is ever paged in); workspaces are claimed
from a table the process allocates once per instruction set (``_Workspaces``), so
concurrent callers never share one.

>>> import numpy as np
>>> if supported():
...     a = np.arange(6, dtype=np.float32).reshape(2, 3)
...     b = np.ones((3, 4), np.float32)
...     print(matmul(a, b).tolist(), matmul(a.T, a).shape)  # a.T is read transposed
... else:
...     print([[3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0, 12.0]], (3, 3))
[[3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0, 12.0]] (3, 3)
"""

from __future__ import annotations

import ctypes
import threading
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import llvm, parallel
from .gemm_driver import ACTIVATIONS, COMBINES, NO_ACTIVATION, WORKSPACES_SYMBOL
from .gemm_ir import AVX2, AVX512, ISAS, isa_for

ENTRY = "tj_sgemm_own"  # what compiled kernels import; the chosen instruction set's entry
EPILOGUE_ENTRY = "tj_sgemm_own_epilogue"  # the same with a bias and an activation
COMBINE_ENTRY = "tj_sgemm_own_combine"  # and then a second matrix of C's shape
ISA_VARIABLE = "TRACEJIT_GEMM_ISA"
# The files whose text generates the module: the object store's key holds them all.
SOURCES = ("gemm.py", "gemm_ir.py", "gemm_micro.py", "gemm_packing.py", "gemm_driver.py",
           "gemm_batched.py")
# Batched products (``gemm_batched``), one symbol per dtype: float64 batches call the own
# GEMM too (a serial loop of OpenBLAS dgemm calls is what they replace).
BATCHED_ENTRIES = {"float32": "tj_sgemm_own_batched", "float64": "tj_dgemm_own_batched"}


@lru_cache(maxsize=None)
def _host_features():
    return {name for name, present in llvm.host_cpu()[1].items() if present}


def host_can_run(isa):
    """True when this host has every feature ``isa`` (an ``Isa`` or its name) needs."""
    isa = ISAS[isa] if isinstance(isa, str) else isa
    return all(feature in _host_features() for feature in isa.host_features)


_isa_setting = None  # set_isa's; None: the host's best


def set_isa(name):
    """The instruction set the process's own GEMM runs (``avx512`` or ``avx2``; ``None``,
    codegen's default: the host's best), as the runtime reads it from ``TRACEJIT_GEMM_ISA``
    (``runtime/config.py``; nothing in codegen reads the environment). Checked and fixed
    at its first use (``chosen_isa``)."""
    global _isa_setting
    _isa_setting = name


@lru_cache(maxsize=None)
def chosen_isa():
    """The instruction set compiled kernels' ``tj_sgemm_own`` runs: ``set_isa``'s
    (``TRACEJIT_GEMM_ISA``; fixed at the first call in a process) when set, else the host's
    best; None when the host has neither (matmul then keeps OpenBLAS).

    >>> chosen_isa() in (None, AVX512, AVX2)
    True
    """
    name = _isa_setting
    if name:
        if name not in ISAS:
            raise ValueError(f"{ISA_VARIABLE} must be one of {', '.join(ISAS)}, not {name!r}")
        if not host_can_run(name):
            raise ValueError(f"{ISA_VARIABLE}={name}: this host lacks "
                             f"{', '.join(ISAS[name].host_features)}")
        return ISAS[name]
    return next((isa for isa in (AVX512, AVX2) if host_can_run(isa)), None)


def supported(isa=None):
    """True when this host can run the GEMM: with ``isa`` (a name), that instruction set's
    code; without, the one ``chosen_isa`` picks (AVX-512F, or AVX2 with FMA)."""
    return host_can_run(isa) if isa is not None else chosen_isa() is not None


def _resolve(isa, dtype="float32"):
    """The ``Isa`` for ``isa`` (a name, an ``Isa`` or None: ``chosen_isa()``) and ``dtype``."""
    chosen = ISAS[isa] if isinstance(isa, str) else isa or chosen_isa()
    if chosen is None or not host_can_run(chosen):
        raise RuntimeError(f"this host cannot run tracejit's own GEMM ({isa or 'any'})")
    return isa_for(chosen.name, dtype) if isinstance(isa, str) or isa is None else chosen


def module_ir(isa=None, dtype="float32"):
    """The GEMM module's LLVM IR text (for ``isa``, a name; default ``chosen_isa()``)."""
    from .gemm_driver import module_ir as generate

    return generate(_resolve(isa, dtype))


# --- compiled once per machine ------------------------------------------------------------
GEMM_OPT_LEVEL = 2
_load_lock = threading.Lock()
_loaded = {}


def object_code(isa=None):
    """The module's object code: from the runtime's object store (the disk cache) when it
    has it, else compiled now (0.7 s of CPU on the loaded test machine) and stored.
    Keyed by the code that generates it (``parallel.stored_object``), the instruction set
    and the host, like the pool's runtime."""
    isa = _resolve(isa)

    def build():
        start = time.process_time()
        from .gemm_driver import module_ir as generate

        # At O2: the micro-kernels are vectors and loops written out already, so O3's
        # extra work bought nothing measurable (MLP-step products, side by side on one
        # thread: O2/O3 time 0.89-1.04, within the machine's noise) and cost 0.5 s of the
        # build (1.2 s CPU at O3, 0.7 s at O2), which a first call with an empty cache
        # waits for.
        compiled = llvm.compile_module(generate(isa), opt_level=GEMM_OPT_LEVEL)
        llvm.log.info("compiled tracejit's GEMM (%s) in %.0f ms of CPU (%.0f ms wall)",
                      isa.entry, (time.process_time() - start) * 1e3, compiled.seconds * 1e3)
        return compiled.object_code

    folder = Path(__file__).resolve().parent
    return parallel.stored_object(isa.entry, [folder / name for name in SOURCES], build)


class _Workspaces:
    """The table ``tj_sgemm_chunk`` claims workspaces from: ``[slots, (busy, address) *
    slots]``. Two slots per pool thread: the pool's threads, plus callers on other Python
    threads multiplying at the same time (a third caller waits for a slot). Only the pages
    a product touches are ever mapped."""

    def __init__(self, slots, elements, dtype):
        self.memory = [np.empty(elements + 16, dtype) for _ in range(slots)]
        self.table = (ctypes.c_int64 * (1 + 2 * slots))()
        self.table[0] = slots
        for index, memory in enumerate(self.memory):
            aligned = -memory.ctypes.data % 64  # packed panels on cache-line boundaries
            self.table[2 + 2 * index] = memory.ctypes.data + aligned

    @property
    def address(self):
        return ctypes.addressof(self.table)


_EPILOGUE_SIGNATURE = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 5),
                                       *([ctypes.c_void_p, ctypes.c_int64] * 4))
_COMBINE_SIGNATURE = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 5),
                                      *([ctypes.c_void_p, ctypes.c_int64] * 5),
                                      ctypes.c_int64, ctypes.c_double)


def library(isa=None, dtype="float32"):
    """The loaded GEMM for ``isa`` (default ``chosen_isa()``) and ``dtype``, compiled or
    read from the object store on first use."""
    isa = _resolve(isa, dtype)
    with _load_lock:
        if isa.entry not in _loaded:
            pool = parallel.pool()
            workspaces = _Workspaces(2 * pool.threads, isa.workspace_elements, isa.dtype)
            imports = {**pool.symbols(), WORKSPACES_SYMBOL: workspaces.address}
            loaded = llvm.load(object_code(isa), [isa.entry, isa.epilogue_entry,
                                                  isa.combine_entry, isa.batched_entry],
                               imports=imports)
            _loaded[isa.entry] = dict(
                library=loaded, workspaces=workspaces,
                function=_EPILOGUE_SIGNATURE(loaded.addresses[isa.epilogue_entry]),
                combined=_COMBINE_SIGNATURE(loaded.addresses[isa.combine_entry]))
        return _loaded[isa.entry]["library"]


def symbols(dtype="float32"):
    """The chosen instruction set's entries for compiled kernels that call them: for
    float32 ``{"tj_sgemm_own": address, "tj_sgemm_own_epilogue": address,
    "tj_sgemm_own_combine": address, "tj_sgemm_own_batched": address}``, for float64
    ``{"tj_dgemm_own_batched": address}``."""
    isa = _resolve(None, dtype)
    addresses = library(isa).addresses
    if dtype == "float64":
        return {BATCHED_ENTRIES[dtype]: addresses[isa.batched_entry]}
    return {ENTRY: addresses[isa.entry], EPILOGUE_ENTRY: addresses[isa.epilogue_entry],
            COMBINE_ENTRY: addresses[isa.combine_entry],
            BATCHED_ENTRIES[dtype]: addresses[isa.batched_entry]}


def _layout(matrix):
    """``(transposed, leading dimension)`` of a matrix the GEMM reads in place, or None (it
    is then copied): rows or columns must be unit-stride."""
    rows, columns = matrix.shape
    row_stride, column_stride = matrix.strides
    size = matrix.itemsize
    if matrix.size == 0:  # nothing is read
        return 0, max(columns, 1)
    # The stride of an axis of length 1 is never used (NumPy may report anything).
    row_stride = size * columns if rows == 1 else row_stride
    column_stride = size if columns == 1 else column_stride
    if column_stride == size and row_stride % size == 0 and row_stride >= size * columns:
        return 0, row_stride // size
    if row_stride == size and column_stride % size == 0 and column_stride >= size * rows:
        return 1, column_stride // size
    return None


def prepared(a, b, out, isa=None, bias=None, activation=None, other=None, combine=None,
             scale=1.0):
    """A zero-argument call that stores ``a @ b`` into ``out`` (arguments converted once:
    about 1 us per call, for benchmarks of small products) with the code for ``isa`` (a
    name; default ``chosen_isa()``). ``a`` and ``b`` must be float32 (or both float64)
    with a unit-stride axis; ``out`` of their dtype, with unit-stride rows. With ``bias``
    (contiguous, one per column) and ``activation`` (None, ``"relu"``: ``np.maximum(x, 0)``,
    or ``"relu_zero_first"``: ``np.maximum(0, x)``, which keeps -0.0) it stores
    ``activation(a @ b + bias)``. With ``other`` (``D``: out's shape and dtype, unit-stride
    rows) and ``combine`` (no activation then) that value ``v`` becomes ``D + scale * v``
    (``"add"``), ``D - scale * v`` (``"subtract"``), ``where(D > 0, v, 0)``
    (``"where_positive"``) or ``where(D <= 0, 0, v)`` (``"unless_nonpositive"``);
    ``scale`` is rounded to the dtype first, as NumPy rounds a Python float."""
    (m, k), n = a.shape, b.shape[1]
    dtype = a.dtype
    layouts = [_layout(a), _layout(b)]
    if None in layouts or dtype not in (np.float32, np.float64) or b.dtype != dtype:
        raise ValueError("prepared() reads float32 or float64 matrices with a unit-stride "
                         "axis")
    out_layout = _layout(out) if out.shape == (m, n) and out.dtype == dtype else None
    if out_layout is None or out_layout[0]:
        raise ValueError(f"out must be a {dtype} (m, n) array with unit-stride rows")
    if bias is not None and (bias.shape != (n,) or bias.dtype != dtype
                             or not bias.flags.c_contiguous):
        raise ValueError(f"bias must be a contiguous {dtype} array of shape ({n},)")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, not {activation!r}")
    if combine not in COMBINES:
        raise ValueError(f"combine must be one of {list(COMBINES)}, not {combine!r}")
    other_layout = _layout(other) if other is not None and other.shape == (m, n) and (
        other.dtype == dtype) else None
    if (combine is None) != (other is None) or (other is not None and (
            other_layout is None or other_layout[0])):
        raise ValueError(f"other (with combine) must be a {dtype} (m, n) array with "
                         "unit-stride rows")
    if combine is not None and ACTIVATIONS[activation] != NO_ACTIVATION:
        raise ValueError("combine runs without an activation")
    isa = _resolve(isa, dtype.name)
    library(isa)
    (trans_a, lda), (trans_b, ldb) = layouts
    arguments = (trans_a, trans_b, m, n, k, a.ctypes.data, lda, b.ctypes.data, ldb,
                 out.ctypes.data, out_layout[1], None if bias is None else bias.ctypes.data,
                 ACTIVATIONS[activation])
    # The call holds the arrays whose addresses it passes: a temporary handed in
    # (prepared(a, b, np.empty(...))) would otherwise be freed and then written into.
    held = (a, b, out, bias, other)
    if combine is not None:
        function = _loaded[isa.entry]["combined"]
        scale = float(dtype.type(scale))
        extra = (other.ctypes.data, other_layout[1], COMBINES[combine], scale)
        return lambda held=held: function(*arguments, *extra)
    function = _loaded[isa.entry]["function"]
    return lambda held=held: function(*arguments)


def matmul(a, b, out=None, isa=None, bias=None, activation=None, other=None, combine=None,
           scale=1.0):
    """``a @ b`` for 2-D float32 arrays by the GEMM (float64 when both are float64; for
    tests and benchmarks: compiled kernels call the symbol), with the code for ``isa``
    (``"avx512"``, ``"avx2"``; default ``chosen_isa()``). Views with a unit-stride axis
    (transposes, column slices) are read in place, others copied; ``out`` (unit-stride
    rows) receives the product. ``bias`` (one per column) and ``activation`` (``"relu"``)
    are fused: ``relu(a @ b + bias)``; ``other``, ``combine`` and ``scale`` as in
    ``prepared`` (``other - 0.1 * (a @ b)``: ``combine="subtract", scale=0.1``).

    >>> if supported():
    ...     x = np.array([[1.0, -2.0]], np.float32)
    ...     print(matmul(x, np.eye(2, dtype=np.float32), bias=np.float32([0.5, 0.5]),
    ...                  activation="relu").tolist())
    ... else:
    ...     print([[1.5, 0.0]])
    [[1.5, 0.0]]
    """
    dtype = np.float64 if np.result_type(a, b) == np.float64 else np.float32
    a, b = np.asarray(a, dtype), np.asarray(b, dtype)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (m, k) @ (k, n), got {a.shape} @ {b.shape}")
    a, b = (operand if _layout(operand) else np.ascontiguousarray(operand) for operand in (a, b))
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), dtype)
    if bias is not None:
        bias = np.ascontiguousarray(bias, dtype)
    if other is not None:
        other = np.asarray(other, dtype)
        layout = _layout(other) if other.ndim == 2 else (0, 0)
        if layout is None or layout[0]:  # the epilogue reads D's rows unit-stride
            other = np.ascontiguousarray(other)
    prepared(a, b, out, isa, bias, activation, other, combine, scale)()
    return out
