"""Float32 products a decision reads have NumPy's bits (``codegen/numpy_products.py``): the
compiled call is the one NumPy's matmul makes (sgemm, ssyrk for ``x @ x.T``, sgemv for a
row or a column, sdot for one element), so a relu mask, ``argmax`` or gradient mask on
them decides as NumPy does, ties included.

Products are compared bit for bit (compiled against eager) over odd, prime, 0 and 1
sizes, transposed and strided operands, batches; models with exact ties (mirror-symmetric
data) through relu masks, ``argmax`` and reverse mode's masks; and the same under both
OpenBLAS core types and both own-GEMM instruction sets, in subprocesses (the setting is
fixed per process).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracejit as tj


def plain(x, w):
    a = x @ w
    return a, a > 0


def left_transposed(x, w):
    a = x.T @ w
    return a, a > 0


def right_transposed(x, w):
    a = x @ w.T
    return a, np.argmax(a, axis=1)


def gram(x, w):
    a = x @ x.T  # NumPy: ssyrk and a copy of the triangle
    return a, a > 0


def gram_transposed(x, w):
    a = x.T @ x
    return a, a <= 0


def matrix_vector(x, w):
    a = x @ w[:, 0]  # sgemv, the vector strided (one row: sdot, see below)
    return a, a > 0


def vector_matrix(x, w):
    a = x[0] @ w
    return a, a > 0


def row_dot(x, w):
    a = x[0] @ x[-1]  # sdot of contiguous vectors
    return a, a > 0


def strided(x, w):
    a = x[:, ::2] @ w[::2]  # NumPy copies for sgemm (a row or column: see below)
    return a, a > 0


def batched(x, w):
    a = np.stack([x, -x, 2 * x]) @ w  # NumPy: one call per entry
    return a, a > 0


def folded(x, w):
    a = x.reshape(1, *x.shape) @ w  # not folded into one product when a decision follows
    return a, np.argmax(a, axis=-1)


def bias_relu_mask(x, w):
    a = x @ w + np.float32(0.5)  # the add is its own rounding, after the product
    return np.maximum(a, 0), a <= 0


FORMS = [plain, left_transposed, right_transposed, gram, gram_transposed, matrix_vector,
         vector_matrix, row_dot, strided, batched, folded, bias_relu_mask]
# (m, k, n): 1 and prime sizes, K across OpenBLAS's blocks (Haswell 320, SkylakeX 448)
SHAPES = [(1, 7, 5), (5, 7, 1), (7, 1, 5), (13, 17, 11), (37, 641, 41), (64, 784, 10)]


def operands(form, m, k, n):
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    x = rng.standard_normal((k, m) if form is left_transposed else (m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if form is right_transposed else (k, n)).astype(np.float32)
    return x, w


def assert_same_bits(got, want, where):
    for index, (g, e) in enumerate(zip(got, want)):
        g, e = np.atleast_1d(np.asarray(g)), np.atleast_1d(np.asarray(e))
        assert g.dtype == e.dtype and g.shape == e.shape, (where, index, g.dtype, g.shape)
        assert np.array_equal(g.view(np.uint8), e.view(np.uint8)), (
            where, index, np.flatnonzero(g.view(np.uint8) != e.view(np.uint8))[:5])


@pytest.mark.parametrize("form", FORMS, ids=lambda form: form.__name__)
def test_a_product_a_decision_reads_has_numpys_bits(form):
    f = tj.jit(form, cache="memory")
    shapes = [(m, k, n) for m, k, n in SHAPES
              if not (form is strided and min(m, k, n) < 2 or form is matrix_vector and m == 1)]
    for m, k, n in shapes:  # (the others: the xfail below)
        x, w = operands(form, m, k, n)
        want = form(x, w)
        f(x, w)
        assert_same_bits(f(x, w), want, (m, k, n))
    assert f.stats()["compiled_calls"] >= len(shapes) - 1, f.explain()


@pytest.mark.parametrize("m, k, n", [(0, 5, 3), (4, 0, 3), (4, 5, 0)])
def test_empty_products(m, k, n):
    x = np.ones((m, k), np.float32)
    w = np.ones((k, n), np.float32)
    f = tj.jit(plain, cache="memory")
    f(x, w)
    assert_same_bits(f(x, w), plain(x, w), (m, k, n))


def column_dot(x, w):
    a = x[0] @ w[:, 0]
    return a, a > 0


@pytest.mark.xfail(strict=True, reason="NumPy reads a strided view in place: sdot's strided "
                   "loop for a column, its own loop (no BLAS) for a step slice with a row or "
                   "column of one; compiled code copies the view contiguous first, then "
                   "calls sdot or sgemv, which sum in another order")
@pytest.mark.parametrize("form", [column_dot, strided], ids=lambda form: form.__name__)
def test_strided_views_numpy_reads_in_place(form):
    f = tj.jit(form, cache="memory")
    for m, k, n in [(13, 17, 11), (5, 7, 1), (37, 641, 41)]:
        x, w = operands(form, m, k, n)
        f(x, w)
        assert_same_bits(f(x, w), form(x, w), (m, k, n))


def test_fortran_ordered_arguments():
    """NumPy passes an argument in Fortran order to BLAS transposed (or to sgemv with the
    other order); compiled code would read a C-ordered copy and make the call for that
    layout, another order of sums: such a call runs eagerly (program._layout_checked)."""
    f = tj.jit(plain, cache="memory")
    for m, k, n in [(6, 7, 1), (1, 9, 5)]:
        f(*operands(plain, m, k, n))  # compiled for C-ordered arguments
        x, w = (np.asfortranarray(value) for value in operands(plain, m, k, n))
        f(x, w)
        assert_same_bits(f(x, w), plain(x, w), (m, k, n))
    assert "an argument not C-contiguous" in f.explain()


# --- ties: mirror-symmetric data --------------------------------------------------------------
def mirror_symmetric(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    return (x + x[..., ::-1]) / 2


def tied_layer(rng, rows, inputs, hidden):
    """Rows mirror-symmetric and half the hidden units' weights antisymmetric: those
    units' pre-activations are exactly 0 in exact arithmetic, a sum of rounded pairs in
    float32 (0 or a tiny value of either sign, depending on the order)."""
    X = mirror_symmetric(rng, (rows, inputs))
    W1 = rng.standard_normal((inputs, hidden)).astype(np.float32)
    W1[:, ::2] = (W1[:, ::2] - W1[::-1, ::2]) / 2
    return X, W1


def mlp_step(X, y, W1, b1, W2, b2):
    """cs231n-style forward and backward with the relu mask written out."""
    a = X @ W1 + b1
    h = np.maximum(0, a)
    scores = h @ W2 + b2
    scores = scores - scores.max(axis=1, keepdims=True)
    probs = np.exp(scores)
    probs = probs / probs.sum(axis=1, keepdims=True)
    dscores = probs.copy()
    dscores[np.arange(X.shape[0]), y] -= 1
    dh = dscores @ W2.T
    dh = dh * (a > 0)
    return X.T @ dh, h.T @ dscores, (a > 0).sum(), np.argmax(scores, axis=1)


@pytest.mark.parametrize("rows, inputs, hidden", [(32, 49, 6), (67, 101, 11), (1, 5, 3)])
def test_relu_masks_and_argmax_at_exact_ties(rows, inputs, hidden):
    rng = np.random.default_rng(rows + inputs)
    X, W1 = tied_layer(rng, rows, inputs, hidden)
    W2 = rng.standard_normal((hidden, 3)).astype(np.float32)
    arguments = (X, rng.integers(0, 3, rows), W1, np.zeros(hidden, np.float32), W2,
                 np.zeros(3, np.float32))
    f = tj.jit(mlp_step, cache="memory")
    want = mlp_step(*arguments)
    for _ in range(2):
        got = f(*arguments)
        assert int(got[2]) == int(want[2]) and np.array_equal(got[3], want[3])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5)
    assert f.stats()["compiled_calls"] >= 1, f.explain()


def relu_net_loss(X, W1, b1, W2):
    h = tj.nn.relu(X @ W1 + b1)
    return (h @ W2).sum()


def test_reverse_mode_relu_masks_at_exact_ties():
    """Reverse mode's own mask (``nn.relu``'s ``a > 0``): Tensor gradients of a compiled
    call and ``jit(grad(...))`` against eager, at exact ties."""
    rng = np.random.default_rng(5)
    X, W1 = tied_layer(rng, 32, 49, 6)
    b1, W2 = np.zeros(6, np.float32), rng.standard_normal((6, 3)).astype(np.float32)
    f = tj.jit(relu_net_loss, cache="memory")

    def tensor_gradients(function):
        weights = [tj.tensor(value, requires_grad=True) for value in (W1, b1, W2)]
        function(tj.tensor(X), *weights).backward()
        return [weight.grad for weight in weights]

    want = tensor_gradients(relu_net_loss)
    gradient = tj.grad(relu_net_loss, argnums=(1, 2, 3))
    compiled_gradient = tj.jit(gradient, cache="memory")
    for _ in range(2):
        for got in (tensor_gradients(f), compiled_gradient(X, W1, b1, W2)):
            for g, e in zip(got, want):
                np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-5)
    assert f.stats()["compiled_calls"] >= 1 and compiled_gradient.stats()["compiled_calls"] >= 1


def test_a_product_no_decision_reads_keeps_the_own_gemm():
    """Products only values are read from (a backward's weight gradient) are not
    rerouted; the product a mask reads is."""
    from tracejit.codegen.numpy_products import decision_products
    from tracejit.tracer.tracing import trace

    rng = np.random.default_rng(3)
    X, W1 = tied_layer(rng, 8, 9, 4)
    graph = trace(mlp_step, X, rng.integers(0, 3, 8), W1, np.zeros(4, np.float32),
                  np.ones((4, 3), np.float32), np.zeros(3, np.float32)).graph
    products = [eqn.out.name for eqn in graph.equations if eqn.prim.name == "matmul"]
    chosen = decision_products(graph)
    assert len(products) == 5 and 1 <= len(chosen) <= 2, (products, chosen)


# --- both OpenBLAS kernels, both own-GEMM instruction sets -----------------------------------
SUBPROCESS_CHECK = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {folder!r})
    from test_numpy_products import (assert_same_bits, batched, gram, matrix_vector,
                                     mlp_step, operands, plain, row_dot, tied_layer,
                                     vector_matrix)
    import tracejit as tj
    for form in (plain, gram, matrix_vector, vector_matrix, row_dot, batched):
        f = tj.jit(form, cache="memory")
        for m, k, n in [(6, 7, 1), (37, 641, 41)]:
            x, w = operands(form, m, k, n)
            f(x, w)
            assert_same_bits(f(x, w), form(x, w), (form.__name__, m, k, n))
    rng = np.random.default_rng(11)
    X, W1 = tied_layer(rng, 64, 101, 16)
    arguments = (X, rng.integers(0, 3, 64), W1, np.zeros(16, np.float32),
                 rng.standard_normal((16, 3)).astype(np.float32), np.zeros(3, np.float32))
    f = tj.jit(mlp_step, cache="memory")
    f(*arguments)
    got, want = f(*arguments), mlp_step(*arguments)
    assert int(got[2]) == int(want[2]) and np.array_equal(got[3], want[3])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    print("ok")
""")


@pytest.mark.parametrize("coretype, isa", [("Haswell", "avx2"), (None, "avx512")])
def test_under_each_openblas_kernel_and_gemm_isa(coretype, isa):
    from tracejit.codegen import gemm

    if not gemm.host_can_run(isa):
        pytest.skip(f"this host cannot run the own GEMM's {isa} code")
    environment = dict(os.environ, TRACEJIT_GEMM_ISA=isa, TRACEJIT_CACHE_DIR=os.devnull)
    environment.pop("OPENBLAS_CORETYPE", None)
    environment.pop("OPENBLAS_L2_SIZE", None)
    if coretype:
        environment["OPENBLAS_CORETYPE"] = coretype
    script = SUBPROCESS_CHECK.format(folder=os.path.dirname(__file__))
    done = subprocess.run([sys.executable, "-c", script], env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (
        done.stdout[-2000:] + done.stderr[-4000:])
