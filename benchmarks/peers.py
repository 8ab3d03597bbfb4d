"""The same workloads written for the peers: torch (eager and torch.compile), jax.jit, numba
and numexpr.

A peer that is not importable is left out silently. A peer that imports but cannot build
its candidate is left out with the reason in ``Workload.skipped``. Each builder reads the
workload's own input arrays (``Workload.inputs``), so every candidate computes on the same
data; torch tensors share memory with them (``torch.from_numpy``), JAX gets device copies
made once, before timing.

Which peer runs where (and why not elsewhere):

* torch eager and torch.compile: every workload (not torch.compile for the RNN, like
  DESIGN.md §6: per-length recompiles / graph breaks over a Python loop);
* jax.jit: every workload (the RNN with ``lax.scan`` per sequence);
* numba: the elementwise, row-reduction and RNN loops and the call overhead (not the MLP
  step or the transformer block: numba would only call the same BLAS through ``np.dot``);
* numexpr: gelu and the call overhead (it cannot reduce over rows or multiply matrices).
"""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np

from .harness import Candidate
from .workloads import LEARNING_RATE, affine_small

_GELU_C = math.sqrt(2.0 / math.pi)


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# --- torch ----------------------------------------------------------------------------------
def _torch_functions(key):
    """The torch version of a workload's computation, taking torch tensors."""
    import torch
    import torch.nn.functional as F

    if key == "gelu":
        return lambda x, w, b: F.gelu(x * w + b, approximate="tanh")
    if key == "layer_norm_softmax":
        return lambda x: torch.softmax(F.layer_norm(x, x.shape[-1:], eps=1e-5), dim=-1)
    if key == "mlp_train_step":
        return lambda x, labels, w1, b1, w2, b2: F.cross_entropy(
            torch.relu(x @ w1 + b1) @ w2 + b2, labels)
    if key == "call_overhead":
        return affine_small
    raise KeyError(key)


def torch_mlp_step(inputs, compiled):
    """An SGD step with autograd: the loss (compiled with torch.compile when ``compiled``;
    AOTAutograd then compiles its backward too), ``backward()``, an out-of-place update."""
    import torch

    loss_function = _torch_functions("mlp_train_step")
    if compiled:
        loss_function = torch.compile(loss_function)
    x, labels = torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["labels"])
    params = [torch.from_numpy(inputs[name]).clone().requires_grad_()
              for name in ("w1", "b1", "w2", "b2")]

    def step():
        for param in params:
            param.grad = None
        loss = loss_function(x, labels, *params)
        loss.backward()
        with torch.no_grad():
            return (loss.detach(), *(param - LEARNING_RATE * param.grad for param in params))
    return step


PARAMETER_NAMES = ("norm1_weight", "norm1_bias", "qkv_weight", "qkv_bias", "out_weight",
                   "out_bias", "norm2_weight", "norm2_bias", "mlp_in_weight", "mlp_in_bias",
                   "mlp_out_weight", "mlp_out_bias")


def transformer_block(api, params, x, heads):
    """examples/transformer_block.py's block written against a peer's ``api``: a namespace
    with ``split3`` (three equal parts of the last axis), ``arange``, ``where``,
    ``swapaxes``, ``layer_norm(v, weight, bias)``, ``softmax`` (last axis) and ``gelu``
    (tanh form)."""
    def linear(value, name):
        return value @ params[name + "_weight"] + params[name + "_bias"]

    batch, seq, d_model = x.shape
    size = d_model // heads

    def split(part):
        return api.swapaxes(part.reshape(batch, seq, heads, size), 1, 2)

    normed = api.layer_norm(x, params["norm1_weight"], params["norm1_bias"])
    query, key, value = (split(part) for part in api.split3(linear(normed, "qkv")))
    scores = query @ api.swapaxes(key, -1, -2) / math.sqrt(size)
    positions = api.arange(seq)
    scores = api.where(positions[:, None] >= positions[None, :], scores, -math.inf)
    attended = api.swapaxes(api.softmax(scores) @ value, 1, 2).reshape(batch, seq, d_model)
    x = x + linear(attended, "out")
    normed = api.layer_norm(x, params["norm2_weight"], params["norm2_bias"])
    return x + linear(api.gelu(linear(normed, "mlp_in")), "mlp_out")


