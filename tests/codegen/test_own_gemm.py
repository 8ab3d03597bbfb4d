"""tracejit's own float32 GEMM (``codegen/gemm.py``) against NumPy's float64 matmul.

Raw products (``gemm.matmul``, which calls the entry compiled kernels call) over tables of
sizes (odd, prime, 0 and 1), every transpose layout, views with a row stride, NaN and Inf,
each for both instruction sets the host can run (the ``isa`` fixture: the AVX2 code is
forced on an AVX-512 host, and its assembly checked for AVX-512 instructions); then
compiled programs through ``tj.jit`` with the own GEMM forced (``blas.gemm_override
("own")``): an MLP layer ``relu(x @ W + b)``, its value and gradient, transposed operands
inside the function, non-contiguous and dynamic-shape inputs, a warm start from the disk
cache in a new process, and ``TRACEJIT_GEMM_ISA=avx2`` in a new process.

The error bound is float32's: ``|C - C64| <= 2 K eps32 (|A| @ |B|)`` elementwise (each
element is a sum of K products, rounded in some order; the factor 2 leaves room for the
accumulation order, not for wrong elements: those are off by O(|A| @ |B|)).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tracejit as tj
from tracejit.codegen import blas, gemm, llvm
from tracejit.codegen.gemm_ir import ISAS

pytestmark = pytest.mark.skipif(
    not gemm.supported(),
    reason="tracejit's own GEMM needs AVX-512F or AVX2 with FMA, which this host lacks "
           "(matmul keeps OpenBLAS; its tests are elsewhere)")

EPS32 = 2.0 ** -24
SIZES = [1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 255, 256, 257, 784]
SMALL = [size for size in SIZES if size <= 100]
LAYOUTS = list(itertools.product((False, True), repeat=2))  # (A transposed, B transposed)


@pytest.fixture(params=list(ISAS))
def isa(request):
    """Each instruction set's code, where the host can run it."""
    if not gemm.supported(request.param):
        pytest.skip(f"this host cannot run the {request.param} GEMM")
    return request.param


def operands(rng, m, n, k, trans_a, trans_b):
    """``op(A)`` (m x k) and ``op(B)`` (k x n): transposes are views of row-major arrays."""
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def assert_product(got, a, b, label=""):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = 2 * max(a.shape[1], 1) * EPS32 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert got.shape == want.shape and got.dtype == np.float32, label
    error = np.abs(got - want)
    assert np.all(error <= bound), (
        f"{label}: worst error {np.max(error / bound):.2f} x the float32 bound")


def test_small_sizes(isa):
    """M, N and K over the small sizes, the layouts taking turns (the direct and packed
    paths, every tile edge: 1, 7, 15, 17, 31, 33 leave partial register tiles and masked
    vectors; 255-257 cut K into blocks)."""
    rng = np.random.default_rng(1)
    triples = itertools.product(SMALL[:10], SMALL[:10], [1, 7, 16, 17, 33, 64, 100, 255, 257])
    for index, (m, n, k) in enumerate(triples):
        trans_a, trans_b = LAYOUTS[(index + index // 9) % 4]
        a, b = operands(rng, m, n, k, trans_a, trans_b)
        out = np.full((m, n), np.nan, np.float32)  # never read: stale NaN must not leak
        assert_product(gemm.matmul(a, b, out=out, isa=isa), a, b,
                       f"{m}x{n} k{k} {trans_a} {trans_b}")


@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS)
def test_tile_edges_every_layout(trans_a, trans_b, isa):
    rng = np.random.default_rng(2)
    for m, n, k in itertools.product([1, 8, 17, 33], [1, 16, 17, 33], [1, 8, 31, 256]):
        a, b = operands(rng, m, n, k, trans_a, trans_b)
        assert_product(gemm.matmul(a, b, isa=isa), a, b, f"{m}x{n} k{k} {trans_a} {trans_b}")


@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS)
def test_k_blocks(trans_a, trans_b, isa):
    """K at, just past and well past the instruction set's K block (``kc``: 512 for
    AVX-512, 256 for AVX2): one block, two unequal halves, three; the first block stores C
    (stale NaN in ``out`` never leaks), later ones add to it. M and N leave edge tiles,
    whose prefetched addresses stay inside C."""
    rng = np.random.default_rng(5)
    kc = ISAS[isa].kc
    for m, n, k in itertools.product([9, 130], [17, 300], [kc - 1, kc, kc + 1, 2 * kc + 3]):
        a, b = operands(rng, m, n, k, trans_a, trans_b)
        out = np.full((m, n), np.nan, np.float32)
        assert_product(gemm.matmul(a, b, out=out, isa=isa), a, b,
                       f"{m}x{n} k{k} {trans_a} {trans_b}")


