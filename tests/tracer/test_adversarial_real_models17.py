"""Adversarial real-model tests, round 17a: NumPy model code from public sources rounds 1-16
did not read, written in their idioms and run eagerly and through ``jit`` on copies of the
same arguments and objects.

Sources read this round: iamtrask's "Anyone can learn to code an LSTM-RNN" (the binary-
addition RNN: ``layer_1_values`` and ``layer_2_deltas`` lists, ``copy.deepcopy`` of each
state, the BPTT carry started as ``np.zeros(hidden_dim)`` and read by ``.dot``, bits written
back by ``np.round``); mantas' minimal echo state network (``np.vstack((1, u))`` of a
scalar input, states harvested into ``X[:, t - initLen]``, the generative run feeding each
output back as the next input); Alescontrela's Numpy-CNN (convolution, max pool and their
backward passes over ``while curr_y + f <= in_dim`` loops, ``nanargmax`` by
``np.unravel_index``); Patrick Loeber's MLfromscratch (LogisticRegression, Perceptron and
SVM whose ``fit`` sets ``self.weights = np.zeros(n)`` and ``self.bias = 0`` and updates
them in place, per-sample loops over ``enumerate(X)``, predictions by a comprehension);
eriklindernoren's ML-From-Scratch (regression models with regularizer objects called and
asked for ``.grad``, ``X = np.insert(X, 0, 1, axis=1)``, ``self.training_errors`` appended
per iteration; its deep-learning package probed too: Dense/BatchNormalization layers with
``copy.copy`` of one Adam, activation classes, ``train_on_batch`` as a bound method, all
compiled and equal to eager); the from-scratch word2vec tutorials (one-hot words as Python
lists through ``np.dot``, ``np.outer`` and ``np.subtract``). Probed and equal to eager, not
kept: Hopfield training and
recall, echen's RBM with its random draws passed in, a self-organizing map, Ng's
collaborative-filtering cost and learning curve, REINFORCE over lists of states,
Grokking Deep Learning's embedding-sum sentiment step, nicodjimenez's LSTM over
prebuilt nodes (its network, which makes node objects in a list attribute, runs eagerly).

Findings, each fixed with its test here (every test fails before its fix). Wrong results:
a NumPy array made in the call, stored (``self.weights = np.zeros(n)``, ``state["w"] =
w``) and then updated in place was stored without the update on the traced call (every
first call of LogisticRegression.fit left zeros; argument_writes.written_value); a method
of a model made in the function (``Model().fit(X)``) read ``self`` as an outside object,
so its in-place attribute update was an 'outside array' write and every call returned a
``Tracer`` (frontend._path); a result that is an object made in the call (a ``fit``
returning ``self``) came back from compiled calls as the trace's own object, its
attributes tracers holding the first call's values (now eager, with the reason); an
attribute set to ``[]`` and appended to in the same call was left empty by the traced
call (list_appends._stored_anew), which, as a parameter rebound before ``X.shape[1]`` was
guarded as the argument's (frontend._still_the_argument), was every call of the ridge fit.
Needless eager runs: a method of a NumPy array made in the function called with a traced
operand (``np.zeros(h).dot(W)``) converted the operand (ndarray's C method does not
dispatch), so the binary-addition RNN ran eagerly on every call; ``np.take`` of such an
array with traced indices likewise (tracer/constant_methods.py); an assignment of a value
with extra leading ones (``Y[:, t] = y``, ``y`` of shape (1, 1) into a (1,) column) was an
internal error, so the ESN's generative run ran eagerly (tracer/indexing.py); the range
check of ``np.unravel_index(np.nanargmax(window), ...)`` compared an argmax of computed
values, which has no error bound, so Numpy-CNN's max-pool backward over a convolution
took a guard-margin exit on every call (margin_rules.decided_over_indices); the Lasso fit
was refused by its own entry (the guard above); a number attribute of a model made in the
call (``self.bias += update``) was refused as outside state.

Also a wrong result, fixed: a dict item written and then updated in place in one call
(``self.cache["w"] = np.zeros(3)``, then ``self.cache["w"] -= v``): the second read of
``self.cache`` read the item as the entry's input, so compiled calls updated the previous
call's array (outside_inputs.with_inputs keeps what the trace wrote); a list inside a dict
stored by the call (``self.history = {"loss": []}``) got none of its appends on the traced
call (list_appends._counterpart); ``np.dot(w2, word)`` with ``word`` a Python list gave ``w2 *
word`` broadcast, and ``np.dot(2.0, x32)`` was float32 where NumPy's is float64
(numpy_api._operand); and an attribute
array made in the call and written through a row view (``row = self.w[0]; row -= v``) was
stored without the write by compiled calls (the row was read as an outside input:
frontend._written_by_the_trace covers items of what the trace wrote).

Not fixed: iamtrask's bits are uint8 (``np.unpackbits``), and ``np.array([[a[i], b[i]]])`` of uint8
elements computes in uint8: eager on every call ('not compiled', the reason named).
Alescontrela's convolution adds a ``(n_f, 1)`` bias row to an element (``out[f, y, x] = ...
+ bias[f]``), which NumPy 2 refuses; the compiled call raises it too. Slow: a self-
organizing map over 5-7 samples (a loop over an index array unrolls: 11 s of compiles),
``np.insert`` pins the batch length (a compile per size).

Each call compares results, dtypes, types and the arguments afterwards with eager NumPy,
and an exception eager raises must be raised too.
"""

