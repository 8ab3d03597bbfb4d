"""State-write idioms of real NumPy code, round 18: each ran eagerly because the trace
refused its state write, and now compiles; compiled calls leave the caller's objects as
eager NumPy leaves them (values, and identity where the trace keeps it).

* EpyNN's free functions write caches into dicts held by the layer passed in
  (``gru_forward(layer, A)``: ``layer.fc["X"] = A``, ``layer.bc["h"] = h``); the same code
  as a bound method compiled, the free function was refused (the dict's owner came in as an
  argument, which ``frontend._owner_of`` did not resolve).
"""

import numpy as np

import tracejit as tj


def _close(got, expected, what=""):
    """Equal up to compiled kernels' own rounding (tanh, fused matmuls: an ulp or two)."""
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14, err_msg=what)


def _same_state(eager, compiled):
    """Attribute dicts of two objects hold equal arrays (and equal plain values)."""
    assert vars(eager).keys() == vars(compiled).keys()
    for name, value in vars(eager).items():
        other = vars(compiled)[name]
        if isinstance(value, dict):
            assert value.keys() == other.keys(), name
            for key, item in value.items():
                _close(other[key], item, f"{name}[{key!r}]")
                assert type(other[key]) is type(item), (name, key)
        else:
            _close(other, value, name)


class _GRULayer:
    """EpyNN's layer holds its caches in dicts: fc (forward), bc (backward), p (params)."""

    def __init__(self, units):
        rng = np.random.default_rng(units)
        self.p = {"U": rng.normal(size=(units, units)) * 0.3,
                  "W": rng.normal(size=(units, units)) * 0.3}
        self.fc = {}
        self.bc = {}


def _gru_forward(layer, A):
    X = layer.fc["X"] = A  # EpyNN caches the input it saw, by identity
    h = np.zeros(X.shape[1:])
    layer.fc["h"] = np.zeros_like(X)
    for t in range(X.shape[0]):
        h = np.tanh(X[t] @ layer.p["U"] + h @ layer.p["W"])
        layer.fc["h"][t] = h
    layer.bc["dh"] = np.zeros_like(h)
    layer.fc["steps"] = layer.fc.get("steps", 0) + X.shape[0]
    return layer.fc["h"] * 2.0


def test_free_function_writing_the_argument_layers_dicts_compiles():
    compiled = tj.jit(_gru_forward, cache="memory")
    eager_layer, layer = _GRULayer(3), _GRULayer(3)
    rng = np.random.default_rng(0)
    for steps in (4, 4, 4, 5):
        A = rng.normal(size=(steps, 3))
        expected = _gru_forward(eager_layer, A)
        got = compiled(layer, A)
        _close(got, expected)
        _same_state(eager_layer, layer)
        assert layer.fc["X"] is A  # the caller's array itself, as eager caches it
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 1 and not stats["eager_calls"], stats
