"""Calls NumPy defines to return a new array (concatenate, stack, hstack, vstack of one
array, tile, repeat) return one traced and compiled: writing into the result, inside the
function or after it returns, leaves the argument alone (they returned the argument itself
or a view of it: a write changed the caller's array). ``np.ascontiguousarray`` of an
argument is the caller's array or a copy depending on its layout at run time: writes into
it run eagerly."""

import numpy as np
import pytest

import tracejit

MAKERS = {
    "concatenate": lambda w: np.concatenate([w]),
    "concatenate_flat": lambda w: np.concatenate([w], axis=None),
    "stack": lambda w: np.stack([w])[0],
    "hstack": lambda w: np.hstack([w]),
    "vstack": lambda w: np.vstack([w]),
    "tile": lambda w: np.tile(w, 1),
    "tile_2": lambda w: np.tile(w, (2, 1)),
    "repeat": lambda w: np.repeat(w, 1, axis=0),
    "array": lambda w: np.array(w),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_writing_into_the_result_inside_the_function(name):
    make = MAKERS[name]

    def written(w):
        c = make(w)
        c[0] = -1.0
        return w.sum(), c

    _same_on_every_call(written, name)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_writing_into_the_returned_result(name):
    make = MAKERS[name]

    def returned(w, dw):
        w -= 0.5 * dw  # (an argument updated in place: returned views of it are real)
        return make(w)

    jitted = tracejit.jit(returned, cache=False)
    for _ in range(3):
        w_eager, w_jit = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)
        out_eager, out_jit = returned(w_eager, np.ones((2, 3))), jitted(w_jit, np.ones((2, 3)))
        np.testing.assert_array_equal(out_jit, out_eager)
        out_eager[...] = -1.0
        out_jit[...] = -1.0
        np.testing.assert_array_equal(w_jit, w_eager)
    assert jitted.stats()["compiled_calls"] == 2, jitted.stats()


def _same_on_every_call(function, name):
    jitted = tracejit.jit(function, cache=False)
    for _ in range(3):
        w_eager, w_jit = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)
        want, got = function(w_eager), jitted(w_jit)
        assert got[0] == want[0], name
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(w_jit, w_eager)
    assert jitted.stats()["compiled_calls"] == 2, (name, jitted.stats())


def _written_contiguous(v):
    c = np.ascontiguousarray(v.T)
    c[0] = -1.0
    return c.sum()


def _written_c_ordered(v):
    c = np.asarray(v.T, order="C")
    c[0] = -1.0
    return c.sum()


def _read_contiguous(v):
    return np.ascontiguousarray(v.T).sum(axis=1) * 2.0


@pytest.mark.parametrize("function", [_written_contiguous, _written_c_ordered])
@pytest.mark.parametrize("layout", ["C", "F", "row", "reversed"])
def test_ascontiguousarray_of_an_argument_is_its_array_or_a_copy_as_numpys(layout, function):
    """NumPy returns ``v.T`` itself, a view of the caller's array, when it is C-contiguous
    (``v`` Fortran-ordered, or one row) and a copy otherwise (``np.asarray(order="C")``
    too); compiled calls take every
    layout, so a write into the result runs eagerly (it reaches the caller's array exactly
    when NumPy's does), and a read compiles."""
    make = {"C": lambda: np.arange(6.0).reshape(2, 3),
            "F": lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3)),
            "row": lambda: np.arange(3.0).reshape(1, 3),
            "reversed": lambda: np.arange(6.0).reshape(2, 3)[::-1]}[layout]
    written, read = (tracejit.jit(f, cache=False) for f in (function, _read_contiguous))
    for _ in range(3):
        v_eager, v_jit = make(), make()
        assert written(v_jit) == function(v_eager)
        np.testing.assert_array_equal(v_jit, v_eager)
        np.testing.assert_array_equal(read(make()), _read_contiguous(make()))
    assert written.stats()["compiled_calls"] == 0, written.stats()
    assert read.stats()["compiled_calls"] == 2, read.stats()
