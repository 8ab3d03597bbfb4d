"""The per-machine objects (pool runtime, guard check, GEMM) are kept in the object store
under a key of their generating code and the host. With the runtime's store, that code
is named by tracejit's own-code digest (``set_object_store``'s ``code``), which covers
every generator file: a warm start does not read and hash the generators again, and
other code is another key."""

from __future__ import annotations

import pytest

from tracejit.codegen import parallel


@pytest.fixture
def store(monkeypatch):
    """A store in a dict, installed for the test (codegen's own put back after it)."""
    monkeypatch.setattr(parallel, "_object_store", None)
    monkeypatch.setattr(parallel, "_object_code", None)
    kept = {}
    return kept, kept.get, kept.__setitem__


def test_the_code_digest_names_the_generators(store, tmp_path):
    kept, load, save = store
    version = ["a" * 64]
    parallel.set_object_store(load, save, lambda: version[0])
    missing = [tmp_path / "not_read.py"]  # reading it would raise
    builds = []

    def build():
        builds.append(len(builds))
        return b"object %d" % len(builds)

    assert parallel.stored_object("thing", missing, build) == b"object 1"
    assert parallel.stored_object("thing", missing, build) == b"object 1"  # kept
    assert parallel.stored_object("other", missing, build) == b"object 2"  # its own key
    version[0] = "b" * 64  # tracejit's code changed: built again, under another key
    assert parallel.stored_object("thing", missing, build) == b"object 3"
    assert len(kept) == 3 and builds == [0, 1, 2]


def test_without_the_code_the_generators_text_is_the_key(store, tmp_path):
    kept, load, save = store
    parallel.set_object_store(load, save)
    generator = tmp_path / "generator.py"
    generator.write_text("x = 1\n")
    assert parallel.stored_object("thing", [generator], lambda: b"one") == b"one"
    assert parallel.stored_object("thing", [generator], lambda: b"two") == b"one"
    generator.write_text("x = 2\n")
    assert parallel.stored_object("thing", [generator], lambda: b"two") == b"two"
    assert len(kept) == 2
