"""A counted loop's carried bounds stay tight for hundreds of trips (tracer/loop_bounds).

Coursera's ``L_layer_model`` (course 1 week 4, as the assignment writes it, costs kept
every 100 trips) compiles its training loop since 0cdcd2a, and its relu masks
(``dZ[Z <= 0] = 0``) decide on values that carry a rounding bound (the sigmoid's exp feeds
every gradient). With the cheap row-norm product bound the looseness compounded trip
after trip: a 4-3-1 net over 32 samples left its bound near 1e-4 by trip ~270, the mask's
margin guard failed there and every later call ran eagerly. Products in a loop's bounds
now take ``|A| @ |B|``, as a solver's did: the same net stays compiled past 1000 trips.
"""

from __future__ import annotations

import numpy as np
from real_model_checks import assert_same

from tracejit import jit


def relu_backward(dA, Z):
    dZ = np.array(dA, copy=True)
    dZ[Z <= 0] = 0
    return dZ


def L_model_forward(X, parameters):  # noqa: N802 - the course's name
    caches, A = [], X
    L = len(parameters) // 2
    for l in range(1, L + 1):  # noqa: E741 - the course's name
        W, b = parameters["W" + str(l)], parameters["b" + str(l)]
        Z = np.dot(W, A) + b
        caches.append((A, W, Z))
        A = 1 / (1 + np.exp(-Z)) if l == L else np.maximum(0, Z)
    return A, caches


def L_model_backward(AL, Y, caches):  # noqa: N802 - the course's name
    grads, L = {}, len(caches)
    dA = -(np.divide(Y, AL) - np.divide(1 - Y, 1 - AL))
    for l in reversed(range(1, L + 1)):  # noqa: E741 - the course's name
        A_prev, W, Z = caches[l - 1]
        if l == L:
            s = 1 / (1 + np.exp(-Z))
            dZ = dA * s * (1 - s)
        else:
            dZ = relu_backward(dA, Z)
        m = A_prev.shape[1]
        grads["dW" + str(l)] = 1. / m * np.dot(dZ, A_prev.T)
        grads["db" + str(l)] = 1. / m * np.sum(dZ, axis=1, keepdims=True)
        dA = np.dot(W.T, dZ)
    return grads


def L_layer_model(X, Y, layers_dims, learning_rate=0.0075, num_iterations=3000):  # noqa: N802
    np.random.seed(1)
    costs, parameters = [], {}
    for l in range(1, len(layers_dims)):  # noqa: E741 - the course's name
        parameters["W" + str(l)] = np.random.randn(layers_dims[l], layers_dims[l - 1]) / (
            np.sqrt(layers_dims[l - 1]))
        parameters["b" + str(l)] = np.zeros((layers_dims[l], 1))
    L = len(layers_dims) - 1
    for i in range(0, num_iterations):
        AL, caches = L_model_forward(X, parameters)
        cost = np.squeeze(-np.sum(Y * np.log(AL) + (1 - Y) * np.log(1 - AL)) / Y.shape[1])
        grads = L_model_backward(AL, Y, caches)
        for l in range(1, L + 1):  # noqa: E741 - the course's name
            parameters["W" + str(l)] = parameters["W" + str(l)] - learning_rate * grads[
                "dW" + str(l)]
            parameters["b" + str(l)] = parameters["b" + str(l)] - learning_rate * grads[
                "db" + str(l)]
        if i % 100 == 0 or i == num_iterations:
            costs.append(cost)
    return parameters, costs


def test_l_layer_model_stays_compiled_for_hundreds_of_trips():
    """Before: the call of 300 trips (and every longer one) took the relu mask's
    guard-margin exit at trip ~270 and ran eagerly."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 32))
    Y = (rng.random((1, 32)) > 0.5).astype(float)
    layers = [8, 4, 3, 1]
    compiled = jit(L_layer_model, cache="memory")
    for count in (6, 300, 420):
        got = compiled(X, Y, layers, num_iterations=count)
        want = L_layer_model(X, Y, layers, num_iterations=count)
        assert_same(got, want, rtol=1e-9, atol=1e-12)
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiled_calls"] == 3, compiled.explain()
    assert stats["compiles"] <= 2, compiled.explain()  # the first count's, then a dim
