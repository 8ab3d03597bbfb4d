"""NumPy's NaN-ignoring functions and flat-index conversions (``tracer/nan_reductions.py``,
``tracer/flat_index.py``), eager NumPy vs ``tj.jit`` vs eager Tensors.

Each jit function is called several times with fresh random NaN masks, all-NaN rows and
columns and ±inf: every call must give NumPy's values, dtypes, shapes and types, and the
calls after the first must run compiled (none eagerly). The documented raising cases (an
all-NaN slice in nanargmax/nanargmin, an index out of range in unravel_index) raise
NumPy's error under jit too, and only those calls leave compiled code. Gradients are
checked against central finite differences, with exactly zero at the NaN positions.
The last tests run a max-pool backward written the way from-scratch CNN code writes it.
"""

import warnings

import numpy as np
import pytest

import tracejit as tj

REDUCTIONS = (np.nanmax, np.nanmin, np.nansum, np.nanprod, np.nanmean, np.nanvar, np.nanstd)


# --- helpers -------------------------------------------------------------------------------
def jitted(function, **options):
    return tj.jit(function, cache="memory", **options)


def numpy_quietly(function, *args, **kwargs):
    """NumPy's result, without its RuntimeWarnings for all-NaN slices (compiled code
    gives the same values and does not warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return function(*args, **kwargs)


def tolerance(dtype):
    return dict(rtol=1e-4, atol=1e-5) if np.dtype(dtype) == np.float32 else dict(
        rtol=1e-10, atol=1e-12)


def assert_same(got, want, where="result", **tolerances):
    """``got`` equals ``want`` in structure, type, shape, dtype and value (NaN = NaN)."""
    if isinstance(want, tuple):
        assert type(got) is tuple and len(got) == len(want), where
        for position, (item, expected) in enumerate(zip(got, want)):
            assert_same(item, expected, f"{where}[{position}]", **tolerances)
        return
    assert type(got) is type(want), (where, type(got), type(want))
    assert np.shape(got) == np.shape(want), (where, np.shape(got), np.shape(want))
    assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=where, **tolerances)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def assert_compiled(f, calls):
    """Every call after the first (which traces) ran compiled code."""
    stats = f.stats()
    assert stats["eager_calls"] == {}, stats
    assert stats["compiled_calls"] == calls - 1 and stats["compiled_calls"] > 0, stats


def samples(seed, shape, dtype):
    """Three arrays of one shape: NaNs only; plus an all-NaN row; plus an all-NaN column
    and ±inf (integer dtypes: plain random integers)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return [rng.integers(-4, 5, shape).astype(dtype) for _ in range(3)]
    arrays = []
    for call in range(3):
        x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
        x[rng.random(shape) < 0.3] = np.nan
        if call >= 1:
            x[rng.integers(shape[0])] = np.nan
        if call == 2:
            x[(slice(None),) + (rng.integers(shape[1]),)] = np.nan
            x[rng.random(shape) < 0.05] = np.inf
            x[rng.random(shape) < 0.05] = -np.inf
        arrays.append(x.astype(dtype))
    return arrays


# --- the reductions: every axis form, keepdims, dtypes --------------------------------------
AXES = [(None, False), (None, True), (0, False), (1, True), (-1, False), ((0, 1), True)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize(("axis", "keepdims"), AXES)
def test_reductions_match_numpy_and_compile(dtype, axis, keepdims):
    def reductions(x):
        return tuple(reduce(x, axis=axis, keepdims=keepdims) for reduce in REDUCTIONS)

    f = jitted(reductions)
    arrays = samples(1, (4, 6), dtype)
    for x in arrays:
        want = numpy_quietly(reductions, x)
        assert_same(f(x.copy()), want, **tolerance(dtype))
        assert_same(tuple(value.data[()] if value.ndim == 0 else value.data
                          for value in numpy_quietly(reductions, tj.tensor(x))), want,
                    where="eager Tensor", **tolerance(dtype))
    assert_compiled(f, len(arrays))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("axis", "keepdims"), [((0, 2), True), (1, False)])
def test_reductions_of_three_dims(dtype, axis, keepdims):
    def reductions(x):
        return tuple(reduce(x, axis=axis, keepdims=keepdims) for reduce in REDUCTIONS)

    f = jitted(reductions)
    arrays = samples(2, (3, 4, 5), dtype)
    for x in arrays:
        assert_same(f(x), numpy_quietly(reductions, x), **tolerance(dtype))
    assert_compiled(f, len(arrays))


