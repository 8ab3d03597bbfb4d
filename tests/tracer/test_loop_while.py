"""Counted ``while`` loops (``while y + f <= h: ...; y += s``), eager vs ``jit``: captured
as loops over their trip count (one compile per bucket of sizes), and every other
``while`` runs as written (tracejit.tracer.loop_while)."""

import copy

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.loop_while import while_trips


def compare(function, argument_sets, **options):
    options = {"cache": "memory", "dynamic": True, **options}
    f = tj.jit(function, **options)
    for arguments in argument_sets:
        want = function(*copy.deepcopy(arguments))
        got = f(*copy.deepcopy(arguments))
        want_items = want if isinstance(want, tuple) else (want,)
        got_items = got if isinstance(got, tuple) else (got,)
        assert len(got_items) == len(want_items)
        for g, w in zip(got_items, want_items):
            assert type(g) is type(w) and np.shape(g) == np.shape(w), (g, w)
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    return f


def rng(seed=0):
    return np.random.default_rng(seed)


# --- the idioms of CNNs written from scratch ---------------------------------------------
def pool_while(X, f, s):
    channels, h, w = X.shape
    out = np.zeros((channels, (h - f) // s + 1, (w - f) // s + 1))
    for c in range(channels):
        y = oy = 0
        while y + f <= h:
            x = ox = 0
            while x + f <= w:
                out[c, oy, ox] = np.max(X[c, y:y + f, x:x + f])
                x += s
                ox += 1
            y += s
            oy += 1
    return out


def conv_while(image, filt, bias):
    nf, _, f, _ = filt.shape
    size = image.shape[1]
    out = np.zeros((nf, size - f + 1, size - f + 1))
    for k in range(nf):
        row = out_row = 0
        while row + f <= size:
            col = out_col = 0
            while col + f <= size:
                out[k, out_row, out_col] = np.sum(
                    filt[k] * image[:, row:row + f, col:col + f]) + bias[k]
                col += 1
                out_col += 1
            row += 1
            out_row += 1
    return out


def test_pooling_with_while_counters_compiles_once_per_bucket():
    r = rng(1)
    f = compare(pool_while, [(r.standard_normal((3, n, n + 1)), 2, 2) for n in (9, 12, 15)])
    assert f.stats()["compiles"] == 1, f.explain()
    compare(pool_while, [(r.standard_normal((2, n, n)), 3, 1) for n in (5, 6, 3)])


def test_convolution_with_while_counters_compiles_once_per_bucket():
    r = rng(2)
    f = compare(conv_while, [(r.standard_normal((2, n, n)), r.standard_normal((4, 2, 3, 3)),
                              r.standard_normal(4)) for n in (10, 13, 16)])
    assert f.stats()["compiles"] == 1, f.explain()


# --- counters: comparisons, directions, values after the loop ------------------------------
def counters_after(x, f):
    n = x.shape[0]
    i = j = 0
    total = np.zeros(x.shape[1:])
    while i + f < n:  # strict
        total = total + x[i] * (j + 1)
        i += 2
        j += 1
    return total, i, j


def counting_down(x):
    i = x.shape[0] - 1
    acc = 0.0
    while i >= 1:
        acc = acc + np.sum(x[i]) * 0.5
        i -= 1
    return acc, i


def test_counters_hold_their_python_values_after_the_loop():
    r = rng(3)
    compare(counters_after, [(r.standard_normal((n, 3)), 1) for n in (9, 12, 2, 1, 0, 7)])
    compare(counting_down, [(r.standard_normal((n, 2)),) for n in (8, 11, 1, 0, 5)])


@pytest.mark.parametrize("op, g0, slope", [
    ("<=", -7, 3), ("<", -7, 3), ("<=", 0, 2), ("<", 0, 2), ("<=", 5, 1),
    (">=", 7, -3), (">", 7, -3), (">", 0, -1), (">=", -1, -1),
])
def test_trip_counts_match_running_the_condition(op, g0, slope):
    holds = {"<": lambda g: g < 0, "<=": lambda g: g <= 0,
             ">": lambda g: g > 0, ">=": lambda g: g >= 0}[op]
    trips = 0
    while holds(g0 + slope * trips):
        trips += 1
    assert while_trips(op, g0, g0 + slope) == trips


def test_a_loop_that_would_not_end_is_left_as_written():
    assert while_trips("<=", -1, -1) is None and while_trips(">", 3, 4) is None


# --- what runs as written ------------------------------------------------------------------
def converge(x, tol):
    err, steps = 1.0, 0
    while err > tol:  # a float condition on data: not counted
        x = 0.5 * x
        err = float(np.max(np.abs(x)))
        steps += 1
    return x, steps


def grow_list(x):
    rows = []
    while len(rows) < x.shape[0]:  # reads a list the body appends to
        rows.append(x[len(rows)] * 2.0)
    return np.stack(rows)


def with_break(x):
    i = 0
    while i < x.shape[0]:
        if i == 3:
            break
        i += 1
    return x[:i] * 1.0


def nonlinear_condition(x):
    i, acc = 1, 0.0
    while i * i <= x.shape[0]:  # not affine in the counter
        acc = acc + np.sum(x[i])
        i += 1
    return acc


def test_other_while_loops_run_as_written():
    r = rng(4)
    compare(converge, [(r.standard_normal(4), 1e-3), (r.standard_normal(4) * 9, 1e-2)])
    compare(grow_list, [(r.standard_normal((n, 2)),) for n in (3, 5)])
    compare(with_break, [(r.standard_normal((n, 2)),) for n in (6, 2)])
    compare(nonlinear_condition, [(r.standard_normal((n, 2)),) for n in (9, 16, 5)])


def step_from_argument(x, s):
    i, acc = 0, 0.0
    while i < x.shape[0]:
        acc = acc + np.sum(x[i])
        i += s
    return acc


def test_a_step_that_becomes_a_runtime_value_still_matches():
    r = rng(5)
    # s changes value: it becomes a run-time input, the trip count is no longer an int
    # the trace can know, and the loop runs as written (one trace per call shape).
    compare(step_from_argument, [(r.standard_normal((n, 2)), s)
                                 for n, s in ((9, 2), (9, 3), (12, 2), (12, 5))])


def test_gradient_through_a_counted_while_loop():
    r = rng(6)
    x, w = r.standard_normal((9, 3)), r.standard_normal(3)

    def loss(w, x):
        i, h = 0, np.zeros(3)
        while i + 1 <= x.shape[0]:
            h = np.tanh(h * w + x[i])
            i += 1
        return np.sum(h * h)

    value, gradient = tj.jit(tj.value_and_grad(loss), cache="memory", dynamic=True)(w, x)
    eager_value, eager_gradient = tj.value_and_grad(loss)(w, x)
    np.testing.assert_allclose(value, eager_value, rtol=1e-12)
    np.testing.assert_allclose(gradient, eager_gradient, rtol=1e-10, atol=1e-12)


def pool_sized_by_true_division(X, f, s):
    """The output size as from-scratch code writes it: int((w - f) / s) + 1."""
    channels, w, _ = X.shape
    size = int((w - f) / s) + 1
    out = np.zeros((channels, size, size))
    for c in range(channels):
        cx = ox = 0
        while cx + f <= w:
            cy = oy = 0
            while cy + f <= w:
                out[c, ox, oy] = np.max(X[c, cx:cx + f, cy:cy + f])
                cy += s
                oy += 1
            cx += s
            ox += 1
    return out


def negative_quotient(x):
    return x * int((3 - x.shape[0]) / 2)  # truncates toward zero: not a floor division


def pool_forward_by_index_loops(A, f, stride):
    """deeplearning.ai's pool_forward: its size as ``int(1 + (n - f) / stride)``."""
    m, n_H_prev, n_W_prev = A.shape
    n_H = int(1 + (n_H_prev - f) / stride)
    n_W = int((n_W_prev - f) / stride - 1) + 2
    out = np.zeros((m, n_H, n_W))
    for h in range(n_H):
        for w in range(n_W):
            out[:, h, w] = np.max(A[:, h * stride:h * stride + f, w * stride:w * stride + f],
                                  axis=(1, 2))
    return out, n_H, n_W


def reflected_quotient(x):
    return x * int(7 - x.shape[0] / 2) + int(2 + x.shape[0] / 3)  # 7 - n / 2 may go negative


def test_int_of_a_true_division_of_dims_stays_a_dim():
    r = rng(7)
    f = compare(pool_sized_by_true_division,
                [(r.standard_normal((2, n, n)), 2, 2) for n in (10, 13, 16, 11)])
    assert f.stats()["compiles"] == 1, f.explain()
    compare(negative_quotient, [(r.standard_normal(n),) for n in (6, 9, 12)])
    compare(reflected_quotient, [(r.standard_normal(n),) for n in (6, 9, 12, 15, 17, 13)])
    f = compare(pool_forward_by_index_loops,
                [(r.standard_normal((2, n, n + 1)), 2, 2) for n in (10, 13, 14, 11)])
    assert f.stats()["compiles"] == 1, f.explain()
