"""A call that writes state reads it as eager does whether or not two routes reach one
object (``tracer.shared_objects``), and a setting read only on a branch traced later is
checked at entry too (``runtime.misses._widen_entry``).

Before: a trace of ``self.a.fc["X"] = ...; return self.b.fc["X"]`` with two dicts ran
its program after ``model.b = model.a`` and returned the stale item (and the other way
round); a branch traced after a side exit kept the value of a global it read, after the
global changed. Each test compares every call with a twin run eagerly."""

import numpy as np
import pytest

import tracejit as tj


class Layer:
    def __init__(self, value=0.0):
        self.fc = {"X": np.full(4, value)}
        self.h = np.full(3, value)


class Model:
    def __init__(self):
        self.a, self.b = Layer(0.0), Layer(1.0)


def item_written_then_read(model, x):
    model.a.fc["X"] = x * 2.0
    return model.b.fc["X"] + 1.0


def attribute_written_then_read(model, x):
    model.a.h = model.a.h + x[:3]
    return model.b.h * 2.0


def _tie(model):
    model.b = model.a


def _tie_dicts(model):
    model.b = Layer()
    model.b.fc = model.a.fc


def _untie(model):
    model.b = Layer(1.0)


def _compare(f, body, jitted_model, eager_model, calls=2, start=0):
    for step in range(start, start + calls):
        x = np.arange(4.0) + step
        np.testing.assert_array_equal(f(jitted_model, x), body(eager_model, x))
        np.testing.assert_array_equal(jitted_model.a.fc["X"], eager_model.a.fc["X"])
        np.testing.assert_array_equal(jitted_model.a.h, eager_model.a.h)


@pytest.mark.parametrize("body", [item_written_then_read, attribute_written_then_read])
@pytest.mark.parametrize("change", [_tie, _tie_dicts, _untie])
def test_routes_joined_or_parted_after_the_trace(body, change):
    f = tj.jit(body, cache="memory")
    jitted, eager = Model(), Model()
    if change is _untie:  # traced tied, then parted
        _tie(jitted)
        _tie(eager)
    _compare(f, body, jitted, eager)
    change(jitted)
    change(eager)
    _compare(f, body, jitted, eager, start=2)
    assert f.stats()["compiled_calls"] >= 1  # the new sharing gets a variant of its own


def test_an_argument_dict_an_attribute_reaches_after_the_trace():
    class Owner:
        def __init__(self):
            self.cache = {"h": np.zeros(3)}

    def body(owner, state, x):
        state["h"] = x * 3.0
        return owner.cache["h"] + x

    f = tj.jit(body, cache="memory")
    jitted, eager = (Owner(), {"h": np.zeros(3)}), (Owner(), {"h": np.zeros(3)})
    for step in range(4):
        if step == 2:  # now the owner's cache is the dict passed in
            jitted[0].cache, eager[0].cache = jitted[1], eager[1]
        x = np.ones(3) + step
        np.testing.assert_array_equal(f(*jitted, x), body(*eager, x))
        np.testing.assert_array_equal(jitted[1]["h"], eager[1]["h"])


def test_the_entry_guard_tells_why_a_tied_model_missed():
    f = tj.jit(item_written_then_read, cache="memory")
    model = Model()
    f(model, np.ones(4))
    assert any("distinct object(s)" in line for line in f.explain().splitlines())
    _tie(model)
    from tracejit.runtime import diagnostics

    why = diagnostics.mismatch(f._variants[0].spec, [model, np.ones(4)])
    assert "argument 0.b is now argument 0.a" in why


def test_a_function_that_writes_nothing_has_no_identity_check():
    def reads_two_routes(model, x):
        return model.a.fc["X"] + model.b.fc["X"] + x

    f = tj.jit(reads_two_routes, cache="memory")
    model = Model()
    f(model, np.ones(4))
    assert not any(kind == "shared" for _, kind, _ in f._variants[0].spec.outside)
    _tie(model)
    np.testing.assert_array_equal(f(model, np.ones(4)), reads_two_routes(model, np.ones(4)))


