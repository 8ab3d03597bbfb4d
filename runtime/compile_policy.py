"""What a call may wait for: the compile-cost policy of ``jit(compile="auto")``, the default.

Before lowering or LLVM runs, codegen shows the optimized graph's ``CompileEstimate``
(``codegen/compile_estimate.py``: equations, the rounding-bound ones among them, loop
bodies; seconds of an idle core) to ``CompileBudget.admit``, which decides:

* under ``BACKGROUND_SECONDS``: compile now, on the calling thread, as ``"sync"`` does;
* from there to ``REFUSE_SECONDS``: compile on the background thread
  (``runtime/background.py``): the call runs eagerly (or returns the trace's result) and
  later calls run native code once it is ready, so no call waits for a long compile;
* past ``REFUSE_SECONDS``: do not compile: calls of that signature run eagerly, and one
  warning names the function's ``def`` line (and its captured loops' ``for`` lines) and
  how to force the compile.

A recompile storm stops compiling too: when the last ``STORM_COMPILES`` variants a
function made (new size buckets aside) were never called again (each call brought new
list lengths or values to specialize on, as an EM step over ragged Python lists does) and
each was estimated at ``STORM_COMPILE_SECONDS`` or more, a new miss runs eagerly instead
of compiling (``recompile storm`` in ``stats()["eager_calls"]``), with one warning. It
lifts as soon as one of those variants takes a call. Before a storm builds, a function
that has made two variants and never called one again compiles nothing estimated at
``UNPROVEN_SECONDS`` or more: the call takes the trace's result and the variant's guard
is kept, and a later call it takes (or a reuse of any variant) compiles it. Such
variants count toward a storm as compiled ones do, so a storm pays two long compiles and
a trace, not ``STORM_COMPILES`` compiles. Estimates, not measured times,
decide, so what compiles does not depend on the machine's load. ``jit(compile="sync")``
waits for every compile and never stops for a storm; ``compile="background"`` never
waits. Refusing is always safe: the eager run is NumPy's.

>>> from tracejit.codegen.compile_estimate import CompileEstimate
>>> CompileBudget("auto", may_defer=True).admit(CompileEstimate(100, 0, 0))   # 0.1 s: now
>>> try:   # L_layer_model at the course's size: 975 equations, 841 of them bounds
...     CompileBudget("auto", may_defer=True).admit(CompileEstimate(975, 841, 1))
... except CompileDeferred as deferred:
...     print(round(deferred.estimate.seconds, 1))
8.5
>>> CompileBudget("sync").admit(CompileEstimate(99999, 99999, 1))   # forced: no limit
"""

from __future__ import annotations

import warnings

from tracejit.codegen.compile_estimate import NOTHING

# Estimated seconds (idle core) past which a compile goes to the background thread, and
# past which it is not done at all. Coursera's L_layer_model estimates 5 s on its 4-3-1
# test net (6.5 s measured at load 2.5, 13.6 s at load 8-17) and 9 s at the course's
# size (layers [12288, 20, 7, 5, 1]: 48-69 s measured on the loaded machine, after which
# every call left compiled code through a relu mask's margin and ran eagerly).
BACKGROUND_SECONDS = 8.0
REFUSE_SECONDS = 60.0
# A storm: this many variants in a row never called again, each estimated this long. The
# HMM EM step's variants estimate 1.3-1.7 s (they took 7-30 s each at load 20); a small
# model's train step (nnfs, 290 equations: 0.3 s), swept over batch sizes and optimizer
# counters in the tests, is no storm.
STORM_COMPILES = 3
STORM_COMPILE_SECONDS = 1.0
# A compile estimated this long or more waits until the function has shown reuse, once it
# has two variants: one of its variants called again, or a later call this variant's guard
# takes (``unproven``). A storm's second and third long compiles (HMM EM: 7-30 s each
# under load) are then traces alone.
UNPROVEN_SECONDS = STORM_COMPILE_SECONDS


class _CompileCost(Exception):
    def __init__(self, estimate):
        super().__init__(str(estimate))
        self.estimate = estimate


class CompileDeferred(_CompileCost):
    """The compile is long: it goes to the background thread (``Misses._compile_path``)."""


class CompileRefused(_CompileCost):
    """The compile would take minutes: its calls run eagerly."""


class CompileUnproven(_CompileCost):
    """The compile is long and the function has not shown it reuses a variant: the call
    takes the trace's result, and a later call of this variant compiles it."""


