"""``tracejit.jit`` as a user meets it, every result compared with running the same Python
function eagerly on the same data: the forms it wraps (functions, methods, closures,
lambdas), what goes in and out (NumPy, Tensors, Python scalars, pytrees, empty and
non-contiguous arrays, NaN and Inf), branch flips and trace trees, shape buckets,
``max_variants``, eager fallback and its reasons, implicit inputs, in-place writes,
``TRACEJIT_DISABLE``, ``check=True``, options, and the log lines.

Each test decorates its functions itself, after the ``private_cache`` fixture has pointed
``TRACEJIT_CACHE_DIR`` at an empty directory, so compile counts never depend on what an
earlier test left on disk.
"""

from __future__ import annotations

import functools
import inspect
import logging
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

from tracejit import Tensor, jit, no_grad, tensor
from tracejit.runtime.config import OptionError
from tracejit.tracer.errors import TraceError


def known_bug(reason, raises=AssertionError):
    """A behaviour tracejit gets wrong today: the test stays, expected to fail this way."""
    return pytest.mark.xfail(strict=True, raises=raises, reason=reason)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """An empty disk cache per test (jit reads the variable when it decorates)."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(directory))
    monkeypatch.delenv("TRACEJIT_DISABLE", raising=False)
    monkeypatch.delenv("TRACEJIT_LOG", raising=False)
    return directory


# --- comparing with eager ------------------------------------------------------------------
def _tolerance(dtype):
    """(rtol, atol): compiled math is within a few ulp of NumPy's, and a reduction may add
    in another order; atol covers results that cancel to near zero."""
    return {np.dtype(np.float32): (1e-5, 1e-6),
            np.dtype(np.float16): (1e-3, 1e-3)}.get(np.dtype(dtype), (1e-11, 1e-13))


def assert_like_eager(actual, expected):
    """``actual`` has the structure, leaf types, dtypes, shapes and values of ``expected``
    (what the undecorated function returned on the same data)."""
    assert type(actual) is type(expected), (
        f"type {type(actual).__name__} != eager's {type(expected).__name__}"
    )
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key in expected:
            assert_like_eager(actual[key], expected[key])
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            assert_like_eager(got, want)
    elif isinstance(expected, (Tensor, np.ndarray, np.generic)):
        got = actual.numpy() if isinstance(actual, Tensor) else np.asarray(actual)
        want = expected.numpy() if isinstance(expected, Tensor) else np.asarray(expected)
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        if want.dtype.kind in "fc":
            rtol, atol = _tolerance(want.dtype)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(got, want)
    elif isinstance(expected, float) and expected != expected:
        assert actual != actual  # NaN
    else:
        assert actual == expected


def copies(args):
    """Fresh copies of array arguments, so eager and compiled runs see the same data."""
    return tuple(np.array(arg, copy=True) if isinstance(arg, np.ndarray) else arg
                 for arg in args)


def call_both(jitted, *args, **kwargs):
    """Run ``jitted`` and its undecorated function on copies of the same arguments;
    assert equal results and equal argument contents afterwards (in-place writes)."""
    eager_args, compiled_args = copies(args), copies(args)
    with np.errstate(all="ignore"):
        expected = jitted.__wrapped__(*eager_args, **kwargs)
        actual = jitted(*compiled_args, **kwargs)
    assert_like_eager(actual, expected)
    for got, want in zip(compiled_args, eager_args):
        if isinstance(want, np.ndarray):
            np.testing.assert_array_equal(got, want)
    return actual


def eager_reasons(jitted):
    return jitted.stats()["eager_calls"]


# --- the forms jit wraps -------------------------------------------------------------------
def _pointwise(x):
    return np.tanh(x) * 2 + 1


def _reduce_and_broadcast(x):
    return (x - x.mean(axis=-1, keepdims=True)) / (x.std(axis=-1, keepdims=True) + 1e-3)


def _matmul_epilogue(x, w, b):
    return np.maximum(x @ w + b, 0)


def _two_outputs(x, y):
    return x + y, (x * y).sum()


def _branchy(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 2
    return y


RNG = np.random.default_rng(7)
PLAIN_CASES = {
    "pointwise": (_pointwise, (RNG.standard_normal(16).astype(np.float32),)),
    "reduce-broadcast": (_reduce_and_broadcast, (RNG.standard_normal((4, 8)),)),
    "matmul-epilogue": (_matmul_epilogue, (RNG.standard_normal((3, 5)),
                                           RNG.standard_normal((5, 4)),
                                           RNG.standard_normal(4))),
    "two-outputs": (_two_outputs, (RNG.standard_normal(6), RNG.standard_normal(6))),
    "branch": (_branchy, (np.array([1.0, -1.0, 2.0]),)),
    "int64": (_two_outputs, (np.arange(6), np.arange(6) * 3)),
}


@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_plain_function_first_and_compiled_calls_equal_eager(case):
    function, args = PLAIN_CASES[case]
    jitted = jit(function)
    call_both(jitted, *args)  # traced: the trace computes the first result, or the program
    # when a decision the trace took may not be eager's (the branch's ``if``)
    first = jitted.stats()
    assert (first["traced_calls"], first["compiled_calls"]) == (
        (0, 1) if case == "branch" else (1, 0))
    call_both(jitted, *args)
    call_both(jitted, *args)
    stats = jitted.stats()
    assert (stats["compiles"], stats["compiled_calls"] - first["compiled_calls"],
            stats["eager_calls"]) == (1, 2, {})


@pytest.mark.parametrize("form", ["@jit", "@jit()", "jit(fn, **options)", "jit(**options)(fn)"])
def test_every_decorator_form_compiles(form):
    wrap = {"@jit": jit, "@jit()": jit(), "jit(fn, **options)": lambda fn: jit(fn, hot_exit=3),
            "jit(**options)(fn)": jit(dynamic=True, hot_exit=3)}[form]
    jitted = wrap(_pointwise)
    x = np.linspace(-2, 2, 8)
    call_both(jitted, x)
    call_both(jitted, x)
    assert jitted.stats()["compiled_calls"] == 1


def test_functools_wraps_metadata_is_kept():
    def documented(x):
        """Doubles ``x``."""
        return x * 2

    jitted = jit(documented)
    assert jitted.__name__ == "documented"
    assert jitted.__qualname__ == documented.__qualname__
    assert jitted.__doc__ == "Doubles ``x``."
    assert jitted.__wrapped__ is documented
    assert jitted.__module__ == __name__
    assert inspect.signature(jitted) == inspect.signature(documented)


def test_a_bound_jit_method_reads_its_metadata_from_the_method():
    class Layer:
        @jit(cache="memory")
        def step(self, x):
            """Doubles ``x``."""
            return x * 2

    bound, plain = Layer().step, Layer.step.fn
    assert (bound.__name__, bound.__qualname__, bound.__doc__, bound.__module__) == (
        "step", plain.__qualname__, "Doubles ``x``.", __name__)
    assert bound.__wrapped__ is plain
    assert inspect.signature(bound) == inspect.signature(types.MethodType(plain, object()))
    plain.marker = "kept"
    assert bound.marker == "kept"
    assert not hasattr(bound, "missing_attribute")
    np.testing.assert_array_equal(bound(np.arange(3.0)), [0.0, 2.0, 4.0])


def test_lambda_compiles():
    jitted = jit(lambda x, y: x * y + 1)
    x, y = np.arange(5.0), np.full(5, 0.5)
    call_both(jitted, x, y)
    call_both(jitted, x, y)
    assert jitted.stats()["compiled_calls"] == 1
    assert jitted.__name__ == "<lambda>"


def _scaler_class():
    """A model class whose jit method reads ``self.weight`` and ``self.bias`` (a fresh
    class per test, so each test sees its own ``JitFunction`` and counters)."""

    class Scaler:
        def __init__(self, weight, bias):
            self.weight = weight
            self.bias = bias

        @jit
        def forward(self, x):
            """Scale and shift."""
            return x * self.weight + self.bias

        def eager_forward(self, x):
            return x * self.weight + self.bias

    return Scaler


def test_method_reads_instance_attributes_at_every_call():
    model = _scaler_class()(np.ones(4), 0.5)
    x = np.arange(4.0)
    for _ in range(2):
        np.testing.assert_array_equal(model.forward(x), model.eager_forward(x))
    model.weight[:] = 3.0  # changed in place
    np.testing.assert_array_equal(model.forward(x), model.eager_forward(x))
    model.weight = np.array([1.0, -1.0, 2.0, -2.0])  # rebound to a new array
    np.testing.assert_array_equal(model.forward(x), model.eager_forward(x))
    stats = model.forward.stats()
    assert stats["compiles"] == 1 and stats["compiled_calls"] == 3
    assert model.forward.__name__ == "forward" and model.forward.__doc__ == "Scale and shift."


def test_method_on_two_instances_uses_each_instances_attributes():
    scaler = _scaler_class()
    first, second = scaler(np.full(3, 2.0), 0.0), scaler(np.full(3, -1.0), 0.0)
    x = np.arange(3.0)
    for _ in range(2):
        np.testing.assert_array_equal(first.forward(x), x * 2.0)
        np.testing.assert_array_equal(second.forward(x), x * -1.0)


def test_closure_array_is_read_at_every_call():
    def make():
        weight = np.ones(3)

        @jit
        def scaled(x):
            return x * weight

        def set_weight(value):
            nonlocal weight
            weight = value

        return scaled, set_weight

    scaled, set_weight = make()
    x = np.arange(3.0)
    np.testing.assert_array_equal(scaled(x), x)
    np.testing.assert_array_equal(scaled(x), x)
    set_weight(np.array([5.0, 6.0, 7.0]))
    np.testing.assert_array_equal(scaled(x), x * np.array([5.0, 6.0, 7.0]))
    assert scaled.stats()["compiles"] == 1


def test_closure_python_scalar_rebound_gives_the_new_result():
    def make():
        offset = 2.0

        @jit
        def shifted(x):
            return x + offset

        def set_offset(value):
            nonlocal offset
            offset = value

        return shifted, set_offset

    shifted, set_offset = make()
    x = np.zeros(3)
    shifted(x)
    shifted(x)
    set_offset(10.0)
    np.testing.assert_array_equal(shifted(x), np.full(3, 10.0))


OFFSET = 2.0


def test_global_python_scalar_rebound_gives_the_new_result(monkeypatch):
    @jit
    def shifted(x):
        return x + OFFSET

    x = np.zeros(3)
    shifted(x)
    shifted(x)
    monkeypatch.setattr(sys.modules[__name__], "OFFSET", 10.0)
    np.testing.assert_array_equal(shifted(x), np.full(3, 10.0))


# --- what goes in and what comes out -----------------------------------------------------
def _scalars_and_arrays(x):
    return (x.sum(), float(x.sum()), x[0], x.shape[0], len(x), x * 2.0, x.mean(),
            (x > 0).all(), x.max(), x.astype(np.int32).sum(), int(x.shape[0] > 2))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_numpy_in_numpy_out_with_eagers_scalar_types(dtype):
    jitted = jit(_scalars_and_arrays)
    x = (np.arange(5) - 1).astype(dtype)
    for _ in range(3):
        call_both(jitted, x)
    assert jitted.stats()["compiled_calls"] == 2


def test_tensor_in_tensor_out():
    jitted = jit(_scalars_and_arrays)
    x = tensor(np.arange(5, dtype=np.float32) - 1)
    expected = _scalars_and_arrays(x)
    for _ in range(2):
        actual = jitted(x)
        assert_like_eager(actual, expected)
        assert isinstance(actual[5], Tensor) and not actual[5].requires_grad
    assert jitted.stats()["compiled_calls"] == 1


def test_tensor_requiring_grad_runs_compiled_forward_and_backward():
    jitted = jit(lambda x: (x * x).sum())
    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    for _ in range(2):
        x.grad = None
        out = jitted(x)
        assert out.requires_grad and out.grad_fn is not None
        out.backward()
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    assert eager_reasons(jitted) == {}
    assert jitted.stats()["compiled_calls"] == 2
    with no_grad():  # no graph to record: a forward-only variant
        for _ in range(2):
            result = jitted(x)
            assert not result.requires_grad
            assert_like_eager(result, (x * x).sum())
    assert jitted.stats()["variants"] == 2


def test_mixed_tensor_and_array_arguments_give_tensors():
    jitted = jit(lambda x, w: x * w)
    x, w = tensor(np.arange(3.0)), np.full(3, 2.0)
    for _ in range(2):
        assert_like_eager(jitted(x, w), x * w)


def test_python_scalar_arguments_are_specialized_and_results_follow_new_values():
    def scale(x, factor, bias=0.0, *, mode="mul"):
        return x * factor + bias if mode == "mul" else x + factor

    jitted = jit(scale)
    x = np.arange(4.0, dtype=np.float32)
    calls = [((x, 2), {}), ((x, 3), {}), ((x, 2.5), {}), ((x, 3), {}), ((x, True), {}),
             ((x, 2), {"bias": 1.0}), ((x, 2), {"mode": "add"}), ((x,), {"factor": 4})]
    for args, kwargs in calls * 2:
        call_both(jitted, *args, **kwargs)
    stats = jitted.stats()
    assert stats["calls"] == 2 * len(calls)
    assert stats["compiled_calls"] >= len(calls)  # the second round found its variants


def test_pytrees_in_and_out_with_static_leaves():
    def model(params, batch):
        hidden = batch["x"] @ params["w"] + params["b"]
        scale, shift = batch["affine"]
        return {"out": hidden * scale + shift, "aux": [batch["x"].sum(), None, "tag"],
                "pair": (params["b"].max(), batch["x"].shape[0])}

    jitted = jit(model)
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    batch = {"x": rng.standard_normal((4, 3)), "affine": (np.float64(2.0), np.ones(2))}
    for _ in range(3):
        result = jitted(params, batch)
        assert_like_eager(result, model(params, batch))
        assert result["aux"][1] is None and result["aux"][2] == "tag"
    assert jitted.stats()["compiled_calls"] == 2


def test_a_compile_failure_runs_eagerly_instead_of_crashing():
    def model(x, w, b):
        return x @ w + b + 1, (x @ w + b).sum()

    jitted = jit(model)
    args = (np.ones((4, 3)), np.ones((3, 2)), np.ones(2))
    for _ in range(2):
        call_both(jitted, *args)


def test_list_arguments_and_none_output():
    def accumulate(arrays, out):
        out[...] = arrays[0] + arrays[1] * 2
        return None

    jitted = jit(accumulate)
    arrays = [np.arange(3.0), np.ones(3)]
    for _ in range(3):
        call_both(jitted, arrays, np.zeros(3))
        out = np.zeros(3)
        assert jitted(arrays, out) is None
        np.testing.assert_array_equal(out, arrays[0] + arrays[1] * 2)


def _edge_model(x):
    return x.sum(), np.sqrt(np.abs(x)) * 2, x / (x + 1), np.exp(x) - 1, np.maximum(x, 0)


EDGE_INPUTS = {
    "empty": np.zeros(0),
    "empty-2d": np.zeros((0, 3), np.float32),
    "size-1": np.array([0.5]),
    "scalar-0d": np.array(-1.5),
    "1x1": np.ones((1, 1), np.float32),
    "nan-inf": np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308]),
    "nan-inf-f32": np.array([np.nan, np.inf, -np.inf, -1.0], np.float32),
}


@pytest.mark.parametrize("name", list(EDGE_INPUTS))
def test_empty_size_one_nan_and_inf_inputs_equal_eager(name):
    jitted = jit(_edge_model)
    for _ in range(3):
        call_both(jitted, EDGE_INPUTS[name])
    assert jitted.stats()["compiled_calls"] == 2


def test_reduction_of_an_empty_array_raises_eagers_error():
    jitted = jit(lambda x: x.max())
    for _ in range(2):
        with pytest.raises(ValueError, match="zero-size array"):
            jitted(np.zeros(0))


def _layouts():
    base = np.arange(24.0).reshape(4, 6) / 7
    return {
        "transposed": np.ascontiguousarray(base.T).T,
        "strided-slice": (np.arange(48.0).reshape(4, 12) / 7)[:, ::2],
        "reversed": base[::-1, ::-1],
        "broadcast": np.broadcast_to(np.arange(6.0), (4, 6)),
        "fortran": np.asfortranarray(base),
        "offset-view": np.arange(30.0).reshape(5, 6)[1:],
    }


@pytest.mark.parametrize("layout", list(_layouts()))
def test_non_contiguous_inputs_to_a_compiled_variant_equal_eager(layout):
    def model(x, w):
        return (x * 2 + x.sum(axis=1, keepdims=True)) @ w

    jitted = jit(model)
    w = np.arange(12.0).reshape(6, 2)
    jitted(np.ones((4, 6)), w)  # compiled for a contiguous (4, 6) input
    x = _layouts()[layout]
    assert x.shape == (4, 6) and not (x.flags.c_contiguous and x.base is None)
    for _ in range(2):
        assert_like_eager(jitted(x, w), model(x, w))
    assert jitted.stats()["compiled_calls"] == 2  # the same variant ran both calls
    assert jitted.stats()["compiles"] == 1


@pytest.mark.parametrize("writer", ["item", "slice-augmented", "augmented", "ellipsis"])
def test_in_place_writes_to_inputs_are_written_back_by_compiled_calls(writer):
    def item(x):
        x[0] = 1.0
        return x * 2

    def slice_augmented(x):
        x[1:] *= 2
        return x.sum()

    def augmented(x):
        x += 1
        return x * 1

    def ellipsis(x):
        x[...] = np.tanh(x)
        return None

    function = {"item": item, "slice-augmented": slice_augmented, "augmented": augmented,
                "ellipsis": ellipsis}[writer]
    jitted = jit(function)
    for _ in range(3):
        call_both(jitted, np.arange(4.0) - 1)  # also compares the arguments afterwards
    assert jitted.stats()["compiled_calls"] == 2


# --- branch flips and trace trees --------------------------------------------------------
def _make_branchy(**options):
    @jit(**options)
    def step(x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x - 2
        return y

    return step


@pytest.mark.parametrize("hot_exit", [1, 2, 3])
def test_branch_flip_is_right_both_ways_and_the_other_path_compiles_after_hot_exit(hot_exit):
    step = _make_branchy(hot_exit=hot_exit)
    call_both(step, np.array([1.0, -1.0, 2.0]))
    negatives = [np.array([-3.0, -2.0, -float(n)]) for n in range(hot_exit)]
    for taken, negative in enumerate(negatives, 1):
        call_both(step, negative)
        stats = step.stats()
        assert sum(stats["side_exits"].values()) == taken
        assert len(stats["side_exits"]) == 1  # one guard, counted under one label
        expected_paths = 2 if taken == hot_exit else 1
        assert stats["paths"] == expected_paths
    eager_exits = step.stats()["eager_calls"].get("side exit", 0)
    assert eager_exits == hot_exit - 1  # the hot_exit-th exit was traced instead
    before = step.stats()
    for value in (4.0, -5.0, 6.0, -7.0):
        call_both(step, np.array([value, value / 2, 1.0]))
    after = step.stats()
    assert after["compiled_calls"] == before["compiled_calls"] + 4
    assert after["eager_calls"] == before["eager_calls"]
    assert after["compiles"] == before["compiles"] == 2
    assert after["side_exits"] == before["side_exits"]


def test_branch_flip_in_a_bucketed_variant_compiles_the_other_path_for_the_bucket():
    step = _make_branchy(dynamic=True)
    for size in (5, 6, 7, 8, 5, 6, 7, 8):
        call_both(step, -np.arange(1.0, size + 1) * (1 if size % 2 else -1))
    stats = step.stats()
    assert (stats["variants"], stats["paths"], stats["compiles"]) == (1, 2, 2)


class _Counting:
    """A branch whose other paths write ``self.count``, a number the first path's entry
    never reads: those paths are variants of their own (``misses._other_entry``)."""

    def __init__(self):
        self.scale, self.shift, self.count = 3.0, 0.5, 0

    def step(self, x):
        if x.sum() > 0:
            return x * 2
        self.count += 1
        if x.sum() > -5:
            return x * self.scale
        return x - self.shift


@pytest.mark.parametrize("signs", [[1, -1, -1, -1, 1, -1, 1, 1, -1, -1, 1, -1] * 3,
                                   [1, -1, -1, -1, -4, -4, -4, 1, -4, -1, 1, -4, -1] * 3])
def test_calls_alternating_with_an_other_path_of_another_entry_run_compiled(signs):
    """A side exit of the variant made for the other path goes on to the variant it left
    (``Variant.exits_to``): 23 and 22 of these calls ran compiled when it did not (each
    exit counted, then traced another variant, until max_variants)."""
    compiled, eager = _Counting(), _Counting()
    step = jit(compiled.step, cache="memory")
    rng = np.random.default_rng(0)
    for sign in signs:
        x = sign * (np.abs(rng.standard_normal(4)) + 0.1)
        np.testing.assert_array_equal(step(x), eager.step(x))
        assert compiled.count == eager.count
    stats = step.stats()
    assert stats["compiled_calls"] >= len(signs) - 2, step.explain()
    assert stats["variants"] <= 3


def test_explain_lists_variants_entry_guards_value_guards_and_kernels():
    step = _make_branchy()
    step(np.ones(3))
    step(-np.ones(3))
    text = step.explain()
    assert "variant 1" in text
    assert "entry guards" in text and "float64[3]" in text
    assert "guard 0: margin(...) == False" in text  # its margin guard comes first
    assert "guard 1: bool(...) == True" in text
    assert "side exits 1" in text
    assert "kernel" in text and "k0_" in text
    assert __file__ in text


def _line_of(function, fragment):
    lines, first = inspect.getsourcelines(function)
    (offset,) = [number for number, line in enumerate(lines) if fragment in line]
    return first + offset


def test_side_exit_label_names_the_users_line_and_source_text():
    step = _make_branchy()
    step(np.ones(3))
    step(-np.ones(3))
    (label,) = step.stats()["side_exits"]
    line = _line_of(step.__wrapped__, "if x.sum() > 0")
    assert "x.sum() > 0" in label
    assert f"test_jit.py:{line}" in label
    assert f":{line} 'if x.sum() > 0:'" in step.explain()


# --- shape buckets -----------------------------------------------------------------------
@pytest.mark.parametrize("dynamic, compiles", [(True, 1), ("auto", 2)])
def test_a_hundred_sizes_in_one_pow2_bucket_compile_once(dynamic, compiles):
    jitted = jit(dynamic=dynamic)(_pointwise)
    for size in range(129, 229):  # all in (128, 256]
        call_both(jitted, np.linspace(-1, 1, size, dtype=np.float32))
        if size == 130:
            assert jitted.stats()["compiles"] == compiles  # "auto": dynamic from size two
    stats = jitted.stats()
    assert stats["compiles"] == compiles
    assert stats["compiled_calls"] == 100 - compiles
    assert stats["eager_calls"] == {}


def test_pow2_buckets_keep_zero_and_one_alone_and_compile_once_per_bucket():
    jitted = jit(dynamic=True)(lambda x: x * 3 - 1)
    sizes = [0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 0, 1, 2, 4, 7, 12, 30]
    for size in sizes:
        call_both(jitted, np.arange(size, dtype=np.float64))
    # {0} {1} {2} (2,4] (4,8] (8,16] (16,32]
    assert jitted.stats()["compiles"] == 7
    assert jitted.stats()["variants"] == 7


def test_dynamic_false_compiles_per_shape():
    jitted = jit(dynamic=False, max_variants=20)(lambda x: x * 3 - 1)
    sizes = [5, 6, 7, 5, 6, 7, 8]
    for size in sizes:
        call_both(jitted, np.ones(size))
    assert jitted.stats()["compiles"] == 4
    assert jitted.stats()["compiled_calls"] == 3


@pytest.mark.parametrize("buckets", [[8, 64, 512], {"x": {0: [8, 64, 512]}},
                                     {"x": {-1: [8, 64, 512]}}], ids=["list", "dict", "dict-neg"])
def test_bucket_edges_from_a_list_or_a_dict(buckets):
    dynamic = True if isinstance(buckets, list) else "auto"
    jitted = jit(dynamic=dynamic, buckets=buckets)(lambda x: x * 3 - 1)
    for size in range(65, 513, 7):  # (64, 512]: one bucket
        call_both(jitted, np.ones(size))
    assert jitted.stats()["compiles"] == 1
    for size in (3, 8, 9, 64, 513, 1000):  # [2, 8], (8, 64], past the edges: (512, 1024]
        call_both(jitted, np.ones(size))
    assert jitted.stats()["compiles"] == 4


def test_dict_buckets_leave_unnamed_arguments_static():
    jitted = jit(buckets={"x": {0: [16, 256]}})(lambda x, y: x.sum() + y)
    for size in (20, 30, 40):
        call_both(jitted, np.ones(size), np.ones(3))
    assert jitted.stats()["compiles"] == 1
    call_both(jitted, np.ones(20), np.ones(4))
    assert jitted.stats()["compiles"] == 2


def test_two_dims_of_one_array_are_bucketed_separately():
    jitted = jit(dynamic=True)(lambda x: x - x.mean(axis=0))
    rng = np.random.default_rng(2)
    for rows, columns in [(5, 9), (6, 10), (7, 16), (8, 12)]:
        call_both(jitted, rng.standard_normal((rows, columns)))
    assert jitted.stats()["compiles"] == 1
    call_both(jitted, rng.standard_normal((9, 12)))
    assert jitted.stats()["compiles"] == 2


# --- max_variants ------------------------------------------------------------------------
def test_max_variants_warns_once_naming_function_line_shape_and_option():
    def per_shape(x):
        return x * 2

    jitted = jit(dynamic=False, max_variants=2)(per_shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for size in (1, 2, 3, 4, 5, 3):
            call_both(jitted, np.ones(size))
    limit = [w for w in caught if "max_variants" in str(w.message)]
    assert len(limit) == 1
    assert limit[0].category is RuntimeWarning
    message = str(limit[0].message)
    line = per_shape.__code__.co_firstlineno
    assert "per_shape" in message
    assert f"{__file__}:{line}" in message
    assert "1 -> 3" in message and "2 -> 3" in message  # the shape, old and new
    assert "max_variants=2" in message and "max_variants=..." in message
    stats = jitted.stats()
    assert stats["eager_calls"] == {"variant limit": 4}
    assert stats["compiles"] == 2


def test_max_variants_warning_for_a_path_names_the_guard_with_old_and_new_values():
    step = _make_branchy(max_variants=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call_both(step, np.ones(3))
        for _ in range(4):
            call_both(step, -np.ones(3))
    limit = [w for w in caught if "max_variants" in str(w.message)]
    assert len(limit) == 1
    message = str(limit[0].message)
    assert "step" in message and "max_variants" in message
    assert "x.sum() > 0" in message
    assert "True" in message and "False" in message


# --- eager fallback ----------------------------------------------------------------------
def _uses_fft(x):
    y = x + 1
    return np.fft.fft(y) * 2


def _uses_random(x):
    noise = np.random.rand(*x.shape)
    return x + noise


def _draws_around(x):
    y = x + 1
    return np.random.normal(y)  # a parameter computed in the function: refused


def test_untraceable_function_runs_eagerly_with_the_reason_in_stats_and_explain():
    jitted = jit(_uses_fft)
    for _ in range(3):
        call_both(jitted, np.arange(5.0))
    assert eager_reasons(jitted) == {"untraceable": 3}
    assert "np.fft.fft" in jitted.stats()["eager_reasons"]["untraceable"]
    assert jitted.stats()["compiles"] == 0
    text = jitted.explain()
    assert "np.fft.fft" in text and "3 x untraceable" in text


def test_random_numbers_inside_compile_and_draw_fresh_values():
    jitted = jit(_uses_random)
    x = np.zeros(4)
    np.random.seed(3)
    expected = [_uses_random(x) for _ in range(3)]
    np.random.seed(3)
    actual = [jitted(x) for _ in range(3)]
    for got, want in zip(actual, expected):
        np.testing.assert_array_equal(got, want)
    assert eager_reasons(jitted) == {} and jitted.stats()["compiled_calls"] >= 2
    assert "then draws np.random.rand(4)" in jitted.explain()


def test_random_numbers_drawn_around_a_computed_value_run_eagerly():
    jitted = jit(_draws_around)
    x = np.zeros(4)
    np.random.seed(3)
    expected = [_draws_around(x) for _ in range(3)]
    np.random.seed(3)
    actual = [jitted(x) for _ in range(3)]
    for got, want in zip(actual, expected):
        np.testing.assert_array_equal(got, want)
    assert set(eager_reasons(jitted)) == {"untraceable"}
    reason = jitted.stats()["eager_reasons"]["untraceable"]
    assert "random" in reason and "normal" in reason
    assert "random" in jitted.explain()


@pytest.mark.parametrize("function, fragment", [(_uses_fft, "np.fft.fft(y)"),
                                                (_draws_around, "np.random.normal(y)")],
                         ids=["fft", "random"])
def test_fallback_raise_raises_trace_error_naming_the_users_line(function, fragment):
    jitted = jit(function, fallback="raise")
    with pytest.raises(TraceError) as raised:
        jitted(np.arange(3.0))
    message = str(raised.value)
    assert message.startswith(f"{__file__}:{_line_of(function, fragment)}:")
    assert fragment in message


def test_fallback_raise_in_a_decorated_function_names_the_users_line():
    @jit(fallback="raise")
    def decorated(x):
        y = x + 1
        return np.fft.fft(y)

    with pytest.raises(TraceError) as raised:
        decorated(np.arange(3.0))
    line = _line_of(decorated.__wrapped__, "np.fft.fft(y)")
    assert str(raised.value).startswith(f"{__file__}:{line}:")


def test_tracejit_disable_runs_everything_eagerly(monkeypatch):
    monkeypatch.setenv("TRACEJIT_DISABLE", "1")
    step = _make_branchy()
    monkeypatch.delenv("TRACEJIT_DISABLE")  # read when decorating, not when calling
    for value in (1.0, -1.0, 2.0):
        call_both(step, np.full(3, value))
    stats = step.stats()
    assert stats["compiles"] == 0 and stats["compiled_calls"] == 0
    assert stats["eager_calls"] == {"disabled (TRACEJIT_DISABLE)": 3}
    assert "TRACEJIT_DISABLE" in step.explain()


def test_check_true_passes_for_correct_code():
    jitted = jit(check=True)(_reduce_and_broadcast)
    x = np.random.default_rng(3).standard_normal((3, 5))
    for _ in range(3):
        call_both(jitted, x)
    assert jitted.stats()["compiled_calls"] == 2


def test_check_true_raises_when_compiled_and_eager_differ(monkeypatch):
    jitted = jit(check=True)(lambda x: x * 2)
    x = np.arange(3.0)
    jitted(x)
    # What check=True re-runs eagerly now disagrees with the compiled code.
    monkeypatch.setattr(jitted, "fn", lambda x: x * 3)
    with pytest.raises(AssertionError, match="differs from eager"):
        jitted(x)


def _printing_step(x):
    print("loss", (x * x).sum())
    return x * 2


def test_check_true_prints_once_and_compares_what_eager_prints(monkeypatch, capsys):
    """The eager rerun's print is compared with the compiled call's, not printed again."""
    jitted = jit(check=True, cache=False)(_printing_step)
    x = np.arange(3.0)
    for _ in range(3):
        jitted(x)
    assert capsys.readouterr().out == "loss 5.0\n" * 3
    assert jitted.stats()["compiled_calls"] >= 2
    # What check=True re-runs eagerly now prints something else.
    monkeypatch.setattr(jitted, "fn", lambda x: (print("loss", 4.0), x * 2)[1])
    with pytest.raises(AssertionError, match="eager printed 'loss 4.0"):
        jitted(x)


# --- implicit inputs ---------------------------------------------------------------------
WEIGHT = np.ones(3)


@pytest.fixture
def weight(monkeypatch):
    """The module global ``WEIGHT``, restored after the test."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "WEIGHT", np.ones(3))
    return module


