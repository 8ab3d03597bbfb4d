"""Adversarial real-model tests, sixth round: what a trace reads through layer objects,
dims that reach plain Python, and NumPy keywords, in the idioms of public NumPy model
code (cs231n solvers, numpy-ml layers, ML-From-Scratch, min-char-rnn, nnfs), run eagerly
and through ``jit`` on copies of the same arguments.

Covers what rounds one to five do not: settings and weights of layers reached by index
(``self.layers[i]``, ``self.layers[-1]``), through nested lists, dicts of layers,
``reversed``/``zip``/``enumerate``/comprehensions/``functools.reduce``, namedtuple and
``__slots__``/property/``__getattr__`` configs, partials of bound methods, counters a
layer keeps (``self.calls += 1``) through a loop variable, long outside lists (past the
per-container guard budget); dims in ``%``-formatting, ``str.format``, ``hex``, list
repetition and ``math``; ``np.array`` of nested lists of traced values (rotation
matrices); rounding half to even; ``where=``/``initial=`` masked reductions; ``order=``
in ``reshape``/``ravel`` on non-C inputs; ``np.split`` past the end; and lists appended
in loops whose last entry is corrected in place (``hs[-1] += ...`` aliasing the carry).

Each call compares results, dtypes and the arguments afterwards with eager NumPy.

Most findings are settings the trace read that no guard covers, so compiled code keeps
the traced outcome after the caller changes them: lazily created state (``if not
hasattr(self, "v")``, ``try: self.v except AttributeError``, ``"v" in self.__dict__``;
nnfs's momentum caches), keys added to dicts whose values are not all settings (dicts of
layers or weights, mixed configs with ``.get``/``in``), sets, Enum members, ranges and dtype
classes (``self.dtype``), objects replaced by another class with equal settings
(``isinstance`` dispatch, the method inlined), layers reached through a container class's
``__iter__``/``__getitem__`` or a namedtuple config, and partials of callable objects. Others:
a local dict keyed by a dim misses right after the store; in-place updates of a loop list's
entries (``hs[-1] += ...``, ``prev = hs[-1]; prev *= ...``) are lost in compiled loops;
``del self.cache`` leaves the attribute; dtype/type slips (``np.sum(..., dtype=np.int32)``,
``np.prod(x.shape)``, a returned ``Counter``, dict order).

Tests marked ``xfail(strict=True)`` are minimal reproductions of bugs found this way.
"""

import collections
import copy
import dataclasses
import enum
import functools
import math
from collections import namedtuple

import numpy as np
import pytest
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for, run_calls

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-5)


def follows_changes(model, call, changes, x=None):
    """``call(function, x)`` through ``jit`` and eagerly, twice (trace, compiled), then after
    each of ``changes`` (applied to shared state) once more: the compiled result follows
    every change as eager does."""
    f = jitted(model)
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3) if x is None else x
    for _ in range(2):
        assert_same(call(f, x), call(model, x), **F64)
    for change in changes:
        change()
        for _ in range(2):
            assert_same(call(f, x), call(model, x), **F64, where=f"after {change.__name__}")
    return f


# --- settings of layers reached by index, through nested lists, dicts and iterators ---------
class Scale:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, x):
        return x * self.factor


class Net:
    def __init__(self, factors):
        self.layers = [Scale(factor) for factor in factors]

    def by_index(self, x):
        for i in range(len(self.layers)):
            x = x * self.layers[i].factor
        return x

    def by_last(self, x):
        return x * self.layers[-1].factor + self.layers[0].factor

    def by_reversed(self, x):
        for layer in reversed(self.layers):
            x = x * layer.factor + 1.0
        return x

    def by_enumerate(self, x):
        for i, layer in enumerate(self.layers):
            x = x * layer.factor + i
        return x

    def by_comprehension(self, x):
        return sum([layer.factor for layer in self.layers]) * x

    def by_generator(self, x):
        return x * math.prod(layer.factor for layer in self.layers)

    def by_reduce(self, x):
        return functools.reduce(lambda h, layer: layer(h), self.layers, x)


@pytest.mark.parametrize("route", ["by_index", "by_last", "by_reversed", "by_enumerate",
                                   "by_comprehension", "by_generator", "by_reduce"])
def test_a_layer_setting_read_by_index_or_iterator_follows_changes(route):
    net = Net([2.0, 3.0, 0.5])

    def change_last():
        net.layers[-1].factor = 4.0

    def change_first():
        net.layers[0].factor = -1.0

    def replace_middle():
        net.layers[1] = Scale(7.0)

    def append_one():
        net.layers.append(Scale(0.25))

    f = follows_changes(getattr(net, route), lambda g, x: g(x),
                        [change_last, change_first, replace_middle, append_one])
    no_internal_errors(f)


class Stage:
    """A residual stage of blocks, as ResNet-style NumPy code nests them."""

    def __init__(self, factors):
        self.blocks = [Scale(factor) for factor in factors]


def run_nested_lists(x, stages):
    for stage in stages:
        for layer in stage:
            x = x * layer.factor + 0.5
    return x


def run_stage_objects(x, stages):
    for stage in stages:
        for block in stage.blocks:
            x = np.tanh(x * block.factor)
    return x


def run_layer_dict(x, layers):
    for _name, layer in layers.items():
        x = x * layer.factor
    for layer in layers.values():
        x = x + layer.factor
    return x


def test_settings_of_layers_in_nested_lists_follow_changes():
    stages = [[Scale(2.0), Scale(3.0)], [Scale(0.5)]]

    def change_inner():
        stages[0][1].factor = 9.0

    def replace_inner():
        stages[1][0] = Scale(-2.0)

    def append_inner():
        stages[1].append(Scale(1.5))

    follows_changes(run_nested_lists, lambda g, x: g(x, stages),
                    [change_inner, replace_inner, append_inner])


def test_settings_of_blocks_in_stage_objects_follow_changes():
    stages = [Stage([2.0, 3.0]), Stage([0.5])]

    def change_block():
        stages[1].blocks[0].factor = -1.0

    def replace_block():
        stages[0].blocks[1] = Scale(0.1)

    follows_changes(run_stage_objects, lambda g, x: g(x, stages), [change_block, replace_block])


def test_settings_of_a_dict_of_layers_follow_changes():
    layers = {"fc1": Scale(2.0), "fc2": Scale(3.0)}

    def change_value():
        layers["fc2"].factor = 0.25

    def replace_value():
        layers["fc1"] = Scale(5.0)

    follows_changes(run_layer_dict, lambda g, x: g(x, layers), [change_value, replace_value])


def test_one_layer_object_in_two_places_then_one_replaced():
    shared = Scale(2.0)
    layers = [shared, shared, Scale(3.0)]

    def change_shared():
        shared.factor = 4.0

    def replace_second():
        layers[1] = Scale(0.5)

    def change_old_shared():
        shared.factor = 8.0

    follows_changes(run_nested_lists, lambda g, x: g(x, [layers]),
                    [change_shared, replace_second, change_old_shared])


# --- an activation attribute of a looped-over layer, called as a method-like attribute ------
class Dense:
    def __init__(self, W, activation):
        self.W, self.activation = W, activation


def dense_stack(x, layers):
    for layer in layers:
        x = layer.activation(x @ layer.W)
    return x


def test_weights_of_a_looped_layer_rebound_between_calls():
    rng = rng_for(601)
    layers = [Dense(rng.standard_normal((3, 3)), np.tanh), Dense(rng.standard_normal((3, 3)),
                                                                   np.tanh)]

    def rebind_weights():
        layers[0].W = layers[0].W * 2.0

    follows_changes(dense_stack, lambda g, x: g(x, layers), [rebind_weights])


def test_an_activation_attribute_of_a_looped_layer_rebound_between_calls():
    layers = [Dense(np.eye(3), np.tanh), Dense(np.eye(3), np.tanh)]

    def switch_activation():
        layers[1].activation = np.sin

    follows_changes(dense_stack, lambda g, x: g(x, layers), [switch_activation])


# --- config objects: namedtuple, __slots__, property, __getattr__, dataclass ----------------
LayerConfig = namedtuple("LayerConfig", ["scale", "use_bias"])


class ConfiguredLayer:
    def __init__(self, scale):
        self.config = LayerConfig(scale, True)
        self.b = np.ones(3)


def run_configured(x, layers):
    for layer in layers:
        x = x * layer.config.scale
        if layer.config.use_bias:
            x = x + layer.b
    return x


def test_a_namedtuple_config_of_a_looped_layer_replaced_between_calls():
    layers = [ConfiguredLayer(2.0), ConfiguredLayer(3.0)]

    def new_scale():
        layers[1].config = layers[1].config._replace(scale=0.5)

    def no_bias():
        layers[0].config = layers[0].config._replace(use_bias=False)

    follows_changes(run_configured, lambda g, x: g(x, layers), [new_scale, no_bias])


class SlotLayer:
    __slots__ = ("W", "keep")

    def __init__(self, W, keep):
        self.W, self.keep = W, keep


class PropertyLayer:
    def __init__(self, W, log_scale):
        self.W, self.log_scale = W, log_scale

    @property
    def scale(self):
        return math.exp(self.log_scale)

    @property
    def weight(self):
        return self.W * self.scale


