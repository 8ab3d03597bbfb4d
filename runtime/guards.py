"""Entry guards: one generated Python function per variant, checked before native code runs.

``EntrySpec`` describes what a variant was compiled for: the arguments' structure, each
array leaf's type, dtype, static dims and dynamic dims (symbols with bucket ranges), the
relations between dims the trace assumed (shape guards), Python scalars it specialized on,
and the implicit inputs (arrays read through globals, closures, attributes). ``compile_guard``
turns it into straight-line Python that returns the program's inputs when everything holds
and ``None`` otherwise, so the hit path costs a few attribute reads and comparisons.

The spec may come from a disk cache entry, so the text is built only from what
``_literal`` and ``_identifier`` let through (ints, bools, symbol names, the comparison
operators); every other value reaches the guard as a bound constant, never as text.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> spec = EntrySpec.from_trace(trace(lambda x: x * 2, np.ones(5), dynamic=True))
>>> guard = compile_guard(spec)
>>> [a.shape for a in guard((np.ones(7),), {})], guard((np.ones(9),), {})
([(7,)], None)
"""

from __future__ import annotations

import array
import ast
import collections
import copy
import math
import re
from dataclasses import dataclass, field

import numpy as np

from tracejit.codegen import SideExit, array_guard, output_reuse
from tracejit.codegen.array_guard import ANY_DIM
from tracejit.codegen.program import inline_body
from tracejit.tracer import pytree, random_draws, shared_objects
from tracejit.tracer.abstract import NUMPY_SCALARS
from tracejit.tracer.dims import DimExpr
from tracejit.tracer.generated_code import Source
from tracejit.tracer.ir import format_shape_guard

from . import object_arguments

JSON_TYPES = (type(None), bool, int, float, str)


def compared_by_value(value):
    """Whether an argument leaf is specialized on a copy of its contents: a set, bytearray,
    ``array.array`` or deque, whose identity would let a change in place pass
    (``flags.add(1)``, ``recent.append(x)`` between calls). A deque of arrays is checked
    for the same objects in it (its arrays are inputs read through paths)."""
    return type(value) in (set, bytearray, array.array, collections.deque)


def is_json_value(value):
    if isinstance(value, JSON_TYPES):
        return not isinstance(value, float) or value == value  # NaN is not == itself
    if isinstance(value, (tuple, list)):
        return all(is_json_value(item) for item in value)
    return False


@dataclass
class LeafSpec:
    """One leaf of the arguments: ``array`` (``type_name`` ndarray or Tensor), ``scalar``
    (a Python scalar passed as a dynamic input), ``static`` (specialized on its value) or
    ``instance`` (an object of the class ``value``: ``object_arguments``)."""

    kind: str
    type_name: str = ""
    dtype: str = ""
    shape: tuple = ()  # ints and symbol names
    value: object = None
    requires_grad: bool = False  # a Tensor the variant differentiates (grad mode on)
    # a static generator the program only draws from (found again at its path per call):
    # its (type, bit generator type), checked instead of its identity
    generator: tuple = None


@dataclass
class ImplicitSpec:
    path: object  # tracejit.tracer.implicit.Path
    dtype: str
    shape: tuple
    type_name: str = "ndarray"
    requires_grad: bool = False


def argument_scalar_type(type_name):
    """The type a run-time scalar argument must have: ``int``, ``float`` or a NumPy
    number type (``tracer.abstract.NUMPY_SCALARS``).

    >>> argument_scalar_type("float"), argument_scalar_type("float32").__name__
    (<class 'float'>, 'float32')
    """
    return {"int": int, "float": float}.get(type_name) or NUMPY_SCALARS[type_name]


def number_type(implicit):
    """The type of a number an object keeps (``int``, ``float``, ``np.float64``...) when
    ``implicit`` (an ``ImplicitSpec``) is one, else None (an array)."""
    if implicit.type_name in ("int", "float"):
        return {"int": int, "float": float}[implicit.type_name]
    scalar = np.dtype(implicit.dtype).type
    return scalar if implicit.shape == () and implicit.type_name == scalar.__name__ else None


# The Python ints a run-time input holds: NumPy's int64 (a bigger one is a new trace)
INT64_LOW, INT64_HIGH = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)


