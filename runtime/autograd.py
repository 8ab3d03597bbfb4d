"""The eager autograd tape: PyTorch's dynamic graph, recorded as operations run.

Each operation on Tensors that need gradients records a ``Node`` holding its rule (a
primitive and its parameters) and the values it saved; ``backward`` walks the nodes in
reverse topological order with a loop (no recursion, so a graph 100,000 ops deep works),
applying the op table's VJP rules through ``tracejit.tracer.autodiff.cotangent``, the same code
compiled autograd differentiates with.

>>> from tracejit import tensor
>>> x = tensor([1.0, 2.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad
tensor([2., 4.])
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from tracejit.tracer.autodiff import cotangent
from tracejit.tracer.primitives import current_context
from tracejit.tracer.traced_array import trace_error

_FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward(). Specify retain_graph=True if you need to backward through "
    "the graph a second time or if you need to access saved tensors after calling backward."
)


class _GradMode(threading.local):
    enabled = True


_grad_mode = _GradMode()


def is_grad_enabled():
    """Whether operations on Tensors are recorded now (not inside ``no_grad()``)."""
    context = current_context()
    if context is not None and not any(getattr(context, "tensor_inputs", {}).values()):
        # A compiled call checks the mode only where a Tensor argument requires grad: a
        # variant traced with one answer would run under the other.
        raise trace_error("is_grad_enabled() in a jit function none of whose arguments is a "
                          "Tensor requiring grad is not supported (the compiled call would "
                          "not check the mode); the call runs eagerly")
    return _grad_mode.enabled


class no_grad:  # noqa: N801 - PyTorch's name
    """Disable recording, as a context manager or a decorator.

    >>> from tracejit import tensor
    >>> with no_grad():
    ...     y = tensor([1.0], requires_grad=True) * 2
    >>> y.requires_grad
    False
    >>> @no_grad
    ... def predict(w):
    ...     return w * 2
    >>> predict(tensor([1.0], requires_grad=True)).requires_grad
    False
    """

    enabled = False

    def __new__(cls, function=None):
        # @no_grad without parentheses, as PyTorch takes it too: the decorated function
        if function is not None:
            return cls()(function)
        return super().__new__(cls)

    def __enter__(self):
        if not self.enabled:
            _refuse_inside_a_gradient_trace()
        elif not _grad_mode.enabled:
            _refuse_enabling_inside_a_trace()
        self._previous = _grad_mode.enabled
        _grad_mode.enabled = self.enabled

    def __exit__(self, *exc_info):
        _grad_mode.enabled = self._previous

    def __call__(self, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with type(self)():  # a fresh instance per call: safe under recursion and threads
                return function(*args, **kwargs)

        return wrapper


def _refuse_inside_a_gradient_trace():
    """``with no_grad():`` in a function being traced with its backward: the trace records
    the block's operations like any others, so gradients would flow through values that
    eagerly have none (``s`` in ``with no_grad(): s = x.sum()``, then ``x * s``). The call
    runs eagerly on the tape instead."""
    context = current_context()
    if context is not None and getattr(context, "records_gradients", False):
        raise trace_error("`with no_grad()` in a function traced with gradients is not "
                          "supported (the trace would differentiate through the block); "
                          "the call runs eagerly. Compute what the block makes outside the "
                          "jit function and pass it in")


def _refuse_enabling_inside_a_trace():
    """``with enable_grad():`` in a function being traced under ``no_grad()``: the trace
    records no backward (the call's mode is off), so what the block makes from Tensors
    requiring grad would come back without the history it has eagerly. The call runs
    eagerly instead."""
    if current_context() is not None:
        raise trace_error("`with enable_grad()` in a function called under no_grad() is not "
                          "supported (the compiled call would return its values without "
                          "gradients); the call runs eagerly")


class enable_grad(no_grad):  # noqa: N801
    """Re-enable recording inside a ``no_grad`` region."""

    enabled = True


class Node:
    """A recorded operation. ``parents`` has one entry per input: ``None`` (no gradient
    wanted), the ``Node`` that produced it, or the leaf ``Tensor`` that accumulates it.
    Subclasses implement ``apply(cotangent) -> one cotangent per parent`` and ``release``.
    ``retained``, when set (``Tensor.retain_grad()``), is a weak reference to the non-leaf
    Tensor this node made, whose ``.grad`` gets the node's cotangent."""

    __slots__ = ("parents", "retained")

    def apply(self, g):
        raise NotImplementedError

    def release(self):
        """Free saved values (after a backward without ``retain_graph``)."""

    @property
    def name(self):
        return type(self).__name__


class IndexNode(Node):
    """``x[index]``: the gradient goes back into zeros of ``x``'s shape, summed with
    ``np.add.at`` where integer arrays may name a position twice (PyTorch's
    IndexBackward). One node and NumPy's own indexing, instead of the reshape, slice and
    gather primitives the index plan would record."""

    __slots__ = ("index", "shape", "dtype", "repeats")

    def __init__(self, parent, index, shape, dtype):
        self.parents = (parent,)
        self.index = index
        self.shape = shape
        self.dtype = dtype
        items = index if isinstance(index, tuple) else (index,)
        self.repeats = any(
            isinstance(item, (np.ndarray, list)) and np.asarray(item).dtype.kind != "b"
            for item in items
        )

    @property
    def name(self):
        return "getitem"

    def apply(self, g):
        if self.index is _RELEASED:  # (not None: x[None] indexes with None)
            raise RuntimeError(_FREED_MESSAGE)
        grad = np.zeros(self.shape, self.dtype)
        if self.repeats:
            np.add.at(grad, self.index, g)
        else:
            grad[self.index] = g
        return (grad,)

    def release(self):
        self.index = _RELEASED


_RELEASED = object()  # an IndexNode's index once backward freed it


def _check_saved_versions(saved_versions, saved_by):
    """PyTorch's error when an array a backward needs was written in place after the
    forward saved it (its version counter moved)."""
    for versions, version, dtype, shape in saved_versions:
        if versions.value != version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified "
                f"by an inplace operation: [{dtype} array of shape {shape}] is at version "
                f"{versions.value}; expected version {version} instead (saved by {saved_by})."
            )


