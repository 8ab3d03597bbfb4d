"""Captured loops run by the native driver (codegen/native_loop.py): native vs the NumPy
interpreter (``LoopProgram``) vs eager over trip counts 0 .. 64, float32 and float64,
writes at strided and offset regions, step -1 loops, carried scalars, and guards that
side-exit in the middle of the loop with every input untouched.

Each function is traced once with its length dynamic over [2, 128] (one program for every
length; 1 would make the length a broadcastable dim). Loops run ``range(1, T)`` and capture
peels their first iteration, so a length of ``T`` runs ``T - 2`` trips of the native loop.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit.codegen import SideExit
from tracejit.codegen import compile as compile_graph
from tracejit.codegen.loops import LoopProgram, NativeLoopProgram
from tracejit.tracer.tracing import trace

TRIPS = [0, 1, 2, 3, 5, 7, 16, 17, 64]
N, D, H = 2, 3, 5


def rnn(x, Wx, Wh, b, h0):
    """Carried ``h``; a write at the middle axis (``hs[:, t, :]``: a strided region)."""
    h = h0
    hs = np.zeros((x.shape[0], x.shape[1], Wh.shape[0]), dtype=x.dtype)
    for t in range(1, x.shape[1]):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        hs[:, t, :] = h
    return hs, h


def windows(x, w):
    """Writes at an offset, two columns per trip, overlapping the previous trip's."""
    out = np.zeros((3, 2 * x.shape[0] + 4), dtype=x.dtype)
    for t in range(1, x.shape[0]):
        out[:, 2 * t + 1:2 * t + 5] = x[t] * w
    return out


def accumulate(x, w):
    """A carried 0-d value."""
    loss = x[0, 0] * 0.0
    for t in range(1, x.shape[0]):
        loss = loss + np.sum(np.tanh(x[t] * w))
    return loss


def running_max(x):
    m = x[0] * 0.0
    for t in range(1, x.shape[0]):
        m = np.maximum(m, x[t])
    return m


def backwards(x):
    """A step -1 loop (``reversed(range(...))``): regions move down the buffer."""
    h = x[0] * 0.0
    out = np.zeros_like(x)
    for t in reversed(range(1, x.shape[0])):
        h = np.tanh(h + x[t])
        out[t] = h
    return out, h


def guarded(x, out):
    """A guard per trip (``if`` on a traced value) and a write into an argument."""
    h = x[0] * 0.0
    for t in range(1, x.shape[0]):
        if x[t].sum() > 100.0:
            h = h * 2.0
        h = np.tanh(h + x[t])
        out[t] = h
    return h


def case(function, length, dtype, rng):
    """Arguments of ``function`` with ``length`` steps, and which argument axis is it."""
    def draw(*shape):
        return rng.standard_normal(shape).astype(dtype)

    if function is rnn:
        return (draw(N, length, D), draw(D, H) * 0.5, draw(H, H) * 0.5, draw(H),
                draw(N, H)), {"x": {1: (2, 128)}}
    if function is windows:
        return (draw(length, 4), draw(3, 4)), {"x": {0: (2, 128)}}
    if function is accumulate:
        return (draw(length, 4), draw(4)), {"x": {0: (2, 128)}}
    if function in (running_max, backwards):
        return (draw(length, 4),), {"x": {0: (2, 128)}}
    return (draw(length, 4), np.zeros((length, 4), dtype)), {"x": {0: (2, 128)},
                                                             "out": {0: (2, 128)}}


_programs = {}


def programs(function, dtype):
    """``(native, interpreted)`` programs of ``function`` traced at length 9."""
    key = (function, dtype)
    if key not in _programs:
        args, dynamic = case(function, 9, dtype, np.random.default_rng(0))
        graph = trace(function, *args, dynamic=dynamic).graph
        native = compile_graph(graph)
        assert isinstance(native, NativeLoopProgram)
        loops = [step for step in native.steps if hasattr(step, "native")]
        assert loops and all(step.native is not None for step in loops), "not native"
        _programs[key] = native, LoopProgram(native.graph, native.name)
    return _programs[key]


