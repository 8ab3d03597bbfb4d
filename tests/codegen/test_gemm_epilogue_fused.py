"""Compiled matmuls whose bias and relu run in the own GEMM's epilogue
(``tj_sgemm_own_epilogue``, chosen by ``codegen/matmul.gemm_epilogue``) against NumPy.

With the own GEMM forced (``blas.gemm_override("own")``), ``np.maximum(x @ W + b, 0)``,
``x @ W + b``, ``np.maximum(x @ W, 0)``, their other operand orders and ``nn.relu``'s
``np.where(x <= 0, 0, x)`` must call the
epilogue entry (one kernel, no loop over C) and give, bit for bit, what the same program
gives without the fusion (``gemm_epilogue`` patched to decline) and what NumPy's add and
maximum give over the own GEMM's product (``gemm.matmul``: the entry compiled kernels
call): over odd, prime, 0 and 1 sizes, NaN and Inf in every input, transposed operands
and strided arguments. Expressions the epilogue does not compute exactly (a scalar
added, ``np.maximum(., -0.0)``, ``np.where(x > 0, x, 0)`` (NaN gives 0), a full-size or
per-row addend, float64) keep the loop.
Under the ``auto`` rule the OpenBLAS branch keeps the loop; a new process on one thread
takes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracejit as tj
from tracejit.codegen import blas, gemm, matmul

pytestmark = pytest.mark.skipif(
    not gemm.supported(),
    reason="tracejit's own GEMM needs AVX-512F or AVX2 with FMA, which this host lacks")

EPILOGUE = "tj_sgemm_own_epilogue"


def relu_of_affine(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def affine(x, w, b):
    return x @ w + b


def relu_of_product(x, w, b):
    return np.maximum(x @ w, 0.0)


def zero_first_relu_of_affine(x, w, b):
    return np.maximum(0.0, b + x @ w)


def zero_first_relu_of_product(x, w, b):
    return np.maximum(np.float32(0), x @ w)


def relu_of_row_bias(x, w, b):
    return np.maximum(x @ w + b[None, :], 0)


def nn_relu_of_affine(x, w, b):
    return tj.nn.relu(x @ w + b)  # np.where(x <= 0, 0, x)


def where_negative_of_product(x, w, b):
    product = x @ w
    return np.where(product < 0, 0.0, product)


# (function, the same over NumPy arrays given the product C)
FUSED = {
    "relu(x @ w + b)": (relu_of_affine, lambda c, b: np.maximum(c + b, 0.0)),
    "x @ w + b": (affine, lambda c, b: c + b),
    "relu(x @ w)": (relu_of_product, lambda c, b: np.maximum(c, 0.0)),
    "maximum(0, b + x @ w)": (zero_first_relu_of_affine, lambda c, b: np.maximum(0.0, b + c)),
    "maximum(0, x @ w)": (zero_first_relu_of_product, lambda c, b: np.maximum(np.float32(0), c)),
    "relu(x @ w + b[None])": (relu_of_row_bias, lambda c, b: np.maximum(c + b[None, :], 0)),
    "nn.relu(x @ w + b)": (nn_relu_of_affine, lambda c, b: np.where(c + b <= 0, 0, c + b)),
    "where(x @ w < 0, 0, .)": (where_negative_of_product, lambda c, b: np.where(c < 0, 0.0, c)),
}
# (m, k, n): 0 and 1, odd and prime, register-tile edges, a direct and a packed B.
SHAPES = [(0, 5, 7), (5, 0, 7), (5, 7, 0), (1, 1, 1), (1, 17, 1), (7, 13, 31), (31, 1, 17),
          (17, 257, 33), (100, 784, 257), (64, 10, 1024)]


def compile_own(function, *args, fused=True, monkeypatch=None):
    """``(compiled, lowered)`` with the own GEMM forced; ``fused=False`` builds today's
    path (the GEMM, then a loop over C)."""
    with monkeypatch.context() as patch, blas.gemm_override("own"):
        if not fused:
            patch.setattr(matmul, "gemm_epilogue", lambda kernel: None)
        compiled = tj.jit(cache="memory")(function)
        lowered = compiled.lower(*args)
        compiled(*args)  # the first call runs the trace; compiles
    return compiled, lowered


def run(compiled, *args):
    result = compiled(*args)
    assert compiled.stats()["compiled_calls"] >= 1 and not compiled.stats()["eager_calls"]
    return result


def assert_same_bits(got, want, what):
    """Equal values, the same sign on zeros, NaN where NaN (payloads may differ: LLVM
    and NumPy may commute an add of two NaNs)."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32, what
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), what
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), what


