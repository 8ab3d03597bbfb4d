"""Variants as JSON and bytes, for the disk cache (no pickle).

Everything a variant needs at a warm start is data: the entry spec, and per path the IR
text (``tracejit.tracer.ir`` parses it back), constants (raw bytes with dtype and shape), object
code, and how outputs are rebuilt. Implicit inputs are
stored as a root that can be found again in a new process (a module global, a function's
closure cell or default, an argument leaf) plus attribute/item steps.

Loading trusts the entry's signature (``tracejit.runtime.cache_trust``) and still treats its
contents as data, never as code: every field is checked for its type (ints, bools, known
dtype strings, symbol names, known kinds and operators) before it is used, the IR is
parsed, the program's wrapper is generated here from the parsed graph (the stored
wrapper text must match it, or the entry was built by another scheduler and is
refused), and the entry guard is generated here from the checked spec. Anything else
raises ``InvalidEntry`` and the variant is compiled afresh.
"""

from __future__ import annotations

import functools
import re
import sys
import zlib

import numpy as np

from tracejit.codegen import native_loop
from tracejit.codegen.program import (
    KernelInfo,
    PlanError,
    Program,
    _symbol_safe,
    rebuild_wrapper,
)
from tracejit.tracer import pytree
from tracejit.tracer.abstract import NUMPY_SCALARS
from tracejit.tracer.argument_writes import ArgumentWrite, OutsideArrayWrite
from tracejit.tracer.attribute_writes import AttributeWrite
from tracejit.tracer.deferred_text import valid_pieces
from tracejit.tracer.dims import DimExpr, parse_dim
from tracejit.tracer.implicit import Path as ImplicitPath
from tracejit.tracer.ir import (
    CONVERSIONS,
    Effect,
    Guard,
    Literal,
    ShapeGuard,
    parse_graph,
    parse_location,
)
from tracejit.tracer.list_appends import METHODS, ListAppend
from tracejit.tracer.loop_rows import KINDS, RowsLayout
from tracejit.tracer.random_draws import ArgumentNumber
from tracejit.tracer.result_identity import NUMPY_RESULTS
from tracejit.tracer.shared_objects import SharedObjects

from .cache_trust import MAX_FILE_BYTES
from .guards import EntrySpec, ImplicitSpec, LeafSpec, is_json_value
from .serialize_draws import draws_from_json, draws_to_json
from .variants import OutputPlan, Path, Variant


class NotSerializable(Exception):
    """The variant holds something a new process could not rebuild (an object argument,
    a namedtuple output, an implicit input with no findable root)."""


class InvalidEntry(NotSerializable):
    """A field of a stored variant is not what tracejit writes there (wrong type, unknown
    kind, a dtype or name it never uses): the entry is not used."""


# --- checking what was read ---------------------------------------------------------------
_DTYPE_TEXT = re.compile(r"[<>|=][biuf][1248]\Z")  # plain numbers only: no objects, records
_SYMBOL = re.compile(r"[si][0-9]{1,6}\Z")  # tracing's s0, s1, ...; loop indices i0, i1, ...
SHAPE_GUARD_OPS = ("==", "!=", "<", "<=", ">", ">=")


def _check(condition, what):
    if not condition:
        raise InvalidEntry(what)


def _integer(value, what, low=0):
    _check(type(value) is int and value >= low, f"{what} is not an integer >= {low}")
    return value


def _text(value, what):
    _check(isinstance(value, str), f"{what} is not text")
    return value


def _integers(values, what, low=0):
    _check(isinstance(values, list), f"{what} is not a list")
    return [_integer(value, what, low) for value in values]


def dtype_of(text):
    """A NumPy dtype from its ``str`` (``"<f4"``): numbers only."""
    _check(isinstance(text, str) and _DTYPE_TEXT.match(text), f"dtype {text!r} is not one "
           "tracejit compiles")
    return np.dtype(text)


def symbol_name(value):
    _check(isinstance(value, str) and _SYMBOL.match(value), f"{value!r} is not a symbol")
    return value


# --- trees -------------------------------------------------------------------------------
def tree_to_json(tree):
    if tree.kind == "leaf":
        return "*"
    if tree.kind == "dict":
        if tree.mapping is not None:
            raise NotSerializable(f"a {tree.mapping.__name__} in the arguments or results")
        if not all(isinstance(key, (str, int)) for key in tree.keys):
            raise NotSerializable("a dict with keys other than str/int")
        return {"dict": [[key, tree_to_json(child)] for key, child in zip(tree.keys,
                                                                          tree.children)]}
    if tree.kind == "rows":  # a list or dict a captured loop filled (tracer.loop_rows)
        layout = tree.keys
        data = {"prefix": layout.prefix, "entry": _entry_to_json(layout.entry),
                "parts": [tree_to_json(child) for child in tree.children]}
        if layout.keys is not None:
            data.update(keys=list(layout.keys), descending=layout.descending)
        return {"rows": data}
    if tree.kind == "object":
        raise NotSerializable(f"a {tree.keys[0].__name__} made in the call")
    if tree.keys is not None:
        raise NotSerializable("a namedtuple in the arguments or results")
    return {tree.kind: [tree_to_json(child) for child in tree.children]}


def _entry_to_json(entry):
    """A ``RowsLayout`` entry: its kinds and kept numbers as they are, tuples as lists."""
    return [_entry_to_json(part) for part in entry] if isinstance(entry, tuple) else entry


def _entry_from_json(data, depth):
    _check(depth < 64, "a malformed rows entry")
    if isinstance(data, list):
        return tuple(_entry_from_json(part, depth + 1) for part in data)
    _check(data in KINDS or (type(data) is int and 0 <= data < 4096),
           "a malformed rows entry")
    return data


