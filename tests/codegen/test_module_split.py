"""A module of several kernels is compiled in parts on two threads (``codegen/module_split``,
``llvm.compile_module``): the parts link into one library whose results equal NumPy's and
the single-thread build's, and the split keeps each function defined exactly once where
that matters (roots, exported functions, variables) while copying stateless helpers.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from tracejit import codegen, tracer
from tracejit.codegen import llvm, module_split

TWO_KERNELS = '''
@"table" = private constant [2 x i64] [i64 3, i64 4]
@"tj_pool" = external global [13 x i64]
define internal i64 @"helper"(i64 %".1")
{
entry:
  %".3" = mul i64 %".1", 3
  ret i64 %".3"
}
define internal i64 @"k0_a"(i64 %".1")
{
entry:
  %".3" = call i64 @"helper"(i64 %".1")
  ret i64 %".3"
}
define internal i64 @"k1_b"(i64 %".1")
{
entry:
  %".3" = call i64 @"helper"(i64 %".1")
  %".4" = call i64 @"k0_a"(i64 %".3")
  ret i64 %".4"
}
define i64 @"entry"(i64 %".1")
{
entry:
  %".3" = call i64 @"k0_a"(i64 %".1")
  %".4" = call i64 @"k1_b"(i64 %".3")
  ret i64 %".4"
}
'''


def defined(text):
    return re.findall(r'^define (internal )?\S+ @"(\w+)"', text, re.M)


def test_roots_go_to_parts_helpers_are_copied_and_cross_calls_are_declared():
    first, second = module_split.split(TWO_KERNELS, 2, min_lines=0)
    assert ("", "entry") in defined(first)  # exported functions stay in the first part
    homes = {name: part for part, text in enumerate((first, second))
             for _, name in defined(text) if name.startswith("k")}
    assert sorted(homes) == ["k0_a", "k1_b"] and len(set(homes.values())) == 2
    # k0_a is called from both parts: external where it is defined, declared elsewhere
    home, other = (first, second) if homes["k0_a"] == 0 else (second, first)
    assert ("", "k0_a") in defined(home)
    assert 'declare i64 @"k0_a"(i64 %".1")' in other
    for text in (first, second):
        if any(name.startswith("k") for _, name in defined(text)):
            # the stateless helper is copied, internal, wherever a kernel calls it
            assert ("internal ", "helper") in defined(text)
        assert text.count('@"table" = private constant') == 1  # constants are copied


def test_a_variable_or_a_small_module_is_never_split():
    with_counter = TWO_KERNELS + '@"counts" = global [2 x i64] zeroinitializer\n'
    assert module_split.split(with_counter, 2, min_lines=0) == [with_counter]
    assert module_split.split(TWO_KERNELS, 2) == [TWO_KERNELS]  # under MIN_LINES
    assert module_split.split(TWO_KERNELS, 1, min_lines=0) == [TWO_KERNELS]


def test_a_kernel_calling_an_exported_function_declares_it_in_its_part():
    """The GEMM module's kernels call its exported epilogue entry."""
    text = TWO_KERNELS.replace(
        '  %".4" = call i64 @"k0_a"(i64 %".3")\n  ret i64 %".4"\n}\ndefine i64 @"entry"',
        '  %".4" = call i64 @"api"(i64 %".3")\n  ret i64 %".4"\n}\ndefine i64 @"entry"')
    text += ('define i64 @"api"(i64 %".1")\n{\nentry:\n'
             '  %".3" = add i64 %".1", 1\n  ret i64 %".3"\n}\n')
    assert '@"api"(i64 %".3")' in text
    parts = module_split.split(text, 2, min_lines=0)
    assert len(parts) == 2
    caller = next(part for part in parts if 'define i64 @"k1_b"' in part)
    if 'define i64 @"api"' not in caller:
        assert 'declare i64 @"api"(i64 %".1")' in caller
    objects = [llvm.compile_module(part).object_code for part in parts]
    library = llvm.load(llvm._bundle(objects), ["entry"])
    entry = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(library.addresses["entry"])
    assert entry(5) == 5 * 3 * 3 + 1  # k1_b(k0_a(5)) = api(3 * 15)


