"""Variable-length sequences through a compiled RNN: one program per length bucket.

    python examples/variable_length.py [--quick] [--sequences N] [--max-length N]

The data: 200 random sequences of 16 features with lengths 5..120 (by default).
``tracejit.data.BucketBatcher`` groups them by power-of-two length bucket and pads each
batch's time axis only to its own longest sequence (``pad_to="batch"``), with a mask
marking the real steps, so the batches of one bucket have many different lengths. The
model is a plain-NumPy Elman RNN with a Python loop over the time steps,
``h = tanh(x_t @ Wx + h @ Wh + b)``, keeping ``h`` where the mask says the step is
padding, then a masked mean over time and a linear classifier (untrained: this example
is about shapes and speed).

Under ``jit`` the time loop is captured (``loops="capture"``, the default): it becomes one
loop node whose body is traced once with a symbolic step index, and the program runs it
natively for whatever number of steps a call has. So a bucket compiles once, on its first
batch, and every other length in it reuses that program: no recompile per length, and
compile time does not grow with the number of steps. ``buckets`` names the time axis of
``x`` and ``mask`` so it is symbolic from a bucket's first call. The table shows, per
batch, its shape, eager and compiled time, and when a bucket compiled; then one line per
bucket: its lengths, its compiles and their time. A second run loads every bucket's
program from the disk cache (no tracing, no LLVM).
"""

import argparse
import sys
import time

import numpy as np
from reporting import median_ms, print_cache_list

from tracejit import jit
from tracejit.data import BucketBatcher


def make_sequences(rng, count, min_length, max_length, features):
    lengths = rng.integers(min_length, max_length + 1, size=count)
    return [rng.normal(size=(length, features)).astype(np.float32) for length in lengths]


def init_params(rng, features, hidden, classes):
    return tuple(array.astype(np.float32) for array in (
        rng.normal(size=(features, hidden)) / np.sqrt(features),  # input_weight
        rng.normal(size=(hidden, hidden)) / np.sqrt(hidden),  # recurrent_weight
        np.zeros(hidden),  # bias
        rng.normal(size=(hidden, classes)) / np.sqrt(hidden),  # head_weight
        np.zeros(classes),  # head_bias
    ))


def rnn_classifier(params, x, mask):
    """Class scores for a padded batch ``x`` (batch, time, features) with ``mask``
    (batch, time) True at the real steps."""
    input_weight, recurrent_weight, bias, head_weight, head_bias = params
    inputs = x @ input_weight + bias  # the input projection of every step at once
    state = np.zeros_like(inputs[:, 0])
    total = np.zeros_like(state)
    for step in range(x.shape[1]):  # captured: one loop node for every length
        candidate = np.tanh(inputs[:, step] + state @ recurrent_weight)
        real = mask[:, step, None]
        state = np.where(real, candidate, state)  # padding leaves the state alone
        total = total + np.where(real, candidate, 0)
    counts = np.maximum(np.sum(mask, axis=1, keepdims=True), 1)  # empty rows: 0 / 1
    return (total / counts) @ head_weight + head_bias


# The time axis (axis 1 of x and mask) is bucketed by powers of two from the first call;
# the batch and feature sizes stay exact. One program per bucket serves every length.
TIME_AXIS = {1: "pow2"}
compiled_classifier = jit(rnn_classifier, buckets={"x": TIME_AXIS, "mask": TIME_AXIS})


