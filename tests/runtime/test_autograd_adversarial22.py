"""Adversarial 22d: what a PyTorch user tries first on tracejit Tensors, eagerly and inside
jit, and optimizer steps inside jit.

Each test is the minimal repro of a failure found while trying PyTorch idioms; references
are computed without the code under test: the same function run eagerly on the Tensor
tape, PyTorch's documented results written out, and central finite differences of the
float64 NumPy function.
"""

from __future__ import annotations

import numpy as np
import pytest
from real_model_checks import finite_differences

from tracejit import enable_grad, is_grad_enabled, jit, no_grad, optim, tensor


def eager_reasons(jitted):
    return " ".join(jitted.stats()["eager_reasons"].values())


# --- optimizer steps inside jit --------------------------------------------------------------
def take_step(optimizer):
    optimizer.step()


def clear_grads(optimizer):
    optimizer.zero_grad()


OPTIMIZERS = {
    "sgd_momentum": lambda params: optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: optim.Adam(params, lr=0.1),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_optimizer_step_inside_jit_updates_at_every_call(make, dtype):
    # optim's step() is tracejit's own code, which the front end does not rewrite: traced,
    # it updated the real parameters once, during the trace, and the compiled program held
    # none of it (SGD: every later call skipped the step; Adam: the trace's update and the
    # eager rerun's both landed on the moments). It now runs eagerly, saying so.
    start = np.array([1.0, -2.0, 0.5], dtype)
    runs = {}
    for name, step in (("eager", take_step), ("jitted", jit(take_step, cache="memory"))):
        param = tensor(start, requires_grad=True)
        optimizer = make([param])
        history = []
        for scale in (1.0, 3.0, -2.0):
            param.grad = None
            (scale * param * param).sum().backward()
            step(optimizer)
            history.append((param.numpy().copy(), param.grad.numpy().copy(),
                            param._version))
        runs[name] = history, optimizer
    for (want, want_grad, want_version), (got, got_grad, got_version) in zip(
            runs["eager"][0], runs["jitted"][0]):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_grad, want_grad)
        assert got_version == want_version
    eager_optimizer, jitted_optimizer = runs["eager"][1], runs["jitted"][1]
    for state in ("velocity", "first", "second", "steps"):
        if hasattr(eager_optimizer, state):
            np.testing.assert_array_equal(np.asarray(getattr(jitted_optimizer, state)),
                                          np.asarray(getattr(eager_optimizer, state)))
    assert "optimizer.step()" in eager_reasons(step)


def test_zero_grad_inside_jit_clears_at_every_call():
    # optimizer.zero_grad() traced cleared the .grad once; compiled calls did nothing.
    param = tensor([1.0, 2.0], requires_grad=True)
    optimizer = optim.SGD([param], lr=0.1)
    clear = jit(clear_grads, cache="memory")
    for scale in (1.0, 2.0, 3.0):
        (scale * param).sum().backward()
        clear(optimizer)
        assert param.grad is None
    assert "optimizer.zero_grad()" in eager_reasons(clear)


# --- in-place updates through views made by reshape, .T, swapaxes, flip -------------------
VIEWS = {
    "reshape": lambda y: y.reshape(2, 3),
    "transpose": lambda y: y.reshape(2, 3).T,
    "transpose_then_slice": lambda y: y.reshape(2, 3).T[1:],
    "flip": lambda y: np.flip(y),
    "new_axis": lambda y: y[None],
}


def scaled_through_view(view, w, scale):
    """``y = w * 1``; the view of ``y`` scaled and shifted in place; ``sum(y * y)``."""
    y = w * 1.0
    part = view(y)
    part *= scale
    part += 1.0
    return (y * y).sum(), y


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_inplace_update_through_a_view_writes_into_its_base(view):
    # Only y[1:] wrote through: y.reshape(2, 3) and y.T are NumPy views too (an untracked
    # update wrote their shared buffer), but a tracked one rebound the view alone, so y,
    # the loss and both gradients were those of no update at all (PyTorch's and NumPy's
    # y change). y[None] raised "backward through the graph a second time" at the first
    # backward: IndexNode took its index None for "freed".
    start = np.arange(6.0) - 2.0
    scale_start = np.linspace(0.5, 1.5, view(start).size).reshape(view(start).shape)
    w = tensor(start, requires_grad=True)
    scale = tensor(scale_start, requires_grad=True)
    loss, y = scaled_through_view(view, w, scale)
    loss.backward()
    expected_loss, expected_y = scaled_through_view(view, start.copy(), scale_start)
    np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-14)
    np.testing.assert_allclose(loss.item(), expected_loss, rtol=1e-14)
    np.testing.assert_allclose(
        w.grad.numpy(),
        finite_differences(lambda v: scaled_through_view(view, v, scale_start)[0], start),
        rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        scale.grad.numpy(),
        finite_differences(lambda s: scaled_through_view(view, start.copy(), s)[0],
                           scale_start),
        rtol=1e-6, atol=1e-6)


