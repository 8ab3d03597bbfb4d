"""Review 24a of this session's codegen/runtime commits: eager-vs-compiled attacks on the
compile-cost policy, NumPy's own float64 math where a decision reads it, and
``np.tensordot`` as a matmul."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tracejit.codegen import numpy_loops

# A process that never imported np.random (NumPy 2 imports it on first use) traces a
# decision on float64 tanh: the margin rules ask whether NumPy's loop is exact, whose
# first use checks the loop bit for bit on probe values. Those were drawn by
# np.random.default_rng, which imported np.random in the middle of the trace, and
# random_draws.unseen_draw took that for a draw the trace could not see: the call was
# traced, given up ("untraceable: the function draws random numbers..."), run again
# eagerly (its print written twice) and every later call of that shape ran eagerly.
_FRESH_PROCESS = textwrap.dedent("""
    import sys
    import numpy as np
    from tracejit import jit

    def layer(x, n):
        s = np.zeros_like(x)
        for i in range(n):
            s = s + np.tanh(x * i)
            if i % 3 == 0:
                print("trip", i, float(s.sum()) > 0)
        return np.where(s > 0.5, s, 0.0)

    assert "numpy.random" not in sys.modules
    x = np.linspace(-0.5, 1, 7)
    jitted = jit(layer, cache="memory")
    results = [jitted(x, 7) for _ in range(3)]
    print("eager")
    expected = layer(x, 7)
    print("equal", all(np.array_equal(result, expected) for result in results))
    stats = jitted.stats()
    print("reasons", sorted(stats["eager_reasons"].values()), "compiled", stats["compiled_calls"])
""")


@pytest.mark.skipif(numpy_loops.loop("tanh", np.float64) is None,
                    reason="NumPy's float64 tanh loop is not usable here")
def test_checking_numpys_loop_during_a_trace_draws_no_random_numbers(tmp_path):
    script = tmp_path / "fresh_process.py"  # (a file: the front end reads its source)
    script.write_text(_FRESH_PROCESS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    trips = "trip 0 False\ntrip 3 True\ntrip 6 True\n"  # (x's sum is positive)
    # each call prints its trips once, as the eager call does; all three are compiled
    assert done.stdout == (trips * 3 + "eager\n" + trips + "equal True\n"
                           "reasons [] compiled 3\n"), done.stdout