import copy

import numpy as np
from real_model_checks import (
    all_compiled,
    assert_same,
    jitted,
    no_internal_errors,
    run_calls,
)

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=2e-4, atol=2e-5)


# --- iamtrask's binary-addition RNN ---------------------------------------------------------
def sigmoid(x):
    output = 1 / (1 + np.exp(-x))
    return output


def sigmoid_output_to_derivative(output):
    return output * (1 - output)


def binary_addition_step(a, b, c, synapse_0, synapse_1, synapse_h, alpha=0.1):
    """One training example: forward over the bits from the last, BPTT from the first,
    the three weight matrices updated in place."""
    binary_dim = len(a)
    hidden_dim = synapse_h.shape[0]
    synapse_0_update = np.zeros_like(synapse_0)
    synapse_1_update = np.zeros_like(synapse_1)
    synapse_h_update = np.zeros_like(synapse_h)
    d = np.zeros_like(c)
    overallError = 0
    layer_2_deltas = list()
    layer_1_values = list()
    layer_1_values.append(np.zeros(hidden_dim))
    for position in range(binary_dim):
        X = np.array([[a[binary_dim - position - 1], b[binary_dim - position - 1]]])
        y = np.array([[c[binary_dim - position - 1]]]).T
        layer_1 = sigmoid(np.dot(X, synapse_0) + np.dot(layer_1_values[-1], synapse_h))
        layer_2 = sigmoid(np.dot(layer_1, synapse_1))
        layer_2_error = y - layer_2
        layer_2_deltas.append((layer_2_error) * sigmoid_output_to_derivative(layer_2))
        overallError += np.abs(layer_2_error[0])
        d[binary_dim - position - 1] = np.round(layer_2[0][0])
        layer_1_values.append(copy.deepcopy(layer_1))
    future_layer_1_delta = np.zeros(hidden_dim)
    for position in range(binary_dim):
        X = np.array([[a[position], b[position]]])
        layer_1 = layer_1_values[-position - 1]
        prev_layer_1 = layer_1_values[-position - 2]
        layer_2_delta = layer_2_deltas[-position - 1]
        layer_1_delta = (future_layer_1_delta.dot(synapse_h.T)
                         + layer_2_delta.dot(synapse_1.T)) * sigmoid_output_to_derivative(layer_1)
        synapse_1_update += np.atleast_2d(layer_1).T.dot(layer_2_delta)
        synapse_h_update += np.atleast_2d(prev_layer_1).T.dot(layer_1_delta)
        synapse_0_update += X.T.dot(layer_1_delta)
        future_layer_1_delta = layer_1_delta
    synapse_0 += synapse_0_update * alpha
    synapse_1 += synapse_1_update * alpha
    synapse_h += synapse_h_update * alpha
    return d, overallError


def _addition(dim, seed, dtype=np.int64, hidden=5):
    rng = np.random.default_rng(seed)
    a_int, b_int = (int(v) for v in rng.integers(0, 2 ** (dim - 1), 2))

    def bits(value):
        return np.array([(value >> (dim - 1 - i)) & 1 for i in range(dim)], dtype=dtype)

    return (bits(a_int), bits(b_int), bits(a_int + b_int), 2 * rng.random((2, hidden)) - 1,
            2 * rng.random((hidden, 1)) - 1, 2 * rng.random((hidden, hidden)) - 1)


def test_binary_addition_rnn_compiles_with_its_carry_started_by_a_numpy_dot():
    """``future_layer_1_delta = np.zeros(hidden_dim)`` then ``.dot(synapse_h.T)``: before the
    fix the NumPy array's own ``dot`` converted the traced weights, and every call ran
    eagerly ('a traced array was converted to a NumPy array')."""
    calls = [_addition(5, 0), _addition(5, 1)]
    f = run_calls(binary_addition_step, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 4), f.explain()


