"""Compiled autograd against eager autograd and central finite differences.

A ``jit`` function called with Tensors that require grad traces forward and backward,
compiles both, and puts a ``CompiledNode`` on the tape whose backward is native code.
Every test here computes its reference without the code under test: the same Python
function run eagerly on the Tensor tape (``jitted.fn``), and central finite differences
of a float64 NumPy loss. Shown:

1. gradients of every differentiable primitive (generated from ``tracer.PRIMITIVES``,
   one sample call each) through ``jit``: equal to eager autograd and finite differences
   in float64, float32 gradients for float32 inputs, gradients of broadcast operands
   summed back to their shapes, one function over several pow2 buckets
   (``dynamic=True``) compiled once per bucket, and exact (erf) gelu in both precisions;
2. both directions of a data-dependent branch: right gradients on side exits, and after
   ``hot_exit`` exits both directions compiled with their backward;
3. compiled and eager pieces in one backward pass: eager ops around a compiled call,
   compiled calls feeding each other, shared inputs accumulating, ``retain_graph``,
   PyTorch's errors for a freed graph and for in-place changes of saved values,
   ``no_grad`` and arguments that need no gradient;
4. implicit Tensor parameters (attributes of a model object, module globals) get
   gradients;
5. ``tracejit.value_and_grad`` around a jit function and inside one (one program);
6. a small MLP trained with compiled forward+backward matches eager training step by
   step, and ``explain()`` shows its backward kernels and residual bytes, fewer than the
   arrays the eager tape keeps (``benchmarks/autograd_memory.py`` measures the large MLP).

Jit functions here use ``cache="memory"``: the functions generated per primitive share
their source, and the disk cache does not tell them apart (see
``test_disk_cache_tells_closures_over_different_primitives_apart``).
"""

from __future__ import annotations

import functools
import re
from collections import namedtuple

import numpy as np
import pytest

from tracejit import jit, nn, no_grad, optim, tensor, value_and_grad
from tracejit.runtime.autograd import OutputNode, PrimitiveNode
from tracejit.tracer import PRIMITIVES, bind
from tracejit.tracer.shapes import pow2_bucket

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
DIFFERENTIABLE = sorted(name for name, prim in PRIMITIVES.items() if prim.vjp is not None)

# Compiled vs eager in float64: transcendental kernels are within a few ulp of NumPy and
# sums may add in another order, so not bit-exact but far tighter than finite differences.
EAGER_RTOL, EAGER_ATOL = 1e-11, 1e-13
FD_RTOL, FD_ATOL = 1e-5, 1e-6
F32_RTOL, F32_ATOL = 1e-4, 1e-5  # compiled float32 vs eager float32
F32_VS_F64_RTOL = 2e-3  # float32 gradients vs the float64 reference


# --- helpers -----------------------------------------------------------------------------
def differentiated(values):
    """Positions of the floating-point array arguments (those that get gradients)."""
    return [position for position, value in enumerate(values)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f"]


def tape_gradients(function, values, wrt=None):
    """Call ``function`` on fresh Tensors (``requires_grad`` at positions ``wrt``), run
    ``backward`` on its scalar result; returns the result and one gradient per ``wrt``
    position (zeros where nothing was accumulated: a rule of ``None`` means zero)."""
    wrt = differentiated(values) if wrt is None else wrt
    arguments = [tensor(value.copy(), requires_grad=True) if position in wrt else value
                 for position, value in enumerate(values)]
    result = function(*arguments)
    assert result.size == 1 and result.requires_grad
    grad_fn = result.grad_fn
    result.backward()
    grads = [np.zeros_like(values[position]) if arguments[position].grad is None
             else arguments[position].grad.numpy() for position in wrt]
    return result, grad_fn, grads


def finite_difference(loss, values, index, eps=1e-6):
    """d loss / d values[index] by central differences (``loss`` returns a float)."""
    point = values[index]
    gradient = np.zeros_like(point, dtype=np.float64)
    for position in np.ndindex(point.shape):
        sides = []
        for step in (eps, -eps):
            moved = point.astype(np.float64)
            moved[position] += step
            sides.append(loss(*values[:index], moved, *values[index + 1:]))
        gradient[position] = (sides[0] - sides[1]) / (2 * eps)
    return gradient


def numpy_loss(function):
    """``function`` on plain float64 ndarrays, as a Python float (for finite differences)."""

    def loss(*values):
        with np.errstate(all="ignore"):
            return float(function(*values))

    return loss


def assert_ran_compiled(result):
    """The result's graph is the compiled backward (not an eager side exit or fallback)."""
    assert isinstance(result.grad_fn, OutputNode), (
        f"expected a compiled call on the tape, got grad_fn={result.grad_fn!r}")


def assert_gradients_match(function, jitted, values, calls=2, wrt=None, rtol=EAGER_RTOL,
                           atol=EAGER_ATOL):
    """``calls`` compiled calls give eager autograd's value and gradients (each call's
    result carries the compiled backward). Returns the last call's gradients."""
    expected, _, expected_grads = tape_gradients(function, values, wrt)
    grads = None
    for _ in range(calls):
        result, grad_fn, grads = tape_gradients(jitted, values, wrt)
        assert isinstance(grad_fn, OutputNode), f"ran eagerly: {jitted.stats()['eager_calls']}"
        np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=rtol, atol=atol)
        for number, (got, want) in enumerate(zip(grads, expected_grads)):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                       err_msg=f"gradient {number} vs eager autograd")
    return grads


