"""Data-parallel training on Dask workers, with the compiled step shipped, not recompiled.

    python examples/dask_data_parallel.py [--quick] [--steps N] [--partitions N]

Needs Dask: ``pip install 'tracejit[dask]'`` (without it the example says so and exits).

A ``distributed.LocalCluster`` with 2 worker processes stands in for a cluster. The
synthetic data set (points around 4 class prototypes) is split into a ragged list of
partitions (130 to 250 rows each), and each worker holds half of them. One training step:

1. every worker computes ``jit(value_and_grad(summed_loss))`` on each of its partitions
   (the cross-entropy summed over the partition's rows, and its gradient);
2. the client adds the losses and gradients up, divides by the number of rows (so the
   loss is the mean over the whole data set, whatever the partition sizes) and updates
   the weights with SGD; the new weights go out with the next step's tasks.

The step is compiled once, on the client, on the first partition (``dynamic=True``
buckets the row count from the first call, so all the ragged partitions share one
program). ``tracejit.dask.ship`` then sends that signed cache entry to the workers, each
of which has a cache directory of its own here, as each machine of a real cluster has;
``tracejit.dask.worker_stats`` then shows that no worker traced or compiled anything:
``compiles 0``, and one warm start (``disk_hits 1``) from the shipped entry.

The same training also runs in this one process with eager NumPy (``value_and_grad``
without ``jit``) on the same partitions; the losses of the two runs are compared at
every step.
"""

import argparse
import logging
import os
import sys
import tempfile
import time

import numpy as np

from tracejit import jit, nn, value_and_grad

CLASSES = 4


def make_partitions(rng, sizes, features):
    """Points scattered around ``CLASSES`` prototypes, one ``(x, labels)`` per size."""
    prototypes = rng.normal(size=(CLASSES, features))
    partitions = []
    for size in sizes:
        labels = rng.integers(0, CLASSES, size=size)
        points = prototypes[labels] + 1.5 * rng.normal(size=(size, features))
        partitions.append((points, labels))
    return partitions


def init_params(rng, features, hidden):
    return (rng.normal(size=(features, hidden)) * np.sqrt(2.0 / features),
            np.zeros(hidden),
            rng.normal(size=(hidden, CLASSES)) * np.sqrt(2.0 / hidden),
            np.zeros(CLASSES))


def summed_loss(params, x, labels):
    """Cross-entropy summed (not averaged) over the rows of one partition: partitions of
    different sizes then add up to the whole data set's sum."""
    w1, b1, w2, b2 = params
    log_probs = nn.log_softmax(nn.linear(nn.relu(nn.linear(x, w1, b1)), w2, b2))
    targets = labels[:, None] == np.arange(CLASSES)  # one-hot, as booleans
    return -np.sum(np.where(targets, log_probs, 0.0))


def sgd_update(params, summed_grads, rows, lr):
    return tuple(param - lr * grad / rows for param, grad in zip(params, summed_grads))


def add_up(results):
    """The sum of ``(loss, grads)`` pairs, in the order given (so both runs round alike)."""
    total_loss, total_grads = results[0]
    for loss, grads in results[1:]:
        total_loss = total_loss + loss
        total_grads = tuple(mine + theirs for mine, theirs in zip(total_grads, grads))
    return float(total_loss), total_grads


def use_own_cache(base):
    """Run on each worker: a cache directory of its own, so what it runs from disk can
    only have come from ``ship`` (on one machine they would otherwise share the client's
    cache). Functions unpickled on the worker from now on use it."""
    directory = os.path.join(base, f"worker-{os.getpid()}")
    os.environ["TRACEJIT_CACHE_DIR"] = directory
    return directory


def train_on_cluster(client, step, placed, params, rows, lr, steps):
    """``placed``: ``(worker address, futures of a partition's x and labels)`` pairs. Returns the
    weights, the loss of every step and the wall time of every step."""
    losses, seconds = [], []
    for _ in range(steps):
        start = time.perf_counter()
        futures = [client.submit(step, params, x, labels, workers=[address], pure=False)
                   for address, (x, labels) in placed]
        loss, grads = add_up(client.gather(futures))
        params = sgd_update(params, grads, rows, lr)
        seconds.append(time.perf_counter() - start)
        losses.append(loss / rows)
    return params, np.array(losses), np.array(seconds)


