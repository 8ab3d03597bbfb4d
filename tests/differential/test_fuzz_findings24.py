"""Round 24 (helper-191): writes through views, carried loops with data-dependent breaks,
reductions over axis tuples, NumPy 2 promotion in place, gradients of Tensors.

``fuzz24.py`` (beside ``fuzz23.py``) writes whole functions with their own argument
makers: ``view_writes`` (slices, steps, reversed, ``.T``, ``swapaxes``, reshape/ravel views
that are copies for some layouts, ``np.broadcast_to``, written in place once or in a
loop; results' identity compared), ``carry_break`` (a float array, a Python float, an int,
a bool array, a 0-d array and a swapped pair carried at once, left on data by ``break``,
``while`` tests and ``for ... else``), ``reduce_axes`` (3-d reductions over axis tuples,
keepdims, broadcasting ``where=`` masks, ``initial``, ``ddof``), ``promote_inplace``
(in-place arithmetic and ``out=`` under NumPy 2's promotion, exact result dtypes) and
``tensor_grad`` (``jit(value_and_grad(loss))`` and ``jit(loss)`` on Tensors with
``.backward()`` against eager ``value_and_grad`` and central differences). Found:

* ``np.var``/``np.std`` with ``where=`` (and NumPy 2's ``correction=``): an internal error
  (``var() got an unexpected keyword argument 'where'``), every call eager; ``x.var(0,
  np.float64)`` took the dtype for ``ddof``;
* the first call of a new bucket of lengths returned float64 from a float32 loop (``while
  i < n: k = i % len(x); h = h + x[k] / (i + 1)``): the trips after the two traced ones
  ran through the loop's NumPy reference with the carried counter as a 0-d int64 array,
  which NumPy 2 does not treat as weak (``ops.control.run_body`` now holds weak scalars as
  Python numbers, as the trace does); compiled calls were right;
* ``np.median(a, axis=(2, 0))`` of a (3, 0, 2) array: NumPy raises ValueError (its
  reshape to ``kept + (-1,)`` cannot infer -1 at size 0), compiled code returned an empty
  array;
* ``return np.broadcast_to(base[:, :1], base.shape), base`` with ``base`` made in the
  call: the traced (first) call returned a writable copy apart from ``base`` where NumPy
  and compiled calls give a read-only view of it (``argument_views.broadcasts_of_results``);
* not a wrong result: ``v.fill(value)`` of a traced array ran eagerly; it now compiles as
  ``v[...] = value`` (an argument's ``x.fill`` stays refused by the front end, eager);
* a lambda in a list spanning lines near the top of its file (``fs = [lambda a: a + 1,``
  with ``lambda a: a * 10`` on the next line) compiled another lambda's body: the lambda's
  own lines were searched with their own numbering, so line 2 of the snippet was taken for
  line 2 of the file (found writing a probe, not by a generator: the wrong result showed as
  a "shape differs" in the probe's own check).

``test_fuzz24_sample`` runs a seeded sample of the generators.
"""

import importlib.util
import os
import sys

import numpy as np
import pytest

import tracejit as tj

sys.path.insert(0, os.path.dirname(__file__))
import fuzz23  # noqa: E402 - beside this file
import fuzz24  # noqa: E402


def _agree(function, *calls, rtol=1e-12):
    return fuzz23.agree(function, *calls, rtol=rtol)


# --- np.var / np.std with where= ----------------------------------------------------------------
@pytest.mark.parametrize("reduction", [
    lambda a, m: np.var(a, axis=(1, -1), where=m[:, :1], ddof=1),
    lambda a, m: np.std(a, axis=0, where=m, keepdims=True),
    lambda a, m: np.var(a, where=m),
    lambda a, m: a.std(axis=1, where=m, ddof=1),
    lambda a, m: np.var(a.astype(np.float32), axis=-1, where=m, keepdims=True),
    lambda a, m: np.std(a > 0, axis=(0, 2), where=m),
    lambda a, m: np.var(a, axis=1, correction=1),
    lambda a, m: a.var(0, np.float64, None, 1),  # positional dtype, out, ddof as NumPy's
], ids=["axes_ddof", "std_keepdims", "all", "method", "float32", "bool", "correction",
        "positional"])
def test_var_and_std_with_where_compile_as_numpy(reduction):
    rng = np.random.default_rng(0)
    calls = []
    for shape in [(2, 3, 4), (2, 3, 4), (3, 1, 5), (0, 2, 3), (2, 3, 4), (1, 1, 1)]:
        calls.append((rng.standard_normal(shape), rng.random(shape) < 0.5))
    compiled = _agree(reduction, *calls, rtol=1e-6)
    assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()


def test_var_with_mean_keyword_runs_eagerly_with_a_reason():
    def centered(a):
        return np.var(a, axis=1, mean=a.mean(axis=1, keepdims=True))

    a = np.arange(6.0).reshape(2, 3)
    compiled = _agree(centered, (a,), (a * 2,))
    assert "mean=" in " ".join(compiled.stats()["eager_reasons"].values())


# --- np.median over several axes of an empty array --------------------------------------------
@pytest.mark.parametrize("axis", [(2, 0), (0, 1), (1, 2), (-1, -3), (0, 1, 2)])
def test_median_over_axes_of_an_empty_array_raises_where_numpy_does(axis):
    # NumPy merges the axes by reshape(kept + (-1,)), which a size-0 array with a kept dim
    # of 0 cannot infer (ValueError); compiled code merged by the known product
    def median(a):
        return np.median(a, axis=axis)

    full = np.arange(30.0).reshape(3, 5, 2)
    _agree(median, (full,), (np.ones((3, 0, 2)),), (np.ones((0, 4, 2)),), (full[::-1],),
           (np.ones((2, 3, 0)),))


