"""The op table against NumPy.

Generated from ``tracer.PRIMITIVES`` and the NumPy tables of ``tracejit.tracer.numpy_api``:

* every primitive has every rule (implementation, shape/dtype rule, kind, VJP arity);
* every op computes what NumPy computes - same values (NaNs equal), dtype and shape -
  called three ways: ``bind(prim, ...)`` on ndarrays, the NumPy API on ``tracejit.Tensor``
  and the primitive's ``abstract_eval`` on abstract values (Python scalars weak, NEP 50),
  across float32, float64, int32, int64 and bool and shapes from 0-d and size-0 to
  broadcasting pairs;
* every differentiable primitive and every composite (``tracejit.nn``, ``numpy_api``)
  has gradients equal to central finite differences in float64, summed back to the input
  shape under broadcasting, with float32 gradients for float32 inputs.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import sys
import types
from collections import namedtuple

import numpy as np
import pytest

from tracejit import Tensor, nn, tensor
from tracejit.tracer import PRIMITIVES, UnsupportedError, bind, numpy_api, ops, ufunc_calls
from tracejit.tracer.abstract import abstractify

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
DTYPES = [F32, F64, I32, I64, BOOL]
KINDS = {"pointwise", "reduction", "structural", "index", "matmul", "conv", "creation",
         "control", "scan"}


# --- helpers ---------------------------------------------------------------------------
def shape_id(shape):
    return "x".join(map(str, shape)) if shape else "0d"


def pair_id(pair):
    return "@".join(shape_id(shape) for shape in pair)


def make_array(shape, dtype, seed=0, specials=False):
    """Deterministic test data: floats in [-3, 3] (with NaN, +-inf and -0.0 when
    ``specials`` and there is room), integers in [-4, 4], booleans half true."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    if dtype.kind == "f":
        values = rng.uniform(-3.0, 3.0, size)
        if specials and size >= 7:
            values[:4] = [np.nan, np.inf, -np.inf, -0.0]
            rng.shuffle(values)
    elif dtype.kind in "iu":
        values = rng.integers(-4, 5, size)
    else:
        values = rng.random(size) < 0.5
    return values.astype(dtype).reshape(shape)


def as_tensors(values):
    return [tensor(value) if isinstance(value, np.ndarray) else value for value in values]


def numpy_result(function, *args, **kwargs):
    """NumPy's result, or the exception NumPy raises (warnings silenced)."""
    try:
        with np.errstate(all="ignore"):
            return function(*args, **kwargs), None
    except Exception as error:  # noqa: BLE001 - any NumPy refusal is a result to match
        return None, error


def assert_same(actual, expected, rtol=0.0):
    """Equal to NumPy's ``expected``: same dtype and shape, equal values (NaNs equal);
    within ``rtol`` where the op is composed rather than NumPy's own kernel."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for actual_item, expected_item in zip(actual, expected):
            assert_same(actual_item, expected_item, rtol)
        return
    if isinstance(actual, Tensor):
        actual = actual.numpy()
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype}, NumPy gives {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, NumPy gives {expected.shape}"
    if rtol:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


def assert_abstract_matches(prim, args, params, expected):
    """The shape/dtype rule on abstract values predicts the concrete result."""
    aval = prim.abstract_eval(*(abstractify(arg) for arg in args), **params)
    expected = np.asarray(expected)
    assert (tuple(aval.shape), aval.dtype) == (expected.shape, expected.dtype)


def check_primitive_call(prim, args, params, reference, rtol=0.0):
    """``bind`` on ndarrays and on Tensors equals ``reference(*args)``; the rule agrees."""
    with np.errstate(all="ignore"):
        expected = reference(*args)
        result = bind(prim, *args, **params)
        # ``like`` lends the Tensor handler to calls without array operands (creation).
        tensor_result = bind(prim, *as_tensors(args), like=tensor(0), **params)
    assert not isinstance(result, Tensor)
    assert_same(result, expected, rtol)
    assert isinstance(tensor_result, Tensor)
    assert_same(tensor_result, expected, rtol)
    assert_abstract_matches(prim, args, params, expected)


# --- samples: one valid call per primitive ---------------------------------------------
# Inputs are float64 and chosen away from kinks, ties and poles, so the same samples
# serve the rule checks and the finite-difference gradient checks.
SAMPLE_RNG = np.random.default_rng(20240601)


def uniform(*shape, low=-2.0, high=2.0):
    return np.array(SAMPLE_RNG.uniform(low, high, size=shape), dtype=np.float64)


def positive(*shape):
    return uniform(*shape, low=0.5, high=2.0)


def away_from_zero(*shape):
    return positive(*shape) * SAMPLE_RNG.choice([-1.0, 1.0], size=shape)


def integers(*shape, low=-9, high=10):
    return SAMPLE_RNG.integers(low, high, size=shape)


def mask(*shape):
    return SAMPLE_RNG.random(shape) < 0.5


Call = namedtuple("Call", "args params")

# A convolution with every parameter away from its default (stride, padding, dilation,
# groups); the weight gradient's output gradient has that convolution's output shape.
CONV_PARAMS = dict(kernel=(2, 3), strides=(2, 1), padding=((1, 0), (1, 2)), dilation=(1, 2),
                   groups=2)

SAMPLES = {
    "full": Call((), dict(shape=(2, 3), value=1.5, dtype=F64)),
    "iota": Call((), dict(length=5, dtype=I64)),
    "reshape": Call((uniform(2, 6),), dict(shape=(3, 4))),
    "transpose": Call((uniform(2, 3, 4),), dict(perm=(2, 0, 1))),
    "broadcast_to": Call((uniform(3, 1),), dict(shape=(2, 3, 4))),
    "slice": Call((uniform(5, 7),), dict(starts=(1, 0), limits=(5, 7), steps=(2, 3))),
    "pad": Call((uniform(2, 3),), dict(config=((1, 2, 0), (0, 1, 2)))),
    "flip": Call((uniform(3, 4),), dict(axes=(1,))),
    "sliding_window": Call((uniform(5, 6),), dict(axes=(0, 1), sizes=(2, 3), strides=(2, 1))),
    "concatenate": Call((uniform(2, 3), uniform(1, 3), uniform(4, 3)), dict(axis=0)),
    "gather": Call((uniform(4, 5), np.array([[3, -1], [0, 2]])), dict(axis=1)),
    "scatter_add": Call((uniform(2, 3), np.array([0, 4, 0])), dict(axis=1, size=5)),
    "cumsum": Call((uniform(3, 5),), {}),
    # fixed values: a draw here would move every later sample of SAMPLE_RNG
    "cumprod": Call((np.array([[0.5, -1.5, 2.0, 0.75], [1.25, -0.5, 1.5, -2.0]]),), {}),
    "matmul": Call((uniform(3, 4), uniform(4, 2)), {}),
    "conv2d": Call((uniform(2, 4, 5, 6), uniform(4, 2, 2, 3)), CONV_PARAMS),
    "conv2d_weight_grad": Call((uniform(2, 4, 5, 6), uniform(2, 4, 3, 5)), CONV_PARAMS),
    "neg": Call((uniform(2, 3),), {}),
    "abs": Call((away_from_zero(2, 3),), {}),
    "sign": Call((away_from_zero(2, 3),), {}),
    "exp": Call((uniform(2, 3),), {}),
    "expm1": Call((uniform(2, 3),), {}),
    "exp2": Call((uniform(2, 3),), {}),
    "log": Call((positive(2, 3),), {}),
    "log1p": Call((uniform(2, 3, low=-0.5),), {}),
    "log2": Call((positive(2, 3),), {}),
    "log10": Call((positive(2, 3),), {}),
    "sqrt": Call((positive(2, 3),), {}),
    "square": Call((uniform(2, 3),), {}),
    "reciprocal": Call((away_from_zero(2, 3),), {}),
    "tanh": Call((uniform(2, 3),), {}),
    "sin": Call((uniform(2, 3),), {}),
    "cos": Call((uniform(2, 3),), {}),
    "tan": Call((uniform(2, 3, low=-1.2, high=1.2),), {}),
    "erf": Call((uniform(2, 3),), {}),
    "floor": Call((uniform(2, 3),), {}),
    "ceil": Call((uniform(2, 3),), {}),
    "rint": Call((uniform(2, 3, low=-3, high=3),), {}),
    "trunc": Call((uniform(2, 3, low=-3, high=3),), {}),
    "isnan": Call((uniform(2, 3),), {}),
    "isinf": Call((uniform(2, 3),), {}),
    "isfinite": Call((uniform(2, 3),), {}),
    "logical_not": Call((uniform(2, 3),), {}),
    "add": Call((uniform(2, 3), uniform(2, 3)), {}),
    "subtract": Call((uniform(2, 3), uniform(2, 3)), {}),
    "multiply": Call((uniform(2, 3), uniform(2, 3)), {}),
    "true_divide": Call((uniform(2, 3), away_from_zero(2, 3)), {}),
    "floor_divide": Call((uniform(2, 3), positive(2, 3)), {}),
    "mod": Call((uniform(2, 3), positive(2, 3)), {}),
    "power": Call((positive(2, 3), uniform(2, 3)), {}),
    "maximum": Call((uniform(2, 3), uniform(2, 3)), {}),
    "minimum": Call((uniform(2, 3), uniform(2, 3)), {}),
    "equal": Call((uniform(2, 3), uniform(2, 3)), {}),
    "not_equal": Call((uniform(2, 3), uniform(2, 3)), {}),
    "less": Call((uniform(2, 3), uniform(2, 3)), {}),
    "less_equal": Call((uniform(2, 3), uniform(2, 3)), {}),
    "greater": Call((uniform(2, 3), uniform(2, 3)), {}),
    "greater_equal": Call((uniform(2, 3), uniform(2, 3)), {}),
    "logical_and": Call((uniform(2, 3), uniform(2, 3)), {}),
    "logical_or": Call((uniform(2, 3), uniform(2, 3)), {}),
    "bitwise_and": Call((integers(2, 3), integers(2, 3)), {}),
    "bitwise_or": Call((integers(2, 3), integers(2, 3)), {}),
    "bitwise_xor": Call((integers(2, 3), integers(2, 3)), {}),
    "invert": Call((integers(2, 3),), {}),
    "left_shift": Call((integers(2, 3), integers(2, 3, low=0, high=40)), {}),
    "right_shift": Call((integers(2, 3), integers(2, 3, low=0, high=70)), {}),
    "where": Call((mask(2, 3), uniform(2, 3), uniform(2, 3)), {}),
    "cast": Call((uniform(2, 3),), dict(dtype=F64)),
    "stop_gradient": Call((uniform(2, 3),), {}),
    "sum": Call((uniform(3, 4),), dict(axes=(1,), keepdims=False)),
    "prod": Call((away_from_zero(3, 4),), dict(axes=(1,), keepdims=False)),
    "max": Call((uniform(3, 4),), dict(axes=(1,), keepdims=False)),
    "min": Call((uniform(3, 4),), dict(axes=(0,), keepdims=True)),
    "any": Call((uniform(3, 4),), dict(axes=(1,), keepdims=False)),
    "all": Call((uniform(3, 4),), dict(axes=(0, 1), keepdims=True)),
    "argmax": Call((uniform(3, 4),), dict(axis=1, keepdims=False)),
    "argmin": Call((uniform(3, 4),), dict(axis=0, keepdims=True)),
}

def _running_sum(x):
    total = x[0] * 0.0
    for t in range(x.shape[0]):
        total = total + x[t]
    return total


def _loop_sample():
    """A captured loop (over a dynamic length) and the operands its equation takes."""
    from tracejit.tracer.tracing import trace

    x = np.linspace(-1.0, 1.0, 60).reshape(20, 3)
    graph = trace(_running_sum, x, dynamic=True).graph
    eqn = next(eqn for eqn in graph.equations if eqn.prim.name == "loop")
    return Call((x[0] * 0.0 + x[0], x), eqn.params_dict)


SAMPLES["loop"] = _loop_sample()

DIFFERENTIABLE = sorted(name for name, prim in PRIMITIVES.items() if prim.vjp is not None)
NON_DIFFERENTIABLE = sorted(name for name, prim in PRIMITIVES.items() if prim.vjp is None)


# --- every primitive has every rule ----------------------------------------------------
def test_samples_cover_the_op_table():
    assert set(SAMPLES) == set(PRIMITIVES), "add a sample call for each new primitive"


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_primitive_has_every_rule(name):
    prim = PRIMITIVES[name]
    args, _ = SAMPLES[name]
    assert prim.name == name
    assert prim.kind in KINDS
    assert callable(prim.impl)
    assert callable(prim.abstract_eval)
    if isinstance(prim.impl, np.ufunc):
        assert prim.impl.nin == len(args)
    if prim.vjp is None:
        assert not prim.differentiable
    elif callable(prim.vjp):
        # A variadic primitive: one rule that is told which argument it differentiates.
        assert "argnum" in inspect.signature(prim.vjp).parameters
    else:
        assert isinstance(prim.vjp, tuple)
        assert len(prim.vjp) == len(args), "one VJP rule (or None) per argument"
        assert all(rule is None or callable(rule) for rule in prim.vjp)


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_abstract_eval_predicts_impl_on_sample(name):
    prim = PRIMITIVES[name]
    args, params = SAMPLES[name]
    assert_abstract_matches(prim, args, params, prim.impl(*args, **params))


@pytest.mark.parametrize("ufunc", list(numpy_api.UFUNCS), ids=lambda ufunc: ufunc.__name__)
def test_ufunc_table_maps_to_registered_primitives(ufunc):
    prim = numpy_api.UFUNCS[ufunc]
    assert PRIMITIVES.get(prim.name) is prim


@pytest.mark.parametrize("name", NON_DIFFERENTIABLE)
def test_non_differentiable_output_records_no_graph(name):
    prim = PRIMITIVES[name]
    args, params = SAMPLES[name]
    inputs = [  # (integers cannot require grad: the bitwise ops' samples)
        tensor(arg, requires_grad=arg.dtype.kind == "f") if isinstance(arg, np.ndarray) else arg
        for arg in args
    ]
    result = bind(prim, *inputs, like=tensor(0.0), **params)
    assert isinstance(result, Tensor)
    assert not result.requires_grad and result.grad_fn is None


# --- ufuncs: bind, the NumPy API on Tensors, and the shape/dtype rule ------------------
UNARY_UFUNCS = [ufunc for ufunc in numpy_api.UFUNCS if ufunc.nin == 1]
BINARY_UFUNCS = [ufunc for ufunc in numpy_api.UFUNCS if ufunc.nin == 2 and ufunc is not np.matmul]
UNARY_SHAPES = [(), (0,), (3, 0), (1,), (7,), (5, 3)]
BINARY_SHAPES = [
    ((), ()),
    ((7,), (7,)),
    ((5, 3), (5, 3)),
    ((3, 1), (4,)),
    ((), (2, 3)),
    ((0,), (1,)),
    ((3, 0), (3, 1)),
    ((1,), (7,)),
]
BINARY_DTYPES = [(dtype, dtype) for dtype in DTYPES] + [
    (F32, F64),
    (F32, I32),
    (I32, I64),
    (BOOL, I32),
    (I64, F32),
]
PYTHON_SCALARS = [2, -1, 2.5, True]


def check_ufunc(ufunc, *operands):
    """One ufunc call three ways against NumPy; NumPy's refusals must be refused too."""
    prim = numpy_api.UFUNCS[ufunc]
    expected, error = numpy_result(ufunc, *operands)
    tensors = as_tensors(operands)
    if error is not None:
        with pytest.raises(type(error)), np.errstate(all="ignore"):
            bind(prim, *operands)
        with pytest.raises(type(error)), np.errstate(all="ignore"):
            ufunc(*tensors)
        if isinstance(error, TypeError):  # a dtype NumPy has no loop for: the rule says so
            with pytest.raises(TypeError):
                prim.abstract_eval(*(abstractify(value) for value in operands))
        return
    with np.errstate(all="ignore"):
        result = bind(prim, *operands)
        tensor_result = ufunc(*tensors)
    assert_same(result, expected)
    assert isinstance(tensor_result, Tensor)
    assert_same(tensor_result, expected)
    assert_abstract_matches(prim, operands, {}, expected)


