"""``compile(graph) -> Program``: a graph for one shape bucket as callable native code.

A ``Program`` holds the object code of its kernels and a generated Python wrapper. The
wrapper (built as a Python AST, rendered by ``codegen/wrapper_text.py``: that text is
what ``tracejit cache show --source`` prints) binds the symbolic dims from the input
shapes, allocates outputs and one workspace for the temporaries, calls the native entry
once, and either returns the outputs or raises ``SideExit`` - a failed value guard or a
kernel error - before anything escapes. Sizes inside a bucket never recompile: dims are
arguments of the native code.

Inputs are passed as the caller's arrays; the native entry checks they are C-contiguous
(one flag test each). When one is not, nothing has run and the wrapper lays the inputs out:
a broadcast view (0 strides, ``np.broadcast_to``) of a megabyte or more goes to a program
compiled once for that broadcast pattern, which reads its compact base (the broadcast axes
of length 1) and broadcasts in the kernels, so the full extent is never copied; other
layouts are copied to C order. Outputs that are views of an input (slices, transposes,
reshapes, flips, broadcasts of it) are made by the wrapper with NumPy from the caller's
array, so they share its memory exactly as eager results do.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> t = trace(lambda x: np.tanh(x) * 2.0, np.ones(5, np.float32), dynamic=True)
>>> program = compile(t.graph)
>>> program(np.zeros(7, np.float32))
(array([0., 0., 0., 0., 0., 0., 0.], dtype=float32),)
"""

from __future__ import annotations

import ast
import ctypes
import logging
import sys
import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from tracejit.tracer.abstract import AbstractArray
from tracejit.tracer.deferred_text import render_pieces
from tracejit.tracer.dims import DimExpr
from tracejit.tracer.errors import UnsupportedError
from tracejit.tracer.generated_code import Source
from tracejit.tracer.ir import Effect, Eqn, Literal, Var, verify
from tracejit.tracer.ops import broadcast_to_p
from tracejit.tracer.ops.control import emit, print_text
from tracejit.tracer.passes import optimize

from . import gc_pause, llvm, loops, python_entry, recycled_outputs, wrapper_text
from .compile_estimate import estimate_compile
from .lowering import (
    ARRAY_FLAGS_OFFSET,
    LAYOUT_EXIT,
    TUPLE_ITEMS_OFFSET,
    ProgramLowering,
    profile_symbol,
    program_slots,
)
from .relu_masks import read_relu_outputs
from .schedule import input_view, result_views
from .schedule import schedule as make_schedule
from .unit_broadcasts import unit_broadcasts

log = logging.getLogger("tracejit.kernels")