def _rows_from_json(data, depth):
    _check(isinstance(data, dict) and set(data) in ({"prefix", "entry", "parts"}, {
        "prefix", "entry", "parts", "keys", "descending"}) and isinstance(data["parts"], list),
        "a malformed rows node")
    keys = data.get("keys")
    if keys is not None:
        _check(isinstance(keys, list) and len(keys) == data["prefix"] and all(
            type(key) in (int, str) for key in keys) and type(data["descending"]) is bool,
            "a malformed rows node's keys")
        keys = tuple(keys)
    layout = RowsLayout(_integer(data["prefix"], "a rows prefix"),
                        _entry_from_json(data["entry"], depth), keys,
                        data.get("descending", False))
    _check(len(layout.buffers) >= 1 and len(data["parts"]) == layout.part_count,
           "a rows node whose parts do not fit its layout")
    # the buffers are program outputs, never containers
    parts = [tree_from_json(child, depth + 1) for child in data["parts"]]
    _check(all(part == pytree.LEAF for part in parts[layout.prefix:][:len(layout.buffers)]),
           "a rows node whose buffers are not leaves")
    return pytree.TreeDef("rows", layout, tuple(parts))


def tree_from_json(data, depth=0):
    if data == "*":
        return pytree.LEAF
    _check(isinstance(data, dict) and len(data) == 1 and depth < 64, "a malformed tree")
    (kind, children), = data.items()
    if kind == "rows":
        return _rows_from_json(children, depth)
    _check(kind in ("tuple", "list", "dict") and isinstance(children, list),
           f"a tree of kind {kind!r}")
    if kind == "dict":
        _check(all(isinstance(item, list) and len(item) == 2 and isinstance(item[0], (
            str, int)) for item in children), "a malformed dict in a tree")
        return pytree.TreeDef("dict", tuple(key for key, _ in children),
                              tuple(tree_from_json(child, depth + 1) for _, child in children))
    return pytree.TreeDef(kind, None, tuple(tree_from_json(child, depth + 1)
                                            for child in children))


# --- implicit input paths ----------------------------------------------------------------
def _function_address(function):
    return {"module": function.__module__, "qualname": function.__qualname__}


def path_to_json(path, fn):
    root = path.root
    kind = root[0]
    if kind == "global":
        module = _module_of_globals(root[1])
        if module is None:
            raise NotSerializable(f"implicit input {path}: its module is not importable")
        data = {"kind": "global", "module": module, "name": root[2]}
    elif kind == "closure":
        owner = _closure_owner(fn, root[1])
        if owner is None:
            raise NotSerializable(f"implicit input {path}: its closure is not findable")
        data = {"kind": "closure", "function": owner, "name": root[2]}
    elif kind in ("default", "kwdefault"):
        data = {"kind": kind, "function": _function_address(root[1]), "index": root[2]}
    elif kind == "arg":
        data = {"kind": "arg", "leaf": root[1]}
    else:
        raise NotSerializable(f"implicit input {path}: reached through a bound method")
    for _, key in path.steps:
        if not isinstance(key, (str, int)):
            raise NotSerializable(f"implicit input {path}: a step through {key!r}")
    data["steps"] = [list(step) for step in path.steps]
    return data


def _module_of_globals(namespace):
    name = namespace.get("__name__")
    module = sys.modules.get(name)
    return name if module is not None and module.__dict__ is namespace else None


def _closure_owner(fn, cell):
    """Which function (module + qualname) holds ``cell`` in its closure: ``fn`` or one it
    references."""
    candidates = [getattr(fn, "__func__", fn)]
    seen = set()
    while candidates:
        function = candidates.pop()
        if id(function) in seen or not hasattr(function, "__code__"):
            continue
        seen.add(id(function))
        for candidate in function.__closure__ or ():
            if candidate is cell:
                address = _function_address(function)
                if _resolve_function(address) is function:
                    return address
                return None
            try:
                value = candidate.cell_contents
            except ValueError:
                continue
            if callable(value):
                candidates.append(value)
    return None


def import_address(value):
    """``{"module", "qualname"}`` that imports ``value`` back, or None (a local function,
    a lambda). Ufuncs have no ``__module__``: NumPy's, or scipy.special's (erf)."""
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
    modules = ["numpy", "scipy.special"] if isinstance(value, np.ufunc) else [
        getattr(value, "__module__", None)]
    for module in modules:
        address = {"module": module, "qualname": name}
        if module is not None and _resolve_function(address) is value:
            return address
    return None


def _address(data):
    _check(isinstance(data, dict), "a malformed function address")
    return {"module": _text(data["module"], "a module name"),
            "qualname": _text(data["qualname"], "a function name")}


def _resolve_function(address):
    """The function at ``module.qualname`` now (a jit function's wrapped function)."""
    value = sys.modules.get(address["module"])
    for part in address["qualname"].split("."):
        if value is None or part == "<locals>":
            return None
        value = getattr(value, part, None)
    return getattr(value, "fn", value)


