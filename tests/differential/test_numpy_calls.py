"""The NumPy calls real model code makes (issue 14), eager vs compiled over one size
bucket, with gradients against central finite differences.

Each case is a function of float64 arrays whose sizes vary inside one dynamic bucket
([9, 16]): every size must give NumPy's result (values, dtype, shape), the whole bucket
must compile once, and the compiled backward must equal finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from real_model_checks import all_compiled

import tracejit as tj
from tracejit.testing import assert_compiled_matches_eager

SIZES = (9, 12, 16)  # one bucket: [9, 16]


def sliding_conv(x, w):
    """The im2col idiom: windows of the image contracted with the filters by einsum."""
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwkl,fckl->nfhw", windows, w)


def tensordot_conv(x, w):
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.moveaxis(np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3])), -1, 1)


def attention_scores(q, k):
    return np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])


def stacked_im2col_conv(x, w):
    """im2col with np.stack: one shifted slice per kernel offset, stacked, one matmul."""
    f, c, kh, kw = w.shape
    out_h, out_w = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    patches = np.stack([x[:, :, i:i + out_h, j:j + out_w]
                        for i in range(kh) for j in range(kw)], axis=2)  # N, C, K, OH, OW
    columns = patches.reshape(x.shape[0], c * kh * kw, out_h * out_w)
    out = w.reshape(f, -1) @ columns
    return out.reshape(x.shape[0], f, out_h, out_w)


def broadcast_sum_conv(x, w):
    """Shift and broadcast-sum: per kernel offset, the slice times the weights, summed."""
    f, c, kh, kw = w.shape
    out_h, out_w = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = 0
    for i in range(kh):
        for j in range(kw):
            patch = x[:, None, :, i:i + out_h, j:j + out_w]  # N, 1, C, OH, OW
            out = out + np.sum(patch * w[None, :, :, i, j, None, None], axis=2)
    return out


def top_mean(x):
    """The mean of the three largest scores per row."""
    return np.mean(np.sort(x, axis=-1)[:, -3:], axis=-1)


# name -> (function, shapes as functions of the bucketed size n, differentiable)
CASES = {
    "einsum-matmul": (lambda a, b: np.einsum("ij,jk->ik", a, b),
                      lambda n: [(n, 4), (4, 3)], True),
    "einsum-batched": (lambda a, b: np.einsum("bij,bjk->bik", a, b),
                       lambda n: [(2, n, 3), (2, 3, 5)], True),
    "einsum-transpose": (lambda a: np.einsum("ijk->kij", a), lambda n: [(n, 2, 3)], True),
    "einsum-trace": (lambda a: np.einsum("ii", a), lambda n: [(n, n)], True),
    "einsum-trace-of-product": (lambda a, b: np.einsum("ij,ji->", a, b),
                                lambda n: [(n, 3), (3, n)], True),
    "einsum-ellipsis": (lambda a, b: np.einsum("...ij,jk->...ik", a, b),
                        lambda n: [(2, n, 3), (3, 4)], True),
    "einsum-broadcast-unit": (lambda a, b: np.einsum("ij,ij->i", a, b),
                              lambda n: [(n, 1), (n, 4)], True),
    "einsum-three": (lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c),
                     lambda n: [(n, 3), (3, 4), (4, 2)], True),
    "einsum-bilinear": (lambda a, w, b: np.einsum("bi,oij,bj->bo", a, w, b),
                        lambda n: [(n, 3), (2, 3, 4), (n, 4)], True),
    "attention-scores": (attention_scores, lambda n: [(2, n, 4), (2, n, 4)], True),
    "sliding-window-einsum-conv": (sliding_conv, lambda n: [(2, 3, n, n), (4, 3, 3, 3)],
                                   True),
    "sliding-window-tensordot-conv": (tensordot_conv,
                                      lambda n: [(1, 2, n, n), (3, 2, 2, 3)], True),
    "stacked-im2col-conv": (stacked_im2col_conv, lambda n: [(2, 3, n, n), (4, 3, 3, 2)],
                            True),
    "broadcast-sum-conv": (broadcast_sum_conv, lambda n: [(1, 2, n, n), (3, 2, 2, 3)], True),
    "tensordot": (lambda a, b: np.tensordot(a, b, axes=([1, 2], [0, 1])),
                  lambda n: [(n, 3, 4), (3, 4, 2)], True),
    "dot-nd": (np.dot, lambda n: [(n, 2, 3), (4, 3, 2)], True),
    "norm": (lambda a: np.linalg.norm(a), lambda n: [(n, 3)], True),
    "norm-rows-keepdims": (lambda a: a / np.linalg.norm(a, axis=1, keepdims=True),
                           lambda n: [(n, 3)], True),
    "norm-matrix-inf": (lambda a: np.linalg.norm(a, np.inf), lambda n: [(n, 3)], True),
    "norm-vector-1": (lambda a: np.linalg.norm(a, 1, axis=0), lambda n: [(n, 3)], True),
    "repeat": (lambda a: np.repeat(a, 3, axis=1), lambda n: [(n, 2)], True),
    "repeat-flat": (lambda a: np.repeat(a, 2), lambda n: [(n, 2)], True),
    "tile": (lambda a: np.tile(a, (2, 1, 3)), lambda n: [(n, 2)], True),
    "roll": (lambda a: np.roll(a, 3, axis=0), lambda n: [(n, 2)], True),
    "roll-negative-flat": (lambda a: np.roll(a, -4), lambda n: [(n, 2)], True),
    "cumsum": (lambda a: np.cumsum(a, axis=0), lambda n: [(n, 3)], True),
    "cumsum-flat": (lambda a: np.cumsum(a), lambda n: [(n, 2)], True),
    "sort": (lambda a: np.sort(a, axis=0), lambda n: [(n, 3)], True),
    "top-mean": (top_mean, lambda n: [(2, n)], True),
    "argsort": (lambda a: np.argsort(a, axis=-1, kind="stable"), lambda n: [(3, n)], False),
    "methods": (lambda a: (a.cumsum(axis=0), a.argsort(axis=1, kind="stable"),
                           a.repeat(2, axis=1)), lambda n: [(n, 3)], False),
    "clip-out": (lambda a: np.clip(a, -0.5, 0.5, out=a), lambda n: [(n, 3)], False),
}


def arguments(case, seed):
    _, shapes, _ = CASES[case]
    rng = np.random.default_rng(seed)
    return [tuple(rng.standard_normal(shape) for shape in shapes(n)) for n in SIZES]


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_matches_eager_over_one_bucket(case, differential_tally):
    function = CASES[case][0]
    jitted = tj.jit(function, dynamic=True, cache="memory")
    summary = assert_compiled_matches_eager(jitted, *arguments(case, 0))
    assert jitted.stats()["compiles"] == 1, jitted.explain()
    assert all_compiled(jitted, 2 * len(SIZES)), jitted.stats()
    differential_tally.record("numpy calls", case, summary)


def finite_difference_gradient(loss, inputs, eps=1e-6):
    gradients = []
    for position, value in enumerate(inputs):
        gradient = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            bumped = []
            for sign in (1, -1):
                shifted = [item.copy() for item in inputs]
                shifted[position][index] += sign * eps
                bumped.append(loss(*shifted))
            gradient[index] = (bumped[0] - bumped[1]) / (2 * eps)
        gradients.append(gradient)
    return gradients


@pytest.mark.parametrize("case", [name for name, (_, _, grad) in CASES.items() if grad])
def test_compiled_gradient_matches_finite_differences(case):
    function = CASES[case][0]

    def loss(*inputs):
        return np.sum(np.sin(function(*inputs)))

    jitted = tj.jit(loss, dynamic=True, cache="memory")
    for inputs in arguments(case, 1)[:2]:
        tensors = [tj.tensor(value, requires_grad=True) for value in inputs]
        jitted(*tensors).backward()
        expected = finite_difference_gradient(loss, list(inputs))
        for tensor_input, want in zip(tensors, expected):
            np.testing.assert_allclose(tensor_input.grad, want, rtol=1e-5, atol=1e-6)
    assert jitted.stats()["compiled_calls"] >= 1, jitted.explain()


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.bool_])
def test_einsum_cumsum_sort_keep_numpys_dtypes(dtype):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 5)) * 3).astype(dtype)

    def calls(a):
        return (np.einsum("ii", a), np.einsum("ij,jk->ik", a, a), np.cumsum(a, axis=1),
                np.sort(a, axis=0, kind="stable"), np.argsort(a, kind="stable"))

    rtol = 1e-5 if dtype == np.float32 else None
    assert_compiled_matches_eager(calls, x, rtol=rtol, atol=rtol)


def test_sort_puts_nan_last_and_keeps_infinities():
    x = np.array([[3.0, np.nan, -np.inf, 1.0, np.inf, np.nan, -2.0]])
    assert_compiled_matches_eager(lambda a: (np.sort(a), np.argsort(a, kind="stable")), x)


def test_full_contraction_gives_a_scalar_like_numpy():
    x = np.arange(6.0).reshape(2, 3)
    assert_compiled_matches_eager(lambda a: np.einsum("ij,ij", a, a), x)


def test_repeat_with_traced_counts_runs_eagerly_with_the_reason():
    def spread(x, counts):
        return np.repeat(x, counts)

    jitted = tj.jit(spread, cache="memory")
    x, counts = np.arange(3.0), np.array([1, 0, 2])
    np.testing.assert_array_equal(jitted(x, counts), spread(x, counts))
    assert "shape would depend on data" in jitted.explain()


def conv_by_shifted_slices(x, w):
    """The issue's formulation: the padded input shifted per kernel offset, each shift a
    batched matmul with that offset's weights (NHWC, weights KH, KW, C, F)."""
    height, width = x.shape[1], x.shape[2]
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = 0
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            out = out + padded[:, i:i + height, j:j + width, :] @ w[i, j]
    return out


