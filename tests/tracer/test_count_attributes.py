"""Int attributes counting a loop's trips (``for _ in range(self.n_iter)``, Raschka's
classifiers; ``tracer/count_attributes.py``): once a jit function's traces read the
attribute with a second value, it is a run-time trip count, one program for every count
(before: a compile per value, eager past max_variants). Every use that needs it as a
Python int (a shape, a slice bound, a seed, a loop that unrolls) makes it a setting again.
Compiled against an eager twin object at every call: results, the objects' whole state,
printed text."""

from __future__ import annotations

import numpy as np
import pytest
from state_twins import difference
from test_adversarial_real_models23 import AdalineGD, LogisticRegressionGD

from tracejit import jit

COUNTS = (5, 7, 50, 13, 1000, 3, 211, 0, 1, 2, 13, 50)


def labelled(seed, n, features=3):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, features))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.3 * r.normal(size=n) > 0, 1, -1)
    return X, y


def twins(make, method, calls, bound=True):
    """Jit ``make().method`` (bound, or the class's function called with the object) and
    call it and an eager twin on ``calls``: (setup, args) pairs, setup(obj) changing the
    objects' attributes before the call. Returns the jit function."""
    ours, theirs = make(), make()
    f = jit(getattr(ours, method) if bound else getattr(type(ours), method), cache="memory")
    for index, (setup, args) in enumerate(calls):
        setup(ours)
        setup(theirs)
        got = f(*args) if bound else f(ours, *args)
        want = getattr(theirs, method)(*args)
        found = difference(got, want, "result") or difference(ours, theirs, "state")
        assert found is None, f"call {index}: {found}; {f.stats()}"
    return f


def n_iter(n):
    def setup(model):
        model.n_iter = n
    return setup


@pytest.mark.parametrize("bound", [True, False])
@pytest.mark.parametrize("model", [AdalineGD, LogisticRegressionGD])
def test_the_epoch_count_on_the_object_compiles_once_for_every_count(model, bound):
    X, y = labelled(0, 30)
    if model is LogisticRegressionGD:
        y = (y > 0).astype(np.float64)
    f = twins(lambda: model(n_iter=5), "fit", [(n_iter(n), (X, y)) for n in COUNTS],
              bound=bound)
    stats = f.stats()
    # the first count, then one program for every count >= 3; 0, 1, 2 each their own
    # (before: 10 compiles, one per value)
    assert stats["compiles"] <= 5 and stats["compiled_calls"] >= 6, f.explain()
    assert not stats["eager_calls"], f.explain()
    assert "self.n_iter, a loop's trip count" in f.explain() or not bound


class Counted:
    """A model whose int attributes are read in other ways as well."""

    def __init__(self, n_iter=5, width=3, seed=1):
        self.n_iter, self.width, self.seed = n_iter, width, seed
        self.verbose = False

    def as_shape(self, x):  # n_iter as a length: a setting again (a program per value)
        history = np.zeros(self.n_iter)
        w = np.zeros_like(x)
        for i in range(self.n_iter):
            w = w - 0.1 * (w - x)
            history[i] = w.sum()
        return w, history

    def as_slice(self, x):  # width: a trip count, and a slice bound
        w = np.zeros(x.shape[1])
        for _ in range(self.width):
            w = w + x[:self.width].sum(axis=0)
        return w

    def as_seed(self, x):  # seed: a number RandomState needs as an int
        rgen = np.random.RandomState(self.seed)
        w = rgen.normal(size=x.shape)
        for _ in range(self.n_iter):
            w = 0.5 * (w + x)
        return w

    def offsets(self, x):  # range(1, n + 1) and range(n - 1)
        total = np.zeros_like(x)
        for epoch in range(1, self.n_iter + 1):
            total = total + x / epoch
        for _ in range(self.n_iter - 1):
            total = total * 0.9
        return total

    def unrolled(self, x):  # a carried value whose shape grows: the loop unrolls
        acc = x[:1]
        for _ in range(self.n_iter):
            acc = np.concatenate([acc, x[:1] * 2])
        return acc

    def nested(self, x):
        w = np.zeros(x.shape[1])
        for _ in range(self.n_iter):
            for i in range(self.width):
                w = w + 0.01 * x[i % x.shape[0]]
        return w

    def printing(self, x):
        w = np.zeros_like(x)
        print("epochs", self.n_iter)
        for epoch in range(self.n_iter):
            w = w - 0.1 * (w - x)
            if epoch % 2 == 0:  # (a modulus read from self is left as written)
                print(epoch, self.n_iter - epoch)
        return w

    def flagged(self, x):  # a bool setting changing: guarded by value, as before
        w = np.zeros_like(x)
        for _ in range(self.n_iter):
            w = w + (x if self.verbose else -x)
        return w


def attributes(**values):
    def setup(model):
        for name, value in values.items():
            setattr(model, name, value)
    return setup


