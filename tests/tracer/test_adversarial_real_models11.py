"""Adversarial real-model tests, eleventh round: transformer language models written in
NumPy the way public code writes them (picoGPT's GPT-2 forward over nested parameter dicts
passed by ``**block``, numpy ports of llama2.c / nanoGPT / minGPT), run eagerly and through
``jit`` on copies of the same arguments.

Covers what rounds one to ten do not: ``np.split(x, 3, axis=-1)`` into q, k, v and then
into heads by ``list(map(lambda x: np.split(x, n_head, axis=-1), qkv))``, the heads merged
by ``np.hstack`` of a comprehension over ``zip(*heads)``; the causal mask ``(1 -
np.tri(n)) * -1e10``; tanh GELU and layer norm by ``np.var``; weight tying (``x @
wte.T``); greedy, top-k and temperature generation loops that append ``int(np.argmax(
logits[-1]))`` and call the jitted model on a sequence one longer each step (lengths 1,
2, primes, past a bucket); llama-style RMSNorm, RoPE from precomputed cos/sin tables
sliced by position, SwiGLU, grouped-query attention by ``np.repeat``; a KV cache of
preallocated arrays written in place (``cache_k[layer, pos] = k``) by a jitted decode
step; ``-inf`` masks giving all ``-inf`` rows (NaN); float16, float32 and float64.

Each call compares results, dtypes, types and the arguments afterwards with eager NumPy,
and an exception eager raises must be raised too.

Findings (fixed while this round ran; their tests stay as regressions): ``np.tri(n)`` of
a dynamic length specialized the length (a compile per sequence length, so a generation
loop reached ``max_variants`` after eight tokens and ran eagerly from then on); a list of
run-time Python ints as an index (``wte[inputs]`` of picoGPT's list of ids once the ids
changed, ``W[[int(np.argmax(x)), x.argmin()]]``) stopped the trace, so the function ran
eagerly on every later call; a scalar written through a boolean mask after full slices or
an Ellipsis (minGPT-style ``att[:, :, future] = -np.inf`` with ``future`` from a dynamic
length) was a data-dependent shape, so the attention ran eagerly after its first call;
the guard margin of ``x ** 3`` was unbounded wherever ``x`` was negative, so an argmax over
anything after tanh GELU (the next token chosen inside the jitted function) took a
guard-margin exit on every float64 call; ``np.split(x, n_head, axis=-1)`` with ``n_head``
a run-time int failed inside tracejit (an internal error, then eager on every call), and
``np.repeat(k, n_rep, axis=0)`` with ``n_rep`` a run-time int was refused as traced repeats.

Slow or eager, not fixed: picoGPT's list of ids is a new pytree structure at each length,
so a generation loop over a list compiles once per length (arrays are bucketed); a decode
step slicing its KV cache by ``pos`` (``cache_k[layer, :pos + 1]``) makes ``pos`` decide a
shape, one variant per position; a generation loop inside the jitted function unrolls (a
minute of LLVM per compile for 3 tokens of a 2-layer model); nucleus sampling's ``out[order]
= sorted_logits`` after ``argsort(logits / temperature)`` takes a guard-margin exit on every
call (xfail below); ``np.argpartition`` runs eagerly; ``logits[ids] /= penalty`` with
repeated ids runs eagerly (refused, as NumPy writes once); float16 models run eagerly (in
NumPy, picoGPT's ``-1e10`` mask is ``-inf`` in float16 and ``0 * -inf`` makes it NaN).
Tests marked ``xfail(strict=True)`` are minimal reproductions of bugs found this way.
"""


import copy

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for, run_calls

import tracejit as tj

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-4)
TOLERANCE = {np.float64: F64, np.float32: F32}


def no_eager_calls(f):
    assert not f.stats()["eager_calls"], f.explain()


# --- picoGPT-style GPT-2 ------------------------------------------------------------------------
def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def softmax(x):
    shifted = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return shifted / np.sum(shifted, axis=-1, keepdims=True)