class AttrDict:
    """``cfg.lr`` for ``cfg["lr"]``, as many NumPy training scripts define their configs."""

    def __init__(self, **entries):
        self._entries = entries

    def __getattr__(self, name):
        try:
            return self._entries[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclasses.dataclass
class DataclassLayer:
    W: np.ndarray
    dropout: float = 0.5
    training: bool = True


def run_config_objects(x, layers):
    slot, prop, cfg, dc = layers
    h = x @ slot.W * slot.keep
    h = h @ prop.weight + prop.scale
    h = h * cfg.temperature if cfg.mode == "sample" else h
    if dc.training:
        h = h * (1.0 - dc.dropout)
    return h @ dc.W


def test_slots_property_getattr_and_dataclass_layers_in_a_list_follow_changes():
    rng = rng_for(602)
    layers = [SlotLayer(rng.standard_normal((3, 3)), 0.5),
              PropertyLayer(rng.standard_normal((3, 3)), 0.1),
              AttrDict(temperature=2.0, mode="sample"),
              DataclassLayer(rng.standard_normal((3, 3)))]
    slot, prop, cfg, dc = layers

    def slot_keep():
        slot.keep = 0.9

    def slot_rebind():
        slot.W = slot.W + 1.0

    def log_scale():
        prop.log_scale = -0.3

    def prop_in_place():
        prop.W *= 0.5

    def temperature():
        cfg._entries["temperature"] = 0.5

    def mode():
        cfg._entries["mode"] = "greedy"

    def eval_mode():
        dc.training = False

    follows_changes(run_config_objects, lambda g, x: g(x, layers),
                    [slot_keep, slot_rebind, log_scale, prop_in_place, temperature, mode,
                     eval_mode])


# --- partials ---------------------------------------------------------------------------
class Softmax:
    def __init__(self, W):
        self.W, self.training = W, True

    def forward(self, x, temperature=1.0):
        z = x @ self.W / temperature
        if self.training:
            z = z * 0.9
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def test_a_bound_method_follows_the_objects_changes():
    rng = rng_for(603)
    model = Softmax(rng.standard_normal((3, 4)))

    def eval_mode():
        model.training = False

    def rebind_weights():
        model.W = model.W * 3.0

    def update_in_place():
        model.W -= 0.5

    follows_changes(model.forward, lambda g, x: g(x, 2.0),
                    [eval_mode, rebind_weights, update_in_place])


def test_a_partial_of_a_bound_method_follows_the_objects_changes():
    model = Softmax(np.eye(3))
    sample = functools.partial(model.forward, temperature=2.0)

    def eval_mode():
        model.training = False

    follows_changes(sample, lambda g, x: g(x), [eval_mode])


def test_a_partial_binding_a_list_of_layers_by_keyword():
    layers = [Scale(2.0), Scale(3.0)]
    model = functools.partial(run_nested_lists, stages=[layers])

    def change():
        layers[0].factor = 10.0

    def replace():
        layers[1] = Scale(-1.0)

    follows_changes(model, lambda g, x: g(x), [change, replace])


def test_a_partial_of_a_partial_with_positional_and_keyword_layers():
    layers = {"a": Scale(2.0), "b": Scale(3.0)}
    model = functools.partial(functools.partial(run_layer_dict), layers=layers)

    def change():
        layers["b"].factor = 0.5

    follows_changes(model, lambda g, x: g(x), [change])


# --- counters and caches a layer keeps, written through a loop variable --------------------
class CountingLayer:
    def __init__(self, W):
        self.W, self.calls, self.last_norm = W, 0, 0.0

    def forward(self, x):
        self.calls += 1
        out = np.maximum(x @ self.W, 0)
        return out


def forward_counting(x, layers):
    for layer in layers:
        x = layer.forward(x)
        layer.calls += 1  # the training loop counts again from outside
    return x


def test_counters_written_through_a_loop_variable_match_eager():
    rng = rng_for(604)
    weights = [rng.standard_normal((3, 3)) for _ in range(2)]
    eager_layers = [CountingLayer(W.copy()) for W in weights]
    jit_layers = [CountingLayer(W.copy()) for W in weights]
    f = jitted(forward_counting)
    for _ in range(4):
        x = rng.standard_normal((2, 3))
        assert_same(f(x, jit_layers), forward_counting(x, eager_layers), **F64)
        assert [layer.calls for layer in jit_layers] == [layer.calls for layer in eager_layers]
    no_internal_errors(f)


# --- an outside list longer than the per-container guard budget ------------------------------
CLASS_WEIGHTS = [1.0] * 80


def weighted_loss(losses):
    return np.array(CLASS_WEIGHTS) @ losses, sum(w for w in CLASS_WEIGHTS[60:])


def test_an_outside_list_of_many_settings_changed_past_the_guard_budget():
    losses = np.linspace(0.0, 1.0, 80)

    def change_late_weight():
        CLASS_WEIGHTS[75] = 10.0

    try:
        follows_changes(weighted_loss, lambda g, x: g(x), [change_late_weight], x=losses)
    finally:
        CLASS_WEIGHTS[75] = 1.0


LAYER_WEIGHTS = [np.eye(2) * (1.0 + i / 100) for i in range(70)]


def deep_linear(x):
    for W in LAYER_WEIGHTS:
        x = x @ W
    return x


def test_an_outside_list_of_many_weight_arrays_updated_in_place():
    def update_late_weight():
        LAYER_WEIGHTS[68] *= 3.0

    try:
        follows_changes(deep_linear, lambda g, x: g(x), [update_late_weight],
                        x=np.ones((2, 2)))
    finally:
        LAYER_WEIGHTS[68] /= 3.0


# --- dynamic dims reaching plain Python -----------------------------------------------------
def dim_percent_format(x):
    return "batch of %d rows, %s cols" % (x.shape[0], x.shape[1])


def dim_str_format(x):
    return "{}x{}".format(*x.shape), "{:>5}|{:<3}|{:03d}".format(x.shape[0], x.shape[0],
                                                                   x.shape[0])


def dim_hex_bin(x):
    n = x.shape[0]
    return hex(n), bin(n), oct(n), str(n).zfill(4), repr(n), ascii(n)


def dim_list_repeat(x):
    n = x.shape[0]
    row = [0.0] * n
    row[-1] = 1.0
    return np.array(row) + x[:, 0], "-" * n


def dim_math(x):
    n = x.shape[0]
    return (math.log2(n), math.ceil(n / 3), math.sqrt(n), math.gcd(n, 6), float(n), n / 2,
            round(n / 3), n ** 0.5, max(n, 4), min(n, 4), sorted([n, 4, 1]), n in (3, 5))


def dim_number_protocol(x):
    n = x.shape[0]
    return (n.conjugate(), n.as_integer_ratio(), n.to_bytes(2, "little"), n.__index__(),
            bool(n - 3), complex(n), divmod(-n, 4), n.bit_length())


def dim_set_and_dict(x):
    n, m = x.shape
    seen = {n, m, 3}
    return sorted(seen), {n: "rows"}.get(len(x), "missing"), {n: 1, m: 2}


DIM_KEY_CAUSE = ("Hooks.set_item (tracer/frontend.py) stores the key from tracejit's frame, "
                 "where SymInt.__hash__ (tracer/dims.py) hashes the expression; the user's "
                 "lookup hashes the specialized value")


def count_lengths(x):
    n = x.shape[0]
    counts = {}
    counts[n] = 1
    counts[n] = counts.get(n, 0) + 1  # a histogram of lengths, as bucketing code keeps
    return counts


def test_a_local_dict_keyed_by_a_dynamic_dim_read_back_with_get():
    f = run_calls(count_lengths, [(np.ones((n, 2)),) for n in (3, 5)], dynamic=True)
    no_internal_errors(f)


def real_part_of_a_dim(x):
    n = x.shape[0]
    return n.real, n.numerator


def test_number_attributes_of_a_dim_in_a_local():
    f = run_calls(real_part_of_a_dim, [(np.ones((n, 2)),) for n in (3, 5)], dynamic=True)
    no_internal_errors(f)


def dim_reshape_from_sqrt(x):
    side = int(np.sqrt(x.shape[1]))
    return x.reshape(x.shape[0], side, side).sum(axis=2)


DIM_CASES = [dim_percent_format, dim_str_format, dim_hex_bin, dim_list_repeat, dim_math,
             dim_number_protocol, dim_set_and_dict]


@pytest.mark.parametrize("model", DIM_CASES, ids=lambda model: model.__name__)
def test_dynamic_dims_in_plain_python(model):
    rng = rng_for(610)
    f = run_calls(model, [(rng.standard_normal((n, 4)),) for n in (3, 5, 6, 3)], dynamic=True)
    no_internal_errors(f)


def test_a_dim_from_the_square_root_of_a_width():
    rng = rng_for(611)
    f = run_calls(dim_reshape_from_sqrt, [(rng.standard_normal((2, n * n)),) for n in (2, 3, 4)],
                  dynamic=True, **F64)
    no_internal_errors(f)


# --- np.array of nested lists of traced values ----------------------------------------------
def rotate_points(points, theta):
    angle = theta.sum()
    R = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    return points @ R.T


def summary_statistics(x):
    stats = np.array([x.mean(), x.std(), x.min(), x.max(), x.shape[0]])
    ints = np.array([x.argmax(), x.shape[0], 2])
    mixed = np.array([x.sum(), 1, True])
    return stats, ints, mixed, np.array((x[0], x[-1])), np.array([x[0, 0]], dtype=np.float32)


def float32_statistics(x):
    return np.array([x.sum(), x.max()]), np.array([x.sum(), 2.0]), np.array([x.sum(), 2])


def test_a_rotation_matrix_built_from_nested_lists_of_traced_scalars():
    rng = rng_for(612)
    f = run_calls(rotate_points, [(rng.standard_normal((5, 2)), rng.standard_normal(2))
                                  for _ in range(3)], **F64)
    no_internal_errors(f)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_np_array_of_traced_statistics_keeps_numpys_dtypes(dtype):
    rng = rng_for(613)

    def make(n):
        return (rng.standard_normal((n, 3)) * 4).astype(dtype)

    f = run_calls(summary_statistics, [(make(n),) for n in (4, 5, 4)], **F32)
    no_internal_errors(f)
    f = run_calls(float32_statistics, [(make(n),) for n in (4, 5)], **F32)
    no_internal_errors(f)


# --- rounding ------------------------------------------------------------------------------
def roundings(x):
    return (np.round(x), np.round(x, 1), np.round(x, -1), np.rint(x), np.trunc(x),
            x.round(2), np.around(x, 3), round(x.sum()), round(x.sum(), 1), round(x.max()))


def integer_roundings(x):
    return np.round(x, -1), np.round(x, -2), np.rint(x), np.trunc(x), np.round(x), np.round(x, 2)


HALVES = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5], [0.25, 0.35, 1.25, 2.675, 5.0, 15.0],
                   [1e15 + 0.5, -0.0, 0.049999999999999996, 4.5, 45.0, 1e30]])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rounding_halves_to_even_like_numpy(dtype):
    rng = rng_for(614)
    f = run_calls(roundings, [(HALVES.astype(dtype),),
                              ((rng.standard_normal((3, 6)) * 100).astype(dtype),)],
                  rtol=0, atol=0)
    no_internal_errors(f)


def round_the_largest(x):
    return round(x.max())


def test_python_round_of_an_infinity_is_the_models_overflow_error():
    f = run_calls(round_the_largest, [(np.array([1.0, np.inf], np.float32),),
                                      (np.array([1.0, 2.0], np.float32),)])
    no_internal_errors(f)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_rounding_integers_keeps_numpys_dtypes(dtype):
    f = run_calls(integer_roundings, [(np.array([5, 15, 25, 149, 150, 250, 251], dtype),),
                                      (np.array([0, 44, 45, 55, 95, 99, 100], dtype),)],
                  rtol=0, atol=0)
    if dtype is not np.uint8:  # uint8 runs eagerly (compiled code has no uint8), rightly
        no_internal_errors(f)


# --- masked reductions with where= / initial= -------------------------------------------------
def masked_pooling(x, lengths):
    mask = np.arange(x.shape[1])[None, :, None] < lengths[:, None, None]
    return (x.max(axis=1, where=mask, initial=-np.inf),
            np.min(x, axis=1, where=mask, initial=np.inf),
            np.sum(x, axis=1, where=mask),
            np.mean(x, axis=1, where=mask),
            x.sum(where=mask),
            np.mean(x, axis=(1, 2), where=mask, keepdims=True))


def test_masked_pooling_over_padding_with_empty_rows():
    rng = rng_for(615)
    f = run_calls(masked_pooling, [(rng.standard_normal((4, 5, 2)), np.array([5, 2, 0, 1])),
                                   (rng.standard_normal((3, 5, 2)), np.array([1, 5, 3]))],
                  **F64)
    no_internal_errors(f)