def _weighted(x):
    return (x[:, None] * WEIGHT).sum(axis=1)


def test_global_array_rebound_to_the_same_shape_is_read_at_the_next_call(weight):
    jitted = jit(_weighted)
    x = np.arange(2.0)
    call_both(jitted, x)
    call_both(jitted, x)
    weight.WEIGHT = np.array([1.0, 2.0, 3.0])
    call_both(jitted, x)
    weight.WEIGHT[:] = -1.0  # in place
    call_both(jitted, x)
    assert jitted.stats()["compiles"] == 1
    assert jitted.stats()["compiled_calls"] == 3


def test_global_array_rebound_to_another_shape_recompiles(weight):
    jitted = jit(_weighted)
    x = np.arange(2.0)
    call_both(jitted, x)
    call_both(jitted, x)
    weight.WEIGHT = np.arange(5.0)
    call_both(jitted, x)
    call_both(jitted, x)
    weight.WEIGHT = np.arange(5, dtype=np.float32)
    call_both(jitted, x)
    assert jitted.stats()["compiles"] == 3


def test_global_array_reduced_by_its_own_method_is_read_at_every_call(weight):
    jitted = jit(lambda x: x + WEIGHT.sum())
    x = np.zeros(2)
    call_both(jitted, x)
    call_both(jitted, x)
    weight.WEIGHT = np.arange(5.0)
    call_both(jitted, x)


