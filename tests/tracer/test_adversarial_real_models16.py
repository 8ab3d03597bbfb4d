"""Adversarial real-model tests, round 16a: NumPy model code from public sources rounds
1-15 did not read, written in their idioms and run eagerly and through ``jit`` on copies of
the same arguments and objects.

Sources read this round: "Deep Learning from Scratch 2" (oreilly-japan/
deep-learning-from-scratch-2: ``common/time_layers.py``'s TimeLSTM / TimeEmbedding /
TimeAffine / TimeSoftmaxWithLoss with ``ignore_label = -1``, ``common/util.py``'s
``clip_grads`` and ``remove_duplicate`` for tied weights, the Embedding layer's
``np.add.at`` and its ``for i, word_id in enumerate(self.idx)`` loop, ch08's attention
weight / weight sum forward and backward); numpy-ml's optimizers (``C = self.cache``,
per-parameter state dicts created on first update, ``self.cache = C``); Samson Zhang's
"MNIST from scratch" notebook (``one_hot`` by ``Y.max() + 1``, ``ReLU_deriv = Z > 0``, a
printed accuracy inside the gradient-descent loop); from-scratch logistic regression,
GMM EM, PCA by power iteration, vectorized k-means, AdaBoost stumps (ML-From-Scratch),
positional encodings, causal dilated Conv1D, batch norm's alternative backward, softmax
regression, min-char-rnn's Adagrad over zipped lists, and NumPy statistics a model
pipeline uses (``np.cov``, ``np.corrcoef``, percentiles, ``np.ptp``, ``np.digitize``,
``np.take_along_axis``, ``np.kron``, ``np.triu_indices``).

Findings, wrong results, each fixed with its test here (every test fails before its fix):
a function returning ``None`` that writes its arguments (``clip_grads``) had its writes
applied twice on the call whose hot side exit compiled the other path (runtime/misses.py);
a guard checked after another decision's margin guard read a workspace slot a later
temporary had taken, so a branch followed a byte of another value (-1/+1 hinge labels took
the 0/1 path; codegen/schedule.py); writes into an outside dict that held arrays went to
the trace's copy of it and were lost: through a local name (numpy-ml's ``C[name] = ...``),
``del self.cache["x"]``, and nested ``self.cache["dense"]["x"] = x`` (now refused: eager,
with the reason; tracer/frontend.py, source_rewrite.py); counters calls write under their
names (``self.counts[name] += 1``, unguarded as state) read whole (``self.counts.values()``)
gave the other names' counts of the traced call (tracer/outside_inputs.py). Needless eager
runs, fixed: a fit
loop's ``prev_loss = np.inf`` before ``if abs(prev_loss - loss) < tol`` took a guard-margin
exit on every call (tracer/margin_rules.py).

Not fixed (eager, correct): DLFS2's Time* layers store a layer object per step in
``self.layers`` (objects in attributes run eagerly); numpy-ml's Adam (nested state written
through ``C``); EM's and power iteration's convergence checks after a few trips (the
carried rounding bound outgrows the tolerance: 'guard margin'); k-means on one or two
points ('guard margin' at ``argmin``); ``np.interp`` (learning-rate warmups),
``np.partition``/``np.argpartition`` (top-k), ``np.ix_``, ``np.polyval``, ``np.lexsort``,
``np.add.reduceat``, ``np.nanpercentile``, ``np.apply_along_axis``, ``np.vectorize``.
Slow: Samson Zhang's loop of 3 unrolled steps compiles for ~20 s per variant on the
loaded machine.

Each call compares results, dtypes, types and the arguments afterwards with eager NumPy,
and an exception eager raises must be raised too.
"""

import numpy as np
from real_model_checks import all_compiled, assert_same, jitted, no_internal_errors, run_calls

F64 = dict(rtol=1e-9, atol=1e-9)


# --- DLFS2 common/util.py: clip_grads over a list of gradients, in place, returns None ------
def clip_grads(grads, max_norm):
    total_norm = 0
    for grad in grads:
        total_norm += np.sum(grad ** 2)
    total_norm = np.sqrt(total_norm)
    rate = max_norm / (total_norm + 1e-6)
    if rate < 1:
        for grad in grads:
            grad *= rate


def _gradients(scale, seed):
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal((3, 4)) * scale, rng.standard_normal(4) * scale], 5.0)


def test_clip_grads_in_place_is_applied_once_when_the_other_branch_compiles():
    """Small gradients first (the traced path does not clip), then large ones: the second
    side exit compiles the clipping path. Before the fix that call clipped twice (its
    ``None`` result sent it to eager after the compiled path had written the gradients)."""
    calls = [_gradients(0.1, 0), _gradients(10.0, 1), _gradients(10.0, 2), _gradients(0.1, 3)]
    f = run_calls(clip_grads, calls, **F64)
    no_internal_errors(f)
    stats = f.stats()
    assert stats["eager_calls"] == {"side exit": 1}, f.explain()


