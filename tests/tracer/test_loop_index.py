"""The loop index is symbolic while a captured loop's body is traced (tracer/loop_index.py).

Capture used to trace iterations 1 and 2 with ``t`` as a plain int and generalize ints
that differed as affine in the index: ``x[t // 2]``, ``x[t % 3]``, ``t % 2`` as a weight,
``tokens[t]`` on a Python list, ``if t == 4`` were silently wrong for other trips. Now
``t`` is a ``SymInt`` over the index symbol: exact floor divisions and remainders stay
captured (one compile per bucket), and a path or a Python value that depends on the
index refuses capture (the loop unrolls, ``explain()`` names the line).

Every form runs eagerly and through one ``jit`` over trip counts 0..17 (two calls each:
traced, then compiled) and must agree; captured forms compile once per bucket.
"""

from __future__ import annotations

import copy
import re
import warnings

import numpy as np
import pytest

from tracejit import jit
from tracejit.testing import compare_results
from tracejit.tracer import trace
from tracejit.tracer.dims import DimExpr
from tracejit.tracer.loop_index import linear_in

TRIPS = (0, 1, 2, 3, 5, 7, 13, 16, 17)


# --- forms that stay captured: the index is exact in the IR ------------------------------
def read_at_index(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t])
    return h


def read_column(x):
    h = np.zeros(x.shape[0])
    for t in range(x.shape[1]):
        h = h * 0.5 + x[:, t]
    return h


