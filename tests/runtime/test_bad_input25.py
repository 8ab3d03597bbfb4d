"""Bad input, round 25 (helper-202): errors the user's code raises on its own terms.

Probed and found right (no change): exceptions the user's code raises inside loops
(ValueError from a test on data, ZeroDivisionError, IndexError past the end, assert with a
message, matmul shape mismatches after a few trips) raise eager's type and message, and the
objects, lists and arrays the loop wrote before the raise are left as eager leaves them;
``try``/``except IndexError`` around an index the trace would take runs eagerly with a
reason; ``try``/``except KeyError`` around a ``raise`` on data compiles with a side exit.

Found: ``np.errstate(divide="raise")`` (or ``"call"``, ``"log"``) entered inside the jitted
function was honoured by the traced call only: compiled calls returned ``inf``/``nan``
where NumPy raises FloatingPointError, and a ``try: ... except FloatingPointError:`` in the
function took the other branch (a wrong value, silently). And a KeyboardInterrupt ending a
compile on the background compile thread left the function eager at every later call.
A record logged through a logger a call returns (``logging.getLogger(name).warning(...)``,
``logging.warning(...)``) was written by the traced call only.
Probed and right: a full (ENOSPC) or read-only (EROFS) cache directory warns once and
compiles in memory; a populated read-only cache still loads.
"""

import logging
import warnings

import numpy as np
import pytest

import tracejit as tj


def guarded_reciprocal(x):
    with np.errstate(divide="raise"):
        try:
            y = 1.0 / x
        except FloatingPointError:
            y = x
    return y


def strict_sqrt(x):
    with np.errstate(invalid="raise"):
        return np.sqrt(x) * 2


def counted_logs(x):
    calls = []
    with np.errstate(divide="call", call=lambda kind, flag: calls.append(kind)):
        y = np.log(x)
    return y, len(calls)


def quiet_log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


def _outcome(function, x):
    try:
        return "returned", function(x)
    except FloatingPointError as error:
        return "raised", str(error)


@pytest.mark.parametrize("function, bad", [
    (guarded_reciprocal, np.array([1.0, 0.0, 2.0])),
    (strict_sqrt, np.array([1.0, -1.0, 4.0])),
    (counted_logs, np.array([1.0, 0.0, 3.0])),
], ids=["try_except", "raise", "call"])
def test_errstate_set_inside_the_function_is_honoured_at_every_call(function, bad):
    compiled = tj.jit(function, cache="memory")
    good = np.array([1.0, 2.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in [good, good * 2, bad, good, bad, good * 3]:
            want, got = _outcome(function, x.copy()), _outcome(compiled, x.copy())
            assert want[0] == got[0], (x, want, got)
            if want[0] == "raised":
                assert got[1] == want[1]
                continue
            for want_leaf, got_leaf in zip(np.atleast_1d(want[1]) if not isinstance(
                    want[1], tuple) else want[1], np.atleast_1d(got[1]) if not isinstance(
                    got[1], tuple) else got[1]):
                np.testing.assert_array_equal(got_leaf, want_leaf)
    reason = compiled.explain()
    assert "set inside the function" in reason and function.__code__.co_filename in reason


def test_errstate_ignore_inside_the_function_still_compiles():
    compiled = tj.jit(quiet_log, cache="memory")
    for x in [np.array([1.0, 2.0]), np.array([0.0, 3.0]), np.array([2.0, 0.0])]:
        np.testing.assert_allclose(compiled(x), quiet_log(x), rtol=1e-15)
    assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()


def test_the_callers_raise_mode_does_not_refuse_the_trace():
    """(docs/sharp_bits.md: the caller's np.errstate is honoured by traced calls only.)"""
    compiled = tj.jit(lambda x: np.sqrt(x) + 1, cache="memory")
    with np.errstate(all="raise"):
        for x in [np.array([1.0, 4.0]), np.array([9.0, 16.0]), np.array([4.0, 1.0])]:
            np.testing.assert_allclose(compiled(x), np.sqrt(x) + 1, rtol=1e-15)
    assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()


# --- an interrupted background compile ------------------------------------------------------------
def interrupted_model(x):
    return np.tanh(x * 2.0).sum(axis=0) + x[0]


def test_an_interrupted_background_compile_is_queued_again(monkeypatch):
    """A KeyboardInterrupt (any BaseException) ending a compile on the compile thread left
    its pending variant in place: every later call it takes ran eagerly ('compiling in
    the background') and the function never compiled."""
    import threading

    from tracejit.codegen import llvm
    from tracejit.runtime import background

    compile_part, interrupts = llvm._compile_part, []

    def interrupted(*arguments):
        if not interrupts and threading.current_thread().name == "tracejit-compile":
            interrupts.append(True)
            raise KeyboardInterrupt
        return compile_part(*arguments)

    monkeypatch.setattr(llvm, "_compile_part", interrupted)
    compiled = tj.jit(interrupted_model, cache="memory", compile="background")
    x = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
    for _ in range(4):
        np.testing.assert_allclose(compiled(x), interrupted_model(x), rtol=1e-12)
        assert background.wait_idle(60)
    assert interrupts
    assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()


# --- logging inside the function ----------------------------------------------------------------
def logs_when_positive(x):
    if x.sum() > 0:
        logging.getLogger("tracejit_test_user").warning("positive %d", 1)
    return x * 2


def logs_at_root(x):
    logging.warning("root step")
    return x * 2


def logs_below_its_level(x):
    logging.getLogger("tracejit_test_user").debug("step")
    return x * 2


def logs_by_keyword_level(x):  # Logger.log's level by keyword (review 25b)
    logging.getLogger("tracejit_test_user").log(level=logging.WARNING, msg="step")
    return x * 2


@pytest.mark.parametrize("function", [logs_when_positive, logs_at_root, logs_by_keyword_level])
def test_a_record_logged_inside_the_function_is_logged_at_every_call(function, caplog):
    """A record from a logger reached by a call (``logging.getLogger(name).warning``,
    ``logging.warning``) was written by the traced call only: compiled calls skipped it."""
    compiled = tj.jit(function, cache="memory")
    for sign in [1, 1, -1, 2, 3]:
        x = np.ones(2) * sign
        caplog.clear()
        function(x)
        eager = [record.getMessage() for record in caplog.records]
        caplog.clear()
        np.testing.assert_array_equal(compiled(x), x * 2)
        got = [record.getMessage() for record in caplog.records
               if not record.name.startswith("tracejit.")]
        assert got == eager, (sign, got, eager)
    assert "logging inside a compiled function" in compiled.explain()


def test_a_logging_call_below_its_level_still_compiles():
    compiled = tj.jit(logs_below_its_level, cache="memory")
    for sign in [1, 2, 3]:
        np.testing.assert_array_equal(compiled(np.ones(2) * sign), np.ones(2) * sign * 2)
    assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()
