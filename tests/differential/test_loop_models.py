"""Loop models, eager vs compiled: NumPy model code that loops, in the idioms real code uses.

The models are written the way public NumPy model code is (cs231n-style ``rnn_forward`` /
``lstm_forward`` with a buffer filled in place, karpathy's min-char-rnn with per-step
dicts, naive convolution and pooling over output positions, layer classes whose bound
methods hold the weights), each with the shape of loop it exercises: ``range(T)``,
``range(1, T)``, ``range(T - 1)``, ``range(0, T, 2)``, ``range(len(x))``, a constant
inner loop in a dynamic one, carried values, ``loss +=`` in float32 and float64, carried
integer counts, reads of ``x.shape`` inside the body, ``np.zeros_like`` and ``.copy()``.

Each model runs under ``jit`` with its default options (``loops="capture"``) over the trip
counts ``TRIPS`` through one jit function, so the function grows one variant per pow2
bucket; ``assert_compiled_matches_eager`` compares every result (and the arguments
afterwards) with eager NumPy at the per-dtype tolerances of ``tracejit.testing``. Then:

* the number of compiles: one per bucket when the loop is captured (a trip count must
  never be a reason to compile again), checked over a whole bucket of lengths too;
* gradients through captured loops (a carried loss, a buffer written at the index, ``loss
  +=``) against eager autograd, one variant with gradients for every length of a bucket;
* odd inputs: batch 1, prime sizes, non-contiguous views, NaN and Inf in the data;
* ``explain()`` names the file:line of a loop that stays unrolled and why.

What fails today is marked ``xfail(strict=True)`` with the reason, so the mark has to
come off when it is fixed. Adversarial loops (wrong answers, crashes) are in
``test_loop_adversarial.py``.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
from real_model_checks import all_compiled

from tracejit import jit
from tracejit.testing import assert_compiled_matches_eager, compare_results
from tracejit.tracer.shapes import pow2_bucket

TRIPS = (0, 1, 2, 3, 5, 7, 13, 16, 17, 31, 32, 33)
# Fewer trip counts for the small models, still two in some buckets (a trip count that
# compiled again would show): 0 and 1 alone, (2, 4], (4, 8] twice, (16, 32] twice.
SHORT_TRIPS = (0, 1, 3, 5, 7, 17, 31)
BATCH, FEATURES, HIDDEN = 6, 9, 10  # no dim equals a trip count: no symbol is shared


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# --- the models ---------------------------------------------------------------------------
def rnn_forward(x, h0, Wx, Wh, b):
    """cs231n-style: a buffer of every hidden state, filled in place at the time step."""
    N, T, D = x.shape
    h = np.zeros((N, T, h0.shape[1]), dtype=x.dtype)
    prev_h = h0
    for t in range(T):
        prev_h = np.tanh(x[:, t, :] @ Wx + prev_h @ Wh + b)
        h[:, t, :] = prev_h
    return h, prev_h


def lstm_forward(x, h0, Wx, Wh, b):
    N, T, D = x.shape
    H = h0.shape[1]
    hs = np.zeros((N, T, H), dtype=x.dtype)
    prev_h, prev_c = h0, np.zeros_like(h0)
    for t in range(T):
        a = x[:, t, :] @ Wx + prev_h @ Wh + b
        i = sigmoid(a[:, :H])
        f = sigmoid(a[:, H:2 * H])
        o = sigmoid(a[:, 2 * H:3 * H])
        g = np.tanh(a[:, 3 * H:])
        prev_c = f * prev_c + i * g
        prev_h = o * np.tanh(prev_c)
        hs[:, t, :] = prev_h
    return hs, prev_c


def rnn_collect_steps(x, h0, Wx, Wh, b):
    """States appended to a list once per step and stacked after the loop."""
    h = h0
    states = []
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t] @ Wx + h @ Wh + b)
        states.append(h)
    return np.stack(states, axis=1)


class ElmanLayer:
    """A layer object holding its weights; ``forward`` loops over time calling ``step``."""

    def __init__(self, Wx, Wh, b):
        self.Wx, self.Wh, self.b = Wx, Wh, b

    def step(self, x_t, h):
        return np.tanh(x_t @ self.Wx + h @ self.Wh + self.b)

    def forward(self, x, h):
        for t in range(x.shape[0]):
            h = self.step(x[t], h)
        return h


def dict_params_len(x, params):
    """Weights in a dict; the trip count from ``len(x)``."""
    state = params["h0"]
    for t in range(len(x)):
        state = np.tanh(x[t] @ params["Wx"] + state @ params["Wh"])
    return state


def char_rnn_loss(inputs, targets, hprev, Wxh, Whh, Why, bh, by):
    """min-char-rnn's forward pass, with integer arrays for the characters: per-step dicts
    ``hs[t]`` reading ``hs[t - 1]`` with ``hs[-1]`` set before the loop."""
    hs = {-1: np.copy(hprev)}
    loss = 0.0
    vocab = np.arange(Wxh.shape[1])
    for t in range(inputs.shape[0]):
        x = (vocab == inputs[t]).astype(np.float64)[:, None]
        hs[t] = np.tanh(Wxh @ x + Whh @ hs[t - 1] + bh)
        ys = Why @ hs[t] + by
        ps = np.exp(ys) / np.sum(np.exp(ys))
        loss += -np.log(np.sum(ps[:, 0] * (vocab == targets[t])))
    return loss


def ema_in_place(x, decay):
    """``.copy()``, ``range(1, T)``, each step reading the buffer the step before wrote."""
    out = x.copy()
    for t in range(1, x.shape[0]):
        out[t] = decay * out[t - 1] + (1 - decay) * x[t]
    return out


def conv1d_naive(x, w, b):
    """A loop over output positions writing disjoint slices (naive convolution)."""
    N, C, W = x.shape
    F, _, K = w.shape
    x_pad = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    W_out = W + 2 - K + 1
    out = np.zeros((N, F, W_out))
    for i in range(W_out):
        window = x_pad[:, None, :, i:i + K]
        out[:, :, i] = np.sum(window * w[None], axis=(2, 3)) + b
    return out


def max_pool1d_naive(x):
    """Strided windows ``x[..., 2*i:2*i+2]`` over output positions."""
    N, C, W = x.shape
    W_out = (W - 2) // 2 + 1
    out = np.zeros((N, C, W_out), dtype=x.dtype)
    for i in range(W_out):
        out[:, :, i] = np.max(x[:, :, 2 * i:2 * i + 2], axis=2)
    return out


def mean_reading_shape(x):
    """``x.shape`` read inside the body; ``np.zeros_like`` before the loop."""
    acc = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        acc = acc + x[t] / x.shape[0]
    return acc


def from_one(x, w):
    h = x[0] * w
    for t in range(1, x.shape[0]):
        h = np.tanh(h * w + x[t])
    return h


def differences(x):
    """``range(T - 1)`` with a read at ``t + 1``."""
    out = np.zeros_like(x)
    for t in range(x.shape[0] - 1):
        out[t] = x[t + 1] - x[t]
    return out


def every_other(x):
    """``range(0, T, 2)``."""
    s = np.zeros_like(x[0])
    for t in range(0, x.shape[0], 2):
        s = s + x[t] * x[t]
    return s


def constant_inner(x, w):
    """A constant ``range(3)`` inside the dynamic loop."""
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        for k in range(3):
            h = np.tanh(h * w[k] + x[t])
    return h


def loss_sum(x, w):
    """``loss = 0.0`` then ``loss +=`` a NumPy scalar of x's dtype."""
    loss = 0.0
    for t in range(x.shape[0]):
        loss += np.sum(np.tanh(x[t] * w))
    return loss


