"""Focused behaviour of ``tracer.trace``: value guards and their locations, symbolic dims
and shape guards, implicit inputs, Python scalars, print effects, in-place writes, the
refusals (each a ``TraceError`` that starts with the user's ``file:line``), escaped
tracers, and functions without readable source.

Expectations are eager NumPy's results or written out by hand; line numbers are looked
up in this file's source, so the tests survive edits above them.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import math

import numpy as np
import pytest

from tracejit.tracer import TraceError, trace
from tracejit.tracer.dims import DimExpr
from tracejit.tracer.ir import Symbol, parse_graph, verify
from tracejit.tracer.tracing import current_context

THIS_FILE = __file__
S0, S1 = DimExpr.symbol("s0"), DimExpr.symbol("s1")


def line_of(function, text):
    """The line number in this file of the first line of ``function`` containing ``text``."""
    lines, first = inspect.getsourcelines(function)
    for offset, line in enumerate(lines):
        if text in line:
            return first + offset
    raise AssertionError(f"{text!r} is not in {function.__name__}")


def assert_refused(function, *args, offending, mentions=(), **kwargs):
    """Tracing ``function`` raises a TraceError naming this file and the offending line."""
    with pytest.raises(TraceError) as info:
        trace(function, *args, **kwargs)
    message = str(info.value)
    expected_prefix = f"{THIS_FILE}:{line_of(function, offending)}: "
    assert message.startswith(expected_prefix), message
    for word in mentions:
        assert word in message, message
    assert current_context() is None
    return message


# --- the seed example ---------------------------------------------------------------------


def dynamic_graph_example(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 2
    return y


@pytest.mark.parametrize(
    ("values", "taken"), [([1.0, -1.0, 2.0], True), ([-3.0, -2.0, -1.0], False)]
)
def test_seed_example_records_one_bool_guard(values, taken):
    x = np.array(values)
    traced = trace(dynamic_graph_example, x)
    np.testing.assert_array_equal(traced.outputs, dynamic_graph_example(x.copy()))
    (guard,) = traced.value_guards
    assert guard.convert == "bool"
    assert guard.expected is taken
    assert guard.location.file == THIS_FILE
    assert guard.location.line == line_of(dynamic_graph_example, "if x.sum() > 0:")
    assert guard.location.function == "dynamic_graph_example"
    assert guard.location.source == "if x.sum() > 0:"
    assert f"test_tracer_behaviour.py:{guard.location.line}" in str(traced)
    assert traced.shape_guards == ()


def test_seed_example_ir_text():
    traced = trace(dynamic_graph_example, np.array([1.0, -1.0, 2.0]))
    text = str(traced)
    assert text.splitlines()[0] == "graph dynamic_graph_example"
    assert "  in %0: f64[3]" in text
    assert "guard bool(" in text and ") == True  # " in text
    assert "multiply(%0, 2)" in text and "subtract" not in text


# --- value guards on conversions ----------------------------------------------------------


def convert_with_int(x):
    n = int(x.sum())
    return x * n, n


def convert_with_float(x):
    return x / float(x.max())


def convert_with_item(x):
    return x.min().item() + 1


def convert_with_index(x):
    count = x.astype(np.int64).sum()
    return np.ones(count)


@pytest.mark.parametrize(
    ("function", "convert", "expected"),
    [
        (convert_with_int, "int", 6),
        (convert_with_index, "index", 6),
    ],
    ids=lambda item: getattr(item, "__name__", str(item)),
)
def test_conversions_record_value_guards(function, convert, expected):
    x = np.array([1.0, 2.0, 3.0])
    traced = trace(function, x)
    eager = function(x.copy())
    if isinstance(eager, tuple):
        np.testing.assert_array_equal(traced.outputs[0], eager[0])
        assert traced.outputs[1] == eager[1] and type(traced.outputs[1]) is type(eager[1])
    else:
        np.testing.assert_array_equal(traced.outputs, eager)
        assert type(traced.outputs) is type(eager)
    (guard,) = traced.value_guards
    assert guard.convert == convert
    assert guard.expected == expected and type(guard.expected) is type(expected)


@pytest.mark.parametrize("function", [convert_with_float, convert_with_item])
def test_float_and_item_are_run_time_python_numbers(function):
    """``float(x.max())`` and ``x.min().item()`` record no value guard: the result is a
    Python number computed at run time (tracer/conversions.python_number)."""
    x = np.array([1.0, 2.0, 3.0])
    traced = trace(function, x)
    eager = function(x.copy())
    np.testing.assert_array_equal(traced.outputs, eager)
    assert type(traced.outputs) is type(eager) and not traced.value_guards


def truth_of_an_array(x):
    if x > 0:
        return x
    return -x


def test_truth_of_a_multi_element_array_fails_like_numpy():
    x = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="ambiguous"):
        truth_of_an_array(x)
    # (the trace refuses it: eagerly 'x in a list of arrays' may find x by identity)
    with pytest.raises(TraceError, match="ambiguous"):
        trace(truth_of_an_array, x)


def halve_and_count(x):
    steps = 0
    while np.abs(x).max() > 1.0:
        x = x / 2.0
        steps += 1
    return x, steps


def test_data_dependent_loop_counter_is_a_python_int():
    x = np.array([3.0, -7.0, 1.0])
    expected_array, expected_steps = halve_and_count(x.copy())
    traced = trace(halve_and_count, x)
    np.testing.assert_array_equal(traced.outputs[0], expected_array)
    assert traced.outputs[1] == expected_steps == 3
    assert type(traced.outputs[1]) is int
    # one loop node carries the counter (tracer/while_loops.py, exit_ints.py): no guard
    # per trip's decision, so one trace serves every trip count
    assert not [guard for guard in traced.value_guards if guard.location.line == line_of(
        halve_and_count, "while np.abs(x).max() > 1.0:") and guard.convert == "bool"]
    assert any(eqn.prim.name == "loop" for eqn in traced.graph.equations)


# --- symbolic dims ------------------------------------------------------------------------


def compare_with_two(x):
    if x.shape[0] > 2:
        return x * 2
    return x


def compare_with_six(x):
    if x.shape[0] > 6:
        return x * 2
    return x


def loop_over_rows(x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + x[i]
    return total


def test_dynamic_dim_gets_the_pow2_bucket():
    traced = trace(compare_with_two, np.arange(5.0), dynamic=True)
    assert traced.graph.symbols == (Symbol("s0", 5, 8),)
    assert traced.graph.inputs[0].aval.shape == (S0,)
    assert traced.shape_guards == ()  # 5..8 > 2 holds over the whole bucket
    np.testing.assert_array_equal(traced.outputs, np.arange(5.0) * 2)


def test_comparison_the_bucket_cannot_decide_records_a_shape_guard():
    traced = trace(compare_with_six, np.arange(5.0), dynamic=True)
    (guard,) = traced.shape_guards
    assert (guard.lhs, guard.op, guard.rhs, guard.expected) == (S0, ">", 6, False)
    assert guard.location.line == line_of(compare_with_six, "if x.shape[0] > 6:")
    assert traced.value_guards == ()
    np.testing.assert_array_equal(traced.outputs, np.arange(5.0))


def test_range_over_a_dynamic_dim_becomes_a_loop():
    # Issue 13: the loop is captured (one loop equation), so the length is not pinned.
    x = np.arange(5.0)
    traced = trace(loop_over_rows, x, dynamic=True)
    assert not traced.shape_guards
    assert [eqn.prim.name for eqn in traced.graph.equations].count("loop") == 1
    assert traced.outputs == loop_over_rows(x.copy())


def test_range_over_a_short_dynamic_dim_unrolls():
    x = np.arange(2.0)  # fewer than 3 iterations on the first call: unrolled, as before
    traced = trace(loop_over_rows, x, dynamic=True)
    assert "loop" not in [eqn.prim.name for eqn in traced.graph.equations]
    assert traced.outputs == loop_over_rows(x.copy())


def add_pair(x, y):
    return x + y


def test_equal_dynamic_dims_share_a_symbol():
    traced = trace(add_pair, np.ones(5), np.ones(5), dynamic=True)
    assert traced.graph.symbols == (Symbol("s0", 5, 8),)
    assert [var.aval.shape for var in traced.graph.inputs] == [(S0,), (S0,)]


def test_different_sizes_in_one_bucket_get_different_symbols():
    traced = trace(add_pair, np.ones((5, 1)), np.ones(6), dynamic=True)
    assert traced.graph.symbols == (Symbol("s0", 5, 8), Symbol("s1", 5, 8))
    assert traced.outputs.shape == (5, 6)


def identity_times_one(x):
    return x * 1.0


def test_sizes_zero_and_one_stay_static():
    traced = trace(identity_times_one, np.ones((0, 1, 5)), dynamic=True)
    assert traced.graph.inputs[0].aval.shape == (0, 1, S0)
    assert traced.graph.symbols == (Symbol("s0", 5, 8),)


def first_half(x):
    n = x.shape[0]
    return x[: n // 2], n


def test_shape_arithmetic_shows_in_the_ir():
    x = np.arange(13.0)
    traced = trace(first_half, x, dynamic=True)
    assert "f64[s0 // 2]" in str(traced)
    assert traced.graph.symbols == (Symbol("s0", 9, 16),)
    np.testing.assert_array_equal(traced.outputs[0], x[:6])
    assert traced.outputs[1] == 13 and type(traced.outputs[1]) is int
    verify(traced.graph)
    assert parse_graph(str(traced.graph)) == traced.graph


def test_dynamic_dict_by_name_position_and_range():
    x = np.ones((5, 6))
    by_name = trace(identity_times_one, x, dynamic={"x": (1,)})
    assert by_name.graph.inputs[0].aval.shape == (5, S0)
    assert by_name.graph.symbols == (Symbol("s0", 5, 8),)
    by_position = trace(identity_times_one, x, dynamic={0: (0,)})
    assert by_position.graph.inputs[0].aval.shape == (S0, 6)
    with_range = trace(identity_times_one, x, dynamic={"x": {0: (2, 100)}})
    assert with_range.graph.symbols == (Symbol("s0", 2, 100),)


def reshape_into_halves(x):
    n = x.shape[0]
    return x.reshape(n // 2, -1)


def test_reshape_by_half_a_dynamic_dim_round_trips():
    traced = trace(reshape_into_halves, np.ones((6, 4)), dynamic=True)
    np.testing.assert_array_equal(traced.outputs, np.ones((3, 8)))
    assert parse_graph(str(traced.graph)) == traced.graph


def scale_by_sqrt_of_dim(q):
    return q / np.sqrt(q.shape[-1])


def scale_by_float_times_dim(x):
    return x * (x.shape[0] * 0.5)


def add_positions(x):
    return x + np.arange(x.shape[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_ufunc_of_a_dynamic_dim(dtype):
    q = np.arange(15, dtype=dtype).reshape(3, 5)
    traced = trace(scale_by_sqrt_of_dim, q, dynamic=True)
    expected = scale_by_sqrt_of_dim(q.copy())
    np.testing.assert_array_equal(traced.outputs, expected)
    assert traced.outputs.dtype == expected.dtype == np.float64  # np.sqrt(int) is strong f64


def test_dynamic_dim_times_a_float():
    x = np.arange(5.0)
    traced = trace(scale_by_float_times_dim, x, dynamic=True)
    np.testing.assert_array_equal(traced.outputs, scale_by_float_times_dim(x.copy()))


def test_arange_of_a_dynamic_dim():
    x = np.ones(5)
    traced = trace(add_positions, x, dynamic=True)
    np.testing.assert_array_equal(traced.outputs, add_positions(x.copy()))
    assert traced.outputs.dtype == np.float64


# --- dtypes and constants -----------------------------------------------------------------


def times_numpy_float64(x):
    return x * np.float64(0.5)


def plus_zero_dimensional_constant(x):
    return x + np.array(2.0)


def variance_method(x):
    return x.var(axis=0), x.std()


def prefix_up_to_argmax(x):
    peak = np.argmax(x)
    return x[: peak + 1]


def test_numpy_float64_scalar_promotes_like_numpy():
    x = np.ones(3, np.float32)
    traced = trace(times_numpy_float64, x)
    assert traced.outputs.dtype == times_numpy_float64(x).dtype == np.float64


def test_zero_dimensional_array_constant():
    x = np.ones(3)
    traced = trace(plus_zero_dimensional_constant, x)
    np.testing.assert_array_equal(traced.outputs, plus_zero_dimensional_constant(x))


def test_var_method_on_a_traced_array():
    x = np.arange(6.0).reshape(3, 2)
    traced = trace(variance_method, x)
    expected = variance_method(x)
    np.testing.assert_array_equal(traced.outputs[0], expected[0])
    assert traced.outputs[1] == expected[1]


def test_slice_bound_from_traced_integer():
    x = np.array([1.0, 5.0, 2.0])
    traced = trace(prefix_up_to_argmax, x)
    np.testing.assert_array_equal(traced.outputs, prefix_up_to_argmax(x))
    assert [guard.convert for guard in traced.value_guards] == ["index"]


# --- implicit inputs ----------------------------------------------------------------------

WEIGHT = np.array([1.0, 2.0, 3.0])


def times_global(x):
    return x * WEIGHT


def make_closure_model():
    shift = np.array([0.5, 0.25, 0.125])

    def shifted(x):
        return x + shift

    return shifted, shift


DEFAULT_BIAS = np.array([3.0, 2.0, 1.0])


def minus_default(x, bias=DEFAULT_BIAS):
    return x - bias


class Scale:
    def __init__(self):
        self.w = np.array([2.0, 4.0, 8.0])

    def forward(self, x):
        return x * self.w


class Params:
    def __init__(self):
        self.gain = np.array([0.5, 1.5, 2.5])


def times_argument_attribute(x, params):
    return x * params.gain


def plus_local_array(x):
    local = np.array([1.0, 1.0, 2.0])
    return x + local


def _implicit_cases():
    closure, shift = make_closure_model()
    model = Scale()
    params = Params()
    return [
        ("global", times_global, (), WEIGHT, "global WEIGHT"),
        ("closure", closure, (), shift, "closure shift"),
        ("default", minus_default, (), DEFAULT_BIAS, "default argument 0"),
        ("self", model.forward, (), model.w, "self.w"),
        ("argument attribute", times_argument_attribute, (params,), params.gain,
         "argument 1.gain"),
    ]


@pytest.mark.parametrize(
    ("function", "extra", "array", "path"),
    [case[1:] for case in _implicit_cases()],
    ids=[case[0] for case in _implicit_cases()],
)
def test_implicit_inputs_become_graph_inputs(function, extra, array, path):
    x = np.array([1.0, -1.0, 0.5])
    traced = trace(function, x, *extra)
    np.testing.assert_array_equal(traced.outputs, function(x, *extra))
    (implicit,) = traced.implicit_inputs
    assert str(implicit.path) == path
    assert implicit.value is array
    assert traced.graph.constants == ()
    assert len(traced.graph.inputs) == 2
    assert traced.graph.inputs[implicit.input_index].aval.shape == array.shape
    if implicit.path.root[0] != "arg":
        assert implicit.path.resolve() is array


LAYERS = [np.ones(3), np.full(3, 2.0)]
CONFIG = {"scale": np.full(3, 3.0)}
KEEP = np.array([True, False, True])


def reads_containers(x):
    return x * LAYERS[1] + CONFIG["scale"]


def selects_with_global_mask(x):
    return x[KEEP]


def test_implicit_inputs_inside_global_containers():
    x = np.arange(3.0)
    traced = trace(reads_containers, x)
    assert [str(implicit.path) for implicit in traced.implicit_inputs] == [
        "global LAYERS[1]", "global CONFIG['scale']"
    ]
    assert traced.graph.constants == ()
    np.testing.assert_array_equal(traced.outputs, reads_containers(x))


def test_global_boolean_mask_is_not_baked_in():
    x = np.arange(3.0)
    traced = trace(selects_with_global_mask, x)
    np.testing.assert_array_equal(traced.outputs, [0.0, 2.0])
    # The mask's values decide the output shape, so they must be read (and guarded) at
    # every call, not folded into the graph.
    assert [str(implicit.path) for implicit in traced.implicit_inputs] == ["global KEEP"]


def test_array_created_inside_is_a_constant():
    traced = trace(plus_local_array, np.zeros(3))
    assert traced.implicit_inputs == []
    ((_, constant),) = traced.graph.constants
    np.testing.assert_array_equal(constant.data, [1.0, 1.0, 2.0])
    assert len(traced.graph.inputs) == 1


# --- Python scalars -----------------------------------------------------------------------


def scale_by(x, factor):
    return x * factor


def test_python_scalars_are_specialized():
    traced = trace(scale_by, np.ones(3, np.float32), 2.5)
    assert len(traced.graph.inputs) == 1
    spec = traced.input_specs[1]
    assert (spec.kind, spec.value) == ("static", 2.5)
    assert "multiply(%0, 2.5)" in str(traced)
    assert traced.outputs.dtype == np.float32


@pytest.mark.parametrize(("factor", "dtype"), [(2.5, np.float64), (3, np.int64)])
def test_python_scalar_marked_dynamic_is_a_weak_input(factor, dtype):
    x = np.ones(3, np.float32)
    traced = trace(scale_by, x, factor, dynamic={"factor": ()})
    assert traced.input_specs[1].kind == "scalar"
    scalar = traced.graph.inputs[1]
    assert scalar.aval.shape == () and scalar.aval.weak and scalar.aval.dtype == dtype
    np.testing.assert_array_equal(traced.outputs, x * factor)
    assert traced.outputs.dtype == np.float32  # weak: the array's dtype wins


def scale_with_keyword(x, *, factor=1.0, mode="scale"):
    return x * factor if mode == "scale" else x + factor


def test_keyword_arguments_are_static():
    traced = trace(scale_with_keyword, np.ones(2), factor=3.0, mode="shift")
    np.testing.assert_array_equal(traced.outputs, [4.0, 4.0])
    assert "add(%0, 3.0)" in str(traced)


# --- print ------------------------------------------------------------------------------


def print_loss(x):
    loss = np.mean(x * x)
    print("loss", loss, x.shape[0])
    return loss


def test_print_becomes_an_effect_and_prints_the_real_value(capsys):
    x = np.array([1.0, 2.0, 3.0, 4.0])
    print_loss(x)
    eager_output = capsys.readouterr().out
    traced = trace(print_loss, x)
    assert capsys.readouterr().out == eager_output == "loss 7.5 4\n"
    (effect,) = traced.graph.body[-1:]
    assert effect.kind == "print"
    assert effect.location.line == line_of(print_loss, 'print("loss", loss, x.shape[0])')
    assert "effect print(%" in str(traced)


def test_print_of_a_dynamic_dim_prints_its_value(capsys):
    trace(print_loss, np.ones(5), dynamic=True)
    assert capsys.readouterr().out == "loss 1.0 5\n"


# --- in-place writes ------------------------------------------------------------------------


def write_first(x):
    x[0] = 5
    return x * 2


def write_through_view(x):
    view = x[1:]
    view[0] = 5
    return x


def test_write_into_an_input_reaches_the_caller():
    x = np.array([1.0, 2.0, 3.0])
    eager_x = x.copy()
    expected = write_first(eager_x)
    traced = trace(write_first, x)
    np.testing.assert_array_equal(traced.outputs, expected)
    np.testing.assert_array_equal(x, eager_x)
    assert x[0] == 5
    assert list(traced.mutated_inputs) == [0]
    assert len(traced.graph.outputs) == 2


def test_inputs_are_untouched_when_not_written():
    x = np.array([1.0, 2.0, 3.0])
    trace(dynamic_graph_example, x)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])


def test_write_into_a_view_of_an_input_reaches_the_caller():
    """A write through ``view = x[1:]`` is a write into ``x`` (tracer/view_writes.py), as
    NumPy's view makes it: the trace writes the input back."""
    x = np.array([1.0, 2.0, 3.0])
    traced = trace(write_through_view, x)
    np.testing.assert_array_equal(traced.outputs, [1.0, 5.0, 3.0])
    np.testing.assert_array_equal(x, [1.0, 5.0, 3.0])
    assert list(traced.mutated_inputs) == [0]