def integer_sums_with_initial(x, mask):
    return (np.sum(x, axis=0, initial=10), x.sum(where=mask, initial=-3),
            np.max(x, axis=1, initial=7), np.prod(x, axis=1, where=mask),
            np.mean(x, where=mask, dtype=np.float32))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_integer_reductions_with_initial_and_where(dtype):
    rng = rng_for(616)
    f = run_calls(integer_sums_with_initial,
                  [(rng.integers(0, 9, (3, 4)).astype(dtype), rng.random((3, 4)) < 0.5)
                   for _ in range(2)], **F32)
    no_internal_errors(f)


# --- order= in reshape and ravel on non-C inputs ---------------------------------------------
def column_major_views(x):
    return (x.reshape(2, -1, order="F"), np.reshape(x, (-1,), order="F"), np.ravel(x, "F"),
            x.T.ravel("F"), x.reshape(3, 2, -1, order="F").sum(axis=0), x.flatten("F")[::2])


def layout_orders(x):
    return x.ravel(order="A"), x.ravel(order="K"), x.flatten(order="A")


def transposed(rng):
    return (rng.standard_normal((4, 6)).T,)


def fortran(rng):
    return (np.asfortranarray(rng.standard_normal((6, 4))),)


def c_order(rng):
    return (rng.standard_normal((6, 4)),)


@pytest.mark.parametrize("layout", [c_order, transposed, fortran])
def test_order_keywords_on_c_fortran_and_transposed_inputs(layout):
    f = run_calls(column_major_views, [lambda: layout(rng_for(617)) for _ in range(2)], **F64)
    assert not f.stats()["eager_calls"], f.stats()["eager_reasons"]
    f = run_calls(layout_orders, [lambda: layout(rng_for(617)) for _ in range(2)], **F64)
    no_internal_errors(f)  # 'A' and 'K' follow the memory layout: eager, with a reason


# --- np.split past the end, decreasing, negative --------------------------------------------
def odd_splits(x):
    a = np.split(x, [2, 10])
    b = np.split(x, [3, 1])
    c = np.split(x, [-1])
    d = np.split(x, np.array([1, 2]), axis=1)
    return a, b, c, d


def test_split_with_indices_past_the_end_decreasing_and_negative():
    rng = rng_for(618)
    f = run_calls(odd_splits, [(rng.standard_normal((n, 3)),) for n in (4, 5, 7)], **F64)
    assert not f.stats()["eager_calls"], f.stats()["eager_reasons"]


# --- lists appended in loops, the last entry corrected in place -----------------------------
def rnn_with_in_place_correction(x, W):
    h = np.zeros(W.shape[0])
    hs = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ W)
        hs.append(h)
        hs[-1] += 0.1  # ndarray += mutates h too: the next step sees it
    return np.stack(hs), h


def rnn_with_item_write_into_the_last_entry(x, W):
    h = np.zeros(W.shape[0])
    hs = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ W)
        hs.append(h)
        hs[-1][0] = 0.0  # also h[0]
    return np.stack(hs), h


def rnn_with_a_rebinding_correction(x, W):
    h = np.zeros(W.shape[0])
    hs = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ W)
        hs.append(h)
        hs[-1] = hs[-1] * 0.5  # a new array: h keeps its value
    return np.stack(hs), h


def prefilled_states(x, W):
    hs = [None] * x.shape[0]
    h = np.zeros(W.shape[0])
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + h @ W)
        hs[t] = h
    return np.array(hs), len(hs)


@pytest.mark.parametrize("model", [rnn_with_in_place_correction,
                                   rnn_with_item_write_into_the_last_entry,
                                   rnn_with_a_rebinding_correction, prefilled_states],
                         ids=lambda model: model.__name__)
def test_loop_lists_corrected_in_place_over_lengths(model):
    rng = rng_for(619)
    W = rng.standard_normal((3, 3)) * 0.5
    f = run_calls(model, [(rng.standard_normal((n, 3)), W) for n in (3, 4, 6, 4)], **F64)
    no_internal_errors(f)


# --- nnfs-style: layers keep their outputs and gradients as attributes, Adam caches lazily ---
class LayerDense:
    def __init__(self, rng, n_inputs, n_neurons):
        self.weights = 0.1 * rng.standard_normal((n_inputs, n_neurons))
        self.biases = np.zeros((1, n_neurons))

    def forward(self, inputs):
        self.inputs = inputs
        self.output = np.dot(inputs, self.weights) + self.biases

    def backward(self, dvalues):
        self.dweights = np.dot(self.inputs.T, dvalues)
        self.dbiases = np.sum(dvalues, axis=0, keepdims=True)
        self.dinputs = np.dot(dvalues, self.weights.T)


class ActivationReLU:
    def forward(self, inputs):
        self.inputs = inputs
        self.output = np.maximum(0, inputs)

    def backward(self, dvalues):
        self.dinputs = dvalues.copy()
        self.dinputs[self.inputs <= 0] = 0


class SoftmaxCrossEntropy:
    def forward(self, inputs, y_true):
        exp_values = np.exp(inputs - np.max(inputs, axis=1, keepdims=True))
        self.output = exp_values / np.sum(exp_values, axis=1, keepdims=True)
        clipped = np.clip(self.output, 1e-7, 1 - 1e-7)
        if len(y_true.shape) == 1:
            confidences = clipped[range(len(clipped)), y_true]
        else:
            confidences = np.sum(clipped * y_true, axis=1)
        return np.mean(-np.log(confidences))

    def backward(self, dvalues, y_true):
        samples = len(dvalues)
        if len(y_true.shape) == 2:
            y_true = np.argmax(y_true, axis=1)
        self.dinputs = dvalues.copy()
        self.dinputs[range(samples), y_true] -= 1
        self.dinputs = self.dinputs / samples


class OptimizerAdam:
    def __init__(self, learning_rate=0.01, decay=1e-3, beta_1=0.9, beta_2=0.999):
        self.learning_rate = self.current_learning_rate = learning_rate
        self.decay, self.iterations = decay, 0
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, 1e-7

    def pre_update_params(self):
        if self.decay:
            self.current_learning_rate = self.learning_rate * (
                1.0 / (1.0 + self.decay * self.iterations))

    def update_params(self, layer):
        if not hasattr(layer, "weight_cache"):
            layer.weight_momentums = np.zeros_like(layer.weights)
            layer.weight_cache = np.zeros_like(layer.weights)
            layer.bias_momentums = np.zeros_like(layer.biases)
            layer.bias_cache = np.zeros_like(layer.biases)
        layer.weight_momentums = self.beta_1 * layer.weight_momentums + (
            1 - self.beta_1) * layer.dweights
        layer.bias_momentums = self.beta_1 * layer.bias_momentums + (
            1 - self.beta_1) * layer.dbiases
        corrected_w = layer.weight_momentums / (1 - self.beta_1 ** (self.iterations + 1))
        corrected_b = layer.bias_momentums / (1 - self.beta_1 ** (self.iterations + 1))
        layer.weight_cache = self.beta_2 * layer.weight_cache + (
            1 - self.beta_2) * layer.dweights ** 2
        layer.bias_cache = self.beta_2 * layer.bias_cache + (1 - self.beta_2) * layer.dbiases ** 2
        cache_w = layer.weight_cache / (1 - self.beta_2 ** (self.iterations + 1))
        cache_b = layer.bias_cache / (1 - self.beta_2 ** (self.iterations + 1))
        layer.weights += -self.current_learning_rate * corrected_w / (
            np.sqrt(cache_w) + self.epsilon)
        layer.biases += -self.current_learning_rate * corrected_b / (
            np.sqrt(cache_b) + self.epsilon)

    def post_update_params(self):
        self.iterations += 1


def nnfs_train_step(X, y, model):
    dense1, activation1, dense2, loss_activation, optimizer = model
    dense1.forward(X)
    activation1.forward(dense1.output)
    dense2.forward(activation1.output)
    loss = loss_activation.forward(dense2.output, y)
    predictions = np.argmax(loss_activation.output, axis=1)
    if len(y.shape) == 2:
        y = np.argmax(y, axis=1)
    accuracy = np.mean(predictions == y)
    loss_activation.backward(loss_activation.output, y)
    dense2.backward(loss_activation.dinputs)
    activation1.backward(dense2.dinputs)
    dense1.backward(activation1.dinputs)
    optimizer.pre_update_params()
    for layer in (dense1, dense2):
        optimizer.update_params(layer)
    optimizer.post_update_params()
    return loss, accuracy


def object_state(value):
    """Every attribute of the objects in ``value``, recursively, as dicts to compare."""
    if isinstance(value, (list, tuple)):
        return [object_state(item) for item in value]
    if hasattr(value, "__dict__") and not isinstance(value, np.ndarray):
        return {name: object_state(item) for name, item in vars(value).items()}
    return value


def test_nnfs_train_steps_with_attribute_outputs_and_lazy_adam_caches():
    rng = rng_for(620)
    model = (LayerDense(rng, 2, 8), ActivationReLU(), LayerDense(rng, 8, 3),
             SoftmaxCrossEntropy(), OptimizerAdam())
    eager_model, jit_model = copy.deepcopy(model), copy.deepcopy(model)
    f = jitted(nnfs_train_step)
    for step in range(5):
        n = (6, 6, 7, 6, 9)[step]
        X, y = rng.standard_normal((n, 2)), rng.integers(0, 3, n)
        if step == 3:
            y = np.eye(3)[y]
        want = nnfs_train_step(X, y, eager_model)
        got = f(X, y, jit_model)
        assert_same(got, want, **F64, where=f"step {step}")
        assert_same(object_state(list(jit_model)), object_state(list(eager_model)), **F64,
                    where=f"model state after step {step}")
    no_internal_errors(f)


# --- ML-From-Scratch style: activation objects, trainable flags, lazy batch norm stats ------
class Sigmoid:
    def __call__(self, x):
        return 1 / (1 + np.exp(-x))

    def gradient(self, x):
        return self.__call__(x) * (1 - self.__call__(x))


class LeakyReLU:
    def __init__(self, alpha=0.2):
        self.alpha = alpha

    def __call__(self, x):
        return np.where(x >= 0, x, self.alpha * x)


ACTIVATIONS = {"sigmoid": Sigmoid, "leaky_relu": LeakyReLU}


class Activation:
    def __init__(self, name):
        self.activation_func = ACTIVATIONS[name]()
        self.trainable = True

    def forward_pass(self, X, training=True):
        self.layer_input = X
        return self.activation_func(X)


class BatchNormalization:
    def __init__(self, momentum=0.99):
        self.momentum, self.eps = momentum, 0.01
        self.running_mean = self.running_var = None
        self.gamma, self.beta = np.ones(4), np.zeros(4)
        self.trainable = True

    def forward_pass(self, X, training=True):
        if self.running_mean is None:
            self.running_mean = np.mean(X, axis=0)
            self.running_var = np.var(X, axis=0)
        if training and self.trainable:
            mean, var = np.mean(X, axis=0), np.var(X, axis=0)
            self.running_mean = self.momentum * self.running_mean + (1 - self.momentum) * mean
            self.running_var = self.momentum * self.running_var + (1 - self.momentum) * var
        else:
            mean, var = self.running_mean, self.running_var
        self.X_centered = X - mean
        self.stddev_inv = 1 / np.sqrt(var + self.eps)
        return self.gamma * self.X_centered * self.stddev_inv + self.beta


