"""``tracejit.Tensor`` as an array: construction, operators (reflected and in-place),
methods, properties, ``repr``, NumPy interop (Tensor in, Tensor out) and the errors bad
data gets. Values are checked against NumPy on the same data or against literals."""

from __future__ import annotations

import operator

import numpy as np
import pytest

from tracejit import Tensor, TensorError, tensor
from tracejit.tracer import TracejitError, UnsupportedError


def assert_tensor_equal(actual, expected):
    """A Tensor with NumPy's dtype, shape and values for ``expected``."""
    assert isinstance(actual, Tensor), f"expected a Tensor, got {type(actual).__name__}"
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual.numpy(), expected)


X = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]])
Y = np.array([[2.0, 1.0, -0.5], [3.0, -2.0, 2.0]])


# --- construction ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, dtype, expected",
    [
        ([1.0, 2.0], None, np.array([1.0, 2.0])),
        ([[1, 2], [3, 4]], None, np.array([[1, 2], [3, 4]])),
        ([1, 2], np.float32, np.array([1, 2], np.float32)),
        (3.5, None, np.array(3.5)),
        (True, None, np.array(True)),
        ([], None, np.array([])),
        (np.arange(6, dtype=np.int32), None, np.arange(6, dtype=np.int32)),
        (np.float32(2.0), None, np.array(2.0, np.float32)),
    ],
    ids=["floats", "nested-ints", "dtype", "python-float", "bool", "empty", "ndarray", "np-scalar"],
)
def test_tensor_from_data_matches_np_array(data, dtype, expected):
    assert_tensor_equal(tensor(data, dtype=dtype), expected)


def test_tensor_copies_its_data():
    data = np.array([1.0, 2.0])
    t = tensor(data)
    data[0] = 99.0
    assert t.tolist() == [1.0, 2.0]


def test_tensor_of_a_tensor_is_a_new_leaf():
    x = tensor([1.0, 2.0], requires_grad=True)
    y = tensor(x * 2)
    assert y.is_leaf and not y.requires_grad
    assert y.tolist() == [2.0, 4.0]


def test_properties():
    t = tensor(np.zeros((2, 3, 4), np.float32))
    assert t.shape == (2, 3, 4)
    assert t.dtype == np.float32
    assert t.ndim == 3
    assert t.size == 24
    assert len(t) == 2
    assert t.grad is None and t.grad_fn is None
    assert t.is_leaf and not t.requires_grad
    assert t.T.shape == (4, 3, 2)


# --- operators -------------------------------------------------------------------------
BINARY_OPERATORS = [
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
    operator.mod, operator.pow, operator.lt, operator.le, operator.eq, operator.ne,
    operator.gt, operator.ge,
]


@pytest.mark.parametrize("function", BINARY_OPERATORS, ids=lambda f: f.__name__)
def test_operator_and_reflected_operator_match_numpy(function):
    x, y = np.abs(X), Y  # a positive base for **
    with np.errstate(all="ignore"):
        assert_tensor_equal(function(tensor(x), tensor(y)), function(x, y))
        assert_tensor_equal(function(tensor(x), 3.0), function(x, 3.0))
        assert_tensor_equal(function(3.0, tensor(x)), function(3.0, x))
        assert_tensor_equal(function(x, tensor(y)), function(x, y))  # ndarray op Tensor


def test_arithmetic_literals():
    t = tensor([1.0, 2.0, 4.0])
    assert (t + 1).tolist() == [2.0, 3.0, 5.0]
    assert (1 - t).tolist() == [0.0, -1.0, -3.0]
    assert (2 / t).tolist() == [2.0, 1.0, 0.5]
    assert (2**t).tolist() == [2.0, 4.0, 16.0]
    assert (t**2).tolist() == [1.0, 4.0, 16.0]
    assert (-t).tolist() == [-1.0, -2.0, -4.0]
    assert abs(tensor([-1.5, 2.0])).tolist() == [1.5, 2.0]
    assert (tensor([7, -7]) // 2).tolist() == [3, -4]
    assert (tensor([7, -7]) % 3).tolist() == [1, 2]


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 1, 2, 3), (5, 3, 2))],
)
def test_matmul_operator_matches_numpy(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=a_shape), rng.normal(size=b_shape)
    assert_tensor_equal(tensor(a) @ tensor(b), a @ b)
    assert_tensor_equal(a @ tensor(b), a @ b)
    assert_tensor_equal(tensor(a) @ b, a @ b)