class SideExit(Exception):
    """The compiled run stopped: guard ``guard_index`` failed (``code > 0``), a kernel
    reported an error (``KERNEL_ERROR``, e.g. an index out of range) or a guard in a loop
    body failed (``LOOP_GUARD_FAILED``). Nothing was returned and no input was written; the
    caller runs the function eagerly instead."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code
        self.guard_index = code - 1 if code > 0 else None


def _check_object_layout():
    """The native entry reads tuple items and array data pointers at fixed offsets (the
    CPython and NumPy ABIs); confirm them once."""
    array = np.arange(3.0)
    items = (array,)
    item = (None if TUPLE_ITEMS_OFFSET is None
            else ctypes.c_void_p.from_address(id(items) + TUPLE_ITEMS_OFFSET).value)
    data = ctypes.c_void_p.from_address(id(array) + 16).value
    flags = [ctypes.c_int.from_address(id(a) + ARRAY_FLAGS_OFFSET).value
             for a in (array, array[::2], np.broadcast_to(array, (2, 3)))]
    if item != id(array) or data != array.ctypes.data or flags != [
        a.flags.num for a in (array, array[::2], np.broadcast_to(array, (2, 3)))
    ]:
        raise RuntimeError("unexpected CPython/NumPy object layout; tracejit cannot call "
                           "compiled code on this interpreter")


_check_object_layout()


@dataclass
class KernelInfo:
    name: str
    kind: str
    root: str
    stages: list
    llvm_ir: str = ""


@dataclass
class Program:
    """Native code for one graph, and the Python wrapper that calls it. ``llvm_ir`` and
    ``optimized_ir`` may be given as a function that returns the text, called when the
    text is first read (``_text_field``)."""

    name: str
    graph: object
    kernels: list
    llvm_ir: str
    optimized_ir: str
    object_code: bytes
    wrapper_source: str
    compile_seconds: dict = field(default_factory=dict)
    profiled: bool = False  # built with per-kernel counters (see ``profile``)
    trusted: bool = False  # the wrapper converts no input (``wrapper_source(trusted=True)``)
    exports: list = field(default_factory=list)  # more native functions linked (a loop driver)
    driver: str = ""  # what the native loop driver was built for (``native_loop.Layout``)
    wrapper_plan: dict = None  # what the wrapper read of the schedule (``wrapper_plan``)
    _run: object = None
    _library: object = None
    _counters: object = None

    def __call__(self, *inputs):
        return self._run(*inputs)

    @property
    def assembly(self):
        """Host assembly of the optimized IR, rendered when asked for (emitting it with
        every compile cost as much as the object code)."""
        return llvm.assembly_of(self.optimized_ir)

    @property
    def kernel_count(self):
        return len(self.kernels)

    @property
    def broadcast_programs(self):
        """``{((input position, broadcast axes), ...): Program | None}``: the programs
        built so far for large broadcast inputs (None: that pattern is copied)."""
        relayout = self._run.__globals__.get("_relayout") if self._run is not None else None
        return dict(getattr(relayout, "programs", {}))

    def profile(self):
        """``[(kernel, calls, seconds)]`` since the program was loaded, for a program
        compiled with ``profile=True`` (else an empty list). Times are wall time around
        each kernel call, threads and BLAS included."""
        if self._counters is None:
            return []
        counts = self._counters.reshape(-1, 2)
        return [(kernel, int(calls), nanoseconds / 1e9)
                for kernel, (calls, nanoseconds) in zip(self.kernels, counts)]


def _text_field(name):
    """A ``Program`` field that may be set to a function making its text: the disk cache
    keeps a loaded program's LLVM IR compressed until ``lower`` or the command line reads
    it (a warm start never does; inflating it with the entry cost ~0.9 ms)."""
    stored = f"_{name}_text"

    def read(self):
        text = self.__dict__[stored]
        if callable(text):
            text = self.__dict__[stored] = text()
        return text

    def write(self, text):
        self.__dict__[stored] = text

    return property(read, write)


# After @dataclass made __init__, __eq__ and __repr__, which read and write these names.
Program.llvm_ir = _text_field("llvm_ir")
Program.optimized_ir = _text_field("optimized_ir")


def _schedule_and_lower(graph, profile, raw_entry=False, trusted=False):
    """The schedule decides what every buffer holds; lowering emits it as it is (a value
    it cannot inline where the schedule put it is a scheduling bug: ``FusionConflict``).
    A trusted program (a loop body a native driver runs over its buffers) keeps a buffer
    for each output (``schedule.result_views``)."""
    schedule = make_schedule(graph, views_of_results=not trusted)
    if len(schedule.kernels) > KERNEL_LIMIT:
        raise ProgramTooLarge(
            f"{len(schedule.kernels)} kernels, more than the {KERNEL_LIMIT} one program may "
            "hold (LLVM would take minutes): a loop unrolled trip by trip with a decision per "
            "trip makes such programs; write it in a form tracejit captures (docs/sharp_bits.md, "
            "'What unrolls'), explain() names the loop")
    module, entry = ProgramLowering(schedule, _symbol_safe(graph.name), profile).build(raw_entry)
    return schedule, module, entry


# Kernels one program (or one piece of a looped program) may hold. LLVM takes tens of
# milliseconds a kernel, more where math functions are inlined: a fuzz program whose float32
# exit loop converges through subnormals, traced unrolled (231 guards, each with its margin:
# 1322 kernels), spent 4 minutes in LLVM on the loaded machine, per call that traced it.
# Past the limit the call runs eagerly, and so do later calls of that signature.
KERNEL_LIMIT = 1024


class ProgramTooLarge(UnsupportedError):
    """A graph schedules into more than ``KERNEL_LIMIT`` kernels: compiling it would take
    minutes, so its calls run eagerly (``runtime/misses.py``: 'too large to compile')."""


def _symbol_safe(name):
    cleaned = "".join(ch if ch.isalnum() else "_" for ch in name)
    return f"tj_{cleaned}"


def compile(graph, name=None, check=True, profile=False, *, optimized=False,  # noqa: A001
            wrapper=None, trusted=False, extend=None, admit=None):
    """Compile ``graph`` (any bucket of its symbols) to a ``Program``; with ``profile``,
    the program counts calls and time per kernel (``Program.profile()``). ``optimized``:
    the graph already went through ``optimize`` (run again, guard margins would be added
    twice and guard numbers change); ``wrapper(schedule, entry)`` replaces ``wrapper_source``;
    ``trusted``: the caller passes arrays of the inputs' dtypes (``wrapper_source``);
    ``extend(schedule, module, name)`` adds native functions to the module (a loop driver over
    the raw entry, ``codegen/native_loop.py``) and returns ``(exports, description)``;
    ``admit(estimate)`` is shown the optimized graph's ``CompileEstimate`` before anything
    is lowered, and may raise to stop the compile (the runtime's compile-cost policy)."""
    from .parallel import pool

    # The pool every program links with starts now, not at link: starting it stops
    # NumPy's OpenBLAS threads (blas.shorten_openblas_idle_spin), which otherwise spin for
    # ~0.1 s after the trace's last product, on the cores that lowering and LLVM need.
    pool()
    with gc_pause.paused():  # a compile's garbage dies by reference counting
        return _compile(graph, name, check, profile, optimized, wrapper, trusted, extend,
                        admit)


def _compile(graph, name, check, profile, optimized, wrapper, trusted, extend, admit=None):
    times = {}
    start = time.perf_counter()
    if not optimized:
        graph = optimize(graph, check=check)
    if admit is not None:
        admit(estimate_compile(graph))
    if loops.has_loops(graph):  # segments and loop bodies compiled apart (codegen/loops.py)
        return loops.compile_looped(graph, name, profile)
    # Before scheduling, and kept in ``Program.graph``: the disk cache rebuilds the wrapper
    # from that graph and the wrapper plan (``rebuild_wrapper``; without a plan it
    # reschedules the graph) and must find the same buffers.
    graph = read_relu_outputs(unit_broadcasts(graph))
    schedule, module, entry = _schedule_and_lower(graph, profile, raw_entry=extend is not None,
                                                  trusted=trusted)
    exports, driver = extend(schedule, module, _symbol_safe(graph.name)) if extend else ([], "")
    python_entry.add_python_entry(module, entry)
    times["schedule+lower"] = time.perf_counter() - start
    llvm_ir = str(module)
    compiled = llvm.compile_module(llvm_ir)
    times["llvm"] = compiled.seconds
    program = Program(
        name=name or graph.name,
        graph=graph,
        kernels=[KernelInfo(k.name, k.kind, k.root.name, [s.name for s in k.stages])
                 for k in schedule.kernels],
        llvm_ir=llvm_ir,
        optimized_ir=compiled.llvm_ir,
        object_code=compiled.object_code,
        wrapper_source=(wrapper(schedule, entry) if wrapper is not None
                        else wrapper_source(schedule, entry, trusted=trusted)),
        compile_seconds=times,
        profiled=profile,
        trusted=trusted,
        exports=exports,
        driver=driver,
        wrapper_plan=wrapper_plan(schedule) if wrapper is None else None,
    )
    link(program)
    times["total"] = time.perf_counter() - start
    return program


def rebuild_wrapper(graph, trusted=False, plan=None):
    """The wrapper of a program loaded from disk, generated here from its parsed graph:
    the same schedule gives the same slots the object code was built for. (The disk copy
    of the wrapper text is never executed.) With ``plan`` (``wrapper_plan``'s, stored
    with the program), the graph is not scheduled again: the plan names what the wrapper
    needs of the schedule, and is checked against the graph (``planned_schedule``)."""
    schedule = (make_schedule(graph, views_of_results=trusted is not True) if plan is None
                else planned_schedule(graph, plan))
    return wrapper_source(schedule, f"{_symbol_safe(graph.name)}_entry", trusted=trusted is True)


def wrapper_plan(schedule):
    """What a wrapper reads of its schedule beyond the graph, as plain data: the results
    (outputs and printed values, by name) that get an output array of their own, and the
    workspace's size in bytes (an int, or a dim's text). Rescheduling a loaded program's
    graph to learn them cost a warm start ~2 ms per program."""
    workspace = schedule.workspace_bytes
    return {"outputs": [name for kind, name in program_slots(schedule) if kind == "output"],
            "workspace": workspace if isinstance(workspace, int) else str(workspace)}


class PlanError(ValueError):
    """A stored wrapper plan that does not fit its graph."""


def planned_schedule(graph, plan):
    """A ``Schedule`` holding what ``wrapper_source`` reads, from ``graph`` and ``plan``:
    only results of the graph may be outputs (each once), and the workspace is a
    non-negative int or a dim over the graph's symbols."""
    from tracejit.tracer.dims import parse_dim

    from .schedule import Buffer, Schedule

    effect_outputs = [atom for item in graph.body if isinstance(item, Effect)
                      for atom in item.inputs if isinstance(atom, Var)]
    results = {atom.name: atom for atom in (*graph.outputs, *effect_outputs)
               if isinstance(atom, Var)}
    results.update((root.name, root) for root, _ in result_views(graph).values())
    names = plan.get("outputs") if isinstance(plan, dict) else None
    if not isinstance(names, list) or len(set(map(str, names))) != len(names) or not all(
            isinstance(name, str) and name in results for name in names):
        raise PlanError("a wrapper plan naming outputs that are not the graph's results")
    workspace = plan.get("workspace")
    if isinstance(workspace, str):
        try:
            workspace = parse_dim(workspace)
        except Exception:  # noqa: BLE001 (any text the dim parser refuses)
            raise PlanError("a workspace size that is no dim") from None
        symbols = {symbol.name for symbol in graph.symbols}
        if not (isinstance(workspace, int) or workspace.symbols() <= symbols):
            raise PlanError("a workspace size over symbols the graph does not declare")
    if type(workspace) is not int and not isinstance(workspace, DimExpr) or (
            isinstance(workspace, int) and workspace < 0):
        raise PlanError("a malformed workspace size")
    buffers = {name: Buffer(results[name], "output") for name in names}
    producers = {eqn.out.name: eqn for eqn in graph.equations}
    return Schedule(graph, producers, buffers, [], [], workspace, effect_outputs)


def _c_order(array, dtype):
    """A C-contiguous array of ``dtype`` (the same array when it already is one; 0-d stays
    0-d, unlike np.ascontiguousarray)."""
    return np.asarray(array, dtype=dtype, order="C")


def link(program):
    """Load the object code and build the wrapper (also after loading from disk, where
    ``program.wrapper_source`` is ``rebuild_wrapper``'s, never text read from disk)."""
    from . import blas, numpy_loops
    from .parallel import pool

    entry = f"{_symbol_safe(program.graph.name)}_entry_py"  # python_entry.add_python_entry
    imports = {**pool().symbols(), **blas.symbols(program.object_code),
               **numpy_loops.symbols(program.object_code)}
    counters = profile_symbol(_symbol_safe(program.graph.name))
    exports = [entry, counters] if program.profiled else [entry]
    exports += program.exports
    library = llvm.load(program.object_code, exports, imports=imports)
    if program.profiled:
        slots = ctypes.c_int64 * (2 * len(program.kernels))
        program._counters = np.ctypeslib.as_array(slots.from_address(library.addresses[counters]))
    native = python_entry.builtin(library.addresses[entry], entry)
    namespace = {
        "_native": native,
        "_empty": np.empty,
        "_contiguous": _c_order,
        "_asarray": np.asarray,
        "_SideExit": SideExit,
        "_sys": sys,
        "_render_pieces": render_pieces,
        "_print_rows": _print_rows,
        "_np": np,
        "_thread": threading.local(),
        "_no_workspace": np.empty(64, np.uint8),
        "_LAYOUT": LAYOUT_EXIT,
        "_compact": _compact,
    }
    for var in (*program.graph.inputs, *(eqn.out for eqn in program.graph.equations)):
        # Dtype objects: NumPy parses a "<f4" on every np.empty and np.asarray (~0.1 us).
        namespace[_dtype_name(var.aval.dtype)] = var.aval.dtype
    namespace["_recycled"] = recycled_outputs.for_thread(namespace["_thread"])
    for index, (_, constant) in enumerate(program.graph.constants):
        namespace[f"_c{index}"] = constant.data
    source = Source()  # as the other generated functions are (tracer/generated_code.py)
    source.bind(namespace)
    for line in program.wrapper_source.splitlines():
        source.add(line, depth=0)
    run = source.define("run", f"program {program.name}")
    namespace = run.__globals__  # the wrapper's functions read what is set here after
    if "run_strict" in namespace:
        relayout = _relayouter(program.graph, program.name, program.profiled,
                               namespace["run_strict"])
        from .numpy_products import layout_inputs  # (numpy_products -> matmul -> here)

        namespace["_relayout"] = _layout_checked(relayout, layout_inputs(program.graph))
    program._run = run
    program._library = library
    return program


def _layout_checked(relayout, positions):
    """``relayout``, unless an input at ``positions`` (one a decision on a NumPy product
    reads through: ``numpy_products.layout_inputs``) is not what NumPy computes with as
    C-ordered (``numpy_products.same_as_c_ordered``): then the call stops
    (``SideExit(LAYOUT_EXIT)``, nothing ran) and runs eagerly, where NumPy hands that
    layout to BLAS itself."""
    if not positions:
        return relayout

    from .numpy_products import same_as_c_ordered  # (numpy_products -> matmul -> here)

    def checked(*inputs):
        for position in positions:
            value = inputs[position]
            if isinstance(value, np.ndarray) and not same_as_c_ordered(value):
                raise SideExit(LAYOUT_EXIT)
        return relayout(*inputs)

    checked.programs = getattr(relayout, "programs", {})
    return checked


# --- the wrapper ---------------------------------------------------------------------
def _name(identifier):
    return ast.Name(id=identifier, ctx=ast.Load())


def _store(identifier):
    return ast.Name(id=identifier, ctx=ast.Store())


def _call(function, *args, **keywords):
    return ast.Call(func=function if isinstance(function, ast.AST) else _name(function),
                    args=list(args), keywords=[ast.keyword(arg=k, value=v)
                                               for k, v in keywords.items()])


def _assign(target, value):
    return ast.Assign(targets=[_store(target)], value=value)


def dim_source(dim):
    """A dim as a Python expression over the symbol variables (``s0 // 2 + 1``)."""
    return ast.parse(str(dim), mode="eval").body if isinstance(dim, DimExpr) else ast.Constant(
        int(dim))


def _symbol_bindings(graph):
    """For each symbol, an input dim that is exactly it: ``(input position, axis)``."""
    bindings = {}
    for position, var in enumerate(graph.inputs):
        for axis, dim in enumerate(var.aval.shape):
            if isinstance(dim, DimExpr) and len(dim.terms) == 1:
                (monomial, coeff), = dim.terms
                if coeff == 1 and len(monomial) == 1 and isinstance(monomial[0], str):
                    bindings.setdefault(monomial[0], (position, axis))
    return bindings


def explicit_symbols(graph):
    """Symbols no input dim is exactly (a loop body's index ``i0``): the wrapper takes them
    as trailing int arguments, after the arrays, in ``graph.symbols`` order. Traced graphs
    bind every symbol from an input, so their wrappers take arrays only."""
    bound = _symbol_bindings(graph)
    return [symbol.name for symbol in graph.symbols if symbol.name not in bound]


def wrapper_source(schedule, entry, graph=None, compact=None, trusted=False):
    """The wrapper's Python source. ``run(x0, ...)`` hands the native entry the caller's
    arrays; if it answers ``LAYOUT_EXIT`` (an input is not C-contiguous; nothing ran),
    ``_relayout`` calls ``run_strict``, which passes C-ordered copies, or a program built
    for broadcast inputs. That program's wrapper comes from ``compact`` ({input position:
    broadcast axes}), with ``schedule`` its own and ``graph`` the original: one strict ``run``
    that passes those inputs compacted (see ``_broadcast_graph``). ``trusted``: the caller
    passes arrays of the inputs' dtypes (a loop driver passing a body's carried values),
    so ``run`` converts nothing; layouts are still checked by the native entry."""
    graph = graph or schedule.graph
    if compact is None:
        functions = [_wrapper_function("run", schedule, graph, None, trusted),
                     _wrapper_function("run_strict", schedule, graph, {})]
    else:
        functions = [_wrapper_function("run", schedule, graph, compact)]
    header = f"# tracejit program {graph.name}: native entry {entry}\n"
    return header + "\n".join(map(wrapper_text.function_source, functions))


def _wrapper_function(function_name, schedule, graph, compact, trusted=False):
    """One wrapper function; ``compact`` None: pass inputs as they are (the fast path);
    else pass them C-ordered, compacting the inputs it names."""
    body = []
    parameters = [f"x{position}" for position in range(len(graph.inputs))]
    arguments = parameters + explicit_symbols(graph)
    for position, parameter in enumerate(parameters if not trusted else ()):
        dtype = _name(_dtype_name(graph.inputs[position].aval.dtype))
        body.append(_assign(parameter, _call("_asarray", _name(parameter), dtype)))
    for symbol, (position, axis) in _symbol_bindings(graph).items():
        shape = ast.Attribute(value=_name(parameters[position]), attr="shape", ctx=ast.Load())
        body.append(_assign(symbol, ast.Subscript(value=shape, slice=ast.Constant(axis),
                                                  ctx=ast.Load())))
    names = {}
    for position, var in enumerate(schedule.graph.inputs):
        names[var.name] = parameters[position]
        if compact is not None:
            names[var.name] = f"c{position}"
            if position in compact:
                value = _call("_compact", _name(parameters[position]),
                              ast.Constant(tuple(compact[position])))
            else:
                value = _call("_contiguous", _name(parameters[position]),
                              _name(_dtype_name(var.aval.dtype)))
            body.append(_assign(names[var.name], value))
    names.update({var.name: f"_c{index}"
                  for index, (var, _) in enumerate(schedule.graph.constants)})
    slots = program_slots(schedule)
    for kind, name in slots:
        if kind == "output":
            buffer = schedule.buffers[name]
            number = len([n for n in names if names[n].startswith("out")])
            local = f"out{number}"
            names[name] = local
            shape = ast.Tuple(elts=[dim_source(dim) for dim in buffer.shape], ctx=ast.Load())
            dtype = _name(_dtype_name(buffer.dtype))
            if _may_be_large(buffer, schedule.graph):
                allocation = _call("_recycled", ast.Constant(number), shape, dtype)
            else:
                allocation = _call("_empty", shape, dtype)
            body.append(_assign(local, allocation))
    body.extend(_workspace_statements(schedule.workspace_bytes))
    arrays = ast.Tuple(elts=[_name(names[name]) if name is not None else _name("workspace")
                             for _, name in slots], ctx=ast.Load())
    symbols = [_name(symbol.name) for symbol in schedule.graph.symbols]
    body.append(_assign("status", _call("_native", arrays, *symbols)))
    failed = [ast.Raise(exc=_call("_SideExit", _name("status")), cause=None)]
    if compact is None:
        relayout = ast.Return(value=_call("_relayout", *map(_name, arguments)))
        failed.insert(0, ast.If(test=ast.Compare(left=_name("status"), ops=[ast.Eq()],
                                                 comparators=[_name("_LAYOUT")]),
                                body=[relayout], orelse=[]))
    body.append(ast.If(test=_name("status"), body=failed, orelse=[]))
    for item in schedule.graph.body:
        if isinstance(item, Effect) and item.kind == "print":
            body.append(ast.Expr(_print_call(item, names)))
    producers = {eqn.out.name: eqn for eqn in graph.equations}  # once, not per output
    views = result_views(schedule.graph)
    outputs, made = [], {}
    for atom in graph.outputs:
        source = _view_source(graph, atom, parameters, producers)
        if isinstance(atom, Var) and atom.name in views and atom.name not in names:
            root, chain = views[atom.name]  # (the schedule gave the root an output array)
            source = _chain_source(_name(names[root.name]), chain)
        if source is None:
            source = _output_source(atom, names)
        if isinstance(atom, Var) and atom.name in made:  # one value, one object (v, v with
            source = _name(made[atom.name])               # v = y[1:] or a constant's copy)
        elif (isinstance(atom, Var) and type(source) is not ast.Name
              and graph.outputs.count(atom) > 1):
            made[atom.name] = f"view{len(made)}"
            source = ast.NamedExpr(target=ast.Name(id=made[atom.name], ctx=ast.Store()),
                                   value=source)
        outputs.append(source)
    body.append(ast.Return(value=ast.Tuple(elts=outputs, ctx=ast.Load())))
    function = ast.FunctionDef(
        name=function_name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in arguments],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=body,
        decorator_list=[],
        returns=None,
    )
    if sys.version_info >= (3, 12):
        function.type_params = []
    return function


