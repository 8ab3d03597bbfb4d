"""Adversarial loops: bodies written to make a captured loop differ from eager NumPy.

Loop capture traces a body on a few iterations and generalizes them into one loop node
(tracer/loops.py); these are the cases where that generalization could be wrong or crash
while eager NumPy runs: reads past the end or at ``t - 1`` when t = 0 (NumPy wraps),
writes that overlap between iterations, carried values that alias an input or are
updated in place (``h += x[t]``, also after a list or dict took them), buffers that are
input arguments (a prefix sum in the caller's array), zero-trip loops whose values are
used after, the loop variable used after the loop, exceptions raised in the body (at a
step, or on NaN data), a ``range`` shadowed by the user, dtype promotion of a carried
value (and in-place casts NumPy refuses), an ``if`` on data at every step, shapes that
change between iterations, and the index used
in Python control flow or non-affine arithmetic (``t // 2``, ``t % 3``, ``min(t, 2)``,
``if t == 4``, a list indexed by t).

Every case runs eagerly and through one ``jit`` over several trip counts (two calls each:
traced, then compiled) and must agree: same results (per-dtype tolerance), same
arguments afterwards, same exception type. Where a loop can be captured, some call must
run compiled (a loop that always falls back to eager is a failure of its own, marked
separately). A case that fails today is ``xfail(strict=True)`` with what is wrong.
"""

from __future__ import annotations

import builtins
import copy
import warnings

import numpy as np
import pytest

from tracejit import jit
from tracejit.testing import compare_results

LENGTHS = (5, 8, 6, 7)  # one pow2 bucket: one compile when the loop is captured


# --- indices at the edges -------------------------------------------------------------------
def read_past_end(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t + 1:t + 2].sum(axis=0)  # an empty slice at the last step
    return h


def read_next_index(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t + 1]  # IndexError at the last step, eagerly too
    return h


def wraps_at_zero(x):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        out[t] = x[t] - x[t - 1]  # t = 0 reads x[-1]: NumPy wraps to the last row
    return out


def wraps_buffer_at_zero(x):
    out = np.ones_like(x)
    for t in range(x.shape[0]):
        out[t] = out[t - 1] * 0.5 + x[t]  # t = 0 reads out[-1], still ones
    return out


def reversed_write(x):
    out = np.zeros_like(x)
    T = x.shape[0]
    for t in range(T):
        out[T - 1 - t] = x[t] * 2.0
    return out


# --- writes, aliasing, arguments --------------------------------------------------------------
def overlapping_writes(x):
    out = np.zeros((x.shape[0] + 1, x.shape[1]))
    for t in range(x.shape[0]):
        out[t:t + 2] = out[t:t + 2] + x[t]  # each step adds into the row the next one writes
    return out


def read_after_write_in_step(x):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        out[t] = x[t] * 2
        out[t] = out[t] + out[t - 1]  # the row written one step before
    return out


def carried_aliases_input(x, h0):
    h = h0
    for t in range(x.shape[0]):
        h = h * 0.5 + x[t]
    return h, h0


def carried_starts_as_input_view(x):
    h = x[0]
    for t in range(x.shape[0]):
        h = h * 0.5 + x[t]
    return h


def writes_into_argument(x, out):
    for t in range(x.shape[0]):
        out[t] = np.tanh(x[t])  # eager mutates the caller's array: so must jit
    return out.sum()


def writes_into_copy_of_argument(x, out):
    buffer = out.copy()
    for t in range(x.shape[0]):
        buffer[t] = np.tanh(x[t])  # the caller's array must stay as it was
    return buffer


def augmented_into_argument(x, acc):
    for t in range(x.shape[0]):
        acc += x[t]
    return acc


def write_then_read_whole_buffer(x):
    out = np.zeros_like(x)
    total = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        out[t] = x[t]
        total = total + out.sum(axis=0)  # sees the rows written so far only
    return total


# --- trip counts, values after the loop -----------------------------------------------------
def zero_trips_used_after(x, h0):
    h = h0
    out = h0 * 2
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t])
        out = h * 3
    return h, out


def index_used_after(x):
    h = np.zeros_like(x[0])
    t = -1
    for t in range(x.shape[0]):
        h = h + x[t]
    return h, t


def traced_bound(x):
    h = np.zeros(3)
    for _ in range(int(x.sum())):
        h = h * 0.5 + 1.0
    return h


