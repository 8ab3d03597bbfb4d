"""Adversarial real-model tests, round 11b: classic NumPy neural-network code from books and
courses (Nielsen's network.py / network2.py, the nnfs book's layer, loss, optimizer and
Model objects, deeplearning.ai's L-layer nets with parameter dicts and caches lists,
NumPy autoencoders, VAEs and GANs), written in those idioms and run eagerly and through
``jit`` on copies of the same arguments and objects.

Covers what rounds 1-11 do not: biases and weights as Python lists of column vectors
walked by ``zip`` and by negative indices ``-l`` in backprop, Nielsen's cost classes with
staticmethods (``np.nan_to_num`` in the cross-entropy cost) and L2 weight decay in the
update, his list-of-(x, y)-tuples mini-batches of changing length; nnfs's
``self.accumulated_sum`` counters reset by ``new_pass()`` and fed by ``np.sum``, its
optimizers' ``hasattr``-created caches and per-sample softmax Jacobians;
deeplearning.ai's ``copy.deepcopy`` of the parameter dict and relu masks over dead
samples; a GAN's alternating updates and a tied-weight autoencoder; gradients of a
``@jit`` loss through Tensor autograd with ``tracejit.optim`` against eager Tensors and
finite differences. Batch sizes change between calls (1, primes, 0 where NumPy allows),
float32 and float64, non-contiguous inputs, NaN/Inf.

Each call compares results, dtypes, types and the arguments and objects afterwards with
eager NumPy, and an exception eager raises must be raised too.

Findings (each fixed, its test a regression). Wrong result: with the length dynamic,
``+=`` of a dim onto an attribute or dict item holding a dim the trace wrote (``self.seen
= len(a)``, then ``+= len(b)``) was dropped, so compiled calls kept the first length.
Needless eager runs: ``np.nan_to_num`` was not supported (Nielsen's
``CrossEntropyCost.fn`` and every function calling it ran eagerly); nnfs's accumulators
(``self.accumulated_sum = 0`` in ``new_pass()``, then ``+= np.sum(...)``) were refused as
settings the calls rebind, so its ``Model.train_step`` ran eagerly on every call;
``copy.deepcopy`` of traced arrays (deeplearning.ai's ``update_parameters``) was an
internal error; ``np.diagflat`` (nnfs's softmax backward) was not supported; ``W @ A +
b`` over a column that a relu zeroed is exactly 0 on both sides, but the error model's
underflow floor made ``Z <= 0`` take a guard-margin exit. Not fixed: a cost holding NaN
or Inf before ``np.nan_to_num`` still takes a guard-margin exit (no non-finite value is
bounded as exact); the gradient check's ``thetaplus[i][0] = ...`` writes through a view
(refused: the loop runs eagerly); a GAN step appending to ``self.history`` and dropout
with ``np.random.seed`` inside run eagerly, with the reason (known); float32 sigmoid
outputs at 0.5 +- rounding (tiny initial weights) compared with ``> 0.5`` take guard-
margin exits, as they should; deeplearning.ai's ``predict`` (``if probas[0, i] > 0.5``
per column in a loop) runs eagerly whenever a trip takes the other branch, and a dead
sample's ``sigmoid(0)`` is exactly 0.5 on both sides but bounded as inexact (exp, the add
and the division carry their rounding even where their operands are exact): a guard-
margin exit. Tests marked ``xfail(strict=True)`` are minimal reproductions of bugs found
this way.
"""

import copy

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for, run_calls

import tracejit as tj

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=2e-4, atol=2e-5)
TOLERANCE = {np.float64: F64, np.float32: F32}


def no_eager_calls(f):
    assert not f.stats()["eager_calls"], f.explain()


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def sigmoid_prime(z):
    return sigmoid(z) * (1 - sigmoid(z))


# --- Nielsen's network2.py: lists of column vectors, cost classes, L2 -----------------------------
class QuadraticCost:
    @staticmethod
    def fn(a, y):
        return 0.5 * np.linalg.norm(a - y) ** 2

    @staticmethod
    def delta(z, a, y):
        return (a - y) * sigmoid_prime(z)


class CrossEntropyCost:
    @staticmethod
    def fn(a, y):
        return np.sum(np.nan_to_num(-y * np.log(a) - (1 - y) * np.log(1 - a)))

    @staticmethod
    def delta(z, a, y):
        return a - y


class Network:
    def __init__(self, sizes, seed, cost=CrossEntropyCost, dtype=np.float64):
        rng = rng_for(seed)
        self.num_layers = len(sizes)
        self.sizes = sizes
        self.biases = [rng.standard_normal((y, 1)).astype(dtype) for y in sizes[1:]]
        self.weights = [
            (rng.standard_normal((y, x)) / np.sqrt(x)).astype(dtype)
            for x, y in zip(sizes[:-1], sizes[1:])
        ]
        self.cost = cost

    def feedforward(self, a):
        for b, w in zip(self.biases, self.weights):
            a = sigmoid(np.dot(w, a) + b)
        return a

    def backprop(self, x, y):
        nabla_b = [np.zeros(b.shape) for b in self.biases]
        nabla_w = [np.zeros(w.shape) for w in self.weights]
        activation = x
        activations = [x]
        zs = []
        for b, w in zip(self.biases, self.weights):
            z = np.dot(w, activation) + b
            zs.append(z)
            activation = sigmoid(z)
            activations.append(activation)
        delta = (self.cost).delta(zs[-1], activations[-1], y)
        nabla_b[-1] = delta
        nabla_w[-1] = np.dot(delta, activations[-2].transpose())
        for l in range(2, self.num_layers):  # noqa: E741 - the course's name
            z = zs[-l]
            sp = sigmoid_prime(z)
            delta = np.dot(self.weights[-l + 1].transpose(), delta) * sp
            nabla_b[-l] = delta
            nabla_w[-l] = np.dot(delta, activations[-l - 1].transpose())
        return (nabla_b, nabla_w)

    def update_mini_batch(self, mini_batch, eta, lmbda, n):
        nabla_b = [np.zeros(b.shape) for b in self.biases]
        nabla_w = [np.zeros(w.shape) for w in self.weights]
        for x, y in mini_batch:
            delta_nabla_b, delta_nabla_w = self.backprop(x, y)
            nabla_b = [nb + dnb for nb, dnb in zip(nabla_b, delta_nabla_b)]
            nabla_w = [nw + dnw for nw, dnw in zip(nabla_w, delta_nabla_w)]
        self.weights = [
            (1 - eta * (lmbda / n)) * w - (eta / len(mini_batch)) * nw
            for w, nw in zip(self.weights, nabla_w)
        ]
        self.biases = [b - (eta / len(mini_batch)) * nb for b, nb in zip(self.biases, nabla_b)]

    def update_matrix(self, X, Y, eta, lmbda, n):
        """The whole mini-batch as columns (the book's matrix-based exercise)."""
        nabla_b, nabla_w = self.backprop(X, Y)
        m = X.shape[1]
        self.weights = [
            (1 - eta * (lmbda / n)) * w - (eta / m) * nw for w, nw in zip(self.weights, nabla_w)
        ]
        self.biases = [
            b - (eta / m) * nb.sum(axis=1, keepdims=True) for b, nb in zip(self.biases, nabla_b)
        ]

    def total_cost(self, data, lmbda):
        cost = 0.0
        for x, y in data:
            a = self.feedforward(x)
            cost += self.cost.fn(a, y) / len(data)
        cost += 0.5 * (lmbda / len(data)) * sum(np.linalg.norm(w) ** 2 for w in self.weights)
        return cost

    def accuracy(self, data):
        results = [(np.argmax(self.feedforward(x)), np.argmax(y)) for (x, y) in data]
        return sum(int(x == y) for (x, y) in results)


