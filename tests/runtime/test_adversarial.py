"""Adversarial eager-vs-compiled tests: model functions written the way NumPy model code
is written (params dicts, layer objects, bound methods, buffers filled in place, configs
in globals/closures/defaults, helpers, partials, recursion, super()) plus hostile cases
(hidden impurity, state mutated between calls, lying __eq__, NaN/Inf, 0-size and odd
shapes, non-contiguous and broadcast inputs, dtype mixes).

Every case calls ``jit(f, cache=False)`` several times (so the compiled path runs),
mutating outside state between calls, and compares each result with the plain function
run on the same state; gradient cases compare ``value_and_grad`` / ``jit(value_and_grad)``
/ ``Tensor.backward`` with analytic gradients. A failing test here is a silent wrong
result or a crash; none is marked xfail on purpose.
"""

import functools
import os
import tempfile
import types
import warnings

import numpy as np
import pytest

from tracejit import jit, tensor, value_and_grad


# --- harness -------------------------------------------------------------------------
def _same(expected, got):
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for e, g in zip(expected, got):
            _same(e, g)
        return
    if isinstance(expected, dict):
        assert got.keys() == expected.keys()
        for key in expected:
            _same(expected[key], got[key])
        return
    if expected is None:
        assert got is None
        return
    e, g = np.asarray(expected), np.asarray(got)
    assert g.shape == e.shape, f"shape {g.shape} != eager {e.shape}"
    assert g.dtype == e.dtype, f"dtype {g.dtype} != eager {e.dtype}"
    if e.dtype.kind in "fc":
        tol = 1e-4 if e.dtype == np.float32 else 1e-6
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(g, e)


