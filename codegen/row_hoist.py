"""Values that do not vary in a kernel's inner loops are computed once, before them.

A row kernel reads values that depend on the row alone: the log of a row sum another
kernel stored (``log_softmax``'s ``x - max - log(sum)`` read back by a cross-entropy's
masked sum), a per-row scale broadcast along the row. Inlined where they are used, they
were computed at every element of the row, inside the innermost loop: the cross-entropy
kernel of the MLP step computed ``log(sum)`` (with its rare-path branch) in a 10-class
loop that LLVM unrolled ten times, 79 of the step's 366 ms of LLVM time.

When an inner loop nest opens (``KernelBuilder.loop`` with ``hoist``), a block goes in
front of it: a *row-invariant* block. A value asked for inside the nest at an index
with no inner component, whose index values are all defined outside the nest, is
computed there (the builder moves to the block's end and back) and kept in the memo
scope of the row, so later passes over the same row reuse it. The computation is the
same instructions on the same operands, so results do not change by a bit.

Computing a value before the loop runs it also when the loop runs no iteration; a
lowering may report an error (an index out of range), which eager NumPy would not
raise for an empty row. So ``KernelBuilder.loops`` opens a row-invariant block only
over a dim that is at least 1 (static, or by the ranges of its symbols).
"""

from __future__ import annotations

from llvmlite import ir


class RowHoist:
    """The row-invariant block of the inner loop nest being emitted: where hoisted
    values go (``block``, the end of the chain of blocks they need: a math function's
    rare path adds a branch), the memo scope of the row (``scope``), and the blocks
    whose values are available there (``outside``: those before the nest and the
    chain's own)."""

    def __init__(self, block, scope, outside):
        self.block = block
        self.scope = scope
        self.outside = outside
        self.active = False  # a hoisted value is being computed (in ``block``)

    def holds(self, index):
        """Can the value at ``index`` be computed before the loop nest: no component
        varies in it, and each component's value is available there?"""
        if not isinstance(index, tuple):
            return False  # a flat index is the loop's own
        for component in index:
            if component.inner:
                return False
            value = component.value
            if isinstance(value, ir.Instruction) and id(value.parent) not in self.outside:
                return False  # index arithmetic emitted inside the nest
        return True


def open_hoist(builder, scope):
    """A row-invariant block in front of the loop nest ``builder`` is about to emit:
    branch to it, and continue (where the loop goes) in a new block after it."""
    function = builder.function
    outside = {id(block) for block in function.blocks}
    block = function.append_basic_block("row.invariant")
    builder.branch(block)
    start = function.append_basic_block("row.loop")
    builder.position_at_end(start)
    outside.add(id(block))
    return RowHoist(block, scope, outside), start


def close_hoist(builder, hoist, start):
    """End the chain of row-invariant blocks with the branch into the loop nest."""
    here = builder.block
    builder.position_at_end(hoist.block)
    builder.branch(start)
    builder.position_at_end(here)


def compute_hoisted(builder, hoist, compute):
    """``compute()`` emitted at the end of the row-invariant chain; the builder returns to
    where it was. Returns the value and the blocks the computation added."""
    here = builder.block
    function = builder.function
    count = len(function.blocks)
    builder.position_at_end(hoist.block)
    hoist.active = True
    try:
        value = compute()
    finally:
        hoist.active = False
        hoist.block = builder.block
        added = function.blocks[count:]
        hoist.outside.update(id(block) for block in added)
        builder.position_at_end(here)
    return value, added
