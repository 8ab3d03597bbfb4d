"""Jit functions travel: pickled by reference where their module names them, by value
(cloudpickle) otherwise, and run in ``multiprocessing`` children with results equal to
eager NumPy. A child warm-starts from the disk cache the parent filled (no compile), and
arrays that arrive pickled (their dtype objects are not NumPy's own) take the compiled
variant, not a new trace.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tracejit import jit
from tracejit.runtime import pickling
from tracejit.runtime.jit import BoundJitFunction, JitFunction

CHILD_TIMEOUT = 120


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """A fresh disk cache, read by the children too (they inherit the environment)."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))


@jit
def layer(x, w):
    return np.tanh(x @ w) + 1.0


class Scaler:
    def __init__(self, w):
        self.w = w

    @jit
    def forward(self, x):
        return np.maximum(x @ self.w, 0.0)


def make_gated(threshold):
    @jit
    def gated(x):
        if x.sum() > threshold:
            return np.exp(x) * 2.0
        return x - threshold
    return gated


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((6, 5)), rng.standard_normal((5, 3))


def test_a_module_level_function_pickles_by_reference():
    data = pickle.dumps(layer)
    assert b"layer" in data and b"_rebuild" not in data  # a name, not the code
    assert pickle.loads(data) is layer
    assert pickle.loads(pickle.dumps(Scaler.forward)) is Scaler.forward


def test_a_bound_jit_method_pickles_with_its_instance():
    x, w = inputs()
    bound = Scaler(w).forward
    copy = pickle.loads(pickle.dumps(bound))
    assert isinstance(copy, BoundJitFunction) and copy.function is Scaler.forward
    np.testing.assert_array_equal(copy.instance.w, w)
    np.testing.assert_allclose(copy(x), np.maximum(x @ w, 0.0), rtol=1e-12, atol=1e-12)


def test_closures_and_lambdas_pickle_by_value_and_round_trip_to_themselves():
    pytest.importorskip("cloudpickle")
    for function in (make_gated(0.5), jit(lambda x: np.sin(x) + 1.0),
                     jit(Scaler(np.ones((2, 2))).forward.function.fn)):
        data = pickle.dumps(function)
        assert b"_rebuild" in data
        assert pickle.loads(data) is function  # within one process: the same object


def test_options_travel_with_a_function_sent_by_value():
    pytest.importorskip("cloudpickle")
    function = jit(lambda x: x * 2.0, dynamic=True, max_variants=3, compile="background",
                   fallback="raise")
    data = pickle.dumps(function)
    # Forget that this process sent it, as a receiving process would not know it.
    pickling._sent.clear()
    pickling._rebuilt.clear()
    copy = pickle.loads(data)
    assert copy is not function and isinstance(copy, JitFunction)
    for name in pickling.USER_OPTIONS:
        assert getattr(copy.options, name) == getattr(function.options, name), name
    assert pickle.loads(data) is copy  # a function sent again is rebuilt once per process


def test_a_function_without_readable_source_is_refused_a_file_name_it_does_not_match(
        tmp_path):
    """The receiving process rewrites from the file at the code's path: a different file
    there (another version of the script) must not be read as this function's source."""
    pytest.importorskip("cloudpickle")
    script = tmp_path / "model_v1.py"
    script.write_text("import numpy as np\n\ndef model(x):\n    return x * 3.0\n")
    namespace = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    data = pickling._dumps(namespace["model"])
    assert pickle.loads(data).__code__.co_filename == str(script)
    script.write_text("import numpy as np\n\ndef model(x):\n    return x * 4.0\n")
    changed = pickle.loads(data)
    assert changed.__code__.co_filename == pickling._DYNAMIC_CODE
    np.testing.assert_array_equal(jit(changed)(np.ones(3)), np.full(3, 3.0))


def call_and_report(function, arguments):
    """Run in a child: call twice (the second call must hit the compiled variant) and
    return both results with the child's counters."""
    first = function(*arguments)
    second = function(*arguments)
    return first, second, function.stats()


def test_a_spawned_child_runs_pickled_functions_and_warm_starts_from_disk(monkeypatch):
    # ``layer`` took its cache directory when this module was imported; the children
    # import it again, so they must see that directory.
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", layer.options.cache_dir)
    x, w = inputs()
    positive = np.abs(x)
    lam = jit(lambda x: np.sin(x) * 2.0 + x)
    gated = make_gated(0.5)
    cases = [(layer, (x, w), True), (lam, (x,), True), (gated, (positive,), False)]
    if not pickling._has_cloudpickle():
        cases = cases[:1]
    for function, arguments, _ in cases:
        function(*arguments)  # compiled here first: the parent's entry is on disk
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        reports = pool.starmap(call_and_report, [(function, arguments)
                                                 for function, arguments, _ in cases],
                               chunksize=1)
    for (function, arguments, shippable), (first, second, stats) in zip(cases, reports):
        expected = function.fn(*arguments)
        np.testing.assert_allclose(first, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(second, expected, rtol=1e-12, atol=1e-12)
        assert stats["calls"] == 2 and stats["eager_calls"] == {}, stats
        if shippable:
            assert stats["compiles"] == 0 and stats["disk_hits"] == 1, (function, stats)
            assert stats["compiled_calls"] == 2, stats
        else:
            # A closure over a Python float is kept in memory only (its cell cannot be
            # found by import): the child compiles it once, and the second call hits it.
            # (its first call is its trace's, or the program's: gated decides on data)
            assert stats["compiles"] == 1 and stats["compiled_calls"] >= 1, stats
            assert stats["compiled_calls"] + stats["traced_calls"] == 2, stats


MAIN_SCRIPT = textwrap.dedent("""
    import sys
    if sys.argv[1] == "without-cloudpickle":
        sys.modules["cloudpickle"] = None  # as if it were not installed
    import multiprocessing
    import numpy as np
    from tracejit import jit

    @jit
    def walk(x, depth=0):
        if depth > 0:
            return walk(x, depth - 1)  # the function names itself: a cycle in its pickle
        return np.cos(x) * 3.0 - x

    def report(function, x):
        return (function(x).tolist(), function.stats()["compiles"],
                function.stats()["disk_hits"], function.fn.__globals__["walk"] is function)

    if __name__ == "__main__":
        x = np.linspace(-2.0, 2.0, 7)
        walk(x)
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            values, compiles, disk_hits, itself = pool.apply(report, (walk, x))
        assert np.allclose(values, np.cos(x) * 3.0 - x, rtol=1e-12, atol=1e-12), values
        print("ok", compiles, disk_hits, itself)
""")


@pytest.mark.parametrize("mode", ["with-cloudpickle", "without-cloudpickle"])
def test_a_script_s_main_function_runs_in_a_spawned_pool(tmp_path, mode):
    """``@jit`` in the script being run: by value with cloudpickle (its reference to itself
    resolves to the rebuilt function), by reference without it (multiprocessing's
    children import the script as ``__mp_main__``)."""
    if mode == "with-cloudpickle":
        pytest.importorskip("cloudpickle")
    script = tmp_path / "train.py"
    script.write_text(MAIN_SCRIPT)
    completed = subprocess.run([sys.executable, str(script), mode], capture_output=True,
                               text=True, timeout=CHILD_TIMEOUT, cwd=tmp_path,
                               env=dict(os.environ))
    assert completed.returncode == 0, completed.stderr[-3000:]
    verdict, compiles, disk_hits, itself = completed.stdout.split()
    assert verdict == "ok"
    assert (compiles, disk_hits) == ("0", "1")  # the child loaded the parent's entry
    assert itself == "True"