@pytest.mark.parametrize("trans_a", [False, True])
def test_few_rows_over_a_big_b(trans_a, isa):
    """Few rows of C (up to ``DIRECT_ROWS``) over a B too big to stay in cache whole: B is
    read in place one column panel at a time by each row panel (no packing), for every
    row count of a register tile's edge, column edges, and B rows a power of two apart."""
    rng = np.random.default_rng(6)
    for m, n, k in itertools.product([1, 2, 7, 8, 9, 31, 33, 63, 64, 65], [255, 1024, 1057],
                                     [64, 300]):
        a, b = operands(rng, m, n, k, trans_a, False)
        out = np.full((m, n), np.nan, np.float32)
        assert_product(gemm.matmul(a, b, out=out, isa=isa), a, b, f"{m}x{n} k{k} {trans_a}")


def test_large_sizes(isa):
    """Sizes past one cache block (K > kc splits K; M > 128 several row blocks; N > 32
    several panels), layouts taking turns; products this big are split over the pool's
    threads, by rows or by columns."""
    rng = np.random.default_rng(3)
    triples = itertools.product([1, 17, 257, 784], [1, 33, 256, 784], [17, 255, 784])
    for index, (m, n, k) in enumerate(triples):
        trans_a, trans_b = LAYOUTS[(index + index // 3 + index // 12) % 4]
        a, b = operands(rng, m, n, k, trans_a, trans_b)
        assert_product(gemm.matmul(a, b, isa=isa), a, b, f"{m}x{n} k{k} {trans_a} {trans_b}")


def test_mlp_and_rnn_shapes(isa):
    rng = np.random.default_rng(4)
    for m, n, k, trans_a, trans_b in [(512, 1024, 784, False, False),
                                      (784, 1024, 512, True, False),
                                      (512, 1024, 10, False, True),
                                      (1024, 10, 512, True, False),
                                      (512, 10, 1024, False, False),
                                      (16, 64, 64, False, False),
                                      (16, 64, 64, False, True),
                                      (64, 64, 16, True, False)]:
        a, b = operands(rng, m, n, k, trans_a, trans_b)
        assert_product(gemm.matmul(a, b, isa=isa), a, b, f"{m}x{n} k{k}")


@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS)
@pytest.mark.parametrize("m, n", [(17, 9), (9, 64), (65, 65), (1, 2000), (1024, 10),
                                  (10, 1024), (33, 31)])
def test_products_just_past_the_split_threshold(m, n, trans_a, trans_b, isa):
    """Products of ``PARALLEL_WORK`` multiply-adds (K chosen for it) are split over the
    pool, one fewer K stays on the calling thread: both sides agree with NumPy, with and
    without the bias/relu epilogue. The shapes give a last chunk of one row (17 rows:
    chunks of 16), a split by columns into whole panels (9 x 64) or, for AVX2's 24-wide
    panels, a short last chunk (48 + 16), a row chunk ending inside a register tile
    (65 rows: 40 + 25), one row of C over many columns, the MLP step's small products, and
    an extent too short to split (33 x 31)."""
    from tracejit.codegen.gemm_driver import PARALLEL_WORK

    rng = np.random.default_rng(23)
    k_split = -(-PARALLEL_WORK // (m * n))
    for k in (k_split - 1, k_split):
        a, b = operands(rng, m, n, k, trans_a, trans_b)
        out = np.full((m, n), np.nan, np.float32)
        assert_product(gemm.matmul(a, b, out=out, isa=isa), a, b, f"{m}x{n} k{k}")
        bias = rng.standard_normal(n).astype(np.float32)
        want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
        got = gemm.matmul(a, b, out=out, isa=isa, bias=bias, activation="relu")
        bound = 2 * (k + 1) * EPS32 * (np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(bias))
        assert np.all(np.abs(got - want) <= bound), f"{m}x{n} k{k} epilogue"


@pytest.mark.parametrize("m, n, k, trans_a, b_columns", [
    (48, 700, 600, False, 704),    # few rows over a big B, K past a packed block of K
    (37, 1031, 257, False, 1031),  # odd: column chunks end inside a register tile
    (131, 521, 23, True, 600),     # primes, transposed A, B a column slice (ldb 600)
    (781, 29, 47, True, 29),       # split by rows over a small B
    # split by rows into several chunks a thread (DIRECT_CHUNKS_PER_THREAD) though C is
    # wider than tall: the batch-64 MLP step's dW1 (B at DIRECT_B_FLOATS exactly), primes
    # with a transposed A and a column slice of B, an untransposed A, and C one row more
    # (AVX-512) than a row panel for every chunk (a last chunk of one row)
    (784, 1024, 64, True, 1024),
    (523, 997, 61, True, 1000),
    (257, 509, 127, False, 509),
    (65, 1031, 63, False, 1031),
])
def test_split_direct_products_have_the_bits_of_single_rows(m, n, k, trans_a, b_columns,
                                                            isa):
    """A product on the direct path split over the pool gives each element the bits it
    gets computed alone: every element is one FMA chain over K wherever its chunk starts,
    so how a product is split never changes its result. Each row of C is checked against
    the same row multiplied on its own (too little work to split), plain, with the
    bias/relu epilogue and with an SGD-update combine."""
    from tracejit.codegen.gemm_driver import PARALLEL_WORK

    assert m * n * k >= PARALLEL_WORK  # split when the pool has threads
    rng = np.random.default_rng(m)
    a, _ = operands(rng, m, n, k, trans_a, False)
    b = rng.standard_normal((k, b_columns)).astype(np.float32)[:, :n]
    bias = rng.standard_normal(n).astype(np.float32)
    weights = rng.standard_normal((m, n)).astype(np.float32)
    for label, options in (("plain", {}), ("bias, relu", dict(bias=bias, activation="relu")),
                           ("combine", dict(combine="subtract", scale=0.1))):
        other = {"other": weights} if "combine" in options else {}
        whole = gemm.matmul(a, b, isa=isa, **options, **other)
        if label == "plain":
            assert_product(whole, a, b, label)
        for row in range(m):
            alone = gemm.matmul(a[row:row + 1], b, isa=isa, **options,
                                **({"other": weights[row:row + 1]} if other else {}))
            assert np.array_equal(whole[row:row + 1], alone, equal_nan=True), (label, row)


def test_packing_an_untransposed_a_in_blocks_of_k(isa):
    """``pack_a`` copies an untransposed A eight k at a time (a vector per row, transposed
    in registers) and the rest of K one at a time: K just under, at and past multiples of
    8, K blocks of the instruction set's ``kc`` cut unevenly, row panels short of ``mr``
    rows, and A a row slice of a wider array (rows further apart than K). A transposed B
    sends every product through packing."""
    rng = np.random.default_rng(24)
    kc = ISAS[isa].kc
    for m, k in itertools.product([1, 3, 7, 8, 9, 15, 130],
                                  [7, 8, 9, 15, 16, 17, 23, 24, 25, kc + 9, 2 * kc + 5]):
        wide = rng.standard_normal((m, k + 5)).astype(np.float32)
        a = wide[:, 2:k + 2]
        b = rng.standard_normal((37, k)).astype(np.float32).T
        out = np.full((m, 37), np.nan, np.float32)
        assert_product(gemm.matmul(a, b, out=out, isa=isa), a, b, f"{m}x37 k{k}")
        assert_product(gemm.matmul(a.astype(np.float64), b.astype(np.float64), isa=isa)
                       .astype(np.float32), a, b, f"float64 {m}x37 k{k}")


@pytest.mark.parametrize("m, n, k", [(1024, 10, 4096), (1024, 10, 2048), (513, 7, 4099),
                                     (2047, 3, 1025), (9, 16, 4096)])
def test_a_big_transposed_a_over_a_small_b(m, n, k, isa):
    """A transposed A over a small B (the backward's dW2 = h.T @ d_logits) is read in place
    up to ``DIRECT_TRANSPOSED_A_FLOATS`` of it per chunk of rows and packed past that: both
    sides of the limit (split over the pool or not: 1024 x 4096 is 2M floats per thread's
    512 rows, 1024 x 2048 just 1M), odd sizes, edge row panels and masked column tiles, with
    and without the epilogue."""
    rng = np.random.default_rng(25)
    a, b = operands(rng, m, n, k, True, False)
    out = np.full((m, n), np.nan, np.float32)
    assert_product(gemm.matmul(a, b, out=out, isa=isa), a, b, f"{m}x{n} k{k}")
    bias = rng.standard_normal(n).astype(np.float32)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    got = gemm.matmul(a, b, out=out, isa=isa, bias=bias, activation="relu")
    bound = 2 * (k + 1) * EPS32 * (np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(bias))
    assert np.all(np.abs(got - want) <= bound), f"{m}x{n} k{k} epilogue"


PRIMES = [2, 3, 5, 13, 23, 29, 37, 97, 131, 257, 521]


@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS)
def test_prime_sizes_and_strided_operands(trans_a, trans_b, isa):
    """Prime (and 1) M, N, K - no size a multiple of either instruction set's tile (AVX-512
    8 x 32, AVX2 4 x 24) or vector - with operands that are column slices of wider arrays
    (and transposes of them), against NumPy's float64 product."""
    rng = np.random.default_rng(20)
    sizes = [1, *PRIMES]
    for index, (m, n, k) in enumerate(itertools.product(sizes[::2], sizes[1::2], sizes[::3])):
        shape_a, shape_b = ((k, m) if trans_a else (m, k)), ((n, k) if trans_b else (k, n))
        a = rng.standard_normal((shape_a[0], shape_a[1] + 3 + index % 5)).astype(np.float32)
        b = rng.standard_normal((shape_b[0], shape_b[1] + 7)).astype(np.float32)
        a, b = a[:, index % 3:][:, :shape_a[1]], b[:, 7:]
        a, b = (a.T if trans_a else a), (b.T if trans_b else b)
        if min(m, k) > 1 and min(k, n) > 1:  # a vector with a stride is copied (it may be)
            assert gemm._layout(a) is not None and gemm._layout(b) is not None
        assert_product(gemm.matmul(a, b, isa=isa), a, b, f"{m}x{n} k{k} {trans_a} {trans_b}")


@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS)
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (7, 13, 5), (17, 33, 0), (100, 33, 300),
                                     (33, 1000, 40), (64, 1024, 784), (784, 300, 512),
                                     (300, 517, 700), (9, 1000, 300), (65, 1000, 100),
                                     (5, 70, 2049)])
