"""State and identity holes: places where a compiled call was another program than eager's.

* A traced array hashed by the user's code (``d[x] = 1``, ``{x}``, ``x in table``) was
  hashed by identity, where NumPy raises ``TypeError: unhashable type``: now NumPy's
  error (a NumPy scalar, a Python number or a Tensor, which eager hashes, runs eagerly).
  tracejit's own dicts and WeakSets of tracers still hash them (``locations.called_by_user``).
* ``x.__array_interface__`` / ``__array_struct__`` / ``__dlpack__``, ``bytes(x)``,
  ``memoryview(x)`` and ``pickle.dumps(x)`` of a traced array were internal errors: now the
  call runs eagerly with the user's line (NumPy's own probes still find none).
* A user subclass of dict, list, tuple, deque or OrderedDict read from outside (``class
  Config(dict)``, an EasyDict, ``class Layers(list)``) was guarded by nothing: it is
  guarded as its base is and by its class, its attributes through its path
  (``outside_inputs.container_subclass``); one that defines its own ``__getitem__`` (or
  other reads) runs eagerly. ``UserDict`` / ``UserList`` are guarded by their ``.data``,
  a ``ChainMap`` by its ``.maps``, a ``MappingProxyType`` of settings whole.
* ``return np.ascontiguousarray(x)`` was a copy where NumPy returns ``x`` itself, and a
  returned ``np.diagonal(x)`` a writeable gather where NumPy's is a read-only view of ``x``:
  the call now makes them from the caller's array (``result_identity.numpy_results``).

Each call compares results, types and the arguments afterwards with eager NumPy, and an
exception eager raises must be raised too.
"""

import collections
import pickle
import types

import numpy as np
import pytest
from real_model_checks import jitted, no_internal_errors, run_calls

import tracejit as tj


# --- traced arrays are unhashable, as NumPy's are ------------------------------------------
def array_as_dict_key(x):
    seen = {}
    seen[x] = 1
    return x * len(seen)


def array_in_a_set(x):
    return x * len({x, x + 1})


LOOKUP = {1.0: 2.0}


def array_looked_up(x):
    return x * (x in LOOKUP)


def selection_as_dict_key(x):
    return x * len({x[x > 0]: 1})  # (a masked selection: tracer/masked_selection.py)


@pytest.mark.parametrize("function", [array_as_dict_key, array_in_a_set, array_looked_up,
                                      selection_as_dict_key])
def test_a_hashed_array_raises_numpys_type_error(function):
    with pytest.raises(TypeError, match="unhashable"):
        function(np.ones(2))
    f = jitted(function)
    for _ in range(2):
        with pytest.raises(TypeError, match="unhashable"):
            f(np.ones(2))
    assert not f.stats()["compiled_calls"], f.explain()


def scalars_as_keys(x):
    counts = {x.sum(): 1, float(x.sum()): 2, x.max(): 3}  # equal values: one key in NumPy
    return x * len(counts)


def tensor_as_key(x):
    seen = {x: 1}
    return x * len(seen)


def test_hashable_scalars_and_tensors_run_eagerly_with_eagers_keys():
    f = run_calls(scalars_as_keys, [(np.ones(3),), (np.arange(3.0),)])
    no_internal_errors(f)
    g = jitted(tensor_as_key)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(g(tj.tensor([1.0, 2.0]))), [1.0, 2.0])
    no_internal_errors(g)


# --- the memory of a traced array ------------------------------------------------------------
def data_pointer(x):
    y = x + 1
    return y * (y.__array_interface__["data"][0] != 0)


def array_struct(x):
    return x * hasattr(x, "__array_struct__")


def memory_as_bytes(x):
    return x * (len(bytes(x)) + len(memoryview(x + 1)))


def pickled(x):
    return x * (len(pickle.dumps(x)) > 0)


def through_dlpack(x):
    return x * (x.__dlpack_device__()[0] > 0)


@pytest.mark.parametrize("function", [data_pointer, array_struct, memory_as_bytes, pickled,
                                      through_dlpack])
def test_the_memory_of_a_traced_array_runs_eagerly_with_its_reason(function):
    f = run_calls(function, [(np.ones(3),)])
    no_internal_errors(f)
    assert "__array_interface__" in repr(f.stats()["eager_reasons"]), f.explain()


# --- container subclasses read from outside ---------------------------------------------------
class Config(dict):
    pass


class EasyDict(dict):
    __getattr__ = dict.__getitem__  # (its KeyError reached tracejit's getattr probes)


class AttributeConfig(dict):
    """Items and attributes both (set in ``__init__``)."""

    def __init__(self, **settings):
        super().__init__(**settings)
        for name, value in settings.items():
            setattr(self, name, value)