def test_an_internal_entry_stays_with_its_python_entry_and_its_kernels_are_roots():
    """A program's entry is internal, called by ``{entry}_py`` alone
    (``python_entry.add_python_entry``): the kernels it calls still go to the parts."""
    text = TWO_KERNELS.replace('define i64 @"entry"', 'define internal i64 @"entry"')
    text += ('define i64 @"entry_py"(i64 %".1")\n{\nentry:\n'
             '  %".3" = call i64 @"entry"(i64 %".1")\n  ret i64 %".3"\n}\n')
    parts = module_split.split(text, 2, min_lines=0)
    assert len(parts) == 2
    first = next(part for part in parts if 'define i64 @"entry_py"' in part)
    assert ("internal ", "entry") in defined(first)
    assert sum('@"entry"(' in part for part in parts if part is not first) == 0
    objects = [llvm.compile_module(part).object_code for part in parts]
    library = llvm.load(llvm._bundle(objects), ["entry_py"])
    entry = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(library.addresses["entry_py"])
    assert entry(5) == 5 * 3 * 3 * 3


def test_kernels_sharing_most_of_their_code_are_not_split():
    """Each part would compile the shared function again: no time saved, CPU doubled."""
    body = "".join(f'  %"v{i + 1}" = add i64 %"v{i}", {i}\n' for i in range(60))
    big_helper = TWO_KERNELS.replace(
        '  %".3" = mul i64 %".1", 3\n  ret i64 %".3"',
        '  %"v0" = mul i64 %".1", 3\n' + body + '  ret i64 %"v60"')
    assert big_helper != TWO_KERNELS
    assert module_split.split(big_helper, 2, min_lines=0) == [big_helper]


def test_split_parts_link_and_run():
    parts = module_split.split(TWO_KERNELS, 2, min_lines=0)
    objects = [llvm.compile_module(text).object_code for text in parts]
    library = llvm.load(llvm._bundle(objects), ["entry"])
    entry = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(library.addresses["entry"])
    assert entry(5) == 5 * 3 * 3 * 3  # k1_b(k0_a(5)) = k0_a(3 * 15)


def model(x, w1, b1, w2):
    """Several kernels: matmuls with epilogues, a softmax's reductions, a log."""
    hidden = np.tanh(x @ w1 + b1)
    scores = hidden @ w2
    shifted = scores - scores.max(axis=1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    return np.log(probabilities + 1e-3).mean(axis=0), hidden.sum(axis=1)


def inputs(rows, seed):
    rng = np.random.default_rng([seed, rows])
    return (rng.standard_normal((rows, 48)).astype(np.float32),
            rng.standard_normal((48, 40)).astype(np.float32) * 0.2,
            rng.standard_normal(40).astype(np.float32),
            rng.standard_normal((40, 10)).astype(np.float32) * 0.2)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_program_compiled_in_parts_equals_numpy(monkeypatch, threads):
    monkeypatch.setattr(llvm, "COMPILE_THREADS", threads)
    monkeypatch.setattr(module_split, "MIN_LINES", 0)
    example = inputs(33, 0)
    program = codegen.compile(tracer.trace(model, *example, dynamic=True).graph)
    parts = program.optimized_ir.count(llvm.PART_SEPARATOR) + 1
    assert len(program.kernels) >= 3
    assert parts == threads
    assert program.object_code.startswith(b"\x7fELF") == (threads == 1)
    assert program.assembly.count(".text") >= threads  # every part renders
    for seed, rows in enumerate([33, 40, 64]):  # the bucket of the example's 33 rows
        arguments = inputs(rows, seed + 1)
        for actual, expected in zip(program(*arguments), model(*arguments)):
            np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=2e-5)


def test_the_background_compile_thread_compiles_on_its_own(monkeypatch):
    """runtime/background.py's thread leaves the second core to the program."""
    import threading

    monkeypatch.setattr(llvm, "COMPILE_THREADS", 2)
    monkeypatch.setattr(module_split, "MIN_LINES", 0)
    results = {}

    def background():
        llvm.compile_on_this_thread_only()
        results["background"] = llvm.compile_module(TWO_KERNELS)

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    results["caller"] = llvm.compile_module(TWO_KERNELS)
    assert llvm.PART_SEPARATOR not in results["background"].llvm_ir
    assert llvm.PART_SEPARATOR in results["caller"].llvm_ir
