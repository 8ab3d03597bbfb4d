"""Never a wrong result, never a crash (issue 12): every reproducer of a silent mismatch
or a crash where eager NumPy runs, as a test, and an injected failure at every stage of
tracing and compiling that must leave the user with the eager result."""

import itertools
import os
import random
import time

import numpy as np
import pytest

import tracejit.codegen.llvm  # noqa: F401 (tracejit.codegen.llvm)
import tracejit.codegen.program  # noqa: F401 (tracejit.codegen.program)
import tracejit.runtime.cache  # noqa: F401 (tracejit.runtime.cache)
import tracejit.tracer.rewritten_code  # noqa: F401 (tracejit.tracer.rewritten_code)
import tracejit.tracer.tracing  # noqa: F401 (tracejit.tracer.tracing)
from tracejit import codegen, jit, runtime, tensor, tracer, value_and_grad
from tracejit.runtime.tensor import TensorError


def compiled(fn, **options):
    return jit(fn, cache=False, **options)


def run_twice(function, *args):
    """The first call traces, the second runs the compiled variant."""
    function(*args)
    return function(*args)


# --- calls outside NumPy are not frozen --------------------------------------------------
def stamp(x):
    return x + time.time()


def perf(x):
    return x + time.perf_counter()


def draw(x):
    return x + random.random()


def environment_default(x):
    return x * float(os.environ.get("TRACEJIT_TEST_SCALE", "1"))


@pytest.mark.parametrize("function", [stamp, perf, draw, environment_default])
def test_impure_calls_run_eagerly_with_the_call_named(function):
    jitted = compiled(function)
    first = jitted(np.zeros(2))
    time.sleep(0.002)
    second = jitted(np.zeros(2))
    assert jitted.stats()["compiled_calls"] == 0
    if function is not environment_default:
        assert second[0] != first[0]  # each call computed its own value
    assert "inside a compiled function" in jitted.explain()
    assert "test_soundness.py" in jitted.explain()


def test_a_global_iterator_is_not_frozen():
    counter = itertools.count()

    def advance(x):
        return x + next(counter)

    jitted = compiled(advance)
    assert [jitted(np.zeros(1))[0] for _ in range(4)] == [0.0, 1.0, 2.0, 3.0]


def test_environment_variables_read_by_subscript_are_guarded(monkeypatch):
    monkeypatch.setenv("TRACEJIT_TEST_MODE", "1")

    def scaled(x):
        return x * float(os.environ["TRACEJIT_TEST_MODE"])

    jitted = compiled(scaled)
    run_twice(jitted, np.ones(2))
    monkeypatch.setenv("TRACEJIT_TEST_MODE", "5")
    np.testing.assert_array_equal(jitted(np.ones(2)), [5.0, 5.0])


def test_pure_calls_still_compile():
    import math

    def pure(x, n):
        return x * math.sqrt(len([1, 2, 3])) + max(n, 2) + abs(-1.0) + "ab".count("a")

    jitted = compiled(pure)
    run_twice(jitted, np.ones(3), 4)
    assert jitted.stats()["compiled_calls"] == 1


# --- defaults are read at every call ----------------------------------------------------
def test_mutated_default_dict_is_seen():
    def scale(x, cfg={"k": 2.0}):  # noqa: B006 - the mutable default is the point
        return x * cfg["k"]

    jitted = compiled(scale)
    run_twice(jitted, np.ones(2))
    scale.__defaults__[0]["k"] = 3.0
    np.testing.assert_array_equal(jitted(np.ones(2)), [3.0, 3.0])


def test_reassigned_defaults_and_kwdefaults_are_seen():
    def positional(x, k=2.0):
        return x * k

    def keyword(x, *, k=2.0):
        return x * k

    for function, attribute, value in ((positional, "__defaults__", (5.0,)),
                                       (keyword, "__kwdefaults__", {"k": 7.0})):
        jitted = compiled(function)
        run_twice(jitted, np.ones(2))
        setattr(function, attribute, value)
        np.testing.assert_array_equal(jitted(np.ones(2)), function(np.ones(2)))


def test_reassigned_array_default_is_an_input():
    def project(x, w=np.ones((3, 2))):  # noqa: B008
        return x @ w

    jitted = compiled(project)
    run_twice(jitted, np.ones((1, 3)))
    project.__defaults__ = (np.full((3, 2), 2.0),)
    np.testing.assert_array_equal(jitted(np.ones((1, 3))), [[6.0, 6.0]])


def test_settings_dict_read_with_get_is_guarded():
    settings = {"scale": 2.0}

    def scaled(x):
        return x * settings.get("scale", 1.0)

    jitted = compiled(scaled)
    run_twice(jitted, np.ones(2))
    settings["scale"] = 3.0
    np.testing.assert_array_equal(jitted(np.ones(2)), [3.0, 3.0])


class Layer:
    def __init__(self):
        self.w = np.ones(3)
        self.b = None

    def __call__(self, x):
        y = x * self.w
        if self.b is not None:
            y = y + self.b
        return y


