"""Adversarial real-model tests, round 23b: public NumPy model code not tried before, in
its own idioms, run eagerly and through ``jit`` on copies of the same arguments.

Modelled on: SkalskiP's "ILearnDeepLearning.py" NumPy deep net (``init_layers`` seeding
``np.random`` and filling ``params_values['W' + str(layer_idx)]`` from a list of layer
dicts, ``full_forward_propagation`` keeping a ``memory`` dict, activations chosen by
``activation is "relu"``, ``full_backward_propagation`` over
``reversed(list(enumerate(nn_architecture)))``, ``update`` over ``enumerate(nn_architecture,
1)`` with ``-=`` into the dict, and ``train`` whose loop reports every 50 epochs through
``if verbose: print(...)`` and ``if callback is not None: callback(i, params_values)``).

Findings, fixed (each test fails before its fix). A wrong result: a callback passed in
(SkalskiP's ``train(..., callback=...)``, a logger's bound method) that appends to a list
reached by a key it holds in a variable (``self.history[self.key].append(v)``, ``seen[side]
.append(v)`` with ``side`` a closure cell) or to its own default list left the traced value
in the caller's list on the traced call and skipped the append on compiled calls. The
bound ``append`` of an outside list is now checked where it is called
(``frontend.Hooks.call``), and the up-front scan reads the globals, cells and defaults of
functions and bound methods passed in (``implicit._scan``): such calls run eagerly.

Needlessly eager: SkalskiP's ``train`` never compiled: its epoch loop holds a call as a
statement (``callback(i, params_values)``, under ``if callback is not None``), which kept
the loop from being captured, so it unrolled past the kernel limit (10 000 epochs: 10 075
kernels) and every call ran eagerly after seconds of tracing. A call statement under an
``if`` is now captured when no traced trip reaches it (``tracer/loop_effects.py``: a hook
before it refuses a trial that does, and the loop unrolls as before), and ``if i % 50 ==
0:`` holding only ``if <flag>:`` statements becomes ``if <flag> and i % 50 == 0:`` for
each, so a false flag asks nothing about the index (``loop_selected_appends``).
"""

import numpy as np
from real_model_checks import (
    all_compiled,
    assert_same,
    jitted,
    no_internal_errors,
    rng_for,
    run_calls,
)

# --- SkalskiP's NumPy deep net ---------------------------------------------------------------
ARCHITECTURE = [
    {"input_dim": 2, "output_dim": 4, "activation": "relu"},
    {"input_dim": 4, "output_dim": 1, "activation": "sigmoid"},
]


def init_layers(nn_architecture, seed=99):
    np.random.seed(seed)
    params_values = {}
    for idx, layer in enumerate(nn_architecture):
        layer_idx = idx + 1
        params_values["W" + str(layer_idx)] = np.random.randn(
            layer["output_dim"], layer["input_dim"]) * 0.1
        params_values["b" + str(layer_idx)] = np.random.randn(layer["output_dim"], 1) * 0.1
    return params_values


def sigmoid(Z):
    return 1 / (1 + np.exp(-Z))


def relu(Z):
    return np.maximum(0, Z)


def sigmoid_backward(dA, Z):
    sig = sigmoid(Z)
    return dA * sig * (1 - sig)


def relu_backward(dA, Z):
    dZ = np.array(dA, copy=True)
    dZ[Z <= 0] = 0
    return dZ


def layer_forward(A_prev, W_curr, b_curr, activation="relu"):
    Z_curr = np.dot(W_curr, A_prev) + b_curr
    if activation is "relu":  # noqa: F632 - as written there
        activation_func = relu
    elif activation is "sigmoid":  # noqa: F632
        activation_func = sigmoid
    else:
        raise Exception("Non-supported activation function")
    return activation_func(Z_curr), Z_curr


def layer_backward(dA_curr, W_curr, b_curr, Z_curr, A_prev, activation="relu"):
    m = A_prev.shape[1]
    if activation is "relu":  # noqa: F632 - as written there
        backward_activation_func = relu_backward
    elif activation is "sigmoid":  # noqa: F632
        backward_activation_func = sigmoid_backward
    else:
        raise Exception("Non-supported activation function")
    dZ_curr = backward_activation_func(dA_curr, Z_curr)
    dW_curr = np.dot(dZ_curr, A_prev.T) / m
    db_curr = np.sum(dZ_curr, axis=1, keepdims=True) / m
    return np.dot(W_curr.T, dZ_curr), dW_curr, db_curr