def inline_body(program, checked, inputs):
    """``program``'s wrapper ``run`` as statements for another generated function (the
    entry of a variant, ``runtime/guards.compile_entry``), or None when it has parts that
    need the wrapper's own frame (printing, explicit dims, anything unexpected). Returns
    ``(statements, outputs, namespace)``: the statements read the inputs from the local
    names ``inputs`` (and may rebind them) and end by binding the native entry's
    ``status`` (nonzero: nothing escaped and the caller calls the wrapper instead);
    ``outputs`` are the result's expressions; ``namespace`` holds the names they read.
    Inputs at the positions ``checked`` are arrays of the program's input dtypes already:
    they are not converted."""
    if not isinstance(program, Program) or program._run is None:
        return None
    # ``run`` alone: the text is wrapper_source's, ``run`` first (string constants are
    # written with repr, so no newline sits inside one); ``run_strict`` is not inlined.
    module = ast.parse(program.wrapper_source.partition("\ndef run_strict(")[0])
    run = next((item for item in module.body
                if isinstance(item, ast.FunctionDef) and item.name == "run"), None)
    parameters = [f"x{position}" for position in range(len(program.graph.inputs))]
    if run is None or [argument.arg for argument in run.args.args] != parameters:
        return None
    *statements, status_check, returned = run.body
    if not (isinstance(returned, ast.Return) and isinstance(returned.value, ast.Tuple)
            and isinstance(status_check, ast.If) and _reads(status_check.test) == "status"
            and statements and _binds(statements[-1]) == "status"):
        return None
    if len(inputs) != len(parameters):
        return None
    kept = [statement for statement in statements
            if not (_binds(statement) in parameters and parameters.index(_binds(statement))
                    in checked and _calls(statement) == "_asarray")]
    renamed = dict(zip(parameters, inputs))
    body = ast.Module(body=kept + [ast.Expr(value=returned.value)], type_ignores=[])
    for node in ast.walk(body):
        if isinstance(node, ast.Name) and node.id in renamed:
            node.id = renamed[node.id]
    text = [line for statement in kept for line in wrapper_text.statement_lines(statement)]
    outputs = [wrapper_text.source(value) for value in returned.value.elts]
    return text, outputs, program._run.__globals__


