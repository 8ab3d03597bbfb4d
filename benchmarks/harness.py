"""Timing and checking shared by every workload of ``python -m benchmarks``.

A *candidate* is one way of computing a workload (NumPy eager, tracejit, torch.compile,
...): a zero-argument call plus a function that turns what the call returns into NumPy
arrays, so every candidate's result can be checked against NumPy eager. Candidates of one
workload are timed in one process, round-robin (the starting candidate rotates every
round), each sample being enough calls to last a few milliseconds; the figure reported is
the median sample.

>>> import numpy as np
>>> x = np.ones(4)
>>> timing = measure_interleaved([Candidate("numpy", lambda: x + 1)], rounds=3,
...                              sample_seconds=0.001)
>>> sorted(timing["numpy"])[:3]
['calls_per_sample', 'cpu_ms_per_call', 'faults_per_call']
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

NUMPY = "NumPy eager"
TRACEJIT = "tracejit"
# Per call, medians over a row's samples (``measure_interleaved``).
USAGE_FIELDS = ("faults_per_call", "preemptions_per_call", "cpu_ms_per_call")


@dataclass
class Candidate:
    """One way to run a workload.

    ``call`` runs it once; ``result`` maps what ``call`` returned to NumPy arrays (a pytree
    of them) for the agreement check; ``peer`` names the column it belongs to in the summary
    table (``"tracejit"`` for tracejit's own rows); ``note`` says what the candidate does
    differently, and ``info`` is filled in after the run (compiles, fallbacks, ...).
    """

    name: str
    call: object
    result: object = None
    peer: str = ""
    note: str = ""
    info: dict = field(default_factory=dict)
    after_run: object = None  # called once timing is over: extra facts for ``info``

    def __post_init__(self):
        self.peer = self.peer or self.name
        self.result = self.result or as_numpy

    @property
    def is_tracejit(self):
        return self.peer == TRACEJIT


def as_numpy(value):
    """Torch tensors, JAX arrays, Tensors and nested tuples/lists of them, as ndarrays."""
    if isinstance(value, (tuple, list)):
        return [as_numpy(item) for item in value]
    if type(value).__module__.partition(".")[0] == "torch":
        return value.detach().cpu().numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # tracejit.Tensor
        return np.asarray(value.numpy())
    return np.asarray(value)  # ndarrays, NumPy and Python scalars, JAX arrays


def leaves(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in leaves(item)]
    return [np.asarray(tree)]


def max_relative_difference(actual, expected):
    """max |actual - expected| / max |expected|, over all leaves (the worst leaf)."""
    actual_leaves, expected_leaves = leaves(actual), leaves(expected)
    if len(actual_leaves) != len(expected_leaves):
        return float("inf")
    worst = 0.0
    for got, want in zip(actual_leaves, expected_leaves):
        if got.shape != want.shape:
            return float("inf")
        want = want.astype(np.float64)
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        error = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        worst = max(worst, error / scale if scale else error)
    return worst


def seconds_per_call(call, number):
    """Mean seconds of ``number`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(number):
        call()
    return (time.perf_counter() - start) / number


def median_per_call(calls, repeats, target_seconds, probe=20):
    """``({name: median seconds per call}, calls per sample)`` for a dict of small calls,
    timed in rounds with a rotating first candidate (no one always runs on a cold or warm
    cache) and no pauses: for calls of microseconds, where thread pools do not matter.
    The calls per sample come from ``probe`` calls of the slowest candidate."""
    for call in calls.values():  # warm up caches and lazy imports
        call()
    slowest = max(seconds_per_call(call, probe) for call in calls.values())
    number = max(1, int(target_seconds / slowest))
    samples = {name: [] for name in calls}
    names = list(calls)
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(seconds_per_call(calls[name], number))
    return {name: statistics.median(values) for name, values in samples.items()}, number


def _usage():
    """This process's minor page faults, involuntary context switches and CPU seconds (all
    threads) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_nivcsw, usage.ru_utime + usage.ru_stime


def measure_interleaved(candidates, rounds, sample_seconds, warmup=3, pause_seconds=0.15,
                        min_calls=1):
    """Median seconds per call of each candidate, timed round-robin in one process.

    Each candidate is first called ``warmup`` times (compiles, caches, thread pools), then
    the calls per sample are chosen so that one sample lasts about ``sample_seconds`` (and
    holds at least ``min_calls``). Before each sample the process sleeps ``pause_seconds``
    and then calls the candidate once, untimed. The pause lets the worker threads the
    previous candidate left spin-waiting go to sleep (OpenBLAS's spin for about 0.1 s after
    a call; interleaved without the pause, torch.compile's MLP step measured 22 ms instead
    of 11); the untimed call wakes the candidate's own threads, so it is not charged for
    waking them either.

    Each sample also reads the process's resource usage, so a slow row says why: per call,
    the median over samples of the minor page faults (fresh memory: the allocator gave
    pages back), the involuntary context switches (``preemptions``: a thread of this
    process lost its core, to another process or to another of its own threads, such as a
    library's pool spinning) and the CPU milliseconds of all threads (above the wall time
    × the candidate's threads: something else in the process ran).
    """
    for candidate in candidates:
        for _ in range(warmup):
            candidate.call()
    numbers = {}
    for candidate in candidates:
        once = min(seconds_per_call(candidate.call, 1) for _ in range(3))
        numbers[candidate.name] = max(min_calls, int(sample_seconds / max(once, 1e-9)))
    samples = {candidate.name: [] for candidate in candidates}
    usage = {candidate.name: [] for candidate in candidates}
    for round_index in range(rounds):
        shift = round_index % len(candidates)
        for candidate in candidates[shift:] + candidates[:shift]:
            time.sleep(pause_seconds)
            candidate.call()
            number = numbers[candidate.name]
            before = _usage()
            samples[candidate.name].append(seconds_per_call(candidate.call, number))
            usage[candidate.name].append([(after - start) / number
                                          for after, start in zip(_usage(), before)])
    return {
        name: dict(median_s=statistics.median(values), samples_s=values,
                   calls_per_sample=numbers[name],
                   faults_per_call=statistics.median(row[0] for row in usage[name]),
                   preemptions_per_call=statistics.median(row[1] for row in usage[name]),
                   cpu_ms_per_call=statistics.median(row[2] for row in usage[name]) * 1e3)
        for name, values in samples.items()
    }


@dataclass
class Workload:
    """One line of DESIGN.md §6: its candidates and how their results are compared.

    ``normalize`` maps a candidate's result (as NumPy arrays) to what is compared (for a
    train step: the loss and the gradients implied by the update); ``unit`` is "ms" or
    "µs"; ``notes`` say what each candidate does, ``skipped`` which peers did not run and
    why; ``inputs`` are the arrays every candidate reads (peers are built from them).
    """

    key: str
    title: str
    candidates: list
    unit: str = "ms"
    normalize: object = None
    tolerance: float = 1e-3
    target: str = ""
    notes: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)  # the arrays every candidate reads
    # Each sample holds at least this many calls (``measure_interleaved``'s ``min_calls``).
    min_calls: int = 1


def _describe(error):
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def run_workload(workload, rounds, sample_seconds, pause_seconds=0.15):
    """Check every candidate against NumPy eager, then time them interleaved.

    Returns one row per candidate (a dict); a candidate that raises is reported with its
    error instead of a time, one whose result differs by more than the workload's tolerance
    is timed but marked as wrong. ``first_call_ms`` is the checking call, which compiles.
    """
    normalize = workload.normalize or (lambda tree: tree)
    reference = reference_dtypes = None
    checked, rows = [], {}
    first_calls = {}
    for candidate in workload.candidates:
        try:
            start = time.perf_counter()
            output = candidate.call()
            first_calls[candidate.name] = time.perf_counter() - start
            compared = normalize(candidate.result(output))
        except Exception as error:  # a failing candidate is a finding, not a crash
            rows[candidate.name] = dict(status=f"crash: {_describe(error)}", median=None,
                                        max_rel_diff=None)
            continue
        if reference is None and candidate.peer == NUMPY:
            reference = compared
            reference_dtypes = [leaf.dtype for leaf in leaves(candidate.result(output))]
        dtypes = [leaf.dtype for leaf in leaves(candidate.result(output))]
        if reference is not None and dtypes != reference_dtypes:
            candidate.info["dtypes"] = f"returns {', '.join(sorted({str(d) for d in dtypes}))}"
        checked.append((candidate, compared))
    timed = [candidate for candidate, _ in checked]
    timing = (measure_interleaved(timed, rounds, sample_seconds, pause_seconds=pause_seconds,
                                  min_calls=workload.min_calls) if timed else {})
    scale = 1e6 if workload.unit == "µs" else 1e3
    for candidate, compared in checked:
        if candidate.after_run is not None:
            candidate.info.update(candidate.after_run())
        difference = (max_relative_difference(compared, reference)
                      if reference is not None else float("nan"))
        status = "ok"
        if candidate.info.get("eager_calls"):
            reasons = "; ".join(sorted(candidate.info["eager_calls"]))
            status = f"eager fallback: {reasons}"
        if difference > workload.tolerance:
            status = f"WRONG result (max rel diff {difference:.1e})"
        measured = timing[candidate.name]
        rows[candidate.name] = dict(status=status, median=measured["median_s"] * scale,
                                    samples=[value * scale for value in measured["samples_s"]],
                                    calls_per_sample=measured["calls_per_sample"],
                                    **{name: measured[name] for name in USAGE_FIELDS},
                                    max_rel_diff=difference,
                                    first_call_ms=first_calls[candidate.name] * 1e3)
    numpy_median = next((rows[c.name]["median"] for c in workload.candidates
                         if c.peer == NUMPY and rows[c.name]["median"]), None)
    tracejit_median = next((rows[c.name]["median"] for c in workload.candidates
                            if c.is_tracejit and rows[c.name]["median"]), None)
    result = []
    for candidate in workload.candidates:
        row = dict(candidate=candidate.name, peer=candidate.peer, note=candidate.note,
                   info=candidate.info, **rows[candidate.name])
        median = row["median"]
        row["x_numpy"] = numpy_median / median if median and numpy_median else None
        row["tracejit_vs"] = median / tracejit_median if median and tracejit_median else None
        result.append(row)
    return dict(key=workload.key, title=workload.title, unit=workload.unit,
                target=workload.target, tolerance=workload.tolerance, rounds=rounds,
                notes=workload.notes, skipped=workload.skipped, rows=result)


# --- the machine ------------------------------------------------------------------------------
def _cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _version(distribution):
    """The installed version of a distribution, without importing it (None if absent)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def machine_facts():
    """CPU, cores and the versions of everything that is timed."""
    import llvmlite
    import llvmlite.binding as llvm

    flags = _cpu_flags()
    simd = next((name for name, flag in (("AVX-512", "avx512f"), ("AVX2", "avx2"),
                                         ("AVX", "avx")) if flag in flags), "")
    facts = dict(
        cpu=_cpu_model(),
        llvm_cpu=llvm.get_host_cpu_name(),
        simd=simd,
        cores=os.cpu_count(),
        load_average=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        platform=platform.platform(),
        python=platform.python_version(),
        numpy=np.__version__,
        llvmlite=llvmlite.__version__,
        llvm=".".join(map(str, llvm.llvm_version_info)),
    )
    from tracejit.runtime.version import __version__ as tracejit_version

    facts["tracejit"] = tracejit_version
    for name in ("torch", "jax", "jaxlib", "numba", "numexpr"):
        facts[name] = _version(name)
    from .gemm import _blas_kernel

    facts["openblas"] = _blas_kernel()
    facts["openblas_environment"] = {name: os.environ.get(name, "(unset)")
                                     for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    return facts


def machine_line(facts):
    """The one-line summary printed above the tables and pasted under them."""
    peers = ", ".join(f"{name} {facts[name]}" for name in ("torch", "jax", "numba", "numexpr")
                      if facts.get(name))
    return (f"{facts['cpu']} ({facts['llvm_cpu']}, {facts['simd'] or 'no AVX'}), "
            f"{facts['cores']} cores, Python {facts['python']}, NumPy {facts['numpy']}, "
            f"llvmlite {facts['llvmlite']} / LLVM {facts['llvm']}, tracejit "
            f"{facts['tracejit']}" + (f"; {peers}" if peers else "")
            + (f"; OpenBLAS kernel {facts['openblas']}, " + ", ".join(
                f"{name}={value}" for name, value in facts["openblas_environment"].items())
               if facts.get("openblas") else ""))
