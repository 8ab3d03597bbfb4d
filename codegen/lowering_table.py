"""The lowering table: for every primitive codegen compiles, how it becomes LLVM IR.

One entry per primitive of the op table (``tracejit.tracer.ops``), keyed by the
``Primitive`` itself (tests/codegen/test_lowering_table.py checks that the keys are
exactly the op table's primitives, less the ones compiled elsewhere):

* ``kernel``: the kind of kernel (``codegen/kernel_kinds.py``) an equation of this
  primitive roots when the scheduler gives it a buffer;
* ``compute(kernel, eqn, index)``: the value of the equation's output at an index,
  inlined into whichever kernel reads it (pointwise rules from ``codegen/pointwise.py``;
  views and creation from ``codegen/view_lowering.py``); ``None`` when the value is never
  inlined: it is read from its buffer (matmul, convolutions, scatter), or, for a
  reduction, from the row stage that computed it (``codegen/row_fusion.py``);
* ``epilogue``: a pointwise consumer of the whole output may run in place as the
  kernel's epilogue (``relu(x @ W + b)`` is one kernel, its anchor the matmul);
* ``cost``: what recomputing one element costs, when row fusion decides whether to keep
  a value in the row scratch (a transcendental 10, a division 4, other pointwise 1).

>>> from tracejit.tracer.ops import exp_p, matmul_p, sum_p
>>> LOWERINGS[exp_p].kernel, LOWERINGS[exp_p].cost
('pointwise', 10)
>>> LOWERINGS[sum_p].compute is None, LOWERINGS[matmul_p].epilogue
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tracejit.tracer import ops
from tracejit.tracer.ops import PRIMITIVES

from . import pointwise as pw
from . import view_lowering as views


@dataclass(frozen=True)
class Lowering:
    kernel: str
    compute: Callable | None = None
    cost: int = 0
    epilogue: bool = False


TRANSCENDENTAL, DIVISION, ARITHMETIC = 10, 4, 1


def pointwise(rule, cost=ARITHMETIC):
    return Lowering("pointwise", pw.lowered(rule), cost)


def view(compute):
    return Lowering("pointwise", compute)


REDUCTION = Lowering("reduce")

LOWERINGS = {
    # pointwise: one element from the operands' elements at the broadcast index
    ops.neg_p: pointwise(pw.neg),
    ops.abs_p: pointwise(pw.absolute),
    ops.sign_p: pointwise(pw.sign),
    ops.exp_p: pointwise(pw.math_function("exp"), TRANSCENDENTAL),
    ops.exp2_p: pointwise(pw.math_function("exp2"), TRANSCENDENTAL),
    ops.expm1_p: pointwise(pw.math_function("expm1"), TRANSCENDENTAL),
    ops.log_p: pointwise(pw.math_function("log"), TRANSCENDENTAL),
    ops.log1p_p: pointwise(pw.math_function("log1p"), TRANSCENDENTAL),
    ops.log2_p: pointwise(pw.math_function("log2"), TRANSCENDENTAL),
    ops.log10_p: pointwise(pw.math_function("log10"), TRANSCENDENTAL),
    ops.sqrt_p: pointwise(pw.math_function("sqrt"), DIVISION),
    ops.square_p: pointwise(pw.square),
    ops.reciprocal_p: pointwise(pw.reciprocal),
    ops.tanh_p: pointwise(pw.math_function("tanh"), TRANSCENDENTAL),
    ops.sin_p: pointwise(pw.math_function("sin"), TRANSCENDENTAL),
    ops.cos_p: pointwise(pw.math_function("cos"), TRANSCENDENTAL),
    ops.tan_p: pointwise(pw.math_function("tan"), TRANSCENDENTAL),
    ops.erf_p: pointwise(pw.math_function("erf")),
    ops.floor_p: pointwise(pw.rounding("floor")),
    ops.ceil_p: pointwise(pw.rounding("ceil")),
    ops.rint_p: pointwise(pw.rounding("rint")),
    ops.trunc_p: pointwise(pw.rounding("trunc")),
    ops.isnan_p: pointwise(pw.isnan),
    ops.isinf_p: pointwise(pw.isinf),
    ops.isfinite_p: pointwise(pw.isfinite),
    ops.logical_not_p: pointwise(pw.logical_not),
    ops.add_p: pointwise(pw.float_binary("fadd", "add", "or_")),
    ops.subtract_p: pointwise(pw.float_binary("fsub", "sub")),
    ops.multiply_p: pointwise(pw.float_binary("fmul", "mul", "and_")),
    ops.true_divide_p: pointwise(pw.true_divide, DIVISION),
    ops.floor_divide_p: pointwise(pw.floor_divide, DIVISION),
    ops.mod_p: pointwise(pw.mod, DIVISION),
    ops.power_p: pointwise(pw.power, TRANSCENDENTAL),
    ops.maximum_p: pointwise(pw.maximum),
    ops.minimum_p: pointwise(pw.minimum),
    ops.equal_p: pointwise(pw.compare("==")),
    ops.not_equal_p: pointwise(pw.compare("!=")),
    ops.less_p: pointwise(pw.compare("<")),
    ops.less_equal_p: pointwise(pw.compare("<=")),
    ops.greater_p: pointwise(pw.compare(">")),
    ops.greater_equal_p: pointwise(pw.compare(">=")),
    ops.logical_and_p: pointwise(pw.logical("and_")),
    ops.logical_or_p: pointwise(pw.logical("or_")),
    ops.bitwise_and_p: pointwise(pw.bitwise("and_")),
    ops.bitwise_or_p: pointwise(pw.bitwise("or_")),
    ops.bitwise_xor_p: pointwise(pw.bitwise("xor")),
    ops.invert_p: pointwise(pw.invert),
    ops.left_shift_p: pointwise(pw.left_shift),
    ops.right_shift_p: pointwise(pw.right_shift),
    ops.where_p: pointwise(pw.where),
    ops.stop_gradient_p: pointwise(pw.identity),
    ops.cast_p: Lowering("pointwise", pw.lower_cast, ARITHMETIC),
    # views and creation: index arithmetic, no arithmetic on the elements
    ops.broadcast_to_p: view(views.broadcast_to),
    ops.reshape_p: view(views.reshape),
    ops.transpose_p: view(views.transpose),
    ops.slice_p: view(views.slice_),
    ops.sliding_window_p: view(views.sliding_window),
    ops.flip_p: view(views.flip),
    ops.pad_p: view(views.pad),
    ops.concatenate_p: view(views.concatenate),
    ops.gather_p: view(views.gather),
    ops.iota_p: view(views.iota),
    ops.full_p: view(views.full),
    # reductions: a kernel of their own, or a row stage of the kernel that reads them
    ops.sum_p: REDUCTION,
    ops.prod_p: REDUCTION,
    ops.max_p: REDUCTION,
    ops.min_p: REDUCTION,
    ops.any_p: REDUCTION,
    ops.all_p: REDUCTION,
    ops.argmax_p: REDUCTION,
    ops.argmin_p: REDUCTION,
    # kernels that read their operands from buffers
    ops.matmul_p: Lowering("matmul", epilogue=True),
    ops.conv2d_p: Lowering("conv", epilogue=True),
    ops.conv2d_weight_grad_p: Lowering("conv"),
    ops.scatter_add_p: Lowering("scatter"),
    ops.cumsum_p: Lowering("scan"),
    ops.cumprod_p: Lowering("scan"),
}

# Primitives compiled without a lowering rule, and where.
COMPILED_ELSEWHERE = {
    ops.loop_p: "codegen/loops.py: a loop's body is a program of its own, called from a "
                "native driver (codegen/native_loop.py) or from Python",
}


def missing_lowerings(table=None):
    """Primitives of the op table with neither a lowering nor a place that compiles them."""
    table = LOWERINGS if table is None else table
    return set(PRIMITIVES.values()) - set(table) - set(COMPILED_ELSEWHERE)


def lowering_of(prim):
    return LOWERINGS[prim]


def is_reduction(eqn):
    return LOWERINGS[eqn.prim] is REDUCTION
