"""What real model code does inside a captured loop's body (issue 13): an ``if`` on traced
data (a guard per iteration), ``print``, dicts keyed by the loop index (``hs[t]``,
``hs[t - 1]``, ``hs[-1]`` set before the loop), lists appended once per iteration and
stacked or indexed afterwards, token ids read at the index, ``reversed(range(...))``.

Every model runs eagerly and through ``jit`` over the same trip counts; the compiled
results must equal NumPy's, and one bucket of lengths must compile once."""

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.ops.control import loop_p
from tracejit.tracer.tracing import trace

TRIPS = [0, 1, 2, 3, 5, 7, 13, 16, 17]


def loops_in(graph):
    return [eqn for eqn in graph.equations if eqn.prim is loop_p]


def jitted(function):
    # One bucket [2, 64] for every dynamic dim: lengths 2..64 share one compile.
    return tj.jit(function, dynamic=True, cache="memory", buckets=[64])


def assert_same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


def eager_or_error(function, *args):
    try:
        return function(*args), None
    except Exception as error:  # the compiled run must raise the same
        return None, type(error)


def check_trip_counts(function, make_args, trips=TRIPS, first=9):
    """Eager vs jit for each trip count (traced first at ``first``, so the rest hit the
    captured program), each called twice. Returns the jit function."""
    f = jitted(function)
    for T in [first, *trips]:
        for call in range(2):
            args = make_args(np.random.default_rng(1000 * T + call), T)
            want, error = eager_or_error(function, *args)
            if error is not None:
                with pytest.raises(error):
                    f(*args)
                continue
            assert_same(f(*args), want)
    return f


# --- 1. an if on traced data inside the body -------------------------------------------
def damped_rnn(x, w):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = np.tanh(h @ w + x[t])
        if np.abs(h).sum() > 2.5:  # a guard per iteration
            h = h * 0.5
    return h


def damped_args(rng, T, spike=None):
    x = rng.standard_normal((T, 3)) * 0.1
    if spike is not None:
        x[spike] = 5.0
    return x, rng.standard_normal((3, 3)) * 0.1


def test_guard_in_body_is_captured():
    traced = trace(damped_rnn, *damped_args(np.random.default_rng(0), 9), dynamic=True)
    (loop,) = {eqn.params_dict["body"] for eqn in loops_in(traced.graph)}
    assert loop.guards and loop.guards[0].location.line > 0
    assert "bool(" in str(traced.graph)


def test_guard_in_body_over_trip_counts():
    f = check_trip_counts(damped_rnn, damped_args)
    assert f.stats()["compiles"] <= 4  # T = 0, 1 and 2 are static; 3..64 share one


def test_guard_that_flips_in_the_middle_side_exits_the_whole_call():
    f = jitted(damped_rnn)
    x, w = damped_args(np.random.default_rng(1), 11)
    assert_same(f(x, w), damped_rnn(x, w))  # traced: the guard never fires
    assert_same(f(x, w), damped_rnn(x, w))
    compiled = f.stats()["compiled_calls"]
    for spike in (3, 6, 10):  # fires at one step in the middle: the whole call side-exits
        x, w = damped_args(np.random.default_rng(spike), 11, spike=spike)
        x_before = x.copy()
        assert_same(f(x, w), damped_rnn(x, w))
        np.testing.assert_array_equal(x, x_before)  # nothing partial escaped
    x, w = damped_args(np.random.default_rng(2), 13)
    assert_same(f(x, w), damped_rnn(x, w))  # and the compiled program still serves
    assert f.stats()["compiled_calls"] > compiled
    assert f.stats()["compiles"] == 1


def test_guard_that_flips_during_the_first_call_unrolls_exactly():
    x, w = damped_args(np.random.default_rng(3), 9, spike=6)
    f = jitted(damped_rnn)
    assert_same(f(x, w), damped_rnn(x, w))
    text = f.explain()
    assert "test_loop_bodies.py:" in text and "unrolled" in text and "guard" in text