class NeuralNetwork:
    def __init__(self, layers):
        self.layers = layers

    def _forward_pass(self, X, training=True):
        layer_output = X
        for layer in self.layers:
            layer_output = layer.forward_pass(layer_output, training)
        return layer_output


def test_mlfs_network_with_lazy_batchnorm_and_activation_objects():
    net = NeuralNetwork([BatchNormalization(), Activation("leaky_relu"), Activation("sigmoid")])
    eager_net = copy.deepcopy(net)
    f = jitted(net._forward_pass)
    rng = rng_for(621)
    for step, training in enumerate((True, True, True, False, True, False)):
        if step == 4:  # freeze the normalization, change the leak
            for model in (net, eager_net):
                model.layers[0].trainable = False
                model.layers[1].activation_func.alpha = 0.01
        X = rng.standard_normal((5, 4))
        assert_same(f(X, training), eager_net._forward_pass(X, training), **F64,
                    where=f"step {step}")
        assert_same(object_state(net.layers), object_state(eager_net.layers), **F64,
                    where=f"layer state after step {step}")
    no_internal_errors(f)


# --- numpy-ml style: parameter dicts, list caches appended per call, freeze() ---------------
class FullyConnected:
    def __init__(self, rng, n_in, n_out):
        self.parameters = {"W": rng.standard_normal((n_in, n_out)) * 0.3, "b": np.zeros(n_out)}
        self.derived_variables = {"Z": []}
        self.X = []
        self.trainable = True

    @property
    def hyperparameters(self):
        return {"layer": "FullyConnected", "n_out": self.parameters["W"].shape[1]}

    def freeze(self):
        self.trainable = False

    def forward(self, X, retain_derived=True):
        W, b = self.parameters["W"], self.parameters["b"]
        Z = X @ W + b
        if retain_derived and self.trainable:
            self.X.append(X)
            self.derived_variables["Z"].append(Z)
        return np.tanh(Z)


def numpy_ml_forward(X, layers):
    for layer in layers:
        if layer.hyperparameters["n_out"] > 0:
            X = layer.forward(X)
    return X


def test_numpy_ml_layers_append_caches_per_call_and_freeze():
    rng = rng_for(622)
    layers = [FullyConnected(rng, 3, 4), FullyConnected(rng, 4, 2)]
    eager_layers = copy.deepcopy(layers)
    f = jitted(numpy_ml_forward)
    for step in range(4):
        if step == 2:
            layers[1].freeze()
            eager_layers[1].freeze()
        X = rng.standard_normal((2, 3))
        assert_same(f(X, layers), numpy_ml_forward(X, eager_layers), **F64, where=f"step {step}")
        assert_same(object_state(layers), object_state(eager_layers), **F64,
                    where=f"layer state after step {step}")


# --- attributes probed by name: hasattr, getattr with a default, vars(), setattr ------------
class Bare:
    def __init__(self, factor):
        self.factor = factor


def probe_attributes(x, layers):
    for layer in layers:
        if hasattr(layer, "W"):
            x = x @ layer.W
        bias = getattr(layer, "bias", None)
        if bias is not None:
            x = x + bias
        x = x * layer.factor
    return x


def test_hasattr_and_getattr_defaults_of_looped_layers_follow_added_attributes():
    layers = [Bare(2.0), Bare(3.0)]

    def add_weights():
        layers[1].W = np.eye(3) * 0.5

    def add_bias():
        layers[0].bias = np.ones(3)

    def drop_weights():
        del layers[1].W

    follows_changes(probe_attributes, lambda g, x: g(x, layers),
                    [add_weights, add_bias, drop_weights])


def weight_decay_over_vars(x, layers):
    penalty = 0.0
    for layer in layers:
        for _name, value in vars(layer).items():
            if isinstance(value, np.ndarray):
                penalty = penalty + 0.5 * np.sum(value ** 2)
    return x.sum() + penalty


def test_weight_decay_over_vars_of_layers_follows_new_and_updated_params():
    layers = [Bare(1.0), Bare(2.0)]
    layers[0].W = np.ones((3, 3))

    def add_param():
        layers[1].b = np.full(3, 2.0)

    def update_in_place():
        layers[0].W *= 3.0

    follows_changes(weight_decay_over_vars, lambda g, x: g(x, layers),
                    [add_param, update_in_place])


class TwoLayerNet:
    """cs231n-style: weights named W1, b1, W2, b2 looked up by name in loops."""

    def __init__(self, rng):
        self.W1, self.b1 = rng.standard_normal((3, 4)) * 0.5, np.zeros(4)
        self.W2, self.b2 = rng.standard_normal((4, 2)) * 0.5, np.zeros(2)
        self.num_layers = 2

    def loss_and_step(self, X, lr):
        h, cache = X, []
        for i in range(1, self.num_layers + 1):
            W, b = getattr(self, f"W{i}"), getattr(self, "b%d" % i)
            cache.append(h)
            h = h @ W + b
            if i < self.num_layers:
                h = np.maximum(h, 0)
        loss = 0.5 * np.sum(h ** 2)
        dh = h
        for i in range(self.num_layers, 0, -1):
            W = getattr(self, f"W{i}")
            dW, db = cache[i - 1].T @ dh, dh.sum(axis=0)
            dh = dh @ W.T * (cache[i - 1] > 0)
            setattr(self, f"W{i}", W - lr * dW)
            setattr(self, f"b{i}", getattr(self, f"b{i}") - lr * db)
        return loss


def test_getattr_setattr_by_formatted_names_over_train_steps():
    rng = rng_for(623)
    net = TwoLayerNet(rng)
    eager_net = copy.deepcopy(net)
    f = jitted(net.loss_and_step)
    for step in range(4):
        X, lr = rng.standard_normal((5, 3)), (0.1, 0.1, 0.05, 0.05)[step]
        assert_same(f(X, lr), eager_net.loss_and_step(X, lr), **F64, where=f"step {step}")
        assert_same(object_state(net), object_state(eager_net), **F64, where=f"after {step}")
    no_internal_errors(f)


# --- deep-learning-from-scratch-2 style: TimeRNN of RNN cell objects, grads[...] = writes ----
class RNNCell:
    def __init__(self, Wx, Wh, b):
        self.params = [Wx, Wh, b]
        self.grads = [np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)]
        self.cache = None

    def forward(self, x, h_prev):
        Wx, Wh, b = self.params
        h_next = np.tanh(np.dot(h_prev, Wh) + np.dot(x, Wx) + b)
        self.cache = (x, h_prev, h_next)
        return h_next

    def backward(self, dh_next):
        Wx, Wh, b = self.params
        x, h_prev, h_next = self.cache
        dt = dh_next * (1 - h_next ** 2)
        self.grads[0][...] = np.dot(x.T, dt)
        self.grads[1][...] = np.dot(h_prev.T, dt)
        self.grads[2][...] = np.sum(dt, axis=0)
        return np.dot(dt, Wx.T), np.dot(dt, Wh.T)


class TimeRNN:
    def __init__(self, Wx, Wh, b, stateful=False, dtype="f"):
        self.params = [Wx, Wh, b]
        self.grads = [np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)]
        self.layers, self.h, self.stateful, self.dtype = None, None, stateful, dtype

    def forward(self, xs):
        Wx, Wh, b = self.params
        N, T, D = xs.shape
        H = Wx.shape[1]
        self.layers = []
        hs = np.empty((N, T, H), dtype=self.dtype)
        if not self.stateful or self.h is None:
            self.h = np.zeros((N, H), dtype=self.dtype)
        for t in range(T):
            layer = RNNCell(*self.params)
            self.h = layer.forward(xs[:, t, :], self.h)
            hs[:, t, :] = self.h
            self.layers.append(layer)
        return hs

    def backward(self, dhs):
        Wx, Wh, b = self.params
        N, T, H = dhs.shape
        dxs = np.empty((N, T, Wx.shape[0]), dtype=self.dtype)
        dh, grads = 0, [0, 0, 0]
        for t in reversed(range(T)):
            dx, dh = self.layers[t].backward(dhs[:, t, :] + dh)
            dxs[:, t, :] = dx
            for i, grad in enumerate(self.layers[t].grads):
                grads[i] += grad
        for i, grad in enumerate(grads):
            self.grads[i][...] = grad
        return dxs


def time_rnn_step(xs, dhs, rnn):
    hs = rnn.forward(xs)
    return hs, rnn.backward(dhs)


@pytest.mark.parametrize("stateful, dtype", [(False, "f"), (True, "d")])
def test_time_rnn_of_cell_objects_with_grads_written_through_ellipsis(stateful, dtype):
    rng = rng_for(624)
    rnn = TimeRNN(rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((4, 4)) * 0.5,
                  np.zeros(4), stateful=stateful, dtype=dtype)
    eager_rnn = copy.deepcopy(rnn)
    f = jitted(time_rnn_step)
    tolerance = F32 if dtype == "f" else F64
    for step, T in enumerate((3, 3, 4, 3)):
        xs, dhs = rng.standard_normal((2, T, 3)), rng.standard_normal((2, T, 4))
        assert_same(f(xs, dhs, rnn), time_rnn_step(xs, dhs, eager_rnn), **tolerance,
                    where=f"step {step}")
        assert_same(object_state(rnn), object_state(eager_rnn), **tolerance,
                    where=f"model state after step {step}")
    no_internal_errors(f)


# --- EpyNN style: caches in a layer dict, chained assignment, dims from a settings dict ------
class EpyRNN:
    def __init__(self, rng, units, features):
        self.p = {"Wx": rng.standard_normal((units, features)) * 0.4,
                  "Wh": rng.standard_normal((units, units)) * 0.4, "b": np.zeros((units, 1))}
        self.d, self.fs, self.fc = {"h": units}, {}, {}


def epy_rnn_forward(layer, A):
    X = layer.fc["X"] = A  # (v, s, m)
    layer.d["s"] = X.shape[1]
    layer.fs["h"] = (layer.d["h"], X.shape[1], X.shape[2])
    layer.fc.update({k: np.zeros(layer.fs["h"]) for k in ("h_", "h")})
    hp = np.zeros_like(layer.fc["h"][:, 0])
    for s in range(layer.d["s"]):
        X = layer.fc["X"][:, s]
        h_ = layer.fc["h_"][:, s] = (np.dot(layer.p["Wx"], X) + np.dot(layer.p["Wh"], hp)
                                     + layer.p["b"])
        h = hp = layer.fc["h"][:, s] = np.tanh(h_)
    return h


def test_epynn_rnn_forward_with_dict_caches_and_chained_assignment():
    rng = rng_for(625)
    layer = EpyRNN(rng, 4, 3)
    eager_layer = copy.deepcopy(layer)
    f = jitted(epy_rnn_forward)
    for step, s in enumerate((5, 5, 6, 5)):
        A = rng.standard_normal((3, s, 2))
        assert_same(f(layer, A), epy_rnn_forward(eager_layer, A), **F64, where=f"step {step}")
        assert_same(object_state(layer), object_state(eager_layer), **F64,
                    where=f"layer state after step {step}")
    no_internal_errors(f)


