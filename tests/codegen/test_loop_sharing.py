"""Captured loops and segments that differ only in int offsets share one compiled program
(``codegen/loop_sharing.py``), and the loop bounds pass stays linear in the loops of a
program (``tracer/loop_bounds.py``): an outer loop that unrolls used to leave one program,
one LLVM module, per outer trip (the course's conv_backward: 38 modules; an 8x8x4 max-pool
backward: 81 modules and 256k bound equations).

Each model runs eagerly and through ``jit`` on the same arguments (``run_calls``); the
counts pinned here are programs and LLVM modules, never times.
"""

import numpy as np
import pytest
from real_model_checks import all_compiled, run_calls

import tracejit as tj
from benchmarks.compile_scaling import conv_backward_indexed
from tracejit.codegen import llvm
from tracejit.codegen.loops import NativeLoopProgram
from tracejit.tracer.loop_bounds import carry_loop_bounds
from tracejit.tracer.passes import eliminate_common_subexpressions, eliminate_dead_code
from tracejit.tracer.tracing import trace


@pytest.fixture
def modules(monkeypatch):
    """The LLVM modules compiled while the test runs (``compile_module`` calls)."""
    compiled = []
    original = llvm.compile_module

    def counted(*args, **kwargs):
        compiled.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(llvm, "compile_module", counted)
    return compiled


def program_of(f):
    return f._variants[0].root.program


def scaled_rows(x, scale):
    """Three unrolled rows, each a captured loop over the columns carrying a running value:
    the bodies differ only in the row they read and write."""
    y = np.zeros_like(x)
    for i in range(3):
        h = 0.0
        for t in range(x.shape[1]):
            h = np.tanh(h * 0.5 + x[i, t] * scale[i])
            y[i, t] = h
    return y


def test_unrolled_rows_share_one_body_program(modules):
    def make(n, seed):
        r = np.random.default_rng(seed)
        return r.standard_normal((3, n)), r.standard_normal(3)

    f = run_calls(scaled_rows, [make(n, seed) for n, seed in ((5, 1), (7, 2), (6, 3))],
                  dynamic=True)
    assert all_compiled(f, 6), f.explain()
    program = program_of(f)
    assert isinstance(program, NativeLoopProgram)
    loops = [step for step in program.steps if hasattr(step, "lifted")
             and hasattr(step, "writes")]
    assert len(loops) == 3 and len({id(loop.program) for loop in loops}) == 1
    # Each loop passes its row as the lifted starts of its reads (x[i, t], scale[i]).
    assert [sorted(set(loop.lifted.values())) for loop in loops] == [[0], [1], [2]]
    assert len(program.pieces) < len(program.steps)
    assert f.stats()["compiles"] == 1


def max_pool_backward(last_input, d_out):
    """Zhou's cnn-from-scratch MaxPool2.backprop with range loops: the channel loop is
    captured once per unrolled window position (16 loops here)."""
    d_input = np.zeros(last_input.shape)
    h, w, f = last_input.shape
    for i in range(h // 2):
        for j in range(w // 2):
            im_region = last_input[i * 2:i * 2 + 2, j * 2:j * 2 + 2]
            amax = np.amax(im_region, axis=(0, 1))
            for i2 in range(2):
                for j2 in range(2):
                    for f2 in range(f):
                        if im_region[i2, j2, f2] == amax[f2]:
                            d_input[i * 2 + i2, j * 2 + j2, f2] = d_out[i, j, f2]
    return d_input


def test_a_range_loop_max_pool_compiles_a_handful_of_modules(modules):
    def make(seed):
        r = np.random.default_rng(seed)
        return r.standard_normal((4, 4, 3)), r.standard_normal((2, 2, 3))

    f = run_calls(max_pool_backward, [make(seed) for seed in range(2)])
    program = program_of(f)
    loops = [step for step in program.steps if hasattr(step, "writes")]
    assert len(loops) == 16
    # Was one module per loop and per segment (20); now the distinct bodies and segments.
    assert len(program.pieces) <= 5 and len(modules) <= 5, (len(program.pieces), len(modules))
    assert f.stats()["compiles"] == 1


def test_course_conv_backward_shares_its_nested_loop_programs(modules):
    def make(seed):
        r = np.random.default_rng(seed)
        return (r.standard_normal((2, 3, 3, 4)), r.standard_normal((2, 3, 3, 4)),
                r.standard_normal((3, 3, 4, 4)), 1)

    # the course's conv_backward indexing its padded buffers, as the benchmark row runs it
    f = run_calls(conv_backward_indexed, [make(seed) for seed in range(2)])
    assert all_compiled(f, 4), f.explain()
    program = program_of(f)
    assert isinstance(program, NativeLoopProgram)
    # Was a program per step (20: the unrolled trips' loops and the segments between).
    assert len(program.pieces) <= 4 < len(program.steps), (len(program.pieces),
                                                            len(program.steps))
    assert len(modules) <= 4, len(modules)


def test_a_program_with_shared_pieces_starts_warm_from_disk(tmp_path, monkeypatch):
    def make(n, seed):
        r = np.random.default_rng(seed)
        return r.standard_normal((3, n)), r.standard_normal(3)

    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    first = tj.jit(scaled_rows, cache=True, dynamic=True)
    x, scale = make(7, 1)
    want = scaled_rows(x, scale)
    np.testing.assert_allclose(first(x, scale), want, rtol=1e-12)
    second = tj.jit(scaled_rows, cache=True, dynamic=True)
    for n, seed in ((7, 2), (6, 3)):
        x, scale = make(n, seed)
        np.testing.assert_allclose(second(x, scale), scaled_rows(x, scale), rtol=1e-12)
    stats = second.stats()
    assert stats["disk_hits"] == 1 and stats["compiles"] == 0, second.explain()


def pooled_tanh(x, d_out):
    """The max-pool backward over tanh(x): values that round, so each captured channel loop
    carries the bound of the buffer the loop before it wrote."""
    return max_pool_backward(np.tanh(x), d_out)


def bound_equations(width):
    """Equations ``carry_loop_bounds`` adds for a pool over 4 x ``width`` x 4 (2 * width
    captured loops)."""
    rng = np.random.default_rng(0)
    graph = trace(pooled_tanh, rng.standard_normal((4, width, 4)),
                  rng.standard_normal((2, width // 2, 4)), capture_loops=True).graph
    graph = eliminate_dead_code(eliminate_common_subexpressions(graph))
    assert sum(eqn.prim.name == "loop" for eqn in graph.equations) == 4 * width
    return len(carry_loop_bounds(graph).body) - len(graph.body)


def test_loop_bounds_stay_near_linear_in_the_loops_of_a_program():
    # Each loop bounded every earlier loop's bound arithmetic again: 2693 equations for 16
    # loops, 11629 for 32 (now 173 and 469; what is left re-derives each earlier window's
    # slice and max, two equations, which CSE merges).
    small, large = bound_equations(4), bound_equations(8)
    assert 0 < large <= 3 * small, (small, large)