def raises_at_step_four(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t]
        if t == 4:
            raise ValueError("step 4")
    return h


def _with_own_range():
    def range(*args):  # noqa: A001 - a user's own range, shadowing the builtin on purpose
        return list(builtins.range(*args))[::-1]

    def shadowed_range(x):
        out = np.zeros_like(x)
        h = np.zeros_like(x[0])
        for t in range(x.shape[0]):  # the enclosing function's range: backwards
            h = h * 0.5 + x[t]
            out[t] = h
        return out

    return shadowed_range


shadowed_range = _with_own_range()


# --- dtypes and shapes of carried values ----------------------------------------------------
def int_then_float(x):
    h = 0
    for t in range(x.shape[0]):
        h = h + x[t]  # a Python int, then x's dtype
    return h


def float_then_f32(x):
    h = 0.0
    for t in range(x.shape[0]):
        h = h + x[t]  # a weak Python float, then float32
    return h


def int_array_accumulator(x):
    count = np.zeros(x.shape[1], dtype=np.int64)
    for t in range(x.shape[0]):
        count = count + (x[t] > 0)
    return count


def f32_times_f64_weight(x, w):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h * w + x[t]  # float32 * float64: float64 from the first step on
    return h


def shape_grows(x):
    acc = x[:0]
    for t in range(x.shape[0]):
        acc = np.concatenate([acc, x[t:t + 1]])
    return acc


def shape_follows_index(x):
    total = 0.0
    for t in range(x.shape[0]):
        total = total + x[:t].sum()
    return total


# --- the index in Python control flow and non-affine arithmetic -----------------------------
def zero_at_step_four(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t]
        if t == 4:
            h = h * 0.0
    return h


def keep_last_step(x):
    last = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = np.tanh(x[t])
        if t == x.shape[0] - 1:
            last = h
    return last


