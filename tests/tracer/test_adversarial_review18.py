"""Review round 18 of this session's exactness rules and loop-exit captures (np.linspace of
dims, np.bincount, argmax/argsort/gather/scatter rules, exact quotients, sqrt of squares,
and/or exits, int counters, several breaks): each test here failed before the fix named in
its docstring."""

import numpy as np
from test_while_loops import run_all


# --- np.linspace of dims (tracer/even_spacing.py) -------------------------------------------
def grid_and_step(x):
    n = x.shape[0]
    return np.linspace(0.1, 0.7, n, retstep=True) + np.linspace(0, n, n - 1, retstep=True)


def huge_span(x):
    return np.linspace(0, 2**60 + 100, x.shape[0])


def test_linspace_step_of_a_dim_count_is_numpys_float64():
    """retstep=True with a dim among the arguments returned the step as a Python float (a
    weak float64 of the trace); NumPy's is an np.float64."""
    run_all(grid_and_step, [(np.ones(n),) for n in (3, 5, 1)], dynamic=True)


def test_linspace_of_int_bounds_past_2_53_subtracts_as_numpy():
    """NumPy takes the span of int bounds in float64 (each bound rounded first); the
    composite subtracted the Python ints exactly and divided that: samples 32-256 apart
    for np.linspace(0, 2**60 + 100, 7)."""
    run_all(huge_span, [(np.ones(n),) for n in (7, 13)], dynamic=True)


# --- Python int counters and the for index after an exit loop (tracer/exit_ints.py) --------
def halve_until(x, tol):
    it = 0
    for k in range(50):  # noqa: B007 (read after the loop)
        x = x * 0.5
        if x.max() < tol:
            break
        it += 1
    return x, it / 7, it % 4, -k // 3, 10 // (it + 1)


def test_a_counter_divided_after_its_exit_loop_compiles():
    """/, // and % of a loop's int counter or index after the loop were internal errors
    (TypeError: 'Pending' and 'int'): the check that Python would not raise on them forced
    the counter's pending value, and the trace then computed on the Pending object itself
    (Context.process decided laziness after that check). Every call ran eagerly."""
    calls = [(np.array(x), tol) for x in ([3.0, 1.0], [5.0, 0.2]) for tol in (1e-3, 0.4, 10.0)]
    f = run_all(halve_until, calls)
    assert not f.stats()["eager_calls"].get("internal error"), f.explain()
