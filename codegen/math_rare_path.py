"""Slow paths taken per vector, only when some lane needs them.

A math function's fast path covers the common range (sin and cos: |x| below 2^20); a few
arguments (huge, infinite, NaN) need a slow path that would cost every lane as much again
if it were computed and selected. ``rare_path`` branches to it instead:

* in scalar code (and the scalar remainder of a vectorized loop) the branch is per
  element: ``if needed: result = call slow(x)``, the slow function out of line;
* LLVM's loop vectorizer replaces that conditional call with one call per vector of a
  masked *vector variant* (the ``vector-function-abi-variant`` attribute names them, for
  the vector widths of the host: 4, 8 and, with AVX-512, 16 float lanes), which tests
  whether any lane of its mask is set and runs the slow path on the whole vector only
  then;
* after the vectorizer, ``codegen.llvm`` inlines the variants (their names start with
  ``VECTOR_VARIANT_PREFIX``), so a kernel pays one compare and one predictable branch
  per vector for the rare path, and a call only when a lane needs it.

The slow path itself is emitted once, on vectors of one register of float64 lanes
(``slow(builder, *vectors)``; ``math_core`` helpers work on any shape), in a function of
its own that the scalar function and every variant call (wider vectors in pieces): LLVM
optimizes and emits the (long) general code once per function and precision, not once
per width, and the loops stay small.

>>> from llvmlite import ir
>>> from tracejit.codegen.dtypes import F32
>>> from tracejit.codegen.math_core import constant
>>> module = ir.Module()
>>> kernel = ir.Function(module, ir.FunctionType(F32, [F32]), "kernel")
>>> builder = ir.IRBuilder(kernel.append_basic_block())
>>> x = kernel.args[0]
>>> huge = builder.fcmp_unordered(">", x, ir.Constant(F32, 1e6))
>>> result = rare_path(builder, "halve", huge, x, x,
...                    lambda b, v: b.fmul(v, constant(v.type, 0.5)))
>>> _ = builder.ret(result)
>>> sorted(f.name for f in module.functions if "halve" in f.name)[:3]
['tracejit_slow_halve_f32', 'tracejit_slow_halve_f32_x8', 'tracejit_vv_halve_f32_m16']
"""

from __future__ import annotations

from functools import lru_cache

from llvmlite import ir
from llvmlite.ir.instructions import CallInstrAttributes

from . import llvm
from .dtypes import F32, F64, I1
from .llvm import VECTOR_VARIANT_PREFIX
from .math_core import element_of


class _CallAttributes(CallInstrAttributes):
    """Call-site attributes, string attributes (the vector variant mapping) included:
    llvmlite's own set accepts only a few keywords."""

    def add(self, name):
        set.add(self, name)


@lru_cache(maxsize=None)
def vector_bits():
    """The width of the host's vector registers: 512 with AVX-512, 256 with AVX, else
    128 (SSE, NEON)."""
    features = llvm.host_description()["features"].split(",")
    if "+avx512f" in features:
        return 512
    if "+avx" in features:
        return 256
    return 128


