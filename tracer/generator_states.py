"""A random generator's state, kept before a compiled call draws and put back if it must.

Every compiled call that draws keeps the state of each generator it draws from
(``tracer.random_draws``), so that a side exit can put it back before the eager run draws
again. NumPy's own getter is too slow for that hot path with its default bit generator:
``MT19937.state`` copies its 624 key words one by one (15-80 us a call, more than a small
dropout layer computes), and ``RandomState.get_state()`` goes through it. So for MT19937:

* the key and position are read as raw bytes at ``bit_generator.ctypes.state_address``
  (NumPy's documented address of the ``mt19937_state`` struct: ``uint32_t key[624]; int
  pos``), a 2.5 kB copy;
* ``RandomState``'s cached second normal (``has_gauss``, ``gauss``: legacy ``randn`` draws
  normals in pairs) is not reachable through any fast API: it is read at its offset in the
  object, found once by ``_gauss_offset`` on throwaway objects whose values were set
  through ``set_state`` (three patterns must agree; otherwise the slow getter is used).

Reads only: a state is put back through NumPy's own setters (``set_state``, the ``state``
property), which is rare (a side exit). Other bit generators (PCG64: 2.5 us) use
``bit_generator.state`` as it is.

>>> import numpy as np
>>> rng = np.random.RandomState(0)
>>> kept = keep(rng)
>>> first = rng.randn(3)
>>> put_back(kept)
>>> bool((rng.randn(3) == first).all())
True
"""

from __future__ import annotations

import ctypes
import functools
import struct

import numpy as np

_MT_WORDS = 624
_MT_BYTES = _MT_WORDS * 4 + 4  # numpy/random/src/mt19937/mt19937.h: key[624], int pos


def keep(rng):
    """The state of ``rng`` (a ``Generator`` or ``RandomState``), for ``put_back``."""
    legacy = isinstance(rng, np.random.RandomState)
    bits = rng._bit_generator if legacy else rng.bit_generator
    # NumPy draws holding the bit generator's lock: a draw in another thread is not read
    # half done (a torn key, put back on a side exit, is a state eager never has)
    with bits.lock:
        return _keep(rng, legacy, bits)


def _keep(rng, legacy, bits):
    if type(bits) is not np.random.MT19937:
        return ("state", rng, rng.get_state(legacy=False) if legacy else bits.state)
    raw = ctypes.string_at(bits.ctypes.state_address, _MT_BYTES)
    if not legacy:
        return ("mt19937", rng, raw, None)
    offset = _gauss_offset()
    if offset is None:
        return ("state", rng, rng.get_state(legacy=False))
    address = id(rng) + offset
    gauss = (ctypes.c_int.from_address(address - 8).value,
             ctypes.c_double.from_address(address).value)
    return ("mt19937", rng, raw, gauss)


def put_back(kept):
    """Set the generator's state to what ``keep`` found."""
    if kept[0] == "state":
        _, rng, state = kept
        if isinstance(rng, np.random.RandomState):
            rng.set_state(state)
        else:
            rng.bit_generator.state = state
        return
    _, rng, raw, gauss = kept
    state = {"bit_generator": "MT19937",
             "state": {"key": np.frombuffer(raw, np.uint32, _MT_WORDS).copy(),
                       "pos": struct.unpack_from("i", raw, _MT_WORDS * 4)[0]}}
    if gauss is None:
        rng.bit_generator.state = state
    else:
        state["has_gauss"], state["gauss"] = gauss
        rng.set_state(state)


@functools.cache
def _gauss_offset():
    """Where ``RandomState`` keeps its cached normal (the ``gauss`` double of its
    ``aug_bitgen_t``, ``has_gauss`` the int 8 bytes before), or None when three objects
    set to different values do not all show them at one offset."""
    size = np.random.RandomState.__basicsize__
    found = None
    for has_gauss, gauss in ((1, 0.7853981633974483), (1, -1234.5678), (0, 0.0)):
        probe = np.random.RandomState(0)
        state = probe.get_state(legacy=False)
        state["has_gauss"], state["gauss"] = has_gauss, gauss
        probe.set_state(state)
        memory = ctypes.string_at(id(probe), size)
        here = {offset for offset in range(8, size - 7, 8)
                if struct.unpack_from("d", memory, offset)[0] == gauss
                and struct.unpack_from("i", memory, offset - 8)[0] == has_gauss}
        found = here if found is None else found & here
    return found.pop() if found and len(found) == 1 else None