def path_from_json(data, fn):
    _check(isinstance(data, dict), "a malformed implicit input path")
    kind = data["kind"]
    _check(kind in ("global", "closure", "default", "kwdefault", "arg"),
           f"an implicit input rooted in {kind!r}")
    steps = data["steps"]
    _check(isinstance(steps, list) and all(
        isinstance(step, list) and len(step) == 2 and step[0] in ("attr", "item") and
        isinstance(step[1], (str, int)) and not isinstance(step[1], bool) for step in steps),
        "malformed steps of an implicit input path")
    if kind == "global":
        _text(data["module"], "a module name")
        _text(data["name"], "a global name")
        module = sys.modules.get(data["module"])
        if module is None:
            raise NotSerializable(f"module {data['module']} is not imported")
        root = ("global", module.__dict__, data["name"])
    elif kind == "closure":
        _text(data["name"], "a closure variable name")
        function = _resolve_function(_address(data["function"]))
        if function is None and data["function"]["qualname"] == getattr(fn, "__qualname__", ""):
            function = fn
        names = getattr(getattr(function, "__code__", None), "co_freevars", ())
        if data["name"] not in names:
            raise NotSerializable(f"closure variable {data['name']} not found")
        root = ("closure", function.__closure__[names.index(data["name"])], data["name"])
    elif kind in ("default", "kwdefault"):
        function = _resolve_function(_address(data["function"])) or fn
        index = data["index"]
        _check(type(index) is int if kind == "default" else isinstance(index, str),
               "a malformed default argument index")
        root = (kind, function, index)
    else:
        root = ("arg", _integer(data["leaf"], "an argument leaf"))
    return ImplicitPath(root, tuple((step, key) for step, key in data["steps"]))


# --- the entry spec -------------------------------------------------------------------------
def spec_to_json(spec, fn):
    leaves = []
    for leaf in spec.leaves:
        if leaf.kind == "instance":  # an object: its class, by where it is imported from
            address = import_address(leaf.value)
            if address is None:
                raise NotSerializable(f"an argument of class {leaf.type_name}, which no "
                                      "import path finds")
            leaves.append({"kind": "instance", "type": leaf.type_name, "value": address})
            continue
        if leaf.kind == "static" and not is_json_value(leaf.value):
            raise NotSerializable(f"an argument of type {type(leaf.value).__name__} (compiled "
                                  "for that object only)")
        leaves.append({"kind": leaf.kind, "type": leaf.type_name, "dtype": leaf.dtype,
                       "shape": list(leaf.shape), "value": leaf.value,
                       "requires_grad": leaf.requires_grad})
    return {
        "tree": tree_to_json(spec.treedef),
        "leaves": leaves,
        "symbols": {name: list(bounds) for name, bounds in spec.symbols.items()},
        "shape_guards": [
            {"lhs": str(g.lhs), "op": g.op, "rhs": str(g.rhs), "expected": g.expected,
             "reason": g.reason, "location": str(g.location) if g.location else None}
            for g in spec.shape_guards
        ],
        "shape_guard_text": spec.shape_guard_text,
        "implicit": [{"path": path_to_json(i.path, fn), "dtype": i.dtype,
                      "shape": list(i.shape), "type": i.type_name,
                      "requires_grad": i.requires_grad} for i in spec.implicit],
        "inputs": [list(source) for source in spec.inputs],
        "outside": [_outside_to_json(path, kind, value, fn) for path, kind, value in
                    spec.outside],
        "draws": draws_to_json(spec.draws, fn),
    }


def _outside_to_json(path, kind, value, fn):
    if kind == "is":
        address = import_address(value)
        if address is None:
            raise NotSerializable(f"{path} holds {value!r}, which no import path finds")
        return {"path": path_to_json(path, fn), "kind": kind, "value": address}
    if kind == "has":
        return {"path": path_to_json(path, fn), "kind": kind, "value": bool(value)}
    if kind == "keys":
        return {"path": path_to_json(path, fn), "kind": kind, "value": list(value)}
    if kind == "shared":
        return {"path": path_to_json(path, fn), "kind": kind, "value": {
            "paths": [path_to_json(item, fn) for item in value.paths],
            "labels": list(value.labels), "containers": [_where_to_json(where, path)
                                                         for where in value.containers]}}
    if kind == "len" and value[0] not in ("list", "tuple", "deque"):
        raise NotSerializable(f"{path} is a {value[0]}")
    if kind == "value":
        if isinstance(value, (list, tuple)):
            raise NotSerializable(f"{path} is guarded by its whole contents")
        if isinstance(value, np.generic):
            raise NotSerializable(f"{path} is a NumPy scalar")
        if not is_json_value(value):
            raise NotSerializable(f"{path} holds {type(value).__name__}")
        return {"path": path_to_json(path, fn), "kind": kind, "value": value,
                "type": type(value).__name__}
    return {"path": path_to_json(path, fn), "kind": kind, "value": list(value)}


def _outside_from_json(data, fn):
    value, kind = data["value"], data["kind"]
    _check(kind in ("is", "len", "value", "has", "keys", "shared"),
           f"an outside value of kind {kind!r}")
    if kind == "is":
        address = _address(value)
        value = _resolve_function(address)
        if value is None:
            raise NotSerializable(f"{address['module']}.{address['qualname']} is not there "
                                  "any more")
    elif kind == "len":
        _check(isinstance(value, list) and len(value) == 2 and value[0] in (
            "list", "tuple", "deque"),
               "a malformed length guard")
        value = (value[0], _integer(value[1], "a guarded length"))
    elif kind == "has":
        _check(isinstance(value, bool), "a malformed hasattr guard")
    elif kind == "keys":
        _check(isinstance(value, list) and all(type(key) in (str, int) for key in value),
               "a malformed dict keys guard")
        value = tuple(value)
    elif kind == "shared":
        value = _shared_from_json(value, fn)
    else:
        _check(is_json_value(value) and not isinstance(value, list), "a malformed outside "
               "value")
        if data.get("type") == "float":
            _check(isinstance(value, (int, float)) and not isinstance(value, bool),
                   "a float outside value that is not a number")
            value = float(value)
    return path_from_json(data["path"], fn), kind, value


def _where_to_json(where, path):
    if not all(type(key) in (str, int) for key in where):
        raise NotSerializable(f"{path}: an argument dict with a key that is not text or int")
    return list(where)


