"""The workloads of DESIGN.md §6, as NumPy model code, with their NumPy and tracejit candidates.

Every model function here is plain NumPy (``tracejit.nn`` layers are NumPy functions), so the
same function is NumPy eager when called on ndarrays and tracejit when wrapped in
``tracejit.jit``. Peers (torch, JAX, numba, numexpr) are added by ``benchmarks.peers``.

All inputs come from ``numpy.random.default_rng(SEED)``; the builders return a
``harness.Workload`` whose candidates all read the very same arrays.

>>> x = np.array([[0.0, 1.0]])
>>> gelu_affine(x, np.ones(2), np.zeros(2)).round(3).tolist()
[[0.0, 0.841]]
"""

from __future__ import annotations

import numpy as np

from tracejit import jit, nn, tensor, value_and_grad

from .harness import NUMPY, TRACEJIT, Candidate, Workload

SEED = 0
GELU_SHAPE = (2048, 2048)
NORM_SHAPE = (8192, 512)
MLP_SIZES = dict(batch=512, inputs=784, hidden=1024, classes=10)
LEARNING_RATE = 0.1
RNN_SIZES = dict(sequences=24, min_length=16, max_length=128, inputs=64, hidden=128)
CALL_SIZE = 16
TITLES = {  # DESIGN.md §6's names
    "gelu": "gelu(x*w+b), 2048×2048 f32",
    "layer_norm_softmax": "layer_norm → softmax, 8192×512 f32",
    "mlp_train_step": "MLP train step 512×784→1024→10",
    "rnn": "RNN, 24 sequences of length 16–128",
    "call_overhead": "call overhead, 16 elements",
    "first_call": "first call (trace+compile), MLP step",
    "transformer_block": "transformer block 8×128×256, 8 heads, MLP 1024",
}
TRANSFORMER_SIZES = dict(batch=8, seq=128, d_model=256, heads=8, hidden=1024)


def _normal(rng, *shape, scale=1.0):
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


def _tracejit_info(jitted):
    """What a jit function did, for the table: compiles, variants, eager calls by reason."""
    def info():
        stats = jitted.stats()
        return dict(compiles=stats["compiles"], variants=stats["variants"],
                    eager_calls=stats["eager_calls"], side_exits=stats["side_exits"],
                    compile_seconds=stats["compile_seconds"])
    return info


def _tracejit(function):
    """``jit`` with the memory cache only: each run compiles afresh and leaves no files."""
    return jit(cache="memory")(function)


# --- 1. gelu(x * w + b) ----------------------------------------------------------------------
def gelu_affine(x, w, b):
    return nn.gelu(x * w + b)  # the tanh form, as torch's approximate="tanh"


def gelu_inputs(rng):
    return dict(x=_normal(rng, *GELU_SHAPE), w=_normal(rng, GELU_SHAPE[1]),
                b=_normal(rng, GELU_SHAPE[1]))


def gelu_workload(rng):
    inputs = gelu_inputs(rng)
    x, w, b = inputs.values()
    jitted = _tracejit(gelu_affine)
    return Workload(
        inputs=inputs,
        key="gelu",
        title=TITLES["gelu"],
        target="≤ 0.5× jax.jit; ≤ 1.5× streaming its bytes",  # DESIGN.md §6
        candidates=[
            Candidate(NUMPY, lambda: gelu_affine(x, w, b)),
            Candidate(TRACEJIT, lambda: jitted(x, w, b), after_run=_tracejit_info(jitted)),
        ],
        notes=["x 2048×2048, w and b of 2048, float32; tanh-form gelu for every candidate"],
    )


# --- 2. layer_norm -> softmax ------------------------------------------------------------------
def layer_norm_softmax(x):
    return nn.softmax(nn.layer_norm(x), axis=-1)


def norm_workload(rng):
    x = _normal(rng, *NORM_SHAPE)
    jitted = _tracejit(layer_norm_softmax)
    return Workload(
        inputs=dict(x=x),
        key="layer_norm_softmax",
        title=TITLES["layer_norm_softmax"],
        target="≤ 0.7× the best peer; ≤ 3× streaming its bytes",
        candidates=[
            Candidate(NUMPY, lambda: layer_norm_softmax(x)),
            Candidate(TRACEJIT, lambda: jitted(x), after_run=_tracejit_info(jitted)),
        ],
        notes=["over the rows of x 8192×512 float32; layer norm without gain/bias, eps 1e-5"],
    )


