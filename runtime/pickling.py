"""Jit functions travel: how a ``JitFunction`` pickles, for multiprocessing and Dask.

A jit function holds native code, locks and counters, none of which can cross a process
boundary; what crosses is *which function, with which options*. The receiving process
builds its own ``JitFunction`` (options re-read from *its* environment, so
``TRACEJIT_CACHE_DIR`` is the worker's) and warm-starts from its disk cache or compiles.

* **By reference** when the function's module imports it under its name (a module-level
  ``@jit`` function, a jit method of a module-level class): the pickle holds
  ``module.qualname``, as for any function, and unpickling finds the module's own object.
* **By value** otherwise (closures, lambdas, jit of a bound method or of a function its
  module names otherwise, modules registered with ``cloudpickle.register_pickle_by_value``,
  and ``__main__`` when cloudpickle is installed, since a Dask worker cannot import the
  client's script): the wrapped function is pickled with cloudpickle when it is installed
  (as Dask does), else with ``pickle``. Without cloudpickle a ``__main__`` function goes by
  reference, which ``multiprocessing`` resolves in its children as it does for any
  function of the main script. The
  receiving process keeps what it rebuilt under a digest of those bytes and the options,
  so a function sent with every task is rebuilt once per process, not once per task; and a
  round trip inside one process gives back the original object.

>>> import pickle
>>> from tracejit import jit
>>> from tracejit.runtime.functional import grad
>>> sent = jit(grad)              # not what its module calls `grad`: pickled by value
>>> pickle.loads(pickle.dumps(sent)) is sent      # a round trip within one process
True
"""

from __future__ import annotations

import collections
import functools
import hashlib
import io
import os
import pickle
import sys
import threading
import types
import uuid
import weakref

USER_OPTIONS = ("dynamic", "buckets", "max_variants", "hot_exit", "cache", "fallback",
                "check", "static_argnames", "static_argnums", "loops", "compile")
_DYNAMIC_CODE = "<dynamic-code>"  # cloudpickle's file name for code it pickles by value
KEEP_REBUILT = 256  # by-value functions a process keeps (the least recently sent go first)

_lock = threading.RLock()  # unpickling a function may unpickle another jit function
_rebuilt = collections.OrderedDict()  # digest -> JitFunction rebuilt in this process
_sent = weakref.WeakValueDictionary()  # digest -> JitFunction pickled by this process
_state = threading.local()  # tokens being pickled / rebuilt on this thread (recursion)


def reduce_jit(jitted):
    """``JitFunction.__reduce__``: a global name, or how to rebuild it by value."""
    if _importable(jitted):
        return jitted.__qualname__  # pickle stores module + qualname and checks the lookup
    token = _token(jitted)
    reducing = _thread_set("reducing")
    if token in reducing:  # the function refers to itself (recursion through a global)
        return _reference, (token,)
    reducing.add(token)
    try:
        function_bytes = _dumps(jitted.fn)
    finally:
        reducing.discard(token)
    options = {name: getattr(jitted.options, name) for name in USER_OPTIONS}
    digest = hashlib.sha256(function_bytes + repr(sorted(options.items())).encode())
    digest = digest.hexdigest()
    _sent[digest] = jitted
    return _rebuild, (digest, token, function_bytes, options)


def _rebuild(digest, token, function_bytes, options):
    """Unpickle a by-value jit function: the one this process already has for ``digest``,
    else a new ``JitFunction`` over the unpickled function with this process's options."""
    from .config import Options
    from .jit import JitFunction

    with _lock:
        known = _rebuilt.get(digest) or _sent.get(digest)
        if known is not None:
            _rebuilt[digest] = known
            _rebuilt.move_to_end(digest)
            return known
        shell = JitFunction.__new__(JitFunction)  # what a recursive reference resolves to
        building = _thread_dict("building")
        building[token] = shell
        try:
            function = pickle.loads(function_bytes)
        finally:
            building.pop(token, None)
        shell.__init__(function, Options.build(**options))
        shell._pickle_token = token
        _rebuilt[digest] = shell
        while len(_rebuilt) > KEEP_REBUILT:
            _rebuilt.popitem(last=False)
        return shell


def _reference(token):
    """A jit function's reference to itself, inside its own by-value pickle."""
    shell = _thread_dict("building").get(token)
    if shell is None:
        raise pickle.UnpicklingError("a jit function's self-reference outside its pickle")
    return shell


