"""The array part of an entry guard in native code: ``matches(leaves, table) -> bool``.

A compiled call first checks its array arguments: exactly ``ndarray``, the dtype it was
compiled for, the rank and every static dim. In Python that is three attribute reads and
comparisons per array (``arr.shape`` even builds a new tuple of ints), about 400
instructions each: 1.2 µs of an RNN cell's 1.7 µs overhead per step with six arrays. This
builtin reads the same facts from the objects (the NumPy ABI's ``PyArrayObject``: type,
rank, dims and descr pointers at fixed offsets, confirmed at import) for a few
instructions each.

``table`` is an int64 ndarray the guard builds once per variant: ``[count, then per
array: its position in leaves, id(ndarray), id(dtype), ndim, dim_0 .. dim_ndim-1]``, a dim
of -1 being symbolic (the Python guard binds and checks it). ``matches`` is conservative:
an array whose dtype is equal to but not the very object compiled for (an unpickled
array's, a byte-order spelling) does not match here, and the generated guard then runs its
full Python checks, which decide. It compares pointers only, never dereferences what the
table names, and reads a leaf's fields only after its type pointer is ``ndarray``'s.

>>> import numpy as np
>>> x = np.zeros((3, 4), np.float32)
>>> table = make_table([(0, x.dtype, (3, -1))])
>>> match = matcher()
>>> match((x,), table), match((x.astype(np.float64),), table), match((x.T,), table)
(True, False, False)
>>> match((x[:, :2],), table), match((x.tolist(),), table)
(True, False)
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
from llvmlite import ir

from . import llvm, output_reuse, parallel, python_entry
from .lowering import ARRAY_DATA_OFFSET, TUPLE_ITEMS_OFFSET

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
NAME = "tj_arrays_match"
# PyArrayObject (NumPy's ABI, numpy/ndarraytypes.h): data at 16, nd (int) at 24, dimensions
# at 32, descr at 56; ob_type at 8 (CPython's PyObject). Tuple items: lowering's, measured.
TYPE_OFFSET, NDIM_OFFSET, DIMS_OFFSET, DESCR_OFFSET = 8, 24, 32, 56
ANY_DIM = -1


def make_table(arrays):
    """The table for ``arrays``: ``(position in leaves, dtype, dims)`` each, a dim being an
    int or ``ANY_DIM``. The caller keeps the dtypes alive (they are NumPy's singletons)."""
    table = [len(arrays)]
    for position, dtype, dims in arrays:
        table += [position, id(np.ndarray), id(np.dtype(dtype)), len(dims), *dims]
    return np.array(table, dtype=np.int64)


def _function(module):
    """``tj_arrays_match(self, args, nargs)``: METH_FASTCALL over ``(leaves, table)``."""
    bool_from_long = ir.Function(module, ir.FunctionType(PTR, [I64]), "PyBool_FromLong")
    function = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), NAME)
    _, args, nargs = function.args
    block = function.append_basic_block
    start, entry, array_head, array_body = (block("start"), block("entry"), block("array"),
                                            block("array_fields"))
    dim_head, dim_body, dim_check, next_array = (block("dim"), block("dim_body"),
                                                 block("dim_check"), block("next_array"))
    matched, failed = block("matched"), block("failed")
    builder = ir.IRBuilder(start)
    builder.cbranch(builder.icmp_signed("==", nargs, ir.Constant(I64, 2)), entry, failed)
    builder.position_at_end(entry)

    def load(pointer, offset, kind=I64):
        address = builder.gep(pointer, [ir.Constant(I64, offset)], source_etype=I8)
        return builder.load(address, typ=kind)

    def table_at(index):
        return builder.load(builder.gep(table, [index], source_etype=I64), typ=I64)

    leaves = builder.load(args, typ=PTR)
    table_object = builder.load(builder.gep(args, [ir.Constant(I64, 1)], source_etype=PTR),
                                typ=PTR)
    table = load(table_object, ARRAY_DATA_OFFSET, PTR)
    count = table_at(ir.Constant(I64, 0))
    builder.branch(array_head)

    # for each array: i counts arrays, at is its first table field
    builder.position_at_end(array_head)
    i = builder.phi(I64, "i")
    at = builder.phi(I64, "at")
    i.add_incoming(ir.Constant(I64, 0), entry)
    at.add_incoming(ir.Constant(I64, 1), entry)
    builder.cbranch(builder.icmp_signed("<", i, count), array_body, matched)

    builder.position_at_end(array_body)
    position = table_at(at)
    items = builder.gep(leaves, [ir.Constant(I64, TUPLE_ITEMS_OFFSET)], source_etype=I8)
    item = builder.load(builder.gep(items, [position], source_etype=PTR), typ=PTR)
    same_type = builder.icmp_unsigned("==", load(item, TYPE_OFFSET),
                                      table_at(builder.add(at, ir.Constant(I64, 1))))
    fields = function.append_basic_block("fields")
    builder.cbranch(same_type, fields, failed)  # an ndarray's fields may be read from here on
    builder.position_at_end(fields)
    same_descr = builder.icmp_unsigned("==", load(item, DESCR_OFFSET),
                                       table_at(builder.add(at, ir.Constant(I64, 2))))
    ndim = table_at(builder.add(at, ir.Constant(I64, 3)))
    same_ndim = builder.icmp_signed("==", builder.sext(load(item, NDIM_OFFSET, I32), I64), ndim)
    dims = load(item, DIMS_OFFSET, PTR)
    first_dim = builder.add(at, ir.Constant(I64, 4))
    builder.cbranch(builder.and_(same_descr, same_ndim), dim_head, failed)

    builder.position_at_end(dim_head)
    axis = builder.phi(I64, "axis")
    axis.add_incoming(ir.Constant(I64, 0), fields)
    builder.cbranch(builder.icmp_signed("<", axis, ndim), dim_body, next_array)

    builder.position_at_end(dim_body)
    expected = table_at(builder.add(first_dim, axis))
    actual = builder.load(builder.gep(dims, [axis], source_etype=I64), typ=I64)
    free = builder.icmp_signed("==", expected, ir.Constant(I64, ANY_DIM))
    builder.cbranch(builder.or_(free, builder.icmp_signed("==", actual, expected)), dim_check,
                    failed)
    builder.position_at_end(dim_check)
    axis.add_incoming(builder.add(axis, ir.Constant(I64, 1)), dim_check)
    builder.branch(dim_head)

    builder.position_at_end(next_array)
    i.add_incoming(builder.add(i, ir.Constant(I64, 1)), next_array)
    at.add_incoming(builder.add(first_dim, ndim), next_array)
    builder.branch(array_head)

    for outcome, value in ((matched, 1), (failed, 0)):
        builder.position_at_end(outcome)
        builder.ret(builder.call(bool_from_long, [ir.Constant(I64, value)]))
    return function