def full_forward(X, params_values, nn_architecture):
    memory = {}
    A_curr = X
    for idx, layer in enumerate(nn_architecture):
        layer_idx = idx + 1
        A_prev = A_curr
        A_curr, Z_curr = layer_forward(A_prev, params_values["W" + str(layer_idx)],
                                       params_values["b" + str(layer_idx)], layer["activation"])
        memory["A" + str(idx)] = A_prev
        memory["Z" + str(layer_idx)] = Z_curr
    return A_curr, memory


def get_cost_value(Y_hat, Y):
    m = Y_hat.shape[1]
    cost = -1 / m * (np.dot(Y, np.log(Y_hat).T) + np.dot(1 - Y, np.log(1 - Y_hat).T))
    return np.squeeze(cost)


def full_backward(Y_hat, Y, memory, params_values, nn_architecture):
    grads_values = {}
    Y = Y.reshape(Y_hat.shape)
    dA_prev = -(np.divide(Y, Y_hat) - np.divide(1 - Y, 1 - Y_hat))
    for layer_idx_prev, layer in reversed(list(enumerate(nn_architecture))):
        layer_idx_curr = layer_idx_prev + 1
        dA_curr = dA_prev
        dA_prev, dW_curr, db_curr = layer_backward(
            dA_curr, params_values["W" + str(layer_idx_curr)],
            params_values["b" + str(layer_idx_curr)], memory["Z" + str(layer_idx_curr)],
            memory["A" + str(layer_idx_prev)], layer["activation"])
        grads_values["dW" + str(layer_idx_curr)] = dW_curr
        grads_values["db" + str(layer_idx_curr)] = db_curr
    return grads_values


def update(params_values, grads_values, nn_architecture, learning_rate):
    for layer_idx, _layer in enumerate(nn_architecture, 1):
        params_values["W" + str(layer_idx)] -= learning_rate * grads_values["dW" + str(layer_idx)]
        params_values["b" + str(layer_idx)] -= learning_rate * grads_values["db" + str(layer_idx)]
    return params_values


def train(X, Y, nn_architecture, epochs, learning_rate, verbose=False, callback=None):
    params_values = init_layers(nn_architecture, 2)
    cost_history = []
    for i in range(epochs):
        Y_hat, cashe = full_forward(X, params_values, nn_architecture)
        cost = get_cost_value(Y_hat, Y)
        cost_history.append(cost)
        grads_values = full_backward(Y_hat, Y, cashe, params_values, nn_architecture)
        params_values = update(params_values, grads_values, nn_architecture, learning_rate)
        if i % 50 == 0:
            if verbose:
                print("Iteration: {:05} - cost: {:.5f}".format(i, cost))
            if callback is not None:
                callback(i, params_values)
    return params_values, cost_history


def _moons(rng, m):
    X = rng.standard_normal((2, m))
    return X, (X[0] * X[1] > 0).astype(np.float64).reshape(1, m)


# (relu hidden layers compile too, but a captured loop's margin on dZ[Z <= 0] = 0 grows
# with the trips and may send a call eagerly: see the round's report)
SIGMOID_ARCHITECTURE = [
    {"input_dim": 2, "output_dim": 4, "activation": "sigmoid"},
    {"input_dim": 4, "output_dim": 1, "activation": "sigmoid"},
]


def test_skalskip_train_with_a_callback_flag_compiles_over_epoch_counts():
    """Before the fix every call ran eagerly ('too large to compile': the epoch loop
    unrolled; 60 epochs of this net unroll into a program that compiles, 93 do not). Now
    the loop is captured: the first count's program, then one for every count; the later
    calls run compiled. Parameters and costs as eager's."""
    X, Y = _moons(rng_for(2301), 24)
    f = jitted(train)
    for epochs in (60, 75, 60, 93, 120):
        want = train(X, Y, SIGMOID_ARCHITECTURE, epochs, 0.1)
        got = f(X, Y, SIGMOID_ARCHITECTURE, epochs, 0.1)
        assert_same(got, want, rtol=1e-9, atol=1e-12)
    no_internal_errors(f)
    stats = f.stats()
    assert stats["compiles"] <= 2 and stats["compiled_calls"] >= 3, f.explain()
    assert all_compiled(f, 5), f.explain()


