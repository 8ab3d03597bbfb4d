"""Why things happened: which entry guard a call missed, and ``explain()``'s report."""

from __future__ import annotations

import inspect
import weakref

import numpy as np

from tracejit.tracer import pytree, random_draws
from tracejit.tracer.ir import format_shape_guard

from .guards import is_json_value, number_type
from .tensor import unwrap

_live = weakref.WeakSet()
_flush_registered = False


def register(function):
    """Remember a jit function: at exit its counters go to the disk cache, so ``tracejit
    cache stats`` shows them after the process ends."""
    global _flush_registered
    _live.add(function)
    if not _flush_registered:
        import atexit

        atexit.register(flush_all)
        _flush_registered = True


def flush_all():
    for function in list(_live):
        try:
            function.flush_counters()
        except Exception:  # never fail interpreter exit over counters
            pass


def live_functions():
    return list(_live)


def _leaf_shape(leaf):
    array = unwrap(leaf)
    return getattr(array, "shape", None), getattr(array, "dtype", None)


def leaf_names(fn, treedef):
    """The user's name for each argument leaf of a call of ``fn`` whose ``(args, kwargs)``
    flatten to ``treedef``: ``x``, ``params[1]``, ``cfg['lr']``, ``args[0]`` for ``*args``.
    Falls back to ``argument leaf N`` where the signature cannot be read.

    >>> def f(x, params, *rest, cfg=None): pass
    >>> leaf_names(f, pytree.flatten(((1, (2, 3), 4), {"cfg": {"lr": 5}}))[1])
    ['x', 'params[0]', 'params[1]', 'rest[0]', "cfg['lr']"]
    """
    paths = pytree.leaf_paths(treedef)
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return [f"argument leaf {position}" for position in range(len(paths))]
    positional = [p.name for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in parameters if p.kind == p.VAR_POSITIONAL), "args")
    names = []
    for position, path in enumerate(paths):
        if len(path) < 2:
            names.append(f"argument leaf {position}")
            continue
        group, key, inner = path[0], path[1][1:-1], "".join(path[2:])
        if group == "[1]":  # a keyword argument: its key is the parameter's name
            names.append(key.strip("'\"") + inner)
        elif int(key) < len(positional):
            names.append(positional[int(key)] + inner)
        else:
            names.append(f"{rest}[{int(key) - len(positional)}]{inner}")
    return names


def _same_static(leaf, value):
    """Whether the entry guard takes ``leaf`` for the static ``value`` it was compiled for
    (``guards._leaf_checks``): plain values and NumPy scalars by type and value, anything
    else by identity (a dataclass's ``__eq__`` compares its array fields, and raises)."""
    if leaf is value:
        return True
    return (is_json_value(value) or isinstance(value, np.generic)) and (
        type(leaf) is type(value) and bool(leaf == value))


def mismatch(spec, leaves, names=None):
    """The first way ``leaves`` differ from what ``spec`` was compiled for (old -> new).
    ``names`` are the leaves' names (``leaf_names``)."""
    if len(leaves) != len(spec.leaves):
        return f"{len(spec.leaves)} argument leaves -> {len(leaves)}"
    if names is None or len(names) != len(spec.leaves):
        names = [f"argument leaf {position}" for position in range(len(spec.leaves))]
    for name, leaf_spec, leaf in zip(names, spec.leaves, leaves):
        if leaf_spec.kind == "static":
            if leaf_spec.generator is not None:  # (drawn from: any generator of its kind)
                if random_draws.generator_kind(leaf) != leaf_spec.generator:
                    return f"{name}: {leaf_spec.value!r} -> {leaf!r} (another kind)"
                continue
            if not _same_static(leaf, leaf_spec.value):
                return f"{name}: {leaf_spec.value!r} -> {leaf!r} (specialized on its value)"
            continue
        if leaf_spec.kind == "instance":
            if type(leaf) is not leaf_spec.value:
                return (f"{name}: {leaf_spec.value.__qualname__} -> {type(leaf).__qualname__}"
                        " (guarded by its class)")
            continue
        if leaf_spec.kind == "scalar":
            continue
        shape, dtype = _leaf_shape(leaf)
        if shape is None:
            return f"{name}: an array -> {type(leaf).__name__}"
        if type(leaf).__name__ != leaf_spec.type_name:
            return f"{name}: {leaf_spec.type_name} -> {type(leaf).__name__}"
        if np.dtype(leaf_spec.dtype) != dtype:
            return f"{name}: dtype {np.dtype(leaf_spec.dtype)} -> {dtype}"
        if len(shape) != len(leaf_spec.shape):
            return f"{name}: rank {len(leaf_spec.shape)} -> {len(shape)}"
        for axis, (dim, size) in enumerate(zip(leaf_spec.shape, shape)):
            if isinstance(dim, int) and dim != size:
                return f"{name}.shape[{axis}]: {dim} -> {size}"
            if isinstance(dim, str):
                low, high = spec.symbols[dim]
                if not low <= size <= high:
                    return (f"{name}.shape[{axis}]: {size} is outside bucket "
                            f"[{low}, {high}]")
    for spec_implicit in spec.implicit:
        try:
            value = spec_implicit.path.resolve(leaves)
        except (KeyError, AttributeError, IndexError, ValueError, TypeError):
            return f"{spec_implicit.path} can no longer be read"
        if type(value).__name__ != spec_implicit.type_name:
            return f"{spec_implicit.path}: {spec_implicit.type_name} -> {type(value).__name__}"
        if number_type(spec_implicit) is not None:  # a number an object keeps: any value
            continue
        shape, dtype = _leaf_shape(value)
        expected = tuple(spec_implicit.shape)
        if dtype != np.dtype(spec_implicit.dtype) or shape != expected:
            return (f"{spec_implicit.path}: {np.dtype(spec_implicit.dtype)}{list(expected)} -> "
                    f"{dtype}{list(shape)}")
    for path, kind, expected in spec.outside:
        if kind == "shared":
            if (why := expected.mismatch(leaves)) is not None:
                return why
            continue
        try:
            value = path.resolve(leaves)
        except (KeyError, AttributeError, IndexError, ValueError, TypeError) as error:
            if kind == "has" and isinstance(error, AttributeError):
                if expected:
                    return f"{path} is gone (hasattr was True when traced)"
                continue
            return f"{path} can no longer be read"
        if kind == "has":
            if not expected:
                return f"{path} exists now (hasattr was False when traced)"
            continue
        if kind == "keys":
            if not isinstance(value, dict) or tuple(value) != expected:
                return f"the keys of {path} changed"
            continue
        if kind == "len":
            if not isinstance(value, (list, tuple)) or len(value) != expected[1]:
                return f"len({path}): {expected[1]} -> {len(value)}"
        elif type(value) is not type(expected) or value != expected:
            return f"{path}: {expected!r} -> {value!r}"
    for guard in spec.shape_guards:
        return f"a relation between dims changed ({format_shape_guard(guard)})"
    return "the arguments' structure changed"


