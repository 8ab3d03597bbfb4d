"""Batched matmul in compiled programs (``codegen/matmul.py``'s ``own_batched`` and the own
GEMM's batched entry, ``codegen/gemm_batched.py``) against NumPy in float64.

A table of batched products - odd, prime, 0 and 1 sizes, broadcast batch dims, 1-D
operands, operands transposed by ``swapaxes`` (read in place, not copied) - in float32 and
float64, each through ``tj.jit``; epilogues (bias, relu) fused into the GEMM or run after
it; gradients of ``jit(value_and_grad)`` against finite differences; symbolic (dynamic)
dims; the ``blas`` setting (a loop of OpenBLAS calls) and the AVX2 code forced in a new
process (``TRACEJIT_GEMM_ISA=avx2``).

The error bound is the dtype's: ``|C - C64| <= 2 (K + 1) eps (|A| @ |B| + |bias|)``
elementwise (a wrong element is off by O(|A| @ |B|)).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tracejit as tj
from tracejit.codegen import blas, gemm

pytestmark = pytest.mark.skipif(
    not gemm.supported(),
    reason="the own GEMM's batched entry needs AVX-512F or AVX2 with FMA (batched matmul "
           "keeps OpenBLAS on this host)")

DTYPES = [np.float32, np.float64]
BATCHED_SYMBOLS = tuple(gemm.BATCHED_ENTRIES.values())

# (name, a's shape, b's shape): odd, prime, 0 and 1 sizes; broadcast batch dims; 1-D.
SHAPES = [
    ("odd", (3, 7, 5), (3, 5, 11)),
    ("4-d", (2, 3, 17, 13), (2, 3, 13, 1)),
    ("ones", (1, 1, 1), (1, 1, 1)),
    ("m=0", (4, 0, 3), (4, 3, 5)),
    ("k=0", (4, 3, 0), (4, 0, 5)),
    ("n=0", (4, 3, 2), (4, 2, 0)),
    ("batch=0", (0, 3, 4), (0, 4, 5)),
    ("b without batch", (5, 33, 31), (31, 37)),
    ("a without batch", (31, 37), (5, 37, 29)),
    ("crossed broadcast", (3, 1, 8, 16), (1, 4, 16, 9)),
    ("unit batch in a", (1, 6, 5), (7, 5, 3)),
    ("1-d a", (7,), (3, 7, 5)),
    ("1-d b", (2, 3, 5, 7), (7,)),
    ("attention", (16, 128, 32), (16, 32, 128)),  # split over the pool by entry
    ("big entries", (2, 129, 257), (2, 257, 131)),
    ("one big entry", (1, 300, 301), (301, 299)),  # fewer entries than threads
]
# How each operand reaches the product: as given, or a swapaxes view of a transposed buffer.
LAYOUTS = {
    "a @ b": lambda a, b: a @ b,
    "a @ b.T": lambda a, bt: a @ bt.swapaxes(-1, -2),
    "a.T @ b": lambda at, b: at.swapaxes(-1, -2) @ b,
    "a.T @ b.T": lambda at, bt: at.swapaxes(-1, -2) @ bt.swapaxes(-1, -2),
}


def stored(operand, transposed):
    """The array a function receives: the operand itself, or its last two axes swapped
    (the function swaps them back: a transposed view of a buffer)."""
    return np.ascontiguousarray(operand.swapaxes(-1, -2)) if transposed else operand


def assert_close(got, a, b, bias=None, relu=False, dtype=np.float32):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    if bias is not None:
        want, scale = want + bias, scale + np.abs(bias)
    if relu:
        want = np.maximum(want, 0.0)
    depth = a.shape[-1]
    bound = 2 * (depth + 1) * np.finfo(dtype).eps * scale + 1e-300
    assert got.dtype == dtype and got.shape == want.shape
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)


def run_twice(compiled, *args):
    """The first call's result comes from the trace; the second runs the native code."""
    compiled(*args)
    result = compiled(*args)
    assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()
    return result


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name, a_shape, b_shape", SHAPES, ids=[row[0] for row in SHAPES])
def test_batched_products_match_numpy(name, a_shape, b_shape, layout, dtype):
    transpose_a, transpose_b = layout.startswith("a.T"), layout.endswith("b.T")
    if (transpose_a and len(a_shape) < 2) or (transpose_b and len(b_shape) < 2):
        pytest.skip("a 1-D operand has no transpose")
    rng = np.random.default_rng(len(name) * 7 + len(layout))
    a, b = (rng.standard_normal(shape).astype(dtype) for shape in (a_shape, b_shape))
    function = LAYOUTS[layout]
    compiled = tj.jit(cache="memory")(function)
    arguments = (stored(a, transpose_a), stored(b, transpose_b))
    got = run_twice(compiled, *arguments)
    assert_close(got, a, b, dtype=dtype)
    if 0 not in a_shape + b_shape:
        lowered = compiled.lower(*arguments)
        folded = len(a_shape) > 2 and len(b_shape) == 2 and not transpose_a
        if folded:  # one 2-D product of (... * m, k) @ (k, n)
            assert "batched" not in lowered.llvm_ir and "gemm" in lowered.llvm_ir
        elif len(a_shape) > 2 or len(b_shape) > 2:
            assert any(symbol in lowered.llvm_ir for symbol in BATCHED_SYMBOLS)
        assert len(lowered.kernels) == 1, "an operand was copied by a kernel of its own"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize("epilogue", ["bias", "relu(bias)", "relu", "where relu", "tanh"])
