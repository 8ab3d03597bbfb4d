"""Programs whose graph holds ``loop`` equations.

NOT NATIVE YET. A graph with a captured loop is compiled once per bucket (the trace and
this object are built once, whatever the trip count), but it runs through the IR's NumPy
reference implementation: every equation's ``impl`` in order, loops through
``tracer.ops.control.run_body`` (buffers written at the index are written in place, so a
run is linear in the trip count). Value guards are checked as compiled code checks them
and a failure raises ``SideExit`` before any output escapes. The native version - an
outer LLVM loop around the body's kernels with the index passed as one more symbol (the
body's slices and pads already carry it as a ``DimExpr``) - is the next step; see the
report of issue 13.
"""

from __future__ import annotations

import time

import numpy as np

from tracer.dims import DimExpr
from tracer.errors import UnsupportedError
from tracer.ir import Effect, Eqn, Guard
from tracer.ops.control import _evaluate, bind_symbols, loop_p, run_body


def has_loops(graph):
    return any(eqn.prim is loop_p for eqn in graph.equations)


_CONVERT = {"bool": bool, "margin": bool, "int": int, "index": int, "float": float,
            "item": lambda value: np.asarray(value).item()}


class LoopProgram:
    """A ``Program`` look-alike for graphs with loops, run by the NumPy interpreter."""

    kind = "interpreted"

    def __init__(self, graph, name):
        if any(isinstance(item, Effect) for item in graph.body):
            raise UnsupportedError("print inside a function with a captured loop is not "
                                   "compiled yet")
        self.name = name
        self.graph = graph
        self.kernels = []
        self.llvm_ir = self.optimized_ir = self.wrapper_source = ""
        self.materialized = []
        self.profiled = False
        self.compile_seconds = {}

    kernel_count = property(lambda self: 0)

    @property
    def object_code(self):
        raise UnsupportedError("a program with a captured loop has no object code yet "
                               "(interpreted); it is cached in memory only")

    def profile(self):
        return []

    def __call__(self, *inputs):
        from .program import SideExit

        graph = self.graph
        inputs = [np.asarray(value) for value in inputs]
        bindings = bind_symbols([var.aval for var in graph.inputs], inputs)
        env = {var.name: value for var, value in zip(graph.inputs, inputs)}
        for var, constant in graph.constants:
            env[var.name] = constant.data
        guard_number, loops_done = 0, {}
        for item in graph.body:
            if isinstance(item, Guard):
                guard_number += 1
                value = _value(item.predicate, env, bindings)
                if _CONVERT[item.convert](value) != item.expected:
                    raise SideExit(guard_number)
                continue
            if not isinstance(item, Eqn):
                continue
            values = [_value(atom, env, bindings) for atom in item.inputs]
            params = item.params_dict
            if item.prim is loop_p:
                key = (tuple(id(value) for value in values),
                       tuple(p for p in item.params if p[0] != "output"))
                if key not in loops_done:
                    loops_done[key] = _run_loop(values, params, bindings, SideExit)
                env[item.out.name] = loops_done[key][params["output"]]
                continue
            concrete = {key: _evaluate(value, bindings) for key, value in params.items()}
            with np.errstate(all="ignore"):
                env[item.out.name] = item.prim.impl(*values, **concrete)
        return tuple(np.array(_value(atom, env, bindings)) for atom in graph.outputs)


def _value(atom, env, bindings):
    if hasattr(atom, "name"):
        return env[atom.name]
    value = atom.value
    return value.evaluate(bindings) if isinstance(value, DimExpr) else value


def _run_loop(values, params, bindings, side_exit):
    num_carry = params["num_carry"]
    try:
        with np.errstate(all="ignore"):
            return run_body(params["body"], params["index"],
                            _evaluate(params["start"], bindings),
                            _evaluate(params["stop"], bindings), params["step"], num_carry,
                            values[:num_carry], values[num_carry:], bindings)
    except IndexError:
        raise side_exit(-1) from None  # an index out of range: eager decides, as kernels do


def compile_looped(graph, name=None):
    start = time.perf_counter()
    program = LoopProgram(graph, name or graph.name)
    program.compile_seconds = {"total": time.perf_counter() - start}
    return program
