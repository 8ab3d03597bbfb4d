"""The eager autograd tape with PyTorch's semantics: the seed example, ``backward`` and
its seeds, accumulation, ``retain_graph``, ``no_grad``, ``detach``, broadcasting, deep
graphs, in-place checks, differentiable ``__setitem__``, the optimizers against NumPy
references of PyTorch's update formulas, and ``tracejit.grad`` / ``value_and_grad``.

Gradients are compared with hand-derived values or central finite differences.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from tracejit import (
    enable_grad,
    grad,
    is_grad_enabled,
    nn,
    no_grad,
    optim,
    tensor,
    value_and_grad,
)


def finite_difference(function, point, eps=1e-6):
    """d function / d point by central differences (``function`` returns a float)."""
    gradient = np.zeros_like(point)
    for position in np.ndindex(point.shape):
        plus, minus = point.copy(), point.copy()
        plus[position] += eps
        minus[position] -= eps
        gradient[position] = (function(plus) - function(minus)) / (2 * eps)
    return gradient


def dynamic_graph_example(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 2
    return y


# --- the seed example ------------------------------------------------------------------
@pytest.mark.parametrize(
    "values, expected_out, expected_grad",
    [
        ([1.0, -1.0, 2.0], [2.0, -2.0, 4.0], [2.0, 2.0, 2.0]),
        ([-3.0, -2.0, -1.0], [-5.0, -4.0, -3.0], [1.0, 1.0, 1.0]),
    ],
    ids=["x*2-branch", "x-2-branch"],
)
def test_seed_example(values, expected_out, expected_grad):
    x = tensor(values, requires_grad=True)
    out = dynamic_graph_example(x)
    out.backward(np.ones_like(out))
    assert out.tolist() == expected_out
    assert x.grad.tolist() == expected_grad
    assert x.grad.dtype == np.float64


def test_seed_example_on_ndarray_is_plain_numpy():
    out = dynamic_graph_example(np.array([-3.0, -2.0, -1.0]))
    assert type(out) is np.ndarray
    assert out.tolist() == [-5.0, -4.0, -3.0]


# --- backward and its seed -------------------------------------------------------------
def test_scalar_backward_needs_no_gradient():
    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]


def test_single_element_backward_needs_no_gradient():
    x = tensor([3.0], requires_grad=True)
    (x * x).backward()
    assert x.grad.tolist() == [6.0]


def test_non_scalar_backward_without_gradient_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    message = "grad can be implicitly created only for scalar outputs"
    with pytest.raises(RuntimeError, match=message):
        (x * 2).backward()


def test_backward_with_wrong_gradient_shape_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(np.ones(3))


def test_backward_gradient_weights_the_output():
    x = tensor([1.0, 2.0], requires_grad=True)
    (x * x).backward(tensor([10.0, -1.0]))
    assert x.grad.tolist() == [20.0, -4.0]


def test_backward_on_a_leaf_accumulates_the_seed():
    x = tensor([1.0, 2.0], requires_grad=True)
    x.backward(np.array([3.0, 4.0]))
    assert x.grad.tolist() == [3.0, 4.0]


def test_backward_through_integer_tensor_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    counts = x.astype(np.int64)  # integers carry no gradient
    assert not counts.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        counts.sum().backward()


def test_gradients_accumulate_across_backward_calls():
    x = tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [2.0 + 3.0, 4.0 + 3.0]


def test_second_backward_without_retain_graph_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()


def test_retain_graph_allows_a_second_backward():
    x = tensor([1.0, 2.0], requires_grad=True)
    loss = (np.exp(x) * x).sum()
    loss.backward(retain_graph=True)
    loss.backward(retain_graph=True)
    single = np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0]))
    np.testing.assert_allclose(x.grad.numpy(), 2 * single, rtol=1e-12)


def test_a_shared_subexpression_gets_every_contribution():
    x = tensor([0.5, -1.5], requires_grad=True)
    a = x * 2
    b = a * a + a  # a reaches b twice: consumer counting must wait for both
    c = np.tanh(a) * b
    c.sum().backward()
    value = np.array([0.5, -1.5])

    def loss(point):
        twice = point * 2
        return float(np.sum(np.tanh(twice) * (twice * twice + twice)))

    np.testing.assert_allclose(x.grad.numpy(), finite_difference(loss, value), rtol=1e-6)


def test_gradients_only_reach_inputs_that_require_them():
    x = tensor([1.0, 2.0], requires_grad=True)
    constant = tensor([3.0, 4.0])
    (x * constant).sum().backward()
    assert x.grad.tolist() == [3.0, 4.0]
    assert constant.grad is None


# --- broadcasting ----------------------------------------------------------------------
def test_broadcast_gradients_are_summed_to_input_shapes():
    column = tensor(np.ones((3, 1)), requires_grad=True)
    row = tensor(np.arange(4.0), requires_grad=True)
    scale = tensor(2.0, requires_grad=True)
    (scale * (column + row)).sum().backward()
    assert column.grad.shape == (3, 1)
    np.testing.assert_array_equal(column.grad.numpy(), np.full((3, 1), 8.0))
    np.testing.assert_array_equal(row.grad.numpy(), np.full(4, 6.0))
    assert scale.grad.shape == ()
    assert scale.grad.item() == float(np.sum(np.ones((3, 1)) + np.arange(4.0)))


def test_float32_leaves_get_float32_gradients():
    x = tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = tensor(np.array([3.0], np.float64), requires_grad=True)
    (x * y).sum().backward()  # computed in float64 by NumPy's promotion
    assert x.grad.dtype == np.float32 and y.grad.dtype == np.float64
    assert x.grad.tolist() == [3.0, 3.0] and y.grad.tolist() == [3.0]


# --- graph control: no_grad, enable_grad, detach, requires_grad_ -----------------------
def test_no_grad_context_manager_records_nothing():
    x = tensor([1.0], requires_grad=True)
    with no_grad():
        assert not is_grad_enabled()
        y = x * 2
    assert is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None


def test_no_grad_decorator_records_nothing():
    @no_grad()
    def double(value):
        return value * 2, is_grad_enabled()

    y, enabled = double(tensor([1.0], requires_grad=True))
    assert not enabled and not y.requires_grad
    assert is_grad_enabled()


def test_enable_grad_inside_no_grad_and_restore_after_errors():
    x = tensor([1.0], requires_grad=True)
    with no_grad():
        with enable_grad():
            y = x * 2
        assert not is_grad_enabled()
    assert y.requires_grad
    with pytest.raises(KeyError):
        with no_grad():
            raise KeyError("inside")
    assert is_grad_enabled()


def test_detach_cuts_the_graph():
    x = tensor([2.0, 3.0], requires_grad=True)
    frozen = x.detach()
    assert frozen.is_leaf and not frozen.requires_grad
    assert frozen.numpy() is x.numpy()  # shares memory, as in PyTorch
    (x * frozen).sum().backward()
    assert x.grad.tolist() == [2.0, 3.0]  # d(x * c)/dx = c, not 2x


def test_requires_grad_():
    x = tensor([1.0, 2.0])
    assert x.requires_grad_() is x and x.requires_grad
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
    x.requires_grad_(False)
    assert not (x * x).requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf"):
        (tensor([1.0], requires_grad=True) * 2).requires_grad_(False)


# --- deep graphs -----------------------------------------------------------------------
def test_a_100000_op_chain_backward_has_no_recursion_error():
    x = tensor([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.00001
    y.sum().backward()
    factor = 1.00001**100_000
    np.testing.assert_allclose(y.numpy(), [factor, 2 * factor], rtol=1e-9)
    np.testing.assert_allclose(x.grad.numpy(), [factor, factor], rtol=1e-9)


def test_graphs_are_freed_by_reference_counting():
    # A node that referred back to its own output would leave every graph to the cyclic
    # GC: memory would grow between collections in a training loop.
    gc.disable()
    try:
        x = tensor(np.ones(3), requires_grad=True)
        y = np.exp(x * 2.0).sum()
        output = weakref.ref(y)
        del y
        assert output() is None
    finally:
        gc.enable()


# --- in-place checks -------------------------------------------------------------------
def test_modifying_a_saved_tensor_then_backward_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    hidden = x * 1.0
    squared = hidden * hidden  # saves hidden
    with no_grad():
        hidden += 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        squared.sum().backward()


def test_modifying_a_saved_constant_then_backward_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    weights = tensor([3.0, 4.0])
    product = x * weights  # saves weights
    weights[0] = 10.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        product.sum().backward()


def test_modifying_a_view_of_a_saved_tensor_then_backward_raises():
    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    weights = tensor([10.0, 20.0, 30.0])
    product = (x * weights).sum()  # saves weights
    front = weights[0:2]  # a NumPy view: it shares the buffer, so the version counter
    front += 100.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        product.backward()


def test_modifying_a_detached_alias_then_backward_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    loss = (x * x).sum()
    alias = x.detach()  # shares x's memory, as in PyTorch
    alias += 5.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_modifying_an_output_its_own_rule_saved_then_backward_raises():
    x = tensor([0.0, 1.0], requires_grad=True)
    y = np.exp(x)  # exp's VJP reads its output
    with no_grad():
        y += 1.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_views_of_parameters_do_not_trip_the_check_across_steps():
    w = tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    optimizer = optim.SGD([w], lr=0.01)
    inputs = np.array([1.0, -1.0])
    for _ in range(3):
        optimizer.zero_grad()
        loss = np.sum((inputs @ w.T) ** 2) + np.sum(w[0] * w.reshape(4)[1:3])
        loss.backward()
        optimizer.step()
    assert np.isfinite(w.numpy()).all()


def test_a_tracked_update_of_a_view_writes_its_base_as_numpy_and_pytorch_do():
    base = tensor([1.0, 2.0, 3.0])
    front = base[0:2]  # a view of base
    x = tensor([5.0, 7.0], requires_grad=True)
    front *= x  # into base too (a differentiable assignment), front a view of it again
    assert base.tolist() == [5.0, 14.0, 3.0]
    y = tensor([1.0, 1.0, 1.0], requires_grad=True)
    uses_base = (y * base).sum()  # saves base
    with no_grad():
        front += 1.0  # writes base's buffer, as NumPy does: the saved base changed
    assert base.tolist() == [6.0, 15.0, 3.0] and front.tolist() == [6.0, 15.0]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        uses_base.backward()


def test_a_tracked_update_of_the_base_of_a_view_keeps_the_views_gradient():
    base = tensor([1.0, 2.0, 3.0])
    front = base[0:2]
    x = tensor([5.0, 7.0], requires_grad=True)
    front *= x  # multiply's rule for x reads the old front values
    base += 10.0  # tracked (base has history now): a new buffer, the saved one unchanged
    front.sum().backward()
    assert x.grad.tolist() == [1.0, 2.0]  # as PyTorch


def test_optimizer_step_invalidates_graphs_built_before_it():
    w = tensor([1.0], requires_grad=True)
    optimizer = optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    stale = (w * w).sum()
    optimizer.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        stale.backward()


# --- differentiable __setitem__ --------------------------------------------------------
SETITEM_CASES = [
    ("int", (4,), 1),
    ("negative-step-slice", (5,), slice(None, None, -2)),
    ("row", (3, 4), 1),
    ("column", (3, 4), (slice(None), 2)),
    ("int-array", (3, 4), ([0, 2], [3, -1])),
    ("mask", (3, 4), np.arange(12).reshape(3, 4) % 5 == 0),
]


@pytest.mark.parametrize("name, shape, index", SETITEM_CASES, ids=[c[0] for c in SETITEM_CASES])
def test_setitem_on_non_leaf_is_differentiable(name, shape, index):
    rng = np.random.default_rng(0)
    x_value = rng.normal(size=shape)
    value_shape = np.zeros(shape)[index].shape
    v_value = rng.normal(size=value_shape[-1:] if value_shape else ())  # broadcast into place
    weights = rng.normal(size=shape)

    def forward(x, v):
        y = x * 1.5
        y[index] = np.tanh(v) * 2.0
        return y

    x, v = tensor(x_value, requires_grad=True), tensor(v_value, requires_grad=True)
    out = forward(x, v)
    np.testing.assert_allclose(out.numpy(), forward(x_value, v_value), rtol=1e-12)
    out.backward(weights)

    def loss_of_x(point):
        return float(np.sum(forward(point, v_value) * weights))

    def loss_of_v(point):
        return float(np.sum(forward(x_value, point) * weights))

    np.testing.assert_allclose(x.grad.numpy(), finite_difference(loss_of_x, x_value), atol=1e-7)
    np.testing.assert_allclose(v.grad.numpy(), finite_difference(loss_of_v, v_value), atol=1e-7)


def test_setitem_on_leaf_requiring_grad_raises():
    x = tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0] = 5.0


def test_differentiable_setitem_with_repeated_positions_raises():
    y = tensor([1.0, 2.0], requires_grad=True) * 1.0
    with pytest.raises(IndexError, match="repeated"):
        y[[0, 0]] = tensor([1.0, 2.0])


# --- optimizers against NumPy references of PyTorch's formulas -------------------------
# The loss 0.5 * |A p - b|^2 has gradient A^T (A p - b); its curvature varies by direction,
# so momentum and Adam's moments matter over a few steps.
A = np.array([[2.0, 0.5, 0.0], [0.0, 1.0, -1.0], [1.0, 0.0, 3.0], [0.5, -0.5, 1.0]])
B = np.array([1.0, -2.0, 0.5, 3.0])
START = np.array([0.3, -0.7, 1.1])
STEPS = 6


def quadratic_loss(p):
    residual = A @ p - B
    return 0.5 * np.sum(residual * residual)


def quadratic_gradient(p):
    return A.T @ (A @ p - B)


def run_optimizer(make_optimizer, dtype=np.float64):
    p = tensor(START.astype(dtype), requires_grad=True)
    optimizer = make_optimizer([p])
    trajectory = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        quadratic_loss(p).backward()
        optimizer.step()
        trajectory.append(p.numpy().copy())
    return trajectory


def reference_sgd(lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    """torch.optim.SGD's documented update (dampening 0)."""
    p, buffer, trajectory = START.copy(), None, []
    for _ in range(STEPS):
        g = quadratic_gradient(p) + weight_decay * p
        if momentum:
            buffer = g.copy() if buffer is None else momentum * buffer + g
            g = g + momentum * buffer if nesterov else buffer
        p = p - lr * g
        trajectory.append(p)
    return trajectory