def why_no_variant_matches(variants, leaves, fn=None, shown=3):
    """Why each variant refused the call: the first ``shown`` of them, then a count."""
    reasons = [f"variant {number}: "
               f"{mismatch(variant.spec, leaves, fn and leaf_names(fn, variant.spec.treedef))}"
               for number, variant in enumerate(variants[:shown], 1)]
    if len(variants) > shown:
        reasons.append(f"and {len(variants) - shown} more variant(s)")
    return "; ".join(reasons)


def explain(function):
    lines = [f"tracejit function {function.__qualname__}"]
    stats = function.stats()
    lines.append(
        f"  calls {stats['calls']}: {stats['compiled_calls']} compiled, "
        f"{stats['traced_calls']} traced, {sum(stats['eager_calls'].values())} eager, "
        f"{stats['raised_calls']} raised; "
        f"{stats['compiles']} compiles in {stats['compile_seconds'] * 1e3:.0f} ms"
    )
    if not function._variants:
        lines.append("  no compiled variants yet")
    for number, variant in enumerate(function._variants, 1):
        origin = " (loaded from the disk cache)" if variant.from_disk else ""
        lines.append(f"  variant {number}{origin}: {variant.calls} calls")
        lines.append("    entry guards:")
        names = leaf_names(function.fn, variant.spec.treedef)
        lines.extend(f"      {line}" for line in variant.spec.describe(names))
        for prefix, path in variant.root.walk():
            via = " <- ".join(f"exit at guard {index}" for index in prefix) or "root"
            program = path.program
            lines.append(f"    path [{via}]: {path.calls} calls, {program.kernel_count} "
                         f"kernel(s): " + ", ".join(
                             f"{kernel.name}" for kernel in program.kernels))
            lines.extend(_profile_lines(program))
            if path.backward is not None:
                lines.append(f"      backward: {path.backward.kernel_count} kernel(s): " +
                             ", ".join(kernel.name for kernel in path.backward.kernels) +
                             f"; the forward saves {path.residual_bytes} bytes of residuals")
                lines.extend(_profile_lines(path.backward))
            for index, guard in enumerate(path.guards):
                where = guard.location
                place = f"{where.file}:{where.line} {where.source!r}" if where else "?"
                exits = path.exits.get(index, 0)
                taken = f", side exits {exits}" if exits else ""
                lines.append(f"      guard {index}: {guard.convert}(...) == {guard.expected!r}"
                             f" at {place}{taken}")
    if stats["eager_calls"]:
        lines.append("  eager runs:")
        for reason, count in stats["eager_calls"].items():
            full = stats["eager_reasons"].get(reason, reason)
            lines.append(f"    {count} x {reason}" + (f" ({full})" if full != reason else ""))
    if getattr(function, "_loop_notes", None):
        lines.append("  loops not captured (they run unrolled in the trace):")
        lines.extend(f"    {note}" for note in function._loop_notes)
    if function._reasons:
        lines.append("  why calls ran eagerly or were not compiled:")
    for reason, detail in function._reasons.items():
        lines.append(f"    {reason}")
        if detail not in reason:
            lines.append(f"      {detail}")
    return "\n".join(lines)


def _profile_lines(program):
    """Time per kernel of a program built with TRACEJIT_PROFILE=1, largest first."""
    rows = [row for row in program.profile() if row[1]]
    if not rows:
        return []
    total = sum(seconds for _, _, seconds in rows) or 1e-30
    # (a loop program's body kernels count trips: it counts its own calls)
    calls = getattr(program, "profiled_calls", 0) or rows[0][1]
    lines = [f"      profile ({calls} calls, {1e3 * total / calls:.3f} ms per call "
             "in kernels):"]
    for kernel, calls, seconds in sorted(rows, key=lambda row: -row[2]):
        lines.append(f"        {kernel.name:32} {1e6 * seconds / calls:10.1f} us/call "
                     f"{100 * seconds / total:5.1f}%")
    return lines
