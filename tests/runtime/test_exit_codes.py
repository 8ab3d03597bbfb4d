"""Side exits that name no guard (``codegen/exit_codes.py``) are told apart in ``stats()``:
a guard of a loop nested in a captured loop's body is not a kernel error, and a kernel
error is not a loop's guard (whose streak traces the loops unrolled and drops the
variant). Their reasons name the user's line first (``exit_codes.exit_reason``)."""

import inspect

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen import SideExit
from tracejit.codegen import compile as compile_graph
from tracejit.codegen.exit_codes import INNER_LOOP_GUARD_FAILED, LOOP_GUARD_FAILED
from tracejit.codegen.loops import LoopProgram, NativeLoopProgram
from tracejit.codegen.narrow_results import NARROW_RANGE_REASON
from tracejit.runtime.misses import LOOP_EXIT_STREAK
from tracejit.tracer.tracing import trace


def place_of(function, fragment):
    """``file:line: `source``` of the line of ``function`` holding ``fragment``."""
    lines, first = inspect.getsourcelines(function)
    number = next(n for n, line in enumerate(lines) if fragment in line)
    return f"{inspect.getsourcefile(function)}:{first + number}: `{lines[number].strip()}`"


def signed_grid_sum(x):
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:  # a guard in the inner loop's body
                total = total + x[i, j]
            else:
                total = total - 1.0
    return total


def test_a_guard_failing_in_an_inner_loop_has_its_own_reason():
    """Traced on positive entries; a negative one fails the inner loop's guard at one
    trip. The call runs eagerly under its own reason (it read "kernel error (eager raises
    it)"), and, like before, without the streak that unrolls the loops: the variant stays
    and keeps serving the positive grids."""
    f = jit(signed_grid_sum, cache="memory", dynamic=True)
    positive = np.ones((3, 4))
    mixed = positive.copy()
    mixed[2, 3] = -5.0
    for x in [positive, positive] + [mixed] * (LOOP_EXIT_STREAK + 1) + [positive]:
        assert f(x) == signed_grid_sum(x)
    stats = f.stats()
    assert stats["eager_calls"] == {
        "a guard in an inner loop's body failed": LOOP_EXIT_STREAK + 1}, f.explain()
    assert stats["eager_reasons"]["a guard in an inner loop's body failed"] == (
        "a guard in an inner loop's body failed: " + place_of(signed_grid_sum, "if x[i, j]"))
    assert stats["compiles"] == 1 and stats["variants"] == 1, f.explain()
    assert stats["compiled_calls"] >= 2, f.explain()


@pytest.mark.parametrize("function, code", [("signed_grid_sum", INNER_LOOP_GUARD_FAILED),
                                            ("signed_sum", LOOP_GUARD_FAILED)],
                         ids=["inner loop", "loop"])
def test_the_reference_interpreter_exits_with_the_compiled_programs_code(function, code):
    """``LoopProgram`` (the NumPy reference) left a guard failing in an inner loop with
    ``LOOP_GUARD_FAILED``, whose streak unrolls the function's loops, where the compiled
    program leaves with ``INNER_LOOP_GUARD_FAILED``, which counts toward none."""
    function = globals()[function]
    positive = np.ones((3, 4)) if function is signed_grid_sum else np.ones(4)
    dynamic = {"x": {axis: (2, 64) for axis in range(positive.ndim)}}
    native = compile_graph(trace(function, positive, dynamic=dynamic).graph)
    assert isinstance(native, NativeLoopProgram)
    mixed = positive.copy()
    mixed.reshape(-1)[-2] = -5.0
    for program in (native, LoopProgram(native.graph, native.name)):
        assert program(positive)[0] == function(positive)
        with pytest.raises(SideExit) as exited:
            program(mixed)
        assert exited.value.code == code, type(program).__name__


def integer_power(x, n):
    return x ** n


def test_a_kernel_error_is_not_a_loop_guard_failing():
    """A negative integer power is a kernel error (code -2, NumPy raises it); that code
    was also the loop guards' (LOOP_GUARD_FAILED), so these calls counted toward the
    unroll streak and the fourth dropped the variant: the next call traced and compiled
    again."""
    f = jit(integer_power, cache="memory")
    x, n = np.arange(1, 5), np.array([1, 2, 1, 2])
    np.testing.assert_array_equal(f(x, n), integer_power(x, n))
    for _ in range(LOOP_EXIT_STREAK + 1):
        with pytest.raises(ValueError, match="negative integer powers"):
            f(x, np.array([1, -2, 1, 1]))
    np.testing.assert_array_equal(f(x, n), integer_power(x, n))
    stats = f.stats()
    assert stats["raised_calls"] == LOOP_EXIT_STREAK + 1 and not stats["eager_calls"]
    assert stats["compiles"] == 1 and stats["variants"] == 1, f.explain()


def signed_sum(x):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:  # a guard in the loop's body
            total = total + x[i]
        else:
            total = total - 1.0
    return total


def to_uint8(x):
    scaled = x * 255
    return scaled.astype(np.uint8)


def test_a_loop_guard_and_a_narrow_cast_name_the_users_line():
    """Traced on positive entries (and in-range values): a negative entry fails the loop
    body's guard at one trip, a NaN the uint8 cast; the reasons name those lines, which
    the program's graph holds (the exit code alone says neither)."""
    loop = jit(signed_sum, cache=False, dynamic=True)
    cast = jit(to_uint8, cache=False)
    mixed = np.array([1.0, 2.0, -3.0, 4.0])
    for x in (np.ones(4), np.ones(4), mixed):
        assert loop(x) == signed_sum(x)
    reason = "a guard in a loop body failed"
    assert loop.stats()["eager_reasons"] == {
        reason: f"{reason}: {place_of(signed_sum, 'if x[i] > 0')}"}, loop.explain()
    with np.errstate(invalid="ignore"):
        for x in (np.full(3, 0.5), np.full(3, 0.5), np.array([0.5, np.nan, 0.5])):
            np.testing.assert_array_equal(cast(x), to_uint8(x))
    assert cast.stats()["eager_reasons"] == {
        NARROW_RANGE_REASON: f"{NARROW_RANGE_REASON}: {place_of(to_uint8, 'astype')}; "
                             "NumPy's cast is the platform's there"}, cast.explain()


def summed_uint8(x):
    total = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        total = total + (x[t] * 255).astype(np.uint8)
    return total


def test_a_narrow_cast_in_a_loop_body_is_no_kernel_error():
    """A NaN cast to uint8 in a captured loop's body left the loop as a kernel error
    ("kernel error (eager raises it)", where NumPy raises nothing); it is the narrow cast's
    exit, naming its line in the body."""
    f = jit(summed_uint8, cache=False, dynamic=True)
    good = np.linspace(0.0, 1.0, 24).reshape(6, 4)
    bad = good.copy()
    bad[3, 1] = np.nan
    with np.errstate(invalid="ignore"):
        for x in (good, good, bad):
            np.testing.assert_array_equal(f(x), summed_uint8(x))
    stats = f.stats()
    assert stats["eager_calls"] == {NARROW_RANGE_REASON: 1}, f.explain()
    assert stats["eager_reasons"][NARROW_RANGE_REASON].startswith(
        f"{NARROW_RANGE_REASON}: {place_of(summed_uint8, 'astype')}; "), f.explain()