def test_comparisons_give_boolean_tensors():
    t = tensor([1.0, 2.0, 3.0])
    assert_tensor_equal(t < 2, np.array([True, False, False]))
    assert_tensor_equal(2 <= t, np.array([False, True, True]))
    assert_tensor_equal(t == tensor([1.0, 0.0, 3.0]), np.array([True, False, True]))
    assert_tensor_equal(t != 2.0, np.array([True, False, True]))


def test_logical_operators_on_boolean_tensors():
    a, b = tensor([True, True, False]), tensor([True, False, False])
    assert_tensor_equal(a & b, np.array([True, False, False]))
    assert_tensor_equal(a | b, np.array([True, True, False]))
    assert_tensor_equal(a ^ b, np.array([False, True, False]))
    assert_tensor_equal(~a, np.array([False, False, True]))


# --- in-place operators ----------------------------------------------------------------
@pytest.mark.parametrize(
    "inplace, plain",
    [
        (operator.iadd, operator.add),
        (operator.isub, operator.sub),
        (operator.imul, operator.mul),
        (operator.itruediv, operator.truediv),
    ],
    ids=["+=", "-=", "*=", "/="],
)
def test_inplace_on_plain_tensor_writes_into_its_buffer(inplace, plain):
    t = tensor(X)
    buffer = t.numpy()
    result = inplace(t, tensor(Y))
    assert result is t
    assert t.numpy() is buffer  # same memory: NumPy's in-place semantics
    np.testing.assert_array_equal(t.numpy(), plain(X, Y))


def test_inplace_keeps_dtype_and_refuses_unsafe_casts_like_numpy():
    t = tensor(np.array([1, 2], np.int32))
    t += 1
    assert_tensor_equal(t, np.array([2, 3], np.int32))
    f = tensor(np.array([1.0, 2.0], np.float32))
    f *= 2.5
    assert_tensor_equal(f, np.array([2.5, 5.0], np.float32))
    with pytest.raises(TypeError, match="same_kind"):
        array = np.array([1, 2])
        array += 1.5
    with pytest.raises(TypeError, match="same_kind"):
        t += 1.5


def test_inplace_on_leaf_requiring_grad_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x += 1
    assert x.tolist() == [1.0, 2.0]


def test_inplace_on_non_leaf_rebinds_and_gradients_stay_right():
    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    alias = y
    y += x  # y = x^2 + x
    y *= 2.0  # y = 2x^2 + 2x
    assert y is alias
    assert y.tolist() == [4.0, 12.0, 24.0]
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 4 * np.array([1.0, 2.0, 3.0]) + 2)


def test_inplace_with_grad_operand_joins_the_graph():
    accumulator = tensor([0.0, 0.0])
    x = tensor([1.0, 2.0], requires_grad=True)
    accumulator += x * 3
    assert accumulator.requires_grad and not accumulator.is_leaf
    accumulator.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_setitem_on_plain_tensor_writes_in_place():
    t = tensor(np.zeros((2, 3)))
    t[0, 1:] = 5.0
    t[1] = tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(t.numpy(), [[0.0, 5.0, 5.0], [1.0, 2.0, 3.0]])