def halved_index(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t // 2]
    return h


def modular_index(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t % 3]
    return h


def clamped_index(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[min(t, 2)]
    return h


def parity_weight(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t] * (t % 2)
    return h


def list_indexed_by_step(x, order):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[order[t]]
    return h


def index_as_float(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        h = h + x[t] * np.sqrt(t + 1.0)
    return h


# --- in-place updates and aliasing across iterations ---------------------------------------
def scan_in_place_argument(x):
    for t in range(1, x.shape[0]):
        x[t] = x[t] + x[t - 1]  # a prefix sum in the caller's array
    return x.sum(axis=0)


def in_place_carried_argument(x, h0):
    h = h0
    for t in range(x.shape[0]):
        h += x[t]  # h is h0: eager mutates the argument
    return h


def ping_pong(x):
    a = np.zeros_like(x[0])
    b = np.ones_like(x[0])
    for t in range(x.shape[0]):
        a, b = b, a + x[t]
    return a, b


def append_aliased_state(x):
    h = x[0] * 0.0
    states = []
    for t in range(x.shape[0]):
        h += x[t]
        states.append(h)  # the same array every step: NumPy stacks T copies of the last h
    return np.stack(states)


def append_new_states(x):
    h = x[0] * 0.0
    states = []
    for t in range(x.shape[0]):
        h = h + x[t]
        states.append(h)
    return np.stack(states)


def dict_state(x):
    state = {"h": np.zeros_like(x[0]), "n": np.zeros(())}
    for t in range(x.shape[0]):
        state["h"] = np.tanh(state["h"] + x[t])
        state["n"] = state["n"] + 1
    return state["h"], state["n"]


def dict_aliased_state(x):
    hs = {}
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h += x[t]
        hs[t] = h  # the same array under every key, as in the list case
    return hs[0]


def int_accumulator_plus_float(x):
    acc = np.zeros(x.shape[1], dtype=np.int64)
    for t in range(x.shape[0]):
        acc += x[t]  # NumPy refuses: float64 into int64 is not a same_kind cast
    return acc


def raise_on_nan(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        if np.isnan(x[t]).any():
            raise ValueError("NaN at a step")
        h = h + x[t]
    return h


def branch_per_step(x):
    h = np.zeros_like(x[0])
    for t in range(x.shape[0]):
        if x[t].sum() > 0:
            h = h + x[t]
        else:
            h = h * 0.5
    return h


def window_reads(x):
    out = np.zeros((x.shape[0] - 2, x.shape[1]))
    for t in range(x.shape[0] - 2):
        out[t] = x[t:t + 3].max(axis=0)
    return out


# --- the table ------------------------------------------------------------------------------
def rows(length, salt=0, columns=3, dtype=np.float64):
    rng = np.random.default_rng(100 * salt + length)
    return rng.standard_normal((length, columns)).astype(dtype)


def single(length):
    return (rows(length),)


CASES = {
    # name: (function, argument maker, trip counts)
    "read_past_end": (read_past_end, single, LENGTHS),
    "read_next_index": (read_next_index, single, LENGTHS),
    "wraps_at_zero": (wraps_at_zero, single, LENGTHS),
    "wraps_buffer_at_zero": (wraps_buffer_at_zero, single, LENGTHS),
    "reversed_write": (reversed_write, single, LENGTHS),
    "overlapping_writes": (overlapping_writes, single, LENGTHS),
    "read_after_write_in_step": (read_after_write_in_step, single, LENGTHS),
    "carried_aliases_input": (carried_aliases_input, lambda n: (rows(n), rows(1, 1)[0]),
                              LENGTHS),
    "carried_starts_as_input_view": (carried_starts_as_input_view, single, LENGTHS),
    "writes_into_argument": (writes_into_argument, lambda n: (rows(n), np.zeros((n, 3))),
                             LENGTHS),
    "writes_into_copy_of_argument": (writes_into_copy_of_argument,
                                     lambda n: (rows(n), np.ones((n, 3))), LENGTHS),
    "augmented_into_argument": (augmented_into_argument, lambda n: (rows(n), np.ones(3)),
                                LENGTHS),
    "write_then_read_whole_buffer": (write_then_read_whole_buffer, single, LENGTHS),
    "zero_trips_used_after": (zero_trips_used_after, lambda n: (rows(n), rows(1, 1)[0]),
                              (5, 0, 8, 0)),
    "index_used_after": (index_used_after, single, LENGTHS),
    "traced_bound": (traced_bound, lambda n: (np.full((2, 2), n / 4 + 0.01),), LENGTHS),
    "raises_at_step_four": (raises_at_step_four, single, LENGTHS + (3,)),
    "shadowed_range": (shadowed_range, single, LENGTHS),
    "int_then_float": (int_then_float, single, LENGTHS),
    "float_then_f32": (float_then_f32, lambda n: (rows(n, dtype=np.float32),), LENGTHS),
    "int_array_accumulator": (int_array_accumulator, single, LENGTHS),
    "f32_times_f64_weight": (f32_times_f64_weight, lambda n: (
        rows(n, dtype=np.float32), rows(1, 1)[0]), LENGTHS),
    "shape_grows": (shape_grows, single, LENGTHS),
    "shape_follows_index": (shape_follows_index, single, LENGTHS),
    "zero_at_step_four": (zero_at_step_four, single, LENGTHS),
    "keep_last_step": (keep_last_step, single, LENGTHS),
    "halved_index": (halved_index, single, LENGTHS),
    "modular_index": (modular_index, single, LENGTHS),
    "clamped_index": (clamped_index, single, LENGTHS),
    "parity_weight": (parity_weight, single, LENGTHS),
    "list_indexed_by_step": (list_indexed_by_step, lambda n: (
        rows(n), [i % 3 for i in range(n)]), LENGTHS),
    "index_as_float": (index_as_float, single, LENGTHS),
    "scan_in_place_argument": (scan_in_place_argument, single, LENGTHS),
    "in_place_carried_argument": (in_place_carried_argument,
                                  lambda n: (rows(n), rows(1, 1)[0]), LENGTHS),
    "ping_pong": (ping_pong, single, LENGTHS),
    "append_aliased_state": (append_aliased_state, single, LENGTHS),
    "append_new_states": (append_new_states, single, LENGTHS),
    "dict_state": (dict_state, single, LENGTHS),
    "window_reads": (window_reads, single, LENGTHS),
    "dict_aliased_state": (dict_aliased_state, single, LENGTHS),
    "int_accumulator_plus_float": (int_accumulator_plus_float, single, LENGTHS),
    "raise_on_nan": (raise_on_nan, lambda n: (_with_nan(rows(n), n),), LENGTHS + (9, 12)),
    "branch_per_step": (branch_per_step, single, LENGTHS),
}


def _with_nan(x, length):
    if length in (6, 9):  # some calls raise, some do not, in both buckets
        x[length - 2, 1] = np.nan
    return x

# Loops that are not captured (they unroll or run eagerly) by design; the rest must run
# some call compiled.
EAGER_OK = {"read_next_index",  # raises on every call, eagerly too
            # NumPy refuses float64 into an int64 accumulator (UFuncTypeError); jit raises
            # the same error (tracejit.tracer.errors.as_numpy_would), so no call compiles
            "int_accumulator_plus_float"}

# The index is a SymInt over the loop's index symbol while the body is traced
# (tracer/loop_index.py): x[t // 2], x[t % 3] and t % 2 stay exact and captured; `if t == 4`,
# `if t == T - 1`, min(t, 2) and order[t] ask Python about the index, so the loop unrolls.
# read_past_end's slice shrinks at the last trip: refused, unrolled per length.
WRONG = {}
NEVER_COMPILED = {}


# append_aliased_state, dict_aliased_state (h += x[t]; hs[t] = h) are fixed: a container
# entry that the loop updates in place refuses capture (tracer/loop_trials.py _check_aliasing).
ALIASING = {}


def _expected_failures():
    return {**WRONG, **NEVER_COMPILED, **ALIASING}


def _call(function, arguments):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return function(*arguments), None
        except Exception as error:  # noqa: BLE001 - compared by type with jit's
            return None, error


def run_case(name):
    """Eager vs two jit calls per trip count; returns the jit function for its stats."""
    function, make, lengths = CASES[name]
    jitted = jit(function, cache="memory", dynamic=True)
    for length in lengths:
        arguments = make(length)
        eager_arguments = copy.deepcopy(arguments)
        expected, expected_error = _call(function, eager_arguments)
        for call in ("traced", "compiled"):
            compiled_arguments = copy.deepcopy(arguments)
            actual, error = _call(jitted, compiled_arguments)
            where = f"{name}: length {length}, {call} call"
            if expected_error is not None or error is not None:
                assert type(error) is type(expected_error), (
                    f"{where}: eager raised {expected_error!r}, jit {error!r}")
                continue
            problem = compare_results(actual, expected)
            assert problem is None, f"{where}: {problem}"
            problem = compare_results(compiled_arguments, eager_arguments)
            assert problem is None, f"{where}: the arguments afterwards differ: {problem}"
    return jitted


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=_expected_failures()[name]))
    if name in _expected_failures() else name for name in CASES])
