"""Compiles that never block a call: ``jit(compile="background")``.

The first call of a new variant is traced on the caller's thread, as always, and returns
the trace's result (the trace computes with NumPy on the real values, so that *is* the
eager result). The compile (scheduling, lowering and LLVM) is handed to one daemon thread
per process. Calls that arrive before it is ready and would take that variant run the
function eagerly; once the variant is published they run native code. A side exit's path
is grown the same way. So no call waits for LLVM:

>>> import numpy as np
>>> from tracejit import jit
>>> @jit(compile="background", cache=False)
... def scale(x):
...     return x * 2 + 1
>>> scale(np.ones(3))          # traced; the compile is queued
array([3., 3., 3.])
>>> wait_idle(timeout=60)      # only tests and benchmarks wait; calls never do
True
>>> scale(np.ones(3)), scale.stats()["compiled_calls"]
(array([3., 3., 3.]), 1)

What the thread shares with callers, and why it cannot race:

* a function's variants are an immutable tuple that the thread replaces under the
  function's lock (held for microseconds: never across a compile), so a call reads either
  the old tuple or the new one;
* the disk cache key of a variant is computed on the caller's thread when the call is
  traced: a later call can make a dim dynamic, and the key must describe what was traced;
* entries are written through ``cache_trust`` (temp file, lock, rename), so readers in
  this and other processes see a whole entry or none;
* LLVM's optimizer runs under ``codegen.llvm``'s compile lock, and linking object code
  (a warm start from disk) under another, so a warm start never queues behind a compile.

At interpreter exit the queue is dropped and the one compile in progress, if any, is
waited for (up to ``EXIT_WAIT_SECONDS``), so no entry is half written and LLVM is not torn
down under a running thread; the thread is a daemon and never keeps a process alive by
itself. ``os.fork`` (a ``multiprocessing`` pool on Linux) waits for the compile in
progress, and the queue stays paused across the fork: a child must not inherit a lock
(LLVM's, a function's) held by a thread that does not exist there. In the child the
parent's queued compiles are forgotten and the next call traces again.

How much of a compile lets the calling thread run: the Python part (scheduling, lowering
to LLVM IR text, building the wrapper) holds the GIL; LLVM's optimizer and code generator
run in C++ through ctypes, which releases it. Measured once on the shared 2-core machine
(MLP train step 512x784->1024->10): "schedule+lower" took 0.08 s of a 0.67 s compile, and
while ``llvm.compile_module`` ran on another thread a Python loop on the calling thread
kept 90-96% of its solo speed, so nearly all of LLVM's time releases the GIL.
"""

from __future__ import annotations

import atexit
import collections
import os
import threading
from dataclasses import dataclass

from tracejit.codegen import llvm as codegen_llvm
from tracejit.tracer import pytree

from . import diagnostics
from .config import logger
from .guards import EntrySpec, compile_guard
from .variants import Variant

EXIT_WAIT_SECONDS = 30.0  # the longest single-module compile we have seen is ~3 s
log = logger("recompiles")


@dataclass(eq=False)
class Pending:
    """A variant being compiled: its entry guard (calls it accepts run eagerly meanwhile)."""

    spec: object
    guard: object
    generation: int  # the function's reset() count when it was traced
    bucket_sibling: bool = False  # another bucket of a variant (jit.py: not counted)
    error: BaseException | None = None  # fallback="raise": the next such call raises it


# --- what jit calls ------------------------------------------------------------------------
def pending_reason(jitted, args, kwargs):
    """``"compiling in the background"`` when a variant being compiled takes this call
    (it runs eagerly), else ``None``. With ``fallback="raise"`` a failed compile is raised
    here, at the next call that variant would have taken."""
    for pending in jitted._pending:
        if pending.guard(args, kwargs) is None:
            continue
        if pending.error is not None:
            _forget(jitted, pending)
            raise pending.error
        return "compiling in the background"
    return None