# --- x.fill through views ----------------------------------------------------------------------
def fill_a_strided_view(x):
    base = x.copy()
    view = base[1:, ::2]
    view.fill(0.25)
    return base, view


def fill_a_transpose_with_a_traced_value(x):
    base = x.copy()
    base.T.fill(x.sum())
    return base


def fill_then_write_rows(x, n):
    out = np.empty((n, x.shape[1]), x.dtype)
    out.fill(-1)
    for i in range(1, n):
        out[i] = x[i % len(x)] * 2
    return out


def fill_an_int_copy_with_a_float(x):
    ints = x.astype(np.int32)
    ints.fill(2.7)  # cast as NumPy casts it: 2
    return ints


def fill_with_a_sequence(x):
    base = x.copy()
    base.fill(np.ones(1))  # NumPy's ValueError
    return base


@pytest.mark.parametrize("function", [fill_a_strided_view, fill_a_transpose_with_a_traced_value,
                                      fill_then_write_rows, fill_an_int_copy_with_a_float,
                                      fill_with_a_sequence])
def test_fill_compiles_as_a_write_of_every_element(function):
    # view_writes drew v.fill(0.25): 'x.fill of a traced array is not supported' (eager)
    x = np.arange(12.0).reshape(3, 4)
    calls = [(x,), (x[::-1],), (np.asfortranarray(x),)]
    if function is fill_then_write_rows:
        calls = [(x, 5), (x, 5), (x[::-1], 7), (x, 1)]
    compiled = _agree(function, *calls)
    if function is not fill_with_a_sequence:
        assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()


# --- a broadcast of another result --------------------------------------------------------------
BROADCASTS = {
    "column": lambda base: np.broadcast_to(base[:, :1], base.shape),
    "stacked": lambda base: np.broadcast_to(base, (4,) + base.shape),
}  # (base[0] broadcast, or a broadcast's .T: compiled calls copy, scratch/repro_broadcast_T.py)


@pytest.mark.parametrize("view", BROADCASTS.values(), ids=BROADCASTS.keys())
def test_a_broadcast_of_another_result_is_its_read_only_view_on_the_traced_call(view):
    # fuzz24 view_writes (seed 20024): the traced call returned the broadcast as a writable
    # copy apart from base (the primitive's trace value is a copy); compiled calls and
    # NumPy give a read-only view of base
    def broadcast_of_a_result(x):
        base = x * 2
        return view(base), base

    compiled = tj.jit(broadcast_of_a_result, cache="memory")
    for x in (np.arange(6.0).reshape(3, 2), np.ones((3, 2)), np.arange(6.0).reshape(3, 2)):
        got, want = compiled(x), broadcast_of_a_result(x)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            assert g.flags.writeable == w.flags.writeable and g.strides == w.strides
        assert np.shares_memory(*got) and np.shares_memory(*want)
    assert compiled.stats()["compiled_calls"] == 2


# --- a carried counter is a Python int in the trips after the traced ones ------------------------
def counter_divides(x, n):
    h = x[0] * 0
    i = 0
    while i < n:
        h = h + x[i % len(x)] / (i + 1)  # i % len(x): the body holds a guard on the dim
        i += 1
    return h


def test_a_carried_counter_stays_weak_in_the_trips_after_the_traced_ones():
    # The first call of a bucket of lengths ran its trips after the two traced ones
    # through the loop's NumPy reference (ops.control.run_body), which carried the weak
    # counter as a 0-d int64 array: float32 / it is float64 in NumPy 2, so that call
    # returned h in float64 (later, compiled calls gave float32)
    rng = np.random.default_rng(1)
    calls = [(rng.standard_normal(shape).astype(np.float32), n) for shape, n in [
        ((5, 3), 3), ((5, 3), 9), ((7, 3), 3), ((7, 3), 6), ((5, 1), 9), ((6, 2), 9)]]
    _agree(counter_divides, *calls, rtol=1e-5)


# --- a lambda among lambdas -----------------------------------------------------------------------
LAMBDAS = """\
import numpy as np
fs = [lambda a: a + 1,
      lambda a: a * 10,
      lambda a: np.sum(a) - 5]


def make():
    if True:
        if True:
            return (lambda a: a + 2,lambda a: 2 * a), {"x": lambda a: a - 1,
                                                      "y": lambda a: a * 3}
"""


def test_each_lambda_of_a_list_near_the_top_of_its_file_compiles_its_own_body(tmp_path):
    path = tmp_path / "lambdas_near_top.py"
    path.write_text(LAMBDAS)
    spec = importlib.util.spec_from_file_location("lambdas_near_top", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pair, table = module.make()
    a = np.arange(3.0)
    for function in module.fs + list(pair) + list(table.values()):
        compiled = _agree(function, (a,), (a * 2,), (a[::-1],))
        assert compiled.stats()["compiled_calls"] >= 1, compiled.explain()


# --- the generators' sample ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("family", sorted(fuzz24.FAMILIES))
def test_fuzz24_sample(family, seed):
    program = fuzz24.draw(24_000 + seed, [family])
    assert fuzz24.check(program) is None, program.source