@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
def test_integer_and_boolean_inputs_take_numpys_dtypes(dtype):
    """nansum of int32 or bool is int64, nanmean and nanvar of them float64, nanmax of
    bool is bool: the plain functions' dtypes."""
    def reductions(x):
        return (np.nansum(x), np.nansum(x, axis=0), np.nanmean(x, axis=1), np.nanvar(x),
                np.nanstd(x, axis=0), np.nanmax(x, axis=1), np.nanmin(x), np.nanprod(x, 0),
                np.nancumsum(x, axis=1), np.nanargmax(x, axis=0))

    f = jitted(reductions)
    arrays = samples(3, (4, 5), dtype)
    for x in arrays:
        assert_same(f(x), reductions(x))
    assert_compiled(f, len(arrays))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_nancumsum_with_infinities(dtype, axis):
    """NaNs count as 0; a running sum that met +inf is inf, -inf is -inf, both is NaN."""
    f = jitted(lambda x: np.nancumsum(x, axis=axis))
    arrays = samples(4, (5, 6), dtype)
    for x in arrays:
        want = numpy_quietly(np.nancumsum, x, axis=axis)
        assert_same(f(x), want, **tolerance(dtype))
        assert_same(numpy_quietly(np.nancumsum, tj.tensor(x), axis=axis).data, want,
                    **tolerance(dtype))
    assert_compiled(f, len(arrays))


def test_dtype_arguments_and_ddof():
    def statistics(x):
        return (np.nanmean(x, dtype=np.float64), np.nansum(x, axis=0, dtype=np.float64),
                np.nanvar(x, axis=1, ddof=1), np.nanstd(x, axis=0, ddof=2),
                np.nanvar(x, axis=1, ddof=6), np.nanvar(x, correction=1),
                np.nanvar(x, axis=0, dtype=np.float64, keepdims=True),
                np.nanprod(x, axis=1, dtype=np.float64))

    f = jitted(statistics)
    arrays = samples(5, (4, 6), np.float32)
    for x in arrays:
        want = numpy_quietly(statistics, x)
        assert want[0].dtype == np.float64 and want[2].dtype == np.float32
        assert_same(f(x), want, **tolerance(np.float32))
    assert_compiled(f, len(arrays))


def test_errors_numpy_raises_for_arguments():
    x = np.array([1.0, np.nan])
    with pytest.raises(TypeError, match="dtype must be inexact"):
        np.nanmean(tj.tensor(x), dtype=np.int32)
    with pytest.raises(ValueError, match="ddof and correction"):
        np.nanvar(tj.tensor(x), ddof=1, correction=1)
    f = jitted(lambda a: np.nanmean(a, dtype=np.int64))
    for _ in range(2):
        with pytest.raises(TypeError, match="dtype must be inexact"):
            f(x)


# --- argmax / argmin and the all-NaN slice ----------------------------------------------------
def with_a_value_per_slice(seed, shape, dtype):
    """Three arrays with random NaNs and ±inf (ties of the fill value), where every row
    and column keeps a value (a diagonal of finite numbers)."""
    rng = np.random.default_rng(seed)
    diagonal = np.arange(max(shape))
    arrays = []
    for _ in range(3):
        x = rng.standard_normal(shape)
        x[rng.random(shape) < 0.3] = np.nan
        x[rng.random(shape) < 0.1] = np.inf
        x[rng.random(shape) < 0.1] = -np.inf
        x[diagonal % shape[0], diagonal % shape[1]] = rng.standard_normal(len(diagonal))
        arrays.append(x.astype(dtype))
    return arrays


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("axis", "keepdims"), [(None, False), (0, False), (1, True),
                                                (-1, False), (None, True)])
def test_nanargmax_nanargmin_compile(dtype, axis, keepdims):
    def positions(x):
        return (np.nanargmax(x, axis=axis, keepdims=keepdims),
                np.nanargmin(x, axis=axis, keepdims=keepdims))

    f = jitted(positions)
    arrays = with_a_value_per_slice(6, (4, 5), dtype)
    for x in arrays:
        want = positions(x)
        assert_same(f(x), want)
        assert_same(tuple(np.asarray(value.data)[()] for value in positions(tj.tensor(x))),
                    want, where="eager Tensor")
    assert_compiled(f, len(arrays))


