"""np.broadcast_to gives a read-only view: a write into it (or into a view of it) raises
NumPy's ValueError eagerly, so compiled calls must raise it too. Before, the trace wrote
into it and compiled calls returned the written values."""

import numpy as np
import pytest
from real_model_checks import compiled_some, run_calls


def set_item(x):
    b = np.broadcast_to(x, (3, x.shape[0]))
    b[0, 0] = 5.0
    return b


def add_in_place(x):
    b = np.broadcast_to(x, (3, x.shape[0]))
    b += 1
    return b


def write_a_row_of_it(x):
    rows = np.broadcast_to(x, (2, x.shape[0]))
    row = rows[1]
    row[:2] = 0.0
    return rows


def write_its_transpose(x):
    b = np.broadcast_to(x, (2, x.shape[0])).T
    b[0, 0] = 1.0
    return b


def copy_into_it(x):
    b = np.broadcast_to(x, x.shape)  # the same shape: still a read-only view
    np.copyto(b, 2.0)
    return b


@pytest.mark.parametrize("model", [set_item, add_in_place, write_a_row_of_it,
                                   write_its_transpose, copy_into_it])
def test_writing_into_a_broadcast_view_raises_as_numpy_does(model):
    run_calls(model, [(np.arange(4.0),), (np.arange(5.0),)])


def read_it(x):
    b = np.broadcast_to(x, (3, x.shape[0]))
    return b.sum(axis=0) + b[1]


def test_reading_a_broadcast_view_compiles():
    compiled_some(run_calls(read_it, [(np.arange(4.0),), (np.arange(4.0) + 1,)]))
