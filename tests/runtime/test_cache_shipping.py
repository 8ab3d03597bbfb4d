"""Cache entries sent from one process's cache to another's (what ``tracejit.dask.ship``
does): an entry goes in only if it verifies under the receiving cache's key, or if the
channel is trusted (``adopt``) and it parses as an entry filed under its own key. Forged,
corrupt, renamed or oddly named entries are rejected, nothing is written for them, and a
call that needs them compiles. The receiver's first call of an installed entry is a warm
start with results equal to eager.
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

from tracejit import jit
from tracejit.runtime.cache import MAGIC, DiskCache, _parse_header
from tracejit.runtime.cache_trust import SECRET_NAME, TAG_BYTES


def model(x, w):
    if x.sum() > 0:
        return np.tanh(x @ w) * 2.0
    return x @ w - 1.0


X = np.linspace(0.1, 1.0, 12).reshape(3, 4)
W = np.linspace(-1.0, 1.0, 8).reshape(4, 2)


def jit_with_cache(monkeypatch, directory):
    """``jit(model)`` whose disk cache is ``directory`` (jit reads it when decorating)."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(directory))
    return jit(model)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """The sender's compiled function and its exported entries."""
    sender = jit_with_cache(monkeypatch, tmp_path / "client")
    sender(X, W)
    keys = [variant.key for variant in sender._variants]
    assert len(keys) == 1 and keys[0]
    entries = sender._cache.export_entries(keys)
    assert [key for key, _ in entries] == keys
    return sender, entries


def warm_start(monkeypatch, directory):
    """A new function over ``directory`` (a fresh process's view); its first call."""
    receiver = jit_with_cache(monkeypatch, directory)
    result = receiver(X, W)
    np.testing.assert_allclose(result, model(X, W), rtol=1e-12, atol=1e-12)
    return receiver.stats()


def test_an_adopted_entry_is_a_warm_start(tmp_path, monkeypatch, shipped):
    _, entries = shipped
    worker = DiskCache(str(tmp_path / "worker"))
    assert worker.import_entries(entries, adopt=True) == {
        "present": 0, "verified": 0, "adopted": 1, "rejected": 0}
    assert worker.import_entries(entries, adopt=True)["present"] == 1
    stats = warm_start(monkeypatch, tmp_path / "worker")
    assert stats["disk_hits"] == 1 and stats["compiles"] == 0


def test_without_adopt_only_entries_signed_with_the_receivers_key_go_in(
        tmp_path, monkeypatch, shipped):
    _, entries = shipped
    stranger = DiskCache(str(tmp_path / "stranger"))
    assert stranger.import_entries(entries, adopt=False)["rejected"] == 1
    assert stranger.entries() == []
    stats = warm_start(monkeypatch, tmp_path / "stranger")
    assert stats["disk_hits"] == 0 and stats["compiles"] == 1

    # A cache holding a copy of the sender's key verifies its signatures itself.
    sibling = tmp_path / "sibling"
    os.mkdir(sibling, 0o700)
    shutil.copy(tmp_path / "client" / SECRET_NAME, sibling / SECRET_NAME)
    os.chmod(sibling / SECRET_NAME, 0o600)
    assert DiskCache(str(sibling)).import_entries(entries, adopt=False)["verified"] == 1
    stats = warm_start(monkeypatch, sibling)
    assert stats["disk_hits"] == 1 and stats["compiles"] == 0


def _renamed(data, name):
    """The entry's bytes with its header naming ``name`` (the signature left as it was:
    an adopting receiver does not check it)."""
    content, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    header, end = _parse_header("shipped", content)
    header["key"] = name
    encoded = json.dumps(header, sort_keys=True).encode()
    return MAGIC + struct.pack("<Q", len(encoded)) + encoded + content[end:] + tag


def _flip(data, offset):
    return data[:offset] + bytes([data[offset] ^ 0x55]) + data[offset + 1:]


@pytest.mark.parametrize("damage", ["object code", "header", "truncated", "other key",
                                    "path", "not bytes"])
def test_forged_corrupt_or_misnamed_entries_are_rejected_even_when_adopting(
        tmp_path, monkeypatch, shipped, damage):
    _, [(key, data)] = shipped
    other = "0" * 64 if key != "0" * 64 else "1" * 64
    forged = {
        "object code": [(key, _flip(data, len(data) - 100))],  # inside the zlib body
        "header": [(key, _flip(data, 2))],  # its magic: not an entry at all
        "truncated": [(key, data[: len(data) // 2])],
        "other key": [(other, data)],  # a good entry filed under another key
        # names that are no key, each in an entry whose header names it: only the name
        # check keeps them from being written outside the cache
        "path": [(name, _renamed(data, name)) for name in ("../../" + key[6:], key.upper(),
                                                             key + "/../" + key)],
        "not bytes": [(key, data.decode("latin-1"))],
    }[damage]
    worker = DiskCache(str(tmp_path / "worker"))
    outcome = worker.import_entries(forged, adopt=True)
    assert outcome == {"present": 0, "verified": 0, "adopted": 0, "rejected": len(forged)}
    assert worker.entries() == []
    assert not any(name.endswith(".tjc") for _, _, names in os.walk(tmp_path / "worker")
                   for name in names)
    stats = warm_start(monkeypatch, tmp_path / "worker")
    assert stats["disk_hits"] == 0 and stats["compiles"] == 1


def test_a_planted_entry_on_the_receiver_is_rejected_and_replaced(
        tmp_path, monkeypatch, shipped):
    _, entries = shipped
    [(key, data)] = entries
    worker = DiskCache(str(tmp_path / "worker"))
    root = worker.trusted(create=True)
    path = worker.entry_path(key)
    root.write(path, data)  # the sender's bytes, but not signed with this cache's key
    stats = warm_start(monkeypatch, tmp_path / "worker")
    assert stats["disk_hits"] == 0 and stats["compiles"] == 1  # rejected at load: rebuilt

    root.write(path, data)  # planted again; shipping replaces it with a good entry
    assert worker.import_entries(entries, adopt=True)["adopted"] == 1
    stats = warm_start(monkeypatch, tmp_path / "worker")
    assert stats["disk_hits"] == 1 and stats["compiles"] == 0


def test_an_entry_that_does_not_verify_at_the_sender_is_not_shipped(tmp_path, shipped):
    sender, [(key, _)] = shipped
    path = sender._cache.entry_path(key)
    with open(path, "r+b") as stream:
        stream.seek(30)
        byte = stream.read(1)
        stream.seek(30)
        stream.write(bytes([byte[0] ^ 0x55]))
    assert sender._cache.export_entries([key]) == []
    assert sender._cache.export_entries(["../" + key[3:]]) == []
