"""Object arguments guarded by their class and by what the trace read through them, not by
their identity (``runtime.object_arguments``). Before, a jitted method (``self`` an
argument) or a function taking a layer compiled a variant per object: ten layers of one
class sharing a jitted ``forward`` compiled 8 variants and ran the rest eagerly
(/work/h190/repro24/object_argument_per_instance.py). Each test runs a compiled and an
eager twin over the same sequence of objects and compares results and object state after
every call, and counts compiles."""

import copy

import numpy as np
import pytest
from state_twins import difference

import tracejit as tj

X = np.random.default_rng(0).standard_normal((3, 4))


def twins(make, function, calls):
    """Run ``function`` compiled on ``make()``'s objects and eagerly on another
    ``make()``'s; ``calls``: ``(positions of the objects passed, change)`` where
    ``change(objects)`` runs on both sets before the call (or None). Returns the stats."""
    compiled = tj.jit(function, cache="memory")
    ours, theirs = make(), make()
    for number, (positions, change) in enumerate(calls):
        if change is not None:
            change(ours)
            change(theirs)
        got = _outcome(compiled, [ours[i] for i in positions], ours)
        want = _outcome(function, [theirs[i] for i in positions], theirs)
        found = difference(got, want, "result") or difference(
            list(map(_attributes, ours)), list(map(_attributes, theirs)), "state")
        assert found is None, f"call {number}: {found}; {compiled.stats()}"
    return compiled.stats()


def _attributes(value):
    """An object's attributes (its slots' too), as ``difference`` compares dicts."""
    if hasattr(value, "__dict__"):
        return vars(value)
    return {name: getattr(value, name) for name in type(value).__slots__ if hasattr(value, name)}


def _outcome(function, objects, every):
    try:
        result = function(*objects, X)
    except Exception as error:  # noqa: BLE001 - eager's exception must match
        return ("raised", type(error).__name__, str(error))
    if any(result is item for item in every):  # return self: which of the objects
        return ("object", next(i for i, item in enumerate(every) if item is result))
    return copy.deepcopy(result)


class Dense:
    def __init__(self, seed, act="tanh", scale=2.0):
        r = np.random.default_rng(seed)
        self.W = r.standard_normal((4, 4))
        self.b = r.standard_normal(4)
        self.act, self.scale = act, scale

    def forward(self, x):
        h = x @ self.W + self.b
        h = np.tanh(h) if self.act == "tanh" else np.maximum(h, 0.0)
        return h * self.scale


def test_ten_instances_of_a_class_share_one_compiled_method():
    class Layer:
        def __init__(self, seed):
            self.W = np.random.default_rng(seed).standard_normal((4, 4)) * 0.5
            self.b = np.full(4, 0.1 * seed)

        @tj.jit(cache="memory")
        def forward(self, x):
            return np.tanh(x @ self.W + self.b)

    layers = [Layer(seed) for seed in range(10)]
    for _ in range(3):
        h = X
        for layer in layers:
            expected = np.tanh(h @ layer.W + layer.b)
            h = layer.forward(h)
            np.testing.assert_allclose(h, expected, rtol=1e-12)
    stats = Layer.forward.stats()
    assert stats["compiles"] == 1 and stats["compiled_calls"] == 29, stats
    assert not stats["eager_calls"], stats


def test_settings_read_through_the_object_are_guarded_by_value():
    def make():
        return [Dense(seed, "tanh" if seed % 2 else "relu", 1.0 + seed % 3) for seed in range(6)]

    stats = twins(make, Dense.forward, [((i,), None) for i in range(6)] * 2)
    assert stats["compiles"] == 6 and stats["compiled_calls"] == 6, stats  # (act, scale) pairs


def test_objects_changed_between_calls():
    def change(objects):
        objects[0].W = objects[0].W * 2.0
        objects[1].scale = 7.5
        objects[2].act = "relu"

    make = lambda: [Dense(seed) for seed in range(3)]  # noqa: E731
    stats = twins(make, Dense.forward, [((0,), None), ((1,), None), ((2,), None),
                                        ((0,), change), ((1,), None), ((2,), None)])
    assert stats["compiles"] == 3, stats  # scale 2.0 tanh, 7.5 tanh, 2.0 relu


