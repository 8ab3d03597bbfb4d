"""The on-disk compile cache: content-addressed, atomic, checksummed, no pickle.

Layout under ``TRACEJIT_CACHE_DIR`` (created with mode 0700)::

    v1/ab/<key>.tjc        one entry: a variant and every path of its trace tree
    v1/stats/<function>.json   counters persisted across processes (calls, exits, ...)
    v1/runtime-<key>.o     the thread pool's object code

An entry file is ``MAGIC | header length | header JSON | zlib(body JSON + blobs) |
sha256``. The header (function, signature, sizes) is enough to list entries; the body
holds the IR text, constants, object code and wrapper source. The key hashes tracejit's,
NumPy's and LLVM's versions, the CPU and its features, the function's source, the options
and the call signature; the entry also lists the source of every other Python function
the trace passed through, checked at load, so editing a helper invalidates it. Writes go
to a temp file renamed into place, so readers never see half an entry; a truncated,
corrupt or foreign entry is ignored and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import struct
import sys
import tempfile
import textwrap
import time
import zlib

import numpy as np

from codegen import llvm, parallel
from tracer.implicit import find_implicit_inputs

from . import serialize
from .autograd import is_grad_enabled
from .config import logger
from .tensor import unwrap
from .version import __version__

MAGIC = b"TJC1\n"
FORMAT = 1
log = logger("cache")


class CorruptEntry(Exception):
    pass


def function_source(fn):
    """The text that identifies a function's code: its source, or its bytecode."""
    function = getattr(fn, "__func__", fn)
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        if code is None:
            return repr(function)
        return code.co_code.hex() + repr(code.co_consts) + repr(code.co_names)


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def call_signature(jitted, leaves):
    """What the call looks like under the function's shape policy (``None``: a call whose
    compiled code cannot be shared across processes, e.g. an object argument)."""
    parts = []
    for index, leaf in enumerate(leaves):
        array = unwrap(leaf)
        if isinstance(array, np.ndarray):
            dynamic = jitted.policy(index, array)
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


