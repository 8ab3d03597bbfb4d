"""Checking that compiled equals eager, for tracejit's tests and for users' own models.

``compare_results(actual, expected)`` returns ``None`` or a description of the first
difference (structure, shape, dtype, or values beyond the per-dtype tolerance).
"""

from __future__ import annotations

import numpy as np

from tracejit.tracer import pytree

from .tensor import unwrap

# Per-dtype tolerances between compiled and eager results: transcendental functions are
# within a few ulp, reductions may add in another order.
TOLERANCES = {
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-11, 1e-13),
    np.dtype(np.float16): (1e-3, 1e-4),
}


def tolerance(dtype, rtol=None, atol=None, computed_in=None):
    """``(rtol, atol)`` for results of ``dtype``; ``computed_in``: the least precise float
    dtype the result was computed from (a float32 sum times a float64 scalar is float64
    with float32's rounding in it), whose tolerance then applies when it is looser."""
    default_rtol, default_atol = TOLERANCES.get(np.dtype(dtype), (0.0, 0.0))
    if computed_in is not None and np.dtype(dtype).kind in "fc":
        loose_rtol, loose_atol = TOLERANCES.get(np.dtype(computed_in), (0.0, 0.0))
        default_rtol, default_atol = max(default_rtol, loose_rtol), max(default_atol,
                                                                         loose_atol)
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def legacy_random_state():
    """``np.random``'s global state, its key words copied: compare two with
    ``same_random_state`` to check that a compiled call drew what eager draws.

    >>> import numpy as np
    >>> np.random.seed(3); before = legacy_random_state()
    >>> same_random_state(before, legacy_random_state()), (np.random.rand(), None)[1]
    (True, None)
    >>> same_random_state(before, legacy_random_state())
    False
    """
    name, keys, position, has_gauss, gauss = np.random.get_state()
    return name, keys.copy(), position, has_gauss, gauss


def same_random_state(first, second):
    """Whether two ``legacy_random_state`` results are the same state."""
    return first[0] == second[0] and np.array_equal(first[1], second[1]) and (
        first[2:] == second[2:])


def least_precise_float(values):
    """The float dtype with the loosest tolerance among the arrays in ``values`` (a
    pytree), or None."""
    dtypes = {np.asarray(unwrap(leaf)).dtype for leaf in pytree.flatten(values)[0]
              if isinstance(unwrap(leaf), (np.ndarray, np.generic))}
    floats = [dtype for dtype in dtypes if dtype in TOLERANCES]
    return max(floats, key=lambda dtype: TOLERANCES[dtype][0]) if floats else None


def _plain(value):
    return unwrap(value)


def compare_results(actual, expected, rtol=None, atol=None, computed_in=None):
    actual_leaves, actual_tree = pytree.flatten(actual)
    expected_leaves, expected_tree = pytree.flatten(expected)
    if actual_tree != expected_tree:
        return f"structure {actual_tree!r} != {expected_tree!r}"
    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        problem = compare_leaf(_plain(got), _plain(want), rtol, atol, computed_in)
        if problem:
            return f"output leaf {index}: {problem}"
    return None


def compare_leaf(got, want, rtol=None, atol=None, computed_in=None):
    if isinstance(want, (np.ndarray, np.generic)) or isinstance(got, (np.ndarray, np.generic)):
        got_array, want_array = np.asarray(got), np.asarray(want)
        if type(got) is not type(want) and not (
            isinstance(got, np.generic) and isinstance(want, np.generic)
        ):
            return f"type {type(got).__name__} != {type(want).__name__}"
        if got_array.dtype != want_array.dtype:
            return f"dtype {got_array.dtype} != {want_array.dtype}"
        if got_array.shape != want_array.shape:
            return f"shape {got_array.shape} != {want_array.shape}"
        relative, absolute = tolerance(want_array.dtype, rtol, atol, computed_in)
        if want_array.dtype.kind in "fc":
            close = np.isclose(got_array, want_array, rtol=relative, atol=absolute,
                               equal_nan=True)
        else:
            close = got_array == want_array
        if not np.all(close):
            bad = np.argwhere(~np.asarray(close))
            where = tuple(int(i) for i in bad[0]) if bad.size else ()
            with np.errstate(all="ignore"):
                error = np.nanmax(np.abs(got_array.astype(float) - want_array.astype(float))) \
                    if want_array.size else 0.0
            return (f"values differ at {where}: {got_array[where]!r} != {want_array[where]!r} "
                    f"(max abs error {error:.3g}, {int((~np.asarray(close)).sum())} of "
                    f"{want_array.size} elements beyond rtol={relative}, atol={absolute})")
        return None
    if got != want and not (got != got and want != want):
        return f"{got!r} != {want!r}"
    return None


