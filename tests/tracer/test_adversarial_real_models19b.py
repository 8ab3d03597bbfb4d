"""Adversarial real-model tests, round 19b: sequence, convolution and iterative-algorithm
code from public NumPy sources, with loops and buffers over sizes that change from call to
call, run eagerly and through ``jit`` on copies of the same arguments.

Sources read this round (rewritten in their idioms, not pasted): Kiusalaas' ``conjGrad``
("Numerical Methods in Engineering with Python": ``math.sqrt(np.dot(r, r)) < tol`` then
``break``) and smarkesini/xpack's ``cg`` (a ``return`` inside the loop on
``np.linalg.norm(r1) < tol``), the Wikipedia-form CG ``while np.sqrt(rsold) > tol and it <
max_iter``; Lanczos tridiagonalization (stephenhky/MoguNumerics' preallocated ``v[:, i + 1]``
columns normalised in place, NoahAmsel/lanczos-optimality's ``Q``/``alpha``/``beta`` lists with
a ``break`` on ``next_beta == 0``); mean shift to a tolerance; the ONNX reference ``MaxPool``
with ``ceil_mode`` and pads per side; convolutions with explicit pads per side over the output
grid, by ``as_strided`` over ``x.strides`` and by ``sliding_window_view``; image pyramids (one
jitted ``pyr_down`` on halving sizes); NumPy multi-head attention (heads split by
``reshape``/``transpose``, causal masks by ``np.triu``, ragged key padding, sinusoidal
encodings); HMM forward-backward with Rabiner's scaling and log-space Viterbi over a trellis
filled in place; CTC's scaled forward recursion (awni/speech); DTW with a Sakoe-Chiba window
and an early-abandon ``return``; a U-Net's pad to the skip's size; label propagation with
clamped labels; Lloyd's k-means (loop and vectorized, empty clusters keeping their centre).

Findings, each fixed with its test here (every test fails before its fix). Wrong result:
``sliding_window_view(x, k)`` was a copy to the trace, so a write into ``x`` while the
windows lived (``x[0] = 100``, then ``windows.sum(-1)``) did not show in them as it does in
NumPy's view; the windows are now a read-only view of ``x`` without steps, so such a write
runs the call eagerly, as for ``as_strided`` windows; likewise ``np.diagonal``/``np.diag``,
``np.broadcast_to`` and ``np.broadcast_arrays`` (``numpy_api.view_without_steps``).

Needless eager runs: ``np.broadcast_to(b, shape)`` of an array already of that shape marked
``b`` itself read-only, so a later ``b -= lr * ...`` raised inside the trace and every call
ran eagerly; the view is now ``b[...]``. A ``math`` function of a traced number
(``math.sqrt(np.dot(r, r))``, ``math.log``, ``math.exp``) converted it with ``float()``,
which pins the value (a guard ``float(...) == 0.6895``): every call with other data took a
side exit until the function ran eagerly; they are now NumPy's ufunc on the run-time Python
float (``tracer/python_math.py``). ``np.copyto(h, candidate, where=active)`` (a ragged
batch's finished rows keeping their state) was not supported, so the whole step ran
eagerly; it is now the write ``dst[...] = np.where(where, src, dst)`` after NumPy's own cast
and broadcast checks (``tracer/copy_into.py``; a loop whose body calls it for its effect
still unrolls). ``np.logaddexp.reduce`` (an HMM's forward pass in log space) was not
supported: eager on every call; along an axis of static length it is now NumPy's fold of
``np.logaddexp``, unrolled (``tracer/log_reductions.py``). Slow, fixed: a U-Net's ``np.pad``
to the skip connection's size (``(dh // 2, dh - dh // 2)``) pinned each width's value, so
every parity of ``dh`` and ``dw`` compiled a variant of its own (round 18b); widths that are
dim expressions now pad by concatenated blocks (``numpy_api._pad_by_blocks``).

Fixed since (helper-132, session 20): a returned ``np.diagonal(x)`` is NumPy's read-only
view of the caller's ``x`` (a later write into ``x`` shows in it), and the traced call
returns ``np.broadcast_to(x, ...)`` as NumPy's view too. Eager, correct, left:
``np.random.choice(V, p=p)`` with a computed ``p`` (char sampling loops),
``np.convolve``/``np.correlate``, ``as_strided`` with strides from
``x.itemsize``, a CG residual check ``< tol`` after n trips (its worst-case bound outgrows
the tolerance: 'guard margin'), log-space tables holding ``-inf`` (margins at ``isinf``), a
``np.copyto`` statement in a loop body (unrolled). Slow, left: greedy decoding's ``tok, n =
bos, 0`` before a loop with ``if tok == eos: break`` unrolls ('a carried value is a int when
the loop starts'), a path per stop position; image pyramids call one function on halving
sizes, a new bucket (a compile) per level, by design.

Each call compares results, dtypes, types and the arguments afterwards with eager NumPy,
and an exception eager raises must be raised too.
"""

import math

import numpy as np
from real_model_checks import all_compiled, jitted, no_internal_errors, run_calls

