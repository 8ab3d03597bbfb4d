"""llvmlite behind one small interface: parse -> verify -> optimize -> object code -> load.

``compile_module(ir_text)`` returns optimized LLVM IR and object code (bytes the disk
cache stores); ``assembly_of(optimized_ir)`` renders assembly on demand, for inspection;
``load(object_code, exports, imports)`` links object code into the process (LLVM's ORC
JIT) and returns the exported function addresses. A warm start from
disk calls only ``load``: no LLVM optimization runs.

>>> ir = '''
... define i64 @twice(i64 %x) {
...   %y = mul i64 %x, 2
...   ret i64 %y
... }'''
>>> module = compile_module(ir)
>>> library = load(module.object_code, ["twice"])
>>> import ctypes
>>> ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(library.addresses["twice"])(21)
42
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import itertools
import logging
import os
import struct
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import llvmlite
import llvmlite.binding as llvm
from llvmlite.binding import ffi
from llvmlite.binding.ffi import ObjectRef
from llvmlite.binding.newpassmanagers import NewPassManager

from . import blas, module_split

log = logging.getLogger("tracejit.kernels")

_lock = threading.Lock()  # LLVM contexts are not thread-safe; compile one module at a time
# Linking object code into the LLJIT touches no IR context: it has a lock of its own, so a
# warm start from disk never waits for a compile running on another thread (a background
# compile, runtime/background.py).
_link_lock = threading.Lock()
_library_ids = itertools.count()


# The contract between a program's wrapper and its native entry (which arrays it gets,
# what it checks, what it returns); cached object code built under another is not loaded.
# 2: the entry checks inputs are C-contiguous itself (LAYOUT_EXIT); view outputs get no slot.
ENTRY_PROTOCOL = 2


@lru_cache(maxsize=None)
def _initialized():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


@lru_cache(maxsize=None)
def target_machine():
    """The host CPU with all its features, at O3, position independent (for object code
    that is loaded anywhere). Compiles use it one at a time (``_lock``)."""
    return _new_target_machine()


@lru_cache(maxsize=None)
def _jit_target_machine():
    """The LLJIT's own copy: code generation writes to its target machine's options while
    it runs, outside llvmlite's lock (``_unlocked``), so a link never reads that one."""
    return _new_target_machine()


def _new_target_machine():
    _initialized()
    target = llvm.Target.from_default_triple()
    cpu, features = host_cpu()
    return target.create_target_machine(
        cpu=cpu,
        features=features.flatten(),
        opt=3,
        reloc="pic",
        codemodel="default",
    )


@lru_cache(maxsize=None)
def host_cpu():
    """``(name, features)`` of the host CPU as LLVM names them (``features``: LLVM's
    ``FeatureMap``, ``{feature: present}``; do not change it). Asked once: each ask cost
    ~0.3 ms, and a warm start from disk asked four times."""
    _initialized()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features()


def _unlocked(name):
    """The libllvmlite function ``name``, called without llvmlite's lock. llvmlite holds
    one process-wide lock around every call into LLVM, so while a background compile ran
    its optimizer or code generator (10 ms to 1 s in one call) any llvmlite call on
    another thread waited: a warm start's link, measured at up to 1.4 s on the loaded
    2-core machine. The two long calls below touch only what one compile owns - a module
    in an LLVM context of its own, its pass builder and ``target_machine()``, which
    ``_lock`` hands to one compile at a time - and LLVM is thread-safe across contexts.
    (llvmlite's wrapper keeps the plain ctypes function in ``_cfn``; without it, the
    locked call.)"""
    function = getattr(ffi.lib, name)
    return getattr(function, "_cfn", function)


def _optimize(pipeline, module, builder):
    _unlocked("LLVMPY_RunNewModulePassManager")(pipeline, module, builder)


def _emit_object(machine, module):
    """``machine.emit_object(module)``, with the code generation outside llvmlite's lock."""
    with ffi.OutputString() as error:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(machine, module, 1, error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer),
                                ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def host_description():
    """What compiled code depends on: part of every disk cache key. With the math NumPy's
    loops compute (``numpy_loops.setting``): margins of code traced under one setting are
    not those of another; the loops themselves are found at link time in this process's
    NumPy (whose version the key holds too), never addresses baked into the code."""
    from . import numpy_loops

    return {**_described_host(), "numpy_math": numpy_loops.setting()}


