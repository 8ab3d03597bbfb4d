"""The op table: every primitive tracejit knows, one module per family.

``PRIMITIVES`` (name -> Primitive) is the one op list; codegen's lowering table and the
tests are checked against it.
"""

from ..primitives import PRIMITIVES, Primitive, bind
from .control import loop_p
from .conv import conv2d, conv2d_p, conv2d_transpose, conv2d_weight_grad, conv2d_weight_grad_p
from .creation import full, full_p, iota, iota_p
from .indexing import gather, gather_p, scatter_add, scatter_add_p
from .linalg import matmul, matmul_p
from .pointwise import (
    abs_p,
    add_p,
    bitwise_and_p,
    bitwise_or_p,
    bitwise_xor_p,
    cast_p,
    ceil_p,
    cos_p,
    equal_p,
    erf_p,
    exp2_p,
    exp_p,
    expm1_p,
    floor_divide_p,
    floor_p,
    greater_equal_p,
    greater_p,
    invert_p,
    isfinite_p,
    isinf_p,
    isnan_p,
    left_shift_p,
    less_equal_p,
    less_p,
    log1p_p,
    log2_p,
    log10_p,
    log_p,
    logical_and_p,
    logical_not_p,
    logical_or_p,
    maximum_p,
    minimum_p,
    mod_p,
    multiply_p,
    neg_p,
    not_equal_p,
    power_p,
    reciprocal_p,
    right_shift_p,
    rint_p,
    sign_p,
    sin_p,
    sqrt_p,
    square_p,
    stop_gradient_p,
    subtract_p,
    tan_p,
    tanh_p,
    true_divide_p,
    trunc_p,
    where_p,
)
from .reductions import (
    all_p,
    any_p,
    argmax_p,
    argmin_p,
    expand_reduced,
    max_p,
    min_p,
    prod_p,
    reduce_sum,
    sum_p,
)
from .scan import cumprod, cumprod_p, cumsum, cumsum_p
from .structural import (
    broadcast_to,
    broadcast_to_p,
    concatenate,
    concatenate_p,
    dtype_of,
    flip,
    flip_p,
    ndim_of,
    pad,
    pad_p,
    reshape,
    reshape_p,
    shape_of,
    slice_axes,
    slice_length,
    slice_p,
    sliding_window,
    sliding_window_p,
    swapaxes,
    swaps_last_two_axes,
    transpose,
    transpose_p,
)

__all__ = [name for name in dir() if not name.startswith("_")]
