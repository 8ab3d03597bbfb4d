"""Adversarial real-model tests, round 20b: sequence, signal and iterative-algorithm code
from public NumPy sources, with loops and buffers over sizes that change from call to call,
run eagerly and through ``jit`` on copies of the same arguments.

Sources read this round (rewritten in their idioms, not pasted): moving averages and 1-d
filters by ``np.convolve(x, np.ones(w), 'valid') / w`` and ``np.correlate`` (the
matched-filter and smoothing snippets of signal-processing tutorials); soft-DTW's
recursion over an ``R`` table started at ``np.inf`` (Cuturi and Blondel's ``soft_dtw``
and its NumPy/numba ports: a softmin of the three neighbours by a max-shifted
log-sum-exp, cell by cell); the NumPy tutorial's Mandelbrot set (``divtime[div_now] = i``
under ``diverge & (divtime == maxit)``, diverged points reset through boolean masks),
written with real and imaginary parts; Viterbi decoding with a backpointer table
(``psi[t] = np.argmax(scores, axis=0)``) and the backtrace ``path[t] = psi[t + 1,
path[t + 1]]`` over ``range(T - 2, -1, -1)``; a particle filter's systematic resampling
(``np.searchsorted(np.cumsum(w), (u + np.arange(N)) / N)``). Probed and equal to eager,
not kept (CI budget): ISTA for the lasso with ``np.sign(z) * np.maximum(np.abs(z) - t,
0)`` and a ``break`` on ``np.linalg.norm(w_next - w) < tol`` (its loop runs eagerly: the
carried bound of ``step * X.T @ r``, a product of a transposed value, doubles per trip),
NMF's multiplicative updates, integral-image box filters (``cumsum`` of a padded image),
Newton's square root to a tolerance, gradient descent stopping at ``np.abs(g).max() <=
tol``, greedy decoding from a Python int token (compiled, a path per stop position), a
char-level GRU sampler drawing with ``rng.choice(V, p=p)`` from a ``RandomState`` or a
``Generator`` passed in (eager, as documented; results and draws equal).

Findings, each fixed with its test here (every test fails before its fix). Slow compile
(the fuzz program of round 19c, ``/tmp/fuzz19c/slow_compile_seed19434.py``): a float32
exit loop converging through subnormals (``t3 = np.tanh(t3) * 0.5`` while ``np.abs(t3).sum()
> 0``), once the function's loops were traced unrolled (after four loop-guard exits),
traced 231 guards, which with their margins scheduled into 1322 kernels: 4 minutes of
LLVM on the loaded machine per traced call. A program of more than
``codegen.program.KERNEL_LIMIT`` kernels is now refused before lowering ('too large to
compile', the call and later calls of that signature run eagerly): that call took 50 s,
most of it margins and scheduling. Needless eager runs: ``np.convolve`` and
``np.correlate`` were not supported (every moving average ran eagerly); they are now the
windows of the padded longer array times the shorter one (``tracer/correlations.py``),
lengths symbolic. Slow, a compile per length: a buffer of int sizes made in a loop body and
written in place (CTC's ``skip = np.full(L, -np.inf); skip[2:] = alpha[t - 1, :-2]``,
min-char-rnn's ``x = np.zeros((V, 1)); x[ix] = 1``) was a NumPy constant of the trace, so
the write was one into an array made before the loop and the loop unrolled (CTC's beta
recursion over four label sets took 85 s on the loaded machine); inside a trip traced for
capture such a buffer is now traced (``frontend._trial_buffer``).

Found and fixed by helper-131 (bfa1607 and the commit after): since bf6ca4e (a margin
guard that always fails before a loop whose body decides on a value with no error model) a
Viterbi backtrace ran eagerly on every call of a dynamic length: the backpointer table a
loop fills by argmaxes (each checked for near ties in the body) was an int ``loop_bounds``
took as unbounded after the loop (or, batched, before the next), so the backtrace's index
into it was unmodelled. Such ints are now exact once their checks hold.

Each call compares results, dtypes, types and the arguments afterwards with eager NumPy,
and an exception eager raises must be raised too.
"""

import numpy as np
import pytest
from real_model_checks import all_compiled, no_internal_errors, run_calls

import tracejit.codegen.program as program_module

F64 = dict(rtol=1e-9, atol=1e-9)


# --- a compile budget: programs past KERNEL_LIMIT run eagerly -----------------------------
def halving_exit_loop(x):
    """The fuzz program's loop: float32 halving through subnormals to exactly 0."""
    t = np.clip(x, -1e6, 1e6).astype(np.float32)
    trips = 1
    while np.abs(t).sum() > 0.0:
        trips += 1
        t = np.tanh(t) * 0.5
    return t * trips, trips


