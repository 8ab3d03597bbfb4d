"""Loop capture (issue 13): a Python ``for t in range(T)`` over a dynamic dim becomes one
``loop`` equation; eager vs traced vs compiled over trip counts, and one compile per
bucket."""

import numpy as np
import pytest

import tracejit as tj
from tracejit.codegen import SideExit
from tracejit.codegen import compile as compile_graph
from tracejit.codegen.loops import LoopProgram, NativeLoopProgram
from tracejit.tracer.ir import verify
from tracejit.tracer.ops.control import loop_p
from tracejit.tracer.tracing import trace

N, D, H = 2, 3, 4  # distinct from every T below, so no two dims share a symbol


def rnn(x, Wx, Wh, b, h0):
    N, T, D = x.shape
    h = h0
    h_all = np.zeros((N, T, Wh.shape[0]))
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return h_all, h


def accumulate(x, w):
    loss = 0.0
    for t in range(x.shape[0]):
        loss += np.sum(np.tanh(x[t] * w))
    return loss


def running_max(x):
    m = x[0] * 0.0
    for t in range(x.shape[0]):
        m = np.maximum(m, x[t])
    return m


def weights(rng):
    return (rng.standard_normal((D, H)) * 0.5, rng.standard_normal((H, H)) * 0.5,
            rng.standard_normal(H), rng.standard_normal((N, H)))


def loops_in(graph):
    return [eqn for eqn in graph.equations if eqn.prim is loop_p]


@pytest.mark.parametrize("T", [0, 1, 2, 3, 5, 7, 11, 13, 16, 17])
def test_rnn_compiled_matches_eager(T):
    rng = np.random.default_rng(T)
    params = weights(rng)
    f = tj.jit(rnn, dynamic=True, cache="memory", loops="capture")
    for _ in range(2):  # the traced call and the compiled one
        x = rng.standard_normal((N, T, D))
        for got, want in zip(f(x, *params), rnn(x, *params)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_rnn_trace_has_one_loop_equation_per_result():
    rng = np.random.default_rng(0)
    traced = trace(rnn, rng.standard_normal((N, 7, D)), *weights(rng), dynamic=True)
    found = loops_in(traced.graph)
    assert len(found) == 2 and {eqn.params_dict["output"] for eqn in found} == {0, 1}
    assert not traced.graph.shape_guards  # the length is not pinned
    verify(traced.graph)
    text = str(traced.graph)
    assert "loop(" in text and "    " in text


def test_rnn_one_compile_per_bucket():
    rng = np.random.default_rng(1)
    params = weights(rng)
    f = tj.jit(rnn, dynamic=True, cache="memory", loops="capture")
    for T in (5, 6, 7, 8):
        x = rng.standard_normal((N, T, D))
        for got, want in zip(f(x, *params), rnn(x, *params)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert f.stats()["compiles"] == 1


@pytest.mark.parametrize("function", [accumulate, running_max])
@pytest.mark.parametrize("T", [0, 1, 2, 3, 5, 6, 7, 8])
def test_carried_values(function, T):
    rng = np.random.default_rng(T)
    f = tj.jit(function, dynamic=True, cache="memory", loops="capture")
    args = (rng.standard_normal((max(T, 1) if function is running_max else T, 3)),)
    if function is accumulate:
        args += (rng.standard_normal(3),)
    np.testing.assert_allclose(f(*args), function(*args), rtol=1e-12, atol=1e-12)


def test_accumulation_is_captured():
    rng = np.random.default_rng(2)
    traced = trace(accumulate, rng.standard_normal((9, 3)), rng.standard_normal(3),
                   dynamic=True)
    assert len(loops_in(traced.graph)) == 1


def growing_history(x):
    acc = x[0] * 0.0
    for t in range(x.shape[0]):
        acc = np.concatenate([acc, np.tanh(acc[-2:] + x[t])])  # changes shape: unrolled
    return acc


def test_uncaptured_loop_unrolls_and_stays_exact():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 2))
    traced = trace(growing_history, x, dynamic=True)
    assert not loops_in(traced.graph)
    np.testing.assert_allclose(traced.outputs, growing_history(x))


