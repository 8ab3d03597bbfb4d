"""The compile-cost policy of jit(compile="auto") (runtime/compile_policy.py): a long compile
goes to the background thread, one that would take minutes is not done (calls run eagerly,
one warning naming the def and for lines), and a recompile storm (variants never reused)
stops compiling. No timing here: the thresholds are set around the estimates, which are
counts (codegen/compile_estimate.py), and the tests read the counters.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen.compile_estimate import estimate_compile
from tracejit.runtime import background, compile_policy
from tracejit.tracer.passes import optimize
from tracejit.tracer.tracing import trace


def same(got, expected):
    """Compiled math may differ from NumPy's in the last bits."""
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def scaled(x):
    return np.tanh(x) * 2.0 + 1.0


def running_sum(x):
    total = np.zeros_like(x)
    for t in range(x.shape[0]):
        total = total + np.maximum(x * t - 3.0, 0.0)
    return total


def test_a_long_compile_goes_to_the_background_and_later_calls_run_compiled(monkeypatch):
    monkeypatch.setattr(compile_policy, "BACKGROUND_SECONDS", 0.0)
    f = jit(scaled, cache="memory")
    x = np.linspace(-2, 2, 7)
    same(f(x), scaled(x))  # the trace's result: nothing waits
    stats = f.stats()
    assert stats["background_compiles"] == 1 and stats["traced_calls"] == 1
    assert background.wait_idle(timeout=300)
    same(f(x), scaled(x))
    stats = f.stats()
    assert stats["compiles"] == 1 and stats["compiled_calls"] == 1
    assert stats["eager_calls"] == {}


def test_sync_waits_for_a_long_compile(monkeypatch):
    monkeypatch.setattr(compile_policy, "BACKGROUND_SECONDS", 0.0)
    f = jit(scaled, cache="memory", compile="sync")
    x = np.linspace(-2, 2, 7)
    f(x)
    same(f(x), scaled(x))
    stats = f.stats()
    assert stats["background_compiles"] == 0 and stats["compiles"] == 1
    assert stats["compiled_calls"] >= 1


def test_a_compile_of_minutes_is_refused_once_with_the_def_and_for_lines(monkeypatch):
    monkeypatch.setattr(compile_policy, "REFUSE_SECONDS", 0.0)
    f = jit(running_sum, cache="memory", dynamic=True)
    x = np.linspace(-1, 4, 6)
    with pytest.warns(RuntimeWarning, match="not compiled") as caught:
        got = f(x)
    same(got, running_sum(x))
    message = str(caught[0].message)
    line = running_sum.__code__.co_firstlineno
    assert f"test_compile_policy.py:{line} (def running_sum; for at " in message
    assert f"test_compile_policy.py:{line + 2}" in message  # the for line
    assert "compile='sync'" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per function
        for n in (6, 6, 30):
            x = np.linspace(-1, 4, n)
            same(f(x), running_sum(x))
    stats = f.stats()
    assert stats["compiles"] == 0 and stats["compiled_calls"] == 0
    assert stats["refused_compiles"] >= 1
    assert "too costly to compile" in stats["eager_calls"]
    assert "too costly to compile" in f.explain()


def test_fallback_raise_raises_where_auto_refuses(monkeypatch):
    monkeypatch.setattr(compile_policy, "REFUSE_SECONDS", 0.0)
    f = jit(running_sum, cache="memory", dynamic=True, fallback="raise")
    with pytest.raises(Exception, match="too costly to compile"):
        f(np.linspace(-1, 4, 6))


