"""A list a captured loop fills with ``.append`` and the function returns (whole, or in a
returned tuple or dict) compiles once per bucket (tracer/loop_rows.py): the program
returns the loop's buffers and the call splits them into the entries eager's list holds.

Before, the returned list was made of its entries inside the trace, which pinned the trip
count: every length traced and compiled again (deeplearning.ai's ``rnn_forward`` returning
``caches``), and past ``max_variants`` ran eagerly.
"""

import numpy as np
import pytest

import tracejit as tj

# sizes 0 and 1 alone, then (2^(k-1), 2^k]: the edges of the buckets these lengths touch
LENGTHS = [0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16]


def buckets(lengths):
    return len({-length if length <= 1 else (length - 1).bit_length() for length in lengths})


def assert_same(got, want):
    """The same structure, kinds, dtypes and values (object for object, NumPy's kinds)."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for mine, theirs in zip(got, want):
            assert_same(mine, theirs)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (np.ndarray, np.generic)):
        assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
        single = want.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5 if single else 1e-12,
                                   atol=1e-6 if single else 1e-12)
    else:
        assert got == want


def run_lengths(function, make, lengths, **options):
    """``function`` jitted and eager over ``lengths``; the jitted function."""
    f = tj.jit(function, **{"cache": "memory", **options})  # compiles counted here
    rng = np.random.default_rng(7)
    for length in lengths:
        args = make(rng, length)
        assert_same(f(*args), function(*args))
    stats = f.stats()
    assert not stats["eager_calls"], f.explain()
    assert stats["compiled_calls"] + stats["traced_calls"] == len(lengths)
    return f


# --- one array per step -------------------------------------------------------------------
def rnn_states(x, w, h):
    hs = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] * w + h)
        hs.append(h)
    return hs


def make_states(rng, length, dtype=np.float32):
    # sizes no length has: a dim equal to the length would be a relation the trace keeps
    return (rng.standard_normal((length, 10, 6)).astype(dtype),
            (rng.standard_normal(6) * 0.5).astype(dtype), np.zeros((10, 6), dtype))


def test_returned_list_compiles_once_per_bucket():
    f = run_lengths(rnn_states, make_states, LENGTHS, dynamic=True)
    assert f.stats()["compiles"] == buckets(LENGTHS), f.explain()


def test_returned_list_with_exact_first_shapes_stops_pinning_after_the_second_length():
    lengths = [8, *range(9, 17), *range(17, 33, 3)]
    f = run_lengths(rnn_states, make_states, lengths)
    # the first call specializes 8 exactly; then one compile per bucket (9..16, 17..32)
    assert f.stats()["compiles"] == 3, f.explain()


def reversed_states(x, h):
    hs = []
    for t in range(x.shape[0] - 1, -1, -1):
        h = np.tanh(x[t] + h)
        hs.append(h * t)
    return hs, np.stack(hs), hs[-2]


def test_a_reversed_loops_list_compiles_once_per_bucket():
    # the rows counted from the first index's value: a shape guard (T <= that first T) per
    # length; now from the start as a dim
    f = run_lengths(reversed_states, lambda rng, n: (rng.standard_normal((n, 6)), np.zeros(6)),
                    [5, 6, 8, 7], dynamic=True)
    assert f.stats()["compiles"] == 1, f.explain()


def test_entries_are_separate_arrays_as_in_numpy():
    f = tj.jit(rnn_states, dynamic=True)
    args = make_states(np.random.default_rng(1), 6)
    f(*args)
    hs = f(*args)
    assert f.stats()["compiled_calls"] >= 1
    assert not any(np.shares_memory(a, b) for i, a in enumerate(hs) for b in hs[i + 1:])
    before = [h.copy() for h in hs]
    hs[2][...] = 7.0  # a write into one entry leaves every other one as it was
    for i, h in enumerate(hs):
        np.testing.assert_array_equal(h, 7.0 if i == 2 else before[i])


def steps_with_weights(x, w):
    scaled, steps = w * 3, []
    for t in range(x.shape[0]):
        steps.append((x[t] * 2, w, scaled, w + 0))
    return steps


def test_arrays_from_outside_the_loop_are_one_object_in_every_entry():
    f = run_lengths(steps_with_weights, lambda rng, n: (rng.standard_normal((n, 6)),
                                                        rng.standard_normal(10)),
                    [5, 7, 6], dynamic=True)
    assert f.stats()["compiles"] == 1, f.explain()
    x, w = np.ones((6, 6)), np.ones(10)
    steps = f(x, w)
    assert all(step[1] is w for step in steps)  # the caller's array, as eager appends it
    assert all(step[2] is steps[0][2] for step in steps)
    # w + 0 is a new array at every trip
    assert not any(np.shares_memory(a[3], b[3]) for a, b in zip(steps, steps[1:]))


# --- deeplearning.ai: tuples holding the parameters dict, in a returned tuple ---------------
def rnn_cell_forward(xt, a_prev, parameters):
    Wax, Waa, Wya = parameters["Wax"], parameters["Waa"], parameters["Wya"]
    ba, by = parameters["ba"], parameters["by"]
    a_next = np.tanh(np.dot(Wax, xt) + np.dot(Waa, a_prev) + ba)
    z = np.dot(Wya, a_next) + by
    e = np.exp(z - np.max(z, axis=0))
    yt_pred = e / e.sum(axis=0)
    cache = (a_next, a_prev, xt, parameters)
    return a_next, yt_pred, cache


def rnn_forward(x, a0, parameters):
    caches = []
    n_x, m, T_x = x.shape
    n_y, n_a = parameters["Wya"].shape
    a = np.zeros((n_a, m, T_x))
    y_pred = np.zeros((n_y, m, T_x))
    a_next = a0
    for t in range(T_x):
        a_next, yt_pred, cache = rnn_cell_forward(x[:, :, t], a_next, parameters)
        a[:, :, t] = a_next
        y_pred[:, :, t] = yt_pred
        caches.append(cache)
    caches = (caches, x)
    return a, y_pred, caches


def make_rnn(rng, length, n_x=6, m=10, n_a=12, n_y=2):
    parameters = {"Wax": rng.standard_normal((n_a, n_x)), "Waa": rng.standard_normal((n_a, n_a)),
                  "Wya": rng.standard_normal((n_y, n_a)), "ba": rng.standard_normal((n_a, 1)),
                  "by": rng.standard_normal((n_y, 1))}
    return rng.standard_normal((n_x, m, length)), rng.standard_normal((n_a, m)), parameters


def test_deeplearning_ai_rnn_forward_caches_over_lengths():
    lengths = [3, 4, 5, 6, 7, 8, 11, 13]
    f = run_lengths(rnn_forward, make_rnn, lengths, dynamic=True)
    assert f.stats()["compiles"] == buckets(lengths), f.explain()
    _, _, (caches, _) = f(*make_rnn(np.random.default_rng(2), 7))
    # what every step appended that is no array is one object, as in eager's list
    assert all(cache[3] is caches[0][3] for cache in caches)


# --- NumPy scalars, Python numbers, entries from before the loop, a returned dict ----------
def losses_and_states(x, h):
    states, losses, numbers = [h], [], []
    for t in range(x.shape[0]):
        h = 0.5 * h + x[t]
        states.append((h, h.sum(), "step"))
        losses.append(np.sum(h * h))
        numbers.append(float(h[0]))
    return {"states": states, "losses": losses, "numbers": numbers}


def test_entry_kinds_and_prefix_entries_are_eagers():
    f = run_lengths(losses_and_states, lambda rng, n: (rng.standard_normal((n, 4)),
                                                       rng.standard_normal(4)),
                    [3, 4, 5, 8, 6, 7], dynamic=True)
    assert f.stats()["compiles"] == 2, f.explain()


# --- dicts filled at the index --------------------------------------------------------------
def karpathy_forward(inputs, hprev, Wxh, Whh, bh):
    """min-char-rnn's forward pass, its per-step dicts returned for a backward pass."""
    xs, hs = {}, {}
    hs[-1] = np.copy(hprev)
    for t in range(len(inputs)):
        xs[t] = inputs[t] * 2
        hs[t] = np.tanh(Wxh @ xs[t] + Whh @ hs[t - 1] + bh)
    return xs, hs