def _nonnegative_exponent(ufunc, operands):
    # NumPy refuses integers to negative integer powers; test the values it accepts.
    if ufunc is np.power and isinstance(operands[1], np.ndarray) and operands[1].dtype.kind in "iu":
        return operands[0], np.abs(operands[1])
    return operands


def _unary_cases():
    for ufunc in UNARY_UFUNCS:
        for dtype in DTYPES:
            if ufunc is np.fabs and dtype.kind != "f":
                continue  # test_fabs_of_integers_is_float_like_numpy
            for shape in UNARY_SHAPES:
                yield pytest.param(
                    ufunc, dtype, shape, id=f"{ufunc.__name__}-{dtype}-{shape_id(shape)}"
                )


@pytest.mark.parametrize("ufunc, dtype, shape", list(_unary_cases()))
def test_unary_ufunc_matches_numpy(ufunc, dtype, shape):
    check_ufunc(ufunc, make_array(shape, dtype, specials=True))


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=pair_id)
@pytest.mark.parametrize("dtypes", BINARY_DTYPES, ids=lambda pair: f"{pair[0]}-{pair[1]}")
@pytest.mark.parametrize("ufunc", BINARY_UFUNCS, ids=lambda ufunc: ufunc.__name__)
def test_binary_ufunc_matches_numpy(ufunc, dtypes, shapes):
    operands = [
        make_array(shape, dtype, seed=seed, specials=True)
        for seed, (shape, dtype) in enumerate(zip(shapes, dtypes))
    ]
    check_ufunc(ufunc, *_nonnegative_exponent(ufunc, operands))


@pytest.mark.parametrize("scalar", PYTHON_SCALARS, ids=repr)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ufunc", BINARY_UFUNCS, ids=lambda ufunc: ufunc.__name__)
def test_binary_ufunc_with_weak_python_scalar_matches_numpy(ufunc, dtype, scalar):
    array = make_array((2, 3), dtype, specials=True)
    check_ufunc(ufunc, *_nonnegative_exponent(ufunc, (array, scalar)))
    check_ufunc(ufunc, scalar, array)


@pytest.mark.parametrize(
    "expression, dtype, expected_dtype",
    [
        (lambda x: x * 2.0, F32, F32),
        (lambda x: 2.0 - x, F32, F32),
        (lambda x: x**2, F32, F32),
        (lambda x: x + 1, I32, I32),
        (lambda x: 3 * x, I32, I32),
        (lambda x: x * 1.5, I32, F64),
        (lambda x: x / 2, I32, F64),
        (lambda x: x + 1, BOOL, I64),
        (lambda x: x + np.float64(1.0), F32, F64),  # NumPy scalars are not weak
    ],
    ids=["f32*2.0", "2.0-f32", "f32**2", "i32+1", "3*i32", "i32*1.5", "i32/2", "bool+1", "f32+f64"],
)
def test_python_scalars_are_weak(expression, dtype, expected_dtype):
    array = make_array((3,), dtype)
    assert expression(array).dtype == expected_dtype  # NumPy 2 itself, as a sanity check
    assert expression(tensor(array)).dtype == expected_dtype


@pytest.mark.parametrize("dtype", [I32, I64, BOOL], ids=str)
def test_fabs_of_integers_is_float_like_numpy(dtype):
    array = make_array((7,), dtype)
    assert_same(np.fabs(tensor(array)), np.fabs(array))


# --- Python operators on Tensors -------------------------------------------------------
ARITHMETIC_OPERATORS = [
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    operator.mod,
    operator.pow,
    operator.lt,
    operator.le,
    operator.eq,
    operator.ne,
    operator.gt,
    operator.ge,
]
LOGICAL_OPERATORS = [operator.and_, operator.or_, operator.xor]
SHIFT_OPERATORS = [operator.lshift, operator.rshift]


def check_operator(function, *operands):
    expected, error = numpy_result(function, *operands)
    if error is not None:
        with pytest.raises(type(error)), np.errstate(all="ignore"):
            function(*as_tensors(operands))
        return
    with np.errstate(all="ignore"):
        result = function(*as_tensors(operands))
    assert isinstance(result, Tensor)
    assert_same(result, expected)


@pytest.mark.parametrize("dtype", [F32, F64, I32, BOOL], ids=str)
@pytest.mark.parametrize("function", ARITHMETIC_OPERATORS, ids=lambda f: f.__name__)
def test_operator_matches_numpy(function, dtype):
    left = make_array((3, 1), dtype, seed=1)
    right = make_array((4,), dtype, seed=2)
    if function is operator.pow and dtype.kind in "iu":
        right = np.abs(right)
    check_operator(function, left, right)  # Tensor op Tensor
    check_operator(lambda x: function(x, right), left)  # Tensor op ndarray
    check_operator(lambda y: function(left, y), right)  # ndarray op Tensor (reflected)
    # 3, not 2: NumPy's ``ndarray ** 2`` takes a np.square fast path (bool ** 2 is int8).
    check_operator(lambda x: function(x, 3), left)  # Tensor op weak scalar
    check_operator(lambda x: function(3, x), left)  # weak scalar op Tensor (reflected)


@pytest.mark.parametrize("function", LOGICAL_OPERATORS, ids=lambda f: f.__name__)
def test_logical_operator_on_booleans_matches_numpy(function):
    left, right = make_array((3, 1), BOOL, seed=1), make_array((4,), BOOL, seed=2)
    check_operator(function, left, right)
    check_operator(lambda x: function(x, True), left)
    check_operator(lambda x: function(right, x), left)


@pytest.mark.parametrize("dtypes", [(I32, I32), (I64, I32), (BOOL, I64), (F64, I32)],
                         ids=str)
@pytest.mark.parametrize("function", LOGICAL_OPERATORS + SHIFT_OPERATORS,
                         ids=lambda f: f.__name__)
def test_bitwise_operator_on_integers_matches_numpy(function, dtypes):
    """Bits of integers (a float operand: NumPy's TypeError), shifts past the width."""
    left = make_array((3, 1), dtypes[0], seed=1)
    right = make_array((4,), dtypes[1], seed=2)
    check_operator(function, left, right)
    check_operator(lambda x: function(x, 3), left)
    check_operator(lambda x: function(-5, x), right)
    if dtypes == (I32, I32):
        shifts = np.array([0, 1, 31, 32, 33, 64, -1, -33], np.int32)
        check_operator(function, np.full(8, -7, np.int32), shifts)


def _unary_operator_cases():
    for function in [operator.neg, operator.pos, abs, operator.invert]:
        for dtype in DTYPES:
            yield pytest.param(function, dtype, id=f"{function.__name__}-{dtype}")


@pytest.mark.parametrize("function, dtype", list(_unary_operator_cases()))
def test_unary_operator_matches_numpy(function, dtype):
    check_operator(function, make_array((2, 3), dtype, specials=True))


# --- ufunc composites ------------------------------------------------------------------
COMPOSITE_SHAPES = {
    1: [((),), ((0,),), ((7,),), ((5, 3),)],
    2: [((), ()), ((0,), (1,)), ((7,), (7,)), ((3, 1), (4,))],
}


def _composite_cases():
    for ufunc in numpy_api.UFUNC_COMPOSITES:
        for dtype in DTYPES:
            yield pytest.param(ufunc, dtype, id=f"{ufunc.__name__}-{dtype}")


