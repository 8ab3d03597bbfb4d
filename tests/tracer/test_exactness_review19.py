"""Review 19: the exactness rules for decisions (a float64 product a decision reads is
NumPy's own BLAS call, so exact; a loop value that enters exact and stays exact carries
no bound; ``np.linalg.norm`` of a 1-d array is ``sqrt(x.dot(x))``), attacked where the
compiled program might not compute NumPy's bits although the rule admits the case.

Found and fixed:

* A graph with a loop is compiled as segments and loop bodies apart
  (``codegen/loops.py``). A product computed before the loop and decided on only in it
  (gradient descent's targets ``y = X @ w_true``) was summed by the segment's own
  product, not NumPy's call, since no decision read it inside its segment; yet
  ``margin_rules`` took it as NumPy's bits and the loop carried no bound, so the exit test
  could stop on another trip than NumPy's (``numpy_products.note_segments``).
* ``x.copy(order="F")`` (and ``np.copy(x, order="F")``) was traced as a C-ordered copy,
  taken as exact, where NumPy holds it Fortran-ordered and its matmul hands it to BLAS
  transposed: other sums (``numpy_api.copy`` now refuses it, as ``np.array(order="F")``
  is refused).
* Under ``TRACEJIT_GEMM=own`` (or without NumPy's bundled OpenBLAS) no product is
  NumPy's call, yet the cheap checks took them as exact (``margin_rules.set_numpy_products``).

Found, fixed later: Fortran-ordered, transposed-view and strided float64 arguments
(margin_rules counts arguments as C-ordered; a mask at NumPy's own product flipped in 11 of
15 calls, all compiled): such a call runs eagerly (18b9b27's entry layout check). Float32
products taken as exact whatever made them (an einsum), which loop_bounds carried trip
after trip: float32 products are exact in the cheap checks only as float64 ones are
(NumPy's matmul of operands held C-ordered, ``margin_rules._numpy_matmul``; c6e9830,
re-landed in round 20 once a loop body's row slices ``x[t]`` counted as C-ordered and a
decision in a body on a value with no model was no longer left unchecked).

Probed with no disagreement (see the round's report for counts): transposed operands and
``x @ x.T`` / ``x.T @ x`` (NumPy's syrk) next to copies of the same values, slices,
reshapes and ``+ 0.0`` / ``* 1.0`` of one side; ``np.dot`` / ``ndarray.dot`` / ``@`` of
matrix-vector, vector-matrix and vector-vector; batched products and batched syrk;
sizes 1, prime and past a BLAS block; norms in exit tests with the tolerance on the
boundary trip; OpenBLAS core types and thread counts.
"""

import copy

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer import trace
from tracejit.tracer.guard_margins import _Slice
from tracejit.tracer.passes import optimize


def _calls(function, argument_sets):
    """``function`` jitted and called on each argument set; each result equal to eager
    NumPy's bit for bit (the exact rules promise NumPy's bits, not a margin)."""
    f = tj.jit(function, cache="memory")
    for arguments in argument_sets:
        want = function(*copy.deepcopy(arguments))
        got = f(*copy.deepcopy(arguments))
        for g, w in zip(got, want):
            assert np.asarray(g).dtype == np.asarray(w).dtype
            assert np.asarray(g).tobytes() == np.asarray(w).tobytes(), (got, want)
    return f


def descend(X, w_true, trips):
    y = X @ w_true  # before the loop: decided on only inside it
    w = np.zeros(X.shape[1])
    it = 0
    while it < trips:
        grad = X.T @ (X @ w - y)
        w = w - 0.05 * grad
        it += 1
        if np.linalg.norm(grad) < 1e-300:  # a decision on every trip's product
            break
    return w, it


def test_a_product_before_a_loop_that_decides_on_it_is_numpys_call():
    """The loop takes ``y`` and its carried ``w`` as NumPy's bits (no bound), so the
    compiled calls must compute them so: ``w`` was a few ulp off from the third trip on
    when ``y`` was the segment's own product, and an exit test on the boundary could stop
    on another trip than NumPy's."""
    cases = []
    for seed in range(2):
        rng = np.random.default_rng(seed)
        X, w_true = rng.standard_normal((7, 5)), rng.standard_normal(5)
        cases += [(X, w_true, np.asarray(trips)) for trips in (3, 4, 20)]
    f = _calls(descend, cases)
    stats = f.stats()
    assert stats["compiles"] == 1 and not stats["eager_calls"], f.explain()
    assert stats["compiled_calls"] + stats["traced_calls"] == len(cases)