def _fresh(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def run_steps(f, steps, target=None):
    """``steps``: ``[(mutate or None, args tuple or thunk)]``. Before each step the
    mutation runs; then eager ``f`` and the jitted ``target`` (default ``f``) run on
    fresh copies of the same arguments and must agree."""
    jitted = jit(target if target is not None else f, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for number, (mutate, args) in enumerate(steps):
            if mutate is not None:
                mutate()
            make = args if callable(args) else (lambda args=args: _fresh(args))
            expected = f(*make())
            got = jitted(*make())
            try:
                _same(expected, got)
            except AssertionError as error:
                raise AssertionError(f"call {number}: compiled {got!r} != eager "
                                     f"{expected!r}\n{error}") from None
    return jitted


X3 = np.arange(3.0)
X4 = np.arange(4.0)
RNG = np.random.default_rng(1234)
XB = RNG.standard_normal((5, 3)) * 3 + 1


def _twice_then(mutation, args):
    """Two calls on the original state (trace, then compiled), then one after
    ``mutation``."""
    return [(None, args), (None, args), (mutation, args)]


# --- values reached through calls instead of loads are frozen -----------------------
# Module-level state (globals are what the front end's load hooks guard); each case
# resets it.
SCALES = [1.0, 2.0]
CFG_NESTED = {"model": {"k": 2.0}}
CFG_NS = types.SimpleNamespace(k=2.0)
CFG_INT = {"k": 2}
CFG_F32 = {"k": np.float32(2.0)}
CFG_DIMS = {"dims": [2.0, 3.0]}
PARAMS = {}
PARTIAL_W = np.ones(3)


def _model():
    class Holder:
        pass

    model = Holder()
    model.layers = [Holder()]
    model.layers[0].params = {"W": np.ones(3)}
    return model


DEEP_MODEL = _model()


class _Slotted:
    __slots__ = ("W",)

    def __init__(self):
        self.W = np.ones(3)


SLOTTED = _Slotted()


def global_list_iterated():
    """``for s in SCALES``: the list is guarded by length only; its elements fold."""
    SCALES[:] = [1.0, 2.0]

    def f(x):
        for s in SCALES:
            x = x * s
        return x

    return f, _twice_then(lambda: SCALES.__setitem__(0, 5.0), (X3,))


def nested_dict_get():
    CFG_NESTED["model"] = {"k": 2.0}

    def f(x):
        return x * CFG_NESTED.get("model").get("k")

    return f, _twice_then(lambda: CFG_NESTED["model"].__setitem__("k", 3.0), (X3,))


def getattr_config():
    CFG_NS.k = 2.0

    def f(x):
        return x * CFG_NS.k

    return f, _twice_then(lambda: setattr(CFG_NS, "k", 4.0), (X3,))


def settings_dict_get_int_to_float():
    """The dict guard compares with ==, and 2 == 2.0: the compiled int result is kept."""
    CFG_INT["k"] = 2

    def f(x):
        return x * CFG_INT.get("k")

    return f, _twice_then(lambda: CFG_INT.__setitem__("k", 2.0), (np.arange(3),))


def settings_dict_of_numpy_scalars():
    CFG_F32["k"] = np.float32(2.0)

    def f(x):
        return x * CFG_F32.get("k")

    return f, _twice_then(lambda: CFG_F32.__setitem__("k", np.float32(3.0)), (X3,))


def list_in_dict_unpacked():
    CFG_DIMS["dims"] = [2.0, 3.0]

    def f(x):
        a, b = CFG_DIMS["dims"]
        return x * a + b

    return f, _twice_then(lambda: CFG_DIMS["dims"].__setitem__(0, 10.0), (X3,))


def params_items_computed_alone():
    """``for k, v in PARAMS.items(): np.sum(v * v)``: v is a plain ndarray (not loaded
    through a hook), so the L2 term is computed by NumPy at trace time and frozen."""
    PARAMS.clear()
    PARAMS.update(W1=np.ones((2, 2)), b1=np.zeros(2))

    def f(x):
        total = 0.0
        for _, v in PARAMS.items():
            total = total + np.sum(v * v)
        return x * total

    def sgd():
        for key in PARAMS:
            PARAMS[key] -= 0.1

    return f, _twice_then(sgd, (np.ones(2),))


def deep_attribute_path_array():
    """model.layers[0].params['W'] is 4 steps deep: past the implicit-input scan depth,
    so the array is a constant."""
    DEEP_MODEL.layers[0].params["W"] = np.ones(3)

    def f(x):
        return x * DEEP_MODEL.layers[0].params["W"]

    def step():
        DEEP_MODEL.layers[0].params["W"] *= 3

    return f, _twice_then(step, (X3,))


def slotted_layer_array():
    SLOTTED.W = np.ones(3)

    def f(x):
        return x * SLOTTED.W

    return f, _twice_then(lambda: SLOTTED.W.__setitem__(slice(None), 7.0), (X3,))


def _scaled(x, W):
    return x * W


def partial_called_inside():
    PARTIAL_W[:] = 1.0
    bound = functools.partial(_scaled, W=PARTIAL_W)

    def f(x):
        return bound(x) + 1

    return f, _twice_then(lambda: PARTIAL_W.__setitem__(slice(None), 5.0), (X3,))


def mutable_default_list():
    def f(x, scales=[1.0, 2.0]):  # noqa: B006 - the mutable default is the point
        for s in scales:
            x = x * s
        return x

    return f, _twice_then(lambda: f.__defaults__[0].__setitem__(1, 7.0), (X3,))


# --- attributes read in nested calls (self.training, self.eps ...) are not guarded -----
class BatchNorm:
    def __init__(self, d):
        self.gamma, self.beta = np.ones(d), np.zeros(d)
        self.running_mean, self.running_var = np.zeros(d), np.ones(d)
        self.training, self.eps = True, 1e-5

    def __call__(self, x):
        if self.training:
            mu, var = x.mean(0), x.var(0)
        else:
            mu, var = self.running_mean, self.running_var
        return self.gamma * (x - mu) / np.sqrt(var + self.eps) + self.beta


BN = BatchNorm(3)


def batchnorm_training_flag_from_model_function():
    BN.training = True

    def model(x):
        return np.tanh(BN(x))

    return model, _twice_then(lambda: setattr(BN, "training", False), (XB,))


class _Dropoutish:
    def __init__(self):
        self.p = 0.5

    def scale(self, x):
        return x * (1 - self.p)


class _Net:
    def __init__(self):
        self.drop = _Dropoutish()

    def __call__(self, x):
        return self.drop.scale(x)


NET = _Net()


def nested_layer_scalar_attribute():
    NET.drop.p = 0.5

    def f(x):
        return NET(x)

    return f, _twice_then(lambda: setattr(NET.drop, "p", 0.1), (XB,))


class _LeakyLinear:
    def __init__(self):
        self.W, self.alpha = np.ones((3, 3)), 0.1

    def act(self, z):
        return np.where(z > 0, z, self.alpha * z)

    def forward(self, x):
        return self.act(x @ self.W)


def bound_method_calls_self_method():
    layer = _LeakyLinear()
    return layer.forward, _twice_then(lambda: setattr(layer, "alpha", 0.3), (XB - 3,))


class _K:
    k = 2.0


def _times_k(o, x):
    return x * o.k


def helper_reads_argument_attribute():
    o = _K()

    def f(x, obj):
        return _times_k(obj, x)

    return f, _twice_then(lambda: setattr(o, "k", 9.0), (XB, o))


class _Base:
    def __init__(self):
        self.scale, self.W = 2.0, np.ones(4)

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        return x * self.W * self.scale


class _Child(_Base):
    def forward(self, x):
        return super().forward(x) + 1


CHILD = _Child()


def super_forward_scalar_attribute():
    CHILD.scale = 2.0

    def f(x):
        return CHILD(x)

    return f, _twice_then(lambda: setattr(CHILD, "scale", 3.0), (X4,))


# --- jit(callable object) / jit(partial): their arrays are not implicit inputs ---------
class _Dense:
    def __init__(self, i, o, seed):
        self.W = np.random.default_rng(seed).standard_normal((i, o)) * 0.5
        self.b = np.zeros(o)

    def __call__(self, x):
        return x @ self.W + self.b


class _Seq:
    def __init__(self, *layers):
        self.layers = list(layers)

    def __call__(self, x):
        for layer in self.layers:
            x = np.tanh(layer(x))
        return x


def jit_of_layer_object_weights_updated():
    net = _Seq(_Dense(3, 4, 0), _Dense(4, 2, 1))

    def sgd():
        for layer in net.layers:
            layer.W -= 0.05

    return net, _twice_then(sgd, (XB,))


def jit_of_layer_object_super_in_place():
    child = _Child()
    return child, _twice_then(lambda: child.W.__setitem__(slice(None), 5.0), (X4,))


def jit_of_partial_array_keyword():
    W = np.ones(3)
    return functools.partial(_scaled, W=W), _twice_then(
        lambda: W.__setitem__(slice(None), 3.0), (X3,))


# --- frozen standard-library calls (functions in <frozen os> count as internal) -------
def os_getenv_in_helper():
    os.environ["TRACEJIT_ADV_MODE"] = "train"

    def mode():
        return os.getenv("TRACEJIT_ADV_MODE", "train")

    def f(x):
        if mode() == "train":
            return x * 2
        return x

    return f, _twice_then(lambda: os.environ.__setitem__("TRACEJIT_ADV_MODE", "eval"), (X3,))


def os_path_exists():
    path = os.path.join(tempfile.mkdtemp(), "flag")

    def f(x):
        return x + float(os.path.exists(path))

    return f, _twice_then(lambda: open(path, "w").close(), (X3,))


# --- buffers written through another name (alias, view, helper) ------------------------
def _fill(buf, t, v):
    buf[t] = v


def buffer_filled_by_helper():
    def f(x):
        out = np.zeros(x.shape)
        for t in range(x.shape[0]):
            _fill(out, t, x[t] * 2)
        return np.sum(out * x)

    return f, [(None, (X3 + 1,)), (None, (X3 - 1,)), (None, (X3 * 2,))]


def buffer_written_through_view():
    def f(x):
        out = np.zeros(3)
        view = out[:]
        view[:] = x * 2
        return np.sum(out * x)

    return f, [(None, (X3 + 1,)), (None, (X3 - 1,)), (None, (X3 * 2,))]


def buffer_written_through_alias():
    def f(x):
        a = np.zeros(3)
        b = a
        b[0] = x[0] * 5
        return np.sum(a * x)

    return f, [(None, (X3 + 1,)), (None, (X3 - 1,)), (None, (X3 * 2,))]


def aliased_arguments_written():
    def f(x, y):
        x[0] = 100.0
        return y * 1

    def same_array_twice():
        a = np.arange(3.0)
        return a, a

    return f, [(None, same_array_twice)] * 3


def identity_of_arguments():
    a, b = np.arange(3.0), np.arange(3.0) + 10

    def f(x, y):
        return x + 1 if x is y else x - 1

    return f, [(None, lambda: (a, a)), (None, lambda: (a, a)), (None, lambda: (a, b))]


# --- hostile values --------------------------------------------------------------------
class _LyingFloat(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


LYING = _LyingFloat(2.0)


def float_subclass_with_lying_eq():
    global LYING
    LYING = _LyingFloat(2.0)

    def f(x):
        return x * LYING

    def rebind():
        global LYING
        LYING = _LyingFloat(5.0)

    return f, _twice_then(rebind, (X3,))


def var_ddof1_of_empty():
    def f(x):
        return x.var(axis=0, ddof=1), np.std(x, axis=0, ddof=1)

    return f, [(None, (np.zeros((0, 3)),))] * 3


BUG_CASES = [
    global_list_iterated, nested_dict_get, getattr_config, settings_dict_get_int_to_float,
    settings_dict_of_numpy_scalars, list_in_dict_unpacked, params_items_computed_alone,
    deep_attribute_path_array, slotted_layer_array, partial_called_inside,
    mutable_default_list, batchnorm_training_flag_from_model_function,
    nested_layer_scalar_attribute, bound_method_calls_self_method,
    helper_reads_argument_attribute, super_forward_scalar_attribute,
    jit_of_layer_object_weights_updated, jit_of_layer_object_super_in_place,
    jit_of_partial_array_keyword, os_getenv_in_helper, os_path_exists,
    buffer_filled_by_helper, buffer_written_through_view, buffer_written_through_alias,
    aliased_arguments_written, identity_of_arguments, float_subclass_with_lying_eq,
    var_ddof1_of_empty,
]


# Open bugs, each a known wrong result today (strict: a fix makes the test say so).
KNOWN_OPEN = {
    "float_subclass_with_lying_eq": "value guards compare with the value's own __eq__",
}


def _known(case):
    reason = KNOWN_OPEN.get(case.__name__)
    return pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=reason)) if (
        reason) else case


@pytest.mark.parametrize("case", [_known(case) for case in BUG_CASES],
                         ids=lambda case: case.__name__)
def test_found_cases_match_eager(case):
    f, steps = case()
    run_steps(f, steps)


def test_property_with_side_effect_runs_once_per_call():
    # the getter's write (self.calls += 1, which no recorded write explains) makes the
    # trace fail and is undone: the calls run eagerly, once each
    class Counted:
        def __init__(self):
            self.calls = 0

        @property
        def scale(self):
            self.calls += 1
            return float(self.calls)

    def make():
        counted = Counted()

        def f(x):
            return x * counted.scale

        return f, counted

    eager_f, eager_state = make()
    jit_f, jit_state = make()
    jitted = jit(jit_f, cache=False)
    eager = [eager_f(X3)[1] for _ in range(4)]
    got = [jitted(X3)[1] for _ in range(4)]
    assert got == eager and jit_state.calls == eager_state.calls == 4


# --- representative cases that pass ---------------------------------------------------
MLP_PARAMS = {}


def mlp_global_params_sgd():
    rng = np.random.default_rng(0)
    MLP_PARAMS.clear()
    MLP_PARAMS.update(W1=rng.standard_normal((3, 5)), b1=np.zeros(5),
                      W2=rng.standard_normal((5, 2)), b2=np.zeros(2))

    def mlp(x):
        h = np.maximum(0, x @ MLP_PARAMS["W1"] + MLP_PARAMS["b1"])
        return h @ MLP_PARAMS["W2"] + MLP_PARAMS["b2"]

    def sgd():
        for key in MLP_PARAMS:
            MLP_PARAMS[key] -= 0.1

    return mlp, _twice_then(sgd, (XB,)) + [(sgd, (XB[:2],))]


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


class _Nielsen:
    def __init__(self, sizes):
        rng = np.random.default_rng(3)
        self.biases = [rng.standard_normal((y, 1)) for y in sizes[1:]]
        self.weights = [rng.standard_normal((y, x)) for x, y in zip(sizes[:-1], sizes[1:])]

    def feedforward(self, a):
        for b, w in zip(self.biases, self.weights):
            a = _sigmoid(np.dot(w, a) + b)
        return a


def nielsen_feedforward_zip():
    net = _Nielsen([3, 4, 2])

    def sgd():
        for w in net.weights:
            w -= 0.5

    return net.feedforward, _twice_then(sgd, (XB[:3, :1],))


class _RNN:
    def __init__(self, H, D):
        rng = np.random.default_rng(4)
        self.Wx = rng.standard_normal((D, H)) * 0.3
        self.Wh = rng.standard_normal((H, H)) * 0.3
        self.b = np.zeros(H)

    def forward(self, xs):
        N, T, _ = xs.shape
        h = np.zeros((N, self.b.shape[0]))
        hs = np.zeros((N, T, self.b.shape[0]))
        for t in range(T):
            h = np.tanh(xs[:, t, :] @ self.Wx + h @ self.Wh + self.b)
            hs[:, t, :] = h
        return hs


def rnn_bound_method_variable_length():
    rnn = _RNN(3, 2)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, T, 2)) for T in (4, 4, 5, 7)]

    def shrink():
        rnn.Wh *= 0.5

    return rnn.forward, [(None, (xs[0],)), (None, (xs[1],)), (shrink, (xs[2],)),
                         (None, (xs[3],))]


