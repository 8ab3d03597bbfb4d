"""Narrow integer values made in the function (``np.clip(img * 255, 0, 255).astype(np.uint8)``,
the last line of much image code; ``out[1:] = u`` into a uint8 buffer): the kernel computes
in the wide dtype and stores the cast's bytes (``codegen/narrow_results.py``). A float
outside the target's ``[min, max + 1)`` or NaN (where NumPy's cast is the platform's) is a
side exit: the call runs eagerly. Each call is compared with eager NumPy bit for bit
(values, dtype, shape, type, and the arguments afterwards)."""

from __future__ import annotations

import numpy as np

from tracejit import jit
from tracejit.codegen.narrow_results import NARROW_RANGE_REASON

# truncated toward zero by NumPy and by the kernel alike
IN_RANGE = [0.0, 255.0, 255.999, -0.0, 0.5, 1.5, 127.5, 254.9999]
# NumPy's cast is C's undefined behaviour here (or a wrap): these run eagerly
OUT_OF_RANGE = [256.0, -0.5, np.nan, np.inf, -np.inf, 300.0, -1.0]


def _same(got, want):
    gots = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        assert type(g) is type(w) and g.dtype == w.dtype and g.shape == w.shape, (g, w)
        assert np.array_equal(g, w, equal_nan=g.dtype.kind == "f"), (g, w)


def _run(f, function, *args):
    """``f(*args)`` and ``function(*args)`` (on copies) agree, and so do the arguments."""
    copies = [[a.copy() if isinstance(a, np.ndarray) else a for a in args] for _ in "ab"]
    mine, theirs = copies
    with np.errstate(all="ignore"):  # eager warns 'invalid value encountered in cast'
        _same(f(*mine), function(*theirs))
    _same(*(tuple(a for a in side if isinstance(a, np.ndarray)) for side in copies))


def _compiled(f, calls):
    """Every call ran compiled code (the first may be its trace)."""
    stats = f.stats()
    return (stats["calls"] == calls and not stats["eager_calls"]
            and stats["compiled_calls"] + stats["traced_calls"] == calls)


def to_uint8(img):
    return np.clip(img * 255, 0, 255).astype(np.uint8)


def as_uint8(x):
    return x.astype(np.uint8)


def test_a_clipped_image_made_uint8_compiles_float64_and_float32():
    f = jit(to_uint8, cache=False)
    rng = np.random.default_rng(0)
    calls = 0
    for dtype in (np.float64, np.float32):
        image = rng.random((3, 4)).astype(dtype)
        image[0, :3] = [0.0, 1.0, 2.0]  # 255 and the clip's edge
        for x in (image, image, image[:, ::-2], image.T):  # non-contiguous too
            _run(f, to_uint8, x)
            calls += 1
    assert _compiled(f, calls), f.explain()


def test_in_range_values_and_edges_truncate_as_numpy_does():
    f = jit(as_uint8, cache=False)
    x = np.array(IN_RANGE)
    for args in (x, x, x.astype(np.float32), x.astype(np.float32), x[::-3], x[:1], x[:0]):
        _run(f, as_uint8, args)
    assert _compiled(f, 7), f.explain()


def test_a_float_out_of_range_or_nan_runs_eagerly_and_the_next_call_compiles():
    f = jit(as_uint8, cache=False)
    for dtype in (np.float64, np.float32):
        good = np.array([1.5, 200.25, 3.0], dtype)
        _run(f, as_uint8, good)
        _run(f, as_uint8, good)
        for value in OUT_OF_RANGE:
            bad = good.copy()
            bad[2] = value
            before = f.stats()["eager_calls"].get(NARROW_RANGE_REASON, 0)
            _run(f, as_uint8, bad)
            assert f.stats()["eager_calls"].get(NARROW_RANGE_REASON, 0) == before + 1, (
                value, f.stats())
        compiled = f.stats()["compiled_calls"]
        _run(f, as_uint8, good)
        assert f.stats()["compiled_calls"] == compiled + 1