def test_nanargmax_where_the_fill_value_ties():
    """NumPy replaces NaN by -inf and takes argmax: [nan, -inf] gives 0, a NaN position."""
    x = np.array([[np.nan, -np.inf, -np.inf], [-np.inf, np.nan, 1.0]])
    f = jitted(lambda a: (np.nanargmax(a, axis=1), np.nanargmin(-a, axis=1)))
    for _ in range(2):
        assert_same(f(x), (np.nanargmax(x, axis=1), np.nanargmin(-x, axis=1)))
    assert_compiled(f, 2)


def test_all_nan_slice_raises_as_numpy_and_only_that_call_leaves_compiled_code():
    f = jitted(lambda a: np.nanargmax(a, axis=1) + np.nanargmin(a))
    good = with_a_value_per_slice(7, (4, 5), np.float64)
    bad = good[0].copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        np.nanargmax(bad, axis=1)
    assert_same(f(good[0]), np.nanargmax(good[0], axis=1) + np.nanargmin(good[0]))
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        f(bad)
    assert_same(f(good[1]), np.nanargmax(good[1], axis=1) + np.nanargmin(good[1]))
    stats = f.stats()
    assert stats["raised_calls"] == 1 and stats["compiled_calls"] == 1, stats
    assert stats["eager_calls"] == {}, stats
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        np.nanargmin(tj.tensor(bad), axis=1)


def test_all_nan_on_the_first_call_raises_then_later_calls_compile():
    f = jitted(lambda a: np.nanargmin(a, axis=0))
    good = with_a_value_per_slice(8, (3, 4), np.float32)
    bad = good[0].copy()
    bad[:, 1] = np.nan
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        f(bad)
    for x in good:
        assert_same(f(x), np.nanargmin(x, axis=0))
    stats = f.stats()
    assert stats["raised_calls"] == 1 and stats["compiled_calls"] == len(good) - 1, stats


# --- empty arrays -----------------------------------------------------------------------------
EMPTY_CASES = {
    "nanmax-empty-rows": (lambda a: np.nanmax(a, axis=1), (0, 3)),
    "nanmax-empty-slices": (lambda a: np.nanmax(a, axis=1), (3, 0)),
    "nanmin-all": (lambda a: np.nanmin(a), (0, 3)),
    "nanargmax-empty-slices": (lambda a: np.nanargmax(a, axis=1), (3, 0)),
    "nanargmin-empty-rows": (lambda a: np.nanargmin(a, axis=1), (0, 3)),
    "nansum": (lambda a: np.nansum(a), (0, 3)),
    "nanprod": (lambda a: np.nanprod(a, axis=0), (0, 3)),
    "nanmean": (lambda a: np.nanmean(a, axis=0), (0, 3)),
    "nanvar": (lambda a: np.nanvar(a, axis=1), (3, 0)),
    "nanstd": (lambda a: np.nanstd(a), (0, 3)),
    "nancumsum": (lambda a: np.nancumsum(a), (0, 3)),
}


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_empty_arrays_as_numpy(case):
    function, shape = EMPTY_CASES[case]
    x = np.zeros(shape)
    try:
        want = numpy_quietly(function, x)
    except ValueError as error:
        f = jitted(function)
        for _ in range(2):
            with pytest.raises(ValueError, match=str(error)):
                f(x)
            with pytest.raises(ValueError):
                function(tj.tensor(x))
        assert f.stats()["raised_calls"] == 2 and f.stats()["eager_calls"] == {}
        return
    f = jitted(function)
    for _ in range(2):
        assert_same(numpy_quietly(f, x), want)
    assert f.stats()["eager_calls"] == {}, f.stats()


# --- gradients ----------------------------------------------------------------------------------
def nan_loss(x):
    """Each NaN-ignoring reduction applied to ``x`` itself (``np.nansum(x * x)`` would
    not do: the product's own gradient at a NaN is NaN, in NumPy's arithmetic as in any
    autodiff). nanvar is tested on its own below."""
    return (np.sum(np.nanmax(x, axis=1) * np.arange(1.0, 5.0)) + np.nanmin(x)
            + 0.3 * np.nansum(x) ** 2 + np.sum(np.nanmean(x, axis=0) ** 2) + np.nanstd(x)
            + 0.1 * np.nanprod(x[:2, :3]) + np.sum(np.nancumsum(x, axis=1)[:, -1] ** 2))


def nanvar_loss(x):
    return np.sum(np.nanvar(x, axis=1, ddof=1) * np.arange(1.0, 5.0))


