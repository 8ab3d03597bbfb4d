"""Adversarial review of round 21's landed commits (since 4938d31): course-style training
loops (e91c84e: dict carries, appends under an index test, constant-count list buffers),
one array passed for several arguments (4e85a5d), results rebuilt per call (b4a671b,
78355a9, db041a7, e4b35b4, 2a5a7a6) and the generated result plan (ba9dec6). Each test
here failed before its fix; each call is compared with eager NumPy (results, types,
dtypes, the arguments afterwards) as in ``test_adversarial_real_models21.py``.

Findings, fixed:

* Wrong results (e91c84e, and older): a list appended to in a loop of a constant trip
  count of 32 or more at exact shapes (``for i in range(40): snaps.append(w)``) got a
  buffer that is a constant of the graph, and the loop driver wrote the rows into it in
  place, taking it for a fresh array of its own: every compiled call returned rows of that
  one array, so the lists an earlier call returned changed under the caller at the next
  call. The oldest loop idiom did the same since loops ran compiled code (fd70aec): ``out
  = np.zeros((40, 3)); for t in range(40): out[t] = x * t; return out`` returned one array
  at every call (``codegen/loops.py``: a constant is never written in place).
* Wrong results (4e85a5d): a first call passing one array for several arguments to a
  function that writes into one (``a += 1`` or ``v = a[:2]; v += 1``, ``np.add(a, 1,
  out=a)``, then reads ``b``) is traced now; the trace wrote its values into the array,
  and then the call ran again eagerly (the program refuses such calls): the write was
  done twice. Such a trace leaves the caller's arrays alone (``trace(effects=False)``).
* Crash and wrong results (the class of e4b35b4): a returned iterator was handed back as
  the trace left it at every compiled call: a generator over the call's arrays raised 'a
  traced value was used after its trace finished', ``iter([x, 2 * x])`` yielded the
  trace's stand-ins, and a generator over ints was empty from the second call on (the
  first caller used it up). Such a call runs eagerly
  (``unrepeatable_results.refuse_traced_callable``).
* Wrong result (78355a9): a dict from outside the call four containers deep in the result
  (``return loss, {"layers": [(name, layer.params)]}``) came back a copy where NumPy
  returns the model's dict itself (the walk stopped at three levels); every level is
  looked at now (``unrepeatable_results.refuse_outside_containers``).
* Wrong results (b4a671b): results that are an array made in the call and views of it
  share memory as NumPy's do from the second call on only where the view is a slice of
  two elements or more: ``t[:1]`` (``view_writes.index_in`` gave up on a view of one
  element), ``t.ravel()``, ``t.reshape(-1)`` and ``t.T`` came back arrays of their own, so
  a write into one result no longer showed in the other
  (``result_identity.constant_views``).
"""

import numpy as np
from real_model_checks import assert_same, jitted, no_internal_errors

F64 = dict(rtol=1e-10, atol=1e-12)


# --- a list's buffer at a constant trip count ----------------------------------------------
def snapshots(x, steps):
    snaps = []
    w = x.copy()
    for i in range(steps):
        w = w * 0.9 + 0.1
        if i % 5 == 0:
            snaps.append(w)
    return snaps


def every_step(x, steps):
    snaps = []
    w = x.copy()
    for _ in range(steps):
        w = w * 0.9 + 0.1
        snaps.append(w)
    return snaps


def filled_rows(x, steps):
    out = np.zeros((40, 3))
    for t in range(40):
        out[t] = x * t
    return out


def test_results_of_earlier_calls_keep_their_rows():
    """Before the fix the first two calls' results held the third call's rows."""
    for function in (snapshots, every_step, filled_rows):
        f = jitted(function)
        inputs = [np.arange(3.0) + shift for shift in range(3)]
        results = [(f(x, 40), function(x, 40)) for x in inputs]
        for got, want in results:
            assert_same(got, want, **F64)
        no_internal_errors(f)


# --- one array passed for several arguments, written into ----------------------------------
def bump_a_view(a, b):
    v = a[:2]
    v += 1.0
    return a.sum() + b.sum()


def bump_by_out(a, b):
    np.add(a, 1.0, out=a)
    return b * 2


def test_a_first_call_passing_one_array_twice_writes_once():
    """Before the fix the first call's result and ``x`` held the write twice."""
    for function in (bump_a_view, bump_by_out):
        f = jitted(function)
        for shared in (True, True, False, True):
            x, y = np.arange(9.0).reshape(3, 3), np.arange(9.0).reshape(3, 3)
            got = f(x, x) if shared else f(x, x + 1)
            want = function(y, y) if shared else function(y, y + 1)
            assert_same(got, want, **F64)
            assert_same(x, y, where="the argument after the call", **F64)
        no_internal_errors(f)


# --- returned iterators ----------------------------------------------------------------------
def scaled_copies(x):
    return (x * i for i in range(3))


def with_positions(x):
    return x * 2, (i for i in range(3))


def both_arrays(x):
    return iter([x, x * 2])


def test_returned_iterators_are_the_calls_own():
    """Before the fix: a TraceError, an empty generator at the second call, Tracers."""
    for function in (scaled_copies, with_positions, both_arrays):
        f = jitted(function)
        for shift in (0.0, 1.0, 1.0):
            x = np.arange(3.0) + shift
            got, want = f(x), function(x)
            if isinstance(want, tuple):
                got, want = (got[0], list(got[1])), (want[0], list(want[1]))
            assert_same(list(got), list(want), **F64)
        no_internal_errors(f)


# --- a model's dicts deep in the result ------------------------------------------------------
class TwoLayers:
    def __init__(self):
        self.layers = [{"W": np.eye(3) * 0.5}, {"W": np.eye(3) * 2.0}]

    def report(self, x):
        h = self.layers[1]["W"] @ np.tanh(self.layers[0]["W"] @ x)
        return float(h @ h), {"layers": [(str(k), layer) for k, layer in enumerate(self.layers)]}


def test_a_models_dict_deep_in_the_result_is_the_models_own():
    """Before the fix the dicts in the result were copies (identity lost)."""
    eager_model, model = TwoLayers(), TwoLayers()
    f = jitted(model.report)
    for shift in (0.0, 1.0, 1.0):
        x = np.arange(3.0) + shift
        got, want = f(x), eager_model.report(x)
        assert_same(got, want, **F64)
        for (_, layer), own in zip(got[1]["layers"], model.layers):
            assert layer is own
    no_internal_errors(f)


# --- views of an array made in the call --------------------------------------------------------
def first_and_all(x):
    t = np.full(3, 2.0)
    return t, t[:1], x + 1


def flat_and_square(x):
    t = np.arange(4.0).reshape(2, 2)
    return t.ravel(), t, x * 2


def grid_views(x):
    t = np.arange(6.0).reshape(2, 3)
    return t.T, t[0], t.reshape(-1), x - 1


def test_results_viewing_an_array_made_in_the_call_share_memory_at_every_call():
    """Before the fix the second and later calls' views were arrays of their own."""
    for function in (first_and_all, flat_and_square, grid_views):
        f = jitted(function)
        for shift in (0.0, 1.0, 2.0):
            x = np.arange(3.0) + shift
            got, want = f(x), function(x)
            assert_same(got, want, **F64)
            arrays = range(len(want) - 1)  # (the last result is no view)
            for first in arrays:
                for second in arrays:
                    assert np.shares_memory(got[first], got[second]) == np.shares_memory(
                        want[first], want[second]), (function.__name__, first, second)
        no_internal_errors(f)
