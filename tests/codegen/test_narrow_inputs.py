"""Arguments of narrow integer dtypes (uint8 images, int16 audio): compiled when every use
converts them (``codegen/narrow_inputs.py``), eager where a use computes in the narrow
dtype; either way the result is NumPy's, extremes included. float16 arguments run
eagerly (the trace's composites would round float16 unlike NumPy)."""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit

DTYPES = ["uint8", "int8", "int16", "uint16", "uint32", "uint64"]

CONVERTING = {
    "astype float32": lambda x: x.astype(np.float32) / 255.0,
    "astype int64": lambda x: x.astype(np.int64) * 3,
    "astype bool": lambda x: x.astype(bool),
    "times float32": lambda x: x * np.float32(0.5),
    "transposed, then astype": lambda x: x.transpose(0, 3, 1, 2).astype(np.float32) - 1,
    "strided slice": lambda x: x[:, ::-2, 1:].astype(np.float64),
    "normalized": lambda x: (x - x.mean()) / (x.std() + 1e-5),
    "mask of the converted": lambda x: np.where(x.astype(np.float32) > 10, 1.0, 0.0),
    "returned as is": lambda x: (x, x[0], np.exp(x.astype(np.float32) / 100)),
}
# NumPy computes these in the narrow dtype (wrapping, unsigned comparison, uint64 sums):
# compiled code does not, so they run eagerly
IN_THE_NARROW_DTYPE = {
    "add": lambda x: x + 1,
    "compare": lambda x: (x > 100).mean(),
    "sum": lambda x: x.sum(),
    "max": lambda x: x.max(axis=-1),
}


def _images(dtype, shape=(2, 5, 7, 3)):
    """Values over the dtype's whole range and its extremes."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -2**40), min(info.max, 2**40), size=shape,
                     endpoint=True, dtype=np.uint64 if dtype == np.uint64 else np.int64)
    x = x.astype(dtype)
    x.flat[:2] = [info.max, info.min]
    return x


def _assert_same(result, expected):
    results = result if isinstance(result, tuple) else (result,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(results, expected, strict=True):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6) if got.dtype.kind == "f" else (
            np.testing.assert_array_equal(got, want))


def _calls(function, x, times=3):
    jitted = jit(function, cache=False)
    with np.errstate(all="ignore"):
        expected = function(x)
        for _ in range(times):
            _assert_same(jitted(x), expected)
    return jitted.stats()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CONVERTING))
def test_an_argument_every_use_converts_is_compiled(dtype, name):
    stats = _calls(CONVERTING[name], _images(dtype))
    assert stats["compiled_calls"] >= 2 and not stats["eager_calls"], stats


@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint64"])
@pytest.mark.parametrize("name", list(IN_THE_NARROW_DTYPE))
def test_a_use_computing_in_the_narrow_dtype_runs_eagerly(dtype, name):
    stats = _calls(IN_THE_NARROW_DTYPE[name], _images(dtype))
    assert stats["compiled_calls"] == 0 and stats["eager_calls"], stats
    assert "computes in" in " ".join(stats["eager_reasons"].values())


def test_float16_arguments_run_eagerly():
    x = np.linspace(-3, 3, 12).astype(np.float16)
    stats = _calls(lambda x: x.astype(np.float32).mean(), x)
    assert stats["compiled_calls"] == 0 and "float16" in " ".join(stats["eager_reasons"].values())


def _centered(img):
    shifted = img - 128  # computes in int16
    return shifted * 2


def _halved(x):
    y = (x * 2).astype(np.float16)  # a float16 result
    return y


@pytest.mark.parametrize("function, argument, line", [
    (_centered, np.arange(12, dtype=np.int16), "shifted = img - 128"),
    (_halved, np.ones(3), "y = (x * 2).astype(np.float16)"),
])
def test_a_refusal_names_the_users_line_first(function, argument, line):
    """Codegen's refusals start with the line that made the value (they named none)."""
    import linecache

    with pytest.raises(Exception) as raised:
        jit(function, fallback="raise", cache=False)(argument)
    where, _, _ = str(raised.value).partition(": ")
    file, _, number = where.rpartition(":")
    assert file == __file__ and line in linecache.getline(file, int(number)), raised.value
