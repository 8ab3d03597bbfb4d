"""Adversarial 20d: eager Tensors with autograd and compiled functions on that tape, the way
PyTorch-style code uses them (training loops with ``p.data -= lr * p.grad``, models keeping
their parameters in nested containers, ``no_grad`` blocks, ``value_and_grad`` with aux).

Each test is the minimal repro of a failure found while porting such code; every reference
is computed without the code under test: the same function run eagerly on the Tensor tape
and, for gradients, central finite differences of the float64 NumPy function.
"""

from __future__ import annotations

import numpy as np
from real_model_checks import finite_differences

from tracejit import jit, no_grad, tensor, value_and_grad

EAGER_RTOL, EAGER_ATOL = 1e-11, 1e-13


# --- in-place updates through views ------------------------------------------------------
def test_inplace_update_of_a_slice_view_writes_through_to_its_base():
    # v = h[1:3]; v *= 2 changes h in NumPy and PyTorch; the Tensor rebound v to a new
    # buffer and left h (and its gradient) as before: h.sum() was 6 where NumPy says 9.
    x = tensor(np.arange(4.0), requires_grad=True)
    hidden = x * 1.0
    view = hidden[1:3]
    view *= 2
    plain = np.arange(4.0)
    plain[1:3] *= 2
    np.testing.assert_array_equal(hidden.numpy(), plain)
    (hidden * hidden).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * plain * np.array([1.0, 2.0, 2.0, 1.0]))


def test_writes_into_rows_of_a_buffer_reach_the_buffer_and_the_gradient():
    w = tensor(np.array([1.0, 2.0]), requires_grad=True)
    buffer = tensor(np.zeros((3, 2)))
    row = buffer[1]
    row += w * 3
    inner = buffer[1:][1]  # a view of a view
    inner[0] = w[1] * 5
    weights = np.arange(6.0).reshape(3, 2)
    (buffer * weights).sum().backward()
    np.testing.assert_array_equal(buffer.numpy(), [[0.0, 0.0], [3.0, 6.0], [10.0, 0.0]])
    np.testing.assert_allclose(w.grad.numpy(), [3 * weights[1, 0], 3 * weights[1, 1] + 5 *
                                                weights[2, 0]])


# --- no_grad inside a function compiled with gradients ---------------------------------
def scaled_by_a_constant_sum(w, x):
    with no_grad():
        scale = (w * w).sum()  # eagerly a constant: no gradient flows through it
    return (w * scale * x).sum()


def test_no_grad_block_inside_a_jit_function_blocks_the_gradient():
    # The trace recorded the block's operations like any others, so the compiled backward
    # differentiated through ``scale`` too (gradient 2 * w * x . w + scale * x).
    jitted = jit(scaled_by_a_constant_sum, cache="memory")
    x = np.array([0.5, -1.0, 2.0])
    for _ in range(3):
        w = tensor(np.array([1.5, 0.25, -0.75]), requires_grad=True)
        jitted(w, x).backward()
        expected = tensor(w.numpy(), requires_grad=True)
        scaled_by_a_constant_sum(expected, x).backward()
        np.testing.assert_allclose(expected.grad.numpy(), (w.numpy() ** 2).sum() * x)
        np.testing.assert_allclose(w.grad.numpy(), expected.grad.numpy(), rtol=EAGER_RTOL)


def test_no_grad_block_inside_jit_of_value_and_grad_blocks_the_gradient():
    jitted = jit(value_and_grad(scaled_by_a_constant_sum), cache="memory")
    w, x = np.array([1.5, 0.25, -0.75]), np.array([0.5, -1.0, 2.0])
    for _ in range(2):
        value, gradient = jitted(w, x)
        np.testing.assert_allclose(gradient, (w * w).sum() * x, rtol=EAGER_RTOL)
        np.testing.assert_allclose(value, scaled_by_a_constant_sum(w, x), rtol=EAGER_RTOL)


def stable_log_sum_exp(logits):
    return (np.log(np.exp(logits - logits.max().detach()).sum()) * 2).sum()


def test_detach_in_a_jit_function_compiles_not_an_internal_error():
    # x.detach() in the trace raised NumPy's AttributeError from inside tracejit: logged as
    # an internal error with a traceback. (Then it ran eagerly with its reason; since
    # adversarial 21d it compiles: tracejit.tracer.tensor_methods.)
    jitted = jit(stable_log_sum_exp, cache="memory")
    for _ in range(2):
        logits = tensor(np.array([1.0, 3.0, -2.0]), requires_grad=True)
        jitted(logits).backward()
        expected = tensor(logits.numpy(), requires_grad=True)
        stable_log_sum_exp(expected).backward()
        np.testing.assert_allclose(logits.grad.numpy(), expected.grad.numpy())
    stats = jitted.stats()
    assert stats["compiled_calls"] + stats["traced_calls"] == 2, stats["eager_reasons"]