def strided_window(x):
    acc = np.zeros((x.shape[0], x.shape[1], 3))
    for t in range((x.shape[2] - 3) // 2 + 1):
        acc = acc + x[:, :, 2 * t:2 * t + 3]
    return acc


def reversed_read(x):
    out = np.zeros_like(x)
    T = x.shape[0]
    h = np.zeros(x.shape[1:])
    for t in range(T):
        h = h * 0.5 + x[T - 1 - t]
        out[t] = h
    return out


def write_column(x):
    h = np.zeros(x.shape[0])
    h_all = np.zeros((x.shape[0], x.shape[1]))
    for t in range(x.shape[1]):
        h = np.tanh(h + x[:, t])
        h_all[:, t] = h
    return h_all


def halved(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h + x[t // 2] * (t + 1)
    return h


def modular(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h * 0.9 + x[t % 3]
    return h


def parity(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h + x[t] * (t % 2) - x[t] * (t // 3)
    return h


def halved_write(x):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        out[t // 2] = x[t]  # two trips per row, the second wins (as in NumPy)
    return out


def modular_write(x):
    out = np.zeros((3, x.shape[1]))
    for t in range(x.shape[0]):
        out[t % 3] = x[t] * 2.0
    return out


def reversed_halved(x):
    h = np.zeros(x.shape[1:])
    for t in reversed(range(x.shape[0])):
        h = h * 0.5 + x[t // 2]
    return h


def nested_outer_index(x):
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i // 2, j] * (j % 2) + i
    return out


# --- forms that depend on the index in Python: refused, exact ----------------------------
def branch_at_four(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h + x[t]
        if t == 4:
            h = h * 0.0
    return h


def branch_at_last(x):
    last = np.zeros(x.shape[1:])
    T = x.shape[0]
    for t in range(T):
        h = np.tanh(x[t])
        if t == T - 1:
            last = h
    return last


def clamped(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h + x[min(t, 2)]
    return h


def token_list(x, tokens):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h * 0.5 + x[tokens[t]]
    return h


def float_of_index(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h + x[t] * float(t)
    return h


def set_membership(x):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h + x[t]
        if t in {4, 6}:  # a hash lookup: no comparison is asked unless hashes match
            h = -h
    return h


def plain_dict(x, table):
    h = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        h = h + x[t] * table[t]
    return h


def triangle(x):
    acc = np.zeros(x.shape[1:])
    for i in range(x.shape[0]):
        for j in range(i):  # the inner trip count follows the outer index
            acc = acc + x[j] * x[i]
    return acc


def rows(length, columns=3, salt=0):
    rng = np.random.default_rng(1000 * salt + length)
    return rng.standard_normal((length, columns))


def single(length):
    return (rows(length),)


def wide(length):
    return (rows(4, columns=length).copy(),)


def cube(length):
    # (2 * length + 1 - 3) // 2 + 1 == length windows of 3 at stride 2
    return (np.random.default_rng(length).standard_normal((2, 3, 2 * length + 1)),)


def square(length):
    return (rows(length, columns=length),)  # one symbol for both dims


def tokens(length):
    # 3, 9, ... would be read as 3 + 6 * (t - 1) by an affine guess from two samples
    return rows(length), [(3 * k * k) % max(length, 1) for k in range(length)]


CAPTURED = {  # name: (function, arguments, the dynamic dims a trip count makes)
    "read_at_index": (read_at_index, single, lambda n: (n,)),
    "read_column": (read_column, wide, lambda n: (n,)),
    "strided_window": (strided_window, cube, lambda n: (2 * n + 1,), lambda n: n),
    "reversed_read": (reversed_read, single, lambda n: (n,)),
    "write_column": (write_column, wide, lambda n: (n,)),
    "halved": (halved, single, lambda n: (n,)),
    "modular": (modular, single, lambda n: (n,)),
    "parity": (parity, single, lambda n: (n,)),
    "halved_write": (halved_write, single, lambda n: (n,)),
    "modular_write": (modular_write, single, lambda n: (n,)),
    "reversed_halved": (reversed_halved, single, lambda n: (n,)),
    "nested_outer_index": (nested_outer_index, square, lambda n: (n,)),
    # the last trip runs after the loop (tracer/loops.py's _with_last_peeled), so the loop
    # over the trips between captures when the first call runs three of them
    "branch_at_last": (branch_at_last, single, lambda n: (n,), lambda n: n - 2),
}
REFUSED = {  # name: (function, arguments, the line explain() must name)
    "branch_at_four": (branch_at_four, single, "if t == 4:"),
    "clamped": (clamped, single, "h = h + x[min(t, 2)]"),
    "token_list": (token_list, tokens, "h = h * 0.5 + x[tokens[t]]"),
    "float_of_index": (float_of_index, single, "h = h + x[t] * float(t)"),
    "set_membership": (set_membership, single, "if t in {4, 6}:"),
    "plain_dict": (plain_dict, lambda n: (rows(n), {k: (k * 7) % 5 - 2.0 for k in range(n)}),
                   "h = h + x[t] * table[t]"),
    "triangle": (triangle, single, "x[j] * x[i]"),  # range(i) asks for an int there
}


def _call(function, arguments):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return function(*arguments), None
        except Exception as error:  # noqa: BLE001 - compared by type with jit's
            return None, error


def _compiles(dims, trips_of=lambda n: n):
    """One compile per bucket of the dynamic dims, except where the bucket's first call
    runs fewer than 3 trips: capture needs 3, so that call unrolls and pins its length
    (a known limitation, tests/differential/test_loop_models.py), and each length of the
    bucket compiles."""
    first, lengths = {}, {}
    for length in TRIPS:
        key = tuple(_bucket(dim) for dim in dims(length))
        first.setdefault(key, trips_of(length))
        lengths.setdefault(key, set()).add(length)
    return sum(1 if first[key] >= 3 else len(lengths[key]) for key in first)


def _bucket(length):
    """The compile a trip count lands in: 0, 1 and 2 are static sizes, the rest pow2
    buckets (2, 4], (4, 8], ..."""
    if length <= 2:
        return length
    return 1 << (length - 1).bit_length()


def _run(function, make, trips=TRIPS):
    jitted = jit(function, cache="memory", dynamic=True)
    for length in trips:
        arguments = make(length)
        expected, expected_error = _call(function, copy.deepcopy(arguments))
        for call in ("traced", "compiled"):
            actual, error = _call(jitted, copy.deepcopy(arguments))
            where = f"{function.__name__}: {length} trips, {call} call"
            if expected_error is not None or error is not None:
                assert type(error) is type(expected_error), (
                    f"{where}: eager raised {expected_error!r}, jit {error!r}")
                continue
            problem = compare_results(actual, expected)
            assert problem is None, f"{where}: {problem}"
    return jitted


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_form_matches_eager_and_compiles_once_per_bucket(name):
    function, make, dims, *trips_of = CAPTURED[name]
    jitted = _run(function, make)
    stats = jitted.stats()
    assert not stats["eager_calls"], jitted.explain()
    assert stats["compiles"] == _compiles(dims, *trips_of), jitted.explain()
    assert "loop index decides" not in jitted.explain(), jitted.explain()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_index_dependent_form_is_refused_and_exact(name):
    function, make, line = REFUSED[name]
    jitted = _run(function, make)
    explanation = jitted.explain()
    refusals = [text for text in explanation.splitlines() if "unrolled:" in text]
    assert refusals, explanation
    # The loop is named, and so is the user's line that asked about the index (the
    # triangle's inner range(i) specializes the outer index).
    assert any(line in text for text in refusals), explanation


def test_index_is_exact_in_the_ir():
    """x[t // 2] and t % 3 appear as floor division and remainder of the index symbol."""
    def body(x):
        h = np.zeros(x.shape[1:])
        for t in range(x.shape[0]):
            h = h + x[t // 2] * (t % 3)
        return h

    traced = trace(body, rows(9), dynamic=True)
    text = str(traced.graph)
    assert re.search(r"i0 // 2", text) and re.search(r"i0 % 3", text), text
    assert "loop" in text
    np.testing.assert_allclose(traced.outputs, body(rows(9)))
    assert not any("i0" in str(guard.lhs) or "i0" in str(guard.rhs)
                   for guard in traced.shape_guards)


def test_bounds_guards_settle_at_the_ends():
    """x[t + 1] in range(T - 1) holds at every trip (no guard, no recompile); y[t] where
    y has its own length keeps one guard on the dims (the last trip fits), not on i0."""
    def shifted(x):
        h = np.zeros(x.shape[1:])
        for t in range(x.shape[0] - 1):
            h = h + x[t + 1]
        return h

    def other_length(x, y):
        h = np.zeros(x.shape[1:])
        for t in range(x.shape[0]):
            h = h + x[t] * y[t]
        return h

    traced = trace(shifted, rows(9), dynamic=True)
    assert not traced.shape_guards, traced.shape_guards
    x, y = rows(6), np.arange(7.0)
    traced = trace(other_length, x, y, dynamic=True)
    guards = [str(guard.lhs) + guard.op + str(guard.rhs) for guard in traced.shape_guards]
    assert all("i0" not in guard for guard in guards), guards
    np.testing.assert_allclose(traced.outputs, other_length(x, y))
    jitted = _run(other_length, lambda n: (rows(n), np.arange(n + 1.0)), (5, 6, 7))
    assert jitted.stats()["compiles"] == 1, jitted.explain()
    # y shorter than x: the last trip reads past y (eager raises, so does jit)
    _run(other_length, lambda n: (rows(n), np.arange(n - 1.0)), (5, 6))


def test_dict_and_list_keyed_by_the_index():
    """Containers filled at the index (tracer/loop_containers.py) key their entries by the
    index's value in each trial; reads at t - 1 are a window, hs[-1] a fixed entry."""
    def rnn(x, h0):
        hs = {-1: h0}
        outs = []
        for t in range(x.shape[0]):
            hs[t] = np.tanh(x[t] + hs[t - 1] * 0.5 + hs[-1] * 0.1)
            outs.append(hs[t] * 2.0)
        return np.stack(outs), hs[x.shape[0] - 1]

    jitted = _run(rnn, lambda n: (rows(n), rows(1, salt=1)[0]), (3, 5, 7, 13, 16, 17))
    assert "unrolled" not in jitted.explain(), jitted.explain()
    assert jitted.stats()["compiles"] == 4, jitted.explain()


def test_dict_read_at_a_halved_key_is_refused():
    def body(x):
        hs = {-1: np.zeros(x.shape[1:])}
        for t in range(x.shape[0]):
            hs[t] = x[t] + hs[t // 2 - 1]
        return hs[x.shape[0] - 1]

    jitted = _run(body, single, (5, 6, 7, 8))
    assert "loop index plus a constant" in jitted.explain(), jitted.explain()


def test_linear_in():
    i0, s0 = DimExpr.symbol("i0"), DimExpr.symbol("s0")
    assert linear_in(3 * i0 * s0 + 2, "i0") == (2, 3 * s0)
    assert linear_in(s0 + 1, "i0") == (s0 + 1, 0)
    assert linear_in(i0 * i0, "i0") is None
    assert linear_in(i0 % 3 + i0, "i0") is None
    assert linear_in((s0 + 1) // 2 + i0, "i0") == ((s0 + 1) // 2, 1)


def test_a_dim_looked_up_in_a_set_specializes():
    """`n in {5, 6}` hashes the dim: its hash is the value's, with a guard (the expression's
    hash matched no int: the lookup missed for every length, silently)."""
    def scaled(x):
        if x.shape[0] in {5, 6}:
            return x * 2.0
        return x

    jitted = _run(scaled, single, (7, 5, 6, 8))
    assert jitted.stats()["compiles"] >= 2, jitted.explain()