def test_a_program_past_the_kernel_limit_runs_eagerly(monkeypatch):
    """Before the fix nothing bounded a program's size: the fuzz program's unrolled loop
    compiled 1322 kernels (minutes of LLVM). Here the limit is lowered so that the
    unrolled loop (a guard per trip: ``loops="unroll"``) passes it: the call and the next
    one of that signature run eagerly, with the reason, and equal eager's results; a
    smaller program still compiles."""
    monkeypatch.setattr(program_module, "KERNEL_LIMIT", 24)
    x = np.array([[1e-44, 0.0, 3e-45]])  # float32 subnormals: a few trips to 0
    f = run_calls(halving_exit_loop, [(x,)], loops="unroll")
    stats = f.stats()
    assert stats["eager_calls"] == {"too large to compile": 2}, f.explain()
    assert "kernels, more than the 24" in stats["eager_reasons"]["too large to compile"]
    small = run_calls(lambda v: np.tanh(v) * 2.0, [(x,)])
    assert all_compiled(small, 2), small.explain()


# --- np.convolve and np.correlate -------------------------------------------------------
def filters(x, k, mode):
    return np.convolve(x, k, mode=mode), np.correlate(x, k, mode=mode)


def moving_average(x, w):
    return np.convolve(x, np.ones(w), "valid") / w


def smoothed_peaks(x, k):
    """A decision on a convolution: peaks of the smoothed signal above its mean."""
    s = np.convolve(x, k, "same")
    return np.where(s > s.mean(), s, 0.0)


def test_convolve_and_correlate_compile_in_every_mode():
    """Before the fix every call ran eagerly ('np.convolve is not supported'). The second
    operand longer than the first (NumPy swaps them; correlate reverses its result), one
    element each, float32 with float64, int64, the mode as NumPy's int."""
    rng = np.random.default_rng(0)
    calls = [(rng.standard_normal(n), rng.standard_normal(m), mode)
             for n, m, mode in [(7, 3, "full"), (3, 6, "same"), (5, 4, "valid"), (1, 1, 1)]]
    calls += [(rng.standard_normal(6).astype(np.float32), rng.standard_normal(3), "same"),
              (np.arange(5), np.array([1, -2, 3]), "full")]
    f = run_calls(filters, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 2 * len(calls)), f.explain()


def test_convolve_keeps_lengths_symbolic():
    """A moving average over signals of growing length: one compile per bucket of the
    length, not per length."""
    rng = np.random.default_rng(1)
    f = run_calls(moving_average, [(rng.standard_normal(n), 3) for n in (9, 11, 13, 16)], **F64)
    no_internal_errors(f)
    assert all_compiled(f, 8), f.explain()
    assert f.stats()["compiles"] == 2, f.explain()
    g = run_calls(smoothed_peaks, [(rng.standard_normal(n), np.ones(3) / 3) for n in (6, 7)],
                  **F64)
    no_internal_errors(g)


def test_convolve_raises_as_numpy_does():
    """An empty operand and a 2-d one raise NumPy's ValueError on both sides; a bool
    convolution (a logical dot) runs eagerly."""
    run_calls(filters, [(np.zeros(0), np.ones(3), "full"), (np.ones(3), np.zeros(0), "valid"),
                        (np.ones((2, 2)), np.ones(2), "full")])
    f = run_calls(filters, [(np.array([True, False]), np.array([True]), "full")])
    assert f.stats()["eager_calls"], f.explain()


# --- a buffer of int sizes made in a loop body and written in place ------------------------
def skip_transitions(logp, n):
    """CTC's forward step in the idiom of the NumPy gists: ``skip = np.full(L, -np.inf)``
    made in the body (L a Python int: twice the label length plus one), then written."""
    T = logp.shape[0]
    alpha = np.full((T, n), -np.inf)
    alpha[0, :2] = logp[0, :2]
    for t in range(1, T):
        skip = np.full(n, -np.inf)
        skip[2:] = alpha[t - 1, :-2]
        alpha[t] = np.logaddexp(np.logaddexp(alpha[t - 1], skip), np.roll(alpha[t - 1], 1)
                                ) + logp[t, :n]
    return alpha


def test_a_buffer_made_in_the_loop_body_keeps_the_loop_captured():
    """Before the fix the buffer was a NumPy constant of the trace, the write into it one
    into an array made before the loop: the loop unrolled ('writes in place into an array
    no loop variable holds'), one compile per length (CTC's beta recursion over four label
    sets: 85 s on the loaded machine)."""
    rng = np.random.default_rng(6)
    f = run_calls(skip_transitions, [(rng.standard_normal((T, 9)), 5) for T in (5, 6, 7)],
                  dynamic=True, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 6), f.explain()
    assert f.stats()["compiles"] == 1, f.explain()


