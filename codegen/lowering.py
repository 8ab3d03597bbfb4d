"""Lowering: a schedule's kernels to LLVM IR functions, and the program that runs them.

Each kernel is a loop nest over the shape it stores, emitted by a ``KernelBuilder``
(``codegen/kernel_builder.py``) as its kind says (``codegen/kernel_kinds.py``): the value
of the root at an index is computed by inlining its producers through their lowering
rules (pointwise rules, views as index arithmetic), reductions fused as stages read their
row's accumulator (``codegen/row_fusion.py``), matmul and scatter kernels have modules of
their own. Symbolic dims are kernel arguments; static dims are constants, so LLVM folds
them. Inner loops are unit-stride over contiguous buffers and branch-free, so LLVM
vectorizes them.

The program function ``i32 program(ptr arrays, i64 s0, ...)`` takes a tuple of NumPy
arrays (inputs, constants, outputs, workspace) and reads each array's data pointer from
its ``PyArrayObject`` fields; it calls the kernels in order and checks each value guard
right after the kernel that computed its predicate. It returns 0, ``g + 1`` when guard
``g`` failed (a side exit: nothing after it ran), or ``-code`` for a kernel error.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from tracejit.tracer.ir import Literal, Var
from tracejit.tracer.ops import slice_p

from . import dtypes as dt
from .kernel_builder import KernelBuilder
from .kernel_index import (  # noqa: F401 (Ix, DimValues: imported from here)
    I1,
    I32,
    I64,
    PTR,
    DimValues,
    as_bool,
    const,
    float_intrinsic,
    size_of,
)
from .kernel_index import IndexComponent as Ix  # noqa: F401 (the name codegen/conv*.py import)
from .parallel import POOL_FIELDS

# CPython and NumPy object layouts the program reads (checked at import by
# tracejit.codegen.program).


def _tuple_items_offset():
    """Where a tuple's items start: 24 up to CPython 3.13, 32 from 3.14 (tuples keep their
    hash), measured here rather than assumed."""
    first, second = object(), object()
    pair = (first, second)
    for offset in range(16, 72, 8):
        if (ctypes.c_void_p.from_address(id(pair) + offset).value == id(first)
                and ctypes.c_void_p.from_address(id(pair) + offset + 8).value == id(second)):
            return offset
    return None  # (program's layout check refuses this interpreter)


TUPLE_ITEMS_OFFSET = _tuple_items_offset()
ARRAY_DATA_OFFSET = 16
ARRAY_FLAGS_OFFSET = 64  # an int; bit NPY_ARRAY_C_CONTIGUOUS is 1
C_CONTIGUOUS = 1

# What the program returns, before running anything, when an input is not C-contiguous:
# the wrapper then lays the inputs out (broadcast views compacted, others copied) and
# calls again. Far from guard numbers (positive) and kernel errors (small negative).
LAYOUT_EXIT = -(1 << 30)

# Small row kernels whose reductions do not depend on the order of their elements (every
# value and buffer at most this many elements: a row max over a batch of class scores)
# are optimized for size (LLVM's ``optsize``: no runtime unrolling, no vector epilogues):
# they run for microseconds, while LLVM spent 10-30 ms on each. (All small row kernels
# optimized for size cut the MLP step's module from ~280 to ~190 ms of LLVM, +5 us per
# step, but moved the last bits of float sums: ``_order_free``.)
SMALL_KERNEL_ELEMENTS = 1 << 14
SMALL_KERNEL_ATTRIBUTE = "optsize"


class ProgramLowering:
    """The module for a schedule: its kernels and the entry that runs them."""

    def __init__(self, schedule, name, profile=False):
        self.schedule = schedule
        self.name = name
        self.profile = profile  # count calls and nanoseconds per kernel (profile_symbol)
        self.module = ir.Module(name=name)
        self.symbols = [symbol.name for symbol in schedule.graph.symbols]
        self.slots = program_slots(schedule)
        temps = [name for name, b in schedule.buffers.items() if b.kind == "temp"]
        self.buffer_names = [name for _, name in self.slots if name is not None] + temps

    def gemm_function(self, dtype):
        """CBLAS gemm (64-bit integers) for float32 or float64, imported by symbol."""
        name = "tj_sgemm" if np.dtype(dtype) == np.float32 else "tj_dgemm"
        function = self.module.globals.get(name)
        if function is None:
            real = dt.register_type(dtype)
            function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [
                I32, I32, I32, I64, I64, I64, real, PTR, I64, PTR, I64, real, PTR, I64]), name)
        return function

    def own_gemm_function(self):
        """``tj_sgemm_own`` (``codegen/gemm.py``), imported by symbol."""
        from .gemm import ENTRY

        function = self.module.globals.get(ENTRY)
        if function is None:
            function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [
                I64, I64, I64, I64, I64, PTR, I64, PTR, I64, PTR, I64]), ENTRY)
        return function

    def _profile_counters(self, count):
        counters = ir.GlobalVariable(self.module, ir.ArrayType(I64, 2 * count),
                                     profile_symbol(self.name))
        counters.initializer = ir.Constant(ir.ArrayType(I64, 2 * count), None)
        return counters

    def _clock(self, builder):
        """Monotonic nanoseconds (``clock_gettime``, resolved in the process)."""
        function = self.module.globals.get("clock_gettime")
        if function is None:
            function = ir.Function(self.module, ir.FunctionType(I32, [I32, PTR]),
                                   "clock_gettime")
        timespec = builder.alloca(ir.ArrayType(I64, 2))
        builder.call(function, [ir.Constant(I32, 1), timespec])  # CLOCK_MONOTONIC
        seconds = builder.load(builder.gep(timespec, [const(0), const(0)]), typ=I64)
        nanoseconds = builder.load(builder.gep(timespec, [const(0), const(1)]), typ=I64)
        return builder.add(builder.mul(seconds, const(1_000_000_000)), nanoseconds)

    def pool_state(self, fields):
        """The process's thread pool (an imported symbol: object code stays relocatable)."""
        state = self.module.globals.get("tj_pool")
        if state is None:
            state = ir.GlobalVariable(self.module, ir.ArrayType(I64, fields), "tj_pool")
        return state

    def pool_park(self):
        """``tj_pool_park(pool)``: the pool's idle workers stop spinning (before BLAS)."""
        function = self.module.globals.get("tj_pool_park")
        if function is None:
            function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]),
                                   "tj_pool_park")
        return function

    def parallel_for(self):
        function = self.module.globals.get("tj_parallel_for")
        if function is None:
            pool = ir.PointerType(ir.ArrayType(I64, POOL_FIELDS))
            function = ir.Function(self.module, ir.FunctionType(
                ir.VoidType(), [pool, PTR, PTR, I64, I64]), "tj_parallel_for")
        return function

    def kernel_signature(self, kernel):
        """``(key, buffers, starts)``: a key equal for kernels that compute the same thing
        on different buffers and at different constant slice starts (the steps of an
        unrolled loop), the kernel's buffers in a canonical order (its store first, then
        reads in the order its equations use them), and its constant slice starts as
        ``((slice output, axis), start)`` in a canonical order."""
        scheduler = self.schedule.scheduler
        producers = self.schedule.producers
        buffers = self.schedule.buffers
        names = scheduler.inlined(kernel.root) | {kernel.root.name}
        if kernel.anchor is not None:
            names |= {kernel.anchor.out.name, *(
                atom.name for atom in kernel.anchor.inputs
                if isinstance(atom, Var) and atom.name not in buffers)}
        eqns = sorted((producers[name] for name in names),
                      key=lambda eqn: scheduler.order[eqn.out.name])
        order = [kernel.root.name]
        local = {}

        def canonical(atom):
            if isinstance(atom, Literal):
                return ("literal", str(atom), str(atom.aval))
            if atom.name in buffers and atom.name != kernel.root.name and (
                kernel.anchor is None or atom.name != kernel.anchor.out.name
            ):
                if atom.name not in order:
                    order.append(atom.name)
                return ("buffer", order.index(atom.name), str(atom.aval))
            local.setdefault(atom.name, len(local))
            return ("value", local[atom.name], str(atom.aval))

        key, starts = [kernel.kind, str(kernel.root.aval), len(kernel.stages)], []
        for eqn in eqns:
            params = eqn.params
            if eqn.prim is slice_p:  # constant starts become arguments; limits unused
                params = eqn.params_dict
                for axis, start in enumerate(params["starts"]):
                    if type(start) is int:
                        starts.append(((eqn.out.name, axis), start))
                params = (tuple("start" if type(start) is int else start
                                for start in params["starts"]), params["steps"])
            key.append((eqn.prim.name, tuple(canonical(atom) for atom in eqn.inputs),
                        params, canonical(eqn.out)))
        key.append(tuple(canonical(stage) for stage in kernel.stages))
        key.append(canonical(kernel.root))
        return tuple(key), order, starts

    def build(self, raw_entry=False):
        """``(module, entry name)``. The entry takes a tuple of arrays (``program_slots``)
        and the symbols; with ``raw_entry``, ``{name}_raw`` is built too: the same kernels
        over a plain array of data pointers, no layout check (a native loop driver calls
        it, ``codegen/native_loop.py``)."""
        compiled, kernels = {}, []
        for kernel in self.schedule.kernels:
            key, buffers, starts = self.kernel_signature(kernel)
            if key not in compiled:  # the same computation: one function, other arguments
                builder = KernelBuilder(self, kernel, buffers, [slot for slot, _ in starts])
                compiled[key] = builder.build()
                if self._is_small(kernel, buffers):
                    builder.function.attributes.add(SMALL_KERNEL_ATTRIBUTE)
            kernels.append((compiled[key], buffers, [const(start) for _, start in starts]))
        entry_name = f"{self.name}_entry"
        self._entry(entry_name, kernels, raw=False)
        if raw_entry:
            self._entry(f"{self.name}_raw", kernels, raw=True)
        return self.module, entry_name

    def _is_small(self, kernel, buffers):
        """A row kernel (a reduction, or pointwise with stages) whose buffers and values
        all hold at most ``SMALL_KERNEL_ELEMENTS`` elements (at the top of their buckets).
        Flat pointwise loops keep their tuning (``kernel_builder``: vector epilogues,
        width hints)."""
        if kernel.kind != "reduce" and not (kernel.kind == "pointwise" and kernel.stages):
            return False
        producers = self.schedule.producers
        reductions = [producers[stage.name] for stage in kernel.stages]
        if kernel.kind == "reduce":
            reductions.append(producers[kernel.root.name])
        if not all(_order_free(eqn) for eqn in reductions):
            return False
        ranges = self.schedule.graph.ranges
        shapes = [self.schedule.buffers[name].shape for name in buffers]
        names = self.schedule.scheduler.inlined(kernel.root) | {kernel.root.name}
        shapes += [atom.aval.shape for name in names for atom in producers[name].inputs
                   if isinstance(atom, Var)]
        for shape in shapes:
            size = size_of(shape)
            if (size if isinstance(size, int) else size.bounds(ranges)[1]) > (
                    SMALL_KERNEL_ELEMENTS):
                return False
        return True

    def _entry(self, entry_name, kernels, raw):
        function = ir.Function(
            self.module, ir.FunctionType(I32, [PTR] + [I64] * len(self.symbols)), entry_name
        )
        arrays, *symbols = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        dims = DimValues(builder, dict(zip(self.symbols, symbols)))
        pointers = {}
        for slot, (_, name) in enumerate(self.slots):
            if raw:  # arrays: the data pointers themselves
                data = builder.load(builder.gep(arrays, [const(8 * slot)],
                                                source_etype=dt.I8), typ=PTR)
            else:  # arrays: a tuple of NumPy arrays
                item = builder.load(builder.gep(arrays, [const(TUPLE_ITEMS_OFFSET + 8 * slot)],
                                                source_etype=dt.I8), typ=PTR)
                data = builder.load(builder.gep(item, [const(ARRAY_DATA_OFFSET)],
                                                source_etype=dt.I8), typ=PTR)
            pointers[name] = data  # name None: the workspace
        workspace = pointers.pop(None)
        for name, buffer in self.schedule.buffers.items():
            if buffer.kind == "temp":
                pointers[name] = builder.gep(workspace, [dims.dim(buffer.offset)],
                                             source_etype=dt.I8)
        if not raw:
            self._check_layout(function, builder, arrays)
        status = builder.alloca(I32)
        builder.store(ir.Constant(I32, 0), status)
        guard_numbers = {id(guard): number for number, guard in
                         enumerate(self.schedule.graph.guards)}

        def check(guards):
            for guard in guards:
                buffer = self.schedule.buffers[guard.predicate.name]
                value = builder.load(pointers[buffer.name],
                                     typ=dt.memory_type(buffer.dtype))
                if buffer.dtype == np.bool_:
                    value = builder.trunc(value, I1)
                holds = guard_holds(builder, value, buffer.dtype, guard)
                passed = function.append_basic_block("guard.ok")
                failed = function.append_basic_block("guard.failed")
                builder.cbranch(holds, passed, failed)
                builder.position_at_end(failed)
                builder.ret(ir.Constant(I32, guard_numbers[id(guard)] + 1))
                builder.position_at_end(passed)

        checks = guard_checks(self.schedule)
        check(checks[-1])
        counters = None
        if self.profile:
            counters = (self.module.globals.get(profile_symbol(self.name))
                        or self._profile_counters(len(kernels)))
        for number, (kernel_function, buffers, starts) in enumerate(kernels):
            started = self._clock(builder) if counters is not None else None
            builder.call(kernel_function,
                         [pointers[name] for name in buffers] + list(symbols) + starts + [status])
            if counters is not None:
                elapsed = builder.sub(self._clock(builder), started)
                for slot, amount in ((2 * number, const(1)), (2 * number + 1, elapsed)):
                    builder.atomic_rmw("add", builder.gep(counters, [const(0), const(slot)]),
                                       amount, "monotonic")
            check(checks[number])
        builder.ret(builder.neg(builder.load(status, typ=I32)))

    def _check_layout(self, function, builder, arrays):
        """Return ``LAYOUT_EXIT`` unless every input of rank >= 1 is C-contiguous. Kernels
        index inputs as C-ordered; the wrapper passes the caller's arrays as they are, so
        the common case costs one flag test per input here instead of a NumPy call each."""
        contiguous = ir.Constant(I32, C_CONTIGUOUS)
        for slot, var in enumerate(self.schedule.graph.inputs):
            if not var.aval.shape:
                continue  # a 0-d array is always contiguous
            item = builder.load(builder.gep(arrays, [const(TUPLE_ITEMS_OFFSET + 8 * slot)],
                                            source_etype=dt.I8), typ=PTR)
            flags = builder.load(builder.gep(item, [const(ARRAY_FLAGS_OFFSET)],
                                             source_etype=dt.I8), typ=I32)
            contiguous = builder.and_(contiguous, flags)
        ok = builder.icmp_unsigned("!=", builder.and_(contiguous, ir.Constant(I32, C_CONTIGUOUS)),
                                   ir.Constant(I32, 0))
        laid_out = function.append_basic_block("layout.ok")
        relayout = function.append_basic_block("layout.relayout")
        builder.cbranch(ok, laid_out, relayout)
        builder.position_at_end(relayout)
        builder.ret(ir.Constant(I32, LAYOUT_EXIT))
        builder.position_at_end(laid_out)


