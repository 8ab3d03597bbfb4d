"""``jit``: trace on the real inputs, compile per shape bucket, guard, fall back to eager.

>>> import numpy as np
>>> @jit
... def dynamic_graph_example(x):
...     if x.sum() > 0:
...         y = x * 2
...     else:
...         y = x - 2
...     return y
>>> dynamic_graph_example(np.array([1.0, -1.0, 2.0]))
array([ 2., -2.,  4.])
>>> dynamic_graph_example(np.array([-3.0, -2.0, -1.0]))   # guard fails: eager, right answer
array([-5., -4., -3.])
>>> dynamic_graph_example.stats()["eager_calls"]
{'side exit': 1}
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import sys
import threading
import types
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from tracejit import codegen
from tracejit.codegen import gc_pause, parallel
from tracejit.codegen.exit_codes import exit_reason
from tracejit.codegen.lowering import LAYOUT_EXIT
from tracejit.codegen.narrow_results import (
    NARROW_CAST_OUT_OF_RANGE,
    NARROW_RANGE_DETAIL,
    NARROW_RANGE_REASON,
)
from tracejit.tracer import pytree
from tracejit.tracer.errors import TracejitError

from . import background, diagnostics
from .config import Options, logger
from .guards import MISS, compile_entry
from .misses import Misses, _overlapping, _repeated_containers
from .misses import _plain_result as _plain_result  # runtime/background.py imports it here
from .shape_policy import ShapePolicy
from .variants import _identity

log_recompiles = logger("recompiles")


_Function = TypeVar("_Function", bound=Callable[..., Any])


# The options as IDEs and type checkers see them (Options.build checks them at run time).
@overload
def jit(fn: _Function, *, dynamic: bool | Literal["auto"] = ...,
        buckets: Literal["pow2"] | Sequence[int] | Mapping[str, Any] = ...,
        max_variants: int = ..., hot_exit: int = ..., cache: bool | Literal["memory"] = ...,
        fallback: Literal["eager", "raise"] = ..., check: bool = ...,
        static_argnames: str | Sequence[str] = ..., static_argnums: int | Sequence[int] = ...,
        loops: Literal["capture", "unroll"] = ...,
        compile: Literal["auto", "sync", "background"] = ...) -> JitFunction: ...


@overload
def jit(fn: None = None, *, dynamic: bool | Literal["auto"] = ...,
        buckets: Literal["pow2"] | Sequence[int] | Mapping[str, Any] = ...,
        max_variants: int = ..., hot_exit: int = ..., cache: bool | Literal["memory"] = ...,
        fallback: Literal["eager", "raise"] = ..., check: bool = ...,
        static_argnames: str | Sequence[str] = ..., static_argnums: int | Sequence[int] = ...,
        loops: Literal["capture", "unroll"] = ...,
        compile: Literal["auto", "sync", "background"] = ...
        ) -> Callable[[_Function], JitFunction]: ...


def jit(fn=None, **options):
    """Compile ``fn`` with tracejit: ``@jit`` or ``@jit(dynamic=True, ...)``.

    Options: ``dynamic`` ("auto" | True | False), ``buckets`` ("pow2" | edges | dict),
    ``max_variants`` (8), ``hot_exit`` (2), ``cache`` (True | "memory" | False),
    ``fallback`` ("eager" | "raise"), ``check`` (False | True), ``static_argnames`` /
    ``static_argnums`` (specialize by value), ``loops`` ("capture" | "unroll"),
    ``compile`` ("auto" | "sync" | "background": a new variant's first call returns the
    traced result, or runs eagerly when a decision the trace took may not be eager's, and
    LLVM runs on a daemon thread; calls before it is ready run eagerly. "auto" waits for
    a compile unless it is estimated long (then background) or minutes long (then the
    calls run eagerly, with a warning), and stops compiling in a recompile storm:
    ``runtime/compile_policy.py``; "sync" always waits).

    A jit function pickles (by reference when its module imports it, else by value with
    cloudpickle), so it runs in ``multiprocessing`` and Dask tasks; see ``tracejit.dask``.
    """
    built = Options.build(**options)
    if fn is None:
        return lambda function: JitFunction(function, built)
    return JitFunction(fn, built)


def open_disk_cache(options):
    """The disk cache ``options`` names, for a jit function. The thread pool's runtime and
    the GEMM, compiled once per machine, are kept in it too: codegen is handed its
    ``load_object``/``save_object`` here, where a function chooses its cache (a
    ``DiskCache`` made to list or prune entries changes nothing in codegen)."""
    from .cache import DiskCache  # not at import: most calls never touch the disk
    from .cache_key import tracejit_code_digest

    cache = DiskCache(options.cache_dir, options.cache_max)
    # keyed by tracejit's own-code digest (a call's cache key has taken it already)
    parallel.set_object_store(cache.load_object, cache.save_object,
                              lambda: tracejit_code_digest(cache))
    return cache


class JitFunction(Misses):
    """A function compiled by tracejit. Call it like the function; see ``stats()`` and
    ``explain()`` for what ran compiled and why anything ran eagerly."""

    _binds = True  # (a shell being unpickled, before __init__)

    def __init__(self, fn, options):
        functools.update_wrapper(self, fn)
        _combine_dict(self)
        if not hasattr(self, "__qualname__"):  # a callable object: a layer with __call__
            self.__name__ = self.__qualname__ = type(fn).__qualname__
        self.fn = fn
        # Binds to an instance as a class attribute only where Python would bind ``fn``: a
        # function does, a ufunc, a partial or a callable object (a layer) does not.
        self._binds = hasattr(type(fn), "__get__")
        self._variants = ()
        self._entries = ()  # the variants' hit paths (guards.compile_entry), in order
        self.options = options
        self.policy = ShapePolicy(options, fn)
        # argument shapes -> the variant that accepted them last (its guard is still
        # checked: the hint only orders the search when there are many buckets)
        self._hints = {}
        self._lock = threading.RLock()
        self._untraceable = {}
        self._failed_traces = set()  # signatures a trace failed for once (misses)
        self._warned_limit = False
        self._counters = Counter()
        self.calls = 0  # a plain int: the hit path counts it (compiled calls: on the paths)
        self._eager = Counter()  # short reason -> eager calls
        self._eager_reasons = {}  # short reason -> its latest full text
        self._side_exits = Counter()
        self._reasons = {}
        self._loop_notes = {}  # "loop at f.py:7 unrolled: why", from the traces (explain)
        self._compile_seconds = 0.0
        self._pending = ()  # variants compiling in the background (runtime/background.py)
        self._growing = set()  # (id(path), guard index) of paths compiling in the background
        self._generation = 0  # reset() count: a background compile of before is dropped
        self._cache = open_disk_cache(options) if options.disk_cache else None
        diagnostics.register(self)

    @property
    def __tracejit_inline__(self):
        """What a trace that calls this function records instead (its own ops, in the
        caller's trace: tracejit.tracer.frontend.Hooks.function_for)."""
        return self.fn

    def __get__(self, instance, owner):
        if instance is None or not self._binds:
            return self
        return BoundJitFunction(self, instance)

    def __repr__(self):
        return f"<tracejit.jit {getattr(self.fn, '__qualname__', self.fn)}>"

    def __reduce__(self):
        from .pickling import reduce_jit  # by reference when importable, else by value

        return reduce_jit(self)

    @property
    def options(self):
        """The ``jit`` options this function was made with (``runtime.config.Options``);
        setting them rebuilds the variants' entries."""
        return self._options

    @options.setter
    def options(self, options):
        # The hit paths are built for the options (check=True needs the general path).
        self._options = options
        self._entries = () if options.disabled else tuple(map(self._entry, self._variants))

    @property
    def compiled_calls(self):
        """Calls that ran compiled code (the sum over the variants' paths, and those of
        variants dropped since: ``_dropped_calls``)."""
        return self._dropped_calls + sum(variant.calls for variant in self._variants)

    # --- calls ------------------------------------------------------------------------
    def __call__(self, /, *args, **kwargs):  # /: a keyword named self is the model's
        self.calls += 1
        entries = self._entries
        if len(entries) == 1:
            result = entries[0](self, args, kwargs)
            if result is not MISS:
                return result
            return self._miss(args, kwargs)
        if not entries:
            if self._options.disabled:
                return self._run_eager(args, kwargs, f"disabled ({self._options.disabled})")
            return self._miss(args, kwargs)
        # many buckets: first the variant these shapes took last time
        key = tuple([getattr(arg, "shape", None) for arg in args])
        hinted = self._hints.get(key)
        if hinted is not None:
            result = hinted(self, args, kwargs)
            if result is not MISS:
                return result
        for enter in entries:
            result = enter(self, args, kwargs)
            if result is not MISS:
                self._remember(key, enter)
                return result
        return self._miss(args, kwargs)

    def _remember(self, key, enter):
        if len(self._hints) >= MAX_HINTS:
            self._hints.clear()
        self._hints[key] = enter

    def _entry(self, variant):
        """``enter(jit, args, kwargs) -> result | MISS`` for ``variant``: one generated
        function (guard, program, result) when the root path only computes its outputs,
        else its guard and then ``_run``."""
        path = variant.root
        plan = path.outputs
        if (isinstance(path.program, codegen.Program) and path.backward is None
                and not plan.mutated and not plan.writes and not self._options.check):
            index = plan.single_array()
            if index is not None and variant.wrap is _identity:
                return compile_entry(variant.spec, path.program, variant, index)
            return compile_entry(variant.spec, path.program, variant, path.result)
        guard = variant.guard

        def enter(jit, args, kwargs):
            inputs = guard(args, kwargs)
            return MISS if inputs is None else jit._run(variant, inputs, args, kwargs)

        return enter

    def _add_variant(self, variant):
        super()._add_variant(variant)
        if not self._options.disabled:
            self._entries = self._entries + (self._entry_later(variant),)

    def _add_variant_before(self, added, variant):
        position = self._variants.index(variant)
        super()._add_variant_before(added, variant)
        if not self._options.disabled and len(self._entries) + 1 == len(self._variants):
            self._entries = (self._entries[:position] + (self._entry_later(added),)
                             + self._entries[position:])
        self._hints = {}  # a hint would go to the later variant first

    def _entry_later(self, variant):
        """``variant``'s ``enter``, built when a call first comes to it (``_entry``): the
        call that traced or loaded the variant runs through ``_run``, so the generated
        source (1-2 ms to write and compile for an MLP train step) is not on the first
        call's path, and a function called once never pays for it."""
        built = []

        def enter(jit, args, kwargs):
            if not built:
                with gc_pause.paused():  # generating and compiling its Python source
                    built.append(jit._entry(variant))
                with jit._lock:  # not to drop an entry another thread is adding
                    jit._entries = tuple(built[0] if entry is enter else entry
                                         for entry in jit._entries)
            return built[0](jit, args, kwargs)

        return enter

    def _exited(self, variant, status, inputs, args, kwargs):
        """The hit path's root program returned ``status``: a side exit (on from there in
        ``_run``), or an input not C-contiguous (nothing ran: ``_run`` lays it out)."""
        if status == LAYOUT_EXIT:
            return self._run(variant, inputs, args, kwargs)
        return self._run(variant, inputs, args, kwargs, exit=codegen.SideExit(status))

    def _run(self, variant, inputs, args, kwargs, exit=None):
        """Run ``variant``'s program on ``inputs`` (its guard accepted the call), following
        side exits down the trace tree; ``exit``: the root program already took this one."""
        path = variant.root
        if (unsafe := _held_apart(path, inputs, args, kwargs)) is not None:
            return self._run_eager(args, kwargs, unsafe)
        # check=True runs eagerly after: on the arguments as they were, when the program
        # writes into them (it would write them twice, and start from the written values)
        before, outside = None, ()
        printed = io.StringIO() if self.options.check else None  # compared with eager's
        if self.options.check:
            before, outside = _before_writes(path, args, kwargs)
        while True:
            try:
                if exit is not None:
                    raise exit
                outputs = path.program(*inputs) if printed is None else _printing(
                    path.program, inputs, printed)
            except codegen.SideExit as taken:
                exit = None
                if taken.code != codegen.LOOP_GUARD_FAILED and (
                        taken.guard_index is not None and taken.guard_index in path.children):
                    path = path.children[taken.guard_index]  # same inputs, same draws
                    # (the program that exited wrote nothing: this one may, and alone
                    # decides what its writes need)
                    if (unsafe := _held_apart(path, inputs, args, kwargs)) is not None:
                        variant.rewind()
                        return self._run_eager(args, kwargs, unsafe)
                    if self.options.check and before is None:
                        before, outside = _before_writes(path, args, kwargs)
                    continue
                variant.rewind()  # the eager run (or a trace) draws as eager does
                if taken.code == LAYOUT_EXIT:
                    return self._run_eager(args, kwargs, LAYOUT_REASON)
                graph = getattr(path.program, "graph", None)  # where the exit's lines are
                if taken.code == codegen.LOOP_GUARD_FAILED:
                    return self._loop_guard_exit(variant, args, kwargs, exit_reason(
                        "a guard in a loop body failed", graph, taken.code))
                if taken.code == codegen.INNER_LOOP_GUARD_FAILED:
                    # (no streak toward tracing the loops unrolled: it read as a kernel
                    # error before, and ran eagerly as this does)
                    return self._run_eager(args, kwargs, exit_reason(
                        "a guard in an inner loop's body failed", graph, taken.code))
                if taken.code == -NARROW_CAST_OUT_OF_RANGE:
                    return self._run_eager(args, kwargs, exit_reason(
                        NARROW_RANGE_REASON, graph, taken.code, NARROW_RANGE_DETAIL))
                if taken.guard_index is None:
                    return self._run_eager(args, kwargs, "kernel error (eager raises it)")
                return self._side_exit(variant, path, taken.guard_index, args, kwargs)
            except Exception as error:  # the wrapper or native code failed: never the user's
                return self._internal_error(error, args, kwargs, variant)
            break
        if path.outputs.appends and not all(write.ready((args, kwargs)) for write in
                                            path.outputs.appends):  # self.hs = None
            variant.rewind()
            return self._run_eager(args, kwargs, "no list to append to")
        path.calls += 1  # Variant.calls and compiled_calls add these up
        if path.backward is not None:
            leaves = pytree.flatten((args, kwargs))[0]
            outputs = path.record(outputs, inputs, leaves, variant.spec, self.__qualname__)
            return path.outputs.result(outputs, leaves, _identity, (args, kwargs))
        leaves = args if not path.outputs.mutated else pytree.flatten((args, kwargs))[0]
        result = path.result(outputs, leaves, variant.wrap, (args, kwargs))
        if self.options.check:
            for put_back in outside:
                put_back()
            variant.rewind()  # the eager rerun draws what the program was given
            self._check(result, printed.getvalue(),
                        *(before if before is not None else (args, kwargs)))
        return result

    def _internal_error(self, error, args, kwargs, variant=None):
        if variant is not None:
            variant.rewind()  # the eager run draws as eager does
        if self.options.fallback == "raise":
            raise error
        log_recompiles.warning("%s: internal error in compiled code; ran eagerly",
                               self.__qualname__, exc_info=error)
        self._reasons["internal error"] = f"{type(error).__name__}: {error}"
        return self._run_eager(args, kwargs, "internal error")

    def _run_eager(self, args, kwargs, reason):
        """Run the Python function; count the call under the short form of ``reason`` (the
        part before ``:``), or as raised when the function raises."""
        try:
            result = self.fn(*args, **kwargs)
        except BaseException:
            self._counters["raised_calls"] += 1
            raise
        short = reason.split(":", 1)[0]
        self._eager[short] += 1
        self._eager_reasons[short] = reason
        return result

    def _check(self, result, printed, args, kwargs):
        """``check=True``: the eager rerun's result and printed text (not shown: the
        compiled call printed it) must be the compiled call's."""
        from .testing import compare_results

        eager_printed = io.StringIO()
        with contextlib.redirect_stdout(eager_printed):
            expected = self.fn(*args, **kwargs)
        problem = compare_results(result, expected)
        if not problem and eager_printed.getvalue() != printed:
            problem = (f"printed {printed!r}, eager printed {eager_printed.getvalue()!r}")
        if problem:
            raise AssertionError(f"{self.__qualname__}: compiled result differs from eager "
                                 f"(check=True): {problem}")

    # --- introspection ----------------------------------------------------------------
    def lower(self, /, *args, **kwargs):
        """What runs for these arguments: the ``Lowered`` variant (IR with its guards, entry
        guards, kernels, LLVM IR, assembly, rewritten source), compiling it first when no
        variant matches (that call runs the function once).

        >>> import numpy as np
        >>> lowered = jit(lambda x: x * 2 + 1, cache=False).lower(np.ones(3))
        >>> len(lowered.kernels)
        1
        """
        variant = self._matching_variant(args, kwargs)
        if variant is None:
            self(*args, **kwargs)
            if self._pending:  # compile="background": inspecting is worth the wait
                background.wait_idle()
            variant = self._matching_variant(args, kwargs)
        if variant is None:
            raise TracejitError(f"{self.__qualname__} has no compiled variant for these "
                                f"arguments; it runs eagerly:\n{self.explain()}")
        return Lowered(self.fn, variant)

    def _matching_variant(self, args, kwargs):
        return next((variant for variant in self._variants if variant.takes(args, kwargs)),
                    None)

    def reset(self):
        """Forget every variant, refusal and shape observation (counters too): the next
        call traces afresh. The disk cache is left as it is."""
        with self._lock:
            self._variants = self._entries = ()
            self._hints = {}
            self._pending = ()
            self._growing.clear()
            self._generation += 1
            self._untraceable.clear()
            self._failed_traces.clear()
            self._reasons.clear()
            self._loop_notes.clear()
            self._warned_limit = False
            self._made = self._candidates = ()
            self._warned_cost = self._warned_storm = False
            self.policy = ShapePolicy(self.options, self.fn)
            self._counters.clear()
            self._eager.clear()
            self._eager_reasons.clear()
            self._side_exits.clear()
            self.calls = 0
            self._compile_seconds = 0.0

    def stats(self):
        """Counters: calls = compiled_calls + traced_calls (a trace computed the result) +
        eager calls (``eager_calls`` by short reason; ``eager_reasons`` holds each one's
        full text) + raised_calls (the function raised, as it does eagerly); compiles,
        disk_hits, variants, paths, side_exits (by guard), compile_seconds; and what the
        compile-cost policy did (``runtime/compile_policy.py``): background_compiles (long
        compiles sent to the compile thread), refused_compiles (too costly: those calls run
        eagerly) and storm_calls (misses run eagerly in a recompile storm)."""
        return {
            "calls": self.calls,
            "compiled_calls": self.compiled_calls,
            "traced_calls": self._counters["traced_calls"],
            "eager_calls": dict(self._eager),
            "eager_reasons": dict(self._eager_reasons),
            "raised_calls": self._counters["raised_calls"],
            "compiles": self._counters["compiles"],
            "disk_hits": self._counters["disk_hits"],
            "variants": len(self._variants),
            "paths": sum(variant.path_count for variant in self._variants),
            "side_exits": dict(self._side_exits),
            "compile_seconds": round(self._compile_seconds, 6),
            "background_compiles": self._counters["background_compiles"],
            "refused_compiles": self._counters["refused_compiles"],
            "storm_calls": self._counters["storm_calls"],
        }

    def explain(self):
        """Readable text: each variant with its entry guards, paths with their value guards
        (file:line and source) and kernels, and why anything ran eagerly."""
        return diagnostics.explain(self)

    def flush_counters(self):
        """Add what happened since the last flush to the disk cache's persisted counters."""
        if self._cache is None:
            return
        current = self.stats()
        entries = {}
        for variant in self._variants:
            if variant.key:
                entries[variant.key] = {"calls": variant.calls, "paths": {
                    ".".join(map(str, prefix)) or "root": {
                        "calls": path.calls,
                        "side_exits": {str(g): n for g, n in path.exits.items()},
                    } for prefix, path in variant.root.walk()}}
        snapshot = {key: current[key] for key in (
            "calls", "compiled_calls", "traced_calls", "raised_calls", "compiles", "disk_hits",
            "background_compiles", "refused_compiles", "storm_calls")}
        snapshot.update(eager_calls=current["eager_calls"], side_exits=current["side_exits"],
                        entries=entries)
        deltas = _subtract(snapshot, getattr(self, "_flushed", {}))
        self._flushed = snapshot
        code = getattr(self.fn, "__code__", None)
        self._cache.add_counters(self.__qualname__, getattr(self.fn, "__module__", None),
                                 code.co_filename if code else None, deltas)


def _combine_dict(wrapper):
    """Give ``wrapper`` (just through ``functools.update_wrapper``) a combined ``__dict__``.

    update_wrapper reads ``wrapper.__dict__``; CPython 3.11 then keeps the attributes in a
    split dict, and its specialized attribute reads and writes miss on a split dict every
    time (the instruction falls back to the generic lookup, respecializes, misses again):
    the hit path's ``self.calls += 1`` and ``self._entries`` cost ~1300 instructions of a
    7750-instruction call on 16 floats (callgrind). A copy is a combined dict, which they
    read at the cached index."""
    wrapper.__dict__ = dict(wrapper.__dict__)


def _subtract(now, before):
    if isinstance(now, dict):
        return {key: _subtract(value, (before or {}).get(key)) for key, value in now.items()}
    return now - (before or 0)


class BoundJitFunction:
    """A jit method bound to its instance (the instance is the first argument).

    ``obj.step`` makes one on every read, so it copies nothing: the method's ``__name__``,
    ``__qualname__``, ``__wrapped__`` and other attributes are read from it when asked
    (``functools.update_wrapper`` here cost 2.4 µs of a 3.7 µs ``obj.step(x)``)."""

    def __init__(self, function, instance):
        self.function, self.instance = function, instance
        self.__doc__, self.__module__ = function.__doc__, function.__module__

    def __getattr__(self, name):  # what update_wrapper would have copied
        if name in ("function", "instance"):  # not set yet (unpickling): not the method's
            raise AttributeError(name)
        if name == "__wrapped__":
            return self.function.fn
        return getattr(self.function.fn, name)

    def __call__(self, /, *args, **kwargs):
        return self.function(self.instance, *args, **kwargs)

    @property
    def __tracejit_inline__(self):
        return types.MethodType(self.function.fn, self.instance)

    @property
    def __signature__(self):
        """A bound method's: without ``self`` (``inspect.signature(obj.step).bind(x)``),
        where ``__wrapped__`` alone would give the method's."""
        import inspect

        return inspect.signature(types.MethodType(self.function.fn, self.instance))

    def __reduce__(self):
        return BoundJitFunction, (self.function, self.instance)

    def lower(self, /, *args, **kwargs):
        return self.function.lower(self.instance, *args, **kwargs)

    def reset(self):
        self.function.reset()

    def stats(self):
        return self.function.stats()

    def explain(self):
        return self.function.explain()


# Why a call runs eagerly when an argument a decision on a product reads is not
# C-contiguous (codegen/program._layout_checked)
LAYOUT_REASON = ("an argument not C-contiguous where a decision reads a product (NumPy's "
                 "BLAS call sees its layout)")
MAX_HINTS = 1024  # remembered argument shapes per function (JitFunction._hints)


class Lowered:
    """One compiled variant, for reading: ``ir`` (the graph with its value guards),
    ``entry_guards`` (what a call must match), ``kernels``, ``llvm_ir`` (optimized),
    ``assembly`` (for the host CPU), ``source`` (the rewritten function, or None)."""

    def __init__(self, fn, variant):
        program = variant.root.program
        self.ir = str(program.graph)
        names = diagnostics.leaf_names(fn, variant.spec.treedef)
        self.entry_guards = "\n".join(variant.spec.describe(names))
        self.kernels = [f"{kernel.name} ({kernel.kind})" for kernel in program.kernels]
        self.llvm_ir = program.optimized_ir
        self._program = program
        try:
            from tracejit.tracer.rewritten_code import render

            self.source = render(fn)
        except Exception:  # no readable source (REPL, exec): nothing to show, not an error
            self.source = None

    @property
    def assembly(self):
        if not self._program.optimized_ir:
            return ""
        return codegen.llvm.assembly_of(self._program.optimized_ir)

    def __str__(self):
        return "\n\n".join(part for part in (
            "# entry guards\n" + self.entry_guards, "# IR\n" + self.ir,
            "# kernels\n" + "\n".join(self.kernels), self.source and "# source\n" + self.source,
        ) if part)


def _held_apart(path, inputs, args, kwargs):
    """Why ``path``'s program cannot run this call (it would hold apart what the call
    shares), or None."""
    if (path.outputs.mutated or path.outputs.writes_arrays) and _overlapping(inputs):
        # It writes into an array another input also shows (an argument passed twice,
        # self.W also passed in a list of parameters): the compiled code reads them as
        # separate inputs, NumPy sees the write through both.
        return "arguments share memory"
    if path.outputs.writes and path.outputs.writes_items and _repeated_containers(
            (args, kwargs)):  # (writes first: most paths write nothing, a list test)
        # f(d, d) after a trace of two dicts: the program holds them apart, so a read
        # through one name would not see an item written through the other
        return "a dict or list passed twice"
    return None


def _before_writes(path, args, kwargs):
    """``check=True``: ``(copy of the arguments, put-backs of the outside state)`` before
    ``path``'s program writes into them, or ``(None, ())`` when it writes nothing."""
    if not (path.outputs.mutated or path.outputs.writes):
        return None, ()
    # arrays and attributes outside the arguments it writes: put back before the eager
    # rerun, which writes them again
    return copy.deepcopy((args, kwargs)), [write.snapshot((args, kwargs)) for write in
                                           path.outputs.writes if hasattr(write, "snapshot")]


def _printing(program, inputs, printed):
    """``program(*inputs)`` with what it prints to stdout also kept in ``printed``."""
    stdout = sys.stdout
    with contextlib.redirect_stdout(io.StringIO()) as captured:
        try:
            return program(*inputs)
        finally:
            printed.write(captured.getvalue())
            stdout.write(captured.getvalue())