def test_guard_that_differs_between_iterations_one_and_two_unrolls():
    x, w = damped_args(np.random.default_rng(4), 9, spike=2)
    traced = trace(damped_rnn, x, w, dynamic=True)
    assert not loops_in(traced.graph)
    assert_same(traced.outputs, damped_rnn(x, w))


# --- 2. print inside the body -------------------------------------------------------------
def printing_rnn(x, w):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = np.tanh(h * w + x[t])
        print("step", t, h.sum())
    return h


def assert_same_prints(printed, expected):
    """The same lines with the same words; numbers equal up to compiled code's rounding."""
    got, want = printed.splitlines(), expected.splitlines()
    assert len(got) == len(want)
    for line, reference in zip(got, want):
        words, reference_words = line.split(), reference.split()
        assert words[:2] == reference_words[:2]  # "step", the index
        assert_same(float(words[2]), float(reference_words[2]))


@pytest.mark.parametrize("T", TRIPS)
def test_print_in_body_prints_every_iteration_in_order(T, capsys):
    f = jitted(printing_rnn)
    for length in (9, T, T):  # traced at 9, then T (compiled, or traced for T < 3)
        rng = np.random.default_rng(length)
        x, w = rng.standard_normal((max(length, 1), 3)), rng.standard_normal(3)
        x = x[:length]
        if length == 0:
            continue  # x[0] of an empty array raises in eager and compiled alike
        want = printing_rnn(x, w)
        expected = capsys.readouterr().out
        got = f(x, w)
        printed = capsys.readouterr().out
        assert_same(got, want)
        assert printed.count("step") == length
        assert_same_prints(printed, expected)


def test_print_in_body_is_captured():
    """The loop is captured; its one print keeps its values at every trip and prints
    their rows after the loop (tracer/loop_prints.py), so the body holds no effect."""
    x = np.random.default_rng(5).standard_normal((9, 3))
    traced = trace(printing_rnn, x, np.ones(3), dynamic=True)
    assert loops_in(traced.graph)
    assert any(type(item).__name__ == "Effect" and dict(item.params).get("rows")
               for item in traced.graph.body)


# --- 3. dicts keyed by the index: a char-RNN loss, forward and backward -----------------
def char_rnn_loss(inputs, targets, hprev, Wxh, Whh, Why, bh, by):
    """A character-level RNN's loss and gradients, the way the classic NumPy char-RNN
    writes it: per-step dicts, a one-hot input, a backward loop over reversed steps."""
    vocab = Wxh.shape[1]
    xs, hs, ys, ps = {}, {}, {}, {}
    hs[-1] = np.copy(hprev)
    loss = 0.0
    for t in range(len(inputs)):
        xs[t] = np.zeros((vocab, 1))
        xs[t][inputs[t]] = 1  # one-hot of the token id
        hs[t] = np.tanh(np.dot(Wxh, xs[t]) + np.dot(Whh, hs[t - 1]) + bh)
        ys[t] = np.dot(Why, hs[t]) + by
        ps[t] = np.exp(ys[t]) / np.sum(np.exp(ys[t]))
        loss += -np.log(ps[t][targets[t], 0])
    dWxh, dWhh, dWhy = np.zeros_like(Wxh), np.zeros_like(Whh), np.zeros_like(Why)
    dbh, dby = np.zeros_like(bh), np.zeros_like(by)
    dhnext = np.zeros_like(hprev)
    for t in reversed(range(len(inputs))):
        dy = np.copy(ps[t])
        dy[targets[t]] -= 1
        dWhy += np.dot(dy, hs[t].T)
        dby += dy
        dh = np.dot(Why.T, dy) + dhnext
        dhraw = (1 - hs[t] * hs[t]) * dh
        dbh += dhraw
        dWxh += np.dot(dhraw, xs[t].T)
        dWhh += np.dot(dhraw, hs[t - 1].T)
        dhnext = np.dot(Whh.T, dhraw)
    return loss, dWxh, dWhh, dWhy, dbh, dby, hs[len(inputs) - 1]


VOCAB, HIDDEN = 70, 72  # no length below shares their symbols


