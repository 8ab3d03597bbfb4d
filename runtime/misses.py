"""What a jit function does when no compiled variant takes a call: look on disk, trace
and compile a new variant, grow a path under a guard that keeps failing, or run eagerly
and say why.

``JitFunction`` (``runtime/jit.py``) holds the call path: guards, compiled programs, the
eager run. It mixes ``Misses`` in for everything after a miss, which uses its state: the
function ``fn``, its ``options`` and shape ``policy``, its ``_variants`` (each a trace
tree of paths), the disk ``_cache``, the counters, and ``_lock`` (one compile at a time).
``runtime/background.py`` does the same work on a compile thread for
``jit(compile="background")``.

>>> _ordinal(1), _ordinal(2), _ordinal(11), _ordinal(23)
('1st', '2nd', '11th', '23rd')
"""

from __future__ import annotations

import sys
import time
import traceback
import warnings
from dataclasses import dataclass

import numpy as np

from tracejit import codegen
from tracejit.codegen.compile_estimate import estimate_compile
from tracejit.codegen.numpy_products import note_partition
from tracejit.tracer import pytree, random_draws
from tracejit.tracer.argument_writes import put_back
from tracejit.tracer.attribute_writes import NumberState
from tracejit.tracer.errors import NotReversible, TraceError, TracejitError, UnsupportedError
from tracejit.tracer.gradient_trace import trace_with_gradients
from tracejit.tracer.locations import is_library, is_tracejit
from tracejit.tracer.partition import partition
from tracejit.tracer.passes import optimize
from tracejit.tracer.pending import has_effects
from tracejit.tracer.pinned_scalars import ScalarDecidesShape
from tracejit.tracer.shared_objects import argument_containers
from tracejit.tracer.tracing import Trace

from . import background, compile_policy, diagnostics
from .autograd import is_grad_enabled
from .compile_policy import CompileBudget, CompileDeferred, CompileRefused, CompileUnproven
from .config import logger
from .guards import EntrySpec, compile_guard
from .shape_policy import SameEntry, _is_array, _same_entry
from .tensor import unwrap
from .variants import OutputPlan, Path, Variant, _wrap_tensor

log_recompiles = logger("recompiles")
log_guards = logger("guards")
log_kernels = logger("kernels")


