"""A warm start from disk makes the LLJIT and links the pool's runtime and the guards' array
check on a thread of its own while it reads its entry (``machine_objects.link_ahead``): the
pool then takes that runtime and the loaded program runs on it, OpenBLAS's idle spin is
still shortened, and a fork in the meantime leaves the child the link lock free. Fresh
processes: all of it is once per process."""

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
    from tracejit.codegen import array_guard, blas, llvm, machine_objects, parallel

    def f(x, y):
        return np.tanh(x) * y + 1.0

    x = np.linspace(-3, 3, 1 << 17).astype(np.float32)
    y = np.cos(x)
    report = {}
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
        ahead = parallel._linked_ahead["runtime"]  # the thread is done: the fork waited
        report["guard"] = array_guard._builtins.get(array_guard.NAME) is not None
    step = tj.jit(f)
    report["same"] = [bool(np.allclose(step(x, y), f(x, y), rtol=1e-6, atol=1e-6))
                      for _ in range(2)]
    report["disk_hits"] = step.stats()["disk_hits"]
    if sys.argv[1] == "warm":
        report["pool_took_it"] = parallel.pool().library is ahead and not parallel._linked_ahead
        machine_objects.link_ahead()  # once per process
        report["once"] = llvm._ahead["thread"] is thread
    print(json.dumps(report))
""")


def _run(mode, folder):
    environment = dict(os.environ, TRACEJIT_CACHE_DIR=str(folder), TRACEJIT_NUM_THREADS="2")
    script = folder / "warm_start.py"  # a file: a function from -c has no cache key
    script.write_text(SCRIPT)
    completed = subprocess.run([sys.executable, str(script), mode], capture_output=True,
                               text=True, timeout=120, env=environment, cwd=folder)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_link_ahead_gives_the_pool_its_runtime_and_survives_a_fork(tmp_path):
    assert _run("fill", tmp_path) == {"same": [True, True], "disk_hits": 0}
    assert _run("warm", tmp_path) == {"marked": True, "child": 0, "same": [True, True],
                                      "disk_hits": 1, "pool_took_it": True, "guard": True,
                                      "once": True}
