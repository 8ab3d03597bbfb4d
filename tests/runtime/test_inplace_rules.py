"""In-place updates follow NumPy's rules under jit: a result that does not fit the array's
shape, or does not cast "same_kind" to its dtype (``int_array += float``), raises NumPy's
own error, as the eager call does, instead of being broadcast or cast silently."""

import numpy as np
import pytest

from tracejit import jit


def _int_buffer_plus_float(x):
    acc = np.zeros(3, dtype=np.int64)
    acc += x
    return acc


def _buffer_plus_bigger(x):
    a = np.zeros(3)
    a += x
    return a


def _traced_plus_bigger(x):
    a = x.copy()
    a += np.ones((2, 3))
    return a


def _traced_int_plus_float(x):
    a = (x * 0).astype(np.int64)
    a += x
    return a


def _loop_int_accumulator(x):
    acc = np.zeros(x.shape[1], dtype=np.int64)
    for t in range(x.shape[0]):
        acc += x[t]
    return acc


def _int_buffer_plus_int(x):
    acc = np.zeros(3, dtype=np.int64)
    acc += x
    return acc


CASES = [
    (_int_buffer_plus_float, np.ones(3)),
    (_buffer_plus_bigger, np.ones((2, 3))),
    (_traced_plus_bigger, np.ones(3)),
    (_traced_int_plus_float, np.ones(3)),
    (_loop_int_accumulator, np.ones((6, 3))),
]


@pytest.mark.parametrize("function, argument", CASES, ids=[f.__name__ for f, _ in CASES])
def test_invalid_inplace_update_raises_as_numpy_does(function, argument):
    with pytest.raises((TypeError, ValueError)) as eager:
        function(argument)
    jitted = jit(function, cache=False)
    for _ in range(3):
        with pytest.raises(type(eager.value)) as compiled:
            jitted(argument)
        assert str(compiled.value) == str(eager.value)
    stats = jitted.stats()
    assert stats["raised_calls"] == 3 and not stats["eager_calls"], stats


def test_valid_inplace_update_with_a_cast_still_compiles():
    jitted = jit(_int_buffer_plus_int, cache=False)
    for _ in range(3):
        np.testing.assert_array_equal(jitted(np.arange(3, dtype=np.int32)), [0, 1, 2])
    assert jitted.stats()["compiled_calls"] == 2


def _alias_sees_the_update(x):
    acc = np.zeros(3)
    alias = acc
    acc += x
    return alias * 1


def test_an_inplace_update_of_a_buffer_reaches_its_other_names():
    jitted = jit(_alias_sees_the_update, cache=False)
    for _ in range(3):
        np.testing.assert_array_equal(jitted(np.arange(3.0)), [0.0, 1.0, 2.0])


def _write_through_alias(x):
    a = np.zeros(3)
    b = a
    b[0] = x[0]
    return a * 1


def _write_then_read_from_a_tuple(x):
    out = np.zeros(3)
    cache = (out, 2)
    out[1:] = x[1:]
    return cache[0] + 0


def test_a_write_under_one_name_is_seen_through_every_name():
    for function in (_write_through_alias, _write_then_read_from_a_tuple):
        jitted = jit(function, cache=False)
        x = np.arange(1.0, 4.0)
        for _ in range(3):
            np.testing.assert_array_equal(jitted(x), function(x))


def _fill(buffer, x):
    buffer[0] = x[0] * 2


def _helper_fills_the_callers_buffer(x):
    out = np.zeros(3)
    _fill(out, x)
    return out + 0


def test_a_helper_writing_into_the_callers_buffer_is_seen_by_the_caller():
    jitted = jit(_helper_fills_the_callers_buffer, cache=False)
    x = np.arange(1.0, 4.0)
    for _ in range(3):
        np.testing.assert_array_equal(jitted(x), _helper_fills_the_callers_buffer(x))


def test_an_argument_updated_in_place_and_returned_is_the_argument():
    """``w -= lr * dw; return w`` returns the caller's array itself (NumPy's object), on
    the traced call and compiled calls; the result plan keeps that through the cache."""
    import tracejit as tj
    from tracejit.runtime.serialize import outputs_from_json, outputs_to_json

    def step(w, dw):
        w -= 0.1 * dw
        return w, w * 1.0

    f = tj.jit(step, cache="memory")
    for _ in range(3):
        w, dw = np.ones(4), np.full(4, 2.0)
        same, other = f(w, dw)
        assert same is w and other is not w
        np.testing.assert_allclose(w, 0.8)
    plan = f._variants[0].root.outputs
    assert plan.aliases == {0: 0}
    assert outputs_from_json(outputs_to_json(plan)).aliases == plan.aliases