@dataclass
class EntrySpec:
    treedef: object
    leaves: list
    symbols: dict  # name -> (low, high)
    shape_guards: list  # tracejit.tracer.ir.ShapeGuard
    implicit: list
    inputs: list  # graph input i comes from ("leaf", k) or ("implicit", j)
    shape_guard_text: list = field(default_factory=list)
    outside: list = field(default_factory=list)  # (Path, "value"|"len", value) read at trace
    # host draws made after every check passed (tracer.random_draws.DrawProgram): graph
    # input i comes from ("draw", k), the k-th value drawn
    draws: object = None

    @staticmethod
    def from_trace(trace):
        graph = trace.graph
        # (requires_grad as traced: also the Tensors no output depends on)
        wrt = set(map(tuple, trace.gradients.wrt + trace.gradients.unreached)) if (
            trace.gradients) else set()
        leaves = []
        inputs = [None] * len(graph.inputs)
        drawn = random_draws.drawn_arguments(trace.draws)
        for position, spec in enumerate(trace.input_specs):
            if spec.kind == "array":
                aval = graph.inputs[spec.input_index].aval
                shape = tuple(_dim_name(dim) for dim in aval.shape)
                leaves.append(LeafSpec("array", spec.type_name, aval.dtype.str, shape,
                                       requires_grad=("leaf", position) in wrt))
                inputs[spec.input_index] = ("leaf", position)
            elif spec.kind == "scalar":
                leaves.append(LeafSpec("scalar", spec.type_name))
                inputs[spec.input_index] = ("leaf", position)
            elif object_arguments.classed(spec.value, _held(trace)):  # self: its class
                leaves.append(LeafSpec("instance", spec.type_name, value=type(spec.value)))
            else:  # (a set is checked against a copy: flags.add(1) between calls changes it)
                value = spec.value
                if compared_by_value(value):
                    value = copy.copy(value)
                generator = random_draws.generator_kind(value) if (
                    position in drawn and not _holds(trace, value)) else None
                leaves.append(LeafSpec("static", spec.type_name, value=value,
                                       generator=generator))
        implicit = []
        for number, entry in enumerate(trace.implicit_inputs):
            aval = graph.inputs[entry.input_index].aval
            type_name = type(entry.value).__name__
            implicit.append(ImplicitSpec(entry.path, aval.dtype.str, tuple(aval.shape),
                                         type_name, ("implicit", number) in wrt))
            inputs[entry.input_index] = ("implicit", number)
        symbols = {symbol.name: (symbol.low, symbol.high) for symbol in graph.symbols}
        for index, number in trace.drawn_inputs.items():
            inputs[index] = ("draw", number)
        for index, (leaf, symbol) in trace.count_inputs.items():  # range(num_iterations)
            # (range(self.n_iter): the count is the implicit input's, count_attributes)
            inputs[index] = ("count_implicit", leaf[1], symbol) if type(leaf) is tuple else (
                "count", leaf, symbol)
        if trace.gradients is not None:  # cotangents are the backward's inputs, not the call's
            cotangents = set(trace.gradients.cotangent_inputs)
            inputs = [source for index, source in enumerate(inputs) if index not in cotangents]
        return EntrySpec(trace.input_tree, leaves, symbols, list(graph.shape_guards), implicit,
                         inputs, [format_shape_guard(guard) for guard in graph.shape_guards],
                         list(trace.outside_values), trace.draws)

    def describe(self, names=None):
        """Readable lines: what a call must look like to use this variant. ``names`` are the
        argument leaves' names (``diagnostics.leaf_names``)."""
        if names is None or len(names) != len(self.leaves):
            names = [f"arg leaf {position}" for position in range(len(self.leaves))]
        lines, where = [], {}
        for name, leaf in zip(names, self.leaves):
            if leaf.kind == "array":
                dims = ", ".join(str(dim) for dim in leaf.shape)
                grad = " requires_grad" if leaf.requires_grad else ""
                lines.append(f"{name}: {leaf.type_name} {np.dtype(leaf.dtype)}[{dims}]{grad}")
                for axis, dim in enumerate(leaf.shape):
                    if isinstance(dim, str):
                        where.setdefault(dim, f"{name}.shape[{axis}]")
            elif leaf.kind == "scalar":
                lines.append(f"{name}: any {leaf.type_name} (dynamic)")
            elif leaf.kind == "instance":
                lines.append(f"{name}: any {leaf.value.__qualname__} object")
            elif leaf.generator is not None:
                kind, bits = leaf.generator
                lines.append(f"{name}: any {kind.__name__}({bits.__name__}), drawn from")
            else:
                lines.append(f"{name}: == {leaf.value!r}")
        for source in map(tuple, self.inputs):
            if source[0] == "count":
                where.setdefault(source[2], f"{names[source[1]]}, a loop's trip count")
            elif source[0] == "count_implicit":
                where.setdefault(source[2], f"{self.implicit[source[1]].path}, a loop's "
                                 "trip count")
        for symbol, (low, high) in self.symbols.items():
            seen = f" ({where[symbol]})" if symbol in where else ""
            lines.append(f"{symbol}{seen} in [{low}, {high}]")
        lines.extend(self.shape_guard_text)
        for spec in self.implicit:
            lines.append(f"{spec.path}: {spec.type_name} {np.dtype(spec.dtype)}{list(spec.shape)}")
        for path, kind, value in self.outside:
            if kind == "len":
                lines.append(f"len({path}) == {value[1]} ({value[0]})")
            elif kind == "has":
                lines.append(f"hasattr: {path} {'exists' if value else 'is missing'}")
            elif kind == "keys":
                lines.append(f"keys of {path} == {list(value)!r}")
            elif kind == "shared":
                lines.extend(value.describe())
            elif kind == "is":
                from .serialize import import_address  # serialize imports this module

                address = import_address(value)
                shown = f"{address['module']}.{address['qualname']}" if address else repr(value)
                lines.append(f"{path} is {shown}")
            else:
                lines.append(f"{path} == {value!r}")
        if self.draws is not None:
            lines.extend(f"then draws {op}" for op in self.draws.describe())
        return lines