def test_binary_addition_rnn_on_uint8_bits_runs_as_numpy():
    """The tutorial's bits are uint8 (``np.unpackbits``): eager where compiled code cannot
    compute in uint8, the same results and writes."""
    calls = [_addition(8, seed, dtype=np.uint8) for seed in (4, 5)] + [_addition(3, 6, np.uint8)]
    run_calls(binary_addition_step, calls, **F64)


def ndarray_methods_with_traced_operands(W, ids, x):
    """A NumPy array made here, its methods (and ``np.take``, which dispatches on the table
    only) called with traced operands."""
    carry = np.zeros(W.shape[0]).dot(W)
    table = np.arange(6.0) * 0.5
    return carry, np.ones((2, W.shape[0])).dot(W.T), table.take(ids), np.take(table, ids), (
        np.linspace(0.0, 1.0, 5).searchsorted(x)), np.arange(3).choose(
            [x[:3], x[:3] * 2, x[:3] - 1])


def test_numpy_array_methods_given_traced_operands_compile():
    """Before the fix each of these converted its traced operand (eager on every call);
    an id past the table raises NumPy's IndexError."""
    rng = np.random.default_rng(7)
    calls = [(rng.standard_normal((n, n)), np.array([0, 5, 2]), rng.random(n)) for n in (3, 3, 4)]
    f = run_calls(ndarray_methods_with_traced_operands, calls, **F64)
    no_internal_errors(f)
    assert not f.stats()["eager_calls"], f.explain()
    run_calls(ndarray_methods_with_traced_operands, [(np.eye(3), np.array([0, 6]), np.ones(3))])


# --- mantas' minimal echo state network -----------------------------------------------------
def esn_harvest(data, Win, W, a, initLen):
    resSize = W.shape[0]
    inSize = Win.shape[1] - 1
    trainLen = len(data) - 1
    X = np.zeros((1 + inSize + resSize, trainLen - initLen))
    Yt = data[None, initLen + 1:trainLen + 1]
    x = np.zeros((resSize, 1))
    for t in range(trainLen):
        u = data[t]
        x = (1 - a) * x + a * np.tanh(np.dot(Win, np.vstack((1, u))) + np.dot(W, x))
        if t >= initLen:
            X[:, t - initLen] = np.vstack((1, u, x))[:, 0]
    return X, Yt, x


def esn_generate(u, x, Win, W, Wout, a, testLen):
    outSize = Wout.shape[0]
    Y = np.zeros((outSize, testLen))
    for t in range(testLen):
        x = (1 - a) * x + a * np.tanh(np.dot(Win, np.vstack((1, u))) + np.dot(W, x))
        y = np.dot(Wout, np.vstack((1, u, x)))
        Y[:, t] = y
        u = y
    return Y, x


def _reservoir(rng, res, radius):
    W = rng.random((res, res)) - 0.5
    return (rng.random((res, 2)) - 0.5, W * (radius / np.max(np.abs(np.linalg.eigvals(W)))))


def _harvest(n, seed, res=6, initLen=3):
    rng = np.random.default_rng(seed)
    data = np.sin(np.arange(n) * 0.3) + 0.1 * rng.standard_normal(n)
    return (data, *_reservoir(rng, res, 1.25), 0.3, initLen)


def _generate(steps, seed, res=6):
    rng = np.random.default_rng(seed)
    Win, W = _reservoir(rng, res, 0.9)
    return (np.float64(0.5), rng.standard_normal((res, 1)) * 0.1, Win, W,
            rng.standard_normal((1, 2 + res)) * 0.1, 0.3, steps)


def test_esn_harvest_compiles_over_lengths():
    calls = [_harvest(12, 0), _harvest(12, 1), _harvest(17, 2), _harvest(5, 3)]
    f = run_calls(esn_harvest, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 8), f.explain()


def test_esn_generative_run_writes_a_one_by_one_output_into_a_column():
    """``Y[:, t] = y`` with ``y`` of shape (1, 1): NumPy drops the extra leading one. Before
    the fix the broadcast refused it (an internal error: eager on every call)."""
    calls = [_generate(6, 0), _generate(6, 1), _generate(11, 2), _generate(1, 3)]
    f = run_calls(esn_generate, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 8), f.explain()


def assign_with_leading_ones(Y, y, t):
    Y[:, t] = y
    Z = Y * 1.0
    Z[1:3] = y[..., :1] if Z.ndim == 1 else y
    return Y, Z


