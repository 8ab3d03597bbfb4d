"""Session review 23b: 9c69fb0's integer arithmetic on dims (floor division and modulo by
a positive int keeping the multiples out, polynomial exact quotients, decide_by_bounds'
remainder relaxation) and strided slices stopping one past their last element.

A shape guard decides for every size of a bucket, so an identity or a decision that is
wrong for one value gives wrong shapes or rows at sizes the trace never saw. Random
expressions (nested floors and mods, products of symbols, negative and unit divisors,
negative values) are checked against Python's ints; strided slices with starts and stops
from dims (steps 2, 3, 5 and negative) run over every size of the bucket [17, 32], both
orders, against NumPy, with one bucket program. 9c69fb0 held (no wrong result found); the
sweep found the np.array_split-like last chunk ``x[2*c : 3*c]``, ``c = (n + 2) // 3``,
guarding ``3*c > n`` (two programs per bucket, by ``n % 3``) where clipping to ``n`` is
right either way: ``indexing._clamp`` now asks what holds for the whole bucket first.
"""

import operator
import random

import numpy as np
import pytest
from state_twins import difference, outcome

import tracejit as tj
from tracejit.tracer.dims import DimExpr, decide_by_bounds, floordiv, mod

NAMES = ("a", "b", "c")
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}


def _divide(op, x, y):
    if isinstance(x, int) and isinstance(y, int):
        return x // y if op == "//" else x % y
    return floordiv(x, y) if op == "//" else mod(x, y)


def _expression(rng, depth):
    """``(dim expression, the same as a function of Python ints)``."""
    if depth == 0 or rng.random() < 0.3:
        if rng.random() < 0.5:
            name = rng.choice(NAMES)
            return DimExpr.symbol(name), lambda env: env[name]
        c = rng.randint(-7, 7)
        return c, lambda env: c
    (x, fx), (y, fy) = _expression(rng, depth - 1), _expression(rng, depth - 1)
    op = rng.choice(["+", "-", "*", "*c", "//k", "%k", "//k", "%k", "//", "%"])
    if op == "+":
        return x + y, lambda env: fx(env) + fy(env)
    if op == "-":
        return x - y, lambda env: fx(env) - fy(env)
    if op == "*":
        return x * y, lambda env: fx(env) * fy(env)
    if op == "*c":
        c = rng.randint(-6, 6)
        return x * c, lambda env: fx(env) * c
    if op in ("//k", "%k"):
        k, op = rng.choice([1, 2, 3, 5, 7, 12, 144, -2, -3]), op[:-1]
        fy = lambda env: k  # noqa: E731
        y = k
    elif isinstance(y, int) and y == 0:
        y, fy = 3, lambda env: 3
    return _divide(op, x, y), (lambda env: fx(env) // fy(env)) if op == "//" else (
        lambda env: fx(env) % fy(env))


@pytest.mark.parametrize("seed", range(4))
def test_dim_arithmetic_and_decisions_agree_with_python_ints(seed):
    rng = random.Random(seed)
    for _ in range(600):
        expr, function = _expression(rng, 4)
        for _ in range(20):
            env = {name: rng.randint(-1000, 1000) for name in NAMES}
            try:
                want = function(env)
            except ZeroDivisionError:
                continue
            got = expr if isinstance(expr, int) else expr.evaluate(env)
            assert got == want, (str(expr), env)
        if isinstance(expr, int):
            continue
        ranges = {}
        for name in NAMES:
            low = rng.choice([0, 1, 2, 3, 17])
            ranges[name] = (low, low + rng.choice([0, 1, 5, 15, 40]))
        for op, compare in _COMPARE.items():
            answer = decide_by_bounds(expr, op, ranges)
            if answer is None:
                continue
            for _ in range(40):
                env = {name: rng.randint(*ranges[name]) for name in NAMES}
                try:
                    value = function(env)
                except ZeroDivisionError:
                    continue
                assert compare(value, 0) == answer, (str(expr), op, ranges, env)


SLICES = {
    "step 3 stop one past a multiple": lambda x: x[2:4 + 3 * ((x.shape[0] - 1) // 3):3] + 1,
    "step 2 stop past the size from the last index": lambda x: x[x.shape[0] - 1:2 * x.shape[0]:2],
    "step 5 from a negative start": lambda x: x[-5:x.shape[0] + 3:5] * 2,
    "padded stride 2 (conv)": lambda x: np.pad(x, 1)[1:1 + 2 * ((x.shape[0] - 1) // 2 + 1):2],
    "dilated stride 3": lambda x: np.pad(x, 2)[4:4 + 3 * ((x.shape[0] - 1) // 3 + 1):3],
    "reversed by 3 then by 2": lambda x: (x[::-3][::-2] * 2,
                                          x[-2::-3][: (x.shape[0] - 2) // 6 + 1:2]),
    "array_split-like thirds": lambda x: [x[i * ((x.shape[0] + 2) // 3):(i + 1) * (
        (x.shape[0] + 2) // 3)].sum() for i in range(3)],
}


@pytest.mark.parametrize("name", SLICES)
def test_strided_slices_over_every_size_of_a_bucket_match_numpy(name):
    function = SLICES[name]
    f = tj.jit(function, cache="memory")
    rng = np.random.default_rng(3)
    sizes = list(range(17, 33))
    for n in sizes + sizes[::-1]:
        x = rng.standard_normal(n)
        assert difference(outcome(f, (x,)), outcome(function, (x,)), "result", 1e-12) is None, n
    # The first call's exact program, then one for the bucket (none raised).
    assert f.stats()["compiled_calls"] == 2 * len(sizes) - 2, f.stats()
    assert f.stats()["compiles"] == 2, f.stats()
