"""A trace stopped by an error raised inside tracejit: the eager run tells whose it was.

Our stand-ins for NumPy raise NumPy's errors (``np.stack([])``: "need at least one array
to stack"), from tracejit's files. When the eager run raises too, the error was the
function's: it reaches the caller, nothing is logged as internal and a later call still
compiles. When the eager run returns, the trace failed where NumPy does not: our bug,
logged, and that signature runs eagerly from then on (from the second such trace: the
first may have taken, at a threshold, a branch eager does not; test_first_call_decisions).
"""

import logging

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer import numpy_api


def stack_rows(x, n):
    return np.stack([x[i] for i in range(n)])


def test_numpys_error_from_our_stand_in_is_the_functions(caplog):
    jitted = tj.jit(stack_rows, cache="memory")
    caplog.set_level(logging.INFO, logger="tracejit.recompiles")  # (after decorating)
    x = np.arange(6.0).reshape(3, 2)
    with pytest.raises(ValueError, match="need at least one array to stack"):
        jitted(x, 0)
    assert "so did the eager run" in caplog.text
    assert "internal error" not in caplog.text
    np.testing.assert_array_equal(jitted(x, 2), stack_rows(x, 2))
    np.testing.assert_array_equal(jitted(x, 2), stack_rows(x, 2))
    stats = jitted.stats()
    assert stats["raised_calls"] == 1 and stats["compiles"] == 1, stats
    assert stats["compiled_calls"] >= 1 and not stats["eager_calls"], stats


def test_an_error_only_the_trace_raises_is_ours_and_the_call_runs_eagerly(
        monkeypatch, caplog):
    # A C function raising from inside the front end: a bug of ours (a function defined
    # here would count as the user's code, the innermost frame outside libraries).
    broken = {}.__getitem__  # TypeError: unhashable list, or keywords refused
    monkeypatch.setattr(numpy_api, "stack", broken)
    monkeypatch.setitem(numpy_api.FUNCTIONS, np.stack, broken)
    jitted = tj.jit(stack_rows, cache="memory")
    caplog.set_level(logging.WARNING, logger="tracejit.recompiles")  # (after decorating)
    x = np.arange(6.0).reshape(3, 2)
    for _ in range(2):
        np.testing.assert_array_equal(jitted(x, 2), stack_rows(x, 2))
    assert "internal error while tracing" in caplog.text
    stats = jitted.stats()
    assert stats["compiles"] == 0 and stats["raised_calls"] == 0, stats
    assert sum(stats["eager_calls"].values()) == 2, stats
    assert "TypeError" in next(iter(stats["eager_reasons"].values()))


def noisy(x, keep):
    return x * np.random.normal(x, keep)  # a parameter computed in the function: refused


def test_a_refusal_at_every_new_shape_warns_once(caplog):
    """A function drawing random numbers around its input is refused at each new length
    (each is traced anew): one warning, not one per length, and every call is eager's,
    draw for draw."""
    jitted = tj.jit(noisy, cache="memory")
    caplog.set_level(logging.INFO, logger="tracejit.recompiles")
    for n in (4, 5, 6, 7):
        np.random.seed(n)
        want = noisy(np.ones(n), 0.5)
        np.random.seed(n)
        np.testing.assert_array_equal(jitted(np.ones(n), 0.5), want)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "draws random numbers" in warnings[0].getMessage()
    assert jitted.stats()["eager_calls"] == {"untraceable": 4}