def char_rnn_args(rng, T):
    return (rng.integers(0, VOCAB, T), rng.integers(0, VOCAB, T),
            rng.standard_normal((HIDDEN, 1)) * 0.1,
            rng.standard_normal((HIDDEN, VOCAB)) * 0.1,
            rng.standard_normal((HIDDEN, HIDDEN)) * 0.1,
            rng.standard_normal((VOCAB, HIDDEN)) * 0.1,
            rng.standard_normal((HIDDEN, 1)) * 0.1, rng.standard_normal((VOCAB, 1)) * 0.1)


def char_rnn_jit():
    return tj.jit(char_rnn_loss, dynamic=True, cache="memory", buckets=[64, 128])


def test_char_rnn_loss_captures_both_loops():
    traced = trace(char_rnn_loss, *char_rnn_args(np.random.default_rng(0), 9), dynamic=True)
    bodies = {eqn.params_dict["body"] for eqn in loops_in(traced.graph)}
    assert len(bodies) == 2  # the forward loop and the reversed backward loop
    assert not traced.graph.shape_guards  # the length is not pinned
    steps = {eqn.params_dict["step"] for eqn in loops_in(traced.graph)}
    assert steps == {1, -1}


def test_char_rnn_loss_over_trip_counts():
    f = tj.jit(char_rnn_loss, dynamic=True, cache="memory", buckets=[64, 128])
    for T in [9, *TRIPS]:
        for call in range(2):
            args = char_rnn_args(np.random.default_rng(100 * T + call), T)
            assert_same(f(*args), char_rnn_loss(*args))
    # T = 0, 1, 2 are traced apart (static dims, or too few trips to capture); 3..64 is one
    assert f.stats()["compiles"] <= 4


def test_char_rnn_loss_one_compile_per_bucket():
    f = char_rnn_jit()
    for T in (5, 6, 7, 8, 11, 23, 64):
        args = char_rnn_args(np.random.default_rng(T), T)
        assert_same(f(*args), char_rnn_loss(*args))
    assert f.stats()["compiles"] == 1
    assert f.stats()["variants"] == 1


def test_dict_read_after_the_loop_at_fixed_keys():
    def history(x):
        hs = {-1: x[0] * 0.0}
        for t in range(x.shape[0]):
            hs[t] = np.tanh(hs[t - 1] + x[t])
        return hs[-1], hs[0], hs[2], hs[x.shape[0] - 1]

    check_trip_counts(history, lambda rng, T: (rng.standard_normal((T, 2)),),
                      trips=[3, 5, 7, 13, 16, 17])


def test_dict_used_as_a_whole_after_the_loop_specializes_and_stays_exact():
    def history(x):
        hs = {-1: x[0] * 0.0}
        for t in range(x.shape[0]):
            hs[t] = np.tanh(hs[t - 1] + x[t])
        return np.stack([hs[k] for k in sorted(hs)]), len(hs)

    f = check_trip_counts(history, lambda rng, T: (rng.standard_normal((T, 2)),),
                          trips=[3, 5, 7])
    assert f.stats()["compiles"] >= 2  # len(hs) pins the length


def test_dict_read_two_steps_back():
    def second_order(x):
        hs = {-2: x[0] * 0.0, -1: x[0] * 0.0}
        for t in range(x.shape[0]):
            hs[t] = np.tanh(0.5 * hs[t - 1] - 0.25 * hs[t - 2] + x[t])
        return hs[x.shape[0] - 1], hs[x.shape[0] - 2]

    traced = trace(second_order, np.ones((9, 2)), dynamic=True)
    assert loops_in(traced.graph)
    check_trip_counts(second_order, lambda rng, T: (rng.standard_normal((T, 2)),),
                      trips=[2, 3, 5, 7, 13, 16, 17])


