"""Adversarial real-model tests, round 19a: course-assignment layers and small NumPy ML
libraries, written in their idioms and run eagerly and through ``jit`` on copies of the
same arguments and objects.

Sources read this round (rewritten, not pasted): CS224n's 2017 assignment 1
(``q2_neural.forward_backward_prop`` slicing W1, b1, W2, b2 out of one flat ``params``
vector at running offsets ``ofs``, its ``softmax`` with the 1-d / 2-d branch and the
``assert x.shape == orig_shape``); Andrew Ng's Machine Learning exercise 4 in Python
(``nnCostFunction`` over unrolled ``nn_params``, bias columns by ``np.concatenate([np.ones((m,
1)), X], axis=1)``, one-hot labels by ``np.eye(num_labels)[y]``, regularization skipping
``Theta[:, 1:]`` written back in place); UFLDL's sparse autoencoder cost (KL sparsity over
``rho_hat``, ``np.tile`` of the biases, the gradient concatenated flat); CS231n's
``FullyConnectedNet`` (``'W%d' % (i + 1)`` keys, ``dropout_param`` with a seed, a
``bn_params`` list of dicts, ``loss(X, y=None)`` switching train and test); from-scratch
optimizers whose state dicts are keyed by ``id(param)`` and Keras-like ``Sequential``
models with ``fit`` loops over minibatches; learning-rate schedules (cosine annealing by
``math.cos``, step decay by ``drop ** (epoch // every)``).

Findings, each fixed with its test here (each fails before its fix). Wrong result: an
optimizer keeping its state in a dict keyed by ``id(p)`` of the parameters it updates
(``m = self.m.get(id(p), np.zeros_like(p)); self.m[id(p)] = ...``) read the id of the
trace's stand-in for ``p``, so the traced call stored the moments under a key eager never
uses and compiled calls kept updating that key: from the second step on the parameters
were wrong, and the dict gained keys. With the moments created up front (``self.m[id(p)]``
read only) the trace failed with a ``KeyError`` (internal error). ``id()`` of anything
now makes the call run eagerly, with the reason (``tracer/purity.py``). Needless eager
runs: an optimizer updating a layer by ``setattr(layer, name, getattr(layer, name) + v)``
over ``("W", "b")`` (Keras-like frameworks) wrote around the trace ('a change to the
attribute ...'), so every train step ran eagerly; ``setattr`` with a string name now writes
as ``layer.W = ...`` does (``tracer/frontend.py``). Labels of a narrow integer dtype
(uint8, as MNIST's idx files and many loaders give them; int8) used as indices
(``probs[np.arange(N), y]``, ``np.eye(C)[y]``) made every call run eagerly: the bounds check
computed in uint8, which compiled code does not; such an index is now cast to int64 first,
as NumPy indexes with intp (``tracer/indexing.py``), and so are ``np.take``'s indices
(``numpy_api.take``) and ``np.bincount``'s int8/int16 values (``counting.bincount``).
CS231n's ``FullyConnectedNet`` with batch norm ran eagerly on every ``loss`` call: its
``for bn_param in self.bn_params: bn_param['mode'] = mode`` and ``batchnorm_forward``'s
``bn_param['running_mean'] = ...`` write items of dicts held at positions of an outside list,
which were refused (through a local name, as ``C = self.cache; C[k] = v`` is). Such a dict
is now written under a record as ``self.cache[k] = v`` is, through any name
(``frontend._note_listed_item``: nothing can store the trace's copy of it back, since an
outside list's items are written only with arrays); and a dict the trace wrote items of, read
again through the list, is not guarded a second time with the trace's own keys (a variant
whose entry refused its own call: ``outside_inputs._written_items``). A cosine learning-rate
schedule, ``0.5 * lr * (1 + math.cos(math.pi * epoch / total))`` of a run-time ``epoch``,
pinned the cosine's value (a guard per epoch: a side exit and a compile every epoch);
``math.cos`` and ``math.sin`` of a traced number are now run-time floats as ``math.exp`` is
(``tracer/python_math.py``).

Also a wrong result, fixed: ``x.base`` of a traced array was the tracer's own aliasing
record (None for an argument), so ``if x.base is not None: x = x.copy()`` took the no-copy
branch on a view argument and the compiled call wrote into the caller's base, which eager
leaves alone. The record is now ``Tracer.view_base`` and ``x.base`` makes the call run
eagerly, with the reason, as ``x.flags`` does (``tracer/traced_array.py``).

Probed and equal to eager, not kept (CI budget): CS224n's ``forward_backward_prop`` over 7
batch sizes, float32 and a strided ``params``; its ``softmax`` on 1-d, 2-d, NaN, inf and
empty inputs; Ng's ``nnCostFunction`` (batch 0 and 1 too); the UFLDL sparse autoencoder on
transposed data; CS224n's word2vec losses (naive softmax, negative sampling with repeated
ids, skip-gram over a Python list of outside words) under ``jit(value_and_grad)`` against
finite differences; layer norm with Tensor weights through ``backward()``; a parameter dict
under ``jit(value_and_grad)`` with an SGD loop; cs231n's softmax and SVM losses with uint8,
int8, int16, int32 and int64 labels; ``np.add.at``, ``x[ids] = 0`` and ``x[ids] += 1`` with
narrow ids (negative int8 too); a Keras-like ``fit`` over minibatches (compiled: its epoch
loop unrolls); cosine and step-decay schedules; f-strings, ``round``, ``math.isnan``,
``max``/``min`` of traced losses.

Not fixed (eager with the reason, or slow; results equal): cs231n's ``Solver._step`` as a
bound method (its update rules ``config.setdefault`` and write ``config['velocity']`` into
``self.optim_configs[p]``, a dict held in a dict, and store it back with
``self.optim_configs[p] = next_config``); ``scipy.special.logsumexp`` and ``softmax`` (GMM
E-steps: scipy's array-API layer converts the tracer); numbers a
call writes into a dict of ``self.bn_params`` are guarded as settings (a counter there
retraces every call). Fixed since (helper-132, session 20, test_state_holes20): ``d[x] =
1`` with an array key raises NumPy's ``TypeError``; ``x.__array_interface__`` runs eagerly
with its reason.

Each call compares results, dtypes, types and the arguments and objects afterwards with
eager NumPy, and an exception eager raises must be raised too.
"""

