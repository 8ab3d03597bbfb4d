"""Large outputs handed out again once nobody holds them (the wrapper's ``_recycled``).

A fresh array of a megabyte or more is page-faulted on first touch, as slow as the kernel
that fills it; caching allocators (JAX, PyTorch) avoid that by reusing freed blocks, and
so does a program's wrapper: each large output slot keeps the last two arrays it made, per
thread, and hands one out again when only that pool references it.

"Only the pool" is read from ``sys.getrefcount``, and what it reads for such an array is
measured on this interpreter, not assumed: CPython 3.11 counts the pool's list, the loop's
name and the call's argument (3), while 3.14 may skip counting a borrowed argument (2) -
with a fixed 3, an output the caller still holds would read 3 there and be overwritten by
the next call. ``ALONE`` is what the very loop of ``recycler`` reads for an array only the
pool holds, and ``SAFE`` checks the recycler end to end at import (an array the caller
holds is never handed out; one nobody holds is); if either fails, outputs are always fresh.

>>> import threading, numpy as np
>>> recycled = recycler(threading.local())
>>> first = recycled(0, (3,), np.dtype(np.float64))
>>> second = recycled(0, (3,), np.dtype(np.float64))    # ``first`` is held: a new array
>>> second is not first
True
>>> address = id(first)
>>> del first                                            # nobody holds it now
>>> SAFE and id(recycled(0, (3,), np.dtype(np.float64))) == address
True
"""

from __future__ import annotations

import sys
import threading

import numpy as np

# Outputs of this many bytes or more (at the top of their bucket) are recycled.
RECYCLE_BYTES = 1 << 20


def _reads_alone(getrefcount=sys.getrefcount):
    """What ``recycler``'s loop reads from ``getrefcount`` for an array only its pool
    holds: the same statements on a pool of one."""
    pool = [np.empty(0)]
    for array in pool:
        return getrefcount(array)


ALONE = _reads_alone()


def recycler(thread_state, alone=ALONE, getrefcount=sys.getrefcount):
    """``recycled(slot, shape, dtype)``: an output array, reusing one this thread returned
    earlier if nobody holds it any more (only this pool references it)."""

    def recycled(slot, shape, dtype):
        pools = getattr(thread_state, "outputs", None)
        if pools is None:
            pools = thread_state.outputs = {}
        pool = pools.setdefault(slot, [])
        for array in pool:
            if getrefcount(array) == alone and array.shape == shape:
                return array
        array = np.empty(shape, dtype)
        if len(pool) >= 2:
            pool.pop(0)
        pool.append(array)
        return array

    return recycled


def works(make=recycler):
    """Whether a recycler from ``make`` never hands out an array its caller holds (nor a
    view of one) and does hand out one nobody holds."""
    recycled = make(threading.local())
    shape, dtype = (4,), np.dtype(np.float64)
    held = recycled(0, shape, dtype)
    view = recycled(1, shape, dtype)[1:]
    if recycled(0, shape, dtype) is held or recycled(1, shape, dtype) is view.base:
        return False
    freed = id(recycled(2, shape, dtype))  # the caller drops it at once
    return id(recycled(2, shape, dtype)) == freed


SAFE = works()


def fresh(slot, shape, dtype):
    """The recycler's stand-in where recycling cannot be trusted: always a new array."""
    return np.empty(shape, dtype)


def for_thread(thread_state):
    """The wrapper's ``_recycled`` for programs sharing ``thread_state``."""
    return recycler(thread_state) if SAFE else fresh