def variant_lanes(element):
    """The vector widths LLVM may vectorize a loop of ``element`` values at: from 4 lanes
    (a loop that also holds wider types) up to the host's full registers."""
    bits = 32 if element == F32 else 64
    most = max(4, vector_bits() // bits)
    lanes, widths = 4, []
    while lanes <= most:
        widths.append(lanes)
        lanes *= 2
    return widths


def _suffix(element):
    return "f32" if element == F32 else "f64"


def _out_of_line(function):
    function.linkage = "internal"
    function.attributes.add("noinline")
    function.attributes.add("nounwind")
    function.attributes.add("readnone")


def _general_function(module, name, element, arity, slow):
    """The one copy of the slow path: ``slow`` on vectors of one register of float64 lanes
    (the general code of float32 computes in float64), out of line. Every caller of the
    slow path calls it (a wider vector in pieces), so LLVM optimizes and emits the long
    general code once, and the loops that call it stay small."""
    lanes = general_lanes()
    full = f"tracejit_slow_{name}_{_suffix(element)}_x{lanes}"
    function = module.globals.get(full)
    if function is None:
        vector = ir.VectorType(element, lanes)
        function = ir.Function(module, ir.FunctionType(vector, [vector] * arity), full)
        _out_of_line(function)
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        builder.ret(slow(builder, *function.args))
    return function


def general_lanes():
    """Lanes of the general code's vectors: one register of float64."""
    return max(2, vector_bits() // 64)


def _shuffled(builder, vector, indices):
    mask = ir.Constant(ir.VectorType(ir.IntType(32), len(indices)),
                       [ir.Constant(ir.IntType(32), index) for index in indices])
    return builder.shuffle_vector(vector, vector, mask)


def _call_general(builder, general, arguments):
    """``general`` on ``arguments`` (scalars, or vectors of any width): in pieces of its
    width, the last one padded by repeating lanes (computed and dropped)."""
    lanes = general.function_type.return_type.count
    scalar = not isinstance(arguments[0].type, ir.VectorType)
    if scalar:
        arguments = [builder.insert_element(ir.Constant(ir.VectorType(argument.type, 1), None),
                                            argument, ir.Constant(ir.IntType(32), 0))
                     for argument in arguments]
    width = arguments[0].type.count
    pieces = []
    for start in range(0, width, lanes):
        indices = [min(start + index, width - 1) for index in range(lanes)]
        pieces.append(builder.call(general, [_shuffled(builder, argument, indices)
                                             for argument in arguments]))
    # Gather each lane from its piece: join the pieces pairwise, then keep ``width`` lanes.
    while len(pieces) > 1:
        joined = []
        for left, right in zip(pieces[0::2], pieces[1::2]):
            size = left.type.count
            mask = ir.Constant(ir.VectorType(ir.IntType(32), 2 * size),
                               [ir.Constant(ir.IntType(32), index) for index in range(2 * size)])
            joined.append(builder.shuffle_vector(left, right, mask))
        if len(pieces) % 2:
            joined.append(pieces[-1])
        pieces = joined
    result = pieces[0]
    if result.type.count != width:
        result = _shuffled(builder, result, list(range(width)))
    if scalar:
        return builder.extract_element(result, ir.Constant(ir.IntType(32), 0))
    return result


def _scalar_function(module, name, element, arity, general):
    full = f"tracejit_slow_{name}_{_suffix(element)}"
    function = module.globals.get(full)
    if function is None:
        function = ir.Function(module, ir.FunctionType(element, [element] * arity), full)
        # Kept out of line until the vectorizer has replaced it by its vector variants.
        _out_of_line(function)
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        builder.ret(_call_general(builder, general, list(function.args)))
    return function


def _vector_variant(module, name, element, arity, lanes, general):
    full = f"{VECTOR_VARIANT_PREFIX}{name}_{_suffix(element)}_m{lanes}"
    if module.globals.get(full) is not None:
        return full
    vector = ir.VectorType(element, lanes)
    function = ir.Function(
        module, ir.FunctionType(vector, [vector] * arity + [ir.VectorType(I1, lanes)]), full)
    # External until codegen.llvm inlines it: nothing may delete it before the vectorizer
    # has had the chance to call it.
    function.attributes.add("nounwind")
    function.attributes.add("readnone")
    *arguments, mask = function.args
    entry = function.append_basic_block("entry")
    needed = function.append_basic_block("slow")
    done = function.append_basic_block("done")
    builder = ir.IRBuilder(entry)
    lanes_set = builder.bitcast(mask, ir.IntType(lanes))
    any_lane = builder.icmp_unsigned("!=", lanes_set, ir.Constant(ir.IntType(lanes), 0))
    _unlikely(builder.cbranch(any_lane, needed, done))
    builder.position_at_end(needed)
    result = _call_general(builder, general, arguments)
    slow_end = builder.block
    builder.branch(done)
    builder.position_at_end(done)
    merged = builder.phi(vector)
    merged.add_incoming(arguments[0], entry)  # lanes outside the mask are not read
    merged.add_incoming(result, slow_end)
    builder.ret(merged)
    return full


def _unlikely(branch):
    """Tell LLVM the true edge is rare (block placement keeps the fast path straight)."""
    module = branch.parent.parent.module
    weights = module.add_metadata([ir.MetaDataString(module, "branch_weights"),
                                   ir.Constant(ir.IntType(32), 1),
                                   ir.Constant(ir.IntType(32), 2000)])
    branch.set_metadata("prof", weights)


def rare_path(builder, name, needed, fast, arguments, slow):
    """``fast`` where ``needed`` is false, else ``slow(builder, *arguments)``, computed only
    for the elements (scalar code) or vectors (vectorized code) that need it. ``arguments``
    is one float or a tuple of floats of one type; ``name`` names the slow path in the
    module (one function per name and precision)."""
    arguments = tuple(arguments) if isinstance(arguments, (tuple, list)) else (arguments,)
    element = element_of(arguments[0].type)
    assert element in (F32, F64), "floats only"
    assert all(argument.type == element for argument in arguments), "scalar code only"
    module = builder.module
    general = _general_function(module, name, element, len(arguments), slow)
    scalar = _scalar_function(module, name, element, len(arguments), general)
    widths = variant_lanes(element)
    variants = [_vector_variant(module, name, element, len(arguments), lanes, general)
                for lanes in widths]
    # The vector function ABI's name of a masked variant taking vectors ("v") only.
    parameters = "v" * len(arguments)
    mapping = ",".join(f"_ZGV_LLVM_M{lanes}{parameters}_{scalar.name}({variant})"
                       for lanes, variant in zip(widths, variants))

    before = builder.block
    function = before.function
    taken = function.append_basic_block(f"{name}.slow")
    joined = function.append_basic_block(f"{name}.join")
    _unlikely(builder.cbranch(needed, taken, joined))
    builder.position_at_end(taken)
    call = builder.call(scalar, list(arguments))
    call.attributes = _CallAttributes(
        ["nounwind", "memory(none)", f'"vector-function-abi-variant"="{mapping}"'])
    builder.branch(joined)
    builder.position_at_end(joined)
    result = builder.phi(fast.type)
    result.add_incoming(fast, before)
    result.add_incoming(call, taken)
    return result
