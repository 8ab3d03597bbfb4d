"""Training loops that keep their weights on ``self`` and write them in place, in the
idioms of Raschka's book classifiers (tracer/loop_attribute_carries.py): each model is run
eagerly and through ``jit`` (``state_twins``: results and the objects' whole state after
every call) at trip counts 0, 1 and primes, and the loop is one captured loop, compiled
once for a trip count, whatever its length. AdalineGD, LogisticRegressionGD (with its
clip) and the Perceptron (``errors += int(update != 0.0)`` over ``zip(X, y)``) are
test_adversarial_real_models23's."""

import numpy as np
import pytest
from state_twins import run_twins

# the book's own classes, as round 23 wrote them (weights from a seeded RandomState,
# self.w_[1:] += ..., self.cost_.append / self.errors_.append)
from test_adversarial_real_models23 import AdalineGD, LogisticRegressionGD, Perceptron


class SeparateBias:
    """Logistic regression with its weights rebound and a scalar bias (``self.b -= ...``)."""

    def __init__(self, lr=0.1, n_iter=10):
        self.lr, self.n_iter = lr, n_iter

    def fit(self, X, y):
        self.w = np.zeros(X.shape[1])
        self.b = 0.0
        self.losses = []
        for _ in range(self.n_iter):
            p = self.forward(X)
            grad = p - y
            self.w = self.w - self.lr * X.T.dot(grad) / len(y)
            self.b -= self.lr * grad.mean()
            p = np.clip(p, 1e-12, 1 - 1e-12)
            self.losses.append(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        return self.w, self.b

    def forward(self, X):
        return 1.0 / (1.0 + np.exp(-(X.dot(self.w) + self.b)))


class AdalineSGD(AdalineGD):
    """Stochastic gradient descent, the samples in a shuffled order per epoch (the orders
    drawn by the caller: a draw in the loop keeps it unrolled)."""

    def fit(self, X, y, orders):
        self.w_ = np.zeros(1 + X.shape[1])
        self.cost_ = []
        for epoch in range(self.n_iter):
            order = orders[epoch]
            cost = 0.0
            for i in range(len(order)):
                xi, target = X[order[i]], y[order[i]]
                error = target - self.activation(self.net_input(xi))
                self.w_[1:] += self.eta * xi * error
                self.w_[0] += self.eta * error
                cost += 0.5 * error ** 2
            self.cost_.append(cost / len(y))
        return self


class TwoLayerNet:
    """A small net keeping its parameters in a dict it makes in ``fit`` (a float bias
    among them, rebound by ``-=``) and its losses in a list."""

    def __init__(self, hidden=5, lr=0.5, n_iter=10, keep_initial=False):
        self.hidden, self.lr, self.n_iter = hidden, lr, n_iter
        self.keep_initial = keep_initial

    def fit(self, X, y):
        rgen = np.random.RandomState(0)
        self.params = {"W1": rgen.normal(scale=0.5, size=(X.shape[1], self.hidden)),
                       "b1": np.zeros(self.hidden),
                       "W2": rgen.normal(scale=0.5, size=self.hidden), "b2": 0.0}
        if self.keep_initial:
            self.initial_ = self.params  # the same dict: eager's updates show there too
        self.loss_ = []
        for _ in range(self.n_iter):
            grads, loss = self.gradients(X, y)
            for key in ("W1", "b1", "W2", "b2"):
                self.params[key] -= self.lr * grads[key]
            self.loss_.append(loss)
        return self.params

    def gradients(self, X, y):
        p = self.params
        h = np.tanh(X @ p["W1"] + p["b1"])
        out = 1.0 / (1.0 + np.exp(-(h @ p["W2"] + p["b2"])))
        d = (out - y) / len(y)
        dh = np.outer(d, p["W2"]) * (1 - h ** 2)
        loss = -np.mean(y * np.log(out) + (1 - y) * np.log(1 - out))
        return {"W1": X.T @ dh, "b1": dh.sum(0), "W2": h.T @ d, "b2": d.sum()}, loss


class AliasedWeights(AdalineGD):
    """The weights under a second name before the loop: eager's in-place updates show
    through it, so the loop does not carry them (unrolled, as eager)."""

    def fit(self, X, y):
        self.w_ = start = np.zeros(1 + X.shape[1])
        self.first_ = self.w_
        for _ in range(self.n_iter):
            errors = y - self.net_input(X)
            self.w_[1:] += self.eta * X.T.dot(errors)
            self.w_[0] += self.eta * errors.sum()
        return start


def labelled(seed, n, features=3):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, features))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.3 * r.normal(size=n) > 0, 1, -1)
    return X, y