# --- parameters kept in nested containers of a model object ---------------------------
class PairedLayers:
    """A model keeping ``(weight, bias)`` pairs in a list, as micrograd-style ports do."""

    def __init__(self, sizes, seed):
        rng = np.random.default_rng(seed)
        self.layers = [
            (tensor(rng.normal(size=(fan_in, fan_out)) / np.sqrt(fan_in), requires_grad=True),
             tensor(rng.normal(size=fan_out) * 0.1, requires_grad=True))
            for fan_in, fan_out in zip(sizes, sizes[1:])
        ]

    def parameters(self):
        return [param for layer in self.layers for param in layer]


def paired_loss(model, x, target):
    hidden = x
    for weight, bias in model.layers:
        hidden = np.tanh(hidden @ weight + bias)
    return ((hidden - target) ** 2).mean()


def test_tensors_in_tuples_in_a_list_attribute_are_inputs_with_gradients():
    # A Tensor inside a tuple inside a list attribute was frozen into the compiled code:
    # the result came back as a NumPy float (no gradient), and after an SGD step the
    # compiled call still computed with the first weights.
    rng = np.random.default_rng(0)
    compiled_model, eager_model = PairedLayers([3, 4, 2], 1), PairedLayers([3, 4, 2], 1)
    jitted = jit(paired_loss, cache="memory")
    for _ in range(3):
        x, target = rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
        compiled = jitted(compiled_model, x, target)
        eager = paired_loss(eager_model, x, target)
        compiled.backward()
        eager.backward()
        np.testing.assert_allclose(compiled.numpy(), eager.numpy(), rtol=EAGER_RTOL)
        for got, want in zip(compiled_model.parameters(), eager_model.parameters()):
            np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=EAGER_RTOL,
                                       atol=EAGER_ATOL)
        for model in (compiled_model, eager_model):
            for param in model.parameters():
                param.data -= 0.5 * param.grad
                param.grad = None
    assert jitted.stats()["compiled_calls"] >= 2


def test_nested_container_parameter_gradient_matches_finite_differences():
    model = PairedLayers([2, 3], 2)
    x, target = np.random.default_rng(3).normal(size=(4, 2)), np.ones((4, 3))
    jitted = jit(paired_loss, cache="memory")
    for _ in range(2):
        model.layers[0][0].grad = None
        jitted(model, x, target).backward()
    weight, bias = (param.numpy() for param in model.layers[0])

    def numpy_loss(value):
        plain = PairedLayers.__new__(PairedLayers)
        plain.layers = [(value, bias)]
        return paired_loss(plain, x, target)

    np.testing.assert_allclose(model.layers[0][0].grad.numpy(),
                               finite_differences(numpy_loss, weight), rtol=1e-6, atol=1e-8)


class Holder:
    pass


class Slotted:
    __slots__ = ("weight",)


def deep_attribute_loss(model, x):
    return (x @ model.block.inner.core.weight).sum()


def slotted_loss(model, x):
    return (x @ model.slotted.weight).sum()


def nested_loss(model, x):
    return (x @ model.blocks[0]["layers"][0]["weight"]).sum()


def test_tensor_parameters_past_the_scan_are_inputs_with_gradients():
    # A Tensor reached by a path the up-front scan does not walk (four attributes deep, an
    # object with __slots__, dicts and lists nested four deep) was frozen: compiled calls
    # kept its first value and returned NumPy floats without gradients.
    model = Holder()
    model.block, model.block.inner, model.block.inner.core = Holder(), Holder(), Holder()
    model.slotted = Slotted()
    model.blocks = [{"layers": [{}]}]
    x = np.arange(6.0).reshape(2, 3)
    for loss in (deep_attribute_loss, slotted_loss, nested_loss):
        weight = tensor(np.linspace(-1.0, 1.0, 6).reshape(3, 2), requires_grad=True)
        model.block.inner.core.weight = model.slotted.weight = weight
        model.blocks[0]["layers"][0]["weight"] = weight
        jitted = jit(loss, cache="memory")
        for _ in range(3):
            result = jitted(model, x)
            result.backward()
            np.testing.assert_allclose(result.numpy(), (x @ weight.numpy()).sum(),
                                       rtol=EAGER_RTOL)
            np.testing.assert_allclose(weight.grad.numpy(), np.broadcast_to(
                x.sum(axis=0)[:, None], (3, 2)), rtol=EAGER_RTOL)
            weight.data -= 0.5 * weight.grad
            weight.grad = None
        assert jitted.stats()["compiled_calls"] >= 2, loss.__name__


def deepest_loss(nested, x):
    return (x * nested[0][0][0][0][0][0][0]).sum()


def test_arrays_nested_past_the_limit_are_not_frozen():
    # Containers nested past with_inputs's depth came back as they were, so the arrays in
    # them were constants of the compiled code (ndarrays as well as Tensors).
    holder = Holder()
    holder.nested = [[[[[[[np.ones(3)]]]]]]]

    def through_an_attribute(x):
        return deepest_loss(holder.nested, x)

    jitted = jit(through_an_attribute, cache="memory")
    x = np.arange(3.0)
    for step in range(3):
        np.testing.assert_allclose(jitted(x), (2.0 ** step) * x.sum())
        holder.nested[0][0][0][0][0][0][0] *= 2