def padded_batches(sequences, batch_size):
    """``(batch, x, mask)`` with ``x``, ``mask`` topped up to ``batch_size`` rows; time is
    padded to the batch's longest sequence only, so lengths vary within a bucket."""
    for batch in BucketBatcher(sequences, batch_size=batch_size, pad_to="batch"):
        missing = batch_size - len(batch.lengths)
        x = np.pad(batch.data, ((0, missing), (0, 0), (0, 0)))
        mask = np.pad(batch.mask, ((0, missing), (0, 0)))
        yield batch, x, mask


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    parser.add_argument("--sequences", type=int, help="how many sequences [200; 48 --quick]")
    parser.add_argument("--max-length", type=int, help="longest sequence [120; 16 --quick]")
    parser.add_argument("--batch", type=int, help="sequences per batch [32; 8 --quick]")
    args = parser.parse_args()
    count = args.sequences or (48 if args.quick else 200)
    min_length = 3 if args.quick else 5
    max_length = args.max_length or (16 if args.quick else 120)
    batch_size = args.batch or (8 if args.quick else 32)
    features, hidden, classes = 16, 64, 4
    repeat = 5 if args.quick else 10

    rng = np.random.default_rng(0)
    sequences = make_sequences(rng, count, min_length, max_length, features)
    params = init_params(rng, features, hidden, classes)
    lengths = [len(sequence) for sequence in sequences]
    # Sorted by length, consecutive sequences share a batch and little padding; within a
    # bucket, the batches then have different lengths.
    sequences.sort(key=len)
    print(f"{count} sequences, lengths {min(lengths)}..{max(lengths)} "
          f"({len(set(lengths))} distinct), {features} features; Elman RNN with {hidden} "
          f"hidden units; batches of {batch_size}")
    print("  bucket   batch shape     eager NumPy   compiled   speedup   max |diff|   "
          "variants")
    eager_total = compiled_total = worst = 0.0
    per_bucket = {}  # bucket -> {"lengths", "batches", "compiles", "seconds", "loaded"}
    for batch, x, mask in padded_batches(sequences, batch_size):
        before = compiled_classifier.stats()
        start = time.perf_counter()
        compiled_classifier(params, x, mask)  # the first call of a bucket compiles it
        first_call = time.perf_counter() - start
        compiled = compiled_classifier(params, x, mask)
        eager = rnn_classifier(params, x, mask)
        rows = len(batch.lengths)  # the rest are the empty rows that filled the batch
        error = float(np.max(np.abs(compiled[:rows] - eager[:rows])))
        worst = max(worst, error)
        eager_ms, compiled_ms = median_ms([rnn_classifier, compiled_classifier], params, x,
                                          mask, repeat=repeat)
        eager_total += eager_ms
        compiled_total += compiled_ms
        stats = compiled_classifier.stats()
        bucket = per_bucket.setdefault(batch.bucket, dict(lengths=[], batches=0, compiles=0,
                                                          seconds=0.0, loaded=0))
        bucket["lengths"].append(x.shape[1])
        bucket["batches"] += 1
        bucket["compiles"] += stats["compiles"] - before["compiles"]
        bucket["seconds"] += stats["compile_seconds"] - before["compile_seconds"]
        bucket["loaded"] += stats["disk_hits"] - before["disk_hits"]
        note = (f" (compiled in {first_call:.2f} s)" if stats["compiles"] > before["compiles"]
                else f" (loaded from disk in {1e3 * first_call:.0f} ms)"
                if stats["disk_hits"] > before["disk_hits"] else "")
        print(f"  {batch.bucket[0]:3d}..{batch.bucket[1]:<4d} {str(x.shape):14} "
              f"{eager_ms:8.2f} ms {compiled_ms:8.2f} ms {eager_ms / compiled_ms:7.2f}x "
              f"{error:10.1e} {stats['variants']:6d}{note}")

    print("per bucket: one program, whatever the lengths of its batches")
    for (low, high), bucket in per_bucket.items():
        widths = ", ".join(str(width) for width in sorted(set(bucket["lengths"])))
        origin = (f"{bucket['loaded']} loaded from disk" if bucket["loaded"] else
                  f"{bucket['compiles']} compile(s) in {bucket['seconds']:.2f} s")
        print(f"  {low:3d}..{high:<4d} {bucket['batches']:3d} batches of lengths {widths}: "
              f"{origin}")
    buckets = set(per_bucket)
    stats = compiled_classifier.stats()
    agree = worst < 1e-4
    print(f"{len(set(lengths))} distinct lengths, {len(buckets)} buckets, "
          f"{stats['variants']} variants: {stats['compiles']} compiles (in "
          f"{stats['compile_seconds']:.1f} s), {stats['disk_hits']} loaded from the disk "
          f"cache; {stats['compiled_calls']} compiled calls, eager "
          f"{stats['eager_calls'] or 'none'}")
    print(f"one pass over all batches: eager NumPy {eager_total:.2f} ms, compiled "
          f"{compiled_total:.2f} ms ({eager_total / compiled_total:.2f}x), not counting "
          "compiles")
    print(f"compiled vs eager: max |diff| {worst:.1e} -> {'agree' if agree else 'DISAGREE'}")
    print("tracejit cache list:")
    sys.stdout.flush()
    print_cache_list("rnn_classifier")
    if not agree:
        raise SystemExit("compiled and eager results disagree")


if __name__ == "__main__":
    main()
