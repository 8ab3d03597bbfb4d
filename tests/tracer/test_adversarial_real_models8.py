"""Adversarial real-model tests, ninth round: scans, sorts, masked selections and the
NaN-aware reductions, in the idioms of public NumPy model code (CS231n/CS224n layers,
min-char-rnn and LSTM gists, numpy-ml, d2l scratch chapters, micrograd-like autograd),
run eagerly and through ``jit`` on copies of the same arguments.

Covers what rounds one to eight do not: running maxima and cumulative sums as they appear
in models (drawdowns, inverse-CDF sampling, prefix-sum pooling), sorts and ``argsort``
with NaN and ties, boolean-mask selections reduced (``x[mask].mean()`` of an empty mask),
``nan*`` reductions of all-NaN rows, CRF forward and Viterbi in log space with buffers
filled in place, masked GRU steps over ragged lengths, beam search with hypotheses kept in
lists, Armijo line search and Sinkhorn (data-dependent ``while`` loops), optimizers whose
state is a dict of dicts or an object, a tiny reverse-mode autograd built from closures,
layer objects driven by a bound train step, ``np.random.seed`` inside the model (cs231n's
dropout), the fast max pool by reshape, convolution by ``as_strided``, loops carried
through the buffer they write, and dtype corners (uint8, int16, bool, float16, 0-d).

Each call compares results, dtypes, types and the arguments afterwards with eager NumPy,
and an exception eager raises must be raised too.

Findings. Wrong results: a scalar carried through a captured loop next to an array (``total
+= x[t].sum()``, ``peak = np.maximum(peak, ...)``, ``n += x[t].argmax()``) came back as a
0-d ndarray instead of a NumPy scalar, and ``np.clip(-0.0, 0.0, 1.0)`` lost the sign of zero
(both fixed while this round ran; their tests stay as regressions); a float32 sum of
cancelling terms keeps more precision than NumPy's; ``np.floor``/``astype(int)`` of a
compiled reduction turns its last-bit difference into a whole unit (``np.full(45, 0.1).sum()
* 10`` is 45 compiled, 44 in NumPy). Slow: Python ``min()`` of traced cells (dynamic time
warping) is a guard per cell, so it never runs compiled while its compiles grow fast.
Internal errors: inputs of dtypes compiled code lacks (uint8 images, int16 counts, float16)
cast up fail with ``KeyError: dtype(...)``; ``.item()`` of a loop total breaks the native
loop (``StopIteration``); a loop body calling a method that sets attributes raises
``Refused`` inside tracejit; one IndexError part way through a loop sends that length
eagerly for good. Eager fallbacks of common idioms: ``np.asarray(X)``/``np.array(X,
dtype=float)`` of an argument, ``np.float32(x.mean())``, ``np.mean(list_of_losses)``,
``np.arange(k)``/ ``np.roll(x, k)``/``np.concatenate([[k], ids])`` of an int argument that
changed, ``np.full``/``np.full_like`` of a traced fill, ``x[m] = y[m]``, ``x[m] *= 0.5``,
``np.count_nonzero``, ``np.maximum.accumulate``, ``np.cumprod``, ``x.strides``,
``np.broadcast_arrays``, ``np.array_equal``, ``np.atleast_2d``, ``np.take(mode="clip")`` and
minibatch generators. Tests marked ``xfail(strict=True)`` are minimal reproductions.
"""

import copy

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for, run_calls

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-5)
F16 = dict(rtol=2e-3, atol=2e-3)
TOLERANCE = {np.float64: F64, np.float32: F32, np.float16: F16}


# --- scans: running maxima, cumulative sums, inverse-CDF sampling ----------------------------
def max_drawdown(returns):
    """A finance-course drawdown: the running peak of the wealth curve."""
    wealth = np.cumprod(1.0 + returns)
    peak = np.maximum.accumulate(wealth)
    drawdown = (peak - wealth) / peak
    return drawdown.max(), np.argmax(drawdown)


def test_max_drawdown_over_lengths():
    rng = rng_for(900)
    run_calls(max_drawdown, [(rng.normal(0, 0.05, n),) for n in (5, 8, 13, 1)], **F64)


def prefix_sum_pooling(x, lengths):
    """Mean pooling over ragged rows by a prefix sum (d2l's trick for variable lengths)."""
    padded = np.concatenate([np.zeros((x.shape[0], 1, x.shape[2])), np.cumsum(x, axis=1)],
                            axis=1)
    idx = np.arange(x.shape[0])
    return padded[idx, lengths] / np.maximum(lengths, 1)[:, None]


def test_prefix_sum_pooling_with_empty_rows():
    rng = rng_for(901)
    sets = [(rng.standard_normal((n, t, 3)), rng.integers(0, t + 1, n))
            for n, t in ((4, 5, ), (3, 7), (5, 2))]
    sets.append((rng.standard_normal((3, 4, 3)), np.array([0, 0, 0])))
    run_calls(prefix_sum_pooling, sets, **F64)


def sample_by_inverse_cdf(logits, uniforms):
    """Sampling from a softmax without np.random.choice: the CDF and a comparison count."""
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    cdf = np.cumsum(p, axis=-1)
    return (cdf < uniforms[:, None]).sum(axis=-1)


def test_sampling_by_inverse_cdf_over_batches():
    rng = rng_for(902)
    run_calls(sample_by_inverse_cdf, [(rng.standard_normal((n, 6)), rng.random(n))
                                      for n in (3, 5, 11, 1)], **F64)


def integer_cumsum_corners(mask, counts):
    """Positions of the kept tokens (cumsum of a bool mask) and int16 running counts."""
    positions = np.cumsum(mask, axis=-1) - 1
    running = counts.cumsum()
    return np.where(mask, positions, -1), running, running.dtype.itemsize


@pytest.mark.parametrize("count_dtype", [np.int16, np.uint8, np.int32, np.bool_])
def test_cumsum_of_bool_and_small_integer_dtypes(count_dtype):
    rng = rng_for(903)
    sets = [(rng.random((n, 5)) > 0.5, rng.integers(0, 2, 7).astype(count_dtype))
            for n in (2, 4, 3)]
    run_calls(integer_cumsum_corners, sets)