def reference_adam(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    """torch.optim.Adam's documented update (amsgrad off, L2 weight decay)."""
    beta1, beta2 = betas
    p, m, v, trajectory = START.copy(), np.zeros(3), np.zeros(3), []
    for t in range(1, STEPS + 1):
        g = quadratic_gradient(p) + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
        trajectory.append(p)
    return trajectory


OPTIMIZER_CASES = [
    ("sgd", dict(lr=0.05), optim.SGD, reference_sgd),
    ("sgd-momentum", dict(lr=0.05, momentum=0.9), optim.SGD, reference_sgd),
    ("sgd-weight-decay", dict(lr=0.05, weight_decay=0.1), optim.SGD, reference_sgd),
    (
        "sgd-momentum-weight-decay",
        dict(lr=0.05, momentum=0.8, weight_decay=0.01),
        optim.SGD,
        reference_sgd,
    ),
    ("sgd-nesterov", dict(lr=0.05, momentum=0.9, nesterov=True), optim.SGD, reference_sgd),
    ("adam", dict(lr=0.1), optim.Adam, reference_adam),
    ("adam-betas", dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6), optim.Adam, reference_adam),
    ("adam-weight-decay", dict(lr=0.1, weight_decay=0.05), optim.Adam, reference_adam),
]


@pytest.mark.parametrize(
    "settings, optimizer_class, reference",
    [case[1:] for case in OPTIMIZER_CASES],
    ids=[case[0] for case in OPTIMIZER_CASES],
)
def test_optimizer_matches_pytorch_formula_step_by_step(settings, optimizer_class, reference):
    actual = run_optimizer(lambda params: optimizer_class(params, **settings))
    expected = reference(**settings)
    for step, (got, want) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14, err_msg=f"step {step}")