@pytest.mark.parametrize("make", [
    lambda x: x.copy(order="F"),
    lambda x: np.copy(x, order="F"),
])
def test_a_fortran_ordered_copy_is_not_taken_as_numpys_product(make):
    """NumPy's ``x.copy(order="F") @ v`` is BLAS's transposed matrix-vector product; a
    mask on it (exact in the cheap checks) at a threshold NumPy's product sits on."""

    def mask(x, v, at):
        return (make(x) @ v > at,)

    cases = []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        x, v = rng.standard_normal((7, 5)), rng.standard_normal(5)
        cases.append((x, v, np.asfortranarray(x) @ v))  # eager's product: all False
    _calls(mask, cases)


def mask_on_products(x, v, at):
    return x @ v > at, np.argmax(x @ v), (x @ x.T > at[0]).sum()


def test_products_are_not_exact_where_compiled_code_does_not_call_numpys_blas():
    """Under ``TRACEJIT_GEMM=own`` (``gemm_override``) compiled code computes every
    product by the own GEMM or a plain ``gemm``, not by the calls NumPy's matmul makes, so
    a mask on a product at a threshold NumPy's product sits on must keep its margin (it
    was taken as exact: the mask came out True where NumPy's is False)."""
    from tracejit.codegen import blas

    cases = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, v = rng.standard_normal((7, 5)), rng.standard_normal(5)
        cases.append((x, v, x @ v))  # eager's product: the mask is all False
    with blas.gemm_override("own"):
        _calls(mask_on_products, cases)


# --- found, fixed later ---------------------------------------------------------------------
def test_a_mask_on_a_product_of_a_fortran_ordered_float64_argument():
    """Compiled code would lay the argument out C-ordered and call BLAS for that layout,
    where NumPy hands it to BLAS as it is: such a call runs eagerly (18b9b27)."""
    def mask(x, v, at):
        return (x @ v > at,)

    cases = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, v = np.asfortranarray(rng.standard_normal((7, 5))), rng.standard_normal(5)
        cases.append((x, v, x @ v))  # eager's product: all False
    _calls(mask, cases)


def power_iteration_by_einsum(A, trips):
    v = np.ones(A.shape[0], A.dtype)
    it = 0
    while it < trips:
        w = np.einsum("ij,j->i", A, v)
        v = w / np.linalg.norm(w)
        it += 1
        if np.linalg.norm(w) < 1e-30:
            break
    return v, it


@pytest.mark.parametrize("product, exact", [
    (lambda x, w: x @ w, True),
    (lambda x, w: w @ x.T, True),  # NumPy's trans flag, as compiled code's
    (lambda x, w: x[2] @ x[1:4].T, True),  # whole rows: views NumPy holds C-ordered
    (lambda x, w: np.einsum("ij,j->i", x, w), False),  # NumPy sums einsum in its own loops
    (lambda x, w: (x.T * 2) @ x[:, 0], False),  # Fortran-ordered in NumPy
    (lambda x, w: x[:, ::2] @ w[:2], False),  # read in place
    (lambda x, w: x[1:3, 1:] @ w[1:], False),  # rows cut short: strided in NumPy
])
def test_a_float32_product_is_exact_only_as_numpys_matmul(product, exact):
    """Float32 products a decision reads are taken as NumPy's bits under the same rule as
    float64 ones (``margin_rules._numpy_matmul``): they were exact in the cheap checks
    whatever made them, so loop_bounds carried a float32 power iteration by ``np.einsum``
    as exact (its ``v`` a few ulp from NumPy's in 15 of 16 calls, no bound)."""
    x = np.linspace(-1, 2, 24, dtype=np.float32).reshape(6, 4)
    w = np.linspace(1, 3, 4, dtype=np.float32)
    graph = trace(product, x, w).graph
    ctx = _Slice(graph, cheap=True)
    last = [eqn.out for eqn in graph.equations if eqn.prim.name == "matmul"][-1]
    assert (ctx.bound(last) is None) == exact


def test_a_float32_einsum_loop_value_is_not_taken_as_exact():
    """The loop carries ``v``'s bound (it was carried as exact: ``exact=(1,)``), and the
    calls stop on NumPy's trip; ``v`` itself may be a few ulp off, as any compiled value."""
    A = np.random.default_rng(0).standard_normal((9, 9)).astype(np.float32)
    graph = optimize(trace(power_iteration_by_einsum, A @ A.T, np.asarray(6)).graph)
    loops = [eqn for eqn in graph.equations if eqn.prim.name == "loop"]
    assert loops and all(  # (the trip counter is exact)
        eqn.params_dict["body"].inputs[position].aval.dtype.kind != "f"
        for eqn in loops for position in eqn.params_dict.get("exact", ()))
    f = tj.jit(power_iteration_by_einsum, cache="memory")
    for trips in (6, 20):
        want = power_iteration_by_einsum(A @ A.T, np.asarray(trips))
        got = f(A @ A.T, np.asarray(trips))
        assert got[1] == want[1]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
