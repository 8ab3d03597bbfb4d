"""NumPy's own inner loops for float64/float32 math ufuncs, callable from compiled code,
so a compiled ``exp``/``log``/``tanh``/... has NumPy's bits (``pointwise.math_function``
lowers through it; ``docs/experiments/numpy_exact_math/README.md``).

Why: a value that feeds a guard or a mask through a loop carries a worst-case error bound
(``tracer/loop_bounds.py``) when its math is our own (a few ulp from NumPy's SIMD exp/log);
with NumPy's loop the value is NumPy's to the bit and carries none.

Where the loops are: a ufunc is a ``PyUFuncObject`` (public C layout of NumPy 2.x,
``numpy/ufuncobject.h``): ``PyObject_HEAD; int nin, nout, nargs, identity;
PyUFuncGenericFunction *functions; void **data; int ntypes, reserved1; const char *name;
char *types; ...``. NumPy runs the FIRST entry whose types match (``exp`` lists ``d->d``
twice; the second is a libm loop with other bits). Each loop is
``void loop(char **args, npy_intp *dims, npy_intp *steps, void *data)``: pure C, no GIL.

``loop(name, dtype)`` is that entry, or None when the layout does not read back as the
ufunc (name, nin, nout, the type string) or the loop's output on a hostile probe (NaN,
+-Inf, denormals, huge, odd offsets and lengths) differs from the ufunc's in any bit: then
the caller keeps its own implementation.

>>> import numpy as np
>>> found = loop("exp", np.float64)
>>> x = np.array([0.0, 1.0, -745.2, np.nan])
>>> found is None or np.array_equal(found.run(x).view(np.int64), np.exp(x).view(np.int64))
True

Compiled code imports ``symbol_name(name, dtype)`` (the loop) and its ``_data`` cell by
symbol (``symbols(object_code)``), so object code stays relocatable; ``emit_call`` builds
the ``args``/``dims``/``steps`` arrays on the stack for one chunk.
"""

from __future__ import annotations

import ctypes
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from llvmlite import ir

from tracejit.tracer import exact_math

I64 = ir.IntType(64)
PTR = ir.PointerType()
# The math ufuncs that qualify: one NumPy loop per call, elementwise, no state.
UNARY = ("exp", "log", "tanh", "log1p", "expm1", "sin", "cos", "tan", "arcsin", "arccos",
         "arctan", "sinh", "cosh", "arcsinh", "arccosh", "arctanh", "exp2", "log2", "log10",
         "sqrt", "cbrt")
BINARY = ("power", "arctan2", "hypot")
LETTER = {np.dtype(np.float64): "d", np.dtype(np.float32): "f"}


class _UFunc(ctypes.Structure):
    _fields_ = [("ob_refcnt", ctypes.c_ssize_t), ("ob_type", ctypes.c_void_p),
                ("nin", ctypes.c_int), ("nout", ctypes.c_int), ("nargs", ctypes.c_int),
                ("identity", ctypes.c_int), ("functions", ctypes.POINTER(ctypes.c_void_p)),
                ("data", ctypes.POINTER(ctypes.c_void_p)), ("ntypes", ctypes.c_int),
                ("reserved1", ctypes.c_int), ("name", ctypes.c_char_p),
                ("types", ctypes.POINTER(ctypes.c_char))]


_LOOP = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p),
                         ctypes.POINTER(ctypes.c_ssize_t), ctypes.POINTER(ctypes.c_ssize_t),
                         ctypes.c_void_p)


@dataclass(frozen=True)
class Loop:
    name: str
    dtype: np.dtype
    nin: int
    function: int   # address of the inner loop
    data: int       # its ``void *data`` (0 for NULL)
    # A cell holding ``data``: compiled code loads it through an imported symbol.
    data_cell: ctypes.c_void_p

    def run(self, *inputs):
        """The loop on contiguous ``inputs`` through ctypes (for checks)."""
        inputs = [np.ascontiguousarray(x, self.dtype) for x in inputs]
        out = np.empty_like(inputs[0])
        arrays = (*inputs, out)
        args = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        steps = (ctypes.c_ssize_t * len(arrays))(*[self.dtype.itemsize] * len(arrays))
        _LOOP(self.function)(args, (ctypes.c_ssize_t * 1)(out.size), steps,
                             self.data or None)
        return out


