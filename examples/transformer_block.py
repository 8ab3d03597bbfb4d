"""A pre-norm transformer block, compiled once per sequence-length bucket.

    python examples/transformer_block.py [--quick] [--batch N] [--d-model N] [--heads N]

The block (GPT-2 style): layer norm -> multi-head causal self-attention -> residual ->
layer norm -> MLP with GELU -> residual, on ``(batch, seq, d_model)`` float32 written
with plain NumPy (reshape/transpose/matmul and ``nn.softmax``). The same function runs
eagerly as the baseline and under ``jit``. The sequence axis is bucketed by powers of two
from the first call (``buckets={"x": {1: "pow2"}}``), so the lengths below compile
once per bucket and reuse that code for every other length in the bucket.
"""

import argparse
import math
import sys
import time

import numpy as np
from reporting import median_ms, print_cache_list

from tracejit import jit, nn
from tracejit.tracer.shapes import pow2_bucket


def init_params(rng, d_model, hidden):
    def weight(fan_in, fan_out):
        return (rng.normal(size=(fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)

    def zeros(size):
        return np.zeros(size, dtype=np.float32)

    return {
        "norm1_weight": np.ones(d_model, dtype=np.float32), "norm1_bias": zeros(d_model),
        "qkv_weight": weight(d_model, 3 * d_model), "qkv_bias": zeros(3 * d_model),
        "out_weight": weight(d_model, d_model), "out_bias": zeros(d_model),
        "norm2_weight": np.ones(d_model, dtype=np.float32), "norm2_bias": zeros(d_model),
        "mlp_in_weight": weight(d_model, hidden), "mlp_in_bias": zeros(hidden),
        "mlp_out_weight": weight(hidden, d_model), "mlp_out_bias": zeros(d_model),
    }


def split_heads(x, heads):
    """(batch, seq, d_model) -> (batch, heads, seq, head_size)"""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, heads, d_model // heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(batch, heads, seq, head_size) -> (batch, seq, d_model)"""
    batch, heads, seq, head_size = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * head_size)


def causal_self_attention(params, x, heads):
    qkv = nn.linear(x, params["qkv_weight"], params["qkv_bias"])
    query, key, value = (split_heads(part, heads) for part in np.split(qkv, 3, axis=-1))
    # math.sqrt: np.sqrt gives a float64 NumPy scalar, which (NumPy 2) makes the scores
    # and everything after them float64
    scores = query @ key.transpose(0, 1, 3, 2) / math.sqrt(query.shape[-1])
    positions = np.arange(x.shape[1])
    causal = positions[:, None] >= positions[None, :]  # position i sees positions <= i
    scores = np.where(causal, scores, -np.inf)
    attended = nn.softmax(scores, axis=-1) @ value
    return nn.linear(merge_heads(attended), params["out_weight"], params["out_bias"])


def transformer_block(params, x, heads):
    normed = nn.layer_norm(x, params["norm1_weight"], params["norm1_bias"])
    x = x + causal_self_attention(params, normed, heads)
    normed = nn.layer_norm(x, params["norm2_weight"], params["norm2_bias"])
    hidden = nn.gelu(nn.linear(normed, params["mlp_in_weight"], params["mlp_in_bias"]))
    return x + nn.linear(hidden, params["mlp_out_weight"], params["mlp_out_bias"])


compiled_block = jit(transformer_block, buckets={"x": {1: "pow2"}})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    parser.add_argument("--batch", type=int, help="sequences per batch [8; 2 with --quick]")
    parser.add_argument("--d-model", type=int, help="model width [256; 64 with --quick]")
    parser.add_argument("--heads", type=int, help="attention heads [8; 4 with --quick]")
    args = parser.parse_args()
    batch = args.batch or (2 if args.quick else 8)
    d_model = args.d_model or (64 if args.quick else 256)
    heads = args.heads or (4 if args.quick else 8)
    lengths = (20, 32, 50, 64) if args.quick else (48, 64, 100, 128, 200, 256)
    repeat = 5 if args.quick else 10

    rng = np.random.default_rng(0)
    params = init_params(rng, d_model, 4 * d_model)
    print(f"pre-norm transformer block: batch {batch}, d_model {d_model}, {heads} heads, "
          f"MLP {4 * d_model}, float32")
    print("   seq   bucket   eager NumPy   compiled   speedup   max |diff|   variants")
    worst = 0.0
    for seq in lengths:
        x = rng.normal(size=(batch, seq, d_model)).astype(np.float32)
        before = compiled_block.stats()
        start = time.perf_counter()
        compiled_block(params, x, heads)  # the first length of a bucket compiles it
        first_call = time.perf_counter() - start
        # compared after that first call: native code, not the trace's own result
        error = float(np.max(np.abs(compiled_block(params, x, heads)
                                    - transformer_block(params, x, heads))))
        worst = max(worst, error)
        eager_ms, compiled_ms = median_ms([transformer_block, compiled_block], params, x,
                                          heads, repeat=repeat)
        stats = compiled_block.stats()
        low, high = pow2_bucket(seq)
        note = (f" (compiled in {first_call:.1f} s)" if stats["compiles"] > before["compiles"]
                else f" (loaded from disk in {1e3 * first_call:.0f} ms)"
                if stats["disk_hits"] > before["disk_hits"] else "")
        print(f"  {seq:4d} {low:4d}..{high:<4d} {eager_ms:8.2f} ms {compiled_ms:8.2f} ms "
              f"{eager_ms / compiled_ms:7.2f}x {error:10.1e} {stats['variants']:6d}{note}")

    stats = compiled_block.stats()
    agree = worst < 1e-3
    buckets = len({pow2_bucket(seq) for seq in lengths})
    print(f"{len(lengths)} lengths, {buckets} buckets, {stats['variants']} variants: "
          f"{stats['compiles']} compiles (in {stats['compile_seconds']:.1f} s), "
          f"{stats['disk_hits']} loaded from the disk cache; {stats['compiled_calls']} "
          f"compiled calls, eager {stats['eager_calls'] or 'none'}")
    print(f"compiled vs eager: max |diff| {worst:.1e} -> {'agree' if agree else 'DISAGREE'}")
    print("tracejit cache list:")
    sys.stdout.flush()
    print_cache_list("transformer_block")
    if not agree:
        raise SystemExit("compiled and eager results disagree")


if __name__ == "__main__":
    main()
