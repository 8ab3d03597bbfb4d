"""``float(x)`` and ``x.item()`` of a traced one-element value are run-time Python numbers
(``tracer/conversions.python_number``), not values frozen under a guard: a training step
that ends with ``return float(loss)`` or ``loss.item()`` ran eagerly from its fourth call
on (its value guard failed at every call). Results keep eager's types (a Python ``float``
or ``int``, also in lists a captured loop fills), decisions on them are guarded as any
comparison is, and what Python cannot convert still raises as it does eagerly."""

import numpy as np
import pytest
from real_model_checks import all_compiled, assert_same, rng_for, run_calls

import tracejit as tj

F64 = {"rtol": 1e-12, "atol": 1e-12}


def step_returning_item(x, w):
    h = np.tanh(x @ w)
    return ((h ** 2).mean()).item()


def step_returning_float(x, w, lr):
    loss = ((x @ w) ** 2).mean()
    return float(loss), float(loss) * lr + lr ** 2, float(x[0, 0])


def counts(x):
    positive = (x > 0).sum().item()
    return positive, positive + 1, positive * 0.5, positive // 2, x[:1].item()


@pytest.mark.parametrize("model, make", [
    (step_returning_item,
     lambda rng, n: (rng.standard_normal((n, 3)), rng.standard_normal((3, 2)))),
    (step_returning_float, lambda rng, n: (rng.standard_normal((n, 3)),
                                           rng.standard_normal((3, 2)), 0.1 * n)),
    (counts, lambda rng, n: (rng.standard_normal(n),)),
])
def test_python_numbers_are_returned_from_compiled_calls(model, make):
    rng = rng_for(1100)
    arguments = [make(rng, 4) for _ in range(4)]
    f = run_calls(model, arguments, repeats=1, **F64)
    assert all_compiled(f, 4) and f.stats()["compiles"] == 1, f.stats()


def branch_on_item(x):
    total = x.sum().item()
    if total > 0:
        return x * total
    return x - total


def test_a_branch_on_an_item_follows_the_data():
    rng = rng_for(1101)
    f = run_calls(branch_on_item, [rng.standard_normal(5) + shift for shift in
                                   (1.0, -1.0, 1.0, -1.0, 2.0)], **F64)
    assert f.stats()["compiles"] <= 2, f.stats()


def loop_of_items(xs):
    total, maxima = 0.0, []
    for t in range(xs.shape[0]):
        total += float(xs[t].sum())
        maxima.append(xs[t].max().item())
    return total, maxima, np.array(maxima)


def test_items_in_a_captured_loop_stay_python_floats():
    rng = rng_for(1102)
    run_calls(loop_of_items, [(rng.standard_normal((n, 3)),) for n in (3, 4, 5, 1, 7, 2)],
              **F64)


class Trainer:
    def __init__(self):
        self.last_loss = None

    def step(self, x, w):
        loss = ((x @ w) ** 2).mean()
        self.last_loss = float(loss)
        return loss


def test_an_item_written_into_an_attribute_is_a_python_float():
    from real_model_checks import jitted

    rng = rng_for(1103)
    eager, compiled = Trainer(), Trainer()
    f = jitted(compiled.step)
    for _ in range(4):
        x, w = rng.standard_normal((3, 2)), rng.standard_normal((2, 2))
        assert_same(f(x, w), eager.step(x, w), **F64)
        assert_same(compiled.last_loss, eager.last_loss, **F64)
    assert all_compiled(f, 4), f.stats()


def conversions(x):
    return float(x[0]), x[1].item(), float(x[2] > 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint32,
                                   np.uint64, np.bool_])
def test_each_dtype_converts_as_python_does(dtype):
    values = [np.array([1.5, -2.0, 0.0]), np.array([np.nan, np.inf, -0.0]),
              np.array([2.0 ** 40, 7.0, 3.0])]
    arguments = []
    for value in values:
        with np.errstate(invalid="ignore"):
            cast = value.astype(dtype) if dtype is np.bool_ or np.isfinite(value).all() or (
                np.dtype(dtype).kind == "f") else np.nan_to_num(value).astype(dtype)
        arguments.append((cast,))
    run_calls(conversions, arguments, rtol=0, atol=0)


def unconvertible(x):
    return float(x)  # a two-element array: TypeError, as eager raises


def test_what_python_cannot_convert_raises_as_eager_does():
    run_calls(unconvertible, [(np.ones(2),), (np.ones(2),)])


# --- arithmetic between Python numbers is Python's (tracer/python_arithmetic.py) -------------
def divisions(x, scale):
    total = float(x.sum())
    return 1.0 / total, total // scale, total % scale, scale / total


def powers(x, exponent):
    base = float(x.sum())
    return base ** exponent


def guarded_inverse(x):
    total = float(x.sum())
    try:
        inverse = 1.0 / total
    except ZeroDivisionError:
        inverse = 0.0
    return x * inverse


@pytest.mark.parametrize("model, arguments", [
    # Python raises ZeroDivisionError where NumPy gives inf or nan
    (divisions, [(np.array([1.0, 2.0]), 2.0), (np.array([3.0, 1.0]), 3.0),
                 (np.array([1.0, -1.0]), 2.0), (np.array([2.0, 5.0]), 0.0),
                 (np.array([2.0, 5.0]), 4)]),
    # 0.0 ** -1 raises, 10.0 ** 400 overflows, (-8.0) ** 0.5 is complex
    (powers, [(np.array([1.0, 2.0]), 2.0), (np.array([3.0, 1.0]), 0.5),
              (np.array([0.0, 0.0]), -1.0), (np.array([6.0, 4.0]), 400.0),
              (np.array([-6.0, -2.0]), 0.5), (np.array([-6.0, -2.0]), 3.0),
              (np.array([2.0, 2.0]), -2), (np.inf * np.ones(2), 3.0)]),
    (guarded_inverse, [(np.array([1.0, 2.0]),), (np.array([3.0, 1.0]),),
                       (np.array([1.0, -1.0]),), (np.array([2.0, 2.0]),)]),
])
def test_python_number_arithmetic_raises_where_python_does(model, arguments):
    run_calls(model, arguments, **F64)