def finite_differences(function, x, positions, step=1e-6):
    gradient = np.zeros_like(x)
    for position in positions:
        up, down = x.copy(), x.copy()
        up[position] += step
        down[position] -= step
        gradient[position] = (function(up) - function(down)) / (2 * step)
    return gradient


def gradient_input(seed, with_nan):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 2.0, (4, 6)) * rng.choice([-1.0, 1.0], (4, 6))
    if with_nan:  # every row keeps at least three values (nanvar's ddof=1 stays finite)
        for row in range(4):
            x[row, rng.choice(6, size=row % 3 + 1, replace=False)] = np.nan
        x[0, 0] = 1.0  # x[:2, :3] keeps a value for nanprod
    return x


@pytest.mark.parametrize("loss", [nan_loss, nanvar_loss])
@pytest.mark.parametrize("with_nan", [False, True])
def test_gradients_match_finite_differences_and_are_zero_at_nan(loss, with_nan):
    x = gradient_input(9, with_nan)
    values = ~np.isnan(x)
    expected = finite_differences(loss, x, list(zip(*np.nonzero(values))))
    value, gradient = tj.value_and_grad(loss)(x)
    np.testing.assert_allclose(value, loss(x), rtol=1e-12)
    np.testing.assert_allclose(gradient[values], expected[values], rtol=1e-5, atol=1e-6)
    assert np.array_equal(gradient[~values], np.zeros(np.count_nonzero(~values)))
    f = jitted(tj.value_and_grad(loss))
    for call in range(3):
        sample = x if call != 1 else gradient_input(10, with_nan)
        compiled_value, compiled_gradient = f(sample)
        eager_value, eager_gradient = tj.value_and_grad(loss)(sample)
        np.testing.assert_allclose(compiled_value, eager_value, rtol=1e-12)
        np.testing.assert_allclose(compiled_gradient, eager_gradient, rtol=1e-10, atol=1e-12)
        assert np.array_equal(compiled_gradient[np.isnan(sample)],
                              np.zeros(np.count_nonzero(np.isnan(sample))))
    assert f.stats()["eager_calls"] == {} and f.stats()["compiled_calls"] > 0, f.stats()


def test_compiled_gradient_of_nanstd_plus_nanvar_of_rows():
    def loss(x):
        return np.nanstd(x) + np.sum(np.nanvar(x, axis=1, ddof=1))

    x = gradient_input(9, False)
    f = jitted(tj.value_and_grad(loss))
    for _ in range(2):
        np.testing.assert_allclose(f(x)[1], tj.value_and_grad(loss)(x)[1], rtol=1e-10)


def test_gradient_of_an_all_nan_row_is_zero():
    x = gradient_input(11, True)
    x[2] = np.nan

    def loss(a):
        return np.nansum(np.nanmax(a, axis=1) * 0 + 1) + np.nansum(a) + np.nansum(
            np.nanmean(a, axis=1))

    value, gradient = tj.value_and_grad(loss)(x)
    np.testing.assert_allclose(value, numpy_quietly(loss, x))
    assert np.array_equal(gradient[2], np.zeros(6))
    assert np.array_equal(gradient[np.isnan(x)], np.zeros(np.count_nonzero(np.isnan(x))))


# --- unravel_index and ravel_multi_index ---------------------------------------------------------
def coordinates(x):
    flat = np.nanargmax(x)
    rows = np.argmax(x, axis=1)
    return (np.unravel_index(flat, x.shape), np.unravel_index(rows * 3 + 1, x.shape),
            np.unravel_index(rows, x.shape, order="F"),
            np.ravel_multi_index(np.unravel_index(flat, x.shape), x.shape),
            np.ravel_multi_index((rows, rows - 2), x.shape, mode="wrap"),
            np.ravel_multi_index((rows % 3, rows + 2), x.shape, mode=("raise", "clip"),
                                 order="F"))


@pytest.mark.parametrize("dynamic", [False, True])
def test_unravel_index_with_static_and_symbolic_shapes(dynamic):
    """With dynamic=True, ``x.shape`` holds symbolic dims and three sizes share a compile."""
    f = jitted(coordinates, dynamic=dynamic)
    rng = np.random.default_rng(12)
    sizes = (5, 6, 7) if dynamic else (6, 6, 6)
    for size in sizes:
        x = rng.standard_normal((3, size))
        assert_same(f(x), coordinates(x))
    assert_compiled(f, len(sizes))
    assert f.stats()["compiles"] == 1


