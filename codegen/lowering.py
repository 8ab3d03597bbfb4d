"""Lowering: a schedule's kernels to LLVM IR functions, and the program that runs them.

Each kernel is a loop nest over the shape it stores. The value of the root at an index is
computed by inlining its producers: pointwise rules from ``tracejit.codegen.pointwise``, views as
index arithmetic (transpose permutes the index, slice scales and shifts it, broadcasting
zeroes it, pad and concatenate select), reductions fused as stages read their row's
accumulator. Symbolic dims are kernel arguments; static dims are constants, so LLVM folds
them. Inner loops are unit-stride over contiguous buffers and branch-free, so LLVM
vectorizes them.

The program function ``i32 program(ptr arrays, i64 s0, ...)`` takes a tuple of NumPy
arrays (inputs, constants, outputs, workspace) and reads each array's data pointer from
its ``PyArrayObject`` fields; it calls the kernels in order and checks each value guard
right after the kernel that computed its predicate. It returns 0, ``g + 1`` when guard
``g`` failed (a side exit: nothing after it ran), or ``-code`` for a kernel error.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from llvmlite import ir

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.ir import Literal, Var

from . import dtypes as dt
from .parallel import POOL_FIELDS, THREADS
from .pointwise import RULES, KernelStatus, loop_dtypes
from .schedule import REDUCTIONS

I1, I32, I64 = dt.I1, dt.I32, dt.I64
PTR = ir.PointerType()
Ix = namedtuple("Ix", "value inner")  # one index component; inner: varies in the row loop

# CPython and NumPy object layouts the program reads (checked at import by
# tracejit.codegen.program).
TUPLE_ITEMS_OFFSET = 24
ARRAY_DATA_OFFSET = 16
ARRAY_FLAGS_OFFSET = 64  # an int; bit NPY_ARRAY_C_CONTIGUOUS is 1
C_CONTIGUOUS = 1

# What the program returns, before running anything, when an input is not C-contiguous:
# the wrapper then lays the inputs out (broadcast views compacted, others copied) and
# calls again. Far from guard numbers (positive) and kernel errors (small negative).
LAYOUT_EXIT = -(1 << 30)

_REASSOC = ("reassoc", "contract")

# Row scratch: values that several passes over a row need are kept in a per-row buffer
# (on the stack, so at most this many elements) when recomputing them would cost at least
# ROW_SCRATCH_COST (a transcendental counts 10, a division 4, other pointwise ops 1).
ROW_SCRATCH_LIMIT = 1 << 15
ROW_SCRATCH_COST = 8
OP_COSTS = {"exp": 10, "expm1": 10, "log": 10, "log1p": 10, "tanh": 10, "sin": 10,
            "cos": 10, "power": 10, "true_divide": 4, "floor_divide": 4, "mod": 4, "sqrt": 4}


class FusionConflict(Exception):
    """A value cannot be inlined where the kernel needs it; materialize it and reschedule."""

    def __init__(self, var):
        super().__init__(var.name)
        self.var = var


class FlatIndex:
    """A single linear index into same-shaped contiguous buffers (collapsed loop nest)."""

    __slots__ = ("value", "inner")

    def __init__(self, value):
        self.value, self.inner = value, True


def _const(value):
    return ir.Constant(I64, value)


ZERO = Ix(_const(0), False)


class _RuleContext:
    """What a pointwise rule sees: the builder, the loop dtype, error reporting."""

    def __init__(self, kernel, dtype):
        self.kernel, self.builder, self.dtype = kernel, kernel.b, np.dtype(dtype)

    def report_if(self, condition, code):
        self.kernel.report_if(condition, code)

    def as_bool(self, value):
        return as_bool(self.builder, value)


def as_bool(builder, value):
    """Python's truth of a number: nonzero (NaN is true)."""
    if value.type == I1:
        return value
    if isinstance(value.type, (ir.FloatType, ir.DoubleType)):
        return builder.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
    return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))


class DimValues:
    """Dims as i64 values, computed once in a function's entry block from its symbols."""

    def __init__(self, builder, symbols):
        self.builder, self.symbols, self.cache = builder, symbols, {}

    def dim(self, dim):
        if isinstance(dim, (int, np.integer)):
            return _const(int(dim))
        if dim not in self.cache:
            self.cache[dim] = self._evaluate(dim)
        return self.cache[dim]

    def _evaluate(self, expr):
        builder = self.builder
        total = _const(0)
        for monomial, coeff in expr.terms:
            product = _const(coeff)
            for factor in monomial:
                value = self.symbols[factor] if isinstance(factor, str) else self._opaque(factor)
                product = builder.mul(product, value)
            total = builder.add(total, product)
        return total

    def _opaque(self, factor):
        builder = self.builder
        numerator, denominator = self.dim(factor.numerator), self.dim(factor.denominator)
        quotient = builder.sdiv(numerator, denominator)
        remainder = builder.srem(numerator, denominator)
        adjust = builder.and_(
            builder.icmp_signed("!=", remainder, _const(0)),
            builder.icmp_signed("!=", builder.icmp_signed("<", remainder, _const(0)),
                                builder.icmp_signed("<", denominator, _const(0))),
        )
        if factor.op == "//":
            return builder.sub(quotient, builder.zext(adjust, I64))
        return builder.select(adjust, builder.add(remainder, denominator), remainder)


