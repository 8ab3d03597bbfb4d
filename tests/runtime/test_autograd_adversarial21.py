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
from real_model_checks import finite_differences

from tracejit import TensorError, jit, nn, no_grad, tensor

EAGER_RTOL, EAGER_ATOL = 1e-11, 1e-13


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
    for batch in (5, 8, 7):  # one bucket
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
    assert counts(jitted) == (3, {})


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


# --- PyTorch-style modules: parameters found through the model object --------------------
class Module:
    """The part of torch.nn.Module such ports write: parameters() walks the attributes."""

    def parameters(self):
        found = []
        for value in vars(self).values():
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, Module):
                    found.extend(item.parameters())
                elif getattr(item, "requires_grad", False) and not any(
                        item is seen for seen in found):
                    found.append(item)
        return found

    def zero_grad(self):
        for parameter in self.parameters():
            parameter.grad = None

    def __call__(self, *args):
        return self.forward(*args)


class Linear(Module):
    def __init__(self, fan_in, fan_out, rng, dtype=np.float64):
        scale = 1.0 / np.sqrt(fan_in)
        self.weight = tensor(rng.normal(size=(fan_in, fan_out)) * scale, dtype=dtype,
                             requires_grad=True)
        self.bias = tensor(np.zeros(fan_out), dtype=dtype, requires_grad=True)

    def forward(self, x):
        return x @ self.weight + self.bias


def checks_its_type(model, x):
    hidden = model(x)
    # eagerly a Tensor (the weights are): the else branch
    return (hidden * 2).sum() if isinstance(hidden, np.ndarray) else (hidden * 3).sum()


def test_type_check_on_values_from_a_models_tensors_is_eagers():
    # Wrong result: Tensors reached through an argument object (model.weight) did not make
    # the trace's values "Tensors eagerly", so isinstance(hidden, np.ndarray) was answered
    # True and the compiled calls took the other branch (2x where eager gives 3x).
    model = Linear(3, 2, np.random.default_rng(0))
    jitted = jit(checks_its_type, cache="memory")
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    for _ in range(2):
        np.testing.assert_allclose(jitted(model, x).item(), checks_its_type(model, x).item(),
                                   rtol=EAGER_RTOL)


def test_evaluation_under_no_grad_returns_tensors_as_eager():
    # Wrong type: a model's Tensors reached through the argument object, called under
    # no_grad (or frozen), came back as an ndarray / np.float64 (eager: a Tensor without
    # grad), from the traced call and the compiled ones alike.
    model = Linear(3, 2, np.random.default_rng(1))
    jitted = jit(lambda model, x: nn.mse_loss(model(x), np.zeros((len(x), 2))),
                 cache="memory")
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    for _ in range(3):
        with no_grad():
            value = jitted(model, x)
            expected = nn.mse_loss(model(x), np.zeros((2, 2)))
        assert type(value) is type(expected) and not value.requires_grad
        np.testing.assert_allclose(value.item(), expected.item(), rtol=EAGER_RTOL)


class TiedLanguageModel(Module):
    """An embedding used twice (lookup and output projection: weight tying), a hidden
    layer, and a frozen output bias (requires_grad False)."""

    def __init__(self, vocabulary, width, dtype):
        rng = np.random.default_rng(5)
        self.embedding = tensor(rng.normal(size=(vocabulary, width)) * 0.5, dtype=dtype,
                                requires_grad=True)
        self.hidden = Linear(width, width, rng, dtype)
        self.output_bias = tensor(rng.normal(size=vocabulary) * 0.1, dtype=dtype)

    def forward(self, ids):
        hidden = np.tanh(self.hidden(self.embedding[ids]))
        return hidden @ self.embedding.T + self.output_bias


class MomentumSGD:
    """Momentum buffers keyed by parameter, the update under no_grad (p -= lr * buffer)."""

    def __init__(self, parameters, lr, momentum=0.9):
        self.parameters, self.lr, self.momentum = list(parameters), lr, momentum
        self.buffers = {}

    def step(self):
        with no_grad():
            for parameter in self.parameters:
                buffer = self.buffers.get(parameter)
                if buffer is None:
                    buffer = self.buffers[parameter] = parameter.grad.numpy().copy()
                else:
                    buffer *= self.momentum
                    buffer += parameter.grad.numpy()
                parameter -= self.lr * buffer