def run_method(name, network, argument_sets, tolerance, repeats=2):
    """``network.name`` eagerly and jitted (a bound method) on deep copies of the network
    and of each argument tuple: results, arguments and the network's lists agree."""
    eager, compiled = copy.deepcopy(network), copy.deepcopy(network)
    f = jitted(getattr(compiled, name))
    for arguments in argument_sets:
        for _ in range(repeats):
            eager_args, jit_args = copy.deepcopy(arguments), copy.deepcopy(arguments)
            try:
                with np.errstate(all="ignore"):
                    want = getattr(eager, name)(*eager_args)
            except Exception as error:  # noqa: BLE001 - eager's exception is the contract
                with pytest.raises(type(error)), np.errstate(all="ignore"):
                    f(*jit_args)
                continue
            with np.errstate(all="ignore"):
                got = f(*jit_args)
            assert_same(got, want, **tolerance)
            assert_same(jit_args, eager_args, where="arguments after the call", **tolerance)
            assert_same(
                (compiled.biases, compiled.weights),
                (eager.biases, eager.weights),
                where="network after the call",
                **tolerance,
            )
    no_internal_errors(f)
    return f


def column_batch(rng, m, dtype):
    return (rng.standard_normal((4, m)).astype(dtype), rng.random((3, m)).astype(dtype))


def tuple_batch(rng, k, dtype):
    return [
        (rng.standard_normal((4, 1)).astype(dtype), rng.random((3, 1)).astype(dtype))
        for _ in range(k)
    ]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nielsen_feedforward_and_backprop_over_batch_sizes(dtype):
    rng, network = rng_for(1200), Network([4, 5, 3], 1, dtype=dtype)
    sizes = (1, 1, 7, 13, 0, 8)
    f = run_method(
        "feedforward", network, [column_batch(rng, m, dtype)[:1] for m in sizes], TOLERANCE[dtype]
    )
    no_eager_calls(f)
    f = run_method(
        "backprop", network, [column_batch(rng, m, dtype) for m in sizes], TOLERANCE[dtype]
    )
    no_eager_calls(f)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nielsen_updates_with_weight_decay(dtype):
    rng, network = rng_for(1201), Network([4, 5, 3], 2, dtype=dtype)
    f = run_method(
        "update_matrix",
        network,
        [
            column_batch(rng, m, dtype) + (eta, lmbda, 50)
            for m, eta, lmbda in ((1, 0.5, 0.1), (5, 0.5, 0.1), (7, 0.3, 0.2), (0, 0.5, 0.1))
        ],
        TOLERANCE[dtype],
    )
    no_internal_errors(f)
    f = run_method(
        "update_mini_batch",
        network,
        [(tuple_batch(rng, k, dtype), 0.5, 0.1, 50) for k in (3, 3, 5, 2)],
        TOLERANCE[dtype],
    )
    no_eager_calls(f)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nielsen_cross_entropy_total_cost_compiles(dtype):
    """np.nan_to_num ran eagerly on every call (not supported) before."""
    rng, network = rng_for(1202), Network([4, 5, 3], 3, dtype=dtype)
    f = run_method(
        "total_cost",
        network,
        [(tuple_batch(rng, k, dtype), lmbda) for k, lmbda in ((3, 0.1), (3, 0.2), (4, 0.1))],
        TOLERANCE[dtype],
    )
    no_eager_calls(f)
    f = run_method(
        "accuracy", network, [(tuple_batch(rng, k, dtype),) for k in (3, 6)], TOLERANCE[dtype]
    )
    no_eager_calls(f)


def nan_to_num_spellings(x):
    return (
        np.nan_to_num(x),
        np.nan_to_num(x, nan=-1.0, posinf=3.0, neginf=-3.0),
        np.nan_to_num(x * 2, posinf=1e300),
        np.nan_to_num(x > 0),
        np.nan_to_num(x.astype(np.int32)),
        np.nan_to_num(x[0, 0]),
        np.nan_to_num(x[1, 1]),
    )


def nan_to_num_in_place(x):
    np.nan_to_num(x, copy=False)
    return x * 1.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nan_to_num_of_nan_and_infinities(dtype):
    rng = rng_for(1203)
    x = (rng.standard_normal((5, 3)) * 1e38).astype(dtype)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    calls = [(x,), (x[:3],), (x.T,), (x[::2],)]
    f = run_calls(nan_to_num_spellings, calls, **TOLERANCE[dtype])
    no_eager_calls(f)
    f = run_calls(nan_to_num_in_place, [(x.copy(),), (x[:4].copy(),)], **TOLERANCE[dtype])
    no_eager_calls(f)


def test_nan_to_num_gradient_matches_eager_tensors():
    values = np.array([0.5, np.inf, np.nan, -2.0, -np.inf])

    def loss(t):
        return (np.nan_to_num(t, posinf=4.0) * t * 3.0).sum()

    eager = tj.tensor(values, requires_grad=True)
    with np.errstate(all="ignore"):
        want = loss(eager)
        want.backward()
    f = jitted(loss)
    for _ in range(2):
        compiled = tj.tensor(values, requires_grad=True)
        with np.errstate(all="ignore"):
            got = f(compiled)
            got.backward()
        assert_same(got.numpy(), want.numpy())
        assert_same(np.asarray(compiled.grad), np.asarray(eager.grad))


# --- nnfs: accumulators reset by new_pass() and fed by np.sum ----------------------------------
class AccumulatingLoss:
    def new_pass(self):
        self.accumulated_sum = 0
        self.accumulated_count = 0

    def calculate(self, output):
        sample_losses = -np.log(np.clip(output, 1e-7, 1 - 1e-7))
        self.accumulated_sum += np.sum(sample_losses)
        self.accumulated_count += len(sample_losses)
        return np.mean(sample_losses)

    def calculate_accumulated(self):
        return self.accumulated_sum / self.accumulated_count