def test_adversarial_loop_matches_eager(name):
    jitted = run_case(name)
    if name not in EAGER_OK:
        assert jitted.stats()["compiled_calls"] > 0, jitted.explain()


# Loops a capture can serve for every length (the rest change shapes with the index, raise,
# or are the user's own range): four lengths of one bucket must compile once.
ONE_COMPILE = ("wraps_at_zero", "wraps_buffer_at_zero", "overlapping_writes",
               "read_after_write_in_step", "carried_aliases_input", "writes_into_argument",
               "augmented_into_argument", "write_then_read_whole_buffer", "int_then_float",
               "float_then_f32", "int_array_accumulator", "f32_times_f64_weight",
               "index_used_after", "traced_bound", "index_as_float",
               "scan_in_place_argument", "in_place_carried_argument", "ping_pong",
               "append_new_states", "dict_state", "window_reads", "branch_per_step",
               "reversed_write", "halved_index", "modular_index", "parity_weight")
RECOMPILES = {
    "index_used_after": "the front end leaves a loop whose index is read after it as a plain "
                        "for (tracer/loops.py rewrite_for), silently: unrolled, each length "
                        "compiles",
    "traced_bound": "range(int(x.sum())): a traced integer bound is a Python int, the loop "
                    "unrolls and each trip count compiles",
    "branch_per_step": "an if on traced data in the body: the loop unrolls and each length "
                       "compiles",
}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=RECOMPILES[name]))
    if name in RECOMPILES else name for name in ONE_COMPILE])
def test_adversarial_loop_compiles_once_per_bucket(name):
    function, make, _ = CASES[name]
    jitted = jit(function, cache="memory", dynamic=True)
    for length in LENGTHS:
        _call(jitted, make(length))
    assert jitted.stats()["compiles"] == 1, jitted.explain()