class Unproven:
    """A long variant traced and left uncompiled until a call comes back to it: its entry
    ``guard`` (checks only) and ``estimate``; counted among a function's recent variants
    for a storm (never called again, as far as the storm rule reads)."""

    calls = born_calls = 0
    bucket_sibling = False

    def __init__(self, guard, estimate):
        self.guard, self.estimate = guard, estimate


class CompileBudget:
    """``codegen.compile``'s ``admit`` for one variant or path (a forward and a backward
    program add up): ``mode`` is the ``compile`` option; ``may_defer``: the caller can hand
    the compile to the background thread (a call's thread can; that thread cannot);
    ``unproven``: a long compile waits for reuse (``unproven``)."""

    def __init__(self, mode, may_defer=False, unproven=False):
        self.mode, self.may_defer, self.unproven = mode, may_defer, unproven
        self.estimate = NOTHING

    def admit(self, estimate):
        self.estimate = self.estimate + estimate
        if self.mode != "auto":
            return
        if self.estimate.seconds >= REFUSE_SECONDS:
            raise CompileRefused(self.estimate)
        if self.unproven and self.estimate.seconds >= UNPROVEN_SECONDS:
            raise CompileUnproven(self.estimate)
        if self.may_defer and self.estimate.seconds >= BACKGROUND_SECONDS:
            raise CompileDeferred(self.estimate)


def in_storm(made, mode):
    """Whether a new variant should not be compiled: ``made`` holds the function's
    variants in the order they were made (each with ``estimate`` and ``born_calls``)."""
    recent = _recent(made)
    if mode != "auto" or len(recent) < STORM_COMPILES:
        return False
    return (not any(variant.calls > variant.born_calls for variant in recent)
            and all(variant.estimate.seconds >= STORM_COMPILE_SECONDS for variant in recent))


def unproven(made, mode):
    """Whether a new variant's long compile should wait for reuse: the function has made
    two variants or more (new size buckets aside), and none was called again. (One is not
    enough: with ``dynamic="auto"`` the first variant has exact shapes and the second call
    of another size makes them symbolic, a variant the first never had a chance to be.)"""
    made = _own_variants(made)
    return mode == "auto" and len(made) >= 2 and not any(
        variant.calls > variant.born_calls for variant in made)


def _own_variants(made):
    """The variants ``made`` that are not another size bucket of a variant (no storm:
    buckets are few, and a sweep over sizes makes one each before any is reused)."""
    return [variant for variant in made if not variant.bucket_sibling]


def _recent(made):
    """The last ``STORM_COMPILES`` of ``_own_variants(made)``."""
    return _own_variants(made)[-STORM_COMPILES:]


def where(fn, loops=()):
    """``"model.py:12 (def train; loops at model.py:15)"``: the lines a note names."""
    code = getattr(fn, "__code__", None)
    place = f"{code.co_filename}:{code.co_firstlineno} (def {code.co_name}" if code else (
        f"{getattr(fn, '__qualname__', fn)} (")
    if loops:
        place += f"; for at {', '.join(dict.fromkeys(loops))}"
    return place + ")"


def warn_refused(fn, qualname, estimate, loops, stacklevel):
    warnings.warn(
        f"{where(fn, loops)}: tracejit function {qualname} is not compiled: {estimate}, "
        f"more than the {REFUSE_SECONDS:.0f} s a call may cost before it runs; calls like "
        "this one run eagerly (NumPy). To compile it anyway, use jit(compile='sync') (the "
        "call waits) or jit(compile='background') (calls run eagerly until it is ready).",
        RuntimeWarning, stacklevel=stacklevel)


def warn_storm(fn, qualname, made, stacklevel):
    recent = _recent(made)
    seconds = sum(variant.estimate.seconds for variant in recent)
    warnings.warn(
        f"{where(fn)}: tracejit function {qualname} stops compiling new variants: its last "
        f"{len(recent)} compiles (about {seconds:.0f} s) were never called again (each call "
        "brought new shapes, lengths or values); new cases run eagerly until a compiled "
        "variant is reused. Arguments that change every call (Python lists of varying "
        "lengths, scalars a loop count reads) are the usual cause; pass arrays, or use "
        "jit(compile='sync') to compile every case.",
        RuntimeWarning, stacklevel=stacklevel)


__all__ = ["BACKGROUND_SECONDS", "REFUSE_SECONDS", "STORM_COMPILES", "STORM_COMPILE_SECONDS",
           "UNPROVEN_SECONDS", "CompileBudget", "CompileDeferred", "CompileRefused",
           "CompileUnproven", "Unproven", "in_storm", "unproven"]