@lru_cache(maxsize=None)
def _described_host():
    # The same for the life of the process; asking LLVM for the CPU features costs ~3 ms,
    # which a warm start from disk paid twice.
    from . import blas

    _initialized()
    return {
        "blas": blas.available(),
        "triple": llvm.get_process_triple(),
        "cpu": host_cpu()[0],
        "features": host_cpu()[1].flatten(),
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "llvmlite": llvmlite.__version__,
        "entry": ENTRY_PROTOCOL,
    }


@dataclass
class CompiledModule:
    llvm_ir: str  # after optimization
    object_code: bytes
    seconds: float


@contextmanager
def _parsed_for_host(ir_text, machine=None):
    """The module parsed into an LLVM context of its own, for ``machine`` (by default
    ``target_machine()``), and that machine; freed on exit.
    In the global context every module's types, constants and metadata stay interned for
    the life of the process (about 75 KB per compiled program)."""
    context = llvm.create_context()
    module = None
    try:
        module = llvm.parse_assembly(str(ir_text), context=context)
        module.verify()
        machine = machine or target_machine()
        module.triple = machine.triple
        module.data_layout = str(machine.target_data)
        yield module, machine
    finally:
        # The module belongs to the context: dispose of it first.
        if module is not None:
            module.close()
        context.close()


def _free_pass_manager(manager):
    """Free a pass pipeline now. In llvmlite 0.50 ``ModulePassManager`` inherits
    ``ObjectRef``'s no-op ``_dispose`` ahead of ``NewPassManager``'s (method resolution
    order), so the O3 pipeline and what its passes cached - about 70 KB per compiled
    program - was never freed."""
    if type(manager)._dispose is ObjectRef._dispose:
        NewPassManager._dispose(manager)
        manager.detach()
    else:
        manager.close()


# Vector variants of rare slow paths (``math_rare_path``): external until the loop
# vectorizer has replaced scalar calls with calls of them (so no pass deletes them first),
# then inlined where it did and dropped, so a kernel pays a branch per vector, not a call.
VECTOR_VARIANT_PREFIX = "tracejit_vv_"


def _inline_vector_variants(module, pass_builder):
    variants = [function for function in module.functions
                if function.name.startswith(VECTOR_VARIANT_PREFIX)
                and not function.is_declaration]
    if not variants:
        return
    for function in variants:
        function.linkage = "internal"
        function.add_function_attribute("alwaysinline")
    passes = llvm.create_new_module_pass_manager()
    passes.add_always_inliner_pass()
    passes.add_global_dead_code_eliminate_pass()
    try:
        passes.run(module, pass_builder)
    finally:
        _free_pass_manager(passes)


# Modules this process compiled, by their IR text: a function called at sizes in several
# buckets, or with static arguments that change nothing the kernels compute, often lowers
# to a module already compiled (in the test suite, 22-53% of compile_module calls in a
# file). The same text gives the same object code, so LLVM is not run again. Bounded
# (least recently used out first), so dropped functions do not keep memory forever.
_COMPILED = OrderedDict()  # sha256 of (opt_level, parts, IR text) -> CompiledModule
_COMPILED_LIMIT_BYTES = 64 << 20
_compiled_bytes = 0
_compiled_lock = threading.Lock()


def compile_module(ir_text, opt_level=3):
    """``_compile_module`` once per IR text and optimization level (see ``_COMPILED``)."""
    global _compiled_bytes
    threads = 1 if _one_thread.__dict__ else COMPILE_THREADS  # how it is cut into parts
    key = hashlib.sha256(f"{opt_level}\0{threads}\0{ir_text}".encode()).digest()
    with _compiled_lock:
        compiled = _COMPILED.get(key)
        if compiled is not None:
            _COMPILED.move_to_end(key)
            return dataclasses.replace(compiled, seconds=0.0)
    compiled = _compile_module(ir_text, opt_level)
    size = len(compiled.llvm_ir) + len(compiled.object_code)
    with _compiled_lock:
        if key not in _COMPILED and size <= _COMPILED_LIMIT_BYTES:
            _COMPILED[key] = compiled
            _compiled_bytes += size
            while _compiled_bytes > _COMPILED_LIMIT_BYTES:
                _, dropped = _COMPILED.popitem(last=False)
                _compiled_bytes -= len(dropped.llvm_ir) + len(dropped.object_code)
    return compiled