def test_disk_hits_count_only_entries_that_were_used(weight):
    jitted = jit(_weighted)
    x = np.arange(2.0)
    jitted(x)
    weight.WEIGHT = np.arange(5.0)
    jitted(x)
    assert jitted.stats()["disk_hits"] == 0


# --- caches (in this process) ------------------------------------------------------------
def test_a_new_jit_of_the_same_function_loads_from_disk(private_cache):
    first = jit(_matmul_epilogue)
    args = PLAIN_CASES["matmul-epilogue"][1]
    call_both(first, *args)
    assert list(private_cache.glob("v1/*/*.tjc"))
    second = jit(_matmul_epilogue)
    call_both(second, *args)
    stats = second.stats()
    assert (stats["disk_hits"], stats["compiles"], stats["compiled_calls"]) == (1, 0, 1)


@pytest.mark.parametrize("cache", ["memory", False])
def test_cache_memory_and_false_write_nothing_to_disk(cache, private_cache):
    jitted = jit(cache=cache)(_pointwise)
    for _ in range(2):
        call_both(jitted, np.ones(4))
    assert jitted.stats()["compiled_calls"] == 1
    assert not list(private_cache.glob("v1/*/*.tjc"))


# --- options -----------------------------------------------------------------------------
@pytest.mark.parametrize("options, fragment", [
    ({"dynamic": "yes"}, "dynamic must be"),
    ({"buckets": "log"}, "buckets must be"),
    ({"buckets": [1, 8]}, "bucket edges"),
    ({"max_variants": 0}, "max_variants must be"),
    ({"hot_exit": -1}, "hot_exit must be"),
    ({"cache": "disk"}, "cache must be"),
    ({"fallback": "ignore"}, "fallback must be"),
    ({"fullgraph": True}, "unknown options ['fullgraph']"),
])
def test_bad_options_are_refused_when_decorating(options, fragment):
    with pytest.raises(OptionError) as raised:
        jit(**options)
    assert fragment in str(raised.value)


