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
weight broadcasts, ``FB * NB`` multiply-adds. Kernel rows that fall in the padding load
nothing but still multiply zeros (an Inf or NaN weight must give NaN there, as NumPy's
zero padding and PyTorch do); the tiles at a row's ends use masked loads (lanes outside
the input read zero) and a masked store for the last partial vector. Then the row's
*epilogue* runs while it is in cache: the kernel root's pointwise expression (bias,
activation: ``schedule``'s epilogue fusion, as for matmul) read in place.

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

import math
from functools import lru_cache

import numpy as np
from llvmlite import ir

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.errors import UnsupportedError

from . import dtypes as dt
from . import llvm as host
from .parallel import PARALLEL_THRESHOLD, POOL_FIELDS, THREADS

I1, I32, I64 = dt.I1, dt.I32, dt.I64
PTR = ir.PointerType()
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Strides up to this load consecutive vectors and shuffle; larger ones gather lanes.
WIDEST_STEP = 4
# Bytes of output gradient and input rows a weight-gradient band keeps in cache (L2).
BAND_BYTES = 192 * 1024
OUT_OF_MEMORY = 3  # kernel status: malloc failed (the call runs eagerly)


def _const(value):
    return ir.Constant(I64, value)


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


def _upper(dim, ranges):
    """An int bound on a dim (its bucket's top for a symbolic one)."""
    if isinstance(dim, DimExpr):
        return max(1, dim.bounds(ranges)[1])
    return max(1, int(dim))


def _lower(dim, ranges):
    """The least value a dim takes (its bucket's bottom for a symbolic one)."""
    if isinstance(dim, DimExpr):
        return max(0, dim.bounds(ranges)[0])
    return int(dim)