SETTINGS = {"scale": 2.0}


def scaled_on_one_branch(x):
    if x.sum() > 0:
        return x * SETTINGS["scale"]  # read only on this branch
    return x - 1.0


def test_a_setting_read_only_by_a_later_branch_is_checked_at_entry():
    f = tj.jit(scaled_on_one_branch, cache="memory", hot_exit=1)
    try:
        for step in range(6):
            if step == 4:
                SETTINGS["scale"] = 5.0
            x = np.ones(3) * (-1.0 if step == 0 else 1.0)
            np.testing.assert_array_equal(f(x), scaled_on_one_branch(x))
        assert f.stats()["compiled_calls"] >= 3
    finally:
        SETTINGS["scale"] = 2.0


STATE = {"v": np.zeros(4)}


def written_in_an_argument_read_from_a_global(config, x):
    config["v"] = x * 2.0
    return STATE["v"] + 1.0


def test_the_identity_check_survives_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    body = written_in_an_argument_read_from_a_global
    first = tj.jit(body)
    np.testing.assert_array_equal(first({"v": np.ones(4)}, np.ones(4)), np.ones(4))
    second = tj.jit(body)  # a new process's view of the same cache
    config = {"v": np.ones(4)}
    np.testing.assert_array_equal(second(config, np.ones(4)), np.ones(4))
    assert second.stats()["disk_hits"] == 1
    monkeypatch.setitem(globals(), "STATE", config)  # the global is now the dict passed in
    np.testing.assert_array_equal(second(config, np.full(4, 3.0)), np.full(4, 7.0))


def test_a_forged_identity_check_is_refused():
    from tracejit.runtime import serialize

    data = {"paths": [{"kind": "arg", "leaf": 0, "steps": []}], "labels": [1],
            "containers": []}
    with pytest.raises(Exception, match="partition"):
        serialize._shared_from_json(data, item_written_then_read)


def writes_on_one_branch(a, b):
    if a.sum() > 0:
        a += 1.0  # only the later branch writes: the first path's program writes nothing
        return b * 2.0
    return b - 1.0


def item_written_on_one_branch(d, e, x):
    if x.sum() > 0:
        d["k"] = x * 2.0
        return e["k"] + 1.0
    return x


def test_a_later_branch_that_writes_sees_arguments_passed_twice():
    """The memory and container checks ran for the first path's program only: a call
    taking the later branch with one array (one dict) twice ran it holding them apart."""
    f = tj.jit(writes_on_one_branch, cache="memory", hot_exit=1)
    g = tj.jit(item_written_on_one_branch, cache="memory", hot_exit=1)
    for sign in (-1.0, 1.0, 1.0):
        f(np.full(3, sign), np.ones(3))
        g({"k": np.zeros(3)}, {"k": np.zeros(3)}, np.full(3, sign))
    assert f.stats()["paths"] == 2 and g.stats()["paths"] == 2
    x, twin = np.ones(3), np.ones(3)
    np.testing.assert_array_equal(f(x, x), writes_on_one_branch(twin, twin))
    np.testing.assert_array_equal(x, twin)
    d, twin = {"k": np.zeros(3)}, {"k": np.zeros(3)}
    np.testing.assert_array_equal(g(d, d, np.ones(3)),
                                  item_written_on_one_branch(twin, twin, np.ones(3)))
    np.testing.assert_array_equal(d["k"], twin["k"])


def test_check_mode_reruns_a_later_branch_from_the_state_before_its_writes():
    f = tj.jit(writes_on_one_branch, cache="memory", hot_exit=1, check=True)
    for sign in (-1.0, 1.0, 1.0, 1.0):
        a, twin = np.full(3, sign), np.full(3, sign)
        np.testing.assert_array_equal(f(a, np.ones(3)), writes_on_one_branch(twin, np.ones(3)))
        np.testing.assert_array_equal(a, twin)
