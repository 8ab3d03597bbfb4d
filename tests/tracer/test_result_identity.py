"""Results are the arrays NumPy returns (``tracer/result_identity.py``): distinct where
NumPy's are (``return x * 2, x * 2``), views of one another where NumPy's are (``return
y, y.T``), one object where NumPy's is (``return v, v``), the caller's array where NumPy's
is. Each model runs eagerly and through ``jit`` on the same arguments; every call after
the first is compiled; ``is`` and ``np.shares_memory`` between results and between
results and arguments agree with eager's, and so do all values after a write into each
writeable result in turn."""

import numpy as np
import pytest
from real_model_checks import all_compiled, assert_same

import tracejit as tj


def leaves_of(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in leaves_of(item)]
    if isinstance(tree, dict):
        return [leaf for item in tree.values() for leaf in leaves_of(item)]
    return [tree]


def relations(results, arguments):
    """``is`` and ``np.shares_memory`` of every pair of result arrays and of every result
    array with every argument array."""
    results = [leaf for leaf in leaves_of(results) if isinstance(leaf, np.ndarray)]
    arguments = [leaf for leaf in leaves_of(arguments) if isinstance(leaf, np.ndarray)]
    pairs = [(a, b) for i, a in enumerate(results) for b in results[i + 1:]]
    pairs += [(a, b) for a in results for b in arguments]
    return [(a is b, bool(np.shares_memory(a, b)), a.flags.writeable) for a, b in pairs]


def write_into_each(results):
    """Add one to each writeable result in turn, as a caller might (NumPy's views see it)."""
    for leaf in leaves_of(results):
        if isinstance(leaf, np.ndarray) and leaf.flags.writeable:
            leaf += 1.0


def equal_computations(x):
    return x * 2.0, x * 2.0


def equal_computations_viewed(x):
    a, b = x * 2.0, x * 2.0
    return a.T, b.T


def result_and_its_views(x):
    h = np.tanh(x)
    return h, h.T, h[:, -1], h.reshape(-1), h[::-1]


def views_of_a_dropped_value(x):
    y = x + 1.0
    return y[1:], y[:1], y[:, 1:]


def one_view_twice(x):
    tail = (x * 3.0)[1:]
    return tail, tail


def one_view_computed_twice(x):
    y = x * 3.0
    return y[1:], y[1:]


def one_array_under_two_keys(x):
    y = x - 1.0
    return {"a": y, "b": y, "c": [y.T]}


def argument_and_results(x):
    return x, x * 1.0, x.T, x


def views_in_a_tuple(x):
    y = np.exp(x)
    return (y.T, y[0]), y[1]


def one_constant_twice(x):
    table = np.linspace(0.0, 1.0, 4)  # a NumPy array the function makes: a constant
    return table, [table, x + 1.0], np.zeros(2), np.zeros(2)


def new_views_where_nothing_changes(x):
    y = x * 2.0
    return x, x[...], x[:], x.reshape(x.shape), x.T.T, y, y[...], y.transpose(0, 1), y[0].T


def written_through_a_view_where_nothing_changes(x):
    y = x * 1.0
    view = y[...]
    view += 1.0              # into y
    return y, view, view.squeeze()


MODELS = [new_views_where_nothing_changes, written_through_a_view_where_nothing_changes,
          equal_computations, equal_computations_viewed, result_and_its_views,
          views_of_a_dropped_value, one_view_twice, one_view_computed_twice,
          one_array_under_two_keys, argument_and_results, views_in_a_tuple,
          one_constant_twice]


def compare(f, model, make):
    jit_args, eager_args = make(), make()
    got, want = f(*jit_args), model(*eager_args)
    assert_same(got, want)
    assert relations(got, jit_args) == relations(want, eager_args)
    write_into_each(got)
    write_into_each(want)
    assert_same(got, want, where="results after writes into them")
    assert_same(jit_args, eager_args, where="arguments after writes into the results")


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("model", MODELS)
def test_results_are_the_arrays_numpy_returns(model, dynamic):
    f = tj.jit(model, cache="memory", dynamic=dynamic)
    sizes = [(2, 3), (2, 3), (2, 4)] if dynamic else [(2, 3)] * 3  # (2, 4): the same bucket
    for shape in sizes:
        compare(f, model, lambda shape=shape: (np.arange(np.prod(shape), dtype=float)
                                               .reshape(shape) - 2.0,))
    assert all_compiled(f, 3) and f.stats()["compiled_calls"] >= 2, f.explain()


@pytest.mark.parametrize("model", [equal_computations, result_and_its_views,
                                   views_of_a_dropped_value, one_view_twice])
def test_results_loaded_from_the_disk_cache(model, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))

    def make():
        return (np.linspace(-1.0, 1.0, 6).reshape(2, 3),)

    compiling = tj.jit(model)
    compiling(*make())
    compiling(*make())
    loading = tj.jit(model)
    compare(loading, model, make)
    stats = loading.stats()
    assert stats["disk_hits"] == 1 and stats["compiles"] == 0 and stats["compiled_calls"] == 1


def tensor_model(x):
    y = x * 3.0
    return y, y.T, x * 2.0, x * 2.0


def test_tensor_results_with_gradients_are_distinct():
    weights = [np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(3, 2) + 1.0,
               np.full((2, 3), 0.5), np.full((2, 3), -2.0)]

    def run(function):
        x = tj.tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3), requires_grad=True)
        results = function(x)
        sum((result * weight).sum() for result, weight in zip(results, weights)).backward()
        return [result.numpy() for result in results], x.grad

    f = tj.jit(tensor_model, cache="memory")
    for _ in range(3):
        got, got_grad = run(f)
        want, want_grad = run(tensor_model)
        assert_same(got, want)
        np.testing.assert_allclose(got_grad, want_grad)
        assert not np.shares_memory(got[2], got[3])  # x * 2.0 twice: two tensors
    assert f.stats()["compiled_calls"] >= 2, f.explain()


def sgd_returning_views(w, dw):
    w -= 0.1 * dw
    return w.reshape(-1)[1:], w.T.reshape(-1), w[:, 1:].reshape(-1)


LAYOUTS = {"c-order": lambda a: a, "fortran": np.asfortranarray,
           "strided": lambda a: np.repeat(a, 2, axis=1)[:, ::2]}


@pytest.mark.parametrize("cache", ["memory", "disk"])
def test_views_of_an_argument_updated_in_place_that_numpy_may_copy(cache, tmp_path,
                                                                     monkeypatch):
    """NumPy's reshape of the updated ``w`` is a view of the caller's array where it can be
    (C order) and a copy of the new values where not: compiled results are the same."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    options = {"cache": "memory"} if cache == "memory" else {}
    if cache == "disk":
        warm = tj.jit(sgd_returning_views)
        for _ in range(2):
            warm(np.ones((2, 3)), np.ones((2, 3)))
    f = tj.jit(sgd_returning_views, **options)
    for layout in [*LAYOUTS.values(), *LAYOUTS.values()]:
        compare(f, sgd_returning_views, lambda layout=layout: (
            layout(np.arange(6.0).reshape(2, 3)), np.linspace(0.0, 1.0, 6).reshape(2, 3)))
    stats = f.stats()
    assert stats["compiled_calls"] >= 4 and not stats["eager_calls"], f.explain()
    if cache == "disk":
        assert stats["disk_hits"] == 1 and stats["compiles"] == 0, f.explain()
