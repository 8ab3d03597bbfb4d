"""``return self`` (an estimator's fit) hands back the call's own object: one variant
serves every object of the class."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import tracejit as tj


class Adaline:
    def __init__(self, eta=0.01, n_iter=6):
        self.eta, self.n_iter = eta, n_iter

    def fit(self, X, y):
        self.w_ = np.zeros(1 + X.shape[1])
        self.cost_ = []
        for _ in range(self.n_iter):
            errors = y - (X @ self.w_[1:] + self.w_[0])
            self.w_[1:] += self.eta * X.T @ errors
            self.w_[0] += self.eta * errors.sum()
            self.cost_.append((errors ** 2).sum() / 2.0)
        return self


class Scaler:
    def fit(self, X):
        self.mean_, self.scale_ = X.mean(axis=0), X.std(axis=0) + 1e-12
        return self

    def fit_transform_loss(self, X):
        self.fit(X)
        return self, float(((X - self.mean_) / self.scale_).sum())


class Truthy(Scaler):
    def __bool__(self):  # Python calls it where no hook sees: kept by identity
        return bool(self.mean_.sum() > 0)


def _data(seed, n=17):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)), np.sign(rng.standard_normal(n))


def test_fit_returns_each_call_its_own_estimator():
    fit = tj.jit(Adaline.fit, cache="memory")
    for seed in range(6):
        X, y = _data(seed)
        model, twin = Adaline(), Adaline()
        assert fit(model, X, y) is model
        Adaline.fit(twin, X, y)
        np.testing.assert_allclose(model.w_, twin.w_, rtol=1e-10)
        np.testing.assert_allclose(model.cost_, twin.cost_, rtol=1e-10)
    stats = fit.stats()
    assert stats["compiles"] == 1 and not stats["eager_calls"], fit.explain()


def test_a_tuple_holding_self_and_a_number():
    step = tj.jit(Scaler.fit_transform_loss, cache="memory")
    for seed in range(5):
        X, _ = _data(seed, n=11)
        scaler, twin = Scaler(), Scaler()
        got, loss = step(scaler, X)
        want, want_loss = Scaler.fit_transform_loss(twin, X)
        assert got is scaler and want is twin
        np.testing.assert_allclose(scaler.mean_, twin.mean_, rtol=1e-12)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-9, atol=1e-9)
    assert step.stats()["compiles"] == 1, step.explain()


SCRIPT = textwrap.dedent('''\
    import json

    import numpy as np

    import tracejit as tj


    class Scaler:
        def __init__(self, scale):
            self.scale = np.full(3, scale)

        @tj.jit
        def transform(self, X):  # (attribute writes are kept in memory only)
            return self, X * self.scale


    X = np.arange(12.0).reshape(4, 3)
    scalers = [Scaler(scale) for scale in (1.0, 2.0, 3.0)]
    results = [scaler.transform(X) for scaler in scalers]
    same = [got is scaler for scaler, (got, _) in zip(scalers, results)]
    right = [bool(np.allclose(y, X * scaler.scale)) for scaler, (_, y) in zip(scalers, results)]
    print(json.dumps({"same": same, "right": right, "stats": Scaler.transform.stats()}))
''')


def test_self_returned_from_the_disk_cache_in_a_second_process(tmp_path):
    (tmp_path / "fit_script.py").write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items()
           if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
    env.update(TRACEJIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    runs = [json.loads(subprocess.run(
        [sys.executable, "fit_script.py"], cwd=tmp_path, env=env, capture_output=True,
        text=True, check=True).stdout.splitlines()[-1]) for _ in range(2)]
    for run in runs:
        assert all(run["same"]) and all(run["right"]), run
    assert runs[0]["stats"]["compiles"] == 1, runs[0]
    assert runs[1]["stats"]["compiles"] == 0 and runs[1]["stats"]["disk_hits"] == 1, runs[1]


def test_an_object_python_reads_unseen_keeps_its_identity():
    fit = tj.jit(Truthy.fit, cache="memory")
    for seed in range(3):
        X, _ = _data(seed)
        scaler = Truthy()
        assert fit(scaler, X) is scaler
        np.testing.assert_allclose(scaler.scale_, X.std(axis=0) + 1e-12, rtol=1e-12)