def product_of(x, w):
    """The own GEMM's product (what the compiled kernel's C holds before its epilogue)."""
    with np.errstate(all="ignore"):
        return gemm.matmul(np.asarray(x), np.asarray(w))


def operands(m, k, n, seed, specials=False):
    rng = np.random.default_rng(seed)
    x, w = (rng.standard_normal(shape).astype(np.float32) for shape in [(m, k), (k, n)])
    b = rng.standard_normal(n).astype(np.float32)
    if specials:
        for array in (x, w, b):
            flat = array.reshape(-1)
            places = rng.choice(flat.size, size=min(flat.size, 3), replace=False)
            flat[places] = [np.nan, np.inf, -np.inf][: len(places)]
        b[: n // 2] = -0.0
    return x, w, b


def check_fused(name, x, w, b, monkeypatch, *, call_args=None, function=None, reference=None):
    function = function or FUSED[name][0]
    reference = reference or FUSED[name][1]
    call_args = call_args or (x, w, b)
    compiled, lowered = compile_own(function, *call_args, monkeypatch=monkeypatch)
    assert EPILOGUE in lowered.llvm_ir, f"{name}: the epilogue entry is not called"
    assert len(lowered.kernels) == 1, name
    got = run(compiled, *call_args)
    with np.errstate(all="ignore"):
        assert_same_bits(got, reference(product_of(x, w), b), f"{name}: NumPy over C")
    unfused, lowered = compile_own(function, *call_args, fused=False, monkeypatch=monkeypatch)
    assert EPILOGUE not in lowered.llvm_ir
    assert_same_bits(got, run(unfused, *call_args), f"{name}: today's path")
    return got


@pytest.mark.parametrize("name", list(FUSED))
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_fused_epilogue_matches_numpy(name, m, k, n, monkeypatch):
    x, w, b = operands(m, k, n, seed=m * 1000 + k * 10 + n)
    got = check_fused(name, x, w, b, monkeypatch)
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    want = FUSED[name][1](x64 @ w64, b64)
    bound = 2 * (k + 1) * 2.0 ** -24 * (np.abs(x64) @ np.abs(w64) + np.abs(b64)) + 1e-30
    assert np.all(np.abs(got - want) <= bound), name


@pytest.mark.parametrize("name", list(FUSED))
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (7, 13, 31), (33, 300, 65)])
def test_nan_inf_and_negative_zero_bias(name, m, k, n, monkeypatch):
    x, w, b = operands(m, k, n, seed=7, specials=True)
    check_fused(name, x, w, b, monkeypatch)


@pytest.mark.parametrize("layout, function, operands_of, epilogue, shapes", [
    ("x.T @ w", lambda x, w, b: np.maximum(x.T @ w + b, 0.0), lambda x, w: (x.T, w),
     lambda c, b: np.maximum(c + b, 0.0), [(301, 40), (301, 70)]),
    ("x @ w.T", lambda x, w, b: np.maximum(x @ w.T + b, 0.0), lambda x, w: (x, w.T),
     lambda c, b: np.maximum(c + b, 0.0), [(40, 301), (70, 301)]),
    ("x.T @ w.T", lambda x, w, b: x.T @ w.T + b, lambda x, w: (x.T, w.T),
     lambda c, b: c + b, [(301, 40), (70, 301)]),
    ("reshape", lambda x, w, b: np.maximum(x.reshape(60, 200) @ w, 0.0),
     lambda x, w: (x.reshape(60, 200), w), lambda c, b: np.maximum(c, 0.0),
     [(30, 400), (200, 70)]),
])
def test_transposed_operands(layout, function, operands_of, epilogue, shapes, monkeypatch):
    rng = np.random.default_rng(3)
    x, w = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    b = rng.standard_normal(70).astype(np.float32)
    left, right = operands_of(x, w)
    check_fused(layout, left, right, b, monkeypatch, call_args=(x, w, b), function=function,
                reference=epilogue)


