"""Decisions in loop bodies on values with no error model (round 20).

A captured loop checks the jumps and guards in its body on the rounding bounds it carries
(``tracer/loop_bounds.py``). A value whose bound had no model there - after a float32
product not taken as NumPy's bits, whose cheap rule raised ``Unbounded`` - was decided
raw: no check at all (``_body_checks`` gave margins only to modelled bounds). The float32
LIF layer of real models 13 fired where NumPy does not on compiled calls under
``TRACEJIT_GEMM=own`` (every product the own GEMM's), and a float32 recurrence's mask on
``W @ h`` (``h`` carried through tanh, so not NumPy's bits) flipped at eager's own values
under the default setting too.

Fixed: in a loop body (and for the values a loop reads) a float32 product takes the cheap
contraction bound as a float64 one does, so those decisions are checked and run eagerly
only near their thresholds; a decision that still reads a value with no model (a nested
loop's result, ``np.prod``) gets a check that always fails, so NumPy decides.

Calls alternate thresholds far from every value (compiled) with thresholds at eager
NumPy's own values (checked: eager decides), and decisions must agree exactly.
"""

import copy

import numpy as np
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for

# float32 values within a few ulp (compiled tanh); the decisions must agree exactly
F32 = dict(rtol=1e-5, atol=1e-6)


def _compare(f, function, arguments, tolerance=F32):
    eager_args, jit_args = copy.deepcopy(arguments), copy.deepcopy(arguments)
    with np.errstate(all="ignore"):
        want = function(*eager_args)
        got = f(*jit_args)
    assert_same(got, want, **tolerance)
    return got, want


# --- the LIF layer of real models 13, its products on the own GEMM -------------------------
def lif_layer(spikes_in, W, decay, theta):
    v = np.zeros(W.shape[0], dtype=W.dtype)
    fired_at = np.zeros((spikes_in.shape[0], W.shape[0]), dtype=W.dtype)
    for t in range(spikes_in.shape[0]):
        fired = v >= theta
        fired_at[t] = fired
        v = np.where(fired, 0.0, v)
        v = decay * v + np.tanh(W @ spikes_in[t])
    return fired_at, v


def _membrane_after(spikes_in, W, decay, steps):
    v = np.zeros(W.shape[0], dtype=W.dtype)
    for t in range(steps):
        v = decay * v + np.tanh(W @ spikes_in[t])
    return v


def _lif_calls(lengths, seed=3):
    rng = rng_for(seed)
    W = (rng.standard_normal((24, 16)) * 0.2).astype(np.float32)
    decay = np.float32(0.9)
    calls = []
    for T in lengths:
        spikes = (rng.random((T, 16)) < 0.3).astype(np.float32)
        far = np.full(24, 50, np.float32)
        on_eager = _membrane_after(spikes, W, decay, T // 2 + 1)  # NumPy's own values
        calls += [(spikes, W, decay, far), (spikes, W, decay, on_eager)]
    return calls


def test_float32_lif_layer_under_the_own_gemm_fires_where_numpy_fires():
    """Under ``TRACEJIT_GEMM=own`` no product is NumPy's call, so ``W @ spikes_in[t]`` has
    no exact bits: the membrane it feeds was carried unbounded and ``v >= theta`` went
    unchecked (6 of 120 spikes wrong at eager's thresholds). It now carries a bound."""
    from tracejit.codegen import blas

    f = jitted(lif_layer)
    with blas.gemm_override("own"):
        for arguments in _lif_calls((5, 7, 11)):
            _compare(f, lif_layer, arguments)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()  # the far thresholds


# --- a minimal threshold in a loop body on a float32 product of a carried value ------------
def threshold_counts(x, W, theta):
    h = np.zeros(W.shape[0], dtype=W.dtype)
    counts = np.zeros(W.shape[0], dtype=W.dtype)
    for t in range(x.shape[0]):
        h = np.tanh(W @ h + x[t])
        counts = counts + (W @ h >= theta)
    return counts, h


def _product_after(x, W, steps):
    h = np.zeros(W.shape[0], dtype=W.dtype)
    for t in range(steps):
        h = np.tanh(W @ h + x[t])
    return W @ h


def test_a_mask_on_a_float32_product_in_a_loop_body_is_numpys():
    """``W @ h`` with ``h`` carried through tanh is not NumPy's bits, and a float32 product
    had no error model: the mask was decided raw (wrong at eager's thresholds on every
    compiled call, under the default GEMM setting). ``dynamic=True``: the loop is captured
    from the first call (at exact shapes its 5 trips unroll, and at top level a mask on a
    float32 product of inexact values stays unchecked: docs/sharp_bits.md)."""
    rng = rng_for(0)
    f = jitted(threshold_counts, dynamic=True)
    for T in (5, 8, 11):
        W = (rng.standard_normal((16, 16)) * 0.4).astype(np.float32)
        x = rng.standard_normal((T, 16)).astype(np.float32)
        for theta in (np.full(16, 50, np.float32), _product_after(x, W, T // 2 + 1)):
            got, want = _compare(f, threshold_counts, (x, W, theta))
            assert np.array_equal(got[0], want[0])
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()  # the far thresholds


# --- layouts: an argument that reaches a deciding loop's products only through a copy -----
def buffered_gate(X, w, theta):
    """A strided ``X`` copied row by row into a C-ordered buffer, and a decision on the
    buffer's row products (an LSTM's ``Hin[t, :, 1:] = X[t]`` then ``Hin[t].dot(W)``)."""
    H = np.zeros((X.shape[0], X.shape[1]))
    scores, fired = np.zeros(X.shape[0]), np.zeros(X.shape[0])
    for t in range(X.shape[0]):
        H[t] = X[t]
        scores[t] = H[t] @ w
        fired[t] = scores[t] > theta
    return scores, fired


def direct_gate(X, w, theta):
    """The same decision on ``X[t] @ w``: NumPy hands the strided row to BLAS as it is."""
    scores, fired = np.zeros(X.shape[0]), np.zeros(X.shape[0])
    for t in range(X.shape[0]):
        scores[t] = X[t] @ w
        fired[t] = scores[t] > theta
    return scores, fired


def test_an_argument_copied_into_a_buffer_may_be_strided():
    """18b9b27 ran a call eagerly when any argument a deciding loop reads was not
    C-contiguous; one that reaches the products only through a copy into a buffer cannot
    change their bits (``numpy_products.layout_inputs`` now follows layouts back from the
    products' operands). Compiled, NumPy's bits (the scores too: the products a decision
    reads are NumPy's calls); ``X[t] @ w`` on the strided row itself still runs eagerly."""
    from tracejit.runtime.jit import LAYOUT_REASON

    rng = rng_for(7)
    buffered, direct = jitted(buffered_gate, dynamic=True), jitted(direct_gate, dynamic=True)
    for T in (5, 8):
        w = rng.standard_normal(6)
        for X in (rng.standard_normal((T, 6)), rng.standard_normal((T, 12))[:, ::2]):
            theta = np.float64(0.0)
            for f, function in ((buffered, buffered_gate), (direct, direct_gate)):
                got, want = f(X, w, theta), function(X, w, theta)
                for g, v in zip(got, want):
                    assert g.tobytes() == v.tobytes(), (function.__name__, T, got, want)
    assert LAYOUT_REASON not in buffered.stats()["eager_calls"], buffered.explain()
    assert buffered.stats()["compiled_calls"] >= 3, buffered.explain()
    assert set(direct.stats()["eager_calls"]) == {LAYOUT_REASON}, direct.explain()
