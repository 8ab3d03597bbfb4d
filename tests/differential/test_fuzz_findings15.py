"""Findings of the round-15b differential fuzzer (``tests/differential/fuzz.py``): each a
minimal program, eager NumPy against ``jit`` over calls that reach compiled code, with the
arguments compared afterwards (several findings wrote into them).
"""

import numpy as np
import pytest
from real_model_checks import jitted, no_internal_errors, run_calls


# --- astype to the array's own dtype is a copy --------------------------------------------
def astype_own_dtype_then_masked_write(x):
    copied = x.astype(np.float64)
    copied[copied < 0] += 1.5
    return copied


def astype_chain_then_item_write(x):
    scaled = x * 1.0
    copied = scaled.astype(np.float64)
    copied[0] = 100.0
    return scaled, copied


def test_astype_to_the_same_dtype_copies():
    """``x.astype(x.dtype)`` returned ``x`` itself: a write into the copy went into the
    argument (and into ``scaled``), as if ``copy=False``."""
    arguments = [(np.array([-1.0, 2.0, -3.0]),), (np.arange(-3.0, 4.0),)]
    run_calls(astype_own_dtype_then_masked_write, arguments, repeats=3)
    run_calls(astype_chain_then_item_write, arguments, repeats=3)


def astype_without_copy_then_write(x):
    same = x.astype(np.float64, copy=False)
    same[0] = 5.0
    return same


def test_astype_without_copy_is_the_array():
    """``copy=False`` to the array's own dtype is ``x`` itself: the write reaches ``x``."""
    run_calls(astype_without_copy_then_write, [(np.array([-1.0, 2.0, -3.0]),)], repeats=3)


# --- np.triu / np.tril of a vector --------------------------------------------------------
def triu_of_a_vector(v):
    return np.triu(v), np.tril(v, -1)


def test_triu_of_a_vector_is_a_matrix():
    """NumPy masks a vector as the rows of an (n, n) matrix; the trace unpacked the last two
    dims of a 1-d shape (an internal error on every call, eager)."""
    f = run_calls(triu_of_a_vector, [(np.arange(1.0, 5.0),), (np.arange(7, dtype=np.int32),)],
                  repeats=3)
    no_internal_errors(f)
    run_calls(triu_of_a_vector, [(np.array(2.0),)], repeats=2)  # NumPy's TypeError


# --- hostile: Ctrl-C while LLVM compiles --------------------------------------------------
def interrupted_model(x):
    return np.tanh(x * 2.0).sum(axis=0) + x[0]


def test_keyboard_interrupt_while_compiling_reaches_the_caller(monkeypatch):
    """A KeyboardInterrupt in LLVM's compile became ``UnboundLocalError: results`` in
    ``compile_module``'s ``finally`` (an Exception): the interrupt was swallowed, the call
    ran eagerly and the function was never compiled again ('not compiled')."""
    from tracejit.codegen import llvm

    compile_part = llvm._compile_part
    interrupts = []

    def interrupted(*arguments):
        if not interrupts:
            interrupts.append(True)
            raise KeyboardInterrupt
        return compile_part(*arguments)

    monkeypatch.setattr(llvm, "_compile_part", interrupted)
    f = jitted(interrupted_model)
    x = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
    with pytest.raises(KeyboardInterrupt):
        f(x)
    assert interrupts
    for _ in range(3):
        np.testing.assert_allclose(f(x), interrupted_model(x), rtol=1e-12)
    assert f.stats()["compiled_calls"] > 0, f.explain()
    no_internal_errors(f)


# --- hostile arguments: run as NumPy does (probed; all agree, kept as a table) ------------
def hostile_model(x):
    y = x + 1
    y[0] = 5
    return y, x.mean(axis=0), np.tanh(x * 2) - x[-1]


class _Subclass(np.ndarray):
    pass


def _memmap(directory):
    array = np.memmap(directory / "m.dat", dtype=np.float64, mode="w+", shape=(3, 2))
    array[:] = np.arange(6.0).reshape(3, 2)
    return array


HOSTILE = {
    "object": lambda _: np.arange(6.0).reshape(3, 2).astype(object),
    "structured": lambda _: np.zeros(3, dtype=[("a", "f8"), ("b", "i4")]),
    "complex": lambda _: np.arange(6.0).reshape(3, 2) * (1 + 2j),
    "float16": lambda _: np.arange(6.0, dtype=np.float16).reshape(3, 2),
    "datetime64": lambda _: np.array(["2020-01-01", "2021-06-01"], dtype="datetime64[D]"),
    "timedelta64": lambda _: np.arange(6).astype("timedelta64[s]").reshape(3, 2),
    "matrix": lambda _: np.matrix(np.arange(6.0).reshape(3, 2)),
    "masked": lambda _: np.ma.masked_array(np.arange(6.0).reshape(3, 2), mask=[[0, 1]] * 3),
    "subclass": lambda _: np.arange(6.0).reshape(3, 2).view(_Subclass),
    "memmap": _memmap,
    "big-endian": lambda _: np.arange(6.0).reshape(3, 2).astype(">f8"),
    "strings": lambda _: np.array([["a", "b"], ["c", "d"]]),
}


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own warning
def test_hostile_arguments_run_as_numpy_does(tmp_path):
    for name, make in HOSTILE.items():
        f = run_calls(hostile_model, [lambda make=make: (make(tmp_path),)], repeats=2)
        no_internal_errors(f)
        assert f.stats()["compiled_calls"] == 0, name