# --- logistic regression from scratch: early stopping from prev_loss = np.inf --------------
def logistic_regression_fit(X, y, lr=0.5, epochs=2, tol=1e-4):
    """The from-scratch fit loop: loss history and a stop when the loss no longer drops,
    with the previous loss started at infinity."""
    n, d = X.shape
    w, b = np.zeros(d), 0.0
    prev_loss = np.inf
    losses = []
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-(X @ w + b)))
        loss = -np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))
        if abs(prev_loss - loss) < tol:
            break
        prev_loss = loss
        losses.append(loss)
        w = w - lr * (X.T @ (p - y)) / n
        b = b - lr * np.mean(p - y)
    return w, b, losses


def _classification(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    return (X, (X @ np.array([1.0, -2.0, 0.5]) > 0).astype(np.float64))


def test_logistic_regression_stopping_on_a_loss_started_at_inf_compiles():
    """``abs(np.inf - loss) < tol`` is inf on both sides whatever the loss's rounding; before
    the fix its guard had an infinite bound, so every call ran eagerly ('guard margin')."""
    f = run_calls(logistic_regression_fit, [_classification(16, seed) for seed in (1, 2)], **F64)
    no_internal_errors(f)
    assert "guard margin" not in f.stats()["eager_calls"], f.explain()


# --- a guard's predicate read after its buffer was reused -----------------------------------
def hinge_error(X, y, W):
    """Hinge loss and training error of a max-of-linear scorer; labels may come as 0/1 or
    -1/+1, checked before the scores are thresholded."""
    scores = (X @ W).max(axis=1)
    unsigned = y.min() >= 0
    error = np.mean((scores > 0) != (y > 0))
    if unsigned:
        y = 2 * y - 1
    return np.maximum(0.0, 1.0 - y * scores).mean(), error


def _scorer(seed, signed):
    rng = np.random.default_rng(seed)
    X, W, y = rng.standard_normal((8, 6)), rng.standard_normal((6, 5)), rng.integers(0, 2, 8)
    return (X, 2 * y - 1 if signed else y, W)


def test_a_guard_after_another_decisions_margin_reads_its_own_value():
    """``if unsigned:`` is checked after the margin guard of the mask ``scores > 0`` before it
    (lowering waits for a margin just before a guard), a kernel later than its predicate's;
    the workspace planner freed the predicate's slot at its own kernel, so the check read a
    byte of a later temporary: -1/+1 labels took the 0/1 path (4 of 12 calls wrong)."""
    calls = [_scorer(seed, signed=seed % 3 != 0) for seed in range(6)]
    f = run_calls(hinge_error, calls, **F64)
    no_internal_errors(f)


def one_hot(Y):
    one_hot_Y = np.zeros((Y.size, Y.max() + 1))
    one_hot_Y[np.arange(Y.size), Y] = 1
    return one_hot_Y.T


def two_steps(X, Y, W1, W2):
    """Samson Zhang's MNIST-from-scratch step twice: the second one_hot's ``Y.max() + 1``
    guard follows the first step's relu-mask margin."""
    for _ in range(2):
        Z1 = W1.dot(X)
        dZ1 = W2.T.dot(one_hot(Y)) * (Z1 > 0)
        W1 = W1 - 0.1 * dZ1.dot(X.T)
    return W1


def test_one_hot_by_label_max_twice_with_a_relu_mask_between_stays_compiled():
    """Before the fix the second ``Y.max() + 1`` guard read a reused slot and every call
    took a side exit (then compiled the 'other path', which exited the same way)."""
    rng = np.random.default_rng(16)
    args = (rng.random((6, 8)), np.array([0, 0, 1, 3, 1, 3, 1, 0]), rng.random((5, 6)) - 0.5,
            rng.random((4, 5)) - 0.5)
    f = run_calls(two_steps, [args], repeats=3, **F64)
    assert all_compiled(f, 3), f.explain()


# --- numpy-ml optimizers: per-parameter state in self.cache, reached as C -------------------
class MomentumOptimizer:
    """numpy-ml's optimizers read ``C = self.cache`` and keep each parameter's state under
    its name, created on its first update."""

    def __init__(self, lr=0.01, momentum=0.9):
        self.cache, self.lr, self.momentum = {}, lr, momentum

    def update(self, param, param_grad, param_name):
        C = self.cache
        if param_name not in C:
            C[param_name] = np.zeros_like(param_grad)
        C[param_name] = self.momentum * C[param_name] + self.lr * param_grad
        return param - C[param_name]


class StepCounter:
    """State rebound whole after writes through a local name (``self.stats = C``)."""

    def __init__(self):
        self.stats = {"W": np.zeros(2), "b": np.zeros(2), "n_W": 0, "n_b": 0}

    def step(self, x, name):
        C = self.stats
        C[name] = C[name] + x
        C["n_" + name] = C["n_" + name] + 1
        self.stats = C
        return x.sum()


def test_state_written_through_a_local_name_for_self_cache_is_not_lost():
    """Once ``self.cache`` held an array the trace read it as its own copy (the arrays
    made inputs), and ``C[param_name] = ...`` wrote only that copy: compiled calls left the
    optimizer's state unchanged (7 of 8 calls wrong). Such a write is refused now (the call
    runs eagerly); recorded as ``self.cache[k] = v`` is, a later ``self.stats = C`` stored
    the other counters as the trace saw them (the step counter: 4 of 8 calls wrong)."""
    rng = np.random.default_rng(160)
    eager, compiled = MomentumOptimizer(), MomentumOptimizer()
    update = jitted(compiled.update)
    for step in range(8):
        param, grad = rng.standard_normal(3), rng.standard_normal(3)
        name = ("W", "b")[step % 2]
        assert_same(update(param, grad, name), eager.update(param, grad, name), **F64,
                    where=f"step {step}")
        assert_same(compiled.cache, eager.cache, **F64, where=f"cache after step {step}")
    no_internal_errors(update)
    eager, compiled = StepCounter(), StepCounter()
    count = jitted(compiled.step)
    for step in range(6):
        x, name = np.arange(2.0) + step, ("W", "b")[step % 2]
        assert_same(count(x, name), eager.step(x, name), **F64, where=f"count {step}")
        assert_same(compiled.stats, eager.stats, where=f"stats after count {step}")


class FreeingDense:
    """A layer that frees its forward cache in backward (``del self.cache["x"]``)."""

    def __init__(self, W):
        self.W, self.cache = W, {}

    def forward(self, x):
        self.cache["x"] = x
        return x @ self.W

    def backward(self, dout):
        x = self.cache["x"]
        del self.cache["x"]
        return dout @ self.W.T, x.T @ dout


def test_an_item_deleted_from_an_outside_dict_is_deleted():
    """``del self.cache["x"]`` went to the trace's copy of the dict (it held an array), so
    compiled calls left the entry in place (every call wrong). Now refused: the backward
    runs eagerly, with the reason."""
    rng = np.random.default_rng(161)
    W = rng.standard_normal((3, 2))
    eager, compiled = FreeingDense(W.copy()), FreeingDense(W.copy())
    forward, backward = jitted(compiled.forward), jitted(compiled.backward)
    for step in range(3):
        x, dout = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
        assert_same(forward(x), eager.forward(x), **F64, where=f"forward {step}")
        assert_same(backward(dout), eager.backward(dout), **F64, where=f"backward {step}")
        assert_same(compiled.cache, eager.cache, where=f"cache after step {step}")
    no_internal_errors(backward)


class NestedCache:
    """State nested one level down: per-layer dicts and lists under ``self.cache``."""

    def __init__(self):
        self.cache = {"dense": {"x": np.zeros(3)}, "history": [np.zeros(3), np.ones(3)]}

    def forward(self, x):
        self.cache["dense"]["x"] = x
        self.cache["history"][0] = x * 2
        return x.sum()


def test_an_item_written_into_a_dict_inside_an_outside_dict_is_written():
    """``self.cache["dense"]["x"] = x`` wrote the trace's copy of the inner dict (it held
    an array): compiled calls left the caller's dict as it was (every call wrong). Now
    refused: the call runs eagerly, with the reason."""
    rng = np.random.default_rng(162)
    eager, compiled = NestedCache(), NestedCache()
    forward = jitted(compiled.forward)
    for step in range(3):
        x = rng.standard_normal(3)
        assert_same(forward(x), eager.forward(x), **F64, where=f"step {step}")
        assert_same(compiled.cache, eager.cache, where=f"cache after step {step}")
    no_internal_errors(forward)


class UpdateCounts:
    """Per-parameter update counts a train step keeps, summed for a schedule."""

    def __init__(self):
        self.counts = {"W": 0, "b": 0}

    def step(self, x, name):
        self.counts[name] += 1
        return x * sum(self.counts.values())


def test_counters_other_calls_write_are_read_whole_at_their_values():
    """Each name's count is state (calls write it, so it is not guarded); read whole
    (``self.counts.values()``) the other name's count was the traced call's constant, so
    every compiled call's sum was off (2 of 6 calls wrong)."""
    eager, compiled = UpdateCounts(), UpdateCounts()
    step = jitted(compiled.step)
    for call in range(6):
        x, name = np.arange(2.0), ("W", "b")[call % 2]
        assert_same(step(x, name), eager.step(x, name), where=f"call {call}")
        assert_same(compiled.counts, eager.counts, where=f"counts after call {call}")
    assert not step.stats()["eager_calls"], step.explain()