def test_bias_and_relu_epilogue(m, n, k, trans_a, trans_b, isa):
    """``relu(A @ B + bias)``, ``A @ B + bias`` and ``relu(A @ B)`` from the epilogue entry,
    on the direct and packed paths, K = 0, and products split by rows and by columns over
    the pool (64 x 1024 @ 784: columns, so each chunk's bias starts at its first column);
    in BLIS order over row blocks with an edge block and K blocks (300 x 517 @ 700);
    a big B read in place by few rows, one column panel at a time (9 x 1000 @ 300, and
    64 x 1024 @ 784 per chunk), and just past that path's limits (65 rows; K = 2049);
    stale NaN in the output does not leak in."""
    rng = np.random.default_rng(21)
    a, b = operands(rng, m, n, k, trans_a, trans_b)
    bias = rng.standard_normal(n).astype(np.float32)
    a64, b64, bias64 = a.astype(np.float64), b.astype(np.float64), bias.astype(np.float64)
    bound = 2 * (k + 1) * EPS32 * (np.abs(a64) @ np.abs(b64) + np.abs(bias64)) + 1e-30
    for with_bias, activation in [(True, "relu"), (True, None), (False, "relu")]:
        want = a64 @ b64 + (bias64 if with_bias else 0)
        want = np.maximum(want, 0) if activation else want
        out = np.full((m, n), np.nan, np.float32)
        got = gemm.matmul(a, b, out=out, isa=isa, bias=bias if with_bias else None,
                          activation=activation)
        assert np.all(np.abs(got - want) <= bound), (with_bias, activation)


