"""Trace every model of ``tests/model_corpus.py`` on every argument set and check it.

For each case and argument set: the trace's outputs are eager NumPy's outputs (same
pytree structure, leaf kinds, dtypes, shapes and values, NaNs equal - exactly, since the
trace runs the same NumPy code); writes into input arrays reach the caller's arrays as
they do eagerly; the IR verifies, prints and parses back to an equal graph, and
``optimize`` keeps it valid. On the first argument set, every expected value guard is
there, points at the corpus line that holds its source text, and no other value guard
was recorded. Across all argument sets, every ``if``/``while`` line is seen both ways.
"""

from __future__ import annotations

import copy
import linecache
from collections import defaultdict

import model_corpus
import numpy as np
import pytest
from model_corpus import CASES

from tracejit.tracer import trace
from tracejit.tracer.ir import parse_graph, verify
from tracejit.tracer.passes import optimize

# NaN/Inf inputs make eager NumPy warn (overflow in exp); the values are what is compared.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _params():
    for case in CASES:
        for index in range(len(case.arg_sets)):
            marks = ()
            if case.known_bug:
                marks = (pytest.mark.xfail(strict=True, reason=case.known_bug),)
            yield pytest.param(case, index, id=f"{case.name}-{index}", marks=marks)


def _array_leaves(tree):
    """The ndarrays of an argument pytree, in a fixed order (for write-back checks)."""
    if isinstance(tree, np.ndarray):
        return [tree]
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _array_leaves(tree[key])]
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in _array_leaves(item)]
    return []


def assert_same_tree(actual, expected, path="output", rtol=None):
    """``actual`` matches ``expected`` exactly: containers of the same type with the same
    keys, Python scalars of the same type, NumPy values with equal dtype, shape and values
    (NaN equal to NaN). A 0-d array and a NumPy scalar count as the same kind of leaf."""
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for index, (left, right) in enumerate(zip(actual, expected)):
            assert_same_tree(left, right, f"{path}[{index}]", rtol)
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {type(actual)} is not a dict"
        assert set(actual) == set(expected), f"{path}: keys {set(actual)} != {set(expected)}"
        for key in expected:
            assert_same_tree(actual[key], expected[key], f"{path}[{key!r}]", rtol)
    elif isinstance(expected, (np.ndarray, np.generic)):
        assert isinstance(actual, (np.ndarray, np.generic)), (
            f"{path}: {type(actual).__name__} where NumPy gives {type(expected).__name__}"
        )
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert np.shape(actual) == np.shape(expected), (
            f"{path}: shape {np.shape(actual)} != {np.shape(expected)}"
        )
        if rtol is None:
            np.testing.assert_array_equal(actual, expected, err_msg=path, strict=False)
        else:  # a composite (np.logaddexp from primitives) rounds differently
            np.testing.assert_allclose(actual, expected, rtol=rtol, err_msg=path)
    else:
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert actual == expected or (actual != actual and expected != expected), path


@pytest.mark.parametrize(("case", "index"), list(_params()))
def test_trace_matches_eager(case, index):
    arguments = case.arg_sets[index]
    eager_args = copy.deepcopy(arguments)
    traced_args = copy.deepcopy(arguments)

    expected = case.fn(*eager_args)
    traced = trace(case.fn, *traced_args, dynamic=case.dynamic)

    assert_same_tree(traced.outputs, expected, rtol=case.rtol)
    # Eager semantics for in-place writes: the caller's arrays change the same way.
    for traced_leaf, eager_leaf, original in zip(
        _array_leaves(traced_args), _array_leaves(eager_args), _array_leaves(arguments)
    ):
        np.testing.assert_array_equal(traced_leaf, eager_leaf)
        if not np.array_equal(eager_leaf, original, equal_nan=True):
            assert traced.mutated_inputs, "an input was written eagerly but not marked mutated"

    graph = traced.graph
    verify(graph)
    assert parse_graph(str(graph), graph.constant_table()) == graph
    verify(optimize(graph))


def _guard_source_line(guard):
    return linecache.getline(guard.location.file, guard.location.line)


@pytest.mark.parametrize(
    "case", [case for case in CASES if not case.known_bug], ids=lambda case: case.name
)
def test_value_guards_on_first_argument_set(case):
    traced = trace(case.fn, *copy.deepcopy(case.arg_sets[0]), dynamic=case.dynamic)
    guards = traced.value_guards
    for expected in case.guards:
        matching = [guard for guard in guards if guard.location and expected in str(guard.location)]
        if not matching and case.exit_in_captured_loop and traced.captured_loops:
            continue  # the loop node decides its exit: no guard
        assert matching, f"no value guard at {expected!r}; guards: {guards}"
        for guard in matching:
            assert guard.location.file.endswith("model_corpus.py"), guard.location
            assert expected in _guard_source_line(guard), guard.location
    for guard in guards:
        assert guard.location is not None, f"a guard without a location: {guard}"
        assert any(expected in _guard_source_line(guard) for expected in case.guards), (
            f"unexpected value guard at {guard.location}"
        )


@pytest.mark.parametrize(
    "case", [case for case in CASES if case.guards and not case.known_bug],
    ids=lambda case: case.name,
)
def test_argument_sets_take_every_branch(case):
    """The corpus's own promise: each ``bool`` guard line is seen True and False."""
    outcomes, guard_count, captured = defaultdict(set), 0, False
    for arguments in case.arg_sets:
        traced = trace(case.fn, *copy.deepcopy(arguments), dynamic=case.dynamic)
        guard_count += len(traced.value_guards)
        captured |= bool(traced.captured_loops)
        for guard in traced.value_guards:
            # Branches only: a guard on an outside mask's contents is not a branch.
            branch = _guard_source_line(guard).lstrip().startswith(("if ", "elif ", "while "))
            if guard.convert == "bool" and branch:
                outcomes[(guard.location.file, guard.location.line)].add(guard.expected)
    if case.exit_in_captured_loop:  # the loop node decides its exit (at trip 0 too)
        assert captured, "no argument set's trace captured the loop"
        return
    assert guard_count, "the case expects guards but none was recorded"
    for (file, line), seen in outcomes.items():
        assert seen == {True, False}, f"{file}:{line} only ever went {seen}"


@pytest.mark.parametrize(
    "case", [case for case in CASES if case.dynamic and not case.known_bug],
    ids=lambda case: case.name,
)
def test_dynamic_cases_trace_with_symbols(case):
    """A case marked dynamic really exercises symbolic dims (or dynamic scalars)."""
    traced = trace(case.fn, *copy.deepcopy(case.arg_sets[-1]), dynamic=case.dynamic)
    dynamic_scalars = [spec for spec in traced.input_specs if spec.kind == "scalar"]
    assert traced.graph.symbols or dynamic_scalars


def test_corpus_size_and_names():
    assert len(CASES) >= 40
    assert all(case.arg_sets for case in CASES)
    assert model_corpus.CASES_BY_NAME["attention"].fn is model_corpus.attention
