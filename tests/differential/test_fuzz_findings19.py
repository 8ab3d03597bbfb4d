"""Findings of round 19c (hostile inputs, aliasing and state, and the newest features:
loop exits with and/or tests, counters, continue and return; user classes' operators;
containers passed in; bincount, linspace, ascontiguousarray): each a minimal program or
case, eager NumPy against ``jit``.
"""

import array
import collections
import linecache

import numpy as np
import pytest

import tracejit as tj


# --- an iterator passed as an argument ---------------------------------------------------
def scaled_by_next(x, values):
    return x * next(values)


def first_two_summed(x, values):
    total = x * 0
    for number, value in enumerate(values):
        if number == 2:
            break
        total = total + value * x
    return total


@pytest.mark.parametrize("make", [lambda: iter(range(10)), lambda: iter([1.5, 2.5, 3.5, 4.5]),
                                  lambda: (float(k) for k in range(10))],
                         ids=["range", "list", "generator"])
@pytest.mark.parametrize("function", [scaled_by_next, first_two_summed])
def test_an_iterator_argument_advances_at_every_call(make, function):
    """An iterator argument was a static leaf specialized by identity, so a second call
    passing the same iterator ran the program traced on the first call: ``next(values)``
    was the first call's value, folded as a constant (0.0 where eager's second call reads
    1.0), and the iterator did not advance. Read from outside, an iterator already runs
    eagerly (``frontend.load``); as an argument (or inside one) it does too now."""
    f = tj.jit(function, cache="memory")
    eager_values, jit_values = make(), make()
    for _ in range(2):
        np.testing.assert_array_equal(f(np.ones(2), jit_values),
                                      function(np.ones(2), eager_values))
    assert list(jit_values) == list(eager_values)  # consumed alike
    assert "iterator" in repr(f.stats()["eager_reasons"]), f.explain()


def test_an_iterator_inside_a_dict_argument_advances_at_every_call():
    def step(x, state):
        return x * next(state["schedule"])

    f = tj.jit(step, cache="memory")
    eager_state, jit_state = {"schedule": iter(range(5))}, {"schedule": iter(range(5))}
    for _ in range(3):
        np.testing.assert_array_equal(f(np.ones(2), jit_state), step(np.ones(2), eager_state))


# --- classes defined by exec(source, namespace) without __name__ ------------------------
ACCUMULATOR = '''
class Accumulator:
    def __init__(self, data):
        self.data = data

    def __iadd__(self, other):
        self.data = self.data + other
        return self

def accumulate(total, x):
    total += x
    return total.data * 2
'''


def exec_without_a_name(source):
    """``exec(source, {})``, as some tools load code: the classes it defines get
    ``__module__ == 'builtins'``. The source is in ``linecache`` (tracejit reads it)."""
    filename = "<fuzz-findings19-exec>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the test's own source
    return namespace


def test_an_object_of_a_class_exec_put_in_builtins_keeps_no_traced_value():
    """``total += x`` on an object passed in calls its ``__iadd__``, which sets
    ``total.data`` around the front end's hooks; ``attribute_writes.watch`` catches such a
    change after the trace and undoes it (the call runs eagerly). It skipped objects whose
    class is in 'builtins' (meant for int, str, functions), and a class defined by
    ``exec(source, {})`` is there too: the trace left a Tracer in ``total.data``, and every
    later call raised 'a traced value was used after its trace finished'."""
    namespace = exec_without_a_name(ACCUMULATOR)
    assert namespace["Accumulator"].__module__ == "builtins"
    accumulate, make = namespace["accumulate"], namespace["Accumulator"]
    f = tj.jit(accumulate, cache="memory")
    eager_total, jit_total = make(np.zeros(3)), make(np.zeros(3))
    for _ in range(3):
        np.testing.assert_array_equal(f(jit_total, np.ones(3)),
                                      accumulate(eager_total, np.ones(3)))
        assert type(jit_total.data) is np.ndarray
        np.testing.assert_array_equal(jit_total.data, eager_total.data)


# --- len() of one outside list in a call that appends to another -------------------------
class Layer:
    def __init__(self, history):
        self.history = history


def log_and_count(logger, other, x):
    logger.history.append(x * 2)
    return len(other.history) * x


def count_calls(function, change):
    """Five calls, ``other.history`` changed as ``change`` says from the third on: the
    results and the appended list's length at the end."""
    logger, other = Layer([np.zeros(2)]), Layer([np.zeros(2)])
    results = []
    for call in range(5):
        if call >= 2 and change == "grown":
            other.history.append(np.zeros(2))
        elif call == 2 and change == "rebound":
            other.history = [np.zeros(2)] * 4
        elif call == 2 and change == "shared":
            other.history = logger.history
        results.append(function(logger, other, np.ones(2)))
    return results, len(logger.history)


