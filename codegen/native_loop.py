"""A captured loop run natively: one LLVM function runs every trip of a loop body.

``codegen/loops.py`` compiles a loop body as a ``Program`` whose module also holds the
body's *raw entry* (the same kernels over a plain array of data pointers, no layout
check: ``ProgramLowering.build(raw_entry=True)``) and this module's driver::

    int32 tj_<body>_loop(int64 *args)

``args`` (int64s, in ``Layout``'s order, filled by ``NativeLoop.run``)::

    trips, start, step, exit_trip          exit_trip: written on a side exit, or the
                                           trips run when the loop's exit flag ends it
    slots[S]       the raw entry's data pointers: inputs, constants, outputs, workspace
    spare[K]       the second buffer of each carried value
    per write:     dest (the region at the first trip), per_trip, sizes[rank], strides[rank]
    symbols[n]     the body's symbols in order (the index's place is set each trip)

Each trip ``k``: ``t = start + k * step``; ``status = raw(slots, symbols)``; a nonzero
status (a guard of the body failed, a kernel found an index out of range) returns at once
and the caller side-exits (nothing escapes: outputs are its own buffers). Each written
value, C-contiguous in its output slot, is copied to ``dest + k * per_trip`` through the
buffer's strides (``hs[:, t, :] = h``: no NumPy, no view per trip). Then each carried
value's output becomes its input and the other buffer the next output: trip 0 reads the
caller's initial value and writes the output buffer, trip 1 writes the spare, trip 2 the
output buffer again, ... (double buffering; no allocation per trip, the initial value is
never written). BLAS and the thread pool are called by the kernels as in any program. A
while loop's (``exit``: which carried value is its bool ``done``) stops after the trip
that sets ``done``, writing the trips it ran to ``exit_trip``.

>>> Layout(slots=4, carried=((0, 2),), writes=((3, 2, 4),), symbols=3, index=2).text()
'slots=4 carried=((0, 2),) writes=((3, 2, 4),) symbols=3 index=2'
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.ir import Var

from .counted_loop import counted_loop

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
HEADER = 4  # trips, start, step, exit_trip


@dataclass(frozen=True)
class Layout:
    """What a driver is built for: ``slots`` of the raw entry; ``carried`` as (input
    slot, output slot); ``writes`` as (value slot, rank, itemsize); the symbol count and
    the index's place among them."""

    slots: int
    carried: tuple
    writes: tuple
    symbols: int
    index: int
    exit: int | None = None  # the carried value (its number in ``carried``) that ends it

    def text(self):
        text = (f"slots={self.slots} carried={self.carried} writes={self.writes} "
                f"symbols={self.symbols} index={self.index}")
        return text if self.exit is None else f"{text} exit={self.exit}"

    def size(self):
        return (HEADER + self.slots + len(self.carried) +
                sum(2 + 2 * rank for _, rank, _ in self.writes) + self.symbols)


def driver_name(program_symbol):
    return f"{program_symbol}_loop"


def layout_of(plan, num_kept, index, write_ranks, exit=None):
    """The ``Layout`` for a body whose first ``num_kept`` outputs are carried values and
    the rest values written at the index (into regions of ``write_ranks`` axes; a value
    may have another shape with as many elements: it is copied in C order), or ``None``
    (with why) when a driver cannot
    run it: a carried result that is not a buffer of its own (an input passed through, a
    view, a scalar, the same value twice) or shapes that change with the index. ``exit``:
    the number of the kept carried value that ends the loop (a while loop's), or None."""
    from .lowering import program_slots

    graph = plan.graph
    slots = program_slots(plan)
    place = {name: number for number, (kind, name) in enumerate(slots) if kind == "output"}
    outputs = list(graph.outputs)
    carried = []
    for position, atom in enumerate(outputs[:num_kept]):
        if not isinstance(atom, Var) or atom.name not in place:
            return None, f"carried value {position} is not computed into a buffer of its own"
        carried.append((position, place[atom.name]))
    if len({out for _, out in carried}) != len(carried):
        return None, "two carried values are the same array"
    writes = []
    for atom, rank in zip(outputs[num_kept:], write_ranks):
        if not isinstance(atom, Var) or atom.name not in place:
            return None, "a value written at the index is not computed into a buffer"
        writes.append((place[atom.name], rank, atom.aval.dtype.itemsize))
    symbols = [symbol.name for symbol in graph.symbols]
    if index not in symbols:
        return None, "the body does not use its index"
    sizes = [plan.workspace_bytes] + [dim for name in place for dim in plan.buffers[name].shape]
    if any(isinstance(dim, DimExpr) and index in dim.symbols() for dim in sizes):
        return None, "a buffer's size depends on the index"
    return Layout(len(slots), tuple(carried), tuple(writes), len(symbols),
                  symbols.index(index), exit), None


