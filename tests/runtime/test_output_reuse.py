"""A variant's hit path hands a small output out again only when nothing the caller has
can see it (``codegen/output_reuse.py``): results that are held - by a name, a view, a
memoryview, a list - are never written by a later call, an array whose header the caller
changed before dropping it (shape, strides, dtype, flags) is never handed out again, and
calls from several threads never share an output."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen import array_guard


def _affine(x):
    return x * 2 + 1


def _compiled(function=_affine):
    compiled = jit(cache="memory")(function)
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    compiled(x)
    compiled(x)
    return compiled, x


def test_held_results_are_never_written_again():
    compiled, x = _compiled()
    named = compiled(x)  # each held once: the caller's only reference
    view = compiled(x + 1)[3:9]
    exported = memoryview(compiled(x + 2))
    kept = [compiled(x + 3), compiled(x + 4)]
    held = [(named, _affine(x)), (view, _affine(x + 1)[3:9]),
            (exported, _affine(x + 2)), (kept[0], _affine(x + 3)), (kept[1], _affine(x + 4))]
    for step in range(8):
        result = compiled(x - step)
        np.testing.assert_array_equal(result, _affine(x - step))
        for array, expected in held:
            np.testing.assert_array_equal(np.asarray(array), expected)
    assert compiled.stats()["compiled_calls"] >= 13


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # NumPy 2.4: setting strides, dtype
@pytest.mark.parametrize("change", ["read-only", "shape", "strides", "dtype"])
def test_an_output_the_caller_changed_is_not_handed_out_again(change):
    compiled, x = _compiled()
    for step in range(6):
        result = compiled(x + step)
        assert result.shape == (16,) and result.strides == (4,)
        assert result.dtype == np.float32 and result.flags.writeable
        np.testing.assert_array_equal(result, _affine(x + step))
        if change == "read-only":
            result.flags.writeable = False
        elif change == "shape":
            result.shape = (4, 4)
        elif change == "strides":
            result.strides = (0,)
        else:
            result.dtype = np.int32
        del result


def test_a_dropped_output_is_reused():
    if array_guard.taker() is None:
        pytest.skip("no native take on this interpreter: every output is new")
    compiled, x = _compiled()
    first = compiled(x)
    address = first.__array_interface__["data"][0]
    del first
    # NumPy's allocator would hand the freed memory to this array; the hit path's slot
    # kept it for the next result.
    other = np.empty(16, np.float32)
    second = compiled(x + 1)
    assert second.__array_interface__["data"][0] == address != other.__array_interface__[
        "data"][0]
    np.testing.assert_array_equal(second, _affine(x + 1))


def _cell(x, h, w):
    return np.tanh(x + h * w)


def test_an_rnn_step_feeding_its_output_back_matches_eager():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((20, 4, 8), dtype=np.float32)
    w = rng.standard_normal(8, dtype=np.float32)
    compiled = jit(cache="memory")(_cell)
    h_compiled = h_eager = np.zeros((4, 8), np.float32)
    history = []
    for x in xs:
        h_compiled = compiled(x, h_compiled, w)
        h_eager = _cell(x, h_eager, w)
        history.append((h_compiled, h_eager.copy()))
        np.testing.assert_allclose(h_compiled, h_eager, rtol=1e-5, atol=1e-6)
    for step, (compiled_h, eager_h) in enumerate(history[::4]):  # every kept one unchanged
        np.testing.assert_allclose(compiled_h, eager_h, rtol=1e-5, atol=1e-6, err_msg=step)
    assert compiled.stats()["compiled_calls"] >= 19


def test_threads_never_share_an_output():
    compiled, x = _compiled()
    failures = []

    def calls(offset):
        for step in range(300):
            value = np.float32(offset * 1000 + step)
            result = compiled(x + value)
            for _ in range(3):  # other threads run meanwhile (switch interval, GIL release)
                if not np.array_equal(result, _affine(x + value)):
                    failures.append((offset, step))

    threads = [threading.Thread(target=calls, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []


def test_results_passed_back_read_only_and_strided_inputs_and_other_kinds():
    compiled, x = _compiled()
    y = compiled(x)
    z = compiled(y)  # y is an argument now: its memory is not z's
    assert not np.shares_memory(y, z)
    np.testing.assert_array_equal(z, _affine(_affine(x)))
    read_only = x.copy()
    read_only.flags.writeable = False
    np.testing.assert_array_equal(compiled(read_only), _affine(x))
    strided = np.linspace(-1, 1, 32, dtype=np.float32)[::2]
    np.testing.assert_array_equal(compiled(strided), _affine(strided))
    for other in (x.astype(np.float64), x[:8], x.reshape(4, 4), np.float32(2.0)):
        np.testing.assert_allclose(compiled(other), _affine(np.asarray(other)), rtol=1e-6)
    np.testing.assert_array_equal(compiled(x), _affine(x))
