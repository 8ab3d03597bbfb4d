"""Disk entries of variants that take their number arguments at run time: a second process
finds them whatever numbers its calls pass (``cache_key``'s open key), and an entry whose
guard pins a number, or does not accept the call, is not run for it.

A training function's ``lr`` and ``num_iterations`` (``tracer/loop_trip_counts.py``) are
run-time inputs once seen with a second value, but the entry was filed under the values of
the call that compiled it: a second process found it only when its first call passed those
same values (one calling with 13, 2, 100, 3 got no disk hit). Every process is a real
``python`` subprocess running ``model.py`` written into a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from tracejit.testing import compare_results

PROGRAM = textwrap.dedent('''\
    """Calls fit with each (lr, count) of argv[1] and head with each k of argv[2]; prints
    the compiled and eager results and both functions' stats."""
    import json
    import sys

    import numpy as np

    from tracejit import jit


    def fit(x, y, lr, num_iterations):
        w = np.zeros(x.shape[1])
        for i in range(num_iterations):
            w = w - lr * (x.T @ (x @ w - y)) / len(y)
        return w


    def head(x, k):
        return x[:k] * 2.0


    fitted, headed = jit(fit), jit(head)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 3)), rng.standard_normal(8)
    report = {"fit": [[fitted(x, y, lr, n).tolist(), fit(x, y, lr, n).tolist()]
                      for lr, n in json.loads(sys.argv[1])],
              "head": [[headed(x, k).tolist(), head(x, k).tolist()]
                       for k in json.loads(sys.argv[2])]}
    for name, function in (("fit_stats", fitted), ("head_stats", headed)):
        report[name] = {key: function.stats()[key] for key in ("compiles", "disk_hits")}
    print(json.dumps(report))
''')


def _run(folder, fits, heads):
    env = {key: value for key, value in os.environ.items()
           if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
    env.update(TRACEJIT_CACHE_DIR=str(folder / "cache"), PYTHONDONTWRITEBYTECODE="1")
    completed = subprocess.run([sys.executable, "model.py", json.dumps(fits),
                                json.dumps(heads)], cwd=folder, env=env,
                               capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0 and "Traceback" not in completed.stderr, \
        completed.stderr
    report = json.loads(completed.stdout)
    for got, want in report["fit"] + report["head"]:
        problem = compare_results(np.asarray(got), np.asarray(want))
        assert problem is None, problem
    return report


def test_an_entry_taking_numbers_at_run_time_serves_other_values_in_a_new_process(tmp_path):
    (tmp_path / "model.py").write_text(PROGRAM)
    # the first call pins lr and the count; the second compiles the run-time variant
    first = _run(tmp_path, [[0.1, 3], [0.05, 100]], [3])
    assert first["fit_stats"] == {"compiles": 2, "disk_hits": 0}, first
    second = _run(tmp_path, [[0.3, 13], [0.1, 2], [0.02, 40]], [3, 4])
    # (0.3, 13) and (0.02, 40) from the run-time entry; 2 trips (under the captured loop's
    # 3) is outside its guard: read from disk and not run, compiled (the count pinned)
    assert second["fit_stats"] == {"compiles": 1, "disk_hits": 1}, second
    # a pinned number is keyed by its value: k=4 is not served by k=3's entry
    assert second["head_stats"] == {"compiles": 1, "disk_hits": 1}, second
