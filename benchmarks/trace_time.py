"""Trace time per recorded op: what ``tracer.trace`` costs for each equation it records.

    python -m benchmarks.trace_time [--quick]

Three workloads are traced many times on small inputs (so NumPy's own work is a small
part of the time): an MLP with a cross-entropy loss, a layer-norm -> softmax block, and a
200-op elementwise chain. For each, the median wall time of one ``trace`` call is divided
by the number of equations in the traced graph. The same function run eagerly (plain
NumPy) is timed alongside, interleaved round by round, so the table also shows the
tracer's own share, (trace - eager) per equation, and the marginal cost per equation
once the fixed cost of a trace (source rewrite, implicit-input scan; measured on a
one-op function) is taken out.

Goal: at most 30 µs per recorded op. The table goes to stdout and, with the machine's
facts, to ``benchmarks/results/trace_time.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import numpy as np

from tracejit import nn
from tracejit.tracer import trace

from .harness import machine_facts

GOAL_US_PER_OP = 30.0
RESULTS_PATH = Path(__file__).resolve().parent / "results" / "trace_time.json"


# --- workloads ------------------------------------------------------------------------------


def mlp_loss(x, labels, w1, b1, w2, b2, w3, b3):
    hidden = nn.relu(x @ w1 + b1)
    hidden = nn.gelu(hidden @ w2 + b2)
    logits = hidden @ w3 + b3
    return nn.cross_entropy(logits, labels)


def norm_softmax_block(x, gain, bias):
    normalized = nn.layer_norm(x, gain, bias)
    return nn.softmax(normalized * 2.0, axis=-1)


def elementwise_chain(x):
    for _ in range(50):  # 4 ops per round: 200 recorded equations
        x = x * 0.9
        x = x + 0.1
        x = np.tanh(x)
        x = x - 0.05
    return x


def one_op(x):
    return x + 1.0


def workloads(rng):
    """name -> (function, arguments), float32 inputs of a few thousand elements at most."""

    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    return {
        "mlp (3 layers + cross-entropy)": (
            mlp_loss,
            (normal(16, 32), rng.integers(0, 10, 16), normal(32, 64), normal(64),
             normal(64, 64), normal(64), normal(64, 10), normal(10)),
        ),
        "layer_norm -> softmax": (norm_softmax_block, (normal(16, 64), normal(64), normal(64))),
        "200-op elementwise chain": (elementwise_chain, (normal(256),)),
    }


# --- measurement ----------------------------------------------------------------------------


def measure(function, arguments, repeats):
    """Median seconds of one trace and of one eager call, interleaved; and the equation
    count of the traced graph."""
    equations = len(trace(function, *arguments).graph.equations)  # also warms up
    function(*arguments)
    trace_samples, eager_samples = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        trace(function, *arguments)
        trace_samples.append(time.perf_counter() - start)
        start = time.perf_counter()
        function(*arguments)
        eager_samples.append(time.perf_counter() - start)
    return statistics.median(trace_samples), statistics.median(eager_samples), equations


def run(quick):
    """The rows of the table, and the fixed cost of one trace (a one-op function)."""
    repeats = 5 if quick else 25
    fixed_seconds, _, _ = measure(one_op, (np.ones(4, np.float32),), repeats)
    rows = []
    for name, (function, arguments) in workloads(np.random.default_rng(0)).items():
        trace_seconds, eager_seconds, equations = measure(function, arguments, repeats)
        us_per_op = trace_seconds * 1e6 / equations
        rows.append(
            dict(
                workload=name,
                equations=equations,
                trace_ms=trace_seconds * 1e3,
                eager_ms=eager_seconds * 1e3,
                us_per_op=us_per_op,
                tracer_us_per_op=(trace_seconds - eager_seconds) * 1e6 / equations,
                marginal_us_per_op=(trace_seconds - fixed_seconds) * 1e6 / equations,
                meets_goal=us_per_op <= GOAL_US_PER_OP,
                repeats=repeats,
            )
        )
    return rows, fixed_seconds


def format_table(rows):
    header = (
        f"{'workload':<32}{'eqns':>6}{'trace ms':>10}{'eager ms':>10}{'µs/op':>8}"
        f"{'tracer µs/op':>14}{'marginal µs/op':>16}  goal"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['workload']:<32}{row['equations']:>6}{row['trace_ms']:>10.2f}"
            f"{row['eager_ms']:>10.3f}{row['us_per_op']:>8.1f}{row['tracer_us_per_op']:>14.1f}"
            f"{row['marginal_us_per_op']:>16.1f}  {'ok' if row['meets_goal'] else 'MISS'}"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)

    rows, fixed_seconds = run(args.quick)
    print(f"Trace time per recorded equation, median of {rows[0]['repeats']} traces")
    print(f"Goal: <= {GOAL_US_PER_OP:g} µs per recorded op (trace wall time / equations)")
    print(format_table(rows))
    missed = sum(not row["meets_goal"] for row in rows)
    print(f"{missed} of {len(rows)} workloads miss the goal")
    print(
        f"Fixed cost of one trace (a one-op function): {fixed_seconds * 1e3:.2f} ms; "
        "'marginal µs/op' is (trace - fixed cost) / equations. 'tracer µs/op' leaves out "
        "the eager NumPy time of the same call."
    )

    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    report = dict(
        benchmark="trace_time",
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        quick=args.quick,
        goal=dict(us_per_op=GOAL_US_PER_OP),
        fixed_cost_ms=fixed_seconds * 1e3,
        machine=machine_facts(),
        rows=rows,
    )
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {RESULTS_PATH}")


if __name__ == "__main__":
    main()