def module_ir():
    """The hit path's native helpers, one module: this guard and ``output_reuse``'s take."""
    module = ir.Module(name="tracejit_array_guard")
    _function(module)
    output_reuse.add_function(module)
    return str(module)


def _check_layout():
    """The offsets ``matches`` reads, confirmed on this interpreter and NumPy."""
    array = np.zeros((2, 3), np.float32)[:, 1:]
    items = (array,)

    def word(address, kind=ctypes.c_int64):
        return kind.from_address(address).value

    dims = word(id(array) + DIMS_OFFSET)
    return (word(id(items) + TUPLE_ITEMS_OFFSET) == id(array)
            and word(id(array) + TYPE_OFFSET) == id(np.ndarray)
            and word(id(array) + DESCR_OFFSET) == id(array.dtype)
            and word(id(array) + NDIM_OFFSET, ctypes.c_int) == array.ndim
            and [word(dims + 8 * axis) for axis in range(2)] == list(array.shape))


_lock = threading.Lock()
_builtins = {}  # name -> builtin once built, None when it cannot be


def object_code():
    """From the object store (the disk cache) when it has it, keyed like the pool's."""
    return parallel.stored_object("array guard", [__file__, output_reuse.__file__],
                                  lambda: llvm.compile_module(module_ir()).object_code)


def _builtin(name):
    with _lock:
        if not _builtins:
            usable = [(symbol, check()) for symbol, check in (
                (NAME, _check_layout), (output_reuse.NAME, output_reuse.layout_ok))]
            library = None
            if any(ok for _, ok in usable):
                library = llvm.load(object_code(), [NAME, output_reuse.NAME])
                _keep.append(library)
            for symbol, ok in usable:
                _builtins[symbol] = (python_entry.builtin(library.addresses[symbol], symbol)
                                     if ok else None)
        return _builtins[name]


def matcher():
    """The builtin ``matches(leaves, table) -> bool``, built (or read from the object
    store) once per process; None where the object layout is not the one it reads, so
    that guards keep their Python checks."""
    return _builtin(NAME)


def taker():
    """The builtin ``take(slots, table) -> array | False`` (``codegen/output_reuse.py``),
    or None where the object layout is not the one it reads (outputs are then allocated
    on every call)."""
    return _builtin(output_reuse.NAME)


_keep = []  # the loaded library stays mapped while the process runs