def _entry(ufunc, signature):
    """(function, data) of the first entry of ``ufunc.types`` equal to ``signature``,
    read from the C struct after checking it describes this ufunc; None otherwise."""
    struct = _UFunc.from_address(id(ufunc))
    if (struct.nin, struct.nout, struct.ntypes) != (ufunc.nin, ufunc.nout, ufunc.ntypes):
        return None
    if struct.name != ufunc.__name__.encode():
        return None
    nargs = ufunc.nin + ufunc.nout
    letters = ufunc.types  # 'dd->d'; the C array is nargs type numbers per entry
    if signature not in letters:
        return None
    index = letters.index(signature)
    numbers = [np.dtype(c).num for c in signature.replace("->", "")]
    raw = [struct.types[index * nargs + i][0] for i in range(nargs)]
    if raw != numbers or not struct.functions[index]:
        return None
    return struct.functions[index], (struct.data[index] if struct.data else None) or 0


def _probe(dtype, nin, name):
    """Hostile inputs: NaN, +-Inf, +-0, denormals, the largest and smallest, near the
    overflow and underflow edges, and a spread of normal values."""
    info = np.finfo(dtype)
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal,
               -info.smallest_subnormal, info.tiny, info.max, -info.max, 1.0, -1.0,
               709.78, -745.1, 88.7, -103.9, 1e-300, 0.5, 2.0, 1e300]
    spread = np.concatenate([_spread(3000, 1) * 90, _spread(1000, 2) * 3,
                             np.exp(_spread(1000, 3) * 700)])
    with np.errstate(all="ignore"):
        first = np.concatenate([special, spread]).astype(dtype)
        if nin == 1:
            return (first,)
        second = np.roll(first, 7)
        if name == "power":
            second = np.concatenate([[0.5, 2.0, 3.0, -1.0, 0.0, np.nan, np.inf, 1.7],
                                     _spread(first.size - 8, 4) * 8]).astype(dtype)
        return first, second


def _spread(count, seed):
    """``count`` values spread over (-1, 1) (a Weyl sequence), with no ``np.random``: this
    runs inside a trace (the margin rules ask ``exact_loop``), where importing np.random is
    what ``tracer/random_draws.unseen_draw`` reads as a draw the trace could not see."""
    step = (np.sqrt(5.0 + 2 * seed) - 1.0) / 2.0
    return (np.arange(1, count + 1) * step) % 1.0 * 2.0 - 1.0


def _bits(a):
    return a.view(np.int64 if a.dtype == np.float64 else np.int32)


def _agrees(found, ufunc, inputs):
    """The loop's output equals the ufunc's in every bit, whole and in odd chunks."""
    with np.errstate(all="ignore"):
        expected = _bits(ufunc(*inputs))
        if not np.array_equal(_bits(found.run(*inputs)), expected):
            return False
        for start, length in ((1, 255), (3, 7), (17, 1), (5, 1023)):
            chunk = [x[start:start + length] for x in inputs]
            if not np.array_equal(_bits(found.run(*chunk)), expected[start:start + length]):
                return False
    return True


@lru_cache(maxsize=None)
def loop(name, dtype):
    """NumPy's loop for ``np.<name>`` on ``dtype`` (float64 or float32), checked bit for
    bit on the probe at first use; None where it cannot be found or does not agree."""
    dtype = np.dtype(dtype)
    ufunc = getattr(np, name, None)
    if not isinstance(ufunc, np.ufunc) or dtype not in LETTER or ufunc.nout != 1:
        return None
    letter = LETTER[dtype]
    entry = _entry(ufunc, letter * ufunc.nin + "->" + letter)
    if entry is None:
        return None
    function, data = entry
    found = Loop(name, dtype, ufunc.nin, function, data, ctypes.c_void_p(data or None))
    return found if _agrees(found, ufunc, _probe(dtype, ufunc.nin, name)) else None


class Unusable(ValueError):
    """Code that calls a NumPy loop this process cannot use (a cache entry made under
    another NumPy: the disk cache then recompiles it)."""


def symbol_name(name, dtype):
    return f"tj_np_{name}_{LETTER[np.dtype(dtype)]}"


def symbols(object_code=b""):
    """``{symbol: address}`` of the loops (and their data cells) ``object_code`` names."""
    imports = {}
    for name in UNARY + BINARY:
        for dtype in LETTER:
            symbol = symbol_name(name, dtype)
            if symbol.encode() not in object_code:
                continue
            found = loop(name, dtype)
            if found is None:
                raise Unusable(f"NumPy's {name} loop for {dtype} is not usable here")
            imports[symbol] = found.function
            imports[symbol + "_data"] = ctypes.addressof(found.data_cell)
    return imports


@contextmanager
def _stack_frame(builder):
    """Allocas made inside are freed after (``llvm.stacksave``/``stackrestore``): an
    alloca in a loop body otherwise grows the stack every trip. (Allocas in the entry
    block would need every kernel builder to leave it open; this does not.)"""
    module = builder.module
    save = module.globals.get("llvm.stacksave.p0") or ir.Function(
        module, ir.FunctionType(PTR, []), "llvm.stacksave.p0")
    restore = module.globals.get("llvm.stackrestore.p0") or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [PTR]), "llvm.stackrestore.p0")
    saved = builder.call(save, [])
    yield
    builder.call(restore, [saved])


