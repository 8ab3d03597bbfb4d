"""jit(compile="background"): no call waits for LLVM, and every result equals eager's.

A fake slow compile (``codegen.compile`` held on an event the test controls) proves that
no call blocks on it: while it is held, calls return at once with eager results; once it
is released, calls run native code. The disk cache gets the entry under the key of the
call that was traced, and interpreter exit neither hangs on queued compiles nor leaves
half-written entries.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tracejit
from tracejit import jit, tensor
from tracejit.codegen import llvm
from tracejit.runtime import background
from tracejit.runtime.config import OptionError, Options
from tracejit.tracer.errors import TracejitError

HOLD_LIMIT = 60  # seconds a held compile waits for release before failing the test


_holds = []  # every HeldCompile of the running test: released at its end, pass or fail


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    yield
    while _holds:
        _holds.pop().release_event.set()  # a failed test must not leave the thread waiting
    assert background.wait_idle(timeout=HOLD_LIMIT), "a background compile never finished"


class HeldCompile:
    """``codegen.compile`` that waits until ``release()``; counts compiles started."""

    def __init__(self, monkeypatch):
        self.real = tracejit.codegen.compile
        self.release_event = threading.Event()
        self.started = 0
        monkeypatch.setattr(tracejit.codegen, "compile", self)
        _holds.append(self)

    def __call__(self, *args, **kwargs):
        self.started += 1
        if not self.release_event.wait(HOLD_LIMIT):
            raise AssertionError("the held compile was never released")
        return self.real(*args, **kwargs)

    def wait_started(self, count):
        """Wait (a little: the thread may not have run yet) until ``count`` compiles have
        started, then a moment more so that a surplus one would show."""
        deadline = time.monotonic() + HOLD_LIMIT
        while self.started < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        return self.started

    def release(self):
        self.release_event.set()
        assert background.wait_idle(timeout=HOLD_LIMIT)


def branchy(x, w):
    if x.sum() > 0:
        return x @ w * 2.0 + 1.0
    return x @ w - 3.0


def timed(call):
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def test_calls_never_wait_for_a_held_compile_and_equal_eager(monkeypatch):
    held = HeldCompile(monkeypatch)
    jitted = jit(compile="background")(branchy)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3))
    calls = [np.abs(rng.standard_normal((5, 8))) for _ in range(6)]
    for x in calls:  # the compile is held the whole time: a call waiting on it would hang
        result, seconds = timed(lambda: jitted(x, w))  # noqa: B023 - called at once
        np.testing.assert_array_equal(result, branchy(x, w))
        assert seconds < 5, f"a call took {seconds:.1f} s while the compile was held"
    assert held.wait_started(1) == 1  # one variant queued, not one per call
    stats = jitted.stats()
    # The first call's trace decided on x.sum(), which may not be eager's decision: the
    # call ran eagerly too, as every call does while the compile is held.
    assert stats["traced_calls"] == 0 and stats["compiled_calls"] == 0
    assert stats["eager_calls"] == {"compiling in the background": len(calls)}
    assert stats["variants"] == 0

    held.release()
    for x in calls:
        np.testing.assert_allclose(jitted(x, w), branchy(x, w), rtol=1e-12, atol=1e-12)
    stats = jitted.stats()
    assert stats["compiled_calls"] == len(calls) and stats["compiles"] == 1
    assert stats["variants"] == 1


def test_a_hot_side_exit_grows_its_path_in_the_background(monkeypatch):
    jitted = jit(compile="background", hot_exit=2)(branchy)
    w = np.ones((4, 2))
    positive, negative = np.ones((3, 4)), -np.ones((3, 4))
    jitted(positive, w)
    assert background.wait_idle(timeout=HOLD_LIMIT)
    held = HeldCompile(monkeypatch)
    for _ in range(5):  # exit, hot exit (traced, queued), then eager while it compiles
        np.testing.assert_array_equal(jitted(negative, w), branchy(negative, w))
    assert held.wait_started(1) == 1 and jitted.stats()["paths"] == 1
    held.release()
    np.testing.assert_allclose(jitted(negative, w), branchy(negative, w), rtol=1e-12)
    np.testing.assert_allclose(jitted(positive, w), branchy(positive, w), rtol=1e-12)
    stats = jitted.stats()
    assert stats["paths"] == 2 and stats["compiles"] == 2
    assert stats["compiled_calls"] == 2


def test_the_entry_is_filed_under_the_key_of_the_traced_call(monkeypatch):
    """The second call makes the dim dynamic before the first compile finishes: the first
    entry must still be filed as the exact-shape variant it is."""
    held = HeldCompile(monkeypatch)
    jitted = jit(compile="background")(branchy)
    w = np.ones((4, 2))
    first, second = np.ones((300, 4)), np.ones((100, 4))
    jitted(first, w)
    jitted(second, w)  # a second size: the dim turns dynamic, another variant is traced
    held.release()
    assert jitted.stats()["variants"] == 2

    fresh = jit(compile="background")(branchy)  # a new process's view: empty memory
    np.testing.assert_allclose(fresh(first, w), branchy(first, w), rtol=1e-12)
    stats = fresh.stats()
    assert stats["disk_hits"] == 1 and stats["compiled_calls"] == 1 and stats["compiles"] == 0


def test_a_warm_start_does_not_wait_for_a_compile_in_progress():
    w = np.ones((4, 2))
    jit(branchy)(np.ones((3, 4)), w)  # fills the disk cache
    fresh = jit(compile="background")(branchy)
    with llvm._lock:  # as if LLVM were optimizing another module on the compile thread
        done = []
        caller = threading.Thread(target=lambda: done.append(fresh(np.ones((3, 4)), w)))
        caller.start()
        caller.join(timeout=30)
        assert done, "loading object code from disk waited for the LLVM compile lock"
    assert fresh.stats()["disk_hits"] == 1


def test_tensors_that_require_grad_get_eager_gradients_until_native(monkeypatch):
    def loss(x, w):
        return ((x @ w) ** 2).sum()

    held = HeldCompile(monkeypatch)
    jitted = jit(compile="background")(loss)
    values, weights = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    expected_grad = 2 * values.T @ (values @ weights)
    for _ in range(2):
        w = tensor(weights, requires_grad=True)
        out = jitted(tensor(values), w)
        out.backward()
        np.testing.assert_allclose(w.grad.data, expected_grad)
    held.release()
    w = tensor(weights, requires_grad=True)
    out = jitted(tensor(values), w)
    out.backward()
    np.testing.assert_allclose(w.grad.data, expected_grad, rtol=1e-12)
    assert jitted.stats()["compiled_calls"] == 1


def test_a_failed_background_compile_is_raised_at_the_next_call_with_fallback_raise(
        monkeypatch):
    def broken(*args, **kwargs):
        raise TracejitError("the compiler refused this graph")

    monkeypatch.setattr(tracejit.codegen, "compile", broken)
    jitted = jit(compile="background", fallback="raise")(branchy)
    x, w = np.ones((3, 4)), np.ones((4, 2))
    np.testing.assert_array_equal(jitted(x, w), branchy(x, w))  # the trace's result
    assert background.wait_idle(timeout=HOLD_LIMIT)
    with pytest.raises(TracejitError, match="refused"):
        jitted(x, w)


def test_a_compile_failure_runs_eagerly_with_its_reason(monkeypatch):
    def broken(*args, **kwargs):
        raise TracejitError("the compiler refused this graph")

    monkeypatch.setattr(tracejit.codegen, "compile", broken)
    jitted = jit(compile="background")(branchy)
    x, w = np.ones((3, 4)), np.ones((4, 2))
    jitted(x, w)
    assert background.wait_idle(timeout=HOLD_LIMIT)
    np.testing.assert_array_equal(jitted(x, w), branchy(x, w))
    assert "not compiled" in jitted.stats()["eager_calls"]
    assert "refused" in jitted.explain()


def test_reset_drops_a_compile_in_flight(monkeypatch):
    held = HeldCompile(monkeypatch)
    jitted = jit(compile="background")(branchy)
    x, w = np.ones((3, 4)), np.ones((4, 2))
    jitted(x, w)
    jitted.reset()
    held.release()
    assert jitted.stats()["variants"] == 0
    jitted(x, w)  # traced afresh
    assert background.wait_idle(timeout=HOLD_LIMIT)
    assert jitted.stats()["variants"] == 1


def test_a_variant_compiling_in_the_background_counts_toward_max_variants(monkeypatch):
    held = HeldCompile(monkeypatch)
    jitted = jit(compile="background", dynamic=False, max_variants=1)(branchy)
    w = np.ones((4, 2))
    small, large = np.ones((3, 4)), np.ones((5, 4))
    with pytest.warns(RuntimeWarning, match="max_variants=1"):
        for x in (small, large, large):
            np.testing.assert_array_equal(jitted(x, w), branchy(x, w))
    assert held.wait_started(1) == 1  # the second shape was not traced and queued
    held.release()
    assert jitted.stats()["variants"] == 1
    # (the first call's trace decided on x.sum(): that call ran eagerly too)
    assert jitted.stats()["eager_calls"] == {"variant limit": 2,
                                             "compiling in the background": 1}


def test_lower_waits_for_the_background_compile():
    jitted = jit(compile="background")(branchy)
    lowered = jitted.lower(np.ones((3, 4)), np.ones((4, 2)))
    assert len(lowered.kernels) >= 1


def test_the_option_and_its_environment_default():
    assert Options.build(compile="background").compile == "background"
    assert Options.build(environ={"TRACEJIT_COMPILE": "background"}).compile == "background"
    assert Options.build(environ={}).compile == "auto"
    assert "compile" not in Options.build(compile="background").key_fields()
    with pytest.raises(OptionError, match="'sync' or 'background'"):
        jit(compile="later")


EXIT_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import tracejit
    from tracejit import jit

    real = tracejit.codegen.compile
    def slow(*args, **kwargs):
        with open(os.environ["MARKS"], "a") as marks:
            marks.write("started\\n")
        time.sleep(float(os.environ["DELAY"]))
        return real(*args, **kwargs)
    tracejit.codegen.compile = slow

    def model(x):
        return x * 2.0 + 1.0

    jitted = jit(compile="background")(model)
    for size in (3, 40, 300):  # three variants queued behind one another
        assert (jitted(np.ones(size)) == 3.0).all()
    deadline = time.monotonic() + 60  # exit while the first compile is in progress
    while not os.path.exists(os.environ["MARKS"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    print("main done", flush=True)
""")


