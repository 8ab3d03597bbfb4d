"""Two-thread pool used by bench.py for the experiment's two-thread numbers.

The helper thread spins in native code (GIL released, ``pause`` loop compiled with the repo's
tracejit.codegen.llvm helpers) for ~spin_ms after each job before blocking on an Event, like
OpenBLAS (whose workers spin ~0.1 s). Without the spin, waking the idle vCPU took
milliseconds on this VM. Not run on its own; bench.py imports it (POOL=spin, the default).
"""
import ctypes
import importlib
import sys
import threading
import time
from pathlib import Path

import numpy as np

# The repository root is three levels up (docs/experiments/sgemm_avx512/).
REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT))
tl = importlib.import_module("tracejit.codegen.llvm")  # read-only use of the compile/load helpers

IR = """
declare void @llvm.x86.sse2.pause()
define i64 @spin_wait(ptr %flag, i64 %iters) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %cont]
  %v = load atomic i64, ptr %flag acquire, align 8
  %set = icmp ne i64 %v, 0
  br i1 %set, label %yes, label %cont
cont:
  call void @llvm.x86.sse2.pause()
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %iters
  br i1 %more, label %loop, label %no
yes:
  ret i64 1
no:
  ret i64 0
}
"""
_lib = tl.load(tl.compile_module(IR).object_code, ["spin_wait"])
_SPIN_SIG = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
spin = _SPIN_SIG(_lib.addresses["spin_wait"])


def _calibrate():
    f = np.zeros(1, np.int64)
    t = time.perf_counter()
    spin(f.ctypes.data, 100000)
    dt = time.perf_counter() - t
    return dt / 100000


class SpinPool:
    def __init__(self, spin_ms=2.0):
        self.flags = np.zeros(16, np.int64)  # go at [0], done at [8] (separate cache lines)
        self.go_addr = self.flags.ctypes.data
        self.done_addr = self.go_addr + 64
        self.iters = max(1, int(spin_ms * 1e-3 / _calibrate()))
        self.ev = threading.Event()
        self.job = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            if spin(self.go_addr, self.iters):
                self.flags[0] = 0
                self.job()
                self.flags[8] = 1
            else:
                self.ev.wait()
                self.ev.clear()

    def run2(self, f0, f1):
        self.job = f1
        self.flags[8] = 0
        self.flags[0] = 1
        self.ev.set()
        f0()
        while not spin(self.done_addr, 1 << 40):
            pass