def test_optimizer_keeps_float32_parameters_float32():
    trajectory = run_optimizer(lambda params: optim.Adam(params, lr=0.1), dtype=np.float32)
    assert all(p.dtype == np.float32 for p in trajectory)
    np.testing.assert_allclose(trajectory[-1], reference_adam(lr=0.1)[-1], rtol=1e-4)


def test_zero_grad():
    p = tensor([1.0, 2.0], requires_grad=True)
    optimizer = optim.SGD([p], lr=0.1)
    (p * p).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    assert p.grad.tolist() == [0.0, 0.0]
    optimizer.zero_grad()
    assert p.grad is None


@pytest.mark.parametrize(
    "params, lr, message",
    [
        ([], 0.1, "empty parameter list"),
        ([tensor([1.0])], 0.1, "requires_grad=True"),
        ([tensor([1.0], requires_grad=True) * 2], 0.1, "leaf"),
        ([tensor([1.0], requires_grad=True)], -1.0, "learning rate"),
    ],
    ids=["empty", "no-grad", "non-leaf", "negative-lr"],
)
def test_optimizer_rejects_bad_arguments(params, lr, message):
    with pytest.raises(ValueError, match=message):
        optim.SGD(params, lr=lr)


# --- tracejit.grad and value_and_grad ---------------------------------------------------
def test_grad_of_numpy_function_returns_ndarray():
    x = np.array([1.0, -2.0, 0.5])
    gradient = grad(lambda value: np.sum(np.sin(value) * value))(x)
    assert type(gradient) is np.ndarray
    np.testing.assert_allclose(gradient, np.cos(x) * x + np.sin(x), rtol=1e-12)


