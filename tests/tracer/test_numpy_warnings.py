"""NumPy's floating-point warnings in a traced call come from the user's line, with
NumPy's message, and ``np.errstate`` settings are honoured as in the eager run."""

import warnings

import numpy as np
import pytest

import tracejit


def _log_ratio(x):
    y = np.log(x)
    return y / x


def _caught(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [(str(item.message), item.filename, item.lineno) for item in caught]


def test_a_traced_call_warns_as_eager_does_at_the_users_line():
    x = np.array([0.0, 1.0, -1.0])
    expected, eager_warnings = _caught(_log_ratio, x)
    jitted = tracejit.jit(_log_ratio, cache=False)
    result, traced_warnings = _caught(jitted, x)
    np.testing.assert_array_equal(result, expected)
    assert traced_warnings == eager_warnings
    assert eager_warnings and eager_warnings[0][1] == __file__


def test_overflow_in_a_reduction_names_reduce():
    def total(x):
        return (x * 2).sum()

    x = np.full(3, 1e308)
    _, eager_warnings = _caught(total, x)
    _, traced_warnings = _caught(tracejit.jit(total, cache=False), x)
    assert [message for message, _, _ in traced_warnings] == [
        message for message, _, _ in eager_warnings]


def test_errstate_raise_raises_in_the_traced_call_and_ignore_is_silent():
    x = np.array([0.0, 2.0])
    jitted = tracejit.jit(_log_ratio, cache=False)
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError):
            _log_ratio(x)
        with pytest.raises(FloatingPointError):
            jitted(x)
    with np.errstate(all="ignore"):
        _, traced_warnings = _caught(tracejit.jit(_log_ratio, cache=False), x)
    assert traced_warnings == []


def test_the_users_own_callback_is_kept():
    seen = []
    x = np.array([0.0, 2.0])
    with np.errstate(divide="call", call=lambda error, flag: seen.append(error)):
        tracejit.jit(_log_ratio, cache=False)(x)
    assert "divide by zero" in seen


def test_a_log_mode_keeps_the_users_log_object():
    class Log:
        def __init__(self):
            self.lines = []

        def write(self, text):
            self.lines.append(text)

    log = Log()
    x = np.array([0.0, 2.0])
    jitted = tracejit.jit(_log_ratio, cache=False)
    with np.errstate(divide="log", call=log):
        for _ in range(2):
            jitted(x)
    assert any("divide by zero" in line for line in log.lines)
    assert jitted.stats()["compiled_calls"] == 1, jitted.stats()


def test_warnings_as_errors_raise_as_eager_and_later_calls_compile():
    jitted = tracejit.jit(_log_ratio, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning):
            _log_ratio(np.array([0.0, 2.0]))
        with pytest.raises(RuntimeWarning):
            jitted(np.array([0.0, 2.0]))
        for _ in range(2):
            np.testing.assert_array_equal(jitted(np.array([1.0, 2.0])),
                                          _log_ratio(np.array([1.0, 2.0])))
    stats = jitted.stats()
    assert stats["compiled_calls"] == 1 and "internal error" not in stats["eager_calls"], stats
