"""NumPy functions composed from primitives in their own modules (``tracer/array_reshaping.py``,
``pad_modes.py``, ``finite_differences.py``, ``math_composites.py``, ``choices.py``,
``statistics.py``, ``products.py``, ``searching.py``, ``diagonals.py``), one table.

Each row is a function of arrays and the inputs it is called with: eager NumPy against
``tj.jit`` (value, dtype, shape and type; the calls after the first must run compiled, so
a silent eager fallback fails), over a few shapes (two lengths each, so a dim may turn
symbolic) and dtypes; the differentiable rows also check ``value_and_grad`` against
central finite differences. Refused argument forms run eagerly with the reason named.
"""

import warnings

import numpy as np
import pytest

import tracejit as tj


def rng_for(seed):
    return np.random.default_rng(seed)


def floats(*shape, dtype=np.float64, seed=0, low=-2.0, high=2.0):
    return rng_for(seed).uniform(low, high, shape).astype(dtype)


def ints(*shape, seed=0, low=-4, high=5):
    return rng_for(seed).integers(low, high, shape)


def with_specials(x):
    """``x`` with NaN, ±inf and ±0 in its first places (float dtypes)."""
    x = x.copy()
    flat = x.reshape(-1)
    for position, value in enumerate([np.nan, np.inf, -np.inf, 0.0, -0.0][:flat.size]):
        flat[position * 2 % flat.size] = value
    return x


def sorted_vector(n, dtype=np.float64, seed=0):
    return np.sort(floats(n, dtype=dtype, seed=seed))


# name -> (function, calls: list of argument tuples, differentiable)
def _calls(make):
    """Four calls: two shapes (the second length makes a dim dynamic), two seeds each."""
    return [make(size, seed) for size in (5, 8) for seed in (1, 2)]


def vec(dtype=np.float64):
    return lambda size, seed: (floats(size, dtype=dtype, seed=seed),)


def mat(dtype=np.float64, columns=3):
    return lambda size, seed: (floats(size, columns, dtype=dtype, seed=seed),)


def mat_ints():
    return lambda size, seed: (ints(size, 3, seed=seed),)


