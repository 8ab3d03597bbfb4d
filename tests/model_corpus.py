"""A corpus of model functions in plain NumPy style, with inputs that exercise them.

Every model runs unchanged on ndarrays; the tracer tests trace each one on every argument
set and compare with eager NumPy, and the differential suite (eager vs compiled) reuses
the same ``CASES``. Argument sets come from fixed seeds, span several pow2 shape buckets
(sizes 0/1, 3, 5, 8, 13, 64) and, between them, take every branch of the model's
data-dependent control flow.

``Case.guards`` lists source-line substrings where value guards are expected when the
model is traced on its *first* argument set; ``Case.rtol``/``Case.atol`` are the
tolerances for compiled-vs-eager comparisons (``None``: the per-dtype default from
``tolerance``); tracing itself runs the same NumPy code, so traced results are compared
exactly. ``Case.known_bug`` names a tracejit bug the case currently hits (tests mark it
``xfail(strict=True)``).

>>> len(CASES) >= 40
True
>>> case = CASES_BY_NAME["data_dependent_branch"]
>>> case.guards
('if x.sum() > 0:',)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tracejit import nn

# --- the case record -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    arg_sets: list
    dynamic: object = None
    guards: tuple = ()
    rtol: float | None = None
    atol: float | None = None
    known_bug: str = ""
    # its guard line is a loop's exit test: where the loop is captured (the exit decided
    # inside the loop node, tracer/while_loops.py, also when it ends at trip 0) no trace
    # records a guard there
    exit_in_captured_loop: bool = False

    def __repr__(self):
        return f"Case({self.name})"


_DEFAULT_TOLERANCE = {
    np.dtype(np.float16): (1e-3, 1e-3),
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-13),
}


# The course-assignment naive convolution (three nested Python loops over output positions
# and filters): shared by the nested-loop and parallel-map tests.
def conv_forward_naive(x, w, b, stride, pad):
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    H_out = 1 + (H + 2 * pad - HH) // stride
    W_out = 1 + (W + 2 * pad - WW) // stride
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant")
    out = np.zeros((N, F, H_out, W_out))
    for i in range(H_out):
        for j in range(W_out):
            window = x_pad[:, :, i * stride:i * stride + HH, j * stride:j * stride + WW]
            for f in range(F):
                out[:, f, i, j] = np.sum(window * w[f], axis=(1, 2, 3)) + b[f]
    return out


def tolerance(case, dtype):
    """``(rtol, atol)`` for comparing a compiled result of ``dtype`` with eager NumPy:
    the case's own if it sets them, else a per-dtype default (integers and bools: exact)."""
    rtol, atol = _DEFAULT_TOLERANCE.get(np.dtype(dtype), (0.0, 0.0))
    return (rtol if case.rtol is None else case.rtol, atol if case.atol is None else case.atol)


def _rng(seed):
    return np.random.default_rng(seed)


