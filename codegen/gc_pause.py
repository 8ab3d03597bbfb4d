"""The cyclic garbage collector paused while tracejit compiles or loads a program.

Compiling allocates hundreds of thousands of short-lived objects (IR records, llvmlite's
IR values, wrapper ASTs), nearly all freed by reference counting, and the collector,
which runs whenever allocations outnumber deallocations by 700, walks the young ones
each time and the whole heap every tenth or hundredth time: in the first call of the MLP
train step 21 young and 2 older collections took 6-10 ms and freed about 100 objects.
Inside ``paused()`` it does not run; the few cycles a compile leaves are collected at
the collector's next run after it.

Only the main thread pauses it: the collector is process-wide, and a compile on another
thread (``jit(compile="background")``'s, which can run for seconds) must not stop the
collection of garbage the program makes meanwhile.

>>> import gc
>>> with paused():
...     inside = gc.isenabled()
>>> inside, gc.isenabled()
(False, True)
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

_state = {"depth": 0, "resume": False}


@contextmanager
def paused():
    """No cyclic collection inside (on the main thread; nested uses nest). A collector
    the program had disabled stays disabled after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _state["depth"] == 0:
        _state["resume"] = gc.isenabled()
        gc.disable()
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0 and _state["resume"]:
            gc.enable()