def im2col_conv():
    K = np.array([[1.0, -2.0], [0.5, 3.0]])

    def f(x):
        H, W = x.shape
        cols = np.zeros(((H - 1) * (W - 1), 4))
        r = 0
        for i in range(H - 1):
            for j in range(W - 1):
                cols[r, :] = x[i:i + 2, j:j + 2].ravel()
                r += 1
        return cols @ K.ravel()

    rng = np.random.default_rng(6)
    return f, [(None, (rng.standard_normal((3, 4)),)), (None, (rng.standard_normal((3, 4)),)),
               (None, (rng.standard_normal((4, 3)),))]


ACT = np.tanh


def global_activation_rebound():
    global ACT
    ACT = np.tanh

    def f(x):
        return ACT(x)

    def rebind():
        global ACT
        ACT = np.sin

    return f, _twice_then(rebind, (X3,))


def default_dict_string_branch():
    def f(x, cfg={"act": "relu"}):  # noqa: B006
        return np.maximum(x, 0) if cfg["act"] == "relu" else np.tanh(x)

    return f, _twice_then(lambda: f.__defaults__[0].__setitem__("act", "tanh"), (X3 - 1,))


def batchnorm_flag_jit_of_layer():
    bn = BatchNorm(3)
    return bn, _twice_then(lambda: setattr(bn, "training", False), (XB,))