def _compile_module(ir_text, opt_level=3):
    """Parse, verify, optimize (new pass manager, loop and SLP vectorization on) and emit
    object code for the host. A module of several kernels is cut into parts
    (``module_split``) compiled at the same time, one on a helper thread, each in a
    context and with a target machine of its own; its ``object_code`` then bundles the
    parts' object files (``load`` links them all) and its ``llvm_ir`` joins their
    optimized IR with ``PART_SEPARATOR``. The optimized module is verified again only with
    debug logging on: our IR is checked before LLVM sees it; what LLVM's own passes
    produce costs 1-2% of a long program's compile to check again, for LLVM's bugs alone."""
    _initialized()
    start = time.perf_counter()
    with _lock:
        parts = module_split.split(ir_text, 1 if _one_thread.__dict__ else COMPILE_THREADS,
                                   copied_prefixes=(VECTOR_VARIANT_PREFIX,))
        helpers = [_helper_thread().submit(_compile_part, text, opt_level, _helper_machine())
                   for text in parts[1:]]
        results = []  # bound before the try: a KeyboardInterrupt must reach the caller
        try:
            results.append(_compile_part(parts[0], opt_level, target_machine()))
        finally:
            # The helper's machine and thread are the lock holder's until it is done.
            results += [helper.result() for helper in helpers]
    optimized = PART_SEPARATOR.join(text for text, _ in results)
    object_code = _bundle([code for _, code in results])
    seconds = time.perf_counter() - start
    log.debug("compiled a module in %.1f ms (%d part(s), %d bytes of object code)",
              seconds * 1e3, len(parts), len(object_code))
    return CompiledModule(optimized, object_code, seconds)


def _compile_part(ir_text, opt_level, machine):
    """``(optimized IR, object code)`` of one module text, compiled with ``machine``."""
    with _parsed_for_host(ir_text, machine) as (module, machine):
        options = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        options.loop_vectorization = True
        options.slp_vectorization = True
        options.loop_interleaving = True
        options.loop_unrolling = True
        builder = llvm.create_pass_builder(machine, options)
        pipeline = builder.getModulePassManager()
        try:
            _optimize(pipeline, module, builder)
        finally:
            _free_pass_manager(pipeline)
        _inline_vector_variants(module, builder)
        if log.isEnabledFor(logging.DEBUG):
            module.verify()
        return str(module), _emit_object(machine, module)


# A 2-core machine compiles two parts at once; more parts would only queue.
COMPILE_THREADS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1)
PART_SEPARATOR = "\n; ---- tracejit: next part (compiled on another thread) ----\n"
_BUNDLE_MAGIC = b"TJPARTS1"
_helper = {}
_one_thread = threading.local()  # set: this thread compiles without the helper


def compile_on_this_thread_only():
    """From now on, modules this thread compiles are not split: the background compile
    thread's LLVM leaves the second core to the program it compiles for, which runs its
    calls eagerly meanwhile (``runtime/background.py``)."""
    _one_thread.set = True


def _helper_thread():
    """The thread that compiles the second part (made on first use, again after a fork:
    a forked child has no copy of it)."""
    if "executor" not in _helper:
        _helper["executor"] = ThreadPoolExecutor(max_workers=1, initializer=blas.runs_no_blas,
                                                 thread_name_prefix="tracejit-llvm")
    return _helper["executor"]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_helper.clear)


@lru_cache(maxsize=None)
def _helper_machine():
    """The helper thread's target machine (code generation writes to its machine)."""
    return _new_target_machine()


def _bundle(objects):
    """One object file as it is; several as ``_BUNDLE_MAGIC``, their count and sizes
    (little-endian u64) and the files, for ``_object_files`` to take apart."""
    if len(objects) == 1:
        return objects[0]
    sizes = struct.pack(f"<{len(objects) + 1}Q", len(objects), *map(len, objects))
    return _BUNDLE_MAGIC + sizes + b"".join(objects)


def _object_files(object_code):
    if not object_code.startswith(_BUNDLE_MAGIC):
        return [object_code]
    offset = len(_BUNDLE_MAGIC)
    (count,) = struct.unpack_from("<Q", object_code, offset)
    sizes = struct.unpack_from(f"<{count}Q", object_code, offset + 8)
    position, files = offset + 8 * (count + 1), []
    for size in sizes:
        files.append(object_code[position:position + size])
        position += size
    if position != len(object_code):
        raise ValueError("a bundle of object files whose sizes do not add up")
    return files


