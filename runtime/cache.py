"""The on-disk compile cache: content-addressed, atomic, signed, no pickle.

Layout under ``TRACEJIT_CACHE_DIR`` (the root: the user's own, 0700)::

    signing.key                the root's secret (0600): entries are signed with it
    v1/ab/<key>.tjc            one entry: a variant and every path of its trace tree
    v1/stats/<function>.json   counters persisted across processes (calls, exits, ...)
    v1/runtime-<key>.o         the thread pool's object code (signed too)

An entry file is ``MAGIC | header length | header JSON | zlib(body JSON + blobs) |
HMAC``. The header (function, signature, sizes) is enough to list entries; the body holds
the IR text, constants, object code and how the wrapper was scheduled. Every file is read
and written through ``tracejit.runtime.cache_trust``, which says what is trusted and why; an entry
whose signature does not match its key is rejected and rebuilt.

The key hashes tracejit's version and its own source, NumPy's and LLVM's versions, the
CPU and its features, the options, the call signature and the function: its defining
file (resolved path and content hash) and its code. The entry lists every other function
the trace passed through, by module and name; a load resolves each one *in this process*
and compares its file (path and content) and code with what the writer saw, so a helper
that is edited, or that this process finds in another file, invalidates the entry. A
function or helper without readable source (``python -c``, ``exec``) is cached in memory
only.

>>> import tempfile
>>> cache = DiskCache(tempfile.mkdtemp())  # what every jit(cache=True) function holds
>>> cache.entries(), cache.orphans(), cache.persisted_stats()
([], [], [])
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import threading
import time
import warnings
import zlib

import numpy as np

from tracejit.codegen import llvm
from tracejit.tracer.implicit import find_implicit_inputs
from tracejit.tracer.locations import is_tracejit

from . import serialize
from .autograd import is_grad_enabled
from .cache_trust import MAX_FILE_BYTES, Refused, Rejected, TrustedRoot, split_signed
from .config import logger
from .diagnostics import leaf_names
from .tensor import unwrap
from .version import __version__

MAGIC = b"TJC2\n"  # TJC1 entries (an unkeyed sha256) are not trusted: rebuilt on first use
FORMAT = 2
MAX_STATS_BYTES = 16 << 20
log = logger("cache")


class CorruptEntry(Exception):
    """An entry that cannot be used: unsigned, signed for another key, truncated, not a
    regular file, too large, or not an entry at all."""


# --- what a function is: its file and its code ----------------------------------------------
_file_digests = {}  # (path, size, mtime_ns, inode) -> sha256 of the file's bytes
_file_digests_lock = threading.Lock()


def file_digest(path):
    """sha256 of the file at ``path`` (resolved), or ``None`` if it is not readable source."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not os.path.isfile(path):
        return None
    identity = (path, info.st_size, info.st_mtime_ns, info.st_ino)
    with _file_digests_lock:
        known = _file_digests.get(identity)
    if known is None:
        try:
            with open(path, "rb") as stream:  # the user's source, not a cache file
                known = hashlib.sha256(stream.read()).hexdigest()
        except OSError:
            return None
        with _file_digests_lock:
            if len(_file_digests) > 4096:
                _file_digests.clear()
            _file_digests[identity] = known
    return known


_own_code = []


def tracejit_code_digest():
    """A digest of tracejit's own source (every .py of tracer/, codegen/, runtime/): an
    entry compiled by other tracejit code (a fix to a kernel or a rule since) is another
    key, even under the same version number. Computed once per process (~100 files)."""
    if not _own_code:
        digest = hashlib.sha256()
        for module in (sys.modules["tracejit.tracer"], llvm, sys.modules[__name__]):
            root = os.path.dirname(os.path.abspath(module.__file__))
            for folder, _, files in sorted(os.walk(root)):
                for name in sorted(files):
                    if name.endswith(".py"):
                        path = os.path.join(folder, name)
                        digest.update(os.path.relpath(path, root).encode())
                        digest.update((file_digest(path) or "").encode())
        _own_code.append(digest.hexdigest())
    return _own_code[0]


def code_digest(code):
    """A digest of a code object as this process runs it (bytecode, names, constants and
    nested functions), the same in every process of one Python version."""
    digest = hashlib.sha256()
    _feed_code(digest, code)
    return digest.hexdigest()