def _normal(rng, shape, dtype=np.float64, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# --- elementwise chains and broadcasting -----------------------------------------------


def elementwise_chain(x):
    y = np.tanh(x * 1.5 + 0.25) * np.exp(-x * x)
    return y - np.abs(x) / (1.0 + x * x) + np.sin(x) * np.cos(2.0 * x)


def log_and_powers(x):
    positive = np.abs(x) + 0.5
    return np.log(positive) + np.sqrt(positive) - positive**2 + np.log1p(x * x) * 0.5


def broadcast_bias_scale(x, bias, scale):
    return (x + bias) * scale - np.maximum(x, bias)


def outer_product(a, b):
    return a[:, None] * b[None, :] + np.minimum(a[:, None], 0.0)


def scalar_polynomial(t):
    return 3.0 * t * t - 2.0 * t + np.exp(-np.abs(t))


# --- reductions --------------------------------------------------------------------------


def reductions_every_axis(x):
    return (
        x.sum(),
        x.mean(axis=0),
        x.max(axis=-1, keepdims=True),
        np.min(x, axis=(0, 2)),
        np.prod(x * 0.5 + 1.0, axis=1),
        x.sum(axis=(1, 2), keepdims=True),
    )


def variance_and_norm(x):
    variance = np.var(x, axis=-1, keepdims=True)
    row_norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    return variance, x / (row_norm + 1e-6), np.std(x, axis=0)


def batch_norm_methods(x, eps=1e-5):
    mean = x.mean(axis=0)
    variance = x.var(axis=0)
    return (x - mean) / np.sqrt(variance + eps), x.std()


def any_all_counts(x):
    positive = x > 0
    return positive.any(axis=0), positive.all(), positive.sum(axis=-1), np.argmin(x, axis=0)


# --- normalization -----------------------------------------------------------------------


def softmax_library(x):
    return nn.softmax(x, axis=-1)


def softmax_by_hand(x):
    shifted = x - np.max(x, axis=-1, keepdims=True)
    exps = np.exp(shifted)
    return exps / exps.sum(axis=-1, keepdims=True)


def log_softmax_pair(x):
    by_hand = x - x.max(axis=-1, keepdims=True)
    by_hand = by_hand - np.log(np.sum(np.exp(by_hand), axis=-1, keepdims=True))
    return nn.log_softmax(x), by_hand, nn.logsumexp(x, axis=-1)


def layer_norm_library(x, weight, bias):
    return nn.layer_norm(x, weight, bias)


def layer_norm_by_hand(x, gain, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(variance + eps) * gain


# --- attention -----------------------------------------------------------------------------


def attention(q, k, v):
    d = q.shape[-1]
    scores = q @ k.T / np.sqrt(d)
    return nn.softmax(scores, axis=-1) @ v


def attention_dynamic(q, k, v):
    d = q.shape[-1]
    scores = q @ k.T / math.sqrt(d)
    return nn.softmax(scores, axis=-1) @ v


def causal_attention_triu(q, k, v):
    n, d = q.shape
    scores = q @ k.T / math.sqrt(d)
    future = np.triu(np.ones((n, n)), k=1)
    scores = np.where(future > 0, -np.inf, scores)
    return nn.softmax(scores, axis=-1) @ v


def causal_attention_where(q, k, v):
    n = q.shape[0]
    rows = np.arange(n)[:, None]
    columns = np.arange(n)[None, :]
    scores = np.where(columns > rows, -1e9, q @ k.T)
    return softmax_by_hand(scores) @ v


def attention_f32_scale(q, k, v):
    d = q.shape[-1]
    scores = q @ k.T / np.sqrt(d)  # np.sqrt(int) is a strong np.float64: the result is f64
    return nn.softmax(scores, axis=-1) @ v


def batched_attention(q, k, v):
    scores = q @ np.swapaxes(k, -1, -2) * (1.0 / math.sqrt(q.shape[-1]))
    return nn.softmax(scores, axis=-1) @ v


# --- MLPs, residual blocks, losses --------------------------------------------------------


def mlp_relu(x, w1, b1, w2, b2):
    hidden = nn.relu(x @ w1 + b1)
    return hidden @ w2 + b2


def mlp_gelu(x, w1, b1, w2, b2):
    hidden = nn.gelu(nn.linear(x, w1, b1))
    return nn.linear(hidden, w2, b2)


def residual_block(x, gain, w1, w2):
    hidden = np.maximum(layer_norm_by_hand(x, gain) @ w1, 0.0)
    return x + hidden @ w2


def mse_losses(prediction, target):
    difference = prediction - target
    return nn.mse_loss(prediction, target), np.mean(difference**2), np.sum(np.abs(difference))


def cross_entropy_library(logits, labels):
    return nn.cross_entropy(logits, labels), nn.cross_entropy(logits, labels, reduction="none")


def cross_entropy_by_hand(logits, labels):
    log_probs = nn.log_softmax(logits)
    picked = log_probs[np.arange(logits.shape[0]), labels]
    return -picked.mean()


# --- recurrent cells -----------------------------------------------------------------------


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(x / 2.0))


def rnn_cell(x, h, w_x, w_h, b):
    return np.tanh(x @ w_x + h @ w_h + b)


def gru_cell(x, h, w, u, b):
    size = h.shape[-1]
    gates_x = x @ w + b
    gates_h = h @ u
    update = _sigmoid(gates_x[:, :size] + gates_h[:, :size])
    reset = _sigmoid(gates_x[:, size : 2 * size] + gates_h[:, size : 2 * size])
    candidate = np.tanh(gates_x[:, 2 * size :] + reset * gates_h[:, 2 * size :])
    return (1.0 - update) * candidate + update * h


def lstm_cell(x, state, w, u, b):
    h, c = state
    gates = x @ w + h @ u + b
    i, f, g, o = np.split(gates, 4, axis=-1)
    c_new = nn.sigmoid(f) * c + nn.sigmoid(i) * np.tanh(g)
    h_new = nn.sigmoid(o) * np.tanh(c_new)
    return h_new, c_new


def rnn_sequence(xs, h, w_x, w_h):
    outputs = []
    for step in range(xs.shape[0]):
        h = np.tanh(xs[step] @ w_x + h @ w_h)
        outputs.append(h)
    return np.stack(outputs), h


# --- data-dependent control flow ------------------------------------------------------------


def data_dependent_branch(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 2
    return y


def if_elif_else(x):
    level = x.mean()
    if level > 1.0:
        return x - level
    elif level > -1.0:
        return x * 0.5
    else:
        return -x


def halve_until_small(x):
    steps = 0
    while np.abs(x).max() > 1.0:
        x = x / 2.0
        steps += 1
    return x, steps


def early_return_on_nan(x):
    if np.isnan(x).any():
        return np.zeros_like(x)
    scaled = x / (np.abs(x).max() + 1.0)
    return scaled * scaled


def fixed_point_with_break(x):
    estimate = x
    for _ in range(20):
        updated = 0.5 * estimate + 1.0
        if np.abs(updated - estimate).max() < 0.25:
            break
        estimate = updated
    return estimate


def boolean_operators(x):
    if (x.min() > 0 and x.max() < 10) or not x.any():
        return x + 1
    return x * 3


def clamp_by_item(x):
    peak = float(np.abs(x).max())
    limit = int(x.shape[0] > 4) + 1
    return np.clip(x, -limit, limit) / max(peak, 1.0)


# --- shape-dependent code -------------------------------------------------------------------


def shape_arithmetic(x):
    n = x.shape[0]
    first, rest = x[: n // 2], x[n // 2 :]
    flat = x.reshape(-1)
    return first.sum(axis=0) * n + rest.mean(axis=0), flat, x.reshape(n, -1).T


def transpose_reshape(x):
    moved = np.transpose(x, (2, 0, 1))
    merged = moved.reshape(moved.shape[0], -1)
    return merged @ merged.T, np.swapaxes(x, 0, 1)[::-1], x[..., 1:].sum(axis=-1)


def shifted_windows(x):
    n = x.shape[0]
    if n < 3:
        return x
    return x[: n - 2] + 2.0 * x[1 : n - 1] + x[2:]


# --- pytrees and Python scalars ----------------------------------------------------------------


def pytree_mlp(params, x):
    hidden = np.tanh(x @ params["layers"][0]["w"] + params["layers"][0]["b"])
    logits = hidden @ params["layers"][1]["w"] + params["layers"][1]["b"]
    return {"logits": logits, "hidden": [hidden], "stats": (logits.mean(), logits.max())}


def pytree_list_and_tuple(arrays, pair):
    total = arrays[0] + arrays[1] * arrays[2]
    first, second = pair
    return [total, first - second], (total.sum(), second)


def leaky_relu_scaled(x, slope, scale):
    if slope > 0.5:  # a Python branch on a static scalar: no guard
        slope = 0.5
    return np.where(x > 0, x, x * slope) * scale


def softmax_temperature(x, temperature):
    return nn.softmax(x / temperature) * temperature


def repeated_smoothing(x, steps, weight=0.25):
    for _ in range(steps):
        x = (1.0 - weight) * x + weight * x.mean()
    return x


# --- integer, NaN/Inf and mixed-dtype code --------------------------------------------------


def integer_arithmetic(tokens, scores):
    quotient = tokens // 3
    remainder = np.mod(tokens, 3)
    best = np.argmax(scores, axis=-1)
    hits = (best == remainder).astype(np.int32).sum()
    return quotient, remainder, best, hits, tokens >= 2, np.floor_divide(tokens, -4)


def nan_inf_cleanup(x):
    cleaned = np.where(np.isnan(x), 0.0, x)
    cleaned = np.where(np.isinf(cleaned), np.sign(cleaned) * 1e3, cleaned)
    finite_count = np.isfinite(x).sum()
    return cleaned, finite_count, np.maximum(x, 0.0), np.clip(x, -1.0, 1.0)


def mixed_dtypes(a32, b64, counts):
    return a32 + b64, counts * 0.5, a32 * 2, a32 + counts, (a32 > 0) + 1, a32 / np.float32(3)


def weak_scalars(x, n):
    return x * 2.5 + 1, x - n, x ** 2, 1.0 / (x * x + 1)


# --- implicit inputs ---------------------------------------------------------------------------

PROJECTION = _normal(_rng(1000), (6, 4))
PERMUTATION = np.array([5, 0, 3, 1, 4, 2])
KEEP_COLUMNS = np.array([True, False, True, True, False, True])


def global_weight(x):
    return np.tanh(x @ PROJECTION)


def _make_closure_model():
    offset = _normal(_rng(1001), (4,))

    def closure_model(x):
        return x @ PROJECTION + offset

    return closure_model


closure_model = _make_closure_model()


class Linear:
    def __init__(self, seed):
        rng = _rng(seed)
        self.w = _normal(rng, (6, 3))
        self.b = _normal(rng, (3,))

    def forward(self, x):
        return nn.relu(x @ self.w + self.b)


LINEAR = Linear(1002)


def constant_indexing(x):
    return x[:, PERMUTATION], x[:, KEEP_COLUMNS], x[:, [0, 2]] * 2.0


# --- structural ops and in-place updates --------------------------------------------------------


def concat_stack_split(x):
    left, right = np.split(x, 2, axis=-1)
    stacked = np.stack([left, right * 2.0], axis=0)
    return np.concatenate([right, left], axis=-1), stacked, np.concatenate([x, x[:1]], axis=0)


def local_buffer_update(x):
    n, d = x.shape
    out = np.zeros((n, d), dtype=x.dtype)
    running = np.zeros(d, dtype=x.dtype)
    for i in range(n):
        running = running + x[i]
        out[i] = running
    out[0] += 1.0
    return out


def input_mutation(x):
    x[0] = 0
    x[-1] += 1.0
    return x.sum()


def inplace_operators(x, y):
    x *= 2.0
    x += y
    return x - 1.0


def print_traced_value(x):
    loss = np.mean(x * x)
    print("loss", loss)
    return loss


# --- argument sets ----------------------------------------------------------------------------

SIZES = (3, 5, 8, 13, 64)


def _vectors(seed, dtype=np.float64, sizes=SIZES):
    rng = _rng(seed)
    return [(_normal(rng, (size,), dtype),) for size in sizes]


def _matrices(seed, columns, dtype=np.float64, rows=SIZES):
    rng = _rng(seed)
    return [(_normal(rng, (size, columns), dtype),) for size in rows]


def _mlp_args(seed, dtype, rows=(1, 3, 5, 13, 64)):
    rng = _rng(seed)
    weights = [_normal(rng, shape, dtype, 0.5) for shape in [(6, 9), (9,), (9, 3), (3,)]]
    return [(_normal(rng, (n, 6), dtype), *weights) for n in rows]


def _attention_args(seed, dtype, lengths=(3, 5, 8, 13), d=4):
    rng = _rng(seed)
    return [tuple(_normal(rng, (n, d), dtype) for _ in range(3)) for n in lengths]


def _cell_args(seed, dtype, hidden, gates, batches=(1, 3, 5, 8)):
    rng = _rng(seed)
    w = _normal(rng, (4, gates * hidden), dtype, 0.5)
    u = _normal(rng, (hidden, gates * hidden), dtype, 0.5)
    b = _normal(rng, (gates * hidden,), dtype, 0.1)
    return [(_normal(rng, (n, 4), dtype), _normal(rng, (n, hidden), dtype), w, u, b)
            for n in batches]


def _pytree_mlp_args(seed):
    rng = _rng(seed)
    params = {
        "layers": [
            {"w": _normal(rng, (5, 7)), "b": _normal(rng, (7,))},
            {"w": _normal(rng, (7, 2)), "b": _normal(rng, (2,))},
        ]
    }
    return [(params, _normal(rng, (n, 5))) for n in (1, 3, 8, 13)]


def _lstm_args(seed, dtype=np.float32):
    rng = _rng(seed)
    w = _normal(rng, (4, 12), dtype, 0.5)
    u = _normal(rng, (3, 12), dtype, 0.5)
    b = _normal(rng, (12,), dtype, 0.1)
    sets = []
    for n in (1, 2, 5, 13):
        state = (_normal(rng, (n, 3), dtype), _normal(rng, (n, 3), dtype))
        sets.append((_normal(rng, (n, 4), dtype), state, w, u, b))
    return sets


def _labels(rng, n, classes):
    return rng.integers(0, classes, size=n)


def _mixed_args(seed):
    rng = _rng(seed)
    return [
        (_normal(rng, (n,), np.float32), _normal(rng, (n,)), rng.integers(-5, 5, n, np.int32))
        for n in (1, 3, 5, 13)
    ]


def _nan_inf_args(seed):
    rng = _rng(seed)
    sets = []
    for n in (3, 5, 8, 13):
        x = _normal(rng, (n,), scale=3.0)
        x[0], x[-1] = np.nan, np.inf
        if n > 3:
            x[1] = -np.inf
        sets.append((x,))
    sets.append((np.array([-np.inf, np.nan, np.inf, 0.5], dtype=np.float32),))
    return sets


def _rnn_sequence_args(seed):
    rng = _rng(seed)
    w_x, w_h = _normal(rng, (3, 5), scale=0.5), _normal(rng, (5, 5), scale=0.5)
    return [(_normal(rng, (steps, 2, 3)), _normal(rng, (2, 5)), w_x, w_h) for steps in (1, 3, 6)]


def _branch_args(seed, dtype=np.float64):
    """Vectors with a positive sum, a negative sum, and an odd size in between."""
    rng = _rng(seed)
    return [
        (np.abs(_normal(rng, (3,), dtype)) + 0.1,),
        (-np.abs(_normal(rng, (5,), dtype)) - 0.1,),
        (np.abs(_normal(rng, (13,), dtype)),),
        (-np.abs(_normal(rng, (64,), dtype)),),
    ]


def _rng_args(seed, build):
    return build(_rng(seed))


CASES = [
    # elementwise and broadcasting
    Case("elementwise_chain_f64", elementwise_chain, _vectors(1)),
    Case("elementwise_chain_f32", elementwise_chain,
         _vectors(2, np.float32) + [(np.array(0.75, np.float32),), (np.zeros((0,), np.float32),)]),
    Case("elementwise_chain_dynamic", elementwise_chain, _matrices(3, 7, np.float32),
         dynamic=True),
    Case("log_and_powers", log_and_powers, _matrices(4, 5) + [(np.array(-1.5),)]),
    Case("broadcast_bias_scale", broadcast_bias_scale, _rng_args(5, lambda rng: [
        (_normal(rng, (n, 6)), _normal(rng, (6,)), _normal(rng, (n, 1))) for n in (1, 3, 5, 13)
    ]), dynamic=True),
    Case("outer_product", outer_product, _rng_args(6, lambda rng: [
        (_normal(rng, (n,), np.float32), _normal(rng, (m,), np.float32))
        for n, m in ((1, 3), (3, 5), (8, 13), (13, 64))
    ])),
    Case("scalar_polynomial", scalar_polynomial,
         [(np.array(value),) for value in (0.5, -2.0, 0.0)] + [(np.full((1, 1), 3.0),)]),
    # reductions
    Case("reductions_every_axis", reductions_every_axis, _rng_args(7, lambda rng: [
        (_normal(rng, shape),) for shape in ((2, 3, 4), (5, 1, 3), (8, 13, 2), (1, 1, 1))
    ])),
    Case("reductions_dynamic", reductions_every_axis, _rng_args(8, lambda rng: [
        (_normal(rng, shape, np.float32),) for shape in ((3, 5, 2), (5, 8, 13), (13, 3, 64))
    ]), dynamic=True),
    Case("variance_and_norm", variance_and_norm, _matrices(9, 7) + _matrices(10, 3, np.float32)),
    Case("batch_norm_methods", batch_norm_methods, _matrices(66, 4) + _matrices(67, 3, np.float32)),
    Case("any_all_counts", any_all_counts, _matrices(11, 4) + [(np.ones((3, 2)),)]),
    # normalization
    Case("softmax_library", softmax_library, _matrices(12, 5, np.float32), dynamic=True),
    Case("softmax_by_hand", softmax_by_hand, _matrices(13, 13) + [(np.full((2, 3), 7.0),)]),
    Case("log_softmax_pair", log_softmax_pair, _matrices(14, 6) + _matrices(15, 1, np.float32)),
    Case("layer_norm_library", layer_norm_library, _rng_args(16, lambda rng: [
        (_normal(rng, (n, 8), np.float32), _normal(rng, (8,), np.float32),
         _normal(rng, (8,), np.float32)) for n in (1, 3, 5, 13, 64)
    ]), dynamic={"x": (0,)}),
    Case("layer_norm_by_hand", layer_norm_by_hand, _rng_args(17, lambda rng: [
        (_normal(rng, (n, d)), _normal(rng, (d,))) for n, d in ((3, 4), (5, 7), (8, 16), (13, 3))
    ])),
    # attention
    Case("attention", attention, _attention_args(18, np.float64)),
    Case("attention_dynamic", attention_dynamic, _attention_args(19, np.float32),
         dynamic=True),
    Case("causal_attention_triu", causal_attention_triu, _attention_args(20, np.float64)),
    Case("causal_attention_where", causal_attention_where, _attention_args(21, np.float32)),
    Case("causal_attention_where_dynamic", causal_attention_where,
         _attention_args(22, np.float64), dynamic=True),
    Case("attention_f32_scale", attention_f32_scale, _attention_args(23, np.float32)),
    Case("batched_attention", batched_attention, _rng_args(24, lambda rng: [
        tuple(_normal(rng, (b, n, 4)) for _ in range(3)) for b, n in ((1, 3), (2, 5), (3, 13))
    ]), dynamic=True),
    # MLPs, residual blocks, losses
    Case("mlp_relu_f32", mlp_relu, _mlp_args(25, np.float32)),
    Case("mlp_relu_dynamic", mlp_relu, _mlp_args(26, np.float64), dynamic={"x": (0,)}),
    Case("mlp_gelu", mlp_gelu, _mlp_args(27, np.float64)),
    Case("residual_block", residual_block, _rng_args(28, lambda rng: [
        (_normal(rng, (n, 6)), _normal(rng, (6,)), _normal(rng, (6, 10), scale=0.3),
         _normal(rng, (10, 6), scale=0.3)) for n in (1, 3, 8, 13)
    ])),
    Case("mse_losses", mse_losses, _rng_args(29, lambda rng: [
        (_normal(rng, (n, 3), dtype), _normal(rng, (n, 3), dtype))
        for n, dtype in ((1, np.float64), (5, np.float32), (64, np.float64))
    ])),
    Case("cross_entropy_library", cross_entropy_library, _rng_args(30, lambda rng: [
        (_normal(rng, (n, 5), dtype), _labels(rng, n, 5))
        for n, dtype in ((1, np.float64), (3, np.float32), (8, np.float64), (13, np.float32))
    ]), guards=["nn.cross_entropy(logits, labels)"]),  # labels checked in [0, classes)
    Case("cross_entropy_by_hand", cross_entropy_by_hand, _rng_args(31, lambda rng: [
        (_normal(rng, (n, 4)), _labels(rng, n, 4)) for n in (2, 5, 13)
    ])),
    Case("cross_entropy_by_hand_dynamic", cross_entropy_by_hand, _rng_args(65, lambda rng: [
        (_normal(rng, (n, 4), np.float32), _labels(rng, n, 4)) for n in (3, 5, 13)
    ]), dynamic=True),
    # recurrent cells
    Case("rnn_cell", rnn_cell, _rng_args(32, lambda rng: [
        (_normal(rng, (n, 3)), _normal(rng, (n, 5)), _normal(rng, (3, 5)), _normal(rng, (5, 5)),
         _normal(rng, (5,))) for n in (1, 3, 8)
    ]), dynamic={"x": (0,), "h": (0,)}),
    Case("gru_cell", gru_cell, _cell_args(33, np.float64, hidden=5, gates=3)),
    Case("lstm_cell", lstm_cell, _lstm_args(34)),
    Case("rnn_sequence", rnn_sequence, _rnn_sequence_args(35)),
    # data-dependent control flow
    Case("data_dependent_branch", data_dependent_branch, _branch_args(36),
         guards=("if x.sum() > 0:",)),
    Case("data_dependent_branch_dynamic", data_dependent_branch, _branch_args(37, np.float32),
         dynamic=True, guards=("if x.sum() > 0:",)),
    Case("if_elif_else", if_elif_else, [
        (np.array([2.0, 3.0, 4.0]),), (np.array([-0.5, 0.2, 0.1, 0.0, 0.3]),),
        (np.full(8, -3.0),), (np.linspace(-1, 5, 13),),
    ], guards=("if level > 1.0:",)),
    Case("halve_until_small", halve_until_small, [
        (np.array([0.5, -0.25, 0.1]),), (np.array([3.0, -7.0, 1.0, 2.0, 0.0]),),
        (np.full(8, 100.0, np.float32),),
    ], guards=("while np.abs(x).max() > 1.0:",), exit_in_captured_loop=True),
    Case("early_return_on_nan", early_return_on_nan, [
        (np.array([1.0, -2.0, 3.0]),), (np.array([1.0, np.nan, 3.0, 4.0, 5.0]),),
        (_normal(_rng(38), (8, 2), np.float32),),
    ], guards=("if np.isnan(x).any():",)),
    Case("fixed_point_with_break", fixed_point_with_break, [
        (np.array([1.9, 2.1, 2.0]),), (np.array([50.0, -3.0, 0.0, 1.0, 2.0]),),
    ], guards=("if np.abs(updated - estimate).max() < 0.25:",), exit_in_captured_loop=True),
    Case("boolean_operators", boolean_operators, [
        (np.array([1.0, 2.0, 3.0]),), (np.array([1.0, 20.0, 3.0, 4.0, 5.0]),),
        (np.zeros(8),), (np.array([-1.0, 2.0, 3.0]),),
    ], guards=("if (x.min() > 0 and x.max() < 10) or not x.any():",)),
    Case("clamp_by_item", clamp_by_item, _vectors(39, sizes=(3, 5, 13)) + [(np.full(4, 0.1),)],
         guards=("return np.clip(x, -limit, limit) / max(peak, 1.0)",)),
    # shape-dependent code
    Case("shape_arithmetic", shape_arithmetic, _matrices(40, 3) + [(np.ones((1, 3)),)]),
    Case("shape_arithmetic_dynamic", shape_arithmetic, _matrices(41, 3, np.float32),
         dynamic=True),
    Case("transpose_reshape", transpose_reshape, _rng_args(42, lambda rng: [
        (_normal(rng, shape),) for shape in ((2, 3, 4), (5, 1, 3), (3, 8, 2))
    ]), dynamic=True),
    Case("shifted_windows", shifted_windows, _vectors(43, sizes=(2, 3, 5, 13, 64)),
         dynamic=True),
    # pytrees and Python scalars
    Case("pytree_mlp", pytree_mlp, _pytree_mlp_args(44)),
    Case("pytree_mlp_dynamic", pytree_mlp, _pytree_mlp_args(45), dynamic=True),
    Case("pytree_list_and_tuple", pytree_list_and_tuple, _rng_args(46, lambda rng: [
        ([_normal(rng, (n,)) for _ in range(3)], (_normal(rng, (n,)), _normal(rng, (1,))))
        for n in (1, 3, 8)
    ])),
    Case("leaky_relu_scaled", leaky_relu_scaled, _rng_args(47, lambda rng: [
        (_normal(rng, (5,), np.float32), 0.1, 2),
        (_normal(rng, (8,), np.float32), 0.9, 0.5),
        (_normal(rng, (13,)), 0.3, -1.0),
    ])),
    Case("softmax_temperature", softmax_temperature, _rng_args(48, lambda rng: [
        (_normal(rng, (n, 4), dtype), temperature)
        for n, dtype, temperature in ((3, np.float32, 0.5), (5, np.float64, 2.0),
                                      (13, np.float32, 1.0))
    ]), dynamic={"temperature": ()}),
    Case("repeated_smoothing", repeated_smoothing, _rng_args(49, lambda rng: [
        (_normal(rng, (5,)), 0), (_normal(rng, (8,)), 3), (_normal(rng, (3,), np.float32), 2),
    ])),
    # integers, NaN/Inf, mixed dtypes
    Case("integer_arithmetic", integer_arithmetic, _rng_args(50, lambda rng: [
        (rng.integers(-9, 9, (n,)), _normal(rng, (n, 3))) for n in (1, 3, 5, 13)
    ] + [(rng.integers(-9, 9, (4,), dtype=np.int32), _normal(rng, (4, 3), np.float32))])),
    Case("nan_inf_cleanup", nan_inf_cleanup, _nan_inf_args(51)),
    Case("mixed_dtypes", mixed_dtypes, _mixed_args(52)),
    Case("weak_scalars", weak_scalars, _rng_args(53, lambda rng: [
        (_normal(rng, (3,), np.float32), 2), (rng.integers(-3, 3, (5,), dtype=np.int32), 3),
        (_normal(rng, (8,)), 0.5),
    ])),
    # implicit inputs
    Case("global_weight", global_weight, _matrices(54, 6, rows=(1, 3, 5, 13))),
    Case("closure_model", closure_model, _matrices(55, 6, rows=(2, 8))),
    Case("method_self_w", LINEAR.forward, _matrices(56, 6, rows=(1, 5, 13))),
    Case("constant_indexing", constant_indexing, _matrices(57, 6, rows=(1, 3, 8)),
         dynamic={"x": (0,)},
         # The global mask's positions shape the result: its contents are guarded.
         guards=("return x[:, PERMUTATION], x[:, KEEP_COLUMNS]",)),
    # structural ops and in-place updates
    Case("concat_stack_split", concat_stack_split, _matrices(58, 8, rows=(1, 3, 5, 13))),
    Case("local_buffer_update", local_buffer_update, _matrices(59, 3, rows=(1, 3, 5, 8))
         + _matrices(60, 2, np.float32, rows=(13,))),
    Case("input_mutation", input_mutation, _vectors(61, sizes=(1, 3, 8))
         + _matrices(62, 2, np.float32, rows=(5,))),
    Case("inplace_operators", inplace_operators, _rng_args(63, lambda rng: [
        (_normal(rng, (n,)), _normal(rng, (n,))) for n in (3, 13)
    ])),
    Case("print_traced_value", print_traced_value, _vectors(64, sizes=(3, 8))),
]

CASES_BY_NAME = {case.name: case for case in CASES}
assert len(CASES_BY_NAME) == len(CASES), "case names must be unique"


# === Added for the differential suite (eager vs compiled): more domains ==================
# Each function below is a model in its own right; the argument sets span the pow2 buckets
# (sizes 0/1, 3, 5, 8, 13, 31, 64, 100), both float widths, NaN/Inf where the model meets
# them in practice, and every branch.

# --- activations --------------------------------------------------------------------------


def activation_zoo(x):
    softplus_stable = np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)
    softplus_naive = np.log1p(np.exp(x))
    silu = x * nn.sigmoid(x)
    return nn.relu(x), nn.gelu(x), nn.sigmoid(x), softplus_stable, softplus_naive, silu


def softplus_logaddexp(x):
    return np.logaddexp(0.0, x)


def swiglu_feed_forward(x, w_gate, w_up, w_down):
    gate = x @ w_gate
    return (gate * nn.sigmoid(gate) * (x @ w_up)) @ w_down


# --- normalization ------------------------------------------------------------------------


def rms_norm(x, weight, eps=1e-6):
    mean_square = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(mean_square + eps) * weight


def batch_norm_train(x, gamma, beta, running, momentum=0.1, eps=1e-5):
    n = x.shape[0]
    mean = x.mean(axis=0)
    variance = x.var(axis=0)
    normalized = (x - mean) / np.sqrt(variance + eps) * gamma + beta
    unbiased = variance * (n / (n - 1))  # the running variance is the unbiased estimate
    updated = {
        "mean": (1.0 - momentum) * running["mean"] + momentum * mean,
        "var": (1.0 - momentum) * running["var"] + momentum * unbiased,
    }
    return normalized, updated


# --- attention and transformer blocks ------------------------------------------------------


def _split_heads(t, heads):
    n, width = t.shape
    return t.reshape(n, heads, width // heads).transpose(1, 0, 2)


def multi_head_attention(x, w_qkv, w_out, heads):
    n, width = x.shape
    q, k, v = np.split(x @ w_qkv, 3, axis=-1)
    q, k, v = _split_heads(q, heads), _split_heads(k, heads), _split_heads(v, heads)
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(width // heads)
    future = np.triu(np.ones((n, n)), k=1) > 0
    scores = np.where(future, -np.inf, scores)
    mixed = nn.softmax(scores, axis=-1) @ v
    return mixed.transpose(1, 0, 2).reshape(n, width) @ w_out


def transformer_block(x, params):
    attended = multi_head_attention(
        nn.layer_norm(x, params["ln1"]["w"], params["ln1"]["b"]), params["qkv"], params["out"], 2
    )
    h = x + attended
    hidden = nn.gelu(nn.linear(nn.layer_norm(h, params["ln2"]["w"], params["ln2"]["b"]),
                               params["fc1"]["w"], params["fc1"]["b"]))
    return h + nn.linear(hidden, params["fc2"]["w"], params["fc2"]["b"])


def masked_softmax(scores, mask):
    masked = np.where(mask, scores, -np.inf)
    return nn.softmax(masked, axis=-1), nn.logsumexp(masked, axis=-1)


# --- losses ---------------------------------------------------------------------------------


def binary_cross_entropy(probabilities, targets, eps=1e-7):
    clipped = np.clip(probabilities, eps, 1.0 - eps)
    losses = -(targets * np.log(clipped) + (1.0 - targets) * np.log1p(-clipped))
    return losses.mean(), losses


def bce_with_logits(logits, targets):
    stable = np.maximum(logits, 0.0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))
    return np.mean(stable)


def huber_loss(prediction, target, delta=1.0):
    error = np.abs(prediction - target)
    quadratic = 0.5 * error * error
    linear = delta * (error - 0.5 * delta)
    return np.where(error <= delta, quadratic, linear).mean()


def mlp_classifier_loss(x, labels, w1, b1, w2, b2):
    hidden = x @ w1 + b1
    hidden = hidden * nn.sigmoid(hidden)  # SiLU
    return nn.cross_entropy(hidden @ w2 + b2, labels)


# --- recurrent models, unrolled over a static number of steps ------------------------------


def lstm_unrolled(xs, h, c, w, u, b):
    outputs = []
    for step in range(xs.shape[0]):
        h, c = lstm_cell(xs[step], (h, c), w, u, b)
        outputs.append(h)
    return np.stack(outputs, axis=0), (h, c)


def gru_unrolled(xs, h, w, u, b, steps=4):
    for step in range(steps):
        h = gru_cell(xs[:, step, :], h, w, u, b)
    return h


# --- data-dependent control flow and early exits --------------------------------------------


def gradient_clipping(grads, max_norm):
    total = np.sqrt(sum(np.sum(g * g) for g in grads))
    if total > max_norm:
        scale = max_norm / (total + 1e-6)
        return [g * scale for g in grads], total
    return list(grads), total


def newton_sqrt(x):
    estimate = np.maximum(x, 1.0)
    steps = 0
    while np.max(np.abs(estimate * estimate - x)) > 1e-4 * np.max(x):
        estimate = 0.5 * (estimate + x / estimate)
        steps += 1
    return estimate, steps


def min_max_scale(x):
    if x.size == 0:
        return x * 1.0
    spread = x.max() - x.min()
    if spread == 0:
        return x - x.mean()
    return (x - x.min()) / spread


def tiered_discount(prices, quantities):
    total = quantities.sum()
    if total >= 100:
        rate = 0.2
    elif total >= 10:
        rate = 0.1
    else:
        rate = 0.0
    return prices * quantities * (1.0 - rate), total


# --- shape-dependent code and images of any size ---------------------------------------------


def pad_to_multiple(x, multiple=4):
    remainder = x.shape[0] % multiple
    if remainder:
        x = np.pad(x, ((0, multiple - remainder), (0, 0)))
    return x.reshape(-1, multiple, x.shape[1]).mean(axis=1)


def average_pool_pairs(x):
    even = x.shape[-1] // 2 * 2
    pairs = x[..., :even].reshape(x.shape[0], even // 2, 2)
    return pairs.mean(axis=-1), pairs.max(axis=-1)


def conv1d_valid(signal, kernel):
    width = signal.shape[-1] - 2
    return kernel[0] * signal[..., :width] + kernel[1] * signal[..., 1 : width + 1] + \
        kernel[2] * signal[..., 2:]


def box_blur_2d(image):
    padded = np.pad(image, 1)
    height, width = image.shape
    total = np.zeros_like(image)
    for dy in range(3):
        for dx in range(3):
            total = total + padded[dy : dy + height, dx : dx + width]
    return total / 9.0, image[::2, ::-1]


# --- pytrees: optimizer state in and out ------------------------------------------------------


def sgd_momentum_step(params, grads, velocity, lr=0.1, momentum=0.9):
    new_velocity = {name: momentum * velocity[name] + grads[name] for name in params}
    new_params = {name: params[name] - lr * new_velocity[name] for name in params}
    return new_params, new_velocity


def adam_step(params, grads, state, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    step = state["step"] + 1
    first = [beta1 * m + (1.0 - beta1) * g for m, g in zip(state["m"], grads)]
    second = [beta2 * v + (1.0 - beta2) * g * g for v, g in zip(state["v"], grads)]
    correction1, correction2 = 1.0 - beta1**step, 1.0 - beta2**step
    updated = [p - lr * (m / correction1) / (np.sqrt(v / correction2) + eps)
               for p, m, v in zip(params, first, second)]
    return updated, {"step": step, "m": first, "v": second}


# --- integer code, NaN handling, mixed dtypes -------------------------------------------------


def classification_metrics(logits, labels):
    classes = np.arange(logits.shape[-1])
    predictions = np.argmax(logits, axis=-1)
    correct = predictions == labels
    predicted = predictions[:, None] == classes[None, :]
    actual = labels[:, None] == classes[None, :]
    confusion = (actual[:, :, None] & predicted[:, None, :]).sum(axis=0)
    return correct.mean(), correct.sum(), confusion, actual.sum(axis=0)


def integer_bucketing(values, width):
    bucket = np.floor_divide(values, width)
    offset = np.mod(values, width)
    histogram = (bucket[:, None] == np.arange(-3, 3)[None, :]).sum(axis=0)
    return bucket, offset, (values < 0).sum(), histogram, np.maximum(values, -width), \
        values * values - 3 * values


def nan_aware_statistics(x):
    valid = ~np.isnan(x)
    count = valid.sum(axis=-1)
    mean = np.where(valid, x, 0.0).sum(axis=-1) / np.maximum(count, 1)
    largest = np.where(valid, x, -np.inf).max(axis=-1)
    return mean, count, largest, np.isinf(x).any(axis=-1), np.where(np.isfinite(x), x, 0.0)


def mixed_promotion(floats, integers, flags):
    return (
        floats + integers,
        floats * flags,
        integers + flags,
        integers / 2,
        floats + 1e-3,
        integers * 2.5,
        np.where(flags, floats, integers),
        flags.sum(),
        flags & (floats > 0),
        ~flags,
        integers // 3 + (integers % 3 == 0),
    )


# --- globals and closures: arrays and Python scalars -------------------------------------------

EPSILON = 1e-3
SHIFT = _normal(_rng(1003), (5,))


def global_scalar_and_array(x):
    return (x - SHIFT) / (np.abs(x).max() + EPSILON)


def _make_scaled_activation(scale, activation, seed):
    bias = _normal(_rng(seed), (4,))

    def scaled_activation(x):
        return activation(x * scale + bias) * scale

    return scaled_activation


closure_tanh_half = _make_scaled_activation(0.5, np.tanh, 1004)
closure_sigmoid_two = _make_scaled_activation(2.0, nn.sigmoid, 1005)


# --- in-place updates of inputs and local buffers ----------------------------------------------


def ema_update(average, x, decay=0.9):
    average *= decay
    average += (1.0 - decay) * x
    return average.sum()


def strided_input_update(x):
    x[1:4:2] *= 2.0
    x[-1] = x[0] - 1.0
    return x[::-1] * 1.0


def masked_fill(x):
    buffer = x.copy()
    buffer[buffer < 0] = 0.0
    return buffer


# --- variable-length sequences, batched by tracejit.data.BucketBatcher ---------------------------


def masked_mean_classifier(data, mask, w, b):
    weights = mask[..., None].astype(data.dtype)
    pooled = (data * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
    return nn.log_softmax(pooled @ w + b)


def masked_rnn(data, mask, w_x, w_h):
    h = np.zeros((data.shape[0], w_h.shape[0]), dtype=data.dtype)
    for step in range(data.shape[1]):
        updated = np.tanh(data[:, step] @ w_x + h @ w_h)
        h = np.where(mask[:, step, None], updated, h)  # padding leaves h as it was
    return h


# --- argument sets for the added cases ---------------------------------------------------------

WIDE_SIZES = (1, 3, 31, 100)


def _activation_args(seed):
    rng = _rng(seed)
    sets = [(_normal(rng, (n,), dtype, 4.0),)
            for n, dtype in zip(WIDE_SIZES, (np.float32, np.float64, np.float32, np.float64))]
    special = [0.0, -0.0, 30.0, -30.0, 100.0, -100.0, np.inf, -np.inf, np.nan]
    sets.append((np.array(special, np.float32),))
    sets.append((np.zeros((0,), np.float64),))
    sets.append((np.array(special, np.float64).reshape(3, 3),))
    return sets


def _softplus_f32_args(seed):
    rng = _rng(seed)
    special = [0.0, -0.0, 30.0, -30.0, 100.0, -100.0, np.inf, -np.inf, np.nan]
    return [(_normal(rng, (n,), np.float32, 4.0),) for n in (1, 5, 31)] + [
        (np.array(special, np.float32),)]


def _swiglu_args(seed, dtype):
    rng = _rng(seed)
    weights = [_normal(rng, shape, dtype, 0.4) for shape in ((6, 8), (6, 8), (8, 6))]
    return [(_normal(rng, (n, 6), dtype), *weights) for n in (1, 5, 31)]


def _rms_norm_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, (n, d), dtype, 3.0), _normal(rng, (d,), dtype))
            for n, d, dtype in ((1, 8, np.float32), (5, 8, np.float32), (13, 8, np.float32),
                                (64, 3, np.float64), (0, 3, np.float64))]


def _batch_norm_args(seed, dtype, rows=(2, 3, 5, 13, 64)):
    rng = _rng(seed)
    gamma, beta = _normal(rng, (4,), dtype), _normal(rng, (4,), dtype)
    running = {"mean": np.zeros(4, dtype), "var": np.ones(4, dtype)}
    return [(_normal(rng, (n, 4), dtype, 2.0) + 1.0, gamma, beta, running) for n in rows]


def _mha_args(seed, dtype, lengths=(1, 3, 5, 13), width=8):
    rng = _rng(seed)
    w_qkv = _normal(rng, (width, 3 * width), dtype, 0.3)
    w_out = _normal(rng, (width, width), dtype, 0.3)
    return [(_normal(rng, (n, width), dtype), w_qkv, w_out, 2) for n in lengths]


def _transformer_args(seed, dtype=np.float32, lengths=(3, 8, 13), width=8):
    rng = _rng(seed)

    def norm():
        return {"w": 1.0 + _normal(rng, (width,), dtype, 0.1), "b": _normal(rng, (width,), dtype,
                                                                             0.1)}

    params = {
        "ln1": norm(), "ln2": norm(),
        "qkv": _normal(rng, (width, 3 * width), dtype, 0.3),
        "out": _normal(rng, (width, width), dtype, 0.3),
        "fc1": {"w": _normal(rng, (width, 16), dtype, 0.3), "b": _normal(rng, (16,), dtype, 0.1)},
        "fc2": {"w": _normal(rng, (16, width), dtype, 0.3), "b": _normal(rng, (width,), dtype,
                                                                         0.1)},
    }
    return [(_normal(rng, (n, width), dtype), params) for n in lengths]


def _masked_softmax_args(seed):
    rng = _rng(seed)
    sets = []
    for n, dtype in ((3, np.float64), (5, np.float32), (13, np.float64)):
        mask = rng.random((n, 6)) > 0.4
        mask[0] = False  # a fully masked row: NaN softmax and -inf logsumexp, both ways
        sets.append((_normal(rng, (n, 6), dtype), mask))
    return sets


def _bce_args(seed):
    rng = _rng(seed)
    sets = []
    for n, dtype in ((1, np.float64), (5, np.float32), (31, np.float64), (100, np.float32)):
        probabilities = rng.random(n).astype(dtype)
        probabilities[: min(n, 2)] = (0.0, 1.0)[: min(n, 2)]  # the clip matters here
        sets.append((probabilities, (rng.random(n) > 0.5).astype(dtype)))
    sets.append((rng.random(8), rng.random(8) > 0.5))  # boolean targets promote to float
    return sets


def _logit_args(seed, sizes=(1, 5, 31, 100)):
    rng = _rng(seed)
    return [(_normal(rng, (n,), dtype, 5.0), (rng.random(n) > 0.5).astype(dtype))
            for n, dtype in zip(sizes, (np.float64, np.float32) * 2)]


def _huber_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, (n, 2), dtype, 2.0), _normal(rng, (n, 2), dtype))
            for n, dtype in ((1, np.float64), (3, np.float32), (13, np.float64),
                             (64, np.float32))]