def _binds(statement):
    """The one name ``statement`` assigns, else None."""
    if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)):
        return statement.targets[0].id
    return None


def _calls(statement):
    value = statement.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id
    return None


def _reads(expression):
    return expression.id if isinstance(expression, ast.Name) else None


def _dtype_name(dtype):
    """The wrapper's name for a dtype object (``link`` defines it)."""
    name = _dtype_names.get(dtype)
    if name is None:  # NumPy's dtype.name is Python code: ~5 us, and a wrapper asks ~80 times
        name = _dtype_names[dtype] = f"_dtype_{np.dtype(dtype).name}"
    return name


_dtype_names = {}


def _view_source(graph, atom, parameters, producers=None):
    """NumPy's view of the caller's input for an output that is an input or a chain of
    views of one (``schedule.input_view``; ``producers``: its ``{name: eqn}``, made once per
    wrapper): it shares the caller's memory, as eager's does (and like eager,
    ``np.reshape`` copies when no view can express it)."""
    if isinstance(atom, Var) and atom in graph.inputs:
        return _name(parameters[graph.inputs.index(atom)])
    found = input_view(graph, atom, producers)
    if found is None:
        return None
    position, chain = found
    return _chain_source(_name(parameters[position]), chain)


def _chain_source(source, chain):
    """``source`` (an expression) through ``chain``'s NumPy views, as an expression."""
    for eqn in chain:
        params = eqn.params_dict
        name = eqn.prim.name
        if name == "slice":
            bounds = zip(params["starts"], params["limits"], params["steps"])
            index = ast.Tuple(elts=[ast.Slice(lower=dim_source(start), upper=dim_source(limit),
                                              step=ast.Constant(step))
                                    for start, limit, step in bounds], ctx=ast.Load())
            source = ast.Subscript(value=source, slice=index, ctx=ast.Load())
            continue
        argument = {"transpose": "perm", "reshape": "shape", "flip": "axes",
                    "broadcast_to": "shape"}[name]
        values = ast.Tuple(elts=[dim_source(value) for value in params[argument]],
                           ctx=ast.Load())
        numpy_function = ast.Attribute(value=_name("_np"), attr=name, ctx=ast.Load())
        source = _call(numpy_function, source, values)
    return source


