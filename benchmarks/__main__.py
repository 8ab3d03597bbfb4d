"""tracejit against NumPy eager and its peers on the workloads of DESIGN.md §6.

    python -m benchmarks [--quick] [--only gelu rnn ...] [--[no-]unrolled-rnn]
                         [--wait-idle SECONDS]

1. gelu(x*w+b), 2048×2048 f32         4. RNN, 24 sequences of length 16–128
2. layer_norm → softmax, 8192×512       5. call overhead, 16 elements
3. MLP train step 512×784→1024→10      6. transformer block (examples/transformer_block.py)
7. first call (trace + compile) of the MLP step
8-10. the MLP train step at batch 64, 512 and 4096 against jax.jit, with the OpenBLAS
     kernel that ran and the time its FLOPs take at measured peak (``benchmarks.mlp_step``;
     run this command once with ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` unset too)
11. compile time of chains of 10, 100 and 1000 pointwise ops (``benchmarks.compile_scaling``)
12. float32 math functions on 1024×1024, two threads (``benchmarks.math_f32``)
13. a compiled layer alternating with NumPy/BLAS calls (``benchmarks.interleave``)
14. the first call of gelu on 4096×4096, with its memory (``benchmarks.first_call_large``)

Each workload runs NumPy eager, tracejit and, when they are importable, torch eager,
torch.compile, jax.jit, numba and numexpr (where the peer is meaningful; see
``benchmarks.peers``), in one process, round-robin, after warm-up, every library's pool on
the same thread count (``peers.same_threads``; a note lists them); the figure is the median
sample (each sample comes after a pause and an untimed call, and reads the process's page
faults, preemptions and CPU per call: see ``harness.measure_interleaved``). Every result is
checked against NumPy eager. Each of
workloads 1-6 has a fresh worker process of its own (so a crash is reported instead of
ending the run, and no workload inherits another's address space or thread pools);
workload 7 starts a fresh process per measurement, and 11-14 run in fresh processes of
their own (``benchmarks.extra_workloads``); 11 and 12 give one result per chain length and
per math function.

Output: the tables on stdout; ``benchmarks/results/benchmarks.json`` (every sample),
``benchmarks/results/benchmarks.svg`` (the chart: ``benchmarks.chart``) and
``benchmarks/results/README_table.md`` (the summary table to paste into the README).

``--quick`` keeps the sizes and runs fewer rounds and one process per first-call
measurement. ``--no-unrolled-rnn`` leaves out the RNN's tracejit variant that compiles
whole padded sequences (the loop unrolled; its compile took minutes at commit 9a15dcd and
about a second at c108b9a). On a shared machine, ``--wait-idle 300`` waits before each
workload for other processes to leave the CPUs; the CPU share they used during each
workload is printed either way.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import chart, extra_workloads, first_call, mlp_step, peers, report
from .harness import machine_facts, machine_line, run_workload
from .workloads import BUILDERS, LEARNING_RATE, SEED, TITLES, mlp_inputs, mlp_train_step

RESULTS = Path(__file__).resolve().parent / "results"
REPOSITORY = Path(__file__).resolve().parents[1]
KEYS = (*BUILDERS, "first_call", *mlp_step.KEYS, *extra_workloads.KEYS)


def _settings(quick):
    """Rounds and seconds per sample, for ms workloads and for the µs call overhead."""
    if quick:
        return dict(rounds=9, sample_seconds=0.005, call_rounds=15, call_sample_seconds=0.002,
                    processes=1)
    return dict(rounds=41, sample_seconds=0.02, call_rounds=61, call_sample_seconds=0.005,
                processes=3)


def _reference_loss():
    inputs = mlp_inputs(np.random.default_rng(SEED))
    loss, *_ = mlp_train_step(inputs["x"], inputs["labels"], inputs["w1"], inputs["b1"],
                              inputs["w2"], inputs["b2"], LEARNING_RATE)
    return float(loss)


def run_here(key, quick, unrolled_rnn):
    """Build one of workloads 1-6 with its peers and measure it in this process."""
    settings = _settings(quick)
    threads = peers.same_threads()
    rng = np.random.default_rng(SEED)
    workload = BUILDERS[key](rng, unrolled=unrolled_rnn) if key == "rnn" else BUILDERS[key](rng)
    workload.candidates += peers.candidates_for(workload)
    calls = key == "call_overhead"
    result = run_workload(workload,
                          rounds=settings["call_rounds" if calls else "rounds"],
                          sample_seconds=settings["call_sample_seconds" if calls
                                                  else "sample_seconds"])
    if peers.xla_threads():
        threads["XLA"] = peers.xla_threads()
    result["threads"] = threads
    result["notes"].append("threads per library (one process; each candidate's pool idle "
                           "while another runs): " + ", ".join(
                               f"{name} {count}" for name, count in threads.items()))
    return result


def _crashed(key, reason):
    return dict(key=key, title=TITLES[key], unit="µs" if key == "call_overhead" else "ms",
                target="", rounds=0, rows=[], notes=[], skipped={}, crash=reason)


def _failure_line(stderr):
    """The line of a dead worker's stderr that says why (an assertion, an exception)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "Assertion" in line or "Error" in line or "error" in line:
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else "no output"


