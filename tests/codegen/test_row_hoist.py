"""Values that depend on the row alone are computed once per row, before the inner loop
(``codegen/row_hoist.py``), and small row kernels are optimized for size
(``codegen/lowering.py`` ``SMALL_KERNEL_ELEMENTS``): compiled results equal eager NumPy's,
and the log of a row sum a cross-entropy reads back is outside its class loop.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.codegen import lowering


def _cross_entropy(logits, labels):
    log_probs = nn.log_softmax(logits)
    onehot = labels[:, None] == np.arange(logits.shape[-1])
    return -np.sum(np.where(onehot, log_probs, 0), axis=1)


def _row_scaled(x, s):
    # exp(s) per row, read along the row: a pointwise kernel and a row sum
    scaled = x * np.exp(s)[:, None]
    return scaled, scaled.sum(axis=1), np.log(s + 2.0)[:, None] - x


def _leading_sum(x, s):
    # a sum over the leading axis whose inner (kept) loop reads a value of the row alone
    return (x * np.sqrt(s)[:, None]).sum(axis=0)


def _run_compiled(function, *args, dynamic=False):
    """The compiled run's results (the second call: the first may run the trace) and the
    variant's LLVM IR as lowering emitted it (before LLVM's passes)."""
    jitted = tj.jit(function, cache="memory", fallback="raise", dynamic=dynamic)
    jitted(*args)
    result = jitted(*args)
    assert jitted.stats()["compiled_calls"] >= 1, jitted.stats()
    return result, jitted.lower(*args)._program.llvm_ir


def _blocks(function_text):
    """``{label: (lines, successors)}`` of one LLVM function's text."""
    blocks, label = {}, None
    for line in function_text.splitlines():
        match = re.match(r'^"?([\w.]+)"?:', line)
        if match:
            label = match.group(1)
            blocks[label] = ([], [])
        elif label is not None:
            blocks[label][0].append(line)
            if line.strip().startswith("br "):
                blocks[label][1].extend(re.findall(r'label %"?([\w.]+)"?', line))
    return blocks


def _reach(blocks, start, avoid):
    """Labels reachable from ``start``'s successors without entering ``avoid``."""
    seen, stack = set(), [label for label in blocks[start][1] if label != avoid]
    while stack:
        label = stack.pop()
        if label not in seen:
            seen.add(label)
            stack.extend(successor for successor in blocks[label][1] if successor != avoid)
    return seen


def _function_text(llvm_ir, name):
    start = llvm_ir.rindex("define", 0, llvm_ir.index(f'@"{name}"('))
    return llvm_ir[start:llvm_ir.index("\n}", start)]


def _impl_functions(llvm_ir):
    return re.findall(r'define internal void @"(k\d+_\w+_impl)"', llvm_ir)


def _in_inner_loops(llvm_ir, name, callee):
    """Is a call of ``callee`` in ``name`` inside a loop nested in the function's first
    loop (``loop``, the rows): on a path from a later loop header (``loop.1``, ...) back
    to it that does not leave through its exit (``loop.end.1``, ``counted_loop``'s names)?"""
    blocks = _blocks(_function_text(llvm_ir, name))
    calling = {label for label, (lines, _) in blocks.items()
               if any(callee in line for line in lines)}
    assert calling
    for header in blocks:
        if re.fullmatch(r"loop\.\d+", header):
            exit_label = "loop.end." + header.split(".")[1]
            body = {label for label in _reach(blocks, header, exit_label)
                    if header in _reach(blocks, label, exit_label)}
            if calling & body:
                return True
    return False


@pytest.mark.parametrize("classes", [1, 10])
def test_cross_entropy_computes_the_log_of_the_row_sum_once_per_row(classes):
    rng = np.random.default_rng(classes)
    logits = rng.standard_normal((67, classes)).astype(np.float32) * 4
    labels = rng.integers(0, classes, 67)
    result, llvm_ir = _run_compiled(_cross_entropy, logits, labels)
    np.testing.assert_allclose(result, _cross_entropy(logits, labels), rtol=2e-6, atol=2e-6)
    if classes == 1:
        return  # a class loop of one trip: nothing to take out of it
    # the kernel that reads log(sum) back: its log's rare path is in the row loop alone
    readers = [name for name in _impl_functions(llvm_ir)
               if "tracejit_slow_log_f32" in _function_text(llvm_ir, name)]
    assert readers
    for name in readers:
        assert not _in_inner_loops(llvm_ir, name, "tracejit_slow_log_f32"), name


@pytest.mark.parametrize("shape", [(5, 7), (1, 129), (4, 0)])
def test_row_values_read_along_the_row_equal_numpy(shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    s = rng.uniform(-1.5, 3.0, shape[0]).astype(np.float32)  # log(s + 2) of a negative: NaN
    with np.errstate(all="ignore"):
        result, _ = _run_compiled(_row_scaled, x, s)
        for got, expected in zip(result, _row_scaled(x, s)):
            np.testing.assert_allclose(got, expected, rtol=3e-6, atol=1e-6)


def test_dynamic_rows_and_leading_sums_equal_numpy():
    """Symbolic row lengths (hoisted where the bucket's least length is 1 or more), and a
    reduction over the leading axis whose kept loop reads a value of the reduced row."""
    rng = np.random.default_rng(6)
    for rows, columns in ((6, 9), (9, 14)):
        x = rng.standard_normal((rows, columns))
        s = rng.uniform(0.0, 4.0, rows)
        result, _ = _run_compiled(_leading_sum, x, s, dynamic=True)
        np.testing.assert_allclose(result, _leading_sum(x, s), rtol=1e-12, atol=1e-12)
        logits = (x * 3).astype(np.float32)
        labels = rng.integers(0, columns, rows)
        result, _ = _run_compiled(_cross_entropy, logits, labels, dynamic=True)
        np.testing.assert_allclose(result, _cross_entropy(logits, labels), rtol=2e-6,
                                   atol=2e-6)


def test_small_row_kernels_are_optimized_for_size_and_large_ones_are_not():
    rng = np.random.default_rng(3)
    small = rng.standard_normal((64, 10)).astype(np.float32)
    large = rng.standard_normal((256, 1024)).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    _, small_ir = _run_compiled(_cross_entropy, small, labels)
    _, large_ir = _run_compiled(_cross_entropy, large, rng.integers(0, 1024, 256))
    attribute = lowering.SMALL_KERNEL_ATTRIBUTE

    def marked(llvm_ir):
        return [line for line in llvm_ir.splitlines()
                if line.startswith("define internal void @\"k") and "_impl\"" in line
                and attribute in line.split(")")[-1]]

    assert marked(small_ir)
    assert not marked(large_ir)