def count_positive(x):
    """An integer count carried as a NumPy scalar."""
    count = 0
    for t in range(x.shape[0]):
        count = count + np.sum(x[t] > 0)
    return count


def python_int_counter(x):
    """A Python int carried through the loop (``n += 1``)."""
    n = 0
    for t in range(x.shape[0]):  # noqa: B007 - a counting loop as users write it
        n += 1
    return x.sum(axis=0) * n


# --- argument makers: trip count -> argument tuple ------------------------------------------
def _rng(trips, salt):
    return np.random.default_rng(1000 * salt + trips)


def rnn_arguments(dtype):
    def make(trips):
        rng = _rng(trips, 1)
        return tuple(array.astype(dtype) for array in (
            rng.standard_normal((BATCH, trips, FEATURES)), rng.standard_normal((BATCH, HIDDEN)),
            rng.standard_normal((FEATURES, HIDDEN)) * 0.3,
            rng.standard_normal((HIDDEN, HIDDEN)) * 0.3, rng.standard_normal(HIDDEN)))
    return make


def lstm_arguments(trips):
    rng = _rng(trips, 2)
    return (rng.standard_normal((BATCH, trips, FEATURES)), rng.standard_normal((BATCH, HIDDEN)),
            rng.standard_normal((FEATURES, 4 * HIDDEN)) * 0.3,
            rng.standard_normal((HIDDEN, 4 * HIDDEN)) * 0.3, rng.standard_normal(4 * HIDDEN))


