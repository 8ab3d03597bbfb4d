"""A loop nested in a captured loop's body compiles natively (the body is a program of
segments and loops itself) and goes through the disk cache whole: a second process
loads it without tracing or LLVM, and both match NumPy."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

MODEL = textwrap.dedent('''\
    import json, sys
    import numpy as np
    import tracejit.codegen.llvm
    from tracejit import jit

    compiles = []
    _compile = tracejit.codegen.llvm.compile_module
    tracejit.codegen.llvm.compile_module = lambda *a, **k: compiles.append(1) or _compile(*a, **k)


    def filter_gradient(dout, x, f):
        """Each output position's window of x, weighted by its gradient, added into a
        buffer at overlapping places: trips are not independent, so nothing vectorizes."""
        channels, size, _ = x.shape
        dfilt = np.zeros((channels, f, f))
        dx = np.zeros(x.shape)
        row = out_row = 0
        while row + f <= size:
            col = out_col = 0
            while col + f <= size:
                dfilt += dout[out_row, out_col] * x[:, row:row + f, col:col + f]
                dx[:, row:row + f, col:col + f] += dout[out_row, out_col]
                col += 1
                out_col += 1
            row += 1
            out_row += 1
        return dfilt, dx


    model = jit(filter_gradient, dynamic=True)
    results = []
    for size in json.loads(sys.argv[1]):
        rng = np.random.default_rng(size)
        x = rng.standard_normal((2, size, size))
        dout = rng.standard_normal((size - 2, size - 2))
        results.append([a.tolist() for a in model(dout, x, 3)])
    program = model._variants[0].root.program
    kinds = [type(step.program).__name__ for step in program.steps]
    print(json.dumps({"results": results, "stats": model.stats(), "llvm": len(compiles),
                      "kinds": kinds}))
''')


def eager(size):
    rng = np.random.default_rng(size)
    x = rng.standard_normal((2, size, size))
    dout = rng.standard_normal((size - 2, size - 2))
    dfilt, dx = np.zeros((2, 3, 3)), np.zeros(x.shape)
    for i in range(size - 2):
        for j in range(size - 2):
            dfilt += dout[i, j] * x[:, i:i + 3, j:j + 3]
            dx[:, i:i + 3, j:j + 3] += dout[i, j]
    return dfilt, dx


def run(folder, sizes):
    env = {key: value for key, value in os.environ.items()
           if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
    env.update(TRACEJIT_CACHE_DIR=str(folder / "cache"), PYTHONDONTWRITEBYTECODE="1")
    completed = subprocess.run([sys.executable, "model.py", json.dumps(sizes)], cwd=folder,
                               env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0 and "Traceback" not in completed.stderr, \
        completed.stderr
    report = json.loads(completed.stdout)
    for size, (dfilt, dx) in zip(sizes, report["results"]):
        want_dfilt, want_dx = eager(size)
        np.testing.assert_allclose(dfilt, want_dfilt, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-12, atol=1e-12)
    return report


def test_nested_loops_compile_natively_and_load_from_disk(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    first = run(tmp_path, [11, 13, 16])  # one bucket of x and of dout (9..16)
    assert first["stats"]["compiles"] == 1 and first["llvm"] > 0
    assert "NativeLoopProgram" in first["kinds"], first["kinds"]  # the outer loop's body
    second = run(tmp_path, [12, 15])
    assert (second["stats"]["compiles"], second["stats"]["disk_hits"]) == (0, 1)
    assert second["llvm"] == 0