@pytest.mark.parametrize("change", ["grown", "rebound", "shared"])
def test_an_outside_lists_length_is_guarded_when_another_list_is_appended_to(change):
    """Once the call had appended to an outside list, ``frontend.load`` returned every list
    read from outside as ``list_appends.read_back`` gives it, before noting the path it was
    read through: ``len(other.history)`` was folded without a guard, so compiled calls
    returned the first call's length after ``other.history`` grew, was rebound to a longer
    list, or became the appended list itself (eager 2, 3, 4 where compiled calls gave 1)."""
    f = tj.jit(log_and_count, cache="memory")
    got, got_length = count_calls(f, change)
    want, want_length = count_calls(log_and_count, change)
    np.testing.assert_array_equal(got, want)
    assert got_length == want_length


# --- a set passed in and changed in place between calls ---------------------------------
def scaled_if_flagged(x, flags):
    if 1 in flags:
        x = x * 2
    return x * len(flags)


def scaled_by_config(x, config):
    return x * (2 if "double" in config["flags"] else 1)


@pytest.mark.parametrize("function, make, flag", [
    (scaled_if_flagged, lambda: {0}, 1),
    (scaled_by_config, lambda: {"flags": {"half"}}, "double"),
], ids=["argument", "in a dict argument"])
def test_a_set_argument_changed_in_place_is_a_new_variant(function, make, flag):
    """A set argument is a static leaf, and its entry check was ``leaf is <the set>``: the
    set the caller then changed in place (``flags.add(1)``) passed it, and compiled calls
    kept the trace's ``1 in flags`` and ``len(flags)`` (1.0 where eager gives 4.0). The
    check compares with a copy now, as a set read from outside is compared."""
    f = tj.jit(function, cache="memory")
    eager_argument, jit_argument = make(), make()
    for call in range(4):
        if call == 2:
            for argument in (eager_argument, jit_argument):
                (argument if type(argument) is set else argument["flags"]).add(flag)
        np.testing.assert_array_equal(f(np.ones(2), jit_argument),
                                      function(np.ones(2), eager_argument))


def scaled_by_length(x, samples):
    total = x * 0
    for sample in samples:
        total = total + sample
    return total * len(samples)


@pytest.mark.parametrize("make, grow", [
    (lambda: array.array("d", [1.0]), lambda samples: samples.append(2.0)),
    (lambda: collections.deque([np.ones(2)], maxlen=3), lambda samples: samples.append(
        np.full(2, 2.0))),
    (lambda: collections.deque([1.0]), lambda samples: samples.appendleft(2.0)),
], ids=["array.array", "deque of arrays", "deque of numbers"])
def test_a_sequence_argument_grown_in_place_is_a_new_variant(make, grow):
    """The identity check above, for an ``array.array`` or a ``collections.deque`` (a
    replay buffer) that grows between calls: compiled calls kept the trace's length (the
    items read are checked through their paths, their number was not). Now an
    ``array.array`` (and a deque of numbers) is compared with a copy, and a deque of
    arrays is checked for the same objects in it."""
    f = tj.jit(scaled_by_length, cache="memory")
    eager_samples, jit_samples = make(), make()
    for call in range(4):
        if call >= 2:
            grow(eager_samples)
            grow(jit_samples)
        np.testing.assert_array_equal(f(np.ones(2), jit_samples),
                                      scaled_by_length(np.ones(2), eager_samples))


# --- deques and array.arrays read from outside ------------------------------------------
class Agent:
    """A DQN-style agent: a replay memory and its rewards, held in attributes."""

    def __init__(self, memory):
        self.memory = memory
        self.rewards = array.array("d")

    def value(self, x):
        total = x * 0
        for item in self.memory:
            total = total + item
        return total * len(self.memory) + sum(self.rewards)


@pytest.mark.parametrize("item", [lambda call: float(call), lambda call: np.full(2, call)],
                         ids=["numbers", "arrays"])
def test_a_deque_and_an_array_array_read_from_outside_are_read_at_every_call(item):
    """A deque or an ``array.array`` read from outside was guarded by its class alone: the
    trace folded ``len(self.memory)``, ``sum(self.rewards)`` and the arrays the deque held,
    and compiled calls kept them while the agent's memory grew and moved on (maxlen).
    Now a deque is guarded as a list is (its length, its numbers), an ``array.array``
    (and a bytearray) by a copy, and a deque holding arrays runs eagerly (its arrays
    would be constants of the trace; a list's become inputs)."""
    agent, twin = Agent(collections.deque(maxlen=3)), Agent(collections.deque(maxlen=3))
    f = tj.jit(agent.value, cache="memory")
    for call in range(5):
        for each in (agent, twin):
            each.memory.append(item(call))
            each.rewards.append(0.5)
        np.testing.assert_array_equal(f(np.ones(2)), twin.value(np.ones(2)))


# --- containers of more settings than are guarded one by one -----------------------------
TABLE = {step: 1.0 / (1 + step) for step in range(100)}  # a learning-rate schedule
LAYERS = [{"scale": 1.0} for _ in range(100)]
PAIRS = [(1.0, 2.0) for _ in range(100)]


def scheduled_sum(x):
    total = 0.0
    for _, rate in TABLE.items():
        total += rate
    return x * total


def scales_summed(x):
    total = 0.0
    for layer in LAYERS:
        total += layer["scale"]
    return x * total


