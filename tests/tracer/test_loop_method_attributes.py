"""Loops whose body calls a method that writes attributes of an object from outside
(``self.h = ...; self.steps += 1`` in ``step``), eager vs ``jit``.

A trip traced for capture cannot keep such a write, so the loop unrolls (one compile per
length, as docs/sharp_bits.md says); the peeled first trip and the unrolled trips write
the attributes as this trace's writes. No call may run eagerly as an internal error, the
object's attributes after every call must equal eager's (an int counter stays an int),
over lengths 0, 1, 2 and primes, float32/float64, NaN in the data.
"""

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors


class Cell:
    def __init__(self, W, U):
        self.W, self.U = W, U
        self.h = np.zeros(U.shape[0], dtype=U.dtype)
        self.steps = 0
        self.total = 0.0

    def step(self, x):
        self.h = np.tanh(x @ self.W + self.h @ self.U)
        self.steps += 1
        self.total += 0.5
        return self.h

    def run(self, xs):
        outs = np.zeros((xs.shape[0], self.U.shape[0]), dtype=xs.dtype)
        for t in range(xs.shape[0]):
            outs[t] = self.step(xs[t])
        return outs

    def run_inline(self, xs):
        for t in range(xs.shape[0]):
            self.steps += 1  # held in a local for the loop (loop_attributes), then += on it
            self.total += xs[t].sum()
        return self.total

    def twice(self, xs):
        self.step(xs[0])
        self.step(xs[-1])  # the second += finds the number the first one wrote
        return self.h


class CachingCell(Cell):
    def step(self, x):
        self.cache = x * 2
        out = super().step(self.cache)
        del self.cache
        return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cell_class", [Cell, CachingCell])
def test_a_loop_over_a_method_writing_attributes_unrolls_and_matches_eager(cell_class, dtype):
    rng = np.random.default_rng(63)
    W = rng.standard_normal((2, 3)).astype(dtype)
    U = (rng.standard_normal((3, 3)) * 0.5).astype(dtype)
    eager_cell, jit_cell = cell_class(W, U), cell_class(W, U)
    run = jitted(jit_cell.run)
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else {}
    for length in (4, 4, 7, 0, 1, 2, 13, 7):
        xs = rng.standard_normal((length, 2)).astype(dtype)
        if length == 13:
            xs[5, 1] = np.nan  # the state stays NaN from there on, in both
        assert_same(run(xs), eager_cell.run(xs), **tolerance)
        assert_same(vars(jit_cell), vars(eager_cell), where="cell", **tolerance)
    no_internal_errors(run)
    stats = run.stats()
    assert not stats["eager_calls"], run.explain()
    assert stats["compiled_calls"] >= 2, run.explain()


def test_a_counter_a_method_increments_twice_stays_an_int():
    W, U = np.eye(2), np.eye(2) * 0.5
    eager_cell, jit_cell = Cell(W, U), Cell(W, U)
    f = jitted(jit_cell.twice)
    for _ in range(3):
        xs = np.arange(4.0).reshape(2, 2)
        assert_same(f(xs), eager_cell.twice(xs))
        assert_same(vars(jit_cell), vars(eager_cell), where="cell")
    assert not f.stats()["eager_calls"], f.explain()


def test_counters_incremented_in_the_loop_body_itself_stay_python_numbers():
    rng = np.random.default_rng(64)
    W, U = np.eye(2), np.eye(2) * 0.5
    eager_cell, jit_cell = Cell(W, U), Cell(W, U)
    f = jitted(jit_cell.run_inline)
    for length in (3, 3, 5, 0, 1, 7):
        xs = rng.standard_normal((length, 2))
        assert_same(f(xs), eager_cell.run_inline(xs))
        assert_same(vars(jit_cell), vars(eager_cell), where="cell")
    no_internal_errors(f)
    assert not f.stats()["eager_calls"], f.explain()
