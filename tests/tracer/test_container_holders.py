"""Who else holds a list or dict a captured loop fills (``tracer/container_holders.py``).

A captured loop binds the name of the list it fills to a new stacked list; any other
holder of the list made before the loop kept iteration 0's entry alone on compiled calls.
Holders the garbage collector does not track were not seen: a NumPy object array
(``kept[0] = hist``), a ``slice``; nor a tuple of exactly the carried values in their
order (a default argument ``def size(h=hist)`` of a loop carrying ``hist`` alone; ``pair =
(hist, x)``), taken for the machinery's own copy; nor the cell of another function's
closure (``size = make_getter(hist)``, a callback), taken for the loop's own. Each ran
compiled with a wrong length (eager n). Holders are now read from the reference count
(each of the machinery's references verified, the rest a holder); the first test of each
pair fails before.

Found on the way (callbacks, weakrefs): a closure a factory made over the function's own
list (``log = make_logger(hist)``) appended as if to outside state (replayed by compiled
calls on the first call's list; the trace's ``len(hist)`` missed it), and so did one over
an argument's list (``log = make_logger(model["history"])``: now refused, eager); calling a
weakref to a list subclass was an internal error (hashing it hashes the referent); and a
dict a captured loop filled, read at ``hs[n - 1]`` with ``n`` an int argument, was an
internal error.
"""

import sys
import threading
import weakref

import numpy as np
from real_model_checks import no_internal_errors, run_calls

import tracejit as tj
from tracejit.tracer import container_holders
from tracejit.tracer.container_holders import held_elsewhere

COUNTS = [(np.arange(3.0), n) for n in (10, 12, 15, 0, 1, 13)]


def kept_in_an_object_array(x, n):
    hist = []
    kept = np.empty(1, dtype=object)
    kept[0] = hist
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return len(kept[0]), kept[0][-1:]


def kept_in_a_0d_object_array(x, n):
    hist = []
    kept = np.empty((), dtype=object)
    kept[()] = hist
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return len(kept[()])


def steps_kept_in_an_object_array(x, n):
    hs = {}
    kept = np.empty(2, dtype=object)
    kept[1] = hs
    for t in range(n):
        x = x * 0.5
        hs[t] = x
    return len(kept[1])


def kept_in_a_slice(x, n):
    hist = []
    kept = slice(hist, None)
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return len(kept.start)


def read_by_a_default_argument(x, n):
    hist = []  # the loop carries hist alone: the defaults tuple is (hist,)

    def size(h=hist):
        return len(h)

    for i in range(n):
        hist.append(x * i)
    return size()


def kept_in_a_pair_in_carried_order(x, n):
    hist = []
    pair = (hist, x)
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return len(pair[0])


def _make_getter(h):
    return lambda: len(h)


def read_by_a_callback(x, n):
    hist = []
    size = _make_getter(hist)  # its cell holds the list
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return size()


def test_a_list_held_where_the_garbage_collector_does_not_look_keeps_every_entry():
    for function in (kept_in_an_object_array, kept_in_a_0d_object_array,
                     steps_kept_in_an_object_array, kept_in_a_slice):
        run_calls(function, COUNTS)


def test_a_tuple_of_exactly_the_carried_values_is_a_holder():
    for function in (read_by_a_default_argument, kept_in_a_pair_in_carried_order):
        run_calls(function, COUNTS)


def test_another_functions_cell_is_a_holder():
    run_calls(read_by_a_callback, COUNTS)


# --- the other side: lists only the loop holds are still captured ------------------------
def halvings(x, n):
    hist = []
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return hist


def halvings_read_by_a_nested_function(x, n):
    hist = []  # a cell: the nested function reads the name, which the loop rebinds

    def size():
        return len(hist)

    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return size(), hist


def halvings_by_step(x, n):
    hs = {}
    for t in range(n):
        x = x * 0.5
        hs[t] = x
    return hs


def halvings_every_other(x, n):
    hist = []
    for i in range(0, n, 2):  # noqa: B007 - strided: run as a loop over its trip number
        x = x * 0.5
        hist.append(x.sum())
    return hist


def test_a_list_only_the_loop_holds_is_captured():
    for function in (halvings, halvings_read_by_a_nested_function, halvings_by_step,
                     halvings_every_other):
        f = run_calls(function, [(np.arange(3.0), n) for n in (10, 12, 15, 13)])
        stats = f.stats()
        assert stats["compiles"] <= 2 and stats["compiled_calls"] >= 4, (function.__name__,
                                                                          stats)
        assert not any("also held" in line for line in f.explain().splitlines())


# --- the count's edges, on held_elsewhere itself ------------------------------------------
def test_the_frames_own_local_or_cell_is_the_loops():
    def local():
        hist = []
        return held_elsewhere(["hist"], (hist,), locals(), local.__code__)

    def cell():
        hist = []
        size = lambda: len(hist)  # noqa: E731, F841 - makes hist a cell
        return held_elsewhere(["hist"], (hist,), locals(), cell.__code__)

    assert local() is None
    assert cell() is None


def test_a_dict_the_machinery_made_allows_no_frame_reference():
    # frame_code None (the dict is not the frame's locals()): the caller's own local name
    # is a holder the count cannot tell from an object array's slot
    hist = []
    assert "does not track" in held_elsewhere(["hist"], (hist,), {"hist": hist})
    assert held_elsewhere(["hist"], ([],), {}) is None  # the values' tuple alone
    values = ([],)
    assert held_elsewhere(["hist"], values, {"hist": values[0]}) is None


