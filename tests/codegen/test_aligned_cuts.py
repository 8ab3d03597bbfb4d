"""Long expressions are cut where the program repeats (``codegen/schedule.py``
``_Repeats``): the kernels of a periodic chain are one function, so lowering and LLVM
run once for them (issue 16: a 1000-op chain was 11 kernels and 6 functions); the cuts
still bound every kernel (the program's last few equations may join the last one), and
results equal NumPy's.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from compiled_checks import bucket_sizes, compiled

from tracejit import tracer
from tracejit.codegen.schedule import MAX_INLINED, TAIL_EQUATIONS, schedule


def periodic_chain(length, steps):
    def function(x):
        for index in range(length):
            x = steps[index % len(steps)](x)
        return x

    return function


FIVE = [lambda v: v * 0.999, lambda v: v + 0.01, np.tanh,
        lambda v: np.maximum(v, -0.5), lambda v: v - 0.02]
SEVEN = [lambda v: v * 0.98, np.sin, lambda v: v + 0.5, lambda v: np.abs(v),
         lambda v: v - 0.25, np.cos, lambda v: np.minimum(v, 2.0)]


def irregular_chain(length):
    """No period: each op picked from a seeded draw."""
    steps = FIVE + SEVEN
    picks = [int(pick) for pick in np.random.default_rng(length).integers(0, len(steps), length)]

    def function(x):
        for pick in picks:
            x = steps[pick](x)
        return x

    return function


def values(size, seed):
    return np.random.default_rng([seed, size]).standard_normal(size).astype(np.float32)


def kernel_sizes(function, x, dynamic=False):
    traced = tracer.trace(function, x, dynamic=dynamic)
    plan = schedule(traced.graph)
    return [len(plan.scheduler.inlined(kernel.root)) + 1 for kernel in plan.kernels]


def functions_of(program):
    return set(re.findall(r'define internal void @"?(\w+)_impl"?\(', program.llvm_ir))


@pytest.mark.parametrize("length, steps, most", [
    (1000, FIVE, 1),   # 20 kernels of 50: one function
    (333, FIVE, 2),    # 95, 95, 95 and the rest
    (100, FIVE, 1),    # one kernel: the last 4 ops join it (95 + 5 cost LLVM more)
    (110, FIVE, 2),    # 95 and 15 (two of 55 would be emitted unfolded: more LLVM time)
    (700, SEVEN, 2),
])
def test_a_periodic_chain_is_cut_into_repeating_kernels(length, steps, most):
    function = periodic_chain(length, steps)
    x = values(4096, 0)
    sizes = kernel_sizes(function, x, dynamic=True)  # as compiled: bucketed
    assert max(sizes) <= MAX_INLINED + 1 + TAIL_EQUATIONS and sum(sizes) == length, sizes
    assert sizes.count(max(sizes)) >= len(sizes) - 1, sizes
    program = compiled(("aligned cuts", length, len(steps)), function, x)
    assert program.kernel_count == len(sizes)
    assert len(functions_of(program)) <= most, functions_of(program)
    for run, size in enumerate(bucket_sizes(4096)):
        x = values(size, run + 1)
        np.testing.assert_allclose(program(x)[0], function(x), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("length, size, sizes", [
    (100, 4096, [10] * 10),  # whole vectors: the body is emitted once, LLVM runs once
    (100, 1000, [100]),      # a remainder: one folded body costs LLVM less than 10 unfolded
    (100, 64, [10] * 10),
    (30, 4096, [10] * 3),    # past LATENCY_COST at 14 ops (3 tanh): cut where it repeats
    (13, 4096, [13]),        # cost 40: one kernel
    (25, 4096, [25]),        # no repeating length of 7-14 divides 25: one kernel
    (333, 4096, [95, 95, 95, 48]),  # nor 333: cut at the size limit, as before
])
def test_an_even_split_is_taken_where_whole_vectors_cover_the_elements(length, size, sizes):
    """A long chain in whole vectors is cut into repeating kernels of at most
    ``LATENCY_COST`` work each (schedule ``_latency_bound``): they share one function, so
    LLVM optimizes 10 ops, not 100 (the 100-op row of benchmarks/compile_scaling.py), and
    the short body runs faster. Where a remainder follows the vector loop (a size aligned
    chunks do not cover, or a bucketed one), the short body would be emitted three times,
    so the chain stays one kernel with its tail folded."""
    function = periodic_chain(length, FIVE)
    x = values(size, 0)
    assert kernel_sizes(function, x) == sizes
    program = compiled(("aligned cuts", "even split", length, size), function, x,
                       dynamic=False)
    assert program.kernel_count == len(sizes)
    assert len(functions_of(program)) == len(set(sizes)), functions_of(program)
    for seed in range(3):
        x = values(size, seed + 1)
        np.testing.assert_allclose(program(x)[0], function(x), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("length", [200, 500])
def test_an_irregular_chain_is_still_bounded_and_equals_numpy(length):
    function = irregular_chain(length)
    x = values(1000, 0)
    sizes = kernel_sizes(function, x)
    assert max(sizes) <= MAX_INLINED + 1 + TAIL_EQUATIONS and sum(sizes) == length, sizes
    program = compiled(("aligned cuts", "irregular", length), function, x)
    for run, size in enumerate(bucket_sizes(1000)):
        x = values(size, run + 1)
        np.testing.assert_allclose(program(x)[0], function(x), rtol=2e-5, atol=1e-6)


def test_the_first_kernel_reads_the_input_and_still_shares_the_function():
    """The first kernel reads the argument, the others the previous kernel's buffer: both
    are buffers to the kernel, so the cut after the first counts them as the same."""
    function = periodic_chain(500, FIVE)
    program = compiled(("aligned cuts", "first"), function, values(64, 0))
    assert program.kernel_count == 10 and len(functions_of(program)) == 1
    x = values(64, 1)
    np.testing.assert_allclose(program(x)[0], function(x), rtol=2e-5, atol=1e-6)


def running_sum(x):
    """``total`` reaches every step's ``state`` by two paths: a buffer for one state does
    not end the expression (the cut there would only add a kernel)."""
    state, total = np.zeros_like(x[:, 0]), np.zeros_like(x[:, 0])
    for step in range(x.shape[1]):
        state = np.tanh(x[:, step] + 0.5 * state)
        total = total + state
    return total


def test_an_expression_reached_by_two_paths_gets_no_extra_kernels():
    x = values(5 * 256, 0).reshape(5, 256)
    traced = tracer.trace(running_sum, x, dynamic=False, capture_loops=False)
    plan = schedule(traced.graph)
    sizes = [len(plan.scheduler.inlined(kernel.root)) + 1 for kernel in plan.kernels]
    # Cuts that left the sum's expression long (the first try) made 48 kernels, the old
    # cut 40; each kernel must take half a kernel's worth of equations at least.
    assert len(plan.kernels) <= len(traced.graph.equations) // (MAX_INLINED // 2), sizes
    assert max(sizes) <= MAX_INLINED + 1 + TAIL_EQUATIONS, sizes
    program = compiled(("aligned cuts", "running sum"), running_sum, x, dynamic=False,
                       capture_loops=False)
    np.testing.assert_allclose(program(x)[0], running_sum(x), rtol=1e-5, atol=1e-5)