# --- 3. MLP train step -------------------------------------------------------------------------
def mlp_train_step(x, labels, w1, b1, w2, b2, lr):
    """One SGD step of a relu MLP with softmax cross-entropy, backward written by hand.

    Returns the loss and the updated weights (the inputs are not modified).
    """
    batch = x.shape[0]
    pre = x @ w1 + b1
    hidden = nn.relu(pre)
    logits = hidden @ w2 + b2
    log_probs = nn.log_softmax(logits)
    onehot = (labels[:, None] == np.arange(logits.shape[-1])).astype(logits.dtype)
    loss = -np.sum(onehot * log_probs) / batch
    d_logits = (np.exp(log_probs) - onehot) / batch
    d_w2 = hidden.T @ d_logits
    d_b2 = np.sum(d_logits, axis=0)
    d_pre = np.where(pre > 0, d_logits @ w2.T, 0)
    d_w1 = x.T @ d_pre
    d_b1 = np.sum(d_pre, axis=0)
    return loss, w1 - lr * d_w1, b1 - lr * d_b1, w2 - lr * d_w2, b2 - lr * d_b2


def mlp_loss(x, labels, w1, b1, w2, b2):
    """The same model's loss, for autograd (Tensors, torch, JAX)."""
    logits = nn.relu(x @ w1 + b1) @ w2 + b2
    return nn.cross_entropy(logits, labels)


def mlp_value_and_grad_step(x, labels, w1, b1, w2, b2, lr):
    """The SGD step with the gradients from ``tracejit.value_and_grad`` of ``mlp_loss``:
    under ``jit`` the forward and the backward are one compiled program."""
    loss, grads = value_and_grad(mlp_loss, argnums=(2, 3, 4, 5))(x, labels, w1, b1, w2, b2)
    return (loss, *(weight - lr * grad for weight, grad in zip((w1, b1, w2, b2), grads)))


def mlp_inputs(rng):
    """x, labels, w1, b1, w2, b2 (float32, labels int64)."""
    sizes = MLP_SIZES
    return dict(
        x=_normal(rng, sizes["batch"], sizes["inputs"]),
        labels=rng.integers(0, sizes["classes"], sizes["batch"]),
        w1=_normal(rng, sizes["inputs"], sizes["hidden"], scale=sizes["inputs"] ** -0.5),
        b1=_normal(rng, sizes["hidden"], scale=0.1),
        w2=_normal(rng, sizes["hidden"], sizes["classes"], scale=sizes["hidden"] ** -0.5),
        b2=_normal(rng, sizes["classes"], scale=0.1),
    )


def mlp_gradients(weights):
    """Compare train steps by what they computed: the loss and the gradient of each weight,
    recovered from the update as (w - w_new) / lr."""
    def normalize(result):
        loss, *updated = result
        return [np.asarray(loss, np.float64)] + [
            (np.asarray(old, np.float64) - np.asarray(new, np.float64)) / LEARNING_RATE
            for old, new in zip(weights, updated)]
    return normalize


def tensor_autograd_step(jitted_loss, x, labels, weights):
    """A train step on runtime Tensors: ``jitted_loss`` forward, ``backward()``, SGD."""
    params = [tensor(weight, requires_grad=True) for weight in weights]

    def step():
        for param in params:
            param.grad = None
        loss = jitted_loss(x, labels, *params)
        loss.backward()
        return (loss.numpy(), *(param.numpy() - LEARNING_RATE * param.grad.numpy()
                                for param in params))
    return step


def mlp_workload(rng):
    inputs = mlp_inputs(rng)
    x, labels = inputs["x"], inputs["labels"]
    weights = [inputs[name] for name in ("w1", "b1", "w2", "b2")]
    jitted_step = _tracejit(mlp_train_step)
    jitted_grad_step = _tracejit(mlp_value_and_grad_step)
    jitted_loss = _tracejit(mlp_loss)
    return Workload(
        inputs=inputs,
        key="mlp_train_step",
        title=TITLES["mlp_train_step"],
        target="≤ jax.jit under either OpenBLAS kernel; ≤ 1.3× FLOP time at peak",
        normalize=mlp_gradients(weights),
        # A sample of 4 steps or more, as the batch-512 row's (benchmarks.mlp_step): with one
        # step per 20 ms sample the idle runs since e4e1a20 put NumPy's median at 24.8-26.9
        # ms against a best of 11.7-13.9 and the batch-512 row's 12.0-14.0 (the same step);
        # the rows of 3+ calls a sample spread 1.03-1.25x (jax.jit, tracejit's batch rows).
        min_calls=4,
        candidates=[
            Candidate(NUMPY, lambda: mlp_train_step(x, labels, *weights, LEARNING_RATE),
                      note="hand-written backward"),
            Candidate("tracejit (manual backward)",
                      lambda: jitted_step(x, labels, *weights, LEARNING_RATE), peer=TRACEJIT,
                      note="@jit on NumPy eager's hand-written step",
                      after_run=_tracejit_info(jitted_step)),
            Candidate("tracejit jit(value_and_grad)",
                      lambda: jitted_grad_step(x, labels, *weights, LEARNING_RATE),
                      peer=TRACEJIT, note="@jit step: value_and_grad(loss) + SGD",
                      after_run=_tracejit_info(jitted_grad_step)),
            Candidate("tracejit Tensor autograd",
                      tensor_autograd_step(jitted_loss, x, labels, weights), peer=TRACEJIT,
                      note="@jit loss on requires_grad Tensors, backward(), SGD",
                      after_run=_tracejit_info(jitted_loss)),
        ],
        notes=[
            "batch 512, 784 → 1024 (relu) → 10, softmax cross-entropy (mean), float32; one "
            "SGD step (lr 0.1) returning the loss and new weights; results are compared as "
            "the loss and the gradients (w - w_new) / lr of all four weights",
            "tracejit three ways: '(manual backward)' compiles NumPy eager's hand-written "
            "step; 'jit(value_and_grad)' compiles the step with tracejit.value_and_grad (like "
            "jax.jit); 'Tensor autograd' calls a @jit loss on requires_grad Tensors and "
            "backward() (like torch.compile); an eager fallback would show in the status",
        ],
    )


