"""What a disk cache entry is filed under: the call, the function's file and code, and
everything else that changes the compiled code.

The key (``cache_key``) hashes tracejit's version and its own source, NumPy's and LLVM's
versions, the CPU and its features, the options, the call signature and the function: its
defining file (resolved path and content hash) and its code, what its closure and defaults
capture, and the dtypes and shapes of the arrays it reads from outside. An entry also lists
every other function the trace passed through (``dependency_of``), by module and name; a
load resolves each one *in this process* (``stale_dependency``) and compares its file (path
and content) and code with what the writer saw. A function without readable source has no
key (``source_identity`` is None): it is cached in memory only.

>>> code_digest(code_digest.__code__) == code_digest(code_digest.__code__)
True
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
import threading
import time

import numpy as np

from tracejit.codegen import llvm
from tracejit.tracer.abstract import is_numpy_number
from tracejit.tracer.implicit import find_implicit_inputs
from tracejit.tracer.locations import is_tracejit

from . import object_arguments, serialize
from .autograd import is_grad_enabled
from .cache_entries import FORMAT
from .tensor import unwrap
from .version import __version__

_file_digests = {}  # (path, size, mtime_ns, inode) -> sha256 of the file's bytes
_file_digests_lock = threading.Lock()


def file_digest(path):
    """sha256 of the file at ``path`` (resolved), or ``None`` if it is not readable source."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):  # os.path.isfile's test, without a second stat
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


def _python_files(root):
    """``[(path relative to root, path)]`` of every ``.py`` under ``root``, sorted (one
    ``scandir`` per folder: ``os.walk`` and ``relpath`` cost as much as the hashing)."""
    found, folders = [], [("", root)]
    while folders:
        relative, folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append((relative + entry.name + os.sep, entry.path))
                elif entry.name.endswith(".py"):
                    found.append((relative + entry.name, entry.path))
    return sorted(found)


def tracejit_code_digest(store=None):
    """A digest of tracejit's own source (every .py of tracer/, codegen/, runtime/): an
    entry compiled by other tracejit code (a fix to a kernel or a rule since) is another
    key, even under the same version number. Once per process, and hashed once per
    install: reading and hashing the ~150 files cost every warm start ~4 ms, so ``store``
    (a ``DiskCache``) keeps the digest with a stamp of the files' names and ``stat``
    identities (size, mtime, ctime, inode; ~0.5 ms to take). An edited, added or removed
    file changes the stamp, so it is hashed again. One thread takes it, another waits
    (the per-machine objects' keys hold it too, asked on ``link_ahead``'s thread)."""
    if not _own_code:
        with _own_code_lock:
            if not _own_code:
                _take_code_digest(store)
    return _own_code[0]


_own_code_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a child forked while another thread held it
    os.register_at_fork(after_in_child=lambda: globals().update(
        _own_code_lock=threading.Lock()))


def _take_code_digest(store):
    files = []
    for module in (sys.modules["tracejit.tracer"], llvm, sys.modules[__name__]):
        root = os.path.dirname(os.path.abspath(module.__file__))
        files += [(root, relative, path) for relative, path in _python_files(root)]
    stamp = _files_stamp(files) if store is not None else None
    stored = store.load_code_digest(stamp) if stamp is not None else None
    if stored is not None and _HEX_DIGEST.fullmatch(stored):
        _own_code.append(stored)
    else:
        _own_code.append(_hashed_digest(files))
        # stored only if no file changed while it was hashed (not a torn edit)
        if stamp is not None and stamp == _files_stamp(files):
            store.save_code_digest(stamp, _own_code[0])


def _files_stamp(files):
    """What the files are now, by ``stat`` alone: the key their digest is stored under.
    ctime is in it as the kernel sets it (an edit that restores size and mtime still
    moves it). ``None`` (nothing stored or looked up) when a file cannot be stat'ed or
    changed in the last ``_SETTLE_NS``: file times are coarse (a clock tick), so two
    same-size edits that close together could share a stamp (git's "racy clean" case)."""
    stamp = hashlib.sha256(b"tracejit code digest\0")
    settled = time.time_ns() - _SETTLE_NS
    for root, relative, path in files:
        try:
            info = os.stat(path)
        except OSError:
            return None
        if max(info.st_mtime_ns, info.st_ctime_ns) > settled:
            return None
        stamp.update(repr((root, relative, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
                           info.st_ino)).encode() + b"\0")
    return stamp.hexdigest()[:32]


