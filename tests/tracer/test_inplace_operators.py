"""Every augmented assignment on an array is in place, as in NumPy: the caller's argument,
another name for the buffer and the returned values all see it, compiled and traced, and
a result that cannot be cast back raises NumPy's error. (``**=``, ``//=``, ``%=``, ``@=``,
the bitwise and shift forms fell back to ``x = x op y`` and left other names stale.)"""

import numpy as np
import pytest

from tracejit import jit

FLOAT_OPS = ["+=", "-=", "*=", "/=", "**=", "//=", "%="]
INT_OPS = ["+=", "-=", "*=", "//=", "%=", "**=", "&=", "|=", "^=", "<<=", ">>="]


def _function(op, tmp_path, name):
    """``f(x, y)``: updates ``x`` in place with ``op`` through an alias; written to a file
    (jit reads the source)."""
    path = tmp_path / f"{name}.py"
    path.write_text(f"""
def f(x, y):
    alias = x
    alias {op} y
    return x.sum(), alias[:2] * 1
""")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["f"]


def _check(function, make_inputs):
    compiled = jit(cache="memory")(function)
    for _ in range(3):  # traced, then compiled
        eager_args, jit_args = make_inputs(), make_inputs()
        want = function(*eager_args)
        got = compiled(*jit_args)
        for left, right in zip(got, want):
            assert np.asarray(left).dtype == np.asarray(right).dtype
            np.testing.assert_array_equal(left, right)
        np.testing.assert_array_equal(jit_args[0], eager_args[0])  # the caller's array
    stats = compiled.stats()
    assert stats["compiled_calls"] >= 1 and not stats["eager_calls"], stats
    return compiled


@pytest.mark.parametrize("op", FLOAT_OPS)
def test_float_arrays(op, tmp_path):
    function = _function(op, tmp_path, f"float_{FLOAT_OPS.index(op)}")
    _check(function, lambda: (np.array([0.5, 1.5, -2.0, 3.0]), 1.5))
    _check(function, lambda: (np.array([[0.5, 1.5], [-2.0, 3.0]]), np.array([2.0, -0.5])))


@pytest.mark.parametrize("op", INT_OPS)
def test_int_arrays(op, tmp_path):
    function = _function(op, tmp_path, f"int_{INT_OPS.index(op)}")
    _check(function, lambda: (np.array([7, 12, 5, 9], np.int64), 2))
    _check(function, lambda: (np.array([-7, 12, 0, 2 ** 40], np.int64),
                              np.array([3, 1, 63, 2], np.int64)))


def test_matmul_in_place(tmp_path):
    function = _function("@=", tmp_path, "matmul")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 3))
    _check(function, lambda: (np.arange(6.0).reshape(2, 3), w))


@pytest.mark.parametrize("op", ["**=", "//=", "%="])
def test_a_float_result_into_an_int_array_raises_as_numpy_does(op, tmp_path):
    function = _function(op, tmp_path, f"cast_{['**=', '//=', '%='].index(op)}")
    compiled = jit(cache="memory")(function)
    with pytest.raises(TypeError) as eager:
        function(np.array([1, 2, 3]), 1.5)
    with pytest.raises(TypeError) as traced:
        compiled(np.array([1, 2, 3]), 1.5)
    assert type(traced.value) is type(eager.value)