# --- methods ---------------------------------------------------------------------------
METHOD_CALLS = [
    ("sum", lambda x: x.sum()),
    ("sum-axis", lambda x: x.sum(axis=0)),
    ("sum-keepdims", lambda x: x.sum(axis=-1, keepdims=True)),
    ("mean", lambda x: x.mean()),
    ("mean-axis", lambda x: x.mean(axis=1)),
    ("max", lambda x: x.max()),
    ("max-axis", lambda x: x.max(axis=0)),
    ("min", lambda x: x.min(axis=1, keepdims=True)),
    ("argmax", lambda x: x.argmax()),
    ("argmax-axis", lambda x: x.argmax(axis=1)),
    ("argmin", lambda x: x.argmin(axis=0)),
    ("prod", lambda x: x.prod(axis=1)),
    ("var", lambda x: x.var(axis=0)),
    ("std", lambda x: x.std()),
    ("any", lambda x: (x > 3).any()),
    ("all", lambda x: (x > -3).all(axis=0)),
    ("reshape-args", lambda x: x.reshape(3, 2)),
    ("reshape-tuple", lambda x: x.reshape((-1,))),
    ("transpose", lambda x: x.transpose()),
    ("transpose-axes", lambda x: x.transpose(1, 0)),
    ("T", lambda x: x.T),
    ("swapaxes", lambda x: x.swapaxes(0, 1)),
    ("squeeze", lambda x: x.reshape(1, 6, 1).squeeze()),
    ("flatten", lambda x: x.flatten()),
    ("ravel", lambda x: x.ravel()),
    ("astype-f32", lambda x: x.astype(np.float32)),
    ("astype-int", lambda x: x.astype(np.int64)),
    ("copy", lambda x: x.copy()),
    ("clip", lambda x: x.clip(-1.0, 2.0)),
    ("dot", lambda x: x.dot(np.ones(3))),
]


@pytest.mark.parametrize("name, call", METHOD_CALLS, ids=[name for name, _ in METHOD_CALLS])
def test_method_matches_numpy(name, call):
    assert_tensor_equal(call(tensor(X)), np.asarray(call(X)))


def test_item_numpy_tolist():
    assert tensor(2.5).item() == 2.5 and type(tensor(2.5).item()) is float
    assert tensor([7]).item() == 7 and type(tensor([7]).item()) is int
    with pytest.raises(ValueError, match="size 1"):
        tensor([1.0, 2.0]).item()
    t = tensor(X)
    assert isinstance(t.numpy(), np.ndarray) and t.numpy() is t.numpy()
    assert t.tolist() == X.tolist()
    assert float(tensor(1.5)) == 1.5 and int(tensor(3)) == 3
    assert bool(tensor([1.0])) and not bool(tensor(0.0))


def test_copy_is_independent_but_differentiable():
    x = tensor([1.0, 2.0], requires_grad=True)
    plain = tensor([1.0, 2.0])
    duplicate = plain.copy()
    duplicate += 1
    assert plain.tolist() == [1.0, 2.0]
    y = x.copy()
    (y * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_len_iteration_and_index_conversion():
    t = tensor([[1, 2], [3, 4]])
    assert len(t) == 2
    rows = list(t)
    assert all(isinstance(row, Tensor) for row in rows)
    assert [row.tolist() for row in rows] == [[1, 2], [3, 4]]
    assert [10, 20, 30][tensor(2)] == 30  # __index__
    assert tensor([10.0, 20.0, 30.0])[tensor([2, 0])].tolist() == [30.0, 10.0]
    with pytest.raises(TypeError, match="len"):
        len(tensor(1.0))
    with pytest.raises(TypeError, match="integer scalar"):
        [1, 2][tensor(1.0)]


def test_truth_value_of_several_elements_is_ambiguous():
    with pytest.raises(ValueError, match="ambiguous"):
        bool(tensor([1.0, 2.0]))


def test_tensors_hash_by_identity():
    a, b = tensor([1.0]), tensor([1.0])
    assert {a: "a", b: "b"}[a] == "a"


# --- repr ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: tensor([1.0, 2.0], requires_grad=True), "tensor([1., 2.], requires_grad=True)"),
        (lambda: tensor([1.0, 2.0]), "tensor([1., 2.])"),
        (lambda: tensor([1.0, 2.0], dtype=np.float32), "tensor([1., 2.], dtype=float32)"),
        (
            lambda: tensor([1.0], dtype=np.float32, requires_grad=True),
            "tensor([1.], dtype=float32, requires_grad=True)",
        ),
        (lambda: tensor([1, 2]), "tensor([1, 2])"),
        (lambda: tensor([1, 2], dtype=np.int32), "tensor([1, 2], dtype=int32)"),
        (lambda: tensor([True, False]), "tensor([ True, False])"),
        (lambda: tensor(3.5), "tensor(3.5)"),
        (lambda: tensor([]), "tensor([], dtype=float64)"),
        (
            lambda: tensor([[1, 2], [3, 4]], dtype=np.float32),
            "tensor([[1., 2.],\n        [3., 4.]], dtype=float32)",
        ),
        (
            lambda: tensor([1.0, 2.0], requires_grad=True) * 2,
            "tensor([2., 4.], grad_fn=<multiply>)",
        ),
    ],
    ids=["requires-grad", "float64", "float32", "float32-grad", "int64", "int32", "bool",
         "0d", "empty", "2d", "grad_fn"],
)
def test_repr(make, expected):
    assert repr(make()) == expected


