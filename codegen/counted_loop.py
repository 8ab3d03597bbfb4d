"""The counted loop every IR emitter uses: ``for index in range(start, stop, step)`` over
signed i64, and the loop metadata (``llvm.loop`` hints) LLVM reads on its back edge.

>>> from llvmlite import ir
>>> module = ir.Module()
>>> function = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, PTR]), "fill")
>>> builder = ir.IRBuilder(function.append_basic_block("entry"))
>>> count, data = function.args
>>> def store(index):
...     element = builder.gep(data, [index], source_etype=I64)
...     builder.store(index, element)
>>> back_edge = counted_loop(builder, ir.Constant(I64, 0), count, store)
>>> set_loop_hints(back_edge, {"llvm.loop.unroll.disable": None})
>>> _ = builder.ret_void()
>>> "!llvm.loop" in str(module)
True
"""

from __future__ import annotations

from llvmlite import ir

I1, I64 = ir.IntType(1), ir.IntType(64)
PTR = ir.PointerType()


def counted_loop(builder, start, stop, body, step=1, label="loop", wrap_flags=()):
    """Emit ``for index in range(start, stop, step): body(index)`` (``step`` > 0, an int
    or an i64 value) and leave ``builder`` after the loop. ``body`` may add blocks; the
    increment goes where it leaves the builder. ``wrap_flags`` (``("nsw", "nuw")``) go on
    the increment when the caller knows it cannot overflow. Returns the back-edge branch,
    where ``set_loop_hints`` puts loop metadata."""
    function = builder.function
    before = builder.block
    header = function.append_basic_block(label)
    inside = function.append_basic_block(f"{label}.body")
    after = function.append_basic_block(f"{label}.end")
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(I64)
    index.add_incoming(start, before)
    builder.cbranch(builder.icmp_signed("<", index, stop), inside, after)
    builder.position_at_end(inside)
    body(index)
    increment = step if isinstance(step, ir.Value) else ir.Constant(I64, step)
    index.add_incoming(builder.add(index, increment, flags=list(wrap_flags)), builder.block)
    back_edge = builder.branch(header)
    builder.position_at_end(after)
    return back_edge


def set_loop_hints(back_edge, hints):
    """Attach ``hints`` (``{"llvm.loop.vectorize.predicate.enable": True}``; None for a
    hint without operand) to the loop whose back edge is ``back_edge``: LLVM wants a
    distinct, self-referencing loop ID listing them."""
    module = back_edge.function.module
    nodes = []
    for name, value in hints.items():
        operands = [ir.MetaDataString(module, name)]
        if isinstance(value, bool):
            operands.append(ir.Constant(I1, int(value)))
        elif value is not None:
            operands.append(ir.Constant(ir.IntType(32), value))
        nodes.append(module.add_metadata(operands))
    loop_id = ir.values.MDValue(module, nodes, name=str(len(module.metadata)))
    loop_id.operands = (loop_id, *nodes)
    back_edge.set_metadata("llvm.loop", loop_id)


def instructions_from(block, skip=()):
    """Instructions in ``block`` and every block appended after it (but those whose id is
    in ``skip``: blocks emitted meanwhile outside the loop): the size of a loop body whose
    first block is ``block``, once it is emitted. A call the loop vectorizer widens into
    code inlined after it (``math_table.vectorizable_function``: the float32 tanh's
    tables) counts as its scalar function's instructions too, as if written in the loop."""
    blocks = block.function.blocks
    return sum(len(later.instructions) + sum(map(_widened_body, later.instructions))
               for later in blocks[blocks.index(block):] if id(later) not in skip)


def _widened_body(instruction):
    """The instructions of the function a vectorizable call calls, else 0 (a rare path's
    slow function too, ``math_rare_path``: the loop seldom runs it)."""
    callee = getattr(instruction, "callee", None)
    if not isinstance(callee, ir.Function) or not callee.blocks or callee.name.startswith(
            "tracejit_slow_") or not any(
            "vector-function-abi-variant" in str(attribute)
            for attribute in getattr(instruction, "attributes", ())):
        return 0
    return sum(len(block.instructions) for block in callee.blocks)
