"""A captured loop's accumulated total read as a Python number after the loop
(``loss.item()``, ``float(loss)``), eager vs ``jit``.

Reading the value is a value guard on the loop's result: the segment after the loop holds
that guard and no equation, and must still compile natively (it once failed, so the whole
loop program ran interpreted). Lengths 0, 1 and primes, float32/float64, NaN in the data,
and calls with new data at a compiled length (the guard fails: a side exit from the
segment, NumPy's answer).
"""

import logging

import numpy as np
import pytest
from real_model_checks import run_calls


def mean_loss_item(x):
    loss = x[:1].sum() * 0  # a NumPy scalar even for zero trips (0.0 has no .item())
    for t in range(x.shape[0]):
        loss = loss + x[t].mean()
    return loss.item()


def weighted_total_float(x, w):
    total = 0.0
    for t in range(x.shape[0]):
        total = total + (x[t] * w).sum()
    return float(total), total


def both_totals(x, w):
    first, second = 0.0, 1.0
    for t in range(x.shape[0]):
        first = first + x[t].max()
        second = second * 0.5 + x[t] @ w
    return first.item() if x.shape[0] else first, second


def data(dtype, lengths=(0, 1, 2, 7, 13)):
    rng = np.random.default_rng(62)
    sets = []
    for n in lengths:
        x = rng.standard_normal((n, 3)).astype(dtype)
        if n == 7:
            x[3, 1] = np.nan
        sets.append(x)
    return sets


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("model", [mean_loss_item, weighted_total_float, both_totals])
def test_a_loop_total_read_as_a_number_keeps_the_native_loop(model, dtype, caplog):
    w = np.array([0.5, -1.0, 2.0], dtype=dtype)
    sets = [(x,) if model is mean_loss_item else (x, w) for x in data(dtype)]
    with caplog.at_level(logging.DEBUG, logger="tracejit"):
        f = run_calls(model, sets, rtol=1e-5, atol=1e-5)
        # New data at the lengths just compiled: the value guard fails, NumPy's answer.
        fresh = [(x + 1,) if model is mean_loss_item else (x + 1, w) for x in data(dtype)]
        run_calls_on(f, model, fresh)
    assert "not compiled natively" not in caplog.text
    assert f.stats()["compiled_calls"] > 0, f.explain()


def run_calls_on(f, model, argument_sets):
    from real_model_checks import assert_same

    for arguments in argument_sets:
        with np.errstate(all="ignore"):
            assert_same(f(*arguments), model(*arguments), rtol=1e-5, atol=1e-5)
