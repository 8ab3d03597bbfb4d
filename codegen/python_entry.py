"""A program's native entry as a Python builtin: ``native(arrays, *dims) -> status``.

Calling the entry through ctypes costs about 0.24 µs (libffi, argument conversion);
CPython calls a builtin function (a ``PyCFunction`` with ``METH_FASTCALL``) in about
0.02 µs. So each program's module gains ``{entry}_py(self, args, nargs)``: it converts the
dims with ``PyLong_AsSsize_t``, releases the GIL around the entry as ctypes did (a long
kernel must not stop the program's other threads, nor a background compile), and returns
the entry's status as a Python int. ``builtin(address, name)`` wraps the linked function
in a builtin function object.

>>> from llvmlite import ir
>>> from tracejit.codegen import llvm
>>> module = ir.Module()
>>> entry = ir.Function(module, ir.FunctionType(ir.IntType(32), [ir.PointerType(),
...                                                            ir.IntType(64)]), "dim_entry")
>>> builder = ir.IRBuilder(entry.append_basic_block())
>>> _ = builder.ret(builder.trunc(entry.args[1], ir.IntType(32)))
>>> name = add_python_entry(module, "dim_entry")
>>> library = llvm.load(llvm.compile_module(str(module)).object_code, [name])
>>> native = builtin(library.addresses[name], name)
>>> native((), 7)
7
"""

from __future__ import annotations

import ctypes

from llvmlite import ir

I32, I64 = ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
METH_FASTCALL = 0x0080


def add_python_entry(module, entry):
    """Add ``{entry}_py``, the ``METH_FASTCALL`` function calling ``entry`` (``i32
    entry(ptr arrays, i64 dim...)``, defined in ``module``) to it; returns its name.
    ``entry`` becomes internal: its one caller is ``{entry}_py``, which LLVM then inlines
    it into, so code generation runs over one function instead of two (each function
    costs LLVM's code generator ~0.7 ms of fixed work: a chain of 10 ops compiled in
    ~1 ms less). Nothing links the entry by name: ``program.link`` exports ``{entry}_py``."""
    name = f"{entry}_py"
    target = module.get_global(entry)
    target.linkage = "internal"
    symbols = len(target.args) - 1
    api = _python_api(module)
    function = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), name)
    _, args, nargs = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    call = function.append_basic_block("call")
    wrong_count = function.append_basic_block("wrong_count")
    failed = function.append_basic_block("failed")
    builder.cbranch(builder.icmp_signed("==", nargs, ir.Constant(I64, symbols + 1)),
                    call, wrong_count)

    builder.position_at_end(wrong_count)
    message = _text(module, f"{name}: expected the arrays and {symbols} dims")
    builder.call(api["PyErr_SetString"], [builder.load(api["PyExc_TypeError"], typ=PTR),
                                          message])
    builder.ret(ir.Constant(PTR, None))

    builder.position_at_end(failed)
    builder.ret(ir.Constant(PTR, None))

    builder.position_at_end(call)
    arrays = builder.load(args, typ=PTR)
    dims = []
    for index in range(1, symbols + 1):
        item = builder.load(builder.gep(args, [ir.Constant(I64, index)], source_etype=PTR),
                            typ=PTR)
        dim = builder.call(api["PyLong_AsSsize_t"], [item])
        # -1 is a dim only in theory; an error (not an int) is set only then.
        minus_one = function.append_basic_block(f"dim{index}_minus_one")
        converted = function.append_basic_block(f"dim{index}_converted")
        builder.cbranch(builder.icmp_signed("==", dim, ir.Constant(I64, -1)), minus_one,
                        converted)
        builder.position_at_end(minus_one)
        error = builder.call(api["PyErr_Occurred"], [])
        builder.cbranch(builder.icmp_unsigned("!=", error, ir.Constant(PTR, None)), failed,
                        converted)
        builder.position_at_end(converted)
        dims.append(dim)
    state = builder.call(api["PyEval_SaveThread"], [])
    status = builder.call(target, [arrays, *dims])
    builder.call(api["PyEval_RestoreThread"], [state])
    builder.ret(builder.call(api["PyLong_FromLong"], [builder.sext(status, I64)]))
    return name


def _python_api(module):
    """The CPython functions the entry calls (resolved in the process when linked)."""
    signatures = {
        "PyLong_AsSsize_t": ir.FunctionType(I64, [PTR]),
        "PyLong_FromLong": ir.FunctionType(PTR, [I64]),
        "PyErr_Occurred": ir.FunctionType(PTR, []),
        "PyErr_SetString": ir.FunctionType(ir.VoidType(), [PTR, PTR]),
        "PyEval_SaveThread": ir.FunctionType(PTR, []),
        "PyEval_RestoreThread": ir.FunctionType(ir.VoidType(), [PTR]),
    }
    api = {}
    for symbol, signature in signatures.items():
        api[symbol] = module.globals.get(symbol) or ir.Function(module, signature, symbol)
    api["PyExc_TypeError"] = (module.globals.get("PyExc_TypeError")
                              or ir.GlobalVariable(module, PTR, "PyExc_TypeError"))
    return api


def _text(module, text):
    data = bytearray(text.encode()) + b"\0"
    constant = ir.Constant(ir.ArrayType(ir.IntType(8), len(data)), data)
    variable = ir.GlobalVariable(module, constant.type, module.get_unique_name("message"))
    variable.global_constant = True
    variable.linkage = "private"
    variable.initializer = constant
    return variable


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


def builtin(address, name):
    """A builtin function object calling the ``{entry}_py`` function at ``address``. It
    keeps its method record alive; the caller keeps the native code loaded."""
    method = _MethodDef(name.encode(), address, METH_FASTCALL, None)
    # The builtin points at the record without owning it: it lives in self, which the
    # function object holds, so the record is freed with the function.
    return _new_function(ctypes.addressof(method), method, None)
