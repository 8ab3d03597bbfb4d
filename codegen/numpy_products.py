"""Float32 products that a decision reads are computed as NumPy computes them: the call
NumPy's ``matmul`` makes to its OpenBLAS, with the same arguments, so the product has
NumPy's bits and a mask, comparison, ``argmax`` or guard on it decides as NumPy does.

Why not the own GEMM (``codegen/gemm.py``) in NumPy's order: OpenBLAS's order is not one
rule. Each element is an FMA chain over K in blocks (``GEMM_Q``: 320 Haswell, 448
SkylakeX; the last two blocks split as ``level3.c`` or ``level3_thread.c`` says, by the
thread count), but the Haswell kernel keeps two chains (even and odd k) for some register
tiles and adds them at the end, which tiles depends on where the element lies in M and N;
the SkylakeX core has small-matrix and "direct" kernels (one chain over all of K) chosen by
``M*N*K`` and the layout; and NumPy calls ``gemv`` for one row or column, ``sdot`` for one
element and ``ssyrk`` for ``a @ a.T``, each summing in its own order. Measured (ctypes
against ``np.matmul``, both core types): a blocked FMA chain reproduced NumPy's bits for
most big SkylakeX products and almost no Haswell ones. NumPy's own calls reproduce them
all (``tests/codegen/test_numpy_products.py``).

Nor NumPy's call on fewer of OpenBLAS's threads (``openblas_set_num_threads(1)`` around
it, or its columns cut over tracejit's pool, each a one-thread call), which would spare
the core OpenBLAS's worker spins on after a threaded call (~0.1 ms, ``blas.py``: the batch-64 MLP
step's ``x @ W1``, 64 x 784 @ 784 x 1024, which its relu mask reads): the bits depend on
the thread count. ``interface/gemm.c`` runs ``level3.c`` on one thread and
``level3_thread.c`` on more; for K between ``GEMM_Q`` and ``2 * GEMM_Q`` the first cuts
``((K / 2 + UNROLL_M - 1) / UNROLL_M) * UNROLL_M`` then the rest, the second ``(K + 1) / 2``
(SkylakeX, ``GEMM_Q`` 448, ``UNROLL_M`` 16, K 784: 400 + 384 against 392 + 392). On
Haswell (``GEMM_Q`` 320, ``UNROLL_M`` 8) both cut 784 as 320 + 232 + 232, but
``sgemm_kernel_8x4_haswell_2.c``'s two chains (``KERNEL_k2m8n4``: even k into ymm4-7, odd
into ymm8-11) run on the 4-column tiles and one chain on the 6- and 12-column ones, and
which columns get which follows the chunks each thread's share of N is cut into. Sampled
(``threadpool_limits`` 1 against 2, 64 x K @ K x 1024 for K 640, 700, 784, 900, and 64 x
1024 @ 1024 x 10, 512 x 784 @ 784 x 1024): Haswell differs in all six, SkylakeX in the
four whose K blocks differ.

So ``decision_products(graph)`` names the float32 ``matmul`` results from which a
decision is reachable in the graph (an equation ``tracejit.tracer.discontinuities``
checks: comparisons, ``argmax``, ``floor``, casts, ...; a guard; a loop whose body
decides; in a loop body, the carried values when the loop decides), and
``codegen/matmul.py`` calls ``emit_numpy_product`` for them instead of the own GEMM: per
batch entry, as NumPy loops, with the bias and activation after it as separate
roundings. Products no decision reads (most backward products) keep the own GEMM.

What NumPy calls (``numpy/_core/src/umath/matmul.c.src``), by the dims at run time:

* a zero dim: nothing, or zeros (``k = 0``);
* ``m = n = 1``: ``sdot``; ``k = 1``: the products alone (any call rounds them once);
* ``m = 1``: ``sgemv`` on B (transposed), ``n = 1``: ``sgemv`` on A;
* A and B the same memory, one transposed (``x @ x.T``): ``ssyrk`` (upper triangle),
  then the upper triangle copied to the lower;
* else ``sgemm``.

>>> import numpy as np
>>> from tracejit.tracer.tracing import trace
>>> def layer(x, w):
...     a = x @ w
...     return a @ w.T, a > 0
>>> x = np.ones((3, 4), np.float32)
>>> w = np.ones((4, 4), np.float32)
>>> graph = trace(layer, x, w).graph
>>> len(decision_products(graph))   # ``a``: the mask reads it; ``a @ w.T`` no decision
1
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from llvmlite import ir

from tracejit.tracer import margin_rules
from tracejit.tracer.discontinuities import AMBIGUITY, _meets_at_threshold, _selects
from tracejit.tracer.ir import Eqn, Guard, Var

from . import blas, numpy_loops
from .counted_loop import counted_loop

I32, I64 = ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
ROW_MAJOR, COLUMN_MAJOR, NO_TRANSPOSE, TRANSPOSE, UPPER = 101, 102, 111, 112, 121
# Where a result's side decides (what ``discontinuities`` checks), plus orderings.
DECISIONS = frozenset(AMBIGUITY) | {"argsort", "sort", "searchsorted"}
F32_DTYPE = np.dtype(np.float32)
NUMPY_DTYPES = (F32_DTYPE, np.dtype(np.float64))
# Loop bodies whose carried values reach a decision (``note_loop``), by body name.
_deciding_bodies = set()
# Products a backward graph decides on (``note_partition``), by the forward graph's name.
_decided_in_backward = {}


def _has_decision(graph):
    for item in graph.body:
        if isinstance(item, Guard):
            return True
        if not isinstance(item, Eqn):  # an effect (print)
            continue
        if item.prim.name in DECISIONS:
            return True
        if item.prim.name == "loop" and _has_decision(item.params_dict["body"]):
            return True
    return False


def _continuous_selects(graph):
    """The comparisons read only as the condition of ``np.where`` selects whose branches
    meet at the threshold (relu as ``np.where(x <= 0, 0, x)``, a leaky relu): a flip there
    moves the result by rounding only, as ``discontinuities`` judges them, so no decision."""
    readers, producers = {}, {}
    for item in graph.body:
        if not isinstance(item, Eqn):
            continue
        producers[item.out.name] = item
        for atom in item.inputs:
            if isinstance(atom, Var):
                readers.setdefault(atom.name, []).append(item)
    for atom in graph.outputs:
        if isinstance(atom, Var):
            readers.setdefault(atom.name, []).append(None)
    guarded = {item.predicate.name for item in graph.body
               if isinstance(item, Guard) and isinstance(item.predicate, Var)}
    context = SimpleNamespace(readers=readers, producers=producers)
    for item in graph.body:
        if not isinstance(item, Eqn) or item.out.name in guarded:
            continue
        if item.prim.name in ("less", "less_equal", "greater", "greater_equal"):
            selects = _selects(context, item)
            if selects and all(_meets_at_threshold(context, item, select)
                               for select in selects):
                yield item.out.name


def _deciding_vars(graph, outputs_decide, margins=True):
    """Names of the values in ``graph`` from which a decision is reachable (``margins``:
    margin guards count as decisions, as they do for products)."""
    continuous = set(_continuous_selects(graph))
    if not margins:
        continuous |= _margin_internal(graph)
    deciding = set()
    if outputs_decide:
        deciding.update(atom.name for atom in graph.outputs if isinstance(atom, Var))
    for item in reversed(graph.body):
        if isinstance(item, Guard):
            if item.convert == "margin" and not margins:
                continue
            if isinstance(item.predicate, Var):
                deciding.add(item.predicate.name)
            continue
        if not isinstance(item, Eqn):
            continue
        name = item.prim.name
        decides = (name in DECISIONS and item.out.name not in continuous) or (
            item.out.name in deciding) or (
            name == "loop" and _has_decision(item.params_dict["body"]))
        if decides:
            deciding.update(atom.name for atom in item.inputs if isinstance(atom, Var))
    return deciding


def _margin_internal(graph):
    """Names of the values only margin guards read, directly or through each other: a
    margin's bound equations and comparisons (``tracer/guard_margins``)."""
    readers = {}
    for item in graph.body:
        if isinstance(item, Guard):
            if isinstance(item.predicate, Var):
                readers.setdefault(item.predicate.name, []).append(
                    _MARGIN if item.convert == "margin" else None)
        elif isinstance(item, Eqn):
            for atom in item.inputs:
                if isinstance(atom, Var):
                    readers.setdefault(atom.name, []).append(item.out.name)
        else:  # an effect (print)
            for atom in getattr(item, "inputs", ()):
                if isinstance(atom, Var):
                    readers.setdefault(atom.name, []).append(None)
    for atom in graph.outputs:
        if isinstance(atom, Var):
            readers.setdefault(atom.name, []).append(None)
    internal = set()
    for item in reversed(graph.body):
        if isinstance(item, Eqn) and item.prim.name != "loop":
            found = readers.get(item.out.name)
            if found and all(reader is _MARGIN or reader in internal for reader in found):
                internal.add(item.out.name)
    return internal