def layer_norm(x, g, b, eps=1e-5):
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.var(x, axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(variance + eps) + b


def linear(x, w, b):
    return x @ w + b


def ffn(x, c_fc, c_proj):
    return linear(gelu(linear(x, **c_fc)), **c_proj)


def attention(q, k, v, mask):
    return softmax(q @ k.T / np.sqrt(q.shape[-1]) + mask) @ v


def mha(x, c_attn, c_proj, n_head):
    x = linear(x, **c_attn)
    qkv = np.split(x, 3, axis=-1)
    qkv_heads = list(map(lambda x: np.split(x, n_head, axis=-1), qkv))
    causal_mask = (1 - np.tri(x.shape[0], dtype=x.dtype)) * -1e10
    out_heads = [attention(q, k, v, causal_mask) for q, k, v in zip(*qkv_heads)]
    return linear(np.hstack(out_heads), **c_proj)


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head):
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head)
    return x + ffn(layer_norm(x, **ln_2), **mlp)


def gpt2(inputs, wte, wpe, blocks, ln_f, n_head):
    x = wte[inputs] + wpe[range(len(inputs))]
    for block in blocks:
        x = transformer_block(x, **block, n_head=n_head)
    return layer_norm(x, **ln_f) @ wte.T


def gpt2_params(rng, vocab=23, context=40, width=8, layers=2, dtype=np.float64):
    def dense(fan_in, fan_out):
        return {"w": (rng.standard_normal((fan_in, fan_out)) * 0.3).astype(dtype),
                "b": (rng.standard_normal(fan_out) * 0.1).astype(dtype)}

    def norm():
        return {"g": (1 + 0.1 * rng.standard_normal(width)).astype(dtype),
                "b": (0.1 * rng.standard_normal(width)).astype(dtype)}

    blocks = [{"mlp": {"c_fc": dense(width, 4 * width), "c_proj": dense(4 * width, width)},
               "attn": {"c_attn": dense(width, 3 * width), "c_proj": dense(width, width)},
               "ln_1": norm(), "ln_2": norm()} for _ in range(layers)]
    return {"wte": rng.standard_normal((vocab, width)).astype(dtype),
            "wpe": (rng.standard_normal((context, width)) * 0.3).astype(dtype),
            "blocks": blocks, "ln_f": norm()}


def gpt2_two_heads(inputs, params):
    return gpt2(inputs, **params, n_head=2)


def greedy_ids(model, ids, params, steps):
    """picoGPT's ``generate``: the argmax of the last position appended each step."""
    ids = list(ids)
    for _ in range(steps):
        logits = model(np.array(ids), params)
        ids.append(int(np.argmax(logits[-1])))
    return ids


@pytest.mark.parametrize("dtype", [np.float32])  # (float64: the same paths; CI time)
def test_gpt2_greedy_generation_compiles_once_per_length_bucket(dtype):
    """``(1 - np.tri(n)) * -1e10`` specialized n before: one compile per generated token,
    and from the ninth length on every call ran eagerly (max_variants)."""
    params = gpt2_params(rng_for(1100), dtype=dtype)
    f = jitted(gpt2_two_heads)
    want = greedy_ids(gpt2_two_heads, [1, 5], params, 12)
    got = greedy_ids(f, [1, 5], params, 12)
    assert got == want
    run_calls(gpt2_two_heads, [(np.array(want[:n]), params) for n in (3, 7, 14)],
              **TOLERANCE[dtype])
    no_eager_calls(f)
    assert f.stats()["compiles"] <= 4, f.explain()  # lengths 2, (2, 4], (4, 8], (8, 16]


CAUSAL_MASKS = {
    "additive tri": lambda x: (1 - np.tri(x.shape[0], dtype=x.dtype)) * -1e10 + x,
    "tri below the diagonal": lambda x: np.tri(x.shape[0], x.shape[1], -1) * x,
    "tri keywords": lambda x: np.tri(N=x.shape[0], M=x.shape[1], k=1, dtype=np.float32) + x,
    "boolean tri": lambda x: np.where(np.tri(x.shape[0], dtype=bool), x, -np.inf),
    "eye offset": lambda x: np.eye(x.shape[0], x.shape[1], k=1) * x,
    "int eye": lambda x: np.eye(x.shape[0], dtype=int) + x.astype(int),
    "identity": lambda x: np.identity(x.shape[0]) @ x,
    "identity float32": lambda x: np.identity(x.shape[0], np.float32) @ x,
}