def assert_finite_differences(loss, values, grads, wrt=None):
    wrt = differentiated(values) if wrt is None else wrt
    for position, gradient in zip(wrt, grads):
        np.testing.assert_allclose(gradient, finite_difference(loss, values, position),
                                   rtol=FD_RTOL, atol=FD_ATOL,
                                   err_msg=f"gradient of argument {position} vs finite "
                                           "differences")


# --- 1. every differentiable primitive -----------------------------------------------------
SAMPLE_RNG = np.random.default_rng(20240707)


def uniform(*shape, low=-2.0, high=2.0):
    return np.asarray(SAMPLE_RNG.uniform(low, high, size=shape), dtype=np.float64)


def positive(*shape):
    return uniform(*shape, low=0.5, high=2.0)


def away_from_zero(*shape):
    return positive(*shape) * SAMPLE_RNG.choice([-1.0, 1.0], size=shape)


def away_from_integers(*shape):
    """Values at least 0.1 from an integer: floor/ceil/mod have no jump within eps."""
    return np.floor(uniform(*shape, low=-3, high=3)) + uniform(*shape, low=0.1, high=0.9)


def away_from_halves(*shape):
    """Values at least 0.1 from an integer and from a half: rint has no jump within eps."""
    return np.floor(uniform(*shape, low=-3, high=3)) + uniform(*shape, low=0.1, high=0.4)


Case = namedtuple("Case", "id prim args params")

# One call per differentiable primitive, away from kinks, ties and poles. Index operands
# (gather, scatter_add) and where's condition are not floats: they get no gradient.
# A convolution with every parameter away from its default (stride, padding, dilation,
# groups); the weight gradient's output gradient has that convolution's output shape.
CONV_PARAMS = dict(kernel=(2, 3), strides=(2, 1), padding=((1, 0), (1, 2)), dilation=(1, 2),
                   groups=2)

PRIMITIVE_SAMPLES = {
    "abs": ((away_from_zero(2, 3),), {}),
    "add": ((uniform(2, 3), uniform(2, 3)), {}),
    "broadcast_to": ((uniform(3, 1),), dict(shape=(2, 3, 4))),
    "cast": ((uniform(2, 3),), dict(dtype=F64)),
    "ceil": ((away_from_integers(2, 3),), {}),
    "concatenate": ((uniform(2, 3), uniform(1, 3), uniform(4, 3)), dict(axis=0)),
    "cos": ((uniform(2, 3),), {}),
    "tan": ((uniform(2, 3, low=-1.2, high=1.2),), {}),
    "erf": ((uniform(2, 3),), {}),
    "exp": ((uniform(2, 3),), {}),
    "expm1": ((uniform(2, 3),), {}),
    "exp2": ((uniform(2, 3),), {}),
    "flip": ((uniform(3, 4),), dict(axes=(1,))),
    "floor": ((away_from_integers(2, 3),), {}),
    "floor_divide": ((away_from_integers(2, 3), np.ones((2, 3))), {}),
    "gather": ((uniform(4, 5), np.array([[3, -1], [0, 2]])), dict(axis=1)),
    "log": ((positive(2, 3),), {}),
    "log1p": ((uniform(2, 3, low=-0.5),), {}),
    "log2": ((positive(2, 3),), {}),
    "log10": ((positive(2, 3),), {}),
    "matmul": ((uniform(3, 4), uniform(4, 2)), {}),
    "conv2d": ((uniform(2, 4, 5, 6), uniform(4, 2, 2, 3)), CONV_PARAMS),
    "conv2d_weight_grad": ((uniform(2, 4, 5, 6), uniform(2, 4, 3, 5)), CONV_PARAMS),
    "max": ((uniform(3, 4),), dict(axes=(1,), keepdims=False)),
    "maximum": ((uniform(2, 3), uniform(2, 3)), {}),
    "min": ((uniform(3, 4),), dict(axes=(0,), keepdims=True)),
    "minimum": ((uniform(2, 3), uniform(2, 3)), {}),
    "mod": ((away_from_integers(2, 3), np.ones((2, 3))), {}),
    "multiply": ((uniform(2, 3), uniform(2, 3)), {}),
    "neg": ((uniform(2, 3),), {}),
    "pad": ((uniform(2, 3),), dict(config=((1, 2, 0), (0, 1, 2)))),
    "power": ((positive(2, 3), uniform(2, 3)), {}),
    "prod": ((away_from_zero(3, 4),), dict(axes=(1,), keepdims=False)),
    "reciprocal": ((away_from_zero(2, 3),), {}),
    "rint": ((away_from_halves(2, 3),), {}),
    "reshape": ((uniform(2, 6),), dict(shape=(3, 4))),
    "scatter_add": ((uniform(2, 3), np.array([0, 4, 0])), dict(axis=1, size=5)),
    "cumsum": ((uniform(3, 5),), {}),
    # fixed values: a draw here would move every later sample of SAMPLE_RNG
    "cumprod": ((np.array([[0.5, -1.5, 2.0, 0.75], [1.25, -0.5, 1.5, -2.0]]),), {}),
    "sign": ((away_from_zero(2, 3),), {}),
    "sin": ((uniform(2, 3),), {}),
    "slice": ((uniform(5, 7),), dict(starts=(1, 0), limits=(5, 7), steps=(2, 3))),
    "sliding_window": ((uniform(5, 7),), dict(axes=(0, 1), sizes=(2, 3), strides=(2, 1))),
    "sqrt": ((positive(2, 3),), {}),
    "square": ((uniform(2, 3),), {}),
    "subtract": ((uniform(2, 3), uniform(2, 3)), {}),
    "sum": ((uniform(3, 4),), dict(axes=(1,), keepdims=False)),
    "tanh": ((uniform(2, 3),), {}),
    "trunc": ((away_from_integers(2, 3),), {}),
    "transpose": ((uniform(2, 3, 4),), dict(perm=(2, 0, 1))),
    "true_divide": ((uniform(2, 3), away_from_zero(2, 3)), {}),
    "where": ((SAMPLE_RNG.random((2, 3)) < 0.5, uniform(2, 3), uniform(2, 3)), {}),
}

