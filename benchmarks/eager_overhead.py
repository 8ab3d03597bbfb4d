"""Per-op overhead of eager ``tracejit.Tensor`` operations over the bare NumPy call.

    python -m benchmarks.eager_overhead [--quick]

For a handful of ops (add, multiply, np.tanh, np.sum, matmul on a small square matrix,
slicing and integer-array indexing) on float32 data of 16 and of 1,000,000 elements,
three candidates run side by side in this one process: NumPy on ndarrays, Tensors, and
Tensors with ``requires_grad=True`` (which also record the autograd graph). Candidates are
interleaved round by round and each reported time is the median of many repeats, so
drifting clocks and other load hit all three alike.

Goal: at most 3 us extra per op at 16 elements, and at most 5% extra at 1M elements.
The table goes to stdout and, with the machine's facts, to
``benchmarks/results/eager_overhead.json``.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
from pathlib import Path

import numpy as np

from tracejit import tensor

from .harness import machine_facts, median_per_call

SMALL, LARGE = 16, 1_000_000
GOAL_SMALL_EXTRA_US = 3.0
GOAL_LARGE_RATIO = 1.05
RESULTS_PATH = Path(__file__).resolve().parent / "results" / "eager_overhead.json"
CANDIDATES = ("numpy", "tensor", "tensor+grad")


def _add(a, b):
    return a + b


def _multiply(a, b):
    return a * b


def _tanh(a, b):
    return np.tanh(a)


def _sum(a, b):
    return np.sum(a)


def _matmul(a, b):
    return a @ b


def _slice(a, b):
    return a[1::2]


def _gather(a, b):
    return a[b]


# op name -> (function of two operands, which sizes it runs at)
OPS = {
    "add": (_add, (SMALL, LARGE)),
    "multiply": (_multiply, (SMALL, LARGE)),
    "np.tanh": (_tanh, (SMALL, LARGE)),
    "np.sum": (_sum, (SMALL, LARGE)),
    "matmul": (_matmul, (SMALL,)),  # a 4x4 square: the per-call cost of a small matmul
    "x[1::2]": (_slice, (SMALL, LARGE)),
    "x[indices]": (_gather, (SMALL, LARGE)),
}


def operands(op, size, rng):
    """The NumPy operands of ``op`` at ``size`` float32 elements."""
    if op == "matmul":
        side = int(round(size**0.5))
        return (
            rng.standard_normal((side, side), dtype=np.float32),
            rng.standard_normal((side, side), dtype=np.float32),
        )
    x = rng.standard_normal(size, dtype=np.float32)
    if op == "x[indices]":
        return x, rng.permutation(size)
    return x, rng.standard_normal(size, dtype=np.float32)


def candidates(op, size, rng):
    """The three zero-argument calls to time for ``op`` at ``size``."""
    function = OPS[op][0]
    a, b = operands(op, size, rng)
    index_operand = op == "x[indices]"  # the index array stays an ndarray

    def as_tensor(value, requires_grad=False):
        return tensor(value, requires_grad=requires_grad)

    b_tensor = b if index_operand else as_tensor(b)
    b_grad = b if index_operand else as_tensor(b, requires_grad=True)
    return {
        "numpy": functools.partial(function, a, b),
        "tensor": functools.partial(function, as_tensor(a), b_tensor),
        "tensor+grad": functools.partial(function, as_tensor(a, True), b_grad),
    }


def run(quick):
    repeats = 7 if quick else 31
    target = {SMALL: 0.002 if quick else 0.005, LARGE: 0.01 if quick else 0.03}
    rng = np.random.default_rng(0)
    rows = []
    for op, (_, sizes) in OPS.items():
        for size in sizes:
            seconds, number = median_per_call(candidates(op, size, rng), repeats, target[size],
                                              probe=3)
            numpy_us, tensor_us, grad_us = (seconds[name] * 1e6 for name in CANDIDATES)
            extra_us = tensor_us - numpy_us
            ratio = tensor_us / numpy_us
            meets_goal = (
                extra_us <= GOAL_SMALL_EXTRA_US if size == SMALL else ratio <= GOAL_LARGE_RATIO
            )
            rows.append(
                dict(
                    op=op,
                    size=size,
                    numpy_us=numpy_us,
                    tensor_us=tensor_us,
                    tensor_grad_us=grad_us,
                    extra_us=extra_us,
                    extra_grad_us=grad_us - numpy_us,
                    ratio=ratio,
                    meets_goal=meets_goal,
                    calls_per_sample=number,
                    repeats=repeats,
                )
            )
    return rows


def format_table(rows):
    header = (
        f"{'op':<12}{'size':>10}{'numpy µs':>12}{'tensor µs':>12}{'tensor+grad µs':>16}"
        f"{'extra µs':>10}{'ratio':>8}  goal"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['op']:<12}{row['size']:>10,}{row['numpy_us']:>12.2f}{row['tensor_us']:>12.2f}"
            f"{row['tensor_grad_us']:>16.2f}{row['extra_us']:>10.2f}{row['ratio']:>8.2f}  "
            f"{'ok' if row['meets_goal'] else 'MISS'}"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)

    rows = run(args.quick)
    print(
        f"Eager Tensor overhead over bare NumPy, float32, median of {rows[0]['repeats']} "
        "interleaved repeats"
    )
    print(
        f"Goal: extra <= {GOAL_SMALL_EXTRA_US:g} µs per op at {SMALL} elements, "
        f"ratio <= {GOAL_LARGE_RATIO:g} (5% extra) at {LARGE:,} elements"
    )
    print(format_table(rows))
    small_worst = max(row["extra_us"] for row in rows if row["size"] == SMALL)
    large_worst = max(row["ratio"] for row in rows if row["size"] == LARGE)
    missed = sum(not row["meets_goal"] for row in rows)
    print(
        f"Worst extra at {SMALL} elements: {small_worst:.2f} µs; worst ratio at {LARGE:,}: "
        f"{large_worst:.2f}; {missed} of {len(rows)} rows miss the goal"
    )
    print(
        "Notes: x[1::2] is a view for both (a few hundred ns of NumPy), so its ratio says "
        "nothing; the extra is Tensor's Python-side wrapping, plus one IndexNode with grad."
    )

    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    report = dict(
        benchmark="eager_overhead",
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        quick=args.quick,
        goal=dict(small_extra_us=GOAL_SMALL_EXTRA_US, large_ratio=GOAL_LARGE_RATIO),
        machine=machine_facts(),
        rows=rows,
    )
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {RESULTS_PATH}")


if __name__ == "__main__":
    main()