# --- inputs that are not C-contiguous ---------------------------------------------------
COMPACT_BYTES = 1 << 20  # smaller broadcast inputs are copied: cheaper than a compile
MAX_BROADCAST_PROGRAMS = 8  # per program; past that, broadcast inputs are copied


def _compact(array, axes):
    """The distinct elements of a broadcast view: length 1 along ``axes`` (where its
    stride is 0, so every index reads the same element), C-ordered."""
    index = tuple(slice(0, 1) if axis in axes else slice(None) for axis in range(array.ndim))
    return np.ascontiguousarray(array[index])


def _broadcast_pattern(inputs):
    """``((input position, broadcast axes), ...)`` for the large broadcast views among
    ``inputs``: axes of length > 1 with stride 0."""
    pattern = []
    for position, array in enumerate(inputs):
        if not isinstance(array, np.ndarray) or array.nbytes < COMPACT_BYTES:
            continue
        axes = tuple(axis for axis, (stride, size) in enumerate(zip(array.strides, array.shape))
                     if stride == 0 and size > 1)
        if axes:
            pattern.append((position, axes))
    return tuple(pattern)


def _broadcast_graph(graph, compact):
    """``graph`` taking the compact base of the inputs ``compact`` names (their broadcast
    axes of length 1) and broadcasting it back as its first equations: kernels read the
    base through broadcast index arithmetic, as they read any broadcast inside a graph."""
    taken = {var.name for var in graph.inputs} | {var.name for var, _ in graph.constants}
    taken |= {eqn.out.name for eqn in graph.equations}
    inputs, prologue = list(graph.inputs), []
    for position, axes in sorted(compact.items()):
        var = graph.inputs[position]
        name = f"{var.name}_base"
        while name in taken:
            name += "_"
        taken.add(name)
        shape = tuple(1 if axis in axes else dim for axis, dim in enumerate(var.aval.shape))
        base = Var(name, AbstractArray(shape, var.aval.dtype))
        inputs[position] = base
        prologue.append(Eqn(broadcast_to_p, (base,), (("shape", tuple(var.aval.shape)),), var))
    return replace(graph, inputs=tuple(inputs), body=tuple(prologue) + tuple(graph.body))


