"""Long loops with a data-dependent exit stay compiled: the most common loops of NumPy
code (gradient descent to a tolerance, power iteration, Sinkhorn's scalings) run hundreds
of trips, and a worst-case rounding bound carried trip after trip used to reach their
exit test after ~10-50 of them, so those calls ran eagerly.

Where a carried value is NumPy's to the bit (exact when the loop starts, and a trip on
exact values leaves it exact: products by NumPy's own BLAS calls, IEEE arithmetic, a
norm as NumPy's ``sqrt(x.dot(x))``) the loop carries no bound at all
(``tracejit.tracer.loop_bounds``), and the results are eager's bit for bit. Where it is
not (Sinkhorn's kernel ``np.exp(-M / reg)`` is a few ulp from NumPy's), float64 products
carry ``|A| @ |B|`` bounds, which grow by a few ulp per trip, not geometrically."""

import numpy as np
from test_loop_exits2 import count_halvings
from test_while_loops import compiled_every_call, run_all


def descend_to_tolerance(X, y, lr, tol):
    w = np.zeros(X.shape[1], X.dtype)
    n = X.shape[0]
    it = 0
    while True:
        grad = X.T @ (X @ w - y) / n
        w = w - lr * grad
        it += 1
        if np.linalg.norm(grad) < tol or it >= 1000:
            break
    return w, it


def test_gradient_descent_to_a_tolerance_stays_compiled_over_hundreds_of_trips():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 4))
    X[:, 3] = X[:, 2] + 0.1 * X[:, 3]  # ill conditioned: slow convergence
    y = X @ np.array([1.0, -2.0, 0.5, 3.0])
    cases = [(X, y, np.asarray(0.1), np.asarray(tol)) for tol in (1e-2, 1e-6, 1e-1)]
    f = run_all(descend_to_tolerance, cases)  # bit for bit
    trips = [descend_to_tolerance(*case)[1] for case in cases]
    assert max(trips) >= 200 and min(trips) < 100, trips
    compiled_every_call(f)


def power_iteration(A, tol):
    v = np.ones(A.shape[0], A.dtype) / np.sqrt(A.shape[0])
    lam = 0.0
    for it in range(2000):  # noqa: B007 (read after the loop)
        w = A @ v
        lam_new = v @ w
        v = w / np.linalg.norm(w)
        if abs(lam_new - lam) < tol:
            break
        lam = lam_new
    return v, lam_new, it


def test_power_iteration_to_a_tolerance_stays_compiled():
    # the two largest eigenvalues 5 and 4.7: the estimate converges slowly
    Q = np.linalg.qr(np.random.default_rng(3).standard_normal((6, 6)))[0]
    A = (Q * np.array([5.0, 4.7, 2.0, 1.0, 0.5, 0.1])) @ Q.T
    f = run_all(power_iteration, [(A, np.asarray(tol)) for tol in (1e-3, 1e-10)])
    assert power_iteration(A, np.asarray(1e-10))[2] >= 200
    compiled_every_call(f)
    A32 = A.astype(np.float32)
    f = run_all(power_iteration, [(A32, np.asarray(tol, np.float32)) for tol in (1e-2, 1e-5)])
    assert power_iteration(A32, np.asarray(1e-5, np.float32))[2] >= 80
    compiled_every_call(f)


def sinkhorn(a, b, M, reg, tol, max_iter):
    K = np.exp(-M / reg)
    u = np.ones_like(a)
    v = np.ones_like(b)
    err = 1.0
    it = 0
    while err > tol and it < max_iter:
        u = a / (K @ v)
        v = b / (K.T @ u)
        err = np.abs(u * (K @ v) - a).sum()
        it += 1
    return u[:, None] * K * v[None, :], it


def test_sinkhorn_with_a_trip_limit_stays_compiled():
    rng = np.random.default_rng(1)
    a, b = np.full(12, 1 / 12), np.full(9, 1 / 9)
    M = rng.random((12, 9))
    # np.exp(-M / reg) is a few ulp from NumPy's: the plan to rounding, trips exactly; the
    # third case stops at max_iter
    cases = [(a, b, M, np.asarray(reg), np.asarray(tol), 150)
             for reg, tol in ((0.03, 1e-3), (0.03, 1e-6), (0.03, 1e-9), (0.05, 1e-9))]
    f = run_all(sinkhorn, cases, exact=False, rtol=1e-12)
    trips = [sinkhorn(*case)[1] for case in cases]
    assert [f(*case)[1] for case in cases] == trips and max(trips) == 150, trips
    assert min(trips) < 60 and sorted(trips)[2] > 90, trips
    compiled_every_call(f)


def test_a_first_call_exiting_at_once_compiles_the_whole_loop():
    """The first call's loop ends at trip 0 (tol above the values); the loop is captured
    all the same, so the longer calls after it run the same program (they compiled a
    second one)."""
    x = np.array([4.0, 1.0])
    f = run_all(count_halvings, [(x, np.array(tol)) for tol in (8.0, 0.3, 0.01, 0.0)])
    compiled_every_call(f)


def walk_until(x, limit):
    h, t = np.zeros(3), 0
    while t < x.shape[0] and h.sum() < limit:
        h = h + np.abs(x[t])  # x[0] of an empty x: Python never runs it
        t += 1
    return h, t


def test_a_first_call_whose_loop_runs_no_trip_on_an_empty_array():
    """Keeping a traced exit at trip 0 traced runs the rest of trip 0, which Python does
    not run: on an empty x it raised (an internal error, the call eager); now that trip
    ends as Python ends it, and later calls run longer."""
    rng = np.random.default_rng(4)
    f = run_all(walk_until, [(rng.random((n, 3)), 1.5) for n in (0, 5, 9)])
    assert "internal error" not in f.stats()["eager_reasons"], f.stats()
