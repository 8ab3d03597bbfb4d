"""``jit(value_and_grad(f))`` in the disk cache: a second process loads the program (the
wrapper is tracejit's own code, keyed by tracejit's version, and ``f`` is a dependency
with its source), and two wrapped functions never share an entry."""

import json
import os
import subprocess
import sys
import textwrap

MAIN = textwrap.dedent('''\
    import json, sys
    import numpy as np
    import tracejit as tj

    def rnn_loss(Wx, Wh, x):
        h = np.zeros(Wh.shape[0])
        for t in range(x.shape[0]):
            h = np.tanh(x[t] @ Wx + h @ Wh)
        return np.sum(h * h)

    def other_loss(Wx, Wh, x):
        return np.sum(np.sin(x @ Wx) @ Wh)

    chosen = {"rnn": rnn_loss, "other": other_loss}[sys.argv[1]]
    f = tj.jit(tj.value_and_grad(chosen, argnums=(0, 1)), dynamic=True)
    r = np.random.default_rng(0)
    args = r.standard_normal((3, 4)), r.standard_normal((4, 4)), r.standard_normal((9, 3))
    value, grads = f(*args)
    want_value, want_grads = tj.value_and_grad(chosen, argnums=(0, 1))(*args)
    same = bool(np.allclose(value, want_value) and all(
        np.allclose(g, w) for g, w in zip(grads, want_grads)))
    stats = f.stats()
    print(json.dumps({"same": same, "compiles": stats["compiles"],
                      "disk_hits": stats["disk_hits"]}))
''')


def run(tmp_path, which):
    env = {key: value for key, value in os.environ.items()
           if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
    env.update(TRACEJIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    completed = subprocess.run([sys.executable, "main.py", which], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_a_gradient_function_with_a_loop_loads_from_disk_in_a_second_process(tmp_path):
    (tmp_path / "main.py").write_text(MAIN)
    first = run(tmp_path, "rnn")
    assert first == {"same": True, "compiles": 1, "disk_hits": 0}
    assert run(tmp_path, "rnn") == {"same": True, "compiles": 0, "disk_hits": 1}
    # Another function behind the same wrapper code: its own entry, not rnn_loss's.
    assert run(tmp_path, "other") == {"same": True, "compiles": 1, "disk_hits": 0}