def test_a_reshaped_view_sees_its_base_rebound_by_a_tracked_update():
    # front = y.reshape(2, 2) kept y's old buffer when y += w (tracked) rebound y.
    w = tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = w * 2.0
    front = y.reshape(2, 2).T
    y += w
    np.testing.assert_array_equal(front.numpy(), (3.0 * np.arange(1.0, 5.0)).reshape(2, 2).T)
    (front * front)[0].sum().backward()  # front[0] is y[0] and y[2]: 2 * 9 w there
    np.testing.assert_allclose(w.grad.numpy(), [18.0, 0.0, 54.0, 0.0])


# --- retain_grad() and grad.zero_() ---------------------------------------------------------
def squashed_loss(w, x, weights):
    hidden = np.tanh(w * x)
    return hidden, (hidden * hidden * weights).sum()


def test_retain_grad_keeps_a_non_leaf_gradient_and_accumulates():
    # Tensor had no retain_grad (AttributeError), the first thing tried to look at an
    # activation's gradient; inside jit it was an "internal error" with a traceback.
    start, x, weights = np.array([0.3, -1.2, 0.8]), np.array([1.5, 0.5, -2.0]), np.arange(3.0)
    w = tensor(start, requires_grad=True)
    hidden, loss = squashed_loss(w, x, weights)
    hidden.retain_grad()
    loss.backward(retain_graph=True)
    values = np.tanh(start * x)
    expected_hidden = finite_differences(lambda h: (h * h * weights).sum(), values)
    np.testing.assert_allclose(hidden.grad.numpy(), expected_hidden, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(w.grad.numpy(),
                               finite_differences(lambda v: squashed_loss(v, x, weights)[1],
                                                  start), rtol=1e-7, atol=1e-9)
    loss.backward()  # a second backward adds, as into a leaf's .grad
    np.testing.assert_allclose(hidden.grad.numpy(), 2 * expected_hidden, rtol=1e-7, atol=1e-9)
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        tensor([1.0]).retain_grad()

    jitted = jit(_retained, cache="memory")
    w = tensor(start, requires_grad=True)
    hidden = jitted(w, x, weights)
    np.testing.assert_allclose(hidden.grad.numpy(), expected_hidden, rtol=1e-7, atol=1e-9)
    assert "x.retain_grad" in eager_reasons(jitted)


def _retained(w, x, weights):
    hidden, loss = squashed_loss(w, x, weights)
    hidden.retain_grad()
    loss.backward()
    return hidden


def test_grad_zero_in_place_then_accumulate():
    # w.grad.zero_() (PyTorch's way to clear a gradient and keep its buffer) had no method.
    w = tensor([1.0, -2.0, 3.0], requires_grad=True)
    (w * w).sum().backward()
    buffer = w.grad
    assert buffer.zero_() is buffer
    (w * np.array([1.0, 2.0, 3.0])).sum().backward()
    assert w.grad is buffer
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w.zero_()


def test_zero_of_a_tracked_non_leaf_passes_no_gradient():
    start = np.array([0.5, -1.0])
    w = tensor(start, requires_grad=True)
    scaled = w * 3.0
    scaled.zero_()
    loss = (scaled + w * w).sum()
    loss.backward()
    np.testing.assert_array_equal(scaled.numpy(), [0.0, 0.0])
    np.testing.assert_allclose(w.grad.numpy(),
                               finite_differences(lambda v: (0 * v + v * v).sum(), start),
                               rtol=1e-7)


# --- views of leaves, .grad assignment ------------------------------------------------------
@pytest.mark.parametrize("view", [lambda w: w[1:], lambda w: w.reshape(3, 1)],
                         ids=["slice", "reshape"])
def test_inplace_update_of_a_view_of_a_leaf_raises_as_in_pytorch(view):
    # v = w[1:]; v *= 10 with w a leaf requiring grad rebound v alone: v was [20, 30] and
    # w still [1, 2, 3] (NumPy changes w; PyTorch raises, as a leaf cannot take history).
    w = tensor([1.0, 2.0, 3.0], requires_grad=True)
    part = view(w)
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        part *= 10.0
    np.testing.assert_array_equal(part.numpy().ravel(), w.numpy()[-part.size:])
    with no_grad():  # PyTorch's way, which writes through to the leaf
        part *= 10.0
    np.testing.assert_array_equal(w.numpy(), [1.0, 20.0, 30.0] if part.size == 2
                                  else [10.0, 20.0, 30.0])


def test_grad_assignment_takes_none_a_tensor_or_an_array_of_the_leafs_shape():
    # w.grad = np.zeros(2) was stored as it was: backward then failed with "attribute
    # 'data' of 'numpy.ndarray' objects is not writable"; a Tensor of another shape
    # failed at backward with a broadcast error (PyTorch raises at the assignment).
    w = tensor([1.0, 2.0], requires_grad=True)
    w.grad = np.zeros(2)
    (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])
    for wrong in (tensor([0.0, 0.0, 0.0]), np.zeros(2, np.float32)):
        with pytest.raises(RuntimeError, match="assigned grad"):
            w.grad = wrong
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])