def forward_blocking(lanes, registers, filters, width, most_per_block=8):
    """``(FB, NB)``: filters and vectors per register tile, for ``filters`` output channels
    (per group) and rows ``width`` wide. A tap costs ``FB * NB`` multiply-adds and
    ``FB + NB`` loads (about one each per cycle where FMA units are two 128-bit halves,
    as on znver1; at least 5 independent accumulators hide the FMA latency); tiles are
    charged whole, so blocks that overshoot the filters or the row cost what they waste.
    ``FB`` is at most ``most_per_block`` (the fewest filters a size bucket allows).

    >>> forward_blocking(8, 16, 16, 224), forward_blocking(8, 16, 3, 224)
    ((2, 4), (3, 2))
    """
    best = None
    for fb in range(1, max(1, min(8, most_per_block)) + 1):
        for nb in range(1, 7):
            if fb * nb + nb + 1 > registers:
                continue
            tiles = math.ceil(filters / fb) * math.ceil(width / (nb * lanes))
            cost = tiles * max(fb * nb, fb + nb, 5)
            key = (cost, -fb * nb)
            if best is None or key < best[0]:
                best = (key, (fb, nb))
    return best[1]


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
                start = builder.add(column, _const(part * self.lanes))
                pointer = self.at(builder, row, start)
                if mask is None:
                    parts.append(builder.load(pointer, typ=self.vector,
                                              align=self.dtype.itemsize))
                    continue
                positions = builder.add(self.splat_index(builder, start), self.lane_offsets())
                parts.append(self.masked_load(builder, pointer, self.inside(
                    builder, positions, _const(0), width)))
            picked = self.every(builder, parts, step)
            if mask is None:
                return picked
            return builder.select(mask, picked, ir.Constant(self.vector, None))
        vector = ir.Constant(self.vector, None)
        for lane in range(self.lanes):
            index = builder.add(column, _const(lane * step))
            if mask is not None:
                on = builder.extract_element(mask, ir.Constant(I32, lane))
                index = builder.select(on, index, _const(0))
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
        gradient often do), which saves its compile time."""
        flat = "_".join(str(value) for value in parameters)
        for character in "(), ":
            flat = flat.replace(character, "")
        return f"tj_conv_{kind}_{self.suffix}_{flat.replace('-', 'n')}"

    def function(self, name, arguments, shared=False):
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), arguments),
                               name if shared else f"{self.kb.kernel.name}_{name}")
        function.linkage = "internal"
        function.attributes.add("noinline")
        return function, ir.IRBuilder(function.append_basic_block("entry"))


def _ignore(_):
    return []


def counted_loop(builder, low, high, body, carried=()):
    """``for index in range(low, high)`` with loop-carried values: ``body(builder, index,
    values) -> new values``. Returns the values after the loop."""
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
    counter.add_incoming(builder.add(counter, _const(1)), builder.block)
    for phi, value in zip(phis, updated):
        phi.add_incoming(value, builder.block)
    builder.branch(header)
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


# --- conv2d: direct convolution, one output row per work item ----------------------------
class ForwardKernel(ConvKernel):
    def __init__(self, kb):
        super().__init__(kb)
        x, w = self.x, self.second
        out = self.eqn.out.aval.shape
        self.batch, self.channels, self.height, self.width = x.aval.shape
        self.filters = w.aval.shape[0]
        self.out_height, self.out_width = out[2], out[3]
        per_group = self.filters // self.groups if isinstance(self.filters, int) else None
        self.per_group = per_group
        self.fewest_per_group = _lower(self.filters, self.ranges) // self.groups
        # No block larger than the fewest filters the bucket allows: that would leave
        # every filter to the one-at-a-time path (F=3 in a bucket (2, 4]).
        self.fb, self.nb = forward_blocking(
            self.lanes, self.registers, per_group or _upper(self.filters, self.ranges),
            _upper(self.out_width, self.ranges), max(1, self.fewest_per_group))

    def build(self):
        kb, root = self.kb, self.kb.kernel.root
        product = self.eqn.out
        if product.name != root.name:
            kb.overrides[product.name] = root.name  # the epilogue reads the product in place
        extent = self.batch * self.out_height
        kb.loop(kb.dim(extent), self.row, inner=False, split=True)
        kb.finish()
        work = self.filters * self.out_width * (self.channels // self.groups) * (
            self.kernel[0] * self.kernel[1])
        return kb._entry_function((extent, work))

    def row(self, item):
        kb, b = self.kb, self.kb.b
        out_height = kb.dim(self.out_height)
        n = b.sdiv(item.value, out_height)
        oh = b.srem(item.value, out_height)
        channels, height, width = (kb.dim(d) for d in (self.channels, self.height,
                                                         self.width))
        filters, out_width = kb.dim(self.filters), kb.dim(self.out_width)
        groups = _const(self.groups)
        group_channels = b.sdiv(channels, groups)
        per_group = b.sdiv(filters, groups)
        taps = b.mul(group_channels, _const(self.kernel[0] * self.kernel[1]))
        image = b.mul(height, width)
        ih0 = b.sub(b.mul(oh, _const(self.strides[0])), _const(self.padding[0][0]))
        plane = b.mul(out_width, kb.dim(self.out_height))
        x_pointer = kb.pointers[self.x.name]
        w_pointer = kb.pointers[self.second.name]
        out_pointer = kb.pointers[kb.kernel.root.name]

        def group(builder, g, _):
            first_channel = builder.add(builder.mul(n, channels), builder.mul(g, group_channels))
            x_base = self.at(builder, x_pointer, builder.mul(first_channel, image))
            first_filter = builder.mul(g, per_group)
            blocks = builder.sdiv(per_group, _const(self.fb))
            common = (x_base, ih0, group_channels, height, width, taps, plane, out_width)

            def block(builder, index, _):
                f0 = builder.add(first_filter, builder.mul(index, _const(self.fb)))
                self.tile_row(builder, self.fb, f0, n, oh, filters, common, w_pointer,
                              out_pointer)

            counted_loop(builder, _const(0), blocks, block)
            self.remaining_filters(builder, per_group, first_filter, blocks, lambda builder, size,
                                   f0: self.tile_row(builder, size, f0, n, oh, filters, common,
                                                     w_pointer, out_pointer))

        counted_loop(b, _const(0), groups, group)
        if kb.kernel.root.name != self.eqn.out.name:
            self.epilogue(n, oh)

    def remaining_filters(self, builder, per_group, first_filter, blocks, tile_row):
        """The filters past the last full block of ``fb``. A group of at least ``fb``
        filters recomputes its last ``fb`` (the overlap stores the same values again, before
        the epilogue reads them): no tile function per remainder size, which would multiply
        compile time. A smaller group (possible only in its bucket) takes one filter at a
        time."""
        fb = self.fb
        remainder = builder.srem(per_group, _const(fb))
        last_block = builder.add(first_filter, builder.sub(per_group, _const(fb)))
        if self.per_group is not None:  # static
            if self.per_group % fb and self.per_group > fb:
                tile_row(builder, fb, last_block)
            elif self.per_group % fb:
                tile_row(builder, self.per_group, first_filter)
            return
        overlap = builder.and_(builder.icmp_signed("!=", remainder, _const(0)),
                               builder.icmp_signed(">", blocks, _const(0)))
        when(builder, overlap, lambda builder, _: tile_row(builder, fb, last_block))
        if self.fewest_per_group < fb:
            def one(builder, f, _):
                tile_row(builder, 1, builder.add(first_filter, f))

            when(builder, builder.icmp_signed("==", blocks, _const(0)), lambda builder, _:
                 counted_loop(builder, _const(0), per_group, one))

    def tile_row(self, builder, fb, f0, n, oh, filters, common, w_pointer, out_pointer):
        """One row's outputs for filters ``f0 .. f0 + fb``: full tiles (interior or border),
        then the tail tile."""
        x_base, ih0, group_channels, height, width, taps, plane, out_width = common
        w_base = self.at(builder, w_pointer, builder.mul(f0, taps))
        out_row = builder.add(builder.mul(builder.add(builder.mul(n, filters), f0), plane),
                              builder.mul(oh, out_width))
        out_base = self.at(builder, out_pointer, out_row)
        span = self.nb * self.lanes
        (sw, dw), left = (self.strides[1], self.dilation[1]), self.padding[1][0]
        reach = (self.kernel[1] - 1) * dw
        full = builder.sdiv(out_width, _const(span))
        arguments = lambda ow0, valid: [x_base, w_base, out_base, ow0, ih0, valid,  # noqa: E731
                                        group_channels, height, width, taps, plane]

        def tile(builder, index, _):
            ow0 = builder.mul(index, _const(span))
            first = builder.sub(builder.mul(ow0, _const(sw)), _const(left))
            # the last element loaded: a wide (strided) load reads sw - 1 past its last lane
            past = sw - 1 if 1 < sw <= WIDEST_STEP else 0
            last = builder.add(builder.mul(builder.add(ow0, _const(span - 1)), _const(sw)),
                               _const(reach - left + past))
            interior = builder.and_(builder.icmp_signed(">=", first, _const(0)),
                                    builder.icmp_signed("<", last, width))
            plain = builder.function.append_basic_block("tile.interior")
            masked = builder.function.append_basic_block("tile.border")
            done = builder.function.append_basic_block("tile.done")
            builder.cbranch(interior, plain, masked)
            builder.position_at_end(plain)
            builder.call(self.tile_function(fb, self.nb, False), arguments(ow0, _const(span)))
            builder.branch(done)
            builder.position_at_end(masked)
            builder.call(self.tile_function(fb, self.nb, True), arguments(ow0, _const(span)))
            builder.branch(done)
            builder.position_at_end(done)

        counted_loop(builder, _const(0), full, tile)
        rest = builder.sub(out_width, builder.mul(full, _const(span)))
        ow0 = builder.mul(full, _const(span))
        if isinstance(self.out_width, int):
            if self.out_width % span:  # exactly the vectors the tail needs
                vectors = math.ceil((self.out_width % span) / self.lanes)
                builder.call(self.tile_function(fb, vectors, True), arguments(ow0, rest))
        else:  # one masked tile for every tail length: one function, not nb
            when(builder, builder.icmp_signed(">", rest, _const(0)), lambda builder, _:
                 builder.call(self.tile_function(fb, self.nb, True), arguments(ow0, rest)))

    def tile_function(self, fb, nb, border):
        """``tile(x, w, out, ow0, ih0, valid, C/g, H, W, K, OH*OW)``: ``fb`` filters times
        ``nb`` vectors of outputs from ``ow0`` in one row, ``valid`` of them stored."""
        name = self.shared_name("tile", fb, nb, "m" if border else "",
                                self.kernel, self.strides[1], self.dilation, self.padding[1][0])
        function = self.module.globals.get(name)
        if function is not None:  # another kernel of this program has the same tile
            return function
        function, builder = self.function(name, [PTR, PTR, PTR] + [I64] * 8, shared=True)
        for argument in function.args[:3]:
            argument.add_attribute("noalias")
        x_base, w_base, out_base, ow0, ih0, valid, channels, height, width, taps, plane = \
            function.args
        (kh, kw), (dh, dw) = self.kernel, self.dilation
        sw, left = self.strides[1], self.padding[1][0]
        zero = ir.Constant(self.vector, None)
        # Per vector and tap: the input column of lane 0, and (border tiles) which lanes
        # read inside the row and store a valid output.
        columns, masks = {}, {}
        for v in range(nb):
            for j in range(kw):
                columns[v, j] = builder.add(builder.mul(builder.add(ow0, _const(v * self.lanes)),
                                                        _const(sw)), _const(j * dw - left))
                if border:
                    positions = builder.add(self.splat_index(builder, columns[v, j]),
                                            self.lane_offsets(0, sw))
                    lanes = builder.add(self.splat_index(builder, _const(v * self.lanes)),
                                        self.lane_offsets())
                    stored = builder.icmp_signed("<", lanes, self.splat_index(builder, valid))
                    masks[v, j] = builder.and_(self.inside(builder, positions, _const(0), width),
                                               stored)

        def channel(builder, c, accumulators):
            def kernel_row(builder, i, accumulators):
                ih = builder.add(ih0, builder.mul(i, _const(dh)))
                inside = builder.and_(builder.icmp_signed(">=", ih, _const(0)),
                                      builder.icmp_signed("<", ih, height))

                def taps_of_row(builder, accumulators, padding=False):
                    row = self.at(builder, x_base,
                                  builder.mul(builder.add(builder.mul(c, height), ih), width))
                    weights = builder.mul(builder.add(builder.mul(c, _const(kh)), i),
                                          _const(kw))
                    for j in range(kw):
                        inputs = [zero if padding else self.load_row(
                            builder, row, columns[v, j], sw, masks.get((v, j)), width)
                            for v in range(nb)]
                        for f in range(fb):
                            offset = builder.add(builder.mul(_const(f), taps),
                                                 builder.add(weights, _const(j)))
                            weight = self.splat(builder, builder.load(
                                self.at(builder, w_base, offset), typ=self.element))
                            for v in range(nb):
                                accumulators[f * nb + v] = self.fmuladd(
                                    builder, weight, inputs[v], accumulators[f * nb + v])
                    return accumulators

                # A kernel row in the padding reads zeros: no loads, but still w * 0, so
                # an Inf or NaN weight makes the output NaN as zero padding does eagerly.
                return either(builder, inside, taps_of_row, lambda builder, accumulators:
                              taps_of_row(builder, accumulators, padding=True), accumulators)

            return counted_loop(builder, _const(0), _const(kh), kernel_row, accumulators)

        accumulators = counted_loop(builder, _const(0), channels, channel, [zero] * (fb * nb))
        for f in range(fb):
            for v in range(nb):
                offset = builder.add(builder.mul(_const(f), plane),
                                     builder.add(ow0, _const(v * self.lanes)))
                pointer = self.at(builder, out_base, offset)
                value = accumulators[f * nb + v]
                if not border:
                    builder.store(value, pointer, align=self.dtype.itemsize)
                    continue
                whole = builder.icmp_signed(">=", valid, _const((v + 1) * self.lanes))
                with builder.if_else(whole) as (then, otherwise):
                    with then:
                        builder.store(value, pointer, align=self.dtype.itemsize)
                    with otherwise:
                        lanes = builder.add(self.splat_index(builder, _const(v * self.lanes)),
                                            self.lane_offsets())
                        self.masked_store(builder, value, pointer, builder.icmp_signed(
                            "<", lanes, self.splat_index(builder, valid)))
        builder.ret_void()
        return function

    def epilogue(self, n, oh):
        """The root's pointwise expression over this row's outputs, in place."""
        from .lowering import Ix

        kb = self.kb
        root = kb.kernel.root
        eqn = kb.producers[root.name]

        def per_filter(f):
            def per_column(ow):
                index = (Ix(n, False), f, Ix(oh, False), ow)
                kb.store(root.name, index, kb.compute(eqn, index), root.aval.dtype)

            kb.loop(kb.dim(self.out_width), per_column, inner=True)

        kb.loop(kb.dim(self.filters), per_filter, inner=False)


# --- conv2d_weight_grad: rows split into one piece per thread, partials summed in order ---
class WeightGradKernel(ConvKernel):
    def __init__(self, kb):
        super().__init__(kb)
        x, g = self.x, self.second
        self.batch, self.channels, self.height, self.width = x.aval.shape
        self.filters, self.out_height, self.out_width = g.aval.shape[1:]
        self.out_shape = self.eqn.out.aval.shape
        kw = self.kernel[1]
        # Tiles of fb filters by jb taps of one kernel row: fb*jb accumulators plus the
        # loads of one output-gradient vector per filter and one input vector per tap.
        most_filters = _upper(self.filters, self.ranges) // self.groups
        best = None
        for fb in range(1, max(1, min(8, most_filters)) + 1):  # no wasted filters of a tile
            for jb in range(1, kw + 1):
                if fb * jb + fb + jb + 1 > self.registers:
                    continue
                key = (math.ceil(kw / jb) * max(fb * jb, fb + jb, 5) / fb, -fb * jb)
                if best is None or key < best[0]:
                    best = (key, (fb, jb))
        self.fb, self.jb = best[1]
        width = _upper(self.out_width, self.ranges)
        per_group = _upper(self.filters, self.ranges) // self.groups or 1
        self.band = max(1, min(64, BAND_BYTES // (per_group * width * self.dtype.itemsize)))

    def build(self):
        kb = self.kb
        kb.finish()  # the generic impl stays empty (and unused): this kernel has its own
        arguments = kb.argument_types
        impl, builder = self.function("piece", [I64, I64, PTR] + arguments)
        self.piece_body(impl, builder)
        trampoline = self.trampoline(impl, len(arguments))
        return self.entry(impl, trampoline)

    # The entry: pieces = threads (or 1 for small work), partials, parallel_for, sum.
    def entry(self, impl, trampoline):
        kb = self.kb
        from .lowering import DimValues

        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), kb.argument_types),
                               kb.kernel.name)
        function.linkage = "internal"
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        arguments = list(function.args)
        dims = DimValues(builder, dict(zip(kb.program.symbols,
                                           arguments[len(kb.buffer_names):])))
        rows = dims.dim(self.batch * self.out_height)
        work = dims.dim(self.batch * self.out_height * self.filters * self.out_width
                        * (self.channels // self.groups))
        pool = kb.program.pool_state(POOL_FIELDS)
        threads = builder.load(builder.gep(pool, [_const(0), _const(THREADS)],
                                           source_etype=ir.ArrayType(I64, POOL_FIELDS)), typ=I64)
        parallel = builder.and_(builder.icmp_signed(">", threads, _const(1)),
                                builder.icmp_signed(">=", builder.mul(work, _const(
                                    self.kernel[0] * self.kernel[1])), _const(PARALLEL_THRESHOLD)))
        pieces = builder.select(parallel, threads, _const(1))
        pieces = builder.select(builder.icmp_signed(">", pieces, rows), rows, pieces)
        pieces = builder.select(builder.icmp_signed("<", pieces, _const(1)), _const(1), pieces)
        size = dims.dim(self.out_shape[0] * self.out_shape[1] * self.kernel[0] * self.kernel[1])
        partials = self.allocate(builder, builder.mul(builder.mul(pieces, size),
                                                      _const(self.dtype.itemsize)))
        pointers = dict(zip(kb.buffer_names, arguments))
        status = arguments[-1]
        failed = builder.icmp_unsigned("==", builder.ptrtoint(partials, I64), _const(0))
        with builder.if_then(failed):
            builder.store(ir.Constant(I32, OUT_OF_MEMORY), status)
            builder.ret_void()
        single = builder.icmp_signed("==", pieces, _const(1))
        with builder.if_else(single) as (then, otherwise):
            with then:
                builder.call(impl, [_const(0), _const(1), partials, *arguments])
            with otherwise:
                context = builder.alloca(I64, size=len(arguments) + 2)
                values = [pieces, builder.ptrtoint(partials, I64)] + [
                    builder.ptrtoint(a, I64) if a.type == PTR else a for a in arguments]
                for index, value in enumerate(values):
                    builder.store(value, builder.gep(context, [_const(index)], source_etype=I64))
                builder.call(kb.program.parallel_for(), [pool, trampoline, context, pieces,
                                                         _const(1)])
        out = pointers[kb.kernel.root.name]

        def add_partials(builder, index, _):
            def add(builder, piece, total):
                value = builder.load(self.at(builder, partials, builder.add(
                    builder.mul(piece, size), index)), typ=self.element)
                return [builder.fadd(total[0], value)]

            total = counted_loop(builder, _const(1), pieces, add, [builder.load(
                self.at(builder, partials, index), typ=self.element)])
            builder.store(total[0], self.at(builder, out, index))

        counted_loop(builder, _const(0), size, add_partials)
        self.release(builder, partials)
        builder.ret_void()
        return function

    def trampoline(self, impl, count):
        """``body(context, start, end)`` for the pool: context = pieces, partials, the
        kernel's arguments."""
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]),
                               self.kb.kernel.name + "_chunk")
        function.linkage = "internal"
        context, start, end = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        load = lambda index: builder.load(builder.gep(context, [_const(index)],  # noqa: E731
                                                      source_etype=I64), typ=I64)
        pieces, partials = load(0), builder.inttoptr(load(1), PTR)
        values = []
        for index, kind in enumerate(self.kb.argument_types):
            value = load(index + 2)
            values.append(builder.inttoptr(value, PTR) if kind == PTR else value)

        def run(builder, piece, _):
            builder.call(impl, [piece, pieces, partials, *values])

        counted_loop(builder, start, end, run)
        builder.ret_void()
        return function

    def piece_body(self, impl, builder):
        from .lowering import DimValues

        kb = self.kb
        piece, pieces, partials, *arguments = impl.args
        pointers = dict(zip(kb.buffer_names, arguments))
        dims = DimValues(builder, dict(zip(kb.program.symbols, arguments[len(kb.buffer_names):])))
        body = impl.append_basic_block("body")
        entry_builder = builder
        builder = ir.IRBuilder(body)
        channels, height, width = (dims.dim(d) for d in (self.channels, self.height, self.width))
        filters, out_height, out_width = (dims.dim(d) for d in (
            self.filters, self.out_height, self.out_width))
        rows = dims.dim(self.batch * self.out_height)
        groups = _const(self.groups)
        group_channels = builder.sdiv(channels, groups)
        per_group = builder.sdiv(filters, groups)
        kh, kw = self.kernel
        taps = builder.mul(group_channels, _const(kh * kw))
        size = builder.mul(filters, taps)
        partial = self.at(builder, partials, builder.mul(piece, size))
        counted_loop(builder, _const(0), size, lambda builder, index, _: builder.store(
            ir.Constant(self.element, 0.0), self.at(builder, partial, index)))
        first = builder.sdiv(builder.mul(piece, rows), pieces)
        last = builder.sdiv(builder.mul(builder.add(piece, _const(1)), rows), pieces)
        bands = builder.sdiv(builder.add(builder.sub(last, first), _const(self.band - 1)),
                             _const(self.band))
        x_pointer, g_pointer = pointers[self.x.name], pointers[self.second.name]
        common = (x_pointer, g_pointer, channels, height, width, filters, out_height,
                  out_width)

        def band(builder, index, _):
            start = builder.add(first, builder.mul(index, _const(self.band)))
            end = builder.add(start, _const(self.band))
            end = builder.select(builder.icmp_signed("<", end, last), end, last)

            def group(builder, g, _):
                blocks = builder.sdiv(per_group, _const(self.fb))
                first_filter = builder.mul(g, per_group)

                def filter_block(builder, count, f0):
                    def channel(builder, c, _):
                        def kernel_row(builder, i, _):
                            for j0 in range(0, kw, self.jb):
                                jb = min(self.jb, kw - j0)
                                channel_index = builder.add(builder.mul(g, group_channels), c)
                                target = builder.add(builder.mul(f0, taps), builder.add(
                                    builder.mul(builder.add(builder.mul(c, _const(kh)), i),
                                                _const(kw)), _const(j0)))
                                builder.call(self.tile_function(self.fb, jb, j0), [
                                    *common, start, end, f0, count, channel_index, i,
                                    self.at(builder, partial, target), taps])

                        counted_loop(builder, _const(0), _const(kh), kernel_row)

                    counted_loop(builder, _const(0), group_channels, channel)

                def full_block(builder, block, _):
                    filter_block(builder, _const(self.fb), builder.add(
                        first_filter, builder.mul(block, _const(self.fb))))

                counted_loop(builder, _const(0), blocks, full_block)
                # The last filters: the same tile, told how many of its filters exist (one
                # tile function, not one per remainder size).
                remainder = builder.srem(per_group, _const(self.fb))
                f0 = builder.add(first_filter, builder.mul(blocks, _const(self.fb)))
                when(builder, builder.icmp_signed(">", remainder, _const(0)),
                     lambda builder, _: filter_block(builder, remainder, f0))

            counted_loop(builder, _const(0), groups, group)

        counted_loop(builder, _const(0), bands, band)
        builder.ret_void()
        entry_builder.branch(body)

    def tile_function(self, fb, jb, j0):
        """``tile(x, g, C, H, W, F, OH, OW, row0, row1, f0, count, c, i, partial, K)``:
        adds ``sum over rows [row0, row1) and ow of g[n, f0+f, oh, ow] * x[n, c, ih, iw(j)]``
        to ``partial[f * K + j - j0]`` for taps ``j0 .. j0 + jb`` and the first ``count`` of
        ``fb`` filters (the others repeat the last filter's work and are not stored)."""
        name = self.shared_name("wtile", fb, jb, j0, self.kernel, self.strides,
                                self.dilation, self.padding[0][0], self.padding[1][0])
        function = self.module.globals.get(name)
        if function is not None:
            return function
        function, builder = self.function(name, [PTR, PTR] + [I64] * 12 +
                                          [PTR, I64], shared=True)
        (x_pointer, g_pointer, channels, height, width, filters, out_height, out_width,
         row0, row1, f0, count, c, i, partial, taps) = function.args
        filter_of = [builder.add(f0, builder.select(
            builder.icmp_signed("<", _const(f), count), _const(f),
            builder.sub(count, _const(1)))) for f in range(fb)]
        for argument in (x_pointer, g_pointer, partial):
            argument.add_attribute("noalias")
        (sh, sw), (dh, dw) = self.strides, self.dilation
        top, left = self.padding[0][0], self.padding[1][0]
        lanes = self.lanes
        zero = ir.Constant(self.vector, None)
        vectors = builder.sdiv(builder.add(out_width, _const(lanes - 1)), _const(lanes))
        # Vectors whose lanes all read inside the row for every tap of the tile, and all
        # store valid outputs: no masks there.
        reach_low = j0 * dw - left
        reach_high = (j0 + jb - 1) * dw - left
        # first vector t with t*lanes*sw + reach_low >= 0
        need = max(0, -reach_low)
        first_plain = _const(math.ceil(need / (lanes * sw)))
        # last: ((t + 1) * lanes - 1) * sw + reach_high + past < W and (t + 1) * lanes <= OW,
        # where a wide (strided) load reads past = sw - 1 elements beyond its last lane
        past = sw - 1 if 1 < sw <= WIDEST_STEP else 0
        room = builder.sub(width, _const(reach_high + 1 + past))  # >= ((t+1)*lanes - 1)*sw
        limit_w = builder.sdiv(builder.add(room, _const(sw)), _const(lanes * sw))
        limit_w = builder.select(builder.icmp_signed("<", room, _const(-sw)), _const(0),
                                 limit_w)
        limit_out = builder.sdiv(out_width, _const(lanes))
        last_plain = builder.select(builder.icmp_signed("<", limit_w, limit_out), limit_w,
                                    limit_out)
        last_plain = builder.select(builder.icmp_signed("<", last_plain, first_plain),
                                    first_plain, last_plain)
        first_plain = builder.select(builder.icmp_signed("<", vectors, first_plain), vectors,
                                     first_plain)
        last_plain = builder.select(builder.icmp_signed("<", vectors, last_plain), vectors,
                                    last_plain)

        # Vectors outside, rows inside: a vector's masks are computed once for all the
        # band's rows, and a row steps (n, oh) on without a division.
        first_n = builder.sdiv(row0, out_height)
        first_oh = builder.srem(row0, out_height)
        row_offset = builder.add(builder.mul(i, _const(dh)), _const(-top))

        def vector(masked):
            def step(builder, t, accumulators):
                ow0 = builder.mul(t, _const(lanes))
                columns, valid, masks = [], None, [None] * jb
                if masked:
                    positions = builder.add(self.splat_index(builder, ow0), self.lane_offsets())
                    valid = builder.icmp_signed("<", positions,
                                                self.splat_index(builder, out_width))
                for jj in range(jb):
                    columns.append(builder.add(builder.mul(ow0, _const(sw)),
                                               _const((j0 + jj) * dw - left)))
                    if masked:
                        positions = builder.add(self.splat_index(builder, columns[jj]),
                                                self.lane_offsets(0, sw))
                        masks[jj] = builder.and_(valid, self.inside(builder, positions,
                                                                    _const(0), width))

                def row(builder, r, carried):
                    n, oh, accumulators = carried[0], carried[1], carried[2:]
                    ih = builder.add(builder.mul(oh, _const(sh)), row_offset)
                    inside = builder.and_(builder.icmp_signed(">=", ih, _const(0)),
                                          builder.icmp_signed("<", ih, height))
                    grads = [self.load_row(builder, self.at(builder, g_pointer, builder.mul(
                        builder.add(builder.mul(builder.add(builder.mul(n, filters),
                                                            filter_of[f]), out_height), oh),
                        out_width)), ow0, 1, valid) for f in range(fb)]

                    def accumulate(builder, accumulators, padding=False):
                        x_row = self.at(builder, x_pointer, builder.mul(builder.add(
                            builder.mul(builder.add(builder.mul(n, channels), c), height),
                            ih), width))
                        for jj in range(jb):
                            # A row in the padding reads zeros: no loads, but still g * 0,
                            # so an Inf or NaN output gradient makes the weight gradient
                            # NaN as zero padding does eagerly.
                            inputs = zero if padding else self.load_row(
                                builder, x_row, columns[jj], sw, masks[jj], width)
                            for f in range(fb):
                                accumulators[f * jb + jj] = self.fmuladd(
                                    builder, grads[f], inputs, accumulators[f * jb + jj])
                        return accumulators

                    accumulators = either(builder, inside, accumulate, lambda builder, values:
                                          accumulate(builder, values, padding=True),
                                          accumulators)
                    following = builder.add(oh, _const(1))
                    wrapped = builder.icmp_signed("==", following, out_height)
                    return [builder.select(wrapped, builder.add(n, _const(1)), n),
                            builder.select(wrapped, _const(0), following), *accumulators]

                return counted_loop(builder, row0, row1, row,
                                    [first_n, first_oh, *accumulators])[2:]
            return step

        accumulators = [zero] * (fb * jb)
        accumulators = counted_loop(builder, _const(0), first_plain, vector(True), accumulators)
        accumulators = counted_loop(builder, first_plain, last_plain, vector(False),
                                    accumulators)
        accumulators = counted_loop(builder, last_plain, vectors, vector(True), accumulators)
        for f in range(fb):
            def store(builder, _, f=f):
                for jj in range(jb):
                    pointer = self.at(builder, partial, builder.add(
                        builder.mul(_const(f), taps), _const(jj)))
                    total = builder.fadd(builder.load(pointer, typ=self.element),
                                         self.horizontal_sum(builder, accumulators[f * jb + jj]))
                    builder.store(total, pointer)

            when(builder, builder.icmp_signed("<", _const(f), count), store)
        builder.ret_void()
        return function


def build(kb):
    """The kernel for a schedule kernel of kind ``conv`` (``KernelBuilder.build`` calls
    this): its entry function."""
    name = kb.kernel.matmul.prim.name
    if name == "conv2d":
        return ForwardKernel(kb).build()
    if name == "conv2d_weight_grad":
        return WeightGradKernel(kb).build()
    raise UnsupportedError(f"no convolution kernel for {name}")