def _dim_name(dim):
    if isinstance(dim, DimExpr):
        (monomial, _), = dim.terms
        return monomial[0]
    return int(dim)


_IDENTIFIER = re.compile(r"s[0-9]{1,6}\Z")  # symbol names, as tracing makes them
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def _literal(value, what):
    """An int or bool as Python text; anything else is refused."""
    if type(value) is bool:
        return "True" if value else "False"
    if type(value) is not int:
        raise ValueError(f"entry guard: {what} is {value!r}, not an integer")
    return str(value)


def _identifier(name, known, what):
    """A symbol name as Python text: it must look like one and be one of ``known``."""
    if not (isinstance(name, str) and _IDENTIFIER.match(name) and name in known):
        raise ValueError(f"entry guard: {what} {name!r} is not a symbol of this variant")
    return name


def _relation(guard, bound):
    """A shape guard's comparison as text over bound symbols."""
    if guard.op not in _COMPARISONS:
        raise ValueError(f"entry guard: unknown comparison {guard.op!r}")
    sides = []
    for side in (guard.lhs, guard.rhs):
        if isinstance(side, DimExpr):
            for name in side.symbols():
                _identifier(name, bound, "a shape guard's dim")
            sides.append(str(side))
        else:
            sides.append(_literal(side, "a shape guard's side"))
    expected = _literal(guard.expected, "a shape guard's expected value")
    return f"(({sides[0]}) {guard.op} ({sides[1]})) is not {expected}"


class _Source(Source):
    """An entry's text: a ``generated_code.Source`` whose checks return ``miss`` (text)
    when one fails."""

    def __init__(self, miss="None"):
        super().__init__()
        self.miss = miss


