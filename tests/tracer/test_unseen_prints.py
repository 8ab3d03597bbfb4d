"""print() in code the front end does not rewrite (a function made by exec, no source):
the builtin wrote at once during the trace (``tracer/unseen_prints.py``). Before, a
printed traced value wrote the line's first arguments and the eager rerun the whole line
(``0 0 0.75`` where NumPy prints ``0 0.75``), and a printed constant was written by the
trace and by no compiled call (one line for three calls). Each test compares the text
(capsys) and results with eager NumPy over several calls."""

from __future__ import annotations

import io
import threading

import numpy as np

import tracejit as tj
from tracejit.tracer.unseen_prints import WatchedStdout


def _exec(source):
    namespace = {"np": np}
    exec(source, namespace)  # noqa: S102 - the function under test has no source file
    return namespace["f"]


def _calls(capsys, function, arguments):
    """Eager's and the compiled function's text and results over ``arguments``."""
    compiled = tj.jit(function, cache="memory")
    for argument in arguments:
        want = function(argument)
        eager_text = capsys.readouterr().out
        got = compiled(argument)
        assert capsys.readouterr().out == eager_text
        np.testing.assert_array_equal(got, want)
    return compiled.stats()


def test_printed_traced_value_of_a_function_without_source_is_written_once(capsys):
    function = _exec("def f(x):\n    c = (x ** 2).sum()\n    print(0, c)\n    return x * 2\n")
    stats = _calls(capsys, function, [np.ones(3) / 2, np.arange(4.0), np.ones(3)])
    assert stats["calls"] == 3


def test_printed_constant_of_a_function_without_source_is_written_at_every_call(capsys):
    function = _exec("def f(x):\n    print('epoch', 1, sep='-')\n    return x + 1\n")
    _calls(capsys, function, [np.ones(3), np.ones(3), np.zeros(3), np.ones(5)])


def test_a_caught_refusal_still_stops_the_trace(capsys):
    function = _exec("def f(x):\n"
                     "    try:\n"
                     "        print('step', x.shape[0])\n"
                     "    except Exception:\n"
                     "        pass\n"
                     "    return x - 1\n")
    stats = _calls(capsys, function, [np.ones(2), np.ones(2), np.ones(3)])
    assert stats["compiled_calls"] == 0, stats


def test_other_threads_write_through_and_the_tracing_thread_is_refused():
    stream = io.StringIO()

    class Context:
        pass

    context = Context()
    watched = WatchedStdout(stream, context)
    worker = threading.Thread(target=lambda: print("worker", file=watched))
    worker.start()
    worker.join()
    try:
        print("traced", file=watched)
    except Exception as error:  # noqa: BLE001 - the refusal
        refused = error
    assert stream.getvalue() == "worker\n"
    assert context.unseen_print is refused
    assert watched.encoding == stream.encoding


def test_the_rewritten_functions_prints_still_compile(capsys):
    def printing(x):
        print("sum", x.sum())
        return x * 3

    stats = _calls(capsys, printing, [np.ones(3), np.arange(3.0), np.ones(3)])
    assert stats["compiled_calls"] >= 2 and stats["eager_calls"] == {}, stats


HELPER = _exec("def f(x):\n    print('helper', x.shape[0])\n    return x * 2\n")


def calls_a_helper_without_source(x):
    y = HELPER(x)
    print("caller", y.sum())
    return y + 1


def test_a_helper_without_source_called_from_rewritten_code(capsys):
    _calls(capsys, calls_a_helper_without_source, [np.ones(3), np.ones(3), np.arange(4.0)])
