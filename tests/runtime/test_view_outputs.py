"""Outputs that are views of inputs share memory exactly when eager NumPy's do (issue 12,
item 6): compiled ``x[1:]``, ``x.T``, ``x.reshape(...)`` are NumPy views of the caller's
array, so a later in-place write shows through both alike; computed outputs never alias.
Tensor results own their data (a write through one cannot reach a tensor autograd saved).
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit, tensor

# (name, function); each is compared with eager on the same kind of input.
VIEW_OPS = [
    ("identity", lambda x: x),
    ("slice", lambda x: x[1:]),
    ("stepped slice", lambda x: x[::2, 1:]),
    ("transpose", lambda x: x.T),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 1)),
    ("moveaxis", lambda x: np.moveaxis(x, 0, -1)),
    ("reshape", lambda x: x.reshape(2, -1)),
    ("ravel", lambda x: x.ravel()),
    ("new axis", lambda x: x[None]),
    ("squeeze", lambda x: x[:1].squeeze(0)),
    ("integer index", lambda x: x[1]),
    ("column", lambda x: x[:, 0]),
    ("flip", lambda x: x[::-1]),
    ("transpose then slice", lambda x: x.T[1:]),
    ("broadcast_to", lambda x: np.broadcast_to(x, (2, *x.shape))),
    ("split", lambda x: tuple(np.split(x, 2))),
    # not views: eager copies, and so must compiled code
    ("copy", lambda x: x.copy()),
    ("flatten", lambda x: x.flatten()),
    ("arithmetic", lambda x: x + 0),
    ("sum", lambda x: x.sum(axis=0)),
    ("view and copy", lambda x: (x[1:], x * 2)),
]


def _leaves(result):
    return result if isinstance(result, tuple) else (result,)


def _inputs():
    x = np.arange(12.0).reshape(4, 3)
    return x, np.asfortranarray(x)  # C-ordered, and a layout reshape cannot view


@pytest.mark.parametrize("name, fn", VIEW_OPS, ids=[name for name, _ in VIEW_OPS])
@pytest.mark.parametrize("layout", [0, 1], ids=["c-order", "fortran"])
def test_shares_memory_like_eager(name, fn, layout):
    f = jit(cache=False)(fn)
    f(_inputs()[layout].copy(order="K"))  # the traced call
    x_eager, x = (array.copy(order="K") for array in (_inputs()[layout],) * 2)
    expected, compiled = _leaves(fn(x_eager)), _leaves(f(x))
    assert f.stats()["compiled_calls"] == 1
    for want, got in zip(expected, compiled):
        assert np.shares_memory(got, x) == np.shares_memory(want, x_eager)
        np.testing.assert_array_equal(got, want)
        assert got.flags.writeable == want.flags.writeable
    # A later in-place write shows through views alike.
    x_eager += 100
    x += 100
    for want, got in zip(expected, compiled):
        np.testing.assert_array_equal(got, want)


def test_computed_outputs_do_not_alias_inputs_or_each_other():
    f = jit(cache=False)(lambda x, y: (x * y, x + 0.0, y.T + 1.0, x.sum()))
    x, y = np.ones((3, 3)), np.full((3, 3), 2.0)
    f(x, y)
    outputs = f(x, y)
    for output in outputs:
        assert not np.shares_memory(output, x) and not np.shares_memory(output, y)
    for i, a in enumerate(outputs):
        for b in outputs[i + 1:]:
            assert not np.shares_memory(a, b)


def test_view_of_an_input_the_function_writes():
    """Eager's ``y = x.T`` sees the function's own later write into ``x``."""
    def f(x):
        y = x.T
        x[0] = 5.0
        return y

    jitted = jit(cache=False)(f)
    jitted(np.ones((2, 3)))
    x_eager, x = np.ones((2, 3)), np.ones((2, 3))
    expected, got = f(x_eager), jitted(x)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(x, x_eager)
    assert np.shares_memory(got, x)


def test_tensor_results_own_their_data():
    f = jit(cache=False)(lambda x: (x[1:], x * 2))
    x = tensor(np.arange(6.0))
    f(x)
    view, product = f(x)
    assert type(view).__name__ == "Tensor"
    assert not np.shares_memory(view.data, x.data)
    np.testing.assert_array_equal(view.data, np.arange(1.0, 6.0))
    np.testing.assert_array_equal(product.data, np.arange(6.0) * 2)


def test_tensor_view_with_gradients():
    f = jit(cache=False)(lambda x: (x.T[1:] * 1.0, x[1:]))
    for _ in range(2):
        x = tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        scaled, view = f(x)
        assert not np.shares_memory(view.data, x.data)
        (scaled.sum() + (view * 3.0).sum()).backward()
        np.testing.assert_array_equal(x.grad, [[0.0, 1.0, 1.0], [3.0, 4.0, 4.0]])
    assert f.stats()["compiled_calls"] >= 1