def clip_by_global_norm(parameters, max_norm):
    total = np.sqrt(sum(float((parameter.grad.numpy() ** 2).sum())
                        for parameter in parameters))
    if total > max_norm:
        for parameter in parameters:
            parameter.grad.numpy()[...] *= max_norm / total


def language_model_loss(model, ids, targets, reduction):
    return nn.cross_entropy(model(ids), targets, reduction=reduction)


def train(loss, dtype, reduction, batches):
    """Micro-batch gradient accumulation (two backward calls), clipping, momentum SGD; the
    state after every step."""
    model = TiedLanguageModel(11, 4, dtype)
    optimizer = MomentumSGD(model.parameters(), lr=0.2)
    history = []
    for size in batches:
        rng = np.random.default_rng(size)
        ids, targets = rng.integers(0, 11, size), rng.integers(0, 11, size)
        model.zero_grad()
        half = size // 2
        first = loss(model, ids[:half], targets[:half], reduction)
        first.backward(retain_graph=True)
        first.backward()  # retain_graph: the same graph twice
        loss(model, ids[half:], targets[half:], reduction).backward()
        clip_by_global_norm(model.parameters(), 1.0)
        grads = [parameter.grad.numpy().copy() for parameter in model.parameters()]
        optimizer.step()
        history.append((first.item(), grads, [p.numpy().copy() for p in model.parameters()],
                        model.output_bias.grad))
    return history


@pytest.mark.parametrize(("dtype", "reduction"), [(np.float64, "mean"), (np.float32, "sum")])
def test_training_loop_with_tied_frozen_accumulated_clipped_parameters(dtype, reduction):
    jitted = jit(language_model_loss, cache="memory", dynamic=True)
    batches = (6, 7, 6)  # micro-batches of 3 and 4: one bucket
    tolerance = 1e-10 if dtype == np.float64 else 2e-5
    expected = train(language_model_loss, dtype, reduction, batches)
    for got, want in zip(train(jitted, dtype, reduction, batches), expected):
        np.testing.assert_allclose(got[0], want[0], rtol=tolerance)
        for got_values, want_values in zip(got[1] + got[2], want[1] + want[2]):
            assert got_values.dtype == want_values.dtype == dtype
            np.testing.assert_allclose(got_values, want_values, rtol=tolerance,
                                       atol=tolerance)
        assert got[3] is want[3] is None  # the frozen bias gets no gradient
    assert counts(jitted) == (2 * len(batches), {})


class CentredLayer(Module):
    """Batch centring with a running mean kept as a Tensor buffer (PyTorch's BatchNorm
    keeps its running statistics so), updated from the detached batch mean."""

    def __init__(self):
        self.linear = Linear(3, 4, np.random.default_rng(2))
        self.running_mean = tensor(np.zeros(4))

    def forward(self, x):
        hidden = self.linear(x)
        mean = hidden.mean(axis=0)
        self.running_mean = 0.9 * self.running_mean + 0.1 * mean.detach()
        self.last_hidden = hidden.detach()
        return ((hidden - mean) ** 2).sum()


def test_running_statistics_written_from_detached_values_compile():
    # self.running_mean = 0.9 * self.running_mean + 0.1 * mean.detach() was refused as "an
    # attribute set to a value computed with gradients": every training call ran eagerly.
    # Eagerly it is a Tensor without history; so is what the compiled call stores.
    models = CentredLayer(), CentredLayer()
    jitted = jit(lambda model, x: model(x), cache="memory", dynamic=True)
    for size in (4, 5, 4):
        x = np.random.default_rng(size).normal(size=(size, 3))
        for model, function in zip(models, (jitted, lambda model, x: model(x))):
            model.linear.weight.grad = None
            function(model, x).backward()
        compiled, eager = models
        for name in ("running_mean", "last_hidden"):
            got, want = getattr(compiled, name), getattr(eager, name)
            assert (type(got), got.requires_grad) == (type(want), want.requires_grad)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=EAGER_RTOL)
        np.testing.assert_allclose(compiled.linear.weight.grad.numpy(),
                                   eager.linear.weight.grad.numpy(), rtol=1e-10)
    assert counts(jitted) == (3, {})