def assembly_of(optimized_ir):
    """The host assembly for already optimized IR (code generation only: no passes run,
    so it is the code ``compile_module`` emitted as object code)."""
    _initialized()
    with _lock:
        texts = []
        for part in optimized_ir.split(PART_SEPARATOR):
            with _parsed_for_host(part) as (module, machine):
                texts.append(machine.emit_assembly(module))
        return "\n".join(texts)


# An LLJIT never forgets a library: llvmlite frees a library's code when its tracker dies
# but keeps its JITDylib (about 9 KB) until the whole LLJIT is disposed. So libraries are
# linked into one LLJIT at a time for this many links, then into a fresh one; a retired
# LLJIT (and every JITDylib it kept) is freed by LLVM when its last library's tracker is
# (each tracker holds its LLJIT natively). Creating an LLJIT costs about 0.7 ms.
LIBRARIES_PER_JIT = 32
_generation = {"jit": None, "links": 0}


def _jit():
    """The LLJIT new libraries go into (call with ``_link_lock`` held)."""
    _initialized()
    if _generation["jit"] is None or _generation["links"] >= LIBRARIES_PER_JIT:
        _new_jit()
    _generation["links"] += 1
    return _generation["jit"]


def _new_jit():
    # JITLink keeps an object's sections together: RuntimeDyld could place code and its
    # constant pool more than 2 GiB apart in a crowded address space and abort on a 32-bit
    # relocation (seen with torch and jax loaded in the process).
    _generation["jit"] = llvm.create_lljit_compiler(_jit_target_machine(), use_jit_link=True)
    _generation["links"] = 0


_ahead = {}  # "thread": the thread making the process's first LLJIT (``link_ahead``)


def link_ahead(then=None):
    """Start making the process's first LLJIT and its target machine (~1 ms of LLVM, in
    native calls that release the GIL) on a thread of its own, then run ``then()`` there
    (``machine_objects.link_ahead``: the per-machine objects, linked), so that a warm
    start from disk has them when it links, having read and checked its entry meanwhile.
    Once per process, and only while no LLJIT exists; the first ``load`` waits for the
    LLJIT (``_link_lock``), and ``joined_link_ahead`` for the thread. ``then`` raising is
    ignored: whoever needs what it makes makes it again, and sees the error.

    LLVM is set up and the host asked for here, on the calling thread (the cache key
    needs both): the thread then makes only what nothing else makes concurrently.

    >>> link_ahead(); load(compile_module("define i64 @one() { ret i64 1 }").object_code,
    ...                    ["one"]).addresses["one"] != 0
    True
    """
    if _ahead or _generation["jit"] is not None:
        return
    host_description()

    def make():
        with _link_lock:
            if _generation["jit"] is None:
                _new_jit()
        if then is not None:
            try:
                then()
            except Exception as error:  # noqa: BLE001 - made again where it is needed
                log.debug("linking ahead failed: %s", error)

    thread = threading.Thread(target=make, name="tracejit-link-ahead", daemon=True)
    # marked before it starts: a pool that starts while it runs still shortens OpenBLAS's
    # idle spin (``blas.shorten_openblas_idle_spin`` counts the other Python threads)
    blas.runs_no_blas(thread)
    _ahead["thread"] = thread
    thread.start()


def joined_link_ahead():
    """Wait for ``link_ahead``'s thread, if one was started (also before a fork: a child
    must not inherit ``_link_lock`` held by a thread it lacks)."""
    thread = _ahead.get("thread")
    if thread is not None and thread is not threading.current_thread():
        thread.join()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=joined_link_ahead)


@dataclass
class NativeLibrary:
    """Loaded object code; the addresses stay valid while this object lives."""

    addresses: dict
    tracker: object


def load(object_code, exports, imports=None):
    """Link ``object_code`` into this process and return the ``exports``' addresses.
    ``imports`` maps symbol names the code calls to addresses (BLAS, thread pool)."""
    builder = llvm.JITLibraryBuilder()
    for image in _object_files(object_code):
        builder.add_object_img(image)
    builder.add_current_process()
    for name, address in (imports or {}).items():
        builder.import_symbol(name, address)
    for name in exports:
        builder.export_symbol(name)
    with _link_lock:
        tracker = builder.link(_jit(), f"tracejit_{next(_library_ids)}")
    return NativeLibrary({name: tracker[name] for name in exports}, tracker)