def loss_and_weight(w, x):
    return w, (w * x).sum()


def test_an_argument_returned_as_it_came_is_that_tensor():
    # The compiled call returned a copy on the compiled node (not a leaf, .grad None after
    # backward, an SGD step through it left the argument alone); eagerly it is ``w``.
    jitted = jit(loss_and_weight, cache="memory")
    x = np.array([1.0, -2.0, 0.5])
    for _ in range(3):
        w = tensor(np.array([0.5, 0.25, 2.0]), requires_grad=True)
        returned, loss = jitted(w, x)
        assert returned is w and returned.is_leaf
        loss.backward()
        np.testing.assert_allclose(returned.grad.numpy(), x)
    assert jitted.stats()["compiled_calls"] >= 2


class CountingModel:
    def __init__(self):
        self.weight = tensor(np.array([[1.0, -1.0], [0.5, 2.0]]), requires_grad=True)
        self.steps = 0

    @jit(cache="memory")
    def loss(self, x):
        self.steps += 1  # a step counter, a Python int
        return np.tanh(x @ self.weight).sum()


def test_a_step_counter_attribute_stays_an_int_and_compiles_with_gradients():
    # With gradients, the int written to self.steps was refused as "a value computed with
    # gradients" (every call eager); let through, compiled calls stored it as a Tensor.
    model, reference = CountingModel(), CountingModel()
    before = CountingModel.loss.stats()
    x = np.array([[0.5, -1.0], [2.0, 0.25]])
    for step in range(1, 4):
        model.loss(x).backward()
        CountingModel.loss.fn(reference, x).backward()
        assert type(model.steps) is int and model.steps == step
        np.testing.assert_allclose(model.weight.grad.numpy(), reference.weight.grad.numpy(),
                                   rtol=EAGER_RTOL)
    after = CountingModel.loss.stats()
    assert after["compiled_calls"] - before["compiled_calls"] >= 2, after


# --- value_and_grad of a function that writes into its argument -----------------------------
def shifted_square(x):
    x += 1.0  # NumPy writes the caller's array
    return (x * x).sum()


def doubled_middle_square(x):
    middle = x[1:3]
    middle *= 2.0  # through a view, into x
    return (x * x).sum()


def test_value_and_grad_of_a_function_writing_into_its_argument():
    # Eagerly the write raised PyTorch's leaf error where NumPy runs (x += 1), or missed x
    # (a view's write: value 14 where NumPy gives 29); jit(value_and_grad(f)) gave the
    # value but a zero gradient (taken with respect to the written x).
    for function in (shifted_square, doubled_middle_square):
        x = np.array([0.0, 1.0, -2.0, 0.5])
        expected_value = function(x.copy())
        expected_gradient = finite_differences(
            lambda value, function=function: function(value.copy()), x)
        value, gradient = value_and_grad(function)(x.copy())
        np.testing.assert_allclose(value, expected_value, rtol=EAGER_RTOL)
        np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-6, atol=1e-8)
        jitted = jit(value_and_grad(function), cache="memory")
        for _ in range(2):
            argument = x.copy()
            value, gradient = jitted(argument)
            np.testing.assert_allclose(value, expected_value, rtol=EAGER_RTOL)
            np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-6, atol=1e-8)
            written = x.copy()
            function(written)
            np.testing.assert_array_equal(argument, written)  # NumPy's write, as eagerly
        assert jitted.stats()["compiled_calls"] >= 1


# --- value_and_grad's aux -----------------------------------------------------------------
def loss_with_accuracy(w, x, labels):
    scores = x @ w
    accuracy = (np.argmax(scores, axis=1) == labels).mean()
    return (scores ** 2).mean(), {"accuracy": accuracy, "scores": scores}


def test_value_and_grad_aux_scalars_are_numpy_scalars_eager_as_compiled():
    # Eager value_and_grad returned a reduction in aux as a 0-d ndarray; NumPy (and
    # jit(value_and_grad(f))) give a np.float64.
    w, x, labels = np.eye(3)[:, :2], np.arange(6.0).reshape(2, 3), np.array([1, 0])
    (_, aux), _ = value_and_grad(loss_with_accuracy, has_aux=True)(w, x, labels)
    _, plain_aux = loss_with_accuracy(w, x, labels)
    assert type(aux["accuracy"]) is type(plain_aux["accuracy"]) is np.float64
    assert type(aux["scores"]) is np.ndarray and aux["scores"].shape == (2, 2)
    (_, compiled_aux), _ = jit(value_and_grad(loss_with_accuracy, has_aux=True),
                               cache="memory")(w, x, labels)
    assert type(compiled_aux["accuracy"]) is np.float64