# --- 4. RNN over variable-length sequences ---------------------------------------------------
def rnn_inputs(rng):
    """24 sequences (length, 64) with lengths drawn from 16..128, and the weights."""
    sizes = RNN_SIZES
    lengths = rng.integers(sizes["min_length"], sizes["max_length"] + 1, sizes["sequences"])
    sequences = [_normal(rng, int(length), sizes["inputs"]) for length in lengths]
    return dict(
        sequences=sequences,
        wx=_normal(rng, sizes["inputs"], sizes["hidden"], scale=sizes["inputs"] ** -0.5),
        wh=_normal(rng, sizes["hidden"], sizes["hidden"], scale=sizes["hidden"] ** -0.5),
        b=_normal(rng, sizes["hidden"], scale=0.1),
    )


def rnn_final_state(sequence, wx, wh, b):
    """h_t = tanh(x_t @ Wx + h_{t-1} @ Wh + b) over one sequence; the last h."""
    h = np.zeros(wh.shape[0], dtype=sequence.dtype)
    for t in range(sequence.shape[0]):
        h = np.tanh(sequence[t] @ wx + h @ wh + b)
    return h


def rnn_cell(x_t, mask_t, h, wx, wh, b):
    """One masked step over a padded batch: rows whose sequence has ended keep their h."""
    h_new = np.tanh(x_t @ wx + h @ wh + b)
    return np.where(mask_t[:, None], h_new, h)


def rnn_padded(x, mask, wx, wh, b):
    """Every step of a padded, time-major batch x (T, B, F) with mask (T, B): final h."""
    h = np.zeros((x.shape[1], wh.shape[0]), dtype=x.dtype)
    for t in range(x.shape[0]):
        h = rnn_cell(x[t], mask[t], h, wx, wh, b)
    return h


def bucketed_batches(sequences):
    """The sequences grouped by pow2 length bucket with ``tracejit.data.BucketBatcher``,
    padded to the bucket's edge, time-major: a list of (x (T, B, F), mask (T, B), indices).
    Built once, outside the timed calls, like a data loader would."""
    from tracejit.data import BucketBatcher

    prepared = []
    for batch in BucketBatcher(sequences, batch_size=len(sequences)):
        prepared.append((np.ascontiguousarray(batch.data.transpose(1, 0, 2)),
                         np.ascontiguousarray(batch.mask.T), batch.indices))
    return prepared


def run_per_sequence(final_state, sequences, wx, wh, b):
    return np.stack([final_state(sequence, wx, wh, b) for sequence in sequences])


def run_bucketed_cells(cell, batches, wx, wh, b):
    """A Python loop over time steps calling ``cell`` on each bucket's padded batch."""
    out = np.empty((sum(len(indices) for _, _, indices in batches), wh.shape[0]), wx.dtype)
    for x, mask, indices in batches:
        h = np.zeros((x.shape[1], wh.shape[0]), dtype=x.dtype)
        for t in range(x.shape[0]):
            h = cell(x[t], mask[t], h, wx, wh, b)
        out[indices] = h
    return out


def run_bucketed_sequences(padded, batches, wx, wh, b):
    """One ``padded`` call per bucket."""
    out = np.empty((sum(len(indices) for _, _, indices in batches), wh.shape[0]), wx.dtype)
    for x, mask, indices in batches:
        out[indices] = padded(x, mask, wx, wh, b)
    return out