# Broadcast operands: the gradient of each is summed back to its own shape.
BROADCAST_CASES = [
    Case("add-(3,1)+(4,)", "add", (uniform(3, 1), uniform(4)), {}),
    Case("multiply-0d*(2,3)", "multiply", (uniform(), uniform(2, 3)), {}),
    Case("subtract-(2,3)-(1,3)", "subtract", (uniform(2, 3), uniform(1, 3)), {}),
    Case("true_divide-(3,1)/(1,4)", "true_divide", (uniform(3, 1), away_from_zero(1, 4)), {}),
    Case("power-(3,1)**(4,)", "power", (positive(3, 1), uniform(4)), {}),
    Case("maximum-(3,1),(4,)", "maximum", (uniform(3, 1), uniform(4)), {}),
    Case("where-(3,1),(4,),()", "where", (SAMPLE_RNG.random((3, 1)) < 0.5, uniform(4),
                                          uniform()), {}),
    Case("matmul-batched-broadcast", "matmul", (uniform(2, 1, 3, 4), uniform(5, 4, 2)), {}),
    Case("matmul-1d-2d", "matmul", (uniform(4), uniform(4, 3)), {}),
]

PRIMITIVE_CASES = [
    pytest.param(Case(name, name, *PRIMITIVE_SAMPLES[name]), id=name)
    for name in DIFFERENTIABLE
]


def weighted_primitive(prim, params):
    """``sum(prim(*operands) * weights)``: a scalar whose gradient reaches every element."""

    def weighted(weights, *operands):
        return (bind(prim, *operands, **params) * weights).sum()

    return weighted


@functools.cache
def jitted_case(case_id, name, params_key):
    """One jit function per case, shared by its float64 and float32 tests."""
    function = weighted_primitive(PRIMITIVES[name], dict(params_key))
    return function, jit(function, cache="memory")


def case_functions(case):
    return jitted_case(case.id, case.prim, tuple(sorted(case.params.items())))


def case_values(case, dtype=F64):
    """``(weights, *operands)`` with float operands in ``dtype``, weights shaped and typed
    like the primitive's output."""
    operands = [value.astype(dtype) if isinstance(value, np.ndarray) and value.dtype.kind == "f"
                else value for value in case.args]
    out = np.asarray(bind(PRIMITIVES[case.prim], *operands, **case.params))
    weights = np.random.default_rng(7).normal(size=out.shape).astype(out.dtype)
    return [weights, *operands]


def test_samples_cover_every_differentiable_primitive():
    assert set(PRIMITIVE_SAMPLES) == set(DIFFERENTIABLE), "add a sample for each new primitive"


def check_case_float64(case):
    function, jitted = case_functions(case)
    values = case_values(case)
    wrt = differentiated(values)[1:]  # not the weights
    grads = assert_gradients_match(function, jitted, values, wrt=wrt)
    assert_finite_differences(numpy_loss(function), values, grads, wrt)
    for position, gradient in zip(wrt, grads):
        assert gradient.shape == values[position].shape
    assert jitted.stats()["eager_calls"] == {}


@pytest.mark.parametrize("case", PRIMITIVE_CASES)
def test_primitive_gradient_compiled_matches_eager_and_finite_differences(case):
    check_case_float64(case)


@pytest.mark.parametrize("case", BROADCAST_CASES, ids=lambda case: case.id)
def test_broadcast_gradients_are_summed_back_to_each_operand(case):
    check_case_float64(case)


@pytest.mark.parametrize("case", PRIMITIVE_CASES)
def test_float32_inputs_get_float32_gradients(case):
    function, jitted = case_functions(case)
    values32 = case_values(case, F32)
    wrt = differentiated(values32)[1:]
    _, _, reference = tape_gradients(function, case_values(case), wrt)
    grads = assert_gradients_match(function, jitted, values32, wrt=wrt, rtol=F32_RTOL,
                                   atol=F32_ATOL)
    for position, gradient, want in zip(wrt, grads, reference):
        assert gradient.dtype == F32 == values32[position].dtype
        np.testing.assert_allclose(gradient, want, rtol=F32_VS_F64_RTOL, atol=F32_VS_F64_RTOL)


def bucketed_model(x, weights, scale, bias):
    """Rows of any count: ``scale`` and ``bias`` broadcast over them (their gradients sum
    over the dynamic dim) and a matmul mixes the columns."""
    hidden = np.tanh(x * scale + bias) @ np.array([[1.0, -0.5], [0.25, 2.0], [-1.0, 0.5]])
    return (hidden * weights[:, :2]).sum() + (np.exp(-x * x) * weights).sum() * 0.5