def _shared_from_json(data, fn):
    """A ``SharedObjects`` guard; its labels must be a partition's (each the position of
    the first equal one), or it could never hold."""
    _check(isinstance(data, dict) and isinstance(data.get("paths"), list)
           and data["paths"], "a malformed shared-objects guard")
    paths = tuple(path_from_json(item, fn) for item in data["paths"])
    _check(isinstance(data.get("containers"), list), "a shared-objects guard's containers")
    containers = []
    for where in data["containers"]:
        _check(isinstance(where, list) and where and where[0] in (0, 1) and all(
            type(key) in (str, int) for key in where), "a malformed argument container")
        containers.append(tuple(where))
    labels = tuple(_integers(data.get("labels"), "a shared-objects guard's label"))
    _check(len(labels) == len(containers) + len(paths) and all(
        label <= position and labels[label] == label for position, label in enumerate(labels)),
        "a shared-objects guard's labels are no partition")
    return SharedObjects(paths, labels, tuple(containers))


def _array_fields(data, symbols, what):
    """dtype, shape (ints and known symbols) and requires_grad of an array leaf."""
    dtype_of(data["dtype"])
    _check(isinstance(data["shape"], list), f"the shape of {what}")
    for dim in data["shape"]:
        _check((type(dim) is int and dim >= 0) or dim in symbols, f"a dim {dim!r} of {what}")
    _check(isinstance(data.get("requires_grad", False), bool), f"requires_grad of {what}")
    return data["dtype"], tuple(data["shape"]), data.get("requires_grad", False)


def _leaf_from_json(leaf, symbols, number):
    kind, type_name = leaf["kind"], leaf["type"]
    what = f"argument leaf {number}"
    if kind == "array":
        _check(type_name in ("ndarray", "Tensor"), f"{what} of type {type_name!r}")
        dtype, shape, grad = _array_fields(leaf, symbols, what)
        return LeafSpec("array", type_name, dtype, shape, None, grad)
    if kind == "scalar":
        _check(type_name in ("int", "float") or type_name in NUMPY_SCALARS,
               f"{what}: a scalar of type {type_name!r}")
        return LeafSpec("scalar", type_name)
    if kind == "instance":
        address = _address(leaf["value"])
        value = _resolve_function(address)
        _check(isinstance(value, type) and value.__name__ == type_name,
               f"{what}: {address['module']}.{address['qualname']} is no class {type_name}")
        return LeafSpec("instance", type_name, value=value)
    _check(kind == "static" and is_json_value(leaf["value"]), f"{what} of kind {kind!r}")
    value = _tuples(leaf["value"])
    _check(type(value).__name__ == type_name, f"{what}: a {type_name} holding "
           f"{type(value).__name__}")
    return LeafSpec("static", type_name, value=value)


def _shape_guard_from_json(data, symbols):
    _check(data["op"] in SHAPE_GUARD_OPS, f"a shape guard with operator {data['op']!r}")
    _check(isinstance(data["expected"], bool), "a shape guard expecting a non-bool")
    sides = [parse_dim(_text(data[side], "a shape guard side")) for side in ("lhs", "rhs")]
    for side in sides:
        _check(isinstance(side, int) or side.symbols() <= set(symbols),
               "a shape guard over unknown symbols")
    location = data["location"]
    return ShapeGuard(sides[0], data["op"], sides[1], data["expected"],
                      parse_location(_text(location, "a location")) if location else None,
                      _text(data["reason"], "a shape guard's reason"))


def _count_input(source, leaves, symbols):
    """Whether ``source`` is ``["count", leaf, symbol]``: a loop's trip count read from a
    number argument into a declared symbol (``tracer.loop_trip_counts``)."""
    return len(source) == 3 and source[0] == "count" and _integer(
        source[1], "an input") < len(leaves) and leaves[source[1]].kind == "scalar" and (
        symbol_name(source[2]) in symbols)


def spec_from_json(data, fn):
    symbols = {}
    for name, bounds in data["symbols"].items():
        low, high = _integers(bounds, f"the bucket of {name}")
        symbols[symbol_name(name)] = (low, high)
    leaves = [_leaf_from_json(leaf, symbols, number)
              for number, leaf in enumerate(data["leaves"])]
    guards = [_shape_guard_from_json(g, symbols) for g in data["shape_guards"]]
    implicit = []
    for number, item in enumerate(data["implicit"]):
        _check(item["type"] in ("ndarray", "Tensor"), f"implicit input {number}'s type")
        dtype, shape, grad = _array_fields(item, symbols, f"implicit input {number}")
        implicit.append(ImplicitSpec(path_from_json(item["path"], fn), dtype, shape,
                                     item["type"], grad))
    draws = draws_from_json(data.get("draws"), fn)
    for op in draws.ops if draws is not None else ():
        for arg in op.args:  # a seed argument: a number leaf of this call
            _check(not isinstance(arg, ArgumentNumber) or (
                arg.leaf < len(leaves) and leaves[arg.leaf].kind != "array"),
                f"a seed read from argument leaf {getattr(arg, 'leaf', None)!r}")
    inputs = []
    for source in data["inputs"]:
        _check(isinstance(source, list) and (_count_input(source, leaves, symbols) or len(
            source) == 2 and (
            (source[0] == "leaf" and _integer(source[1], "an input") < len(leaves)) or
            (source[0] == "implicit" and _integer(source[1], "an input") < len(implicit)) or
            (source[0] == "draw" and draws is not None and _integer(
                source[1], "an input") < draws.outputs))),
            f"a program input from {source!r}")
        inputs.append(tuple(source))
    texts = [_text(text, "a shape guard's text") for text in data["shape_guard_text"]]
    return EntrySpec(tree_from_json(data["tree"]), leaves, symbols, guards, implicit, inputs,
                     texts, [_outside_from_json(item, fn) for item in data.get("outside", [])],
                     draws)


