"""Variants as JSON and bytes, for the disk cache (no pickle).

Everything a variant needs at a warm start is data: the entry spec, and per path the IR
text (``tracer.ir`` parses it back), constants (raw bytes with dtype and shape), object
code, the wrapper source, and how outputs are rebuilt. Implicit inputs are stored as a
root that can be found again in a new process (a module global, a function's closure
cell or default, an argument leaf) plus attribute/item steps.
"""

from __future__ import annotations

import sys

import numpy as np

from codegen.program import KernelInfo, Program
from tracer import pytree
from tracer.dims import parse_dim
from tracer.implicit import Path as ImplicitPath
from tracer.ir import ShapeGuard, parse_graph, parse_location

from .guards import EntrySpec, ImplicitSpec, LeafSpec, is_json_value
from .variants import OutputPlan, Path, Variant


class NotSerializable(Exception):
    """The variant holds something a new process could not rebuild (an object argument,
    a namedtuple output, an implicit input with no findable root)."""


# --- trees -------------------------------------------------------------------------------
def tree_to_json(tree):
    if tree.kind == "leaf":
        return "*"
    if tree.kind == "dict":
        if not all(isinstance(key, (str, int)) for key in tree.keys):
            raise NotSerializable("a dict with keys other than str/int")
        return {"dict": [[key, tree_to_json(child)] for key, child in zip(tree.keys,
                                                                          tree.children)]}
    if tree.keys is not None:
        raise NotSerializable("a namedtuple in the arguments or results")
    return {tree.kind: [tree_to_json(child) for child in tree.children]}


def tree_from_json(data):
    if data == "*":
        return pytree.LEAF
    (kind, children), = data.items()
    if kind == "dict":
        return pytree.TreeDef("dict", tuple(key for key, _ in children),
                              tuple(tree_from_json(child) for _, child in children))
    return pytree.TreeDef(kind, None, tuple(tree_from_json(child) for child in children))


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


def _resolve_function(address):
    """The function at ``module.qualname`` now (a jit function's wrapped function)."""
    value = sys.modules.get(address["module"])
    for part in address["qualname"].split("."):
        if value is None or part == "<locals>":
            return None
        value = getattr(value, part, None)
    return getattr(value, "fn", value)


def path_from_json(data, fn):
    kind = data["kind"]
    if kind == "global":
        module = sys.modules.get(data["module"])
        if module is None:
            raise NotSerializable(f"module {data['module']} is not imported")
        root = ("global", module.__dict__, data["name"])
    elif kind == "closure":
        function = _resolve_function(data["function"])
        if function is None and data["function"]["qualname"] == getattr(fn, "__qualname__", ""):
            function = fn
        names = getattr(getattr(function, "__code__", None), "co_freevars", ())
        if data["name"] not in names:
            raise NotSerializable(f"closure variable {data['name']} not found")
        root = ("closure", function.__closure__[names.index(data["name"])], data["name"])
    elif kind in ("default", "kwdefault"):
        function = _resolve_function(data["function"]) or fn
        root = (kind, function, data["index"])
    else:
        root = ("arg", data["leaf"])
    return ImplicitPath(root, tuple((step, key) for step, key in data["steps"]))


# --- the entry spec -------------------------------------------------------------------------
def spec_to_json(spec, fn):
    leaves = []
    for leaf in spec.leaves:
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
    }


def _outside_to_json(path, kind, value, fn):
    if kind == "is":
        address = import_address(value)
        if address is None:
            raise NotSerializable(f"{path} holds {value!r}, which no import path finds")
        return {"path": path_to_json(path, fn), "kind": kind, "value": address}
    if kind == "value":
        if isinstance(value, np.generic):
            raise NotSerializable(f"{path} is a NumPy scalar")
        if not is_json_value(value):
            raise NotSerializable(f"{path} holds {type(value).__name__}")
        return {"path": path_to_json(path, fn), "kind": kind, "value": value,
                "type": type(value).__name__}
    return {"path": path_to_json(path, fn), "kind": kind, "value": list(value)}