def train_in_one_process(params, partitions, rows, lr, steps):
    eager_step = value_and_grad(summed_loss)
    losses = []
    for _ in range(steps):
        loss, grads = add_up([eager_step(params, x, labels) for x, labels in partitions])
        params = sgd_update(params, grads, rows, lr)
        losses.append(loss / rows)
    return params, np.array(losses)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a few seconds)")
    parser.add_argument("--steps", type=int, help="SGD steps [40; 8 with --quick]")
    parser.add_argument("--partitions", type=int, default=6,
                        help="partitions of the data set, split between the 2 workers [6]")
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args()
    try:
        import distributed

        import tracejit.dask as tjd
    except ImportError as error:
        print(f"This example needs Dask ({error}); install it with\n"
              "    pip install 'tracejit[dask]'\n"
              "(dask[array,distributed] and cloudpickle), then run it again.")
        return
    steps = args.steps or (8 if args.quick else 40)
    features, hidden = 16, 32

    rng = np.random.default_rng(0)
    sizes = rng.integers(130, 251, size=args.partitions)  # ragged: one pow2 bucket
    partitions = make_partitions(rng, sizes, features)
    params = init_params(rng, features, hidden)
    rows = int(sizes.sum())
    print(f"MLP {features} -> {hidden} -> {CLASSES}, {rows} rows in {len(sizes)} partitions "
          f"of {', '.join(map(str, sizes))} rows, {steps} SGD steps (lr {args.lr}), float64")

    step = jit(value_and_grad(summed_loss), dynamic=True)
    start = time.perf_counter()
    step(params, *partitions[0])  # traced and compiled here, written to the disk cache
    seconds = time.perf_counter() - start
    if step.stats()["disk_hits"]:  # a run before this one left it in the cache
        print(f"client: loaded the step from the disk cache in {seconds:.2f} s")
    else:
        print(f"client: compiled the step in {seconds:.2f} s "
              f"({step.stats()['compiles']} compile)")

    with tempfile.TemporaryDirectory(prefix="tracejit-workers-") as worker_caches, \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None,
                                     silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        client.run(use_own_cache, worker_caches)
        addresses = sorted(client.scheduler_info()["workers"])
        for address, shipped in sorted(tjd.ship(client, step).items()):
            print(f"ship: {address} installed {shipped['entries']} entry "
                  f"({shipped['adopted']} adopted, {shipped['rejected']} rejected)")
        placed = []  # each worker keeps its partitions for the whole training
        for index, partition in enumerate(partitions):
            address = addresses[index % len(addresses)]
            placed.append((address, client.scatter(list(partition), workers=[address])))
        _, losses, seconds = train_on_cluster(client, step, placed, params, rows, args.lr,
                                              steps)
        stats = tjd.worker_stats(client, step)

    report_every = max(steps // 6, 1)
    _, reference = train_in_one_process(params, partitions, rows, args.lr, steps)
    print("  step  loss on 2 workers | one process, eager NumPy")
    for index in range(steps):
        if index % report_every == 0 or index == steps - 1:
            print(f"  {index:4d}  {losses[index]:.6f}          | {reference[index]:.6f}")
    gap = float(np.max(np.abs(losses - reference) / np.abs(reference)))
    agree = gap < 1e-9
    print(f"losses on the workers and in one process: max relative diff {gap:.1e} -> "
          f"{'agree' if agree else 'DISAGREE'}")
    print(f"loss fell from {losses[0]:.3f} to {losses[-1]:.3f}; a step took "
          f"{1e3 * np.median(seconds):.1f} ms (median; the first {1e3 * seconds[0]:.1f} ms)")
    for address in addresses:
        worker = stats[address]
        print(f"worker {address}: {worker['calls']} calls, {worker['compiled_calls']} "
              f"compiled, {worker['compiles']} compiles, {worker['disk_hits']} warm start "
              f"(disk_hits), eager {worker['eager_calls'] or 'none'}")
    if not agree:
        sys.exit("the workers' losses differ from the single-process run")


if __name__ == "__main__":
    main()