@pytest.mark.parametrize("method", ["as_shape", "as_seed", "offsets", "unrolled", "nested"])
def test_counts_needed_as_ints_elsewhere_match_numpy(method):
    x = np.linspace(0.5, 2.0, 12).reshape(4, 3)
    calls = [(attributes(n_iter=n, width=1 + n % 4, seed=n % 3), (x,))
             for n in (5, 9, 4, 6, 3, 2, 1, 0, 8, 9, 5)]
    f = twins(Counted, method, calls)
    # (a count pinned as a setting compiles a program per value: past max_variants eager)
    assert set(f.stats()["eager_calls"]) <= {"variant limit"}, f.explain()


def test_a_count_that_is_a_slice_bound_too_matches_numpy():
    x = np.linspace(0.5, 2.0, 24).reshape(8, 3)
    f = twins(Counted, "as_slice", [(attributes(width=n), (x,)) for n in (3, 5, 7, 4, 8, 3)])
    assert not f.stats()["eager_calls"], f.explain()


def test_a_bool_setting_still_decides_by_value():
    x = np.linspace(0.5, 2.0, 6)
    calls = [(attributes(n_iter=n, verbose=n % 2 == 0), (x,)) for n in (5, 6, 7, 8, 9, 4)]
    f = twins(Counted, "flagged", calls)
    assert not f.stats()["eager_calls"], f.explain()


def test_prints_of_a_count_attribute_show_each_calls_value(capsys):
    x = np.linspace(0.5, 2.0, 6)
    ours, theirs = Counted(), Counted()
    f = jit(ours.printing, cache="memory")
    for n in (5, 8, 11, 6, 4, 12):
        ours.n_iter = theirs.n_iter = n
        got = f(x)
        ours_text = capsys.readouterr().out
        want = theirs.printing(x)
        assert ours_text == capsys.readouterr().out, n
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert f.stats()["compiles"] <= 3, f.explain()


class Branching:
    def __init__(self):
        self.n_iter = 4

    def fit(self, x):
        w = np.zeros_like(x)
        for _ in range(self.n_iter):
            w = w - 0.1 * (w - x)
        if w.sum() > 1.0:  # a side exit, then another path of the count's variant
            return w * 2
        return w - 1


def test_another_path_of_a_counted_variant_reads_the_count_too():
    small, large = np.full(3, 0.1), np.full(3, 2.0)
    calls = [(attributes(n_iter=n), (x,)) for n, x in (
        (4, small), (6, small), (9, small), (7, large), (12, large), (5, small), (30, large))]
    f = twins(Branching, "fit", calls)
    stats = f.stats()
    assert set(stats["eager_calls"]) <= {"side exit"} and stats["compiles"] <= 3, f.explain()
    assert "path [exit at guard" in f.explain() and stats["compiled_calls"] >= 3, f.explain()


TABLE = {5: 1.0, 7: 2.0, 9: 3.0, 11: 4.0}


class Keyed:
    def __init__(self):
        self.n_iter = 5

    def fit(self, x):
        for _ in range(self.n_iter):
            x = x * 0.5 + TABLE[self.n_iter]  # a dict lookup needs the count as an int
        return x


def keyed_by_argument(x, n):
    return x * TABLE[n]


def test_a_count_used_as_a_dict_key_is_a_setting_again():
    # (before the lookup pinned it, every call after the second value ran eagerly,
    # 'a traced value used as a dict key'; an int argument likewise)
    x = np.ones(2)
    f = twins(Keyed, "fit", [(attributes(n_iter=n), (x,)) for n in (5, 7, 9, 11, 7, 5)])
    assert not f.stats()["eager_calls"], f.explain()
    g = jit(keyed_by_argument, cache="memory")
    for n in (5, 7, 9, 11, 7, 5):
        np.testing.assert_array_equal(g(x, n), keyed_by_argument(x, n))
    assert not g.stats()["eager_calls"], g.explain()


class Scaled:
    def __init__(self):
        self.n_iter = 3

    def fit(self, x):
        w = x * self.n_iter  # read at run time once it changed, though no loop counts it
        if w.sum() > 10:  # a side exit: the other path reads it the same way
            return w * 2
        return w - 1


def test_another_path_reads_a_counted_attribute_used_in_arithmetic_at_run_time():
    calls = [(attributes(n_iter=n), (np.full(3, x),)) for n, x in (
        (3, 0.1), (4, 0.1), (5, 0.1), (6, 3.0), (7, 3.0), (8, 0.1), (9, 3.0), (10, 3.0))]
    f = twins(Scaled, "fit", calls)
    stats = f.stats()
    # (before: the exit's path guarded the value, a compile per value after it: 5)
    assert stats["compiles"] <= 3 and set(stats["eager_calls"]) <= {"side exit"}, f.explain()