def test_dynamic_buckets_compile_once_each_and_give_right_gradients():
    jitted = jit(bucketed_model, dynamic=True, cache="memory")
    rng = np.random.default_rng(3)
    sizes = [3, 5, 8, 13]
    scale, bias = rng.normal(size=3), rng.normal(size=(1, 3))
    for _ in range(2):
        for rows in sizes:
            values = [rng.normal(size=(rows, 3)), rng.normal(size=(rows, 3)), scale, bias]
            wrt = [0, 2, 3]
            grads = assert_gradients_match(bucketed_model, jitted, values, calls=1, wrt=wrt)
            assert_finite_differences(numpy_loss(bucketed_model), values, grads, wrt)
    buckets = {pow2_bucket(rows) for rows in sizes}
    stats = jitted.stats()
    assert len(buckets) == 3
    assert stats["compiles"] == stats["variants"] == len(buckets)
    assert stats["compiled_calls"] == stats["calls"] == 2 * len(sizes)
    assert stats["eager_calls"] == {}


def softmax_classifier(logits, labels):
    return nn.cross_entropy(logits, labels)


def test_cross_entropy_over_a_dynamic_class_count_compiles_once_per_bucket():
    """The class count is a symbolic dim: cross_entropy's one-hot select builds its
    column indices from it (np.arange(classes, like=logits)), once per bucket."""
    jitted = jit(softmax_classifier, dynamic=True, cache="memory", fallback="raise")
    rng = np.random.default_rng(17)
    for classes in (5, 7, 6):  # one pow2 bucket of the class dim, rows in another
        values = [rng.normal(size=(11, classes)), rng.integers(0, classes, 11)]
        grads = assert_gradients_match(softmax_classifier, jitted, values, calls=1, wrt=[0])
        assert_finite_differences(numpy_loss(softmax_classifier), values, grads, [0])
    assert jitted.stats()["compiles"] == 1, jitted.explain()


def exact_gelu_loss(x, weights):
    return (nn.gelu(x, approximate="none") * weights).sum()


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_exact_gelu_compiled_matches_eager_value_and_gradient(dtype):
    """gelu(x, approximate="none") = 0.5 x (1 + erf(x / sqrt(2))) through ``jit``: value and
    gradient equal eager autograd's; float64 also equals finite differences, float32
    gradients the float64 ones. x spans erf's pieces (|x| / sqrt(2) up to about 7)."""
    jitted = jit(exact_gelu_loss, dynamic=True, cache="memory")
    rng = np.random.default_rng(21)
    for rows in (5, 7, 8):  # one pow2 bucket: one compile
        x = rng.uniform(-10, 10, size=(rows, 9))
        weights = rng.normal(size=(rows, 9))
        values64 = [x, weights]
        values = [value.astype(dtype) for value in values64]
        if dtype == F64:
            grads = assert_gradients_match(exact_gelu_loss, jitted, values, calls=1, wrt=[0])
            assert_finite_differences(numpy_loss(exact_gelu_loss), values, grads, wrt=[0])
        else:
            grads = assert_gradients_match(exact_gelu_loss, jitted, values, calls=1, wrt=[0],
                                           rtol=F32_RTOL, atol=F32_ATOL)
            _, _, reference = tape_gradients(exact_gelu_loss, values64, wrt=[0])
            assert grads[0].dtype == F32
            np.testing.assert_allclose(grads[0], reference[0], rtol=F32_VS_F64_RTOL,
                                       atol=F32_VS_F64_RTOL)
    stats = jitted.stats()
    assert stats["compiles"] == 1 and stats["eager_calls"] == {}


def row_products_loss(x, weights):
    return (x.prod(axis=1) * weights).sum()