class PrimitiveNode(Node):
    """A primitive applied eagerly: its VJP rules and the values they need.

    ``saved_versions`` holds ``(version counter, version, dtype, shape)`` for each saved
    Tensor input and the output: counters rather than Tensors, so the output's own node
    does not refer back to it (a cycle would leave every graph to the cyclic GC)."""

    __slots__ = ("prim", "params", "primals", "out", "saved_versions")

    def __init__(self, prim, params, primals, out, parents, saved_versions):
        self.prim = prim
        self.params = params
        self.primals = primals
        self.out = out
        self.parents = parents
        self.saved_versions = saved_versions

    @property
    def name(self):
        return self.prim.name

    def apply(self, g):
        if self.primals is None:
            raise RuntimeError(_FREED_MESSAGE)
        _check_saved_versions(self.saved_versions, self.name)
        return tuple(
            None
            if parent is None
            else cotangent(self.prim, argnum, g, self.primals, self.out, self.params)
            for argnum, parent in enumerate(self.parents)
        )

    def release(self):
        self.primals = self.out = None


def _count_consumers(root):
    """How many edges lead into each node reachable from ``root`` (iteratively)."""
    counts = {root: 0}
    stack = [root]
    while stack:
        node = stack.pop()
        for parent in node.parents:
            if isinstance(parent, Node):
                if parent in counts:
                    counts[parent] += 1
                else:
                    counts[parent] = 1
                    stack.append(parent)
    return counts


def _accumulate(leaf, g):
    from .tensor import Tensor

    g = np.asarray(g)
    if leaf.grad is None:
        # Own the buffer: a cotangent may be shared by several leaves (x + y).
        leaf.grad = Tensor._wrap(np.array(g, dtype=leaf.dtype, copy=True))
    else:
        leaf.grad.data += g


