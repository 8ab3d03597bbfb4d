"""Adversarial review of round 22's last commits (3e4d89e's formatted floats, 58c90b6's
_bind_symbol, a3c7571's open disk keys, 707e693/bfee6cb's trip counts, 62bcea4's other
paths). Each call compares compiled with eager NumPy (results, types, printed text) on
calls with changing inputs.

Findings, each fixed with its test here (each fails before its fix). Wrong results:
``repr(loss)``, ``"%s" % [loss]`` and ``print([loss])`` (a list or dict holding a traced
value, as in ``print(costs)``) turned the traced value into its debugging text,
``Tracer(%2: AbstractArray(...), value=...)``, frozen into the program: every call
returned or printed the first call's text in tracejit's words. Now the trace refuses as
``str(loss)`` does and the call runs eagerly. Slow: ``b"%f" % cost`` (bytes) guarded the
float's exact value as ``"%f" % cost`` did before 3e4d89e (a trace and compile per call).
Internal error: a trip count argument's offset (``range(epochs - 1)``, 707e693) made before
a branch or a print reached a guard or an effect where it looked for the offset's equation
(``'Guard' object has no attribute 'out'``): every call ran eagerly as a tracejit failure.
"""

from __future__ import annotations

import numpy as np
from real_model_checks import assert_same

import tracejit as tj


def _texts(x):
    loss = x.mean()
    return x * 2, repr(loss), "%s" % [loss], repr(float(loss)), "%s" % ((loss, 1),)


def _prints_a_list(x):
    costs = [x.mean(), x.sum()]
    print("costs", costs)
    return x + 1


def _bytes_format(x):
    return x * 2, b"cost %f" % x.mean(), b"%d rows" % x.shape[0]


def _calls(seed=2211):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(4) for _ in range(3)]


def test_repr_of_a_traced_value_is_numpys_text_on_every_call():
    """repr() of a traced value (directly, or of a list or tuple holding it) gave
    tracejit's debugging text, the first call's, on every call."""
    compiled = tj.jit(_texts, cache="memory")
    for x in _calls():
        assert_same(compiled(x.copy()), _texts(x.copy()))


def test_print_of_a_list_holding_a_traced_value_prints_numpys_text(capsys):
    compiled = tj.jit(_prints_a_list, cache="memory")
    for x in _calls():
        want = _prints_a_list(x.copy())
        eager_text = capsys.readouterr().out
        assert_same(compiled(x.copy()), want)
        assert capsys.readouterr().out == eager_text


def test_bytes_formatting_a_computed_float_runs_eagerly_at_once():
    compiled = tj.jit(_bytes_format, cache="memory")
    for x in _calls():
        assert_same(compiled(x.copy()), _bytes_format(x.copy()))
    stats = compiled.stats()
    assert stats["traced_calls"] == 0 and stats["compiles"] == 0, stats
    assert "formatting a computed float" in compiled.explain()


def _fit_to_one_before(x, epochs):
    last = epochs - 1
    w = np.zeros_like(x)
    if x.sum() > 0:  # a guard recorded between the bound and its loop
        w = w + 1.0
    print("fitting", x.shape)  # a print too
    for _ in range(last):
        w = w * 0.9 + x
    return w


def test_a_count_offset_made_before_a_branch_or_print_is_no_internal_error(capsys):
    """loop_trip_counts._offset_leaf (707e693) looked for the bound's equation through a
    body that also holds guards and prints, and read ``.out`` of them: AttributeError, an
    internal error on every call (eager, never compiled)."""
    compiled = tj.jit(_fit_to_one_before, cache="memory")
    for count, sign in ((9, 1.0), (10, -1.0), (11, 1.0)):
        x = sign * np.arange(3.0)
        want = _fit_to_one_before(x.copy(), count)
        eager_text = capsys.readouterr().out
        assert_same(compiled(x.copy(), count), want)
        assert capsys.readouterr().out == eager_text
    assert "internal error" not in (compiled.stats()["eager_calls"] or {}), compiled.explain()
