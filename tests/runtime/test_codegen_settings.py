"""Codegen's process-wide settings come from the runtime's edge, never from codegen itself.

``runtime/config.py`` reads ``TRACEJIT_NUM_THREADS``, ``TRACEJIT_GEMM`` and
``TRACEJIT_GEMM_ISA`` and hands them to codegen (``configure_codegen``); the pool's and the
GEMM's object code goes to the cache a jit function chose (``open_disk_cache``), not to
whichever ``DiskCache`` was made last.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen import blas, gemm, parallel
from tracejit.runtime.cache import DiskCache
from tracejit.runtime.config import Options, configure_codegen

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def settings(monkeypatch):
    """Codegen's settings as they were, put back after the test."""
    for module, name in ((parallel, "_thread_setting"), (parallel, "_object_store"),
                         (blas, "_configured"), (gemm, "_isa_setting")):
        monkeypatch.setattr(module, name, getattr(module, name))


def _reads_environment(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and (
                isinstance(node.value, ast.Name) and node.value.id == "os"):
            return node.lineno
    return None


@pytest.mark.parametrize("folder", ["codegen", "tracer"])
def test_no_module_under_the_runtime_reads_the_environment(folder):
    readers = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        line = _reads_environment(ast.parse(path.read_text(), str(path)))
        if line is not None:
            readers[str(path.relative_to(ROOT))] = line
    assert readers == {}, f"these read os.environ themselves; pass an Options: {readers}"


def test_the_edge_hands_codegen_the_thread_count(settings):
    configure_codegen({"TRACEJIT_NUM_THREADS": " 3 "})
    assert parallel.thread_count() == 3
    configure_codegen({"TRACEJIT_NUM_THREADS": "0"})  # as before: at least one thread
    assert parallel.thread_count() == 1
    configure_codegen({"TRACEJIT_NUM_THREADS": "many"})
    with pytest.raises(ValueError, match="TRACEJIT_NUM_THREADS must be a positive integer"):
        parallel.thread_count()  # refused when a pool would start: compiling fails, eager runs


def test_codegen_alone_ignores_the_environment(settings, monkeypatch):
    parallel.set_thread_count(None)
    default = parallel.thread_count()
    monkeypatch.setenv("TRACEJIT_NUM_THREADS", str(default + 5))
    assert parallel.thread_count() == default
    Options.build()  # a jit function's options: the edge reads the variable
    assert parallel.thread_count() == default + 5


def test_the_edge_hands_codegen_the_gemm_settings(settings):
    configure_codegen({"TRACEJIT_GEMM": " Own ", "TRACEJIT_GEMM_ISA": "AVX2"})
    assert blas._configured == "own" and gemm._isa_setting == "avx2"
    configure_codegen({})
    assert blas._configured is None and gemm._isa_setting is None


def test_making_a_disk_cache_leaves_codegen_alone(settings, tmp_path):
    before = parallel.object_store()
    DiskCache(str(tmp_path / "listed"))  # what `tracejit cache list` and tests make
    assert parallel.object_store() == before


def test_a_jit_function_keeps_codegen_objects_in_its_cache(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "chosen"))
    jitted = jit(lambda x: x * 2.0 + 1.0, cache=True)
    load, save = parallel.object_store()
    assert load.__self__ is jitted._cache and save.__self__ is jitted._cache
    save("0" * 32, b"object code")
    assert load("0" * 32) == b"object code"
    assert list((tmp_path / "chosen" / "v1").glob("runtime-*.o"))
    np.testing.assert_array_equal(jitted(np.arange(3.0)), np.arange(3.0) * 2.0 + 1.0)