@pytest.mark.parametrize("ufunc, dtype", list(_composite_cases()))
def test_ufunc_composite_matches_numpy(ufunc, dtype):
    for shapes in COMPOSITE_SHAPES[ufunc.nin]:
        operands = [make_array(shape, dtype, seed=seed) for seed, shape in enumerate(shapes)]
        expected, error = numpy_result(ufunc, *operands)
        if error is not None:
            with pytest.raises(type(error)):
                ufunc(*as_tensors(operands))
            continue
        with np.errstate(all="ignore"):
            result = ufunc(*as_tensors(operands))
        results = result if ufunc.nout > 1 else (result,)
        references = expected if ufunc.nout > 1 else (expected,)
        for value, reference in zip(results, references, strict=True):
            assert isinstance(value, Tensor)
            # Composed from primitives, so a few ulps from NumPy's own kernel.
            assert_same(value, reference, rtol=1e-6 if reference.dtype != np.float16 else 1e-3)


def test_logaddexp_at_infinities_matches_numpy():
    x = np.array([-np.inf, np.inf, -np.inf, 1.0])
    y = np.array([-np.inf, np.inf, 0.0, np.inf])
    with np.errstate(all="ignore"):
        assert_same(np.logaddexp(tensor(x), tensor(y)), np.logaddexp(x, y))


# --- erf: a primitive NumPy lacks --------------------------------------------------------
def erf_reference(values):
    """``math.erf`` element by element (the C library's, within 1 ulp of exact), in erf's
    result dtype: float32 stays float32, everything else is float64 (scipy.special.erf's
    rule)."""
    values = np.asarray(values)
    flat = [math.erf(float(value)) for value in values.reshape(-1)]
    dtype = F32 if values.dtype == F32 else F64
    return np.array(flat, np.float64).reshape(values.shape).astype(dtype)


def assert_within_ulps(actual, expected, ulps):
    """Same dtype and shape; NaN where ``expected`` has NaN; other values within ``ulps`` units
    in the last place (infinities and signed zeros exactly)."""
    if isinstance(actual, Tensor):
        actual = actual.numpy()
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    exact = np.isinf(expected) | (expected == 0)
    np.testing.assert_array_equal(actual[exact], expected[exact])
    np.testing.assert_array_equal(np.signbit(actual[exact]), np.signbit(expected[exact]))
    ordinary = ~np.isnan(expected)
    error = np.abs(actual[ordinary].astype(np.float64) - expected[ordinary])
    assert np.all(error <= ulps * np.spacing(np.abs(expected[ordinary])).astype(np.float64))


@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_erf_matches_the_c_library(dtype, shape):
    """``erf_p`` on ndarrays, Tensors and abstract values (with NaN, +-inf and -0.0) against
    math.erf: float64 within 2 ulp (each is within 1 ulp of exact), float32 within 1."""
    array = make_array(shape, dtype, specials=True)
    expected = erf_reference(array)
    ulps = 1 if expected.dtype == F32 else 2
    result = bind(ops.erf_p, array)
    assert not isinstance(result, Tensor)
    assert_within_ulps(result, expected, ulps)
    assert_within_ulps(ops.erf_p(tensor(array)), expected, ulps)
    assert_abstract_matches(ops.erf_p, [array], {}, expected)


def test_erf_of_scalars_and_weak_python_scalars():
    assert_abstract_matches(ops.erf_p, [2], {}, np.float64(0.0))
    assert_abstract_matches(ops.erf_p, [0.5], {}, np.float64(0.0))
    assert type(ops.erf_p(0.5)) is np.float64  # NumPy scalars from 0-d, as ufuncs give
    assert type(ops.erf_p(np.float32(0.5))) is np.float32
    assert ops.erf_p(-0.0) == 0.0 and np.signbit(ops.erf_p(-0.0))
    tiny = np.finfo(F64).smallest_subnormal
    assert ops.erf_p(tiny) == tiny  # tiny * 2/sqrt(pi) rounds to tiny
    near = 1e-300 * (2 / math.sqrt(math.pi))
    assert abs(ops.erf_p(1e-300) - near) <= np.spacing(near)


@pytest.mark.parametrize("dtype", [np.complex128, np.longdouble], ids=lambda d: np.dtype(d).name)
def test_erf_refuses_complex_and_long_double(dtype):
    with pytest.raises(TypeError, match="erf"):
        ops.erf_p(np.ones(3, dtype))
    with pytest.raises(TypeError, match="erf"):
        ops.erf_p.abstract_eval(abstractify(np.ones(3, dtype)))


def test_foreign_ufuncs_map_to_registered_primitives():
    for prim in numpy_api.FOREIGN_UFUNCS.values():
        assert PRIMITIVES.get(prim.name) is prim


def test_scipy_erf_is_looked_up_only_where_scipy_is_already_imported(monkeypatch):
    """tracejit never imports SciPy: a ufunc counts as scipy.special.erf when it *is* the
    ``erf`` of the ``scipy.special`` in ``sys.modules``. A stand-in module (np.arcsinh as its
    ufunc, which tracejit does not support) shows the lookup without SciPy installed."""
    x = uniform(5)
    with pytest.raises(UnsupportedError):
        np.arcsinh(tensor(x))
    monkeypatch.setitem(sys.modules, "scipy.special", types.SimpleNamespace(erf=np.arcsinh))
    assert_within_ulps(np.arcsinh(tensor(x)), erf_reference(x), 2)


@pytest.mark.parametrize("dtype", DTYPES + [np.dtype(np.int8), np.dtype(np.float16)], ids=str)
def test_scipy_erf_on_tensors_matches_scipy(dtype):
    """With SciPy imported, scipy.special.erf of a Tensor is the erf primitive, in SciPy's
    own loop dtypes (int8 and float16 become float64 as in SciPy), with its gradient."""
    special = pytest.importorskip("scipy.special")
    array = make_array((5, 3), dtype, specials=True)
    expected = special.erf(array)
    assert_within_ulps(special.erf(tensor(array)), expected, 1 if expected.dtype == F32 else 2)
    if dtype.kind == "f" and dtype != np.float16:
        x = tensor(uniform(7).astype(dtype), requires_grad=True)
        special.erf(x).sum().backward()
        values = x.numpy().astype(np.float64)
        np.testing.assert_allclose(x.grad.numpy(), 2 / np.sqrt(np.pi) * np.exp(-values * values),
                                   rtol=1e-6)
        assert x.grad.dtype == dtype


# --- reductions ------------------------------------------------------------------------
REDUCTIONS = [np.sum, np.prod, np.max, np.min, np.any, np.all]
REDUCTION_AXES = [
    ((), None),
    ((), ()),
    ((0,), None),
    ((0,), 0),
    ((7,), None),
    ((7,), 0),
    ((7,), -1),
    ((5, 3), None),
    ((5, 3), 0),
    ((5, 3), -1),
    ((5, 3), (0, 1)),
    ((3, 0), None),
    ((3, 0), 1),
    ((3, 0), 0),
    ((2, 3, 4), 1),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), (-1, 0)),
]


def normalized_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(sorted(a % ndim for a in axes))


@pytest.mark.parametrize("keepdims", [False, True], ids=["flat", "keepdims"])
@pytest.mark.parametrize(
    "shape, axis", REDUCTION_AXES, ids=[f"{shape_id(s)}-axis{a}" for s, a in REDUCTION_AXES]
)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("function", REDUCTIONS, ids=lambda f: f.__name__)
def test_reduction_matches_numpy(function, dtype, shape, axis, keepdims):
    array = make_array(shape, dtype, specials=True)
    prim = PRIMITIVES[function.__name__]
    params = dict(axes=normalized_axes(axis, len(shape)), keepdims=keepdims)
    expected, error = numpy_result(function, array, axis=axis, keepdims=keepdims)
    if error is not None:  # max/min of an empty axis
        with pytest.raises(type(error)):
            function(tensor(array), axis=axis, keepdims=keepdims)
        return
    method = getattr(tensor(array), function.__name__)
    with np.errstate(invalid="ignore"):  # inf - inf in sums of the special values
        assert_same(bind(prim, array, **params), expected)
        assert_same(function(tensor(array), axis=axis, keepdims=keepdims), expected)
        assert_same(method(axis=axis, keepdims=keepdims), expected)
    assert_abstract_matches(prim, [array], params, expected)


