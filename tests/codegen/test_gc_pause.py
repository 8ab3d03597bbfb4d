"""The cyclic collector is paused while a program compiles, loads from disk and gets its
entry (``codegen/gc_pause.py``), and comes back as the program left it; results are
eager's, cold and from disk."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import tracejit
from tracejit.codegen import gc_pause, llvm, program


def model(x, w):
    return np.tanh(x * w) * 2.0 - x.sum(axis=1, keepdims=True)


def _inputs():
    rng = np.random.default_rng(3)
    return rng.standard_normal((9, 5)).astype(np.float32), rng.standard_normal(
        (1, 5)).astype(np.float32)


@pytest.fixture
def collector_seen(monkeypatch):
    """``gc.isenabled()`` as seen by each LLVM compile of a program (not of the
    per-machine objects, built where they are first needed) and each program link."""
    seen = []
    compile_module, link = llvm.compile_module, program.link

    def watched_compile(ir_text, *args, **kwargs):
        if "_entry_py" in ir_text:
            seen.append(("compile", gc.isenabled()))
        return compile_module(ir_text, *args, **kwargs)

    def watched_link(*args, **kwargs):
        seen.append(("link", gc.isenabled()))
        return link(*args, **kwargs)

    monkeypatch.setattr(llvm, "compile_module", watched_compile)
    monkeypatch.setattr(program, "link", watched_link)
    return seen


def test_compile_and_warm_start_run_without_the_collector_and_match_eager(
        tmp_path, monkeypatch, collector_seen):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    x, w = _inputs()
    expected = model(x, w)
    cold = tracejit.jit(model)
    np.testing.assert_allclose(cold(x, w), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cold(x, w), expected, rtol=1e-5, atol=1e-5)
    assert cold.stats()["compiles"] == 1
    assert collector_seen == [("compile", False), ("link", False)]
    collector_seen.clear()
    warm = tracejit.jit(model)  # a new function object: its first call loads from disk
    np.testing.assert_allclose(warm(x, w), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(warm(x, w), expected, rtol=1e-5, atol=1e-5)
    assert warm.stats()["disk_hits"] == 1 and warm.stats()["compiles"] == 0
    assert collector_seen == [("link", False)]
    assert gc.isenabled()


def test_a_collector_the_program_disabled_stays_disabled():
    gc.disable()
    try:
        with gc_pause.paused():
            with gc_pause.paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with gc_pause.paused():
        with gc_pause.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_another_thread_never_pauses_the_collector():
    seen = []

    def compile_there():
        with gc_pause.paused():
            seen.append(gc.isenabled())

    thread = threading.Thread(target=compile_there)
    thread.start()
    thread.join()
    assert seen == [True] and gc.isenabled()
