"""Inputs that are not C-contiguous: broadcast views are read through their compact base
(never copied to their full extent), other layouts are copied; every result equals eager.

The native entry checks the inputs' layout itself; when one is not C-contiguous nothing
has run, and the wrapper either calls a program compiled for that broadcast pattern or
passes C-ordered copies. Broadcast inputs under ``COMPACT_BYTES`` are copied (cheaper than
a compile), so the tests that exercise the broadcast programs on small shapes set it to 0.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import tracejit.codegen.program  # noqa: F401 (tracejit.codegen.program)
from tracejit import codegen, jit


@pytest.fixture
def compact_all(monkeypatch):
    """Every broadcast input goes to a broadcast program, however small."""
    monkeypatch.setattr(codegen.program, "COMPACT_BYTES", 0)


def model(x, y):
    return np.tanh(x * 2.0 + y).sum(axis=-1), (x - y).T, x.max(axis=-1)


def _broadcast(base, shape):
    return np.broadcast_to(np.asarray(base, np.float64), shape)


rng = np.random.default_rng(0)
# (name, x, y): x (and sometimes y) a broadcast view; shapes span broadcast axes first,
# last, middle, several, a 0-d base, and sizes 0 and 1.
CASES = [
    ("rows", _broadcast(rng.standard_normal(5), (4, 5)), rng.standard_normal((4, 5))),
    ("columns", _broadcast(rng.standard_normal((4, 1)), (4, 5)), rng.standard_normal((4, 5))),
    ("middle", _broadcast(rng.standard_normal((3, 1, 5)), (3, 4, 5)),
     rng.standard_normal((3, 4, 5))),
    ("two axes", _broadcast(rng.standard_normal((1, 4, 1)), (3, 4, 5)),
     rng.standard_normal((3, 4, 5))),
    ("scalar base", _broadcast(2.5, (6, 3)), rng.standard_normal((6, 3))),
    ("both", _broadcast(rng.standard_normal(7), (3, 7)), _broadcast(rng.standard_normal((3, 1)),
                                                                    (3, 7))),
    ("zero rows", _broadcast(rng.standard_normal(5), (0, 5)), np.zeros((0, 5))),
    ("one row", _broadcast(rng.standard_normal(5), (1, 5)), rng.standard_normal((1, 5))),
]


def _check(compiled, expected):
    assert len(compiled) == len(expected)
    for got, want in zip(compiled, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, x, y", CASES, ids=[case[0] for case in CASES])
def test_broadcast_inputs_match_eager(compact_all, name, x, y):
    f = jit(cache=False)(model)
    f(np.ascontiguousarray(x), np.ascontiguousarray(y))  # traced on ordinary arrays
    _check(f(x, y), model(x, y))
    _check(f(x, y), model(x, y))
    stats = f.stats()
    assert stats["compiled_calls"] == 2 and stats["compiles"] == 1, stats
    built = f._variants[0].root.program.broadcast_programs
    assert all(program is not None for program in built.values())
    # Size 0 and broadcast axes of length 1 are C-contiguous: nothing to lay out.
    assert bool(built) == any(stride == 0 and size > 1 for array in (x, y) if array.size
                              for stride, size in zip(array.strides, array.shape))


def test_static_variant_takes_a_broadcast_row(compact_all):
    """Compiled for exact shapes (3, 4); a row broadcast to (3, 4) matches that variant:
    the compact base (1, 4) never reaches the entry guard, which would refuse it."""
    f = jit(cache=False, dynamic=False)(lambda x: x * x + 1.0)
    f(np.ones((3, 4)))
    row = _broadcast(np.arange(4.0), (3, 4))
    np.testing.assert_array_equal(f(row), row * row + 1.0)
    assert f.stats()["compiles"] == 1 and f.stats()["compiled_calls"] == 1


def test_symbol_read_only_from_a_broadcast_axis(compact_all):
    """``s0`` is bound only by the broadcast axis (length 1 in the compact base)."""
    f = jit(cache=False, dynamic=True)(lambda x, w: (x * w).sum(axis=1) + x.shape[0])
    f(np.ones((5, 3)), np.ones(3))
    x = _broadcast(np.arange(3.0), (7, 3))
    w = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(f(x, w), (x * w).sum(axis=1) + 7)
    assert f.stats()["compiles"] == 1


def test_broadcast_operand_of_a_matmul(compact_all):
    f = jit(cache=False)(lambda a, b: np.maximum(a @ b, 0.0))
    b = rng.standard_normal((6, 4))
    f(np.ones((3, 6)), b)
    a = _broadcast(rng.standard_normal(6), (3, 6))
    np.testing.assert_allclose(f(a, b), np.maximum(a @ b, 0.0), rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda x: x.T,
    lambda x: x[::2],
    lambda x: x[:, 1:],
    lambda x: np.lib.stride_tricks.as_strided(x, (4, 2), (x.strides[0], 2 * x.strides[1])),
], ids=["transposed", "rows stepped", "columns sliced", "as_strided"])
def test_other_layouts_are_copied(make):
    base = np.arange(64.0).reshape(8, 8)[:4, :4].copy()
    x = make(base)
    f = jit(cache=False)(lambda v: np.exp(v) - v.sum())
    f(np.ascontiguousarray(x))
    np.testing.assert_allclose(f(x), np.exp(x) - x.sum())
    assert f.stats()["compiled_calls"] == 1
    assert f._variants[0].root.program.broadcast_programs == {}


def test_small_broadcast_inputs_are_copied():
    """Under ``COMPACT_BYTES`` a copy costs less than compiling a program for the pattern."""
    f = jit(cache=False)(lambda x: x + 1.0)
    f(np.ones((3, 4)))
    x = _broadcast(np.arange(4.0), (3, 4))
    np.testing.assert_array_equal(f(x), x + 1.0)
    assert f._variants[0].root.program.broadcast_programs == {}


def test_large_broadcast_input_is_not_copied():
    """A 64 MiB broadcast of one 32 KiB row: the compiled call allocates its (16 KiB)
    output, not the extent (the copy made the peak 64 MiB)."""
    rows, columns = 1 << 11, 1 << 12
    f = jit(cache=False)(lambda x, w: (x * w).sum(axis=1))
    w = rng.standard_normal(columns)
    f(np.ones((rows, columns)), w)
    x = np.broadcast_to(rng.standard_normal(columns), (rows, columns))
    f(x, w)  # builds the program for this broadcast pattern
    tracemalloc.start()
    try:
        result = f(x, w)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(result, (x * w).sum(axis=1), rtol=1e-10)
    assert peak < 4 << 20, f"peak {peak / 2**20:.1f} MiB during a call on a broadcast input"
    assert f.stats()["compiled_calls"] == 2
    (pattern,) = f._variants[0].root.program.broadcast_programs
    assert pattern == ((0, (0,)),)
