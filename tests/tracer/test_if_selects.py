"""``if`` on traced data whose branches only store into arrays compiles as a select
(``tracer/if_selects.py``): one compiled program for every input's pattern of branches,
where each pattern was a path of its own (a compile per image in a from-scratch CNN).

Each model runs eagerly and through ``jit`` on the same arguments; every call must run
compiled code (a silent eager fallback fails), and compiles are counted.
"""

import numpy as np
import pytest
from real_model_checks import all_compiled, run_calls


def rng_for(seed):
    return np.random.default_rng(seed)


def max_pool_backward(last_input, d_out):
    """Zhou's cnn-from-scratch MaxPool2.backprop, written with range loops: the gradient
    goes to the element equal to its window's max."""
    d_input = np.zeros(last_input.shape)
    h, w, _ = last_input.shape
    for i in range(h // 2):
        for j in range(w // 2):
            im_region = last_input[i * 2:i * 2 + 2, j * 2:j * 2 + 2]
            rh, rw, f = im_region.shape
            amax = np.amax(im_region, axis=(0, 1))
            for i2 in range(rh):
                for j2 in range(rw):
                    for f2 in range(f):
                        if im_region[i2, j2, f2] == amax[f2]:
                            d_input[i * 2 + i2, j * 2 + j2, f2] = d_out[i, j, f2]
    return d_input


def test_a_max_pool_backward_compiles_once_for_every_pattern_of_branches():
    def make(seed):
        r = rng_for(seed)
        x = r.standard_normal((4, 4, 2))
        if seed % 2:
            x = np.round(x)  # ties: several elements equal to a window's max
        return x, r.standard_normal((2, 2, 2))

    f = run_calls(max_pool_backward, [make(seed) for seed in range(4)], repeats=1)
    assert all_compiled(f, 4), f.explain()
    assert f.stats()["compiles"] == 1, f.explain()


def clip_both_ways(x, low, high):
    out = np.zeros(x.shape, dtype=np.int64)
    for i in range(x.shape[0]):
        if x[i] > high:
            out[i] = 1
        else:
            out[i] = -1
        if x[i] < low:
            out[i] = 2 * out[i] + 0.7  # a float into an int array: truncated, as NumPy does
    return out


def test_if_and_else_stores_and_an_int_destination():
    r = rng_for(3)
    sets = [(np.array([np.nan, -1.0, 0.5, 2.0, 0.0]), -0.5, 1.0),
            (r.standard_normal(5), 0.0, 0.0), (r.standard_normal(5), -2.0, 2.0)]
    f = run_calls(clip_both_ways, sets, repeats=1)
    assert all_compiled(f, 3), f.explain()


def store_past_the_end_when_false(x, idx):
    out = np.zeros(3)
    if x[0] > 0:
        out[idx] = x[1]  # idx is 5: NumPy raises only when the branch runs
    return out


@pytest.mark.parametrize("first", [-1.0, 1.0])
def test_a_store_that_raises_in_the_branch_numpy_skips_runs_as_numpy_does(first):
    run_calls(store_past_the_end_when_false, [(np.array([first, 2.0]), np.int64(5))])


def not_a_store(x, log):
    out = np.zeros(2)
    if x[0] > 0:
        out[0] = x[1]
        log.append(1)  # a call: the if stays a guard
    return out, len(log)


def test_branches_that_do_more_than_store_keep_their_guard():
    run_calls(not_a_store, [(np.array([1.0, 2.0]), []), (np.array([-1.0, 2.0]), [])])


def array_condition(x):
    out = np.zeros(2)
    if x > 0:  # a 2-element condition: NumPy's ValueError
        out[0] = 1.0
    return out


def test_a_condition_that_is_no_single_bool_raises_as_numpy_does():
    run_calls(array_condition, [(np.array([1.0, 2.0]),)])
