"""tracejit's own-code digest (part of every cache key) is hashed once per install, not
once per process: the cache root keeps it, signed, with a ``stat`` stamp of the files it
covers. A stamp that no longer matches, a forged or unsigned file, or files that changed
a moment ago all mean: hash the files again."""

from __future__ import annotations

import os
import time

import pytest

from tracejit.runtime import cache_key
from tracejit.runtime.cache import DiskCache


@pytest.fixture
def fresh_digest(monkeypatch):
    """``cache_key``'s once-per-process digest forgotten for the test (and put back)."""
    monkeypatch.setattr(cache_key, "_own_code", [])
    return cache_key.tracejit_code_digest


@pytest.fixture
def hashed(fresh_digest, monkeypatch):
    """The digest read from the files themselves (no store)."""
    digest = fresh_digest()
    monkeypatch.setattr(cache_key, "_own_code", [])
    return digest


def _forget(monkeypatch):
    monkeypatch.setattr(cache_key, "_own_code", [])


def test_the_digest_is_stored_once_and_read_back_equal(tmp_path, hashed, monkeypatch):
    cache = DiskCache(tmp_path / "cache")
    assert cache_key.tracejit_code_digest(cache) == hashed
    stored = tmp_path / "cache" / "v1" / "code-digest"
    if not stored.exists():
        pytest.skip("tracejit's own files changed a moment ago (another edit in this tree)")
    assert oct(stored.stat().st_mode & 0o777) == "0o600"
    _forget(monkeypatch)
    monkeypatch.setattr(cache_key, "_hashed_digest",
                        lambda files: pytest.fail("hashed again despite the stored digest"))
    assert cache_key.tracejit_code_digest(cache) == hashed


def _stored_file(tmp_path, hashed, monkeypatch):
    cache = DiskCache(tmp_path / "cache")
    cache_key.tracejit_code_digest(cache)
    stored = tmp_path / "cache" / "v1" / "code-digest"
    if not stored.exists():
        pytest.skip("tracejit's own files changed a moment ago (another edit in this tree)")
    _forget(monkeypatch)
    return cache, stored


def test_a_forged_digest_is_not_used(tmp_path, hashed, monkeypatch):
    cache, stored = _stored_file(tmp_path, hashed, monkeypatch)
    content = stored.read_bytes()
    stamp = content[:32]
    forged = stamp + b" " + b"0" * 64
    stored.write_bytes(forged + content[-32:])  # the old signature: does not verify
    assert cache_key.tracejit_code_digest(cache) == hashed
    rewritten = stored.read_bytes()[:32].decode()
    assert cache.load_code_digest(rewritten) == hashed  # rewritten, signed


def test_a_digest_stored_for_other_files_is_not_used(tmp_path, hashed, monkeypatch):
    cache, stored = _stored_file(tmp_path, hashed, monkeypatch)
    other_stamp = "f" * 32
    cache.save_code_digest(other_stamp, "0" * 64)  # signed, but for another stamp
    assert cache_key.tracejit_code_digest(cache) == hashed


def test_a_store_that_cannot_read_falls_back_to_hashing(tmp_path, hashed, monkeypatch):
    cache = DiskCache(tmp_path / "cache")
    monkeypatch.setattr(cache, "load_code_digest", lambda stamp: "not a digest")
    assert cache_key.tracejit_code_digest(cache) == hashed


def test_the_stamp_follows_edits_and_is_withheld_right_after_one(tmp_path, monkeypatch):
    source = tmp_path / "module.py"
    source.write_text("x = 1\n")
    files = [(str(tmp_path), "module.py", str(source))]
    assert cache_key._files_stamp(files) is None  # just written: times are too coarse
    monkeypatch.setattr(cache_key, "_SETTLE_NS", 0)
    before = cache_key._files_stamp(files)
    assert before is not None and before == cache_key._files_stamp(files)
    info = os.stat(source)
    time.sleep(0.01)
    source.write_text("x = 2\n")  # the same size, its mtime put back: ctime still moves
    os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert cache_key._files_stamp(files) != before
    source.unlink()
    assert cache_key._files_stamp(files) is None
