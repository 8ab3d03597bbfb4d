"""Results of the type NumPy gives where Python's would differ: ``bool_array ** 2`` is
int8 (NumPy's ``**`` squares), ``np.prod(x.shape[1:])`` of dynamic dims an np.int64 while
it stays a dim for ``reshape``."""

import numpy as np
from real_model_checks import jitted, no_internal_errors, run_calls


def squared(mask, p):
    return mask ** p, mask ** 3, mask[0] ** 2, mask ** 2.0


def test_a_bool_array_squared_is_int8_also_for_a_run_time_exponent():
    mask = np.array([True, False, True])  # (int8 has no compiled code: eager, said so)
    run_calls(squared, [(mask, 2), (mask, 3), (mask, 2), (mask, 4)])


def flatten(x):
    n = np.prod(x.shape[1:])
    return x.reshape(x.shape[0], n), n, np.sum(x.shape), np.max(x.shape[1:]), np.min(x.shape)


def test_numpy_reductions_of_dims_are_numpy_ints_and_stay_dims():
    f = run_calls(flatten, [(np.ones((n, 3, m)),) for n, m in ((2, 4), (3, 5), (4, 6))],
                  dynamic=True)
    no_internal_errors(f)
    g = jitted(_flattened, dynamic=True)
    g(np.ones((5, 3, 6)))
    g(np.ones((7, 3, 8)))  # the same buckets: n is a dim, one program serves both
    assert g.stats()["compiles"] == 1, g.stats()


def _flattened(x):
    n = np.prod(x.shape[1:])
    return x.reshape(x.shape[0], n) * 2, n
