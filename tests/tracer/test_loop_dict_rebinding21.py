"""Training loops written the course-assignment way compile as one loop
(tracer/loop_dict_carries.py, tracer/loop_selected_appends.py).

Coursera's ``nn_model`` keeps its parameters in a dict it rebuilds (or updates) at every
step, computes ``cost = float(np.squeeze(...))`` and appends it every k steps::

    for i in range(num_iterations):
        A2, cache = forward(X, p)
        cost = compute_cost(A2, Y)
        grads = backward(p, cache, X, Y)
        p = update(p, grads)
        if i % 100 == 0:
            costs.append(cost)

Before, the rebound dict refused the capture ('`p` is rebound inside the loop'), and so did
the conditional append: the loop unrolled (seconds per hundred trips, then KERNEL_LIMIT or
EQUATION_LIMIT sent every call to NumPy). Each model here runs at two trip counts and two
input sizes, compiled against eager; the training loop must be captured (``explain()``
names no unrolled loop at its line) and no call may run eagerly.
"""

import inspect

import numpy as np
from real_model_checks import assert_same

import tracejit as tj
from tracejit.tracer.loop_bounds import carry_loop_bounds
from tracejit.tracer.tracing import trace


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def initialize(n_x, n_h, n_y):
    rng = np.random.default_rng(2)
    return {"W1": rng.standard_normal((n_h, n_x)) * 0.5, "b1": np.zeros((n_h, 1)),
            "W2": rng.standard_normal((n_y, n_h)) * 0.5, "b2": np.zeros((n_y, 1))}


def forward(X, p):
    Z1 = p["W1"] @ X + p["b1"]
    A1 = np.tanh(Z1)
    A2 = sigmoid(p["W2"] @ A1 + p["b2"])
    return A2, {"A1": A1, "A2": A2}


def cost_fn(A2, Y):
    m = Y.shape[1]
    return float(np.squeeze(-np.sum(Y * np.log(A2) + (1 - Y) * np.log(1 - A2)) / m))


def backward(p, cache, X, Y):
    m = X.shape[1]
    dZ2 = cache["A2"] - Y
    dW2 = dZ2 @ cache["A1"].T / m
    db2 = np.sum(dZ2, axis=1, keepdims=True) / m
    dZ1 = (p["W2"].T @ dZ2) * (1 - np.power(cache["A1"], 2))
    dW1 = dZ1 @ X.T / m
    db1 = np.sum(dZ1, axis=1, keepdims=True) / m
    return {"dW1": dW1, "db1": db1, "dW2": dW2, "db2": db2}


def update(p, g, lr=0.5):
    return {k: p[k] - lr * g["d" + k] for k in p}


# --- the parameter dict: rebuilt by a comprehension, a literal, or updated in place -------
def by_comprehension(X, Y, num_iterations):
    p = initialize(X.shape[0], 3, Y.shape[0])
    costs = []
    for i in range(num_iterations):
        A2, cache = forward(X, p)
        cost = cost_fn(A2, Y)
        grads = backward(p, cache, X, Y)
        p = update(p, grads)
        if i % 10 == 0:
            costs.append(cost)
    return p, costs


def logistic_cost(A, Y):
    return float(np.squeeze(-np.sum(Y * np.log(A) + (1 - Y) * np.log(1 - A)) / Y.shape[1]))


def propagate(p, X, Y):
    """Course 1's logistic regression: the cost and the gradients, a dict."""
    A = sigmoid(p["w"].T @ X + p["b"])
    dZ = A - Y
    return logistic_cost(A, Y), {"dw": X @ dZ.T / X.shape[1], "db": np.sum(dZ) / X.shape[1]}


def start(X):
    return {"w": np.full((X.shape[0], 1), 0.1), "b": np.zeros(())}


def by_literal(X, Y, num_iterations, lr=0.5):
    p = start(X)
    costs = []
    for i in range(num_iterations):  # noqa: B007 (the course's loop)
        cost, g = propagate(p, X, Y)
        p = {"w": p["w"] - lr * g["dw"], "b": p["b"] - lr * g["db"]}
        costs.append(cost)  # every trip
    return p, costs


def item_writes(X, Y, num_iterations, lr=0.5):
    p = start(X)
    costs = []
    for i in range(num_iterations):
        cost, g = propagate(p, X, Y)
        p["w"] = p["w"] - lr * g["dw"]
        p["b"] = p["b"] - lr * g["db"]
        if i == num_iterations - 1:
            costs.append(float(cost))  # (an expression: computed at every trip)
    return p, costs, cost


def in_place_over_keys(X, Y, num_iterations, print_cost=False, lr=0.5):
    p = start(X)
    costs = []
    for i in range(num_iterations):
        cost, g = propagate(p, X, Y)
        for k in p:
            p[k] -= lr * g["d" + k]
        if print_cost and i % 8 == 0:
            costs.append(cost)
    return p, costs


# --- a deep model: layers in a dict, inner loops over them unrolled in the body ------------
def deep_model(X, Y, layer_dims, num_iterations, lr=0.3):
    rng = np.random.default_rng(3)
    p = {}
    L = len(layer_dims)
    for layer in range(1, L):
        shape = (layer_dims[layer], layer_dims[layer - 1])
        p["W" + str(layer)] = rng.standard_normal(shape) * 0.5
        p["b" + str(layer)] = np.zeros((layer_dims[layer], 1))
    costs = []
    m = X.shape[1]
    for i in range(num_iterations):
        A = {0: X}
        for layer in range(1, L):
            Z = p["W" + str(layer)] @ A[layer - 1] + p["b" + str(layer)]
            A[layer] = sigmoid(Z) if layer == L - 1 else np.tanh(Z)
        cost = float(np.mean((A[L - 1] - Y) ** 2))  # (no log: a cheaper compile)
        dA = A[L - 1] - Y
        grads = {}
        for layer in reversed(range(1, L)):
            dZ = dA if layer == L - 1 else dA * (1 - A[layer] ** 2)
            grads["dW" + str(layer)] = dZ @ A[layer - 1].T / m
            grads["db" + str(layer)] = np.sum(dZ, axis=1, keepdims=True) / m
            dA = p["W" + str(layer)].T @ dZ
        for layer in range(1, L):
            p["W" + str(layer)] = p["W" + str(layer)] - lr * grads["dW" + str(layer)]
            p["b" + str(layer)] = p["b" + str(layer)] - lr * grads["db" + str(layer)]
        if i % 5 == 0:
            costs.append(cost)
    return p, costs


