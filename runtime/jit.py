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

import copy
import functools
import inspect
import sys
import threading
import time
import traceback
import types
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import numpy as np

from tracejit import codegen
from tracejit.codegen import parallel
from tracejit.tracer import pytree, trace
from tracejit.tracer.errors import TraceError, TracejitError, UnsupportedError
from tracejit.tracer.locations import is_library, is_tracejit
from tracejit.tracer.partition import partition
from tracejit.tracer.pending import has_effects
from tracejit.tracer.shapes import edges_bucket, pow2_bucket

from . import background, diagnostics
from .autograd import is_grad_enabled
from .config import Options, logger
from .guards import EntrySpec, compile_guard
from .tensor import Tensor, unwrap
from .variants import OutputPlan, Path, Variant, _identity, _wrap_tensor

log_recompiles = logger("recompiles")
log_guards = logger("guards")
log_kernels = logger("kernels")


_Function = TypeVar("_Function", bound=Callable[..., Any])


# The options as IDEs and type checkers see them (Options.build checks them at run time).
@overload
def jit(fn: _Function, *, dynamic: bool | Literal["auto"] = ...,
        buckets: Literal["pow2"] | Sequence[int] | Mapping[str, Any] = ...,
        max_variants: int = ..., hot_exit: int = ..., cache: bool | Literal["memory"] = ...,
        fallback: Literal["eager", "raise"] = ..., check: bool = ...,
        static_argnames: str | Sequence[str] = ..., static_argnums: int | Sequence[int] = ...,
        loops: Literal["capture", "unroll"] = ...,
        compile: Literal["sync", "background"] = ...) -> JitFunction: ...


@overload
def jit(fn: None = None, *, dynamic: bool | Literal["auto"] = ...,
        buckets: Literal["pow2"] | Sequence[int] | Mapping[str, Any] = ...,
        max_variants: int = ..., hot_exit: int = ..., cache: bool | Literal["memory"] = ...,
        fallback: Literal["eager", "raise"] = ..., check: bool = ...,
        static_argnames: str | Sequence[str] = ..., static_argnums: int | Sequence[int] = ...,
        loops: Literal["capture", "unroll"] = ...,
        compile: Literal["sync", "background"] = ...) -> Callable[[_Function], JitFunction]: ...


def jit(fn=None, **options):
    """Compile ``fn`` with tracejit: ``@jit`` or ``@jit(dynamic=True, ...)``.

    Options: ``dynamic`` ("auto" | True | False), ``buckets`` ("pow2" | edges | dict),
    ``max_variants`` (8), ``hot_exit`` (2), ``cache`` (True | "memory" | False),
    ``fallback`` ("eager" | "raise"), ``check`` (False | True), ``static_argnames`` /
    ``static_argnums`` (specialize by value), ``loops`` ("capture" | "unroll"),
    ``compile`` ("sync" | "background": a new variant's first call returns the traced
    result and LLVM runs on a daemon thread; calls before it is ready run eagerly).

    A jit function pickles (by reference when its module imports it, else by value with
    cloudpickle), so it runs in ``multiprocessing`` and Dask tasks; see ``tracejit.dask``.
    """
    built = Options.build(**options)
    if fn is None:
        return lambda function: JitFunction(function, built)
    return JitFunction(fn, built)