_MARGIN = object()


def note_loop(graph, loop_eqn):
    """Called before a loop's body is compiled (``codegen/loops.py``): its carried values
    count as decided on when its body decides anything (the next trip may compare what
    this one computed) or a decision in ``graph`` reads the loop's results."""
    body = loop_eqn.params_dict["body"]
    if _has_decision(body):
        _deciding_bodies.add(body.name)
        return
    deciding = _deciding_vars(graph, False)
    # one equation per result of the loop (its ``output``), all with the same body
    if any(item.out.name in deciding for item in graph.body if isinstance(item, Eqn)
           and item.prim.name == "loop" and item.params_dict["body"].name == body.name):
        _deciding_bodies.add(body.name)


def note_partition(joint, forward):
    """Called when a joint forward+backward graph is split (``tracer/partition.py``): the
    forward saves its products for the backward, whose masks (relu's ``pre > 0``) decide on
    them there, out of the forward graph's sight; they count as decided on in
    ``forward``."""
    _decided_in_backward.setdefault(forward.name, set()).update(
        decision_products(joint) | decision_math(joint))


def note_segments(graph, segments):
    """Called when a graph with loops is cut into segments compiled apart
    (``codegen/loops.py``), before they compile: a product one segment returns may be
    decided on by a later loop or segment (gradient descent's ``y = X @ w_true`` before
    its ``while``), out of that segment's sight, so it counts as decided in it (and in
    the program a ``loop_sharing`` group builds for it, by position). ``segments`` are
    ``(segment graph, shared graph or None)`` pairs. Else compiled code summed it in
    another order than NumPy while ``tracer/margin_rules.py`` took it as NumPy's bits."""
    decided = decision_products(graph) | decision_math(graph)
    for own, shared in segments:
        positions = [n for n, item in enumerate(own.body)
                     if isinstance(item, Eqn) and item.out.name in decided]
        for target in (own, shared):
            if target is None or not positions or len(target.body) != len(own.body):
                continue
            _decided_in_backward.setdefault(target.name, set()).update(
                target.body[n].out.name for n in positions
                if isinstance(target.body[n], Eqn))