def test_epilogue_nan_and_inf(isa):
    """NaN stays NaN through the relu (as ``np.maximum(x, 0)``), a NaN bias makes its
    column NaN, -Inf becomes 0 and +Inf stays."""
    rng = np.random.default_rng(22)
    a, b = operands(rng, 40, 70, 30, False, False)
    a[3, 0] = np.nan
    a[5, :] = 0.0
    b[:, 9] = 0.0
    bias = rng.standard_normal(70).astype(np.float32)
    bias[11] = np.nan
    bias[9] = -np.inf
    bias[12] = np.inf
    got = gemm.matmul(a, b, bias=bias, activation="relu", isa=isa)
    with np.errstate(invalid="ignore"):
        want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[3]).all() and np.isnan(got[:, 11]).all()
    assert np.all(got[np.arange(40) != 3, 9] == 0.0)
    assert np.all(np.isposinf(got[np.arange(40) != 3, 12]))


def test_epilogue_arguments_are_checked():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="bias"):
        gemm.prepared(a, a.T, np.empty((3, 3), np.float32), bias=np.ones(4, np.float32))
    with pytest.raises(ValueError, match="activation"):
        gemm.matmul(a, a.T, activation="gelu")


def test_a_prepared_call_keeps_its_arrays_alive():
    """prepared() passes raw addresses; the call holds the arrays, so temporaries passed
    to it (``prepared(a, b, np.empty(...))``) are not freed under it (before: the call
    wrote into freed memory, and the process aborted in free() at exit)."""
    import gc
    import weakref

    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((5, 3), dtype=np.float32), rng.standard_normal(
        (3, 4), dtype=np.float32)
    d = rng.standard_normal((5, 4), dtype=np.float32)
    for extra in ({}, {"bias": rng.standard_normal(4, dtype=np.float32)},
                  {"other": d.copy(), "combine": "subtract", "scale": 0.5}):
        arrays = [a.copy(), b.copy(), np.empty((5, 4), np.float32)]
        refs = [weakref.ref(array) for array in arrays]
        call = gemm.prepared(*arrays, **extra)
        del arrays
        gc.collect()
        assert all(ref() is not None for ref in refs)
        call()
        out = refs[2]
        want = a.astype(np.float64) @ b + extra.get("bias", 0)
        if "other" in extra:
            want = d - 0.5 * want
        np.testing.assert_allclose(out(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_avx2_code_uses_no_avx512_instructions(dtype):
    """The AVX2 module is pinned to Haswell's instruction set, so what the tests run on an
    AVX-512 host is the code an AVX2-only host runs: ymm registers, no zmm, no masks."""
    if not gemm.supported("avx2"):
        pytest.skip("this host cannot run the avx2 GEMM")
    assembly = llvm.assembly_of(llvm.compile_module(gemm.module_ir("avx2", dtype)).llvm_ir)
    assert "%ymm" in assembly and "vfmadd" in assembly
    assert "%zmm" not in assembly and "{%k" not in assembly


EPS64 = 2.0 ** -53


@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS)
def test_float64_products(trans_a, trans_b, isa):
    """The float64 GEMM (``matmul`` on float64 arrays): odd, prime, 0 and 1 sizes, strided
    operands, the direct and packed paths, splits over the pool, and the epilogue, within
    float64's bound ``2 (K + 1) eps64 (|A| @ |B| + |bias|)``."""
    rng = np.random.default_rng(23)
    triples = [(1, 1, 1), (0, 5, 3), (4, 5, 0), (7, 13, 5), (17, 33, 97), (131, 23, 257),
               (100, 37, 300), (300, 521, 40), (64, 1024, 784), (784, 300, 512)]
    for m, n, k in triples:
        shape_a, shape_b = ((k, m) if trans_a else (m, k)), ((n, k) if trans_b else (k, n))
        a = rng.standard_normal((shape_a[0], shape_a[1] + 3))[:, 3:]  # rows with a stride
        b = rng.standard_normal(shape_b)
        a, b = (a.T if trans_a else a), (b.T if trans_b else b)
        bias = rng.standard_normal(n)
        magnitude = np.abs(a) @ np.abs(b)
        for with_bias, activation in [(False, None), (True, "relu")]:
            want = a @ b + (bias if with_bias else 0)
            want = np.maximum(want, 0) if activation else want
            out = np.full((m, n), np.nan)
            got = gemm.matmul(a, b, out=out, isa=isa, bias=bias if with_bias else None,
                              activation=activation)
            bound = 2 * (k + 1) * EPS64 * (magnitude + np.abs(bias)) + 1e-300
            assert got.dtype == np.float64
            assert np.all(np.abs(got - want) <= bound), (m, n, k, with_bias)


def test_the_host_chooses_its_best_instruction_set():
    chosen = gemm.chosen_isa()
    if gemm.supported("avx512"):
        assert chosen.name == "avx512" or os.environ.get(gemm.ISA_VARIABLE)
    assert chosen is None or gemm.supported(chosen.name)


def test_strided_views_are_read_in_place_and_others_copied(isa):
    """Row strides larger than the row (column slices of a wider array) and transposes of
    them are read where they are; views without a unit-stride axis are copied first."""
    rng = np.random.default_rng(4)
    wide = rng.standard_normal((300, 400)).astype(np.float32)
    views = {
        "column slice": (wide[:37, 5:134], wide[100:229, 3:70]),
        "transposed slice": (wide[10:139, :41].T, wide[:129, 200:333]),
        "both transposed": (wide[:20, 1:260].T, wide[50:83, 7:27].T),
        "every other column": (wide[:33, ::2], wide[:200, 1:61:3]),
        "reversed rows": (wide[::-1, :65], wide[:65, :19]),
    }
    for label, (a, b) in views.items():
        assert_product(gemm.matmul(a, b, isa=isa), a, b, label)
    assert gemm._layout(wide[:37, 5:134]) == (0, 400)
    assert gemm._layout(wide[10:139, :41].T) == (1, 400)
    assert gemm._layout(wide[:33, ::2]) is None


def test_output_rows_with_a_stride(isa):
    rng = np.random.default_rng(5)
    a, b = operands(rng, 40, 50, 300, False, False)
    big = np.full((40, 70), 7.0, np.float32)
    gemm.matmul(a, b, out=big[:, 10:60], isa=isa)
    assert_product(big[:, 10:60].copy(), a, b, "strided out")
    assert np.all(big[:, :10] == 7.0) and np.all(big[:, 60:] == 7.0)  # nothing else written


@pytest.mark.parametrize("m, n, k", [(0, 5, 3), (4, 0, 3), (0, 0, 0), (4, 5, 0), (300, 40, 0),
                                     (1, 1, 0)])
def test_zero_sizes(m, n, k, isa):
    """Empty products; K = 0 gives zeros (overwriting what the output held)."""
    a = np.ones((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    out = np.full((m, n), np.nan, np.float32)
    assert np.array_equal(gemm.matmul(a, b, out=out, isa=isa), np.zeros((m, n), np.float32))
    assert np.array_equal(gemm.matmul(b.T, a.T, isa=isa), np.zeros((n, m), np.float32))


@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS)
@pytest.mark.parametrize("m, n, k", [(7, 5, 3), (16, 64, 64), (100, 33, 300), (300, 600, 40),
                                     (40, 1000, 300)])
def test_nan_and_inf_propagate_like_blas(m, n, k, trans_a, trans_b, isa):
    """A NaN in A makes its row of C NaN, in B its column; an Inf times a nonzero gives Inf
    (or NaN where Infs of both signs meet), Inf times zero NaN - as the float64 product
    and as OpenBLAS (``np.matmul`` on float32) give them."""
    rng = np.random.default_rng(6)
    a, b = operands(rng, m, n, k, trans_a, trans_b)
    a, b = np.array(a, order="F" if trans_a else "C"), np.array(b, order="F" if trans_b else "C")
    a[m // 2, k - 1] = np.nan
    b[k // 2, n - 1] = np.nan
    a[m - 1, 0] = np.inf
    b[0, 0] = 0.0  # Inf * 0: NaN in C[m-1, 0]
    b[k - 1, n // 3] = -np.inf
    got = gemm.matmul(a, b, isa=isa)  # Fortran order: read as the transposed row-major
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
        blas_result = a @ b
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isnan(got), np.isnan(blas_result))
    assert np.array_equal(np.isposinf(got), np.isposinf(want))
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isnan(got[m // 2]).all() and np.isnan(got[:, n - 1]).all()
    finite = np.isfinite(want)
    # A finite element's terms are all finite: the others do not enter its bound.
    a64, b64 = (np.where(np.isfinite(v), v, 0).astype(np.float64) for v in (a, b))
    bound = 2 * k * EPS32 * (np.abs(a64) @ np.abs(b64))
    assert np.all(np.abs(got[finite] - want[finite]) <= bound[finite])


def test_concurrent_callers_get_their_own_workspaces(isa):
    """Python threads multiplying at once (the GIL is released in native code) each claim
    a workspace of their own; more callers than workspaces wait for one."""
    rng = np.random.default_rng(7)
    cases = [operands(rng, 300, 200 + 16 * index, 400, index % 2 == 1, index % 3 == 0)
             for index in range(8)]

    def run(case):
        a, b = case
        return [gemm.matmul(a, b, isa=isa) for _ in range(3)]

    with ThreadPoolExecutor(max_workers=8) as executor:
        results = list(executor.map(run, cases))
    for (a, b), products in zip(cases, results):
        for product in products:
            assert_product(product, a, b, "concurrent")


# --- compiled programs ----------------------------------------------------------------------
def layer(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def compiled_with(setting, function, **options):
    with blas.gemm_override(setting):
        return tj.jit(cache="memory", **options)(function)


def first_two_calls(compiled, *args, setting="own"):
    """The first call's result comes from the trace; the second runs the native code
    (compiled under ``setting``)."""
    with blas.gemm_override(setting):
        compiled(*args)
    result = compiled(*args)
    assert compiled.stats()["compiled_calls"] >= 1 and not compiled.stats()["eager_calls"]
    return result


def assert_layer(got, x, w, b):
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    want = np.maximum(x64 @ w64 + b64, 0.0)
    bound = 2 * (w.shape[0] + 1) * EPS32 * (np.abs(x64) @ np.abs(w64) + np.abs(b64)) + 1e-30
    assert got.dtype == np.float32 and np.all(np.abs(got - want) <= bound)


def test_layer_calls_the_own_gemm_with_its_epilogue():
    rng = np.random.default_rng(8)
    x, w, b = (rng.standard_normal(shape).astype(np.float32)
               for shape in [(100, 784), (784, 257), (257,)])
    compiled = compiled_with("own", layer)
    with blas.gemm_override("own"):
        lowered = compiled.lower(x, w, b)
    assert "tj_sgemm_own" in lowered.llvm_ir and "tj_sgemm" not in lowered.llvm_ir.replace(
        "tj_sgemm_own", "")
    assert len(lowered.kernels) == 1  # bias and relu stay fused after the product
    assert_layer(first_two_calls(compiled, x, w, b), x, w, b)


def test_float64_and_the_blas_setting_keep_openblas():
    rng = np.random.default_rng(9)
    x, w, b = (rng.standard_normal(shape) for shape in [(20, 30), (30, 40), (40,)])
    with blas.gemm_override("own"):
        ir64 = tj.jit(cache="memory")(layer).lower(x, w, b).llvm_ir
    assert "tj_sgemm_own" not in ir64 and "tj_dgemm" in ir64
    x, w, b = (v.astype(np.float32) for v in (x, w, b))
    compiled = compiled_with("blas", layer)
    with blas.gemm_override("blas"):
        assert "tj_sgemm_own" not in compiled.lower(x, w, b).llvm_ir
        assert "tj_sgemm_own" not in (blas.available() or "")
    with blas.gemm_override("own"):
        assert "tj_sgemm_own" in blas.available()


@pytest.mark.parametrize("name, function, shapes", [
    ("x.T @ y", lambda x, y: x.T @ y, [(300, 40), (300, 70)]),
    ("x @ y.T", lambda x, y: x @ y.T, [(40, 300), (70, 300)]),
    ("x.T @ y.T", lambda x, y: np.tanh(x.T @ y.T), [(300, 40), (70, 300)]),
    ("reshape", lambda x, y: x.reshape(60, 200) @ y, [(30, 400), (200, 17)]),
])
def test_transposed_and_reshaped_operands_are_read_in_place(name, function, shapes):
    rng = np.random.default_rng(10)
    x, y = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    compiled = compiled_with("own", function)
    with blas.gemm_override("own"):
        lowered = compiled.lower(x, y)
    assert "tj_sgemm_own" in lowered.llvm_ir
    assert len(lowered.kernels) == 1, f"{name}: the operand was copied by a kernel"
    got = first_two_calls(compiled, x, y)
    want = function(x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))


def test_non_contiguous_arguments():
    rng = np.random.default_rng(11)
    # Separate bases: arguments that share memory run eagerly (by design).
    x = rng.standard_normal((64, 900)).astype(np.float32)[:, 100:884]  # rows 900 apart
    w = rng.standard_normal((784, 900)).astype(np.float32)[:, 3:603:2]  # no unit stride
    b = rng.standard_normal(400).astype(np.float32)[::-1][:300]
    compiled = compiled_with("own", layer)
    assert_layer(first_two_calls(compiled, x, w, b), x, w, b)
    assert_layer(first_two_calls(compiled, np.asfortranarray(x), w.T.copy().T, b), x, w, b)


def test_dynamic_batch_takes_the_own_gemm_in_every_bucket():
    """Symbolic m: the auto rule is decided at run time; every batch size is right."""
    rng = np.random.default_rng(12)
    w, b = rng.standard_normal((64, 64)).astype(np.float32), np.zeros(64, np.float32)
    with blas.gemm_override("auto"):
        compiled = tj.jit(cache="memory", dynamic=True)(layer)
        for batch in [1, 2, 7, 16, 17, 33, 100, 256]:
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            assert_layer(compiled(x, w, b), x, w, b)
            assert_layer(compiled(x, w, b), x, w, b)
    assert not compiled.stats()["eager_calls"]


def gemm_calls(llvm_ir):
    """Which GEMMs optimized IR still calls (LLVM folds the auto rule for static dims)."""
    return {name for name, text in (("own", "tj_sgemm_own"), ("openblas", "@tj_sgemm("))
            if text in llvm_ir}


def test_auto_rule_keeps_small_products_with_a_transposed_b_on_openblas():
    """``auto``: own GEMM, except products with a transposed B under
    ``SMALL_TRANSPOSED_B_WORK`` multiply-adds (decided at run time for symbolic dims)."""
    rng = np.random.default_rng(14)

    def backward_step(dz, w):
        return dz @ w.T

    w = rng.standard_normal((64, 64)).astype(np.float32)
    for batch, expected in [(16, {"openblas"}), (64, {"own"})]:
        dz = rng.standard_normal((batch, 64)).astype(np.float32)
        with blas.gemm_override("auto"):
            lowered = tj.jit(cache="memory")(backward_step).lower(dz, w)
        assert gemm_calls(lowered.llvm_ir) == expected, batch
    with blas.gemm_override("auto"):
        compiled = tj.jit(cache="memory", dynamic=True)(backward_step)
        for batch in [5, 16, 17, 31, 32, 33, 64, 100]:
            dz = rng.standard_normal((batch, 64)).astype(np.float32)
            got = compiled(dz, w)
            got = compiled(dz, w)
            assert_product(got, dz, w.T, f"batch {batch}")
        assert gemm_calls(compiled.lower(dz, w).llvm_ir) == {"own", "openblas"}


def test_auto_rule_on_one_thread_keeps_big_products_on_openblas():
    """With the pool on one thread, products with every dimension big stay on OpenBLAS
    (``ONE_THREAD_BIG_DIM``); with a small dimension they take the own GEMM. The thread
    count is read at run time: both calls are compiled, and the results are right."""
    rng = np.random.default_rng(15)
    for shapes, expected in [([(512, 300), (300, 200)], {"own", "openblas"}),
                             ([(512, 300), (300, 10)], {"own"})]:
        x, w = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
        with blas.gemm_override("auto"):
            compiled = tj.jit(cache="memory")(lambda x, w: x @ w)
            assert gemm_calls(compiled.lower(x, w).llvm_ir) == expected
        assert_product(first_two_calls(compiled, x, w, setting="auto"), x, w, str(shapes))


def mlp_loss(x, w, b, upstream):
    return np.sum(np.maximum(x @ w + b, 0.0) * upstream)


def test_mlp_layer_value_and_grad():
    """jit(value_and_grad) of the layer: the forward product and both backward products
    (x.T @ d and d @ W.T) call the own GEMM; value and gradients match float64 NumPy."""
    rng = np.random.default_rng(13)
    x, w, b = (rng.standard_normal(shape).astype(np.float32)
               for shape in [(64, 100), (100, 33), (33,)])
    pre = x.astype(np.float64) @ w + b
    # Pre-activations within float32 rounding of 0 could take either side of the relu;
    # they get no upstream gradient, so both sides give the same loss and gradients.
    upstream = rng.standard_normal(pre.shape).astype(np.float32) * (np.abs(pre) > 1e-3)
    step = compiled_with("own", tj.value_and_grad(mlp_loss, argnums=(0, 1, 2)))
    with blas.gemm_override("own"):
        assert step.lower(x, w, b, upstream).llvm_ir.count("tj_sgemm_own") >= 3
    value, (dx, dw, db) = first_two_calls(step, x, w, b, upstream)
    mask = (pre > 0) * upstream.astype(np.float64)
    want_value = np.sum(np.maximum(pre, 0) * upstream)
    wants = {"dx": (dx, mask @ w.T.astype(np.float64)),
             "dw": (dw, x.T.astype(np.float64) @ mask),
             "db": (db, mask.sum(axis=0))}
    assert abs(value - want_value) <= 1e-4 * np.sum(np.abs(np.maximum(pre, 0) * upstream))
    for label, (got, want) in wants.items():
        assert got.dtype == np.float32, label
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)),
                                   err_msg=label)


WARM_START = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tracejit as tj
    from tracejit.codegen import gemm, llvm

    compiles = []
    original = llvm.compile_module
    llvm.compile_module = lambda *a, **k: compiles.append(1) or original(*a, **k)

    @tj.jit
    def layer(x, w, b):
        return np.maximum(x @ w + b, 0.0)

    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(64, 300), (300, 40), (40,)])
    got = layer(x, w, b)
    got = layer(x, w, b)
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    llvm_compiles = len(compiles)
    print(json.dumps(dict(error=float(np.max(np.abs(got - want))), llvm_compiles=llvm_compiles,
                          own="tj_sgemm_own" in layer.lower(x, w, b).llvm_ir)))
""")


def test_warm_start_links_the_gemm_from_the_disk_cache(tmp_path):
    """A second process loads the program and the GEMM's object code from the cache: no
    LLVM compile at all (the program's imports include the GEMM because its object code
    calls it)."""
    script = tmp_path / "warm.py"
    script.write_text(WARM_START)
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=str(tmp_path / "cache"),
                       TRACEJIT_GEMM="own")
    runs = []
    for _ in range(2):
        process = subprocess.run([sys.executable, str(script)], env=environment,
                                 capture_output=True, text=True, timeout=300)
        assert process.returncode == 0, process.stderr[-3000:]
        runs.append(json.loads(process.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["own"] and second["own"]
    assert first["llvm_compiles"] >= 2  # the program and the GEMM
    assert second["llvm_compiles"] == 0
    assert first["error"] < 1e-3 and second["error"] < 1e-3


FORCED_ISA = textwrap.dedent("""
    import json
    import numpy as np
    import tracejit as tj
    from tracejit.codegen import gemm

    @tj.jit
    def layer(x, w, b):
        return np.maximum(x @ w + b, 0.0)

    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(37, 300), (300, 41), (41,)])
    got = layer(x, w, b)
    got = layer(x, w, b)
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    print(json.dumps(dict(error=float(np.max(np.abs(got - want))), isa=gemm.chosen_isa().name,
                          own="tj_sgemm_own" in layer.lower(x, w, b).llvm_ir)))
""")


def test_compiled_programs_run_the_forced_avx2_code(tmp_path):
    """``TRACEJIT_GEMM_ISA=avx2``: compiled programs' ``tj_sgemm_own`` is the AVX2 code."""
    if not gemm.supported("avx2"):
        pytest.skip("this host cannot run the avx2 GEMM")
    script = tmp_path / "forced.py"
    script.write_text(FORCED_ISA)
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=str(tmp_path / "cache"),
                       TRACEJIT_GEMM="own", TRACEJIT_GEMM_ISA="avx2")
    process = subprocess.run([sys.executable, str(script)], env=environment,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    result = json.loads(process.stdout.strip().splitlines()[-1])
    assert result["isa"] == "avx2" and result["own"] and result["error"] < 1e-3