class DiskCache:
    def __init__(self, directory):
        self.root = os.path.join(directory, "v1")
        parallel.set_object_store(self.load_object, self.save_object)

    # --- the thread pool's runtime object ---------------------------------------------------
    def load_object(self, key):
        try:
            with open(os.path.join(self.root, f"runtime-{key}.o"), "rb") as stream:
                data = stream.read()
        except OSError:
            return None
        body, checksum = data[:-32], data[-32:]
        return body if hashlib.sha256(body).digest() == checksum else None

    def save_object(self, key, object_code):
        with contextlib.suppress(OSError):
            self.ensure()
            _atomic_write(os.path.join(self.root, f"runtime-{key}.o"),
                          object_code + hashlib.sha256(object_code).digest())

    # --- paths ----------------------------------------------------------------------------
    def ensure(self):
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(self.root), 0o700)
            os.chmod(self.root, 0o700)

    def entry_path(self, key):
        return os.path.join(self.root, key[:2], key + ".tjc")

    def entries(self):
        if not os.path.isdir(self.root):
            return []
        found = []
        for shard in sorted(os.listdir(self.root)):
            folder = os.path.join(self.root, shard)
            if len(shard) != 2 or not os.path.isdir(folder):
                continue
            found.extend(os.path.join(folder, name) for name in sorted(os.listdir(folder))
                         if name.endswith(".tjc"))
        return found

    # --- keys -----------------------------------------------------------------------------
    def key(self, jitted, leaves):
        signature = call_signature(jitted, leaves)
        if signature is None:
            return None, None
        fn = jitted.fn
        identity = {
            "format": FORMAT,
            "tracejit": __version__,
            "numpy": np.__version__,
            "python": sys.version_info[:2],
            "host": llvm.host_description(),
            "function": {
                "module": getattr(fn, "__module__", None),
                "qualname": getattr(fn, "__qualname__", None),
                "source": function_source(fn),
            },
            "options": jitted.options.key_fields(),
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
    def load(self, jitted, leaves):
        key, _ = self.key(jitted, leaves)
        if key is None:
            return None
        path = self.entry_path(key)
        if not os.path.exists(path):
            log.debug("%s: no entry %s", jitted.__qualname__, key[:12])
            return None
        start = time.perf_counter()
        try:
            header, body = read_entry(path)
        except CorruptEntry as error:
            log.warning("%s: ignoring a corrupt cache entry %s (%s); it will be rebuilt",
                        jitted.__qualname__, path, error)
            return None
        if header.get("key") != key:
            log.warning("ignoring a foreign cache entry %s", path)
            return None
        stale = _stale_dependencies(body.get("dependencies", []))
        if stale:
            log.info("%s: cache entry %s is stale (%s changed); recompiling",
                     jitted.__qualname__, key[:12], stale)
            return None
        blobs = serialize.Blobs(body["blobs"])
        try:
            variant = serialize.variant_from_json(body["variant"], jitted.fn, blobs)
        except (serialize.NotSerializable, KeyError, ValueError) as error:
            log.info("%s: cache entry %s cannot be used here (%s)", jitted.__qualname__,
                     key[:12], error)
            return None
        variant.key = key
        log.info("%s: loaded %s from disk in %.1f ms (no tracing, no LLVM)",
                 jitted.__qualname__, key[:12], (time.perf_counter() - start) * 1e3)
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: prune keeps it
        return variant

    def store(self, jitted, variant, leaves):
        key, signature = self.key(jitted, leaves)
        if key is None:
            log.debug("%s: not cached on disk (an argument is an object)", jitted.__qualname__)
            return
        blobs = serialize.Blobs()
        try:
            payload = serialize.variant_to_json(variant, jitted.fn, blobs)
        except serialize.NotSerializable as error:
            log.debug("%s: not cached on disk: %s", jitted.__qualname__, error)
            return
        variant.key = key
        functions = {}
        for _, path in variant.root.walk():
            for qualname, file, source in path.functions:
                if source is not None:
                    functions[(qualname, file)] = source
        dependencies = [{"qualname": qualname, "file": file, "sha256": _digest(source)}
                        for (qualname, file), source in sorted(functions.items())]
        fn = jitted.fn
        header = {
            "key": key,
            "format": FORMAT,
            "tracejit": __version__,
            "function": getattr(fn, "__qualname__", repr(fn)),
            "module": getattr(fn, "__module__", None),
            "file": getattr(getattr(fn, "__code__", None), "co_filename", None),
            "signature": signature,
            "paths": variant.path_count,
            "kernels": sum(path.program.kernel_count for _, path in variant.root.walk()),
            "created": time.time(),
            "entry_guards": variant.spec.describe(),
        }
        body = {"variant": payload, "dependencies": dependencies,
                "model_source": _rewritten_source(fn),
                "blob_sizes": [len(part) for part in blobs.parts]}
        self.ensure()
        write_entry(self.entry_path(key), header, body, blobs.parts)
        log.info("%s: wrote %s", jitted.__qualname__, key[:12])

    # --- persisted counters ---------------------------------------------------------------
    def stats_path(self, function_name, module):
        return os.path.join(self.root, "stats", _digest(f"{module}:{function_name}")[:24] +
                            ".json")

    def add_counters(self, function_name, module, file, deltas):
        """Merge ``deltas`` into the function's persisted counters (under a file lock)."""
        if not any(_nonzero(value) for value in deltas.values()):
            return
        self.ensure()
        path = self.stats_path(function_name, module)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with _locked(path + ".lock"):
            try:
                with open(path) as handle:
                    current = json.load(handle)
            except (OSError, ValueError):
                current = {}
            current.update({"function": function_name, "module": module, "file": file})
            _merge(current, deltas)
            _atomic_write(path, json.dumps(current, sort_keys=True).encode())

    def persisted_stats(self):
        folder = os.path.join(self.root, "stats")
        if not os.path.isdir(folder):
            return []
        result = []
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                try:
                    with open(os.path.join(folder, name)) as handle:
                        result.append(json.load(handle))
                except (OSError, ValueError):
                    continue
        return result


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
    from tracer.frontend import render

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


@contextlib.contextmanager
def _locked(path):
    try:
        import fcntl
    except ImportError:  # not POSIX: counters may race, entries never do
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stale_dependencies(dependencies):
    """The first dependency whose source changed (or vanished), or ``None``."""
    import linecache

    for dependency in dependencies:
        source = _current_source(dependency["qualname"], dependency["file"])
        if source is None or _digest(source) != dependency["sha256"]:
            return f"{dependency['qualname']} in {dependency['file']}"
    linecache.checkcache()
    return None


def _current_source(qualname, file):
    """The current source text of ``qualname`` defined in ``file``."""
    import ast
    import linecache

    linecache.checkcache(file)
    lines = linecache.getlines(file)
    if not lines:
        return None
    text = "".join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    parts = [part for part in qualname.split(".") if part != "<locals>"]
    node = _find_definition(tree, parts)
    if node is None:
        return None
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    # The same block inspect.getsource finds, dedented as the front end stores it.
    return textwrap.dedent("".join(inspect.getblock(lines[first - 1 :])))


def _find_definition(tree, parts):
    candidates = [tree]
    for part in parts:
        found = None
        for parent in candidates:
            for node in ast_walk_definitions(parent):
                if getattr(node, "name", None) == part:
                    found = node
                    break
            if found:
                break
        if found is None:
            return None
        candidates = [found]
    return candidates[0]


def ast_walk_definitions(node):
    import ast

    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child


# --- the entry file format ---------------------------------------------------------------
def write_entry(path, header, body, blobs):
    body_bytes = json.dumps(body, sort_keys=True).encode()
    payload = zlib.compress(struct.pack("<Q", len(body_bytes)) + body_bytes + b"".join(blobs), 6)
    header_bytes = json.dumps(header, sort_keys=True).encode()
    content = MAGIC + struct.pack("<Q", len(header_bytes)) + header_bytes + payload
    _atomic_write(path, content + hashlib.sha256(content).digest())


def _atomic_write(path, data):
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_header(path):
    with open(path, "rb") as stream:
        start = stream.read(len(MAGIC) + 8)
        if len(start) < len(MAGIC) + 8 or not start.startswith(MAGIC):
            raise CorruptEntry("not a tracejit cache entry")
        (length,) = struct.unpack("<Q", start[len(MAGIC):])
        data = stream.read(length)
        if len(data) != length:
            raise CorruptEntry("truncated header")
    try:
        return json.loads(data)
    except ValueError as error:
        raise CorruptEntry(f"unreadable header: {error}") from None


def read_entry(path):
    """``(header, body)`` with ``body["blobs"]`` as a list of bytes; ``CorruptEntry`` if
    the file is truncated, altered or not an entry."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        raise CorruptEntry(str(error)) from None
    if len(data) < len(MAGIC) + 8 + 32 or not data.startswith(MAGIC):
        raise CorruptEntry("not a tracejit cache entry")
    content, checksum = data[:-32], data[-32:]
    if hashlib.sha256(content).digest() != checksum:
        raise CorruptEntry("checksum mismatch (truncated or modified)")
    (header_length,) = struct.unpack("<Q", content[len(MAGIC) : len(MAGIC) + 8])
    header_end = len(MAGIC) + 8 + header_length
    try:
        header = json.loads(content[len(MAGIC) + 8 : header_end])
        payload = zlib.decompress(content[header_end:])
        (body_length,) = struct.unpack("<Q", payload[:8])
        body = json.loads(payload[8 : 8 + body_length])
    except (ValueError, zlib.error, struct.error) as error:
        raise CorruptEntry(f"unreadable entry: {error}") from None
    blobs, offset = [], 8 + body_length
    for size in body.get("blob_sizes", []):
        blobs.append(payload[offset : offset + size])
        offset += size
    body["blobs"] = blobs
    return header, body