def test_strided_arguments(monkeypatch):
    rng = np.random.default_rng(11)
    # Separate bases: arguments that share memory run eagerly (by design).
    x = rng.standard_normal((64, 900)).astype(np.float32)[:, 100:883]  # rows 900 apart
    w = rng.standard_normal((783, 900)).astype(np.float32)[:, 3:603:2]  # no unit stride
    b = rng.standard_normal(600).astype(np.float32)[::2]  # bias with a stride
    for name in ["relu(x @ w + b)", "x @ w + b", "maximum(0, b + x @ w)"]:
        check_fused(name, x, w, b, monkeypatch)
        check_fused(name, np.asfortranarray(x), w, b, monkeypatch)


def test_dynamic_shapes(monkeypatch):
    rng = np.random.default_rng(12)
    w, b = rng.standard_normal((64, 37)).astype(np.float32), rng.standard_normal(37).astype(
        np.float32)
    with blas.gemm_override("own"):
        compiled = tj.jit(cache="memory", dynamic=True)(relu_of_affine)
        for batch in [1, 2, 7, 16, 17, 33, 100]:
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            compiled(x, w, b)
            assert_same_bits(compiled(x, w, b), np.maximum(product_of(x, w) + b, 0.0),
                             f"batch {batch}")
        assert EPILOGUE in compiled.lower(x, w, b).llvm_ir
    assert not compiled.stats()["eager_calls"]


@pytest.mark.parametrize("name, function, reference", [
    ("scalar added", lambda x, w, b: np.maximum(x @ w + 1.5, 0.0),
     lambda c, b: np.maximum(c + np.float32(1.5), 0.0)),
    ("maximum with -0.0", lambda x, w, b: np.maximum(x @ w + b, -0.0),
     lambda c, b: np.maximum(c + b, -0.0)),
    ("maximum with 0.5", lambda x, w, b: np.maximum(x @ w, 0.5),
     lambda c, b: np.maximum(c, np.float32(0.5))),
    ("full-size addend", lambda x, w, b: x @ w + (x @ w),
     lambda c, b: c + c),
    ("per-row addend", lambda x, w, b: x @ w + b[:, None],
     lambda c, b: c + b[:, None]),
    ("relu then bias", lambda x, w, b: np.maximum(x @ w, 0.0) + b,
     lambda c, b: np.maximum(c, 0.0) + b),
    ("where(x > 0, x, 0): NaN gives 0", lambda x, w, b: np.where(x @ w + b > 0, x @ w + b, 0.0),
     lambda c, b: np.where(c + b > 0, c + b, 0.0)),
    ("where(x <= 0, 0.5, x)", lambda x, w, b: np.where(x @ w <= 0, 0.5, x @ w),
     lambda c, b: np.where(c <= 0, np.float32(0.5), c)),
    ("where(x <= 1, 0, x)", lambda x, w, b: np.where(x @ w <= 1, 0, x @ w),
     lambda c, b: np.where(c <= 1, 0, c)),
])
def test_other_epilogues_keep_the_loop(name, function, reference, monkeypatch):
    rng = np.random.default_rng(5)
    m = 23
    x, w = (rng.standard_normal(shape).astype(np.float32) for shape in [(m, 19), (19, 23)])
    b = rng.standard_normal(23).astype(np.float32)
    x[0, :] = -0.0
    x[1, 3], w[2, 5] = np.nan, np.inf  # NaN in C: a row, a column, and inf - inf
    if name.startswith("where(x <="):
        # A decision on the own GEMM's float32 product carries its rounding bound (bf6ca4e):
        # in a row or column holding NaN or inf the bound is too, its margin guard fails
        # and NumPy decides that call. Compiled on finite data; the specials' call eager.
        special_x, special_w = x, w
        x, w = x.copy(), w.copy()
        x[1, 3], w[2, 5] = 0.5, 2.0
    compiled, lowered = compile_own(function, x, w, b, monkeypatch=monkeypatch)
    assert "tj_sgemm_own" in lowered.llvm_ir
    if name != "relu then bias":  # its bias add may become a kernel of its own
        assert EPILOGUE not in lowered.llvm_ir, name
    assert_same_bits(run(compiled, x, w, b), reference(product_of(x, w), b), name)
    if name.startswith("where(x <="):
        with blas.gemm_override("own"):
            assert_same_bits(compiled(special_x, special_w, b),
                             function(special_x, special_w, b), name)