def _feed_code(digest, code):
    digest.update(code.co_code)
    for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        digest.update(repr(names).encode() + b"\0")
    digest.update(repr((code.co_argcount, code.co_kwonlyargcount, code.co_flags)).encode())
    for constant in code.co_consts:
        if hasattr(constant, "co_code"):
            _feed_code(digest, constant)
        elif isinstance(constant, frozenset):  # its order follows string hashes: sort it
            digest.update(repr(sorted(map(repr, constant))).encode())
        else:
            digest.update(repr(constant).encode())
        digest.update(b"\0")


def _unwrapped(value):
    """The plain function behind a jit function, bound method or static/class method."""
    value = getattr(value, "fn", value)
    return getattr(value, "__func__", value)


def source_identity(function):
    """``{"file", "file_sha256", "code"}`` of a function with readable source, else None."""
    code = getattr(_unwrapped(function), "__code__", None)
    if code is None:
        return None
    path = os.path.realpath(code.co_filename) if os.path.isabs(code.co_filename) else None
    digest = file_digest(path) if path else None
    if digest is None:
        return None
    return {"file": path, "file_sha256": digest, "code": code_digest(code)}


def _resolve(module_name, qualname):
    """The function at ``module.qualname`` in this process, or at the longest prefix of
    it outside ``<locals>`` (whose code holds the nested function's); ``(prefix, fn)``."""
    value = sys.modules.get(module_name)
    resolved, found = [], None
    for part in qualname.split("."):
        if part == "<locals>" or value is None:
            break
        value = getattr(value, part, None)
        resolved.append(part)
        if hasattr(_unwrapped(value), "__code__"):
            found = (".".join(resolved), _unwrapped(value))
    return found or (None, None)


def _modules_defined_in(path):
    """Names of the imported modules whose file is ``path`` (resolved)."""
    names, base = [], os.path.basename(path)
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and (file == path or (  # resolve only likely candidates
                os.path.basename(file) == base and os.path.realpath(file) == path)):
            names.append(name)
    return names


def dependency_of(qualname, file):
    """How a load finds a helper again (module and name) and what it must still be (file
    and code); ``NotSerializable`` when no import path reaches it."""
    path = os.path.realpath(file) if os.path.isabs(file) else None
    for module in _modules_defined_in(path) if path else []:
        prefix, function = _resolve(module, qualname)
        identity = source_identity(function) if function is not None else None
        if identity is not None and identity["file"] == path:
            return {"module": module, "qualname": prefix, **identity}
    raise serialize.NotSerializable(f"{qualname} ({file}) is not reachable by import, so a "
                                    "new process could not check it")


def stale_dependency(dependencies):
    """The first dependency that this process resolves to another file or code, or
    ``None`` when all are what the entry was compiled from."""
    for dependency in dependencies:
        if not (isinstance(dependency, dict) and all(
                isinstance(dependency.get(field), str) for field in
                ("module", "qualname", "file", "file_sha256", "code"))):
            return "a malformed dependency"
        _, function = _resolve(dependency["module"], dependency["qualname"])
        identity = source_identity(function) if function is not None else None
        recorded = {field: dependency[field] for field in ("file", "file_sha256", "code")}
        if identity != recorded:
            where = identity["file"] if identity else "nowhere"
            return f"{dependency['module']}.{dependency['qualname']} (now in {where})"
    return None


def call_signature(policy, leaves):
    """What the call looks like under the function's shape ``policy`` (``None``: a call
    whose compiled code cannot be shared across processes, e.g. an object argument)."""
    parts = []
    for index, leaf in enumerate(leaves):
        array = unwrap(leaf)
        if isinstance(array, np.ndarray):
            dynamic = policy(index, array)
            shape = [list(dynamic[axis]) if axis in dynamic else size
                     for axis, size in enumerate(array.shape)]
            wants_grad = bool(getattr(leaf, "requires_grad", False) and is_grad_enabled())
            parts.append([type(leaf).__name__, array.dtype.str, shape] +
                         (["grad"] if wants_grad else []))
        elif serialize.is_json_value(leaf):
            parts.append([type(leaf).__name__, leaf])
        else:
            return None
    return parts


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

    # --- keys -----------------------------------------------------------------------------
    def key(self, fn, options, policy, leaves):
        """``(key, signature)`` of a call of ``fn`` with ``leaves`` under ``options`` and
        the shape ``policy``; ``(None, reason)`` for a call that stays in memory."""
        signature = call_signature(policy, leaves)
        if signature is None:
            return None, "an argument is an object"
        identity = source_identity(fn)
        if identity is None:
            return None, "its source is not in a readable file (python -c, exec, a REPL)"
        identity = {
            "format": FORMAT,
            "tracejit": __version__,
            "tracejit_code": tracejit_code_digest(),
            "numpy": np.__version__,
            "python": sys.version_info[:2],
            "host": llvm.host_description(),
            "function": {
                "module": _module_name(fn),
                "qualname": getattr(fn, "__qualname__", None),
                **identity,
            },
            "options": options.key_fields(),
            "signature": signature,
            "captured": _captured(fn),
            # Arrays the function can read from outside: their dtypes and shapes are
            # compiled in too (entries for other shapes must not collide).
            "implicit": sorted(
                [str(path), str(array.dtype), list(array.shape)]
                for path, array in find_implicit_inputs(fn, leaves).values()
                if hasattr(array, "dtype")
            ),
        }
        text = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest(), signature

    # --- reading and writing --------------------------------------------------------------
    def load(self, fn, name, options, policy, leaves):
        """The variant stored for this call (see ``key``), or None."""
        root = self.trusted(fn=fn, name=name)
        if root is None:
            return None
        key, signature = self.key(fn, options, policy, leaves)
        if key is None:
            return None
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
        """Write ``variant``'s entry (``fn``'s, logged as ``name``) under ``keyed``: the
        ``(key, signature)`` that ``key`` gave for the call it was traced from."""
        key, signature = keyed
        if key is None:
            log.debug("%s: kept in memory only: %s", name, signature)
            return
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