# --- logging -----------------------------------------------------------------------------
@pytest.fixture
def tracejit_logs(caplog):
    """Capture the recompiles and guards topics (enabled after decorating: decorating
    resets the topics' levels from TRACEJIT_LOG)."""
    def enable():
        for topic in ("recompiles", "guards"):
            caplog.set_level(logging.INFO, logger=f"tracejit.{topic}")
        return caplog
    return enable


@pytest.fixture
def restore_tracejit_logging():
    """Undo what TRACEJIT_LOG did to the tracejit loggers (a stderr handler, levels)."""
    root = logging.getLogger("tracejit")
    handlers = list(root.handlers)
    yield
    root.handlers[:] = handlers
    from tracejit.runtime.config import configure_logging

    configure_logging("")


@pytest.mark.parametrize("second, expected", [
    (np.ones(5), "x.shape[0]: 3 -> 5"),
    (np.ones(3, np.float32), "dtype float64 -> float32"),
    (np.ones((3, 2)), "rank 1 -> 2"),
], ids=["size", "dtype", "rank"])
def test_recompile_log_names_what_changed_with_old_and_new(tracejit_logs, second, expected):
    jitted = jit(dynamic=False)(lambda x: x * 2)
    caplog = tracejit_logs()
    jitted(np.ones(3))
    jitted(second)
    messages = [r.getMessage() for r in caplog.records if r.name == "tracejit.recompiles"]
    assert len(messages) == 2
    assert "first call" in messages[0]
    assert expected in messages[1]