def test_gradients_flow_through_the_captured_loop():
    """Tensor.backward through a compiled loop: the forward program keeps the loop, the
    backward program runs its reverse (tracer/loop_autodiff.py), one compile per bucket.
    tests/tracer/test_loop_gradients.py has the full set."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal(3)
    f = tj.jit(accumulate, dynamic=True, cache="memory", loops="capture")
    for T in (6, 7, 8, 5):  # one bucket (5..8)
        x = tj.tensor(rng.standard_normal((T, 3)), requires_grad=True)
        loss = f(x, w)
        loss.backward()
        expected = (1 - np.tanh(x.numpy() * w) ** 2) * w
        np.testing.assert_allclose(x.grad, expected, rtol=1e-10)
    assert f.stats()["compiles"] == 1
    (variant,) = f._variants
    assert loops_in(variant.root.program.graph) and loops_in(variant.root.backward.graph)


# --- the native path (codegen/loops.py): segments and the loop body compiled, the loop
# driven over the body's native entry -----------------------------------------------------


def rnn_from_one(x, Wx, Wh, b, h0):
    """range(1, T): the compiled loop runs T - 2 trips (iteration 1 is peeled), so T = 2,
    3, 4 give native trip counts 0, 1, 2."""
    N, T, D = x.shape
    h = h0
    h_all = np.zeros((N, T, Wh.shape[0]))
    for t in range(1, T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return h_all, h


def program_of(f):
    (variant,) = f._variants
    return variant.root.program


def test_rnn_runs_natively_for_every_trip_count_in_a_bucket():
    rng = np.random.default_rng(5)
    batch, features, hidden = 70, 71, 72  # past the edge 64: no dim shares a length's symbol
    params = (rng.standard_normal((features, hidden)) * 0.1,
              rng.standard_normal((hidden, hidden)) * 0.1, rng.standard_normal(hidden),
              rng.standard_normal((batch, hidden)))
    f = tj.jit(rnn_from_one, dynamic=True, cache="memory", loops="capture", buckets=[64])
    # Traced at 9; T = 2, 3, 4 run 0, 1, 2 native trips; primes; the bucket's edge 64.
    lengths = [9, 2, 3, 4, 5, 7, 11, 13, 31, 37, 63, 64]
    for T in lengths:
        for _ in range(2):
            x = rng.standard_normal((batch, T, features))
            for got, want in zip(f(x, *params), rnn_from_one(x, *params)):
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert f.stats()["compiles"] == 1
    stats = f.stats()  # the first call the trace's or (trips left pending) the program's
    assert stats["compiled_calls"] + stats["traced_calls"] == 2 * len(lengths)
    assert not stats["eager_calls"]
    assert isinstance(program_of(f), NativeLoopProgram)
    x = rng.standard_normal((batch, 65, features))  # the next bucket: one more compile
    for got, want in zip(f(x, *params), rnn_from_one(x, *params)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert f.stats()["compiles"] == 2


@pytest.mark.parametrize("function", [rnn, rnn_from_one])
@pytest.mark.parametrize("T", [5, 8, 9, 16, 17])
def test_native_matches_interpreter_and_eager(function, T):
    rng = np.random.default_rng(T)
    params = weights(rng)
    graph = trace(function, rng.standard_normal((N, T, D)), *params, dynamic=True).graph
    native, interpreted = compile_graph(graph), LoopProgram(graph, graph.name)
    assert isinstance(native, NativeLoopProgram) and native.kernel_count > 0
    bucket = next(symbol for symbol in graph.symbols if symbol.low <= T <= symbol.high
                  and symbol.high not in (N, D, H) or symbol.low == T)
    for length in sorted({bucket.low, T, bucket.high}):
        x = rng.standard_normal((N, length, D))
        want = function(x, *params)
        for got, reference, value in zip(native(x, *params), interpreted(x, *params), want):
            np.testing.assert_allclose(got, value, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(reference, value, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("function", [accumulate, running_max])
def test_carried_values_run_natively(function):
    rng = np.random.default_rng(6)
    f = tj.jit(function, dynamic=True, cache="memory", loops="capture", buckets=[64])
    for T in (5, 2, 3, 4, 7, 13, 64):  # 1, 2, 3 native trips at T = 2, 3, 4
        args = (rng.standard_normal((T, 3)),)
        if function is accumulate:
            args += (rng.standard_normal(3),)
        np.testing.assert_allclose(f(*args), function(*args), rtol=1e-12, atol=1e-12)
    assert f.stats()["compiles"] == 1
    assert isinstance(program_of(f), NativeLoopProgram)


def sign_after_loop(x):
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t])
    if h.sum() > 0:  # a guard on the loop's result, in the segment after the loop
        return h * 2.0
    return h - 1.0


def test_guard_after_a_loop_side_exits_with_its_own_number():
    f = tj.jit(sign_after_loop, dynamic=True, cache="memory", loops="capture", hot_exit=1)
    positive, negative = np.ones((6, 3)), -np.ones((7, 3))
    for x in (positive, negative, positive, negative, negative):
        np.testing.assert_allclose(f(x), sign_after_loop(x), rtol=1e-12)
    program = program_of(f)
    assert isinstance(program, NativeLoopProgram)
    # The guard's margin comes first. The loop carries h's rounding bound
    # (tracer/loop_bounds.py): a sum far from 0 passes the margin and the guard decides
    # (the other branch leaves through it, number 1); a sum within its bound of 0 leaves
    # through the margin (number 0), numbered as the whole graph numbers it, and eager
    # decides. (Zeros are no such sum: tanh is NumPy's own float64 loop, exact, so a sum
    # of exact zeros carries no bound and the guard decides; +-1e-3 rows sum to 0 with
    # the bound of the sum's order.)
    assert [guard.convert for guard in program.graph.guards] == ["margin", "bool"]
    program(positive)
    cancelling = np.array([[1e-3, -1e-3, 0.0]] * 5)
    for x, number in ((negative, 1), (cancelling, 0)):
        with pytest.raises(SideExit) as exit:
            program(x)
        assert exit.value.guard_index == number


def guards_around_a_loop(x):
    scale = 2.0 if x[0].sum() > 0 else 3.0
    h = x[0] * 0.0
    for t in range(x.shape[0]):
        h = np.tanh(h + x[t] * scale)
    return h * 2.0 if h.sum() > 0 else h - 1.0


def test_guards_in_segments_keep_the_graph_numbering():
    x = np.ones((6, 3))
    program = compile_graph(trace(guards_around_a_loop, x, dynamic=True).graph)
    assert isinstance(program, NativeLoopProgram)
    assert [guard.convert for guard in program.graph.guards] == ["margin", "bool"] * 2
    # h is (a, -a, 0) after trip 1 (tanh(0.5) taken back out), then stays so: its sum is
    # within the bound the loop carries of 0
    near_zero = np.zeros((6, 3))
    near_zero[0] = (1.0, -1.0, 0.25)
    near_zero[1, 2] = -np.tanh(0.5) / 2
    program(x)
    for value, number in ((-x, 1), (near_zero, 2)):  # before the loop; after it (its margin)
        with pytest.raises(SideExit) as exit:
            program(value)
        assert exit.value.guard_index == number
    f = tj.jit(guards_around_a_loop, dynamic=True, cache="memory", loops="capture")
    for value in (x, -x, x[:5], -x[:7]):
        np.testing.assert_allclose(f(value), guards_around_a_loop(value), rtol=1e-12)


def reads_ahead(x, y, out):
    acc = x[0] * 0.0
    for t in range(y.shape[0]):
        acc = acc + x[t + 1] * y[t]
        out[t] = acc
    return acc


def test_failing_read_in_the_body_side_exits_with_inputs_untouched():
    rng = np.random.default_rng(7)
    x, y, out = rng.standard_normal((8, 3)), rng.standard_normal((5, 3)), np.zeros((8, 3))
    traced = trace(reads_ahead, x, y, out.copy(), dynamic=True)
    assert loops_in(traced.graph)
    program = compile_graph(traced.graph)
    assert isinstance(program, NativeLoopProgram)
    np.testing.assert_allclose(program(x, y, out)[0], reads_ahead(x, y, out.copy()))
    # Same bucket, y longer than x: the last iteration reads x[7] of 6 rows. The whole
    # call side-exits and no input is written (the buffer written at the index is a copy).
    x, y, out = rng.standard_normal((6, 3)), rng.standard_normal((7, 3)), np.zeros((6, 3))
    before = [a.copy() for a in (x, y, out)]
    with pytest.raises(SideExit) as exit:
        program(x, y, out)
    assert exit.value.guard_index is None
    for array, copy in zip((x, y, out), before):
        np.testing.assert_array_equal(array, copy)
    f = tj.jit(reads_ahead, dynamic=True, cache="memory", loops="capture")
    f(*(rng.standard_normal((8, 3)), rng.standard_normal((5, 3)), np.zeros((8, 3))))
    with pytest.raises(IndexError):  # eager decides, as NumPy would
        f(x, y, out)
    assert f.stats()["compiles"] == 1