_LAYER_RNG = np.random.default_rng(3)
LAYER = ElmanLayer(_LAYER_RNG.standard_normal((FEATURES, HIDDEN)) * 0.3,
                   _LAYER_RNG.standard_normal((HIDDEN, HIDDEN)) * 0.3,
                   _LAYER_RNG.standard_normal(HIDDEN))
PARAMS = {"h0": _LAYER_RNG.standard_normal(HIDDEN),
          "Wx": _LAYER_RNG.standard_normal((FEATURES, HIDDEN)) * 0.3,
          "Wh": _LAYER_RNG.standard_normal((HIDDEN, HIDDEN)) * 0.3}
VOCAB = 11
CHAR_WEIGHTS = (np.zeros((HIDDEN, 1)), _LAYER_RNG.standard_normal((HIDDEN, VOCAB)) * 0.1,
                _LAYER_RNG.standard_normal((HIDDEN, HIDDEN)) * 0.1,
                _LAYER_RNG.standard_normal((VOCAB, HIDDEN)) * 0.1, np.zeros((HIDDEN, 1)),
                np.zeros((VOCAB, 1)))


def rows(trips, salt=4, columns=5, dtype=np.float64, at_least=0):
    return _rng(trips, salt).standard_normal((max(trips, at_least), columns)).astype(dtype)


MODELS = {
    # name: (function, argument maker, trip counts)
    "rnn_forward_f64": (rnn_forward, rnn_arguments(np.float64), TRIPS),
    "rnn_forward_f32": (rnn_forward, rnn_arguments(np.float32), SHORT_TRIPS),
    "lstm_forward": (lstm_forward, lstm_arguments, SHORT_TRIPS),
    "rnn_collect_steps": (rnn_collect_steps, rnn_arguments(np.float64),
                          tuple(t for t in SHORT_TRIPS if t)),  # np.stack([]) raises
    "layer_method": (LAYER.forward, lambda t: (
        _rng(t, 5).standard_normal((t, BATCH, FEATURES)), _rng(t, 6).standard_normal(
            (BATCH, HIDDEN))), SHORT_TRIPS),
    "dict_params_len": (dict_params_len, lambda t: (
        _rng(t, 7).standard_normal((t, FEATURES)), PARAMS), SHORT_TRIPS),
    "char_rnn_loss": (char_rnn_loss, lambda t: (
        _rng(t, 8).integers(0, VOCAB, t), _rng(t, 9).integers(0, VOCAB, t), *CHAR_WEIGHTS),
        SHORT_TRIPS),
    "ema_in_place": (ema_in_place, lambda t: (rows(t), 0.9), SHORT_TRIPS),
    "conv1d_naive": (conv1d_naive, lambda t: (
        _rng(t, 10).standard_normal((2, 3, t + 1)), _rng(t, 11).standard_normal((4, 3, 3)),
        _rng(t, 12).standard_normal(4)), SHORT_TRIPS),
    "max_pool1d_naive": (max_pool1d_naive, lambda t: (
        _rng(t, 13).standard_normal((2, 3, 2 * t + 2)),), SHORT_TRIPS),  # t + 1 windows
    "mean_reading_shape": (mean_reading_shape, lambda t: (rows(t, at_least=1),),
                           SHORT_TRIPS[1:]),
    "from_one": (from_one, lambda t: (rows(t, at_least=1), rows(1)[0]), SHORT_TRIPS[1:]),
    "differences": (differences, lambda t: (rows(t),), SHORT_TRIPS),
    "every_other": (every_other, lambda t: (rows(t, at_least=1),), SHORT_TRIPS[1:]),
    "constant_inner": (constant_inner, lambda t: (rows(t, at_least=1), rows(3, 14)[:, 0]),
                       SHORT_TRIPS[1:]),
    "loss_sum_f64": (loss_sum, lambda t: (rows(t), rows(1)[0]), SHORT_TRIPS),
    "loss_sum_f32": (loss_sum, lambda t: (rows(t, dtype=np.float32),
                                          rows(1, dtype=np.float32)[0]), SHORT_TRIPS),
    "count_positive": (count_positive, lambda t: (rows(t),), SHORT_TRIPS),
    "python_int_counter": (python_int_counter, lambda t: (rows(t),), SHORT_TRIPS),
}