class Layers(list):
    pass


class OrderedConfig(collections.OrderedDict):
    pass


class Rewards(collections.deque):
    pass


def _fresh_state():
    global CONFIG, EASY, ATTRIBUTES, LAYERS, ORDERED, PARAMETERS, USER_DICT, USER_LIST
    global DEFAULTS, CHAINED, READ_ONLY, REWARDS
    CONFIG = Config(a=1.0)
    EASY = EasyDict(lr=0.1, n=2)
    ATTRIBUTES = AttributeConfig(lr=0.1)
    LAYERS = Layers([np.ones(2), 2 * np.ones(2)])
    ORDERED = OrderedConfig(a=1.0)
    PARAMETERS = EasyDict(W=np.ones(2), b=np.zeros(2))
    USER_DICT = collections.UserDict(a=1.0)
    USER_LIST = collections.UserList([1.0, 2.0])
    DEFAULTS = {"a": 1.0}
    CHAINED = collections.ChainMap({"b": 2.0}, DEFAULTS)
    READ_ONLY = types.MappingProxyType(DEFAULTS)
    REWARDS = Rewards([1.0, 2.0], maxlen=5)


_fresh_state()

def config_read_whole(x):
    return x * len(CONFIG) + CONFIG["a"] + sum(CONFIG.values())


def easy_dict_through_a_local(x):
    cfg = EASY
    return x * cfg.lr * cfg.n


def attributes_through_a_local(x):
    cfg = ATTRIBUTES
    return x * cfg.lr + cfg["lr"]


def layers_iterated(x):
    for W in LAYERS:
        x = x * W
    return x * len(LAYERS)


def ordered_read_whole(x):
    return x * len(ORDERED) + sum(ORDERED.values())


def parameters_iterated(x):
    return x * sum(p.sum() for p in PARAMETERS.values())


def user_containers_read_whole(x):
    return x * len(USER_DICT) + USER_DICT["a"] + len(USER_LIST) + sum(USER_LIST)


def views_of_a_dict_read_whole(x):
    return x * (len(CHAINED) + sum(CHAINED.values()) + len(READ_ONLY) + sum(READ_ONLY.values()))


def rewards_read_whole(x):
    return x * len(REWARDS) + sum(REWARDS)


CHANGES = {  # (read the globals when called: _fresh_state rebinds them)
    config_read_whole: lambda: CONFIG.update(b=2.0),
    easy_dict_through_a_local: lambda: EASY.update(lr=0.5),
    attributes_through_a_local: lambda: setattr(ATTRIBUTES, "lr", 0.5),
    layers_iterated: lambda: LAYERS.append(3 * np.ones(2)),
    ordered_read_whole: lambda: ORDERED.update(b=2.0),
    parameters_iterated: lambda: PARAMETERS["W"].__imul__(3.0),  # in place: an input
    user_containers_read_whole: lambda: (USER_DICT.update(b=2.0), USER_LIST.append(3.0)),
    views_of_a_dict_read_whole: lambda: DEFAULTS.update(c=3.0),  # seen through both
    rewards_read_whole: lambda: REWARDS.append(3.0),
}


@pytest.fixture
def restored():
    yield
    _fresh_state()


@pytest.mark.parametrize("function", list(CHANGES), ids=lambda function: function.__name__)
def test_a_container_subclass_read_from_outside_is_guarded_by_its_contents(function, restored):
    """A user subclass of dict, list or OrderedDict read from outside was guarded by
    nothing (not a plain object, not a container): compiled calls kept the trace's
    ``len()``, items and, through a local (``cfg = EASY; cfg.lr``), attributes. A
    ``UserDict`` / ``UserList`` was guarded by its class: ``len()`` reads its ``.data`` in
    the standard library, which the trace did not see; a ``ChainMap`` (its ``.maps``) and a
    ``MappingProxyType`` (guarded whole) too."""
    f = jitted(function)
    for call in range(4):
        if call == 2:
            CHANGES[function]()
        np.testing.assert_array_equal(f(np.ones(2)), function(np.ones(2)))
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()


class Scaled(dict):
    def __getitem__(self, key):
        return dict.__getitem__(self, key) * self.scale


SCALED = Scaled(a=1.0)
SCALED.scale = 10.0


def scaled_read_whole(x):
    return x * sum(SCALED[key] for key in SCALED)


def test_a_dict_subclass_with_its_own_getitem_runs_its_code():
    f = jitted(scaled_read_whole)
    try:
        for call in range(3):
            if call == 2:
                SCALED.scale = 3.0
            np.testing.assert_array_equal(f(np.ones(2)), scaled_read_whole(np.ones(2)))
    finally:
        SCALED.scale = 10.0
    no_internal_errors(f)


