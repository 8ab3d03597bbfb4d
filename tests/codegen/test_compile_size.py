"""How much IR a long program hands LLVM: a pointwise loop body past
``FOLD_TAIL_INSTRUCTIONS`` is marked to be vectorized with its tail folded (one copy of
the body, masked, instead of a vector body, a vector epilogue and a scalar remainder),
and the results still equal NumPy's at sizes that leave every kind of remainder.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from compiled_checks import bucket_sizes, compiled

HINT = "llvm.loop.vectorize.predicate.enable"


def chain(length, offset=None):
    """``length`` pointwise ops, one tanh in five (benchmarks/compile_scaling.py's chain);
    with ``offset``, every tenth op adds it (a row-broadcast operand: nested loops)."""

    def function(x, *row):
        steps = [lambda v: v * 0.999, lambda v: v + 0.01, np.tanh,
                 lambda v: np.maximum(v, -0.5), lambda v: v - 0.02]
        for index in range(length):
            x = steps[index % len(steps)](x)
            if row and index % 10 == 9:
                x = x + row[0]
        return x

    return function


def values(shape, dtype, seed):
    return (np.random.default_rng([seed, *shape]).standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("size", [17, 1000])
def test_long_flat_chain_folds_its_tail_and_equals_numpy(dtype, size):
    function = chain(90)
    program = compiled(("compile size", "flat", dtype, size), function,
                       values((size,), dtype, 0))
    assert program.kernel_count == 1
    assert program.llvm_ir.count(HINT) == 1  # the one metadata node, on the kernel's loop
    for run, resized in enumerate(bucket_sizes(size)):
        x = values((resized,), dtype, run + 1)
        (actual,) = program(x)
        np.testing.assert_allclose(actual, function(x), rtol=2e-5 if dtype == np.float32
                                   else 1e-12, atol=1e-6)


def test_long_broadcast_chain_folds_its_inner_loop_and_equals_numpy():
    function = chain(90, offset=True)
    x, row = values((7, 37), np.float32, 0), values((37,), np.float32, 1)
    program = compiled(("compile size", "broadcast"), function, x, row)
    assert program.llvm_ir.count(HINT) == 1
    for run, columns in enumerate(bucket_sizes(37)):
        x, row = values((7, columns), np.float32, run + 2), values((columns,), np.float32, 3)
        (actual,) = program(x, row)
        np.testing.assert_allclose(actual, function(x, row), rtol=2e-5, atol=1e-6)


def test_short_chain_keeps_its_epilogues():
    """A small body compiles fast either way; unmasked it runs faster."""
    program = compiled(("compile size", "short"), chain(10), values((100,), np.float32, 0))
    assert HINT not in program.llvm_ir


WIDTH = "llvm.loop.vectorize.width"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("size", [4096, 1 << 20])
def test_a_flat_chain_whole_vectors_cover_names_its_width_and_drops_the_epilogue(dtype, size):
    """Static size, a multiple of ALIGNED_CHUNK: the loop names its vector width, LLVM emits
    no vector epilogue nor scalar remainder, the pool's chunks stay whole vectors (1 << 20
    runs in parallel)."""
    function = chain(10)
    x = values((size,), dtype, 0)
    program = compiled(("compile size", "width", dtype, size), function, x, dynamic=False)
    lanes = program.llvm_ir.split(WIDTH)[1].split("}")[0]
    assert program.llvm_ir.count(WIDTH) == 1 and HINT not in program.llvm_ir
    assert int(lanes.split()[-1]) * np.dtype(dtype).itemsize * 8 in (128, 256, 512)
    assert "vec.epilog" not in program.optimized_ir
    # its bounds are known multiples of ALIGNED_CHUNK: no scalar remainder either (tanh's
    # division appears in the vector loop only)
    assert "fdiv float " not in program.optimized_ir
    assert "fdiv double " not in program.optimized_ir
    for seed in range(2):
        x = values((size,), dtype, seed + 1)
        (actual,) = program(x)
        np.testing.assert_allclose(actual, function(x), rtol=2e-5 if dtype == np.float32
                                   else 1e-12, atol=1e-6)


@pytest.mark.parametrize("size", [1000, 100003])
def test_a_flat_chain_with_a_remainder_keeps_its_vector_epilogue(size):
    """A remainder runs on every call: its vector epilogue stays (4% faster at 1000)."""
    program = compiled(("compile size", "remainder", size), chain(10),
                       values((size,), np.float32, 0), dynamic=False)
    assert WIDTH not in program.llvm_ir
    assert "vec.epilog" in program.optimized_ir


INTERLEAVE = "llvm.loop.interleave.count"


@pytest.mark.parametrize("size", [4096, 1000, 100003])
def test_a_flat_math_loop_runs_two_vectors_an_iteration(size):
    """A flat loop of one math function (tanh: a long dependent chain a vector) runs two
    vectors an iteration (``INTERLEAVE_INSTRUCTIONS``); a short body (x * 2 + 1) is left
    to LLVM's cost model. The results equal NumPy's at sizes with and without remainders."""
    x = values((size,), np.float32, 0)
    program = compiled(("compile size", "interleave", size), lambda v: np.tanh(v), x,
                       dynamic=False)
    assert program.llvm_ir.count(INTERLEAVE) == 1
    assert program.llvm_ir.split(INTERLEAVE)[1].split("}")[0].split()[-1] == "2"
    # the vector loop's own stores (LLVM may keep a vector epilogue for a remainder: the
    # float32 tanh's tables are a call its cost model finds cheap, ``math_tanh``)
    body = re.split(r"\n(?=[\w.]+:)", program.optimized_ir.split("\nvector.body:", 1)[-1])[0]
    lanes = re.findall(r"store <(\d+) x float>", body)
    widest = max(lanes, key=int)
    assert lanes.count(widest) == 2 or int(widest) < 4, lanes  # scalar-only targets: none
    short = compiled(("compile size", "no interleave", size), lambda v: v * 2 + 1, x,
                     dynamic=False)
    assert INTERLEAVE not in short.llvm_ir
    for seed in range(2):
        x = values((size,), np.float32, seed + 1)
        (actual,) = program(x)
        np.testing.assert_allclose(actual, np.tanh(x), rtol=3e-7, atol=0)


def _unrolled_backward(dH, C):
    dH, dC = dH.copy(), np.zeros(C.shape)
    for t in reversed(range(dH.shape[0])):
        dC[t] += dH[t]
        if t > 0:
            dC[t - 1] += C[t] * dC[t]
            dH[t - 1, :] += dC[t]
    return dH, dC


def test_llvm_prints_no_remarks_on_the_users_stderr(capfd):
    """A vector width named on a loop LLVM cannot vectorize (the inner loops of this
    unrolled backward's kernels) made LLVM print 'remark: loop not vectorized' to stderr."""
    import tracejit as tj

    rng = np.random.default_rng(5)
    f = tj.jit(_unrolled_backward, cache=False)
    for n in (3, 4, 5, 7):
        for _ in range(2):
            dH, C = rng.standard_normal((n, 2)), rng.standard_normal((n, 2))
            got, want = f(dH, C), _unrolled_backward(dH, C)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    assert "not vectorized" not in capfd.readouterr().err


def _sgd_update(w, g):
    return w - 0.1 * g


def _row_sums(x):
    return np.exp(x).sum(axis=1)


@pytest.mark.parametrize("function, shape", [(_sgd_update, (10,)), (_row_sums, (512, 10))],
                         ids=["update of 10", "row sums of 512x10"])
def test_a_static_kernel_below_the_pool_threshold_has_no_split_path(function, shape):
    """Its entry calls the loop over the whole extent with constant bounds, so LLVM knows
    the trip count (the MLP step's updates of its biases and its 10-class row kernels: the
    module's LLVM time 190 -> 171 ms of CPU); no trampoline for the pool is emitted."""
    from tracejit.codegen.parallel import PARALLEL_THRESHOLD

    arguments = [values(shape, np.float32, seed) for seed in range(
        function.__code__.co_argcount)]
    program = compiled(("compile size", "never split", function.__name__), function,
                       *arguments, dynamic=False)
    assert np.prod(shape) < PARALLEL_THRESHOLD
    assert "_chunk" not in program.llvm_ir and "tj_parallel_for" not in program.llvm_ir
    (actual,) = program(*arguments)
    np.testing.assert_allclose(actual, function(*arguments), rtol=1e-6)
    if function is _sgd_update:  # the same operations on the same operands
        np.testing.assert_array_equal(actual, function(*arguments))


def test_a_static_kernel_the_pool_may_split_keeps_its_split_path():
    size = 1 << 16  # PARALLEL_THRESHOLD elements and more: split when the pool has threads
    w, g = values((size,), np.float32, 0), values((size,), np.float32, 1)
    program = compiled(("compile size", "may split"), _sgd_update, w, g, dynamic=False)
    assert "_chunk" in program.llvm_ir
    (actual,) = program(w, g)
    np.testing.assert_array_equal(actual, _sgd_update(w, g))
