"""A/B in one process: a fused kernel out = 2*exp(x)+1 over 1024 x 1024 float64 (and
float32), with NumPy's exp loop per 1024-element chunk (codegen/numpy_loops.py) against
tracejit's own exp (codegen/math_exp.py, vectorized by LLVM), on 1 and 2 threads (rows
split in halves, ctypes drops the GIL); plus how many elements the own exp differs from
np.exp on. Run: .venv/bin/python docs/experiments/numpy_exact_math/bench.py"""

import ctypes
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llvmlite import ir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../tests/codegen"))
from test_numpy_loops import chunked_kernel  # noqa: E402

from tracejit.codegen import llvm, math_exp  # noqa: E402
from tracejit.codegen.counted_loop import counted_loop  # noqa: E402

I64, PTR = ir.IntType(64), ir.PointerType()


def own_kernel(dtype):
    element = ir.DoubleType() if dtype == np.float64 else ir.FloatType()
    module = ir.Module(name="own_exp")
    kernel = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64]), "kernel")
    builder = ir.IRBuilder(kernel.append_basic_block("entry"))
    x, out, n = kernel.args

    def body(i):
        value = builder.load(builder.gep(x, [i], source_etype=element), typ=element)
        y = math_exp.exp(builder, value)
        builder.store(builder.fadd(builder.fmul(y, element(2.0)), element(1.0)),
                      builder.gep(out, [i], source_etype=element))
    counted_loop(builder, I64(0), n, body, wrap_flags=("nsw", "nuw"))
    builder.ret_void()
    compiled = llvm.compile_module(str(module))
    library = llvm.load(compiled.object_code, ["kernel"], {})
    function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        library.addresses["kernel"])

    def run(x):
        out = np.empty_like(x)
        function(x.ctypes.data, out.ctypes.data, x.size)
        return out
    run.library = library
    return run


def threaded(run, x, pool, threads):
    if threads == 1:
        return run(x)
    halves = np.array_split(x, threads)
    return np.concatenate(list(pool.map(run, halves)))


def best(fn, repeats=15):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1 << 20) * 5).astype(dtype)
    numpy_run, own_run = chunked_kernel("exp", dtype, 1024), own_kernel(dtype)
    expected = np.exp(x) * dtype(2) + dtype(1)
    bits = np.int64 if dtype == np.float64 else np.int32
    differ_exp = np.count_nonzero(own_run(x).view(bits) != expected.view(bits))
    same = np.array_equal(numpy_run(x).view(bits), expected.view(bits))
    print(f"{np.dtype(dtype).name}: NumPy-loop kernel bit-equal: {same}; own-exp kernel "
          f"differs on {differ_exp} of {x.size} ({100 * differ_exp / x.size:.2f}%)")
    with ThreadPoolExecutor(2) as pool:
        for threads in (1, 2):
            rows = {}
            for _ in range(3):  # alternate A/B
                for label, run in (("numpy", numpy_run), ("own", own_run)):
                    t = best(lambda run=run, threads=threads: threaded(run, x, pool, threads))
                    rows[label] = min(rows.get(label, 1e9), t)
            eager = best(lambda: np.exp(x) * dtype(2) + dtype(1))
            print(f"  {threads} thread(s): NumPy loop {1e9 * rows['numpy'] / x.size:.2f} "
                  f"ns/elem, own exp {1e9 * rows['own'] / x.size:.2f} ns/elem, eager "
                  f"np.exp*2+1 {1e9 * eager / x.size:.2f} ns/elem")


for dtype in (np.float64, np.float32):
    measure(dtype)