# --- refusals -----------------------------------------------------------------------------

COUNTER = 0


class Box:
    pass


def draws_random(x):
    noise = np.random.normal(x * 2)  # around a computed value: refused
    return x + noise


def copies_generator(x, generator):
    # (nn.dropout, handed a generator, compiles since adversarial 21d: its body is traced)
    return x * copy.copy(generator).random(3)


def writes_global(x):
    global COUNTER
    COUNTER = COUNTER + 1
    return x


def sets_attribute(x, box):
    box.value = x * 2
    return x


def appends_to_argument(x, collected):
    collected.append(x * 2)
    return x


def formats_traced(x):
    label = f"total={x.sum()}"
    return x, label


def converts_with_asfortranarray(x):
    return np.asfortranarray(x) * 2  # (np.asarray of a traced array is the array itself)


def uses_fft(x):
    return np.fft.fft(x)


def uses_inverse(x):
    return np.linalg.inv(x)


def logs_traced(x):
    logging.getLogger("tracejit.test").info("value %s", x.sum())
    return x


REFUSALS = [
    ("np.random around a value", draws_random, lambda: (np.ones(3),), "np.random.normal(x * 2)",
     ("random",)),
    ("generator to library code", copies_generator,
     lambda: (np.ones(3), np.random.default_rng(0)), "copy.copy(generator)", ("random",)),
    ("global write", writes_global, lambda: (np.ones(3),), "global COUNTER", ("global",)),
    ("append to an argument", appends_to_argument, lambda: (np.ones(3), []),
     "collected.append(x * 2)", ("collected.append",)),
    ("f-string", formats_traced, lambda: (np.ones(3),), 'f"total={x.sum()}"', ("format",)),
    ("np.asfortranarray", converts_with_asfortranarray, lambda: (np.ones(3),),
     "np.asfortranarray(x)", ("NumPy",)),
    ("np.fft.fft", uses_fft, lambda: (np.ones(3),), "np.fft.fft(x)", ("np.fft.fft",)),
    ("np.linalg.inv", uses_inverse, lambda: (np.eye(3),), "np.linalg.inv(x)",
     ("np.linalg.inv",)),
    ("logging", logs_traced, lambda: (np.ones(3),), "logging.getLogger", ("logging",)),
]