def test_value_and_grad_returns_plain_value_and_gradient():
    x = np.array([1.0, 2.0])
    value, gradient = value_and_grad(lambda v: np.sum(v**3))(x)
    assert not hasattr(value, "requires_grad")
    assert float(value) == 9.0
    np.testing.assert_array_equal(gradient, [3.0, 12.0])


def test_grad_with_several_argnums():
    x, y = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    gx, gy = grad(lambda a, b: np.sum(a * a * b), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, 2 * x * y)
    np.testing.assert_array_equal(gy, x * x)


def test_grad_of_a_pytree_has_the_same_structure():
    params = {"w": np.array([[1.0, 2.0], [3.0, 4.0]]), "b": np.array([0.5, -0.5])}
    inputs = np.array([1.0, -1.0])

    def loss(tree):
        return np.sum(np.tanh(inputs @ tree["w"] + tree["b"]))

    gradient = grad(loss)(params)
    assert set(gradient) == {"w", "b"}
    for key in params:

        def loss_of_leaf(point, key=key):
            return float(loss({**params, key: point}))

        expected = finite_difference(loss_of_leaf, params[key])
        np.testing.assert_allclose(gradient[key], expected, rtol=1e-6, atol=1e-9)


def test_grad_of_nested_lists_and_tuples():
    tree = [np.array([1.0, 2.0]), (np.array(3.0),)]
    gradient = grad(lambda t: np.sum(t[0] * t[1][0]))(tree)
    assert isinstance(gradient, list) and isinstance(gradient[1], tuple)
    np.testing.assert_array_equal(gradient[0], [3.0, 3.0])
    assert float(gradient[1][0]) == 3.0


