"""More loops with a data-dependent exit compiled as one loop, eager vs ``jit``: tests
joined by ``and``/``or``, ``not`` and chained comparisons (``tracejit.tracer.exit_tests``).
Each serves every trip count with one compile, and stops where NumPy stops: at the
first trip, never, at the bound, on NaN."""

import numpy as np
from test_while_loops import compiled_every_call, run_all

import tracejit as tj


# --- and / or / not / chains ----------------------------------------------------------------
def shrink_and(x, tol, max_iter):
    trips = np.zeros((), np.int64)
    while x.max() > tol and trips < max_iter:
        x = x * 0.75 - 0.125
        trips += 1
    return x, trips


def test_a_while_test_joined_by_and_is_one_loop():
    x = np.array([3.0, 1.0])
    # stops on the tolerance (several trip counts), at max_iter, never (max_iter 0, tol
    # above the max)
    cases = [(1e-3, 50), (1.0, 50), (0.1, 4), (1e-3, 0), (8.0, 50), (2.0, 50), (0.3, 50)]
    f = run_all(shrink_and, [(x, np.array(tol), np.array(n)) for tol, n in cases])
    trips = {int(shrink_and(x, np.array(tol), np.array(n))[1]) for tol, n in cases}
    assert {0, 4} <= trips and len(trips) >= 6, trips
    compiled_every_call(f)
    # nan > tol is False at once; a decision on NaN is eager's (a margin that cannot hold)
    run_all(shrink_and, [(x, np.array(np.nan), np.array(50))])


def stop_or_not(x, lo, n):
    for _k in range(n):
        x = x * 0.5 - 0.25
        if x.min() < lo or not (x.max() <= 4.0):
            break
    return x


def test_a_break_on_or_and_not_is_one_loop():
    # breaks at the first trip (on either side of the or), later, or never
    cases = [([3.0, 1.0], -0.3), ([3.0, 1.0], -0.9), ([3.0, 1.0], -5.0), ([100.0, 1.0], -5.0),
             ([3.0, 1.0], 2.0)]
    f = run_all(stop_or_not, [(np.array(x), np.array(lo), 20) for x, lo in cases])
    compiled_every_call(f)


def grow_between(x, lo, hi):
    while lo < x.sum() <= hi:
        x = x * np.float32(1.5)
    return x


def test_a_chained_comparison_in_float32_is_one_loop():
    x = np.array([1.0, 2.0], np.float32)
    cases = [(0.0, 100.0), (0.0, 10.0), (5.0, 10.0), (0.0, 1e30), (0.0, 2.0)]
    f = run_all(grow_between, [(x, np.array(lo, np.float32), np.array(hi, np.float32))
                               for lo, hi in cases])
    compiled_every_call(f)
    run_all(grow_between, [(x, np.array(np.nan, np.float32), np.array(10, np.float32))])


def flagged(x, tol, use):
    while use and x.max() > tol:  # use is a Python bool: Python's short circuit
        x = x / 3.0
    return x


def test_a_python_operand_short_circuits_as_in_python():
    x = np.array([5.0, 1.0])
    run_all(flagged, [(x, np.array(0.1), True), (x, np.array(1e-3), True),
                      (x, np.array(0.1), False)])


def first_negative(x):
    i = np.zeros((), np.int64)
    while i < x.shape[0] and x[i] >= 0:  # x[i] past the end is never read by Python
        i += 1
    return i


def test_a_right_operand_python_never_reads_does_not_raise():
    run_all(first_negative, [(np.array(x),) for x in ([1.0, 2.0, -1.0, 3.0], [-1.0, 2.0, 3.0, 4.0],
                                                       [1.0, 2.0, 3.0, 4.0])])


# --- Python int counters and the index read after the loop ---------------------------------
def count_halvings(x, tol):
    it = 0
    while np.abs(x).max() > tol and it < 50:
        x = x * 0.5
        it += 1
    return x, it  # a Python int, as eager returns it


