"""Writes into a dict argument (``config["t"] += 1``, ``config["velocity"] = v``) compile,
and leave the caller's dict as the eager call leaves it (tracer/argument_writes.py). Each
test runs eager and jit on deep copies and compares results and the dicts after every
call, over several calls (traced, then compiled, then from the disk cache)."""

import copy

import numpy as np
import pytest

import tracejit as tj


def sgd_momentum(w, dw, config):
    config.setdefault("learning_rate", 1e-2)
    v = config.get("velocity", np.zeros_like(w))
    v = config["momentum"] * v - config["learning_rate"] * dw
    config["velocity"] = v
    return w + v, config


def adam(w, dw, config):
    config["t"] += 1
    config["m"] = config["beta1"] * config["m"] + (1 - config["beta1"]) * dw
    config["v"] = config["beta2"] * config["v"] + (1 - config["beta2"]) * dw ** 2
    mb = config["m"] / (1 - config["beta1"] ** config["t"])
    vb = config["v"] / (1 - config["beta2"] ** config["t"])
    return w - config["learning_rate"] * mb / (np.sqrt(vb) + config["epsilon"])


def counts_and_labels(x, state):
    state["calls"] = state["calls"] + 1.5  # a float that changes every call
    state["mode"] = "seen"  # a plain value
    state["scale"] = np.float32(2.0) * state["scale"]  # a NumPy scalar
    return x * state["scale"]


def writes_a_list(x, state):
    state["history"] = [x.sum()]  # a new list: eager makes one per call
    return x


def nested(x, state):
    state["inner"]["y"] = x * 2.0
    return x


def through_a_name(x, state):
    inner = state["inner"]
    inner["y"] = x - 1.0
    inner["n"] = inner.get("n", 0) + 1
    return x


def into_a_list(x, items):
    items[0] = x * 2.0
    items[-1] = items[-1] + x  # the same position as items[1] of two
    return x


def a_list_into_a_list(x, items):
    items[0] = [x.sum()]  # a new list: eager makes one per call
    return x


def assert_same(got, want):
    if isinstance(want, dict):
        assert set(got) == set(want)
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif isinstance(want, str):
        assert got == want
    else:
        assert type(got) is type(want), (type(got), type(want))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def run_both(function, make, calls=5, **options):
    f = tj.jit(function, cache="memory", **options)
    rng = np.random.default_rng(0)
    *first, state = make(rng)
    mine, theirs = copy.deepcopy(state), copy.deepcopy(state)
    for _ in range(calls):
        arrays = [rng.standard_normal(np.shape(a)) for a in first]
        want = function(*copy.deepcopy(arrays), theirs)
        got = f(*copy.deepcopy(arrays), mine)
        assert_same(got, want)
        assert_same(mine, theirs)
    return f


def weights(rng):
    return rng.standard_normal((4, 3)), rng.standard_normal((4, 3))


def test_momentum_keeps_its_velocity_in_the_config():
    f = run_both(sgd_momentum, lambda rng: (*weights(rng), {"momentum": 0.9}))
    stats = f.stats()
    assert not stats["eager_calls"] and stats["compiled_calls"] >= 3, stats


def test_adam_counts_its_steps_and_keeps_its_moments():
    config = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
              "m": np.zeros((4, 3)), "v": np.zeros((4, 3)), "t": 0}
    f = run_both(adam, lambda rng: (*weights(rng), config), calls=6)
    stats = f.stats()
    # t changes every call: traced as a constant, then as a run-time scalar
    assert not stats["eager_calls"] and stats["compiles"] == 2, stats


def test_numbers_and_plain_values_written_keep_their_types():
    f = run_both(counts_and_labels, lambda rng: (rng.standard_normal(3), {
        "calls": 0.0, "mode": "new", "scale": np.float32(1.0)}))
    assert not f.stats()["eager_calls"], f.stats()


def test_keyword_dict_arguments_are_written_too():
    f = tj.jit(sgd_momentum, cache="memory")
    mine, theirs = {"momentum": 0.5}, {"momentum": 0.5}
    for _ in range(4):
        w, dw = weights(np.random.default_rng(1))
        assert_same(f(w, dw, config=mine), sgd_momentum(w, dw, config=theirs))
        assert_same(mine, theirs)


@pytest.mark.parametrize("function", [nested, through_a_name])
def test_a_dict_nested_in_an_argument_is_written(function):
    f = run_both(function, lambda rng: (rng.standard_normal(3), {"inner": {}}))
    assert not f.stats()["eager_calls"], f.stats()


