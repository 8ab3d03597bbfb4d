"""What both convolution kernels (``conv_forward``, ``conv_weight_grad``) build with:
``ConvKernel`` holds a convolution's parameters and types and emits its vector IR (fused
multiply-adds, masked and strided row loads, splats, tile functions shared between the
kernels of one program); ``counted_loop``, ``when`` and ``either`` are loops and branches
that carry values (the register tiles' accumulators) as phis.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tracejit.tracer.errors import UnsupportedError

from . import dtypes as dt
from .conv_tiling import host_vectors, lanes_for

I1, I32, I64 = dt.I1, dt.I32, dt.I64
PTR = ir.PointerType()
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Strides up to this load consecutive vectors and shuffle; larger ones gather lanes.
WIDEST_STEP = 4
OUT_OF_MEMORY = 3  # kernel status: malloc failed (the call runs eagerly)


def const(value):
    return ir.Constant(I64, value)


class ConvKernel:
    """Shared by both kernels: the convolution's parameters, types and IR helpers."""

    def __init__(self, kb):
        self.kb = kb
        self.eqn = kb.kernel.matmul
        x, second = self.eqn.inputs
        params = self.eqn.params_dict
        self.x, self.second = x, second
        dtype = np.dtype(self.eqn.out.aval.dtype)
        if dtype not in FLOATS or x.aval.dtype != dtype or second.aval.dtype != dtype:
            raise UnsupportedError(f"compiled convolutions take float32 or float64 operands "
                                   f"of one dtype, not {x.aval.dtype} and {second.aval.dtype}")
        self.dtype = dtype
        self.kernel = params["kernel"]
        self.strides, self.dilation = params["strides"], params["dilation"]
        self.padding, self.groups = params["padding"], params["groups"]
        self.lanes = lanes_for(dtype)
        self.registers = host_vectors()[1]
        self.element = dt.register_type(dtype)
        self.vector = ir.VectorType(self.element, self.lanes)
        self.module = kb.program.module
        suffix = f"v{self.lanes}f{8 * dtype.itemsize}"
        self.suffix = suffix
        self.mask_type = ir.VectorType(I1, self.lanes)
        self.ranges = kb.schedule.graph.ranges

    # --- intrinsics -------------------------------------------------------------------
    def _intrinsic(self, name, result, arguments):
        function = self.module.globals.get(name)
        if function is None:
            function = ir.Function(self.module, ir.FunctionType(result, arguments), name)
        return function

    def fmuladd(self, builder, a, b, c):
        function = self._intrinsic(f"llvm.fmuladd.{self.suffix}", self.vector,
                                   [self.vector] * 3)
        return builder.call(function, [a, b, c])

    def masked_load(self, builder, pointer, mask):
        function = self._intrinsic(f"llvm.masked.load.{self.suffix}.p0", self.vector,
                                   [PTR, I32, self.mask_type, self.vector])
        return builder.call(function, [pointer, ir.Constant(I32, self.dtype.itemsize), mask,
                                       ir.Constant(self.vector, None)])

    def masked_store(self, builder, value, pointer, mask):
        function = self._intrinsic(f"llvm.masked.store.{self.suffix}.p0", ir.VoidType(),
                                   [self.vector, PTR, I32, self.mask_type])
        builder.call(function, [value, pointer, ir.Constant(I32, self.dtype.itemsize), mask])

    def horizontal_sum(self, builder, vector):
        function = self._intrinsic(f"llvm.vector.reduce.fadd.{self.suffix}", self.element,
                                   [self.element, self.vector])
        return builder.call(function, [ir.Constant(self.element, -0.0), vector],
                            fastmath=("reassoc",))

    def allocate(self, builder, size_bytes):
        malloc = self._intrinsic("malloc", PTR, [I64])
        return builder.call(malloc, [size_bytes])

    def release(self, builder, pointer):
        builder.call(self._intrinsic("free", ir.VoidType(), [PTR]), [pointer])

    def at(self, builder, pointer, offset):
        """``pointer + offset`` elements."""
        return builder.gep(pointer, [offset], inbounds=True, source_etype=self.element)

    def splat(self, builder, scalar):
        vector = builder.insert_element(ir.Constant(self.vector, None), scalar,
                                        ir.Constant(I32, 0))
        return builder.shuffle_vector(vector, ir.Constant(self.vector, None),
                                      ir.Constant(ir.VectorType(I32, self.lanes),
                                                  [0] * self.lanes))

    def lane_offsets(self, start=0, step=1):
        return ir.Constant(ir.VectorType(I64, self.lanes),
                           [start + lane * step for lane in range(self.lanes)])

    def splat_index(self, builder, value):
        vector_type = ir.VectorType(I64, self.lanes)
        vector = builder.insert_element(ir.Constant(vector_type, None), value,
                                        ir.Constant(I32, 0))
        return builder.shuffle_vector(vector, ir.Constant(vector_type, None),
                                      ir.Constant(ir.VectorType(I32, self.lanes),
                                                  [0] * self.lanes))

    def splat_mask(self, builder, flag):
        """An i1 ``flag`` in every lane of a mask."""
        vector = builder.insert_element(ir.Constant(self.mask_type, None), flag,
                                        ir.Constant(I32, 0))
        return builder.shuffle_vector(vector, ir.Constant(self.mask_type, None),
                                      ir.Constant(ir.VectorType(I32, self.lanes),
                                                  [0] * self.lanes))

    def load_row(self, builder, row, column, step, mask=None, width=None):
        """The vector ``row[column + lane * step]``; lanes off in ``mask`` read 0. A unit
        step is one (masked) vector load; steps up to ``WIDEST_STEP`` load ``step``
        consecutive vectors (masked to ``[0, width)``: with a mask, no memory outside the
        row is read) and keep every ``step``-th element (a shuffle: permutes across two
        registers); a larger stride gathers lanes one by one. Unmasked, a wide load reads
        ``step - 1`` elements past the last lane: callers check that they are inside the
        row."""
        if step == 1:
            pointer = self.at(builder, row, column)
            if mask is None:
                return builder.load(pointer, typ=self.vector, align=self.dtype.itemsize)
            return self.masked_load(builder, pointer, mask)
        if step <= WIDEST_STEP:
            parts = []
            for part in range(step):
                start = builder.add(column, const(part * self.lanes))
                pointer = self.at(builder, row, start)
                if mask is None:
                    parts.append(builder.load(pointer, typ=self.vector,
                                              align=self.dtype.itemsize))
                    continue
                positions = builder.add(self.splat_index(builder, start), self.lane_offsets())
                parts.append(self.masked_load(builder, pointer, self.inside(
                    builder, positions, const(0), width)))
            picked = self.every(builder, parts, step)
            if mask is None:
                return picked
            return builder.select(mask, picked, ir.Constant(self.vector, None))
        vector = ir.Constant(self.vector, None)
        for lane in range(self.lanes):
            index = builder.add(column, const(lane * step))
            if mask is not None:
                on = builder.extract_element(mask, ir.Constant(I32, lane))
                index = builder.select(on, index, const(0))
            value = builder.load(self.at(builder, row, index), typ=self.element)
            if mask is not None:
                value = builder.select(on, value, ir.Constant(self.element, 0.0))
            vector = builder.insert_element(vector, value, ir.Constant(I32, lane))
        return vector

    def every(self, builder, parts, step):
        """Elements ``0, step, 2 * step, ...`` of the concatenated vectors ``parts``."""
        lanes = self.lanes
        pairs = [parts[index:index + 2] for index in range(0, len(parts), 2)]
        halves = []
        for pair in pairs:
            if len(pair) == 1:
                pair = pair * 2  # the duplicate fills the unused upper half
            halves.append(builder.shuffle_vector(pair[0], pair[1], ir.Constant(
                ir.VectorType(I32, 2 * lanes), list(range(2 * lanes)))))
        indices = ir.Constant(ir.VectorType(I32, lanes), [lane * step for lane in range(lanes)])
        if len(halves) == 1:  # step 2: pick from the two loads directly
            return builder.shuffle_vector(parts[0], parts[1], indices)
        return builder.shuffle_vector(halves[0], halves[1], indices)

    def inside(self, builder, positions, low, high):
        """Lanes with ``low <= position < high`` (``positions`` a vector of i64)."""
        return builder.and_(
            builder.icmp_signed(">=", positions, self.splat_index(builder, low)),
            builder.icmp_signed("<", positions, self.splat_index(builder, high)))

    def shared_name(self, kind, *parameters):
        """The name of a tile function that depends only on ``parameters`` (and the
        dtype): kernels of one program with the same tile share it (a forward and its input
        gradient often do), which saves its compile time. A tuple's values are joined by
        ``x``: without a separator the 1x13 and 11x3 kernels were both ``113`` and shared a
        tile (a wrong result).

        >>> kernel = ConvKernel.__new__(ConvKernel)
        >>> kernel.suffix = "v16f32"
        >>> kernel.shared_name("tile", 8, 1, "m", (1, 13), 1, ((1, -1), (0, 0)))
        'tj_conv_tile_v16f32_8_1_m_1x13_1_1xn1x0x0'
        """
        def part(value):
            if isinstance(value, (tuple, list)):
                return "x".join(part(inner) for inner in value)
            return str(value).replace("-", "n")

        return f"tj_conv_{kind}_{self.suffix}_{'_'.join(part(value) for value in parameters)}"

    def function(self, name, arguments, shared=False):
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), arguments),
                               name if shared else f"{self.kb.kernel.name}_{name}")
        function.linkage = "internal"
        function.attributes.add("noinline")
        return function, ir.IRBuilder(function.append_basic_block("entry"))