def test_an_attribute_set_that_differs_is_a_guard_failure_not_a_wrong_result():
    def make():
        objects = [Dense(seed) for seed in range(3)]
        del objects[1].b
        return objects

    def biased_if_present(self, x):
        h = x @ self.W
        if hasattr(self, "b"):
            h = h + self.b
        return h

    def biased(self, x):
        return x @ self.W + self.b

    stats = twins(make, biased_if_present, [((i,), None) for i in (0, 1, 2, 1, 0)])
    assert stats["compiles"] == 2, stats
    twins(make, biased, [((0,), None), ((1,), None), ((2,), None)])  # AttributeError as eager


class Slotted:
    __slots__ = ("W", "k")

    def __init__(self, seed, k):
        self.W = np.random.default_rng(seed).standard_normal((4, 4))
        self.k = k


def test_objects_with_slots():
    def scaled(o, x):
        return x @ o.W * o.k

    stats = twins(lambda: [Slotted(seed, float(seed % 2 + 1)) for seed in range(4)], scaled,
                  [((i,), None) for i in range(4)] * 2)
    assert stats["compiles"] == 2, stats


class Shifted(Dense):
    def forward(self, x):
        return super().forward(x) - 1.0


def test_a_subclass_is_another_variant():
    def call_forward(layer, x):
        return layer.forward(x)

    stats = twins(lambda: [Dense(0), Shifted(1), Dense(2), Shifted(3)], call_forward,
                  [((i,), None) for i in range(4)] * 2)
    assert stats["compiles"] == 2, stats


class Stepper:
    def __init__(self, seed):
        self.W = np.random.default_rng(seed).standard_normal((4, 4))
        self.t = 0
        self.history = []
        self.cache = None

    def step(self, x):
        self.t += 1
        y = x @ self.W
        self.cache = y
        self.history.append(float(y.sum()))
        self.W = self.W - 0.1 * y.T @ x
        return y


def test_writes_land_on_the_object_of_the_call():
    stats = twins(lambda: [Stepper(seed) for seed in range(3)], Stepper.step,
                  [((i % 3,), None) for i in range(9)])
    assert stats["compiles"] == 1 and stats["compiled_calls"] == 8, stats


def test_two_arguments_that_may_be_one_object():
    def write_one_read_other(a, b, x):
        a.W = a.W + 1.0
        return x @ b.W

    twins(lambda: [Dense(0), Dense(1)], write_one_read_other,
          [((0, 1), None), ((0, 0), None), ((1, 0), None), ((1, 1), None), ((0, 1), None)])


class Fitted:
    def __init__(self, seed):
        self.W = np.random.default_rng(seed).standard_normal((4, 4))

    def fit(self, x):
        self.W = self.W + x.T @ x
        return self


def test_a_returned_object_is_the_object_of_the_call():
    def fit(model, x):
        return model.fit(x)

    twins(lambda: [Fitted(0), Fitted(1)], fit, [((0,), None), ((1,), None), ((1,), None),
                                                ((0,), None)])


@pytest.mark.parametrize("compare", ["is", "==", "in"])
def test_identity_the_trace_observed_is_guarded(compare):
    def same(a, b, x):
        if compare == "is":
            alike = a is b
        elif compare == "==":
            alike = a == b
        else:
            alike = a in [b]
        return x * 2.0 if alike else x @ a.W

    twins(lambda: [Dense(0), Dense(1)], same,
          [((0, 0), None), ((0, 1), None), ((1, 1), None), ((1, 0), None)])


def test_code_the_trace_does_not_see_reads_that_object_only():
    def formatted(self, x):
        return x * (2.0 if "{0.act}".format(self) == "tanh" else 3.0)

    def copied(self, x):
        twin = copy.copy(self)
        return x @ twin.W * twin.scale

    make = lambda: [Dense(0, "tanh", 1.0), Dense(1, "relu", 3.0)]  # noqa: E731
    for function in (formatted, copied):
        twins(make, function, [((0,), None), ((1,), None), ((0,), None)])