def _tree(x, d):
    if d == 0:
        return x
    return _tree(np.tanh(x), d - 1) + _tree(x * 0.5, d - 1)


def recursion():
    return _tree, [(None, (X4, 3)), (None, (X4, 3)), (None, (X4 + 1, 2))]


def lambda_default_and_partial():
    scale = lambda z, k=2.0: z * k  # noqa: E731
    clip = functools.partial(np.clip, a_min=0, a_max=2)

    def f(x):
        return scale(x) + clip(x)

    return f, [(None, (X4,))] * 3


def softmax_layernorm_odd_inputs():
    def f(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        s = e / e.sum(axis=-1, keepdims=True)
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return s, (x - mu) / np.sqrt(var + 1e-5)

    rng = np.random.default_rng(8)
    inputs = [
        np.array([[1.0, np.nan, 2.0], [np.inf, 1.0, -1.0]]),
        rng.standard_normal((7, 13)),
        rng.standard_normal((13, 7)).astype(np.float32),
        rng.standard_normal((6, 10))[::2, ::3],
        np.broadcast_to(rng.standard_normal((1, 5)), (4, 5)),
        rng.standard_normal((4, 5))[::-1, ::-1],
    ]
    return f, [(None, lambda a=a: (a,)) for a in inputs for _ in range(2)]


def dtype_mixes_and_zero_d():
    def f(a, b):
        return a / b + a // 2 + (a > b), np.sqrt(np.abs(a * b))

    return f, [
        (None, (np.arange(1, 5, dtype=np.int32), np.ones(4, np.float32))),
        (None, (np.arange(2, 6, dtype=np.int32), np.full(4, 3, np.float32))),
        (None, (np.arange(1, 5), np.full(4, 2))),
        (None, (np.arange(-5, -1), np.full(4, 3))),
        (None, (np.array(2.0), np.array(3.0))),
        (None, (np.array(-1.0), np.array(3.0))),
    ]


def shape_branch_dynamic():
    def f(x):
        if x.shape[0] % 2 == 0:
            return x[::2] * 2
        return x[1:] - 1

    return f, [(None, (np.arange(float(n)),)) for n in (4, 4, 5, 6, 7, 9, 16, 17)]


PASS_CASES = [
    mlp_global_params_sgd, nielsen_feedforward_zip, rnn_bound_method_variable_length,
    im2col_conv, global_activation_rebound, default_dict_string_branch,
    batchnorm_flag_jit_of_layer, recursion, lambda_default_and_partial,
    softmax_layernorm_odd_inputs, dtype_mixes_and_zero_d, shape_branch_dynamic,
]


@pytest.mark.parametrize("case", PASS_CASES, ids=lambda case: case.__name__)
def test_representative_cases_match_eager(case):
    f, steps = case()
    run_steps(f, steps)


def test_hidden_time_call_is_not_frozen():
    import time

    def stamp():
        return time.perf_counter()

    def f(x):
        return x + stamp()

    jitted = jit(f, cache=False)
    values = []
    for _ in range(3):
        values.append(jitted(np.zeros(1))[0])
        time.sleep(0.001)
    assert values[0] < values[1] < values[2]
    assert jitted.stats()["compiled_calls"] == 0


def test_guard_decisions_with_cancellation():
    rng = np.random.default_rng(7)

    def f(x):
        return x * 2 if x.sum() > 0 else x - 2

    def g(x):
        return x + 1 if np.dot(x, x[::-1]) > 0 else x - 1

    for function in (f, g):
        for dtype in (np.float32, np.float64):
            jitted = jit(function, cache=False)
            for _ in range(20):
                x = rng.standard_normal(int(rng.integers(2, 12)))
                x = np.append(x, -x.sum()) if function is f else np.append(x, x[::-1])
                x = x.astype(dtype)
                _same(function(x), jitted(x))


# --- gradients ------------------------------------------------------------------------
GX = np.array([1.0, 3.0, 2.0])


def _grad_paths(f):
    return {"value_and_grad": value_and_grad(f),
            "jit(value_and_grad)": jit(value_and_grad(f), cache=False)}


def g_array_of_scalars(x):
    vals = [np.sum(x), np.max(x)]
    return np.sum(np.array(vals)) + np.sum(x)


def g_fill_diagonal(x):
    M = np.zeros((3, 3))
    np.fill_diagonal(M, x)
    return np.sum(M @ x)


def g_alias_write(x):
    a = np.zeros(3)
    b = a
    b[0] = x[0] * 5
    return np.sum(a * x)


def g_view_write(x):
    out = np.zeros(3)
    view = out[:]
    view[:] = x * 2
    return np.sum(out * x)


def g_helper_fill(x):
    out = np.zeros(x.shape)
    for t in range(x.shape[0]):
        _fill(out, t, x[t] * 2)
    return np.sum(out * x)


def g_ufunc_out(x):
    out = np.zeros(3)
    np.multiply(x, 2.0, out=out)
    return np.sum(out * x)


def g_rnn(xs):
    W = np.array([[0.5, -0.3], [0.2, 0.4]])
    h = np.zeros(2)
    hs = np.zeros((xs.shape[0], 2))
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] * W[0] + h @ W)
        hs[t] = h
    return np.sum(hs ** 2)