def test_batched_matmul_with_symbolic_sizes_compiles_for_every_size_of_the_bucket():
    """Regression: a batched BLAS matmul's loop computed a symbolic size inside its body
    and the thread-pool split reused it after the loop; every size after the first failed
    LLVM verification ("Instruction does not dominate all uses!") and ran eagerly."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 3, 3, 4))
    sets = [(rng.standard_normal((2, size, size + 1, 3)), w) for size in (33, 40, 47, 60)]
    jitted = tj.jit(conv_by_shifted_slices, dynamic=True, cache="memory")
    assert_compiled_matches_eager(jitted, *sets)
    assert jitted.stats()["compiles"] == 1 and not jitted.stats()["eager_calls"]


def conv_by_shifted_slices_nchw(x, w):
    """The shifted-slices conv in NCHW: each offset's slice contracted with w[:, :, i, j]."""
    height, width = x.shape[2] - w.shape[2] + 1, x.shape[3] - w.shape[3] + 1
    out = 0
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            patch = np.moveaxis(x[:, :, i:i + height, j:j + width], 1, -1)  # N, H, W, C
            out = out + patch @ w[:, :, i, j].T
    return np.moveaxis(out, -1, 1)


@pytest.mark.parametrize("function", [sliding_conv, tensordot_conv, stacked_im2col_conv,
                                      broadcast_sum_conv, conv_by_shifted_slices_nchw])
