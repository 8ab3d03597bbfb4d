"""A warm start from disk describes the host, makes the LLJIT and links the pool's runtime,
the own GEMM and the guards' array check on a thread of their own while it reads its entry
(``machine_objects.link_ahead``): the pool then takes that native state and the loaded
program runs on it, the GEMM linked against it multiplies right on the pool's threads,
OpenBLAS's idle spin is still shortened, and a fork in the meantime leaves the child the
link lock free. Fresh processes: all of it is once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tracejit as tj
    from tracejit.codegen import array_guard, blas, gemm, llvm, machine_objects, parallel

    def f(x, y):
        return np.tanh(x) * y + 1.0

    x = np.linspace(-3, 3, 1 << 17).astype(np.float32)
    y = np.cos(x)
    report = {}
    own = blas.own_sgemm_enabled()  # (AVX-512F or AVX2 with FMA)
    step = tj.jit(f)  # its disk cache is the object store the per-machine objects are in
    if sys.argv[1] == "warm":
        assert llvm._generation["jit"] is None
        machine_objects.link_ahead()
        thread = llvm._ahead["thread"]
        # marked before it runs: its being alive does not stop the spin's shortening
        report["marked"] = thread in blas._threads_without_blas and blas._only_python_thread()
        pid = os.fork()  # waits for the thread (it holds the link lock while it works)
        if pid == 0:  # (linking in a forked child crashes in LLVM, with or without this)
            os._exit(0 if llvm._link_lock.acquire(timeout=10) else 3)
        report["child"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        ahead = parallel._linked_ahead["state"]  # the thread is done: the fork waited
        report["guard"] = array_guard._builtins.get(array_guard.NAME) is not None
        linked = gemm._linked_ahead.get(gemm.chosen_isa().entry) if own else None
        report["gemm"] = (linked is not None and linked["pool"] == ahead.address) == own
    report["same"] = [bool(np.allclose(step(x, y), f(x, y), rtol=1e-6, atol=1e-6))
                      for _ in range(2)]
    report["disk_hits"] = step.stats()["disk_hits"]
    if sys.argv[1] == "fill" and own:  # (the cache is the object store once a call used it)
        gemm.object_code()  # compiled and stored, as `tracejit cache prepare` does
    if sys.argv[1] == "warm":
        report["pool_took_it"] = (parallel.pool().library is ahead.library and
                                  parallel.pool().address == ahead.address and
                                  not parallel._linked_ahead)
        if own:  # the GEMM linked ahead is the one used, and its chunks run on the pool
            report["gemm_took_it"] = gemm.library() is linked["library"]
            a = np.random.default_rng(0).standard_normal((300, 200)).astype(np.float32)
            b = np.random.default_rng(1).standard_normal((200, 260)).astype(np.float32)
            report["gemm_right"] = bool(np.allclose(gemm.matmul(a, b), a @ b, rtol=1e-4,
                                                    atol=1e-4))
        else:
            report["gemm_took_it"] = report["gemm_right"] = True
        machine_objects.link_ahead()  # once per process
        report["once"] = llvm._ahead["thread"] is thread
    print(json.dumps(report))
""")


def _run(mode, folder, cache):
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=cache, TRACEJIT_NUM_THREADS="2")
    script = folder / "warm_start.py"  # a file: a function from -c has no cache key
    script.write_text(SCRIPT)
    completed = subprocess.run([sys.executable, str(script), mode], capture_output=True,
                               text=True, timeout=120, env=environment, cwd=folder)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_link_ahead_gives_the_pool_its_runtime_and_survives_a_fork(tmp_path,
                                                                   session_cache_dir):
    # The session's cache: the GEMM's object (0.7 s to compile) is built once per session.
    # The entries are this test's alone (they are keyed by the script's path and text).
    assert _run("fill", tmp_path, session_cache_dir) == {"same": [True, True],
                                                         "disk_hits": 0}
    assert _run("warm", tmp_path, session_cache_dir) == {
        "marked": True, "child": 0, "same": [True, True], "disk_hits": 1,
        "pool_took_it": True, "guard": True, "gemm": True, "gemm_took_it": True,
        "gemm_right": True, "once": True}