def test_assignment_drops_leading_ones_as_numpy_and_raises_where_numpy_does():
    """Extra leading ones are dropped for a selection of any rank, never for one element
    (``Y[0, t] = np.ones(1)`` raises in NumPy); other extra dims raise too."""
    calls = [(np.zeros((1, 4)), np.full((1, 1), 2.0), 2), (np.zeros((1, 4)), np.ones((1, 1, 1)), 1),
             (np.zeros((3, 4)), np.arange(3.0)[None], 1), (np.zeros((3, 4)), np.ones((2, 3)), 1),
             (np.zeros((1, 4)), np.ones((3, 1)), 0), (np.zeros(4), np.ones((1, 1, 1)), 0)]
    f = run_calls(assign_with_leading_ones, calls, **F64)
    no_internal_errors(f)

    def element(out, value):
        out[0, 1] = value
        return out

    run_calls(element, [(np.zeros((2, 3)), np.ones(1)), (np.zeros((2, 3)), np.ones((1, 1))),
                        (np.zeros((2, 3)), np.float64(3.0))], **F64)


# --- Alescontrela's Numpy-CNN: while-loop convolution and pooling, their backward passes ----
def convolution(image, filt, bias, s=1):
    (n_f, n_c_f, f, _) = filt.shape
    n_c, in_dim, _ = image.shape
    out_dim = int((in_dim - f) / s) + 1
    assert n_c == n_c_f, "Dimensions of filter must match dimensions of input image"
    out = np.zeros((n_f, out_dim, out_dim))
    for curr_f in range(n_f):
        curr_y = out_y = 0
        while curr_y + f <= in_dim:
            curr_x = out_x = 0
            while curr_x + f <= in_dim:
                out[curr_f, out_y, out_x] = np.sum(
                    filt[curr_f] * image[:, curr_y:curr_y + f, curr_x:curr_x + f]) + bias[curr_f]
                curr_x += s
                out_x += 1
            curr_y += s
            out_y += 1
    return out


def maxpool(image, f=2, s=2):
    n_c, h_prev, w_prev = image.shape
    h = int((h_prev - f) / s) + 1
    w = int((w_prev - f) / s) + 1
    downsampled = np.zeros((n_c, h, w))
    for i in range(n_c):
        curr_y = out_y = 0
        while curr_y + f <= h_prev:
            curr_x = out_x = 0
            while curr_x + f <= w_prev:
                downsampled[i, out_y, out_x] = np.max(
                    image[i, curr_y:curr_y + f, curr_x:curr_x + f])
                curr_x += s
                out_x += 1
            curr_y += s
            out_y += 1
    return downsampled


def convolutionBackward(dconv_prev, conv_in, filt, s):
    (n_f, n_c, f, _) = filt.shape
    (_, orig_dim, _) = conv_in.shape
    dout = np.zeros(conv_in.shape)
    dfilt = np.zeros(filt.shape)
    dbias = np.zeros((n_f, 1))
    for curr_f in range(n_f):
        curr_y = out_y = 0
        while curr_y + f <= orig_dim:
            curr_x = out_x = 0
            while curr_x + f <= orig_dim:
                dfilt[curr_f] += dconv_prev[curr_f, out_y, out_x] * conv_in[
                    :, curr_y:curr_y + f, curr_x:curr_x + f]
                dout[:, curr_y:curr_y + f, curr_x:curr_x + f] += dconv_prev[
                    curr_f, out_y, out_x] * filt[curr_f]
                curr_x += s
                out_x += 1
            curr_y += s
            out_y += 1
        dbias[curr_f] = np.sum(dconv_prev[curr_f])
    return dout, dfilt, dbias


def nanargmax(arr):
    idx = np.nanargmax(arr)
    idxs = np.unravel_index(idx, arr.shape)
    return idxs


def maxpoolBackward(dpool, orig, f, s):
    (n_c, orig_dim, _) = orig.shape
    dout = np.zeros(orig.shape)
    for curr_c in range(n_c):
        curr_y = out_y = 0
        while curr_y + f <= orig_dim:
            curr_x = out_x = 0
            while curr_x + f <= orig_dim:
                (a, b) = nanargmax(orig[curr_c, curr_y:curr_y + f, curr_x:curr_x + f])
                dout[curr_c, curr_y + a, curr_x + b] = dpool[curr_c, out_y, out_x]
                curr_x += s
                out_x += 1
            curr_y += s
            out_y += 1
    return dout


def conv_pool_backward(image, filt, bias, dpool):
    """The pool backward of the network's step, over a relu'd convolution: ``nanargmax``
    of windows of computed values."""
    conv = convolution(image, filt, bias, 1)
    conv[conv <= 0] = 0
    return maxpool(conv, 2, 2), maxpoolBackward(dpool, conv, 2, 2)


def _image(dim, seed, f=3, s=1, channels=1, filters=2):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((channels, dim, dim)),
            rng.standard_normal((filters, channels, f, f)) * 0.3,
            rng.standard_normal(filters) * 0.1, s)