def run_isolated(key, quick, unrolled_rnn):
    """Run ``run_here`` in a fresh worker process; a crash becomes the workload's result."""
    with tempfile.TemporaryDirectory(prefix="tracejit-bench-") as folder:
        output = Path(folder) / "result.json"
        command = [sys.executable, "-m", "benchmarks", "--worker", key, "--worker-output",
                   str(output), "--unrolled-rnn" if unrolled_rnn else "--no-unrolled-rnn"]
        if quick:
            command.append("--quick")
        completed = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True)
        if completed.returncode != 0 or not output.exists():
            signal = -completed.returncode if completed.returncode < 0 else None
            how = f"signal {signal}" if signal else f"exit status {completed.returncode}"
            return _crashed(key, f"worker died ({how}): {_failure_line(completed.stderr)}")
        return json.loads(output.read_text())


class OtherLoad:
    """How much of the machine other processes used while a workload ran: the CPU time
    all processes used (``/proc/stat``) minus this process's and its children's, as a
    fraction of wall time × cores. Shared machines are noisy; this says how noisy."""

    def __enter__(self):
        self.start = self._snapshot()
        return self

    def __exit__(self, *exc_info):
        end = self._snapshot()
        if self.start is None or end is None:
            self.fraction = None
            return
        busy, own, wall = (after - before for after, before in zip(end, self.start))
        self.fraction = max(0.0, (busy - own) / (wall * os.cpu_count())) if wall > 0 else None

    @staticmethod
    def _snapshot():
        try:
            with open("/proc/stat") as stat:
                fields = [int(value) for value in stat.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields) - fields[3] - fields[4]) / ticks  # all but idle and iowait
        times = os.times()
        own = times.user + times.system + times.children_user + times.children_system
        return busy, own, time.monotonic()


def wait_for_idle(max_seconds, window=5.0, threshold=0.15):
    """Wait (at most ``max_seconds``) until other processes use under ``threshold`` of the
    CPUs over a ``window``; returns the last share seen, or None when not waiting."""
    if max_seconds <= 0:
        return None
    deadline = time.monotonic() + max_seconds
    while True:
        with OtherLoad() as load:
            time.sleep(window)
        if load.fraction is None or load.fraction < threshold or time.monotonic() > deadline:
            return load.fraction


def run(keys, quick, unrolled_rnn, isolate=True, wait_idle=0.0):
    settings = _settings(quick)
    results = []
    for number, key in enumerate(KEYS, start=1):
        if key not in keys:
            continue
        share = wait_for_idle(wait_idle)
        waited = "" if share is None else f" (others use {share:.0%} of the CPUs)"
        print(f"[{time.strftime('%H:%M:%S')}] running {key}{waited} ...", file=sys.stderr,
              flush=True)
        with OtherLoad() as load:
            if key == "first_call":
                try:
                    result = first_call.first_call_workload(settings["processes"],
                                                            _reference_loss())
                except Exception as error:  # the library failed: report it, keep going
                    result = _crashed(key, f"{type(error).__name__}: {error}")
            elif key in mlp_step.KEYS:  # a worker of its own, in-process or not
                result = mlp_step.run_isolated(key, quick)
            elif key in extra_workloads.RUNNERS:  # fresh processes; may give several results
                result = extra_workloads.RUNNERS[key](quick)
            elif isolate:
                result = run_isolated(key, quick, unrolled_rnn)
            else:
                result = run_here(key, quick, unrolled_rnn)
        several = result if isinstance(result, list) else [result]
        for index, each in enumerate(several, start=1):
            each["other_load"] = load.fraction
            each["number"] = f"{number}.{index}" if len(several) > 1 else number
            results.append(each)
            print(report.format_workload(each["number"], each), end="\n\n", flush=True)
    return results


