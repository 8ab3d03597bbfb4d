"""The schedule alone decides which values get buffers: lowering emits what it is given
and meets no value it cannot inline (``FusionConflict`` is an internal error; nothing
reschedules).

The cases lowering used to reject, found by logging every conflict over the differential
corpus and the codegen tests: a row reduction (a *stage*: one value per row) that the
kernel reading it would read along the row. The schedule now gives it a kernel of its
own up front (``_Scheduler._read_per_row``):

* a keepdims reduction over an axis of length 1: ``log_softmax`` of an ``(n, 1)`` matrix
  (the corpus's ``log_softmax_pair``) - the unit dim meets the root's unit dim, so the
  row loop's index reaches the reduction;
* row sums broadcast along the rows of a square matrix (``x - x.sum(axis=1)``): read by
  column.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import codegen, nn, tracer
from tracejit.codegen import schedule as schedule_module
from tracejit.codegen.kernel_index import FusionConflict


def _log_softmax_by_hand(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


# name: (function, example shape, sizes to run, kernel kinds)
CASES = {
    "log_softmax of one column": (lambda x: nn.log_softmax(x, axis=-1), (6, 1),
                                  [(5, 1), (8, 1)], ["reduce", "reduce", "pointwise"]),
    "log_softmax by hand, one column": (_log_softmax_by_hand, (6, 1), [(5, 1), (8, 1)],
                                        ["reduce", "reduce", "pointwise"]),
    "row sums read by column": (lambda x: np.exp(x - x.sum(axis=1)), (5, 5),
                                [(5, 5)], ["reduce", "pointwise"]),
    "row max read by column, row sum by row": (
        lambda x: (x - x.max(axis=1)) / x.sum(axis=1, keepdims=True), (4, 4), [(4, 4)],
        ["reduce", "pointwise"]),
}


def _program(function, shape):
    example = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return codegen.compile(tracer.trace(function, example, dynamic=True).graph)


@pytest.mark.parametrize("name", list(CASES))
def test_reduction_read_along_its_row_gets_its_own_kernel(name):
    function, shape, sizes, kinds = CASES[name]
    program = _program(function, shape)
    assert [kernel.kind for kernel in program.kernels] == kinds
    for seed, size in enumerate(sizes):
        x = np.random.default_rng(seed + 1).standard_normal(size).astype(np.float32)
        (actual,) = program(x)
        np.testing.assert_allclose(actual, function(x), rtol=2e-6, atol=2e-6)


def test_a_case_the_schedule_misses_fails_loudly(monkeypatch):
    """Without the schedule's check, lowering meets the stage read along its row and
    raises (an internal error) instead of compiling something else."""
    monkeypatch.setattr(schedule_module._Scheduler, "_read_per_row",
                        lambda self, var, root, inlined, axes: True)
    with pytest.raises(FusionConflict, match="cannot be inlined"):
        _program(_log_softmax_by_hand, (6, 1))
