"""Review 15 of this session's tracer changes: wrong answers found by eager-vs-compiled
probes, each a model run eagerly and through ``jit`` on the same arguments (results and
arguments afterwards agree), every call after the first compiled.

* 9f1e4c4 (writes through views): a view kept its root only by a weak reference, so once
  no name held the root (``buf = buf * 2``, ``del buf``) a write through one view no longer
  reached its sibling views, which NumPy's views (``.base`` keeps the root) do see.
* Found while probing 9f1e4c4's views kept in containers (older than this session:
  ``Hooks.update_item``): ``views[0] += x`` or ``d["a"] += 1.0`` on a NumPy array a list
  or dict made in the function holds stored a new array in the container, where NumPy
  updates that array in place (its base and every other name for it see the write).
* 9f1e4c4: after ``row = buf[0]; row += x`` into a NumPy buffer made in the function, a
  plain NumPy write through another name (``buf *= 2``, ``buf[1] = 7.0``, ``other[0] =
  1.0`` with ``other = buf[1]``) went into the NumPy memory the trace no longer reads
  (``Hooks.inplace``/``set_item``/``update_item`` looked up the buffer's traced copy by its
  own id only), so the result lacked it.
* Results NumPy returns as distinct arrays that compiled code returned as one object
  (``return x * 2, x * 2``: common-subexpression elimination merged them; fixed, see
  tests/tracer/test_result_identity.py), and appends of an argument's view, which eager
  appends as a view of the caller's array (4f4cafc; the traced call appended a copy).
"""

import numpy as np
import pytest
from real_model_checks import all_compiled, run_calls

import tracejit as tj


def rng_for(seed):
    return np.random.default_rng(seed)


def root_rebound(x):
    buf = x * 1.0
    row = buf[1]
    tail = buf[1, 1:]
    buf = buf * 2.0          # the old buf is now held by its views only
    row += 1.0               # NumPy: tail sees it, through the old buf
    return tail * 1.0, buf


def root_deleted(x):
    buf = x * 1.0
    rows = buf[1:]
    column = buf[:, 1]
    del buf
    rows *= 3.0
    return column * 1.0


@pytest.mark.parametrize("model", [root_rebound, root_deleted])
def test_sibling_views_see_a_write_after_no_name_holds_their_root(model):
    f = run_calls(model, [(rng_for(seed).standard_normal((3, 4)),) for seed in (1, 2)])
    assert all_compiled(f, 4), f.explain()


def list_of_views(x):
    buf = np.zeros((3, 4))
    views = [buf[0], buf[1]]
    views[0] += x            # into buf[0]
    views[1] -= 1.0          # a plain number: into buf[1] too
    return buf, views[0] * 1.0


def dict_of_arrays(x):
    state = {"m": np.zeros(4), "v": np.ones(4)}
    m, v = state["m"], state["v"]
    state["m"] += x          # m is the same array
    state["v"] *= 2.0
    return m * 1.0, v + x


@pytest.mark.parametrize("model", [list_of_views, dict_of_arrays])
def test_inplace_operator_on_a_numpy_array_a_list_or_dict_holds(model):
    f = run_calls(model, [(rng_for(seed).standard_normal(4),) for seed in (1, 2)])
    assert all_compiled(f, 4), f.explain()


def plain_writes_after_a_traced_one(x):
    buf = np.zeros((2, 3))
    other = buf[1]
    row = buf[0]
    row += x                 # buf is traced from here on
    buf *= 2.0               # plain NumPy operands: into the traced buf too
    buf[1, 0] += 1.0
    other[1:] = 7.0
    return buf, row * 1.0


def test_plain_writes_after_a_traced_write_through_a_view():
    f = run_calls(plain_writes_after_a_traced_one,
                  [(rng_for(seed).standard_normal(3),) for seed in (1, 2)])
    assert all_compiled(f, 4), f.explain()


def test_equal_results_are_distinct_arrays():
    f = tj.jit(lambda x: (x * 2.0, x * 2.0), cache="memory")
    f(np.ones(3))
    first, second = f(np.ones(3))
    assert not np.shares_memory(first, second)


class History:
    def __init__(self):
        self.rows = []

    def step(self, x):
        self.rows.append(x[1:])  # eager: a view of the caller's array
        return x.sum()


def test_appended_view_of_an_argument_shares_the_callers_memory():
    model = History()
    f = tj.jit(History.step, cache="memory")
    x = np.arange(4.0)
    f(model, x)
    f(model, x)
    assert all(np.shares_memory(row, x) for row in model.rows)
