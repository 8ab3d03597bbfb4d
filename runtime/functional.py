"""``grad`` and ``value_and_grad``: gradients of a scalar function of NumPy inputs.

The function runs on Tensors with the tape; NumPy arrays come back. Arguments may be
arrays or pytrees (tuples, lists, dicts) of arrays; the gradient has the same structure.

>>> import numpy as np
>>> grad(lambda x: np.sum(x * x))(np.array([1.0, 2.0]))
array([2., 4.])
"""

from __future__ import annotations

import functools

import numpy as np

from tracejit.tracer import pytree
from tracejit.tracer.eager_rewrite import run_eagerly

from .autograd import enable_grad
from .tensor import Tensor, tensor


def _leaf_for(value):
    if value is None:  # an empty subtree, as in JAX: no leaf, and None for its gradient
        return None
    data = value.data if isinstance(value, Tensor) else value
    array = np.asarray(data)
    if array.dtype.kind != "f":
        raise TypeError(
            f"grad: differentiated arguments must be floating point, got {array.dtype}; "
            "cast with .astype(np.float64)"
        )
    return tensor(array, requires_grad=True)


def value_and_grad(function, argnums=0, has_aux=False):
    """A function returning ``(value, gradient)`` (``((value, aux), gradient)`` with
    ``has_aux``); ``argnums`` may be an int or a tuple of ints (then a tuple of gradients)."""
    single = isinstance(argnums, int)
    positions = (argnums,) if single else tuple(argnums)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if any(getattr(type(leaf), "__tracejit_priority__", 0) >= 2
               for leaf in pytree.flatten((args, kwargs))[0]):
            # Under jit: forward and backward are recorded into the same trace.
            from tracejit.tracer.autodiff import value_and_grad_traced

            return value_and_grad_traced(function, args, kwargs, argnums, has_aux)
        args = list(args)
        trees = {}
        for position in positions:
            leaves, treedef = pytree.flatten(args[position])
            leaves = [_leaf_for(leaf) for leaf in leaves]
            trees[position] = (leaves, treedef)
        with enable_grad():
            for position, (leaves, treedef) in trees.items():
                # The function sees copies with history, not the leaves: NumPy's in-place
                # writes into an argument (x += 1, x[1:3] *= 2), which a leaf refuses as
                # in PyTorch, rebind them and the gradient still reaches the leaf.
                args[position] = pytree.unflatten(treedef, [
                    None if leaf is None else leaf * 1.0 for leaf in leaves])
            # Through the rewritten source: buffers filled in place (h[:] = x * 2) keep
            # their gradients instead of losing them to a plain ndarray.
            result = run_eagerly(function, args, kwargs)
        value, aux = result if has_aux else (result, None)
        if not isinstance(value, Tensor) or value.size != 1:
            raise TypeError(
                f"grad requires {function.__name__} to return a scalar that depends on the "
                f"differentiated arguments, got {type(value).__name__} "
                f"of shape {np.shape(value)}"
            )
        if value.requires_grad:
            value.backward()
        gradients = tuple(
            pytree.unflatten(
                treedef,
                [None if leaf is None else leaf.grad.data if leaf.grad is not None
                 else np.zeros_like(leaf.data) for leaf in leaves],
            )
            for leaves, treedef in (trees[position] for position in positions)
        )
        plain_value = value.data[()]
        output = (plain_value, _plain(aux)) if has_aux else plain_value
        return output, gradients[0] if single else gradients

    return wrapper


def grad(function, argnums=0, has_aux=False):
    """The gradient of a scalar ``function`` with respect to argument ``argnums``."""
    evaluate = value_and_grad(function, argnums, has_aux)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        (value, gradient) = evaluate(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient

    return wrapper


def _plain(tree):
    # A 0-d Tensor as the NumPy scalar NumPy's reductions give (``(p == y).mean()`` is a
    # np.float64, as jit(value_and_grad(f)) returns it), like the value; Tensors hold 0-d
    # arrays.
    leaves, treedef = pytree.flatten(tree)
    return pytree.unflatten(treedef, [
        (leaf.data[()] if leaf.ndim == 0 else leaf.data) if isinstance(leaf, Tensor) else leaf
        for leaf in leaves
    ])
