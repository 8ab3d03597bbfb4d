"""Adversarial real-model tests, round 23b: public NumPy model code not tried before, in
its own idioms, run eagerly and through ``jit`` on copies of the same arguments.

Findings, fixed (each test fails before its fix). A wrong result: a callback passed in
(SkalskiP's ``train(..., callback=...)``, a logger's bound method) that appends to a list
reached by a key it holds in a variable (``self.history[self.key].append(v)``, ``seen[side]
.append(v)`` with ``side`` a closure cell) or to its own default list left the traced value
in the caller's list on the traced call and skipped the append on compiled calls. The
bound ``append`` of an outside list is now checked where it is called
(``frontend.Hooks.call``), and the up-front scan reads the globals, cells and defaults of
functions and bound methods passed in (``implicit._scan``): such calls run eagerly.
"""

import numpy as np
from real_model_checks import assert_same, jitted


# --- callbacks appending through a key the front end cannot name --------------------------
class HistoryLogger:
    """A logger object whose method appends under a key it keeps (``self.key``)."""

    def __init__(self):
        self.history, self.key = {"loss": []}, "loss"

    def log(self, i, value):
        self.history[self.key].append(value * 1)


HISTORY = {"loss": []}


def history_callback(key):
    """A callback made by a factory: ``key`` is a closure cell."""
    return lambda i, value: HISTORY[key].append(value)


def report_through(w, callback):
    callback(0, w * 2)
    return w + 1


def test_a_callback_appending_under_a_kept_key_runs_eagerly_not_leaking_tracers():
    """Before the fix the traced value went into the caller's list (a ``Tracer`` object
    there after the first call) and compiled calls skipped the append: a list reached by
    a key held in a variable (``self.history[self.key]``, ``HISTORY[key]`` with ``key`` a
    closure cell) met no hook that saw the call as a mutation, nor did a lambda's default
    list (``lambda i, v, log=seen: log.append(v)``: taken for a list the call made). Now
    the bound ``append`` of an outside list is checked where it is called, and the up-front
    scan reads the globals, cells and defaults of functions passed in: the call runs
    eagerly."""
    f = jitted(report_through)
    for _ in range(3):
        eager_logger, jit_logger = HistoryLogger(), HistoryLogger()
        w = np.arange(3.0)
        assert_same(f(w, jit_logger.log), report_through(w, eager_logger.log))
        assert_same(jit_logger.history, eager_logger.history, where="history")
    for _ in range(3):
        HISTORY["loss"].clear()
        want = report_through(np.arange(3.0), history_callback("loss"))
        eager_history = list(HISTORY["loss"])
        HISTORY["loss"].clear()
        got = f(np.arange(3.0), history_callback("loss"))
        assert_same(got, want)
        assert_same(HISTORY["loss"], eager_history, where="HISTORY")
    for _ in range(3):
        eager_seen, jit_seen = [], []
        want = report_through(np.arange(3.0), lambda i, v, log=eager_seen: log.append(v))
        got = f(np.arange(3.0), lambda i, v, log=jit_seen: log.append(v))
        assert_same(got, want)
        assert_same(jit_seen, eager_seen, where="default list")
