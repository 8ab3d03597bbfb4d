"""Log-space tables in guard margins (tracer/margin_rules.py ``_add``, tracer/guard_margins.py
``_may_hold_infinities``): an infinity with a finite bound plus a value with a finite bound
is exact, so a select on ``np.isinf``/``np.isfinite`` of a log-space value is decided.

* an HMM forward pass whose -inf come from ``np.log`` of zeros in its matrices (scipy's
  ``logsumexp`` sets a max that is not finite to 0) took a guard-margin exit on every call;
* a CTC table captured as a loop (dynamic length) failed the margin guards in its body on
  every call: the body's carried row holds the -inf of ``np.full(..., -np.inf)`` too.

Each runs eager and compiled on the same arguments (``real_model_checks.run_calls``) and
counts the calls that ran compiled code.
"""

import numpy as np
from real_model_checks import all_compiled, run_calls
from test_adversarial_real_models15 import _log_softmax, ctc_forward_log


def logsumexp(a, axis=None):
    """scipy.special.logsumexp's core: a max that is not finite counts as 0."""
    a_max = np.max(a, axis=axis, keepdims=True)
    a_max = np.where(np.isfinite(a_max), a_max, 0.0)
    out = np.log(np.sum(np.exp(a - a_max), axis=axis, keepdims=True)) + a_max
    return np.squeeze(out, axis=axis)


def hmm_log_likelihood(pi, A, B, obs):
    """The forward pass in log space of probabilities with zeros (states never entered)."""
    log_pi, log_A, log_B = np.log(pi), np.log(A), np.log(B)
    alpha = log_pi + log_B[:, obs[0]]
    for t in range(1, len(obs)):
        alpha = logsumexp(alpha[:, None] + log_A, axis=0) + log_B[:, obs[t]]
    return logsumexp(alpha)


def hmm_arguments(rng, T, S=3, V=4):
    A = rng.random((S, S)) + 0.1
    A[0, 2] = A[2, 1] = 0.0
    B = rng.random((S, V)) + 0.1
    B[1, 0] = 0.0
    pi = np.array([0.6, 0.4, 0.0])
    return (pi, A / A.sum(axis=1, keepdims=True), B / B.sum(axis=1, keepdims=True),
            rng.integers(0, V, T))


def test_hmm_with_log_of_zero_compiles():
    rng = np.random.default_rng(7)
    arguments = hmm_arguments(rng, 4)
    f = run_calls(hmm_log_likelihood, [arguments], repeats=3)
    assert all_compiled(f, 3), f.explain()


def test_ctc_table_captured_over_lengths_compiles():
    rng = np.random.default_rng(8)
    labels = np.array([1, 2])
    arguments = [(_log_softmax(rng, T, 3), labels) for T in (5, 7)]
    f = run_calls(lambda log_probs, labels: ctc_forward_log(log_probs, labels), arguments,
                  dynamic=True)
    assert all_compiled(f, 4), f.explain()


def log_ratio_decision(p, q):
    """A log-space comparison whose -inf come from zeros, and a sum that overflows (its
    inf is no exact infinity: NumPy's may be finite): both decided as NumPy does."""
    score = np.log(p) + np.log(q) * 2.0
    big = p * 1e308 + q * 1e308
    return np.where(np.isinf(score), -1.0, score), np.where(np.isinf(big), 0.0, 1.0)


def test_infinities_from_zeros_and_overflows_decide_as_numpy_does():
    p = np.array([0.0, 0.5, 1.0, 0.25, 0.0])
    q = np.array([0.5, 0.0, 1.0, 0.75, 0.0])
    run_calls(log_ratio_decision, [(p, q), (p[::-1].copy(), q), (q, p)], repeats=2)