def _module_name(fn):
    """The module a function is keyed under. A script's functions are ``__main__`` in the
    script's process and ``__mp_main__`` in its multiprocessing children (the same file
    and code, which the key covers too): one name, so the children load its entries."""
    module = getattr(fn, "__module__", None)
    return "__main__" if module == "__mp_main__" else module


def _is_key(key):
    """A cache key as ``DiskCache.key`` makes them (64 hex digits): nothing else may name
    a file (a shipped name like ``../../x`` must not)."""
    return isinstance(key, str) and len(key) == 64 and all(
        char in "0123456789abcdef" for char in key)


def _read_stats(root, path):
    try:
        current = json.loads(root.read(path, limit=MAX_STATS_BYTES))
    except (OSError, Rejected, ValueError):
        return None
    return current if isinstance(current, dict) else None


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _dependencies(variant, fn):
    """The functions every path of ``variant`` passed through, other than ``fn`` itself
    (the key covers it), as ``dependency_of`` records them."""
    function = _unwrapped(fn)
    code = getattr(function, "__code__", None)
    top = (getattr(function, "__qualname__", None), getattr(code, "co_filename", None))
    found = {}
    for _, path in variant.root.walk():
        for qualname, file, source in path.functions:
            if source is None and is_tracejit(file):
                continue  # value_and_grad's wrapper: tracejit's version is in the key
            if source is None:
                raise serialize.NotSerializable(f"{qualname} has no readable source")
            if (qualname, file) != top and (qualname, file) not in found:
                found[(qualname, file)] = dependency_of(qualname, file)
    return [found[item] for item in sorted(found)]


def _stable_description(value):
    """A description of a captured value that is the same in every process, or one that
    never matches another process (so an unknown object can only miss, never collide)."""
    if serialize.is_json_value(value):
        return repr(value)
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if name is None:
        name = getattr(value, "__name__", None)
    if module and name and "<locals>" not in name:
        return f"{module}.{name}"
    if isinstance(value, np.ufunc):
        return f"numpy.{value.__name__}"
    if isinstance(value, np.ndarray):
        return "array"  # implicit inputs: their dtypes and shapes are keyed separately
    return f"{type(value).__name__}@{id(value)}:{os.getpid()}"


def _captured(fn):
    """Closure cells and default arguments: two closures with one source may capture
    different functions (make(np.exp) vs make(np.sin)) and must not share an entry."""
    function = getattr(fn, "__func__", fn)
    cells = []
    for name, cell in zip(getattr(function, "__code__", None).co_freevars if hasattr(
            function, "__code__") else (), getattr(function, "__closure__", None) or ()):
        try:
            cells.append([name, _stable_description(cell.cell_contents)])
        except ValueError:
            cells.append([name, "<empty>"])
    defaults = [_stable_description(value) for value in getattr(function, "__defaults__",
                                                                   None) or ()]
    return {"closure": cells, "defaults": defaults}


def _rewritten_source(fn):
    """What the front end made of the model's source (for ``tracejit cache show --source``)."""
    from tracejit.tracer.frontend import render

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


# --- the entry file format ---------------------------------------------------------------
def write_entry(root, path, header, body, blobs):
    body_bytes = json.dumps(body, sort_keys=True).encode()
    payload = zlib.compress(struct.pack("<Q", len(body_bytes)) + body_bytes + b"".join(blobs), 6)
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