def rnn_workload(rng, unrolled=False):
    inputs = rnn_inputs(rng)
    sequences, wx, wh, b = inputs.values()
    batches = bucketed_batches(sequences)
    lengths = [len(sequence) for sequence in sequences]
    jitted_cell = _tracejit(rnn_cell)
    candidates = [
        Candidate(NUMPY, lambda: run_per_sequence(rnn_final_state, sequences, wx, wh, b),
                  note="one sequence at a time, batch 1"),
        Candidate("NumPy eager (bucketed)",
                  lambda: run_bucketed_cells(rnn_cell, batches, wx, wh, b), peer="NumPy bucketed",
                  note="same schedule as tracejit's rows, eager"),
        Candidate("tracejit (jit cell, bucketed)",
                  lambda: run_bucketed_cells(jitted_cell, batches, wx, wh, b), peer=TRACEJIT,
                  note="@jit masked cell, Python loop over padded steps",
                  after_run=_tracejit_info(jitted_cell)),
    ]
    if unrolled:
        jitted_padded = _tracejit(rnn_padded)
        candidates.append(Candidate(
            "tracejit (jit sequence, bucketed)",
            lambda: run_bucketed_sequences(jitted_padded, batches, wx, wh, b), peer=TRACEJIT,
            note="@jit over all steps of a bucket (the loop is unrolled)",
            after_run=_tracejit_info(jitted_padded)))
    buckets = ", ".join(f"{x.shape[1]}×{x.shape[0]}" for x, _, _ in batches)
    return Workload(
        inputs=inputs,
        key="rnn",
        title=TITLES["rnn"],
        target="≤ lax.scan; one compile per batch bucket for any length",
        candidates=candidates,
        tolerance=1e-3,
        notes=[
            f"h = tanh(x_t @ Wx + h @ Wh + b), input 64, hidden 128, float32; {len(lengths)} "
            f"sequences, lengths {min(lengths)}..{max(lengths)} ({len(set(lengths))} "
            f"distinct, total {sum(lengths)} steps, seed {SEED}); the result is the final h "
            "of every sequence; one timed call runs all 24",
            "NumPy eager, torch eager, numba and jax.jit run one sequence at a time (jax.jit: "
            "lax.scan, compiled once per distinct length); tracejit (and 'NumPy eager "
            f"(bucketed)') pad to pow2 buckets with tracejit.data.BucketBatcher (batch × "
            f"steps: {buckets}, {sum(x.shape[0] for x, _, _ in batches)} padded steps) and "
            "mask: h = where(mask_t, h_new, h); batching and padding happen before timing",
        ],
    )


# --- 5. call overhead --------------------------------------------------------------------------
def affine_small(x):
    return x * 2 + 1


def call_workload(rng):
    x = np.linspace(-1, 1, CALL_SIZE, dtype=np.float32)
    jitted = _tracejit(affine_small)
    return Workload(
        inputs=dict(x=x),
        key="call_overhead",
        title=TITLES["call_overhead"],
        unit="µs",
        target="≤ 1.0 µs",
        candidates=[
            Candidate(NUMPY, lambda: affine_small(x)),
            Candidate(TRACEJIT, lambda: jitted(x), after_run=_tracejit_info(jitted)),
        ],
        notes=["x * 2 + 1 on 16 float32 elements, µs per call (jax.jit includes "
               "block_until_ready on a device array input)"],
    )


# --- 6. transformer block (examples/transformer_block.py) --------------------------------------
def transformer_example():
    """examples/transformer_block.py as a module: the benchmark times that example's own
    model function, so the two cannot drift apart."""
    import importlib.util
    import sys
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples"
    if str(examples) not in sys.path:
        sys.path.insert(0, str(examples))  # it imports its neighbour ``reporting``
    spec = importlib.util.spec_from_file_location("transformer_block",
                                                  examples / "transformer_block.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def transformer_workload(rng):
    example = transformer_example()
    sizes = TRANSFORMER_SIZES
    params = example.init_params(rng, sizes["d_model"], sizes["hidden"])
    x = _normal(rng, sizes["batch"], sizes["seq"], sizes["d_model"])
    heads = sizes["heads"]
    jitted = _tracejit(example.transformer_block)
    return Workload(
        inputs=dict(x=x, heads=heads, **params),
        key="transformer_block",
        title=TITLES["transformer_block"],
        target="≥ 2× NumPy and ≤ jax.jit",
        candidates=[
            Candidate(NUMPY, lambda: example.transformer_block(params, x, heads)),
            Candidate(TRACEJIT, lambda: jitted(params, x, heads),
                      after_run=_tracejit_info(jitted)),
        ],
        notes=["examples/transformer_block.py's pre-norm block (layer norm, causal "
               "multi-head self-attention, residual, layer norm, GELU MLP, residual) on x "
               "(batch 8, seq 128, d_model 256) float32, 8 heads, MLP 1024; torch and jax "
               "run the same computation written in their own API"],
    )


BUILDERS = {
    "gelu": gelu_workload,
    "layer_norm_softmax": norm_workload,
    "mlp_train_step": mlp_workload,
    "rnn": rnn_workload,
    "call_overhead": call_workload,
    "transformer_block": transformer_workload,
}
