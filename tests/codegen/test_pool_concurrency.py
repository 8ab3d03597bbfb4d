"""The native thread pool with several Python threads submitting at once.

Compiled calls release the GIL, so two threads can reach ``tj_parallel_for`` together.
The pool holds one job; a second submitter runs its own chunks on its thread, in order,
instead of overwriting the first job's fields (which gave both callers wrong results).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tracejit import jit
from tracejit.codegen.parallel import pool


def _scaled_tanh(x):
    return np.tanh(x) * 2.0 + 1.0


def test_big_kernels_from_many_threads_are_right():
    if pool().threads < 2:
        pytest.skip("one thread: kernels never use the pool")
    compiled = jit(cache="memory")(_scaled_tanh)
    inputs = [np.random.default_rng(index).standard_normal((512, 1024)) + index
              for index in range(8)]
    compiled(inputs[0])
    compiled(inputs[0])

    def run(x):
        return [np.allclose(compiled(x), _scaled_tanh(x), rtol=1e-12, atol=1e-12)
                for _ in range(20)]

    with ThreadPoolExecutor(max_workers=8) as executor:
        agreed = [ok for results in executor.map(run, inputs) for ok in results]
    assert all(agreed)
    assert not compiled.stats()["eager_calls"]