def test_str_is_numpy_str():
    assert str(tensor(X)) == str(X)


# --- NumPy interop: Tensor in, Tensor out ----------------------------------------------
def test_numpy_functions_return_tensors():
    t = tensor(X)
    assert_tensor_equal(np.tanh(t), np.tanh(X))
    assert_tensor_equal(np.maximum(t, 0), np.maximum(X, 0))
    assert_tensor_equal(np.ones_like(t), np.ones_like(X))
    assert_tensor_equal(np.zeros_like(t, dtype=np.int32), np.zeros_like(X, dtype=np.int32))
    assert_tensor_equal(np.concatenate([t, tensor(Y)]), np.concatenate([X, Y]))
    assert_tensor_equal(np.where(t > 0, t, 0.0), np.where(X > 0, X, 0.0))
    assert_tensor_equal(np.sum(t, axis=0), np.sum(X, axis=0))
    assert_tensor_equal(np.exp(t).mean(axis=1), np.exp(X).mean(axis=1))


def test_ndarray_with_tensor_gives_tensor():
    t = tensor(Y)
    assert_tensor_equal(X + t, X + Y)
    assert_tensor_equal(X * t, X * Y)
    assert_tensor_equal(X > t, X > Y)
    assert_tensor_equal(X @ t.T, X @ Y.T)
    assert_tensor_equal(np.float64(2.0) * t, 2.0 * Y)


def test_numpy_conversion_gives_ndarray():
    t = tensor(X)
    assert type(np.asarray(t)) is np.ndarray
    np.testing.assert_array_equal(np.asarray(t), X)
    assert np.array(t, dtype=np.float32).dtype == np.float32
    copied = np.array(t, copy=True)
    copied[0, 0] = 100.0
    assert t.numpy()[0, 0] == X[0, 0]


def test_gradients_flow_through_numpy_functions():
    x = tensor([0.5, -1.0], requires_grad=True)
    np.sum(np.tanh(x) * np.maximum(x, 0)).backward()
    value = np.array([0.5, -1.0])
    expected = np.where(value > 0, (1 - np.tanh(value) ** 2) * value + np.tanh(value), 0.0)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


# --- bad input: clear errors, standard types, short tracebacks -------------------------
def assert_short_error(excinfo, max_frames=5):
    """No chained exception printed and only a few frames between the user and the raise."""
    error = excinfo.value
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    assert len(excinfo.traceback) <= max_frames, [str(entry) for entry in excinfo.traceback]


