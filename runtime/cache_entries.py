"""The entry file format: one signed file per variant, read only through ``cache_trust``.

An entry file is ``MAGIC | header length | header JSON | zlib(body JSON + blobs) |
HMAC``. The header (function, signature, sizes) is enough to list entries; the body holds
the IR text, constants, object code and how the wrapper was scheduled. Every file is read
and written through ``tracejit.runtime.cache_trust``, which says what is trusted and why;
an entry whose signature does not match its key is ``CorruptEntry`` here, and the cache
rebuilds it.

>>> _is_key("0" * 64), _is_key("../../x")
(True, False)
"""

from __future__ import annotations

import json
import os
import struct
import zlib

from .cache_trust import MAX_FILE_BYTES, Refused, Rejected, TrustedRoot

MAGIC = b"TJC2\n"  # TJC1 entries (an unkeyed sha256) are not trusted: rebuilt on first use
FORMAT = 4  # 4: a program's LLVM IR texts are blobs of their own zlib stream (serialize)


class CorruptEntry(Exception):
    """An entry that cannot be used: unsigned, signed for another key, truncated, not a
    regular file, too large, or not an entry at all."""


def write_entry(root, path, header, body, blobs):
    body_bytes = json.dumps(body, sort_keys=True).encode()
    # Level 3, not 6: the store is on a first call's path. An MLP train step's entry (288 KB
    # before compression): 2.0 ms and 53 KB at 3, 5.3 ms and 44 KB at 6; reading is 0.7 ms
    # at either.
    payload = zlib.compress(struct.pack("<Q", len(body_bytes)) + body_bytes + b"".join(blobs), 3)
    header_bytes = json.dumps(header, sort_keys=True).encode()
    content = MAGIC + struct.pack("<Q", len(header_bytes)) + header_bytes + payload
    root.write_signed(path, header["key"], content)


def _root_of(path):
    """The trusted root an entry path (``<root>/v1/ab/<key>.tjc``) lives in."""
    directory = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(path))))
    try:
        root = TrustedRoot.open(directory)
    except Refused as error:
        raise CorruptEntry(str(error)) from None
    if root is None:
        raise FileNotFoundError(path)
    return root


def _verified_content(path, root, key):
    root = root or _root_of(path)
    key = key or os.path.basename(path)[: -len(".tjc")]
    try:
        return root.read_signed(path, key), key
    except Rejected as error:
        raise CorruptEntry(str(error)) from None


def _parse_header(path, content):
    start = len(MAGIC) + 8
    if len(content) < start or not content.startswith(MAGIC):
        raise CorruptEntry("not a tracejit cache entry (or one from an older tracejit)")
    (length,) = struct.unpack("<Q", content[len(MAGIC):start])
    if length > len(content) - start:
        raise CorruptEntry("truncated header")
    try:
        header = json.loads(content[start : start + length])
    except ValueError as error:
        raise CorruptEntry(f"unreadable header: {error}") from None
    if not isinstance(header, dict):
        raise CorruptEntry("its header is not a record")
    return header, start + length


def _parse_entry(path, content):
    header, header_end = _parse_header(path, content)
    try:
        inflater = zlib.decompressobj()
        payload = inflater.decompress(content[header_end:], MAX_FILE_BYTES)
        if inflater.unconsumed_tail:
            raise CorruptEntry(f"its body inflates past {MAX_FILE_BYTES} bytes")
        (body_length,) = struct.unpack("<Q", payload[:8])
        body = json.loads(payload[8 : 8 + body_length])
    except (ValueError, zlib.error, struct.error) as error:
        raise CorruptEntry(f"unreadable entry: {error}") from None
    if not isinstance(body, dict) or not isinstance(body.get("blob_sizes"), list):
        raise CorruptEntry("its body is not an entry's")
    blobs, offset = [], 8 + body_length
    for size in body["blob_sizes"]:
        if not isinstance(size, int) or size < 0 or offset + size > len(payload):
            raise CorruptEntry("its binary parts do not add up")
        blobs.append(payload[offset : offset + size])
        offset += size
    body["blobs"] = blobs
    return header, body


def read_header(path, root=None, key=None):
    """The header of a signed entry (``CorruptEntry`` if it does not verify)."""
    content, key = _verified_content(path, root, key)
    header, _ = _parse_header(path, content)
    if header.get("key") != key:
        raise CorruptEntry("its key does not match its file name")
    return header


def read_entry(path, root=None, key=None):
    """``(header, body)`` of a signed entry, ``body["blobs"]`` a list of bytes;
    ``CorruptEntry`` if it is unsigned, signed for another key, truncated, not a regular
    file or not an entry, ``FileNotFoundError`` if there is none."""
    content, key = _verified_content(path, root, key)
    header, body = _parse_entry(path, content)
    if header.get("key") != key:
        raise CorruptEntry("its key does not match its file name")
    return header, body


def _is_key(key):
    """A cache key as ``DiskCache.key`` makes them (64 hex digits): nothing else may name
    a file (a shipped name like ``../../x`` must not)."""
    return isinstance(key, str) and len(key) == 64 and all(
        char in "0123456789abcdef" for char in key)