@pytest.mark.parametrize("keepdims", [False, True], ids=["flat", "keepdims"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=lambda axis: f"axis{axis}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("function", [np.argmax, np.argmin], ids=lambda f: f.__name__)
def test_arg_reduction_matches_numpy(function, dtype, axis, keepdims):
    # Small integers and booleans have ties: the first occurrence wins, as in NumPy.
    array = make_array((5, 3), dtype, specials=True)
    expected = function(array, axis=axis, keepdims=keepdims)
    assert_same(function(tensor(array), axis=axis, keepdims=keepdims), expected)
    method = getattr(tensor(array), function.__name__)
    assert_same(method(axis=axis, keepdims=keepdims), expected)
    if axis is not None:
        prim = PRIMITIVES[function.__name__]
        params = dict(axis=axis % array.ndim, keepdims=keepdims)
        assert_same(bind(prim, array, **params), expected)
        assert_abstract_matches(prim, [array], params, expected)


@pytest.mark.parametrize("function", [np.argmax, np.argmin], ids=lambda f: f.__name__)
def test_arg_reduction_of_0d_and_empty_match_numpy(function):
    assert_same(function(tensor(3.0)), function(np.array(3.0)))
    with pytest.raises(ValueError):
        function(np.zeros((0,)))
    with pytest.raises(ValueError):
        function(tensor(np.zeros((0,))))


STATISTICS_CALLS = [
    ("mean", lambda f, x: f.mean(x)),
    ("mean-axis0", lambda f, x: f.mean(x, axis=0)),
    ("mean-keepdims", lambda f, x: f.mean(x, axis=-1, keepdims=True)),
    ("mean-dtype", lambda f, x: f.mean(x, axis=(0, 1), dtype=np.float32)),
    ("var", lambda f, x: f.var(x)),
    ("var-ddof", lambda f, x: f.var(x, axis=0, ddof=1)),
    ("std", lambda f, x: f.std(x, axis=1, keepdims=True)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("call", STATISTICS_CALLS, ids=lambda call: call[0])
def test_statistics_match_numpy(call, dtype):
    _, function = call
    array = make_array((5, 3), dtype)
    expected = function(np, array)
    rtol = 1e-5 if expected.dtype == F32 else 1e-12
    assert_same(function(np, tensor(array)), expected, rtol=rtol)


@pytest.mark.parametrize("axis", [0, 1, -1, (0, 1)], ids=lambda axis: f"axis{axis}")
@pytest.mark.parametrize(
    "ufunc", list(ufunc_calls.UFUNC_REDUCTIONS), ids=lambda ufunc: ufunc.__name__
)
def test_ufunc_reduce_matches_numpy(ufunc, axis):
    array = make_array((4, 3), F64)
    assert_same(ufunc.reduce(tensor(array), axis=axis), ufunc.reduce(array, axis=axis))


def test_ufunc_reduce_with_axis_none_reduces_everything():
    array = make_array((4, 3), F64)
    assert_same(np.maximum.reduce(tensor(array), axis=None), np.maximum.reduce(array, axis=None))


def test_ufunc_reduce_default_axis_is_zero():
    array = make_array((4, 3), F64)
    assert_same(np.add.reduce(tensor(array)), np.add.reduce(array))


# --- matmul ----------------------------------------------------------------------------
MATMUL_SHAPES = [
    ((4,), (4,)),
    ((4,), (4, 3)),
    ((2, 4), (4,)),
    ((2, 4), (4, 3)),
    ((1, 1), (1, 1)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((4,), (2, 4, 3)),
    ((2, 3, 4), (4,)),
    ((0, 3), (3, 2)),
    ((2, 0), (0, 3)),
]
MATMUL_DTYPES = [(dtype, dtype) for dtype in DTYPES] + [(F32, I64), (I32, F32)]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=pair_id)
@pytest.mark.parametrize("dtypes", MATMUL_DTYPES, ids=lambda pair: f"{pair[0]}-{pair[1]}")
def test_matmul_matches_numpy(dtypes, shapes):
    a = make_array(shapes[0], dtypes[0], seed=1)
    b = make_array(shapes[1], dtypes[1], seed=2)
    expected = np.matmul(a, b)
    check_primitive_call(ops.matmul_p, (a, b), {}, np.matmul)
    assert_same(tensor(a) @ tensor(b), expected)
    assert_same(a @ tensor(b), expected)
    assert_same(tensor(a) @ b, expected)
    assert_same(np.matmul(tensor(a), tensor(b)), expected)


@pytest.mark.parametrize(
    "shapes", [((2, 3), (4, 2)), ((3,), (4,)), ((), (3,)), ((2, 2, 3), (3, 3, 2))], ids=pair_id
)
def test_matmul_shape_errors_match_numpy(shapes):
    a, b = np.ones(shapes[0]), np.ones(shapes[1])
    with pytest.raises(ValueError):
        np.matmul(a, b)
    with pytest.raises(ValueError):
        tensor(a) @ tensor(b)
    with pytest.raises(ValueError):
        ops.matmul_p.abstract_eval(abstractify(a), abstractify(b))


# --- structural primitives through bind ------------------------------------------------
PrimitiveCase = namedtuple("PrimitiveCase", "id prim args params reference")


def _scatter_add_reference(updates, indices, axis, size):
    """Explicit loop: out[..., indices[j], ...] += updates[..., j, ...]."""
    out_shape = updates.shape[:axis] + (size,) + updates.shape[axis + indices.ndim :]
    out = np.zeros(out_shape, updates.dtype)
    for position in np.ndindex(updates.shape):
        index_position = position[axis : axis + indices.ndim]
        target = position[:axis] + (indices[index_position] % size,)
        out[target + position[axis + indices.ndim :]] += updates[position]
    return out


STRUCTURAL_PRIMITIVE_CASES = [
    PrimitiveCase(
        "reshape", ops.reshape_p, [(2, 6)], dict(shape=(3, 4)), lambda x: x.reshape(3, 4)
    ),
    PrimitiveCase("reshape-0d", ops.reshape_p, [(1, 1)], dict(shape=()), lambda x: x.reshape(())),
    PrimitiveCase(
        "reshape-empty", ops.reshape_p, [(3, 0)], dict(shape=(0, 5)), lambda x: x.reshape(0, 5)
    ),
    PrimitiveCase(
        "transpose", ops.transpose_p, [(2, 3, 4)], dict(perm=(2, 0, 1)),
        lambda x: np.transpose(x, (2, 0, 1)),
    ),
    PrimitiveCase(
        "broadcast_to", ops.broadcast_to_p, [(3, 1)], dict(shape=(2, 3, 4)),
        lambda x: np.broadcast_to(x, (2, 3, 4)),
    ),
    PrimitiveCase(
        "broadcast_to-empty", ops.broadcast_to_p, [(1,)], dict(shape=(2, 0)),
        lambda x: np.broadcast_to(x, (2, 0)),
    ),
    PrimitiveCase(
        "slice", ops.slice_p, [(5, 7)], dict(starts=(1, 0), limits=(5, 7), steps=(2, 3)),
        lambda x: x[1:5:2, 0:7:3],
    ),
    PrimitiveCase(
        "slice-empty", ops.slice_p, [(5,)], dict(starts=(3,), limits=(3,), steps=(1,)),
        lambda x: x[3:3],
    ),
    PrimitiveCase(
        "pad", ops.pad_p, [(2, 3)], dict(config=((1, 2, 0), (0, 1, 0))),
        lambda x: np.pad(x, ((1, 2), (0, 1))),
    ),
    PrimitiveCase(
        "pad-interior", ops.pad_p, [(3,)], dict(config=((1, 0, 2),)),
        lambda x: np.array([0, x[0], 0, 0, x[1], 0, 0, x[2]], x.dtype),
    ),
    PrimitiveCase("flip", ops.flip_p, [(3, 4)], dict(axes=(1,)), lambda x: x[:, ::-1]),
    PrimitiveCase("flip-all", ops.flip_p, [(3, 4)], dict(axes=(0, 1)), lambda x: x[::-1, ::-1]),
    PrimitiveCase(
        "concatenate", ops.concatenate_p, [(2, 3), (1, 3), (0, 3)], dict(axis=0),
        lambda *xs: np.concatenate(xs, axis=0),
    ),
    PrimitiveCase(
        "concatenate-axis1", ops.concatenate_p, [(2, 1), (2, 3)], dict(axis=1),
        lambda *xs: np.concatenate(xs, axis=1),
    ),
]


@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=str)
@pytest.mark.parametrize("case", STRUCTURAL_PRIMITIVE_CASES, ids=lambda case: case.id)
def test_structural_primitive_matches_numpy(case, dtype):
    args = [make_array(shape, dtype, seed=seed) for seed, shape in enumerate(case.args)]
    check_primitive_call(case.prim, args, case.params, case.reference)


GATHER_CASES = [
    ((5, 4), np.array([4, -1, 0]), 0),
    ((5, 4), np.array([[3, -4], [0, 1]]), 1),
    ((5, 4), np.array(2), 0),
    ((7,), np.array([], dtype=np.int64), 0),
    ((2, 3, 4), np.array([[-1], [2]], dtype=np.int32), 2),
]


@pytest.mark.parametrize("dtype", [F64, I32, BOOL], ids=str)
@pytest.mark.parametrize(
    "shape, indices, axis",
    GATHER_CASES,
    ids=["negative-indices", "2d-indices-axis1", "0d-index", "empty-indices", "3d-axis2"],
)
def test_gather_matches_np_take(shape, indices, axis, dtype):
    array = make_array(shape, dtype)
    check_primitive_call(
        ops.gather_p,
        (array, indices),
        dict(axis=axis),
        lambda x, i: np.take(x, i, axis=axis),
    )


@pytest.mark.parametrize(
    "shape, indices, axis, size",
    [
        ((2, 3), np.array([0, 4, 0]), 1, 5),
        ((3,), np.array([-1, 1, -1]), 0, 4),
        ((2, 2, 3), np.array([[1, 0], [1, 1]]), 0, 2),
    ],
    ids=["repeated", "negative", "2-d-indices"],
)
@pytest.mark.parametrize("dtype", [F32, I64], ids=str)
def test_scatter_add_matches_explicit_loop(shape, indices, axis, size, dtype):
    updates = make_array(shape, dtype)
    params = dict(axis=axis, size=size)
    check_primitive_call(
        ops.scatter_add_p,
        (updates, indices),
        params,
        lambda u, i: _scatter_add_reference(u, i, axis, size),
    )


def test_gather_of_float_indices_is_refused_like_numpy():
    with pytest.raises(IndexError, match="integer"):
        ops.gather_p.abstract_eval(abstractify(np.ones(3)), abstractify(np.array([0.5])), axis=0)
    with pytest.raises(IndexError):
        tensor(np.ones(3))[np.array([0.5])]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_creation_primitives_match_numpy(dtype):
    fill = np.ones((), dtype).item()
    check_primitive_call(
        ops.full_p, (), dict(shape=(2, 3), value=fill, dtype=dtype),
        lambda: np.full((2, 3), fill, dtype),
    )
    check_primitive_call(
        ops.full_p, (), dict(shape=(), value=fill, dtype=dtype), lambda: np.full((), fill, dtype)
    )
    if dtype != BOOL:
        check_primitive_call(
            ops.iota_p, (), dict(length=5, dtype=dtype), lambda: np.arange(5, dtype=dtype)
        )
        check_primitive_call(
            ops.iota_p, (), dict(length=0, dtype=dtype), lambda: np.arange(0, dtype=dtype)
        )


# --- the NumPy function table on Tensors -----------------------------------------------
FunctionCase = namedtuple("FunctionCase", "id function shapes call rtol")


def fcase(function, *shapes, call=None, name="", rtol=0.0):
    call = call or (lambda f, *xs: f(*xs))
    label = f"{function.__name__}-{name}" if name else function.__name__
    return FunctionCase(label, function, shapes, call, rtol)


FUNCTION_CASES = [
    fcase(np.sum, (2, 3), call=lambda f, x: f(x, axis=0)),
    fcase(np.sum, (2, 3), call=lambda f, x: f(x, dtype=np.float64), name="dtype"),
    fcase(np.prod, (2, 3), call=lambda f, x: f(x, axis=-1, keepdims=True)),
    fcase(np.max, (2, 3), call=lambda f, x: f(x, axis=1)),
    fcase(np.amax, (2, 3)),
    fcase(np.min, (2, 3), call=lambda f, x: f(x, axis=(0, 1))),
    fcase(np.amin, (2, 3), call=lambda f, x: f(x, axis=0)),
    fcase(np.any, (2, 3), call=lambda f, x: f(x, axis=0)),
    fcase(np.count_nonzero, (2, 3)),
    fcase(np.count_nonzero, (2, 3), call=lambda f, x: f(x > 0, axis=1), name="axis"),
    fcase(np.all, (2, 3)),
    fcase(np.argmax, (2, 3), call=lambda f, x: f(x, axis=-1)),
    fcase(np.argmin, (2, 3)),
    fcase(np.mean, (2, 3), call=lambda f, x: f(x, axis=0), rtol=1e-6),
    fcase(np.var, (2, 3), call=lambda f, x: f(x, axis=1, ddof=1), rtol=1e-6),
    fcase(np.std, (2, 3), rtol=1e-6),
    fcase(np.reshape, (2, 3, 4), call=lambda f, x: f(x, (4, -1))),
    fcase(np.reshape, (3, 0), call=lambda f, x: f(x, (-1, 3)), name="empty"),
    fcase(np.reshape, (1,), call=lambda f, x: f(x, ()), name="0d"),
    fcase(np.transpose, (2, 3, 4)),
    fcase(np.transpose, (2, 3, 4), call=lambda f, x: f(x, (1, -1, 0)), name="axes"),
    fcase(np.swapaxes, (2, 3, 4), call=lambda f, x: f(x, 0, -1)),
    fcase(np.moveaxis, (2, 3, 4), call=lambda f, x: f(x, 0, -1)),
    fcase(np.moveaxis, (2, 3, 4), call=lambda f, x: f(x, [0, 1], [-1, 0]), name="several"),
    fcase(np.expand_dims, (2, 3), call=lambda f, x: f(x, 0)),
    fcase(np.expand_dims, (2, 3), call=lambda f, x: f(x, -1), name="last"),
    fcase(np.expand_dims, (2, 3), call=lambda f, x: f(x, (0, 3)), name="tuple"),
    fcase(np.squeeze, (1, 3, 1)),
    fcase(np.squeeze, (1, 3, 1), call=lambda f, x: f(x, axis=-1), name="axis"),
    fcase(np.squeeze, (1,), name="to-0d"),
    fcase(np.ravel, (2, 3)),
    fcase(np.broadcast_to, (3, 1), call=lambda f, x: f(x, (2, 3, 4))),
    fcase(np.broadcast_to, (), call=lambda f, x: f(x, (2, 3)), name="0d"),
    fcase(np.broadcast_to, (1,), call=lambda f, x: f(x, (0,)), name="empty"),
    fcase(np.concatenate, (2, 3), (1, 3), call=lambda f, x, y: f([x, y])),
    fcase(np.concatenate, (2, 3), (2, 1), call=lambda f, x, y: f([x, y], axis=-1), name="-1"),
    fcase(np.concatenate, (2, 3), (4,), call=lambda f, x, y: f((x, y), axis=None), name="none"),
    fcase(np.concatenate, (3,), (0,), call=lambda f, x, y: f([x, y]), name="empty"),
    fcase(np.stack, (2, 3), (2, 3), call=lambda f, x, y: f([x, y])),
    fcase(np.stack, (2, 3), (2, 3), call=lambda f, x, y: f([x, y], axis=-1), name="-1"),
    fcase(np.stack, (), (), call=lambda f, x, y: f([x, y]), name="0d"),
    fcase(np.hstack, (3,), (2,), call=lambda f, x, y: f([x, y])),
    fcase(np.hstack, (2, 3), (2, 1), call=lambda f, x, y: f([x, y]), name="2d"),
    fcase(np.vstack, (3,), (3,), call=lambda f, x, y: f([x, y])),
    fcase(np.vstack, (2, 3), (1, 3), call=lambda f, x, y: f([x, y]), name="2d"),
    fcase(np.atleast_1d, ()),
    fcase(np.atleast_1d, (2, 3), name="2d"),
    fcase(np.atleast_1d, (), (3,), name="several"),
    fcase(np.atleast_2d, ()),
    fcase(np.atleast_2d, (3,), name="1d"),
    fcase(np.atleast_2d, (0, 2, 3), (4,), name="several"),
    fcase(np.atleast_3d, ()),
    fcase(np.atleast_3d, (3,), name="1d"),
    fcase(np.atleast_3d, (2, 3), name="2d"),
    fcase(np.atleast_3d, (2, 1, 3, 2), name="4d"),
    fcase(np.broadcast_arrays, (3, 1), (4,)),
    fcase(np.broadcast_arrays, (), (2, 0), (1, 1), name="empty"),
    fcase(np.broadcast_arrays, (2, 3), (2, 3), name="same"),
    fcase(np.array_equal, (2, 3), (2, 3)),
    fcase(np.array_equal, (2, 3), call=lambda f, x: f(x, x.copy()), name="self"),
    fcase(np.array_equal, (2, 3), call=lambda f, x: f(x, x[:1]), name="shapes"),
    fcase(np.array_equal, (0, 3), call=lambda f, x: f(x, x, equal_nan=True), name="nan"),
    fcase(np.array_equiv, (2, 3), call=lambda f, x: f(x, x[:1]), name="broadcast"),
    fcase(np.array_equiv, (2, 3), (4,), name="shapes"),
    fcase(np.split, (4, 3), call=lambda f, x: f(x, 2)),
    fcase(np.split, (4, 3), call=lambda f, x: f(x, [1, 2], axis=1), name="indices"),
    fcase(np.array_split, (5, 3), call=lambda f, x: f(x, 3)),
    fcase(np.array_split, (2, 3), call=lambda f, x: f(x, 3), name="empty_sections"),
    fcase(np.array_split, (4, 5), call=lambda f, x: f(x, [1, 7], axis=-1), name="indices"),
    fcase(np.flip, (3, 4)),
    fcase(np.flip, (3, 4), call=lambda f, x: f(x, axis=-1), name="axis"),
    fcase(np.pad, (2, 3), call=lambda f, x: f(x, ((1, 2), (0, 1)))),
    fcase(np.lib.stride_tricks.sliding_window_view, (4, 5), call=lambda f, x: f(x, (2, 3))),
    fcase(np.lib.stride_tricks.sliding_window_view, (4, 5), call=lambda f, x: f(x, 3, axis=1),
          name="axis"),
    fcase(np.pad, (3,), call=lambda f, x: f(x, 2), name="int"),
    fcase(np.tril, (3, 4)),
    fcase(np.triu, (3, 4), call=lambda f, x: f(x, 1)),
    fcase(np.where, (2, 3), (2, 3), call=lambda f, x, y: f(x > y, x, y)),
    fcase(np.where, (3, 1), (4,), call=lambda f, x, y: f(y > 0, x, 0), name="scalar"),
    fcase(np.nonzero, (3, 4)),
    fcase(np.clip, (3, 4), call=lambda f, x: f(x, -1, 2)),
    fcase(np.clip, (3, 4), call=lambda f, x: f(x, None, 0.5), name="upper"),
    fcase(np.clip, (3, 4), (4,), call=lambda f, x, y: f(x, y, 2), name="array-bound"),
    fcase(np.round, (3, 4), call=lambda f, x: f(x * 2.5)),
    fcase(np.round, (3, 4), call=lambda f, x: f(x * 37.0, 1), name="decimals"),
    fcase(np.round, (3, 4), call=lambda f, x: f(x * 37, -1), name="tens"),
    fcase(np.around, (3, 4), call=lambda f, x: f(x * 1.23456, 3)),
    fcase(np.take, (3, 4), call=lambda f, x: f(x, [0, -1, 5])),
    fcase(np.take, (3, 4), call=lambda f, x: f(x, [[0, 1], [-1, 2]], axis=1), name="axis"),
    fcase(np.take, (3, 4), call=lambda f, x: f(x, [0, -3, 13], mode="clip"), name="clip"),
    fcase(np.take, (3, 4), call=lambda f, x: f(x, [[0, 9], [-7, 2]], axis=1, mode="wrap"),
          name="wrap"),
    fcase(np.take, (0, 4), call=lambda f, x: f(x, [], axis=0, mode="clip"), name="empty"),
    fcase(
        np.take_along_axis, (3, 4),
        call=lambda f, x: f(x, np.array([[0, -1], [3, 2], [1, 1]]), axis=1),
    ),
    fcase(
        np.take_along_axis, (3, 4),
        call=lambda f, x: f(x, np.array([[2, 0, 1, 0]]), axis=0), name="axis0",
    ),
    fcase(np.dot, (2, 3), (3, 4)),
    fcase(np.dot, (3,), (3,), name="1d"),
    fcase(np.dot, (), (3,), name="0d"),
    fcase(np.outer, (3,), (4,)),
    fcase(np.dot, (2, 3, 4), (5, 4, 2), name="nd", rtol=1e-6),
    fcase(np.outer, (2, 3), (2,), name="2d"),
    fcase(np.einsum, (2, 3), (3, 4), call=lambda f, x, y: f("ij,jk->ik", x, y), rtol=1e-6),
    fcase(np.einsum, (3, 3), call=lambda f, x: f("ii", x), name="trace"),
    fcase(np.einsum, (3, 3), call=lambda f, x: f("ii->i", x), name="diagonal"),
    fcase(np.einsum, (2, 3), call=lambda f, x: f("ij->ji", x), name="transpose"),
    fcase(np.einsum, (2, 3, 4), (2, 4, 5), call=lambda f, x, y: f("bij,bjk->bik", x, y),
          name="batched", rtol=1e-6),
    fcase(np.einsum, (2, 3), (3, 2), call=lambda f, x, y: f("ij,ji", x, y), name="full",
          rtol=1e-6),
    fcase(np.einsum, (4, 2, 3), (3, 5), call=lambda f, x, y: f("...ij,jk", x, y),
          name="ellipsis", rtol=1e-6),
    fcase(np.einsum, (3,), (4,), call=lambda f, x, y: f("i,j->ij", x, y), name="outer"),
    fcase(np.tensordot, (2, 3, 4), (3, 4, 5), rtol=1e-6),
    fcase(np.tensordot, (3, 4, 2), (4, 3), call=lambda f, x, y: f(x, y, ([1, 0], [0, 1])),
          name="pairs", rtol=1e-6),
    fcase(np.linalg.norm, (3, 4), rtol=1e-6),
    fcase(np.linalg.norm, (3, 4), call=lambda f, x: f(x, axis=1, keepdims=True), name="axis",
          rtol=1e-6),
    fcase(np.linalg.norm, (3, 4), call=lambda f, x: f(x, 1), name="matrix-1", rtol=1e-6),
    fcase(np.linalg.norm, (3, 4), call=lambda f, x: f(x, -np.inf), name="matrix-neg-inf",
          rtol=1e-6),
    fcase(np.linalg.norm, (5,), call=lambda f, x: f(x, 0), name="vector-0"),
    fcase(np.linalg.norm, (2, 5), call=lambda f, x: f(x, 3, axis=-1), name="vector-3",
          rtol=1e-6),
    fcase(np.repeat, (2, 3), call=lambda f, x: f(x, 2)),
    fcase(np.repeat, (2, 3), call=lambda f, x: f(x, [1, 0, 3], axis=1), name="counts"),
    fcase(np.tile, (2, 3), call=lambda f, x: f(x, (2, 1, 2))),
    fcase(np.tile, (3,), call=lambda f, x: f(x, 2), name="int"),
    fcase(np.roll, (3, 4), call=lambda f, x: f(x, 1, axis=1)),
    fcase(np.roll, (3, 4), call=lambda f, x: f(x, -5), name="flat"),
    fcase(np.roll, (3, 4), call=lambda f, x: f(x, (1, 2), axis=(0, 0)), name="twice"),
    fcase(np.cumsum, (3, 4), call=lambda f, x: f(x, axis=1), rtol=1e-6),
    fcase(np.cumsum, (3, 4), name="flat", rtol=1e-6),
    fcase(np.cumprod, (3, 4), call=lambda f, x: f(x, axis=1), rtol=1e-6),
    fcase(np.cumprod, (3, 4), name="flat", rtol=1e-6),
    fcase(np.cumprod, (2, 0), call=lambda f, x: f(x, axis=0), name="empty"),
    # NaN-aware reductions (tracer/nan_reductions.py); NaN cases: test_nan_reductions.py
    fcase(np.nansum, (2, 3), call=lambda f, x: f(x, axis=0)),
    fcase(np.nanprod, (2, 3), call=lambda f, x: f(x, axis=-1, keepdims=True)),
    fcase(np.nanmax, (2, 3), call=lambda f, x: f(x, axis=1)),
    fcase(np.nanmin, (2, 3)),
    fcase(np.nanargmax, (2, 3), call=lambda f, x: f(x, axis=-1)),
    fcase(np.nanargmin, (2, 3)),
    fcase(np.nanmean, (2, 3), call=lambda f, x: f(x, axis=0), rtol=1e-6),
    fcase(np.nanvar, (2, 3), call=lambda f, x: f(x, axis=1, ddof=1), rtol=1e-6),
    fcase(np.nanstd, (2, 3), rtol=1e-6),
    fcase(np.nancumsum, (3, 4), call=lambda f, x: f(x, axis=1), rtol=1e-6),
    fcase(np.nan_to_num, (2, 3), call=lambda f, x: f(np.log(x)), rtol=1e-6),
    fcase(np.nan_to_num, (2, 3), call=lambda f, x: f(x / 0, nan=-1.0, posinf=2.0), name="given"),
    fcase(np.diagflat, (2, 3)),
    fcase(np.diagflat, (3, 1), call=lambda f, x: f(x, k=-2), name="below"),
    fcase(np.diag, (4,), call=lambda f, x: f(x, 1)),
    # flat positions (tracer/flat_index.py)
    fcase(np.unravel_index, (2, 3),
          call=lambda f, x: f(np.argmax(x, axis=None), (2, 3))),
    fcase(np.ravel_multi_index, (2, 3),
          call=lambda f, x: f((np.argmax(x, axis=0), np.argmin(x, axis=0)), (2, 3))),
    fcase(np.sort, (3, 5), call=lambda f, x: f(x, kind="stable")),
    fcase(np.sort, (3, 5), call=lambda f, x: f(x, axis=0, kind="stable"), name="axis0"),
    fcase(np.argsort, (3, 5), call=lambda f, x: f(x, kind="stable")),
    fcase(np.argsort, (4, 2), call=lambda f, x: f(x, axis=None, kind="stable"), name="flat"),
    fcase(np.copy, (2, 3)),
    fcase(np.astype, (2, 3), call=lambda f, x: f(x, np.float32)),
    fcase(np.full_like, (2, 3), call=lambda f, x: f(x, 3)),
    fcase(np.full_like, (2, 3), call=lambda f, x: f(x, 2.5, dtype=np.float32), name="dtype"),
    fcase(np.zeros_like, (2, 3)),
    fcase(np.arange, (2, 3), call=lambda f, x: f(x.shape[-1], like=x)),
    fcase(np.arange, (2, 3), call=lambda f, x: f(1, x.shape[-1] + 3, 2, dtype=np.float32,
                                                 like=x), name="float32"),
    fcase(np.zeros_like, (2, 3), call=lambda f, x: f(x, shape=(4,)), name="shape"),
    fcase(np.ones_like, (0, 3)),
    fcase(np.ones_like, (), call=lambda f, x: f(x, dtype=bool), name="dtype"),
    fcase(np.empty_like, (2, 3), call=lambda f, x: f(x).shape),
    fcase(np.shape, (2, 3)),
    fcase(np.ndim, (2, 3)),
    fcase(np.size, (2, 3)),
    fcase(np.size, (2, 3), call=lambda f, x: f(x, 1), name="axis"),
    # composites in modules of their own (tests/tracer/test_numpy_composites.py has more)
    fcase(np.diagonal, (3, 4), call=lambda f, x: f(x, 1)),
    fcase(np.trace, (4, 3), call=lambda f, x: f(x, -1)),
    fcase(np.fill_diagonal, (4, 3), call=lambda f, x: (f(x, 2), x)[1]),  # in place
    fcase(np.copyto, (3, 4), (3, 4), call=lambda f, x, y: (f(x, y, where=y > 0), x)[1]),
    fcase(np.append, (2, 3), (3,)),
    fcase(np.delete, (3, 4), call=lambda f, x: f(x, [0, 2], axis=1)),
    fcase(np.insert, (2, 3), call=lambda f, x: f(x, 1, 7, axis=0)),
    fcase(np.fliplr, (2, 3)),
    fcase(np.resize, (2, 3), call=lambda f, x: f(x, (4, 4))),
    fcase(np.block, (2, 3), (2, 1), call=lambda f, x, y: f([[x, y], [y, x]])),
    fcase(np.cross, (2, 3), (3,)),
    fcase(np.flipud, (2, 3)),
    fcase(np.rot90, (2, 3), call=lambda f, x: f(x, 3)),
    fcase(np.column_stack, (3,), (3, 2), call=lambda f, x, y: f([x, y])),
    fcase(np.dstack, (2, 3), (2, 3), call=lambda f, x, y: f([x, y])),
    fcase(np.hsplit, (2, 4), call=lambda f, x: f(x, 2)),
    fcase(np.vsplit, (4, 3), call=lambda f, x: f(x, [1, 3])),
    fcase(np.dsplit, (2, 3, 4), call=lambda f, x: f(x, 2)),
    fcase(np.ix_, (3,), (2,), call=lambda f, x, y: f(x.astype(int), y.astype(int))),
    fcase(np.rollaxis, (2, 3, 4), call=lambda f, x: f(x, 2, 1)),
    fcase(np.meshgrid, (3,), (2,), call=lambda f, x, y: f(x, y, indexing="ij")),
    fcase(np.select, (2, 3), (2, 3), call=lambda f, x, y: f([x > 0, y > 0], [x, y], 5)),
    fcase(np.choose, (2, 3), (2, 3), call=lambda f, x, y: f((x > 0).astype(int), [x, y])),
    fcase(np.piecewise, (2, 3), call=lambda f, x: f(x, [x < 0, x > 1], [-1, 1])),
    fcase(np.isclose, (2, 3), (2, 3), call=lambda f, x, y: f(x, y * 1.0001)),
    fcase(np.allclose, (2, 3), call=lambda f, x: f(x, x)),
    fcase(np.diff, (3, 4), call=lambda f, x: f(x, axis=0)),
    fcase(np.ediff1d, (2, 3)),
    fcase(np.gradient, (5,), rtol=1e-6),
    fcase(np.trapezoid, (3, 4), rtol=1e-6),
    fcase(np.sinc, (2, 3), rtol=1e-6),
    fcase(np.fix, (2, 3), call=lambda f, x: f(x * 1.5)),
    fcase(np.real, (2, 3)),
    fcase(np.imag, (2, 3)),
    fcase(np.inner, (2, 3), (4, 3), rtol=1e-6),
    fcase(np.vdot, (2, 3), (3, 2), rtol=1e-6),
    fcase(np.kron, (2, 3), (2, 2)),
    fcase(np.linalg.matrix_power, (3, 3), call=lambda f, x: f(x, 4), rtol=1e-6),
    fcase(np.linalg.multi_dot, (2, 3), (3, 4), (4, 2), call=lambda f, *xs: f(list(xs)),
          rtol=1e-6),
    fcase(np.searchsorted, (5,), (2, 3), call=lambda f, a, v: f(np.sort(a), v)),
    fcase(np.digitize, (2, 3), call=lambda f, x: f(x, [-1, 0, 1])),
    fcase(np.isin, (2, 3), call=lambda f, x: f(x, [0, 1, 2])),
    fcase(np.bincount, (6,), (6,), call=lambda f, x, w: f(np.abs(x), weights=w, minlength=5)),
    fcase(np.bincount, (6,), call=lambda f, x: f(np.abs(x), minlength=5), name="counts"),
    fcase(np.linspace, (5, 2), call=lambda f, x: x[:, 0] + f(0.5, 2.0, x.shape[0])),
    fcase(np.linspace, (4,), call=lambda f, x: x + f(0, x.shape[0], x.shape[0], endpoint=False),
          name="dims"),
    fcase(np.ptp, (2, 3), call=lambda f, x: f(x, axis=1)),
    fcase(np.average, (2, 3), call=lambda f, x: f(x, axis=1, weights=[1, 2, 3]), rtol=1e-6),
    fcase(np.cov, (2, 5), rtol=1e-6),
    fcase(np.corrcoef, (3, 4), rtol=1e-6),
    fcase(np.median, (3, 4), call=lambda f, x: f(x, axis=0)),
    fcase(np.quantile, (3, 4), call=lambda f, x: f(x, 0.3, axis=1), rtol=1e-6),
    fcase(np.percentile, (5,), call=lambda f, x: f(x, [10, 90]), rtol=1e-6),
    # (bool + 0: a bool convolution is NumPy's logical dot, which runs eagerly)
    fcase(np.convolve, (5,), (3,), call=lambda f, a, v: f(a + 0, v + 0), rtol=1e-6),
    fcase(np.correlate, (3,), (4,), call=lambda f, a, v: f(a + 0, v + 0, "same"), rtol=1e-6),
]


def _function_cases():
    """Every case over float32, int64 and bool, leaving out what NumPy itself refuses."""
    for case in FUNCTION_CASES:
        for dtype in [F32, I64, BOOL]:
            arrays = [make_array(shape, dtype, seed=seed) for seed, shape in enumerate(case.shapes)]
            _, error = numpy_result(case.call, case.function, *arrays)
            if error is not None:
                continue
            yield pytest.param(case, dtype, id=f"{case.id}-{dtype}")


def test_function_cases_cover_the_function_table():
    covered = {case.function for case in FUNCTION_CASES}
    missing = [function.__name__ for function in numpy_api.FUNCTIONS if function not in covered]
    assert not missing, f"add a FUNCTION_CASES entry for {missing}"


@pytest.mark.parametrize("case, dtype", list(_function_cases()))
def test_numpy_function_on_tensors_matches_numpy(case, dtype):
    arrays = [make_array(shape, dtype, seed=seed) for seed, shape in enumerate(case.shapes)]
    expected = case.call(case.function, *arrays)
    result = case.call(case.function, *as_tensors(arrays))
    results = result if isinstance(result, (tuple, list)) else [result]
    references = expected if isinstance(expected, (tuple, list)) else [expected]
    # nonzero's positions are plain index arrays; so are arange's values (like= only
    # picks the implementation: np.arange(classes, like=logits) in nn.cross_entropy)
    if case.function not in (np.nonzero, np.arange):
        for value, reference in zip(results, references):
            is_array = isinstance(reference, (np.ndarray, np.generic))
            assert isinstance(value, Tensor) == is_array, "Tensor in, Tensor out"
    assert_same(result, expected, case.rtol)


def test_numpy_function_on_mixed_tensor_and_ndarray_matches_numpy():
    x, y = make_array((2, 3), F32), make_array((1, 3), I64)
    assert_same(np.concatenate([tensor(x), y]), np.concatenate([x, y]))
    assert_same(np.stack([x, tensor(x)], axis=1), np.stack([x, x], axis=1))
    assert_same(np.where(x > 0, tensor(x), y), np.where(x > 0, x, y))


# --- creation composites ---------------------------------------------------------------
@pytest.mark.parametrize(
    "args, kwargs",
    [((3,), {}), ((2, 4), {}), ((4,), dict(k=1)), ((3, 5), dict(k=-2)), ((3,), dict(dtype=I32)),
     ((2,), dict(dtype=bool)), ((0,), {})],
    ids=["3", "2x4", "k1", "3x5-k-2", "int32", "bool", "empty"],
)
@pytest.mark.parametrize("like", [None, "tensor"])
def test_eye_matches_numpy(args, kwargs, like):
    like_value = tensor(0.0) if like else None
    result = numpy_api.eye(*args, like=like_value, **kwargs)
    assert isinstance(result, Tensor) == (like is not None)
    assert_same(result, np.eye(*args, **kwargs))


@pytest.mark.parametrize(
    "args, kwargs",
    [((5,), {}), ((2, 9, 3), {}), ((5, 0, -1), {}), ((2.5,), {}), ((0, 1, 0.25), {}),
     ((1, 2, 0.1), dict(dtype=F32)), ((0,), {}), ((4,), dict(dtype=F64)), ((-3, 3), {})],
    ids=["5", "2-9-3", "descending", "float-stop", "quarter", "tenth-f32", "empty", "f64", "neg"],
)
@pytest.mark.parametrize("like", [None, "tensor"])
def test_arange_matches_numpy(args, kwargs, like):
    like_value = tensor(0.0) if like else None
    result = numpy_api.arange(*args, like=like_value, **kwargs)
    assert isinstance(result, Tensor) == (like is not None)
    expected = np.arange(*args, **kwargs)
    assert_same(result, expected, rtol=1e-6 if expected.dtype.kind == "f" else 0.0)


# --- indexing --------------------------------------------------------------------------
ROWS, COLS = np.array([0, 2, -1]), np.array([1, -1, 0])
INDEX_CASES = [
    ("int", (5, 4, 3), 2),
    ("negative-int", (5, 4, 3), -1),
    ("two-ints", (5, 4, 3), (1, -2)),
    ("slice", (5, 4, 3), slice(1, 4)),
    ("step", (5, 4, 3), slice(None, None, 2)),
    ("reverse", (5, 4, 3), slice(None, None, -1)),
    ("negative-step", (5, 4, 3), slice(None, None, -2)),
    ("negative-step-bounds", (5, 4, 3), slice(4, 1, -1)),
    ("negative-start-step", (7,), slice(-2, None, -2)),
    ("step-3", (7,), slice(1, -1, 3)),
    ("out-of-range-bounds", (5, 4, 3), slice(-100, 100)),
    ("empty-slice", (5, 4, 3), slice(3, 1)),
    ("empty-negative-slice", (7,), slice(1, 3, -1)),
    ("mixed-steps", (5, 4, 3), (slice(None, None, -1), slice(1, None, 2), slice(None, None, -2))),
    ("none", (5, 4, 3), None),
    ("ellipsis-int", (5, 4, 3), (Ellipsis, 1)),
    ("none-ellipsis-none", (5, 4, 3), (None, Ellipsis, None)),
    ("int-ellipsis-none", (5, 4, 3), (1, Ellipsis, None)),
    ("ellipsis", (5, 4, 3), Ellipsis),
    ("int-array", (5, 4, 3), [0, -1, 2]),
    ("repeated-int-array", (5, 4, 3), np.array([1, 1, 0])),
    ("2d-int-array", (5, 4, 3), np.array([[0, 1], [-1, -2]])),
    ("empty-int-array", (5, 4, 3), np.array([], dtype=np.int64)),
    ("rows-cols", (5, 4), (ROWS, COLS)),
    ("rows-cols-3d", (5, 4, 3), (ROWS, COLS)),
    ("slice-then-array", (5, 4, 3), (slice(None), [2, 0])),
    ("separated-arrays", (5, 4, 3), ([1, 0], slice(None), [2, -1])),
    ("int-and-array", (5, 4, 3), (1, [0, 2])),
    ("array-and-int", (5, 4, 3), ([0, 1], 1)),
    ("int-separated-from-array", (5, 4, 3), ([0, 1], slice(None), 1)),
    ("slice-int-array", (5, 4, 3), (slice(None), 1, [0, 2])),
    ("broadcast-arrays", (5, 4, 3), (np.array([[0], [1]]), np.array([0, 2, 3]))),
    ("array-none", (5, 4, 3), (None, [0, 1])),
    ("array-negative-step", (5, 4, 3), ([0, 2], slice(None, None, -1))),
    ("mask-first-axis", (5, 4, 3), np.array([True, False, True, False, True])),
    ("mask-2d", (5, 4), np.arange(20).reshape(5, 4) % 3 == 0),
    ("mask-2d-of-3d", (5, 4, 3), np.arange(20).reshape(5, 4) % 3 == 0),
    ("mask-second-axis", (5, 4, 3), (slice(None), np.array([True, False, False, True]))),
    ("mask-after-ellipsis", (5, 4, 3), (Ellipsis, np.array([False, True, True]))),
    ("mask-all-false", (5, 4), np.zeros(5, bool)),
    ("mask-list", (4,), [True, False, True, True]),
    ("0d-empty-tuple", (), ()),
    ("0d-none", (), None),
    ("0d-ellipsis", (), Ellipsis),
    ("size-0-int", (3, 0), 1),
    ("size-0-reverse", (3, 0), (slice(None), slice(None, None, -1))),
    ("size-0-1d-reverse", (0,), slice(None, None, -1)),
]


@pytest.mark.parametrize("dtype", [F64, I32], ids=str)
@pytest.mark.parametrize("name, shape, index", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_indexing_matches_numpy(name, shape, index, dtype):
    array = make_array(shape, dtype)
    expected = array[index]
    result = tensor(array)[index]
    assert isinstance(result, Tensor)
    assert_same(result, expected)


@pytest.mark.parametrize(
    "shape, index, error",
    [
        ((5,), 5, IndexError),
        ((5,), -6, IndexError),
        ((5,), [0, 5], IndexError),
        ((5, 4), ([0, 1], [0, -5]), IndexError),
        ((5,), (0, 0), IndexError),
        ((5,), np.array([True, False]), IndexError),
        ((5,), (Ellipsis, Ellipsis), IndexError),
        ((5,), slice(None, None, 0), ValueError),
        ((5,), 1.5, IndexError),
    ],
    ids=["int", "negative-int", "array", "second-array", "too-many", "mask-shape", "two-ellipses",
         "zero-step", "float"],
)
def test_bad_index_raises_like_numpy(shape, index, error):
    array = np.zeros(shape)
    with pytest.raises(error):
        array[index]
    with pytest.raises(error):
        tensor(array)[index]


# --- where, clip, astype ---------------------------------------------------------------
WHERE_CASES = [
    ((2, 3), (2, 3), (2, 3)),
    ((3, 1), (4,), ()),
    ((), (2, 3), (3,)),
    ((0,), (1,), (0,)),
]


@pytest.mark.parametrize("shapes", WHERE_CASES, ids=lambda shapes: "-".join(map(shape_id, shapes)))
@pytest.mark.parametrize("dtypes", BINARY_DTYPES, ids=lambda pair: f"{pair[0]}-{pair[1]}")
def test_where_matches_numpy(dtypes, shapes):
    condition = make_array(shapes[0], BOOL, seed=3)
    x = make_array(shapes[1], dtypes[0], seed=1, specials=True)
    y = make_array(shapes[2], dtypes[1], seed=2, specials=True)
    check_primitive_call(ops.where_p, (condition, x, y), {}, np.where)
    assert_same(np.where(tensor(condition), tensor(x), tensor(y)), np.where(condition, x, y))


@pytest.mark.parametrize("scalar", [0, 0.5, True], ids=repr)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_where_with_weak_python_scalar_matches_numpy(dtype, scalar):
    condition = make_array((2, 3), BOOL, seed=3)
    x = make_array((2, 3), dtype)
    check_primitive_call(ops.where_p, (condition, x, scalar), {}, np.where)
    check_primitive_call(ops.where_p, (condition, scalar, x), {}, np.where)


@pytest.mark.parametrize("dtype", [F32, F64, I32, I64], ids=str)
@pytest.mark.parametrize(
    "bounds", [(-1, 2), (0, None), (None, 1.5), (-0.5, 0.5), (2, 1)], ids=repr
)
def test_clip_matches_numpy(bounds, dtype):
    array = make_array((5, 3), dtype, specials=True)
    expected = np.clip(array, *bounds)
    assert_same(np.clip(tensor(array), *bounds), expected)
    assert_same(tensor(array).clip(*bounds), expected)


@pytest.mark.parametrize("target", DTYPES, ids=str)
@pytest.mark.parametrize("source", DTYPES, ids=str)
def test_astype_matches_numpy(source, target):
    array = make_array((7,), source)  # finite values: float-to-int casts are defined
    expected = array.astype(target)
    check_primitive_call(ops.cast_p, (array,), dict(dtype=target), lambda x: x.astype(target))
    assert_same(tensor(array).astype(target), expected)
    assert_same(np.astype(tensor(array), target), expected)


# --- gradients against central finite differences --------------------------------------
GradientCase = namedtuple("GradientCase", "id function inputs")


def primitive_function(prim, **params):
    return functools.partial(bind, prim, **params)


def finite_difference(loss, inputs, index, eps=1e-6):
    """d loss / d inputs[index] by central differences."""
    point = inputs[index]
    gradient = np.zeros_like(point)
    for position in np.ndindex(point.shape):
        values = []
        for step in (eps, -eps):
            moved = point.copy()
            moved[position] += step
            values.append(loss(*inputs[:index], moved, *inputs[index + 1 :]))
        gradient[position] = (values[0] - values[1]) / (2 * eps)
    return gradient


def differentiated(inputs):
    return [i for i, value in enumerate(inputs) if isinstance(value, np.ndarray)
            and value.dtype.kind == "f"]


def tape_gradients(function, inputs, weights):
    """Gradients of ``sum(function(*inputs) * weights)`` from the Tensor tape."""
    wrt = differentiated(inputs)
    arguments = [tensor(value, requires_grad=True) if i in wrt else value
                 for i, value in enumerate(inputs)]
    out = function(*arguments)
    assert isinstance(out, Tensor) and out.requires_grad
    out.backward(weights)
    gradients = []
    for i in wrt:
        grad = arguments[i].grad
        # A rule of None means a zero gradient (sign, floor, ...): nothing is accumulated.
        gradients.append(np.zeros_like(inputs[i]) if grad is None else grad.numpy())
    return gradients


def check_gradients(function, inputs):
    inputs = list(inputs)
    with np.errstate(all="ignore"):
        expected_out = np.asarray(function(*inputs))
    weights = np.random.default_rng(7).normal(size=expected_out.shape)

    def loss(*args):
        return float(np.sum(np.asarray(function(*args), dtype=np.float64) * weights))

    gradients = tape_gradients(function, inputs, weights)
    for index, gradient in zip(differentiated(inputs), gradients):
        assert gradient.shape == inputs[index].shape, "gradient summed back to input shape"
        assert gradient.dtype == inputs[index].dtype
        np.testing.assert_allclose(
            gradient, finite_difference(loss, inputs, index), rtol=1e-5, atol=1e-6,
            err_msg=f"gradient of input {index}",
        )
    return weights


def _primitive_gradient_cases():
    for name in DIFFERENTIABLE:
        args, params = SAMPLES[name]
        yield GradientCase(name, primitive_function(PRIMITIVES[name], **params), args)


def pcase(label, prim, *args, **params):
    return GradientCase(label, primitive_function(prim, **params), args)


# Broadcasting, other axes and the matmul family: gradients summed back to input shapes.
EXTRA_PRIMITIVE_GRADIENT_CASES = [
    pcase("add-(3,1)+(4,)", ops.add_p, uniform(3, 1), uniform(4)),
    pcase("multiply-scalar-tensor", ops.multiply_p, uniform(), uniform(2, 3)),
    pcase("multiply-python-scalar", ops.multiply_p, uniform(2, 3), 2.5),
    pcase("subtract-(2,3)-()", ops.subtract_p, uniform(2, 3), uniform()),
    pcase("true_divide-(3,1)/(1,4)", ops.true_divide_p, uniform(3, 1), away_from_zero(1, 4)),
    pcase("power-(3,1)**(4,)", ops.power_p, positive(3, 1), uniform(4)),
    pcase("power-python-exponent", ops.power_p, uniform(2, 3), 3.0),
    pcase("power-python-base", ops.power_p, 1.7, uniform(2, 3)),
    pcase("maximum-(3,1),(4,)", ops.maximum_p, uniform(3, 1), uniform(4)),
    pcase("minimum-(),(5,)", ops.minimum_p, uniform(), uniform(5)),
    pcase("mod-(3,1),(4,)", ops.mod_p, uniform(3, 1), positive(4)),
    pcase("where-broadcast", ops.where_p, mask(3, 1), uniform(4), uniform()),
    pcase("sum-all-keepdims", ops.sum_p, uniform(2, 3, 4), axes=(0, 1, 2), keepdims=True),
    pcase("sum-axes-0-2", ops.sum_p, uniform(2, 3, 4), axes=(0, 2), keepdims=False),
    pcase("prod-keepdims", ops.prod_p, away_from_zero(2, 3), axes=(0, 1), keepdims=True),
    pcase("max-all", ops.max_p, uniform(3, 4), axes=(0, 1), keepdims=False),
    pcase("min-axis-1", ops.min_p, uniform(3, 4), axes=(1,), keepdims=False),
    pcase("matmul-1d-1d", ops.matmul_p, uniform(4), uniform(4)),
    pcase("matmul-1d-2d", ops.matmul_p, uniform(4), uniform(4, 3)),
    pcase("matmul-2d-1d", ops.matmul_p, uniform(2, 4), uniform(4)),
    pcase("matmul-batched-broadcast", ops.matmul_p, uniform(2, 1, 3, 4), uniform(5, 4, 2)),
    pcase("matmul-1d-3d", ops.matmul_p, uniform(4), uniform(2, 4, 3)),
    pcase("matmul-3d-1d", ops.matmul_p, uniform(2, 3, 4), uniform(4)),
    pcase("slice-3d", ops.slice_p, uniform(4, 5, 3), starts=(1, 0, 2), limits=(4, 5, 3),
          steps=(2, 3, 1)),
    pcase("pad-interior", ops.pad_p, uniform(3,), config=((1, 0, 2),)),
    pcase("gather-2d-axis0", ops.gather_p, uniform(4, 3), np.array([[0, -1], [2, 0]]), axis=0),
    pcase("gather-3d-axis2", ops.gather_p, uniform(2, 3, 4), np.array([3, 3, -4]), axis=2),
    pcase("concatenate-axis1", ops.concatenate_p, uniform(2, 1), uniform(2, 3), axis=1),
    pcase("broadcast_to-from-0d", ops.broadcast_to_p, uniform(), shape=(2, 3)),
    pcase("transpose-2d", ops.transpose_p, uniform(3, 4), perm=(1, 0)),
    pcase("flip-all", ops.flip_p, uniform(3, 4), axes=(0, 1)),
]


def ccase(label, function, *inputs):
    return GradientCase(label, function, inputs)


LABELS = np.array([2, 0, 1, 2])
COMPOSITE_GRADIENT_CASES = [
    # tracejit.nn
    ccase("relu", nn.relu, away_from_zero(3, 4)),
    ccase("gelu", nn.gelu, uniform(3, 4)),
    ccase("gelu-exact", lambda x: nn.gelu(x, approximate="none"), uniform(3, 4)),
    ccase("sigmoid", nn.sigmoid, uniform(3, 4, low=-4, high=4)),
    ccase("softmax", nn.softmax, uniform(3, 4)),
    ccase("softmax-axis0", lambda x: nn.softmax(x, axis=0), uniform(3, 4)),
    ccase("log_softmax", nn.log_softmax, uniform(3, 4)),
    ccase("logsumexp", nn.logsumexp, uniform(3, 4)),
    ccase("logsumexp-axis0-keepdims", lambda x: nn.logsumexp(x, 0, True), uniform(3, 4)),
    ccase("layer_norm", nn.layer_norm, uniform(4, 5)),
    ccase("layer_norm-weight-bias", nn.layer_norm, uniform(4, 5), uniform(5), uniform(5)),
    ccase("linear", nn.linear, uniform(3, 4), uniform(4, 2), uniform(2)),
    ccase("linear-no-bias", nn.linear, uniform(3, 4), uniform(4, 2)),
    ccase("cross_entropy", nn.cross_entropy, uniform(4, 3), LABELS),
    ccase("cross_entropy-sum", lambda x, y: nn.cross_entropy(x, y, "sum"), uniform(4, 3), LABELS),
    ccase("mse_loss", nn.mse_loss, uniform(3, 4), uniform(3, 4)),
    ccase("mse_loss-none", lambda x, y: nn.mse_loss(x, y, "none"), uniform(3, 4), uniform(4)),
    ccase("dropout", lambda x: nn.dropout(x, 0.5, np.random.default_rng(3)), uniform(3, 4)),
    # numpy_api composites, through the NumPy API
    ccase("mean", np.mean, uniform(3, 4)),
    ccase("mean-axis-keepdims", lambda x: np.mean(x, axis=1, keepdims=True), uniform(3, 4)),
    ccase("var", lambda x: np.var(x, axis=0), uniform(3, 4)),
    ccase("var-ddof", lambda x: np.var(x, ddof=1), uniform(3, 4)),
    ccase("std", lambda x: np.std(x, axis=-1), uniform(3, 4)),
    ccase("clip", lambda x: np.clip(x, -1.0, 1.0), uniform(3, 4)),
    ccase("clip-array-bounds", lambda x, lo: np.clip(x, lo, 1.5), uniform(3, 4), uniform(4)),
    ccase("stack", lambda x, y: np.stack([x, y], axis=1), uniform(2, 3), uniform(2, 3)),
    ccase("concatenate", lambda x, y: np.concatenate([x, y], -1), uniform(2, 3), uniform(2, 1)),
    ccase("hstack-vstack", lambda x, y: np.vstack([np.hstack([x, y])]), uniform(3), uniform(2)),
    ccase(
        "take_along_axis",
        lambda x: np.take_along_axis(x, np.array([[0, -1], [3, 3], [1, 2]]), axis=1),
        uniform(3, 4),
    ),
    ccase("take", lambda x: np.take(x, [5, -1, 5]), uniform(3, 4)),
    ccase("dot", np.dot, uniform(2, 3), uniform(3)),
    ccase("outer", np.outer, uniform(3), uniform(4)),
    ccase("dot-nd", np.dot, uniform(2, 3), uniform(4, 3, 2)),
    ccase("einsum-batched", lambda x, y: np.einsum("bij,bjk->bik", x, y),
          uniform(2, 3, 4), uniform(2, 4, 2)),
    ccase("einsum-trace", lambda x: np.einsum("ii", x), uniform(3, 3)),
    ccase("einsum-three", lambda x, y, z: np.einsum("ij,jk,k->i", x, y, z),
          uniform(2, 3), uniform(3, 4), uniform(4)),
    ccase("tensordot", lambda x, y: np.tensordot(x, y, 2), uniform(2, 3, 4), uniform(3, 4)),
    ccase("norm", np.linalg.norm, uniform(3, 4)),
    ccase("norm-matrix-1", lambda x: np.linalg.norm(x, 1), uniform(3, 4)),
    ccase("norm-vector-3", lambda x: np.linalg.norm(x, 3, axis=0), uniform(3, 4)),
    ccase("repeat-tile", lambda x: np.tile(np.repeat(x, 2, axis=1), (2, 1)), uniform(2, 3)),
    ccase("roll", lambda x: np.roll(x, 2, axis=1), uniform(2, 5)),
    ccase("cumsum", lambda x: np.cumsum(x, axis=0), uniform(4, 3)),
    ccase("cumprod", lambda x: np.cumprod(x, axis=1), away_from_zero(3, 4)),
    ccase("cumprod-with-zero", lambda x: np.cumprod(x * np.array([1.0, 0.0, 1.0])),
          away_from_zero(3)),
    ccase("maximum.accumulate", lambda x: np.maximum.accumulate(x, axis=1), uniform(3, 5)),
    ccase("minimum.accumulate", lambda x: np.minimum.accumulate(x), uniform(5, 2)),
    ccase("atleast_3d-broadcast_arrays",
          lambda x, y: operator.mul(*np.broadcast_arrays(np.atleast_3d(x), y)),
          uniform(2, 3), uniform(4, 1, 1, 1)),
    ccase("take-clip-wrap", lambda x: np.take(x, [7, -2], mode="clip") * np.take(
        x, [7, -2], axis=1, mode="wrap"), uniform(3, 4)),
    ccase("sort", lambda x: np.sort(x, axis=1) * np.arange(5), uniform(3, 5)),
    ccase("tril", np.tril, uniform(3, 4)),
    ccase("moveaxis", lambda x: np.moveaxis(x, 0, -1), uniform(2, 3, 4)),
    ccase("squeeze-expand_dims", lambda x: np.expand_dims(np.squeeze(x), 0), uniform(1, 3, 1)),
    ccase("split", lambda x: np.split(x, 2, axis=1)[1], uniform(3, 4)),
    ccase("pad", lambda x: np.pad(x, ((1, 0), (2, 1))), uniform(2, 3)),
    ccase("exp2-log2-log10", lambda x: np.exp2(x) + np.log2(x) * np.log10(x), positive(5)),
    ccase("sinh-cosh-tan", lambda x: np.sinh(x) * np.cosh(x) + np.tan(x), uniform(5, low=-1)),
    ccase("logaddexp", np.logaddexp, uniform(3, 1), uniform(4)),
    # indexing
    ccase("index-negative-step", lambda x: x[::-2], uniform(7)),
    ccase("index-mixed-steps", lambda x: x[3:0:-2, ::-1], uniform(5, 4)),
    ccase("index-int-array", lambda x: x[[0, -1, 2, 0]], uniform(5, 3)),
    ccase("index-rows-cols", lambda x: x[ROWS, COLS], uniform(5, 4)),
    ccase("index-separated-arrays", lambda x: x[[1, 0], :, [2, -1]], uniform(3, 4, 3)),
    ccase("index-mask", lambda x: x[np.array([True, False, True])], uniform(3, 2)),
    ccase("index-none-ellipsis", lambda x: x[None, ..., 1], uniform(3, 4)),
    # operators and reflected operators
    ccase("rsub-rtruediv", lambda x: (1.0 - x) / (2.0 + x * x), uniform(3, 4)),
    ccase("rpow", lambda x: 2.0**x, uniform(3, 4)),
]

GRADIENT_CASES = (
    list(_primitive_gradient_cases()) + EXTRA_PRIMITIVE_GRADIENT_CASES + COMPOSITE_GRADIENT_CASES
)


def test_gradient_cases_cover_every_differentiable_primitive():
    covered = {case.id for case in _primitive_gradient_cases()}
    assert covered == set(DIFFERENTIABLE)


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=lambda case: case.id)
def test_gradient_matches_finite_differences(case):
    check_gradients(case.function, case.inputs)


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=lambda case: case.id)
def test_float32_inputs_get_float32_gradients(case):
    inputs64 = list(case.inputs)
    inputs32 = [
        value.astype(np.float32) if i in differentiated(inputs64) else value
        for i, value in enumerate(inputs64)
    ]
    weights = np.random.default_rng(7).normal(size=np.shape(case.function(*inputs64)))
    expected = tape_gradients(case.function, inputs64, weights)
    gradients = tape_gradients(case.function, inputs32, weights.astype(np.float32))
    for gradient, reference in zip(gradients, expected):
        assert gradient.dtype == F32
        np.testing.assert_allclose(gradient, reference, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("source, target", [(F32, F64), (F64, F32), (F32, F32)], ids=str)
def test_cast_gradient_returns_to_input_dtype(source, target):
    x = tensor(uniform(2, 3).astype(source), requires_grad=True)
    weights = uniform(2, 3)
    out = ops.cast_p(x, dtype=target)
    assert out.dtype == target
    out.backward(weights)
    assert x.grad.dtype == source
    np.testing.assert_array_equal(x.grad.numpy(), weights.astype(target).astype(source))


# --- composite forward values against textbook NumPy formulas --------------------------
def _reference_layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def _reference_cross_entropy(logits, labels):
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels].mean()


NN_REFERENCES = [
    ("relu", nn.relu, lambda x: np.maximum(x, 0.0), [uniform(3, 4)]),
    (
        "gelu", nn.gelu,
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
        [uniform(3, 4)],
    ),
    (
        "gelu-exact", lambda x: nn.gelu(x, approximate="none"),
        lambda x: 0.5 * x * (1 + erf_reference(x / np.sqrt(2))), [uniform(3, 4)],
    ),
    ("erf", nn.erf, erf_reference, [uniform(3, 4)]),
    ("sigmoid", nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), [uniform(3, 4, low=-30, high=30)]),
    ("softmax", nn.softmax, lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True),
     [uniform(3, 4)]),
    ("log_softmax", nn.log_softmax, lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True)),
     [uniform(3, 4)]),
    ("logsumexp", nn.logsumexp, lambda x: np.log(np.exp(x).sum(-1)), [uniform(3, 4)]),
    ("layer_norm", nn.layer_norm, _reference_layer_norm, [uniform(4, 5), uniform(5), uniform(5)]),
    ("linear", nn.linear, lambda x, w, b: x @ w + b, [uniform(3, 4), uniform(4, 2), uniform(2)]),
    ("cross_entropy", nn.cross_entropy, _reference_cross_entropy, [uniform(4, 3), LABELS]),
    ("mse_loss", nn.mse_loss, lambda x, y: ((x - y) ** 2).mean(), [uniform(3, 4), uniform(3, 4)]),
]