def compile_variant_later(jitted, traced, signature, args, kwargs, bucket_sibling=False):
    """Queue the compile of a new variant from ``traced``; return the call's result (the
    trace's, or an eager run when the result must carry an autograd graph)."""
    leaves = pytree.flatten((args, kwargs))[0]
    spec = EntrySpec.from_trace(traced)
    pending = Pending(spec, compile_guard(spec, draws=False), jitted._generation,
                      bucket_sibling)
    key = _disk_key(jitted, leaves)
    jitted._pending = jitted._pending + (pending,)
    _compiler().submit(lambda: _build_variant(jitted, pending, traced, signature, key),
                       f"{jitted.__qualname__} variant")
    return result_now(jitted, traced, args, kwargs)


def grow_later(jitted, variant, path, guard_index, traced, signature, args, kwargs):
    """Queue the compile of the path a hot side exit took; calls leaving through that
    guard run eagerly until it hangs under the guard."""
    leaves = pytree.flatten((args, kwargs))[0]
    marker = (id(path), guard_index)
    jitted._growing.add(marker)
    key = _disk_key(jitted, leaves)
    generation = jitted._generation
    _compiler().submit(
        lambda: _build_path(jitted, variant, path, guard_index, marker, traced, signature,
                            key, generation),
        f"{jitted.__qualname__} path")
    return result_now(jitted, traced, args, kwargs)


def wait_idle(timeout=None):
    """Block until every queued compile of this process has finished (``False`` if
    ``timeout`` seconds passed first). For tests, benchmarks and scripts that want native
    code from the next call on; calls themselves never wait."""
    return _compiler().wait_idle(timeout)


# --- the work done on the compile thread ----------------------------------------------------
def _build_variant(jitted, pending, traced, signature, key):
    if pending.generation != jitted._generation:
        return  # reset() while it waited in the queue: reset() dropped it already
    try:
        path = jitted._compile_path(traced, signature)
    except Exception as error:  # fallback="raise" re-raises compiler errors: keep it
        pending.error = error
        log.warning("%s: background compile failed", jitted.__qualname__, exc_info=True)
        return
    except BaseException:  # interrupted: its calls must not wait for it forever, eagerly
        _forget(jitted, pending)  # (the next such call traces and queues it again)
        raise
    with jitted._lock:
        _forget(jitted, pending)
        if path is None or pending.generation != jitted._generation:
            return  # not compiled (the reason is in explain()), or reset() meanwhile
        if not pending.bucket_sibling and not jitted._room():
            jitted._warn_limit("a variant compiled in the background arrived at the limit")
            return
        variant = Variant(pending.spec, pending.guard, path,
                          bucket_sibling=pending.bucket_sibling)
        jitted._add_variant(variant)
        jitted._made = jitted._made + (variant,)
        log.info("%s: compiled variant %d in the background", jitted.__qualname__,
                 len(jitted._variants))
    _store(jitted, variant, key)


def _build_path(jitted, variant, path, guard_index, marker, traced, signature, key,
                generation):
    if generation != jitted._generation:
        return
    try:
        child = jitted._compile_path(traced, signature)
    except Exception:
        log.warning("%s: background compile failed", jitted.__qualname__, exc_info=True)
        child = None
    except BaseException:  # interrupted: the exit grows again when next hot
        with jitted._lock:
            jitted._growing.discard(marker)
        raise
    with jitted._lock:
        jitted._growing.discard(marker)
        if child is None or generation != jitted._generation:
            return
        path.children[guard_index] = child
        log.info("%s: compiled another path in the background", jitted.__qualname__)
    _store(jitted, variant, key)


def _store(jitted, variant, key):
    if key is not None:
        jitted._store_to_disk(variant, None, key=key)


def _disk_key(jitted, leaves):
    """The entry's ``(key, signature, opened)`` as the policy stands now (the trace's), or
    None."""
    if jitted._cache is None:
        return None
    try:
        keyed = jitted._disk_key(leaves)
    except Exception as error:  # a broken cache never breaks the call
        logger("cache").warning("%s: no disk cache key: %s", jitted.__qualname__, error)
        return None
    return keyed if keyed[0] is not None else None