@pytest.mark.parametrize("change", ["implicit-shape", "ndarray-to-tensor"])
def test_recompile_log_names_an_implicit_input_or_type_change(tracejit_logs, weight, change):
    jitted = jit(_weighted)
    caplog = tracejit_logs()
    jitted(np.arange(2.0))
    if change == "implicit-shape":
        weight.WEIGHT = np.arange(5.0)
        jitted(np.arange(2.0))
        wanted = ["WEIGHT", "3", "5"]
    else:
        jitted(tensor(np.arange(2.0)))
        wanted = ["ndarray", "Tensor"]
    last = [r.getMessage() for r in caplog.records if r.name == "tracejit.recompiles"][-1]
    assert all(fragment in last for fragment in wanted), last


def test_tracejit_log_environment_variable_turns_the_topics_on(monkeypatch, caplog,
                                                               restore_tracejit_logging):
    monkeypatch.setenv("TRACEJIT_LOG", "recompiles,guards")
    step = _make_branchy()
    step(np.ones(3))
    step(np.ones(5))
    step(-np.ones(5))
    names = {record.name for record in caplog.records}
    assert {"tracejit.recompiles", "tracejit.guards"} <= names
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "3 -> 5" in text
    assert "failed (it held True when traced); ran eagerly (1st time" in text