def products_summed(x):
    total = 0.0
    for first, second in PAIRS:
        total += first * second
    return x * total


@pytest.mark.parametrize("function, container, key, changed", [
    (scheduled_sum, TABLE, 80, -3.0),
    (scales_summed, LAYERS[90], "scale", 50.0),
    (products_summed, PAIRS, 90, (5.0, 5.0)),
], ids=["dict", "list of dicts", "list of tuples"])
def test_settings_past_the_guard_budget_are_compared_whole(function, container, key, changed):
    """``outside_inputs.note_contents`` guards at most ``CONTENT_LIMIT`` (64) settings one
    by one; past it, only a flat list or tuple of settings was compared whole. A dict of
    settings, or a list of dicts or tuples of settings, changed past the 64th setting
    kept the trace's sum in compiled calls. Such containers are compared whole (with a
    deep copy) now."""
    f = tj.jit(function, cache="memory")
    before = container[key]
    try:
        for call in range(4):
            if call == 2:
                container[key] = changed
            np.testing.assert_array_equal(f(np.ones(2)), function(np.ones(2)))
    finally:
        container[key] = before


# --- an OrderedDict of layers read from outside ------------------------------------------
class Scaling:
    def __init__(self, scale):
        self.W = np.eye(2) * scale

    def __call__(self, x):
        return x @ self.W


class Sequential:
    def __init__(self):
        self.layers = collections.OrderedDict(first=Scaling(1.0))

    def forward(self, x):
        for _, layer in self.layers.items():
            x = layer(x)
        return x * len(self.layers)


def test_an_ordered_dict_read_from_outside_is_guarded_by_its_keys():
    """A dict read from outside is guarded by its keys (and its settings), but the check
    was ``type(value) is dict``: an ``OrderedDict`` (a Sequential's layers) or a
    ``defaultdict`` was guarded by its class alone, and a layer added after the first
    compiled call was skipped by compiled calls (and ``len(self.layers)`` kept)."""
    model, twin = Sequential(), Sequential()
    f = tj.jit(model.forward, cache="memory")
    for call in range(4):
        if call == 2:
            model.layers["second"] = Scaling(3.0)
            twin.layers["second"] = Scaling(3.0)
        np.testing.assert_array_equal(f(np.ones(2)), twin.forward(np.ones(2)))


class CachingLayer:
    def __init__(self):
        self.cache = collections.OrderedDict(h=np.zeros(2))

    def forward(self, x):
        self.cache["h"] = x * 2
        return x + 1


def test_a_write_into_an_ordered_dict_attribute_leaves_no_traced_value():
    """``self.cache["h"] = h`` into a plain dict attribute is recorded (and compiled); into
    an ``OrderedDict`` it went straight into the caller's object, which then held the
    trace's Tracer (and compiled calls skipped the write). The write is caught now and the
    call runs eagerly."""
    layer, twin = CachingLayer(), CachingLayer()
    f = tj.jit(layer.forward, cache="memory")
    for call in range(3):
        x = np.full(2, float(call))
        np.testing.assert_array_equal(f(x), twin.forward(x))
        assert type(layer.cache["h"]) is np.ndarray
        np.testing.assert_array_equal(layer.cache["h"], twin.cache["h"])


class Regularized:
    def __init__(self):
        self.params = collections.OrderedDict(W=np.ones(2), b=np.zeros(2))

    def penalty(self, x):
        total = 0.0
        for _, param in self.params.items():
            total = total + (param ** 2).sum()
        return x * total


def test_arrays_in_an_ordered_dict_read_from_outside_are_inputs():
    """Arrays in a plain dict read from outside are graph inputs (``with_inputs``), those
    in an ``OrderedDict`` were constants of the trace: an optimizer's in-place update of
    ``self.params["W"]`` between calls was missed by compiled calls (2.0 where eager
    gives 18.0). ``with_inputs`` rebuilds OrderedDicts and defaultdicts too now."""
    model, twin = Regularized(), Regularized()
    f = tj.jit(model.penalty, cache="memory")
    for call in range(4):
        if call == 2:
            model.params["W"] *= 3
            twin.params["W"] *= 3
        np.testing.assert_array_equal(f(np.ones(2)), twin.penalty(np.ones(2)))


VOCAB_COUNTS = collections.Counter(a=1)


def scaled_by_the_vocabulary(x):
    return x * len(VOCAB_COUNTS) + sum(VOCAB_COUNTS.values())


def test_a_counter_read_from_outside_is_guarded_by_its_contents():
    """A ``collections.Counter`` read from outside was guarded by its class alone (not
    among the mappings guarded by keys and settings), so after ``VOCAB_COUNTS.update(b=2)``
    compiled calls kept the trace's ``len()`` and sum."""
    f = tj.jit(scaled_by_the_vocabulary, cache="memory")
    try:
        for call in range(4):
            if call == 2:
                VOCAB_COUNTS.update(b=2)
            np.testing.assert_array_equal(f(np.ones(2)), scaled_by_the_vocabulary(np.ones(2)))
    finally:
        VOCAB_COUNTS.clear()
        VOCAB_COUNTS.update(a=1)