def _hashed_digest(files):
    digest = hashlib.sha256()
    for _, relative, path in files:
        digest.update(relative.encode())
        digest.update((file_digest(path) or "").encode())
    return digest.hexdigest()


_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_SETTLE_NS = 2 * 10**9


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


_module_files = (None, {})  # (state of sys.modules, {file name: [(module, file)]})
# os.path.basename where one separator splits paths: a string method, not posixpath's
# Python (indexing the ~450 modules of a plain process cost a first store 0.8 ms, half
# of it basename).
_basename = os.path.basename if os.altsep else (lambda path: path.rpartition(os.sep)[2])


def _modules_named_like(base):
    """``[(module name, file)]`` of the imported modules whose file is called ``base``.
    Indexed once per state of ``sys.modules`` (its size and newest name): a store asks
    for every function a trace passed through, and a scan of 800 modules (jax loaded)
    took 1.4 ms each time. A stale index can only miss a module (the entry then stays
    in memory) or name one that is gone (``_resolve`` finds nothing): never a wrong one."""
    global _module_files
    modules = sys.modules
    stamp = (len(modules), next(reversed(modules), None))
    known, by_base = _module_files
    if known != stamp:
        by_base = {}
        for name, module in list(modules.items()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                by_base.setdefault(_basename(file), []).append((name, file))
        _module_files = (stamp, by_base)  # one assignment: a thread sees old or new
    return by_base.get(base, [])


def _modules_defined_in(path):
    """Names of the imported modules whose file is ``path`` (resolved)."""
    return [name for name, file in _modules_named_like(os.path.basename(path))
            if file == path or os.path.realpath(file) == path]


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


def number_positions(leaves):
    """Positions of the number leaves (int, float, a NumPy number; not bool) that a variant
    may take as run-time inputs (``LeafSpec`` kind ``"scalar"``): an *open* key leaves their
    values out (``cache_key``)."""
    return [index for index, leaf in enumerate(leaves)
            if type(leaf) in (int, float) or (is_numpy_number(leaf) and
                                               not isinstance(leaf, np.bool_))]


def takes_numbers_at_run_time(variant, positions):
    """Whether ``variant``'s entry guard takes every number leaf at ``positions`` as a
    run-time input (none pinned by value): then its entry applies to any of their values
    that the guard accepts, and is filed under the open key."""
    leaves = variant.spec.leaves
    return bool(positions) and all(
        index < len(leaves) and leaves[index].kind == "scalar" for index in positions)


def call_signature(policy, leaves, open_numbers=()):
    """What the call looks like under the function's shape ``policy`` (``None``: a call
    whose compiled code cannot be shared across processes, e.g. an object argument).
    The leaves at ``open_numbers`` are ``["any", type name]``: their values left out."""
    parts = []
    for index, leaf in enumerate(leaves):
        if index in open_numbers:
            parts.append(["any", type(leaf).__name__])
            continue
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
        elif is_numpy_number(leaf):
            parts.append([type(leaf).__name__, leaf.item()])
        elif (address := object_arguments.class_address(leaf)) is not None:
            parts.append(["object", address["module"], address["qualname"]])
        else:
            return None
    return parts


def cache_key(fn, options, policy, leaves, open_numbers=()):
    """``(key, signature)`` of a call of ``fn`` with ``leaves`` under ``options`` and
    the shape ``policy``; ``(None, reason)`` for a call that stays in memory. The *open*
    key (``open_numbers``: ``number_positions``) leaves those numbers' values out: it
    files an entry whose guard takes them all at run time (a training function's
    ``lr`` and ``num_iterations``), found by a call with any values. Loading one is safe
    whatever the values: ``Misses._miss`` runs a loaded variant only where its entry
    guard accepts the call, as a variant compiled in this process."""
    signature = call_signature(policy, leaves, frozenset(open_numbers))
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


def _module_name(fn):
    """The module a function is keyed under. A script's functions are ``__main__`` in the
    script's process and ``__mp_main__`` in its multiprocessing children (the same file
    and code, which the key covers too): one name, so the children load its entries."""
    module = getattr(fn, "__module__", None)
    return "__main__" if module == "__mp_main__" else module


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