F64 = dict(rtol=1e-9, atol=1e-9)


# --- math functions of traced numbers --------------------------------------------------
def power_method(A, v, iters=4):
    """Power iteration normalised by ``math.sqrt`` of a dot, its eigenvalue's log returned:
    ``math.log`` of a negative Rayleigh quotient raises ValueError, as in eager."""
    for _ in range(iters):
        w = A @ v
        v = w / math.sqrt(np.dot(w, w))
    lam = np.dot(v, A @ v)
    return math.log(lam), math.exp(-lam / 10), v


def _spd(n, seed, sign=1.0):
    M = np.random.default_rng(seed).standard_normal((n, n))
    return sign * (M @ M.T + n * np.eye(n))


def test_math_functions_of_traced_numbers_stay_run_time_floats():
    """Before the fix the second matrix failed the guard ``float(...) == <value of the first>``
    (a side exit at every new value, eager from ``max_variants`` on)."""
    calls = [(_spd(5, seed), np.ones(5)) for seed in (1, 2, 3)]
    f = run_calls(power_method, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 6), f.explain()
    assert f.stats()["compiles"] == 1, f.explain()
    # off the domain: math.log of a negative eigenvalue raises ValueError on both sides
    run_calls(power_method, [(_spd(5, 4, sign=-1.0), np.ones(5))], **F64)


# --- np.copyto: finished sequences keep their state ------------------------------------
def masked_rnn(x, lengths, W, U):
    """TensorFlow's ``dynamic_rnn`` copy-through (``where(finished, state, new_state)``)
    written with ``np.copyto(h, candidate, where=active)`` over a ragged batch."""
    B, T, _ = x.shape
    h = np.zeros((B, U.shape[0]))
    outs = np.zeros((B, T, U.shape[0]))
    for t in range(T):
        candidate = np.tanh(x[:, t] @ W + h @ U)
        np.copyto(h, candidate, where=(t < lengths)[:, None])
        outs[:, t] = h
    return outs, h


def copy_into_argument(dst, src, casting):
    np.copyto(dst, src * 2, casting=casting, where=src > 0)
    return dst[0]


def test_copyto_over_a_ragged_batch_compiles():
    """Before the fix every call ran eagerly ('np.copyto is not supported')."""
    rng = np.random.default_rng(5)
    W, U = rng.standard_normal((3, 4)), rng.standard_normal((4, 4)) * 0.4
    calls = [(rng.standard_normal((3, 3, 3)), np.array([0, 3, 2]), W, U)]
    f = run_calls(masked_rnn, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 2), f.explain()
    # into an argument (the caller sees the write), float32 and int destinations: an int
    # one under 'same_kind' raises NumPy's TypeError on both sides, 'unsafe' truncates
    src = rng.standard_normal((3, 4)) * 3
    f = run_calls(copy_into_argument, [
        (np.zeros((3, 4), np.float32), src, "same_kind"),
        (np.zeros((3, 4), np.int64), src, "same_kind"), (np.zeros((3, 4), np.int64), src, "unsafe"),
    ], **F64)
    no_internal_errors(f)


# --- HMM forward pass in log space: np.logaddexp.reduce over the states --------------------
def hmm_log_forward(obs, log_pi, log_A, log_B):
    T = obs.shape[0]
    alpha = np.empty((T, log_A.shape[0]))
    alpha[0] = log_pi + log_B[:, obs[0]]
    for t in range(1, T):
        alpha[t] = np.logaddexp.reduce(alpha[t - 1][:, None] + log_A, axis=0) + log_B[:, obs[t]]
    return np.logaddexp.reduce(alpha[-1]), alpha


def _hmm(T, seed, zero_symbol=False):
    rng = np.random.default_rng(seed)
    A, B = rng.random((2, 2)) + 0.1, rng.random((2, 3)) + 0.1
    if zero_symbol:
        B[:, 2] = 0.0  # an impossible symbol: -inf rows, then the fold of -inf and -inf
    A, B = A / A.sum(1, keepdims=True), B / B.sum(1, keepdims=True)
    with np.errstate(divide="ignore"):
        return np.arange(T) % 3, np.log(np.full(2, 0.5)), np.log(A), np.log(B)


def test_hmm_forward_by_logaddexp_reduce_compiles():
    """Before the fix every call ran eagerly ('np.logaddexp.reduce is not supported'). The
    second sequence holds an impossible symbol: -inf rows, then folds of -inf and -inf
    (NumPy's values; eagerly where the margins cannot decide)."""
    f = run_calls(hmm_log_forward, [_hmm(3, 0), _hmm(3, 2, zero_symbol=True)], **F64)
    no_internal_errors(f)
    stats = f.stats()
    assert stats["compiled_calls"] + stats["traced_calls"] >= 2, f.explain()
    assert stats["compiles"] == 1, f.explain()
    # an empty axis: the ufunc has no identity, NumPy's ValueError on both sides
    run_calls(lambda x: np.logaddexp2.reduce(x, axis=1), [
        (np.zeros((2, 0)),), (np.log2(np.arange(1.0, 7.0).reshape(2, 3)),)])


