"""On a Python newer than the one tracejit's suite passes on, jit functions run eagerly
(eager NumPy is never wrong) unless TRACEJIT_UNVALIDATED_PYTHON=1."""

import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.runtime import config


@pytest.fixture
def newer_python(monkeypatch):
    monkeypatch.setattr(config, "VALIDATED_PYTHON", (3, 9))
    monkeypatch.setattr(config, "_warned_python", [])
    monkeypatch.delenv("TRACEJIT_UNVALIDATED_PYTHON", raising=False)


def test_an_unvalidated_python_runs_eagerly_with_one_warning(newer_python):
    with pytest.warns(RuntimeWarning, match="not yet on 3"):
        f = tj.jit(lambda x: x * 2.0, cache="memory")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        g = tj.jit(lambda x: x + 1.0, cache="memory")
        for x in (np.arange(3.0), np.arange(5.0)):
            np.testing.assert_array_equal(f(x), x * 2.0)
            np.testing.assert_array_equal(g(x), x + 1.0)
    stats = f.stats()
    assert stats["compiled_calls"] == 0 and stats["compiles"] == 0
    assert "TRACEJIT_UNVALIDATED_PYTHON" in next(iter(stats["eager_calls"]))


def test_the_user_may_compile_anyway(newer_python, monkeypatch):
    monkeypatch.setenv("TRACEJIT_UNVALIDATED_PYTHON", "1")
    f = tj.jit(lambda x: x * 2.0, cache="memory")
    for x in (np.arange(3.0), np.arange(3.0), np.arange(3.0)):
        np.testing.assert_array_equal(f(x), x * 2.0)
    assert f.stats()["compiled_calls"] >= 1


def test_this_python_compiles():
    assert config.unvalidated_python({}) is None
