"""State-write idioms of real NumPy code, round 18: each ran eagerly because the trace
refused its state write, and now compiles; compiled calls leave the caller's objects as
eager NumPy leaves them (values, and identity where the trace keeps it).

* EpyNN's free functions write caches into dicts held by the layer passed in
  (``gru_forward(layer, A)``: ``layer.fc["X"] = A``, ``layer.bc["h"] = h``); the same code
  as a bound method compiled, the free function was refused (the dict's owner came in as an
  argument, which ``frontend._owner_of`` did not resolve).
* micrograd-style engines make their nodes in operator methods (``Value.__mul__``), which
  Python called as written: the node was not known as made in the call, and
  ``v.grad = ...`` on it was refused (``tracejit.tracer.operator_calls`` routes the
  operators of user classes through the hooks, as calls are); their ``_backward``
  closures read those nodes after the operator returned (now the call's own values, not
  outside state guarded by identity at every entry).
* micrograd's ``backward`` sorts the graph with ``visited = set()`` mutated from a nested
  ``build_topo``: only lists and dicts were known as made in the call. A set made by
  ``set()`` in the call is; a set from outside (``self.seen.add(k)``) is refused (before,
  the trace added its traced values to the caller's set).
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


class _Node:
    def __init__(self, data):
        self.data = data
        self.grad = np.zeros_like(data)

    def __mul__(self, other):
        return _Node(self.data * (other.data if isinstance(other, _Node) else other))

    def __rmul__(self, other):  # 2.0 * node: float's __mul__ gives NotImplemented first
        return self * other

    def __neg__(self):
        return self * -1.0

    def seed(self):
        self.grad = np.ones_like(self.data)


def _seeded(x):
    node = -(2.0 * (_Node(x) * _Node(x)))
    node.seed()
    node.grad = node.grad * 3.0
    return node.data + node.grad


def test_nodes_made_in_operator_methods_are_the_calls_own():
    compiled = tj.jit(_seeded, cache="memory")
    for size in (3, 3, 5):
        x = np.linspace(-1.0, 1.0, size)
        _close(compiled(x), _seeded(x))
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 1 and not stats["eager_calls"], stats


class _Value:
    """micrograd's engine (karpathy/micrograd engine.py), on arrays."""

    def __init__(self, data, children=()):
        self.data = data
        self.grad = np.zeros_like(data)
        self._backward = lambda: None
        self._prev = set(children)

    def __add__(self, other):
        other = other if isinstance(other, _Value) else _Value(other)
        out = _Value(self.data + other.data, (self, other))

        def _backward():
            self.grad = self.grad + out.grad
            other.grad = other.grad + out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, _Value) else _Value(other)
        out = _Value(self.data * other.data, (self, other))

        def _backward():
            self.grad = self.grad + other.data * out.grad
            other.grad = other.grad + self.data * out.grad
        out._backward = _backward
        return out

    def tanh(self):
        t = np.tanh(self.data)
        out = _Value(t, (self,))

        def _backward():
            self.grad = self.grad + (1 - t ** 2) * out.grad
        out._backward = _backward
        return out

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        return self + (-other)

    def __rmul__(self, other):
        return self * other

    def backward(self):
        topo = []
        visited = set()

        def build_topo(v):
            if v not in visited:
                visited.add(v)
                for child in v._prev:
                    build_topo(child)
                topo.append(v)
        build_topo(self)
        self.grad = np.ones_like(self.data)
        for v in reversed(topo):
            v._backward()


def _micrograd_step(x, w):
    a, b = _Value(x), _Value(w)
    loss = 2.0 * (a * b).tanh() - a
    loss.backward()
    return loss.data, a.grad, b.grad


def test_micrograd_backward_with_a_visited_set_compiles():
    compiled = tj.jit(_micrograd_step, cache="memory")
    rng = np.random.default_rng(1)
    for size in (3, 3, 5):
        x, w = rng.normal(size=size), rng.normal(size=size)
        for got, expected in zip(compiled(x, w), _micrograd_step(x, w)):
            _close(got, expected)
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 1 and not stats["eager_calls"], stats


class _Seen:
    def __init__(self):
        self.seen = set()


_SEEN = _Seen()


def _mark_seen(x, key):
    _SEEN.seen.add(key)
    return x * 2.0


def test_a_set_from_outside_is_not_written_by_the_trace():
    compiled = tj.jit(_mark_seen, cache="memory")
    for key in (1, 2, 3):
        np.testing.assert_array_equal(compiled(np.ones(2), key), np.full(2, 2.0))
    assert _SEEN.seen == {1, 2, 3}  # plain ints, each added once, as eager adds them
    assert compiled.stats()["compiled_calls"] == 0


def _write_one_read_other(first, second, x):
    first["X"] = x
    return second["X"] * 2.0


def test_a_dict_passed_twice_after_tracing_two_dicts_reads_the_write():
    """Traced with two dicts, the program holds them apart: a call passing one dict twice
    runs eagerly (``runtime.misses._repeated_containers``), so the read sees the write."""
    compiled = tj.jit(_write_one_read_other, cache="memory")
    for _ in range(2):
        compiled({"X": np.zeros(2)}, {"X": np.ones(2)}, np.full(2, 3.0))
    shared = {"X": np.zeros(2)}
    np.testing.assert_array_equal(compiled(shared, shared, np.full(2, 3.0)), np.full(2, 6.0))
    assert compiled.stats()["eager_calls"] == {"a dict or list passed twice": 1}
