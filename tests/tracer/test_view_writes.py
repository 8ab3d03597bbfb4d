"""Writes through views (``tracer/view_writes.py``): a write through ``row = buf[i]`` goes
into ``buf`` and every other view of it, as in NumPy, for buffers the trace made and NumPy
buffers made in the function; views the trace cannot follow still run eagerly.

Each model runs eagerly and through ``jit`` on the same arguments (results and arguments
afterwards agree); every call after the first must run compiled, so a silent eager
fallback fails.
"""

import numpy as np
import pytest
from real_model_checks import all_compiled, run_calls

import tracejit as tj


def rng_for(seed):
    return np.random.default_rng(seed)


def traced_buffer_views(x, d):
    buf = np.zeros_like(x)
    before = buf[1, 1:]                  # a view made before the write shows it
    row = buf[1]
    row[1:3] += x[0, :2] * d
    t = buf.T                            # through a transpose
    t[0] -= 1.0
    flipped = buf[::-1, ::2]             # through a flip and a step
    flipped[0] *= 3.0
    return buf, before * 1.0, row.sum(), t[1] + 0.0


def numpy_buffer_views(x):
    buf = np.zeros((3, 5))               # a NumPy array, not traced until written
    other = buf[2, 1:]
    row = buf[2]
    row[1:4] += x[:3]
    column = buf[:, 3]
    column *= 2.0
    return buf, other + 0.0, column.copy()


def argument_views(x, y):
    row = x[1]                           # writes into the caller's array
    row[::2] = y[:row[::2].shape[0]]
    x[0, 1:] -= row[1:]
    return row * 2.0


@pytest.mark.parametrize("model, make", [
    (traced_buffer_views, lambda n, seed: (rng_for(seed).standard_normal((n, 4)), 0.5 + seed)),
    (numpy_buffer_views, lambda n, seed: (rng_for(seed).standard_normal(n),)),
    (argument_views, lambda n, seed: (rng_for(seed).standard_normal((3, n)),
                                      rng_for(seed + 1).standard_normal(n))),
])
def test_writes_through_views_are_seen_by_the_base_and_every_view(model, make):
    f = run_calls(model, [make(n, seed) for n in (5, 7) for seed in (1, 2)])
    assert all_compiled(f, 8), f.explain()


def conv_backward(dZ, A_prev, W, pad):
    """deeplearning.ai's conv_backward (stride 1): gradients accumulated into
    ``da_prev_pad = dA_prev_pad[i]``, a view of a NumPy buffer made by ``np.pad``."""
    m, n_H, n_W, n_C = dZ.shape
    f = W.shape[0]
    dA_prev = np.zeros(A_prev.shape)
    dW = np.zeros(W.shape)
    A_prev_pad = np.pad(A_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)),
                        mode="constant", constant_values=(0, 0))
    dA_prev_pad = np.pad(dA_prev, ((0, 0), (pad, pad), (pad, pad), (0, 0)),
                         mode="constant", constant_values=(0, 0))
    for i in range(m):
        a_prev_pad = A_prev_pad[i]
        da_prev_pad = dA_prev_pad[i]
        for h in range(n_H):
            for w in range(n_W):
                for c in range(n_C):
                    a_slice = a_prev_pad[h:h + f, w:w + f, :]
                    da_prev_pad[h:h + f, w:w + f, :] += W[:, :, :, c] * dZ[i, h, w, c]
                    dW[:, :, :, c] += a_slice * dZ[i, h, w, c]
        dA_prev[i, :, :, :] = da_prev_pad[pad:-pad, pad:-pad, :]
    return dA_prev, dW


def test_course_conv_backward_accumulating_into_a_view_of_a_padded_buffer():
    def make(size, seed):
        r = rng_for(seed)
        return (r.standard_normal((1, size, size, 2)), r.standard_normal((1, size, size, 2)),
                r.standard_normal((3, 3, 2, 2)), 1)

    f = run_calls(conv_backward, [make(3, 1), make(3, 2)])
    assert all_compiled(f, 4), f.explain()


def rnn_backward_into_views(dh_all, h_all, Wh):
    """A from-scratch RNN's backward: each step's gradient accumulated into
    ``dh = dhs[t]`` (a view of the buffer), inside a loop over time."""
    T = dh_all.shape[0]
    dhs = dh_all.copy()
    dWh = np.zeros_like(Wh)
    for t in range(T - 1, 0, -1):
        dh = dhs[t]
        draw = dh * (1.0 - h_all[t] ** 2)
        dWh += h_all[t - 1].T @ draw
        previous = dhs[t - 1]
        previous += draw @ Wh.T
    return dhs, dWh


def test_a_loop_accumulating_into_views_of_a_buffer():
    def make(steps, seed):
        r = rng_for(seed)
        return (r.standard_normal((steps, 2, 3)), np.tanh(r.standard_normal((steps, 2, 3))),
                r.standard_normal((3, 3)) * 0.5)

    f = run_calls(rnn_backward_into_views, [make(5, 1), make(7, 2), make(6, 3)])
    assert f.stats()["eager_calls"] == {}, f.explain()


def test_gradients_flow_through_a_write_into_a_view():
    def loss(x):
        buf = np.zeros((3, 4))
        row = buf[1]
        row[1:] += np.tanh(x)
        view = buf.T
        view[2] *= x[0]
        return np.sum(buf ** 2)

    x = rng_for(3).standard_normal(3)
    value, grad = tj.jit(tj.value_and_grad(loss), cache="memory")(x)
    step = 1e-6
    numeric = np.array([(loss(x + step * e) - loss(x - step * e)) / (2 * step)
                        for e in np.eye(3)])
    np.testing.assert_allclose(value, loss(x), rtol=1e-12)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def copy_or_view_reshape(x):
    buf = np.zeros_like(x)
    flat = buf.T.reshape(-1)             # NumPy copies here: a write must not reach buf
    flat[:3] = x[0, :3]
    return buf, flat


def gather_view(x, c):
    row = x[c]                           # a run-time int: a gather in the trace
    row += 1.0
    return x * 1.0


@pytest.mark.parametrize("model, make", [
    (copy_or_view_reshape, lambda seed: (rng_for(seed).standard_normal((3, 4)),)),
    (gather_view, lambda seed: (rng_for(seed).standard_normal((3, 4)), np.int64(seed % 3))),
])
def test_views_the_trace_cannot_follow_run_as_numpy_does(model, make):
    f = run_calls(model, [make(seed) for seed in (1, 2, 3)])
    assert "internal error" not in (f.stats()["eager_calls"] or {}), f.explain()
