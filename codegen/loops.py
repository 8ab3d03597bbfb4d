"""Programs whose graph holds ``loop`` equations.

How a loop runs. ``NativeLoopProgram`` (the default) cuts the graph at its loops. Each run
of equations between loops is compiled by the normal codegen as a sub-graph (a
*segment*, ``_Segment``); each loop's body is compiled ONCE as its own ``Program``
(``_Loop``) in which the index symbol (``i0``, already in the body's slice and pad params
as a ``DimExpr``) is an ordinary symbol passed at run time. The body program computes the
carried values that are not written in place and the values written at the index (``hs[:,
t] = h``, found by ``control.inplace_writes``), never the whole buffer. ``_Loop.run``:

1. evaluates start/stop/step, converts the carried and outside values once, checks every
   slice the body reads and every region it writes stays inside its array for the first
   and last trip (params linear in the index: that covers every trip; a floor division or
   remainder of it, ``x[t % 3]``, is checked at every trip), and copies
   buffers written in place unless they are fresh arrays of ours;
2. runs the trips natively when the body program holds a driver (``codegen/native_loop.py``:
   one LLVM function calls the body's kernels per trip, double-buffers the carried values
   and copies each written value to its region; no Python per trip), else
3. drives the trips from Python (the fallback, logged at build: one call of the body's
   wrapper per trip and one NumPy slice assignment per write).

One compile per bucket whatever the trip count. Hooks for other work: a step of -1 or
any other int runs through both drivers (``range(start, stop, step)``); a body the
driver cannot run (``native_loop.layout_of`` says why) takes the Python path. Loops and
segments that differ only in int offsets (the trips of an outer loop that unrolled around
them) share one program, each passing its own offsets as symbols (``loop_sharing``).

Side exits: a failed guard in a segment raises ``SideExit`` with the whole graph's guard
number; a kernel error in the body (an index out of range) or a write outside its buffer
raises ``SideExit(-1)`` (the caller runs eagerly). Nothing escapes before the last step:
outputs are returned only at the end, and buffers that came from the caller are copied
before the first write, so inputs are never touched.

Disk cache: ``NativeLoopProgram.pieces`` (the segments' and bodies' ``Program``s, in the
order they are built) are stored as ordinary programs beside the graph's IR
(``tracejit.runtime.serialize``); a load parses the IR, rebuilds the driver from it and takes each
piece from disk instead of compiling it (``from_pieces``), so a warm start runs no LLVM.

``LoopProgram`` keeps the NumPy-interpreter version: the fallback when a piece cannot be
compiled (logged), and the reference the tests compare against.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

import numpy as np

from tracejit.tracer.dims import DimExpr
from tracejit.tracer.errors import UnsupportedError
from tracejit.tracer.ir import Effect, Eqn, Graph, Guard, Literal, Symbol, Var
from tracejit.tracer.loop_index import linear_in
from tracejit.tracer.ops.control import (
    BodyPlan,
    LoopGuardFailed,
    _evaluate,
    _needed,
    bind_symbols,
    emit,
    loop_p,
    print_text,
    run_body,
)

from . import loop_sharing, native_loop
from .exit_codes import INNER_LOOP_GUARD_FAILED, KERNEL_ERROR, LOOP_GUARD_FAILED, body_exit
from .loop_regions import Write, nonlinear_in, reads_in_bounds, region_geometry, region_views
from .lowering import LAYOUT_EXIT

log = logging.getLogger("tracejit.loops")


def has_loops(graph):
    return any(eqn.prim is loop_p for eqn in graph.equations)


_CONVERT = {"bool": bool, "margin": bool, "int": int, "index": int, "float": float,
            "item": lambda value: np.asarray(value).item()}


class LoopProgram:
    """A ``Program`` look-alike for graphs with loops, run by the NumPy interpreter. As a
    loop body holding a loop of its own, it takes the symbols no input dim binds (the
    outer loop's index) as trailing int arguments, as a body's ``Program`` does."""

    kind = "interpreted"
    trusted = False  # converts its inputs (a body's carried values come back as arrays)
    driver = ""  # no native driver: an enclosing loop runs it from Python

    def __init__(self, graph, name):
        self.name = name
        self.graph = graph
        self.kernels = []
        self.llvm_ir = self.optimized_ir = self.wrapper_source = ""
        self.profiled = False
        self.compile_seconds = {}
        from .program import explicit_symbols

        self.explicit = explicit_symbols(graph)  # as a loop body: the outer index, ...
        self.layout_inputs = _layout_inputs(graph)

    @property
    def kernel_count(self):
        return len(self.kernels)

    @property
    def object_code(self):
        raise UnsupportedError("an interpreted loop program has no object code; it is "
                               "cached in memory only")

    def profile(self):
        return []

    def _run(self, *inputs):
        """What an enclosing loop calls per trip (a body ``Program``'s raw entry)."""
        return self(*inputs)

    def __call__(self, *inputs):
        from .program import SideExit

        _check_layouts(self.layout_inputs, inputs, SideExit)
        graph = self.graph
        inputs, extra = inputs[:len(graph.inputs)], inputs[len(graph.inputs):]
        inputs = [np.asarray(value) for value in inputs]
        bindings = bind_symbols([var.aval for var in graph.inputs], inputs)
        bindings.update(zip(self.explicit, extra))
        env = {var.name: value for var, value in zip(graph.inputs, inputs)}
        for var, constant in graph.constants:
            env[var.name] = constant.data
        guard_number, loops_done, effects = 0, {}, []
        for item in graph.body:
            if isinstance(item, Guard):
                guard_number += 1
                value = _value(item.predicate, env, bindings)
                if _CONVERT[item.convert](value) != item.expected:
                    raise SideExit(guard_number)
                continue
            if isinstance(item, Effect):  # printed at the end, after every guard passed
                effects.append(print_text(item, [_value(atom, env, bindings)
                                                 for atom in item.inputs]))
                continue
            if not isinstance(item, Eqn):
                continue
            values = [_value(atom, env, bindings) for atom in item.inputs]
            params = item.params_dict
            if item.prim is loop_p:
                key = (tuple(id(value) for value in values),
                       tuple(p for p in item.params if p[0] != "output"))
                if key not in loops_done:
                    loops_done[key] = _run_loop(values, params, bindings, SideExit, effects)
                env[item.out.name] = loops_done[key][params["output"]]
                continue
            concrete = {key: _evaluate(value, bindings) for key, value in params.items()}
            with np.errstate(all="ignore"):
                env[item.out.name] = item.prim.impl(*values, **concrete)
        emit(effects)  # the loop bodies' prints, once the call cannot side-exit any more
        return tuple(np.array(_value(atom, env, bindings)) for atom in graph.outputs)


def _value(atom, env, bindings):
    if hasattr(atom, "name"):
        return env[atom.name]
    value = atom.value
    return value.evaluate(bindings) if isinstance(value, DimExpr) else value


def _run_loop(values, params, bindings, side_exit, effects=None):
    num_carry = params["num_carry"]
    try:
        with np.errstate(all="ignore"):
            return run_body(params["body"], params["index"],
                            _evaluate(params["start"], bindings),
                            _evaluate(params["stop"], bindings), params["step"], num_carry,
                            values[:num_carry], values[num_carry:], bindings, effects,
                            params.get("exit"))
    except IndexError:  # an index out of range: eager decides, as kernels do
        raise side_exit(KERNEL_ERROR) from None
    except LoopGuardFailed as failure:  # a guard of the body fails: the whole call exits
        # as compiled code's: a guard of a loop inside the body is an inner loop's
        raise side_exit(INNER_LOOP_GUARD_FAILED if failure.inner else LOOP_GUARD_FAILED
                        ) from None


# --- native: segments compiled by codegen, loops driven over a compiled body -------------
def _loop_key(eqn):
    return (eqn.inputs, tuple(p for p in eqn.params if p[0] != "output"))


def _reads(item):
    atoms = item.inputs if isinstance(item, (Eqn, Effect)) else (item.predicate,)
    return [atom.name for atom in atoms if hasattr(atom, "name")]


def compile_piece(graph, name, **options):
    """A segment or a loop body as a ``Program`` (``NativeLoopProgram``'s default
    ``build``; a program loaded from disk passes one that hands back stored pieces)."""
    from .program import compile as compile_graph

    return compile_graph(graph, name=name, **options)


class _Segment:
    """Equations and guards between loops, compiled as one sub-graph (``compile``)."""

    def __init__(self, graph, items, read_later, guard_offset, name):
        variables = {var.name: var for var in graph.inputs}
        variables.update({eqn.out.name: eqn.out for eqn in graph.equations})
        constants = dict((var.name, (var, constant)) for var, constant in graph.constants)
        defined, inputs, used_constants = set(), [], []
        for item in items:
            for read in _reads(item):
                if read in defined or read in {var.name for var in inputs}:
                    continue
                if read in constants:
                    if constants[read] not in used_constants:
                        used_constants.append(constants[read])
                else:
                    inputs.append(variables[read])
            if isinstance(item, Eqn):
                defined.add(item.out.name)
        outputs = [item.out for item in items
                   if isinstance(item, Eqn) and item.out.name in read_later]
        if not outputs:  # guards only: a graph needs an output, any one will do; with no
            # equation at all (loss.item() after the loop: one guard on the loop's result)
            # the guarded input itself
            defined_here = [item.out for item in items if isinstance(item, Eqn)]
            outputs = defined_here[-1:] or inputs[:1]
        # The outer graph's shape guards hold here too: shape rules re-checked by the
        # verifier may need them (s0 == 3 decides a broadcast).
        self.graph = Graph(name, tuple(inputs), tuple(used_constants), tuple(items),
                           tuple(outputs), graph.symbols, shape_guards=graph.shape_guards)
        self.name = name
        self.inputs = [var.name for var in inputs]
        self.outputs = [var.name for var in outputs]
        self.guard_offset = guard_offset
        self.program, self.lifted = None, {}

    def compile(self, build, shared=None):
        """Build the program (``shared``: a ``loop_sharing`` group's, with this segment's
        offsets)."""
        from .program import explicit_symbols

        if shared is None:
            self.program = build(self.graph, self.name, optimized=True)
        else:
            group, self.lifted = shared
            self.program = group.program_for(
                lambda: build(group.graph, group.name, optimized=True))
        self.symbols = explicit_symbols(self.program.graph)

    def run(self, env, bindings, side_exit):
        arguments = [env[name] for name in self.inputs]
        if self.lifted:  # this segment's offsets, for a program its group shares
            bindings = {**bindings, **self.lifted}
        arguments += [bindings[name] for name in self.symbols]
        try:
            results = self.program._run(*arguments)
        except side_exit as exit:
            if exit.code > 0:
                raise side_exit(exit.code + self.guard_offset) from None
            raise
        for name, value in zip(self.outputs, results):
            env[name] = value


class _Loop:
    """One loop (every ``loop`` equation sharing its operands and body): the body compiled
    once with the index as a run-time symbol, run by its native driver or from Python."""

    def __init__(self, graph, eqn, later_uses, name, build, shared=None, body=None):
        from .numpy_products import note_loop
        from .program import explicit_symbols

        params = eqn.params_dict
        self.num_carry = params["num_carry"]
        self.index, self.start, self.stop, self.step = (params["index"], params["start"],
                                                        params["stop"], params["step"])
        body = body if body is not None else loop_body(graph, eqn)  # (_loop_bodies' plan)
        # a while loop's done flag (tracejit.tracer.while_loops): its number among the kept
        self.exit = body.kept.index(params["exit"]) if params.get("exit") is not None else None
        # A body holding a loop compiles to a program of segments and loops itself
        # (compile_looped); this loop then runs it from Python, one call per trip.
        note_loop(graph, eqn)  # before the body compiles: a decision there may read carries
        self.kept, self.writes, items = body.kept, body.writes, body.items
        # Bodies that differ only in constant slice starts share one program
        # (``loop_sharing``): this loop passes its own starts as symbols (``lifted``).
        self.lifted, self.program_index = {}, self.index
        # the schedule the driver was built from, or why no driver was (_add_driver)
        self._plan = self._refusal = None
        if shared is None:
            self.program = self._build(body.graph, name, build)
        else:
            group, self.lifted = shared
            self.program_index = group.index  # the index symbol of the group's graph

            def build_for_group():
                program = self._build(group.graph, group.name, build)
                group.plan, group.refusal = self._plan, self._refusal
                return program

            self.program = group.program_for(build_for_group)
            self._plan, self._refusal = group.plan, group.refusal
        self.native = self._native_driver(name)
        self.symbols = explicit_symbols(self.program.graph)
        if self.symbols[-1:] != [self.program_index]:
            raise UnsupportedError("the loop index is bound by an input dim of the body")
        self.dtypes = [var.aval.dtype for var in params["body"].inputs]
        self.operands = [_operand(atom) for atom in eqn.inputs]
        # A buffer written in place is copied first unless it is a fresh array of ours
        # used by nothing else (checked again at run time: it must own its memory). A
        # constant of the graph is no fresh array: a list's blank buffer at a constant trip
        # count (range(40) at exact shapes) is one, and every call wrote its rows into
        # that one array, the lists of earlier calls viewing it (their rows changed).
        held = {var.name for var in graph.inputs} | {var.name for var, _ in graph.constants}
        self.fresh = {write.position for write in self.writes
                      if self.operands[write.position][0] == "var"
                      and later_uses.get(self.operands[write.position][1]) == 1
                      and self.operands[write.position][1] not in held}
        self.results = {}  # output position -> outer var name
        # Kernels trust slice and pad params; NumPy's reference raises where an index
        # leaves the array. Params are affine in the index: checking the first and last
        # trip covers every trip.
        self.bounds = [(eqn.prim.name, eqn.params_dict, eqn.inputs[0].aval.shape)
                       for eqn in items if isinstance(eqn, Eqn)
                       and eqn.prim.name in ("slice", "pad")]
        # x[t % 3]: a param that is not linear in the index is checked at every trip.
        self.every_trip = any(nonlinear_in(value, self.index) for _, params, _ in self.bounds
                              for value in params.values())
        self.checked = {}  # run-time checks and write regions, per bindings and trips

    def _build(self, body_graph, name, build):
        # Trusted inputs: run() passes arrays of the body's dtypes (converted once before
        # the first trip, then the body's own results), so the wrapper converts nothing.
        program = build(body_graph, name, trusted=True, extend=self._add_driver)
        if program.trusted and any(
            isinstance(atom, Literal) for atom in program.graph.outputs[:len(self.kept)]
        ):
            program = build(body_graph, name)  # a scalar comes back: convert it
        return program

    def _add_driver(self, plan, module, program_symbol):
        """``compile``'s ``extend``: the native driver, when the body's layout allows."""
        layout, why = native_loop.layout_of(plan, len(self.kept), self.program_index,
                                            [len(write.value_shape) for write in self.writes],
                                            self.exit)
        self._plan = plan
        if layout is None:
            self._refusal = why
            return [], ""
        return [native_loop.add_driver(module, program_symbol, layout)], layout.text()

    def _native_driver(self, name):
        """The body's native driver, or None (logged): the Python loop runs it then."""
        program = self.program
        if not program.driver:
            log.info("%s: the loop runs from Python: %s", name,
                     self._refusal or "no native driver was built")
            return None
        plan = self._plan
        if plan is None or plan.graph is not program.graph:  # loaded from disk
            from .schedule import schedule as make_schedule

            plan = make_schedule(program.graph)
        layout, why = native_loop.layout_of(plan, len(self.kept), self.program_index,
                                            [len(write.value_shape) for write in self.writes],
                                            self.exit)
        if layout is None or layout.text() != program.driver:  # a stored piece, not ours
            raise UnsupportedError(f"{name}: its native driver was built for "
                                   f"{program.driver!r}, the body needs "
                                   f"{why or layout.text()!r}")
        self._plan = None
        return native_loop.NativeLoop(program, plan, layout)

    def in_bounds(self, bindings, first, last):
        key = (tuple(bindings.items()), first, last)
        if key not in self.checked:
            if len(self.checked) > 64:
                self.checked.clear()
            trips = range(first, last + self.step, self.step) if self.every_trip else (
                first, last)
            self.checked[key] = all(
                reads_in_bounds(kind, params, shape, {**bindings, self.index: t})
                for kind, params, shape in self.bounds for t in trips)
        return self.checked[key]

    def run(self, env, bindings, side_exit):
        values = [env[value] if kind == "var" else _evaluate(value, bindings)
                  for kind, value in self.operands]
        if self.lifted:  # this loop's slice starts, for a program its group shares
            bindings = {**bindings, **self.lifted}
        start, stop = _evaluate(self.start, bindings), _evaluate(self.stop, bindings)
        trips = range(start, stop, self.step)
        num_carry = self.num_carry
        carried = [_contiguous(values[p], self.dtypes[p]) for p in self.kept]
        free = [_contiguous(value, dtype)
                for value, dtype in zip(values[num_carry:], self.dtypes[num_carry:])]
        buffers, regions, region_axes = {}, [], []
        if trips:
            if not self.in_bounds(bindings, trips[0], trips[-1]):
                raise side_exit(KERNEL_ERROR)  # an index out of range: eager raises it
            for write in self.writes:
                value = values[write.position]
                if write.position in self.fresh and isinstance(value, np.ndarray) and (
                    value.flags.owndata and value.flags.c_contiguous
                    and value.dtype == self.dtypes[write.position]
                ):
                    buffer = value
                else:
                    buffer = np.array(value, dtype=self.dtypes[write.position], order="C")
                key = (write.position, tuple(bindings.items()), trips[0], trips[-1])
                if key not in self.checked:
                    self.checked[key] = write.region_of(self.index, bindings, buffer.shape,
                                                        trips[0], trips[-1])
                axes = self.checked[key]
                if axes is None:
                    raise side_exit(KERNEL_ERROR)  # a write outside the buffer: eager raises it
                buffers[write.position] = buffer
                region_axes.append(axes)
                if self.native is None:
                    regions.append(region_views(buffer, axes, trips))
        if self.exit is not None and trips and bool(carried[self.exit]):
            trips = ()  # done before the first trip (a while loop's trip 0 peeled)
        if self.native is not None and trips:
            geometry = [(buffers[write.position], *region_geometry(buffers[write.position],
                                                                    axes, trips))
                        for write, axes in zip(self.writes, region_axes)]
            status, _, carried = self.native.run(carried + free, bindings, trips, geometry)
            if status:  # as the Python loop's side exit below
                raise side_exit(body_exit(status))
            trips = ()  # every trip ran
        tail = tuple(free) + tuple(bindings[name] for name in self.symbols[:-1])
        run_body_program = self.program._run
        kept = len(self.kept)
        try:
            for trip, t in enumerate(trips):
                results = run_body_program(*carried, *tail, t)
                carried = results[:kept]
                for number, region in enumerate(regions):
                    region[trip] = np.reshape(results[kept + number], region.shape[1:])
                if self.exit is not None and bool(carried[self.exit]):
                    break  # a while loop's exit
        except side_exit as exit:
            # No guard of the body has a number in the outer graph's trace tree: the
            # whole call side-exits and runs eagerly (nothing was returned or written
            # outside our own copies). A loop's inside the body is an inner loop's.
            raise side_exit(body_exit(exit.code)) from None
        final = list(values[:num_carry])
        for position, value in zip(self.kept, carried):
            final[position] = value
        for position, buffer in buffers.items():
            final[position] = buffer
        for position, name in self.results.items():
            env[name] = final[position]


@dataclass
class LoopBody:
    """What of a loop's body is compiled: the carried positions ``kept`` (not written in
    place), the ``writes`` at the index, the body's ``items`` the results need and the
    body ``graph`` a ``Program`` is built from (its symbols end with the index)."""

    kept: list
    writes: list
    items: tuple
    graph: Graph


def loop_body(graph, eqn):
    """The ``LoopBody`` of the loop equation ``eqn`` in ``graph``, or ``UnsupportedError``
    when the native drivers cannot run it."""
    params = eqn.params_dict
    body, num_carry, index = params["body"], params["num_carry"], params["index"]
    if any(isinstance(item, Effect) for item in body.body):
        raise UnsupportedError("print in a loop body (not compiled yet)")
    plan = BodyPlan(body, num_carry)
    kept = [p for p in range(num_carry) if p not in plan.writes]
    writes = [Write(p, plan.writes[p][2], plan.writes[p][1].aval.shape)
              for p in sorted(plan.writes)]
    if any(linear_in(low, index) is None for write in writes for low, _, _ in write.config):
        # out[t // 2] = v: the drivers write at base + delta * t (the interpreter runs it)
        raise UnsupportedError("a write at a region that is not linear in the index "
                               "(a floor division or remainder of it)")
    outputs = [body.outputs[p] for p in kept]
    # A written value is returned before any reshape to the region's shape (``h`` for
    # ``hs[:, t, :] = h``, not ``h`` reshaped to (N, 1, H)): the same elements in the
    # same C order, so no copy kernel runs in the body just to add an axis.
    outputs += [_before_reshapes(body, plan.writes[write.position][1]) for write in writes]
    guards = [item for item in body.body if isinstance(item, Guard)]
    needed = {e.out.name for e in _needed(body, outputs + [g.predicate for g in guards])}
    items = tuple(item for item in body.body
                  if isinstance(item, Guard) or item.out.name in needed)
    inputs = [body.inputs[p] for p in kept] + list(body.inputs[num_carry:])
    outer = [symbol for symbol in graph.symbols
             if symbol.name not in {s.name for s in body.symbols}]
    index_symbol = next((s for s in body.symbols if s.name == index),
                        Symbol(index, 0, 1 << 31))
    # The index last: it is the wrapper's last explicit argument.
    symbols = (*outer, *(s for s in body.symbols if s.name != index), index_symbol)
    body_graph = Graph(body.name, tuple(inputs), body.constants, items, tuple(outputs),
                       symbols, shape_guards=graph.shape_guards, check_vars=body.check_vars)
    return LoopBody(kept, writes, items, body_graph)


def _before_reshapes(body, atom):
    """``atom``, or what it reshapes (through a chain of reshapes), when that is a value
    the body computes (a body input would come back as the input itself)."""
    producers = {eqn.out.name: eqn for eqn in body.equations}
    inputs = {var.name for var in body.inputs}
    source = atom
    while True:
        eqn = producers.get(getattr(source, "name", None))
        if eqn is None or eqn.prim.name != "reshape" or not hasattr(eqn.inputs[0], "name"):
            break
        source = eqn.inputs[0]
    return atom if getattr(source, "name", None) in inputs else source


def _operand(atom):
    if hasattr(atom, "name"):
        return ("var", atom.name)
    return ("literal", atom.value)


def _contiguous(value, dtype):
    return np.asarray(value, dtype=dtype, order="C")


class NativeLoopProgram(LoopProgram):
    """Segments and loop bodies as native programs; see the module docstring."""

    kind = "native segments and loops"

    def __init__(self, graph, name, build=compile_piece, profile=False):
        """``profile``: the segments and bodies count calls and time per kernel
        (``profile``; TRACEJIT_PROFILE=1)."""
        super().__init__(graph, name)
        # A segment's program would print as soon as it runs, before a later loop or guard
        # could side-exit: prints stay out of the segments and are written at the end
        # (their values read there, like the graph's outputs).
        self.effects = [item for item in graph.body if isinstance(item, Effect)]
        if profile:
            build = functools.partial(build, profile=True)
        uses = {}
        groups = {}
        for item in graph.body:
            if isinstance(item, Eqn) and item.prim is loop_p:
                if _loop_key(item) in groups:
                    continue
                groups[_loop_key(item)] = item
            for read in _reads(item):
                uses[read] = uses.get(read, 0) + 1
        for atom in graph.outputs:
            if hasattr(atom, "name"):
                uses[atom.name] = uses.get(atom.name, 0) + 1
        # A segment returns only the values read after it (by a loop, a later segment or
        # the graph's outputs): the rest stay inside it, free to fuse.
        last_read = {}
        for position, item in enumerate(graph.body):
            last_read.update((read, position) for read in _reads(item))
        last_read.update((atom.name, len(graph.body)) for atom in graph.outputs
                         if hasattr(atom, "name"))
        last_read.update((read, len(graph.body)) for effect in self.effects
                         for read in _reads(effect))
        self.steps, pending, guards = [], [], 0
        guard_offset = 0
        results = {}  # loop key -> {output position: outer var name}

        def flush(end):
            nonlocal pending, guard_offset
            if any(isinstance(item, (Eqn, Guard)) for item in pending):
                number = len(self.steps)
                read_later = {read for read, position in last_read.items() if position >= end}
                self.steps.append(_Segment(graph, pending, read_later, guard_offset,
                                           f"{name}_segment{number}"))
                guard_offset = guards
            pending = []

        for position, item in enumerate(graph.body):
            if isinstance(item, Eqn) and item.prim is loop_p:
                key = _loop_key(item)
                if key not in results:
                    flush(position)
                    results[key] = {}
                    self.steps.append(key)  # built below, once the segments are planned
                results[key][item.params_dict["output"]] = item.out.name
                continue
            if isinstance(item, Guard):
                guards += 1
            if not isinstance(item, Effect):
                pending.append(item)
        flush(len(graph.body))
        # Segments and loop bodies that differ only in int offsets share a program
        # (``loop_sharing``); pieces are built in step order (``from_pieces`` relies on it).
        segments = [step for step in self.steps if isinstance(step, _Segment)]
        shared_segments = loop_sharing.share(
            [(id(segment), segment.name, None, segment.graph) for segment in segments])
        from .numpy_products import note_segments

        # A product one segment returns and a later step decides on is NumPy's call there
        group_graphs = {key: group.graph for key, (group, _) in shared_segments.items()}
        note_segments(graph, [(segment.graph, group_graphs.get(id(segment)))
                              for segment in segments])
        plans = {}  # key -> loop_body's plan, made once for sharing and for _Loop
        shared_loops = loop_sharing.share(_loop_bodies(graph, groups, name, plans))
        loops = 0
        for position, step in enumerate(self.steps):
            if isinstance(step, _Segment):
                step.compile(build, shared_segments.get(id(step)))
                continue
            loop = _Loop(graph, groups[step], uses, f"{name}_loop{loops}", build,
                         shared_loops.get(step), plans.get(step))
            loop.results = results[step]
            self.steps[position] = loop
            loops += 1
        from .program import _symbol_bindings

        self.bindings = _symbol_bindings(graph)
        self.kernels = [kernel for step in self.steps for kernel in step.program.kernels]
        self.constants = {var.name: constant.data for var, constant in graph.constants}
        # results that are constants: a new array per call, as NumPy's (once per value)
        self.constant_results = any(isinstance(atom, Var) and atom.name in self.constants
                                    for atom in graph.outputs)
        self.layout_inputs = _layout_inputs(graph)
        self.profiled = any(program.profiled for program in self.pieces)
        self.profiled_calls = 0  # counted when profiled (explain()'s profile header)

    def profile(self):
        """``[(kernel, calls, seconds)]`` of every segment's and body's kernels (a body's
        count its trips), each shared program once; empty unless built profiled."""
        return [row for program in self.pieces for row in program.profile()]

    @property
    def pieces(self):
        """The segments' and loop bodies' programs, in the order ``build`` made them (what
        the disk cache stores; ``from_pieces`` puts them back)."""
        programs = {id(step.program): step.program for step in self.steps}  # shared: once
        return list(programs.values())

    @classmethod
    def from_pieces(cls, graph, name, pieces):
        """The program for ``graph`` with its segments and bodies taken from ``pieces``
        (loaded from disk) instead of compiled: the driver is rebuilt here from the graph,
        and each piece must be the one this graph asks for at that place (its name, and
        its inputs and outputs); else ``UnsupportedError`` and the caller compiles."""
        stored = iter(pieces)

        def take(sub, piece_name, **options):
            piece = next(stored, None)
            if piece is None or not _same_interface(piece, sub, piece_name):
                raise UnsupportedError(f"a stored piece of {name} is not the one its graph "
                                       f"asks for at {piece_name}")
            return piece

        program = cls(graph, name, build=take)
        if next(stored, None) is not None:
            raise UnsupportedError(f"{name} has stored pieces its graph does not use")
        return program

    def __call__(self, *inputs):
        from .program import SideExit

        _check_layouts(self.layout_inputs, inputs, SideExit)
        graph = self.graph
        env = dict(self.constants)
        for var, value in zip(graph.inputs, inputs):
            env[var.name] = value
        bindings = {symbol: np.shape(inputs[position])[axis]
                    for symbol, (position, axis) in self.bindings.items()}
        bindings.update(zip(self.explicit, inputs[len(graph.inputs):]))
        if self.profiled:
            self.profiled_calls += 1
        for step in self.steps:
            step.run(env, bindings, SideExit)
        emit([print_text(effect, [_value(atom, env, bindings) if isinstance(atom, Literal)
                                  else env[atom.name] for atom in effect.inputs])
              for effect in self.effects])  # once the call cannot side-exit any more
        if self.constant_results:
            for name in self.constants.keys() & {atom.name for atom in graph.outputs
                                                  if isinstance(atom, Var)}:
                env[name] = np.array(env[name])  # (env is this call's)
        return tuple(_value(atom, env, bindings) if isinstance(atom, Literal)
                     else env[atom.name] for atom in graph.outputs)


def _loop_bodies(graph, groups, name, plans):
    """``[(key, program name, index, body graph)]`` of the loops in ``groups`` (``{key:
    first equation}``, in body order) whose bodies the native drivers can run, for
    ``loop_sharing.share``; program names as ``NativeLoopProgram`` gives them. Each
    body's ``loop_body`` plan goes in ``plans`` by key (``_Loop`` takes it)."""
    bodies = []
    for number, (key, eqn) in enumerate(groups.items()):
        try:
            body = loop_body(graph, eqn)
        except UnsupportedError:
            continue  # _Loop refuses it again, with the reason
        plans[key] = body
        bodies.append((key, f"{name}_loop{number}", eqn.params_dict["index"], body.graph))
    return bodies


def _same_interface(piece, graph, name):
    """Does ``piece`` (a loaded ``Program``) take and return what ``graph`` does?"""
    def avals(atoms):
        return [str(atom.aval) for atom in atoms]

    return (piece.name == name and [var.name for var in piece.graph.inputs] ==
            [var.name for var in graph.inputs] and avals(piece.graph.inputs) ==
            avals(graph.inputs) and avals(piece.graph.outputs) == avals(graph.outputs) and
            [symbol.name for symbol in piece.graph.symbols] ==
            [symbol.name for symbol in graph.symbols])


def _layout_inputs(graph):
    from .numpy_products import layout_inputs  # (numpy_products -> matmul -> program)

    return layout_inputs(graph)


def _check_layouts(positions, inputs, side_exit):
    """The layout check a straight program's wrapper makes (``program._layout_checked``):
    a program with loops passes its arguments to segments and loop drivers, which copy them
    C-ordered, so an argument a decision on a NumPy product reads in place (``X[t] @ w`` of
    a strided ``X`` in a deciding loop) went through with other sums than NumPy's."""
    if not positions:
        return
    from .numpy_products import same_as_c_ordered  # (numpy_products -> matmul -> program)

    for position in positions:
        value = inputs[position]
        if isinstance(value, np.ndarray) and not same_as_c_ordered(value):
            raise side_exit(LAYOUT_EXIT)


def compile_looped(graph, name=None, profile=False):
    from .program import ProgramTooLarge

    start = time.perf_counter()
    name = name or graph.name
    try:
        program = NativeLoopProgram(graph, name, profile=profile)
    except ProgramTooLarge:
        # A segment past the kernel limit (a loop unrolled around the captured ones) runs
        # eagerly, as a straight program past it does: the interpreter below runs its
        # thousands of operations one NumPy call each, tens of times slower than eager
        # (trekhleb's MLP train: 1.5 s a call where NumPy takes 0.04 s).
        raise
    except UnsupportedError as limit:  # a known limit (a loop nested in a loop body)
        log.info("%s: loop program not compiled natively (%s); it runs interpreted", name,
                 limit)
        program = LoopProgram(graph, name)
    except Exception:  # a piece codegen cannot build: the interpreter serves the call
        log.warning("%s: loop program not compiled natively; it runs interpreted", name,
                    exc_info=True)
        program = LoopProgram(graph, name)
    program.compile_seconds = {"total": time.perf_counter() - start}
    return program
