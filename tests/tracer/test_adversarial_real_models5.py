"""Adversarial real-model tests, fifth round: NumPy model code in the idioms of public
course code and small NumPy ML libraries (numpy-ml layer objects, cs231n optimizers and
layers, from-scratch transformers with layer objects and ``self.ctx`` caches, HMMs, CTC,
RL returns), run eagerly and through ``jit`` on copies of the same arguments.

Covers what rounds one to four do not: Viterbi back-pointer walks and the HMM forward
pass by logsumexp over lengths, CTC's shifted-add recursion, edit distance by nested DP
loops over int tables, PCA by SVD/eigh (eager), numpy-ml layers with lazy init, list caches
and gradient dicts, Adagrad/Adadelta through ufunc ``out=``, max-pool backward by
``np.unravel_index``, convolution by ``sliding_window_view``, a perceptron's per-sample
branches, discounted returns with resets, GAE, tabular Q-learning, cs231n's
``dx = dout; dx[x <= 0] = 0`` aliasing, empty batches, uint8 images, NumPy's partial writes
before an ``IndexError``, guards failing mid-loop, a causal-attention decoder trained between
compiled forwards, ``jit(value_and_grad)`` through loops against finite differences, and
integer self dots.

Most findings are about state the trace read or wrote outside the arrays it was given:
symbolic dims reaching plain Python (``str``, f-strings, ``print``, dict keys, ``dict.get``,
``divmod``/``&``/``abs``, returned ranges and slices); Python settings and weights of
objects reached through containers, ``**kwargs``, closures, partials and loops over
``self.layers``/``self.blocks`` (not guarded, or frozen into the compiled code); and caches
written by such layers (the trace's Tracer objects leak into the caller's dicts and lists).

Tests marked ``xfail(strict=True)`` are minimal reproductions of bugs found this way.
"""

import copy
import functools

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for, run_calls

import tracejit as tj

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-5)


def logsumexp(a, axis):
    top = a.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(a - top).sum(axis=axis, keepdims=True))).squeeze(axis)


# --- HMM: Viterbi with int back-pointers and a reversed walk, forward by logsumexp -----------
def viterbi(log_pi, log_A, log_B, obs):
    T, S = len(obs), log_pi.shape[0]
    delta = np.zeros((T, S))
    back = np.zeros((T, S), dtype=np.int64)
    delta[0] = log_pi + log_B[:, obs[0]]
    for t in range(1, T):
        scores = delta[t - 1][:, None] + log_A
        back[t] = np.argmax(scores, axis=0)
        delta[t] = scores.max(axis=0) + log_B[:, obs[t]]
    path = np.zeros(T, dtype=np.int64)
    path[-1] = np.argmax(delta[-1])
    for t in range(T - 2, -1, -1):
        path[t] = back[t + 1, path[t + 1]]
    return path, delta[-1].max()


def hmm_forward(log_pi, log_A, log_B, obs):
    alpha = log_pi + log_B[:, obs[0]]
    for t in range(1, len(obs)):
        alpha = logsumexp(alpha[:, None] + log_A, axis=0) + log_B[:, obs[t]]
    return logsumexp(alpha, axis=0)


def hmm_arguments(rng, T, S=3, V=4):
    def log_rows(*shape):
        p = rng.random(shape) + 0.1
        return np.log(p / p.sum(axis=-1, keepdims=True))
    return log_rows(S), log_rows(S, S), log_rows(S, V), rng.integers(0, V, T)


@pytest.mark.parametrize("model", [viterbi, hmm_forward])
def test_hmm_viterbi_and_forward_over_lengths(model):
    rng = rng_for(500)
    f = run_calls(model, [hmm_arguments(rng, 5), hmm_arguments(rng, 8), hmm_arguments(rng, 1),
                          hmm_arguments(rng, 13)], **F64)
    if model is hmm_forward:  # viterbi's back-pointer walk: see the backtrack xfail below
        no_internal_errors(f)


# --- edit distance by dynamic programming over int arrays -------------------------------------
def edit_distance(a, b):
    D = np.zeros((len(a) + 1, len(b) + 1), dtype=np.int64)
    D[:, 0] = np.arange(len(a) + 1)
    D[0, :] = np.arange(len(b) + 1)
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            D[i, j] = min(D[i - 1, j] + 1, D[i, j - 1] + 1, D[i - 1, j - 1] + cost)
    return D[-1, -1]


def test_edit_distance_dynamic_programming():
    rng = rng_for(501)
    f = run_calls(edit_distance, [(rng.integers(0, 3, 4), rng.integers(0, 3, 5)),
                                  (rng.integers(0, 3, 4), rng.integers(0, 3, 5)),
                                  (rng.integers(0, 3, 6), rng.integers(0, 3, 2))])
    no_internal_errors(f)


# --- PCA by SVD and by eigh of the covariance ------------------------------------------------
def pca_svd(X, k):
    Xc = X - X.mean(axis=0)
    U, S, Vt = np.linalg.svd(Xc, full_matrices=False)
    explained = S ** 2 / (len(X) - 1)
    return Xc @ Vt[:k].T, explained[:k] / explained.sum()


def pca_eigh(X, k):
    Xc = X - X.mean(axis=0)
    cov = Xc.T @ Xc / (X.shape[0] - 1)
    vals, vecs = np.linalg.eigh(cov)
    order = np.argsort(vals)[::-1][:k]
    return vals[order], np.abs(Xc @ vecs[:, order])


@pytest.mark.parametrize("model", [pca_svd, pca_eigh])
def test_pca_over_sizes(model):
    rng = rng_for(502)
    f = run_calls(model, [(rng.standard_normal((7, 4)), 2), (rng.standard_normal((9, 4)), 2),
                          (rng.standard_normal((9, 4)), 3)], **F64)
    no_internal_errors(f)


# --- numpy-ml style layer: lazy init, list caches, derived variables, gradients dict ---------
class FullyConnected:
    def __init__(self, n_out, seed):
        self.n_out, self.seed = n_out, seed
        self.is_initialized = False
        self.X = []
        self.parameters, self.gradients, self.derived_variables = {}, {}, {"Z": []}

    def _init_params(self, n_in):
        rng = np.random.default_rng(self.seed)
        self.parameters = {"W": rng.standard_normal((n_in, self.n_out)) * 0.1,
                           "b": np.zeros((1, self.n_out))}
        self.gradients = {k: np.zeros_like(v) for k, v in self.parameters.items()}
        self.is_initialized = True

    def forward(self, X, retain_derived=True):
        if not self.is_initialized:
            self._init_params(X.shape[1])
        Z = X @ self.parameters["W"] + self.parameters["b"]
        Y = np.maximum(Z, 0)
        if retain_derived:
            self.X.append(X)
            self.derived_variables["Z"].append(Z)
        return Y

    def backward(self, dLdy):
        dX = []
        for X, Z in zip(self.X, self.derived_variables["Z"]):
            dZ = dLdy * (Z > 0)
            self.gradients["W"] += X.T @ dZ
            self.gradients["b"] += dZ.sum(axis=0, keepdims=True)
            dX.append(dZ @ self.parameters["W"].T)
        return dX[0] if len(self.X) == 1 else dX

    def flush_gradients(self):
        self.X = []
        self.derived_variables["Z"] = []
        for k, v in self.gradients.items():
            self.gradients[k] = np.zeros_like(v)

    def update(self, lr):
        for k, v in self.gradients.items():
            self.parameters[k] -= lr * v
        self.flush_gradients()