def _outside_from_json(data, fn):
    value = data["value"]
    if data["kind"] == "is":
        value = _resolve_function(value)
        if value is None:
            raise NotSerializable(f"{data['value']['module']}.{data['value']['qualname']} "
                                  "is not there any more")
    elif data["kind"] == "len":
        value = tuple(value)
    elif data.get("type") == "float":
        value = float(value)
    return path_from_json(data["path"], fn), data["kind"], value


def spec_from_json(data, fn):
    leaves = [LeafSpec(leaf["kind"], leaf["type"], leaf["dtype"], tuple(leaf["shape"]),
                       _tuples(leaf["value"]), leaf.get("requires_grad", False))
              for leaf in data["leaves"]]
    guards = [ShapeGuard(parse_dim(g["lhs"]), g["op"], parse_dim(g["rhs"]), g["expected"],
                         parse_location(g["location"]), g["reason"])
              for g in data["shape_guards"]]
    implicit = [ImplicitSpec(path_from_json(i["path"], fn), i["dtype"], tuple(i["shape"]),
                             i["type"], i.get("requires_grad", False))
                for i in data["implicit"]]
    return EntrySpec(tree_from_json(data["tree"]), leaves,
                     {name: tuple(bounds) for name, bounds in data["symbols"].items()},
                     guards, implicit, [tuple(source) for source in data["inputs"]],
                     list(data["shape_guard_text"]),
                     [_outside_from_json(item, fn) for item in data.get("outside", [])])


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
        "llvm_ir": program.llvm_ir,
        "optimized_ir": program.optimized_ir,
        "profiled": program.profiled,
        "wrapper": program.wrapper_source,
        "compile_seconds": program.compile_seconds,
        "object": blobs.add(program.object_code),
    }


def program_from_json(data, blobs):
    from codegen.program import link

    table = {
        constant["digest"]: np.frombuffer(blobs.parts[constant["blob"]],
                                          dtype=np.dtype(constant["dtype"])).reshape(
            constant["shape"]).copy()
        for constant in data["constants"]
    }
    program = Program(
        name=data["name"],
        graph=parse_graph(data["graph"], table),
        kernels=[KernelInfo(k["name"], k["kind"], k["root"], k["stages"]) for k in data["kernels"]],
        llvm_ir=data["llvm_ir"],
        optimized_ir=data["optimized_ir"],
        object_code=blobs.parts[data["object"]],
        wrapper_source=data["wrapper"],
        compile_seconds=data["compile_seconds"],
        profiled=data.get("profiled", False),
    )
    return link(program)


def outputs_to_json(plan):
    leaves = []
    for kind, value in plan.leaves:
        if kind == "static" and not is_json_value(value):
            raise NotSerializable(f"a result of type {type(value).__name__}")
        leaves.append([kind, value])
    return {"tree": tree_to_json(plan.tree), "leaves": leaves,
            "mutated": [[position, index] for position, index in plan.mutated.items()]}


def outputs_from_json(data):
    return OutputPlan(tree_from_json(data["tree"]),
                      [(kind, _tuples(value)) for kind, value in data["leaves"]],
                      {position: index for position, index in data["mutated"]})


def variant_to_json(variant, fn, blobs):
    paths = []
    for prefix, path in variant.root.walk():
        entry = {
            "via": list(prefix),
            "program": program_to_json(path.program, blobs),
            "outputs": outputs_to_json(path.outputs),
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
    from .guards import compile_guard

    spec = spec_from_json(data["spec"], fn)
    root = None
    from tracer.tracing import GradientPlan

    for entry in data["paths"]:
        program = program_from_json(entry["program"], blobs)
        path = Path(program, outputs_from_json(entry["outputs"]), program.graph.guards,
                    [(name, file, None) for name, file in entry["functions"]])
        if "backward" in entry:
            plan = entry["gradients"]
            path.backward = program_from_json(entry["backward"], blobs)
            path.gradients = GradientPlan(plan["forward_outputs"], plan["differentiable"],
                                          plan["cotangent_inputs"],
                                          [tuple(item) for item in plan["wrt"]])
            path.residual_bytes = plan["residual_bytes"]
        if not entry["via"]:
            root = path
            continue
        parent = root
        for guard_index in entry["via"][:-1]:
            parent = parent.children[guard_index]
        parent.children[entry["via"][-1]] = path
    return Variant(spec, compile_guard(spec), root, from_disk=True)