def test_prod_gradient_at_zeros_is_the_product_of_the_others():
    """Rows with no zero, one zero and two zeros: eager and compiled gradients are the
    product of the other entries (finite, equal to finite differences), not out / x."""
    x = np.array([[1.5, -2.0, 3.0], [0.0, 2.0, -3.0], [0.0, 0.0, 3.0], [4.0, 0.5, 0.0]])
    weights = np.array([1.0, 2.0, 3.0, -1.0])
    jitted = jit(row_products_loss, cache="memory")
    with np.errstate(all="raise"):  # no division by zero, even in a branch not taken
        grads = assert_gradients_match(row_products_loss, jitted, [x, weights], wrt=[0])
    assert_finite_differences(numpy_loss(row_products_loss), [x, weights], grads, wrt=[0])
    np.testing.assert_array_equal(grads[0][2], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(grads[0][1], [2.0 * 2.0 * -3.0, 0.0, 0.0])


# --- 2. both branch directions -------------------------------------------------------------
def branchy(x, weights):
    if x.sum() > 0:
        y = x * x * weights
    else:
        y = np.sin(x) - x * weights
    return y.sum()


def test_both_branch_directions_compile_with_their_backward_after_hot_exit():
    jitted = jit(branchy, hot_exit=2, cache="memory")
    weights = np.array([0.5, -1.0, 2.0])
    positive_x, negative_x = np.array([0.5, 1.0, 1.5]), np.array([-0.5, -1.0, 0.25])
    loss = numpy_loss(branchy)

    def call(x):
        _, grad_fn, grads = tape_gradients(jitted, [x, weights], [0])
        _, _, expected = tape_gradients(branchy, [x, weights], [0])
        np.testing.assert_allclose(grads[0], expected[0], rtol=EAGER_RTOL, atol=EAGER_ATOL)
        assert_finite_differences(loss, [x, weights], grads, [0])
        return grad_fn

    assert isinstance(call(positive_x), OutputNode)  # traced and compiled
    assert isinstance(call(positive_x), OutputNode)
    assert not isinstance(call(negative_x), OutputNode)  # side exit: eager on the tape
    stats = jitted.stats()
    assert stats["eager_calls"] == {"side exit": 1}
    assert list(stats["side_exits"].values()) == [1]
    assert "x.sum() > 0" in next(iter(stats["side_exits"]))
    # The second exit is hot: the other direction is traced, compiled with its backward.
    assert isinstance(call(negative_x), OutputNode)
    for x in (negative_x, positive_x, negative_x, positive_x):
        assert isinstance(call(x), OutputNode)
    stats = jitted.stats()
    assert stats["eager_calls"] == {"side exit": 1}
    assert list(stats["side_exits"].values()) == [2]
    assert stats["paths"] == 2 and stats["variants"] == 1
    assert stats["compiled_calls"] == stats["calls"] - 1
    assert jitted.explain().count("backward:") == 2


# --- 3. compiled and eager pieces in one backward pass -------------------------------------
def squash(a, b):
    return np.tanh(a) * b


def column_energy(a):
    return (a * a).sum(axis=0)


JIT_SQUASH = jit(squash, cache="memory")
JIT_COLUMN_ENERGY = jit(column_energy, cache="memory")
X_VALUE = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
Y_VALUE = np.linspace(0.5, 2.0, 6).reshape(2, 3)


def pieces_gradients(build, first, second, **backward_options):
    """Gradients of ``build(first, second, x, y)`` for x, y leaves requiring grad."""
    x = tensor(X_VALUE.copy(), requires_grad=True)
    y = tensor(Y_VALUE.copy(), requires_grad=True)
    loss = build(first, second, x, y)
    loss.backward(**backward_options)
    return x.grad.numpy(), y.grad.numpy()


def assert_pieces_match_eager(build):
    compiled = pieces_gradients(build, JIT_SQUASH, JIT_COLUMN_ENERGY)
    eager = pieces_gradients(build, squash, column_energy)
    for got, want in zip(compiled, eager):
        np.testing.assert_allclose(got, want, rtol=EAGER_RTOL, atol=EAGER_ATOL)


def eager_around(first, second, x, y):
    inner = first(x * 2.0 - 0.5, np.exp(y))  # eager ops before the compiled call ...
    if first is JIT_SQUASH:
        assert_ran_compiled(inner)
    return (np.sin(inner) * y).sum() / 3.0  # ... and after it


def nested(first, second, x, y):
    energy = second(first(x, y))  # a compiled call inside another's inputs
    if first is JIT_SQUASH:
        assert_ran_compiled(energy)
    return (energy * np.array([1.0, -2.0, 3.0])).sum()


def shared_input(first, second, x, y):
    # x reaches the loss through two compiled calls and an eager op: gradients add up.
    return (first(x, y) * 2.0).sum() + second(x).sum() + (x * y).sum()


def same_function_twice(first, second, x, y):
    return (first(x, y) * first(y, x)).sum()


@pytest.mark.parametrize("build", [eager_around, nested, shared_input, same_function_twice],
                         ids=lambda build: build.__name__)
def test_compiled_and_eager_pieces_in_one_backward_pass(build):
    assert_pieces_match_eager(build)


def two_outputs(a, b, scale=2.0):
    return a * b * scale, (np.exp(a) - b).sum(), np.argmax(a)


def tree_argument(params, x):
    return (np.tanh(x @ params["w"]) * params["v"][0]).sum()


JIT_TWO_OUTPUTS = jit(two_outputs, cache="memory")
JIT_TREE_ARGUMENT = jit(tree_argument, cache="memory")


def both_outputs_used(a, b, compiled):
    product, total, index = (JIT_TWO_OUTPUTS if compiled else two_outputs)(a, b[0], scale=3.0)
    assert not index.requires_grad  # an integer output carries no gradient
    if compiled:
        assert_ran_compiled(product)
        assert_ran_compiled(total)
    return product.sum() * total


def pytree_and_keyword_arguments(a, b, compiled):
    function = JIT_TREE_ARGUMENT if compiled else tree_argument
    loss = function({"w": a[:, :2] * 1.0, "v": [b[0, :2]]}, x=np.ones((4, 3)))
    if compiled:
        assert_ran_compiled(loss)
    return loss


def same_tensor_twice_and_views(a, b, compiled):
    function = JIT_SQUASH if compiled else squash
    square = function(a, a)
    if compiled:
        assert_ran_compiled(square)
    return (square + function(a.T[:, 0], b[1]).sum()).sum()


@pytest.mark.parametrize("build", [both_outputs_used, pytree_and_keyword_arguments,
                                   same_tensor_twice_and_views],
                         ids=lambda build: build.__name__)
def test_outputs_and_arguments_of_every_shape(build):
    results = []
    for compiled in (False, True, True):
        a = tensor(np.array([[0.3, -0.2, 0.5], [1.1, 0.4, -0.6], [-0.7, 0.9, 0.2]]),
                   requires_grad=True)
        b = tensor(np.array([[0.5, 1.5, -1.0], [2.0, -0.5, 0.25]]), requires_grad=True)
        loss = build(a, b, compiled)
        loss.backward()
        results.append((loss.numpy(), a.grad.numpy(), b.grad.numpy()))
    for compiled_result in results[1:]:
        for got, want in zip(compiled_result, results[0]):
            np.testing.assert_allclose(got, want, rtol=EAGER_RTOL, atol=EAGER_ATOL)


def squash_sum(x, y):
    return squash(x, y).sum()


def test_requires_grad_is_part_of_the_entry_guard():
    jitted = jit(squash_sum, cache="memory")
    for wanted in ([0], [1], [0, 1], [0]):  # which arguments require grad
        assert_gradients_match(squash_sum, jitted, [X_VALUE, Y_VALUE], calls=1, wrt=wanted)
    stats = jitted.stats()
    assert stats["variants"] == 3 and stats["eager_calls"] == {}


def test_shared_input_gradients_match_finite_differences():
    grads = pieces_gradients(shared_input, JIT_SQUASH, JIT_COLUMN_ENERGY)
    loss = numpy_loss(lambda x, y: shared_input(squash, column_energy, x, y))
    assert_finite_differences(loss, [X_VALUE, Y_VALUE], grads)


def test_retain_graph_twice_doubles_gradients():
    x = tensor(X_VALUE.copy(), requires_grad=True)
    energy = JIT_COLUMN_ENERGY(JIT_SQUASH(x, Y_VALUE))
    assert_ran_compiled(energy)
    loss = energy.sum()
    loss.backward(retain_graph=True)
    once = x.grad.numpy().copy()
    loss.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), 2 * once, rtol=EAGER_RTOL)
    _, _, expected = tape_gradients(lambda x: column_energy(squash(x, Y_VALUE)).sum(),
                                    [X_VALUE])
    np.testing.assert_allclose(once, expected[0], rtol=EAGER_RTOL, atol=EAGER_ATOL)