# Results that differ from eager NumPy today: name -> reason.
WRONG = {}  # (the 0-d array for a scalar after a 3-trip first call is fixed: loops._like)
# Loops that are not captured today, so every trip count is a new trace and compile (and
# past max_variants the function runs eagerly): name -> reason.
NOT_CAPTURED = {
    "every_other": "a dynamic range with step 2 is refused: the loop unrolls",
    "python_int_counter": "a carried Python int (n += 1) is refused: the loop unrolls",
}


def _marked(names, reasons):
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reasons[name]))
            if name in reasons else name for name in names]


def _buckets(trip_counts):
    """The variants a sweep should compile: sizes 0 and 1 alone, the rest by pow2 bucket."""
    return {pow2_bucket(t) or t for t in trip_counts}


def _trip_dim(name, trips):
    """The dynamic dim a model's trip count follows (conv and pool take an input width)."""
    if name == "conv1d_naive":
        return trips + 1
    if name == "max_pool1d_naive":
        return 2 * trips + 2
    return trips


@pytest.mark.parametrize("name", _marked(MODELS, WRONG))
def test_loop_model_matches_eager_over_trip_counts(name, differential_tally):
    """Every trip count through one jit function (default options): results equal eager
    NumPy's, and a captured loop compiles once per bucket, whatever the lengths in it."""
    function, make, trip_counts = MODELS[name]
    jitted = jit(function, cache="memory")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        summary = assert_compiled_matches_eager(jitted, *(make(t) for t in trip_counts))
    differential_tally.record("loop models", name, summary)
    if name not in NOT_CAPTURED:
        buckets = _buckets(_trip_dim(name, t) for t in trip_counts)
        assert jitted.stats()["compiles"] == len(buckets), jitted.explain()
        assert not jitted.stats()["eager_calls"], jitted.explain()


@pytest.mark.parametrize("name", _marked(NOT_CAPTURED, NOT_CAPTURED))
def test_uncaptured_loop_model_compiles_once_per_bucket(name):
    """The models whose loop is not captured yet: four lengths of one bucket, one compile."""
    function, make, _ = MODELS[name]
    jitted = jit(function, cache="memory", dynamic=True)
    for trips in (5, 6, 7, 8):
        jitted(*make(trips))
    assert jitted.stats()["compiles"] == 1, jitted.explain()


@pytest.mark.xfail(strict=True, reason="a bucket first traced at a length with fewer than 3 "
                   "trips unrolls (tracer/loops.py run_loop: count < 3) and pins that length; the "
                   "next length of the bucket compiles again")
