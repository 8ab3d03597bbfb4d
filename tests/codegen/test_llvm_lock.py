"""A compile's optimizer and code generator run outside llvmlite's process-wide lock
(``codegen/llvm._unlocked``), so other threads' LLVM calls - a warm start's link while a
background compile runs - do not wait for them; the object code is the same."""

from __future__ import annotations

import ctypes
import threading

import pytest
from llvmlite.binding import ffi

from tracejit.codegen import llvm

# A kernel worth optimizing (a loop the vectorizer widens), and a function to link.
KERNEL = """
define void @scale(ptr noalias %out, ptr noalias %in, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %at = getelementptr inbounds float, ptr %in, i64 %i
  %x = load float, ptr %at
  %y = fmul float %x, 3.0
  %z = fadd float %y, 1.0
  %to = getelementptr inbounds float, ptr %out, i64 %i
  store float %z, ptr %to
  %next = add nuw nsw i64 %i, 1
  %done = icmp sge i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""
TWICE = """
define i64 @twice(i64 %x) {
  %y = mul i64 %x, 2
  ret i64 %y
}
"""


def _lock_taken_by(function, *args):
    """``(function(*args), whether llvmlite's lock was taken during the call)``, seen by
    the callback llvmlite runs on every acquisition of its lock."""
    taken = []

    def acquired():
        taken.append(True)

    def released():
        pass

    ffi.register_lock_callback(acquired, released)
    try:
        result = function(*args)
    finally:
        ffi.unregister_lock_callback(acquired, released)
    return result, bool(taken)


def test_the_optimizer_and_code_generator_run_without_llvmlites_lock(monkeypatch):
    original = llvm._unlocked
    seen = {}

    def probing(name):
        function = original(name)

        def call(*args):
            result, seen[name] = _lock_taken_by(function, *args)
            return result
        return call

    monkeypatch.setattr(llvm, "_unlocked", probing)
    assert llvm.compile_module(KERNEL).object_code
    assert seen == {"LLVMPY_RunNewModulePassManager": False,
                    "LLVMPY_TargetMachineEmitToMemory": False}
    # llvmlite's own emit takes the lock: the probe sees it
    with llvm._parsed_for_host(KERNEL) as (module, machine):
        assert _lock_taken_by(machine.emit_object, module)[1]


def test_object_code_is_what_llvmlites_emit_gives():
    for text in (KERNEL, TWICE):
        with llvm._parsed_for_host(text) as (module, machine):
            theirs = machine.emit_object(module)
        with llvm._parsed_for_host(text) as (module, machine):
            ours = llvm._emit_object(machine, module)
        assert ours == theirs


def test_links_and_calls_while_another_thread_compiles():
    twice = llvm.compile_module(TWICE).object_code
    failures = []

    def compile_repeatedly():
        try:
            for _ in range(5):
                assert llvm.compile_module(KERNEL).object_code
        except Exception as error:  # reported on the main thread
            failures.append(error)

    compiler = threading.Thread(target=compile_repeatedly)
    compiler.start()
    results = []
    while compiler.is_alive() or not results:
        library = llvm.load(twice, ["twice"])
        function = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(library.addresses["twice"])
        results.append(function(len(results)))
    compiler.join()
    assert not failures
    assert results == [2 * index for index in range(len(results))]


@pytest.mark.parametrize("name", ["LLVMPY_RunNewModulePassManager",
                                  "LLVMPY_TargetMachineEmitToMemory"])
def test_the_unlocked_functions_are_llvmlites_own(name):
    # llvmlite's wrapper keeps the ctypes function it locks around in ``_cfn``
    assert llvm._unlocked(name) is getattr(ffi.lib, name)._cfn
