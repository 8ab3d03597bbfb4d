"""The on-disk compile cache: content-addressed, atomic, signed, no pickle.

Layout under ``TRACEJIT_CACHE_DIR`` (the root: the user's own, 0700)::

    signing.key                the root's secret (0600): entries are signed with it
    v1/ab/<key>.tjc            one entry: a variant and every path of its trace tree
    v1/stats/<function>.json   counters persisted across processes (calls, exits, ...)
    v1/runtime-<key>.o         the thread pool's object code (signed too)
    v1/code-digest             tracejit's own-code digest and the file stamp it is for

Where the parts live:

* ``cache_key``: what an entry is filed under (the call, the function's file and code,
  the helpers it passed through, checked again at every load);
* ``cache_entries``: the entry file format (``read_entry``, ``write_entry``);
* ``cache_trust``: the only code that opens cache files, and what it trusts and why;
* here: ``DiskCache``, which loads and stores variants, keeps the persisted counters and
  does what the ``tracejit cache`` command asks.

>>> import tempfile
>>> cache = DiskCache(tempfile.mkdtemp())  # what every jit(cache=True) function holds
>>> cache.entries(), cache.orphans(), cache.persisted_stats()
([], [], [])
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings

from tracejit.codegen import gc_pause, machine_objects

from . import serialize
from .cache_entries import (
    FORMAT,
    MAGIC,  # noqa: F401 - imported from here by tests and tools
    CorruptEntry,
    _is_key,
    _parse_entry,
    _parse_header,  # noqa: F401 - imported from here by tests
    read_entry,
    read_header,
    write_entry,
)
from .cache_key import (
    _dependencies,
    _unwrapped,
    cache_key,
    file_digest,  # noqa: F401 - runtime/pickling.py imports it from here
    number_positions,
    stale_dependency,
    takes_numbers_at_run_time,
    tracejit_code_digest,
)
from .cache_trust import Refused, Rejected, TrustedRoot, split_signed
from .config import logger
from .diagnostics import leaf_names
from .version import __version__

MAX_STATS_BYTES = 16 << 20
log = logger("cache")


_refusals_warned = set()


class DiskCache:
    """The cache at ``directory``: ``load``/``store`` variants, counters, and what the
    ``tracejit cache`` command lists and changes. Nothing here opens a file itself.

    A jit function's calls pass what a key needs: its function ``fn``, the ``name`` logs
    and warnings use, its ``Options`` and its ``ShapePolicy``."""

    def __init__(self, directory, max_bytes=None):
        self.directory = os.path.abspath(directory)
        self.max_bytes = max_bytes  # None or 0: no cap (the command line's caches)
        self.root = os.path.join(self.directory, "v1")

    # --- trust ----------------------------------------------------------------------------
    def trusted(self, create=False, fn=None, name=None):
        """The ``TrustedRoot``, or ``None`` (no cache yet, or refused: warned once, at
        ``fn``'s definition when given)."""
        try:
            return TrustedRoot.open(self.directory, create=create)
        except Refused as error:
            self._warn_refused(str(error), fn, name)
        except OSError as error:
            self._warn_refused(f"cannot create the compile cache at {self.directory}: "
                               f"{error.strerror}", fn, name)
        return None

    def check(self):
        """The ``TrustedRoot`` for the command line: ``Refused`` propagates."""
        return TrustedRoot.open(self.directory)

    def _warn_refused(self, problem, fn, name):
        if self.directory in _refusals_warned:
            return
        _refusals_warned.add(self.directory)
        code = getattr(_unwrapped(fn), "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}: " if code else ""
        function = f"tracejit function {name}: " if name is not None else ""
        warnings.warn(f"{where}{function}{problem}. Compiled code stays in memory for this "
                      "process; point TRACEJIT_CACHE_DIR at a directory only you can write",
                      RuntimeWarning, stacklevel=2)

    # --- the thread pool's runtime object ---------------------------------------------------
    def load_object(self, key):
        root = self.trusted()
        if root is None:
            return None
        try:
            return root.read_signed(os.path.join(self.root, f"runtime-{key}.o"),
                                    f"runtime-{key}")
        except (OSError, Rejected):
            return None

    def save_object(self, key, object_code):
        root = self.trusted(create=True)
        if root is not None:
            try:
                root.write_signed(os.path.join(self.root, f"runtime-{key}.o"),
                                  f"runtime-{key}", object_code)
            except (OSError, Rejected) as error:
                log.warning("could not write the pool's runtime to the cache: %s", error)

    # --- paths ----------------------------------------------------------------------------
    def entry_path(self, key):
        return os.path.join(self.root, key[:2], key + ".tjc")

    def shards(self):
        if not os.path.isdir(self.root):
            return []
        return [os.path.join(self.root, name) for name in sorted(os.listdir(self.root))
                if len(name) == 2 and os.path.isdir(os.path.join(self.root, name))]

    def entries(self):
        """Paths of the entry files (by name: ``verify`` reads and judges them)."""
        root = self.trusted()
        if root is None:
            return []
        return [path for shard in self.shards() for path in root.files(shard, ".tjc")]

    def runtime_objects(self):
        root = self.trusted()
        return root.files(self.root, ".o") if root is not None else []

    def orphans(self):
        """Temp files left by writers that died before renaming them into place."""
        root = self.trusted()
        if root is None:
            return []
        folders = [self.directory, self.root, os.path.join(self.root, "stats"),
                   *self.shards()]
        return root.orphans(folders)

    def remove_orphans(self):
        orphans = self.orphans()
        root = self.trusted()
        for path in orphans:
            root.remove(path)
        return orphans

    # --- keys ----------------------------------------------------------------------------
    def key(self, fn, options, policy, leaves):
        """``(key, signature, opened)`` of a call (``cache_key``): ``opened`` is ``(open
        key, its signature, the number leaves' positions)`` when the call passes numbers,
        else None. tracejit's own-code digest in them is hashed once per install and kept
        here (``load_code_digest``)."""
        tracejit_code_digest(self)
        key, signature = cache_key(fn, options, policy, leaves)
        positions = number_positions(leaves)
        opened = None
        if key is not None and positions:
            open_key, open_signature = cache_key(fn, options, policy, leaves, positions)
            opened = (open_key, open_signature, positions)
        return key, signature, opened

    def load_code_digest(self, stamp):
        """The code digest stored for ``stamp`` (``cache_key._files_stamp``), or None."""
        root = self.trusted()
        if root is None:
            return None
        try:
            content = root.read_signed(os.path.join(self.root, "code-digest"), "code-digest")
        except (OSError, Rejected):
            return None
        stored_stamp, _, digest = content.decode("ascii", "replace").partition(" ")
        return digest if stored_stamp == stamp else None

    def save_code_digest(self, stamp, digest):
        root = self.trusted(create=True)
        if root is not None:
            try:
                root.write_signed(os.path.join(self.root, "code-digest"), "code-digest",
                                  f"{stamp} {digest}".encode("ascii"))
            except (OSError, Rejected) as error:  # only slower: hashed again next process
                log.info("could not write tracejit's code digest to the cache: %s", error)

    # --- reading and writing --------------------------------------------------------------
    def load(self, fn, name, options, policy, leaves):
        """The variant stored for this call (see ``key``), or None."""
        with gc_pause.paused():  # parsing and linking it: garbage that refcounting frees
            return self._load(fn, name, options, policy, leaves)

    def _load(self, fn, name, options, policy, leaves):
        root = self.trusted(fn=fn, name=name)
        if root is None:
            return None
        # The LLJIT is made and the per-machine objects linked while the key is taken and
        # the entry read and checked: a hit links next, a miss compiles and links
        machine_objects.link_ahead()
        key, _, opened = self.key(fn, options, policy, leaves)
        if key is None:
            return None
        # the entry for these values, else one that takes every number at run time
        # (filed under the open key: ``_store``); its guard decides whether it applies
        variant = self._read_variant(root, fn, name, key)
        if variant is None and opened is not None:
            variant = self._read_variant(root, fn, name, opened[0])
        return variant

    def _read_variant(self, root, fn, name, key):
        path = self.entry_path(key)
        start = time.perf_counter()
        try:
            header, body = read_entry(path, root=root, key=key)
        except FileNotFoundError:
            log.debug("%s: no entry %s", name, key[:12])
            return None
        except CorruptEntry as error:
            log.warning("%s: ignoring a cache entry that cannot be trusted or read (%s); it "
                        "will be rebuilt", name, error)
            return None
        stale = stale_dependency(body.get("dependencies", []))
        if stale:
            log.info("%s: cache entry %s is stale (%s changed); recompiling", name, key[:12],
                     stale)
            return None
        blobs = serialize.Blobs(body["blobs"])
        try:
            variant = serialize.variant_from_json(body["variant"], fn, blobs)
        except (serialize.NotSerializable, KeyError, ValueError, TypeError, IndexError,
                AttributeError) as error:
            log.info("%s: cache entry %s cannot be used here (%s)", name, key[:12], error)
            return None
        variant.key = key
        log.info("%s: loaded %s from disk in %.1f ms (no tracing, no LLVM)", name, key[:12],
                 (time.perf_counter() - start) * 1e3)
        root.touch(path)  # recently used: prune keeps it
        return variant

    def store(self, variant, fn, name, keyed):
        """Write ``variant``'s entry (``fn``'s, logged as ``name``) under ``keyed``: what
        ``key`` gave for the call it was traced from. A variant that takes every number
        argument at run time is filed under the open key (any values find it), one that
        pins a number under the key of the call's values."""
        with gc_pause.paused():
            self._store(variant, fn, name, keyed)

    def _store(self, variant, fn, name, keyed):
        key, signature, opened = keyed
        if key is None:
            log.debug("%s: kept in memory only: %s", name, signature)
            return
        if opened is not None and takes_numbers_at_run_time(variant, opened[2]):
            key, signature = opened[:2]
        blobs = serialize.Blobs()
        try:
            dependencies = _dependencies(variant, fn)
            payload = serialize.variant_to_json(variant, fn, blobs)
        except serialize.NotSerializable as error:
            log.info("%s: kept in memory only: %s", name, error)
            return
        root = self.trusted(create=True, fn=fn, name=name)
        if root is None:
            return
        variant.key = key
        header = {
            "key": key,
            "format": FORMAT,
            "tracejit": __version__,
            "function": getattr(fn, "__qualname__", repr(fn)),
            "module": getattr(fn, "__module__", None),
            "file": getattr(getattr(_unwrapped(fn), "__code__", None), "co_filename", None),
            "signature": signature,
            "paths": variant.path_count,
            "kernels": sum(path.program.kernel_count for _, path in variant.root.walk()),
            "created": time.time(),
            "entry_guards": variant.spec.describe(leaf_names(fn, variant.spec.treedef)),
        }
        body = {"variant": payload, "dependencies": dependencies,
                "model_source": _rewritten_source(fn),
                "blob_sizes": [len(part) for part in blobs.parts]}
        write_entry(root, self.entry_path(key), header, body, blobs.parts)
        log.info("%s: wrote %s", name, key[:12])
        if self.max_bytes:
            self.keep_under(self.max_bytes, root, spare=self.entry_path(key))

    # --- entries sent between processes (tracejit.dask) ------------------------------------
    def export_entries(self, keys):
        """``[(key, signed bytes)]`` of the entries ``keys`` that verify under this cache's
        key: what a client ships to its workers (an entry that does not verify here is not
        sent on)."""
        root = self.trusted()
        exported = []
        for key in keys:
            if root is None or not _is_key(key):
                continue
            path = self.entry_path(key)
            try:
                content = root.read_signed(path, key)
            except (OSError, Rejected) as error:
                log.info("not shipping entry %s: %s", key[:12], error)
                continue
            exported.append((key, content + root.tag(key, content)))
        return exported

    def import_entries(self, entries, adopt):
        """Install entries another process shipped; a count per outcome:

        * ``present``: this cache already holds that entry, and it verifies;
        * ``verified``: its signature verifies under this cache's key (the sender shares
          the key file: the same root, or a copy of its key), so it is written as it came;
        * ``adopted``: it does not verify here, but ``adopt`` says the channel it came by
          is trusted (a Dask client: it can run any code on this worker anyway), it parses
          as an entry and names the key it is filed under: it is re-signed with this
          cache's key;
        * ``rejected``: anything else (forged, truncated, filed under another key, or not
          adopted). It is not written, so a call that needs it compiles.
        """
        outcome = {"present": 0, "verified": 0, "adopted": 0, "rejected": 0}
        root = self.trusted(create=True)
        for key, data in entries:
            if root is None or not _is_key(key) or not isinstance(data, bytes):
                outcome["rejected"] += 1
                continue
            path = self.entry_path(key)
            try:
                root.read_signed(path, key)
                outcome["present"] += 1
                continue
            except FileNotFoundError:
                pass
            except (OSError, Rejected):
                pass  # a broken or foreign file there: replaced below if the new one is good
            try:
                content, tag = split_signed(path, data)
                header, _ = _parse_entry(path, content)
                if header.get("key") != key:
                    raise CorruptEntry("its header names another key")
                if root.verifies(key, content, tag):
                    root.write(path, data)
                    outcome["verified"] += 1
                elif adopt:
                    root.write_signed(path, key, content)
                    outcome["adopted"] += 1
                else:
                    raise CorruptEntry("its signature does not verify under this cache's key")
            except (CorruptEntry, Rejected, OSError) as error:
                log.warning("rejected a shipped cache entry %s: %s", key[:12], error)
                outcome["rejected"] += 1
        return outcome

    # --- what the command line changes ----------------------------------------------------
    def least_recently_used(self, limit, root=None, spare=None):
        """Entry files to delete, least recently used first, so the rest fit in ``limit``
        bytes: ``([(path, bytes)], bytes left)``. ``spare`` (the entry just written) stays."""
        root = root or self.trusted()
        if root is None:
            return [], 0
        files = []
        for path in self.entries():
            try:
                size, used = root.describe(path)
            except OSError:
                continue  # removed meanwhile
            files.append((used, path, size))
        total = sum(size for _, _, size in files)
        doomed = []
        for _, path, size in sorted(files):
            if total <= limit:
                break
            if path != spare:
                doomed.append((path, size))
                total -= size
        return doomed, total

    def keep_under(self, limit, root=None, spare=None):
        """Delete least recently used entries until the cache holds at most ``limit``
        bytes of entries (after each store, with ``TRACEJIT_CACHE_MAX``); returns them."""
        root = root or self.trusted()
        doomed, _ = self.least_recently_used(limit, root, spare)
        for path, _ in doomed:
            root.remove(path)
        if doomed:
            self.forget_counters({os.path.basename(path)[: -len(".tjc")]
                                  for path, _ in doomed})
            log.info("the cache passed its %d-byte cap: removed %d least recently used "
                     "entries", limit, len(doomed))
        return doomed

    def remove_entries(self, rows):
        """Delete entries (rows of ``listing``) and their persisted counters."""
        root = self.trusted()
        if root is None:
            return
        for row in rows:
            root.remove(row["path"])
        self.forget_counters({row["key"] for row in rows})

    def listing(self):
        """One row per entry file: its verified header, or ``problem`` when it cannot be
        trusted; with ``path``, ``key``, ``bytes`` and ``used`` (for ``prune``)."""
        root = self.trusted()
        rows = []
        for path in self.entries():
            key = os.path.basename(path)[: -len(".tjc")]
            try:
                header = read_header(path, root=root, key=key)
            except (CorruptEntry, OSError) as error:
                header = {"problem": str(error)}
            try:
                size, used = root.describe(path)
            except OSError:
                continue  # removed meanwhile
            header.update(path=path, key=key, bytes=size, used=used)
            rows.append(header)
        return rows

    def resign(self):
        """Sign every entry and runtime object with this root's key (the user copied them
        here on purpose); ``(signed, skipped [(path, why)])``."""
        root = TrustedRoot.open(self.directory, create=True)
        signed, skipped = 0, []
        for path in self.entries() + self.runtime_objects():
            name = os.path.basename(path)
            key = name[: -len(".tjc")] if name.endswith(".tjc") else name[: -len(".o")]
            try:
                content, _ = split_signed(path, root.read(path))
                if name.endswith(".tjc"):
                    header, _ = _parse_entry(path, content)
                    if header.get("key") != key:
                        raise CorruptEntry("its key does not match its file name")
                root.write_signed(path, key, content)
                signed += 1
            except (CorruptEntry, Rejected, OSError) as error:
                skipped.append((path, str(error)))
        return signed, skipped

    # --- persisted counters ---------------------------------------------------------------
    def stats_path(self, function_name, module):
        return os.path.join(self.root, "stats", _digest(f"{module}:{function_name}")[:24] +
                            ".json")

    def add_counters(self, function_name, module, file, deltas):
        """Merge ``deltas`` into the function's persisted counters (under a file lock)."""
        if not any(_nonzero(value) for value in deltas.values()):
            return
        root = self.trusted(create=True)
        if root is None:
            return
        path = self.stats_path(function_name, module)
        with root.locked(path + ".lock"):
            current = _read_stats(root, path) or {}
            current.update({"function": function_name, "module": module, "file": file})
            _merge(current, deltas)
            root.write(path, json.dumps(current, sort_keys=True).encode())

    def forget_counters(self, keys=(), function=None):
        """Drop the counters of removed entries (``keys``), or of a whole function
        (``(name, module)``), so ``tracejit cache stats`` matches what is left."""
        root = self.trusted()
        if root is None:
            return
        if function is not None:
            path = self.stats_path(*function)
            with root.locked(path + ".lock"):
                root.remove(path)
            root.remove(path + ".lock")
        if not keys:
            return
        for path in root.files(os.path.join(self.root, "stats"), ".json"):
            with root.locked(path + ".lock"):
                current = _read_stats(root, path)
                entries = (current or {}).get("entries", {})
                if isinstance(entries, dict) and set(entries) & set(keys):
                    current["entries"] = {key: value for key, value in entries.items()
                                          if key not in keys}
                    root.write(path, json.dumps(current, sort_keys=True).encode())

    def persisted_stats(self):
        root = self.trusted()
        if root is None:
            return []
        result = []
        for path in root.files(os.path.join(self.root, "stats"), ".json"):
            current = _read_stats(root, path)
            if current is not None:
                result.append(current)
        return result


def _read_stats(root, path):
    try:
        current = json.loads(root.read(path, limit=MAX_STATS_BYTES))
    except (OSError, Rejected, ValueError):
        return None
    return current if isinstance(current, dict) else None


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _rewritten_source(fn):
    """What the front end made of the model's source (for ``tracejit cache show --source``)."""
    from tracejit.tracer.rewritten_code import render

    try:
        return render(getattr(fn, "__func__", fn))
    except Exception:  # lambdas, REPL functions: no source to show
        return None


def _nonzero(value):
    if isinstance(value, dict):
        return any(_nonzero(item) for item in value.values())
    return bool(value)


def _merge(target, deltas):
    for key, value in deltas.items():
        if isinstance(value, dict):
            _merge(target.setdefault(key, {}), value)
        else:
            target[key] = target.get(key, 0) + value


