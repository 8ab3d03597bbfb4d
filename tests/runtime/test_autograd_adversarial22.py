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

from tracejit import jit, optim, tensor


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