def _array_checks(source, variable, spec, bound, ranges, native=False):
    """Checks of one array (``variable`` holds it); binds symbols on first sight and
    checks their bucket, later sights must equal them. ``native``: the array guard
    (``codegen/array_guard.py``) has checked its type, dtype, rank and static dims, so
    only its symbolic dims are left."""
    if native:
        if any(isinstance(dim, str) for dim in spec.shape):
            source.add(f"shape = {variable}.shape")
            _symbolic_dims(source, spec, bound, ranges)
        return
    type_name = spec.type_name
    from .autograd import is_grad_enabled
    from .tensor import Tensor

    array_type = source.constant(Tensor if type_name == "Tensor" else np.ndarray, "T")
    source.add(f"if type({variable}) is not {array_type}: return {source.miss}")
    if type_name == "Tensor":
        # Compiled with or without gradients: the call must want the same.
        grad_mode = source.constant(is_grad_enabled, "G")
        source.add(f"if ({variable}.requires_grad and {grad_mode}()) is not "
                   f"{bool(spec.requires_grad)}: return {source.miss}")
        source.add(f"{variable} = {variable}.data")
    dtype = source.constant(np.dtype(spec.dtype), "D")
    # Identity first (the hit path), then equality: an array that was pickled (a Dask or
    # multiprocessing task's) carries an equal dtype object that is not NumPy's own.
    source.add(f"if {variable}.dtype is not {dtype} and {variable}.dtype != {dtype}: "
               f"return {source.miss}")
    if not any(isinstance(dim, str) for dim in spec.shape):  # static: one comparison
        dims = "".join(f"{_literal(dim, 'a static dim')}, " for dim in spec.shape)
        source.add(f"if {variable}.shape != ({dims}): return {source.miss}")
        return
    source.add(f"shape = {variable}.shape")
    source.add(f"if len(shape) != {len(spec.shape)}: return {source.miss}")
    for axis, dim in enumerate(spec.shape):
        if not isinstance(dim, str):
            source.add(f"if shape[{axis}] != {_literal(dim, 'a static dim')}: return {source.miss}")
    _symbolic_dims(source, spec, bound, ranges)


def _symbolic_dims(source, spec, bound, ranges):
    """Bind each symbolic dim of ``shape`` (the array's, in the generated code) on first
    sight and check its bucket; later sights must equal it."""
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, str):
            _bind_symbol(source, _identifier(dim, ranges, "a dim"), f"shape[{axis}]", bound,
                         ranges)


def _bind_symbol(source, name, expression, bound, ranges):
    """Bind the symbol ``name`` to ``expression`` (a dim of a shape, a trip count) on first
    sight and check its range (its bucket); later sights must equal it."""
    if name in bound:
        source.add(f"if {expression} != {name}: return {source.miss}")
        return
    bound.add(name)
    low, high = (_literal(end, f"the range of {name}") for end in ranges[name])
    source.add(f"{name} = {expression}")
    source.add(f"if {name} < {low} or {name} > {high}: return {source.miss}")


def compile_guard(spec, draws=True):
    """The entry guard of ``spec`` as a function ``guard(args, kwargs) -> inputs | None``.
    ``draws=False``: a guard that only checks (its drawn inputs are None), where a call
    asks whether a variant would take it and runs nothing."""
    source = _Source()
    source.add("def guard(args, kwargs):", depth=0)
    inputs = _guard_statements(spec, source, draws)
    source.add(f"return ({inputs}{',' if len(spec.inputs) == 1 else ''})")
    return source.define("guard", "entry guard")


