"""``cache_key._modules_defined_in`` answers from an index of ``sys.modules`` built once
per state of it: modules imported or removed after it was built are still seen."""

from __future__ import annotations

import importlib
import os
import sys

from tracejit.runtime import cache_key


def test_a_module_imported_after_the_index_is_found_and_a_removed_one_is_not(tmp_path,
                                                                               monkeypatch):
    source = tmp_path / "late_module_for_index.py"
    source.write_text("def helper(x):\n    return x + 1\n")
    path = os.path.realpath(source)
    assert cache_key._modules_defined_in(path) == []  # builds the index without it
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("late_module_for_index")
    try:
        assert cache_key._modules_defined_in(path) == ["late_module_for_index"]
        dependency = cache_key.dependency_of("helper", module.__file__)
        assert dependency["module"] == "late_module_for_index"
        assert dependency["qualname"] == "helper"
    finally:
        del sys.modules["late_module_for_index"]
    assert cache_key._modules_defined_in(path) == []


def test_the_index_finds_the_same_modules_as_a_scan():
    for name in ("tracejit.runtime.cache_key", "numpy", "os"):
        path = os.path.realpath(sys.modules[name].__file__)
        scanned = [other for other, module in list(sys.modules.items())
                   if isinstance(getattr(module, "__file__", None), str)
                   and os.path.realpath(module.__file__) == path]
        assert sorted(cache_key._modules_defined_in(path)) == sorted(scanned)