def decision_products(graph):
    """The names of the float32 and float64 ``matmul`` results in ``graph`` that reach a
    decision."""
    deciding = _deciding_vars(graph, graph.name in _deciding_bodies)
    deciding |= _decided_in_backward.get(graph.name, set())
    return frozenset(
        item.out.name for item in graph.body
        if isinstance(item, Eqn) and item.prim.name == "matmul"
        and np.dtype(item.out.aval.dtype) in NUMPY_DTYPES and item.out.name in deciding)


def decision_math(graph):
    """The names of the math results in ``graph`` that reach a decision and that NumPy's
    own loops compute (``codegen/numpy_loops.exact_loop``: float64 ``exp``, ``log``,
    ``tanh``, ... by default), as ``decision_products`` names the products. The margins
    take those as NumPy's bits (``tracer/exact_math``); the others keep our faster math,
    and so do the margins' own bound equations (a margin guard is no decision here: its
    bound is inflated for its own rounding, and no margin is taken of it).

    >>> from tracejit.tracer.tracing import trace
    >>> def loss(x):
    ...     return np.exp(x).sum(), np.log(x) > 0
    >>> names = decision_math(trace(loss, np.ones(3)).graph)
    >>> len(names) == (numpy_loops.exact_loop("log", np.float64) is not None)
    True
    """
    if not any(item.prim.name in numpy_loops.EXACT_FUNCTIONS for item in graph.equations):
        return frozenset()  # (no walk: most programs)
    deciding = _deciding_vars(graph, graph.name in _deciding_bodies, margins=False)
    deciding |= _decided_in_backward.get(graph.name, set())
    return frozenset(
        item.out.name for item in graph.body
        if isinstance(item, Eqn) and item.out.name in deciding and numpy_loops.exact_loop(
            item.prim.name, item.out.aval.dtype) is not None)