import math

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors

F64 = dict(rtol=1e-9, atol=1e-9)


# --- an optimizer whose state is keyed by id(param) ------------------------------------------
class MomentumById:
    def __init__(self, params, lr=0.1, mu=0.9):
        self.params, self.lr, self.mu = params, lr, mu
        self.velocity = {}

    def step(self, grads):
        for p, g in zip(self.params, grads):
            v = self.velocity.get(id(p), np.zeros_like(p))
            self.velocity[id(p)] = self.mu * v + g
            p -= self.lr * self.velocity[id(p)]
        return sum(float(p.sum()) for p in self.params)


def test_optimizer_state_keyed_by_id_of_the_parameters():
    """Before the fix the traced call keyed the velocity by the id of its stand-in: from
    the second step the compiled parameters differed from eager's, and ``velocity`` held
    keys eager never makes."""
    def make():
        return MomentumById([np.ones(3), np.ones((2, 2))])

    eager, compiled = make(), make()
    step = jitted(compiled.step)
    rng = np.random.default_rng(0)
    for _ in range(3):
        grads = [rng.standard_normal(3), rng.standard_normal((2, 2))]
        assert_same(step([g.copy() for g in grads]), eager.step(grads), **F64)
        assert_same(compiled.params, eager.params, **F64)
        assert sorted(compiled.velocity) == sorted(id(p) for p in compiled.params)
        assert_same([compiled.velocity[id(p)] for p in compiled.params],
                    [eager.velocity[id(p)] for p in eager.params], **F64)
    no_internal_errors(step)
    assert "builtins.id" in step.explain()


def test_optimizer_state_made_up_front_keyed_by_id_no_internal_error():
    """``self.m[id(p)]`` read from a dict filled in ``__init__``: a ``KeyError`` inside the
    trace before the fix (an internal error on every call)."""
    class Momentum:
        def __init__(self, params):
            self.params = params
            self.m = {id(p): np.zeros_like(p) for p in params}

        def step(self, grads):
            for p, g in zip(self.params, grads):
                m = self.m[id(p)]
                m *= 0.9
                m += g
                p -= 0.1 * m
            return self.params[0].sum()

    eager, compiled = Momentum([np.ones(3), np.ones(2)]), Momentum([np.ones(3), np.ones(2)])
    step = jitted(compiled.step)
    for k in range(2):
        grads = [np.arange(3.0) - k, np.ones(2) * k]
        assert_same(step([g.copy() for g in grads]), eager.step(grads), **F64)
        assert_same(compiled.params, eager.params, **F64)
    no_internal_errors(step)