def test_guard_failure_log_names_file_and_line(tracejit_logs):
    step = _make_branchy()
    caplog = tracejit_logs()
    step(np.ones(3))
    step(-np.ones(3))
    (message,) = [r.getMessage() for r in caplog.records if r.name == "tracejit.guards"]
    assert "test_jit.py:" in message
    assert "ran eagerly (1st time; the other path will be compiled on the next exit)" in message


def test_guard_failure_log_shows_the_guards_source_text(tracejit_logs):
    step = _make_branchy()
    caplog = tracejit_logs()
    step(np.ones(3))
    step(-np.ones(3))
    (message,) = [r.getMessage() for r in caplog.records if r.name == "tracejit.guards"]
    line = _line_of(step.__wrapped__, "if x.sum() > 0")
    assert f"`if x.sum() > 0:` at test_jit.py:{line}" in message or (
        f"`x.sum() > 0` at test_jit.py:{line}" in message)


def test_functools_partial_of_a_jit_function_works():
    jitted = jit(lambda x, scale: x * scale)
    doubled = functools.partial(jitted, scale=2.0)
    for _ in range(2):
        np.testing.assert_array_equal(doubled(np.arange(3.0)), np.arange(3.0) * 2.0)


@pytest.mark.parametrize("expression", [
    "x[0]", "x.sum()", "x[0, ...]", "np.tanh(x[0])", "x[1] * 2", "z[()]", "z[...]", "z + 1",
    "z.astype(np.float32)", "np.where(z > 0, z, 0)", "z",
])
def test_zero_d_results_have_numpys_type(expression):
    """NumPy scalar or 0-d ndarray, exactly as eager NumPy gives it."""
    function = eval(f"lambda x, z: {expression}")
    compiled = jit(function, cache="memory")
    x, z = np.arange(4.0), np.array(2.0)
    expected = type(function(x, z))
    assert [type(compiled(x, z)) for _ in range(3)] == [expected] * 3
    assert compiled.stats()["compiled_calls"] >= 2