def test_values_used_elsewhere(monkeypatch):
    """The pre-activation or the product also returned: each result is right."""
    x, w, b = operands(37, 53, 41, seed=6, specials=True)

    def both(x, w, b):
        pre = x @ w + b
        return np.maximum(pre, 0.0), pre

    def product_too(x, w, b):
        product = x @ w
        return np.maximum(product + b, 0.0), product

    for function in (both, product_too):
        with blas.gemm_override("own"):
            compiled = tj.jit(cache="memory")(function)
            compiled(x, w, b)
        first, second = run(compiled, x, w, b)
        c = product_of(x, w)
        with np.errstate(all="ignore"):
            assert_same_bits(first, np.maximum(c + b, 0.0), function.__name__)
            assert_same_bits(second, c + b if function is both else c, function.__name__)


def test_float64_keeps_openblas_and_its_loop():
    rng = np.random.default_rng(9)
    x, w, b = (rng.standard_normal(shape) for shape in [(20, 30), (30, 40), (40,)])
    with blas.gemm_override("own"):
        compiled = tj.jit(cache="memory")(relu_of_affine)
        assert EPILOGUE not in compiled.lower(x, w, b).llvm_ir
        compiled(x, w, b)
    np.testing.assert_allclose(compiled(x, w, b), relu_of_affine(x, w, b), rtol=1e-12,
                               atol=1e-12)


def test_auto_rule_keeps_the_loop_on_its_openblas_branch(monkeypatch):
    """``auto`` decides at run time (the pool's thread count): both branches are compiled,
    the own one calling the epilogue entry and OpenBLAS's followed by the loop."""
    rng = np.random.default_rng(15)
    x, w = (rng.standard_normal(shape).astype(np.float32) for shape in [(512, 300), (300, 200)])
    b = rng.standard_normal(200).astype(np.float32)
    with blas.gemm_override("auto"):
        compiled = tj.jit(cache="memory")(relu_of_affine)
        llvm_ir = compiled.lower(x, w, b).llvm_ir
        compiled(x, w, b)
    assert EPILOGUE in llvm_ir and "@tj_sgemm(" in llvm_ir
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = np.maximum(x64 @ w64 + b, 0.0)
    bound = 2 * 301 * 2.0 ** -24 * (np.abs(x64) @ np.abs(w64) + np.abs(b))
    assert np.all(np.abs(run(compiled, x, w, b) - want) <= bound)


def test_openblas_branch_on_one_thread_in_a_new_process():
    """On one thread the auto rule sends this product to OpenBLAS: the loop applies the
    bias and relu (NumPy's own product is compared bit for bit: both are OpenBLAS's)."""
    script = textwrap.dedent("""
        import numpy as np
        import tracejit as tj
        from tracejit.codegen import blas

        def layer(x, w, b):
            return np.maximum(x @ w + b, 0.0)

        rng = np.random.default_rng(15)
        x = rng.standard_normal((512, 300)).astype(np.float32)
        w = rng.standard_normal((300, 200)).astype(np.float32)
        b = rng.standard_normal(200).astype(np.float32)
        x[:5] = np.nan
        with blas.gemm_override("auto"):
            compiled = tj.jit(cache="memory")(layer)
            compiled(x, w, b)
        got = compiled(x, w, b)
        with np.errstate(all="ignore"):
            want = np.maximum(x @ w + b, 0.0)
        assert not compiled.stats()["eager_calls"]
        assert np.array_equal(got, want, equal_nan=True), np.nanmax(np.abs(got - want))
        print("ok")
    """)
    environment = {**os.environ, "TRACEJIT_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=environment, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