def test_callable_object_compiles_and_sees_its_attributes():
    layer = Layer()
    jitted = compiled(layer)
    run_twice(jitted, np.ones(3))
    assert jitted.stats()["compiled_calls"] == 1
    layer.b = np.ones(3)
    np.testing.assert_array_equal(jitted(np.ones(3)), [2.0, 2.0, 2.0])


# --- gradients through buffers filled in place --------------------------------------------
def fill_buffer(x):
    h = np.zeros(3)
    h[:] = x * 2
    return np.sum(h) + np.sum(x)


def fill_rows(x):
    hs = np.zeros((x.shape[0], 2))
    for t in range(x.shape[0]):
        hs[t] = np.tanh(x[t] * hs[t - 1] + 1.0) if t else np.tanh(x[t])
    hs[0] += 1.0
    return (hs ** 2).sum()


@pytest.mark.parametrize("function", [fill_buffer, fill_rows])
def test_value_and_grad_keeps_gradients_of_buffers(function):
    x = np.array([[0.5, -1.0], [1.5, 0.25], [2.0, 1.0]]) if function is fill_rows else (
        np.array([1.0, 2.0, 3.0]))
    value, gradient = value_and_grad(function)(x)
    expected = _finite_difference(function, x)
    np.testing.assert_allclose(gradient, expected, rtol=1e-6, atol=1e-7)
    jitted = compiled(value_and_grad(function))
    for _ in range(3):
        compiled_value, compiled_gradient = jitted(x)
    assert jitted.stats()["compiled_calls"] >= 1
    np.testing.assert_allclose(compiled_value, value, rtol=1e-12)
    np.testing.assert_allclose(compiled_gradient, expected, rtol=1e-6, atol=1e-7)
    leaf = tensor(x, requires_grad=True)
    compiled(function)(leaf).backward()
    np.testing.assert_allclose(leaf.grad.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_eager_tensor_written_into_ndarray_raises_naming_the_line():
    leaf = tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(TensorError, match=r"test_soundness.py:\d+: a Tensor that requires"):
        fill_buffer(leaf)


def _finite_difference(function, x, eps=1e-6):
    gradient = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        gradient[index] = (function(up) - function(down)) / (2 * eps)
    return gradient


# --- crashes where eager NumPy runs --------------------------------------------------------
def halve(values, depth):
    if depth == 0:
        return values
    return halve(values * 0.5, depth - 1)


def recursive(values):
    return halve(values, 2)


def take_range(values):
    return values[range(values.shape[0] - 1)]


def cross_entropy(scores, labels):
    return -np.log(scores[np.arange(scores.shape[0]), labels]).sum()


@pytest.mark.parametrize("function, args", [
    (recursive, (np.arange(4.0),)),
    (take_range, (np.arange(5.0),)),
    (Layer(), (np.arange(3.0),)),
])
def test_former_crashes_compile(function, args):
    jitted = compiled(function)
    for _ in range(2):
        np.testing.assert_array_equal(jitted(*args), function(*args))
    assert jitted.stats()["compiled_calls"] == 1


def test_gather_gradient_with_a_dynamic_batch():
    rng = np.random.default_rng(0)
    jitted = compiled(value_and_grad(cross_entropy))
    for batch in (4, 5, 7, 6):
        scores = rng.random((batch, 3)) + 0.1
        labels = rng.integers(0, 3, batch)
        value, gradient = jitted(scores, labels)
        expected_value, expected_gradient = value_and_grad(cross_entropy)(scores, labels)
        np.testing.assert_allclose(value, expected_value)
        np.testing.assert_allclose(gradient, expected_gradient)


@pytest.mark.parametrize("array, message", [
    (np.arange(3, dtype=">f4"), "non-native byte order"),
    (np.arange(3, dtype=np.uint64), "uint64"),
])
def test_unsupported_dtypes_run_eagerly_with_a_clear_reason(array, message):
    jitted = compiled(lambda x: x * 2)
    np.testing.assert_array_equal(jitted(array), array * 2)
    assert message in jitted.explain()
    assert "KeyError" not in jitted.explain()


# --- an internal failure at any stage is the eager result ---------------------------------
def model(x, w):
    h = np.tanh(x @ w)
    if h.sum() > -1e9:
        h = h * 2
    return h.sum(axis=1)


def _boom(*args, **kwargs):
    raise RuntimeError("injected internal failure")


STAGES = {
    "front end": (tracer.rewritten_code, "rewrite_tree"),
    "tracer": (tracer.tracing.TracingContext, "atom"),
    "passes": (codegen.program, "optimize"),
    "scheduler": (codegen.program, "make_schedule"),
    "lowering": (codegen.program.ProgramLowering, "build"),
    "LLVM": (codegen.llvm, "compile_module"),
    "program call": (codegen.program.Program, "__call__"),
    "cache write": (runtime.cache.DiskCache, "store"),
    "cache load": (runtime.cache.DiskCache, "load"),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_injected_internal_failure_gives_the_eager_result(stage, monkeypatch, tmp_path):
    owner, name = STAGES[stage]
    if not hasattr(owner, name):
        pytest.fail(f"stage {stage}: {owner.__name__}.{name} no longer exists; update STAGES")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    tracer.rewritten_code._REWRITTEN.clear()
    monkeypatch.setattr(owner, name, _boom)
    rng = np.random.default_rng(1)
    jitted = jit(model, cache=True)
    for _ in range(3):
        x, w = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
        np.testing.assert_allclose(jitted(x, w), model(x, w), rtol=1e-12)
    tracer.rewritten_code._REWRITTEN.clear()


def test_injected_failure_raises_with_fallback_raise(monkeypatch):
    monkeypatch.setattr(codegen.llvm, "compile_module", _boom)
    jitted = compiled(model, fallback="raise")
    with pytest.raises(RuntimeError, match="injected"):
        jitted(np.ones((2, 4)), np.ones((4, 3)))


def test_the_functions_own_error_is_raised_as_eager_raises_it():
    def broken(x):
        return x @ np.ones((7, 2))

    jitted = compiled(broken)
    with pytest.raises(ValueError):
        jitted(np.ones((2, 3)))


# --- Python scalars seen with a second value are run-time inputs ---------------------------
def scaled_branch(x, alpha, n):
    y = x * alpha + n
    if alpha > 0.5:
        y = y * 2
    return y


def test_scalar_arguments_do_not_compile_per_value():
    jitted = compiled(scaled_branch)
    x = np.arange(4.0, dtype=np.float32)
    for alpha in np.linspace(0.1, 0.9, 12):
        out = jitted(x, float(alpha), 3)
        expected = scaled_branch(x, float(alpha), 3)
        assert out.dtype == expected.dtype == np.float32
        np.testing.assert_allclose(out, expected, rtol=1e-6)
    stats = jitted.stats()
    assert stats["compiles"] <= 3 and stats["compiled_calls"] >= 8, stats


def test_static_argnames_specialize_by_value():
    jitted = compiled(lambda x, alpha: x * alpha, static_argnames="alpha")
    for alpha in (1.0, 2.0, 3.0):
        np.testing.assert_array_equal(jitted(np.ones(2), alpha), np.full(2, alpha))
    assert jitted.stats()["compiles"] == 3


def test_python_scalar_arithmetic_on_run_time_scalars_stays_weak():
    def bias_corrected(p, step, beta=0.9):
        correction = 1.0 - beta ** step
        return p / correction, p * np.sqrt(correction), step + 1

    jitted = compiled(bias_corrected)
    p = np.ones(3, np.float32)
    for step in range(1, 6):
        for got, want in zip(jitted(p, step), bias_corrected(p, step)):
            assert type(got) is type(want)
            assert np.asarray(got).dtype == np.asarray(want).dtype
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_one_array_passed_twice_runs_as_eager_runs():
    def write_then_read(x, y):
        x[0] = 100.0
        return y * 1

    jitted = compiled(write_then_read)
    for _ in range(2):  # compiled for distinct arrays first
        jitted(np.arange(3.0), np.arange(3.0))
    shared = np.arange(3.0)
    np.testing.assert_array_equal(jitted(shared, shared), [100.0, 1.0, 2.0])
    shared = np.arange(3.0)
    np.testing.assert_array_equal(jitted(shared, shared[:]), [100.0, 1.0, 2.0])
    assert jitted.stats()["eager_calls"]["arguments share memory"] == 2


# --- inspection from Python (issue 15) ------------------------------------------------------
def test_lower_shows_the_variant_the_arguments_select():
    jitted = compiled(model)
    x, w = np.ones((5, 4)), np.ones((4, 3))
    lowered = jitted.lower(x, w)
    assert "guard" in lowered.ir and "float64" in lowered.entry_guards
    assert lowered.kernels and "define" in lowered.llvm_ir
    assert lowered.assembly.strip() and "def model(x, w):" in lowered.source
    assert jitted.stats()["calls"] == 1  # compiled by running the function once
    assert jitted.lower(x, w).ir == lowered.ir and jitted.stats()["calls"] == 1


def test_reset_forgets_variants():
    jitted = compiled(lambda x: x + 1)
    run_twice(jitted, np.ones(2))
    jitted.reset()
    assert jitted.stats()["variants"] == 0 and jitted.stats()["calls"] == 0
    run_twice(jitted, np.ones(2))
    assert jitted.stats()["compiles"] == 1


def test_max_variants_warning_points_at_the_callers_line():
    jitted = compiled(lambda x: x * 2, max_variants=1, dynamic=False)
    jitted(np.ones(2))
    with pytest.warns(RuntimeWarning, match="max_variants=1") as record:
        jitted(np.ones(3))
    assert record[0].filename == __file__
