"""Findings of round 17 (hostile inputs for what changed recently: ``np.cumsum`` as a scan,
result identity, lists and dicts a captured loop fills and returns, loops sharing one
program across int offsets, log-space arithmetic with infinities; later random draws and
while loops): each a minimal program, eager NumPy against ``jit`` over calls that reach
compiled code, with the arguments compared afterwards.
"""

import numpy as np
from real_model_checks import run_calls


def lengths(*counts, width=3):
    rng = np.random.default_rng(17)
    return [(rng.standard_normal((count, width)),) for count in counts]


# --- one array appended at every step of a captured loop ----------------------------------
def write_through_an_entry(x):
    hs = []
    for _ in range(x.shape[0]):
        hs.append(x)
    hs[-1][0] = 0.0          # into x: every entry is x
    return x.sum(axis=0)


def write_after_the_loop(x):
    h = x * 2.0
    hs = []
    for _ in range(x.shape[0]):
        hs.append(h)
    h[0] = 7.0               # every entry is h: all see it
    return hs[1] + 0.0, hs


def stored_at_every_key(x):
    h = x * 2.0
    hs = {}
    for t in range(x.shape[0]):
        hs[t] = h
    h[0] = 7.0
    return hs


def test_an_array_appended_at_every_step_is_that_array():
    """``hs.append(x)`` (or ``hs[t] = h``) at every trip: eager's entries are that one array,
    so a write into it after the loop, or through an entry, shows everywhere. A captured
    loop's entries were rows of its buffer, copies taken at each trip: ``hs[-1][0] = 0``
    left ``x`` alone and ``h[0] = 7`` reached no entry (wrong values from the second length
    on, once the loop was captured over a dynamic length)."""
    for model in (write_through_an_entry, write_after_the_loop, stored_at_every_key):
        run_calls(model, lengths(4, 5, 6, 9))