def zero_one(X, y):
    return X, (y > 0).astype(np.float64)


COUNTS = (0, 1, 2, 3, 13, 53, 211)


@pytest.mark.parametrize("model", [AdalineGD, LogisticRegressionGD])
def test_gradient_descent_classifiers_match_numpy_at_every_count(model):
    X, y = labelled(0, 40)
    if model is LogisticRegressionGD:
        X, y = zero_one(X, y)
    for n_iter in COUNTS:
        run_twins(lambda n_iter=n_iter: model(n_iter=n_iter), "fit",
                  [(X, y), (X[:29], y[:29]), (X, y)])


@pytest.mark.parametrize("model", [AdalineGD, LogisticRegressionGD, SeparateBias])
def test_the_epoch_loop_compiles_once_whatever_its_length(model):
    X, y = labelled(1, 30)
    if model is not AdalineGD:
        X, y = zero_one(X, y)
    for n_iter in (50, 1000):
        f = run_twins(lambda n_iter=n_iter: model(n_iter=n_iter), "fit",
                      [(X, y), (X[:20], y[:20]), (X, y), (X[:25], y[:25])])
        stats = f.stats()
        assert not stats["eager_calls"], f.explain()
        assert stats["compiles"] <= 2 and stats["compiled_calls"] >= 2, f.explain()
        assert "unrolled" not in f.explain(), f.explain()


def test_a_perceptron_counting_its_mistakes_matches_numpy():
    X, y = labelled(2, 17)
    for n_iter in (0, 1, 5, 13):
        run_twins(lambda n_iter=n_iter: Perceptron(n_iter=n_iter), "fit",
                  [(X, y), (X[:11], y[:11]), (X, y)])


def test_separate_bias_and_rebound_weights_match_numpy():
    X, y = zero_one(*labelled(3, 23))
    for n_iter in COUNTS:
        run_twins(lambda n_iter=n_iter: SeparateBias(n_iter=n_iter), "fit",
                  [(X, y), (X[:7], y[:7]), (X, y)])


def orders(seed, epochs, n):
    r = np.random.default_rng(seed)
    return np.stack([r.permutation(n) for _ in range(epochs)]) if epochs else np.zeros(
        (0, n), dtype=np.int64)


def test_sgd_over_shuffled_orders_matches_numpy():
    """The weights start as np.zeros (a NumPy array the loop's traced copy updates): the
    loop must start from it, not from iteration 0's result (a wrong result found while
    writing this carry)."""
    X, y = labelled(4, 19)
    for n_iter in (0, 1, 5, 41):
        f = run_twins(lambda n_iter=n_iter: AdalineSGD(n_iter=n_iter), "fit",
                      [(X, y, orders(n_iter, n_iter, 19)), (X[:13], y[:13], orders(1, n_iter, 13)),
                       (X, y, orders(2, n_iter, 19)), (X[:11], y[:11], orders(3, n_iter, 11))])
    assert f.stats()["compiled_calls"] >= 2 and not f.stats()["eager_calls"], f.explain()


def test_a_dict_of_parameters_on_self_is_carried_entry_by_entry():
    X, y = zero_one(*labelled(5, 30))
    for n_iter in (0, 1, 3, 37):
        f = run_twins(lambda n_iter=n_iter: TwoLayerNet(n_iter=n_iter), "fit",
                      [(X, y), (X[:20], y[:20]), (X, y), (X[:25], y[:25])])
    assert f.stats()["compiled_calls"] >= 2 and not f.stats()["eager_calls"], f.explain()
    assert "unrolled" not in f.explain()


def test_a_dict_of_parameters_held_twice_is_not_carried_and_left_as_eager_leaves_it():
    """Before: a trial trip rebound ``self.params["b2"]`` (a float) to its traced value and
    nothing put it back: the traced call's result was wrong, and every later call ran
    eagerly ('uses %133 before its definition'). Now the loop unrolls, naming why."""
    X, y = zero_one(*labelled(6, 30))
    f = run_twins(lambda: TwoLayerNet(n_iter=12, keep_initial=True), "fit",
                  [(X, y), (X[:20], y[:20])])
    assert "is also held by `self.initial_" in f.explain(), f.explain()


def test_weights_held_under_another_name_are_not_carried():
    X, y = labelled(7, 30)
    for n_iter in (3, 40):
        f = run_twins(lambda n_iter=n_iter: AliasedWeights(n_iter=n_iter), "fit",
                      [(X, y), (X[:20], y[:20]), (X, y)])
    assert "`self.w_` is also held by" in f.explain(), f.explain()