@pytest.mark.parametrize("name", list(CAUSAL_MASKS))
def test_masks_sized_by_a_dynamic_length(name):
    function = CAUSAL_MASKS[name]
    rng = rng_for(1101)
    f = run_calls(function, [(rng.standard_normal((n, n)),) for n in (0, 1, 2, 3, 4, 5, 7, 8, 6)],
                  repeats=1)
    no_eager_calls(f)
    assert f.stats()["compiles"] == 5, f.explain()  # 0, 1, 2, (2, 4], (4, 8]


# --- training: the gradient of the next-token loss through the whole GPT -------------------------
def next_token_loss(params, inputs, targets):
    logits = gpt2(inputs, **params, n_head=2)
    top = logits.max(axis=-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    return -log_probs[np.arange(inputs.shape[0]), targets].mean()


def test_gpt2_loss_gradient_through_jit_matches_eager_and_finite_differences():
    rng = rng_for(1111)
    params = gpt2_params(rng, layers=1)
    value_and_grad = tj.value_and_grad(next_token_loss)
    f = jitted(value_and_grad)
    for steps in (3, 3, 4, 5, 5):
        inputs, targets = rng.integers(0, 23, steps), rng.integers(0, 23, steps)
        want = value_and_grad(copy.deepcopy(params), inputs, targets)
        assert_same(f(copy.deepcopy(params), inputs, targets), want, rtol=1e-8, atol=1e-9)
        nudged = copy.deepcopy(params)
        nudged["blocks"][0]["attn"]["c_attn"]["w"][1, 2] += 1e-6
        slope = (next_token_loss(nudged, inputs, targets) - want[0]) / 1e-6
        np.testing.assert_allclose(want[1]["blocks"][0]["attn"]["c_attn"]["w"][1, 2], slope,
                                   rtol=1e-4, atol=1e-6)
    no_eager_calls(f)


# --- a Python list of run-time ints as an index -------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32])  # (float64: the same paths; CI time)
def test_gpt2_on_a_python_list_of_ids(dtype):
    """picoGPT calls ``gpt2(inputs)`` with ``inputs`` a list of ints; ints seen with a second
    value become run-time inputs, and ``wte[inputs]`` of them was 'a traced array converted
    to a NumPy array': every later call ran eagerly."""
    rng = rng_for(1102)
    params = gpt2_params(rng, dtype=dtype)
    f = run_calls(gpt2_two_heads, [([int(i) for i in rng.integers(0, 23, n)], params)
                                   for n in (1, 2, 3, 3, 5)], **TOLERANCE[dtype])
    no_eager_calls(f)


def take_listed(ids, table):
    return table[ids] * 2


def take_pair(a, b, table):
    return table[[a, b, 0]]


def take_grid(a, b, table):
    return table[[a, b], [b % 3, 1]]


def take_nested(a, b, table):
    return table[[[a, b], [b, a]]]


def take_extremes(x, table):
    return table[[int(np.argmax(x)), x.argmin()]]


LISTED_INDEX_CASES = {
    "ids": (take_listed, lambda rng, table: [
        ([int(i) for i in rng.integers(0, 7, n)], table) for n in (1, 2, 3, 3, 3)] + [
        ([1, 9, 2], table), ([1, -2, 2], table), ([0, -8, 1], table)]),
    "pair": (take_pair, lambda rng, table: [(a, b, table) for a, b in (
        (1, 2), (3, 4), (5, 6), (-1, 0), (7, 0), (-8, 0))]),
    "grid": (take_grid, lambda rng, table: [(a, b, table) for a, b in (
        (1, 2), (3, 4), (5, 6), (-1, 0), (7, 0))]),
    "nested": (take_nested, lambda rng, table: [(a, b, table) for a, b in (
        (1, 2), (3, 4), (5, 6), (-1, 0), (7, 0))]),
    "argmax and argmin": (take_extremes, lambda rng, table: [
        (rng.standard_normal(n), table) for n in (4, 5, 6, 7, 3)]),
}


@pytest.mark.parametrize("name", list(LISTED_INDEX_CASES))
def test_a_list_of_run_time_ints_as_an_index(name):
    function, argument_sets = LISTED_INDEX_CASES[name]
    rng = rng_for(1103)
    f = run_calls(function, argument_sets(rng, rng.standard_normal((7, 3))))
    assert "untraceable" not in f.stats()["eager_calls"], f.explain()


# --- a causal mask written through leading slices ------------------------------------------------
def masked_attention_scores(x, w_qkv, n_head):
    """nanoGPT-style heads over a batch, the mask written in place as minGPT's numpy ports
    do (``att[:, :, mask] = -np.inf``), by einsum."""
    batch, steps, width = x.shape
    q, k, v = np.split(x @ w_qkv, 3, axis=-1)
    size = width // n_head
    q, k, v = [part.reshape(batch, steps, n_head, size).swapaxes(1, 2) for part in (q, k, v)]
    att = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(size)
    future = np.tril(np.ones((steps, steps))) == 0
    att[:, :, future] = -np.inf
    att = softmax(att)
    return np.einsum("bhqk,bhkd->bhqd", att, v).swapaxes(1, 2).reshape(batch, steps, width)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_causal_mask_written_through_leading_slices(dtype):
    """``att[:, :, future] = -np.inf`` with ``future`` built from a dynamic length was 'a
    boolean mask computed from traced data': every call after the first ran eagerly."""
    rng = rng_for(1104)
    w_qkv = (rng.standard_normal((8, 24)) * 0.4).astype(dtype)
    f = run_calls(lambda x, w: masked_attention_scores(x, w, 4),
                  [(rng.standard_normal((b, t, 8)).astype(dtype), w_qkv)
                   for b, t in ((1, 1), (2, 3), (2, 5), (3, 5), (2, 7), (1, 8), (2, 13))],
                  **TOLERANCE[dtype])
    no_eager_calls(f)


def future(steps):
    return np.tril(np.ones((steps, steps))) == 0


def fill_heads(a):
    a[:, :, future(a.shape[-1])] = -np.inf
    return a


def fill_after_ellipsis(a):
    a[..., future(a.shape[-1])] = -1e9
    return a


def fill_middle_axis(a):
    a[:, a[0, :, 0] > 0] = 7
    return a


def fill_ints(a):
    a[:, future(a.shape[-1])] = 5
    return a


def fill_ints_with_nan(a):
    a[:, future(a.shape[-1])] = np.nan  # ValueError in NumPy
    return a


def fill_after_ellipsis_by_a_decision(a):
    a[..., a.sum() > 0] = 3.0
    return a


def fill_mismatched(a):
    a[:, future(a.shape[-1] + 1)] = 0.0  # IndexError in NumPy
    return a


def fill_from_an_array(a):
    a[:, future(a.shape[-1])] = np.arange(a.shape[0] * (a.shape[1] * (a.shape[1] - 1) // 2))
    return a


def fill_float32_past_its_range(a):
    a[:, :, future(a.shape[-1])] = 1e300
    return a


def fill_bools(a):
    a[:, ~a[0]] = False
    return a


MASK_FILLS = {
    "heads": (fill_heads, lambda t: (2, 3, t, t), np.float64),
    "after an ellipsis": (fill_after_ellipsis, lambda t: (2, t, t), np.float64),
    "middle axis": (fill_middle_axis, lambda t: (2, t, 3), np.float64),
    "ints": (fill_ints, lambda t: (2, t, t), np.int64),
    "NaN into ints": (fill_ints_with_nan, lambda t: (2, t, t), np.int64),
    "0-d decision after an ellipsis": (fill_after_ellipsis_by_a_decision, lambda t: (2, t),
                                       np.float64),
    "mismatched mask": (fill_mismatched, lambda t: (2, t, t), np.float64),
    "an array of values": (fill_from_an_array, lambda t: (2, t, t), np.float64),
    "float32 past its range": (fill_float32_past_its_range, lambda t: (1, 2, t, t),
                               np.float32),
    "bools": (fill_bools, lambda t: (2, t), np.bool_),
}


@pytest.mark.parametrize("name", list(MASK_FILLS))
def test_a_mask_written_after_slices_or_an_ellipsis(name):
    function, shape, dtype = MASK_FILLS[name]
    rng = rng_for(1105)

    def arguments(steps):
        a = rng.standard_normal(shape(steps)) * 3
        a = a > 0.3 if dtype is np.bool_ else a.astype(dtype)
        return lambda: (a.copy(),)

    f = run_calls(function, [arguments(steps) for steps in (1, 3, 3, 5, 7, 0)])
    no_internal_errors(f)
    if name not in ("NaN into ints", "mismatched mask", "an array of values"):
        assert "untraceable" not in f.stats()["eager_calls"], f.explain()


def fill_through_an_empty_index(a):
    a[()] = 2.0
    return a


def test_an_empty_index_write_is_not_a_mask():
    rng = rng_for(1106)
    f = run_calls(fill_through_an_empty_index, [(rng.standard_normal(n),) for n in (3, 3, 5)])
    no_internal_errors(f)


# --- the next token decided inside the compiled function ----------------------------------------
def next_token(inputs, params):
    logits = gpt2(inputs, **params, n_head=2)
    return int(np.argmax(logits[-1]))


def argmax_after_a_cube(x, w_in, w_out):
    return int(np.argmax(((x @ w_in) ** 3 @ w_out)[-1]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_next_token_argmax_through_a_gelu_compiles(dtype):
    """The guard margin of ``x ** 3`` was unbounded at every negative ``x``, so the
    discontinuity check of an argmax over anything after tanh GELU always failed: the
    next-token function ran eagerly on every call."""
    rng = rng_for(1107)
    params = gpt2_params(rng, layers=1, dtype=dtype)
    f = run_calls(next_token, [(rng.integers(0, 23, n), params) for n in (3, 3, 4, 5)])
    assert "guard margin" not in f.stats()["eager_calls"], f.explain()
    w_in, w_out = (rng.standard_normal((8, 16)) * 0.3).astype(dtype), (
        rng.standard_normal((16, 8)) * 0.3).astype(dtype)
    f = run_calls(argmax_after_a_cube, [(rng.standard_normal((n, 8)).astype(dtype), w_in, w_out)
                                        for n in (3, 3, 4, 5)])
    assert "guard margin" not in f.stats()["eager_calls"], f.explain()


# --- llama-style: RMSNorm, RoPE tables sliced by position, SwiGLU, grouped-query attention --------
def rms_norm(x, weight, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x * (1.0 / (1.0 + np.exp(-x)))


def rope_tables(head_dim, max_len, dtype, theta=10000.0):
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2)[: head_dim // 2] / head_dim)
    angles = np.outer(np.arange(max_len), freqs)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def rotate_half(x, cos, sin):
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    cos, sin = np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
    return x * cos + np.concatenate([-second, first], axis=-1) * sin


def rotate_pairs(x, cos, sin):
    """llama2.c's interleaved pairs, written into a new array in place."""
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def llama_prefill(tokens, params, cos, sin, start, n_heads=4, n_kv_heads=2):
    x = params["tok_embeddings"][tokens]
    steps, width = x.shape
    size = width // n_heads
    cos, sin = cos[start:start + steps], sin[start:start + steps]
    mask = np.triu(np.full((steps, steps), float("-inf")), k=1)
    for layer in params["layers"]:
        h = rms_norm(x, layer["attention_norm"])
        q = (h @ layer["wq"]).reshape(steps, n_heads, size).transpose(1, 0, 2)
        k = (h @ layer["wk"]).reshape(steps, n_kv_heads, size).transpose(1, 0, 2)
        v = (h @ layer["wv"]).reshape(steps, n_kv_heads, size).transpose(1, 0, 2)
        q, k = rotate_half(q, cos, sin), rotate_half(k, cos, sin)
        k = np.repeat(k, n_heads // n_kv_heads, axis=0)
        v = np.repeat(v, n_heads // n_kv_heads, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(size) + mask
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        x = x + (weights @ v).transpose(1, 0, 2).reshape(steps, width) @ layer["wo"]
        h = rms_norm(x, layer["ffn_norm"])
        x = x + (silu(h @ layer["w1"]) * (h @ layer["w3"])) @ layer["w2"]
    return rms_norm(x, params["norm"]) @ params["tok_embeddings"].T


def decode_step(token, pos, params, cache_k, cache_v, cos, sin, n_heads=4, n_kv_heads=2):
    """One token through a KV cache of preallocated arrays written in place."""
    x = params["tok_embeddings"][token]
    width = x.shape[-1]
    size = width // n_heads
    for index, layer in enumerate(params["layers"]):
        h = rms_norm(x, layer["attention_norm"])
        q = (h @ layer["wq"]).reshape(n_heads, size)
        k = (h @ layer["wk"]).reshape(n_kv_heads, size)
        v = (h @ layer["wv"]).reshape(n_kv_heads, size)
        q = rotate_pairs(q, cos[pos], sin[pos])
        k = rotate_pairs(k, cos[pos], sin[pos])
        cache_k[index, pos] = k
        cache_v[index, pos] = v
        keys = np.repeat(cache_k[index, :pos + 1], n_heads // n_kv_heads, axis=1)
        values = np.repeat(cache_v[index, :pos + 1], n_heads // n_kv_heads, axis=1)
        scores = np.einsum("hd,thd->ht", q, keys) / np.sqrt(size)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = weights / weights.sum(axis=-1, keepdims=True)
        x = x + np.einsum("ht,thd->hd", weights, values).reshape(width) @ layer["wo"]
        h = rms_norm(x, layer["ffn_norm"])
        x = x + (silu(h @ layer["w1"]) * (h @ layer["w3"])) @ layer["w2"]
    return rms_norm(x, params["norm"]) @ params["tok_embeddings"].T


def llama_params(rng, dtype, vocab=19, width=8, hidden=12, layers=2, n_kv_heads=2, n_heads=4):
    def matrix(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(dtype)

    def gain():
        return (1 + 0.1 * rng.standard_normal(width)).astype(dtype)

    kv_width = n_kv_heads * (width // n_heads)
    return {"tok_embeddings": matrix(vocab, width), "norm": gain(),
            "layers": [{"attention_norm": gain(), "ffn_norm": gain(), "wq": matrix(width, width),
                        "wk": matrix(width, kv_width), "wv": matrix(width, kv_width),
                        "wo": matrix(width, width), "w1": matrix(width, hidden),
                        "w2": matrix(hidden, width), "w3": matrix(width, hidden)}
                       for _ in range(layers)]}


@pytest.mark.parametrize("dtype", [np.float32])  # (float64: the same paths; CI time)
def test_llama_prefill_over_lengths_and_start_positions(dtype):
    rng = rng_for(1108)
    params = llama_params(rng, dtype)
    cos, sin = rope_tables(2, 40, dtype)

    def prefill(tokens, params, start):
        return llama_prefill(tokens, params, cos, sin, start)

    f = run_calls(prefill, [(rng.integers(0, 19, n), params, start)
                            for n, start in ((1, 0), (2, 0), (3, 0), (3, 2), (5, 4), (8, 0),
                                             (7, 11))], **TOLERANCE[dtype])
    no_eager_calls(f)


@pytest.mark.parametrize("dtype", [np.float32])  # (float64: the same paths; CI time)
def test_llama_decode_steps_fill_the_kv_cache_in_place(dtype):
    """Greedy decoding through a jitted step: the caches written at ``pos`` must match
    NumPy's after every step. ``cache_k[index, :pos + 1]`` makes ``pos`` decide a shape,
    so each position is its own variant (and past ``max_variants`` the step runs
    eagerly): only the values are checked here."""
    rng = rng_for(1109)
    params = llama_params(rng, dtype)
    cos, sin = rope_tables(2, 16, dtype)

    def step(token, pos, params, cache_k, cache_v):
        return decode_step(token, pos, params, cache_k, cache_v, cos, sin)

    f = jitted(step)
    eager_caches = [np.zeros((2, 16, 2, 2), dtype) for _ in range(2)]
    jit_caches = [cache.copy() for cache in eager_caches]
    eager_token = jit_token = 3
    for pos in range(10):
        want = step(eager_token, pos, params, *eager_caches)
        got = f(jit_token, pos, params, *jit_caches)
        assert_same(got, want, **TOLERANCE[dtype])
        assert_same(jit_caches, eager_caches, where="caches", **TOLERANCE[dtype])
        eager_token, jit_token = int(np.argmax(want)), int(np.argmax(got))
    no_internal_errors(f)


# --- not fixed: minimal reproductions -------------------------------------------------------------
def scatter_through_a_ranking(logits):
    """Nucleus sampling puts the filtered logits back in vocabulary order through
    ``out[order] = sorted_logits``, ``order`` the argsort of ``logits / temperature``."""
    order = np.argsort(logits / 0.7)
    out = np.zeros_like(logits)
    out[order] = 1.0
    return out


def test_a_scatter_through_the_argsort_of_a_computed_value_compiles():
    """The guard that the argsort's positions do not repeat
    (tracer/indexing._check_unique_positions) had an unbounded margin when the sorted
    values are inexact: every call took a guard-margin exit (xfail until round 18b's
    margin_rules._same_element and _scatter_add)."""
    rng = rng_for(1110)
    f = run_calls(scatter_through_a_ranking, [(rng.standard_normal(10),) for _ in range(3)])
    no_eager_calls(f)


# --- the head count as an argument ---------------------------------------------------------------
def gpt2_heads_given(inputs, params, n_head):
    return gpt2(inputs, **params, n_head=n_head)


def heads_stacked(x, n_head):
    return np.stack(np.split(x, n_head, axis=-1), axis=0).sum(axis=0)


def test_a_head_count_that_changes_between_calls():
    """``np.split(x, n_head, axis=-1)`` with ``n_head`` a run-time int (seen with a second
    value) failed inside tracejit ('len() of unsized object'): an internal error, and every
    later call ran eagerly. The count decides shapes, so it is specialized."""
    rng = rng_for(1112)
    params = gpt2_params(rng, layers=1)
    f = run_calls(gpt2_heads_given, [(rng.integers(0, 23, n), params, heads) for n, heads in (
        (3, 2), (3, 4), (4, 2), (4, 8), (5, 3), (5, 1))], **F64)
    no_internal_errors(f)
    f = run_calls(heads_stacked, [(rng.standard_normal((n, 8)), heads) for n, heads in (
        (3, 2), (3, 4), (5, 2), (5, 3), (6, 8))])
    no_internal_errors(f)


def grouped_query_scores(q, k, n_rep):
    """Keys shared by ``n_rep`` query heads each, the count passed in."""
    return q @ np.repeat(k, n_rep, axis=0).transpose(0, 2, 1)


def repeated_rows(k, n_rep):
    return np.repeat(k, n_rep, axis=0)


def test_a_repeat_count_that_changes_between_calls():
    """``np.repeat(k, n_rep, axis=0)`` with ``n_rep`` a run-time int was refused as 'traced
    repeats' (data-dependent shape): every call after the count changed ran eagerly."""
    rng = rng_for(1113)
    f = run_calls(grouped_query_scores, [
        (rng.standard_normal((kv * rep, 3, 2)), rng.standard_normal((kv, 3, 2)), rep)
        for kv, rep in ((2, 1), (2, 2), (1, 4), (2, 4), (4, 2))])
    assert "untraceable" not in f.stats()["eager_calls"], f.explain()
    f = run_calls(repeated_rows, [(rng.standard_normal((3, 2)), rep) for rep in (1, 2, 3, 0, -1)])
    no_internal_errors(f)
