"""Review 16 of this session's changes: wrong answers, wrong messages and unsafe states found
by probing what landed, each test failing before its fix.

* 00e262f (user_location memoized per code object and line) and the older per-code cache
  of rewritten functions (tracer/rewritten_code.py): code objects compare equal by content,
  not by file, so the same function in two files (a copied script, a vendored module)
  traced the first file's rewritten code and its guards and tracebacks named the first
  file. Both caches now key by file too.
* Found while probing c3d3d55 (older than this session): in code tracejit runs as it is
  (no source to rewrite: exec'd or generated code, a library's, or a function under a
  ``functools.wraps`` decorator), ``np.add(x, 1, out=s)``
  into a NumPy array ``s`` made there swapped in a traced copy the later plain NumPy
  operations on ``s`` (``s += 1``, ``s[...] = s + 1``) never reached: the result lacked
  them, on the traced call too. Such a write now runs the call eagerly, with the line.
* e4e1a20 (OpenBLAS's idle spin shortened with tracejit's LLVM helper alive): the helper
  was remembered by thread ident, and a forked child's first new thread gets the parent's
  helper's ident, so a user's thread that may be inside OpenBLAS was taken for tracejit's
  and the pool's start could stop OpenBLAS's threads under it. The helper is now remembered
  by its Thread object.
"""

import functools
import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracejit as tj
from tracejit.codegen import blas

SAME_FUNCTION = textwrap.dedent("""\
    import numpy as np


    def step(x):
        if x.sum() > 0:
            return x * 2.0
        return x - 1.0
""")


def _module_from(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_same_function_in_two_files_names_its_own_file(tmp_path):
    modules = []
    for name in ("review16_copy_a", "review16_copy_b"):
        path = tmp_path / f"{name}.py"
        path.write_text(SAME_FUNCTION)
        modules.append((str(path), _module_from(path, name)))
    assert modules[0][1].step.__code__ == modules[1][1].step.__code__  # what misled the caches
    x = np.arange(1.0, 5.0)
    for path, module in modules:
        f = tj.jit(module.step, cache="memory")
        for _ in range(2):
            np.testing.assert_array_equal(f(x), module.step(x))
        guards = [line for line in f.explain().splitlines() if " at " in line and "guard" in line]
        assert guards and all(f"{path}:5" in line for line in guards), f.explain()


@pytest.mark.skipif(not blas.openblas() or not hasattr(os, "fork"),
                    reason="no bundled OpenBLAS or no fork")
def test_a_forked_childs_thread_is_not_taken_for_the_llvm_helper():
    """In a child forked after the helper started, the first thread the user starts gets the
    helper's ident: it must still count as a thread that may be inside OpenBLAS."""
    script = textwrap.dedent("""
        import os, threading
        from tracejit.codegen import blas, llvm
        llvm._helper_thread().submit(lambda: None).result()
        assert blas._only_python_thread()  # the helper does not count
        pid = os.fork()
        if pid == 0:
            started, stop = threading.Event(), threading.Event()
            user = threading.Thread(target=lambda: (started.set(), stop.wait()))
            user.start()
            started.wait()
            alone = blas._only_python_thread()
            stop.set()
            user.join()
            os._exit(3 if alone else 0)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["0"], completed.stdout + completed.stderr


# --- found while probing bbef1d7 (loop-filled lists returned); older than it ------------------
def states_then_shift(x):
    hs = []
    h = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        h = h + x[t]
        hs.append(h)       # the last entry is h itself after the loop
    h += 100.0             # NumPy: hs[-1] sees it
    return hs, np.stack(hs)


def test_an_inplace_write_after_the_loop_reaches_the_last_appended_entry():
    """A captured loop's list keeps its entries in a buffer of copies: the in-place write
    into the carry the last trip appended (h += 100) is refused (the call runs eagerly,
    ``loop_containers.note_entry_aliases``), where it reached neither ``hs[-1]`` nor
    ``np.stack(hs)``."""
    rng = np.random.default_rng(5)
    f = tj.jit(states_then_shift, cache="memory", dynamic=True)
    for length in (3, 4, 5):
        x = rng.standard_normal((length, 3))
        got, want = f(x.copy()), states_then_shift(x.copy())
        for mine, theirs in zip(got[0], want[0]):
            np.testing.assert_allclose(mine, theirs, rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


OUT_THEN_NUMPY = textwrap.dedent("""\
    def out_then_numpy(x):
        s = np.empty(x.shape[1])
        np.add(x[0], 1.0, out=s)
        s += 1.0
        return s
""")


def out_then_numpy(x):
    s = np.empty(x.shape[1])
    np.add(x[0], 1.0, out=s)
    s += 1.0
    return s


def _wrapped(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args)
    return wrapper


@_wrapped  # inspect finds the wrapped def's source for the wrapper: both run as they are
def _doubled_sum_plus_one(x, s):
    np.add(x, 1.0, out=s)
    return s * 2.0  # read s in place: before 3b4b09c, the zeros s held


def through_a_decorated_helper(x):
    return _doubled_sum_plus_one(x[1], np.zeros(x.shape[1]))


def test_out_write_into_a_numpy_array_in_code_run_as_it_is():
    namespace = {"np": np}
    exec(compile(OUT_THEN_NUMPY, "<generated>", "exec"), namespace)  # no source: not rewritten
    rng = np.random.default_rng(9)
    for function, compiled in ((namespace["out_then_numpy"], False),
                               (through_a_decorated_helper, False), (out_then_numpy, True)):
        f = tj.jit(function, cache="memory")
        for _ in range(2):
            x = rng.standard_normal((2, 3))
            np.testing.assert_allclose(f(x.copy()), function(x.copy()), rtol=1e-12)
        assert (f.stats()["compiled_calls"] > 0) == compiled, f.explain()


# --- 9b6a718 (logaddexp selects on an infinite max): its gradient at ties -------------------
@pytest.mark.parametrize("ufunc, base", [(np.logaddexp, np.e), (np.logaddexp2, 2.0)])
def test_logaddexp_gradient_at_equal_operands_is_the_derivative(ufunc, base):
    """d/dx logaddexp(x, y) = b**x / (b**x + b**y): 0.5 each at x == y (torch's too). The
    select on x == y it replaced gave (1, 0) there, through jit(value_and_grad) and
    Tensor.backward alike; 9b6a718 made it right, this keeps it."""
    x = np.array([0.5, -2.0, 3.0, 1.0, 40.0])
    y = np.array([0.5, -2.0, 1.0, 1.0 + 1e-9, 40.0])
    weights = np.arange(1.0, 6.0)
    share = base ** x / (base ** x + base ** y)
    want = (weights * share, weights * (1.0 - share))

    def loss(a, b):
        return (ufunc(a, b) * weights).sum()

    f = tj.jit(tj.value_and_grad(loss, argnums=(0, 1)), cache="memory")
    step = tj.jit(lambda a, b: ufunc(a, b), cache="memory")
    for _ in range(2):
        _, grads = f(x, y)
        for got, expected in zip(grads, want):
            np.testing.assert_allclose(got, expected, rtol=1e-7)
        a, b = tj.tensor(x, requires_grad=True), tj.tensor(y, requires_grad=True)
        step(a, b).backward(weights)
        np.testing.assert_allclose(a.grad, want[0], rtol=1e-7)
        np.testing.assert_allclose(b.grad, want[1], rtol=1e-7)
