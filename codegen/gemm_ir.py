"""What the own GEMM's IR is built from: the instruction sets it is generated for
(``Isa``: vector width, register tile, cache blocking) and ``Emitter``, the module under
construction with the IR helpers every part of the GEMM uses (masked vectors, splats,
counted loops).

>>> AVX512.lanes, AVX512.mr, AVX512.nr, AVX2.lanes, AVX2.mr, AVX2.nr
(16, 8, 32, 8, 4, 24)
>>> FLOAT64_ISAS["avx2"].entry, FLOAT64_ISAS["avx512"].nr
('tj_dgemm_own_avx2', 16)
>>> emitter = Emitter(AVX2)
>>> str(emitter.vector), emitter.fma.name
('<8 x float>', 'llvm.fma.v8f32')
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llvmlite import ir

from .counted_loop import counted_loop

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()


def c64(value):
    return ir.Constant(I64, value)


def _round_up(value, step):
    return -(-value // step) * step


@dataclass(frozen=True)
class Isa:
    """An instruction set the GEMM is generated for, and the blocking measured for it.

    ``lanes`` elements of ``dtype`` per vector; an ``mr x nr`` register tile of C (``nr`` a
    multiple of ``lanes``); ``kc, mc, nc`` the cache blocks of K, M and N;
    ``function_attributes`` are written on every function the module defines (empty: the
    host's CPU and features)."""

    name: str
    lanes: int
    mr: int
    nr: int
    kc: int
    mc: int
    nc: int
    host_features: tuple  # what the host must have to run it
    function_attributes: str = ""
    cheap_masks: bool = True  # masked loads cost what plain ones do (AVX-512's k masks)
    dtype: str = "float32"

    @property
    def scalar(self):
        return F32 if self.dtype == "float32" else F64

    @property
    def itemsize(self):
        return 4 if self.dtype == "float32" else 8

    @property
    def suffix(self):
        """The element's name in LLVM intrinsics (``f32``, ``f64``)."""
        return f"f{8 * self.itemsize}"

    @property
    def vectors(self):
        """Vectors per row of a register tile."""
        return self.nr // self.lanes

    @property
    def entry(self):
        """The symbol of this instruction set's entry in its own module."""
        return f"tj_{'s' if self.dtype == 'float32' else 'd'}gemm_own_{self.name}"

    @property
    def epilogue_entry(self):
        """The symbol of the entry with a bias and activation epilogue."""
        return f"{self.entry}_epilogue"

    @property
    def combine_entry(self):
        """The symbol of the entry that also combines with a second matrix."""
        return f"{self.entry}_combine"

    @property
    def batched_entry(self):
        """The symbol of the batched entry (``gemm_batched``)."""
        return f"{self.entry}_batched"

    @property
    def packed_a_offset(self):
        """Where packed A starts in a workspace (after the packed B block)."""
        return self.kc * _round_up(self.nc, self.nr)

    @property
    def workspace_elements(self):
        """A thread's packed B block, packed A block and slack for alignment."""
        return self.packed_a_offset + _round_up(self.mc, self.mr) * self.kc + 64


# docs/experiments/sgemm_avx512: 8 x 32 (16 zmm accumulators, 2 B vectors, a broadcast A).
# kc 512, not 256: fewer K blocks, so C's tiles are read and written back half as often
# (the A block, 128 x 512 floats, still fits a 1 MB L2). One thread, CPU time, loaded
# 2-core AMD EPYC: 512 x 784 @ 784 x 1024 97-100 -> 100-103 GFLOP/s, 784 x 512 @ 512 x 1024
# (A transposed) 100-104 -> 105-107, 64 x 784 @ 784 x 1024 83-87 -> 88-91, 1024^3 103 ->
# 105; the MLP step (own GEMM, one thread) b512 18.2 -> 17.3 ms, b64 2.74 -> 2.55 ms
# (medians of 4 fresh processes each). The AVX2 code keeps 256 (Haswell's L2 is 256 KB).
AVX512 = Isa("avx512", lanes=16, mr=8, nr=32, kc=512, mc=128, nc=4096,
             host_features=("avx512f",))
# 16 ymm registers: 4 x 24 is 12 accumulators, 3 B vectors and a broadcast A (BLIS's 6 x 16
# would need <6 x float> panels). Pinned to Haswell's instruction set, so the code is the
# same on an AVX2 host as where it is forced on an AVX-512 host (no zmm, no mask registers).
# vmaskmovps loads are slow: the direct kernels read whole tiles unmasked (784 x 64 @
# 64 x 1024, B read in place, took 1.93 ms with every load masked; AVX-512's 0.97 ms).
AVX2 = Isa("avx2", lanes=8, mr=4, nr=24, kc=256, mc=128, nc=4096,
           host_features=("avx2", "fma"), cheap_masks=False,
           function_attributes='"target-cpu"="haswell" "target-features"="+avx2,+fma"')
ISAS = {isa.name: isa for isa in (AVX512, AVX2)}
# float64: the same tiles in registers of half as many lanes (blocking not tuned apart;
# kc 256: the float32 blocking it was measured with).
FLOAT64_ISAS = {isa.name: replace(isa, lanes=isa.lanes // 2, nr=isa.nr // 2, kc=256,
                                  dtype="float64")
                for isa in (AVX512, AVX2)}


def isa_for(name, dtype):
    """The ``Isa`` of instruction set ``name`` for ``dtype`` (``float32``, ``float64``)."""
    return (ISAS if str(dtype) == "float32" else FLOAT64_ISAS)[name]


class Emitter:
    """The GEMM module being built for ``isa``, and the IR helpers its parts share."""

    def __init__(self, isa):
        self.isa = isa
        prefix = "s" if isa.dtype == "float32" else "d"
        self.module = ir.Module(name=f"tj_{prefix}gemm_{isa.name}")
        self.scalar, self.align = isa.scalar, isa.itemsize
        self.vector = ir.VectorType(self.scalar, isa.lanes)
        self.fma = ir.Function(self.module, ir.FunctionType(self.vector, [self.vector] * 3),
                               f"llvm.fma.v{isa.lanes}{isa.suffix}")
        self.masked_loads, self.masked_stores = {}, {}
        self.prefetch_function = None

    def prefetch_for_write(self, builder, pointer, write=True):
        """Ask for ``pointer``'s cache line in L1, to be written (or only read: ``write``
        False); never faults."""
        if self.prefetch_function is None:
            self.prefetch_function = ir.Function(self.module, ir.FunctionType(
                VOID, [PTR, I32, I32, I32]), "llvm.prefetch.p0")
        kind, keep_in_l1, data = (ir.Constant(I32, value) for value in (int(write), 3, 1))
        builder.call(self.prefetch_function, [pointer, kind, keep_in_l1, data])

    def prefetch_tile(self, builder, pointer, stride):
        """Prefetch, to be read, the lines of an ``mr x nr`` tile at ``pointer`` (rows
        ``stride`` elements apart): the first and last element of each row and every
        64 bytes between (a prefetch past the matrix's end is harmless)."""
        row_bytes = self.isa.nr * self.isa.itemsize
        offsets = sorted({*range(0, row_bytes, 64), row_bytes - self.isa.itemsize})
        for row in range(self.isa.mr):
            start = builder.mul(c64(row), stride)
            for offset in offsets:
                element = builder.add(start, c64(offset // self.isa.itemsize))
                self.prefetch_for_write(builder, builder.gep(
                    pointer, [element], source_etype=self.scalar), write=False)

    def ir_text(self):
        """The module's IR, every definition carrying the instruction set's attributes."""
        text = str(self.module)
        if not self.isa.function_attributes:
            return text
        return "\n".join(f"{line} {self.isa.function_attributes}"
                         if line.startswith("define ") else line for line in text.splitlines())

    def function(self, name, arguments, internal=True):
        function = ir.Function(self.module, ir.FunctionType(VOID, arguments), name)
        if internal:
            function.linkage = "internal"
        return function

    # --- vectors ------------------------------------------------------------------------
    def masked_load(self, builder, pointer, mask, lanes=None):
        lanes = lanes or self.isa.lanes
        vector, mask_type = ir.VectorType(self.scalar, lanes), ir.VectorType(I1, lanes)
        if lanes not in self.masked_loads:
            self.masked_loads[lanes] = ir.Function(
                self.module, ir.FunctionType(vector, [PTR, I32, mask_type, vector]),
                f"llvm.masked.load.v{lanes}{self.isa.suffix}.p0")
        return builder.call(self.masked_loads[lanes], [
            pointer, ir.Constant(I32, self.align), mask, ir.Constant(vector, None)])

    def masked_store(self, builder, value, pointer, mask):
        lanes = value.type.count
        vector, mask_type = ir.VectorType(self.scalar, lanes), ir.VectorType(I1, lanes)
        if lanes not in self.masked_stores:
            self.masked_stores[lanes] = ir.Function(
                self.module, ir.FunctionType(VOID, [vector, PTR, I32, mask_type]),
                f"llvm.masked.store.v{lanes}{self.isa.suffix}.p0")
        builder.call(self.masked_stores[lanes], [value, pointer, ir.Constant(I32, self.align),
                                                 mask])

    def lane_mask(self, builder, limit, offset, lanes=None):
        """Lanes ``l`` with ``offset + l < limit`` (i64 operands)."""
        lanes = lanes or self.isa.lanes
        count = builder.trunc(builder.sub(limit, offset), I32)
        index_type = ir.VectorType(I32, lanes)
        first = builder.insert_element(ir.Constant(index_type, ir.Undefined), count,
                                       ir.Constant(I32, 0))
        splat = builder.shuffle_vector(first, ir.Constant(index_type, ir.Undefined),
                                       ir.Constant(index_type, [0] * lanes))
        return builder.icmp_signed("<", ir.Constant(index_type, list(range(lanes))), splat)

    def splat(self, builder, value):
        lanes = self.isa.lanes
        first = builder.insert_element(ir.Constant(self.vector, ir.Undefined), value,
                                       ir.Constant(I32, 0))
        return builder.shuffle_vector(first, ir.Constant(self.vector, ir.Undefined),
                                      ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def load_vector(self, builder, pointer):
        return builder.load(pointer, typ=self.vector, align=self.align)

    # --- addresses and control flow -----------------------------------------------------
    def element(self, builder, pointer, offset):
        return builder.gep(pointer, [offset], inbounds=True, source_etype=self.scalar)

    @staticmethod
    def smaller(builder, x, y):
        return builder.select(builder.icmp_signed("<", x, y), x, y)

    @staticmethod
    def loop(builder, start, stop, step, body):
        """``for i in range(start, stop, step): body(i)`` (signed i64)."""
        counted_loop(builder, start, stop, body, step=step)

    def pause(self, builder):
        """The spin-wait hint (``pause``)."""
        function = self.module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            self.module, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
        builder.call(function, [])