class KernelBuilder:
    """Emits one kernel as ``void kernel(ptr buffer..., i64 symbol..., i64 start..., ptr
    status)``: ``start`` arguments are the constant slice starts, passed at run time so the
    steps of an unrolled loop (``x[:, t]`` for each ``t``) share one kernel."""

    def __init__(self, program, kernel, buffer_names, start_slots=()):
        self.program = program
        self.schedule = program.schedule
        self.kernel = kernel
        self.producers = self.schedule.producers
        self.buffer_names = names = list(buffer_names)  # only the buffers this kernel touches
        self.argument_types = [PTR] * len(names) + [I64] * (
            len(program.symbols) + len(start_slots)) + [PTR]
        self.function = ir.Function(
            program.module, ir.FunctionType(ir.VoidType(), [I64, I64] + self.argument_types),
            kernel.name + "_impl")
        self.function.linkage = "internal"
        # Called from the entry and from the pool's trampoline: inlining would make LLVM
        # optimize and emit the loop nest twice, for no gain at kernel granularity.
        self.function.attributes.add("noinline")
        self.start, self.end, *arguments = self.function.args
        for argument in arguments[: len(names)]:
            argument.add_attribute("noalias")
        self.pointers = dict(zip(names, arguments))
        self.symbols = dict(zip(program.symbols, arguments[len(names):]))
        self.starts = dict(zip(start_slots, arguments[len(names) + len(program.symbols):-1]))
        self.status = arguments[-1]
        entry = self.function.append_basic_block("entry")
        body = self.function.append_basic_block("body")
        self.entry = ir.IRBuilder(entry)
        self.b = ir.IRBuilder(body)
        self.first_body = body
        self.dim_values = DimValues(self.entry, self.symbols)
        self.strides = {}
        self.cache = [{}]
        self.stage_values = {}
        self.errors = {}
        self.overrides = {}
        self.scratch = {}
        self.scratch_filled = set()
        self.row_index = None
        self.prologue = None  # code the entry runs before the (parallel) body: BLAS calls

    # --- dims -------------------------------------------------------------------------
    def dim(self, dim):
        return self.dim_values.dim(dim)

    def buffer_strides(self, name):
        if name not in self.strides:
            shape = self.schedule.buffers[name].shape
            strides, running = [], _const(1)
            for dim in reversed(shape):
                strides.append(running)
                running = self.entry.mul(running, self.dim(dim))
            self.strides[name] = list(reversed(strides))
        return self.strides[name]

    # --- memory -----------------------------------------------------------------------
    def address(self, name, index, dtype):
        if isinstance(index, FlatIndex):
            offset = index.value
        else:
            offset = _const(0)
            for component, stride in zip(index, self.buffer_strides(name)):
                offset = self.b.add(offset, self.b.mul(component.value, stride))
        return self.b.gep(self.pointers[name], [offset], inbounds=True,
                          source_etype=dt.memory_type(dtype))

    def load(self, name, index, dtype):
        pointer = self.address(name, index, dtype)
        value = self.b.load(pointer, typ=dt.memory_type(dtype))
        return self.b.trunc(value, I1) if np.dtype(dtype) == np.bool_ else value

    def store(self, name, index, value, dtype):
        pointer = self.address(name, index, dtype)
        if np.dtype(dtype) == np.bool_:
            value = self.b.zext(value, dt.I8)
        self.b.store(value, pointer)

    def report_if(self, condition, code):
        if code not in self.errors:
            self.errors[code] = self.entry.alloca(I1)
            self.entry.store(ir.Constant(I1, 0), self.errors[code])
        flag = self.errors[code]
        self.b.store(self.b.or_(self.b.load(flag, typ=I1), condition), flag)

    # --- loops ------------------------------------------------------------------------
    def loop(self, count, body, inner, split=False):
        """``for i in range(count)``; a ``split`` loop runs ``range(start, end)``: the share
        of the iterations the thread pool gave this call (never past ``count``: an entry
        that runs the whole kernel inline passes ``end = 1`` when it planned no split, and
        the split loop may then be empty)."""
        if split:
            count = self.b.select(self.b.icmp_signed("<", self.end, count), self.end, count)
        header = self.function.append_basic_block("loop")
        loop_body = self.function.append_basic_block("loop.body")
        after = self.function.append_basic_block("loop.end")
        before = self.b.block
        self.b.branch(header)
        self.b.position_at_end(header)
        counter = self.b.phi(I64)
        counter.add_incoming(self.start if split else _const(0), before)
        self.b.cbranch(self.b.icmp_signed("<", counter, count), loop_body, after)
        self.b.position_at_end(loop_body)
        self.cache.append({})
        body(Ix(counter, inner))
        self.cache.pop()
        following = self.b.add(counter, _const(1), flags=["nsw", "nuw"])
        counter.add_incoming(following, self.b.block)
        self.b.branch(header)
        self.b.position_at_end(after)

    def loops(self, shape, body, inner_from=None, prefix=(), split_level=None):
        """Nested loops over ``shape``; components at positions >= ``inner_from`` are inner;
        the loop at depth ``split_level`` covers only this call's share (see ``loop``)."""
        inner_from = len(shape) - 1 if inner_from is None else inner_from
        if len(prefix) == len(shape):
            body(tuple(prefix))
            return
        depth = len(prefix)
        self.loop(self.dim(shape[depth]),
                  lambda ix: self.loops(shape, body, inner_from, (*prefix, ix), split_level),
                  inner=depth >= inner_from, split=depth == split_level)

    # --- values -----------------------------------------------------------------------
    def literal(self, literal, dtype):
        value = literal.value
        if isinstance(value, DimExpr):
            return dt.cast(self.b, self.dim(value), np.int64, dtype)
        if isinstance(value, np.generic):
            value = value.item()
        with np.errstate(all="ignore"):
            converted = np.array(value).astype(dtype)[()]
        return dt.constant(dtype, converted)

    def value(self, atom, index, dtype=None):
        """The value of ``atom`` at ``index``, cast to ``dtype`` if given."""
        if isinstance(atom, Literal):
            return self.literal(atom, dtype or atom.aval.dtype)
        result = self._var_value(atom, index)
        if dtype is not None:
            result = dt.cast(self.b, result, atom.aval.dtype, dtype)
        return result

    def _key(self, name, index):
        if isinstance(index, FlatIndex):
            return (name, "flat", id(index.value))
        return (name, tuple(id(ix.value) for ix in index))

    def _var_value(self, var, index):
        name = var.name
        if name in self.stage_values:
            if _is_inner(index):
                raise FusionConflict(var)
            return self.stage_values[name]
        if name in self.overrides:
            return self.load(self.overrides[name], index, var.aval.dtype)
        if name in self.schedule.buffers and name != self.kernel.root.name:
            return self.load(name, index, var.aval.dtype)
        key = self._key(name, index)
        for layer in reversed(self.cache):
            if key in layer:
                return layer[key]
        eqn = self.producers.get(name)
        if eqn is None or eqn.prim.name in REDUCTIONS or eqn.prim.name in (
            "matmul", "scatter_add"
        ) or eqn.prim.kind == "conv":
            raise FusionConflict(var)
        result = self._scratch_value(var, index, lambda: self.compute(eqn, index))
        self.cache[-1][key] = result
        return result

    def compute(self, eqn, index):
        name = eqn.prim.name
        out_shape = eqn.out.aval.shape
        if name in RULES:
            operand_dtypes, _ = loop_dtypes(eqn.prim, [atom.aval for atom in eqn.inputs])
            operands = [
                self.value(atom, broadcast_index(index, atom.aval.shape, out_shape), dtype)
                for atom, dtype in zip(eqn.inputs, operand_dtypes)
            ]
            dtype = operand_dtypes[-1] if name == "where" else operand_dtypes[0]
            return RULES[name](_RuleContext(self, dtype), *operands)
        return getattr(self, "compute_" + name)(eqn, index)

    def compute_cast(self, eqn, index):
        source = eqn.inputs[0]
        value = self.value(source, broadcast_index(index, source.aval.shape, eqn.out.aval.shape))
        target = eqn.params_dict["dtype"]
        if dt.is_float(source.aval.dtype) and np.dtype(target).kind in "iu":
            # NumPy on x86: out-of-range and NaN become the most negative integer.
            limit = float(2 ** (np.dtype(target).itemsize * 8 - 1))
            ty = value.type
            in_range = self.b.and_(
                self.b.fcmp_ordered(">=", value, ir.Constant(ty, -limit)),
                self.b.fcmp_ordered("<", value, ir.Constant(ty, limit)),
            )
            converted = dt.cast(self.b, value, source.aval.dtype, target)
            smallest = dt.constant(target, -int(limit))
            return self.b.select(in_range, converted, smallest)
        return dt.cast(self.b, value, source.aval.dtype, target)

    def compute_broadcast_to(self, eqn, index):
        source = eqn.inputs[0]
        return self.value(source, broadcast_index(index, source.aval.shape, eqn.out.aval.shape))

    def compute_reshape(self, eqn, index):
        source = eqn.inputs[0]
        if _is_flat(index):
            return self.value(source, index)
        source_shape, out_shape = source.aval.shape, eqn.out.aval.shape
        positions = [d for d, dim in enumerate(out_shape) if not _unit(dim)]
        source_positions = [d for d, dim in enumerate(source_shape) if not _unit(dim)]
        if [out_shape[d] for d in positions] == [source_shape[d] for d in source_positions]:
            mapped = [ZERO] * len(source_shape)
            for out_position, source_position in zip(positions, source_positions):
                mapped[source_position] = index[out_position]
            return self.value(source, tuple(mapped))
        base = self._reshape_base(source)
        if base is None:
            raise FusionConflict(source)
        linear = _const(0)
        for component, stride in zip(index, self._shape_strides(out_shape)):
            linear = self.b.add(linear, self.b.mul(component.value, stride))
        flat = FlatIndex(linear)
        flat.inner = _is_inner(index)
        return self.load(base.name, flat, base.aval.dtype)

    def _reshape_base(self, var):
        """The buffer a chain of reshapes reads (reshapes keep the linear order)."""
        while var.name not in self.schedule.buffers or var.name == self.kernel.root.name:
            eqn = self.producers.get(var.name)
            if eqn is None or eqn.prim.name != "reshape":
                return None
            var = eqn.inputs[0]
        return var

    def _shape_strides(self, shape):
        strides, running = [], _const(1)
        for dim in reversed(shape):
            strides.append(running)
            running = self.entry.mul(running, self.dim(dim))
        return list(reversed(strides))

    def compute_transpose(self, eqn, index):
        perm = eqn.params_dict["perm"]
        mapped = [None] * len(perm)
        for position, axis in enumerate(perm):
            mapped[axis] = index[position]
        return self.value(eqn.inputs[0], tuple(mapped))

    def compute_slice(self, eqn, index):
        params = eqn.params_dict
        mapped = []
        for axis, (component, start, step) in enumerate(
                zip(index, params["starts"], params["steps"])):
            value = component.value
            if not (isinstance(step, int) and step == 1):
                value = self.b.mul(value, self.dim(step))
            if (eqn.out.name, axis) in self.starts:
                value = self.b.add(value, self.starts[eqn.out.name, axis])
            elif not (isinstance(start, int) and start == 0):
                value = self.b.add(value, self.dim(start))
            mapped.append(Ix(value, component.inner))
        return self.value(eqn.inputs[0], tuple(mapped))

    def compute_sliding_window(self, eqn, index):
        """Window ``w`` of count ``o`` along an axis reads ``o * stride + w`` (the window
        axes are the last ones of the output)."""
        params = eqn.params_dict
        rank = len(eqn.inputs[0].aval.shape)
        mapped = list(index[:rank])
        for position, (axis, stride) in enumerate(zip(params["axes"], params["strides"])):
            count, offset = index[axis], index[rank + position]
            value = count.value if stride == 1 else self.b.mul(count.value, _const(stride))
            mapped[axis] = Ix(self.b.add(value, offset.value), count.inner or offset.inner)
        return self.value(eqn.inputs[0], tuple(mapped))

    def compute_flip(self, eqn, index):
        axes = eqn.params_dict["axes"]
        shape = eqn.inputs[0].aval.shape
        mapped = list(index)
        for axis in axes:
            last = self.entry.sub(self.dim(shape[axis]), _const(1))
            mapped[axis] = Ix(self.b.sub(last, index[axis].value), index[axis].inner)
        return self.value(eqn.inputs[0], tuple(mapped))

    def compute_pad(self, eqn, index):
        source = eqn.inputs[0]
        valid, mapped = ir.Constant(I1, 1), []
        for component, dim, (low, _, interior) in zip(index, source.aval.shape,
                                                       eqn.params_dict["config"]):
            relative = self.b.sub(component.value, self.dim(low))
            position = relative
            ok = self.b.icmp_signed(">=", relative, _const(0))
            if interior:
                stride = _const(interior + 1)
                position = self.b.sdiv(relative, stride)
                ok = self.b.and_(ok, self.b.icmp_signed(
                    "==", self.b.srem(relative, stride), _const(0)))
            count = self.dim(dim)
            ok = self.b.and_(ok, self.b.icmp_signed("<", position, count))
            valid = self.b.and_(valid, ok)
            mapped.append(Ix(self._clamp(position, count), component.inner))
        value = self.value(source, tuple(mapped))
        return self.b.select(valid, value, dt.constant(source.aval.dtype, 0))

    def _clamp(self, position, count):
        last = self.b.sub(count, _const(1))
        position = self.b.select(self.b.icmp_signed(">", position, last), last, position)
        return self.b.select(self.b.icmp_signed("<", position, _const(0)), _const(0), position)

    def compute_concatenate(self, eqn, index):
        axis = eqn.params_dict["axis"]
        dtype = eqn.out.aval.dtype
        component = index[axis]
        offset, result = _const(0), None
        for operand in eqn.inputs:
            count = self.dim(operand.aval.shape[axis])
            local = self.b.sub(component.value, offset)
            mapped = list(index)
            mapped[axis] = Ix(self._clamp(local, count), component.inner)
            value = self.value(operand, tuple(mapped), dtype)
            inside = self.b.icmp_signed(">=", local, _const(0))
            result = value if result is None else self.b.select(inside, value, result)
            offset = self.entry.add(offset, count)
        return result

    def compute_gather(self, eqn, index):
        source, indices = eqn.inputs
        axis = eqn.params_dict["axis"]
        depth = len(indices.aval.shape)
        position = self.value(indices, tuple(index[axis:axis + depth]), np.int64)
        count = self.dim(source.aval.shape[axis])
        position = self.b.select(self.b.icmp_signed("<", position, _const(0)),
                                 self.b.add(position, count), position)
        out_of_range = self.b.or_(self.b.icmp_signed("<", position, _const(0)),
                                  self.b.icmp_signed(">=", position, count))
        self.report_if(out_of_range, KernelStatus.INDEX_OUT_OF_RANGE)
        inner = any(component.inner for component in index[axis:axis + depth])
        mapped = (*index[:axis], Ix(self._clamp(position, count), inner),
                  *index[axis + depth:])
        return self.value(source, mapped)

    def compute_iota(self, eqn, index):
        return dt.cast(self.b, index[0].value, np.int64, eqn.out.aval.dtype)

    def compute_full(self, eqn, index):
        return self.literal(Literal.of(eqn.params_dict["value"]), eqn.out.aval.dtype)

    # --- kernel bodies ----------------------------------------------------------------
    def build(self):
        """The kernel: ``impl(start, end, ...)`` over its outer loop, a trampoline for the
        thread pool, and the entry the program calls, which splits big work across
        threads and runs small work inline. Convolutions have kernels of their own
        (``tracejit.codegen.conv``)."""
        if self.kernel.kind == "conv":
            from . import conv

            return conv.build(self)
        plan = self.parallel_plan()
        getattr(self, "build_" + self.kernel.kind)()
        self.finish()
        return self._entry_function(plan)

    def finish(self):
        """Close ``impl``: report the error flags in the status, return."""
        for code, flag in self.errors.items():
            failed = self.b.load(flag, typ=I1)
            old = self.b.load(self.status, typ=I32)
            self.b.store(self.b.select(failed, ir.Constant(I32, code), old), self.status)
        self.b.ret_void()
        self.entry.branch(self.first_body)

    def parallel_plan(self):
        """``(extent, work per iteration)`` of the loop split across threads, or None."""
        kernel, root = self.kernel, self.kernel.root
        eqn = self._root_eqn()
        if kernel.kind == "scatter":
            return None
        if kernel.kind == "matmul" and self.blas_operands() is not None:
            if kernel.matmul.out.name == root.name or not root.aval.shape:
                return None  # all work is in the BLAS call (threaded by BLAS itself)
            return root.aval.shape[0], _size(root.aval.shape[1:])
        if kernel.kind == "matmul":
            product = kernel.matmul.out
            a, b = kernel.matmul.inputs
            batch_rank = len(product.aval.shape) - (len(a.aval.shape) > 1) - (
                len(b.aval.shape) > 1)
            k_dim = a.aval.shape[-1]
            if batch_rank > 0:
                extent = product.aval.shape[0]
            elif len(a.aval.shape) > 1:
                extent = a.aval.shape[-2]
            else:
                return None
            return extent, _size(product.aval.shape[1:]) * k_dim
        if kernel.kind == "reduce":
            shape = eqn.inputs[0].aval.shape
            axes = _stage_axes(eqn)
            kept = [dim for axis, dim in enumerate(shape) if axis not in axes]
            if not kept or _unit(kept[0]) or kept[0] == 0:
                return None
            return kept[0], _size(shape) // kept[0]
        shape = root.aval.shape
        if not shape:
            return None
        if not kernel.stages and self._flat_ok(root):
            return _size(shape), 1
        if kernel.stages:
            axes = _stage_axes(self.producers[kernel.stages[0].name])
            if len(axes) >= len(shape):
                return None
        return shape[0], _size(shape[1:]) * (len(kernel.stages) + 1)

    def _entry_function(self, plan):
        from .parallel import PARALLEL_THRESHOLD, THREADS

        module = self.program.module
        entry = ir.Function(module, ir.FunctionType(ir.VoidType(), self.argument_types),
                            self.kernel.name)
        entry.linkage = "internal"
        builder = ir.IRBuilder(entry.append_basic_block("entry"))
        arguments = list(entry.args)
        dims = DimValues(builder, dict(zip(self.program.symbols,
                                           arguments[len(self.buffer_names):])))
        # The split's dims first, in the entry block: ``dims`` caches each value where it
        # is first computed, and a batched BLAS prologue computes inside its loop body, which
        # does not dominate the code after the loop (LLVM: "Instruction does not dominate
        # all uses!" on symbolic-shape variants).
        extent, work = (dims.dim(plan[0]), dims.dim(plan[1])) if plan is not None else (None,
                                                                                        None)
        if self.prologue is not None:
            self.prologue(entry, builder, dims, dict(zip(self.buffer_names, arguments)))
        if plan is None:
            builder.call(self.function, [_const(0), _const(1), *arguments])
            builder.ret_void()
            return entry
        pool = self.program.pool_state(POOL_FIELDS)
        threads = builder.load(builder.gep(pool, [_const(0), _const(THREADS)],
                                           source_etype=ir.ArrayType(I64, POOL_FIELDS)), typ=I64)
        parallel = builder.and_(
            builder.and_(builder.icmp_signed(">", threads, _const(1)),
                         builder.icmp_signed(">", extent, _const(1))),
            builder.icmp_signed(">=", builder.mul(extent, work), _const(PARALLEL_THRESHOLD)))
        split = entry.append_basic_block("parallel")
        inline = entry.append_basic_block("inline")
        builder.cbranch(parallel, split, inline)
        builder.position_at_end(inline)
        builder.call(self.function, [_const(0), extent, *arguments])
        builder.ret_void()
        builder.position_at_end(split)
        context = builder.alloca(I64, size=len(arguments))
        for index, argument in enumerate(arguments):
            slot = builder.gep(context, [_const(index)])
            value = builder.ptrtoint(argument, I64) if argument.type == PTR else argument
            builder.store(value, slot)
        pieces = builder.mul(threads, _const(4))
        chunk = builder.sdiv(builder.add(extent, builder.sub(pieces, _const(1))), pieces)
        builder.call(self.program.parallel_for(), [pool, self._trampoline(len(arguments)),
                                                   context, extent, chunk])
        builder.ret_void()
        return entry

    def _trampoline(self, count):
        """``body(context, start, end)`` for the pool: unpack the arguments, run impl."""
        function = ir.Function(self.program.module,
                               ir.FunctionType(ir.VoidType(), [PTR, I64, I64]),
                               self.kernel.name + "_chunk")
        function.linkage = "internal"
        context, start, end = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        values = []
        for index, kind in enumerate(self.argument_types):
            slot = builder.gep(context, [_const(index)], source_etype=I64)
            value = builder.load(slot, typ=I64)
            values.append(builder.inttoptr(value, PTR) if kind == PTR else value)
        builder.call(self.function, [start, end, *values])
        builder.ret_void()
        return function

    def _root_eqn(self):
        return self.producers[self.kernel.root.name]

    def build_pointwise(self):
        root = self.kernel.root
        eqn = self._root_eqn()
        shape = root.aval.shape
        if self.kernel.stages:
            self.rows(shape, lambda index: self.store(root.name, index, self.compute(eqn, index),
                                                      root.aval.dtype))
        elif self._flat_ok(root):
            self.loop(self.dim(_size(shape)) if shape else _const(1),
                      lambda ix: self.store(root.name, FlatIndex(ix.value),
                                            self.compute(eqn, FlatIndex(ix.value)),
                                            root.aval.dtype), inner=True, split=bool(shape))
        else:
            self.loops(shape, lambda index: self.store(root.name, index,
                                                       self.compute(eqn, index), root.aval.dtype),
                       split_level=0 if shape else None)

    def _flat_ok(self, root):
        """A single flat loop when the expression is elementwise on same-shaped buffers."""
        shape = tuple(root.aval.shape)
        stack, seen = [root], set()
        while stack:
            var = stack.pop()
            if var.name in seen:
                continue
            seen.add(var.name)
            if var.name in self.schedule.buffers and var.name != root.name:
                if tuple(var.aval.shape) not in (shape, ()):
                    return False
                continue
            eqn = self.producers[var.name]
            if eqn.prim.name not in RULES and eqn.prim.name != "cast":
                return False
            for atom in eqn.inputs:
                if isinstance(atom, Var):
                    if tuple(atom.aval.shape) not in (shape, ()):
                        return False
                    stack.append(atom)
        return True

    def rows(self, shape, store_row):
        """Outer loops over the kept dims; per row, each stage's reduction in order, then
        ``store_row`` over the row."""
        axes = _stage_axes(self.producers[self.kernel.stages[0].name])
        inner_from = len(shape) - len(axes)
        stages = [self.producers[stage.name] for stage in self.kernel.stages]
        self.plan_row_scratch(shape, inner_from, stages, self._root_eqn())

        def per_row(outer):
            self.scratch_filled = set()
            for stage in stages:
                self.stage_values[stage.out.name] = self.reduce_row(stage, shape, inner_from,
                                                                    outer)
            self.loops(shape, self._in_row(store_row), inner_from, outer)

        self.loops(shape[:inner_from], per_row, inner_from=len(shape),
                   split_level=0 if inner_from > 0 else None)

    def reduce_row(self, eqn, shape, inner_from, outer):
        reducer = Reducer(self, eqn)
        reducer.start()
        self.loops(shape, self._in_row(reducer.add), inner_from, outer)
        return reducer.result()

    def _in_row(self, body):
        def run(index):
            self.row_index = index
            body(index)

        return run

    # --- row scratch: a value several row passes need is computed once per row ----------
    def plan_row_scratch(self, shape, inner_from, stages, final):
        """Values of the row's shape that two or more passes over the row need and that are
        expensive to recompute get a scratch buffer the size of one row (it stays in L1):
        the first pass computes and stores them, later passes load them."""
        inner_shape = shape[inner_from:]
        inner_size = _size(inner_shape)
        high = inner_size if isinstance(inner_size, int) else inner_size.bounds(
            self.schedule.graph.ranges)[1]
        if inner_from == len(shape) or high > ROW_SCRATCH_LIMIT:
            return
        stage_names = {stage.out.name for stage in stages}
        passes = [self._inlined_from(stage.inputs[0], stage_names) for stage in stages]
        passes.append(self._inlined_from_eqn(final, stage_names))
        uses = {}
        for names in passes:
            for name in names:
                uses[name] = uses.get(name, 0) + 1
        chosen = set()
        for name in sorted(uses, key=self.schedule.scheduler.order.__getitem__):
            var = self.producers[name].out
            if uses[name] < 2 or tuple(var.aval.shape) != tuple(shape):
                continue
            if self._cost(name, stage_names | chosen) >= ROW_SCRATCH_COST:
                chosen.add(name)
        for name in sorted(chosen):
            dtype = self.producers[name].out.aval.dtype
            self.scratch[name] = self.entry.alloca(dt.memory_type(dtype),
                                                   size=self.dim(inner_size))
        self.scratch_strides = self._shape_strides(inner_shape)
        self.scratch_inner_from = inner_from

    def _inlined_from(self, atom, stops):
        if not isinstance(atom, Var):
            return set()
        if atom.name in self.schedule.buffers or atom.name in stops:
            return set()
        return {atom.name} | self._inlined_from_eqn(self.producers[atom.name], stops)

    def _inlined_from_eqn(self, eqn, stops):
        names = set()
        for atom in eqn.inputs:
            names |= self._inlined_from(atom, stops)
        return names

    def _cost(self, name, stops):
        eqn = self.producers[name]
        cost = OP_COSTS.get(eqn.prim.name, 1 if eqn.prim.kind == "pointwise" else 0)
        for atom in eqn.inputs:
            if isinstance(atom, Var) and atom.name not in self.schedule.buffers and (
                atom.name not in stops
            ):
                cost += self._cost(atom.name, stops)
        return cost

    def _scratch_value(self, var, index, compute):
        """A scratched value at the row loop's own index: load it if an earlier pass
        stored it, else compute and store it."""
        if var.name not in self.scratch or self.row_index is None or _is_flat(index) or (
            tuple(id(ix.value) for ix in index) != tuple(id(ix.value) for ix in self.row_index)
        ):
            return compute()
        offset = _const(0)
        for component, stride in zip(index[self.scratch_inner_from:], self.scratch_strides):
            offset = self.b.add(offset, self.b.mul(component.value, stride))
        dtype = var.aval.dtype
        pointer = self.b.gep(self.scratch[var.name], [offset], source_etype=dt.memory_type(dtype))
        if var.name in self.scratch_filled:
            value = self.b.load(pointer, typ=dt.memory_type(dtype))
            return self.b.trunc(value, I1) if np.dtype(dtype) == np.bool_ else value
        value = compute()
        stored = self.b.zext(value, dt.I8) if np.dtype(dtype) == np.bool_ else value
        self.b.store(stored, pointer)
        self.scratch_filled.add(var.name)
        return value

    def build_reduce(self):
        eqn = self._root_eqn()
        root = self.kernel.root
        source_shape = eqn.inputs[0].aval.shape
        axes = _stage_axes(eqn)
        rank = len(source_shape)
        keepdims = eqn.params_dict["keepdims"]

        def out_index(full_index):
            kept = []
            for axis in range(rank):
                if axis in axes:
                    if keepdims:
                        kept.append(ZERO)
                else:
                    kept.append(full_index[axis])
            return tuple(kept)

        trailing = axes == tuple(range(rank - len(axes), rank))
        if trailing or self.kernel.stages:
            inner_from = rank - len(axes)

            stages = [self.producers[stage.name] for stage in self.kernel.stages]
            if stages:
                self.plan_row_scratch(source_shape, inner_from, stages + [eqn], eqn)

            def per_row(outer):
                self.scratch_filled = set()
                for stage in stages:
                    self.stage_values[stage.out.name] = self.reduce_row(
                        stage, source_shape, inner_from, outer)
                value = self.reduce_row(eqn, source_shape, inner_from, outer)
                padded = tuple(outer) + (ZERO,) * len(axes)
                self.store(root.name, out_index(padded), value, root.aval.dtype)

            self.loops(source_shape[:inner_from], per_row, inner_from=rank,
                       split_level=0 if inner_from > 0 else None)
        elif _leading(axes, rank) and eqn.prim.name not in ("argmax", "argmin"):
            self.reduce_columns(eqn, source_shape, axes, out_index)
        else:
            self.reduce_generic(eqn, source_shape, axes, out_index)

    def reduce_columns(self, eqn, shape, axes, out_index):
        """Reductions over leading axes: accumulate whole rows into the output (NumPy's
        order for axis=0, and unit-stride inner loops)."""
        root = self.kernel.root
        reducer = Reducer(self, eqn)
        reducer.dtype = np.dtype(root.aval.dtype)  # accumulate in the output, NumPy's order
        kept = shape[len(axes):]
        zeros = (ZERO,) * len(axes)
        self.loops(kept, lambda index: self.store(
            root.name, out_index(zeros + tuple(index)), reducer.identity_in(root.aval.dtype),
            root.aval.dtype), split_level=0)

        def accumulate(index):
            target = out_index(index)
            current = self.load(root.name, target, root.aval.dtype)
            updated = reducer.combine_into(current, index)
            self.store(root.name, target, updated, root.aval.dtype)

        self.loops(shape, accumulate, inner_from=len(axes), split_level=len(axes))

    def reduce_generic(self, eqn, shape, axes, out_index):
        """Any axes: kept dims outside, reduced dims inside (strided reads)."""
        root = self.kernel.root
        rank = len(shape)
        kept_axes = [axis for axis in range(rank) if axis not in axes]
        order = kept_axes + list(axes)

        def reorder(ordered):
            index = [None] * rank
            for position, axis in enumerate(order):
                index[axis] = ordered[position]
            return tuple(index)

        permuted_shape = tuple(shape[axis] for axis in order)

        def per_output(kept):
            reducer = Reducer(self, eqn)
            reducer.start()
            self.loops(permuted_shape, lambda ordered: reducer.add(reorder(ordered)),
                       inner_from=len(kept_axes), prefix=kept)
            full = reorder(tuple(kept) + (ZERO,) * len(axes))
            self.store(root.name, out_index(full), reducer.result(), root.aval.dtype)

        self.loops(permuted_shape[:len(kept_axes)], per_output, inner_from=rank,
                   split_level=0 if kept_axes else None)

    def blas_operands(self):
        """``((buffer, transposed), (buffer, transposed))`` when a GEMM (OpenBLAS, or
        tracejit's own for float32 2-D products) can run this matmul: float operands that
        are buffers or transposes (last two axes) of buffers."""
        from . import blas

        matmul = self.kernel.matmul
        if np.dtype(matmul.out.aval.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
            return None
        if not blas.openblas() and not self.own_gemm_shape():
            return None
        from .schedule import reshaped_buffer

        def buffer_of(var):  # a buffer, or a reshape of one: the same contiguous memory
            var = reshaped_buffer(var, self.producers, self.schedule.buffers)
            return var.name if var is not None and var.name in self.schedule.buffers else None

        operands = []
        for atom in matmul.inputs:
            if not isinstance(atom, Var) or atom.aval.dtype != matmul.out.aval.dtype:
                return None
            if buffer_of(atom) is not None:
                operands.append((buffer_of(atom), False))
                continue
            eqn = self.producers.get(atom.name)
            if eqn is None or eqn.prim.name != "transpose":
                return None
            perm = eqn.params_dict["perm"]
            rank = len(perm)
            base = eqn.inputs[0]
            if rank < 2 or perm[:-2] != tuple(range(rank - 2)) or perm[-2:] != (
                rank - 1, rank - 2) or not isinstance(base, Var) or buffer_of(base) is None:
                return None
            operands.append((buffer_of(base), True))
        return tuple(operands)

    def own_gemm_shape(self):
        """True when this matmul may call tracejit's own GEMM (``codegen/gemm.py``): a
        float32 product of two matrices, on a host and setting that allow it (``blas``)."""
        from . import blas

        matmul = self.kernel.matmul
        return (np.dtype(matmul.out.aval.dtype) == np.dtype(np.float32)
                and all(len(atom.aval.shape) == 2 for atom in matmul.inputs)
                and blas.own_sgemm_enabled())

    def build_matmul(self):
        if self.blas_operands() is not None:
            return self.build_blas_matmul()
        matmul = self.kernel.matmul
        root = self.kernel.root
        product = matmul.out
        if product.name != root.name:
            self.overrides[product.name] = root.name  # the epilogue reads the product in place
        a, b = matmul.inputs
        dtype = product.aval.dtype
        a_rank, b_rank = len(a.aval.shape), len(b.aval.shape)
        shape = product.aval.shape
        batch = shape[: len(shape) - (a_rank > 1) - (b_rank > 1)] if a_rank > 1 or b_rank > 1 \
            else ()
        k_dim = a.aval.shape[-1]
        has_m, has_n = a_rank > 1, b_rank > 1

        def operand_index(operand, batch_index, row, column):
            rank = len(operand.aval.shape)
            if rank == 1:
                return (column if operand is a else row,)
            core = (row, column)
            batch_shape = operand.aval.shape[:-2]
            return broadcast_index(batch_index, batch_shape, batch) + core

        def epilogue(out_index):
            if product.name != root.name:
                value = self.compute(self._root_eqn(), out_index)
                self.store(root.name, out_index, value, root.aval.dtype)

        def per_batch(batch_index):
            def per_row(row):
                if has_n:
                    out_row = (*batch_index, *((row,) if has_m else ()))
                    zero = dt.constant(dtype, 0)
                    self.loop(self.dim(shape[-1]),
                              lambda j: self.store(root.name, (*out_row, j), zero, dtype),
                              inner=True)

                    def per_k(k):
                        left = self.value(a, operand_index(a, batch_index, row, k), dtype)

                        def per_column(j):
                            right = self.value(b, operand_index(b, batch_index, k, j), dtype)
                            out_index = (*out_row, j)
                            current = self.load(root.name, out_index, dtype)
                            self.store(root.name, out_index,
                                       self._multiply_add(current, left, right, dtype), dtype)

                        self.loop(self.dim(shape[-1]), per_column, inner=True)

                    self.loop(self.dim(k_dim), per_k, inner=False)
                    self.loop(self.dim(shape[-1]), lambda j: epilogue((*out_row, j)), inner=True)
                else:
                    accumulator = self.entry.alloca(dt.register_type(dtype))
                    self.b.store(dt.constant(dtype, 0), accumulator)

                    def per_k(k):
                        left = self.value(a, operand_index(a, batch_index, row, k), dtype)
                        right = self.value(b, operand_index(b, batch_index, k, ZERO), dtype)
                        current = self.b.load(accumulator, typ=dt.register_type(dtype))
                        self.b.store(self._multiply_add(current, left, right, dtype,
                                                        reassociate=True), accumulator)

                    self.loop(self.dim(k_dim), per_k, inner=True)
                    out_index = (*batch_index, *((row,) if has_m else ()))
                    self.store(root.name, out_index,
                               self.b.load(accumulator, typ=dt.register_type(dtype)), dtype)
                    epilogue(out_index)

            if has_m:
                self.loop(self.dim(a.aval.shape[-2]), per_row, inner=False, split=not batch)
            else:
                per_row(ZERO)

        self.loops(batch, per_batch, inner_from=len(batch), split_level=0 if batch else None)

    def build_blas_matmul(self):
        """C = A @ B by a GEMM in the entry (per batch entry): OpenBLAS, or for float32
        products of two matrices tracejit's own (``codegen/gemm.py``, as ``blas`` chooses);
        then the epilogue - the root's pointwise expression over C, in place - split across
        the thread pool."""
        from . import blas

        matmul, root = self.kernel.matmul, self.kernel.root
        product = matmul.out
        (a_name, a_transposed), (b_name, b_transposed) = self.blas_operands()
        own = self.own_gemm_shape()
        a, b = matmul.inputs
        dtype = np.dtype(product.aval.dtype)
        a_shape, b_shape = tuple(a.aval.shape), tuple(b.aval.shape)
        m = a_shape[-2] if len(a_shape) > 1 else 1
        k = a_shape[-1]
        n = b_shape[-1] if len(b_shape) > 1 else 1
        batch = tuple(product.aval.shape[: len(product.aval.shape) - (len(a_shape) > 1) - (
            len(b_shape) > 1)])
        a_batch, b_batch = a_shape[:-2], b_shape[:-2]

        def prologue(function, builder, dims, pointers):
            element = dtype.itemsize

            def call_blas(values, a_pointer, b_pointer, c_pointer, lda, ldb):
                # OpenBLAS runs its own threads: ours must not spin on the cores meanwhile.
                builder.call(self.program.pool_park(), [self.program.pool_state(POOL_FIELDS)])
                builder.call(self.program.gemm_function(dtype), [
                    ir.Constant(I32, 101), ir.Constant(I32, 112 if a_transposed else 111),
                    ir.Constant(I32, 112 if b_transposed else 111), *values,
                    dt.constant(dtype, 1.0), a_pointer, lda, b_pointer, ldb,
                    dt.constant(dtype, 0.0), c_pointer, values[1]])

            def call_own(values, a_pointer, b_pointer, c_pointer, lda, ldb):
                # Splits C's rows over our pool itself (small products stay on this thread).
                builder.call(self.program.own_gemm_function(), [
                    _const(int(a_transposed)), _const(int(b_transposed)), *values,
                    a_pointer, lda, b_pointer, ldb, c_pointer, values[1]])

            def call(a_offset, b_offset, c_offset):
                values = [dims.dim(dim) for dim in (m, n, k)]
                a_pointer = builder.gep(pointers[a_name], [builder.mul(a_offset, _const(
                    element))], source_etype=dt.I8)
                b_pointer = builder.gep(pointers[b_name], [builder.mul(b_offset, _const(
                    element))], source_etype=dt.I8)
                c_pointer = builder.gep(pointers[root.name], [builder.mul(c_offset, _const(
                    element))], source_etype=dt.I8)
                lda = values[0] if a_transposed else values[2]
                ldb = values[2] if b_transposed else values[1]
                operands = (values, a_pointer, b_pointer, c_pointer, lda, ldb)
                if not own:
                    call_blas(*operands)
                    return
                pool = self.program.pool_state(POOL_FIELDS)
                threads = builder.load(builder.gep(pool, [_const(0), _const(THREADS)],
                                                   source_etype=ir.ArrayType(I64, POOL_FIELDS)),
                                       typ=I64)
                condition = blas.own_sgemm_condition(builder, *values, b_transposed, threads)
                if condition is True:
                    call_own(*operands)
                    return
                with builder.if_else(condition) as (ours, theirs):
                    with ours:
                        call_own(*operands)
                    with theirs:
                        call_blas(*operands)

            if not batch:
                call(_const(0), _const(0), _const(0))
                return
            total = dims.dim(_size(batch))
            header = function.append_basic_block("batch")
            body = function.append_basic_block("batch.body")
            done = function.append_basic_block("batch.end")
            before = builder.block
            builder.branch(header)
            builder.position_at_end(header)
            index = builder.phi(I64)
            index.add_incoming(_const(0), before)
            builder.cbranch(builder.icmp_signed("<", index, total), body, done)
            builder.position_at_end(body)
            # Unravel the batch index; broadcast it into each operand's batch dims.
            coordinates, rest = [], index
            for dim in reversed(batch):
                size = dims.dim(dim)
                coordinates.append(builder.srem(rest, size))
                rest = builder.sdiv(rest, size)
            coordinates.reverse()

            def offset(operand_batch, matrix):
                lead = len(batch) - len(operand_batch)
                linear = _const(0)
                for position, dim in enumerate(operand_batch):
                    coordinate = _const(0) if _unit(dim) else coordinates[lead + position]
                    linear = builder.add(builder.mul(linear, dims.dim(dim)), coordinate)
                return builder.mul(linear, dims.dim(matrix))

            call(offset(a_batch, m * k), offset(b_batch, k * n),
                 builder.mul(index, dims.dim(m * n)))
            following = builder.add(index, _const(1))
            index.add_incoming(following, builder.block)
            builder.branch(header)
            builder.position_at_end(done)

        self.prologue = prologue
        if product.name != root.name:
            self.overrides[product.name] = root.name  # the epilogue reads C in place
            eqn = self._root_eqn()
            self.loops(root.aval.shape, lambda index: self.store(
                root.name, index, self.compute(eqn, index), root.aval.dtype),
                split_level=0 if root.aval.shape else None)

    def _multiply_add(self, current, left, right, dtype, reassociate=False):
        if dt.is_float(dtype):
            flags = _REASSOC if reassociate else ("contract",)
            return self.b.fadd(current, self.b.fmul(left, right, flags=("contract",)),
                               flags=flags)
        if np.dtype(dtype) == np.bool_:
            return self.b.or_(current, self.b.and_(left, right))
        return self.b.add(current, self.b.mul(left, right))

    def build_scatter(self):
        eqn = self._root_eqn()
        root = self.kernel.root
        updates, indices = eqn.inputs
        axis = eqn.params_dict["axis"]
        depth = len(indices.aval.shape)
        dtype = root.aval.dtype
        zero = dt.constant(dtype, 0)
        self.loop(self.dim(_size(root.aval.shape)) if root.aval.shape else _const(1),
                  lambda ix: self.store(root.name, FlatIndex(ix.value), zero, dtype), inner=True)
        count = self.dim(root.aval.shape[axis])

        def add(index):
            position = self.value(indices, tuple(index[axis:axis + depth]), np.int64)
            position = self.b.select(self.b.icmp_signed("<", position, _const(0)),
                                     self.b.add(position, count), position)
            out_of_range = self.b.or_(self.b.icmp_signed("<", position, _const(0)),
                                      self.b.icmp_signed(">=", position, count))
            self.report_if(out_of_range, KernelStatus.INDEX_OUT_OF_RANGE)
            target = (*index[:axis], Ix(self._clamp(position, count), False),
                      *index[axis + depth:])
            current = self.load(root.name, target, dtype)
            value = self.value(updates, index, dtype)
            combined = self.b.fadd(current, value) if dt.is_float(dtype) else (
                self.b.or_(current, value) if np.dtype(dtype) == np.bool_
                else self.b.add(current, value))
            self.store(root.name, target, combined, dtype)

        self.loops(updates.aval.shape, add)


class Reducer:
    """The accumulator of one reduction: identity, combine, finish."""

    def __init__(self, kernel, eqn):
        self.k = kernel
        self.eqn = eqn
        self.name = eqn.prim.name
        self.source = eqn.inputs[0]
        self.out_dtype = eqn.out.aval.dtype
        source_dtype = self.source.aval.dtype
        if self.name in ("argmax", "argmin"):
            self.dtype = source_dtype
        elif self.name == "sum" and np.dtype(self.out_dtype) == np.float32:
            self.dtype = np.dtype(np.float64)  # float32 sums accumulate in double
        else:
            self.dtype = self.out_dtype

    def identity_in(self, dtype):
        dtype = np.dtype(dtype)
        name = self.name
        if name in ("sum", "any"):
            return dt.constant(dtype, 0)
        if name in ("prod", "all"):
            return dt.constant(dtype, 1)
        if dtype == np.bool_:
            return dt.constant(dtype, name in ("min", "argmin"))
        if dt.is_float(dtype):
            return dt.constant(dtype, -np.inf if name in ("max", "argmax") else np.inf)
        info = np.iinfo(dtype)
        return dt.constant(dtype, info.min if name in ("max", "argmax") else info.max)

    def start(self):
        entry = self.k.entry
        self.slot = entry.alloca(dt.register_type(self.dtype))
        self.k.b.store(self.identity_in(self.dtype), self.slot)
        if self.name in ("argmax", "argmin"):
            self.position = entry.alloca(I64)
            self.k.b.store(_const(0), self.position)
            self.count = entry.alloca(I64)
            self.k.b.store(_const(0), self.count)

    def combine(self, current, value):
        builder, dtype = self.k.b, np.dtype(self.dtype)
        name = self.name
        if dtype == np.bool_:
            return builder.or_(current, value) if name in ("sum", "any", "max") else (
                builder.and_(current, value))
        if dt.is_float(dtype):
            if name == "sum":
                return builder.fadd(current, value, flags=_REASSOC)
            if name == "prod":
                return builder.fmul(current, value, flags=_REASSOC)
            intrinsic = "maximum" if name == "max" else "minimum"
            return _float_intrinsic(builder, intrinsic, current, value)
        if name == "sum":
            return builder.add(current, value)
        if name == "prod":
            return builder.mul(current, value)
        compare = ">" if name == "max" else "<"
        return builder.select(builder.icmp_signed(compare, value, current), value, current)

    def combine_into(self, current, index):
        value = self.k.value(self.source, index, self.dtype)
        return self.combine(current, value)

    def add(self, index):
        builder = self.k.b
        value = self.k.value(self.source, index, self.dtype)
        ty = dt.register_type(self.dtype)
        current = builder.load(self.slot, typ=ty)
        if self.name in ("argmax", "argmin"):
            better = self._better(value, current)
            count = builder.load(self.count, typ=I64)
            position = builder.load(self.position, typ=I64)
            builder.store(builder.select(better, value, current), self.slot)
            builder.store(builder.select(better, count, position), self.position)
            builder.store(builder.add(count, _const(1)), self.count)
            return
        builder.store(self.combine(current, value), self.slot)

    def _better(self, value, best):
        builder = self.k.b
        if dt.is_float(self.dtype):
            op = ">" if self.name == "argmax" else "<"
            strictly = builder.fcmp_ordered(op, value, best)
            # NumPy: the first NaN wins.
            nan_first = builder.and_(builder.fcmp_unordered("uno", value, value),
                                     builder.fcmp_ordered("ord", best, best))
            return builder.or_(strictly, nan_first)
        compare = builder.icmp_unsigned if np.dtype(self.dtype) == np.bool_ else (
            builder.icmp_signed)
        return compare(">" if self.name == "argmax" else "<", value, best)

    def result(self):
        builder = self.k.b
        if self.name in ("argmax", "argmin"):
            return dt.cast(builder, builder.load(self.position, typ=I64), np.int64,
                           self.out_dtype)
        value = builder.load(self.slot, typ=dt.register_type(self.dtype))
        return dt.cast(builder, value, self.dtype, self.out_dtype)


def _float_intrinsic(builder, name, a, b):
    module = builder.module
    full = f"llvm.{name}.{'f64' if a.type == dt.F64 else 'f32'}"
    function = module.globals.get(full) or ir.Function(
        module, ir.FunctionType(a.type, [a.type, a.type]), full)
    return builder.call(function, [a, b])


def _unit(dim):
    return isinstance(dim, int) and dim == 1


def _size(shape):
    size = 1
    for dim in shape:
        size = size * dim
    return size


def _is_flat(index):
    return isinstance(index, FlatIndex)


def _is_inner(index):
    if isinstance(index, FlatIndex):
        return index.inner
    return any(component.inner for component in index)


def _stage_axes(eqn):
    params = eqn.params_dict
    return tuple(params["axes"]) if "axes" in params else (params["axis"],)


def _leading(axes, rank):
    return len(axes) < rank and axes == tuple(range(len(axes)))


def broadcast_index(index, in_shape, out_shape):
    """The index into an operand of shape ``in_shape`` broadcast to ``out_shape``."""
    if isinstance(index, FlatIndex):
        # Flat loops only read same-shaped buffers and scalars (see _flat_ok).
        return () if not in_shape and out_shape else index
    lead = len(out_shape) - len(in_shape)
    return tuple(
        ZERO if _unit(dim) and not _unit(out_shape[lead + d]) else index[lead + d]
        for d, dim in enumerate(in_shape)
    )



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
        seconds = builder.load(builder.gep(timespec, [_const(0), _const(0)]), typ=I64)
        nanoseconds = builder.load(builder.gep(timespec, [_const(0), _const(1)]), typ=I64)
        return builder.add(builder.mul(seconds, _const(1_000_000_000)), nanoseconds)

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
        if kernel.matmul is not None:
            names |= {kernel.matmul.out.name, *(
                atom.name for atom in kernel.matmul.inputs
                if isinstance(atom, Var) and atom.name not in buffers)}
        eqns = sorted((producers[name] for name in names),
                      key=lambda eqn: scheduler.order[eqn.out.name])
        order = [kernel.root.name]
        local = {}

        def canonical(atom):
            if isinstance(atom, Literal):
                return ("literal", str(atom), str(atom.aval))
            if atom.name in buffers and atom.name != kernel.root.name and (
                kernel.matmul is None or atom.name != kernel.matmul.out.name
            ):
                if atom.name not in order:
                    order.append(atom.name)
                return ("buffer", order.index(atom.name), str(atom.aval))
            local.setdefault(atom.name, len(local))
            return ("value", local[atom.name], str(atom.aval))

        key, starts = [kernel.kind, str(kernel.root.aval), len(kernel.stages)], []
        for eqn in eqns:
            params = eqn.params
            if eqn.prim.name == "slice":  # constant starts become arguments; limits unused
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
                compiled[key] = KernelBuilder(
                    self, kernel, buffers, [slot for slot, _ in starts]).build()
            kernels.append((compiled[key], buffers, [_const(start) for _, start in starts]))
        entry_name = f"{self.name}_entry"
        self._entry(entry_name, kernels, raw=False)
        if raw_entry:
            self._entry(f"{self.name}_raw", kernels, raw=True)
        return self.module, entry_name

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
                data = builder.load(builder.gep(arrays, [_const(8 * slot)],
                                                source_etype=dt.I8), typ=PTR)
            else:  # arrays: a tuple of NumPy arrays
                item = builder.load(builder.gep(arrays, [_const(TUPLE_ITEMS_OFFSET + 8 * slot)],
                                                source_etype=dt.I8), typ=PTR)
                data = builder.load(builder.gep(item, [_const(ARRAY_DATA_OFFSET)],
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
        for number, (kernel, (kernel_function, buffers, starts)) in enumerate(
                zip(self.schedule.kernels, kernels)):
            started = self._clock(builder) if counters is not None else None
            builder.call(kernel_function,
                         [pointers[name] for name in buffers] + list(symbols) + starts + [status])
            if counters is not None:
                elapsed = builder.sub(self._clock(builder), started)
                for slot, amount in ((2 * number, _const(1)), (2 * number + 1, elapsed)):
                    builder.atomic_rmw("add", builder.gep(counters, [_const(0), _const(slot)]),
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
            item = builder.load(builder.gep(arrays, [_const(TUPLE_ITEMS_OFFSET + 8 * slot)],
                                            source_etype=dt.I8), typ=PTR)
            flags = builder.load(builder.gep(item, [_const(ARRAY_FLAGS_OFFSET)],
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
    for atom in (*graph.outputs, *schedule.effect_outputs):
        if isinstance(atom, Var) and schedule.buffers.get(atom.name) is not None:
            buffer = schedule.buffers[atom.name]
            if buffer.kind == "output" and atom.name not in seen:
                seen.add(atom.name)
                slots.append(("output", atom.name))
    slots.append(("workspace", None))
    return slots


def guard_checks(schedule):
    """The guards to check after each kernel (``-1``: before any), in body order: each
    right after the kernel computing its predicate, except that a guard waits for the
    margin guard just before it (``tracejit.tracer.guard_margins``), so a margin inside the rounding
    bound takes the margin's exit, not the guard's. (Where the margin runs later it reads
    the guard's predicate, so that buffer is still live.)"""
    owner = {id(guard): -1 for guard in schedule.entry_guards}
    for index, kernel in enumerate(schedule.kernels):
        owner.update((id(guard), index) for guard in kernel.guards)
    checks = {index: [] for index in range(-1, len(schedule.kernels))}
    previous = None
    for guard in schedule.graph.guards:
        at = owner[id(guard)]
        if previous is not None and previous.convert == "margin" and guard.convert != "margin":
            at = max(at, owner[id(previous)])
        checks[at].append(guard)
        previous = guard
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
            wide = _float_intrinsic1(builder, "trunc", wide)
        expected = float(guard.expected)
        if expected != expected:
            return builder.fcmp_unordered("uno", wide, wide)
        return builder.fcmp_ordered("==", wide, ir.Constant(dt.F64, expected))
    wide = dt.cast(builder, value, dtype, np.int64)
    if isinstance(guard.expected, float) and not float(guard.expected).is_integer():
        return ir.Constant(I1, 0)
    return builder.icmp_signed("==", wide, _const(int(guard.expected)))


def _float_intrinsic1(builder, name, value):
    module = builder.module
    full = f"llvm.{name}.f64"
    function = module.globals.get(full) or ir.Function(
        module, ir.FunctionType(value.type, [value.type]), full)
    return builder.call(function, [value])
