"""Review round 17 of this session's commits (random draws, loop exits, write-through
loops): each test here failed before the fix named in its docstring."""

import json

import numpy as np
import pytest

from tracejit import jit
from tracejit.runtime.serialize import InvalidEntry, spec_from_json, spec_to_json
from tracejit.runtime.serialize_draws import draws_from_json
from tracejit.runtime.testing import legacy_random_state, same_random_state


def _make(name):
    return {"kind": "make", "rng": [], "rng_type": "Generator", "name": name,
            "args": [0], "kwargs": []}


def _draw(rng, rng_type, name):
    return {"kind": "draw", "rng": rng, "rng_type": rng_type, "name": name,
            "args": [3], "kwargs": []}


@pytest.mark.parametrize("ops", [
    [_draw(["made", 5], "Generator", "random")],  # no op 5
    [_draw(["made", 0], "Generator", "random")],  # op 0 is this draw
    [_draw(["legacy"], "RandomState", "rand"), _draw(["made", 0], "RandomState", "rand")],
    [_draw(["made", 1], "Generator", "random"), _make("default_rng")],  # made later
    [_make("default_rng"), _draw(["made", 0], "RandomState", "rand")],  # a Generator
    [_make("RandomState"), _draw(["made", 0], "Generator", "integers")],
])
def test_a_forged_draw_from_a_generator_no_op_made_is_refused(ops):
    """A disk cache entry is a trust boundary (runtime/serialize_draws.py): a draw from
    ("made", k) where op k made no generator of that type passed check_op, and every
    compiled call of the entry raised KeyError or AttributeError from DrawProgram.run,
    inside the entry guard, where eager NumPy runs. Refused when read now."""
    with pytest.raises(InvalidEntry):
        draws_from_json(ops, None)


def _seeded_dropout(x, seed):
    np.random.seed(seed)
    return x * (np.random.rand(*x.shape) < 0.5)


@pytest.mark.parametrize("leaf", [0, 2, 99])  # x (an array), past the leaves
def test_a_forged_seed_argument_leaf_is_refused(leaf):
    """A seed argument is stored as {"argument": leaf} (f3ecd0e); spec_from_json checked
    neither that the leaf exists (every compiled call raised IndexError inside the entry
    guard) nor that it is a number (np.random.seed(x) seeds from the array: other draws
    than eager's). Refused when read now."""
    compiled = jit(_seeded_dropout, cache=False)
    for seed in (1, 2):  # the first seed is a constant, the second the call's
        compiled(np.ones(4), seed)
    spec = compiled._variants[-1].spec
    stored = json.loads(json.dumps(spec_to_json(spec, _seeded_dropout)))
    assert spec_from_json(stored, _seeded_dropout).draws == spec.draws
    found = [arg for op in stored["draws"] for arg in op["args"]
             if isinstance(arg, dict) and "argument" in arg]
    assert found, stored["draws"]
    for arg in found:
        arg["argument"] = leaf
    with pytest.raises(InvalidEntry):
        spec_from_json(stored, _seeded_dropout)


def test_a_kept_generator_state_waits_for_a_draw_in_another_thread():
    """generator_states.keep read MT19937's key as raw bytes without the bit generator's
    lock, which NumPy's draws hold: a draw under way in another thread was read half done,
    and a side exit put back a state eager never has. Here the 'draw' is a write of the
    whole key made while holding the lock; keep must see all of it or none."""
    import ctypes
    import threading

    from tracejit.tracer.generator_states import keep

    rng = np.random.RandomState(0)
    bits = rng._bit_generator
    found = []
    with bits.lock:
        reader = threading.Thread(target=lambda: found.append(keep(rng)))
        reader.start()
        reader.join(0.2)  # before the fix it reads now, the key half written
        address = bits.ctypes.state_address
        ctypes.memset(address, 0, 312 * 4)
        ctypes.memset(address + 312 * 4, 0, 312 * 4)
    reader.join()
    (kept,) = found
    assert kept[2][:624 * 4] == bytes(624 * 4)


def test_lower_leaves_the_random_stream_alone_when_a_variant_does_not_match():
    """``lower`` asked each variant whether it takes the call and then undid that
    variant's draws; a variant whose checks refused the call had not drawn, so the undo
    put back the states of its previous call: np.random went backwards."""
    def noisy(x):
        return x + np.random.rand(*x.shape)

    f = jit(noisy, cache=False)
    np.random.seed(0)
    for x in (np.ones(3), np.ones(3), np.ones(3), np.ones((2, 2)), np.ones((2, 2))):
        f(x)
    before = legacy_random_state()
    f.lower(np.ones((2, 2)))
    f.lower(np.ones((2, 2)))
    assert same_random_state(before, legacy_random_state())