def test_epilogues(epilogue, dtype):
    """Bias and relu are computed by the GEMM per row panel (no loop over C after it);
    tanh runs as the kernel's loop over C. Either way in one kernel."""
    functions = {
        "bias": lambda q, kt, bias: q @ kt.swapaxes(-1, -2) + bias,
        "relu(bias)": lambda q, kt, bias: np.maximum(q @ kt.swapaxes(-1, -2) + bias, 0.0),
        "relu": lambda q, kt, bias: np.maximum(0.0, q @ kt.swapaxes(-1, -2)),
        "where relu": lambda q, kt, bias: tj.nn.relu(q @ kt.swapaxes(-1, -2)),
        "tanh": lambda q, kt, bias: np.tanh(q @ kt.swapaxes(-1, -2) + bias),
    }
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 5, 37, 19)).astype(dtype)
    k = rng.standard_normal((2, 5, 41, 19)).astype(dtype)
    bias = rng.standard_normal(41).astype(dtype)
    compiled = tj.jit(cache="memory")(functions[epilogue])
    kt = stored(k.swapaxes(-1, -2), True)
    got = run_twice(compiled, q, kt, bias)
    lowered = compiled.lower(q, kt, bias)
    assert len(lowered.kernels) == 1
    product = k.swapaxes(-1, -2)
    if epilogue == "tanh":
        want = np.tanh(q.astype(np.float64) @ product + bias)
        np.testing.assert_allclose(got, want, atol=50 * np.finfo(dtype).eps * 19)
        return
    with_bias = bias.astype(np.float64) if "bias" in epilogue else None
    assert_close(got, q, product, bias=with_bias, relu="relu" in epilogue, dtype=dtype)