class ShapePolicy:
    """Which dims and scalars are dynamic, and the dims' buckets: ``dynamic="auto"``
    specializes the first call's shapes and Python scalars, makes a dim dynamic once it is
    seen with a second size, and a Python int or float argument a run-time input once it is
    seen with a second value (unless ``static_argnames``/``static_argnums`` name it)."""

    def __init__(self, options, fn):
        self.mode = options.dynamic
        self.buckets = options.buckets
        self.static_names = set(options.static_argnames)
        self.static_positions = set(options.static_argnums)
        self.first_sizes = {}
        self.dynamic = set()
        self.first_scalars = {}
        self.dynamic_scalars = set()
        self.parameter_names = _parameter_names(fn)
        self.leaf_arguments = {}

    def observe(self, leaves, positions):
        self.leaf_arguments = positions
        for leaf_index, leaf in enumerate(leaves):
            if type(leaf) in (int, float) and self.mode is not False and not self._static(
                leaf_index
            ):
                first = self.first_scalars.setdefault(leaf_index, (type(leaf), leaf))
                if first != (type(leaf), leaf):
                    self.dynamic_scalars.add(leaf_index)
                    # A list of token ids changes in places; the next batch changes others:
                    # all the argument's scalars are run-time inputs now, not one retrace
                    # per position that happened to repeat its value.
                    self.dynamic_scalars.update(
                        index for index, other in enumerate(leaves)
                        if positions.get(index) == positions.get(leaf_index)
                        and type(other) in (int, float) and not self._static(index))
                continue
            shape = getattr(leaf, "shape", None)
            if shape is None or not _is_array(leaf):
                continue
            for axis, size in enumerate(shape):
                key = (leaf_index, axis)
                first = self.first_sizes.setdefault(key, size)
                if first != size:
                    self.dynamic.add(key)

    def _named(self, leaf_index):
        argument = self.leaf_arguments.get(leaf_index)
        if isinstance(argument, int) and argument < len(self.parameter_names):
            return self.parameter_names[argument]
        return argument

    def _static(self, leaf_index):
        argument = self.leaf_arguments.get(leaf_index)
        return argument in self.static_positions or self._named(leaf_index) in self.static_names

    def scalar_is_dynamic(self, leaf_index):
        """Whether the Python scalar at ``leaf_index`` is traced as a run-time input."""
        return leaf_index in self.dynamic_scalars

    def bucket(self, size, edges):
        if edges in (None, "pow2"):
            return pow2_bucket(size)
        return edges_bucket(size, edges)

    def __call__(self, leaf_index, array):
        """The ``dynamic`` callable tracing uses: ``{axis: (low, high)}``."""
        named = self.buckets.get(self._named(leaf_index)) if isinstance(
            self.buckets, dict) else None
        edges = self.buckets if isinstance(self.buckets, (list, tuple)) else None
        result = {}
        for axis, size in enumerate(array.shape):
            if isinstance(named, dict) and (axis in named or axis - array.ndim in named):
                chosen = named.get(axis, named.get(axis - array.ndim))
                bucket = self.bucket(size, chosen)
            elif isinstance(named, (tuple, list)) and (axis in named or
                                                      axis - array.ndim in named):
                bucket = self.bucket(size, edges)
            elif self.mode is True or (self.mode == "auto" and (leaf_index, axis) in
                                       self.dynamic):
                bucket = self.bucket(size, edges)
            else:
                bucket = None
            if bucket is not None:
                result[axis] = bucket
        return result


class SameEntry:
    """The dynamic dims and scalars of an existing variant's entry, for tracing another
    path of it (the new path must accept exactly the calls the variant accepts)."""

    def __init__(self, spec):
        self.spec = spec

    def __call__(self, leaf_index, array):
        leaves = self.spec.leaves
        shape = leaves[leaf_index].shape if leaf_index < len(leaves) else ()
        return {axis: self.spec.symbols[dim] for axis, dim in enumerate(shape)
                if isinstance(dim, str)}

    def scalar_is_dynamic(self, leaf_index):
        leaves = self.spec.leaves
        return leaf_index < len(leaves) and leaves[leaf_index].kind == "scalar"


def _parameter_names(fn):
    try:
        return [name for name in inspect.signature(fn).parameters]
    except (TypeError, ValueError):
        return []


def _is_array(leaf):
    return isinstance(leaf, (np.ndarray, Tensor))


def _same_entry(a, b):
    return (
        [(leaf.kind, leaf.dtype, leaf.shape) for leaf in a.leaves]
        == [(leaf.kind, leaf.dtype, leaf.shape) for leaf in b.leaves]
        and a.symbols == b.symbols
        and a.shape_guard_text == b.shape_guard_text
        and [str(spec.path) for spec in a.implicit] == [str(spec.path) for spec in b.implicit]
    )


def open_disk_cache(options):
    """The disk cache ``options`` names, for a jit function. The thread pool's runtime and
    the GEMM, compiled once per machine, are kept in it too: codegen is handed its
    ``load_object``/``save_object`` here, where a function chooses its cache (a
    ``DiskCache`` made to list or prune entries changes nothing in codegen)."""
    from .cache import DiskCache  # not at import: most calls never touch the disk

    cache = DiskCache(options.cache_dir, options.cache_max)
    parallel.set_object_store(cache.load_object, cache.save_object)
    return cache


