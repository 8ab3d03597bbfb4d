"""Side-exit codes that name no guard of the trace tree (``program.SideExit.code``).

Positive codes are a guard's index + 1. The three below are the others: a kernel found an
error NumPy raises too (an index out of range), a guard inside a captured loop's body
failed at some trip, or a guard inside a loop nested in such a body did (the whole call
leaves compiled code; ``stats()`` tells them apart).
"""

KERNEL_ERROR = -1
# The loop codes are far from a program's own statuses (a guard's number + 1, or a kernel's
# error code negated: -1 an index out of range, -2 a negative integer power, -3 out of
# memory), which the wrapper raises as they are: a kernel error must not read as a loop's.
LOOP_GUARD_FAILED = -(1 << 29)
INNER_LOOP_GUARD_FAILED = -(1 << 29) - 1


def body_exit(code):
    """The code a loop leaves with when its body program left with ``code``: a guard of
    the body (``code > 0``) is the loop's guard failing; a guard of a loop inside the body
    failing (at any depth) is an inner loop's; anything else is a kernel error.

    >>> [body_exit(code) for code in (3, LOOP_GUARD_FAILED, -2)] == [
    ...     LOOP_GUARD_FAILED, INNER_LOOP_GUARD_FAILED, KERNEL_ERROR]
    True
    """
    if code > 0:
        return LOOP_GUARD_FAILED
    if code in (LOOP_GUARD_FAILED, INNER_LOOP_GUARD_FAILED):
        return INNER_LOOP_GUARD_FAILED
    return KERNEL_ERROR