def assert_close(got, want, dtype):
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for got_leaf, want_leaf in zip(got, want if isinstance(want, tuple) else (want,)):
        assert np.asarray(got_leaf).dtype == np.asarray(want_leaf).dtype
        np.testing.assert_allclose(got_leaf, want_leaf, rtol=tolerance, atol=tolerance)


@pytest.fixture(params=["native driver", "Python driver"])
def driver(request):
    """Which driver runs the loops: the Python one is the fallback (``_Loop.native`` None)."""
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("function", [rnn, windows, accumulate, running_max, backwards,
                                      guarded])
def test_native_matches_interpreter_and_eager(function, dtype, driver):
    native, interpreted = programs(function, dtype)
    loops = [step for step in native.steps if hasattr(step, "native")]
    drivers = [step.native for step in loops]
    if driver == "Python driver":
        for step in loops:
            step.native = None
    try:
        _compare(function, dtype, native, interpreted)
    finally:
        for step, saved in zip(loops, drivers):
            step.native = saved


def _compare(function, dtype, native, interpreted):
    rng = np.random.default_rng(1)
    for trips in TRIPS:
        args, _ = case(function, trips + 2, dtype, rng)
        before = [np.array(arg) for arg in args]
        got = native(*args)
        for arg, copy in zip(args, before):  # compiled code never writes an input
            np.testing.assert_array_equal(arg, copy)
        reference = interpreted(*args)
        want = function(*[np.array(arg) for arg in args])
        if function is guarded:  # the program also returns the written argument
            want = (want, _written(args, want))
        assert_close(got, want, dtype)
        assert_close(reference, want, dtype)


def _written(args, _):
    out = np.array(args[1])
    guarded(np.array(args[0]), out)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("at", [2, 4, 16])
def test_a_guard_failing_mid_loop_side_exits_with_inputs_untouched(dtype, at):
    native, interpreted = programs(guarded, dtype)
    rng = np.random.default_rng(at)
    x, out = case(guarded, 17, dtype, rng)[0]
    x[at] += 1000.0  # the guard holds at trips before ``at`` and fails there (t = 2 is
    # the native loop's first trip)
    before = (x.copy(), out.copy())
    for program in (native, interpreted):
        with pytest.raises(SideExit):
            program(x, out)
        np.testing.assert_array_equal(x, before[0])
        np.testing.assert_array_equal(out, before[1])
    # and the program still runs right afterwards (no state left from the exit)
    x[at] -= 1000.0
    assert_close(native(x, out), (guarded(x, out.copy()), _written((x, out), None)), dtype)


def test_the_driver_reports_the_trip_it_left_at():
    native, _ = programs(guarded, np.float64)
    (loop,) = [step for step in native.steps if hasattr(step, "native")]
    x, out = case(guarded, 12, np.float64, np.random.default_rng(3))[0]
    x[7] += 1000.0
    calls = []
    run = loop.native.run

    def recording(*args):
        calls.append(run(*args))
        return calls[-1]

    loop.native.run = recording
    try:
        with pytest.raises(SideExit):
            native(x, out)
    finally:
        del loop.native.run
    (status, exit_trip, _), = calls
    assert status != 0 and exit_trip == 5  # t = 7 is trip 5 (t = 1 is peeled)


def test_results_do_not_alias_between_calls():
    """Carried results come from buffers of their own call: a later call must not change
    what an earlier one returned (double buffering reuses nothing across calls)."""
    native, _ = programs(running_max, np.float64)
    rng = np.random.default_rng(4)
    first_args = case(running_max, 6, np.float64, rng)[0]
    first = native(*first_args)[0]
    kept = first.copy()
    for length in (5, 6, 7):
        native(*case(running_max, length, np.float64, rng)[0])
    np.testing.assert_array_equal(first, kept)