def shifted_keys(x, h):
    steps = {3: h * 0, "first": h, 0: h}  # the loop sets 3 again: eager keeps its place
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h)
        steps[t + 2] = (h, h.sum())
    return steps


def test_returned_dicts_compile_once_per_bucket_with_eagers_keys():
    f = run_lengths(karpathy_forward, lambda rng, n: (
        rng.standard_normal((n, 4)), rng.standard_normal(10), rng.standard_normal((10, 4)),
        rng.standard_normal((10, 10)) * 0.3, rng.standard_normal(10)), [5, 6, 8, 7, 12, 9],
        dynamic=True)
    assert f.stats()["compiles"] == 2, f.explain()
    f = run_lengths(shifted_keys, lambda rng, n: (rng.standard_normal((n, 6)), np.ones(6)),
                    [5, 7, 6], dynamic=True)
    assert f.stats()["compiles"] == 1, f.explain()


# --- the disk cache -------------------------------------------------------------------------
def test_returned_list_loads_from_a_fresh_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    make = make_rnn
    lengths = [9, 12, 16]
    run_lengths(rnn_forward, make, lengths, dynamic=True, cache=True)
    f = run_lengths(rnn_forward, make, lengths, dynamic=True, cache=True)  # another: disk
    stats = f.stats()
    assert stats["disk_hits"] == 1 and stats["compiles"] == 0, stats


