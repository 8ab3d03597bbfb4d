"""Side-by-side NumPy (OpenBLAS) vs tj_sgemm_own (gemm_gen.py) on the MLP's matmul shapes.

Candidates are run interleaved in random order, REPS rounds, and compared by medians; each
result is first checked against a float64 reference. Needs an AVX-512 CPU and a quiet machine
(the header line per shape reports how much CPU other processes used meanwhile).

Run from the repository root:

    python docs/experiments/sgemm_avx512/bench.py             # 2 threads (NumPy default
        # threads; ours: rows or columns split over 2 threads via ctypes + spinpool.py)
    OPENBLAS_NUM_THREADS=1 python docs/experiments/sgemm_avx512/bench.py --single  # 1 thread

Environment: REPS (rounds, default 60), GAP (seconds idle before each sample, default 0),
POOL (spin = spinpool.SpinPool, default; anything else = Event-based pool), SPIN_MS (spin
before sleeping, default 2). A dict argument overrides Gen parameters, e.g. "{'KC': 128}".
"""
import ast
import os
import random
import statistics
import sys
import threading
import time

import numpy as np
from gemm_gen import Kernel

SINGLE = "--single" in sys.argv
REPS = int(os.environ.get("REPS", "60"))
GAP = float(os.environ.get("GAP", "0"))  # seconds of idle before each sample (block mode)
params = dict(MR=8, NR=32, KC=256, MC=128, UNROLL=1, DIRECT_M=64)
for a in sys.argv[1:]:
    if a.startswith("{"):
        params.update(ast.literal_eval(a))
kern = Kernel(**params)


class Pool:
    """One persistent helper thread; the caller runs the other half itself."""

    def __init__(self):
        self.go = threading.Event()
        self.done = threading.Event()
        self.job = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            self.go.wait()
            self.go.clear()
            self.job()
            self.done.set()

    def run2(self, f0, f1):
        self.job = f1
        self.done.clear()
        self.go.set()
        f0()
        self.done.wait()


POOL = os.environ.get("POOL", "spin")
if POOL == "spin":
    from spinpool import SpinPool
    pool = SpinPool(spin_ms=float(os.environ.get("SPIN_MS", "2")))
else:
    pool = Pool()
rng = np.random.default_rng(1)

# (name, M, N, K, transA, transB)
SHAPES = [
    ("1 fwd 512x784@784x1024", 512, 1024, 784, 0, 0),
    ("2 dW1 X^T@dH 784x1024,K512", 784, 1024, 512, 1, 0),
    ("3 dH dY@W2^T 512x1024,K10", 512, 1024, 10, 0, 1),
    ("4 dW2 H^T@dY 1024x10,K512", 1024, 10, 512, 1, 0),
    ("5a 32x128@128x128", 32, 128, 128, 0, 0),
    ("5b 1x128@128x128", 1, 128, 128, 0, 0),
]


def make(M, N, K, tA, tB):
    A = rng.standard_normal((K, M) if tA else (M, K)).astype(np.float32)
    B = rng.standard_normal((N, K) if tB else (K, N)).astype(np.float32)
    return A, B


def both(f0, f1):
    """Run the two bound halves on the pool (f0 on the caller's thread)."""
    return lambda: pool.run2(f0, f1)


def candidates(M, N, K, tA, tB, A, B, C):
    opa, opb = (A.T if tA else A), (B.T if tB else B)
    c = {"numpy": lambda: np.matmul(opa, opb, out=C)}
    c["ours_1t"] = kern.bind(tA, tB, A, B, C, 0, M)
    if not SINGLE:
        h = (M // 2 + 7) // 8 * 8
        c["ours_2t_rows"] = both(kern.bind(tA, tB, A, B, C, 0, h, 0),
                                 kern.bind(tA, tB, A, B, C, h, M, 1))
        if N >= 64:
            hn = (N // 2 + 31) // 32 * 32
            c["ours_2t_cols"] = both(kern.bind(tA, tB, A, B, C, 0, M, 0, col_range=(0, hn)),
                                     kern.bind(tA, tB, A, B, C, 0, M, 1, col_range=(hn, N)))
    return c


def cpu_snapshot():
    """(system busy seconds over all CPUs, this process's CPU seconds, wall)."""
    f = open("/proc/stat").readline().split()[1:]
    vals = list(map(int, f))
    busy = sum(vals) - vals[3] - vals[4]  # minus idle, iowait
    hz = os.sysconf("SC_CLK_TCK")
    return busy / hz, time.process_time(), time.perf_counter()


def foreign_load(s0, s1):
    """CPUs used by other processes between two snapshots (0 = machine otherwise idle)."""
    return ((s1[0] - s0[0]) - (s1[1] - s0[1])) / (s1[2] - s0[2])


def timeit(f, n):
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n


print("POOL", POOL, "GAP", GAP, "params", params, "compile %.3f s" % kern.compile_s,
      "threads", 1 if SINGLE else 2)
print("loadavg before:", open("/proc/loadavg").read().strip())
for name, M, N, K, tA, tB in SHAPES:
    A, B = make(M, N, K, tA, tB)
    C = np.empty((M, N), np.float32)
    cands = candidates(M, N, K, tA, tB, A, B, C)
    ref = (A.T if tA else A).astype(np.float64) @ (B.T if tB else B).astype(np.float64)
    for nm, f in cands.items():  # check + warm
        C[:] = np.nan
        f()
        err = np.max(np.abs(C - ref)) / max(np.max(np.abs(ref)), 1e-30)
        assert err < 1e-5, (nm, err)
    flops = 2.0 * M * N * K
    inner = max(1, int(2e-3 / max(timeit(cands["numpy"], 3), 1e-7)))  # batch tiny calls to ~2 ms
    samples = {nm: [] for nm in cands}
    order = list(cands)
    snap0 = cpu_snapshot()
    for _ in range(REPS):
        random.shuffle(order)
        for nm in order:
            if GAP:  # let OpenBLAS's worker stop spinning (it spins ~0.1 s of CPU after a call)
                time.sleep(GAP)
                cands[nm]()
                samples[nm].append(statistics.median(timeit(cands[nm], inner) for _ in range(5)))
            else:
                samples[nm].append(timeit(cands[nm], inner))
    med = {nm: statistics.median(s) for nm, s in samples.items()}
    mn = {nm: min(s) for nm, s in samples.items()}
    base = med["numpy"]
    fl = foreign_load(snap0, cpu_snapshot())
    print(f"\n{name}   (inner={inner}, reps={REPS}, other processes used {fl:.2f} CPUs meanwhile)")
    for nm in cands:
        print(f"  {nm:13s} median {med[nm]*1e3:8.4f} ms  min {mn[nm]*1e3:8.4f} ms  "
              f"speedup vs numpy (median) {base/med[nm]:5.2f}x (min) {mn['numpy']/mn[nm]:5.2f}x  "
              f"{flops/med[nm]/1e9:7.1f} GFLOP/s")
print("\nloadavg after:", open("/proc/loadavg").read().strip())