CASES = {
    # --- array_reshaping --------------------------------------------------------------
    "append": (lambda x: np.append(x, x[0] * 2), _calls(vec()), True),
    "append_float32_python_float": (lambda x: np.append(x, 1.5), _calls(vec(np.float32)),
                                    False),
    "python_float_inputs_become_float64": (
        lambda x, t: (np.append(x, t), np.add.outer(x, t), np.inner(x, t),
                      np.diff(x, prepend=t), np.searchsorted(np.sort(x), t)),
        [(floats(n, dtype=np.float32, seed=n), t) for n in (5, 8) for t in (0.5, -0.3, 1.1)],
        False),
    "append_axis": (lambda x: np.append(x, x[:1] + 1, axis=0), _calls(mat()), True),
    "append_ints": (lambda x: np.append(x, 3), _calls(mat_ints()), False),
    "append_loop": (lambda x: _append_loop(x), _calls(vec()), True),
    "delete_int": (lambda x: np.delete(x, -2, axis=0), _calls(mat()), True),
    "delete_list": (lambda x: np.delete(x, [0, 2], axis=1), _calls(mat(columns=4)), True),
    "delete_slice": (lambda x: np.delete(x, slice(1, None, 2), axis=1), _calls(mat(columns=5)),
                     False),
    "insert_scalar": (lambda x: np.insert(x, 2, 5.5), _calls(vec()), True),
    "insert_row": (lambda x: np.insert(x, 1, x[0] * 3, axis=0), _calls(mat()), True),
    "insert_ints_cast": (lambda x: np.insert(x, -1, 2.7, axis=1), _calls(mat_ints()), False),
    "fliplr": (np.fliplr, _calls(mat()), True),
    "flipud": (np.flipud, _calls(mat(np.float32)), False),
    "rot90": (np.rot90, _calls(mat()), True),
    "rot90_k": (lambda x: np.rot90(x, -1) + np.rot90(x, 2).sum(), _calls(mat_ints()), False),
    "rot90_3d": (lambda x: np.rot90(x.reshape(-1, 1, 3), 3, axes=(2, 0)), _calls(mat()),
                 True),
    "column_stack": (lambda x: np.column_stack([x[:, 0], x, x[:, 1] * 2]), _calls(mat()),
                     True),
    "dstack": (lambda x: np.dstack([x, x * 2]), _calls(mat(np.float32)), False),
    "rollaxis": (lambda x: np.rollaxis(x.reshape(-1, 3, 1), 2) * 2, _calls(mat()), True),
    "resize": (lambda x: np.resize(x, (2, 7)), _calls(mat()), True),
    "resize_dynamic": (lambda x: np.resize(x[:, :2], (3, x.shape[0] + 1)), _calls(mat_ints()),
                       False),
    "block": (lambda x: np.block([[x, x[:, :1]], [x[:1] * 2, 1.5]]), _calls(mat()), True),
    "block_float32_vectors": (lambda x: np.block([x[0], x[1], 2]), _calls(mat(np.float32)),
                              False),
    "meshgrid": (lambda x: np.meshgrid(x[:, 0], x[0]), _calls(mat()), True),
    "meshgrid_ij_sparse": (lambda x: np.meshgrid(x[:, 0], x[0], x[1], indexing="ij",
                                                 sparse=True), _calls(mat()), False),
    # --- pad modes ---------------------------------------------------------------------
    "pad_edge": (lambda x: np.pad(x, ((1, 2), (0, 3)), mode="edge"), _calls(mat()), True),
    "pad_reflect": (lambda x: np.pad(x, 2, mode="reflect"), _calls(mat()), True),
    "pad_reflect_wide": (lambda x: np.pad(x, (7, 11), mode="reflect"), _calls(vec()), True),
    "pad_symmetric": (lambda x: np.pad(x, ((4, 1), (5, 0)), mode="symmetric"),
                      _calls(mat(np.float32)), False),
    "pad_wrap": (lambda x: np.pad(x, (9, 2), mode="wrap"), _calls(vec()), True),
    "pad_edge_ints": (lambda x: np.pad(x, 1, mode="edge"), _calls(mat_ints()), False),
    # deeplearning.ai's zero_pad: constant_values=(0, 0), one pair for every axis
    "pad_constant_pair_zeros": (
        lambda x: np.pad(x.reshape(-1, 1, 3, 1), ((0, 0), (1, 1), (1, 1), (0, 0)),
                         mode="constant", constant_values=(0, 0)), _calls(mat()), True),
    "pad_constant_before_after": (lambda x: np.pad(x, 2, constant_values=(-np.inf, 7)),
                                  _calls(mat(np.float32)), False),
    "pad_constant_per_axis": (  # corners take the last axis' constant, as NumPy's passes
        lambda x: np.pad(x, ((1, 2), (2, 1)), constant_values=((1, 2), (3, -0.0))),
        _calls(mat()), True),
    "pad_constant_per_axis_ints": (
        lambda x: np.pad(x, ((0, 1), (1, 0)), constant_values=((5,), (-9,))),
        _calls(mat_ints()), False),
    # --- finite differences ------------------------------------------------------------
    "diff": (lambda x: np.diff(x, axis=0), _calls(mat()), True),
    "diff_n2_prepend": (lambda x: np.diff(x, n=2, prepend=0.5, append=x[-1:]), _calls(vec()),
                        True),
    "diff_ints": (lambda x: np.diff(x), _calls(mat_ints()), False),
    "diff_bool": (lambda x: np.diff(x > 0, axis=0), _calls(mat()), False),
    "ediff1d": (np.ediff1d, _calls(mat(np.float32)), False),
    "ediff1d_ends": (lambda x: np.ediff1d(x, to_end=np.stack([x[0, 0], x[1, 1]]), to_begin=-1),
                     _calls(mat()), True),
    "ediff1d_ints_begin": (lambda x: np.ediff1d(x, to_begin=np.int8(3)), _calls(mat_ints()),
                           False),
    "gradient": (np.gradient, _calls(vec()), True),
    "gradient_spacing_axis": (lambda x: np.gradient(x, 0.5, axis=0, edge_order=2),
                              _calls(mat(np.float32)), False),
    "gradient_2d": (lambda x: np.gradient(x), _calls(mat()), True),
    "gradient_ints": (lambda x: np.gradient(x, axis=0), _calls(mat_ints()), False),
    "trapezoid": (lambda x: np.trapezoid(x, axis=0), _calls(mat()), True),
    "trapezoid_x": (lambda x: np.trapezoid(x[:, 0], x=np.cumsum(x[:, 1] ** 2)), _calls(mat()),
                    True),
    # --- math composites ---------------------------------------------------------------
    "hypot": (lambda x: np.hypot(x[:, 0], x[:, 1]), _calls(mat()), True),
    "hypot_specials": (lambda x: np.hypot(x, x[::-1] * 1e300), _calls(
        lambda size, seed: (with_specials(floats(size, seed=seed)),)), False),
    "hypot_float32": (lambda x: np.hypot(x, 3), _calls(vec(np.float32)), False),
    "hypot_ints": (lambda x: np.hypot(x, 1), _calls(mat_ints()), False),
    "heaviside": (lambda x: np.heaviside(x, 0.5), _calls(
        lambda size, seed: (with_specials(floats(size, seed=seed)),)), False),
    "fmax_fmin": (lambda x: (np.fmax(x, x[::-1] + 0.5), np.fmin(x, -0.25)), _calls(
        lambda size, seed: (with_specials(floats(size, seed=seed)),)), False),
    "fmax_grad": (lambda x: np.fmax(x, 0.3) + np.fmin(x, -0.4), _calls(vec()), True),
    "logaddexp2": (lambda x: np.logaddexp2(x, x[::-1]), _calls(vec()), True),
    "logaddexp2_specials": (lambda x: np.logaddexp2(x, 1.0), _calls(
        lambda size, seed: (with_specials(floats(size, dtype=np.float32, seed=seed)),)), False),
    "float_power": (lambda x: np.float_power(np.abs(x), 1.5), _calls(vec(np.float32)),
                    False),
    "deg2rad": (lambda x: (np.deg2rad(x * 90), np.rad2deg(x), np.radians(x),
                           np.degrees(x)), _calls(vec(np.float32)), False),
    "deg2rad_grad": (lambda x: np.deg2rad(x) + np.rad2deg(x), _calls(vec()), True),
    "copysign": (lambda x: (np.copysign(x, -1), np.copysign(x, [1.0, -0.0, np.nan, -np.nan,
                                                               -2.0]), np.copysign(x, 0.0)),
                 [(with_specials(floats(5, seed=seed)),) for seed in (1, 2, 3)], False),
    "copysign_grad": (lambda x: np.copysign(x, -1.0) + np.copysign(x * 2, 3.0),
                      _calls(vec()), True),
    "copysign_ints": (lambda x: np.copysign(x, -1), _calls(mat_ints()), False),
    "divmod": (lambda x: np.divmod(x, 0.3), _calls(vec()), False),
    "divmod_ints": (lambda x: np.divmod(x, 3), _calls(mat_ints()), False),
    "modf": (lambda x: np.modf(x * 2), _calls(
        lambda size, seed: (with_specials(np.round(floats(size, seed=seed), 1)),)), False),
    "sinc": (np.sinc, _calls(lambda size, seed: (np.round(floats(size, seed=seed)),)), True),
    "sinc_float32": (np.sinc, _calls(vec(np.float32)), False),
    "fix": (lambda x: np.fix(x * 3), _calls(
        lambda size, seed: (with_specials(floats(size, seed=seed)),)), False),
    "real_imag_conj": (lambda x: (np.real(x) * 2, np.imag(x) + 1, np.conj(x), np.conjugate(x)),
                       _calls(vec(np.float32)), False),
    "add_outer": (lambda x: np.add.outer(x[:, 0], x[0]), _calls(mat()), True),
    "multiply_outer": (lambda x: np.multiply.outer(x, x[0, :2]), _calls(mat()), True),
    "greater_outer_ints": (lambda x: np.greater.outer(x[:, 0], 1), _calls(mat_ints()), False),
    # --- choices and comparisons ---------------------------------------------------------
    "select": (lambda x: np.select([x > 0.5, x < -0.5], [x, -x * 2], 0.25), _calls(mat()),
               True),
    "select_broadcast_ints": (lambda x: np.select([x[:, :1] > 0, x < -1], [x, 7]),
                              _calls(mat_ints()), False),
    "choose": (lambda x: np.choose((x > 0).astype(int), [x, -x]), _calls(mat()), True),
    "choose_wrap": (lambda x: np.choose(np.arange(3) + 1, [x, x * 2, 7], mode="wrap"),
                    _calls(mat_ints()), False),
    "piecewise": (lambda x: np.piecewise(x, [x < 0, x >= 1], [-1, 1, 0.5]), _calls(mat()),
                  False),
    "piecewise_functions": (lambda x: np.piecewise(x, [x < 0, x > 1], [
        lambda v: v * v, lambda v: v - v.mean(), lambda v: np.exp(v) * 2]), _calls(mat()),
        False),
    "piecewise_function_scalar": (lambda x: np.piecewise(x, [x < 0], [lambda v: 3, np.sin]),
                                  _calls(mat(np.float32)), False),
    "isclose": (lambda x: np.isclose(x, x[::-1] * 1.5 + 0.25, atol=0.02), _calls(
        lambda size, seed: (with_specials(floats(size, seed=seed)),)), False),
    "isclose_ints_nan": (lambda x: np.isclose(x, x * 1.0, equal_nan=True), _calls(
        lambda size, seed: (with_specials(floats(size, dtype=np.float32, seed=seed)),)), False),
    "isclose_python_float": (lambda x, t: np.isclose(x, t, rtol=0.5, atol=0.0),
                             [(floats(n, dtype=np.float32, seed=n), t) for n in (5, 8)
                              for t in (0.5, 1.25, -0.75)], False),
    "isclose_int": (lambda x: np.isclose(x, 2), _calls(mat_ints()), False),
    # --- statistics --------------------------------------------------------------------
    "ptp": (lambda x: np.ptp(x, axis=0), _calls(mat()), True),
    "ptp_ints_keepdims": (lambda x: np.ptp(x, axis=1, keepdims=True), _calls(mat_ints()),
                          False),
    "average_weights": (lambda x: np.average(x, axis=1, weights=[1, 2, 3]), _calls(mat()),
                        True),
    "average_returned": (lambda x: np.average(x, weights=x ** 2 + 1, returned=True),
                         _calls(mat()), True),
    "average_ints": (lambda x: np.average(x, axis=0), _calls(mat_ints()), False),
    "average_float32": (lambda x: np.average(x, axis=0, weights=[1.0, 2.0, 0.5]),
                        _calls(lambda size, seed: (floats(3, size, dtype=np.float32,
                                                          seed=seed),)), False),
    "cov": (np.cov, _calls(mat()), True),
    "cov_columns_bias": (lambda x: np.cov(x, rowvar=False, bias=True), _calls(mat()), True),
    "cov_xy_float32": (lambda x: np.cov(x[:, 0], x[:, 1]), _calls(mat(np.float32)), False),
    "corrcoef": (lambda x: np.corrcoef(x, rowvar=False), _calls(mat()), True),
    "corrcoef_vector": (lambda x: np.corrcoef(x[:, 0]), _calls(mat()), False),
    "median": (lambda x: np.median(x, axis=0), _calls(mat()), True),
    "median_all_keepdims": (lambda x: np.median(x, keepdims=True), _calls(mat(np.float32)),
                            False),
    "median_nan": (lambda x: np.median(x, axis=1), _calls(
        lambda size, seed: (with_specials(floats(size, 3, seed=seed)),)), False),
    "median_ints": (lambda x: np.median(x, axis=0), _calls(mat_ints()), False),
    "percentile": (lambda x: np.percentile(x, 30, axis=0), _calls(mat()), True),
    "percentile_list_float32": (lambda x: np.percentile(x, [0, 25, 50, 99, 100], axis=1),
                                _calls(mat(np.float32)), False),
    "quantile": (lambda x: np.quantile(x, 0.7), _calls(mat(np.float32)), False),
    "quantile_whole_positions_nan": (lambda x: np.quantile(x, [0, 1], axis=0), _calls(
        lambda size, seed: (with_specials(floats(size, 3, seed=seed)),)), False),
    "quantile_ints": (lambda x: np.quantile(x, [0.1, 0.5], axis=0), _calls(mat_ints()),
                      False),
    # --- products and diagonals ---------------------------------------------------------
    "inner": (lambda x: np.inner(x, x), _calls(mat()), True),
    "inner_vector": (lambda x: np.inner(x[0], x), _calls(mat()), True),
    "vdot": (lambda x: np.vdot(x, x * 2), _calls(mat()), True),
    "kron": (lambda x: np.kron(x, x[:2, :2]), _calls(mat()), True),
    "kron_vector_ints": (lambda x: np.kron(x[0], x), _calls(mat_ints()), False),
    "matrix_power": (lambda x: (np.linalg.matrix_power(x[:3], 5),
                                np.linalg.matrix_power(x[:3], 0)), _calls(mat()), True),
    "multi_dot": (lambda x: np.linalg.multi_dot([x[0], x.T, x, x.T @ x, x[1]]), _calls(mat()),
                  True),
    "multi_dot_three": (lambda x: np.linalg.multi_dot([x, x.T, x]), _calls(mat()), True),
    "cross": (lambda x: np.cross(x, x[::-1] + 1), _calls(mat()), True),
    "cross_axis_ints": (lambda x: np.cross(x.T, x[:1].T, axis=0), _calls(mat_ints()), False),
    "diagonal": (lambda x: (np.diagonal(x), np.diagonal(x, 1), np.diagonal(x, -2)),
                 _calls(mat()), True),
    "diagonal_3d": (lambda x: np.diagonal(x.reshape(-1, 3, 1), 0, 2, 1), _calls(mat()), True),
    "diag_matrix": (lambda x: np.diag(x, -1), _calls(mat_ints()), False),
    "trace": (lambda x: np.trace(x) + np.trace(x, 1), _calls(mat()), True),
    "trace_ints": (lambda x: np.trace(x, -1), _calls(mat_ints()), False),
    # --- searching ----------------------------------------------------------------------
    "searchsorted": (lambda a, v: (np.searchsorted(a, v), np.searchsorted(a, v, "right")),
                     [(sorted_vector(n, seed=seed), with_specials(floats(4, 3, seed=seed + 5)))
                      for n in (5, 8) for seed in (1, 2)], False),
    "searchsorted_ties": (lambda a, v: np.searchsorted(a, v, side="right"),
                          [(np.sort(ints(n, seed=seed)), ints(6, seed=seed + 1))
                           for n in (5, 8) for seed in (1, 2)], False),
    "digitize": (lambda x: (np.digitize(x, [-1.0, 0.0, 0.5]), np.digitize(x, [2, 0, -1],
                                                                         right=True)),
                 _calls(lambda size, seed: (with_specials(floats(size, seed=seed)),)), False),
    "isin": (lambda x: np.isin(x, [0, 2, -3]), _calls(mat_ints()), False),
    "isin_invert": (lambda x: np.isin(np.round(x), [1.0, np.nan], invert=True),
                    _calls(mat()), False),
}