@pytest.mark.parametrize("on", ["ndarray", "tensor"])
@pytest.mark.parametrize("name, function, reference, inputs", NN_REFERENCES,
                         ids=[case[0] for case in NN_REFERENCES])
def test_nn_function_matches_textbook_formula(name, function, reference, inputs, on):
    expected = reference(*inputs)
    arguments = as_tensors(inputs) if on == "tensor" else inputs
    result = function(*arguments)
    assert isinstance(result, Tensor) == (on == "tensor")
    assert_same(result, expected, rtol=1e-12)


def test_logsumexp_of_all_negative_infinity_row_is_negative_infinity():
    x = np.array([[-np.inf, -np.inf], [0.0, 0.0]])
    with np.errstate(divide="ignore"):  # log(0) on the way, as in NumPy
        result = nn.logsumexp(tensor(x))
    np.testing.assert_array_equal(result.numpy(), [-np.inf, np.log(2.0)])


def test_softmax_is_stable_for_large_logits():
    x = np.array([[1000.0, 1000.0], [-1000.0, 0.0]])
    np.testing.assert_allclose(nn.softmax(tensor(x)).numpy(), [[0.5, 0.5], [0.0, 1.0]])


def test_cross_entropy_refuses_float_labels():
    with pytest.raises(TypeError, match="labels must be integer"):
        nn.cross_entropy(tensor(uniform(4, 3)), np.array([0.0, 1.0, 2.0, 0.0]))