def g_relu_mask(x):
    y = x.copy()
    y[y < 2.5] = 0.0
    return np.sum(y * y)


def g_out_index(x):
    out = np.zeros(3)
    for i in range(3):
        out[i] = x[i] * x[i]
    return np.sum(out)


def _numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        g[i] = (float(f(up)) - float(f(down))) / (2 * eps)
    return g


GRAD_BUGS = [g_array_of_scalars, g_fill_diagonal, g_alias_write, g_view_write,
             g_helper_fill, g_ufunc_out]
GRAD_OK = [g_rnn, g_relu_mask, g_out_index]


def _grad_case(f, path):
    if f is g_alias_write and path == "value_and_grad":
        return pytest.param(f, path, marks=pytest.mark.xfail(
            strict=True, reason="eager value_and_grad: a buffer read through another name "
            "(b = a) has the right values but no gradient; jit(value_and_grad) is right"))
    return pytest.param(f, path)


@pytest.mark.parametrize("f, path", [_grad_case(f, path) for f in GRAD_BUGS + GRAD_OK
                                     for path in ("value_and_grad", "jit(value_and_grad)")],
                         ids=lambda value: getattr(value, "__name__", value))
def test_gradients_match_finite_differences(f, path):
    evaluate = _grad_paths(f)[path]
    x_values = [GX, GX + 0.25] if f is not g_rnn else [np.array([0.3, -0.2, 0.5]),
                                                       np.array([0.1, 0.4, -0.6])]
    for x in x_values:
        try:
            value, gradient = evaluate(x.copy())
        except (TypeError, RuntimeError) as error:  # a clear refusal is the contract too
            assert "gradient" in str(error) and f in GRAD_BUGS, error
            return
        np.testing.assert_allclose(value, f(x.copy()), rtol=1e-6)
        np.testing.assert_allclose(gradient, _numeric_grad(f, x), rtol=1e-5, atol=1e-6)


