"""Adversarial tests of the state a jit call leaves behind: numbers an object keeps and
rebinds (``self.t += 1``: tracer/attribute_writes.NumberState, read as run-time inputs),
attribute writes (``self.cache = x``), in-place updates of outside arrays (``self.W -=
lr * dW``), the safety net for changes no recorded write explains, ``jit(check=True)``,
Tensor layers and views kept across writes.

Every test compares a jit object with an eager twin after every call (traced, compiled,
other sizes): the result and the whole state of the objects. A strict xfail is a bug:
its reason says what is wrong (wrong results/state and crashes first, then needless
eager fallbacks on common idioms).
"""


import numpy as np
import pytest
from state_twins import difference, outcome, run_twins  # noqa: F401

import tracejit as tj


def eager_calls(f):
    return sum(f.stats()["eager_calls"].values())


# --- what works (regression guards) ----------------------------------------------------


class RangeOfCounter:
    """A rebound counter used as a range bound, a slice stop, a shape and an index."""

    def __init__(self):
        self.t = 1

    def step(self, x):
        self.t += 1
        for _ in range(self.t):
            x = x * 0.5 + 1
        return x[:self.t].sum() + np.zeros(self.t).sum() + x[self.t]


def test_a_rebound_counter_as_range_bound_slice_stop_shape_and_index():
    run_twins(RangeOfCounter, "step", [(np.arange(10.0),)] * 4)


class Toggle:
    def __init__(self):
        self.training = True

    def step(self, x):
        y = x * 2 if self.training else x
        self.training = not self.training  # a bool: a setting, never a run-time input
        return y


def test_a_bool_attribute_flipped_every_call():
    f = run_twins(Toggle, "step", [(np.arange(3.0),)] * 5)
    assert f.stats()["compiled_calls"] >= 2, f.stats()


class BestSoFar:
    def __init__(self, cast):
        self.best, self.cast, self.w = float("inf"), cast, np.ones(3)

    def step(self, x):
        loss = ((x - self.w) ** 2).sum()
        if loss < self.best:  # a guard on a traced value against a rebound number
            self.best = self.cast(loss)
        return loss


@pytest.mark.parametrize("cast", [lambda v: v, float], ids=["loss", "float(loss)"])
def test_a_best_loss_rebound_under_a_data_dependent_if(cast):
    run_twins(lambda: BestSoFar(cast), "step",
              [(np.full(3, v),) for v in (3.0, 2.0, 2.5, 1.0, 1.5, 0.5)])


class Schedule:
    def __init__(self):
        self.t, self.lr = 0, 0.1

    def scale(self):
        self.t += 1
        return self.lr / (1 + self.t)


class Model:
    def __init__(self, schedule, seed):
        self.schedule = schedule
        self.W = np.random.default_rng(seed).standard_normal(3)

    def step(self, g):
        self.W -= self.schedule.scale() * g
        return self.W.sum() + self.schedule.t


def test_one_schedule_shared_by_two_jitted_models_and_reset_by_the_user():
    def build():
        schedule = Schedule()
        return schedule, Model(schedule, 0), Model(schedule, 1)

    ours, theirs = build(), build()
    fa, fb = tj.jit(ours[1].step, cache="memory"), tj.jit(ours[2].step, cache="memory")
    for index in range(9):
        if index == 6:  # the user rewinds the counter between calls
            ours[0].t = theirs[0].t = 0
        g = np.full(3, 0.1 * index)
        pick = 1 if index % 3 else 2
        got = (fa if pick == 1 else fb)(g.copy())
        want = theirs[pick].step(g.copy())
        found = difference(got, want, "result") or difference(ours, theirs, "state")
        assert found is None, f"call {index}: {found}"
    assert fa.stats()["compiled_calls"] >= 3, fa.stats()


class ReadWrite:
    def __init__(self):
        self.t = 0

    def read(self, x):
        return x * self.t

    def write(self, x):
        self.t += 1
        return x


def test_a_number_read_by_one_jitted_method_and_rebound_by_another():
    ours, theirs = ReadWrite(), ReadWrite()
    read, write = tj.jit(ours.read, cache="memory"), tj.jit(ours.write, cache="memory")
    for index in range(5):
        x = np.ones(2)
        found = difference(read(x), theirs.read(x), "result")
        write(x)
        theirs.write(x)
        found = found or difference(ours, theirs, "state")
        assert found is None, f"call {index}: {found}"


class CountingNet:
    def __init__(self):
        self.W = np.linspace(-1, 1, 6).reshape(3, 2)
        self.t, self.cache = 0, None

    def step(self, x):
        self.t += 1
        h = x @ self.W
        self.cache = (x, h)
        self.W -= 0.01 * self.t * (x.T @ h)
        return (h ** 2).sum()


def test_check_mode_with_a_counter_a_cache_and_an_in_place_weight():
    run_twins(CountingNet, "step", [(np.ones((2, 3)) * i,) for i in range(4)], check=True)


class Keep:
    def __init__(self):
        self.W = np.eye(3)

    def forward(self, x):
        self.inputs, self.column, self.transposed = x, x[:, 0], x.T
        self.out = x @ self.W
        return self.out


def test_attributes_keep_the_callers_array_and_views_of_it():
    keep = Keep()
    f = tj.jit(keep.forward, cache="memory")
    for index in range(3):
        x = np.ones((2, 3)) * index
        result = f(x)
        assert keep.inputs is x and result is keep.out, index
        assert np.shares_memory(keep.column, x) and np.shares_memory(keep.transposed, x)


# --- bugs: wrong state and crashes -------------------------------------------------


class TensorLayer:
    def __init__(self):
        self.W = tj.tensor(np.linspace(-1, 1, 6).reshape(3, 2), requires_grad=True)

    def forward(self, x):
        self.out = x @ self.W  # kept for a loss computed later, outside the function
        return self.out.sum()


def test_a_tensor_kept_in_an_attribute_keeps_its_graph():
    ours, theirs = TensorLayer(), TensorLayer()
    f = tj.jit(ours.forward, cache="memory")
    for index in range(2):
        x = tj.tensor(np.ones((2, 3)) * (index + 1))
        f(x)
        theirs.forward(x)
        assert ours.out.requires_grad == theirs.out.requires_grad, index
        (ours.out ** 2).sum().backward()
        (theirs.out ** 2).sum().backward()
        np.testing.assert_allclose(ours.W.grad.numpy(), theirs.W.grad.numpy())


class BigCounter:
    def __init__(self):
        self.t = 2 ** 62

    def step(self, x):
        self.t += 2 ** 61  # Python ints do not overflow
        return x * 2


def test_a_python_int_counter_past_int64():
    run_twins(BigCounter, "step", [(np.ones(2),)] * 3)


# --- bugs: needless eager fallbacks on common idioms ---------------------------------


class RunningLoss:
    def __init__(self):
        self.total, self.n = 0.0, 0

    def step(self, x):
        loss = np.mean(x ** 2)
        self.total += loss  # after one eager call self.total is an np.float64
        self.n += 1
        return self.total / self.n


def test_a_running_loss_total_compiles():
    f = run_twins(RunningLoss, "step", [(np.full(3, v),) for v in (3.0, 2.0, 2.5, 1.0)])
    assert eager_calls(f) == 0, f.stats()


def test_a_running_total_of_float32_losses_compiles():
    f = run_twins(RunningLoss, "step",
                  [(np.full(3, v, np.float32),) for v in (3.0, 2.0, 2.5, 1.0)], tol=1e-6)
    assert "internal error" not in f.stats()["eager_calls"], f.stats()