# --- windows by sliding_window_view: views of the array they were taken of ------------------
def windows_then_write(x):
    """NumPy's windows are a view of ``x``: a write into ``x`` shows in them."""
    windows = np.lib.stride_tricks.sliding_window_view(x, 3)
    before = windows.mean(-1)
    x[0] = 100.0
    return before, windows.sum(-1)


def write_into_windows(x):
    windows = np.lib.stride_tricks.sliding_window_view(x, 2)
    windows[0, 0] = 1.0  # read-only in NumPy: ValueError
    return windows


def views_then_a_write(K):
    """NumPy's diagonal, broadcast_to and broadcast_arrays are views of ``K`` too."""
    diagonal = np.diagonal(K)
    rows = np.broadcast_to(K[0], (2, K.shape[1]))
    stacked, _ = np.broadcast_arrays(K, np.ones((2, 1, 1)))
    K[0, 0] = 100.0
    return diagonal * 1.0, rows * 1.0, stacked * 1.0


def test_sliding_window_view_sees_writes_into_its_array():
    """Wrong result before the fix: the windows were a copy to the trace, so ``windows.sum``
    after ``x[0] = 100`` summed the old ``x[0]`` (0.63 where NumPy has 100.5). Such a write
    now runs the call eagerly, as for ``as_strided`` windows."""
    rng = np.random.default_rng(0)
    f = run_calls(windows_then_write, [(rng.standard_normal(n),) for n in (5, 7)], **F64)
    no_internal_errors(f)
    run_calls(write_into_windows, [(np.zeros(4),)])
    # the same for np.diagonal, np.broadcast_to and np.broadcast_arrays (wrong before too)
    f = run_calls(views_then_a_write, [(rng.standard_normal((3, 3)),)], **F64)
    no_internal_errors(f)


# --- np.broadcast_to of an array already of that shape ------------------------------------
def dense_step(x, W, b, lr):
    """``np.broadcast_to(b, out.shape)`` of a bias already of that shape, then the SGD step
    ``b -= lr * ...`` on it."""
    out = x @ W
    bias = np.broadcast_to(b, out.shape)
    out = out + bias
    b -= lr * out.mean(0)
    return out, bias.sum()


def test_broadcast_to_the_same_shape_leaves_the_array_writable():
    """Before the fix the view was the argument itself, marked read-only, so ``b -= ...``
    raised inside the trace ('output array is read-only') and every call ran eagerly; the
    view (which NumPy's is: bias.sum() sees the step) now follows the write."""
    rng = np.random.default_rng(3)
    calls = [(rng.standard_normal((1, 3)), rng.standard_normal((3, 2)), rng.standard_normal((1, 2)),
              0.1) for _ in range(2)]
    f = run_calls(dense_step, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 4), f.explain()


# --- U-Net: the upsampled map padded to the skip connection's size ------------------------
def unet_up(x, skip):
    up = np.repeat(np.repeat(x, 2, axis=1), 2, axis=2)
    dh, dw = skip.shape[1] - up.shape[1], skip.shape[2] - up.shape[2]
    up = np.pad(up, ((0, 0), (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2)))
    return np.concatenate([skip, up], axis=0)


def test_unet_pad_to_the_skip_size_keeps_its_widths_symbolic():
    """Before the fix each parity of ``dh`` and ``dw`` pinned the widths (``int()`` of a dim
    expression in ``np.pad``): a variant per parity pair, 3 compiles for these calls in one
    bucket; now 2 (exact first shapes, then symbolic). A skip smaller than the upsampled
    map is a negative width: NumPy's ValueError on both sides."""
    rng = np.random.default_rng(4)
    sizes = ((5, 5, 10, 11), (6, 6, 13, 12), (7, 6, 16, 12), (5, 7, 11, 14))
    calls = [(rng.standard_normal((1, h, w)), rng.standard_normal((1, H, W)))
             for h, w, H, W in sizes]
    f = run_calls(unet_up, calls, **F64)
    no_internal_errors(f)
    assert f.stats()["compiles"] == 2, f.explain()
    smaller_skip = (rng.standard_normal((1, 7, 7)), rng.standard_normal((1, 13, 13)))
    run_calls(unet_up, calls[:1] + [smaller_skip])


# --- returned views of an argument: a later write by the caller -------------------------
def _returned_view_follows_the_caller(function):
    f = jitted(function)
    for seed in range(2):  # the traced call, then compiled code
        x_eager = np.random.default_rng(seed).standard_normal((3, 3))
        x = x_eager.copy()
        want, got = function(x_eager), f(x)
        assert got.flags.writeable == want.flags.writeable
        x_eager[0, 0] = x[0, 0] = 50.0  # NumPy's result is a view: it shows the write
        np.testing.assert_array_equal(got, want)


def test_returned_diagonal_is_a_view_of_the_argument():
    _returned_view_follows_the_caller(np.diagonal)


def test_returned_broadcast_is_a_view_on_the_traced_call_too():
    _returned_view_follows_the_caller(lambda x: np.broadcast_to(x, (2, 3, 3)))