def test_a_python_int_counter_is_carried_and_returned_as_an_int():
    x = np.array([4.0, 1.0])
    # several trips first, then 0 trips (tol above), 1, and 50 (the counter's bound: tol 0);
    # test_long_exit_loops starts with 0 trips
    tols = [0.3, 8.0, 3.0, 0.01, 0.0]
    f = run_all(count_halvings, [(x, np.array(tol)) for tol in tols])
    assert sorted(count_halvings(x, np.array(tol))[1] for tol in tols)[::4] == [0, 50]
    compiled_every_call(f)


def count_down_and_up(x, limit):
    budget, used = 40, 0
    for _ in range(60):
        x = x * 1.5
        used += 1
        budget -= 2
        if x.sum() > limit or budget <= 0:
            break
    return x, budget, used


def test_counters_in_a_for_loop_with_a_break():
    x = np.array([1.0, 2.0])
    f = run_all(count_down_and_up, [(x, np.array(limit)) for limit in (20.0, 1.0, 1e300, 500.0)])
    compiled_every_call(f)


def index_after(x, limit, before):
    i = before
    for i in range(20):  # noqa: B007 (read after the loop: Python's last index)
        x = x * 2.0
        if x.sum() > limit:
            break
    return x, i


def index_after_unbound(x, limit):
    for i in range(20):  # noqa: B007
        x = x * 2.0
        if x.sum() > limit:
            break
    return x, i


def test_the_index_read_after_the_loop_is_pythons_last_index():
    x = np.array([1.0, 2.0])
    # breaks at trips 5, 0, 1; never (i is 19)
    limits = [100.0, 1.0, 10.0, 1e9]
    f = run_all(index_after, [(x, np.array(limit), -1) for limit in limits])
    compiled_every_call(f)
    f = run_all(index_after_unbound, [(x, np.array(limit)) for limit in limits])
    compiled_every_call(f)


def stepped_by_a_name(x, tol, step):
    it = 0
    while x.max() > tol:
        x = x / 2.0
        it += step  # not a literal step: runs as written, still NumPy's answer
    return x, it


def test_a_counter_of_another_form_runs_as_written():
    run_all(stepped_by_a_name, [(np.array([4.0, 1.0]), np.array(tol), 3) for tol in (0.3, 2.0)])


def kmeans_to_tolerance(X, centers, tol):
    it = 0
    shift = np.inf
    ks = np.arange(centers.shape[0])
    while shift > tol and it < 100:
        d = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
        labels = d.argmin(1)
        onehot = (labels[:, None] == ks[None, :]).astype(X.dtype)
        counts = np.maximum(onehot.sum(0), 1.0)
        new = (onehot.T @ X) / counts[:, None]
        shift = np.sqrt(((new - centers) ** 2).sum(1)).max()  # 0 once converged
        centers = new
        it += 1
    return centers, it


def test_kmeans_until_the_centres_stop_moving():
    # The centre shift is exactly 0 at convergence: its sqrt's rounding bound is finite
    # there (a sum of squares is >= 0 on both sides), so the exit is decided compiled.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((16, 2)) + np.repeat(np.arange(4.0), 4)[:, None] * 3.0
    f = tj.jit(kmeans_to_tolerance, cache="memory")
    for tol in (1e-8, 0.5, 10.0, 1e-3):
        want = kmeans_to_tolerance(X, X[[0, 4, 8, 12]].copy(), np.array(tol))
        got = f(X, X[[0, 4, 8, 12]].copy(), np.array(tol))
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)  # onehot.T @ X: a matmul
        assert type(got[1]) is int and got[1] == want[1]
    compiled_every_call(f)


# --- continue, several breaks, an exit's own statements ----------------------------------
def skip_when_big(x, lim, n):
    total = np.zeros_like(x)
    for _t in range(n):
        x = x * 1.25
        if x.max() > lim:  # the trip ends here, with the payload's values
            x = x / 4.0
            continue
        total = total + x
    return x, total


def test_continue_with_statements_before_it_is_one_loop():
    x = np.array([1.0, 2.0])
    # continues at some trips, at every trip (lim 1), never (lim 1e9)
    f = run_all(skip_when_big, [(x, np.array(lim), 30) for lim in (5.0, 3.0, 1e9, 1.0, 9.0)])
    compiled_every_call(f)