class FrozenHead(Module):
    def __init__(self):
        self.body = Linear(3, 3, np.random.default_rng(3))
        self.head = Linear(3, 2, np.random.default_rng(4))
        for parameter in self.head.parameters():
            parameter.requires_grad_(False)

    def forward(self, x):
        return (np.tanh(self.head(np.tanh(self.body(x)))) ** 2).sum()


@pytest.mark.parametrize("written", ["body", "head"])
def test_a_parameter_written_in_place_before_backward_raises_as_eager(written):
    # Wrong gradient: a model's parameter (trained, or frozen) updated in place between
    # the forward and backward (an optimizer step too early) was not checked by the
    # compiled call's node: the backward read the new values silently; eager raises.
    jitted = jit(lambda model, x: model(x), cache="memory")
    for function in (jitted, jitted, lambda model, x: model(x)):
        model = FrozenHead()
        loss = function(model, np.ones((2, 3)))
        with no_grad():
            getattr(model, written).weight[...] -= 0.5
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def converts_to_numpy(w, x):
    hidden = x @ w
    return np.asarray(hidden.detach()), (hidden * hidden).sum()


def test_np_asarray_of_a_tensor_inside_jit_is_eagers_ndarray_or_error():
    # np.asarray of what eagerly is a Tensor gives an ndarray (or, requiring grad, the
    # lost-gradient error); the trace kept it as a Tensor: a compiled np.asarray(h) of a
    # value requiring grad returned a Tensor where eager raises, and the detached one came
    # back a Tensor where eager gives an ndarray.
    jitted = jit(converts_to_numpy, cache="memory")
    grad_kept = jit(lambda w, x: np.asarray(x @ w).sum(), cache="memory")
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    for _ in range(2):
        w = tensor(np.eye(3), requires_grad=True)
        plain, loss = jitted(w, x)
        expected_plain, _ = converts_to_numpy(w, x)
        assert type(plain) is type(expected_plain) is np.ndarray
        np.testing.assert_array_equal(plain, expected_plain)
        with pytest.raises(TensorError):
            grad_kept(w, x)


class LoggingClassifier(Module):
    """Keeps its loss history (Python floats) and detached logits, as training code logs."""

    def __init__(self):
        self.linear = Linear(3, 2, np.random.default_rng(6))
        self.losses, self.logits = [], []

    def forward(self, x, labels):
        logits = self.linear(x)
        loss = nn.cross_entropy(logits, labels)
        self.losses.append(loss.item())
        self.logits.append(logits.detach())
        return loss


def test_logging_item_and_detached_values_into_lists_compiles():
    # self.losses.append(loss.item()) was refused as "a value computed with gradients
    # appended": every training call ran eagerly. A float and a detached Tensor have no
    # graph to lose; the compiled calls append what eager appends.
    models = LoggingClassifier(), LoggingClassifier()
    jitted = jit(lambda model, x, labels: model(x, labels), cache="memory", dynamic=True)
    for size in (4, 5, 4):
        rng = np.random.default_rng(size)
        x, labels = rng.normal(size=(size, 3)), rng.integers(0, 2, size)
        for model, function in zip(models, (jitted, lambda model, x, labels: model(x, labels))):
            function(model, x, labels).backward()
    compiled, eager = models
    assert [type(loss) for loss in compiled.losses] == [float] * 3
    np.testing.assert_allclose(compiled.losses, eager.losses, rtol=1e-14)
    for got, want in zip(compiled.logits, eager.logits):
        assert (type(got), got.requires_grad) == (type(want), False)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-14)
    np.testing.assert_allclose(compiled.linear.weight.grad.numpy(),
                               eager.linear.weight.grad.numpy(), rtol=1e-12)
    assert counts(jitted) == (3, {})
