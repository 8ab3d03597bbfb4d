"""From IR to callable native code (LLVM through llvmlite).

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> program = compile(trace(lambda x: x + 1, np.zeros(3)).graph)
>>> program(np.zeros(3))
(array([1., 1., 1.]),)
"""

from .exit_codes import INNER_LOOP_GUARD_FAILED, KERNEL_ERROR, LOOP_GUARD_FAILED
from .program import Program, ProgramTooLarge, SideExit, compile

__all__ = ["INNER_LOOP_GUARD_FAILED", "KERNEL_ERROR", "LOOP_GUARD_FAILED", "Program",
           "ProgramTooLarge", "SideExit", "compile"]
