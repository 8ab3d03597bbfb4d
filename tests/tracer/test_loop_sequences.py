"""Loops over an array's rows (``for xt in x``, ``enumerate``, ``zip``), eager vs ``jit``.

They run by index when the iterable is a traced array (one loop node per bucket of
lengths) and as written for anything else (lists of layers, dicts, NumPy arrays made in
the function); tracejit.tracer.loop_sequences.
"""

import copy

import numpy as np
import pytest

import tracejit as tj

BUCKET = dict(dynamic=True, buckets=[64], cache="memory")


def compare(function, argument_sets, **options):
    f = tj.jit(function, **{**BUCKET, **options})
    for arguments in argument_sets:
        want = function(*copy.deepcopy(arguments))
        got = f(*copy.deepcopy(arguments))
        for g, w in zip(*(item if isinstance(item, tuple) else (item,) for item in (got, want))):
            assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    return f


def rng(seed=0):
    return np.random.default_rng(seed)


def sequences(*trailing, lengths=(9, 5, 13, 7)):
    r = rng()
    return [tuple(r.standard_normal((T, *shape)) for shape in trailing) for T in lengths]


def rows_rnn(x, W):
    h = np.zeros(W.shape[0])
    for xt in x:
        h = np.tanh(W @ h + xt)
    return h


def enumerate_with_dict_state(x, W):
    hs = {-1: np.zeros(W.shape[0])}
    loss = 0.0
    for t, xt in enumerate(x):
        hs[t] = np.tanh(W @ hs[t - 1] + xt)
        loss += np.sum(hs[t] ** 2) * (t + 1)
    return loss, hs[len(x) - 1]


def zip_two(x, y):
    total = np.zeros(x.shape[1])
    for a, b in zip(x, y):
        total = total + a * b
    return total


def outputs_appended(x):
    outs = []
    for xt in x:
        outs.append(np.sin(xt) * 2.0)
    return np.stack(outs)


def nested_rows(x):
    acc = 0.0
    for row in x:
        for value in row:
            acc = acc + value * value
    return acc


@pytest.mark.parametrize("model, shapes", [
    (rows_rnn, ((4,),)),
    (enumerate_with_dict_state, ((4,),)),
    (outputs_appended, ((3,),)),
])
def test_row_loops_compile_once_per_bucket(model, shapes):
    arguments = [args + ((rng(1).standard_normal((4, 4)) * 0.5),) if model is not
                 outputs_appended else args for args in sequences(*shapes)]
    f = compare(model, arguments)
    assert f.stats()["compiles"] == 1, f.explain()


def test_zip_of_two_traced_arrays_compiles_once_and_stops_at_the_shorter():
    r = rng(2)
    f = compare(zip_two, [(r.standard_normal((T, 3)), r.standard_normal((T, 3)))
                          for T in (9, 5, 13)])
    assert f.stats()["compiles"] == 1
    compare(zip_two, [(r.standard_normal((6, 3)), r.standard_normal((4, 3)))])


def test_nested_row_loops_match_numpy():
    compare(nested_rows, sequences((5,), lengths=(6, 3)))


# --- what iterates as written ------------------------------------------------------------
class Stack:
    def __init__(self, widths):
        r = rng(3)
        self.layers = [r.standard_normal((a, b)) for a, b in zip(widths, widths[1:])]

    def forward(self, x):
        for W in self.layers:  # a Python list: unrolled, one step per layer
            x = np.maximum(x @ W, 0.0)
        return x


def test_a_list_of_layers_iterates_as_written():
    stack = Stack([4, 6, 3])
    f = tj.jit(stack.forward, cache="memory")
    x = rng(4).standard_normal((5, 4))
    np.testing.assert_allclose(f(x), stack.forward(x))
    np.testing.assert_allclose(f(x), stack.forward(x))


def over_dict_and_numpy(x, weights):
    out = x
    for name, w in weights.items():  # noqa: B007 - not a sequence loop: as written
        out = out * w
    for scale in np.array([1.0, 2.0, 3.0]):  # a NumPy array made here: as written
        out = out + scale
    return out