def rebuilt_functions():
    """The by-value jit functions this process has rebuilt (``tracejit.dask`` reports
    their counters)."""
    with _lock:
        return list(_rebuilt.values())


def _importable(jitted):
    module_name = getattr(jitted, "__module__", None)
    qualname = getattr(jitted, "__qualname__", "")
    if module_name is None or "<" in qualname:
        return False
    if module_name in ("__main__", "__mp_main__") and _has_cloudpickle():
        return False
    if _registered_by_value(module_name):
        return False
    value = sys.modules.get(module_name)
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value is jitted


def _has_cloudpickle():
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        return False
    return True


def _registered_by_value(module_name):
    cloudpickle = sys.modules.get("cloudpickle")
    registered = getattr(cloudpickle, "list_registry_pickle_by_value", None)
    try:
        names = registered() if registered else ()
    except Exception:  # an older cloudpickle: nothing registered that we can see
        names = ()
    return any(module_name == name or module_name.startswith(name + ".") for name in names)


def _dumps(function):
    try:
        pickler = _pickler_class()
    except ImportError:
        try:
            return pickle.dumps(function)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise pickle.PicklingError(
                f"cannot pickle {function!r} by value ({error}); install cloudpickle "
                "(pip install 'tracejit[dask]') to send closures and lambdas") from error
    with io.BytesIO() as stream:
        pickler(stream, protocol=pickle.DEFAULT_PROTOCOL).dump(function)
        return stream.getvalue()


@functools.lru_cache(maxsize=None)
def _pickler_class():
    """cloudpickle's pickler, but code objects keep their file name when the receiving
    process has the same file. cloudpickle writes ``<dynamic-code>`` instead (so that
    payloads do not depend on paths); the receiving process would then find no source: no
    source rewrite, no disk cache key, so no warm start from shipped entries. With the path
    kept, a worker that has the same file (the same machine, or the same deployment) reads
    the source and computes the client's key.

    The front end rewrites a function from the source in its file, so a worker whose file
    at that path differs (another version of the script) must not read it: the sender
    records the file's sha256 and the receiver keeps the name only if its file has that
    digest (``_code_with_checked_file``), else the code gets ``<dynamic-code>`` as
    cloudpickle would have given it (no source: it is traced without a rewrite or runs
    eagerly, and is cached in memory only)."""
    import cloudpickle

    from .cache import file_digest

    reduce_code = cloudpickle.Pickler.dispatch_table.get(types.CodeType)
    if reduce_code is None:  # a cloudpickle we do not know: its own pickler, names dropped
        return cloudpickle.Pickler

    def reduce_keeping_filename(code):
        rebuild, arguments = reduce_code(code)
        if not os.path.isabs(code.co_filename) or _DYNAMIC_CODE not in arguments:
            return rebuild, arguments
        digest = file_digest(os.path.realpath(code.co_filename))
        if digest is None:
            return rebuild, arguments
        position = arguments.index(_DYNAMIC_CODE)
        arguments = (*arguments[:position], code.co_filename, *arguments[position + 1:])
        return _code_with_checked_file, (rebuild, arguments, position, digest)

    class KeepFilenames(cloudpickle.Pickler):
        dispatch_table = collections.ChainMap({types.CodeType: reduce_keeping_filename},
                                              cloudpickle.Pickler.dispatch_table)

    return KeepFilenames


def _code_with_checked_file(rebuild, arguments, position, digest):
    """Unpickle a code object under its file name if this process's file at that path has
    the sender's ``digest``, else under ``<dynamic-code>`` (see ``_pickler_class``)."""
    from .cache import file_digest

    filename = arguments[position]
    if not isinstance(filename, str) or not os.path.isabs(filename) or file_digest(
            os.path.realpath(filename)) != digest:
        arguments = (*arguments[:position], _DYNAMIC_CODE, *arguments[position + 1:])
    return rebuild(*arguments)


def _token(jitted):
    token = getattr(jitted, "_pickle_token", None)
    if token is None:
        token = jitted._pickle_token = uuid.uuid4().hex
    return token


def _thread_set(name):
    if not hasattr(_state, name):
        setattr(_state, name, set())
    return getattr(_state, name)


def _thread_dict(name):
    if not hasattr(_state, name):
        setattr(_state, name, {})
    return getattr(_state, name)
