"""Random draws inside compiled functions (``tracer/random_draws.py``): each call draws
what eager NumPy draws, in its order, and leaves every generator as eager leaves it - on
compiled calls, the first (traced) call, side exits, refusals and disk-cache warm starts.

Every test runs the jit function and the plain function from the same generator states
and compares results and states after each call.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit, tensor
from tracejit.runtime.serialize import InvalidEntry
from tracejit.runtime.serialize_draws import draws_from_json, draws_to_json
from tracejit.runtime.testing import compare_results
from tracejit.runtime.testing import legacy_random_state as legacy_state
from tracejit.runtime.testing import same_random_state as same_state


def assert_same_as_eager(function, compiled, calls, seed=0, rng=None):
    """``compiled(*args)`` and ``function(*args)`` for each args of ``calls``, from the same
    legacy seed (and ``rng``'s state): equal results, equal states after every call."""
    for number, args in enumerate(calls):
        np.random.seed(seed + number)
        start = rng.bit_generator.state if rng is not None else None
        got = compiled(*args)
        after = legacy_state(), rng.bit_generator.state if rng is not None else None
        np.random.seed(seed + number)
        if rng is not None:
            rng.bit_generator.state = start
        want = function(*args)
        problem = compare_results(got, want)  # (the draws are equal: the math within ulps)
        assert problem is None, f"call {number}: {problem}"
        assert same_state(after[0], legacy_state()), f"np.random's state after call {number}"
        if rng is not None:
            assert after[1] == rng.bit_generator.state, f"the generator after call {number}"


DATA = np.random.default_rng(7)
X = DATA.standard_normal((4, 6))
W1, W2 = DATA.standard_normal((5, 4)), DATA.standard_normal((3, 5))


# --- deeplearning.ai's forward_propagation_with_dropout ----------------------------------
def forward_with_dropout(X, W1, W2, keep_prob=0.7):
    np.random.seed(1)
    A1 = np.maximum(0, W1 @ X)
    D1 = np.random.rand(A1.shape[0], A1.shape[1])
    D1 = (D1 < keep_prob).astype(int)
    A1 = A1 * D1 / keep_prob
    return W2 @ A1


def test_dropout_forward_with_a_seed_inside_compiles_and_draws_eagers_mask():
    compiled = jit(forward_with_dropout, cache=False, dynamic=True)
    widths = [6, 6, 7, 5, 8]  # one variant (bucket [5, 8]): the mask follows the batch
    assert_same_as_eager(forward_with_dropout, compiled,
                         [(DATA.standard_normal((4, n)), W1, W2) for n in widths])
    stats = compiled.stats()
    assert stats["compiled_calls"] >= len(widths) - 1 and stats["eager_calls"] == {}, stats
    assert stats["variants"] == 1


def test_dropout_without_a_seed_draws_on_from_the_callers_stream():
    def layer(x, p=0.5):
        mask = np.random.binomial(1, p, size=x.shape) / p
        noise = np.random.randn(*x.shape) * 0.1  # randn keeps a spare gauss across calls
        return x * mask + noise + np.random.uniform(-1, 1, x.shape[1])

    compiled = jit(layer, cache=False)
    assert_same_as_eager(layer, compiled, [(X,)] * 5)
    assert compiled.stats()["compiled_calls"] >= 4


# --- generators ----------------------------------------------------------------------------
RNG = np.random.default_rng(3)


def global_noise(x):
    return x + RNG.standard_normal(x.shape) + RNG.random(x.shape, dtype=np.float32)


class Dropout:
    def __init__(self, p):
        self.p, self.rng = p, np.random.default_rng(11)

    def __call__(self, x):
        return x * (self.rng.random(x.shape) >= self.p) / (1 - self.p)


def test_generators_passed_in_global_and_held_by_a_layer():
    def noise(x, rng):
        return x + rng.normal(0.0, 0.5, size=x.shape) + rng.integers(0, 3, size=x.shape[1])

    rng = np.random.default_rng(5)
    compiled = jit(noise, cache=False)
    assert_same_as_eager(noise, compiled, [(X, rng)] * 4, rng=rng)
    assert compiled.stats()["compiled_calls"] >= 3

    compiled = jit(global_noise, cache=False)
    assert_same_as_eager(global_noise, compiled, [(X,)] * 3, rng=RNG)
    assert compiled.stats()["compiled_calls"] >= 2

    layer = Dropout(0.25)
    compiled = jit(layer, cache=False)
    assert_same_as_eager(layer, compiled, [(X,)] * 3, rng=layer.rng)
    layer.rng = np.random.default_rng(12)  # found again where the layer keeps it
    assert_same_as_eager(layer, compiled, [(X,)] * 2, rng=layer.rng)
    assert compiled.stats()["compiled_calls"] >= 3


def test_a_generator_made_inside_the_function():
    def jitter(x):
        rng = np.random.default_rng(0)
        return x + rng.standard_normal(x.shape)

    compiled = jit(jitter, cache=False)
    assert_same_as_eager(jitter, compiled, [(X,)] * 3)
    assert compiled.stats()["compiled_calls"] >= 2


# --- control flow -------------------------------------------------------------------------
def test_a_draw_in_a_branch_and_a_side_exit_between_draws():
    def noisy(x):
        first = np.random.rand(*x.shape)
        if x.sum() > 0:  # a guard between the draws: its exit puts the stream back
            x = x + np.random.randn(*x.shape)
        return x * first + np.random.rand(x.shape[1])

    compiled = jit(noisy, cache=False)
    calls = [(X + 5,), (X - 5,), (X + 5,), (X - 5,), (X - 5,), (X + 5,), (X - 5,)]
    assert_same_as_eager(noisy, compiled, calls)
    stats = compiled.stats()
    assert stats["side_exits"], stats  # the other branch ran, eagerly or traced


def test_a_python_decision_on_a_drawn_value():
    def policy(aprob):  # Karpathy's pong: the action is sampled
        action = 2 if np.random.uniform() < aprob else 3
        return np.array([action, 1.0 - aprob]) * aprob

    compiled = jit(policy, cache=False)
    assert_same_as_eager(policy, compiled, [(np.float64(0.5),)] * 12)  # both actions
    stats = compiled.stats()  # the decision is a guard: both outcomes compile (same draws)
    assert stats["paths"] == 2 and stats["compiled_calls"] >= 8, stats


def test_a_draw_per_trip_of_a_loop_over_time_steps():
    def rnn(xs, W, keep=0.8):
        h = np.zeros(W.shape[0])
        for t in range(xs.shape[0]):
            h = np.tanh(W @ h + xs[t]) * (np.random.rand(W.shape[0]) < keep)
        return h

    W = DATA.standard_normal((4, 4)) * 0.5
    compiled = jit(rnn, cache=False, dynamic=True)  # a loop it would capture, but for the draw
    assert_same_as_eager(rnn, compiled, [(DATA.standard_normal((5, 4)), W)] * 3)
    assert compiled.stats()["compiled_calls"] >= 2
    assert any("random draw" in note for note in compiled._loop_notes), compiled._loop_notes


def test_a_refused_draw_leaves_the_stream_to_the_eager_run():
    def centred(x):
        first = np.random.rand(3)  # drawn by the trace before the refusal: put back
        return np.random.normal(x.mean(axis=0), 1.0) + first.sum()

    compiled = jit(centred, cache=False)
    assert_same_as_eager(centred, compiled, [(X,)] * 2)
    reasons = " ".join(compiled.stats()["eager_reasons"].values())
    assert "test_random_draws.py" in reasons and "with a parameter computed" in reasons, reasons


def test_a_first_call_run_by_its_program_draws_once():
    def rows(x):  # check=True: the eager rerun must draw what the program was given
        return x[np.random.permutation(x.shape[0])] * np.random.rand(x.shape[1])

    compiled = jit(rows, cache=False, check=True)
    assert_same_as_eager(rows, compiled, [(X,)] * 3)
    assert compiled.stats()["compiled_calls"] >= 2


# --- disk cache ---------------------------------------------------------------------------
def test_draws_round_trip_through_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    first = jit(forward_with_dropout)
    assert_same_as_eager(forward_with_dropout, first, [(X, W1, W2)] * 2)
    second = jit(forward_with_dropout)  # a warm start: the variant and its draws from disk
    assert_same_as_eager(forward_with_dropout, second, [(X, W1, W2)] * 2)
    assert second.stats()["disk_hits"] == 1 and second.stats()["compiles"] == 0

    spec = first._variants[0].spec
    stored = draws_to_json(spec.draws, forward_with_dropout)
    assert draws_from_json(stored, forward_with_dropout) == spec.draws
    for forged in ({"name": "shuffle"}, {"name": "__reduce__"}, {"kind": "make"},
                   {"rng_type": "BitGenerator"}, {"rng": ["global"]}):
        ops = [dict(op) for op in stored]
        ops[-1].update(forged)
        with pytest.raises(InvalidEntry):
            draws_from_json(ops, forward_with_dropout)


# --- gradients ----------------------------------------------------------------------------
def test_gradients_through_a_dropout_layer():
    def loss(W, x):
        np.random.seed(4)
        hidden = np.maximum(W @ x, 0) * (np.random.rand(W.shape[0], x.shape[1]) < 0.6) / 0.6
        return (hidden ** 2).sum()

    compiled = jit(loss, cache=False)
    for _ in range(3):
        W = tensor(W1.copy(), requires_grad=True)
        value = compiled(W, X)
        value.backward()
        eager_W = tensor(W1.copy(), requires_grad=True)
        expected = loss(eager_W, X)
        expected.backward()
        assert compare_results(value, expected) is None
        assert np.allclose(W.grad, eager_W.grad, rtol=1e-12)
    assert compiled.stats()["compiled_calls"] >= 1
    eps, point = 1e-6, W1.copy()
    numeric = np.zeros_like(point)
    for position in np.ndindex(point.shape):
        plus, minus = point.copy(), point.copy()
        plus[position] += eps
        minus[position] -= eps
        numeric[position] = (loss(plus, X) - loss(minus, X)) / (2 * eps)
    assert np.allclose(W.grad, numeric, atol=1e-4)


@pytest.mark.parametrize("make", [
    lambda: np.random.RandomState(2),
    lambda: np.random.Generator(np.random.MT19937(2)),
    lambda: np.random.default_rng(2),
], ids=["RandomState", "Generator(MT19937)", "Generator(PCG64)"])
def test_a_kept_state_puts_back_every_draw(make):
    from tracejit.tracer.generator_states import keep, put_back

    rng = make()
    rng.standard_normal(3)  # RandomState: an odd count leaves a normal cached
    kept = keep(rng)
    first = (rng.standard_normal(5), rng.random(4))
    put_back(kept)
    again = (rng.standard_normal(5), rng.random(4))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
