"""Float64 math that a decision reads is computed by NumPy's own loops in compiled code
(``codegen/numpy_products.decision_math``, ``codegen/numpy_math_chunks.py``): its results
are NumPy's bits in every kernel shape (flat chains on chunks, rows, broadcasts, matmul
epilogues), so its comparisons carry no margin (``tracer/exact_math.py``). Math no
decision reads keeps our own (faster) math. ``TRACEJIT_NUMPY_MATH=0`` turns it off."""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen import llvm, numpy_loops
from tracejit.tracer.ir import Guard

pytestmark = pytest.mark.skipif(numpy_loops.loop("exp", np.float64) is None,
                                reason="NumPy's float64 exp loop is not usable here")


def _bits(a):
    return np.asarray(a).view(np.int64)


def hostile(shape, seed):
    """Normal values at several scales, exp's edges, signed zeros; finite."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * rng.choice([0.1, 1.0, 30.0, 300.0], shape)
    flat = x.reshape(-1)
    edges = np.array([-745.2, -708.4, 709.78, 0.0, -0.0, 1e-300, -1e-300, 1.0])
    flat[: min(flat.size, edges.size)] = edges[: flat.size]
    return x


def flat_chain(x):
    y = 2.0 * np.exp(x * 0.5) + 1.0
    return y, y > 3.0


def two_functions(x):
    y = np.exp(np.log(np.abs(x) + 1.0) * 0.5) + np.tanh(x * 0.5)
    return y, y > 1.0


def alone(x):
    y = np.sin(x)
    return y, y > 0.25


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    return e, p.argmax(axis=1)


def row_sums(x):  # a reduction reads the exp (it gets a buffer); * 2 is exact
    e = np.exp(np.clip(x, -50, 50))
    return e * 2.0, e.sum(axis=1) > 10.0


def broadcast(x):  # a broadcast reads it
    m = np.tanh(x[:, :1])
    return m, (m * x > 0.1)


def epilogue(x):  # the matmul's output is its operand
    z = x @ np.ones((x.shape[1], 3)) * 0.01
    s = 1.0 / (1.0 + np.exp(-z))
    return s, s > 0.5


CASES = [flat_chain, two_functions, alone, softmax_rows, row_sums, broadcast, epilogue]


@pytest.mark.parametrize("shape", [(1, 1), (3, 1000), (7, 733)])
@pytest.mark.parametrize("fn", CASES, ids=lambda fn: fn.__name__)
def test_decided_math_is_numpys_bits(fn, shape):
    """The math values a decision reads equal eager NumPy's in every bit, and so do the
    decisions; no call runs eagerly (with our own math these calls take the margin's exit:
    ``test_switched_off_the_margins_send_these_calls_eagerly``)."""
    x = hostile(shape, seed=sum(shape))
    compiled = jit(fn, cache="memory")
    with np.errstate(all="ignore"):
        want = fn(x)
        for _ in range(3):
            got = compiled(x)
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 2 and not stats["eager_calls"], compiled.explain()
    assert np.array_equal(_bits(got[0]), _bits(want[0]))
    assert np.array_equal(got[1], want[1])


def _margins(fn, x):
    compiled = jit(fn, cache="memory")
    with np.errstate(all="ignore"):
        compiled(x)
    graph = compiled.lower(x)._program.graph
    return [item for item in graph.body if isinstance(item, Guard) and item.convert == "margin"]


def _switched(monkeypatch, setting):
    monkeypatch.setattr(numpy_loops, "_setting", numpy_loops._setting)  # put back after
    monkeypatch.setenv("TRACEJIT_NUMPY_MATH", setting)  # jit() hands it to codegen


def guarded(x):
    if np.tanh(x * 2.0).max() > 0.5:
        return np.exp(x)
    return x


@pytest.mark.parametrize("setting", ["1", "0"])
def test_a_guard_on_numpys_math_needs_no_margin(monkeypatch, setting):
    _switched(monkeypatch, setting)
    margins = _margins(guarded, np.linspace(-1.0, 2.0, 50))
    assert (margins == []) == (setting == "1"), margins


def of_the_argument(x):
    y = np.exp(x)
    return y, y > 2.0


def test_math_of_an_argument_keeps_its_margin():
    """NumPy's loop gives other bits on some layouts of its operand (np.exp of a reversed
    view falls back to libm's exp: an ulp off on ~1 in 10 elements here), and an argument
    is what the caller passed, so a decision on np.exp(x) keeps its margin; one on an
    array NumPy made itself (x * 2.0) needs none."""
    x = hostile((5000,), seed=9)
    with np.errstate(all="ignore"):
        assert _margins(of_the_argument, x)
        compiled = jit(of_the_argument, cache="memory")
        reversed_view = x[::-1]
        for _ in range(3):
            got = compiled(reversed_view)
        want = of_the_argument(reversed_view)
    assert np.array_equal(got[1], want[1])


def test_switched_off_the_margins_send_these_calls_eagerly(monkeypatch):
    """The other half of ``test_decided_math_is_numpys_bits``: with our own exp the mask's
    values near 3.0 fall inside its rounding margin, so every call runs eagerly."""
    _switched(monkeypatch, "0")
    x = hostile((7, 733), seed=3)
    compiled = jit(flat_chain, cache="memory")
    with np.errstate(all="ignore"):
        for _ in range(2):
            compiled(x)
    assert compiled.stats()["compiled_calls"] == 0, compiled.stats()


def test_math_no_decision_reads_keeps_our_own():
    """No decision: our own exp (it differs from NumPy's somewhere), no NumPy loop."""
    x = hostile((7, 733), seed=5)
    compiled = jit(lambda x: 2.0 * np.exp(x * 0.5) + 1.0, cache="memory")
    with np.errstate(all="ignore"):
        compiled(x)
        got = compiled(x)
        want = 2.0 * np.exp(x * 0.5) + 1.0
    assert "tj_np_exp_d" not in compiled.lower(x).llvm_ir
    assert not np.array_equal(_bits(got), _bits(want))


def test_the_setting_is_in_the_disk_cache_key(monkeypatch):
    """Margins traced under one setting are not those of another: the host description
    every disk key holds names it (NumPy's version is in the key too)."""
    monkeypatch.setattr(numpy_loops, "_setting", numpy_loops._setting)
    seen = set()
    for setting in ("1", "0", "all"):
        numpy_loops.set_numpy_math(setting)
        seen.add(str(llvm.host_description()["numpy_math"]))
    assert len(seen) == 3


def test_an_unknown_setting_runs_eagerly(monkeypatch):
    _switched(monkeypatch, "sometimes")
    compiled = jit(flat_chain, cache="memory")
    x = hostile((3, 100), seed=1)
    with np.errstate(all="ignore"):
        for _ in range(2):
            got = compiled(x)
        want = flat_chain(x)
    assert np.array_equal(got[1], want[1])
    assert compiled.stats()["compiled_calls"] == 0


def test_code_naming_an_unusable_loop_is_not_linked(monkeypatch):
    """A cache entry whose code calls a loop this process's NumPy fails the check for
    raises ``Unusable`` (a ValueError: the disk cache then recompiles the entry)."""
    monkeypatch.setattr(numpy_loops, "loop", lambda name, dtype: None)
    with pytest.raises(ValueError):
        numpy_loops.symbols(b"... tj_np_exp_d ...")


def masked_loss(x):
    e = np.exp(x * 2.0)
    kept = np.where(e > 2.0, e, 0.0)
    return (kept * np.tanh(x * 0.5)).sum()


def test_a_differentiated_mask_on_numpys_exp_compiles_and_decides_as_numpy():
    """The joint graph is split into forward and backward programs; the mask's exp (values
    within ulps of 2.0) is NumPy's in both, so every call compiles with no margin exit
    (with our own exp each took the margin's exit) and the mask is NumPy's: the value is
    and the gradient within rounding of eager's (a flipped element would move them by
    ~0.3)."""
    import tracejit as tj

    rng = np.random.default_rng(3)
    x = np.concatenate([np.log(2.0) / 2.0 + rng.standard_normal(20000) * 1e-15,
                        rng.standard_normal(20000)])
    compiled = jit(tj.value_and_grad(masked_loss), cache="memory")
    for _ in range(3):
        value, grad = compiled(x)
    want_value, want_grad = tj.value_and_grad(masked_loss)(x)
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 2 and not stats["eager_calls"], stats
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want_grad), rtol=1e-12, atol=1e-11)
