"""The native array guard (codegen/array_guard.py) decides exactly what the Python checks
decided: every array a compiled call gets is exactly an ndarray of the compiled dtype,
rank and static dims, and anything else either takes the full Python checks (an equal
dtype that is another object) or misses (then eager or a new variant), never a wrong
answer or a crash."""

import pickle

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen import array_guard


def _affine(x, w, b):
    return np.tanh(x @ w + b)


def _inputs(rows=5, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((rows, 3)).astype(dtype),
            rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(4).astype(dtype))


def _compiled(function=_affine, **options):
    compiled = jit(cache="memory", **options)(function)
    compiled(*_inputs())
    compiled(*_inputs())
    return compiled


def test_the_hit_path_checks_arrays_natively():
    compiled = _compiled()
    (entry,) = compiled._entries
    assert "(leaves, _A" in entry.source  # one native call for the three arrays
    before = compiled.stats()["compiled_calls"]
    np.testing.assert_allclose(compiled(*_inputs()), _affine(*_inputs()), rtol=1e-5)
    assert compiled.stats()["compiled_calls"] == before + 1


@pytest.mark.parametrize("change", ["subclass", "matrix", "float64", "big_endian", "list",
                                    "rank", "dim", "scalar", "zero_rows"])
def test_anything_else_is_eager_or_another_variant_never_wrong(change):
    compiled = _compiled()
    x, w, b = _inputs()

    class Sub(np.ndarray):
        pass

    changed = {
        "subclass": lambda: (x.view(Sub), w, b),
        "matrix": lambda: (np.asmatrix(x), w, b),
        "float64": lambda: (x.astype(np.float64), w, b),
        "big_endian": lambda: (x.astype(">f4"), w, b),
        "list": lambda: (x.tolist(), w, b),
        "rank": lambda: (x[None], w, b),
        "dim": lambda: (x, w[:, :3], b[:3]),
        "scalar": lambda: (x, w, np.float32(0.5)),
        "zero_rows": lambda: (x[:0], w, b),
    }[change]()
    expected = _affine(*changed)
    got = compiled(*changed)
    assert type(got) is type(expected)
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_an_equal_dtype_that_is_another_object_still_runs_compiled():
    compiled = _compiled()
    x, w, b = (pickle.loads(pickle.dumps(value)) for value in _inputs())
    calls = compiled.stats()["compiled_calls"]
    np.testing.assert_allclose(compiled(x, w, b), _affine(x, w, b), rtol=1e-5)
    assert compiled.stats()["compiled_calls"] == calls + 1
    assert compiled.stats()["compiles"] == 1


def test_non_contiguous_arrays_match_and_are_laid_out():
    compiled = _compiled()
    x, w, b = _inputs()
    wide = np.asfortranarray(x)
    strided = np.repeat(b, 2)[::2]
    np.testing.assert_allclose(compiled(wide, w, strided), _affine(wide, w, strided), rtol=1e-5)


def test_symbolic_dims_are_bound_after_the_native_check():
    compiled = jit(cache="memory", dynamic=True)(_affine)
    for rows in (1, 2, 3, 5, 7, 8, 13, 0):
        x, w, b = _inputs(rows)
        np.testing.assert_allclose(compiled(x, w, b), _affine(x, w, b), rtol=1e-5, atol=1e-6)
    sources = [entry.source for entry in compiled._entries]
    assert any("(leaves, _A" in source and ".shape" in source for source in sources)
    # a dim shared by two arrays must still be equal: w's rows against x's columns
    x, w, b = _inputs(6)
    with pytest.raises(ValueError):
        _affine(x[:, :2], w, b)
    with pytest.raises(ValueError):
        compiled(x[:, :2], w, b)


def test_matrix_multiplies_as_a_matrix():
    """np.matrix's * is a matrix product: compiled as ndarrays it was elementwise."""
    compiled = jit(cache="memory")(lambda a, b: a * b)
    a, b = np.asmatrix(np.arange(4.0).reshape(2, 2)), np.asmatrix(np.eye(2) * 2)
    for _ in range(3):
        assert type(compiled(a, b)) is np.matrix
        np.testing.assert_array_equal(compiled(a, b), a * b)
    masked = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    assert compiled(masked, masked).sum() == (masked * masked).sum() == 10.0


def test_zero_d_arrays():
    compiled = jit(cache="memory")(lambda x, s: x * s)
    x, s = np.arange(4.0), np.array(2.5)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x, s), x * s)
    np.testing.assert_array_equal(compiled(x, np.array([2.5])), x * np.array([2.5]))


def test_the_table_names_what_the_guard_compiled_for():
    table = array_guard.make_table([(2, np.float32, (4, array_guard.ANY_DIM)),
                                    (0, np.bool_, ())])
    assert table.tolist() == [2, 2, id(np.ndarray), id(np.dtype(np.float32)), 2, 4, -1,
                              0, id(np.ndarray), id(np.dtype(np.bool_)), 0]
    match = array_guard.matcher()
    four = np.zeros((4, 9), np.float32)
    assert match((np.bool_(True), None, four), table) is False  # a NumPy scalar: no array
    assert match((np.array(True), None, four), table) is True
    assert match((np.array(True), None, four[:3]), table) is False
    assert match((np.array(True), None, four), np.zeros(1, np.int64)) is True  # no arrays