def test_numpy_cnn_convolution_over_counting_while_loops():
    """Sizes, strides that do not divide the image, a 1x1 output and a stride-2 bucket."""
    calls = [_image(6, 0), _image(6, 1), _image(9, 2), _image(3, 3), _image(7, 4, s=2)]
    f = run_calls(convolution, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 10), f.explain()


def test_numpy_cnn_bias_column_added_to_an_element_raises_as_numpy():
    """The repository's ``b1 = np.zeros((n_f, 1))``: ``+ bias[curr_f]`` is a (1,) array,
    which NumPy 2 refuses to store into one element."""
    image, filt, bias, s = _image(4, 5)
    run_calls(convolution, [(image, filt, bias[:, None], s)], **F64)


def _pool_backward(dim, seed, ties=False, f=2, s=2):
    rng = np.random.default_rng(seed)
    orig = rng.standard_normal((2, dim, dim))
    if ties:
        orig = np.round(orig)  # windows with equal maxima: the first one, as nanargmax
    orig[0, 0, 0] = np.nan if seed == 3 else orig[0, 0, 0]
    out = (dim - f) // s + 1
    return (rng.standard_normal((2, out, out)), orig, f, s)


def test_numpy_cnn_maxpool_and_its_backward_by_nanargmax():
    calls = [_pool_backward(4, 0), _pool_backward(4, 1), _pool_backward(5, 2, ties=True),
             _pool_backward(4, 3), _pool_backward(4, 4, f=3, s=1)]
    f = run_calls(maxpoolBackward, calls, **F64)
    no_internal_errors(f)
    rng = np.random.default_rng(5)
    run_calls(maxpool, [(rng.standard_normal((2, n, n)), 2, 2) for n in (4, 4, 5)], **F64)


def _conv_pool(dim, seed):
    image, filt, bias, _ = _image(dim, seed)
    out = (dim - 2) // 2
    return (image, filt, bias, np.random.default_rng(seed).standard_normal((2, out, out)))


def test_maxpool_backward_over_a_convolution_stays_compiled():
    """``np.unravel_index(np.nanargmax(window), window.shape)`` checks that the index is in
    range; before the fix that check compared an argmax of computed values, which has no
    bound, so every call took a guard-margin exit (eager)."""
    calls = [_conv_pool(4, 0), _conv_pool(4, 1)]
    f = run_calls(conv_pool_backward, calls, **F64)
    no_internal_errors(f)
    assert all_compiled(f, 4), f.explain()


def near_tie_argmax_position(u, order, g):
    """An argmax over sums that tie in exact arithmetic (one set of terms in three orders),
    its position unravelled and written: within rounding, so eager decides."""
    sums = np.stack([np.sum(u), np.sum(u[order]), np.sum(u[::-1]), np.sum(u[order][::-1])])
    a, b = np.unravel_index(np.argmax(sums), (2, 2))
    out = np.zeros((2, 2))
    out[a, b] = g
    return out


def test_an_argmax_within_rounding_still_decides_eagerly():
    rng = np.random.default_rng(17)
    calls = []
    for _ in range(4):
        u = rng.standard_normal(40) * 10.0 ** rng.uniform(-3, 3, 40)
        calls.append((u, rng.permutation(40), 1.0))
    f = run_calls(near_tie_argmax_position, calls, **F64)
    no_internal_errors(f)


# --- Patrick Loeber's MLfromscratch: scikit-style models with state set in fit -----------
class LogisticRegression:
    def __init__(self, learning_rate=0.1, n_iters=4):
        self.lr = learning_rate
        self.n_iters = n_iters
        self.weights = None
        self.bias = None

    def fit(self, X, y):
        n_samples, n_features = X.shape
        self.weights = np.zeros(n_features)
        self.bias = 0
        for _ in range(self.n_iters):
            linear_model = np.dot(X, self.weights) + self.bias
            y_predicted = self._sigmoid(linear_model)
            dw = (1 / n_samples) * np.dot(X.T, (y_predicted - y))
            db = (1 / n_samples) * np.sum(y_predicted - y)
            self.weights -= self.lr * dw
            self.bias -= self.lr * db

    def predict(self, X):
        linear_model = np.dot(X, self.weights) + self.bias
        y_predicted = self._sigmoid(linear_model)
        y_predicted_cls = [1 if i > 0.5 else 0 for i in y_predicted]
        return np.array(y_predicted_cls)

    def _sigmoid(self, x):
        return 1 / (1 + np.exp(-x))