# --- 4. lists appended once per iteration ------------------------------------------------
def list_rnn(x, Wx, Wh, b, h0):
    N, T, D = x.shape
    h = h0
    outs = []
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        outs.append(h)
    return np.stack(outs, axis=1), outs[-1], np.array(outs)[T // 2]


def list_rnn_args(rng, T):
    return (rng.standard_normal((2, T, 3)), rng.standard_normal((3, 4)) * 0.5,
            rng.standard_normal((4, 4)) * 0.5, rng.standard_normal(4),
            rng.standard_normal((2, 4)))


def test_list_appended_and_stacked_over_trip_counts():
    f = check_trip_counts(list_rnn, list_rnn_args)
    assert f.stats()["compiles"] <= 4


def test_list_stack_is_the_loop_buffer():
    traced = trace(list_rnn, *list_rnn_args(np.random.default_rng(0), 9), dynamic=True)
    assert loops_in(traced.graph)
    assert not traced.graph.shape_guards
    assert len(traced.graph.equations) < 60  # not one stack operand per step


def running_list(x, w):
    outs = [x[0] * 0.0]  # an entry before the loop
    for t in range(x.shape[0]):
        outs.append(np.tanh(outs[-1] * w + x[t]))  # reads the previous iteration's entry
    return np.array(outs), outs[len(x) // 2], outs[0]


def test_list_read_at_minus_one_in_the_body():
    traced = trace(running_list, np.ones((9, 3)), np.ones(3), dynamic=True)
    assert loops_in(traced.graph)
    check_trip_counts(running_list, lambda rng, T: (rng.standard_normal((T, 3)),
                                                    rng.standard_normal(3)),
                      trips=[1, 2, 3, 5, 7, 13, 16, 17])


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def lstm_forward_backward(x, Wx, Wh, b, h0, dout):
    """An LSTM forward that appends a tuple cache per step, and its backward pass over the
    caches in reverse (the cs231n layout)."""
    N, T, D = x.shape
    H = h0.shape[1]
    h, c = h0, np.zeros_like(h0)
    caches, hs = [], []
    for t in range(T):
        a = x[:, t, :] @ Wx + h @ Wh + b
        i, f, o = sigmoid(a[:, :H]), sigmoid(a[:, H:2 * H]), sigmoid(a[:, 2 * H:3 * H])
        g = np.tanh(a[:, 3 * H:])
        c_next = f * c + i * g
        h_next = o * np.tanh(c_next)
        caches.append((x[:, t, :], h, c, i, f, o, g, c_next))
        h, c = h_next, c_next
        hs.append(h)
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    dh_next, dc_next = np.zeros_like(h0), np.zeros_like(h0)
    for t in reversed(range(T)):
        xt, h_prev, c_prev, i, f, o, g, c_t = caches[t]
        dh = dout[:, t, :] + dh_next
        dc = dc_next + dh * o * (1 - np.tanh(c_t) ** 2)
        da = np.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                             dh * np.tanh(c_t) * o * (1 - o), dc * i * (1 - g * g)], axis=1)
        dWx += xt.T @ da
        dWh += h_prev.T @ da
        db += da.sum(axis=0)
        dh_next = da @ Wh.T
        dc_next = dc * f
    return np.stack(hs, axis=1), dWx, dWh, db, dh_next


def lstm_args(rng, T):
    N, D, H = 2, 3, 4
    return (rng.standard_normal((N, T, D)), rng.standard_normal((D, 4 * H)) * 0.3,
            rng.standard_normal((H, 4 * H)) * 0.3, rng.standard_normal(4 * H) * 0.1,
            rng.standard_normal((N, H)) * 0.5, rng.standard_normal((N, T, H)))


def test_lstm_caches_list_of_tuples_and_reversed_backward():
    traced = trace(lstm_forward_backward, *lstm_args(np.random.default_rng(0), 9),
                   dynamic=True)
    assert len({eqn.params_dict["body"] for eqn in loops_in(traced.graph)}) == 2
    check_trip_counts(lstm_forward_backward, lstm_args, trips=[1, 2, 3, 5, 7, 13, 16, 17])


# --- 5. token ids ------------------------------------------------------------------------
def embed_sum(tokens, E):
    total = np.zeros(E.shape[1])
    for t in range(len(tokens)):
        total = total + E[tokens[t]] * (t + 1)
    return total