def _guard_statements(spec, source, draws=True):
    """Add the checks of ``spec`` to ``source`` (in a function of ``args, kwargs``; a
    failed check returns ``source.miss``), then its host draws (``draws=False``: None in
    their place); returns the program's inputs as text."""
    flat = spec.treedef == pytree.flatten((tuple([0] * len(spec.leaves)), {}))[1]
    if flat:
        source.add(f"if kwargs or len(args) != {len(spec.leaves)}: return {source.miss}")
        source.add("leaves = args")
    else:
        tree = source.constant(spec.treedef, "TREE")
        flatten = source.constant(pytree.flatten, "F")
        reads = _structure_reads(spec.treedef, source)
        direct = reads is not None and len(reads[1]) == len(spec.leaves)
        if direct:
            # dicts, lists and tuples of exactly those types and keys read directly;
            # anything else (a subclass) flattens as before, and must match the same way
            conditions, texts = reads
            source.add(f"if {' and '.join(conditions)}:")
            source.add(f"    leaves = ({', '.join(texts)},)")
            source.add("else:")
            source.indent += 1
        source.add(f"leaves, tree = {flatten}((args, kwargs))")
        source.add(f"if tree != {tree}: return {source.miss}")
        if direct:
            source.indent -= 1
    if spec.leaves:  # as many as the structure checked has: one unpacking names them all
        source.add(f"{', '.join(f'leaf{position}' for position in range(len(spec.leaves)))}"
                   ", = leaves")
    bound = set()
    values = {("leaf", position): f"leaf{position}" for position in range(len(spec.leaves))}
    native = _native_arrays(spec) if flat else None
    if native is None:
        _leaf_checks(source, spec, bound)
    else:  # the arrays' type, dtype and static dims in one native call, else all in Python
        call = f"{source.constant(native[0], 'M')}(leaves, {source.constant(native[1], 'A')})"
        condition = len(source.lines)
        source.indent += 1
        bound_natively = set(bound)
        if _leaf_checks(source, spec, bound_natively, native=True):  # checks are left
            source.lines.insert(condition, "    " * source.indent + f"if {call}:")
            source.add("else:", depth=0)
        else:
            source.add(f"if not {call}:", depth=0)
        _leaf_checks(source, spec, bound)
        source.indent -= 1
        if bound != bound_natively:
            raise AssertionError("entry guard: the native and Python checks bind other dims")
    for source_key in map(tuple, spec.inputs):
        if source_key[0] == "count":
            _count_statements(source, source_key, bound, spec.symbols, values)
    for number, implicit in enumerate(spec.implicit):
        variable = f"implicit{number}"
        source.add("try:")
        source.add(f"    {variable} = {_reader(source, implicit.path)}")
        source.add("except (KeyError, AttributeError, IndexError, ValueError): "
                   f"return {source.miss}")
        scalar = number_type(implicit)
        if scalar is not None:  # a number an object keeps (self.t)
            kind = source.constant(scalar, "T")
            source.add(f"if type({variable}) is not {kind}: return {source.miss}")
        else:
            _array_checks(source, variable, LeafSpec("array", implicit.type_name,
                                                      implicit.dtype, implicit.shape,
                                                      requires_grad=implicit.requires_grad),
                          bound, spec.symbols)
        values[("implicit", number)] = variable
    for source_key in map(tuple, spec.inputs):
        if source_key[0] == "count_implicit":  # range(self.n_iter): read above
            _count_statements(source, source_key, bound, spec.symbols, values)
    for guard in spec.shape_guards:  # (after every symbol is bound)
        source.add(f"if {_relation(guard, bound)}: return {source.miss}")
    for number, (path, kind, value) in enumerate(spec.outside):
        variable = f"outside{number}"
        if kind == "has":  # hasattr(layer, "cache") decided the trace: the same answer
            source.add("try:")
            source.add(f"    {_reader(source, path)}")
            source.add(f"    {variable} = True")
            source.add(f"except AttributeError: {variable} = False")
            source.add(f"except (KeyError, IndexError, ValueError, TypeError): "
                       f"return {source.miss}")
            source.add(f"if {variable} is not {value!r}: return {source.miss}")
            continue
        if kind == "shared":  # self.a.fc is self.b.fc, or not, as when traced
            shared_objects.add_check(source, value, f"return {source.miss}",
                                     prefix=f"shared{number}_")
            continue
        source.add("try:")
        if path.root[0] == "global" and not path.steps:  # the common case, read directly
            namespace = source.constant(path.root[1], "G")
            name = path.root[2]
            if not (isinstance(name, str) and name.isidentifier()):
                raise ValueError(f"entry guard: global {name!r} is not a name")
            source.add(f"    {variable} = {namespace}[{name!r}]")  # an identifier: safe as text
        else:
            source.add(f"    {variable} = {_reader(source, path)}")
        source.add("except (KeyError, AttributeError, IndexError, ValueError, TypeError): "
                   f"return {source.miss}")
        if kind == "is":
            source.add(f"if {variable} is not {source.constant(value, 'F')}: return {source.miss}")
        elif kind == "keys":
            keys = source.constant(value, "K")
            source.add(f"if not isinstance({variable}, dict) or tuple({variable}) != {keys}: "
                       f"return {source.miss}")
        elif kind == "len":
            kind_type = source.constant({"list": list, "tuple": tuple,
                                         "deque": collections.deque}[value[0].split()[0]], "T")
            # (a subclass, class Layers(list): its class is guarded by its own entry)
            same_kind = (f"isinstance({variable}, {kind_type})" if value[0].endswith(
                " subclass") else f"type({variable}) is {kind_type}")
            source.add(f"if not {same_kind} or len({variable}) != "
                       f"{_literal(value[1], 'a guarded length')}: return {source.miss}")
        elif kind != "value":
            raise ValueError(f"entry guard: an outside value of kind {kind!r}")
        else:
            kind_type = source.constant(type(value), "T")
            source.add(f"if type({variable}) is not {kind_type} or "
                       f"{_differs(source, variable, value)}: return {source.miss}")
    if spec.draws is not None:
        _draw_statements(spec.draws, source, bound, values, draws)
    return ", ".join(values[source_key] for source_key in map(tuple, spec.inputs))


