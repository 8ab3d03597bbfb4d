"""Checks shared by the real-model test files (``tests/tracer/test_real_model_*.py``):
run a model eagerly and through ``jit`` on copies of the same arguments and compare
results, types and the arguments afterwards. Registered by ``conftest.py`` so test modules
``import real_model_checks``."""

import copy
import functools

import numpy as np
import pytest

import tracejit as tj


def jitted(function, **options):
    options.setdefault("cache", "memory")
    return tj.jit(function, **options)


def assert_same(got, want, rtol=1e-10, atol=1e-12, where="result"):
    """``got`` equals ``want`` in structure, types, shapes, dtypes and values."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for key in want:
            assert_same(got[key], want[key], rtol, atol, f"{where}[{key!r}]")
        return
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), where
        for position, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, rtol, atol, f"{where}[{position}]")
        return
    if isinstance(want, (np.ndarray, np.generic)):
        assert type(got) is type(want), (where, type(got), type(want))
        assert got.shape == want.shape and got.dtype == want.dtype, (
            where, got.shape, want.shape, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=where)
        return
    assert type(got) is type(want), (where, type(got), type(want))
    if isinstance(want, float):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)
    else:
        assert got == want, where


def assert_equal(got, want, where="result"):
    """``assert_same`` to the bit: no tolerance (a NaN equals a NaN)."""
    assert_same(got, want, rtol=0, atol=0, where=where)


def check_calls(function, argument_sets, rtol=1e-10, atol=1e-12, **options):
    """Run ``function`` eagerly and through ``jit`` on copies of each argument tuple;
    results and the arguments afterwards (in-place writes) must agree. Returns the jit
    function for stats checks."""
    f = jitted(function, **options)
    for arguments in argument_sets:
        eager_args, jit_args = copy.deepcopy(arguments), copy.deepcopy(arguments)
        want = function(*eager_args)
        got = f(*jit_args)
        assert_same(got, want, rtol, atol)
        assert_same(jit_args, eager_args, rtol, atol, where="arguments after the call")
    return f


def run_calls(function, argument_sets, rtol=1e-10, atol=1e-12, repeats=2, **options):
    """Eager vs ``jit``, each argument set called ``repeats`` times (the trace, then
    compiled code): results and arguments afterwards agree, and an exception eager raises
    is raised too. An argument set is a tuple (deep-copied per side) or a factory
    returning a fresh one."""
    f = jitted(function, **options)
    for arguments in argument_sets:
        make = arguments if callable(arguments) else functools.partial(copy.deepcopy, arguments)
        for _ in range(repeats):
            eager_args, jit_args = make(), make()
            try:
                with np.errstate(all="ignore"):
                    want = function(*eager_args)
            except Exception as error:  # noqa: BLE001 - eager's exception is the contract
                with pytest.raises(type(error)), np.errstate(all="ignore"):
                    f(*jit_args)
                continue
            with np.errstate(all="ignore"):
                got = f(*jit_args)
            assert_same(got, want, rtol, atol)
            assert_same(jit_args, eager_args, rtol, atol, where="arguments after the call")
    return f


def no_internal_errors(f):
    """No call fell back because tracejit itself failed (an internal error while tracing,
    or an IR the compiler rejected)."""
    reasons = f.stats().get("eager_calls") or {}
    text = repr(f.stats().get("eager_reasons"))
    assert "internal error" not in reasons, text
    assert "not compiled" not in reasons, text


def compiled_some(f):
    assert f.stats()["compiled_calls"] > 0, f.explain()


def compiles(f):
    return f.stats()["compiles"]


def all_compiled(f, calls):
    """Every one of ``calls`` calls ran compiled code: the program's, or the first call's
    trace (which leaves a captured loop's later trips to the program: tracer/pending.py)."""
    stats = f.stats()
    return (stats["calls"] == calls and not stats["eager_calls"]
            and stats["compiled_calls"] + stats["traced_calls"] == calls)


def rng_for(seed):
    return np.random.default_rng(seed)


def finite_differences(loss, value, eps=1e-6):
    """Central differences of the NumPy scalar function ``loss`` at ``value``."""
    value = np.array(value, dtype=np.float64)
    gradient = np.zeros_like(value)
    for index in np.ndindex(value.shape):
        saved = value[index]
        value[index] = saved + eps
        up = loss(value)
        value[index] = saved - eps
        down = loss(value)
        value[index] = saved
        gradient[index] = (up - down) / (2 * eps)
    return gradient