def _classifier_args(seed, dtype, rows=(1, 5, 13, 64)):
    rng = _rng(seed)
    weights = [_normal(rng, shape, dtype, 0.5) for shape in ((6, 10), (10,), (10, 4), (4,))]
    return [(_normal(rng, (n, 6), dtype), _labels(rng, n, 4), *weights) for n in rows]


def _lstm_unrolled_args(seed, dtype=np.float64):
    rng = _rng(seed)
    w = _normal(rng, (4, 12), dtype, 0.5)
    u = _normal(rng, (3, 12), dtype, 0.5)
    b = _normal(rng, (12,), dtype, 0.1)
    return [(_normal(rng, (steps, n, 4), dtype), _normal(rng, (n, 3), dtype),
             _normal(rng, (n, 3), dtype), w, u, b) for steps, n in ((1, 2), (3, 5), (5, 13))]


def _gru_unrolled_args(seed, dtype=np.float32):
    rng = _rng(seed)
    w = _normal(rng, (4, 15), dtype, 0.5)
    u = _normal(rng, (5, 15), dtype, 0.5)
    b = _normal(rng, (15,), dtype, 0.1)
    return [(_normal(rng, (n, 4, 4), dtype), _normal(rng, (n, 5), dtype), w, u, b)
            for n in (1, 3, 8, 31)]