def _tuples(value):
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


# --- paths and programs -------------------------------------------------------------------
class Blobs:
    """Binary parts of an entry, referenced from JSON by index."""

    def __init__(self, parts=None):
        self.parts = list(parts or [])

    def add(self, data):
        self.parts.append(bytes(data))
        return len(self.parts) - 1


def program_to_json(program, blobs):
    from tracejit.codegen.loops import LoopProgram, NativeLoopProgram

    if isinstance(program, NativeLoopProgram):
        return _loop_program_to_json(program, blobs)
    if isinstance(program, LoopProgram):
        raise NotSerializable("a loop program that runs interpreted (codegen could not "
                              "build it natively)")
    return {
        "name": program.name,
        "graph": str(program.graph),
        "constants": [
            {"digest": constant.digest, "dtype": constant.data.dtype.str,
             "shape": list(constant.data.shape), "blob": blobs.add(constant.data.tobytes())}
            for _, constant in program.graph.constants
        ],
        "kernels": [{"name": k.name, "kind": k.kind, "root": k.root, "stages": k.stages}
                    for k in program.kernels],
        "llvm_ir": _deflated(program.llvm_ir, blobs),
        "optimized_ir": _deflated(program.optimized_ir, blobs),
        "profiled": program.profiled,
        "trusted": program.trusted,
        "exports": list(program.exports),
        "driver": program.driver,
        "wrapper": program.wrapper_source,  # shown by `cache show --source`, never run
        # what the wrapper read of the schedule: a load need not schedule the graph again
        "wrapper_plan": program.wrapper_plan,
        "compile_seconds": program.compile_seconds,
        "object": blobs.add(program.object_code),
    }


def _constants_to_json(graph, blobs):
    """The constants of ``graph`` and of the loop bodies inside it, once each."""
    found = {}
    for _, constant in _all_constants(graph):
        found.setdefault(constant.digest, constant)
    return [{"digest": constant.digest, "dtype": constant.data.dtype.str,
             "shape": list(constant.data.shape), "blob": blobs.add(constant.data.tobytes())}
            for constant in found.values()]


def _all_constants(graph):
    yield from graph.constants
    for eqn in graph.equations:
        for _, value in eqn.params:
            if hasattr(value, "constants") and hasattr(value, "equations"):
                yield from _all_constants(value)


def _loop_program_to_json(program, blobs):
    """A graph with loops: its IR (the driver is rebuilt from it at load) and the
    segments' and loop bodies' programs, each stored as any program is."""
    return {
        "kind": "loops",
        "name": program.name,
        "graph": str(program.graph),
        "constants": _constants_to_json(program.graph, blobs),
        "pieces": [program_to_json(piece, blobs) for piece in program.pieces],
        "compile_seconds": program.compile_seconds,
    }


def _loop_program_from_json(data, blobs):
    from tracejit.codegen.loops import NativeLoopProgram
    from tracejit.tracer.errors import UnsupportedError

    table = {_text(constant["digest"], "a constant's digest"):
             _constant_from_json(constant, blobs) for constant in data["constants"]}
    graph = check_graph(parse_graph(_text(data["graph"], "the IR"), table))
    _check(isinstance(data["pieces"], list) and data["pieces"], "a loop program's pieces")
    pieces = []
    for piece in data["pieces"]:
        # a piece is a Program, or a loop body holding loops: a loop program itself
        _check(isinstance(piece, dict) and piece.get("kind") in (None, "loops"),
               "a loop program's piece")
        pieces.append(program_from_json(piece, blobs))
    _check(isinstance(data["compile_seconds"], dict), "compile times")
    try:
        program = NativeLoopProgram.from_pieces(graph, _text(data["name"], "a program name"),
                                                pieces)
    except UnsupportedError as error:
        raise InvalidEntry(str(error)) from None
    program.compile_seconds = data["compile_seconds"]
    return program


def _deflated(text, blobs):
    """A long text (a program's LLVM IR: ~280 KB for an MLP step) as a zlib stream of its
    own in a blob, inflated only when read (``_inflater``), not with every load."""
    return {"deflated": blobs.add(zlib.compress(text.encode(), 3))}


def _inflater(data, blobs, what):
    """A function returning the text ``_deflated`` stored (``Program``'s fields take one)."""
    _check(isinstance(data, dict) and set(data) == {"deflated"}, f"{what} is not a text")
    return functools.partial(_inflate, _blob(blobs, data["deflated"], what))


def _inflate(compressed):
    # The entry's signature was checked when it was read: this is tracejit's own text.
    # Its size is bounded all the same.
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(compressed, MAX_FILE_BYTES)
    except zlib.error as error:
        raise InvalidEntry(f"a stored text that does not inflate: {error}") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise InvalidEntry("a stored text that does not inflate whole")
    return text.decode()


def stored_text(data, parts):
    """A program's ``llvm_ir`` or ``optimized_ir`` as an entry holds it (its body's field
    and blobs), for the command line."""
    return _inflater(data, Blobs(parts), "a text")()


def _blob(blobs, index, what):
    _check(type(index) is int and 0 <= index < len(blobs.parts), f"{what} is missing")
    return blobs.parts[index]


def _constant_from_json(constant, blobs):
    dtype = dtype_of(constant["dtype"])
    shape = _integers(constant["shape"], "a constant's shape")
    data = _blob(blobs, constant["blob"], "a constant's bytes")
    _check(int(np.prod(shape)) * dtype.itemsize == len(data), "a constant's size")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _check_dims(shape, declared, what):
    for dim in shape:
        _check(dim.symbols() <= declared if isinstance(dim, DimExpr) else type(dim) is int,
               f"a dim {dim} of {what} over undeclared symbols")


