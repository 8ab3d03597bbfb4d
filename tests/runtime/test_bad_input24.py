"""Bad input, round 24 (helper-191): arguments compiled code cannot hold run eagerly with a
message that starts at the user's function and names the parameter; the result is
NumPy's (or NumPy's exception).

Probed and found right (no change): object, str, bytes, datetime64, timedelta64, complex,
structured, float16, longdouble, masked, matrix and subclass arrays; shapes that mismatch
inside a compiled variant (matmul, broadcasting, a loop reading past the shorter argument,
a gather past the end) raise NumPy's exception; eight processes (spawn and fork) compiling
the same key at once leave one entry that ``tracejit cache verify`` passes.
"""

import warnings

import numpy as np
import pytest

import tracejit as tj


def scaled(x, params):
    return x * 2 + params["w"]


REFUSED = {
    "object": (np.array([1.0, 2.0], dtype=object), "array of object"),
    "datetime": (np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"),
                 "array of datetime64[D]"),
    "complex": (np.array([1 + 2j, 3j]), "array of complex128"),
    "float16": (np.ones(2, np.float16), "float16 array"),
    "byte_order": (np.ones(2, ">f8"), "non-native byte order"),
    "matrix": (np.matrix([[1.0, 2.0]]), "ndarray subclass"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
@pytest.mark.parametrize("where", ["x", "params"])
def test_a_refused_argument_is_named_after_the_users_line(case, where):
    value, text = REFUSED[case]
    compiled = tj.jit(scaled, cache="memory")
    plain = np.ones(2)
    x, params = (value, {"w": plain}) if where == "x" else (plain, {"w": value})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = scaled(x, params)
        except Exception as error:  # noqa: BLE001 - NumPy's exception is the expectation
            with pytest.raises(type(error)):
                compiled(x, params)
        else:
            got = compiled(x, params)
            assert type(got) is type(want) and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    reason = compiled.explain()  # (a call that raised counts as raised, not as eager)
    line = f"{scaled.__code__.co_filename}:{scaled.__code__.co_firstlineno}: "
    named = "argument `x` of scaled" if where == "x" else (
        "an entry of argument `params` of scaled")
    assert line + named in reason and text in reason, reason


def loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def test_a_refused_argument_of_a_differentiated_function_names_the_users_function():
    # value_and_grad's wrapper lives in tracejit: the message named runtime/functional.py
    step = tj.jit(tj.value_and_grad(loss), cache="memory")
    value, gradient = step(np.ones((3, 2)), np.ones((4, 3), np.float16))
    want_value, want_gradient = tj.value_and_grad(loss)(np.ones((3, 2)),
                                                        np.ones((4, 3), np.float16))
    assert value == want_value
    np.testing.assert_array_equal(gradient, want_gradient)
    line = f"{loss.__code__.co_filename}:{loss.__code__.co_firstlineno}: argument `x` of loss"
    assert line in step.explain(), step.explain()


@pytest.mark.parametrize("dtype", [np.int64, np.int32, bool])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_jit_value_and_grad_of_an_integer_argument_raises_as_eagerly(dtype, argnums):
    # Compiled, the gradient with respect to an int array came out as zeros of its dtype
    # where value_and_grad raises TypeError (its arguments must be floating point)
    step = tj.jit(tj.value_and_grad(loss, argnums=argnums), cache="memory")
    w, x = np.ones((3, 2), dtype), np.ones((4, 3))
    with pytest.raises(TypeError, match="floating point"):
        tj.value_and_grad(loss, argnums=argnums)(w, x)
    for _ in range(3):
        with pytest.raises(TypeError, match="floating point"):
            step(w, x)
    value, gradient = step(w.astype(np.float64), x)  # and a float call still compiles
    want_value, want_gradient = tj.value_and_grad(loss, argnums=argnums)(
        w.astype(np.float64), x)
    assert value == want_value
    gradient, want_gradient = (gradient, want_gradient) if argnums == 0 else (
        gradient[0], want_gradient[0])
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-12)