class Misses:
    """The miss path of ``JitFunction`` (mixed in; see the module's docstring)."""

    # --- misses: trace and compile ----------------------------------------------------
    def _miss(self, args, kwargs):
        try:
            leaves, _ = pytree.flatten((args, kwargs))
        except RecursionError:  # a list that contains itself, or nests past the stack
            return self._run_eager(args, kwargs, "arguments nested too deeply")
        # f(a, a): the trace sees two arrays. Traced all the same (attention(x, x, x) would
        # never compile otherwise), but the call is the program's, which runs it only if it
        # writes into no argument (jit._held_apart); `x is y` runs eagerly while tracing.
        shared = _overlapping(leaves)
        if shared and self.options.compile == "background":
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
            # (a stored variant's loops are captured ones: not once they proved unfit)
            variant = None if self._loops_unrolled else self._load_from_disk(leaves, args,
                                                                             kwargs)
            if variant is not None:
                inputs = variant.guard(args, kwargs)
                if inputs is not None:
                    self._counters["disk_hits"] += 1
                    variant.bucket_sibling = sibling
                    self._add_variant(variant)
                    return self._run(variant, inputs, args, kwargs)
            returned = self._candidate_for(args, kwargs)  # a long variant left uncompiled
            if returned is None and compile_policy.in_storm(self._made + self._candidates,
                                                            self.options.compile):
                self._note_storm()
                return self._run_eager(args, kwargs, "recompile storm")
            reason = self._why_missed(leaves)
            # lazy: a captured loop's remaining trips wait (tracejit.tracer.pending); the
            # program compiled below computes the result instead
            # (shared: the trace's writes would go into the call's arrays, then the program
            # or eager runs it again and writes twice: a += 1 on f(x, x) added 2)
            traced = self._trace(args, kwargs, self.policy, signature,
                                 lazy=self.options.compile != "background", effects=not shared)
            if not isinstance(traced, Trace):
                return self._eager_instead(traced, signature, args, kwargs)
            if self.options.compile == "background":  # LLVM on the compile thread
                return background.compile_variant_later(self, traced, signature, args, kwargs,
                                                        bucket_sibling=sibling)
            path = self._compile_path(traced, signature, may_defer=not shared,
                                      unproven=not shared and not sibling and returned is None
                                      and compile_policy.unproven(self._made,
                                                                  self.options.compile))
            if returned is not None:  # reuse shown: compiled now, its guard kept no more
                self._candidates = tuple(item for item in self._candidates
                                         if item is not returned)
            if isinstance(path, CompileUnproven):  # long, no reuse yet: it waits for a call
                self._candidates = (*self._candidates[-7:], compile_policy.Unproven(
                    compile_guard(EntrySpec.from_trace(traced), draws=False), path.estimate))
                log_recompiles.info("%s: variant %d waits for reuse before compiling (%s)",
                                    self.__qualname__, len(self._variants) + 1, reason)
                return background.result_now(self, traced, args, kwargs,
                                             "long compile waits for reuse")
            if path is DEFERRED:  # long: LLVM on the compile thread (compile_policy)
                self._counters["background_compiles"] += 1
                log_recompiles.info("%s: compiling variant %d in the background (%s)",
                                    self.__qualname__, len(self._variants) + 1, reason)
                return background.compile_variant_later(self, traced, signature, args, kwargs,
                                                        bucket_sibling=sibling)
            if path is not None:
                spec = EntrySpec.from_trace(traced)
                variant = Variant(spec, None, path, bucket_sibling=sibling)
                self._add_variant(variant)
                self._made = self._made + (variant,)
                log_recompiles.info("%s: compiled variant %d (%s)", self.__qualname__,
                                    len(self._variants), reason)
                self._store_to_disk(variant, leaves)
                # The result must carry the compiled graph, or the trace left it pending
                # (the program prints what the trace printed: then the trace computes it),
                # or the trace's decisions may not be eager's (the program's margins decide).
                if shared or path.backward is not None or traced.undecided or (
                        traced.pending and not has_effects(traced.graph)):
                    result = self._run_new(variant, args, kwargs, traced)
                    variant.born_calls = variant.calls  # (a storm counts later calls)
                    return result
            elif shared or traced.gradients is not None or traced.undecided:
                traced.rewind_draws()
                return self._run_eager(args, kwargs, self._untraceable.get(signature, RAISED))
            self._counters["traced_calls"] += 1  # the trace itself computed the result
            return _plain_result(traced, args, kwargs)

    def _trace(self, args, kwargs, dynamic, signature, lazy=False, effects=True):
        """A ``Trace`` of this call, or None / ``_TraceFailed`` (it runs eagerly). What the
        trace drew (``tracer.random_draws``) is undone when it fails, and can be undone
        (``Trace.rewind_draws``) when the result comes from elsewhere."""
        watched = random_draws.watch_unseen(self.fn, pytree.flatten((args, kwargs))[0])
        with random_draws.journal() as journal:
            try:
                traced = self._trace_once(args, kwargs, dynamic, signature, lazy, effects)
            except BaseException:
                journal.rewind()
                raise
        unseen = random_draws.unseen_draw(watched, journal)
        if unseen is not None:  # (put back: the eager run draws them)
            journal.rewind()
            self._give_up(signature, f"untraceable: {unseen}", UnsupportedError(unseen))
            return None
        if isinstance(traced, Trace):
            traced.journal = journal
        else:
            journal.rewind()  # the eager run draws them again
        return traced

    def _trace_once(self, args, kwargs, dynamic, signature, lazy, effects=True):
        start = time.perf_counter()
        try:
            retries = 0
            capture = self.options.loops == "capture" and not self._loops_unrolled
            while True:
                try:
                    traced = trace_with_gradients(
                        self.fn, *args, dynamic=dynamic, name=self.__name__,
                        grad=is_grad_enabled(), lazy=lazy, capture_loops=capture,
                        check_decisions=True, call_kwargs=kwargs, effects=effects)
                    break
                except NotReversible as refusal:  # a triangular nest: its trips one by one
                    if not capture:
                        raise
                    random_draws.rewind_open()
                    capture = False
                    self._loop_notes[f"loops unrolled for gradients: {refusal}"] = None
                except NumberState as state:  # self.t += 1: again, self.t a run-time input
                    random_draws.rewind_open()  # the next trace draws from the start again
                    retries += 1
                    if retries == _NUMBER_STATE_RETRIES:  # it names the user's line
                        raise UnsupportedError(f"{state}: attributes holding numbers kept "
                                               "changing role") from None
                except ScalarDecidesShape as signal:  # x[i * stride:]: again, stride constant
                    # (ends: a pinned argument is a constant of every later trace)
                    random_draws.rewind_open()
                    dynamic.pin_scalars(signal.leaves, signal.small_count)
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
            return _TraceFailed(error)  # ours, or NumPy's error raised by our stand-in
        finally:
            self._compile_seconds += time.perf_counter() - start
        self._loop_notes.update(dict.fromkeys(traced.loop_notes))
        # A loop an exact-shape trace unrolled (range(y.shape[0]) on the first call) and a
        # later trace captured: its note no longer says what runs for other lengths
        for where in traced.captured_loops:
            for note in [note for note in self._loop_notes
                         if note.startswith(f"loop at {where} unrolled")]:
                del self._loop_notes[note]
        return traced

    def _eager_instead(self, failed, signature, args, kwargs):
        """The call whose trace stopped (``failed``: None, or ``_TraceFailed`` when tracejit's
        own code raised), run eagerly. An error raised inside tracejit may still be the
        function's: our stand-ins for NumPy raise NumPy's errors (``np.stack([])``). The
        eager run tells: if it raises, the error was the function's (nothing is logged, a
        later call may trace); if it returns, the trace failed where eager does not. Once,
        that may still be a decision: at a threshold the trace's own values can take the
        branch eager does not and raise NumPy's error there (``if s >= t: np.stack([])``),
        so the next call traces again. Twice for one signature, it is our bug: calls with
        it run eagerly from then on, and the log says so."""
        if failed is None:
            return self._run_eager(args, kwargs, self._untraceable.get(signature, RAISED))
        error = failed.error
        described = f"{type(error).__name__}: {error}"
        reason = f"internal error: {described}"  # (stats show it even the first time)
        try:
            result = self._run_eager(args, kwargs, reason)
        except BaseException:
            log_recompiles.info("%s: raised while tracing (%s); so did the eager run",
                                self.__qualname__, described)
            raise
        if signature not in self._failed_traces:
            self._failed_traces.add(signature)
            log_recompiles.info("%s: raised while tracing (%s) where the eager run returns "
                                "(a decision at a threshold, or our bug); the next call "
                                "traces again", self.__qualname__, described)
            return result
        log_recompiles.warning("%s: internal error while tracing; runs eagerly",
                               self.__qualname__, exc_info=error)
        self._give_up(signature, reason, error)
        return result

    def _run_new(self, variant, args, kwargs, traced):
        """The call a variant (or a path of it) was just traced on, run by its program
        (which draws again what the trace drew: ``traced``'s draws are undone first)."""
        traced.rewind_draws()
        inputs = variant.guard(args, kwargs)
        if inputs is None:  # its entry refuses the call it was traced on: our bug
            log_recompiles.warning("%s: a new variant's entry refused the call it was "
                                   "traced on; ran eagerly", self.__qualname__)
            return self._run_eager(args, kwargs, "entry refused its own call")
        return self._run(variant, inputs, args, kwargs)

    def _give_up(self, signature, reason, error):
        """Calls with this signature run eagerly from now on, for ``reason`` (explain())."""
        self._untraceable[signature] = reason
        # Warned once per reason: a function that draws random numbers gives up again at
        # every new shape (each is traced anew: another path might not draw), one warning
        # per sequence length was noise.
        log = log_recompiles.warning if reason not in self._reasons else log_recompiles.info
        self._reasons[reason] = str(error)
        log("%s runs eagerly: %s", self.__qualname__, error)

    def _candidate_for(self, args, kwargs):
        """The long variant traced before and left uncompiled (``compile_policy.Unproven``)
        whose guard takes this call, or None: a call coming back to it is the reuse its
        compile waited for."""
        return next((item for item in self._candidates
                     if item.guard(args, kwargs) is not None), None)

    def _compile_path(self, traced, signature, may_defer=False, unproven=False):
        """The compiled ``Path`` of ``traced``; None when it is not compiled (the reason is
        kept for its signature); ``DEFERRED`` when ``may_defer`` and the compile-cost policy
        sends it to the background thread (``runtime/compile_policy.py``); the
        ``CompileUnproven`` when ``unproven`` and it is long."""
        start = time.perf_counter()
        backward, plan, residual_bytes = None, traced.gradients, 0
        budget = CompileBudget(self.options.compile, may_defer, unproven)
        try:
            if plan is None:
                program = codegen.compile(traced.graph, name=self.__name__, check="final",
                                          profile=self.options.profile, admit=budget.admit)
            else:
                split = partition(traced.graph, plan.forward_outputs, plan.cotangent_inputs)
                note_partition(traced.graph, split.forward)  # backward masks read products
                # Both halves are estimated before either is lowered: a backward that makes
                # the pair long would otherwise find the forward compiled already (the call
                # waited for it, and the compile thread compiles it again)
                halves = [optimize(half, check="final") for half in (split.forward,
                                                                     split.backward)]
                for half in halves:
                    budget.admit(estimate_compile(half))
                program, backward = (
                    codegen.compile(half, name=name, check="final", optimized=True,
                                    profile=self.options.profile)
                    for half, name in zip(halves, (self.__name__, self.__name__ + "_backward")))
                residual_bytes = split.residual_bytes(traced.symbol_values)
        except CompileDeferred:
            return DEFERRED
        except CompileUnproven as waits:
            return waits
        except CompileRefused as refused:
            if self.options.fallback == "raise":
                raise UnsupportedError(f"{compile_policy.where(self.fn, traced.captured_loops)}"
                                       f": too costly to compile: {refused.estimate}") from None
            self._refuse(signature, refused.estimate, traced)
            return None
        except Exception as error:  # a compiler limitation or bug: never the user's problem
            if self.options.fallback == "raise":
                raise
            internal = not isinstance(error, (TracejitError, UnsupportedError))
            detail = f"{type(error).__name__}: {error}" if internal else str(error)
            if internal:
                log_recompiles.debug("compiler error", exc_info=True)
            why = ("too large to compile" if isinstance(error, codegen.ProgramTooLarge)
                   else "not compiled")
            self._give_up(signature, f"{why}: {detail}", error)
            return None
        finally:
            self._compile_seconds += time.perf_counter() - start
        self._counters["compiles"] += 1
        log_kernels.info("%s: %d kernel(s) %s in %.1f ms", self.__qualname__,
                         program.kernel_count, [k.kind for k in program.kernels],
                         program.compile_seconds["total"] * 1e3)
        return Path(program, OutputPlan.from_trace(traced), program.graph.guards,
                    traced.functions, backward=backward, gradients=plan,
                    residual_bytes=residual_bytes, estimate=budget.estimate)

    def _refuse(self, signature, estimate, traced):
        """Calls with ``signature`` run eagerly: compiling them would cost ``estimate``;
        warned once per function."""
        self._counters["refused_compiles"] += 1
        reason = f"too costly to compile: {estimate}"
        self._untraceable[signature] = reason
        self._reasons[reason] = str(estimate)
        log_recompiles.info("%s runs eagerly: %s", self.__qualname__, reason)
        if not self._warned_cost:
            self._warned_cost = True
            compile_policy.warn_refused(self.fn, self.__qualname__, estimate,
                                        traced.captured_loops, _user_stacklevel())

    def _note_storm(self):
        self._counters["storm_calls"] += 1
        if not self._warned_storm:
            self._warned_storm = True
            log_recompiles.info("%s: recompile storm: new cases run eagerly",
                                self.__qualname__)
            compile_policy.warn_storm(self.fn, self.__qualname__, self._made,
                                      _user_stacklevel())

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
    # Set once guards in captured loops' bodies kept failing: the function's loops are
    # traced unrolled from then on (``_loop_guard_exit``).
    _loops_unrolled = False
    _dropped_calls = 0  # compiled calls of variants dropped (stats keep counting them)
    # The compile-cost policy's state (runtime/compile_policy.py): the variants compiled on
    # a miss, in the order they were made (a storm is read from the last ones), and
    # whether its notes were given.
    _made = ()
    _warned_cost = _warned_storm = False
    _candidates = ()  # entry guards of long variants left uncompiled until reused

    def _loop_guard_exit(self, variant, args, kwargs, reason="a guard in a loop body failed"):
        """A guard in a captured loop's body failed: a trip decided otherwise than the trips
        the loop was traced on (a max pool's ``if`` on each window's data). After
        ``LOOP_EXIT_STREAK`` such exits of a variant with no compiled call between them
        (a rare spike leaves the captured loop serving the other calls) the function's
        loops are traced unrolled from then on, where each trip's guards are ordinary
        guards whose other paths compile as they keep failing, and the variant goes (the
        next call traces anew)."""
        with self._lock:
            calls = variant.calls
            streak = variant.loop_exits[0] + 1 if variant.loop_exits[1] == calls else 1
            variant.loop_exits = (streak, calls)
            if (streak >= LOOP_EXIT_STREAK and not self._loops_unrolled
                    and self.options.loops == "capture"):
                self._loops_unrolled = True
                self._drop_variant(variant)
                log_recompiles.info("%s: guards in loop bodies kept failing; its loops are "
                                    "traced unrolled from now on", self.__qualname__)
        return self._run_eager(args, kwargs, reason)

    def _widen_entry(self, variant, checks):
        """Add ``checks`` (outside values a new path of ``variant`` read, which its entry
        guard does not compare) to that guard. A path is entered by the root program's
        side exit, after the entry guard alone: without them, a call after
        ``CONFIG["scale"] = 5.0`` would run the branch traced with 2.0. A call they refuse
        traces a variant of its own."""
        variant.widen(checks)
        with self._lock:
            if len(self._entries) == len(self._variants):
                self._entries = tuple(self._entry_later(variant) if known is variant else entry
                                      for known, entry in zip(self._variants, self._entries))
            self._hints = {}  # they hold the old entry

    def _drop_variant(self, variant):
        """Forget ``variant`` (and its hit path: ``_entries`` pairs with ``_variants``)."""
        self._dropped_calls += variant.calls
        variant.dropped = True  # a side exit of its other paths passes over it
        kept = [i for i, known in enumerate(self._variants) if known is not variant]
        if len(self._entries) == len(self._variants):
            self._entries = tuple(self._entries[i] for i in kept)
        self._variants = tuple(self._variants[i] for i in kept)

    def _side_exit(self, variant, path, guard_index, args, kwargs):
        guard = path.guards[guard_index]
        if guard.convert == "margin":
            # Rounding could make the next guard decide unlike NumPy: eager decides. Not a
            # hot exit: the other path would meet the same margin.
            log_guards.info("guard %s is within rounding of its threshold; ran eagerly",
                            _guard_label(guard))
            return self._run_eager(args, kwargs, "guard margin")
        label = _guard_label(guard)
        # This variant may be the other path of a guard of a later one, made because it
        # read more of the objects (_other_entry): the call goes on to that one.
        for other in variant.exits_to():
            inputs = other.guard(args, kwargs)
            if inputs is not None:
                return self._run(other, inputs, args, kwargs)
        with self._lock:
            self._side_exits[label] += 1
            taken = path.exits[guard_index] = path.exits.get(guard_index, 0) + 1
            if (taken >= self.options.hot_exit and guard_index not in path.children
                    and (id(path), guard_index) not in self._growing):
                if self._room():
                    # _grow always answers the call (a function may return None): running
                    # eagerly after it would apply the call's in-place writes twice
                    return self._grow(variant, path, guard_index, args, kwargs)
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
        if not isinstance(traced, Trace):
            return self._eager_instead(traced, signature, args, kwargs)
        entry = EntrySpec.from_trace(traced)
        if not _same_entry(entry, variant.spec):
            # (gym's CartPole: the terminal branch reads self.steps_beyond_terminated, an
            # int the root path never reads) a variant of its own, tried before this one
            if self.options.compile != "background" and self._room():
                child = self._compile_path(traced, signature)
                if child is not None:
                    return self._other_entry(variant, traced, child, signature, leaves,
                                             args, kwargs)
            log_recompiles.info("%s: the other path of %s needs a different entry; it runs "
                                "eagerly", self.__qualname__,
                                _guard_label(path.guards[guard_index]))
            if traced.undecided:
                traced.rewind_draws()
                return self._run_eager(args, kwargs, "side exit")
            self._counters["traced_calls"] += 1
            return _plain_result(traced, args, kwargs)
        checks = _new_outside_checks(entry, variant.spec)
        if checks:  # a setting only this branch reads: the whole variant now checks it
            self._widen_entry(variant, checks)
        if self.options.compile == "background":
            return background.grow_later(self, variant, path, guard_index, traced, signature,
                                         args, kwargs)
        child = self._compile_path(traced, signature, may_defer=True)
        if child is DEFERRED:  # long: LLVM on the compile thread (compile_policy)
            self._counters["background_compiles"] += 1
            return background.grow_later(self, variant, path, guard_index, traced, signature,
                                         args, kwargs)
        if child is not None:
            path.children[guard_index] = child
            log_recompiles.info("%s: compiled the other path of %s", self.__qualname__,
                                _guard_label(path.guards[guard_index]))
            self._store_to_disk(variant, leaves)
            if child.backward is not None or traced.undecided:
                return self._run_new(variant, args, kwargs, traced)
        elif traced.undecided:
            traced.rewind_draws()
            return self._run_eager(args, kwargs, self._untraceable.get(signature, "side exit"))
        self._counters["traced_calls"] += 1
        return _plain_result(traced, args, kwargs)

    def _other_entry(self, variant, traced, root, signature, leaves, args, kwargs):
        """Make ``root`` (the compiled other path of a guard of ``variant``, whose trace
        needs another entry) a variant tried before ``variant``: the calls that take that
        path pass its entry guard first, and the others go on from its side exit to
        ``variant`` (``Variant.exits_to``). Answers the traced call."""
        added = variant.add_other_path(Variant(EntrySpec.from_trace(traced), None, root))
        self._add_variant_before(added, variant)
        log_recompiles.info("%s: compiled variant %d (the other path of a guard, with a "
                            "different entry)", self.__qualname__, len(self._variants))
        self._store_to_disk(added, leaves)
        if root.backward is not None or traced.undecided:
            return self._run_new(added, args, kwargs, traced)
        self._counters["traced_calls"] += 1
        return _plain_result(traced, args, kwargs)

    def _add_variant_before(self, added, variant):
        position = self._variants.index(variant)
        self._variants = self._variants[:position] + (added,) + self._variants[position:]

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
        """The disk cache's ``(key, signature, opened)`` for a call with ``leaves``, as the
        shape policy stands now (``DiskCache.key``)."""
        return self._cache.key(self.fn, self.options, self.policy, leaves)


