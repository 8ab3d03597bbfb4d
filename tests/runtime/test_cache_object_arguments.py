"""The disk cache of a jitted method: an object argument is filed under its class (by
import path), never its ``id()``, so a second process loads the variant for its own
objects (``runtime.object_arguments``). Before, a call with an object argument was not
cached on disk at all ("an argument is an object")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import tracejit as tj
from tracejit.runtime.cache_key import call_signature

LAYERS = textwrap.dedent('''\
    import numpy as np

    import tracejit as tj


    class Dense:
        def __init__(self, seed, act="tanh"):
            r = np.random.default_rng(seed)
            self.W = r.standard_normal((4, 4))
            self.b = r.standard_normal(4)
            self.act = act

        @tj.jit
        def forward(self, x):
            h = x @ self.W + self.b
            return np.tanh(h) if self.act == "tanh" else np.maximum(h, 0.0)
''')

MAIN = textwrap.dedent('''\
    import json
    import sys

    import numpy as np

    from layers import Dense

    x = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    layers = [Dense(seed, act) for seed, act in json.loads(sys.argv[1])]
    right = []
    for layer in layers:
        h = x @ layer.W + layer.b
        want = np.tanh(h) if layer.act == "tanh" else np.maximum(h, 0.0)
        right.append(bool(np.allclose(layer.forward(x), want, rtol=1e-12)))
    print(json.dumps({"right": right, "stats": Dense.forward.stats()}))
''')


def _run(root, cache_dir, layers):
    env = {key: value for key, value in os.environ.items()
           if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
    env.update(TRACEJIT_CACHE_DIR=str(cache_dir), PYTHONDONTWRITEBYTECODE="1")
    completed = subprocess.run([sys.executable, "main.py", json.dumps(layers)], cwd=root,
                               env=env, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_a_second_process_loads_the_variant_of_its_own_objects(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "layers.py").write_text(LAYERS)
    (root / "main.py").write_text(MAIN)
    first = _run(root, tmp_path / "cache", [[0, "tanh"], [1, "tanh"], [2, "tanh"]])
    assert first["right"] == [True] * 3
    assert (first["stats"]["compiles"], first["stats"]["compiled_calls"]) == (1, 2)
    # other objects (other seeds) in another process: the entry filed by class is found
    second = _run(root, tmp_path / "cache", [[5, "tanh"], [6, "tanh"]])
    assert second["right"] == [True] * 2
    stats = second["stats"]
    assert (stats["disk_hits"], stats["compiles"], stats["traced_calls"]) == (1, 0, 0)
    # a setting the entry was not compiled for: its guard refuses, the call compiles
    third = _run(root, tmp_path / "cache", [[5, "relu"]])
    assert third["right"] == [True] and third["stats"]["compiles"] == 1


class Layer:
    def __init__(self, seed):
        self.W = np.random.default_rng(seed).standard_normal((2, 2))


def test_the_call_signature_names_the_class_not_the_object():
    first, second = call_signature(lambda *_: {}, [Layer(0)]), call_signature(
        lambda *_: {}, [Layer(1)])
    assert first == second == [["object", __name__, "Layer"]]

    def local():
        class Hidden:  # no import path finds it: no disk entry
            pass
        return Hidden()

    assert call_signature(lambda *_: {}, [local()]) is None
    f = tj.jit(lambda layer, x: x @ layer.W, cache="memory")
    np.testing.assert_allclose(f(Layer(3), np.ones(2)), np.ones(2) @ Layer(3).W)
