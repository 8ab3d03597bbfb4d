"""Small outputs handed out again once nobody holds them: ``take(slots, table) -> array |
False``, a builtin the hit path of a variant calls instead of ``np.empty``.

``np.empty`` costs ~1250 instructions of a ~6800-instruction compiled call on 16 floats
(parsing its arguments, converting the shape and dtype, allocating). A variant's hit path
(``runtime/guards.compile_entry``) keeps the last two arrays it made for each small output
of a static shape in a list, ``slots``; ``take`` returns one that only that list
references, so nothing the caller has can see its memory used again - no name, view,
buffer export or weak reference - just as NumPy's allocator hands freed memory out again.
It also checks the array is still what ``np.empty`` made (its header: dtype, dims,
strides, flags, no base), since a caller may have set ``a.shape``, ``a.strides``,
``a.dtype`` or ``a.flags.writeable`` before dropping it. Two slots: an RNN step's output
is the next step's input (``h = cell(x, h)``), so the last one is still held while the
one before is free.

``table`` is an int64 ndarray made once per output (``make_table``): ``[id(ndarray),
id(dtype), ndim, flags, dim_0 .., stride_0 ..]``. ``take`` reads the objects' fields at
the NumPy ABI's fixed offsets (confirmed at import by ``layout_ok``), only after an item's
type pointer is ``ndarray``'s, and moves the array it returns to the front of ``slots``.
It runs with the GIL held (a builtin), so taking an array is atomic with respect to other
Python threads: an array another thread took has that thread's reference.

>>> import numpy as np
>>> from tracejit.codegen import array_guard
>>> take = array_guard.taker()
>>> slots = [np.empty(3, np.float32), np.empty(3, np.float32)]
>>> table = make_table((3,), np.float32)
>>> held = slots[0]              # the caller holds the first: the second is handed out
>>> taken = take(slots, table)
>>> taken is not held and slots[0] is taken
True
>>> take(slots, table)           # both are held now
False
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np
from llvmlite import ir

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
NAME = "tj_take_output"
# Outputs up to this size are kept for reuse (larger ones are recycled by the wrapper's own
# pool when they are a megabyte or more: codegen/program.py).
SMALL_OUTPUT_BYTES = 1 << 16
# CPython's object and list, NumPy's PyArrayObject (numpy/ndarraytypes.h) fields.
REFCOUNT, TYPE, LIST_SIZE, LIST_ITEMS = 0, 8, 16, 24
NDIM, DIMS, STRIDES, BASE, DESCR, FLAGS, WEAKREFS = 24, 32, 40, 48, 56, 64, 72


def make_table(shape, dtype):
    """The header ``np.empty(shape, dtype)`` makes, as ``take`` compares it."""
    template = np.empty(shape, dtype)
    flags = ctypes.c_int.from_address(id(template) + FLAGS).value
    return np.array([id(np.ndarray), id(template.dtype), template.ndim, flags,
                     *template.shape, *template.strides], dtype=np.int64)


def add_function(module):
    """``tj_take_output(self, args, nargs)``: METH_FASTCALL over ``(slots, table)``."""
    bool_from_long = (module.globals.get("PyBool_FromLong")
                      or ir.Function(module, ir.FunctionType(PTR, [I64]), "PyBool_FromLong"))
    function = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), NAME)
    _, args, nargs = function.args
    block = function.append_basic_block
    start, entry, slot_head, slot_type, slot_header = (
        block("start"), block("entry"), block("slot"), block("slot_type"), block("header"))
    axis_head, axis_body, next_axis, next_slot = (block("axis"), block("axis_body"),
                                                  block("next_axis"), block("next_slot"))
    free, none = block("free"), block("none")
    builder = ir.IRBuilder(start)
    builder.cbranch(builder.icmp_signed("==", nargs, ir.Constant(I64, 2)), entry, none)
    builder.position_at_end(entry)

    def field(pointer, offset, kind=I64):
        return builder.load(builder.gep(pointer, [ir.Constant(I64, offset)], source_etype=I8),
                            typ=kind)

    def table_at(index):
        return builder.load(builder.gep(table, [index], source_etype=I64), typ=I64)

    def constant(value):
        return ir.Constant(I64, value)

    slots = builder.load(args, typ=PTR)
    table = field(builder.load(builder.gep(args, [constant(1)], source_etype=PTR), typ=PTR),
                  16, PTR)  # the table's data (PyArrayObject.data)
    count = field(slots, LIST_SIZE)
    items = field(slots, LIST_ITEMS, PTR)
    ndim = table_at(constant(2))
    builder.branch(slot_head)

    builder.position_at_end(slot_head)
    index = builder.phi(I64, "index")
    index.add_incoming(constant(0), entry)
    builder.cbranch(builder.icmp_signed("<", index, count), slot_type, none)

    builder.position_at_end(slot_type)
    item_address = builder.gep(items, [index], source_etype=PTR)
    item = builder.load(item_address, typ=PTR)
    builder.cbranch(builder.icmp_unsigned("==", field(item, TYPE), table_at(constant(0))),
                    slot_header, next_slot)  # an ndarray's fields may be read from here on

    builder.position_at_end(slot_header)
    only_the_list = builder.icmp_signed("==", field(item, REFCOUNT), constant(1))
    checks = [only_the_list,
              builder.icmp_unsigned("==", field(item, WEAKREFS), constant(0)),
              builder.icmp_unsigned("==", field(item, BASE), constant(0)),
              builder.icmp_unsigned("==", field(item, DESCR), table_at(constant(1))),
              builder.icmp_signed("==", builder.sext(field(item, NDIM, I32), I64), ndim),
              builder.icmp_signed("==", builder.sext(field(item, FLAGS, I32), I64),
                                  table_at(constant(3)))]
    same = checks[0]
    for check in checks[1:]:
        same = builder.and_(same, check)
    dims, strides = field(item, DIMS, PTR), field(item, STRIDES, PTR)
    builder.cbranch(same, axis_head, next_slot)

    builder.position_at_end(axis_head)
    axis = builder.phi(I64, "axis")
    axis.add_incoming(constant(0), slot_header)
    builder.cbranch(builder.icmp_signed("<", axis, ndim), axis_body, free)

    builder.position_at_end(axis_body)
    dim = builder.load(builder.gep(dims, [axis], source_etype=I64), typ=I64)
    stride = builder.load(builder.gep(strides, [axis], source_etype=I64), typ=I64)
    same_dim = builder.icmp_signed("==", dim, table_at(builder.add(axis, constant(4))))
    same_stride = builder.icmp_signed("==", stride, table_at(
        builder.add(builder.add(axis, ndim), constant(4))))
    builder.cbranch(builder.and_(same_dim, same_stride), next_axis, next_slot)
    builder.position_at_end(next_axis)
    axis.add_incoming(builder.add(axis, constant(1)), next_axis)
    builder.branch(axis_head)

    builder.position_at_end(next_slot)
    index.add_incoming(builder.add(index, constant(1)), next_slot)
    builder.branch(slot_head)

    builder.position_at_end(free)
    # To the front (the list keeps its one reference to each), then the caller's reference.
    builder.store(builder.load(items, typ=PTR), item_address)
    builder.store(item, items)
    builder.store(builder.add(field(item, REFCOUNT), constant(1)),
                  builder.gep(item, [constant(REFCOUNT)], source_etype=I8))
    builder.ret(item)

    builder.position_at_end(none)
    builder.ret(builder.call(bool_from_long, [constant(0)]))
    return function


def layout_ok():
    """The offsets ``take`` reads, confirmed on this interpreter and NumPy."""
    def word(address, kind=ctypes.c_int64):
        return kind.from_address(address).value

    array = np.empty((2, 3), np.float32)
    view = array[1:]
    slots = [array]
    flags = word(id(array) + FLAGS, ctypes.c_int)
    array.flags.writeable = False
    writeable_bit = flags & ~word(id(array) + FLAGS, ctypes.c_int)
    array.flags.writeable = True
    reference = weakref.ref(view)
    fresh = np.empty(3)
    # Held by one name, then by a list too: the word is the count of owners. Not
    # sys.getrefcount, which may or may not count its own argument (3.14 borrows it).
    alone = word(id(fresh) + REFCOUNT)
    held = [fresh]
    return (alone == 1 and word(id(fresh) + REFCOUNT) == 2 and held[0] is fresh
            and word(id(slots) + LIST_SIZE) == 1 and word(word(id(slots) + LIST_ITEMS)) == id(array)
            and word(id(array) + TYPE) == id(np.ndarray)
            and word(id(array) + DESCR) == id(array.dtype)
            and word(id(array) + NDIM, ctypes.c_int) == 2
            and [word(word(id(array) + DIMS) + 8 * axis) for axis in range(2)] == [2, 3]
            and [word(word(id(array) + STRIDES) + 8 * axis) for axis in range(2)] == [12, 4]
            and word(id(view) + BASE) == id(array) and word(id(array) + BASE) == 0
            and writeable_bit != 0
            and word(id(view) + WEAKREFS) != 0 and word(id(array) + WEAKREFS) == 0
            and reference() is view)


def reuse_statements(target, shape, dtype, allocation, constant):
    """The statements that bind ``target`` to a reusable output instead of running
    ``allocation`` (the wrapper's ``np.empty`` call, as text) every call, or None when the
    output is too big or there is no ``take`` here. ``constant(value, prefix) -> name``
    binds a value in the generated function's namespace."""
    from . import array_guard

    take = array_guard.taker()
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if take is None or size > SMALL_OUTPUT_BYTES:
        return None
    slots = constant([np.empty(shape, dtype), np.empty(shape, dtype)], "S")
    table = constant(make_table(shape, dtype), "O")
    return [f"{target} = {constant(take, 'TAKE')}({slots}, {table})",
            f"if {target} is False: {target} = {slots}[1] = {allocation}"]
