"""NumPy scalar arguments (``f(x, np.float32(0.01))``) become run-time inputs once a second
value is seen, as Python numbers do: later values run the compiled code instead of
tracing again, and keep NumPy's dtype rules (a NumPy scalar is strongly typed, NEP 50).
"""

import numpy as np
import pytest

import tracejit
from tracejit.runtime.testing import compare_results

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _scale_shift(x, a):
    return x * a + 1


def _body_uses_scalar(x, a):
    """A guard on the scalar, arithmetic that returns a NumPy scalar, and a loop bound."""
    y = x * a if a > 0 else x - a
    total = a * 2 + 1
    for _ in range(3):
        y = np.tanh(y) * a
    return y, total


def _check_calls(fn, calls, traces_at_most, **options):
    jitted = tracejit.jit(fn, cache=False, **options)
    for args in calls:
        expected = fn(*[np.copy(arg) if isinstance(arg, np.ndarray) else arg for arg in args])
        got = jitted(*args)
        problem = compare_results(got, expected)
        assert problem is None, f"{args[1:]!r}: {problem}"
    stats = jitted.stats()
    assert stats["traced_calls"] <= traces_at_most, stats
    return stats


@pytest.mark.parametrize("kind", [np.float64, np.float32, np.int64, np.int32])
@pytest.mark.parametrize("array_dtype", [np.float64, np.float32, np.int32, np.int64,
                                         np.bool_])
def test_values_of_one_numpy_type_trace_twice_and_keep_dtype_rules(kind, array_dtype):
    x = (np.arange(7) % 5).astype(array_dtype)
    calls = [(x, kind(value)) for value in (1, 2, 3, 4, 0, 5)]
    stats = _check_calls(_scale_shift, calls, traces_at_most=2)
    assert stats["compiled_calls"] >= 4


def test_guard_loop_and_scalar_result_follow_the_value():
    x = np.linspace(-1, 1, 11)
    calls = [(x, np.float32(v)) for v in (0.5, 0.25, -0.5, -2.0, 0.75, np.inf, np.nan)]
    stats = _check_calls(_body_uses_scalar, calls, traces_at_most=4)
    assert stats["compiled_calls"] >= 3


def test_numpy_scalars_compiled_code_cannot_hold_stay_constants():
    x = np.ones(3)
    calls = [(x, kind(v)) for kind in (np.float16, np.int8, np.uint64) for v in (1, 2)]
    _check_calls(_scale_shift, calls, traces_at_most=6)


def test_changing_the_scalar_type_traces_again_with_the_new_dtype():
    x = np.ones(4, np.float32)
    calls = [(x, np.float32(2)), (x, np.float32(3)), (x, np.float64(3)), (x, np.float64(4)),
             (x, 5.0), (x, 6.0), (x, np.float32(7))]
    _check_calls(_scale_shift, calls, traces_at_most=5)


def test_integer_scalar_overflow_matches_numpy():
    def add(x, n):
        return x + n * n

    x = np.arange(5, dtype=np.int32)
    calls = [(x, np.int32(v)) for v in (3, 4, 50000, 46341, -2 ** 31)]  # n * n wraps
    _check_calls(add, calls, traces_at_most=2)


def test_static_argnames_keep_the_value_specialized():
    x = np.ones(3)
    stats = _check_calls(_scale_shift, [(x, np.float64(v)) for v in (1, 2, 3)],
                         traces_at_most=3, static_argnames=("a",))
    assert stats["traced_calls"] == 3


def test_a_dynamic_numpy_scalar_variant_round_trips_through_the_disk_cache(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    x = np.arange(6.0)
    first = tracejit.jit(_scale_shift)
    for value in (1.5, 2.5, 3.5):
        first(x, np.float32(value))
    again = tracejit.jit(_scale_shift)  # a new process's first calls, the same values
    for value in (1.5, 2.5, 3.5):
        got = again(x, np.float32(value))
        assert compare_results(got, _scale_shift(x, np.float32(value))) is None
    # the first call's variant (1.5, a constant) stays in memory; the dynamic one is read
    # at the first call (filed under the open key: any value its guard accepts finds it)
    assert again.stats()["disk_hits"] == 1 and again.stats()["compiled_calls"] == 3, (
        again.stats())


def test_a_repeated_constant_numpy_scalar_runs_compiled():
    """float16 and int8 scalars stay constants, compared by type and value (not by
    identity: each call brings a new object), with -0.0 and NaN told apart."""
    def divide(x, a):
        return x / a

    x = np.array([1.0, -2.0, 0.0])
    calls = [(x, np.float16(2)), (x, np.float16(2)), (x, np.float16(-0.0)),
             (x, np.float16(0.0)), (x, np.float16(np.nan)), (x, np.int8(3)), (x, np.int8(3))]
    stats = _check_calls(divide, calls, traces_at_most=7)
    assert stats["compiled_calls"] >= 2, stats


def test_numpy_bool_flags_take_each_branch():
    def layer(x, training):
        return x * 0.5 if training else x + training

    x = np.arange(4.0)
    flags = [np.True_, np.False_, np.True_, np.False_, np.bool_(x.sum() > 0)]
    stats = _check_calls(layer, [(x, flag) for flag in flags], traces_at_most=3)
    assert stats["compiled_calls"] >= 2, stats