BAD_INPUTS = [
    (
        "object-array",
        lambda: tensor(np.array([object()], dtype=object)),
        TensorError,
        ["Python objects", "dtype object"],
    ),
    ("strings", lambda: tensor(["a", "b"]), TensorError, ["strings", "convert the data"]),
    ("ragged", lambda: tensor([[1, 2], [3]]), TensorError, ["ragged", "rows of different lengths"]),
    (
        "integer-requires-grad",
        lambda: tensor([1, 2], requires_grad=True),
        RuntimeError,
        ["floating point", "int64", "astype"],
    ),
    (
        "integer-backward",
        lambda: tensor([1, 2]).sum().backward(),
        RuntimeError,
        ["does not require grad", "int64"],
    ),
    (
        "shape-mismatch",
        lambda: tensor(np.ones(3)) + tensor(np.ones(4)),
        ValueError,
        ["could not be broadcast", "(3,)", "(4,)"],
    ),
    (
        "unsupported-function",
        lambda: np.fft.fft(tensor([1.0, 2.0])),
        UnsupportedError,
        ["np.fft.fft", "not supported", ".numpy()"],
    ),
    (
        "unsupported-ufunc",
        lambda: np.arcsin(tensor([0.5])),
        UnsupportedError,
        ["np.arcsin", "not supported"],
    ),
    (
        "ufunc-out-with-grad",
        lambda: np.exp(tensor([1.0], requires_grad=True), out=np.empty(1)),
        TypeError,
        ["out=", "gradient", "assign the result"],
    ),
    (
        "ufunc-method",
        lambda: np.add.reduceat(tensor([1.0, 2.0, 3.0]), [0, 2]),
        UnsupportedError,
        ["np.add.reduceat", "not supported"],
    ),
]


def test_ufunc_out_writes_into_the_array_as_numpy_does():
    out = np.empty(2)
    result = np.exp(tensor([0.0, 1.0]), out=out)
    assert result is out
    np.testing.assert_allclose(out, np.exp([0.0, 1.0]))


@pytest.mark.parametrize(
    "make, error_type, fragments",
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_raises_a_clear_error(make, error_type, fragments):
    with pytest.raises(error_type) as excinfo:
        make()
    message = str(excinfo.value)
    for fragment in fragments:
        assert fragment in message
    assert_short_error(excinfo)


def test_tensor_errors_are_tracejit_errors_and_type_errors():
    with pytest.raises(TracejitError):
        tensor(["a"])
    with pytest.raises(TypeError):  # what torch.tensor(["a"]) raises
        tensor(["a"])
    with pytest.raises(TypeError):  # an unsupported NumPy function, as NumPy's protocol says
        np.fft.fft(tensor([1.0]))


# --- .data: the PyTorch SGD idioms ------------------------------------------------------
def _sgd_by_data(update):
    """Two SGD steps on a jit loss, the parameter updated through ``p.data`` by ``update``;
    returns the parameter and the loss function's stats."""
    from tracejit import jit

    @jit
    def loss(w, x):
        return (np.maximum(x @ w, 0) ** 2).mean()

    w = tensor(np.linspace(-1.0, 1.0, 12).reshape(4, 3), requires_grad=True)
    for step in range(3):
        x = np.linspace(-2.0, 2.0, 4 * (step + 2)).reshape(step + 2, 4)
        loss(w, x).backward()
        update(w, 0.1)
        w.grad = None
    return w, loss.stats()


@pytest.mark.parametrize("update", [
    lambda p, lr: setattr(p, "data", p.data - lr * p.grad),  # p.data = p.data - lr * p.grad
    lambda p, lr: setattr(p, "data", p.data.__isub__(lr * p.grad)),  # p.data -= lr * p.grad
    lambda p, lr: setattr(p, "data", p.data - lr * p.grad.data),
], ids=["assign", "subtract-in-place", "grad-data"])
def test_data_assigned_a_tensor_holds_its_array_and_the_loss_stays_compiled(update):
    """``p.grad`` is a Tensor, so ``p.data - lr * p.grad`` is one: ``.data`` stores its
    array (it held the Tensor itself, which broke the next call's trace)."""
    w, stats = _sgd_by_data(update)
    reference, _ = _sgd_by_data(lambda p, lr: p.data.__isub__(lr * p.grad.numpy()))
    assert type(w.data) is np.ndarray and w.requires_grad
    np.testing.assert_allclose(w.data, reference.data, rtol=1e-12)
    assert stats["compiled_calls"] >= 2 and not stats["eager_calls"], stats


def test_data_assigned_bad_values_raises_like_tensor():
    p = tensor([1.0, 2.0])
    p.data = [3, 4]
    assert_tensor_equal(p, np.array([3, 4]))
    with pytest.raises(TensorError, match="strings"):
        p.data = np.array(["a", "b"])