def _clipping_args(seed):
    rng = _rng(seed)
    sets = []
    for n, scale, dtype in ((3, 10.0, np.float64), (5, 0.01, np.float64), (13, 5.0, np.float32),
                            (64, 0.001, np.float32)):
        sets.append(([_normal(rng, (n, 2), dtype, scale), _normal(rng, (n,), dtype, scale)], 1.0))
    return sets


def _newton_args(seed):
    rng = _rng(seed)
    return [
        (np.abs(_normal(rng, (3,), scale=10.0)) + 0.5,),
        (np.full(5, 1.0),),
        (np.abs(_normal(rng, (13,), np.float32, 100.0)) + 1.0,),
        (np.linspace(0.25, 400.0, 100),),
    ]


def _min_max_args(seed):
    rng = _rng(seed)
    with_nan = _normal(rng, (8,))
    with_nan[3] = np.nan
    return [
        (_normal(rng, (13,)),),
        (np.full(5, 2.5, np.float32),),
        (np.zeros((0,), np.float32),),
        (with_nan,),
        (np.array([7.0]),),
        (_normal(rng, (100,), np.float32),),
    ]


def _discount_args(seed):
    rng = _rng(seed)
    return [
        (_normal(rng, (3,)) + 5.0, np.array([1, 2, 3])),
        (_normal(rng, (5,), np.float32) + 5.0, np.array([5, 0, 2, 1, 4], np.int32)),
        (_normal(rng, (13,)) + 5.0, rng.integers(5, 20, 13)),
        (_normal(rng, (1,)) + 5.0, np.array([30], np.int64)),
    ]