def masked_fills(x, y):
    clipped = x.copy()
    clipped[clipped < 0] = 0.0  # a traced mask: a where, no data-dependent shape
    rows = y.copy()
    rows[rows[:, 0] > 0] = -1  # a mask over the leading dim
    rows[rows > 5] = 2.7  # a float into an int array: cast like NumPy
    picked = x.copy()
    picked[x > 1] = y[0, 0]  # a traced scalar value
    return clipped, rows, picked


def test_masked_fill_with_a_traced_mask_runs_compiled():
    compiled = jit(masked_fills, cache="memory")
    rng = np.random.default_rng(0)
    for n in (3, 5, 7, 1, 2, 4, 8):
        x, y = rng.normal(size=n), rng.integers(-3, 9, size=(n, 4))
        for actual, expected in zip(compiled(x, y), masked_fills(x, y)):
            assert actual.dtype == expected.dtype
            np.testing.assert_array_equal(actual, expected)
    assert not compiled.stats()["eager_calls"] and compiled.stats()["compiled_calls"] >= 2


def profiled_block(x, w):
    return np.tanh(x @ w).sum(axis=1) - 1.0


def test_profile_counts_calls_and_time_per_kernel(monkeypatch, tmp_path):
    """TRACEJIT_PROFILE=1: each kernel counts its calls and wall time; explain() lists
    them; the flag survives the disk cache (a second process's program counts too)."""
    monkeypatch.setenv("TRACEJIT_PROFILE", "1")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    x, w = np.ones((64, 16)), np.full((16, 8), 0.1)
    compiled = jit(profiled_block)
    for _ in range(6):
        np.testing.assert_allclose(compiled(x, w), profiled_block(x, w))
    program = compiled._variants[0].root.program
    rows = program.profile()
    assert [kernel.name for kernel, _, _ in rows] == [k.name for k in program.kernels]
    assert all(calls == 5 for _, calls, _ in rows)  # the traced call runs no kernel
    assert all(seconds > 0 for _, _, seconds in rows)
    text = compiled.explain()
    assert "profile (5 calls" in text and "us/call" in text
    again = jit(profiled_block)  # a new function object: the entry comes from disk
    again(x, w)
    assert again.stats()["disk_hits"] == 1
    assert again._variants[0].root.program.profile()[0][1] == 1