def test_a_callback_given_runs_at_its_trips_as_eager():
    """With a callback the loop is not captured (its trial reaches the call): it unrolls
    or runs eagerly, and the callback sees every reported epoch's parameters."""
    X, Y = _moons(rng_for(2302), 9)
    seen = {"eager": [], "jit": []}

    def note(side):
        return lambda i, params: seen[side].append((i, params["W1"].copy()))

    f = jitted(train)
    for epochs in (3, 52, 101):
        seen["eager"].clear()
        seen["jit"].clear()
        want = train(X, Y, ARCHITECTURE, epochs, 0.1, callback=note("eager"))
        got = f(X, Y, ARCHITECTURE, epochs, 0.1, callback=note("jit"))
        assert_same(got, want, rtol=1e-9, atol=1e-12)
        assert_same(seen["jit"], seen["eager"], rtol=1e-9, atol=1e-12, where="callback")
    no_internal_errors(f)


def descend_with_log(w, g, steps, log=None):
    """A flag-guarded call with no index test: ``if log is not None: log(i, w)``."""
    for i in range(steps):
        w = w - 0.1 * (w - g)
        if log is not None:
            log(i, float(w.sum()))
    return w


def test_a_flag_guarded_call_without_an_index_test():
    """Captured while ``log`` is None (one compile for the later counts); given a log,
    the trial reaches the call: the loop unrolls and the log holds every trip."""
    rng = rng_for(2303)
    g = rng.standard_normal(5)
    f = jitted(descend_with_log)
    for steps in (40, 53, 40, 97):
        w = rng.standard_normal(5)
        assert_same(f(w, g, steps), descend_with_log(w, g, steps))
    no_internal_errors(f)
    assert f.stats()["compiles"] <= 2 and f.stats()["compiled_calls"] >= 2, f.explain()
    for steps in (0, 1, 7):
        w = rng.standard_normal(5)
        eager_log, jit_log = [], []
        want = descend_with_log(w, g, steps, lambda i, s, log=eager_log: log.append((i, s)))
        got = f(w, g, steps, lambda i, s, log=jit_log: log.append((i, s)))
        assert_same(got, want)
        assert_same(jit_log, eager_log, where="log")


# --- callbacks appending through a key the front end cannot name --------------------------
class HistoryLogger:
    """A logger object whose method appends under a key it keeps (``self.key``)."""

    def __init__(self):
        self.history, self.key = {"loss": []}, "loss"

    def log(self, i, value):
        self.history[self.key].append(value * 1)


HISTORY = {"loss": []}


def history_callback(key):
    """A callback made by a factory: ``key`` is a closure cell."""
    return lambda i, value: HISTORY[key].append(value)


def report_through(w, callback):
    callback(0, w * 2)
    return w + 1


def test_a_callback_appending_under_a_kept_key_runs_eagerly_not_leaking_tracers():
    """Before the fix the traced value went into the caller's list (a ``Tracer`` object
    there after the first call) and compiled calls skipped the append: a list reached by
    a key held in a variable (``self.history[self.key]``, ``HISTORY[key]`` with ``key`` a
    closure cell) met no hook that saw the call as a mutation, nor did a lambda's default
    list (``lambda i, v, log=seen: log.append(v)``: taken for a list the call made). Now
    the bound ``append`` of an outside list is checked where it is called, and the up-front
    scan reads the globals, cells and defaults of functions passed in: the call runs
    eagerly."""
    f = jitted(report_through)
    for _ in range(3):
        eager_logger, jit_logger = HistoryLogger(), HistoryLogger()
        w = np.arange(3.0)
        assert_same(f(w, jit_logger.log), report_through(w, eager_logger.log))
        assert_same(jit_logger.history, eager_logger.history, where="history")
    for _ in range(3):
        HISTORY["loss"].clear()
        want = report_through(np.arange(3.0), history_callback("loss"))
        eager_history = list(HISTORY["loss"])
        HISTORY["loss"].clear()
        got = f(np.arange(3.0), history_callback("loss"))
        assert_same(got, want)
        assert_same(HISTORY["loss"], eager_history, where="HISTORY")
    for _ in range(3):
        eager_seen, jit_seen = [], []
        want = report_through(np.arange(3.0), lambda i, v, log=eager_seen: log.append(v))
        got = f(np.arange(3.0), lambda i, v, log=jit_seen: log.append(v))
        assert_same(got, want)
        assert_same(jit_seen, eager_seen, where="default list")