def test_second_backward_without_retain_graph_raises_pytorchs_error():
    x = tensor(X_VALUE.copy(), requires_grad=True)
    loss = JIT_SQUASH(x, Y_VALUE).sum()  # the eager sum, then the compiled node
    loss.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second "
                                           "time .* Specify retain_graph=True"):
        loss.backward()
    compiled_only = JIT_COLUMN_ENERGY(tensor(X_VALUE.copy(), requires_grad=True))
    assert_ran_compiled(compiled_only)
    compiled_only.backward(np.ones(3))
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second"):
        compiled_only.backward(np.ones(3))


def test_no_grad_calls_record_nothing():
    x = tensor(X_VALUE.copy(), requires_grad=True)
    with no_grad():
        results = [JIT_SQUASH(x, Y_VALUE) for _ in range(2)]
    for result in results:
        assert result.grad_fn is None and not result.requires_grad
        np.testing.assert_allclose(result.numpy(), squash(X_VALUE, Y_VALUE), rtol=EAGER_RTOL)


def test_arguments_not_requiring_grad_get_no_grad():
    x = tensor(X_VALUE.copy(), requires_grad=True)
    y = tensor(Y_VALUE.copy())
    loss = JIT_SQUASH(x, y).sum()
    loss.backward()
    assert y.grad is None and not y.requires_grad
    np.testing.assert_allclose(x.grad.numpy(), (1 - np.tanh(X_VALUE) ** 2) * Y_VALUE,
                               rtol=EAGER_RTOL)


def test_argument_requiring_grad_that_the_result_ignores():
    jitted = jit(lambda used, ignored: (used * 2.0).sum(), cache="memory")
    used = tensor(np.ones(3), requires_grad=True)
    ignored = tensor(np.ones(3), requires_grad=True)
    result = jitted(used, ignored)
    assert_ran_compiled(result)
    result.backward()
    np.testing.assert_array_equal(used.grad.numpy(), [2.0, 2.0, 2.0])
    assert ignored.grad is None or not np.any(ignored.grad.numpy())


INPLACE_MESSAGE = "modified by an inplace operation"


def test_inplace_change_of_a_saved_input_raises_at_backward():
    x = tensor(X_VALUE.copy(), requires_grad=True)
    y = tensor(Y_VALUE.copy())  # needs no gradient, but the backward reads it
    loss = JIT_SQUASH(x, y)
    assert_ran_compiled(loss)
    y += 1.0
    with pytest.raises(RuntimeError, match=INPLACE_MESSAGE):
        loss.backward(np.ones((2, 3)))


def test_inplace_update_of_a_leaf_under_no_grad_raises_at_backward():
    x = tensor(X_VALUE.copy(), requires_grad=True)
    loss = JIT_COLUMN_ENERGY(x)
    assert_ran_compiled(loss)
    with no_grad():
        x -= 0.1  # an optimizer step before backward
    with pytest.raises(RuntimeError, match=INPLACE_MESSAGE):
        loss.backward(np.ones(3))


# --- 4. implicit Tensor parameters ---------------------------------------------------------
class TinyModel:
    """Weights as Tensor attributes; ``loss`` reads them through ``self``."""

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.w1 = tensor(rng.normal(size=(5, 4)) * 0.5, requires_grad=True)
        self.b1 = tensor(rng.normal(size=4) * 0.1, requires_grad=True)
        self.w2 = tensor(rng.normal(size=(4, 3)) * 0.5, requires_grad=True)
        self.frozen = tensor(rng.normal(size=3))  # a parameter that needs no gradient

    def parameters(self):
        return [self.w1, self.b1, self.w2]

    @jit(cache="memory")
    def loss(self, x, labels):
        hidden = np.tanh(x @ self.w1 + self.b1)
        return nn.cross_entropy(hidden @ self.w2 + self.frozen, labels)


def test_gradients_reach_tensor_attributes_of_a_model_object():
    rng = np.random.default_rng(11)
    compiled_model, eager_model = TinyModel(1), TinyModel(1)
    before = TinyModel.loss.stats()
    for _ in range(3):
        x, labels = rng.normal(size=(6, 5)), rng.integers(0, 3, 6)
        for model in (compiled_model, eager_model):
            for param in model.parameters():
                param.grad = None
        compiled = compiled_model.loss(x, labels)
        assert_ran_compiled(compiled)
        compiled.backward()
        eager = TinyModel.loss.fn(eager_model, x, labels)
        eager.backward()
        np.testing.assert_allclose(compiled.numpy(), eager.numpy(), rtol=EAGER_RTOL)
        for got, want in zip(compiled_model.parameters(), eager_model.parameters()):
            np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=EAGER_RTOL,
                                       atol=EAGER_ATOL)
        assert compiled_model.frozen.grad is None
        # An optimizer step in place: the next compiled call reads the new weights.
        with no_grad():
            for model in (compiled_model, eager_model):
                for param in model.parameters():
                    param -= 0.3 * param.grad
    after = TinyModel.loss.stats()
    # one variant at most: another test's TinyModel of these shapes may have compiled it
    assert after["compiles"] - before["compiles"] <= 1
    assert after["compiled_calls"] - before["compiled_calls"] == 3
    assert after["eager_calls"] == before["eager_calls"]


