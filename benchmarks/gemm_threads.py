"""Where the own GEMM's time goes on the pool's threads: a copy of its module with the
CPU's cycle counter read around the entry, each chunk and each packing call, run on the MLP
step's five products (issue 16: the two-thread scaling of the MLP train step).

    python -m benchmarks.gemm_threads [--batch 512] [--isa avx512] [--repeats 40]

For each product it prints the median call and, in that call, when the last chunk started
after the entry began (the pool's dispatch: ~0.5 us when the workers spin, 40-50 us when
one has gone to sleep on this VM), each chunk's time (the split and its balance), the wait
after the last chunk (the join), and the time spent in ``pack_a`` and ``pack_b`` summed over
the threads. ``TRACEJIT_NUM_THREADS`` sets the pool. The copy is compiled apart from the
object store: probes must never be cached as the GEMM. On a shared machine run it under
``chrt -f 10`` (SCHED_FIFO: other processes wait while it runs) or the threads' times
measure the others' load.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time

import numpy as np

EVENTS = 4096  # i64 slots: [count, (tag, value, cycles) * ...]; the packers' sums at the end
PACK_SLOTS = {"pack_a": EVENTS - 4, "pack_b": EVENTS - 2}  # (cycles, calls) each
ENTRY_START, CHUNK_START, CHUNK_END, ENTRY_END = range(4)


def _probe_ir(isa):
    """IR added to the GEMM module: ``probe(tag, value)`` appends an event, and wrappers
    that take the names of the chunk function, the packers and the epilogue entry (whose
    own definitions are renamed ``<name>_inner``)."""
    entry = isa.epilogue_entry
    entry_arguments = ["i64"] * 5 + ["ptr", "i64"] * 4 + ["ptr", "i64"]
    parameters = ", ".join(f"{kind} %a{index}" for index, kind in enumerate(entry_arguments))
    pack_parameters = ("i64 %a0, ptr %a1, i64 %a2, i64 %a3, i64 %a4, i64 %a5, i64 %a6, "
                       "ptr %a7")
    text = f"""
@"probe_events" = external global [{EVENTS} x i64]
declare i64 @llvm.readcyclecounter()
define i64 @"probe_cycles"() {{
  %t = call i64 @llvm.readcyclecounter()
  ret i64 %t
}}
define internal void @probe(i64 %tag, i64 %value) {{
  %t = call i64 @llvm.readcyclecounter()
  %at = atomicrmw add ptr @"probe_events", i64 3 seq_cst
  %slot = add i64 %at, 1
  %p0 = getelementptr i64, ptr @"probe_events", i64 %slot
  store i64 %tag, ptr %p0
  %p1 = getelementptr i64, ptr %p0, i64 1
  store i64 %value, ptr %p1
  %p2 = getelementptr i64, ptr %p0, i64 2
  store i64 %t, ptr %p2
  ret void
}}
define internal void @"tj_sgemm_chunk"(ptr %context, i64 %begin, i64 %end) {{
  call void @probe(i64 {CHUNK_START}, i64 %begin)
  call void @"tj_sgemm_chunk_inner"(ptr %context, i64 %begin, i64 %end)
  call void @probe(i64 {CHUNK_END}, i64 %begin)
  ret void
}}
define void @"{entry}"({parameters}) {{
  call void @probe(i64 {ENTRY_START}, i64 0)
  call void @"{entry}_inner"({parameters})
  call void @probe(i64 {ENTRY_END}, i64 0)
  ret void
}}
"""
    for packer, slot in PACK_SLOTS.items():
        text += f"""