def data(m, seed=0):
    X = np.random.default_rng(seed).standard_normal((2, m))
    return X, (X[0:1] * X[1:2] > 0).astype(float)


def assert_close(got, want):
    """The same structure and types; values within a few ulp of a short run's rounding
    (sums and products are ordered differently in compiled code)."""
    assert_same(got, want, rtol=1e-11, atol=1e-13)


def training_loop(function):
    """``file:line`` of ``function``'s ``for i in range(num_iterations)``."""
    lines, first = inspect.getsourcelines(function)
    number = next(n for n, line in enumerate(lines) if "range(num_iterations)" in line)
    return f"{inspect.getsourcefile(function)}:{first + number}"


def compiled_as_one_loop(function, calls):
    """``function`` jitted over ``calls`` (argument tuples), each result compared with
    eager; the training loop must be captured (loops over layers inside it may unroll)
    and no call eager."""
    f = tj.jit(function, cache="memory")
    for args in calls:
        assert_close(f(*args), function(*args))
    stats = f.stats()
    assert not stats["eager_calls"], f.explain()
    assert f"loop at {training_loop(function)} unrolled" not in f.explain(), f.explain()
    return f


def test_a_dict_rebuilt_by_a_comprehension_and_costs_every_k_trips():
    X, Y = data(24)
    X2, Y2 = data(28, seed=1)
    # 12 trips: a short constant loop, captured for its large body (UNROLL_EQUATION_BUDGET)
    compiled_as_one_loop(by_comprehension, [(X, Y, 41), (X2, Y2, 12)])


def test_a_dict_rebuilt_by_a_literal_and_costs_every_trip():
    X, Y = data(24)
    X2, Y2 = data(20, seed=1)
    compiled_as_one_loop(by_literal, [(X, Y, 33), (X2, Y2, 37)])


def test_item_writes_and_a_cost_at_the_last_trip():
    X, Y = data(24)
    X2, Y2 = data(30, seed=1)
    f = compiled_as_one_loop(item_writes, [(X, Y, 34), (X2, Y2, 39)])
    result = f(X, Y, 34)
    assert len(result[1]) == 1 and type(result[2]) is float


def test_augmented_writes_over_the_keys_and_costs_only_when_printing():
    X, Y = data(24)
    X2, Y2 = data(26, seed=1)
    f = compiled_as_one_loop(in_place_over_keys, [(X, Y, 36, True), (X2, Y2, 40, False)])
    assert len(f(X, Y, 36, True)[1]) == 5


def test_a_deep_model_over_its_layers():
    X, Y = data(24)
    X2, Y2 = data(22, seed=1)
    compiled_as_one_loop(deep_model, [(X, Y, [2, 3, 1], 38), (X2, Y2, [2, 3, 1], 33)])


# --- float(cost) in the body decides nothing: no rounding bounds carried -----------------
def descend(x, y, steps):
    w, costs = np.zeros(x.shape[1]), []
    for _ in range(steps):
        r = np.tanh(x @ w) - y
        costs.append(float(np.mean(r ** 2)))
        w = w - 0.1 * x.T @ r
    return w, costs


def test_a_float_of_the_cost_carries_no_rounding_bounds():
    """``float(cost)`` is a cast to a float: it rounds and does not jump. Taken for a
    decision, it made the loop carry a rounding bound of every value the cost reads (twice
    the kernels in the body: the course's nn_model ran 30x slower than with the cost left
    out, and 3x slower than NumPy)."""
    x = np.random.default_rng(0).standard_normal((8, 3)) * 0.3
    y = np.linspace(-0.5, 0.5, 8)
    graph = trace(descend, x, y, 33).graph
    loops = [eqn for eqn in carry_loop_bounds(graph).equations if eqn.prim.name == "loop"]
    assert loops and all(not eqn.params_dict.get("bounds") for eqn in loops)


# --- an append under an index test to a list from outside stays the rewriter's ---------------
HISTORY = []


def record_outside(x, steps):
    w = np.zeros(3)
    for i in range(steps):
        w = w - 0.1 * (w - x)
        cost = float(np.sum(w))
        if i % 10 == 0:
            HISTORY.append(cost)
    return w


def test_an_append_under_an_index_test_to_a_global_list_is_replayed():
    """Only lists the function makes become append_when calls: a global's append is the
    rewriter's (replayed at every compiled call). Rewritten, it bypassed that and every
    call ran eagerly ('a write ... the trace cannot follow')."""
    f = tj.jit(record_outside, cache="memory")
    for _ in range(2):
        HISTORY.clear()
        got = f(np.ones(3), 34)
        compiled = list(HISTORY)
        HISTORY.clear()
        np.testing.assert_allclose(got, record_outside(np.ones(3), 34), rtol=1e-12)
        assert len(compiled) == len(HISTORY) == 4
        np.testing.assert_allclose(compiled, HISTORY, rtol=1e-12)
    assert f.stats()["compiled_calls"] >= 1 and not f.stats()["eager_calls"], f.explain()