def _compile_broadcast(graph, name, profile, compact):
    """The program for ``graph`` with the inputs ``compact`` names broadcast, or None if
    it cannot be built (the inputs are then copied, as any other layout)."""
    try:
        variant = _broadcast_graph(graph, compact)
        verify(variant)
        return compile(variant, name=name, profile=profile, optimized=True,
                       wrapper=lambda schedule, entry: wrapper_source(schedule, entry, graph,
                                                                      compact))
    except Exception:  # an internal error must not fail a call that copying can serve
        log.warning("%s: no program for broadcast inputs %s; they are copied", name, compact,
                    exc_info=True)
        return None


def _relayouter(graph, name, profile, strict):
    """``relayout(*inputs)``, called when the native entry found an input that is not
    C-contiguous: large broadcast views go to a program compiled (once per pattern) for
    their compact bases; anything else runs ``strict`` (C-ordered copies). Holds the
    graph, not the program, so a program is freed by reference counting alone."""
    programs, lock = {}, threading.Lock()

    def relayout(*inputs):
        pattern = _broadcast_pattern(inputs)
        if not pattern:
            return strict(*inputs)
        with lock:
            if pattern not in programs:
                programs[pattern] = None
                if len(programs) <= MAX_BROADCAST_PROGRAMS:
                    programs[pattern] = _compile_broadcast(graph, name, profile, dict(pattern))
            program = programs[pattern]
        return strict(*inputs) if program is None else program(*inputs)

    relayout.programs = programs  # for inspection and tests
    return relayout


