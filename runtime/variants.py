"""Variants and their trace trees.

A ``Variant`` is what one entry signature compiled to: an entry guard and a tree of
``Path``s. The root path is the first trace; when a value guard of a path fails at run
time (a side exit), the call runs eagerly; once that exit has been taken ``hot_exit``
times, the call is traced instead and the new path hangs under that guard, so from then on
both directions run compiled. A path knows how to turn its program's outputs back into the
function's result (pytree, NumPy scalars, statics) and which inputs it writes back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from tracejit.codegen.compile_estimate import NOTHING, CompileEstimate
from tracejit.codegen.schedule import input_view, result_views
from tracejit.tracer import pytree
from tracejit.tracer.abstract import PYTHON_SCALARS
from tracejit.tracer.argument_writes import ArgumentWrite, OutsideArrayWrite
from tracejit.tracer.pending import known_kind
from tracejit.tracer.tensor_methods import stored_outputs, written_pairs

from .result_source import result_function


def _identity(value):
    return value


def _position(variants, variant):
    """Where ``variant`` itself is in ``variants`` (a Variant's ``==`` compares fields)."""
    return next(i for i, known in enumerate(variants) if known is variant)


def _wrap_tensor(value):
    from .tensor import Tensor

    return Tensor._wrap(np.asarray(value)) if isinstance(value, (np.ndarray, np.generic)) else (
        value)


@dataclass
class OutputPlan:
    """How program outputs become the function's result."""

    tree: object  # pytree.TreeDef
    leaves: list  # per result leaf: ("array", i) | ("scalar", i) | ("value", i) | ("static", v)
    mutated: dict  # argument leaf position -> program output index
    # result leaf position -> argument leaf position: an argument updated in place and
    # returned (``w -= lr * dw; return w``) is returned itself, as NumPy returns it
    aliases: dict = field(default_factory=dict)
    # config["t"] += 1 into a dict argument: stored into the caller's dict after the call
    writes: list = field(default_factory=list)  # tracejit.tracer.argument_writes.ArgumentWrite
    # (place in the result, argument place): an argument's dict or list returned is the
    # caller's own object (argument_writes.put_back)
    containers: list = field(default_factory=list)
    # result leaf position -> index in ``writes`` of an outside array updated in place and
    # returned (``self.W -= g; return self.W``): that array itself, as NumPy returns it
    outside_aliases: dict = field(default_factory=dict)
    # result leaf position -> (argument leaf position, program output index): a view of an
    # argument updated in place whose reshape NumPy may copy (``w -= g; return
    # w.reshape(-1)``); where the wrapper's view is a copy (of the old values: a
    # non-contiguous argument), the program's array of the update is the result
    refreshed: dict = field(default_factory=dict)

    # result leaf position -> (argument leaf position or None, kind, params): what NumPy
    # returns from the caller's array, made from it (tracer.result_identity.numpy_results):
    # ``np.diagonal(x)`` its read-only view; ``np.ascontiguousarray(x)`` ``x`` itself where
    # that is C-contiguous (else the program's copy), of a view of ``x`` (None) the
    # program's view made C-contiguous
    numpy_results: dict = field(default_factory=dict)
    # the structure of the call's (args, kwargs) that the entry guard checks (the trace's
    # ``input_tree``): the writes read arguments that are leaves directly, not by
    # flattening them all (None, as from a disk entry: they flatten)
    argument_tree: object = None
    # the program outputs that are Tensors eagerly (computed from a Tensor argument, or one
    # the function reached: tracer.tensor_methods.tensor_outputs); the result function
    # wraps those, in results and in what the writes store, and no other: ``return loss,
    # x * 3`` with ``x`` an ndarray returns an ndarray beside the Tensor loss, as NumPy.
    # None: every array of the result (a plan made without them)
    tensors: frozenset = None

    @staticmethod
    def from_trace(trace):
        leaves, program_index = [], 0
        flat = trace.output_values  # a list a loop filled: its buffers (tracer.loop_rows)
        if flat is None:
            flat, _ = pytree.flatten(trace.outputs)
        for position, value in enumerate(flat):
            if position in trace.output_statics:  # (None where an alias gives it)
                leaves.append(("static", None if position in trace.output_aliases
                               else trace.output_statics[position]))
                continue
            value = known_kind(value)  # computed by the program: a value of its kind tells
            if value is None:
                value = np.empty(1)
            if isinstance(value, np.generic):
                kind = "scalar"
            elif type(value) in PYTHON_SCALARS:
                kind = "value"
            else:
                kind = "array"
            leaves.append((kind, program_index))
            program_index += 1
        return OutputPlan(trace.output_tree, leaves, dict(trace.mutated_inputs),
                          dict(trace.output_aliases), list(trace.argument_writes),
                          list(trace.returned_containers), dict(trace.outside_aliases),
                          dict(trace.refreshed_views), dict(trace.numpy_results),
                          trace.input_tree, frozenset(trace.tensor_outputs))

    @functools.cached_property
    def writes_items(self):
        """Whether the call writes items of dicts or lists passed in (``config["t"] = t``)."""
        return any(isinstance(write, ArgumentWrite) for write in self.writes)

    @functools.cached_property
    def writes_arrays(self):
        """Whether the call writes into an array read from outside the arguments."""
        return any(isinstance(write, OutsideArrayWrite) for write in self.writes)

    @functools.cached_property
    def appends(self):
        """The writes that append to a list (``self.hs.append(h)``): each must find its
        list before the call's writes are stored."""
        return [write for write in self.writes if hasattr(write, "ready")]

    @functools.cached_property
    def written_numbers(self):
        """The program outputs the writes store as numbers (``self.steps += 1``: a Python
        int, ``self.total += loss.item()``), not as arrays."""
        found = set()
        for write in self.writes:
            found |= {index for kind, index in written_pairs(write)
                      if kind in ("value", "scalar")}
        return found

    @functools.cached_property
    def wrapped(self):
        """The program outputs the result function makes Tensors (with a ``wrap`` that is
        not the identity): the ``tensors`` the result returns, and those the writes store
        as new objects (``self.last = h`` under ``no_grad``)."""
        returned = {value for kind, value in self.leaves if kind in ("array", "scalar")}
        returned |= {index for _, index in self.refreshed.values()}
        if self.tensors is None:
            return frozenset(returned)
        return frozenset((returned | stored_outputs(self.writes)) & self.tensors)

    def single_array(self):
        """The program output that is the whole result, when the result is one array and
        the call writes nothing back (the common case), else None."""
        if (not self.mutated and not self.writes and not self.containers
                and not self.numpy_results and self.tree == pytree.LEAF
                and self.leaves[0][0] == "array"):
            return self.leaves[0][1]
        return None

    @functools.cached_property
    def result(self):
        """``result(outputs, argument_leaves, wrap, arguments=None)``: the call's result;
        ``arguments`` (``(args, kwargs)``) receive the writes. One generated function
        (``result_source``), made when first asked for."""
        return result_function(self)


@dataclass
class Path:
    program: object  # codegen.Program
    outputs: OutputPlan
    guards: tuple  # the graph's value guards (locations for messages)
    functions: list  # (qualname, file, source) the trace passed through
    children: dict = field(default_factory=dict)  # guard index -> Path
    exits: dict = field(default_factory=dict)  # guard index -> times taken eagerly
    calls: int = 0
    backward: object = None  # the backward program, for calls that need gradients
    gradients: object = None  # tracejit.tracer.gradient_trace.GradientPlan
    residual_bytes: int = 0
    # what compiling it was estimated to cost (codegen.compile_estimate; runtime/compile_policy)
    estimate: CompileEstimate = NOTHING

    def __post_init__(self):
        # Outputs the wrapper returns as NumPy views of inputs (x.T, x[1:]) or of another
        # result's array (y.T beside y): NumPy results share the caller's memory (the other
        # result's) as eager's do; Tensor results get their own copy, so
        # a write through one can never change a tensor autograd saved behind its
        # version counter.
        graph = self.program.graph
        of_results = result_views(graph)
        self.view_outputs = frozenset(
            index for index, atom in enumerate(graph.outputs)
            if input_view(graph, atom) is not None or getattr(atom, "name", None) in of_results)

    @functools.cached_property
    def result(self):
        """``result(outputs, argument_leaves, wrap, arguments=None)``: ``outputs.result``,
        with the ``view_outputs`` copied first for Tensor results; generated when first
        asked for (a path loaded from disk and never called makes none)."""
        if not self.view_outputs:
            return self.outputs.result
        return result_function(self.outputs, self.view_outputs, _identity)

    @functools.cached_property
    def written_numbers_only(self):
        """Outputs that only feed writes of numbers (``self.step += 1``): ``record`` leaves
        them as the program made them; arrays written (``params[i] = params[i] - lr * g``)
        become Tensors, as eagerly."""
        in_result = {value for kind, value in self.outputs.leaves if kind != "static"}
        return self.outputs.written_numbers - in_result - set(self.gradients.differentiable)

    @functools.cached_property
    def python_numbers(self):
        """Outputs the call returns as Python numbers (``loss.item()``, ``float(loss)``):
        ``record`` leaves them to the output plan, which makes them ``float``, as eagerly,
        not 0-d Tensors."""
        return {value for kind, value in self.outputs.leaves if kind == "value"}

    def record(self, outputs, inputs, leaves, spec, function):
        """Put a compiled call with gradients on the tape: Tensor outputs whose backward
        runs ``self.backward`` on the saved inputs and residuals."""
        from .autograd import CompiledNode, OutputNode
        from .tensor import Tensor

        plan = self.gradients
        parents, tensors, differentiated = [], [], []
        for kind, position in plan.wrt:
            tensor = leaves[position] if kind == "leaf" else spec.implicit[
                position].path.resolve(leaves)
            parents.append(tensor._node or tensor)
            differentiated.append(tensor)
            if kind == "implicit":
                # a model's parameter (self.W) written in place before backward (an
                # optimizer step): the backward would read the new values; eager raises
                tensors.append(tensor)
        differentiated_implicit = {position for kind, position in plan.wrt
                                   if kind == "implicit"}
        for number, implicit in enumerate(spec.implicit):  # frozen ones, buffers
            if implicit.type_name == "Tensor" and number not in differentiated_implicit:
                tensors.append(implicit.path.resolve(leaves))
        for leaf in leaves:
            if isinstance(leaf, Tensor):
                tensors.append(leaf)
        saved = tuple((t._versions, t._versions.value, t.dtype, t.shape) for t in tensors)
        forward = outputs[: plan.forward_outputs]
        avals = [(forward[i].shape, forward[i].dtype) for i in plan.differentiable]
        node = CompiledNode(self.backward, inputs, outputs[plan.forward_outputs:], avals,
                            tuple(parents), saved, function)
        # An argument returned as it came (``return w, loss``) is that Tensor, as eagerly:
        # a leaf whose .grad the backward fills, not a copy on the compiled node.
        arguments = {id(tensor.data): tensor for tensor in (*tensors, *differentiated)}
        numbers = self.written_numbers_only
        # (an output that is eagerly NumPy's stays so: value_and_grad's, or x * 3 of an
        # ndarray x beside the loss)
        plain = set() if self.outputs.tensors is None else (
            set(range(len(forward))) - self.outputs.tensors)
        wrapped = [
            arguments[id(value)] if id(value) in arguments and arguments[id(value)].data is value
            else value if index in numbers or index in self.python_numbers or np.isscalar(value)
            or index in plain
            else Tensor._wrap(np.array(value) if index in self.view_outputs else
                              np.asarray(value))
            for index, value in enumerate(forward)]
        for slot, index in enumerate(plan.differentiable):
            if wrapped[index] is arguments.get(id(forward[index])) or index in plain:
                continue
            wrapped[index]._node = OutputNode(node, slot)
            wrapped[index].requires_grad = True
        return wrapped

    def count(self):
        return 1 + sum(child.count() for child in self.children.values())

    def walk(self, prefix=()):
        yield prefix, self
        for guard_index, child in sorted(self.children.items()):
            yield from child.walk(prefix + (guard_index,))


@dataclass
class Variant:
    spec: object  # tracejit.runtime.guards.EntrySpec
    # The compiled entry guard (``guard``), or None: compiled when first asked for. The
    # hit path (``guards.compile_entry``) checks the call itself, so a variant built by a
    # first call that returned the trace's result may never need it.
    _guard: object
    root: Path
    key: str = ""  # the disk cache key, when it has one
    from_disk: bool = False
    # Another size bucket of an earlier variant (same code, other dims' ranges): it does
    # not count toward max_variants, so lengths and image sizes alone never reach it.
    bucket_sibling: bool = False
    # (calls in a row a guard inside a captured loop's body sent eagerly, compiled calls
    # when the last one did)
    loop_exits: tuple = (0, -1)
    # A guard's other path that read more of the objects than this variant's entry is a
    # variant of its own, tried before this one (``misses._other_entry``): ``other_paths``
    # holds those made from this variant, in the order they are tried, and each of them
    # points back through ``other_path_of``. A side exit goes on along ``exits_to``.
    other_path_of: Variant | None = field(default=None, compare=False, repr=False)
    other_paths: list = field(default_factory=list, compare=False, repr=False)
    dropped: bool = field(default=False, compare=False)  # ``misses._drop_variant``
    # compiled calls when the call that made it returned (later ones reuse it: a
    # recompile storm is variants never reused, runtime/compile_policy.in_storm)
    born_calls: int = field(default=0, compare=False)

    def __post_init__(self):
        # ``wrap`` makes the outputs that are Tensors eagerly (``OutputPlan.tensors``)
        # Tensors when the call took Tensors (as arguments, or reached through them: a
        # model argument's self.W; eagerly such results are Tensors under no_grad too).
        takes_tensors = any(leaf.type_name == "Tensor" for leaf in (
            *self.spec.leaves, *self.spec.implicit))
        self.wrap = _wrap_tensor if takes_tensors else _identity
        self._any_bucket = None
        self._checks = None  # the guard without its draws (``takes``)

    @property
    def guard(self):
        """``guard(args, kwargs) -> inputs | None``: the entry guard of ``spec``."""
        if self._guard is None:
            from .guards import compile_guard

            self._guard = compile_guard(self.spec)
        return self._guard

    def exits_to(self):
        """The variants a side exit of this one tries, in order: the other paths made after
        it from the variant it left, then that variant, and so on up. Each comes after the
        one before it in the function's variants (``_add_variant_before``), so the walk
        never comes back to a variant that sent the call on.

        >>> from types import SimpleNamespace
        >>> def variant():
        ...     return Variant(SimpleNamespace(leaves=[], implicit=[]), None, None)
        >>> root = variant()
        >>> first, second = root.add_other_path(variant()), root.add_other_path(variant())
        >>> names = {id(root): "root", id(first): "first", id(second): "second"}
        >>> [names[id(v)] for v in first.exits_to()], [names[id(v)] for v in root.exits_to()]
        (['second', 'root'], [])
        """
        variant = self
        while (left := variant.other_path_of) is not None:
            later = left.other_paths[_position(left.other_paths, variant) + 1:]
            yield from (other for other in later if not other.dropped)
            if not left.dropped:
                yield left
            variant = left

    def add_other_path(self, added):
        """Record ``added`` as a variant made for the other path of one of this one's
        guards (tried before this one); answers ``added``."""
        added.other_path_of = self
        self.other_paths.append(added)
        return added

    def widen(self, outside):
        """Add ``outside`` checks (``EntrySpec.outside``) to the entry guard, rebuilt when
        next asked for (``runtime.misses``: a path that read more than the root did)."""
        from dataclasses import replace

        self.spec = replace(self.spec, outside=list(self.spec.outside) + list(outside))
        self._guard = self._checks = self._any_bucket = None

    def takes(self, args, kwargs):
        """Whether the entry guard accepts the call, without drawing its host draws (a
        question, as ``lower`` asks it: nothing to undo)."""
        if self.spec.draws is None:
            return self.guard(args, kwargs) is not None
        if self._checks is None:
            from .guards import compile_guard

            self._checks = compile_guard(self.spec, draws=False)
        return self._checks(args, kwargs) is not None

    def rewind(self):
        """Undo the host draws of this thread's last entry into this variant (the call goes
        on another way: the eager run, or a trace, draws them again as eager does)."""
        if self.spec.draws is not None:
            self.spec.draws.rewind()

    @property
    def calls(self):
        """Compiled calls of this variant: each ran one path of its tree."""
        return sum(path.calls for _, path in self.root.walk())

    @property
    def estimate(self):
        """What compiling its root path was estimated to cost."""
        return self.root.estimate

    @property
    def path_count(self):
        return self.root.count()

    @property
    def counted(self):
        """How much of ``max_variants`` this variant uses: its paths, less the variant
        itself when it is a bucket sibling."""
        return self.path_count - (1 if self.bucket_sibling else 0)

    def any_bucket_guard(self):
        """This variant's entry guard with every dynamic dim's bucket widened to all sizes
        of 2 and more (0 and 1 stay alone): a call it accepts differs only in which
        bucket its sizes fall in."""
        if self._any_bucket is None:
            from dataclasses import replace

            from .guards import compile_guard

            symbols = {name: (low, high) if high <= 1 else (2, 2 ** 62)
                       for name, (low, high) in self.spec.symbols.items()}
            guard = compile_guard(replace(self.spec, symbols=symbols), draws=False)

            def any_bucket(args, kwargs):
                # A shape guard may divide by a dim its own bucket keeps nonzero
                # (im2col's reshape(N*oh*ow, -1): size % (N*oh*ow)); in another bucket
                # that dim may be 0, and the call is no sibling.
                try:
                    return guard(args, kwargs)
                except ZeroDivisionError:
                    return None

            self._any_bucket = any_bucket
        return self._any_bucket