def test_grad_with_aux_and_unused_argument():
    def loss(x, unused):
        return np.sum(x * 2.0), {"doubled": x * 2.0}

    (value, aux), gradients = value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        np.array([1.0, 2.0]), np.array([5.0])
    )
    assert float(value) == 6.0
    assert type(aux["doubled"]) is np.ndarray and aux["doubled"].tolist() == [2.0, 4.0]
    np.testing.assert_array_equal(gradients[0], [2.0, 2.0])
    np.testing.assert_array_equal(gradients[1], [0.0])  # unused: zeros, as in JAX


def test_grad_refuses_integer_arguments_and_non_scalar_results():
    with pytest.raises(TypeError, match="floating point"):
        grad(lambda x: np.sum(x))(np.array([1, 2]))
    with pytest.raises(TypeError, match="scalar"):
        grad(lambda x: x * 2)(np.array([1.0, 2.0]))


def test_grad_works_inside_no_grad():
    with no_grad():
        gradient = grad(lambda x: np.sum(x * x))(np.array([3.0]))
    assert gradient.tolist() == [6.0]


# --- kink conventions (where finite differences cannot decide) -------------------------
def test_relu_gradient_at_zero_is_zero():
    x = tensor([-1.0, 0.0, 2.0], requires_grad=True)
    nn.relu(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]