def integers(x, y):
    # NumPy keeps the low bits: exact, no check
    return (x.astype(np.uint8), np.uint8(x * 3), x.astype("int8"), (y * 7).astype(np.int16),
            (y - 3).astype(np.uint16), (x > 0).astype(np.uint8))


def test_integers_wrap_around_as_numpy_does():
    f = jit(integers, cache=False)
    x = np.array([0, 1, 127, 128, 255, 256, 300, -1, -129, -300, 2**40 + 5, -2**40 - 3])
    y = np.array([0, 1, 5000, 40000, -40000, 2**31 - 1, -2**31], np.int32)
    for args in ((x, y), (x, y), (x[::-2], y[:1]), (x[:1], y[::3])):
        _run(f, integers, *args)
    assert _compiled(f, 4), f.explain()


def several(x):
    """Two narrow results of one cast, one of a reduction, and a float result."""
    u = (x * 10).astype("uint8")
    return u, u, x.sum(axis=0).astype(np.uint8), x * 2


def test_narrow_results_beside_others_and_of_reductions():
    f = jit(several, cache=False)
    x = np.random.default_rng(1).random((3, 5)) * 20
    for args in (x, x, x[:, ::2]):
        _run(f, several, args)
    assert _compiled(f, 3), f.explain()


def fill(img, x):
    """In place into a uint8 argument: a masked write and a slice write (where and pad of
    uint8 values: moves, no arithmetic in uint8)."""
    before = img.astype(np.float64) * 2  # read first: a write escaping early would show
    img[x > 0.5] = 0
    img[1:] = x[1:] * 255
    return before


def fresh(x, s):
    out = np.zeros(x.shape, np.uint8)
    out[1:] = (x[1:] * 10).astype(np.uint8)
    return np.where(x > 0.5, out, 255), np.where(x > 0.5, s, -128)


def test_narrow_buffers_filled_in_place_compile_and_exit_before_writing():
    f = jit(fill, cache=False)
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    x = rng.random((3, 4))
    for _ in range(2):
        _run(f, fill, img, x)
    assert _compiled(f, 2), f.explain()
    x[2, 1] = 1.5  # 382.5: out of range after the masked write, nothing escapes
    _run(f, fill, img, x)
    assert f.stats()["eager_calls"] == {NARROW_RANGE_REASON: 1}, f.explain()
    g = jit(fresh, cache=False)
    s = rng.integers(-128, 128, (3, 4)).astype(np.int8)
    for _ in range(2):
        _run(g, fresh, rng.random((3, 4)) * 20, s)
    assert _compiled(g, 2), g.explain()


def used_further(x):
    return x.astype(np.uint8) + 1  # wraps at 256 in uint8


def viewed(x):
    return x.astype(np.uint8).T


def test_a_narrow_value_read_again_runs_eagerly_with_numpy_results():
    for function in (used_further, viewed):
        f = jit(function, cache=False)
        x = np.array([[255.5, 3.0], [1.0, 0.0]])
        for _ in range(3):
            _run(f, function, x)
        assert f.stats()["compiled_calls"] == 0 and "not compiled" in f.stats()["eager_calls"]


def halved(x, n):
    u = x.astype(np.uint8)
    for t in range(n):
        u = (u * 0.5 + 3 * (t % 2) * x).astype(np.uint8)  # uint8 carried from trip to trip
    return u


def test_a_loop_carrying_a_narrow_value_compiles_and_exits_out_of_range():
    """A captured loop's body program stores the narrow carry as a result does (the loop
    ran its body in the NumPy interpreter before); a trip out of range exits eagerly."""
    f = jit(halved, cache=False)
    x = np.array([1.0, 40.0, 17.5, 0.0])
    for args in ((x, 40), (x, 41)):
        _run(f, halved, *args)
    assert _compiled(f, 2), f.explain()
    _run(f, halved, x * 3, 40)  # 3 * 120 = 360 at an odd trip: NumPy's cast is the platform's
    assert f.stats()["eager_calls"], f.explain()