# --- +x is a new array; x.copy(order=...) traces ------------------------------------------
def positive_then_write(x):
    y = +x
    z = np.positive(x)
    y[0] = 99.0
    z[-1] += 1
    return x, y, z


def copy_in_fortran_order(x):
    y = x.copy(order="F")
    y[0, 0] = 99.0
    return x, y


def test_positive_is_a_new_array():
    """``+x`` and ``np.positive(x)`` returned ``x`` itself: writes into the result went into
    the argument."""
    run_calls(positive_then_write, [(np.arange(6.0).reshape(2, 3),), (np.arange(4),)],
              repeats=3)


def test_copy_with_an_order_compiles():
    """``x.copy(order="F")``: the method took no ``order`` (an internal error, eager)."""
    f = run_calls(copy_in_fortran_order, [(np.arange(6.0).reshape(2, 3),)], repeats=3)
    no_internal_errors(f)


# --- a 0-d array updated in place stays an array ------------------------------------------
def zero_d_in_place(x):
    total = x.sum(keepdims=True).reshape(())
    total += 1
    count = np.zeros((), np.int64)
    count += x.shape[0]
    return total, count


def test_zero_d_array_updated_in_place_stays_an_array():
    """``total += 1`` on a 0-d array came back as a NumPy scalar (the ufunc's result type),
    not the 0-d array NumPy writes into."""
    run_calls(zero_d_in_place, [(np.arange(4.0),), (np.arange(7.0),)], repeats=3)


# --- an element read is a copy: a later write into its array does not reach it ------------
def element_read_then_write(x):
    y = x.copy()
    old = y[0]
    y[0] = 5.0
    return y, old, y[0] - old


def swap_elements(x):
    y = x.copy()
    y[0, 0], y[0, 1] = y[0, 1], y[0, 0]
    return y


def test_element_reads_are_copies():
    """``old = y[0]`` is a NumPy scalar, a copy. With view-writes work in progress in the tree
    (read again after a write into the root, 15b), ``old`` became 5.0 and a 0-d array, and the
    swap kept one value twice; at the time of this test compiled code agreed with NumPy or ran
    eagerly."""
    run_calls(element_read_then_write, [(np.arange(4.0),)], repeats=3)
    run_calls(swap_elements, [(np.arange(6.0).reshape(2, 3),)], repeats=3)


# --- cumsum and cumprod of a 0-d value ----------------------------------------------------
def running_of_a_0d_value(x):
    spread = np.std(x)
    return (np.cumprod(spread * 0.5, axis=0), np.cumsum(x.sum(), axis=-1),
            np.cumsum(np.float32(2.0) * x[0], axis=0))


def cumsum_of_a_0d_value_past_its_axis(x):
    return np.cumsum(x.sum(), axis=1)


def test_cumsum_and_cumprod_of_a_0d_value():
    """NumPy scans a 0-d value as one element (``[s]``); the trace raised AxisError for
    any axis, an internal error and eager on every call."""
    arguments = [(np.arange(6, dtype=np.int32).reshape(2, 3),), (np.linspace(-1, 1, 5),)]
    f = run_calls(running_of_a_0d_value, arguments, repeats=3)
    no_internal_errors(f)
    run_calls(cumsum_of_a_0d_value_past_its_axis, arguments[:1], repeats=2)  # AxisError


# --- an axis out of bounds is NumPy's AxisError, the user's -------------------------------
def sum_of_a_dot_over_its_last_axis(a, b):
    return np.maximum(a @ b, 0).sum(axis=-1)


def test_axis_out_of_bounds_is_numpys_error():
    """``v @ v`` is 0-d, so ``.sum(axis=-1)`` raises NumPy's AxisError; the trace raised its
    own ShapeError, counted as an internal error."""
    f = run_calls(sum_of_a_dot_over_its_last_axis, [(np.ones(3), np.ones(3))], repeats=2)
    no_internal_errors(f)
    g = run_calls(sum_of_a_dot_over_its_last_axis, [(np.ones((2, 3)), np.ones((3, 4)))],
                  repeats=3)
    no_internal_errors(g)


# --- max/min with initial of an empty array keep its dtype --------------------------------
def extremes_with_initial(x):
    return (np.max(x, axis=0, initial=-3), np.min(x, initial=7),
            np.max(x, axis=None, where=x > 0, initial=-100))