class Evaluator:
    def __init__(self):
        self.loss = AccumulatingLoss()

    def step(self, output):
        self.loss.new_pass()
        first = self.loss.calculate(output[: len(output) // 2 + 1])
        self.loss.calculate(output[len(output) // 2 + 1 :])
        return first, self.loss.calculate_accumulated()


def test_nnfs_accumulators_reset_then_added_to_compile():
    """Ran eagerly on every call ('attributes holding numbers kept changing role'): the
    0 that new_pass() wrote, then += np.sum(...), was taken for a setting read and rebound."""
    rng = rng_for(1204)
    eager, compiled = Evaluator(), Evaluator()
    f = jitted(compiled.step)
    for n in (3, 3, 5, 5, 8, 13, 13):
        output = rng.random(n)
        assert_same(f(output), eager.step(output))
        assert_same(vars(compiled.loss), vars(eager.loss), where="loss after the call")
    no_eager_calls(f)


class SampleCounter:
    def __init__(self):
        self.stats = {"seen": 0}

    def count_attribute(self, x):
        self.seen = len(x[: len(x) // 2 + 1])
        self.seen += len(x[len(x) // 2 + 1 :])
        return x.sum()

    def count_item(self, x):
        self.stats["seen"] = len(x) + 1
        self.stats["seen"] += len(x)
        return x.sum()


@pytest.mark.parametrize("method", ["count_attribute", "count_item"])
def test_a_length_added_to_a_length_kept_on_an_object(method):
    """Wrong before: with the length dynamic, ``+=`` of a dim onto an attribute or dict
    item holding a dim this trace wrote was dropped (the in-place add's result was not
    written back), so compiled calls kept the first length (3 where NumPy counts 5)."""
    rng = rng_for(1205)
    eager, compiled = SampleCounter(), SampleCounter()
    f = jitted(getattr(compiled, method))
    for n in (3, 3, 5, 5, 8, 7, 1):
        x = rng.standard_normal(n)
        assert_same(f(x), getattr(eager, method)(x))
        assert_same(vars(compiled), vars(eager), where="counter after the call")
    no_eager_calls(f)


# --- nnfs: layer objects linked by prev/next, Adam/SGD with lazily created caches -----------
# (class names as the book spells them)
class Layer_Dense:
    def __init__(
        self,
        n_inputs,
        n_neurons,
        rng,
        weight_regularizer_l1=0,
        weight_regularizer_l2=0,
        bias_regularizer_l1=0,
        bias_regularizer_l2=0,
        dtype=np.float64,
    ):
        self.weights = (0.01 * rng.standard_normal((n_inputs, n_neurons))).astype(dtype)
        self.biases = np.zeros((1, n_neurons), dtype=dtype)
        self.weight_regularizer_l1 = weight_regularizer_l1
        self.weight_regularizer_l2 = weight_regularizer_l2
        self.bias_regularizer_l1 = bias_regularizer_l1
        self.bias_regularizer_l2 = bias_regularizer_l2

    def forward(self, inputs, training):
        self.inputs = inputs
        self.output = np.dot(inputs, self.weights) + self.biases

    def backward(self, dvalues):
        self.dweights = np.dot(self.inputs.T, dvalues)
        self.dbiases = np.sum(dvalues, axis=0, keepdims=True)
        if self.weight_regularizer_l1 > 0:
            dL1 = np.ones_like(self.weights)
            dL1[self.weights < 0] = -1
            self.dweights += self.weight_regularizer_l1 * dL1
        if self.weight_regularizer_l2 > 0:
            self.dweights += 2 * self.weight_regularizer_l2 * self.weights
        if self.bias_regularizer_l1 > 0:
            dL1 = np.ones_like(self.biases)
            dL1[self.biases < 0] = -1
            self.dbiases += self.bias_regularizer_l1 * dL1
        if self.bias_regularizer_l2 > 0:
            self.dbiases += 2 * self.bias_regularizer_l2 * self.biases
        self.dinputs = np.dot(dvalues, self.weights.T)


class Layer_Input:
    def forward(self, inputs, training):
        self.output = inputs


class Activation_ReLU:
    def forward(self, inputs, training):
        self.inputs = inputs
        self.output = np.maximum(0, inputs)

    def backward(self, dvalues):
        self.dinputs = dvalues.copy()
        self.dinputs[self.inputs <= 0] = 0

    def predictions(self, outputs):
        return outputs


class Activation_Softmax:
    def forward(self, inputs, training):
        self.inputs = inputs
        exp_values = np.exp(inputs - np.max(inputs, axis=1, keepdims=True))
        probabilities = exp_values / np.sum(exp_values, axis=1, keepdims=True)
        self.output = probabilities

    def predictions(self, outputs):
        return np.argmax(outputs, axis=1)


class Activation_Sigmoid:
    def forward(self, inputs, training):
        self.inputs = inputs
        self.output = 1 / (1 + np.exp(-inputs))

    def backward(self, dvalues):
        self.dinputs = dvalues * (1 - self.output) * self.output

    def predictions(self, outputs):
        return (outputs > 0.5) * 1


class Loss:
    def regularization_loss(self):
        regularization_loss = 0
        for layer in self.trainable_layers:
            if layer.weight_regularizer_l1 > 0:
                regularization_loss += layer.weight_regularizer_l1 * np.sum(np.abs(layer.weights))
            if layer.weight_regularizer_l2 > 0:
                regularization_loss += layer.weight_regularizer_l2 * np.sum(
                    layer.weights * layer.weights
                )
            if layer.bias_regularizer_l1 > 0:
                regularization_loss += layer.bias_regularizer_l1 * np.sum(np.abs(layer.biases))
            if layer.bias_regularizer_l2 > 0:
                regularization_loss += layer.bias_regularizer_l2 * np.sum(
                    layer.biases * layer.biases
                )
        return regularization_loss

    def remember_trainable_layers(self, trainable_layers):
        self.trainable_layers = trainable_layers

    def calculate(self, output, y, *, include_regularization=False):
        sample_losses = self.forward(output, y)
        data_loss = np.mean(sample_losses)
        self.accumulated_sum += np.sum(sample_losses)
        self.accumulated_count += len(sample_losses)
        if not include_regularization:
            return data_loss
        return data_loss, self.regularization_loss()

    def new_pass(self):
        self.accumulated_sum = 0
        self.accumulated_count = 0


class Loss_CategoricalCrossentropy(Loss):
    def forward(self, y_pred, y_true):
        samples = len(y_pred)
        y_pred_clipped = np.clip(y_pred, 1e-7, 1 - 1e-7)
        if len(y_true.shape) == 1:
            correct_confidences = y_pred_clipped[range(samples), y_true]
        elif len(y_true.shape) == 2:
            correct_confidences = np.sum(y_pred_clipped * y_true, axis=1)
        negative_log_likelihoods = -np.log(correct_confidences)
        return negative_log_likelihoods

    def backward(self, dvalues, y_true):
        samples = len(dvalues)
        labels = len(dvalues[0])
        if len(y_true.shape) == 1:
            y_true = np.eye(labels)[y_true]
        self.dinputs = -y_true / dvalues
        self.dinputs = self.dinputs / samples


class Loss_BinaryCrossentropy(Loss):
    def forward(self, y_pred, y_true):
        y_pred_clipped = np.clip(y_pred, 1e-7, 1 - 1e-7)
        sample_losses = -(
            y_true * np.log(y_pred_clipped) + (1 - y_true) * np.log(1 - y_pred_clipped)
        )
        sample_losses = np.mean(sample_losses, axis=-1)
        return sample_losses

    def backward(self, dvalues, y_true):
        samples = len(dvalues)
        outputs = len(dvalues[0])
        clipped_dvalues = np.clip(dvalues, 1e-7, 1 - 1e-7)
        self.dinputs = -(y_true / clipped_dvalues - (1 - y_true) / (1 - clipped_dvalues)) / outputs
        self.dinputs = self.dinputs / samples


class Activation_Softmax_Loss_CategoricalCrossentropy:
    def backward(self, dvalues, y_true):
        samples = len(dvalues)
        if len(y_true.shape) == 2:
            y_true = np.argmax(y_true, axis=1)
        self.dinputs = dvalues.copy()
        self.dinputs[range(samples), y_true] -= 1
        self.dinputs = self.dinputs / samples


class Optimizer_SGD:
    def __init__(self, learning_rate=1.0, decay=0.0, momentum=0.0):
        self.learning_rate = learning_rate
        self.current_learning_rate = learning_rate
        self.decay = decay
        self.iterations = 0
        self.momentum = momentum

    def pre_update_params(self):
        if self.decay:
            self.current_learning_rate = self.learning_rate * (
                1.0 / (1.0 + self.decay * self.iterations)
            )

    def update_params(self, layer):
        if self.momentum:
            if not hasattr(layer, "weight_momentums"):
                layer.weight_momentums = np.zeros_like(layer.weights)
                layer.bias_momentums = np.zeros_like(layer.biases)
            weight_updates = (
                self.momentum * layer.weight_momentums - self.current_learning_rate * layer.dweights
            )
            layer.weight_momentums = weight_updates
            bias_updates = (
                self.momentum * layer.bias_momentums - self.current_learning_rate * layer.dbiases
            )
            layer.bias_momentums = bias_updates
        else:
            weight_updates = -self.current_learning_rate * layer.dweights
            bias_updates = -self.current_learning_rate * layer.dbiases
        layer.weights += weight_updates
        layer.biases += bias_updates

    def post_update_params(self):
        self.iterations += 1


class Optimizer_Adam:
    def __init__(self, learning_rate=0.001, decay=0.0, epsilon=1e-7, beta_1=0.9, beta_2=0.999):
        self.learning_rate = learning_rate
        self.current_learning_rate = learning_rate
        self.decay = decay
        self.iterations = 0
        self.epsilon = epsilon
        self.beta_1 = beta_1
        self.beta_2 = beta_2

    def pre_update_params(self):
        if self.decay:
            self.current_learning_rate = self.learning_rate * (
                1.0 / (1.0 + self.decay * self.iterations)
            )

    def update_params(self, layer):
        if not hasattr(layer, "weight_cache"):
            layer.weight_momentums = np.zeros_like(layer.weights)
            layer.weight_cache = np.zeros_like(layer.weights)
            layer.bias_momentums = np.zeros_like(layer.biases)
            layer.bias_cache = np.zeros_like(layer.biases)
        layer.weight_momentums = (
            self.beta_1 * layer.weight_momentums + (1 - self.beta_1) * layer.dweights
        )
        layer.bias_momentums = (
            self.beta_1 * layer.bias_momentums + (1 - self.beta_1) * layer.dbiases
        )
        weight_momentums_corrected = layer.weight_momentums / (
            1 - self.beta_1 ** (self.iterations + 1)
        )
        bias_momentums_corrected = layer.bias_momentums / (1 - self.beta_1 ** (self.iterations + 1))
        layer.weight_cache = (
            self.beta_2 * layer.weight_cache + (1 - self.beta_2) * layer.dweights**2
        )
        layer.bias_cache = self.beta_2 * layer.bias_cache + (1 - self.beta_2) * layer.dbiases**2
        weight_cache_corrected = layer.weight_cache / (1 - self.beta_2 ** (self.iterations + 1))
        bias_cache_corrected = layer.bias_cache / (1 - self.beta_2 ** (self.iterations + 1))
        layer.weights += (
            -self.current_learning_rate
            * weight_momentums_corrected
            / (np.sqrt(weight_cache_corrected) + self.epsilon)
        )
        layer.biases += (
            -self.current_learning_rate
            * bias_momentums_corrected
            / (np.sqrt(bias_cache_corrected) + self.epsilon)
        )

    def post_update_params(self):
        self.iterations += 1


class Accuracy_Categorical:
    def __init__(self, *, binary=False):
        self.binary = binary

    def init(self, y):
        pass

    def compare(self, predictions, y):
        if not self.binary and len(y.shape) == 2:
            y = np.argmax(y, axis=1)
        return predictions == y

    def calculate(self, predictions, y):
        comparisons = self.compare(predictions, y)
        accuracy = np.mean(comparisons)
        self.accumulated_sum += np.sum(comparisons)
        self.accumulated_count += len(comparisons)
        return accuracy

    def new_pass(self):
        self.accumulated_sum = 0
        self.accumulated_count = 0


class Model:
    def __init__(self):
        self.layers = []
        self.softmax_classifier_output = None

    def add(self, layer):
        self.layers.append(layer)

    def set(self, *, loss, optimizer, accuracy):
        self.loss = loss
        self.optimizer = optimizer
        self.accuracy = accuracy

    def finalize(self):
        self.input_layer = Layer_Input()
        layer_count = len(self.layers)
        self.trainable_layers = []
        for i in range(layer_count):
            if i == 0:
                self.layers[i].prev = self.input_layer
                self.layers[i].next = self.layers[i + 1]
            elif i < layer_count - 1:
                self.layers[i].prev = self.layers[i - 1]
                self.layers[i].next = self.layers[i + 1]
            else:
                self.layers[i].prev = self.layers[i - 1]
                self.layers[i].next = self.loss
                self.output_layer_activation = self.layers[i]
            if hasattr(self.layers[i], "weights"):
                self.trainable_layers.append(self.layers[i])
        self.loss.remember_trainable_layers(self.trainable_layers)
        if isinstance(self.layers[-1], Activation_Softmax) and isinstance(
            self.loss, Loss_CategoricalCrossentropy
        ):
            self.softmax_classifier_output = Activation_Softmax_Loss_CategoricalCrossentropy()

    def forward(self, X, training):
        self.input_layer.forward(X, training)
        for layer in self.layers:
            layer.forward(layer.prev.output, training)
        return layer.output

    def backward(self, output, y):
        if self.softmax_classifier_output is not None:
            self.softmax_classifier_output.backward(output, y)
            self.layers[-1].dinputs = self.softmax_classifier_output.dinputs
            for layer in reversed(self.layers[:-1]):
                layer.backward(layer.next.dinputs)
            return
        self.loss.backward(output, y)
        for layer in reversed(self.layers):
            layer.backward(layer.next.dinputs)

    def train_step(self, X, y):
        self.loss.new_pass()
        self.accuracy.new_pass()
        output = self.forward(X, training=True)
        data_loss, regularization_loss = self.loss.calculate(output, y, include_regularization=True)
        loss = data_loss + regularization_loss
        predictions = self.output_layer_activation.predictions(output)
        accuracy = self.accuracy.calculate(predictions, y)
        self.backward(output, y)
        self.optimizer.pre_update_params()
        for layer in self.trainable_layers:
            self.optimizer.update_params(layer)
        self.optimizer.post_update_params()
        return loss, accuracy

    def evaluate_step(self, X, y):
        output = self.forward(X, training=False)
        loss = self.loss.calculate(output, y)
        predictions = self.output_layer_activation.predictions(output)
        self.accuracy.calculate(predictions, y)
        return loss


def make_nnfs_model(rng, dtype=np.float64, optimizer="adam", softmax=True, l2=5e-4):
    model = Model()
    model.add(Layer_Dense(3, 8, rng, weight_regularizer_l2=l2, bias_regularizer_l2=l2, dtype=dtype))
    model.add(Activation_ReLU())
    model.add(Layer_Dense(8, 8, rng, weight_regularizer_l1=1e-4, dtype=dtype))
    model.add(Activation_ReLU())
    if softmax:
        model.add(Layer_Dense(8, 3, rng, dtype=dtype))
        model.add(Activation_Softmax())
        loss = Loss_CategoricalCrossentropy()
        acc = Accuracy_Categorical()
    else:
        model.add(Layer_Dense(8, 1, rng, dtype=dtype))
        model.add(Activation_Sigmoid())
        loss = Loss_BinaryCrossentropy()
        acc = Accuracy_Categorical(binary=True)
    opt = (
        Optimizer_Adam(learning_rate=0.05, decay=5e-7)
        if optimizer == "adam"
        else Optimizer_SGD(1.0, decay=1e-3, momentum=0.9)
    )
    model.set(loss=loss, optimizer=opt, accuracy=acc)
    model.finalize()
    return model


def nnfs_state(model):
    """Everything a train step changes: each layer's arrays and caches, the optimizer's
    counters, the loss's and accuracy's accumulators."""
    layers = [
        {key: value for key, value in vars(layer).items() if key not in ("prev", "next")}
        for layer in model.layers
    ]
    loss = {key: value for key, value in vars(model.loss).items() if key != "trainable_layers"}
    return layers, vars(model.optimizer), loss, vars(model.accuracy)


@pytest.mark.parametrize("optimizer, labels, dtype", [  # (about 5 s each: CI time)
    ("adam", "one-hot", np.float32), ("sgd", "binary", np.float64)])
def test_nnfs_model_train_and_evaluate_steps(optimizer, labels, dtype):
    """The train step ran eagerly on every call before (the loss's accumulated_sum, reset
    to 0 by new_pass(), was refused as a setting the call rebinds)."""
    rng = rng_for(1206)
    model = make_nnfs_model(rng_for(2), dtype, optimizer, softmax=labels != "binary")
    eager, compiled = copy.deepcopy(model), copy.deepcopy(model)
    train, evaluate = jitted(compiled.train_step), jitted(compiled.evaluate_step)
    tolerance = TOLERANCE[dtype]

    def batch(n):
        X = rng.standard_normal((n, 3)).astype(dtype)
        if labels == "binary":
            return X, rng.integers(0, 2, (n, 1)).astype(dtype)
        y = rng.integers(0, 3, n)
        return X, (np.eye(3, dtype=dtype)[y] if labels == "one-hot" else y)

    for n in (1, 1, 7, 13, 5):
        X, y = batch(n)
        with np.errstate(all="ignore"):
            assert_same(train(X.copy(), y.copy()), eager.train_step(X, y), **tolerance)
        assert_same(nnfs_state(compiled), nnfs_state(eager), where="model", **tolerance)
    for n in (4, 11):
        X, y = batch(n)
        X = np.asfortranarray(np.repeat(X, 2, axis=1))[:, ::2]  # strided, Fortran-ordered
        assert_same(evaluate(X, y), eager.evaluate_step(X, y), **tolerance)
        assert_same(nnfs_state(compiled), nnfs_state(eager), where="model", **tolerance)
    no_internal_errors(train)
    if dtype == np.float64:
        no_eager_calls(train)
    else:
        # An untrained float32 model's outputs sit within rounding of each other (sigmoids
        # at 0.5; softmax probabilities 1/3 +- 20 ulp, logits ~1e-6): the argmax check,
        # which reads the products since they have NumPy's bits (7df6221), takes a
        # guard-margin exit there, as it should; the trained calls compile.
        stats = train.stats()
        assert set(stats["eager_calls"]) <= {"guard margin"}, train.explain()
        assert stats["compiled_calls"] >= 3, train.explain()


# --- deeplearning.ai: parameter dicts keyed "W" + str(l), caches lists, deep-copied updates ------
def linear_activation_forward(A_prev, W, b, activation):
    Z = W.dot(A_prev) + b
    A = 1 / (1 + np.exp(-Z)) if activation == "sigmoid" else np.maximum(0, Z)
    return A, ((A_prev, W, b), Z)


def L_model_forward(X, parameters):
    caches = []
    A = X
    L = len(parameters) // 2
    for l in range(1, L):  # noqa: E741 - the course's name
        A, cache = linear_activation_forward(A, parameters["W" + str(l)],
                                             parameters["b" + str(l)], "relu")
        caches.append(cache)
    AL, cache = linear_activation_forward(A, parameters["W" + str(L)],
                                          parameters["b" + str(L)], "sigmoid")
    caches.append(cache)
    return AL, caches


def compute_cost(AL, Y):
    m = Y.shape[1]
    cost = (1.0 / m) * (-np.dot(Y, np.log(AL).T) - np.dot(1 - Y, np.log(1 - AL).T))
    return np.squeeze(cost)


def linear_activation_backward(dA, cache, activation):
    (A_prev, W, b), Z = cache
    if activation == "relu":
        dZ = np.array(dA, copy=True)
        dZ[Z <= 0] = 0
    else:
        s = 1 / (1 + np.exp(-Z))
        dZ = dA * s * (1 - s)
    m = A_prev.shape[1]
    dW = 1.0 / m * np.dot(dZ, A_prev.T)
    db = 1.0 / m * np.sum(dZ, axis=1, keepdims=True)
    return np.dot(W.T, dZ), dW, db


def L_model_backward(AL, Y, caches):
    grads = {}
    L = len(caches)
    Y = Y.reshape(AL.shape)
    dAL = -(np.divide(Y, AL) - np.divide(1 - Y, 1 - AL))
    grads["dA" + str(L - 1)], grads["dW" + str(L)], grads["db" + str(L)] = (
        linear_activation_backward(dAL, caches[L - 1], "sigmoid"))
    for l in reversed(range(L - 1)):  # noqa: E741 - the course's name
        dA_prev, dW, db = linear_activation_backward(grads["dA" + str(l + 1)], caches[l],
                                                     "relu")
        grads["dA" + str(l)] = dA_prev
        grads["dW" + str(l + 1)] = dW
        grads["db" + str(l + 1)] = db
    return grads


def update_parameters(params, grads, learning_rate):
    parameters = copy.deepcopy(params)
    L = len(parameters) // 2
    for l in range(L):  # noqa: E741 - the course's name
        parameters["W" + str(l + 1)] -= learning_rate * grads["dW" + str(l + 1)]
        parameters["b" + str(l + 1)] = parameters["b" + str(l + 1)] - (
            learning_rate * grads["db" + str(l + 1)])
    return parameters


def dlai_train_step(X, Y, parameters, learning_rate):
    AL, caches = L_model_forward(X, parameters)
    cost = compute_cost(AL, Y)
    grads = L_model_backward(AL, Y, caches)
    return update_parameters(parameters, grads, learning_rate), cost


def initialize_parameters_deep(layer_dims, seed, dtype):
    rng = rng_for(seed)
    parameters = {}
    for l in range(1, len(layer_dims)):  # noqa: E741 - the course's name
        parameters["W" + str(l)] = (rng.standard_normal((layer_dims[l], layer_dims[l - 1]))
                                    / np.sqrt(layer_dims[l - 1])).astype(dtype)
        parameters["b" + str(l)] = np.zeros((layer_dims[l], 1), dtype=dtype)
    return parameters


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dlai_train_step_deep_copying_the_parameters(dtype):
    """Ran eagerly on every call before, for an internal error: copy.deepcopy(params) of
    a dict of traced arrays ('cannot pickle module object'). The in-place ``-=`` on the
    copy must leave the caller's dict alone."""
    rng = rng_for(1207)
    parameters = initialize_parameters_deep([5, 4, 3, 1], 3, dtype)

    def batch(m):
        X = rng.standard_normal((5, m)).astype(dtype)
        return X, (rng.random((1, m)) > 0.5).astype(dtype)

    calls = [batch(m) + (parameters, 0.0075) for m in (1, 1, 7, 13, 16)]
    f = run_calls(dlai_train_step, calls, **TOLERANCE[dtype])
    no_eager_calls(f)


def relu_mask_after_a_dead_column(X, W1, W2):
    A1 = np.maximum(0, W1 @ X - 1.0)
    Z2 = W2 @ A1 + np.zeros((W2.shape[0], 1))
    dZ2 = np.ones_like(Z2)
    dZ2[Z2 <= 0] = 0
    return dZ2, (W2 @ A1 <= 0).sum(axis=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_relu_mask_of_a_product_over_a_dead_column_stays_compiled(dtype):
    """A sample whose hidden units are all dead gives W2 @ A1 + b exactly 0 on both sides,
    yet the error model bounded it by the underflow floor (eta per product, and per sum),
    so ``Z2 <= 0`` took a guard-margin exit on every such call (the dlai train step above,
    13 of its 16 samples fine, one dead)."""
    rng = rng_for(1209)
    W1, W2 = rng.standard_normal((4, 3)).astype(dtype), rng.standard_normal((2, 4)).astype(dtype)
    calls = []
    for n in (5, 5, 9, 16):
        X = rng.standard_normal((3, n)).astype(dtype)
        X[:, 1] = 0.0  # every unit at -1: a dead column
        X[:, 2] = 0.01 * X[:, 2]
        calls.append((X, W1, W2))
    f = run_calls(relu_mask_after_a_dead_column, calls)
    no_eager_calls(f)


def copies_inside(x):
    y = x * 2
    z = copy.deepcopy(y)
    z += 1
    first = copy.copy(y[0])
    pair = copy.deepcopy([y, y])
    pair[0][0] = -5.0
    return y, z, first, copy.deepcopy(len(x)), copy.deepcopy(float(x.sum())), pair, (
        pair[1] is pair[0])


def test_copy_and_deepcopy_of_traced_values():
    rng = rng_for(1208)
    f = run_calls(copies_inside, [(rng.standard_normal(n),) for n in (2, 2, 5, 7, 1)])
    no_eager_calls(f)


# --- Tensor autograd: a @jit loss trained with tracejit.optim -------------------------------------
def softmax_mlp_loss(W1, b1, W2, b2, X, y):  # noqa: N803
    hidden = np.maximum(0, X @ W1 + b1)
    logits = hidden @ W2 + b2
    logits = logits - np.max(logits, axis=1, keepdims=True)
    probabilities = np.exp(logits) / np.sum(np.exp(logits), axis=1, keepdims=True)
    probabilities = np.clip(probabilities, 1e-7, 1 - 1e-7)
    return -np.mean(np.log(probabilities[np.arange(len(y)), y]))


def vae_loss(params, x, eps):
    """Reparameterisation with the noise passed in; reconstruction plus KL."""
    h = np.tanh(x @ params["We"] + params["be"])
    mu, logvar = h @ params["Wmu"], h @ params["Wlv"]
    z = mu + np.exp(0.5 * logvar) * eps
    reconstruction = np.clip(1 / (1 + np.exp(-(z @ params["Wd"] + params["bd"]))), 1e-7,
                             1 - 1e-7)
    bce = -np.sum(x * np.log(reconstruction) + (1 - x) * np.log(1 - reconstruction))
    kl = -0.5 * np.sum(1 + logvar - mu**2 - np.exp(logvar))
    return (bce + kl) / x.shape[0]


def finite_difference(loss, arrays, which, epsilon=1e-6):
    """Central differences of ``loss(*arrays)`` with respect to ``arrays[which]``."""
    target, gradient = arrays[which], np.zeros_like(arrays[which])
    for index in np.ndindex(target.shape):
        old = target[index]
        target[index] = old + epsilon
        plus = float(loss(*arrays))
        target[index] = old - epsilon
        minus = float(loss(*arrays))
        target[index] = old
        gradient[index] = (plus - minus) / (2 * epsilon)
    return gradient


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_training_a_jit_loss_through_tensor_autograd(dtype, optimizer):
    rng = rng_for(1210)
    initial = [rng.standard_normal((3, 6)) * 0.5, np.zeros(6), rng.standard_normal((6, 3)) * 0.5,
               np.zeros(3)]
    initial = [array.astype(dtype) for array in initial]
    eager = [tj.tensor(array.copy(), requires_grad=True) for array in initial]
    compiled = [tj.tensor(array.copy(), requires_grad=True) for array in initial]
    eager_step = getattr(tj.optim, optimizer)(eager, lr=0.05)
    compiled_step = getattr(tj.optim, optimizer)(compiled, lr=0.05)
    loss = jitted(softmax_mlp_loss)
    tolerance = TOLERANCE[dtype]
    for step, n in enumerate((1, 5, 7, 13, 13, 8, 2)):
        X, y = rng.standard_normal((n, 3)).astype(dtype), rng.integers(0, 3, n)
        want, got = softmax_mlp_loss(*eager, X, y), loss(*compiled, X, y)
        eager_step.zero_grad()
        compiled_step.zero_grad()
        want.backward()
        got.backward()
        assert type(got) is type(want)
        assert_same(got.numpy(), want.numpy(), **tolerance)
        for mine, theirs in zip(compiled, eager):
            assert_same(np.asarray(mine.grad), np.asarray(theirs.grad), **tolerance)
        if dtype == np.float64 and step == 2:
            arrays = [parameter.numpy().copy() for parameter in eager]
            for which in range(4):
                numeric = finite_difference(
                    lambda *a, X=X, y=y: softmax_mlp_loss(*a, X, y), arrays, which)
                np.testing.assert_allclose(np.asarray(compiled[which].grad), numeric,
                                           rtol=1e-5, atol=1e-6)
        eager_step.step()
        compiled_step.step()
        for mine, theirs in zip(compiled, eager):
            assert_same(mine.numpy(), theirs.numpy(), where="parameters", **tolerance)
    no_eager_calls(loss)


def test_vae_and_nielsen_losses_differentiate_through_jit():
    rng = rng_for(1211)
    shapes = {"We": (6, 4), "be": (4,), "Wmu": (4, 2), "Wlv": (4, 2), "Wd": (2, 6), "bd": (6,)}
    initial = {key: rng.standard_normal(shape) * 0.3 for key, shape in shapes.items()}
    loss = jitted(vae_loss)
    for m in (1, 5, 11, 11, 16):
        x, eps = (rng.random((m, 6)) > 0.5).astype(float), rng.standard_normal((m, 2))
        eager = {key: tj.tensor(value.copy(), requires_grad=True) for key, value in initial.items()}
        compiled = {key: tj.tensor(value.copy(), requires_grad=True)
                    for key, value in initial.items()}
        want, got = vae_loss(eager, x, eps), loss(compiled, x, eps)
        want.backward()
        got.backward()
        assert_same(got.numpy(), want.numpy())
        for key in initial:
            assert_same(np.asarray(compiled[key].grad), np.asarray(eager[key].grad),
                        rtol=1e-8, atol=1e-11, where=key)
        arrays = list(initial.values())
        numeric = finite_difference(
            lambda *a, x=x, eps=eps: vae_loss(dict(zip(initial, a)), x, eps), arrays, 2)
        np.testing.assert_allclose(np.asarray(compiled["Wmu"].grad), numeric, rtol=1e-5,
                                   atol=1e-7)
    no_eager_calls(loss)

    network = Network([4, 5, 3], 4)
    weights, biases = network.weights, network.biases

    def nielsen_loss(ws, bs, X, Y):  # noqa: N803
        activation = X
        for w, b in zip(ws, bs):
            activation = sigmoid(np.dot(w, activation) + b)
        return CrossEntropyCost.fn(activation, Y) / X.shape[1] + 0.05 * sum(
            (w * w).sum() for w in ws)

    loss = jitted(nielsen_loss)
    for m in (1, 7, 13, 13):
        X, Y = rng.standard_normal((4, m)), rng.random((3, m))
        eager = [[tj.tensor(a.copy(), requires_grad=True) for a in group]
                 for group in (weights, biases)]
        compiled = [[tj.tensor(a.copy(), requires_grad=True) for a in group]
                    for group in (weights, biases)]
        want, got = nielsen_loss(*eager, X, Y), loss(*compiled, X, Y)
        want.backward()
        got.backward()
        assert_same(got.numpy(), want.numpy())
        for mine, theirs in zip(compiled[0] + compiled[1], eager[0] + eager[1]):
            assert_same(np.asarray(mine.grad), np.asarray(theirs.grad), rtol=1e-9, atol=1e-12)
    no_eager_calls(loss)


# --- a NumPy GAN with alternating updates, a tied-weight denoising autoencoder --------------------
class TinyGAN:
    def __init__(self, seed, dtype):
        rng = rng_for(seed)

        def weights(*shape):
            return (rng.standard_normal(shape) * 0.3).astype(dtype)

        self.G = {"W1": weights(2, 8), "b1": np.zeros(8, dtype), "W2": weights(8, 2),
                  "b2": np.zeros(2, dtype)}
        self.D = {"W1": weights(2, 8), "b1": np.zeros(8, dtype), "W2": weights(8, 1),
                  "b2": np.zeros(1, dtype)}
        self.lr = 0.05

    def generator(self, z):
        self.g_h = np.maximum(0, z @ self.G["W1"] + self.G["b1"])
        return self.g_h @ self.G["W2"] + self.G["b2"]

    def discriminator(self, x):
        h_pre = x @ self.D["W1"] + self.D["b1"]
        h = np.where(h_pre > 0, h_pre, 0.2 * h_pre)
        return sigmoid(h @ self.D["W2"] + self.D["b2"]), (x, h_pre, h)

    def d_backward(self, dlogit, cache):
        x, h_pre, h = cache
        grads = {"W2": h.T @ dlogit, "b2": dlogit.sum(axis=0)}
        dh_pre = dlogit @ self.D["W2"].T * np.where(h_pre > 0, 1.0, 0.2)
        grads["W1"], grads["b1"] = x.T @ dh_pre, dh_pre.sum(axis=0)
        return grads, dh_pre @ self.D["W1"].T

    def train_step(self, real, z, k=1):
        m = real.shape[0]
        for _ in range(k):  # k discriminator steps, then one generator step
            fake = self.generator(z)
            d_real, c_real = self.discriminator(real)
            d_fake, c_fake = self.discriminator(fake)
            d_loss = -np.mean(np.log(d_real + 1e-8) + np.log(1 - d_fake + 1e-8))
            g_real, _ = self.d_backward((d_real - 1) / m, c_real)
            g_fake, _ = self.d_backward(d_fake / m, c_fake)
            for key in self.D:
                self.D[key] -= self.lr * (g_real[key] + g_fake[key])
        fake = self.generator(z)
        d_fake, c_fake = self.discriminator(fake)
        g_loss = -np.mean(np.log(d_fake + 1e-8))
        _, dfake = self.d_backward((d_fake - 1) / m, c_fake)
        dh = dfake @ self.G["W2"].T * (self.g_h > 0)
        grads = {"W2": self.g_h.T @ dfake, "b2": dfake.sum(axis=0), "W1": z.T @ dh,
                 "b1": dh.sum(axis=0)}
        for key in self.G:
            self.G[key] = self.G[key] - self.lr * grads[key]
        return d_loss, g_loss


class TiedAutoencoder:
    def __init__(self, seed, dtype):
        self.W_enc = (rng_for(seed).standard_normal((6, 3)) * 0.3).astype(dtype)
        self.W_dec = self.W_enc.T  # tied: a view the in-place update must reach
        self.b_enc, self.b_dec = np.zeros(3, dtype), np.zeros(6, dtype)

    def step(self, x, noise_mask, lr=0.1):
        corrupted = x * noise_mask
        h = sigmoid(corrupted @ self.W_enc + self.b_enc)
        reconstruction = sigmoid(h @ self.W_dec + self.b_dec)
        loss = 0.5 * np.sum((reconstruction - x) ** 2) / x.shape[0]
        d_out = (reconstruction - x) * reconstruction * (1 - reconstruction) / x.shape[0]
        dh = d_out @ self.W_enc * h * (1 - h)
        self.W_enc -= lr * (corrupted.T @ dh + (h.T @ d_out).T)
        self.b_enc -= lr * dh.sum(axis=0)
        self.b_dec -= lr * d_out.sum(axis=0)
        return loss


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gan_alternating_updates_and_tied_autoencoder(dtype):
    rng, tolerance = rng_for(1212), TOLERANCE[dtype]
    gan = TinyGAN(1, dtype)
    eager, compiled = copy.deepcopy(gan), copy.deepcopy(gan)
    step = jitted(compiled.train_step)
    for n, k in ((1, 1), (5, 1), (7, 2), (7, 2)):
        real = (rng.standard_normal((n, 2)) + 2).astype(dtype)
        z = rng.standard_normal((n, 2)).astype(dtype)
        assert_same(step(real, z, k), eager.train_step(real, z, k), **tolerance)
        assert_same((compiled.G, compiled.D, compiled.g_h), (eager.G, eager.D, eager.g_h),
                    where="gan", **tolerance)
    no_internal_errors(step)

    # two made alike, not deep copies: copy.deepcopy would untie W_dec from W_enc
    eager, compiled = TiedAutoencoder(2, dtype), TiedAutoencoder(2, dtype)
    step = jitted(compiled.step)
    for n in (1, 5, 5, 0):
        x = rng.random((n, 6)).astype(dtype)
        mask = (rng.random((n, 6)) > 0.3).astype(dtype)
        with np.errstate(all="ignore"):
            assert_same(step(x, mask), eager.step(x, mask), **tolerance)
        assert_same(vars(compiled), vars(eager), where="autoencoder", **tolerance)
        assert np.shares_memory(compiled.W_dec, compiled.W_enc) and np.shares_memory(
            eager.W_dec, eager.W_enc)
    no_internal_errors(step)


# --- nnfs's standalone softmax backward: a Jacobian per sample -------------------------------
def softmax_backward(output, dvalues):
    dinputs = np.empty_like(dvalues)
    for index, (single_output, single_dvalues) in enumerate(zip(output, dvalues)):
        single_output = single_output.reshape(-1, 1)
        jacobian_matrix = np.diagflat(single_output) - np.dot(single_output, single_output.T)
        dinputs[index] = np.dot(jacobian_matrix, single_dvalues)
    return dinputs


def diagonal_spellings(v):
    return (np.diagflat(v), np.diagflat(v, k=2), np.diagflat(v, -1), np.diag(v.ravel()),
            np.diag(v.ravel() > 0, 1))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nnfs_softmax_jacobian_backward_compiles(dtype):
    """np.diagflat was not supported: every call ran eagerly."""
    rng = rng_for(1213)

    def softmax_outputs(n):
        z = rng.standard_normal((n, 3))
        return ((np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)).astype(dtype),
                rng.standard_normal((n, 3)).astype(dtype))

    f = run_calls(softmax_backward, [softmax_outputs(n) for n in (1, 4, 4, 7)],
                  **TOLERANCE[dtype])
    no_eager_calls(f)
    f = run_calls(diagonal_spellings, [(rng.standard_normal((n, 1)).astype(dtype),)
                                       for n in (1, 3, 3, 5, 0, 8)] + [
        (np.arange(6).reshape(2, 3)[:, ::2],)])
    no_eager_calls(f)


def predict_over_a_dead_sample(X, W1, W2):
    A1 = np.maximum(0, W1 @ X - 1.0)
    probabilities = 1 / (1 + np.exp(-(W2 @ A1)))
    return (probabilities > 0.5).astype(float)


def test_prediction_of_a_dead_sample_stays_compiled():
    # sigmoid(0) of a dead sample is exactly 0.5 on both sides: the exp a decision reads is
    # NumPy's own loop (TRACEJIT_NUMPY_MATH, 2a4dcb6) and the add and division are IEEE
    # operations, so '> 0.5' carries no margin (it took a margin exit on every call before)
    rng = rng_for(1214)
    W1, W2 = rng.standard_normal((4, 3)), rng.standard_normal((1, 4))
    calls = []
    for n in (5, 5, 9):
        X = rng.standard_normal((3, n))
        X[:, 1] = 0.0  # every hidden unit at -1: the output is sigmoid(0)
        calls.append((X, W1, W2))
    f = run_calls(predict_over_a_dead_sample, calls)
    no_eager_calls(f)
