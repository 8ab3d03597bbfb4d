"""Review 24c of 16c3f46 (tracer/loop_attribute_carries.py): model code that trains
weights kept on ``self`` in a loop, run eagerly and through ``jit`` (``state_twins``:
results and the objects' whole state after every call)."""

import numpy as np
from state_twins import run_twins


def labelled(seed, n, features=3):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, features))
    return X, np.sign(X[:, 0] + 0.1)


class EarlyStopping:
    """Raschka's AdalineGD with an early stop: the cost appended to ``self.cost_`` before
    a data-dependent ``break``."""

    def __init__(self, n_iter=10, eta=0.01, tol=8.0):
        self.n_iter, self.eta, self.tol = n_iter, eta, tol

    def fit(self, X, y):
        self.w_ = np.zeros(1 + X.shape[1])
        self.cost_ = []
        for _ in range(self.n_iter):
            errors = y - (X.dot(self.w_[1:]) + self.w_[0])
            self.w_[1:] += self.eta * X.T.dot(errors)
            self.w_[0] += self.eta * errors.sum()
            cost = (errors ** 2).sum() / 2.0
            self.cost_.append(cost)
            if cost < self.tol:
                break
        return self


def test_an_attribute_append_before_a_break_matches_numpy_and_compiles():
    """Before: 16c3f46 let ``self.cost_.append(cost)`` through the front end, but the loop
    with a ``break`` (while_loops) carries no attribute: its trial trip's append stayed in
    the list and every call failed to compile ('return uses %16 before its definition',
    run eagerly). Now the loop runs as written, as before 16c3f46: compiled per length."""
    X, y = labelled(0, 30)
    for n_iter in (0, 1, 2, 7, 31):
        f = run_twins(lambda n_iter=n_iter: EarlyStopping(n_iter=n_iter), "fit",
                      [(X, y), (X[:20], y[:20]), (X, y), (X[:23], y[:23])])
        stats = f.stats()
        assert not stats["eager_calls"], f.explain()
        assert stats["compiled_calls"] >= 1, f.explain()


class ClippedWeights:
    """Weights behind a property whose setter clips them, rebound in the loop."""

    def __init__(self, n_iter):
        self.n_iter = n_iter

    def fit(self, X, y):
        self._w = np.zeros(X.shape[1])
        for _ in range(self.n_iter):
            self.w_ = self.w_ + X.T.dot(y - X.dot(self.w_))
        return self._w

    @property
    def w_(self):
        return self._w

    @w_.setter
    def w_(self, value):
        self._w = np.clip(value, -0.05, 0.05)


def test_a_property_setter_written_in_a_loop_matches_numpy():
    """Before: the loop held ``self.w_`` in a local (tracer/loop_attributes.py), so the
    setter clipped once, after the loop (-0.05 where NumPy has 0.05 at n_iter 2)."""
    X, y = labelled(0, 30)
    for n_iter in (2, 5):
        run_twins(lambda n_iter=n_iter: ClippedWeights(n_iter), "fit",
                  [(X, y), (X[:20], y[:20]), (X, y)])


class CountingSets:
    """A ``__setattr__`` that counts the object's attribute writes."""

    def __setattr__(self, name, value):
        object.__setattr__(self, "sets", getattr(self, "sets", 0) + 1)
        object.__setattr__(self, name, value)

    def fit(self, X, y):
        self.w_ = X.T.dot(y)
        return self


def test_a_counting_setattr_hook_matches_numpy():
    """Before: the trace's write ran the hook and putting the attribute back after the
    refused trace ran it again (sets 3 where eager has 2 at the second call). Now the
    write is refused before it runs (``attribute_writes.class_code``)."""
    X, y = labelled(1, 12)
    run_twins(CountingSets, "fit", [(X, y), (X[:7], y[:7]), (X, y)])