def mean_over(xs, count):
    total = 0.0
    for t in range(xs.shape[0]):
        total += float(xs[t].sum()) / count
    return total


def test_a_division_by_a_run_time_count_in_a_loop():
    rng = rng_for(1104)
    run_calls(mean_over, [(rng.standard_normal((n, 3)), count) for n, count in
                          ((3, 2), (4, 3), (5, 0), (6, 1.5), (2, 0.0))], **F64)


NAMES = ["a", "b", "c", "d", "e"]


def integer_uses(x, W):
    count = int((x > 0).sum())
    best = int(np.argmax(x))
    uses = [count * 2, best + 1, W[best], np.zeros(count), x[:count], NAMES[best],
            count > 2, x.reshape(1, -1)[0, best], int(x.shape[0] > 3)]
    if count > 2:
        uses.append(count // 2)
    for k in range(count):
        uses.append(k)
    return uses


def test_int_of_a_traced_integer_is_a_python_int_wherever_it_goes():
    rng = rng_for(1105)
    W = rng.standard_normal((5, 3))
    run_calls(integer_uses, [(rng.standard_normal(5), W) for _ in range(5)], **F64)


def comparisons_of_python_numbers(x, limit):
    total = float(x.sum())
    return total > limit, total == limit, not total < limit


def test_comparisons_of_python_numbers_are_python_bools():
    rng = rng_for(1106)
    f = run_calls(comparisons_of_python_numbers,
                  [(rng.standard_normal(4), limit) for limit in (0.5, -0.5, 1.5, 0.0)], **F64)
    assert f.stats()["compiled_calls"] >= 1, f.stats()


def loss_scaled_by_a_float(w, x):
    h = np.tanh(x @ w)
    scale = float((h ** 2).mean())  # a Python number: no gradient flows through it
    return (h * scale).sum()


def test_a_python_number_carries_no_gradient():
    import tracejit as tj

    rng = rng_for(1107)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    h = np.tanh(x @ w)
    want = x.T @ ((1 - h ** 2) * float((h ** 2).mean()))
    step = tj.jit(tj.value_and_grad(loss_scaled_by_a_float), cache="memory")
    for _ in range(3):
        np.testing.assert_allclose(step(w, x)[1], want, rtol=1e-12)
    weights = tj.tensor(w, requires_grad=True)
    compiled = tj.jit(loss_scaled_by_a_float, cache="memory")
    for _ in range(3):
        weights.grad = None
        compiled(weights, x).backward()
        np.testing.assert_allclose(np.asarray(weights.grad), want, rtol=1e-12)
    assert step.stats()["compiled_calls"] >= 1 and compiled.stats()["compiled_calls"] >= 1


def formatted(x, lr):
    loss = float((x ** 2).mean())
    count = int((x > 0).sum())
    return f"loss {loss:.3f} n={count} lr={lr}", str(loss), loss


def percent_formatted(x):
    cost = (x ** 2).mean()
    return x * 2, "cost %f" % cost, "%.2f and %d" % (cost, x.size)


def printing_loop(x, num_iterations):
    w = np.zeros_like(x)
    for i in range(num_iterations):
        cost = ((x - w) ** 2).mean()
        w = w + 0.1 * (x - w)
        if i % 100 == 0:
            print("Cost after iteration %i: %f" % (i, cost))
    return w


@pytest.mark.parametrize("model", [formatted, percent_formatted])
def test_formatting_a_computed_float_runs_eagerly_at_once(model):
    """A computed float formatted into text (an f-string of ``float(loss)``, ``"%f" %
    cost``) would be guarded on its exact value, which failed at nearly every compiled call
    (new data, or the compiled value a last bit off the traced one): every call ran
    eagerly after the compiled one and every few a new path was traced and compiled. The
    trace refuses it, naming the line; later calls run eagerly without tracing."""
    rng = rng_for(1108)
    arguments = [(rng.standard_normal(4), 0.1 * (k % 2 + 1)) for k in range(4)]
    if model is percent_formatted:
        arguments = [(x,) for x, _ in arguments]
    run_calls(model, arguments, **F64)
    compiled = tj.jit(model, cache="memory")
    for call in arguments:
        assert_same(compiled(*call), model(*call), **F64)
    stats = compiled.stats()
    assert stats["traced_calls"] == 0 and stats["compiles"] == 0, stats
    assert "formatting a computed float" in compiled.explain()


def test_a_loop_printing_a_formatted_cost_compiles(capsys):
    """Course code's ``print("Cost after iteration %i: %f" % (i, cost))`` every 100 trips
    (it traced, compiled ~1000 kernels and ran eagerly on most calls, hundreds of times
    slower than NumPy; then 3e4d89e ran it eagerly at once): the print's rows are kept at
    every trip and printed after the loop from the compiled values
    (tracer/loop_prints.py, tracer/deferred_text.py), printing what NumPy prints."""
    x = np.linspace(0.0, 1.0, 7)
    compiled = tj.jit(printing_loop, cache="memory")
    for count in (300, 300, 250):
        want = printing_loop(x, count)
        eager_text = capsys.readouterr().out
        assert_same(compiled(x, count), want, **F64)
        assert capsys.readouterr().out == eager_text
    stats = compiled.stats()
    assert stats["eager_calls"] == {} and stats["compiled_calls"] >= 1, stats
