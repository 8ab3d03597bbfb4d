"""Issue 17: a data-parallel step mapped over ragged blocks on Dask workers: with
``tracejit.dask.ship`` against every worker compiling for itself, and 1 against 2 workers.

    python -m benchmarks.dask_workers [--quick] [--blocks N] [--rounds N] [--threads N]

The step is ``jit(value_and_grad(block_loss), dynamic=True)``: the summed cross-entropy of
an MLP 784->256->10 (float32) on one block and its gradient. The blocks have 300 to 500
rows (one power-of-two bucket, so one program serves them all); each is scattered to a
worker once, round-robin, and a *round* submits the step once per block (pinned to the
block's worker) and gathers the losses and gradients on the client, as one SGD step of
data-parallel training would.

The client compiles the step once, in this process with an empty cache directory (its
time is printed). Then three scenarios, each on a new ``LocalCluster`` (new worker
processes, each with an empty cache directory of its own, as on separate machines):

* ``2 workers, no ship``: every worker traces and compiles on its first block;
* ``2 workers, ship``: ``ship`` sends the client's entry first; a worker's first block is a
  warm start from disk (no tracing, no LLVM);
* ``1 worker, ship``: the same, one worker, for the throughput ratio.

Per scenario: the first round's wall time (compiles or warm starts included), the ship's
time, each worker's compiles, warm starts (``disk_hits``) and compile seconds, and the
median wall time of the next rounds as blocks per second. The loss and gradients of every
first round are checked against eager NumPy (``value_and_grad`` without ``jit``). Native
kernels run on ``--threads`` threads (``TRACEJIT_NUM_THREADS``, default 1), in this process
and in every worker, so two workers use two cores and one worker one. The machine is
shared: the load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tracejit import jit, nn, value_and_grad

from .harness import machine_facts, machine_line

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "dask_workers.json"
FEATURES, HIDDEN, CLASSES = 784, 256, 10
MIN_ROWS, MAX_ROWS = 300, 500  # one pow2 bucket: (256, 512]
SCENARIOS = (("2 workers, no ship", 2, False), ("2 workers, ship", 2, True),
             ("1 worker, ship", 1, True))


def block_loss(params, x, labels):
    """Cross-entropy summed over one block's rows (blocks of any size add up)."""
    w1, b1, w2, b2 = params
    log_probs = nn.log_softmax(nn.linear(nn.relu(nn.linear(x, w1, b1)), w2, b2))
    targets = labels[:, None] == np.arange(CLASSES)
    return -np.sum(np.where(targets, log_probs, 0.0))


def make_blocks(rng, count):
    prototypes = rng.normal(size=(CLASSES, FEATURES))
    blocks = []
    for rows in rng.integers(MIN_ROWS, MAX_ROWS + 1, size=count):
        labels = rng.integers(0, CLASSES, size=rows)
        x = prototypes[labels] + 4.0 * rng.normal(size=(rows, FEATURES))
        blocks.append((x.astype(np.float32), labels))
    params = tuple(array.astype(np.float32) for array in (
        rng.normal(size=(FEATURES, HIDDEN)) * np.sqrt(2.0 / FEATURES), np.zeros(HIDDEN),
        rng.normal(size=(HIDDEN, CLASSES)) * np.sqrt(2.0 / HIDDEN), np.zeros(CLASSES)))
    return blocks, params


def summed(results):
    """The losses and gradients of a round, added up in block order, as float64."""
    loss = sum(float(result[0]) for result in results)
    grads = [sum(np.asarray(result[1][index], np.float64) for result in results)
             for index in range(len(results[0][1]))]
    return loss, grads


def relative_difference(actual, expected):
    loss, grads = actual
    expected_loss, expected_grads = expected
    worst = abs(loss - expected_loss) / abs(expected_loss)
    for mine, theirs in zip(grads, expected_grads):
        worst = max(worst, float(np.max(np.abs(mine - theirs)) / np.max(np.abs(theirs))))
    return worst


# --- on the workers -----------------------------------------------------------------------
def use_own_cache(base):
    """A new, empty cache directory for this worker (functions unpickled here use it)."""
    directory = os.path.join(base, f"worker-{os.getpid()}")
    os.environ["TRACEJIT_CACHE_DIR"] = directory
    return directory


def compile_seconds(step):
    return step.stats()["compile_seconds"]


# --- on the client ------------------------------------------------------------------------
def run_round(client, step, params, placed):
    start = time.perf_counter()
    futures = [client.submit(step, params, x, labels, workers=[address], pure=False)
               for address, (x, labels) in placed]
    results = client.gather(futures)
    return time.perf_counter() - start, results


def run_scenario(name, workers, ship, step, params, blocks, rounds, base, reference):
    import distributed

    import tracejit.dask as tjd

    started = time.perf_counter()
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        client.run(use_own_cache, str(base))
        startup = time.perf_counter() - started
        addresses = sorted(client.scheduler_info()["workers"])
        placed = [(addresses[index % workers], client.scatter(list(block),
                                                              workers=[addresses[index % workers]]))
                  for index, block in enumerate(blocks)]
        ship_seconds = None
        if ship:
            start = time.perf_counter()
            outcome = tjd.ship(client, step)
            ship_seconds = time.perf_counter() - start
            assert all(shipped["adopted"] + shipped["verified"] == shipped["entries"] >= 1
                       for shipped in outcome.values()), outcome
        first_seconds, results = run_round(client, step, params, placed)
        difference = relative_difference(summed(results), reference)
        stats = tjd.worker_stats(client, step)
        compile_time = client.run(compile_seconds, step)
        steady = [run_round(client, step, params, placed)[0] for _ in range(rounds)]
    median = statistics.median(steady)
    return dict(
        scenario=name, workers=workers, ship=ship, startup_s=startup, ship_s=ship_seconds,
        first_round_s=first_seconds, steady_round_s=median, steady_samples_s=steady,
        blocks_per_s=len(blocks) / median, max_rel_diff=difference,
        per_worker=[dict(compiles=stats[address]["compiles"],
                         disk_hits=stats[address]["disk_hits"],
                         calls=stats[address]["calls"],
                         compiled_calls=stats[address]["compiled_calls"],
                         eager_calls=stats[address]["eager_calls"],
                         compile_s=compile_time[address]) for address in addresses])