class Model:
    def __init__(self, seed, acts=("relu", "tanh")):
        self.layers = [Dense(seed + i, act) for i, act in enumerate(acts)]
        self.lr = 0.1

    def __call__(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x * self.lr


def test_a_list_of_layers_iterated_by_a_jitted_model():
    def run(model, x):
        return model(x)

    def swap(models):
        models[0].layers[1] = Dense(77, "relu")

    make = lambda: [Model(0), Model(5), Model(9, ("tanh", "tanh", "relu")), Model(3)]  # noqa: E731
    stats = twins(make, run, [((i,), None) for i in range(4)] * 2 + [((0,), swap), ((1,), None),
                                                                    ((0,), None)])
    assert stats["compiles"] == 3, stats  # relu-tanh, tanh-tanh-relu, relu-relu


def test_the_variants_entry_guard_names_the_class():
    f = tj.jit(Dense.forward, cache="memory")
    f(Dense(0), X)
    assert "self: any Dense object" in f.explain()


class Tied:
    def __init__(self, seed):
        self.W = np.random.default_rng(seed).standard_normal((4, 4))
        self.k = 1.0


def test_one_object_or_array_at_two_paths_must_still_be_one():
    def list_of_two(layers, x):
        return x @ layers[0].W + 2.0 * (x @ layers[1].W) + layers[0].k * layers[1].k

    def two_arguments(a, b, x):
        return x @ a.W + 2.0 * (x @ b.W)

    def tie(objects):
        objects[1].W = objects[0].W

    def listed(a, b, x):
        return list_of_two([a, b], x)

    make = lambda: [Tied(0), Tied(1), Tied(2)]  # noqa: E731
    for function in (listed, two_arguments):
        twins(make, function, [((0, 0), None), ((0, 1), None), ((1, 0), None), ((2, 2), None),
                               ((0, 1), tie), ((1, 2), None), ((0, 1), None)])


class Pair:
    def __init__(self):
        self.first, self.second = Tied(0), Tied(1)
        self.second.W = self.first.W  # tied weights


PAIR = Pair()


def test_tied_weights_of_a_global_model_untied_later():
    def both(x):
        return x @ PAIR.first.W + 2.0 * (x @ PAIR.second.W)

    f = tj.jit(both, cache="memory")
    np.testing.assert_allclose(f(X), both(X))
    PAIR.second = Tied(5)  # untied: the compiled program read one input for both
    np.testing.assert_allclose(f(X), both(X))
    assert f.stats()["compiles"] == 2


class Spoken:
    """Special methods Python calls where no hook sees them: objects of such a class keep
    their identity guard (``object_paths._ROUTED_METHODS``)."""

    def __init__(self, seed, k):
        self.W = np.random.default_rng(seed).standard_normal((4, 4))
        self.k = k

    def __bool__(self):
        return self.k > 1.5

    def __lt__(self, other):
        return self.k < other.k

    def __enter__(self):
        return self.k

    def __exit__(self, *exception):
        return False

    def __format__(self, spec):
        return f"k{self.k}"

    def __str__(self):
        return f"k{self.k}"

    def __mul__(self, factor):  # an operator: run rewritten, reads guarded
        return self.W * factor * self.k


def test_special_methods_python_calls_unseen():
    def truth(a, b, x):
        return x * 2.0 if a else x * 3.0

    def less(a, b, x):
        return x * 2.0 if a < b else x * 3.0

    def entered(a, b, x):
        with a as k:
            return x * k

    def formatted(a, b, x):
        return x * (2.0 if f"{a}" == "k1.0" else 3.0)

    def percent(a, b, x):
        return x * (2.0 if "%s" % a == "k1.0" else 3.0)

    def scaled(a, b, x):
        return x @ (a * 2.0)

    make = lambda: [Spoken(0, 1.0), Spoken(1, 2.0)]  # noqa: E731
    for function in (truth, less, entered, formatted, percent, scaled):
        twins(make, function, [((0, 1), None), ((1, 0), None), ((0, 1), None)])
