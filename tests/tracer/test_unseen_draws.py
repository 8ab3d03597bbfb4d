"""Random draws a trace cannot see (``tracer/random_draws.py``: ``unseen_draw``,
``unseen_code_draws``), in a function tracejit runs as written (made by ``exec``: no
source to rewrite).

Wrong result fixed: such a function making its own generator (``rng =
np.random.default_rng()``, unseeded) compiled with the first call's numbers frozen in,
the same at every call, where eager draws new ones (only generators reachable before the
call were watched). Such code is now refused by name when it names a draw.

No longer refused: np.random imported during a trace (in a process that had not imported
it) with nothing drawn - any import was taken for a draw ("untraceable: the function
draws random numbers ..."; numpy_loops' probe once did it), and now the global
generator's state is compared with the one its seed sequence made."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from tracejit import jit
from tracejit.tracer.random_draws import unseen_code_draws

_MADE_HERE = '''
def made_here(x):
    rng = np.random.default_rng()
    return x + rng.normal(size=3)

def legacy(x):
    return x + np.random.normal(size=3)

def nested(x):
    draw = lambda: np.random.default_rng().random(3)
    return x + draw()

def plain(x):
    return np.power(x, 2) + 1
'''


def _exec_functions():
    names = {"np": np}
    exec(_MADE_HERE, names)  # (no source: tracejit runs them as written)
    return names


def test_a_generator_made_in_code_without_source_is_not_frozen():
    names = _exec_functions()
    np.random.seed(0)  # (np.random imported before: only reachable generators are watched)
    for name in ("made_here", "legacy", "nested"):
        f = jit(names[name], cache="memory")
        results = [f(np.zeros(3)) for _ in range(3)]
        assert not np.array_equal(results[1], results[2]), name  # eager draws anew
        stats = f.stats()
        assert stats["compiled_calls"] == 0, (name, stats)
        assert "draws random numbers the trace cannot see" in str(stats["eager_reasons"])


def test_code_without_source_that_draws_nothing_still_compiles():
    f = jit(_exec_functions()["plain"], cache="memory")
    for _ in range(3):
        np.testing.assert_array_equal(f(np.arange(3.0)), np.arange(3.0) ** 2 + 1)
    assert f.stats()["compiled_calls"] >= 2, f.explain()


def test_names_that_draw():
    assert unseen_code_draws(compile("rng = np.random.default_rng()", "<exec>", "exec"))
    assert unseen_code_draws(compile("def f():\n    return lambda: rng.integers(3)\n",
                                     "<exec>", "exec"))
    assert not unseen_code_draws(compile("y = np.power(x, 2).sum()", "<exec>", "exec"))


# A fresh process (np.random not imported): an import during the trace is no draw, a draw
# from the global generator after it is one (the exec'd code reaches it by getattr, past
# unseen_code_draws' names).
_FRESH = textwrap.dedent('''
    import sys
    import numpy as np
    from tracejit import jit

    def importer(x):
        import numpy.random  # noqa: F401 - an import, no draw
        return x * 2

    names = {"np": np}
    exec("def hidden(x):\\n    r = getattr(np, 'ran' + 'dom')\\n"
         "    return x + getattr(r, 'ra' + 'nd')(3)\\n", names)
    assert "numpy.random" not in sys.modules
    which = importer if sys.argv[1] == "importer" else names["hidden"]
    f = jit(which, cache="memory")
    results = [f(np.zeros(3)) for _ in range(3)]
    print("distinct", not np.array_equal(results[1], results[2]),
          "compiled", f.stats()["compiled_calls"],
          "unseen", "cannot see" in str(f.stats()["eager_reasons"]))
''')


def _fresh(tmp_path, which):
    script = tmp_path / "fresh.py"  # (a file: the front end reads importer's source)
    script.write_text(_FRESH)
    done = subprocess.run([sys.executable, str(script), which], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_importing_np_random_during_a_trace_is_no_draw(tmp_path):
    # (before: 'compiled 0 unseen True', every call eager)
    assert _fresh(tmp_path, "importer") == "distinct False compiled 2 unseen False"


def test_a_draw_after_np_random_is_imported_during_a_trace_is_seen(tmp_path):
    assert _fresh(tmp_path, "hidden") == "distinct True compiled 0 unseen True"
