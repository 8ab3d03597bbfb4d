"""Scheduling: group a graph's equations into kernels.

Every value is either *materialized* (stored in a buffer) or *inlined* (recomputed inside
the kernels that read it, through index arithmetic for views). A kernel stores one
materialized value, its *root*:

* pointwise chains, broadcasting and views (reshape, transpose, slices, pad, concatenate,
  gather) inline into their consumer: ``gelu(x * w + b)`` is one loop nest;
* a reduction over the trailing axes inlines into a consumer that iterates over the same
  rows as a *stage*: softmax and layer norm are one kernel that goes over each row a few
  times while it sits in cache; reductions needed by several kernels, or over other axes,
  get kernels of their own;
* matmul is its own kernel; a pointwise consumer of the whole product (bias, activation)
  becomes its epilogue: ``relu(x @ W + b)`` is one matmul kernel; convolutions (primitives
  of kind ``conv``) likewise, lowered by ``tracejit.codegen.conv``;
* scatter_add (the transpose of gather) and cumsum (``codegen/scan.py``) are kernels of
  their own, reading their operands from buffers.

Outputs, guard predicates and printed values are materialized; temporaries share a
workspace, reusing space between values whose lifetimes do not overlap.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> from tracejit import nn
>>> t = trace(lambda x: nn.softmax(nn.layer_norm(x)), np.ones((4, 8), np.float32))
>>> [kernel.kind for kernel in schedule(t.graph).kernels]
['pointwise']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.errors import UnsupportedError
from tracejit.tracer.ir import Effect, Eqn, Guard, Literal, Var
from tracejit.tracer.locations import line_prefix
from tracejit.tracer.ops import (
    broadcast_to_p,
    reshape_p,
    slice_p,
    swaps_last_two_axes,
    transpose_p,
)
from tracejit.tracer.shapes import size_of

from .dtypes import NARROW_MEMORY, check_supported
from .evaluations import MAX_EVALUATED, Evaluations
from .gemm_driver import DIRECT_B_FLOATS
from .kernel_index import IndexComponent, broadcast_index
from .lowering_table import LOWERINGS
from .narrow_inputs import check_narrow_uses, is_narrow_view
from .narrow_results import narrow_results
from .numpy_math_chunks import give_buffers
from .numpy_products import decision_products
from .parallel_entry import ALIGNED_CHUNK
from .strided_views import batched_reads_strided, matrix_layout, strided_view, view_base
from .view_lowering import NUMPY_VIEWS, split_reshape_groups, unit_reshape_index

MAX_INLINED = 96  # equations one kernel may inline (see _Scheduler.bound_expressions)
TAIL_EQUATIONS = 4  # ... and more, when these are the program's last
# Work per element (lowering costs: a transcendental 10, arithmetic 1) past which a flat
# loop in whole vectors is cut where it repeats, before MAX_INLINED (_latency_bound):
# about four transcendentals and their arithmetic.
LATENCY_COST = 40


@dataclass
class Buffer:
    """Storage for a materialized value: ``kind`` is input, constant, output or temp;
    ``slot`` is its position in the program's argument tuple (temps: in the workspace at
    ``offset`` bytes)."""

    var: Var
    kind: str
    slot: int | None = None
    offset: object = 0

    @property
    def name(self):
        return self.var.name

    @property
    def dtype(self):
        return self.var.aval.dtype

    @property
    def shape(self):
        return self.var.aval.shape

    @property
    def nbytes(self):
        return size_of(self.shape) * self.dtype.itemsize


@dataclass
class Kernel:
    """One loop nest. ``root`` is the value it stores; ``stages`` the reductions it computes
    row by row first (in order); a matmul or conv kernel computes its ``anchor`` (the matmul
    or convolution equation) and then applies the root's expression over the product, in
    place, as its epilogue (the root is the anchor's own output when there is none)."""

    name: str
    kind: str  # codegen/kernel_kinds.py: pointwise, reduce, matmul, conv, scatter, scan
    root: Var
    stages: list = field(default_factory=list)
    anchor: Eqn | None = None
    guards: list = field(default_factory=list)

    @property
    def matmul(self):
        """``anchor``, under the name codegen/conv*.py use."""
        return self.anchor


@dataclass
class Schedule:
    graph: object
    producers: dict
    buffers: dict  # var name -> Buffer
    kernels: list
    entry_guards: list  # guards on input values, checked before any kernel
    workspace_bytes: object
    effect_outputs: list  # vars printed by effects (materialized as extra outputs)
    scheduler: object = None

    def is_materialized(self, var):
        return var.name in self.buffers


def _trivial_reshape(source_shape, target_shape):
    """Does the reshape only add or remove dims of size 1 (an index relabelling)?"""
    def non_unit(shape):
        return [dim for dim in shape if not (isinstance(dim, int) and dim == 1)]

    return non_unit(source_shape) == non_unit(target_shape)


def reshaped_buffer(var, producers, buffers):
    """The value a chain of reshapes (possibly empty) starts from, stopping at the first
    that has a buffer; matmul reads it in place."""
    while isinstance(var, Var):
        eqn = producers.get(var.name)
        if var.name in buffers:
            return var
        if eqn is None or eqn.prim is not reshape_p:
            return var
        var = eqn.inputs[0]
    return None


def input_view(graph, atom, producers=None):
    """``(input position, [eqns from the input outwards])`` when ``atom`` is a chain of
    NumPy views (``NUMPY_VIEWS``, with static or symbolic parameters) of a graph input,
    else None.

    >>> import numpy as np
    >>> from tracejit.tracer import trace
    >>> graph = trace(lambda x: x.T[1:], np.ones((3, 4))).graph
    >>> position, chain = input_view(graph, graph.outputs[0])
    >>> position, [eqn.prim.name for eqn in chain]
    (0, ['transpose', 'slice'])
    """
    if producers is None:
        producers = {eqn.out.name: eqn for eqn in graph.equations}
    if not isinstance(atom, Var):
        return None
    positions = {var.name: position for position, var in enumerate(graph.inputs)}
    root, chain = _view_chain(atom, producers)
    return (positions[root.name], chain) if chain and root.name in positions else None


def _view_chain(var, producers):
    """``(root, [eqns from the root outwards])``: the NumPy views (``NUMPY_VIEWS`` with
    parameters a wrapper can write) that lead from ``root`` to ``var``."""
    chain = []
    while (eqn := producers.get(var.name)) is not None and eqn.prim in NUMPY_VIEWS and (
            _static_params(eqn) and isinstance(eqn.inputs[0], Var)):
        chain.append(eqn)
        var = eqn.inputs[0]
    return var, chain[::-1]


def result_views(graph, producers=None):
    """``{output name: (root var, [eqns from the root outwards])}`` for outputs that are a
    chain of NumPy views (``NUMPY_VIEWS``, static or symbolic parameters) of a value
    computed here that another output also is or views (``return y, y[1:]``, ``h.T,
    h[:, -1]``): the root gets an output array and the wrapper makes these outputs from it
    with NumPy, so they share its memory as NumPy's results do. So does a chain holding
    ``np.broadcast_to`` (``np.broadcast_to(x.sum(0), shape).T``): NumPy's is a read-only
    view, which a write into it tells. (Another view no other output shares a root with is
    computed into an array of its own: nothing can tell.)

    >>> import numpy as np
    >>> from tracejit.tracer import trace
    >>> graph = trace(lambda x: ((y := x * 2.0), y.T[1:]), np.ones((3, 4))).graph
    >>> [(root.name, [eqn.prim.name for eqn in chain])
    ...  for root, chain in result_views(graph).values()]
    [('%1', ['transpose', 'slice'])]
    """
    if producers is None:
        producers = {eqn.out.name: eqn for eqn in graph.equations}
    chains = {}
    for atom in graph.outputs:
        if not isinstance(atom, Var) or atom.name in chains:
            continue
        root, chain = _view_chain(atom, producers)
        if root.name in producers:  # computed here (views of inputs: input_view's)
            chains[atom.name] = (root, chain)
    sharing = {}
    for root, _ in chains.values():
        sharing[root.name] = sharing.get(root.name, 0) + 1
    return {name: (root, chain) for name, (root, chain) in chains.items()
            if chain and (sharing[root.name] > 1 or any(
                eqn.prim is broadcast_to_p and eqn.out.name in graph.locations
                for eqn in chain))}  # (the user's np.broadcast_to: rows a loop stacked
    # from one value are broadcasts too, but eager made each row its own array)


def _static_params(eqn):
    """Parameters a wrapper can write as Python: ints and dims, positive slice steps."""
    for _, value in eqn.params:
        for item in value if isinstance(value, tuple) else (value,):
            if not isinstance(item, (int, DimExpr)) or isinstance(item, bool):
                return False
    if eqn.prim is slice_p:
        return all(isinstance(step, int) and step > 0 for step in eqn.params_dict["steps"])
    return True


def _uses(graph):
    uses = {}
    for item in graph.body:
        atoms = (item.predicate,) if isinstance(item, Guard) else item.inputs
        for atom in atoms:
            if isinstance(atom, Var):
                uses.setdefault(atom.name, []).append(item)
    return uses


class _Scheduler:
    def __init__(self, graph, views_of_results=False):
        self.graph = graph
        self.views_of_results = views_of_results
        self.producers = {eqn.out.name: eqn for eqn in graph.equations}
        self.uses = _uses(graph)
        self.buffers = {}
        self.order = {eqn.out.name: index for index, eqn in enumerate(graph.equations)}
        for var in graph.inputs:
            self.buffers[var.name] = Buffer(var, "input")
        for var, _ in graph.constants:
            self.buffers[var.name] = Buffer(var, "constant")

    def materialize(self, var, kind="temp"):
        if var.name not in self.buffers:
            self.buffers[var.name] = Buffer(var, kind)
            return True
        if kind == "output" and self.buffers[var.name].kind == "temp":
            self.buffers[var.name].kind = "output"
        return False

    # --- which values need buffers ----------------------------------------------------
    def initial_materialization(self):
        check_narrow_uses(self.graph)
        stored_narrow = narrow_results(self.graph)  # uint8 images: stored, never read
        for item in self.graph.body:
            if isinstance(item, Eqn) and not is_narrow_view(item) and (
                    item.out.name not in stored_narrow):
                check_supported(item.out.aval.dtype, f"the result of {item.prim.name}",
                                self.graph.locations.get(item.out.name))
        views = result_views(self.graph, self.producers) if self.views_of_results else {}
        for atom in self.graph.outputs:
            # Views of inputs and of other results are made by the wrapper (NumPy, sharing
            # the caller's memory or the other result's).
            if isinstance(atom, Var) and atom.name in views:
                self.materialize(views[atom.name][0], "output")
            elif isinstance(atom, Var) and atom.name in self.producers and input_view(
                self.graph, atom, self.producers
            ) is None:
                self.materialize(atom, "output")
        for item in self.graph.body:
            if isinstance(item, Guard) and item.predicate.name in self.producers:
                self.materialize(item.predicate)
            elif isinstance(item, Effect):
                for atom in item.inputs:
                    if isinstance(atom, Var) and atom.name in self.producers:
                        self.materialize(atom, "output")
            elif isinstance(item, Eqn):
                kind = LOWERINGS[item.prim].kernel
                if kind == "matmul":  # reads buffers, reshapes and transposes of them
                    self.materialize(item.out)
                    for position, operand in enumerate(item.inputs):
                        if isinstance(operand, Var) and operand.name in self.producers:
                            if not self._read_strided(item, operand) and (
                                    not self._readable_by_matmul(operand, right=position == 1)):
                                self.materialize(operand)
                elif kind in ("scatter", "scan", "conv"):  # read their operands as buffers
                    self.materialize(item.out)
                    for operand in item.inputs:
                        if isinstance(operand, Var) and operand.name in self.producers:
                            self.materialize(operand)
                elif item.prim is reshape_p:
                    source = item.inputs[0]
                    if (
                        isinstance(source, Var)
                        and source.name in self.producers
                        and not _trivial_reshape(source.aval.shape, item.out.aval.shape)
                        # a split (split_heads' (b, s, d) -> (b, s, h, d / h)) maps its
                        # index to the source's: read through, not copied first
                        and split_reshape_groups(source.aval.shape, item.out.aval.shape) is None
                    ):
                        self.materialize(source)
        for item in self.graph.equations:
            if LOWERINGS[item.prim].kernel == "matmul":
                self._shared_epilogue(item.out)
        give_buffers(self)  # math NumPy's loops compute, on chunks

    def _shared_epilogue(self, product):
        """Give a buffer to the one pointwise value computed from a product (its bias
        add) when slices of it are read apart (``np.split`` of a fused qkv projection:
        three kernels): it becomes the matmul kernel's epilogue (``epilogues``; the GEMM
        adds the bias per row panel, in cache) instead of being recomputed by each reader.
        Recomputed there, the bias add also kept LLVM from copying each head's rows whole
        (split_heads' gathers, one thread: 0.27-0.42 ms each instead of 0.08 ms). Other readers
        (gelu's few uses of its input) are one kernel: left alone."""
        users = self.uses.get(product.name, [])
        if len(users) != 1 or not isinstance(users[0], Eqn):
            return
        value = users[0].out
        if users[0].prim.kind != "pointwise" or value.aval.shape != product.aval.shape or (
                value.aval.dtype != product.aval.dtype):
            return
        readers = self.uses.get(value.name, [])
        if len(readers) > 1 and all(isinstance(reader, Eqn) and reader.prim is slice_p
                                    for reader in readers):
            self.materialize(value)

    def bound_expressions(self, limit=None):
        """Give a buffer to any value whose inlined expression would exceed ``limit``
        equations: an unrolled loop's running sum (``total = total + f(x[t])``) would
        otherwise inline every step into one kernel, which LLVM stops vectorizing well.
        Where the program repeats (a chain of the same few ops, an unrolled loop's steps),
        the cut falls where the next kernel repeats this one (``_Repeats``): equal
        kernels share one function, so lowering and LLVM run once for them all."""
        limit = MAX_INLINED if limit is None else limit
        equations = self.graph.equations
        trees, repeats, index, short_tried = {}, None, 0, set()
        evaluations = Evaluations(self.graph, self.buffers)
        while index < len(equations):
            eqn = equations[index]
            tree = {eqn.out.name}
            for atom in eqn.inputs:
                if isinstance(atom, Var) and atom.name in self.producers and (
                    atom.name not in self.buffers
                ):
                    tree |= trees[atom.name]
            pairs = evaluations.of(eqn)
            if len(pairs) > MAX_EVALUATED and (
                    copied := evaluations.most_computed(pairs, self.order)) is not None:
                # Views multiply what one kernel computes (a stencil's unrolled steps, each
                # reading the last at several offsets): the value computed most gets a buffer.
                self.materialize(self.producers[copied].out)
                trees[copied] = {copied}
                evaluations.restart(copied)
                index = self.order[copied] + 1
                continue
            if len(tree) > limit:
                repeats = repeats or _Repeats(self)
                # The program's last few equations join the kernel before them, unless it
                # repeats the kernels before it: a kernel of their own costs LLVM more
                # (100 ops as 95 + 5: 92 ms; as one kernel: 77 ms).
                tail = len(equations) - index <= TAIL_EQUATIONS and (
                    len(tree) <= limit + TAIL_EQUATIONS)
                cut = repeats.aligned_cut(eqn, tree, limit, tail)
                if cut is None:
                    trees[eqn.out.name] = tree
                    index += 1
                    continue
            elif self._latency_bound(eqn, tree, short_tried):
                repeats = repeats or _Repeats(self)
                cut = repeats.aligned_cut(eqn, tree, len(tree) - 1, tail=True)
            else:
                cut = None
            if cut is not None:
                self.materialize(cut.out)
                evaluations.restart(cut.out.name)
                if cut is not eqn:  # an earlier value: the trees after it change
                    trees[cut.out.name] = {cut.out.name}
                    index = self.order[cut.out.name] + 1
                    continue
                tree = {eqn.out.name}
            trees[eqn.out.name] = tree
            index += 1

    def _latency_bound(self, eqn, tree, tried):
        """Whether to look for a repeating cut of ``eqn``'s expression before it passes
        the size limit: it is a flat loop in whole vectors (``_whole_vectors``) whose
        elements each go through more than ``LATENCY_COST`` of work. Such a body is longer
        than the out-of-order window of the CPU, so one iteration's dependent chain is not
        overlapped with the next one's and the loop runs at the chain's latency: the
        100-op chain on float32[4096] ran 93 us as two kernels of 50 ops, 77 us as four of
        25 and 52 us as ten of 10 (float32[2^20]: 24.2, 21.0 and 15.2 ms CPU); LLVM
        compiles the shorter body faster too. Asked once
        per expression start (``tried``): where no repeating cut exists, the search would
        otherwise run again at every equation."""
        lowering = LOWERINGS.get(eqn.prim)
        if lowering is None or lowering.kernel != "pointwise" or not _whole_vectors(
                eqn.out.aval.shape):
            return False
        cost = sum(getattr(LOWERINGS.get(self.producers[name].prim), "cost", 0)
                   for name in tree)
        if cost <= LATENCY_COST:
            return False
        start = min(self.order[name] for name in tree)
        if start in tried:
            return False
        tried.add(start)
        return True

    def _readable_by_matmul(self, operand, right=False):
        """Matmul reads buffers, reshapes of buffers (the same memory: buffers are
        contiguous) and transposes (of the last two axes) of either. An im2col matrix is
        then written once, by the kernel that gathers the windows, not copied again.
        A small right operand that must be copied anyway is copied as it is read
        (``_copied_untransposed``)."""
        eqn = self.producers.get(operand.name)
        base = operand
        if eqn is not None and eqn.prim is transpose_p:
            base = eqn.inputs[0]
            if not (swaps_last_two_axes(eqn.params_dict["perm"]) and isinstance(base, Var)):
                return False
            if right and self._copied_untransposed(operand, base):
                return False
        source = reshaped_buffer(base, self.producers, self.buffers)
        if source is None:
            return False
        if source is not base or base is not operand:
            if source.name in self.producers:
                self.materialize(source)
            return True
        return False

    def _read_strided(self, product, operand):
        """Whether the batched ``product`` reads ``operand``, a chain of slices, transposes
        and splitting reshapes of one value, where it lies (``codegen/strided_views.py``):
        attention's heads split from one qkv buffer, each a matrix with rows 3 * d apart.
        The chain's base gets a buffer. (Copied, each head split was a kernel: three in the
        transformer block, 0.19 ms of its ~9.)"""
        if not batched_reads_strided(product, self._decision_products):
            return False
        base = view_base(operand, self.producers, self.buffers)
        if base is operand:
            return False
        view = strided_view(operand, self.producers, set(self.buffers) | {base.name})
        layout = matrix_layout(view, operand.aval.shape) if view is not None else None
        if layout is None or (operand is product.inputs[1] and not layout[0]):
            # An untransposed right operand is copied by a kernel: a stream, 4x faster
            # than the batched entry's copy of each small B (its rows 3 KB apart in
            # attention) or than reading those rows in place.
            return False
        self.materialize(base)
        return True

    def _decision_products(self):
        found = getattr(self, "_decided", None)
        if found is None:
            found = self._decided = decision_products(self.graph)
        return found

    def _copied_untransposed(self, operand, base):
        """Whether the right operand ``operand``, a transpose of ``base`` (a value only it
        reads, that is no buffer nor a reshape of one, so it gets a buffer anyway), is
        better stored as itself: attention's ``key.transpose(0, 1, 3, 2)`` of split heads.
        The copy is a gather either way; stored untransposed and small (each matrix at
        most ``DIRECT_B_FLOATS``, static), the GEMM reads it in place on its direct path
        instead of packing it transposed (64 products of 128 x 32 @ 32 x 128: 0.42 ms ->
        0.33 ms on 2 threads). The transposing gather costs more than a plain one: in the
        transformer block the pair gained 0.07 ms on one thread, about nothing on two."""
        if base.name not in self.producers or reshaped_buffer(
                base, self.producers, self.buffers) is not base or base.name in self.buffers:
            return False
        if len(self.uses.get(base.name, ())) != 1:
            return False
        rows, columns = operand.aval.shape[-2:]
        return isinstance(rows, int) and isinstance(columns, int) and (
            rows * columns <= DIRECT_B_FLOATS)

    # --- what each root inlines -------------------------------------------------------
    def inlined(self, root):
        """Non-materialized vars a root's kernel computes (its expression tree)."""
        eqn = self.producers[root.name]
        seen, stack = set(), [atom for atom in eqn.inputs if isinstance(atom, Var)]
        while stack:
            var = stack.pop()
            if var.name in seen or var.name in self.buffers:
                continue
            seen.add(var.name)
            producer = self.producers[var.name]
            stack.extend(atom for atom in producer.inputs if isinstance(atom, Var))
        return seen

    def roots(self):
        names = [name for name, buffer in self.buffers.items()
                 if buffer.kind in ("temp", "output") and name in self.producers]
        return sorted(names, key=self.order.__getitem__)

    def settle_reductions(self):
        """Materialize reductions that cannot be stages of the one kernel that reads them."""
        changed = True
        while changed:
            changed = False
            owners, trees = {}, {}
            for name in self.roots():
                root = self.buffers[name].var
                trees[name] = self.inlined(root)
                for inner in trees[name]:
                    owners.setdefault(inner, []).append(root)
            stage_axes = {}  # root -> the reduced axes of its first stage
            for inner in sorted(owners, key=self.order.__getitem__):
                roots = owners[inner]
                eqn = self.producers[inner]
                if not _is_reduction(eqn):
                    continue
                if len(roots) > 1 or not self._fits_rows(roots[0], eqn):
                    changed |= self.materialize(eqn.out)
                    continue
                # A kernel's rows follow its first stage: a stage over other axes (the
                # whole array's sum beside a row sum) gets a kernel of its own.
                axes = stage_axes.setdefault(roots[0].name, _reduced_axes(eqn))
                if _reduced_axes(eqn) != axes or not self._read_in_place(
                        eqn.out, roots[0], trees[roots[0].name]):
                    changed |= self.materialize(eqn.out)

    def _read_in_place(self, var, root, inlined):
        """Whether ``root``'s kernel reads ``var`` only at the row it computes: a stage
        holds the current row's value, so a view between the stage and the root that
        moves rows (``s[::-1]``, a slice, pad, roll, concatenate) needs the reduction in
        a buffer (found by the fusion fuzzer: a + a.sum(1, keepdims=True)[::-1])."""
        tree = sorted(inlined | {root.name}, key=self.order.__getitem__)
        reaching = {var.name}  # the values computed from the stage, root included
        for name in tree:
            eqn = self.producers[name]
            if not any(isinstance(atom, Var) and atom.name in reaching for atom in eqn.inputs):
                continue
            reaching.add(name)
            if eqn.prim.kind == "pointwise" or _is_reduction(eqn):
                continue
            if eqn.prim is reshape_p and _unit_dims_only(eqn.inputs[0].aval.shape,
                                                            eqn.out.aval.shape):
                continue  # s[:, None]: the same rows
            return False  # a view on the way to the root (c[::-1] = a + s too)
        return True

    def stages_read_along_rows(self):
        """The stages (reductions inlined into a kernel) that their kernel would read
        along the row (``_read_per_row``)."""
        found = set()
        for name in self.roots():
            root = self.buffers[name].var
            inlined = self.inlined(root)
            stages = sorted((inner for inner in inlined if _is_reduction(self.producers[inner])),
                            key=self.order.__getitem__)
            if stages:
                axes = _reduced_axes(self.producers[stages[0]])
                found.update(stage for stage in stages if not self._read_per_row(
                    self.producers[stage].out, root, inlined, axes))
        return found

    def _read_per_row(self, var, root, inlined, axes):
        """Whether ``root``'s kernel reads the stage ``var`` only at indices that stay
        fixed along the row (the trailing ``axes``, looped inside each row): a stage holds
        one value per row. Broadcasting can read it along the row: ``x - x.sum(1)`` for a
        square ``x`` reads the sums by column, and a keepdims sum over an axis of length 1
        keeps that axis's loop index (``broadcast_index`` drops only an index into a unit
        dim broadcast to a longer one). Follows the index as the kernel maps it
        (``KernelBuilder.value``) through pointwise equations and unit-dim reshapes, the
        only ones ``_read_in_place`` lets between a stage and its root."""
        shape, _ = self._row_shape(root)
        row = tuple(IndexComponent(None, axis >= len(shape) - len(axes))
                    for axis in range(len(shape)))
        # The row loop reads the root's expression, or a reduction root's operand, and
        # the operand of each stage.
        reads = [(eqn.inputs[0] if _is_reduction(eqn) else eqn.out, row)
                 for eqn in (self.producers[name] for name in inlined | {root.name})
                 if _is_reduction(eqn) or eqn.out.name == root.name]
        seen = set()
        while reads:
            atom, index = reads.pop()
            if not isinstance(atom, Var):
                continue
            key = (atom.name, tuple(component.inner for component in index))
            if key in seen or (atom.name in self.buffers and atom.name != root.name):
                continue
            seen.add(key)
            if atom.name == var.name:
                if any(key[1]):
                    return False
                continue
            eqn = self.producers[atom.name]
            if eqn.prim.kind == "pointwise":
                reads.extend((operand, broadcast_index(index, operand.aval.shape,
                                                       eqn.out.aval.shape))
                             for operand in eqn.inputs)
            elif eqn.prim is reshape_p:
                source = eqn.inputs[0]
                relabelled = unit_reshape_index(index, source.aval.shape, eqn.out.aval.shape)
                if relabelled is not None:
                    reads.append((source, relabelled))
        return True

    def _row_shape(self, root):
        """The shape a root's kernel iterates over: its own, or a reduction root's input."""
        eqn = self.producers[root.name]
        if _is_reduction(eqn):
            return eqn.inputs[0].aval.shape, _reduced_axes(eqn)
        return root.aval.shape, None

    def _fits_rows(self, root, reduction):
        shape, root_axes = self._row_shape(root)
        axes = _reduced_axes(reduction)
        rank = len(shape)
        trailing = axes == tuple(range(rank - len(axes), rank)) and len(axes) > 0
        same_shape = tuple(reduction.inputs[0].aval.shape) == tuple(shape)
        return trailing and same_shape and (root_axes is None or root_axes == axes)

    def epilogues(self):
        """Matmul products read only elementwise by one pointwise root become that root's
        kernel: the product is written and the root's expression applied in place."""
        fused = {}
        outputs = _output_names(self.graph)
        roots = self.roots()
        # Each root's expression tree, and which roots read each var, built once: asking
        # per product made scheduling quadratic in the program (issue 16: ~1M inlined()
        # calls for an unrolled RNN of 256 steps).
        trees = {name: self.inlined(self.buffers[name].var) | {name} for name in roots}
        readers = {}
        for name, tree in trees.items():
            for inner in tree:
                readers.setdefault(inner, set()).add(name)
        for name in roots:
            eqn = self.producers[name]
            if not _has_epilogue(eqn) or name in outputs:
                continue
            root = self._epilogue_root(eqn.out, roots, trees, readers)
            if root is not None and root.name not in fused:
                fused[root.name] = eqn
        for eqn in fused.values():
            del self.buffers[eqn.out.name]
        return fused

    def _epilogue_root(self, product, roots, trees, readers):
        """The one root whose expression reads ``product``, if it reads it only elementwise:
        every equation between the product and the root is pointwise at the product's
        shape, and nothing else reads the product."""
        users = self.uses.get(product.name, [])
        if not users or not all(isinstance(user, Eqn) for user in users):
            return None
        for name in roots:
            root = self.buffers[name].var
            # The epilogue runs in place over the product: same shape and same dtype.
            if name == product.name or root.aval.shape != product.aval.shape or (
                root.aval.dtype != product.aval.dtype
            ):
                continue
            tree = trees[name]
            if not all(user.out.name in tree for user in users):
                continue
            others = set(readers.get(product.name, ())) - {product.name}
            for user in users:
                others |= readers.get(user.out.name, set())
            if others - {name, product.name}:
                return None  # another kernel reads the product too: it needs its buffer
            depends = {product.name}
            for inner in sorted(tree, key=self.order.__getitem__):
                eqn = self.producers[inner]
                if any(isinstance(a, Var) and a.name in depends for a in eqn.inputs):
                    if eqn.prim.kind != "pointwise" or eqn.out.aval.shape != product.aval.shape:
                        return None
                    depends.add(inner)
                if _is_reduction(eqn) or _has_epilogue(eqn):
                    return None
            return root
        return None

    # --- kernels ----------------------------------------------------------------------
    def kernels(self, epilogues):
        kernels = []
        for name in self.roots():
            root = self.buffers[name].var
            eqn = self.producers[name]
            stages = [
                self.producers[inner].out
                for inner in sorted(self.inlined(root), key=self.order.__getitem__)
                if _is_reduction(self.producers[inner])
            ]
            if name in epilogues:  # the kernel of the product the root's expression reads
                anchor = epilogues[name]
                kind = LOWERINGS[anchor.prim].kernel
            else:
                kind = LOWERINGS[eqn.prim].kernel
                anchor = eqn if kind in ("matmul", "conv") else None
            label = f"k{len(kernels)}_{kind}_{eqn.prim.name}"
            kernels.append(Kernel(label, kind, root, stages, anchor))
        return kernels


class _Repeats:
    """Where a long expression is cut so that the kernels it is cut into repeat.

    A chain of 1000 ops repeating five was cut every 97 equations: each kernel began at
    another op of the five, so 11 kernels needed 6 functions (6 LLVM optimizations). Cut
    where the equations after the cut repeat the kernel before it, all are one function.
    Equations are compared as the lowering's ``kernel_signature`` compares them: op,
    parameters (constant slice starts aside: they are arguments), literals, types, and
    where each input comes from (so many equations back, or from outside the kernel)."""

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.equations = scheduler.graph.equations
        order, kinds, tokens = scheduler.order, {}, {}
        self.kinds, self.tokens = [], []  # per equation: its kind, and kind with sources
        for position, eqn in enumerate(self.equations):
            kind = kinds.setdefault(_equation_kind(eqn), len(kinds))
            sources = tuple(position - order[atom.name] if isinstance(atom, Var)
                            and atom.name in order else None for atom in eqn.inputs)
            self.kinds.append(kind)
            self.tokens.append(tokens.setdefault((kind, sources), len(tokens)))
        self.length = None  # of the kernels the last aligned cut made

    def aligned_cut(self, eqn, tree, limit, tail=False):
        """The value to materialize for ``eqn``, whose ``tree`` passed ``limit``: a value of
        the tree at least half a kernel long whose buffer leaves ``eqn`` at most half a
        kernel (``_fits``), after which the equations repeat those of its kernel. Of
        those, the one that keeps the last cut's length, else one whose length divides
        what is left of the program into five kernels or more (the last kernel is one of
        them too: shorter kernels, but one function fewer), else the latest; ``eqn``
        itself when there is none (the cut of old). A body too short to have its tail
        folded (``FOLD_TAIL_INSTRUCTIONS``) is emitted three times, so two kernels of 50
        cost LLVM more than 95 and 5, unless whole vectors cover the elements
        (``_whole_vectors``): then the body is emitted once, and an even split into two
        or more kernels is strong too (100-op chain on float32[4096]: two kernels of 50,
        one function; LLVM 90 -> 56 ms CPU, and the unmasked body runs faster). With
        ``tail`` (``eqn`` is among the program's last few, or the expression is cut for
        ``_latency_bound`` before ``limit``), only a strong cut, else None: no cut."""
        order = self.scheduler.order
        end = order[eqn.out.name]
        start = min(order[name] for name in tree)
        whole_vectors = _whole_vectors(eqn.out.aval.shape)
        lowest = max(start + limit // 2, end - limit // 2)
        cuts = [position for position in range(end, lowest - 1, -1)
                if self.equations[position].out.name in tree]
        if self.length is not None and start + self.length - 1 in cuts:
            cuts.insert(0, start + self.length - 1)
        strong = weak = None
        for position in cuts:
            length = position + 1 - start
            if length > 2 * limit or not self._repeats(start, position + 1) or not (
                    self._fits(self.equations[position].out.name, eqn, tree, limit)):
                continue
            left = len(self.equations) - start
            kernels = left // length if left % length == 0 else 0
            if length == self.length or kernels >= 5 or (kernels >= 2 and whole_vectors):
                strong = position
                break
            weak = position if weak is None else weak
        chosen = strong if strong is not None or tail else weak
        if chosen is None:
            return None if tail else eqn
        self.length = chosen + 1 - start
        return self.equations[chosen]

    def _fits(self, name, eqn, tree, limit):
        """Whether a buffer for ``name`` would leave ``eqn`` (whose expression is ``tree``)
        at most half a kernel: in a chain it would; where the expression reaches past
        ``name`` by other paths (a running sum beside its running state) it would not, and
        the cut would only add a kernel."""
        scheduler = self.scheduler
        if name not in tree or name in scheduler.buffers:
            return False
        left, stack = set(), [eqn.out.name]
        while stack:
            var = stack.pop()
            if var in left or var == name:
                continue
            left.add(var)
            if len(left) > limit // 2:
                return False
            stack.extend(atom.name for atom in scheduler.producers[var].inputs
                         if isinstance(atom, Var) and atom.name in tree)
        return True

    def _repeats(self, start, next_start):
        """Whether the equations from ``next_start`` on repeat those from ``start`` on,
        for the length of the kernel ``start:next_start`` (or up to the program's end)."""
        length = min(next_start - start, len(self.equations) - next_start)
        tokens = self.tokens
        return all(tokens[start + offset] == tokens[next_start + offset]
                   or self._same(start + offset, start, next_start + offset, next_start)
                   for offset in range(length))

    def _same(self, first, first_start, second, second_start):
        """Equal up to inputs from outside each kernel (the graph's input in the first
        kernel, the previous kernel's buffer in the next)."""
        if self.kinds[first] != self.kinds[second]:
            return False
        first_eqn, second_eqn = self.equations[first], self.equations[second]
        return all(self._source(atom, first, first_start)
                   == self._source(other, second, second_start)
                   for atom, other in zip(first_eqn.inputs, second_eqn.inputs))

    def _source(self, atom, position, start):
        """Where an input comes from, as the kernel starting at ``start`` sees it."""
        if not isinstance(atom, Var):
            return "literal"  # its value is part of the equation's kind
        produced = self.scheduler.order.get(atom.name)
        if produced is None or produced < start or atom.name in self.scheduler.buffers:
            return "buffer"
        return position - produced


def _whole_vectors(shape):
    """Whether a flat loop over ``shape`` runs in whole vectors, with no remainder: a
    static element count that aligned chunks (``ALIGNED_CHUNK``) cover. Its body, however
    short, is then vectorized and emitted once (``KernelBuilder.loop``)."""
    return all(isinstance(dim, int) for dim in shape) and (
        0 < size_of(shape) and size_of(shape) % ALIGNED_CHUNK == 0)


def _equation_kind(eqn):
    """An equation without its names: ``_Repeats`` compares kernels by these."""
    params = eqn.params
    if eqn.prim is slice_p:  # constant starts are the kernel's arguments
        params = (tuple("start" if type(start) is int else start
                        for start in eqn.params_dict["starts"]), eqn.params_dict["steps"])
    # Literals compare by value and type (NaN-aware), arrays by their types.
    inputs = tuple(atom if isinstance(atom, Literal) else atom.aval for atom in eqn.inputs)
    return eqn.prim.name, params, inputs, eqn.out.aval


def _unit_dims_only(before, after):
    """Whether a reshape only adds or drops dims of size 1 (the element order and the
    other dims stay)."""
    def kept(shape):
        return [dim for dim in shape if not (isinstance(dim, int) and dim == 1)]

    return kept(before) == kept(after)


def _has_epilogue(eqn):
    """Kernels that can apply a pointwise consumer of their product as an epilogue."""
    return LOWERINGS[eqn.prim].epilogue


def _is_reduction(eqn):
    return LOWERINGS[eqn.prim].kernel == "reduce"


def _reduced_axes(eqn):
    params = eqn.params_dict
    return tuple(params["axes"]) if "axes" in params else (params["axis"],)


def _output_names(graph):
    return {atom.name for atom in graph.outputs if isinstance(atom, Var)}


def _round_up(nbytes):
    return (nbytes + 63) // 64 * 64


def kernel_reads(scheduler, kernel):
    """Names of the buffers a kernel reads."""
    eqns = [scheduler.producers[name] for name in scheduler.inlined(kernel.root)]
    eqns.append(scheduler.producers[kernel.root.name])
    if kernel.anchor is not None:
        eqns.append(kernel.anchor)
        eqns.extend(scheduler.producers[name] for name in _anchor_inputs_inlined(
            scheduler, kernel.anchor))
    return {
        atom.name
        for eqn in eqns
        for atom in eqn.inputs
        if isinstance(atom, Var) and atom.name in scheduler.buffers
    }


def _anchor_inputs_inlined(scheduler, anchor):
    """The transposes and reshapes a matmul reads through, down to their buffers."""
    names, stack = [], [atom for atom in anchor.inputs if isinstance(atom, Var)]
    while stack:
        var = stack.pop()
        if var.name in scheduler.buffers or var.name in names:
            continue
        names.append(var.name)
        stack.extend(atom for atom in scheduler.producers[var.name].inputs
                     if isinstance(atom, Var))
    return names


def _plan_workspace(scheduler, kernels):
    """Offsets of temporaries in one workspace; a slot is reused by a later temp of the same
    size once its previous tenant is dead (sizes may be symbolic, so only equal sizes
    share)."""
    born = {kernel.root.name: index for index, kernel in enumerate(kernels)}
    last_use = {}
    for index, kernel in enumerate(kernels):
        for name in kernel_reads(scheduler, kernel):
            last_use[name] = index
        for guard in kernel.guards:
            last_use[guard.predicate.name] = index
    slots = []  # [size, offset, free after kernel]
    total = 0
    temps = sorted((b for b in scheduler.buffers.values() if b.kind == "temp"),
                   key=lambda b: born.get(b.name, -1))
    for buffer in temps:
        size = _round_up(buffer.nbytes)
        start = born.get(buffer.name, -1)
        end = max(last_use.get(buffer.name, start), start)
        for slot in slots:
            if slot[0] == size and slot[2] < start:
                buffer.offset, slot[2] = slot[1], end
                break
        else:
            buffer.offset = total
            slots.append([size, total, end])
            total = total + size
    return total


def schedule(graph, views_of_results=False):
    """Group ``graph``'s equations into kernels and plan their buffers (every buffer:
    lowering adds none). ``views_of_results``: outputs that view another output's value
    are made from it by the wrapper (``result_views``: a program whose outputs are a
    call's results); else each gets a buffer (a loop body a native driver runs passes the
    buffers itself)."""
    along_rows = set()
    while True:
        scheduler = _Scheduler(graph, views_of_results)
        scheduler.initial_materialization()
        scheduler.bound_expressions()
        for name in sorted(along_rows, key=scheduler.order.__getitem__):
            scheduler.materialize(scheduler.producers[name].out)
        scheduler.settle_reductions()
        # A stage holds one value per row: a reduction its kernel would read along the row
        # gets a buffer, and the settling starts again as if it had had one from the start.
        found = scheduler.stages_read_along_rows()
        if not found:
            break
        along_rows |= found
    epilogues = scheduler.epilogues()
    kernels = scheduler.kernels(epilogues)
    # Guards are checked right after the kernel that computes their predicate, except that
    # a guard waits for the margin guard just before it (tracejit.tracer.guard_margins), so
    # a value inside the rounding bound takes the margin's exit, not the guard's. That margin
    # may be another decision's (a mask's, computed later): the guard's predicate buffer
    # must then live until the margin's kernel, which _plan_workspace reads from here.
    kernel_of = {kernel.root.name: index for index, kernel in enumerate(kernels)}
    entry_guards, previous, previous_at = [], None, -1
    for item in graph.body:
        if isinstance(item, Guard):
            at = kernel_of.get(item.predicate.name, -1)
            if previous is not None and previous.convert == "margin" and (
                    item.convert != "margin"):
                at = max(at, previous_at)
            (kernels[at].guards if at >= 0 else entry_guards).append(item)
            previous, previous_at = item, at
    effect_outputs = [
        atom for item in graph.body if isinstance(item, Effect)
        for atom in item.inputs if isinstance(atom, Var)
    ]
    stored_narrow = narrow_results(graph)  # a kernel's narrow cast or move stores these
    for name, buffer in scheduler.buffers.items():
        if buffer.kind not in ("input", "constant") and buffer.dtype in NARROW_MEMORY and (
                name not in stored_narrow):  # (views: index maps)
            # (a view of a narrow argument, a transpose of a narrow cast: whatever made it)
            producer = scheduler.producers.get(name)
            made_by = f" made by {producer.prim.name}" if producer is not None else ""
            raise UnsupportedError(
                f"{line_prefix(graph.locations.get(name))}compiled code would store a "
                f"{buffer.dtype} array{made_by}; it stores narrow integers only from a cast "
                "or a move of them (np.where, pad, reshape): convert it first "
                "(x.astype(np.int32))")
    workspace = _plan_workspace(scheduler, kernels)
    return Schedule(graph, scheduler.producers, scheduler.buffers, kernels, entry_guards,
                    workspace, effect_outputs, scheduler)