# --- the driver in LLVM ---------------------------------------------------------------------
def add_driver(module, program_symbol, layout):
    """Add ``tj_<body>_loop`` (over ``{program_symbol}_raw``) to ``module``; its name."""
    raw = module.get_global(f"{program_symbol}_raw")
    function = ir.Function(module, ir.FunctionType(I32, [PTR]), driver_name(program_symbol))
    (args,) = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))

    def word(number):
        return builder.gep(args, [ir.Constant(I64, 8 * number)], source_etype=I8)

    def load(number):
        return builder.load(word(number), typ=I64)

    def pointer(value):
        return builder.inttoptr(value, PTR)

    trips, start, step = load(0), load(1), load(2)
    slots = builder.alloca(ir.ArrayType(PTR, layout.slots))

    def slot(number):
        return builder.gep(slots, [ir.Constant(I32, 0), ir.Constant(I32, number)])

    for number in range(layout.slots):
        builder.store(pointer(load(HEADER + number)), slot(number))
    at = HEADER + layout.slots
    spares = [pointer(load(at + number)) for number in range(len(layout.carried))]
    at += len(layout.carried)
    writes = []
    for value_slot, rank, itemsize in layout.writes:
        dest, per_trip = load(at), load(at + 1)
        sizes = [load(at + 2 + axis) for axis in range(rank)]
        strides = [load(at + 2 + rank + axis) for axis in range(rank)]
        writes.append((value_slot, dest, per_trip, sizes, strides, itemsize))
        at += 2 + 2 * rank
    symbols = [load(at + number) for number in range(layout.symbols)]

    def trip(k):
        index = builder.add(start, builder.mul(k, step))
        arguments = list(symbols)
        arguments[layout.index] = index
        status = builder.call(raw, [builder.bitcast(slots, PTR), *arguments])
        failed = function.append_basic_block("trip.exit")
        passed = function.append_basic_block("trip.ok")
        builder.cbranch(builder.icmp_signed("!=", status, ir.Constant(I32, 0)), failed, passed)
        builder.position_at_end(failed)
        builder.store(k, word(3))
        builder.ret(status)
        builder.position_at_end(passed)
        for value_slot, dest, per_trip, sizes, strides, itemsize in writes:
            source = builder.load(slot(value_slot), typ=PTR)
            target = builder.gep(pointer(dest), [builder.mul(k, per_trip)], source_etype=I8)
            _copy(builder, source, target, sizes, strides, itemsize)
        first = builder.icmp_signed("==", k, ir.Constant(I64, 0))
        for (in_slot, out_slot), spare in zip(layout.carried, spares):
            produced = builder.load(slot(out_slot), typ=PTR)
            old = builder.load(slot(in_slot), typ=PTR)
            builder.store(builder.select(first, spare, old), slot(out_slot))
            builder.store(produced, slot(in_slot))
        if layout.exit is not None:  # a while loop: its done flag, as the trip left it
            flag = builder.load(builder.load(slot(layout.carried[layout.exit][0]), typ=PTR),
                                typ=I8)
            done = function.append_basic_block("trip.done")
            going = function.append_basic_block("trip.next")
            builder.cbranch(builder.icmp_unsigned("!=", flag, ir.Constant(I8, 0)), done, going)
            builder.position_at_end(done)
            builder.store(builder.add(k, ir.Constant(I64, 1)), word(3))
            builder.ret(ir.Constant(I32, 0))
            builder.position_at_end(going)

    counted_loop(builder, ir.Constant(I64, 0), trips, trip, label="trips")
    builder.ret(ir.Constant(I32, 0))
    return function.name


