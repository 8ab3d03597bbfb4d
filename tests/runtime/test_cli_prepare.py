"""``tracejit cache prepare``: the per-machine objects built ahead of time, so that a first
call with that cache compiles its own program and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tracejit.codegen import gemm
from tracejit.runtime import cache_key
from tracejit.runtime.cache import DiskCache
from tracejit.runtime.cli import main

# A fresh process: one float32 product (it calls the own GEMM where the host has one), its
# LLVM compiles counted.
CHILD = textwrap.dedent("""
    import json
    import numpy as np
    from tracejit import jit
    from tracejit.codegen import llvm

    compiled = []
    original = llvm.compile_module

    def counting(text, *args, **kwargs):
        compiled.append(text.splitlines()[0])
        return original(text, *args, **kwargs)

    llvm.compile_module = counting
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 5), np.float32)
    function = jit(lambda a, b: np.maximum(a @ b, 1.0))
    first, second = function(a, b), function(a, b)
    assert np.array_equal(first, np.maximum(a @ b, 1.0)), first
    assert np.array_equal(second, first), second
    print(json.dumps(dict(compiles=len(compiled),
                          compiled_calls=function.stats()["compiled_calls"])))
""")


def _first_call_compiles(cache_dir):
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache_dir))
    environment.pop("TRACEJIT_DISABLE", None)
    completed = subprocess.run([sys.executable, "-c", CHILD], env=environment,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_prepare_builds_what_a_first_call_would(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cache_key, "_own_code", [])  # this process hashes it again
    monkeypatch.setattr(cache_key, "_SETTLE_NS", 0)  # and stores it, even mid-edit
    assert main(["cache", "prepare", "--cache-dir", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    labels = [row["object"] for row in report["objects"]]
    assert labels[0] == "thread pool runtime"
    assert len(labels) == (4 if gemm.supported() else 2)
    assert all(row["bytes"] > 0 for row in report["objects"])
    objects = sorted(name for name in os.listdir(tmp_path / "v1") if name.endswith(".o"))
    assert len(objects) == len(labels)
    # tracejit's own-code digest too: a first call reads it, it does not hash the files
    hashed = cache_key._own_code[0]
    monkeypatch.setattr(cache_key, "_own_code", [])
    monkeypatch.setattr(cache_key, "_hashed_digest", None)  # calling it would raise
    assert cache_key.tracejit_code_digest(DiskCache(tmp_path)) == hashed

    # the child compiles its program only: the pool's runtime and the GEMM come from disk
    assert _first_call_compiles(tmp_path) == dict(compiles=1, compiled_calls=1)

    # prepared again: the objects are found, none is rebuilt
    assert main(["cache", "prepare", "--cache-dir", str(tmp_path)]) == 0
    assert sorted(name for name in os.listdir(tmp_path / "v1")
                  if name.endswith(".o")) == objects


def test_without_prepare_the_first_call_builds_them(tmp_path):
    # the comparison that makes the test above mean something
    counts = _first_call_compiles(tmp_path)
    assert counts["compiles"] == (4 if gemm.supported() else 3)
    assert counts["compiled_calls"] == 1
