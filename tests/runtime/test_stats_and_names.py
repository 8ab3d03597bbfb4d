"""stats() adds up, eager reasons are short ids with their text alongside, and messages
name parameters the way the user wrote them (``x.shape[0]``, ``cfg['k']``)."""

import logging

import numpy as np
import pytest

from tracejit import jit


def _scaled(x, params, cfg=None):
    if x.sum() > 0:
        return x * params[0] + cfg["b"]
    return x - cfg["b"]


def _uses_fft(x):
    return np.fft.fft(x)


def _raises_on_short(x):
    if x.shape[0] < 3:
        raise ValueError("too short")
    return x * 2


def _total(stats):
    return (stats["compiled_calls"] + stats["traced_calls"] + sum(stats["eager_calls"].values())
            + stats["raised_calls"])


def test_calls_add_up_over_compiled_traced_eager_and_raised():
    scaled, fft, raises = (jit(fn, cache=False, hot_exit=100)
                              for fn in (_scaled, _uses_fft, _raises_on_short))
    params, cfg = (np.ones(4),), {"b": np.ones(4)}
    for sign in (1, 1, -1, 1, -1):
        scaled(sign * np.ones(4), params, cfg=cfg)
    for _ in range(3):
        fft(np.ones(4))
    raises(np.ones(4))
    for _ in range(2):
        with pytest.raises(ValueError, match="too short"):
            raises(np.ones(2))
    for function, raised in ((scaled, 0), (fft, 0), (raises, 2)):
        stats = function.stats()
        assert stats["calls"] == _total(stats), stats
        assert stats["raised_calls"] == raised
    assert scaled.stats()["eager_calls"] == {"side exit": 2}
    assert fft.stats()["eager_calls"] == {"untraceable": 3}
    assert "np.fft.fft" in fft.stats()["eager_reasons"]["untraceable"]
    assert "3 x untraceable (untraceable: " in fft.explain()


def test_entry_guards_and_misses_name_parameters(caplog):
    scaled = jit(_scaled, cache=False, dynamic=False)
    caplog.set_level(logging.INFO, logger="tracejit.recompiles")
    scaled(np.ones(3), (np.ones(3),), cfg={"b": np.ones(3)})
    scaled(np.ones(5), (np.ones(5),), cfg={"b": np.ones(5)})
    text = scaled.explain()
    for line in ("x: ndarray float64[3]", "params[0]: ndarray float64[3]",
                 "cfg['b']: ndarray float64[3]"):
        assert line in text, text
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "x.shape[0]: 3 -> 5" in messages, messages


def test_symbols_say_which_dim_they_stand_for():
    scaled = jit(_scaled, cache=False, dynamic=True)
    lowered = scaled.lower(np.ones(6), (np.ones(6),), cfg={"b": np.ones(6)})
    assert "(x.shape[0]) in [" in lowered.entry_guards, lowered.entry_guards


def test_varargs_and_methods_are_named():
    class Layer:
        def __init__(self):
            self.w = np.ones(3)

        @jit(cache=False, dynamic=False)
        def forward(self, *inputs):
            return inputs[0] * self.w

    layer = Layer()
    layer.forward(np.ones(3))
    assert "inputs[0]: ndarray float64[3]" in layer.forward.explain()


def test_the_shape_hint_picks_the_variant_that_accepts_the_call():
    """With many buckets, a call tries first the variant its shapes took last time; the
    variant's own guard still decides (a dtype change with the same shapes misses the
    hint and finds, or compiles, the right variant)."""
    import tracejit as tj

    f = tj.jit(lambda x: x * 2 + 1, cache="memory", dynamic=True, max_variants=16)
    arrays = [np.arange(n, dtype=np.float64) for n in (3, 9, 17, 33, 65)]
    for _ in range(2):
        for x in arrays:
            np.testing.assert_array_equal(f(x), x * 2 + 1)
    assert f.stats()["variants"] == 5
    x32 = np.arange(17, dtype=np.float32)
    got = f(x32)
    assert got.dtype == np.float32 and np.array_equal(got, x32 * 2 + 1)
    assert f.stats()["variants"] == 6
    np.testing.assert_array_equal(f(arrays[2]), arrays[2] * 2 + 1)
