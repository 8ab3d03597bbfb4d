"""The warm start, A against B: a first call from the disk cache over a warm call, for two or
more checkouts run alternately in fresh processes (issue 16: "warm start from disk ≤ 15 ms
over a warm call"; docs/experiments/first_call.md).

    python -m benchmarks.warm_start_ab [--processes 12] [--child tracejit] [--fifo]
                                       TREE[@NAME=VALUE,...] TREE[@...] ...

Each TREE is a checkout of this repository, best a frozen one (``git archive REV | tar -x
-C DIR``: another helper's edit in a shared tree changes tracejit's code digest, so its warm
start misses the cache). Its children import tracejit from its ``runtime/``, ``codegen/`` and
``tracer/`` folders (an import hook mapping them as ``pyproject.toml``'s package-dir does) and
run its own ``benchmarks.first_call`` child; ``@NAME=VALUE,...`` adds environment variables
(``. .@OPENBLAS_THREAD_TIMEOUT=18``: one tree, two settings). One cold child per TREE fills a
cache directory of its own, then the warm children run, the order of the TREEs flipping every
round. ``--fifo`` runs them under ``chrt -f 10`` (SCHED_FIFO: on a loaded machine the child
preempts the other processes, so its wall time is its own; needs the privilege to). A
one-off sample under load can be ten times the rest: the figures are the median and the
mean of the lowest 3 of ``first call - warm call``, with every sample listed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .first_call import TRACEJIT_STEPS

# Run in the child: tracejit's packages from the tree (argv[1]), then first_call's child.
CHILD = r"""
import importlib.abc, importlib.util, os, runpy, sys
tree, child = sys.argv[1], sys.argv[2]
folders = {"tracejit": "runtime/_tracejit", "tracejit.codegen": "codegen",
           "tracejit.runtime": "runtime", "tracejit.tracer": "tracer"}

class Tree(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in folders:
            return None  # submodules: found on their package's __path__ (the tree's)
        folder = os.path.join(tree, folders[name])
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])

sys.meta_path.insert(0, Tree())
sys.path.insert(0, tree)
sys.argv = ["first_call", "--child", child]
runpy.run_module("benchmarks.first_call", run_name="__main__")
"""


def parse_spec(spec):
    """``(tree, {name: value})`` of ``TREE[@NAME=VALUE,...]``.

    >>> parse_spec("/tmp/a@OPENBLAS_THREAD_TIMEOUT=18,X=1")
    ('/tmp/a', {'OPENBLAS_THREAD_TIMEOUT': '18', 'X': '1'})
    """
    tree, _, extra = spec.partition("@")
    return str(Path(tree).resolve()), dict(item.split("=", 1) for item in extra.split(",") if item)


def run_child(spec, child, cache, fifo):
    """The child's JSON report (``first_call._child``'s) for a call from ``cache``."""
    tree, extra = parse_spec(spec)
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=cache, **extra)
    environment.pop("TRACEJIT_DISABLE", None)
    command = ["chrt", "-f", "10"] * fifo + [sys.executable, "-c", CHILD, tree, child]
    completed = subprocess.run(command, cwd=tree, env=environment, capture_output=True,
                               text=True, timeout=600)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        raise SystemExit(f"{spec}: child failed: {completed.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def compare(specs, child, processes, fifo):
    """``{spec: [(first - warm ms, warm ms)]}``, ``processes`` warm starts each."""
    samples = {spec: [] for spec in specs}
    with tempfile.TemporaryDirectory(prefix="tracejit-warm-ab-") as folder:
        caches = {spec: os.path.join(folder, str(index)) for index, spec in enumerate(specs)}
        for spec in specs:
            run_child(spec, child, caches[spec], fifo=False)  # cold: fills the cache
        for round_ in range(processes):
            for spec in specs if round_ % 2 == 0 else specs[::-1]:
                report = run_child(spec, child, caches[spec], fifo)
                if report.get("disk_hits") != 1:
                    raise SystemExit(f"{spec}: the warm start missed the cache: {report}")
                samples[spec].append(((report["first_s"] - report["warm_s"]) * 1e3,
                                      report["warm_s"] * 1e3))
    return samples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", metavar="TREE[@NAME=VALUE,...]")
    parser.add_argument("--processes", type=int, default=12, help="warm starts per tree")
    parser.add_argument("--child", choices=tuple(TRACEJIT_STEPS), default="tracejit")
    parser.add_argument("--fifo", action="store_true", help="run them under chrt -f 10")
    args = parser.parse_args(argv)
    for spec, rows in compare(args.trees, args.child, args.processes, args.fifo).items():
        over = sorted(row[0] for row in rows)
        print(f"{spec}: over a warm call median {statistics.median(over):.2f} ms, low 3 "
              f"{sum(over[:3]) / 3:.2f}; warm call {statistics.median(r[1] for r in rows):.2f}"
              f" ms; all: {', '.join(f'{value:.1f}' for value in over)}")


if __name__ == "__main__":
    main()