def two_breaks(x, hi, lo):
    it = 0
    for it in range(40):  # noqa: B007 (read after the loop)
        x = x * 1.5 - 1.0
        if x.max() > hi:
            break
        if x.min() < lo:
            x = -x  # an exit's own statement
            break
    return x, it


def test_two_breaks_are_one_loop():
    x = np.array([1.0, 2.5])
    # the second break (trips 3, 0), the first (trips 1, 0), neither (40 trips)
    cases = [(1e9, -1.0), (1e9, 0.75), (3.0, -9.0), (2.5, -9.0), (1e300, -1e300)]
    f = run_all(two_breaks, [(x, np.array(hi), np.array(lo)) for hi, lo in cases])
    assert len({two_breaks(x, np.array(hi), np.array(lo))[1] for hi, lo in cases}) == 4
    compiled_every_call(f)


def while_with_a_break(x, tol, cap):
    steps = 0
    while x.max() > tol:
        x = x * 0.5
        steps += 1
        if x.sum() < cap:
            break
        x = x + 0.125
    return x, steps


def test_a_while_test_and_a_break_in_float32():
    x = np.array([3.0, 2.0], np.float32)
    cases = [(0.3, 1.0), (0.3, -1.0), (10.0, 0.0), (0.3, 4.0), (0.5, 3.0)]
    f = run_all(while_with_a_break, [(x, np.array(tol, np.float32), np.array(cap, np.float32))
                                     for tol, cap in cases])
    compiled_every_call(f)


def continue_then_break(x, hi, lo):
    count = 0
    while True:
        x = x * 0.75
        count += 1
        if x.max() > hi:
            continue
        if np.isnan(x).any() or x.min() < lo:
            break
        x = x - 0.125
    return x, count


def test_while_true_with_continue_and_break():
    x = np.array([3.0, 2.0])
    cases = [(2.0, 0.25), (100.0, 0.5), (1.0, 1.0), (2.5, -0.25)]
    f = run_all(continue_then_break, [(x, np.array(hi), np.array(lo)) for hi, lo in cases])
    compiled_every_call(f)
    # NaN: x.max() > hi is False, the isnan break ends the first trip (as eager)
    run_all(continue_then_break, [(np.array([np.nan, 2.0]), np.array(2.0), np.array(0.25))])


# --- return in the body; decisions on a counter after the loop -----------------------------
def returns_inside(x, limit):
    for i in range(20):
        x = x * 2.0
        if x.sum() > limit:
            return x, i  # a break, then this return after the loop (exit_returns)
    return x, -1


def search_down(x, target):
    it = 0
    while True:
        x = x * 0.5
        it += 1
        if x.max() < target:
            return x, it


def flips_after(x, tol):
    it = 0
    while np.abs(x).max() > tol and it < 50:
        x = x * 0.5
        it += 1
    if it > 3:  # a decision on the counter: exact, as the loop's exits are
        x = -x
    return x, it


def compiled_but_for_one_exit(f):
    """At most two paths (an if after the loop: both outcomes), and one call run eagerly
    (the side exit before the second compiles), whatever the trip counts."""
    stats = f.stats()
    assert stats["compiles"] <= 2 and sum(stats["eager_calls"].values()) <= 1, f.explain()


def test_a_return_in_the_body_and_a_counter_decided_after_the_loop():
    x = np.array([1.0, 2.0])
    limits = [100.0, 10.0, 1000.0, 1e9, 1.0, 50.0]  # returns at trips 4, 1, 7, 0; never
    f = run_all(returns_inside, [(x, np.array(limit)) for limit in limits])
    compiled_but_for_one_exit(f)
    f = run_all(search_down, [(np.array([5.0, 2.0]), np.array(target))
                              for target in (0.01, 1.0, 100.0, 0.3)])
    compiled_every_call(f)
    f = run_all(flips_after, [(np.array([4.0, 1.0]), np.array(tol))
                              for tol in (0.3, 8.0, 3.0, 0.01, 0.0)])
    compiled_but_for_one_exit(f)