def _seed(tensor, gradient):
    if not tensor.requires_grad:
        raise RuntimeError(
            "element 0 of tensors does not require grad and does not have a grad_fn "
            f"(a {tensor.dtype} tensor of shape {tensor.shape}; create its inputs with "
            "requires_grad=True, outside no_grad)"
        )
    if gradient is None:
        if tensor.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return np.ones(tensor.shape, tensor.dtype)
    gradient = np.asarray(gradient.data if hasattr(gradient, "requires_grad") else gradient)
    if gradient.shape != tensor.shape:
        raise RuntimeError(
            f"Mismatch in shape: grad_output[0] has a shape of {gradient.shape} and "
            f"output[0] has a shape of {tensor.shape}."
        )
    return gradient.astype(tensor.dtype, copy=False)


def backward(tensor, gradient=None, retain_graph=False):
    """Accumulate d(tensor)/d(leaf) into every leaf's ``.grad`` (see ``Tensor.backward``)."""
    seed = _seed(tensor, gradient)
    root = tensor._node
    if root is None:
        _accumulate(tensor, seed)
        return
    consumers = _count_consumers(root)
    pending = {root: seed}
    ready = [root]
    # Gradients may legitimately be inf/nan (log at 0); PyTorch does not warn either.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while ready:
            node = ready.pop()
            g = pending.pop(node, None)
            retained = getattr(node, "retained", None)
            if retained is not None and retained() is not None and g is not None:
                _accumulate(retained(), g)
            cotangents = node.apply(g) if g is not None else (None,) * len(node.parents)
            for parent, value in zip(node.parents, cotangents):
                if isinstance(parent, Node):
                    if value is not None:
                        previous = pending.get(parent)
                        pending[parent] = value if previous is None else previous + value
                    consumers[parent] -= 1
                    if consumers[parent] == 0:
                        ready.append(parent)
                elif parent is not None and value is not None:
                    _accumulate(parent, value)
            if not retain_graph:
                node.release()


class Cotangents(dict):
    """Cotangents of some outputs of one compiled call, by output slot; they add up slot
    by slot as the backward pass reaches each output."""

    def __add__(self, other):
        merged = Cotangents(self)
        for slot, value in other.items():
            merged[slot] = value if slot not in merged else merged[slot] + value
        return merged


class OutputNode(Node):
    """Output ``slot`` of a compiled call: passes its cotangent on to the call's node."""

    __slots__ = ("slot",)

    def __init__(self, call, slot):
        self.parents = (call,)
        self.slot = slot

    @property
    def name(self):
        return f"{self.parents[0].name}[{self.slot}]"

    def apply(self, g):
        return (Cotangents({self.slot: g}),)


class CompiledNode(Node):
    """A compiled call on the tape: its backward is a compiled program that takes the
    forward's inputs, the residuals the forward saved, and the outputs' cotangents."""

    __slots__ = ("backward", "inputs", "residuals", "output_avals", "function",
                 "saved_versions")

    def __init__(self, backward, inputs, residuals, output_avals, parents, saved_versions,
                 function):
        self.backward = backward
        self.inputs = inputs
        self.residuals = residuals
        self.output_avals = output_avals  # (shape, dtype) of each differentiable output
        self.parents = parents
        self.saved_versions = saved_versions
        self.function = function

    @property
    def name(self):
        return f"compiled {self.function}"

    def apply(self, cotangents):
        if self.inputs is None:
            raise RuntimeError(_FREED_MESSAGE)
        _check_saved_versions(self.saved_versions, self.name)
        seeds = [
            np.asarray(cotangents[slot], dtype=dtype) if slot in cotangents
            else np.zeros(shape, dtype)
            for slot, (shape, dtype) in enumerate(self.output_avals)
        ]
        return self.backward(*self.inputs, *self.residuals, *seeds)

    def release(self):
        self.inputs = self.residuals = None