def test_sync_compiles_what_auto_refuses(monkeypatch):
    monkeypatch.setattr(compile_policy, "REFUSE_SECONDS", 0.0)
    f = jit(running_sum, cache="memory", compile="sync", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (6, 6, 30):
            x = np.linspace(-1, 4, n)
            same(f(x), running_sum(x))
    stats = f.stats()
    assert stats["compiles"] >= 1 and stats["compiled_calls"] >= 1
    assert stats["refused_compiles"] == 0


def ragged(rows):
    """Each call's list length is a new entry signature: a variant per length."""
    return sum(np.tanh(row) for row in rows)


def _rows(count):
    return [np.full(3, 0.1 * k) for k in range(count)]


def test_a_recompile_storm_stops_compiling_until_a_variant_is_reused(monkeypatch):
    monkeypatch.setattr(compile_policy, "STORM_COMPILE_SECONDS", 0.0)
    f = jit(ragged, cache="memory", max_variants=20)
    for count in (1, 2, 3):  # three variants, none called again
        same(f(_rows(count)), ragged(_rows(count)))
    assert f.stats()["compiles"] == 3
    with pytest.warns(RuntimeWarning, match="stops compiling new variants") as caught:
        same(f(_rows(4)), ragged(_rows(4)))
    line = ragged.__code__.co_firstlineno
    assert f"test_compile_policy.py:{line} (def ragged)" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once
        same(f(_rows(5)), ragged(_rows(5)))
    stats = f.stats()
    assert stats["compiles"] == 3 and stats["storm_calls"] == 2
    assert stats["eager_calls"] == {"recompile storm": 2}
    # a variant reused: the storm lifts, and new cases compile again
    same(f(_rows(3)), ragged(_rows(3)))
    assert f.stats()["compiled_calls"] == 1
    same(f(_rows(6)), ragged(_rows(6)))
    assert f.stats()["compiles"] == 4


def test_no_storm_under_sync_or_when_the_compiles_are_cheap(monkeypatch):
    f = jit(ragged, cache="memory", max_variants=20)
    g = jit(ragged, cache="memory", max_variants=20, compile="sync")
    monkeypatch.setattr(compile_policy, "STORM_COMPILE_SECONDS", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for count in range(1, 7):
            same(g(_rows(count)), ragged(_rows(count)))
    assert g.stats()["compiles"] == 6 and g.stats()["storm_calls"] == 0
    # cheap: a few equations each (estimates far under STORM_COMPILE_SECONDS)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for count in range(1, 7):
            same(f(_rows(count)), ragged(_rows(count)))
    assert f.stats()["compiles"] == 6 and f.stats()["storm_calls"] == 0


def test_a_sweep_over_size_buckets_is_no_storm(monkeypatch):
    monkeypatch.setattr(compile_policy, "STORM_COMPILE_SECONDS", 0.0)
    f = jit(scaled, cache="memory", dynamic=True, max_variants=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for size in (3, 5, 9, 17, 33, 65):  # a new bucket each, none reused
            x = np.linspace(-1, 1, size)
            same(f(x), scaled(x))
    stats = f.stats()
    assert stats["compiles"] == 6 and stats["storm_calls"] == 0


def test_reset_forgets_the_storm(monkeypatch):
    monkeypatch.setattr(compile_policy, "STORM_COMPILE_SECONDS", 0.0)
    f = jit(ragged, cache="memory", max_variants=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for count in range(1, 6):
            f(_rows(count))
    assert f.stats()["storm_calls"] == 2
    f.reset()
    f(_rows(7))
    assert f.stats()["compiles"] == 1 and f.stats()["storm_calls"] == 0


def test_the_estimate_counts_each_loop_body_once_and_its_bounds():
    def relu_loop(x, w):
        for _ in range(x.shape[0]):
            x = np.maximum(w @ x, 0.0)
            # float32 tanh is ours, a few ulp from NumPy's: a rounding bound (a float64
            # one, or the user's own x.sum() since d42010c, is NumPy's loop: none)
            x = np.tanh(x.astype(np.float32)).astype(np.float64)
            x = np.where(x > 0.1, x, 0.0)
        return x

    def plain_loop(x, w):
        for _ in range(x.shape[0]):
            x = np.tanh(w @ x)
        return x

    rng = np.random.default_rng(0)
    x, w = rng.random(6), rng.random((6, 6)) * 0.3
    decided = estimate_compile(optimize(trace(relu_loop, x, w, dynamic=True).graph))
    plain = estimate_compile(optimize(trace(plain_loop, x, w, dynamic=True).graph))
    assert decided.loops == plain.loops == 1
    assert decided.bound_equations > 0 and plain.bound_equations == 0
    assert decided.seconds > plain.seconds
    assert plain.equations < 20  # the body once, not once per loop output


def test_cache_stats_prints_what_the_policy_did(monkeypatch):
    import io
    from types import SimpleNamespace

    from tracejit.runtime import cli

    row = {"function": "em_step", "module": "hmm", "file": "hmm.py", "calls": 9,
           "compiles": 3, "eager_calls": {"recompile storm": 6}, "storm_calls": 6,
           "background_compiles": 1, "refused_compiles": 0}
    monkeypatch.setattr(cli, "_cache", lambda args: SimpleNamespace(
        persisted_stats=lambda: [row]))
    out = io.StringIO()
    assert cli.command_stats(SimpleNamespace(json=False), out) == 0
    text = out.getvalue()
    assert ("compile cost: 1 compiled in the background (long), 6 eager in a recompile storm"
            in text)
    assert "eager: 6 x recompile storm" in text


def test_a_long_compile_waits_until_the_function_shows_reuse(monkeypatch):
    # every estimate counts as long: after the first two variants (the second may be the
    # first's dims made dynamic), a new one compiles only when a call comes back to it (or
    # to any variant made): a storm pays two compiles, not three
    monkeypatch.setattr(compile_policy, "UNPROVEN_SECONDS", 0.0)
    f = jit(ragged, cache="memory", max_variants=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no storm warning: nothing piles up
        for count in (1, 2, 3, 4, 5):
            same(f(_rows(count)), ragged(_rows(count)))
    stats = f.stats()
    assert (stats["compiles"], stats["traced_calls"], stats["storm_calls"]) == (2, 5, 0)
    assert not stats["eager_calls"]
    same(f(_rows(3)), ragged(_rows(3)))  # the variant for 3 rows again: compiled now
    assert f.stats()["compiles"] == 3
    same(f(_rows(3)), ragged(_rows(3)))
    assert f.stats()["compiled_calls"] == 1
    same(f(_rows(7)), ragged(_rows(7)))  # reuse shown: new cases compile at once
    assert f.stats()["compiles"] == 4


def test_a_first_variant_that_is_reused_lets_long_compiles_through(monkeypatch):
    monkeypatch.setattr(compile_policy, "UNPROVEN_SECONDS", 0.0)
    f = jit(ragged, cache="memory", max_variants=20)
    for count in (1, 1, 2, 3):
        same(f(_rows(count)), ragged(_rows(count)))
    assert f.stats()["compiles"] == 3
    g = jit(ragged, cache="memory", max_variants=20, compile="sync")  # sync: every case
    for count in (1, 2, 3):
        same(g(_rows(count)), ragged(_rows(count)))
    assert g.stats()["compiles"] == 3


def test_a_storm_of_long_variants_pays_two_compiles_and_a_trace(monkeypatch):
    monkeypatch.setattr(compile_policy, "UNPROVEN_SECONDS", 0.0)
    monkeypatch.setattr(compile_policy, "STORM_COMPILE_SECONDS", 0.0)
    f = jit(ragged, cache="memory", max_variants=20)
    with pytest.warns(RuntimeWarning, match="stops compiling new variants"):
        for count in (1, 2, 3, 4, 5):
            same(f(_rows(count)), ragged(_rows(count)))
    stats = f.stats()
    assert (stats["compiles"], stats["traced_calls"], stats["storm_calls"]) == (2, 3, 2)
    same(f(_rows(2)), ragged(_rows(2)))  # back to a traced case: compiled, the storm lifts
    assert f.stats()["compiles"] == 2 and f.stats()["storm_calls"] == 2
    f.reset()  # forgets the uncompiled variants too
    same(f(_rows(3)), ragged(_rows(3)))
    assert f.stats()["compiles"] == 1
