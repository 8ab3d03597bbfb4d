"""A small im2col CNN (the lead's probe of session 20, as the books write it): a Conv class
filling ``col[:, :, y, x, :, :] = xp[:, :, y:y_max:stride, x:x_max:stride]`` in kh*kw
loops, BatchNorm with running statistics in attributes and a train flag, a reshape-max
pool cropping ``x[:, :, :H // k * k, :W // k * k]``, a stride-2 pad-0 second conv.

One compile per size bucket: the strided slice's stop ``y + 2*oh`` lies past the padded
size or not by the size's parity, with the same elements either way, and the sizes
derived from it (``(2*((h - 3) // 2) + 3) // 2`` is ``(h - 3) // 2 + 1``,
``144*p // (2*p)`` is 72) are identities of integer arithmetic. Each was a shape guard
splitting the bucket by parity (up to four programs per bucket and train flag).

Each call compares results and the objects' state with an eager twin; an exception eager
raises (a 0-size im2col) must be raised too.
"""

import numpy as np
from state_twins import run_twins

from tracejit.tracer.dims import DimExpr, SymInt, decide_by_bounds
from tracejit.tracer.indexing import normalize_slice


def im2col(x, kh, kw, stride, pad):
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    oh = (H + 2 * pad - kh) // stride + 1
    ow = (W + 2 * pad - kw) // stride + 1
    col = np.zeros((N, C, kh, kw, oh, ow), dtype=x.dtype)
    for y in range(kh):
        y_max = y + stride * oh
        for x_ in range(kw):
            x_max = x_ + stride * ow
            col[:, :, y, x_, :, :] = xp[:, :, y:y_max:stride, x_:x_max:stride]
    return col.transpose(0, 4, 5, 1, 2, 3).reshape(N * oh * ow, -1), oh, ow


class Conv:
    def __init__(self, W, b, stride=1, pad=1):
        self.W, self.b, self.stride, self.pad = W, b, stride, pad

    def forward(self, x):
        FN, C, FH, FW = self.W.shape
        N = x.shape[0]
        col, oh, ow = im2col(x, FH, FW, self.stride, self.pad)
        self.col = col
        out = col @ self.W.reshape(FN, -1).T + self.b
        return out.reshape(N, oh, ow, -1).transpose(0, 3, 1, 2)