# --- dims as keys of outside dicts, shape tuples in plain Python ----------------------------
POSITION_TABLES = {n: np.sin(np.arange(n * 4).reshape(n, 4) / 7.0) for n in (3, 5, 6)}


def add_cached_positions(x):
    return x + POSITION_TABLES[x.shape[0]], x.shape[0] in POSITION_TABLES


def test_a_global_table_keyed_by_the_sequence_length():
    rng = rng_for(626)
    f = run_calls(add_cached_positions, [(rng.standard_normal((n, 4)),) for n in (3, 5, 6, 4, 3)],
                  dynamic=True, **F64)
    no_internal_errors(f)


def shape_tuples(x):
    return (x.shape[::-1], tuple(reversed(x.shape)), x.shape + (1,), math.prod(x.shape),
            x.size, x.nbytes, x.shape == (4, 3), list(range(x.shape[0]))[-1],
            x.reshape(*x.shape[::-1]).shape, x.shape[0] * 1.5)


def test_shape_tuples_in_plain_python():
    rng = rng_for(627)
    f = run_calls(shape_tuples, [(rng.standard_normal((n, 3)),) for n in (4, 5, 6)],
                  dynamic=True)
    no_internal_errors(f)


def flattened_width(x):
    return np.prod(x.shape[1:]), np.sum(x.shape), np.max(x.shape)


def test_numpy_reductions_of_a_shape_return_numpy_scalars():
    f = run_calls(flattened_width, [(np.ones((n, 3, 2)),) for n in (3, 5)], dynamic=True)
    no_internal_errors(f)