def _ignore(_):
    return []


def kept_scalar(module):
    """Loop metadata (a distinct, self-referencing loop ID) that tells LLVM neither to
    unroll nor to vectorize the loop: the loop vectorizer and unroller cost compile time
    on every loop they look at and win nothing on these (explicit vector tiles, loops of
    calls, per-piece bookkeeping)."""
    hints = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                                  ir.Constant(I1, 0)])]
    loop = ir.values.MDValue(module, hints, name=str(len(module.metadata)))
    loop.operands = (loop, *hints)
    return loop


def counted_loop(builder, low, high, body, carried=()):
    """``for index in range(low, high)`` with loop-carried values: ``body(builder, index,
    values) -> new values``. Returns the values after the loop. LLVM neither unrolls nor
    vectorizes it (``kept_scalar``): a register tile's loops are unrolled and vectorized by
    hand already (LLVM unrolling the kernel rows of a 3x3 tile doubled the code it
    compiles, for no speed), and the kernels' other loops run calls or a few scalars each."""
    function = builder.function
    header = function.append_basic_block("loop")
    inner = function.append_basic_block("loop.body")
    after = function.append_basic_block("loop.end")
    before = builder.block
    builder.branch(header)
    builder.position_at_end(header)
    counter = builder.phi(I64)
    counter.add_incoming(low, before)
    phis = []
    for value in carried:
        phi = builder.phi(value.type)
        phi.add_incoming(value, before)
        phis.append(phi)
    builder.cbranch(builder.icmp_signed("<", counter, high), inner, after)
    builder.position_at_end(inner)
    updated = list(body(builder, counter, list(phis)) if carried else _ignore(
        body(builder, counter, [])))
    counter.add_incoming(builder.add(counter, const(1)), builder.block)
    for phi, value in zip(phis, updated):
        phi.add_incoming(value, builder.block)
    back_edge = builder.branch(header)
    back_edge.set_metadata("llvm.loop", kept_scalar(function.module))
    builder.position_at_end(after)
    return phis


