"""Boolean-mask reads of traced data (``x[x > 0]`` feeding a reduction), eager vs ``jit``.

Every function runs on plain NumPy and through ``jit`` over several calls with different
masks (random, all False, all True), values with NaN and inf, float32/float64/int/bool
arrays, masks over the leading dims of 2-D and 3-D arrays and 0-size arrays. Results
must agree in type, dtype, shape and value; where nothing needs the count as a Python
int, every call after the first must run compiled. Uses that need the selection's
elements or length as data must run eagerly with a reason naming the user's line.
"""

import copy
import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.errors import TraceError


def jitted(function, **options):
    options.setdefault("cache", "memory")
    return tj.jit(function, **options)


def assert_same(got, want, rtol=1e-12, atol=1e-12, where="result"):
    """``got`` equals ``want`` in structure, types, shapes, dtypes and values (NaN equal)."""
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), where
        for position, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, rtol, atol, f"{where}[{position}]")
        return
    assert type(got) is type(want), (where, type(got), type(want))
    if isinstance(want, (np.ndarray, np.generic)):
        assert got.shape == want.shape and got.dtype == want.dtype, (
            where, got.shape, want.shape, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=where)
    else:
        assert got == want, where


def quiet(function, *arguments):
    """``function(*arguments)`` without NumPy's warnings (the mean of an empty selection
    warns eagerly; compiled code computes the same NaN silently)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return function(*arguments)


def check_calls(function, argument_sets, rtol=1e-12, atol=1e-12, **options):
    """Eager vs ``jit`` on copies of each argument tuple; returns the jit function."""
    f = jitted(function, **options)
    for arguments in argument_sets:
        want = quiet(function, *copy.deepcopy(arguments))
        got = quiet(f, *copy.deepcopy(arguments))
        assert_same(got, want, rtol, atol)
    return f


def assert_all_compiled(f, calls):
    """The first call traced, every later one ran compiled: nothing fell back."""
    stats = f.stats()
    assert stats["eager_calls"] == {}, f.explain()
    assert stats["compiled_calls"] == calls - 1 and stats["compiled_calls"] > 0, stats


def masks_for(shape, rng):
    """A random mask, then all False, all True, and another random one."""
    return [rng.random(shape) < 0.5, np.zeros(shape, bool), np.ones(shape, bool),
            rng.random(shape) < 0.3]


def values_for(dtype, shape, rng, special=True):
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5, 6, size=shape).astype(dtype)
    values = rng.normal(size=shape).astype(dtype)
    if special and values.size >= 4:
        flat = values.reshape(-1)
        flat[1], flat[3] = np.inf, -np.inf  # selected or not, depending on the mask
    return values


# --- reductions, every dtype, 1-D masks --------------------------------------------------
REDUCTIONS = {
    "np.sum": lambda x, m: np.sum(x[m]),
    ".sum()": lambda x, m: x[m].sum(),
    "np.mean": lambda x, m: np.mean(x[m]),
    ".mean()": lambda x, m: x[m].mean(),
    "np.prod": lambda x, m: np.prod(x[m]),
    "np.any": lambda x, m: np.any(x[m]),
    "np.all": lambda x, m: x[m].all(),
    "np.count_nonzero": lambda x, m: np.count_nonzero(x[m]),
    "np.var": lambda x, m: np.var(x[m]),
    "np.std ddof=1": lambda x, m: x[m].std(ddof=1),
    "np.add.reduce": lambda x, m: np.add.reduce(x[m]),
    "sum keepdims": lambda x, m: np.sum(x[m], keepdims=True),
    "mean dtype": lambda x, m: np.mean(x[m], dtype=np.float64),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.bool_])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_of_a_selection_compile_and_match_numpy(name, dtype):
    rng = np.random.default_rng(len(name))
    x = values_for(dtype, (9,), rng)
    if name in ("np.var", "np.std ddof=1", "np.prod") and np.dtype(dtype).kind == "f":
        x[np.isinf(x)] = 0.5  # inf - inf is NaN either way; keep the comparison sharp
    arguments = [(x, mask) for mask in masks_for((9,), rng)]
    arguments.append((np.where(np.arange(9) % 2 == 0, np.nan, x) if x.dtype.kind == "f"
                      else x, rng.random(9) < 0.5))
    f = check_calls(REDUCTIONS[name], arguments, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert_all_compiled(f, len(arguments))


def test_result_dtypes_follow_numpy():
    """Sums of bool and int32 selections are int64, means of ints float64, float32
    stays float32 (checked against NumPy by check_calls, spelled out here)."""
    def summaries(b, i, h, m):
        return np.sum(b[m]), np.sum(i[m]), np.mean(i[m]), np.mean(h[m]), np.sum(h[m])

    rng = np.random.default_rng(0)
    arguments = [(rng.random(6) < 0.5, np.arange(6, dtype=np.int32),
                  np.linspace(0, 1, 6, dtype=np.float32), mask)
                 for mask in masks_for((6,), rng)]
    f = check_calls(summaries, arguments, rtol=1e-6)
    result = f(*arguments[0])
    assert [value.dtype for value in result] == [np.int64, np.int64, np.float64,
                                                  np.float32, np.float32]
    assert_all_compiled(f, len(arguments) + 1)


# --- max and min: an empty selection raises NumPy's ValueError ------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_])
def test_max_min_compile_while_the_selection_is_not_empty(dtype):
    def extremes(x, m):
        return np.max(x[m]), x[m].min(), np.max(np.abs(x[m])), np.minimum.reduce(x[m])

    rng = np.random.default_rng(1)
    x = values_for(dtype, (8,), rng)
    arguments = [(x, rng.random(8) < 0.5) for _ in range(3)] + [(x, np.ones(8, bool))]
    for _, mask in arguments:
        mask[0] = True
    if np.dtype(dtype).kind == "f":
        arguments.append((np.where(np.arange(8) == 2, np.nan, x), np.arange(8) >= 1))
    f = check_calls(extremes, arguments, rtol=1e-6)
    assert_all_compiled(f, len(arguments))


def _numpy_error(function, *arguments):
    with pytest.raises(ValueError) as error:
        function(*arguments)
    return str(error.value)


@pytest.mark.parametrize("first", ["nonempty", "empty"])
def test_max_of_an_empty_selection_raises_numpys_error_under_jit(first):
    def largest(x, m):
        return np.max(x[m]) * 2.0

    x = np.array([3.0, -1.0, 2.0, 5.0])
    empty, some = np.zeros(4, bool), np.array([True, False, True, False])
    expected = _numpy_error(largest, x, empty)
    f = jitted(largest)
    order = [some, empty, empty, empty, some] if first == "nonempty" else [
        empty, some, empty, some]
    for mask in order:
        if mask.any():
            assert_same(f(x, mask), largest(x, mask))
        else:
            with pytest.raises(ValueError) as error:
                f(x, mask)
            assert str(error.value) == expected
    assert f.stats()["compiled_calls"] > 0, f.explain()


def test_max_over_axis_0_of_an_empty_selection_raises_too():
    def column_max(x, m):
        return x[m].max(axis=0)

    x = np.arange(12.0).reshape(4, 3)
    f = jitted(column_max)
    assert_same(f(x, np.array([True, False, True, False])),
                column_max(x, np.array([True, False, True, False])))
    expected = _numpy_error(column_max, x, np.zeros(4, bool))
    with pytest.raises(ValueError, match=expected):
        f(x, np.zeros(4, bool))


# --- element-wise work between selections, scalars and 0-d values --------------------------
ELEMENTWISE = {
    "log then sum": lambda p, t, m: -np.sum(np.log(p[m])),
    "squared error": lambda p, t, m: np.mean((p[m] - t[m]) ** 2),
    "affine": lambda p, t, m: np.sum(p[m] * 2 + 1),
    "reflected": lambda p, t, m: np.sum(1.0 - p[m]) + np.sum(2.0 / (1.0 + p[m])),
    "abs astype": lambda p, t, m: np.abs(p[m] - 0.5).astype(np.float32).sum(),
    "0-d traced scale": lambda p, t, m: np.sum(p[m] * t.mean() - p.max()),
    "where clip": lambda p, t, m: np.sum(np.where(p[m] > 0.5, p[m], 0.0))
                                  + np.clip(t[m], 0.2, 0.8).sum(),
    "comparison mean": lambda p, t, m: np.mean(p[m] > t[m]),
    "bool ops": lambda p, t, m: np.count_nonzero((p[m] > 0.3) & ~(t[m] > 0.6)),
    "inplace": lambda p, t, m: _inplace_sum(p[m], t.mean()),
    "binary cross-entropy": lambda p, t, m: -np.mean(
        t[m] * np.log(p[m]) + (1 - t[m]) * np.log1p(-p[m])),
    "recomputed mask": lambda p, t, m: np.sum(p[t > 0.5] * t[t > 0.5] - p[t > 0.5]),
    "ufuncs": lambda p, t, m: np.sum(np.sqrt(p[m]) + np.exp(-t[m]) + np.maximum(p[m], 0.4)),
}


def _inplace_sum(selection, shift):
    selection += shift
    selection *= 2
    return selection.sum()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_work_on_selections_stays_compiled(name, dtype):
    rng = np.random.default_rng(7)
    # p in (0, 1) where selected; 0 and negatives elsewhere would poison a dense log
    arguments = []
    for mask in masks_for((10,), rng):
        p = np.where(mask, rng.uniform(0.05, 0.95, 10), rng.choice([0.0, -1.0], 10))
        arguments.append((p.astype(dtype), rng.random(10).astype(dtype), mask))
    f = check_calls(ELEMENTWISE[name], arguments, rtol=2e-5 if dtype == np.float32 else 1e-12)
    assert_all_compiled(f, len(arguments))


def test_no_warnings_from_unselected_positions_while_tracing():
    """Eager NumPy never computes log(0) for a position the mask leaves out; the trace
    (which computes the first call's result) must not warn about it either."""
    def loss(p, m):
        return -np.sum(np.log(p[m]))

    p, m = np.array([0.5, 0.0, 0.25, -1.0]), np.array([True, False, True, False])
    f = jitted(loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(f(p, m), loss(p, m))
        assert_same(f(p, m), loss(p, m))
    assert f.stats()["compiled_calls"] == 1


# --- masks over leading dims of 2-D and 3-D arrays ------------------------------------------
@pytest.mark.parametrize("mask_ndim", [1, 2, 3])
def test_masks_over_leading_dims(mask_ndim):
    def summaries(x, m):
        sel = x[m]
        return (np.sum(sel), sel.mean(), np.sum(sel * 2.0, axis=0), sel.mean(axis=0),
                np.max(sel + 1.0, axis=0, keepdims=True), sel.var(), np.sum(x[m, ...]),
                np.sum(sel ** 2, axis=-1).sum() if sel.ndim > 1 else sel.sum())

    rng = np.random.default_rng(mask_ndim)
    x_shape = (4, 5, 3)
    arguments = []
    for mask in masks_for(x_shape[:mask_ndim], rng):
        mask.reshape(-1)[0] = True  # max over axis 0 needs one selected row
        arguments.append((rng.normal(size=x_shape), mask))
    f = check_calls(summaries, arguments)
    assert_all_compiled(f, len(arguments))


def test_trailing_dims_broadcast_against_arrays_of_their_rank():
    def normalized(x, m, scale):
        rows = x[m] * scale  # (count, 3) * (3,)
        return np.sum(rows, axis=0), (rows - rows.mean(axis=0)).std()

    rng = np.random.default_rng(3)
    arguments = [(rng.normal(size=(6, 3)), mask, rng.normal(size=3))
                 for mask in masks_for((6,), rng)]
    f = check_calls(normalized, arguments)
    assert_all_compiled(f, len(arguments))


def test_zero_size_arrays():
    def summaries(x, m):
        return np.sum(x[m]), np.mean(x[m]), np.any(x[m] > 0), np.sum(x[m], axis=0)

    arguments = [(np.zeros((0, 3)), np.zeros(0, bool)), (np.ones((0, 3)), np.zeros(0, bool))]
    f = check_calls(summaries, arguments)
    assert_all_compiled(f, len(arguments))
    one_dim = check_calls(lambda x, m: (np.sum(x[m]), np.mean(x[m])),
                          [(np.zeros(0), np.zeros(0, bool)), (np.ones(0), np.zeros(0, bool))])
    assert_all_compiled(one_dim, 2)


def test_masks_computed_inside_the_function_and_dynamic_sizes():
    def positive_stats(x):
        positive = x[x > 0]
        return np.sum(positive), np.mean(positive), np.count_nonzero(x[x < -1.0])

    rng = np.random.default_rng(11)
    arguments = [(rng.normal(size=n),) for n in (5, 7, 9, 12, 16)]
    f = check_calls(positive_stats, arguments, dynamic=True)
    assert f.stats()["compiles"] <= 2 and f.stats()["eager_calls"] == {}, f.explain()


def test_masked_reads_inside_a_loop_over_time_steps():
    """A per-step masked loss (padding left out) in a loop the front end captures: one
    compile per bucket of lengths, every call compiled after each bucket's first."""
    def sequence_loss(logp, mask):
        total = 0.0
        for t in range(logp.shape[0]):
            total = total + np.sum(logp[t][mask[t]]) / max(1, logp.shape[1])
        return total

    rng = np.random.default_rng(6)
    lengths = (5, 7, 6, 8)
    arguments = [(rng.normal(size=(n, 4)), rng.random((n, 4)) < 0.5) for n in lengths]
    f = check_calls(sequence_loss, arguments, dynamic=True)
    assert f.stats()["compiles"] == 1 and f.stats()["eager_calls"] == {}, f.explain()


# --- a model metric and a masked loss with gradients -----------------------------------------
def test_accuracy_metric_on_the_positive_class():
    def recall(scores, labels):
        pred = (scores > 0).astype(np.int64)
        return np.mean(pred[labels == 1] == 1), np.sum(pred[labels == 0] == 1)

    rng = np.random.default_rng(5)
    arguments = [(rng.normal(size=32), rng.integers(0, 2, 32)) for _ in range(4)]
    arguments.append((rng.normal(size=32), np.zeros(32, np.int64)))  # no positives: NaN
    f = check_calls(recall, arguments)
    assert_all_compiled(f, len(arguments))


def masked_loss(w, x, y, m):
    """Logistic loss over the rows ``m`` selects; a row left out has p == 1.0 exactly,
    where a dense log(1 - p) is -inf and, without care, its gradient 0 * inf = NaN."""
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    return -np.mean(y[m] * np.log(p[m]) + (1.0 - y[m]) * np.log(1.0 - p[m]))


def _loss_arguments(rng, w, count=12):
    x = rng.normal(size=(count, 3))
    x[0] = 200.0 * np.sign(w)  # x[0] @ w >= 40: exp(-40) vanishes next to 1, so p == 1.0
    y = (rng.random(count) < 0.5).astype(np.float64)
    m = rng.random(count) < 0.6
    m[0] = False
    return x, y, m


def _finite_difference(function, w, *rest, step=1e-6):
    gradient = np.zeros_like(w)
    for i in range(w.size):
        up, down = w.copy(), w.copy()
        up[i] += step
        down[i] -= step
        gradient[i] = (function(up, *rest) - function(down, *rest)) / (2 * step)
    return gradient


def test_masked_loss_gradient_matches_finite_differences():
    rng = np.random.default_rng(9)
    step = jitted(tj.value_and_grad(masked_loss))
    calls = 0
    for _ in range(4):
        w = rng.normal(size=3)
        x, y, m = _loss_arguments(rng, w)
        assert 1.0 / (1.0 + np.exp(-(x[0] @ w))) == 1.0
        with np.errstate(divide="raise"):
            value, gradient = step(w, x, y, m)
        calls += 1
        assert np.isfinite(gradient).all(), gradient
        np.testing.assert_allclose(value, masked_loss(w, x, y, m), rtol=1e-12)
        np.testing.assert_allclose(gradient, _finite_difference(masked_loss, w, x, y, m),
                                   rtol=1e-5, atol=1e-8)
    assert_all_compiled(step, calls)


def test_masked_loss_on_tensors_backward_through_compiled_code():
    """A jit function called with a Tensor requiring grad: the compiled backward gives
    the gradient the eager tape (real gathers) gives."""
    rng = np.random.default_rng(4)
    f = jitted(masked_loss)
    for _ in range(3):
        w0 = rng.normal(size=3)
        x, y, m = _loss_arguments(rng, w0)
        w = tj.tensor(w0, requires_grad=True)
        out = f(w, x, y, m)
        out.backward()
        reference = tj.tensor(w0, requires_grad=True)
        masked_loss(reference, x, y, m).backward()
        np.testing.assert_allclose(np.asarray(out.data), masked_loss(w0, x, y, m), rtol=1e-12)
        assert np.isfinite(w.grad.data).all()
        np.testing.assert_allclose(w.grad.data, reference.grad.data, rtol=1e-10, atol=1e-12)
    assert f.stats()["compiled_calls"] >= 2, f.explain()


def test_gradient_of_a_float32_masked_sum():
    def loss(x, m):
        return np.sum(np.sqrt(x[m])) + np.mean(x[m] ** 2)

    rng = np.random.default_rng(2)
    step = jitted(tj.value_and_grad(loss))
    for mask in masks_for((8,), rng)[:2] + [rng.random(8) < 0.5]:
        x = np.where(mask, rng.uniform(0.5, 2.0, 8), 0.0).astype(np.float32)
        value, gradient = step(x, mask)
        count = max(int(mask.sum()), 1)
        expected = np.where(mask, 0.5 / np.sqrt(np.where(mask, x, 1.0)) + 2 * x / count, 0.0)
        assert value.dtype == np.float32 and gradient.dtype == np.float32
        np.testing.assert_allclose(gradient, expected, rtol=1e-5)
    assert step.stats()["compiled_calls"] >= 1, step.explain()


# --- uses that need the length: value guards -------------------------------------------------
def test_len_shape_and_size_guard_the_count():
    def per_element(x, m):
        sel = x[m]
        return np.sum(sel) / len(sel), sel.shape[0] + sel.size, np.shape(sel)

    rng = np.random.default_rng(8)
    x = rng.normal(size=6)
    two = np.array([True, False, True, False, False, False])
    three = np.array([True, True, True, False, False, False])
    other_two = np.array([False, False, False, False, True, True])
    f = check_calls(per_element, [(x, two), (x, other_two), (x, three), (x, three), (x, three),
                                  (x, two)])
    assert f.stats()["compiled_calls"] >= 2, f.explain()


# --- what cannot be compiled runs eagerly, with the user's line -------------------------------
def _returns_it(x, m):
    return x[m]


def _indexes_it(x, m):
    return x[m][0]


def _sorts_it(x, m):
    return np.sort(x[m])


def _lists_it(x, m):
    return sum(x[m].tolist())


def _iterates_it(x, m):
    return sum(x[m])


def _concatenates_it(x, m):
    return np.concatenate([x[m], x[m]]).sum()


def _mixes_masks(x, m):
    return np.sum(x[m] * x[~m])


def _mixes_thresholds(x, m):
    return np.sum(x[m] * x[x > -10.0])  # the same length only when m is all True


def _traced_scale_first(x, m):
    return np.sum(x.mean() * x[m])


def _returns_it_in_a_tuple(x, m):
    return x.sum(), (x[m] + 1,)


def _argmax_of_it(x, m):
    return np.argmax(x[m])


def _full_array_operand(x, m):
    return np.sum(x[m] + x)


@pytest.mark.parametrize("function", [
    _returns_it, _indexes_it, _sorts_it, _lists_it, _iterates_it, _concatenates_it,
    _mixes_masks, _mixes_thresholds, _traced_scale_first, _returns_it_in_a_tuple, _argmax_of_it,
    _full_array_operand,
], ids=lambda function: function.__name__)
def test_uses_needing_the_elements_run_eagerly_with_the_users_line(function):
    x = np.array([1.0, -2.0, 3.0, 4.0])
    arguments = [(x, np.array([True, False, True, True])), (x, np.array([True] * 4)),
                 (x, np.array([False, True, False, True]))]
    f = jitted(function)
    for x_now, m in arguments:
        try:
            want = function(x_now, m)
        except (IndexError, ValueError) as error:  # x[m] + x with count != 4, x[m][0] empty
            with pytest.raises(type(error)):
                f(x_now, m)
            continue
        assert_same(f(x_now, m), want)
    stats = f.stats()
    assert stats["compiled_calls"] == 0, f.explain()
    reason = " ".join(stats["eager_reasons"].values())
    assert __file__ + ":" in reason and "depends on the data" in reason, reason
    strict = jitted(function, fallback="raise")
    with pytest.raises(TraceError) as error:
        strict(x, arguments[0][1])
    assert str(error.value).startswith(__file__ + ":"), str(error.value)


def test_selection_keeps_the_mask_it_was_made_with():
    """An in-place write to the mask after the read does not change the selection."""
    def after_write(x):
        m = x > 0
        positive = x[m]
        m[...] = True
        return np.sum(positive), np.sum(x[m])

    f = check_calls(after_write, [(np.array([1.0, -2.0, 3.0]),), (np.array([-1.0, 2.0, 5.0]),)])
    assert_all_compiled(f, 2)


def test_other_mask_reads_behave_as_before():
    """A constant mask still indexes concretely; a mask of the wrong shape raises NumPy's
    IndexError; a traced mask over a non-leading axis still runs eagerly."""
    keep = np.array([True, False, True])

    def constant(x):
        return x[keep] * 2

    f = check_calls(constant, [(np.arange(3.0),), (np.ones(3),)])
    assert_all_compiled(f, 2)

    def wrong_shape(x, m):
        return np.sum(x[m])

    f = jitted(wrong_shape)
    with pytest.raises(IndexError):
        f(np.arange(4.0), np.ones(3, bool))

    def columns(x):
        return np.sum(x[:, x[0] > 0])

    f = check_calls(columns, [(np.array([[1.0, -1.0], [2.0, 3.0]]),)])
    assert f.stats()["compiled_calls"] == 0
