"""Adversarial real-model tests, round 13a: recurrent models from public NumPy code, with
values placed on the decisions a loop takes trip after trip.

Modelled on: Karpathy's min-char-rnn gist and its course copies (``hs[t] = np.tanh(Wxh
@ xs[t] + Whh @ hs[t-1] + bh)``, a dict of clipped grads), cs231n's ``rnn_layers.py``
(``rnn_forward`` filling an ``h`` buffer, the classifier reading the last state), the
NumPy leaky integrate-and-fire layers of spiking-network tutorials (a membrane carried
from step to step, reset where it crossed the threshold), and numpy-ml-style layers that
append each step's state to ``self.history``. Sequence lengths change between calls
(1 and primes among them), thresholds sit on eager NumPy's own values. cs231n's
``CaptioningRNN.sample`` (greedy words fed back as the next input) fills a captions
buffer over a captured loop.

Findings. Wrong results, fixed (``tracer/loop_bounds.py``): a jump inside a captured loop
on a value the loop carries (``fired = v >= theta`` on the membrane from the last trip)
and a jump after the loop on its result (``np.where(h @ w > t, ...)`` on the final
state) were unchecked: compiled values one ulp from NumPy's took the other side on
every compiled call. The loop now carries the rounding bound of those values, and the
checks use it. Needlessly eager, fixed the same way: a branch on the loop's result
(``if h.sum() > 0:`` after the loop) had no bound and ran eagerly on every call. The
carried bound is a worst case: through tanh it passed whole (slope 1), so greedy caption
sampling went eagerly from 11 steps on; tanh's rule now takes its slope at the operand's
reach (``margin_rules._tanh_carry``). An untrained captioner (weights of norm well above
1) still goes eagerly from ~17 steps: correct, slower.

A float32 membrane fed by ``W @ spikes`` was unchecked (no error model for a float32
matmul); the product a decision reads is now NumPy's own (``codegen/numpy_products.py``),
so it carries no bound and the membrane's is checked (the test was also compared at
float64 tolerances: float32 tanh is a few ulp off NumPy's). A list
attribute appended to every call (``self.history.append(h)``) ran every call eagerly;
the compiled call appends now (tracer/list_appends.py).
"""

import copy

import numpy as np
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for

F64 = dict(rtol=1e-9, atol=1e-9)
# float32 values within a few ulp (compiled tanh); decisions (spikes) must agree exactly
F32 = dict(rtol=1e-5, atol=1e-6)


def compare(f, function, arguments, tolerance=F64):
    """One call each way on copies: results and arguments afterwards agree."""
    eager_args, jit_args = copy.deepcopy(arguments), copy.deepcopy(arguments)
    with np.errstate(all="ignore"):
        want = function(*eager_args)
        got = f(*jit_args)
    assert_same(got, want, **tolerance)
    assert_same(jit_args, eager_args, where="arguments after the call", **tolerance)


# --- a leaky integrate-and-fire layer: the reset reads the membrane carried in -------------
def lif_layer(spikes_in, W, decay, theta):
    """Spiking-network tutorials' LIF layer: fire where the membrane reached ``theta`` on
    the last step, reset those, leak, and integrate this step's input current."""
    v = np.zeros(W.shape[0], dtype=W.dtype)
    fired_at = np.zeros((spikes_in.shape[0], W.shape[0]), dtype=W.dtype)
    for t in range(spikes_in.shape[0]):
        fired = v >= theta
        fired_at[t] = fired
        v = np.where(fired, 0.0, v)
        v = decay * v + np.tanh(W @ spikes_in[t])
    return fired_at, v


def membrane_after(spikes_in, W, decay, steps):
    """Eager NumPy's membrane after ``steps`` steps without firing."""
    v = np.zeros(W.shape[0], dtype=W.dtype)
    for t in range(steps):
        v = decay * v + np.tanh(W @ spikes_in[t])
    return v