@pytest.mark.xfail(strict=True, reason="NumPy converts a 0-d Tensor written into an ndarray "
                   "with __float__, which cannot tell this from float(loss) (PyTorch drops "
                   "it too); jit and value_and_grad keep the gradient")
def test_scalar_tensor_written_into_ndarray_keeps_or_refuses_gradient():
    """Plain eager call on a Tensor: ``out[i] = x[i] * 5`` goes through Tensor.__float__
    into the ndarray; the gradient is dropped silently (a vector Tensor raises)."""
    x = tensor(GX.copy(), requires_grad=True)
    try:
        out = g_alias_write(x)
    except Exception as error:  # a clear refusal is acceptable
        assert "gradient" in str(error)
        return
    out.backward()
    np.testing.assert_allclose(x.grad.data, _numeric_grad(g_alias_write, GX), rtol=1e-5)


# --- a dataclass of settings and arrays as an argument ------------------------------------
def test_a_dataclass_argument_made_anew_each_call_is_no_crash():
    """A dataclass is specialized on by identity; a new one each call misses every
    variant, and explaining the miss compared it with ``==``, which compares its array
    fields and raised (the call crashed where NumPy runs). Its array, updated in place
    between calls of the same object, is read afresh."""
    import dataclasses

    @dataclasses.dataclass
    class Config:
        lr: float
        scale: np.ndarray

    def step(config, x):
        return x * config.lr + config.scale

    jitted = jit(step, cache=False)
    x = np.arange(3.0)
    for value in range(3):
        config = Config(0.1, np.full(3, float(value)))
        _same(step(config, x), jitted(config, x))
    for value in range(3):
        config.scale[:] = value + 10.0
        _same(step(config, x), jitted(config, x))