def _count_carrier(count):
    """The input a loop's trip count argument gives the program
    (``tracer.loop_trip_counts``): its shape binds the count's symbol there."""
    return np.empty((count, 0), np.int8)


def _count_statements(source, key, bound, ranges, values):
    """Bind the symbol of a trip count argument (``("count", leaf, symbol)``, an int the
    leaf checks accepted) and check its range; its count carrier is the program's input."""
    kind, leaf, symbol = key
    name = _identifier(symbol, ranges, "a trip count")
    reads = "implicit" if kind == "count_implicit" else "leaf"  # count_attributes' or not
    variable = f"{reads}{_literal(leaf, 'a trip count leaf')}"
    # int(): a NumPy int count binds a Python int, as a shape's dim does (its np.bool_
    # comparisons would fail the `is not False` shape guards below)
    _bind_symbol(source, name, f"int({variable})", bound, ranges)
    values[key] = f"count{variable}"
    source.add(f"count{variable} = {source.constant(_count_carrier, 'C')}({name})")


def _structure_reads(treedef, source):
    """``(conditions, texts)``: when the conditions (text) hold, the call's ``(args,
    kwargs)`` holds plain dicts, lists and tuples exactly where ``treedef`` has them, with
    its keys and lengths, so ``pytree.flatten`` would give ``treedef`` and the leaves the
    ``texts`` read (one item access per level; a leaf that is a container after all fails
    its own check). None where ``treedef`` has a namedtuple, a ``Counter`` or
    ``OrderedDict`` or a loop's rows (flattened at every call instead)."""
    conditions, texts = [], []

    def walk(node, text):
        if node.kind == "leaf":
            texts.append(text)
            return True
        if node.kind == "dict" and node.mapping is None:
            conditions.append(f"type({text}) is dict")
            conditions.append(f"tuple({text}) == {source.constant(tuple(node.keys), 'K')}")
            items = [f"{text}[{source.constant(key, 'K')}]" for key in node.keys]
        elif node.kind in ("tuple", "list") and node.keys is None:
            conditions.append(f"type({text}) is {node.kind}")
            conditions.append(f"len({text}) == {_literal(len(node.children), 'a length')}")
            items = [f"{text}[{index}]" for index in range(len(node.children))]
        else:
            return False
        return all(walk(child, item) for child, item in zip(node.children, items))

    if treedef.kind != "tuple" or len(treedef.children) != 2:
        return None
    args, kwargs = treedef.children
    if args.kind != "tuple" or kwargs.kind != "dict":
        return None
    if not kwargs.keys:  # (a call's args and kwargs are a tuple and a dict)
        conditions.append("not kwargs")
    else:
        conditions.append(f"tuple(kwargs) == {source.constant(tuple(kwargs.keys), 'K')}")
    conditions.append(f"len(args) == {_literal(len(args.children), 'a length')}")
    found = all(walk(child, f"args[{index}]") for index, child in enumerate(args.children))
    found = found and all(walk(child, f"kwargs[{source.constant(key, 'K')}]")
                          for key, child in zip(kwargs.keys, kwargs.children))
    return (conditions, texts) if found else None


def _reader(source, path):
    """Text reading ``path`` (a ``tracer.implicit.Path``) from the call's leaves: one
    attribute or item access per step, as ``path.resolve(leaves)`` reads it."""
    return path.expression(lambda value: source.constant(value, "P"))


def _draw_statements(program, source, bound, values, draws):
    """The host draws (``tracer.random_draws``), after every check: a call the entry
    refuses draws nothing. Their sizes read the symbols the checks bound."""
    names = [f"draw{number}" for number in range(program.outputs)]
    for number, name in enumerate(names):
        values[("draw", number)] = name
    if not draws:
        for name in names:
            source.add(f"{name} = None")
        return
    symbols = ", ".join(f"{_identifier(name, bound, 'a drawn size')!r}: {name}"
                        for name in program.symbols)
    source.add(f"drawn = {source.constant(program, 'DRAWS')}.run(leaves, {{{symbols}}})")
    source.add(f"if drawn is None: return {source.miss}")
    if names:
        source.add(f"{', '.join(names)}, = drawn")


