"""The own GEMM's combine entry (``tj_sgemm_own_combine``): the epilogue's value meets a
second matrix ``D`` of C's shape - an SGD update ``w - lr * (x.T @ g)``, a residual
``r + (x @ w + b)``, a relu's backward mask ``where(h > 0, g @ w.T, 0)`` - per row panel in
cache, not as a pass over C of its own.

Checked against NumPy over the GEMM's own product, bit for bit: the entry itself in both
instruction sets (``gemm.matmul``) over 0, 1, odd and prime sizes, transposed operands,
a strided ``D`` and NaN/Inf/-0.0 in ``D`` and C; and compiled programs whose root the
matcher (``codegen/matmul._combination``) sends to it, against the same program compiled
without it. Expressions it does not compute exactly keep the loop over C. The MLP train
step, compiled with the own GEMM, against eager NumPy at odd sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.codegen import blas, gemm, matmul

pytestmark = pytest.mark.skipif(
    not gemm.supported(),
    reason="tracejit's own GEMM needs AVX-512F or AVX2 with FMA, which this host lacks")

COMBINE = "tj_sgemm_own_combine"
ISAS = [isa for isa in ("avx512", "avx2") if gemm.supported(isa)]
LR = 0.1

# (combine, NumPy over the epilogue's value v and D)
REFERENCES = {
    "add": lambda v, d, s: d + s * v,
    "subtract": lambda v, d, s: d - s * v,
    "where_positive": lambda v, d, s: np.where(d > 0, v, np.float32(0)),
    "unless_nonpositive": lambda v, d, s: np.where(d <= 0, np.float32(0), v),
}


def assert_same_bits(got, want, what):
    """Equal values, the same sign on zeros, NaN where NaN."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32, what
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), what
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), what


def with_specials(array, rng):
    flat = array.reshape(-1)
    if flat.size:
        places = rng.choice(flat.size, size=min(flat.size, 4), replace=False)
        flat[places] = [np.nan, np.inf, -np.inf, -0.0][: len(places)]
    return array


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m, k, n", [(0, 5, 7), (5, 0, 7), (1, 1, 1), (7, 13, 31),
                                     (17, 257, 33), (131, 64, 300)])