def check_graph(graph):
    """The parsed IR holds only what the wrapper generator may turn into Python text:
    symbol names as tracing makes them, dims over declared symbols, guards with known
    conversions, prints to stdout or stderr with text separators."""
    _check(isinstance(graph.name, str) and graph.name.isprintable(), "the graph's name")
    declared = set()
    for symbol in graph.symbols:
        declared.add(symbol_name(symbol.name))
        _integer(symbol.low, "a symbol's bucket")
        _integer(symbol.high, "a symbol's bucket")
    variables = [*graph.inputs, *(var for var, _ in graph.constants)]
    for item in graph.body:
        if isinstance(item, Guard):
            _check(item.convert in CONVERSIONS, f"a guard converting by {item.convert!r}")
        elif isinstance(item, Effect):
            params = dict(item.params)
            _check(item.kind == "print" and params.get("stream") in ("stdout", "stderr") and
                   isinstance(params.get("sep"), str) and isinstance(params.get("end"), str)
                   and params.get("rows", False) in (False, True) and (
                       not params.get("rows") or item.inputs),
                   "an effect other than a print to stdout or stderr")
            _check_segments(params["segments"], len(item.inputs))
            if "groups" in params:  # several prints' rows (tracer.loop_prints.merged_effect)
                _check_groups(params, len(item.inputs))
        else:
            variables.append(item.out)
    for var in variables:
        _check_dims(var.aval.shape, declared, var.name)
    for atom in graph.outputs:
        if isinstance(atom, Literal) and isinstance(atom.value, DimExpr):
            _check_dims((atom.value,), declared, "a result")
    return graph


def _check_segments(segments, width):
    """A print's segments: texts, atom positions and formatted pieces over ``width``
    atoms."""
    _check(isinstance(segments, tuple), "a print's segments")
    for segment in segments:
        _check(isinstance(segment, tuple) and len(segment) == 2, "a print's segments")
        kind, value = segment
        _check((kind == "text" and isinstance(value, str)) or (
            kind == "value" and type(value) is int and 0 <= value < width) or (
            kind == "formatted" and valid_pieces(value, width)), "a print's segments")


def _check_groups(params, width):
    """A merged rows print: ``order`` +-1, and groups of (segments, sep, end, width) whose
    widths (each at least the printed index) cover the effect's atoms."""
    groups = params["groups"]
    _check(params.get("rows") is True and params.get("order") in (1, -1) and isinstance(
        groups, tuple) and groups, "a merged print's groups")
    total = 0
    for group in groups:
        _check(isinstance(group, tuple) and len(group) == 4, "a merged print's groups")
        segments, sep, end, count = group
        _check(isinstance(sep, str) and isinstance(end, str) and type(count) is int
               and count >= 1, "a merged print's groups")
        _check_segments(segments, count)
        total += count
    _check(total == width, "a merged print's groups")


def program_from_json(data, blobs):
    from tracejit.codegen.program import link

    _check(isinstance(data, dict), "a malformed program")
    if data.get("kind") == "loops":
        return _loop_program_from_json(data, blobs)
    _check(data.get("kind") is None, f"a program of kind {data.get('kind')!r}")
    table = {_text(constant["digest"], "a constant's digest"):
             _constant_from_json(constant, blobs) for constant in data["constants"]}
    graph = check_graph(parse_graph(_text(data["graph"], "the IR"), table))
    trusted = data.get("trusted", False)
    _check(isinstance(trusted, bool), "the trusted-inputs flag")
    try:
        wrapper = rebuild_wrapper(graph, trusted, data.get("wrapper_plan"))
    except PlanError as error:
        raise InvalidEntry(str(error)) from None
    exports = data.get("exports", [])
    # The one extra function a program exports is its loop driver, named after the graph.
    _check(exports in ([], [native_loop.driver_name(_symbol_safe(graph.name))]),
           "exported functions")
    driver = _text(data.get("driver", ""), "the loop driver's layout")
    # The stored text is what the writer's schedule produced for this object code: a
    # different one here means other buffer slots, so the native code must not run.
    _check(wrapper == data["wrapper"], "its wrapper differs from the one this tracejit "
           "generates for its IR (built by another scheduler)")
    kernels = []
    for kernel in data["kernels"]:
        stages = kernel["stages"]
        _check(isinstance(stages, list) and all(isinstance(stage, str) for stage in stages),
               "a kernel's stages")
        kernels.append(KernelInfo(_text(kernel["name"], "a kernel name"),
                                  _text(kernel["kind"], "a kernel kind"),
                                  _text(kernel["root"], "a kernel root"), stages))
    _check(isinstance(data.get("profiled", False), bool), "the profiled flag")
    _check(isinstance(data["compile_seconds"], dict), "compile times")
    program = Program(
        name=_text(data["name"], "a program name"),
        graph=graph,
        kernels=kernels,
        llvm_ir=_inflater(data["llvm_ir"], blobs, "LLVM IR"),
        optimized_ir=_inflater(data["optimized_ir"], blobs, "optimized LLVM IR"),
        object_code=_blob(blobs, data["object"], "object code"),
        wrapper_source=wrapper,
        compile_seconds=data["compile_seconds"],
        profiled=data.get("profiled", False),
        trusted=trusted,
        exports=exports,
        driver=driver,
    )
    return link(program)