RAISED = "raised while tracing: the eager run raises it too"
# ``_compile_path``'s answer when the compile goes to the background thread.
DEFERRED = object()


@dataclass
class _TraceFailed:
    """A trace that tracejit's own code stopped with ``error`` (``Misses._eager_instead``)."""

    error: BaseException


# Traces of one call, each finding one more attribute holding a number its calls rebind
# (attribute_writes.NumberState): an optimizer's step counters and the like.
_NUMBER_STATE_RETRIES = 8
# Calls in a row that leave through a guard in a captured loop's body before the
# function's loops are traced unrolled (``_loop_guard_exit``).
LOOP_EXIT_STREAK = 4


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
    if len(arrays) < 2:
        return False
    # Only arrays over one allocation can overlap: group them by the array owning their
    # memory (a train step's parameters and gradients are as many allocations, and
    # comparing every pair cost 0.8 ms for 40 arrays). Memory NumPy does not own (a
    # buffer, a memory map) is compared pairwise.
    groups = {}
    for array in arrays:
        owner = array
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        groups.setdefault(id(owner) if owner.base is None else None, []).append(array)
    return any(
        np.may_share_memory(first, second)
        for group in groups.values() if len(group) > 1
        for index, first in enumerate(group) for second in group[index + 1:])


def _new_outside_checks(spec, variant_spec):
    """The outside-value checks of ``spec`` (a new path's) that ``variant_spec`` lacks."""
    known = {(path.key, kind) for path, kind, _ in variant_spec.outside if kind != "shared"}
    shared = [value for _, kind, value in variant_spec.outside if kind == "shared"]
    return [(path, kind, value) for path, kind, value in spec.outside
            if (value not in shared if kind == "shared" else (path.key, kind) not in known)]


def _repeated_containers(tree):
    """Whether one dict or list appears twice in ``tree`` (the call's arguments).

    >>> d = {"X": 1}
    >>> _repeated_containers(((d, {"X": 1}), {})), _repeated_containers(((d, [d]), {}))
    (False, True)
    """
    containers = argument_containers(tree)
    return len({id(container) for _, container in containers}) < len(containers)


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


def _plain_result(traced, args, kwargs):
    """A trace's outputs as the call's result: the leaves that are Tensors eagerly (computed
    from Tensor arguments, or Tensors reached through them: a model argument's self.W) as
    Tensors, the others as NumPy made them (``return loss, x * 3`` with ``x`` an ndarray)."""
    outputs = traced.force_outputs()
    if not traced.tensor_leaves:
        return outputs
    values = [_wrap_tensor(value) if position in traced.tensor_leaves else value
              for position, value in enumerate(traced.output_values)]
    return put_back(pytree.unflatten(traced.output_tree, values), traced.returned_containers,
                    (args, kwargs))


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