def _leaf_checks(source, spec, bound, native=False):
    """The checks of every argument leaf; ``native``: arrays that are ndarrays are checked
    by the native array guard already (``_native_arrays``). Whether it added any."""
    start = len(source.lines)
    for position, leaf in enumerate(spec.leaves):
        variable = f"leaf{position}"
        if leaf.kind == "array":
            _array_checks(source, variable, leaf, bound, spec.symbols,
                          native=native and leaf.type_name != "Tensor")
        elif leaf.kind == "scalar":
            scalar = argument_scalar_type(leaf.type_name)
            kind = source.constant(scalar, "T")
            source.add(f"if type({variable}) is not {kind}: return {source.miss}")
            if scalar is int:  # an int past int64 (2**63): no run-time input holds it
                source.add(f"if not {INT64_LOW} <= {variable} <= {INT64_HIGH}: "
                           f"return {source.miss}")
        elif leaf.kind == "instance":  # an object: its class (object_arguments)
            source.add(f"if type({variable}) is not {source.constant(leaf.value, 'T')}: "
                       f"return {source.miss}")
        elif leaf.generator is not None:  # drawn from at its path: any of its kind
            kind, bits = (source.constant(value, "T") for value in leaf.generator)
            held = "bit_generator" if leaf.generator[0] is np.random.Generator else (
                "_bit_generator")
            source.add(f"if type({variable}) is not {kind} or type({variable}.{held}) is not "
                       f"{bits}: return {source.miss}")
        elif is_json_value(leaf.value) or isinstance(leaf.value, np.generic) or (
                compared_by_value(leaf.value) and (type(leaf.value) is not collections.deque
                                                   or is_json_value(list(leaf.value)))):
            kind = source.constant(type(leaf.value), "T")
            source.add(f"if type({variable}) is not {kind} or "
                       f"{_differs(source, variable, leaf.value)}: return {source.miss}")
        elif type(leaf.value) is collections.deque:  # of arrays: the same objects in it
            kind = source.constant(collections.deque, "T")
            items = source.constant(tuple(leaf.value), "V")
            source.add(f"if type({variable}) is not {kind} or len({variable}) != "
                       f"{len(leaf.value)} or any(a is not b for a, b in zip({variable}, "
                       f"{items})): return {source.miss}")
        else:
            value = source.constant(leaf.value, "V")
            source.add(f"if {variable} is not {value}: return {source.miss}")
    return len(source.lines) > start


def _held(trace):
    """The values the trace's result and its writes hold as they are (``return self``, a
    generator returned, ``self.rng = rng``): those give back the object the trace saw, so
    a variant is for that object alone."""
    return [*(value for index, value in trace.output_statics.items()
              if index not in trace.output_aliases),  # (``return self``: the call's own)
            *(write.value for write in trace.argument_writes if write.kind == "static")]


def _holds(trace, value):
    """Whether the trace's result or its writes hold ``value`` itself (``_held``)."""
    return any(item is value for item in _held(trace))


def _native_arrays(spec):
    """``(matches, table)`` checking the ndarray leaves of ``spec`` natively
    (``codegen/array_guard.py``), or None: no such leaf, or no native guard here."""
    arrays = [(position, leaf.dtype, tuple(ANY_DIM if isinstance(dim, str) else dim
                                           for dim in leaf.shape))
              for position, leaf in enumerate(spec.leaves)
              if leaf.kind == "array" and leaf.type_name != "Tensor"]
    matches = array_guard.matcher() if arrays else None
    return None if matches is None else (matches, array_guard.make_table(arrays))


def _differs(source, variable, value):
    """The condition (text) that ``variable`` is not the specialized ``value``, of the same
    type: a float is the same when NumPy computes the same with it, so NaN is NaN and -0.0
    is not 0.0 (x / -0.0 is -inf)."""
    expected = source.constant(value, "V")
    if not isinstance(value, (float, np.floating)):
        return f"{variable} != {expected}"
    if value != value:
        return f"{variable} == {variable}"
    if value == 0.0:
        copysign = source.constant(math.copysign, "F")
        return (f"({variable} != 0.0 or {copysign}(1.0, {variable}) != "
                f"{math.copysign(1.0, value)!r})")
    return f"{variable} != {expected}"