class BatchNorm:
    def __init__(self, C):
        self.running_mean, self.running_var = np.zeros(C), np.ones(C)
        self.momentum, self.gamma, self.beta = 0.9, np.ones(C), np.zeros(C)

    def forward(self, x, train=True):
        if train:
            mu, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
            self.running_mean = self.momentum * self.running_mean + (1 - self.momentum) * mu
            self.running_var = self.momentum * self.running_var + (1 - self.momentum) * var
        else:
            mu, var = self.running_mean, self.running_var
        xn = (x - mu[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
        return self.gamma[None, :, None, None] * xn + self.beta[None, :, None, None]


def maxpool(x, k=2):
    N, C, H, W = x.shape
    x = x[:, :, : H // k * k, : W // k * k]
    return x.reshape(N, C, H // k, k, W // k, k).max(axis=(3, 5))


class Net:
    def __init__(self):
        rng = np.random.default_rng(0)
        self.c1 = Conv(rng.standard_normal((8, 3, 3, 3)) * 0.1, np.zeros(8))
        self.bn = BatchNorm(8)
        self.c2 = Conv(rng.standard_normal((16, 8, 3, 3)) * 0.1, np.zeros(16), stride=2, pad=0)

    def forward(self, x, train=True):
        h = np.maximum(self.bn.forward(self.c1.forward(x), train), 0)
        h = maxpool(h)
        h = self.c2.forward(h)
        return h.mean(axis=(2, 3))


def images(sizes, train, batch=2):
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((batch, 3, h, w)), train) for h, w in sizes]


# Every parity of both sides in the bucket [17, 32], at its ends and between.
BUCKET = [(17, 23), (31, 29), (18, 24), (20, 19), (32, 17), (25, 30), (22, 22), (29, 31)]


def test_sizes_of_every_parity_in_a_bucket_compile_once_per_train_flag():
    f = run_twins(Net, "forward", images(BUCKET, True) + images(BUCKET[::-1], False))
    stats = f.stats()
    # The first call's exact program, then the bucket's for each flag (was 13 compiles
    # here: up to 4 programs per bucket and flag, and the rest eager past max_variants).
    assert stats["compiles"] == 3, stats
    assert stats["compiled_calls"] == 2 * len(BUCKET) - 3, stats


def test_sizes_0_1_primes_odd_and_even_match_numpy_with_both_train_flags():
    sizes = [(17, 23), (1, 1), (2, 3), (5, 7), (6, 6), (7, 13), (8, 9), (11, 16), (13, 11),
             (0, 8), (3, 5), (37, 41), (64, 48), (40, 33)]
    run_twins(Net, "forward", images(sizes, True) + images(sizes[::-1], False))


def test_a_size_whose_sibling_guard_divides_by_zero_is_no_sibling():
    # The bucket [17, 32] program's guard divides by N*oh*ow; at 5 x 7 that is 0 and the
    # check whether the call is only another bucket of it raised ZeroDivisionError
    # (eager raises ValueError from the reshape).
    run_twins(Net, "forward", images([(17, 23), (31, 29), (5, 7), (4, 6)], True))


def test_a_strided_slice_stops_unclipped_when_no_element_lies_past_the_size():
    class Bucket:  # what a SymInt's comparisons read: its ranges, and guards (none here)
        ranges = {"s0": (17, 32)}

        def decide(self, symint, op, other):
            raise AssertionError(f"guarded {symint.expr} {op} {other}")

    s0, context = DimExpr.symbol("s0"), Bucket()
    for h in (17, 18, 31, 32):
        dim = SymInt(s0, h, context)
        oh = (dim - 3) // 2 + 1
        for y in range(3):
            start, limit, step, flipped = normalize_slice(slice(y, y + 2 * oh, 2), dim)
            count = (limit - start + step - 1) // step
            assert count.value == len(range(h)[y:y + 2 * oh.value:2]) == oh.value
            assert count.expr == oh.expr and not flipped


def test_floor_division_keeps_the_multiples_out_and_decides_by_the_remainder():
    s0 = DimExpr.symbol("s0")
    a = (s0 // 2 - 3) // 2
    assert (2 * a + 3) // 2 == a + 1 and (2 * a + 3) % 2 == 1
    p = a * a + 2 * a + 1
    assert (144 * p) // (2 * p) == 72 and (144 * p) % (2 * p) == 0
    ranges = {"s0": (17, 32)}
    assert decide_by_bounds(2 * a + 3 - s0 // 2, ">", ranges) is False
    assert decide_by_bounds(2 * a + 4 - s0 // 2, ">", ranges) is None  # the parity
    forms = [lambda n: (3 * n - 7) // 3, lambda n: (4 * n + 6) % 4, lambda n: (6 * n + 5) // -3,
             lambda n: ((n // 2 - 3) // 2 * 2 + 3) // 2, lambda n: (2 * n * n - 3) // 2,
             lambda n: (2 * ((n - 1) // 3) - n) % 2, lambda n: (10 * n + 3) % (5 * n + 1)]
    for form in forms:
        expr = form(s0)
        for value in range(-40, 41):  # as Python computes them, negatives too
            if value * 5 + 1:
                got = expr if isinstance(expr, int) else expr.evaluate({"s0": value})
                assert got == form(value), (str(expr), value)


def test_floor_relaxation_agrees_with_every_value_in_the_range():
    s0, s1 = DimExpr.symbol("s0"), DimExpr.symbol("s1")
    exprs = [3 * (s0 // 3) - s0, 2 * ((s0 + s1) // 2) - s1 - s0 + 1, (s0 // 2) // 3 * 6 - s0,
             5 * (s0 // 4) - s0, s0 // 2 - (s0 - 1) // 2]
    for low, high in ((0, 9), (5, 8), (17, 32), (2, 3)):
        ranges = {"s0": (low, high), "s1": (1, 4)}
        for expr in exprs:
            values = [expr.evaluate({"s0": v, "s1": w}) for v in range(low, high + 1)
                      for w in range(1, 5)]
            for op, compare in (("<", int.__lt__), ("<=", int.__le__), ("==", int.__eq__),
                                ("!=", int.__ne__), (">", int.__gt__), (">=", int.__ge__)):
                answer = decide_by_bounds(expr, op, ranges)
                if answer is not None:
                    assert all(compare(v, 0) == answer for v in values), (str(expr), op)