# --- no_grad / enable_grad as decorators and nested contexts --------------------------------
def test_no_grad_and_enable_grad_decorate_without_parentheses_and_nest():
    # @no_grad (PyTorch 2's spelling, no parentheses) raised "no_grad() takes no arguments"
    @no_grad
    def predict(w):
        return w * 2

    @enable_grad
    def tracked(w):
        return w * 2

    w = tensor([1.0, 2.0], requires_grad=True)
    assert predict.__name__ == "predict"
    assert not predict(w).requires_grad
    with no_grad():
        assert tracked(w).requires_grad
        with no_grad():
            assert not (w * 2).requires_grad
        with enable_grad():
            with no_grad():
                assert not is_grad_enabled()
            assert is_grad_enabled()
        assert not is_grad_enabled() and predict(w).numpy().tolist() == [2.0, 4.0]
    assert is_grad_enabled()


# --- a compiled call's in-place writes into Tensor arguments ---------------------------------
def scale_in_place(counts, x):
    counts += 1
    x[1:] *= 2.0
    return (x * counts).sum()


def test_compiled_writes_into_tensor_arguments_move_their_version_counters():
    # The compiled call copied its writes into the Tensors' buffers without moving their
    # version counters: a graph that saved x (here a view of it) before the call used the
    # new values at backward, a wrong gradient, where eager raises PyTorch's error.
    jitted = jit(scale_in_place, cache="memory")
    for function in (scale_in_place, jitted, jitted, jitted):
        counts, x = tensor(np.array([1, 2, 3])), tensor(np.arange(3.0))
        for _ in range(3):  # every call, the traced one and the compiled ones
            saved = (x[1:] * tensor(np.ones(2), requires_grad=True)).sum()
            function(counts, x)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                saved.backward()
        np.testing.assert_array_equal(counts.numpy(), [4, 5, 6])
        np.testing.assert_array_equal(x.numpy(), [0.0, 8.0, 16.0])
    stats = jitted.stats()
    assert stats["compiled_calls"] + stats["traced_calls"] == 9


# --- t.detach().numpy() inside jit ------------------------------------------------------------
def masked_by_numpy(w, x):
    scores = x @ w
    mask = scores.detach().numpy() > 0  # NumPy's: no gradient, no Tensor
    centred = np.tanh(scores).numpy().mean(axis=0)
    return (scores * mask).sum() + (scores * centred).sum(), mask, centred * 2


def test_numpy_of_a_tensor_inside_jit_compiles_as_a_plain_value():
    # t.detach().numpy() (a mask, a statistic) made every call run eagerly ("a traced
    # array was converted to a NumPy array"); it is the value without gradient, and what
    # is computed from it alone is an ndarray, as eagerly. (float64 only: float32 takes
    # the same path, and a first float32 product builds its GEMM library, 5 s.)
    jitted = jit(masked_by_numpy, cache="memory")
    tolerance = 1e-12
    for seed in (3, 5, 7):  # one shape: one compile
        rng = np.random.default_rng(seed)
        start, x = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
        results = {}
        for name, function in (("eager", masked_by_numpy), ("jitted", jitted)):
            w = tensor(start, requires_grad=True)
            loss, mask, doubled = function(w, x)
            loss.backward()
            results[name] = loss, mask, doubled, w.grad
        (loss, mask, doubled, grad), expected = results["jitted"], results["eager"]
        assert [type(value) for value in (mask, doubled)] == [np.ndarray, np.ndarray]
        np.testing.assert_array_equal(mask, expected[1])
        np.testing.assert_allclose(doubled, expected[2], rtol=tolerance, atol=tolerance)
        assert loss.dtype == expected[0].dtype and grad.dtype == expected[3].dtype
        np.testing.assert_allclose(loss.item(), expected[0].item(), rtol=tolerance)
        np.testing.assert_allclose(grad.numpy(), expected[3].numpy(), rtol=tolerance,
                                   atol=tolerance)
    # the gradient stops at .numpy(), as eagerly
    mask, centred = (x @ start) > 0, np.tanh(x @ start).mean(axis=0)
    np.testing.assert_allclose(
        grad.numpy(), finite_differences(
            lambda v: ((x @ v) * mask).sum() + ((x @ v) * centred).sum(), start),
        rtol=1e-6, atol=1e-8)
    assert jitted.stats()["eager_reasons"] == {}


