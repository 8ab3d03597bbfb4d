"""``conv2d_weight_grad`` (``dW[f, c, i, j] = sum over (n, oh, ow) of g[n, f, oh, ow] *
x[n, c, ih, iw]``) as a correlation kernel: the rows ``(n, oh)`` split into one piece per
thread, each summing its rows into a partial ``dW`` in bands that stay in cache, the
partials added in piece order (deterministic for a given thread count).
``tracejit.codegen.conv`` says more.
"""

from __future__ import annotations

import math

from llvmlite import ir

from .conv_ir import (
    I32,
    I64,
    OUT_OF_MEMORY,
    PTR,
    WIDEST_STEP,
    ConvKernel,
    const,
    counted_loop,
    either,
    when,
)
from .conv_tiling import band_rows, upper, weight_grad_blocking
from .parallel import PARALLEL_THRESHOLD, POOL_FIELDS, THREADS


class WeightGradKernel(ConvKernel):
    def __init__(self, kb):
        super().__init__(kb)
        x, g = self.x, self.second
        self.batch, self.channels, self.height, self.width = x.aval.shape
        self.filters, self.out_height, self.out_width = g.aval.shape[1:]
        self.out_shape = self.eqn.out.aval.shape
        # Tiles of fb filters by jb taps of one kernel row (no more filters than the bucket's
        # most); bands of rows whose output gradient stays in cache.
        most_filters = upper(self.filters, self.ranges) // self.groups
        self.fb, self.jb = weight_grad_blocking(self.registers, self.kernel[1], most_filters)
        self.band = band_rows(most_filters, upper(self.out_width, self.ranges),
                              self.dtype.itemsize)
    def build(self):
        kb = self.kb
        kb.finish()  # the generic impl stays empty (and unused): this kernel has its own
        arguments = kb.argument_types
        impl, builder = self.function("piece", [I64, I64, PTR] + arguments)
        # Loops of tile calls and a zero fill: compiled for size, LLVM does not unswitch and
        # unroll their nest (0.02 s of compile, no speed).
        impl.attributes.add("optsize")
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
        function.attributes.add("optsize")  # the partials' sum: filters x taps adds
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        arguments = list(function.args)
        dims = DimValues(builder, dict(zip(kb.program.symbols,
                                           arguments[len(kb.buffer_names):])))
        rows = dims.dim(self.batch * self.out_height)
        work = dims.dim(self.batch * self.out_height * self.filters * self.out_width
                        * (self.channels // self.groups))
        pool = kb.program.pool_state(POOL_FIELDS)
        threads = builder.load(builder.gep(pool, [const(0), const(THREADS)],
                                           source_etype=ir.ArrayType(I64, POOL_FIELDS)), typ=I64)
        parallel = builder.and_(builder.icmp_signed(">", threads, const(1)),
                                builder.icmp_signed(">=", builder.mul(work, const(
                                    self.kernel[0] * self.kernel[1])), const(PARALLEL_THRESHOLD)))
        pieces = builder.select(parallel, threads, const(1))
        pieces = builder.select(builder.icmp_signed(">", pieces, rows), rows, pieces)
        pieces = builder.select(builder.icmp_signed("<", pieces, const(1)), const(1), pieces)
        size = dims.dim(self.out_shape[0] * self.out_shape[1] * self.kernel[0] * self.kernel[1])
        partials = self.allocate(builder, builder.mul(builder.mul(pieces, size),
                                                      const(self.dtype.itemsize)))
        pointers = dict(zip(kb.buffer_names, arguments))
        status = arguments[-1]
        failed = builder.icmp_unsigned("==", builder.ptrtoint(partials, I64), const(0))
        with builder.if_then(failed):
            builder.store(ir.Constant(I32, OUT_OF_MEMORY), status)
            builder.ret_void()
        single = builder.icmp_signed("==", pieces, const(1))
        with builder.if_else(single) as (then, otherwise):
            with then:
                builder.call(impl, [const(0), const(1), partials, *arguments])
            with otherwise:
                context = builder.alloca(I64, size=len(arguments) + 2)
                values = [pieces, builder.ptrtoint(partials, I64)] + [
                    builder.ptrtoint(a, I64) if a.type == PTR else a for a in arguments]
                for index, value in enumerate(values):
                    builder.store(value, builder.gep(context, [const(index)], source_etype=I64))
                builder.call(kb.program.parallel_for(), [pool, trampoline, context, pieces,
                                                         const(1)])
        out = pointers[kb.kernel.root.name]

        def add_partials(builder, index, _):
            def add(builder, piece, total):
                value = builder.load(self.at(builder, partials, builder.add(
                    builder.mul(piece, size), index)), typ=self.element)
                return [builder.fadd(total[0], value)]

            total = counted_loop(builder, const(1), pieces, add, [builder.load(
                self.at(builder, partials, index), typ=self.element)])
            builder.store(total[0], self.at(builder, out, index))

        counted_loop(builder, const(0), size, add_partials)
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
        load = lambda index: builder.load(builder.gep(context, [const(index)],  # noqa: E731
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
        groups = const(self.groups)
        group_channels = builder.sdiv(channels, groups)
        per_group = builder.sdiv(filters, groups)
        kh, kw = self.kernel
        taps = builder.mul(group_channels, const(kh * kw))
        size = builder.mul(filters, taps)
        partial = self.at(builder, partials, builder.mul(piece, size))
        counted_loop(builder, const(0), size, lambda builder, index, _: builder.store(
            ir.Constant(self.element, 0.0), self.at(builder, partial, index)))
        first = builder.sdiv(builder.mul(piece, rows), pieces)
        last = builder.sdiv(builder.mul(builder.add(piece, const(1)), rows), pieces)
        bands = builder.sdiv(builder.add(builder.sub(last, first), const(self.band - 1)),
                             const(self.band))
        x_pointer, g_pointer = pointers[self.x.name], pointers[self.second.name]
        common = (x_pointer, g_pointer, channels, height, width, filters, out_height,
                  out_width)

        def band(builder, index, _):
            start = builder.add(first, builder.mul(index, const(self.band)))
            end = builder.add(start, const(self.band))
            end = builder.select(builder.icmp_signed("<", end, last), end, last)

            def group(builder, g, _):
                blocks = builder.sdiv(per_group, const(self.fb))
                first_filter = builder.mul(g, per_group)

                def filter_block(builder, count, f0):
                    def channel(builder, c, _):
                        def kernel_row(builder, i, _):
                            for j0 in range(0, kw, self.jb):
                                jb = min(self.jb, kw - j0)
                                channel_index = builder.add(builder.mul(g, group_channels), c)
                                target = builder.add(builder.mul(f0, taps), builder.add(
                                    builder.mul(builder.add(builder.mul(c, const(kh)), i),
                                                const(kw)), const(j0)))
                                builder.call(self.tile_function(self.fb, jb, j0), [
                                    *common, start, end, f0, count, channel_index, i,
                                    self.at(builder, partial, target), taps])

                        counted_loop(builder, const(0), const(kh), kernel_row)

                    counted_loop(builder, const(0), group_channels, channel)

                def full_block(builder, block, _):
                    filter_block(builder, const(self.fb), builder.add(
                        first_filter, builder.mul(block, const(self.fb))))

                counted_loop(builder, const(0), blocks, full_block)
                # The last filters: the same tile, told how many of its filters exist (one
                # tile function, not one per remainder size).
                remainder = builder.srem(per_group, const(self.fb))
                f0 = builder.add(first_filter, builder.mul(blocks, const(self.fb)))
                when(builder, builder.icmp_signed(">", remainder, const(0)),
                     lambda builder, _: filter_block(builder, remainder, f0))

            counted_loop(builder, const(0), groups, group)

        counted_loop(builder, const(0), bands, band)
        builder.ret_void()
        entry_builder.branch(body)

    def plain_possible(self, jb, j0):
        """Whether a vector position of the tile for taps ``j0 .. j0 + jb`` reads only inside
        the row for some size of the bucket (the tile's unmasked body runs only then): the
        bounds ``tile_function`` computes at run time, at the bucket's widest rows (wider
        rows only add such positions). Not, for instance, for rows 32 wide with 'same' 5x5
        padding and 16 lanes: both positions of a row read padding."""
        sw, dw, left, lanes = self.strides[1], self.dilation[1], self.padding[1][0], self.lanes
        first = math.ceil(max(0, left - j0 * dw) / (lanes * sw))
        past = sw - 1 if 1 < sw <= WIDEST_STEP else 0
        room = upper(self.width, self.ranges) - ((j0 + jb - 1) * dw - left + 1 + past)
        last_for_width = 0 if room < -sw else (room + sw) // (lanes * sw)
        return min(last_for_width, upper(self.out_width, self.ranges) // lanes) > first

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
            builder.icmp_signed("<", const(f), count), const(f),
            builder.sub(count, const(1)))) for f in range(fb)]
        for argument in (x_pointer, g_pointer, partial):
            argument.add_attribute("noalias")
        (sh, sw), (dh, dw) = self.strides, self.dilation
        top, left = self.padding[0][0], self.padding[1][0]
        lanes = self.lanes
        zero = ir.Constant(self.vector, None)
        vectors = builder.sdiv(builder.add(out_width, const(lanes - 1)), const(lanes))
        # Vectors whose lanes all read inside the row for every tap of the tile, and all
        # store valid outputs: no masks there.
        reach_low = j0 * dw - left
        reach_high = (j0 + jb - 1) * dw - left
        # first vector t with t*lanes*sw + reach_low >= 0
        need = max(0, -reach_low)
        first_plain = const(math.ceil(need / (lanes * sw)))
        # last: ((t + 1) * lanes - 1) * sw + reach_high + past < W and (t + 1) * lanes <= OW,
        # where a wide (strided) load reads past = sw - 1 elements beyond its last lane
        past = sw - 1 if 1 < sw <= WIDEST_STEP else 0
        room = builder.sub(width, const(reach_high + 1 + past))  # >= ((t+1)*lanes - 1)*sw
        limit_w = builder.sdiv(builder.add(room, const(sw)), const(lanes * sw))
        limit_w = builder.select(builder.icmp_signed("<", room, const(-sw)), const(0),
                                 limit_w)
        limit_out = builder.sdiv(out_width, const(lanes))
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
        row_offset = builder.add(builder.mul(i, const(dh)), const(-top))

        def vector(masked):
            def step(builder, t, accumulators):
                ow0 = builder.mul(t, const(lanes))
                columns, valid, masks = [], None, [None] * jb
                if masked:
                    positions = builder.add(self.splat_index(builder, ow0), self.lane_offsets())
                    valid = builder.icmp_signed("<", positions,
                                                self.splat_index(builder, out_width))
                for jj in range(jb):
                    columns.append(builder.add(builder.mul(ow0, const(sw)),
                                               const((j0 + jj) * dw - left)))
                    if masked:
                        positions = builder.add(self.splat_index(builder, columns[jj]),
                                                self.lane_offsets(0, sw))
                        masks[jj] = builder.and_(valid, self.inside(builder, positions,
                                                                    const(0), width))

                def row(builder, r, carried):
                    n, oh, accumulators = carried[0], carried[1], carried[2:]
                    ih = builder.add(builder.mul(oh, const(sh)), row_offset)
                    inside = builder.and_(builder.icmp_signed(">=", ih, const(0)),
                                          builder.icmp_signed("<", ih, height))
                    grads = [self.load_row(builder, self.at(builder, g_pointer, builder.mul(
                        builder.add(builder.mul(builder.add(builder.mul(n, filters),
                                                            filter_of[f]), out_height), oh),
                        out_width)), ow0, 1, valid) for f in range(fb)]

                    # A row in the padding reads zeros but still multiplies them (g * 0),
                    # so an Inf or NaN output gradient makes the weight gradient NaN as zero
                    # padding does eagerly. Its loads read row 0 instead and are zeroed (a
                    # select, or the load's mask): one body, not a second copy of the
                    # multiply-adds behind a branch (half the code LLVM compiles).
                    clamped = builder.select(inside, ih, const(0))
                    x_row = self.at(builder, x_pointer, builder.mul(builder.add(
                        builder.mul(builder.add(builder.mul(n, channels), c), height),
                        clamped), width))
                    row_on = self.splat_mask(builder, inside)
                    for jj in range(jb):
                        if masked:
                            inputs = self.load_row(builder, x_row, columns[jj], sw,
                                                   builder.and_(masks[jj], row_on), width)
                        else:
                            inputs = builder.select(row_on, self.load_row(
                                builder, x_row, columns[jj], sw, None, width), zero)
                        for f in range(fb):
                            accumulators[f * jb + jj] = self.fmuladd(
                                builder, grads[f], inputs, accumulators[f * jb + jj])
                    following = builder.add(oh, const(1))
                    wrapped = builder.icmp_signed("==", following, out_height)
                    return [builder.select(wrapped, builder.add(n, const(1)), n),
                            builder.select(wrapped, const(0), following), *accumulators]

                return counted_loop(builder, row0, row1, row,
                                    [first_n, first_oh, *accumulators])[2:]
            return step

        def position(builder, t, accumulators):
            # One loop over the vector positions, the masked body (both ends) and the plain
            # one (between) each emitted once: LLVM compiles each body once.
            if not self.plain_possible(jb, j0):
                return vector(True)(builder, t, accumulators)
            plain = builder.and_(builder.icmp_signed(">=", t, first_plain),
                                 builder.icmp_signed("<", t, last_plain))
            return either(builder, plain,
                          lambda builder, values: vector(False)(builder, t, values),
                          lambda builder, values: vector(True)(builder, t, values), accumulators)

        accumulators = counted_loop(builder, const(0), vectors, position, [zero] * (fb * jb))
        for f in range(fb):
            def store(builder, _, f=f):
                for jj in range(jb):
                    pointer = self.at(builder, partial, builder.add(
                        builder.mul(const(f), taps), const(jj)))
                    total = builder.fadd(builder.load(pointer, typ=self.element),
                                         self.horizontal_sum(builder, accumulators[f * jb + jj]))
                    builder.store(total, pointer)

            when(builder, builder.icmp_signed("<", const(f), count), store)
        builder.ret_void()
        return function