class Perceptron:
    def __init__(self, learning_rate=0.01, n_iters=2):
        self.lr = learning_rate
        self.n_iters = n_iters
        self.activation_func = self._unit_step_func
        self.weights = None
        self.bias = None

    def fit(self, X, y):
        n_samples, n_features = X.shape
        self.weights = np.zeros(n_features)
        self.bias = 0
        y_ = np.array([1 if i > 0 else 0 for i in y])
        for _ in range(self.n_iters):
            for idx, x_i in enumerate(X):
                linear_output = np.dot(x_i, self.weights) + self.bias
                y_predicted = self.activation_func(linear_output)
                update = self.lr * (y_[idx] - y_predicted)
                self.weights += update * x_i
                self.bias += update

    def _unit_step_func(self, x):
        return np.where(x >= 0, 1, 0)


class SVM:
    def __init__(self, learning_rate=0.001, lambda_param=0.01, n_iters=2):
        self.lr = learning_rate
        self.lambda_param = lambda_param
        self.n_iters = n_iters
        self.w = None
        self.b = None

    def fit(self, X, y):
        n_samples, n_features = X.shape
        y_ = np.where(y <= 0, -1, 1)
        self.w = np.zeros(n_features)
        self.b = 0
        for _ in range(self.n_iters):
            for idx, x_i in enumerate(X):
                condition = y_[idx] * (np.dot(x_i, self.w) - self.b) >= 1
                if condition:
                    self.w -= self.lr * (2 * self.lambda_param * self.w)
                else:
                    self.w -= self.lr * (
                        2 * self.lambda_param * self.w - np.dot(x_i, y_[idx]))
                    self.b -= self.lr * y_[idx]

    def predict(self, X):
        approx = np.dot(X, self.w) - self.b
        return np.sign(approx)


def _labelled(n, seed, features=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, features))
    return X, (X @ np.linspace(1.0, -1.0, features) > 0).astype(np.int64)


def _fit_both(model_class, sizes, state, **tolerance):
    """``fit`` eagerly on one model and through ``jit`` of the other's bound method, then
    ``predict`` the same way; the models' state must agree after every call."""
    eager, compiled = model_class(), model_class()
    fit = jitted(compiled.fit)
    for seed, n in enumerate(sizes):
        X, y = _labelled(n, seed)
        assert_same(fit(X.copy(), y.copy()), eager.fit(X.copy(), y.copy()))
        for name in state:
            assert_same(getattr(compiled, name), getattr(eager, name), where=name, **tolerance)
    if hasattr(model_class, "predict"):
        predict = jitted(compiled.predict)
        for seed, n in enumerate((5, 5, 8)):
            X, _ = _labelled(n, 20 + seed)
            assert_same(predict(X), eager.predict(X), **tolerance)
    return fit


def test_fit_sets_the_trained_weights_on_the_traced_call():
    """``self.weights = np.zeros(n)``, then ``self.weights -= lr * dw`` in a loop whose body
    calls ``self._sigmoid``: the trace wrote the update into the zeros' traced copy, and its
    call stored the zeros themselves (compiled calls stored the copy). Before the fix every
    first call of a variant left the weights at zero."""
    fit = _fit_both(LogisticRegression, (6, 6, 9, 1, 6), ("weights", "bias"), **F64)
    no_internal_errors(fit)
    assert not fit.stats()["eager_calls"], fit.explain()


def test_perceptron_and_svm_fit_per_sample_branches():
    """Per-sample updates under ``np.where`` and an ``if`` on data (the SVM's margin
    condition): the branch pattern changes between calls; the state must follow eager's."""
    for model_class, state in ((Perceptron, ("weights", "bias")), (SVM, ("w", "b"))):
        fit = _fit_both(model_class, (3, 3, 1), state, **F64)
        no_internal_errors(fit)


class ZeroedThenUpdated:
    """State made in the call, stored, then updated in place through another name."""

    def fit(self, x):
        self.w = np.zeros(3)
        self.v = self.w
        self.w -= 0.1 * x
        return self.v.sum()


def stored_then_updated(state, x):
    w = np.zeros(3)
    state["w"] = w
    w -= 0.1 * x


def test_an_array_made_in_the_call_stored_then_updated_in_place_is_stored_updated():
    """Before the fix the traced call stored the array as it was before the update (zeros),
    in an attribute and in an argument's dict alike; ``self.v is self.w`` stays true."""
    eager, compiled = ZeroedThenUpdated(), ZeroedThenUpdated()
    fit = jitted(compiled.fit)
    for n in range(3):
        x = np.arange(3.0) + n
        assert_same(fit(x), eager.fit(x))
        assert_same(compiled.w, eager.w)
        assert compiled.v is compiled.w
    f = run_calls(stored_then_updated, [({}, np.arange(3.0) + n) for n in range(3)], **F64)
    no_internal_errors(f)


