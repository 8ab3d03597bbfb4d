"""tracejit's per-machine objects: native code every process on a host shares - the thread
pool's runtime, the entry guards' array check, the own GEMM - each compiled once into the
runtime's object store (the disk cache) and read from there by every later process.

A first call with an empty cache builds them on its critical path (about 0.8 s of CPU for
the float32 GEMM alone); ``tracejit cache prepare`` builds them all ahead of time, at
install time or in a container image's build, through ``builders``:

>>> [label for label, _ in builders()][:2]
['thread pool runtime', 'entry guard array check']
"""

from __future__ import annotations


def builders():
    """``[(label, build)]``: ``build()`` returns that object's code, from the object store
    when it has it, else compiled now and stored (``parallel.set_object_store`` names the
    store). The GEMMs are listed where the host and the GEMM setting use them, for the
    instruction set ``gemm.chosen_isa`` picks, in float32 and float64."""
    from . import array_guard, blas, gemm, gemm_ir, parallel

    found = [("thread pool runtime", parallel.runtime_object),
             ("entry guard array check", array_guard.object_code)]
    if blas.own_sgemm_enabled():
        chosen = gemm.chosen_isa()
        for dtype in ("float32", "float64"):
            isa = gemm_ir.isa_for(chosen.name, dtype)
            found.append((f"GEMM {isa.entry}", lambda isa=isa: gemm.object_code(isa)))
    return found


def link_ahead():
    """Make the LLJIT, link the pool's runtime and the entry guards' array check on a
    thread of their own (``llvm.link_ahead``: native work, mostly without the GIL) while
    the calling thread goes on: a warm start from disk calls this before it takes its key,
    reads its entry and parses its program (~5 ms of Python), and finds them made when it
    links (the pool takes the runtime linked: ``parallel.link_runtime_ahead``) and builds
    its entry guard (``array_guard.matcher``, built once per process under its lock)."""
    from . import llvm

    llvm.link_ahead(then=_link_ahead)


def _link_ahead():
    from . import array_guard, parallel

    parallel.link_runtime_ahead()
    array_guard.matcher()