def _pad_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, (n, 3), dtype),)
            for n, dtype in ((4, np.float64), (5, np.float64), (13, np.float32), (64, np.float64),
                             (31, np.float64))]


def _pool_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, (rows, n), dtype),)
            for rows, n, dtype in ((1, 2, np.float64), (2, 5, np.float32), (3, 13, np.float64),
                                   (2, 100, np.float32))]


def _conv1d_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, shape, dtype), _normal(rng, (3,), dtype))
            for shape, dtype in (((3,), np.float64), ((2, 8), np.float32), ((13,), np.float64),
                                 ((4, 100), np.float32))]


def _image_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, shape, dtype),)
            for shape, dtype in (((1, 1), np.float64), ((3, 5), np.float64), ((8, 13), np.float32),
                                 ((31, 64), np.float64))]


def _sgd_args(seed):
    rng = _rng(seed)
    sets = []
    for n, dtype in ((1, np.float64), (5, np.float32), (13, np.float64)):
        shapes = {"w": (n, 3), "b": (3,)}
        params = {name: _normal(rng, shape, dtype) for name, shape in shapes.items()}
        grads = {name: _normal(rng, shape, dtype) for name, shape in shapes.items()}
        velocity = {name: _normal(rng, shape, dtype, 0.1) for name, shape in shapes.items()}
        sets.append((params, grads, velocity))
    return sets