class JitFunction:
    """A function compiled by tracejit. Call it like the function; see ``stats()`` and
    ``explain()`` for what ran compiled and why anything ran eagerly."""

    def __init__(self, fn, options):
        functools.update_wrapper(self, fn)
        if not hasattr(self, "__qualname__"):  # a callable object: a layer with __call__
            self.__name__ = self.__qualname__ = type(fn).__qualname__
        self.fn = fn
        self.options = options
        self.policy = ShapePolicy(options, fn)
        self._variants = ()
        # argument shapes -> the variant that accepted them last (its guard is still
        # checked: the hint only orders the search when there are many buckets)
        self._hints = {}
        self._lock = threading.RLock()
        self._untraceable = {}
        self._warned_limit = False
        self._counters = Counter()
        self.calls = self.compiled_calls = 0  # plain ints: the hit path counts them
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
        if instance is None:
            return self
        return BoundJitFunction(self, instance)

    def __repr__(self):
        return f"<tracejit.jit {getattr(self.fn, '__qualname__', self.fn)}>"

    def __reduce__(self):
        from .pickling import reduce_jit  # by reference when importable, else by value

        return reduce_jit(self)

    # --- calls ------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.options.disabled:
            return self._run_eager(args, kwargs, "disabled (TRACEJIT_DISABLE)")
        variants, key = self._variants, None
        if len(variants) > 1:  # many buckets: first the variant these shapes took last time
            key = tuple([getattr(arg, "shape", None) for arg in args])
            hinted = self._hints.get(key)
            if hinted is not None:
                variants = (hinted, *variants)
        for variant in variants:
            inputs = variant.guard(args, kwargs)
            if inputs is not None:
                if key is not None:
                    self._remember(key, variant)
                return self._run(variant, inputs, args, kwargs)
        return self._miss(args, kwargs)

    def _remember(self, key, variant):
        if len(self._hints) >= MAX_HINTS:
            self._hints.clear()
        self._hints[key] = variant

    def _run(self, variant, inputs, args, kwargs):
        path = variant.root
        if path.outputs.mutated and _overlapping(pytree.flatten((args, kwargs))[0]):
            # It writes into an argument another argument also shows: the compiled code
            # reads them as separate inputs, NumPy sees the write through both.
            return self._run_eager(args, kwargs, "arguments share memory")
        # check=True runs eagerly after: on the arguments as they were, when the program
        # writes into them (it would write them twice, and start from the written values)
        before = None
        if self.options.check and (path.outputs.mutated or path.outputs.writes):
            before = copy.deepcopy((args, kwargs))
        while True:
            try:
                outputs = path.program(*inputs)
            except codegen.SideExit as exit:
                if exit.code == codegen.LOOP_GUARD_FAILED:
                    return self._run_eager(args, kwargs, "a guard in a loop body failed")
                if exit.guard_index is None:
                    return self._run_eager(args, kwargs, "kernel error (eager raises it)")
                child = path.children.get(exit.guard_index)
                if child is not None:
                    path = child
                    continue
                return self._side_exit(variant, path, exit.guard_index, args, kwargs)
            except Exception as error:  # the wrapper or native code failed: never the user's
                return self._internal_error(error, args, kwargs)
            break
        path.calls += 1
        variant.calls += 1
        self.compiled_calls += 1
        if path.backward is not None:
            leaves = pytree.flatten((args, kwargs))[0]
            outputs = path.record(outputs, inputs, leaves, variant.spec, self.__qualname__)
            return path.outputs.result(outputs, leaves, _identity, (args, kwargs))
        leaves = args if not path.outputs.mutated else pytree.flatten((args, kwargs))[0]
        result = path.result(outputs, leaves, variant.wrap, (args, kwargs))
        if self.options.check:
            self._check(result, *(before if before is not None else (args, kwargs)))
        return result

    def _internal_error(self, error, args, kwargs):
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

    # --- misses: trace and compile ----------------------------------------------------
    def _miss(self, args, kwargs):
        leaves, _ = pytree.flatten((args, kwargs))
        if _overlapping(leaves):  # f(a, a): a trace would see two arrays (x is y, writes)
            return self._run_eager(args, kwargs, "arguments share memory")
        signature = _signature(leaves)
        if signature in self._untraceable:
            return self._run_eager(args, kwargs, self._untraceable[signature])
        if self._pending and (waiting := background.pending_reason(self, args, kwargs)):
            return self._run_eager(args, kwargs, waiting)
        with self._lock:
            for variant in self._variants:  # another thread may have compiled it
                inputs = variant.guard(args, kwargs)
                if inputs is not None:
                    return self._run(variant, inputs, args, kwargs)
            if self._pending and (waiting := background.pending_reason(self, args, kwargs)):
                return self._run_eager(args, kwargs, waiting)
            self.policy.observe(leaves, dict(enumerate(pytree.argument_positions(args, kwargs))))
            sibling = self._bucket_sibling(args, kwargs)
            if not sibling and not self._room():
                self._warn_limit(self._why_missed(leaves))
                return self._run_eager(args, kwargs, "variant limit")
            variant = self._load_from_disk(leaves, args, kwargs)
            if variant is not None:
                inputs = variant.guard(args, kwargs)
                if inputs is not None:
                    self._counters["disk_hits"] += 1
                    variant.bucket_sibling = sibling
                    self._add_variant(variant)
                    return self._run(variant, inputs, args, kwargs)
            reason = self._why_missed(leaves)
            # lazy: a captured loop's remaining trips wait (tracejit.tracer.pending); the
            # program compiled below computes the result instead
            traced = self._trace(args, kwargs, self.policy, signature,
                                 lazy=self.options.compile != "background")
            if traced is None:
                return self._run_eager(args, kwargs, self._untraceable.get(signature, RAISED))
            if self.options.compile == "background":  # LLVM on the compile thread
                return background.compile_variant_later(self, traced, signature, args, kwargs,
                                                        bucket_sibling=sibling)
            path = self._compile_path(traced, signature)
            if path is not None:
                spec = EntrySpec.from_trace(traced)
                variant = Variant(spec, compile_guard(spec), path, bucket_sibling=sibling)
                self._add_variant(variant)
                log_recompiles.info("%s: compiled variant %d (%s)", self.__qualname__,
                                    len(self._variants), reason)
                self._store_to_disk(variant, leaves)
                # The result must carry the compiled graph, or the trace left it pending
                # (the program prints what the trace printed: then the trace computes it).
                if path.backward is not None or (traced.pending
                                                 and not has_effects(traced.graph)):
                    return self._run(variant, variant.guard(args, kwargs), args, kwargs)
            elif traced.gradients is not None:
                return self._run_eager(args, kwargs, self._untraceable.get(signature, RAISED))
            self._counters["traced_calls"] += 1  # the trace itself computed the result
            return _plain_result(traced.force_outputs(), leaves)

    def _trace(self, args, kwargs, dynamic, signature, lazy=False):
        start = time.perf_counter()
        try:
            traced = trace(self.fn, *args, dynamic=dynamic, name=self.__name__,
                           grad=is_grad_enabled(), lazy=lazy,
                           capture_loops=self.options.loops == "capture", **kwargs)
        except (TraceError, UnsupportedError) as error:
            if self.options.fallback == "raise":
                raise
            self._give_up(signature, f"untraceable: {error}", error)
            return None
        except Exception as error:
            if self.options.fallback == "raise":
                raise
            if _raised_by_user_code(error):
                # The function itself raised (bad input, a bug of its own): the eager run
                # raises the same error; a later call may trace.
                log_recompiles.info("%s: raised while tracing (%s: %s); ran eagerly",
                                    self.__qualname__, type(error).__name__, error)
                return None
            log_recompiles.warning("%s: internal error while tracing; runs eagerly",
                                   self.__qualname__, exc_info=True)
            self._give_up(signature, f"internal error: {type(error).__name__}: {error}", error)
            return None
        finally:
            self._compile_seconds += time.perf_counter() - start
        self._loop_notes.update(dict.fromkeys(traced.loop_notes))
        return traced

    def _give_up(self, signature, reason, error):
        """Calls with this signature run eagerly from now on, for ``reason`` (explain())."""
        self._untraceable[signature] = reason
        self._reasons[reason] = str(error)
        log_recompiles.warning("%s runs eagerly: %s", self.__qualname__, error)

    def _compile_path(self, traced, signature):
        start = time.perf_counter()
        backward, plan, residual_bytes = None, traced.gradients, 0
        try:
            if plan is None:
                program = codegen.compile(traced.graph, name=self.__name__, check="final",
                                          profile=self.options.profile)
            else:
                split = partition(traced.graph, plan.forward_outputs, plan.cotangent_inputs)
                program = codegen.compile(split.forward, name=self.__name__, check="final",
                                          profile=self.options.profile)
                backward = codegen.compile(split.backward, name=self.__name__ + "_backward",
                                           check="final",
                                           profile=self.options.profile)
                residual_bytes = split.residual_bytes(traced.symbol_values)
        except Exception as error:  # a compiler limitation or bug: never the user's problem
            if self.options.fallback == "raise":
                raise
            internal = not isinstance(error, (TracejitError, UnsupportedError))
            detail = f"{type(error).__name__}: {error}" if internal else str(error)
            if internal:
                log_recompiles.debug("compiler error", exc_info=True)
            self._give_up(signature, f"not compiled: {detail}", error)
            return None
        finally:
            self._compile_seconds += time.perf_counter() - start
        self._counters["compiles"] += 1
        log_kernels.info("%s: %d kernel(s) %s in %.1f ms", self.__qualname__,
                         program.kernel_count, [k.kind for k in program.kernels],
                         program.compile_seconds["total"] * 1e3)
        return Path(program, OutputPlan.from_trace(traced), program.graph.guards,
                    traced.functions, backward=backward, gradients=plan,
                    residual_bytes=residual_bytes)

    def _add_variant(self, variant):
        self._variants = self._variants + (variant,)

    def _room(self):
        used = sum(variant.counted for variant in self._variants)
        # Variants and paths compiling in the background (pending) take their room now.
        used += len(self._growing) + sum(not item.bucket_sibling for item in self._pending)
        return used < self.options.max_variants

    def _bucket_sibling(self, args, kwargs):
        """Whether an existing variant would take this call but for its dims' buckets
        (the new variant is the same program for other sizes: it does not count)."""
        return any(variant.spec.symbols and variant.any_bucket_guard()(args, kwargs)
                   is not None for variant in self._variants)

    # --- side exits and the trace tree ------------------------------------------------
    def _side_exit(self, variant, path, guard_index, args, kwargs):
        guard = path.guards[guard_index]
        if guard.convert == "margin":
            # Rounding could make the next guard decide unlike NumPy: eager decides. Not a
            # hot exit: the other path would meet the same margin.
            log_guards.info("guard %s is within rounding of its threshold; ran eagerly",
                            _guard_label(guard))
            return self._run_eager(args, kwargs, "guard margin")
        label = _guard_label(guard)
        with self._lock:
            self._side_exits[label] += 1
            taken = path.exits[guard_index] = path.exits.get(guard_index, 0) + 1
            if (taken >= self.options.hot_exit and guard_index not in path.children
                    and (id(path), guard_index) not in self._growing):
                if self._room():
                    grown = self._grow(variant, path, guard_index, args, kwargs)
                    if grown is not None:
                        return grown
                else:
                    self._warn_limit(f"guard {label} failed: it held {_held(guard)} when "
                                     f"traced, and {_now(guard)} now")
            remaining = self.options.hot_exit - taken
            note = ("the other path will be compiled on the next exit" if remaining == 1
                    else f"the other path compiles after {remaining} more exits"
                    if remaining > 1 else "no room for another path")
            log_guards.info("guard %s failed (it held %r when traced); ran eagerly (%s time; "
                            "%s)", label, guard.expected, _ordinal(taken), note)
        return self._run_eager(args, kwargs, "side exit")

    def _grow(self, variant, path, guard_index, args, kwargs):
        """Trace the call that left through ``guard_index`` and hang it under that guard."""
        leaves, _ = pytree.flatten((args, kwargs))

        signature = _signature(leaves)
        traced = self._trace(args, kwargs, SameEntry(variant.spec), signature)
        if traced is None:
            return self._run_eager(args, kwargs, self._untraceable.get(signature, RAISED))
        if not _same_entry(EntrySpec.from_trace(traced), variant.spec):
            log_recompiles.info("%s: the other path of %s needs a different entry; it runs "
                                "eagerly", self.__qualname__,
                                _guard_label(path.guards[guard_index]))
            self._counters["traced_calls"] += 1
            return _plain_result(traced.outputs, leaves)
        if self.options.compile == "background":
            return background.grow_later(self, variant, path, guard_index, traced, signature,
                                         args, kwargs)
        child = self._compile_path(traced, signature)
        if child is not None:
            path.children[guard_index] = child
            log_recompiles.info("%s: compiled the other path of %s", self.__qualname__,
                                _guard_label(path.guards[guard_index]))
            self._store_to_disk(variant, leaves)
            if child.backward is not None:
                return self._run(variant, variant.guard(args, kwargs), args, kwargs)
        self._counters["traced_calls"] += 1
        return _plain_result(traced.outputs, leaves)

    # --- messages ---------------------------------------------------------------------
    def _why_missed(self, leaves):
        if not self._variants:
            return "first call"
        return diagnostics.why_no_variant_matches(self._variants, leaves, self.fn)

    def _warn_limit(self, why):
        if self._warned_limit:
            return
        self._warned_limit = True
        code = getattr(self.fn, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code else "?"
        advice = ("raise jit(max_variants=...), or name the argument in static_argnames only "
                  "if it must specialize" if "specialized on its value" in why else
                  "raise jit(max_variants=...) or mark the changing dims dynamic "
                  "(jit(dynamic=True) or buckets=...)")
        if self._loop_notes and any(variant.spec.symbols for variant in self._variants):
            # The dims are dynamic already: an unrolled loop pins each length to a variant.
            advice = (f"make the loop capturable or raise jit(max_variants=...); each length "
                      f"is its own variant while a loop unrolls: {list(self._loop_notes)[-1]}")
        warnings.warn(
            f"{where}: tracejit function {self.__qualname__} reached max_variants="
            f"{self.options.max_variants} (compiled variants and paths); new cases run "
            f"eagerly. Last miss: {why}. To compile them, {advice}",
            RuntimeWarning,
            stacklevel=_user_stacklevel(),
        )

    def _check(self, result, args, kwargs):
        from .testing import compare_results

        expected = self.fn(*args, **kwargs)
        problem = compare_results(result, expected)
        if problem:
            raise AssertionError(f"{self.__qualname__}: compiled result differs from eager "
                                 f"(check=True): {problem}")

    # --- disk cache -------------------------------------------------------------------
    def _load_from_disk(self, leaves, args, kwargs):
        if self._cache is None:
            return None
        try:
            return self._cache.load(self.fn, self.__qualname__, self.options, self.policy,
                                    leaves)
        except Exception as error:  # a broken cache never breaks the call
            logger("cache").warning("%s: ignoring the disk cache: %s", self.__qualname__, error)
            return None

    def _store_to_disk(self, variant, leaves, key=None):
        """Write ``variant`` to the disk cache under ``key`` (a background compile's, taken
        when the call was traced), else under the key of the call with ``leaves``."""
        if self._cache is None:
            return
        try:
            self._cache.store(variant, self.fn, self.__qualname__, key or self._disk_key(leaves))
        except Exception as error:
            logger("cache").warning("%s: could not write the disk cache: %s", self.__qualname__,
                                    error)

    def _disk_key(self, leaves):
        """The disk cache's ``(key, signature)`` for a call with ``leaves``, as the shape
        policy stands now."""
        return self._cache.key(self.fn, self.options, self.policy, leaves)

    # --- introspection ----------------------------------------------------------------
    def lower(self, *args, **kwargs):
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
        return next((variant for variant in self._variants
                     if variant.guard(args, kwargs) is not None), None)

    def reset(self):
        """Forget every variant, refusal and shape observation (counters too): the next
        call traces afresh. The disk cache is left as it is."""
        with self._lock:
            self._variants = ()
            self._hints = {}
            self._pending = ()
            self._growing.clear()
            self._generation += 1
            self._untraceable.clear()
            self._reasons.clear()
            self._loop_notes.clear()
            self._warned_limit = False
            self.policy = ShapePolicy(self.options, self.fn)
            self._counters.clear()
            self._eager.clear()
            self._eager_reasons.clear()
            self._side_exits.clear()
            self.calls = self.compiled_calls = 0
            self._compile_seconds = 0.0

    def stats(self):
        """Counters: calls = compiled_calls + traced_calls (a trace computed the result) +
        eager calls (``eager_calls`` by short reason; ``eager_reasons`` holds each one's
        full text) + raised_calls (the function raised, as it does eagerly); compiles,
        disk_hits, variants, paths, side_exits (by guard), compile_seconds."""
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
        snapshot = {key: current[key] for key in ("calls", "compiled_calls", "traced_calls",
                                                  "raised_calls", "compiles", "disk_hits")}
        snapshot.update(eager_calls=current["eager_calls"], side_exits=current["side_exits"],
                        entries=entries)
        deltas = _subtract(snapshot, getattr(self, "_flushed", {}))
        self._flushed = snapshot
        code = getattr(self.fn, "__code__", None)
        self._cache.add_counters(self.__qualname__, getattr(self.fn, "__module__", None),
                                 code.co_filename if code else None, deltas)


def _subtract(now, before):
    if isinstance(now, dict):
        return {key: _subtract(value, (before or {}).get(key)) for key, value in now.items()}
    return now - (before or 0)


class BoundJitFunction:
    """A jit method bound to its instance (the instance is the first argument)."""

    def __init__(self, function, instance):
        self.function, self.instance = function, instance
        functools.update_wrapper(self, function.fn)

    def __call__(self, *args, **kwargs):
        return self.function(self.instance, *args, **kwargs)

    @property
    def __tracejit_inline__(self):
        return types.MethodType(self.function.fn, self.instance)

    def __reduce__(self):
        return BoundJitFunction, (self.function, self.instance)

    def lower(self, *args, **kwargs):
        return self.function.lower(self.instance, *args, **kwargs)

    def reset(self):
        self.function.reset()

    def stats(self):
        return self.function.stats()

    def explain(self):
        return self.function.explain()


RAISED = "raised while tracing: the eager run raises it too"
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
            from tracejit.tracer.frontend import render

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


def _user_stacklevel():
    """The ``stacklevel`` that makes a warning point at the user's call, not at tracejit."""
    frame, level = sys._getframe(1), 1
    while frame is not None and is_tracejit(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def _overlapping(leaves):
    """Whether two array arguments may share memory (the same array passed twice, or two
    views of one buffer). Tensors that require grad are left out: a compiled function
    never writes into those (the trace refuses it), and the tape sums their gradients."""
    arrays = [unwrap(leaf) for leaf in leaves
              if _is_array(leaf) and not getattr(leaf, "requires_grad", False)]
    return len(arrays) > 1 and any(
        np.may_share_memory(first, second)
        for index, first in enumerate(arrays) for second in arrays[index + 1:])


def _raised_by_user_code(error):
    """Whether ``error`` came out of the user's own code rather than tracejit's: the
    innermost frame outside NumPy and the standard library is the user's."""
    if getattr(error, "__tracejit_user_error__", False):  # tracejit.tracer.errors.as_numpy_would
        return True
    if isinstance(error, TypeError) and ("'SymInt'" in str(error) or "'Tracer'" in str(error)):
        return False  # Python refused an operator on one of ours, at the user's line
    frames = list(traceback.walk_tb(error.__traceback__))
    for frame, _ in reversed(frames):
        filename = frame.f_code.co_filename
        if is_tracejit(filename):
            return False
        if not is_library(filename):
            return True
    return False


def _plain_result(outputs, leaves):
    """A trace's outputs as the call's result: Tensors out when Tensors went in."""
    if not any(isinstance(leaf, Tensor) for leaf in leaves):
        return outputs
    flat, tree = pytree.flatten(outputs)
    return pytree.unflatten(tree, [_wrap_tensor(value) for value in flat])


def _signature(leaves):
    """A hashable summary of a call, for remembering calls that cannot be compiled."""
    parts = []
    for leaf in leaves:
        if _is_array(leaf):
            array = unwrap(leaf)
            parts.append((type(leaf).__name__, array.dtype.str, array.shape))
        elif type(leaf) in (int, float, bool, str, type(None)):
            parts.append((type(leaf).__name__, leaf))
        else:
            parts.append((type(leaf).__name__, id(leaf)))
    return tuple(parts)


def _guard_label(guard):
    location = guard.location
    if location is None:
        return f"{guard.convert}(...)"
    return f"`{location.source}` at {location.short}"


def _held(guard):
    return f"{guard.convert}(...) == {guard.expected!r}"


def _now(guard):
    if guard.convert == "bool":
        return f"{guard.convert}(...) == {not guard.expected!r}"
    return f"{guard.convert}(...) != {guard.expected!r}"


def _ordinal(number):
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(number if number < 20 else number % 10, "th")
    return f"{number}{suffix}"