def outputs_to_json(plan, implicit_paths=(), fn=None):
    """``implicit_paths``: the variant's implicit inputs' paths (an outside array written
    in place is stored as the number of its implicit input, whose entry guard checks it)."""
    leaves = []
    for kind, value in plan.leaves:
        if kind == "static" and not is_json_value(value):
            raise NotSerializable(f"a result of type {type(value).__name__}")
        leaves.append([kind, value])
    return {"tree": tree_to_json(plan.tree), "leaves": leaves,
            "mutated": [[position, index] for position, index in plan.mutated.items()],
            "aliases": [[position, argument] for position, argument in plan.aliases.items()],
            "writes": [_write_to_json(write, [str(path) for path in implicit_paths], fn)
                       for write in plan.writes],
            "containers": [[list(place), list(where)] for place, where in plan.containers],
            "outside_aliases": [[position, write]
                                for position, write in plan.outside_aliases.items()],
            "refreshed": [[position, argument, index]
                          for position, (argument, index) in plan.refreshed.items()],
            "numpy_results": [[position, argument, kind, list(params)] for position, (
                argument, kind, params) in plan.numpy_results.items()],
            "tensors": None if plan.tensors is None else sorted(plan.tensors)}


def _write_to_json(write, implicit_paths, fn=None):
    if isinstance(write, ListAppend):  # LOSSES.append(loss): a disk hit appends too
        return _append_to_json(write, fn)
    if isinstance(write, AttributeWrite):  # its object is identity-guarded: not on disk
        raise NotSerializable(f"an attribute write ({write.path}.{write.name})")
    if isinstance(write, OutsideArrayWrite):
        if str(write.path) not in implicit_paths:
            raise NotSerializable(f"a write into {write.path}, which is no implicit input")
        return ["outside", implicit_paths.index(str(write.path)), write.value]
    if write.kind == "static" and not is_json_value(write.value):
        raise NotSerializable(f"a value of type {type(write.value).__name__} written into "
                              "an argument")
    if not is_json_value(write.key):
        raise NotSerializable(f"a key of type {type(write.key).__name__}")
    return [list(write.where), write.key, write.kind, write.value]


def _append_to_json(write, fn):
    leaves = []
    for kind, value in write.leaves:
        if kind == "static" and not (is_json_value(value) and not isinstance(value, (
                tuple, list))):
            raise NotSerializable(f"a {type(value).__name__} appended to {write.path}")
        leaves.append([kind, value])
    return {"append": path_to_json(write.path, fn), "method": write.method,
            "tree": tree_to_json(write.tree), "leaves": leaves}


def _append_from_json(data, fn):
    _check(data.get("method") in METHODS, "an append of an unknown method")
    leaves = []
    for item in data["leaves"]:
        _check(isinstance(item, list) and len(item) == 2, "a malformed appended value")
        kind, value = item
        _check(kind in ("array", "scalar", "value", "argument", "static"),
               f"an appended value of kind {kind!r}")
        if kind == "static":
            _check(is_json_value(value) and not isinstance(value, list),
                   "an appended value that is not a plain value")
        else:
            _integer(value, "an appended program output or argument")
        leaves.append((kind, value))
    return ListAppend(path_from_json(data["append"], fn), data["method"],
                      tree_from_json(data["tree"]), tuple(leaves))


def _write_from_json(data, implicit_paths, fn=None):
    if isinstance(data, dict) and "append" in data:
        return _append_from_json(data, fn)
    if isinstance(data, list) and len(data) == 3 and data[0] == "outside":
        number = _integer(data[1], "a written implicit input")
        _check(number < len(implicit_paths), "a write into a missing implicit input")
        return OutsideArrayWrite(implicit_paths[number], _integer(data[2], "a written output"))
    _check(isinstance(data, list) and len(data) == 4, "an argument write")
    where, key, kind, value = data
    _check(isinstance(where, list) and len(where) >= 2 and where[0] in ("args", "kwargs")
           and all(isinstance(part, (int, str, bool, type(None))) for part in where[1:]),
           "a written argument")
    _check(kind in ("array", "scalar", "value", "static"), f"a write of kind {kind!r}")
    _check(is_json_value(key) and isinstance(key, (str, int, bool, type(None))),
           "a written key")
    if kind == "static":
        _check(is_json_value(value), "a written value that is not a plain value")
    else:
        _integer(value, "a written program output")
    return ArgumentWrite(tuple(where), key, kind, value)