def result_now(jitted, traced, args, kwargs, reason="compiling in the background"):
    """The call's result when its variant is not compiled now: the trace's, or an eager
    run (a result carrying an autograd graph, or an undecided trace) noted as ``reason``."""
    from .jit import _plain_result

    if traced.gradients is not None or traced.undecided:
        # Tensors that require grad: the result must carry an autograd graph, which the
        # trace's plain values do not; the eager run records one. Undecided: the trace
        # computed no result (a decision it took may not be eager's).
        traced.rewind_draws()  # the eager run draws them again
        return jitted._run_eager(args, kwargs, reason)
    jitted._counters["traced_calls"] += 1
    return _plain_result(traced, args, kwargs)


def _forget(jitted, pending):
    with jitted._lock:  # a caller may be adding another pending variant meanwhile
        jitted._pending = tuple(item for item in jitted._pending if item is not pending)


# --- the thread ---------------------------------------------------------------------------
class Compiler:
    """One daemon thread running queued compiles in order."""

    def __init__(self):
        self._jobs = collections.deque()
        self._condition = threading.Condition()
        self._busy = False
        self._closing = False
        self._paused = 0  # forks in progress: no compile may start
        self._thread = None

    def submit(self, job, label):
        with self._condition:
            if self._closing:
                return  # interpreter exit: the call already has its result
            self._jobs.append((job, label))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="tracejit-compile")
                self._thread.start()
            self._condition.notify_all()

    def _run(self):
        codegen_llvm.compile_on_this_thread_only()
        while True:
            with self._condition:
                while (not self._jobs or self._paused) and not self._closing:
                    self._condition.wait()
                if self._closing:
                    return
                job, label = self._jobs.popleft()
                self._busy = True
            try:
                job()
            except BaseException:  # never let one compile end the thread
                log.warning("background compile of %s failed", label, exc_info=True)
            finally:
                with self._condition:
                    self._busy = False
                    self._condition.notify_all()

    def wait_idle(self, timeout=None):
        with self._condition:
            return self._condition.wait_for(
                lambda: (not self._jobs or self._closing) and not self._busy, timeout)

    def close(self, timeout=EXIT_WAIT_SECONDS):
        """Drop queued compiles and wait for the one in progress (interpreter exit)."""
        with self._condition:
            self._closing = True
            dropped = len(self._jobs)
            self._jobs.clear()
            self._condition.notify_all()
            finished = self._condition.wait_for(lambda: not self._busy, timeout)
        if dropped:
            log.info("interpreter exit: %d queued background compile(s) dropped", dropped)
        return finished

    def pause(self, timeout=EXIT_WAIT_SECONDS):
        """Let the compile in progress finish and start no other until ``resume()``."""
        with self._condition:
            self._paused += 1
            if threading.current_thread() is self._thread:
                return True  # a compile that forks: it holds what it holds either way
            return self._condition.wait_for(lambda: not self._busy, timeout)

    def resume(self):
        with self._condition:
            self._paused -= 1
            self._condition.notify_all()


_instance = None
_instance_lock = threading.Lock()


def _compiler():
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = Compiler()
            atexit.register(_instance.close)
        return _instance


# --- fork ------------------------------------------------------------------------------------
def _before_fork():
    if _instance is not None and not _instance.pause():
        log.warning("fork while a background compile ran for %.0f s: the child may find "
                    "LLVM's lock taken", EXIT_WAIT_SECONDS)


def _after_fork_in_parent():
    if _instance is not None:
        _instance.resume()


def _after_fork_in_child():
    global _instance, _instance_lock
    _instance = None  # the parent's thread does not exist here; a new one starts on demand
    _instance_lock = threading.Lock()
    for jitted in diagnostics.live_functions():  # the parent's queue never runs here
        jitted._pending = ()
        jitted._growing = set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