@pytest.mark.parametrize("delay", [0.0, 1.5])
def test_interpreter_exit_waits_only_for_the_compile_in_progress(tmp_path, delay):
    marks = tmp_path / "marks"
    cache = tmp_path / "exit-cache"
    env = dict(os.environ, MARKS=str(marks), DELAY=str(delay), TRACEJIT_CACHE_DIR=str(cache))
    env.pop("TRACEJIT_DISABLE", None)
    script = tmp_path / "exit_script.py"  # a file: its variants are written to the cache
    script.write_text(EXIT_SCRIPT)
    start = time.perf_counter()
    completed = subprocess.run([sys.executable, str(script)], env=env,
                               capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    assert completed.returncode == 0, completed.stderr
    assert "main done" in completed.stdout
    assert "Traceback" not in completed.stderr and "Exception" not in completed.stderr
    started = marks.read_text().count("started") if marks.exists() else 0
    if delay:
        assert started == 1, "queued compiles ran at exit instead of being dropped"
        assert seconds < 3 * delay + 20
    listed = subprocess.run([sys.executable, "-m", "tracejit", "cache", "verify"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    files = [name for _, _, names in os.walk(cache) for name in names]
    assert [name for name in files if name.startswith(".tmp-")] == []
    entries = [name for name in files if name.endswith(".tjc")]
    # The compile in progress at exit finished and wrote its entry; the queued ones did not.
    assert len(entries) == 1 if delay else len(entries) >= 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_during_a_compile_leaves_the_child_able_to_compile(monkeypatch):
    """The compile thread holds LLVM's lock while LLVM optimizes; a child forked then (a
    multiprocessing pool on Linux) would inherit the lock taken and hang at its first
    compile. The fork waits for the compile in progress instead."""
    real = tracejit.codegen.compile
    entered, release = threading.Event(), threading.Event()

    def compile_holding_llvm(*args, **kwargs):
        with llvm._lock:  # as the optimizer does, for as long as the test says
            entered.set()
            release.wait(HOLD_LIMIT)
        return real(*args, **kwargs)

    monkeypatch.setattr(tracejit.codegen, "compile", compile_holding_llvm)
    jitted = jit(compile="background", cache=False)(branchy)
    x, w = np.ones((3, 4)), np.ones((4, 2))
    jitted(x, w)
    assert entered.wait(HOLD_LIMIT)
    threading.Timer(0.3, release.set).start()
    pid = os.fork()
    if pid == 0:  # the child: compile something new, and call the parent's function
        status = 1
        try:
            release.set()
            fresh = jit(cache=False)(branchy)
            ok = np.allclose(fresh(-x, w), branchy(-x, w), rtol=1e-12, atol=1e-12)
            ok = ok and np.allclose(jitted(x, w), branchy(x, w), rtol=1e-12, atol=1e-12)
            ok = ok and background.wait_idle(timeout=HOLD_LIMIT)
            ok = ok and fresh.stats()["compiles"] == 1
            status = 0 if ok else 2
        finally:
            os._exit(status)
    deadline = time.monotonic() + HOLD_LIMIT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung at its first compile")
    assert os.waitstatus_to_exitcode(status) == 0