def layout_inputs(graph):
    """Positions of ``graph``'s inputs whose memory layout a decision on a NumPy product
    may see. NumPy hands a Fortran-ordered, transposed or strided operand to BLAS as it is
    (transposed flags, its own loops), where compiled code calls BLAS on a C-ordered copy:
    other sums, so a mask or an exit on the product could decide otherwise. The wrapper
    runs such a call eagerly instead (``codegen/program.py``, ``LAYOUT_EXIT``; a program
    with loops: ``codegen/loops.py``). Only inputs a product's operand reads in place
    count (``_product_layouts``): one copied into a buffer first cannot change its bits."""
    if not _has_product(graph):  # (decision_products walks every select: not for nothing)
        return ()
    deciding_loop = any(
        isinstance(item, Eqn) and item.prim.name == "loop" and _has_product(
            item.params_dict["body"]) and _has_decision(item.params_dict["body"])
        for item in graph.body)
    if not deciding_loop and not decision_products(graph):
        return ()
    deciding = _deciding_vars(graph, False)
    read = _product_layouts(graph)
    return tuple(position for position, var in enumerate(graph.inputs)
                 if var.name in deciding and var.name in read and len(var.aval.shape) >= 1)


def same_as_c_ordered(value):
    """Whether NumPy computes with ``value`` (an input at a ``layout_inputs`` position) as
    it would with its C-ordered copy. C-contiguous arrays; and integer and bool arrays whose
    axes keep C's order, strides only larger (cs231n's ``captions_out = captions[:, 1:]``,
    which a loop program's driver hands a segment): such an array is no BLAS operand, and
    NumPy's elementwise results from it are C-ordered, as from the copy. Not float views:
    NumPy hands them to BLAS as they are.

    >>> ids = np.arange(12).reshape(3, 4)
    >>> same_as_c_ordered(ids[:, 1:]), same_as_c_ordered(ids[:, ::2]), same_as_c_ordered(ids.T)
    (True, True, False)
    >>> same_as_c_ordered(np.ones((3, 4))[:, 1:]), same_as_c_ordered(ids[::-1])
    (False, False)
    """
    if value.flags.c_contiguous:
        return True
    if value.dtype.kind not in "biu":
        return False
    extent = value.itemsize  # the bytes the inner axes span
    for size, stride in zip(reversed(value.shape), reversed(value.strides)):
        if size == 1:
            continue
        if stride < extent:
            return False
        extent = stride * size
    return True


# Results NumPy allocates C-ordered whatever their operands' layouts: a layout walk stops
# there (a write into a buffer is traced as a pad of the value selected into the buffer;
# np.pad's result is C-ordered). Not concatenate: np.roll, traced as one, keeps an
# F-ordered operand's layout (empty_like).
_FRESH_LAYOUTS = ("matmul", "full", "iota", "pad")


def _product_layouts(graph, carried=None):
    """Names of the values in ``graph`` (its inputs too) whose memory layout an operand of
    a float product reads, in ``graph`` or in a loop body in it: the operands themselves and
    what they view or compute elementwise from (margin_rules._c_ordered's layout-keeping
    ops), not what reaches them only through a fresh array (a copy into a buffer: an
    LSTM's strided X written into ``Hin``, whose product reads ``Hin``). ``carried``: a loop
    body's carried inputs by name, each with the body output it takes at later trips."""
    roots = []
    for item in graph.body:
        if not isinstance(item, Eqn):
            continue
        if item.prim.name == "matmul" and np.dtype(item.out.aval.dtype) in NUMPY_DTYPES:
            roots.extend(item.inputs)
        elif item.prim.name == "loop":
            body = item.params_dict["body"]
            inner = _product_layouts(body, _carried(item))
            roots.extend(operand for var, operand in zip(body.inputs, item.inputs)
                         if var.name in inner)
    return _layout_sources(graph, roots, carried or {})


def _carried(loop):
    params = loop.params_dict
    body = params["body"]
    return {var.name: out for var, out in zip(body.inputs[:params["num_carry"]], body.outputs)}


