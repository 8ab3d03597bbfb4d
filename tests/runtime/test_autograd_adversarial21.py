"""Adversarial 21d: Tensors and autograd on PyTorch-style model code, and the autograd
pieces that ran eagerly inside jit (``nn.dropout`` with its generator, ``x.detach()``).

Each test is the minimal repro of a failure found while porting such code, or of a gap
that made a jit call run eagerly; references are computed without the code under test:
the same function run eagerly on the Tensor tape (or NumPy) and, for gradients, central
finite differences of the float64 NumPy function.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit, nn, tensor

EAGER_RTOL, EAGER_ATOL = 1e-11, 1e-13


def finite_differences(loss, value, eps=1e-6):
    """Central differences of the NumPy scalar function ``loss`` at ``value``."""
    value = np.array(value, dtype=np.float64)
    gradient = np.zeros_like(value)
    for index in np.ndindex(value.shape):
        saved = value[index]
        value[index] = saved + eps
        up = loss(value)
        value[index] = saved - eps
        down = loss(value)
        value[index] = saved
        gradient[index] = (up - down) / (2 * eps)
    return gradient


def counts(jitted):
    stats = jitted.stats()
    return stats["compiled_calls"] + stats["traced_calls"], stats["eager_reasons"]


# --- nn.dropout inside jit ---------------------------------------------------------------
def dropout_layer(x, w, rng, training=True):
    hidden = nn.dropout(np.tanh(x @ w), 0.3, rng, training=training)
    return (hidden * hidden).sum()


@pytest.mark.parametrize("training", [True, False])
def test_dropout_inside_jit_compiles_and_draws_the_eager_mask(training):
    # nn.dropout(x, p, rng) was refused ("a generator handed to library code"): every
    # call ran eagerly. Its generator.random is now a replayed draw.
    jitted = jit(dropout_layer, cache="memory", dynamic=True)
    compiled_rng, eager_rng = np.random.default_rng(7), np.random.default_rng(7)
    weights = np.random.default_rng(0).normal(size=(3, 4))
    for batch in (5, 8, 3, 8):
        x = np.random.default_rng(batch).normal(size=(batch, 3))
        w = tensor(weights, requires_grad=True)
        loss = jitted(x, w, compiled_rng, training)
        loss.backward()
        expected_w = tensor(weights, requires_grad=True)
        expected = dropout_layer(x, expected_w, eager_rng, training)
        expected.backward()
        np.testing.assert_allclose(loss.item(), expected.item(), rtol=EAGER_RTOL)
        np.testing.assert_allclose(w.grad.numpy(), expected_w.grad.numpy(), rtol=1e-10,
                                   atol=EAGER_ATOL)
        assert compiled_rng.bit_generator.state == eager_rng.bit_generator.state
    assert counts(jitted) == (4, {})


# --- x.detach() inside jit -----------------------------------------------------------------
def detached_baseline(w, x):
    scores = x @ w
    baseline = scores.mean().detach()  # a REINFORCE-style baseline: no gradient through it
    advantage = scores - baseline
    shrink = 0.1 * (w * w.detach()).sum()  # an argument's own detach (a method read)
    return (advantage * advantage).sum() + shrink, scores.detach(), advantage.sum().item()


def test_detach_inside_jit_compiles_with_eagers_gradient_and_result_types():
    # x.detach() ran the call eagerly; compiled, the detached result came back requiring
    # grad (np.asarray of it raised the lost-gradient error) and loss.item() a 0-d Tensor.
    jitted = jit(detached_baseline, cache="memory", dynamic=True)
    for batch in (4, 7, 4):
        x = np.random.default_rng(batch).normal(size=(batch, 3))
        start = np.array([0.5, -1.0, 2.0])
        w = tensor(start, requires_grad=True)
        loss, scores, total = jitted(w, x)
        loss.backward()
        expected_w = tensor(start, requires_grad=True)
        expected_loss, expected_scores, expected_total = detached_baseline(expected_w, x)
        expected_loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), expected_w.grad.numpy(), rtol=1e-10)
        assert (scores.requires_grad, scores.is_leaf) == (False, True)
        np.testing.assert_allclose(np.asarray(scores), expected_scores.numpy())
        assert type(total) is type(expected_total) is float
        np.testing.assert_allclose(total, expected_total, atol=1e-12)
    # the gradient treats the baseline and w.detach() as constants
    advantage = x @ start - (x @ start).mean()
    np.testing.assert_allclose(w.grad.numpy(), 2 * advantage @ x + 0.1 * start, rtol=1e-10)
    assert counts(jitted) == (3, {})


def test_a_write_through_a_detached_value_runs_eagerly_and_reaches_the_original():
    def shifted(w):
        hidden = w * 2.0
        frozen = hidden.detach()
        frozen += 1.0  # the same buffer as hidden, eagerly
        return (hidden * w).sum()

    jitted = jit(shifted, cache="memory")
    for _ in range(2):
        w = tensor(np.array([1.0, -2.0]), requires_grad=True)
        value = jitted(w)
        np.testing.assert_allclose(value.item(), (np.array([3.0, -3.0]) * [1.0, -2.0]).sum())


# --- np.arctan2, np.linalg.inv, np.linalg.det on Tensors -----------------------------------
MATRIX = np.array([[2.0, 0.5, -1.0], [0.3, 1.5, 0.2], [-0.4, 0.1, 1.2]])
WEIGHTS = np.random.default_rng(3).normal(size=(3, 3))
STACK = np.stack([MATRIX, MATRIX.T + np.eye(3)])

EAGER_OPS = {
    "arctan2-y": (lambda t: (np.arctan2(t, MATRIX.T + 0.5) * WEIGHTS).sum(), MATRIX),
    "arctan2-x": (lambda t: (np.arctan2(WEIGHTS, t) * WEIGHTS).sum(), MATRIX),
    "arctan2-broadcast": (lambda t: (np.arctan2(t[:1], MATRIX) * WEIGHTS).sum(), MATRIX),
    "inv": (lambda t: (np.linalg.inv(t) * WEIGHTS).sum(), MATRIX),
    "inv-stack": (lambda t: (np.linalg.inv(t) * WEIGHTS).sum(), STACK),
    "det": (lambda t: np.linalg.det(t) * 1.0, MATRIX),
    "det-stack": (lambda t: (np.linalg.det(t) * np.array([1.0, -2.0])).sum(), STACK),
    "det-singular": (lambda t: np.linalg.det(t) * 1.0, np.array([[1.0, 2.0, 3.0],
                                                                  [2.0, 4.0, 6.0],
                                                                  [1.0, 0.0, 1.0]])),
}


@pytest.mark.parametrize("name", list(EAGER_OPS))
def test_arctan2_inv_det_have_eager_gradients(name):
    # each raised "np.arctan2 is not supported by tracejit yet" on Tensors
    loss, value = EAGER_OPS[name]
    parameter = tensor(value, requires_grad=True)
    result = loss(parameter)
    result.backward()
    np.testing.assert_allclose(result.item(), loss(value), rtol=1e-14)
    np.testing.assert_allclose(parameter.grad.numpy(), finite_differences(loss, value),
                               rtol=1e-6, atol=1e-8)


def test_det_of_float32_keeps_float32_and_a_jit_call_runs_on_the_tape():
    def log_det_gram(w):  # not compiled (no lowering): the call runs eagerly, with grads
        return np.log(np.linalg.det(w @ w.T + 1.0))

    w32 = tensor(MATRIX.astype(np.float32), requires_grad=True)
    np.linalg.det(w32).backward()
    assert w32.grad.dtype == np.float32
    jitted = jit(log_det_gram, cache="memory")
    w = tensor(MATRIX, requires_grad=True)
    jitted(w).backward()
    np.testing.assert_allclose(w.grad.numpy(), finite_differences(log_det_gram, MATRIX),
                               rtol=1e-6)


# --- a view of a Tensor whose base is rebound ------------------------------------------------
def view_then_base_updates(x, base):
    front = base[0:2]
    front *= x  # tracked: base is rebound to a new buffer, front a view of it again
    base += 10  # tracked: base rebound again; front must see it (NumPy's view does)
    middle = base[1:3]
    base[3] = x[0] * 5
    middle *= 2
    return front, middle


def test_views_see_tracked_updates_of_their_base():
    # helper-139's note: front kept the values from before base += 10 (stale).
    plain = np.ones(4)
    front_np, middle_np = view_then_base_updates(np.array([2.0, 3.0]), plain)
    x = tensor(np.array([2.0, 3.0]), requires_grad=True)
    base = tensor(np.ones(4)) * 1.0
    front, middle = view_then_base_updates(x, base)
    np.testing.assert_array_equal(base.numpy(), plain)
    np.testing.assert_array_equal(front.numpy(), front_np)
    np.testing.assert_array_equal(middle.numpy(), middle_np)
    ((front * front).sum() + (base * base).sum()).backward()

    def loss(values):
        buffer = np.ones(4)
        first, _ = view_then_base_updates(values, buffer)
        return (first * first).sum() + (buffer * buffer).sum()

    np.testing.assert_allclose(x.grad.numpy(), finite_differences(loss, [2.0, 3.0]),
                               rtol=1e-7)