def profiled_loop(x, w):
    h = np.zeros(w.shape[0])
    for t in range(x.shape[0]):
        h = np.tanh(w @ h + x[t])
    return h * 2.0 - 1.0


def test_profile_counts_the_kernels_of_a_program_with_a_loop(monkeypatch):
    """A captured loop's program is segments and a body program: each is profiled (they
    reported no kernel at all), a body's kernels once per trip, and explain()'s header
    counts the program's calls, not the trips."""
    monkeypatch.setenv("TRACEJIT_PROFILE", "1")
    compiled = jit(profiled_loop, cache="memory", dynamic=True)
    x, w = np.ones((6, 4)), np.full((4, 4), 0.1)
    for _ in range(4):
        np.testing.assert_allclose(compiled(x, w), profiled_loop(x, w))
    program = compiled._variants[0].root.program
    calls = program.profiled_calls
    expected = {kernel.name: calls * (len(x) if getattr(step, "index", None) else 1)
                for step in program.steps for kernel in step.program.kernels}
    rows = program.profile()
    assert calls >= 3 and len(expected) >= 2 and {
        kernel.name: count for kernel, count, _ in rows} == expected, rows
    assert all(seconds > 0 for _, _, seconds in rows)
    assert f"profile ({calls} calls" in compiled.explain()


def test_without_profile_programs_have_no_counters():
    compiled = jit(profiled_block, cache="memory")
    x, w = np.ones((4, 3)), np.ones((3, 2))
    compiled(x, w)
    compiled(x, w)
    assert compiled._variants[0].root.program.profile() == []
    assert "profile (" not in compiled.explain()


def takes_keywords_named_like_trace_options(x, name=1.0, dynamic=2.0, grad=0.5, lazy=3.0,
                                            check=0.0, implicit=1.0, backward=1.0):
    return x * name + dynamic * grad - lazy + check * implicit * backward


def test_keyword_arguments_named_like_trace_options_are_the_functions():
    """f(x, name=2.0, dynamic=3.0) compiles: trace() takes the call's keywords apart
    (call_kwargs), so they never clash with its own options (an internal error before)."""
    f = jit(takes_keywords_named_like_trace_options, cache="memory")
    for scale in (1.0, 2.0, 3.0):
        x = np.arange(3.0) * scale
        options = dict(name=2.0, dynamic=3.0, grad=1.0, lazy=0.5, check=1.0, implicit=2.0,
                       backward=0.5)
        np.testing.assert_allclose(f(x, **options),
                                   takes_keywords_named_like_trace_options(x, **options))
    assert f.stats()["compiled_calls"] >= 2 and not f.stats()["eager_calls"]


def signed_sum(x):
    s = 0.0
    for t in range(x.shape[0]):
        if x[t] > 0:  # data decides per trip: a guard in the captured loop's body
            s = s + x[t]
        else:
            s = s - 1.0
    return s


def test_a_loop_whose_body_guard_keeps_failing_is_traced_unrolled_then():
    """Traced on all-positive rows, the loop is captured with its ``if`` taken at every
    trip; rows with negatives failed that guard inside the loop on every call, so they
    ran eagerly for ever. After LOOP_EXIT_STREAK such exits in a row the loops are traced
    unrolled and the calls compile (misses._loop_guard_exit); stats keep the dropped
    variant's calls. A compiled call between exits starts the count again."""
    from tracejit.runtime.misses import LOOP_EXIT_STREAK

    f = jit(signed_sum, cache="memory", dynamic=True)
    first, mixed = np.arange(1.0, 8.0), np.array([1.0, 2.0, 3.0, -1.0, -2.0, 4.0, 5.0])
    calls = [first, first] + [mixed] * (LOOP_EXIT_STREAK - 1) + [first]
    for x in calls + [mixed] * (LOOP_EXIT_STREAK + 3):
        assert f(x) == signed_sum(x)
    stats = f.stats()
    assert stats["eager_calls"] == {
        "a guard in a loop body failed": 2 * LOOP_EXIT_STREAK - 1}, f.explain()
    assert stats["compiled_calls"] >= 3 and stats["compiles"] == 2, f.explain()


def test_a_first_call_does_not_import_numpy_random(tmp_path):
    """NumPy 2 imports ``np.random`` on first use (~10 ms); the check for random draws in a
    trace imported it in every process that never draws."""
    script = tmp_path / "chain.py"
    script.write_text(
        "import sys, numpy as np, tracejit as tj\n"
        "steps = [np.tanh, lambda x: np.maximum(x * 2, 0)]\n"
        "def chain(x):\n"
        "    for index in range(3):\n"
        "        x = steps[index % len(steps)](x)\n"
        "    return x.sum()\n"
        "f = tj.jit(chain, cache=False)\n"
        "f(np.linspace(0, 1, 8)); f(np.linspace(0, 1, 8))\n"
        "print('numpy.random' in sys.modules, f.stats()['compiled_calls'])\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["False", "1"], done.stdout + done.stderr