class CompiledMismatch(AssertionError):
    """A compiled result differs from the eager one; the message says where."""


def _copy(tree):
    import copy

    return copy.deepcopy(tree)


def _as_arguments(arguments):
    return arguments if isinstance(arguments, tuple) else (arguments,)


def assert_compiled_matches_eager(fn, *arg_sets, rtol=None, atol=None, grads=False,
                                  **jit_options):
    """Run ``fn`` eagerly and compiled on every argument set and compare.

    Each argument set (a tuple of arguments, or a single argument) is run eagerly and
    then twice through ``jit(fn, **jit_options)`` (the first call of a new variant is
    computed by its trace, or by native code when a decision the trace took may not
    be eager's, the second by native code); outputs are compared for structure,
    shape, dtype and values (per-dtype tolerances, the loosest of the result's and the
    arguments' float dtypes: ``rtol``/``atol`` override), and so are
    the arguments afterwards (for functions that write into their inputs). With
    ``grads=True`` the gradients of a scalar result with respect to every floating-point
    array argument are compared as well (and the compiled call must have put its compiled
    backward on the tape). Raises ``CompiledMismatch`` naming the argument
    set, the call, the output leaf, the largest error and where it is; also fails if no
    call ran compiled code. Returns a summary dict (calls compared, compiled calls).

    >>> import numpy as np
    >>> summary = assert_compiled_matches_eager(lambda x: np.tanh(x) * 2, np.ones(3),
    ...                                         np.ones(5))
    >>> summary["compiled_calls"] >= 2
    True
    """
    from .jit import JitFunction, jit

    jitted = fn if isinstance(fn, JitFunction) else jit(getattr(fn, "fn", fn), **jit_options)
    eager = jitted.fn
    compared = 0
    for number, arguments in enumerate(arg_sets):
        arguments = _as_arguments(arguments)
        eager_arguments = _copy(arguments)
        with np.errstate(all="ignore"):
            expected = eager(*eager_arguments)
        for call in ("first (traced)", "second (compiled)"):
            compiled_arguments = _copy(arguments)
            with np.errstate(all="ignore"):
                actual = jitted(*compiled_arguments)
            where = f"argument set {number}, {call} call"
            problem = compare_results(actual, expected, rtol, atol,
                                      least_precise_float(arguments))
            if problem:
                raise CompiledMismatch(f"{jitted.__qualname__}: {where}: {problem}")
            problem = compare_results(compiled_arguments, eager_arguments, rtol, atol)
            if problem:
                raise CompiledMismatch(f"{jitted.__qualname__}: {where}: the arguments "
                                       f"afterwards differ: {problem}")
            compared += 1
        if grads:
            _compare_gradients(jitted, eager, arguments, number, rtol, atol)
    stats = jitted.stats()
    if stats["compiled_calls"] == 0:
        raise CompiledMismatch(
            f"{jitted.__qualname__}: no call ran compiled code (eager runs: "
            f"{stats['eager_calls']}); see .explain():\n{jitted.explain()}"
        )
    return {"argument_sets": len(arg_sets), "calls": compared,
            "compiled_calls": stats["compiled_calls"], "compiles": stats["compiles"]}


def _compare_gradients(jitted, eager, arguments, number, rtol, atol):
    from .tensor import Tensor, tensor

    def leaves(values):
        flat, tree = pytree.flatten(values)
        return [tensor(leaf, requires_grad=True)
                if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f" else leaf
                for leaf in flat], tree

    from .autograd import OutputNode

    results = []
    for function in (eager, jitted):
        flat, tree = leaves(_copy(arguments))
        value = function(*pytree.unflatten(tree, flat))
        if not isinstance(value, Tensor) or value.size != 1:
            raise CompiledMismatch(f"grads=True needs a scalar result, got {type(value)}")
        if function is jitted and value.requires_grad and not isinstance(value.grad_fn,
                                                                         OutputNode):
            raise CompiledMismatch(f"{jitted.__qualname__}: argument set {number}: the call "
                                   "with gradients did not run compiled (eager runs: "
                                   f"{jitted.stats()['eager_calls']})")
        value.backward()
        results.append([leaf.grad.data if isinstance(leaf, Tensor) and leaf.grad is not None
                        else None for leaf in flat])
    for index, (got, want) in enumerate(zip(results[1], results[0])):
        if (got is None) != (want is None):
            raise CompiledMismatch(f"{jitted.__qualname__}: argument set {number}: gradient "
                                   f"of leaf {index}: one side has none")
        if got is not None:
            problem = compare_leaf(got, want, rtol, atol)
            if problem:
                raise CompiledMismatch(f"{jitted.__qualname__}: argument set {number}: "
                                       f"gradient of argument leaf {index}: {problem}")