def test_a_bucket_first_seen_with_two_trips_still_compiles_once():
    jitted = jit(from_one, cache="memory", buckets={"x": {0: "pow2"}})
    weight = rows(1)[0]
    for trips in (3, 4):  # range(1, 3) runs 2 trips; bucket (2, 4]
        x = rows(trips)
        assert compare_results(jitted(x, weight), from_one(x, weight)) is None
    assert jitted.stats()["compiles"] == 1, jitted.explain()


# Only the time (or width) axis is bucketed: with dynamic=True the weights' dims would be
# symbols too, and slicing gates at 3*H of a symbolic 4*H is not decided (a VerifyError
# that runs lstm_forward eagerly - not a loop matter).
TIME_AXIS = {"rnn_forward_f64": {"x": {1: "pow2"}}, "lstm_forward": {"x": {1: "pow2"}},
             "conv1d_naive": {"x": {2: "pow2"}}}


@pytest.mark.parametrize("name", list(TIME_AXIS))
def test_every_length_of_a_bucket_shares_one_compile(name):
    """Lengths 17..32 (primes, the edges) after a first call at 17: one compile, every
    later call native."""
    function, make, _ = MODELS[name]
    jitted = jit(function, cache="memory", buckets=TIME_AXIS[name])
    lengths = (17, 32, 19, 23, 29, 31, 18)
    for length in lengths:
        arguments = make(length - 1 if name == "conv1d_naive" else length)  # width t + 1
        for _ in range(2):
            problem = compare_results(jitted(*arguments), function(*arguments))
            assert problem is None, (length, problem)
    stats = jitted.stats()
    assert stats["compiles"] == 1, jitted.explain()
    assert all_compiled(jitted, 2 * len(lengths)), stats


# --- gradients through captured loops -------------------------------------------------------
def rnn_loss(x, h0, Wx, Wh, b):
    """A loss carried through the time loop with the hidden state."""
    h = h0
    loss = 0.0
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        loss = loss + np.sum(h * h)
    return loss + np.sum(h)


def rnn_buffer_loss(x, h0, Wx, Wh, b):
    """The hidden states written into a buffer (built from the inputs, so that eager
    Tensors can write into it) and the loss taken after the loop."""
    hs = np.zeros_like(x[:, :, :1] * h0[:, None, :])
    h = h0
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        hs[:, t, :] = h
    return np.sum(hs * hs)


@pytest.mark.parametrize("function", [rnn_loss, rnn_buffer_loss, loss_sum],
                         ids=lambda function: function.__name__)
def test_gradients_through_loops_compile_once_per_bucket(function, differential_tally):
    """Gradients of every float argument against eager autograd, three lengths of one
    bucket: one variant without gradients and one with, whatever the length."""
    rng = np.random.default_rng(9)
    if function is loss_sum:
        arg_sets = [(rows(trips), rows(1)[0]) for trips in (5, 7, 8)]
        options = {"buckets": {"x": {0: "pow2"}}}
    else:
        weights = _rnn_weights(rng, FEATURES, HIDDEN)
        arg_sets = [(rng.standard_normal((BATCH, trips, FEATURES)),
                     rng.standard_normal((BATCH, HIDDEN)), *weights) for trips in (5, 7, 8)]
        options = {"buckets": {"x": {1: "pow2"}}}
    summary = assert_compiled_matches_eager(function, *arg_sets, grads=True, cache="memory",
                                            **options)
    differential_tally.record("loop models", function.__name__, summary)
    assert summary["compiles"] == 2, summary


# --- odd inputs ---------------------------------------------------------------------------
def _rnn_weights(rng, features, hidden, dtype=np.float64):
    return tuple(array.astype(dtype) for array in (
        rng.standard_normal((features, hidden)) * 0.3, rng.standard_normal((hidden, hidden)) * 0.3,
        rng.standard_normal(hidden)))


@pytest.mark.parametrize("batch,features,hidden", [(1, 3, 4), (7, 11, 13)])
def test_rnn_batch_one_and_prime_sizes(batch, features, hidden):
    rng = np.random.default_rng(batch)
    weights = _rnn_weights(rng, features, hidden)
    arg_sets = [(rng.standard_normal((batch, trips, features)),
                 rng.standard_normal((batch, hidden)), *weights) for trips in (5, 7, 3, 8)]
    summary = assert_compiled_matches_eager(rnn_forward, *arg_sets, cache="memory",
                                            dynamic=True)
    assert summary["compiles"] == 2  # buckets (3, 4] and (4, 8]


