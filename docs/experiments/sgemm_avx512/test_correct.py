"""Correctness sweep for the experimental AVX-512 SGEMM (gemm_gen.tj_sgemm_own).

Checks every transA/transB combination over ragged M, N, K (1..100, K up to 600) against a
float64 reference, with the rows of C split in two like a thread pool would, then a split of
the columns, then K == 0 (C must be zeroed). Needs an AVX-512 CPU.

Run from the repository root:

    python docs/experiments/sgemm_avx512/test_correct.py            # default parameters
    python docs/experiments/sgemm_avx512/test_correct.py "{'KC': 128}"

Prints ``bad 0 worst err / (K*2^-24) = ...`` when every product is within K * 2^-24 of the
reference (relative to |A| @ |B|).
"""
import ast
import itertools
import sys

import numpy as np
from gemm_gen import Kernel

params = dict(MR=8, NR=32, KC=256, MC=128, UNROLL=1)
if len(sys.argv) > 1:
    params.update(ast.literal_eval(sys.argv[1]))
k = Kernel(**params)
print("params", params, "compile %.3f s" % k.compile_s)
rng = np.random.default_rng(0)
sizes = [1, 7, 13, 31, 33, 100]
worst = 0
bad = 0
for M, N, K in itertools.product(sizes, sizes, sizes + [300, 600]):
    for tA, tB in itertools.product((0, 1), (0, 1)):
        a = rng.standard_normal((K, M) if tA else (M, K)).astype(np.float32)
        bb = rng.standard_normal((N, K) if tB else (K, N)).astype(np.float32)
        opa = a.T if tA else a
        opb = bb.T if tB else bb
        ref = opa.astype(np.float64) @ opb.astype(np.float64)
        C = np.full((M, N), np.nan, np.float32)
        # split rows in two like a thread pool would
        h = M // 2
        k.call(tA, tB, a, bb, C, 0, h)
        k.call(tA, tB, a, bb, C, h, M, ws_idx=1)
        scale = np.abs(opa).astype(np.float64) @ np.abs(opb).astype(np.float64) + 1e-30
        err = np.max(np.abs(C - ref) / scale)
        worst = max(worst, err / (K * 2.0**-24))
        if not np.isfinite(err) or err > K * 2.0**-24:
            bad += 1
            if bad < 10:
                print("BAD", M, N, K, tA, tB, err)
# column split
M, N, K = 100, 97, 300
for tA, tB in itertools.product((0, 1), (0, 1)):
    a = rng.standard_normal((K, M) if tA else (M, K)).astype(np.float32)
    bb = rng.standard_normal((N, K) if tB else (K, N)).astype(np.float32)
    ref = (a.T if tA else a).astype(np.float64) @ (bb.T if tB else bb).astype(np.float64)
    C = np.full((M, N), np.nan, np.float32)
    k.call(tA, tB, a, bb, C, 0, M, col_range=(0, 48))
    k.call(tA, tB, a, bb, C, 0, M, 1, col_range=(48, N))
    e = np.max(np.abs(C - ref)) / np.max(np.abs(ref))
    print("colsplit", tA, tB, e)
    assert e < 1e-5
# K=0
C = np.full((5, 6), np.nan, np.float32)
k.call(0, 0, np.zeros((5, 0), np.float32), np.zeros((0, 6), np.float32), C, 0, 5)
assert (C == 0).all()
print("bad", bad, "worst err / (K*2^-24) =", worst)