# --- soft-DTW: a table started at inf, filled cell by cell --------------------------------
def soft_dtw(D, gamma):
    m, n = D.shape
    R = np.full((m + 1, n + 1), np.inf)
    R[0, 0] = 0.0
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            r0 = -R[i - 1, j - 1] / gamma
            r1 = -R[i - 1, j] / gamma
            r2 = -R[i, j - 1] / gamma
            rmax = max(max(r0, r1), r2)
            rsum = np.exp(r0 - rmax) + np.exp(r1 - rmax) + np.exp(r2 - rmax)
            R[i, j] = D[i - 1, j - 1] - gamma * (np.log(rsum) + rmax)
    return R[m, n], R


def test_soft_dtw_over_changing_lengths():
    rng = np.random.default_rng(2)
    calls = [(rng.random((m, n)), gamma) for m, n, gamma in [(3, 4, 0.5), (4, 3, 0.5)]]
    f = run_calls(soft_dtw, calls, dynamic=True, **F64)
    no_internal_errors(f)
    assert f.stats()["compiles"] == 1, f.explain()


# --- Mandelbrot escape times through boolean masks ---------------------------------------
def mandelbrot(cr, ci, maxit):
    zr, zi = np.zeros_like(cr), np.zeros_like(ci)
    divtime = maxit + np.zeros(cr.shape, dtype=int)
    for i in range(maxit):
        zr, zi = zr * zr - zi * zi + cr, 2 * zr * zi + ci
        diverge = zr * zr + zi * zi > 4
        div_now = diverge & (divtime == maxit)
        divtime[div_now] = i
        zr[diverge] = 2
        zi[diverge] = 0
    return divtime


def _grid(h, w):
    y, x = np.ogrid[-1.4:1.4:h * 1j, -2:0.8:w * 1j]
    return np.broadcast_to(x, (h, w)).copy(), np.broadcast_to(y, (h, w)).copy(), 8


def test_mandelbrot_escape_times():
    f = run_calls(mandelbrot, [_grid(5, 7), _grid(6, 9)])
    no_internal_errors(f)
    assert all_compiled(f, 4), f.explain()


# --- Viterbi with a backpointer table and its backtrace -----------------------------------
def viterbi(obs, pi, A, B):
    T, N = len(obs), A.shape[0]
    delta, psi = np.zeros((T, N)), np.zeros((T, N), dtype=int)
    delta[0] = np.log(pi) + np.log(B[:, obs[0]])
    for t in range(1, T):
        scores = delta[t - 1][:, None] + np.log(A)
        psi[t] = np.argmax(scores, axis=0)
        delta[t] = np.max(scores, axis=0) + np.log(B[:, obs[t]])
    path = np.zeros(T, dtype=int)
    path[-1] = np.argmax(delta[-1])
    for t in range(T - 2, -1, -1):
        path[t] = psi[t + 1, path[t + 1]]
    return path, delta[-1].max()


def _hmm(T, seed):
    rng = np.random.default_rng(seed)
    A, B = rng.random((3, 3)), rng.random((3, 4))
    return (rng.integers(0, 4, T), np.full(3, 1 / 3), A / A.sum(1, keepdims=True),
            B / B.sum(1, keepdims=True))


def test_viterbi_backtrace_over_changing_lengths():
    f = run_calls(viterbi, [_hmm(5, 0), _hmm(7, 4)], dynamic=True, **F64)
    no_internal_errors(f)


def backtrace(logp, logA):
    """Viterbi's two loops, reduced: backpointers by an argmax of inexact scores, then a
    backtrace indexing them by the path it builds."""
    T, N = logp.shape
    psi = np.zeros((T, N), dtype=int)
    for t in range(1, T):
        psi[t] = np.argmax(np.tanh(logp[t - 1])[:, None] + logA, axis=0)
    path = np.zeros(T, dtype=int)
    for t in range(T - 2, -1, -1):
        path[t] = psi[t + 1, path[t + 1]]
    return path


def test_a_backtrace_over_argmax_backpointers_compiles():
    rng = np.random.default_rng(0)
    calls = [(rng.standard_normal((T, 3)), rng.standard_normal((3, 3))) for T in (5, 6)]
    f = run_calls(backtrace, calls, dynamic=True)
    no_internal_errors(f)
    assert all_compiled(f, 4), f.explain()


# --- a particle filter's systematic resampling --------------------------------------------
def systematic_resample(weights, u):
    n = len(weights)
    positions = (u + np.arange(n)) / n
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, positions)


@pytest.mark.parametrize("n", [1, 7])
def test_systematic_resampling(n):
    rng = np.random.default_rng(n)
    weights = rng.random(n)
    f = run_calls(systematic_resample, [(weights / weights.sum(), 0.37)])
    no_internal_errors(f)
    assert all_compiled(f, 2), f.explain()