def test_unravel_index_out_of_range_raises_as_numpy():
    f = jitted(lambda index, x: np.unravel_index(index + np.argmax(x), x.shape))
    x = np.zeros((2, 3))
    assert_same(f(np.int64(5), x), np.unravel_index(5, x.shape))
    for index in (6, -1):
        with pytest.raises(ValueError, match=f"index {index} is out of bounds"):
            f(np.int64(index), x)
        with pytest.raises(ValueError, match="out of bounds"):
            np.unravel_index(tj.tensor(np.int64(index)), x.shape)
    assert_same(f(np.array([0, 4]), x), np.unravel_index(np.array([0, 4]), x.shape))
    stats = f.stats()
    assert stats["raised_calls"] == 2 and stats["eager_calls"] == {}, stats


def test_ravel_multi_index_out_of_range_and_bad_arguments_raise_as_numpy():
    f = jitted(lambda rows, cols: np.ravel_multi_index((rows, cols), (3, 4)))
    good = (np.array([0, 2]), np.array([3, 1]))
    assert_same(f(*good), np.ravel_multi_index(good, (3, 4)))
    with pytest.raises(ValueError, match="invalid entry in coordinates array"):
        f(np.array([0, 3]), np.array([3, 1]))
    assert_same(f(*good), np.ravel_multi_index(good, (3, 4)))
    assert f.stats()["raised_calls"] == 1 and f.stats()["eager_calls"] == {}
    with pytest.raises(ValueError, match="sequence of length 2"):
        np.ravel_multi_index((tj.tensor(np.array([1])),), (3, 4))
    with pytest.raises(TypeError, match="only int indices permitted"):
        np.unravel_index(tj.tensor(np.array([1.0])), (3, 4))
    with pytest.raises(ValueError, match="only 'C' or 'F' order"):
        np.unravel_index(tj.tensor(np.array([1])), (3, 4), order="K")


# --- a max-pool backward written as from-scratch CNN code writes it ----------------------------
def max_pool_backward(dpool, image, size=2, stride=2):
    """The gradient of a max pool: each window's gradient goes to the position of its
    largest value (NaNs ignored), found with nanargmax and unravel_index."""
    channels, height, width = image.shape
    dout = np.zeros(image.shape)
    for c in range(channels):
        y = out_y = 0
        while y + size <= height:
            x = out_x = 0
            while x + size <= width:
                window = image[c, y:y + size, x:x + size]
                idx = np.nanargmax(window, axis=None)
                (a, b) = np.unravel_index(idx, window.shape)
                dout[c, y + a, x + b] = dpool[c, out_y, out_x]
                x += stride
                out_x += 1
            y += stride
            out_y += 1
    return dout


def pool_arguments(seed, side, size, stride, nan_fraction=0.2):
    rng = np.random.default_rng(seed)
    image = rng.standard_normal((2, side, side))
    image[rng.random(image.shape) < nan_fraction] = np.nan
    for c in range(2):  # every window keeps a value: its top-left corner
        image[c, ::stride, ::stride] = rng.standard_normal(image[c, ::stride, ::stride].shape)
    out = (side - size) // stride + 1
    return rng.standard_normal((2, out, out)), image


@pytest.mark.parametrize(("size", "stride", "sides"), [(2, 2, (10, 14)), (3, 1, (11, 14))])
def test_max_pool_backward_compiles_over_two_sizes(size, stride, sides):
    """Two image sizes whose images and pooled outputs share buckets: one compile, and
    every later call runs compiled (stride 1: overlapping windows write the same
    position, the last write wins)."""
    f = jitted(lambda dpool, image: max_pool_backward(dpool, image, size, stride),
               dynamic=True)
    calls = [pool_arguments(13 + side, side, size, stride) for side in sides + sides[:1]]
    for dpool, image in calls:
        got = f(dpool.copy(), image.copy())
        want = max_pool_backward(dpool, image, size, stride)
        assert_same(got, want)
        assert np.count_nonzero(got) > 0
    assert_compiled(f, len(calls))
    assert f.stats()["compiles"] == 1


def test_max_pool_backward_with_an_all_nan_window_raises_as_numpy():
    f = jitted(max_pool_backward, dynamic=True)
    dpool, image = pool_arguments(20, 10, 2, 2)
    assert_same(f(dpool, image), max_pool_backward(dpool, image))
    image[1, 4:6, 2:4] = np.nan
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        max_pool_backward(dpool, image)
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        f(dpool, image)
    assert f.stats()["raised_calls"] == 1 and f.stats()["eager_calls"] == {}