@pytest.mark.parametrize(
    ("function", "make_args", "offending", "mentions"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_refusals_name_the_users_line(function, make_args, offending, mentions):
    arguments = make_args()
    assert_refused(function, *arguments, offending=offending, mentions=mentions)


def test_refused_writes_leave_outside_state_alone():
    collected = []
    with pytest.raises(TraceError):
        trace(appends_to_argument, np.ones(3), collected)
    assert collected == []
    assert COUNTER == 0


def test_an_attribute_write_on_an_argument_is_recorded_with_its_value():
    """``box.value = x * 2`` compiles (tracer/attribute_writes.py): after the traced call
    the object holds the concrete value, as after NumPy's call."""
    box = Box()
    traced = trace(sets_attribute, np.ones(3), box)
    assert type(box.value) is np.ndarray
    np.testing.assert_array_equal(box.value, np.full(3, 2.0))
    assert [write.name for write in traced.argument_writes] == ["value"]


def writes_and_then_fails(x, box):
    box.value = x * 2
    return np.random.normal(x) + x  # refused after the write


def test_a_failed_trace_puts_an_attribute_back():
    box = Box()
    box.value = "before"
    with pytest.raises(TraceError):
        trace(writes_and_then_fails, np.ones(3), box)
    assert box.value == "before"


# --- escaped tracers ------------------------------------------------------------------------

class STASH:  # a class: neither scanned for implicit inputs nor watched for writes
    pass


def leaks_a_tracer(x):
    doubled = x * 2
    # setattr on a class, not `obj.leaked = ...`: the front end records attribute writes
    # on objects (and undoes unrecorded ones), and this test needs a tracer to get out.
    setattr(STASH, "leaked", doubled)  # noqa: B010
    return doubled


def uses_the_leak(x):
    return x + STASH.leaked


def test_escaped_tracer_is_refused_after_its_trace():
    trace(leaks_a_tracer, np.ones(3))
    with pytest.raises(TraceError, match="escaped"):
        STASH.leaked + 1
    with pytest.raises(TraceError, match="escaped"):
        trace(uses_the_leak, np.ones(3))
    assert current_context() is None


# --- functions of every kind ----------------------------------------------------------------


def _exec_model():
    namespace = {"np": np}
    source = "def generated(x):\n    if x.sum() > 0:\n        return x * 2\n    return x - 1\n"
    exec(compile(source, "generated_model.py", "exec"), namespace)
    return namespace["generated"]


def test_function_without_source_traces_with_frame_locations():
    generated = _exec_model()
    with pytest.raises(OSError):
        inspect.getsource(generated)
    x = np.array([1.0, 2.0])
    traced = trace(generated, x)
    np.testing.assert_array_equal(traced.outputs, generated(x))
    (guard,) = traced.value_guards
    assert (guard.location.file, guard.location.line) == ("generated_model.py", 2)
    assert guard.location.function == "generated"


branch_lambda = lambda x: x * 2 if x.sum() > 0 else x - 1  # noqa: E731 - testing a lambda


def test_lambda_traces_with_its_line():
    x = np.array([-1.0, -2.0])
    traced = trace(branch_lambda, x)
    np.testing.assert_array_equal(traced.outputs, branch_lambda(x))
    (guard,) = traced.value_guards
    assert guard.expected is False
    assert guard.location.file == THIS_FILE
    assert "branch_lambda = lambda x:" in guard.location.source


class Classifier:
    def __init__(self):
        self.threshold = 0.5

    def forward(self, x):
        if x.mean() > self.threshold:
            return x - self.threshold
        return x


def test_method_traces():
    model = Classifier()
    x = np.array([1.0, 2.0])
    traced = trace(model.forward, x)
    np.testing.assert_array_equal(traced.outputs, model.forward(x))
    (guard,) = traced.value_guards
    assert guard.location.line == line_of(Classifier.forward, "if x.mean() > self.threshold:")


def with_nested_function(x):
    def flip_if_negative(values):
        if values.min() < 0:
            return -values
        return values

    return flip_if_negative(x) * 2


def test_nested_function_traces():
    x = np.array([-1.0, 2.0])
    traced = trace(with_nested_function, x)
    np.testing.assert_array_equal(traced.outputs, with_nested_function(x))
    (guard,) = traced.value_guards
    assert guard.location.function == "flip_if_negative"
    assert guard.location.line == line_of(with_nested_function, "if values.min() < 0:")


def add_one_after(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args) + 1

    return wrapper


@add_one_after
def decorated(x):
    if x.max() > 1:
        return x * 3
    return x


def test_decorated_function_traces():
    x = np.arange(3.0)
    traced = trace(decorated, x)
    np.testing.assert_array_equal(traced.outputs, decorated(x))
    (guard,) = traced.value_guards
    assert guard.location.line == line_of(decorated.__wrapped__, "if x.max() > 1:")
    assert traced.name == "decorated"


def test_tracing_leaves_no_state_behind():
    x = np.array([1.0, -1.0, 2.0])
    first = trace(dynamic_graph_example, x)
    assert current_context() is None
    with pytest.raises(TraceError):
        trace(draws_random, x)
    assert current_context() is None
    second = trace(dynamic_graph_example, x)
    assert second.graph == first.graph
    np.testing.assert_array_equal(dynamic_graph_example(x), [2.0, -2.0, 4.0])


def uses_math_on_static_shape(x):
    return x / math.sqrt(x.shape[-1])


def test_math_on_a_dynamic_dim_specializes():
    x = np.ones((3, 5))
    traced = trace(uses_math_on_static_shape, x, dynamic=True)
    np.testing.assert_array_equal(traced.outputs, uses_math_on_static_shape(x))
    assert any(guard.op == "==" and guard.rhs == 5 for guard in traced.shape_guards)
