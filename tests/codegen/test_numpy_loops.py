"""NumPy's own math loops called from compiled code (``codegen/numpy_loops.py``): found in
the ufunc struct, checked bit for bit, and called per chunk from an LLVM kernel with the
arrays on the stack, giving NumPy's bits on hostile data at any chunk size and offset."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from tracejit.codegen import llvm, numpy_loops
from tracejit.codegen.counted_loop import counted_loop

I64, PTR = ir.IntType(64), ir.PointerType()


def chunked_kernel(name, dtype, chunk):
    """``kernel(x..., out, n)``: NumPy's loop on each ``chunk`` of the n elements, then
    ``out = out * 2 + 1`` on the chunk (a fused step after the call), as one kernel."""
    nin = numpy_loops.loop(name, dtype).nin
    element = ir.DoubleType() if np.dtype(dtype) == np.float64 else ir.FloatType()
    module = ir.Module(name="numpy_loop_kernel")
    kernel = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * (nin + 1) + [I64]),
                         "kernel")
    builder = ir.IRBuilder(kernel.append_basic_block("entry"))
    *pointers, n = kernel.args
    chunks = builder.udiv(builder.add(n, I64(chunk - 1)), I64(chunk))

    def one_chunk(index):
        start = builder.mul(index, I64(chunk))
        count = builder.sub(n, start)
        count = builder.select(builder.icmp_signed("<", count, I64(chunk)), count, I64(chunk))
        here = [builder.gep(pointer, [start], source_etype=element) for pointer in pointers]
        numpy_loops.emit_call(builder, name, dtype, here, count)

        def fused(i):
            slot = builder.gep(here[-1], [i], source_etype=element)
            value = builder.load(slot, typ=element)
            builder.store(builder.fadd(builder.fmul(value, element(2.0)), element(1.0)), slot)
        counted_loop(builder, I64(0), count, fused, label="fused")

    counted_loop(builder, I64(0), chunks, one_chunk, label="chunks")
    builder.ret_void()
    compiled = llvm.compile_module(str(module))
    library = llvm.load(compiled.object_code, ["kernel"],
                        numpy_loops.symbols(compiled.object_code))
    function = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (nin + 1), ctypes.c_int64)(
        library.addresses["kernel"])

    def run(*inputs):
        out = np.empty_like(inputs[0])
        function(*[a.ctypes.data for a in (*inputs, out)], out.size)
        return out
    run.library = library  # keep the code loaded
    return run


def hostile(dtype, size, seed):
    rng = np.random.default_rng(seed)
    info = np.finfo(dtype)
    with np.errstate(all="ignore"):
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal,
                         -info.smallest_subnormal, info.tiny * 3, info.max, -info.max,
                         709.7, -745.0, 88.6, -103.0, 1e-310, 1e300], dtype)
        x = (rng.standard_normal(size) * rng.choice([1, 30, 1e3], size)).astype(dtype)
    picks = rng.random(size) < 0.2
    x[picks] = rng.choice(pool, picks.sum())
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "log1p", "sin", "power"])
@pytest.mark.parametrize("chunk", [1, 7, 1024])
def test_kernel_calling_numpys_loop_has_numpys_bits(name, dtype, chunk):
    run = chunked_kernel(name, dtype, chunk)
    for size, offset in ((1, 0), (1000, 1), (5003, 3)):
        x = hostile(dtype, size + offset, seed=size)[offset:]
        inputs = (x, np.roll(hostile(dtype, size, seed=7), 1)) if name == "power" else (x,)
        with np.errstate(all="ignore"):
            expected = getattr(np, name)(*inputs) * dtype(2) + dtype(1)
        got = run(*inputs)
        bits = np.int64 if dtype == np.float64 else np.int32
        assert np.array_equal(got.view(bits), expected.view(bits)), (name, size, offset)


def test_a_loop_that_disagrees_is_refused(monkeypatch):
    """The self-check keeps our own implementation when the entry's bits differ from the
    ufunc's: exp's second 'd->d' entry (a libm loop) offered as the first is refused."""
    numpy_loops.loop.cache_clear()
    try:
        real = numpy_loops._entry
        types = np.exp.types

        def second_entry(ufunc, signature):
            if ufunc is not np.exp or signature != "d->d" or types.count("d->d") < 2:
                return real(ufunc, signature)
            struct = numpy_loops._UFunc.from_address(id(ufunc))
            index = types.index("d->d", types.index("d->d") + 1)
            return struct.functions[index], (struct.data[index] if struct.data else 0) or 0

        monkeypatch.setattr(numpy_loops, "_entry", second_entry)
        if types.count("d->d") < 2:
            pytest.skip("this NumPy lists exp's d->d once")
        x = numpy_loops._probe(np.dtype(np.float64), 1, "exp")[0]
        other = numpy_loops.Loop("exp", np.dtype(np.float64), 1,
                                 *second_entry(np.exp, "d->d"), ctypes.c_void_p())
        with np.errstate(all="ignore"):
            same = np.array_equal(other.run(x).view(np.int64), np.exp(x).view(np.int64))
        if same:
            pytest.skip("libm's exp agrees with NumPy's on the probe here")
        assert numpy_loops.loop("exp", np.float64) is None
    finally:
        numpy_loops.loop.cache_clear()


def test_layout_mismatch_is_refused():
    """A struct that does not read back as the ufunc (here: the wrong type signature) gives
    None, never a guessed pointer."""
    assert numpy_loops._entry(np.exp, "q->q") is None
    assert numpy_loops.loop("isnan", np.float64) is None  # output bool: not d->d
    assert numpy_loops.loop("exp", np.int64) is None


def test_many_chunks_keep_the_stack_flat():
    """A million one-element chunks: the call's arrays live in the entry block's frame
    (an alloca per trip would take ~50 MB of stack and crash)."""
    run = chunked_kernel("exp", np.float64, 1)
    x = hostile(np.float64, 1_000_000, seed=3)
    with np.errstate(all="ignore"):
        expected = np.exp(x) * 2.0 + 1.0
    assert np.array_equal(run(x).view(np.int64), expected.view(np.int64))


def steps(x, w):
    """Float64 math a loss and its gradient use, into a mask (what a guard reads)."""
    z = x * w
    a = 1.0 / (1.0 + np.exp(-z))
    cost = np.log(a + 1e-3) + np.tanh(z) + np.log1p(np.abs(z)) + np.sin(z) + np.expm1(z)
    return cost, cost > 0.5


@pytest.mark.parametrize("switch", ["1", "0"])
def test_switch_gives_compiled_math_numpys_bits(monkeypatch, switch):
    """With ``TRACEJIT_NUMPY_MATH=1`` compiled float64 math equals eager NumPy in every
    bit on hostile data; without it our own math differs somewhere (so the first half of
    this test can fail)."""
    from tracejit import jit
    from tracejit.codegen import numpy_loops

    monkeypatch.setattr(numpy_loops, "_setting", numpy_loops._setting)  # put back after
    monkeypatch.setenv("TRACEJIT_NUMPY_MATH", switch)  # jit() hands it to codegen
    x = hostile(np.float64, 20000, seed=11)
    x[~np.isfinite(x)] = 0.5
    x = np.clip(x, -700, 700)
    w = np.full_like(x, 0.75)
    with np.errstate(all="ignore"):
        eager, eager_mask = steps(x, w)
        compiled = jit(steps, cache="memory")
        for _ in range(3):
            got, mask = compiled(x, w)
    assert compiled.stats()["compiled_calls"] >= 2, compiled.explain()
    same = np.array_equal(got.view(np.int64), eager.view(np.int64))
    assert same == (switch == "1")
    if switch == "1":
        assert np.array_equal(mask, eager_mask)
