"""Round 25 (helper-202): loops that skip and leave on data, triangular nests, lists stacked
after a loop, dict state, writes through views of carried buffers, integer edges, NaN
through selections, ties and running reductions, guard-flipping call sequences.

``fuzz25.py`` (beside ``fuzz23.py`` and ``fuzz24.py``) writes whole functions with their own
argument makers: ``skip_loops`` (``continue`` and ``break`` on data in ``for`` and
``while``), ``triangular`` (inner trip counts of the outer index), ``stacked_lists``
(appends then ``np.stack``/``concatenate``/``array``/``sum``), ``dict_state`` (a dict of
state updated by key in a loop), ``carried_views`` (a loop's buffer written through a view
of it), ``int_edges`` (wrapping arithmetic, division and modulo by zero, shifts),
``nan_select`` (``where``/``select``/``clip`` with NaN in operands and bounds), ``ties``
(``argmax``/``argsort``/``unique`` on tied data, ``cumsum``/``cumprod``, ``einsum``) and
``guard_flip`` (one function called with inputs taking each branch in turn, sizes 0/1/
primes, prints compared). Found:

* ``np.concatenate`` of one 0-d array (a loop appending ``h.sum()`` that ran once) returned
  the value where NumPy raises ``ValueError: zero-dimensional arrays cannot be
  concatenated`` (two or more 0-d arrays raised already);
* ``jit(loss)`` of a Tensor through a triangular nest writing an ndarray buffer (``h[i] =
  h[i] + np.tanh(x[j] @ w) / (i + 1)`` for ``j in range(i + 1)``) raised TensorError from
  the second length on: the captured nest's reverse was refused (the inner loop's backward
  changes shape by outer trip) and the eager run cannot write a Tensor into an ndarray.
  A trace whose loop reverse mode refuses (``errors.NotReversible``) is traced again with
  loops unrolled.

``test_fuzz25_sample`` runs a seeded sample of the generators.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import fuzz23  # noqa: E402 - beside this file
import fuzz25  # noqa: E402


def _agree(function, *calls, rtol=1e-12):
    return fuzz23.agree(function, *calls, rtol=rtol)


# --- np.concatenate of one 0-d array -------------------------------------------------------------
def concatenated_sums(x, n):
    items = []
    for i in range(n):
        items.append(x[i].sum())
    return np.concatenate(items)


@pytest.mark.parametrize("function", [
    concatenated_sums,
    lambda x, n: np.concatenate([x[0].sum()]),
    lambda x, n: np.concatenate((x[n].max(),), axis=None),
    lambda x, n: np.concatenate([x[0].sum()], axis=0),
], ids=["loop", "list", "axis_none", "axis_0"])
def test_concatenate_of_one_zero_d_array_raises_as_numpy(function):
    x = np.arange(10.0).reshape(5, 2)
    _agree(function, (x, 1), (x, 2), (x, 1), (x, 0), (x, 3), (x, 1))


# --- gradients through a triangular nest -------------------------------------------------------
def triangular_loss(w, x):
    h = np.zeros((len(x), w.shape[1]))
    for i in range(len(x)):
        for j in range(i + 1):
            h[i] = h[i] + np.tanh(x[j] @ w) / (i + 1)
    return np.mean(h)


def test_a_loop_reverse_mode_cannot_reverse_is_unrolled_for_gradients():
    """Lengths after the first are dynamic: the nest was captured, its reverse refused (the
    inner loop's backward differs by outer trip), and the call ran eagerly, where writing
    a Tensor into the ndarray ``h`` raises TensorError. The trace is retried with loops
    unrolled: every length compiles, gradients equal eager value_and_grad's."""
    import tracejit as tj

    compiled = tj.jit(triangular_loss, cache="memory")
    rng = np.random.default_rng(0)
    for n in [3, 3, 5, 7, 2, 5]:
        w, x = rng.standard_normal((2, 3)), rng.standard_normal((n, 2))
        want_value, want_grad = tj.value_and_grad(triangular_loss)(w, x)
        tensor = tj.tensor(w, requires_grad=True)
        value = compiled(tensor, x)
        value.backward()
        np.testing.assert_allclose(float(value.numpy()), want_value, rtol=1e-12)
        np.testing.assert_allclose(tensor.grad.numpy(), want_grad, rtol=1e-10, atol=1e-14)
    stats = compiled.stats()
    assert stats["compiled_calls"] == 6 and not stats["eager_calls"], compiled.explain()
    assert "loops unrolled for gradients" in compiled.explain()


# --- the generators' sample ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("family", sorted(fuzz25.FAMILIES))
def test_fuzz25_sample(family, seed):
    program = fuzz25.draw(25_000 + seed, [family])
    assert fuzz25.check(program) is None, program.source
