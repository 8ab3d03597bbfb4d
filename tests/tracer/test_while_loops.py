"""Loops with a data-dependent exit (``while <traced test>:``, ``for ... in range(n): ...
if <traced test>: break``, ``while True: ... break``), eager vs ``jit``: one compiled
loop serves every trip count, stops where NumPy stops, and gives NumPy's carries
(tracejit.tracer.while_loops)."""

import copy

import numpy as np
import pytest

import tracejit as tj


def run_all(function, argument_sets, exact=True, rtol=1e-12, **options):
    """``function`` jitted, called on each argument set and compared with eager NumPy
    (bit for bit when ``exact``, else to ``rtol``; integers always exactly); the jitted
    function."""
    options = {"cache": "memory", **options}
    f = tj.jit(function, **options)
    for arguments in argument_sets:
        want = function(*copy.deepcopy(arguments))
        got = f(*copy.deepcopy(arguments))
        want_items = want if isinstance(want, tuple) else (want,)
        got_items = got if isinstance(got, tuple) else (got,)
        assert len(got_items) == len(want_items)
        for g, w in zip(got_items, want_items):
            assert type(g) is type(w) and np.shape(g) == np.shape(w), (g, w)
            assert np.asarray(g).dtype == np.asarray(w).dtype, (g, w)
            if exact or np.asarray(w).dtype.kind in "biu":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
    return f


def compiled_every_call(f):
    """One compile, and every call run by it (the first one may be the traced run)."""
    stats = f.stats()
    assert stats["compiles"] == 1, f.explain()
    assert not stats["eager_calls"], f.explain()
    assert stats["compiled_calls"] + stats["traced_calls"] == stats["calls"], f.explain()


# --- while <test over carried values> ------------------------------------------------------
def square_roots(x, tol):
    lo = np.zeros_like(x)
    hi = np.maximum(x, 1.0)
    trips = np.zeros((), np.int64)
    while (hi - lo).max() > tol:
        mid = (lo + hi) / 2
        big = mid * mid > x
        hi = np.where(big, mid, hi)
        lo = np.where(big, lo, mid)
        trips += 1  # in place: a 0-d array, as it entered (trips + 1 is a scalar)
    return lo, hi, trips


def test_a_while_loop_serves_every_trip_count_with_one_compile():
    x = np.array([2.0, 3.0, 0.3])
    # many trips first, then 0 (tol above the first width), 1, and others
    tols = [1e-9, 10.0, 1.6, 1e-3, 0.1, 1e-6]
    f = run_all(square_roots, [(x, np.array(tol)) for tol in tols])
    trips = [int(square_roots(x, np.array(tol))[2]) for tol in tols]
    assert 0 in trips and 1 in trips and len(set(trips)) == len(trips), trips
    compiled_every_call(f)


def halve_until(x, tol):
    while x.max() > tol:  # powers of two: exact, so tol can equal a value reached
        x = x / 2.0
    return x


@pytest.mark.parametrize("tol", [0.125, 0.5, 4.0, 0.0625])
def test_the_exit_at_a_tie_is_numpys(tol):
    # x.max() reaches tol exactly: tol > tol is False, the loop stops there
    run_all(halve_until, [(np.array([1.0, 0.5]), np.array(tol)),
                          (np.array([4.0, 2.0]), np.array(tol))])


def test_nan_in_the_test_behaves_as_python():
    run_all(halve_until, [(np.array([1.0, 0.5]), np.array(0.1)),
                          (np.array([1.0, 0.5]), np.array(np.nan)),  # nan > ...: False
                          (np.array([np.nan, 0.5]), np.array(0.1)),
                          (np.array([1.0, 0.5]), np.array(0.3))])


# --- for ... in range(n): ... if <test>: break [else: ...] ---------------------------------
def descend(X, y, lr, tol):
    w = np.zeros(X.shape[1])
    steps = np.zeros((), np.int64)
    for _it in range(200):
        grad = X.T @ (X @ w - y) / X.shape[0]
        if np.abs(grad).max() < tol:
            break
        w = w - lr * grad
        steps += 1
    return w, steps


