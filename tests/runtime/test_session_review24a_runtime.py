"""Review 24a of this session's runtime commits: the compile-cost policy
(``runtime/compile_policy.py``) attacked with Tensors that require grad."""

from __future__ import annotations

import threading

import numpy as np

from tracejit import jit, tensor
from tracejit.runtime import background, compile_policy, misses


def loss(x, w):
    return (np.tanh(x @ w) ** 2).sum()


def _grads(function, x0, w0):
    x, w = tensor(x0, requires_grad=True), tensor(w0, requires_grad=True)
    value = function(x, w)
    value.backward()
    return float(value), np.asarray(x.grad.numpy()), np.asarray(w.grad.numpy())


def test_a_backward_that_makes_a_gradient_compile_long_defers_before_any_lowering(
        monkeypatch):
    """A forward under the background threshold whose backward takes the pair past it: the
    budget saw the backward's estimate only after the forward was lowered and through
    LLVM on the calling thread (the call waited for it), then deferred, and the compile
    thread compiled the forward again. Both halves are estimated first now."""
    admitted = []
    admit = compile_policy.CompileBudget.admit
    monkeypatch.setattr(compile_policy.CompileBudget, "admit",
                        lambda self, estimate: admitted.append(estimate) or admit(self, estimate))
    x0, w0 = np.linspace(-1, 1, 6).reshape(2, 3), np.linspace(0.5, 2, 6).reshape(3, 2)
    _grads(jit(loss, cache="memory", compile="sync"), x0, w0)
    forward, backward = (estimate.seconds for estimate in admitted)
    monkeypatch.setattr(compile_policy, "BACKGROUND_SECONDS", forward + backward / 2)
    compiled, calling = [], threading.get_ident()
    compile = misses.codegen.compile

    def counted(graph, *arguments, **options):
        compiled.append((graph.name, threading.get_ident() == calling))
        return compile(graph, *arguments, **options)

    monkeypatch.setattr(misses.codegen, "compile", counted)
    jitted = jit(loss, cache="memory")
    expected = _grads(loss, x0, w0)
    got = _grads(jitted, x0, w0)  # the eager run: the compile went to the background
    assert not any(here for _, here in compiled), compiled  # none while the call waited
    assert jitted.stats()["background_compiles"] == 1
    assert background.wait_idle(timeout=300)
    assert sorted(compiled) == [("loss", False), ("loss_backward", False)], compiled
    for _ in range(2):
        got = _grads(jitted, x0, w0)
        for value, want in zip(got, expected):
            np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-15)
    stats = jitted.stats()
    assert stats["compiled_calls"] == 2 and stats["compiles"] == 1, stats