def _torch_transformer(inputs):
    import torch
    import torch.nn.functional as F

    class TorchApi:
        arange, where, swapaxes = torch.arange, torch.where, torch.transpose

        def split3(value):
            return torch.split(value, value.shape[-1] // 3, dim=-1)

        def layer_norm(value, weight, bias):
            return F.layer_norm(value, value.shape[-1:], weight, bias, eps=1e-5)

        def softmax(value):
            return torch.softmax(value, dim=-1)

        def gelu(value):
            return F.gelu(value, approximate="tanh")

    def block(x, *weights):
        return transformer_block(TorchApi, dict(zip(PARAMETER_NAMES, weights)), x,
                                 inputs["heads"])

    compiled = torch.compile(block)
    x = torch.from_numpy(inputs["x"])
    weights = [torch.from_numpy(inputs[name]) for name in PARAMETER_NAMES]
    return [Candidate("torch eager", lambda: block(x, *weights)),
            Candidate("torch.compile", lambda: compiled(x, *weights))]


def _jax_transformer(inputs):
    import jax
    import jax.numpy as jnp

    class JaxApi:
        arange, where, swapaxes = jnp.arange, jnp.where, jnp.swapaxes

        def split3(value):
            return jnp.split(value, 3, axis=-1)

        def layer_norm(value, weight, bias):
            centered = value - jnp.mean(value, axis=-1, keepdims=True)
            variance = jnp.mean(centered * centered, axis=-1, keepdims=True)
            return centered / jnp.sqrt(variance + 1e-5) * weight + bias

        def softmax(value):
            return jax.nn.softmax(value, axis=-1)

        def gelu(value):
            return jax.nn.gelu(value, approximate=True)

    heads = inputs["heads"]
    block = jax.jit(lambda x, params: transformer_block(JaxApi, params, x, heads))
    params = {name: jax.device_put(inputs[name]) for name in PARAMETER_NAMES}
    x = jax.device_put(inputs["x"])
    return [Candidate("jax.jit", lambda: block(x, params).block_until_ready())]


def torch_candidates(workload):
    if not _installed("torch"):
        return []
    import torch

    key, inputs = workload.key, workload.inputs
    if key == "transformer_block":
        return _torch_transformer(inputs)
    if key == "mlp_train_step":
        return [Candidate("torch eager", torch_mlp_step(inputs, compiled=False),
                          note="autograd"),
                Candidate("torch.compile", torch_mlp_step(inputs, compiled=True),
                          note="compiled loss; AOTAutograd backward")]
    if key == "rnn":
        return [Candidate("torch eager", _torch_rnn(inputs), note="one sequence at a time")]
    function = _torch_functions(key)
    tensors = [torch.from_numpy(value) for value in inputs.values()]
    compiled = torch.compile(function)
    return [Candidate("torch eager", lambda: function(*tensors)),
            Candidate("torch.compile", lambda: compiled(*tensors))]


def _torch_rnn(inputs):
    import torch

    sequences = [torch.from_numpy(sequence) for sequence in inputs["sequences"]]
    wx, wh, b = (torch.from_numpy(inputs[name]) for name in ("wx", "wh", "b"))

    def run():
        finals = []
        for sequence in sequences:
            h = torch.zeros(wh.shape[0])
            for x_t in sequence:
                h = torch.tanh(x_t @ wx + h @ wh + b)
            finals.append(h)
        return torch.stack(finals)
    return run


# --- JAX -------------------------------------------------------------------------------------
def jax_mlp_step(inputs):
    """``jax.jit`` of value_and_grad of the loss plus the SGD update, one compiled step."""
    import jax
    import jax.numpy as jnp

    def loss(params, x, labels):
        w1, b1, w2, b2 = params
        logits = jax.nn.relu(x @ w1 + b1) @ w2 + b2
        log_probs = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=-1))

    @jax.jit
    def train_step(params, x, labels):
        value, grads = jax.value_and_grad(loss)(params, x, labels)
        return value, *(param - LEARNING_RATE * grad for param, grad in zip(params, grads))

    params = tuple(jnp.asarray(inputs[name]) for name in ("w1", "b1", "w2", "b2"))
    x, labels = jnp.asarray(inputs["x"]), jnp.asarray(inputs["labels"])
    return lambda: jax.block_until_ready(train_step(params, x, labels))


