"""Formatted text whose only use is to be printed compiles (``tracer/deferred_text.py``,
``tracer/loop_prints.py``): ``print("cost %f" % cost)``, ``print(f"{loss:.4f}")`` and
``print("{}".format(np.squeeze(cost)))`` record a print effect whose text compiled code
renders from the compiled values, and a print under a test of a captured loop's index
(``if i % 100 == 0 or i == n - 1``) prints the selected trips' rows after the loop. Each
test compares the printed text (capsys) and the results with eager NumPy, and counts
compiled calls; before these modules every one of them ran eagerly (the trace refused the
formatted float at once, ``traced_array.FORMATTED_FLOAT``).

The data are dyadic (sums of a few multiples of 1/8), so compiled values equal NumPy's to
the bit and the text must be equal exactly."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.eager_rewrite import run_eagerly
from tracejit.tracer.tracing import trace


def _data(seed, size=6):
    return np.random.default_rng(seed).integers(-8, 9, size) / 8.0


def _both(capsys, function, compiled, *args):
    want = function(*args)
    eager_text = capsys.readouterr().out
    got = compiled(*args)
    assert capsys.readouterr().out == eager_text
    return got, want, eager_text


def formats(x, lr):
    cost = (x ** 2).mean()  # np.float64
    loss = float(cost)  # Python float
    squeezed = np.squeeze(np.sum(x.reshape(1, -1) ** 2, axis=1, keepdims=True) / 8)  # 0-d
    half = (x.astype(np.float32) / 2).sum()  # np.float32
    print("cost %f %.4f %e %g %i %d %s %r %5.1f%%" % (
        cost, cost, cost, cost, cost * 8, cost * 8, cost, cost, cost))
    print(f"loss {loss:.4f} {loss} {loss!r} {cost} {cost!r} {squeezed} {squeezed!r} "
          f"{squeezed:.3f} {half} {half:.2f}", "tail", cost, sep="|")
    print("Cost after iteration {}: {}".format(3, np.squeeze(cost)),
          "{0}-{0:.2e} {1:>8}".format(loss, half))
    print("lr %f" % lr, f"{x.shape[0]}")
    return x * 2


def test_formatted_prints_compile_and_print_what_eager_prints(capsys):
    compiled = tj.jit(formats, cache="memory")
    for seed in range(4):
        got, want, text = _both(capsys, formats, compiled, _data(seed), 0.125 * seed)
        np.testing.assert_array_equal(got, want)
        assert text.count("\n") == 4
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiled_calls"] >= 2, stats


def stored(x):
    cost = (x ** 2).mean()
    lines = ["cost %f" % cost]  # the text flows into a list: not only printed
    print(lines)
    return x


def measured(x):
    cost = (x ** 2).mean()
    print(len(f"{cost:.3f}"))
    return x


def compared(x):
    cost = (x ** 2).mean()
    print("{:.2f}".format(cost) == "0.50")
    return x


@pytest.mark.parametrize("function", [stored, measured, compared])
def test_text_used_otherwise_still_runs_eagerly(capsys, function):
    compiled = tj.jit(function, cache="memory")
    for seed in range(3):
        got, want, _ = _both(capsys, function, compiled, _data(seed))
        np.testing.assert_array_equal(got, want)
    stats = compiled.stats()
    assert stats["compiles"] == 0 and "formatting a " in compiled.explain(), stats


def branching(x):
    cost = (x ** 2).mean()
    print("cost %.6f" % cost)
    if x.sum() > 0:  # a guard after the print: a side exit must not print twice
        y = x * 2
    else:
        y = x - 2
    print(f"after {y.sum():.3f}")
    return y


def test_a_side_exit_after_a_formatted_print_prints_once(capsys):
    compiled = tj.jit(branching, cache="memory", hot_exit=100)
    calls = [np.abs(_data(1)) + 0.125, -np.abs(_data(2)) - 0.125, np.abs(_data(3)) + 0.125,
             -np.abs(_data(4)) - 0.125]
    for x in calls:
        got, want, text = _both(capsys, branching, compiled, x)
        np.testing.assert_array_equal(got, want)
        assert text.count("\n") == 2
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 1 and sum(stats["side_exits"].values()) >= 1, stats


def printing_loop(x, num_iterations):
    w = np.zeros_like(x)
    for i in range(num_iterations):
        cost = ((x - w) ** 2).mean()
        w = w + 0.125 * (x - w)
        if i % 100 == 0:
            print("Cost after iteration %i: %f" % (i, cost))
    return w


def last_trip_loop(x, num_iterations, print_cost=False):
    w = np.zeros_like(x)
    for i in range(num_iterations):
        cost = ((x - w) ** 2).mean()
        w = w + 0.125 * (x - w)
        if print_cost and i % 100 == 0 or i == num_iterations - 1:
            print("Cost after iteration {}: {}".format(i, np.squeeze(cost)))
    return w


def every_trip_loop(x, epochs):
    w = np.zeros_like(x)
    for epoch in range(1, epochs + 1):
        loss = float(((x - w) ** 2).sum())
        w = w + 0.125 * (x - w)
        print(f"epoch {epoch}: loss {loss:.4f}", end=";", flush=True)
    return w


@pytest.mark.parametrize("function, extra", [
    (printing_loop, ()), (last_trip_loop, (True,)), (last_trip_loop, (False,)),
    (every_trip_loop, ()),
])
def test_a_loop_printing_every_so_many_trips_compiles_once_for_every_count(
        capsys, function, extra):
    """The print's rows are kept at every trip and printed after the loop: one program
    for every count past the first (which pins it), each later call compiled; counts under
    3 trips unroll (the rows printed after the loop), 0 prints nothing."""
    compiled = tj.jit(function, cache="memory")
    x = _data(7)
    for count in (300, 301, 250, 1000, 7, 3, 0, 1, 2, 1000):
        got, want, text = _both(capsys, function, compiled, x, count, *extra)
        np.testing.assert_allclose(got, want, rtol=1e-15)
        assert text or count == 0
    stats = compiled.stats()
    # (0, 1 and 2 trips are constants of their own traces, as without the print)
    assert stats["eager_calls"] == {} and stats["compiles"] <= 6, stats
    assert stats["compiled_calls"] >= 4, stats


def guarded_loop(x, num_iterations):
    w = np.zeros_like(x)
    for i in range(num_iterations):
        cost = ((x - w) ** 2).mean()
        if cost > 100.0:  # a data-dependent guard in the body: fails on big inputs
            w = w * 0.5
        w = w + 0.125 * (x - w)
        if i % 10 == 0:
            print(f"{i}: {cost:.5f}")
    return w


def test_a_guard_failing_in_a_printing_loop_loses_and_doubles_no_line(capsys):
    compiled = tj.jit(guarded_loop, cache="memory", hot_exit=100)
    small, big = _data(3), _data(3) * 64
    for x, count in ((small, 40), (small, 55), (big, 55), (small, 61), (big, 30)):
        got, want, text = _both(capsys, guarded_loop, compiled, x, count)
        np.testing.assert_allclose(got, want, rtol=1e-15)
        assert text.count("\n") == (count + 9) // 10
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 1 and sum(stats["side_exits"].values()) >= 1, stats


def test_eager_hooks_print_at_the_trip(capsys):
    """The rewritten source run eagerly (Tensor arguments) prints each row at its trip."""
    want = printing_loop(_data(5), 250)
    text = capsys.readouterr().out
    got = run_eagerly(printing_loop, (_data(5), 250), {})
    assert capsys.readouterr().out == text
    np.testing.assert_array_equal(got, want)


def writing(x):
    cost = (x ** 2).mean()
    sys.stdout.write("cost %.5f\n" % cost)  # a statement: its count of characters unused
    sys.stdout.write(f"[{cost:.2e}]")
    return x + 1


def dims_and_lists(x):
    total = x.sum()
    print(f"shape {x.shape} n={x.shape[0]} sum={total:.2f}", "%d rows" % x.shape[0],
          "{}".format(len(x)), "%s" % ([1, 2],), f"{[int(x.size)]}")
    return x * 2


def test_dims_formatted_in_a_print_are_their_values(capsys):
    """A dim formatted by the deferred text is its value (the text eager makes), not the
    symbol's name: the formatting is the user's (``dims.calls_for_the_user``)."""
    compiled = tj.jit(dims_and_lists, cache="memory")
    for size in (3, 5, 7, 9, 17):
        got, want, text = _both(capsys, dims_and_lists, compiled, np.arange(size) / 4.0)
        np.testing.assert_array_equal(got, want)
        assert f"shape ({size},)" in text


def listed(x):
    loss = (x ** 2).mean()
    print(f"{[loss]}")  # repr of a traced float inside the text: refused, as str([loss])
    return x


def test_a_traced_float_inside_a_formatted_container_runs_eagerly(capsys):
    compiled = tj.jit(listed, cache="memory")
    for seed in range(2):
        got, want, text = _both(capsys, listed, compiled, _data(seed))
        assert "Tracer" not in text
    assert compiled.stats()["compiles"] == 0


def test_formatted_text_written_to_stdout_compiles(capsys):
    compiled = tj.jit(writing, cache="memory")
    for seed in range(3):
        got, want, text = _both(capsys, writing, compiled, _data(seed))
        np.testing.assert_array_equal(got, want)
        assert text.startswith("cost ") and text.endswith("]")
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiled_calls"] >= 2, stats


def _shout(*parts):
    print(">>", *parts)


def shadowed(x):
    print = _shout  # noqa: A001 - a `print` that is not the builtin: the text as written
    cost = (x ** 2).sum()
    print("total %d" % int(x.size))
    print(f"{cost:.3f}")
    return x


def test_a_print_that_is_not_the_builtin_gets_the_text_as_written(capsys):
    compiled = tj.jit(shadowed, cache="memory")
    for seed in range(2):
        got, want, _ = _both(capsys, shadowed, compiled, _data(seed))
        np.testing.assert_array_equal(got, want)
    assert "formatting a " in compiled.explain()


def course_costs(x, num_iterations, print_cost=False):
    """L_layer_model's two tests: the print's last trip, and the costs' bound past the end
    (``i == num_iterations`` never holds in ``range(num_iterations)``)."""
    w, costs = np.zeros_like(x), []
    for i in range(0, num_iterations):
        cost = np.squeeze(((x - w) ** 2).mean())
        w = w + 0.125 * (x - w)
        if print_cost and i % 100 == 0 or i == num_iterations - 1:
            print("Cost after iteration {}: {}".format(i, np.squeeze(cost)))
        if i % 100 == 0 or i == num_iterations:
            costs.append(cost)
    return w, costs


@pytest.mark.parametrize("print_cost", [True, False])
def test_course_costs_and_prints_compile_once_for_every_count(capsys, print_cost):
    """The costs' bound past the end pinned the count (one compile per value, eager past
    max_variants); it selects the periodic trips alone now."""
    compiled = tj.jit(course_costs, cache="memory")
    x = _data(11)
    for count in (300, 301, 250, 1000, 450, 999, 17, 1000):
        (got, got_costs), (want, want_costs), _ = _both(capsys, course_costs, compiled, x,
                                                        count, print_cost)
        np.testing.assert_allclose(got, want, rtol=1e-15)
        assert len(got_costs) == len(want_costs)
        np.testing.assert_allclose(got_costs, want_costs, rtol=1e-15)
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiles"] <= 3, stats
    assert stats["compiled_calls"] >= 5, stats


def test_a_flushed_print_at_every_trip_is_printed_as_rows_after_the_loop():
    """``flush=True`` (progress lines) is no reason to leave the print in the body, where
    it kept the loop from running natively: the rows print after the loop."""
    traced = trace(every_trip_loop, _data(2), 50, dynamic=True)
    assert any(type(item).__name__ == "Effect" and dict(item.params).get("rows")
               for item in traced.graph.body)


def loss_with_costs(w, x, n):
    costs = []
    for i in range(n):
        w = w - 0.125 * (w - x)
        cost = ((w - x) ** 2).sum()
        if i % 10 == 0 or i == n - 1:  # append_when(..., last=, periodic=)
            costs.append(float(cost))
        if i % 10 == 0:
            print("cost %.6f" % cost)
    return ((w - x) ** 2).sum(), costs


def test_value_and_grad_through_the_rewritten_source_keeps_costs_and_prints(capsys):
    """``value_and_grad`` runs the rewritten source eagerly (``EagerHooks``): its
    ``append_when`` took no ``last``/``periodic`` (bfee6cb), so a course loop keeping its
    costs at the last trip raised TypeError where NumPy runs; the print hooks print at the
    trip."""
    x = _data(4)
    w = np.zeros_like(x)
    (value, costs), gradient = tj.value_and_grad(loss_with_costs, has_aux=True)(w, x, 25)
    text = capsys.readouterr().out
    want_value, want_costs = loss_with_costs(w, x, 25)
    assert capsys.readouterr().out == text and text.count("\n") == 3
    np.testing.assert_allclose(float(value), want_value, rtol=1e-12)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-12)
    assert len(costs) == 4 and np.shape(gradient) == w.shape
    step = 1e-6
    finite = [(loss_with_costs(w + step * e, x, 25)[0] - loss_with_costs(w - step * e, x, 25)[0])
              / (2 * step) for e in np.eye(w.size)]
    capsys.readouterr()
    np.testing.assert_allclose(np.asarray(gradient), finite, rtol=1e-5, atol=1e-9)