# --- gradients through the entries ----------------------------------------------------------
def test_backward_through_returned_entries():
    f = tj.jit(rnn_states, dynamic=True, cache="memory")
    rng = np.random.default_rng(3)
    for length in (5, 8):
        x0, w0, h0 = make_states(rng, length, np.float64)
        grads = []
        for function in (f, rnn_states):
            x, w = tj.tensor(x0, requires_grad=True), tj.tensor(w0, requires_grad=True)
            hs = function(x, w, tj.tensor(h0))
            assert len(hs) == length
            loss = sum(((h * (i + 1)) ** 2).sum() for i, h in enumerate(hs))
            loss.backward()
            grads.append((x.grad, w.grad))
        for got, want in zip(*grads):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert f.stats()["compiles"] == 1 and not f.stats()["eager_calls"], f.explain()


@pytest.mark.parametrize("length", [3, 4])
def test_the_smallest_captured_bucket_serves_both_its_lengths(length):
    # a trace at 3 or 4 captures the loop for the (2, 4] bucket; the other length reuses it
    lengths = [length, 7 - length]
    f = run_lengths(rnn_states, make_states, lengths, dynamic=True)
    assert f.stats()["compiles"] == 1, f.explain()


def states_then_print(x, h):
    hs = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h)
        hs.append((h, h.sum()))
    print("steps:", len(x))
    return hs


def test_a_first_call_the_trace_answers_makes_the_list_of_its_pending_buffers(capsys):
    # the print is an effect: the trace answers the first call, forcing the loop's buffers
    # it left pending (tracer/pending.py), and the list is made of them
    f = run_lengths(states_then_print, lambda rng, n: (rng.standard_normal((n, 6)),
                                                       np.zeros(6)), [5, 7], dynamic=True)
    assert f.stats()["traced_calls"] == 1 and f.stats()["compiles"] == 1, f.explain()
    assert capsys.readouterr().out == "steps: 5\n" * 2 + "steps: 7\n" * 2


@pytest.mark.parametrize("rows", [
    {"prefix": 0, "entry": "array", "parts": []},                    # no buffer for the entry
    {"prefix": 0, "entry": ["array", 0], "parts": ["*"]},             # a kept object missing
    {"prefix": 0, "entry": "code", "parts": ["*"]},                   # an unknown kind
    {"prefix": -1, "entry": "array", "parts": ["*"]},
    {"prefix": 0, "entry": "array", "parts": [{"list": ["*"]}]},      # a buffer that is a list
    {"prefix": 0, "entry": [0], "parts": ["*"]},                      # no buffer at all
    {"prefix": 1, "entry": "array", "parts": ["*"] * 3, "keys": [], "descending": False},
    {"prefix": 1, "entry": "array", "parts": ["*"] * 3, "keys": [[1]], "descending": False},
    {"prefix": 1, "entry": "array", "parts": ["*"] * 3, "keys": [1], "descending": 0},
])
def test_a_malformed_rows_node_on_disk_is_refused(rows):
    from tracejit.runtime.serialize import InvalidEntry, tree_from_json, tree_to_json

    good = {"prefix": 1, "entry": ["array", ["scalar", 0]], "parts": ["*", "*", "*", "*"]}
    keyed = {**good, "parts": ["*"] * 5, "keys": [-1], "descending": False}
    for data in (good, keyed):
        assert tree_to_json(tree_from_json({"rows": data})) == {"rows": data}
    with pytest.raises(InvalidEntry):
        tree_from_json({"rows": rows})