def _may_be_large(buffer, graph):
    """Outputs of a megabyte or more (at the top of their bucket) are recycled."""
    size = buffer.nbytes
    if not isinstance(size, int):
        size = size.bounds(graph.ranges)[1]
    return size >= recycled_outputs.RECYCLE_BYTES


def _workspace_statements(size):
    """Temporaries live in one workspace per thread, reused across calls (fresh memory
    for large temporaries would page-fault on every call); none at all when empty."""
    if isinstance(size, int) and size == 0:
        return [_assign("workspace", _name("_no_workspace"))]
    needed = (ast.Constant(max(size, 64)) if isinstance(size, int)
              else _call("max", dim_source(size), ast.Constant(64)))
    source = f"""
workspace = getattr(_thread, "workspace", None)
if workspace is None or workspace.size < {wrapper_text.source(needed)}:
    workspace = _thread.workspace = _empty({wrapper_text.source(needed)}, "u1")
"""
    return ast.parse(source).body


def _output_source(atom, names):
    if isinstance(atom, Literal):
        value = atom.value
        if isinstance(value, DimExpr):
            return dim_source(value)
        if isinstance(value, np.generic):
            return _call(ast.Attribute(value=_name("_np"), attr=value.dtype.name,
                                       ctx=ast.Load()), ast.Constant(value.item()))
        return ast.Constant(value)
    source = _name(names[atom.name])
    if names[atom.name].startswith("_c"):
        return _call(ast.Attribute(value=source, attr="copy", ctx=ast.Load()))
    return source