def when(builder, condition, body, carried=()):
    """``if condition: values = body(builder, values)``; returns the merged values."""
    function = builder.function
    then = function.append_basic_block("if.then")
    merge = function.append_basic_block("if.end")
    before = builder.block
    builder.cbranch(condition, then, merge)
    builder.position_at_end(then)
    updated = list(body(builder, list(carried)) if carried else _ignore(body(builder, [])))
    then_end = builder.block
    builder.branch(merge)
    builder.position_at_end(merge)
    merged = []
    for old, new in zip(carried, updated):
        phi = builder.phi(old.type)
        phi.add_incoming(old, before)
        phi.add_incoming(new, then_end)
        merged.append(phi)
    return merged


def either(builder, condition, then_body, else_body, carried):
    """``values = then_body(builder, values) if condition else else_body(builder, values)``;
    returns the merged values."""
    function = builder.function
    then = function.append_basic_block("either.then")
    otherwise = function.append_basic_block("either.else")
    merge = function.append_basic_block("either.end")
    builder.cbranch(condition, then, otherwise)
    ends = []
    for block, body in ((then, then_body), (otherwise, else_body)):
        builder.position_at_end(block)
        values = list(body(builder, list(carried)))
        ends.append((builder.block, values))
        builder.branch(merge)
    builder.position_at_end(merge)
    merged = []
    for position, old in enumerate(carried):
        phi = builder.phi(old.type)
        for block, values in ends:
            phi.add_incoming(values[position], block)
        merged.append(phi)
    return merged

