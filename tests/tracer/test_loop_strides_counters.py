"""Loops real code writes that used to unroll once per length (issue 13): strided ranges
(``range(0, H - k + 1, stride)``), carried Python int counters (``col[idx] = ...; idx +=
1``), and the bucket rule that keeps lengths alone from reaching ``max_variants``.

Every call is compared with the plain function on copies of its inputs; compile counts
show one program per size bucket."""

import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.ops.control import loop_p
from tracejit.tracer.tracing import trace


def strided_rnn(x, h, W):
    for t in range(0, x.shape[0], 2):
        h = np.tanh(x[t] + h @ W)
    return h


def offset_stride_three(x):
    acc = np.zeros(x.shape[1])
    for t in range(1, x.shape[0] - 1, 3):
        acc = acc * 0.5 + x[t] * t
    return acc


def reversed_stride(x, h, W):
    for t in reversed(range(0, x.shape[0], 2)):
        h = np.tanh(x[t] + h @ W)
    return h


def negative_stride(x):
    out = np.zeros_like(x)
    for t in range(x.shape[0] - 1, -1, -2):
        out[t] = x[t] * 2.0 + 1.0
    return out


def strided_conv(x, w):
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    out = np.zeros((N, F, (H - HH) // 2 + 1, (W - WW) // 2 + 1))
    for i in range(0, H - HH + 1, 2):
        for j in range(0, W - WW + 1, 2):
            window = x[:, :, i:i + HH, j:j + WW]
            out[:, :, i // 2, j // 2] = np.tensordot(window, w, axes=([1, 2, 3], [1, 2, 3]))
    return out


def im2col_counter(x, k=3):
    N, C, H, W = x.shape
    oh, ow = H - k + 1, W - k + 1
    col = np.zeros((oh * ow, N * C * k * k))
    idx = 0
    for i in range(oh):
        for j in range(ow):
            col[idx] = x[:, :, i:i + k, j:j + k].ravel()
            idx += 1
    return col, idx


def counter_by_two(x):
    out = np.zeros(2 * x.shape[0] + 1)
    pos = 1
    for t in range(x.shape[0]):
        out[pos] = x[t].sum()
        pos += 2
    return out, pos


def strided_with_counter(x):
    """A counter beside a strided range: the output row is not ``t // 2`` but ``row``."""
    out = np.zeros(((x.shape[0] + 1) // 2, x.shape[1]))
    row = 0
    for t in range(0, x.shape[0], 2):
        out[row] = np.maximum(x[t], 0.0)
        row += 1
    return out


def counter_not_affine(x):
    out = np.zeros(x.shape[0])
    pos = 1
    for t in range(x.shape[0]):
        out[t] = x[t] * pos
        pos = pos * 2 % 7
    return out


def _assert_same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    if isinstance(want, int):
        assert got == want and type(got) is int
        return
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _sequence(length, rng, width=3):
    return rng.standard_normal((length, width))


CASES = {
    "strided_rnn": (strided_rnn, lambda n, rng: (
        _sequence(n, rng), rng.standard_normal(3), rng.standard_normal((3, 3)) * 0.4)),
    "offset_stride_three": (offset_stride_three, lambda n, rng: (_sequence(n, rng),)),
    "reversed_stride": (reversed_stride, lambda n, rng: (
        _sequence(n, rng), rng.standard_normal(3), rng.standard_normal((3, 3)) * 0.4)),
    "negative_stride": (negative_stride, lambda n, rng: (_sequence(n, rng),)),
    "counter_by_two": (counter_by_two, lambda n, rng: (_sequence(n, rng),)),
    "strided_with_counter": (strided_with_counter, lambda n, rng: (_sequence(n, rng),)),
}

LENGTHS = [40, 0, 1, 2, 3, 5, 7, 13, 17, 31, 33, 64, 97]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_at_every_length(name):
    function, make = CASES[name]
    jitted = tj.jit(function, cache="memory")
    rng = np.random.default_rng(len(name))
    for length in LENGTHS:
        args = make(length, rng)
        _assert_same(jitted(*args), function(*[np.copy(a) for a in args]))
    assert jitted.stats()["eager_calls"] == {}


@pytest.mark.parametrize("name", ["strided_rnn", "reversed_stride", "negative_stride",
                                  "counter_by_two", "strided_with_counter"])
def test_captured_once_per_bucket(name):
    """Within a bucket, one compile serves every length (before: one per length)."""
    function, make = CASES[name]
    jitted = tj.jit(function, cache="memory", dynamic=True)
    rng = np.random.default_rng(1)
    for length in range(33, 65):
        args = make(length, rng)
        _assert_same(jitted(*args), function(*[np.copy(a) for a in args]))
    stats = jitted.stats()
    assert stats["compiles"] == 1, jitted.explain()
    # the first call is the trace's, or (a loop's trips left pending) the program's
    assert stats["compiled_calls"] + stats["traced_calls"] == 32 and not stats["eager_calls"]


def test_strided_loop_is_one_loop_equation():
    rng = np.random.default_rng(2)
    traced = trace(strided_rnn, _sequence(20, rng), rng.standard_normal(3),
                   rng.standard_normal((3, 3)), dynamic=lambda i, a: {0: (17, 32)} if i == 0
                   else {})
    assert sum(eqn.prim is loop_p for eqn in traced.graph.equations) == 1


@pytest.mark.parametrize("size", [(5, 6), (7, 7), (9, 12), (12, 9), (16, 17), (3, 3)])
def test_strided_conv_matches_eager(size):
    rng = np.random.default_rng(sum(size))
    x = rng.standard_normal((2, 3, *size))
    w = rng.standard_normal((4, 3, 3, 3))
    jitted = tj.jit(strided_conv, cache="memory", dynamic=True)
    for _ in range(2):
        _assert_same(jitted(x, w), strided_conv(x, w))
    assert jitted.stats()["compiles"] == 1


def test_im2col_counter_compiles_once_per_bucket():
    rng = np.random.default_rng(3)
    jitted = tj.jit(im2col_counter, cache="memory", dynamic=True)
    for h, w in [(9, 10), (10, 12), (12, 9), (11, 11), (16, 13)]:  # all in bucket [9, 16]
        x = rng.standard_normal((1, 2, h, w))
        _assert_same(jitted(x), im2col_counter(x))
    assert jitted.stats()["compiles"] == 1, jitted.explain()


def test_im2col_counter_across_buckets():
    """Sizes whose product of dims only a shape guard bounds (``(H-2)(W-2) == 1`` is not
    decided by the ranges): the loop body verifies with the outer graph's guards."""
    rng = np.random.default_rng(4)
    jitted = tj.jit(im2col_counter, cache="memory")
    for h, w in [(9, 10), (12, 13), (5, 6), (3, 3), (4, 7), (20, 33)]:
        x = rng.standard_normal((1, 2, h, w))
        _assert_same(jitted(x), im2col_counter(x))
    assert jitted.stats()["eager_calls"] == {}


def test_counter_that_is_not_affine_unrolls_and_says_why():
    """``pos = pos * 2 % 7`` is no affine function of the index: the loop unrolls (each
    length is its own variant), results stay right, and the limit's warning names the
    loop."""
    jitted = tj.jit(counter_not_affine, cache="memory", max_variants=3)
    rng = np.random.default_rng(8)
    with pytest.warns(RuntimeWarning, match="loop at .*test_loop_strides_counters.py:.* "
                                            "unrolled: `pos` is an int that does not move"):
        for length in [4, 5, 6, 7, 9, 11, 12]:
            x = rng.standard_normal(length)
            _assert_same(jitted(x), counter_not_affine(np.copy(x)))
    assert "`pos` is an int that does not move by the same amount" in jitted.explain()


def test_lengths_alone_never_reach_max_variants():
    """Every new bucket of a sequence length is a compile, but it never counts toward
    max_variants: no warning, no eager calls, even past the limit."""
    function, make = CASES["strided_rnn"]
    jitted = tj.jit(function, cache="memory", max_variants=2)
    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for length in [3, 6, 12, 24, 48, 96, 200, 400, 5, 700]:
            args = make(length, rng)
            _assert_same(jitted(*args), function(*args))
    stats = jitted.stats()
    assert stats["eager_calls"] == {}
    assert stats["compiles"] <= 10


def test_other_changes_still_count_toward_max_variants():
    """A new dtype is no bucket sibling: past the limit it runs eagerly, with the warning."""
    jitted = tj.jit(strided_rnn, cache="memory", max_variants=1)
    rng = np.random.default_rng(6)
    x, h, W = _sequence(9, rng), rng.standard_normal(3), rng.standard_normal((3, 3))
    jitted(x, h, W)
    with pytest.warns(RuntimeWarning, match="max_variants=1"):
        got = jitted(x.astype(np.float32), h.astype(np.float32), W.astype(np.float32))
    _assert_same(got, strided_rnn(x.astype(np.float32), h.astype(np.float32),
                                  W.astype(np.float32)))
    assert jitted.stats()["eager_calls"] == {"variant limit": 1}


MODELS = {  # lambdas inside a literal spanning lines: the source is read from the file
    "sum": lambda x: counter_by_two(x),
    "col": lambda x: im2col_counter(
        x),
}


def test_lambda_in_multiline_literal_is_rewritten():
    rng = np.random.default_rng(7)
    jitted = tj.jit(MODELS["col"], cache="memory", fallback="raise")
    x = rng.standard_normal((1, 2, 6, 7))
    _assert_same(jitted(x), im2col_counter(x))
    jitted = tj.jit(MODELS["sum"], cache="memory", fallback="raise")
    x = _sequence(11, rng)
    _assert_same(jitted(x), counter_by_two(x))