def jax_candidates(workload):
    if not _installed("jax"):
        return []
    import jax
    import jax.numpy as jnp

    key, inputs = workload.key, workload.inputs
    if key == "transformer_block":
        return _jax_transformer(inputs)
    if key == "mlp_train_step":
        return [Candidate("jax.jit", jax_mlp_step(inputs), note="jit(value_and_grad) + SGD")]
    if key == "rnn":
        return [_jax_rnn(inputs)]
    if key == "gelu":
        def function(x, w, b):
            return jax.nn.gelu(x * w + b, approximate=True)
    elif key == "layer_norm_softmax":
        def function(x):
            centered = x - jnp.mean(x, axis=-1, keepdims=True)
            variance = jnp.mean(centered * centered, axis=-1, keepdims=True)
            return jax.nn.softmax(centered / jnp.sqrt(variance + 1e-5), axis=-1)
    else:
        function = affine_small
    jitted = jax.jit(function)
    arrays = [jax.device_put(value) for value in inputs.values()]
    return [Candidate("jax.jit", lambda: jitted(*arrays).block_until_ready())]


def _jax_rnn(inputs):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def final_state(sequence, wx, wh, b):
        def step(h, x_t):
            return jnp.tanh(x_t @ wx + h @ wh + b), None
        h, _ = jax.lax.scan(step, jnp.zeros(wh.shape[0], sequence.dtype), sequence)
        return h

    sequences = [jax.device_put(sequence) for sequence in inputs["sequences"]]
    weights = [jax.device_put(inputs[name]) for name in ("wx", "wh", "b")]

    def run():
        return jax.block_until_ready([final_state(sequence, *weights)
                                      for sequence in sequences])

    def stacked(finals):
        return np.stack([np.asarray(h) for h in finals])

    def info():
        distinct = len({len(sequence) for sequence in sequences})
        size = getattr(final_state, "_cache_size", None)
        return dict(compiles=size() if size else distinct)
    return Candidate("jax.jit", run, result=stacked, after_run=info,
                     note="lax.scan per sequence, one compile per length")


# --- numba -----------------------------------------------------------------------------------
def numba_candidates(workload):
    if workload.key in ("mlp_train_step", "transformer_block") or not _installed("numba"):
        return []
    import numba

    key, inputs = workload.key, workload.inputs
    if key == "gelu":
        kernel = _numba_gelu(numba)
        x, w, b = inputs.values()
        return [Candidate("numba", lambda: kernel(x, w, b), note="parallel prange over rows")]
    if key == "layer_norm_softmax":
        kernel = _numba_norm_softmax(numba)
        x = inputs["x"]
        return [Candidate("numba", lambda: kernel(x), note="parallel prange over rows")]
    if key == "rnn":
        kernel = _numba_rnn(numba)
        sequences = inputs["sequences"]
        wx, wh, b = (inputs[name] for name in ("wx", "wh", "b"))
        return [Candidate("numba", lambda: np.stack([kernel(sequence, wx, wh, b)
                                                     for sequence in sequences]),
                          note="loops, one sequence at a time, 1 compile")]
    kernel = numba.njit(affine_small)
    x = inputs["x"]
    return [Candidate("numba", lambda: kernel(x))]


def _numba_gelu(numba):
    c, k, half, one = (np.float32(value) for value in (_GELU_C, 0.044715, 0.5, 1.0))

    @numba.njit(parallel=True)
    def gelu_affine(x, w, b):
        out = np.empty_like(x)
        for i in numba.prange(x.shape[0]):
            for j in range(x.shape[1]):
                v = x[i, j] * w[j] + b[j]
                out[i, j] = half * v * (one + np.tanh(c * (v + k * v * v * v)))
        return out
    return gelu_affine


def _numba_norm_softmax(numba):
    eps = np.float32(1e-5)

    @numba.njit(parallel=True)
    def layer_norm_softmax(x):
        rows, columns = x.shape
        out = np.empty_like(x)
        for i in numba.prange(rows):
            mean = np.float32(0.0)
            for j in range(columns):
                mean += x[i, j]
            mean /= columns
            variance = np.float32(0.0)
            for j in range(columns):
                variance += (x[i, j] - mean) ** 2
            scale = np.float32(1.0) / np.sqrt(variance / columns + eps)
            peak = -np.inf
            for j in range(columns):
                out[i, j] = (x[i, j] - mean) * scale
                peak = max(peak, out[i, j])
            total = np.float32(0.0)
            for j in range(columns):
                out[i, j] = np.exp(out[i, j] - peak)
                total += out[i, j]
            for j in range(columns):
                out[i, j] /= total
        return out
    return layer_norm_softmax


