"""``conv2d`` as a direct convolution (the forward, and the input gradient: a transposed
convolution is a ``conv2d`` of the output gradient with flipped weights). A work item is
one output row ``(n, oh)``; its ``F x OW`` outputs are computed in register tiles of
``FB`` filters by ``NB`` vectors along ``ow`` (``conv_tiling.forward_blocking``), each
keeping its accumulators through the whole reduction over ``(c, i, j)``; the epilogue
(bias, activation) is applied to the tile as it is stored (``conv_epilogue``) or, where it
reads values that vary along the row, over the row in place while it is in cache.
``tracejit.codegen.conv`` says more.
"""

from __future__ import annotations

import math

from llvmlite import ir

from . import conv_epilogue
from .conv_ir import I64, PTR, WIDEST_STEP, ConvKernel, const, counted_loop, either, when
from .conv_tiling import forward_blocking, lower, upper


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
        self.fewest_per_group = lower(self.filters, self.ranges) // self.groups
        # No block larger than the fewest filters the bucket allows: that would leave
        # every filter to the one-at-a-time path (F=3 in a bucket (2, 4]).
        self.fb, self.nb = forward_blocking(
            self.lanes, self.registers, per_group or upper(self.filters, self.ranges),
            upper(self.out_width, self.ranges), max(1, self.fewest_per_group))
        # Bias and activation applied to the tiles as they are stored, where they can be
        # (else the row epilogue reads the stored row back).
        self.tile_epilogue = conv_epilogue.plan(kb)

    def build(self):
        kb, root = self.kb, self.kb.kernel.root
        product = self.eqn.out
        if product.name != root.name and self.tile_epilogue is None:
            kb.overrides[product.name] = root.name  # the epilogue reads the product in place
        if product.name == root.name or self.tile_epilogue is not None:
            # Only loops that call tiles: LLVM's loop unswitching and unrolling there cost
            # 0.01-0.02 s of compile each and gain nothing (no row epilogue to vectorize).
            kb.function.attributes.add("optsize")
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
        groups = const(self.groups)
        group_channels = b.sdiv(channels, groups)
        per_group = b.sdiv(filters, groups)
        taps = b.mul(group_channels, const(self.kernel[0] * self.kernel[1]))
        image = b.mul(height, width)
        ih0 = b.sub(b.mul(oh, const(self.strides[0])), const(self.padding[0][0]))
        plane = b.mul(out_width, kb.dim(self.out_height))
        x_pointer = kb.pointers[self.x.name]
        w_pointer = kb.pointers[self.second.name]
        out_pointer = kb.pointers[kb.kernel.root.name]

        def group(builder, g, _):
            first_channel = builder.add(builder.mul(n, channels), builder.mul(g, group_channels))
            x_base = self.at(builder, x_pointer, builder.mul(first_channel, image))
            first_filter = builder.mul(g, per_group)
            blocks = builder.sdiv(per_group, const(self.fb))
            common = (x_base, ih0, group_channels, height, width, taps, plane, out_width)
            # Every full block of filters in one call per tile of the row: the tile's masks
            # and columns are set up once for all of them.
            when(builder, builder.icmp_signed(">", blocks, const(0)), lambda builder, _:
                 self.tile_row(builder, self.fb, first_filter, blocks, n, oh, filters, common,
                               w_pointer, out_pointer))
            self.remaining_filters(builder, per_group, first_filter, blocks, lambda builder, size,
                                   f0: self.tile_row(builder, size, f0, const(1), n, oh,
                                                     filters, common, w_pointer, out_pointer))

        counted_loop(b, const(0), groups, group)
        if kb.kernel.root.name != self.eqn.out.name and self.tile_epilogue is None:
            self.epilogue(n, oh)

    def remaining_filters(self, builder, per_group, first_filter, blocks, tile_row):
        """The filters past the last full block of ``fb``. A group of at least ``fb``
        filters recomputes its last ``fb`` (the overlap stores the same values again, before
        the epilogue reads them): no tile function per remainder size, which would multiply
        compile time. A smaller group (possible only in its bucket) takes one filter at a
        time."""
        fb = self.fb
        remainder = builder.srem(per_group, const(fb))
        last_block = builder.add(first_filter, builder.sub(per_group, const(fb)))
        if self.per_group is not None:  # static
            if self.per_group % fb and self.per_group > fb:
                tile_row(builder, fb, last_block)
            elif self.per_group % fb:
                tile_row(builder, self.per_group, first_filter)
            return
        overlap = builder.and_(builder.icmp_signed("!=", remainder, const(0)),
                               builder.icmp_signed(">", blocks, const(0)))
        when(builder, overlap, lambda builder, _: tile_row(builder, fb, last_block))
        if self.fewest_per_group < fb:
            def one(builder, f, _):
                tile_row(builder, 1, builder.add(first_filter, f))

            when(builder, builder.icmp_signed("==", blocks, const(0)), lambda builder, _:
                 counted_loop(builder, const(0), per_group, one))

    def tile_row(self, builder, fb, f0, blocks, n, oh, filters, common, w_pointer,
                 out_pointer):
        """One row's outputs for ``blocks`` blocks of ``fb`` filters from ``f0``: full tiles
        (interior or border), then the tail tile."""
        x_base, ih0, group_channels, height, width, taps, plane, out_width = common
        w_base = self.at(builder, w_pointer, builder.mul(f0, taps))
        out_row = builder.add(builder.mul(builder.add(builder.mul(n, filters), f0), plane),
                              builder.mul(oh, out_width))
        out_base = self.at(builder, out_pointer, out_row)
        span = self.nb * self.lanes
        (sw, dw), left = (self.strides[1], self.dilation[1]), self.padding[1][0]
        reach = (self.kernel[1] - 1) * dw
        full = builder.sdiv(out_width, const(span))
        leaves = []
        if self.tile_epilogue is not None:  # the bias and such, from this tile's first filter
            for leaf in self.tile_epilogue.leaves:
                pointer = self.kb.pointers[leaf.name]
                leaves.append(self.at(builder, pointer, f0) if leaf.per_filter else pointer)
        arguments = lambda ow0, valid: [x_base, w_base, out_base, ow0, ih0, valid,  # noqa: E731
                                        group_channels, height, width, taps, plane, blocks]

        def call(builder, nb, border, ow0, valid):
            self.call_tile(builder, fb, nb, border, arguments(ow0, valid), leaves)

        def tile(builder, index, _):
            ow0 = builder.mul(index, const(span))
            if not self.interior_possible(span):
                call(builder, self.nb, True, ow0, const(span))
                return
            first = builder.sub(builder.mul(ow0, const(sw)), const(left))
            # the last element loaded: a wide (strided) load reads sw - 1 past its last lane
            past = sw - 1 if 1 < sw <= WIDEST_STEP else 0
            last = builder.add(builder.mul(builder.add(ow0, const(span - 1)), const(sw)),
                               const(reach - left + past))
            interior = builder.and_(builder.icmp_signed(">=", first, const(0)),
                                    builder.icmp_signed("<", last, width))
            plain = builder.function.append_basic_block("tile.interior")
            masked = builder.function.append_basic_block("tile.border")
            done = builder.function.append_basic_block("tile.done")
            builder.cbranch(interior, plain, masked)
            builder.position_at_end(plain)
            call(builder, self.nb, False, ow0, const(span))
            builder.branch(done)
            builder.position_at_end(masked)
            call(builder, self.nb, True, ow0, const(span))
            builder.branch(done)
            builder.position_at_end(done)

        counted_loop(builder, const(0), full, tile)
        rest = builder.sub(out_width, builder.mul(full, const(span)))
        ow0 = builder.mul(full, const(span))
        if isinstance(self.out_width, int):
            if self.out_width % span:  # exactly the vectors the tail needs
                vectors = math.ceil((self.out_width % span) / self.lanes)
                call(builder, vectors, True, ow0, rest)
        else:  # one masked tile for every tail length: one function, not nb
            when(builder, builder.icmp_signed(">", rest, const(0)), lambda builder, _:
                 call(builder, self.nb, True, ow0, rest))

    def interior_possible(self, span):
        """Whether a full tile of ``span`` outputs can read only inside the row for some size
        in the bucket (the plain tile function runs only then): not, for instance, on
        rows 32 wide with 'same' padding, 16 lanes and a 5x5 kernel, where both tiles of a
        row touch the padding. The first tile past the left padding is the likeliest, and
        wider rows only help, so one check at the bucket's widest rows decides."""
        sw, left = self.strides[1], self.padding[1][0]
        reach = (self.kernel[1] - 1) * self.dilation[1]
        past = sw - 1 if 1 < sw <= WIDEST_STEP else 0
        index = max(0, math.ceil(left / (span * sw)))
        last = ((index + 1) * span - 1) * sw + reach - left + past
        return ((index + 1) * span <= upper(self.out_width, self.ranges)
                and last < upper(self.width, self.ranges))

    def call_tile(self, builder, fb, nb, border, arguments, leaves):
        """Call the tile function with ``arguments`` (see ``tile_function``) and, if it has an
        epilogue, whether to apply it and the pointers it reads. A kernel without an epilogue
        borrows another kernel's tile with one (a forward's, from its input gradient when
        they have as many channels as filters) and tells it not to apply it, handing the
        weights as the pointers (every load stays inside them): one tile compiled, not two."""
        function = self.tile_function(fb, nb, border)
        extra = []
        if self.tile_epilogue is not None:
            extra = [const(1), *leaves]
        elif len(function.args) > len(arguments):
            extra = [const(0)] + [arguments[1]] * (len(function.args) - len(arguments) - 1)
        builder.call(function, arguments + extra)

    def tile_function(self, fb, nb, border):
        """``tile(x, w, out, ow0, ih0, valid, C/g, H, W, K, OH*OW, blocks)``: ``blocks``
        times ``fb`` filters by ``nb`` vectors of outputs from ``ow0`` in one row, ``valid``
        of them stored; with a tile epilogue, then ``apply`` (0 or 1) and the pointers it
        reads (``conv_epilogue.TileEpilogue.leaves``)."""
        epilogue = self.tile_epilogue
        name = self.shared_name("tile", fb, nb, "m" if border else "", self.kernel,
                                self.strides[1], self.dilation, self.padding[1][0])
        if epilogue is not None:
            name += f"_e{epilogue.signature}"
        function = self.module.globals.get(name)
        if function is not None:  # another kernel of this program has the same tile
            return function
        if epilogue is None:
            borrowed = [function for other, function in self.module.globals.items()
                        if other.startswith(name + "_e")]
            if borrowed:
                return borrowed[0]
        leaf_count = len(epilogue.leaves) if epilogue else 0
        extra = [I64] + [PTR] * leaf_count if epilogue else []
        function, builder = self.function(name, [PTR, PTR, PTR] + [I64] * 9 + extra,
                                          shared=True)
        for argument in function.args[:3]:
            argument.add_attribute("noalias")
        (x_base, first_weights, first_out, ow0, ih0, valid, channels, height, width, taps,
         plane, blocks) = function.args[:12]
        if epilogue is not None:
            applied = builder.icmp_signed("!=", function.args[12], const(0))
            leaf_pointers = function.args[13:]
        (kh, kw), (dh, dw) = self.kernel, self.dilation
        sw, left = self.strides[1], self.padding[1][0]
        zero = ir.Constant(self.vector, None)
        # Per vector and tap: the input column of lane 0, and (border tiles) which lanes
        # read inside the row and store a valid output.
        columns, masks = {}, {}
        for v in range(nb):
            for j in range(kw):
                columns[v, j] = builder.add(builder.mul(builder.add(ow0, const(v * self.lanes)),
                                                        const(sw)), const(j * dw - left))
                if border:
                    positions = builder.add(self.splat_index(builder, columns[v, j]),
                                            self.lane_offsets(0, sw))
                    lanes = builder.add(self.splat_index(builder, const(v * self.lanes)),
                                        self.lane_offsets())
                    stored = builder.icmp_signed("<", lanes, self.splat_index(builder, valid))
                    masks[v, j] = builder.and_(self.inside(builder, positions, const(0), width),
                                               stored)

        # A border tile stores through masks (lanes below ``valid``), without a branch per
        # vector: a tile is a handful of stores after all its multiply-adds.
        stored = [builder.icmp_signed("<", builder.add(self.splat_index(
            builder, const(v * self.lanes)), self.lane_offsets()),
            self.splat_index(builder, valid)) for v in range(nb)] if border else None

        def block(builder, index, _):
            w_base = self.at(builder, first_weights, builder.mul(index, builder.mul(
                const(fb), taps)))
            out_base = self.at(builder, first_out, builder.mul(index, builder.mul(
                const(fb), plane)))
            def channel(builder, c, accumulators):
                def kernel_row(builder, i, accumulators):
                    ih = builder.add(ih0, builder.mul(i, const(dh)))
                    inside = builder.and_(builder.icmp_signed(">=", ih, const(0)),
                                          builder.icmp_signed("<", ih, height))

                    weights = builder.mul(builder.add(builder.mul(c, const(kh)), i), const(kw))

                    def weight_of(builder, f, j):
                        offset = builder.add(builder.mul(const(f), taps),
                                             builder.add(weights, const(j)))
                        return builder.load(self.at(builder, w_base, offset), typ=self.element)

                    def taps_of_row(builder, accumulators):
                        row = self.at(builder, x_base,
                                      builder.mul(builder.add(builder.mul(c, height), ih), width))
                        for j in range(kw):
                            inputs = [self.load_row(builder, row, columns[v, j], sw,
                                                    masks.get((v, j)), width) for v in range(nb)]
                            for f in range(fb):
                                weight = self.splat(builder, weight_of(builder, f, j))
                                for v in range(nb):
                                    accumulators[f * nb + v] = self.fmuladd(
                                        builder, weight, inputs[v], accumulators[f * nb + v])
                        return accumulators

                    def padding_row(builder, accumulators):
                        # A kernel row in the padding reads zeros: no loads, but an Inf or NaN
                        # weight must still make the output NaN, as w * 0 does with NumPy's zero
                        # padding. Per filter, the row's w * 0 summed as scalars (each +-0, or
                        # NaN) is added to its vectors: fb * kw scalar products, not the
                        # fb * nb * kw vector ones (half the tile's code, which LLVM compiles).
                        for f in range(fb):
                            probe = ir.Constant(self.element, -0.0)  # -0 + p is p exactly
                            for j in range(kw):
                                probe = builder.fadd(probe, builder.fmul(
                                    weight_of(builder, f, j), ir.Constant(self.element, 0.0)))
                            probe = self.splat(builder, probe)
                            for v in range(nb):
                                accumulators[f * nb + v] = builder.fadd(accumulators[f * nb + v],
                                                                        probe)
                        return accumulators

                    return either(builder, inside, taps_of_row, padding_row, accumulators)

                return counted_loop(builder, const(0), const(kh), kernel_row, accumulators)

            accumulators = counted_loop(builder, const(0), channels, channel,
                                        [zero] * (fb * nb))
            for f in range(fb):
                if epilogue is not None:
                    filter_index = builder.add(builder.mul(index, const(fb)), const(f))
                    leaf_values = [builder.load(self.at(builder, pointer, filter_index) if
                                                leaf.per_filter else pointer, typ=self.element)
                                   for leaf, pointer in zip(epilogue.leaves, leaf_pointers)]
                for v in range(nb):
                    offset = builder.add(builder.mul(const(f), plane),
                                         builder.add(ow0, const(v * self.lanes)))
                    pointer = self.at(builder, out_base, offset)
                    value = accumulators[f * nb + v]
                    if epilogue is not None:  # a select, not a branch LLVM would unswitch
                        value = builder.select(applied, epilogue.apply(
                            builder, value, leaf_values, self.lanes), value)
                    if border:
                        self.masked_store(builder, value, pointer, stored[v])
                    else:
                        builder.store(value, pointer, align=self.dtype.itemsize)

        counted_loop(builder, const(0), blocks, block)
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