def test_token_ids_in_an_array_are_read_at_the_index():
    E = np.random.default_rng(0).standard_normal((70, 5))
    traced = trace(embed_sum, np.arange(9) % 7, E, dynamic=True)
    assert loops_in(traced.graph)
    f = check_trip_counts(embed_sum, lambda rng, T: (rng.integers(0, 70, T), E))
    assert f.stats()["compiles"] <= 4


def test_token_ids_in_a_python_list_unroll_with_a_reason():
    E = np.random.default_rng(0).standard_normal((70, 5))
    tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    f = jitted(embed_sum)
    assert_same(f(tokens, E), embed_sum(tokens, E))
    text = f.explain()
    assert "test_loop_bodies.py:" in text and "unrolled" in text and "list" in text


# --- refusals name the loop --------------------------------------------------------------
def written_twice(x):
    hs = {}
    for t in range(x.shape[0]):
        hs[t] = x[t]
        hs[t + 1] = x[t] * 2.0  # two keys in one iteration
    return hs[1]


def test_dict_written_at_two_keys_unrolls_with_its_line():
    f = jitted(written_twice)
    x = np.random.default_rng(0).standard_normal((9, 2))
    assert_same(f(x), written_twice(x))
    line = written_twice.__code__.co_firstlineno + 2
    assert f"test_loop_bodies.py:{line} unrolled" in f.explain()
    assert "keys" in f.explain()


# --- the index used in Python: a path or a Python value per step unrolls -----------------
def every_third(x):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = h + x[t % 3]  # not affine in t: exact as i0 % 3 (tracer/loop_index.py)
    return h


def reset_at_four(x):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t])
        if t == 4:  # one step differs
            h = h * 0.0
    return h


def after_the_first(x):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        if t > 0:  # the same answer at every step after the peeled first: captured
            h = h * 0.5
        h = h + x[t]
    return h


def reordered(x, order):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = h + x[order[t]]  # a Python list read at the index
    return h


@pytest.mark.parametrize("function, what", [
    (reset_at_four, "t =="), (reordered, "order[t]")])
def test_index_used_in_python_unrolls_exactly(function, what):
    order = [2, 0, 1, 0, 3, 5, 4, 1, 0, 2, 6, 7, 8]
    extra = (order,) if function is reordered else ()
    f = jitted(function)
    for T in (9, 5, 7, 13, 9):
        x = np.random.default_rng(T).standard_normal((T, 3))
        assert_same(f(x, *extra), function(x, *extra))
    line = function.__code__.co_firstlineno + 2
    text = f.explain()
    assert f"test_loop_bodies.py:{line} unrolled" in text and what in text


def test_remainder_of_the_index_stays_captured_and_exact():
    traced = trace(every_third, np.ones((9, 3)), dynamic=True)
    assert loops_in(traced.graph)
    check_trip_counts(every_third, lambda rng, T: (rng.standard_normal((T, 3)),),
                      trips=[3, 5, 7, 13, 16, 17])


def test_index_compared_the_same_way_at_every_step_stays_captured():
    traced = trace(after_the_first, np.ones((9, 3)), dynamic=True)
    assert loops_in(traced.graph)
    check_trip_counts(after_the_first, lambda rng, T: (rng.standard_normal((T, 3)),),
                      trips=[1, 2, 3, 5, 7, 13, 16, 17])


def breaks_early(x):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t])
        if t == 3:
            break
    return h


def test_loop_left_as_written_is_named_in_explain():
    f = jitted(breaks_early)
    x = np.random.default_rng(0).standard_normal((9, 3))
    assert_same(f(x), breaks_early(x))
    line = breaks_early.__code__.co_firstlineno + 2
    assert f"test_loop_bodies.py:{line} unrolled: the body has break" in f.explain()


def aliased_states(x):
    h = x[0] * 0.0
    hs, outs = {}, []
    for t in range(x.shape[0]):
        h += x[t]  # in place: NumPy's dict and list hold the same array at every step
        hs[t] = h
        outs.append(h)
    return hs[0], np.stack(outs)


def test_entries_updated_in_place_alias_as_in_numpy():
    check_trip_counts(aliased_states, lambda rng, T: (rng.standard_normal((T, 3)),),
                      trips=[1, 2, 3, 5, 7])