def test_model_attribute_gradients_match_finite_differences():
    model = TinyModel(2)
    x, labels = np.random.default_rng(12).normal(size=(6, 5)), np.array([0, 2, 1, 1, 0, 2])
    result = model.loss(x, labels)
    assert_ran_compiled(result)
    result.backward()
    values = [param.numpy().copy() for param in model.parameters()]

    def loss(w1, b1, w2):
        plain = TinyModel.__new__(TinyModel)
        plain.w1, plain.b1, plain.w2, plain.frozen = w1, b1, w2, model.frozen.numpy()
        return TinyModel.loss.fn(plain, x, labels)

    assert_finite_differences(numpy_loss(loss), values,
                              [param.grad.numpy() for param in model.parameters()])


GLOBAL_SCALE = tensor(np.array([0.5, -1.5, 2.0]), requires_grad=True)


def scaled_energy(x):
    return (np.sin(x) * GLOBAL_SCALE).sum()


def test_gradients_reach_a_global_tensor_parameter():
    jitted = jit(scaled_energy, cache="memory")
    x_value = np.array([0.3, -0.7, 1.1])
    for _ in range(2):
        GLOBAL_SCALE.grad = None
        x = tensor(x_value.copy(), requires_grad=True)
        result = jitted(x)
        assert_ran_compiled(result)
        result.backward()
        np.testing.assert_allclose(GLOBAL_SCALE.grad.numpy(), np.sin(x_value), rtol=EAGER_RTOL)
        np.testing.assert_allclose(x.grad.numpy(), np.cos(x_value) * GLOBAL_SCALE.numpy(),
                                   rtol=EAGER_RTOL)
    GLOBAL_SCALE.grad = None


# --- 5. tracejit.grad / value_and_grad ------------------------------------------------------
def mlp_loss(params, x, labels):
    """A two-layer MLP loss over a pytree of parameters (a dict holding a list)."""
    hidden = nn.relu(x @ params["w1"] + params["b1"])
    weight, bias = params["out"]
    return nn.cross_entropy(hidden @ weight + bias, labels)


def mlp_params(rng):
    return {"w1": rng.normal(size=(5, 4)), "b1": rng.normal(size=4) * 0.1,
            "out": [rng.normal(size=(4, 3)), rng.normal(size=3) * 0.1]}


def flat_params(params):
    return [params["w1"], params["b1"], *params["out"]]


def params_from_flat(w1, b1, w2, b2):
    return {"w1": w1, "b1": b1, "out": [w2, b2]}


def assert_tree_close(got, want, rtol=EAGER_RTOL, atol=EAGER_ATOL):
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want)
        for key in want:
            assert_tree_close(got[key], want[key], rtol, atol)
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for got_item, want_item in zip(got, want):
            assert_tree_close(got_item, want_item, rtol, atol)
    else:
        assert isinstance(got, np.ndarray) and got.dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def mlp_batches(count, seed=5):
    rng = np.random.default_rng(seed)
    params = mlp_params(rng)
    return params, [(rng.normal(size=(6, 5)), rng.integers(0, 3, 6)) for _ in range(count)]


def test_value_and_grad_around_a_jit_function():
    jitted = jit(mlp_loss, cache="memory")
    compiled_value_and_grad = value_and_grad(jitted, argnums=(0, 1))
    eager_value_and_grad = value_and_grad(mlp_loss, argnums=(0, 1))
    params, batches = mlp_batches(3)
    for number, (x, labels) in enumerate(batches, start=1):
        value, (param_grads, x_grad) = compiled_value_and_grad(params, x, labels)
        expected_value, (expected_params, expected_x) = eager_value_and_grad(params, x, labels)
        np.testing.assert_allclose(value, expected_value, rtol=EAGER_RTOL)
        assert_tree_close(param_grads, expected_params)
        assert_tree_close(x_grad, expected_x)
        assert jitted.stats()["compiled_calls"] == number  # forward and backward compiled
    assert jitted.stats()["eager_calls"] == {}
    loss = numpy_loss(lambda x, *flat: mlp_loss(params_from_flat(*flat), x, labels))
    assert_finite_differences(loss, [x, *flat_params(params)], [x_grad, *flat_params(
        param_grads)])


def test_value_and_grad_inside_jit_is_one_compiled_program():
    jitted = jit(value_and_grad(mlp_loss, argnums=(0, 1)), cache="memory")
    eager_value_and_grad = value_and_grad(mlp_loss, argnums=(0, 1))
    params, batches = mlp_batches(4)
    for x, labels in batches:
        value, (param_grads, x_grad) = jitted(params, x, labels)
        expected_value, (expected_params, expected_x) = eager_value_and_grad(params, x, labels)
        np.testing.assert_allclose(value, expected_value, rtol=EAGER_RTOL)
        assert_tree_close(param_grads, expected_params)
        assert_tree_close(x_grad, expected_x)
    stats = jitted.stats()
    # The first call is computed by its trace, or by the program when a decision the trace
    # took may not be eager's (the relu's mask); every later one by the program.
    assert stats["compiled_calls"] + stats["traced_calls"] == len(batches)
    assert stats["traced_calls"] <= 1 and stats["eager_calls"] == {}
    assert stats["compiles"] == stats["variants"] == stats["paths"] == 1
    explanation = jitted.explain()
    assert "backward:" not in explanation  # no separate backward program: one program
    assert explanation.count("matmul") >= 4  # two forward and (at least) two backward
    loss = numpy_loss(lambda x, *flat: mlp_loss(params_from_flat(*flat), x, labels))
    assert_finite_differences(loss, [x, *flat_params(params)], [x_grad, *flat_params(
        param_grads)])