@pytest.mark.parametrize("layout", ["strided_time", "transposed_batch", "reversed_time"])
def test_rnn_non_contiguous_inputs(layout):
    """Views are passed as they are, fresh each call (``assert_compiled_matches_eager`` would
    deep-copy them into contiguous arrays)."""
    rng = np.random.default_rng(7)
    weights = _rnn_weights(rng, FEATURES, HIDDEN)
    jitted = jit(rnn_forward, cache="memory", dynamic=True)
    for trips in (5, 7):
        if layout == "strided_time":
            x = rng.standard_normal((BATCH, 2 * trips, FEATURES))[:, ::2]
        elif layout == "transposed_batch":
            x = np.transpose(rng.standard_normal((trips, BATCH, FEATURES)), (1, 0, 2))
        else:
            x = rng.standard_normal((BATCH, trips, FEATURES))[:, ::-1]
        assert not x.flags.c_contiguous
        h0 = rng.standard_normal((HIDDEN, BATCH)).T  # Fortran-ordered initial state
        for _ in range(2):
            problem = compare_results(jitted(x, h0, *weights), rnn_forward(x, h0, *weights))
            assert problem is None, (trips, problem)
    assert jitted.stats()["compiled_calls"] >= 2, jitted.explain()


def test_rnn_and_pool_with_nan_and_inf_in_the_data():
    rng = np.random.default_rng(8)
    weights = _rnn_weights(rng, FEATURES, HIDDEN)
    rnn_sets, pool_sets = [], []
    for trips, special in ((5, np.nan), (7, np.inf), (8, -np.inf)):  # one bucket
        x = rng.standard_normal((BATCH, trips, FEATURES))
        x[1, trips // 2, 3] = special  # one row goes NaN/saturates from the middle on
        rnn_sets.append((x, rng.standard_normal((BATCH, HIDDEN)), *weights))
        pooled = rng.standard_normal((2, 3, 2 * trips))
        pooled[0, 1, ::3] = special
        pool_sets.append((pooled,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_compiled_matches_eager(rnn_forward, *rnn_sets, cache="memory", dynamic=True)
        assert_compiled_matches_eager(max_pool1d_naive, *pool_sets, cache="memory",
                                      dynamic=True)


# --- explain() names the loops that stay unrolled -------------------------------------------
def _loop_line(function):
    lines, first = inspect.getsourcelines(function)
    offset = next(number for number, line in enumerate(lines) if line.lstrip().startswith("for "))
    return f"{inspect.getsourcefile(function)}:{first + offset}"


def index_read_after(x):
    """Python leaves ``t`` at its last value, which the function reads."""
    s = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        s = s + x[t]
    return s * t


def stops_early(x):
    """A ``break`` under an ``if`` with an ``else``: how many trips run depends on the data,
    and the exit is not a top-level ``if <test>: break`` (those are captured, any number
    of them: tracer/while_loops.py, tests/tracer/test_loop_exits2.py)."""
    s = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        s = s + x[t]
        if s.sum() > 1e9:
            break
        else:
            s = s * 1.0
    return s


# (Strided ranges and int counters, the cases this test once named, are captured now:
# tests/tracer/test_loop_strides_counters.py.)
@pytest.mark.parametrize("function,reason", [(index_read_after, "read after the loop"),
                                             (stops_early, "break")],
                         ids=["index_read_after", "stops_early"])
def test_explain_names_an_unrolled_loop_and_why(function, reason):
    jitted = jit(function, cache="memory", dynamic=True)
    rng = np.random.default_rng(3)
    for trips in (5, 6):
        jitted(rng.standard_normal((trips, 3)))
    text = jitted.explain()
    where = _loop_line(function)
    lines = [line for line in text.splitlines() if where in line and "unrolled" in line]
    assert lines and reason in lines[0], text
