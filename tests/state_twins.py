"""Jit-vs-eager twins for state tests: ``run_twins(make, method, inputs)`` jits
``make().method`` and runs an eager twin object on the same inputs, comparing results and
the objects' whole state (attributes, containers, exact types) after every call.
Registered by tests/conftest.py: ``from state_twins import run_twins``."""

import copy

import numpy as np

import tracejit as tj


def difference(ours, theirs, where="", tol=1e-9):
    """None when two states (results, objects, containers) are equal; else where not.
    Types must match exactly (a Python int is not an ``np.int64``)."""
    if type(ours) is not type(theirs):
        return f"{where}: {type(ours).__name__} {ours!r} vs {type(theirs).__name__} {theirs!r}"
    if isinstance(ours, np.ndarray):
        if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
            return f"{where}: {ours.dtype}{ours.shape} vs {theirs.dtype}{theirs.shape}"
        if not np.allclose(ours, theirs, rtol=tol, atol=tol, equal_nan=True):
            return f"{where}: {ours!r} vs {theirs!r}"
        return None
    if isinstance(ours, (np.generic, float)):
        same = np.isclose(ours, theirs, rtol=tol, atol=tol, equal_nan=True)
        return None if same else f"{where}: {ours!r} vs {theirs!r}"
    if isinstance(ours, np.random.RandomState):  # a model's self.random: compared by state
        return difference(list(ours.get_state()), list(theirs.get_state()), where, tol)
    if isinstance(ours, (list, tuple)):
        if len(ours) != len(theirs):
            return f"{where}: length {len(ours)} vs {len(theirs)}"
        for index, (a, b) in enumerate(zip(ours, theirs)):
            found = difference(a, b, f"{where}[{index}]", tol)
            if found:
                return found
        return None
    if isinstance(ours, dict):
        if list(ours) != list(theirs):
            return f"{where}: keys {list(ours)} vs {list(theirs)}"
        for key in ours:
            found = difference(ours[key], theirs[key], f"{where}[{key!r}]", tol)
            if found:
                return found
        return None
    if hasattr(ours, "__dict__") and not callable(ours):
        return difference(vars(ours), vars(theirs), f"{where}.", tol)
    return None if ours == theirs else f"{where}: {ours!r} vs {theirs!r}"


def outcome(function, args):
    try:
        return function(*copy.deepcopy(args))
    except Exception as error:  # eager's exception is part of what must match
        return ("raised", type(error).__name__, str(error))


def run_twins(make, method, inputs, tol=1e-9, **options):
    """The jit of ``make().method`` and an eager twin, called on each of ``inputs``;
    results and objects compared after every call. Returns the jit function."""
    ours, theirs = make(), make()
    f = tj.jit(getattr(ours, method), cache="memory", **options)
    for index, args in enumerate(inputs):
        got = outcome(f, args)
        want = outcome(getattr(theirs, method), args)
        found = difference(got, want, "result", tol) or difference(ours, theirs, "state", tol)
        assert found is None, f"call {index}: {found}; {f.stats()}"
    return f