def _print_rows(params, values):
    emit([print_text(Effect("print", (), params, None), values)])


def _print_call(effect, names):
    params = dict(effect.params)
    if params.get("rows"):  # a line per selected trip (tracejit.tracer.loop_prints)
        sources = [_output_source(atom, names) for atom in effect.inputs]
        return _call("_print_rows", ast.Constant(effect.params),
                     ast.Tuple(elts=sources, ctx=ast.Load()))
    arguments = []
    for kind, value in params["segments"]:
        if kind == "text":
            arguments.append(ast.Constant(value))
            continue
        if kind == "formatted":  # rendered from the compiled values (tracer/deferred_text)
            sources = [_output_source(atom, names) for atom in effect.inputs]
            arguments.append(_call("_render_pieces", ast.Constant(value),
                                   ast.Tuple(elts=sources, ctx=ast.Load())))
            continue
        atom = effect.inputs[value]
        source = _output_source(atom, names)
        if isinstance(atom, Var) and not atom.aval.shape:
            source = ast.Subscript(value=source, slice=ast.Tuple(elts=[], ctx=ast.Load()),
                                   ctx=ast.Load())
        arguments.append(_call("str", source))
    stream = ast.Attribute(value=_name("_sys"), attr=params["stream"], ctx=ast.Load())
    return _call("print", *arguments, sep=ast.Constant(params["sep"]),
                 end=ast.Constant(params["end"]), file=stream)