define internal void @"{packer}"({pack_parameters}) {{
  %t0 = call i64 @llvm.readcyclecounter()
  call void @"{packer}_inner"({pack_parameters})
  %t1 = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %t1, %t0
  %sum = getelementptr i64, ptr @"probe_events", i64 {slot}
  %old = atomicrmw add ptr %sum, i64 %spent seq_cst
  %calls = getelementptr i64, ptr @"probe_events", i64 {slot + 1}
  %before = atomicrmw add ptr %calls, i64 1 seq_cst
  ret void
}}
"""
    return text


def probed_gemm(isa):
    """``(call(a, b, out, bias, activation) -> zero-argument call, events, cycles)``: the
    instrumented GEMM for ``isa`` (an ``Isa``), its event table and the cycle counter."""
    from tracejit.codegen import gemm, gemm_driver, llvm, parallel

    text = gemm_driver.module_ir(isa)
    renames = [("define internal void", "tj_sgemm_chunk"), ("define void", isa.epilogue_entry),
               ("define internal void", "pack_a"), ("define internal void", "pack_b")]
    for prefix, name in renames:
        definition = f'{prefix} @"{name}"('
        assert text.count(definition) == 1, f"the GEMM module's {name} moved"
        text = text.replace(definition, f'define internal void @"{name}_inner"(')
    compiled = llvm.compile_module(text + _probe_ir(isa), opt_level=2)
    pool = parallel.pool()
    workspaces = gemm._Workspaces(2 * pool.threads, isa.workspace_elements, isa.dtype)
    events = (ctypes.c_int64 * EVENTS)()
    library = llvm.load(compiled.object_code, [isa.epilogue_entry, "probe_cycles"], imports={
        **pool.symbols(), gemm_driver.WORKSPACES_SYMBOL: workspaces.address,
        "probe_events": ctypes.addressof(events)})
    entry = gemm._EPILOGUE_SIGNATURE(library.addresses[isa.epilogue_entry])
    cycles = ctypes.CFUNCTYPE(ctypes.c_int64)(library.addresses["probe_cycles"])

    def call(a, b, out, bias=None, activation=0):
        (trans_a, lda), (trans_b, ldb) = gemm._layout(a), gemm._layout(b)
        arguments = (trans_a, trans_b, a.shape[0], b.shape[1], a.shape[1], a.ctypes.data, lda,
                     b.ctypes.data, ldb, out.ctypes.data, out.strides[0] // out.itemsize,
                     None if bias is None else bias.ctypes.data, activation)
        return lambda: entry(*arguments)

    call.keep = (library, workspaces, events)  # alive as long as the calls
    return call, events, cycles


def cycles_per_microsecond(cycles):
    start, clock = cycles(), time.perf_counter()
    time.sleep(0.05)
    return (cycles() - start) / (time.perf_counter() - clock) / 1e6


def mlp_products(batch, rng):
    """The MLP step's products (784 -> 1024 relu -> 10) at ``batch``: name -> (a, b, out,
    bias, activation)."""
    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    x, w1, d_pre, hidden, d_logits, w2 = (normal(batch, 784), normal(784, 1024),
                                           normal(batch, 1024), normal(batch, 1024),
                                           normal(batch, 10), normal(1024, 10))
    empty = np.empty
    return {"x @ w1 + b1, relu": (x, w1, empty((batch, 1024), np.float32), normal(1024), 1),
            "dW1 = x.T @ d_pre": (x.T, d_pre, empty((784, 1024), np.float32), None, 0),
            "logits = h @ w2": (hidden, w2, empty((batch, 10), np.float32), None, 0),
            "dW2 = h.T @ d_logits": (hidden.T, d_logits, empty((1024, 10), np.float32), None, 0),
            "d_h = d_logits @ w2.T": (d_logits, w2.T, empty((batch, 1024), np.float32), None, 0)}


def summarize(records, per_us):
    """One product's line from its calls' events and packing sums."""
    totals, rows = [], []
    for events, packing in records:
        start = next(t for tag, _, t in events if tag == ENTRY_START)
        end = next(t for tag, _, t in events if tag == ENTRY_END)
        begun = {value: t for tag, value, t in events if tag == CHUNK_START}
        ended = {value: t for tag, value, t in events if tag == CHUNK_END}
        totals.append((end - start) / per_us)
        rows.append(dict(
            dispatch=(max(begun.values()) - start) / per_us,
            chunks=[(value, (ended[value] - begun[value]) / per_us) for value in sorted(begun)],
            join=(end - max(ended.values())) / per_us,
            packing={name: spent / per_us for name, spent in packing.items()}))
    middle = int(np.argsort(totals)[len(totals) // 2])
    row = rows[middle]
    chunks = ", ".join(f"{value}: {spent:.0f}" for value, spent in row["chunks"])
    packing = ", ".join(f"{name} {spent:.0f}" for name, spent in row["packing"].items())
    return (f"median {np.median(totals):8.1f} us (min {min(totals):8.1f}); in that call: last "
            f"chunk started +{row['dispatch']:.1f}, chunks {{{chunks}}}, join "
            f"{row['join']:.1f}, packing {packing} (all threads)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--isa", default=None, help="avx512 or avx2 (default: the host's)")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args(argv)
    from tracejit.codegen import gemm
    from tracejit.runtime.config import configure_codegen

    configure_codegen()  # the pool's threads are TRACEJIT_NUM_THREADS
    isa = gemm._resolve(args.isa)
    call, events, cycles = probed_gemm(isa)
    per_us = cycles_per_microsecond(cycles)
    products = mlp_products(args.batch, np.random.default_rng(0))
    calls = {}
    for name, (a, b, out, bias, activation) in products.items():
        calls[name] = call(a, b, out, bias, activation)
        calls[name]()
        want = a.astype(np.float64) @ b + (0 if bias is None else bias)
        want = np.maximum(want, 0) if activation else want
        assert np.allclose(out, want, rtol=1e-3, atol=1e-3 * np.sqrt(a.shape[1])), name
    records = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, run in calls.items():
            events[:] = [0] * EVENTS
            run()
            count = events[0] // 3
            table = [tuple(events[1 + 3 * index: 4 + 3 * index]) for index in range(count)]
            packing = {packer: events[slot] for packer, slot in PACK_SLOTS.items()}
            records[name].append((table, packing))
    from tracejit.codegen import parallel

    print(f"own GEMM {isa.name}, batch {args.batch}, {parallel.pool().threads} pool threads,"
          f" {args.repeats} calls each, load {os.getloadavg()[0]:.2f} (times in us)")
    for name, record in records.items():
        print(f"  {name:22} {summarize(record, per_us)}")


if __name__ == "__main__":
    main()