def _reused_output(line, wrapper_names, source):
    """``line`` of an inlined wrapper as the statements that hand out a small output again
    once nobody holds it (``codegen/output_reuse.py``), when it allocates one of a static
    shape (``out0 = _empty((16,), _dtype_float32)``); else None."""
    if line[:1].isspace() or "_empty(" not in line:
        return None
    try:
        (statement,) = ast.parse(line).body
    except (SyntaxError, ValueError):
        return None
    value = statement.value if type(statement) is ast.Assign else None
    if (value is None or len(statement.targets) != 1 or type(statement.targets[0]) is not ast.Name
            or type(value) is not ast.Call or type(value.func) is not ast.Name
            or value.func.id != "_empty" or value.keywords or len(value.args) != 2):
        return None
    shape, dtype = value.args
    if (type(shape) is not ast.Tuple or type(dtype) is not ast.Name
            or not all(type(dim) is ast.Constant and type(dim.value) is int and dim.value >= 0
                       for dim in shape.elts)
            or not isinstance(wrapper_names.get(dtype.id), np.dtype)):
        return None
    return output_reuse.reuse_statements(
        statement.targets[0].id, tuple(dim.value for dim in shape.elts),
        wrapper_names[dtype.id], ast.unparse(value), source.constant)


class _Miss:
    def __repr__(self):
        return "MISS"


MISS = _Miss()  # what an entry returns when its guard fails (any other value is the result)


def compile_entry(spec, program, variant, result):
    """The hit path of a variant as one function ``enter(jit, args, kwargs) -> result |
    MISS``: the entry guard of ``spec``, then the root ``program`` (its wrapper's
    statements inlined: ``codegen.program.inline_body``; else a call of the wrapper), then
    the result: ``result`` is the index of the one array output returned as it is, or a
    function ``result(outputs, argument_leaves, wrap, arguments)`` (``variants.Path.result``;
    ``wrap``: ``variant.wrap``). A side exit goes on in
    ``jit._exited``, an error in the wrapper or native code to ``jit._internal_error``; the
    root path's call is counted. For a root path that only computes its outputs."""
    source = _Source(miss="_MISS")
    source.add("def enter(jit, args, kwargs):", depth=0)
    inputs = _guard_statements(spec, source)
    checked = {position for position, (kind, number, *_) in enumerate(map(tuple, spec.inputs))
               if (spec.leaves[number].kind == "array" if kind == "leaf"
                   else kind == "implicit" and number_type(spec.implicit[number]) is None)}
    inlined = inline_body(program, checked, inputs.split(", ") if spec.inputs else [])
    # the inputs as a tuple expression: "()" for a call that passes none (f() on defaults)
    as_tuple = f"({inputs},)" if spec.inputs else "()"
    names = {"_MISS": MISS, "_run": program._run, "_variant": variant, "_root": variant.root,
             "_SideExit": SideExit}
    if inlined is not None:
        statements, outputs, wrapper_names = inlined
        names.update(wrapper_names)
        source.add("try:")
        for line in statements:
            for kept in _reused_output(line, wrapper_names, source) or [line]:
                source.add(kept, depth=2)
        source.add("except Exception as error:  # the wrapper or native code: never the user's")
        source.add("    return jit._internal_error(error, args, kwargs, _variant)")
        source.add("if status:  # a side exit, or an input to lay out: the general path")
        source.add(f"    return jit._exited(_variant, status, {as_tuple}, args, kwargs)")
    else:
        outputs = [f"outputs[{index}]" for index in range(len(program.graph.outputs))]
        source.add("try:")
        source.add(f"    outputs = _run({inputs})")
        source.add("except _SideExit as exit:")
        source.add(f"    return jit._exited(_variant, exit.code, {as_tuple}, args, kwargs)")
        source.add("except Exception as error:  # the wrapper or native code: never the user's")
        source.add("    return jit._internal_error(error, args, kwargs, _variant)")
    source.bind(names)  # (a name both the guard and the wrapper bind is an error)
    source.add("_root.calls += 1")
    if isinstance(result, int):
        source.add(f"return {outputs[result]}")
    else:
        listed = ", ".join(outputs) + ("," if len(outputs) == 1 else "")
        source.add(f"return {source.constant(result, 'R')}(({listed}), args, "
                   f"{source.constant(variant.wrap, 'W')}, (args, kwargs))")
    return source.define("enter", "entry enter")