class CacheZeroedThenUpdated:
    def __init__(self):
        self.cache = {}

    def fit(self, x):
        self.cache["w"] = np.zeros(3)
        self.cache["w"] -= 0.1 * x


class RowOfStateUpdated:
    def fit(self, x):
        self.w = np.zeros((2, 3))
        row = self.w[0]
        row -= 0.1 * x


def test_an_outside_dict_item_zeroed_then_updated_in_the_same_call():
    """The dict read again after the trace wrote its item made a new copy with the entry
    input there (the array the previous call stored), so compiled calls updated that one
    and the state accumulated across calls."""
    eager, compiled = CacheZeroedThenUpdated(), CacheZeroedThenUpdated()
    fit = jitted(compiled.fit)
    for n in range(4):
        x = np.arange(3.0) + n
        eager.fit(x)
        fit(x)
        assert_same(compiled.cache, eager.cache)


def test_an_attribute_made_in_the_call_updated_through_a_row_view():
    """``self.w[0]`` read after the trace wrote ``self.w`` was an outside read of the row
    (an input), so compiled calls wrote the row into the previous array and stored the
    zeros."""
    eager, compiled = RowOfStateUpdated(), RowOfStateUpdated()
    fit = jitted(compiled.fit)
    for n in range(3):
        x = np.arange(3.0) + n
        eager.fit(x)
        fit(x)
        assert_same(compiled.w, eager.w)


class MadeInside:
    def fit(self, x):
        self.w = np.zeros(3)
        for _ in range(3):
            self.w -= 0.1 * x
        return self.w


def fit_a_model_made_inside(x):
    return MadeInside().fit(x)


class FitReturnsSelf:
    def fit(self, x):
        self.w = x * 2
        return self


def fit_and_return_the_model(x):
    return FitReturnsSelf().fit(x)


def test_a_model_made_inside_the_function_returns_arrays():
    """``MadeInside().fit(x)``: the method's ``self`` was read as an outside object (its
    identity guarded: a new variant per call), so ``self.w -= ...`` on its zeros was an
    outside array's write, and the result aliased 'that outside array' read back from the
    attribute, which held a tracer: every call returned a ``Tracer``. The object made in
    the call is now a local, and the function compiles."""
    f = run_calls(fit_a_model_made_inside, [(np.arange(3.0) + n,) for n in range(3)], **F64)
    no_internal_errors(f)
    assert all_compiled(f, 6), f.explain()


def test_returning_an_object_made_in_the_call_runs_eagerly():
    """A fit that returns ``self`` (sklearn's idiom) on a model made in the function: compiled
    calls returned the trace's own object, its ``w`` a tracer with the first call's values.
    Now refused (eager, with the reason): the program cannot make the object."""
    calls = [(np.arange(3.0) + n,) for n in range(3)]
    f = jitted(fit_and_return_the_model)
    for (x,) in calls:
        got, want = f(x.copy()), fit_and_return_the_model(x.copy())
        assert type(got) is FitReturnsSelf and got is not want
        assert_same(got.w, want.w)
    assert "untraceable" in f.stats()["eager_calls"], f.explain()


# --- ML-From-Scratch's regression models: X rebound, errors appended, regularizer objects --
class L1Regularization:
    def __init__(self, alpha):
        self.alpha = alpha

    def __call__(self, w):
        return self.alpha * np.linalg.norm(w)

    def grad(self, w):
        return self.alpha * np.sign(w)


class L2Regularization:
    def __init__(self, alpha):
        self.alpha = alpha

    def __call__(self, w):
        return self.alpha * 0.5 * w.T.dot(w)

    def grad(self, w):
        return self.alpha * w


class Regression:
    def __init__(self, regularization, n_iterations=4, learning_rate=0.01):
        self.regularization = regularization
        self.n_iterations = n_iterations
        self.learning_rate = learning_rate

    def initialize_weights(self, n_features):
        limit = 1 / np.sqrt(n_features)
        self.w = np.linspace(-limit, limit, n_features)

    def fit(self, X, y):
        X = np.insert(X, 0, 1, axis=1)
        self.training_errors = []
        self.initialize_weights(n_features=X.shape[1])
        for _ in range(self.n_iterations):
            y_pred = X.dot(self.w)
            mse = np.mean(0.5 * (y - y_pred)**2 + self.regularization(self.w))
            self.training_errors.append(mse)
            grad_w = -(y - y_pred).dot(X) + self.regularization.grad(self.w)
            self.w -= self.learning_rate * grad_w

    def predict(self, X):
        X = np.insert(X, 0, 1, axis=1)
        return X.dot(self.w)