@pytest.mark.parametrize("function, state", [
    (writes_a_list, {"history": []}),
    (a_list_into_a_list, [None]),
])
def test_writes_it_cannot_repeat_run_eagerly_and_right(function, state):
    f = tj.jit(function, cache="memory")
    mine, theirs = copy.deepcopy(state), copy.deepcopy(state)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(3)
        assert_same(f(x.copy(), mine), function(x.copy(), theirs))
        assert_same(mine, theirs)
    assert f.stats()["eager_calls"], f.stats()


def test_items_of_a_list_argument_are_written():
    """deepnet's momentum, ``v[i] = mu * v[i] + lr * grad[i]`` over the caller's list: the
    list's length is part of the call's structure, so each item written is an output the
    compiled call stores back, as a dict's is (before, every call ran eagerly)."""
    f = run_both(into_a_list, lambda rng: (rng.standard_normal(3), [np.zeros(3), np.ones(3)]))
    assert not f.stats()["eager_calls"] and f.stats()["compiled_calls"] >= 3, f.stats()


def test_a_warm_start_from_disk_still_writes_the_dict(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    config = {"learning_rate": 1e-2, "momentum": 0.9, "velocity": np.zeros((4, 3))}
    tj.jit(sgd_momentum)(*weights(np.random.default_rng(2)), copy.deepcopy(config))
    second = tj.jit(sgd_momentum)  # as a new process would: the program comes from disk
    mine, theirs = copy.deepcopy(config), copy.deepcopy(config)
    for seed in range(3):
        w, dw = weights(np.random.default_rng(3 + seed))
        assert_same(second(w, dw, mine), sgd_momentum(w, dw, theirs))
        assert_same(mine, theirs)
    stats = second.stats()
    assert stats["disk_hits"] == 1 and stats["compiled_calls"] == 3, stats


def decays_in_a_nested_dict(x, state):
    for t in range(x.shape[0]):
        state["inner"]["h"] = state["inner"]["h"] * 0.5 + x[t]
    return state["inner"]["h"].sum()


def decays_in_a_local_nested_dict(x):
    state = {"inner": {"h": np.zeros(x.shape[1])}}
    for t in range(x.shape[0]):
        state["inner"]["h"] = state["inner"]["h"] * 0.5 + x[t]
    return state["inner"]["h"]


def test_a_nested_dict_written_in_a_loop_body_unrolls_and_is_right():
    """A traced trip must not leave its symbolic values in a container no carry tracks:
    the loop unrolls (before: the trips' values stayed in the dict; invalid IR, and the
    caller's dict got the third trip's value)."""
    for length in (3, 4, 5, 4):
        x = np.arange(3.0 * length).reshape(length, 3)
        mine, theirs = {"inner": {"h": np.zeros(3)}}, {"inner": {"h": np.zeros(3)}}
        f = tj.jit(decays_in_a_nested_dict, cache="memory", dynamic=True)
        assert_same(f(x, mine), decays_in_a_nested_dict(x, theirs))
        assert_same(mine, theirs)
        g = tj.jit(decays_in_a_local_nested_dict, cache="memory", dynamic=True)
        for _ in range(2):
            assert_same(g(x), decays_in_a_local_nested_dict(x))
        assert not g.stats()["eager_calls"], g.stats()


def returns_its_config(w, dw, config):
    config["t"] = config.get("t", 0) + 1
    return w - 0.1 * dw, config


def returns_nested(x, state):
    state["inner"]["y"] = x * 2.0
    return (x, [state["inner"], state]), {"kept": state}


def test_a_returned_argument_dict_is_the_callers_own(tmp_path, monkeypatch):
    """next_w, config = adam(w, dw, config): NumPy returns the caller's dict itself (a
    copy would miss the caller's later writes), traced, compiled and from the disk."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    for _attempt in range(2):
        f = tj.jit(returns_its_config)
        for n in (3, 3, 5, 3):
            config = {"lr": 0.1}
            _, returned = f(np.ones(n), np.ones(n), config)
            assert returned is config and config["t"] == 1
    assert f.stats()["disk_hits"] >= 1


def test_returned_nested_argument_containers_are_the_callers_own():
    f = tj.jit(returns_nested, cache="memory")
    for n in (2, 2, 4, 2):
        state = {"inner": {}}
        (x, (inner, outer)), kept = f(np.ones(n), state)
        assert inner is state["inner"] and outer is state and kept["kept"] is state
        np.testing.assert_array_equal(state["inner"]["y"], np.full(n, 2.0))