def _call(builder, name, dtype, pointers, count):
    module = builder.module
    symbol = symbol_name(name, dtype)
    function_type = ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, PTR])
    function = module.globals.get(symbol) or ir.Function(module, function_type, symbol)
    cell = module.globals.get(symbol + "_data")
    if cell is None:
        cell = ir.GlobalVariable(module, PTR, symbol + "_data")
        cell.linkage = "external"
    itemsize = np.dtype(dtype).itemsize
    # (inside the caller's ``_stack_frame``)
    args = builder.alloca(PTR, len(pointers))
    steps = builder.alloca(I64, len(pointers))
    dims = builder.alloca(I64)
    for i, pointer in enumerate(pointers):
        builder.store(pointer, builder.gep(args, [I64(i)], source_etype=PTR))
        builder.store(I64(itemsize), builder.gep(steps, [I64(i)], source_etype=I64))
    builder.store(count, dims)
    builder.call(function, [args, dims, steps, builder.load(cell, typ=PTR)])


def emit_call(builder, name, dtype, pointers, count):
    """Call NumPy's loop for ``np.<name>`` on ``count`` contiguous elements: ``pointers``
    are the inputs' then the output's addresses (``ptr``). Emits only symbol references;
    the caller checks ``loop(name, dtype)`` is not None before choosing this path."""
    with _stack_frame(builder):
        _call(builder, name, dtype, pointers, count)


# The setting (``TRACEJIT_NUMPY_MATH``, read at the runtime's edge and handed over by
# ``runtime.config.configure_codegen``: codegen reads no environment itself): the dtypes
# whose math functions below compiled code computes with NumPy's loops in every lowering
# (chunks in flat kernels, ``codegen/numpy_math_chunks.py``; one element per call
# elsewhere), so their results are NumPy's bits and carry no margin
# (``tracer/exact_math``). float64 by default: NumPy's AVX-512 float64 loops run as fast
# as our own (docs/experiments/numpy_exact_math). float32 only on request: our own float32
# math is 2.5x faster than NumPy's. A loop that fails its check keeps our own math (and
# its margin) for that function.
EXACT_FUNCTIONS = ("exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "tanh", "sin",
                   "cos", "tan")
SETTINGS = {"0": (), "1": (np.dtype(np.float64),),
            "all": (np.dtype(np.float64), np.dtype(np.float32))}
DEFAULT_SETTING = "1"
_setting = DEFAULT_SETTING


def set_numpy_math(setting):
    """Lower the math of ``SETTINGS[setting]``'s dtypes through NumPy's loops for the
    functions compiled from now on (None: the default); the tracer's margins follow."""
    global _setting
    _setting = DEFAULT_SETTING if setting in (None, "") else str(setting)


def setting():
    """The setting's dtypes (``["float64"]``), part of the disk cache key
    (``llvm.host_description``); an unknown setting is named as given."""
    if _setting not in SETTINGS:
        return [f"unknown {_setting!r}"]
    return [str(dtype) for dtype in SETTINGS[_setting]]


def exact_loop(name, dtype):
    """NumPy's loop for ``np.<name>`` on ``dtype`` when the setting lowers it so and the
    loop passed its check; None otherwise (our own math)."""
    if _setting not in SETTINGS:  # compiling fails: the function runs eagerly
        raise ValueError(f"TRACEJIT_NUMPY_MATH must be one of {', '.join(SETTINGS)}, "
                         f"not {_setting!r}")
    dtype = np.dtype(dtype)
    if name not in EXACT_FUNCTIONS or dtype not in SETTINGS[_setting]:
        return None
    return loop(name, dtype)


def _exact(name, dtype):
    """What the tracer's margins ask (``tracer/exact_math``): an unknown setting claims
    nothing (compiling fails on it anyway)."""
    return _setting in SETTINGS and exact_loop(name, dtype) is not None


exact_math.set_source(_exact)


def emit_scalar(builder, name, dtype, *values):
    """``np.<name>(*values)`` on scalars, through NumPy's loop with a count of 1 (the
    self-check and tests/codegen/test_numpy_loops.py check one-element calls): where a
    value is computed one element at a time (reductions, nested loops, epilogues)."""
    element = values[0].type
    with _stack_frame(builder):
        slots = [builder.alloca(element) for _ in range(len(values) + 1)]
        for slot, value in zip(slots, values):
            builder.store(value, slot)
        _call(builder, name, dtype, slots, I64(1))
        result = builder.load(slots[-1], typ=element)
    return result