def _layout_sources(graph, roots, carried):
    """Names of the values whose layout ``roots`` (atoms of ``graph``) keep."""
    producers = {eqn.out.name: eqn for eqn in graph.equations}
    stack, seen = [atom for atom in roots if isinstance(atom, Var)], set()
    while stack:
        atom = stack.pop()
        if atom.name in seen:
            continue
        seen.add(atom.name)
        if atom.name in carried and isinstance(carried[atom.name], Var):
            stack.append(carried[atom.name])  # what later trips carry in
        eqn = producers.get(atom.name)
        if eqn is None or eqn.prim.name in _FRESH_LAYOUTS:
            continue
        if eqn.prim.name == "loop":  # a loop's result: what its body's output keeps
            body, output = eqn.params_dict["body"], eqn.params_dict["output"]
            if output < len(body.outputs):
                inner = _layout_sources(body, [body.outputs[output]], _carried(eqn))
                stack.extend(operand for var, operand in zip(body.inputs, eqn.inputs)
                             if var.name in inner and isinstance(operand, Var))
                continue
        stack.extend(operand for operand in eqn.inputs if isinstance(operand, Var))
    return seen


def _has_product(graph):
    """A float ``matmul`` in ``graph``, or in a loop body in it."""
    return any(isinstance(item, Eqn) and (
        (item.prim.name == "matmul" and np.dtype(item.out.aval.dtype) in NUMPY_DTYPES)
        or (item.prim.name == "loop" and _has_product(item.params_dict["body"])))
        for item in graph.body)


def computes_with_numpy(kernel, eqn):
    """True when ``eqn`` (a math equation in ``kernel``'s program) reaches a decision and
    NumPy's loop computes it (``decision_math``)."""
    schedule = kernel.schedule
    found = getattr(schedule, "_decision_math", None)
    if found is None:
        found = schedule._decision_math = decision_math(schedule.graph)
    return eqn.out.name in found


def is_decision_product(kernel):
    """True when ``kernel``'s matmul (a float32 or float64 product) reaches a decision."""
    schedule = kernel.schedule
    found = getattr(schedule, "_decision_products", None)
    if found is None:
        found = decision_products(schedule.graph)
        schedule._decision_products = found
    return kernel.kernel.anchor.out.name in found


# margin_rules takes a decided product of exact operands as exact only where it is one of
# these calls: not under the ``own`` setting (codegen/matmul.py's numpy_exact), nor without
# NumPy's bundled OpenBLAS
margin_rules.set_numpy_products(lambda: blas.openblas() and blas.gemm_setting() != "own")


# --- the calls ------------------------------------------------------------------------------
def _declare(module, name, returns, arguments):
    function = module.globals.get(name)
    if function is None:
        function = ir.Function(module, ir.FunctionType(returns, arguments), name)
    return function


def _element(dtype):
    """``(BLAS prefix, LLVM type)`` of a float32 or float64 product."""
    return ("s", F32) if np.dtype(dtype) == F32_DTYPE else ("d", F64)


def sgemv_function(module, dtype=F32_DTYPE):
    """CBLAS ``sgemv`` (``dgemv`` for float64; 64-bit integers), imported as ``tj_sgemv``
    (``tj_dgemv``)."""
    prefix, element = _element(dtype)
    return _declare(module, f"tj_{prefix}gemv", ir.VoidType(),
                    [I32, I32, I64, I64, element, PTR, I64, PTR, I64, element, PTR, I64])


def sdot_function(module, dtype=F32_DTYPE):
    """CBLAS ``sdot`` (``ddot``; 64-bit integers), imported as ``tj_sdot`` (``tj_ddot``)."""
    prefix, element = _element(dtype)
    return _declare(module, f"tj_{prefix}dot", element, [I64, PTR, I64, PTR, I64])


def ssyrk_function(module, dtype=F32_DTYPE):
    """CBLAS ``ssyrk`` (``dsyrk``; 64-bit integers), imported as ``tj_ssyrk``
    (``tj_dsyrk``)."""
    prefix, element = _element(dtype)
    return _declare(module, f"tj_{prefix}syrk", ir.VoidType(),
                    [I32, I32, I32, I64, I64, element, PTR, I64, element, PTR, I64])