def _append_loop(x):
    """``losses = np.append(losses, loss)`` in a training loop."""
    losses = np.zeros(0)
    for step in range(3):
        losses = np.append(losses, np.sum(x * step))
    return losses


# --- helpers -------------------------------------------------------------------------------
def quietly(function, *args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return function(*args)


def tolerance(value):
    dtype = getattr(value, "dtype", np.dtype(np.float64))
    return dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def assert_same(got, want, where):
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), (where, type(got))
        for position, (item, expected) in enumerate(zip(got, want)):
            assert_same(item, expected, f"{where}[{position}]")
        return
    assert type(got) is type(want), (where, type(got), type(want))
    assert np.shape(got) == np.shape(want), (where, np.shape(got), np.shape(want))
    assert np.asarray(got).dtype == np.asarray(want).dtype, (where, got.dtype, want.dtype)
    if np.asarray(want).dtype.kind in "fc":
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=where,
                                   **tolerance(np.asarray(want)))
        # signed zeros and infinities where NumPy gives them
        np.testing.assert_array_equal(np.signbit(got) & (np.asarray(want) == 0),
                                      np.signbit(want) & (np.asarray(want) == 0), err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_matches_numpy(name):
    function, calls, _ = CASES[name]
    f = tj.jit(function, cache="memory")
    for position, args in enumerate(calls):
        want = quietly(function, *args)
        got = quietly(f, *args)
        assert_same(got, want, f"{name} call {position}")
    stats = f.stats()
    assert stats["eager_calls"] == {}, stats["eager_reasons"]
    assert stats["compiled_calls"] > 0, stats


def _loss(function, weights_seed):
    def loss(x):
        result = function(x)
        parts = result if isinstance(result, tuple) else (result,)
        total = 0.0
        for position, part in enumerate(parts):
            weights = floats(*np.shape(part), seed=weights_seed + position) if np.shape(
                part) else 1.0
            total = total + np.sum(part * weights)
        return total

    return loss


@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case[2]])
def test_gradient_matches_finite_differences(name):
    function, calls, _ = CASES[name]
    (x,) = calls[0][:1]
    loss = _loss(function, 40)
    value, gradient = tj.value_and_grad(loss)(x)
    np.testing.assert_allclose(value, loss(x), rtol=1e-10)
    step = 1e-6
    numeric = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        bumped = x.copy()
        bumped[index] += step
        lowered = x.copy()
        lowered[index] -= step
        numeric[index] = (loss(bumped) - loss(lowered)) / (2 * step)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-6, err_msg=name)