def test_user_written_convs_over_several_buckets(function):
    """Each user formulation over three size buckets: one compile per bucket, no eager
    call, NumPy's values."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 3, 3))
    sizes = [(9, 10), (12, 15), (17, 20), (25, 31), (33, 40), (47, 35)]  # 3 buckets
    jitted = tj.jit(function, dynamic=True, cache="memory")
    sets = [(rng.standard_normal((2, 3, h, w_)), w) for h, w_ in sizes]
    assert_compiled_matches_eager(jitted, *sets, rtol=1e-10, atol=1e-10)
    stats = jitted.stats()
    assert stats["compiles"] == 3 and not stats["eager_calls"], jitted.explain()


def test_spectral_norm_is_refused_with_the_reason():
    jitted = tj.jit(lambda a: np.linalg.norm(a, 2), cache="memory")
    x = np.random.default_rng(3).standard_normal((3, 3))
    np.testing.assert_allclose(jitted(x), np.linalg.norm(x, 2))
    assert "SVD" in jitted.explain()


def test_long_sort_runs_eagerly_with_the_reason_and_long_cumsum_compiles():
    """sort's dense composition refuses long axes (an (n, n) matrix): the call runs eagerly
    and gives NumPy's result; cumsum is a scan of its own (codegen/scan.py), NumPy's bits."""
    x = np.random.default_rng(6).standard_normal(5000)
    jitted = tj.jit(np.sort, cache="memory")
    np.testing.assert_array_equal(jitted(x), np.sort(x))
    assert "np.sort along an axis of 5000 elements" in jitted.explain()
    jitted = tj.jit(np.cumsum, cache="memory")
    for _ in range(2):
        np.testing.assert_array_equal(jitted(x), np.cumsum(x))
    assert jitted.stats()["compiled_calls"] >= 1 and not jitted.stats()["eager_calls"]


def test_einsum_size_mismatch_raises_like_numpy():
    a, b = np.ones((3, 2)), np.ones((3, 4))
    with pytest.raises(ValueError):
        np.einsum("ij,ij->i", a, b)
    with pytest.raises(ValueError):
        np.einsum("ij,ij->i", tj.tensor(a), tj.tensor(b))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cumsum_through_infinities_and_nan(dtype):
    """The running sums are products with a triangle of ones: inf * 0 would make every
    sum NaN that an infinity is not in. NumPy: inf after +inf, NaN after both or a NaN."""
    x = np.array([[1.0, np.inf, 2.0, -np.inf, 3.0], [np.nan, 1, 2, 3, 4],
                  [1, 2, -np.inf, 5, 6], [1, 2, 3, 4, 5], [np.inf, np.inf, 0, 0, 1]],
                 dtype=dtype)
    for function in (lambda a: np.cumsum(a, axis=1), lambda a: np.cumsum(a, axis=0),
                     np.cumsum):
        jitted = tj.jit(function, cache="memory")
        with np.errstate(invalid="ignore"):
            want = function(x)
            for _ in range(2):
                got = jitted(x)
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
            eager_tensor = function(tj.tensor(x)).data  # the composition eagerly, on Tensors
        np.testing.assert_array_equal(eager_tensor, want)