def _git_state():
    """The commit measured, and whether the library had uncommitted changes."""
    def git(*arguments):
        completed = subprocess.run(["git", *arguments], cwd=REPOSITORY, capture_output=True,
                                   text=True)
        return completed.stdout.strip() if completed.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain", "--", "tracer", "codegen", "runtime")
    return dict(commit=commit or None,
                library_changes=[line.split(maxsplit=1)[-1] for line in changed.splitlines()])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a short run: fewer rounds and processes, same sizes")
    parser.add_argument("--only", nargs="+", choices=KEYS, metavar="WORKLOAD",
                        help=f"run only these workloads ({', '.join(KEYS)})")
    parser.add_argument("--unrolled-rnn", action=argparse.BooleanOptionalAction, default=True,
                        help="also time tracejit jitting the whole padded sequence (its loop "
                             "unrolled: the longest compile of the suite); default: on")
    parser.add_argument("--in-process", action="store_true",
                        help="run workloads 1-6 in this process instead of one worker each")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                        help="before each workload, wait up to SECONDS for other processes "
                             "to leave the CPUs (under 15%% busy over 5 s)")
    parser.add_argument("--output", type=Path, default=RESULTS,
                        help="where the JSON, SVG chart and markdown go (default "
                             "benchmarks/results)")
    parser.add_argument("--worker", choices=BUILDERS, help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unrolled_rnn = args.unrolled_rnn
    if args.worker:
        result = run_here(args.worker, args.quick, unrolled_rnn)
        args.worker_output.write_text(json.dumps(result, default=str))
        return
    command = " ".join(["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])])

    started = time.perf_counter()
    facts = machine_facts()
    facts.update(_git_state())
    line = machine_line(facts)
    print(f"Machine: {line}")
    changes = facts["library_changes"]
    print(f"Measuring commit {facts['commit']}"
          + (f" plus uncommitted changes to {', '.join(changes)}" if changes else ""))
    print(f"Load average at start: {facts['load_average']:.2f} (the machine is shared: "
          "compare ratios within one run)")
    settings = _settings(args.quick)
    if args.quick:
        print(f"QUICK RUN: {settings['rounds']} rounds ({settings['call_rounds']} for the call "
              "overhead), 1 process per first-call figure, same sizes as the full run")
    print("× NumPy = NumPy eager's time / the candidate's; tracejit vs = the candidate's time /"
          " tracejit's (above 1: tracejit is faster); max rel diff = max |result - NumPy| / "
          "max |NumPy|\n")

    results = run(set(args.only or KEYS), args.quick, unrolled_rnn, not args.in_process,
                  args.wait_idle)
    seconds = time.perf_counter() - started
    facts["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    table = report.markdown_table(results)
    print("Summary (markdown):\n")
    print(table)
    print(f"\nMachine: {line}")
    print(f"Command: {command}; took {seconds / 60:.1f} min; load average "
          f"{facts['load_average']:.2f} at start, {facts['load_average_end']:.2f} at the end")

    output = args.output
    report.write_json(output / "benchmarks.json", dict(
        command=command,
        quick=args.quick,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        seconds=seconds,
        settings=settings,
        machine=facts,
        machine_line=line,
        workloads=results,
    ))
    (output / "README_table.md").write_text(
        report.readme_markdown(results, line, command, seconds, args.quick, facts))
    chart.write(output / "benchmarks.svg", results, line)
    written = ["benchmarks.json", "README_table.md", "benchmarks.svg"]
    print(f"Wrote {', '.join(str(output / name) for name in written)}")


if __name__ == "__main__":
    main()
