"""Side-exit codes that name no guard of the trace tree (``program.SideExit.code``).

Positive codes are a guard's index + 1. The two below are the others: a kernel found an
error NumPy raises too (an index out of range), or a guard inside a loop body failed at
some trip (the whole call leaves compiled code; ``stats()`` tells them apart).
"""

KERNEL_ERROR = -1
LOOP_GUARD_FAILED = -2