def numpy_ml_step(layer, X, dY, lr):
    Y = layer.forward(X)
    dX = layer.backward(dY)
    layer.update(lr)
    return Y, dX


def layer_state(layer):
    return {"parameters": layer.parameters, "gradients": layer.gradients, "X": layer.X,
            "Z": layer.derived_variables["Z"], "is_initialized": layer.is_initialized}


def test_numpy_ml_layer_lazy_init_list_caches_and_update():
    rng = rng_for(503)
    f = jitted(numpy_ml_step)
    for n in (5, 5, 6, 6):
        X, dY = rng.standard_normal((n, 4)), rng.standard_normal((n, 3))
        eager_layer, jit_layer = FullyConnected(3, 7), FullyConnected(3, 7)
        want = numpy_ml_step(eager_layer, X.copy(), dY.copy(), 0.1)
        got = f(jit_layer, X.copy(), dY.copy(), 0.1)
        assert_same(got, want, **F64)
        assert_same(layer_state(jit_layer), layer_state(eager_layer), **F64)
    no_internal_errors(f)


def numpy_ml_train(layer, X, dY, lr, steps):
    outs = []
    for _ in range(steps):
        outs.append(numpy_ml_step(layer, X, dY, lr)[0].sum())
    return outs, layer.parameters


def test_numpy_ml_layer_persistent_state_over_calls():
    rng = rng_for(504)
    layer = FullyConnected(3, 7)
    layer._init_params(4)
    eager_layer, jit_layer = copy.deepcopy(layer), copy.deepcopy(layer)
    f = jitted(numpy_ml_train)
    for n in (5, 5, 6, 7, 3):
        X, dY = rng.standard_normal((n, 4)), rng.standard_normal((n, 3))
        want = numpy_ml_train(eager_layer, X.copy(), dY.copy(), 0.05, 2)
        got = f(jit_layer, X.copy(), dY.copy(), 0.05, 2)
        assert_same(got, want, **F64)
        assert_same(jit_layer.parameters, eager_layer.parameters, **F64)
        assert_same(jit_layer.gradients, eager_layer.gradients, **F64)
        assert jit_layer.X == [] and jit_layer.derived_variables == {"Z": []}
    no_internal_errors(f)


# --- Adagrad / Adadelta with ufunc out= arguments --------------------------------------------
def adagrad_out(w, dw, cache, lr, eps):
    np.add(cache, dw * dw, out=cache)
    step = np.empty_like(w)
    np.divide(dw, np.sqrt(cache) + eps, out=step)
    np.multiply(step, lr, out=step)
    np.subtract(w, step, out=w)
    return w


def adadelta(w, dw, Eg, Edx, rho, eps):
    Eg *= rho
    Eg += (1 - rho) * dw ** 2
    dx = -np.sqrt(Edx + eps) / np.sqrt(Eg + eps) * dw
    Edx[...] = rho * Edx + (1 - rho) * dx ** 2
    w += dx
    return np.linalg.norm(dx)


def test_adagrad_and_adadelta_in_place_with_out_arguments():
    rng = rng_for(505)

    def ag(n, dtype=np.float64):
        def r(*shape):
            return rng.standard_normal(shape).astype(dtype)
        return r(n, 3), r(n, 3), np.abs(r(n, 3)), 0.01, 1e-8

    f = run_calls(adagrad_out, [ag(4), ag(4), ag(5), ag(4, np.float32)], **F32)
    no_internal_errors(f)

    def ad(n):
        return (rng.standard_normal(n), rng.standard_normal(n), np.abs(rng.standard_normal(n)),
                np.abs(rng.standard_normal(n)), 0.95, 1e-6)

    f = run_calls(adadelta, [ad(4), ad(4), ad(9), ad(1)], **F64)
    no_internal_errors(f)


