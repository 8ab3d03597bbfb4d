"""NumPy's OpenBLAS threads sleep soon after each call once tracejit's pool starts
(``codegen/blas.py``: ``shorten_openblas_idle_spin``), and NumPy's results stay right.

The change stops OpenBLAS's threads and lets its next call start them again, so each
check runs in a fresh process: NumPy's matmul (threaded level-3 and level-2 calls) before
and after, from several Python threads at once, and in a forked child.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tracejit.codegen import blas

# (NumPy 2.5's bundled OpenBLAS, on Python 3.12+, exports no openblas_thread_timeout:
# shorten_openblas_idle_spin leaves its spin alone there)
pytestmark = pytest.mark.skipif(
    not blas.openblas() or blas.openblas_thread_timeout() is None,
    reason="no bundled OpenBLAS with openblas_thread_timeout")

PRELUDE = textwrap.dedent("""
    import ctypes, os, sys
    from concurrent.futures import ThreadPoolExecutor
    import numpy as np
    from tracejit.codegen import blas, parallel

    library = blas._library()[0]
    library.openblas_thread_timeout.restype = ctypes.c_uint
    rng = np.random.default_rng(0)
    # (m, k, n): threaded level-3 products, a level-2 one (n = 1) and a small one
    SHAPES = [(512, 1024, 256), (300, 700, 513), (1024, 1024, 1), (64, 64, 64)]
    OPERANDS = [(rng.standard_normal((m, k)).astype(dtype),
                 rng.standard_normal((k, n)).astype(dtype))
                for m, k, n in SHAPES for dtype in (np.float32, np.float64)]
    BEFORE = [a @ b for a, b in OPERANDS]
    EXACT = [a.astype(np.float64) @ b.astype(np.float64) for a, b in OPERANDS]

    def all_right():
        for (a, b), exact in zip(OPERANDS, EXACT):
            tolerance = 1e-4 if a.dtype == np.float32 else 1e-11
            if not np.allclose(a @ b, exact, rtol=tolerance, atol=tolerance * np.sqrt(a.shape[1])):
                return False
        return True
""")


def run(body, **environment):
    env = {key: value for key, value in os.environ.items()
           if key not in ("OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS")}
    env.update(environment)
    completed = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                               env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout.split()


def test_pool_start_shortens_the_spin_and_numpy_stays_right():
    out = run("""
        threads = library.scipy_openblas_get_num_threads64_()
        parallel.set_thread_count(2)
        parallel.pool()
        print(threads, library.openblas_thread_timeout(), blas.shorten_openblas_idle_spin())
        assert all_right()
        # the same OpenBLAS with the same threads splits the same way: equal results
        assert all(np.array_equal(a @ b, before) for (a, b), before in zip(OPERANDS, BEFORE))
        with ThreadPoolExecutor(max_workers=4) as executor:
            print(all(executor.map(lambda _: all_right(), range(16))))
    """, OPENBLAS_NUM_THREADS="2")
    threads, timeout, changed, concurrent = out
    assert threads == "2"
    assert timeout == str(blas.OPENBLAS_IDLE_SPIN_LOG2)
    assert changed == "True"
    assert concurrent == "True"

def test_environment_is_given_back():
    """The variable is set for OpenBLAS's read only: not left for child processes, and a
    value set after OpenBLAS loaded (which it never read) is kept."""
    out = run("""
        parallel.set_thread_count(2)
        parallel.pool()
        print("OPENBLAS_THREAD_TIMEOUT" in os.environ, library.openblas_thread_timeout())
    """, OPENBLAS_NUM_THREADS="2")
    assert out == ["False", str(blas.OPENBLAS_IDLE_SPIN_LOG2)]
    out = run("""
        os.environ["OPENBLAS_THREAD_TIMEOUT"] = "9"
        print(blas.shorten_openblas_idle_spin(), os.environ["OPENBLAS_THREAD_TIMEOUT"])
    """, OPENBLAS_NUM_THREADS="2")
    assert out == ["True", "9"]


def test_forked_child_after_the_change_multiplies_right():
    out = run("""
        parallel.set_thread_count(2)
        parallel.pool()
        pid = os.fork()
        if pid == 0:
            os._exit(0 if all_right() else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), all_right())
    """, OPENBLAS_NUM_THREADS="2")
    assert out == ["0", "True"]


@pytest.mark.parametrize("environment, timeout", [
    ({"OPENBLAS_THREAD_TIMEOUT": "7", "OPENBLAS_NUM_THREADS": "2"}, "7"),  # the user's
    ({"OPENBLAS_NUM_THREADS": "1"}, "0"),  # OpenBLAS has no threads to spin
])
def test_left_alone(environment, timeout):
    out = run("""
        print(blas.shorten_openblas_idle_spin(), library.openblas_thread_timeout(),
              all_right())
    """, **environment)
    assert out == ["False", timeout, "True"]


def test_left_alone_while_another_thread_may_be_in_openblas():
    """Another Python thread multiplying (as NumPy runs eagerly during a background
    compile): OpenBLAS's threads are not stopped under it."""
    out = run("""
        import threading
        stop = threading.Event()
        results = []

        def multiply():
            while not stop.is_set():
                results.append(all_right())

        other = threading.Thread(target=multiply)
        other.start()
        changed = blas.shorten_openblas_idle_spin()
        stop.set()
        other.join()
        print(changed, library.openblas_thread_timeout(), all(results) and all_right())
    """, OPENBLAS_NUM_THREADS="2")
    assert out == ["False", "0", "True"]


def test_tracejit_llvm_helper_thread_does_not_count_as_another_thread():
    """The LLVM helper thread (second compile part) exists before a script's first threaded
    call and never calls OpenBLAS: the spin is still shortened (it was not, so the MLP step
    shared its cores with OpenBLAS's spinning threads)."""
    out = run("""
        import threading
        from tracejit.codegen import llvm
        llvm._helper_thread().submit(lambda: None).result()
        names = sorted(thread.name for thread in threading.enumerate())
        parallel.set_thread_count(2)
        parallel.pool()
        print(len(names), library.openblas_thread_timeout(), all_right())
    """, OPENBLAS_NUM_THREADS="2")
    assert out == ["2", str(blas.OPENBLAS_IDLE_SPIN_LOG2), "True"]