def tracked_inside(w, x):
    with enable_grad():
        loss = (w * x).sum()
    return loss


def test_enable_grad_inside_a_jit_function_called_under_no_grad_keeps_the_history():
    # The call under no_grad() was traced and compiled without a backward, so the loss
    # the enable_grad block makes came back without history (backward raised "does not
    # require grad"); eagerly it has one. Such a call now runs eagerly.
    jitted = jit(tracked_inside, cache="memory")
    for scale in (1.0, 2.0, 3.0):
        x = np.arange(3.0) * scale
        w = tensor(np.ones(3), requires_grad=True)
        with no_grad():
            loss = jitted(w, x)
        assert loss.requires_grad
        loss.backward()
        np.testing.assert_array_equal(w.grad.numpy(), x)
    assert "enable_grad()" in eager_reasons(jitted)


def scaled_by_mode(w, x):
    return w * x if is_grad_enabled() else w * 2.0 * x


@pytest.mark.parametrize("requires_grad", [None, False, True], ids=["ndarray", "tensor",
                                                                     "tracked_tensor"])
def test_is_grad_enabled_inside_jit_follows_the_mode_of_every_call(requires_grad):
    # Without a Tensor argument requiring grad the compiled call does not check the mode,
    # so the variant traced under grad mode ran under no_grad() too: w * x where eager
    # gives w * 2 x.
    jitted = jit(scaled_by_mode, cache="memory")
    x = np.arange(3.0)
    w = np.ones(3) if requires_grad is None else tensor(np.ones(3), requires_grad=requires_grad)
    for enabled in (True, False, True, False):
        if enabled:
            result = jitted(w, x)
        else:
            with no_grad():
                result = jitted(w, x)
        np.testing.assert_array_equal(result.numpy() if requires_grad is not None else result,
                                      x if enabled else 2.0 * x)


# --- a whole training step (backward and optimizer) inside jit ---------------------------------
def train_step(optimizer, w, b, x, y):
    optimizer.zero_grad()
    loss = ((np.tanh(x @ w + b) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    return loss


def run_train_steps(step, make, dtype):
    rng = np.random.default_rng(0)
    w = tensor(rng.normal(size=(3, 2)).astype(dtype), requires_grad=True)
    b = tensor(np.zeros(2, dtype), requires_grad=True)
    optimizer = make([w, b])
    history = []
    for _ in range(3):  # changing batches of one shape
        x, y = rng.normal(size=(4, 3)).astype(dtype), rng.normal(size=(4, 2)).astype(dtype)
        loss = step(optimizer, w, b, x, y)
        history.append([loss.item(), *(value.numpy().copy() for value in (w, b, w.grad, b.grad)),
                        *(np.array(state, copy=True) for name in ("first", "second", "steps")
                          for state in getattr(optimizer, name, ()))])
    return history


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_training_step_with_backward_and_optimizer_inside_jit_matches_eager(make, dtype):
    # loss.backward() and optimizer.step() inside the jitted function: the call runs
    # eagerly (backward of a traced value, and optim's own code, are not traced), with the
    # parameters, their .grad and the optimizer's state eager's after every call.
    jitted = jit(train_step, cache="memory")
    for got, want in zip(run_train_steps(jitted, make, dtype),
                         run_train_steps(train_step, make, dtype)):
        for got_value, want_value in zip(got, want, strict=True):
            np.testing.assert_array_equal(got_value, want_value)
    assert "backward" in eager_reasons(jitted) or "optimizer" in eager_reasons(jitted)


@pytest.mark.xfail(strict=True, reason="backward() of a traced loss and optim's step are not "
                   "traced: the training step runs eagerly (docs/sharp_bits.md)")
def test_training_step_with_backward_and_optimizer_inside_jit_compiles():
    jitted = jit(train_step, cache="memory")
    run_train_steps(jitted, OPTIMIZERS["adam"], np.float64)
    assert jitted.stats()["eager_reasons"] == {}