def test_empty_max_with_initial_keeps_the_dtype():
    """Of an empty int32 or bool array, ``np.max(x, initial=-3)`` came back int64 (the
    empty reduction was a sum, whose accumulator widens) where NumPy gives int32 or bool."""
    empty = [(np.zeros((0, 3), np.int32),), (np.zeros((0, 3), bool),),
             (np.zeros((0, 3), np.float32),)]
    run_calls(extremes_with_initial, empty + [(np.arange(-4, 2, dtype=np.int32).reshape(2, 3),)],
              repeats=2)


# --- hostile: an argument that contains itself ---------------------------------------------
def ignores_its_first_argument(tree, x):
    return x * 2


def test_an_argument_that_contains_itself_runs_eagerly():
    """``l = []; l.append(l)`` (or a list nested 3000 deep) as an argument: flattening the
    arguments recursed until RecursionError, an internal traceback where NumPy runs."""
    cyclic = []
    cyclic.append(cyclic)
    deep = np.ones(2)
    for _ in range(3000):
        deep = [deep]
    f = jitted(ignores_its_first_argument)
    for tree in (cyclic, deep, cyclic):
        np.testing.assert_array_equal(f(tree, np.ones(2)), np.full(2, 2.0))
    assert f.stats()["eager_calls"] == {"arguments nested too deeply": 3}, f.stats()


def positive_of_scalars(x, labels):
    return +x.sum(), +x[0], +(labels @ labels), np.positive(x.max())


def test_positive_of_a_numpy_scalar_is_a_numpy_scalar():
    """``+x.sum()`` and ``+(y @ y)`` came back as 0-d arrays: ``__pos__`` called the
    composite directly, past the ufunc call that keeps NumPy scalars scalars."""
    run_calls(positive_of_scalars, [(np.arange(3.0), np.arange(4, dtype=np.int32))],
              repeats=3)


# --- np.average with an empty result raises as NumPy does -----------------------------------
def average_of_rows(x):
    return np.average(x, axis=-1)


def test_average_with_an_empty_result_raises():
    """NumPy's average divides ``a.size`` by the result's size even when it does not return
    it: ZeroDivisionError for a (0, 31) array averaged over its last axis. Compiled code
    returned an empty array."""
    run_calls(average_of_rows, [(np.ones((3, 31)),), (np.ones((0, 31)),), (np.ones((2, 0)),)],
              repeats=2)


# --- a float32 product that overflows inside a sum ---------------------------------------------
def rows_times_weights(x, w):
    out = np.zeros((x.shape[0], w.shape[1]), np.float32)
    for t in range(x.shape[0]):
        out[t] = x[t] @ w
    return out


@pytest.mark.xfail(strict=True, reason="fused multiply-add keeps -3.07 * 3e38 finite where "
                   "NumPy's vector @ matrix rounds it to -inf first (inf + -inf: nan); NumPy's "
                   "own matrix @ matrix of the same rows fuses too and gives inf "
                   "(docs/sharp_bits.md)")
def test_float32_product_overflowing_in_a_sum():
    x = np.tile(np.array([[0.5, -np.inf, -3.0739403]], np.float32), (4, 1))
    w = np.array([[1.0], [-3.8280475], [3.0e38]], np.float32)
    run_calls(rows_times_weights, [(x, w)], repeats=2)


# --- argmax of an empty array raises, after a loop too ---------------------------------------
def argmax_after_a_loop(x, w):
    out = np.empty((x.shape[0], w.shape[1]))
    h = np.zeros(w.shape[1])
    for t in range(x.shape[0]):
        h = np.maximum(x[t] @ w - h, 0)
        out[t] = h
    return int(np.argmax(out)), np.argmin(out, axis=0)


def test_argmax_of_an_empty_array_raises():
    """With ``w`` of 0 columns the loop's buffer is empty: NumPy raises 'attempt to get
    argmax of an empty sequence'; the compiled program (the trace leaves a captured loop's
    values to it) returned 0."""
    arguments = [(np.ones((5, 3)), np.ones((3, 2))), (np.ones((17, 17)), np.ones((17, 0))),
                 (np.ones((4, 3)), np.ones((3, 0)))]
    run_calls(argmax_after_a_loop, arguments, repeats=2)


def test_argmax_over_dynamic_lengths_compiles_once_per_bucket():
    """The empty check does not pin the length: 5..8 share one bucket and one compile."""
    f = jitted(lambda x: np.argmax(x, axis=-1), dynamic=True)
    for length in (5, 6, 7, 8):
        x = np.cos(np.arange(3.0 * length)).reshape(3, length)
        np.testing.assert_array_equal(f(x), np.argmax(x, axis=-1))
    assert f.stats()["compiles"] == 1, f.explain()


# --- einsum of operands whose labelled dims differ ---------------------------------------------
def rowwise_dot(w, v):
    return np.einsum("ij,ij->i", w, v)


def test_einsum_of_mismatched_empty_operands_raises():
    run_calls(rowwise_dot, [(np.ones((3, 2)), np.ones((3, 2))), (np.ones((0, 13)),
                                                                np.ones((0, 0)))], repeats=2)