def test_ties_share_the_gradient():
    x = tensor([1.0, 3.0, 3.0], requires_grad=True)
    np.max(x).backward()
    assert x.grad.tolist() == [0.0, 0.5, 0.5]
    a, b = tensor([2.0, 1.0], requires_grad=True), tensor([2.0, 0.0], requires_grad=True)
    np.maximum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 1.0] and b.grad.tolist() == [0.5, 0.0]


def test_stop_gradient_passes_the_value_and_blocks_the_gradient():
    from tracejit.tracer.ops import stop_gradient_p

    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2.0 + stop_gradient_p(x * x)
    np.testing.assert_allclose(y.numpy(), [3.0, 8.0, 15.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_cross_entropy_out_of_range_labels_raise_like_pytorch():
    logits = tensor(np.zeros((2, 3)), requires_grad=True)
    with pytest.raises(IndexError, match=r"labels must lie in \[0, 3\)"):
        nn.cross_entropy(logits, np.array([0, 3]))
    with pytest.raises(IndexError):
        nn.cross_entropy(logits, np.array([-1, 0]))


INDEXES = [
    (1,), (slice(None, None, -2),), (Ellipsis, 1), (None, slice(1, 3)),
    (np.array([0, 2, 2, -1]),),  # repeated and negative positions: gradients add up
    (np.array([[1, 0], [1, 1]]), slice(None)), (slice(None), np.array([3, 3, 0])),
    (np.array([True, False, True]),), (np.array([[True, False, True, False]] * 3),),
    (1, np.array([0, 0])), (np.array([0, 2]), np.array([1, 1])),
]


@pytest.mark.parametrize("index", INDEXES, ids=lambda index: repr(index)[:40])
def test_indexing_gradient_matches_the_primitive_plan(index):
    """Tensor indexing records one node and NumPy's indexing; its gradient equals the one
    the index plan's primitives (slice, flip, gather ...) give."""
    from tracejit.tracer.indexing import getitem

    data = np.arange(12.0).reshape(3, 4)
    rng = np.random.default_rng(0)
    fast = tensor(data, requires_grad=True)
    out = fast[index]
    weights = rng.normal(size=out.shape)
    (out * weights).sum().backward()
    reference = tensor(data, requires_grad=True)
    expected = getitem(reference, index)
    (expected * weights).sum().backward()
    np.testing.assert_array_equal(out.numpy(), data[index])
    np.testing.assert_allclose(fast.grad.numpy(), reference.grad.numpy(), rtol=1e-12)
