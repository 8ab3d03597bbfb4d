"""``x[index] op= v`` on a traced array, the form col2im and overlap-add repeat over
overlapping regions (``tracer/indexing.update``): eager NumPy's values bit for bit (rtol 0),
NumPy's errors, and a compiled program whose size grows with the number of updates, not
twice per update."""

import numpy as np
import pytest
from real_model_checks import jitted, no_internal_errors, rng_for, run_calls

import tracejit as tj

EXACT = dict(rtol=0, atol=0)

INDEXES = {
    "slice": (slice(1, 4),),
    "strided": (slice(0, 5, 2),),
    "reversed": (slice(4, 0, -2),),
    "int": (2,),
    "negative int": (-1,),
    "int then slice": (1, slice(2, 5)),
    "ellipsis": (Ellipsis, slice(1, 3)),
    "newaxis": (None, slice(1, 3)),
    "whole": (Ellipsis,),
}


def _update(operation):
    def updated(x, v, index):
        y = x * 1
        if operation == "+":
            y[index] += v
        elif operation == "-":
            y[index] -= v
        elif operation == "*":
            y[index] *= v
        else:
            y[index] /= v
        return y

    return updated


# Each case is a compile. float64 runs every operation at every index; float32 + and *;
# int64 + (integer regions) and / (NumPy's UFuncTypeError at every index): an int64 - or *
# builds the same where(region, x op pad(v), x) as its +.
OPERATIONS = {np.float64: "+-*/", np.float32: "+*", np.int64: "+/"}


@pytest.mark.parametrize("dtype, name, operation", [
    pytest.param(dtype, name, operation, id=f"{dtype.__name__}-{name}-{operation}")
    for dtype, operations in OPERATIONS.items() for name in INDEXES
    for operation in operations])
def test_an_update_at_a_basic_index_is_numpys(operation, name, dtype):
    x = (rng_for(3).standard_normal((3, 6)) * 4).astype(dtype)
    x[0, 0], x[1, 1] = (-0.0, np.nan) if dtype != np.int64 else (5, 7)
    index = INDEXES[name]
    region = x[index]
    arrays = [rng_for(4).standard_normal(region.shape).astype(dtype) + 2,
              np.asarray(rng_for(5).standard_normal(region.shape[-1:]) + 2, dtype)]
    values = [*arrays, 2.5 if dtype != np.int64 else 3, dtype(3)]
    f = run_calls(_update(operation), [(x, value, index) for value in values], **EXACT)
    no_internal_errors(f)


def test_an_integer_region_updated_with_floats_raises_as_numpy():
    def add_half(x):
        y = np.zeros(4, dtype=np.int64)
        y[1:3] += x
        return y

    f = jitted(add_half)
    with pytest.raises(TypeError, match="same_kind"):  # NumPy's UFuncTypeError
        f(np.full(2, 0.5))
    with pytest.raises(ValueError, match="non-broadcastable output"):
        jitted(lambda x: _grow(x))(np.ones((3, 2)))


def _grow(x):
    y = np.zeros(4)
    y[1:3] += x
    return y


def test_one_element_of_an_integer_array_takes_a_float_as_numpy():
    def bump(x):  # a[1] += 0.5 adds to a scalar, then stores it cast: no error
        y = x.copy()
        y[1] += 0.5
        y[2, ...] += 1.5
        return y

    run_calls(bump, [(np.arange(4),)])


def overlap_add(frames, hop):
    n, width = frames.shape
    out = np.zeros((n - 1) * hop + width)
    for i in range(n):
        out[i * hop:i * hop + width] += frames[i]
    return out


def col2im(cols, shape, kernel, stride, pad):
    """The im2col convolution's backward (the course layout): patch gradients added into
    overlapping windows of a padded image, one update per kernel offset."""
    N, C, H, W = shape
    out_h = (H + 2 * pad - kernel) // stride + 1
    out_w = (W + 2 * pad - kernel) // stride + 1
    cols = cols.reshape(N, C, kernel, kernel, out_h, out_w)
    image = np.zeros((N, C, H + 2 * pad, W + 2 * pad))
    for i in range(kernel):
        for j in range(kernel):
            image[:, :, i:i + stride * out_h:stride, j:j + stride * out_w:stride] += (
                cols[:, :, i, j])
    return image[:, :, pad:H + pad, pad:W + pad]


@pytest.mark.parametrize("kernel, stride, pad", [(3, 1, 1), (4, 2, 1), (5, 1, 2), (2, 2, 0)])
def test_col2im_is_numpys_bit_for_bit(kernel, stride, pad):
    N, C, H = 2, 3, 9
    out = (H + 2 * pad - kernel) // stride + 1
    cols = rng_for(kernel).standard_normal((N, C * kernel * kernel * out * out))
    f = run_calls(col2im, [(cols, (N, C, H, H), kernel, stride, pad)], **EXACT)
    no_internal_errors(f)
    assert f.stats()["compiles"] == 1


def _ir_size(frames):
    lowered = tj.jit(overlap_add, cache=False).lower(frames, 1)
    return len(lowered.llvm_ir)


def test_overlapping_updates_make_a_program_linear_in_their_number():
    # Each update read the one before twice (at the index and shifted and back): the
    # kernel doubled per update. Now 16 frames cost about twice 8.
    small, large = _ir_size(np.ones((8, 3))), _ir_size(np.ones((16, 3)))
    assert large < 3 * small, (small, large)


def test_overlap_add_of_a_dynamic_number_of_frames():
    frames = rng_for(11).standard_normal((40, 4))
    f = run_calls(overlap_add, [(frames, 2), (frames[:37], 2), (frames[:35], 3)], **EXACT,
                  dynamic=True)
    no_internal_errors(f)


def test_signed_zeros_and_nans_outside_the_region_stay():
    def shifted(x, v):
        y = x.copy()
        for i in range(3):
            y[i:i + 2] *= v
        return y

    x = np.array([-0.0, 1.0, np.nan, -0.0, np.inf, -0.0])
    result = jitted(shifted)(x, np.array([2.0, -0.0]))
    want = shifted(x, np.array([2.0, -0.0]))
    np.testing.assert_array_equal(np.signbit(result), np.signbit(want))
    np.testing.assert_array_equal(result, want)