def _adam_args(seed):
    rng = _rng(seed)
    sets = []
    for n, step, dtype in ((3, 0, np.float64), (8, 9, np.float32), (13, 99, np.float64)):
        shapes = ((n, 2), (2,))
        params = [_normal(rng, shape, dtype) for shape in shapes]
        grads = [_normal(rng, shape, dtype) for shape in shapes]
        state = {"step": step, "m": [_normal(rng, shape, dtype, 0.1) for shape in shapes],
                 "v": [np.abs(_normal(rng, shape, dtype, 0.1)) for shape in shapes]}
        sets.append((params, grads, state))
    return sets


def _metrics_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, (n, 4), dtype), rng.integers(0, 4, n).astype(label_dtype))
            for n, dtype, label_dtype in ((1, np.float64, np.int64), (5, np.float32, np.int32),
                                          (13, np.float64, np.int64), (100, np.float32, np.int64))]


def _bucketing_args(seed):
    rng = _rng(seed)
    return [(rng.integers(-12, 12, n).astype(dtype), width)
            for n, dtype, width in ((1, np.int64, 4), (5, np.int32, 4), (13, np.int64, 4),
                                    (31, np.int32, 4), (8, np.int64, -3))]


def _nan_statistics_args(seed):
    rng = _rng(seed)
    sets = []
    for rows, n, dtype in ((1, 3, np.float64), (2, 5, np.float32), (3, 13, np.float64),
                           (2, 64, np.float32)):
        x = _normal(rng, (rows, n), dtype)
        x[0, 0] = np.nan
        x[-1, -1] = np.inf if rows > 1 else x[-1, -1]
        sets.append((x,))
    sets.append((np.full((2, 3), np.nan),))  # nothing valid: mean 0, max -inf
    return sets


