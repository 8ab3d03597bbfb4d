"""A refused attribute write names the user's line first (STYLE.md rule 9), and the
refusal leaves the caller's object as it was."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tracejit as tj
from tracejit.tracer.errors import TraceError


class _Box:
    # slots: an object compiled calls cannot make again from its __dict__ (a plain object
    # made in the call is rebuilt per call: tracer/attribute_writes.made_here)
    __slots__ = ()


class _Holder:
    def forward(self, x):
        self.state = _Box()  # an object eager makes anew per call, the program cannot
        return x * 2


def test_an_object_written_into_an_attribute_is_refused_at_its_line():
    holder = _Holder()
    compiled = tj.jit(holder.forward, cache="memory", fallback="raise")
    with pytest.raises(TraceError) as raised:
        compiled(np.ones(3))
    lines, first = inspect.getsourcelines(_Holder.forward)
    line = first + next(n for n, text in enumerate(lines) if "self.state" in text)
    assert str(raised.value).startswith(f"{__file__}:{line}: a _Box written into an "
                                        "attribute (self.state)")
    assert not hasattr(holder, "state")  # restored: the eager run starts from the caller's


def test_the_eager_fallback_still_writes_it():
    holder = _Holder()
    compiled = tj.jit(holder.forward, cache="memory")
    np.testing.assert_array_equal(compiled(np.ones(3)), np.full(3, 2.0))
    assert isinstance(holder.state, _Box)
