"""What the examples print besides their own results: median milliseconds with the
candidates taking turns, and their entries of the disk cache.

>>> import time
>>> fast, slow = median_ms([lambda: None, lambda: time.sleep(0.001)], repeat=3)
>>> fast < slow
True
"""

import subprocess
import sys
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


def print_cache_list(*function_names, indent="  "):
    """``tracejit cache list FUNC...``: these functions' entries (not the whole cache)."""
    sys.stdout.flush()  # the listing comes from a child process: keep the order
    listing = subprocess.run([sys.executable, "-m", "tracejit", "cache", "list",
                              *function_names], capture_output=True, text=True, check=False)
    for line in (listing.stdout + listing.stderr).splitlines():
        print(indent + line.rstrip())