def lif_calls(dtype, lengths, seed=3):
    rng = rng_for(seed)
    W = (rng.standard_normal((24, 16)) * 0.2).astype(dtype)
    decay = dtype(0.9)
    calls = []
    for T in lengths:
        spikes = (rng.random((T, 16)) < 0.3).astype(dtype)
        never = np.full(24, 50, dtype)  # far from every membrane value: compiled
        on_eager = membrane_after(spikes, W, decay, T // 2 + 1)  # NumPy's own values
        calls += [(spikes, W, decay, never), (spikes, W, decay, on_eager)]
    return calls


def test_lif_layer_fires_where_numpy_fires():
    """min-char-rnn's carried state, as a spiking layer: the threshold of every neuron is
    eager's membrane at a middle step, where our tanh is an ulp from NumPy's."""
    f = jitted(lif_layer)
    for arguments in lif_calls(np.float64, (5, 7, 11, 13, 1, 7)):
        compare(f, lif_layer, arguments)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 4, f.explain()  # the far thresholds


def test_float32_lif_layer_fires_where_numpy_fires():
    """The float32 membrane fed by ``W @ spikes[t]``: the product a decision reads is
    NumPy's (``codegen/numpy_products.py``: the gemv NumPy calls), so it carries no bound
    and the carried membrane's bound (tanh's ulps) is checked at the threshold."""
    f = jitted(lif_layer)
    for arguments in lif_calls(np.float32, (5, 7, 11, 13)):
        compare(f, lif_layer, arguments, F32)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()  # the far thresholds


# --- cs231n rnn_forward, then a decision on the last hidden state --------------------------
def rnn_classify(x, h0, Wx, Wh, b, w_out, threshold):
    """cs231n's ``rnn_forward`` (an h buffer filled at t), then a one-vs-rest classifier
    on the last state: a label per row and the rows' votes."""
    N, T, _ = x.shape
    hs = np.zeros((N, T, h0.shape[1]))
    h = h0
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        hs[:, t, :] = h
    scores = hs[:, -1, :] @ w_out
    label = np.where(scores > threshold, 1, -1)
    return hs, label, np.argmax(hs[:, -1, :], axis=1)


def last_state(x, h0, Wx, Wh, b):
    h = h0
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
    return h


def rnn_arguments(rng, N, T, D=5, H=12):
    return (rng.standard_normal((N, T, D)), rng.standard_normal((N, H)) * 0.5,
            rng.standard_normal((D, H)) * 0.5, rng.standard_normal((H, H)) * 0.4,
            rng.standard_normal(H) * 0.1, rng.standard_normal(H))


def test_a_decision_on_the_last_hidden_state_is_numpys():
    """The classifier's threshold is eager's own score of each row: compiled scores an
    ulp away used to flip labels on every compiled call (the loop's result had no bound,
    so the mask after the loop was not checked)."""
    rng = rng_for(13)
    f = jitted(rnn_classify)
    for N, T in ((3, 5), (4, 7), (3, 11), (2, 1), (4, 13)):
        x, h0, Wx, Wh, b, w_out = rnn_arguments(rng, N, T)
        scores = last_state(x, h0, Wx, Wh, b) @ w_out
        for threshold in (scores + 10.0, scores):
            compare(f, rnn_classify, (x, h0, Wx, Wh, b, w_out, threshold))
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 3, f.explain()


# --- a branch on the loop's result ----------------------------------------------------------
def rnn_then_branch(x, h0, Wx, Wh, b):
    """A model that rescales its output by the sign of the last state's total."""
    h = h0
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
    if h.sum() > 0:
        return h * 2.0
    return h - 1.0


def test_a_branch_on_the_loops_result_stays_compiled():
    """Before, a guard on a loop's result had no bound: its margin failed on every call,
    and every call ran eagerly. Now the loop carries the bound and only sums near 0 go to
    NumPy."""
    rng = rng_for(5)
    f = jitted(rnn_then_branch)
    for N, T in ((3, 5), (3, 7), (3, 11), (3, 7), (3, 13), (3, 2)):
        x, h0, Wx, Wh, b, _ = rnn_arguments(rng, N, T)
        compare(f, rnn_then_branch, (x, h0 + 3.0, Wx, Wh, b + 2.0))
    near = np.zeros((2, 5, 5))  # h0 = (a, -a) rows, no input: h.sum() is 0 exactly
    h0 = np.zeros((2, 12))
    h0[0, :6], h0[1, :6] = 0.5, -0.5
    Wh = np.eye(12) * 0.5
    compare(f, rnn_then_branch, (near, h0, np.zeros((5, 12)), Wh, np.zeros(12)))
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 4, f.explain()


# --- numpy-ml style: each step's state appended to a list the layer keeps -------------------
class RecordingRNNCell:
    def __init__(self, rng, D, H):
        self.Wx = rng.standard_normal((D, H)) * 0.5
        self.Wh = rng.standard_normal((H, H)) * 0.4
        self.b = np.zeros(H)
        self.history = []

    def step(self, x, h):
        h = np.tanh(x @ self.Wx + h @ self.Wh + self.b)
        self.history.append(h)
        return h


def test_a_state_history_appended_every_call_matches_numpy():
    """The appended list is outside state the compiled call appends to after its kernels
    (tracer/list_appends.py): one compile, the later calls compiled, and the list gets the
    same arrays."""
    rng = rng_for(7)
    eager_cell = RecordingRNNCell(rng, 4, 6)
    jit_cell = copy.deepcopy(eager_cell)
    f = jitted(jit_cell.step)
    h_eager = h_jit = np.zeros((3, 6))
    for _ in range(5):
        x = rng.standard_normal((3, 4))
        h_eager, h_jit = eager_cell.step(x, h_eager), f(x, h_jit)
        assert_same(h_jit, h_eager, **F64)
    assert_same(jit_cell.history, eager_cell.history, **F64)
    stats = f.stats()
    assert stats["compiles"] == 1 and stats["compiled_calls"] >= 4, stats


# --- cs231n CaptioningRNN.sample: greedy words fed back, a captions buffer filled at t -------
def sample_captions(features, W_proj, b_proj, W_embed, Wx, Wh, b, W_vocab, b_vocab, captions):
    """Greedy decoding: each step's argmax word is the next step's input."""
    h = features @ W_proj + b_proj
    word = np.zeros(captions.shape[0], dtype=np.int64)  # <START>
    for t in range(captions.shape[1]):
        h = np.tanh(W_embed[word] @ Wx + h @ Wh + b)
        word = np.argmax(h @ W_vocab + b_vocab, axis=1)
        captions[:, t] = word
    return captions


def test_greedy_caption_sampling_stays_compiled_over_lengths():
    """The argmax reads the state the loop carries, so the loop carries its bound; with
    tanh's slope at the state's reach (not 1) the bound stays far below the score gaps of
    an untrained captioner over these lengths, and every call after the first runs the
    program."""
    rng = rng_for(1)
    N, F, H, V, E = 4, 6, 16, 7, 5
    parameters = (rng.standard_normal((N, F)), rng.standard_normal((F, H)) * 0.5,
                  rng.standard_normal(H) * 0.1, rng.standard_normal((V, E)),
                  rng.standard_normal((E, H)) * 0.5, rng.standard_normal((H, H)) * 0.5,
                  rng.standard_normal(H) * 0.1, rng.standard_normal((H, V)),
                  rng.standard_normal(V) * 0.1)
    f = jitted(sample_captions)
    for T in (5, 7, 11, 13, 12):
        compare(f, sample_captions, (*parameters, np.zeros((N, T), np.int64)))
    no_internal_errors(f)
    assert not f.stats()["eager_calls"], f.explain()
