"""Session review 23a: the printing and loop-capture work of round 23, attacked with
eager-vs-compiled programs (deferred text, loop prints, strided trip counts).

- A strided loop printing under a test of its index (``for i in range(1, n, 3): if i % 2
  == 0: print(f"it {i}: ...")``) printed the trip number (1, 3, 5) where NumPy prints the
  index (4, 10, 16): b6e8a10 runs such a loop over its trip number and ``loop_prints``'
  rows took the index from the counter.
- A print under ``with np.printoptions(precision=2)`` in the function printed at full
  precision from compiled calls (compiled code prints after the call, under the caller's
  options); ``np.set_printoptions`` inside the function was skipped by compiled calls.

Each test compares the printed text and the results with eager NumPy. The data are dyadic,
so compiled values equal NumPy's to the bit and the text must be equal exactly."""

from __future__ import annotations

import numpy as np
from test_deferred_text import _both as _printed_as_eager
from test_deferred_text import _data

import tracejit as tj


def _both(capsys, function, compiled, *args):
    got, want, eager_text = _printed_as_eager(capsys, function, compiled, *args)
    np.testing.assert_array_equal(got, want)
    return eager_text


def strided_printing(x, n):
    w = x.copy()
    for i in range(1, n, 3):
        w = w * 0.5
        cost = (w ** 2).sum()
        if i % 2 == 0:
            print(f"it {i}: {cost:.5e}", i)
    return w


def reversed_strided_printing(x, n):
    w = x.copy()
    for i in range(n, 0, -2):
        w = w * 0.5
        if i % 3 == 0:
            print("it %d" % i, (w ** 2).sum())
    return w


def test_a_strided_loop_prints_its_index_not_its_trip_number(capsys):
    compiled = tj.jit(strided_printing, cache="memory")
    for count in (7, 13, 11, 17, 40, 41, 2, 3):
        text = _both(capsys, strided_printing, compiled, _data(0), count)
        assert text.count("\n") == len([i for i in range(1, count, 3) if i % 2 == 0])
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiled_calls"] >= 4, stats


def test_a_reversed_strided_loop_prints_its_index(capsys):
    compiled = tj.jit(reversed_strided_printing, cache="memory")
    for count in (7, 13, 11, 17, 40, 41, 2, 3):
        _both(capsys, reversed_strided_printing, compiled, _data(1), count)


def printed_with_options(x):
    with np.printoptions(precision=2):
        print(x / 3)
        print(f"{x / 3}", "{}".format((x / 3).sum()))
    return x * 2


def sets_print_options(x):
    np.set_printoptions(precision=3)
    return x * 2


def test_a_print_under_print_options_set_in_the_function_prints_what_eager_prints(capsys):
    compiled = tj.jit(printed_with_options, cache="memory")
    for seed in range(3):
        _both(capsys, printed_with_options, compiled, _data(seed))
    assert compiled.stats()["compiled_calls"] == 0  # runs eagerly: the options are its own


def test_set_printoptions_in_the_function_is_not_skipped_by_compiled_calls():
    compiled = tj.jit(sets_print_options, cache="memory")
    before = np.get_printoptions()
    try:
        for seed in range(3):
            np.set_printoptions(precision=8)
            np.testing.assert_array_equal(compiled(_data(seed)), _data(seed) * 2)
            assert np.get_printoptions()["precision"] == 3
    finally:
        np.set_printoptions(**before)


def shapes(x, w):
    h = x @ w
    print("X", x.shape, "h", h.shape, [h.shape[1], 2], (x.shape[0],))
    print(f"{h.shape} {x.shape!r}", "{}".format(w.shape), "%s" % (h.shape,))
    return h


def test_a_printed_shape_compiles_once_for_every_size(capsys):
    """print(x.shape) pinned every size (the text held them: one compile per size, eager
    past max_variants); its dims are now slots rendered at run time, as print(x.shape[0])."""
    compiled = tj.jit(shapes, cache="memory")
    for rows in (5, 7, 9, 13, 10, 6, 11):
        x = _data(rows, rows * 3).reshape(rows, 3)
        _both(capsys, shapes, compiled, x, np.ones((3, 2)))
    stats = compiled.stats()
    assert stats["compiles"] <= 3 and stats["compiled_calls"] >= 4, stats


def costs_kept_by_two_loops(x, n):
    w = x.copy()
    costs = []
    for _ in range(n):
        w = w * 0.5
        costs.append(w.sum())
    for i in range(n - 1, 0, -3):
        if i % 2 == 0:
            costs.append(-w.sum() * i)
    return w, costs


def test_a_list_a_captured_loop_filled_appended_to_by_a_second_loop():
    """With the count a 0-d array (ffda0d1: never pinned), the second loop's trial made
    the first loop's rows a list of reads it then threw away; the unrolled trips appended
    to that list ('return uses %38 before its definition': internal error, eager)."""
    compiled = tj.jit(costs_kept_by_two_loops, cache="memory")
    for count in (40, 53, 7, 97):
        got = compiled(_data(count), np.array(count))
        want = costs_kept_by_two_loops(_data(count), np.array(count))
        np.testing.assert_array_equal(got[0], want[0])
        assert len(got[1]) == len(want[1]) and all(
            type(a) is type(b) and a == b for a, b in zip(got[1], want[1]))
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiled_calls"] >= 2, stats


def reported_loss(w, x, n):
    total = 0.0
    for i in range(n):
        cost = (np.tanh(x @ w) ** 2).mean()
        total = total + cost
        x = x * 0.75
        if i % 3 == 0:
            print(f"step {i}: {cost:.6f}", "{:.3f}".format(cost), "%.4f" % cost)
    return total


def test_value_and_grad_of_a_function_printing_a_formatted_cost(capsys):
    """tracejit.value_and_grad runs the function eagerly on Tensors: f"{cost:.6f}" raised
    TypeError (Tensor had no __format__) where NumPy prints."""
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((5, 3))
    for count in (4, 7):
        want = reported_loss(w, x, count)
        eager_text = capsys.readouterr().out
        value, gradient = tj.value_and_grad(reported_loss)(w, x, count)
        assert capsys.readouterr().out == eager_text and eager_text.count("\n") == (
            count + 2) // 3
        assert abs(value - want) <= 1e-12 * abs(want)
        step, central = 1e-6, np.zeros_like(w)
        for k in np.ndindex(w.shape):
            up, down = w.copy(), w.copy()
            up[k] += step
            down[k] -= step
            central[k] = (reported_loss(up, x, count) - reported_loss(down, x, count)) / (
                2 * step)
        capsys.readouterr()
        np.testing.assert_allclose(gradient, central, rtol=1e-6, atol=1e-8)