# --- identities of returned arrays -------------------------------------------------------------
def contiguous(x):
    return np.ascontiguousarray(x)


def contiguous_rows(x):
    return x * 2.0, np.ascontiguousarray(x[1:])


LAYOUTS = {"C": lambda base: base, "F": np.asfortranarray}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("function", [contiguous, contiguous_rows])
def test_returned_ascontiguousarray_is_numpys_array(function, layout):
    """``np.ascontiguousarray(x)`` of a C-contiguous argument is ``x`` itself in NumPy (a
    caller writing into the result changes ``x``), a C-ordered copy otherwise; compiled
    calls returned a copy always (and the traced call an F-ordered one)."""
    f = jitted(function)
    for _ in range(3):  # the trace, then compiled calls
        x_eager = LAYOUTS[layout](np.arange(12.0).reshape(3, 4))
        x = LAYOUTS[layout](np.arange(12.0).reshape(3, 4))
        want, got = function(x_eager), f(x)
        if isinstance(want, tuple):
            want, got = want[-1], got[-1]
        assert (got is x, np.shares_memory(got, x), got.flags.c_contiguous) == (
            want is x_eager, np.shares_memory(want, x_eager), want.flags.c_contiguous)
        got[-1, -1] = want[-1, -1] = -1.0  # the caller writes into the result
        np.testing.assert_array_equal(x, x_eager)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()


def updated_diagonal(x):
    x += 1.0
    return np.diagonal(x, 1), x.sum()


def test_returned_diagonal_of_an_updated_argument_is_numpys_view():
    """``np.diagonal`` was a gather: a writeable copy, blind to later writes into ``x``.
    Now the call returns NumPy's read-only view of the caller's (updated) array."""
    f = jitted(updated_diagonal)
    for _ in range(3):
        x_eager, x = np.arange(12.0).reshape(3, 4), np.arange(12.0).reshape(3, 4)
        (want, _), (got, _) = updated_diagonal(x_eager), f(x)
        assert (np.shares_memory(got, x), got.flags.writeable) == (
            np.shares_memory(want, x_eager), want.flags.writeable)
        x_eager[0, 1] = x[0, 1] = 50.0
        np.testing.assert_array_equal(got, want)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()


WEIGHTS = np.arange(12.0).reshape(3, 4)


def outside_results(x):
    return x * 2.0, np.diagonal(WEIGHTS), np.ascontiguousarray(WEIGHTS)


def test_diagonal_and_contiguous_of_an_outside_array_are_numpys():
    """Of an array read from outside, the same: ``np.ascontiguousarray(W)`` is ``W``, and
    ``np.diagonal(W)`` NumPy's read-only view of it (both were copies)."""
    f = jitted(outside_results)
    try:
        for _ in range(3):
            _, diagonal, contiguous = f(np.ones(2))
            assert contiguous is WEIGHTS and not diagonal.flags.writeable
            WEIGHTS[1, 1] += 1.0
            np.testing.assert_array_equal(diagonal, np.diagonal(WEIGHTS))
    finally:
        WEIGHTS[...] = np.arange(12.0).reshape(3, 4)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()


NEW_VIEW_FUNCTIONS = {
    "reshape": lambda x: np.reshape(x, x.shape),
    "moveaxis": lambda x: np.moveaxis(x, 0, 0),
    "swapaxes": lambda x: np.swapaxes(x, 1, 1),
}


@pytest.mark.parametrize("name", list(NEW_VIEW_FUNCTIONS))
def test_numpys_view_functions_return_another_array(name):
    """``np.reshape(x, x.shape)`` (``np.moveaxis(x, 0, 0)``, ...) is a new view in NumPy,
    but the trace's was ``x`` itself: ``y is x`` was True, a branch eager does not take."""
    view = NEW_VIEW_FUNCTIONS[name]

    def function(x):
        y = view(x)
        return (x + 1.0) if y is x else (x - 1.0)

    f = run_calls(function, [(np.ones((2, 3)),)])
    no_internal_errors(f)


def contiguous_is_the_argument(x):
    y = np.ascontiguousarray(x)
    return (x + 1.0) if y is x else (x - 1.0)


def test_ascontiguousarray_is_x_runs_eagerly():
    """NumPy's ``np.ascontiguousarray(x) is x`` is True for a C-contiguous ``x``; the trace
    holds a copy (compiled calls take either layout), so it answered False."""
    f = run_calls(contiguous_is_the_argument, [(np.ones((2, 3)),), (np.ones((3, 2)).T,)])
    no_internal_errors(f)