def _numba_rnn(numba):
    @numba.njit
    def final_state(sequence, wx, wh, b):
        steps, features = sequence.shape
        hidden = wh.shape[0]
        h = np.zeros(hidden, np.float32)
        pre = np.empty(hidden, np.float32)
        for t in range(steps):
            pre[:] = b
            for k in range(features):
                value = sequence[t, k]
                for j in range(hidden):
                    pre[j] += value * wx[k, j]
            for k in range(hidden):
                value = h[k]
                for j in range(hidden):
                    pre[j] += value * wh[k, j]
            for j in range(hidden):
                h[j] = np.tanh(pre[j])
        return h
    return final_state


# --- numexpr ---------------------------------------------------------------------------------
def numexpr_candidates(workload):
    if workload.key not in ("gelu", "call_overhead") or not _installed("numexpr"):
        return []
    import numexpr

    variables = dict(workload.inputs)
    if workload.key == "gelu":
        # Float literals would make numexpr compute (and return) float64; float32 scalars
        # keep it in float32 like everyone else.
        variables.update(half=np.float32(0.5), one=np.float32(1.0), c=np.float32(_GELU_C),
                         k=np.float32(0.044715))
        expression = "half * (x * w + b) * (one + tanh(c * ((x * w + b) + k * (x * w + b) ** 3)))"
    else:
        expression = "x * 2 + 1"
    return [Candidate("numexpr", lambda: numexpr.evaluate(expression, local_dict=variables),
                      note=f"{numexpr.nthreads} threads" if workload.key == "gelu" else "")]


PEERS = (torch_candidates, jax_candidates, numba_candidates, numexpr_candidates)
NOT_RUN = {"rnn": {"torch.compile": "not run, as in DESIGN.md §6 (recompiles per length)",
                   "numexpr": "no matmul"},
           "layer_norm_softmax": {"numexpr": "cannot reduce over rows"},
           "mlp_train_step": {"numba": "only BLAS calls + hand-written backward",
                              "numexpr": "no matmul"},
           "transformer_block": {"numba": "only BLAS calls around its loops",
                                 "numexpr": "no matmul"}}


def same_threads():
    """Put every library's thread pool on as many threads as tracejit's (its
    ``TRACEJIT_NUM_THREADS``, or the cores this process may use) and return what each one
    then has, ``{library: threads}``: NumPy's OpenBLAS (threadpoolctl), torch's intra-op
    pool (``torch.set_num_threads``) and tracejit's pool. XLA's CPU pool is one thread per
    core and is fixed when jax starts; its count is read off the process's threads
    (``tf_XLAEigen``) by ``xla_threads`` once jax has run. So no row of a workload is timed
    with more threads than another: a workload's candidates share one process.

    >>> counts = same_threads()
    >>> counts["tracejit"] >= 1 and set(counts) >= {"tracejit"}
    True
    """
    from tracejit.codegen.parallel import thread_count
    from tracejit.runtime.config import configure_codegen

    configure_codegen()  # TRACEJIT_NUM_THREADS, as the runtime reads it
    threads = thread_count()
    counts = {"tracejit": threads}
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        threadpool_limits(threads, user_api="blas")
        blas = [pool["num_threads"] for pool in threadpool_info()
                if pool.get("user_api") == "blas" and "numpy" in pool.get("filepath", "")]
        if blas:
            counts["OpenBLAS"] = blas[0]
    if _installed("torch"):
        torch = importlib.import_module("torch")
        torch.set_num_threads(threads)
        counts["torch"] = torch.get_num_threads()
    return counts


def xla_threads():
    """The threads of XLA's CPU pool in this process (Linux: their names), or None."""
    try:
        names = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
    except OSError:
        return None
    return sum(name.startswith("tf_XLAEigen") for name in names) or None


def candidates_for(workload):
    """The peer candidates for ``workload``; peers that fail to build go to ``skipped``."""
    candidates = []
    for build in PEERS:
        try:
            candidates.extend(build(workload))
        except ImportError:
            continue  # a peer that is not importable is left out silently
        except Exception as error:  # installed but broken: say so in the report
            peer = build.__name__.removesuffix("_candidates")
            workload.skipped[peer] = f"{type(error).__name__}: {error}"
    for peer, reason in NOT_RUN.get(workload.key, {}).items():
        if _installed(peer.partition(".")[0]):
            workload.skipped.setdefault(peer, reason)
    return candidates