# --- sorts: argsort with NaN, ties broken stably, top-k by argsort ----------------------------
def median_filter_rows(x):
    """Median of each row by sorting (NaN sorts last, as NumPy's sort puts it)."""
    s = np.sort(x, axis=-1)
    n = x.shape[-1]
    if n % 2:
        return s[..., n // 2]
    return 0.5 * (s[..., n // 2 - 1] + s[..., n // 2])


def test_median_by_sort_with_nan_and_odd_even_widths():
    rng = rng_for(904)
    with_nan = rng.standard_normal((3, 6))
    with_nan[1, 2] = np.nan
    with_inf = rng.standard_normal((2, 5))
    with_inf[0, :2] = [np.inf, -np.inf]
    run_calls(median_filter_rows, [(rng.standard_normal((3, 5)),), (with_nan,), (with_inf,),
                                   (rng.standard_normal((4, 6)),), (with_nan,)], **F64)


def top_k_recall(scores, labels, k):
    """Recall@k over a batch: the top-k columns by a stable descending argsort."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    hits = (order == labels[:, None]).any(axis=1)
    return hits.mean(), order


def test_top_k_recall_with_ties_and_changing_k():
    rng = rng_for(905)
    tied = np.round(rng.standard_normal((5, 6)), 0)
    sets = [(rng.standard_normal((4, 6)), rng.integers(0, 6, 4), 2),
            (tied, rng.integers(0, 6, 5), 2),
            (tied, rng.integers(0, 6, 5), 3),
            (rng.standard_normal((7, 6)), rng.integers(0, 6, 7), 1)]
    run_calls(top_k_recall, sets, **F64)


# --- masked selections reduced (dropout statistics, hinge terms, NaN filters) -----------------
def masked_statistics(x, mask):
    """Mean/max/std of the kept entries; an empty selection is NumPy's NaN."""
    kept = x[mask]
    return kept.mean(), kept.std(), np.count_nonzero(mask), kept.sum()


def test_masked_selection_statistics_with_empty_and_full_masks():
    rng = rng_for(906)
    x = rng.standard_normal((4, 5))
    sets = [(x, x > 0), (x, x > 0.5), (x, np.zeros_like(x, dtype=bool)), (x, x > -10),
            (x, x > 0)]
    run_calls(masked_statistics, sets, **F64)


def masked_max(x, mask):
    return x[mask].max()


def test_max_of_an_empty_selection_raises_like_eager():
    x = np.arange(6.0).reshape(2, 3)
    run_calls(masked_max, [(x, x > 2), (x, x > 100), (x, x > 2), (x, x > 100)])


def svm_hinge_by_selection(scores, y, delta):
    """cs231n's svm loss, summing the positive margins through a selection."""
    n = scores.shape[0]
    correct = scores[np.arange(n), y][:, None]
    margins = scores - correct + delta
    margins[np.arange(n), y] = 0.0
    positive = margins[margins > 0]
    return positive.sum() / n, (margins > 0).sum(axis=1)


def test_svm_hinge_summed_through_a_boolean_selection():
    rng = rng_for(907)
    sets = [(rng.standard_normal((n, 4)), rng.integers(0, 4, n), d)
            for n, d in ((5, 1.0), (3, 1.0), (6, 0.0), (2, 1e-3))]
    run_calls(svm_hinge_by_selection, sets, **F64)


# --- NaN-aware reductions --------------------------------------------------------------------
def nan_robust_normalize(x):
    """Feature standardization that ignores missing values (the titanic-notebook idiom)."""
    mu = np.nanmean(x, axis=0)
    sd = np.nanstd(x, axis=0)
    filled = np.where(np.isnan(x), mu, x)
    return (filled - mu) / np.where(sd > 0, sd, 1.0), np.nanmax(x, axis=0)


def test_nan_robust_normalization_with_all_nan_columns():
    rng = rng_for(908)
    x = rng.standard_normal((5, 4))
    x[1, 2] = np.nan
    all_nan = x.copy()
    all_nan[:, 3] = np.nan
    run_calls(nan_robust_normalize, [(x,), (all_nan,), (rng.standard_normal((7, 4)),),
                                     (all_nan,)], **F64)


def nan_argmax_decoder(logits):
    return np.nanargmax(logits, axis=-1)


def test_nanargmax_of_an_all_nan_row_raises_like_eager():
    x = np.arange(12.0).reshape(3, 4)
    bad = x.copy()
    bad[1] = np.nan
    run_calls(nan_argmax_decoder, [(x,), (bad,), (x,), (bad,)])


def nan_cumulative_reward(rewards):
    return np.nancumsum(rewards, axis=-1), np.nansum(rewards, axis=-1)


def test_nancumsum_of_rewards_with_missing_steps():
    rng = rng_for(909)
    r = rng.standard_normal((3, 6))
    r[0, ::2] = np.nan
    r[2] = np.nan
    run_calls(nan_cumulative_reward, [(r,), (rng.standard_normal((2, 9)),), (r,)], **F64)


# --- CRF forward algorithm and Viterbi in log space, buffers filled in place -----------------
def crf_log_partition(emissions, transitions, start, end):
    """A linear-chain CRF's forward algorithm over a (T, K) emission matrix."""
    T, K = emissions.shape
    alphas = np.empty((T, K))
    alphas[0] = start + emissions[0]
    for t in range(1, T):
        scores = alphas[t - 1][:, None] + transitions + emissions[t][None, :]
        top = scores.max(axis=0)
        alphas[t] = top + np.log(np.exp(scores - top).sum(axis=0))
    final = alphas[-1] + end
    top = final.max()
    return top + np.log(np.exp(final - top).sum()), alphas


def crf_viterbi(emissions, transitions, start, end):
    T, K = emissions.shape
    score = start + emissions[0]
    backpointers = np.zeros((T, K), dtype=np.int64)
    for t in range(1, T):
        total = score[:, None] + transitions
        backpointers[t] = total.argmax(axis=0)
        score = total.max(axis=0) + emissions[t]
    score = score + end
    best = [int(score.argmax())]
    for t in range(T - 1, 0, -1):
        best.append(int(backpointers[t, best[-1]]))
    best.reverse()
    return best, score.max()


def crf_arguments(rng, T, K=4):
    return (rng.standard_normal((T, K)), rng.standard_normal((K, K)), rng.standard_normal(K),
            rng.standard_normal(K))


@pytest.mark.parametrize("model", [crf_log_partition, crf_viterbi])
def test_crf_forward_and_viterbi_over_lengths(model):
    rng = rng_for(910)
    ninf = crf_arguments(rng, 6)
    ninf[1][0, :] = -np.inf
    run_calls(model, [crf_arguments(rng, 5), crf_arguments(rng, 8), crf_arguments(rng, 1),
                      ninf], **F64)


# --- a masked GRU over ragged lengths (CS224n's padded batches) ----------------------------
def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def masked_gru(x, lengths, params):
    N, T, D = x.shape
    H = params["Wz"].shape[1]
    h = np.zeros((N, H), dtype=x.dtype)
    hs = np.zeros((N, T, H), dtype=x.dtype)
    for t in range(T):
        xt = x[:, t]
        z = sigmoid(xt @ params["Wz"] + h @ params["Uz"])
        r = sigmoid(xt @ params["Wr"] + h @ params["Ur"])
        cand = np.tanh(xt @ params["Wh"] + (r * h) @ params["Uh"])
        h_new = (1 - z) * h + z * cand
        alive = (t < lengths)[:, None]
        h = np.where(alive, h_new, h)
        hs[:, t] = h * alive
    return hs, h


def gru_params(rng, D, H, dtype):
    return {name: (rng.standard_normal((D if name[0] == "W" else H, H)) * 0.4).astype(dtype)
            for name in ("Wz", "Uz", "Wr", "Ur", "Wh", "Uh")}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_masked_gru_over_ragged_lengths(dtype):
    rng = rng_for(911)
    params = gru_params(rng, 3, 4, dtype)

    def batch(n, t):
        return (rng.standard_normal((n, t, 3)).astype(dtype), rng.integers(0, t + 1, n), params)

    run_calls(masked_gru, [batch(2, 5), batch(3, 7), batch(1, 1), batch(4, 11)],
              **TOLERANCE[dtype])


# --- beam search with hypotheses in lists ---------------------------------------------------
def beam_search(log_probs, beam, eos):
    """Beam search over a fixed table of per-step log-probabilities (T, V), keeping
    (score, tokens) hypotheses in lists and finishing those that emit ``eos``."""
    hyps = [(0.0, [])]
    finished = []
    for t in range(log_probs.shape[0]):
        candidates = []
        for score, tokens in hyps:
            order = np.argsort(-log_probs[t], kind="stable")[:beam]
            for token in order:
                candidates.append((score + float(log_probs[t, token]), tokens + [int(token)]))
        candidates.sort(key=lambda c: -c[0])
        hyps = []
        for score, tokens in candidates[:beam]:
            if tokens[-1] == eos:
                finished.append((score, tokens))
            else:
                hyps.append((score, tokens))
        if not hyps:
            break
    finished.extend(hyps)
    return max(finished, key=lambda c: c[0])


def test_beam_search_with_early_finish():
    rng = rng_for(912)

    def table(T, V=5, eos_first=False):
        logits = rng.standard_normal((T, V))
        if eos_first:
            logits[:, 0] += 10.0
        return np.log(np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True))

    run_calls(beam_search, [(table(4), 2, 0), (table(4), 2, 0), (table(3, eos_first=True), 2, 0),
                            (table(6), 3, 0)], **F64)


# --- Armijo backtracking line search: a data-dependent while loop ---------------------------
def logistic_loss(w, X, y, lam):
    z = X @ w
    return np.mean(np.logaddexp(0.0, -y * z)) + 0.5 * lam * w @ w


def gradient_descent_armijo(w, X, y, lam, steps):
    history = []
    for _ in range(steps):
        z = X @ w
        g = -(X.T @ (y * sigmoid(-y * z))) / len(y) + lam * w
        t = 1.0
        f0 = logistic_loss(w, X, y, lam)
        while logistic_loss(w - t * g, X, y, lam) > f0 - 0.5 * t * (g @ g):
            t *= 0.5
            if t < 1e-8:
                break
        w -= t * g
        history.append(t)
        if np.linalg.norm(g) < 1e-6:
            break
    return w, history


def test_armijo_line_search_updates_weights_in_place():
    rng = rng_for(913)

    def problem(n, d, lam):
        X = rng.standard_normal((n, d))
        y = np.sign(X @ rng.standard_normal(d) + 0.1)
        return np.zeros(d), X, y, lam, 2

    run_calls(gradient_descent_armijo, [problem(20, 3, 0.1), problem(30, 3, 0.1),
                                        problem(7, 3, 0.0)], **F64)


# --- optimizers with a dict of dicts as state ------------------------------------------------
def adam_step(params, grads, state, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """A d2l-style Adam: per-parameter state {"m", "v"} and a shared step count ``t``."""
    state["t"] = state.get("t", 0) + 1
    t = state["t"]
    for name, p in params.items():
        s = state.setdefault(name, {"m": np.zeros_like(p), "v": np.zeros_like(p)})
        g = grads[name]
        s["m"] *= b1
        s["m"] += (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        m_hat = s["m"] / (1 - b1 ** t)
        v_hat = s["v"] / (1 - b2 ** t)
        p -= lr * m_hat / (np.sqrt(v_hat) + eps)
    return state["t"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adam_with_nested_state_dicts_over_steps(dtype):
    rng = rng_for(914)
    params = {"W": rng.standard_normal((3, 4)).astype(dtype), "b": np.zeros(4, dtype=dtype)}
    state = {}
    f = jitted(adam_step)
    eager_params, eager_state = copy.deepcopy(params), copy.deepcopy(state)
    for step in range(5):
        grads = {"W": rng.standard_normal((3, 4)).astype(dtype),
                 "b": rng.standard_normal(4).astype(dtype)}
        if step == 3:
            grads["W"][0, 0] = np.nan
        want = adam_step(eager_params, grads, eager_state)
        got = f(params, grads, state)
        assert_same(got, want)
        assert_same(params, eager_params, where="params", **TOLERANCE[dtype])
        assert_same(state, eager_state, where="state", **TOLERANCE[dtype])


# --- a tiny reverse-mode autograd of closures (micrograd on arrays) -------------------------
class Value:
    def __init__(self, data, parents=()):
        self.data = data
        self.grad = np.zeros_like(data)
        self._parents = parents
        self._backward = lambda: None

    def __add__(self, other):
        out = Value(self.data + other.data, (self, other))

        def backward():
            self.grad += out.grad
            other.grad += out.grad.sum(axis=0) if other.data.ndim < out.data.ndim else out.grad
        out._backward = backward
        return out

    def __matmul__(self, other):
        out = Value(self.data @ other.data, (self, other))

        def backward():
            self.grad += out.grad @ other.data.T
            other.grad += self.data.T @ out.grad
        out._backward = backward
        return out

    def relu(self):
        out = Value(np.maximum(self.data, 0), (self,))

        def backward():
            self.grad += (out.data > 0) * out.grad
        out._backward = backward
        return out

    def mse(self, target):
        diff = self.data - target
        out = Value(np.array((diff ** 2).mean()), (self,))

        def backward():
            self.grad += 2.0 * diff / diff.size * out.grad
        out._backward = backward
        return out

    def backward(self):
        order, seen = [], set()
        stack = [(self, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((parent, False) for parent in node._parents)
        self.grad = np.ones_like(self.data)
        for node in reversed(order):
            node._backward()


def autograd_train_step(x, target, W1, b1, W2, lr):
    w1, c1, w2 = Value(W1), Value(b1), Value(W2)
    loss = ((Value(x) @ w1 + c1).relu() @ w2).mse(target)
    loss.backward()
    for v, p in ((w1, W1), (c1, b1), (w2, W2)):
        p -= lr * v.grad
    return loss.data, w1.grad


def test_closure_autograd_train_steps_update_weights_in_place():
    rng = rng_for(915)

    def batch(n):
        return (rng.standard_normal((n, 3)), rng.standard_normal((n, 2)),
                rng.standard_normal((3, 5)), np.zeros(5), rng.standard_normal((5, 2)), 0.1)

    run_calls(autograd_train_step, [batch(4), batch(6), batch(1), batch(9)], **F64)


# --- cs231n batchnorm with a bn_param dict switched between modes -----------------------------
def batchnorm_forward(x, gamma, beta, bn_param):
    mode = bn_param["mode"]
    eps = bn_param.get("eps", 1e-5)
    momentum = bn_param.get("momentum", 0.9)
    N, D = x.shape
    running_mean = bn_param.get("running_mean", np.zeros(D, dtype=x.dtype))
    running_var = bn_param.get("running_var", np.zeros(D, dtype=x.dtype))
    cache = None
    if mode == "train":
        mu = x.mean(axis=0)
        var = x.var(axis=0)
        xhat = (x - mu) / np.sqrt(var + eps)
        out = gamma * xhat + beta
        running_mean = momentum * running_mean + (1 - momentum) * mu
        running_var = momentum * running_var + (1 - momentum) * var
        cache = (xhat, gamma, var + eps)
    elif mode == "test":
        out = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta
    else:
        raise ValueError('Invalid forward batchnorm mode "%s"' % mode)
    bn_param["running_mean"] = running_mean
    bn_param["running_var"] = running_var
    return out, cache


def batchnorm_backward_alt(dout, cache):
    xhat, gamma, var_eps = cache
    N = dout.shape[0]
    dxhat = dout * gamma
    dx = (N * dxhat - dxhat.sum(axis=0) - xhat * (dxhat * xhat).sum(axis=0)) / (
        N * np.sqrt(var_eps))
    return dx, (dout * xhat).sum(axis=0), dout.sum(axis=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batchnorm_with_a_bn_param_dict_over_modes_and_batches(dtype):
    rng = rng_for(916)
    gamma, beta = rng.standard_normal(4).astype(dtype), rng.standard_normal(4).astype(dtype)
    bn_param = {"mode": "train"}
    forward, backward = jitted(batchnorm_forward), jitted(batchnorm_backward_alt)
    eager_param = copy.deepcopy(bn_param)
    for step, (n, mode) in enumerate([(5, "train"), (8, "train"), (3, "test"), (1, "train"),
                                      (7, "train"), (4, "test"), (2, "eval")]):
        x = (rng.standard_normal((n, 4)) * 3 + 1).astype(dtype)
        bn_param["mode"] = eager_param["mode"] = mode
        try:
            want = batchnorm_forward(x, gamma, beta, eager_param)
        except ValueError:
            with pytest.raises(ValueError, match="Invalid forward batchnorm mode"):
                forward(x, gamma, beta, bn_param)
            continue
        got = forward(x, gamma, beta, bn_param)
        assert_same(got, want, **TOLERANCE[dtype])
        assert_same(bn_param, eager_param, where=f"bn_param at step {step}", **TOLERANCE[dtype])
        if mode == "train" and n > 1:
            dout = rng.standard_normal((n, 4)).astype(dtype)
            assert_same(backward(dout, got[1]), batchnorm_backward_alt(dout, want[1]),
                        **TOLERANCE[dtype])


# --- cs231n dropout: np.random.seed inside the model when the param dict has a seed -----------
def dropout_forward(x, dropout_param):
    p, mode = dropout_param["p"], dropout_param["mode"]
    if "seed" in dropout_param:
        np.random.seed(dropout_param["seed"])
    mask = None
    if mode == "train":
        mask = (np.random.rand(*x.shape) < p) / p
        out = x * mask
    else:
        out = x
    return out.astype(x.dtype, copy=False), (dropout_param, mask)


def test_dropout_with_a_seed_inside_the_model_matches_eager():
    rng = rng_for(917)
    sets = [(rng.standard_normal((n, 5)), {"p": p, "mode": mode, "seed": 123})
            for n, p, mode in ((4, 0.5, "train"), (6, 0.8, "train"), (4, 0.5, "test"),
                               (3, 1.0, "train"))]
    sets.append((rng.standard_normal((2, 5)).astype(np.float32),
                 {"p": 0.3, "mode": "train", "seed": 7}))
    run_calls(dropout_forward, sets, **F32)


# --- the fast max pool by reshape, its backward through a mask with ties ----------------------
def max_pool_forward_reshape(x, pool):
    N, C, H, W = x.shape
    x_reshaped = x.reshape(N, C, H // pool, pool, W // pool, pool)
    out = x_reshaped.max(axis=3).max(axis=4)
    return out, (x, x_reshaped, out)


def max_pool_backward_reshape(dout, cache):
    x, x_reshaped, out = cache
    dx_reshaped = np.zeros_like(x_reshaped)
    out_newaxis = out[:, :, :, np.newaxis, :, np.newaxis]
    mask = x_reshaped == out_newaxis
    dout_newaxis = dout[:, :, :, np.newaxis, :, np.newaxis]
    dout_broadcast, _ = np.broadcast_arrays(dout_newaxis, dx_reshaped)
    dx_reshaped[mask] = dout_broadcast[mask]
    dx_reshaped /= np.sum(mask, axis=(3, 5), keepdims=True)
    return dx_reshaped.reshape(x.shape)


def pool_round_trip(x, dout, pool):
    out, cache = max_pool_forward_reshape(x, pool)
    return out, max_pool_backward_reshape(dout, cache)


def test_max_pool_by_reshape_forward_and_backward_with_ties():
    rng = rng_for(918)

    def images(n, h, ties=False):
        x = rng.standard_normal((n, 2, h, h))
        if ties:
            x = np.round(x)
        return x, rng.standard_normal((n, 2, h // 2, h // 2)), 2

    run_calls(pool_round_trip, [images(2, 4), images(3, 6), images(2, 4, ties=True),
                                images(1, 2), images(2, 8, ties=True)], **F64)


# --- convolution by as_strided windows and einsum, padding by np.pad --------------------------
def conv_forward_strided(x, w, b, stride, pad):
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    Hout = (H + 2 * pad - HH) // stride + 1
    Wout = (W + 2 * pad - WW) // stride + 1
    sN, sC, sH, sW = xp.strides
    windows = np.lib.stride_tricks.as_strided(
        xp, shape=(N, C, Hout, Wout, HH, WW),
        strides=(sN, sC, sH * stride, sW * stride, sH, sW))
    out = np.einsum("nchwij,fcij->nfhw", windows, w) + b[None, :, None, None]
    return out


def test_conv_by_as_strided_over_strides_pads_and_sizes():
    rng = rng_for(919)

    def case(n, h, stride, pad):
        return (rng.standard_normal((n, 2, h, h)), rng.standard_normal((3, 2, 3, 3)),
                rng.standard_normal(3), stride, pad)

    run_calls(conv_forward_strided, [case(2, 5, 1, 1), case(2, 7, 2, 1), case(1, 3, 1, 0),
                                     case(3, 6, 1, 1), case(2, 7, 2, 0)], **F64)


# --- k-means with empty clusters kept and a while loop until labels settle --------------------
def kmeans(X, centers, max_iter):
    labels = np.full(X.shape[0], -1)
    it = 0
    while it < max_iter:
        d2 = ((X[:, None, :] - centers[None]) ** 2).sum(axis=-1)
        new = d2.argmin(axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        onehot = (labels[:, None] == np.arange(len(centers))).astype(X.dtype)
        counts = onehot.sum(axis=0)
        sums = onehot.T @ X
        centers = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centers)
        it += 1
    inertia = ((X - centers[labels]) ** 2).sum()
    return centers, labels, it, inertia


def test_kmeans_with_empty_clusters_and_a_settling_while_loop():
    rng = rng_for(920)

    def case(n, k, far=False):
        X = rng.standard_normal((n, 2))
        centers = X[:k].copy()
        if far:
            centers[-1] = 100.0
        return X, centers, 10

    run_calls(kmeans, [case(12, 3), case(20, 3), case(12, 3, far=True), case(5, 2),
                       case(9, 4, far=True)], **F64)


# --- softmax regression over mini-batches with a ragged last batch ----------------------------
def softmax_regression_epoch(X, y, W, lr, batch_size):
    losses = []
    for start in range(0, X.shape[0], batch_size):
        xb, yb = X[start:start + batch_size], y[start:start + batch_size]
        scores = xb @ W
        scores -= scores.max(axis=1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=1, keepdims=True)
        losses.append(-np.log(probs[np.arange(len(yb)), yb]).mean())
        dscores = probs
        dscores[np.arange(len(yb)), yb] -= 1
        W -= lr * xb.T @ dscores / len(yb)
    return losses


@pytest.mark.parametrize("label_dtype", [np.int32, np.uint8])
def test_softmax_regression_epochs_with_ragged_last_batches(label_dtype):
    rng = rng_for(921)

    def case(n, bs):
        return (rng.standard_normal((n, 3)), rng.integers(0, 4, n).astype(label_dtype),
                np.zeros((3, 4)), 0.5, bs)

    run_calls(softmax_regression_epoch, [case(10, 4), case(13, 4), case(3, 4), case(12, 5)],
              **F64)


# --- word2vec negative sampling: row updates through fancy indices ---------------------------
def sgns_step(W_in, W_out, center, context, negatives, lr):
    """One skip-gram negative-sampling step; negatives may repeat (NumPy keeps one update)."""
    v = W_in[center]
    ids = np.concatenate([[context], negatives])
    u = W_out[ids]
    labels = np.zeros(len(ids))
    labels[0] = 1.0
    scores = sigmoid(u @ v)
    g = scores - labels
    loss = -np.log(scores[0]) - np.log(1 - scores[1:]).sum()
    W_out[ids] -= lr * g[:, None] * v[None, :]
    W_in[center] -= lr * g @ u
    return loss


def test_negative_sampling_steps_with_unique_and_repeated_negatives():
    rng = rng_for(922)
    W_in, W_out = rng.standard_normal((10, 4)) * 0.1, rng.standard_normal((10, 4)) * 0.1
    sets = [(W_in, W_out, 3, 5, np.array([1, 7, 2]), 0.1),
            (W_in, W_out, 4, 0, np.array([9, 8, 6]), 0.1),
            (W_in, W_out, 4, 0, np.array([9, 9, 6]), 0.1),
            (W_in, W_out, 2, 2, np.array([1, 5, 7, 8]), 0.05)]
    run_calls(sgns_step, sets, **F64)


# --- multi-head attention returning transposed views ----------------------------------------
def multihead_attention(x, Wq, Wk, Wv, heads, lengths):
    N, T, D = x.shape
    dh = D // heads

    def split(z):
        return z.reshape(N, T, heads, dh).transpose(0, 2, 1, 3)

    q, k, v = split(x @ Wq), split(x @ Wk), split(x @ Wv)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
    key_mask = np.arange(T)[None, :] < lengths[:, None]
    scores = np.where(key_mask[:, None, None, :], scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(N, T, D)
    return out, weights.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_multihead_attention_with_key_padding_over_lengths(dtype):
    rng = rng_for(923)
    D = 8
    weights = [(rng.standard_normal((D, D)) / np.sqrt(D)).astype(dtype) for _ in range(3)]

    def case(n, t, heads):
        return (rng.standard_normal((n, t, D)).astype(dtype), *weights, heads,
                rng.integers(1, t + 1, n))

    run_calls(multihead_attention, [case(2, 5, 2), case(3, 7, 2), case(2, 6, 4)],
              **TOLERANCE[dtype])


# --- reproductions of what this round found --------------------------------------------------
def smoothed_state_and_total(x):
    """An EMA state and a running total carried through one loop, the total used after it."""
    h = np.zeros(x.shape[1], dtype=x.dtype)
    total = 0.0
    for t in range(x.shape[0]):
        h = h * 0.9 + x[t]
        total = total + x[t].sum()
    return h, total, total / 2


def test_a_loop_carried_scalar_total_stays_a_numpy_scalar():
    rng = rng_for(930)
    run_calls(smoothed_state_and_total, [(rng.standard_normal((5, 3)),),
                                         (rng.standard_normal((9, 3)),)])


def cumulative_counts(counts):
    return counts.cumsum()


def normalize_image(image):
    return (image / 255.0 - 0.5).mean(axis=(-2, -1))


def half_precision_layer(x, w):
    return np.tanh(x.astype(np.float32) @ w)


@pytest.mark.parametrize("model, make", [
    (cumulative_counts, lambda n: (np.arange(n, dtype=np.int16),)),
    (normalize_image, lambda n: (np.arange(3 * n * n, dtype=np.uint8).reshape(3, n, n),)),
    (half_precision_layer, lambda n: (np.ones((n, 3), dtype=np.float16),
                                      np.ones((3, 2), dtype=np.float32))),
], ids=["int16_cumsum", "uint8_image", "float16_cast"])
def test_narrow_dtype_inputs_cast_up_are_no_internal_error(model, make):
    """uint8/int16 arguments that every use converts compile (codegen/narrow_inputs.py);
    float16 ones run eagerly, saying how to compile."""
    f = run_calls(model, [make(4), make(5)], **F32)
    no_internal_errors(f)
    if model is half_precision_layer:
        assert "astype(np.float32)" in repr(f.stats()["eager_reasons"])
    else:
        assert not f.stats()["eager_calls"], f.explain()


def no_eager_calls(f):
    assert not f.stats()["eager_calls"], f.explain()


def standardize_after_asarray(X):
    X = np.asarray(X)
    return (X - X.mean(axis=0)) / (X.std(axis=0) + 1e-8)


def standardize_after_array_as_float(X):
    X = np.array(X, dtype=float)
    return (X - X.mean(axis=0)) / (X.std(axis=0) + 1e-8)


def loss_as_a_0d_array(X):
    return np.array(X.mean())


def loss_as_a_float32_scalar(X):
    return np.float32(X.mean()) * 2


def mean_of_a_list_of_losses(X):
    losses = [np.log1p(np.exp(-X[t])).mean() for t in range(X.shape[0])]
    return np.mean(losses)


@pytest.mark.parametrize("model", [standardize_after_asarray, standardize_after_array_as_float,
                                   loss_as_a_0d_array, loss_as_a_float32_scalar,
                                   mean_of_a_list_of_losses])
def test_conversions_of_traced_arrays_compile(model):
    rng = rng_for(931)
    f = run_calls(model, [(rng.standard_normal((5, 3)),), (rng.standard_normal((8, 3)),)])
    no_eager_calls(f)


def running_peak(wealth):
    return np.maximum.accumulate(wealth)


def test_running_peak_by_maximum_accumulate_compiles():
    rng = rng_for(932)
    f = run_calls(running_peak, [(rng.random(6),), (rng.random(9),)])
    no_eager_calls(f)


def shift_sequence(x, k):
    return np.roll(x, k, axis=-1)


def test_roll_by_a_changing_shift_compiles():
    x = np.arange(8.0).reshape(2, 4)
    f = run_calls(shift_sequence, [(x, 1), (x, -5), (x, 7), (x, 2)])
    no_eager_calls(f)


def gather_part_way(x, idx, out):
    for t in range(idx.shape[0]):
        out[t] = x[idx[t]] * 2
    return out


def test_valid_calls_after_an_index_error_part_way_through_a_loop_compile():
    x = np.arange(5.0)
    f = run_calls(gather_part_way, [(x, np.array([0, 1, 2, 3, 4, 1]), np.zeros(6)),
                                    (x, np.array([0, 1, 2, 3, 9, 1, 2]), np.zeros(7)),
                                    (x, np.array([1, 1, 2, 3, 1, 1, 2]), np.zeros(7))])
    no_internal_errors(f)


def running_max_and_argmax_total(x):
    """An RNN state, the largest logit seen and a count of argmax positions, all carried."""
    h = np.zeros(x.shape[1])
    peak = x[0].max()
    position_total = 0
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t])
        peak = np.maximum(peak, x[t].max())
        position_total += x[t].argmax()
    return h, peak, position_total, peak + position_total


def test_loop_carried_peak_and_argmax_total_stay_numpy_scalars():
    rng = rng_for(933)
    run_calls(running_max_and_argmax_total, [(rng.standard_normal((5, 3)),),
                                             (rng.standard_normal((9, 3)),)])


def mean_loss_as_a_python_float(x):
    loss = 0.0
    for t in range(x.shape[0]):
        loss = loss + x[t].mean()
    return loss.item()


def test_item_of_a_loop_total_keeps_the_native_loop(caplog):
    rng = rng_for(934)
    run_calls(mean_loss_as_a_python_float, [(rng.standard_normal((5, 3)),),
                                            (rng.standard_normal((9, 3)),)])
    assert "not compiled natively" not in caplog.text


# --- layer objects with caches, a bound train step, weights updated in place -----------------
class Dense:
    def __init__(self, W, b):
        self.W, self.b = W, b

    def forward(self, x):
        self.x = x
        return x @ self.W + self.b

    def backward(self, dout):
        self.dW = self.x.T @ dout
        self.db = dout.sum(axis=0)
        return dout @ self.W.T


class ReLU:
    def forward(self, x):
        self.mask = x > 0
        return x * self.mask

    def backward(self, dout):
        return dout * self.mask


class Net:
    def __init__(self, layers):
        self.layers = layers

    def train_step(self, x, y, lr):
        out = x
        for layer in self.layers:
            out = layer.forward(out)
        diff = out - y
        loss = 0.5 * (diff ** 2).sum() / len(x)
        dout = diff / len(x)
        for layer in reversed(self.layers):
            dout = layer.backward(dout)
        for layer in self.layers:
            if hasattr(layer, "W"):
                layer.W -= lr * layer.dW
                layer.b -= lr * layer.db
        return loss


def make_net(dtype):
    rng = rng_for(935)
    return Net([Dense(rng.standard_normal((3, 4)).astype(dtype), np.zeros(4, dtype=dtype)),
                ReLU(),
                Dense(rng.standard_normal((4, 2)).astype(dtype), np.zeros(2, dtype=dtype))])


def net_state(net):
    return [{name: value for name, value in vars(layer).items()} for layer in net.layers]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_bound_train_step_of_layer_objects_over_batches(dtype):
    rng = rng_for(936)
    eager_net, jit_net = make_net(dtype), make_net(dtype)
    step = jitted(jit_net.train_step)
    for n in (5, 5, 8, 8, 1, 13, 8):
        x, y = rng.standard_normal((n, 3)).astype(dtype), rng.standard_normal((n, 2)).astype(dtype)
        assert_same(step(x, y, 0.1), eager_net.train_step(x, y, 0.1), **TOLERANCE[dtype])
        assert_same(net_state(jit_net), net_state(eager_net), where="layers",
                    **TOLERANCE[dtype])
    with pytest.raises(ValueError):
        eager_net.train_step(rng.standard_normal((4, 5)), rng.standard_normal((4, 2)), 0.1)
    with pytest.raises(ValueError):
        step(rng.standard_normal((4, 5)), rng.standard_normal((4, 2)), 0.1)


class AdamOptimizer:
    """Adam keeping its moments in dicts on the optimizer (runs eagerly: item writes into an
    attribute's dict), its lr changed by the caller part way."""

    def __init__(self, lr=1e-2, b1=0.9, b2=0.999):
        self.lr, self.b1, self.b2, self.t = lr, b1, b2, 0
        self.m, self.v = {}, {}

    def step(self, params, grads):
        self.t += 1
        for key in params:
            if key not in self.m:
                self.m[key] = np.zeros_like(params[key])
                self.v[key] = np.zeros_like(params[key])
            self.m[key] = self.b1 * self.m[key] + (1 - self.b1) * grads[key]
            self.v[key] = self.b2 * self.v[key] + (1 - self.b2) * grads[key] ** 2
            m_hat = self.m[key] / (1 - self.b1 ** self.t)
            v_hat = self.v[key] / (1 - self.b2 ** self.t)
            params[key] -= self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        return self.t


def test_an_adam_object_with_dict_moments_and_a_changed_lr():
    rng = rng_for(937)
    eager_opt, jit_opt = AdamOptimizer(), AdamOptimizer()
    step = jitted(jit_opt.step)
    eager_params = {"W": rng.standard_normal((3, 2)), "b": np.zeros(2)}
    jit_params = copy.deepcopy(eager_params)
    for i in range(6):
        grads = {"W": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
        if i == 3:
            eager_opt.lr = jit_opt.lr = 0.5
        assert_same(step(jit_params, grads), eager_opt.step(eager_params, grads))
        assert_same(jit_params, eager_params, where="params")
        assert_same(vars(jit_opt), vars(eager_opt), where="optimizer")


# --- Sinkhorn iterations until the marginals match (a data-dependent while loop) -------------
def sinkhorn(cost, a, b, reg, tol):
    K = np.exp(-cost / reg)
    u = np.ones_like(a)
    v = np.ones_like(b)
    iterations = 0
    err = np.inf
    while err > tol and iterations < 200:
        u = a / (K @ v)
        v = b / (K.T @ u)
        err = np.abs(u * (K @ v) - a).sum()
        iterations += 1
    plan = u[:, None] * K * v[None, :]
    return plan, iterations, (plan * cost).sum()


def test_sinkhorn_until_the_marginals_match():
    rng = rng_for(938)

    def case(n, m, reg, tol=1e-9):
        a, b = rng.random(n) + 0.1, rng.random(m) + 0.1
        return rng.random((n, m)), a / a.sum(), b / b.sum(), reg, tol

    run_calls(sinkhorn, [case(4, 5, 0.5), case(6, 5, 0.5), case(3, 3, 1.0, 1e-3)], **F64)


# --- EM for a one-dimensional Gaussian mixture ------------------------------------------------
def gmm_em(x, means, variances, weights, iterations):
    log_likelihoods = np.zeros(iterations)
    for it in range(iterations):
        log_p = (-0.5 * np.log(2 * np.pi * variances) - (x[:, None] - means) ** 2
                 / (2 * variances) + np.log(weights))
        top = log_p.max(axis=1, keepdims=True)
        log_norm = top[:, 0] + np.log(np.exp(log_p - top).sum(axis=1))
        resp = np.exp(log_p - log_norm[:, None])
        nk = resp.sum(axis=0) + 1e-12
        means = (resp * x[:, None]).sum(axis=0) / nk
        variances = (resp * (x[:, None] - means) ** 2).sum(axis=0) / nk + 1e-6
        weights = nk / len(x)
        log_likelihoods[it] = log_norm.sum()
    return means, variances, weights, log_likelihoods


def test_gmm_em_over_sample_counts_and_iterations():
    rng = rng_for(939)

    def case(n, iterations, k=2):
        x = np.concatenate([rng.normal(-2, 0.5, n // 2), rng.normal(3, 1.0, n - n // 2)])
        return x, np.linspace(-1, 1, k), np.ones(k), np.full(k, 1.0 / k), iterations

    run_calls(gmm_em, [case(10, 3), case(17, 3), case(9, 3, k=3)], **F64)


# --- Gaussian naive Bayes fit/predict by one-hot matmuls -------------------------------------
def naive_bayes(X_train, y_train, X_test, classes):
    onehot = (y_train[:, None] == np.arange(classes)[None, :]).astype(np.float64)
    counts = onehot.sum(axis=0)
    means = onehot.T @ X_train / np.maximum(counts, 1)[:, None]
    var = onehot.T @ X_train ** 2 / np.maximum(counts, 1)[:, None] - means ** 2 + 1e-9
    log_prior = np.log((counts + 1) / (counts.sum() + classes))
    log_lik = -0.5 * (np.log(2 * np.pi * var)[None] +
                      (X_test[:, None, :] - means[None]) ** 2 / var[None]).sum(axis=-1)
    joint = log_lik + log_prior
    return joint.argmax(axis=1), joint


def test_gaussian_naive_bayes_with_an_empty_class():
    rng = rng_for(940)

    def case(n, m, classes, empty=False):
        y = rng.integers(0, classes - 1 if empty else classes, n)
        return rng.standard_normal((n, 3)) + y[:, None], y, rng.standard_normal((m, 3)), classes

    run_calls(naive_bayes, [case(12, 4, 3), case(20, 5, 3), case(12, 4, 3, empty=True),
                            case(7, 1, 2)], **F64)


# --- k-nearest neighbours by argsort and take_along_axis -----------------------------------
def knn_predict(X_train, y_train, X_test, k):
    sq = (X_test ** 2).sum(1)[:, None] - 2 * X_test @ X_train.T + (X_train ** 2).sum(1)[None, :]
    nearest = np.argsort(sq, axis=1, kind="stable")[:, :k]
    labels = y_train[nearest]
    dists = np.take_along_axis(sq, nearest, axis=1)
    votes = (labels[:, :, None] == np.arange(y_train.max() + 1)).sum(axis=1)
    return votes.argmax(axis=1), np.sqrt(np.maximum(dists, 0))


def test_knn_with_duplicate_training_points_and_changing_k():
    rng = rng_for(941)
    X = rng.standard_normal((10, 2))
    duplicated = np.concatenate([X[:5], X[:5]])
    sets = [(X, rng.integers(0, 3, 10), rng.standard_normal((4, 2)), 3),
            (X, rng.integers(0, 3, 10), rng.standard_normal((6, 2)), 3),
            (duplicated, rng.integers(0, 3, 10), X[:3], 4),
            (X, rng.integers(0, 3, 10), rng.standard_normal((6, 2)), 1)]
    run_calls(knn_predict, sets, **F64)


def class_counts(labels, classes):
    return (labels[:, None] == np.arange(classes)).sum(axis=0)


# np.arange(classes) of a changing Python int: the number decides a shape, so it stays a
# constant (tracer/pinned_scalars): one variant per value, no side exits
def test_arange_of_a_changing_class_count_compiles():
    f = run_calls(class_counts, [(np.array([0, 1, 2, 1]), 3), (np.array([0, 1, 0, 1]), 2),
                                 (np.array([0, 1, 0, 4]), 5)])
    no_eager_calls(f)


def relu_by_clip_reciprocal(x):
    return 1.0 / np.clip(x, 0.0, 1.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_keeps_a_negative_zero_like_numpy(dtype):
    x = np.array([-0.0, 0.0, 0.5, -1.0, 2.0], dtype=dtype)
    run_calls(relu_by_clip_reciprocal, [(x,), (np.concatenate([x, x]),)])


# --- Polyak averaging and clipping by the global norm over containers of arrays ---------------
def clip_and_average(grads, params, averages, max_norm, decay):
    total = np.sqrt(sum((g * g).sum() for g in grads.values()))
    scale = max_norm / (total + 1e-6) if total > max_norm else 1.0
    for name, g in grads.items():
        g *= scale
        params[name] -= 0.1 * g
        averages[name] *= decay
        averages[name] += (1 - decay) * params[name]
    return total, scale


def test_global_norm_clipping_and_polyak_averages_in_place():
    rng = rng_for(942)

    def case(size, max_norm):
        shapes = {"W1": (3, size), "b1": (size,), "W2": (size, 2)}
        return ({k: rng.standard_normal(s) for k, s in shapes.items()},
                {k: rng.standard_normal(s) for k, s in shapes.items()},
                {k: np.zeros(s) for k, s in shapes.items()}, max_norm, 0.99)

    run_calls(clip_and_average, [case(4, 1.0), case(4, 100.0), case(5, 1.0), case(4, 1.0),
                                 case(7, 100.0)], **F64)


# --- Gumbel-max sampling and label-smoothed cross-entropy with narrow label dtypes ------------
def gumbel_max_sample(logits, uniforms, temperature):
    gumbel = -np.log(-np.log(np.clip(uniforms, 1e-12, 1 - 1e-12)))
    return np.argmax(logits / temperature + gumbel, axis=-1)


def test_gumbel_max_sampling_with_noise_passed_in():
    rng = rng_for(943)
    sets = [(rng.standard_normal((n, 5)), rng.random((n, 5)), t)
            for n, t in ((3, 1.0), (6, 1.0), (4, 0.5), (1, 2.0))]
    sets.append((rng.standard_normal((2, 5)), np.array([[0.0, 1.0, 0.5, 0.5, 0.5]] * 2), 1.0))
    run_calls(gumbel_max_sample, sets, **F64)


def label_smoothed_cross_entropy(logits, labels, smoothing):
    n, classes = logits.shape
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    target = np.full((n, classes), smoothing / (classes - 1), dtype=logits.dtype)
    target[np.arange(n), labels] = 1.0 - smoothing
    return -(target * log_probs).sum(axis=1).mean(), target


@pytest.mark.parametrize("label_dtype", [np.uint8, np.int32])
def test_label_smoothed_cross_entropy_with_narrow_labels(label_dtype):
    rng = rng_for(944)
    sets = [(rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 4, n).astype(
        label_dtype), s) for n, s in ((5, 0.1), (8, 0.1), (1, 0.0), (3, 0.2))]
    run_calls(label_smoothed_cross_entropy, sets, **F32)


# --- a dilated causal convolution stack (WaveNet-style) over lengths --------------------------
def dilated_causal_stack(x, filters):
    """x: (T, C); each layer looks back ``2**layer`` steps through a zero-padded copy."""
    h = x
    skips = np.zeros_like(x)
    for layer, (w_now, w_past) in enumerate(filters):
        d = 2 ** layer
        past = np.concatenate([np.zeros((d, h.shape[1]), dtype=h.dtype), h[:-d]], axis=0)
        z = np.tanh(h @ w_now + past[:h.shape[0]] @ w_past)
        skips += z
        h = h + z
    return h, skips


def test_dilated_causal_convolutions_over_lengths_shorter_than_the_dilation():
    rng = rng_for(945)
    filters = [(rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3)) * 0.5)
               for _ in range(3)]
    run_calls(dilated_causal_stack, [(rng.standard_normal((t, 3)), filters)
                                     for t in (8, 11, 3, 1, 16)], **F64)


# --- ROC AUC by ranks (argsort of argsort) ---------------------------------------------------
def roc_auc(scores, labels):
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores, kind="stable")] = np.arange(1, len(scores) + 1)
    positives = labels.sum()
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return np.nan
    return (ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def test_roc_auc_by_ranks_with_one_class_batches():
    rng = rng_for(946)
    sets = [(rng.standard_normal(n), rng.integers(0, 2, n)) for n in (8, 12, 5)]
    sets += [(rng.standard_normal(4), np.ones(4, dtype=np.int64)),
             (rng.standard_normal(9), rng.integers(0, 2, 9))]
    run_calls(roc_auc, sets, **F64)


def smoothing_targets(labels, smoothing):
    target = np.full((labels.shape[0], 4), smoothing / 3)
    target[np.arange(labels.shape[0]), labels] = 1.0 - smoothing
    return target


def centered_by_a_full_of_the_mean(x):
    return x - np.full(x.shape, x.mean())


def prior_like(x, prior):
    return np.full_like(x, prior) * x


@pytest.mark.parametrize("model, make", [
    (smoothing_targets, lambda n, v: (np.arange(n) % 4, v)),
    (centered_by_a_full_of_the_mean, lambda n, v: (np.linspace(0.0, v, n),)),
    (prior_like, lambda n, v: (np.linspace(0.0, 1.0, n), v)),
], ids=["full_of_a_float_argument", "full_of_a_mean", "full_like_of_a_float_argument"])
def test_full_with_a_traced_fill_value_compiles(model, make):
    f = run_calls(model, [make(5, 0.1), make(5, 0.2), make(7, 0.3)])
    no_eager_calls(f)


def copy_gradients_where_positive(x, upstream):
    grad = np.zeros_like(x)
    positive = x > 0
    grad[positive] = upstream[positive]
    return grad


def halve_where_negative(x, labels):
    x = x.copy()
    x[x < 0] *= 0.5
    return x, labels


def count_positive_labels(scores, labels):
    positive = labels == 1
    return np.count_nonzero(positive), scores[positive].mean()


@pytest.mark.parametrize("model", [
    copy_gradients_where_positive, halve_where_negative,
    count_positive_labels,
])
def test_mask_writes_from_a_selection_and_count_nonzero_compile(model):
    rng = rng_for(947)
    f = run_calls(model, [(rng.standard_normal(8), rng.integers(0, 2, 8)),
                          (rng.standard_normal(11), rng.integers(0, 2, 11))])
    no_eager_calls(f)


def windows_by_strides(x):
    s0, s1 = x.strides
    windows = np.lib.stride_tricks.as_strided(x, shape=(x.shape[0] - 2, 3, x.shape[1]),
                                              strides=(s0, s0, s1))
    return windows.sum(axis=1)


def upstream_broadcast_arrays(dout, x):
    dout_b, _ = np.broadcast_arrays(dout[:, None], x)
    return dout_b * x


def converged_labels(x, labels):
    new = (x > 0).astype(np.int64)
    return np.array_equal(new, labels), new


def ids_with_a_python_list(table, context, negatives):
    ids = np.concatenate([[context], negatives])
    return table[ids]


def compounded_growth(returns):
    return np.cumprod(1.0 + returns)


def as_rows(x):
    return np.atleast_2d(x) * 2.0


def clipped_lookup(table, ids):
    return np.take(table, ids, axis=0, mode="clip")


@pytest.mark.parametrize("model, make", [
    pytest.param(windows_by_strides, lambda n: (np.arange(3.0 * n).reshape(n, 3),),
                 id="strides"),
    pytest.param(upstream_broadcast_arrays, lambda n: (np.arange(n * 1.0), np.ones((n, 3))),
                 id="broadcast_arrays"),
    pytest.param(converged_labels, lambda n: (np.linspace(-1, 1, n), np.arange(n) % 2),
                 id="array_equal"),
    pytest.param(ids_with_a_python_list,
                 lambda n: (np.arange(20.0).reshape(10, 2), n - 4, np.arange(1, n)),
                 id="concatenate_list"),
    pytest.param(compounded_growth, lambda n: (np.linspace(-0.1, 0.1, n),), id="cumprod"),
    pytest.param(as_rows, lambda n: (np.arange(n * 1.0),), id="atleast_2d"),
    pytest.param(clipped_lookup, lambda n: (np.arange(10.0).reshape(5, 2), np.arange(n) - 2),
                 id="take_clip"),
])
def test_common_numpy_calls_of_model_code_compile(model, make):
    f = run_calls(model, [make(5), make(7)])
    no_eager_calls(f)


def float32_total(x):
    return x.sum(), x.mean()


@pytest.mark.xfail(strict=True, reason="a float32 sum of a short ill-conditioned vector "
                   "([1e8, 1, -1e8, 1, 1, 1, 1]) is 5.0 compiled where NumPy's float32 loop "
                   "gives 4.0 (the compiled sum keeps more precision than NumPy's)")
def test_float32_sum_of_cancelling_terms_matches_numpy():
    x = np.array([1e8, 1, -1e8, 1, 1, 1, 1], dtype=np.float32)
    run_calls(float32_total, [(x,)], **F32)


def minibatches(X, y, batch_size):
    for start in range(0, len(X), batch_size):
        yield X[start:start + batch_size], y[start:start + batch_size]


def least_squares_epoch(X, y, w, lr):
    total = 0.0
    for xb, yb in minibatches(X, y, 4):
        err = xb @ w - yb
        total += (err ** 2).sum()
        w -= lr * xb.T @ err / len(xb)
    return total / len(X)


def test_a_minibatch_generator_inside_the_model_compiles():
    rng = rng_for(948)
    f = run_calls(least_squares_epoch, [(rng.standard_normal((n, 3)), rng.standard_normal(n),
                                         np.zeros(3), 0.1) for n in (10, 13)])
    no_eager_calls(f)


# --- min-char-rnn's LSTM cousin: one-hot columns, dicts keyed by t, list or array ids ---------
def lstm_char_loss(inputs, targets, hprev, cprev, P):
    xs, hs, cs, ps = {}, {}, {}, {}
    hs[-1], cs[-1] = np.copy(hprev), np.copy(cprev)
    loss = 0
    H = hprev.shape[0]
    for t in range(len(inputs)):
        xs[t] = np.zeros((P["Wx"].shape[1], 1))
        xs[t][inputs[t]] = 1
        z = P["Wx"] @ xs[t] + P["Wh"] @ hs[t - 1] + P["b"]
        i, f, o = sigmoid(z[:H]), sigmoid(z[H:2 * H]), sigmoid(z[2 * H:3 * H])
        g = np.tanh(z[3 * H:])
        cs[t] = f * cs[t - 1] + i * g
        hs[t] = o * np.tanh(cs[t])
        y = P["Wy"] @ hs[t] + P["by"]
        ps[t] = np.exp(y - y.max()) / np.sum(np.exp(y - y.max()))
        loss += -np.log(ps[t][targets[t], 0])
    return loss, hs[len(inputs) - 1], cs[len(inputs) - 1]


@pytest.mark.parametrize("ids_as", [list, np.asarray])
def test_char_lstm_loss_with_dict_caches_over_lengths(ids_as):
    rng = rng_for(949)
    H, V = 4, 6
    P = {"Wx": rng.standard_normal((4 * H, V)) * 0.1, "Wh": rng.standard_normal((4 * H, H)) * 0.1,
         "b": np.zeros((4 * H, 1)), "Wy": rng.standard_normal((V, H)) * 0.1,
         "by": np.zeros((V, 1))}

    def sequence(T):
        return (ids_as(rng.integers(0, V, T)), ids_as(rng.integers(0, V, T)),
                rng.standard_normal((H, 1)) * 0.1, np.zeros((H, 1)), P)

    lengths = (5, 8) if ids_as is np.asarray else (5, 3)  # a list's length unrolls
    run_calls(lstm_char_loss, [sequence(T) for T in lengths], **F64)


# --- a recurrent cell object stepped by a method that writes its attributes ------------------
class RecurrentCell:
    def __init__(self, W, U):
        self.W, self.U = W, U
        self.h = np.zeros(U.shape[0])
        self.steps = 0

    def step(self, x):
        self.h = np.tanh(x @ self.W + self.h @ self.U)
        self.steps += 1
        return self.h

    def run(self, xs):
        outs = np.zeros((xs.shape[0], self.U.shape[0]))
        for t in range(xs.shape[0]):
            outs[t] = self.step(xs[t])
        return outs


def run_cells(lengths, check_compiled):
    rng = rng_for(950)
    W, U = rng.standard_normal((2, 3)), rng.standard_normal((3, 3)) * 0.5
    eager_cell, jit_cell = RecurrentCell(W, U), RecurrentCell(W, U)
    run = jitted(jit_cell.run)
    for T in lengths:
        xs = rng.standard_normal((T, 2))
        assert_same(run(xs), eager_cell.run(xs))
        assert_same(vars(jit_cell), vars(eager_cell), where="cell")
    if check_compiled:
        no_internal_errors(run)


def test_a_cell_stepped_by_a_method_writing_its_state_matches_eager():
    run_cells([4, 4, 6, 1, 0, 9], check_compiled=False)


def test_a_cell_stepped_by_a_method_writing_its_state_is_no_internal_error():
    run_cells([4, 4, 6], check_compiled=True)


# --- loops whose iterations depend on earlier ones (the vectorizer must not split them) -------
def running_column_max(image):
    for j in range(1, image.shape[1]):
        image[:, j] = np.maximum(image[:, j], image[:, j - 1])
    return image


def integral_image(image):
    table = np.zeros((image.shape[0] + 1, image.shape[1] + 1), dtype=image.dtype)
    for i in range(image.shape[0]):
        for j in range(image.shape[1]):
            table[i + 1, j + 1] = image[i, j] + table[i, j + 1] + table[i + 1, j] - table[i, j]
    return table


def dynamic_time_warping(a, b):
    n, m = a.shape[0], b.shape[0]
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            D[i, j] = abs(a[i - 1] - b[j - 1]) + min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])
    return D[n, m]


@pytest.mark.parametrize("model, make", [
    (running_column_max, lambda rng, s: (rng.standard_normal((3, s)),)),
    (integral_image, lambda rng, s: (rng.standard_normal((s, s + 1)),)),
], ids=["running_column_max", "integral_image"])
def test_loops_carried_through_the_buffer_they_write(model, make):
    rng = rng_for(951)
    f = run_calls(model, [make(rng, s) for s in (4, 6, 3, 7)], **F64)
    no_internal_errors(f)


def test_dynamic_time_warping_runs_compiled_after_its_trace():
    rng = rng_for(952)
    a, b = rng.standard_normal(3), rng.standard_normal(4)
    f = run_calls(dynamic_time_warping, [(a, b), (a + 1.0, b)], **F64)
    no_eager_calls(f)


def bucket_of_the_mean(x, bins):
    """Quantizing a statistic (a histogram bucket, an accuracy in percent as an int)."""
    return np.floor(x.mean() * bins), (x.sum() * bins).astype(np.int64)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_floor_and_int_cast_of_a_reduction_match_numpy(dtype):
    # np.full(45, 0.1).sum() is 4.5 compiled, 4.499999999999998 in NumPy: the floor and
    # the cast jump there, so the call runs eagerly (tracer/discontinuities.py).
    f = run_calls(bucket_of_the_mean, [(np.full(45, 0.1, dtype=dtype), 10)], rtol=0, atol=0)
    rng = rng_for(954)
    f = run_calls(bucket_of_the_mean, [(rng.standard_normal(45).astype(dtype), 10)
                                       for _ in range(4)], rtol=0, atol=0)
    stats = f.stats()  # ordinary data stays compiled (the first call traced, or compiled
    # when a decision of the trace may not be eager's)
    assert stats["compiled_calls"] + stats["traced_calls"] == stats["calls"], stats
    assert stats["compiled_calls"] >= stats["calls"] - 1, stats


# --- a warm-up / step-decay schedule object inside a momentum optimizer ----------------------
class WarmupStepDecay:
    def __init__(self, base=0.1, warmup=3):
        self.t, self.base, self.warmup = 0, base, warmup

    def lr(self):
        self.t += 1
        if self.t < self.warmup:
            return self.base * self.t / self.warmup
        return self.base * 0.5 ** ((self.t - self.warmup) // 2)


class ScheduledMomentum:
    def __init__(self):
        self.schedule, self.momentum = WarmupStepDecay(), 0.9

    def step(self, params, grads, velocity):
        lr = self.schedule.lr()
        for key in params:
            velocity[key] *= self.momentum
            velocity[key] -= lr * grads[key]
            params[key] += velocity[key]
        self.last_lr = lr
        return lr


def test_a_scheduled_momentum_optimizer_over_steps_and_resized_params():
    rng = rng_for(953)
    eager_opt, jit_opt = ScheduledMomentum(), ScheduledMomentum()
    step = jitted(jit_opt.step)
    for i in range(9):
        rows = 3 if i < 5 else 4  # the model grows: new parameter arrays from step 5 on
        if i in (0, 5):
            eager_params = {"W": rng.standard_normal((rows, 2)), "b": np.zeros(2)}
            eager_velocity = {key: np.zeros_like(value) for key, value in eager_params.items()}
            jit_params, jit_velocity = copy.deepcopy(eager_params), copy.deepcopy(eager_velocity)
        grads = {"W": rng.standard_normal((rows, 2)), "b": rng.standard_normal(2)}
        assert_same(step(jit_params, grads, jit_velocity),
                    eager_opt.step(eager_params, grads, eager_velocity))
        assert_same((jit_params, jit_velocity), (eager_params, eager_velocity), where="state")
        assert_same((vars(jit_opt.schedule), jit_opt.last_lr),
                    (vars(eager_opt.schedule), eager_opt.last_lr), where="optimizer")