# --- gy910210's neural-network-from-scratch: a list of a trip's layer outputs ---------------
def fit_with_forward_list(X, y, W1, W2, epochs, lr):
    """Each epoch binds ``forward = [(None, X)]`` anew and appends a ``(mul, out)`` tuple
    per layer, reading ``forward[len(forward) - 1]`` and ``forward[i]`` back."""
    for _epoch in range(epochs):
        forward = [(None, X)]
        for W in (W1, W2):
            z = forward[len(forward) - 1][1] @ W
            forward.append((z, np.tanh(z)))
        d2 = (forward[-1][1] - y) * (1 - forward[2][1] ** 2)
        g2 = forward[1][1].T @ d2
        g1 = X.T @ ((d2 @ W2.T) * (1 - forward[1][1] ** 2))
        W1 = W1 - lr * g1
        W2 = W2 - lr * g2
    return W1, W2


def test_a_list_each_trip_binds_anew_and_appends_to_is_not_carried():
    """Before the fix the list was a carried value ('`forward` is a list after the first
    iteration, not an array'): the epoch loop unrolled, one compile per count and eager
    past the kernel limit (3 compiles, 1 compiled call of 5). A list the body binds before
    using it and nothing reads after the loop is the trip's own now."""
    rng = rng_for(2304)
    X, y = rng.standard_normal((20, 3)), rng.standard_normal((20, 1))
    W1, W2 = rng.standard_normal((3, 4)) * 0.3, rng.standard_normal((4, 1)) * 0.3
    f = run_calls(fit_with_forward_list, [(X, y, W1, W2, n, 0.01) for n in (40, 53, 97, 40, 300)],
                  repeats=1)
    no_internal_errors(f)
    assert f.stats()["compiles"] <= 2 and f.stats()["compiled_calls"] >= 3, f.explain()


# --- SkalskiP's CNN package: minibatches by x.take(indices=range(...)) from a generator -----
def generate_batches(x, y, batch_size):
    for i in range(0, x.shape[0], batch_size):
        yield (x.take(indices=range(i, min(i + batch_size, x.shape[0])), axis=0),
               y.take(indices=range(i, min(i + batch_size, y.shape[0])), axis=0))


def softmax_epoch(x, y, W, bs, lr):
    """Sequential.train's epoch: batches from the generator, ``y_hat[n_start:n_end, :] =
    y_hat_batch`` filled in place, accuracy and clipped cross-entropy after."""
    y_hat = np.zeros_like(y)
    for idx, (x_batch, y_batch) in enumerate(generate_batches(x, y, bs)):
        z = x_batch @ W
        e = np.exp(z - z.max(axis=1, keepdims=True))
        p = e / np.sum(e, axis=1, keepdims=True)
        W = W - lr * x_batch.T @ (p - y_batch) / x_batch.shape[0]
        n_start = idx * bs
        y_hat[n_start:n_start + p.shape[0], :] = p
    acc = (np.argmax(y_hat, axis=1) == np.argmax(y, axis=1)).mean()
    return W, y_hat, acc, -np.sum(y * np.log(np.clip(y_hat, 1e-20, 1.0))) / y.shape[0]


def test_minibatches_by_the_take_method_of_a_range_compile():
    """Before the fix ``x.take`` of a traced array was unsupported: every call ran
    eagerly. It is ``np.take`` now (a range as NumPy makes it an index array); batch
    sizes that do not divide the length, one short batch, a single batch."""
    rng = rng_for(2305)

    def data(n, bs):
        return (rng.standard_normal((n, 4)), np.eye(3)[rng.integers(0, 3, n)],
                rng.standard_normal((4, 3)) * 0.1, bs, 0.1)

    f = run_calls(softmax_epoch, [data(64, 16), data(7, 16), data(33, 8)])
    no_internal_errors(f)
    assert not f.stats()["eager_calls"] and f.stats()["compiled_calls"] >= 3, f.explain()
