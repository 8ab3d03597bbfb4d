"""Timing for the examples: median milliseconds, candidates taking turns.

>>> import time
>>> fast, slow = median_ms([lambda: None, lambda: time.sleep(0.001)], repeat=3)
>>> fast < slow
True
"""

import time

import numpy as np


def median_ms(functions, *args, repeat):
    """Median milliseconds per call of each function, after one warmup call; the calls
    take turns, so a busy machine slows them alike."""
    times = [[] for _ in functions]
    for function in functions:
        function(*args)
    for _ in range(repeat):
        for function, seconds in zip(functions, times):
            start = time.perf_counter()
            function(*args)
            seconds.append(time.perf_counter() - start)
    return [1e3 * float(np.median(seconds)) for seconds in times]