def _promotion_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, (n,), np.float32), rng.integers(-6, 6, n).astype(int_dtype),
             rng.random(n) > 0.5)
            for n, int_dtype in ((1, np.int64), (3, np.int32), (13, np.int64), (64, np.int32))]


def _ema_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, shape, dtype), _normal(rng, shape, dtype))
            for shape, dtype in (((3,), np.float64), ((5, 2), np.float32), ((31,), np.float64))]


def _strided_update_args(seed):
    rng = _rng(seed)
    return [(_normal(rng, (n,), dtype),)
            for n, dtype in ((5, np.float64), (8, np.float32), (13, np.float64), (100, np.float64))]


def _bucketed_batches(seed, lengths, dtype, weight_shapes):
    """Batches of variable-length sequences as BucketBatcher pads them (one length per
    pow2 bucket), with the model's weights."""
    from tracejit.data import BucketBatcher

    rng = _rng(seed)
    sequences = [_normal(rng, (n, 3), dtype) for n in lengths]
    weights = [_normal(rng, shape, dtype, 0.5) for shape in weight_shapes]
    return [(batch.data, batch.mask, *weights)
            for batch in BucketBatcher(sequences, batch_size=3)]


CASES.extend([
    # activations
    Case("activation_zoo", activation_zoo, _activation_args(100), dynamic=True),
    Case("swiglu_feed_forward", swiglu_feed_forward, _swiglu_args(101, np.float32)),
    # normalization
    Case("rms_norm", rms_norm, _rms_norm_args(102)),
    Case("batch_norm_train_f64", batch_norm_train, _batch_norm_args(103, np.float64)),
    Case("batch_norm_train_f32_dynamic", batch_norm_train,
         _batch_norm_args(104, np.float32, rows=(3, 8, 31)), dynamic={"x": (0,)}),
    # attention and transformer blocks
    Case("multi_head_attention", multi_head_attention, _mha_args(105, np.float64)),
    Case("multi_head_attention_f32_dynamic", multi_head_attention,
         _mha_args(106, np.float32, lengths=(3, 5, 13, 31)), dynamic={"x": (0,)}),
    Case("transformer_block", transformer_block, _transformer_args(107)),
    Case("masked_softmax", masked_softmax, _masked_softmax_args(108)),
    # losses
    Case("binary_cross_entropy", binary_cross_entropy, _bce_args(109)),
    Case("bce_with_logits", bce_with_logits, _logit_args(110)),
    Case("huber_loss", huber_loss, _huber_args(111)),
    Case("mlp_classifier_loss_f32", mlp_classifier_loss, _classifier_args(112, np.float32),
         guards=("nn.cross_entropy(hidden @ w2 + b2, labels)",)),
    Case("mlp_classifier_loss_f64_dynamic", mlp_classifier_loss,
         _classifier_args(113, np.float64), dynamic={"x": (0,), "labels": (0,)},
         guards=("nn.cross_entropy(hidden @ w2 + b2, labels)",)),
    # recurrent models
    Case("lstm_unrolled", lstm_unrolled, _lstm_unrolled_args(114)),
    Case("gru_unrolled", gru_unrolled, _gru_unrolled_args(115), dynamic=True),
    # data-dependent control flow and early exits
    Case("gradient_clipping", gradient_clipping, _clipping_args(116),
         guards=("if total > max_norm:",)),
    Case("newton_sqrt", newton_sqrt, _newton_args(117),
         guards=("while np.max(np.abs(estimate * estimate - x)) > 1e-4 * np.max(x):",),
         exit_in_captured_loop=True),
    Case("min_max_scale", min_max_scale, _min_max_args(118), dynamic=True,
         guards=("if spread == 0:",)),
    Case("tiered_discount", tiered_discount, _discount_args(119),
         guards=("if total >= 100:", "elif total >= 10:")),
    # shape-dependent code and images
    Case("pad_to_multiple", pad_to_multiple, _pad_args(120), dynamic=True),
    Case("average_pool_pairs", average_pool_pairs, _pool_args(121)),
    Case("conv1d_valid", conv1d_valid, _conv1d_args(122), dynamic=True),
    Case("box_blur_2d", box_blur_2d, _image_args(123), dynamic=True),
    # pytrees
    Case("sgd_momentum_step", sgd_momentum_step, _sgd_args(124)),
    Case("adam_step", adam_step, _adam_args(125)),
    # integers, NaN handling, mixed dtypes
    Case("classification_metrics", classification_metrics, _metrics_args(126)),
    Case("integer_bucketing", integer_bucketing, _bucketing_args(127)),
    Case("nan_aware_statistics", nan_aware_statistics, _nan_statistics_args(128)),
    Case("mixed_promotion", mixed_promotion, _promotion_args(129)),
    # globals and closures
    Case("global_scalar_and_array", global_scalar_and_array, _matrices(130, 5, rows=(1, 3, 13))
         + _matrices(131, 5, np.float32, rows=(8,))),
    Case("closure_tanh_half", closure_tanh_half, _matrices(132, 4, rows=(3, 5, 31))),
    Case("closure_sigmoid_two", closure_sigmoid_two,
         _matrices(133, 4, np.float32, rows=(2, 13, 64))),
    # in-place updates
    Case("ema_update", ema_update, _ema_args(134)),
    Case("strided_input_update", strided_input_update, _strided_update_args(135)),
    Case("masked_fill", masked_fill, _strided_update_args(136)),  # x[mask] = s: a where
    # variable-length sequences through BucketBatcher
    Case("masked_mean_classifier", masked_mean_classifier, _bucketed_batches(
        138, (1, 2, 3, 5, 7, 12, 13, 30, 31, 64, 100), np.float32, ((3, 4), (4,)))),
    Case("masked_rnn", masked_rnn, _bucketed_batches(
        139, (1, 2, 3, 4, 6, 7, 11, 13), np.float64, ((3, 5), (5, 5)))),
    # Once traced to float64: numpy_api's own ``all`` (np.all) shadowed the builtin.
    Case("softplus_logaddexp_f32", softplus_logaddexp, _softplus_f32_args(137), rtol=1e-6),
])
CASES_BY_NAME.update((case.name, case) for case in CASES)
assert len(CASES_BY_NAME) == len(CASES), "case names must be unique"