def test_an_earlier_attempts_tuple_is_the_machinerys():
    before = ([],)
    after = (before[0],)
    assert held_elsewhere(["hist"], after, {}, machinery=(before,)) is None
    assert "held by a tuple" in held_elsewhere(["hist"], after, {})


def test_a_default_argument_a_generator_and_a_bound_method_are_holders():
    def defaults():
        hist = []

        def size(h=hist):
            return len(h)

        return held_elsewhere(["hist"], (hist,), locals(), defaults.__code__)

    def generator():
        hist = []

        def count(h):
            yield len(h)

        running = count(hist)  # noqa: F841 - suspended before its first line: holds h
        return held_elsewhere(["hist"], (hist,), {"hist": hist}, generator.__code__)

    def bound_method():
        hist = []
        add = hist.append  # noqa: F841
        return held_elsewhere(["hist"], (hist,), {"hist": hist}, bound_method.__code__)

    assert "held by a tuple" in defaults()  # size.__defaults__
    assert "held by a generator" in generator()
    assert "held by a builtin_function_or_method" in bound_method()


def test_another_threads_running_frame_is_a_holder():
    hist = []
    handed = [hist]
    ready, done = threading.Event(), threading.Event()

    def worker():
        kept = handed.pop()  # noqa: F841 - only this running frame holds it now
        ready.set()
        done.wait(30)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        ready.wait(30)
        assert "does not track" in held_elsewhere(["hist"], (hist,), {"hist": hist},
                                                  sys._getframe().f_code)
    finally:
        done.set()
        thread.join()
    assert held_elsewhere(["hist"], (hist,), {"hist": hist}, sys._getframe().f_code) is None


def test_a_callers_frame_is_a_holder():
    def fill(hist):
        return held_elsewhere(["hist"], (hist,), locals(), fill.__code__)

    def caller():
        hist = []
        return fill(hist)  # caller's local: a running frame, not tracked

    assert "does not track" in caller()


def test_held_elsewhere_keeps_one_reference_of_its_own():
    # a comprehension or lambda reading `value` there makes it a cell, which get_referrers
    # shows as a holder of every list; the count of our own references assumes a local
    code = held_elsewhere.__code__
    assert "value" in code.co_varnames and not code.co_cellvars
    assert container_holders._OWN_REFERENCES == container_holders._own_references()


def test_explain_names_the_untracked_holder():
    f = tj.jit(kept_in_an_object_array, cache="memory")
    f(np.arange(3.0), 10)
    assert "does not track" in f.explain()


class History(list):
    """A list subclass (a weakref needs one): the loop does not capture it as a list."""


def read_through_a_weakref(x, n):
    hist = History()
    seen = weakref.ref(hist)
    for i in range(n):  # noqa: B007
        x = x * 0.5
        hist.append(x.sum())
    return len(seen()), list(hist)


def test_a_weakref_called_in_the_function_is_no_internal_error():
    # calling it hashed the weakref (call's table lookups), which hashes its referent: an
    # internal error, TypeError: unhashable type: 'History'
    f = run_calls(read_through_a_weakref, COUNTS[:3])
    no_internal_errors(f)


# --- a callback made by a factory, appending to the function's own list -----------------
def _make_logger(h):
    def log(value):
        h.append(value)
    return log


def logged_through_a_callback(x, n):
    hist = [x.sum()]
    log = _make_logger(hist)
    for i in range(n):  # noqa: B007
        x = x * 0.5
        log(x.max())
    log(x.min())
    return len(hist), hist[-1]


def test_a_callback_appending_to_the_functions_own_list():
    # the closure's list was taken for outside state (a closure variable no frame of the
    # call holds as its cell): its appends were left to compiled calls to replay, on the
    # first call's list, and the trace's len(hist) was 1
    run_calls(logged_through_a_callback, [(np.arange(3.0), n) for n in (0, 1, 3)])


def logged_into_the_arguments_list(x, model):
    hist = model["history"]
    log = _make_logger(hist)  # a closure this call made, over the argument's list
    log(x.sum())
    return len(hist)


def test_a_callback_made_in_the_call_appending_to_an_arguments_list():
    # its append was recorded for compiled calls to replay through the closure's cell (made
    # anew at every call: the replay went to the first call's list) and the trace's own
    # len(hist) missed it (eager 1, 2, 3; traced 0, 1, 2)
    run_calls(logged_into_the_arguments_list, [(np.arange(3.0), {"history": [1.0]})] * 3)


# --- a dict a captured loop filled, read at a key computed from an int argument ----------
def last_step(x, n):
    hs = {}
    for t in range(n):
        x = x * 0.5
        hs[t] = x
    return hs[n - 1]


def test_a_stacked_dict_read_at_a_traced_int_key():
    # n - 1 is a traced int (n a Python int argument): StackedDict looked it up in the dict
    # of keys set before the loop, KeyError, an internal error at every call; now its value
    # (guarded, as hashing it as a dict key does eagerly): one program per n
    f = run_calls(last_step, [(np.arange(3.0), n) for n in (10, 12, 15, 1, 0)])
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 3