def test_entry_matches_numpy(isa, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((k, m)).astype(np.float32).T  # read transposed
    b = rng.standard_normal((k, n)).astype(np.float32)
    d = with_specials(rng.standard_normal((m, n + 3)).astype(np.float32), rng)[:, 2:n + 2]
    d[:, : n // 3] = 0.0  # the masks' ties
    bias = rng.standard_normal(n).astype(np.float32)
    product = gemm.matmul(a, b, isa=isa)
    with np.errstate(all="ignore"):
        for combine, reference in REFERENCES.items():
            for scale in (LR, 1.0):
                got = gemm.matmul(a, b, isa=isa, other=d, combine=combine, scale=scale)
                assert_same_bits(got, reference(product, d, np.float32(scale)),
                                 f"{isa} {combine} {scale}")
            got = gemm.matmul(a, b, isa=isa, other=d, combine=combine, scale=LR, bias=bias)
            assert_same_bits(got, reference(product + bias, d, np.float32(LR)),
                             f"{isa} {combine} with bias")


def test_entry_refuses_what_it_does_not_compute():
    a = b = np.ones((3, 3), np.float32)
    with pytest.raises(ValueError, match="without an activation"):
        gemm.matmul(a, b, other=a, combine="add", activation="relu")
    with pytest.raises(ValueError, match="combine must be one of"):
        gemm.matmul(a, b, other=a, combine="multiply")
    with pytest.raises(ValueError, match="other"):
        gemm.prepared(a, b, np.empty((3, 3), np.float32), other=np.ones((3, 4), np.float32),
                      combine="add")


def sgd_update(x, g, w):
    return w - LR * (x.T @ g)


def sgd_update_scale_after(x, g, w):
    return w - (x.T @ g) * np.float32(0.5)


def residual(x, w, b, r):
    return r + (x @ w + b)


def residual_first(x, w, b, r):
    return (b + x @ w) + r


def mask_of_relu_output(h, g, w):
    return np.where(h > 0, g @ w.T, 0)


def nn_relu_backward_mask(h, g, w):
    return np.where(h <= 0, 0.0, g @ w.T)


def zero_first_mask(h, g, w):
    return np.where(0 < h, g @ w.T, 0.0)


# name: (function, its arguments' shapes given (m, k, n), NumPy over the product C)
FUSED = {
    "w - lr * (x.T @ g)": (sgd_update, lambda m, k, n: [(k, m), (k, n), (m, n)],
                           lambda c, x, g, w: w - np.float32(LR) * c),
    "w - (x.T @ g) * 0.5": (sgd_update_scale_after, lambda m, k, n: [(k, m), (k, n), (m, n)],
                            lambda c, x, g, w: w - c * np.float32(0.5)),
    "r + (x @ w + b)": (residual, lambda m, k, n: [(m, k), (k, n), (n,), (m, n)],
                        lambda c, x, w, b, r: r + (c + b)),
    "(b + x @ w) + r": (residual_first, lambda m, k, n: [(m, k), (k, n), (n,), (m, n)],
                        lambda c, x, w, b, r: (b + c) + r),
    "where(h > 0, g @ w.T, 0)": (mask_of_relu_output, lambda m, k, n: [(m, n), (m, k), (n, k)],
                                 lambda c, h, g, w: np.where(h > 0, c, np.float32(0))),
    "where(h <= 0, 0, g @ w.T)": (nn_relu_backward_mask,
                                  lambda m, k, n: [(m, n), (m, k), (n, k)],
                                  lambda c, h, g, w: np.where(h <= 0, np.float32(0), c)),
    "where(0 < h, g @ w.T, 0)": (zero_first_mask, lambda m, k, n: [(m, n), (m, k), (n, k)],
                                 lambda c, h, g, w: np.where(0 < h, c, np.float32(0))),
}


def product_of(name, args):
    """The own GEMM's product, as the compiled kernel's C holds it."""
    function = FUSED[name][0]
    if function in (sgd_update, sgd_update_scale_after):
        return gemm.matmul(args[0].T, args[1])
    if function in (residual, residual_first):
        return gemm.matmul(args[0], args[1])
    return gemm.matmul(args[1], args[2].T)


def compile_own(function, args, monkeypatch, fused=True):
    with monkeypatch.context() as patch, blas.gemm_override("own"):
        if not fused:
            patch.setattr(matmul, "_combination", lambda *arguments: None)
        compiled = tj.jit(cache="memory")(function)
        lowered = compiled.lower(*args)
        compiled(*args)
    return compiled, lowered


def run(compiled, args):
    result = compiled(*args)
    assert compiled.stats()["compiled_calls"] >= 1 and not compiled.stats()["eager_calls"]
    return result


def arguments(name, m, k, n, seed, specials=False):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(shape).astype(np.float32) for shape in FUSED[name][1](m, k, n)]
    if specials:
        for array in args:
            with_specials(array, rng)
    if "h" in name:  # a relu's output: zeros where the mask cuts
        args[0] = np.maximum(args[0], 0)
        if specials and args[0].size:
            args[0].reshape(-1)[0] = np.nan
    return args


@pytest.mark.parametrize("name", list(FUSED))
@pytest.mark.parametrize("m, k, n, specials", [(1, 1, 1, False), (7, 13, 31, True),
                                               (37, 64, 129, True), (100, 10, 257, False)])
def test_compiled_roots_call_the_combine_entry(name, m, k, n, specials, monkeypatch):
    args = arguments(name, m, k, n, seed=m + k + n, specials=specials)
    with np.errstate(all="ignore"):  # the traced call warns about NaN as NumPy does
        compiled, lowered = compile_own(FUSED[name][0], args, monkeypatch)
        unfused, unfused_lowered = compile_own(FUSED[name][0], args, monkeypatch, fused=False)
    assert COMBINE in lowered.llvm_ir, f"{name}: the combine entry is not called"
    assert len(lowered.kernels) == 1, name
    got = run(compiled, args)
    with np.errstate(all="ignore"):
        assert_same_bits(got, FUSED[name][2](product_of(name, args), *args), f"{name}: NumPy")
    assert COMBINE not in unfused_lowered.llvm_ir
    assert_same_bits(got, run(unfused, args), f"{name}: the loop over C")


def test_empty_sizes(monkeypatch):
    for m, k, n in [(0, 3, 5), (4, 0, 5), (4, 3, 0)]:
        args = arguments("w - lr * (x.T @ g)", m, k, n, seed=1)
        compiled, _ = compile_own(sgd_update, args, monkeypatch)
        np.testing.assert_array_equal(run(compiled, args), sgd_update(*args))


@pytest.mark.parametrize("name, function", [
    ("C - D (the other order)", lambda x, g, w: (x.T @ g) - w),
    ("a float64 scale", lambda x, g, w: w - np.float64(LR) * (x.T @ g)),
    ("relu, then D", lambda x, g, w: np.maximum(x.T @ g, 0) + w),
    ("a per-column D", lambda x, g, w: w[0] - LR * (x.T @ g)),
    ("D >= 0", lambda x, g, w: np.where(w >= 0, x.T @ g, 0.0)),
    ("where(D > 0, C, 1)", lambda x, g, w: np.where(w > 0, x.T @ g, 1.0)),
    ("D * C", lambda x, g, w: w * (x.T @ g)),
])
def test_other_roots_keep_the_loop(name, function, monkeypatch):
    args = arguments("w - lr * (x.T @ g)", 23, 19, 29, seed=5, specials=True)
    with np.errstate(all="ignore"):  # the traced call warns as NumPy does
        compiled, lowered = compile_own(function, args, monkeypatch)
        want = function(*args)
    assert COMBINE not in lowered.llvm_ir, name
    got = run(compiled, args)
    assert got.dtype == want.dtype, name
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_dynamic_batch(monkeypatch):
    """The update's K (the batch) and the mask's rows vary under one compile."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((33, 47)).astype(np.float32)
    with blas.gemm_override("own"):
        compiled = tj.jit(cache="memory", dynamic=True)(sgd_update)
        for batch in [1, 2, 17, 64]:
            x = rng.standard_normal((batch, 33)).astype(np.float32)
            g = rng.standard_normal((batch, 47)).astype(np.float32)
            compiled(x, g, w)
            assert_same_bits(compiled(x, g, w), w - np.float32(LR) * gemm.matmul(x.T, g),
                             f"batch {batch}")
        assert COMBINE in compiled.lower(x, g, w).llvm_ir
    assert not compiled.stats()["eager_calls"]


@pytest.mark.parametrize("setting, batch, inputs, hidden, classes", [("own", 13, 31, 97, 3),
                                                                     ("auto", 1, 17, 33, 5)])
def test_mlp_train_step_matches_eager(setting, batch, inputs, hidden, classes):
    """The hand-written step (relu mask and four SGD updates in GEMM epilogues) and the
    ``value_and_grad`` step against eager NumPy: the loss and every updated weight."""
    from benchmarks.workloads import mlp_train_step, mlp_value_and_grad_step

    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, inputs)).astype(np.float32)
    labels = rng.integers(0, classes, batch)
    weights = [rng.standard_normal(shape).astype(np.float32) * np.float32(0.3)
               for shape in [(inputs, hidden), (hidden,), (hidden, classes), (classes,)]]
    for step in (mlp_train_step, mlp_value_and_grad_step):
        with blas.gemm_override(setting):
            compiled = tj.jit(cache="memory")(step)
            llvm_ir = compiled.lower(x, labels, *weights, LR).llvm_ir
            compiled(x, labels, *weights, LR)
        assert COMBINE in llvm_ir, step.__name__
        got = compiled(x, labels, *weights, LR)
        want = mlp_train_step(x, labels, *weights, LR)
        assert not compiled.stats()["eager_calls"]
        for index, (value, reference) in enumerate(zip(got, want)):
            np.testing.assert_allclose(value, reference, rtol=2e-5, atol=2e-6,
                                       err_msg=f"{step.__name__} output {index}")


@pytest.mark.parametrize("name, function, fused", [
    ("D a reshape of a buffer", lambda x, w, r: r.reshape(37, 70) + x @ w, True),
    ("a 3-D product folded into rows", lambda x, w, r: r.reshape(1, 37, 70) - 0.25 * (
        x.reshape(1, 37, 50) @ w), True),
    ("D a transpose (no unit-stride rows): the loop", lambda x, w, r: r.reshape(70, 37).T - (
        x @ w), False),
])
def test_views_of_d(name, function, fused, monkeypatch):
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(shape).astype(np.float32) for shape in [(37, 50), (50, 70),
                                                                         (37 * 70,)]]
    compiled, lowered = compile_own(function, args, monkeypatch)
    assert (f"call void @{COMBINE}" in lowered.llvm_ir) == fused, name
    got = run(compiled, args)
    np.testing.assert_allclose(got, function(*args), rtol=1e-5, atol=1e-5, err_msg=name)
    unfused, _ = compile_own(function, args, monkeypatch, fused=False)
    assert_same_bits(got, run(unfused, args), name)