def test_value_and_grad_inside_jit_with_a_single_argnum_and_a_list_pytree():
    def list_loss(weights, x):
        first, second = weights
        return (np.tanh(x @ first) @ second).sum()

    jitted = jit(value_and_grad(list_loss), cache="memory")
    rng = np.random.default_rng(9)
    weights = [rng.normal(size=(3, 4)), rng.normal(size=(4, 2))]
    for _ in range(2):
        x = rng.normal(size=(5, 3))
        value, grads = jitted(weights, x)
        expected_value, expected_grads = value_and_grad(list_loss)(weights, x)
        np.testing.assert_allclose(value, expected_value, rtol=EAGER_RTOL)
        assert_tree_close(grads, expected_grads)
    assert jitted.stats()["compiled_calls"] == 1
    loss = numpy_loss(lambda *flat: list_loss(list(flat), x))
    assert_finite_differences(loss, weights, grads)


# --- 6. a small MLP trained compiled vs eager ----------------------------------------------
def train_loss(x, labels, w1, b1, w2, b2):
    hidden = nn.relu(x @ w1 + b1)
    return nn.cross_entropy(hidden @ w2 + b2, labels)


def test_mlp_training_compiled_matches_eager_step_by_step():
    rng = np.random.default_rng(0)
    initial = [rng.normal(size=(16, 32)) * 0.3, np.zeros(32), rng.normal(size=(32, 4)) * 0.3,
               np.zeros(4)]
    batches = []
    for _ in range(6):
        x = rng.normal(size=(32, 16))
        batches.append((x, np.argmax(x[:, :4], axis=1)))  # labels it can learn
    jitted = jit(train_loss, cache="memory")
    runs = {}
    for name, function in (("eager", train_loss), ("compiled", jitted)):
        params = [tensor(value.copy(), requires_grad=True) for value in initial]
        optimizer = optim.SGD(params, lr=0.5)
        losses = []
        for x, labels in batches:
            optimizer.zero_grad()
            loss = function(x, labels, *params)
            if function is jitted:
                assert_ran_compiled(loss)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.numpy()))
        runs[name] = losses, [param.numpy() for param in params]
    eager_losses, eager_params = runs["eager"]
    compiled_losses, compiled_params = runs["compiled"]
    np.testing.assert_allclose(compiled_losses, eager_losses, rtol=0, atol=1e-10)
    assert eager_losses[-1] < eager_losses[0]  # it does train
    for got, want in zip(compiled_params, eager_params):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    stats = jitted.stats()
    assert stats["compiles"] == 1 and stats["compiled_calls"] == len(batches)


def eager_tape_bytes(result, inputs):
    """Bytes of the arrays eager autograd keeps for ``result``'s backward (every node's
    primals and output, once each), leaving out the ``inputs``."""
    held, seen, stack = {}, set(), [result.grad_fn]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for array in (*node.primals, node.out):
            if isinstance(array, np.ndarray) and not any(array is value for value in inputs):
                held[id(array)] = array.nbytes
        stack += [parent for parent in node.parents if isinstance(parent, PrimitiveNode)]
    return sum(held.values())


def test_explain_shows_the_backward_and_residuals_smaller_than_the_eager_tape():
    rng = np.random.default_rng(4)
    values = [rng.normal(size=(32, 16)), rng.integers(0, 4, 32), rng.normal(size=(16, 32)),
              rng.normal(size=32), rng.normal(size=(32, 4)), rng.normal(size=4)]
    params = [tensor(value, requires_grad=True) for value in values[2:]]
    jitted = jit(train_loss, cache="memory")
    assert_ran_compiled(jitted(*values[:2], *params))
    explanation = jitted.explain()
    assert re.search(r"backward: \d+ kernel\(s\): .*matmul", explanation), explanation
    saved = re.search(r"the forward saves (\d+) bytes of residuals", explanation)
    assert saved, explanation
    eager = train_loss(*values[:2], *params)
    inputs = [values[0], values[1], *(param.data for param in params)]
    assert 0 < int(saved.group(1)) <= eager_tape_bytes(eager, inputs)


# --- a hazard of generating jit functions from a table --------------------------------------
def make_unary_loss(operation):
    def unary_loss(x):
        return operation(x).sum()

    return unary_loss


def test_disk_cache_tells_closures_over_different_primitives_apart():
    x_value = np.array([0.2, -0.4, 0.9])
    for operation, derivative in ((np.sin, np.cos), (np.exp, np.exp)):
        jitted = jit(make_unary_loss(operation))  # default cache: memory and disk
        x = tensor(x_value.copy(), requires_grad=True)
        result = jitted(x)
        result.backward()
        np.testing.assert_allclose(result.numpy(), operation(x_value).sum(), rtol=EAGER_RTOL)
        np.testing.assert_allclose(x.grad.numpy(), derivative(x_value), rtol=EAGER_RTOL)