@pytest.mark.parametrize("setting", ["own", "auto", "blas"])
def test_a_linear_layer_on_a_sequence_batch_is_one_product(setting):
    """``relu(x @ W + b)`` with x ``(batch, seq, d)``: the batch folds into the rows, and
    the own GEMM computes the bias and relu (no loop over C)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 37, 65)).astype(np.float32)
    w = rng.standard_normal((65, 129)).astype(np.float32)
    bias = rng.standard_normal(129).astype(np.float32)

    def layer(x, w, bias):
        return np.maximum(x @ w + bias, 0.0)

    with blas.gemm_override(setting):
        compiled = tj.jit(cache="memory")(layer)
        compiled(x, w, bias)
        ir_text = compiled.lower(x, w, bias).llvm_ir
    assert "batched" not in ir_text
    if setting == "own":
        assert "call void @tj_sgemm_own_epilogue" in ir_text
    got = compiled(x, w, bias)
    assert_close(got, x, w, bias=bias.astype(np.float64), relu=True)


MIXED = [
    ("folded", (8, 12, 16), (16, 10), "float64", "float32"),
    ("batched", (3, 2, 7, 5), (3, 2, 5, 4), "float32", "float64"),
    ("matrices", (7, 5), (5, 9), "float32", "float64"),
    ("transposed", (2, 7, 5), (2, 9, 5), "float64", "float32"),
    ("broadcast", (6, 33), (4, 33, 17), "float64", "float32"),
]


@pytest.mark.parametrize("setting", ["auto", "blas"])
@pytest.mark.parametrize("name, a_shape, b_shape, a_dtype, b_dtype", MIXED,
                         ids=[row[0] for row in MIXED])
def test_float32_operands_of_float64_products_are_converted(name, a_shape, b_shape, a_dtype,
                                                            b_dtype, setting):
    """``x64 @ w32`` is a float64 product, as in NumPy: the float32 operand is converted
    into a copy and the GEMM runs (not the naive loop nest)."""
    rng = np.random.default_rng(len(name))
    a = rng.standard_normal(a_shape).astype(a_dtype)
    b = rng.standard_normal(b_shape).astype(b_dtype)
    transposed = name == "transposed"

    def function(a, b):
        return np.tanh((a @ b.swapaxes(-1, -2)) if transposed else a @ b) + 1.0

    if not blas.openblas() and setting == "blas":
        pytest.skip("no OpenBLAS")
    with blas.gemm_override(setting):
        compiled = tj.jit(cache="memory")(function)
        compiled(a, b)
        ir_text = compiled.lower(a, b).llvm_ir
    assert "malloc" in ir_text and "gemm" in ir_text
    got, want = compiled(a, b), function(a, b)
    assert compiled.stats()["compiled_calls"] >= 1
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_relu_epilogue_keeps_numpys_signed_zeros():
    """``np.maximum(0, C)`` keeps -0.0 and ``np.maximum(C, 0)`` makes it 0.0, batched too."""
    a = np.zeros((3, 4, 2), np.float32)
    a[..., 0] = -1.0
    b = np.zeros((3, 2, 5), np.float32)  # every product -1 * 0 + 0 * 0 = -0.0 + 0.0 ...
    b[:, 0, :] = 0.0
    a[1] = 0.0
    for function in (lambda a, b: np.maximum(0.0, a @ b), lambda a, b: np.maximum(a @ b, 0.0),
                     lambda a, b: np.maximum(-(a @ b), 0.0)):
        compiled = tj.jit(cache="memory")(function)
        got, want = run_twice(compiled, a, b), function(a, b)
        assert np.array_equal(np.signbit(got), np.signbit(want)) and np.array_equal(got, want)


def finite_differences(loss, arguments, eps=1e-6):
    gradients = []
    for position, argument in enumerate(arguments):
        gradient = np.zeros_like(argument)
        for index in np.ndindex(argument.shape):
            shifted = [value.copy() for value in arguments]
            shifted[position][index] += eps
            up = loss(*shifted)
            shifted[position][index] -= 2 * eps
            gradient[index] = (up - loss(*shifted)) / (2 * eps)
        gradients.append(gradient)
    return gradients


def attention_loss(q, k, v, w):
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    weights = tj.nn.softmax(scores, axis=-1)
    return np.sum(np.tanh(weights @ v) * w)


def broadcast_loss(x, w, b):
    return np.sum(np.maximum(x @ w + b, 0.0) ** 2)


@pytest.mark.parametrize("loss, shapes", [
    (attention_loss, [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3), (2, 3, 5, 3)]),
    (broadcast_loss, [(3, 5, 4), (4, 7), (7,)]),
], ids=["attention", "broadcast weight"])
def test_gradients_match_finite_differences(loss, shapes):
    rng = np.random.default_rng(5)
    arguments = [rng.standard_normal(shape) for shape in shapes]
    step = tj.jit(tj.value_and_grad(loss, argnums=tuple(range(len(shapes)))), cache="memory")
    for _ in range(2):
        value, gradients = step(*arguments)
    assert step.stats()["compiled_calls"] >= 1, step.explain()
    np.testing.assert_allclose(value, loss(*arguments), rtol=1e-12)
    for got, want in zip(gradients, finite_differences(loss, arguments)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_dynamic_dims():
    """Symbolic batch and sequence dims: the layout is computed at run time."""
    rng = np.random.default_rng(6)
    compiled = tj.jit(cache="memory", dynamic=True)(LAYOUTS["a @ b.T"])
    for batch, seq in [(2, 5), (3, 9), (7, 16), (4, 33)]:
        q = rng.standard_normal((batch, 2, seq, 8)).astype(np.float32)
        k = rng.standard_normal((batch, 2, seq, 8)).astype(np.float32)
        for _ in range(2):
            assert_close(compiled(q, k), q, k.swapaxes(-1, -2))
    assert not compiled.stats()["eager_calls"]


def test_dynamic_dims_of_folded_and_converted_products():
    """``(batch, seq, d) @ (d, n)`` with symbolic batch and seq: the rows they fold into
    are computed at run time; likewise the size of a converted float32 operand."""
    rng = np.random.default_rng(9)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    layer = tj.jit(cache="memory", dynamic=True)(lambda x, w, bias: np.maximum(x @ w + bias,
                                                                                0.0))
    mixed = tj.jit(cache="memory", dynamic=True)(lambda x, w: np.tanh(x @ w))
    for batch, seq in [(2, 5), (3, 9), (7, 16), (4, 33), (1, 1)]:
        x = rng.standard_normal((batch, seq, 24)).astype(np.float32)
        x64 = x.astype(np.float64)
        for _ in range(2):
            assert_close(layer(x, w, bias), x, w, bias=bias.astype(np.float64), relu=True)
            np.testing.assert_allclose(mixed(x64, w), np.tanh(x64 @ w), rtol=1e-13,
                                       atol=1e-13)
    for compiled in (layer, mixed):
        assert compiled.stats()["compiled_calls"] >= 5 and not compiled.stats()["eager_calls"]


def test_concurrent_callers():
    """Python threads calling batched products at once: the pool takes one job at a time
    (the others run their entries inline) and each thread claims its own workspace."""
    rng = np.random.default_rng(10)
    compiled = tj.jit(cache="memory")(LAYOUTS["a @ b.T"])
    cases = [tuple(rng.standard_normal((16, 64, 32)).astype(np.float32) for _ in range(2))
             for _ in range(6)]
    run_twice(compiled, *cases[0])
    with ThreadPoolExecutor(4) as executor:
        results = list(executor.map(lambda case: [compiled(*case) for _ in range(5)], cases))
    for (a, bt), products in zip(cases, results):
        for product in products:
            assert_close(product, a, bt.swapaxes(-1, -2))


def test_the_blas_setting_loops_over_openblas():
    if not blas.openblas():
        pytest.skip("no OpenBLAS")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 1, 9, 13)).astype(np.float32)
    bt = rng.standard_normal((1, 4, 11, 13)).astype(np.float32)

    def function(a, bt):
        return np.maximum(a @ bt.swapaxes(-1, -2) + 1.0, 0.0)

    with blas.gemm_override("blas"):
        compiled = tj.jit(cache="memory")(function)
        compiled(a, bt)
        ir_text = compiled.lower(a, bt).llvm_ir
    assert "tj_sgemm" in ir_text and not any(symbol in ir_text for symbol in BATCHED_SYMBOLS)
    got = compiled(a, bt)
    want = np.maximum(a.astype(np.float64) @ bt.swapaxes(-1, -2) + 1.0, 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


FORCED_AVX2 = textwrap.dedent("""
    import json
    import numpy as np
    import tracejit as tj
    from tracejit.codegen import gemm

    @tj.jit
    def attention(q, kt, v, bias):
        scores = np.maximum(q @ kt.swapaxes(-1, -2) + bias, 0.0)
        return scores @ v

    def split_heads(qkv):  # heads read in place: strided views (codegen/strided_views.py)
        b, s, w = qkv.shape
        q, k, v = (part.reshape(b, s, 2, w // 6).transpose(0, 2, 1, 3)
                   for part in np.split(qkv, 3, axis=-1))
        return (q @ k.transpose(0, 1, 3, 2)) @ v

    heads = tj.jit(split_heads)
    rng = np.random.default_rng(0)
    errors = []
    for dtype in (np.float32, np.float64):
        q, kt, v = (rng.standard_normal(s).astype(dtype)
                    for s in [(3, 4, 37, 17), (3, 4, 29, 17), (4, 29, 23)])
        bias = rng.standard_normal(29).astype(dtype)
        got = attention(q, kt, v, bias)
        got = attention(q, kt, v, bias)
        q64, kt64, v64 = (x.astype(np.float64) for x in (q, kt, v))
        want = np.maximum(q64 @ kt64.swapaxes(-1, -2) + bias, 0.0) @ v64
        errors.append(float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
        qkv = rng.standard_normal((3, 13, 42)).astype(dtype)
        heads(qkv)
        want = split_heads(qkv.astype(np.float64))
        errors.append(float(np.max(np.abs(heads(qkv) - want)) / np.max(np.abs(want))))
    print(json.dumps(dict(errors=errors, isa=gemm.chosen_isa().name,
                          compiled=attention.stats()["compiled_calls"],
                          batched="_own_batched" in attention.lower(q, kt, v, bias).llvm_ir,
                          # the values' copy and the two products: no other copy
                          heads_copied=len(heads.lower(qkv).kernels) != 3)))
""")


def test_forced_avx2_code_in_a_new_process(tmp_path):
    if not gemm.supported("avx2"):
        pytest.skip("this host cannot run the avx2 GEMM")
    script = tmp_path / "forced.py"
    script.write_text(FORCED_AVX2)
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=str(tmp_path / "cache"),
                       TRACEJIT_GEMM_ISA="avx2")
    process = subprocess.run([sys.executable, str(script)], env=environment,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    result = json.loads(process.stdout.strip().splitlines()[-1])
    assert result["isa"] == "avx2" and result["batched"] and result["compiled"] == 2
    assert not result["heads_copied"]
    assert max(result["errors"][:2]) < 1e-5 and max(result["errors"][2:]) < 1e-12