# --- a Keras-like Sequential whose optimizer updates layers by setattr ------------------------
class Dense:
    def __init__(self, name, W, activation=None):
        self.name, self.W, self.b = name, W, np.zeros((1, W.shape[1]))
        self.activation = activation

    def forward(self, X):
        self.last_input = X
        self.last_Z = X @ self.W + self.b
        return np.tanh(self.last_Z) if self.activation == "tanh" else self.last_Z

    def backward(self, grad):
        if self.activation == "tanh":
            grad = grad * (1 - np.tanh(self.last_Z) ** 2)
        self.dW = self.last_input.T @ grad
        self.db = grad.sum(axis=0, keepdims=True)
        return grad @ self.W.T


class MomentumBySetattr:
    def __init__(self, lr=0.05, momentum=0.9):
        self.lr, self.momentum, self.velocity = lr, momentum, {}

    def update(self, layer, name):
        key = layer.name + name
        v = self.momentum * self.velocity.get(key, 0.0) - self.lr * getattr(layer, "d" + name)
        self.velocity[key] = v
        setattr(layer, name, getattr(layer, name) + v)


class Sequential:
    def __init__(self, layers, optimizer):
        self.layers, self.optimizer = layers, optimizer

    def train_on_batch(self, X, y):
        out = X
        for layer in self.layers:
            out = layer.forward(out)
        grad = 2 * (out - y) / y.size
        for layer in reversed(self.layers):
            grad = layer.backward(grad)
        for layer in self.layers:
            for name in ("W", "b"):
                self.optimizer.update(layer, name)
        return np.mean((out - y) ** 2)


def _sequential():
    rng = np.random.default_rng(0)
    return Sequential([Dense("d0", rng.standard_normal((3, 4)), "tanh"),
                       Dense("d1", rng.standard_normal((4, 1)))], MomentumBySetattr())


def test_keras_like_optimizer_updating_layers_by_setattr_compiles():
    """``setattr(layer, name, getattr(layer, name) + v)`` over ``("W", "b")``: before the fix
    the write went around the trace ('a change to the attribute ...'), every step eager."""
    eager, compiled = _sequential(), _sequential()
    step = jitted(compiled.train_on_batch)
    rng = np.random.default_rng(1)
    for n in (4, 4, 4):
        X, y = rng.standard_normal((n, 3)), rng.standard_normal((n, 1))
        assert_same(step(X, y), eager.train_on_batch(X, y), **F64)
        for mine, theirs in zip(compiled.layers, eager.layers):
            for name in ("W", "b", "dW", "db", "last_input", "last_Z"):
                assert_same(getattr(mine, name), getattr(theirs, name), **F64, where=name)
        assert_same(compiled.optimizer.velocity, eager.optimizer.velocity, **F64)
    no_internal_errors(step)
    stats = step.stats()
    assert not stats["eager_calls"] and stats["compiled_calls"] >= 1, step.explain()


# --- labels as MNIST's idx files give them: uint8 ----------------------------------------------
def softmax_loss_vectorized(W, X, y, reg):
    """cs231n's ``softmax_loss_vectorized``, with the accuracy a notebook prints beside."""
    num_train = X.shape[0]
    scores = X.dot(W)
    scores -= np.max(scores, axis=1, keepdims=True)
    probs = np.exp(scores) / np.sum(np.exp(scores), axis=1, keepdims=True)
    loss = -np.sum(np.log(probs[np.arange(num_train), y])) / num_train + reg * np.sum(W * W)
    dscores = probs
    dscores[np.arange(num_train), y] -= 1
    dW = X.T.dot(dscores) / num_train + 2 * reg * W
    return loss, dW, np.mean(np.argmax(scores, axis=1) == y), np.eye(W.shape[1])[y].sum(0)


def test_uint8_and_int8_labels_index_as_numpy_does_compiled():
    """Labels of a narrow integer dtype (uint8 from MNIST's files, int8 with -1 meaning
    the last class) as indices: before the fix the bounds check computed in uint8, so every
    such call ran eagerly ('less of a uint8 array computes in uint8')."""
    rng = np.random.default_rng(0)
    f = jitted(softmax_loss_vectorized)
    for labels in ([1, 3, 0, 3, 2], [0, 0, 1, 2, 3], [4, 0, 1, 2, 3]):  # 4: IndexError
        W, X = rng.standard_normal((6, 4)) * 0.01, rng.standard_normal((5, 6))
        for dtype in (np.uint8, np.int8):
            y = np.array(labels, dtype) - (dtype == np.int8)  # int8: -1 is the last class
            try:
                want = softmax_loss_vectorized(W, X, y, 0.1)
            except IndexError:
                with pytest.raises(IndexError):
                    f(W, X, y, 0.1)
                continue
            assert_same(f(W, X, y, 0.1), want, **F64)
    no_internal_errors(f)
    stats = f.stats()
    assert not stats["eager_calls"] and stats["compiled_calls"] >= 3, f.explain()