def _order_free(reduction):
    """Does the reduction's result not depend on the order LLVM combines elements in (a
    max, min, any, all, or a sum or product of integers)? Float sums are reassociable
    (``REASSOCIATE``): optimizing for size vectorizes and unrolls their loops otherwise
    than at O3, which moves the last bits (a sum of three elements NumPy adds in order)."""
    if reduction.prim.name in ("max", "min", "argmax", "argmin", "any", "all"):
        return True
    return np.dtype(reduction.out.aval.dtype).kind in "biu"


def profile_symbol(program_name):
    """The exported ``[calls, nanoseconds] * kernels`` counters of a profiled program."""
    return f"{program_name}_profile"


def program_slots(schedule):
    """The arrays the entry receives, in order: ``(kind, buffer name)``; the workspace is
    last, with name ``None``."""
    graph = schedule.graph
    slots = [("input", var.name) for var in graph.inputs]
    slots += [("constant", var.name) for var, _ in graph.constants]
    seen = set()
    # then values other outputs view (schedule.result_views), in program order
    viewed = [eqn.out for eqn in graph.equations if eqn.out.name in schedule.buffers]
    for atom in (*graph.outputs, *schedule.effect_outputs, *viewed):
        if isinstance(atom, Var) and schedule.buffers.get(atom.name) is not None:
            buffer = schedule.buffers[atom.name]
            if buffer.kind == "output" and atom.name not in seen:
                seen.add(atom.name)
                slots.append(("output", atom.name))
    slots.append(("workspace", None))
    return slots