def outputs_from_json(data, implicit_paths=(), fn=None):
    leaves = []
    for kind, value in data["leaves"]:
        if kind == "static":
            _check(is_json_value(value), "a static result that is not a plain value")
        else:
            _check(kind in ("array", "scalar", "value"), f"a result of kind {kind!r}")
            _integer(value, "a result's program output")
        leaves.append((kind, _tuples(value)))
    mutated = {}
    for position, index in data["mutated"]:
        mutated[_integer(position, "a mutated argument")] = _integer(index, "an output")
    aliases = {}
    for position, argument in data.get("aliases", []):
        position = _integer(position, "an aliased result")
        _check(position < len(leaves), "an alias of no result")
        # an argument the program updates, or the object argument itself (``return self``,
        # whose leaf is an "instance": _check_returned_objects)
        _check(_integer(argument, "an aliased argument") in mutated or (
            leaves[position] == ("static", None)),
            "a result aliasing an argument the program does not update")
        aliases[position] = argument
    writes = [_write_from_json(write, implicit_paths, fn) for write in data.get("writes", [])]
    containers = []
    for place, where in data.get("containers", []):
        _check(isinstance(place, list) and isinstance(where, list) and len(where) >= 2
               and where[0] in ("args", "kwargs") and all(
                   isinstance(part, (int, str)) and not isinstance(part, bool)
                   for part in (*place, *where[1:])), "a returned argument container")
        containers.append((tuple(place), tuple(where)))
    outside_aliases = {}
    for position, write in data.get("outside_aliases", []):
        _check(_integer(write, "an aliased write") < len(writes)
               and isinstance(writes[write], OutsideArrayWrite),
               "a result aliasing no outside array the program updates")
        outside_aliases[_integer(position, "an aliased result")] = write
    _check(all(position < len(leaves) for position in outside_aliases), "an alias of no result")
    refreshed = {}
    for item in data.get("refreshed", []):
        _check(isinstance(item, list) and len(item) == 3, "a malformed refreshed view")
        position, argument, index = (_integer(value, "a refreshed view") for value in item)
        _check(position < len(leaves) and argument in mutated,
               "a refreshed view of no result or of an argument the program does not update")
        refreshed[position] = (argument, index)
    remade = {}
    for item in data.get("numpy_results", []):
        _check(isinstance(item, list) and len(item) == 4 and item[2] in NUMPY_RESULTS
               and isinstance(item[3], list), "a malformed result NumPy makes")
        position, argument, kind, params = item
        position = _integer(position, "a result NumPy makes")
        _check(position < len(leaves) and leaves[position][0] == "array",
               "a result NumPy makes that is no array result")
        argument = None if argument is None else _integer(argument, "an argument NumPy reads")
        remade[position] = (argument, kind, tuple(
            _integer(value, "a diagonal's parameter", low=-2 ** 62) for value in params))
    tensors = data.get("tensors")  # (the program outputs that are Tensors eagerly)
    _check(tensors is None or isinstance(tensors, list), "a malformed list of Tensor outputs")
    if tensors is not None:
        tensors = frozenset(_integer(index, "a Tensor output") for index in tensors)
    return OutputPlan(tree_from_json(data["tree"]), leaves, mutated, aliases, writes,
                      containers, outside_aliases, refreshed, remade, tensors=tensors)


def _check_outputs(plan, count, has_backward):
    """The result plan reads only outputs the program has, and (without a backward, whose
    residuals are extra outputs) every one of them: a plan that ignores the program's
    results would return made-up values."""
    used = {value for kind, value in plan.leaves if kind != "static"}
    used |= set(plan.mutated.values())
    used |= {index for _, index in plan.refreshed.values()}
    for write in plan.writes:
        used |= set(write.outputs) if write.kind == "tree" else (
            {write.value} if write.kind != "static" else set())
    _check(all(index < count for index in used), "a result read from a missing output")
    _check(all(index < count for index in plan.tensors or ()), "a Tensor of a missing output")
    _check(has_backward or used == set(range(count)), "results that ignore the program")


def _check_returned_objects(plan, spec):
    """A result that is an argument the program does not update (``return self``) is an
    object argument guarded by its class (``tracer.tracing.returned_objects``)."""
    for argument in plan.aliases.values():
        if argument not in plan.mutated:
            _check(argument < len(spec.leaves) and spec.leaves[argument].kind == "instance",
                   "a result aliasing an argument that is no object")


def variant_to_json(variant, fn, blobs):
    paths = []
    for prefix, path in variant.root.walk():
        entry = {
            "via": list(prefix),
            "program": program_to_json(path.program, blobs),
            "outputs": outputs_to_json(path.outputs,
                                       [spec.path for spec in variant.spec.implicit], fn),
            "functions": [[name, file] for name, file, _ in path.functions],
        }
        if path.backward is not None:
            plan = path.gradients
            entry["backward"] = program_to_json(path.backward, blobs)
            entry["gradients"] = {"forward_outputs": plan.forward_outputs,
                                  "differentiable": plan.differentiable,
                                  "cotangent_inputs": plan.cotangent_inputs,
                                  "wrt": [list(item) for item in plan.wrt],
                                  "residual_bytes": path.residual_bytes}
        paths.append(entry)
    return {"spec": spec_to_json(variant.spec, fn), "paths": paths}


def variant_from_json(data, fn, blobs):
    spec = spec_from_json(data["spec"], fn)
    root = None
    from tracejit.tracer.gradient_trace import GradientPlan

    for entry in data["paths"]:
        program = program_from_json(entry["program"], blobs)
        functions = [(_text(name, "a function name"), _text(file, "a file name"), None)
                     for name, file in entry["functions"]]
        outputs = outputs_from_json(entry["outputs"], [item.path for item in spec.implicit],
                                    fn)
        _check_outputs(outputs, len(program.graph.outputs), "backward" in entry)
        _check_returned_objects(outputs, spec)
        path = Path(program, outputs, program.graph.guards, functions)
        if "backward" in entry:
            plan = entry["gradients"]
            wrt = []
            for kind, position in plan["wrt"]:
                _check(kind in ("leaf", "implicit"), f"a gradient with respect to {kind!r}")
                wrt.append((kind, _integer(position, "a gradient's input")))
            path.backward = program_from_json(entry["backward"], blobs)
            path.gradients = GradientPlan(
                _integer(plan["forward_outputs"], "forward outputs"),
                _integers(plan["differentiable"], "differentiable outputs"),
                _integers(plan["cotangent_inputs"], "cotangent inputs"), wrt)
            path.residual_bytes = _integer(plan["residual_bytes"], "residual bytes")
        via = _integers(entry["via"], "a path's place in the tree")
        if not via:
            _check(root is None, "two root paths")
            root = path
            continue
        _check(root is not None, "a path before its root")
        parent = root
        for guard_index in via[:-1]:
            parent = parent.children[guard_index]
        parent.children[via[-1]] = path
    _check(root is not None, "no root path")
    return Variant(spec, None, root, from_disk=True)  # its guard: compiled when used

