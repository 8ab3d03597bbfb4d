"""Variable-length sequences through a compiled RNN: one compile per length bucket.

    python examples/variable_length.py [--quick] [--sequences N] [--max-length N]

The data: 200 random sequences of 16 features with lengths 5..120 (by default).
``runtime.data.BucketBatcher`` groups them by power-of-two length bucket and pads each
batch's time axis to the bucket's upper edge, with a mask marking the real steps. The
model is a plain-NumPy Elman RNN that loops over the time steps,
``h = tanh(x_t @ Wx + h @ Wh + b)``, keeping ``h`` where the mask says the step is
padding, then a masked mean over time and a linear classifier (untrained: this example
is about shapes and speed).

Every batch of a bucket has one shape (the batcher pads time to the bucket edge; the
last batch of a bucket is topped up with empty rows), so a length bucket is compiled
once and every length in it reuses that code. Under ``jit`` the Python ``for`` loop is
unrolled into the trace (compiled IR loops are not there yet), so the program of a bucket
of width 128 holds 128 steps; the steps share one compiled kernel each (only the slice
``x[:, step]`` differs, and it is an argument), so compile time stays well under a second
per bucket.
"""

import argparse
import sys
import time

import numpy as np
from reporting import median_ms, print_cache_list

from runtime import jit
from runtime.data import BucketBatcher


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
    for step in range(x.shape[1]):
        candidate = np.tanh(inputs[:, step] + state @ recurrent_weight)
        real = mask[:, step, None]
        state = np.where(real, candidate, state)  # padding leaves the state alone
        total = total + np.where(real, candidate, 0)
    counts = np.maximum(np.sum(mask, axis=1, keepdims=True), 1)  # empty rows: 0 / 1
    return (total / counts) @ head_weight + head_bias


# Each bucket has one exact shape, so static shapes (dynamic=False) mean exactly one
# compile per bucket; symbolic dims would make the unrolled loop compile more slowly.
compiled_classifier = jit(rnn_classifier, dynamic=False)


def padded_batches(sequences, batch_size):
    """``(batch, x, mask)`` with ``x``, ``mask`` topped up to ``batch_size`` rows."""
    for batch in BucketBatcher(sequences, batch_size=batch_size):
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
    print(f"{count} sequences, lengths {min(lengths)}..{max(lengths)} "
          f"({len(set(lengths))} distinct), {features} features; Elman RNN with {hidden} "
          f"hidden units; batches of {batch_size}")
    print("  bucket   batch shape     eager NumPy   compiled   speedup   max |diff|   "
          "variants")
    eager_total = compiled_total = worst = 0.0
    buckets = set()
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
        buckets.add(batch.bucket)
        stats = compiled_classifier.stats()
        note = (f" (compiled in {first_call:.1f} s)" if stats["compiles"] > before["compiles"]
                else f" (loaded from disk in {1e3 * first_call:.0f} ms)"
                if stats["disk_hits"] > before["disk_hits"] else "")
        print(f"  {batch.bucket[0]:3d}..{batch.bucket[1]:<4d} {str(x.shape):14} "
              f"{eager_ms:8.2f} ms {compiled_ms:8.2f} ms {eager_ms / compiled_ms:7.2f}x "
              f"{error:10.1e} {stats['variants']:6d}{note}")

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
