"""A program loaded from the disk cache builds its wrapper from the stored wrapper plan
(``codegen/program.py`` ``wrapper_plan``: which results get an output array, the
workspace size) and its parsed graph, without scheduling the graph again. The wrapper is
the same text rescheduling makes; a plan that does not fit its graph is refused."""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import codegen, jit, tracer
from tracejit.codegen import program as program_module
from tracejit.runtime import serialize


def model(x, w):
    hidden = np.tanh(x @ w)
    print("mean", hidden.mean())
    return hidden * 2.0 + 1.0, x.T, (hidden ** 2).sum(axis=1)


@pytest.fixture(scope="module")
def programs():
    """``model`` compiled for exact shapes and for buckets (a workspace over symbols)."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((5, 3))
    return [codegen.compile(tracer.passes.optimize(tracer.trace(model, x, w,
                                                                dynamic=dynamic).graph),
                            optimized=True) for dynamic in (False, True)]


@pytest.mark.parametrize("which", [0, 1])
def test_the_planned_wrapper_is_the_rescheduled_one(programs, which):
    program = programs[which]
    assert program.wrapper_plan is not None
    assert program_module.rebuild_wrapper(program.graph, plan=program.wrapper_plan) == (
        program_module.rebuild_wrapper(program.graph)) == program.wrapper_source


def test_a_warm_start_loads_without_scheduling(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((5, 3))
    compiling = jit(model)
    compiling(x, w)
    expected = compiling(x, w)

    def no_scheduling(graph):
        raise AssertionError("a load scheduled the graph")

    monkeypatch.setattr(program_module, "make_schedule", no_scheduling)
    loading = jit(model)
    result = loading(x, w)
    assert loading.stats()["disk_hits"] == 1 and loading.stats()["compiles"] == 0
    for got, want in zip(result, expected):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(result[1], x.T)
    assert np.shares_memory(result[1], x)  # a view of the argument, as eager's
    assert capsys.readouterr().out.count("mean") == 3


@pytest.mark.parametrize("change", [
    {"outputs": ["%nope"]}, {"outputs": "x"}, {"outputs": None}, {"workspace": -8},
    {"workspace": "s9 * 8"}, {"workspace": 1.5}, {"workspace": "__import__('os')"},
    {"workspace": None}, "twice", "not a dict",
])
def test_a_plan_that_does_not_fit_its_graph_is_refused(programs, change):
    program = programs[1]
    blobs = serialize.Blobs()
    data = serialize.program_to_json(program, blobs)
    plan = dict(program.wrapper_plan)
    if change == "twice":
        plan["outputs"] = plan["outputs"] + plan["outputs"][:1]
    elif change == "not a dict":
        plan = ["outputs"]
    else:
        plan.update(change)
    with pytest.raises(ValueError):
        program_module.planned_schedule(program.graph, plan)
    data["wrapper_plan"] = plan
    with pytest.raises(serialize.InvalidEntry):
        serialize.program_from_json(data, blobs)