def test_gradient_descent_until_the_gradient_is_small():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((8, 3)), rng.standard_normal(8)
    # the matmuls round in another order than NumPy's: values to a few ulp, trips exact
    argument_sets = [(X, y, np.array(0.1), np.array(tol)) for tol in (0.1, 0.3, 10.0, 0.05)]
    f = run_all(descend, argument_sets, exact=False)
    for arguments in argument_sets:
        assert f(*arguments)[1] == descend(*arguments)[1]
    assert f.stats()["compiles"] == 1, f.explain()


def scale_until(x, limit, n):
    total = np.zeros_like(x)
    for _i in range(n):
        x = x * 1.5
        if x.sum() > limit:
            break
        total = total + x
    else:
        total = -total
    return x, total


def scale_until_no_else(x, limit, n):
    total = np.zeros_like(x)
    for _i in range(n):
        x = x * 1.5
        if x.sum() > limit:
            break
        total = total + x
    return x, total


@pytest.mark.parametrize("function", [scale_until, scale_until_no_else])
def test_break_with_and_without_else(function):
    x = np.array([1.0, 2.0])
    # breaks at trips 5, 0 and 2; 40 trips end without a break (the else runs)
    limits = [20.0, 1.0, 6.0, 1e300]
    run_all(function, [(x, np.array(limit), 40) for limit in limits])


def grow_until(x, limit):
    while True:
        x = x + x * 0.5
        if x.max() >= limit:
            break
        x = x - 0.25
    return x


def test_while_true_with_a_break():
    f = run_all(grow_until, [(np.array([1.0, 2.0]), np.array(limit))
                             for limit in (100.0, 2.1, 7.0, 3.3)])
    compiled_every_call(f)


def newton_sqrt(a, tol):
    x = a.copy()
    diff = np.inf  # a float when the loop starts: trip 0 runs as written, then a loop
    while diff > tol:
        new = 0.5 * (x + a / x)
        diff = np.abs(new - x).max()
        x = new
    return x, diff


def halvings(x, tol):
    count = np.zeros((), np.int64)
    while x.max() > tol:
        x = x / 2.0
        count = count + 1  # a NumPy scalar from the first trip on: 0 trips return the array
    return x, count


def test_a_carry_whose_kind_changes_in_the_first_trip_keeps_numpys_types():
    run_all(halvings, [(np.array([3.0, 5.0]), np.array(tol)) for tol in (0.1, 10.0, 1.0)])


def test_a_carry_that_becomes_an_array_in_the_first_trip():
    f = run_all(newton_sqrt, [(np.array([2.0, 9.0, 0.5]), np.array(tol))
                              for tol in (1e-3, 1e-12, 10.0, 1e-6)])
    compiled_every_call(f)


# --- nested, and models -------------------------------------------------------------------
def row_betas(D, target, tol):
    """t-SNE's per-row binary search for beta (a while loop in a loop over rows)."""
    betas = np.ones(D.shape[0])
    for i in range(D.shape[0]):
        lo, hi = np.array(0.0), np.array(64.0)
        beta = np.array(1.0)
        while hi - lo > tol:
            beta = (lo + hi) / 2
            mass = np.exp(-D[i] * beta).sum()
            heavy = mass > target
            lo = np.where(heavy, beta, lo)
            hi = np.where(heavy, hi, beta)
        betas[i] = beta
    return betas


def test_per_row_binary_search_in_a_for_loop():
    rng = np.random.default_rng(1)
    D = rng.random((4, 5))
    f = run_all(row_betas, [(D, np.array(2.5), np.array(tol)) for tol in (1e-2, 1e-5, 0.3)])
    compiled_every_call(f)


def kmeans(X, centers, max_iter):
    labels = np.full(X.shape[0], -1)
    ks = np.arange(centers.shape[0])
    for _it in range(max_iter):
        d = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
        new = d.argmin(1)
        if np.all(new == labels):
            break
        labels = new
        onehot = (new[:, None] == ks[None, :]).astype(X.dtype)
        counts = np.maximum(onehot.sum(0), 1.0)
        centers = (onehot[:, :, None] * X[:, None, :]).sum(0) / counts[:, None]
    return centers, labels