def test_gradient_compiled_through_pad_and_median():
    def loss(x):
        return np.sum(np.pad(x, 2, mode="reflect") ** 2) + np.median(x) * 3

    f = tj.jit(tj.value_and_grad(loss), cache="memory")
    for seed in (1, 2, 3):
        x = floats(7, seed=seed)
        value, gradient = f(x)
        eager_value, eager_gradient = tj.value_and_grad(loss)(x)
        np.testing.assert_allclose(value, eager_value, rtol=1e-12)
        np.testing.assert_allclose(gradient, eager_gradient, rtol=1e-12)
    assert f.stats()["compiled_calls"] > 0


REFUSED = {
    "piecewise_function_sorting": lambda x: np.piecewise(x, [x < 0], [np.sort, 0]),
    "copysign_traced_sign": lambda x: np.copysign(1.0, x),
    "pad_linear_ramp": lambda x: np.pad(x, 1, mode="linear_ramp"),
    "pad_reflect_odd": lambda x: np.pad(x, 1, mode="reflect", reflect_type="odd"),
    "quantile_nearest": lambda x: np.quantile(x, 0.5, method="nearest"),
    "insert_list": lambda x: np.insert(x, [1, 2], 0.0),
    "gradient_coordinates": lambda x: np.gradient(x, np.arange(5.0) ** 2),
    "matrix_power_negative": lambda x: np.linalg.matrix_power(np.outer(x, x) + 5 * np.eye(5), -1),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_forms_run_eagerly_with_numpys_answer(name):
    function = REFUSED[name]
    f = tj.jit(function, cache="memory")
    x = floats(5, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(f(x), function(x))
        np.testing.assert_allclose(f(x), function(x))
    stats = f.stats()
    assert stats["compiled_calls"] == 0 and stats["eager_calls"], stats


def test_numpys_errors_under_jit():
    for function, error in [(lambda x: np.fliplr(x), ValueError),
                            (lambda x: np.pad(x[:0], 1, mode="edge"), ValueError),
                            (lambda x: np.delete(x, 9), IndexError),
                            (lambda x: np.choose(np.array([0, 3]), [x[:2], x[1:3]]), ValueError),
                            (lambda x: np.digitize(x, [1.0, 0.0, 2.0]), ValueError)]:
        f = tj.jit(function, cache="memory")
        with pytest.raises(error):
            function(floats(5))
        with pytest.raises(error):
            f(floats(5))


def test_searchsorted_of_an_unsorted_array_is_numpys():
    """Over an unsorted array NumPy's binary search answers what no count would: the
    order is a value guard, so that call runs eagerly."""
    def positions(a, v):
        return np.searchsorted(a, v)

    f = tj.jit(positions, cache="memory")
    values = floats(6, seed=4)
    for a in (sorted_vector(7, seed=1), sorted_vector(7, seed=2), floats(7, seed=3)):
        np.testing.assert_array_equal(f(a, values), positions(a, values))
    stats = f.stats()
    assert stats["compiled_calls"] >= 1 and sum(stats["eager_calls"].values()) == 1, stats


def test_copysign_sets_the_sign_bit_of_nan_and_zero():
    """NaN's sign bit too: compiled code negates and takes magnitudes bit-exactly."""
    def signed(x):
        return np.copysign(x, -1.0), np.copysign(x, [1.0, -1.0, 1.0, -1.0])

    f = tj.jit(signed, cache="memory")
    for seed in (1, 2, 3):
        x = np.array([np.nan, -np.nan, -0.0, 0.0]) * floats(4, seed=seed, low=1.0)
        for got, want in zip(f(x), signed(x)):
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
            np.testing.assert_array_equal(got, want)
    assert f.stats()["compiled_calls"] > 0 and f.stats()["eager_calls"] == {}


def test_hypot_is_numpys_bit_for_bit():
    """glibc's steps (NumPy calls libm's hypot) over random pairs across the exponent
    range, the scaled ranges past 2**511 and below 2**-511, subnormals, zeros and inf."""
    rng = rng_for(7)
    n = 3000
    x = rng.standard_normal(n) * np.exp2(rng.integers(-80, 80, n))
    y = rng.standard_normal(n) * np.abs(x) * np.exp2(rng.integers(-30, 3, n))
    edges = np.concatenate([rng.standard_normal(200) * 2.0 ** 1020,
                            rng.standard_normal(200) * 2.0 ** -1070,
                            rng.standard_normal(200) * 2.0 ** -515,
                            [0.0, -0.0, 5e-324, 1.7e308, np.inf, np.nan]])
    x, y = np.concatenate([x, edges, edges]), np.concatenate([y, edges[::-1], edges * 0.75])
    with np.errstate(over="ignore", under="ignore"):
        x32, y32 = x.astype(np.float32), y.astype(np.float32)
    f = tj.jit(np.hypot, cache="memory")
    for _ in range(2):
        with np.errstate(over="ignore"):  # NumPy warns where the root overflows
            np.testing.assert_array_equal(f(x, y), np.hypot(x, y))
            np.testing.assert_array_equal(f(x32, y32), np.hypot(x32, y32))
    assert f.stats()["compiled_calls"] > 0 and f.stats()["eager_calls"] == {}