# --- max pool backward through unravel_index of a flat argmax --------------------------------
def maxpool_backward_unravel(x, dout, pool):
    N, C, H, W = x.shape
    dx = np.zeros_like(x)
    for n in range(N):
        for c in range(C):
            for i in range(H // pool):
                for j in range(W // pool):
                    window = x[n, c, i * pool:(i + 1) * pool, j * pool:(j + 1) * pool]
                    r, s = np.unravel_index(np.argmax(window), window.shape)
                    dx[n, c, i * pool + r, j * pool + s] += dout[n, c, i, j]
    return dx


def test_maxpool_backward_by_unravel_index():
    rng = rng_for(506)

    def arguments(n, h):
        return (rng.standard_normal((n, 2, h, h)), rng.standard_normal((n, 2, h // 2, h // 2)), 2)

    f = run_calls(maxpool_backward_unravel, [arguments(1, 4), arguments(1, 4), arguments(1, 6)])
    no_internal_errors(f)


# --- conv by sliding_window_view + tensordot ----------------------------------------------
def conv_sliding_window(x, w, b):
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    out = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))
    return out.transpose(0, 3, 1, 2) + b[None, :, None, None]


def test_conv_by_sliding_window_view():
    rng = rng_for(507)

    def arguments(n, h, w):
        return (rng.standard_normal((n, 2, h, w)), rng.standard_normal((3, 2, 3, 3)),
                rng.standard_normal(3))

    f = run_calls(conv_sliding_window, [arguments(1, 5, 5), arguments(1, 5, 5), arguments(2, 7, 6)],
                  **F64)
    no_internal_errors(f)


# --- sort / unique / bincount / cumsum / searchsorted idioms ------------------------------
def class_weights_and_ranks(y, scores, n_classes):
    counts = np.bincount(y, minlength=n_classes)
    weights = len(y) / (n_classes * np.maximum(counts, 1))
    ranks = np.argsort(np.argsort(-scores))
    order = np.sort(scores)[::-1]
    cdf = np.cumsum(order) / order.sum()
    cut = np.searchsorted(cdf, 0.5)
    classes, inverse = np.unique(y, return_inverse=True)
    return weights[y], ranks, cut, classes, inverse, np.diff(cdf)


def test_class_weights_ranks_cdf_and_unique():
    rng = rng_for(508)

    def arguments(n):
        return rng.integers(0, 4, n), rng.random(n) + 0.01, 5

    f = run_calls(class_weights_and_ranks, [arguments(6), arguments(6), arguments(11)], **F64)
    no_internal_errors(f)


# --- boolean selection and nonzero -----------------------------------------------------------
def hinge_on_violations(scores, y, margin):
    N = scores.shape[0]
    correct = scores[np.arange(N), y][:, None]
    margins = np.maximum(0, scores - correct + margin)
    margins[np.arange(N), y] = 0
    violated = margins[margins > 0]
    rows, cols = np.nonzero(margins)
    return violated.sum() / N, rows, cols, np.count_nonzero(margins, axis=1)


def test_hinge_selection_by_mask_and_nonzero():
    rng = rng_for(509)

    def arguments(n):
        return rng.standard_normal((n, 4)), rng.integers(0, 4, n), 1.0

    f = run_calls(hinge_on_violations, [arguments(5), arguments(5), arguments(8), arguments(1)],
                  **F64)
    no_internal_errors(f)


# --- perceptron: per-sample loop with a data-dependent in-place update ---------------------
def perceptron_epoch(w, b, X, y):
    mistakes = 0
    for x, label in zip(X, y):
        if label * (w @ x + b) <= 0:
            w += label * x
            b += label
            mistakes += 1
    return w, b, mistakes


def test_perceptron_epochs_with_per_sample_branches():
    rng = rng_for(510)

    def arguments(n):
        X = rng.standard_normal((n, 3))
        return np.zeros(3), 0.0, X, np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1.0, -1.0)

    f = run_calls(perceptron_epoch, [arguments(6), arguments(6), arguments(9), arguments(17)],
                  **F64)
    no_internal_errors(f)


# --- RL: discounted returns with episode resets, GAE, tabular Q-learning -------------------
def discount_rewards(r, dones, gamma):
    discounted = np.zeros_like(r)
    running = 0.0
    for t in reversed(range(r.size)):
        if dones[t]:
            running = 0.0
        running = running * gamma + r[t]
        discounted[t] = running
    discounted -= np.mean(discounted)
    discounted /= np.std(discounted) + 1e-8
    return discounted


def gae(rewards, values, dones, gamma, lam):
    T = len(rewards)
    adv = np.zeros(T)
    last = 0.0
    for t in range(T - 1, -1, -1):
        nonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * values[t + 1] * nonterminal - values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + values[:-1]


def q_learning(Q, transitions, alpha, gamma):
    for s, a, r, s2, done in transitions:
        target = r if done else r + gamma * Q[s2].max()
        Q[s, a] += alpha * (target - Q[s, a])
    return Q.argmax(axis=1)


def test_discounted_returns_with_resets_over_lengths():
    rng = rng_for(511)

    def arguments(t):
        return rng.standard_normal(t), rng.random(t) < 0.3, 0.99

    f = run_calls(discount_rewards, [arguments(7), arguments(7), arguments(12), arguments(3)],
                  **F64)
    no_internal_errors(f)


def test_gae_over_lengths_with_float_dones():
    rng = rng_for(512)

    def arguments(t):
        return (rng.standard_normal(t), rng.standard_normal(t + 1),
                (rng.random(t) < 0.2).astype(np.float64), 0.99, 0.95)

    f = run_calls(gae, [arguments(5), arguments(5), arguments(11), arguments(1)], **F64)
    no_internal_errors(f)


def test_tabular_q_learning_over_transition_lists():
    rng = rng_for(513)

    def arguments(n):
        transitions = [(int(rng.integers(4)), int(rng.integers(2)), float(rng.standard_normal()),
                        int(rng.integers(4)), bool(rng.random() < 0.3)) for _ in range(n)]
        return rng.standard_normal((4, 2)), transitions, 0.5, 0.9

    f = run_calls(q_learning, [arguments(5), arguments(5), arguments(8)], **F64)
    no_internal_errors(f)


# --- relu backward that aliases the upstream gradient (cs231n's dx = dout) ------------------
def relu_backward_aliasing(dout, x):
    dx = dout
    dx[x <= 0] = 0
    return dx


def leaky_relu_in_place(x, slope):
    x[x < 0] *= slope
    np.maximum(x, -1.0, out=x)
    return x.sum()


def test_relu_backward_writes_through_to_the_callers_gradient():
    rng = rng_for(514)

    def arguments(n):
        return rng.standard_normal((n, 3)), rng.standard_normal((n, 3))

    f = run_calls(relu_backward_aliasing, [arguments(4), arguments(4), arguments(7)], **F64)
    no_internal_errors(f)
    f = run_calls(leaky_relu_in_place, [(rng.standard_normal((4, 3)) * 3, 0.1),
                                        (rng.standard_normal((4, 3)) * 3, 0.2),
                                        (rng.standard_normal((6, 3)) * 3, 0.2)], **F64)
    no_internal_errors(f)


# --- empty batches: reshape(N, -1) of zero rows raises in NumPy -----------------------------
def flatten_affine(x, w, b):
    return x.reshape(x.shape[0], -1) @ w + b


def test_flatten_of_an_empty_batch_raises_as_numpy_does():
    rng = rng_for(515)
    w, b = rng.standard_normal((12, 2)), rng.standard_normal(2)
    f = run_calls(flatten_affine, [(rng.standard_normal((n, 3, 4)), w, b) for n in (3, 3, 5, 0, 1)],
                  **F64)
    no_internal_errors(f)


def max_then_mean(x):
    return x.max(axis=0), x.mean(axis=0)


def test_max_over_an_empty_axis_raises_as_numpy_does():
    rng = rng_for(516)
    run_calls(max_then_mean, [(rng.standard_normal((n, 3)),) for n in (3, 3, 5, 0, 2)], **F64)


# --- dtype mixes: uint8 images, float32 weights with float64 data, bool masks ---------------
def preprocess_and_score(images, W, mean, labels, mask):
    x = images.reshape(len(images), -1) / 255.0
    x = (x - mean).astype(np.float32)
    scores = x @ W
    correct = scores[np.arange(len(labels)), labels]
    return scores, (correct * mask).sum(), mask.sum(), (~mask).astype(np.int32)


def test_uint8_images_float32_weights_float64_mean_and_bool_masks():
    rng = rng_for(517)
    W = rng.standard_normal((12, 3)).astype(np.float32)

    def arguments(n):
        return (rng.integers(0, 256, (n, 3, 2, 2), dtype=np.uint8), W, rng.random(12),
                rng.integers(0, 3, n).astype(np.int32), rng.random(n) < 0.5)

    f = run_calls(preprocess_and_score, [arguments(4), arguments(4), arguments(6)], **F32)
    # the uint8 images are only converted (/ 255.0): compiled (codegen/narrow_inputs.py)
    assert not f.stats()["eager_calls"], f.explain()


# --- Python builtins on traced values: max/min/abs/sum/math ---------------------------------
def builtins_mix(x, w):
    import math
    norm = math.sqrt(float((w * w).sum()))
    scale = min(1.0, 5.0 / max(norm, 1e-12))
    total = sum(row @ w for row in x)
    largest = max(abs(x.min()), x.max())
    return w * scale, total, largest, round(float(x.mean()), 3)


def test_python_builtins_over_traced_values():
    rng = rng_for(518)
    f = run_calls(builtins_mix, [(rng.standard_normal((3, 4)), rng.standard_normal(4) * 3),
                                 (rng.standard_normal((3, 4)), rng.standard_normal(4) * 3),
                                 (rng.standard_normal((5, 4)), rng.standard_normal(4) * 0.1)],
                  **F64)
    no_internal_errors(f)


# --- causal masks from triu/tril and sequence lengths ---------------------------------------
def causal_attention_triu(q, k, v):
    T = q.shape[0]
    scores = q @ k.T / np.sqrt(q.shape[1])
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    scores = np.where(mask, -np.inf, scores)
    scores -= scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=1, keepdims=True)
    return p @ v, np.tril(p).sum()


def test_causal_attention_by_triu_over_lengths():
    rng = rng_for(519)

    def arguments(t):
        return tuple(rng.standard_normal((t, 4)) for _ in range(3))

    f = run_calls(causal_attention_triu, [arguments(5), arguments(5), arguments(9), arguments(1)],
                  **F64)
    no_internal_errors(f)


# --- symbolic dims reaching Python: strings, dict keys, dict.get ----------------------------
def scale_by_length_table(x, table):
    return x + table.get(len(x), 0.0)


def test_dict_get_keyed_by_a_dynamic_length():
    table = {3: 1.0, 4: 2.0, 5: 3.0}
    f = run_calls(scale_by_length_table, [(np.zeros(n), table) for n in (3, 4, 5, 6)])
    no_internal_errors(f)


def sum_and_shape_text(x):
    n = len(x)
    return x.sum(), str(x.shape), f"{x.shape[0]}", "{}".format(n), repr(n), "%s" % n, str(2 * n)


def test_shape_text_of_a_dynamic_dim_in_results():
    rng = rng_for(520)
    f = run_calls(sum_and_shape_text, [(rng.standard_normal(n),) for n in (3, 4, 5)])
    no_internal_errors(f)


def print_batch_length(x):
    print(f"len={len(x)}")
    return x * 2


def test_print_of_an_f_string_of_a_dynamic_length(capsys):
    rng = rng_for(521)
    f = jitted(print_batch_length)
    for n in (3, 4, 5, 6):
        x = rng.standard_normal(n)
        print_batch_length(x)
        want = capsys.readouterr().out
        f(x)
        assert capsys.readouterr().out == want


def counts_by_length(x):
    return x * 2, {x.shape[0]: x.sum()}


def test_a_returned_dict_keyed_by_a_dynamic_dim():
    rng = rng_for(522)
    f = run_calls(counts_by_length, [(rng.standard_normal(n),) for n in (3, 4, 5)])
    no_internal_errors(f)


def weight_for_width(x, table):
    return x @ table[f"w_{x.shape[1]}"]


def test_parameter_name_built_from_a_dynamic_width():
    rng = rng_for(523)
    table = {f"w_{d}": rng.standard_normal((d, 2)) for d in (2, 3, 4)}
    f = run_calls(weight_for_width, [(rng.standard_normal((3, d)), table) for d in (2, 3, 4)])
    no_internal_errors(f)


def memo_by_length(x, cache):
    if x.shape[0] in cache:
        return x + cache[x.shape[0]]
    return x


def test_membership_then_lookup_keyed_by_a_dynamic_length():
    table = {3: 1.0, 4: 2.0, 5: 3.0}
    f = run_calls(memo_by_length, [(np.zeros(n), table) for n in (3, 4, 5, 6, 7)])
    no_internal_errors(f)


# --- Viterbi's back-pointer walk: a descending loop reading back[t + 1, path[t + 1]] ---------
def backtrack(back):
    T = back.shape[0]
    path = np.zeros(T, dtype=np.int64)
    for t in range(T - 2, -1, -1):
        path[t] = back[t + 1, path[t + 1]]
    return path


def test_backtrack_through_back_pointers_in_a_descending_loop():
    rng = rng_for(524)
    f = run_calls(backtrack, [(rng.integers(0, 3, (t, 3)),) for t in (5, 8, 13)])
    no_internal_errors(f)


def rows_and_their_range(x):
    return x * 2, range(len(x)), slice(0, x.shape[0])


def test_a_returned_range_and_slice_over_a_dynamic_dim():
    rng = rng_for(525)
    f = run_calls(rows_and_their_range, [(rng.standard_normal(n),) for n in (3, 4, 5)])
    no_internal_errors(f)


def scaled_by_root_length(x):
    return x.sum() / np.sqrt(len(x)), np.sqrt(len(x)), np.log(x.shape[0])


def test_numpy_math_of_a_dynamic_dim_returns_a_numpy_scalar():
    rng = rng_for(526)
    f = run_calls(scaled_by_root_length, [(rng.standard_normal(n),) for n in (3, 4, 5)])
    no_internal_errors(f)


# --- Python int operations on a dynamic dim that the SymInt lacks ---------------------------
def chunk_counts_by_divmod(x, chunk):
    full, rest = divmod(len(x), chunk)
    return x[:full * chunk].reshape(full, chunk).sum(axis=1), rest


def drop_the_odd_row(x):
    n = x.shape[0]
    return x[:n - (n & 1)].reshape(-1, 2, x.shape[1]).mean(axis=1)


def distance_to_middle(x):
    middle = len(x) // 2
    return x * abs(middle - len(x)), pow(len(x), 2, 7)


def zero_padded_layer_name(x, params):
    return x * params[f"scale{len(x):02d}"]


def next_power_of_two_padding(x):
    size = 1 << (len(x) - 1).bit_length()
    out = np.zeros((size, x.shape[1]))
    out[:len(x)] = x
    return out


INT_OPERATIONS = {
    "divmod": (chunk_counts_by_divmod, lambda rng, n: (rng.standard_normal(n), 2)),
    "bit_and": (drop_the_odd_row, lambda rng, n: (rng.standard_normal((n, 2)),)),
    "abs_and_pow3": (distance_to_middle, lambda rng, n: (rng.standard_normal(n),)),
    "format_spec": (zero_padded_layer_name,
                    lambda rng, n: (rng.standard_normal(n),
                                    {f"scale{d:02d}": float(d) for d in (3, 4, 5, 6)})),
    "bit_length": (next_power_of_two_padding, lambda rng, n: (rng.standard_normal((n, 2)),)),
}


@pytest.mark.parametrize("case", ["divmod", "bit_and", "abs_and_pow3", "format_spec"])
def test_python_int_operations_on_a_dynamic_dim(case):
    model, make = INT_OPERATIONS[case]
    rng = rng_for(527)
    f = run_calls(model, [make(rng, n) for n in (3, 4, 5, 6)])
    assert "raised while tracing" not in (f.stats()["eager_calls"] or {}), f.stats()
    no_internal_errors(f)


def test_bit_length_of_a_dynamic_dim_compiles():
    model, make = INT_OPERATIONS["bit_length"]
    rng = rng_for(528)
    f = run_calls(model, [make(rng, n) for n in (3, 4, 5, 6)])
    assert "raised while tracing" not in (f.stats()["eager_calls"] or {}), f.stats()
    no_internal_errors(f)


def flat_values_and_shape(x):
    return x.reshape(-1) * 1, np.array(x.shape)


def test_an_array_of_the_shape_compiles():
    rng = rng_for(529)
    f = run_calls(flat_values_and_shape, [(rng.standard_normal((n, 3)),) for n in (3, 4, 5)])
    assert not f.stats()["eager_calls"], f.stats()["eager_reasons"]


# --- exceptions part-way through a loop: the arguments as NumPy leaves them -----------------
def run_calls_keeping_partial_writes(function, argument_sets, **options):
    """Like ``run_calls``, but when eager raises, the arguments afterwards (NumPy's partial
    writes before the error) must agree too."""
    f = jitted(function, **options)
    for arguments in argument_sets:
        for _ in range(2):
            eager_args, jit_args = copy.deepcopy(arguments), copy.deepcopy(arguments)
            try:
                want = function(*eager_args)
            except Exception as error:  # noqa: BLE001 - eager's exception is the contract
                with pytest.raises(type(error)):
                    f(*jit_args)
            else:
                assert_same(f(*jit_args), want, **F64)
            assert_same(jit_args, eager_args, **F64, where="arguments after the call")
    return f


def gather_rows_into(out, table, ids):
    for t in range(len(ids)):
        out[t] = table[ids[t]]
    return out.sum()


def sparse_embedding_update(W, ids, grads, lr):
    for i, g in zip(ids, grads):
        W[i] -= lr * g
    return W


def test_an_out_of_range_id_part_way_leaves_numpys_partial_writes():
    rng = rng_for(530)
    table = rng.standard_normal((5, 3))
    f = run_calls_keeping_partial_writes(gather_rows_into, [
        (np.zeros((4, 3)), table, np.array([0, 1, 2, 3])),
        (np.zeros((6, 3)), table, np.array([0, 1, 2, 3, 4, 1])),
        (np.zeros((6, 3)), table, np.array([0, 1, 2, 9, 4, 1]))])
    no_internal_errors(f)
    f = run_calls_keeping_partial_writes(sparse_embedding_update, [
        (rng.standard_normal((5, 2)), np.array([0, 2, 4]), rng.standard_normal((3, 2)), 0.1),
        (rng.standard_normal((5, 2)), np.array([1, 2, 3, 0]), rng.standard_normal((4, 2)), 0.1),
        (rng.standard_normal((5, 2)), np.array([1, 2, 7, 0]), rng.standard_normal((4, 2)), 0.1),
        (rng.standard_normal((5, 2)), np.array([1, -2, 3, 0]), rng.standard_normal((4, 2)), 0.1)])
    no_internal_errors(f)


def decay_or_accumulate(state, x):
    for t in range(len(x)):
        if x[t] > 0:
            state += x[t]
        else:
            state *= 0.5
    return state


def test_a_guard_failing_mid_loop_leaves_the_argument_untouched_for_eager():
    f = run_calls(decay_or_accumulate, [
        (np.ones(2), np.array([1.0, 2, 3])), (np.ones(2), np.array([1.0, 2, 3, 4])),
        (np.ones(2), np.array([1.0, 2, -3, 4])), (np.ones(2), np.array([1.0, 2, -3, 4, 5])),
        (np.ones(2), np.array([-1.0, 2, -3, 4, 5])), (np.ones(2), np.arange(1.0, 7.0))],
        repeats=3, hot_exit=1, **F64)
    no_internal_errors(f)


# --- CTC forward recursion with shifted adds over an extended label sequence -----------------
def ctc_forward(y, labels, blank):
    T = y.shape[0]
    L = 2 * len(labels) + 1
    ext = np.full(L, blank)
    ext[1::2] = labels
    alpha = np.zeros((T, L))
    alpha[0, 0] = y[0, blank]
    alpha[0, 1] = y[0, ext[1]]
    skip = np.zeros(L, dtype=bool)
    skip[2:] = (ext[2:] != blank) & (ext[2:] != ext[:-2])
    for t in range(1, T):
        prev = alpha[t - 1]
        a = prev.copy()
        a[1:] += prev[:-1]
        a[2:] += np.where(skip[2:], prev[:-2], 0.0)
        alpha[t] = a * y[t, ext]
    return -np.log(alpha[-1, -1] + alpha[-1, -2])


def test_ctc_forward_over_lengths_and_label_counts():
    rng = rng_for(531)

    def arguments(t, n, vocab=4):
        p = rng.random((t, vocab)) + 0.1
        return p / p.sum(axis=1, keepdims=True), rng.integers(1, vocab, n), 0

    # Small sizes: the loop unrolls (y[t, ext], see the xfail below) and compile time grows
    # fast with T and len(labels).
    f = run_calls(ctc_forward, [arguments(3, 1), arguments(4, 1)], **F64)
    no_internal_errors(f)


def emissions_at_labels(y, cols):
    out = np.zeros((y.shape[0], len(cols)))
    for t in range(y.shape[0]):
        out[t] = y[t, cols]
    return out


def test_a_row_gather_at_the_loop_index_is_captured():
    rng = rng_for(536)
    f = run_calls(emissions_at_labels, [(rng.random((t, 5)), np.array([0, 2, 2, 4]))
                                        for t in (4, 5, 6, 7)], **F64)
    assert "unrolled" not in f.explain()
    assert f.stats()["compiles"] <= 2, f.explain()


def forward_from_a_constant_first_row(y):
    alpha = np.zeros(y.shape)
    alpha[0] = 1.0
    for t in range(1, y.shape[0]):
        alpha[t] = alpha[t - 1] * y[t]
    return alpha[-1]


def test_a_python_number_written_to_row_zero_keeps_the_length_dynamic():
    rng = rng_for(537)
    f = run_calls(forward_from_a_constant_first_row, [(rng.random((t, 3)),) for t in (4, 5, 6, 7)],
                  **F64)
    assert f.stats()["compiles"] <= 2, f.explain()


# --- metrics: top-k accuracy and a confusion matrix by np.add.at ---------------------------
def confusion_matrix(scores, y):
    cm = np.zeros((scores.shape[1], scores.shape[1]))
    np.add.at(cm, (y, scores.argmax(axis=1)), 1.0)
    return cm


def test_confusion_matrix_by_add_at_with_a_python_number_compiles():
    rng = rng_for(532)
    f = run_calls(confusion_matrix, [(rng.standard_normal((n, 4)), rng.integers(0, 4, n))
                                     for n in (5, 6, 9)])
    assert not f.stats()["eager_calls"], f.stats()["eager_reasons"]


def top_k_accuracy_and_focal_loss(scores, y, k):
    topk = np.argsort(-scores, axis=1)[:, :k]
    accuracy = (topk == y[:, None]).any(axis=1).mean()
    smooth = np.eye(scores.shape[1])[y] * 0.9 + 0.1 / scores.shape[1]
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return accuracy, -(smooth * (1 - p) ** 2 * np.log(p)).sum(axis=1).mean()


def test_top_k_accuracy_and_label_smoothed_focal_loss():
    rng = rng_for(533)
    f = run_calls(top_k_accuracy_and_focal_loss,
                  [(rng.standard_normal((n, 4)), rng.integers(0, 4, n), 2) for n in (5, 6, 9, 1)],
                  **F64)
    no_internal_errors(f)


# --- Adam with bias correction folded into the step size, state created by setdefault --------
def adam_folded_bias(params, grads, config):
    config["t"] = config.get("t", 0) + 1
    t = config["t"]
    lr_t = config["lr"] * np.sqrt(1 - config["b2"] ** t) / (1 - config["b1"] ** t)
    for k in params:
        m = config.setdefault("m_" + k, np.zeros_like(params[k]))
        v = config.setdefault("v_" + k, np.zeros_like(params[k]))
        m *= config["b1"]
        m += (1 - config["b1"]) * grads[k]
        v *= config["b2"]
        v += (1 - config["b2"]) * grads[k] ** 2
        params[k] -= lr_t * m / (np.sqrt(v) + 1e-8)
    return lr_t


def test_adam_with_folded_bias_correction_and_setdefault_state():
    rng = rng_for(534)

    def arguments(**state):
        params = {"W": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
        grads = {"W": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
        return params, grads, {"lr": 1e-2, "b1": 0.9, "b2": 0.999, **state}

    def warm(t):
        return arguments(t=t, m_W=rng.standard_normal((3, 2)), v_W=np.ones((3, 2)),
                         m_b=rng.standard_normal(2), v_b=np.ones(2))

    f = run_calls(adam_folded_bias, [arguments(), warm(3), warm(7)], **F64)
    no_internal_errors(f)


def mixup_batch(x, y, perm, lam):
    return lam * x + (1 - lam) * x[perm], lam * y + (1 - lam) * y[perm]


def test_mixup_with_a_permutation_passed_in():
    rng = rng_for(535)
    f = run_calls(mixup_batch, [(rng.standard_normal((n, 3)), np.eye(3)[rng.integers(0, 3, n)],
                                 rng.permutation(n), rng.random()) for n in (4, 5, 8, 1)], **F64)
    no_internal_errors(f)


# --- Sequential models: what the trace read through a list of layers must be guarded -------
class Scale:
    """A parameter-free layer holding a Python number (a dropout keep-prob, a temperature)."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, x):
        return x * self.factor


class Sequential:
    def __init__(self, layers):
        self.layers = layers

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def run_layers(x, layers):
    for layer in layers:
        x = layer(x)
    return x


def call_checking_each_time(f, eager, call, change):
    """``call`` twice (trace, compiled), apply ``change`` to the shared state, call again:
    the compiled result must follow the change as eager does."""
    x = np.linspace(-1.0, 1.0, 5)
    for _ in range(2):
        assert_same(call(f, x), call(eager, x), **F64)
    change()
    assert_same(call(f, x), call(eager, x), **F64, where="after the change")


def test_a_layer_attribute_changed_in_a_list_argument_between_calls():
    layers = [Scale(2.0), Scale(3.0)]
    f = jitted(run_layers)

    def change():
        layers[1].factor = 5.0

    call_checking_each_time(f, run_layers, lambda g, x: g(x, layers), change)


def replace_a_layer(model):
    model.layers[0] = Scale(7.0)


def replace_an_activation(model):
    model.layers[0] = np.sin


@pytest.mark.parametrize("change", [replace_a_layer, replace_an_activation])
def test_a_layer_replaced_in_the_models_list_between_calls(change):
    first = Scale(2.0) if change is replace_a_layer else np.tanh
    model = Sequential([first, np.tanh])
    f = jitted(model.forward)
    call_checking_each_time(f, model.forward, lambda g, x: g(x), lambda: change(model))


def test_a_layer_replaced_or_changed_through_an_attribute_or_index():
    class Holder:
        def __init__(self):
            self.layer = Scale(2.0)

        def forward(self, x, layers):
            return self.layer(x) + layers[0](x)

    holder, layers = Holder(), [Scale(1.0)]
    f = jitted(holder.forward)

    def change():
        holder.layer.factor = 5.0
        layers[0].factor = 4.0
        holder.layer = Scale(9.0)

    call_checking_each_time(f, holder.forward, lambda g, x: g(x, layers), change)


class Config:
    def __init__(self, activations):
        self.activations = activations


def first_activation_of(x, config):
    return config.activations[0](x)


def test_a_function_from_an_argument_objects_list_attribute():
    f, x, config = jitted(first_activation_of), np.linspace(-1, 1, 5), Config([np.tanh])
    for _ in range(2):
        assert_same(f(x, config), first_activation_of(x, config), **F64)
    no_internal_errors(f)


class Optimizer:
    def __init__(self, lr):
        self.lr = lr


def sgd_with_the_optimizer_in_a_dict(w, g, state):
    return w - state["optimizer"].lr * g


def sgd_with_the_optimizer_in_a_list(w, g, optimizers):
    return w - optimizers[0].lr * g


def sgd_with_the_optimizer_as_an_argument(w, g, optimizer):
    return w - optimizer.lr * g


CONTAINED_OPTIMIZERS = {
    "dict": (sgd_with_the_optimizer_in_a_dict, lambda: {"optimizer": Optimizer(0.1)},
             lambda state: state["optimizer"]),
    "list": (sgd_with_the_optimizer_in_a_list, lambda: [Optimizer(0.1)], lambda state: state[0]),
    "tuple": (sgd_with_the_optimizer_in_a_list, lambda: (Optimizer(0.1),),
              lambda state: state[0]),
    "argument": (sgd_with_the_optimizer_as_an_argument, lambda: Optimizer(0.1),
                 lambda state: state),
}


@pytest.mark.parametrize("container", list(CONTAINED_OPTIMIZERS))
def test_a_number_attribute_of_an_object_inside_a_container_argument(container):
    model, make, optimizer_of = CONTAINED_OPTIMIZERS[container]
    rng = rng_for(538)
    w, g, state = rng.standard_normal(3), rng.standard_normal(3), make()
    f = jitted(model)
    for lr in (0.1, 0.1, 0.5, 0.5):  # a learning-rate decay between epochs
        optimizer_of(state).lr = lr
        assert_same(f(w, g, state), model(w, g, state), **F64, where=f"lr={lr}")


# --- weights four attributes deep, reached through a loop over blocks ------------------------
class Attention:
    def __init__(self, rng, width):
        self.W = rng.standard_normal((width, width)) * 0.5
        self.training = True


class Block:
    def __init__(self, rng, width):
        self.attn = Attention(rng, width)


class Encoder:
    def __init__(self, rng, width=3, depth=2):
        self.blocks = [Block(rng, width) for _ in range(depth)]

    def forward(self, x):
        for block in self.blocks:
            x = np.tanh(x @ block.attn.W)
            if block.attn.training:
                x = x * 0.5
        return x

    def sgd_step(self, lr):
        for block in self.blocks:
            block.attn.W -= lr * block.attn.W  # an update outside the compiled forward


def test_block_weights_updated_in_place_between_compiled_forwards():
    rng = rng_for(539)
    model, x = Encoder(rng), rng.standard_normal((4, 3))
    f = jitted(model.forward)
    for step in range(3):
        assert_same(f(x), model.forward(x), **F64, where=f"after {step} SGD steps")
        model.sgd_step(0.1)


def test_a_flag_deep_in_a_block_switched_off_between_calls():
    rng = rng_for(540)
    model, x = Encoder(rng), rng.standard_normal((4, 3))
    f = jitted(model.forward)
    for training in (True, True, False, False):
        model.blocks[1].attn.training = training
        assert_same(f(x), model.forward(x), **F64, where=f"training={training}")


class LayerSettings:
    def __init__(self):
        self.activation, self.training, self.out_shape = "relu", True, (3, 3)


def layer_from_settings(x, layers):
    h = x @ np.eye(3)
    if layers[0].activation == "relu":
        h = np.maximum(h, 0)
    if layers[0].training:
        h = h * 2
    return h.reshape(layers[0].out_shape)


def switch_activation(settings):
    settings.activation = "tanh"


def switch_training(settings):
    settings.training = False


def switch_shape(settings):
    settings.out_shape = (9,)


@pytest.mark.parametrize("change", [switch_activation, switch_training, switch_shape])
def test_settings_of_a_layer_inside_a_list_argument_changed_between_calls(change):
    x, layers = np.linspace(-1, 1, 9).reshape(3, 3), [LayerSettings()]
    f = jitted(layer_from_settings)
    for _ in range(2):
        assert_same(f(x, layers), layer_from_settings(x, layers), **F64)
    change(layers[0])
    assert_same(f(x, layers), layer_from_settings(x, layers), **F64, where="after the change")


# --- NumPy keywords the tracer's methods lack: internal errors, not refusals -----------------
def masked_mean_over_padding(x, lengths):
    mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
    return np.mean(x, axis=1, where=mask), np.sum(x, axis=1, where=mask)


def max_with_initial(x):
    return np.max(x, axis=0, initial=0.0)


def column_major_flatten(x):
    return x.ravel(order="F") * 2, x.flatten("F")


UNSUPPORTED_KEYWORDS = {
    "mean_sum_where": (masked_mean_over_padding,
                       lambda rng, n: (rng.standard_normal((n, 5)), rng.integers(1, 6, n))),
    "max_initial": (max_with_initial, lambda rng, n: (rng.standard_normal((n, 3)),)),
    "ravel_order": (column_major_flatten, lambda rng, n: (rng.standard_normal((n, 3)),)),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED_KEYWORDS))
def test_numpy_keywords_the_tracer_lacks_are_refused_not_internal_errors(case):
    model, make = UNSUPPORTED_KEYWORDS[case]
    rng = rng_for(541)
    f = run_calls(model, [make(rng, n) for n in (3, 4)], **F64)
    no_internal_errors(f)


# --- Python lists in loops and np.array of traced rows ----------------------------------------
def leaky_integrator_with_a_correction(x):
    hs = [x[0]]
    for t in range(1, x.shape[0]):
        hs.append(hs[-1] * 0.5 + x[t])
        if t >= 2:
            hs[-1] = hs[-1] - 0.1 * hs[-3]  # correct the step just appended
    return np.stack(hs)


def test_rewriting_the_last_appended_state_in_a_loop():
    rng = rng_for(542)
    f = run_calls(leaky_integrator_with_a_correction,
                  [(rng.standard_normal((n, 3)),) for n in (3, 4, 5, 7)], **F64)
    no_internal_errors(f)


def losses_as_an_array(x, W):
    losses = []
    for row in x[:3]:
        losses.append(np.tanh(row @ W).sum())
    return np.array(losses), np.array([x[0, 0], x[1, 1], 2.0])


def test_np_array_of_a_list_of_traced_values_compiles():
    rng = rng_for(543)
    W = rng.standard_normal((3, 2))
    f = run_calls(losses_as_an_array, [(rng.standard_normal((4, 3)), W),
                                       (rng.standard_normal((4, 3)), W)], **F64)
    assert not f.stats()["eager_calls"], f.stats()["eager_reasons"]


class DenseLayer:
    def __init__(self, W):
        self.W = W


class LayerList:
    def __init__(self, weights):
        self.layers = [DenseLayer(W) for W in weights]


def forward_over_model_layers(x, model):
    for layer in model.layers:
        x = np.tanh(x @ layer.W)
    return x


def test_model_argument_weights_updated_in_place_between_calls():
    rng = rng_for(544)
    weights = [rng.standard_normal((3, 3)) for _ in range(2)]
    model, x = LayerList(weights), rng.standard_normal((4, 3))
    f = jitted(forward_over_model_layers)
    for step in range(3):
        assert_same(f(x, model), forward_over_model_layers(x, model), **F64,
                    where=f"after {step} SGD steps")
        for W in weights:
            W -= 0.1 * W


# --- integer self dot: d @ d ------------------------------------------------------------------
def squared_distance(a, b):
    d = a - b
    return d @ d


def squared_norm(x):
    return x @ x, np.dot(x, x)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_an_integer_vector_dotted_with_itself(dtype):
    rng = rng_for(545)
    f = run_calls(squared_norm, [(np.array([1, 2, 3, 4], dtype=dtype),),
                                 (np.array([0, 0, 0, 2], dtype=dtype),)])
    no_internal_errors(f)
    if dtype is not np.bool_:  # NumPy refuses bool subtraction
        f = run_calls(squared_distance, [(rng.integers(0, 5, 4).astype(dtype),
                                          rng.integers(0, 5, 4).astype(dtype)) for _ in range(3)])
        no_internal_errors(f)


def test_a_float_vector_dotted_with_itself():
    rng = rng_for(546)
    f = run_calls(squared_distance, [(rng.standard_normal(n), rng.standard_normal(n))
                                     for n in (4, 4, 9)], **F64)
    no_internal_errors(f)


# --- gradients through loops: HMM likelihood, a shifted-add recursion, GAE ------------------
def hmm_negative_log_likelihood(log_A, log_pi, log_B, obs):
    return -hmm_forward(log_pi, log_A, log_B, obs)


def shifted_add_recursion(y, w):
    a = np.zeros(y.shape[1])
    a[0] = 1.0
    for t in range(y.shape[0]):
        b = a * w
        b[1:] = b[1:] + a[:-1] * w[1:]
        a = b * y[t]
    return -np.log(a.sum())


def squared_advantages(values, rewards, gamma):
    return (gae(rewards, values, np.zeros_like(rewards), gamma, 0.95)[0] ** 2).mean()


def finite_difference(function, arguments, eps=1e-6):
    x = arguments[0]
    gradient = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        gradient[index] = (function(up, *arguments[1:]) - function(down, *arguments[1:])) / (
            2 * eps)
    return gradient


def hmm_loss_arguments(rng, t):
    log_pi, log_A, log_B, obs = hmm_arguments(rng, t)
    return log_A, log_pi, log_B, obs


GRADIENT_CASES = {
    "hmm": (hmm_negative_log_likelihood, hmm_loss_arguments),
    "shifted_add": (shifted_add_recursion,
                    lambda rng, t: (rng.random((t, 4)) + 0.1, rng.random(4) + 0.5)),
    "gae": (squared_advantages,
            lambda rng, t: (rng.standard_normal(t + 1), rng.standard_normal(t), 0.9)),
}


@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_jit_value_and_grad_through_loops_over_lengths(case):
    loss, make = GRADIENT_CASES[case]
    rng = rng_for(547)
    f = jitted(tj.value_and_grad(loss))
    for t in (3, 5):
        arguments = make(rng, t)
        value, gradient = f(*arguments)
        np.testing.assert_allclose(value, loss(*arguments), rtol=1e-10)
        np.testing.assert_allclose(gradient, finite_difference(loss, arguments), rtol=1e-5,
                                   atol=1e-6)
    no_internal_errors(f)


def sgd_with_the_optimizer_in_keywords(w, g, **config):
    return w - config["optimizer"].lr * g


def sgd_over_optimizers(optimizers, w, g):
    for optimizer in optimizers:
        w = w - optimizer.lr * g
    return w


def make_sgd_over(optimizers):
    def step(w, g):
        for optimizer in optimizers:
            w = w - optimizer.lr * g
        return w
    return step


@pytest.mark.parametrize("route", ["keywords", "closure", "partial"])
def test_a_number_attribute_reached_through_keywords_or_a_closure_list(route):
    rng = rng_for(548)
    w, g, optimizer = rng.standard_normal(3), rng.standard_normal(3), Optimizer(0.1)
    if route == "keywords":
        model = sgd_with_the_optimizer_in_keywords

        def call(function):
            return function(w, g, optimizer=optimizer)
    else:
        model = (make_sgd_over([optimizer]) if route == "closure"
                 else functools.partial(sgd_over_optimizers, [optimizer]))

        def call(function):
            return function(w, g)
    f = jitted(model)
    for lr in (0.1, 0.1, 0.5, 0.5):
        optimizer.lr = lr
        assert_same(call(f), call(model), **F64, where=f"lr={lr}")


# --- a decoder of blocks of layer objects, trained between compiled forwards ----------------
class Linear:
    def __init__(self, rng, n_in, n_out):
        self.W = rng.standard_normal((n_in, n_out)) * 0.3
        self.b = np.zeros(n_out)

    def forward(self, x):
        return x @ self.W + self.b


class CausalSelfAttention:
    def __init__(self, rng, width, heads):
        self.heads = heads
        self.qkv, self.out = Linear(rng, width, 3 * width), Linear(rng, width, width)
        self.ctx = {}

    def forward(self, x):
        T, width = x.shape
        q, k, v = (part.reshape(T, self.heads, -1).transpose(1, 0, 2)
                   for part in np.split(self.qkv.forward(x), 3, axis=-1))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        scores = scores + np.triu(np.ones((T, T)), k=1) * -1e9
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        self.ctx["attention"] = p
        return self.out.forward((p @ v).transpose(1, 0, 2).reshape(T, width))


class DecoderBlock:
    def __init__(self, rng, width, heads):
        self.attn, self.ff = CausalSelfAttention(rng, width, heads), Linear(rng, width, width)

    def forward(self, x):
        x = x + self.attn.forward(x)
        return x + np.maximum(self.ff.forward(x), 0)


class Decoder:
    def __init__(self, rng, width=4, heads=2, depth=2):
        self.blocks = [DecoderBlock(rng, width, heads) for _ in range(depth)]

    def forward(self, x):
        for block in self.blocks:
            x = block.forward(x)
        return x

    def linears(self):
        for block in self.blocks:
            yield from (block.attn.qkv, block.attn.out, block.ff)


def test_decoder_of_layer_objects_trained_between_compiled_forwards():
    rng = rng_for(549)
    model = Decoder(rng)
    f = jitted(model.forward)
    for step, length in enumerate((3, 3, 5, 5, 6)):
        x = rng.standard_normal((length, 4))
        got = f(x)
        got_attention = model.blocks[1].attn.ctx["attention"]
        assert_same(got, model.forward(x), **F64, where=f"step {step}")
        assert_same(got_attention, model.blocks[1].attn.ctx["attention"], **F64)
        for linear in model.linears():
            linear.W -= 0.1 * linear.W
            linear.b += 0.01
    no_internal_errors(f)


class CachingLayer:
    def __init__(self, how):
        self.how, self.ctx, self.inputs = how, {}, []

    def forward(self, x):
        out = np.tanh(x)
        if self.how == "item":  # kept for a hand-written backward
            self.ctx["out"] = out
        elif self.how == "update":
            self.ctx.update(out=out)
        else:
            self.inputs.append(x)  # numpy-ml's self.X.append(X)
        return out * 2


class CachingStack:
    def __init__(self, how):
        self.layers = [CachingLayer(how), CachingLayer(how)]

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x


@pytest.mark.parametrize("how", ["item", "update", "append"])
def test_caches_written_by_layers_in_a_list_hold_numpy_arrays(how):
    rng = rng_for(550)
    eager_model, jit_model = CachingStack(how), CachingStack(how)
    f = jitted(jit_model.forward)
    for _ in range(3):
        x = rng.standard_normal((2, 3))
        assert_same(f(x), eager_model.forward(x), **F64)
        for eager_layer, jit_layer in zip(eager_model.layers, jit_model.layers):
            assert_same((jit_layer.ctx, jit_layer.inputs), (eager_layer.ctx, eager_layer.inputs),
                        **F64, where="layer caches")


def middle_features_by_split(x):
    return np.split(x, [2, 5], axis=1)[1] * 2


def test_split_at_indices_past_the_axis_length():
    rng = rng_for(551)
    f = run_calls(middle_features_by_split, [(rng.standard_normal((2, d)),) for d in (4, 3, 6)],
                  **F64)
    no_internal_errors(f)