def _copy(builder, source, target, sizes, strides, itemsize):
    """Copy the C-contiguous ``source`` (shape ``sizes``) to ``target`` laid out with
    byte ``strides``; elements moved as integers of ``itemsize`` bytes."""
    element = ir.IntType(8 * itemsize)
    if not sizes:
        builder.store(builder.load(source, typ=element), target)
        return
    inner = [ir.Constant(I64, itemsize)]  # bytes between source rows of each axis
    for size in reversed(sizes[1:]):
        inner.insert(0, builder.mul(inner[0], size))

    def axis_loop(axis, source_at, target_at):
        def body(i):
            src = builder.gep(source_at, [builder.mul(i, inner[axis])], source_etype=I8)
            dst = builder.gep(target_at, [builder.mul(i, strides[axis])], source_etype=I8)
            if axis == len(sizes) - 1:
                builder.store(builder.load(src, typ=element), dst)
            else:
                axis_loop(axis + 1, src, dst)

        counted_loop(builder, ir.Constant(I64, 0), sizes[axis], body, label=f"copy{axis}")

    axis_loop(0, source, target)


# --- running it -----------------------------------------------------------------------------
class NativeLoop:
    """The driver of a linked body program, and how to lay out its ``args``."""

    def __init__(self, program, plan, layout):
        from .lowering import program_slots

        self.layout = layout
        self.address = program._library.addresses[driver_name(_program_symbol(program))]
        self.call = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(self.address)
        self.slots = program_slots(plan)
        self.buffers = plan.buffers
        self.workspace = plan.workspace_bytes
        self.symbols = [symbol.name for symbol in plan.graph.symbols]
        self.constants = [constant.data for _, constant in plan.graph.constants]
        self.inputs = len(plan.graph.inputs)

    def run(self, inputs, bindings, trips, regions):
        """Run every trip. ``inputs``: C-contiguous arrays of the body's input dtypes
        (carried values first); ``regions``: per write ``(buffer, first offset, per_trip,
        sizes)`` in bytes and elements. Returns ``(status, exit trip, carried results)``;
        a nonzero status means the caller side-exits."""
        layout = self.layout
        args = np.empty(layout.size(), np.int64)
        args[0], args[1], args[2], args[3] = len(trips), trips.start, trips.step, -1
        keep = []  # arrays whose pointers are in args: alive until the call returns
        at = HEADER
        outputs = {}
        for kind, name in self.slots:
            if kind == "input":
                array = inputs[at - HEADER]
            elif kind == "constant":
                array = self.constants[at - HEADER - self.inputs]
            elif kind == "output":
                buffer = self.buffers[name]
                array = outputs[name] = np.empty(_shape(buffer.shape, bindings), buffer.dtype)
            else:
                size = max(_dim(self.workspace, bindings), 64)
                array = np.empty(size, np.uint8)
            keep.append(array)
            args[at] = array.ctypes.data
            at += 1
        spares = []
        for _in_slot, out_slot in layout.carried:
            spare = np.empty_like(keep[out_slot])
            spares.append(spare)
            args[at] = spare.ctypes.data
            at += 1
        for (buffer, offset, per_trip, sizes), (_, rank, _) in zip(regions, layout.writes):
            args[at], args[at + 1] = buffer.ctypes.data + offset, per_trip
            args[at + 2:at + 2 + rank] = sizes
            args[at + 2 + rank:at + 2 + 2 * rank] = buffer.strides
            at += 2 + 2 * rank
        args[at:] = [0 if number == layout.index else bindings[name]  # the driver sets t
                     for number, name in enumerate(self.symbols)]
        status = self.call(args.ctypes.data)
        ran = len(trips)
        if layout.exit is not None and not status and args[3] >= 0:
            ran = int(args[3])  # the trip that set the exit flag ended it
        results = []
        for (in_slot, out_slot), spare in zip(layout.carried, spares):
            if not ran:
                results.append(keep[in_slot])
            else:  # trip 0 wrote the output buffer, trip 1 the spare, ...
                results.append(keep[out_slot] if ran % 2 else spare)
        return status, int(args[3]), results


def _program_symbol(program):
    from .program import _symbol_safe

    return _symbol_safe(program.graph.name)


def _dim(dim, bindings):
    return dim.evaluate(bindings) if isinstance(dim, DimExpr) else int(dim)


def _shape(shape, bindings):
    return tuple(_dim(dim, bindings) for dim in shape)