def class_counts(p, y):
    """Per-class rows by ``np.take``, counts by ``np.bincount``, the label's probability by
    ``np.take_along_axis`` (naive Bayes and kNN votes written with NumPy's helpers)."""
    return (np.take(p, y, axis=0).sum(0), np.bincount(y, minlength=p.shape[1]),
            np.take_along_axis(p, y[:, None], axis=1))


def test_int16_labels_through_take_and_bincount_compiled():
    """Before the fix ``np.take`` gathered with the int16 index and ``np.bincount``'s range
    guard compared in int16: eager on every call."""
    f = jitted(class_counts)
    p = np.random.default_rng(2).standard_normal((5, 5))
    for labels in ([1, 0, 4, 4, 2], [3, 3, 0, 1, 2]):
        y = np.array(labels, np.int16)
        assert_same(f(p, y), class_counts(p, y))
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] == 1 and not f.stats()["eager_calls"], f.explain()


# --- cs231n FullyConnectedNet: bn_params, a list of dicts every loss call writes ----------
def batchnorm_forward(x, gamma, beta, bn_param):
    mode = bn_param["mode"]
    eps, momentum = bn_param.get("eps", 1e-5), bn_param.get("momentum", 0.9)
    D = x.shape[1]
    running_mean = bn_param.get("running_mean", np.zeros(D, dtype=x.dtype))
    running_var = bn_param.get("running_var", np.zeros(D, dtype=x.dtype))
    if mode == "train":
        sample_mean, sample_var = x.mean(axis=0), x.var(axis=0)
        x_hat = (x - sample_mean) / np.sqrt(sample_var + eps)
        out, cache = gamma * x_hat + beta, (x_hat, sample_var, gamma, eps)
        running_mean = momentum * running_mean + (1 - momentum) * sample_mean
        running_var = momentum * running_var + (1 - momentum) * sample_var
    elif mode == "test":
        out, cache = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta, None
    else:
        raise ValueError('Invalid forward batchnorm mode "%s"' % mode)
    bn_param["running_mean"] = running_mean
    bn_param["running_var"] = running_var
    return out, cache


def batchnorm_backward_alt(dout, cache):
    x_hat, var, gamma, eps = cache
    N = dout.shape[0]
    dx_hat = dout * gamma
    dx = (1. / N) / np.sqrt(var + eps) * (N * dx_hat - np.sum(dx_hat, axis=0)
                                          - x_hat * np.sum(dx_hat * x_hat, axis=0))
    return dx, np.sum(dout * x_hat, axis=0), np.sum(dout, axis=0)


class FullyConnectedNet:
    def __init__(self, hidden_dims, input_dim=5, num_classes=3, shared_bn_param=False):
        self.num_layers = 1 + len(hidden_dims)
        rng = np.random.RandomState(0)
        dims = [input_dim] + hidden_dims + [num_classes]
        self.params = {}
        for i in range(self.num_layers):
            self.params['W%d' % (i + 1)] = 0.5 * rng.randn(dims[i], dims[i + 1])
            self.params['b%d' % (i + 1)] = np.zeros(dims[i + 1])
            if i < self.num_layers - 1:
                self.params['gamma%d' % (i + 1)] = np.ones(dims[i + 1])
                self.params['beta%d' % (i + 1)] = np.zeros(dims[i + 1])
        count = self.num_layers - 1
        # (one dict twice, as [{...}] * n makes it: the layers share running statistics)
        self.bn_params = [{'mode': 'train'}] * count if shared_bn_param else [
            {'mode': 'train'} for i in range(count)]

    def loss(self, X, y=None):
        mode = 'test' if y is None else 'train'
        for bn_param in self.bn_params:
            bn_param['mode'] = mode
        caches, out = {}, X
        for i in range(1, self.num_layers):
            h = out @ self.params['W%d' % i] + self.params['b%d' % i]
            h, caches['bn%d' % i] = batchnorm_forward(h, self.params['gamma%d' % i],
                                                      self.params['beta%d' % i],
                                                      self.bn_params[i - 1])
            caches['relu%d' % i] = h
            caches['x%d' % i] = out
            out = np.maximum(0, h)
        scores = out @ self.params['W%d' % self.num_layers] + self.params['b%d' % self.num_layers]
        if mode == 'test':
            return scores
        shifted = scores - scores.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        N = X.shape[0]
        loss, dscores = -log_probs[np.arange(N), y].mean(), np.exp(log_probs)
        dscores[np.arange(N), y] -= 1
        dscores /= N
        grads = {'W%d' % self.num_layers: out.T @ dscores}
        dout = dscores @ self.params['W%d' % self.num_layers].T
        for i in range(self.num_layers - 1, 0, -1):
            dout = dout * (caches['relu%d' % i] > 0)
            dout, grads['gamma%d' % i], grads['beta%d' % i] = batchnorm_backward_alt(
                dout, caches['bn%d' % i])
            grads['W%d' % i] = caches['x%d' % i].T @ dout
            dout = dout @ self.params['W%d' % i].T
        return loss, grads