def test_kmeans_until_the_assignments_stop_changing():
    rng = np.random.default_rng(0)
    argument_sets = []
    for spread in (3.0, 0.5, 1.0, 2.0):
        X = rng.standard_normal((12, 2)) + np.repeat(np.arange(3.0), 4)[:, None] * spread
        argument_sets.append((X, X[:3].copy(), 50))  # started at data points: exact zeros
    # (centers are sums over rows, in any order compiled: to rounding; labels exactly)
    f = run_all(kmeans, argument_sets, exact=False)
    compiled_every_call(f)


def power_iteration(A, v, tol):
    value = np.float32(0.0)
    trips = np.zeros((), np.int64)
    while True:
        trips += 1  # in place: a 0-d array, as it entered (trips + 1 is a scalar)
        w = A @ v
        new = np.sqrt((w * w).sum())
        v = w / new
        if np.abs(new - value) < tol:  # read off a float32 matmul: decided as an if's
            break
        value = new
    return v, value, trips


def test_an_exit_read_off_a_float32_matmul_is_numpys():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((4, 4)).astype(np.float32)
    A = A @ A.T
    v = np.ones(4, np.float32)
    # float32 sums keep more precision compiled: values to a few ulp, trips exactly
    run_all(power_iteration, [(A, v, np.float32(tol)) for tol in (1e-3, 1e-1, 10.0)],
            exact=False, rtol=1e-5)


# --- writes in the body: into a buffer, an argument, a view ---------------------------------
def counts_into_a_buffer(x, tol):
    counts = np.zeros(2)
    while x.sum() > tol:
        x = x / 2.0
        counts[0] = counts[0] + 1.0
        counts[1] += x.sum()
    return x, counts


def counts_into_an_argument(x, counts, tol):
    for _i in range(40):
        x = x / 2.0
        counts[0] += 1.0  # the caller's array, as eager writes it
        if x.sum() < tol:
            break
    return x


def sums_through_a_view(x, tol):
    out = np.zeros((2, 2))
    row = out[0]
    while x.sum() > tol:
        x = x / 2.0
        row += x  # a write into out
    return x, out


@pytest.mark.parametrize("function, arguments", [
    (counts_into_a_buffer, lambda tol: (np.array([3.0, 4.0]), np.array(tol))),
    (counts_into_an_argument, lambda tol: (np.array([3.0, 4.0]), np.zeros(2),
                                           np.array(tol))),
    (sums_through_a_view, lambda tol: (np.array([3.0, 4.0]), np.array(tol))),
])
def test_writes_in_the_body_land_where_numpys_do(function, arguments):
    f = tj.jit(function, cache="memory")
    for tol in (1.0, 0.1, 100.0, 2.5):
        got, want = arguments(tol), arguments(tol)
        got_results, want_results = f(*got), function(*want)
        if not isinstance(want_results, tuple):
            got_results, want_results = (got_results,), (want_results,)
        for g, w in zip((*got_results, *got), (*want_results, *want)):  # arguments too
            np.testing.assert_array_equal(g, w)
    if function is not sums_through_a_view:  # row, NumPy's own view of out: as written
        compiled_every_call(f)


# --- forms left as written: correct, a guard per trip ---------------------------------------
# (Python int counters and the index read after the loop: test_loop_exits2.py)
def changes_shape(x, limit):
    while x.sum() < limit:
        x = np.concatenate([x, x])
    return x


def returns_inside(x, limit):
    for i in range(20):
        x = x * 2.0
        if x.sum() > limit:
            return x, i
    return x, -1


@pytest.mark.parametrize("function, argument_sets", [
    (changes_shape, [(np.array([1.0, 2.0]), np.array(t)) for t in (10.0, 1.0, 40.0)]),
    (returns_inside, [(np.array([1.0, 2.0]), np.array(t)) for t in (10.0, 1.0, 1e9)]),
])
def test_other_forms_run_as_written(function, argument_sets):
    run_all(function, argument_sets)
