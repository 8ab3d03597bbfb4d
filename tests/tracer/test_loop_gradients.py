"""Reverse mode through captured loops (issue 13; tracer/loop_autodiff.py): gradients of
loop programs from ``jit(value_and_grad(f))`` and ``Tensor.backward()`` against finite
differences, the eager tape and the unrolled trace, over trip counts 0, 1, 2, primes and
bucket edges, in float32 and float64; one compile per bucket whatever T."""

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.ir import verify
from tracejit.tracer.ops.control import inplace_writes, loop_p
from tracejit.tracer.tracing import trace

N, D, H = 2, 3, 4  # static dims (2, 3, 4 are alone in their buckets)
LENGTHS = [0, 1, 2, 3, 5, 7, 16, 17]


# --- the loop forms ----------------------------------------------------------------------
def elman_rnn(Wx, Wh, b, x, h0):
    """Writes at the index (h_all[:, t, :] = h) and a carried value."""
    N, T, D = x.shape
    h = h0
    h_all = np.zeros((N, T, Wh.shape[0]), dtype=x.dtype)
    for t in range(T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return np.sum(h_all * h_all) + np.sum(h * 0.5)


def accumulating(Wx, Wh, b, x, h0):
    """``loss += ...``: the carried value is a scalar sum."""
    loss = np.sum(h0) * 0.1  # an array from the start: eager grad needs one at T = 0
    for t in range(x.shape[1]):
        loss += np.sum(np.tanh(x[:, t, :] @ Wx + b) * h0)
    return loss


def carried_only(Wx, Wh, b, x, h0):
    """Only a carried value; the body reads nothing at the index."""
    h = h0
    for t in range(x.shape[1]):  # noqa: B007 - the index unread is the case tested
        h = np.tanh(h @ Wh + b)
    return np.sum(h * h) + np.sum(Wx)


def writes_only(Wx, Wh, b, x, h0):
    """Only writes at the index (iterations independent); the initial buffer is computed
    from the arguments, so its gradient is masked where the loop overwrites it."""
    batch, T = x.shape[:2]
    out = np.zeros((batch, T, Wx.shape[1]), dtype=x.dtype) + b
    for t in range(T):
        out[:, t, :] = np.sin(x[:, t, :] @ Wx)
    return np.sum(out * out) + np.sum(h0)


def rnn_from_one(Wx, Wh, b, x, h0):
    """range(1, T): iteration 1 is peeled, so T = 2 runs the compiled loops 0 trips."""
    batch, T = x.shape[:2]
    h = h0
    h_all = np.zeros((batch, T, Wh.shape[0]), dtype=x.dtype)
    for t in range(1, T):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h
    return np.sum(h_all * np.cos(h_all)) + np.sum(h)


FORMS = [elman_rnn, accumulating, carried_only, writes_only, rnn_from_one]
ARGNUMS = (0, 1, 2, 3, 4)


def arguments(rng, T, dtype):
    return tuple(np.asarray(a, dtype) for a in (
        rng.standard_normal((D, H)) * 0.5, rng.standard_normal((H, H)) * 0.5,
        rng.standard_normal(H), rng.standard_normal((N, T, D)),
        rng.standard_normal((N, H))))


def finite_differences(f, args, eps=1e-6):
    """Central differences of ``f`` (float64) in every entry of every argument."""
    args = [np.array(a, np.float64) for a in args]
    grads = []
    for a in args:
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + eps
            up = f(*args)
            a[i] = old - eps
            down = f(*args)
            a[i] = old
            g[i] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


def close(got, want, dtype):
    rtol, atol = (1e-7, 1e-9) if dtype == np.float64 else (2e-4, 2e-4)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


_jitted = {}


def compiled(form, dtype, **options):
    """One jit function per (form, dtype): every length below shares its variants, so
    the compile counts below are per bucket."""
    key = (form, np.dtype(dtype), tuple(sorted(options.items())))
    if key not in _jitted:
        _jitted[key] = tj.jit(tj.value_and_grad(form, argnums=ARGNUMS), dynamic=True,
                              cache="memory", loops="capture", buckets=[64], **options)
        rng = np.random.default_rng(99)
        _jitted[key](*arguments(rng, 9, dtype))  # traced at T = 9: the loop is captured
    return _jitted[key]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("form", FORMS, ids=lambda form: form.__name__)
def test_gradient_matches_eager_and_finite_differences(form, T, dtype):
    rng = np.random.default_rng(T)
    args = arguments(rng, T, dtype)
    jf = compiled(form, dtype)
    compiles = jf.stats()["compiles"]
    value, grads = jf(*args)
    eager_value, eager_grads = tj.value_and_grad(form, argnums=ARGNUMS)(*args)
    close([value], [eager_value], dtype)
    close(grads, eager_grads, dtype)
    if dtype == np.float64:
        for got, want in zip(grads, finite_differences(form, args)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if T >= 2:  # lengths 0 and 1 are static dims: traced apart, loops too short to capture
        # Served by the program compiled at T = 9 (lengths 2..64 share a bucket).
        assert jf.stats()["compiles"] == compiles, "this length compiled again"


@pytest.mark.parametrize("T", [3, 7])
@pytest.mark.parametrize("form", FORMS, ids=lambda form: form.__name__)
def test_gradient_matches_the_unrolled_trace(form, T):
    rng = np.random.default_rng(T + 100)
    args = arguments(rng, T, np.float64)
    unrolled = tj.jit(tj.value_and_grad(form, argnums=ARGNUMS), dynamic=True,
                      cache="memory", loops="unroll")
    value, grads = compiled(form, np.float64)(*args)
    unrolled_value, unrolled_grads = unrolled(*args)
    np.testing.assert_allclose(value, unrolled_value, rtol=1e-12)
    for got, want in zip(grads, unrolled_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# --- loops reversed by running forward, and loops reverse mode unrolls -------------------
def reversed_rnn(Wx, Wh, b, x, h0):
    """``reversed(range(T))``: a step -1 loop, whose reverse runs with step +1."""
    batch, T = x.shape[:2]
    h = h0
    h_all = np.zeros((batch, T, Wh.shape[0]), dtype=x.dtype)
    for t in reversed(range(T)):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        h_all[:, t, :] = h * np.arange(1, T + 1, dtype=x.dtype)[t]
    return np.sum(h_all * h_all) + np.sum(h)


def gated_rnn(Wx, Wh, b, x, h0):
    """An ``if`` on traced data in the body (a guard per trip, true on every trip since
    |tanh| < 1): the guard stays in the forward loop, the reverse loop replays the branch
    it pins."""
    h = h0
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        if np.max(np.abs(h)) < 2.0:
            h = h * 0.5
    return np.sum(h * h)


def nested(Wx, Wh, b, x, h0):
    """A loop inside a loop: both are captured and reversed (the outer reverse body
    recomputes the inner forward loop with its residual stacks)."""
    acc = b * 1.0
    for i in range(x.shape[1]):
        for j in range(x.shape[1]):
            acc = np.tanh(acc @ Wh * 0.5 + x[0, i, :] @ Wx + x[1, j, :] @ Wx)
    return np.sum(acc * acc) + np.sum(h0)


@pytest.mark.parametrize("T", [3, 5])
@pytest.mark.parametrize("form", [reversed_rnn, gated_rnn, nested],
                         ids=lambda form: form.__name__)
def test_gradient_of_other_loop_forms(form, T):
    rng = np.random.default_rng(T + 200)
    jf = tj.jit(tj.value_and_grad(form, argnums=ARGNUMS), dynamic=True, cache="memory")
    for _ in range(2):  # the traced call and a compiled one
        args = arguments(rng, T, np.float64)
        value, grads = jf(*args)
        eager_value, eager_grads = tj.value_and_grad(form, argnums=ARGNUMS)(*args)
        close([value], [eager_value], np.float64)
        close(grads, eager_grads, np.float64)
        for got, want in zip(grads, finite_differences(form, args)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not jf.stats()["eager_calls"], jf.explain()


def test_reversed_loop_is_reversed_by_a_forward_loop():
    traced = joint_trace(reversed_rnn)
    verify(traced.graph)
    steps = {eqn.params_dict["step"] for eqn in traced.graph.equations if eqn.prim is loop_p}
    assert steps == {-1, 1}


def test_nested_loops_are_reversed_by_nested_loops():
    traced = joint_trace(nested)
    verify(traced.graph)
    outer = [eqn for eqn in traced.graph.equations if eqn.prim is loop_p]
    assert {eqn.params_dict["step"] for eqn in outer} == {1, -1}
    reverse_bodies = [eqn.params_dict["body"] for eqn in outer
                      if eqn.params_dict["step"] == -1]
    assert any(inner.prim is loop_p for body in reverse_bodies for inner in body.equations)


def test_a_body_with_a_guard_is_reversed_by_a_loop():
    traced = joint_trace(gated_rnn)
    verify(traced.graph)
    steps = [eqn.params_dict["step"] for eqn in traced.graph.equations if eqn.prim is loop_p]
    assert 1 in steps and -1 in steps, steps


def branching_rnn(Wx, Wh, b, x, h0):
    """An ``if`` whose branch depends on the step's data, and a print per step: a call
    whose trips take the other branch leaves compiled code (eagerly right), the others
    are compiled, forward and reverse."""
    h = h0
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
        if np.sum(x[:, t, :]) > -50.0:
            h = h * 0.5 + 0.1
        else:
            h = h * 2.0
        print("step", t)
    return np.sum(h * h)


def test_gradient_through_a_branching_printing_body(capsys):
    rng = np.random.default_rng(5)
    jf = tj.jit(tj.value_and_grad(branching_rnn, argnums=ARGNUMS), dynamic=True,
                cache="memory", buckets=[64])
    for T, flip in ((9, None), (5, None), (12, None), (7, 3), (6, None)):
        args = list(arguments(rng, T, np.float64))
        if flip is not None:
            args[3][:, flip, :] -= 100.0  # trip 3 takes the else branch
        value, grads = jf(*args)
        capsys.readouterr()
        eager_value, eager_grads = tj.value_and_grad(branching_rnn, argnums=ARGNUMS)(*args)
        assert capsys.readouterr().out.count("step") == T
        close([value], [eager_value], np.float64)
        close(grads, eager_grads, np.float64)
        jf(*args)
        assert capsys.readouterr().out.count("step") == T  # printed once per trip, in order
    for got, want in zip(grads, finite_differences(branching_rnn, args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    stats = jf.stats()
    assert stats["compiles"] == 1 and stats["eager_calls"] == {
        "a guard in a loop body failed": 2}, stats


# --- the program: one loop forward, one loop backward, stores not copies ----------------
def joint_trace(form, T=9):
    rng = np.random.default_rng(0)
    return trace(tj.value_and_grad(form, argnums=ARGNUMS), *arguments(rng, T, np.float64),
                 dynamic=True)


def test_the_reverse_of_a_loop_is_a_loop_over_stacked_residuals():
    traced = joint_trace(elman_rnn)
    verify(traced.graph)
    loops = [eqn for eqn in traced.graph.equations if eqn.prim is loop_p]
    forward = [eqn for eqn in loops if eqn.params_dict["step"] == 1]
    backward = [eqn for eqn in loops if eqn.params_dict["step"] == -1]
    assert forward and backward, "no unrolling: one loop each way"
    assert len({eqn.inputs for eqn in forward}) == 1  # one forward loop (with residuals)
    assert len({eqn.inputs for eqn in backward}) == 1
    params = forward[0].params_dict
    body, carried = params["body"], params["num_carry"]
    # Every carried buffer the forward loop gained (the residual stack h_t) and the user's
    # h_all are written in place: stacking costs a store per trip.
    assert carried == 3 and set(inplace_writes(body, carried)) == {1, 2}
    reverse = backward[0].params_dict
    reverse_writes = inplace_writes(reverse["body"], reverse["num_carry"])
    # dx is written at the index (x[:, t, :] read at the index), not added as a full array.
    assert any(body_input.aval.shape == traced.graph.inputs[3].aval.shape
               for position, body_input in enumerate(reverse["body"].inputs)
               if position in reverse_writes)
    matmuls = [eqn for eqn in reverse["body"].equations if eqn.prim.name == "matmul"]
    assert len(matmuls) == 4, "dh, dWh, dx, dWx: the forward's matmuls are not recomputed"


def test_accumulating_loss_stacks_only_the_matmul():
    """loss += sum(tanh(x_t @ Wx + b) * h0): the loss's cotangent passes through every
    trip unchanged (read, not carried, by the reverse loop) and is never stacked; the one
    residual is the matmul's output, from which tanh is recomputed."""
    traced = joint_trace(accumulating)
    verify(traced.graph)
    loops = [eqn for eqn in traced.graph.equations if eqn.prim is loop_p]
    (forward,) = {eqn.params_dict["body"]: eqn for eqn in loops
                  if eqn.params_dict["step"] == 1}.values()
    body = forward.params_dict["body"]
    assert forward.params_dict["num_carry"] == 2 and set(inplace_writes(body, 2)) == {1}
    producers = {eqn.out.name: eqn for eqn in body.equations}
    _, written, _ = inplace_writes(body, 2)[1]
    assert producers[producers[written.name].inputs[0].name].prim.name == "matmul"
    (reverse,) = {eqn.params_dict["body"] for eqn in loops if eqn.params_dict["step"] == -1}
    assert reverse.inputs[0].aval.shape != ()  # the loss's cotangent is not carried
    assert [eqn.prim.name for eqn in reverse.equations].count("tanh") == 1  # recomputed
    assert [eqn.prim.name for eqn in reverse.equations].count("matmul") == 2  # dx, dWx


# --- Tensor.backward through a jit function -------------------------------------------
@pytest.mark.parametrize("form", [elman_rnn, writes_only], ids=lambda form: form.__name__)
def test_tensor_backward_compiles_once_per_bucket(form):
    f = tj.jit(form, dynamic=True, cache="memory", loops="capture")
    rng = np.random.default_rng(7)
    for T in (9, 12, 16, 11):  # one bucket (9..16)
        args = arguments(rng, T, np.float64)
        tensors = [tj.tensor(a, requires_grad=True) for a in args]
        loss = f(*tensors)
        loss.backward()
        value, grads = tj.value_and_grad(form, argnums=ARGNUMS)(*args)
        np.testing.assert_allclose(loss.numpy(), value, rtol=1e-12)
        for position, (tensor, want) in enumerate(zip(tensors, grads)):
            if form is writes_only and position == 1:
                # (never reads Wh: its .grad stays None, as on the eager tape)
                assert tensor.grad is None
                continue
            np.testing.assert_allclose(tensor.grad, want, rtol=1e-9, atol=1e-12)
    assert f.stats()["compiles"] == 1


def test_value_and_grad_compiles_once_for_many_lengths():
    jf = tj.jit(tj.value_and_grad(elman_rnn, argnums=ARGNUMS), dynamic=True,
                cache="memory", loops="capture")
    rng = np.random.default_rng(8)
    for T in (33, 40, 64, 47, 63):  # one bucket (33..64)
        args = arguments(rng, T, np.float64)
        value, grads = jf(*args)
        want_value, want = tj.value_and_grad(elman_rnn, argnums=ARGNUMS)(*args)
        np.testing.assert_allclose(value, want_value, rtol=1e-12)
        for got, expected in zip(grads, want):
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert jf.stats()["compiles"] == 1