def emit_numpy_product(builder, module, values, operands, transposed, leading, call_sgemm,
                       dtype=F32_DTYPE):
    """Emit what NumPy's matmul calls for ``C = A @ B`` (``dtype`` float32 or float64,
    row-major ``C`` with rows ``n`` apart): ``values`` are ``(m, n, k)`` (i64),
    ``operands`` the pointers ``(A, B, C)``, ``transposed`` whether A and B are read
    transposed, ``leading`` their leading dimensions; ``call_sgemm()`` emits the ``gemm``
    call the kernel makes otherwise."""
    m, n, k = values
    a, b, c = operands
    a_transposed, b_transposed = transposed
    lda, ldb = leading

    def i64(value):
        return ir.Constant(I64, value)

    def equal(value, constant):
        return builder.icmp_signed("==", value, i64(constant))

    # A's stride along k and B's, in elements (a vector operand's is 1).
    a_step = lda if a_transposed else i64(1)
    b_step = i64(1) if b_transposed else ldb
    gemm_only = builder.or_(builder.or_(equal(m, 0), equal(n, 0)),
                            builder.or_(equal(k, 0), equal(k, 1)))
    with builder.if_else(gemm_only) as (plain, special):
        with plain:  # zeros, or each element one rounded product: any call agrees
            call_sgemm()
        with special:
            single = builder.and_(equal(m, 1), equal(n, 1))
            with builder.if_else(single) as (dot, wider):
                with dot:
                    value = builder.call(sdot_function(module, dtype),
                                         [k, a, a_step, b, b_step])
                    builder.store(value, c)
                with wider:
                    _vectors_or_matrices(builder, module, values, operands, transposed,
                                         leading, (a_step, b_step), call_sgemm, dtype)


def _vectors_or_matrices(builder, module, values, operands, transposed, leading, steps,
                         call_sgemm, dtype):
    m, n, k = values
    a, b, c = operands
    a_transposed, b_transposed = transposed
    lda, ldb = leading
    a_step, b_step = steps
    _, element = _element(dtype)
    one, zero = ir.Constant(element, 1.0), ir.Constant(element, 0.0)
    gemv = sgemv_function(module, dtype)

    def i32(value):
        return ir.Constant(I32, value)

    def i64(value):
        return ir.Constant(I64, value)

    with builder.if_else(builder.icmp_signed("==", m, i64(1))) as (row, not_row):
        with row:  # vector @ matrix: B as an (n, k) matrix times A's row
            order = COLUMN_MAJOR if b_transposed else ROW_MAJOR
            builder.call(gemv, [i32(order), i32(TRANSPOSE), k, n, one, b, ldb, a, a_step,
                                zero, c, i64(1)])
        with not_row:
            with builder.if_else(builder.icmp_signed("==", n, i64(1))) as (column, matrix):
                with column:  # matrix @ vector
                    order = ROW_MAJOR if a_transposed else COLUMN_MAJOR
                    builder.call(gemv, [i32(order), i32(TRANSPOSE), k, m, one, a, lda, b,
                                        b_step, zero, c, i64(1)])
                with matrix:
                    if a_transposed == b_transposed:
                        call_sgemm()
                    else:
                        _gemm_or_syrk(builder, module, values, operands, a_transposed, lda,
                                      call_sgemm, dtype)


def _gemm_or_syrk(builder, module, values, operands, a_transposed, lda, call_sgemm, dtype):
    """``x @ x.T`` (the same memory, one side transposed): NumPy's ``ssyrk`` and its copy
    of the upper triangle into the lower; any other pair: ``sgemm``."""
    m, n, k = values
    a, b, c = operands
    _, element = _element(dtype)
    same = builder.and_(builder.icmp_unsigned("==", builder.ptrtoint(a, I64),
                                              builder.ptrtoint(b, I64)),
                        builder.icmp_signed("==", m, n))
    with builder.if_else(same) as (symmetric, general):
        with symmetric:
            builder.call(ssyrk_function(module, dtype), [
                ir.Constant(I32, ROW_MAJOR), ir.Constant(I32, UPPER),
                ir.Constant(I32, TRANSPOSE if a_transposed else NO_TRANSPOSE), n, k,
                ir.Constant(element, 1.0), a, lda, ir.Constant(element, 0.0), c, n])

            def row(i):
                def column(j):
                    upper = builder.gep(c, [builder.add(builder.mul(i, n), j)],
                                        source_etype=element)
                    lower = builder.gep(c, [builder.add(builder.mul(j, n), i)],
                                        source_etype=element)
                    builder.store(builder.load(upper, typ=element), lower)

                counted_loop(builder, builder.add(i, ir.Constant(I64, 1)), n, column,
                             label="syrk.copy.column")

            counted_loop(builder, ir.Constant(I64, 0), n, row, label="syrk.copy.row")
        with general:
            call_sgemm()