def _regression(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    return X, X @ np.array([1.0, -2.0, 0.5]) + 0.1


def test_regression_fit_appends_its_errors_and_compiles():
    """``self.training_errors = []`` then ``.append(mse)``: the traced call stored a new list
    and appended to the one it had made, so ``training_errors`` stayed empty; and
    ``X.shape[1]`` after ``X = np.insert(X, 0, 1, axis=1)`` was guarded as the argument's
    (3, not 4), so every call made a new variant (ridge) or was refused by its own entry
    (lasso: eager on every call, 'entry refused its own call')."""
    for regularization in (L2Regularization(0.1), L1Regularization(0.1)):
        eager = Regression(regularization)
        compiled = Regression(copy.copy(regularization))
        fit = jitted(compiled.fit)
        for seed, n in enumerate((6, 6, 9, 9)):
            X, y = _regression(n, seed)
            assert_same(fit(X, y), eager.fit(X, y))
            assert_same(compiled.w, eager.w, **F64)
            assert_same(compiled.training_errors, eager.training_errors, **F64)
        no_internal_errors(fit)
        assert fit.stats()["compiles"] == 2 and not fit.stats()["eager_calls"], fit.explain()
        predict = jitted(compiled.predict)
        for seed, n in enumerate((4, 4, 7)):
            assert_same(predict(_regression(n, 9 + seed)[0]),
                        eager.predict(_regression(n, 9 + seed)[0]), **F64)


class HistoryOfLosses:
    """A Keras-like history made by ``fit``: ``self.history = {"loss": []}``, appended to."""

    def fit(self, x):
        self.history = {"loss": []}
        for epoch in range(3):
            self.history["loss"].append(np.sum(x) * epoch)


def test_a_list_inside_a_dict_stored_by_the_call_gets_its_appends():
    """The traced call stored a new dict and list and appended to the old list: the history
    stayed empty on every first call of a variant."""
    eager, compiled = HistoryOfLosses(), HistoryOfLosses()
    fit = jitted(compiled.fit)
    for n in range(3):
        x = np.arange(3.0) + n
        assert_same(fit(x), eager.fit(x))
        assert_same(compiled.history, eager.history)
    no_internal_errors(fit)


def fit_a_perceptron_made_here(X, y):
    model = Perceptron(n_iters=1)
    model.fit(X, y)
    return model.weights, model.bias


def test_a_number_attribute_of_a_model_made_in_the_call_is_updated_as_python_does():
    """``self.bias = 0`` then ``self.bias += update`` on a Perceptron made in the function:
    refused before as outside state (eager on every call); the object is the call's own."""
    calls = [_labelled(4, seed) for seed in range(2)]
    f = run_calls(fit_a_perceptron_made_here, calls, **F64)
    no_internal_errors(f)
    assert "untraceable" not in f.stats()["eager_calls"], f.explain()


# --- word2vec from scratch (one-hot words as Python lists) ----------------------------------
def skip_gram_step(w1, w2, w_t, w_c, lr=0.05):
    """One (target, context) step of the from-scratch word2vec tutorials: the one-hot words
    are Python lists, multiplied by ``np.dot`` and ``np.outer``."""
    h = np.dot(w_t, w1)
    u = np.dot(h, w2)
    e_x = np.exp(u - np.max(u))
    y_pred = e_x / e_x.sum(axis=0)
    EI = np.sum([np.subtract(y_pred, word) for word in w_c], axis=0)
    dl_dw2 = np.outer(h, EI)
    dl_dw1 = np.outer(w_t, np.dot(w2, EI.T))
    return w1 - lr * dl_dw1, w2 - lr * dl_dw2, np.dot(w2, w_c[0])


def _one_hot(index, size=6):
    word = [0] * size
    word[index] = 1
    return word


def test_dot_and_outer_of_python_lists_are_numpy_products():
    """``np.dot(w2, word)`` with ``word`` a list gave ``w2 * word``, broadcast (a (4, 6)
    result for NumPy's (4,)): a wrong answer; ``np.dot(word, w1)`` and ``np.outer(word, v)``
    were internal errors (eager). ``np.dot(2.0, x32)`` is float64 in NumPy (its scalar is
    an array first), not float32."""
    rng = np.random.default_rng(3)
    calls = [(rng.uniform(-0.8, 0.8, (6, 4)), rng.uniform(-0.8, 0.8, (4, 6)), _one_hot(t),
              [_one_hot(c)]) for t, c in ((0, 1), (2, 3), (5, 4))]
    f = run_calls(skip_gram_step, calls, **F64)
    no_internal_errors(f)
    assert not f.stats()["eager_calls"], f.explain()
    run_calls(lambda x: (np.dot(2.0, x), np.dot(x, 3), np.outer(0.5, x)),
              [(np.arange(4, dtype=np.float32),), (np.ones(4, np.float32),)], **F32)
