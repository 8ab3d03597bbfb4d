"""Every primitive of the op table has exactly one lowering (or one named place that compiles
it), and every lowering names a kernel kind that exists."""

from tracejit.codegen.kernel_kinds import KERNEL_KINDS
from tracejit.codegen.lowering_table import COMPILED_ELSEWHERE, LOWERINGS, missing_lowerings
from tracejit.tracer.ops import PRIMITIVES, exp_p, sum_p


def test_the_lowering_table_covers_the_op_table():
    compiled_here = set(PRIMITIVES.values()) - set(COMPILED_ELSEWHERE)
    assert set(LOWERINGS) == compiled_here, (
        f"without a lowering: {sorted(p.name for p in compiled_here - set(LOWERINGS))}; "
        f"not in the op table: {sorted(p.name for p in set(LOWERINGS) - compiled_here)}")
    assert not set(LOWERINGS) & set(COMPILED_ELSEWHERE)
    assert missing_lowerings() == set()


def test_a_removed_lowering_is_reported():
    for prim in (exp_p, sum_p):
        table = {key: value for key, value in LOWERINGS.items() if key is not prim}
        assert missing_lowerings(table) == {prim}


def test_each_lowering_names_a_kernel_kind_and_can_be_computed_or_stored():
    for prim, lowering in LOWERINGS.items():
        assert lowering.kernel in KERNEL_KINDS, prim
        # A value that is never inlined is computed by a kernel of its own kind.
        if lowering.compute is None:
            assert lowering.kernel != "pointwise", prim
        else:
            assert lowering.kernel == "pointwise", prim


def test_pointwise_primitives_are_the_pointwise_kind():
    """Primitive.kind (the tracer's grouping) and the lowering agree: flat loops and
    epilogues rely on ``kind == "pointwise"`` meaning an elementwise rule."""
    for prim, lowering in LOWERINGS.items():
        if prim.kind == "pointwise":
            assert lowering.kernel == "pointwise" and lowering.cost >= 1, prim
        if prim.kind == "reduction":
            assert lowering.kernel == "reduce", prim