def sinusoidal_encoding(x):
    T, d = x.shape
    pos = np.arange(T)[:, None]
    i = np.arange(d)[None, :]
    angle = pos / np.power(10000, (2 * (i // 2)) / d)
    pe = np.zeros((T, d))
    pe[:, 0::2] = np.sin(angle[:, 0::2])
    pe[:, 1::2] = np.cos(angle[:, 1::2])
    return x + pe


def test_sinusoidal_positional_encoding_over_lengths():
    rng = rng_for(628)
    f = run_calls(sinusoidal_encoding, [(rng.standard_normal((n, 6)),) for n in (3, 7, 9, 7)],
                  **F64)
    no_internal_errors(f)


def appends_one_array_updated_in_place(x):
    h = np.zeros(x.shape[1])
    hs = []
    for t in range(x.shape[0]):
        h += x[t]  # the same array every step: eager's rows all end up the final h
        hs.append(h)
    return np.stack(hs)


def stores_one_array_updated_in_place_in_a_dict(x):
    h = np.zeros(x.shape[1])
    hs = {}
    for t in range(x.shape[0]):
        h[...] = np.tanh(h + x[t])
        hs[t] = h
    return np.stack([hs[t] for t in range(x.shape[0])])


def corrects_then_reads_two_back(x):
    outs = [x[0]]
    for t in range(1, x.shape[0]):
        outs.append(outs[-1] * 0.5 + x[t])
        outs[-1] = outs[-1] + 1.0
        if len(outs) > 2:
            outs[-1] = outs[-1] - outs[-3]
    return np.stack(outs)


def appends_tuples_then_corrects(x):
    caches = [(x[0], x[0] * 2)]
    for t in range(1, x.shape[0]):
        h = np.tanh(caches[-1][1] + x[t])
        caches.append((x[t], h))
        caches[-1] = (caches[-1][0], caches[-1][1] * 0.5)
    return np.stack([c[1] for c in caches]), caches[-1][0]


@pytest.mark.parametrize("model", [appends_one_array_updated_in_place,
                                   stores_one_array_updated_in_place_in_a_dict,
                                   corrects_then_reads_two_back, appends_tuples_then_corrects],
                         ids=lambda model: model.__name__)
def test_loop_containers_holding_aliased_or_corrected_entries(model):
    rng = rng_for(629)
    f = run_calls(model, [(rng.standard_normal((n, 3)),) for n in (3, 5, 6, 5)], **F64)
    no_internal_errors(f)


# --- a Sequential container class iterated through __iter__ / __getitem__, generators -------
class SequentialContainer:
    def __init__(self, *layers):
        self._layers = list(layers)

    def __iter__(self):
        return iter(self._layers)

    def __getitem__(self, index):
        return self._layers[index]

    def __len__(self):
        return len(self._layers)

    def factors(self):
        for layer in self._layers:
            yield layer.factor


def through_iter(x, model):
    for layer in model:
        x = x * layer.factor + 1.0
    return x


def through_getitem(x, model):
    for i in range(len(model)):
        x = x * model[i].factor - 1.0
    return x + model[0].factor


def through_generator(x, model):
    for factor in model.factors():
        x = x * factor
    return x


@pytest.mark.parametrize("model", [through_iter, through_getitem, through_generator],
                         ids=lambda model: model.__name__)
def test_a_sequential_container_class_follows_changes_to_its_layers(model):
    container = SequentialContainer(Scale(2.0), Scale(3.0))

    def change():
        container[1].factor = 0.5

    def replace():
        container._layers[0] = Scale(-4.0)

    def grow():
        container._layers.append(Scale(1.5))

    follows_changes(model, lambda g, x: g(x, container), [change, replace, grow])


# --- state a layer creates lazily on its first call ------------------------------------------
class MomentumLayer:
    def __init__(self):
        self.W = np.linspace(-1.0, 1.0, 3)

    def step_with_hasattr(self, g):
        if not hasattr(self, "velocity"):  # nnfs's Adam: `if not hasattr(layer, 'weight_cache')`
            self.velocity = np.zeros_like(self.W)
        self.velocity = 0.9 * self.velocity + g
        self.W = self.W - 0.1 * self.velocity
        return self.W.sum()

    def step_with_getattr(self, g):
        velocity = getattr(self, "velocity", None)
        if velocity is None:
            velocity = np.zeros_like(self.W)
        self.velocity = 0.9 * velocity + g
        self.W -= 0.1 * self.velocity
        return self.W.sum()


def calls_match_with_state(method_name, steps=3):
    eager, compiled = MomentumLayer(), MomentumLayer()
    f = jitted(getattr(compiled, method_name))
    for step in range(steps):
        g = np.full(3, step + 1.0)
        assert_same(f(g), getattr(eager, method_name)(g), **F64, where=f"step {step}")
        assert_same(object_state(compiled), object_state(eager), **F64, where=f"after {step}")
    no_internal_errors(f)


def test_state_created_lazily_through_getattr_with_a_default():
    calls_match_with_state("step_with_getattr")


def test_state_created_lazily_behind_hasattr():
    calls_match_with_state("step_with_hasattr")


def test_a_rotation_matrix_from_nested_lists_compiles():
    rng = rng_for(612)
    f = run_calls(rotate_points, [(rng.standard_normal((5, 2)), rng.standard_normal(2))
                                  for _ in range(2)], **F64)
    assert not f.stats()["eager_calls"], f.stats()["eager_reasons"]


class OptimizerSGD:
    """nnfs's SGD with momentum: the momentums are created on the first update."""

    def __init__(self, learning_rate=0.1, momentum=0.9):
        self.learning_rate, self.momentum = learning_rate, momentum

    def update_params(self, layer):
        if self.momentum:
            if not hasattr(layer, "weight_momentums"):
                layer.weight_momentums = np.zeros_like(layer.weights)
                layer.bias_momentums = np.zeros_like(layer.biases)
            weight_updates = self.momentum * layer.weight_momentums - (
                self.learning_rate * layer.dweights)
            layer.weight_momentums = weight_updates
            bias_updates = self.momentum * layer.bias_momentums - self.learning_rate * layer.dbiases
            layer.bias_momentums = bias_updates
        else:
            weight_updates = -self.learning_rate * layer.dweights
            bias_updates = -self.learning_rate * layer.dbiases
        layer.weights += weight_updates
        layer.biases += bias_updates


def nnfs_momentum_step(X, y, model):
    dense1, activation1, dense2, loss_activation, optimizer = model
    dense1.forward(X)
    activation1.forward(dense1.output)
    dense2.forward(activation1.output)
    loss = loss_activation.forward(dense2.output, y)
    loss_activation.backward(loss_activation.output, y)
    dense2.backward(loss_activation.dinputs)
    activation1.backward(dense2.dinputs)
    dense1.backward(activation1.dinputs)
    for layer in (dense1, dense2):
        optimizer.update_params(layer)
    return loss


def test_nnfs_momentum_train_steps_compiled():
    rng = rng_for(630)
    model = (LayerDense(rng, 2, 8), ActivationReLU(), LayerDense(rng, 8, 3),
             SoftmaxCrossEntropy(), OptimizerSGD())
    eager_model, jit_model = copy.deepcopy(model), copy.deepcopy(model)
    f = jitted(nnfs_momentum_step)
    for step in range(3):
        X, y = rng.standard_normal((6, 2)), rng.integers(0, 3, 6)
        assert_same(f(X, y, jit_model), nnfs_momentum_step(X, y, eager_model), **F64,
                    where=f"step {step}")
        assert_same(object_state(list(jit_model)), object_state(list(eager_model)), **F64,
                    where=f"model state after step {step}")
    no_internal_errors(f)


class LazyMomentum:
    """Momentum state created on the first step, in the other spellings of 'not yet made'."""

    def __init__(self):
        self.W = np.linspace(-1.0, 1.0, 3)

    def step_with_try(self, g):
        try:
            velocity = self.velocity
        except AttributeError:
            velocity = np.zeros_like(self.W)
        self.velocity = 0.9 * velocity + g
        self.W = self.W - 0.1 * self.velocity
        return self.W.sum()

    def step_with_dict_membership(self, g):
        if "velocity" not in self.__dict__:
            self.velocity = np.zeros_like(self.W)
        self.velocity = 0.9 * self.velocity + g
        self.W = self.W - 0.1 * self.velocity
        return self.W.sum()

    def step_freeing_the_cache(self, g):
        self.cache = g * 2.0
        out = (self.W * self.cache).sum()
        del self.cache  # free the activations once used, as memory-minded code does
        return out


@pytest.mark.parametrize("method", ["step_with_dict_membership", "step_with_try",
                                    "step_freeing_the_cache"])
def test_lazily_created_and_deleted_attributes_match_eager(method):
    eager, compiled = LazyMomentum(), LazyMomentum()
    f = jitted(getattr(compiled, method))
    for step in range(3):
        g = np.full(3, step + 1.0)
        assert_same(f(g), getattr(eager, method)(g), **F64, where=f"step {step}")
        assert_same(object_state(compiled), object_state(eager), **F64, where=f"after {step}")
    no_internal_errors(f)


class MLFSAdam:
    """ML-From-Scratch's Adam: moments made on the first update (``if self.m is None``)."""

    def __init__(self, learning_rate=0.01, b1=0.9, b2=0.999):
        self.learning_rate, self.b1, self.b2, self.eps = learning_rate, b1, b2, 1e-8
        self.m = self.v = None

    def update(self, w, grad_wrt_w):
        if self.m is None:
            self.m = np.zeros(np.shape(grad_wrt_w))
            self.v = np.zeros(np.shape(grad_wrt_w))
        self.m = self.b1 * self.m + (1 - self.b1) * grad_wrt_w
        self.v = self.b2 * self.v + (1 - self.b2) * np.power(grad_wrt_w, 2)
        m_hat = self.m / (1 - self.b1)
        v_hat = self.v / (1 - self.b2)
        self.w_updt = self.learning_rate * m_hat / (np.sqrt(v_hat) + self.eps)
        return w - self.w_updt


def test_mlfs_adam_with_moments_made_on_the_first_update():
    rng = rng_for(631)
    eager, compiled = MLFSAdam(), MLFSAdam()
    f = jitted(compiled.update)
    for step in range(4):
        w, g = rng.standard_normal(3), rng.standard_normal(3)
        assert_same(f(w, g), eager.update(w, g), **F64, where=f"step {step}")
        assert_same(object_state(compiled), object_state(eager), **F64, where=f"after {step}")
    no_internal_errors(f)


# --- local dicts keyed by dynamic dims: membership, order, Counter ---------------------------
def memo_by_length(x):
    n = x.shape[0]
    cache = {}
    cache[n] = x.sum()
    if n not in cache:  # a memo keyed by sequence length
        cache[n] = 0.0
    return cache[n], n in cache


def test_membership_of_a_dim_key_just_stored():
    f = run_calls(memo_by_length, [(np.ones((n, 2)),) for n in (3, 5)], dynamic=True)
    no_internal_errors(f)


def names_of_dims(x):
    n, m = x.shape
    names = {}
    names[n] = "rows"
    names[m] = "cols"
    return names, list(names)


def test_a_returned_dict_keyed_by_dims_keeps_insertion_order():
    f = jitted(names_of_dims, dynamic=True)
    for n in (3, 5, 6):
        x = np.ones((n, 4))
        got, want = f(x), names_of_dims(x)
        assert list(got[0].items()) == list(want[0].items()) and got[1] == want[1], (got, want)
    no_internal_errors(f)


def length_histogram(x):
    n = x.shape[0]
    return collections.Counter([n, n, 4])


def test_a_returned_counter_of_dims_stays_a_counter():
    f = jitted(length_histogram, dynamic=True)
    for n in (3, 5):
        x = np.ones((n, 2))
        got, want = f(x), length_histogram(x)
        assert type(got) is type(want) and got == want, (got, want)


def weighted_in_key_order(params):
    names = list(params)
    return [params[name] * (index + 1.0) for index, name in enumerate(names)], names


def test_a_dict_argument_is_seen_in_its_own_key_order():
    # the arguments' structure sorted dict keys: the function saw {"b": .., "a": ..} as
    # {"a": .., "b": ..}, and a later call in the other order reused that trace
    f = jitted(weighted_in_key_order)
    a, b = np.ones(2), np.full(2, 3.0)
    for params in ({"b": b, "a": a}, {"b": b, "a": a}, {"a": a, "b": b}, {"a": a, "b": b}):
        got, want = f(dict(params)), weighted_in_key_order(dict(params))
        assert got[1] == want[1], (got[1], want[1])
        assert_same(got[0], want[0], **F64)
    no_internal_errors(f)


# --- integer sums asked for a narrower dtype -------------------------------------------------
def int32_counts(x, mask):
    return np.sum(mask, dtype=np.int32), x.sum(axis=0, dtype=np.int32, where=mask)


def test_integer_sums_with_a_narrower_dtype_keep_it():
    big = np.full((3, 2), 2 ** 30, dtype=np.int64)
    f = run_calls(int32_counts, [(big, np.ones((3, 2), bool)),
                                 (big + 1, np.array([[True, False]] * 3))])
    no_internal_errors(f)


# --- weights rebound through loop variables and indices inside the compiled step -------------
class Linear2:
    def __init__(self, W):
        self.W, self.b = W, np.zeros(W.shape[1])


def sgd_through_loop_variables(x, y, layers, lr):
    h, inputs = x, []
    for layer in layers:
        inputs.append(h)
        h = h @ layer.W + layer.b
    g = h - y
    for layer, a in zip(reversed(layers), reversed(inputs)):
        dW, db = a.T @ g, g.sum(axis=0)
        g = g @ layer.W.T
        layer.W = layer.W - lr * dW  # a new array on the caller's layer
        layer.b -= lr * db  # in place on the caller's array
    return ((h - y) ** 2).sum()


def decay_through_indices(x, layers, lr):
    h = x @ layers[0].W
    for i in range(len(layers)):
        layers[i].W = layers[i].W * (1 - lr)
    return h.sum() + layers[-1].W.sum()


@pytest.mark.parametrize("model", [sgd_through_loop_variables, decay_through_indices],
                         ids=lambda model: model.__name__)
def test_weights_rebound_through_loop_variables_and_indices_over_steps(model):
    rng = rng_for(632)
    layers = [Linear2(rng.standard_normal((3, 3)) * 0.3),
              Linear2(rng.standard_normal((3, 2)) * 0.3)]
    eager, compiled = copy.deepcopy(layers), copy.deepcopy(layers)
    f = jitted(model)
    for step in range(4):
        x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
        arguments = (x, y) if model is sgd_through_loop_variables else (x,)
        assert_same(f(*arguments, compiled, 0.1), model(*arguments, eager, 0.1), **F64,
                    where=f"step {step}")
        assert_same(object_state(compiled), object_state(eager), **F64, where=f"after {step}")
    no_internal_errors(f)


def decays_the_previous_entry_in_place(x):
    hs = [np.zeros(x.shape[1])]
    for t in range(x.shape[0]):
        prev = hs[-1]
        hs.append(np.tanh(x[t] + prev))
        prev *= 0.5  # the entry already in the list, halved after use
    return np.stack(hs)


def test_an_entry_read_back_from_a_loop_list_updated_in_place():
    rng = rng_for(633)
    f = run_calls(decays_the_previous_entry_in_place,
                  [(rng.standard_normal((n, 3)),) for n in (3, 4, 4)], **F64)
    no_internal_errors(f)


def doubles_the_appended_entry_in_place(x):
    h = np.zeros(x.shape[1])
    hs = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] + 0.5 * h)
        hs.append(h)
        hs[-1] *= 2.0  # h too
    return np.stack(hs), h


def test_the_appended_entry_scaled_in_place_reaches_the_carry():
    rng = rng_for(634)
    f = run_calls(doubles_the_appended_entry_in_place,
                  [(rng.standard_normal((n, 3)),) for n in (3, 4, 6, 4)], **F64)
    no_internal_errors(f)


class CallableModel:
    def __init__(self):
        self.W, self.scale = np.eye(3), 2.0

    def __call__(self, x, training=True):
        h = x @ self.W * self.scale
        return h * 0.5 if training else h


def test_a_callable_model_object_follows_its_new_weights():
    model = CallableModel()

    def sgd_step():  # a new array, as `W = W - lr * dW` makes
        model.W = model.W - 0.1 * np.ones((3, 3))

    follows_changes(model, lambda g, x: g(x), [sgd_step])


def test_an_eval_partial_of_a_callable_model_follows_its_new_weights():
    model = CallableModel()

    def sgd_step():
        model.W = model.W - 0.1 * np.ones((3, 3))

    def rescale():
        model.scale = 3.0

    follows_changes(functools.partial(model, training=False), lambda g, x: g(x),
                    [sgd_step, rescale])


def batch_accuracies(x):
    accuracies = []
    for i in range(x.shape[0]):
        accuracies.append((x[i] > 0).mean())
    return np.array(accuracies), np.array(accuracies, dtype=np.float32)


def test_np_array_with_a_dtype_of_a_loop_filled_list_compiles():
    rng = rng_for(635)
    f = run_calls(batch_accuracies, [(rng.standard_normal((n, 3)),) for n in (3, 4, 4)],
                  **F32)
    assert not f.stats()["eager_calls"], f.stats()["eager_reasons"]


# --- layers gathered into local lists, dicts and zips ------------------------------------------
class GatheredNet:
    def __init__(self):
        self.fc1, self.fc2 = Scale(2.0), Scale(3.0)
        self.plain1, self.plain2 = Bare(2.0), Bare(3.0)
        self.keep_probs = [0.9, 0.8]

    def through_a_local_list(self, x):
        for layer in [self.fc1, self.fc2]:
            x = layer(x) + layer.factor
        return x

    def through_a_local_dict(self, x):
        parts = {"a": self.fc1, "b": self.plain2}
        for _name, layer in parts.items():
            x = x * layer.factor
        return x

    def through_zip(self, x):
        for layer, keep in zip((self.plain1, self.plain2), self.keep_probs):
            x = x * layer.factor * keep
        return x


@pytest.mark.parametrize("route", ["through_a_local_list", "through_a_local_dict", "through_zip"])
def test_layers_gathered_into_local_containers_follow_changes(route):
    net = GatheredNet()

    def change_settings():
        net.fc2.factor, net.plain2.factor, net.keep_probs[1] = 9.0, 9.0, 0.5

    def replace_layers():
        net.fc1, net.plain1 = Scale(-1.0), Bare(-1.0)

    follows_changes(getattr(net, route), lambda g, x: g(x), [change_settings, replace_layers])


# --- ML-From-Scratch train_on_batch: per-layer optimizer copies updated through loop variables
class MLFSDense:
    def __init__(self, rng, n_in, n_units, optimizer):
        limit = 1 / np.sqrt(n_in)
        self.W = rng.uniform(-limit, limit, (n_in, n_units))
        self.w0 = np.zeros((1, n_units))
        self.W_opt, self.w0_opt = copy.copy(optimizer), copy.copy(optimizer)
        self.trainable = True

    def forward_pass(self, X, training=True):
        self.layer_input = X
        return X.dot(self.W) + self.w0

    def backward_pass(self, accum_grad):
        W = self.W
        if self.trainable:
            grad_w = self.layer_input.T.dot(accum_grad)
            grad_w0 = np.sum(accum_grad, axis=0, keepdims=True)
            self.W = self.W_opt.update(self.W, grad_w)
            self.w0 = self.w0_opt.update(self.w0, grad_w0)
        return accum_grad.dot(W.T)


class SquareLoss:
    def loss(self, y, y_pred):
        return 0.5 * np.power((y - y_pred), 2)

    def gradient(self, y, y_pred):
        return -(y - y_pred)


class MLFSNetwork(NeuralNetwork):
    def __init__(self, rng):
        optimizer = MLFSAdam()
        super().__init__([MLFSDense(rng, 3, 4, optimizer), Activation("leaky_relu"),
                          MLFSDense(rng, 4, 2, optimizer)])
        self.loss_function = SquareLoss()

    def _backward_pass(self, loss_grad):
        for layer in reversed(self.layers):
            if hasattr(layer, "backward_pass"):
                loss_grad = layer.backward_pass(loss_grad)

    def train_on_batch(self, X, y):
        y_pred = self._forward_pass(X)
        loss = np.mean(self.loss_function.loss(y, y_pred))
        self._backward_pass(loss_grad=self.loss_function.gradient(y, y_pred))
        return loss


def test_mlfs_train_on_batch_with_per_layer_adam_copies():
    rng = rng_for(636)
    net = MLFSNetwork(rng)
    eager, compiled = copy.deepcopy(net), copy.deepcopy(net)
    f = jitted(compiled.train_on_batch)
    for step in range(5):
        if step == 3:
            for model in (eager, compiled):
                model.layers[2].trainable = False
        X, y = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
        assert_same(f(X, y), eager.train_on_batch(X, y), **F64, where=f"step {step}")
        assert_same(object_state(compiled.layers), object_state(eager.layers), **F64,
                    where=f"layer state after step {step}")
    no_internal_errors(f)


# --- cs231n FullyConnectedNet: params keyed by built strings, train and test modes -----------
def fc_affine_forward(x, w, b):
    out = x.reshape(x.shape[0], -1).dot(w) + b
    return out, (x, w, b)


def affine_backward(dout, cache):
    x, w, b = cache
    dx = dout.dot(w.T).reshape(x.shape)
    dw = x.reshape(x.shape[0], -1).T.dot(dout)
    db = np.sum(dout, axis=0)
    return dx, dw, db


def relu_forward(x):
    return np.maximum(0, x), x


def relu_backward(dout, cache):
    dx = dout.copy()
    dx[cache <= 0] = 0
    return dx


def affine_relu_forward(x, w, b):
    a, fc_cache = fc_affine_forward(x, w, b)
    out, relu_cache = relu_forward(a)
    return out, (fc_cache, relu_cache)


def affine_relu_backward(dout, cache):
    fc_cache, relu_cache = cache
    return affine_backward(relu_backward(dout, relu_cache), fc_cache)


def softmax_loss(x, y):
    shifted = x - np.max(x, axis=1, keepdims=True)
    Z = np.sum(np.exp(shifted), axis=1, keepdims=True)
    log_probs = shifted - np.log(Z)
    probs = np.exp(log_probs)
    N = x.shape[0]
    loss = -np.sum(log_probs[np.arange(N), y]) / N
    dx = probs.copy()
    dx[np.arange(N), y] -= 1
    dx /= N
    return loss, dx


class FullyConnectedNet:
    """cs231n's FullyConnectedNet (no normalization, no dropout): params keyed 'W1', 'b1', ...
    built by str(i + 1) and 'W%d' % (i + 1); loss(X) scores, loss(X, y) loss and grads."""

    def __init__(self, hidden_dims, input_dim=3 * 4 * 4, num_classes=5, reg=0.1,
                 weight_scale=0.1, dtype=np.float32, seed=0):
        self.reg, self.dtype = reg, dtype
        self.num_layers = 1 + len(hidden_dims)
        self.params = {}
        rng = np.random.default_rng(seed)
        dims = [input_dim] + hidden_dims + [num_classes]
        for i in range(self.num_layers):
            self.params["W" + str(i + 1)] = weight_scale * rng.standard_normal(
                (dims[i], dims[i + 1]))
            self.params["b" + str(i + 1)] = np.zeros(dims[i + 1])
        for k, v in self.params.items():
            self.params[k] = v.astype(dtype)

    def loss(self, X, y=None):
        X = X.astype(self.dtype)
        mode = "test" if y is None else "train"
        caches = []
        out = X
        for i in range(self.num_layers - 1):
            out, cache = affine_relu_forward(out, self.params["W%d" % (i + 1)],
                                             self.params["b%d" % (i + 1)])
            caches.append(cache)
        last = str(self.num_layers)
        scores, cache = fc_affine_forward(out, self.params["W" + last], self.params["b" + last])
        caches.append(cache)
        if mode == "test":
            return scores
        grads = {}
        loss, dscores = softmax_loss(scores, y)
        for i in range(self.num_layers):
            W = self.params["W" + str(i + 1)]
            loss += 0.5 * self.reg * np.sum(W * W)
        dout, dW, db = affine_backward(dscores, caches.pop())
        grads["W" + last] = dW + self.reg * self.params["W" + last]
        grads["b" + last] = db
        for i in range(self.num_layers - 2, -1, -1):
            dout, dW, db = affine_relu_backward(dout, caches.pop())
            grads["W" + str(i + 1)] = dW + self.reg * self.params["W" + str(i + 1)]
            grads["b" + str(i + 1)] = db
        return loss, grads


@pytest.mark.parametrize("dtype, tolerance", [(np.float64, F64), (np.float32, F32)])
def test_cs231n_fully_connected_net_loss_and_scores_over_sgd_steps(dtype, tolerance):
    net = FullyConnectedNet([6, 4], dtype=dtype)
    f = jitted(net.loss)
    rng = rng_for(637)
    for step, n in enumerate((5, 5, 7, 5)):
        X, y = rng.standard_normal((n, 3, 4, 4)), rng.integers(0, 5, n)
        assert_same(f(X, y), net.loss(X, y), **tolerance, where=f"train {step}")
        assert_same(f(X), net.loss(X), **tolerance, where=f"test {step}")
        loss, grads = net.loss(X, y)
        for name in net.params:  # the Solver's step, outside: new arrays in the dict
            net.params[name] = net.params[name] - 0.1 * grads[name]
    no_internal_errors(f)


# --- Python number protocol on traced scalars -------------------------------------------------
def full_batches_and_remainder(x, mask):
    kept = mask.sum()
    batches, rest = divmod(kept, 4)
    return batches, rest, math.trunc(x.sum()), divmod(x.sum(), 0.5)


def test_divmod_and_trunc_of_traced_scalars_trace():
    rng = rng_for(638)
    f = run_calls(full_batches_and_remainder,
                  [(rng.standard_normal(5) * 3, rng.random(9) < 0.6) for _ in range(2)], **F64)
    no_internal_errors(f)


class Swish:
    def __init__(self, beta):
        self.beta = beta

    def __call__(self, x):
        return x / (1.0 + np.exp(-self.beta * x))


def swish_model(x, layers):
    for layer in layers:
        x = layer(x)
    return x


def test_a_layer_class_method_patched_between_calls():
    layers = [Swish(1.0)]
    original = Swish.__call__

    def patch_the_class():
        Swish.__call__ = lambda self, x: np.maximum(x, 0.0) * self.beta

    try:
        follows_changes(swish_model, lambda g, x: g(x, layers), [patch_the_class])
    finally:
        Swish.__call__ = original


# --- nnfs Model: layers linked through .prev / .next --------------------------------------


class LayerInput:
    def forward(self, inputs, training):
        self.output = inputs


class LayerDropout:
    def __init__(self, rate):
        self.rate = 1 - rate

    def forward(self, inputs, training):
        self.inputs = inputs
        if not training:
            self.output = inputs.copy()
            return
        self.binary_mask = self.mask_source[: inputs.shape[0]] / self.rate
        self.output = inputs * self.binary_mask


class LinkedDense(LayerDense):
    def forward(self, inputs, training):
        super().forward(inputs)


class LinkedReLU(ActivationReLU):
    def forward(self, inputs, training):
        super().forward(inputs)


class ActivationSoftmax:
    def forward(self, inputs, training):
        self.inputs = inputs
        exp_values = np.exp(inputs - np.max(inputs, axis=1, keepdims=True))
        self.output = exp_values / np.sum(exp_values, axis=1, keepdims=True)

    def predictions(self, outputs):
        return np.argmax(outputs, axis=1)


class LinkedModel:
    """nnfs's Model: layers linked by .prev/.next in finalize(), forward reads
    layer.prev.output, which the previous layer wrote in the same call."""

    def __init__(self):
        self.layers = []

    def add(self, layer):
        self.layers.append(layer)

    def finalize(self):
        self.input_layer = LayerInput()
        layer_count = len(self.layers)
        self.trainable_layers = []
        for i in range(layer_count):
            if i == 0:
                self.layers[i].prev = self.input_layer
                self.layers[i].next = self.layers[i + 1]
            elif i < layer_count - 1:
                self.layers[i].prev = self.layers[i - 1]
                self.layers[i].next = self.layers[i + 1]
            else:
                self.layers[i].prev = self.layers[i - 1]
                self.layers[i].next = None
                self.output_layer_activation = self.layers[i]
            if hasattr(self.layers[i], "weights"):
                self.trainable_layers.append(self.layers[i])

    def forward(self, X, training):
        self.input_layer.forward(X, training)
        for layer in self.layers:
            layer.forward(layer.prev.output, training)
        return layer.output

    def predict(self, X):
        output = self.forward(X, training=False)
        return self.output_layer_activation.predictions(output), output


def linked_state(model):
    return [{name: value for name, value in vars(layer).items() if name not in ("prev", "next")}
            for layer in model.layers]


@pytest.mark.parametrize("method", ["forward", "predict"])
def test_nnfs_linked_model_forward_and_predict(method):
    rng = rng_for(639)
    model = LinkedModel()
    model.add(LinkedDense(rng, 2, 6))
    model.add(LinkedReLU())
    dropout = LayerDropout(0.1)
    dropout.mask_source = (rng.random((16, 6)) > 0.1).astype(float)
    model.add(dropout)
    model.add(LinkedDense(rng, 6, 3))
    model.add(ActivationSoftmax())
    model.finalize()
    eager, compiled = copy.deepcopy(model), copy.deepcopy(model)
    f = jitted(getattr(compiled, method))
    for step, n in enumerate((5, 5, 6, 5)):
        X = rng.standard_normal((n, 2))
        arguments = (X, True) if method == "forward" else (X,)
        if step == 3:
            for each in (eager, compiled):
                each.layers[2].rate = 0.5
        assert_same(f(*arguments), getattr(eager, method)(*arguments), **F64, where=f"step {step}")
        assert_same(linked_state(compiled), linked_state(eager), **F64, where=f"after {step}")
    no_internal_errors(f)


# --- dicts of layers and weights held by the model, grown between calls -----------------------
class DictModel:
    def __init__(self):
        self.blocks = {"fc1": Scale(2.0), "fc2": Scale(3.0)}
        self.params = {"W1": np.eye(3), "W2": np.eye(3) * 2.0}

    def through_blocks(self, x):
        for _name, block in self.blocks.items():
            x = block(x)
        return x

    def l2_penalty(self, x):
        return x.sum() + 0.5 * sum(np.sum(W * W) for W in self.params.values())

    def block_count(self, x):
        return x * len(self.blocks)


def grow_the_dicts(model):
    model.blocks["fc3"] = Scale(10.0)
    model.params["W3"] = np.eye(3) * 5.0


def shrink_the_dicts(model):
    del model.blocks["fc1"]
    del model.params["W1"]


@pytest.mark.parametrize("method", ["through_blocks", "l2_penalty", "block_count"])
def test_a_models_dicts_grown_between_calls(method):
    model = DictModel()
    follows_changes(getattr(model, method), lambda g, x: g(x), [lambda: grow_the_dicts(model)])


@pytest.mark.parametrize("method", ["through_blocks", "l2_penalty", "block_count"])
def test_a_models_dicts_shrunk_between_calls(method):
    model = DictModel()
    follows_changes(getattr(model, method), lambda g, x: g(x),
                    [lambda: shrink_the_dicts(model)])


PARAMS = {"W1": np.eye(3), "b1": np.zeros(3)}


def penalty_over_global_params(x):
    return x.sum() + 0.5 * sum(np.sum(value * value) for value in PARAMS.values())


def test_a_global_dict_of_weights_grown_between_calls():
    def add_weights():
        PARAMS["W2"] = np.ones((3, 3))

    try:
        follows_changes(penalty_over_global_params, lambda g, x: g(x), [add_weights])
    finally:
        PARAMS.pop("W2", None)


CONFIG = {"lr": 0.1, "hidden": [64, 32]}  # a setting that is a list: not all values are settings


def scale_from_config_get(x):
    return x * CONFIG.get("dropout_keep", 1.0)


def scale_from_config_membership(x):
    return x * (CONFIG["dropout_keep"] if "dropout_keep" in CONFIG else 1.0)


class ConfiguredActivation:
    def __init__(self):
        self.cfg = {"lr": 0.1, "act": np.tanh}

    def forward(self, x):
        return self.cfg["act"](x) * self.cfg.get("scale", 1.0)


@pytest.mark.parametrize("case", ["get", "membership", "attribute"])
def test_a_key_added_to_a_mixed_config_dict(case):
    if case == "attribute":
        model = ConfiguredActivation()
        follows_changes(model.forward, lambda g, x: g(x),
                        [lambda: model.cfg.__setitem__("scale", 3.0)])
        return
    model = scale_from_config_get if case == "get" else scale_from_config_membership
    try:
        follows_changes(model, lambda g, x: g(x),
                        [lambda: CONFIG.__setitem__("dropout_keep", 0.5)])
    finally:
        CONFIG.pop("dropout_keep", None)


# --- sets of names: frozen layers, parameters without weight decay ----------------------------
NO_DECAY = {"b1"}


class FreezableNet:
    def __init__(self):
        self.params = {"W1": np.eye(3), "b1": np.ones(3)}
        self.frozen = set()

    def decayed_penalty(self, x):
        penalty = 0.0
        for name, value in self.params.items():
            if name not in NO_DECAY:
                penalty = penalty + np.sum(value * value)
        return x.sum() + penalty

    def step(self, x):
        W = self.params["W1"]
        return x @ W if "W1" in self.frozen else x @ (W * 0.5)


@pytest.mark.parametrize("change", ["global_discard", "attribute_add", "attribute_rebind"])
def test_sets_of_names_changed_between_calls(change):
    net = FreezableNet()
    if change == "global_discard":
        try:
            follows_changes(net.decayed_penalty, lambda g, x: g(x),
                            [lambda: NO_DECAY.discard("b1")])
        finally:
            NO_DECAY.add("b1")
        return
    if change == "attribute_add":
        apply = net.frozen.add
    else:
        def apply(name):
            net.frozen = {name}
    follows_changes(net.step, lambda g, x: g(x), [lambda: apply("W1")])


# --- settings of types other than bool/int/float/str/None: enums, ranges ---------------------
class Mode(enum.Enum):
    TRAIN = 1
    EVAL = 2


class ActivationName(str, enum.Enum):
    RELU = "relu"
    TANH = "tanh"


class Heads(enum.IntEnum):
    ONE = 1
    TWO = 2


class EnumSettings:
    def __init__(self):
        self.mode, self.activation, self.heads, self.rows = (
            Mode.TRAIN, ActivationName.RELU, Heads.ONE, range(2))

    def by_mode(self, x):
        return x * 0.5 if self.mode is Mode.TRAIN else x

    def by_activation_name(self, x):
        return np.maximum(x, 0) if self.activation == "relu" else np.tanh(x)

    def by_int_enum(self, x):
        return x * self.heads

    def by_range(self, x):
        return x[list(self.rows)]


ENUM_CHANGES = {
    "by_mode": ("mode", Mode.EVAL),
    "by_activation_name": ("activation", ActivationName.TANH),
    "by_int_enum": ("heads", Heads.TWO),
    "by_range": ("rows", range(1, 2)),
}


@pytest.mark.parametrize("method", list(ENUM_CHANGES))
def test_enum_and_range_settings_changed_between_calls(method):
    settings = EnumSettings()
    name, value = ENUM_CHANGES[method]
    follows_changes(getattr(settings, method), lambda g, x: g(x),
                    [lambda: setattr(settings, name, value)])


MODE = Mode.TRAIN


def scaled_by_the_global_mode(x):
    return x * 0.5 if MODE is Mode.TRAIN else x


def test_a_global_enum_mode_switched_between_calls():
    def switch():
        global MODE
        MODE = Mode.EVAL

    try:
        follows_changes(scaled_by_the_global_mode, lambda g, x: g(x), [switch])
    finally:
        globals()["MODE"] = Mode.TRAIN


# --- a dtype setting held as a NumPy scalar type (cs231n's self.dtype) ------------------------
class TypedModel:
    def __init__(self):
        self.dtype = np.float32

    def forward(self, X):
        return X.astype(self.dtype) * 2


DTYPE = np.float32


def cast_to_the_global_dtype(x):
    return x.astype(DTYPE) + 1


@pytest.mark.parametrize("where", ["attribute", "global"])
def test_a_dtype_setting_held_as_a_scalar_type_changed_between_calls(where):
    if where == "attribute":
        model = TypedModel()
        follows_changes(model.forward, lambda g, x: g(x),
                        [lambda: setattr(model, "dtype", np.float64)])
        return

    def switch():
        global DTYPE
        DTYPE = np.float64

    try:
        follows_changes(cast_to_the_global_dtype, lambda g, x: g(x), [switch])
    finally:
        globals()["DTYPE"] = np.float32


# --- a from-scratch transformer: blocks of layer objects, settings flipped between calls -----
class LayerNorm:
    def __init__(self, width, eps=1e-5):
        self.gamma, self.beta, self.eps = np.ones(width), np.zeros(width), eps

    def __call__(self, x):
        mu = x.mean(axis=-1, keepdims=True)
        var = x.var(axis=-1, keepdims=True)
        return self.gamma * (x - mu) / np.sqrt(var + self.eps) + self.beta


class MultiHead:
    def __init__(self, rng, width, n_heads):
        self.n_heads = n_heads
        self.Wqkv = rng.standard_normal((width, 3 * width)) * 0.3
        self.Wo = rng.standard_normal((width, width)) * 0.3
        self.causal = True

    def __call__(self, x):
        T, width = x.shape
        q, k, v = np.split(x @ self.Wqkv, 3, axis=-1)
        q, k, v = (m.reshape(T, self.n_heads, width // self.n_heads).transpose(1, 0, 2)
                   for m in (q, k, v))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(width // self.n_heads)
        if self.causal:
            scores = np.where(np.triu(np.ones((T, T), dtype=bool), k=1), -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        return (weights @ v).transpose(1, 0, 2).reshape(T, width) @ self.Wo


class TransformerBlock:
    def __init__(self, rng, width, n_heads):
        self.ln1, self.ln2 = LayerNorm(width), LayerNorm(width)
        self.attn = MultiHead(rng, width, n_heads)
        self.W1 = rng.standard_normal((width, 2 * width)) * 0.3
        self.W2 = rng.standard_normal((2 * width, width)) * 0.3
        self.residual_scale = 1.0

    def __call__(self, x):
        x = x + self.residual_scale * self.attn(self.ln1(x))
        return x + np.maximum(self.ln2(x) @ self.W1, 0) @ self.W2


class TinyTransformer:
    def __init__(self, rng, width=8, depth=2, n_heads=2):
        self.blocks = [TransformerBlock(rng, width, n_heads) for _ in range(depth)]
        self.ln_f = LayerNorm(width)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


def test_tiny_transformer_over_lengths_with_settings_and_weights_changed():
    rng = rng_for(640)
    model = TinyTransformer(rng)
    f = jitted(model.forward)
    changes = {
        2: lambda: setattr(model.blocks[1].attn, "causal", False),
        3: lambda: setattr(model.blocks[0], "residual_scale", 0.5),
        4: lambda: setattr(model.ln_f, "eps", 1e-2),
        5: lambda: model.blocks[0].attn.Wqkv.__imul__(0.5),
        6: lambda: setattr(model.blocks[1].attn, "n_heads", 4),
        7: lambda: setattr(model.blocks[1], "W1", model.blocks[1].W1 * -1.0),
    }
    for step, T in enumerate((5, 5, 7, 5, 6, 6, 5, 5)):
        if step in changes:
            changes[step]()
        x = rng.standard_normal((T, 8))
        assert_same(f(x), model.forward(x), **F64, where=f"step {step}")
    no_internal_errors(f)


def cache_by_shape(x):
    cache = {}
    cache[x.shape] = x.sum()
    n = x.shape[0]
    cache[n] = x.max()
    return x.shape in cache, cache.get(x.shape), cache.get(n)


def test_a_local_cache_keyed_by_the_shape_is_read_back():
    f = run_calls(cache_by_shape, [(np.ones((n, 2)),) for n in (3, 5)], dynamic=True)
    no_internal_errors(f)


# --- a settings object replaced by another class's instance with the same values ----------
class PlainSGD:
    def __init__(self, lr):
        self.lr = lr

    def update(self, w, g):
        return w - self.lr * g


class MomentumSGD(PlainSGD):
    pass


class OptimizedModel:
    def __init__(self):
        self.optimizer = PlainSGD(0.1)

    def step_by_isinstance(self, x):
        if isinstance(self.optimizer, MomentumSGD):
            return x * self.optimizer.lr * 2.0
        return x * self.optimizer.lr

    def step_by_type_name(self, x):
        scale = 2.0 if type(self.optimizer).__name__ == "MomentumSGD" else 1.0
        return x * scale * self.optimizer.lr


@pytest.mark.parametrize("method", ["step_by_isinstance", "step_by_type_name"])
def test_a_settings_object_replaced_by_another_class_with_equal_values(method):
    model = OptimizedModel()
    follows_changes(getattr(model, method), lambda g, x: g(x),
                    [lambda: setattr(model, "optimizer", MomentumSGD(0.1))])


class SignSGD(PlainSGD):
    def update(self, w, g):
        return w - self.lr * np.sign(g)



class StrategyModel:
    def __init__(self):
        self.optimizer = PlainSGD(0.1)
        self.W = np.linspace(-1.0, 1.0, 6).reshape(2, 3)

    def step(self, g):
        return self.optimizer.update(self.W, g)


def test_an_optimizer_object_swapped_for_another_class_between_calls():
    model = StrategyModel()
    follows_changes(model.step, lambda g, x: g(x),
                    [lambda: setattr(model, "optimizer", SignSGD(0.1))])


def test_an_optimizer_object_replaced_by_one_of_its_class_with_a_new_rate():
    # the method's self.lr was read on the traced optimizer object, not at self.optimizer
    model = StrategyModel()
    follows_changes(model.step, lambda g, x: g(x),
                    [lambda: setattr(model, "optimizer", PlainSGD(0.5)),
                     lambda: setattr(model.optimizer, "lr", 0.25)])
