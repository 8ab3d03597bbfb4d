"""Leftovers round 22's helpers reported on model-style code: a crash where NumPy runs
(eager ``value_and_grad`` of a state buffer filled through a view), a needless eager run
(a uint8 buffer filled in a loop; a list of traced scalars stored into a row). Each compares
compiled with eager NumPy bit for bit, and gradients with finite differences."""

from __future__ import annotations

import numpy as np
from real_model_checks import finite_differences

import tracejit
from tracejit import jit

LAYERS, WIDTH = 2, 3


def _rwkv_style_loss(x, w):
    # RWKV-style per-layer state (x, num, den) written into a view of a buffer made here
    state = np.zeros((LAYERS, 3, WIDTH))
    h = x
    for i in range(LAYERS):
        num = h * w
        den = np.tanh(h)
        state[i][:3] = (h, num, den)
        h = num + den * state[i][0]
    return state.sum() + (h * h).sum()


def test_eager_value_and_grad_of_a_tuple_written_into_a_view_of_a_buffer():
    # (helper-156) eager value_and_grad raised TensorError at state[i][:3] = (h, num, den):
    # the Tensors went into a view of the plain ndarray; now the buffer gets a Tensor
    # stand-in and the gradient matches finite differences and jit(value_and_grad)
    x, w = np.linspace(-1.0, 1.0, WIDTH), np.linspace(0.5, 1.5, WIDTH)
    evaluate = tracejit.value_and_grad(_rwkv_style_loss, argnums=(0, 1))
    value, (grad_x, grad_w) = evaluate(x, w)
    assert value == _rwkv_style_loss(x, w)
    np.testing.assert_allclose(
        grad_x, finite_differences(lambda v: _rwkv_style_loss(v, w), x), rtol=1e-6)
    np.testing.assert_allclose(
        grad_w, finite_differences(lambda v: _rwkv_style_loss(x, v), w), rtol=1e-6)
    compiled_value, (compiled_x, compiled_w) = jit(evaluate, cache="memory")(x, w)
    np.testing.assert_allclose(compiled_value, value, rtol=1e-12)
    np.testing.assert_allclose(compiled_x, grad_x, rtol=1e-12)
    np.testing.assert_allclose(compiled_w, grad_w, rtol=1e-12)


def _to_bytes(x):
    out = np.zeros(x.shape, np.uint8)
    for t in range(len(x)):
        out[t] = (x[t] * 255).astype(np.uint8)
    return out


def test_a_uint8_buffer_filled_row_by_row_compiles_for_every_length():
    # (helper-160) with the length dynamic the vectorized loop's rows are reshaped into the
    # uint8 result, which schedule refused as 'a uint8 view of an argument': every call
    # after the first ran through the trace, none compiled
    f = jit(_to_bytes, cache="memory")
    rng = np.random.default_rng(0)
    for length in (4, 5, 5, 9, 9):
        x = rng.random((length, 3))
        got, want = f(x), _to_bytes(x)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    stats = f.stats()
    # (a variant's first call may run the trace's program; a repeat runs compiled code)
    assert stats["compiled_calls"] >= 2 and not stats["eager_calls"], f.explain()
    assert stats["compiled_calls"] + stats["traced_calls"] == 5, f.explain()
    # NaN (NumPy's cast is the platform's there) still side-exits to NumPy's own result
    x = rng.random((9, 3))
    x[4, 1] = np.nan
    with np.errstate(invalid="ignore"):
        got, want = f(x), _to_bytes(x)
    assert np.array_equal(got, want) and f.stats()["eager_calls"], f.explain()


def _summary_rows(x, k):
    out = np.zeros((2, 2), x.dtype)
    out[0] = [x.sum(), x[k]]
    out[1, :] = (x.max(), 1)
    return out


def test_a_list_of_traced_scalars_stored_into_a_row_of_a_buffer_compiles():
    # (helper-158) out[0] = [x.sum(), x[0]] into a NumPy buffer made here ran eagerly as
    # untraceable (the list was converted to a NumPy array); now it is the items' stack
    for x in (np.linspace(0.0, 1.0, 3), np.linspace(0.0, 1.0, 3, dtype=np.float32)):
        f = jit(_summary_rows, cache="memory")
        for k in (0, 0, 2, 2):
            got, want = f(x, k), _summary_rows(x, k)
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert f.stats()["compiled_calls"] >= 2 and not f.stats()["eager_calls"], f.explain()


def test_a_list_of_traced_ints_stored_into_an_int32_row_raises_as_numpy_past_its_range():
    # NumPy converts each NumPy scalar of the list with int() into int32: OverflowError past
    # its range, where a compiled cast would wrap
    def fill(x, k):
        out = np.zeros((2, 2), np.int32)
        out[0] = [x.sum(), x[k]]
        return out

    f = jit(fill, cache="memory")
    small = np.arange(3)
    for _ in range(2):
        assert np.array_equal(f(small, 1), fill(small, 1)) and f(small, 1).dtype == np.int32
    assert f.stats()["compiled_calls"] >= 1, f.explain()
    big = np.array([2**40, 1, 2])
    for function in (fill, f):
        try:
            function(big, 0)
        except OverflowError as error:
            assert "out of bounds for int32" in str(error)
        else:
            raise AssertionError(f"{function} stored a wrapped value")


def test_eager_value_and_grad_of_a_list_of_tensors_stored_into_a_row():
    # out[0] = [x.sum(), x[0]] in eager value_and_grad raised TensorError as the nested
    # form did: the list is stacked into a Tensor first
    def loss(x):
        out = _summary_rows(x, 0)
        return (out * out).sum()

    x = np.linspace(0.1, 1.0, 3)
    value, gradient = tracejit.value_and_grad(loss)(x)
    assert value == loss(x)
    np.testing.assert_allclose(gradient, finite_differences(loss, x), rtol=1e-6)