def test_cs231n_batchnorm_net_writes_its_bn_params_list_compiled():
    """``for bn_param in self.bn_params: bn_param['mode'] = mode`` and ``batchnorm_forward``
    writing ``bn_param['running_mean']`` into ``self.bn_params[i]``: before the fix item
    writes into a dict held in an outside list were refused, and the net ran eagerly on
    every call. The running statistics and modes must be eager's after every call, with the
    layers' dicts apart and with one dict shared by both layers."""
    rng = np.random.default_rng(3)
    for shared, calls in ((False, (False, True, True)), (True, (False, False, False))):
        eager, compiled = (FullyConnectedNet([4] * (1 + shared), shared_bn_param=shared)
                           for _ in "ab")
        loss = jitted(compiled.loss)
        for labels in calls:
            X = rng.standard_normal((6, 5))
            y = rng.integers(0, 3, 6) if labels else None
            assert_same(loss(X, y), eager.loss(X, y), **F64)
            assert (compiled.bn_params[0] is compiled.bn_params[-1]) == (shared or len(
                compiled.bn_params) == 1)
            assert_same(compiled.bn_params, eager.bn_params, **F64, where="bn_params")
        no_internal_errors(loss)
        assert not loss.stats()["eager_calls"] and loss.stats()["compiled_calls"] >= 1, (
            loss.explain())


# --- a defensive copy of a view argument -------------------------------------------------------
def normalize_in_place_unless_a_view(x):
    """Code that writes in place but copies a view first, so the caller's base is left
    alone (``if x.base is not None: x = x.copy()``)."""
    if x.base is not None:
        x = x.copy()
    x -= x.mean()
    return x * 2


def test_base_of_an_argument_is_numpys():
    """Before the fix ``x.base`` of a traced array was the tracer's own bookkeeping (None for
    an argument), so the trace took the no-copy branch and wrote into the caller's base,
    which eager leaves as it was."""
    f = jitted(normalize_in_place_unless_a_view)
    for _ in range(2):
        mine, theirs = np.arange(8.0), np.arange(8.0)
        assert_same(f(mine[::2]), normalize_in_place_unless_a_view(theirs[::2]))
        assert_same(mine, theirs, where="the caller's base")
    no_internal_errors(f)


# --- a cosine learning-rate schedule -----------------------------------------------------------
def cosine_sgd_step(w, X, y, epoch, total=50):
    lr = 0.5 * 0.1 * (1 + math.cos(math.pi * epoch / total))
    w -= lr * X.T @ (X @ w - y) / X.shape[0]
    return lr


def test_cosine_schedule_of_a_run_time_epoch_compiles_once():
    """``math.cos`` of ``math.pi * epoch / total`` pinned its value before the fix (a guard
    ``float(...) == ...``): every epoch failed it, took a side exit and compiled again."""
    f = jitted(cosine_sgd_step)
    rng = np.random.default_rng(4)
    mine, theirs = np.zeros(3), np.zeros(3)
    X, y = rng.standard_normal((5, 3)), rng.standard_normal(5)
    for epoch in range(5):
        assert_same(f(mine, X, y, epoch), cosine_sgd_step(theirs, X, y, epoch), **F64)
        assert_same(mine, theirs, **F64)
    stats = f.stats()
    assert not stats["eager_calls"] and stats["compiles"] <= 2 and not stats["side_exits"], (
        f.explain())