def print_row(row):
    workers = "; ".join(f"compiles {worker['compiles']} ({worker['compile_s']:.2f} s), "
                        f"warm starts {worker['disk_hits']}, eager "
                        f"{sum(worker['eager_calls'].values())}" for worker in row["per_worker"])
    ship = f"ship {1e3 * row['ship_s']:.0f} ms + " if row["ship_s"] is not None else ""
    print(f"  {row['scenario']:<19} first round {ship}{row['first_round_s']:.2f} s | next "
          f"rounds {row['steady_round_s']:.2f} s = {row['blocks_per_s']:.1f} blocks/s | "
          f"max rel diff vs eager {row['max_rel_diff']:.1e}")
    print(f"  {'':<19} workers: {workers} (cluster start {row['startup_s']:.1f} s)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer blocks and rounds")
    parser.add_argument("--blocks", type=int, help="blocks per round [16; 8 with --quick]")
    parser.add_argument("--rounds", type=int, help="timed rounds after the first [5; 2 quick]")
    parser.add_argument("--threads", type=int, default=1,
                        help="TRACEJIT_NUM_THREADS here and on every worker [1]")
    args = parser.parse_args(argv)
    try:
        import distributed  # noqa: F401
    except ImportError:
        sys.exit("needs Dask: pip install 'tracejit[dask]'")
    blocks_count = args.blocks or (8 if args.quick else 16)
    rounds = args.rounds or (2 if args.quick else 5)
    # Read when the first kernel runs and when a jit function is made; workers inherit both.
    os.environ["TRACEJIT_NUM_THREADS"] = str(args.threads)
    folder = tempfile.TemporaryDirectory(prefix="tracejit-bench-")
    os.environ["TRACEJIT_CACHE_DIR"] = os.path.join(folder.name, "client")

    facts = machine_facts()
    print(f"Machine: {machine_line(facts)}")
    print(f"Load average at start: {facts['load_average']:.2f} (shared machine)")
    blocks, params = make_blocks(np.random.default_rng(0), blocks_count)
    sizes = [len(labels) for _, labels in blocks]
    print(f"{blocks_count} blocks of {min(sizes)}-{max(sizes)} rows, MLP {FEATURES}->{HIDDEN}->"
          f"{CLASSES} float32, value_and_grad per block; {rounds} timed rounds; "
          f"{args.threads} thread(s) per process")

    eager_step = value_and_grad(block_loss)
    start = time.perf_counter()
    reference = summed([eager_step(params, x, labels) for x, labels in blocks])
    eager_round = time.perf_counter() - start

    step = jit(value_and_grad(block_loss), dynamic=True)
    start = time.perf_counter()
    step(params, *blocks[0])
    client_compile = time.perf_counter() - start
    start = time.perf_counter()
    local = summed([step(params, x, labels) for x, labels in blocks])
    local_round = time.perf_counter() - start
    print(f"this process: compile {client_compile:.2f} s ({step.stats()['compiles']} compile); "
          f"a round without Dask: compiled {local_round:.2f} s = "
          f"{blocks_count / local_round:.1f} blocks/s, eager NumPy {eager_round:.2f} s; "
          f"max rel diff {relative_difference(local, reference):.1e}")

    rows = []
    for index, (name, workers, ship) in enumerate(SCENARIOS):
        base = Path(folder.name) / f"scenario-{index}"
        base.mkdir()
        row = run_scenario(name, workers, ship, step, params, blocks, rounds, base, reference)
        print_row(row)
        rows.append(row)
    by_name = {row["scenario"]: row for row in rows}
    ratio = by_name["2 workers, ship"]["blocks_per_s"] / by_name["1 worker, ship"]["blocks_per_s"]
    cold, warm = by_name["2 workers, no ship"], by_name["2 workers, ship"]
    print(f"2 vs 1 workers: {ratio:.2f}x the blocks per second; first round with ship "
          f"{warm['first_round_s']:.2f} s (+ ship {warm['ship_s']:.2f} s) vs each worker "
          f"compiling {cold['first_round_s']:.2f} s")
    load_end = os.getloadavg()[0]
    print(f"Load average at the end: {load_end:.2f}")
    RESULTS_PATH.write_text(json.dumps(dict(
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        quick=args.quick, blocks=sizes, rounds=rounds, threads=args.threads, machine=facts,
        load_average_end=load_end, client_compile_s=client_compile,
        local_round_s=local_round, eager_round_s=eager_round, scenarios=rows,
        two_vs_one_workers=ratio), indent=1, default=str))
    print(f"Wrote {RESULTS_PATH}")
    folder.cleanup()


if __name__ == "__main__":
    main()
