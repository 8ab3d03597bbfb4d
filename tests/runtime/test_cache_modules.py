"""The disk cache's modules: entries are tracejit's own format, never pickles, and only
``cache_trust`` opens files under the cache (``cache_key`` reads the user's source files to
hash them, nothing else).

The names tests, tools and the command line import from ``tracejit.runtime.cache`` stay
there after the cache was split into ``cache_key`` and ``cache_entries``.
"""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from tracejit.runtime import cache

MODULES = ["tracejit.runtime.cache", "tracejit.runtime.cache_key",
           "tracejit.runtime.cache_entries"]
PICKLERS = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve"}


def _tree(name):
    return ast.parse(inspect.getsource(importlib.import_module(name)))


@pytest.mark.parametrize("name", MODULES)
def test_no_cache_module_imports_a_pickler(name):
    imported = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & PICKLERS


@pytest.mark.parametrize("name", MODULES)
def test_only_the_users_source_is_opened_outside_cache_trust(name):
    opened = [node.lineno for node in ast.walk(_tree(name)) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Name) and node.func.id == "open"]
    expected = 1 if name.endswith("cache_key") else 0  # file_digest: the model's source
    assert len(opened) == expected, (name, opened)


def test_the_names_imported_from_runtime_cache_are_still_there():
    for name in ("DiskCache", "MAGIC", "CorruptEntry", "read_entry", "read_header",
                 "_parse_entry", "_parse_header", "file_digest"):
        assert hasattr(cache, name), name
    from tracejit.runtime import cache_key

    # DiskCache.key is cache_key, with tracejit's code digest kept in the cache root
    assert cache.cache_key is cache_key.cache_key