def guard_checks(schedule):
    """The guards to check after each kernel (``-1``: before any), in body order, as the
    schedule placed them (``Kernel.guards``: after the kernel computing the predicate, or
    after the margin guard just before it)."""
    checks = {-1: list(schedule.entry_guards)}
    checks.update((index, list(kernel.guards)) for index, kernel in enumerate(schedule.kernels))
    return checks


def guard_holds(builder, value, dtype, guard):
    """Is ``convert(value) == expected`` (the assumption the trace made)?"""
    dtype = np.dtype(dtype)
    if guard.convert in ("bool", "margin"):  # a margin guard expects "not ambiguous"
        truth = as_bool(builder, value)
        return builder.icmp_unsigned("==", truth, ir.Constant(I1, int(bool(guard.expected))))
    if dt.is_float(dtype):
        wide = dt.cast(builder, value, dtype, np.float64)
        if guard.convert in ("int", "index"):
            wide = float_intrinsic(builder, "trunc", wide)
        expected = float(guard.expected)
        if expected != expected:
            return builder.fcmp_unordered("uno", wide, wide)
        return builder.fcmp_ordered("==", wide, ir.Constant(dt.F64, expected))
    wide = dt.cast(builder, value, dtype, np.int64)
    if isinstance(guard.expected, float) and not float(guard.expected).is_integer():
        return ir.Constant(I1, 0)
    return builder.icmp_signed("==", wide, const(int(guard.expected)))
