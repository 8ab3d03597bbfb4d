"""Review round 17 of this session's commits (random draws, loop exits, write-through
loops): each test here failed before the fix named in its docstring."""

import pytest

from tracejit.runtime.serialize import InvalidEntry
from tracejit.runtime.serialize_draws import draws_from_json


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