def test_dicts_and_numpy_arrays_iterate_as_written():
    x = rng(5).standard_normal((3, 2))
    compare(over_dict_and_numpy, [(x, {"a": 2.0, "b": 0.5})])


def last_row_read_after(x):
    total = np.zeros(x.shape[1])
    for xt in x:
        total = total + xt
    return total, xt  # Python keeps the last row bound: the loop stays as written


def test_a_target_read_after_the_loop_keeps_pythons_binding():
    compare(last_row_read_after, sequences((3,), lengths=(4, 6)))


def mixed_zip(x, gains):
    out = np.zeros(x.shape[1])
    for xt, g in zip(x, gains):  # one traced array, one list: as written
        out = out + g * xt
    return out


def test_zip_with_a_python_list_iterates_as_written():
    x = rng(6).standard_normal((4, 3))
    compare(mixed_zip, [(x, [1.0, 2.0, 3.0]), (x, [0.5, 0.5, 0.5, 0.5, 9.0])])


def vector_elements(v):
    acc = 0.0
    for value in v:  # 0-d items of a 1-D array
        acc = acc + np.exp(value)
    return acc


def test_loops_over_a_vector_and_over_no_rows():
    compare(vector_elements, [(rng(7).standard_normal(T),) for T in (9, 5, 1, 0)])


def test_gradient_through_a_row_loop_matches_finite_differences():
    r = rng(8)
    x, W = r.standard_normal((7, 3)), r.standard_normal((3, 3)) * 0.5

    def loss(W, x):
        return np.sum(rows_rnn(x, W) ** 2)

    value, gradient = tj.jit(tj.value_and_grad(loss), cache="memory")(W, x)
    np.testing.assert_allclose(value, loss(W, x), rtol=1e-12)
    eager_value, eager_gradient = tj.value_and_grad(loss)(W, x)  # rows iterated as written
    np.testing.assert_allclose(eager_value, value, rtol=1e-12)
    np.testing.assert_allclose(eager_gradient, gradient, rtol=1e-10, atol=1e-12)
    step, numeric = 1e-6, np.zeros_like(W)
    for index in np.ndindex(W.shape):
        bumped = W.copy()
        bumped[index] += step
        lowered = W.copy()
        lowered[index] -= step
        numeric[index] = (loss(bumped, x) - loss(lowered, x)) / (2 * step)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-7)


def course_rnn_forward(x, a0, parameters):
    """deeplearning.ai's rnn_forward: each step appends ``cache = (a_next, a_prev, xt,
    parameters)``, a tuple holding the parameter dict itself, to a list the caller gets."""
    caches = []
    n_a, m = a0.shape
    a = np.zeros((n_a, m, x.shape[2]))
    a_next = a0
    for t in range(x.shape[2]):
        xt = x[:, :, t]
        a_prev = a_next
        a_next = np.tanh(parameters["Waa"] @ a_prev + parameters["Wax"] @ xt + parameters["ba"])
        a[:, :, t] = a_next
        caches.append((a_next, (a_prev, xt), parameters))
    return a, caches[-1][1][0], caches[0][2] is parameters


def test_appended_tuples_keep_the_objects_they_hold_and_the_loop_stays_a_loop():
    r = rng(5)
    parameters = {"Waa": r.standard_normal((4, 4)) * 0.5, "Wax": r.standard_normal((4, 3)),
                  "ba": r.standard_normal((4, 1))}
    calls = [(r.standard_normal((3, 2, T)), r.standard_normal((4, 2)), parameters)
             for T in (9, 13, 11, 16)]
    f = tj.jit(course_rnn_forward, **BUCKET)
    for arguments in calls:
        want, got = course_rnn_forward(*arguments), f(*arguments)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
        assert got[2:] == want[2:]
    assert f.stats()["eager_calls"] == {} and f.stats()["compiles"] == 1, f.explain()
